#pragma once
// Memory of kiln's GPU device (kiln::cuda): allocation, copies to and from the host, the device's one stream, and
// statistics. Compiled only when KILN_GPU is defined (the CMake targets kiln::cuda and kiln::gpu_emulated define it).
//
// - Under nvcc (Thrust's CUDA system) memory comes from the device's stream-ordered pool (cudaMallocAsync on one
//   stream per device, the pool's release threshold raised so that freed blocks stay cached), and ops are
//   asynchronous on that stream: the host waits only when it reads values (item(), printing, .to(kiln::cpu)) or
//   calls kiln::synchronize().
// - With a host compiler and THRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP the device is *emulated*: the same Thrust
//   and dispatch code runs on Thrust's OpenMP system with host memory, so that every machine tests the device's
//   logic (tests run there; kiln::cuda_emulated() says which build this is).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <thrust/version.h>

#include "../../core/allocator.hpp"
#include "../../core/device.hpp"
#include "../../core/error.hpp"

#if !defined(THRUST_DEVICE_SYSTEM) || !defined(THRUST_DEVICE_SYSTEM_CUDA)
#error "kiln: KILN_GPU needs Thrust's configuration (include <thrust/version.h> first)."
#endif

#if THRUST_DEVICE_SYSTEM == THRUST_DEVICE_SYSTEM_CUDA
#define KILN_GPU_CUDA 1
#include <cuda_runtime.h>
#else
#define KILN_GPU_CUDA 0
#endif

#include "guard.hpp"

namespace kiln {

namespace backend {
namespace gpu_memory {

inline constexpr int max_devices = 16;

struct counters {
    std::atomic<std::size_t> allocated{0}, peak{0}, count{0};
};
inline counters& stats_of() {
    static counters c;
    return c;
}

#if KILN_GPU_CUDA
[[noreturn]] inline void throw_cuda(const char* what, cudaError_t e) {
    throw device_error(std::string("kiln: device_error in '") + what + "': " + cudaGetErrorName(e) + ": " +
                       cudaGetErrorString(e));
}
inline void check_cuda(const char* what, cudaError_t e) {
    if (e != cudaSuccess) [[unlikely]] {
        (void)cudaGetLastError();  // clear a non-sticky error so that later calls do not report it again
        throw_cuda(what, e);
    }
}
#endif

// How many devices kiln can use (0 when there is none; 1 for the emulated device).
inline int count() {
#if KILN_GPU_CUDA
    static const int n = [] {
        int c = 0;
        if (cudaGetDeviceCount(&c) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0;
        }
        return c > max_devices ? max_devices : c;
    }();
    return n;
#else
    // KILN_GPU_EMULATED_DEVICES (1 to 16, default 1): how many devices the emulated device shows, so that code for
    // several devices (cuda:1, ops across devices) is tested without them. They all compute on the host.
    static const int n = [] {
        const char* v = std::getenv("KILN_GPU_EMULATED_DEVICES");
        const int c = v && *v ? std::atoi(v) : 1;
        return c < 1 ? 1 : c > max_devices ? max_devices : c;
    }();
    return n;
#endif
}

// The device that a thread's device work goes to where no index is given (kernels, cuBLAS, scratch memory): the
// device of the op's operands, set for the op by device_scope below (eager ops, graph mode's runs, sessions,
// optimizer updates, traced functions' groups).
inline int& current_index() noexcept {
    static thread_local int i = 0;
    return i;
}
inline int current_device() noexcept { return current_index(); }

// Throws kiln::device_error unless device `d` exists.
inline void require(const device& d, const char* what) {
    const int n = count();
    if (n == 0)
        throw device_error(std::string("kiln: device_error in '") + what + "': no CUDA device is available on this "
                           "machine (cudaGetDeviceCount found none); use kiln::cpu, or check kiln::cuda_available() first");
    if (d.index < 0 || d.index >= n)
        throw device_error(std::string("kiln: device_error in '") + what + "': " + to_string(d) + " does not exist (" +
                           std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") + ": cuda:0 .. cuda:" +
                           std::to_string(n - 1) + ")");
}

#if KILN_GPU_CUDA
// The device's one stream, created with its pool configured on first use (stream() below: the stream a thread
// queues work on, which is another while it captures a CUDA graph).
inline cudaStream_t own_stream(int index) {
    struct state {
        cudaStream_t s[max_devices] = {};
        std::atomic<bool> ready[max_devices] = {};
    };
    static state st;
    if (!st.ready[index].load(std::memory_order_acquire)) {
        static std::atomic_flag lock = ATOMIC_FLAG_INIT;
        while (lock.test_and_set(std::memory_order_acquire)) {}
        if (!st.ready[index].load(std::memory_order_relaxed)) {
            int prev = 0;
            cudaGetDevice(&prev);
            cudaSetDevice(index);
            cudaStream_t s{};
            const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            if (e == cudaSuccess) {
                cudaMemPool_t pool{};
                if (cudaDeviceGetDefaultMemPool(&pool, index) == cudaSuccess) {
                    std::uint64_t keep = ~std::uint64_t{0};  // keep freed blocks cached (cudaMallocAsync's pool)
                    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
                }
                st.s[index] = s;
                st.ready[index].store(true, std::memory_order_release);
            }
            cudaSetDevice(prev);
            lock.clear(std::memory_order_release);
            check_cuda("cuda stream", e);
        } else {
            lock.clear(std::memory_order_release);
        }
    }
    return st.s[index];
}

// Capturing a CUDA graph (backend/thrust/capture.hpp, function/executor.hpp). While a thread captures, the device
// work it queues goes to a private stream of its own (what stream() answers on that thread), and the device memory
// it allocates comes from the capture's pool: blocks the captured graph owns, reused within the capture in stream
// order and kept, at the same addresses, for every replay. The pool gives them back to the device's pool when the
// graph goes.
struct capture_pool {
    int index = 0;
    std::unordered_map<void*, std::size_t> in_use;  // handed out, by size
    std::multimap<std::size_t, void*> idle;          // free for a later allocation of the capture
    std::vector<void*> blocks;                        // every block, freed with the pool
    bool leak = false;  // a block escaped the capture: nothing can be freed safely (see the executor)

