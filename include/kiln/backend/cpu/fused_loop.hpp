#pragma once
// One fused loop over a fusion group: every root of the group is computed in a single pass over memory.
// Operands are broadcast by strides; dimensions that are contiguous in every operand are merged first, so most
// loops are one flat range. The inner dimension runs on xsimd batches when the graph has one floating element
// type and the inner strides allow it (1, or 0 for a broadcast operand); otherwise element by element.
// Large loops are split over the thread pool.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "../../core/strided.hpp"
#include "../../expr/shape_inference.hpp"
#include "simd.hpp"
#include "thread_pool.hpp"

namespace kiln::detail {

#if defined(__CUDACC__)
inline constexpr bool cpu_simd_enabled = false;
#else
inline constexpr bool cpu_simd_enabled = true;
#endif

// The parts of a fused loop that depend only on its number of operands, compiled once per count rather than once
// per graph (the eager kernels instantiate a loop for every op, dtype and operand form).

// Strides of the merged iteration space, one row per operand (leaves first, then outputs).
template <std::size_t NO>
struct loop_layout {
    int rank = 0;
    std::array<std::ptrdiff_t, max_rank> extent{};
    std::array<std::array<std::ptrdiff_t, max_rank>, NO> stride{};

    static loop_layout make(const dims& shape, const std::array<dims, NO>& strides) {
        loop_layout l;
        // Walk from the innermost dimension, dropping extent-1 dimensions and merging contiguous ones.
        for (int d = shape.rank - 1; d >= 0; --d) {
            if (shape[d] == 1) continue;
            if (l.rank > 0) {
                const int cur = l.rank - 1;
                bool merge = true;
                for (std::size_t k = 0; k < NO && merge; ++k)
                    merge = strides[k][d] == l.stride[k][cur] * l.extent[cur];
                if (merge) {
                    l.extent[cur] *= shape[d];
                    continue;
                }
            }
            l.extent[l.rank] = shape[d];
            for (std::size_t k = 0; k < NO; ++k) l.stride[k][l.rank] = strides[k][d];
            ++l.rank;
        }
        if (l.rank == 0) {
            l.rank = 1;
            l.extent[0] = 1;
        }
        std::reverse(l.extent.begin(), l.extent.begin() + l.rank);
        for (auto& s : l.stride) std::reverse(s.begin(), s.begin() + l.rank);
        return l;
    }
};

// Strides of an operand of shape `s` (strides `st`) broadcast to `shape`: 0 along repeated dimensions.
inline dims broadcast_strides(const dims& s, const dims& st, const dims& shape) {
    dims out;
    out.rank = shape.rank;
    for (int d = 0; d < shape.rank; ++d) {
        const int ds = d - (shape.rank - s.rank);
        out[d] = (ds >= 0 && s[ds] != 1) ? st[ds] : 0;
    }
    return out;
}

// True when an operand of shape `s` and strides `st` has exactly `shape` and is laid out row-major without gaps.
inline bool dense_operand(const dims& s, const dims& st, const dims& shape) noexcept {
    return s == shape && is_row_major(s, st);
}

template <class List, class... Roots>
struct fused_loop {
    using leaves = leaves_t<List>;
    static constexpr std::size_t NL = leaves::size;
    static constexpr std::size_t NR = sizeof...(Roots);
    static constexpr std::size_t NO = NL + NR;

    template <class L>
    struct first_leaf_type {
        using type = double;
    };
    template <class L0, class... Ls>
    struct first_leaf_type<types<L0, Ls...>> {
        using type = typename L0::value_type;
    };
    using T = typename first_leaf_type<leaves>::type;

    template <class L>
    struct leaves_are;
    template <class... Ls>
    struct leaves_are<types<Ls...>> {
        static constexpr bool value = (std::is_same_v<typename Ls::value_type, T> && ...);
    };

