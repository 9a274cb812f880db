// Deployment (issue #16): the reference model (Dense(64, relu), Dense(1)) at inference, one thread, batch 1 and 32,
// as the traced function it was saved from, loaded from a kiln file (kiln::load), that loaded function wrapped in
// kiln::function with its signature (function mode's passes: fused groups, the buffer plan) and loaded from ONNX
// (kiln::load_onnx); the chain relu(x*y + 0.5*x - y)*2 + y at 2^20 elements the same ways; loading that chain and a
// softmax's reductions declared for (2^14, 2^14) inputs against (2, 2); and saving and loading the reference model and a 100 MB model against writing and reading the
// same number of bytes with std::fwrite and std::fread. A plain program: contenders interleave by hand, five rounds,
// the median per contender; bench/deploy_vs_onnxruntime.py runs it beside ONNX Runtime on the same ONNX file.
//   bench_deploy DIR     (writes DIR/reference.kfn, DIR/reference.onnx, DIR/big.kfn and DIR/bytes.bin)
#include <kiln/io.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../examples/mlp_eager.hpp"

namespace {

double seconds_per_call(const std::function<void()>& f, double budget = 0.2) {
    f();
    long n = 1;
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < n; ++i) f();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s > budget) return s / static_cast<double>(n);
        n *= 2;
    }
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: bench_deploy DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    kiln::set_num_threads(1);
    kiln::generator g(1);
    mlp::eager_model m(g);
    auto predict = kiln::function([&](const kiln::tensor& x) { return m(x); }, {.name = "reference"});
    const std::vector<kiln::spec> sig{kiln::spec(kiln::float32, {kiln::dyn, mlp::features})};
    kiln::save(predict, sig, dir + "/reference.kfn");
    kiln::export_onnx(predict, sig, dir + "/reference.onnx");
    const kiln::loaded_function from_kiln = kiln::load(dir + "/reference.kfn");
    const kiln::loaded_function from_onnx = kiln::load_onnx(dir + "/reference.onnx");
    auto wrapped = kiln::function(from_kiln, from_kiln.signature());

    std::printf("inference of the reference model, one thread (us per call, median of 5 interleaved rounds)\n");
    for (std::ptrdiff_t batch : {1, 32}) {
        const kiln::tensor x = kiln::randn({batch, mlp::features}, kiln::float32, g);
        std::vector<double> traced, kfn, wrap, onnx;
        for (int r = 0; r < 5; ++r) {
            traced.push_back(seconds_per_call([&] { (void)predict(x); }));
            kfn.push_back(seconds_per_call([&] { (void)from_kiln(x); }));
            wrap.push_back(seconds_per_call([&] { (void)wrapped(x); }));
            onnx.push_back(seconds_per_call([&] { (void)from_onnx(x); }));
        }
        std::printf("batch %2td: traced function %.2f us, kiln::load %.2f us, kiln::load in kiln::function %.2f us, "
                    "kiln::load_onnx %.2f us\n",
                    batch, median(traced) * 1e6, median(kfn) * 1e6, median(wrap) * 1e6, median(onnx) * 1e6);
    }
    {
        auto chain = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5f * x - y) * 2.0f + y; },
                                    {.name = "chain"});
        const std::vector<kiln::spec> two{kiln::spec(kiln::float32, {kiln::dyn}), kiln::spec(kiln::float32, {kiln::dyn})};
        kiln::save(chain, two, dir + "/chain.kfn");
        const kiln::loaded_function loaded = kiln::load(dir + "/chain.kfn");
        auto fused = kiln::function(loaded, loaded.signature());
        const kiln::tensor x = kiln::randn({1 << 20}, kiln::float32, g), y = kiln::randn({1 << 20}, kiln::float32, g);
        std::vector<double> traced, kfn, wrap;
        for (int r = 0; r < 5; ++r) {
            traced.push_back(seconds_per_call([&] { (void)chain(x, y); }));
            kfn.push_back(seconds_per_call([&] { (void)loaded(x, y); }));
            wrap.push_back(seconds_per_call([&] { (void)fused(x, y); }));
        }
        std::printf("chain at 2^20: traced function %.1f us, kiln::load %.1f us, kiln::load in kiln::function %.1f us\n",
                    median(traced) * 1e6, median(kfn) * 1e6, median(wrap) * 1e6);
    }

    {
        // What a loader's check costs against the shapes a file declares: a function saved for two (2^14, 2^14)
        // float32 inputs (1 GiB each) against the same saved for (2, 2) inputs, both loaders: the chain, and a
        // softmax's reductions (a max and a sum over rows). (The check runs each op on placeholders of the declared
        // shapes; an op that computed there would cost what the shapes say.)
        auto chain = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5f * x - y) * 2.0f + y; },
                                    {.name = "chain"});
        auto reductions = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) {
            return kiln::sum(kiln::exp(x - kiln::max(x, {1}, true)), {1}) + kiln::sum(y, {1});
        }, {.name = "reductions"});
        const auto loads = [&](auto& f, const char* what) {
            std::vector<double> t[2][2];
            for (int r = 0; r < 5; ++r)
                for (int large = 0; large < 2; ++large) {
                    const std::ptrdiff_t n = large ? std::ptrdiff_t{1} << 14 : 2;
                    const std::vector<kiln::spec> s{kiln::spec(kiln::float32, {n, n}), kiln::spec(kiln::float32, {n, n})};
                    const std::string kfn = dir + "/declared.kfn", onnx = dir + "/declared.onnx";
                    kiln::save(f, s, kfn);
                    kiln::export_onnx(f, s, onnx);
                    t[large][0].push_back(seconds_per_call([&] { (void)kiln::load(kfn); }, 0.05));
                    t[large][1].push_back(seconds_per_call([&] { (void)kiln::load_onnx(onnx); }, 0.05));
                }
            std::printf("loading %s declared for (2^14, 2^14) inputs against (2, 2): kiln::load %.3f ms against %.3f ms "
                        "(%.2fx), kiln::load_onnx %.3f ms against %.3f ms (%.2fx)\n", what,
                        median(t[1][0]) * 1e3, median(t[0][0]) * 1e3, median(t[1][0]) / median(t[0][0]), median(t[1][1]) * 1e3,
                        median(t[0][1]) * 1e3, median(t[1][1]) / median(t[0][1]));
        };
        loads(chain, "the chain");
        loads(reductions, "a softmax's reductions");
    }

    // Save and load against fwrite/fread of the same bytes.
    kiln::variable big1(kiln::randn({5120, 5120}, kiln::float32, g)), big2(kiln::randn({5120, 2}, kiln::float32, g));
    auto big = kiln::function([&](const kiln::tensor& x) { return kiln::matmul(kiln::relu(kiln::matmul(x, big1)), big2); }, {.name = "big"});
    const std::vector<kiln::spec> big_sig{kiln::spec(kiln::float32, {kiln::dyn, 5120})};
    std::printf("save and load (ms, median of 5 interleaved rounds)\n");
    for (const bool large : {false, true}) {
        const std::string path = dir + (large ? "/big.kfn" : "/reference.kfn");
        std::vector<double> save_t, load_t, write_t, read_t;
        std::uintmax_t bytes = 0;
        for (int r = 0; r < 5; ++r) {
            save_t.push_back(seconds_per_call([&] {
                if (large) kiln::save(big, big_sig, path);
                else kiln::save(predict, sig, path);
            }, large ? 0.5 : 0.1));
            load_t.push_back(seconds_per_call([&] { (void)kiln::load(path); }, large ? 0.5 : 0.1));
            bytes = std::filesystem::file_size(path);
            std::vector<char> buf(bytes, 1);
            const std::string raw = dir + "/bytes.bin";
            write_t.push_back(seconds_per_call([&] {
                std::FILE* f = std::fopen(raw.c_str(), "wb");
                std::fwrite(buf.data(), 1, buf.size(), f);
                std::fclose(f);
            }, large ? 0.5 : 0.1));
            read_t.push_back(seconds_per_call([&] {
                std::FILE* f = std::fopen(raw.c_str(), "rb");
                std::vector<char> in(bytes);
                if (std::fread(in.data(), 1, in.size(), f) != in.size()) std::abort();
                std::fclose(f);
            }, large ? 0.5 : 0.1));
        }
        std::printf("%s (%.1f MB): kiln::save %.3f ms (fwrite %.3f ms, %.2fx), kiln::load %.3f ms (fread %.3f ms, %.2fx)\n",
                    large ? "100 MB model" : "reference model", static_cast<double>(bytes) / 1e6, median(save_t) * 1e3,
                    median(write_t) * 1e3, median(save_t) / median(write_t), median(load_t) * 1e3, median(read_t) * 1e3,
                    median(load_t) / median(read_t));
    }
    return 0;
}
