#pragma once
// matmul of two graph-mode matrices: a register-blocked kernel for small products, OpenBLAS (when found) for large
// ones, with transposed views passed to BLAS as transposed.
#include "../../core/blas.hpp"

#include <xsimd/xsimd.hpp>

#include "views.hpp"

namespace kiln {
namespace detail {

template <class SA, class SB>
struct matmul_inner_dimensions_differ {
    static_assert(sizeof(SA) == 0,
                  "kiln::matmul: the static shapes of the operands do not fit: the columns of A must equal the rows "
                  "of B (see SA and SB in 'matmul_inner_dimensions_differ<SA, SB>' above).");
    using type = dynamic;
};
template <class SA, class SB>
struct graph_matmul_takes_matrices {
    static_assert(sizeof(SA) == 0,
                  "kiln::matmul: in graph mode both operands must be matrices (rank 2; see SA and SB above); "
                  "reshape vectors with kiln::reshape<1, n>(x).");
    using type = dynamic;
};

template <class SA, class SB>
struct matmul_static_shape {
    template <class S>
    struct as_matrix {
        using type = S;
    };
    template <class S>
        requires std::is_same_v<S, dynamic>
    struct as_matrix<S> {
        using type = shape<dyn, dyn>;
    };
    template <class A, class B>
    struct rule {
        using type = typename graph_matmul_takes_matrices<A, B>::type;
    };
    template <std::ptrdiff_t M, std::ptrdiff_t K, std::ptrdiff_t K2, std::ptrdiff_t N>
    struct rule<shape<M, K>, shape<K2, N>> {
        using type = typename std::conditional_t<(K == dyn || K2 == dyn || K == K2), std::type_identity<shape<M, N>>,
                                                 matmul_inner_dimensions_differ<shape<M, K>, shape<K2, N>>>::type;
    };
    using type = typename rule<typename as_matrix<SA>::type, typename as_matrix<SB>::type>::type;
};

// Whether two static shapes can be multiplied (checked first at kiln::matmul, so that its sentence opens the
// diagnostic instead of closing a chain of instantiations).
template <class SA, class SB>
inline constexpr bool matmul_fits = true;
template <std::ptrdiff_t M, std::ptrdiff_t K, std::ptrdiff_t K2, std::ptrdiff_t N>
inline constexpr bool matmul_fits<shape<M, K>, shape<K2, N>> = K == dyn || K2 == dyn || K == K2;
template <class S>
inline constexpr bool matrix_shape = true;  // dynamic: checked at run time
template <std::ptrdiff_t... D>
inline constexpr bool matrix_shape<shape<D...>> = sizeof...(D) == 2;
template <class SA, class SB>
inline constexpr bool matmul_matrices = matrix_shape<SA> && matrix_shape<SB>;


}  // namespace detail

namespace ops {

// The matrix product of two matrices: OpenBLAS when found (transposed views are passed as transposed), a portable
// kernel otherwise.
struct matmul {
    static constexpr std::string_view name = "matmul";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SA, class SB>
    using static_shape = typename detail::matmul_static_shape<SA, SB>::type;

    static dims shape(const dims& a, const dims& b) {
        if (a.rank != 2 || b.rank != 2)
            throw shape_error("kiln: shape_error in 'matmul': graph mode multiplies matrices, got shapes " +
                              to_string(a) + " and " + to_string(b));
        if (a[1] != b[0])
            throw shape_error("kiln: shape_error in 'matmul': cannot multiply " + to_string(a) + " by " +
                              to_string(b) + ": the inner dimensions " + std::to_string(a[1]) + " and " +
                              std::to_string(b[0]) + " differ");
        return dims{a[0], b[1]};
    }

