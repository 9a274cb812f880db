#pragma once
// kiln::backend::thrust_device: the GPU's implementation of the device interface (backend/device.hpp), written once
// on Thrust. Under nvcc it runs on CUDA (cuBLAS for products, Thrust's CUB-based algorithms for reductions, scans
// and sorts); with a host compiler and THRUST_DEVICE_SYSTEM_OMP the same code runs on Thrust's OpenMP system with
// host memory (the emulated device that tests the device's logic on every machine). The ops' kernels are their own
// KILN_HD functions: an elementwise op reaches the GPU as the functor of one thrust::for_each over the result's
// elements, never as a second implementation.
//
// Every kernel here takes strided operands (broadcasting is a stride of 0) and decodes each element's multi-index
// from its position, so any layout runs; contiguous operands of the result's shape take a path without decoding.
// Floating sums reduce as a tree (CUB's order), not in the CPU's order: results agree with the CPU's to rounding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/discard_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "../../core/error.hpp"
#include "../../expr/evaluate.hpp"
#include "../../expr/feed.hpp"
#include "../../expr/unique_nodes.hpp"
#include "../../ops/arithmetic.hpp"
#include "../../ops/matmul.hpp"
#include "../../ops/reduce.hpp"
#include "../device.hpp"
#include "memory.hpp"

#if KILN_GPU_CUDA
#include <cublas_v2.h>
#endif

