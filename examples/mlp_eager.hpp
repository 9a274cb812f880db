#pragma once
// The shared problem in eager mode: layers are objects, every operation runs when it is called, and a
// gradient tape records the step for its gradients.
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

// Trains `m` with Adam on the same batches as train_graph (same order seed).
// One training step of `m` with `opt` on a batch of n rows.
inline auto eager_step(eager_model& m, kiln::optim::adam& opt) {
    return [&m, &opt](float* xb, float* yb, std::ptrdiff_t n) -> double {
        const kiln::tensor x = kiln::wrap(xb, {n, features}), y = kiln::wrap(yb, {n, 1});
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(m(x), y);
        opt.step(tape.gradient(loss, {m.l1.w, m.l1.b, m.l2.w, m.l2.b}));
        return loss.item<float>();
    };
}

// The same step in function mode: written in eager style once, traced by kiln::function on its first call and
// replayed after that. The batch dimension is dynamic, so the last partial batch (8 rows) replays the same trace.
inline auto function_step(eager_model& m, kiln::optim::adam& opt) {
    auto train_step = kiln::function([&m, &opt](const kiln::tensor& x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        kiln::tensor loss = kiln::nn::mse(m(x), y);
        opt.apply_gradients(tape.gradient(loss, m.parameters()), m.parameters());
        return loss;
    }, {kiln::spec(kiln::float32, {kiln::dyn, features}), kiln::spec(kiln::float32, {kiln::dyn, 1})}, {.name = "train_step"});
    return [train_step = std::move(train_step)](float* xb, float* yb, std::ptrdiff_t n) mutable -> double {
        const kiln::tensor x = kiln::wrap(xb, {n, features}), y = kiln::wrap(yb, {n, 1});
        return train_step(x, y).item<float>();
    };
}

inline run_result train_eager(const dataset& d, eager_model& m, std::uint64_t order_seed = 7, bool verbose = false) {
    kiln::optim::adam opt(m.parameters(), learning_rate);
    return train_loop(d, order_seed, "eager", verbose, [&](float* xb, float* yb, std::ptrdiff_t n) {
        const kiln::tensor x = kiln::wrap(xb, {n, features}), y = kiln::wrap(yb, {n, 1});
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(m(x), y);
        opt.step(tape.gradient(loss, {m.l1.w, m.l1.b, m.l2.w, m.l2.b}));
        return loss.item<float>();
    });
}

}  // namespace mlp
