#pragma once
// kiln::grad(loss, params...): reverse accumulation at compile time.
//
// The unique nodes of the loss are visited once each, from the loss back to the leaves (the reverse of their
// topological order). Each node's adjoint is the sum of the contributions of its users, and each contribution
// comes from the op's own gradient rule in the vocabulary, built with the same graph constructors as user code, so
// it is folded and simplified: the gradient of x * 2_c with respect to x is the type of 2_c. Adjoints are
// expressions over the forward nodes, so a single run of the loss and its gradients shares every common
// subexpression, and the size of the result grows linearly with the number of unique nodes, not with depth.
//
// A rule's contribution has the shape of the node it comes from (or is uniform, such as a constant); an elementwise
// operand that was broadcast gets it summed back to its own shape (sum_to), which the shape keys of
// structural.hpp skip when the shapes are the same.
#include <tuple>

#include "structural.hpp"

namespace kiln {
namespace detail {

struct no_adjoint {};

template <class A, class B>
constexpr auto accumulate(const A& a, const B& b) {
    if constexpr (std::is_same_v<A, no_adjoint>) return b;
    else return make<ops::add>(a, b);
}

// A rule's contribution for operand `a` of node `y`, in a's shape.
template <class C, class A, class Y>
constexpr auto to_operand(const C& c, const A& a, const Y& y) {
    if constexpr (structural_op<typename Y::op> || same_shape_v<A, Y>) return c;  // structural rules give a's shape
    else return detail::sum_to(detail::like(c, y), a);  // (qualified: no argument-dependent lookup, see below)
}

// The backward pass runs on types: every node and adjoint here is pure (empty), so only types need computing.
template <std::size_t K, class V, class Adj, class Seq = std::make_index_sequence<Adj::size>>
struct replace_at;
template <std::size_t K, class V, class... A, std::size_t... I>
struct replace_at<K, V, types<A...>, std::index_sequence<I...>> {
    using type = types<std::conditional_t<I == K, V, A>...>;
};

template <class E, std::size_t J>
using arg_type_t = std::remove_cvref_t<decltype(std::declval<const E&>().template arg<J>())>;

template <class List, class E, class Cs, class Adj, std::size_t J>
struct add_contribution {
    using A = arg_type_t<E, J>;
    using C = std::remove_cvref_t<std::tuple_element_t<J, Cs>>;
    template <class X = A, bool skip = std::is_same_v<C, no_grad> || !contains<X, List>::value>
    struct go {
        using type = Adj;
    };
    template <class X>
    struct go<X, false> {
        static constexpr std::size_t k = index_of<X, List>::value;
        using sum = decltype(detail::accumulate(typename at<k, Adj>::type{}, detail::to_operand(C{}, X{}, E{})));
        using type = typename replace_at<k, sum, Adj>::type;
    };
    using type = typename go<>::type;
};

template <class E, class G, std::size_t... J>
auto rule_of(std::index_sequence<J...>) -> decltype(E::op::gradient(arg_type_t<E, J>{}..., E{}, G{}));

// Propagates node I's adjoint to its operands.
template <class List, class Adj, std::size_t I>
struct backprop_node {
    using E = typename at<I, List>::type;
    using G = typename at<I, Adj>::type;
    template <class Acc, class Cs, std::size_t... J>
    struct fold {
        using type = Acc;
    };
    template <class Acc, class Cs, std::size_t J, std::size_t... Rest>
    struct fold<Acc, Cs, J, Rest...> {
        using type = typename fold<typename add_contribution<List, E, Cs, Acc, J>::type, Cs, Rest...>::type;
    };
    template <class Seq>
    struct all;
    template <std::size_t... J>
    struct all<std::index_sequence<J...>> {
        using Cs = decltype(rule_of<E, G>(std::index_sequence<J...>{}));
        using type = typename fold<Adj, Cs, J...>::type;
    };
    template <bool skip = is_leaf_v<E> || std::is_same_v<G, no_adjoint>, class = void>
    struct go {
        using type = Adj;
    };
    template <class V>
    struct go<false, V> {
        using type = typename all<std::make_index_sequence<E::arity>>::type;
    };
    using type = typename go<>::type;
};

template <class List, class Adj, std::size_t I>
struct backprop {
    using type = typename backprop<List, typename backprop_node<List, Adj, I - 1>::type, I - 1>::type;
};
template <class List, class Adj>
struct backprop<List, Adj, 0> {
    using type = Adj;
};

template <class Adj, class List, class P>
constexpr auto adjoint_of() {
    if constexpr (!contains<P, List>::value) {
        return constant<0>{};
    } else {
        using G = typename at<index_of<P, List>::value, Adj>::type;
        if constexpr (std::is_same_v<G, no_adjoint>) return constant<0>{};
        else return G{};
    }
}

// Every adjoint starts empty except the loss's: the seed 1, uniform (a non-scalar loss is summed).
template <std::size_t Root, class Seq>
struct seed_list;
template <std::size_t Root, std::size_t... I>
struct seed_list<Root, std::index_sequence<I...>> {
    using type = types<std::conditional_t<I == Root, constant<1>, no_adjoint>...>;
};

// The gradient of a constant loss: 0 for each parameter.
// (A struct, not an alias: nvcc's host-code generator expands an alias that ignores its argument and loses the pack.)
template <class>
struct zero_for {
    using type = constant<0>;
};

template <class Loss, class... Params>
constexpr auto gradients(const Loss&, const Params&...) {
    static_assert(is_graph_v<Loss>, "kiln::grad: the loss must be a graph-mode expression.");
    static_assert(is_pure<Loss>::value,
                  "kiln::grad: the loss holds a run-time scalar (such as 0.5f * x); write it as a constant (0.5_c) "
                  "or feed it as an input, so that the compiler can tell the loss's nodes apart.");
    static_assert(((is_leaf_v<Params> || is_node_v<Params>) && ...),
                  "kiln::grad: differentiate with respect to inputs, parameters or nodes of the loss.");
    using List = unique_nodes_t<Loss>;
    if constexpr (!contains<Loss, List>::value) {
        return grad_types<typename zero_for<Params>::type...>{};  // a constant loss
    } else {
        constexpr std::size_t N = List::size;
        constexpr std::size_t root = index_of<Loss, List>::value;
        using start = typename seed_list<root, std::make_index_sequence<N>>::type;
        using adj = typename backprop<List, start, N>::type;
        // Adjoints are pure: their types are their values (see detail::grad_types on building tuples of them). A rule
        // that put a C++ number into an adjoint would lose its value here, so it is refused.
        static_assert((is_pure<decltype(adjoint_of<adj, List, Params>())>::value && ...),
                      "kiln::grad: an op's gradient rule holds a run-time number (such as g * 3.0); graph-mode "
                      "gradients are types, so write the rule's constants as kiln constants (3_c, kiln::c<1, 2>).");
        return grad_types<decltype(adjoint_of<adj, List, Params>())...>{};
    }
}

// The gradients as a std::tuple (kiln::grad's result for several parameters).
template <class... G>
constexpr std::tuple<G...> as_tuple(grad_types<G...>) {
    return {};
}

}  // namespace detail

// The gradients of `loss` with respect to each of `params` as graph-mode expressions: one expression for one
// parameter, a std::tuple for several. A non-scalar loss is summed first (as tf.gradients does).
template <class Loss, class... Params>
constexpr auto grad(const Loss& loss, const Params&... params) {
    static_assert(sizeof...(Params) > 0, "kiln::grad: name at least one input or parameter to differentiate by.");
    using all = decltype(detail::gradients(loss, params...));  // detail::grad_types: types only
    if constexpr (sizeof...(Params) == 1) return typename std::tuple_element<0, all>::type{};
    else return detail::as_tuple(all{});
}

}  // namespace kiln
