#pragma once
// Eager ops a NumPy or PyTorch user reaches for, beyond the elementwise vocabulary: flipping and advanced indexing
// (index_select, take_along_axis, masked_select, scatter_add, t[index]), with the helpers that eager/sorting.hpp
// and eager/shape_ops.hpp share. Each is recorded on gradient tapes, either as a composition of recorded ops or
// with its own backward rule below.
//
// flip, index_select and take_along_axis are the mode-neutral ops of ops/layout.hpp and ops/gather.hpp (graph
// mode's kiln::flip, kiln::index_select, kiln::take_along_axis); masked_select and scatter_add are eager mode's own.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "factories.hpp"
#include "linalg.hpp"
#include "reduce.hpp"
#include "structural.hpp"
#include "tape.hpp"
#include "../ops/gather.hpp"
#include "../ops/layout.hpp"

namespace kiln {
namespace detail {

inline int checked_axis(const tensor& x, int axis, const char* op) {
    const int a = axis < 0 ? axis + x.dim() : axis;
    if (a < 0 || a >= x.dim())
        throw value_error("kiln: value_error in '" + std::string(op) + "': axis " + std::to_string(axis) +
                          " is out of range for shape " + to_string(x.shape()));
    return a;
}

// The elements of x in row-major order as a contiguous tensor of its dtype (x itself when it already is one).
inline tensor dense(const tensor& x) { return x.is_contiguous() ? x : x.clone(); }

// Splits a contiguous shape around `axis` into (outer, length, inner) element counts.
struct axis_split {
    std::ptrdiff_t outer = 1, length = 1, inner = 1;
};
inline axis_split split_at(const dims& s, int axis) {
    axis_split r;
    for (int i = 0; i < axis; ++i) r.outer *= s[i];
    r.length = s[axis];
    for (int i = axis + 1; i < s.rank; ++i) r.inner *= s[i];
    return r;
}

// Integer indices as int64 values, each checked against `n` (negative ones count from the end).
inline std::vector<std::int64_t> checked_indices(const tensor& index, std::ptrdiff_t n, const char* op) {
    if (index.dtype() != dtype::int32 && index.dtype() != dtype::int64)
        throw dtype_error("kiln: dtype_error in '" + std::string(op) + "': indices must be int32 or int64, not " +
                          std::string(name(index.dtype())));
    const tensor i64 = dense(index.to(dtype::int64));
    const std::int64_t* p = i64.data<const std::int64_t>();
    std::vector<std::int64_t> out(p, p + i64.numel());
    for (std::int64_t& v : out) {
        const std::int64_t orig = v;
        if (v < 0) v += n;
        if (v < 0 || v >= n)
            throw value_error("kiln: value_error in '" + std::string(op) + "': index " + std::to_string(orig) +
                              " is out of range for a dimension of size " + std::to_string(n));
    }
    return out;
}

// An index operand as the gather ops take it: int32 or int64, as int64.
inline tensor index_operand(const tensor& index, const char* op) {
    index.check_valid(op);
    if (index.dtype() != dtype::int32 && index.dtype() != dtype::int64)
        throw dtype_error("kiln: dtype_error in '" + std::string(op) + "': indices must be int32 or int64, not " +
                          std::string(name(index.dtype())));
    return index.dtype() == dtype::int64 ? index : index.to(dtype::int64);
}

// out[.., idx[k], ..] += src[.., k, ..] along `axis` of a contiguous `out` (the gradient of index_select).
template <int = 0>
void index_add_into(tensor& out, int axis, const std::vector<std::int64_t>& idx, const tensor& src) {
    const tensor s = dense(src.to(out.dtype()));
    const axis_split o = split_at(out.shape(), axis);
    const auto k = static_cast<std::ptrdiff_t>(idx.size());
    dispatch(out.dtype(), [&]<class T>() {
        if constexpr (!std::is_same_v<T, bool>) {
            T* d = out.data<T>();
            const T* v = s.data<const T>();
            for (std::ptrdiff_t a = 0; a < o.outer; ++a)
                for (std::ptrdiff_t j = 0; j < k; ++j) {
                    T* row = d + (a * o.length + idx[static_cast<std::size_t>(j)]) * o.inner;
                    const T* from = v + (a * k + j) * o.inner;
                    for (std::ptrdiff_t i = 0; i < o.inner; ++i) detail::kernels::accumulate(row[i], from[i]);
                }
        }
    });
}

// The same for index tensors shaped like `src` (the gradient of take_along_axis; torch.scatter_add).
template <int = 0>
void scatter_add_into(tensor& out, int axis, const tensor& index, const tensor& src) {
    const tensor s = dense(src.to(out.dtype()));
    const std::vector<std::int64_t> idx = checked_indices(index, out.shape()[axis], "scatter_add");
    const axis_split o = split_at(out.shape(), axis), is = split_at(index.shape(), axis);
    dispatch(out.dtype(), [&]<class T>() {
        if constexpr (!std::is_same_v<T, bool>) {
            T* d = out.data<T>();
            const T* v = s.data<const T>();
            for (std::ptrdiff_t a = 0; a < is.outer; ++a)
                for (std::ptrdiff_t j = 0; j < is.length; ++j)
                    for (std::ptrdiff_t i = 0; i < is.inner; ++i) {
                        const std::ptrdiff_t q = (a * is.length + j) * is.inner + i;
                        detail::kernels::accumulate(d[(a * o.length + idx[static_cast<std::size_t>(q)]) * o.inner + i], v[q]);
                    }
        }
    });
}

inline std::vector<std::optional<tensor>> one_gradient(tensor g) { return {std::move(g)}; }

// Computes without recording on the tapes of this thread: for the internal steps of an op that records one entry
// of its own (a recorded copy whose output the op then overwrites would send its gradient twice).
struct tape_pause {
    int saved = recording_tapes;
    tape_pause() noexcept { recording_tapes = 0; }
    ~tape_pause() { recording_tapes = saved; }
    tape_pause(const tape_pause&) = delete;
    tape_pause& operator=(const tape_pause&) = delete;
};

}  // namespace detail

// ---- views --------------------------------------------------------------------------------------------------

// x reversed along `axes` (every axis when empty): a view with negative strides, as NumPy's flip (writes go
// through to x). Its shape rule and messages are ops::flip's, graph mode's op, which copies.
template <int = 0>
tensor flip(const tensor& x, const std::vector<int>& axes = {}) {
    x.check_valid("flip");
    const ops::flip_attrs a = ops::make_flip_attrs(axes);
    (void)ops::flip::result_shape(a, x.shape());
    const ops::axis_mask m = ops::reduced_axes(ops::flip::as_axes(a), x.dim());
    tensor y = x;
    for (int ax = 0; ax < x.dim(); ++ax)
        if (m.reduced[static_cast<std::size_t>(ax)]) y = y.slice(ax, slice_end, slice_begin, -1);  // recorded
    return y;
}

// ---- advanced indexing --------------------------------------------------------------------------------------

// The entries of x at `index` (a 1-D int32/int64 tensor; negative entries count from the end) along `axis`:
// numpy.take(x, index, axis), torch.index_select. A copy; the gradient adds into the selected positions.
template <int N = 0>
tensor index_select(const tensor& x, int axis, const tensor& index) {
    if (index.dim() != 1)
        throw shape_error("kiln: shape_error in 'index_select': the index must be 1-D, got shape " +
                          to_string(index.shape()));
    return detail::apply_structural<ops::take, N>(ops::axis_attrs{axis}, x, detail::index_operand(index, "index_select"));
}

// out[i][j] = x[index[i][j]][j] along `axis` (numpy.take_along_axis, torch.gather): `index` has x's rank and
// x's extents except along `axis`. The gradient scatters back with scatter_add.
template <int N = 0>
tensor take_along_axis(const tensor& x, const tensor& index, int axis) {
    return detail::apply_structural<ops::take_along_axis, N>(ops::axis_attrs{axis}, x,
                                                             detail::index_operand(index, "take_along_axis"));
}

// A copy of x with src added at `index` along `axis` (torch.scatter_add): out[index[i][j]][j] += src[i][j].
// Gradients: x gets g, src gets take_along_axis(g, index, axis).
template <int N = 0>
tensor scatter_add(const tensor& x, int axis, const tensor& index, const tensor& src) {
    const bool on_device = !x.is_cpu() || !index.is_cpu() || !src.is_cpu();
    if (on_device) detail::check_same_device("scatter_add", {&x, &index, &src});
    const int ax = detail::checked_axis(x, axis, "scatter_add");
    bool ok = index.dim() == x.dim() && src.shape() == index.shape();
    for (int i = 0; ok && i < x.dim(); ++i) ok = i == ax || index.shape()[i] == x.shape()[i];
    if (!ok)
        throw shape_error("kiln: shape_error in 'scatter_add': the index " + to_string(index.shape()) +
                          " and the source " + to_string(src.shape()) + " must have one shape, x's " +
                          to_string(x.shape()) + " except along axis " + std::to_string(ax));
    if (x.dtype() == dtype::boolean)
        throw dtype_error("kiln: dtype_error in 'scatter_add': not defined for bool tensors");
    if (on_device || x.is_symbolic() || index.is_symbolic() || src.is_symbolic()) {
        // On a GPU, and while tracing: x plus the vocabulary's scatter_add_along (the gradient of take_along_axis,
        // which adds with atomics on the device and checks the indices at every call); both record their
        // gradients (x: g; src: take_along_axis(g, index)).
        const dtype d = detail::promote(x.dtype(), src.dtype());
        // (Dependent tensors: the sum's kernels are compiled only where scatter_add is called.)
        const detail::dependent_tensor<N> xd = x.to(d);
        const detail::dependent_tensor<N> added = detail::apply_structural<ops::scatter_add_along, N>(
            ops::axis_attrs{ax}, src.to(d), detail::index_operand(index, "scatter_add"), xd);
        return xd + added;
    }
    detail::tape_pause pause;
    tensor out = x.to(detail::promote(x.dtype(), src.dtype()));
    out = out.shares_storage_with(x) ? detail::dense(out).clone() : detail::dense(out);
    detail::scatter_add_into(out, ax, index, src);
    if (pause.saved > 0)
        detail::record_entry({{x, src}, out, [index, ax](const tensor& g) {
                                  std::vector<std::optional<tensor>> r;
                                  r.push_back(g);
                                  r.push_back(take_along_axis<N>(g, index, ax));
                                  return r;
                              }});
    return out;
}

// The elements of x where `mask` (bool, x's shape or broadcastable to it) is true, in row-major order, as a 1-D
// copy: x[mask] in NumPy. The gradient scatters back into x's shape.
template <int N = 0>
tensor masked_select(const tensor& x, const tensor& mask) {
    const bool on_device = !x.is_cpu() || !mask.is_cpu();
    if (on_device) detail::check_same_device("masked_select", {&x, &mask});
    if (mask.dtype() != dtype::boolean)
        throw dtype_error("kiln: dtype_error in 'masked_select': the mask must be bool, not " +
                          std::string(name(mask.dtype())));
    const dims shape = detail::broadcast_named("masked_select", {&x, &mask});
    if (!(shape == x.shape()))
        throw shape_error("kiln: shape_error in 'masked_select': the mask " + to_string(mask.shape()) +
                          " must broadcast to x's shape " + to_string(x.shape()));
#if KILN_HAS_GPU
    if (on_device) {
        // On a GPU: the true positions are found there (their count, the result's size, is read back), then
        // index_select picks them from x's elements in row-major order and records the gradient (index_add).
        x.check_not_symbolic("masked_select");
        const tensor md = mask.device() == x.device() ? mask : mask.to(x.device());  // (a rank-0 host mask)
        const tensor m = md.broadcast_to(shape).contiguous();
        const bool* mp = m.data<const bool>();
        using D = backend::thrust_device;
        const backend::gpu_memory::device_scope on(x.device().index);
        tensor where(dtype::int64, dims{D::count_true(mp, m.numel())}, x.device());
        D::true_positions(mp, m.numel(), where.data<std::int64_t>());
        return index_select<N>(x.reshape({-1}), 0, where);
    }
#endif
    detail::tape_pause pause;
    const tensor m = detail::dense(mask.broadcast_to(shape).contiguous());
    const tensor src = detail::dense(x);
    const bool* mp = m.data<const bool>();
    std::vector<std::int64_t> where;
    for (std::ptrdiff_t i = 0, n = m.numel(); i < n; ++i)
        if (mp[i]) where.push_back(i);
    tensor out(x.dtype(), dims{static_cast<std::ptrdiff_t>(where.size())});
    const std::size_t item = x.itemsize();
    const auto* from = static_cast<const std::byte*>(src.raw_data());
    auto* to = static_cast<std::byte*>(out.raw_data());
    for (std::size_t k = 0; k < where.size(); ++k)
        std::memcpy(to + k * item, from + static_cast<std::size_t>(where[k]) * item, item);
    if (pause.saved > 0)
        detail::record_entry({{x}, out, [x, where](const tensor& g) {
                                  tensor z = zeros(dims{x.numel()}, g.dtype());
                                  detail::index_add_into(z, 0, where, g);
                                  return detail::one_gradient(z.reshape(x.shape()));
                              }});
    return out;
}

template <int N>
tensor tensor::operator[](const tensor& index) const {
    if (index.dtype() == dtype::boolean) {
        // NumPy's and PyTorch's rule: the mask has this tensor's shape (the elements where it is true, 1-D) or its
        // leading extents (the sub-tensors where it is true, stacked). Unlike masked_select, it does not broadcast.
        check_valid("index");
        index.check_valid("index");
        const int k = index.dim();
        bool leading = k <= dim();
        for (int i = 0; leading && i < k; ++i) leading = index.shape()[i] == shape_[i];
        if (!leading || (k == 0 && dim() > 0))
            throw shape_error("kiln: shape_error in 'index': the bool mask has shape " + to_string(index.shape()) +
                              "; it must have the tensor's shape " + to_string(shape_) + " or its leading extents");
        if (k == dim()) return masked_select(*this, index);
        // Positions of the true entries among the leading extents, then those rows of the tensor seen as
        // (leading elements, rest...): index_select records the gradient.
        dims rows;
        rows.rank = dim() - k + 1;
        rows[0] = index.numel();
        for (int i = k; i < dim(); ++i) rows[i - k + 1] = shape_[i];
        const tensor positions = masked_select(arange(0, static_cast<double>(index.numel()), 1, dtype::int64, index.device())
                                                   .reshape(index.shape()), index);
        return index_select(reshape(rows), 0, positions);
    }
    if (dim() == 0) throw value_error("kiln: value_error in 'index': a rank-0 tensor cannot be indexed");
    // The result's shape: the index's, then this tensor's without its first dimension (NumPy's t[index]).
    dims r;
    r.rank = index.dim() + dim() - 1;
    if (r.rank > max_rank)
        throw value_error("kiln: value_error in 'index': the result would have rank " + std::to_string(r.rank));
    int j = 0;
    for (int i = 0; i < index.dim(); ++i) r[j++] = index.shape()[i];
    for (int i = 1; i < dim(); ++i) r[j++] = shape_[i];
    return index_select(*this, 0, index.reshape({-1})).reshape(r);
}

}  // namespace kiln
