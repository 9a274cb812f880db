#pragma once
// kiln::backend::cpu_device: the CPU's implementation of the device interface (backend/device.hpp). Its kernels
// are the CPU backend's only ones: one matrix product (matmul.hpp), one reduction engine (reduce.hpp), one scan
// (scan.hpp), one strided copy (copy.hpp), the gathers, scatters and sort order of gather.hpp, memory from the caching allocator and work spread by the thread pool.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../core/allocator.hpp"
#include "../../ops/random.hpp"
#include "../device.hpp"
#include "copy.hpp"
#include "gather.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "scan.hpp"
#include "thread_pool.hpp"

namespace kiln {
namespace backend {

struct cpu_device {
    static constexpr device_type kind = device_type::cpu;

    static void* allocate(std::size_t bytes) { return detail::caching_allocator::instance().allocate(bytes); }
    static void deallocate(void* p, std::size_t bytes) { detail::caching_allocator::instance().release(p, bytes); }
    static void copy(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
    // Between the host and the device's memory: the same memory here.
    static void to_host(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
    static void from_host(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
    static void queue_from_host(void* dst, const void* src, std::size_t bytes) { std::memmove(dst, src, bytes); }
    static void synchronize() noexcept {}  // CPU work is done when its call returns

    template <class F>
    static void parallel_for(int tasks, F&& f) {
        detail::thread_pool::instance().parallel_for(tasks, f);
    }

    template <class T>
    static void gemm(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const detail::matrix_ref<T>& a,
                     const detail::matrix_ref<T>& b) {
        detail::gemm(c, m, n, k, a, b);
    }

    template <class T, class R>
    static void reduce(detail::fold_kind kind, const detail::strided<const T>& x, const dims& keep, R* out,
                       bool mean = false, std::ptrdiff_t count = 0) {
        detail::reduce_into(kind, x, keep, out, mean, count);
    }

    template <class T>
    static void arg_reduce(bool is_max, const detail::strided<const T>& x, const dims& keep, std::int64_t* out) {
        detail::arg_reduce_into(is_max, x, keep, out);
    }

    template <class T, class U>
    static void scan(bool product, const detail::strided<const T>& x, int axis, bool reverse, U* out) {
        detail::scan_into(product, x, axis, reverse, out);
    }

    template <class U, class T>
    static void copy_strided(const detail::strided<U>& out, const detail::strided<const T>& in) {
        detail::strided_copy(out, in);
    }
    // out += in, element by element (in laid out against out's dimensions, as for copy_strided).
    template <class U, class T>
    static void add_strided(const detail::strided<U>& out, const detail::strided<const T>& in) {
        detail::strided_copy<U, T, true>(out, in);
    }

    // Dropout (ops/random.hpp): out[i] = x[i] kept or dropped by the counter-based draw of key (seed, counter), for
    // the elements in row-major order; out is contiguous. A row-major x runs a branch-free loop that vectorizes
    // (32-bit hashes); above parallel_threshold() it is split over the thread pool.
    template <class U, class T>
    static void dropout(U* out, const detail::strided<const T>& x, const std::int64_t* key, std::ptrdiff_t key_stride, double p) {
        namespace r = ops::detail_random;
        static_assert(std::is_same_v<U, T>, "kiln: internal: dropout's result has its input's element type");
        const std::ptrdiff_t n = x.shape.numel();
        if (n == 0) return;
        const std::uint64_t stream = r::stream(static_cast<std::uint64_t>(key[0]), static_cast<std::uint64_t>(key[key_stride]));
        const r::keep_rule rule = r::rule_of(p);
        const T scale = static_cast<T>(rule.scale);
        const std::uint32_t threshold = rule.threshold;
        const bool row_major = detail::is_row_major(x);
        auto run = [&](std::ptrdiff_t lo, std::ptrdiff_t hi) {
            while (lo < hi) {
                const auto block = static_cast<std::uint64_t>(lo) >> 32;
                const std::ptrdiff_t end = std::min<std::ptrdiff_t>(hi, static_cast<std::ptrdiff_t>((block + 1) << 32));
                const std::uint32_t k = r::block_key(stream, block);
                if (row_major) {
                    U* __restrict o = out + lo;
                    const T* __restrict xs = x.data + lo;
                    const auto first = static_cast<std::uint32_t>(lo);
                    for (std::ptrdiff_t t = 0, m = end - lo; t < m; ++t)
                        o[t] = r::dropped<T>(xs[t], k, first + static_cast<std::uint32_t>(t), threshold, scale);
                } else {
                    for (std::ptrdiff_t i = lo; i < end; ++i) {
                        std::ptrdiff_t at = 0, rem = i;
                        for (int d = x.shape.rank - 1; d >= 0; --d) {
                            at += (rem % x.shape[d]) * x.strides[d];
                            rem /= x.shape[d];
                        }
                        out[i] = r::dropped<T>(x.data[at], k, static_cast<std::uint32_t>(i), threshold, scale);
                    }
                }
                lo = end;
            }
        };
        const std::ptrdiff_t chunk = std::ptrdiff_t{1} << 16;
        if (n < parallel_threshold()) return run(0, n);
        const int tasks = static_cast<int>((n + chunk - 1) / chunk);
        parallel_for(tasks, [&](int t) { run(t * chunk, std::min(n, (t + 1) * chunk)); });
    }

    // Every element of `out` set to v.
    template <class U>
    static void fill(const detail::strided<U>& out, U v) {
        if (detail::is_row_major(out)) {  // (one loop that vectorizes)
            std::fill_n(out.data, out.shape.numel(), v);
            return;
        }
        dims none{};  // zero strides: v repeated
        none.rank = out.shape.rank;
        detail::strided_copy(out, detail::strided<const U>(&v, out.shape, none));
    }

    // take_along_axis and its gradient (a scatter-add into a zeroed `shape`); take (numpy.take along an axis) and
    // its gradient. Indices are checked (negative ones count from the end); `op` names the op in the error.
    template <class T, class I, class U>
    static void gather_along(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                             std::string_view op) {
        detail::gather_along_into(x, index, axis, out, op);
    }
    template <class T, class I, class U>
    static void scatter_add_along(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis,
                                  const dims& shape, U* out, std::string_view op) {
        detail::scatter_add_along_into(g, index, axis, shape, out, op);
    }
    template <class T, class I, class U>
    static void take(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                     std::string_view op) {
        detail::take_into(x, index, axis, out, op);
    }
    template <class T, class I, class U>
    static void take_add(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis,
                         const dims& shape, U* out, std::string_view op) {
        detail::take_add_into(g, index, axis, shape, out, op);
    }

    // The stable order of each line along `axis` (argsort): NaN last; largest first when descending.
    template <class T>
    static void sort_order(const detail::strided<const T>& x, int axis, bool descending, std::int64_t* out) {
        detail::sort_order_into(x, axis, descending, out);
    }
};

static_assert(device_backend<cpu_device>, "kiln: cpu_device must implement the device interface");

}  // namespace backend
}  // namespace kiln
