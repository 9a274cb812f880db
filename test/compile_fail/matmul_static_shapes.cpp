// expect: kiln::matmul: the static shapes of the operands do not fit: the columns of A must equal the rows of B
// errors: 1
#include <kiln/graph/structural.hpp>
int main() {
    const auto a = kiln::input<"a", float, kiln::shape<kiln::dyn, 3>>{};
    const auto w = kiln::param<"w", float, kiln::shape<4, 2>>{};
    auto e = kiln::matmul(a, w);
    (void)e;
}
