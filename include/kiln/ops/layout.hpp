#pragma once
// Ops that move elements without changing them, one mode-neutral struct each (ops/structural.hpp): flip, slice
// (with split's equal parts), tile and repeat, with the ops their gradients need (untile, unrepeat and unslice send
// a gradient back to the operand's shape), and the shape-rule helpers they share with ops/pad.hpp. Graph mode's
// kiln::flip<Axes...>(x), kiln::tile<R...>(x) and eager mode's kiln::flip(x, axes), kiln::tile(x, reps) are these
// ops; their kernels are the device's strided copy, fill and reduction.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "reduce.hpp"
#include "slicing.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// A shape rule's answer without exceptions, so that graph mode can run it on static shapes at compile time: the
// shape, or why there is none (`why` completes "kiln: value_error in 'op': ...").
struct shape_or_error {
    dims shape{};
    const char* why = nullptr;
};
// (Built by assignment: GCC 12 does not treat a dims copied in an aggregate initializer as a constant.)
constexpr shape_or_error shape_ok(const dims& s) {
    shape_or_error r;
    r.shape.rank = s.rank;
    for (int i = 0; i < s.rank; ++i) r.shape[i] = s[i];  // (only the meaningful extents: the rest may be unset)
    return r;
}
constexpr shape_or_error shape_fail(const char* why) {
    shape_or_error r;
    r.why = why;
    return r;
}

namespace detail_layout {
template <std::ptrdiff_t... D>
constexpr dims dims_of() {
    dims d{};
    d.rank = static_cast<int>(sizeof...(D));
    int i = 0;
    ((d[i++] = D), ...);
    return d;
}
inline dims throw_unless(const shape_or_error& r, std::string_view op, const dims& x) {
    if (r.why) throw value_error(detail::error_prefix("value_error", op) + r.why + " (shape " + to_string(x) + ")");
    return r.shape;
}
}  // namespace detail_layout

// The static form of a unary op's rule: the result's static shape when the operand's is fully known and the rule
// accepts it; otherwise dynamic, and the run-time rule reports what is wrong.
template <class Op, auto A, class S>
struct rule_static_shape {
    using type = dynamic;
};
template <class Op, auto A, std::ptrdiff_t... D>
    requires((D != dyn) && ...)
struct rule_static_shape<Op, A, shape<D...>> {
    static constexpr shape_or_error r = Op::rule(A, detail_layout::dims_of<D...>());
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<r.shape.d[I]...>;
    using type = std::conditional_t<r.why == nullptr, decltype(make(std::make_index_sequence<static_cast<std::size_t>(r.shape.rank)>{})),
                                    dynamic>;
};

// ---- flip ---------------------------------------------------------------------------------------------------

// The axes to reverse; none means every axis.
struct flip_attrs {
    std::array<int, max_rank> axes{};
    int naxes = 0;
    friend constexpr bool operator==(const flip_attrs&, const flip_attrs&) = default;
};

inline flip_attrs make_flip_attrs(const std::vector<int>& axes) {
    if (axes.size() > static_cast<std::size_t>(max_rank))
        throw value_error(detail::error_prefix("value_error", "flip") + std::to_string(axes.size()) +
                          " axes given; a tensor has at most " + std::to_string(max_rank));
    flip_attrs a;
    for (int x : axes) a.axes[static_cast<std::size_t>(a.naxes++)] = x;
    return a;
}

