#pragma once
// The activations of the vocabulary: sigmoid, relu (and relu_backward, its gradient as one op), softplus, silu,
// gelu, elu, leaky_relu and clamp.
#include "binary_math.hpp"
#include "math.hpp"

namespace kiln {
namespace ops {

struct sigmoid {
    static constexpr std::string_view name = "sigmoid";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    // 1 / (1 + exp(-x)): exp overflows to infinity for very negative x and the result is then exactly 0.
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        const A one = detail::kernels::one_like(a);
        return one / (one + ops::exp::apply(-a));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g) { return detail::grads(g * y * (c<1> - y)); }
};

struct relu {
    static constexpr std::string_view name = "relu";
    static constexpr int arity = 1;
    // NaN propagates: relu(NaN) is NaN, and relu(-0) is +0, as in NumPy's maximum(x, 0) and IEEE 754's maximum.
    // On batches, max(0, a) is one instruction (maxps returns its second operand, a, when either is NaN, and a
    // for a == -0, exactly like the scalar select); adding 0 then turns -0 into +0 and keeps NaN.
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        const A zero = detail::kernels::zero_like(a);
        if constexpr (requires { A::size; }) {
            return max(zero, a) + zero;
        } else {
            using detail::kernels::select;
            if constexpr (std::is_floating_point_v<A>) return select(a < zero, zero, a) + zero;
            else return select(a < zero, zero, a);
        }
    }
    static constexpr detail::rational fold(detail::rational a) { return a.num < 0 ? detail::rational{0, 1, a.ok} : a; }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return detail::grads(kiln::relu_backward(g, a));
    }
};

// relu's gradient as one op (TensorFlow's ReluGrad): relu_backward(g, x) is g where x > 0 and 0 elsewhere (a NaN x
// gives 0), exactly where(x > 0, g, 0), but one vectorized loop of one floating type with no bool mask between
// two loops, so that function mode fuses it and eager mode runs one op.
struct relu_backward {
    static constexpr std::string_view name = "relu_backward";
    static constexpr int arity = 2;
    template <class G, class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const G& g, const A& a) {
        using detail::kernels::select;
        return select(detail::kernels::zero_like(a) < a, g, detail::kernels::zero_like(g));
    }
    // x only selects: no gradient flows to it (its derivative is 0 wherever it is defined).
    template <class G, class A, class Y, class GY>
    static constexpr auto gradient(const G&, const A& a, const Y&, const GY& gy) {
        return detail::grads(kiln::relu_backward(gy, a), detail::no_grad{});
    }
};

// Smooth activations of the vocabulary.
// softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)) so that it neither overflows for large x
// nor loses digits for very negative x.
struct softplus {
    static constexpr std::string_view name = "softplus";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using std::log1p;
        using detail::kernels::abs;
        const auto x = detail::kernels::floating_of(a);
        return relu::apply(x) + log1p(ops::exp::apply(-abs(x)));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return detail::grads(g * kiln::sigmoid(a)); }
};

// silu(x) = x * sigmoid(x) (also called swish).
struct silu {
    static constexpr std::string_view name = "silu";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        const auto x = detail::kernels::floating_of(a);
        return x * sigmoid::apply(x);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        // sigmoid(x) + x sigmoid(x) (1 - sigmoid(x)) = s + y (1 - s)
        return detail::grads(g * (kiln::sigmoid(a) + y * (c<1> - kiln::sigmoid(a))));
    }
};

// gelu(x) = x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2))): the exact form (PyTorch's default), not the tanh
// approximation.
struct gelu {
    static constexpr std::string_view name = "gelu";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        const auto x = detail::kernels::floating_of(a);
        using X = std::remove_const_t<decltype(x)>;
        // 0.5 x erfc(-x / sqrt 2), not 0.5 x (1 + erf(x / sqrt 2)): for x below about -4, 1 + erf(...) cancels to
        // 0 in float32 while erfc keeps its relative accuracy in the tail (gelu(-6) is about -5.9e-9, not 0).
        using std::erfc;
        const X half(0.5), mrsqrt2(-0.70710678118654752440084436210484903928);
        return detail::kernels::with_nan_of(x, half * x * erfc(detail::kernels::saturated(x * mrsqrt2, -10.0, 30.0)));
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        // Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
        return detail::grads(g * (c<1, 2> * (c<1> + kiln::erf(c<70710678118654752, 100000000000000000> * a)) +
                                  c<3989422804014327, 10000000000000000> * a *
                                      kiln::exp(kiln::neg(c<1, 2> * kiln::square(a)))));
    }
};

