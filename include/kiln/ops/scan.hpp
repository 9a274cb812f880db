#pragma once
// Running sums and products along an axis, one mode-neutral op: ops::scan<K> (cumsum, cumprod). Its attributes
// are the axis and the direction (reverse scans from the end, as tf.math.cumsum's reverse), and its gradient is a
// scan in the other direction: the gradient of cumsum is the reversed cumsum of g, so no flip is needed in any
// mode. See ops/structural.hpp for the protocol; graph mode's kiln::cumsum<Axis>(x) and eager mode's
// kiln::cumsum(x, axis) are this op.
#include <string>
#include <string_view>
#include <cstdint>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

enum class scan_kind { sum, prod };

struct scan_attrs {
    int axis = 0;
    bool reverse = false;
    friend constexpr bool operator==(const scan_attrs&, const scan_attrs&) = default;
};

// The same scan in the other direction (the gradient's), as a value or at compile time.
constexpr scan_attrs reversed(scan_attrs a) {
    a.reverse = !a.reverse;
    return a;
}
template <scan_attrs A>
constexpr attrs_c<reversed(A)> reversed(attrs_c<A>) {
    return {};
}

template <class S, scan_attrs A>
struct scan_axis_out_of_range_for_static_shape {
    static_assert(sizeof(S) == 0, "kiln: the scan's axis is out of range for the operand's static shape (see S and A above).");
    using type = dynamic;
};

// A scan keeps its operand's static shape; an axis out of its range is refused at compile time.
template <scan_attrs A, class S>
struct scan_static_shape {
    using type = S;  // dynamic
};
template <scan_attrs A, std::ptrdiff_t... D>
struct scan_static_shape<A, shape<D...>> {
    static constexpr int r = sizeof...(D);
    using type = typename std::conditional_t<(A.axis < r && A.axis >= -r), std::type_identity<shape<D...>>,
                                             scan_axis_out_of_range_for_static_shape<shape<D...>, A>>::type;
};

template <scan_kind K>
struct scan {
    static constexpr std::string_view name = K == scan_kind::sum ? "cumsum" : "cumprod";
    static constexpr int arity = 1;
    using attributes = scan_attrs;

    template <scan_attrs A, class S>
    using static_shape = typename scan_static_shape<A, S>::type;

    // The axis, counted from the front.
    static int axis(const scan_attrs& a, const dims& x) {
        const int ax = a.axis < 0 ? a.axis + x.rank : a.axis;
        if (ax < 0 || ax >= x.rank)
            throw value_error(detail::error_prefix("value_error", name) + "axis " + std::to_string(a.axis) +
                              " is out of range for shape " + to_string(x));
        return ax;
    }
    static dims result_shape(const scan_attrs& a, const dims& x, std::string_view = {}) {
        (void)axis(a, x);
        return x;
    }
    // Integer and bool operands accumulate in int64, as in NumPy and PyTorch.
    template <class T>
    using result_type = std::conditional_t<std::is_floating_point_v<T>, T, std::int64_t>;
    static dtype result_dtype(const scan_attrs&, dtype x) { return detail::is_floating(x) ? x : dtype::int64; }
    static std::string attrs_text(const scan_attrs& a) {
        return "axis=" + std::to_string(a.axis) + (a.reverse ? " reverse=true" : " reverse=false");
    }

    template <class Device, class U, class X>
    static void compute(const scan_attrs& a, U* out, const X& x, std::string_view = {}) {
        Device::scan(K == scan_kind::prod, x, axis(a, x.shape), a.reverse, out);
    }

    // Each input feeds every later output (earlier, for a reverse scan): the gradient is g scanned the other way.
    // A product's divides by x, so it is not defined where x is 0.
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y& y, const G& g) {
        using F = structural_fns<X>;
        if constexpr (K == scan_kind::sum) return detail::grads(F::template scan<scan_kind::sum>(reversed(a), g));
        else return detail::grads(F::template scan<scan_kind::sum>(reversed(a), g * y) / x);
    }
};

}  // namespace ops
}  // namespace kiln
