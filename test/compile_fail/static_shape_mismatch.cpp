// expect: incompatible_static_shapes<kiln::ops::add, kiln::shape<3>, kiln::shape<4> ?>
// errors: 1
#include <kiln/graph.hpp>
int main() {
    const auto a = kiln::input<"a", float, kiln::shape<3>>{};
    const auto b = kiln::input<"b", float, kiln::shape<4>>{};
    auto e = a + b;
    (void)e;
}
