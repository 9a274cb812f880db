#pragma once
// Reductions: kiln::sum, mean, max, min over compile-time axes, with or without kept dimensions; and count, the
// number of folded elements that mean's gradient divides by.
#include "common.hpp"

namespace kiln {

namespace ops {

template <reduction K, bool Keep, int... Axes>
struct reduce {
    static constexpr std::string_view name = K == reduction::sum    ? "sum"
                                             : K == reduction::mean ? "mean"
                                             : K == reduction::max  ? "max"
                                                                    : "min";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    template <class A>
    static A apply(const A&);  // the element type; never called
    template <class S>
    using static_shape = typename detail::reduced_static_shape<S, Keep, Axes...>::type;

    // x's shape with the reduced dimensions set to 1.
    static dims keep_shape(const dims& x) {
        const detail::axis_mask m = detail::make_axis_mask<Axes...>(x.rank);
        if (!m.ok)
            throw shape_error("kiln: shape_error in '" + std::string(name) + "': axis " + std::to_string(m.bad) +
                              " is out of range for shape " + to_string(x));
        dims k = x;
        for (int i = 0; i < x.rank; ++i)
            if (m.reduced[i]) k[i] = 1;
        return k;
    }
    static dims shape(const dims& x) {
        const dims k = keep_shape(x);
        if constexpr (Keep) return k;
        const detail::axis_mask m = detail::make_axis_mask<Axes...>(x.rank);
        dims out;
        out.rank = 0;
        for (int i = 0; i < x.rank; ++i)
            if (!m.reduced[i]) out[out.rank++] = x[i];
        return out;
    }

    template <class Device, class T>
    static void compute(T* out, const dims& out_shape, const detail::strided<const T>& x) {
        const dims keep = keep_shape(x.shape);
        const std::ptrdiff_t m = out_shape.size();
        const std::ptrdiff_t count = m == 0 ? 0 : x.shape.size() / m;
        constexpr detail::fold_kind kind = K == reduction::max   ? detail::fold_kind::max
                                           : K == reduction::min ? detail::fold_kind::min
                                                                 : detail::fold_kind::sum;
        if constexpr (K == reduction::max || K == reduction::min) {
            if (count == 0 && m > 0)
                throw value_error("kiln: value_error in '" + std::string(name) + "': cannot reduce over an empty dimension (shape " +
                                  to_string(x.shape) + ")");
        }
        Device::reduce(kind, x, keep, out, K == reduction::mean, count);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& x, const Y& y, const G& g) {
        const auto gx = detail::like(detail::expand<Keep, Axes...>(g, x), x);
        if constexpr (K == reduction::sum) {
            return detail::grads(gx);
        } else if constexpr (K == reduction::mean) {
            return detail::grads(gx / detail::reduced_count<Axes...>(x));
        } else {
            // Ties share the gradient equally, as in eager mode.
            using T = detail::value_type_t<A>;
            const auto hit = kiln::cast<T>(kiln::equal(x, detail::like(detail::expand<Keep, Axes...>(y, x), x)));
            const auto ties = detail::make_reduce<reduction::sum, Keep, Axes...>(hit);
            return detail::grads(gx * hit / detail::like(detail::expand<Keep, Axes...>(ties, x), x));
        }
    }
};

// The number of elements a reduction over Axes folds together, as a rank-0 value (mean's gradient divides by it).
template <int... Axes>
struct count {
    static constexpr std::string_view name = "count";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 0;
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = shape<>;
    static dims shape(const dims&) { return dims{}; }
    template <class Device, class T>
    static void compute(T* out, const dims&, const detail::strided<const T>& x) {
        const dims keep = reduce<reduction::sum, true, Axes...>::keep_shape(x.shape);
        const std::ptrdiff_t m = keep.size();
        out[0] = static_cast<T>(m == 0 ? 0 : x.shape.size() / m);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G&) { return detail::grads(detail::no_grad{}); }
};

}  // namespace ops

namespace detail {

template <int... Axes, class R>
constexpr auto reduced_count(const R& ref) {
    return structural<ops::count<Axes...>>(ref);
}

template <ops::reduction K, bool Keep, int... Axes, class E>
constexpr auto make_reduce(const E& e) {
    static_assert(is_graph_v<E>, "kiln: graph-mode reductions take a graph-mode expression.");
    static_assert(!std::is_same_v<value_type_t<E>, weak>,
                  "kiln: reduce an expression with an element type (a constant alone has no shape to reduce).");
    static_assert(K != ops::reduction::mean || std::is_floating_point_v<value_type_t<E>>,
                  "kiln::mean: graph-mode means take floating-point expressions; cast first.");
    return structural<ops::reduce<K, Keep, Axes...>>(e);
}

}  // namespace detail

// Graph-mode reductions: kiln::sum(x) over all axes, kiln::sum<0>(x) over axis 0, kiln::mean<-1>(x, kiln::keep_dims).
#define KILN_GRAPH_REDUCTION(fn, kind)                                                                             \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e) {                                                                                 \
        return detail::make_reduce<ops::reduction::kind, false, Axes...>(e);                                        \
    }                                                                                                               \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e, keep_dims_t) {                                                                    \
        return detail::make_reduce<ops::reduction::kind, true, Axes...>(e);                                         \
    }
KILN_GRAPH_REDUCTION(sum, sum)
KILN_GRAPH_REDUCTION(mean, mean)
KILN_GRAPH_REDUCTION(max, max)
KILN_GRAPH_REDUCTION(min, min)
#undef KILN_GRAPH_REDUCTION

// Graph-mode variance and standard deviation over Axes (every axis when none), unbiased (dividing by N - 1, as
// torch.var and eager mode's default): kiln::var<1>(x), kiln::std<1>(x, kiln::keep_dims). Differentiable through
// the vocabulary's own mean, sum and sqrt.
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto var(const E& e) {
    const auto d = e - kiln::mean<Axes...>(e, keep_dims);
    return kiln::sum<Axes...>(kiln::square(d)) / (detail::reduced_count<Axes...>(e) - c<1>);
}
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto var(const E& e, keep_dims_t) {
    const auto d = e - kiln::mean<Axes...>(e, keep_dims);
    return kiln::sum<Axes...>(kiln::square(d), keep_dims) / (detail::reduced_count<Axes...>(e) - c<1>);
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
