#pragma once
// The emulated device's guard (KILN_GPU_GUARD=1 in the environment, read once at the first allocation): device
// memory comes from an arena that the host cannot read or write except inside the device's own work (its kernels,
// its Thrust algorithms and its copies, each a device_section). Host code that touches a device pointer directly,
// which works on the emulated device (host memory) and crashes on a GPU, then stops at once with a message naming
// the address. The test command runs the emulated device's tests under it.
//
// Found the first bug of its kind on a GPU: `ops::count`'s kernel stored the count from the host into device memory.
//
// Without the environment variable nothing changes: the emulated device's memory is the CPU's caching allocator.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#if defined(__unix__)
#include <csignal>
#include <sys/mman.h>
#include <unistd.h>
#define KILN_GPU_GUARD_SUPPORTED 1
#else
#define KILN_GPU_GUARD_SUPPORTED 0
#endif

namespace kiln::backend::gpu_memory {

class guarded_arena {
public:
    // The arena's address space (reserved, not committed: pages are committed when the device first writes them).
    static constexpr std::size_t reserve = std::size_t{64} << 30;
    static constexpr std::size_t align = 256;

    static bool enabled() {
#if KILN_GPU_GUARD_SUPPORTED && !KILN_GPU_CUDA
        static const bool on = [] {
            const char* v = std::getenv("KILN_GPU_GUARD");
            return v && *v && *v != '0';
        }();
        return on;
#else
        return false;
#endif
    }

    static guarded_arena& instance() {
        static guarded_arena* a = new guarded_arena;  // never destroyed: tensors may outlive statics
        return *a;
    }

    // A block of at least `bytes`, or nullptr when the arena is full.
    void* allocate(std::size_t bytes) {
        const std::size_t n = (bytes + align - 1) / align * align;
        std::lock_guard lock(m_);
        auto it = free_.find(n);
        if (it != free_.end() && !it->second.empty()) {
            void* p = it->second.back();
            it->second.pop_back();
            return p;
        }
        if (!base_ || top_ + n > reserve) return nullptr;
        void* p = base_ + top_;
        top_ += n;
#if KILN_GPU_GUARD_SUPPORTED
        if (open_ > 0) {  // inside another thread's device work: open like the rest (whole pages: the block may
                          // start inside a page that was opened before it)
            const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
            const std::uintptr_t from = reinterpret_cast<std::uintptr_t>(p) / page * page;
            const std::uintptr_t to = reinterpret_cast<std::uintptr_t>(p) + n;
            ::mprotect(reinterpret_cast<void*>(from), to - from, PROT_READ | PROT_WRITE);
        }
#endif
        return p;
    }
    void release(void* p, std::size_t bytes) {
        const std::size_t n = (bytes + align - 1) / align * align;
        std::lock_guard lock(m_);
        free_[n].push_back(p);
    }
    bool owns(const void* p) const {
        const auto* c = static_cast<const unsigned char*>(p);
        return base_ && c >= base_ && c < base_ + reserve;
    }

    // Device work begins (the arena becomes readable and writable) and ends (closed again when no other thread is
    // inside device work).
    void open() {
        std::lock_guard lock(m_);
#if KILN_GPU_GUARD_SUPPORTED
        if (open_++ == 0 && top_ > 0) ::mprotect(base_, top_, PROT_READ | PROT_WRITE);
#endif
    }
    void close() {
        std::lock_guard lock(m_);
#if KILN_GPU_GUARD_SUPPORTED
        if (--open_ == 0 && top_ > 0) ::mprotect(base_, top_, PROT_NONE);
#endif
    }

private:
    guarded_arena() {
#if KILN_GPU_GUARD_SUPPORTED
        void* p = ::mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return;
        base_ = static_cast<unsigned char*>(p);
        // A host access to the arena outside device work is a SIGSEGV inside it: say what it means, then stop.
        struct sigaction sa {};
        sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
        sa.sa_sigaction = [](int, siginfo_t* info, void*) {
            if (instance().owns(info->si_addr)) {
                char msg[200];
                const int len = std::snprintf(msg, sizeof msg,
                                              "kiln: KILN_GPU_GUARD: the host touched device memory at %p outside the "
                                              "device's work; on a GPU this is a crash\n",
                                              info->si_addr);
                if (len > 0) (void)!::write(2, msg, static_cast<std::size_t>(len));
            }
            // SA_RESETHAND: returning re-runs the access under the default action (the crash, with its core).
        };
        sigemptyset(&sa.sa_mask);
        ::sigaction(SIGSEGV, &sa, nullptr);
#endif
    }

    std::mutex m_;
    unsigned char* base_ = nullptr;
    std::size_t top_ = 0;
    int open_ = 0;
    std::map<std::size_t, std::vector<void*>> free_;
};

// The device's work in this scope (a kernel, a Thrust algorithm, a copy): the guarded arena is open to the host
// while it runs. Nothing when the guard is off.
struct device_section {
    bool on;
    device_section() : on(guarded_arena::enabled()) {
        if (on) guarded_arena::instance().open();
    }
    ~device_section() {
        if (on) guarded_arena::instance().close();
    }
    device_section(const device_section&) = delete;
    device_section& operator=(const device_section&) = delete;
};

}  // namespace kiln::backend::gpu_memory
