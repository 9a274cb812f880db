#pragma once
// What a compiled kernel of a fused group on kiln's GPU device includes (function/jit.hpp writes its source): the
// vocabulary's op structs and the device's elementwise kernel (backend/thrust/kernels.hpp), compiled by nvcc for a
// GPU or by a host compiler on Thrust's OpenMP system for the emulated device.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "../backend/thrust/kernels.hpp"
#include "../ops/ops.hpp"

namespace kiln::detail {

// Computes Roots over elements [0, n) of contiguous device operands: leaf K reads in[K] (element i, or element
// i % periods[K] of an operand that repeats along the group when periods[K] is not 0), root J writes out[J]; one
// kernel launch on `stream` (a cudaStream_t; Thrust's for_each on the emulated device, which has no stream). The
// kernel is the device's own eval_kernel, the one eager mode's ops run, with the whole group as its roots.
template <class... Roots>
void run_device_group(const void* const* in, void* const* out, const std::ptrdiff_t* periods, std::ptrdiff_t n,
                      [[maybe_unused]] void* stream) {
    using list = unique_nodes_t<Roots...>;
    using leaves = leaves_t<list>;
    backend::gpu::eval_kernel<list, leaves::size, Roots...> k{};
    k.roots = root_pack<Roots...>(Roots{}...);
    k.flat = true;
    [&]<class... L>(types<L...>) {
        std::size_t j = 0;
        ((k.in[j] = in[indexed_position<L>::value], k.period[j] = periods[indexed_position<L>::value],
          k.periodic = k.periodic || k.period[j] != 0, ++j), ...);
    }(leaves{});
    for (std::size_t j = 0; j < sizeof...(Roots); ++j) k.out[j] = out[j];
    if (n <= 0) return;
#if KILN_GPU_CUDA
    backend::gpu::launch_for_each(n, k, static_cast<cudaStream_t>(stream));
#else
    ::thrust::for_each_n(::thrust::device, ::thrust::counting_iterator<std::ptrdiff_t>(0), n, k);
#endif
}

}  // namespace kiln::detail
