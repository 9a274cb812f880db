#pragma once
// Data-parallel training across processes on MPI. Opt in: #include <kiln/distributed.hpp> and link
// kiln::distributed (which finds MPI); kiln/kiln.hpp and kiln::kiln need no MPI.
//
//   int main() {
//       return kiln::distributed::run([] {                        // MPI set up once; a throw aborts every rank
//           namespace dist = kiln::distributed;
//           kiln::nn::sequential model(...);                         // any seed: rank 0's values are broadcast
//           dist::broadcast_parameters(model.parameters());
//           kiln::data::loader data(x, y, 256, {.seed = 7, .shard = {dist::rank(), dist::size()}});
//           for (const kiln::data::batch& b : data) {
//               kiln::gradient_tape tape;
//               const kiln::tensor loss = kiln::nn::mse(model(b.x), b.y);
//               auto grads = tape.gradient(loss, model.parameters());
//               grads = dist::all_reduce_mean(grads, double(b.x.shape()[0]));   // the global batch's gradient
//               opt.apply_gradients(grads, model.parameters());
//           }
//       });
//   }
//
// Every collective first compares what each rank passes (the operation, dtype and shape) with one small
// MPI_Allgather, so that ranks that disagree get a kiln::distributed_error naming each rank's tensor instead of
// hanging or reading past a buffer (distributed::set_checks(false) turns the comparison off). Inside a traced
// function (kiln::function) the collectives are effects of the graph, run at every call in program order, so a
// data-parallel training step is still one call. kiln::session steps average their gradients through
// all_reduce_gradients(session). Tensors of every dtype; reductions of bools are logical (or for sum and max, and
// for min).
//
// Tensors on kiln's GPU device (kiln::cuda) take part in every collective, in every mode (docs/distributed.md):
// - with NCCL (compile with KILN_NCCL=1 and link libnccl; the CMake target kiln::nccl does both), their memory goes
//   through NCCL on the device's stream, with one communicator per job made from an id that rank 0 broadcasts over
//   MPI; the host does not wait for the collective;
// - without NCCL (and on the emulated device), their bytes are copied to the host, reduced by MPI and copied back.
// Every rank must pass a tensor on the same kind of device (the signature check compares devices too). A process's
// collectives on GPU tensors all run on one device, the device of its first one (NCCL binds a communicator to one
// device); a later one on another device throws kiln::device_error on every rank. Ranks may use different devices:
// rank r on cuda:r of a shared machine, or each rank's cuda:0 under its own CUDA_VISIBLE_DEVICES (NCCL refuses two
// ranks on one GPU).
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

#include "kiln.hpp"

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

#if KILN_DISTRIBUTED_NCCL
inline void check_nccl(ncclResult_t rc, const char* entry) {
    if (rc == ncclSuccess || rc == ncclInProgress) return;
    throw distributed_error(error_prefix("distributed_error", entry) + "NCCL failed: " + ncclGetErrorString(rc) +
                            (rc == ncclInvalidUsage || rc == ncclSystemError ? std::string(" (") + ncclGetLastError(nullptr) + ")" : ""));
}
// The job's NCCL communicator, made at the first GPU collective (every rank reaches it at the same collective: the
// signatures were compared first): rank 0's unique id is broadcast over MPI.
inline ncclComm_t nccl_comm(const char* entry) {
    process_state& s = state();
    if (s.nccl) return s.nccl;
    ncclUniqueId id{};
    if (world_rank_or(0) == 0) check_nccl(ncclGetUniqueId(&id), entry);
    check(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD), entry);
    const backend::gpu_memory::device_scope on(s.gpu_device < 0 ? 0 : s.gpu_device);  // (the communicator's device)
    ncclComm_t comm = nullptr;
    check_nccl(ncclCommInitRank(&comm, world_size_or(1), id, world_rank_or(0)), entry);
    s.nccl = comm;
    return comm;
}
inline ncclDataType_t nccl_type(dtype d) {
    switch (d) {
        case dtype::boolean: return ncclUint8;
        case dtype::int32: return ncclInt32;
        case dtype::int64: return ncclInt64;
        case dtype::float32: return ncclFloat32;
        case dtype::float64: return ncclFloat64;
    }
    return ncclFloat32;
}
inline ncclRedOp_t nccl_op(reduce_op op, dtype d) {
    if (d == dtype::boolean) return op == reduce_op::min ? ncclMin : ncclMax;  // (0 and 1: logical and, or)
    switch (op) {
        case reduce_op::sum: return ncclSum;
        case reduce_op::mean: return ncclAvg;
        case reduce_op::max: return ncclMax;
        case reduce_op::min: return ncclMin;
    }
    return ncclSum;
}
inline cudaStream_t nccl_stream(const tensor& t) { return backend::gpu_memory::stream(t.device().index); }
#endif