// x with the order of its elements reversed along axes (numpy.flip, torch.flip): a copy. Its gradient is the same
// flip of g.
struct flip {
    static constexpr std::string_view name = "flip";
    static constexpr int arity = 1;
    using attributes = flip_attrs;
    static constexpr reduce_attrs as_axes(const flip_attrs& a) {
        reduce_attrs r;
        r.axes = a.axes;
        r.naxes = a.naxes;
        return r;
    }
    static constexpr shape_or_error rule(const flip_attrs& a, const dims& x) {
        const axis_mask m = reduced_axes(as_axes(a), x.rank);
        if (!m.ok) return shape_fail(m.repeated ? "an axis repeats" : "an axis is out of range");
        return shape_ok(x);
    }
    template <flip_attrs A, class S>
    using static_shape = typename rule_static_shape<flip, A, S>::type;
    static dims result_shape(const flip_attrs& a, const dims& x, std::string_view dtype_name = {}) {
        (void)reduce_shape(as_axes(a), x, name, dtype_name);  // its messages name the axis
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const flip_attrs& a) {
        std::string s = "axes=";
        for (int i = 0; i < a.naxes; ++i) {
            if (i) s += ',';
            s += std::to_string(a.axes[static_cast<std::size_t>(i)]);
        }
        return s;
    }

    template <class T>
    static detail::strided<const T> view(const flip_attrs& a, const detail::strided<const T>& x) {
        const axis_mask m = reduced_axes(as_axes(a), x.shape.rank);
        detail::strided<const T> v = x;
        for (int d = 0; d < x.shape.rank; ++d)
            if (m.reduced[static_cast<std::size_t>(d)] && x.shape[d] > 0) {
                v.data += (x.shape[d] - 1) * x.strides[d];
                v.strides[d] = -x.strides[d];
            }
        return v;
    }
    template <class Device, class U, class X>
    static void compute(const flip_attrs& a, U* out, const X& x, std::string_view = {}) {
        Device::copy_strided(detail::strided<U>(out, x.shape, detail::contiguous_strides(x.shape)), view(a, x));
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<flip>(a, g));
    }
};

// ---- slice ----------------------------------------------------------------------------------------------------

// The elements of x along one axis that a slice picks: a view when the step is positive, a copy otherwise. Its
// gradient puts g back at those positions of a zero tensor of x's shape (unslice).
struct slice {
    static constexpr std::string_view name = "slice";
    static constexpr int arity = 1;
    using attributes = slice_attrs;
    static constexpr shape_or_error rule(const slice_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank : a.axis;
        if (ax < 0 || ax >= x.rank) return shape_fail("the axis is out of range");
        const slice_range r = slice_of(a, x[ax]);
        if (r.why) return shape_fail(r.why);
        dims out = x;
        out[ax] = r.count;
        return shape_ok(out);
    }
    template <slice_attrs A, class S>
    using static_shape = typename rule_static_shape<slice, A, S>::type;
    static dims result_shape(const slice_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), a.parts > 0 ? "split" : name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const slice_attrs& a) {
        std::string s = "axis=" + std::to_string(a.axis);
        if (a.parts > 0) return s + " parts=" + std::to_string(a.parts) + " part=" + std::to_string(a.part);
        return s + " start=" + std::to_string(a.start) + " stop=" + std::to_string(a.stop) + " step=" + std::to_string(a.step);
    }
    // The picked elements of a view of shape `x` (data and strides given): a view itself.
    template <class T>
    static detail::strided<T> view(const slice_attrs& a, const detail::strided<T>& x) {
        const int ax = a.axis < 0 ? a.axis + x.shape.rank : a.axis;
        const slice_range r = slice_of(a, x.shape[ax]);
        detail::strided<T> v = x;
        v.data += r.first * x.strides[ax];
        v.shape[ax] = r.count;
        v.strides[ax] = x.strides[ax] * r.step;
        return v;
    }
    template <class T>
    static bool try_view(const slice_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& x) {
        (void)result_shape(a, x.shape);
        if (a.parts == 0 && a.step < 0) return false;  // the plan's kernels expect non-negative strides
        out = view(a, x);
        return true;
    }
    template <class Device, class U, class X>
    static void compute(const slice_attrs& a, U* out, const X& x, std::string_view = {}) {
        const auto v = view(a, x);
        Device::copy_strided(detail::strided<U>(out, v.shape, detail::contiguous_strides(v.shape)), v);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y&, const G& g);
};

