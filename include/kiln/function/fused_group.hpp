#pragma once
// A fused elementwise group of a traced function and the loops that run it tile by tile: used by the executor
// (function/executor.hpp, on values held as tensors) and by its buffer plan (function/buffer_plan.hpp).
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <cstdint>
#include <vector>

#include "graph.hpp"

namespace kiln {
namespace detail {

// A fused group's compiled kernel (function/jit.hpp): computes the group's exported members over elements [b, e)
// of its operands `in` (one per distinct value from outside the group) into `out` (one per exported member), all
// pointers to element 0, with streaming stores when `stream`.
using group_kernel = void (*)(const void* const* in, void* const* out, std::ptrdiff_t b, std::ptrdiff_t e, bool stream);

// The same for a group on kiln's GPU device: elements [0, n) of contiguous device operands, on `stream` (the
// device's cudaStream_t; null on the emulated device); periods[k] is the element count of input k where it repeats
// along the group (a bias over a matrix's rows), 0 where it has the group's shape.
using device_group_kernel = void (*)(const void* const* in, void* const* out, const std::ptrdiff_t* periods,
                                     std::ptrdiff_t n, void* stream);

// Where a group's compiled kernel arrives (from the compiler's thread: null until then) and which of the group's
// operands are its inputs, in order: (member, operand) of each distinct value's first use.
struct jit_slot {
    std::atomic<group_kernel> fn{nullptr};
    std::atomic<device_group_kernel> device_fn{nullptr};
    std::atomic<std::uint64_t> runs{0};  // calls that ran the kernel (for tests and diagnostics)
    std::vector<std::pair<std::uint32_t, std::uint32_t>> operands;
    std::string key;
};

// A chain of elementwise ops that runs tile by tile: each tile of every member is computed before the next tile,
// so values used only inside the group never exist beyond one tile (which stays in L1).
struct fused_group {
    struct operand {
        enum kind_t : std::uint8_t { member, full, periodic } kind;
        std::int32_t index;           // member: its position in the group; otherwise the value
        std::ptrdiff_t period = 0;    // periodic: its element count (it repeats along the group's elements)
    };
    std::vector<std::int32_t> members;        // node indices, in program order
    std::vector<std::vector<operand>> inputs; // per member
    std::vector<char> exported;               // per member: its value is used after the group
    kiln::dtype dtype = kiln::float32;
    int rank = 0;
    std::ptrdiff_t tile = 1024;  // elements per tile: a multiple of every periodic operand's period
    bool periodic = false;       // some operand repeats along the group
    std::shared_ptr<jit_slot> jit;  // its compiled kernel, where kiln::function's compiler is on
};

// Calls tiles(first, last) over [0, total) in whole tiles of L elements: on this thread, or split over the thread
// pool past the threads' threshold. (The thread count is asked for only past the threshold: asking starts the
// pool, whose workers then compete with this thread on small steps.)
template <class F>
void split_tiles(std::ptrdiff_t total, std::ptrdiff_t L, const F& tiles) {
    const std::ptrdiff_t count = (total + L - 1) / L;
    const int threads = total < parallel_threshold() || count < 2 ? 1 : num_threads();
    if (threads <= 1) {
        tiles(std::ptrdiff_t{0}, total);
    } else {
        const int tasks = static_cast<int>(std::min<std::ptrdiff_t>(threads, count));
        thread_pool::instance().parallel_for(tasks, [&](int t) {
            const std::ptrdiff_t a = count * t / tasks * L, b = std::min(total, count * (t + 1) / tasks * L);
            tiles(a, b);
        });
    }
}

// Runs group g's compiled kernel: in one range split over the threads like graph mode's loop, or tile by tile
// where an operand repeats along the group (each tile then reads one laid-out tile of it, as the ops do).
template <int = 0>
void run_compiled(const fused_group& g, group_kernel fn, const std::size_t* first_operand,
                         const std::byte* const* base, std::byte* const* outs, std::ptrdiff_t total) {
    const std::size_t nin = g.jit->operands.size();
    const std::size_t item = size_of(g.dtype);
    g.jit->runs.fetch_add(1, std::memory_order_relaxed);
    std::array<const void*, 512> in;
    std::array<void*, 64> out;
    std::array<char, 512> repeats{};
    std::size_t nout = 0;
    for (std::size_t j = 0; j < g.members.size(); ++j)
        if (g.exported[j]) out[nout++] = outs[j];
    for (std::size_t k = 0; k < nin; ++k) {
        const auto [j, q] = g.jit->operands[k];
        in[k] = base[first_operand[j] + q];
        repeats[k] = g.inputs[j][q].kind == fused_group::operand::periodic;
    }
    if (!g.periodic) {
        const bool stream = total * static_cast<std::ptrdiff_t>(nout * item) >= streaming_threshold();
        const int threads = total < parallel_threshold() ? 1 : num_threads();
        if (threads <= 1) return fn(in.data(), out.data(), 0, total, stream);
        const std::ptrdiff_t chunk = ((total + threads - 1) / threads + 1023) / 1024 * 1024;
        const int tasks = static_cast<int>((total + chunk - 1) / chunk);
        thread_pool::instance().parallel_for(
            tasks, [&](int t) { fn(in.data(), out.data(), t * chunk, std::min(total, (t + 1) * chunk), stream); });
        return;
    }
    const std::ptrdiff_t L = g.tile;
    auto tiles = [&](std::ptrdiff_t first, std::ptrdiff_t last) {
        std::array<const void*, 512> tin;
        std::array<void*, 64> tout;
        for (std::ptrdiff_t at = first; at < last; at += L) {
            const std::ptrdiff_t len = std::min(L, last - at);
            const std::size_t off = static_cast<std::size_t>(at) * item;
            for (std::size_t k = 0; k < nin; ++k)
                tin[k] = repeats[k] ? in[k] : static_cast<const std::byte*>(in[k]) + off;
            for (std::size_t o = 0; o < nout; ++o) tout[o] = static_cast<std::byte*>(out[o]) + off;
            fn(tin.data(), tout.data(), 0, len, false);
        }
    };
    split_tiles(total, L, tiles);
}

// The first `bytes` of `buffer` from a cache line's start, as the arena's buffers and tensors start (a kernel whose
// output is not aligned to its vectors peels a head and pads a tail on every call, and unaligned loads split
// lines). The buffer only grows: a resize down and up again would zero-fill it.
inline std::byte* grown_aligned(std::vector<std::byte>& buffer, std::size_t bytes) {
    if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
    const auto misalign = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64);
    return buffer.data() + (misalign ? 64 - misalign : 0);
}

// Runs group g over `total` elements. `base` holds, for each operand of each member in order, where a full
// operand starts or where one tile of a periodic operand (laid out over the whole tile) starts (member operands'
// entries are unused); `outs[j]` is where exported member j goes; `params[j]` are member j's parameters.
// At most 64 members of at most 8 operands each.
template <int = 0>
void run_tiles(const function_graph& graph, const fused_group& g, const std::byte* const* base,
                      std::byte* const* outs, std::ptrdiff_t total, const std::int64_t* const* params) {
    const std::size_t m = g.members.size();
    const std::ptrdiff_t L = g.tile;
    const std::size_t item = size_of(g.dtype);
    // Where each member's operands start in `base`.
    std::size_t first_operand[64];
    for (std::size_t j = 0, at = 0; j < m; at += g.inputs[j].size(), ++j) first_operand[j] = at;
    if (g.jit)
        if (const group_kernel fn = g.jit->fn.load(std::memory_order_acquire)) return run_compiled(g, fn, first_operand, base, outs, total);
    // A member used only inside the group lives in a scratch tile, which is free again once its last reader in
    // the group has run; that reader may write its own result there (tile by tile, an op reads each element of
    // its operands before it writes that element of its result). So the tiles a group touches stay few (two for
    // a chain), and with its operands they fit in L1.
    std::uint8_t slot[64];
    std::size_t slots = 0;
    {
        std::uint8_t last[64];
        for (std::size_t j = 0; j < m; ++j) {
            last[j] = static_cast<std::uint8_t>(j);
            for (const auto& op : g.inputs[j])
                if (op.kind == fused_group::operand::member) last[op.index] = static_cast<std::uint8_t>(j);
        }
        std::uint64_t free = 0;  // bit s: slot s holds no live value
        for (std::size_t j = 0; j < m; ++j) {
            for (const auto& op : g.inputs[j])
                if (op.kind == fused_group::operand::member && last[op.index] == j && !g.exported[static_cast<std::size_t>(op.index)])
                    free |= std::uint64_t{1} << slot[op.index];
            if (g.exported[j]) continue;
            if (free == 0) free = std::uint64_t{1} << slots++;
            slot[j] = static_cast<std::uint8_t>(std::countr_zero(free));
            free &= free - 1;
        }
    }
    auto tiles = [&](std::ptrdiff_t first, std::ptrdiff_t last) {
        thread_local std::vector<std::byte> scratch_bytes;
        std::byte* const scratch = grown_aligned(scratch_bytes, slots * static_cast<std::size_t>(L) * item);
        const void* ptrs[8];
        for (std::ptrdiff_t at = first; at < last; at += L) {
            const std::ptrdiff_t len = std::min(L, last - at);
            const std::size_t off = static_cast<std::size_t>(at) * item;
            auto value_ptr = [&](std::size_t j) -> std::byte* {
                return g.exported[j] ? outs[j] + off : scratch + slot[j] * static_cast<std::size_t>(L) * item;
            };
            for (std::size_t j = 0; j < m; ++j) {
                const std::size_t b0 = first_operand[j];
                for (std::size_t k = 0; k < g.inputs[j].size(); ++k) {
                    const auto& op = g.inputs[j][k];
                    if (op.kind == fused_group::operand::member) ptrs[k] = value_ptr(static_cast<std::size_t>(op.index));
                    else if (op.kind == fused_group::operand::full) ptrs[k] = base[b0 + k] + off;
                    else ptrs[k] = base[b0 + k];  // one tile of the repeated operand, aligned with the tile
                }
                const std::int32_t node = g.members[j];
                graph.nodes[static_cast<std::size_t>(node)].params.tile(ptrs, value_ptr(j), len, params[j]);
            }
        }
    };
    split_tiles(total, L, tiles);
}

// Lays one period of a periodic operand (`period` elements of `item` bytes at `from`) over as much of a tile as a
// group of `total` elements reads: `tile` elements (a multiple of the period), or `total` where that is less (the
// extent is a multiple of the period too). One copy, then the filled part doubled.
inline void repeat_over_tile(std::byte* to, const std::byte* from, std::ptrdiff_t period, std::ptrdiff_t tile,
                             std::ptrdiff_t total, std::size_t item) {
    const std::size_t bytes = static_cast<std::size_t>(std::min(tile, total)) * item;
    std::size_t done = static_cast<std::size_t>(period) * item;
    std::memcpy(to, from, done);
    while (done < bytes) {
        const std::size_t step = std::min(done, bytes - done);
        std::memcpy(to + done, to, step);
        done += step;
    }
}

// A group's periodic operands, each laid out over one tile (repeat_over_tile), in bytes kept from call to call. They
// only grow: a resize that shrinks for one group and grows for the next zero-filled them again.
class repeat_buffer {
public:
    // Room for `g`'s periodic operands over tiles of `tile` elements of `item` bytes; the next lay() is the first.
    void prepare(const fused_group& g, std::ptrdiff_t tile, std::size_t item) {
        std::size_t periodic = 0;
        for (const auto& ins : g.inputs)
            for (const auto& op : ins) periodic += op.kind == fused_group::operand::periodic;
        stride_ = (static_cast<std::size_t>(tile) * item + 63) / 64 * 64;
        tile_ = tile;
        item_ = item;
        next_ = 0;
        base_ = grown_aligned(bytes_, periodic * stride_);
    }
    // The next periodic operand (`period` elements at `from`) laid out over the tile of a group of `total` elements.
    std::byte* lay(const std::byte* from, std::ptrdiff_t period, std::ptrdiff_t total) {
        std::byte* to = base_ + next_++ * stride_;
        repeat_over_tile(to, from, period, tile_, total, item_);
        return to;
    }

private:
    std::vector<std::byte> bytes_;
    std::byte* base_ = nullptr;
    std::size_t stride_ = 0, next_ = 0, item_ = 0;
    std::ptrdiff_t tile_ = 0;
};

// A group's ops one by one, as without fusion, on values held as tensors (`slots`, one per node); `params_of(node)`
// gives a node's parameters for this call.
template <class ParamsOf>
void run_group_members(const function_graph& graph, const fused_group& g, std::vector<std::optional<tensor>>& slots,
                       const ParamsOf& params_of) {
    std::vector<tensor> in;
    for (std::int32_t node : g.members) {
        const graph_node& nd = graph.nodes[static_cast<std::size_t>(node)];
        in.clear();
        for (std::int32_t v : nd.inputs) in.push_back(*slots[static_cast<std::size_t>(v)]);
        const std::int64_t* p = params_of(node);
        slots[static_cast<std::size_t>(node)] = nd.fn(in, std::span<const std::int64_t>(p, nd.params.values.size()));
    }
}

// A group on the CPU from values held as tensors (the executor's node-by-node run, where no buffer plan applies):
// its shape comes from a full operand (dynamic extents included); operands that are not contiguous are copied first;
// each exported member gets a new tensor; a call whose operands do not fit the group's pattern runs its ops one by
// one.
template <class ParamsOf>
void run_group_from_slots(const function_graph& graph, const fused_group& g, std::vector<std::optional<tensor>>& slots,
                          const ParamsOf& params_of) {
    const std::size_t m = g.members.size();
    dims shape;
    bool have = false, fits = true;
    for (const auto& ins : g.inputs)
        for (const auto& op : ins)
            if (op.kind == fused_group::operand::full) {
                const tensor& t = *slots[static_cast<std::size_t>(op.index)];
                if (!have) shape = t.shape(), have = true;
                fits = fits && t.shape() == shape && t.dtype() == g.dtype;
            }
    for (const auto& ins : g.inputs)
        for (const auto& op : ins)
            if (op.kind == fused_group::operand::periodic) {
                const tensor& t = *slots[static_cast<std::size_t>(op.index)];
                fits = fits && t.numel() == op.period && t.dtype() == g.dtype && t.dim() <= shape.rank;
                for (int d = 0; fits && d < t.dim(); ++d)
                    fits = t.shape()[d] == shape[shape.rank - t.dim() + d] || t.shape()[d] == 1;
            }
    bool narrow = m <= 64;
    for (const auto& ins : g.inputs) narrow = narrow && ins.size() <= 8;
    if (!fits || !narrow || shape.rank != g.rank) {
        run_group_members(graph, g, slots, params_of);  // as without fusion
        return;
    }
    const std::ptrdiff_t L = g.tile;
    const std::size_t item = size_of(g.dtype);
    // This thread's buffers, kept from call to call (a replay allocates them once).
    struct setup {
        std::vector<tensor> keep;                // contiguous copies of strided operands
        std::vector<const std::byte*> base;      // per operand of each member, in order
        repeat_buffer repeated;                  // periodic operands laid out over one tile each
        std::vector<std::byte*> outs;
    };
    thread_local setup su;
    su.keep.clear();
    su.base.clear();
    su.outs.assign(m, nullptr);
    su.repeated.prepare(g, L, item);
    for (std::size_t j = 0; j < m; ++j) {
        for (const auto& op : g.inputs[j]) {
            const std::byte* b = nullptr;
            if (op.kind != fused_group::operand::member) {
                const tensor* t = &*slots[static_cast<std::size_t>(op.index)];
                if (!t->is_contiguous()) {
                    su.keep.push_back(t->clone());
                    t = &su.keep.back();
                }
                b = static_cast<const std::byte*>(t->raw_data());
                if (op.kind == fused_group::operand::periodic) b = su.repeated.lay(b, op.period, shape.numel());
            }
            su.base.push_back(b);
        }
        if (g.exported[j]) {
            slots[static_cast<std::size_t>(g.members[j])] = tensor(g.dtype, shape);
            su.outs[j] = static_cast<std::byte*>(slots[static_cast<std::size_t>(g.members[j])]->raw_data());
        }
    }
    const std::int64_t* member_params[64];
    for (std::size_t j = 0; j < m; ++j) member_params[j] = params_of(g.members[j]);
    run_tiles(graph, g, su.base.data(), su.outs.data(), shape.numel(), member_params);
}

}  // namespace detail
}  // namespace kiln
