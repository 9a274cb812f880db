#pragma once
// The CPU backend's one strided copy. Every copy that is not an elementwise op runs here: graph mode's
// materialized views and fed containers, eager mode's casts, assignments, joins and views' gradients, the data
// loaders. A plain strided loop rather than the fused loop on purpose: copies are instantiated for every pair of
// dtypes in every translation unit, where the fused loop's vector paths would cost seconds of compile time.
#include <cstring>

#include "../../expr/feed.hpp"

namespace kiln {
namespace detail {

// out = in, element by element over out's shape, converting each element to U. `in` is laid out against out's
// dimensions: same rank and extents, with stride 0 where it repeats (broadcasting). Contiguous copies of one dtype
// are one memmove, so the source may be the output itself.
// With Add, out += in instead (col2im's strided add; `in` must not overlap `out`).
template <class U, class T, bool Add = false>
void strided_copy(const strided<U>& out, const strided<const T>& in) {
    const dims& shape = out.shape;
    const std::ptrdiff_t n = shape.numel();
    if (n == 0) return;
    const int r = shape.rank;
    if (r == 0) {
        if constexpr (Add) *out.data = add_value(*out.data, value_cast<U>(*in.data));
        else *out.data = value_cast<U>(*in.data);
        return;
    }
    if constexpr (std::is_same_v<U, T> && !Add) {
        const dims row_major = contiguous_strides(shape);
        bool flat = true;
        for (int d = 0; d < r && flat; ++d)
            flat = shape[d] == 1 || (out.strides[d] == row_major[d] && in.strides[d] == row_major[d]);
        if (flat) {
            std::memmove(static_cast<void*>(out.data), static_cast<const void*>(in.data),
                         static_cast<std::size_t>(n) * sizeof(T));
            return;
        }
    }
    const dims& os = out.strides;
    const dims& is = in.strides;
    const std::ptrdiff_t inner = shape[r - 1], oi = os[r - 1], ii = is[r - 1];
    std::ptrdiff_t idx[max_rank] = {};
    std::ptrdiff_t o_off = 0, i_off = 0;
    for (std::ptrdiff_t done = 0; done < n; done += inner) {
        if constexpr (Add) {
            if (oi == 1 && ii == 1)
                for (std::ptrdiff_t j = 0; j < inner; ++j) out.data[o_off + j] = add_value(out.data[o_off + j], value_cast<U>(in.data[i_off + j]));
            else
                for (std::ptrdiff_t j = 0; j < inner; ++j)
                    out.data[o_off + j * oi] = add_value(out.data[o_off + j * oi], value_cast<U>(in.data[i_off + j * ii]));
        } else if (oi == 1 && ii == 1) {
            for (std::ptrdiff_t j = 0; j < inner; ++j) out.data[o_off + j] = value_cast<U>(in.data[i_off + j]);
        } else {
            for (std::ptrdiff_t j = 0; j < inner; ++j) out.data[o_off + j * oi] = value_cast<U>(in.data[i_off + j * ii]);
        }
        for (int d = r - 2; d >= 0; --d) {
            if (++idx[d] < shape[d]) {
                o_off += os[d];
                i_off += is[d];
                break;
            }
            o_off -= (idx[d] - 1) * os[d];
            i_off -= (idx[d] - 1) * is[d];
            idx[d] = 0;
        }
    }
}

// Copies a strided view into contiguous row-major memory, converting each element to U.
template <class U, class T>
void copy_row_major(U* out, const strided<const T>& in) {
    strided_copy(strided<U>(out, in.shape, contiguous_strides(in.shape)), in);
}

}  // namespace detail
}  // namespace kiln