    static std::size_t rounded(std::size_t bytes) { return ((bytes == 0 ? 1 : bytes) + 255) / 256 * 256; }
    void* take(std::size_t bytes) {
        const std::size_t n = rounded(bytes);
        auto it = idle.lower_bound(n);
        if (it != idle.end() && it->first <= 2 * n) {
            void* p = it->second;
            in_use.emplace(p, it->first);
            idle.erase(it);
            return p;
        }
        void* p = nullptr;
        // Stream-ordered memory on the device's own stream (not the capturing one): the graph is launched on that
        // stream, after this. (Relaxed for this call: a capturing thread may not make allocation calls otherwise.)
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        const cudaError_t e = cudaMallocAsync(&p, n, own_stream(index));
        cudaThreadExchangeStreamCaptureMode(&mode);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw device_error("kiln: device_error in 'allocate': cannot allocate " + std::to_string(bytes) +
                               " bytes on cuda:" + std::to_string(index) + " for a CUDA graph (" + cudaGetErrorString(e) + ")");
        }
        blocks.push_back(p);
        in_use.emplace(p, n);
        return p;
    }
    void give(void* p, std::size_t bytes) {
        auto it = in_use.find(p);
        if (it != in_use.end()) {
            idle.emplace(it->second, p);
            in_use.erase(it);
            return;
        }
        // A block from outside the capture freed during it: the graph may reuse it, so the pool keeps it.
        blocks.push_back(p);
        idle.emplace(rounded(bytes) > 256 ? rounded(bytes) : 256, p);
    }
    void release() noexcept {
        if (!leak)
            for (void* p : blocks) cudaFreeAsync(p, own_stream(index));
        blocks.clear();
        idle.clear();
        in_use.clear();
    }
    capture_pool() = default;
    capture_pool(const capture_pool&) = delete;
    capture_pool& operator=(const capture_pool&) = delete;
    ~capture_pool() { release(); }
};
struct capture_state {
    capture_pool* pool = nullptr;  // where this thread's device memory comes from (null: the device's pool)
    cudaStream_t stream = nullptr; // where its device work goes (null: the device's own stream)
    int index = -1;                // on which device
};
inline capture_state& capturing() noexcept {
    static thread_local capture_state s;
    return s;
}
// Sets the calling thread's capture state for the scope.
struct capture_scope {
    capture_state saved;
    capture_scope(capture_pool* pool, cudaStream_t s, int index) : saved(capturing()) { capturing() = {pool, s, index}; }
    ~capture_scope() { capturing() = saved; }
    capture_scope(const capture_scope&) = delete;
    capture_scope& operator=(const capture_scope&) = delete;
};

// The stream the calling thread queues device `index`'s work on.
inline cudaStream_t stream(int index) {
    const capture_state& c = capturing();
    if (c.stream && c.index == index) [[unlikely]] return c.stream;
    return own_stream(index);
}

// Makes `index` the calling thread's current device for the scope.
struct scoped_device {
    int prev = -1;
    explicit scoped_device(int index) {
        int cur = 0;
        cudaGetDevice(&cur);
        if (cur != index) {
            prev = cur;
            check_cuda("cudaSetDevice", cudaSetDevice(index));
        }
    }
    ~scoped_device() {
        if (prev >= 0) cudaSetDevice(prev);
    }
    scoped_device(const scoped_device&) = delete;
    scoped_device& operator=(const scoped_device&) = delete;
};
#else
struct scoped_device {
    explicit scoped_device(int) {}
};
#endif

// Device `index` is the calling thread's device (current_device(), and CUDA's current device) for the scope.
struct device_scope {
    int prev;
    scoped_device on;
    explicit device_scope(int index) : prev(current_index()), on(index) { current_index() = index; }
    ~device_scope() { current_index() = prev; }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
};

inline void note_allocation(std::size_t bytes) {
    counters& c = stats_of();
    const std::size_t now = c.allocated.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    std::size_t p = c.peak.load(std::memory_order_relaxed);
    while (now > p && !c.peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {}
    c.count.fetch_add(1, std::memory_order_relaxed);
}

#if KILN_GPU_CUDA
// Small blocks (at most 4 KiB: the results of small eager ops, a small model's activations) are cached per thread
// and device in front of cudaMallocAsync's pool, whose calls cost about a microsecond of host time each. A block
// freed here may still be read by a kernel queued on the device's stream; every later use of it is queued on the
// same stream, after that kernel, so handing it out again at once is safe (as the pool itself does).
struct small_blocks {
    static constexpr std::size_t limit = 4096, classes = limit / 256, depth = 64;
    std::array<std::array<std::vector<void*>, classes>, max_devices> free;
    static std::size_t class_of(std::size_t n) { return (n + 255) / 256 - 1; }
    ~small_blocks() { release_all(); }
    void release_all() noexcept {
        for (std::size_t d = 0; d < free.size(); ++d)
            for (auto& l : free[d]) {
                for (void* p : l) cudaFreeAsync(p, own_stream(static_cast<int>(d)));
                l.clear();
            }
    }
};
inline small_blocks* small_cache() { return detail::thread_instance<small_blocks>(); }
#endif

// `bytes` of device memory on device `index` (never null: a zero-byte request gets a small block).
inline void* allocate(std::size_t bytes, int index = current_device()) {
    const std::size_t n = bytes == 0 ? 256 : bytes;
#if KILN_GPU_CUDA
    if (capture_pool* cp = capturing().pool; cp && cp->index == index) [[unlikely]] {
        void* p = cp->take(n);
        note_allocation(bytes);
        return p;
    }
    if (n <= small_blocks::limit)
        if (small_blocks* c = small_cache()) {
            auto& list = c->free[static_cast<std::size_t>(index)][small_blocks::class_of(n)];
            if (!list.empty()) {
                void* p = list.back();
                list.pop_back();
                note_allocation(bytes);
                return p;
            }
        }
    scoped_device on(index);
    void* p = nullptr;
    const std::size_t rounded = n <= small_blocks::limit ? (small_blocks::class_of(n) + 1) * 256 : n;
    const cudaError_t e = cudaMallocAsync(&p, rounded, own_stream(index));
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        throw device_error("kiln: device_error in 'allocate': cannot allocate " + std::to_string(bytes) + " bytes on cuda:" +
                           std::to_string(index) + " (" + cudaGetErrorString(e) + ")");
    }
#else
    // The emulated device's memory is the host's, cached like the CPU's (freed blocks are reused, not faulted in
    // again).
    (void)index;
    void* p = nullptr;
    if (guarded_arena::enabled()) {  // KILN_GPU_GUARD: memory the host cannot touch outside the device's work
        p = guarded_arena::instance().allocate(n);
        if (!p)
            throw device_error("kiln: device_error in 'allocate': cannot allocate " + std::to_string(bytes) +
                               " bytes on cuda:0 (emulated, KILN_GPU_GUARD: the guarded arena is full)");
        note_allocation(bytes);
        return p;
    }
    try {
        p = detail::caching_allocator::instance().allocate(n);
    } catch (const std::bad_alloc&) {
        throw device_error("kiln: device_error in 'allocate': cannot allocate " + std::to_string(bytes) +
                           " bytes on cuda:0 (emulated)");
    }
#endif
    note_allocation(bytes);
    return p;
}

// `index`: the device `p` was allocated on; -1 when the caller does not know (a scratch buffer, a workspace freed
// outside its op): with more than one GPU it is then asked of CUDA.
inline void deallocate(void* p, std::size_t bytes, int index = -1) noexcept {
    if (!p) return;
#if KILN_GPU_CUDA
    if (index < 0) {
        index = 0;
        if (count() > 1) {
            cudaPointerAttributes a{};
            if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.device >= 0 && a.device < max_devices) index = a.device;
            else (void)cudaGetLastError();
        }
    }
    const std::size_t n = bytes == 0 ? 256 : bytes;
    if (capture_pool* cp = capturing().pool; cp && cp->index == index) [[unlikely]] {
        cp->give(p, n);
        stats_of().allocated.fetch_sub(bytes, std::memory_order_relaxed);
        return;
    }
    if (n <= small_blocks::limit)
        if (small_blocks* c = small_cache()) {
            auto& list = c->free[static_cast<std::size_t>(index)][small_blocks::class_of(n)];
            if (list.size() < small_blocks::depth) {
                list.push_back(p);
                stats_of().allocated.fetch_sub(bytes, std::memory_order_relaxed);
                return;
            }
        }
    scoped_device on(index);
    cudaFreeAsync(p, own_stream(index));
#else
    (void)index;
    if (guarded_arena::enabled()) guarded_arena::instance().release(p, bytes == 0 ? 256 : bytes);
    else detail::caching_allocator::instance().release(p, bytes == 0 ? 256 : bytes);
#endif
    stats_of().allocated.fetch_sub(bytes, std::memory_order_relaxed);
}

// Waits until the device's queued work is done.
inline void synchronize(int index = current_device()) {
#if KILN_GPU_CUDA
    if (count() == 0) return;
    check_cuda("synchronize", cudaStreamSynchronize(stream(index)));
#else
    (void)index;
#endif
}

// Device to host (waits for the device's queued work first), host to device, device to device (queued).
inline void to_host(void* dst, const void* src, std::size_t bytes, int index = current_device()) {
    if (bytes == 0) return;
#if KILN_GPU_CUDA
    scoped_device on(index);
    check_cuda("copy to host", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(index)));
    check_cuda("copy to host", cudaStreamSynchronize(stream(index)));
#else
    (void)index;
    const device_section work;
    std::memcpy(dst, src, bytes);
#endif
}
// Host to device, queued without waiting: the source is read before this returns (CUDA copies a pageable source to
// its staging memory first), so it may be a temporary of the caller's.
inline void from_host_queued(void* dst, const void* src, std::size_t bytes, int index = current_device()) {
    if (bytes == 0) return;
#if KILN_GPU_CUDA
    scoped_device on(index);
    check_cuda("copy to device", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(index)));
