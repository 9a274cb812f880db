// expect: kiln::optim::minimize: the loss holds a run-time scalar
// errors: 1
// A run-time scalar in a loss is rejected where the training step is written (it used to pass minimize() and fail
// at session::run with 38 KB of diagnostics).
#include <kiln/graph/session.hpp>
int main() {
    constexpr kiln::param<"w", float, kiln::shape<3>> w{};
    constexpr kiln::input<"x", float, kiln::shape<3>> x{};
    auto step = kiln::optim::minimize(kiln::sum(0.5f * w * x), kiln::optim::sgd_rule{.lr = 0.1});
    (void)step;
}