    // Batches need one floating type everywhere: leaves, inner nodes and roots. In a translation unit compiled by
    // nvcc the CPU's loops stay scalar: the ops are __host__ __device__, and nvcc refuses their instantiations on
    // xsimd's vector types (compile CPU-heavy code with the host compiler).
    static constexpr bool vectorized = cpu_simd_enabled && (std::is_same_v<T, float> || std::is_same_v<T, double>) && NL > 0 &&
                                       leaves_are<leaves>::value && (uniform_type<Roots, T>::value && ...) &&
                                       (std::is_same_v<root_type_t<Roots>, T> && ...);
    static constexpr std::ptrdiff_t W = vectorized ? static_cast<std::ptrdiff_t>(xsimd::batch<T>::size) : 1;

    // Expressions of up to 16 nodes run two batches per loop iteration; those of more than 32 keep one copy of
    // each loop (their evaluation is long enough that neither the unrolling nor streaming stores pay, and each
    // inlined copy costs compile time).
    static constexpr std::size_t unroll_nodes = 16;
    static constexpr bool large = List::size > 32;
    using roots_t = root_pack<Roots...>;
    using outs_t = std::tuple<strided<root_type_t<Roots>>...>;
    template <class Bound>
    struct leaf_ptrs;
    template <class... S>
    struct leaf_ptrs<std::tuple<S...>> {
        using type = std::tuple<decltype(std::remove_cvref_t<S>::data)...>;
    };
    template <class Bound>
    using leaf_ptrs_t = typename leaf_ptrs<Bound>::type;

    using layout = loop_layout<NO>;

    template <class Bound, class Rp>
    static void run(const Rp& roots, const Bound& bound, const outs_t& outs, const dims& shape) {
        const std::ptrdiff_t n = shape.numel();
        if (n == 0) return;
        // The common case, every operand dense and of one shape, is one flat range: no layout to compute.
        const bool flat = [&]<std::size_t... K, std::size_t... J>(std::index_sequence<K...>, std::index_sequence<J...>) {
            return (dense_operand(std::get<K>(bound).shape, std::get<K>(bound).strides, shape) && ...) &&
                   (dense_operand(std::get<J>(outs).shape, std::get<J>(outs).strides, shape) && ...);
        }(std::make_index_sequence<NL>{}, std::make_index_sequence<NR>{});
        if (flat) return run_flat(roots, bound, outs, n);
        run_strided(roots, bound, outs, shape, n);
    }

    template <class Bound, class Rp>
    static void run_flat(const Rp& roots, const Bound& bound, const outs_t& outs, std::ptrdiff_t n) {
        const auto lp = [&]<std::size_t... K>(std::index_sequence<K...>) {
            return leaf_ptrs_t<Bound>{std::get<K>(bound).data...};
        }(std::make_index_sequence<NL>{});
        const auto op = [&]<std::size_t... J>(std::index_sequence<J...>) {
            return std::tuple<root_type_t<Roots>*...>{std::get<J>(outs).data...};
        }(std::make_index_sequence<NR>{});
        run_flat_ptrs(roots, lp, op, n);
    }

    // Every operand dense and of one shape, given by its first element: one flat range (eager mode calls this
    // directly for contiguous operands, without building views). Inline, with the threaded case out of line: a
    // small loop goes straight to its row, its pointers passed in registers rather than through a closure.
    template <class LeafPtrs, class Rp>
    KILN_INLINE static void run_flat_ptrs(const Rp& roots, const LeafPtrs& lp,
                                          const std::tuple<root_type_t<Roots>*...>& op, std::ptrdiff_t n) {
        if (n < parallel_threshold()) {
            if (n > 0) flat_range(roots, lp, op, 0, n, stream_output(n));
        } else {
            run_flat_threaded(roots, lp, op, n);
        }
    }

    static constexpr std::array<std::ptrdiff_t, NO> unit_strides = [] {
        std::array<std::ptrdiff_t, NO> a{};
        a.fill(1);
        return a;
    }();

