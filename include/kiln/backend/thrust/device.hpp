#pragma once
// kiln::backend::thrust_device: the GPU's implementation of the device interface (backend/device.hpp), written once
// on Thrust. Under nvcc it runs on CUDA (cuBLAS for products, Thrust's CUB-based algorithms for reductions, scans
// and sorts); with a host compiler and THRUST_DEVICE_SYSTEM_OMP the same code runs on Thrust's OpenMP system with
// host memory (the emulated device that tests the device's logic on every machine). The ops' kernels are their own
// KILN_HD functions: an elementwise op reaches the GPU as the functor of one thrust::for_each over the result's
// elements, never as a second implementation.
//
// Every kernel here takes strided operands (broadcasting is a stride of 0) and decodes each element's multi-index
// from its position, so any layout runs; contiguous operands of the result's shape take a path without decoding.
// Floating sums reduce as a tree (CUB's order), not in the CPU's order: results agree with the CPU's to rounding.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "../../expr/anonymize.hpp"
#include "../../expr/feed.hpp"
#include "../../ops/matmul.hpp"
#include "../../ops/reduce.hpp"
#include "../device.hpp"
#include "blas.hpp"
#include "line_kernels.hpp"
#include "memory.hpp"

namespace kiln {
namespace backend {

struct thrust_device {
    static constexpr device_type kind = device_type::cuda;
    // True when this build runs the device on Thrust's OpenMP system with host memory (no GPU).
    static constexpr bool emulated = !KILN_GPU_CUDA;

    static void* allocate(std::size_t bytes) { return gpu_memory::allocate(bytes); }
    static void deallocate(void* p, std::size_t bytes) { gpu_memory::deallocate(p, bytes); }
    static void copy(void* dst, const void* src, std::size_t bytes) { gpu_memory::within(dst, src, bytes); }
    // To the host waits for the device's queued work; from the host is done when it returns.
    static void to_host(void* dst, const void* src, std::size_t bytes) { gpu_memory::to_host(dst, src, bytes); }
    static void from_host(void* dst, const void* src, std::size_t bytes) { gpu_memory::from_host(dst, src, bytes); }
    static void queue_from_host(void* dst, const void* src, std::size_t bytes) { gpu_memory::from_host_queued(dst, src, bytes); }
    static void synchronize() { gpu_memory::synchronize(); }

    // Host-side orchestration only (the device's kernels are Thrust algorithms): tasks run in order on the caller.
    template <class F>
    static void parallel_for(int tasks, F&& f) {
        for (int t = 0; t < tasks; ++t) f(t);
    }

    // C (row-major m x n) = A B. The operands are read in place when one of their strides is 1 (a transposed
    // operand is passed as transposed), copied to row-major otherwise.
    template <class T>
    static void gemm(T* c, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, detail::matrix_ref<T> a,
                     detail::matrix_ref<T> b) {
        if (m == 0 || n == 0) return;
        if (k == 0) {
            fill(detail::strided<T>(c, dims{m, n}, dims{n, 1}), T(0));
            return;
        }
        gpu::buffer<T> ca(needs_copy(a, m, k) ? m * k : 0), cb(needs_copy(b, k, n) ? k * n : 0);
        if (needs_copy(a, m, k)) a = row_major_copy(a, m, k, ca.p);
        if (needs_copy(b, k, n)) b = row_major_copy(b, k, n, cb.p);
        // Row-major C is column-major C^T (n x m, leading dimension n) = B^T A^T. A row-major operand is its own
        // transpose in column-major terms, so it is passed as is; a column-major one is passed transposed.
        const bool b_row = row_layout(b, k, n), a_row = row_layout(a, m, k);
        const std::ptrdiff_t ldb = b_row ? (k == 1 ? n : b.rs) : (n == 1 ? k : b.cs);
        const std::ptrdiff_t lda = a_row ? (m == 1 ? k : a.rs) : (k == 1 ? m : a.cs);
        gpu::blas(!b_row, !a_row, n, m, k, b.data, ldb, a.data, lda, c, n);
    }

