// The reader of the deployment test (issue #16): it loads DIR/model.kfn, written by test/deploy_writer.cpp, with
// none of the model's code, runs it on the reference inputs of two batch sizes (one trace, dynamic batch) and
// requires the results the writer computed eagerly, bit for bit; and DIR/graph_model.kfn, a graph-mode model saved
// with its session's parameters, whose results must be the session's (kiln::session::run) to 1e-5 relative.
//   deploy_reader DIR
#include <kiln/io/function_file.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

int failures = 0;
void expect(bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    if (!ok) ++failures;
}

bool same_bits(const kiln::tensor& a, const kiln::tensor& b) {
    const kiln::tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() &&
           std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<std::size_t>(ca.numel()) * ca.itemsize()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: deploy_reader DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    try {
        const kiln::loaded_function f = kiln::load(dir + "/model.kfn");
        const kiln::tensor_file ref = kiln::load_safetensors(dir + "/reference.safetensors");
        expect(f.name() == "deploy_model", "the function's name is kept");
        expect(f.signature().size() == 2 && f.signature()[0].shape == std::vector<std::ptrdiff_t>{kiln::dyn, 10} &&
                   f.signature()[1].shape == std::vector<std::ptrdiff_t>{kiln::dyn, 3},
               "the signature keeps its dynamic batch dimension");
        for (const char* b : {"5", "13"}) {
            const std::vector<kiln::tensor> out = f(ref.at(std::string("x/") + b), ref.at(std::string("mask/") + b));
            expect(out.size() == 3, std::string("batch ") + b + ": three results");
            if (out.size() != 3) continue;
            expect(same_bits(out[0], ref.at(std::string("probs/") + b)), std::string("batch ") + b + ": probabilities bit for bit");
            expect(same_bits(out[1], ref.at(std::string("class/") + b)), std::string("batch ") + b + ": classes (int64) bit for bit");
            expect(same_bits(out[2], ref.at(std::string("mixed/") + b)), std::string("batch ") + b + ": the float64 result bit for bit");
        }
        // A call against the signature is refused with the spec named.
        bool refused = false;
        try {
            (void)f(ref.at("x/5"), ref.at("mask/13"));
        } catch (const kiln::shape_error& e) {
            refused = std::string(e.what()).find("must be equal") != std::string::npos;
        }
        expect(refused, "batches of different extents in one call are refused");
        try {
            (void)f(ref.at("x/5").to(kiln::float64), ref.at("mask/5"));
        } catch (const kiln::dtype_error& e) {
            expect(std::string(e.what()).find("argument 0 is float64, but its spec is (?, 10) float32") != std::string::npos,
                   "a wrong dtype names the argument and its spec");
        }
        // The graph-mode model: its one argument is the input; its weights are in the file.
        const kiln::loaded_function gm = kiln::load(dir + "/graph_model.kfn");
        expect(gm.signature().size() == 1 && gm.signature()[0].shape == std::vector<std::ptrdiff_t>{kiln::dyn, 10},
               "the graph-mode model takes its input (?, 10) and nothing else");
        for (const char* b : {"1", "9"}) {
            const std::vector<kiln::tensor> out = gm(ref.at(std::string("graph/x/") + b));
            const kiln::tensor want = ref.at(std::string("graph/prediction/") + b).contiguous();
            bool ok = out.size() == 1 && out[0].shape() == want.shape() && out[0].dtype() == want.dtype();
            const kiln::tensor got = ok ? out[0].contiguous() : want;
            for (std::ptrdiff_t i = 0; ok && i < want.numel(); ++i) {
                const double x = got.data<float>()[i], y = want.data<float>()[i];
                ok = std::fabs(x - y) <= 1e-5 * std::fmax(1.0, std::fabs(y));
            }
            expect(ok, std::string("graph-mode model, batch ") + b + ": the session's predictions to 1e-5");
        }
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "deploy_reader: %s\n", e.what());
        return 1;
    }
    return failures ? 1 : 0;
}
