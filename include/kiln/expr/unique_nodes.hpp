#pragma once
// Type-level planning: the unique pure nodes of one or more expressions in topological order, and their leaves.
// Two pure nodes of the same type compute the same value, so each is listed once (common subexpression
// elimination by type identity). Nodes that hold a run-time scalar are not pure and are never merged: 0.5f * x and
// 0.7f * x have one type but two values.
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "node.hpp"

namespace kiln::detail {

// Type identity without a variable template per pair of types: a graph's walk asks it of every listed node, and
// clang spends milliseconds on each std::is_same_v<T, U> of two deep node types (a new specialization each).
#if defined(__has_builtin)
#if __has_builtin(__is_same)
#define KILN_SAME_TYPE(T, U) __is_same(T, U)
#endif
#endif
#ifndef KILN_SAME_TYPE
#define KILN_SAME_TYPE(T, U) std::is_same_v<T, U>
#endif

template <class... Ts>
struct types {
    static constexpr std::size_t size = sizeof...(Ts);
};

template <class T, class List>
struct contains;
template <class T, class... Ts>
struct contains<T, types<Ts...>> : std::bool_constant<(KILN_SAME_TYPE(T, Ts) || ...)> {};

template <class List, class T>
struct append;
template <class... Ts, class T>
struct append<types<Ts...>, T> {
    using type = types<Ts..., T>;
};

// Position of T in List (List must contain T).
template <class T, class List>
struct index_of;
template <class T, class... Ts>
struct index_of<T, types<Ts...>> {
    static constexpr std::size_t value = [] {
        constexpr bool same[] = {KILN_SAME_TYPE(T, Ts)..., false};
        std::size_t i = 0;
        while (!same[i]) ++i;
        return i;
    }();
};

template <std::size_t I, class List>
struct at;
template <std::size_t I, class... Ts>
struct at<I, types<Ts...>> {
    using type = typename nth_type<I, Ts...>::type;
};

// A node is listed when it is pure and has an element type of its own (weak all-constant subtrees are evaluated in
// place, in the type of whatever uses them).
template <class E>
inline constexpr bool is_listed_v =
    is_leaf_v<E> || (is_node_v<E> && is_pure<E>::value && !std::is_same_v<value_type_t<E>, weak>);

// Post-order walk; a listed node already present is not walked again, so shared subtrees cost nothing.
// (Leaves are appended once; constants and scalars are not listed.)
template <class E, class List>
struct collect {
    using type = std::conditional_t<is_leaf_v<E> && !contains<E, List>::value, typename append<List, E>::type, List>;
};

template <class Acc, class... A>
struct collect_args {
    using type = Acc;
};
template <class Acc, class A, class... Rest>
struct collect_args<Acc, A, Rest...> {
    using type = typename collect_args<typename collect<A, Acc>::type, Rest...>::type;
};

// A node already listed is not walked again. (The walk must not even be named for it: naming collect_args<...>::type
// in both branches of a conditional instantiates it, and on a graph whose nodes are shared, such as a gradient, the
// walk would then grow exponentially with depth.)
template <bool Listed, class E, class List>
struct collect_node {
    using type = List;
};
template <class List, class Form>
struct collect_operands;
template <class List, class Op, class... A>
struct collect_operands<List, node_form<Op, A...>> : collect_args<List, A...> {};
template <class E, class List>
struct collect_node<false, E, List> {
    using walked = typename collect_operands<List, form_of<E>>::type;
    using type = std::conditional_t<is_listed_v<E>, typename append<walked, E>::type, walked>;
};

template <class N, class List>
    requires is_node_v<N>
struct collect<N, List> {
    using type = typename collect_node<contains<N, List>::value, N, List>::type;
};

template <class... Roots>
using unique_nodes_t = typename collect_args<types<>, Roots...>::type;

// The leaves among the unique nodes, in first-use order.
template <class List>
struct leaves_of;
template <class... Ts>
struct leaves_of<types<Ts...>> {
    template <class Acc, class T>
    using step = std::conditional_t<is_leaf_v<T>, typename append<Acc, T>::type, Acc>;
    template <class Acc, class... Rest>
    struct fold {
        using type = Acc;
    };
    template <class Acc, class T, class... Rest>
    struct fold<Acc, T, Rest...> {
        using type = typename fold<step<Acc, T>, Rest...>::type;
    };
    using type = typename fold<types<>, Ts...>::type;
};
template <class List>
using leaves_t = typename leaves_of<List>::type;

// Every node (listed or not) has element type T or bool: then the whole graph can run on batches of T.
template <class E, class T, class = void>
struct uniform_type : std::true_type {};
template <class L, class T>
    requires is_leaf_v<L>
struct uniform_type<L, T, void> : std::is_same<typename L::value_type, T> {};
template <class N, class T>
    requires is_node_v<N>
struct uniform_type<N, T, void> : uniform_type<form_of<N>, T> {};
template <class Op, class... A, class T>
struct uniform_type<node_form<Op, A...>, T>
    : std::bool_constant<(std::is_same_v<value_type_t<node_form<Op, A...>>, T> ||
                          std::is_same_v<value_type_t<node_form<Op, A...>>, bool> ||
                          std::is_same_v<value_type_t<node_form<Op, A...>>, weak>) &&
                         (uniform_type<A, T>::value && ...)> {};

}  // namespace kiln::detail
