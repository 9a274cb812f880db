// One training step of the examples' model (Dense(64, relu) -> Dense(1), MSE, Adam, a batch of 32 x 10):
// graph mode (kiln::session), eager mode (tape + kiln::optim::adam), function mode (the eager step traced by
// kiln::function) and the graph-mode step traced with its session (kiln::trace(session, step)). bench/train_vs_peers.py runs this binary
// and PyTorch / TensorFlow on the same step and prints the ratios.
#include <benchmark/benchmark.h>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"

namespace {

struct batch_data {
    std::vector<float> x, y;
    batch_data() {
        const mlp::dataset d = mlp::make_data();
        x.assign(d.x.begin(), d.x.begin() + mlp::batch_size * mlp::features);
        y.assign(d.y.begin(), d.y.begin() + mlp::batch_size);
    }
};

void graph_step(benchmark::State& state) {
    batch_data b;
    kiln::session s(1);
    using namespace mlp::graph_model;
    const auto xv = kiln::view(b.x.data(), {mlp::batch_size, mlp::features});
    const auto yv = kiln::view(b.y.data(), {mlp::batch_size, 1});
    for (auto _ : state) benchmark::DoNotOptimize(s.run(step, x = xv, y = yv));
}
BENCHMARK(graph_step);

void eager_step(benchmark::State& state) {
    batch_data b;
    kiln::generator g(1);
    mlp::eager_model m(g);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    const kiln::tensor x = kiln::wrap(b.x.data(), {mlp::batch_size, mlp::features});
    const kiln::tensor y = kiln::wrap(b.y.data(), {mlp::batch_size, 1});
    for (auto _ : state) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(m(x), y);
        opt.step(tape.gradient(loss, {m.l1.w, m.l1.b, m.l2.w, m.l2.b}));
        benchmark::DoNotOptimize(loss.item<float>());
    }
}
BENCHMARK(eager_step);

// The eager step traced by kiln::function and replayed (function mode).
void function_step(benchmark::State& state) {
    batch_data b;
    kiln::generator g(1);
    mlp::eager_model m(g);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    auto step = mlp::function_step(m, opt);
    for (auto _ : state) benchmark::DoNotOptimize(step(b.x.data(), b.y.data(), mlp::batch_size));
}
BENCHMARK(function_step);

// The graph-mode step traced with its session (kiln::trace(session, step)) and replayed.
void traced_graph_step(benchmark::State& state) {
    batch_data b;
    kiln::session s(1);
    using namespace mlp::graph_model;
    auto train_step = kiln::trace(s, step);
    const kiln::tensor x = kiln::wrap(b.x.data(), {mlp::batch_size, mlp::features});
    const kiln::tensor y = kiln::wrap(b.y.data(), {mlp::batch_size, 1});
    for (auto _ : state) benchmark::DoNotOptimize(train_step(x, y).item<float>());
}
BENCHMARK(traced_graph_step);

}  // namespace

BENCHMARK_MAIN();
