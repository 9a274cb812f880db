// The C++ side of the ONNX test (test/onnx_check.py, against the onnx package's checker and ONNX Runtime):
//   io_tool onnx export DIR   (test/io_tool.cpp) writes DIR/<model>.onnx for each model below, and DIR/<model>.safetensors with the
//                          inputs it was run on ("input_<k>/<case>") and kiln's results ("output_<k>/<case>")
//   io_tool onnx import DIR   loads every DIR/<model>.onnx with kiln::load_onnx (kiln's own exports, and models the test
//                          writes with the onnx package's helpers), runs it on the inputs of DIR/<model>.safetensors
//                          and compares with the outputs there (kiln's, or ONNX Runtime's): 1e-5 relative on floats,
//                          exact otherwise; a model named refused_<name>.onnx must be refused with a kiln::file_error
//                          that contains the first line of DIR/refused_<name>.refusal
// The models: the reference model (Dense(64, relu), Dense(1)), the chain relu(x*y + 0.5*x - y)*2 + y, a classifier
// with softmax, one that uses every kind of op the exporter maps (views with a dynamic batch, reductions,
// argmax, concat, casts, where, comparisons, activations without ONNX operators), and one of the ops written as
// compositions of ONNX operators, on special values too (zeros of both signs, infinities, NaN), and one of C++ bool
// numbers as operands.
#include <kiln/io.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"

namespace {

int models_written = 0;

template <int Arity, class F>
void write(const std::string& dir, const std::string& name, F& fn, const std::vector<kiln::spec>& sig,
           const std::vector<std::vector<kiln::tensor>>& cases) {
    ++models_written;
    F& callable = fn;
    kiln::export_onnx(fn, sig, dir + "/" + name + ".onnx");
    std::map<std::string, kiln::tensor> ref;
    for (std::size_t c = 0; c < cases.size(); ++c) {
        std::vector<kiln::tensor> out;
        const auto& in = cases[c];
        if constexpr (Arity == 1) {
            auto r = callable(in[0]);
            if constexpr (std::is_same_v<decltype(r), kiln::tensor>) out = {r};
            else out = std::apply([](auto&... t) { return std::vector<kiln::tensor>{t...}; }, r);
        } else {
            auto r = callable(in[0], in[1]);
            if constexpr (std::is_same_v<decltype(r), kiln::tensor>) out = {r};
            else out = std::apply([](auto&... t) { return std::vector<kiln::tensor>{t...}; }, r);
        }
        for (std::size_t k = 0; k < in.size(); ++k) ref.emplace("input_" + std::to_string(k) + "/" + std::to_string(c), in[k]);
        for (std::size_t k = 0; k < out.size(); ++k) ref.emplace("output_" + std::to_string(k) + "/" + std::to_string(c), out[k]);
    }
    kiln::save_safetensors(dir + "/" + name + ".safetensors", ref);
}

}  // namespace

