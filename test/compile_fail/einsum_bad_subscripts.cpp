// expect: kiln::einsum: the subscripts are not valid
// errors: 1
#include <kiln/graph/structural.hpp>
int main() {
    const auto a = kiln::input<"a", float>{};
    auto e = kiln::einsum<"ii,ij->j">(a, a);
    (void)e;
}
