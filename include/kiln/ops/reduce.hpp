#pragma once
// Reductions, one mode-neutral op each: ops::reduce<K> for sum, mean, prod, max and min over axes, and ops::count
// (how many elements a reduction folds together, the divisor of mean's gradient). Each states its name, its
// attributes as data (reduce_attrs), its shape rule (static and run-time), its kernel (the device's reduction
// engine) and its gradient rule; graph mode (graph/structural/reduce.hpp), eager mode and the tape
// (eager/reduce.hpp, eager/tape.hpp) and traced functions all use these. See ops/structural.hpp for the protocol.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/device.hpp"
#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "compare.hpp"
#include "structural.hpp"

namespace kiln {
namespace detail {

// The folds a reduction engine runs (a mean is a sum divided by its count).
enum class fold_kind { sum, prod, max, min };

// The shapes of a reduction: the operand's shape with the reduced axes set to 1, the result's shape (keepdims or
// not), and how many elements fold into each result.
struct reduction_shape {
    dims keep;
    dims result;
    std::ptrdiff_t count = 1;
};

}  // namespace detail

namespace ops {

enum class reduction { sum, mean, prod, max, min };

// A reduction's attributes: its axes (negative ones count from the end; none means every axis) and whether the
// reduced axes stay, with extent 1. A structural type: graph mode takes the same value as a template argument.
struct reduce_attrs {
    std::array<int, max_rank> axes{};
    int naxes = 0;
    bool keepdims = false;

    constexpr bool every_axis() const { return naxes == 0; }
    friend constexpr bool operator==(const reduce_attrs&, const reduce_attrs&) = default;
};

// From a list of axes (eager mode's form). More axes than kiln::max_rank cannot name distinct axes of any shape.
inline reduce_attrs make_reduce_attrs(const std::vector<int>& axes, bool keepdims, std::string_view op) {
    if (axes.size() > static_cast<std::size_t>(max_rank))
        throw value_error(detail::error_prefix("value_error", op) + std::to_string(axes.size()) +
                          " axes given; a tensor has at most " + std::to_string(max_rank));
    reduce_attrs a;
    for (int x : axes) a.axes[static_cast<std::size_t>(a.naxes++)] = x;
    a.keepdims = keepdims;
    return a;
}

// The same attributes with the reduced axes kept (a gradient rule's form), as a value or at compile time.
constexpr reduce_attrs keeping_dims(reduce_attrs a) {
    a.keepdims = true;
    return a;
}
template <reduce_attrs A>
constexpr attrs_c<keeping_dims(A)> keeping_dims(attrs_c<A>) {
    return {};
}

inline std::string axes_text(const reduce_attrs& a) {
    std::string s = "{";
    for (int i = 0; i < a.naxes; ++i) s += (i ? ", " : "") + std::to_string(a.axes[static_cast<std::size_t>(i)]);
    return s + "}";
}

// The reduced axes of a rank-`rank` operand as a mask. `bad` is the first axis out of range and `repeat` the first
// that names an axis twice after normalizing ({0, -2} on a matrix), or 0 with `ok` true.
struct axis_mask {
    std::array<bool, max_rank> reduced{};
    bool ok = true, repeated = false;
    int bad = 0;
};
constexpr axis_mask reduced_axes(const reduce_attrs& a, int rank) {
    axis_mask m;
    if (a.every_axis()) {
        for (int i = 0; i < rank && i < max_rank; ++i) m.reduced[static_cast<std::size_t>(i)] = true;
        return m;
    }
    for (int i = 0; i < a.naxes; ++i) {
        const int x = a.axes[static_cast<std::size_t>(i)];
        const int n = x < 0 ? x + rank : x;
        if (n < 0 || n >= rank) {
            m.ok = false;
            m.bad = x;
            return m;
        }
        if (m.reduced[static_cast<std::size_t>(n)]) {
            m.ok = false;
            m.repeated = true;
            m.bad = x;
            return m;
        }
        m.reduced[static_cast<std::size_t>(n)] = true;
    }
    return m;
}

// The shape rule of every reduction: `op` names it in errors and `dtype_name`, when given, the operand's dtype.
inline detail::reduction_shape reduce_shape(const reduce_attrs& a, const dims& shape, std::string_view op,
                                            std::string_view dtype_name = {}) {
    const axis_mask m = reduced_axes(a, shape.rank);
    if (!m.ok) {
        const std::string head = detail::error_prefix("value_error", op) + "axis " + std::to_string(m.bad);
        if (m.repeated)
            throw value_error(head + " repeats (axes " + axes_text(a) + " on shape " + to_string(shape) + ")");
        throw value_error(head + " is out of range for shape " + to_string(shape) +
                          (dtype_name.empty() ? std::string() : " (" + std::string(dtype_name) + ")"));
    }
    detail::reduction_shape r;
    r.keep = shape;
    r.result.rank = 0;
    for (int i = 0; i < shape.rank; ++i) {
        if (m.reduced[static_cast<std::size_t>(i)]) {
            // Saturating: an empty tensor may reduce extents whose product overflows; its count is then moot.
            if (__builtin_mul_overflow(r.count, shape[i], &r.count)) r.count = std::numeric_limits<std::ptrdiff_t>::max();
            r.keep[i] = 1;
            if (a.keepdims) r.result[r.result.rank++] = 1;
        } else {
            r.result[r.result.rank++] = shape[i];
        }
    }
    return r;
}

template <class S, reduce_attrs A>
struct axis_out_of_range_for_static_shape {
    static_assert(sizeof(S) == 0,
                  "kiln: a reduction axis is out of range for the operand's static shape, or repeats (see S and A "
                  "above).");
    using type = dynamic;
};

// The static shape rule (graph mode's types): a reduction of static shape S.
template <reduce_attrs A, class S>
struct reduced_static_shape {
    using type = dynamic;
};
template <reduce_attrs A, std::ptrdiff_t... D>
struct reduced_static_shape<A, shape<D...>> {
    static constexpr int r = sizeof...(D);
    static constexpr axis_mask m = reduced_axes(A, r);
    static constexpr std::array<std::ptrdiff_t, (r > 0 ? r : 1)> in{D...};
    static constexpr int out_rank = [] {
        int k = 0;
        for (int i = 0; i < r; ++i) k += (A.keepdims || !m.reduced[static_cast<std::size_t>(i)]) ? 1 : 0;
        return k;
    }();
    static constexpr std::array<std::ptrdiff_t, (out_rank > 0 ? out_rank : 1)> out = [] {
        std::array<std::ptrdiff_t, (out_rank > 0 ? out_rank : 1)> o{};
        int k = 0;
        for (int i = 0; i < r; ++i) {
            if (m.reduced[static_cast<std::size_t>(i)]) {
                if (A.keepdims) o[static_cast<std::size_t>(k++)] = 1;
            } else {
                o[static_cast<std::size_t>(k++)] = in[static_cast<std::size_t>(i)];
            }
        }
        return o;
    }();
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<out[I]...>;
    using type = typename std::conditional_t<m.ok, std::type_identity<decltype(make(std::make_index_sequence<out_rank>{}))>,
                                             axis_out_of_range_for_static_shape<shape<D...>, A>>::type;
};

// sum, mean, prod, max or min over axes.
template <reduction K>
struct reduce {
    static constexpr std::string_view name = K == reduction::sum    ? "sum"
                                             : K == reduction::mean ? "mean"
                                             : K == reduction::prod ? "prod"
                                             : K == reduction::max  ? "max"
                                                                    : "min";
    static constexpr int arity = 1;
    using attributes = reduce_attrs;
    static constexpr detail::fold_kind fold = K == reduction::prod  ? detail::fold_kind::prod
                                              : K == reduction::max ? detail::fold_kind::max
                                              : K == reduction::min ? detail::fold_kind::min
                                                                    : detail::fold_kind::sum;
    static constexpr bool extremum = K == reduction::max || K == reduction::min;

