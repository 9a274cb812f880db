// The writer of the deployment test (issue #16): a model in eager style, wrapped in kiln::function and saved with
// kiln::save; its results computed eagerly on inputs of two batch sizes are saved beside it for the reader
// (test/deploy_reader.cpp), which has none of this code.
//   io_tool deploy-write DIR   (test/io_tool.cpp) writes DIR/model.kfn and DIR/reference.safetensors
#include <kiln/io.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: deploy_writer DIR\n");
        return 2;
    }
    const std::string dir = argv[1];
    std::filesystem::create_directories(dir);
    try {
        kiln::generator g(11);
        kiln::nn::dense l1(10, 16, kiln::nn::relu, g), l2(16, 3, kiln::nn::identity, g);
        const kiln::tensor scale = kiln::from_values<float>({0.5f, 2.0f, -1.0f}, {3});  // captured: a constant
        // Inputs (?, 10) and a mask (?, 3) sharing the batch extent; three results of three dtypes. The ops cover
        // every kind the loader rebuilds: matmul, elementwise ops with tensors and numbers, where, reductions with
        // keepdims, argmax, views (transpose, reshape, slice, select, unsqueeze, broadcast_to), concat, casts, full.
        auto model = [&](const kiln::tensor& x, const kiln::tensor& mask) {
            const kiln::tensor h = l1(x);
            const kiln::tensor logits = l2(h) * scale + 0.25;
            const kiln::tensor probs = kiln::nn::softmax(kiln::where(mask > 0.5f, logits, -1e9f), -1);
            const kiln::tensor cls = kiln::argmax(probs, 1);
            const kiln::tensor t = h.transpose(0, 1).reshape({4, -1});                 // (4, 4 * batch)
            const kiln::tensor parts = kiln::concat({t.slice(1, 0, 2), kiln::full({4, 1}, 3.0, kiln::float32)}, 1);
            const kiln::tensor stat = kiln::sum(parts, {1}, true).broadcast_to({4, 2}) - parts.select(1, 0).unsqueeze(1);
            const kiln::tensor mixed = kiln::concat({stat.to(kiln::float64), kiln::mean(x, {0}).reshape({5, 2}).to(kiln::float64)}, 0);
            return std::make_tuple(probs, cls, kiln::maximum(mixed, 0.0) - 1);
        };
        auto fn = kiln::function(model, {.name = "deploy_model"});
        kiln::save(fn, {kiln::spec(kiln::float32, {kiln::dyn, 10}), kiln::spec(kiln::float32, {kiln::dyn, 3})},
                   dir + "/model.kfn");
        std::map<std::string, kiln::tensor> ref;
        for (std::ptrdiff_t n : {5, 13}) {
            const std::string b = std::to_string(n);
            const kiln::tensor x = kiln::randn({n, 10}, kiln::float32, g);
            const kiln::tensor mask = kiln::uniform({n, 3}, 0.0, 1.0, kiln::float32, g);
            const auto [p, c, m] = model(x, mask);  // eagerly: the values the loaded function must give
            ref.emplace("x/" + b, x);
            ref.emplace("mask/" + b, mask);
            ref.emplace("probs/" + b, p);
            ref.emplace("class/" + b, c);
            ref.emplace("mixed/" + b, m);
        }
        kiln::save_safetensors(dir + "/reference.safetensors", ref);
        std::printf("deploy_writer: wrote %s/model.kfn and the reference results of batches 5 and 13\n", dir.c_str());
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "deploy_writer: %s\n", e.what());
        return 1;
    }
    return 0;
}