    // Outputs larger than the streaming threshold skip the caches.
    static bool stream_output(std::ptrdiff_t n) noexcept {
        return n * static_cast<std::ptrdiff_t>(NR * sizeof(T)) >= streaming_threshold();
    }

    template <class LeafPtrs, class Rp>
    KILN_INLINE static void flat_range(const Rp& roots, const LeafPtrs& lp,
                                       const std::tuple<root_type_t<Roots>*...>& op, std::ptrdiff_t b,
                                       std::ptrdiff_t e, bool stream) {
        if constexpr (vectorized) {
            [&]<std::size_t... K, std::size_t... J>(std::index_sequence<K...>, std::index_sequence<J...>) {
                simd_flat(roots, b, e, stream, static_cast<const T*>(std::get<K>(lp))..., std::get<J>(op)...);
            }(std::make_index_sequence<NL>{}, std::make_index_sequence<NR>{});
        } else {
            scalar_row<true>(roots, lp, op, unit_strides, b, e);
        }
    }

    template <class LeafPtrs, class Rp>
    KILN_NOINLINE static void run_flat_threaded(const Rp& roots, const LeafPtrs& lp,
                                                            const std::tuple<root_type_t<Roots>*...>& op,
                                                            std::ptrdiff_t n) {
        const bool stream = stream_output(n);
        const int threads = num_threads();
        if (threads <= 1) return flat_range(roots, lp, op, 0, n, stream);
        const std::ptrdiff_t chunk = ((n + threads - 1) / threads + 63) / 64 * 64;
        const int tasks = static_cast<int>((n + chunk - 1) / chunk);
        thread_pool::instance().parallel_for(
            tasks, [&](int t) { flat_range(roots, lp, op, t * chunk, std::min(n, (t + 1) * chunk), stream); });
    }

    template <class Bound, class Rp>
    static void run_strided(const Rp& roots, const Bound& bound, const outs_t& outs, const dims& shape,
                            std::ptrdiff_t n) {
        std::array<dims, NO> strides;
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            ((strides[K] = broadcast_strides(std::get<K>(bound).shape, std::get<K>(bound).strides, shape)), ...);
        }(std::make_index_sequence<NL>{});
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((strides[NL + J] = std::get<J>(outs).strides), ...);
        }(std::make_index_sequence<NR>{});
        const layout l = layout::make(shape, strides);

        const std::ptrdiff_t inner = l.extent[l.rank - 1];
        std::ptrdiff_t outer = 1;
        for (int d = 0; d + 1 < l.rank; ++d) outer *= l.extent[d];

