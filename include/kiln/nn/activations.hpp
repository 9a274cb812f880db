#pragma once
// Activations as values, usable in both modes: kiln::nn::dense(10, 64, kiln::nn::relu) in eager mode and
// kiln::layers::dense<"l1", 64>(x, kiln::nn::relu) in graph mode.
#include "../ops/ops.hpp"

namespace kiln::nn {

struct identity_fn {
    template <class X>
    constexpr X operator()(const X& x) const { return x; }
};
struct relu_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::relu(x); }
};
struct sigmoid_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::sigmoid(x); }
};
struct tanh_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::tanh(x); }
};

// The vocabulary's newer activations, as values for layers.
struct softplus_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::softplus(x); }
};
struct silu_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::silu(x); }
};
struct gelu_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::gelu(x); }
};
struct elu_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::elu(x); }
};
struct leaky_relu_fn {
    template <class X>
    constexpr auto operator()(const X& x) const { return kiln::leaky_relu(x); }
};

inline constexpr softplus_fn softplus{};
inline constexpr silu_fn silu{};
inline constexpr gelu_fn gelu{};
inline constexpr elu_fn elu{};
inline constexpr leaky_relu_fn leaky_relu{};
inline constexpr identity_fn identity{};
inline constexpr relu_fn relu{};
inline constexpr sigmoid_fn sigmoid{};
inline constexpr tanh_fn tanh{};

}  // namespace kiln::nn
