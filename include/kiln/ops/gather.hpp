#pragma once
// Integer-array indexing and sorting, one mode-neutral struct each (ops/structural.hpp): take_along_axis (torch.gather)
// and take (numpy.take, index_select), with the scatter-adds that are their gradients, and argsort. sort is
// take_along_axis of argsort in every mode, so its gradient is the scatter. Indices are checked by the kernel
// (negative ones count from the end), so graph mode and traced functions check them at every run.
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// The axis that an index addresses.
struct axis_attrs {
    int axis = 0;
    friend constexpr bool operator==(const axis_attrs&, const axis_attrs&) = default;
};

namespace detail_gather {
inline int axis_in(int axis, const dims& x, std::string_view op) {
    const int ax = axis < 0 ? axis + x.rank : axis;
    if (ax < 0 || ax >= x.rank)
        throw value_error(detail::error_prefix("value_error", op) + "axis " + std::to_string(axis) +
                          " is out of range for shape " + to_string(x));
    return ax;
}
// take_along_axis's shape rule: the index has x's rank and x's extents except along the axis.
inline dims along_shape(int axis, const dims& x, const dims& index, std::string_view op) {
    const int ax = axis_in(axis, x, op);
    bool ok = index.rank == x.rank;
    for (int i = 0; ok && i < x.rank; ++i) ok = i == ax || index[i] == x[i];
    if (!ok)
        throw shape_error(detail::error_prefix("shape_error", op) + "the index " + to_string(index) +
                          " must have the shape of x " + to_string(x) + " except along axis " + std::to_string(ax));
    return index;
}
// take's shape rule: x's dimensions before the axis, the index's, x's after the axis.
inline dims take_shape(int axis, const dims& x, const dims& index, std::string_view op) {
    const int ax = axis_in(axis, x, op);
    if (x.rank - 1 + index.rank > max_rank)
        throw value_error(detail::error_prefix("value_error", op) + "the result would have rank " +
                          std::to_string(x.rank - 1 + index.rank) + ", more than kiln::max_rank");
    dims out{};
    out.rank = x.rank - 1 + index.rank;
    int k = 0;
    for (int i = 0; i < ax; ++i) out[k++] = x[i];
    for (int i = 0; i < index.rank; ++i) out[k++] = index[i];
    for (int i = ax + 1; i < x.rank; ++i) out[k++] = x[i];
    return out;
}
}  // namespace detail_gather

struct scatter_add_along;
struct take_add;

// out[.., j, ..] = x[.., index[.., j, ..], ..] along an axis (numpy.take_along_axis, torch.gather). Its gradient
// adds g into a zero tensor of x's shape at the indexed positions; the index gets none.
struct take_along_axis {
    static constexpr std::string_view name = "take_along_axis";
    static constexpr int arity = 2;
    static constexpr int index_arg = 1;
    using attributes = axis_attrs;
    template <axis_attrs A, class SX, class SI>
    using static_shape = SI;
    static dims result_shape(const axis_attrs& a, const dims& x, const dims& index) {
        return detail_gather::along_shape(a.axis, x, index, name);
    }
    template <class T>
    using result_type = T;
    template <std::size_t I, class T>
    using operand_type = std::int64_t;  // eager mode's index (graph mode takes any integer type)
    static std::string attrs_text(const axis_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class Device, class U, class X, class I>
    static void compute(const axis_attrs& a, U* out, const X& x, const I& index) {
        Device::gather_along(x, index, detail_gather::axis_in(a.axis, x.shape, name), out, name);
    }
    template <class A, class X, class I, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const I& index, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<scatter_add_along>(a, g, index, x), detail::no_grad{});
    }
};

// scatter_add_along(g, index, x): a zero tensor of x's shape with g added at the positions index picks along the
// axis (take_along_axis's gradient; torch.scatter_add into zeros).
struct scatter_add_along {
    static constexpr std::string_view name = "scatter_add_along";
    static constexpr int arity = 3;
    static constexpr int index_arg = 1;
    static constexpr int shape_only_arg = 2;
    using attributes = axis_attrs;
    template <axis_attrs A, class SG, class SI, class SX>
    using static_shape = SX;
    static dims result_shape(const axis_attrs& a, const dims& g, const dims& index, const dims& x) {
        (void)detail_gather::along_shape(a.axis, x, index, name);
        if (!(g == index))
            throw shape_error(detail::error_prefix("shape_error", name) + "the source " + to_string(g) +
                              " must have the index's shape " + to_string(index));
        return x;
    }
    template <class T>
    using result_type = T;
    template <std::size_t I, class T>
    using operand_type = std::conditional_t<I == 1, std::int64_t, T>;
    static std::string attrs_text(const axis_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class Device, class U, class G, class I, class X>
    static void compute(const axis_attrs& a, U* out, const G& g, const I& index, const X& x) {
        Device::scatter_add_along(g, index, detail_gather::axis_in(a.axis, x.shape, name), x.shape, out, name);
    }
    template <class A, class G, class I, class X, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const I& index, const X&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<take_along_axis>(a, gg, index), detail::no_grad{},
                             detail::no_grad{});
    }
};