// unslice(g, x): a zero tensor of x's shape with g at the positions a slice of x picks (slice's gradient).
struct unslice {
    static constexpr std::string_view name = "unslice";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = slice_attrs;
    template <slice_attrs A, class SG, class SX>
    using static_shape = SX;
    static dims result_shape(const slice_attrs& a, const dims& g, const dims& x) {
        if (!(slice::result_shape(a, x) == g))
            throw shape_error(detail::error_prefix("shape_error", name) + "shape " + to_string(g) + " is not a slice of " +
                              to_string(x));
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const slice_attrs& a) { return slice::attrs_text(a); }
    template <class Device, class U, class G, class X>
    static void compute(const slice_attrs& a, U* out, const G& g, const X& x) {
        const detail::strided<U> all(out, x.shape, detail::contiguous_strides(x.shape));
        Device::fill(all, U(0));
        Device::copy_strided(slice::view(a, all), g);
    }
    template <class A, class G, class X, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const X&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<slice>(a, gg), detail::no_grad{});
    }
};

template <class A, class X, class Y, class G>
constexpr auto slice::gradient(const A& a, const X& x, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<unslice>(a, g, x));
}

// ---- tile and repeat ------------------------------------------------------------------------------------------

// numpy.tile's repetitions per dimension (more of them than x has dimensions add leading ones).
struct tile_attrs {
    std::array<std::ptrdiff_t, max_rank> reps{};
    int nreps = 0;
    friend constexpr bool operator==(const tile_attrs&, const tile_attrs&) = default;
};

inline tile_attrs make_tile_attrs(const std::vector<std::ptrdiff_t>& reps) {
    if (reps.size() > static_cast<std::size_t>(max_rank))
        throw value_error(detail::error_prefix("value_error", "tile") + "at most " + std::to_string(max_rank) +
                          " repetitions (the largest rank)");
    tile_attrs a;
    for (std::ptrdiff_t r : reps) a.reps[static_cast<std::size_t>(a.nreps++)] = r;
    return a;
}

namespace detail_layout {
// Tile's views: the result as (r0, x0, r1, x1, ...) and x repeated into it with zero strides along the r's.
struct tile_geometry {
    int rank = 0;
    dims xs{}, reps{};  // x's shape padded with leading 1s, and the repetitions aligned with it
};
constexpr tile_geometry tile_of(const tile_attrs& a, const dims& x) {
    tile_geometry t;
    t.rank = std::max(x.rank, a.nreps);
    t.xs.rank = t.reps.rank = t.rank;
    for (int i = 0; i < t.rank; ++i) {
        const int j = i - (t.rank - x.rank), k = i - (t.rank - a.nreps);
        t.xs[i] = j >= 0 ? x[j] : 1;
        t.reps[i] = k >= 0 ? a.reps[static_cast<std::size_t>(k)] : 1;
    }
    return t;
}
// The result seen as (r0, x0, r1, x1, ...): one axis per repetition and per extent of x that is not 1 (the others
// have extent 1 and are left out), each with the result's dimension it belongs to; tile and untile view their
// operands through it, and the rule allows at most max_rank of them.
struct tile_wide_axes {
    int rank = 0;
    std::array<std::ptrdiff_t, 2 * max_rank> extent{};
    std::array<int, 2 * max_rank> dim{};
    std::array<bool, 2 * max_rank> repeats{};  // a repetition's axis (x is read with stride 0 along it)
};
constexpr tile_wide_axes wide_axes(const tile_geometry& t) {
    tile_wide_axes w;
    for (int i = 0; i < t.rank; ++i)
        for (const bool rep : {true, false})
            if (const std::ptrdiff_t e = rep ? t.reps[i] : t.xs[i]; e != 1) {
                const auto k = static_cast<std::size_t>(w.rank++);
                w.extent[k] = e, w.dim[k] = i, w.repeats[k] = rep;
            }
    return w;
}
}  // namespace detail_layout

