#pragma once
// Eager mode's seam for the mode-neutral structural ops (ops/structural.hpp: reductions, scans): one function runs
// any of them on a tensor with the op's own shape rule, dtype rule and kernel, records it on the gradient tapes
// with the op's own gradient rule, and records it in a trace when a function is being traced. A new structural
// op needs no eager code of its own beyond the public function that names it.
//
// What the seam asks of a unary op Op beyond the protocol: result_shape(attrs, dims, dtype_name),
// result_type<T> (the element type of its result for operand type T), attrs_text(attrs) (how a trace and a saved
// function write its attributes), and compute<Device>(attrs, out, strided operand, dtype_name).
#include <span>
#include <string>

#include "../backend/cpu/device.hpp"
#include "elementwise.hpp"

namespace kiln {
namespace detail {

// Records Op with attributes `a` on the active tapes: its gradient is the op's own rule (defined with the tape).
template <class Op, int N = 0>
void record_structural(const typename Op::attributes& a, const dependent_tensor<N>& x, const dependent_tensor<N>& y);

// Op's values on x, not recorded on tapes (recorded in a trace while one is being made).
template <class Op>
tensor structural_values(const typename Op::attributes& a, const tensor& x) {
    x.check_valid(Op::name.data());
    const dims shape = Op::result_shape(a, x.shape(), name(x.dtype()));
    if (active_tracer) [[unlikely]]
        return active_tracer->record(Op::name, Op::attrs_text(a), std::span<const tensor>(&x, 1),
                                     [a](std::span<const tensor> in, auto) { return structural_values<Op>(a, in[0]); });
    tensor out;
    dispatch(x.dtype(), [&]<class T>() {
        using U = typename Op::template result_type<T>;
        out = tensor(dtype_of<U>(), shape);
        Op::template compute<backend::cpu_device>(a, out.data<U>(),
                                                  strided<const T>(static_cast<const T*>(x.raw_data()), x.shape(), x.strides()),
                                                  name(x.dtype()));
    });
    return out;
}

// Op on x, recorded on the active tapes.
template <class Op, int N = 0>
tensor apply_structural(const typename Op::attributes& a, const tensor& x) {
    const dependent_tensor<N> y = structural_values<Op>(a, x);
    if (recording_tapes > 0) record_structural<Op, N>(a, x, y);
    return y;
}

}  // namespace detail
}  // namespace kiln