    template <reduce_attrs A, class S>
    using static_shape = typename reduced_static_shape<A, S>::type;
    static detail::reduction_shape shape(const reduce_attrs& a, const dims& x, std::string_view dtype_name = {}) {
        return reduce_shape(a, x, name, dtype_name);
    }
    static dims result_shape(const reduce_attrs& a, const dims& x, std::string_view dtype_name = {}) {
        return shape(a, x, dtype_name).result;
    }
    // Extrema keep the operand's type; floating sums, means and products too; integer and bool ones give int64,
    // accumulated (wrapping) in int64 as in NumPy.
    template <class T>
    using result_type = std::conditional_t<extremum || std::is_floating_point_v<T>, T, std::int64_t>;
    static std::string attrs_text(const reduce_attrs& a) {
        std::string s = "axes=";
        for (int i = 0; i < a.naxes; ++i) {
            if (i) s += ',';
            s += std::to_string(a.axes[static_cast<std::size_t>(i)]);
        }
        return s + (a.keepdims ? " keepdims=true" : " keepdims=false");
    }

    // The kernel: the device's reduction engine, into `out` (the operand's shape with the reduced axes kept; U may
    // be a wider accumulator type than T, as eager mode's integer sums are int64).
    template <class Device, class U, class X>
    static void compute(const reduce_attrs& a, U* out, const X& x, std::string_view dtype_name = {}) {
        const detail::reduction_shape r = shape(a, x.shape, dtype_name);
        if constexpr (extremum) {
            if (r.count == 0)  // no identity to start from, even when the result is empty too (NumPy refuses it)
                throw value_error(detail::error_prefix("value_error", name) + "cannot reduce over an empty dimension (shape " +
                                  to_string(x.shape) + (dtype_name.empty() ? std::string() : ", " + std::string(dtype_name)) + ")");
        }
        Device::reduce(fold, x, r.keep, out, K == reduction::mean, r.count);
    }

