#pragma once
// Distributed training's transport (kiln/distributed.hpp): a contiguous tensor's reduction, broadcast and gather
// across the ranks, through NCCL on the device's stream for GPU tensors where NCCL is built in, through MPI on
// host memory otherwise (a GPU tensor's bytes staged through the host); and the helpers that run a collective on a
// strided view or record it in a traced function.
#include "process.hpp"

namespace kiln {
namespace distributed {
namespace detail {

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
}  // namespace distributed
}  // namespace kiln
