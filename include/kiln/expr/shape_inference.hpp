#pragma once
// Run-time shapes of a graph's nodes, so that a mismatch names the op where it happens.
#include <array>
#include <string>

#include "feed.hpp"

namespace kiln::detail {

// Shapes are computed once per unique node, in topological order (as values are in a frame), so a graph whose
// subtrees are shared, such as a residual chain or a gradient, costs time linear in its unique nodes. Only nodes
// that are not listed (those holding run-time scalars, and constant subtrees) are walked in place.
// dims leaves the extents past its rank uninitialized (on purpose: it is copied on hot paths), and GCC's
// -Wmaybe-uninitialized then flags the copies into the frame.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class LeafList, class List, class Bound>
struct shape_frame {
    std::array<dims, List::size> s;

    explicit shape_frame(const Bound& bound) {
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            (compute<K>(bound), ...);
        }(std::make_index_sequence<List::size>{});
    }

    template <std::size_t K>
    void compute(const Bound& bound) {
        using E = typename at<K, List>::type;
        if constexpr (is_leaf_v<E>) s[K] = std::get<index_of<E, LeafList>::value>(bound).shape;
        else s[K] = of_node(E{});  // a listed node is pure: its type is its value
    }

    // The shape of any part of the graph: a listed node's from the frame.
    template <class E>
    dims of(const E& e) const {
        if constexpr (contains<E, List>::value) return s[index_of<E, List>::value];
        else if constexpr (is_node_v<E>) return of_node(e);
        else return dims{};  // constants and scalars are rank 0
    }

    // A node's shape from its operands' shapes, checked by the op's broadcasting rule.
    template <class E>
    dims of_node(const E& e) const {
        using op = typename E::op;
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
            dims out = of(e.template arg<0>());
            ((out = broadcast_shapes(out, of(e.template arg<J + 1>()), op::name)), ...);
            return out;
        }(std::make_index_sequence<E::arity - 1>{});
    }
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <class LeafList, class E, class Bound>
dims infer_shape(const E& e, const Bound& bound) {
    if constexpr (is_leaf_v<E>) {
        return std::get<index_of<E, LeafList>::value>(bound).shape;
    } else {
        return shape_frame<LeafList, unique_nodes_t<E>, Bound>(bound).of(e);
    }
}

// The shape of the roots' common loop, checked op by op only when the leaves' shapes differ.
template <class LeafList, class Bound, class... Roots>
dims output_shape(const Bound& bound, const Roots&... roots) {
    constexpr std::size_t n = std::tuple_size_v<Bound>;
    // Every root with a leaf has the leaves' common shape when they all agree; a root without one (a constant, or
    // run-time scalars only) is rank 0 and needs the general rule.
    if constexpr (n > 0 && ((leaves_t<unique_nodes_t<Roots>>::size > 0) && ...)) {
        bool same = true;
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            ((same = same && std::get<K>(bound).shape == std::get<0>(bound).shape), ...);
        }(std::make_index_sequence<n>{});
        if (same) return std::get<0>(bound).shape;
    }
    dims out;
    int i = 0;
    ((out = i++ == 0 ? infer_shape<LeafList>(roots, bound)
                     : broadcast_shapes(out, infer_shape<LeafList>(roots, bound), "fetch")),
     ...);
    return out;
}

}  // namespace kiln::detail
