#pragma once
// Joining and axis insertion as mode-neutral ops (ops/structural.hpp): concat of two operands along an axis (graph
// mode's kiln::concat<Axis>(a, b, ...) folds more operands into a chain of them, and kiln::stack inserts the axis
// first), expand_dims and squeeze of one axis (views), and the ops concat's gradient needs: take_part, the leading
// or trailing part of g that an operand filled, and put_part, its gradient. Eager mode's kiln::concat (any number
// of tensors) runs concat_shape's rule and messages.
#include <string>
#include <string_view>

#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "layout.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// The axis of a join, of an inserted or removed dimension.
struct join_attrs {
    int axis = 0;
    friend constexpr bool operator==(const join_attrs&, const join_attrs&) = default;
};

// concat's rule for one more operand: `shape` (the result so far, or the first operand's) grown by `other` along
// the axis, with eager mode's sentences.
inline int concat_axis(int axis, const dims& first) {
    const int ax = axis < 0 ? axis + first.rank : axis;
    if (ax < 0 || ax >= first.rank)
        throw value_error("kiln: value_error in 'concat': axis " + std::to_string(axis) + " is out of range for shape " +
                          to_string(first));
    return ax;
}
inline void concat_check(int ax, const dims& first, const dims& other) {
    bool ok = other.rank == first.rank;
    for (int i = 0; ok && i < first.rank; ++i) ok = i == ax || other[i] == first[i];
    if (!ok)
        throw shape_error("kiln: shape_error in 'concat': shapes " + to_string(first) + " and " + to_string(other) +
                          " differ outside axis " + std::to_string(ax));
}

namespace detail_join {
template <int Axis, class SX, class SY>
struct concat_static {
    using type = dynamic;
};
template <int Axis, std::ptrdiff_t... X, std::ptrdiff_t... Y>
    requires(sizeof...(X) == sizeof...(Y) && ((X != dyn) && ...) && ((Y != dyn) && ...))
struct concat_static<Axis, shape<X...>, shape<Y...>> {
    static constexpr int r = static_cast<int>(sizeof...(X));
    static constexpr int ax = Axis < 0 ? Axis + r : Axis;
    static constexpr std::array<std::ptrdiff_t, sizeof...(X) + 1> xs{X..., 0}, ys{Y..., 0};
    static constexpr bool ok = [] {
        if (ax < 0 || ax >= r) return false;
        for (int i = 0; i < r; ++i)
            if (i != ax && xs[static_cast<std::size_t>(i)] != ys[static_cast<std::size_t>(i)]) return false;
        return true;
    }();
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>)
        -> shape<(static_cast<int>(I) == ax ? xs[I] + ys[I] : xs[I])...>;
    using type = std::conditional_t<ok, decltype(make(std::make_index_sequence<sizeof...(X)>{})), dynamic>;
};
template <class T>
detail::strided<T> part_view(const detail::strided<T>& whole, int ax, std::ptrdiff_t start, std::ptrdiff_t len) {
    detail::strided<T> v = whole;
    if (len > 0) v.data += start * whole.strides[ax];
    v.shape[ax] = len;
    return v;
}
}  // namespace detail_join

struct take_part;
struct put_part;

// x and y joined along an axis (their other extents equal). Its gradient gives each operand its part of g.
struct concat {
    static constexpr std::string_view name = "concat";
    static constexpr int arity = 2;
    using attributes = join_attrs;
    template <join_attrs A, class SX, class SY>
    using static_shape = typename detail_join::concat_static<A.axis, SX, SY>::type;
    static dims result_shape(const join_attrs& a, const dims& x, const dims& y) {
        const int ax = concat_axis(a.axis, x);
        concat_check(ax, x, y);
        dims out = x;
        out[ax] += y[ax];
        return out;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const join_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class Device, class U, class X, class Y>
    static void compute(const join_attrs& a, U* out, const X& x, const Y& y) {
        const dims s = result_shape(a, x.shape, y.shape);
        const int ax = concat_axis(a.axis, x.shape);
        const detail::strided<U> all(out, s, detail::contiguous_strides(s));
        Device::copy_strided(detail_join::part_view(all, ax, 0, x.shape[ax]), x);
        Device::copy_strided(detail_join::part_view(all, ax, x.shape[ax], y.shape[ax]), y);
    }
    template <class A, class X, class Y, class R, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y& y, const R&, const G& g);
};

// The part of g (joined along the axis) that an operand of ref's shape filled: the leading one, or with from_end
// the trailing one.
struct part_attrs {
    int axis = 0;
    bool from_end = false;
    friend constexpr bool operator==(const part_attrs&, const part_attrs&) = default;
};

