#pragma once
// kiln::backend::cpu_device: the CPU's implementation of the device interface (backend/device.hpp). Its kernels
// are the CPU backend's only ones: one matrix product (matmul.hpp), one reduction engine (reduce.hpp), one scan
// (scan.hpp), one strided copy (copy.hpp), the gathers, scatters and sort order of gather.hpp, memory from the caching allocator and work spread by the thread pool.
#include <cstring>

#include "../../core/allocator.hpp"
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

    // Every element of `out` set to v.
    template <class U>
    static void fill(const detail::strided<U>& out, U v) {
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
