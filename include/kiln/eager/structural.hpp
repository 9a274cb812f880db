#pragma once
// Eager mode's seam for the mode-neutral structural ops (ops/structural.hpp: reductions, scans, gathers, flips,
// tiles and pads): one function runs any of them on tensors with the op's own shape rule, dtype rule and kernel,
// records it on the gradient tapes with the op's own gradient rule, and records it in a trace when a function is
// being traced. A new structural op needs no eager code of its own beyond the public function that names it.
//
// What the seam asks of an op Op beyond the protocol: result_shape(attrs, dims...), result_type<T> (the element
// type of its result for a first operand of type T), attrs_text(attrs) (how a trace and a saved function write its
// attributes), and compute<Device>(attrs, out, strided operands...). A unary op's result_shape and compute also get
// the operand's dtype name (for messages). Operands after the first have the first one's element type unless the
// op says otherwise with operand_type<I, T> (a gather's index is int64); the public function converts them.
#include <array>
#include <span>
#include <string>
#include <type_traits>

#include "../backend/cpu/device.hpp"
#include "elementwise.hpp"

namespace kiln {
namespace detail {

// Records Op with attributes `a` on the active tapes: its gradient is the op's own rule (defined with the tape).
template <class Op, int N, class... X>
void record_structural(const typename Op::attributes& a, const dependent_tensor<N>& y, const X&... x);

// The element type Op wants for operand I when its first operand has type T.
template <class Op, std::size_t I, class T, class = void>
struct structural_operand_type {
    using type = T;
};
template <class Op, std::size_t I, class T>
struct structural_operand_type<Op, I, T, std::void_t<typename Op::template operand_type<I, T>>> {
    using type = typename Op::template operand_type<I, T>;
};

template <class Op, std::size_t I, class T>
strided<const typename structural_operand_type<Op, I, T>::type> structural_operand(const tensor& x) {
    using U = typename structural_operand_type<Op, I, T>::type;
    if (x.dtype() != dtype_of<U>())
        throw dtype_error(error_prefix("dtype_error", Op::name) + "operand " + std::to_string(I) + " is " +
                          std::string(name(x.dtype())) + ", not " + std::string(name(dtype_of<U>())));
    return strided<const U>(static_cast<const U*>(x.raw_data()), x.shape(), x.strides());
}

// Op's result spec (op_params::spec) for operands of these shapes, whose result has `shape`: zeros of its result
// type read with stride 0, on the CPU. It gives the dtype and shape only (not spec_is_value). False, so that the op
// runs and gives its own error or value, where an operand is not uniform (a captured tensor's values may break a
// gather's bounds), is empty, lives elsewhere or has a dtype the kernel would refuse.
template <class Op, std::size_t K>
bool structural_spec(const dims& shape, std::span<const tensor> in, tensor& out) {
    if (in.size() != K) return false;
    for (const tensor& t : in)
        if (!t.is_cpu() || t.numel() == 0 || !is_uniform(t)) return false;
    return dispatch(in[0].dtype(), [&]<class T>() {
        const bool operands_ok = [&]<std::size_t... I>(std::index_sequence<I...>) {
            return ((in[I].dtype() == dtype_of<typename structural_operand_type<Op, I, T>::type>()) && ...);
        }(std::make_index_sequence<K>{});
        if (!operands_ok) return false;
        using U = typename Op::template result_type<T>;
        out = uniform(U{}, shape);
        return true;
    });
}

// Op's values on its operands, not recorded on tapes (recorded in a trace while one is being made).
template <class Op, class... More>
tensor structural_values(const typename Op::attributes& a, const tensor& x, const More&... more) {
    // (The one exception: the sum that reduces a broadcast operand's gradient, detail::reduce_to, which the
    // non-template tape code needs.)
    KILN_DETAIL_KERNEL_GUARD(Op, (std::is_same_v<Op, ops::reduce<ops::reduction::sum>>));
    x.check_valid(Op::name.data());
    (more.check_valid(Op::name.data()), ...);
    const dims shape = [&] {
        if constexpr (sizeof...(More) == 0) return Op::result_shape(a, x.shape(), name(x.dtype()));
        else return Op::result_shape(a, x.shape(), more.shape()...);
    }();
    if (active_tracer) [[unlikely]] {
        const std::array<tensor, 1 + sizeof...(More)> in{x, more...};
        op_params params;
        params.spec = [shape](std::span<const tensor> v, std::span<const std::int64_t>, tensor& out) {
            return structural_spec<Op, 1 + sizeof...(More)>(shape, v, out);
        };
        return active_tracer->record(Op::name, Op::attrs_text(a), std::span<const tensor>(in),
                                     [a](std::span<const tensor> v, auto) {
                                         return [&]<std::size_t... I>(std::index_sequence<I...>) {
                                             return structural_values<Op>(a, v[I]...);
                                         }(std::make_index_sequence<1 + sizeof...(More)>{});
                                     },
                                     std::move(params));
    }
    const device dev = x.device();
    if constexpr (sizeof...(More) > 0) {
        const device others[] = {more.device()...};
        for (const device& o : others)
            if (!(o == dev)) [[unlikely]]
                throw_device_mismatch(Op::name, dev, o);
    }
    tensor out;
    on_backend(dev, [&]<class Device>() {
        dispatch(x.dtype(), [&]<class T>() {
            using U = typename Op::template result_type<T>;
            out = new_tensor(dtype_of<U>(), shape, dev);
            const strided<const T> xs(static_cast<const T*>(x.raw_data()), x.shape(), x.strides());
            if constexpr (sizeof...(More) == 0) {
                Op::template compute<Device>(a, out.data<U>(), xs, name(x.dtype()));
            } else {
                [&]<std::size_t... I>(std::index_sequence<I...>) {
                    Op::template compute<Device>(a, out.data<U>(), xs, structural_operand<Op, I + 1, T>(more)...);
                }(std::index_sequence_for<More...>{});
            }
        });
    });
    return out;
}

// Op on its operands, recorded on the active tapes.
template <class Op, int N = 0, class... More>
tensor apply_structural(const typename Op::attributes& a, const tensor& x, const More&... more) {
    const dependent_tensor<N> y = structural_values<Op>(a, x, more...);
    if (recording_tapes > 0) record_structural<Op, N>(a, y, x, static_cast<const tensor&>(more)...);
    return y;
}

}  // namespace detail

// A mode-neutral structural op of the program's own (ops/structural.hpp) run eagerly with attributes `a`: its shape
// rule, its kernel on its operands' device, its gradient rule on the active tapes, and a node in a trace.
template <class Op, class... More>
tensor eager_op(const typename Op::attributes& a, const tensor& x, const More&... more) {
    static_assert((std::is_base_of_v<tensor, More> && ...), "kiln::eager_op: the operands are kiln::tensor values.");
    return detail::apply_structural<Op>(a, x, static_cast<const tensor&>(more)...);
}

}  // namespace kiln
