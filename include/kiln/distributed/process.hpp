#pragma once
// Distributed training's process layer (kiln/distributed.hpp): MPI's setup and teardown for the process, the
// NCCL communicator's slot, MPI's types and operations for kiln's dtypes, and the signature check that every
// collective makes first (ranks that disagree throw instead of hanging).
// (MPI's C API only: the deprecated C++ bindings would come with the header otherwise.)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../kiln.hpp"

// NCCL for GPU tensors: only in nvcc builds of the GPU device that ask for it.
#if KILN_HAS_GPU && KILN_GPU_CUDA && defined(KILN_NCCL) && KILN_NCCL
#include <nccl.h>
#define KILN_DISTRIBUTED_NCCL 1
#else
#define KILN_DISTRIBUTED_NCCL 0
#endif

namespace kiln {

// A collective that cannot run as asked: ranks that disagree on it, a rank out of range, MPI reporting a failure.
class distributed_error : public error {
public:
    using error::error;
};

namespace distributed {

enum class reduce_op { sum, mean, max, min };

constexpr std::string_view name(reduce_op op) noexcept {
    switch (op) {
        case reduce_op::sum: return "sum";
        case reduce_op::mean: return "mean";
        case reduce_op::max: return "max";
        case reduce_op::min: return "min";
    }
    return "unknown";
}

namespace detail {

using kiln::detail::error_prefix;

struct process_state {
    bool initialized_here = false;
    bool checks = true;
    int gpu_device = -1;  // the device index of this process's collectives on GPU tensors (fixed by the first)
#if KILN_DISTRIBUTED_NCCL
    ncclComm_t nccl = nullptr;  // made at the first collective on a GPU tensor, on gpu_device
#endif
};
inline process_state& state() {
    static process_state s;
    return s;
}

// MPI is initialized and not finalized.
inline bool mpi_active() {
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    return init && !done;
}
inline int world_rank_or(int fallback) {
    int r = fallback;
    if (mpi_active()) MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
inline int world_size_or(int fallback) {
    int n = fallback;
    if (mpi_active()) MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

// Ends every rank of the job: this one has failed, and the others would wait for it in their next collective.
[[noreturn]] inline void abort_job(const std::string& why) {
    const int r = world_rank_or(0), n = world_size_or(1);
    std::fprintf(stderr, "kiln: rank %d of %d failed: %s\nkiln: aborting all %d ranks of the job\n", r, n, why.c_str(), n);
    std::fflush(stderr);
    if (mpi_active()) MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
}

// std::terminate (an exception that nothing caught) on one rank aborts the whole job, naming the rank.
inline void on_terminate() {
    std::string why = "std::terminate was called";
    if (const std::exception_ptr e = std::current_exception()) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            why = std::string("an uncaught exception: ") + x.what();
        } catch (...) {
            why = "an uncaught exception of an unknown type";
        }
    }
    abort_job(why);
}

// Finalizes MPI where kiln initialized it. The NCCL communicator is destroyed first when the program ends its MPI
// scope (environment's destructor, run's end); at exit (`at_exit`) the CUDA runtime may already be gone, so it is
// left to the process's end there.
inline void finalize(bool at_exit) {
#if KILN_DISTRIBUTED_NCCL
    if (!at_exit && state().nccl) {
        ncclCommDestroy(state().nccl);
        state().nccl = nullptr;
    }
#else
    (void)at_exit;
#endif
    if (mpi_active() && state().initialized_here) MPI_Finalize();
}
inline void finalize_at_exit() { finalize(true); }

inline void check(int rc, const char* entry) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw distributed_error(error_prefix("distributed_error", entry) + "MPI failed: " + std::string(text, static_cast<std::size_t>(len)));
}

// Initializes MPI once (unless the program did), so that MPI errors are returned as kiln::distributed_errors and
// an uncaught exception aborts the job; MPI is finalized at exit.
inline void ensure_initialized(int* argc = nullptr, char*** argv = nullptr) {
    int init = 0;
    MPI_Initialized(&init);
    if (init) return;
    int done = 0;
    MPI_Finalized(&done);
    if (done) throw distributed_error("kiln: distributed_error in 'distributed': MPI has been finalized in this process");
    int provided = 0;
    check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "distributed");
    state().initialized_here = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    // The ranks on this machine share its cores: kiln's thread pool takes its share (as torchrun sets one
    // OpenMP thread per process), so that ranks do not oversubscribe the cores with their workers.
    MPI_Comm local;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        int here = 1;
        MPI_Comm_size(local, &here);
        MPI_Comm_free(&local);
        if (here > 1) set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / here));
    }
    std::set_terminate(&on_terminate);
    std::atexit(&finalize_at_exit);
}

