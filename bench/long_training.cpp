// A long run of the reference training step (Dense(64, relu), Dense(1), MSE, Adam, one batch of 32 x 10 over and
// over) in graph, function and eager mode: the time per step in each block of steps, so that a slowdown as training
// goes on shows (Adam's moments of parameters whose gradient is zero decay into subnormal numbers unless they are
// flushed). The three modes run in turn within each block.
//   bench_long_training [BLOCKS [STEPS_PER_BLOCK]]   (default 5 blocks of 40000 steps)
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"

int main(int argc, char** argv) {
    const int blocks = argc > 1 ? std::atoi(argv[1]) : 5;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 40000;
    const mlp::dataset d = mlp::make_data();
    std::vector<float> xb(d.x.begin(), d.x.begin() + mlp::batch_size * mlp::features);
    std::vector<float> yb(d.y.begin(), d.y.begin() + mlp::batch_size);

    kiln::session s(1);
    auto graph = mlp::graph_step(s);
    kiln::generator g1(1), g2(1);
    mlp::eager_model fm(g1), em(g2);
    kiln::optim::adam fopt(fm.parameters(), mlp::learning_rate), eopt(em.parameters(), mlp::learning_rate);
    auto function = mlp::function_step(fm, fopt);
    auto eager = mlp::eager_step(em, eopt);

    auto time_block = [&](auto& step) {
        double sum = 0;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < steps; ++i) sum += step(xb.data(), yb.data(), mlp::batch_size);
        const double us = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps * 1e6;
        return std::make_pair(us, sum);
    };
    std::printf("%8s %12s %12s %12s   (us per step; block b covers steps %d(b-1)+1 to %d b)\n", "block", "graph", "function", "eager",
                steps, steps);
    double first[3] = {0, 0, 0}, last[3] = {0, 0, 0};
    for (int b = 1; b <= blocks; ++b) {
        const auto [tg, sg] = time_block(graph);
        const auto [tf, sf] = time_block(function);
        const auto [te, se] = time_block(eager);
        std::printf("%8d %12.2f %12.2f %12.2f   (mean losses %.4f %.4f %.4f)\n", b, tg, tf, te, sg / steps, sf / steps, se / steps);
        const double t[3] = {tg, tf, te};
        for (int k = 0; k < 3; ++k) {
            if (b == 1) first[k] = t[k];
            last[k] = t[k];
        }
    }
    std::printf("last block / first block: graph %.2fx, function %.2fx, eager %.2fx\n", last[0] / first[0], last[1] / first[1],
                last[2] / first[2]);
}