// x's entries at each index along an axis (numpy.take(x, index, axis); torch.index_select for a 1-D index): the
// result has x's dimensions before the axis, the index's, then x's after it. Its gradient adds g back (take_add).
struct take {
    static constexpr std::string_view name = "index_select";
    static constexpr int arity = 2;
    static constexpr int index_arg = 1;
    using attributes = axis_attrs;
    template <axis_attrs A, class SX, class SI>
    using static_shape = dynamic;
    static dims result_shape(const axis_attrs& a, const dims& x, const dims& index) {
        return detail_gather::take_shape(a.axis, x, index, name);
    }
    template <class T>
    using result_type = T;
    template <std::size_t I, class T>
    using operand_type = std::int64_t;
    static std::string attrs_text(const axis_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class Device, class U, class X, class I>
    static void compute(const axis_attrs& a, U* out, const X& x, const I& index) {
        Device::take(x, index, detail_gather::axis_in(a.axis, x.shape, name), out, name);
    }
    template <class A, class X, class I, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const I& index, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<take_add>(a, g, index, x), detail::no_grad{});
    }
};

// take_add(g, index, x): a zero tensor of x's shape with g added back where take read (take's gradient).
struct take_add {
    static constexpr std::string_view name = "index_add";
    static constexpr int arity = 3;
    static constexpr int index_arg = 1;
    static constexpr int shape_only_arg = 2;
    using attributes = axis_attrs;
    template <axis_attrs A, class SG, class SI, class SX>
    using static_shape = SX;
    static dims result_shape(const axis_attrs& a, const dims& g, const dims& index, const dims& x) {
        if (!(detail_gather::take_shape(a.axis, x, index, name) == g))
            throw shape_error(detail::error_prefix("shape_error", name) + "shape " + to_string(g) +
                              " is not what take reads from " + to_string(x) + " at an index of shape " + to_string(index));
        return x;
    }
    template <class T>
    using result_type = T;
    template <std::size_t I, class T>
    using operand_type = std::conditional_t<I == 1, std::int64_t, T>;
    static std::string attrs_text(const axis_attrs& a) { return "axis=" + std::to_string(a.axis); }
    template <class Device, class U, class G, class I, class X>
    static void compute(const axis_attrs& a, U* out, const G& g, const I& index, const X& x) {
        Device::take_add(g, index, detail_gather::axis_in(a.axis, x.shape, name), x.shape, out, name);
    }
    template <class A, class G, class I, class X, class Y, class GG>
    static constexpr auto gradient(const A& a, const G&, const I& index, const X&, const Y&, const GG& gg) {
        return detail::grads(structural_fns<G>::template apply<take>(a, gg, index), detail::no_grad{}, detail::no_grad{});
    }
};

// argsort's attributes: the axis and the direction.
struct sort_attrs {
    int axis = -1;
    bool descending = false;
    friend constexpr bool operator==(const sort_attrs&, const sort_attrs&) = default;
};

// The int64 positions that sort x along an axis (stable; NaN last; largest first when descending), as
// numpy.argsort(kind="stable"). No gradient: its result is integer.
struct argsort {
    static constexpr std::string_view name = "argsort";
    static constexpr int arity = 1;
    using attributes = sort_attrs;
    template <sort_attrs A, class S>
    using static_shape = S;
    static dims result_shape(const sort_attrs& a, const dims& x, std::string_view = {}) {
        (void)detail_gather::axis_in(a.axis, x, name);
        return x;
    }
    template <class T>
    using result_type = std::int64_t;
    template <class T>
    using graph_result_type = std::int64_t;
    static std::string attrs_text(const sort_attrs& a) {
        return "axis=" + std::to_string(a.axis) + (a.descending ? " descending=true" : " descending=false");
    }
    template <class Device, class U, class X>
    static void compute(const sort_attrs& a, U* out, const X& x, std::string_view = {}) {
        Device::sort_order(x, detail_gather::axis_in(a.axis, x.shape, name), a.descending, out);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A&, const X&, const Y&, const G&) {
        return detail::grads(detail::no_grad{});
    }
};

}  // namespace ops
}  // namespace kiln