namespace kiln {
namespace backend {
namespace gpu {

// A shape and strides as plain arrays: what a kernel carries to the device.
struct walk {
    int rank = 0;
    std::ptrdiff_t extent[max_rank] = {};
};
struct steps {
    std::ptrdiff_t s[max_rank] = {};
};

inline walk walk_of(const dims& d) {
    walk w;
    w.rank = d.rank;
    for (int i = 0; i < d.rank; ++i) w.extent[i] = d[i];
    return w;
}
inline steps steps_of(const dims& d) {
    steps s;
    for (int i = 0; i < d.rank; ++i) s.s[i] = d[i];
    return s;
}
inline steps steps_of_contiguous(const dims& d) { return steps_of(detail::contiguous_strides(d)); }

// The offset of element i (row-major over w) in a view of strides s.
KILN_HD inline std::ptrdiff_t offset_of(std::ptrdiff_t i, const walk& w, const steps& s) {
    std::ptrdiff_t off = 0;
    for (int d = w.rank - 1; d >= 0; --d) {
        const std::ptrdiff_t n = w.extent[d];
        off += (i % n) * s.s[d];
        i /= n;
    }
    return off;
}

// The execution policy of the device's stream.
inline auto policy([[maybe_unused]] int index = 0) {
#if KILN_GPU_CUDA
    return ::thrust::cuda::par_nosync.on(gpu_memory::stream(index));
#else
    return ::thrust::device;
#endif
}

template <class F>
void for_each_n(std::ptrdiff_t n, const F& f) {
    if (n <= 0) return;
    ::thrust::for_each_n(policy(), ::thrust::counting_iterator<std::ptrdiff_t>(0), n, f);
#if KILN_GPU_CUDA
    gpu_memory::check_cuda("kernel launch", cudaGetLastError());
#endif
}

// Atomic accumulation for the scatters (their gradients add into shared rows). On the emulated device Thrust's
// OpenMP threads run the same kernel, so it is atomic there too.
template <class U>
KILN_HD inline void atomic_add(U* p, U v) {
    if constexpr (std::is_same_v<U, bool>) {
        if (v) *p = true;  // every racing writer writes true: the result is the logical or
    } else {
#if defined(__CUDA_ARCH__)
        if constexpr (std::is_same_v<U, std::int64_t>)
            atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
        else if constexpr (std::is_same_v<U, std::int32_t>)
            atomicAdd(p, v);
        else
            atomicAdd(p, v);
#else
        if constexpr (std::is_integral_v<U>) {
            __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
        } else {
            U old;
            __atomic_load(p, &old, __ATOMIC_RELAXED);
            U desired;
            do {
                desired = old + v;
            } while (!__atomic_compare_exchange(p, &old, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
        }
#endif
    }
}

// A bad index met inside a kernel: the first one is kept and reported after the kernel (a kiln::value_error).
struct index_fault {
    int hit;
    long long value;
    long long extent;
};

// Device memory for a few values, freed at the end of the scope.
template <class T>
struct buffer {
    T* p = nullptr;
    std::size_t bytes = 0;
    explicit buffer(std::ptrdiff_t n) : bytes(static_cast<std::size_t>(n > 0 ? n : 1) * sizeof(T)) {
        p = static_cast<T*>(gpu_memory::allocate(bytes));
    }
    ~buffer() { gpu_memory::deallocate(p, bytes); }
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
};

struct fault_check {
    buffer<index_fault> f{1};
    fault_check() {
        const index_fault none{0, 0, 0};
        gpu_memory::from_host(f.p, &none, sizeof none);
    }
    void raise_if_hit(std::string_view op) const {
        index_fault h{};
        gpu_memory::to_host(&h, f.p, sizeof h);
        if (h.hit)
            throw value_error(detail::error_prefix("value_error", op) + "index " + std::to_string(h.value) +
                              " is out of range for a dimension of size " + std::to_string(h.extent));
    }
};

template <class I>
KILN_HD inline std::ptrdiff_t checked(I raw, std::ptrdiff_t n, index_fault* fault) {
    auto v = static_cast<std::ptrdiff_t>(raw);
    if (v < 0) v += n;
    if (v < 0 || v >= n) {
        if (!fault->hit) {
            fault->value = static_cast<long long>(raw);
            fault->extent = static_cast<long long>(n);
            fault->hit = 1;
        }
        return -1;
    }
    return v;
}

// ---- elementwise: one graph expression over strided operands ----

template <class Leaves, std::size_t K>
using leaf_value_t = typename detail::at<K, Leaves>::type::value_type;

// One pass that evaluates every root at each element (an optimizer's parameter and slots together), each into its
// own output; all outputs have one shape. An output may be an input: each element is read before it is written.
template <class List, std::size_t NL, class... Roots>
struct eval_kernel {
    using leaves = detail::leaves_t<List>;
    static constexpr std::size_t NR = sizeof...(Roots);
    detail::root_pack<Roots...> roots;
    walk shape;
    void* out[NR];
    steps out_steps[NR];
    const void* in[NL > 0 ? NL : 1];
    steps in_steps[NL > 0 ? NL : 1];
    bool flat;  // every operand contiguous with the result's shape

    struct loader {
        const eval_kernel* k;
        const std::ptrdiff_t* off;
        template <std::size_t J>
        KILN_HD KILN_INLINE auto get() const {
            return static_cast<const leaf_value_t<leaves, J>*>(k->in[J])[off[J]];
        }
    };

    KILN_HD void operator()(std::ptrdiff_t i) const {
        std::ptrdiff_t off[NL > 0 ? NL : 1];
        std::ptrdiff_t o[NR];
        if (flat) {
            for (std::size_t j = 0; j < NL; ++j) off[j] = i;
            for (std::size_t j = 0; j < NR; ++j) o[j] = i;
        } else {
            for (std::size_t j = 0; j < NL; ++j) off[j] = 0;
            for (std::size_t j = 0; j < NR; ++j) o[j] = 0;
            std::ptrdiff_t rest = i;
            for (int d = shape.rank - 1; d >= 0; --d) {
                const std::ptrdiff_t n = shape.extent[d], at = rest % n;
                rest /= n;
                for (std::size_t j = 0; j < NR; ++j) o[j] += at * out_steps[j].s[d];
                for (std::size_t j = 0; j < NL; ++j) off[j] += at * in_steps[j].s[d];
            }
        }
        const detail::frame<detail::scalar_mode, List> f(loader{this, off});
        store(f, o, std::index_sequence_for<Roots...>{});
    }

    template <class F, std::size_t... J>
    KILN_HD KILN_INLINE void store(const F& f, const std::ptrdiff_t* o, std::index_sequence<J...>) const {
        // Every root is evaluated before any is stored: an output may be an input of another root.
        const auto values = ::thrust::make_tuple(f.template evaluate<detail::root_type_t<Roots>>(roots.template get<J>())...);
        ((static_cast<detail::root_type_t<Roots>*>(out[J])[o[J]] = ::thrust::get<J>(values)), ...);
    }
};

// ---- copies and fills ----

template <class U, class T>
struct copy_kernel {
    walk shape;
    U* out;
    steps os;
    const T* in;
    steps is;
    KILN_HD void operator()(std::ptrdiff_t i) const {
        out[offset_of(i, shape, os)] = value_cast<U>(in[offset_of(i, shape, is)]);
    }
};
template <class U>
struct fill_kernel {
    walk shape;
    U* out;
    steps os;
    U v;
    KILN_HD void operator()(std::ptrdiff_t i) const { out[offset_of(i, shape, os)] = v; }
};

// ---- reductions: elements ordered (kept axes, reduced axes), folded by key (the output's position) ----

template <class T, class Acc>
struct reduce_load {
    const T* x;
    walk order;  // x's extents, kept axes first, then reduced ones
    steps s;     // x's strides in that order
    KILN_HD Acc operator()(std::ptrdiff_t j) const { return static_cast<Acc>(x[offset_of(j, order, s)]); }
};
struct key_of {
    std::ptrdiff_t red;
    KILN_HD std::ptrdiff_t operator()(std::ptrdiff_t j) const { return j / red; }
};
template <class Acc>
struct fold_add {
    KILN_HD Acc operator()(Acc a, Acc b) const {
        if constexpr (std::is_integral_v<Acc>) return ::kiln::detail::kernels::wrapping_add(a, b);
        else return a + b;
    }
};
template <class Acc>
struct fold_mul {
    KILN_HD Acc operator()(Acc a, Acc b) const {
        if constexpr (std::is_integral_v<Acc>) return ::kiln::detail::kernels::wrapping_mul(a, b);
        else return a * b;
    }
};
// Extrema: a NaN, once met, is the result (the CPU's rule).
template <class T>
struct fold_pick {
    bool is_max;
    KILN_HD T operator()(T a, T v) const { return a != a ? a : (v != v || (is_max ? v > a : v < a)) ? v : a; }
};
template <class Acc, class R, class T>
struct finish {
    bool mean;
    std::ptrdiff_t count;
    KILN_HD R operator()(Acc a) const {
        if constexpr (std::is_floating_point_v<T>) {
            if (mean) return static_cast<R>(static_cast<T>(static_cast<T>(a) / static_cast<T>(count)));
        }
        return static_cast<R>(a);
    }
};

// Positions of extrema along one axis: (value, position), the first of equal ones, a NaN winning.
template <class T>
struct best {
    T value;
    std::int64_t pos;
};
template <class T>
struct arg_load {
    const T* x;
    walk order;
    steps s;
    std::ptrdiff_t red;
    KILN_HD best<T> operator()(std::ptrdiff_t j) const {
        return best<T>{x[offset_of(j, order, s)], static_cast<std::int64_t>(j % red)};
    }
};
template <class T>
struct arg_pick {
    bool is_max;
    KILN_HD best<T> operator()(const best<T>& a, const best<T>& b) const {
        const bool an = a.value != a.value, bn = b.value != b.value;
        if (an || bn) {
            if (an && bn) return a.pos <= b.pos ? a : b;
            return an ? a : b;
        }
        if (is_max ? b.value > a.value : b.value < a.value) return b;
        if (is_max ? a.value > b.value : a.value < b.value) return a;
        return a.pos <= b.pos ? a : b;
    }
};
struct pos_of {
    template <class T>
    KILN_HD std::int64_t operator()(const best<T>& b) const {
        return b.pos;
    }
};

// The layout of a reduction: x's axes ordered kept first, then reduced; m outputs of `red` elements each.
struct reduction_order {
    walk order;
    steps s;
    std::ptrdiff_t red = 1;
};
template <class T>
reduction_order order_for(const detail::strided<const T>& x, const dims& keep) {
    reduction_order r;
    int k = 0;
    for (int pass = 0; pass < 2; ++pass)
        for (int d = 0; d < x.shape.rank; ++d) {
            const bool reduced = keep[d] == 1 && x.shape[d] != 1;
            if (reduced != (pass == 1)) continue;
            r.order.extent[k] = x.shape[d];
            r.s.s[k++] = x.strides[d];
            if (reduced) r.red *= x.shape[d];
        }
    r.order.rank = k;
    return r;
}

// ---- scans and sorts: the lines along one axis ----

// x's axes ordered with `axis` last (each line of it contiguous in that order), with x's strides and the strides of
// a row-major result of x's shape in the same order.
struct lines {
    walk order;
    steps s, os;
};
template <class T>
lines lines_of(const detail::strided<const T>& x, int axis) {
    lines l;
    const dims cs = detail::contiguous_strides(x.shape);
    int k = 0;
    for (int d = 0; d <= x.shape.rank; ++d) {
        const int src = d == x.shape.rank ? axis : d;
        if (d == axis) continue;
        l.order.extent[k] = x.shape[src];
        l.s.s[k] = x.strides[src];
        l.os.s[k++] = cs[src];
    }
    l.order.rank = k;
    return l;
}

template <class T, class U>
struct scan_load {
    const T* x;
    walk order;  // the other axes, then the scanned one
    steps s;
    std::ptrdiff_t len;
    bool reverse;
    KILN_HD U operator()(std::ptrdiff_t j) const {
        std::ptrdiff_t p = j % len;
        if (reverse) j += len - 1 - 2 * p;
        return static_cast<U>(x[offset_of(j, order, s)]);
    }
};
template <class U>
struct scan_store {
    U* out;
    walk order;
    steps os;  // the output's (contiguous) strides in the same order
    std::ptrdiff_t len;
    bool reverse;
    // Writes the running value of element j; used through a counting iterator of positions.
    KILN_HD void operator()(const ::thrust::tuple<std::ptrdiff_t, U>& t) const {
        std::ptrdiff_t j = ::thrust::get<0>(t);
        const std::ptrdiff_t p = j % len;
        if (reverse) j += len - 1 - 2 * p;
        out[offset_of(j, order, os)] = ::thrust::get<1>(t);
    }
};
template <class U>
struct scan_scatter {
    scan_store<U> store;
    const U* values;
    KILN_HD void operator()(std::ptrdiff_t j) const { store(::thrust::make_tuple(j, values[j])); }
};
template <class U>
struct scan_op {
    bool product;
    KILN_HD U operator()(U a, U v) const {
        return product ? static_cast<U>(ops::mul::apply(a, v)) : static_cast<U>(ops::add::apply(a, v));
    }
};

// ---- gathers and scatters ----

template <class T, class I, class U>
struct gather_along_kernel {
    const T* x;
    steps xs;  // x's strides with the axis's set to 0
    std::ptrdiff_t n, step;
    const I* index;
    walk ishape;
    steps is;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        const std::ptrdiff_t v = checked(index[offset_of(k, ishape, is)], n, fault);
        out[k] = v < 0 ? U(0) : static_cast<U>(x[offset_of(k, ishape, xs) + v * step]);
    }
};
template <class T, class I, class U>
struct scatter_along_kernel {
    const T* g;
    steps gs;
    const I* index;
    walk ishape;
    steps is;
    steps cs;  // the output's contiguous strides with the axis's set to 0
    std::ptrdiff_t n, step;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        const std::ptrdiff_t v = checked(index[offset_of(k, ishape, is)], n, fault);
        if (v >= 0) atomic_add(out + offset_of(k, ishape, cs) + v * step, static_cast<U>(g[offset_of(k, ishape, gs)]));
    }
};
// take: out[before, j.., after] = x[before, index[j..], after]; the result's element k decodes as (before, j, after).
template <class T, class I, class U>
struct take_kernel {
    const T* x;
    walk oshape;  // before + index's shape + after
    steps xs;     // x's strides for those axes (0 for the index's axes)
    int axis, irank;
    std::ptrdiff_t n, step;
    const I* index;
    steps is;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        std::ptrdiff_t rest = k, xoff = 0, ioff = 0;
        for (int d = oshape.rank - 1; d >= 0; --d) {
            const std::ptrdiff_t at = rest % oshape.extent[d];
            rest /= oshape.extent[d];
            xoff += at * xs.s[d];
            if (d >= axis && d < axis + irank) ioff += at * is.s[d - axis];
        }
        const std::ptrdiff_t v = checked(index[ioff], n, fault);
        out[k] = v < 0 ? U(0) : static_cast<U>(x[xoff + v * step]);
    }
};
template <class T, class I, class U>
struct take_add_kernel {
    const T* g;
    walk gshape;  // before + index's shape + after
    steps gs;
    steps os;  // the output's contiguous strides for those axes (0 for the index's axes)
    int axis, irank;
    std::ptrdiff_t n, step;
    const I* index;
    steps is;
    U* out;
    index_fault* fault;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        std::ptrdiff_t rest = k, ooff = 0, ioff = 0, goff = 0;
        for (int d = gshape.rank - 1; d >= 0; --d) {
            const std::ptrdiff_t at = rest % gshape.extent[d];
            rest /= gshape.extent[d];
            ooff += at * os.s[d];
            goff += at * gs.s[d];
            if (d >= axis && d < axis + irank) ioff += at * is.s[d - axis];
        }
        const std::ptrdiff_t v = checked(index[ioff], n, fault);
        if (v >= 0) atomic_add(out + ooff + v * step, static_cast<U>(g[goff]));
    }
};

// ---- sort order: every element's position sorted by (line, value), stably ----

template <class T>
struct line_less {
    const T* x;
    walk order;  // the other axes, then the sorted one
    steps s;
    std::ptrdiff_t len;
    bool descending;
    KILN_HD bool operator()(std::int64_t p, std::int64_t q) const {
        const std::ptrdiff_t lp = p / len, lq = q / len;
        if (lp != lq) return lp < lq;
        const T a = x[offset_of(p, order, s)], b = x[offset_of(q, order, s)];
        if (b != b) return !(a != a);
        if (a != a) return false;
        return descending ? b < a : a < b;
    }
};
struct order_store {
    std::int64_t* out;
    walk order;
    steps os;
    std::ptrdiff_t len;
    const std::int64_t* sorted;
    KILN_HD void operator()(std::ptrdiff_t k) const {
        // k: the k-th element of the sorted sequence; its line is k / len and its rank in the line k % len.
        const std::ptrdiff_t line = k / len, rank = k % len;
        out[offset_of(line * len + rank, order, os)] = sorted[k] % len;
    }
};

// ---- products ----

// C (m x n, column-major, leading dimension ldc) = op(A) op(B): the BLAS contract, on the host for the emulated
// device (cuBLAS's reference), in cuBLAS on CUDA. op(X) is X or its transpose.
template <class T>
struct gemm_kernel {
    bool ta, tb;
    std::ptrdiff_t m, n, k;
    const T* a;
    std::ptrdiff_t lda;
    const T* b;
    std::ptrdiff_t ldb;
    T* c;
    std::ptrdiff_t ldc;
    KILN_HD void operator()(std::ptrdiff_t e) const {
        const std::ptrdiff_t i = e % m, j = e / m;
        T acc = T(0);
        for (std::ptrdiff_t p = 0; p < k; ++p) {
            const T av = ta ? a[p + i * lda] : a[i + p * lda];
            const T bv = tb ? b[j + p * ldb] : b[p + j * ldb];
            if constexpr (std::is_same_v<T, bool>) acc = acc || (av && bv);
            else if constexpr (std::is_integral_v<T>)
                acc = static_cast<T>(::kiln::detail::kernels::wrapping_add(acc, ::kiln::detail::kernels::wrapping_mul(av, bv)));
            else acc += av * bv;
        }
        c[i + j * ldc] = acc;
    }
};

#if KILN_GPU_CUDA
inline cublasHandle_t blas_handle(int index = 0) {
    struct handles {
        cublasHandle_t h[gpu_memory::max_devices] = {};
    };
    static handles hs;
    static std::atomic_flag lock = ATOMIC_FLAG_INIT;
    while (lock.test_and_set(std::memory_order_acquire)) {}
    if (!hs.h[index]) {
        gpu_memory::scoped_device on(index);
        cublasHandle_t h{};
        if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
            cublasSetStream(h, gpu_memory::stream(index));
            hs.h[index] = h;
        }
    }
    lock.clear(std::memory_order_release);
    if (!hs.h[index]) throw device_error("kiln: device_error in 'matmul': cuBLAS could not be initialized");
    return hs.h[index];
}
#endif

