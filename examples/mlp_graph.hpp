#pragma once
// The shared problem in graph mode: the model is a type, its gradients are derived at compile time, and a
// kiln::session runs each training step as one plan (forward, backward, one fused Adam update per parameter).
#include <kiln/graph/print.hpp>
#include <kiln/graph/session.hpp>
#include <kiln/nn/graph_layers.hpp>

#include "mlp_problem.hpp"

namespace mlp {

namespace graph_model {
inline constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, features>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<kiln::dyn, 1>> y{};
inline constexpr auto prediction = kiln::layers::dense<"l2", 1>(kiln::layers::dense<"l1", hidden>(x, kiln::nn::relu));
inline constexpr auto loss = kiln::mean(kiln::square(prediction - y));
inline constexpr auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = learning_rate});
}  // namespace graph_model

// The session starts where an eager model (mlp::eager_model) starts: its parameters are set from the model's.
// declare() tells the session the model's parameter names first, so that a misspelled one is an error.
template <class EagerModel>
void start_from(kiln::session& s, const EagerModel& m) {
    s.declare(graph_model::loss);
    s.set("l1/w", m.l1.w);
    s.set("l1/b", m.l1.b);
    s.set("l2/w", m.l2.w);
    s.set("l2/b", m.l2.b);
}

// One training step in `s` on a batch of n rows.
inline auto graph_step(kiln::session& s) {
    return [&s](float* xb, float* yb, std::ptrdiff_t n) -> double {
        using namespace graph_model;
        return s.run(step, x = kiln::view(xb, {n, features}), y = kiln::view(yb, {n, 1}));
    };
}

// Trains in `s` (whose parameters are created from its seed on the first step unless set before).
inline run_result train_graph(const dataset& d, kiln::session& s, std::uint64_t order_seed = 7, bool verbose = false) {
    using namespace graph_model;
    return train_loop(d, order_seed, "graph", verbose, [&](float* xb, float* yb, std::ptrdiff_t n) {
        return s.run(step, x = kiln::view(xb, {n, features}), y = kiln::view(yb, {n, 1}));
    });
}

}  // namespace mlp
