#pragma once
// Structural ops of graph mode: reductions (sum, mean, max, min over axes), matmul, transpose, reshape and
// broadcast_to, and the ops that gradients need (broadcast_like, sum_to, expand, reshape_as, count).
//
// They are not elementwise, so the planner (graph/plan.hpp) cuts fusion groups at them: a structural op's result
// is materialized once into workspace, or, for a view (transpose, reshape of contiguous data, expand,
// broadcast_to), described by new strides over its operand without a copy.
//
// A structural op states, besides a name and a gradient rule:
//   structural                 the marker;
//   static_shape<S...>         its rule on static shapes (a static_assert names both shapes when they cannot fit);
//   shape(dims...)             its rule on run-time shapes (throws kiln::shape_error naming the op and the shapes);
//   compute<T>(out, shape, in...) writing a contiguous result, and/or
//   try_view<T>(view, in...)   describing the result as a view of its operand (false when it cannot).
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#if defined(KILN_HAVE_CBLAS)
#include <cblas.h>
#endif

#include <xsimd/xsimd.hpp>

#include "build.hpp"
#include "feed.hpp"

namespace kiln {

// kiln::sum<1>(x, kiln::keep_dims): keep the reduced axes with extent 1.
struct keep_dims_t {};
inline constexpr keep_dims_t keep_dims{};

namespace detail {

template <class S>
inline constexpr bool fully_static_v = false;
template <std::ptrdiff_t... D>
inline constexpr bool fully_static_v<shape<D...>> = ((D != dyn) && ...);

template <class S>
struct shape_dims_of;
template <std::ptrdiff_t... D>
struct shape_dims_of<shape<D...>> {
    static dims get() { return dims{D...}; }
};

template <class T>
bool is_row_major(const strided<T>& v) {
    std::ptrdiff_t expect = 1;
    for (int d = v.shape.rank - 1; d >= 0; --d) {
        if (v.shape[d] != 1 && v.strides[d] != expect) return false;
        expect *= v.shape[d];
    }
    return true;
}

// A view of `a` repeated to `shape` (NumPy broadcasting): zero strides along the repeated dimensions.
template <class T>
strided<T> broadcast_view(const strided<T>& a, const dims& shape) {
    strided<T> out(a.data, shape, dims{});
    out.strides.rank = shape.rank;
    for (int d = 0; d < shape.rank; ++d) {
        const int da = d - (shape.rank - a.shape.rank);
        out.strides[d] = (da >= 0 && a.shape[da] != 1) ? a.strides[da] : 0;
    }
    return out;
}

// Copies a strided view into contiguous row-major memory.
template <class T>
void copy_row_major(T* out, const strided<const T>& in) {
    const std::ptrdiff_t n = in.shape.size();
    if (n == 0) return;
    const int r = in.shape.rank;
    if (r == 0) {
        *out = *in.data;
        return;
    }
    std::ptrdiff_t idx[max_rank] = {};
    std::ptrdiff_t off = 0;
    const std::ptrdiff_t inner = in.shape[r - 1], is = in.strides[r - 1];
    for (std::ptrdiff_t done = 0; done < n; done += inner) {
        for (std::ptrdiff_t j = 0; j < inner; ++j) *out++ = in.data[off + j * is];
        for (int d = r - 2; d >= 0; --d) {
            if (++idx[d] < in.shape[d]) {
                off += in.strides[d];
                break;
            }
            off -= (idx[d] - 1) * in.strides[d];
            idx[d] = 0;
        }
    }
}

// Scratch memory that grows and is then reused: a reduction's accumulators, a copy for BLAS.
template <class T>
T* scratch(std::size_t n) {
    thread_local std::vector<T> buf;
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

// Folds x into acc (laid out row-major over `keep`, x's shape with reduced dimensions set to 1): f(acc, value).
template <class T, class Acc, class F>
void reduce_strided(const strided<const T>& x, const dims& keep, Acc* acc, F f) {
    const std::ptrdiff_t n = x.shape.size();
    if (n == 0) return;
    const int r = x.shape.rank;
    if (r == 0) {
        f(acc[0], x.data[0]);
        return;
    }
    dims os = contiguous_strides(keep);
    for (int d = 0; d < r; ++d)
        if (keep[d] == 1) os[d] = 0;
    std::ptrdiff_t idx[max_rank] = {};
    std::ptrdiff_t in_off = 0, out_off = 0;
    const std::ptrdiff_t inner = x.shape[r - 1], is = x.strides[r - 1], ios = os[r - 1];
    for (std::ptrdiff_t done = 0; done < n; done += inner) {
        if (ios == 0) {
            Acc& a = acc[out_off];
            for (std::ptrdiff_t j = 0; j < inner; ++j) f(a, x.data[in_off + j * is]);
        } else {
            for (std::ptrdiff_t j = 0; j < inner; ++j) f(acc[out_off + j * ios], x.data[in_off + j * is]);
        }
        for (int d = r - 2; d >= 0; --d) {
            if (++idx[d] < x.shape[d]) {
                in_off += x.strides[d];
                out_off += os[d];
                break;
            }
            in_off -= (idx[d] - 1) * x.strides[d];
            out_off -= (idx[d] - 1) * os[d];
            idx[d] = 0;
        }
    }
}

// The reduced axes of a rank-`rank` operand as a mask; `ok` is false when an axis is out of range.
struct axis_mask {
    std::array<bool, max_rank> reduced{};
    bool ok = true;
    int bad = 0;
};
template <int... Axes>
constexpr axis_mask make_axis_mask(int rank) {
    axis_mask m;
    if constexpr (sizeof...(Axes) == 0) {
        for (int i = 0; i < rank && i < max_rank; ++i) m.reduced[i] = true;
    } else {
        for (int a : {Axes...}) {
            const int n = a < 0 ? a + rank : a;
            if (n < 0 || n >= rank) {
                m.ok = false;
                m.bad = a;
            } else {
                m.reduced[n] = true;
            }
        }
    }
    return m;
}

template <class S, int... Axes>
struct axis_out_of_range_for_static_shape {
    static_assert(sizeof(S) == 0,
                  "kiln: a reduction axis is out of range for the operand's static shape (see S and Axes above).");
    using type = dynamic;
};

template <class S, bool Keep, int... Axes>
struct reduced_static_shape {
    using type = dynamic;
};
template <std::ptrdiff_t... D, bool Keep, int... Axes>
struct reduced_static_shape<shape<D...>, Keep, Axes...> {
    static constexpr int r = sizeof...(D);
    static constexpr axis_mask m = make_axis_mask<Axes...>(r);
    static constexpr std::array<std::ptrdiff_t, (r > 0 ? r : 1)> in{D...};
    static constexpr int out_rank = [] {
        int k = 0;
        for (int i = 0; i < r; ++i) k += (Keep || !m.reduced[i]) ? 1 : 0;
        return k;
    }();
    static constexpr std::array<std::ptrdiff_t, (out_rank > 0 ? out_rank : 1)> out = [] {
        std::array<std::ptrdiff_t, (out_rank > 0 ? out_rank : 1)> o{};
        int k = 0;
        for (int i = 0; i < r; ++i) {
            if (m.reduced[i]) {
                if (Keep) o[k++] = 1;
            } else {
                o[k++] = in[i];
            }
        }
        return o;
    }();
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<out[I]...>;
    using type = typename std::conditional_t<m.ok, std::type_identity<decltype(make(std::make_index_sequence<out_rank>{}))>,
                                             axis_out_of_range_for_static_shape<shape<D...>, Axes...>>::type;
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

template <class S>
struct reversed_static_shape {
    using type = dynamic;
};
template <std::ptrdiff_t... D>
struct reversed_static_shape<shape<D...>> {
    static constexpr std::array<std::ptrdiff_t, (sizeof...(D) > 0 ? sizeof...(D) : 1)> in{D...};
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<in[sizeof...(D) - 1 - I]...>;
    using type = decltype(make(std::make_index_sequence<sizeof...(D)>{}));
};

// A shape key identifies a node's shape symbolically: two nodes with the same key have the same shape at run time.
// Fully static shapes are their own key; a dynamic leaf is its own key; an elementwise node takes the key of the
// operand that decides its shape (operands of rank 0, or absorbed by another's static shape, decide nothing).
template <class E, class = void>
struct shape_key {
    using type = shape<>;  // constants and run-time scalars
};
template <class L>
struct shape_key<L, std::enable_if_t<is_leaf_v<L>>> {
    using type = std::conditional_t<fully_static_v<typename L::shape_type>, typename L::shape_type, L>;
};

// True when static shape B broadcast against A leaves A unchanged whatever A's unknown extents are.
template <class A, class B>
inline constexpr bool absorbs_v = false;
template <std::ptrdiff_t... A, std::ptrdiff_t... B>
inline constexpr bool absorbs_v<shape<A...>, shape<B...>> = [] {
    constexpr int ra = sizeof...(A), rb = sizeof...(B);
    if (rb > ra) return false;
    constexpr std::array<std::ptrdiff_t, (ra > 0 ? ra : 1)> a{A...};
    constexpr std::array<std::ptrdiff_t, (rb > 0 ? rb : 1)> b{B...};
    for (int i = 0; i < rb; ++i) {
        const std::ptrdiff_t x = a[ra - rb + i], y = b[i];
        if (y == dyn) return false;
        if (y != 1 && y != x) return false;
    }
    return true;
}();

template <class Op, class... A>
struct shape_key<node<Op, A...>> {
    using self = node<Op, A...>;
    using own_shape = shape_of_t<self>;
    template <std::size_t I>
    using arg_t = std::tuple_element_t<I, std::tuple<A...>>;
    // An operand decides nothing when its key is rank 0 or another operand's static shape absorbs its shape.
    static constexpr std::array<bool, sizeof...(A)> rank0{std::is_same_v<typename shape_key<A>::type, shape<>>...};
    template <class X>
    static constexpr bool absorbed = ((!std::is_same_v<X, A> && absorbs_v<shape_of_t<A>, shape_of_t<X>> &&
                                       !absorbs_v<shape_of_t<X>, shape_of_t<A>>) ||
                                      ...);
    static constexpr std::array<bool, sizeof...(A)> absorbed_arg{absorbed<A>...};
    template <std::size_t I>
    static constexpr bool decides() {
        return !rank0[I] && !absorbed_arg[I];
    }
    template <class Acc, std::size_t I>
    using step = std::conditional_t<!decides<I>(), Acc,
                                    std::conditional_t<std::is_same_v<Acc, void>, typename shape_key<arg_t<I>>::type,
                                                       std::conditional_t<std::is_same_v<Acc, typename shape_key<arg_t<I>>::type>,
                                                                          Acc, self>>>;
    template <class Acc, std::size_t... I>
    struct fold;
    template <class Acc>
    struct fold<Acc> {
        using type = Acc;
    };
    template <class Acc, std::size_t I, std::size_t... Rest>
    struct fold<Acc, I, Rest...> {
        using type = typename fold<step<Acc, I>, Rest...>::type;
    };
    template <class Seq>
    struct elementwise_key;
    template <std::size_t... I>
    struct elementwise_key<std::index_sequence<I...>> {
        using k = typename fold<void, I...>::type;
        using type = std::conditional_t<std::is_same_v<k, void>, shape<>, k>;
    };
    using computed = std::conditional_t<structural_op<Op>, self,
                                        typename elementwise_key<std::index_sequence_for<A...>>::type>;
    using type = std::conditional_t<fully_static_v<own_shape>, own_shape, computed>;
};
template <class E>
using shape_key_t = typename shape_key<E>::type;

template <class A, class B>
inline constexpr bool same_shape_v = std::is_same_v<shape_key_t<A>, shape_key_t<B>>;

template <class Op, class... A>
constexpr auto structural(const A&... a) {
    static_assert((is_graph_v<A> && ...), "kiln: structural ops take graph-mode expressions.");
    using result = node<Op, A...>;
    static_assert(sizeof(value_type_t<result>) > 0 && sizeof(shape_of_t<result>) > 0);
    return make_node<Op>(a...);
}

// Internal constructors used by gradient rules (defined below the ops).
template <class G, class R>
constexpr auto like(const G& g, const R& ref);
template <class G, class R>
constexpr auto sum_to(const G& g, const R& ref);
template <class G, class R>
constexpr auto reshape_as(const G& g, const R& ref);
template <bool Keep, int... Axes, class G, class R>
constexpr auto expand(const G& g, const R& ref);
template <int... Axes, class R>
constexpr auto reduced_count(const R& ref);

}  // namespace detail

namespace ops {

enum class reduction { sum, mean, max, min };

// Declared here, defined below: the graph-mode constructors that gradient rules call.
template <reduction K, bool Keep, int... Axes>
struct reduce;

}  // namespace ops

namespace detail {
template <ops::reduction K, bool Keep, int... Axes, class E>
constexpr auto make_reduce(const E& e);
}

namespace ops {

template <reduction K, bool Keep, int... Axes>
struct reduce {
    static constexpr std::string_view name = K == reduction::sum    ? "sum"
                                             : K == reduction::mean ? "mean"
                                             : K == reduction::max  ? "max"
                                                                    : "min";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    template <class A>
    static A apply(const A&);  // the element type; never called
    template <class S>
    using static_shape = typename detail::reduced_static_shape<S, Keep, Axes...>::type;

    // x's shape with the reduced dimensions set to 1.
    static dims keep_shape(const dims& x) {
        const detail::axis_mask m = detail::make_axis_mask<Axes...>(x.rank);
        if (!m.ok)
            throw shape_error("kiln::" + std::string(name) + ": axis " + std::to_string(m.bad) +
                              " is out of range for shape " + to_string(x));
        dims k = x;
        for (int i = 0; i < x.rank; ++i)
            if (m.reduced[i]) k[i] = 1;
        return k;
    }
    static dims shape(const dims& x) {
        const dims k = keep_shape(x);
        if constexpr (Keep) return k;
        const detail::axis_mask m = detail::make_axis_mask<Axes...>(x.rank);
        dims out;
        out.rank = 0;
        for (int i = 0; i < x.rank; ++i)
            if (!m.reduced[i]) out[out.rank++] = x[i];
        return out;
    }

    template <class T>
    static void compute(T* out, const dims& out_shape, const detail::strided<const T>& x) {
        const dims keep = keep_shape(x.shape);
        const std::ptrdiff_t m = out_shape.size();
        const std::ptrdiff_t count = m == 0 ? 0 : x.shape.size() / m;
        if constexpr (K == reduction::max || K == reduction::min) {
            if (count == 0 && m > 0)
                throw value_error("kiln::" + std::string(name) + ": cannot reduce over an empty dimension (shape " +
                                  to_string(x.shape) + ")");
            const T init = K == reduction::max ? (std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                                        : std::numeric_limits<T>::lowest())
                                               : (std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                                        : std::numeric_limits<T>::max());
            std::fill(out, out + m, init);
            detail::reduce_strided(x, keep, out, [](T& a, T v) {
                if (a == a && (v != v || (K == reduction::max ? v > a : v < a))) a = v;  // NaN is sticky
            });
        } else {
            // Floating sums accumulate in double, integer sums in int64, as in eager mode.
            using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
            Acc* acc = detail::scratch<Acc>(static_cast<std::size_t>(m));
            std::fill(acc, acc + m, Acc(0));
            detail::reduce_strided(x, keep, acc, [](Acc& a, T v) { a += static_cast<Acc>(v); });
            for (std::ptrdiff_t i = 0; i < m; ++i) {
                const T s = static_cast<T>(acc[i]);
                if constexpr (K == reduction::mean) out[i] = s / static_cast<T>(count);
                else out[i] = s;
            }
        }
    }

    template <class A, class Y, class G>
    static constexpr auto gradient(const A& x, const Y& y, const G& g) {
        const auto gx = detail::like(detail::expand<Keep, Axes...>(g, x), x);
        if constexpr (K == reduction::sum) {
            return detail::grads(gx);
        } else if constexpr (K == reduction::mean) {
            return detail::grads(gx / detail::reduced_count<Axes...>(x));
        } else {
            // Ties share the gradient equally, as in eager mode.
            using T = detail::value_type_t<A>;
            const auto hit = kiln::cast<T>(kiln::equal(x, detail::like(detail::expand<Keep, Axes...>(y, x), x)));
            const auto ties = detail::make_reduce<reduction::sum, Keep, Axes...>(hit);
            return detail::grads(gx * hit / detail::like(detail::expand<Keep, Axes...>(ties, x), x));
        }
    }
};

// The number of elements a reduction over Axes folds together, as a rank-0 value (mean's gradient divides by it).
template <int... Axes>
struct count {
    static constexpr std::string_view name = "count";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 0;
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = shape<>;
    static dims shape(const dims&) { return dims{}; }
    template <class T>
    static void compute(T* out, const dims&, const detail::strided<const T>& x) {
        const dims keep = reduce<reduction::sum, true, Axes...>::keep_shape(x.shape);
        const std::ptrdiff_t m = keep.size();
        out[0] = static_cast<T>(m == 0 ? 0 : x.shape.size() / m);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G&) { return detail::grads(detail::no_grad{}); }
};

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
            throw shape_error("kiln::matmul: graph mode multiplies matrices, got shapes " + to_string(a) + " and " +
                              to_string(b));
        if (a[1] != b[0])
            throw shape_error("kiln::matmul: cannot multiply " + to_string(a) + " by " + to_string(b) +
                              ": the inner dimensions " + std::to_string(a[1]) + " and " + std::to_string(b[0]) +
                              " differ");
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
#if defined(KILN_HAVE_CBLAS)
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

// Reverses the axes (the matrix transpose for rank 2): a view.
struct transpose {
    static constexpr std::string_view name = "transpose";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = typename detail::reversed_static_shape<S>::type;
    static dims shape(const dims& a) {
        dims out = a;
        std::reverse(out.d.begin(), out.d.begin() + out.rank);
        return out;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        out = a;
        std::reverse(out.shape.d.begin(), out.shape.d.begin() + out.shape.rank);
        std::reverse(out.strides.d.begin(), out.strides.d.begin() + out.strides.rank);
        return true;
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g);
};

// Shared by reshape<...> and reshape_as: a view of row-major data, or a row-major copy.
struct reshape_base {
    static constexpr bool structural = true;
    template <class T>
    static bool try_view(detail::strided<const T>& out, const dims& shape, const detail::strided<const T>& a) {
        if (!detail::is_row_major(a)) return false;
        out = detail::strided<const T>(a.data, shape, detail::contiguous_strides(shape));
        return true;
    }
    template <class T>
    static void copy(T* out, const detail::strided<const T>& a) {
        detail::copy_row_major(out, a);
    }
};

// reshape<D...>(x): a new static shape of the same size; one extent may be kiln::dyn (-1), inferred.
template <std::ptrdiff_t... D>
struct reshape : reshape_base {
    static constexpr std::string_view name = "reshape";
    static constexpr int arity = 1;
    static_assert(((D == dyn ? 1 : 0) + ... + 0) <= 1, "kiln::reshape: at most one extent may be kiln::dyn (inferred).");
    static_assert(((D >= 0 || D == dyn) && ...), "kiln::reshape: extents are non-negative or kiln::dyn.");
    template <class A>
    static A apply(const A&);
    template <class S>
    struct rule {
        using type = shape<D...>;
    };
    template <std::ptrdiff_t... S>
        requires(((S != dyn) && ...) && ((D == dyn ? 1 : 0) + ... + 0) == 1)
    struct rule<shape<S...>> {
        static constexpr std::ptrdiff_t total = (std::ptrdiff_t{1} * ... * S);
        static constexpr std::ptrdiff_t known = (std::ptrdiff_t{1} * ... * (D == dyn ? 1 : D));
        using type = shape<(D == dyn ? (known == 0 ? 0 : total / known) : D)...>;
    };
    template <class S>
    using static_shape = typename rule<S>::type;

    static dims shape(const dims& a) {
        dims out{D...};
        std::ptrdiff_t known = 1;
        int infer = -1;
        for (int i = 0; i < out.rank; ++i) {
            if (out[i] == dyn) infer = i;
            else known *= out[i];
        }
        if (infer >= 0) out[infer] = known == 0 ? 0 : a.size() / known;
        if (out.size() != a.size())
            throw shape_error("kiln::reshape: cannot reshape " + to_string(a) + " (" + std::to_string(a.size()) +
                              " elements) to " + to_string(out));
        return out;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        return reshape_base::try_view(out, shape(a.shape), a);
    }
    template <class T>
    static void compute(T* out, const dims&, const detail::strided<const T>& a) {
        copy(out, a);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a));
    }
};

// reshape_as(g, ref): g in ref's shape (what reshape's gradient uses).
struct reshape_as : reshape_base {
    static constexpr std::string_view name = "reshape_as";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SG, class SR>
    using static_shape = SR;
    static dims shape(const dims& g, const dims& ref) {
        if (g.size() != ref.size())
            throw shape_error("kiln::reshape_as: cannot reshape " + to_string(g) + " to " + to_string(ref));
        return ref;
    }
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        return reshape_base::try_view(out, shape(g.shape, ref.shape), g);
    }
    template <class T, class R>
    static void compute(T* out, const dims&, const detail::strided<const T>& g, const detail::strided<const R>&) {
        copy(out, g);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a), detail::no_grad{});
    }
};

