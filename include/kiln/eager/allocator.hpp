#pragma once
// A caching allocator: freed blocks go to per-size free lists and are handed out again, so a loop of large eager
// operations reuses memory instead of page-faulting fresh allocations from the OS every time.
#include <cstddef>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace kiln {

struct allocator_stats {
    std::size_t cached_bytes = 0;  // held in free lists
    std::size_t hits = 0;          // allocations served from the cache
    std::size_t misses = 0;        // allocations that went to the system
};

namespace detail {

class caching_allocator {
public:
    static caching_allocator& instance() {
        static caching_allocator* a = new caching_allocator;  // never destroyed: tensors may outlive statics
        return *a;
    }

    // Size classes: 64-byte multiples up to 4 KiB, then four classes per doubling (at most 19% slack).
    static std::size_t size_class(std::size_t bytes) {
        if (bytes <= 4096) return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
        std::size_t p = 4096;
        while (p * 2 < bytes) p *= 2;
        const std::size_t step = p / 4;
        return (bytes + step - 1) / step * step;
    }

    void* allocate(std::size_t bytes) {
        const std::size_t cls = size_class(bytes);
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
        return ::operator new(cls, std::align_val_t{64});
    }

    void release(void* p, std::size_t bytes) {
        const std::size_t cls = size_class(bytes);
        std::lock_guard lock(m_);
        if (stats_.cached_bytes + cls > limit_) {
            ::operator delete(p, std::align_val_t{64});
            return;
        }
        free_[cls].push_back(p);
        stats_.cached_bytes += cls;
    }

    // Returns every cached block to the system.
    void empty_cache() {
        std::lock_guard lock(m_);
        for (auto& [cls, blocks] : free_)
            for (void* p : blocks) ::operator delete(p, std::align_val_t{64});
        free_.clear();
        stats_.cached_bytes = 0;
    }

    allocator_stats stats() {
        std::lock_guard lock(m_);
        return stats_;
    }

    void set_limit(std::size_t bytes) {
        std::lock_guard lock(m_);
        limit_ = bytes;
    }

private:
    std::mutex m_;
    std::map<std::size_t, std::vector<void*>> free_;
    allocator_stats stats_;
    std::size_t limit_ = std::size_t{2} << 30;  // cache at most 2 GiB
};

}  // namespace detail

inline allocator_stats cache_stats() { return detail::caching_allocator::instance().stats(); }
inline void empty_cache() { detail::caching_allocator::instance().empty_cache(); }
// The most bytes the cache keeps; blocks freed beyond it go back to the system.
inline void set_cache_limit(std::size_t bytes) { detail::caching_allocator::instance().set_limit(bytes); }

}  // namespace kiln
