#pragma once
// The main of the GPU device's doctest programs (test/gpu.cpp, test/gpu_modes.cpp, test/gpu_cuda.cpp): skipped (exit
// 77, which CTest reads as "skipped") where no CUDA device exists, otherwise the doctest cases, after a line that
// says which device they run on.
#include <cstdio>

#include <doctest/doctest.h>

#include <kiln/backend/gpu.hpp>

namespace kiln_test {

inline int gpu_main(const char* program, int argc, char** argv) {
    if (!kiln::cuda_available()) {
        std::printf("%s: skipped: no CUDA device on this machine (kiln::cuda_available() is false)\n", program);
        return 77;
    }
    std::printf("%s: running on %s\n", program,
                kiln::cuda_emulated() ? "the emulated device (Thrust's OpenMP system)" : "CUDA");
    doctest::Context ctx(argc, argv);
    return ctx.run();
}

}  // namespace kiln_test
