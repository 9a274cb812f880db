// expect: kiln::einsum: the operands' static shapes do not fit the subscripts
// errors: 1
#include <kiln/graph/structural.hpp>
int main() {
    const auto a = kiln::input<"a", float, kiln::shape<2, 3>>{};
    const auto b = kiln::input<"b", float, kiln::shape<4, 5>>{};
    auto e = kiln::einsum<"ij,jk->ik">(a, b);
    (void)e;
}
