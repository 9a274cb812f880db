#pragma once
// An expression with its leaves renamed by position (indexed_leaf<k> for the k-th leaf of a list): what a GPU
// kernel is instantiated on. nvcc's host-code generator cannot spell a string template argument (a leaf's name) in a
// kernel's name.
#include "build.hpp"
#include "unique_nodes.hpp"

namespace kiln {
namespace detail {

// E with each leaf L replaced by indexed_leaf<position of L in Leaves>; other nodes and values are kept.
template <class Leaves, class E>
constexpr auto anonymize(const E& e) {
    if constexpr (is_leaf_v<E>) {
        return indexed_leaf<index_of<E, Leaves>::value, typename E::value_type>{};
    } else if constexpr (is_node_v<E>) {
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
            return make_node<typename E::op>(anonymize<Leaves>(e.template arg<J>())...);
        }(std::make_index_sequence<E::arity>{});
    } else {
        return e;
    }
}

}  // namespace detail
}  // namespace kiln
