// expect: kiln::grad: the loss holds a run-time scalar
// errors: 1
#include <kiln/graph/grad.hpp>
int main() {
    const auto x = kiln::input<"x">{};
    auto g = kiln::grad(kiln::sum(0.5f * x * x), x);
    (void)g;
}
