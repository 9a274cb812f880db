#pragma once
// The shared problem in eager mode: layers are objects, every operation runs when it is called, and a
// gradient tape records the step for its gradients.
#include <chrono>
#include <cstdio>
#include <vector>

#include <kiln/kiln.hpp>

#include "mlp_problem.hpp"

namespace mlp {

struct eager_model {
    explicit eager_model(kiln::generator& g)
        : l1(features, hidden, kiln::nn::relu, g), l2(hidden, 1, kiln::nn::identity, g) {}
    kiln::tensor operator()(const kiln::tensor& x) { return l2(l1(x)); }
    std::vector<kiln::variable*> parameters() { return {&l1.w, &l1.b, &l2.w, &l2.b}; }
    kiln::nn::dense l1, l2;
};

struct eager_result {
    std::vector<double> epoch_loss;
    double us_per_step = 0;
};

// Trains `m` with Adam on the same batches as train_graph (same order seed).
inline eager_result train_eager(const dataset& d, eager_model& m, std::uint64_t order_seed = 7, bool verbose = false) {
    eager_result r;
    kiln::generator order(order_seed);
    kiln::optim::adam opt(m.parameters(), learning_rate);
    std::vector<float> xb, yb;
    double seconds = 0;
    long steps = 0;
    for (int e = 0; e < epochs; ++e) {
        double total = 0;
        const auto batches = epoch_batches(order);
        for (const auto& idx : batches) {
            gather(d.x, features, idx, xb);
            gather(d.y, 1, idx, yb);
            const auto n = static_cast<std::ptrdiff_t>(idx.size());
            const kiln::tensor x = kiln::wrap(xb.data(), {n, features}), y = kiln::wrap(yb.data(), {n, 1});
            const auto t0 = std::chrono::steady_clock::now();
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::mse(m(x), y);
            opt.step(tape.gradient(loss, {m.l1.w, m.l1.b, m.l2.w, m.l2.b}));
            const float l = loss.item<float>();
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++steps;
            total += l;
        }
        r.epoch_loss.push_back(total / static_cast<double>(batches.size()));
        if (verbose) std::printf("eager  epoch %d  loss %.6f\n", e + 1, r.epoch_loss.back());
    }
    r.us_per_step = seconds / static_cast<double>(steps) * 1e6;
    return r;
}

}  // namespace mlp
