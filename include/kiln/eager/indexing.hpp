#pragma once
// Eager ops a NumPy or PyTorch user reaches for, beyond the elementwise vocabulary: flipping, advanced indexing
// (index_select, take_along_axis, masked_select, scatter_add), sorting, cumulative sums and products, any/all,
// var/std, tile/repeat/split/pad, outer and two-operand einsum. Each is recorded on gradient tapes, either as a
// composition of recorded ops or with its own backward rule below.
//
// (These are eager-mode functions. Graph mode gets them as structural op structs once the vocabulary is one set of
// structs for both modes, issue #13.)
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
#include "tape.hpp"

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
                    for (std::ptrdiff_t i = 0; i < o.inner; ++i) row[i] += from[i];
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
                        d[(a * o.length + idx[static_cast<std::size_t>(q)]) * o.inner + i] += v[q];
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

// x with the order of the elements reversed along `axes` (every axis when empty): a view with negative strides.
template <int = 0>
tensor flip(const tensor& x, std::vector<int> axes = {}) {
    if (axes.empty())
        for (int i = 0; i < x.dim(); ++i) axes.push_back(i);
    tensor y = x;
    std::vector<bool> seen(static_cast<std::size_t>(x.dim()), false);
    for (int a : axes) {
        const int ax = detail::checked_axis(x, a, "flip");
        if (seen[static_cast<std::size_t>(ax)])
            throw value_error("kiln: value_error in 'flip': axis " + std::to_string(a) + " repeats");
        seen[static_cast<std::size_t>(ax)] = true;
        y = y.slice(ax, slice_end, slice_begin, -1);  // recorded: the gradient flips back
    }
    return y;
}

// ---- advanced indexing --------------------------------------------------------------------------------------

// The entries of x at `index` (a 1-D int32/int64 tensor; negative entries count from the end) along `axis`:
// numpy.take(x, index, axis), torch.index_select. A copy; the gradient adds into the selected positions.
template <int = 0>
tensor index_select(const tensor& x, int axis, const tensor& index) {
    const int ax = detail::checked_axis(x, axis, "index_select");
    if (index.dim() != 1)
        throw shape_error("kiln: shape_error in 'index_select': the index must be 1-D, got shape " +
                          to_string(index.shape()));
    detail::tape_pause pause;
    const std::vector<std::int64_t> idx = detail::checked_indices(index, x.shape()[ax], "index_select");
    const tensor src = detail::dense(x);
    dims s = x.shape();
    s[ax] = static_cast<std::ptrdiff_t>(idx.size());
    tensor out(x.dtype(), s);
    const detail::axis_split o = detail::split_at(x.shape(), ax);
    const std::size_t row = static_cast<std::size_t>(o.inner) * x.itemsize();
    const auto* from = static_cast<const std::byte*>(src.raw_data());
    auto* to = static_cast<std::byte*>(out.raw_data());
    const auto k = static_cast<std::ptrdiff_t>(idx.size());
    for (std::ptrdiff_t a = 0; a < o.outer; ++a)
        for (std::ptrdiff_t j = 0; j < k; ++j)
            std::memcpy(to + static_cast<std::size_t>(a * k + j) * row,
                        from + static_cast<std::size_t>(a * o.length + idx[static_cast<std::size_t>(j)]) * row, row);
    if (pause.saved > 0)
        detail::record_entry({{x}, out, [x, ax, idx](const tensor& g) {
                                  tensor z = zeros(x.shape(), g.dtype());
                                  detail::index_add_into(z, ax, idx, g);
                                  return detail::one_gradient(z);
                              }});
    return out;
}