// x repeated reps[i] times along each dimension (numpy.tile). Its gradient sums g over the repetitions (untile).
struct tile {
    static constexpr std::string_view name = "tile";
    static constexpr int arity = 1;
    using attributes = tile_attrs;
    static constexpr shape_or_error rule(const tile_attrs& a, const dims& x) {
        for (int i = 0; i < a.nreps; ++i)
            if (a.reps[static_cast<std::size_t>(i)] < 0) return shape_fail("repetitions must be non-negative");
        const auto t = detail_layout::tile_of(a, x);
        if (detail_layout::wide_axes(t).rank > max_rank)
            return shape_fail("at most 8 of the repetitions and of x's extents may differ from 1");
        dims out{};
        out.rank = t.rank;
        for (int i = 0; i < t.rank; ++i)
            if (__builtin_mul_overflow(t.xs[i], t.reps[i], &out[i])) return shape_fail("the result is too large");
        return shape_ok(out);
    }
    template <tile_attrs A, class S>
    using static_shape = typename rule_static_shape<tile, A, S>::type;
    static dims result_shape(const tile_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const tile_attrs& a) {
        std::string s = "reps=";
        for (int i = 0; i < a.nreps; ++i) {
            if (i) s += ',';
            s += std::to_string(a.reps[static_cast<std::size_t>(i)]);
        }
        return s;
    }
    template <class Device, class U, class X>
    static void compute(const tile_attrs& a, U* out, const X& x, std::string_view = {}) {
        const auto t = detail_layout::tile_of(a, x.shape);
        const auto w = detail_layout::wide_axes(t);
        dims wide{}, from{};
        wide.rank = from.rank = w.rank;
        for (int k = 0; k < w.rank; ++k) {
            const auto q = static_cast<std::size_t>(k);
            const int j = w.dim[q] - (t.rank - x.shape.rank);  // x's own dimension (< 0: a leading one it lacks)
            wide[k] = w.extent[q];
            from[k] = w.repeats[q] || j < 0 ? 0 : x.strides[j];
        }
        Device::copy_strided(detail::strided<U>(out, wide, detail::contiguous_strides(wide)), X(x.data, wide, from));
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y&, const G& g);
};

// untile(g, x): g summed over tile's repetitions, in x's shape (tile's gradient).
struct untile {
    static constexpr std::string_view name = "untile";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = tile_attrs;
    template <tile_attrs A, class SG, class SX>
    using static_shape = SX;
    static dims result_shape(const tile_attrs& a, const dims& g, const dims& x) {
        if (!(tile::result_shape(a, x) == g))
            throw shape_error(detail::error_prefix("shape_error", name) + "shape " + to_string(g) + " is not a tiling of " +
                              to_string(x));
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const tile_attrs& a) { return tile::attrs_text(a); }
    template <class Device, class U, class G, class X>
    static void compute(const tile_attrs& a, U* out, const G& g, const X& x) {
        const auto t = detail_layout::tile_of(a, x.shape);
        const auto w = detail_layout::wide_axes(t);
        dims wide{}, by{}, keep{};
        wide.rank = by.rank = keep.rank = w.rank;
        for (int k = 0; k < w.rank; ++k) {
            const auto q = static_cast<std::size_t>(k);
            const int i = w.dim[q];
            wide[k] = w.extent[q];
            by[k] = w.repeats[q] ? g.strides[i] * t.xs[i] : g.strides[i];
            keep[k] = w.repeats[q] ? 1 : t.xs[i];
        }
        Device::reduce(detail::fold_kind::sum, G(g.data, wide, by), keep, out);
    }
    template <class A, class G, class X, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const X&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<tile>(a, gg), detail::no_grad{});
    }
};

template <class A, class X, class Y, class G>
constexpr auto tile::gradient(const A& a, const X& x, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<untile>(a, g, x));
}