// expand<Axes...>(g, ref): g, which lacks the reduced Axes of ref, with those axes put back as extent 1 (a view).
template <int... Axes>
struct expand_axes {
    static constexpr std::string_view name = "expand";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SG, class SR>
    using static_shape = typename detail::reduced_static_shape<SR, true, Axes...>::type;
    static dims shape(const dims& g, const dims& ref) {
        const dims k = reduce<reduction::sum, true, Axes...>::keep_shape(ref);
        const dims expect = reduce<reduction::sum, false, Axes...>::shape(ref);
        if (!(g == expect))
            throw shape_error("kiln::expand: shape " + to_string(g) + " is not " + to_string(ref) +
                              " reduced over the expanded axes");
        return k;
    }
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        const dims s = shape(g.shape, ref.shape);
        const detail::axis_mask m = detail::make_axis_mask<Axes...>(ref.shape.rank);
        out.data = g.data;
        out.shape = s;
        out.strides.rank = s.rank;
        int j = 0;
        for (int i = 0; i < s.rank; ++i) out.strides[i] = m.reduced[i] ? 0 : g.strides[j++];
        return true;
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a), detail::no_grad{});
    }
};

// broadcast_to<D...>(x): x repeated to a static shape (a view with zero strides).
template <std::ptrdiff_t... D>
struct broadcast_to {
    static constexpr std::string_view name = "broadcast_to";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    static_assert(((D >= 0) && ...), "kiln::broadcast_to: the target shape's extents must be known.");
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = shape<D...>;
    static dims shape(const dims& a) {
        const dims target{D...};
        dims out;
        if (!detail::broadcast_into(a, target, out) || !(out == target))
            throw shape_error("kiln::broadcast_to: cannot broadcast shape " + to_string(a) + " to " + to_string(target));
        return target;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        out = detail::broadcast_view(a, shape(a.shape));
        return true;
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(detail::sum_to(detail::like(g, y), a));
    }
};