    // `batches` products C[q] = A[q] B[q] with A[q] at a.data + q * sa and B[q] at b.data + q * sb (0 repeats one
    // matrix), C[q] row-major m x n at c + q * m * n: one strided-batched cuBLAS call. False (nothing done) when an
    // operand would need a row-major copy first; the caller then multiplies batch by batch.
    template <class T>
    static bool gemm_strided_batched(T* c, std::ptrdiff_t batches, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k,
                                     detail::matrix_ref<T> a, std::ptrdiff_t sa, detail::matrix_ref<T> b, std::ptrdiff_t sb) {
        if (batches <= 0 || m == 0 || n == 0 || k == 0 || needs_copy(a, m, k) || needs_copy(b, k, n)) return false;
        const bool b_row = row_layout(b, k, n), a_row = row_layout(a, m, k);
        const std::ptrdiff_t ldb = b_row ? (k == 1 ? n : b.rs) : (n == 1 ? k : b.cs);
        const std::ptrdiff_t lda = a_row ? (m == 1 ? k : a.rs) : (k == 1 ? m : a.cs);
        gpu::blas_strided_batched(!b_row, !a_row, n, m, k, b.data, ldb, sb, a.data, lda, sa, c, n, m * n, batches);
        return true;
    }

    template <class T, class R>
    static void reduce(detail::fold_kind kind, const detail::strided<const T>& x, const dims& keep, R* out,
                       bool mean = false, std::ptrdiff_t count = 0) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        const std::ptrdiff_t m = keep.numel();
        if (m == 0) return;
        const std::ptrdiff_t n = x.shape.numel();
        const bool extremum = kind == detail::fold_kind::max || kind == detail::fold_kind::min;
        using Acc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;
        if (n == 0) {  // an empty sum is 0, an empty product 1 (extrema over nothing are refused by the caller)
            fill(detail::strided<R>(out, dims{m}, dims{1}), static_cast<R>(kind == detail::fold_kind::prod ? 1 : 0));
            return;
        }
        const gpu::reduction_order o = gpu::order_for(x, keep);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{o.red});
        auto run = [&](auto load, auto op, auto done) {
            const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), load);
            gpu::reduce_by_key(keys, n, values, ::thrust::make_transform_output_iterator(out, done), op);
        };
        if (extremum) {
            run(gpu::reduce_load<T, T>{x.data, o.order, o.s}, gpu::fold_pick<T>{kind == detail::fold_kind::max},
                gpu::finish<T, R, T>{false, 1});
        } else if (kind == detail::fold_kind::sum) {
            run(gpu::reduce_load<T, Acc>{x.data, o.order, o.s}, gpu::fold_add<Acc>{}, gpu::finish<Acc, R, T>{mean, count});
        } else {
            run(gpu::reduce_load<T, Acc>{x.data, o.order, o.s}, gpu::fold_mul<Acc>{}, gpu::finish<Acc, R, T>{mean, count});
        }
    }

    template <class T>
    static void arg_reduce(bool is_max, const detail::strided<const T>& x, const dims& keep, std::int64_t* out) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        const std::ptrdiff_t m = keep.numel(), n = x.shape.numel();
        if (m == 0 || n == 0) return;
        const gpu::reduction_order o = gpu::order_for(x, keep);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{o.red});
        const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0),
                                                              gpu::arg_load<T>{x.data, o.order, o.s, o.red});
        gpu::reduce_by_key(keys, n, values, ::thrust::make_transform_output_iterator(out, gpu::pos_of{}),
                           gpu::arg_pick<T>{is_max});
    }

    template <class T, class U>
    static void scan(bool product, const detail::strided<const T>& x, int axis, bool reverse, U* out) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        const std::ptrdiff_t n = x.shape.numel(), len = x.shape[axis];
        if (n == 0) return;
        const gpu::lines l = gpu::lines_of(x, axis);
        const auto keys = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0), gpu::key_of{len});
        const auto values = ::thrust::make_transform_iterator(::thrust::counting_iterator<std::ptrdiff_t>(0),
                                                              gpu::scan_load<T, U>{x.data, l.order, l.s, len, reverse});
        gpu::buffer<U> tmp(n);
        ::thrust::inclusive_scan_by_key(gpu::policy(), keys, keys + n, values, tmp.p, ::thrust::equal_to<std::ptrdiff_t>(),
                                        gpu::scan_op<U>{product});
        const gpu::scan_store<U> store{out, l.order, l.os, len, reverse};
        gpu::for_each_n(n, gpu::scan_scatter<U>{store, tmp.p});
    }

    template <class U, class T>
    static void copy_strided(const detail::strided<U>& out, const detail::strided<const T>& in) {
        const std::ptrdiff_t n = out.shape.numel();
        if (n == 0) return;
        if constexpr (std::is_same_v<U, T>) {
            if (detail::is_row_major(out) && detail::is_row_major(in)) {
                gpu_memory::within(static_cast<void*>(out.data), static_cast<const void*>(in.data),
                                   static_cast<std::size_t>(n) * sizeof(T));
                return;
            }
        }
        gpu::for_each_n(n, gpu::copy_kernel<U, T>{gpu::walk_of(out.shape), out.data, gpu::steps_of(out.strides), in.data,
                                                  gpu::steps_of(in.strides)});
    }

    template <class U, class T>
    static void add_strided(const detail::strided<U>& out, const detail::strided<const T>& in) {
        gpu::for_each_n(out.shape.numel(), gpu::copy_kernel<U, T, true>{gpu::walk_of(out.shape), out.data, gpu::steps_of(out.strides),
                                                                        in.data, gpu::steps_of(in.strides)});
    }

    template <class U, class T>
    static void dropout(U* out, const detail::strided<const T>& x, const std::int64_t* key, std::ptrdiff_t key_stride, double p) {
        static_assert(std::is_same_v<U, T>, "kiln: internal: dropout's result has its input's element type");
        const ops::detail_random::keep_rule rule = ops::detail_random::rule_of(p);
        gpu::for_each_n(x.shape.numel(), gpu::dropout_kernel<T>{gpu::walk_of(x.shape), x.data, gpu::steps_of(x.strides), out, key,
                                                                key_stride, rule.threshold, static_cast<T>(rule.scale)});
    }

    template <class U>
    static void fill(const detail::strided<U>& out, U v) {
        gpu::for_each_n(out.shape.numel(), gpu::fill_kernel<U>{gpu::walk_of(out.shape), out.data, gpu::steps_of(out.strides), v});
    }

    template <class T, class I, class U>
    static void gather_along(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                             std::string_view op) {
        gpu::fault_check fc;
        dims xs = x.strides;
        xs[axis] = 0;
        gpu::for_each_n(index.shape.numel(),
                        gpu::gather_along_kernel<T, I, U>{x.data, gpu::steps_of(xs), x.shape[axis], x.strides[axis], index.data,
                                                          gpu::walk_of(index.shape), gpu::steps_of(index.strides), out, fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void scatter_add_along(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis,
                                  const dims& shape, U* out, std::string_view op) {
        fill(detail::strided<U>(out, shape, detail::contiguous_strides(shape)), U(0));
        gpu::fault_check fc;
        dims cs = detail::contiguous_strides(shape);
        const std::ptrdiff_t step = cs[axis];
        cs[axis] = 0;
        gpu::for_each_n(index.shape.numel(),
                        gpu::scatter_along_kernel<T, I, U>{g.data, gpu::steps_of(g.strides), index.data, gpu::walk_of(index.shape),
                                                           gpu::steps_of(index.strides), gpu::steps_of(cs), shape[axis], step, out,
                                                           fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void take(const detail::strided<const T>& x, const detail::strided<const I>& index, int axis, U* out,
                     std::string_view op) {
        dims os{};
        gpu::steps xs;
        int r = 0;
        for (int d = 0; d < axis; ++d) xs.s[r] = x.strides[d], os[r++] = x.shape[d];
        for (int d = 0; d < index.shape.rank; ++d) xs.s[r] = 0, os[r++] = index.shape[d];
        for (int d = axis + 1; d < x.shape.rank; ++d) xs.s[r] = x.strides[d], os[r++] = x.shape[d];
        os.rank = r;
        gpu::fault_check fc;
        gpu::for_each_n(os.numel(), gpu::take_kernel<T, I, U, false>{x.data, gpu::walk_of(os), xs, {}, axis, index.shape.rank, x.shape[axis],
                                                             x.strides[axis], index.data, gpu::steps_of(index.strides), out,
                                                             fc.f.p});
        fc.raise_if_hit(op);
    }
    template <class T, class I, class U>
    static void take_add(const detail::strided<const T>& g, const detail::strided<const I>& index, int axis, const dims& shape,
                         U* out, std::string_view op) {
        fill(detail::strided<U>(out, shape, detail::contiguous_strides(shape)), U(0));
        const dims cs = detail::contiguous_strides(shape);
        gpu::steps os;
        int r = 0;
        for (int d = 0; d < axis; ++d) os.s[r++] = cs[d];
        for (int d = 0; d < index.shape.rank; ++d) os.s[r++] = 0;
        for (int d = axis + 1; d < shape.rank; ++d) os.s[r++] = cs[d];
        gpu::fault_check fc;
        gpu::for_each_n(g.shape.numel(), gpu::take_kernel<T, I, U, true>{g.data, gpu::walk_of(g.shape), gpu::steps_of(g.strides), os,
                                                                      axis, index.shape.rank, shape[axis], cs[axis], index.data,
                                                                      gpu::steps_of(index.strides), out, fc.f.p});
        fc.raise_if_hit(op);
    }

    template <class T>
    static void sort_order(const detail::strided<const T>& x, int axis, bool descending, std::int64_t* out) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        const std::ptrdiff_t n = x.shape.numel(), len = x.shape[axis];
        if (n == 0) return;
        const gpu::lines l = gpu::lines_of(x, axis);
        gpu::buffer<std::int64_t> pos(n);
        ::thrust::sequence(gpu::policy(), pos.p, pos.p + n);
        ::thrust::stable_sort(gpu::policy(), pos.p, pos.p + n, gpu::line_less<T>{x.data, l.order, l.s, len, descending});
        gpu::for_each_n(n, gpu::order_store{out, l.order, l.os, len, pos.p});
    }

    // ---- beyond the interface: masks, and eager mode's elementwise ops ----

    // How many of the n bools at m are true, and their positions in order (masked_select: the count is read on the
    // host, since it is the result's size).
    static std::ptrdiff_t count_true(const bool* m, std::ptrdiff_t n) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        if (n == 0) return 0;
        return static_cast<std::ptrdiff_t>(::thrust::count(gpu::policy(), m, m + n, true));
    }
    static void true_positions(const bool* m, std::ptrdiff_t n, std::int64_t* out) {
        const gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
        if (n == 0) return;
        ::thrust::copy_if(gpu::policy(), ::thrust::counting_iterator<std::int64_t>(0), ::thrust::counting_iterator<std::int64_t>(n),
                          m, out, gpu::is_true{});
    }

    // out = expr over the strided inputs (`in`: one strided view per leaf of expr's unique nodes, in their order).
    template <class E, class R, class... L>
    static void run_elementwise(const E& expr, const detail::strided<R>& out, const std::tuple<detail::strided<const L>...>& in) {
        run_elementwise_roots(std::tuple<detail::strided<R>>(out), in, expr);
    }

    // Several roots in one pass, each into its output (all of one shape): an optimizer's update of a parameter and
    // its slots is one kernel.
    // (The kernel is instantiated on the roots with their leaves renamed by position: graph mode's leaves carry
    // names, which nvcc cannot spell in a kernel's name.)
    template <class... R, class... L, class... Roots>
    static void run_elementwise_roots(const std::tuple<detail::strided<R>...>& outs,
                                      const std::tuple<detail::strided<const L>...>& in, const Roots&... roots) {
        using leaves = detail::leaves_t<detail::unique_nodes_t<Roots...>>;
        run_anonymous_roots(outs, in, detail::anonymize<leaves>(roots)...);
    }

private:
    template <class... R, class... L, class... Roots>
    static void run_anonymous_roots(const std::tuple<detail::strided<R>...>& outs,
                                    const std::tuple<detail::strided<const L>...>& in, const Roots&... roots) {
        static_assert(sizeof...(R) == sizeof...(Roots), "kiln: one output per root");
        using list = detail::unique_nodes_t<Roots...>;
        constexpr std::size_t NL = sizeof...(L);
        const dims& shape = std::get<0>(outs).shape;
        const std::ptrdiff_t n = shape.numel();
        if (n == 0) return;
        gpu::eval_kernel<list, NL, Roots...> k{detail::root_pack<Roots...>(roots...), gpu::walk_of(shape), {}, {}, {}, {}, true};
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((k.out[J] = static_cast<void*>(std::get<J>(outs).data), k.out_steps[J] = gpu::steps_of(std::get<J>(outs).strides),
              k.flat = k.flat && detail::is_row_major(std::get<J>(outs))),
             ...);
        }(std::index_sequence_for<Roots...>{});
        const int r = shape.rank;
        auto bind = [&](std::size_t j, const auto& v) {
            k.in[j] = v.data;
            // The operand's strides against the result's dimensions: 0 where it broadcasts.
            for (int d = 0; d < r; ++d) {
                const int e = d - (r - v.shape.rank);
                k.in_steps[j].s[d] = e < 0 || v.shape[e] == 1 ? 0 : v.strides[e];
            }
            k.flat = k.flat && v.shape == shape && detail::is_row_major(v);
        };
        [&]<std::size_t... J>(std::index_sequence<J...>) { (bind(J, std::get<J>(in)), ...); }(std::make_index_sequence<NL>{});
        gpu::for_each_n(n, k);
    }

private:
    // Whether BLAS can read a rows x cols operand in place: row-major (unit column stride, rows at least a row
    // apart) or column-major. (Negative and broadcast strides are copied first.)
    template <class T>
    static bool row_layout(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return (a.cs == 1 || cols == 1) && (rows == 1 || a.rs >= cols);
    }
    template <class T>
    static bool col_layout(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return (a.rs == 1 || rows == 1) && (cols == 1 || a.cs >= rows);
    }
    template <class T>
    static bool needs_copy(const detail::matrix_ref<T>& a, std::ptrdiff_t rows, std::ptrdiff_t cols) {
        return !row_layout(a, rows, cols) && !col_layout(a, rows, cols);
    }
    template <class T>
    static detail::matrix_ref<T> row_major_copy(detail::matrix_ref<T> a, std::ptrdiff_t rows, std::ptrdiff_t cols, T* buf) {
        copy_strided(detail::strided<T>(buf, dims{rows, cols}, dims{cols, 1}),
                     detail::strided<const T>(a.data, dims{rows, cols}, dims{a.rs, a.cs}));
        return detail::matrix_ref<T>{buf, cols, 1};
    }
};

static_assert(device_backend<thrust_device>, "kiln: thrust_device must implement the device interface");

}  // namespace backend
}  // namespace kiln