// c = the reduction of c over the ranks, in place; c is contiguous and not empty.
inline void reduce_contiguous(tensor& c, reduce_op op, const char* entry) {
    auto on_host = [&](void* p) {
        check(MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(c.numel()), mpi_type(c.dtype()), mpi_op(op, c.dtype()), MPI_COMM_WORLD), entry);
        if (op == reduce_op::mean) divide_host(p, c.dtype(), c.numel(), world_size_or(1));
    };
    if (c.device().type == device_type::cpu) return on_host(c.raw_data());
#if KILN_DISTRIBUTED_NCCL
    check_nccl(ncclAllReduce(c.raw_data(), c.raw_data(), static_cast<std::size_t>(c.numel()), nccl_type(c.dtype()),
                             nccl_op(op, c.dtype()), nccl_comm(entry), nccl_stream(c)),
               entry);
#elif KILN_HAS_GPU
    staged(c, true, on_host);
#endif
}

// c = root's c, in place; c is contiguous and not empty.
inline void broadcast_contiguous(tensor& c, int root, const char* entry) {
    auto on_host = [&](void* p) {
        check(MPI_Bcast(p, static_cast<int>(c.numel()), mpi_type(c.dtype()), root, MPI_COMM_WORLD), entry);
    };
    if (c.device().type == device_type::cpu) return on_host(c.raw_data());
#if KILN_DISTRIBUTED_NCCL
    check_nccl(ncclBroadcast(c.raw_data(), c.raw_data(), static_cast<std::size_t>(c.numel()), nccl_type(c.dtype()), root,
                             nccl_comm(entry), nccl_stream(c)),
               entry);
#elif KILN_HAS_GPU
    staged(c, true, on_host);
#endif
}

// out = every rank's c in rank order; c is contiguous and not empty, out contiguous on c's device.
inline void gather_contiguous(const tensor& c, tensor& out, const char* entry) {
    const int count = static_cast<int>(c.numel());
    if (c.device().type == device_type::cpu) {
        check(MPI_Allgather(c.raw_data(), count, mpi_type(c.dtype()), out.raw_data(), count, mpi_type(c.dtype()), MPI_COMM_WORLD), entry);
        return;
    }
#if KILN_DISTRIBUTED_NCCL
    check_nccl(ncclAllGather(c.raw_data(), out.raw_data(), static_cast<std::size_t>(c.numel()), nccl_type(c.dtype()),
                             nccl_comm(entry), nccl_stream(c)),
               entry);
#elif KILN_HAS_GPU
    staged(c, false, [&](void* mine) {
        staged(out, true, [&](void* all) {
            check(MPI_Allgather(mine, count, mpi_type(c.dtype()), all, count, mpi_type(c.dtype()), MPI_COMM_WORLD), entry);
        });
    });
#endif
}

// While kiln::function traces: `f(t)` recorded as an effect that writes into t, run at every call in program order.
template <class F>
void record_in_place(const char* op, std::string attrs, const tensor& t, F f) {
    const tensor target[1] = {t};
    kiln::detail::active_tracer->record_effect(op, std::move(attrs), target, [f](std::span<const tensor> in, auto) {
        tensor o = in[0];
        f(o);
    });
}

// Runs `f` on contiguous memory holding t's values and copies the result back where t is a strided view.
template <class F>
void on_contiguous(tensor& t, F&& f) {
    if (t.is_contiguous()) {
        f(t);
        return;
    }
    tensor c = t.contiguous();
    f(c);
    kiln::detail::copy_into(t, c);
}

}  // namespace detail

// MPI for the life of the object: initialized here unless the program or an earlier call did, finalized (at exit
// at the latest) when kiln initialized it. Without mpirun the program is one process of rank 0.
class environment {
public:
    environment() { detail::ensure_initialized(); }
    environment(int& argc, char**& argv) { detail::ensure_initialized(&argc, &argv); }
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    ~environment() { detail::finalize(false); }
};

inline int rank() {
    detail::ensure_initialized();
    return detail::world_rank_or(0);
}
inline int size() {
    detail::ensure_initialized();
    return detail::world_size_or(1);
}
inline void barrier() {
    detail::ensure_initialized();
    detail::check(MPI_Barrier(MPI_COMM_WORLD), "distributed::barrier");
}
// Turns the comparison of every rank's call before each collective on (the default) or off.
inline void set_checks(bool on) { detail::state().checks = on; }

