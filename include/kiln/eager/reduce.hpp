#pragma once
// Reductions over axes: sum, mean, prod, max, min (keepdims optional) and argmax, argmin along one axis.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

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

// Visits every element of x with the flat index of its output (reduced axes contribute nothing).
template <class T, class F>
void for_each_reduced(const tensor& x, const dims& keep, F&& f) {
    const std::ptrdiff_t n = x.numel();
    if (n == 0) return;
    const T* base = x.data<const T>();
    const dims out_strides = contiguous_strides(keep);
    const int r = x.dim();
    std::ptrdiff_t idx[max_rank] = {};
    std::ptrdiff_t in_off = 0, out_off = 0;
    for (std::ptrdiff_t k = 0; k < n; ++k) {
        f(base[in_off], out_off);
        for (int d = r - 1; d >= 0; --d) {
            const std::ptrdiff_t os = keep[d] == 1 ? 0 : out_strides[d];
            if (++idx[d] < x.shape()[d]) {
                in_off += x.strides()[d];
                out_off += os;
                break;
            }
            in_off -= (idx[d] - 1) * x.strides()[d];
            out_off -= (idx[d] - 1) * os;
            idx[d] = 0;
        }
    }
}

enum class fold_kind { sum, prod, max, min };

// A contiguous reduction whose reduced axes form one block: (outer kept) x (reduced) x (inner kept) elements, size-1
// axes ignored. False for other patterns (reduced axes on both sides of a kept one).
inline bool reduction_blocks(const dims& shape, const dims& keep, std::ptrdiff_t& outer, std::ptrdiff_t& red,
                             std::ptrdiff_t& inner) {
    int phase = 0;  // 0: leading kept axes, 1: reduced axes, 2: trailing kept axes
    outer = red = inner = 1;
    for (int i = 0; i < shape.rank; ++i) {
        if (shape[i] == 1) continue;
        if (keep[i] == 1) {
            if (phase == 2) return false;
            phase = 1;
            red *= shape[i];
        } else {
            if (phase == 1) phase = 2;
            (phase == 0 ? outer : inner) *= shape[i];
        }
    }
    return true;
}

// The block reduction: acc[o * inner + i] folds x[o, r, i] over r in order (each output sees its elements in the
// order of the generic loop, so results are the same bit for bit). `first` says whether acc starts from the
// first element (extrema) or from its initial value (sums, products).
template <class T, class Acc, class Combine>
void fold_blocks(const T* __restrict x, Acc* __restrict acc, std::ptrdiff_t outer, std::ptrdiff_t red, std::ptrdiff_t inner, bool first,
                 Combine combine) {
    for (std::ptrdiff_t o = 0; o < outer; ++o) {
        Acc* __restrict a = acc + o * inner;
        const T* __restrict block = x + o * red * inner;
        std::ptrdiff_t r = 0;
        if (first && red > 0) {
            for (std::ptrdiff_t i = 0; i < inner; ++i) a[i] = static_cast<Acc>(block[i]);
            r = 1;
        }
        for (; r < red; ++r) {
            const T* __restrict row = block + r * inner;
            for (std::ptrdiff_t i = 0; i < inner; ++i) a[i] = combine(a[i], row[i]);
        }
    }
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
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
        const std::ptrdiff_t m = r.keep.size();
        std::ptrdiff_t outer = 1, red = 1, inner = 1;
        // (Only with elements: then no product of extents overflows. An empty tensor may have huge extents.)
        const bool blocks = x.numel() > 0 && x.is_contiguous() && reduction_blocks(x.shape(), r.keep, outer, red, inner);
        if (extremum) {
            std::unique_ptr<T[]> acc(new T[static_cast<std::size_t>(m)]);  // not vector<T>: T may be bool
            const bool is_max = kind == fold_kind::max;
            if (blocks) {
                fold_blocks(x.data<const T>(), acc.get(), outer, red, inner, true, [is_max](T a, T v) {
                    return a != a ? a : (v != v || (is_max ? v > a : v < a)) ? v : a;  // NaN is sticky
                });
                std::copy(acc.get(), acc.get() + m, out.data<T>());
                return;
            }
            std::vector<char> started(static_cast<std::size_t>(m), 0);
            for_each_reduced<T>(x, r.keep, [&](T v, std::ptrdiff_t o) {
                T& a = acc[static_cast<std::size_t>(o)];
                if (!started[static_cast<std::size_t>(o)]) {
                    a = v;
                    started[static_cast<std::size_t>(o)] = 1;
                } else if (a == a) {  // NaN is sticky
                    if (v != v || (is_max ? v > a : v < a)) a = v;
                }
            });
            std::copy(acc.get(), acc.get() + m, out.data<T>());
        } else {
            std::vector<Acc> acc(static_cast<std::size_t>(m), kind == fold_kind::prod ? Acc(1) : Acc(0));
            // Integer sums and products wrap (through the unsigned type: signed overflow is undefined in C++).
            if (blocks && kind == fold_kind::sum)
                fold_blocks(x.data<const T>(), acc.data(), outer, red, inner, false, [](Acc a, T v) {
                    if constexpr (std::is_integral_v<Acc>) return kernels::wrapping_add(a, Acc(v));
                    else return a + Acc(v);
                });
            else if (blocks)
                fold_blocks(x.data<const T>(), acc.data(), outer, red, inner, false, [](Acc a, T v) {
                    if constexpr (std::is_integral_v<Acc>) return kernels::wrapping_mul(a, Acc(v));
                    else return a * Acc(v);
                });
            else if (kind == fold_kind::sum)
                for_each_reduced<T>(x, r.keep, [&](T v, std::ptrdiff_t o) {
                    Acc& a = acc[static_cast<std::size_t>(o)];
                    if constexpr (std::is_integral_v<Acc>) a = kernels::wrapping_add(a, Acc(v));
                    else a += Acc(v);
                });
            else
                for_each_reduced<T>(x, r.keep, [&](T v, std::ptrdiff_t o) {
                    Acc& a = acc[static_cast<std::size_t>(o)];
                    if constexpr (std::is_integral_v<Acc>) a = kernels::wrapping_mul(a, Acc(v));
                    else a *= Acc(v);
                });
            dispatch(out_dtype, [&]<class R>() {
                R* p = out.data<R>();
                for (std::ptrdiff_t i = 0; i < m; ++i) p[i] = static_cast<R>(acc[static_cast<std::size_t>(i)]);
            });
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
        const std::ptrdiff_t m = r.keep.size();
        std::unique_ptr<T[]> best(new T[static_cast<std::size_t>(m)]);
        std::vector<std::int64_t> pos(static_cast<std::size_t>(m), -1), seen(static_cast<std::size_t>(m), 0);
        for_each_reduced<T>(x, r.keep, [&](T v, std::ptrdiff_t o) {
            const auto i = static_cast<std::size_t>(o);
            const std::int64_t here = seen[i]++;  // elements of one output arrive in order along the axis
            T& b = best[i];
            if (pos[i] < 0 || (b == b && (v != v || (is_max ? v > b : v < b)))) b = v, pos[i] = here;
        });
        std::copy(pos.begin(), pos.end(), out.data<std::int64_t>());
    });
    (void)ax;
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