// elu(x) = x for x > 0, exp(x) - 1 otherwise (alpha 1, PyTorch's default).
struct elu {
    static constexpr std::string_view name = "elu";
    static constexpr int arity = 1;
    static constexpr bool promotes_to_floating = true;
    template <class A>
    KILN_HD KILN_INLINE static auto apply(const A& a) {
        using detail::kernels::select;
        const auto x = detail::kernels::floating_of(a);
        const auto zero = detail::kernels::zero_like(x);
        return select(x > zero, x, ops::expm1::apply(x));  // expm1 keeps -0 (elu(-0) is -0) and NaN
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(kiln::where(a > c<0>, g, g * (y + c<1>)));
    }
};

// leaky_relu(x, slope) = x for x >= 0, slope * x otherwise (PyTorch's default slope is 0.01).
struct leaky_relu {
    static constexpr std::string_view name = "leaky_relu";
    static constexpr int arity = 2;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const B& slope) {
        using detail::kernels::select;
        const A zero = detail::kernels::zero_like(a);
        return select(a < zero, A(a * slope), a);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& slope, const Y&, const G& g) {
        return detail::grads(kiln::where(a < c<0>, g * slope, g), kiln::where(a < c<0>, g * a, c<0>));
    }
};

// clamp(x, lo, hi) = min(max(x, lo), hi): NaN propagates from x; a gradient flows to x inside [lo, hi] and to the
// bound that was taken outside it.
struct clamp {
    static constexpr std::string_view name = "clamp";
    static constexpr int arity = 3;
    template <class A, class L, class H>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a, const L& lo, const H& hi) {
        return minimum::apply(maximum::apply(a, lo), hi);
    }
    template <class A, class L, class H, class Y, class G>
    static constexpr auto gradient(const A& a, const L& lo, const H& hi, const Y&, const G& g) {
        return detail::grads(kiln::where(kiln::logical_and(a >= lo, a <= hi), g, c<0>),
                             kiln::where(a < lo, g, c<0>), kiln::where(a > hi, g, c<0>));
    }
};

}  // namespace ops

template <class A> constexpr auto softplus(const A& a) { return detail::make<ops::softplus>(a); }
template <class A> constexpr auto silu(const A& a) { return detail::make<ops::silu>(a); }
template <class A> constexpr auto gelu(const A& a) { return detail::make<ops::gelu>(a); }
template <class A> constexpr auto elu(const A& a) { return detail::make<ops::elu>(a); }
template <class A> constexpr auto sigmoid(const A& a) { return detail::make<ops::sigmoid>(a); }
template <class A> constexpr auto relu(const A& a) { return detail::make<ops::relu>(a); }
template <class G, class A> constexpr auto relu_backward(const G& g, const A& a) { return detail::make<ops::relu_backward>(g, a); }
// The slope is a number (a run-time scalar, or a constant such as kiln::c<1, 100>).
template <class A, class S = constant<1, 100>>
constexpr auto leaky_relu(const A& a, const S& slope = {}) { return detail::make<ops::leaky_relu>(a, slope); }
template <class A, class L, class H>
constexpr auto clamp(const A& a, const L& lo, const H& hi) { return detail::make<ops::clamp>(a, lo, hi); }
// NumPy's name for clamp.
template <class A, class L, class H>
constexpr auto clip(const A& a, const L& lo, const H& hi) { return detail::make<ops::clamp>(a, lo, hi); }

}  // namespace kiln
