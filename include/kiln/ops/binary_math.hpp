#pragma once
// Binary functions: pow, maximum and minimum (NaN from either operand), Python's floor division and remainder, and
// atan2, with their integer kernels.
#include <cstddef>
#include <limits>

#include "math.hpp"

namespace kiln {
namespace detail::kernels {

// a ** b on integers, wrapping like the other integer arithmetic; a negative exponent gives the truncated
// quotient 1 / a^-b (1 for a == 1, +-1 for a == -1, 0 otherwise, and 0 for 0 ** -n as integer division by 0 does).
template <class R>
KILN_HD constexpr R integer_pow(R a, R b) {
    if (b < R(0)) {
        if (a == R(1)) return R(1);
        if (a == R(-1)) return (b % R(2)) == R(0) ? R(1) : R(-1);
        return R(0);
    }
    using U = std::make_unsigned_t<R>;
    U base = static_cast<U>(a), result = 1;
    for (auto e = static_cast<U>(b); e != 0; e >>= 1) {
        if (e & 1u) result = static_cast<U>(result * base);
        base = static_cast<U>(base * base);
    }
    return static_cast<R>(result);
}

// Python's floor division and remainder (the remainder takes the divisor's sign). Integer division by 0 gives 0,
// as kiln's div does.
template <class A, class B>
KILN_HD constexpr auto floor_div_scalar(A a, B b) {
    if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
        using R = decltype(a / b);
        if (b == B(0)) return R(0);
        if (b == B(-1)) return static_cast<R>(wrapping_neg(static_cast<R>(a)));
        R q = static_cast<R>(a / b);
        if (static_cast<R>(a % b) != R(0) && ((a < A(0)) != (b < B(0)))) q = static_cast<R>(q - R(1));
        return q;
    } else {
        // CPython's algorithm (PyTorch's too): from fmod, so that 1.0 // 0.1 is 9, where floor(1.0 / 0.1) is 10.
        using std::copysign;
        using std::floor;
        using std::fmod;
        using R = decltype(a / b);
        if (b == B(0)) return static_cast<R>(a / b);
        R mod = fmod(static_cast<R>(a), static_cast<R>(b));
        R div = (static_cast<R>(a) - mod) / static_cast<R>(b);
        if (mod != R(0) && ((b < B(0)) != (mod < R(0)))) div -= R(1);
        if (div == R(0)) return copysign(R(0), static_cast<R>(a) / static_cast<R>(b));
        R fl = floor(div);
        if (div - fl > R(0.5)) fl += R(1);
        return fl;
    }
}
template <class A, class B>
KILN_HD constexpr auto remainder_scalar(A a, B b) {
    if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
        using R = decltype(a % b);
        if (b == B(0) || b == B(-1)) return R(0);
        R r = static_cast<R>(a % b);
        if (r != R(0) && ((r < R(0)) != (b < B(0)))) r = static_cast<R>(r + b);
        return r;
    } else {
        using std::copysign;
        using std::fmod;
        auto r = fmod(a, b);
        using R = decltype(r);
        if (r != R(0)) {
            if ((r < R(0)) != (b < B(0))) r += b;
        } else {
            r = copysign(R(0), static_cast<R>(b));  // a zero remainder takes the divisor's sign
        }
        return r;
    }
}

// Applies a scalar function lane by lane to two xsimd batches.
template <class A, class F>
KILN_INLINE A lanewise(const A& a, const A& b, F f) {
    using T = typename A::value_type;
    T x[A::size], y[A::size];
    a.store_unaligned(x);
    b.store_unaligned(y);
    for (std::size_t i = 0; i < A::size; ++i) x[i] = static_cast<T>(f(x[i], y[i]));
    return A::load_unaligned(x);
}

}  // namespace detail::kernels

namespace ops {

struct pow {
    static constexpr std::string_view name = "pow";
    static constexpr bool refuses_bool = true;  // as in PyTorch
    static constexpr int arity = 2;
    // Integers raised to integers stay integers (PyTorch's rule); any floating operand makes the result floating.
    // Batches are computed lane by lane with std::pow: a vector pow (exp(y log x)) gets the IEEE special cases
    // wrong (pow(0, 0), pow(-8, 2), pow(NaN, 0)), and pow is rarely what bounds a loop.
    template <class A, class B>
    KILN_HD KILN_INLINE static auto apply(const A& a, const B& b) {
        if constexpr (requires { A::size; }) {
            return detail::kernels::lanewise(a, b, [](auto x, auto y) { return apply(x, y); });
        } else if constexpr (detail::kernels::wraps_v<A, B>) {
            using R = decltype(a * b);
            return detail::kernels::integer_pow<R>(static_cast<R>(a), static_cast<R>(b));
        } else {
            using std::pow;
            return pow(a, b);
        }
    }
    // pow(x, 1) -> x
    template <class A, class B>
    static constexpr auto simplify(const A& a, const B&) {
        if constexpr (std::is_same_v<B, constant<1>>) return a;
        else return detail::keep{};
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y& y, const G& g) {
        return detail::grads(g * b * kiln::pow(a, b - c<1>), g * y * kiln::log(a));
    }
};

// maximum and minimum propagate NaN from either operand, like NumPy.
struct maximum {
    static constexpr std::string_view name = "maximum";
    static constexpr int arity = 2;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        using detail::kernels::select;
        using detail::kernels::is_nan;
        return select((a > b) || is_nan(a), a, b);
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        return static_cast<__int128>(a.num) * b.den >= static_cast<__int128>(b.num) * a.den ? a : b;
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y&, const G& g) {
        return detail::grads(kiln::where(a >= b, g, c<0>), kiln::where(a >= b, c<0>, g));
    }
};