// out[i][j] = x[index[i][j]][j] along `axis` (numpy.take_along_axis, torch.gather): `index` has x's rank and
// x's extents except along `axis`. The gradient scatters back with scatter_add.
template <int = 0>
tensor take_along_axis(const tensor& x, const tensor& index, int axis) {
    const int ax = detail::checked_axis(x, axis, "take_along_axis");
    bool ok = index.dim() == x.dim();
    for (int i = 0; ok && i < x.dim(); ++i) ok = i == ax || index.shape()[i] == x.shape()[i];
    if (!ok)
        throw shape_error("kiln: shape_error in 'take_along_axis': the index " + to_string(index.shape()) +
                          " must have the shape of x " + to_string(x.shape()) + " except along axis " +
                          std::to_string(ax));
    detail::tape_pause pause;
    const std::vector<std::int64_t> idx = detail::checked_indices(index, x.shape()[ax], "take_along_axis");
    const tensor src = detail::dense(x);
    tensor out(x.dtype(), index.shape());
    const detail::axis_split o = detail::split_at(x.shape(), ax), is = detail::split_at(index.shape(), ax);
    const std::size_t item = x.itemsize();
    const auto* from = static_cast<const std::byte*>(src.raw_data());
    auto* to = static_cast<std::byte*>(out.raw_data());
    for (std::ptrdiff_t a = 0; a < is.outer; ++a)
        for (std::ptrdiff_t j = 0; j < is.length; ++j)
            for (std::ptrdiff_t i = 0; i < is.inner; ++i) {
                const std::ptrdiff_t q = (a * is.length + j) * is.inner + i;
                std::memcpy(to + static_cast<std::size_t>(q) * item,
                            from + static_cast<std::size_t>((a * o.length + idx[static_cast<std::size_t>(q)]) * o.inner + i) * item,
                            item);
            }
    if (pause.saved > 0)
        detail::record_entry({{x}, out, [x, index, ax](const tensor& g) {
                                  tensor z = zeros(x.shape(), g.dtype());
                                  detail::scatter_add_into(z, ax, index, g);
                                  return detail::one_gradient(z);
                              }});
    return out;
}

// A copy of x with src added at `index` along `axis` (torch.scatter_add): out[index[i][j]][j] += src[i][j].
// Gradients: x gets g, src gets take_along_axis(g, index, axis).
template <int = 0>
tensor scatter_add(const tensor& x, int axis, const tensor& index, const tensor& src) {
    const int ax = detail::checked_axis(x, axis, "scatter_add");
    bool ok = index.dim() == x.dim() && src.shape() == index.shape();
    for (int i = 0; ok && i < x.dim(); ++i) ok = i == ax || index.shape()[i] == x.shape()[i];
    if (!ok)
        throw shape_error("kiln: shape_error in 'scatter_add': the index " + to_string(index.shape()) +
                          " and the source " + to_string(src.shape()) + " must have one shape, x's " +
                          to_string(x.shape()) + " except along axis " + std::to_string(ax));
    if (x.dtype() == dtype::boolean)
        throw dtype_error("kiln: dtype_error in 'scatter_add': not defined for bool tensors");
    detail::tape_pause pause;
    tensor out = x.to(detail::promote(x.dtype(), src.dtype()));
    out = out.shares_storage_with(x) ? detail::dense(out).clone() : detail::dense(out);
    detail::scatter_add_into(out, ax, index, src);
    if (pause.saved > 0)
        detail::record_entry({{x, src}, out, [index, ax](const tensor& g) {
                                  std::vector<std::optional<tensor>> r;
                                  r.push_back(g);
                                  r.push_back(take_along_axis(g, index, ax));
                                  return r;
                              }});
    return out;
}