// sum_to(g, ref): g summed over the dimensions along which ref was broadcast, in ref's shape.
struct sum_to {
    static constexpr std::string_view name = "sum_to";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SG, class SR>
    using static_shape = SR;
    static dims shape(const dims& g, const dims& ref) {
        dims b;
        if (!detail::broadcast_into(g, ref, b) || !(b == g))
            throw shape_error("kiln::sum_to: shape " + to_string(g) + " is not a broadcast of " + to_string(ref));
        return ref;
    }
    // Nothing to sum when g already has ref's shape.
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        if (!(shape(g.shape, ref.shape) == g.shape)) return false;
        out = g;
        return true;
    }
    template <class T, class R>
    static void compute(T* out, const dims& s, const detail::strided<const T>& g, const detail::strided<const R>&) {
        dims keep = g.shape;
        for (int i = 0; i < g.shape.rank; ++i) {
            const int ir = i - (g.shape.rank - s.rank);
            if (ir < 0 || s[ir] == 1) keep[i] = 1;
        }
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
        const std::ptrdiff_t m = s.size();
        Acc* acc = detail::scratch<Acc>(static_cast<std::size_t>(m));
        std::fill(acc, acc + m, Acc(0));
        detail::reduce_strided(g, keep, acc, [](Acc& a, T v) { a += static_cast<Acc>(v); });
        for (std::ptrdiff_t i = 0; i < m; ++i) out[i] = static_cast<T>(acc[i]);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::like(detail::like(g, y), a), detail::no_grad{});
    }
};

