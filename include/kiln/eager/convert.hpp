#pragma once
// Copies and conversions of tensors: convert<U> (a contiguous copy in another dtype), copy_into (a strided copy with
// broadcasting), as_dtype, and the tensor members built on them (contiguous, clone, to, reshape), and kiln::cast on
// tensors. Eager ops (eager/elementwise.hpp) convert their operands with these.
#include <span>
#include <string>

#include "../backend/cpu/copy.hpp"
#include "../backend/cpu/device.hpp"
#include "tensor.hpp"
#include "uniform.hpp"
#if KILN_HAS_GPU
#include "../backend/thrust/device.hpp"
#endif

namespace kiln {
namespace detail {

[[noreturn]] inline void throw_device_mismatch(std::string_view op, const device& a, const device& b) {
    throw device_error("kiln: device_error in '" + std::string(op) + "': operands live on " + to_string(a) + " and " +
                       to_string(b) + " (move one with .to(" + (a.type == device_type::cpu ? "kiln::cpu" : "kiln::cuda") +
                       "))");
}

// Calls f.template operator()<Device>() with the backend of device `dev`: eager mode's one switch between devices.
template <class F>
void on_backend([[maybe_unused]] const device& dev, F&& f) {
#if KILN_HAS_GPU
    if (dev.type != device_type::cpu) [[unlikely]] {
        const backend::gpu_memory::device_scope on(dev.index);
        f.template operator()<backend::thrust_device>();
        return;
    }
#endif
    f.template operator()<backend::cpu_device>();
}

// A new contiguous tensor on device `dev` (the CPU's constructor where it can: it skips the device lookup).
inline tensor new_tensor(dtype d, const dims& shape, const device& dev) {
    return dev.type == device_type::cpu ? tensor(d, shape) : tensor(d, shape, dev);
}

// Whether `t` may join an op on device d: it lives there, or it is a rank-0 CPU tensor (a number, moved to d by the
// op, as PyTorch allows).
inline bool joins_device(const tensor& t, const device& d) {
    const device td = t.device();
    return td == d || (td.type == device_type::cpu && t.dim() == 0);
}

// Copies `t` into a new contiguous tensor of dtype U.
// (A plain strided loop, not the fused loop: this is instantiated for every pair of dtypes in every translation
// unit, and the fused loop's vector paths would cost seconds of compile time for a copy.)
template <class U>
tensor convert(const tensor& t) {
    if (active_tracer) [[unlikely]] {
        const bool same = t.dtype() == dtype_of<U>();
        op_params params;
        // (The result spec: t's first element converted, read at every index of t's shape; op_params::spec.)
        params.spec = [](std::span<const tensor> in, std::span<const std::int64_t>, tensor& out) {
            if (in.size() != 1 || !in[0].is_cpu()) return false;
            const tensor& x = in[0];
            if (x.numel() == 0) out = uniform(U{}, x.shape());
            else out = convert<U>(tensor(x.storage_handle(), x.dtype(), dims{}, dims{}, x.offset())).broadcast_to(x.shape());
            return true;
        };
        params.spec_is_value = true;
        return active_tracer->record(same ? "copy" : "cast", same ? "" : "dtype=" + std::string(dtype_name<U>()),
                                     std::span<const tensor>(&t, 1),
                                     [](std::span<const tensor> in, auto) { return convert<U>(in[0]); }, std::move(params));
    }
#if KILN_HAS_GPU
    if (!t.is_cpu()) {
        tensor out(dtype_of<U>(), t.shape(), t.device());
        const backend::gpu_memory::device_scope on(t.device().index);
        dispatch(t.dtype(), [&]<class T>() {
            backend::thrust_device::copy_strided(
                strided<U>(static_cast<U*>(out.raw_data()), t.shape(), out.strides()),
                strided<const T>(static_cast<const T*>(t.raw_data()), t.shape(), t.strides()));
        });
        return out;
    }
#endif
    tensor out(dtype_of<U>(), t.shape());
    U* dst = out.data<U>();
    dispatch(t.dtype(), [&]<class T>() {
        const T* src = t.data<const T>();
        const std::ptrdiff_t n = t.numel();
        if (t.is_contiguous()) {
            for (std::ptrdiff_t i = 0; i < n; ++i) dst[i] = value_cast<U>(src[i]);
            return;
        }
        copy_row_major(dst, strided<const T>(src, t.shape(), t.strides()));
    });
    return out;
}

// out = src elementwise, src of out's dtype and broadcast to out's shape: the device's strided copy (views'
// gradients, joins and assignments instantiate it in every translation unit, so it is a plain strided loop, not
// the fused loop). Contiguous copies of one shape are one memmove (the source may be the output itself).
inline void copy_into(tensor& out, const tensor& src_in) {
    if (active_tracer) [[unlikely]] {
        const tensor both[2] = {out, src_in};
        op_params pure;
        pure.pure_effect = true;
        active_tracer->record_effect("copy_", "", both, [](std::span<const tensor> in, auto) {
            tensor o = in[0];
            copy_into(o, in[1]);
        }, 1, std::move(pure));
        return;
    }
    tensor moved;
    const device dev = out.device();
    const bool move = !(src_in.device() == dev);
    if (move) {
        if (!joins_device(src_in, dev)) throw_device_mismatch("copy_", dev, src_in.device());
        moved = src_in.to(dev);
    }
    const tensor& src = move ? moved : src_in;
    const dims& shape = out.shape();
    const int r = shape.rank;
    dims ss;  // the source's strides against the output's dimensions (0 where it broadcasts)
    ss.rank = r;
    for (int i = 0; i < r; ++i) {
        const int j = i - (r - src.dim());
        ss[i] = j < 0 || src.shape()[j] == 1 ? 0 : src.strides()[j];
    }
    if (shape.numel() == 0) return;
    on_backend(dev, [&]<class Device>() {
        dispatch(out.dtype(), [&]<class T>() {
            Device::copy_strided(strided<T>(static_cast<T*>(out.raw_data()), shape, out.strides()),
                                 strided<const T>(static_cast<const T*>(src.raw_data()), shape, ss));
        });
    });
}

inline tensor as_dtype(const tensor& t, dtype d) {
    if (t.dtype() == d) return t;
    return dispatch(d, [&]<class U>() { return convert<U>(t); });
}

}  // namespace detail

inline tensor tensor::contiguous() const {
    if (is_contiguous()) return *this;
    return clone();
}

inline tensor tensor::clone() const {
    return recorded(detail::dispatch(dtype_, [&]<class T>() { return detail::convert<T>(*this); }),
                    [](const tensor& g) { return g; });
}

inline tensor tensor::to(kiln::dtype d) const {
    if (d == dtype_) return *this;
    const kiln::dtype from = dtype_;
    return recorded(detail::as_dtype(*this, d), [from](const tensor& g) { return g.to(from); });
}

inline tensor tensor::to(const kiln::device& d) const {
    check_valid("to");
    const kiln::device from = device();
    if (from == d) return *this;
    if (detail::active_tracer) [[unlikely]] {
        // A node that copies its input to `d` at every call (its gradient copies back, as eagerly).
        const tensor in[1] = {*this};
        tensor y = detail::active_tracer->record("to_device", "device=" + to_string(d), in,
                                                 [d](std::span<const tensor> x, auto) { return x[0].to(d); });
        return recorded(std::move(y), [from](const tensor& g) { return g.to(from); });
    }
    check_not_symbolic("tensor::to");
    const tensor src = contiguous();
    tensor out(dtype_, shape_, d);
    const std::size_t bytes = static_cast<std::size_t>(numel()) * itemsize();
#if KILN_HAS_GPU
    if (from.type == device_type::cpu) {
        backend::gpu_memory::from_host(out.raw_data(), src.raw_data(), bytes, d.index);
    } else if (d.type == device_type::cpu) {
        backend::gpu_memory::to_host(out.raw_data(), src.raw_data(), bytes, from.index);
    } else {  // between GPUs, through the host
        const tensor host = src.to(kiln::cpu);
        backend::gpu_memory::from_host(out.raw_data(), host.raw_data(), bytes, d.index);
    }
#else
    (void)bytes;
    (void)src;
#endif
    return recorded(std::move(out), [from](const tensor& g) { return g.to(from); });
}

namespace detail {

// The shape `target` (one extent may be -1) resolved for a tensor of shape `from`: reshape's shape rule.
inline dims reshaped(const dims& from, dims target) {
    int infer = -1;
    std::ptrdiff_t known = 1;
    bool overflow = false;
    for (int i = 0; i < target.rank; ++i) {
        if (target[i] == -1) {
            if (infer >= 0) throw value_error("kiln: value_error in 'reshape': only one dimension can be -1, got " +
                                              to_string(target));
            infer = i;
        } else if (target[i] < 0) {
            throw value_error("kiln: value_error in 'reshape': negative dimension " + std::to_string(target[i]) +
                              " in " + to_string(target) + " (only -1, to infer one dimension, is allowed)");
        } else if (!overflow && __builtin_mul_overflow(known, target[i], &known)) {
            overflow = true;
        }
    }
    const std::ptrdiff_t n = from.numel();
    bool ok = !overflow || n == 0;
    if (ok && infer >= 0) {
        if (known > 0 && n % known == 0) target[infer] = n / known;
        else ok = false;  // -1 beside a zero extent is ambiguous, and a count that does not divide has no answer
    }
    if (ok) ok = checked_numel(target, "reshape") == n;
    if (!ok)
        throw shape_error("kiln: shape_error in 'reshape': cannot reshape " + to_string(from) + " (" +
                          std::to_string(n) + " elements) to " + to_string(target));
    return target;
}

}  // namespace detail

inline tensor tensor::reshape(dims target_in) const {
    const dims target = detail::reshaped(shape_, target_in);
    if (detail::active_tracer) [[unlikely]]
    {
        detail::op_params p;
        p.add_dims(target);
        return recorded(traced_view("reshape", "shape=" + detail::dims_text(target),
                                    [r = target.rank](const tensor& t, std::span<const std::int64_t> q) {
                                        return t.reshape(detail::param_dims(q, 0, r));
                                    },
                                    std::move(p)),
                        [s = shape_](const tensor& g) { return g.reshape(s); });
    }
    if (is_contiguous())
        return recorded(view(target, detail::contiguous_strides(target), offset_),
                        [s = shape_](const tensor& g) { return g.reshape(s); });
    return contiguous().reshape(target);
}

// cast<U> on a tensor: kiln::cast<double>(t).
template <class U>
tensor cast(const tensor& t) {
    return t.to(dtype_of<U>());
}

}  // namespace kiln
