#pragma once
// Constant padding as a mode-neutral op (ops/structural.hpp): pad, with crop, its gradient (a view of g's interior).
// Graph mode's kiln::pad<...>(x) and eager mode's kiln::pad(x, widths) are these ops; their kernels are the
// device's fill and strided copy.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "layout.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// ---- pad and crop ---------------------------------------------------------------------------------------------

// Constant padding: `before[i]` and `after[i]` elements around each of the first n dimensions, of value `value()`
// (kept as its bits, so that the attributes stay a structural type for every compiler).
struct pad_attrs {
    std::array<std::ptrdiff_t, max_rank> before{}, after{};
    int n = 0;
    std::uint64_t value_bits = 0;  // 0.0
    constexpr double value() const { return std::bit_cast<double>(value_bits); }
    friend constexpr bool operator==(const pad_attrs&, const pad_attrs&) = default;
};

inline pad_attrs make_pad_attrs(const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& widths, double value) {
    if (widths.size() > static_cast<std::size_t>(max_rank))
        throw value_error(detail::error_prefix("value_error", "pad") + std::to_string(widths.size()) +
                          " pad widths given; a tensor has at most " + std::to_string(max_rank) + " dimensions");
    pad_attrs a;
    for (const auto& [b, e] : widths) {
        a.before[static_cast<std::size_t>(a.n)] = b;
        a.after[static_cast<std::size_t>(a.n++)] = e;
    }
    a.value_bits = std::bit_cast<std::uint64_t>(value);
    return a;
}

// The same widths padding with 0 (crop's gradient), as a value or at compile time.
constexpr pad_attrs with_zero(pad_attrs a) {
    a.value_bits = 0;
    return a;
}
template <pad_attrs A>
constexpr attrs_c<with_zero(A)> with_zero(attrs_c<A>) {
    return {};
}

namespace detail_layout {
// The part of a padded view (shape `outer`) where the unpadded operand sits.
template <class T>
detail::strided<T> interior(const pad_attrs& a, const detail::strided<T>& outer) {
    detail::strided<T> v = outer;
    for (int i = 0; i < a.n; ++i) {
        const auto b = a.before[static_cast<std::size_t>(i)];
        v.shape[i] = outer.shape[i] - b - a.after[static_cast<std::size_t>(i)];
        if (v.shape[i] > 0) v.data += b * outer.strides[i];
    }
    return v;
}
}  // namespace detail_layout

// x with constant padding (numpy.pad's constant mode; fewer widths than dimensions pad the leading ones). Its
// gradient is the interior of g (crop).
struct pad {
    static constexpr std::string_view name = "pad";
    static constexpr int arity = 1;
    using attributes = pad_attrs;
    static constexpr shape_or_error rule(const pad_attrs& a, const dims& x) {
        if (a.n > x.rank) return shape_fail("more pad widths than dimensions");
        dims out = x;
        for (int i = 0; i < a.n; ++i) {
            const auto b = a.before[static_cast<std::size_t>(i)], e = a.after[static_cast<std::size_t>(i)];
            if (b < 0 || e < 0) return shape_fail("pad widths must be non-negative");
            if (__builtin_add_overflow(x[i], b, &out[i]) || __builtin_add_overflow(out[i], e, &out[i]))
                return shape_fail("the result is too large");
        }
        return shape_ok(out);
    }
    template <pad_attrs A, class S>
    using static_shape = typename rule_static_shape<pad, A, S>::type;
    static dims result_shape(const pad_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const pad_attrs& a) {
        std::string b = "before=", e = " after=";
        for (int i = 0; i < a.n; ++i) {
            if (i) b += ',', e += ',';
            b += std::to_string(a.before[static_cast<std::size_t>(i)]);
            e += std::to_string(a.after[static_cast<std::size_t>(i)]);
        }
        return b + e + " value=" + detail::number_text(a.value());
    }
    template <class Device, class U, class X>
    static void compute(const pad_attrs& a, U* out, const X& x, std::string_view = {}) {
        const dims s = result_shape(a, x.shape);
        const detail::strided<U> all(out, s, detail::contiguous_strides(s));
        Device::fill(all, static_cast<U>(a.value()));
        Device::copy_strided(detail_layout::interior(a, all), x);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g);
};

// crop(g): the interior of a padded g, without the widths (pad's gradient); a view.
struct crop {
    static constexpr std::string_view name = "crop";
    static constexpr int arity = 1;
    using attributes = pad_attrs;
    static constexpr shape_or_error rule(const pad_attrs& a, const dims& g) {
        if (a.n > g.rank) return shape_fail("more pad widths than dimensions");
        dims out = g;
        for (int i = 0; i < a.n; ++i) {
            out[i] = g[i] - a.before[static_cast<std::size_t>(i)] - a.after[static_cast<std::size_t>(i)];
            if (out[i] < 0) return shape_fail("the pad widths exceed an extent");
        }
        return shape_ok(out);
    }
    template <pad_attrs A, class S>
    using static_shape = typename rule_static_shape<crop, A, S>::type;
    static dims result_shape(const pad_attrs& a, const dims& g, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, g), name, g);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const pad_attrs& a) { return pad::attrs_text(a); }
    template <class T>
    static bool try_view(const pad_attrs& a, detail::strided<const T>& out, const detail::strided<const T>& g) {
        (void)result_shape(a, g.shape);
        out = detail_layout::interior(a, g);
        return true;
    }
    template <class Device, class U, class G>
    static void compute(const pad_attrs& a, U* out, const G& g, std::string_view = {}) {
        const auto v = detail_layout::interior(a, g);
        Device::copy_strided(detail::strided<U>(out, v.shape, detail::contiguous_strides(v.shape)), v);
    }
    template <class A, class G, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<pad>(with_zero(a), gg));
    }
};

template <class A, class X, class Y, class G>
constexpr auto pad::gradient(const A& a, const X&, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<crop>(a, g));
}

}  // namespace ops
}  // namespace kiln
