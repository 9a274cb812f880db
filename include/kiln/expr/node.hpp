#pragma once
// Graph-mode expression nodes: leaves (inputs, params), run-time scalars and op nodes.
// Nodes hold their children by value and leaves hold nothing, so an expression never dangles and is trivially
// copyable into a GPU kernel.
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "../core/config.hpp"
#include "../core/constant.hpp"
#include "../core/dtype.hpp"
#include "../core/fixed_string.hpp"
#include "../core/shape.hpp"
#include "../ops/cast.hpp"

namespace kiln {

namespace detail {

// What "x"_in = data makes: the input and the caller's data for one run (expr/feed.hpp). A feed refers to a
// container it is given as an lvalue or as a temporary that owns its data (a std::vector: the temporary lives to the
// end of the call it is written in); a temporary handle to data elsewhere (a kiln::view, a std::span, a
// kiln::tensor) is copied into the feed, so a feed kept in a variable (`auto f = "x"_in = kiln::view(p, {n});`)
// stays valid as long as the data it points at.
template <class Leaf, class Container, bool Held = false>
struct feed;

// A handle that a feed holds by value when it is given as a temporary: kiln::view_t and kiln::tensor (found by
// their members, as fill_strided finds them) and std::span.
template <class C>
struct feed_holds_value
    : std::bool_constant<requires(const C& c) {
          c.dtype();
          c.raw_data();
          c.device();
      } || (requires(const C& c) {
          c.strides;
          c.shape;
          c.data;
      } && !requires(const C& c) { c.size(); })> {};
template <class T, std::size_t E>
struct feed_holds_value<std::span<T, E>> : std::true_type {};
struct input_kind {};
struct param_kind {};
// A parameter's kind also names how a kiln::session initializes it (kiln::init::zeros, glorot_uniform, ...).
template <class Init>
struct param_kind_with : param_kind {
    using initializer = Init;
};

// Leaves are recognised by this base rather than by matching leaf<Name, ...>: nvcc cannot deduce a class-type
// template argument in a partial specialization.
struct leaf_base {};

template <fixed_string Name, class T, class Shape, class Kind>
struct leaf : leaf_base {
    static_assert(is_dtype_v<T>, "kiln: a leaf's element type must be bool, int32_t, int64_t, float or double.");
    using value_type = T;
    using shape_type = Shape;
    using kind = Kind;
    static constexpr fixed_string name = Name;

    // "x"_in = data: binds data to this leaf for one run.
    template <class Container>
    constexpr feed<leaf, Container> operator=(const Container& c) const noexcept {
        return feed<leaf, Container>{&c};
    }
    template <class Container>
        requires(!std::is_lvalue_reference_v<Container> && feed_holds_value<std::remove_cv_t<Container>>::value)
    constexpr feed<leaf, std::remove_cv_t<Container>, true> operator=(Container&& c) const {
        return feed<leaf, std::remove_cv_t<Container>, true>{std::move(c)};
    }
};
}  // namespace detail

// An input, fed at each run: kiln::input<"x", float, kiln::shape<kiln::dyn, 10>>.
template <fixed_string Name, class T = float, class Shape = dynamic>
using input = detail::leaf<Name, T, Shape, detail::input_kind>;

namespace init {
struct zeros;
}

// A parameter: state, fed or owned by a kiln::session, which initializes it from its static shape with Init.
template <fixed_string Name, class T = float, class Shape = dynamic, class Init = init::zeros>
using param = detail::leaf<Name, T, Shape, detail::param_kind_with<Init>>;

template <class L>
inline constexpr bool is_param_v = std::is_base_of_v<detail::param_kind, typename L::kind>;

namespace detail {
// A leaf known by its position instead of its name: what eager mode and the Thrust lowering run.
template <std::size_t K, class T>
struct indexed_leaf : leaf_base {
    using value_type = T;
    using shape_type = dynamic;
    using kind = input_kind;
};
// Its position K (which operand it reads).
template <class L>
struct indexed_position;
template <std::size_t K, class T>
struct indexed_position<indexed_leaf<K, T>> {
    static constexpr std::size_t value = K;
};
}  // namespace detail

namespace detail {

// A run-time scalar (0.5f * x). It takes the element type of the tensor it meets, as in PyTorch.
template <class T>
struct scalar {
    T value;
};

// Storage for a node's children, by value.
// Empty children (leaves, constants, nodes made only of them) are not stored at all: a child is rebuilt from its
// type when asked for. Storing them, even as [[no_unique_address]] members, would not do: two subobjects of one
// type need two addresses, so a residual chain `h = h + relu(h)` grew to 2^depth bytes and its compile time
// exploded with it. An expression's size is that of the run-time scalars it holds.
template <class T>
inline constexpr bool stored_arg_v = !(std::is_empty_v<T> && std::is_trivially_default_constructible_v<T>);

template <std::size_t I, class T, bool Stored = stored_arg_v<T>>
struct arg_slot {
    T value;
};
template <std::size_t I, class T>
struct arg_slot<I, T, false> {};

// A stored child by reference, an empty one by value.
template <std::size_t I, class T, bool Stored>
KILN_HD constexpr std::conditional_t<Stored, const T&, T> get_arg(const arg_slot<I, T, Stored>& s) noexcept {
    if constexpr (Stored) return s.value;
    else return (void)s, T{};
}

// The I-th of a pack of types, without a chain of I instantiations (the frames and the gradient ask it of every
// node of a graph's unique-node list): clang's builtin where it exists, otherwise overload resolution against a
// class that derives from one (index, type) pair per element, one such class per pack.
#if defined(__clang__) && defined(__has_builtin)
#if __has_builtin(__type_pack_element)
#define KILN_TYPE_PACK_ELEMENT 1
#endif
#endif
#ifdef KILN_TYPE_PACK_ELEMENT
template <std::size_t I, class... Ts>
struct nth_type {
    using type = __type_pack_element<I, Ts...>;
};
#else
template <std::size_t I, class T>
struct indexed_type {
    using type = T;
};
template <class Seq, class... Ts>
struct indexed_types;
template <std::size_t... Is, class... Ts>
struct indexed_types<std::index_sequence<Is...>, Ts...> : indexed_type<Is, Ts>... {};
template <std::size_t I, class T>
indexed_type<I, T> pick_indexed(const indexed_type<I, T>&);  // never defined: only its type is used
template <std::size_t I, class... Ts>
struct nth_type {
    using type = typename decltype(pick_indexed<I>(
        std::declval<const indexed_types<std::index_sequence_for<Ts...>, Ts...>&>()))::type;
};
#endif

template <class Seq, class... Args>
struct arg_pack;

template <std::size_t... I, class... Args>
struct arg_pack<std::index_sequence<I...>, Args...> : arg_slot<I, Args>... {
    static constexpr std::size_t arity = sizeof...(Args);
    template <std::size_t J>
    using arg_type = typename nth_type<J, Args...>::type;

