#pragma once
// Evaluation on xsimd batches, and the loaders that feed a frame from memory.
#include <array>
#include <cstddef>
#include <tuple>

#include <xsimd/xsimd.hpp>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

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

// A non-temporal (streaming) store of an aligned batch: for outputs much larger than the caches it skips reading
// the destination lines before writing them, a third of the traffic of a two-input loop.
template <class T>
KILN_INLINE void stream_store(T* out, const xsimd::batch<T>& v) {
#if defined(__AVX__)
    if constexpr (sizeof(v) == 32 && std::is_same_v<T, float>) return _mm256_stream_ps(out, v);
    else if constexpr (sizeof(v) == 32 && std::is_same_v<T, double>) return _mm256_stream_pd(out, v);
#endif
#if defined(__SSE2__)
    if constexpr (sizeof(v) == 16 && std::is_same_v<T, float>) return _mm_stream_ps(out, v);
    else if constexpr (sizeof(v) == 16 && std::is_same_v<T, double>) return _mm_stream_pd(out, v);
#endif
    v.store_aligned(out);
}

inline void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

}  // namespace kiln::detail
