#pragma once
// The GPU device's kernels (backend/thrust/device.hpp runs them): the launch, the functors Thrust applies per
// element, the layouts they carry to the device (walk, steps), copies and fills, reductions' orderings, and the index
// check of the gathers. Scans, gathers, scatters and sorts are in line_kernels.hpp; the BLAS call is in blas.hpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include <thrust/copy.h>
#include <thrust/count.h>
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

#if KILN_GPU_CUDA && defined(__CUDACC__)
#include <cub/device/device_reduce.cuh>
#endif
#include <limits>

#include "../../core/error.hpp"
#include "../../expr/evaluate.hpp"
#include "../../expr/feed.hpp"
#include "../../expr/unique_nodes.hpp"
#include "../../ops/arithmetic.hpp"
#include "../../ops/matmul.hpp"
#include "../../ops/random.hpp"
#include "../../ops/reduce.hpp"
#include "../device.hpp"
#include "memory.hpp"


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
inline auto policy([[maybe_unused]] int index = gpu_memory::current_device()) {
#if KILN_GPU_CUDA
    return ::thrust::cuda::par_nosync.on(gpu_memory::stream(index));
#else
    return ::thrust::device;
#endif
}

#if KILN_GPU_CUDA && defined(__CUDACC__)
// f(i) for i in [0, n): one thread per element, a grid-stride loop past 2^16 blocks of 256. The functor stays in the
// parameter space: Thrust's for_each (CUB's) copied each eval_kernel into a 336-byte stack frame per thread (ptxas
// -v), where this kernel has none.
template <class F>
__global__ void __launch_bounds__(256) for_each_kernel(std::ptrdiff_t n, const __grid_constant__ F f) {
    const std::ptrdiff_t stride = static_cast<std::ptrdiff_t>(blockDim.x) * gridDim.x;
    for (std::ptrdiff_t i = static_cast<std::ptrdiff_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}
// for_each_kernel over [0, n) on stream s (a compiled group's kernel launches it on the stream it is handed).
template <class F>
void launch_for_each(std::ptrdiff_t n, const F& f, cudaStream_t s) {
    constexpr std::ptrdiff_t threads = 256, most_blocks = std::ptrdiff_t{1} << 16;
    const std::ptrdiff_t blocks = std::min((n + threads - 1) / threads, most_blocks);
    for_each_kernel<F><<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, s>>>(n, f);
    gpu_memory::check_cuda("kernel launch", cudaGetLastError());
}
#if defined(KILN_GPU_LAUNCH_COMPARE)
// Launches by Thrust's for_each_n instead, for comparison (bench/gpu_eager.cpp defines KILN_GPU_LAUNCH_COMPARE, so
// that both launches are compiled into it).
inline bool& launch_through_thrust() {
    static bool on = false;
    return on;
}
#endif
#endif

// f(i) for every i in [0, n) on the device's stream: one direct kernel launch on CUDA (no synchronization); Thrust's
// OpenMP system on the emulated device.
template <class F>
void for_each_n(std::ptrdiff_t n, const F& f) {
    if (n <= 0) return;
#if KILN_GPU_CUDA && defined(__CUDACC__)
#if defined(KILN_GPU_LAUNCH_COMPARE)
    if (launch_through_thrust()) {
        ::thrust::for_each_n(policy(), ::thrust::counting_iterator<std::ptrdiff_t>(0), n, f);
        gpu_memory::check_cuda("kernel launch", cudaGetLastError());
        return;
    }
#endif
    launch_for_each(n, f, gpu_memory::stream(gpu_memory::current_device()));
#else
    const gpu_memory::device_section work;  // (the emulated device: KILN_GPU_GUARD opens its memory to the kernel)
    ::thrust::for_each_n(policy(), ::thrust::counting_iterator<std::ptrdiff_t>(0), n, f);
#if KILN_GPU_CUDA
    gpu_memory::check_cuda("kernel launch", cudaGetLastError());
#endif
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

// Reduces each run of equal keys among keys[0, n) (values[i] with values[i + 1] ...) into out[run], on the device's
// stream. On CUDA through CUB directly: Thrust's reduce_by_key returns where its output ends, so it reads the count
// of runs back and waits for the device (it cannot be recorded in a CUDA graph either); here that count stays on the
// device, and the temporary storage comes from kiln's allocator. CUB's offsets are 32-bit up to 2^31 - 1 elements
// and 64-bit beyond (the count's type picks them); Thrust's own reduce_by_key is not compiled for CUDA at all (its
// kernels were more than half of the device code of the test suite's nvcc build).
template <class Keys, class Values, class Out, class Op>
void reduce_by_key(Keys keys, std::ptrdiff_t n, Values values, Out out, Op op) {
#if KILN_GPU_CUDA && defined(__CUDACC__)
    const auto run = [&](auto count) {
        buffer<decltype(count)> runs(1);
        const cudaStream_t s = gpu_memory::stream(gpu_memory::current_device());
        std::size_t temp = 0;
        gpu_memory::check_cuda("reduce", ::cub::DeviceReduce::ReduceByKey(nullptr, temp, keys, ::thrust::make_discard_iterator(),
                                                                          values, out, runs.p, op, count, s));
        buffer<unsigned char> storage(static_cast<std::ptrdiff_t>(temp));
        gpu_memory::check_cuda("reduce", ::cub::DeviceReduce::ReduceByKey(storage.p, temp, keys, ::thrust::make_discard_iterator(),
                                                                          values, out, runs.p, op, count, s));
    };
    if (n <= std::ptrdiff_t{std::numeric_limits<int>::max()})
        run(static_cast<int>(n));
    else
        run(static_cast<long long>(n));
#else
    ::thrust::reduce_by_key(policy(), keys, keys + n, values, ::thrust::make_discard_iterator(), out,
                            ::thrust::equal_to<std::ptrdiff_t>(), op);
#endif
}

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

// A stencil's test (copy_if over a mask).
struct is_true {
    KILN_HD bool operator()(bool b) const { return b; }
};

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
    // In flat mode, operands that repeat along the result (a bias over a matrix's rows): leaf j reads element
    // i % period[j] where period[j] is not 0 (a traced function's compiled group; eager ops leave it unset).
    bool periodic = false;
    std::ptrdiff_t period[NL > 0 ? NL : 1] = {};

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
            if (periodic)
                for (std::size_t j = 0; j < NL; ++j)
                    if (period[j] != 0) off[j] = i % period[j];
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

// out = in, or with Add out += in (col2im: one kernel offset's windows, which reach distinct elements).
template <class U, class T, bool Add = false>
struct copy_kernel {
    walk shape;
    U* out;
    steps os;
    const T* in;
    steps is;
    KILN_HD void operator()(std::ptrdiff_t i) const {
        U& o = out[offset_of(i, shape, os)];
        if constexpr (Add) o = detail::add_value(o, value_cast<U>(in[offset_of(i, shape, is)]));
        else o = value_cast<U>(in[offset_of(i, shape, is)]);
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

// Dropout (ops/random.hpp): element i (row-major) of x kept or dropped by the draw of the key, which the kernel
// reads from device memory (so a captured CUDA graph replays with the key's value at each replay).
template <class T>
struct dropout_kernel {
    walk shape;
    const T* x;
    steps xs;
    T* out;
    const std::int64_t* key;
    std::ptrdiff_t key_stride;
    std::uint32_t threshold;
    T scale;
    KILN_HD void operator()(std::ptrdiff_t i) const {
        namespace r = ops::detail_random;
        const std::uint64_t s = r::stream(static_cast<std::uint64_t>(key[0]), static_cast<std::uint64_t>(key[key_stride]));
        out[i] = r::dropped<T>(x[offset_of(i, shape, xs)], r::block_key(s, static_cast<std::uint64_t>(i) >> 32),
                               static_cast<std::uint32_t>(i), threshold, scale);
    }
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

}  // namespace gpu

}  // namespace backend
}  // namespace kiln
