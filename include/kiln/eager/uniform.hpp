#pragma once
// Uniform tensors: every element is one value in memory, read with stride 0 at every index. They are what result
// specs give (op_params::spec; eager/shape_run.hpp): a placeholder of any shape that costs one element.
#include <cstring>

#include "tensor.hpp"

namespace kiln::detail {

// A rank-0 tensor holding `v`.
template <class T>
tensor scalar_tensor(T v) {
    tensor t(dtype_of<T>(), dims{});
    *t.data<T>() = v;
    return t;
}

// `v` at every index of `shape`, one element in memory. (Made where nothing records, as result specs are: a
// recording broadcast_to would be a node of the trace.)
template <class T>
tensor uniform(T v, const dims& shape) {
    return scalar_tensor(v).broadcast_to(shape);
}

// Zeros of dtype d at every index of `shape`, one element in memory (for any dtype, without a kernel per dtype:
// the placeholder of a structural spec, a join's spec and a matrix product's).
inline tensor zeros_placeholder(dtype d, const dims& shape) {
    tensor z(d, dims{});
    std::memset(z.raw_data(), 0, size_of(d));
    return z.broadcast_to(shape);
}

// Whether every element of `t` is one value in memory: a placeholder (one element read with stride 0 everywhere),
// a rank-0 tensor, or one of at most one element.
inline bool is_uniform(const tensor& t) noexcept {
    if (t.numel() <= 1) return true;
    for (int d = 0; d < t.dim(); ++d)
        if (t.shape()[d] > 1 && t.strides()[d] != 0) return false;
    return true;
}

}  // namespace kiln::detail