// numpy.repeat along one axis: each element `repeats` times.
struct repeat_attrs {
    std::ptrdiff_t repeats = 1;
    int axis = 0;
    friend constexpr bool operator==(const repeat_attrs&, const repeat_attrs&) = default;
};

// Each element of x repeated `repeats` times along `axis` (numpy.repeat). Its gradient sums each run of g.
struct repeat {
    static constexpr std::string_view name = "repeat";
    static constexpr int arity = 1;
    using attributes = repeat_attrs;
    static constexpr shape_or_error rule(const repeat_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank : a.axis;
        if (ax < 0 || ax >= x.rank) return shape_fail("the axis is out of range");
        if (a.repeats < 0) return shape_fail("repetitions must be non-negative");
        if (x.rank == max_rank) return shape_fail("the tensor has the largest rank");
        dims out = x;
        if (__builtin_mul_overflow(x[ax], a.repeats, &out[ax])) return shape_fail("the result is too large");
        return shape_ok(out);
    }
    template <repeat_attrs A, class S>
    using static_shape = typename rule_static_shape<repeat, A, S>::type;
    static dims result_shape(const repeat_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const repeat_attrs& a) {
        return "repeats=" + std::to_string(a.repeats) + " axis=" + std::to_string(a.axis);
    }
    // The result (or g) as x's shape with an axis of `repeats` after `axis`.
    static dims widened(const repeat_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank : a.axis;
        dims w{};
        w.rank = x.rank + 1;
        for (int i = 0, j = 0; i < w.rank; ++i) w[i] = i == ax + 1 ? a.repeats : x[j++];
        return w;
    }
    template <class Device, class U, class X>
    static void compute(const repeat_attrs& a, U* out, const X& x, std::string_view = {}) {
        const int ax = a.axis < 0 ? a.axis + x.shape.rank : a.axis;
        const dims wide = widened(a, x.shape);
        dims from{};
        from.rank = wide.rank;
        for (int i = 0, j = 0; i < wide.rank; ++i) from[i] = i == ax + 1 ? 0 : x.strides[j++];
        Device::copy_strided(detail::strided<U>(out, wide, detail::contiguous_strides(wide)), X(x.data, wide, from));
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y&, const G& g);
};

// unrepeat(g, x): each run of `repeats` elements of g summed, in x's shape (repeat's gradient).
struct unrepeat {
    static constexpr std::string_view name = "unrepeat";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = repeat_attrs;
    template <repeat_attrs A, class SG, class SX>
    using static_shape = SX;
    static dims result_shape(const repeat_attrs& a, const dims& g, const dims& x) {
        if (!(repeat::result_shape(a, x) == g))
            throw shape_error(detail::error_prefix("shape_error", name) + "shape " + to_string(g) + " is not a repeat of " +
                              to_string(x));
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const repeat_attrs& a) { return repeat::attrs_text(a); }
    template <class Device, class U, class G, class X>
    static void compute(const repeat_attrs& a, U* out, const G& g, const X& x) {
        const int ax = a.axis < 0 ? a.axis + x.shape.rank : a.axis;
        const dims wide = repeat::widened(a, x.shape);
        dims by{}, keep = wide;
        by.rank = wide.rank;
        for (int i = 0, j = 0; i < wide.rank; ++i) {
            if (i == ax) by[i] = g.strides[j] * a.repeats;
            else if (i == ax + 1) by[i] = g.strides[j++];
            else by[i] = g.strides[j++];
        }
        keep[ax + 1] = 1;
        Device::reduce(detail::fold_kind::sum, G(g.data, wide, by), keep, out);
    }
    template <class A, class G, class X, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const X&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<repeat>(a, gg), detail::no_grad{});
    }
};

template <class A, class X, class Y, class G>
constexpr auto repeat::gradient(const A& a, const X& x, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<unrepeat>(a, g, x));
}

}  // namespace ops
}  // namespace kiln
