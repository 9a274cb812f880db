// Graph, function and eager mode on the same model, initial parameters, data and batch order, their steps
// interleaved: the loss of every epoch, which agree to float rounding, the time of the first step (function mode
// traces and optimizes its step there, once: the batch dimension is dynamic) and the mean time of the others.
#include <algorithm>
#include <cmath>

#include "mlp_eager.hpp"
#include "mlp_graph.hpp"

int main() {
    const mlp::dataset data = mlp::make_data();
    // The same starting point in every mode: three copies of the eager model from one seed; the session's
    // parameters are set from the first.
    kiln::generator init_e(1), init_f(1);
    mlp::eager_model m(init_e), m2(init_f);
    kiln::session s;
    mlp::start_from(s, m);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    kiln::optim::adam opt2(m2.parameters(), mlp::learning_rate);
    // Function mode is the eager step traced by kiln::function. The three modes' steps alternate batch by batch,
    // so all are timed in the same conditions.
    const auto [g, f, e] =
        mlp::train_interleaved(data, 7, mlp::graph_step(s), mlp::function_step(m2, opt2), mlp::eager_step(m, opt));
    std::printf("%-8s %14s %14s %14s %14s %14s %12s %12s\n", "mode", "epoch 1", "epoch 2", "epoch 3", "epoch 4",
                "epoch 5", "first us", "us/step");
    auto row = [](const char* mode, const mlp::run_result& r) {
        std::printf("%-8s", mode);
        for (double l : r.epoch_loss) std::printf(" %14.7f", l);
        std::printf(" %12.1f %12.2f\n", r.first_call_us, r.us_per_step);
    };
    row("graph", g);
    row("function", f);
    row("eager", e);
    double worst = 0;
    for (int i = 0; i < mlp::epochs; ++i)
        worst = std::max({worst, std::abs(g.epoch_loss[i] - e.epoch_loss[i]) / std::abs(e.epoch_loss[i]),
                          std::abs(f.epoch_loss[i] - e.epoch_loss[i]) / std::abs(e.epoch_loss[i])});
    std::printf("per step after the first, graph mode is %.1fx and function mode %.1fx faster than eager mode; function "
                "mode's first step (its trace) took %.0f us; largest relative loss difference %.2e\n",
                e.us_per_step / g.us_per_step, e.us_per_step / f.us_per_step, f.first_call_us, worst);
    return worst <= 1e-5 ? 0 : 1;
}
