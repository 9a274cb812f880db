#pragma once
// matmul, one mode-neutral op: NumPy's matrix product (1-D operands promoted to a row on the left and a column on
// the right, leading dimensions broadcast as batches). Its shape rule (static and run-time), its kernel (the
// device's gemm, once per batch) and its gradient rule serve graph mode (graph/structural/matmul.hpp, on
// matrices), eager mode and the tape (eager/linalg.hpp, eager/tape.hpp) and traced functions. See
// ops/structural.hpp for the protocol.
#include <array>
#include <string>
#include <type_traits>

#include "../core/shape.hpp"
#include "structural.hpp"

namespace kiln {
namespace detail {

// One matrix operand of a product: element (i, j) is data[i * rs + j * cs].
template <class T>
struct matrix_ref {
    const T* data;
    std::ptrdiff_t rs, cs;
};

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

// The static shape rule on matrices (graph mode's types).
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

// The shapes of a product: the broadcast batch, the matrix sizes, and the result (NumPy's: a promoted vector's
// dimension removed).
struct matmul_shape {
    dims batch;
    std::ptrdiff_t m = 0, n = 0, k = 0;
    dims result;
};

}  // namespace detail

namespace ops {

struct matmul {
    static constexpr std::string_view name = "matmul";
    static constexpr int arity = 2;

    template <class SA, class SB>
    using static_shape = typename detail::matmul_static_shape<SA, SB>::type;

    // The shape rule: one sentence per mistake, the same in every mode.
    static detail::matmul_shape shape(const dims& a, const dims& b) {
        // (The sentence's head is built only on an error: a graph step calls this rule and allocates nothing.)
        auto head = [] { return detail::error_prefix("shape_error", name); };
        if (a.rank == 0 || b.rank == 0)
            throw shape_error(head() + "operands must have at least one dimension, got shapes " + to_string(a) + " and " +
                              to_string(b));
        detail::matmul_shape s;
        s.m = a.rank == 1 ? 1 : a[a.rank - 2];
        s.k = a[a.rank - 1];
        const std::ptrdiff_t k2 = b.rank == 1 ? b[0] : b[b.rank - 2];
        s.n = b.rank == 1 ? 1 : b[b.rank - 1];
        if (s.k != k2)
            throw shape_error(head() + "cannot multiply " + to_string(a) + " by " + to_string(b) + ": the inner dimensions " +
                              std::to_string(s.k) + " and " + std::to_string(k2) + " differ");
        // Batch dimensions broadcast (NumPy's rule, aligned at the right).
        const int ba = a.rank > 2 ? a.rank - 2 : 0, bb = b.rank > 2 ? b.rank - 2 : 0;
        s.batch.rank = ba > bb ? ba : bb;
        for (int i = 0; i < s.batch.rank; ++i) {
            const int ia = i - (s.batch.rank - ba), ib = i - (s.batch.rank - bb);
            const std::ptrdiff_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
            if (ea != eb && ea != 1 && eb != 1)
                throw shape_error(head() + "batch dimensions do not broadcast: " + to_string(a) + " and " + to_string(b));
            s.batch[i] = ea == 1 ? eb : ea;
        }
        s.result = s.batch;
        if (a.rank > 1) s.result[s.result.rank++] = s.m;
        if (b.rank > 1) s.result[s.result.rank++] = s.n;
        return s;
    }
    static dims result_shape(const dims& a, const dims& b) { return shape(a, b).result; }

