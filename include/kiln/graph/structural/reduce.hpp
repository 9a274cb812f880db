#pragma once
// Graph mode's reductions: kiln::sum, mean, prod, max, min over compile-time axes, with or without kept
// dimensions. The ops themselves (shape rule, kernel, gradient) are ops::reduce<K> and ops::count in ops/reduce.hpp;
// here they become nodes whose type holds their attributes.
#include "common.hpp"

namespace kiln {

namespace detail {

// The attributes of kiln::sum<Axes...>(x) (and keep_dims), as graph mode writes them.
template <bool Keep, int... Axes>
constexpr ops::reduce_attrs graph_reduce_attrs() {
    static_assert(sizeof...(Axes) <= max_rank, "kiln: a reduction names more axes than a tensor can have.");
    ops::reduce_attrs a;
    ((a.axes[static_cast<std::size_t>(a.naxes++)] = Axes), ...);
    a.keepdims = Keep;
    return a;
}

template <ops::reduction K, ops::reduce_attrs A, class E>
constexpr auto make_reduce(const E& e) {
    static_assert(is_graph_v<E>, "kiln: graph-mode reductions take a graph-mode expression.");
    static_assert(!std::is_same_v<value_type_t<E>, weak>,
                  "kiln: reduce an expression with an element type (a constant alone has no shape to reduce).");
    static_assert(K != ops::reduction::mean || std::is_floating_point_v<value_type_t<E>>,
                  "kiln::mean: graph-mode means take floating-point expressions; cast first.");
    return structural<ops::with_attrs<ops::reduce<K>, A>>(e);
}

template <ops::reduce_attrs A, class R>
constexpr auto reduced_count(const R& ref) {
    return structural<ops::with_attrs<ops::count, A>>(ref);
}

}  // namespace detail

// Graph-mode reductions: kiln::sum(x) over all axes, kiln::sum<0>(x) over axis 0, kiln::mean<-1>(x, kiln::keep_dims).
#define KILN_GRAPH_REDUCTION(fn, kind)                                                                             \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e) {                                                                                 \
        return detail::make_reduce<ops::reduction::kind, detail::graph_reduce_attrs<false, Axes...>()>(e);                  \
    }                                                                                                               \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e, keep_dims_t) {                                                                    \
        return detail::make_reduce<ops::reduction::kind, detail::graph_reduce_attrs<true, Axes...>()>(e);                   \
    }
KILN_GRAPH_REDUCTION(sum, sum)
KILN_GRAPH_REDUCTION(mean, mean)
KILN_GRAPH_REDUCTION(prod, prod)
KILN_GRAPH_REDUCTION(max, max)
KILN_GRAPH_REDUCTION(min, min)
#undef KILN_GRAPH_REDUCTION

// Whether any (all) element over Axes is nonzero, as bool (NaN counts as nonzero); every axis when none. An empty
// reduction gives false for any and true for all, as in NumPy: both count the elements that decide.
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto any(const E& e) {
    return kiln::greater(kiln::sum<Axes...>(kiln::cast<std::int64_t>(kiln::not_equal(e, c<0>))), c<0>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto any(const E& e, keep_dims_t) {
    return kiln::greater(kiln::sum<Axes...>(kiln::cast<std::int64_t>(kiln::not_equal(e, c<0>)), keep_dims), c<0>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto all(const E& e) {
    return kiln::equal(kiln::sum<Axes...>(kiln::cast<std::int64_t>(kiln::equal(e, c<0>))), c<0>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto all(const E& e, keep_dims_t) {
    return kiln::equal(kiln::sum<Axes...>(kiln::cast<std::int64_t>(kiln::equal(e, c<0>)), keep_dims), c<0>);
}

// The position of the first maximum (minimum) along Axis, int64: kiln::argmax<1>(x), kiln::argmin<0>(x,
// kiln::keep_dims). No gradient flows through it.
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argmax(const E& e) {
    return detail::structural<ops::with_attrs<ops::arg_reduce<true>, ops::arg_attrs{Axis, false}>>(e);
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argmax(const E& e, keep_dims_t) {
    return detail::structural<ops::with_attrs<ops::arg_reduce<true>, ops::arg_attrs{Axis, true}>>(e);
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argmin(const E& e) {
    return detail::structural<ops::with_attrs<ops::arg_reduce<false>, ops::arg_attrs{Axis, false}>>(e);
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argmin(const E& e, keep_dims_t) {
    return detail::structural<ops::with_attrs<ops::arg_reduce<false>, ops::arg_attrs{Axis, true}>>(e);
}

// Graph-mode variance and standard deviation over Axes (every axis when none), unbiased (dividing by N - 1, as
// torch.var and eager mode's default): kiln::var<1>(x), kiln::std<1>(x, kiln::keep_dims). Differentiable through
// the vocabulary's own mean, sum and sqrt.
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto var(const E& e) {
    const auto d = e - kiln::mean<Axes...>(e, keep_dims);
    return kiln::sum<Axes...>(kiln::square(d)) / (detail::reduced_count<detail::graph_reduce_attrs<false, Axes...>()>(e) - c<1>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto var(const E& e, keep_dims_t) {
    const auto d = e - kiln::mean<Axes...>(e, keep_dims);
    return kiln::sum<Axes...>(kiln::square(d), keep_dims) / (detail::reduced_count<detail::graph_reduce_attrs<false, Axes...>()>(e) - c<1>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto std(const E& e) {
    return kiln::sqrt(kiln::var<Axes...>(e));
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto std(const E& e, keep_dims_t) {
    return kiln::sqrt(kiln::var<Axes...>(e, keep_dims));
}

}  // namespace kiln
