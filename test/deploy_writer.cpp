// The writer of the deployment test (issue #16): a model in eager style, wrapped in kiln::function and saved with
// kiln::save; its results computed eagerly on inputs of two batch sizes are saved beside it for the reader
// (test/deploy_reader.cpp), which has none of this code. A graph-mode model deploys the same way: the reference
// model (examples/mlp_graph.hpp) trained by a kiln::session, traced with the session's parameters
// (kiln::trace(session, prediction)) and saved.
//   io_tool deploy-write DIR   (test/io_tool.cpp) writes DIR/model.kfn, DIR/graph_model.kfn and
//                              DIR/reference.safetensors
#include <kiln/io.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>

#include "../examples/mlp_graph.hpp"

namespace {

// The largest difference of two float tensors relative to max(1, |b|).
double difference(const kiln::tensor& a, const kiln::tensor& b) {
    const kiln::tensor x = a.contiguous().to(kiln::float64), y = b.contiguous().to(kiln::float64);
    if (!(x.shape() == y.shape())) return INFINITY;
    double worst = 0;
    for (std::ptrdiff_t i = 0; i < x.numel(); ++i)
        worst = std::max(worst, std::abs(x.data<double>()[i] - y.data<double>()[i]) / std::max(1.0, std::abs(y.data<double>()[i])));
    return worst;
}

// A (rows, columns) result of session::run (an xtensor) as a kiln::tensor.
template <class X>
kiln::tensor from_run(const X& r) {
    kiln::tensor t(kiln::float32, kiln::dims{static_cast<std::ptrdiff_t>(r.shape()[0]), static_cast<std::ptrdiff_t>(r.shape()[1])});
    std::copy(r.begin(), r.end(), t.data<float>());
    return t;
}

// The graph-mode model: trained for a few steps by a session, traced with its parameters and saved; the session's
// own predictions (kiln::session::run) are the reference. Training on after the trace changes what the traced
// function computes without a new trace (its parameters are variables over the session's storage).
int write_graph_model(const std::string& dir, kiln::generator& g, std::map<std::string, kiln::tensor>& ref) {
    using namespace mlp::graph_model;
    kiln::session s(5);
    const kiln::tensor xb = kiln::randn({32, mlp::features}, kiln::float32, g), yb = kiln::randn({32, 1}, kiln::float32, g);
    for (int i = 0; i < 3; ++i) s.run(step, x = xb, y = yb);
    auto predict = kiln::trace(s, prediction);
    int failures = 0;
    auto expect = [&](bool ok, const std::string& what) {
        std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
        failures += !ok;
    };
    const kiln::tensor probe = kiln::randn({7, mlp::features}, kiln::float32, g);
    const kiln::tensor before = predict(probe);
    expect(difference(before, from_run(s.run(prediction, x = probe))) < 1e-5, "kiln::trace(session, prediction) computes what session::run computes");
    kiln::save(predict, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features})}, dir + "/graph_model.kfn");
    for (std::ptrdiff_t n : {1, 9}) {
        const kiln::tensor xs = kiln::randn({n, mlp::features}, kiln::float32, g);
        ref.emplace("graph/x/" + std::to_string(n), xs);
        ref.emplace("graph/prediction/" + std::to_string(n), from_run(s.run(prediction, x = xs)));
    }
    for (int i = 0; i < 2; ++i) s.run(step, x = xb, y = yb);
    const kiln::tensor after = predict(probe);
    expect(difference(after, before) > 1e-4 && difference(after, from_run(s.run(prediction, x = probe))) < 1e-5 && predict.trace_count() == 1,
           "after two more steps the traced function computes the session's new values, with its one trace");
    return failures;
}

}  // namespace

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
        if (write_graph_model(dir, g, ref)) return 1;
        kiln::save_safetensors(dir + "/reference.safetensors", ref);
        std::printf("deploy_writer: wrote %s/model.kfn, %s/graph_model.kfn and their reference results\n", dir.c_str(), dir.c_str());
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "deploy_writer: %s\n", e.what());
        return 1;
    }
    return 0;
}
