#pragma once
// The CPU's gathers and scatters along one axis (take, take_along_axis and their gradients), its stable sort
// order (argsort) and its fill: kernels over strided operands into contiguous results, behind cpu_device.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "../../expr/feed.hpp"
#include "../../ops/op_base.hpp"
#include "reduce.hpp"

namespace kiln {
namespace detail {

// Calls f(index) for every multi-index of `shape` in row-major order.
template <class F>
void for_each_index(const dims& shape, F&& f) {
    if (shape.numel() == 0) return;
    std::array<std::ptrdiff_t, max_rank> i{};
    for (;;) {
        f(i);
        int d = shape.rank - 1;
        for (; d >= 0; --d) {
            if (++i[static_cast<std::size_t>(d)] < shape[d]) break;
            i[static_cast<std::size_t>(d)] = 0;
        }
        if (d < 0) return;
    }
}

template <class T>
std::ptrdiff_t offset_of(const strided<T>& v, const std::array<std::ptrdiff_t, max_rank>& i) {
    std::ptrdiff_t off = 0;
    for (int d = 0; d < v.shape.rank; ++d) off += i[static_cast<std::size_t>(d)] * v.strides[d];
    return off;
}

// An index read from an integer operand, checked against an extent of n (a negative one counts from the end).
// (The message is built out of line, so that the check itself inlines into the gathers' loops.)
[[noreturn, gnu::noinline, gnu::cold]] inline void index_out_of_range(long long raw, std::ptrdiff_t n, std::string_view op) {
    throw value_error(error_prefix("value_error", op) + "index " + std::to_string(raw) +
                      " is out of range for a dimension of size " + std::to_string(n));
}
template <class I>
inline std::ptrdiff_t checked_index(I raw, std::ptrdiff_t n, std::string_view op) {
    static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>, "kiln: indices are integers.");
    auto v = static_cast<std::ptrdiff_t>(raw);
    if (v < 0) v += n;
    if (v < 0 || v >= n) [[unlikely]]
        index_out_of_range(static_cast<long long>(raw), n, op);
    return v;
}

// Calls f(offset_a, offset_b, k) for every multi-index of `shape` in row-major order (k counts them), with the
// offsets of that index in two views of strides sa and sb, kept incrementally (the innermost loop is plain).
template <class F>
void walk2(const dims& shape, const dims& sa, const dims& sb, F&& f) {
    if (shape.numel() == 0) return;
    const int r = shape.rank;
    if (r == 0) {
        f(std::ptrdiff_t{0}, std::ptrdiff_t{0}, std::ptrdiff_t{0});
        return;
    }
    std::array<std::ptrdiff_t, max_rank> i{};
    std::ptrdiff_t oa = 0, ob = 0, k = 0;
    const std::ptrdiff_t n = shape[r - 1], da = sa[r - 1], db = sb[r - 1];
    for (;;) {
        for (std::ptrdiff_t j = 0; j < n; ++j) f(oa + j * da, ob + j * db, k++);
        int d = r - 2;
        for (; d >= 0; --d) {
            oa += sa[d];
            ob += sb[d];
            if (++i[static_cast<std::size_t>(d)] < shape[d]) break;
            oa -= sa[d] * shape[d];
            ob -= sb[d] * shape[d];
            i[static_cast<std::size_t>(d)] = 0;
        }
        if (d < 0) return;
    }
}

// x's strides with the axis's set to 0 (the index supplies the position along it), for a walk over index's shape.
template <class T>
dims strides_without(const strided<T>& x, int axis) {
    dims s = x.strides;
    s[axis] = 0;
    return s;
}

// out (row-major, index's shape) = x[.., index[.., j, ..], ..] along `axis` (take_along_axis). With Add, the
// scatter that is its gradient: out (row-major, x's shape, zeroed here) += g at the indexed positions.
template <class T, class I, class U>
void gather_along_into(const strided<const T>& x, const strided<const I>& index, int axis, U* out, std::string_view op) {
    const std::ptrdiff_t n = x.shape[axis], step = x.strides[axis];
    walk2(index.shape, strides_without(x, axis), index.strides, [&](std::ptrdiff_t ox, std::ptrdiff_t oi, std::ptrdiff_t k) {
        out[k] = static_cast<U>(x.data[ox + checked_index(index.data[oi], n, op) * step]);
    });
}
template <class T, class I, class U>
void scatter_add_along_into(const strided<const T>& g, const strided<const I>& index, int axis, const dims& shape, U* out,
                            std::string_view op) {
    std::fill(out, out + shape.numel(), U(0));
    dims cs = contiguous_strides(shape);
    const std::ptrdiff_t n = shape[axis], step = cs[axis];
    cs[axis] = 0;
    // (g has the index's shape: its offsets come from a second walk in step with the first.)
    if (is_row_major(g)) {
        walk2(index.shape, cs, index.strides, [&](std::ptrdiff_t oo, std::ptrdiff_t oi, std::ptrdiff_t k) {
            kernels::accumulate(out[oo + checked_index(index.data[oi], n, op) * step], static_cast<U>(g.data[k]));
        });
        return;
    }
    for_each_index(index.shape, [&](const std::array<std::ptrdiff_t, max_rank>& i) {
        std::ptrdiff_t off = 0;
        for (int d = 0; d < shape.rank; ++d) off += i[static_cast<std::size_t>(d)] * cs[d];
        off += checked_index(index.data[offset_of(index, i)], n, op) * step;
        kernels::accumulate(out[off], static_cast<U>(g.data[offset_of(g, i)]));
    });
}

// The dimensions of a view after `axis` as one run of `n` elements `stride` apart, when their strides allow
// (row-major among themselves); n is 0 when they do not.
template <class T>
void inner_run(const strided<T>& v, int axis, std::ptrdiff_t& n, std::ptrdiff_t& stride) {
    n = 1;
    stride = 1;
    for (int d = v.shape.rank - 1; d > axis; --d) {
        if (v.shape[d] == 1) continue;
        if (n > 1 && v.strides[d] != stride * n) {
            n = 0;
            return;
        }
        if (n == 1) stride = v.strides[d];
        n *= v.shape[d];
    }
}

// out (row-major, x's shape before axis + index's shape + x's shape after it) = x with `axis` indexed by every
// entry of index (numpy.take, torch.index_select for a 1-D index). Rows after the axis are copied as runs (an
// embedding lookup copies whole rows).
template <class T, class I, class U>
void take_into(const strided<const T>& x, const strided<const I>& index, int axis, U* out, std::string_view op) {
    const std::ptrdiff_t n = x.shape[axis];
    dims before{}, after{};
    before.rank = axis;
    for (int d = 0; d < axis; ++d) before[d] = x.shape[d];
    after.rank = x.shape.rank - axis - 1;
    for (int d = axis + 1; d < x.shape.rank; ++d) after[d - axis - 1] = x.shape[d];
    std::ptrdiff_t run = 0, step = 1;
    inner_run(x, axis, run, step);
    const std::ptrdiff_t inner = after.numel();
    if (inner == 0 || index.shape.numel() == 0) return;
    std::ptrdiff_t k = 0;
    if (run == 1 && is_row_major(index) && before.numel() > 0) {
        // One element per index (x's axis is its last, or what follows has extent 1: columns picked from a
        // matrix): the index read once, then a plain loop per line.
        const std::ptrdiff_t count = index.shape.numel(), along = x.strides[axis];
        std::vector<std::ptrdiff_t> at(static_cast<std::size_t>(count));
        for (std::ptrdiff_t j = 0; j < count; ++j) at[static_cast<std::size_t>(j)] = checked_index(index.data[j], n, op) * along;
        for_each_index(before, [&](const std::array<std::ptrdiff_t, max_rank>& b) {
            const T* line = x.data;
            for (int d = 0; d < axis; ++d) line += b[static_cast<std::size_t>(d)] * x.strides[d];
            for (std::ptrdiff_t j = 0; j < count; ++j) out[k++] = static_cast<U>(line[at[static_cast<std::size_t>(j)]]);
        });
        return;
    }
    for_each_index(before, [&](const std::array<std::ptrdiff_t, max_rank>& b) {
        std::ptrdiff_t base = 0;
        for (int d = 0; d < axis; ++d) base += b[static_cast<std::size_t>(d)] * x.strides[d];
        for_each_index(index.shape, [&](const std::array<std::ptrdiff_t, max_rank>& j) {
            const std::ptrdiff_t row = base + checked_index(index.data[offset_of(index, j)], n, op) * x.strides[axis];
            if (run > 0) {
                const T* from = x.data + row;
                if constexpr (std::is_same_v<T, U>) {
                    if (step == 1) {
                        std::copy(from, from + run, out + k);
                        k += run;
                        return;
                    }
                }
                for (std::ptrdiff_t i = 0; i < run; ++i) out[k + i] = static_cast<U>(from[i * step]);
                k += run;
            } else {
                for_each_index(after, [&](const std::array<std::ptrdiff_t, max_rank>& a) {
                    std::ptrdiff_t off = row;
                    for (int d = 0; d < after.rank; ++d) off += a[static_cast<std::size_t>(d)] * x.strides[axis + 1 + d];
                    out[k++] = static_cast<U>(x.data[off]);
                });
            }
        });
    });
}
// Its gradient: out (row-major, `shape`, zeroed here) += g at the rows take read.
template <class T, class I, class U>
void take_add_into(const strided<const T>& g, const strided<const I>& index, int axis, const dims& shape, U* out,
                   std::string_view op) {
    std::fill(out, out + shape.numel(), U(0));
    const dims cs = contiguous_strides(shape);
    const int ri = index.shape.rank;
    const std::ptrdiff_t n = shape[axis];
    if (is_row_major(g) && is_row_major(index)) {
        // (An embedding's gradient: each of g's rows added into the row its index names, as runs.)
        std::ptrdiff_t before = 1, after = 1;
        for (int d = 0; d < axis; ++d) before *= shape[d];
        for (int d = axis + 1; d < shape.rank; ++d) after *= shape[d];
        const std::ptrdiff_t count = index.shape.numel();
        const T* from = g.data;
        for (std::ptrdiff_t b = 0; b < before; ++b) {
            U* block = out + b * n * after;
            for (std::ptrdiff_t j = 0; j < count; ++j, from += after) {
                U* to = block + checked_index(index.data[j], n, op) * after;
                for (std::ptrdiff_t a = 0; a < after; ++a) kernels::accumulate(to[a], static_cast<U>(from[a]));
            }
        }
        return;
    }
    for_each_index(g.shape, [&](const std::array<std::ptrdiff_t, max_rank>& i) {
        std::ptrdiff_t off = 0, ioff = 0;
        for (int d = 0; d < axis; ++d) off += i[static_cast<std::size_t>(d)] * cs[d];
        for (int d = 0; d < ri; ++d) ioff += i[static_cast<std::size_t>(axis + d)] * index.strides[d];
        for (int d = axis + 1; d < shape.rank; ++d) off += i[static_cast<std::size_t>(d - 1 + ri)] * cs[d];
        off += checked_index(index.data[ioff], n, op) * cs[axis];
        kernels::accumulate(out[off], static_cast<U>(g.data[offset_of(g, i)]));
    });
}

// out (row-major int64, x's shape) = the stable order of each line of x along `axis`: NaN last, as NumPy sorts;
// largest first when descending (ties and NaN keep their order).
template <class T>
void sort_order_into(const strided<const T>& x, int axis, bool descending, std::int64_t* out) {
    const dims& s = x.shape;
    const std::ptrdiff_t len = s[axis];
    if (s.numel() == 0) return;
    dims lines = s;
    lines[axis] = 1;
    const dims cs = contiguous_strides(s);
    // Each line as (value, position) pairs, sorted by value: comparisons read neighbouring memory, not x.
    std::vector<std::pair<T, std::int64_t>> line(static_cast<std::size_t>(len));
    for_each_index(lines, [&](const std::array<std::ptrdiff_t, max_rank>& i) {
        const T* base = x.data + offset_of(x, i);
        std::ptrdiff_t obase = 0;
        for (int d = 0; d < s.rank; ++d) obase += i[static_cast<std::size_t>(d)] * cs[d];
        const std::ptrdiff_t step = x.strides[axis];
        for (std::ptrdiff_t k = 0; k < len; ++k) line[static_cast<std::size_t>(k)] = {base[k * step], k};
        // Stable by position: equal values (and NaNs, which go last) keep their order. (std::sort with the position
        // as the last key rather than std::stable_sort, whose temporary buffer libstdc++ 12 marks deprecated for
        // clang 19.)
        std::sort(line.begin(), line.end(), [&](const auto& p, const auto& q) {
            const T a = p.first, b = q.first;
            const bool na = kernels::is_nan(a), nb = kernels::is_nan(b);
            if (na != nb) return nb;
            if (!na) {
                if (descending ? b < a : a < b) return true;
                if (descending ? a < b : b < a) return false;
            }
            return p.second < q.second;
        });
        for (std::ptrdiff_t k = 0; k < len; ++k) out[obase + k * cs[axis]] = line[static_cast<std::size_t>(k)].second;
    });
}

}  // namespace detail
}  // namespace kiln
