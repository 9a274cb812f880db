#pragma once
// A CUDA graph captured from a piece of host code that queues device work (function/executor.hpp captures a traced
// call with it): the work is recorded once and replayed by one cudaGraphLaunch, whose host cost is a few
// microseconds for the whole graph instead of a few per kernel. CUDA only (the emulated device has no graphs).
//
// The capture runs on a private stream of the capturing thread (gpu_memory::capturing()), so that other threads'
// work on the device's own stream is neither recorded nor held up; its device memory comes from the graph's pool,
// whose blocks keep their addresses for every replay. Code that cannot be captured (a copy to the host, a
// synchronization, an allocation by a library) fails the capture, and capture() says so: nothing was run then.
#include <string>
#include <utility>

#include "blas.hpp"
#include "memory.hpp"

#if KILN_GPU_CUDA

namespace kiln {
namespace backend {
namespace gpu_memory {

// The capturing thread's private stream on device `index`.
inline cudaStream_t capture_stream(int index) {
    struct streams {
        cudaStream_t s[max_devices] = {};
        ~streams() {
            for (cudaStream_t x : s)
                if (x) cudaStreamDestroy(x);
        }
    };
    static thread_local streams st;
    if (!st.s[index]) {
        scoped_device on(index);
        check_cuda("capture stream", cudaStreamCreateWithFlags(&st.s[index], cudaStreamNonBlocking));
    }
    return st.s[index];
}

class cuda_graph {
public:
    explicit cuda_graph(int index) : index_(index) { pool_.index = index; }
    cuda_graph(const cuda_graph&) = delete;
    cuda_graph& operator=(const cuda_graph&) = delete;
    ~cuda_graph() {
        if (exec_) cudaGraphExecDestroy(exec_);  // (a launch in flight completes first: CUDA frees it then)
        pool_.release();                          // stream-ordered after every launch
    }

    // Records what `record()` queues on device index_ (with the pool's memory). False when the capture failed, with
    // the reason in `why`; record()'s exceptions are caught then.
    template <class F>
    bool capture(F&& record, std::string& why) {
        scoped_device on(index_);
        const cudaStream_t s = capture_stream(index_);
        (void)gpu::capture_blas_handle(index_, s);  // made before the capture (its creation allocates)
        if (const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
            (void)cudaGetLastError();
            why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
            return false;
        }
        bool ok = true;
        {
            const capture_scope scope(&pool_, s, index_);
            try {
                std::forward<F>(record)();
            } catch (const std::exception& x) {
                ok = false;
                why = x.what();
            } catch (...) {
                ok = false;
                why = "an exception";
            }
        }
        cudaGraph_t g = nullptr;
        const cudaError_t e = cudaStreamEndCapture(s, &g);
        if (ok && e != cudaSuccess) why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
        ok = ok && e == cudaSuccess && g;
        if (ok) {
            const cudaError_t i = cudaGraphInstantiate(&exec_, g, 0);
            if (i != cudaSuccess) {
                why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(i);
                exec_ = nullptr;
                ok = false;
            }
        }
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();  // (a failed capture's errors are not sticky: clear them)
        if (ok) cudaGraphUpload(exec_, own_stream(index_));
        return ok;
    }

    // Queues one replay on the device's own stream.
    void launch() const {
        scoped_device on(index_);
        check_cuda("cudaGraphLaunch", cudaGraphLaunch(exec_, own_stream(index_)));
    }

    int index() const noexcept { return index_; }
    capture_pool& pool() noexcept { return pool_; }

private:
    int index_ = 0;
    capture_pool pool_;
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace gpu_memory
}  // namespace backend
}  // namespace kiln

#endif
