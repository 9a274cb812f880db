#pragma once
// Sorting (sort, argsort), cumulative sums and products, and reductions composed from the vocabulary (any, all,
// argmax/argmin over every element, var and std with a correction). Each is recorded on gradient tapes.
//
// (Eager-mode functions, as those of eager/indexing.hpp.)
#include <algorithm>
#include <numeric>
#include <vector>

#include "../ops/scan.hpp"
#include "indexing.hpp"
#include "structural.hpp"

namespace kiln {

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

// Running sum along `axis`: cumsum([1, 2, 3]) is [1, 3, 6]; from the end when `reverse` ([6, 5, 3]). Integer and
// bool inputs give int64. The op is ops::scan (ops/scan.hpp): its gradient is the scan of g the other way.
template <int N = 0>
tensor cumsum(const tensor& x, int axis, bool reverse = false) {
    return detail::apply_structural<ops::scan<ops::scan_kind::sum>, N>(ops::scan_attrs{axis, reverse}, x);
}

// Running product along `axis` (from the end when `reverse`). Its gradient divides by x, so it is not defined
// where x is 0.
template <int N = 0>
tensor cumprod(const tensor& x, int axis, bool reverse = false) {
    return detail::apply_structural<ops::scan<ops::scan_kind::prod>, N>(ops::scan_attrs{axis, reverse}, x);
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

}  // namespace kiln
