#pragma once
// Evaluation on xsimd batches, and the loaders that feed a frame from memory.
#include <array>
#include <cstddef>
#include <tuple>

#include <xsimd/xsimd.hpp>

#include "../../graph/evaluate.hpp"

namespace kiln::detail {

template <class T>
struct simd_mode {
    template <class U>
    using value_t = xsimd::batch<U>;
    template <class U>
    KILN_INLINE static xsimd::batch<U> splat(U v) {
        return xsimd::batch<U>(v);
    }
};

// All leaves contiguous at position i.
template <class T, std::size_t N>
struct contiguous_loader {
    const std::array<const T*, N>& ptr;
    std::ptrdiff_t i;
    template <std::size_t K>
    KILN_INLINE xsimd::batch<T> get() const {
        return xsimd::load_unaligned(ptr[K] + i);
    }
};

// Leaves contiguous (stride 1) or repeated (stride 0) along the inner dimension.
template <class T, std::size_t N>
struct broadcast_loader {
    const std::array<const T*, N>& ptr;
    const std::array<std::ptrdiff_t, N>& stride;
    std::ptrdiff_t i;
    template <std::size_t K>
    KILN_INLINE xsimd::batch<T> get() const {
        return stride[K] ? xsimd::load_unaligned(ptr[K] + i) : xsimd::batch<T>(*ptr[K]);
    }
};

// Any element types and strides, one element at a time (Unit: every stride is 1, known to the compiler).
template <class Ptrs, std::size_t N, bool Unit>
struct strided_loader {
    const Ptrs& ptr;
    const std::array<std::ptrdiff_t, N>& stride;
    std::ptrdiff_t i;
    template <std::size_t K>
    KILN_INLINE auto get() const {
        return std::get<K>(ptr)[Unit ? i : i * stride[K]];
    }
};

// Stores a batch of root values, converting a mask to bool when a root is a comparison.
template <class T, class V>
KILN_INLINE void store_batch(T* out, const V& v) {
    v.store_unaligned(out);
}

}  // namespace kiln::detail
