#pragma once
// Sorting (sort, argsort), cumulative sums and products, and reductions composed from the vocabulary (any, all,
// argmax/argmin over every element, var and std with a correction); comparisons within a tolerance (isclose,
// allclose) and the identity matrix (eye), composed the same way. Each is recorded on gradient tapes.
//
// (Eager-mode functions, as those of eager/indexing.hpp.)
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "../ops/scan.hpp"
#include "indexing.hpp"
#include "structural.hpp"

namespace kiln {

// ---- sorting --------------------------------------------------------------------------------------------------

// The indices that sort x along `axis` (stable; NaN last; largest first when `descending`), int64.
template <int N = 0>
tensor argsort(const tensor& x, int axis = -1, bool descending = false) {
    return detail::apply_structural<ops::argsort, N>(ops::sort_attrs{axis, descending}, x);
}

// x sorted along `axis`: take_along_axis of argsort, so the gradient flows back to where each value came from.
template <int N = 0>
tensor sort(const tensor& x, int axis = -1, bool descending = false) {
    (void)ops::detail_gather::axis_in(axis, x.shape(), "sort");  // (an error names the op called)
    return take_along_axis<N>(x, argsort<N>(x, axis, descending), axis);
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
    if (r.count == 0) return full(r.result, 0.0, dtype::boolean, x.device());
    return max(not_equal(x, 0), axes, keepdims);
}
template <int N = 0>
tensor all(const tensor& x_in, std::vector<int> axes = {}, bool keepdims = false) {
    const detail::dependent_tensor<N>& x = x_in;
    const auto r = detail::reduced_shape(x, axes, keepdims, "all");
    if (r.count == 0) return full(r.result, 1.0, dtype::boolean, x.device());
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

// ---- tolerances and the identity ---------------------------------------------------------------------------------

namespace detail {
inline void check_tolerances(double rtol, double atol, const char* op) {
    if (!(rtol >= 0) || !(atol >= 0) || !std::isfinite(rtol) || !std::isfinite(atol))
        throw value_error("kiln: value_error in '" + std::string(op) + "': rtol and atol must be finite and non-negative, got rtol " +
                          number_text(rtol) + " and atol " + number_text(atol));
}
}  // namespace detail

// NumPy's isclose, elementwise and broadcast (bool): |a - b| <= atol + rtol * |b| where both are finite; an infinity
// is close only to itself; NaN is close to nothing, or to NaN when `equal_nan`. Integers and bools compare as
// float64 (exactly up to 2^53), a floating operand in its own dtype.
template <int N = 0>
tensor isclose(const tensor& a_in, const tensor& b_in, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) {
    detail::check_tolerances(rtol, atol, "isclose");
    const bool floating = detail::is_floating(a_in.dtype()) || detail::is_floating(b_in.dtype());
    const detail::dependent_tensor<N> a = floating ? a_in : a_in.to(dtype::float64);
    const detail::dependent_tensor<N> b = floating ? b_in : b_in.to(dtype::float64);
    const detail::dependent_tensor<N> near = logical_and(logical_and(isfinite(a), isfinite(b)),
                                                         less_equal(abs(a - b), atol + rtol * abs(b)));
    const detail::dependent_tensor<N> close = logical_or(near, equal(a, b));
    return equal_nan ? logical_or(close, logical_and(isnan(a), isnan(b))) : close;
}

// Whether every element of a is close to b's (broadcast), as numpy.allclose: all(isclose(a, b, ...)). An eager
// answer: inside a traced function, write kiln::all(kiln::isclose(...)) and keep the tensor.
template <int N = 0>
bool allclose(const tensor& a, const tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) {
    const detail::dependent_tensor<N> c = isclose<N>(a, b, rtol, atol, equal_nan);
    return all<N>(c).template item<bool>();
}

// The n x m matrix (m = n when negative) with ones on the diagonal, as numpy.eye / torch.eye.
template <int N = 0>
tensor eye(std::ptrdiff_t n, std::ptrdiff_t m = -1, dtype d = dtype::float32) {
    if (m < 0) m = n;
    if (n < 0) throw value_error("kiln: value_error in 'eye': negative size " + std::to_string(n));
    const detail::dependent_tensor<N> rows = arange(0, static_cast<double>(n), 1, dtype::int64).reshape({n, 1});
    const detail::dependent_tensor<N> cols = arange(0, static_cast<double>(m), 1, dtype::int64).reshape({1, m});
    return equal(rows, cols).to(d);
}

}  // namespace kiln