    // The kernel: the device's gemm for each batch, the operands read through their strides (a broadcast batch
    // has stride 0), into a row-major result.
    template <class Device, class T, class X>
    static void compute(T* c, const detail::matmul_shape& s, const X& a, const X& b) {
        const int ra = a.shape.rank, rb = b.shape.rank;
        // The operands as matrices: a vector is a contiguous row (left) or column (right).
        const std::ptrdiff_t acs = a.strides[ra - 1], ars = ra == 1 ? acs * s.k : a.strides[ra - 2];
        const std::ptrdiff_t brs = rb == 1 ? b.strides[0] : b.strides[rb - 2], bcs = rb == 1 ? 1 : b.strides[rb - 1];
        if (s.batch.rank == 0) {  // two matrices (or vectors): one product
            Device::gemm(c, s.m, s.n, s.k, detail::matrix_ref<T>{a.data, ars, acs}, detail::matrix_ref<T>{b.data, brs, bcs});
            return;
        }
        const int br = s.batch.rank, ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
        std::array<std::ptrdiff_t, max_rank> sa{}, sb{};
        for (int i = 0; i < br; ++i) {
            const int ia = i - (br - ba), ib = i - (br - bb);
            sa[static_cast<std::size_t>(i)] = ia >= 0 && a.shape[ia] != 1 ? a.strides[ia] : 0;
            sb[static_cast<std::size_t>(i)] = ib >= 0 && b.shape[ib] != 1 ? b.strides[ib] : 0;
        }
        const std::ptrdiff_t batches = s.batch.numel();
        // A device with strided-batched products (cuBLAS) takes the batches in one call when each operand's batch
        // offsets are one stride times the batch's position (every batch layout of one contiguous tensor, and a
        // matrix broadcast over all batches, whose stride is 0).
        if constexpr (requires { Device::gemm_strided_batched(c, batches, s.m, s.n, s.k, detail::matrix_ref<T>{}, batches,
                                                              detail::matrix_ref<T>{}, batches); }) {
            auto linear = [&](const std::array<std::ptrdiff_t, max_rank>& st, std::ptrdiff_t& stride) {
                std::ptrdiff_t count = 1;  // batches inside axis d
                bool found = false;
                for (int d = br - 1; d >= 0; --d) {
                    if (s.batch[d] == 1) continue;
                    const std::ptrdiff_t sd = st[static_cast<std::size_t>(d)];
                    if (!found) stride = sd, found = true;
                    else if (sd != stride * count) return false;
                    count *= s.batch[d];
                }
                return true;
            };
            std::ptrdiff_t la = 0, lb = 0;
            if (batches > 1 && linear(sa, la) && linear(sb, lb) &&
                Device::gemm_strided_batched(c, batches, s.m, s.n, s.k, detail::matrix_ref<T>{a.data, ars, acs}, la,
                                             detail::matrix_ref<T>{b.data, brs, bcs}, lb))
                return;
        }
        for (std::ptrdiff_t i = 0; i < batches; ++i) {
            std::ptrdiff_t rest = i, oa = 0, ob = 0;
            for (int d = br - 1; d >= 0; --d) {
                const std::ptrdiff_t idx = rest % s.batch[d];
                rest /= s.batch[d];
                oa += idx * sa[static_cast<std::size_t>(d)];
                ob += idx * sb[static_cast<std::size_t>(d)];
            }
            Device::gemm(c + i * s.m * s.n, s.m, s.n, s.k, detail::matrix_ref<T>{a.data + oa, ars, acs},
                         detail::matrix_ref<T>{b.data + ob, brs, bcs});
        }
    }

    // The gradient of operand I, in every mode, for operands of rank 2 or more (eager mode's tape promotes
    // vectors first): gA = g B^T and gB = A^T g, each summed over the batches its operand was broadcast along.
    template <int I, class A, class B, class Y, class G>
    static constexpr auto operand_gradient(const A& a, const B& b, const Y& y, const G& g) {
        using F = structural_fns<A>;
        const auto gy = F::like(g, y);
        if constexpr (I == 0) return F::sum_batches_to(F::matmul(gy, F::matrix_transpose(b)), a);
        else return F::sum_batches_to(F::matmul(F::matrix_transpose(a), gy), b);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y& y, const G& g) {
        return detail::grads(operand_gradient<0>(a, b, y, g), operand_gradient<1>(a, b, y, g));
    }
};

}  // namespace ops
}  // namespace kiln
