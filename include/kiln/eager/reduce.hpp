#pragma once
// Reductions over axes: sum, mean, prod, max, min (keepdims optional) and argmax, argmin along one axis. The
// kernels are the device's reduction engine (backend/cpu/reduce.hpp), shared with graph mode and function mode.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "../backend/cpu/device.hpp"
#include "elementwise.hpp"

namespace kiln {
namespace detail {

struct reduction_shape {
    dims keep;      // the input's shape with reduced axes set to 1
    dims result;    // what the caller asked for (keepdims or not)
    std::ptrdiff_t count = 1;  // elements folded into each output
};

inline std::string axes_text(const std::vector<int>& axes) {
    std::string s = "{";
    for (std::size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
    return s + "}";
}

// The shapes of a reduction of a (shape, dtype) over `axes` (every axis when empty); the dtype only names the
// operand in errors. Also the shape rule of the registry's reductions.
inline reduction_shape reduced_shape(const dims& shape, dtype dt, const std::vector<int>& axes, bool keepdims,
                                     const char* op) {
    reduction_shape r;
    r.keep = shape;
    bool reduce[max_rank] = {};
    if (axes.empty())
        for (int i = 0; i < shape.rank; ++i) reduce[i] = true;
    for (int a : axes) {
        const int ax = a < 0 ? a + shape.rank : a;
        if (ax < 0 || ax >= shape.rank)
            throw value_error("kiln: value_error in '" + std::string(op) + "': axis " + std::to_string(a) + " is out of range for shape " +
                              to_string(shape) + " (" + std::string(name(dt)) + ")");
        if (reduce[ax] && !axes.empty())  // after normalizing: {0, -2} on a matrix names axis 0 twice
            throw value_error("kiln: value_error in '" + std::string(op) + "': axis " + std::to_string(a) + " repeats (axes " +
                              axes_text(axes) + " on shape " + to_string(shape) + ")");
        reduce[ax] = true;
    }
    r.result.rank = 0;
    for (int i = 0; i < shape.rank; ++i) {
        if (reduce[i]) {
            // Saturating: an empty tensor may reduce extents whose product overflows; its count is then moot.
            if (__builtin_mul_overflow(r.count, shape[i], &r.count)) r.count = std::numeric_limits<std::ptrdiff_t>::max();
            r.keep[i] = 1;
            if (keepdims) r.result[r.result.rank++] = 1;
        } else {
            r.result[r.result.rank++] = shape[i];
        }
    }
    return r;
}

inline reduction_shape reduced_shape(const tensor& x, const std::vector<int>& axes, bool keepdims, const char* op) {
    return reduced_shape(x.shape(), x.dtype(), axes, keepdims, op);
}

// Record reductions on the active tapes (defined with the tape). A sum's rule is views only; the rule of a product
// or an extremum computes, so it is a template (compiled where prod, max or min is called).
void record_sum(const tensor& x, const tensor& y, const dims& keep);
template <int N>
void record_reduction(const dependent_tensor<N>& x, const dependent_tensor<N>& y, const dims& keep, fold_kind kind);

// The reduction's values (not recorded); `keep` receives the input's shape with the reduced axes set to 1.
inline tensor fold(const tensor& x, const std::vector<int>& axes, bool keepdims, fold_kind kind, const char* op,
                   dims& keep) {
    x.check_valid(op);
    const reduction_shape r = reduced_shape(x, axes, keepdims, op);
    const bool extremum = kind == fold_kind::max || kind == fold_kind::min;
    if (extremum && r.count == 0)
        throw value_error("kiln: value_error in '" + std::string(op) + "': cannot reduce over an empty dimension (shape " +
                          to_string(x.shape()) + ", " + std::string(name(x.dtype())) + ")");
    if (active_tracer) [[unlikely]] {
        keep = r.keep;
        static constexpr const char* names[] = {"sum", "prod", "max", "min"};
        std::string attrs = "axes=";
        for (std::size_t i = 0; i < axes.size(); ++i) {
            if (i) attrs += ',';
            attrs += std::to_string(axes[i]);
        }
        attrs += keepdims ? " keepdims=true" : " keepdims=false";
        const char* name = names[static_cast<int>(kind)];
        return active_tracer->record(name, std::move(attrs), std::span<const tensor>(&x, 1),
                                     [axes, keepdims, kind, name](std::span<const tensor> in, auto) {
                                         dims k;
                                         return fold(in[0], axes, keepdims, kind, name, k);
                                     });
    }
    const dtype out_dtype = extremum ? x.dtype() : (is_floating(x.dtype()) ? x.dtype() : dtype::int64);
    tensor out(out_dtype, r.keep);
    dispatch(x.dtype(), [&]<class T>() {
        // Floating sums accumulate in double; integer sums and products in int64 (wrapping, as in NumPy).
        const strided<const T> xv(static_cast<const T*>(x.raw_data()), x.shape(), x.strides());
        if constexpr (std::is_floating_point_v<T>) {
            backend::cpu_device::reduce(kind, xv, r.keep, out.data<T>());
        } else {
            if (extremum) backend::cpu_device::reduce(kind, xv, r.keep, out.data<T>());
            else backend::cpu_device::reduce(kind, xv, r.keep, out.data<std::int64_t>());
        }
    });
    keep = r.keep;
    return out.reshape(r.result);
}

template <int N>
tensor recorded_fold(const tensor& x, const std::vector<int>& axes, bool keepdims, fold_kind kind, const char* op) {
    dims keep;
    const dependent_tensor<N> y = fold(x, axes, keepdims, kind, op, keep);
    if (recording_tapes > 0) record_reduction<N>(x, y, keep, kind);
    return y;
}

inline tensor arg_extremum(const tensor& x, int axis, bool keepdims, bool is_max, const char* op) {
    x.check_valid(op);
    const reduction_shape r = reduced_shape(x, {axis}, keepdims, op);
    if (r.count == 0)
        throw value_error("kiln: value_error in '" + std::string(op) + "': cannot reduce over an empty dimension (shape " +
                          to_string(x.shape()) + ", " + std::string(name(x.dtype())) + ")");
    const int ax = axis < 0 ? axis + x.dim() : axis;
    if (active_tracer) [[unlikely]]
        return active_tracer->record(op, "axis=" + std::to_string(ax) + (keepdims ? " keepdims=true" : " keepdims=false"),
                                     std::span<const tensor>(&x, 1), [ax, keepdims, is_max, op](std::span<const tensor> in, auto) {
                                         return arg_extremum(in[0], ax, keepdims, is_max, op);
                                     });
    tensor out(dtype::int64, r.keep);
    dispatch(x.dtype(), [&]<class T>() {
        backend::cpu_device::arg_reduce(is_max, strided<const T>(static_cast<const T*>(x.raw_data()), x.shape(), x.strides()),
                                        r.keep, out.data<std::int64_t>());
    });
    return out.reshape(r.result);
}

}  // namespace detail

inline tensor sum(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    dims keep;
    tensor y = detail::fold(x, axes, keepdims, detail::fold_kind::sum, "sum", keep);
    if (detail::recording_tapes > 0) detail::record_sum(x, y, keep);
    return y;
}
template <int N = 0>
tensor prod(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::recorded_fold<N>(x, axes, keepdims, detail::fold_kind::prod, "prod");
}
template <int N = 0>
tensor max(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::recorded_fold<N>(x, axes, keepdims, detail::fold_kind::max, "max");
}
template <int N = 0>
tensor min(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::recorded_fold<N>(x, axes, keepdims, detail::fold_kind::min, "min");
}
// The mean in the input's floating type (integer inputs give float32); NaN over an empty axis.
template <int N = 0>
tensor mean(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    const detail::dependent_tensor<N> xf = detail::is_floating(x.dtype()) ? x : x.to(dtype::float32);
    dims keep;
    const detail::dependent_tensor<N> s = detail::fold(xf, axes, keepdims, detail::fold_kind::sum, "mean", keep);
    if (detail::recording_tapes > 0) detail::record_sum(xf, s, keep);
    return s / static_cast<double>(detail::reduced_shape(xf, axes, keepdims, "mean").count);
}
inline tensor argmax(const tensor& x, int axis, bool keepdims = false) {
    return detail::arg_extremum(x, axis, keepdims, true, "argmax");
}
inline tensor argmin(const tensor& x, int axis, bool keepdims = false) {
    return detail::arg_extremum(x, axis, keepdims, false, "argmin");
}

}  // namespace kiln
