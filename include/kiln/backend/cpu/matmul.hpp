#pragma once
// The CPU backend's one matrix product, used by graph mode's matmul, eager mode's (batched through it) and function
// mode's buffer plan. Small products (a training step's layers) run in a register-blocked xsimd kernel, which
// costs less than BLAS's packing and thread hand-off; larger ones in CBLAS (OpenBLAS) when it is found and both
// operands have a unit stride (transposed operands are passed as transposed, not copied); the rest, and integer
// and bool products, in a portable blocked kernel.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "../../core/blas.hpp"
#include "../../core/config.hpp"
#include "../device.hpp"

namespace kiln {
namespace detail {

namespace gemm_kernels {

// Products of at most this many multiply-adds (m * n * k) use the register-blocked kernel.
inline constexpr std::ptrdiff_t small_limit = 64 * 64 * 64;

// row[0 .. NB batches) = sum over p of a[p * acs] * b[p * brs + 0 .. NB batches).
template <int NB, class T>
KILN_INLINE void strip(T* row, const T* a, std::ptrdiff_t acs, const T* b, std::ptrdiff_t brs, std::ptrdiff_t k) {
    using batch = xsimd::batch<T>;
    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
    batch acc[NB];
    for (int q = 0; q < NB; ++q) acc[q] = batch(T(0));
    for (std::ptrdiff_t p = 0; p < k; ++p) {
        const batch va(a[p * acs]);
        const T* bp = b + p * brs;
        for (int q = 0; q < NB; ++q) acc[q] = xsimd::fma(va, batch::load_unaligned(bp + q * W), acc[q]);
    }
    for (int q = 0; q < NB; ++q) acc[q].store_unaligned(row + q * W);
}

// C[R rows, NB batches) (rows ldc apart) = sum over p of A[r, p] * B[p, 0 .. NB batches): R rows of A share each
// load of B, and R x NB independent accumulators keep both FMA units busy however short k is.
template <int R, int NB, class T>
KILN_INLINE void tile(T* c, std::ptrdiff_t ldc, const T* a, std::ptrdiff_t ars, std::ptrdiff_t acs, const T* b,
                      std::ptrdiff_t brs, std::ptrdiff_t k) {
    using batch = xsimd::batch<T>;
    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
    batch acc[R][NB];
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < NB; ++q) acc[r][q] = batch(T(0));
    for (std::ptrdiff_t p = 0; p < k; ++p) {
        const T* bp = b + p * brs;
        batch vb[NB];
        for (int q = 0; q < NB; ++q) vb[q] = batch::load_unaligned(bp + q * W);
        for (int r = 0; r < R; ++r) {
            const batch va(a[r * ars + p * acs]);
            for (int q = 0; q < NB; ++q) acc[r][q] = xsimd::fma(va, vb[q], acc[r][q]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int q = 0; q < NB; ++q) acc[r][q].store_unaligned(c + r * ldc + q * W);
}

// R rows of C (R rows of A from a) across all n columns, widest tiles first, the last columns one by one.
template <int R, class T>
KILN_INLINE void row_block(T* c, std::ptrdiff_t n, std::ptrdiff_t k, const T* a, std::ptrdiff_t ars, std::ptrdiff_t acs,
                           const T* b, std::ptrdiff_t brs) {
    using batch = xsimd::batch<T>;
    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
    // 32 vector registers with AVX-512, 16 otherwise: a 4 x 4 tile (16 accumulators) or 4 x 2.
    constexpr int wide = sizeof(batch) >= 64 ? 4 : 2;
    std::ptrdiff_t j = 0;
    if constexpr (R == 1) {
        for (; j + 8 * W <= n; j += 8 * W) tile<1, 8>(c + j, n, a, ars, acs, b + j, brs, k);
    }
    for (; j + wide * W <= n; j += wide * W) tile<R, wide>(c + j, n, a, ars, acs, b + j, brs, k);
    if constexpr (wide > 2) {
        for (; j + 2 * W <= n; j += 2 * W) tile<R, 2>(c + j, n, a, ars, acs, b + j, brs, k);
    }
    for (; j + W <= n; j += W) tile<R, 1>(c + j, n, a, ars, acs, b + j, brs, k);
    for (; j < n; ++j)
        for (int r = 0; r < R; ++r) {
            T acc = 0;
            for (std::ptrdiff_t p = 0; p < k; ++p) acc += a[r * ars + p * acs] * b[p * brs + j];
            c[r * n + j] = acc;
        }
}

// R contiguous rows of A (ars apart) dotted with a contiguous b into c[0 .. R). Each dot product takes one order
// whatever R is (two accumulators over chunks of 2 batches, their horizontal sum, then the last elements one by
// one), so equal rows give equal results wherever they fall; R > 1 shares each load of b.
template <int R, class T>
KILN_INLINE void dot_rows(T* c, const T* a, std::ptrdiff_t ars, const T* b, std::ptrdiff_t k) {
    using batch = xsimd::batch<T>;
    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
    batch s0[R], s1[R];
    for (int r = 0; r < R; ++r) s0[r] = s1[r] = batch(T(0));
    std::ptrdiff_t p = 0;
    for (; p + 2 * W <= k; p += 2 * W) {
        const batch b0 = batch::load_unaligned(b + p), b1 = batch::load_unaligned(b + p + W);
        for (int r = 0; r < R; ++r) {
            s0[r] = xsimd::fma(batch::load_unaligned(a + r * ars + p), b0, s0[r]);
            s1[r] = xsimd::fma(batch::load_unaligned(a + r * ars + p + W), b1, s1[r]);
        }
    }
    for (int r = 0; r < R; ++r) {
        T t = xsimd::hadd(s0[r] + s1[r]);
        for (std::ptrdiff_t q = p; q < k; ++q) t += a[r * ars + q] * b[q];
        c[r] = t;
    }
}

// The register-blocked kernel for float and double, by the operands' layouts.
template <class T>
void small(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const matrix_ref<T>& a, const matrix_ref<T>& b) {
    using batch = xsimd::batch<T>;
    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
    const std::ptrdiff_t ars = a.rs, acs = a.cs, brs = b.rs, bcs = b.cs;
    if (bcs == 1 && n > 1) {
        // Rows of B are contiguous: a tile of C (four rows, vectorized along them) stays in registers while it
        // accumulates A[rows, p] * B[p, tile] over p.
        const T* ap = a.data;
        std::ptrdiff_t rows = m;
        for (; rows >= 4; rows -= 4, ap += 4 * ars, c += 4 * n) row_block<4>(c, n, k, ap, ars, acs, b.data, brs);
        for (; rows > 0; --rows, ap += ars, c += n) row_block<1>(c, n, k, ap, ars, acs, b.data, brs);
    } else if (ars == 1 && n == 1) {
        // A matrix times a vector with A's columns contiguous (a transposed operand): strips of C stay in
        // registers while they accumulate b[p] * A[strip, p] over p.
        std::ptrdiff_t i = 0;
        for (; i + 8 * W <= m; i += 8 * W) strip<8>(c + i, b.data, brs, a.data + i, acs, k);
        for (; i + 4 * W <= m; i += 4 * W) strip<4>(c + i, b.data, brs, a.data + i, acs, k);
        for (; i + 2 * W <= m; i += 2 * W) strip<2>(c + i, b.data, brs, a.data + i, acs, k);
        for (; i + W <= m; i += W) strip<1>(c + i, b.data, brs, a.data + i, acs, k);
        for (; i < m; ++i) {
            T acc = 0;
            for (std::ptrdiff_t p = 0; p < k; ++p) acc += a.data[i + p * acs] * b.data[p * brs];
            c[i] = acc;
        }
    } else if (ars == 1 && n <= 4) {
        // Columns of A are contiguous and C is narrow: C[:, j] accumulates B[p, j] * A[:, p], vectorized along the
        // column when C is one column.
        for (std::ptrdiff_t j = 0; j < n; ++j) {
            for (std::ptrdiff_t i = 0; i < m; ++i) c[i * n + j] = T(0);
            for (std::ptrdiff_t p = 0; p < k; ++p) {
                const T bv = b.data[p * brs + j * bcs];
                const T* acol = a.data + p * acs;
                std::ptrdiff_t i = 0;
                if (n == 1) {
                    const batch vb(bv);
                    for (; i + W <= m; i += W)
                        xsimd::fma(vb, batch::load_unaligned(acol + i), batch::load_unaligned(c + i)).store_unaligned(c + i);
                }
                for (; i < m; ++i) c[i * n + j] += bv * acol[i];
            }
        }
    } else {
        // Dot products of rows of A with columns of B. With both contiguous, every dot product takes one order
        // (dot_rows), and a matrix times a vector takes four rows at a time, sharing each load of the vector.
        if (acs == 1 && brs == 1) {
            std::ptrdiff_t i = 0;
            if (n == 1)
                for (; i + 4 <= m; i += 4) dot_rows<4>(c + i, a.data + i * ars, ars, b.data, k);
            for (; i < m; ++i)
                for (std::ptrdiff_t j = 0; j < n; ++j) dot_rows<1>(c + i * n + j, a.data + i * ars, ars, b.data + j * bcs, k);
            return;
        }
        for (std::ptrdiff_t i = 0; i < m; ++i)
            for (std::ptrdiff_t j = 0; j < n; ++j) {
                const T* ap = a.data + i * ars;
                const T* bp = b.data + j * bcs;
                T s = 0;
                for (std::ptrdiff_t p = 0; p < k; ++p) s += ap[p * acs] * bp[p * brs];
                c[i * n + j] = s;
            }
    }
}

// The portable kernel (any layout, any dtype): a row of C accumulates while a block of B's rows stays in cache.
// Bool products accumulate in int64 (then any nonzero sum is true).
template <class T>
void portable(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, matrix_ref<T> a, matrix_ref<T> b) {
    // Signed integers accumulate in std::uint64_t: a product or sum that overflows wraps, as NumPy's does, where
    // signed arithmetic would be undefined (the result, cast back to T, is the same modulo 2^bits).
    using Acc = std::conditional_t<std::is_same_v<T, bool>, std::int64_t,
                                   std::conditional_t<std::is_integral_v<T> && std::is_signed_v<T>, std::uint64_t, T>>;
    std::vector<Acc> row(static_cast<std::size_t>(n));
    constexpr std::ptrdiff_t kb = 256;
    for (std::ptrdiff_t i = 0; i < m; ++i) {
        std::fill(row.begin(), row.end(), Acc(0));
        for (std::ptrdiff_t p0 = 0; p0 < k; p0 += kb)
            for (std::ptrdiff_t p = p0; p < std::min(k, p0 + kb); ++p) {
                const Acc av = static_cast<Acc>(a.data[i * a.rs + p * a.cs]);
                const T* brow = b.data + p * b.rs;
                for (std::ptrdiff_t j = 0; j < n; ++j) row[static_cast<std::size_t>(j)] += av * static_cast<Acc>(brow[j * b.cs]);
            }
        for (std::ptrdiff_t j = 0; j < n; ++j) c[i * n + j] = static_cast<T>(row[static_cast<std::size_t>(j)]);
    }
}

}  // namespace gemm_kernels

// C (m x n, row-major, leading dimension n) = A (m x k) * B (k x n). (The operands by reference: built field by
// field at the call, a copy passed by value was read back whole before its stores were done, a stall per call.)
template <class T>
void gemm(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const matrix_ref<T>& a, const matrix_ref<T>& b) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        std::fill(c, c + m * n, T(0));
        return;
    }
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (m * n * k <= gemm_kernels::small_limit) return gemm_kernels::small(c, m, n, k, a, b);
#if KILN_HAVE_CBLAS
        // A matrix is usable in place when one of its strides is 1: then it is row-major or transposed.
        auto layout = [](matrix_ref<T> v, std::ptrdiff_t rows, std::ptrdiff_t cols, bool& trans, std::ptrdiff_t& ld) {
            if ((v.cs == 1 || cols == 1) && v.rs >= std::max<std::ptrdiff_t>(cols, 1)) return trans = false, ld = v.rs, true;
            if ((v.rs == 1 || rows == 1) && v.cs >= std::max<std::ptrdiff_t>(rows, 1)) return trans = true, ld = v.cs, true;
            return false;
        };
        bool ta = false, tb = false;
        std::ptrdiff_t lda = 0, ldb = 0;
        if (layout(a, m, k, ta, lda) && layout(b, k, n, tb, ldb)) {
            const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
            const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
            const int LA = static_cast<int>(std::max<std::ptrdiff_t>(lda, 1)), LB = static_cast<int>(std::max<std::ptrdiff_t>(ldb, 1));
            if constexpr (std::is_same_v<T, float>)
                cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, a.data, LA, b.data, LB, 0.0f, c, N);
            else
                cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, 1.0, a.data, LA, b.data, LB, 0.0, c, N);
            return;
        }
#endif
    }
    gemm_kernels::portable(c, m, n, k, a, b);
}

}  // namespace detail
}  // namespace kiln
