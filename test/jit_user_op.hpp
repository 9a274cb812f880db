#pragma once
// An elementwise op of a program's own (test/jit.cpp): a compiled kernel can use it once its header is named in
// kiln::jit_options::includes.
#include <kiln/ops/op_base.hpp>

namespace jit_user {
// x * x * x + 1, as a user would write an op: a name, an arity, a kernel.
struct cube_plus_one {
    static constexpr std::string_view name = "cube_plus_one";
    static constexpr int arity = 1;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        return a * a * a + A(1);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return kiln::detail::grads(g * kiln::c<3> * kiln::square(a));
    }
};
}  // namespace jit_user
