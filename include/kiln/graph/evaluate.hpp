#pragma once
// Evaluating the unique nodes of a plan at one position (a scalar or an xsimd batch of positions).
// A `frame` holds one value per unique node, computed in topological order, so each is computed once; the roots
// are then evaluated from the frame, and the parts of a root that hold run-time scalars are evaluated in place.
//
// A Mode says what a value is: `value_t<T>` (T itself, or xsimd::batch<T>) and `splat(T)`. A Loader gives the
// value of leaf K at the current position. Nothing here allocates, throws or uses the standard library at run
// time, so the same code runs in CPU loops and in CUDA kernels.
#include "unique_nodes.hpp"

namespace kiln::detail {

// The type of E's value in Mode; weak nodes take the context type D.
template <class E, class D, class Mode, class = void>
struct eval_type {
    using type = typename Mode::template value_t<D>;  // constants and scalars
};
template <class L, class D, class Mode>
struct eval_type<L, D, Mode, std::enable_if_t<is_leaf_v<L>>> {
    using type = typename Mode::template value_t<typename L::value_type>;
};
template <class Op, class... A, class D, class Mode>
struct eval_type<node<Op, A...>, D, Mode> {
    using E = node<Op, A...>;
    using own = operand_type_t<E>;
    using ctx = std::conditional_t<std::is_same_v<own, weak>, D, own>;
    using type = std::remove_cvref_t<decltype(Op::apply(std::declval<typename eval_type<A, ctx, Mode>::type>()...))>;
};

template <std::size_t I, class V>
struct frame_slot {
    V value;
};

template <std::size_t I, class V>
KILN_HD KILN_INLINE const V& slot_value(const frame_slot<I, V>& s) {
    return s.value;
}

template <class Mode, class List, class Seq = std::make_index_sequence<List::size>>
struct frame;

template <class Mode, class... Nodes, std::size_t... I>
struct frame<Mode, types<Nodes...>, std::index_sequence<I...>>
    : frame_slot<I, typename eval_type<Nodes, weak, Mode>::type>... {
    using list = types<Nodes...>;
    using leaves = leaves_t<list>;

    template <class Loader>
    KILN_HD KILN_INLINE explicit frame(const Loader& load) {
        (compute<I>(load), ...);
    }

    template <std::size_t K, class Loader>
    KILN_HD KILN_INLINE void compute(const Loader& load) {
        using E = typename at<K, list>::type;
        using V = typename eval_type<E, weak, Mode>::type;
        auto& slot = static_cast<frame_slot<K, V>&>(*this).value;
        if constexpr (is_leaf_v<E>) slot = load.template get<index_of<E, leaves>::value>();
        else slot = evaluate_node<weak>(E{});
    }

    // The value of expression E in context type D.
    template <class D, class E>
    KILN_HD KILN_INLINE auto evaluate(const E& e) const {
        if constexpr (contains<E, list>::value) {
            return slot_value<index_of<E, list>::value>(*this);
        } else if constexpr (is_constant_v<E>) {
            return Mode::splat(E::template value<D>());
        } else if constexpr (is_scalar_node<E>::value) {
            return Mode::splat(static_cast<D>(e.value));
        } else {
            return evaluate_node<D>(e);
        }
    }

    template <class D, class Op, class... A>
    KILN_HD KILN_INLINE auto evaluate_node(const node<Op, A...>& e) const {
        using own = operand_type_t<node<Op, A...>>;
        using ctx = std::conditional_t<std::is_same_v<own, weak>, D, own>;
        return apply_op<ctx>(e, std::index_sequence_for<A...>{});
    }

    // A member, not a lambda, so that it is always inlined like the rest of the evaluation.
    template <class Ctx, class Op, class... A, std::size_t... J>
    KILN_HD KILN_INLINE auto apply_op(const node<Op, A...>& e, std::index_sequence<J...>) const {
        return Op::apply(evaluate<Ctx>(e.template arg<J>())...);
    }
};

// Evaluation in plain scalars.
struct scalar_mode {
    template <class T>
    using value_t = T;
    template <class T>
    KILN_HD KILN_INLINE static constexpr T splat(T v) {
        return v;
    }
};

// The element type of a root: its own type, or double for an expression made only of constants and scalars.
template <class E>
using root_type_t = std::conditional_t<std::is_same_v<value_type_t<E>, weak>, double, value_type_t<E>>;

}  // namespace kiln::detail
