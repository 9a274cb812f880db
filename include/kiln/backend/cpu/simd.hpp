#pragma once
// Evaluation on xsimd batches, and the loaders that feed a frame from memory.
#include <array>
#include <cstddef>
#include <tuple>

#include <xsimd/xsimd.hpp>
// The streaming stores below. <immintrin.h> declares every x86 extension (about 58,000 lines, a tenth of
// <kiln/kiln.hpp>'s compile time); without AVX enabled only SSE2's header is needed (xsimd includes <immintrin.h>
// itself when AVX is on).
#if defined(__AVX__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "../../expr/evaluate.hpp"

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

// One load of a leaf's batch, kept in a register. Without the empty asm, GCC folds a leaf's load into every
// instruction that uses it (x86 arithmetic takes a memory operand), so a leaf read by three nodes is loaded three
// times; where loads are the bottleneck (data in L1) that is a third more time for the chain of issue #2.
template <class T>
KILN_INLINE xsimd::batch<T> load_pinned(const T* p) {
    auto v = xsimd::load_unaligned(p);
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
    auto r = static_cast<typename xsimd::batch<T>::register_type>(v);
#if defined(__AVX512F__)
    asm("" : "+v"(r));
#else
    asm("" : "+x"(r));
#endif
    return xsimd::batch<T>(r);
#else
    return v;
#endif
}

// All leaves contiguous at position i.
template <class T, std::size_t N>
struct contiguous_loader {
    const std::array<const T*, N>& ptr;
    std::ptrdiff_t i;
    template <std::size_t K>
    KILN_INLINE xsimd::batch<T> get() const {
        return load_pinned(ptr[K] + i);
    }
};

// Every leaf's batch at one position, loaded ahead of use: the fused loop loads the next batch's leaves before it
// stores the current batch, so that no load waits behind a store to an address that matches it in the low 12
// bits (4 KiB aliasing, common when arrays are allocated back to back).
template <class T, std::size_t N>
struct loaded_leaves {
    std::array<xsimd::batch<T>, N> v;
    KILN_INLINE static loaded_leaves load(const std::array<const T*, N>& ptr, std::ptrdiff_t i) {
        loaded_leaves r;
        [&]<std::size_t... K>(std::index_sequence<K...>) KILN_LAMBDA_INLINE {
            ((r.v[K] = load_pinned(ptr[K] + i)), ...);
        }(std::make_index_sequence<N>{});
        return r;
    }
    template <std::size_t K>
    KILN_INLINE xsimd::batch<T> get() const {
        return v[K];
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
        return stride[K] ? load_pinned(ptr[K] + i) : xsimd::batch<T>(*ptr[K]);
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
