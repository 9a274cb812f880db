// expect: incompatible_element_types<kiln::ops::mul, float, double>
// errors: 1
#include <kiln/graph.hpp>
int main() {
    const auto a = kiln::input<"a", float>{};
    const auto b = kiln::input<"b", double>{};
    auto e = a * b;
    (void)e;
}
