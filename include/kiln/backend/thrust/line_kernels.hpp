#pragma once
// The GPU device's kernels along one axis and by index (backend/thrust/device.hpp runs them): scans' loads and
// stores over the lines of an axis, the gathers and scatters with their index checks and atomic adds, and the
// sort's order of every element. The launch, the buffers, the elementwise, copy and reduction kernels and the index
// check they share are in kernels.hpp.
#include <cstddef>
#include <cstdint>

#include <thrust/tuple.h>

#include "kernels.hpp"

namespace kiln {
namespace backend {
namespace gpu {

// ---- scans and sorts: the lines along one axis ----

// x's axes ordered with `axis` last (each line of it contiguous in that order), with x's strides and the strides of
// a row-major result of x's shape in the same order.
struct lines {
    walk order;
    steps s, os;
};
template <class T>
lines lines_of(const detail::strided<const T>& x, int axis) {
    lines l;
    const dims cs = detail::contiguous_strides(x.shape);
    int k = 0;
    for (int d = 0; d <= x.shape.rank; ++d) {
        const int src = d == x.shape.rank ? axis : d;
        if (d == axis) continue;
        l.order.extent[k] = x.shape[src];
        l.s.s[k] = x.strides[src];
        l.os.s[k++] = cs[src];
    }
    l.order.rank = k;
    return l;
}

template <class T, class U>
struct scan_load {
    const T* x;
    walk order;  // the other axes, then the scanned one
    steps s;
    std::ptrdiff_t len;
    bool reverse;
    KILN_HD U operator()(std::ptrdiff_t j) const {
        std::ptrdiff_t p = j % len;
        if (reverse) j += len - 1 - 2 * p;
        return static_cast<U>(x[offset_of(j, order, s)]);
    }
};
template <class U>
struct scan_store {
    U* out;
    walk order;
    steps os;  // the output's (contiguous) strides in the same order
    std::ptrdiff_t len;
    bool reverse;
    // Writes the running value of element j; used through a counting iterator of positions.
    KILN_HD void operator()(const ::thrust::tuple<std::ptrdiff_t, U>& t) const {
        std::ptrdiff_t j = ::thrust::get<0>(t);
        const std::ptrdiff_t p = j % len;
        if (reverse) j += len - 1 - 2 * p;
        out[offset_of(j, order, os)] = ::thrust::get<1>(t);
    }
};
template <class U>
struct scan_scatter {
    scan_store<U> store;
    const U* values;
    KILN_HD void operator()(std::ptrdiff_t j) const { store(::thrust::make_tuple(j, values[j])); }
};
template <class U>
struct scan_op {
    bool product;
    KILN_HD U operator()(U a, U v) const {
        return product ? static_cast<U>(ops::mul::apply(a, v)) : static_cast<U>(ops::add::apply(a, v));
    }
};

// ---- gathers and scatters ----

template <class T, class I, class U>
struct gather_along_kernel {
    const T* x;
    steps xs;  // x's strides with the axis's set to 0
    std::ptrdiff_t n, step;
    const I* index;
    walk ishape;
    steps is;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        const std::ptrdiff_t v = checked(index[offset_of(k, ishape, is)], n, fault);
        out[k] = v < 0 ? U(0) : static_cast<U>(x[offset_of(k, ishape, xs) + v * step]);
    }
};
template <class T, class I, class U>
struct scatter_along_kernel {
    const T* g;
    steps gs;
    const I* index;
    walk ishape;
    steps is;
    steps cs;  // the output's contiguous strides with the axis's set to 0
    std::ptrdiff_t n, step;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        const std::ptrdiff_t v = checked(index[offset_of(k, ishape, is)], n, fault);
        if (v >= 0) atomic_add(out + offset_of(k, ishape, cs) + v * step, static_cast<U>(g[offset_of(k, ishape, gs)]));
    }
};
// take (Add false): out[before, j.., after] = src[before, index[j..], after], the result's element k decoding as
// (before, j, after). Its gradient (Add true): src[before, j.., after] (the gradient, element k) is added into
// out[before, index[j..], after].
template <class T, class I, class U, bool Add>
struct take_kernel {
    const T* src;
    walk shape;     // before + index's shape + after
    steps src_s;    // src's strides for those axes (0 for the index's axes when taking)
    steps out_s;    // with Add: the output's contiguous strides for those axes (0 for the index's axes)
    int axis, irank;
    std::ptrdiff_t n, step;  // the indexed axis's extent and stride (in src when taking, in out when adding)
    const I* index;
    steps is;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        std::ptrdiff_t rest = k, soff = 0, ooff = 0, ioff = 0;
        for (int d = shape.rank - 1; d >= 0; --d) {
            const std::ptrdiff_t at = rest % shape.extent[d];
            rest /= shape.extent[d];
            soff += at * src_s.s[d];
            if constexpr (Add) ooff += at * out_s.s[d];
            if (d >= axis && d < axis + irank) ioff += at * is.s[d - axis];
        }
        const std::ptrdiff_t v = checked(index[ioff], n, fault);
        if constexpr (Add) {
            if (v >= 0) atomic_add(out + ooff + v * step, static_cast<U>(src[soff]));
        } else {
            out[k] = v < 0 ? U(0) : static_cast<U>(src[soff + v * step]);
        }
    }
};

// ---- sort order: every element's position sorted by (line, value), stably ----

template <class T>
struct line_less {
    const T* x;
    walk order;  // the other axes, then the sorted one
    steps s;
    std::ptrdiff_t len;
    bool descending;
    KILN_HD bool operator()(std::int64_t p, std::int64_t q) const {
        const std::ptrdiff_t lp = p / len, lq = q / len;
        if (lp != lq) return lp < lq;
        const T a = x[offset_of(p, order, s)], b = x[offset_of(q, order, s)];
        if (b != b) return !(a != a);
        if (a != a) return false;
        return descending ? b < a : a < b;
    }
};
struct order_store {
    std::int64_t* out;
    walk order;
    steps os;
    std::ptrdiff_t len;
    const std::int64_t* sorted;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        // k: the k-th element of the sorted sequence; its line is k / len and its rank in the line k % len.
        const std::ptrdiff_t line = k / len, rank = k % len;
        out[offset_of(line * len + rank, order, os)] = sorted[k] % len;
    }
};

}  // namespace gpu
}  // namespace backend
}  // namespace kiln
