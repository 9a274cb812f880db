#pragma once
// A small persistent thread pool: fused loops split their range over it above a size threshold.
// Workers stay alive between runs, so a parallel loop costs a wake-up, not a thread creation.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <type_traits>
#include <mutex>
#include <thread>
#include <vector>

#include "../../core/error.hpp"

namespace kiln {
namespace detail {

// A reference to a callable taking the task's index, for the duration of one parallel loop (which outlives no
// call): one small call-through function per callable type, where a std::function built at every loop compiled a
// manager, a copy and the callable's type information for each of the fused loops' lambdas.
class task_ref {
public:
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, task_ref> && std::is_invocable_v<const F&, int>)
    task_ref(const F& f) noexcept  // NOLINT: implicit, as std::function's
        : callable_(static_cast<const void*>(std::addressof(f))), call_(&call<F>) {}

    void operator()(int i) const { call_(callable_, i); }

private:
    template <class F>
    static void call(const void* c, int i) {
        (*static_cast<const F*>(c))(i);
    }

    const void* callable_;
    void (*call_)(const void*, int);
};

class thread_pool {
public:
    static thread_pool& instance() {
        static thread_pool pool;
        return pool;
    }

    // Read without the lock by every parallel loop: atomic, so set_threads on another thread is not a data race.
    int threads() const noexcept { return threads_.load(std::memory_order_relaxed); }

    void set_threads(int n) {
        if (n < 1) throw value_error("kiln: value_error in 'set_num_threads': the number of threads must be at least 1, got " +
                                     std::to_string(n));
        std::lock_guard lock(api_);
        stop_workers();
        threads_.store(n, std::memory_order_relaxed);
    }

    // Calls task(i) for i in [0, n) with up to threads() threads; the caller runs a share itself.
    void parallel_for(int n, task_ref task) {
        if (n <= 1 || threads() <= 1) {
            for (int i = 0; i < n; ++i) task(i);
            return;
        }
        std::lock_guard lock(api_);  // one parallel loop at a time
        start_workers();
        job j{&task, n};
        {
            std::lock_guard l(m_);
            current_ = &j;
            ++generation_;
        }
        cv_.notify_all();
        run(j);
        while (j.done.load(std::memory_order_acquire) < n) std::this_thread::yield();
        // Retire the job: no worker can pick it up after this, and the ones that did must leave it before it dies.
        {
            std::lock_guard l(m_);
            current_ = nullptr;
        }
        while (active_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
    }

    ~thread_pool() { stop_workers(); }

private:
    // One parallel loop. It lives on the caller's stack; workers reach it through current_.
    struct job {
        const task_ref* task;
        int count;
        std::atomic<int> next{0}, done{0};
    };

    thread_pool() : threads_(std::max(1u, std::thread::hardware_concurrency())) {}

    static void run(job& j) {
        for (;;) {
            const int i = j.next.fetch_add(1, std::memory_order_relaxed);
            if (i >= j.count) return;
            (*j.task)(i);
            j.done.fetch_add(1, std::memory_order_release);
        }
    }

    void start_workers() {
        if (!workers_.empty()) return;
        stopping_ = false;
        for (int t = 1, n = threads(); t < n; ++t)
            workers_.emplace_back([this, seen = generation_]() mutable {
                for (;;) {
                    std::unique_lock l(m_);
                    cv_.wait(l, [&] { return stopping_ || generation_ != seen; });
                    if (stopping_) return;
                    seen = generation_;
                    job* j = current_;
                    if (!j) continue;
                    active_.fetch_add(1, std::memory_order_relaxed);
                    l.unlock();
                    run(*j);
                    active_.fetch_sub(1, std::memory_order_release);
                }
            });
    }

    void stop_workers() {
        {
            std::lock_guard l(m_);
            stopping_ = true;
        }
        cv_.notify_all();
        for (auto& w : workers_) w.join();
        workers_.clear();
    }

    std::atomic<int> threads_;
    std::mutex api_, m_;
    std::condition_variable cv_;
    std::vector<std::thread> workers_;
    job* current_ = nullptr;  // guarded by m_
    std::atomic<int> active_{0};
    std::size_t generation_ = 0;
    bool stopping_ = false;
};

inline std::atomic<std::ptrdiff_t>& parallel_threshold_ref() {
    static std::atomic<std::ptrdiff_t> t{1 << 18};
    return t;
}

inline std::atomic<std::ptrdiff_t>& streaming_threshold_ref() {
    static std::atomic<std::ptrdiff_t> t{std::ptrdiff_t{16} << 20};
    return t;
}

}  // namespace detail

// Loops whose outputs exceed this many bytes write them with streaming (non-temporal) stores: such outputs do not
// fit in the caches anyway, and skipping the read of the destination saves bandwidth.
inline void set_streaming_threshold(std::ptrdiff_t bytes) { detail::streaming_threshold_ref() = bytes; }
inline std::ptrdiff_t streaming_threshold() { return detail::streaming_threshold_ref(); }

// Threads used by fused loops (default: the hardware's).
inline void set_num_threads(int n) { detail::thread_pool::instance().set_threads(n); }
inline int num_threads() { return detail::thread_pool::instance().threads(); }

// Loops over fewer elements than this run on the calling thread.
inline void set_parallel_threshold(std::ptrdiff_t elements) { detail::parallel_threshold_ref() = elements; }
inline std::ptrdiff_t parallel_threshold() { return detail::parallel_threshold_ref(); }

}  // namespace kiln
