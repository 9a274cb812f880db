#pragma once
// Graph mode's flips, slices, splits, tiles, repeats and pads, integer-array indexing (take_along_axis, index_select),
// sorting (argsort, sort) and outer products. The ops (shape rules, kernels, gradients) are the mode-neutral ones of
// ops/layout.hpp, ops/pad.hpp and ops/gather.hpp, the same that eager mode runs; attributes are template arguments here.
#include <tuple>
#include <utility>

#include "../../core/constant.hpp"
#include "../../core/fixed_string.hpp"
#include "../../ops/einsum.hpp"
#include "../../ops/gather.hpp"
#include "../../ops/join.hpp"
#include "../../ops/layout.hpp"
#include "../../ops/pad.hpp"
#include "views.hpp"

namespace kiln {

// One dimension's padding for kiln::pad: `before` and `after` elements.
struct width {
    std::ptrdiff_t before = 0, after = 0;
};

// kiln::sort<Axis>(x, kiln::descending): largest first.
struct descending_t {};
inline constexpr descending_t descending{};

namespace detail {
template <class E>
constexpr void check_layout_operand() {
    static_assert(!std::is_same_v<value_type_t<E>, weak>,
                  "kiln: this op needs an expression with an element type and a shape (a constant alone has none).");
}
template <int... Axes>
constexpr ops::flip_attrs flip_attrs_of() {
    ops::flip_attrs a;
    ((a.axes[static_cast<std::size_t>(a.naxes++)] = Axes), ...);
    return a;
}
template <std::ptrdiff_t... R>
constexpr ops::tile_attrs tile_attrs_of() {
    ops::tile_attrs a;
    ((a.reps[static_cast<std::size_t>(a.nreps++)] = R), ...);
    return a;
}
template <class C, width... W>
constexpr ops::pad_attrs pad_attrs_of() {
    ops::pad_attrs a;
    ((a.before[static_cast<std::size_t>(a.n)] = W.before, a.after[static_cast<std::size_t>(a.n++)] = W.after), ...);
    a.value_bits = std::bit_cast<std::uint64_t>(C::template value<double>());
    return a;
}
}  // namespace detail

// x with its elements in reverse order along Axes (every axis when none): numpy.flip. Differentiable.
template <int... Axes, class E>
    requires is_graph_v<E>
constexpr auto flip(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(sizeof...(Axes) <= max_rank, "kiln::flip: more axes than a tensor has dimensions.");
    return detail::structural<ops::with_attrs<ops::flip, detail::flip_attrs_of<Axes...>()>>(e);
}

// x[start:stop:step] along Axis, as Python slices (negative indices count from the end; kiln::slice_begin and
// kiln::slice_end run to either end): a view when the step is positive. Differentiable.
template <int Axis, std::ptrdiff_t Start, std::ptrdiff_t Stop = slice_end, std::ptrdiff_t Step = 1, class E>
    requires is_graph_v<E>
constexpr auto slice(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(Step != 0, "kiln::slice: the step must not be 0.");
    return detail::structural<ops::with_attrs<ops::slice, ops::slice_attrs{Axis, Start, Stop, Step, 0, 0}>>(e);
}

// x cut into Sections equal parts along Axis (the extent must divide; checked at compile time for a static extent,
// else when the graph runs): a std::tuple of views, for structured bindings. Each part is differentiable.
template <int Sections, int Axis = 0, class E>
    requires is_graph_v<E>
constexpr auto split(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(Sections > 0, "kiln::split: the number of sections must be positive.");
    return [&]<int... K>(std::integer_sequence<int, K...>) {
        return std::tuple(detail::structural<ops::with_attrs<ops::slice, ops::slice_attrs{Axis, 0, 0, 1, Sections, K}>>(e)...);
    }(std::make_integer_sequence<int, Sections>{});
}

// x repeated R[i] times along each dimension (numpy.tile; more repetitions than dimensions add leading ones).
// Differentiable: the gradient sums over the repetitions.
template <std::ptrdiff_t... R, class E>
    requires is_graph_v<E>
constexpr auto tile(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(sizeof...(R) > 0 && sizeof...(R) <= max_rank, "kiln::tile: give 1 to 8 repetitions.");
    static_assert(((R >= 0) && ...), "kiln::tile: repetitions must be non-negative.");
    return detail::structural<ops::with_attrs<ops::tile, detail::tile_attrs_of<R...>()>>(e);
}

// Each element of x repeated Repeats times along Axis (numpy.repeat); without Axis, of x flattened.
template <std::ptrdiff_t Repeats, int Axis, class E>
    requires is_graph_v<E>
constexpr auto repeat(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(Repeats >= 0, "kiln::repeat: repetitions must be non-negative.");
    return detail::structural<ops::with_attrs<ops::repeat, ops::repeat_attrs{Repeats, Axis}>>(e);
}
template <std::ptrdiff_t Repeats, class E>
    requires is_graph_v<E>
constexpr auto repeat(const E& e) {
    return kiln::repeat<Repeats, 0>(kiln::reshape<dyn>(e));
}

// x padded with W[i] = {before, after} elements around dimension i (numpy.pad's constant mode; fewer widths than
// dimensions pad the leading ones), of 0 or of a constant: kiln::pad<kiln::width{1, 1}>(x, 2.5_c). Differentiable.
template <width... W, class E, class C = constant<0>>
    requires is_graph_v<E>
constexpr auto pad(const E& e, C = {}) {
    detail::check_layout_operand<E>();
    static_assert(is_constant_v<C>, "kiln::pad: the padding value is a compile-time constant such as 2.5_c.");
    static_assert(((W.before >= 0 && W.after >= 0) && ...), "kiln::pad: pad widths must be non-negative.");
    static_assert(sizeof...(W) <= max_rank, "kiln::pad: more widths than a tensor has dimensions.");
    return detail::structural<ops::with_attrs<ops::pad, detail::pad_attrs_of<C, W...>()>>(e);
}

// out[.., j, ..] = x[.., index[.., j, ..], ..] along Axis (numpy.take_along_axis, torch.gather): index is an
// integer expression of x's rank with x's extents except along Axis. Indices are checked when the graph runs;
// the gradient (to x) is a scatter-add.
template <int Axis, class E, class I>
    requires(is_graph_v<E> && is_graph_v<I>)
constexpr auto take_along_axis(const E& e, const I& index) {
    detail::check_layout_operand<E>();
    static_assert(std::is_integral_v<detail::value_type_t<I>> && !std::is_same_v<detail::value_type_t<I>, bool>,
                  "kiln::take_along_axis: the index must be an integer expression (int32 or int64).");
    return detail::structural<ops::with_attrs<ops::take_along_axis, ops::axis_attrs{Axis}>>(e, index);
}

// x's entries at each index along Axis (numpy.take(x, index, axis); torch.index_select for a 1-D index): the
// result has x's dimensions before Axis, the index's, then x's after it. Differentiable in x.
template <int Axis, class E, class I>
    requires(is_graph_v<E> && is_graph_v<I>)
constexpr auto index_select(const E& e, const I& index) {
    detail::check_layout_operand<E>();
    static_assert(std::is_integral_v<detail::value_type_t<I>> && !std::is_same_v<detail::value_type_t<I>, bool>,
                  "kiln::index_select: the index must be an integer expression (int32 or int64).");
    return detail::structural<ops::with_attrs<ops::take, ops::axis_attrs{Axis}>>(e, index);
}

// The int64 positions that sort x along Axis (stable, NaN last; kiln::descending for largest first).
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argsort(const E& e) {
    detail::check_layout_operand<E>();
    return detail::structural<ops::with_attrs<ops::argsort, ops::sort_attrs{Axis, false}>>(e);
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto argsort(const E& e, descending_t) {
    detail::check_layout_operand<E>();
    return detail::structural<ops::with_attrs<ops::argsort, ops::sort_attrs{Axis, true}>>(e);
}

// x sorted along Axis: take_along_axis of argsort, so its gradient goes back to where each value came from.
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto sort(const E& e) {
    return kiln::take_along_axis<Axis>(e, kiln::argsort<Axis>(e));
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto sort(const E& e, descending_t) {
    return kiln::take_along_axis<Axis>(e, kiln::argsort<Axis>(e, descending));
}

// The outer product of two expressions, flattened: out[i][j] = a[i] * b[j] (numpy.outer).
template <class A, class B>
    requires(is_graph_v<A> && is_graph_v<B>)
constexpr auto outer(const A& a, const B& b) {
    return kiln::reshape<dyn, 1>(a) * kiln::reshape<1, dyn>(b);
}

// x with a new axis of extent 1 at Axis (numpy.expand_dims; -1 appends one), and x without its extent-1 axis
// Axis: views. Differentiable.
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto expand_dims(const E& e) {
    detail::check_layout_operand<E>();
    return detail::structural<ops::with_attrs<ops::expand_dims, ops::join_attrs{Axis}>>(e);
}
template <int Axis, class E>
    requires is_graph_v<E>
constexpr auto squeeze(const E& e) {
    detail::check_layout_operand<E>();
    return detail::structural<ops::with_attrs<ops::squeeze, ops::join_attrs{Axis}>>(e);
}

// x with its axes in the order P (numpy.transpose(x, P): result axis i is x's axis P[i]); a view.
// Differentiable: the gradient permutes back.
template <int... P, class E>
    requires(is_graph_v<E> && sizeof...(P) > 0)
constexpr auto permute(const E& e) {
    detail::check_layout_operand<E>();
    static_assert(sizeof...(P) <= max_rank, "kiln::permute: more axes than a tensor has.");
    constexpr ops::permute_attrs a = [] {
        ops::permute_attrs r;
        ((r.perm[static_cast<std::size_t>(r.n++)] = P), ...);
        return r;
    }();
    return detail::structural<ops::with_attrs<ops::permute, a>>(e);
}

// Expressions joined along Axis (their other extents equal; numpy.concatenate): a chain of two-operand joins.
// Each operand's gradient is its part of g.
template <int Axis, class A, class B, class... More>
    requires(is_graph_v<A> && is_graph_v<B> && (is_graph_v<More> && ...))
constexpr auto concat(const A& a, const B& b, const More&... more) {
    detail::check_layout_operand<A>();
    detail::check_layout_operand<B>();
    const auto ab = detail::structural<ops::with_attrs<ops::concat, ops::join_attrs{Axis}>>(a, b);
    if constexpr (sizeof...(More) == 0) return ab;
    else return kiln::concat<Axis>(ab, more...);
}

// Expressions of one shape joined along a new axis Axis of the result (numpy.stack; -1 is the last).
template <int Axis, class A, class... More>
    requires(is_graph_v<A> && (is_graph_v<More> && ...) && sizeof...(More) > 0)
constexpr auto stack(const A& a, const More&... more) {
    return kiln::concat<Axis>(kiln::expand_dims<Axis>(a), kiln::expand_dims<Axis>(more)...);
}

// Einstein summation over two operands, the subscripts at compile time: kiln::einsum<"ij,jk->ik">(a, b) (letters
// in both operands and the output are batch dimensions, letters in both but not the output are contracted, letters
// of one operand that the output lacks are summed). The same op as eager mode's kiln::einsum; differentiable.
template <fixed_string Spec, class A, class B>
    requires(is_graph_v<A> && is_graph_v<B>)
constexpr auto einsum(const A& a, const B& b) {
    detail::check_layout_operand<A>();
    detail::check_layout_operand<B>();
    constexpr ops::einsum_parse p = ops::parse_einsum(Spec.view());
    static_assert(p.why == nullptr,
                  "kiln::einsum: the subscripts are not valid: write both operands' lowercase letters and the result's, "
                  "as \"ij,jk->ik\" (no letter twice in one operand; each output letter in an operand).");
    return detail::structural<ops::with_attrs<ops::einsum, p.attrs>>(a, b);
}

}  // namespace kiln
