#pragma once
// Building nodes: exact constant folding, exact identities and type and shape checks, all at compile time.
#include "../ops/ops.hpp"
#include "node.hpp"

namespace kiln {
namespace detail {

// Numbers met by graph nodes become run-time scalars.
template <class A>
constexpr auto as_graph_operand(const A& a) {
    if constexpr (std::is_arithmetic_v<A>) return scalar<A>{a};
    else return a;
}

template <class C>
constexpr rational rational_of() {
    return {C::num, C::den, true};
}

template <class Op, class... N>
constexpr bool foldable() {
    if constexpr ((is_constant_v<N> && ...) && sizeof...(N) > 0) {
        if constexpr (requires { Op::fold(rational_of<N>()...); }) return Op::fold(rational_of<N>()...).ok;
        else return false;
    } else {
        return false;
    }
}

template <class Op, class... N>
constexpr bool simplifies() {
    if constexpr (requires(const N&... n) { Op::simplify(n...); })
        return !std::is_same_v<decltype(Op::simplify(std::declval<const N&>()...)), keep>;
    else return false;
}

template <class Op, class... N>
constexpr auto build_graph_node(const N&... n) {
    if constexpr (foldable<Op, N...>()) {
        constexpr rational r = Op::fold(rational_of<N>()...);
        return constant_of<r>{};
    } else if constexpr (simplifies<Op, N...>()) {
        return Op::simplify(n...);
    } else {
        using result = node<Op, N...>;
        // Instantiating these runs the element-type and static-shape checks where the user wrote the op.
        static_assert(sizeof(value_type_t<result>) > 0 && sizeof(shape_of_t<result>) > 0);
        return make_node<Op>(n...);
    }
}

template <>
struct op_builder<operand_mode::constant> {
    template <class Op, class... Args>
    static constexpr auto build(const Args&... args) {
        return build_graph_node<Op>(args...);
    }
};

template <>
struct op_builder<operand_mode::graph> {
    template <class Op, class... Args>
    static constexpr auto build(const Args&... args) {
        return build_graph_node<Op>(as_graph_operand(args)...);
    }
};

}  // namespace detail

namespace literals {

// "x"_in: an input of element type float and dynamic shape; "w"_p: a parameter.
template <fixed_string Name>
constexpr input<Name> operator""_in() noexcept {
    return {};
}
template <fixed_string Name>
constexpr param<Name> operator""_p() noexcept {
    return {};
}

}  // namespace literals
}  // namespace kiln
