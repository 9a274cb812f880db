#pragma once
// The shared problem in graph mode: the model is a type, its gradients are derived at compile time, and a
// kiln::session runs each training step as one plan (forward, backward, one fused Adam update per parameter).
#include <chrono>
#include <cstdio>
#include <vector>

#include <kiln/graph/print.hpp>
#include <kiln/graph/session.hpp>
#include <kiln/nn/graph_layers.hpp>

#include "mlp_problem.hpp"

namespace mlp {

struct run_result {
    std::vector<double> epoch_loss;  // mean batch loss of each epoch
    double us_per_step = 0;          // mean time of one training step (batch gathering excluded)
};

namespace graph_model {
inline constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, features>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<kiln::dyn, 1>> y{};
inline constexpr auto prediction = kiln::layers::dense<"l2", 1>(kiln::layers::dense<"l1", hidden>(x, kiln::nn::relu));
inline constexpr auto loss = kiln::mean(kiln::square(prediction - y));
inline constexpr auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = learning_rate});
}  // namespace graph_model

// Trains in `s` (whose parameters are created from its seed on the first step unless set before).
inline run_result train_graph(const dataset& d, kiln::session& s, std::uint64_t order_seed = 7, bool verbose = false) {
    using namespace graph_model;
    run_result r;
    kiln::generator order(order_seed);
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
            const auto t0 = std::chrono::steady_clock::now();
            const float l = s.run(step, x = kiln::view(xb.data(), {n, features}), y = kiln::view(yb.data(), {n, 1}));
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++steps;
            total += l;
        }
        r.epoch_loss.push_back(total / static_cast<double>(batches.size()));
        if (verbose) std::printf("graph  epoch %d  loss %.6f\n", e + 1, r.epoch_loss.back());
    }
    r.us_per_step = seconds / static_cast<double>(steps) * 1e6;
    return r;
}

}  // namespace mlp