// The elements of x where `mask` (bool, x's shape or broadcastable to it) is true, in row-major order, as a 1-D
// copy: x[mask] in NumPy. The gradient scatters back into x's shape.
template <int = 0>
tensor masked_select(const tensor& x, const tensor& mask) {
    if (mask.dtype() != dtype::boolean)
        throw dtype_error("kiln: dtype_error in 'masked_select': the mask must be bool, not " +
                          std::string(name(mask.dtype())));
    const dims shape = detail::broadcast_named("masked_select", {&x, &mask});
    if (!(shape == x.shape()))
        throw shape_error("kiln: shape_error in 'masked_select': the mask " + to_string(mask.shape()) +
                          " must broadcast to x's shape " + to_string(x.shape()));
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
    if (index.dtype() == dtype::boolean) return masked_select(*this, index);
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

// ---- sorting --------------------------------------------------------------------------------------------------

namespace detail {
// A stable order of each line along `axis`: NaN last, as NumPy sorts.
template <int = 0>
tensor sort_order(const tensor& x, int ax, bool descending) {
    tape_pause pause;
    const tensor src = dense(x);
    tensor order(dtype::int64, x.shape());
    const axis_split o = split_at(x.shape(), ax);
    std::int64_t* out = order.data<std::int64_t>();
    dispatch(x.dtype(), [&]<class T>() {
        const T* v = src.data<const T>();
        std::vector<std::int64_t> line(static_cast<std::size_t>(o.length));
        for (std::ptrdiff_t a = 0; a < o.outer; ++a)
            for (std::ptrdiff_t i = 0; i < o.inner; ++i) {
                const T* base = v + a * o.length * o.inner + i;
                std::iota(line.begin(), line.end(), std::int64_t{0});
                std::stable_sort(line.begin(), line.end(), [&](std::int64_t p, std::int64_t q) {
                    const T x1 = base[p * o.inner], x2 = base[q * o.inner];
                    if (kernels::is_nan(x2)) return !kernels::is_nan(x1);
                    if (kernels::is_nan(x1)) return false;
                    return descending ? x2 < x1 : x1 < x2;
                });
                for (std::ptrdiff_t k = 0; k < o.length; ++k)
                    out[(a * o.length + k) * o.inner + i] = line[static_cast<std::size_t>(k)];
            }
    });
    return order;
}
}  // namespace detail

// The indices that sort x along `axis` (stable; NaN last; largest first when `descending`), int64.
template <int = 0>
tensor argsort(const tensor& x, int axis = -1, bool descending = false) {
    const int ax = detail::checked_axis(x, axis, "argsort");
    return detail::sort_order(x, ax, descending);
}

// x sorted along `axis`; the gradient flows back to the positions the values came from.
template <int = 0>
tensor sort(const tensor& x, int axis = -1, bool descending = false) {
    const int ax = detail::checked_axis(x, axis, "sort");
    return take_along_axis(x, detail::sort_order(x, ax, descending), ax);
}

// ---- cumulative ops -------------------------------------------------------------------------------------------

namespace detail {
// Running sums or products along `axis` in dtype d (bool and int32 accumulate in int64, as in PyTorch).
template <int = 0>
tensor cumulate(const tensor& x, int ax, bool product) {
    const dtype d = is_floating(x.dtype()) ? x.dtype() : dtype::int64;
    tensor out = dense(x.to(d)).clone();
    const axis_split o = split_at(x.shape(), ax);
    dispatch(d, [&]<class T>() {
        if constexpr (!std::is_same_v<T, bool>) {
            T* v = out.data<T>();
            for (std::ptrdiff_t a = 0; a < o.outer; ++a)
                for (std::ptrdiff_t k = 1; k < o.length; ++k) {
                    T* row = v + (a * o.length + k) * o.inner;
                    const T* prev = row - o.inner;
                    for (std::ptrdiff_t i = 0; i < o.inner; ++i) {
                        if (product) row[i] = ops::mul::apply(prev[i], row[i]);
                        else row[i] = ops::add::apply(prev[i], row[i]);
                    }
                }
        }
    });
    return out;
}
}  // namespace detail

// Running sum along `axis`: cumsum([1, 2, 3]) is [1, 3, 6]. Integer and bool inputs give int64.
template <int = 0>
tensor cumsum(const tensor& x, int axis) {
    const int ax = detail::checked_axis(x, axis, "cumsum");
    tensor y;
    {
        detail::tape_pause pause;
        y = detail::cumulate(x, ax, false);
    }
    if (detail::recording_tapes > 0)
        detail::record_entry({{x}, y, [ax](const tensor& g) {
                                  // Each input feeds every later output: the reversed running sum of g.
                                  return detail::one_gradient(flip(cumsum(flip(g, {ax}), ax), {ax}));
                              }});
    return y;
}

// Running product along `axis`. Its gradient divides by x, so it is not defined where x is 0.
template <int N = 0>
tensor cumprod(const tensor& x_in, int axis) {
    const detail::dependent_tensor<N>& x = x_in;
    const int ax = detail::checked_axis(x, axis, "cumprod");
    detail::dependent_tensor<N> y;
    {
        detail::tape_pause pause;
        y = detail::cumulate(x, ax, true);
    }
    if (detail::recording_tapes > 0)
        detail::record_entry({{x}, y, [x, y, ax](const detail::dependent_tensor<N>& g) {
                                  return detail::one_gradient(flip(cumsum(flip(g * y, {ax}), ax), {ax}) / x);
                              }});
    return y;
}

// ---- reductions built from the vocabulary -----------------------------------------------------------------------

// True where any (all) element along `axes` is nonzero; every axis when `axes` is empty. Empty reductions give
// false for any and true for all, as in NumPy.
template <int N = 0>
tensor any(const tensor& x_in, std::vector<int> axes = {}, bool keepdims = false) {
    const detail::dependent_tensor<N>& x = x_in;
    const auto r = detail::reduced_shape(x, axes, keepdims, "any");
    if (r.count == 0) return full(r.result, 0.0, dtype::boolean);
    return max(not_equal(x, 0), axes, keepdims);
}
template <int N = 0>
tensor all(const tensor& x_in, std::vector<int> axes = {}, bool keepdims = false) {
    const detail::dependent_tensor<N>& x = x_in;
    const auto r = detail::reduced_shape(x, axes, keepdims, "all");
    if (r.count == 0) return full(r.result, 1.0, dtype::boolean);
    return min(not_equal(x, 0), axes, keepdims);
}

// The index of the largest (smallest) element of the flattened tensor, as NumPy's argmax without an axis.
template <int = 0>
tensor argmax(const tensor& x) { return argmax(x.reshape({-1}), 0); }
template <int = 0>
tensor argmin(const tensor& x) { return argmin(x.reshape({-1}), 0); }

// The variance along `axes` (every axis when empty), dividing by N - correction (1 by default: the unbiased
// estimate, as torch.var; 0 gives NumPy's default). N - correction <= 0 gives infinity or NaN, as in PyTorch.
template <int N = 0>
tensor var(const tensor& x, std::vector<int> axes = {}, double correction = 1, bool keepdims = false) {
    const detail::dependent_tensor<N> xf = detail::is_floating(x.dtype()) ? x : x.to(dtype::float32);
    const auto r = detail::reduced_shape(xf, axes, keepdims, "var");
    const detail::dependent_tensor<N> d = xf - mean<N>(xf, axes, true);
    return sum(d * d, axes, keepdims) / std::max(static_cast<double>(r.count) - correction, 0.0);
}
template <int N = 0>
tensor std(const tensor& x, std::vector<int> axes = {}, double correction = 1, bool keepdims = false) {
    const detail::dependent_tensor<N> v = var<N>(x, axes, correction, keepdims);
    return sqrt(v);
}

// ---- shape ops --------------------------------------------------------------------------------------------------

// x repeated reps[i] times along each dimension (numpy.tile): reps longer than x's rank adds leading dimensions.
template <int = 0>
tensor tile(const tensor& x, const std::vector<std::ptrdiff_t>& reps) {
    for (std::ptrdiff_t r : reps)
        if (r < 0) throw value_error("kiln: value_error in 'tile': repetitions must be non-negative");
    const int rank = std::max(x.dim(), static_cast<int>(reps.size()));
    if (2 * rank > max_rank)
        throw value_error("kiln: value_error in 'tile': at most rank " + std::to_string(max_rank / 2) + " is supported");
    dims xs, inter, wide, out;
    xs.rank = rank;
    for (int i = 0; i < rank; ++i) {
        const int j = i - (rank - x.dim());
        xs[i] = j >= 0 ? x.shape()[j] : 1;
    }
    inter.rank = wide.rank = 2 * rank;
    out.rank = rank;
    for (int i = 0; i < rank; ++i) {
        const int j = i - (rank - static_cast<int>(reps.size()));
        const std::ptrdiff_t r = j >= 0 ? reps[static_cast<std::size_t>(j)] : 1;
        inter[2 * i] = 1, inter[2 * i + 1] = xs[i];
        wide[2 * i] = r, wide[2 * i + 1] = xs[i];
        out[i] = r * xs[i];
    }
    return x.reshape(inter).broadcast_to(wide).contiguous().reshape(out);
}

// Each element repeated `repeats` times along `axis` (numpy.repeat; the flattened tensor when axis is omitted).
template <int = 0>
tensor repeat(const tensor& x, std::ptrdiff_t repeats, std::optional<int> axis = std::nullopt) {
    if (repeats < 0) throw value_error("kiln: value_error in 'repeat': repetitions must be non-negative");
    if (!axis) return repeat(x.reshape({-1}), repeats, 0);
    const int ax = detail::checked_axis(x, *axis, "repeat");
    if (x.dim() == max_rank) throw value_error("kiln: value_error in 'repeat': the tensor has the largest rank");
    dims wide = x.unsqueeze(ax + 1).shape(), out = x.shape();
    wide[ax + 1] = repeats;
    out[ax] = x.shape()[ax] * repeats;
    return x.unsqueeze(ax + 1).broadcast_to(wide).contiguous().reshape(out);
}

// Views of consecutive parts of x along `axis`: `sections` equal parts (which must divide the extent) ...
template <int = 0>
std::vector<tensor> split(const tensor& x, std::ptrdiff_t sections, int axis = 0) {
    const int ax = detail::checked_axis(x, axis, "split");
    if (sections <= 0 || x.shape()[ax] % sections != 0)
        throw value_error("kiln: value_error in 'split': " + std::to_string(sections) +
                          " sections do not divide an extent of " + std::to_string(x.shape()[ax]));
    std::vector<tensor> out;
    const std::ptrdiff_t part = x.shape()[ax] / sections;
    for (std::ptrdiff_t k = 0; k < sections; ++k) out.push_back(x.slice(ax, k * part, (k + 1) * part));
    return out;
}
// ... or parts of the given sizes (which must add up to the extent), as torch.split with a list.
template <int = 0>
std::vector<tensor> split(const tensor& x, const std::vector<std::ptrdiff_t>& sizes, int axis) {
    const int ax = detail::checked_axis(x, axis, "split");
    std::ptrdiff_t total = 0;
    for (std::ptrdiff_t s : sizes) {
        if (s < 0) throw value_error("kiln: value_error in 'split': sizes must be non-negative");
        total += s;
    }
    if (total != x.shape()[ax])
        throw value_error("kiln: value_error in 'split': the sizes add up to " + std::to_string(total) +
                          ", not the extent " + std::to_string(x.shape()[ax]));
    std::vector<tensor> out;
    std::ptrdiff_t at = 0;
    for (std::ptrdiff_t s : sizes) out.push_back(x.slice(ax, at, at + s)), at += s;
    return out;
}

// x with `widths[i] = {before, after}` elements of `value` added around dimension i (numpy.pad, constant mode);
// fewer widths than dimensions pad the leading ones.
template <int = 0>
tensor pad(const tensor& x, const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& widths,
                  double value = 0) {
    if (static_cast<int>(widths.size()) > x.dim())
        throw value_error("kiln: value_error in 'pad': " + std::to_string(widths.size()) +
                          " pad widths for a tensor of rank " + std::to_string(x.dim()));
    tensor y = x;
    for (int ax = 0; ax < static_cast<int>(widths.size()); ++ax) {
        const auto [before, after] = widths[static_cast<std::size_t>(ax)];
        if (before < 0 || after < 0) throw value_error("kiln: value_error in 'pad': pad widths must be non-negative");
        if (before == 0 && after == 0) continue;
        dims b = y.shape(), a = y.shape();
        b[ax] = before;
        a[ax] = after;
        y = concat({full(b, value, y.dtype()), y, full(a, value, y.dtype())}, ax);
    }
    return y;
}

// The outer product of two tensors, flattened: out[i][j] = a[i] * b[j].
template <int N = 0>
tensor outer(const tensor& a, const tensor& b) {
    const detail::dependent_tensor<N> x = a.reshape({-1}).unsqueeze(1);
    return x * b.reshape({-1}).unsqueeze(0);
}

// Einstein summation over two operands ("ij,jk->ik", "bij,bjk->bik", "i,i->", "ij->ji" needs one operand and is
// not covered): letters in both operands and the output are batch dimensions, letters in both but not the output
// are contracted, letters of one operand missing from the output are summed first. Computed with one (batched)
// matmul; gradients come from the recorded views, sums and matmul. An output spec is required ("->").
template <int = 0>
tensor einsum(const std::string& spec, const tensor& a, const tensor& b) {
    auto fail = [&](const std::string& why) -> tensor {
        throw value_error("kiln: value_error in 'einsum': '" + spec + "': " + why);
    };
    const auto comma = spec.find(','), arrow = spec.find("->");
    if (comma == std::string::npos || arrow == std::string::npos || arrow < comma) return fail("write \"ab,bc->ac\"");
    const std::string sa = spec.substr(0, comma), sb = spec.substr(comma + 1, arrow - comma - 1),
                      so = spec.substr(arrow + 2);
    auto check = [&](const std::string& s, const tensor* t) {
        std::string seen;
        for (char c : s) {
            if (c < 'a' || c > 'z') return fail("subscripts are lowercase letters");
            if (seen.find(c) != std::string::npos) return fail(std::string("'") + c + "' repeats within one operand");
            seen += c;
        }
        if (t && static_cast<int>(s.size()) != t->dim())
            return fail("'" + s + "' has " + std::to_string(s.size()) + " subscripts for a tensor of rank " +
                        std::to_string(t->dim()));
        return tensor{};
    };
    check(sa, &a);
    check(sb, &b);
    check(so, nullptr);
    std::map<char, std::ptrdiff_t> extent;
    auto note = [&](const std::string& s, const tensor& t) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            const auto n = t.shape()[static_cast<int>(i)];
            auto [it, fresh] = extent.emplace(s[i], n);
            if (!fresh && it->second != n)
                fail(std::string("'") + s[i] + "' is " + std::to_string(it->second) + " in one operand and " +
                     std::to_string(n) + " in the other");
        }
    };
    note(sa, a);
    note(sb, b);
    for (char c : so)
        if (!extent.count(c)) return fail(std::string("output subscript '") + c + "' is in no operand");
    auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
    // Sum away what only one operand has and the output does not.
    auto reduce_own = [&](const tensor& t, const std::string& s, const std::string& other, std::string& kept) {
        std::vector<int> axes;
        kept.clear();
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (!has(other, s[i]) && !has(so, s[i])) axes.push_back(static_cast<int>(i));
            else kept += s[i];
        }
        return axes.empty() ? t : sum(t, axes);
    };
    std::string ka, kb;
    const tensor ta = reduce_own(a, sa, sb, ka), tb = reduce_own(b, sb, sa, kb);
    std::string batch, contract, left, right;
    for (char c : ka) {
        if (has(kb, c)) (has(so, c) ? batch : contract) += c;
        else left += c;
    }
    for (char c : kb)
        if (!has(ka, c)) right += c;
    auto arrange = [&](const tensor& t, const std::string& s, const std::string& order) {
        if (order.empty()) return t;
        std::array<int, max_rank> perm{};
        for (std::size_t i = 0; i < order.size(); ++i) perm[i] = static_cast<int>(s.find(order[i]));
        return t.permute_array(perm, static_cast<int>(order.size()));
    };
    auto count = [&](const std::string& s) {
        std::ptrdiff_t n = 1;
        for (char c : s) n *= extent[c];
        return n;
    };
    const std::ptrdiff_t B = count(batch), M = count(left), K = count(contract), N = count(right);
    const tensor am = arrange(ta, ka, batch + left + contract).reshape({B, M, K});
    const tensor bm = arrange(tb, kb, batch + contract + right).reshape({B, K, N});
    const tensor prod = matmul(am, bm);  // (B, M, N)
    const std::string have = batch + left + right;
    dims full_shape;
    full_shape.rank = static_cast<int>(have.size());
    for (std::size_t i = 0; i < have.size(); ++i) full_shape[static_cast<int>(i)] = extent[have[i]];
    const tensor r = prod.reshape(full_shape);
    if (so.size() != have.size()) return fail("every output subscript must appear once");
    return arrange(r, have, so);
}

// softmax and log_softmax along an axis (kiln::nn's, reachable from kiln:: as in PyTorch's torch.softmax).
}  // namespace kiln