// The column-major product C = op(A) op(B) through cuBLAS for float and double on CUDA, the kernel above otherwise.
template <class T>
void blas(bool ta, bool tb, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const T* a, std::ptrdiff_t lda,
          const T* b, std::ptrdiff_t ldb, T* c, std::ptrdiff_t ldc) {
#if KILN_GPU_CUDA
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T one = 1, zero = 0;
        const auto oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasStatus_t st;
        if constexpr (std::is_same_v<T, float>)
            st = cublasSgemm(blas_handle(), oa, ob, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, a,
                             static_cast<int>(lda), b, static_cast<int>(ldb), &zero, c, static_cast<int>(ldc));
        else
            st = cublasDgemm(blas_handle(), oa, ob, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, a,
                             static_cast<int>(lda), b, static_cast<int>(ldb), &zero, c, static_cast<int>(ldc));
        if (st != CUBLAS_STATUS_SUCCESS)
            throw device_error("kiln: device_error in 'matmul': cuBLAS failed (status " + std::to_string(static_cast<int>(st)) +
                               ")");
        return;
    }
#endif
    for_each_n(m * n, gemm_kernel<T>{ta, tb, m, n, k, a, lda, b, ldb, c, ldc});
}

}  // namespace gpu

struct thrust_device {
    static constexpr device_type kind = device_type::cuda;
    // True when this build runs the device on Thrust's OpenMP system with host memory (no GPU).
    static constexpr bool emulated = !KILN_GPU_CUDA;

