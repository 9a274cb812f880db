#pragma once
// The CPU's running sums and products along one axis (cumsum, cumprod), forwards or backwards, over a strided
// operand into a contiguous result of its shape.
#include <cstddef>
#include <type_traits>

#include "../../expr/feed.hpp"
#include "../../ops/arithmetic.hpp"

namespace kiln {
namespace detail {

// out (row-major, x's shape) = the running sums (or products) of x along `axis`, from the end when `reverse`.
// U is the accumulator and result type; integers wrap, as the vocabulary's add and mul do. A floating sum starts
// from -0 (IEEE addition's exact identity), so the first running sum is the first element itself, -0 included.
template <class T, class U>
void scan_into(bool product, const strided<const T>& x, int axis, bool reverse, U* out) {
    const dims& s = x.shape;
    const std::ptrdiff_t len = s[axis];
    std::ptrdiff_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= s[d];
    for (int d = axis + 1; d < s.rank; ++d) inner *= s[d];
    if (len == 0 || outer == 0 || inner == 0) return;
    const std::ptrdiff_t step = x.strides[axis];
    for (std::ptrdiff_t o = 0; o < outer; ++o) {
        // The offset of (o, 0, 0) from its multi-index over the axes before `axis`.
        std::ptrdiff_t base = 0, rest = o;
        for (int d = axis - 1; d >= 0; --d) {
            base += (rest % s[d]) * x.strides[d];
            rest /= s[d];
        }
        for (std::ptrdiff_t i = 0; i < inner; ++i) {
            std::ptrdiff_t off = base;
            rest = i;
            for (int d = s.rank - 1; d > axis; --d) {
                off += (rest % s[d]) * x.strides[d];
                rest /= s[d];
            }
            U acc = product ? U(1) : std::is_floating_point_v<U> ? U(-0.0) : U(0);
            for (std::ptrdiff_t k = 0; k < len; ++k) {
                const std::ptrdiff_t at = reverse ? len - 1 - k : k;
                const U v = static_cast<U>(x.data[off + at * step]);
                acc = product ? static_cast<U>(ops::mul::apply(acc, v)) : static_cast<U>(ops::add::apply(acc, v));
                out[(o * len + at) * inner + i] = acc;
            }
        }
    }
}

}  // namespace detail
}  // namespace kiln