int import_models(const std::string& dir) {
    int failures = 0, compared = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        if (e.path().extension() != ".onnx") continue;
        const std::string base = e.path().string().substr(0, e.path().string().size() - 5);
        const std::string name = e.path().stem().string();
        if (name.rfind("refused_", 0) == 0) {
            // A model kiln must refuse: a kiln::file_error whose message holds the text of <model>.refusal.
            std::ifstream in(base + ".refusal");
            std::string want;
            std::getline(in, want);
            std::string got = "(no refusal)";
            try {
                (void)kiln::load_onnx(e.path().string());
            } catch (const kiln::file_error& err) {
                got = err.what();
            } catch (const std::exception& err) {
                got = std::string("(another exception) ") + err.what();
            }
            const bool ok = !want.empty() && got.find(want) != std::string::npos && got.find("(another") == std::string::npos;
            ++compared;
            failures += !ok;
            std::printf("%s: %s is refused: %s%s\n", ok ? "ok" : "FAILED", name.c_str(), got.c_str(),
                        ok ? "" : (" (expected a kiln::file_error saying '" + want + "')").c_str());
            continue;
        }
        try {
            const kiln::loaded_function f = kiln::load_onnx(e.path().string());
            // <model>.outputs, where it exists: the output signature kiln reads from the model.
            if (std::ifstream in(base + ".outputs"); in) {
                std::string want;
                std::getline(in, want);
                const std::string got = kiln::to_string(f.output_signature());
                ++compared;
                failures += got != want;
                std::printf("%s: %s's output signature is %s%s\n", got == want ? "ok" : "FAILED", name.c_str(), got.c_str(),
                            got == want ? "" : (" (expected " + want + ")").c_str());
            }
            if (!std::filesystem::exists(base + ".safetensors")) continue;  // (a model for its signature alone)
            const kiln::tensor_file ref = kiln::load_safetensors(base + ".safetensors");
            for (int c = 0; ref.contains("input_0/" + std::to_string(c)); ++c) {
                std::vector<kiln::tensor> in;
                for (int k = 0; ref.contains("input_" + std::to_string(k) + "/" + std::to_string(c)); ++k)
                    in.push_back(ref.at("input_" + std::to_string(k) + "/" + std::to_string(c)));
                const std::vector<kiln::tensor> out = f(in);
                for (std::size_t k = 0; k < out.size(); ++k) {
                    const kiln::tensor& want = ref.at("output_" + std::to_string(k) + "/" + std::to_string(c));
                    bool ok = out[k].dtype() == want.dtype() && out[k].shape() == want.shape();
                    double worst = 0;
                    std::string first_bad;
                    if (ok) {
                        const kiln::tensor a = out[k].contiguous().to(kiln::float64), b = want.contiguous().to(kiln::float64);
                        for (std::ptrdiff_t i = 0; i < a.numel(); ++i) {
                            const double x = a.data<double>()[i], y = b.data<double>()[i];
                            if ((std::isnan(x) && std::isnan(y)) || x == y) continue;  // (infinities of one sign too)
                            const double d = std::abs(x - y), tol = kiln::detail::is_floating(want.dtype()) ? 1e-5 * std::max(1.0, std::abs(y)) : 0.0;
                            if (!(d <= tol)) {
                                if (first_bad.empty())
                                    first_bad = " (element " + std::to_string(i) + ": " + kiln::detail::number_text(x) + ", expected " +
                                                kiln::detail::number_text(y) + ")";
                                ok = false;
                            } else {
                                worst = std::max(worst, d / std::max(1.0, std::abs(y)));
                            }
                        }
                    }
                    ++compared;
                    std::printf("%s: %s case %d output %zu: kiln::load_onnx gives %s %s (largest relative difference %.2e)%s\n",
                                ok ? "ok" : "FAILED", name.c_str(), c, k, kiln::to_string(out[k].shape()).c_str(),
                                std::string(kiln::name(out[k].dtype())).c_str(), worst, first_bad.c_str());
                    failures += !ok;
                }
            }
        } catch (const kiln::error& err) {
            std::printf("FAILED: %s: %s\n", name.c_str(), err.what());
            ++failures;
        }
    }
    std::printf("onnx_tool: %d outputs compared, %d failures\n", compared, failures);
    return failures || compared == 0 ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && std::string(argv[1]) == "import") return import_models(argv[2]);
    if (argc != 3 || std::string(argv[1]) != "export") {
        std::fprintf(stderr, "usage: onnx_tool export|import DIR\n");
        return 2;
    }
    const std::string dir = argv[2];
    std::filesystem::create_directories(dir);
    try {
        kiln::generator g(3);
        // The reference model.
        mlp::eager_model m(g);
        auto reference = kiln::function([&](const kiln::tensor& x) { return m(x); }, {.name = "reference"});
        write<1>(dir, "reference", reference, {kiln::spec(kiln::float32, {kiln::dyn, 10})},
              {{kiln::randn({32, 10}, kiln::float32, g)}, {kiln::randn({1, 10}, kiln::float32, g)}});
        // The chain.
        auto chain = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5 * x - y) * 2 + y; },
                                    {.name = "chain"});
        write<2>(dir, "chain", chain, {kiln::spec(kiln::float32, {kiln::dyn}), kiln::spec(kiln::float32, {kiln::dyn})},
              {{kiln::randn({1000}, kiln::float32, g), kiln::randn({1000}, kiln::float32, g)}});
        // A classifier.
        kiln::nn::dense c1(8, 16, kiln::nn::tanh, g), c2(16, 4, kiln::nn::identity, g);
        auto classifier = kiln::function([&](const kiln::tensor& x) {
            const kiln::tensor p = kiln::nn::softmax(c2(c1(x)), -1);
            return std::make_tuple(p, kiln::argmax(p, 1), kiln::nn::log_softmax(c2(c1(x)), 1));
        }, {.name = "classifier"});
        write<1>(dir, "classifier", classifier, {kiln::spec(kiln::float32, {kiln::dyn, 8})},
              {{kiln::randn({6, 8}, kiln::float32, g)}, {kiln::randn({3, 8}, kiln::float32, g)}});
        // Every kind of op.
        const kiln::tensor scale = kiln::from_values<float>({0.5f, 2.0f, -1.0f}, {3});
        auto many = kiln::function([&](const kiln::tensor& x, const kiln::tensor& i) {
            const kiln::tensor h = kiln::matmul(x, kiln::ones({4, 3}) * scale) + 0.25;          // (?, 3)
            const kiln::tensor a = kiln::where(h > 0.0f, kiln::silu(h), kiln::gelu(h) - 1);
            const kiln::tensor b = kiln::leaky_relu(a, 0.1) + kiln::clamp(h, -0.5, 0.5) * kiln::elu(h);
            const kiln::tensor t = b.transpose(0, 1).reshape({-1});                              // (3 * ?)
            const kiln::tensor views = kiln::concat({t.slice(0, 1, 5), kiln::full({2}, 3.0, kiln::float32),
                                                     kiln::sum(b, {0}, true).broadcast_to({2, 3}).select(0, 1)}, 0);
            const kiln::tensor ints = (i * 3 - 1) / 2 + kiln::max(i, {1}).unsqueeze(1).to(kiln::float32);  // int32 -> float32
            const kiln::tensor stats = kiln::concat({kiln::mean(b, {0}), kiln::prod(kiln::abs(b) + 1, {0}),
                                                     kiln::min(b, {0}) - kiln::sum(kiln::sqrt(kiln::exp(-kiln::square(b))), {0})}, 0);
            return std::make_tuple(views, ints, stats.to(kiln::float64) / 3, kiln::argmin(b, 0),
                                   kiln::logical_and(h > 0.1f, h < 0.9f) | kiln::isnan(h));
        }, {.name = "many_ops"});
        write<2>(dir, "many_ops", many, {kiln::spec(kiln::float32, {kiln::dyn, 4}), kiln::spec(kiln::int32, {kiln::dyn, 5})},
              {{kiln::randn({2, 4}, kiln::float32, g), kiln::uniform({2, 5}, -5, 5, kiln::float32, g).to(kiln::int32)},
               {kiln::randn({7, 4}, kiln::float32, g), kiln::uniform({7, 5}, -5, 5, kiln::float32, g).to(kiln::int32)}});
        // The layout and indexing ops: Tile, Pad, Einsum, Gather, GatherElements, ScatterElements (scatter_add, two
        // sources added at one position of each row), and repeat as Tile and Reshape.
        auto layout = kiln::function([&](const kiln::tensor& x, const kiln::tensor& i) {
            const kiln::tensor picked = kiln::index_select(x, 1, i);                               // (?, 3)
            const kiln::tensor top = kiln::argmax(x, 1, true);                                   // (?, 1) int64
            return std::make_tuple(kiln::tile(x, {2, 1, 2}), kiln::repeat(x, 2, 1), kiln::pad(x, {{1, 0}, {0, 2}}, 0.5),
                                   kiln::einsum("ij,kj->ik", x, x), picked * 2, kiln::take_along_axis(x, top, 1),
                                   kiln::scatter_add(x, 1, kiln::concat({top, top}, 1), x.slice(1, 1, 3) * 3));
        }, {.name = "layout_ops"});
        write<2>(dir, "layout_ops", layout, {kiln::spec(kiln::float32, {kiln::dyn, 4}), kiln::spec(kiln::int64, {3})},
              {{kiln::randn({3, 4}, kiln::float32, g), kiln::from_values<std::int64_t>({3, -4, 1}, {3})},
               {kiln::randn({5, 4}, kiln::float32, g), kiln::from_values<std::int64_t>({0, 0, -1}, {3})}});
        // Ops ONNX has no operator for, written as compositions (special values included), and the patterns the
        // exporter writes as one operator: Gemm with a transposed weight, Squeeze.
        kiln::variable wt(kiln::randn({3, 4}, kiln::float32, g));  // (a variable: a captured tensor's transpose folds)
        const kiln::tensor bias = kiln::randn({3}, kiln::float32, g);
        auto composites = kiln::function([&](const kiln::tensor& x, const kiln::tensor& i) {
            const kiln::tensor y = x * 3;
            const kiln::tensor dense = kiln::matmul(x, kiln::tensor(wt).transpose(0, 1)) + bias;                   // (?, 3)
            const kiln::tensor floats = kiln::concat({kiln::trunc(y), kiln::log1p(kiln::abs(x) - 0.5), kiln::expm1(x),
                                                      kiln::atan2(y, x - 0.25), kiln::floor_divide(y, x + 0.5),
                                                      kiln::remainder(y, x - 0.75)}, 1);
            const kiln::tensor ints = kiln::concat({kiln::floor_divide(i * 7, i - 2), kiln::remainder(i * 7, i - 2)}, 1);
            return std::make_tuple(dense, floats, ints, x.unsqueeze(1).squeeze(1) * 2);
        }, {.name = "composites"});
        const kiln::tensor specials = kiln::from_values<float>(
            {0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, NAN, 1e-7f, -1e-7f, 2.5f, -2.5f, 100.0f}, {3, 4});
        write<2>(dir, "composites", composites, {kiln::spec(kiln::float32, {kiln::dyn, 4}), kiln::spec(kiln::int32, {kiln::dyn, 5})},
              {{kiln::randn({5, 4}, kiln::float32, g), kiln::uniform({5, 5}, -9, 9, kiln::float32, g).to(kiln::int32)},
               {specials, kiln::from_values<std::int32_t>({0, 1, 2, 3, -1, -300000000, 5, -7, 2, 2, 9, -9, 0, 4, -4}, {3, 5})}});
        // C++ bool numbers as operands: each takes its tensors' dtype (x * true is float32, i + true int32).
        auto bools = kiln::function([&](const kiln::tensor& x, const kiln::tensor& i) {
            const kiln::tensor m = x > 0.0f;
            return std::make_tuple(kiln::logical_and(m, true), kiln::where(m, m, false), x * true + x, i + true,
                                   kiln::where(m, i, true), kiln::where(true, x, 0.5), kiln::equal(m, false));
        }, {.name = "bool_numbers"});
        write<2>(dir, "bool_numbers", bools, {kiln::spec(kiln::float32, {kiln::dyn, 3}), kiln::spec(kiln::int32, {kiln::dyn, 3})},
                 {{kiln::randn({4, 3}, kiln::float32, g), kiln::uniform({4, 3}, -9, 9, kiln::float32, g).to(kiln::int32)}});
        // The reference model in graph mode, trained two steps by a session and traced with its parameters.
        {
            using namespace mlp::graph_model;
            kiln::session s(9);
            const kiln::tensor xb = kiln::randn({32, mlp::features}, kiln::float32, g), yb = kiln::randn({32, 1}, kiln::float32, g);
            for (int i = 0; i < 2; ++i) s.run(step, x = xb, y = yb);
            auto predict = kiln::trace(s, prediction);
            write<1>(dir, "graph_mode", predict, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features})},
                     {{kiln::randn({4, mlp::features}, kiln::float32, g)}});
        }
        // A small convolutional network (nn::conv2d, the pools and flatten, written as the vocabulary's ops).
        kiln::nn::sequential cnn(kiln::nn::conv2d_layer(2, 4, {3, 3}, {.stride = {1, 2}, .padding = {1, 1}}, kiln::nn::relu, g),
                                 kiln::nn::max_pool2d_layer({2, 2}),
                                 kiln::nn::avg_pool2d_layer({2, 2}, {.padding = {1, 1}, .count_include_pad = false}),
                                 kiln::nn::flatten_layer(), kiln::nn::dense(4 * 3 * 2, 3, kiln::nn::identity, g));
        auto conv = kiln::function([&](const kiln::tensor& x) { return cnn(x); }, {.name = "cnn"});
        write<1>(dir, "cnn", conv, {kiln::spec(kiln::float32, {kiln::dyn, 2, 8, 8})},
                 {{kiln::randn({3, 2, 8, 8}, kiln::float32, g)}, {kiln::randn({1, 2, 8, 8}, kiln::float32, g)}});
        // The functional forms: a convolution with groups, a dilation and no bias; a max pool with ceil_mode that
        // ONNX's formula agrees with (MaxPool) and one whose last window would start in the padding (written as
        // its parts); average pooling counting the padding.
        const kiln::tensor w2 = kiln::randn({6, 2, 3, 3}, kiln::float32, g);
        auto conv2 = kiln::function([&](const kiln::tensor& x) {
            const kiln::tensor y = kiln::nn::conv2d(x, w2, kiln::tensor(), {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .groups = 2});
            const kiln::tensor p = kiln::nn::max_pool2d(y, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true});
            const kiln::tensor q = kiln::nn::max_pool2d(p, {2, 2}, {.stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true});
            return kiln::nn::avg_pool2d(q, {3, 3}, {.stride = {1, 1}, .padding = {1, 1}});
        }, {.name = "cnn2"});
        write<1>(dir, "cnn2", conv2, {kiln::spec(kiln::float32, {kiln::dyn, 4, 9, 9})},
                 {{kiln::randn({2, 4, 9, 9}, kiln::float32, g)}, {kiln::randn({1, 4, 9, 9}, kiln::float32, g)}});
        // float64 convolution and pooling (ONNX Runtime's Conv and MaxPool take float32 here): written as their
        // parts, the windows as Pad, strided Slices and a Concat.
        const kiln::tensor w64 = kiln::randn({3, 2, 3, 2}, kiln::float64, g);
        auto conv64 = kiln::function([&](const kiln::tensor& x) {
            const kiln::tensor y = kiln::nn::conv2d(x, w64, kiln::tensor(), {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}});
            return kiln::nn::max_pool2d(kiln::relu(y), {2, 2}, {.padding = {1, 0}});
        }, {.name = "cnn64"});
        write<1>(dir, "cnn64", conv64, {kiln::spec(kiln::float64, {kiln::dyn, 2, 7, 6})},
                 {{kiln::randn({2, 2, 7, 6}, kiln::float64, g)}, {kiln::randn({1, 2, 7, 6}, kiln::float64, g)}});
        // A decoder: transposed convolutions (a layer with its bias, stride 2 and output_padding; a functional one
        // with groups, a dilation and no bias), each one ConvTranspose.
        kiln::nn::conv_transpose2d_layer up(4, 2, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 0}}, kiln::nn::relu, g);
        const kiln::tensor w_up = kiln::randn({2, 2, 2, 3}, kiln::float32, g);
        auto decode = kiln::function([&](const kiln::tensor& x) {
            return kiln::nn::conv_transpose2d(up(x), w_up, kiln::tensor(), {.stride = {1, 2}, .padding = {0, 1}, .dilation = {2, 1}, .groups = 2});
        }, {.name = "decoder"});
        write<1>(dir, "decoder", decode, {kiln::spec(kiln::float32, {kiln::dyn, 4, 3, 5})},
                 {{kiln::randn({2, 4, 3, 5}, kiln::float32, g)}, {kiln::randn({1, 4, 3, 5}, kiln::float32, g)}});
        // Group and RMS normalization, then bilinear and nearest resizing, with a dynamic batch (their parts: Reshape
        // from the input's Shape, ReduceMean, Sqrt, Div, Mul; Gather of the source rows).
        kiln::nn::group_norm_layer gnorm(2, 4);
        gnorm.w.assign(kiln::randn({4}, kiln::float32, g));
        gnorm.b.assign(kiln::randn({4}, kiln::float32, g));
        const kiln::tensor rms_w = kiln::randn({5}, kiln::float32, g);
        auto norms = kiln::function([&](const kiln::tensor& x) {
            const kiln::tensor y = kiln::nn::rms_norm(gnorm(x), {5}, rms_w);
            return std::make_tuple(y, kiln::nn::interpolate(y, {5, 8}, {.mode = kiln::nn::interpolation::bilinear}),
                                   kiln::nn::upsample(y, 2));
        }, {.name = "norms"});
        write<1>(dir, "norms", norms, {kiln::spec(kiln::float32, {kiln::dyn, 4, 3, 5})},
                 {{kiln::randn({2, 4, 3, 5}, kiln::float32, g)}, {kiln::randn({3, 4, 3, 5}, kiln::float32, g) * 3.0f}});
        // Recurrent layers: a 2-layer LSTM and a GRU over a sequence of 4 steps with a dynamic batch (their parts:
        // MatMul, Gather of a step, Slice of the gates, Sigmoid, Tanh, and the steps stacked).
        kiln::nn::lstm rnn1(3, 5, 2, g);
        kiln::nn::gru rnn2(5, 2, 1, g);
        auto recurrent = kiln::function([&](const kiln::tensor& x) {
            const kiln::nn::recurrent_result r = rnn1.run(x);
            return std::make_tuple(rnn2(r.output), r.h, r.c);
        }, {.name = "recurrent"});
        write<1>(dir, "recurrent", recurrent, {kiln::spec(kiln::float32, {kiln::dyn, 4, 3})},
                 {{kiln::randn({2, 4, 3}, kiln::float32, g)}, {kiln::randn({3, 4, 3}, kiln::float32, g)}});
        // Causal multi-head self-attention (its mask from CumSum of ones, a Where and the Softmax) with a batch and a
        // sequence length named in its spec: two dimension names in the file, each free in a call.
        kiln::nn::multi_head_attention attention(8, 2, true, g);
        auto attend = kiln::function([&](const kiln::tensor& x) { return kiln::relu(attention(x)); }, {.name = "attention"});
        write<1>(dir, "attention", attend, {kiln::spec(kiln::float32, {"batch", "length", 8})},
                 {{kiln::randn({2, 5, 8}, kiln::float32, g)}, {kiln::randn({3, 4, 8}, kiln::float32, g)}});
        // nn::embedding: int64 ids looked up (Gather, after the Where that keeps negative ids from counting from
        // the end), averaged per row, then a dense layer.
        kiln::nn::embedding words(7, 4, g);
        kiln::nn::dense head(4, 2, kiln::nn::identity, g);
        auto bag = kiln::function([&](const kiln::tensor& ids) { return head(kiln::mean(words(ids), {1})); }, {.name = "embedding"});
        write<1>(dir, "embedding", bag, {kiln::spec(kiln::int64, {kiln::dyn, 3})},
                 {{kiln::from_values<std::int64_t>({0, 6, 3, 3, 3, 1}, {2, 3})}, {kiln::from_values<std::int64_t>({5, 2, 0}, {1, 3})}});
        // nn::layer_norm: a layer with its weight and bias (LayerNormalization with Scale and B), the functional form
        // over two axes with a bias only (its Scale written as ones), and one with neither.
        kiln::nn::dense proj(6, 8, kiln::nn::identity, g);
        kiln::nn::layer_norm_layer norm({8});
        norm.w.assign(kiln::randn({8}, kiln::float32, g));
        norm.b.assign(kiln::randn({8}, kiln::float32, g));
        const kiln::tensor shift = kiln::randn({4, 8}, kiln::float32, g);
        auto normed = kiln::function([&](const kiln::tensor& x) {
            const kiln::tensor h = kiln::relu(norm(proj(x)));
            const kiln::tensor k = kiln::nn::layer_norm(h, {4, 8}, kiln::tensor(), shift, 1e-3);
            return kiln::nn::layer_norm(k * 3.0f, {8});
        }, {.name = "layer_norm"});
        write<1>(dir, "layer_norm", normed, {kiln::spec(kiln::float32, {kiln::dyn, 4, 6})},
                 {{kiln::randn({2, 4, 6}, kiln::float32, g)}, {kiln::randn({1, 4, 6}, kiln::float32, g)}});
        // nn::batch_norm_layer in evaluation, with running statistics that two training batches moved: a
        // BatchNormalization after a Conv; one without its affine part (scale and bias written as ones and zeros).
        kiln::nn::sequential bnet(kiln::nn::conv2d_layer(2, 3, {3, 3}, {.padding = {1, 1}}, kiln::nn::identity, g),
                                  kiln::nn::batch_norm_layer(3), kiln::nn::activation_layer(kiln::nn::relu),
                                  kiln::nn::batch_norm_layer(3, 1e-3, 0.3, false));
        bnet.layer<kiln::nn::batch_norm_layer>(1).w.assign(kiln::randn({3}, kiln::float32, g));
        for (int i = 0; i < 2; ++i) (void)bnet(kiln::randn({4, 2, 5, 5}, kiln::float32, g) * 2.0f + 1.0f);
        bnet.eval();
        auto bn_model = kiln::function([&](const kiln::tensor& x) { return bnet(x); }, {.name = "batch_norm"});
        write<1>(dir, "batch_norm", bn_model, {kiln::spec(kiln::float32, {kiln::dyn, 2, 5, 5})},
                 {{kiln::randn({2, 2, 5, 5}, kiln::float32, g)}, {kiln::randn({1, 2, 5, 5}, kiln::float32, g)}});
        std::printf("onnx_tool: wrote %d models and their kiln results in %s\n", models_written, dir.c_str());
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "onnx_tool: %s\n", e.what());
        return 1;
    }
    return 0;
}