    static void* allocate(std::size_t bytes) { return gpu_memory::allocate(bytes); }
    static void deallocate(void* p, std::size_t bytes) { gpu_memory::deallocate(p, bytes); }
    static void copy(void* dst, const void* src, std::size_t bytes) { gpu_memory::within(dst, src, bytes); }
    static void synchronize() { gpu_memory::synchronize(); }

    // Host-side orchestration only (the device's kernels are Thrust algorithms): tasks run in order on the caller.
    template <class F>
    static void parallel_for(int tasks, F&& f) {
        for (int t = 0; t < tasks; ++t) f(t);
    }

    // C (row-major m x n) = A B. The operands are read in place when one of their strides is 1 (a transposed
    // operand is passed as transposed), copied to row-major otherwise.
    template <class T>
    static void gemm(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, detail::matrix_ref<T> a,
                     detail::matrix_ref<T> b) {
        if (m == 0 || n == 0) return;
        if (k == 0) {
            fill(detail::strided<T>(c, dims{m, n}, dims{n, 1}), T(0));
            return;
        }
        gpu::buffer<T> ca(needs_copy(a, m, k) ? m * k : 0), cb(needs_copy(b, k, n) ? k * n : 0);
        if (needs_copy(a, m, k)) a = row_major_copy(a, m, k, ca.p);
        if (needs_copy(b, k, n)) b = row_major_copy(b, k, n, cb.p);
        // Row-major C is column-major C^T (n x m, leading dimension n) = B^T A^T. A row-major operand is its own
        // transpose in column-major terms, so it is passed as is; a column-major one is passed transposed.
        const bool b_row = row_layout(b, k, n), a_row = row_layout(a, m, k);
        const std::ptrdiff_t ldb = b_row ? (k == 1 ? n : b.rs) : (n == 1 ? k : b.cs);
        const std::ptrdiff_t lda = a_row ? (m == 1 ? k : a.rs) : (k == 1 ? m : a.cs);
        gpu::blas(!b_row, !a_row, n, m, k, b.data, ldb, a.data, lda, c, n);
    }

