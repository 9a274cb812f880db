// Graph mode against eager mode on the same model, initial parameters, data and batch order, their steps interleaved,
// and function mode (the eager step traced by kiln::function) from the same start: time per step and the loss of
// every epoch, which agree to float rounding.
#include <algorithm>
#include <cmath>

#include "mlp_eager.hpp"
#include "mlp_graph.hpp"

int main() {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(1);
    mlp::eager_model m(init);
    kiln::session s;
    // The same starting point: the session's parameters are set from the eager model's (declare() tells the
    // session the model's parameter names, so that a misspelled one is an error).
    s.declare(mlp::graph_model::loss);
    s.set("l1/w", m.l1.w);
    s.set("l1/b", m.l1.b);
    s.set("l2/w", m.l2.w);
    s.set("l2/b", m.l2.b);
    // The two modes' steps alternate batch by batch, so both are timed in the same conditions.
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    const auto [g, e] = mlp::train_interleaved(data, 7, mlp::graph_step(s), mlp::eager_step(m, opt));
    std::printf("%-8s %14s %14s %14s %14s %14s %12s\n", "mode", "epoch 1", "epoch 2", "epoch 3", "epoch 4", "epoch 5",
                "us/step");
    std::printf("%-8s", "graph");
    for (double l : g.epoch_loss) std::printf(" %14.7f", l);
    std::printf(" %12.2f\n%-8s", g.us_per_step, "eager");
    for (double l : e.epoch_loss) std::printf(" %14.7f", l);
    std::printf(" %12.2f\n", e.us_per_step);
    // Function mode: the eager step traced by kiln::function, from the same start (its own copy of the model).
    kiln::generator init2(1);
    mlp::eager_model m2(init2);
    kiln::optim::adam opt2(m2.parameters(), mlp::learning_rate);
    const auto f = mlp::train_loop(data, 7, "function", false, mlp::function_step(m2, opt2));
    std::printf("%-8s", "function");
    for (double l : f.epoch_loss) std::printf(" %14.7f", l);
    std::printf(" %12.2f\n", f.us_per_step);
    double worst = 0;
    for (int i = 0; i < mlp::epochs; ++i)
        worst = std::max({worst, std::abs(g.epoch_loss[i] - e.epoch_loss[i]) / std::abs(e.epoch_loss[i]),
                          std::abs(f.epoch_loss[i] - e.epoch_loss[i]) / std::abs(e.epoch_loss[i])});
    std::printf("graph mode is %.1fx faster per step; largest relative loss difference %.2e\n",
                e.us_per_step / g.us_per_step, worst);
    return worst <= 1e-5 ? 0 : 1;
}