    template <class T>
    static void compute(T* c, const dims& s, const detail::strided<const T>& a, const detail::strided<const T>& b) {
        const std::ptrdiff_t m = s[0], n = s[1], k = a.shape[1];
        if (m == 0 || n == 0) return;
        if (k == 0) {
            std::fill(c, c + m * n, T(0));
            return;
        }
        // Small products (a training step's layers) cost less in a direct kernel than in BLAS's packing and
        // thread hand-off.
        if (m * n * k <= small_gemm_limit) return small_gemm(c, m, n, k, a, b);
#if KILN_HAVE_CBLAS
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            // A matrix is usable in place when one of its strides is 1: then it is row-major or transposed.
            auto layout = [](const detail::strided<const T>& v, bool& trans, std::ptrdiff_t& ld) {
                const std::ptrdiff_t rows = v.shape[0], cols = v.shape[1], rs = v.strides[0], cs = v.strides[1];
                if ((cs == 1 || cols == 1) && rs >= std::max<std::ptrdiff_t>(cols, 1)) return trans = false, ld = rs, true;
                if ((rs == 1 || rows == 1) && cs >= std::max<std::ptrdiff_t>(rows, 1)) return trans = true, ld = cs, true;
                return false;
            };
            bool ta = false, tb = false;
            std::ptrdiff_t lda = 0, ldb = 0;
            if (layout(a, ta, lda) && layout(b, tb, ldb)) {
                const auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
                const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
                if constexpr (std::is_same_v<T, float>)
                    cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, a.data, static_cast<int>(lda), b.data,
                                static_cast<int>(ldb), 0.0f, c, N);
                else
                    cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, 1.0, a.data, static_cast<int>(lda), b.data,
                                static_cast<int>(ldb), 0.0, c, N);
                return;
            }
        }
#endif
        // Portable kernel: a row of C accumulates while rows of B stream through.
        for (std::ptrdiff_t i = 0; i < m; ++i) {
            T* row = c + i * n;
            std::fill(row, row + n, T(0));
            for (std::ptrdiff_t p = 0; p < k; ++p) {
                const T av = a.data[i * a.strides[0] + p * a.strides[1]];
                const T* brow = b.data + p * b.strides[0];
                const std::ptrdiff_t bs = b.strides[1];
                for (std::ptrdiff_t j = 0; j < n; ++j) row[j] += av * brow[j * bs];
            }
        }
    }

    static constexpr std::ptrdiff_t small_gemm_limit = 64 * 64 * 64;

    // row[0 .. NB batches) = sum over p of a[p * acs] * b[p * brs + 0 .. NB batches).
    template <int NB, class T>
    KILN_INLINE static void strip(T* row, const T* a, std::ptrdiff_t acs, const T* b, std::ptrdiff_t brs, std::ptrdiff_t k) {
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

    template <class T>
    static void small_gemm(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const detail::strided<const T>& a,
                           const detail::strided<const T>& b) {
        const std::ptrdiff_t ars = a.strides[0], acs = a.strides[1], brs = b.strides[0], bcs = b.strides[1];
        if (bcs == 1 && n > 1) {
            // Rows of B are contiguous: a strip of a row of C stays in registers while it accumulates
            // a[i, p] * B[p, strip] over p, vectorized along the row.
            for (std::ptrdiff_t i = 0; i < m; ++i) {
                T* row = c + i * n;
                const T* arow = a.data + i * ars;
                std::ptrdiff_t j = 0;
                if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                    using batch = xsimd::batch<T>;
                    constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
                    // Eight accumulators hide the FMA latency; narrower strips finish the row.
                    for (; j + 8 * W <= n; j += 8 * W) strip<8>(row + j, arow, acs, b.data + j, brs, k);
                    for (; j + 2 * W <= n; j += 2 * W) strip<2>(row + j, arow, acs, b.data + j, brs, k);
                    for (; j + W <= n; j += W) strip<1>(row + j, arow, acs, b.data + j, brs, k);
                }
                for (; j < n; ++j) {
                    T acc = 0;
                    for (std::ptrdiff_t p = 0; p < k; ++p) acc += arow[p * acs] * b.data[p * brs + j];
                    row[j] = acc;
                }
            }
        } else if (ars == 1 && n == 1) {
            // A matrix times a vector with A's columns contiguous (a transposed operand): strips of C stay in
            // registers while they accumulate b[p] * A[strip, p] over p.
            std::ptrdiff_t i = 0;
            if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(xsimd::batch<T>::size);
                for (; i + 8 * W <= m; i += 8 * W) strip<8>(c + i, b.data, brs, a.data + i, acs, k);
                for (; i + 2 * W <= m; i += 2 * W) strip<2>(c + i, b.data, brs, a.data + i, acs, k);
                for (; i + W <= m; i += W) strip<1>(c + i, b.data, brs, a.data + i, acs, k);
            }
            for (; i < m; ++i) {
                T acc = 0;
                for (std::ptrdiff_t p = 0; p < k; ++p) acc += a.data[i + p * acs] * b.data[p * brs];
                c[i] = acc;
            }
        } else if (ars == 1 && n <= 4) {
            // Columns of A are contiguous and C is narrow: C[:, j] accumulates B[p, j] * A[:, p], vectorized along
            // the column.
            for (std::ptrdiff_t j = 0; j < n; ++j) {
                for (std::ptrdiff_t i = 0; i < m; ++i) c[i * n + j] = T(0);
                for (std::ptrdiff_t p = 0; p < k; ++p) {
                    const T bv = b.data[p * brs + j * bcs];
                    const T* acol = a.data + p * acs;
                    std::ptrdiff_t i = 0;
                    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                        if (n == 1) {
                            using batch = xsimd::batch<T>;
                            constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
                            const batch vb(bv);
                            for (; i + W <= m; i += W)
                                xsimd::fma(vb, batch::load_unaligned(acol + i), batch::load_unaligned(c + i)).store_unaligned(c + i);
                        }
                    }
                    for (; i < m; ++i) c[i * n + j] += bv * acol[i];
                }
            }
        } else {
            // Dot products of rows of A with columns of B.
            for (std::ptrdiff_t i = 0; i < m; ++i)
                for (std::ptrdiff_t j = 0; j < n; ++j) {
                    const T* ap = a.data + i * ars;
                    const T* bp = b.data + j * bcs;
                    std::ptrdiff_t p = 0;
                    T s = 0;
                    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                        if (acs == 1 && brs == 1) {
                            using batch = xsimd::batch<T>;
                            constexpr std::ptrdiff_t W = static_cast<std::ptrdiff_t>(batch::size);
                            batch s0(T(0)), s1(T(0));
                            for (; p + 2 * W <= k; p += 2 * W) {
                                s0 = xsimd::fma(batch::load_unaligned(ap + p), batch::load_unaligned(bp + p), s0);
                                s1 = xsimd::fma(batch::load_unaligned(ap + p + W), batch::load_unaligned(bp + p + W), s1);
                            }
                            s = xsimd::hadd(s0 + s1);
                        }
                    }
                    for (; p < k; ++p) s += ap[p * acs] * bp[p * brs];
                    c[i * n + j] = s;
                }
        }
    }

    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y& y, const G& g);
};

}  // namespace ops