        auto rows = [&](std::ptrdiff_t ob, std::ptrdiff_t oe, std::ptrdiff_t ib, std::ptrdiff_t ie) {
            process(roots, bound, outs, l, ob, oe, ib, ie);
        };
        const int threads = num_threads();
        if (n < parallel_threshold() || threads <= 1) {
            rows(0, outer, 0, inner);
            return;
        }
        if (outer == 1) {
            // Split the flat range into one aligned chunk per thread.
            const std::ptrdiff_t chunk = ((inner + threads - 1) / threads + 63) / 64 * 64;
            const int tasks = static_cast<int>((inner + chunk - 1) / chunk);
            thread_pool::instance().parallel_for(tasks, [&](int t) {
                rows(0, 1, t * chunk, std::min(inner, (t + 1) * chunk));
            });
        } else {
            const int tasks = static_cast<int>(std::min<std::ptrdiff_t>(outer, threads));
            thread_pool::instance().parallel_for(tasks, [&](int t) {
                rows(outer * t / tasks, outer * (t + 1) / tasks, 0, inner);
            });
        }
    }

    template <class Bound, class Rp>
    static void process(const Rp& roots, const Bound& bound, const outs_t& outs, const layout& l,
                        std::ptrdiff_t ob, std::ptrdiff_t oe, std::ptrdiff_t ib, std::ptrdiff_t ie) {
        const int inner_dim = l.rank - 1;
        std::array<std::ptrdiff_t, NO> inner_stride;
        for (std::size_t k = 0; k < NO; ++k) inner_stride[k] = l.stride[k][inner_dim];

        bool unit = true, simd_ok = vectorized;
        for (std::size_t k = 0; k < NO; ++k) {
            unit = unit && inner_stride[k] == 1;
            simd_ok = simd_ok && (k < NL ? inner_stride[k] <= 1 && inner_stride[k] >= 0 : inner_stride[k] == 1);
        }

        if constexpr (vectorized) {
            // Rows of a matrix (the common broadcast: (rows, n) with (n,) or (rows, 1)): one call runs every row,
            // with the operands' pointers kept in registers from row to row.
            if (simd_ok && l.rank == 2) {
                std::array<const T*, NL> lp;
                std::array<std::ptrdiff_t, NL> ls, los;
                std::array<T*, NR> op;
                std::array<std::ptrdiff_t, NR> oos;
                [&]<std::size_t... K>(std::index_sequence<K...>) {
                    ((lp[K] = std::get<K>(bound).data + ob * l.stride[K][0], ls[K] = inner_stride[K],
                      los[K] = l.stride[K][0]), ...);
                }(std::make_index_sequence<NL>{});
                [&]<std::size_t... J>(std::index_sequence<J...>) {
                    ((op[J] = std::get<J>(outs).data + ob * l.stride[NL + J][0], oos[J] = l.stride[NL + J][0]), ...);
                }(std::make_index_sequence<NR>{});
                for (std::ptrdiff_t o = ob; o < oe; ++o) {
                    simd_span(roots, lp, ls, op, unit, ib, ie, ib);
                    for (std::size_t k = 0; k < NL; ++k) lp[k] += los[k];
                    for (std::size_t j = 0; j < NR; ++j) op[j] += oos[j];
                }
                return;
            }
        }
        for (std::ptrdiff_t o = ob; o < oe; ++o) {
            // Offsets of this row in every operand.
            std::array<std::ptrdiff_t, NO> offset{};
            std::ptrdiff_t rest = o;
            for (int d = inner_dim - 1; d >= 0; --d) {
                // The outermost index needs no division (rows of a matrix: the common case).
                const std::ptrdiff_t idx = d == 0 ? rest : rest % l.extent[d];
                if (d != 0) rest /= l.extent[d];
                for (std::size_t k = 0; k < NO; ++k) offset[k] += idx * l.stride[k][d];
            }
            auto lp = [&]<std::size_t... K>(std::index_sequence<K...>) {
                return leaf_ptrs_t<Bound>{(std::get<K>(bound).data + offset[K])...};
            }(std::make_index_sequence<NL>{});
            auto op = [&]<std::size_t... J>(std::index_sequence<J...>) {
                return std::tuple<root_type_t<Roots>*...>{(std::get<J>(outs).data + offset[NL + J])...};
            }(std::make_index_sequence<NR>{});

            if constexpr (vectorized) {
                if (simd_ok) {
                    simd_row(roots, lp, op, inner_stride, unit, ib, ie);
                    continue;
                }
            }
            // A vectorized loop with unit strides always takes batches above: only the strided rows are left.
            if (!vectorized && unit) scalar_row<true>(roots, lp, op, inner_stride, ib, ie);
            else scalar_row<false>(roots, lp, op, inner_stride, ib, ie);
        }
    }

    template <class Rp, class Frame>
    KILN_INLINE static void store_roots(const Rp& roots, const Frame& f, const std::array<T*, NR>& op,
                                        std::ptrdiff_t i) {
        [&]<std::size_t... J>(std::index_sequence<J...>) KILN_LAMBDA_INLINE {
            (f.template evaluate<T>(roots.template get<J>()).store_unaligned(op[J] + i), ...);
        }(std::make_index_sequence<NR>{});
    }

    // A row in batches: contiguous rows take the unit path, rows with a broadcast operand (stride 0) the other.
    template <class LeafPtrs, class Out, class Rp>
    static void simd_row(const Rp& roots, const LeafPtrs& lp_tuple, const Out& op_tuple,
                         const std::array<std::ptrdiff_t, NO>& inner_stride, bool unit, std::ptrdiff_t ib,
                         std::ptrdiff_t ie) {
        // Plain local arrays: the compiler keeps these pointers in registers across the stores of the loop.
        std::array<const T*, NL> lp;
        std::array<std::ptrdiff_t, NL> ls;
        std::array<T*, NR> op;
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            ((lp[K] = std::get<K>(lp_tuple), ls[K] = inner_stride[K]), ...);
        }(std::make_index_sequence<NL>{});
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((op[J] = std::get<J>(op_tuple)), ...);
        }(std::make_index_sequence<NR>{});
        if (unit) {
            [&]<std::size_t... K, std::size_t... J>(std::index_sequence<K...>, std::index_sequence<J...>) {
                simd_flat(roots, ib, ie, false, lp[K]..., op[J]...);
            }(std::make_index_sequence<NL>{}, std::make_index_sequence<NR>{});
        } else {
            simd_span(roots, lp, ls, op, false, ib, ie, ib);
        }
    }

    // The flat range of a loop whose operands are all dense and of one shape (the common case). Its pointers come
    // as separate arguments, in registers for small graphs. Passed as a tuple by reference, the caller stored them
    // and the callee loaded them back, packed into one vector by GCC: a failed store-to-load forwarding and a
    // chain of shuffles before the first load, a tenth of a 2^10-element call.
    template <class Rp, class... P>
    KILN_NOINLINE static void simd_flat(const Rp& roots, std::ptrdiff_t ib, std::ptrdiff_t ie,
                                                    bool stream, P... p) {
        static_assert(sizeof...(P) == NO);
        const std::tuple<P...> all{p...};
        std::array<const T*, NL> lp;
        std::array<T*, NR> op;
        [&]<std::size_t... K>(std::index_sequence<K...>) {
            ((lp[K] = std::get<K>(all)), ...);
        }(std::make_index_sequence<NL>{});
        [&]<std::size_t... J>(std::index_sequence<J...>) {
            ((op[J] = std::get<NL + J>(all)), ...);
        }(std::make_index_sequence<NR>{});
        unit_range(roots, lp, op, ib, ie, stream);
    }

    // Elements [ib, ie) with every operand contiguous.
    template <class Rp>
    KILN_INLINE static void unit_range(const Rp& roots, const std::array<const T*, NL>& lp,
                                       const std::array<T*, NR>& op, std::ptrdiff_t ib, std::ptrdiff_t ie,
                                       bool stream) {
        const auto& ls = unit_leaf_strides;
        std::ptrdiff_t i = ib;
        // Peel up to the first output's vector alignment, so that its stores never split a cache line (the
        // inputs usually share the output's offset and become aligned too). Short rows skip it: there a
        // padded partial batch costs more than the split stores it saves.
        constexpr std::size_t align = W * sizeof(T);
        const auto misalign = reinterpret_cast<std::uintptr_t>(op[0] + i) % align;
        const bool peel = misalign != 0 && misalign % sizeof(T) == 0 && ie - i >= 32 * W;
        const std::ptrdiff_t head = peel ? static_cast<std::ptrdiff_t>((align - misalign) / sizeof(T)) : 0;
        if constexpr (large) {
            // One out-of-line copy of the loops, shared with the rows of broadcasts (compile time).
            if (peel) {
                if (disjoint(lp, ls, op, i, ie)) one_batch(roots, lp, ls, op, i);
                else partial_batch(roots, lp, ls, op, i, head);
                i += head;
            }
            simd_span(roots, lp, ls, op, true, i, ie, ib);
        } else {
            // Without aliasing, the head and the last W elements are two full unaligned batches, computed first
            // in one call with their loads ahead of their stores (loaded after the loop, the last batch's inputs
            // wait behind the loop's stores); the loop then rewrites their overlap with the same values. With
            // aliasing (in place), both are padded partial batches.
            const bool whole = ie - i >= W && disjoint(lp, ls, op, i, ie);
            if (whole && (peel || (ie - i - head) % W != 0)) edge_batches(roots, lp, op, i, ie - W);
            else if (peel) partial_batch(roots, lp, ls, op, i, head);
            i += head;
            if (stream && aligned_outputs(op, i)) stream_batches(roots, lp, op, i, ie);
            i = unit_batches(roots, lp, op, i, ie);
            if (i < ie && !whole) partial_batch(roots, lp, ls, op, i, ie - i);
        }
    }

    KILN_INLINE static bool aligned_outputs(const std::array<T*, NR>& op, std::ptrdiff_t i) {
        bool aligned = true;
        for (std::size_t j = 0; j < NR; ++j)
            aligned = aligned && reinterpret_cast<std::uintptr_t>(op[j] + i) % (W * sizeof(T)) == 0;
        return aligned;
    }

    // Full batches from i with streaming stores (outputs aligned); large expressions compute more than they move
    // and skip this copy of the loop.
    template <class Rp>
    KILN_INLINE static void stream_batches(const Rp& roots, const std::array<const T*, NL>& lp,
                                           const std::array<T*, NR>& op, std::ptrdiff_t& i, std::ptrdiff_t ie) {
        if constexpr (!large) {
            using frame_t = frame<simd_mode<T>, List>;
            for (const std::ptrdiff_t last = ie - W; i <= last; i += W) {
                const frame_t f(contiguous_loader<T, NL>{lp, i});
                [&]<std::size_t... J>(std::index_sequence<J...>) KILN_LAMBDA_INLINE {
                    (stream_store(op[J] + i, f.template evaluate<T>(roots.template get<J>())), ...);
                }(std::make_index_sequence<NR>{});
            }
            stream_fence();
        }
    }

    // Two full batches of contiguous operands, at a and at b, both loaded before either is stored.
    template <class Rp>
    KILN_NOINLINE static void edge_batches(const Rp& roots, const std::array<const T*, NL>& lp,
                                                       const std::array<T*, NR>& op, std::ptrdiff_t a,
                                                       std::ptrdiff_t b) {
        using frame_t = frame<simd_mode<T>, List>;
        using leaves_t = loaded_leaves<T, NL>;
        const leaves_t la = leaves_t::load(lp, a), lb = leaves_t::load(lp, b);
        store_roots(roots, frame_t(la), op, a);
        store_roots(roots, frame_t(lb), op, b);
    }

    // One full batch at element i (strides 1 or 0), out of line: the head and the tail of a span share it, so the
    // expression is not inlined once more for each of them (compile time of large expressions).
    template <class Rp>
    KILN_NOINLINE static void one_batch(const Rp& roots, const std::array<const T*, NL>& lp,
                                                    const std::array<std::ptrdiff_t, NL>& ls,
                                                    const std::array<T*, NR>& op, std::ptrdiff_t i) {
        store_roots(roots, frame<simd_mode<T>, List>(broadcast_loader<T, NL>{lp, ls, i}), op, i);
    }

    // True when no output overlaps an input over elements [b, e): then a batch may be computed and stored twice.
    // With `in_place_ok`, an output that starts where an input starts (the same array) does not count.
    KILN_INLINE static bool disjoint(const std::array<const T*, NL>& lp, const std::array<std::ptrdiff_t, NL>& ls,
                                     const std::array<T*, NR>& op, std::ptrdiff_t b, std::ptrdiff_t e,
                                     bool in_place_ok = false) {
        for (std::size_t j = 0; j < NR; ++j) {
            const auto ob = reinterpret_cast<std::uintptr_t>(op[j] + b), oe = reinterpret_cast<std::uintptr_t>(op[j] + e);
            for (std::size_t k = 0; k < NL; ++k) {
                const auto ib = reinterpret_cast<std::uintptr_t>(lp[k] + (ls[k] != 0 ? b : 0));
                const auto ie = reinterpret_cast<std::uintptr_t>(lp[k] + (ls[k] != 0 ? e : 1));
                if (ib < oe && ob < ie && !(in_place_ok && ib == ob)) return false;
            }
        }
        return true;
    }

    static constexpr std::array<std::ptrdiff_t, NL> unit_leaf_strides = [] {
        std::array<std::ptrdiff_t, NL> a{};
        a.fill(1);
        return a;
    }();

    // Full batches of elements [i, ie) with every operand contiguous; returns where they stop (less than a batch
    // before ie). The bound is computed once: `i + W <= ie` in the condition costs two instructions per batch.
    template <class Rp>
    KILN_INLINE static std::ptrdiff_t unit_batches(const Rp& roots, const std::array<const T*, NL>& lp,
                                                   const std::array<T*, NR>& op, std::ptrdiff_t i, std::ptrdiff_t ie) {
        using frame_t = frame<simd_mode<T>, List>;
        // Small expressions run two batches per iteration, software-pipelined: the leaves of batch i + W are
        // loaded before batch i is stored. Half the loop overhead, the two batches' chains overlap, and no load
        // waits behind the store before it. The loop stops one batch early; the batch it loaded last is loaded
        // again by the single-batch loop below (one more load, one copy of the expression fewer). Large
        // expressions run one batch per iteration (compile time; their arithmetic hides the overhead anyway), and
        // so does an output that partly overlaps an input.
        if constexpr (List::size <= unroll_nodes) {
            // Loads may run ahead of the stores when every output is disjoint from each input or is the same
            // array (in place: batch k + 1 reads other elements than batch k writes).
            if (ie - i >= 3 * W && disjoint(lp, unit_leaf_strides, op, i, ie, true)) {
                using leaves_t = loaded_leaves<T, NL>;
                leaves_t a = leaves_t::load(lp, i);
                for (const std::ptrdiff_t last = ie - 3 * W; i <= last; i += 2 * W) {
                    const leaves_t b = leaves_t::load(lp, i + W);
                    store_roots(roots, frame_t(a), op, i);
                    a = leaves_t::load(lp, i + 2 * W);
                    store_roots(roots, frame_t(b), op, i + W);
                }
            }
        }
        for (const std::ptrdiff_t last = ie - W; i <= last; i += W)
            store_roots(roots, frame_t(contiguous_loader<T, NL>{lp, i}), op, i);
        return i;
    }

    // Elements [i, ie) of one row in full batches, then one padded partial batch.
    // `lo` is where the span's row starts: a last batch ending at ie may reach back to it when nothing aliases.
    // Inline for small expressions; large ones share one out-of-line copy between the flat and the row loops.
    template <class Rp>
    KILN_INLINE static void simd_span(const Rp& roots, const std::array<const T*, NL>& lp,
                                      const std::array<std::ptrdiff_t, NL>& ls, const std::array<T*, NR>& op, bool unit,
                                      std::ptrdiff_t i, std::ptrdiff_t ie, std::ptrdiff_t lo) {
        if constexpr (large) simd_span_outlined(roots, lp, ls, op, unit, i, ie, lo);
        else simd_span_body(roots, lp, ls, op, unit, i, ie, lo);
    }

    template <class Rp>
    KILN_NOINLINE static void simd_span_outlined(const Rp& roots, const std::array<const T*, NL>& lp,
                                                             const std::array<std::ptrdiff_t, NL>& ls,
                                                             const std::array<T*, NR>& op, bool unit, std::ptrdiff_t i,
                                                             std::ptrdiff_t ie, std::ptrdiff_t lo) {
        simd_span_body(roots, lp, ls, op, unit, i, ie, lo);
    }

    template <class Rp>
    KILN_INLINE static void simd_span_body(const Rp& roots, const std::array<const T*, NL>& lp,
                                      const std::array<std::ptrdiff_t, NL>& ls, const std::array<T*, NR>& op, bool unit,
                                      std::ptrdiff_t i, std::ptrdiff_t ie, std::ptrdiff_t lo) {
        using frame_t = frame<simd_mode<T>, List>;
        if (unit) {
            i = unit_batches(roots, lp, op, i, ie);
        } else {
            for (const std::ptrdiff_t last = ie - W; i <= last; i += W)
                store_roots(roots, frame_t(broadcast_loader<T, NL>{lp, ls, i}), op, i);
        }
        if (i < ie) {
            if (ie - lo >= W && disjoint(lp, ls, op, lo, ie)) {
                one_batch(roots, lp, ls, op, ie - W);
            } else {
                partial_batch(roots, lp, ls, op, i, ie - i);
            }
        }
    }

    // Fewer than W elements run as one padded batch, so every element gets the same arithmetic whatever the size
    // and alignment.
    template <class Rp>
    static void partial_batch(const Rp& roots, const std::array<const T*, NL>& lp,
                              const std::array<std::ptrdiff_t, NL>& ls, const std::array<T*, NR>& op,
                              std::ptrdiff_t i, std::ptrdiff_t count) {
        using frame_t = frame<simd_mode<T>, List>;
        alignas(64) T in[NL > 0 ? NL : 1][W];
        alignas(64) T out[NR][W];
        std::array<const T*, NL> bp;
        for (std::size_t k = 0; k < NL; ++k) {
            // Padding repeats a real element, so no lane computes on garbage (no spurious NaN or trap).
            if (ls[k]) {
                // Plain loops, not memcpy: at fewer than W elements a library call costs more than the copy.
                for (std::ptrdiff_t e = 0; e < count; ++e) in[k][e] = lp[k][i + e];
                for (std::ptrdiff_t e = count; e < W; ++e) in[k][e] = lp[k][i];
            } else {
                for (std::ptrdiff_t e = 0; e < W; ++e) in[k][e] = *lp[k];
            }
            bp[k] = in[k];
        }
        const frame_t f(contiguous_loader<T, NL>{bp, 0});
        [&]<std::size_t... J>(std::index_sequence<J...>) KILN_LAMBDA_INLINE {
            (f.template evaluate<T>(roots.template get<J>()).store_aligned(out[J]), ...);
            ([&] {
                for (std::ptrdiff_t e = 0; e < count; ++e) op[J][i + e] = out[J][e];
            }(), ...);
        }(std::make_index_sequence<NR>{});
    }

    template <bool Unit, class LeafPtrs, class Out, class Rp>
    static void scalar_row(const Rp& roots, const LeafPtrs& lp, const Out& op,
                           const std::array<std::ptrdiff_t, NO>& inner_stride, std::ptrdiff_t ib, std::ptrdiff_t ie) {
        using frame_t = frame<scalar_mode, List>;
        std::array<std::ptrdiff_t, NL> ls;
        for (std::size_t k = 0; k < NL; ++k) ls[k] = inner_stride[k];
        for (std::ptrdiff_t i = ib; i < ie; ++i) {
            const frame_t f(strided_loader<LeafPtrs, NL, Unit>{lp, ls, i});
            [&]<std::size_t... J>(std::index_sequence<J...>) KILN_LAMBDA_INLINE {
                ((std::get<J>(op)[Unit ? i : i * inner_stride[NL + J]] =
                      f.template evaluate<root_type_t<Roots>>(roots.template get<J>())),
                 ...);
            }(std::make_index_sequence<NR>{});
        }
    }
};

}  // namespace kiln::detail