    // The gradient, in every mode. Ties of an extremum share the gradient equally; a product's gradient is y / x,
    // undefined where x is 0 (as in PyTorch's formula without its zero handling).
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y& y, const G& g) {
        using F = structural_fns<X>;
        const auto gx = F::unreduce(a, g, x);
        if constexpr (K == reduction::sum) {
            return detail::grads(gx);
        } else if constexpr (K == reduction::mean) {
            return detail::grads(gx / F::count(a, x));
        } else if constexpr (K == reduction::prod) {
            return detail::grads(gx * F::unreduce(a, y, x) / x);
        } else {
            const auto hit = F::cast_like(kiln::equal(x, F::unreduce(a, y, x)), x);
            const auto ties = F::template reduce<reduction::sum>(keeping_dims(a), hit);
            return detail::grads(gx * hit / F::unreduce(keeping_dims(a), ties, x));
        }
    }
};

// The position of the first maximum (minimum) along one axis, int64; NaN counts as the largest and the smallest
// (the first NaN wins), as in NumPy. No gradient.
struct arg_attrs {
    int axis = 0;
    bool keepdims = false;
    friend constexpr bool operator==(const arg_attrs&, const arg_attrs&) = default;
};

template <bool Max>
struct arg_reduce {
    static constexpr std::string_view name = Max ? "argmax" : "argmin";
    static constexpr int arity = 1;
    using attributes = arg_attrs;

    static constexpr reduce_attrs as_reduction(const arg_attrs& a) {
        reduce_attrs r;
        r.axes[0] = a.axis;
        r.naxes = 1;
        r.keepdims = a.keepdims;
        return r;
    }
    template <arg_attrs A, class S>
    using static_shape = typename reduced_static_shape<as_reduction(A), S>::type;
    // An empty axis has no first extremum: refused by the shape rule, as NumPy refuses it.
    static detail::reduction_shape shape(const arg_attrs& a, const dims& x, std::string_view dtype_name = {}) {
        const detail::reduction_shape r = reduce_shape(as_reduction(a), x, name, dtype_name);
        if (r.count == 0)
            throw value_error(detail::error_prefix("value_error", name) + "cannot reduce over an empty dimension (shape " +
                              to_string(x) + (dtype_name.empty() ? std::string() : ", " + std::string(dtype_name)) + ")");
        return r;
    }
    static dims result_shape(const arg_attrs& a, const dims& x, std::string_view dtype_name = {}) {
        return shape(a, x, dtype_name).result;
    }
    template <class T>
    using result_type = std::int64_t;
    template <class T>
    using graph_result_type = std::int64_t;  // graph mode's node type (reductions keep their operand's)
    static std::string attrs_text(const arg_attrs& a) {
        return "axis=" + std::to_string(a.axis) + (a.keepdims ? " keepdims=true" : " keepdims=false");
    }
    template <class Device, class X>
    static void compute(const arg_attrs& a, std::int64_t* out, const X& x, std::string_view dtype_name = {}) {
        Device::arg_reduce(Max, x, shape(a, x.shape, dtype_name).keep, out);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A&, const X&, const Y&, const G&) {
        return detail::grads(detail::no_grad{});
    }
};

// The number of elements a reduction with these attributes folds into each result, as a rank-0 value of the
// operand's element type. Only its operand's shape is read.
struct count {
    static constexpr std::string_view name = "count";
    static constexpr int arity = 1;
    static constexpr int shape_only_arg = 0;
    using attributes = reduce_attrs;
    template <reduce_attrs A, class S>
    using static_shape = kiln::shape<>;
    static dims result_shape(const reduce_attrs&, const dims&, std::string_view = {}) { return dims{}; }
    static std::ptrdiff_t of(const reduce_attrs& a, const dims& x) {
        const detail::reduction_shape r = reduce_shape(keeping_dims(a), x, name);
        const std::ptrdiff_t m = r.keep.numel();
        return m == 0 ? 0 : x.numel() / m;
    }
    // (Written by the device: on a GPU `out` is device memory, which the host cannot store into.)
    template <class Device, class T, class X>
    static void compute(const reduce_attrs& a, T* out, const X& x) {
        if constexpr (Device::kind == device_type::cpu) out[0] = static_cast<T>(of(a, x.shape));
        else Device::fill(detail::strided<T>(out, dims{}, dims{}), static_cast<T>(of(a, x.shape)));
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A&, const X&, const Y&, const G&) {
        return detail::grads(detail::no_grad{});
    }
};

}  // namespace ops
}  // namespace kiln
