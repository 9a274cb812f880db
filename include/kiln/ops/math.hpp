#pragma once
// Unary functions: exponentials, logarithms, roots, trigonometry, rounding, sign and the floating predicates
// (binary_math.hpp has pow, maximum, minimum, floor_divide, remainder and atan2; activations.hpp the activations).
#include <limits>

#include "arithmetic.hpp"

namespace kiln {
namespace detail::kernels {

// An operand of a floating-only kernel: integers and bools as double (eager mode converts them to float32 first,
// so this serves graph mode and keeps every dtype's kernel well-formed), anything else as it is.
template <class V>
KILN_HD KILN_INLINE constexpr auto floating_of(const V& v) {
    if constexpr (std::is_integral_v<V>) return static_cast<double>(v);
    else return v;
}

// One of the operand's type: a scalar or an xsimd batch filled with 1.
template <class V>
KILN_HD KILN_INLINE constexpr V one_like(const V&) { return V(1); }
template <class V>
KILN_HD KILN_INLINE constexpr V zero_like(const V&) { return V(0); }

}  // namespace detail::kernels

namespace ops {

// Defines a unary op whose kernel calls a function found in std:: for scalars and by ADL for batches.
// These ops also say `promotes_to_floating`: in eager mode an integer tensor becomes float32 first (exp of an int).
#define KILN_STD_UNARY_KERNEL(fn)                                   \
    static constexpr bool promotes_to_floating = true;              \
    template <class A>                                              \
    KILN_HD KILN_INLINE static auto apply(const A& a) {             \
        using std::fn;                                              \
        return fn(a);                                               \
    }

struct abs {
    static constexpr std::string_view name = "abs";
    static constexpr int arity = 1;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        using detail::kernels::abs;
        return abs(a);
    }
    static constexpr detail::rational fold(detail::rational a) { return {a.num < 0 ? -a.num : a.num, a.den, a.ok}; }
    // abs(abs(x)) -> abs(x)
    template <class A>
    static constexpr auto simplify(const A& a) {
        if constexpr (requires { typename A::op; }) {
            if constexpr (std::is_same_v<typename A::op, abs>) return a;
            else return detail::keep{};
        } else {
            return detail::keep{};
        }
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(kiln::where(a > c<0>, g, kiln::where(a < c<0>, kiln::neg(g), c<0>)));
    }
};

struct exp {
    static constexpr std::string_view name = "exp";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // (Bounded first: exp(-746) is 0 and exp(710) infinite in float64; see kernels::saturated.)
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::exp;
        return detail::kernels::with_nan_of(a, exp(detail::kernels::saturated(a, -746.0, 710.0)));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) { return detail::grads(g * y); }
};

struct log {
    static constexpr std::string_view name = "log";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // xsimd's vector log reads the exponent field directly and gets subnormal inputs wrong (float64 log(5e-324) was
    // -746.52, not -744.44): lanes below the smallest normal are scaled into the normal range first.
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::log;
        if constexpr (requires { A::size; }) {
            using T = typename A::value_type;
            const A tiny(std::numeric_limits<T>::min()), zero(T(0));
            const auto sub = (a < tiny) & (a > zero);
            if (!any(sub)) [[likely]]
                return log(a);
            constexpr int shift = std::numeric_limits<T>::digits;  // 2^digits lifts every subnormal above min()
            const A scale(static_cast<T>(std::uint64_t{1} << shift));
            const A correction(static_cast<T>(shift * 0.693147180559945309417232121458176568));
            return log(select(sub, a * scale, a)) - select(sub, correction, zero);
        } else {
            return log(a);
        }
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return detail::grads(g / a); }
};

struct sqrt {
    static constexpr std::string_view name = "sqrt";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(sqrt)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) { return detail::grads(g / (c<2> * y)); }
};

struct rsqrt {
    static constexpr std::string_view name = "rsqrt";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // 1 / sqrt(x), correctly rounded in both steps (xsimd's rsqrt is an approximation).
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::sqrt;
        return detail::kernels::one_like(a) / sqrt(a);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(kiln::neg(c<1, 2> * g * y / a));
    }
};

struct square {
    static constexpr std::string_view name = "square";
    static constexpr int arity = 1;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        if constexpr (std::is_same_v<A, bool>) return a;
        else if constexpr (detail::kernels::wraps_v<A, A>) return detail::kernels::wrapping_mul(a, a);
        else return a * a;
    }
    static constexpr detail::rational fold(detail::rational a) {
        return detail::make_rational(static_cast<__int128>(a.num) * a.num, static_cast<__int128>(a.den) * a.den);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return detail::grads(c<2> * a * g); }
};

