#pragma once
// Evaluating the unique nodes of a plan at one position (a scalar or an xsimd batch of positions).
// A `frame` holds one value per unique node, computed in topological order, so each is computed once; the roots
// are then evaluated from the frame, and the parts of a root that hold run-time scalars are evaluated in place.
//
// A Mode says what a value is: `value_t<T>` (T itself, or xsimd::batch<T>) and `splat(T)`. A Loader gives the
// value of leaf K at the current position. Nothing here allocates, throws or uses the standard library at run
// time, so the same code runs in CPU loops and in CUDA kernels.
#include "../ops/arithmetic.hpp"
#include "unique_nodes.hpp"

namespace kiln::detail {

// The context in which a node's operands are evaluated: its own operand type, or the context D for a weak node.
template <class D, class E>
using context_of = std::conditional_t<std::is_same_v<operand_type_t<E>, weak>, D, operand_type_t<E>>;

// The type of E's value in Mode; weak nodes take the context type D.
template <class E, class D, class Mode, class = void>
struct eval_type {
    using type = typename Mode::template value_t<D>;  // constants and scalars
};
template <class L, class D, class Mode>
    requires is_leaf_v<L>
struct eval_type<L, D, Mode, void> {
    using type = typename Mode::template value_t<typename L::value_type>;
};
template <class N, class D, class Mode>
    requires is_node_v<N>
struct eval_type<N, D, Mode, void> : eval_type<form_of<N>, D, Mode> {};
template <class Op, class... A, class D, class Mode>
struct eval_type<node_form<Op, A...>, D, Mode> {
    using ctx = context_of<D, node_form<Op, A...>>;
    using type = std::remove_cvref_t<decltype(Op::apply(std::declval<typename eval_type<A, ctx, Mode>::type>()...))>;
};

// A value that fused multiply-adds apply to: float or double, alone or in an xsimd batch.
template <class V>
concept fma_value = std::is_same_v<V, float> || std::is_same_v<V, double> ||
                    (requires { typename V::value_type; typename V::arch_type; } &&
                     (std::is_same_v<typename V::value_type, float> || std::is_same_v<typename V::value_type, double>));

// A product node and its factors.
template <class E>
struct mul_factors : std::false_type {};
template <class N>
    requires is_node_v<N>
struct mul_factors<N> : mul_factors<form_of<N>> {};
template <class P, class Q>
struct mul_factors<node_form<ops::mul, P, Q>> : std::true_type {
    using first = P;
    using second = Q;
};

// The three fused forms (one rounding): a * b + c, a * b - c and c - a * b. Batches find xsimd's by ADL.
template <class V>
KILN_HD KILN_INLINE V fused_mul_add(const V& a, const V& b, const V& c) {
    if constexpr (std::is_same_v<V, float>) return __builtin_fmaf(a, b, c);
    else if constexpr (std::is_same_v<V, double>) return __builtin_fma(a, b, c);
    else return fma(a, b, c);
}
template <class V>
KILN_HD KILN_INLINE V fused_mul_sub(const V& a, const V& b, const V& c) {
    if constexpr (std::is_same_v<V, float>) return __builtin_fmaf(a, b, -c);
    else if constexpr (std::is_same_v<V, double>) return __builtin_fma(a, b, -c);
    else return fms(a, b, c);
}
template <class V>
KILN_HD KILN_INLINE V fused_neg_mul_add(const V& a, const V& b, const V& c) {
    if constexpr (std::is_same_v<V, float>) return __builtin_fmaf(-a, b, c);
    else if constexpr (std::is_same_v<V, double>) return __builtin_fma(-a, b, c);
    else return fnma(a, b, c);
}

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

    KILN_HD_TEMPLATE
    template <class Loader>
    KILN_HD KILN_INLINE explicit frame(const Loader& load) {
        (compute<I>(load), ...);
    }

    KILN_HD_TEMPLATE
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

    template <class D, class N>
    KILN_HD KILN_INLINE auto evaluate_node(const N& e) const {
        return apply_op<context_of<D, N>>(e, std::make_index_sequence<N::arity>{});
    }

    // A member, not a lambda, so that it is always inlined like the rest of the evaluation.
    template <class Ctx, class N, std::size_t... J>
    KILN_HD KILN_INLINE auto apply_op(const N& e, std::index_sequence<J...>) const {
        using Op = typename N::op;
        if constexpr (constexpr int m = contraction<Ctx, Op, typename N::template arg_type<J>...>(); m != 0)
            return contract<Ctx, m>(e);
        else return Op::apply(evaluate<Ctx>(e.template arg<J>())...);
    }

    // Whether add or sub of a product becomes one fused multiply-add (KILN_FP_CONTRACT), and which operand is the
    // product: 0 no; 1 the first; 2 the second. The product's factors and the other operand must have one floating
    // type. A product that other nodes also use is still computed once for them; the fused form only replaces the
    // add, so it never costs an instruction.
    // (KILN_HD: apply_op runs in device code, and nvcc warns (#20013) about a host-only constexpr call there.)
    template <class Ctx, class Op, class... A>
    KILN_HD static constexpr int contraction() {
        if constexpr (!KILN_FP_CONTRACT || sizeof...(A) != 2 ||
                      !(std::is_same_v<Op, ops::add> || std::is_same_v<Op, ops::sub>)) {
            return 0;
        } else {
            using A0 = typename at<0, types<A...>>::type;
            using A1 = typename at<1, types<A...>>::type;
            if constexpr (factors_match<Ctx, A0, A1>()) return 1;
            else if constexpr (factors_match<Ctx, A1, A0>()) return 2;
            else return 0;
        }
    }
    template <class Ctx, class M, class C>
    KILN_HD static constexpr bool factors_match() {
        if constexpr (!mul_factors<M>::value) {
            return false;
        } else {
            using V = typename eval_type<C, Ctx, Mode>::type;
            using MC = context_of<Ctx, M>;
            using F0 = typename eval_type<typename mul_factors<M>::first, MC, Mode>::type;
            using F1 = typename eval_type<typename mul_factors<M>::second, MC, Mode>::type;
            return fma_value<V> && std::is_same_v<V, F0> && std::is_same_v<V, F1>;
        }
    }

    template <class Ctx, int M, class N>
    KILN_HD KILN_INLINE auto contract(const N& e) const {
        using Op = typename N::op;
        constexpr std::size_t p = M == 1 ? 0 : 1;  // the product's position
        const auto& prod = e.template arg<p>();
        using MC = context_of<Ctx, std::remove_cvref_t<decltype(prod)>>;
        const auto a = evaluate<MC>(prod.template arg<0>());
        const auto b = evaluate<MC>(prod.template arg<1>());
        const auto c = evaluate<Ctx>(e.template arg<1 - p>());
        if constexpr (std::is_same_v<Op, ops::add>) return fused_mul_add(a, b, c);
        else if constexpr (p == 0) return fused_mul_sub(a, b, c);
        else return fused_neg_mul_add(a, b, c);
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