// Runs `f` with MPI set up, and returns 0. An exception that leaves `f` on any rank is printed with the rank and
// aborts the whole job (MPI_Abort), so the other ranks do not wait for it in their next collective.
template <class F>
int run(F&& f) {
    environment env;
    try {
        f();
    } catch (const std::exception& e) {
        detail::abort_job(e.what());
    } catch (...) {
        detail::abort_job("an exception of an unknown type");
    }
    return 0;
}

// t = the reduction of t over the ranks, elementwise, in place. mean needs a floating dtype.
inline void all_reduce_in_place(tensor& t, reduce_op op = reduce_op::sum) {
    constexpr const char* entry = "distributed::all_reduce";
    if (op == reduce_op::mean && !kiln::detail::is_floating(t.dtype()))
        throw dtype_error(detail::error_prefix("dtype_error", entry) + "a mean needs a floating dtype, not " +
                          std::string(kiln::name(t.dtype())) + " (reduce with sum, or convert with .to())");
    if (kiln::detail::active_tracer) [[unlikely]]
        return detail::record_in_place("all_reduce", "op=" + std::string(name(op)), t, [op](tensor& o) { all_reduce_in_place(o, op); });
    detail::require_usable(t, entry);
    detail::ensure_initialized();
    detail::check_signatures(detail::signature::of(1, static_cast<std::int64_t>(op), t), entry);
    detail::bind_device(t, entry);
    detail::on_contiguous(t, [&](tensor& c) {
        if (c.numel() > 0) detail::reduce_contiguous(c, op, entry);
    });
}

// The reduction of t over the ranks, as a new tensor.
inline tensor all_reduce(const tensor& t, reduce_op op = reduce_op::sum) {
    tensor out = t.clone();
    all_reduce_in_place(out, op);
    return out;
}

// t = root's t on every rank, in place (shapes and dtypes must agree).
inline void broadcast(tensor& t, int root = 0) {
    constexpr const char* entry = "distributed::broadcast";
    if (kiln::detail::active_tracer) [[unlikely]]
        return detail::record_in_place("broadcast", "root=" + std::to_string(root), t, [root](tensor& o) { broadcast(o, root); });
    detail::require_usable(t, entry);
    detail::ensure_initialized();
    const int n = detail::world_size_or(1);
    if (root < 0 || root >= n)
        throw distributed_error(detail::error_prefix("distributed_error", entry) + "root " + std::to_string(root) +
                                " is not a rank of this job of " + std::to_string(n));
    detail::check_signatures(detail::signature::of(2, root, t), entry);
    detail::bind_device(t, entry);
    detail::on_contiguous(t, [&](tensor& c) {
        if (c.numel() > 0) detail::broadcast_contiguous(c, root, entry);
    });
}

// Every rank's t, stacked along a new first axis of extent size() in rank order (shapes must agree).
inline tensor all_gather(const tensor& t) {
    constexpr const char* entry = "distributed::all_gather";
    detail::ensure_initialized();
    const int n = detail::world_size_or(1);
    if (t.dim() + 1 > max_rank)
        throw shape_error(detail::error_prefix("shape_error", entry) + "the result would have more than " +
                          std::to_string(max_rank) + " dimensions");
    dims shape;
    shape.rank = t.dim() + 1;
    shape[0] = n;
    for (int i = 0; i < t.dim(); ++i) shape[i + 1] = t.shape()[i];
    if (kiln::detail::active_tracer) [[unlikely]] {
        tensor out = zeros(shape, t.dtype(), t.device());
        const tensor both[2] = {out, t};
        kiln::detail::active_tracer->record_effect("all_gather", "", both, [](std::span<const tensor> in, auto) {
            tensor o = in[0];
            kiln::detail::copy_into(o, all_gather(in[1]));
        });
        return out;
    }
    detail::require_usable(t, entry);
    detail::check_signatures(detail::signature::of(3, 0, t), entry);
    detail::bind_device(t, entry);
    tensor out(t.dtype(), shape, t.device());
    const tensor c = t.contiguous();
    if (c.numel() > 0) detail::gather_contiguous(c, out, entry);
    return out;
}

