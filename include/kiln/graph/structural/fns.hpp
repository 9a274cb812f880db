#pragma once
// Graph mode's side of the mode-neutral structural ops (ops/structural.hpp): the helpers their gradient rules call.
#include "matmul.hpp"
#include "reduce.hpp"
#include "scan.hpp"

namespace kiln {
namespace ops {

// Graph mode's structural helpers for the mode-neutral gradient rules (ops/structural.hpp). Attributes come as
// attrs_c<value>: a graph node's attributes are part of its type.
template <class V>
    requires is_graph_v<V>
struct structural_fns<V, void> {
    template <class G, class R>
    static constexpr auto like(const G& g, const R& ref) {
        return detail::like(g, ref);
    }
    template <reduce_attrs A, class G, class R>
    static constexpr auto unreduce(attrs_c<A>, const G& g, const R& ref) {
        return detail::like(detail::expand<A>(g, ref), ref);
    }
    template <reduction K, reduce_attrs A, class X>
    static constexpr auto reduce(attrs_c<A>, const X& x) {
        return detail::make_reduce<K, A>(x);
    }
    template <reduce_attrs A, class R>
    static constexpr auto count(attrs_c<A>, const R& ref) {
        return detail::reduced_count<A>(ref);
    }
    template <class X, class R>
    static constexpr auto cast_like(const X& x, const R&) {
        return kiln::cast<detail::value_type_t<R>>(x);
    }
    // Graph mode multiplies matrices only: there is no batch to sum over.
    template <class G, class R>
    static constexpr const G& sum_batches_to(const G& g, const R&) {
        return g;
    }
    template <class X, class Y>
    static constexpr auto matmul(const X& x, const Y& y) {
        return detail::structural<matrix_product>(x, y);
    }
    template <scan_kind K, scan_attrs A, class X>
    static constexpr auto scan(attrs_c<A>, const X& x) {
        return detail::structural<with_attrs<ops::scan<K>, A>>(x);
    }
    // Any mode-neutral op with attributes (flip, tile, pad, gathers and their gradients' ops).
    template <class Op, auto A, class... X>
    static constexpr auto apply(attrs_c<A>, const X&... x) {
        return detail::structural<with_attrs<Op, A>>(x...);
    }
    template <class X>
    static constexpr auto matrix_transpose(const X& x) {
        return kiln::transpose(x);  // a matrix: its axes reversed
    }
};

}  // namespace ops

}  // namespace kiln
