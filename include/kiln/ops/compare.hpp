#pragma once
// Comparisons (results are bool) and where(condition, a, b).
#include "arithmetic.hpp"

namespace kiln {
namespace ops {

// A comparison has no gradient; its operands get none through it.
#define KILN_COMPARISON(op_name, text, expr)                                                      \
    struct op_name {                                                                              \
        static constexpr std::string_view name = #op_name, symbol = text;                         \
        static constexpr int arity = 2, precedence = 3;                                           \
        template <class A, class B>                                                               \
        KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) { return expr; }  \
        template <class A, class B, class Y, class G>                                             \
        static constexpr auto gradient(const A&, const B&, const Y&, const G&) {                  \
            return detail::grads(detail::no_grad{}, detail::no_grad{});                           \
        }                                                                                         \
    };

KILN_COMPARISON(less, "<", a < b)
KILN_COMPARISON(less_equal, "<=", a <= b)
KILN_COMPARISON(greater, ">", a > b)
KILN_COMPARISON(greater_equal, ">=", a >= b)
KILN_COMPARISON(equal, "==", a == b)
KILN_COMPARISON(not_equal, "!=", a != b)
#undef KILN_COMPARISON

struct where {
    static constexpr std::string_view name = "where";
    static constexpr int condition_arg = 0;  // excluded from the operands' common element type
    static constexpr int arity = 3;
    template <class C, class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const C& cond, const A& a, const B& b) {
        using detail::kernels::select;
        return select(cond, a, b);
    }
    template <class C, class A, class B, class Y, class G>
    static constexpr auto gradient(const C& cond, const A&, const B&, const Y&, const G& g) {
        return detail::grads(detail::no_grad{}, kiln::where(cond, g, c<0>), kiln::where(cond, c<0>, g));
    }
};

}  // namespace ops

template <class A, class B> constexpr auto less(const A& a, const B& b) { return detail::make<ops::less>(a, b); }
template <class A, class B> constexpr auto less_equal(const A& a, const B& b) { return detail::make<ops::less_equal>(a, b); }
template <class A, class B> constexpr auto greater(const A& a, const B& b) { return detail::make<ops::greater>(a, b); }
template <class A, class B> constexpr auto greater_equal(const A& a, const B& b) { return detail::make<ops::greater_equal>(a, b); }
template <class A, class B> constexpr auto equal(const A& a, const B& b) { return detail::make<ops::equal>(a, b); }
template <class A, class B> constexpr auto not_equal(const A& a, const B& b) { return detail::make<ops::not_equal>(a, b); }
template <class C, class A, class B>
constexpr auto where(const C& c, const A& a, const B& b) { return detail::make<ops::where>(c, a, b); }

// Comparison operators for kiln operands. (== and != stay comparisons of values, as in NumPy.)
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator<(const A& a, const B& b) { return detail::make<ops::less>(a, b); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator<=(const A& a, const B& b) { return detail::make<ops::less_equal>(a, b); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator>(const A& a, const B& b) { return detail::make<ops::greater>(a, b); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator>=(const A& a, const B& b) { return detail::make<ops::greater_equal>(a, b); }

}  // namespace kiln
