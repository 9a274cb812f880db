#pragma once
// Reductions over axes: sum, mean, prod, max, min (keepdims optional) and argmax, argmin along one axis. The
// kernels are the device's reduction engine (backend/cpu/reduce.hpp), shared with graph mode and function mode.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "../backend/cpu/device.hpp"
#include "../ops/reduce.hpp"
#include "structural.hpp"

namespace kiln {
namespace detail {

// The shape rule of a reduction (ops::reduce_shape) on a shape and dtype, with the axes as a list; the dtype only
// names the operand in errors. Also the shape rule of the registry's reductions.
inline reduction_shape reduced_shape(const dims& shape, dtype dt, const std::vector<int>& axes, bool keepdims,
                                     const char* op) {
    return ops::reduce_shape(ops::make_reduce_attrs(axes, keepdims, op), shape, op, name(dt));
}
inline reduction_shape reduced_shape(const tensor& x, const std::vector<int>& axes, bool keepdims, const char* op) {
    return reduced_shape(x.shape(), x.dtype(), axes, keepdims, op);
}

// A reduction, recorded on the active tapes with its op's gradient rule (eager/structural.hpp).
template <ops::reduction K, int N = 0>
tensor reduce(const tensor& x, const ops::reduce_attrs& a) {
    static_assert(K != ops::reduction::mean, "eager mode's mean is a sum divided by its count");
    return apply_structural<ops::reduce<K>, N>(a, x);
}

}  // namespace detail

// (Reductions are templates on an unused int, as the elementwise ops are: their kernels are compiled only in the
// translation units that call them.)
template <int N = 0>
tensor sum(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::reduce<ops::reduction::sum, N>(x, ops::make_reduce_attrs(axes, keepdims, "sum"));
}
template <int N = 0>
tensor prod(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::reduce<ops::reduction::prod, N>(x, ops::make_reduce_attrs(axes, keepdims, "prod"));
}
template <int N = 0>
tensor max(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::reduce<ops::reduction::max, N>(x, ops::make_reduce_attrs(axes, keepdims, "max"));
}
template <int N = 0>
tensor min(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    return detail::reduce<ops::reduction::min, N>(x, ops::make_reduce_attrs(axes, keepdims, "min"));
}
// The mean in the input's floating type (integer inputs give float32); NaN over an empty axis. A sum divided by its
// count, both ops of the vocabulary (so a traced mean fuses its division into the next group).
template <int N = 0>
tensor mean(const tensor& x, std::vector<int> axes = {}, bool keepdims = false) {
    x.check_valid("mean");
    const detail::dependent_tensor<N> xf = detail::is_floating(x.dtype()) ? x : x.to(dtype::float32);
    const ops::reduce_attrs a = ops::make_reduce_attrs(axes, keepdims, "mean");
    const std::ptrdiff_t n = ops::reduce_shape(a, xf.shape(), "mean", name(xf.dtype())).count;
    const detail::dependent_tensor<N> s = detail::reduce<ops::reduction::sum, N>(xf, a);
    return s / static_cast<double>(n);
}
// The position of the first maximum (minimum) along `axis`, int64 (ops::arg_reduce).
template <int N = 0>
tensor argmax(const tensor& x, int axis, bool keepdims = false) {
    const int ax = axis < 0 && x.valid() ? axis + x.dim() : axis;  // a trace records the axis counted from the front
    return detail::apply_structural<ops::arg_reduce<true>, N>(ops::arg_attrs{ax < 0 ? axis : ax, keepdims}, x);
}
template <int N = 0>
tensor argmin(const tensor& x, int axis, bool keepdims = false) {
    const int ax = axis < 0 && x.valid() ? axis + x.dim() : axis;
    return detail::apply_structural<ops::arg_reduce<false>, N>(ops::arg_attrs{ax < 0 ? axis : ax, keepdims}, x);
}

}  // namespace kiln
