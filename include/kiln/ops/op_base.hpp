#pragma once
// What every operation of the vocabulary shares: the dispatch from a free function to the mode of its operands,
// the scalar helpers that kernels call, and the markers used by gradient rules.
//
// An op is a struct with: `name`, `arity`, a scalar kernel `apply` (KILN_HD, works on float, double, integers and
// xsimd batches), a `gradient(args..., y, g)` rule written with the vocabulary's own free functions, and
// optionally `fold` (exact rational folding of constants) and `simplify` (exact identities).
#include <cmath>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/constant.hpp"

namespace kiln {

// The vocabulary's free functions, declared before the ops so that gradient rules can call them.
template <class A> constexpr auto neg(const A& a);
template <class A> constexpr auto abs(const A& a);
template <class A> constexpr auto exp(const A& a);
template <class A> constexpr auto log(const A& a);
template <class A> constexpr auto sqrt(const A& a);
template <class A> constexpr auto rsqrt(const A& a);
template <class A> constexpr auto square(const A& a);
template <class A> constexpr auto sin(const A& a);
template <class A> constexpr auto cos(const A& a);
template <class A> constexpr auto tanh(const A& a);
template <class A> constexpr auto sigmoid(const A& a);
template <class A> constexpr auto relu(const A& a);
template <class G, class A> constexpr auto relu_backward(const G& g, const A& a);
template <class A, class B> constexpr auto pow(const A& a, const B& b);
template <class C, class A, class B> constexpr auto where(const C& c, const A& a, const B& b);
template <class A> constexpr auto erf(const A& a);
template <class A, class B> constexpr auto logical_and(const A& a, const B& b);
template <class A, class B> constexpr auto floor_divide(const A& a, const B& b);

namespace detail {

// Returned by an op's `simplify` when no identity applies.
struct keep {};

// The mode an operand belongs to; an op is built in the highest mode among its operands.
enum class operand_mode : int { none = -1, constant = 0, number = 1, graph = 2, eager = 3 };

template <class T, class = void>
struct mode_of {
    static constexpr operand_mode value =
        std::is_arithmetic_v<T> ? operand_mode::number : operand_mode::none;
};
template <std::int64_t N, std::int64_t D>
struct mode_of<constant<N, D>> {
    static constexpr operand_mode value = operand_mode::constant;
};

template <class... Args>
constexpr operand_mode combined_mode() {
    operand_mode m = operand_mode::constant;
    ((m = (mode_of<std::remove_cvref_t<Args>>::value == operand_mode::none ||
           m == operand_mode::none)
              ? operand_mode::none
              : (static_cast<int>(mode_of<std::remove_cvref_t<Args>>::value) > static_cast<int>(m)
                     ? mode_of<std::remove_cvref_t<Args>>::value
                     : m)),
     ...);
    return m;
}

// True when at least one operand is a kiln type (so kiln's operators apply) and none is foreign.
// (Folds over mode_of, not a call of combined_mode: these constraints are checked for every operator that kiln's code
// writes, `std::string + "..."` included, and a constexpr function instantiated for each pair of foreign types cost
// 159 instantiations in an empty program.)
template <class... Args>
inline constexpr bool kiln_operands_v =
    ((mode_of<std::remove_cvref_t<Args>>::value != operand_mode::none) && ...) &&
    ((mode_of<std::remove_cvref_t<Args>>::value != operand_mode::number) || ...);

// The op protocol, spelled out. Every op of the vocabulary names itself and its arity. An elementwise op's scalar
// kernel `apply` takes `arity` numbers (it must compile for every dtype that eager dispatch instantiates it for:
// all five, or the integer ones for the bitwise ops);
// its `gradient(args..., y, g)`, `fold` and `simplify` are optional. A structural op (graph/structural.hpp) says
// `structural` instead and states shape rules and a `compute<Device, T>` that calls the device's kernels.
template <class Op>
concept op_protocol = requires {
    { Op::name } -> std::convertible_to<std::string_view>;
    { Op::arity } -> std::convertible_to<int>;
};
template <class Op>
concept elementwise_op = op_protocol<Op> && !requires { Op::structural; } &&
                         ((Op::arity == 1 && requires(std::int64_t a) { Op::apply(a); }) ||
                          (Op::arity == 2 && requires(std::int64_t a) { Op::apply(a, a); }) ||
                          (Op::arity == 3 && requires(std::int64_t a) { Op::apply(a, a, a); }));

// Builds `Op(args...)` in one mode. Specialized by graph mode (constant and graph) and eager mode.
template <operand_mode M>
struct op_builder;

template <class Op, class... Args>
constexpr auto make(const Args&... args) {
    static_assert(elementwise_op<Op> && Op::arity == sizeof...(Args),
                  "kiln: an elementwise op states its name, its arity and an apply taking that many numbers "
                  "(the op protocol in kiln/ops/op_base.hpp), and is built from that many operands.");
    constexpr operand_mode m = combined_mode<Args...>();
    static_assert(m != operand_mode::none,
                  "kiln: an operand is neither a number nor a kiln expression, constant or tensor.");
    constexpr bool has_graph = ((mode_of<std::remove_cvref_t<Args>>::value == operand_mode::graph) || ...);
    if constexpr (has_graph && m == operand_mode::eager) {
        static_assert(!has_graph,
                      "kiln: an eager kiln::tensor cannot be an operand of a graph-mode expression: feed it to an "
                      "input when the graph runs (kiln::run(expr, \"x\"_in = tensor)), or compute in eager mode "
                      "with tensors only.");
        return 0;
    } else {
        return op_builder<m>::template build<Op>(args...);
    }
}

// Marks an operand that has no gradient (a condition, a comparison's operands).
struct no_grad {};

// The contributions of a rule whose every contribution is empty (graph mode's expressions, no_grad): their types
// are their values, so only the types are kept. Not a std::tuple: constructing one costs GCC time exponential in
// the depth of shared subtrees when built from the values, and clang 14 even when default-constructed (it prints
// the failed enable_if conditions of tuple's constructors, which name every element type, in full: a type written
// out is a tree, exponential in the depth of a residual chain). std::tuple_element and grad_at read it.
template <class... G>
struct grad_types {
    static constexpr std::size_t size = sizeof...(G);
};

template <class R>
inline constexpr bool is_grad_types_v = false;
template <class... G>
inline constexpr bool is_grad_types_v<grad_types<G...>> = true;

template <class... G>
constexpr auto grads(const G&... g) {
    if constexpr ((std::is_empty_v<G> && ...)) {
        return grad_types<G...>{};
    } else {
        return std::tuple<G...>(g...);
    }
}

// Contribution I of a rule's result (a std::tuple, or grad_types whose elements are default-constructed).
template <std::size_t I, class R>
constexpr decltype(auto) grad_at(const R& r) {
    if constexpr (is_grad_types_v<R>)  // (a trait: a failed requirement on a tuple of graph types prints them)
        return typename std::tuple_element<I, R>::type{};
    else return std::get<I>(r);
}

// Number mode: all operands are numbers or constants; the op runs now. Constants take the numbers' type.
template <class... Args>
using number_type_t = std::common_type_t<std::conditional_t<is_constant_v<Args>, bool, std::remove_cvref_t<Args>>...>;

template <class T, class A>
KILN_HD constexpr auto as_number(const A& a) {
    if constexpr (is_constant_v<A>) return A::template value<T>();
    else return a;
}

template <>
struct op_builder<operand_mode::number> {
    template <class Op, class... Args>
    static constexpr auto build(const Args&... args) {
        using T = number_type_t<Args...>;
        return Op::apply(as_number<T>(args)...);
    }
};

// Scalar helpers for kernels. Kernels call these unqualified, so a batch type finds xsimd's overloads by ADL.
namespace kernels {

template <class T>
KILN_HD KILN_INLINE constexpr T select(bool c, const T& a, const T& b) {
    return c ? a : b;
}

// Signed integer arithmetic wraps (two's complement), as in NumPy and PyTorch: a plain signed + - * that overflows
// is undefined behaviour in C++, so scalars of integer types are computed through their unsigned types. (xsimd
// batches of integers wrap in hardware; floating types and bool are left to the plain operators.)
template <class A, class B>
inline constexpr bool wraps_v = std::is_integral_v<A> && std::is_integral_v<B> && !std::is_same_v<A, bool> &&
                                !std::is_same_v<B, bool>;

template <class A, class B>
KILN_HD KILN_INLINE constexpr auto wrapping_add(const A& a, const B& b) {
    using R = decltype(a + b);
    using U = std::make_unsigned_t<R>;
    return static_cast<R>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
// o += v for an accumulating kernel (scatter-add, index-add): integers wrap like wrapping_add.
template <class U>
KILN_HD KILN_INLINE constexpr void accumulate(U& o, const U& v) {
    if constexpr (wraps_v<U, U>) o = static_cast<U>(wrapping_add(o, v));
    else o += v;
}
template <class A, class B>
KILN_HD KILN_INLINE constexpr auto wrapping_sub(const A& a, const B& b) {
    using R = decltype(a - b);
    using U = std::make_unsigned_t<R>;
    return static_cast<R>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <class A, class B>
KILN_HD KILN_INLINE constexpr auto wrapping_mul(const A& a, const B& b) {
    using R = decltype(a * b);
    using U = std::make_unsigned_t<R>;
    return static_cast<R>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
template <class A>
KILN_HD KILN_INLINE constexpr auto wrapping_neg(const A& a) {
    using R = decltype(-a);
    using U = std::make_unsigned_t<R>;
    return static_cast<R>(static_cast<U>(U(0) - static_cast<U>(a)));
}

// NaN test on scalars and xsimd batches alike (a batch's `a != a` is an ordered comparison: false for NaN lanes).
template <class T>
KILN_HD KILN_INLINE constexpr auto is_nan(const T& a) {
    if constexpr (requires { T::size; }) return isnan(a);  // xsimd, found by ADL
    else if constexpr (std::is_floating_point_v<T>) return a != a;
    else return false;
}

// xsimd's exp (and expm1, tanh and erf, built on it) and its trunc convert lanes to 64-bit integers. For float64
// without AVX-512 that conversion is a scalar cast, undefined behaviour for NaN and for magnitudes beyond 2^63
// (UBSan's float-cast-overflow; the ONNX fuzz target found it with a tanh of 1e26). So a float64 batch goes in
// bounded to [lo, hi], where those functions have already saturated, with NaN lanes as 0 (`saturated`), and NaN
// lanes are put back in the result (`with_nan_of`): no result changes. Scalars and float32 batches (a defined
// vector conversion) pass as they are.
template <class A>
inline constexpr bool is_double_batch_v = [] {
    if constexpr (requires { A::size; }) return std::is_same_v<typename A::value_type, double>;
    else return false;
}();

template <class A>
KILN_HD KILN_INLINE A saturated(const A& a, double lo, double hi) {
    if constexpr (is_double_batch_v<A>) {
        const A l(lo), h(hi), zero(0.0);
        return select(isnan(a), zero, select(a < l, l, select(a > h, h, a)));  // xsimd's, by ADL
    } else {
        return a;
    }
}
template <class A, class R>
KILN_HD KILN_INLINE R with_nan_of(const A& a, const R& r) {
    if constexpr (is_double_batch_v<A>) return select(isnan(a), a, r);
    else return r;
}

template <class T>
KILN_HD KILN_INLINE constexpr T abs(const T& a) {
    if constexpr (std::is_unsigned_v<T> || std::is_same_v<T, bool>) return a;
    else if constexpr (std::is_integral_v<T>) return a < T(0) ? static_cast<T>(wrapping_neg(a)) : a;  // abs(MIN) wraps
    else return a < T(0) ? T(-a) : (a == T(0) ? T(0) : a);  // abs(-0.0) == +0.0, abs(NaN) stays NaN
}

}  // namespace kernels
}  // namespace detail
}  // namespace kiln

namespace std {
template <class... G>
struct tuple_size<kiln::detail::grad_types<G...>> : integral_constant<size_t, sizeof...(G)> {};
template <size_t I, class... G>
struct tuple_element<I, kiln::detail::grad_types<G...>> : tuple_element<I, tuple<G...>> {};
}  // namespace std
