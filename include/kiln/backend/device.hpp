#pragma once
// The device interface: what a backend provides so that graph mode's plan, eager mode's ops and function mode's
// buffer plan run on it. A backend is a struct of static functions, in the spirit of Eigen's devices and Thrust's
// execution policies; backend/cpu/device.hpp is the first implementation (kiln::backend::cpu_device) and the CUDA
// device is to be the second. Ops never hold kernels of their own: a structural op's `compute` is a template on
// the device and calls the device's kernel (graph/structural/matmul.hpp is the smallest example).
//
// What a device provides (checked by the concept below):
//   kind                               the device_type it serves
//   allocate(bytes), deallocate(p, bytes)
//                                      device memory (the CPU's caching allocator)
//   copy(dst, src, bytes)              raw bytes within the device; synchronize() waits for queued work
//   to_host, from_host (dst, src, bytes)
//                                      raw bytes between the host and the device (to_host waits for queued work)
//   queue_from_host(dst, src, bytes)   from the host, queued behind the device's work without waiting (src may go
//                                      when it returns)
//   parallel_for(tasks, f)             f(0 .. tasks - 1), spread over the device's workers
//   gemm(c, m, n, k, a, b)             C = A B with strided operands (matrix_ref), C row-major
//   reduce(kind, x, keep, out)         sums, products, extrema over the axes where keep is 1 (and means)
//   arg_reduce(is_max, x, keep, out)   positions of extrema along one axis
//   scan(product, x, axis, reverse, out)
//                                      running sums or products along one axis (cumsum, cumprod)
//   copy_strided(out, in)              a strided copy with broadcasting and dtype conversion
//   add_strided(out, in)               out += in, strided (col2im: windows added back into an image)
//   fill(out, v)                       every element of a strided view set to v
//   gather_along, scatter_add_along    take_along_axis and its gradient; take, take_add: numpy.take and its
//   take, take_add                     gradient (indices checked, negative ones from the end)
//   dropout(out, x, key, key_stride, p)  x's elements (row-major) dropped or kept by the counter-based draws of an
//                                      int64 key (seed, counter) in device memory (ops/random.hpp)
//   sort_order(x, axis, descending, out)
//                                      the stable order of each line (argsort), NaN last
//   gemm_strided_batched(c, batches, m, n, k, a, sa, b, sb)
//                                      optional: batches of products one stride apart in one call (cuBLAS's);
//                                      false leaves them to gemm, one by one
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "../core/device.hpp"
#include "../expr/feed.hpp"
#include "../ops/matmul.hpp"  // matrix_ref
#include "../ops/reduce.hpp"  // fold_kind

namespace kiln {
namespace backend {

template <class D>
concept device_backend =
    requires(void* p, const void* q, std::size_t bytes, float* c, detail::matrix_ref<float> a,
             const detail::strided<const float>& x, const detail::strided<float>& y, const dims& keep, std::int64_t* pos,
             void (*task)(int)) {
        { D::kind } -> std::convertible_to<device_type>;
        { D::allocate(bytes) } -> std::same_as<void*>;
        D::deallocate(p, bytes);
        D::copy(p, q, bytes);
        D::to_host(p, q, bytes);
        D::from_host(p, q, bytes);
        D::queue_from_host(p, q, bytes);
        D::synchronize();
        D::parallel_for(2, task);
        D::gemm(c, std::ptrdiff_t{1}, std::ptrdiff_t{1}, std::ptrdiff_t{1}, a, a);
        D::reduce(detail::fold_kind::sum, x, keep, c);
        D::arg_reduce(true, x, keep, pos);
        D::scan(false, x, 0, false, c);
        D::copy_strided(y, x);
        D::add_strided(y, x);
        D::fill(y, 0.0f);
        D::gather_along(x, detail::strided<const std::int64_t>{}, 0, c, "");
        D::scatter_add_along(x, detail::strided<const std::int64_t>{}, 0, keep, c, "");
        D::take(x, detail::strided<const std::int64_t>{}, 0, c, "");
        D::take_add(x, detail::strided<const std::int64_t>{}, 0, keep, c, "");
        D::sort_order(x, 0, false, pos);
        D::dropout(c, x, pos, std::ptrdiff_t{1}, 0.5);
    };

}  // namespace backend
}  // namespace kiln