// broadcast_like(g, ref): g broadcast to the shape of g and ref together; elementwise (fused), ref's value unused.
struct broadcast_like {
    static constexpr std::string_view name = "broadcast_like";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr A apply(const A& a, const B&) { return a; }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B&, const Y&, const G& g) {
        return detail::grads(g, detail::no_grad{});
    }
};

}  // namespace ops

namespace detail {

template <class G, class R>
constexpr auto like(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R> || !is_graph_v<R>) return g;
    else return make_node<ops::broadcast_like>(as_graph_operand(g), ref);
}

template <class G, class R>
constexpr auto sum_to(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R>) return g;
    else if constexpr (std::is_same_v<shape_key_t<G>, shape<>>) return structural<ops::sum_to>(like(g, ref), ref);
    else return structural<ops::sum_to>(g, ref);
}

template <class G, class R>
constexpr auto reshape_as(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R>) return g;
    else if constexpr (std::is_same_v<shape_key_t<G>, shape<>>) return like(g, ref);  // uniform: only the shape changes
    else return structural<ops::reshape_as>(g, ref);
}

template <bool Keep, int... Axes, class G, class R>
constexpr auto expand(const G& g, const R& ref) {
    if constexpr (Keep || sizeof...(Axes) == 0 || std::is_same_v<shape_key_t<G>, shape<>>) return g;
    else return structural<ops::expand_axes<Axes...>>(g, ref);
}