// take_part(g, ref): g's leading (or trailing) part of ref's extent along the axis; a view.
struct take_part {
    static constexpr std::string_view name = "take_part";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = part_attrs;
    template <part_attrs A, class SG, class SR>
    using static_shape = SR;
    static dims result_shape(const part_attrs& a, const dims& g, const dims& ref) {
        const int ax = concat_axis(a.axis, g);
        concat_check(ax, g, ref);
        if (ref[ax] > g[ax])
            throw shape_error("kiln: shape_error in 'take_part': " + to_string(ref) + " is not a part of " + to_string(g));
        return ref;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const part_attrs& a) {
        return "axis=" + std::to_string(a.axis) + (a.from_end ? " from_end=true" : " from_end=false");
    }
    template <class T>
    static detail::strided<T> view(const part_attrs& a, const detail::strided<T>& g, const dims& ref) {
        const int ax = concat_axis(a.axis, g.shape);
        return detail_join::part_view(g, ax, a.from_end ? g.shape[ax] - ref[ax] : 0, ref[ax]);
    }
    template <class T, class R>
    static bool try_view(const part_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& g,
                         const detail::strided<const R>& ref) {
        (void)result_shape(a, g.shape, ref.shape);
        out = view(a, g, ref.shape);
        return true;
    }
    template <class Device, class U, class G, class R>
    static void compute(const part_attrs& a, U* out, const G& g, const R& ref) {
        (void)result_shape(a, g.shape, ref.shape);
        Device::copy_strided(detail::strided<U>(out, ref.shape, detail::contiguous_strides(ref.shape)), view(a, g, ref.shape));
    }
    template <class A, class G, class R, class Y, class GG>
    static constexpr auto gradient(const A& a, const G& g, const R&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<put_part>(a, gg, g), detail::no_grad{});
    }
};

// put_part(p, ref): a zero tensor of ref's shape with p as its leading (or trailing) part (take_part's gradient).
struct put_part {
    static constexpr std::string_view name = "put_part";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = part_attrs;
    template <part_attrs A, class SP, class SR>
    using static_shape = SR;
    static dims result_shape(const part_attrs& a, const dims& p, const dims& ref) {
        (void)take_part::result_shape(a, ref, p);
        return ref;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const part_attrs& a) { return take_part::attrs_text(a); }
    template <class Device, class U, class P, class R>
    static void compute(const part_attrs& a, U* out, const P& p, const R& ref) {
        (void)result_shape(a, p.shape, ref.shape);
        const detail::strided<U> all(out, ref.shape, detail::contiguous_strides(ref.shape));
        Device::fill(all, U(0));
        Device::copy_strided(take_part::view(a, all, p.shape), p);
    }
    template <class A, class P, class R, class Y, class GG>
    static constexpr auto gradient(const A& a, const P& p, const R&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<P>::template apply<take_part>(a, gg, p), detail::no_grad{});
    }
};

template <class A, class X, class Y, class R, class G>
constexpr auto concat::gradient(const A& a, const X& x, const Y& y, const R&, const G& g) {
    using F = structural_fns<X>;
    constexpr auto lead = [](const join_attrs& j, bool end) { return part_attrs{j.axis, end}; };
    if constexpr (is_attrs_c_v<A>) {
        return detail::grads(F::template apply<take_part>(attrs_c<lead(A::value, false)>{}, g, x),
                             F::template apply<take_part>(attrs_c<lead(A::value, true)>{}, g, y));
    } else {
        return detail::grads(F::template apply<take_part>(lead(a, false), g, x), F::template apply<take_part>(lead(a, true), g, y));
    }
}

