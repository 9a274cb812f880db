#pragma once
// Restores the thread count and the threading threshold that a test changes.
#include <cstddef>

#include <kiln/backend/cpu/thread_pool.hpp>

namespace kiln_test {

struct threads_guard {
    int threads = kiln::num_threads();
    std::ptrdiff_t threshold = kiln::parallel_threshold();
    ~threads_guard() {
        kiln::set_num_threads(threads);
        kiln::set_parallel_threshold(threshold);
    }
};

}  // namespace kiln_test