// The mean over the ranks of each tensor (gradients), through one all-reduce per dtype, device and bucket of at most
// `bucket_bytes`: the tensors are packed into one contiguous buffer, summed in place, and unpacked as views of it.
// With `weight` (a rank's rows in its shard of the global batch) the mean is weighted, sum_r(w_r g_r) / sum_r(w_r):
// the global batch's gradient when each rank's loss is a mean over its own rows and the shards are uneven.
// (A template on an unused int, as kiln's eager functions are: its elementwise kernels are compiled only in the
// translation units that call it.)
template <int N = 0>
std::vector<tensor> all_reduce_mean(const std::vector<tensor>& ts, std::optional<double> weight = std::nullopt,
                                    std::size_t bucket_bytes = std::size_t{256} << 20) {
    using dtensor = kiln::detail::dependent_tensor<N>;
    constexpr const char* entry = "distributed::all_reduce_mean";
    std::vector<tensor> out(ts.size());
    std::vector<bool> done(ts.size(), false);
    for (std::size_t first = 0; first < ts.size(); ++first) {
        if (done[first]) continue;
        ts[first].check_valid(entry);
        const dtype d = ts[first].dtype();
        const kiln::device dev = ts[first].device();
        if (!kiln::detail::is_floating(d))
            throw dtype_error(detail::error_prefix("dtype_error", entry) + "tensor " + std::to_string(first) + " is " +
                              std::string(kiln::name(d)) + "; a mean needs floating tensors");
        // The tensors of this dtype and device, in order, up to the bucket's size (one at least).
        std::vector<std::size_t> members;
        std::size_t bytes = 0;
        for (std::size_t i = first; i < ts.size(); ++i) {
            if (done[i] || ts[i].dtype() != d || !(ts[i].device() == dev)) continue;
            ts[i].check_valid(entry);
            const std::size_t b = static_cast<std::size_t>(ts[i].numel()) * ts[i].itemsize();
            if (!members.empty() && bytes + b > bucket_bytes) break;
            members.push_back(i);
            bytes += b;
            done[i] = true;
        }
        std::vector<tensor> parts;
        for (std::size_t i : members) {
            const dtensor flat = ts[i].reshape({-1});
            parts.push_back(weight ? flat * *weight : flat);
        }
        if (weight) parts.push_back(full({1}, *weight, d, dev));
        tensor bucket = parts.size() == 1 ? parts[0].clone() : concat(parts, 0);
        all_reduce_in_place(bucket, reduce_op::sum);
        std::ptrdiff_t at = 0;
        for (std::size_t i : members) at += ts[i].numel();
        const tensor total = weight ? bucket.slice(0, at, at + 1).reshape({}) : tensor();
        const double ranks = static_cast<double>(size());
        at = 0;
        for (std::size_t i : members) {
            const dtensor part = bucket.slice(0, at, at + ts[i].numel()).reshape(ts[i].shape());
            out[i] = weight ? part / total : part / ranks;
            at += ts[i].numel();
        }
    }
    return out;
}

// A loss (or any tensor) averaged over the ranks, weighted as all_reduce_mean's gradients are.
template <int N = 0>
tensor all_reduce_mean(const tensor& t, std::optional<double> weight = std::nullopt) {
    return all_reduce_mean<N>(std::vector<tensor>{t}, weight)[0];
}

// Rank root's parameter values on every rank (so that every rank starts from the same model whatever its seed).
inline void broadcast_parameters(const std::vector<variable*>& params, int root = 0) {
    for (variable* v : params) {
        if (!v) throw value_error("kiln: value_error in 'distributed::broadcast_parameters': a null parameter");
        broadcast(*v, root);
    }
}
inline void broadcast_parameters(const std::vector<tensor*>& params, int root = 0) {
    for (tensor* t : params) {
        if (!t) throw value_error("kiln: value_error in 'distributed::broadcast_parameters': a null parameter");
        broadcast(*t, root);
    }
}
// A session's parameters, by name (every rank must hold the same names: they are compared first).
inline void broadcast_parameters(session& s, int root = 0) {
    constexpr const char* entry = "distributed::broadcast_parameters";
    detail::ensure_initialized();
    const std::vector<std::string> names = s.parameter_names();  // (sorted: the same order on every rank)
    std::uint64_t digest = 1469598103934665603ull;
    for (const std::string& n : names) {
        for (char c : n) digest = (digest ^ static_cast<unsigned char>(c)) * 1099511628211ull;
        digest = (digest ^ 0xff) * 1099511628211ull;
    }
    detail::signature sig;
    sig.v[0] = 4;
    sig.v[3] = static_cast<std::int64_t>(names.size());
    sig.v[4] = static_cast<std::int64_t>(digest >> 1);
    detail::check_signatures(sig, entry);
    for (const std::string& n : names) broadcast(s.parameter(n), root);
}