template <int... Axes, class R>
constexpr auto reduced_count(const R& ref) {
    return structural<ops::count<Axes...>>(ref);
}

template <ops::reduction K, bool Keep, int... Axes, class E>
constexpr auto make_reduce(const E& e) {
    static_assert(is_graph_v<E>, "kiln: graph-mode reductions take a graph-mode expression.");
    static_assert(!std::is_same_v<value_type_t<E>, weak>,
                  "kiln: reduce an expression with an element type (a constant alone has no shape to reduce).");
    static_assert(K != ops::reduction::mean || std::is_floating_point_v<value_type_t<E>>,
                  "kiln::mean: graph-mode means take floating-point expressions; cast first.");
    return structural<ops::reduce<K, Keep, Axes...>>(e);
}

}  // namespace detail


// Graph-mode reductions: kiln::sum(x) over all axes, kiln::sum<0>(x) over axis 0, kiln::mean<-1>(x, kiln::keep_dims).
#define KILN_GRAPH_REDUCTION(fn, kind)                                                                             \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e) {                                                                                 \
        return detail::make_reduce<ops::reduction::kind, false, Axes...>(e);                                        \
    }                                                                                                               \
    template <int... Axes, class E>                                                                                 \
        requires is_graph_v<E>                                                                                      \
    constexpr auto fn(const E& e, keep_dims_t) {                                                                    \
        return detail::make_reduce<ops::reduction::kind, true, Axes...>(e);                                         \
    }