struct minimum {
    static constexpr std::string_view name = "minimum";
    static constexpr int arity = 2;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        using detail::kernels::select;
        using detail::kernels::is_nan;
        return select((a < b) || is_nan(a), a, b);
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        return static_cast<__int128>(a.num) * b.den <= static_cast<__int128>(b.num) * a.den ? a : b;
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y&, const G& g) {
        return detail::grads(kiln::where(a <= b, g, c<0>), kiln::where(a <= b, c<0>, g));
    }
};

// Python's floor division (rounds toward negative infinity) and remainder (the divisor's sign). On integers
// these are the integer division and modulo NumPy and PyTorch give with // and %; `/` is true division in eager mode.
struct floor_divide {
    static constexpr std::string_view name = "floor_divide";
    static constexpr bool refuses_bool = true;  // as in PyTorch
    static constexpr int arity = 2;
    template <class A, class B>
    KILN_HD KILN_INLINE static auto apply(const A& a, const B& b) {
        if constexpr (requires { A::size; })
            return detail::kernels::lanewise(a, b, [](auto x, auto y) { return detail::kernels::floor_div_scalar(x, y); });
        else
            return detail::kernels::floor_div_scalar(a, b);
    }
    // Piecewise constant: no gradient flows through it (PyTorch's is zero).
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B&, const Y&, const G&) {
        return detail::grads(detail::no_grad{}, detail::no_grad{});
    }
};

struct remainder {
    static constexpr std::string_view name = "remainder";
    static constexpr bool refuses_bool = true;  // as in PyTorch
    static constexpr int arity = 2;
    template <class A, class B>
    KILN_HD KILN_INLINE static auto apply(const A& a, const B& b) {
        if constexpr (requires { A::size; })
            return detail::kernels::lanewise(a, b, [](auto x, auto y) { return detail::kernels::remainder_scalar(x, y); });
        else
            return detail::kernels::remainder_scalar(a, b);
    }
    // a - floor(a / b) * b: d/da = 1, d/db = -floor(a / b).
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y&, const G& g);
};

// atan2(y, x): the angle of the point (x, y), in (-pi, pi].
struct atan2 {
    static constexpr std::string_view name = "atan2";
    static constexpr int arity = 2;
    static constexpr bool promotes_to_floating = true;
    // Batches lane by lane: xsimd's vector atan2 gives NaN for atan2(+-inf, +-inf) and atan2(+-0, +-0), where
    // IEEE (and NumPy) give multiples of pi/4 and signed zeros or +-pi.
    template <class A, class B>
    KILN_HD KILN_INLINE static auto apply(const A& a, const B& b) {
        if constexpr (requires { A::size; }) {
            return detail::kernels::lanewise(a, b, [](auto x, auto y) { return apply(x, y); });
        } else {
            using std::atan2;
            return atan2(a, b);
        }
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y&, const G& g) {
        return detail::grads(g * b / (kiln::square(a) + kiln::square(b)),
                             kiln::neg(g * a / (kiln::square(a) + kiln::square(b))));
    }
};

}  // namespace ops

template <class A, class B> constexpr auto atan2(const A& a, const B& b) { return detail::make<ops::atan2>(a, b); }
template <class A, class B> constexpr auto pow(const A& a, const B& b) { return detail::make<ops::pow>(a, b); }
template <class A, class B> constexpr auto maximum(const A& a, const B& b) { return detail::make<ops::maximum>(a, b); }
template <class A, class B> constexpr auto minimum(const A& a, const B& b) { return detail::make<ops::minimum>(a, b); }
template <class A, class B>
constexpr auto floor_divide(const A& a, const B& b) { return detail::make<ops::floor_divide>(a, b); }
template <class A, class B>
constexpr auto remainder(const A& a, const B& b) { return detail::make<ops::remainder>(a, b); }
template <class A, class B, class Y, class G>
constexpr auto ops::remainder::gradient(const A& a, const B& b, const Y&, const G& g) {
    return detail::grads(g, kiln::neg(g * kiln::floor_divide(a, b)));
}

}  // namespace kiln
