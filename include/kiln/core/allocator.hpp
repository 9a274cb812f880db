#pragma once
// A caching allocator: freed blocks go to per-size free lists and are handed out again, so a loop of large eager
// operations reuses memory instead of page-faulting fresh allocations from the OS every time.
//
// Small blocks (at most 4 KiB, the tensors of per-op dispatch benchmarks and of small models) are cached per
// thread without a lock: an eager op on a tiny tensor allocates and frees its result in a few nanoseconds. Larger
// blocks share one pool under a mutex, where the lock is noise next to touching the memory.
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <new>
#include <type_traits>
#include <vector>

namespace kiln {

struct allocator_stats {
    std::size_t cached_bytes = 0;  // held in free lists
    std::size_t hits = 0;          // allocations served from the cache
    std::size_t misses = 0;        // allocations that went to the system
};

namespace detail {

// This thread's T, created on first use; nullptr once the thread has begun destroying it (a tensor freed during
// thread exit then goes straight to the system instead of into a destroyed cache).
template <class T>
T* thread_instance() {
    thread_local bool gone = false;  // trivially destructible: readable until the thread ends
    if (gone) return nullptr;
    struct holder {
        T value;
        ~holder() { gone = true; }
    };
    thread_local holder h;
    return &h.value;
}

class caching_allocator {
public:
    static constexpr std::size_t small_limit = 4096;
    static constexpr std::size_t small_classes = small_limit / 64;
    static constexpr std::size_t small_depth = 32;  // blocks kept per thread and size class

    static caching_allocator& instance() {
        static caching_allocator* a = new caching_allocator;  // never destroyed: tensors may outlive statics
        return *a;
    }

    // Size classes: 64-byte multiples up to 4 KiB, then four classes per doubling (at most 19% slack).
    // Requests above max_request (2^62 bytes) are their own class: no rounding that could overflow.
    static constexpr std::size_t max_request = std::size_t{1} << 62;
    static std::size_t size_class(std::size_t bytes) {
        if (bytes <= small_limit) return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
        if (bytes > max_request) return bytes;
        // p: the largest power of two below bytes (bytes > 4096 here, so p >= 4096).
        const std::size_t p = std::size_t{1} << (std::bit_width(bytes - 1) - 1);
        const std::size_t step = p / 4;
        return (bytes + step - 1) / step * step;
    }

    void* allocate(std::size_t bytes) {
        const std::size_t cls = size_class(bytes);
        if (cls <= small_limit) {
            if (thread_cache* c = local()) {
                auto& list = c->free[cls / 64 - 1];
                if (!list.empty()) {
                    void* p = list.back();
                    list.pop_back();
                    bump(c->hits, 1);
                    bump(c->cached, -static_cast<std::ptrdiff_t>(cls));
                    return p;
                }
                bump(c->misses, 1);
                return system_allocate(cls);
            }
        }
        {
            std::lock_guard lock(m_);
            auto it = free_.find(cls);
            if (it != free_.end() && !it->second.empty()) {
                void* p = it->second.back();
                it->second.pop_back();
                stats_.cached_bytes -= cls;
                ++stats_.hits;
                return p;
            }
            ++stats_.misses;
        }
        return system_allocate(cls);
    }

    // A 64-byte aligned block from the system; std::bad_alloc when it has none. (The nothrow form, so that under
    // AddressSanitizer a refused request is also a bad_alloc, which kiln reports as a device_error, not an abort.)
    static void* system_allocate(std::size_t bytes) {
        if (void* p = ::operator new(bytes, std::align_val_t{64}, std::nothrow)) return p;
        throw std::bad_alloc();
    }

    void release(void* p, std::size_t bytes) {
        const std::size_t cls = size_class(bytes);
        if (cls <= small_limit) {
            thread_cache* c = local();
            auto* list = c ? &c->free[cls / 64 - 1] : nullptr;
            if (list && list->size() < small_depth) {
                list->push_back(p);
                bump(c->cached, static_cast<std::ptrdiff_t>(cls));
                return;
            }
            ::operator delete(p, std::align_val_t{64});
            return;
        }
        std::lock_guard lock(m_);
        if (stats_.cached_bytes + cls > limit_) {
            ::operator delete(p, std::align_val_t{64});
            return;
        }
        free_[cls].push_back(p);
        stats_.cached_bytes += cls;
    }

    // Returns every block in the shared pool and in this thread's small-block cache to the system.
    void empty_cache() {
        if (thread_cache* c = local()) c->empty();
        std::lock_guard lock(m_);
        for (auto& [cls, blocks] : free_)
            for (void* p : blocks) ::operator delete(p, std::align_val_t{64});
        free_.clear();
        stats_.cached_bytes = 0;
    }

    // Totals over the shared pool and every thread's small-block cache.
    allocator_stats stats() {
        std::lock_guard lock(m_);
        allocator_stats s = stats_;
        s.hits += retired_.hits;
        s.misses += retired_.misses;
        for (const thread_cache* c : caches_) {
            s.cached_bytes += c->cached.load(std::memory_order_relaxed);
            s.hits += c->hits.load(std::memory_order_relaxed);
            s.misses += c->misses.load(std::memory_order_relaxed);
        }
        return s;
    }

