// One training step of a small convolutional network (conv 1->8 3x3 pad 1, relu, max pool 2, conv 8->16 3x3 pad 1,
// relu, max pool 2, flatten, dense 784->10, cross-entropy, Adam; batch 32 of 1 x 28 x 28) in eager mode and in
// function mode (the same step traced by kiln::function), and the forward pass alone in both. kiln's conv2d is written
// with the vocabulary's ops (nn/conv.hpp): this measures what tracing gives such a composite.
#include <benchmark/benchmark.h>

#include <kiln/kiln.hpp>

namespace {

struct cnn_problem {
    kiln::generator g{3};
    kiln::nn::sequential model{kiln::nn::conv2d_layer(1, 8, {3, 3}, {.padding = {1, 1}}, kiln::nn::relu, g),
                               kiln::nn::max_pool2d_layer({2, 2}),
                               kiln::nn::conv2d_layer(8, 16, {3, 3}, {.padding = {1, 1}}, kiln::nn::relu, g),
                               kiln::nn::max_pool2d_layer({2, 2}), kiln::nn::flatten_layer(),
                               kiln::nn::dense(16 * 7 * 7, 10, kiln::nn::identity, g)};
    kiln::optim::adam opt{model.parameters(), 1e-3};
    kiln::tensor x = kiln::randn({32, 1, 28, 28}, g);
    kiln::tensor y = kiln::uniform({32}, 0, 10, kiln::float32, g).to(kiln::int64);
    kiln::tensor step() {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::cross_entropy(model(x), y);
        opt.apply_gradients(tape.gradient(loss, model.parameters()), model.parameters());
        return loss;
    }
};

void eager_step(benchmark::State& state) {
    cnn_problem p;
    for (auto _ : state) benchmark::DoNotOptimize(p.step().item<float>());
}
BENCHMARK(eager_step)->Unit(benchmark::kMicrosecond);

void function_step(benchmark::State& state) {
    cnn_problem p;
    auto step = kiln::function([&](const kiln::tensor& xb, const kiln::tensor& yb) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::cross_entropy(p.model(xb), yb);
        p.opt.apply_gradients(tape.gradient(loss, p.model.parameters()), p.model.parameters());
        return loss;
    });
    for (auto _ : state) benchmark::DoNotOptimize(step(p.x, p.y).item<float>());
}
BENCHMARK(function_step)->Unit(benchmark::kMicrosecond);

void eager_forward_sum(benchmark::State& state) {
    cnn_problem p;
    for (auto _ : state) benchmark::DoNotOptimize(kiln::sum(p.model(p.x)).item<float>());
}
BENCHMARK(eager_forward_sum)->Unit(benchmark::kMicrosecond);

void function_forward_sum(benchmark::State& state) {
    cnn_problem p;
    auto forward = kiln::function([&](const kiln::tensor& x) { return kiln::sum(p.model(x)); });
    for (auto _ : state) benchmark::DoNotOptimize(forward(p.x).item<float>());
}
BENCHMARK(function_forward_sum)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
