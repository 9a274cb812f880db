#pragma once
// What every structural op shares: strided-view helpers, axis masks, shape keys, and the declarations of the
// constructors that gradient rules call. See graph/structural.hpp for the op protocol; the kernels are the
// device's (backend/device.hpp).
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "../../backend/cpu/device.hpp"
#include "../../expr/build.hpp"
#include "../../expr/feed.hpp"
#include "../../ops/reduce.hpp"

namespace kiln {

// kiln::sum<1>(x, kiln::keep_dims): keep the reduced axes with extent 1.
struct keep_dims_t {};
inline constexpr keep_dims_t keep_dims{};

namespace detail {

template <class S>
inline constexpr bool fully_static_v = false;
template <std::ptrdiff_t... D>
inline constexpr bool fully_static_v<shape<D...>> = ((D != dyn) && ...);

template <class S>
struct shape_dims_of;
template <std::ptrdiff_t... D>
struct shape_dims_of<shape<D...>> {
    static dims get() { return dims{D...}; }
};

// A view of `a` repeated to `shape` (NumPy broadcasting): zero strides along the repeated dimensions.
template <class T>
strided<T> broadcast_view(const strided<T>& a, const dims& shape) {
    strided<T> out(a.data, shape, dims{});
    out.strides.rank = shape.rank;
    for (int d = 0; d < shape.rank; ++d) {
        const int da = d - (shape.rank - a.shape.rank);
        out.strides[d] = (da >= 0 && a.shape[da] != 1) ? a.strides[da] : 0;
    }
    return out;
}

// A shape key identifies a node's shape symbolically: two nodes with the same key have the same shape at run time.
// Fully static shapes are their own key; a dynamic leaf is its own key; an elementwise node takes the key of the
// operand that decides its shape (operands of rank 0, or absorbed by another's static shape, decide nothing).
template <class E, class = void>
struct shape_key {
    using type = shape<>;  // constants and run-time scalars
};
template <class L>
    requires is_leaf_v<L>
struct shape_key<L, void> {
    using type = std::conditional_t<fully_static_v<typename L::shape_type>, typename L::shape_type, L>;
};

// True when static shape B broadcast against A leaves A unchanged whatever A's unknown extents are.
template <class A, class B>
inline constexpr bool absorbs_v = false;
template <std::ptrdiff_t... A, std::ptrdiff_t... B>
inline constexpr bool absorbs_v<shape<A...>, shape<B...>> = [] {
    constexpr int ra = sizeof...(A), rb = sizeof...(B);
    if (rb > ra) return false;
    constexpr std::array<std::ptrdiff_t, (ra > 0 ? ra : 1)> a{A...};
    constexpr std::array<std::ptrdiff_t, (rb > 0 ? rb : 1)> b{B...};
    for (int i = 0; i < rb; ++i) {
        const std::ptrdiff_t x = a[ra - rb + i], y = b[i];
        if (y == dyn) return false;
        if (y != 1 && y != x) return false;
    }
    return true;
}();

template <class N>
    requires is_node_v<N>
struct shape_key<N, void> : shape_key<form_of<N>> {};
template <class Op, class... A>
struct shape_key<node_form<Op, A...>, void> {
    using self = node<Op, A...>;
    using own_shape = shape_of_t<self>;
    template <std::size_t I>
    using arg_t = typename nth_type<I, A...>::type;
    // An operand decides nothing when its key is rank 0 or another operand's static shape absorbs its shape.
    static constexpr std::array<bool, sizeof...(A)> rank0{std::is_same_v<typename shape_key<A>::type, shape<>>...};
    template <class X>
    static constexpr bool absorbed = ((!std::is_same_v<X, A> && absorbs_v<shape_of_t<A>, shape_of_t<X>> &&
                                       !absorbs_v<shape_of_t<X>, shape_of_t<A>>) ||
                                      ...);
    static constexpr std::array<bool, sizeof...(A)> absorbed_arg{absorbed<A>...};
    template <std::size_t I>
    static constexpr bool decides() {
        return !rank0[I] && !absorbed_arg[I];
    }
    template <class Acc, std::size_t I>
    using step = std::conditional_t<!decides<I>(), Acc,
                                    std::conditional_t<std::is_same_v<Acc, void>, typename shape_key<arg_t<I>>::type,
                                                       std::conditional_t<std::is_same_v<Acc, typename shape_key<arg_t<I>>::type>,
                                                                          Acc, self>>>;
    template <class Acc, std::size_t... I>
    struct fold;
    template <class Acc>
    struct fold<Acc> {
        using type = Acc;
    };
    template <class Acc, std::size_t I, std::size_t... Rest>
    struct fold<Acc, I, Rest...> {
        using type = typename fold<step<Acc, I>, Rest...>::type;
    };
    template <class Seq>
    struct elementwise_key;
    template <std::size_t... I>
    struct elementwise_key<std::index_sequence<I...>> {
        using k = typename fold<void, I...>::type;
        using type = std::conditional_t<std::is_same_v<k, void>, shape<>, k>;
    };
    using computed = std::conditional_t<structural_op<Op>, self,
                                        typename elementwise_key<std::index_sequence_for<A...>>::type>;
    using type = std::conditional_t<fully_static_v<own_shape>, own_shape, computed>;
};
template <class E>
using shape_key_t = typename shape_key<E>::type;

template <class A, class B>
inline constexpr bool same_shape_v = std::is_same_v<shape_key_t<A>, shape_key_t<B>>;

template <class Op, class... A>
constexpr auto structural(const A&... a) {
    static_assert((is_graph_v<A> && ...), "kiln: structural ops take graph-mode expressions.");
    using result = node<Op, A...>;
    static_assert(sizeof(value_type_t<result>) > 0 && sizeof(shape_of_t<result>) > 0);
    return make_node<Op>(a...);
}

// Internal constructors used by gradient rules (defined below the ops).
template <class G, class R>
constexpr auto like(const G& g, const R& ref);
template <class G, class R>
constexpr auto sum_to(const G& g, const R& ref);
template <class G, class R>
constexpr auto reshape_as(const G& g, const R& ref);
template <ops::reduce_attrs A, class G, class R>
constexpr auto expand(const G& g, const R& ref);

}  // namespace detail

namespace ops {

// The element type of a graph-mode node of Op on operands of type X: X, unless the op says otherwise
// (graph_result_type: argmax gives int64).
template <class Op, class X, class = void>
struct graph_result {
    using type = X;
};
template <class Op, class X>
struct graph_result<Op, X, std::void_t<typename Op::template graph_result_type<X>>> {
    using type = typename Op::template graph_result_type<X>;
};

// Graph mode's node op for a mode-neutral op with attributes (ops/structural.hpp): the attribute value A is part
// of the node's type, and shape, kernel, view and gradient are the op's own, given A. Unary, binary and ternary
// ops (a gather's index, a gradient's shape reference) take the same path.
template <class Op>
constexpr int op_shape_only_arg() {
    if constexpr (requires { Op::shape_only_arg; }) return Op::shape_only_arg;
    else return -1;
}

// Op's static shape rule given A, for one to three operand shapes (an alias template cannot take a pack expansion
// for its fixed parameters).
template <class Op, auto A, class... S>
struct op_static_shape;
template <class Op, auto A, class S0>
struct op_static_shape<Op, A, S0> {
    using type = typename Op::template static_shape<A, S0>;
};
template <class Op, auto A, class S0, class S1>
struct op_static_shape<Op, A, S0, S1> {
    using type = typename Op::template static_shape<A, S0, S1>;
};
template <class Op, auto A, class S0, class S1, class S2>
struct op_static_shape<Op, A, S0, S1, S2> {
    using type = typename Op::template static_shape<A, S0, S1, S2>;
};

template <class Op, auto A>
struct with_attrs {
    using op = Op;
    static constexpr auto attributes = A;
    static constexpr std::string_view name = Op::name;
    static constexpr int arity = Op::arity;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = op_shape_only_arg<Op>();
    static constexpr int index_arg = detail::index_position<Op>();
    template <class X, class... R>
    static typename graph_result<Op, X>::type apply(const X&, const R&...);  // the element type; never called
    template <class... S>
    using static_shape = typename op_static_shape<Op, A, S...>::type;
    template <class... D>
    static dims shape(const dims& x, const D&... more) {
        return Op::result_shape(A, x, more...);
    }
    template <class Device, class T, class... X>
    static void compute(T* out, const dims&, const X&... x) {
        Op::template compute<Device>(A, out, x...);
    }
    template <class T, class... X>
        requires requires(detail::strided<const T>& o, const X&... x) { Op::try_view(A, o, x...); }
    static bool try_view(detail::strided<const T>& out, const X&... x) {
        return Op::try_view(A, out, x...);
    }
    template <class X, class Y, class G>
    static constexpr auto gradient(const X& x, const Y& y, const G& g) {
        return Op::gradient(attrs_c<A>{}, x, y, g);
    }
    template <class X0, class X1, class Y, class G>
    static constexpr auto gradient(const X0& x0, const X1& x1, const Y& y, const G& g) {
        return Op::gradient(attrs_c<A>{}, x0, x1, y, g);
    }
    template <class X0, class X1, class X2, class Y, class G>
    static constexpr auto gradient(const X0& x0, const X1& x1, const X2& x2, const Y& y, const G& g) {
        return Op::gradient(attrs_c<A>{}, x0, x1, x2, y, g);
    }
};

template <class Op>
inline constexpr bool is_with_attrs_v = false;
template <class Op, auto A>
inline constexpr bool is_with_attrs_v<with_attrs<Op, A>> = true;

}  // namespace ops

namespace detail {

// A graph-mode node of op Op with attributes given at compile time.
template <class Op, auto A, class... X>
constexpr auto structural_with(ops::attrs_c<A>, const X&... x) {
    return structural<ops::with_attrs<Op, A>>(x...);
}

}  // namespace detail

// A graph-mode node of a mode-neutral structural op of the program's own (ops/structural.hpp) with attributes A:
// its static and run-time shape rules, its kernel and its gradient rule are the op's.
template <class Op, auto A, class X, class... More>
    requires(is_graph_v<X> && (is_graph_v<More> && ...))
constexpr auto graph_op(const X& x, const More&... more) {
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(A)>, typename Op::attributes>,
                  "kiln::graph_op: the attributes must have the op's attributes type.");
    return detail::structural<ops::with_attrs<Op, A>>(x, more...);
}

}  // namespace kiln
