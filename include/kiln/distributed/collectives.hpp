#pragma once
// Distributed training's public collectives (kiln/distributed.hpp): the MPI environment, rank and size,
// all_reduce, broadcast and all_gather of tensors, the gradient and loss means of data-parallel training,
// broadcasting parameters, and averaging a kiln::session's gradients in every training step.
#include "transport.hpp"

namespace kiln {
namespace distributed {

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
    std::uint64_t digest = kiln::detail::fnv1a({});
    for (const std::string& n : names) digest = kiln::detail::fnv1a("\xff", kiln::detail::fnv1a(n, digest));  // (0xff ends a name)
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