    void set_limit(std::size_t bytes) {
        std::lock_guard lock(m_);
        limit_ = bytes;
    }

private:
    // One thread's small blocks. Counters are written only by their thread (a plain add, no locked instruction)
    // and read by stats() from any thread.
    struct thread_cache {
        std::array<std::vector<void*>, small_classes> free;
        std::atomic<std::size_t> hits{0}, misses{0}, cached{0};

        thread_cache() {
            for (auto& l : free) l.reserve(small_depth);
            auto& a = instance();
            std::lock_guard lock(a.m_);
            a.caches_.push_back(this);
        }
        ~thread_cache() {
            empty();
            auto& a = instance();
            std::lock_guard lock(a.m_);
            a.retired_.hits += hits.load(std::memory_order_relaxed);
            a.retired_.misses += misses.load(std::memory_order_relaxed);
            std::erase(a.caches_, this);
        }
        void empty() {
            for (auto& l : free) {
                for (void* p : l) ::operator delete(p, std::align_val_t{64});
                l.clear();
            }
            cached.store(0, std::memory_order_relaxed);
        }
    };

    static void bump(std::atomic<std::size_t>& c, std::ptrdiff_t by) {
        c.store(c.load(std::memory_order_relaxed) + static_cast<std::size_t>(by), std::memory_order_relaxed);
    }

    static thread_cache* local() { return thread_instance<thread_cache>(); }

    std::mutex m_;
    std::map<std::size_t, std::vector<void*>> free_;
    allocator_stats stats_;
    allocator_stats retired_;  // counts of threads that have exited
    std::vector<thread_cache*> caches_;
    std::size_t limit_ = std::size_t{2} << 30;  // cache at most 2 GiB
};

// A per-thread free list of fixed-size records (the control blocks of tensor storage), so that making a tensor
// does not call malloc for its bookkeeping.
template <std::size_t Size>
class record_pool {
public:
    static void* pop() {
        list* l = local();
        if (!l || l->blocks.empty()) return nullptr;
        void* p = l->blocks.back();
        l->blocks.pop_back();
        return p;
    }
    static bool push(void* p) {
        list* l = local();
        if (!l || l->blocks.size() >= depth) return false;
        l->blocks.push_back(p);
        return true;
    }

private:
    static constexpr std::size_t depth = 256;
    struct list {
        std::vector<void*> blocks;
        list() { blocks.reserve(depth); }
        ~list() {
            for (void* p : blocks) ::operator delete(p);
        }
    };
    static list* local() { return thread_instance<list>(); }
};

template <class T>
struct pooled_allocator {
    using value_type = T;
    pooled_allocator() = default;
    template <class U>
    pooled_allocator(const pooled_allocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        if (n == 1)
            if (void* p = record_pool<sizeof(T)>::pop()) return static_cast<T*>(p);
        return static_cast<T*>(::operator new(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (n == 1 && record_pool<sizeof(T)>::push(p)) return;
        ::operator delete(p);
    }
    template <class U>
    friend bool operator==(const pooled_allocator&, const pooled_allocator<U>&) noexcept {
        return true;
    }
};

// A standard allocator over the caching allocator (64-byte aligned blocks): graph-mode workspaces and the
// containers kiln::run returns use it, so their memory is reused from run to run (no fresh pages to fault in) and
// shows in kiln::cache_stats().
template <class T>
struct cached_allocator {
    using value_type = T;
    using is_always_equal = std::true_type;
    cached_allocator() = default;
    template <class U>
    cached_allocator(const cached_allocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        if (n > (std::size_t{1} << 62) / sizeof(T)) throw std::bad_alloc();
        return static_cast<T*>(caching_allocator::instance().allocate(n * sizeof(T)));
    }
    void deallocate(T* p, std::size_t n) noexcept { caching_allocator::instance().release(p, n * sizeof(T)); }
    template <class U>
    friend bool operator==(const cached_allocator&, const cached_allocator<U>&) noexcept {
        return true;
    }
};

}  // namespace detail

inline allocator_stats cache_stats() { return detail::caching_allocator::instance().stats(); }
// Returns the shared pool's blocks and the calling thread's small blocks to the system, and the GPU device's cached
// blocks to the driver.
namespace detail {
// Set by the GPU device's memory (backend/thrust/memory.hpp) where it is compiled in.
inline void (*gpu_cache_trim)() = nullptr;
}  // namespace detail
inline void empty_cache() {
    detail::caching_allocator::instance().empty_cache();
    if (detail::gpu_cache_trim) detail::gpu_cache_trim();
}
// The most bytes the shared pool keeps; blocks freed beyond it go back to the system.
inline void set_cache_limit(std::size_t bytes) { detail::caching_allocator::instance().set_limit(bytes); }

}  // namespace kiln
