#pragma once
// Graph-mode layers: functions of expressions that create their parameters by name.
//   auto h = kiln::layers::dense<"l1", 64>(x, kiln::nn::relu);   // params "l1/w" (in, 64) and "l1/b" (64,)
// (Eager layers are objects, kiln::nn::dense; a class and a function cannot share a name, so graph layers live here.)
#include "../graph/session.hpp"
#include "../graph/structural.hpp"
#include "activations.hpp"

namespace kiln::layers {

namespace detail {
template <class S>
struct last_extent {
    static constexpr std::ptrdiff_t value = dyn;
};
template <std::ptrdiff_t... D>
    requires(sizeof...(D) > 0)
struct last_extent<shape<D...>> {
    static constexpr std::ptrdiff_t value = std::array<std::ptrdiff_t, sizeof...(D)>{D...}[sizeof...(D) - 1];
};
}  // namespace detail

// activation(x @ w + b) with w = "Name/w" of shape (in, Units), Glorot uniform, and b = "Name/b" of shape (Units,),
// zeros; `in` is x's last static extent.
template <fixed_string Name, std::ptrdiff_t Units, class X, class Act = nn::identity_fn>
constexpr auto dense(const X& x, Act act = {}) {
    static_assert(is_graph_v<X>, "kiln::layers::dense: the input must be a graph-mode expression.");
    static_assert(Units > 0, "kiln::layers::dense: the number of units must be positive.");
    using S = kiln::detail::shape_of_t<X>;
    constexpr std::ptrdiff_t in = detail::last_extent<S>::value;
    static_assert(in != dyn && in > 0,
                  "kiln::layers::dense: the input's last dimension (its features) must be static, as in "
                  "kiln::input<\"x\", float, kiln::shape<kiln::dyn, 10>>.");
    using T = kiln::detail::value_type_t<X>;
    using W = param<join<Name, "/w">, T, shape<in, Units>, init::glorot_uniform>;
    using B = param<join<Name, "/b">, T, shape<Units>, init::zeros>;
    return act(kiln::matmul(x, W{}) + B{});
}

}  // namespace kiln::layers