struct sin {
    static constexpr std::string_view name = "sin";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(sin)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return detail::grads(g * kiln::cos(a)); }
};

struct cos {
    static constexpr std::string_view name = "cos";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(cos)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(kiln::neg(g * kiln::sin(a)));
    }
};

struct tanh {
    static constexpr std::string_view name = "tanh";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // (Bounded first: tanh(40) is 1 in float64; see kernels::saturated.)
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::tanh;
        return detail::kernels::with_nan_of(a, tanh(detail::kernels::saturated(a, -40.0, 40.0)));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) {
        return detail::grads(g * (c<1> - kiln::square(y)));
    }
};

struct tan {
    static constexpr std::string_view name = "tan";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(tan)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) {
        return detail::grads(g * (c<1> + kiln::square(y)));
    }
};

struct asin {
    static constexpr std::string_view name = "asin";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(asin)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(g * kiln::rsqrt(c<1> - kiln::square(a)));
    }
};

struct acos {
    static constexpr std::string_view name = "acos";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(acos)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(kiln::neg(g * kiln::rsqrt(c<1> - kiln::square(a))));
    }
};

struct atan {
    static constexpr std::string_view name = "atan";
    static constexpr int arity = 1;
    KILN_STD_UNARY_KERNEL(atan)
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(g / (c<1> + kiln::square(a)));
    }
};

// log(1 + x) and exp(x) - 1, accurate near 0 where the plain forms lose every digit.
struct log1p {
    static constexpr std::string_view name = "log1p";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // The result has the operand's sign (log1p(-0) is -0), which xsimd's vector log1p loses: batches copy it back.
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::log1p;
        if constexpr (requires { A::size; }) {
            using std::copysign;
            return copysign(log1p(a), a);
        } else {
            return log1p(a);
        }
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return detail::grads(g / (c<1> + a)); }
};

struct expm1 {
    static constexpr std::string_view name = "expm1";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // The result has the operand's sign (expm1(-0) is -0), which xsimd's vector expm1 loses: batches copy it back.
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::expm1;
        if constexpr (requires { A::size; }) {
            using std::copysign;
            return detail::kernels::with_nan_of(a, copysign(expm1(detail::kernels::saturated(a, -800.0, 710.0)), a));
        } else {
            return expm1(a);
        }
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) { return detail::grads(g * (y + c<1>)); }
};

// The error function; its derivative is 2 / sqrt(pi) * exp(-x^2) (the constant to 17 digits).
struct erf {
    static constexpr std::string_view name = "erf";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // (Bounded first: erf(10) is 1 in float64; see kernels::saturated.)
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::erf;
        return detail::kernels::with_nan_of(a, erf(detail::kernels::saturated(a, -10.0, 10.0)));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(c<11283791670955126, 10000000000000000> * g * kiln::exp(kiln::neg(kiln::square(a))));
    }
};

#undef KILN_STD_UNARY_KERNEL

// Rounding: integers and bools pass through unchanged (their dtype too); floating values round in their own type.
// No gradient flows through them (PyTorch's is zero almost everywhere). A rounded value always has its operand's
// sign (ceil(-0.5) is -0), which xsimd's SSE2 fallbacks lose for zero results: batches get it back with copysign.
#define KILN_ROUNDING(op_name, fn)                                                      \
    struct op_name {                                                                    \
        static constexpr std::string_view name = #op_name;                              \
        static constexpr int arity = 1;                                                 \
        template <class A>                                                              \
        KILN_HD KILN_INLINE static auto apply(const A& a) {                             \
            if constexpr (std::is_integral_v<A>) {                                      \
                return a;                                                               \
            } else if constexpr (detail::kernels::is_double_batch_v<A>) {               \
                using std::fn;                                                          \
                using std::copysign;                                                    \
                using std::abs;                                                         \
                /* from 2^52 every float64 is whole: those lanes are a itself, and fn */ \
                /* sees 0 there (see kernels::saturated) */                             \
                const A big(4503599627370496.0);                                        \
                const auto whole = !(abs(a) < big);                                     \
                return select(whole, a, copysign(fn(select(whole, A(0), a)), a));       \
            } else if constexpr (requires { A::size; }) {                               \
                using std::fn;                                                          \
                using std::copysign;                                                    \
                return copysign(fn(a), a);                                              \
            } else {                                                                    \
                using std::fn;                                                          \
                return fn(a);                                                           \
            }                                                                           \
        }                                                                               \
        template <class A, class Y, class G>                                            \
        static constexpr auto gradient(const A&, const Y&, const G&) {                  \
            return detail::grads(detail::no_grad{});                                    \
        }                                                                               \
    };