    template <std::size_t J>
    KILN_HD constexpr decltype(auto) arg() const noexcept {
        return detail::get_arg<J>(*this);
    }
};

// Copies the stored children into their slots (empty ones have none): what a node and a root_pack are built with.
template <std::size_t... I, class... Args>
KILN_HD constexpr void store_args(arg_pack<std::index_sequence<I...>, Args...>& p, const Args&... args) {
    ([&] {
        if constexpr (stored_arg_v<Args>) static_cast<arg_slot<I, Args>&>(p).value = args;
    }(), ...);
}

// The roots of one fused loop, stored like a node's children. (Not std::tuple: constructing a std::tuple of an
// expression type costs GCC time exponential in the depth of a graph with shared subtrees.)
template <class... Roots>
struct root_pack : arg_pack<std::index_sequence_for<Roots...>, Roots...> {
    static constexpr std::size_t size = sizeof...(Roots);
    constexpr root_pack() = default;
    KILN_HD constexpr explicit root_pack(const Roots&... roots) { store_args(*this, roots...); }
    template <std::size_t J>
    KILN_HD constexpr decltype(auto) get() const noexcept {
        return get_arg<J>(*this);
    }
};

// A node's type as a pattern: node_form<Op, A...>. Traits and overloads that take a node apart match its form,
// never the node type itself (see expression_node below). A form is only ever named, never built.
template <class Op, class... Args>
struct node_form {};
template <class F>
struct is_node_form : std::false_type {};
template <class Op, class... Args>
struct is_node_form<node_form<Op, Args...>> : std::true_type {};

}  // namespace detail

// An op applied to its operands: kiln::detail::node<Op, Args...>. Its operands (by value), `arity`, `arg<I>()` and
// `arg_type<I>` come from its base arg_pack; `op` is Op and `form` is node_form<Op, Args...>.
//
// A node's type is not a class template specialization node<Op, Args...>, because of what compilers do with such
// a type's template arguments, which for a graph with shared subtrees (h = h + tanh(h), and every gradient) are a
// tree of 2^depth leaves written out:
// - argument-dependent lookup, for every operator and unqualified call, visits the template arguments, theirs,
//   and so on down to the leaves; clang (14 and 19) does it without remembering the types it has seen;
// - clang names each class in its LLVM IR with its type written out in full (13 GB of IR for a depth-8 gradient).
// So a node is a local class of the function expression_node<Op, Args...>(): lookup does not visit the template
// arguments of its function, and it is written out as `node`, so both are linear in the number of unique nodes.
// (Its namespace, kiln, is where the operators are found.) nvcc does not accept a local type among the template
// arguments of a kernel, so there a node is the member class expression_node<Op, Args...>::type, which lookup
// does not walk either.
#if defined(__CUDACC__)
template <class Op, class... Args>
struct expression_node {
    struct type : detail::arg_pack<std::index_sequence_for<Args...>, Args...> {
        // Declared, so that a node is not an aggregate: `node{}` then value-initializes through each type's own
        // (memoized) constructor, where aggregate initialization would build an initializer for every subobject of
        // the whole expression tree, exponentially many for the shared subtrees of a gradient.
        constexpr type() = default;
        using op = Op;
        using form = detail::node_form<Op, Args...>;
    };
};
namespace detail {
template <class Op, class... Args>
using node = typename expression_node<Op, Args...>::type;
}  // namespace detail
#else
template <class Op, class... Args>
constexpr auto expression_node() {
    struct node : detail::arg_pack<std::index_sequence_for<Args...>, Args...> {
        constexpr node() = default;  // not an aggregate (see above)
        // ([[maybe_unused]]: GCC takes a local class's member types for local typedefs.)
        using op [[maybe_unused]] = Op;
        using form [[maybe_unused]] = detail::node_form<Op, Args...>;
    };
    return node{};
}
namespace detail {
template <class Op, class... Args>
using node = decltype(kiln::expression_node<Op, Args...>());
}  // namespace detail
#endif

namespace detail {

template <class Op, class... Args>
constexpr node<Op, Args...> make_node(const Args&... args) {
    node<Op, Args...> n{};
    detail::store_args(n, args...);
    return n;
}

}  // namespace detail

// Traits.
template <class T>
struct is_leaf : std::is_base_of<detail::leaf_base, T> {};
template <class T>
inline constexpr bool is_leaf_v = is_leaf<T>::value;

template <class T>
struct is_scalar_node : std::false_type {};
template <class T>
struct is_scalar_node<detail::scalar<T>> : std::true_type {};

// (Detected with void_t, not with a requires-expression: clang writes out the type of every failed requirement
// as text when it checks a constraint, and a node's form written out is a tree of 2^depth leaves.)
template <class T, class = void>
struct is_node : std::false_type {};
template <class T>
struct is_node<T, std::void_t<typename T::form>> : detail::is_node_form<typename T::form> {};
template <class T>
inline constexpr bool is_node_v = is_node<T>::value;

namespace detail {
// A node's form, what traits match: form_of<node<Op, A...>> is node_form<Op, A...>.
template <class N>
using form_of = typename N::form;
}  // namespace detail

template <class T>
inline constexpr bool is_graph_v = is_leaf_v<T> || is_node_v<T> || is_scalar_node<T>::value || is_constant_v<T>;

namespace detail {

template <class L>
    requires is_leaf_v<L>
struct mode_of<L, void> {
    static constexpr operand_mode value = operand_mode::graph;
};
template <class T>
struct mode_of<scalar<T>> {
    static constexpr operand_mode value = operand_mode::graph;
};
template <class N>
    requires is_node_v<N>
struct mode_of<N> {
    static constexpr operand_mode value = operand_mode::graph;
};

// A pure node holds no run-time value (no scalar below it): its type alone says what it computes.
template <class E>
struct is_pure : std::bool_constant<!is_scalar_node<E>::value> {};
template <class N>
    requires is_node_v<N>
struct is_pure<N> : is_pure<form_of<N>> {};
template <class Op, class... A>
struct is_pure<node_form<Op, A...>> : std::bool_constant<(is_pure<A>::value && ...)> {};

// Element types. Constants and run-time scalars are weak: they take the type of what they meet.
struct weak {};

template <class E, class = void>
struct value_type_of {
    using type = weak;
};
template <class L>
    requires is_leaf_v<L>
struct value_type_of<L, void> {
    using type = typename L::value_type;
};

template <class Op>
constexpr int condition_position() {
    if constexpr (requires { Op::condition_arg; }) return Op::condition_arg;
    else return -1;
}

// An operand of its own element type (a gather's integer index), which does not join the others'.
template <class Op>
constexpr int index_position() {
    if constexpr (requires { Op::index_arg; }) return Op::index_arg;
    else return -1;
}

template <class Op, class T1, class T2>
struct incompatible_element_types {
    static_assert(sizeof(Op) == 0,
                  "kiln: the operands of this op have different element types (see Op, T1 and T2 in "
                  "'incompatible_element_types<Op, T1, T2>' above); convert one with kiln::cast<T>(x).");
    using type = T1;
};

// Combines operand types: weak meets T gives T; T meets T gives T; anything else is an error.
template <class Op, class A, class B>
struct join_types {
    using type = typename incompatible_element_types<Op, A, B>::type;
};
template <class Op, class A>
struct join_types<Op, A, A> {
    using type = A;
};
template <class Op, class A>
struct join_types<Op, A, weak> {
    using type = A;
};
template <class Op, class B>
struct join_types<Op, weak, B> {
    using type = B;
};
template <class Op>
struct join_types<Op, weak, weak> {
    using type = weak;
};

template <class Op, class Acc, class... Ts>
struct join_all {
    using type = Acc;
};
template <class Op, class Acc, class T, class... Ts>
struct join_all<Op, Acc, T, Ts...> {
    using type = typename join_all<Op, typename join_types<Op, Acc, T>::type, Ts...>::type;
};

// The type in which a node's operands are evaluated (its condition or index operand excluded).
template <class Op, class Seq, class... A>
struct operand_type_impl;
template <class Op, std::size_t... I, class... A>
struct operand_type_impl<Op, std::index_sequence<I...>, A...> {
    using type = typename join_all<
        Op, weak,
        std::conditional_t<static_cast<int>(I) == condition_position<Op>() || static_cast<int>(I) == index_position<Op>(),
                           weak, typename value_type_of<A>::type>...>::
        type;
};
template <class N>
struct operand_type;
template <class N>
    requires is_node_v<N>
struct operand_type<N> : operand_type<form_of<N>> {};
template <class Op, class... A>
struct operand_type<node_form<Op, A...>> {
    using type = typename operand_type_impl<Op, std::index_sequence_for<A...>, A...>::type;
};
template <class N>
using operand_type_t = typename operand_type<N>::type;

template <class Op, class D, class... A>
struct result_type {
    template <class X>
    using operand_t = std::conditional_t<std::is_same_v<typename value_type_of<X>::type, weak>, D,
                                         typename value_type_of<X>::type>;
    using type = std::remove_cvref_t<decltype(Op::apply(std::declval<operand_t<A>>()...))>;
};
template <class Op, class... A>
struct result_type<Op, weak, A...> {
    using type = weak;
};

template <class N>
    requires is_node_v<N>
struct value_type_of<N, void> : value_type_of<form_of<N>> {};
template <class Op, class... A>
struct value_type_of<node_form<Op, A...>, void> {
    using type = typename result_type<Op, operand_type_t<node_form<Op, A...>>, A...>::type;
};

template <class E>
using value_type_t = typename value_type_of<E>::type;

// Static shapes: leaves declare one, scalars and constants are rank 0, nodes broadcast their operands.
template <class E, class = void>
struct shape_of {
    using type = shape<>;
};
template <class L>
    requires is_leaf_v<L>
struct shape_of<L, void> {
    using type = typename L::shape_type;
};

template <class Op, class A, class B>
struct incompatible_static_shapes {
    static_assert(sizeof(Op) == 0,
                  "kiln: static shapes cannot be broadcast together (see the op and the two shapes A and B in "
                  "'incompatible_static_shapes<Op, A, B>' above).");
    using type = dynamic;
};

template <class Op, class A, class B>
struct broadcast_static {
    using bc = static_broadcast<A, B>;
    using type = typename std::conditional_t<bc::ok, bc, incompatible_static_shapes<Op, A, B>>::type;
};

template <class Op, class Acc, class... S>
struct broadcast_all {
    using type = Acc;
};
template <class Op, class Acc, class S, class... Rest>
struct broadcast_all<Op, Acc, S, Rest...> {
    using type = typename broadcast_all<Op, typename broadcast_static<Op, Acc, S>::type, Rest...>::type;
};

// Structural ops (reductions, matmul, views; see graph/structural.hpp) state their own static shape rule.
template <class Op>
concept structural_op = requires { Op::structural; };

template <class N>
    requires is_node_v<N>
struct shape_of<N, void> : shape_of<form_of<N>> {};
template <class Op, class... A>
struct shape_of<node_form<Op, A...>, void> {
    template <class O, class = void>
    struct rule {
        using type = typename broadcast_all<Op, shape<>, typename shape_of<A>::type...>::type;
    };
    template <class O>
        requires structural_op<O>
    struct rule<O, void> {
        using type = typename O::template static_shape<typename shape_of<A>::type...>;
    };
    using type = typename rule<Op>::type;
};
template <class E>
using shape_of_t = typename shape_of<E>::type;

}  // namespace detail

template <class L>
    requires is_leaf_v<L>
struct element_type<L, void> {
    using type = typename L::value_type;
};
template <class N>
    requires is_node_v<N>
struct element_type<N, void> {
    using type = detail::value_type_t<N>;
};

}  // namespace kiln
