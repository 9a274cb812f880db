#pragma once
// A tensor's storage: reference-counted bytes on a device (the CPU's caching allocator, a GPU device's pool, or
// external memory kept alive by the caller's keeper; a symbolic tensor's, which holds no bytes, while a function is
// traced), how it is allocated under a loader's size cap, and how its bytes are read back to the host.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>

#include "../core/allocator.hpp"
#include "../core/device.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../backend/gpu.hpp"
#include "trace_seam.hpp"

namespace kiln {
namespace detail {

// Reference-counted bytes, 64-byte aligned when kiln allocates them (then they return to the caching allocator
// with the storage: one allocation for the control block and the record); external memory is wrapped with the
// caller's keeper (or none, when the caller guarantees the lifetime).
struct storage {
    std::byte* data = nullptr;
    std::size_t bytes = 0;
    kiln::device dev{};
    std::shared_ptr<void> keeper;
    bool cached = false;  // data came from the caching allocator
    bool on_gpu = false;  // data came from the GPU device's allocator (dev says which device)
    // A symbolic tensor's storage while a function is traced: no bytes, the tracer that owns it and its value.
    tracer_base* trace_owner = nullptr;
    std::int64_t trace_value = -1;
    // Set when a kiln::variable that held this storage was assigned another variable (`v = kiln::variable(...)`):
    // traced functions that read it trace again (function/function.hpp). `rebound_dtype` and `rebound_shape` are
    // what it became (written before the flag is set).
    std::atomic<bool> rebound{false};
    kiln::dtype rebound_dtype = kiln::float32;
    dims rebound_shape{};
    const char* rebound_why = nullptr;  // why it was left, for the retrace reason (null: a variable was assigned)

    // Marks the storage as left by what read it (see `rebound`); the fields are written before the flag.
    void mark_rebound(kiln::dtype now_dtype, const dims& now_shape, const char* why = nullptr) noexcept {
        if (trace_owner) return;  // symbolic
        rebound_dtype = now_dtype;
        rebound_shape = now_shape;
        rebound_why = why;
        rebound.store(true, std::memory_order_release);
    }

    storage() = default;
    storage(const storage&) = delete;
    storage& operator=(const storage&) = delete;
    ~storage() {
        if (cached) caching_allocator::instance().release(data, bytes);
#if KILN_HAS_GPU
        if (on_gpu) backend::gpu_memory::deallocate(data, bytes, dev.index);
#endif
    }
};

[[noreturn]] inline void throw_no_gpu(const char* what, const kiln::device& d) {
    throw device_error(std::string("kiln: device_error in '") + what + "': " + to_string(d) +
                       " is not available: this program was compiled without kiln's GPU device (build with nvcc and "
                       "the kiln::cuda CMake target, or define KILN_GPU=1 with Thrust's configuration)");
}

// The most bytes one tensor of this thread may take (no limit but memory outside a scope): a loader that checks an
// untrusted file by running its ops once sets it, so that an op whose result the file makes huge (a Pad or Tile of
// enormous extents) is refused before it allocates, not after.
inline constinit thread_local std::size_t allocation_cap = static_cast<std::size_t>(-1);
struct allocation_cap_scope {
    std::size_t saved;
    explicit allocation_cap_scope(std::uint64_t cap)
        : saved(allocation_cap) {
        allocation_cap = cap < static_cast<std::size_t>(-1) ? static_cast<std::size_t>(cap) : static_cast<std::size_t>(-1);
    }
    ~allocation_cap_scope() { allocation_cap = saved; }
    allocation_cap_scope(const allocation_cap_scope&) = delete;
    allocation_cap_scope& operator=(const allocation_cap_scope&) = delete;
};
[[noreturn]] KILN_NOINLINE inline void throw_over_cap(std::size_t bytes) {
    throw value_error("kiln: value_error in 'allocate': a result of " + std::to_string(bytes) +
                      " bytes is larger than the limit set while a file is checked (" + std::to_string(allocation_cap) +
                      " bytes, load_options::max_node_bytes)");
}

inline std::shared_ptr<storage> allocate_storage(std::size_t bytes) {
    if (bytes > allocation_cap) [[unlikely]] throw_over_cap(bytes);
    auto s = std::allocate_shared<storage>(pooled_allocator<storage>{});
    try {
        s->data = static_cast<std::byte*>(caching_allocator::instance().allocate(bytes));
    } catch (const std::bad_alloc&) {
        throw device_error("kiln: device_error in 'allocate': cannot allocate " + std::to_string(bytes) +
                           " bytes on cpu");
    }
    s->bytes = bytes;
    s->cached = true;
    return s;
}

// Storage on device `d`: the CPU's caching allocator, or the GPU device's pool.
inline std::shared_ptr<storage> allocate_storage(std::size_t bytes, const kiln::device& d) {
    if (d.type == device_type::cpu) return allocate_storage(bytes);
#if KILN_HAS_GPU
    backend::gpu_memory::require(d, "allocate");
    auto s = std::allocate_shared<storage>(pooled_allocator<storage>{});
    s->data = static_cast<std::byte*>(backend::gpu_memory::allocate(bytes, d.index));
    s->bytes = bytes;
    s->dev = d;
    s->on_gpu = true;
    return s;
#else
    throw_no_gpu("allocate", d);
#endif
}

// Copies `bytes` at byte offset `at` of a storage to host memory (a GPU storage waits for its device first).
inline void read_bytes(const storage& s, std::size_t at, void* dst, std::size_t bytes) {
#if KILN_HAS_GPU
    if (s.on_gpu) {
        backend::gpu_memory::to_host(dst, s.data + at, bytes, s.dev.index);
        return;
    }
#endif
    std::memcpy(dst, s.data + at, bytes);
}

}  // namespace detail
}  // namespace kiln