#else
    (void)index;
    const device_section work;
    std::memcpy(dst, src, bytes);
#endif
}
// Host to device, done when it returns (the source may be a temporary of the caller's).
inline void from_host(void* dst, const void* src, std::size_t bytes, int index = current_device()) {
    from_host_queued(dst, src, bytes, index);
#if KILN_GPU_CUDA
    if (bytes == 0) return;
    scoped_device on(index);
    check_cuda("copy to device", cudaStreamSynchronize(stream(index)));
#endif
}
inline void within(void* dst, const void* src, std::size_t bytes, int index = current_device()) {
    if (bytes == 0) return;
#if KILN_GPU_CUDA
    scoped_device on(index);
    check_cuda("copy on device", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(index)));
#else
    (void)index;
    const device_section work;
    std::memmove(dst, src, bytes);
#endif
}

// Returns cached blocks of the device's pool to the driver.
inline void trim() {
#if KILN_GPU_CUDA
    if (small_blocks* c = small_cache()) c->release_all();  // this thread's small blocks, as the CPU's cache does
    for (int i = 0, n = count(); i < n; ++i) {
        scoped_device on(i);
        cudaStreamSynchronize(own_stream(i));
        cudaMemPool_t pool{};
        if (cudaDeviceGetDefaultMemPool(&pool, i) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
    }
#endif
}

// kiln::empty_cache() trims the device's pool too.
inline const bool trim_registered = (detail::gpu_cache_trim = &trim, true);

}  // namespace gpu_memory
}  // namespace backend
}  // namespace kiln