namespace detail {

// A device gradient's memory as a flat tensor (the session owns it).
inline tensor borrow(const session::gradient& g) {
    auto st = std::make_shared<kiln::detail::storage>();
    st->data = static_cast<std::byte*>(g.data);
    st->bytes = static_cast<std::size_t>(g.numel) * size_of(g.dtype);
    st->dev = g.device;
    return tensor(std::move(st), g.dtype, dims{g.numel}, dims{1}, 0);
}

// all_reduce_gradients for gradients in host memory: packed into `bucket` (n values and the weight), summed, unpacked.
inline void reduce_host_gradients(std::span<const session::gradient> gs, tensor& bucket, double w) {
    const dtype d = gs[0].dtype;
    std::ptrdiff_t n = 0;
    for (const session::gradient& g : gs) n += g.numel;
    if (bucket.numel() != n + 1 || bucket.dtype() != d || !(bucket.device() == kiln::cpu)) bucket = tensor(d, dims{n + 1});
    kiln::detail::dispatch(d, [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) {
            T* b = bucket.data<T>();
            std::ptrdiff_t at = 0;
            for (const session::gradient& g : gs) {
                const T* p = static_cast<const T*>(g.data);
                for (std::ptrdiff_t i = 0; i < g.numel; ++i) b[at + i] = static_cast<T>(p[i] * w);
                at += g.numel;
            }
            b[n] = static_cast<T>(w);
            all_reduce_in_place(bucket, reduce_op::sum);
            const T total = b[n];
            at = 0;
            for (const session::gradient& g : gs) {
                T* p = static_cast<T*>(g.data);
                for (std::ptrdiff_t i = 0; i < g.numel; ++i) p[i] = b[at + i] / total;
                at += g.numel;
            }
        }
    });
}

// The same for gradients on a GPU: packed, summed and unpacked by device kernels, so that nothing but the collective
// (NCCL's, or MPI's through the host) leaves the device. (A template on an unused int: its kernels are compiled only
// where a session on a GPU is all-reduced.)
template <int N = 0>
void reduce_device_gradients(std::span<const session::gradient> gs, tensor& bucket, double w) {
    using dtensor = kiln::detail::dependent_tensor<N>;
    const dtype d = gs[0].dtype;
    const kiln::device dev = gs[0].device;
    std::ptrdiff_t n = 0;
    for (const session::gradient& g : gs) n += g.numel;
    if (bucket.numel() != n + 1 || bucket.dtype() != d || !(bucket.device() == dev)) bucket = tensor(d, dims{n + 1}, dev);
    std::ptrdiff_t at = 0;
    for (const session::gradient& g : gs) {
        tensor into = bucket.slice(0, at, at + g.numel);
        const dtensor part = borrow(g);
        kiln::detail::copy_into(into, w == 1.0 ? part : part * w);
        at += g.numel;
    }
    tensor last = bucket.slice(0, n, n + 1);
    kiln::detail::copy_into(last, full({1}, w, d, dev));
    all_reduce_in_place(bucket, reduce_op::sum);
    const dtensor total = bucket.slice(0, n, n + 1);
    at = 0;
    for (const session::gradient& g : gs) {
        tensor into = borrow(g);
        const dtensor part = bucket.slice(0, at, at + g.numel);
        kiln::detail::copy_into(into, part / total);
        at += g.numel;
    }
}

}  // namespace detail

// Averages a kiln::session's gradients over the ranks in every training step, between their computation and the
// update (session::on_gradients): one all-reduce of one contiguous bucket per step. With `weight`, called in every
// step, the mean is weighted by it (a rank's rows; see all_reduce_mean). A session on a GPU packs its bucket on the
// device and reduces it there (through NCCL where it is compiled in).
inline void all_reduce_gradients(session& s, std::function<double()> weight = {}) {
    detail::ensure_initialized();
    auto bucket = std::make_shared<tensor>();
    s.on_gradients([bucket, weight = std::move(weight)](std::span<const session::gradient> gs) {
        if (gs.empty()) return;
        const double w = weight ? weight() : 1.0;
#if KILN_HAS_GPU
        if (gs[0].device.type != device_type::cpu) return detail::reduce_device_gradients(gs, *bucket, w);
#endif
        detail::reduce_host_gradients(gs, *bucket, w);
    });
}

}  // namespace distributed
}  // namespace kiln