KILN_ROUNDING(floor, floor)
KILN_ROUNDING(ceil, ceil)
KILN_ROUNDING(trunc, trunc)
// round: halves go to the even neighbour (round(2.5) is 2, round(-0.5) is -0), as in NumPy and PyTorch.
KILN_ROUNDING(round, nearbyint)
#undef KILN_ROUNDING

// sign: -1, 0 or 1 in the operand's type (0 keeps its sign bit: sign(-0.0) is -0.0; NaN stays NaN).
struct sign {
    static constexpr std::string_view name = "sign";
    static constexpr int arity = 1;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        using detail::kernels::select;
        if constexpr (std::is_same_v<A, bool>) {
            return a;
        } else {
            // sign(+-0) is +0 and sign(NaN) is NaN, as in NumPy: a + 0 turns -0 into +0 and keeps NaN.
            const A zero = detail::kernels::zero_like(a), one = detail::kernels::one_like(a);
            return select(a > zero, one, select(a < zero, -one, a + zero));
        }
    }
    static constexpr detail::rational fold(detail::rational a) { return {a.num > 0 ? 1 : a.num < 0 ? -1 : 0, 1, a.ok}; }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G&) { return detail::grads(detail::no_grad{}); }
};

// Tests of floating values; for integers and bools the answers are constant (no NaN, no infinity).
#define KILN_PREDICATE(op_name, float_expr, integer_value)                              \
    struct op_name {                                                                    \
        static constexpr std::string_view name = #op_name;                              \
        static constexpr int arity = 1;                                                 \
        template <class A>                                                              \
        KILN_HD KILN_INLINE static constexpr bool apply(const A& a) {                   \
            if constexpr (std::is_floating_point_v<A>) return float_expr;               \
            else return (void)a, integer_value;                                         \
        }                                                                               \
        template <class A, class Y, class G>                                            \
        static constexpr auto gradient(const A&, const Y&, const G&) {                  \
            return detail::grads(detail::no_grad{});                                    \
        }                                                                               \
    };
KILN_PREDICATE(isnan, a != a, false)
KILN_PREDICATE(isinf, a - a != a - a && a == a, false)
KILN_PREDICATE(isfinite, a - a == a - a, true)
#undef KILN_PREDICATE

}  // namespace ops

template <class A> constexpr auto tan(const A& a) { return detail::make<ops::tan>(a); }
template <class A> constexpr auto asin(const A& a) { return detail::make<ops::asin>(a); }
template <class A> constexpr auto acos(const A& a) { return detail::make<ops::acos>(a); }
template <class A> constexpr auto atan(const A& a) { return detail::make<ops::atan>(a); }
template <class A> constexpr auto log1p(const A& a) { return detail::make<ops::log1p>(a); }
template <class A> constexpr auto expm1(const A& a) { return detail::make<ops::expm1>(a); }
template <class A> constexpr auto erf(const A& a) { return detail::make<ops::erf>(a); }
template <class A> constexpr auto floor(const A& a) { return detail::make<ops::floor>(a); }
template <class A> constexpr auto ceil(const A& a) { return detail::make<ops::ceil>(a); }
template <class A> constexpr auto trunc(const A& a) { return detail::make<ops::trunc>(a); }
template <class A> constexpr auto round(const A& a) { return detail::make<ops::round>(a); }
template <class A> constexpr auto sign(const A& a) { return detail::make<ops::sign>(a); }
template <class A> constexpr auto isnan(const A& a) { return detail::make<ops::isnan>(a); }
template <class A> constexpr auto isinf(const A& a) { return detail::make<ops::isinf>(a); }
template <class A> constexpr auto isfinite(const A& a) { return detail::make<ops::isfinite>(a); }


template <class A> constexpr auto abs(const A& a) { return detail::make<ops::abs>(a); }
template <class A> constexpr auto exp(const A& a) { return detail::make<ops::exp>(a); }
template <class A> constexpr auto log(const A& a) { return detail::make<ops::log>(a); }
template <class A> constexpr auto sqrt(const A& a) { return detail::make<ops::sqrt>(a); }
template <class A> constexpr auto rsqrt(const A& a) { return detail::make<ops::rsqrt>(a); }
template <class A> constexpr auto square(const A& a) { return detail::make<ops::square>(a); }
template <class A> constexpr auto sin(const A& a) { return detail::make<ops::sin>(a); }
template <class A> constexpr auto cos(const A& a) { return detail::make<ops::cos>(a); }
template <class A> constexpr auto tanh(const A& a) { return detail::make<ops::tanh>(a); }

}  // namespace kiln
