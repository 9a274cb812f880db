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

}  // namespace ops

namespace detail::kernels {
// An operand as a truth value: bool for scalars, a batch_bool for xsimd batches (a comparison's result already is
// one; a numeric batch is compared with 0).
template <class A>
KILN_HD KILN_INLINE constexpr auto truth(const A& a) {
    if constexpr (requires { A::size; typename A::batch_type; }) return a;  // xsimd::batch_bool
    else if constexpr (requires { A::size; }) return a != A(0);
    else return static_cast<bool>(a);
}
}  // namespace detail::kernels

namespace ops {
// Logical ops: operands are read as truth values (nonzero is true), results are bool. Eager mode converts its
// operands to bool first; in graph mode they take bool or numeric operands.
#define KILN_LOGICAL(op_name, expr)                                                               \
    struct op_name {                                                                              \
        static constexpr std::string_view name = #op_name;                                        \
        static constexpr int arity = 2;                                                           \
        static constexpr bool logical = true;                                                     \
        template <class A, class B>                                                               \
        KILN_HD KILN_INLINE static constexpr auto apply(const A& a_, const B& b_) {                \
            const auto a = detail::kernels::truth(a_);                                            \
            const auto b = detail::kernels::truth(b_);                                            \
            return expr;                                                                          \
        }                                                                                         \
        template <class A, class B, class Y, class G>                                             \
        static constexpr auto gradient(const A&, const B&, const Y&, const G&) {                  \
            return detail::grads(detail::no_grad{}, detail::no_grad{});                           \
        }                                                                                         \
    };

KILN_LOGICAL(logical_and, a && b)
KILN_LOGICAL(logical_or, a || b)
KILN_LOGICAL(logical_xor, a != b)
#undef KILN_LOGICAL

struct logical_not {
    static constexpr std::string_view name = "logical_not";
    static constexpr int arity = 1;
    static constexpr bool logical = true;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) { return !detail::kernels::truth(a); }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G&) { return detail::grads(detail::no_grad{}); }
};

// Bitwise ops on integers and bools (on bools they are the logical ops, with a bool result). Floating operands are
// refused: a static_assert in graph mode, a kiln::dtype_error in eager mode (`integral_only`). No gradient.
#define KILN_BITWISE(op_name, text, prec, expr)                                                    \
    struct op_name {                                                                               \
        static constexpr std::string_view name = #op_name, symbol = text;                          \
        static constexpr int arity = 2, precedence = prec; /* C++'s: below comparisons */          \
        static constexpr bool integral_only = true;                                                \
        template <class A, class B>                                                                \
        KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {                   \
            static_assert(std::is_integral_v<A> && std::is_integral_v<B>,                          \
                          "kiln::" #op_name ": operands must be integers or bool, not floating.");  \
            if constexpr (std::is_same_v<A, bool> && std::is_same_v<B, bool>) return bool(expr);   \
            else return expr;                                                                      \
        }                                                                                          \
        template <class A, class B, class Y, class G>                                              \
        static constexpr auto gradient(const A&, const B&, const Y&, const G&) {                   \
            return detail::grads(detail::no_grad{}, detail::no_grad{});                            \
        }                                                                                          \
    };
KILN_BITWISE(bitwise_and, "&", 2, a & b)
KILN_BITWISE(bitwise_or, "|", 0, a | b)
KILN_BITWISE(bitwise_xor, "^", 1, a ^ b)
#undef KILN_BITWISE

struct bitwise_not {
    static constexpr std::string_view name = "bitwise_not", symbol = "~";
    static constexpr int arity = 1, precedence = 7;
    static constexpr bool integral_only = true;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        static_assert(std::is_integral_v<A>, "kiln::bitwise_not: the operand must be an integer or bool, not floating.");
        if constexpr (std::is_same_v<A, bool>) return !a;
        else return static_cast<A>(~a);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G&) { return detail::grads(detail::no_grad{}); }
};

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
template <class A, class B> constexpr auto logical_and(const A& a, const B& b) { return detail::make<ops::logical_and>(a, b); }
template <class A, class B> constexpr auto logical_or(const A& a, const B& b) { return detail::make<ops::logical_or>(a, b); }
template <class A, class B> constexpr auto logical_xor(const A& a, const B& b) { return detail::make<ops::logical_xor>(a, b); }
template <class A> constexpr auto logical_not(const A& a) { return detail::make<ops::logical_not>(a); }

template <class A, class B> constexpr auto bitwise_and(const A& a, const B& b) { return detail::make<ops::bitwise_and>(a, b); }
template <class A, class B> constexpr auto bitwise_or(const A& a, const B& b) { return detail::make<ops::bitwise_or>(a, b); }
template <class A, class B> constexpr auto bitwise_xor(const A& a, const B& b) { return detail::make<ops::bitwise_xor>(a, b); }
template <class A> constexpr auto bitwise_not(const A& a) { return detail::make<ops::bitwise_not>(a); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator&(const A& a, const B& b) { return detail::make<ops::bitwise_and>(a, b); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator|(const A& a, const B& b) { return detail::make<ops::bitwise_or>(a, b); }
template <class A, class B> requires detail::kiln_operands_v<A, B>
constexpr auto operator^(const A& a, const B& b) { return detail::make<ops::bitwise_xor>(a, b); }
template <class A> requires detail::kiln_operands_v<A>
constexpr auto operator~(const A& a) { return detail::make<ops::bitwise_not>(a); }

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