// x with a new axis of extent 1 at `axis` (numpy.expand_dims; -1 appends one); a view. Its gradient is squeeze.
struct expand_dims {
    static constexpr std::string_view name = "unsqueeze";
    static constexpr int arity = 1;
    using attributes = join_attrs;
    static constexpr shape_or_error rule(const join_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank + 1 : a.axis;
        if (ax < 0 || ax > x.rank) return shape_fail("the axis is out of range");
        if (x.rank == max_rank) return shape_fail("the tensor has the largest rank");
        dims out{};
        out.rank = x.rank + 1;
        for (int i = 0, j = 0; i < out.rank; ++i) out[i] = i == ax ? 1 : x[j++];
        return shape_ok(out);
    }
    template <join_attrs A, class S>
    using static_shape = typename rule_static_shape<expand_dims, A, S>::type;
    static dims result_shape(const join_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const join_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class T>
    static bool try_view(const join_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& x) {
        const dims s = result_shape(a, x.shape);
        const int ax = a.axis < 0 ? a.axis + x.shape.rank + 1 : a.axis;
        out.data = x.data;
        out.shape = s;
        out.strides.rank = s.rank;
        for (int i = 0, j = 0; i < s.rank; ++i) out.strides[i] = i == ax ? 0 : x.strides[j++];
        return true;
    }
    template <class Device, class U, class X>
    static void compute(const join_attrs& a, U* out, const X& x, std::string_view = {}) {
        Device::copy_strided(detail::strided<U>(out, x.shape, detail::contiguous_strides(x.shape)), x);
        (void)a;
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g);
};

// x without its axis `axis`, which must have extent 1; a view. Its gradient is expand_dims.
struct squeeze {
    static constexpr std::string_view name = "squeeze";
    static constexpr int arity = 1;
    using attributes = join_attrs;
    static constexpr shape_or_error rule(const join_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank : a.axis;
        if (ax < 0 || ax >= x.rank) return shape_fail("the axis is out of range");
        if (x[ax] != 1) return shape_fail("the axis does not have extent 1");
        dims out{};
        out.rank = x.rank - 1;
        for (int i = 0, j = 0; i < x.rank; ++i)
            if (i != ax) out[j++] = x[i];
        return shape_ok(out);
    }
    template <join_attrs A, class S>
    using static_shape = typename rule_static_shape<squeeze, A, S>::type;
    static dims result_shape(const join_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const join_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class T>
    static bool try_view(const join_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& x) {
        const dims s = result_shape(a, x.shape);
        const int ax = a.axis < 0 ? a.axis + x.shape.rank : a.axis;
        out.data = x.data;
        out.shape = s;
        out.strides.rank = s.rank;
        for (int i = 0, j = 0; i < x.shape.rank; ++i)
            if (i != ax) out.strides[j++] = x.strides[i];
        return true;
    }
    template <class Device, class U, class X>
    static void compute(const join_attrs& a, U* out, const X& x, std::string_view = {}) {
        // (The same elements in the same order: the shape rule, already run, made the result's shape.)
        Device::copy_strided(detail::strided<U>(out, x.shape, detail::contiguous_strides(x.shape)), x);
        (void)a;
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<expand_dims>(a, g));
    }
};

template <class A, class X, class Y, class G>
constexpr auto expand_dims::gradient(const A& a, const X&, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<squeeze>(a, g));
}

// The new order of the axes: result axis i is operand axis perm[i] (numpy.transpose(x, axes)).
struct permute_attrs {
    std::array<int, max_rank> perm{};
    int n = 0;
    friend constexpr bool operator==(const permute_attrs&, const permute_attrs&) = default;
};

// The order that undoes a permutation (the gradient's), as a value or at compile time.
constexpr permute_attrs inverse(const permute_attrs& a) {
    permute_attrs r;
    r.n = a.n;
    for (int i = 0; i < a.n; ++i) {
        const int p = a.perm[static_cast<std::size_t>(i)];
        if (p >= 0 && p < a.n) r.perm[static_cast<std::size_t>(p)] = i;
    }
    return r;
}
template <permute_attrs A>
constexpr attrs_c<inverse(A)> inverse(attrs_c<A>) {
    return {};
}

// x with its axes in a new order; a view. Its gradient permutes g back.
struct permute {
    static constexpr std::string_view name = "permute";
    static constexpr int arity = 1;
    using attributes = permute_attrs;
    static constexpr shape_or_error rule(const permute_attrs& a, const dims& x) {
        if (a.n != x.rank) return shape_fail("the order must name every axis once");
        std::array<bool, max_rank> seen{};
        dims out{};
        out.rank = x.rank;
        for (int i = 0; i < a.n; ++i) {
            const int p = a.perm[static_cast<std::size_t>(i)];
            if (p < 0 || p >= x.rank || seen[static_cast<std::size_t>(p)]) return shape_fail("the order must name every axis once");
            seen[static_cast<std::size_t>(p)] = true;
            out[i] = x[p];
        }
        return shape_ok(out);
    }
    template <permute_attrs A, class S>
    using static_shape = typename rule_static_shape<permute, A, S>::type;
    static dims result_shape(const permute_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const permute_attrs& a) {
        std::string s = "dims=";
        for (int i = 0; i < a.n; ++i) {
            if (i) s += ',';
            s += std::to_string(a.perm[static_cast<std::size_t>(i)]);
        }
        return s;
    }
    template <class T>
    static detail::strided<T> view(const permute_attrs& a, const detail::strided<T>& x) {
        detail::strided<T> v = x;
        for (int i = 0; i < a.n; ++i) {
            v.shape[i] = x.shape[a.perm[static_cast<std::size_t>(i)]];
            v.strides[i] = x.strides[a.perm[static_cast<std::size_t>(i)]];
        }
        return v;
    }
    template <class T>
    static bool try_view(const permute_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& x) {
        (void)result_shape(a, x.shape);
        out = view(a, x);
        return true;
    }
    template <class Device, class U, class X>
    static void compute(const permute_attrs& a, U* out, const X& x, std::string_view = {}) {
        const auto v = view(a, x);
        Device::copy_strided(detail::strided<U>(out, v.shape, detail::contiguous_strides(v.shape)), v);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<permute>(inverse(a), g));
    }
};

}  // namespace ops
}  // namespace kiln