    template <class T, class R>
    static void reduce(detail::fold_kind kind, const detail::strided<const T>& x, const dims& keep, R* out,
                       bool mean = false, std::ptrdiff_t count = 0) {
        const std::ptrdiff_t m = keep.size();
        if (m == 0) return;
        const std::ptrdiff_t n = x.shape.size();
        const bool extremum = kind == detail::fold_kind::max || kind == detail::fold_kind::min;
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
        if (n == 0) {  // an empty sum is 0, an empty product 1 (extrema over nothing are refused by the caller)
            fill(detail::strided<R>(out, dims{m}, dims{1}), static_cast<R>(kind == detail::fold_kind::prod ? 1 : 0));
            return;
        }
        const gpu::reduction_order o = gpu::order_for(x, keep);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{o.red});
        auto run = [&](auto load, auto op, auto done) {
            const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), load);
            ::thrust::reduce_by_key(gpu::policy(), keys, keys + n, values, ::thrust::make_discard_iterator(),
                                    ::thrust::make_transform_output_iterator(out, done), ::thrust::equal_to<std::ptrdiff_t>(),
                                    op);
        };
        if (extremum) {
            run(gpu::reduce_load<T, T>{x.data, o.order, o.s}, gpu::fold_pick<T>{kind == detail::fold_kind::max},
                gpu::finish<T, R, T>{false, 1});
        } else if (kind == detail::fold_kind::sum) {
            run(gpu::reduce_load<T, Acc>{x.data, o.order, o.s}, gpu::fold_add<Acc>{}, gpu::finish<Acc, R, T>{mean, count});
        } else {
            run(gpu::reduce_load<T, Acc>{x.data, o.order, o.s}, gpu::fold_mul<Acc>{}, gpu::finish<Acc, R, T>{mean, count});
        }
    }

    template <class T>
    static void arg_reduce(bool is_max, const detail::strided<const T>& x, const dims& keep, std::int64_t* out) {
        const std::ptrdiff_t m = keep.size(), n = x.shape.size();
        if (m == 0 || n == 0) return;
        const gpu::reduction_order o = gpu::order_for(x, keep);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{o.red});
        const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0),
                                                              gpu::arg_load<T>{x.data, o.order, o.s, o.red});
        ::thrust::reduce_by_key(gpu::policy(), keys, keys + n, values, ::thrust::make_discard_iterator(),
                                ::thrust::make_transform_output_iterator(out, gpu::pos_of{}),
                                ::thrust::equal_to<std::ptrdiff_t>(), gpu::arg_pick<T>{is_max});
    }

    template <class T, class U>
    static void scan(bool product, const detail::strided<const T>& x, int axis, bool reverse, U* out) {
        const std::ptrdiff_t n = x.shape.size(), len = x.shape[axis];
        if (n == 0) return;
        const gpu::lines l = gpu::lines_of(x, axis);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{len});
        const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0),
                                                              gpu::scan_load<T, U>{x.data, l.order, l.s, len, reverse});
        gpu::buffer<U> tmp(n);
        ::thrust::inclusive_scan_by_key(gpu::policy(), keys, keys + n, values, tmp.p, ::thrust::equal_to<std::ptrdiff_t>(),
                                        gpu::scan_op<U>{product});
        const gpu::scan_store<U> store{out, l.order, l.os, len, reverse};
        gpu::for_each_n(n, gpu::scan_scatter<U>{store, tmp.p});
    }

    template <class U, class T>
    static void copy_strided(const detail::strided<U>& out, const detail::strided<const T>& in) {
        const std::ptrdiff_t n = out.shape.size();
        if (n == 0) return;
        if constexpr (std::is_same_v<U, T>) {
            if (detail::is_row_major(out) && detail::is_row_major(in)) {
                gpu_memory::within(static_cast<void*>(out.data), static_cast<const void*>(in.data),
                                   static_cast<std::size_t>(n) * sizeof(T));
                return;
            }
        }
        gpu::for_each_n(n, gpu::copy_kernel<U, T>{gpu::walk_of(out.shape), out.data, gpu::steps_of(out.strides), in.data,
                                                  gpu::steps_of(in.strides)});
    }

    template <class U>
    static void fill(const detail::strided<U>& out, U v) {
        gpu::for_each_n(out.shape.size(), gpu::fill_kernel<U>{gpu::walk_of(out.shape), out.data, gpu::steps_of(out.strides), v});
    }

    template <class T, class I, class U>
    static void gather_along(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                             std::string_view op) {
        gpu::fault_check fc;
        dims xs = x.strides;
        xs[axis] = 0;
        gpu::for_each_n(index.shape.size(),
                        gpu::gather_along_kernel<T, I, U>{x.data, gpu::steps_of(xs), x.shape[axis], x.strides[axis], index.data,
                                                          gpu::walk_of(index.shape), gpu::steps_of(index.strides), out, fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void scatter_add_along(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis,
                                  const dims& shape, U* out, std::string_view op) {
        fill(detail::strided<U>(out, shape, detail::contiguous_strides(shape)), U(0));
        gpu::fault_check fc;
        dims cs = detail::contiguous_strides(shape);
        const std::ptrdiff_t step = cs[axis];
        cs[axis] = 0;
        gpu::for_each_n(index.shape.size(),
                        gpu::scatter_along_kernel<T, I, U>{g.data, gpu::steps_of(g.strides), index.data, gpu::walk_of(index.shape),
                                                           gpu::steps_of(index.strides), gpu::steps_of(cs), shape[axis], step, out,
                                                           fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void take(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                     std::string_view op) {
        dims os{};
        gpu::steps xs;
        int r = 0;
        for (int d = 0; d < axis; ++d) xs.s[r] = x.strides[d], os[r++] = x.shape[d];
        for (int d = 0; d < index.shape.rank; ++d) xs.s[r] = 0, os[r++] = index.shape[d];
        for (int d = axis + 1; d < x.shape.rank; ++d) xs.s[r] = x.strides[d], os[r++] = x.shape[d];
        os.rank = r;
        gpu::fault_check fc;
        gpu::for_each_n(os.size(), gpu::take_kernel<T, I, U>{x.data, gpu::walk_of(os), xs, axis, index.shape.rank, x.shape[axis],
                                                             x.strides[axis], index.data, gpu::steps_of(index.strides), out,
                                                             fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void take_add(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis, const dims& shape,
                         U* out, std::string_view op) {
        fill(detail::strided<U>(out, shape, detail::contiguous_strides(shape)), U(0));
        const dims cs = detail::contiguous_strides(shape);
        gpu::steps os;
        int r = 0;
        for (int d = 0; d < axis; ++d) os.s[r++] = cs[d];
        for (int d = 0; d < index.shape.rank; ++d) os.s[r++] = 0;
        for (int d = axis + 1; d < shape.rank; ++d) os.s[r++] = cs[d];
        gpu::fault_check fc;
        gpu::for_each_n(g.shape.size(), gpu::take_add_kernel<T, I, U>{g.data, gpu::walk_of(g.shape), gpu::steps_of(g.strides), os,
                                                                      axis, index.shape.rank, shape[axis], cs[axis], index.data,
                                                                      gpu::steps_of(index.strides), out, fc.f.p});
        fc.raise_if_hit(op);
    }

    template <class T>
    static void sort_order(const detail::strided<const T>& x, int axis, bool descending, std::int64_t* out) {
        const std::ptrdiff_t n = x.shape.size(), len = x.shape[axis];
        if (n == 0) return;
        const gpu::lines l = gpu::lines_of(x, axis);
        gpu::buffer<std::int64_t> pos(n);
        ::thrust::sequence(gpu::policy(), pos.p, pos.p + n);
        ::thrust::stable_sort(gpu::policy(), pos.p, pos.p + n, gpu::line_less<T>{x.data, l.order, l.s, len, descending});
        gpu::for_each_n(n, gpu::order_store{out, l.order, l.os, len, pos.p});
    }

    // ---- beyond the interface: eager mode's elementwise ops ----

    // out = expr over the strided inputs (`in`: one strided view per leaf of expr's unique nodes, in their order).
    template <class E, class R, class... L>
    static void run_elementwise(const E& expr, const detail::strided<R>& out, const std::tuple<detail::strided<const L>...>& in) {
        run_elementwise_roots(std::tuple<detail::strided<R>>(out), in, expr);
    }

    // Several roots in one pass, each into its output (all of one shape): an optimizer's update of a parameter and
    // its slots is one kernel.
    template <class... R, class... L, class... Roots>
    static void run_elementwise_roots(const std::tuple<detail::strided<R>...>& outs,
                                      const std::tuple<detail::strided<const L>...>& in, const Roots&... roots) {
        static_assert(sizeof...(R) == sizeof...(Roots), "kiln: one output per root");
        using list = detail::unique_nodes_t<Roots...>;
        constexpr std::size_t NL = sizeof...(L);
        const dims& shape = std::get<0>(outs).shape;
        const std::ptrdiff_t n = shape.size();
        if (n == 0) return;
        gpu::eval_kernel<list, NL, Roots...> k{detail::root_pack<Roots...>(roots...), gpu::walk_of(shape), {}, {}, {}, {}, true};
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((k.out[J] = static_cast<void*>(std::get<J>(outs).data), k.out_steps[J] = gpu::steps_of(std::get<J>(outs).strides),
              k.flat = k.flat && detail::is_row_major(std::get<J>(outs))),
             ...);
        }(std::index_sequence_for<Roots...>{});
        const int r = shape.rank;
        auto bind = [&](std::size_t j, const auto& v) {
            k.in[j] = v.data;
            // The operand's strides against the result's dimensions: 0 where it broadcasts.
            for (int d = 0; d < r; ++d) {
                const int e = d - (r - v.shape.rank);
                k.in_steps[j].s[d] = e < 0 || v.shape[e] == 1 ? 0 : v.strides[e];
            }
            k.flat = k.flat && v.shape == shape && detail::is_row_major(v);
        };
        [&]<std::size_t... J>(std::index_sequence<J...>) { (bind(J, std::get<J>(in)), ...); }(std::make_index_sequence<NL>{});
        gpu::for_each_n(n, k);
    }

private:
    // Whether BLAS can read a rows x cols operand in place: row-major (unit column stride, rows at least a row
    // apart) or column-major. (Negative and broadcast strides are copied first.)
    template <class T>
    static bool row_layout(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return (a.cs == 1 || cols == 1) && (rows == 1 || a.rs >= cols);
    }
    template <class T>
    static bool col_layout(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return (a.rs == 1 || rows == 1) && (cols == 1 || a.cs >= rows);
    }
    template <class T>
    static bool needs_copy(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return !row_layout(a, rows, cols) && !col_layout(a, rows, cols);
    }
    template <class T>
    static detail::matrix_ref<T> row_major_copy(detail::matrix_ref<T> a, std::ptrdiff_t rows, std::ptrdiff_t cols, T* buf) {
        copy_strided(detail::strided<T>(buf, dims{rows, cols}, dims{cols, 1}),
                     detail::strided<const T>(a.data, dims{rows, cols}, dims{a.rs, a.cs}));
        return detail::matrix_ref<T>{buf, cols, 1};
    }
};

static_assert(device_backend<thrust_device>, "kiln: thrust_device must implement the device interface");

}  // namespace backend
}  // namespace kiln
