#pragma once
// The CPU backend's one reduction engine: sums, means, products, maxima and minima over any set of axes of a
// strided operand, and the positions of extrema (argmax, argmin). Graph mode's reductions, eager mode's and
// function mode's buffer plan all call it, so the three modes fold the same elements in the same order and agree
// bit for bit.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>

#include "../../expr/feed.hpp"
#include "../../ops/op_base.hpp"
#include "../device.hpp"

namespace kiln {
namespace detail {

// Scratch memory that grows and is then reused, one buffer per thread and type: a reduction's accumulators.
// (Not std::vector: T may be bool.)
template <class T>
T* scratch(std::size_t n) {
    thread_local std::unique_ptr<T[]> buf;
    thread_local std::size_t capacity = 0;
    if (capacity < n) {
        buf.reset(new T[n]);
        capacity = n;
    }
    return buf.get();
}

// A contiguous reduction whose reduced axes form one block: (outer kept) x (reduced) x (inner kept) elements, size-1
// axes ignored. False for other patterns (reduced axes on both sides of a kept one). `keep` is the shape with the
// reduced axes set to 1.
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

// The block reduction: acc[o * inner + i] folds x[o, r, i] over r in order (the order of the generic walk below).
// `first` says whether acc starts from the first element (extrema) or from its initial value (sums, products).
template <class T, class Acc, class Combine>
void fold_blocks(const T* __restrict x, Acc* __restrict acc, std::ptrdiff_t outer, std::ptrdiff_t red, std::ptrdiff_t inner,
                 bool first, Combine combine) {
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

// The generic walk: folds every element of x, in x's row-major order, into acc (laid out row-major over `keep`):
// f(acc[its output], value).
template <class T, class Acc, class F>
void reduce_strided(const strided<const T>& x, const dims& keep, Acc* acc, F f) {
    const std::ptrdiff_t n = x.shape.numel();
    if (n == 0) return;
    const int r = x.shape.rank;
    if (r == 0) {
        f(acc[0], x.data[0]);
        return;
    }
    dims os = contiguous_strides(keep);
    for (int d = 0; d < r; ++d)
        if (keep[d] == 1) os[d] = 0;
    std::ptrdiff_t idx[max_rank] = {};
    std::ptrdiff_t in_off = 0, out_off = 0;
    const std::ptrdiff_t inner = x.shape[r - 1], is = x.strides[r - 1], ios = os[r - 1];
    for (std::ptrdiff_t done = 0; done < n; done += inner) {
        if (ios == 0) {
            Acc& a = acc[out_off];
            for (std::ptrdiff_t j = 0; j < inner; ++j) f(a, x.data[in_off + j * is]);
        } else {
            for (std::ptrdiff_t j = 0; j < inner; ++j) f(acc[out_off + j * ios], x.data[in_off + j * is]);
        }
        for (int d = r - 2; d >= 0; --d) {
            if (++idx[d] < x.shape[d]) {
                in_off += x.strides[d];
                out_off += os[d];
                break;
            }
            in_off -= (idx[d] - 1) * x.strides[d];
            out_off -= (idx[d] - 1) * os[d];
            idx[d] = 0;
        }
    }
}

// out (row-major over `keep`, x's shape with the reduced dimensions set to 1) = x folded over the reduced
// dimensions, converted to R.
// - Sums and products of floating types accumulate in double; of integers and bool in int64, wrapping as NumPy's
//   do. An empty sum is 0, an empty product 1. `mean` divides each sum by `count` in T (graph mode's mean).
// - Extrema compare in T, and a NaN, once met, is the result. The caller reports extrema over no elements.
// Each output folds its elements in x's row-major order, except that contiguous rows (a row sum) are summed in
// four interleaved partial sums, (s0 + s1) + (s2 + s3).
template <class T, class R>
void reduce_into(fold_kind kind, const strided<const T>& x, const dims& keep, R* out, bool mean = false,
                 std::ptrdiff_t count = 0) {
    const std::ptrdiff_t m = keep.numel();
    if (m == 0) return;
    const bool empty = x.shape.numel() == 0;
    std::ptrdiff_t outer = 1, red = 1, inner = 1;
    // (Only with elements: then no product of extents overflows. An empty tensor may have huge extents.)
    const bool blocks = !empty && is_row_major(x) && reduction_blocks(x.shape, keep, outer, red, inner);
    const std::size_t mz = static_cast<std::size_t>(m);
    if (kind == fold_kind::max || kind == fold_kind::min) {
        T* acc = scratch<T>(mz);
        const bool is_max = kind == fold_kind::max;
        auto pick = [is_max](T a, T v) { return a != a ? a : (v != v || (is_max ? v > a : v < a)) ? v : a; };
        if (blocks) {
            fold_blocks(x.data, acc, outer, red, inner, true, pick);
        } else {
            using lim = std::numeric_limits<T>;
            const T init = is_max ? (lim::has_infinity ? -lim::infinity() : lim::lowest())
                                  : (lim::has_infinity ? lim::infinity() : lim::max());
            std::fill(acc, acc + m, init);
            reduce_strided(x, keep, acc, [&pick](T& a, T v) { a = pick(a, v); });
        }
        for (std::ptrdiff_t i = 0; i < m; ++i) out[i] = static_cast<R>(acc[i]);
        return;
    }
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
    Acc* acc = scratch<Acc>(mz);
    const bool is_sum = kind == fold_kind::sum;
    auto add = [](Acc a, T v) {
        if constexpr (std::is_integral_v<Acc>) return kernels::wrapping_add(a, static_cast<Acc>(v));
        else return a + static_cast<Acc>(v);
    };
    auto mul = [](Acc a, T v) {
        if constexpr (std::is_integral_v<Acc>) return kernels::wrapping_mul(a, static_cast<Acc>(v));
        else return a * static_cast<Acc>(v);
    };
    if (blocks && is_sum && inner == 1) {
        for (std::ptrdiff_t o = 0; o < outer; ++o) {
            const T* p = x.data + o * red;
            Acc s[4] = {};
            std::ptrdiff_t k = 0;
            for (; k + 4 <= red; k += 4)
                for (int q = 0; q < 4; ++q) s[q] = add(s[q], p[k + q]);
            for (; k < red; ++k) s[0] = add(s[0], p[k]);
            if constexpr (std::is_integral_v<Acc>) acc[o] = kernels::wrapping_add(kernels::wrapping_add(s[0], s[1]), kernels::wrapping_add(s[2], s[3]));
            else acc[o] = (s[0] + s[1]) + (s[2] + s[3]);
        }
    } else {
        std::fill(acc, acc + m, is_sum ? Acc(0) : Acc(1));
        if (blocks && is_sum) fold_blocks(x.data, acc, outer, red, inner, false, add);
        else if (blocks) fold_blocks(x.data, acc, outer, red, inner, false, mul);
        else if (is_sum) reduce_strided(x, keep, acc, [&add](Acc& a, T v) { a = add(a, v); });
        else reduce_strided(x, keep, acc, [&mul](Acc& a, T v) { a = mul(a, v); });
    }
    if constexpr (std::is_floating_point_v<T>) {
        if (mean) {
            for (std::ptrdiff_t i = 0; i < m; ++i)
                out[i] = static_cast<R>(static_cast<T>(static_cast<T>(acc[i]) / static_cast<T>(count)));
            return;
        }
    }
    for (std::ptrdiff_t i = 0; i < m; ++i) out[i] = static_cast<R>(acc[i]);
}

// out (row-major over `keep`) = the position along the one reduced axis of each output's first maximum (or
// minimum); a NaN, once met, wins. The caller reports an empty axis.
template <class T>
void arg_reduce_into(bool is_max, const strided<const T>& x, const dims& keep, std::int64_t* out) {
    struct best_t {
        T value;
        std::int64_t pos;
        std::int64_t seen;
    };
    const std::ptrdiff_t m = keep.numel();
    best_t* acc = scratch<best_t>(static_cast<std::size_t>(m));
    std::fill(acc, acc + m, best_t{T{}, -1, 0});
    // The walk visits x row-major, so the elements of one output arrive in order along the axis.
    reduce_strided(x, keep, acc, [is_max](best_t& b, T v) {
        const std::int64_t here = b.seen++;
        if (b.pos < 0 || (b.value == b.value && (v != v || (is_max ? v > b.value : v < b.value)))) b.value = v, b.pos = here;
    });
    for (std::ptrdiff_t i = 0; i < m; ++i) out[i] = acc[i].pos;
}

}  // namespace detail
}  // namespace kiln