KILN_GRAPH_REDUCTION(sum, sum)
KILN_GRAPH_REDUCTION(mean, mean)
KILN_GRAPH_REDUCTION(max, max)
KILN_GRAPH_REDUCTION(min, min)
#undef KILN_GRAPH_REDUCTION

// The matrix product of two graph-mode matrices.
template <class A, class B>
    requires(is_graph_v<A> && is_graph_v<B>)
constexpr auto matmul(const A& a, const B& b) {
    return detail::structural<ops::matmul>(a, b);
}

// The transpose (axes reversed): a view, no copy.
template <class E>
    requires is_graph_v<E>
constexpr auto transpose(const E& e) {
    if constexpr (is_node_v<E>) {
        if constexpr (std::is_same_v<typename E::op, ops::transpose>) return e.template arg<0>();  // T(T(x)) -> x
        else return detail::structural<ops::transpose>(e);
    } else {
        return detail::structural<ops::transpose>(e);
    }
}

namespace ops {
template <class A, class B, class Y, class G>
constexpr auto matmul::gradient(const A& a, const B& b, const Y& y, const G& g) {
    const auto gy = detail::like(g, y);
    return detail::grads(detail::structural<matmul>(gy, kiln::transpose(b)),
                         detail::structural<matmul>(kiln::transpose(a), gy));
}
template <class A, class Y, class G>
constexpr auto transpose::gradient(const A&, const Y& y, const G& g) {
    return detail::grads(detail::structural<transpose>(detail::like(g, y)));
}
}  // namespace ops

// A new static shape of the same size; one extent may be kiln::dyn and is inferred.
template <std::ptrdiff_t... D, class E>
    requires is_graph_v<E>
constexpr auto reshape(const E& e) {
    return detail::structural<ops::reshape<D...>>(e);
}

// Repeats x to a static shape with NumPy's broadcasting rules (a view).
template <std::ptrdiff_t... D, class E>
    requires is_graph_v<E>
constexpr auto broadcast_to(const E& e) {
    return detail::structural<ops::broadcast_to<D...>>(e);
}

}  // namespace kiln
