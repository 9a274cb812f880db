#pragma once
// add, sub, mul, div, neg: the arithmetic operators of the vocabulary.
#include "op_base.hpp"

namespace kiln {

namespace ops {

struct neg {
    static constexpr std::string_view name = "neg", symbol = "-";
    static constexpr bool refuses_bool = true;  // as in PyTorch
    static constexpr int arity = 1, precedence = 6;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        if constexpr (detail::kernels::wraps_v<A, A>) return detail::kernels::wrapping_neg(a);
        else return -a;
    }
    static constexpr detail::rational fold(detail::rational a) { return {-a.num, a.den, a.ok}; }
    // -(-x) -> x
    template <class A>
    static constexpr auto simplify(const A& a) {
        if constexpr (requires { typename A::op; }) {
            if constexpr (std::is_same_v<typename A::op, neg>) return a.template arg<0>();
            else return detail::keep{};
        } else {
            return detail::keep{};
        }
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G& g) { return detail::grads(kiln::neg(g)); }
};

struct add {
    static constexpr std::string_view name = "add", symbol = "+";
    static constexpr int arity = 2, precedence = 4;
    // On bools: logical or (bool + bool stays bool, as in PyTorch).
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        if constexpr (std::is_same_v<A, bool> && std::is_same_v<B, bool>) return a || b;
        else if constexpr (detail::kernels::wraps_v<A, B>) return detail::kernels::wrapping_add(a, b);
        else return a + b;
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        return detail::make_rational(static_cast<__int128>(a.num) * b.den + static_cast<__int128>(b.num) * a.den,
                                     static_cast<__int128>(a.den) * b.den);
    }
    // x + 0 -> x (x + 0 differs from x only in the sign of a zero).
    template <class A, class B>
    static constexpr auto simplify(const A& a, const B& b) {
        if constexpr (std::is_same_v<B, constant<0>>) return a;
        else if constexpr (std::is_same_v<A, constant<0>>) return b;
        else return detail::keep{};
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B&, const Y&, const G& g) { return detail::grads(g, g); }
};

struct sub {
    static constexpr std::string_view name = "sub", symbol = "-";
    static constexpr bool refuses_bool = true;  // as in PyTorch
    static constexpr int arity = 2, precedence = 4;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        if constexpr (detail::kernels::wraps_v<A, B>) return detail::kernels::wrapping_sub(a, b);
        else return a - b;
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        return detail::make_rational(static_cast<__int128>(a.num) * b.den - static_cast<__int128>(b.num) * a.den,
                                     static_cast<__int128>(a.den) * b.den);
    }
    // x - 0 -> x is exact, signed zeros included. (x - x -> 0 is not: it is NaN for infinities.)
    template <class A, class B>
    static constexpr auto simplify(const A& a, const B&) {
        if constexpr (std::is_same_v<B, constant<0>>) return a;
        else return detail::keep{};
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B&, const Y&, const G& g) { return detail::grads(g, kiln::neg(g)); }
};

struct mul {
    static constexpr std::string_view name = "mul", symbol = "*";
    static constexpr int arity = 2, precedence = 5;
    // On bools: logical and.
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        if constexpr (std::is_same_v<A, bool> && std::is_same_v<B, bool>) return a && b;
        else if constexpr (detail::kernels::wraps_v<A, B>) return detail::kernels::wrapping_mul(a, b);
        else return a * b;
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        return detail::make_rational(static_cast<__int128>(a.num) * b.num, static_cast<__int128>(a.den) * b.den);
    }
    // x * 1 -> x and x * -1 -> -x are exact; x * 0 -> 0 is not (NaN, infinity), so it is not applied.
    template <class A, class B>
    static constexpr auto simplify(const A& a, const B& b) {
        if constexpr (std::is_same_v<B, constant<1>>) return a;
        else if constexpr (std::is_same_v<A, constant<1>>) return b;
        else if constexpr (std::is_same_v<B, constant<-1>>) return kiln::neg(a);
        else if constexpr (std::is_same_v<A, constant<-1>>) return kiln::neg(b);
        else return detail::keep{};
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y&, const G& g) {
        return detail::grads(g * b, g * a);
    }
};

struct div {
    static constexpr std::string_view name = "div", symbol = "/";
    static constexpr int arity = 2, precedence = 5;
    // True division in eager mode, as in PyTorch: integer tensors are divided as float32 (kiln::floor_divide is
    // the integer division). Graph mode keeps C++'s types: an integer graph divides as C++ integers do.
    static constexpr bool promotes_to_floating = true;
    // Integer division by zero gives 0 and INT_MIN / -1 wraps, instead of trapping inside a fused loop.
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& b) {
        if constexpr (std::is_integral_v<A> && std::is_integral_v<B>) {
            using R = decltype(a / b);
            if (b == B(0)) return R(0);
            if constexpr (std::is_signed_v<R>)
                if (b == B(-1)) return static_cast<R>(R(0) - static_cast<std::make_unsigned_t<R>>(a));
            return static_cast<R>(a / b);
        } else {
            return a / b;
        }
    }
    static constexpr detail::rational fold(detail::rational a, detail::rational b) {
        if (b.num == 0) return {0, 1, false};  // leave 1_c / 0_c to run time: it is infinity there
        return detail::make_rational(static_cast<__int128>(a.num) * b.den, static_cast<__int128>(a.den) * b.num);
    }
    template <class A, class B>
    static constexpr auto simplify(const A& a, const B&) {
        if constexpr (std::is_same_v<B, constant<1>>) return a;
        else return detail::keep{};
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B& b, const Y& y, const G& g) {
        return detail::grads(g / b, kiln::neg(g * y / b));
    }
};

}  // namespace ops


// Operators for kiln operands (constants, graph nodes, tensors). Plain numbers keep their own operators.
template <class A, class B>
    requires detail::kiln_operands_v<A, B>
constexpr auto operator+(const A& a, const B& b) { return detail::make<ops::add>(a, b); }
template <class A, class B>
    requires detail::kiln_operands_v<A, B>
constexpr auto operator-(const A& a, const B& b) { return detail::make<ops::sub>(a, b); }
template <class A, class B>
    requires detail::kiln_operands_v<A, B>
constexpr auto operator*(const A& a, const B& b) { return detail::make<ops::mul>(a, b); }
template <class A, class B>
    requires detail::kiln_operands_v<A, B>
constexpr auto operator/(const A& a, const B& b) { return detail::make<ops::div>(a, b); }
template <class A>
    requires detail::kiln_operands_v<A>
constexpr auto operator-(const A& a) { return detail::make<ops::neg>(a); }

template <class A>
constexpr auto neg(const A& a) { return detail::make<ops::neg>(a); }
template <class A, class B>
constexpr auto add(const A& a, const B& b) { return detail::make<ops::add>(a, b); }
template <class A, class B>
constexpr auto sub(const A& a, const B& b) { return detail::make<ops::sub>(a, b); }
template <class A, class B>
constexpr auto mul(const A& a, const B& b) { return detail::make<ops::mul>(a, b); }
template <class A, class B>
constexpr auto div(const A& a, const B& b) { return detail::make<ops::div>(a, b); }

}  // namespace kiln
