#pragma once
// A strided view of elements (data, shape, strides in elements): what every kernel reads and writes, in every
// layer from the ops' kernels up.
#include "shape.hpp"

namespace kiln {
namespace detail {

// What a loop needs of one operand: where it starts and how to step through it.
template <class T>
struct strided {
    // User-provided, so that value-initialization (as in std::tuple's default constructor) does not zero the
    // whole view first: that memset, and the store-forwarding stall after it, cost more than a small loop.
    strided() noexcept {}
    strided(T* d, const dims& s, const dims& st) noexcept : data(d), shape(s), strides(st) {}
    T* data = nullptr;
    dims shape;
    dims strides;
};

// Whether elements of `shape` at `strides` lie row-major and contiguous (size-1 dimensions may have any stride).
inline bool is_row_major(const dims& shape, const dims& strides) noexcept {
    std::ptrdiff_t expect = 1;
    for (int d = shape.rank - 1; d >= 0; --d) {
        if (shape[d] != 1 && strides[d] != expect) return false;
        expect *= shape[d];
    }
    return true;
}
// The same of a view.
template <class T>
bool is_row_major(const strided<T>& v) {
    return is_row_major(v.shape, v.strides);
}

}  // namespace detail
}  // namespace kiln
