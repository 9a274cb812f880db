#pragma once
// Run-time shapes of a graph's nodes, so that a mismatch names the op where it happens.
#include <string>

#include "feed.hpp"

namespace kiln::detail {

template <class LeafList, class E, class Bound>
dims infer_shape(const E& e, const Bound& bound) {
    if constexpr (is_leaf_v<E>) {
        return std::get<index_of<E, LeafList>::value>(bound).shape;
    } else if constexpr (is_node_v<E>) {
        using op = typename E::op;
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
            dims out;
            ((out = J == 0 ? infer_shape<LeafList>(e.template arg<J>(), bound)
                           : broadcast_shapes(out, infer_shape<LeafList>(e.template arg<J>(), bound), op::name)),
             ...);
            return out;
        }(std::make_index_sequence<E::arity>{});
    } else {
        return dims{};  // constants and scalars are rank 0
    }
}

// The shape of the roots' common loop, checked op by op only when the leaves' shapes differ.
template <class LeafList, class Bound, class... Roots>
dims output_shape(const Bound& bound, const Roots&... roots) {
    constexpr std::size_t n = std::tuple_size_v<Bound>;
    if constexpr (n > 0) {
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
