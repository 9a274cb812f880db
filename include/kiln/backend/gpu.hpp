#pragma once
// Whether kiln's GPU device is compiled in, and the functions about it that every program has (they answer "no
// GPU" where it is not). KILN_GPU turns the device on: the CMake targets kiln::cuda (nvcc) and kiln::gpu_emulated (a
// host compiler on Thrust's OpenMP system) define it. docs/gpu.md.
#include "../core/device.hpp"

#if defined(KILN_GPU) && KILN_GPU
#include "thrust/memory.hpp"
#define KILN_HAS_GPU 1
#else
#define KILN_HAS_GPU 0
#endif

namespace kiln {

// Whether this program was compiled with kiln's GPU device (KILN_GPU).
inline constexpr bool gpu_compiled_in = KILN_HAS_GPU;

// True when this build runs the GPU device on Thrust's OpenMP system with host memory (the emulated device that
// tests the device's code on machines without a GPU): kiln::cuda is then cuda:0 (emulated).
inline constexpr bool cuda_emulated() {
#if KILN_HAS_GPU
    return !KILN_GPU_CUDA;
#else
    return false;
#endif
}

// How many CUDA devices kiln can use: 0 without KILN_GPU or without a GPU; 1 on the emulated device.
inline int device_count() {
#if KILN_HAS_GPU
    return backend::gpu_memory::count();
#else
    return 0;
#endif
}
inline bool cuda_available() { return device_count() > 0; }

// Waits until every device's queued work is done (GPU ops are asynchronous; for timing).
inline void synchronize() {
#if KILN_HAS_GPU
    for (int i = 0, n = device_count(); i < n; ++i) backend::gpu_memory::synchronize(i);
#endif
}

// Bytes in GPU tensors now and at most at once, and how many allocations were made (zeros where the device is not
// compiled in).
inline gpu_memory_stats cuda_memory_stats() {
#if KILN_HAS_GPU
    auto& c = backend::gpu_memory::stats_of();
    return {c.allocated.load(), c.peak.load(), c.count.load()};
#else
    return {};
#endif
}

}  // namespace kiln