// The matrix product of two graph-mode matrices.
template <class A, class B>
    requires(is_graph_v<A> && is_graph_v<B>)
constexpr auto matmul(const A& a, const B& b) {
    using SA = detail::shape_of_t<A>;
    using SB = detail::shape_of_t<B>;
    if constexpr (!detail::matmul_matrices<SA, SB>) {
        static_assert(detail::matmul_matrices<SA, SB>,
                      "kiln::matmul: in graph mode both operands must be matrices (rank 2; the shapes are SA and SB "
                      "on the line above); reshape vectors with kiln::reshape<1, n>(x).");
        return 0;
    } else if constexpr (!detail::matmul_fits<SA, SB>) {
        static_assert(detail::matmul_fits<SA, SB>,
                      "kiln::matmul: the static shapes of the operands do not fit: the columns of A must equal the "
                      "rows of B (the note below names both shapes).");
        return 0;
    } else {
        return detail::structural<ops::matmul>(a, b);
    }
}
namespace ops {
template <class A, class B, class Y, class G>
constexpr auto matmul::gradient(const A& a, const B& b, const Y& y, const G& g) {
    const auto gy = detail::like(g, y);
    return detail::grads(detail::structural<matmul>(gy, kiln::transpose(b)),
                         detail::structural<matmul>(kiln::transpose(a), gy));
}
}  // namespace ops

}  // namespace kiln
