#pragma once
// matmul for vectors, matrices and broadcast batches: ops::matmul's shape rule and kernel (the device's gemm:
// backend/cpu/matmul.hpp, a register-blocked kernel for small products, CBLAS when found, a portable kernel
// otherwise and for integers); concat and stack.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../backend/cpu/device.hpp"
#include "../ops/join.hpp"

#include "elementwise.hpp"

namespace kiln {
namespace detail {

// Records a matrix product on the active tapes (defined with the tape; a template, since its rule computes).
template <int N>
void record_matmul(const dependent_tensor<N>& a, const dependent_tensor<N>& b, const dependent_tensor<N>& y);
// Records a concatenation on the active tapes (defined with the tape).
void record_concat(const std::vector<tensor>& parts, const tensor& y, int axis);

// While the tracer or a loader works out results' dtypes and shapes by running ops on placeholders (function/
// tracer.hpp, io/function_file.hpp, io/onnx_import.hpp), a matrix product's result is a placeholder too: zeros read
// with stride 0, after every check the product makes (operands, devices, shapes, dtypes). A product of declared
// shapes then costs nothing however large (a 2048 x 2048 product took 5.6 s to trace, on stride-0 operands that
// the BLAS path does not take, and a file declaring one of two 16384 x 16384 inputs would take an hour to check).
inline thread_local int placeholder_products = 0;
inline thread_local std::uint64_t placeholder_products_made = 0;  // (counted, so that a check run knows its values)
// While products are placeholders, one of at most this many multiply-adds is computed all the same, and spends them
// (a check run that needs exact values: eager/shape_run.hpp).
inline thread_local std::uint64_t computed_products_budget = 0;
inline bool spend_product_budget(const matmul_shape& s) noexcept {
    std::uint64_t work = static_cast<std::uint64_t>(s.k);
    for (int d = 0; d < s.result.rank; ++d)
        if (__builtin_mul_overflow(work, static_cast<std::uint64_t>(s.result[d]), &work)) return false;
    if (work > computed_products_budget) return false;
    computed_products_budget -= work;
    return true;
}
struct placeholder_products_scope {
    placeholder_products_scope() noexcept { ++placeholder_products; }
    ~placeholder_products_scope() { --placeholder_products; }
    placeholder_products_scope(const placeholder_products_scope&) = delete;
    placeholder_products_scope& operator=(const placeholder_products_scope&) = delete;
};

}  // namespace detail

// The matrix product with NumPy's rules: 1-D operands are promoted to a row (left) or a column (right) and that
// dimension is removed from the result; leading dimensions broadcast as batches. (Templates on an unused int, as
// the other eager functions whose bodies compute: the kernels compile only where a product is taken.)
template <int N>
tensor matmul_untracked(const tensor& a_in, const tensor& b_in);

template <int N = 0>
tensor matmul(const tensor& a_in, const tensor& b_in) {
    detail::dependent_tensor<N> y;
    if (detail::active_tracer) [[unlikely]] {
        const tensor both[2] = {a_in, b_in};
        y = detail::active_tracer->record("matmul", "", both,
                                          [](std::span<const tensor> in, auto) { return matmul_untracked<N>(in[0], in[1]); });
    } else {
        y = matmul_untracked<N>(a_in, b_in);
    }
    if (detail::recording_tapes > 0) detail::record_matmul<N>(a_in, b_in, y);
    return y;
}

// matmul without recording: what the recorded form and its gradient use.
template <int N>
tensor matmul_untracked(const tensor& a_in, const tensor& b_in) {
    KILN_DETAIL_KERNEL_GUARD(detail::dependent_tensor<N>, false);
    a_in.check_valid("matmul");
    b_in.check_valid("matmul");
    detail::check_same_device("matmul", {&a_in, &b_in});
    const detail::matmul_shape s = ops::matmul::shape(a_in.shape(), b_in.shape());
    const dtype d = detail::promote(a_in.dtype(), b_in.dtype());
    if (detail::placeholder_products > 0 && a_in.device() == kiln::cpu && !detail::spend_product_budget(s)) [[unlikely]] {
        ++detail::placeholder_products_made;
        return detail::zeros_placeholder(d, s.result);  // (untraced: see result_of_op, eager/shape_run.hpp)
    }
    const tensor a = a_in.to(d), b = b_in.to(d);
    const device dev = a.device();
    tensor out = detail::new_tensor(d, s.result, dev);
    detail::on_backend(dev, [&]<class Device>() {
        detail::dispatch(d, [&]<class T>() {
            ops::matmul::compute<Device>(
                out.data<T>(), s, detail::strided<const T>(static_cast<const T*>(a.raw_data()), a.shape(), a.strides()),
                detail::strided<const T>(static_cast<const T*>(b.raw_data()), b.shape(), b.strides()));
        });
    });
    return out;
}

// Joins tensors along an existing axis; their shapes must agree elsewhere. Dtypes promote.
inline tensor concat(const std::vector<tensor>& ts, int axis = 0) {
    for (const tensor& t : ts) t.check_valid("concat");
    if (ts.empty()) throw value_error("kiln: value_error in 'concat': no tensors to join");
    const tensor& first = ts.front();
    const int ax = ops::concat_axis(axis, first.shape());  // ops::concat's rule and sentences (ops/join.hpp)
    dtype d = first.dtype();
    dims shape = first.shape();
    shape[ax] = 0;
    for (const tensor& t : ts) {
        ops::concat_check(ax, first.shape(), t.shape());
        shape[ax] += t.shape()[ax];
        d = detail::promote(d, t.dtype());
    }
    if (detail::active_tracer) [[unlikely]] {
        detail::op_params params;
        // (The result spec, op_params::spec: zeros of the joined dtype and shape, where every operand is a uniform
        // CPU tensor, a placeholder; a join of values runs. Not the op's value, unless every operand is zero.)
        // (The joined shape and dtype are the ones checked above, as a structural op's spec takes its rule's shape.)
        params.spec = [d, shape](std::span<const tensor> in, std::span<const std::int64_t>, tensor& out) {
            for (const tensor& t : in)
                if (!t.is_cpu() || !detail::is_uniform(t)) return false;
            out = detail::zeros_placeholder(d, shape);
            return true;
        };
        tensor y = detail::active_tracer->record("concat", "axis=" + std::to_string(ax), ts,
                                                 [ax](std::span<const tensor> in, auto) {
                                                     return concat(std::vector<tensor>(in.begin(), in.end()), ax);
                                                 },
                                                 std::move(params));
        if (detail::recording_tapes > 0) detail::record_concat(ts, y, ax);
        return y;
    }
    const device dev = first.device();
    for (const tensor& t : ts)
        if (!(t.device() == dev)) detail::throw_device_mismatch("concat", dev, t.device());
    tensor out = detail::new_tensor(d, shape, dev);
    std::ptrdiff_t at = 0;
    for (const tensor& t : ts) {
        tensor part = out.slice(ax, at, at + t.shape()[ax]);
        const tensor src = t.to(d);
        detail::copy_into(part, src);
        at += t.shape()[ax];
    }
    if (detail::recording_tapes > 0) detail::record_concat(ts, out, ax);
    return out;
}

// Joins tensors of one shape along a new axis.
inline tensor stack(const std::vector<tensor>& ts, int axis = 0) {
    if (ts.empty()) throw value_error("kiln: value_error in 'stack': no tensors to join");
    std::vector<tensor> expanded;
    for (const tensor& t : ts) {
        if (!(t.shape() == ts.front().shape()))
            throw shape_error("kiln: shape_error in 'stack': shapes " + to_string(ts.front().shape()) + " and " +
                              to_string(t.shape()) + " differ");
        expanded.push_back(t.unsqueeze(axis));
    }
    return concat(expanded, axis);
}

}  // namespace kiln