inline MPI_Datatype mpi_type(dtype d) {
    switch (d) {
        case dtype::boolean: return MPI_C_BOOL;
        case dtype::int32: return MPI_INT32_T;
        case dtype::int64: return MPI_INT64_T;
        case dtype::float32: return MPI_FLOAT;
        case dtype::float64: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

inline MPI_Op mpi_op(reduce_op op, dtype d) {
    if (d == dtype::boolean) return op == reduce_op::min ? MPI_LAND : MPI_LOR;
    switch (op) {
        case reduce_op::sum:
        case reduce_op::mean: return MPI_SUM;
        case reduce_op::max: return MPI_MAX;
        case reduce_op::min: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

// What a rank passes to a collective: the collective, its detail (a reduction or root), and a tensor's dtype and
// shape (or a count and a digest of names).
// (v: the collective, its detail, the dtype, the rank, the kind of device, then the extents. The kind of device has
// `foreign_device` added where a GPU tensor is not on the device of the process's earlier GPU collectives.)
constexpr std::int64_t foreign_device = 0x100;
struct signature {
    std::array<std::int64_t, 5 + max_rank> v{};

    static signature of(int collective, std::int64_t detail, const tensor& t) {
        signature s;
        s.v[0] = collective;
        s.v[1] = detail;
        s.v[2] = static_cast<std::int64_t>(t.dtype());
        s.v[3] = t.dim();
        s.v[4] = static_cast<std::int64_t>(t.device().type);
        const int bound = state().gpu_device;
        if (t.device().type != device_type::cpu && bound >= 0 && t.device().index != bound) s.v[4] += foreign_device;
        for (int i = 0; i < t.dim(); ++i) s.v[5 + static_cast<std::size_t>(i)] = t.shape()[i];
        return s;
    }
};

inline const char* collective_name(std::int64_t c) {
    switch (c) {
        case 1: return "all_reduce";
        case 2: return "broadcast";
        case 3: return "all_gather";
        case 4: return "broadcast_parameters";
        default: return "a collective";
    }
}

inline std::string describe(const std::int64_t* v) {
    std::string s = collective_name(v[0]);
    if (v[0] == 4) return s + " of " + std::to_string(v[3]) + " parameters (names digest " + std::to_string(v[4]) + ")";
    s += v[0] == 1 ? "(" + std::string(name(static_cast<reduce_op>(v[1]))) + ")" : v[0] == 2 ? "(root " + std::to_string(v[1]) + ")" : "";
    dims d;
    d.rank = static_cast<int>(v[3]);
    for (int i = 0; i < d.rank && i < max_rank; ++i) d[i] = v[5 + i];
    const auto dt = static_cast<dtype>(v[2]);
    const bool gpu = (v[4] & (foreign_device - 1)) != static_cast<std::int64_t>(device_type::cpu);
    const bool foreign = (v[4] & foreign_device) != 0;
    return s + " on " + to_string(d) + " " + std::string(kiln::name(dt)) +
           (foreign ? " (cuda, not the device of the rank's earlier GPU collectives)" : gpu ? " (cuda)" : "");
}

// Compares every rank's signature with one MPI_Allgather; ranks that disagree throw, on every rank, naming each
// rank's call (so no rank goes on to the data exchange and waits there).
inline void check_signatures(const signature& mine, const char* entry) {
    if (!state().checks) return;
    const int n = world_size_or(1);
    const int count = static_cast<int>(mine.v.size());
    std::vector<std::int64_t> all(static_cast<std::size_t>(n) * mine.v.size());
    check(MPI_Allgather(mine.v.data(), count, MPI_INT64_T, all.data(), count, MPI_INT64_T, MPI_COMM_WORLD), entry);
    bool same = true;
    for (int r = 1; r < n && same; ++r)
        same = std::memcmp(all.data(), all.data() + static_cast<std::size_t>(r) * mine.v.size(), mine.v.size() * sizeof(std::int64_t)) == 0;
    if (same) return;
    std::string text;
    for (int r = 0; r < n && r < 8; ++r) text += std::string(r ? "; " : "") + "rank " + std::to_string(r) + ": " + describe(all.data() + static_cast<std::size_t>(r) * mine.v.size());
    if (n > 8) text += "; ...";
    throw distributed_error(error_prefix("distributed_error", entry) + "the ranks disagree on the collective (" + text + ")");
}

// After the ranks agreed: a GPU tensor's device becomes the process's collective device if it has none, and must be
// it otherwise (every rank that passed a foreign device throws here, so none goes on to the exchange alone).
inline void bind_device(const tensor& t, const char* entry) {
    if (t.device().type == device_type::cpu) return;
    int& bound = state().gpu_device;
    if (bound < 0) bound = t.device().index;
    if (t.device().index == bound) return;
    throw device_error(error_prefix("device_error", entry) + "the tensor lives on " + to_string(t.device()) +
                       ", but this process's collectives on GPU tensors run on cuda:" + std::to_string(bound) +
                       ", the device of its first one (a process's NCCL communicator is bound to one device): move "
                       "the tensor there with .to(), or give each process one device");
}

// The tensor exists and lives on a device of this build.
inline void require_usable(const tensor& t, const char* entry) {
    t.check_valid(entry);
    if (t.device().type != device_type::cpu && !gpu_compiled_in)
        throw device_error(error_prefix("device_error", entry) + "the tensor lives on " + to_string(t.device()) +
                           ", and this build has no GPU device");
}

// Divides n floating values in host memory by `by`.
inline void divide_host(void* data, dtype d, std::ptrdiff_t n, double by) {
    kiln::detail::dispatch(d, [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) {
            T* p = static_cast<T*>(data);
            for (std::ptrdiff_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / by);
        }
    });
}

// GPU tensors without NCCL (and on the emulated device): `f(host)` on a host copy of the contiguous device tensor c's
// bytes, copied back into c when `write_back`.
#if KILN_HAS_GPU
template <class F>
void staged(const tensor& c, bool write_back, F&& f) {
    const std::size_t bytes = static_cast<std::size_t>(c.numel()) * c.itemsize();
    std::vector<std::byte> host(bytes);
    backend::gpu_memory::to_host(host.data(), c.raw_data(), bytes, c.device().index);
    f(static_cast<void*>(host.data()));
    if (write_back) backend::gpu_memory::from_host(c.raw_data(), host.data(), bytes, c.device().index);
}
#endif

}  // namespace detail
}  // namespace distributed
}  // namespace kiln
