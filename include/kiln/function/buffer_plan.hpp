#pragma once
// The buffer plan of a traced function: for one signature and one set of dynamic extents, where every value lives
// and how every node runs, worked out once from a call that the executor watched (function/executor.hpp).
//
// Each value is one of: an argument; a constant or variable (read where it lives); a view of another value (an
// op whose result shared its input's storage when watched: it costs nothing at run time); a buffer in the call's
// arena (the results of fused groups, single elementwise ops, 2-D matrix products and contiguous sums, which the
// plan runs itself from raw pointers); or the tensor that the op's own replay function returns (every other op).
// A result is written into a new tensor of its own rather than into the arena.
// Arena buffers are reused once the values in them, and every view of them, are dead (first fit by liveness), and
// an elementwise result takes over its operand's buffer when that operand dies there (in place).
//
// A call runs the plan when its arguments have the layouts (dtype, shape, strides) of the watched call; any other
// call runs node by node, as before. This header makes plans; function/plan_run.hpp runs them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../backend/cpu/device.hpp"
#include "fused_group.hpp"
#include "graph.hpp"

namespace kiln {
namespace detail {

struct buffer_plan {
    struct value {
        enum kind_t : std::uint8_t { none, argument, fixed, arena, view, owned } kind = none;
        std::int32_t source = -1;    // view: the value it views
        std::ptrdiff_t offset = 0;   // arena: byte offset; view: bytes from its source's first element
        std::int32_t root = -1;      // the value whose buffer this one lives in (itself unless a view)
        bool result = false;         // arena kind: a result's buffer, a new tensor each call instead of the arena
        kiln::dtype dtype = kiln::float32;
        dims shape, strides;
    };
    struct step {
        enum kind_t : std::uint8_t { view, group, matmul, sum, op, effect } kind = op;
        std::int32_t node = -1;   // group: its index in `groups`
        // matmul: C (m x n) = A (m x k) B (k x n), A[i, j] at i * ars + j * acs (B likewise)
        std::ptrdiff_t m = 0, n = 0, k = 0, ars = 0, acs = 0, brs = 0, bcs = 0;
        // matmul's epilogue (the matmul + bias + activation fusion): C[i, j] += bias[j % period] in place, which
        // is then the value of the add node `add`; with `act`, that unary elementwise op of C into its own buffer.
        std::int32_t bias = -1, add = -1, act = -1;
        std::ptrdiff_t period = 0;
        // sum: the operand's shape with the reduced axes set to 1
        dims keep;
        std::vector<std::int32_t> release;  // owned values (fallback results) that die after this step
        std::vector<std::pair<std::int32_t, std::int32_t>> in_place;  // group: (member, operand buffer it took over)
    };

    std::uint64_t id = 0;
    bool ok = false;            // false: this signature and these extents run node by node
    std::string why_not;        // when not ok: why ("group 0: operand %3 is not contiguous")
    std::vector<value> values;  // per node
    std::vector<step> steps;
    std::vector<fused_group> groups;  // the executor's groups, and single elementwise ops as groups of one
    std::size_t arena_bytes = 0;
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params;  // bound for these extents (null: traced)

    std::size_t planned(step::kind_t k) const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.kind == k;
        return c;
    }
    // Values written over a buffer of their own operand that died there (in-place execution).
    std::size_t in_place() const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.in_place.size();
        return c;
    }
    // Matrix products that add a bias (and apply an activation) as they store their result.
    std::size_t fused_epilogues() const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.kind == step::matmul && s.bias >= 0;
        return c;
    }
    // The steps, one a line: "matmul %3 (32x10 * 10x64) + bias %4 -> %5, relu -> %6", "group 1: %10 %11 %12", ...
    std::string describe(const function_graph& g) const {
        if (!ok) return "not planned: " + why_not + "\n";
        std::string out;
        auto v = [](std::int32_t i) { return "%" + std::to_string(i); };
        for (const step& s : steps) {
            switch (s.kind) {
                case step::view:
                    if (s.node < 0) continue;
                    out += "view " + v(s.node);
                    break;
                case step::group: {
                    out += "group " + std::to_string(s.node) + ":";
                    for (std::int32_t m : groups[static_cast<std::size_t>(s.node)].members)
                        out += " " + v(m) + " " + g.nodes[static_cast<std::size_t>(m)].op;
                    for (const auto& [m, over] : s.in_place) out += ", " + v(m) + " in place of " + v(over);
                    break;
                }
                case step::matmul:
                    out += "matmul " + v(s.node) + " (" + std::to_string(s.m) + "x" + std::to_string(s.k) + " * " +
                           std::to_string(s.k) + "x" + std::to_string(s.n) + ")";
                    if (s.bias >= 0) out += " + bias " + v(s.bias) + " -> " + v(s.add);
                    if (s.act >= 0) out += ", " + g.nodes[static_cast<std::size_t>(s.act)].op + " -> " + v(s.act);
                    break;
                case step::sum: out += "sum " + v(s.node); break;
                case step::op: out += "op " + v(s.node) + " " + g.nodes[static_cast<std::size_t>(s.node)].op; break;
                case step::effect: out += "effect " + v(s.node) + " " + g.nodes[static_cast<std::size_t>(s.node)].op; break;
            }
            out += "\n";
        }
        return out;
    }

    const std::int64_t* params_of(const function_graph& g, std::int32_t node) const {
        if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)].data();
        return g.nodes[static_cast<std::size_t>(node)].params.values.data();
    }
    std::span<const std::int64_t> param_span(const function_graph& g, std::int32_t node) const {
        if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)];
        return g.nodes[static_cast<std::size_t>(node)].params.values;
    }
};

inline std::uint64_t next_plan_id() {
    static std::atomic<std::uint64_t> counter{1};
    return counter.fetch_add(1, std::memory_order_relaxed);
}

// "axes=0,1 keepdims=true" -> {0, 1}, true (false when the text is not a reduction's).
template <int = 0>
bool parse_reduction_attrs(const std::string& attrs, std::vector<int>& axes, bool& keepdims) {
    const std::size_t a = attrs.find("axes="), k = attrs.find("keepdims=");
    if (a != 0 || k == std::string::npos) return false;
    axes.clear();
    std::size_t i = 5;
    while (i < attrs.size() && attrs[i] != ' ') {
        const std::size_t end = attrs.find_first_of(", ", i);
        const std::string part = attrs.substr(i, end - i);
        char* stop = nullptr;
        const long v = std::strtol(part.c_str(), &stop, 10);
        if (part.empty() || *stop != '\0') return false;
        axes.push_back(static_cast<int>(v));
        i = end == std::string::npos ? attrs.size() : end + (attrs[end] == ',' ? 1 : 0);
    }
    keepdims = attrs.compare(k + 9, 4, "true") == 0;
    return true;
}

// How many elements at x's first element repeat along it when x is a broadcast of a contiguous tail (leading axes of
// stride 0, then contiguous trailing axes: a bias broadcast over rows, a number broadcast over a shape); x.numel()
// for a contiguous x; 0 for other layouts.
template <int = 0>
std::ptrdiff_t repeating_period(const tensor& x) {
    std::ptrdiff_t period = 1;
    int d = x.dim() - 1;
    for (; d >= 0; --d) {
        if (x.shape()[d] == 1) continue;
        if (x.strides()[d] != period) break;
        period *= x.shape()[d];
    }
    for (; d >= 0; --d)
        if (x.shape()[d] != 1 && x.strides()[d] != 0) return 0;
    return period;
}

// A group's tile grown to a multiple of `period` (0 when that passes 8192 elements), as fuse() makes it.
// `periodic`: the group has repeating operands already (the tile must stay a multiple of their periods).
inline std::ptrdiff_t tile_with_period(std::ptrdiff_t tile, std::ptrdiff_t period, bool periodic) {
    const std::ptrdiff_t base = tile % period == 0       ? tile
                                : tile == 1024 && !periodic ? period * ((1024 + period - 1) / period)
                                                           : tile / std::gcd(tile, period) * period;
    return base > 8192 ? 0 : base;
}

// First-fit arena offsets, 64-byte aligned.
class arena_allocator {
public:
    std::size_t allocate(std::size_t bytes) {
        bytes = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
        for (std::size_t i = 0; i < free_.size(); ++i)
            if (free_[i].second >= bytes) {
                const std::size_t at = free_[i].first;
                free_[i].first += bytes;
                free_[i].second -= bytes;
                if (free_[i].second == 0) free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
                return at;
            }
        const std::size_t at = end_;
        end_ += bytes;
        return at;
    }
    void release(std::size_t at, std::size_t bytes) {
        bytes = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
        auto it = free_.begin();
        while (it != free_.end() && it->first < at) ++it;
        it = free_.insert(it, {at, bytes});
        // Merge with the neighbours.
        if (it + 1 != free_.end() && it->first + it->second == (it + 1)->first) {
            it->second += (it + 1)->second;
            free_.erase(it + 1);
        }
        if (it != free_.begin() && (it - 1)->first + (it - 1)->second == it->first) {
            (it - 1)->second += it->second;
            free_.erase(it);
        }
    }
    std::size_t size() const noexcept { return end_; }

private:
    std::vector<std::pair<std::size_t, std::size_t>> free_;  // (offset, bytes), by offset
    std::size_t end_ = 0;
};

// Builds the plan of `graph` from a call that ran node by node and kept every value (`slots`: null for a fused
// group's values that never left it). `groups` are the executor's fused groups.
// (Templates on an unused int, as eager mode's bodies are: compiled only where a traced function is called.)
template <int N = 0>
std::shared_ptr<buffer_plan> build_buffer_plan(
    const function_graph& graph, const std::vector<fused_group>& groups, const std::vector<std::optional<tensor>>& slots,
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params) {
    auto plan = std::make_shared<buffer_plan>();
    plan->id = next_plan_id();
    plan->params = std::move(params);
    plan->groups = groups;
    const std::size_t n = graph.nodes.size();
    std::vector<buffer_plan::value>& values = plan->values;
    values.resize(n);
    auto fail = [&](std::string why) {
        plan->ok = false;
        plan->why_not = std::move(why);
        plan->steps.clear();
        return plan;
    };
    auto observed = [&](std::int32_t v) -> const tensor* {
        const auto& s = slots[static_cast<std::size_t>(v)];
        return s ? &*s : nullptr;
    };
    auto set_layout = [&](buffer_plan::value& val, const tensor& t) {
        val.dtype = t.dtype();
        val.shape = t.shape();
        val.strides = t.strides();
    };
    // Where each node's step runs: a group's members run at its last member.
    std::vector<std::int32_t> position(n);
    for (std::size_t i = 0; i < n; ++i) {
        const int g = graph.nodes[i].group;
        position[i] = g >= 0 ? groups[static_cast<std::size_t>(g)].members.back() : static_cast<std::int32_t>(i);
    }
    std::vector<std::int32_t> singleton(n, -1);  // a single elementwise op planned as a group of one
    for (std::size_t i = 0; i < n; ++i) {
        const graph_node& node = graph.nodes[i];
        buffer_plan::value& val = values[i];
        val.root = static_cast<std::int32_t>(i);
        const tensor* t = observed(static_cast<std::int32_t>(i));
        switch (node.kind) {
            case node_kind::argument:
                val.kind = buffer_plan::value::argument;
                set_layout(val, *t);
                continue;
            case node_kind::constant:
            case node_kind::variable:
                val.kind = buffer_plan::value::fixed;
                set_layout(val, node.value);
                continue;
            case node_kind::effect: continue;
            case node_kind::op: break;
        }
        if (node.group >= 0) {
            const fused_group& g = groups[static_cast<std::size_t>(node.group)];
            std::size_t j = 0;
            while (g.members[j] != static_cast<std::int32_t>(i)) ++j;
            if (g.exported[j]) {
                if (!t || !t->is_contiguous()) return fail("a fused group's result was not a new contiguous tensor");
                val.kind = buffer_plan::value::arena;
                set_layout(val, *t);
            }
            continue;
        }
        if (!t) return fail("%" + std::to_string(i) + " has no value");
        set_layout(val, *t);
        // A view: the result shares an input's storage.
        bool is_view = false;
        for (std::int32_t in : node.inputs) {
            const tensor* x = observed(in);
            if (x && x->shares_storage_with(*t) && x->storage_handle()) {
                val.kind = buffer_plan::value::view;
                val.source = in;
                val.offset = static_cast<const std::byte*>(t->raw_data()) - static_cast<const std::byte*>(x->raw_data());
                val.root = values[static_cast<std::size_t>(in)].root;
                is_view = true;
                break;
            }
        }
        if (is_view) continue;
        if (!t->is_contiguous()) {
            val.kind = buffer_plan::value::owned;
            continue;
        }
        const bool floating = t->dtype() == kiln::float32 || t->dtype() == kiln::float64;
        // A matrix product of two 2-D operands: the device's gemm takes any strides.
        if (node.op == "matmul" && floating && node.inputs.size() == 2) {
            const tensor* a = observed(node.inputs[0]);
            const tensor* b = observed(node.inputs[1]);
            if (a && b && a->dtype() == t->dtype() && b->dtype() == t->dtype() && a->dim() == 2 && b->dim() == 2 &&
                t->dim() == 2 && a->shape()[1] == b->shape()[0] && t->shape()[0] == a->shape()[0] &&
                t->shape()[1] == b->shape()[1] && a->shape()[0] < (1 << 30) && a->shape()[1] < (1 << 30) &&
                b->shape()[1] < (1 << 30)) {
                val.kind = buffer_plan::value::arena;
                continue;
            }
        }
        // A sum of a contiguous floating tensor (the device's reduction engine, as in eager mode).
        if (node.op == "sum" && floating && node.inputs.size() == 1) {
            const tensor* x = observed(node.inputs[0]);
            std::vector<int> axes;
            bool keepdims = false;
            if (x && x->dtype() == t->dtype() && x->is_contiguous() && parse_reduction_attrs(node.attrs, axes, keepdims)) {
                try {
                    const reduction_shape r = reduced_shape(*x, axes, keepdims, "sum");
                    if (r.keep.numel() == t->numel()) {
                        val.kind = buffer_plan::value::arena;
                        continue;
                    }
                } catch (const error&) {
                }
            }
        }
        // A single elementwise op whose operands are contiguous values of its shape or repeat along it.
        if (node.params.tile && node.inputs.size() <= 8) {
            fused_group g;
            g.members = {static_cast<std::int32_t>(i)};
            g.exported = {1};
            g.dtype = t->dtype();
            g.rank = t->dim();
            std::vector<fused_group::operand> ins;
            bool fits = true, has_full = false;
            std::ptrdiff_t tile = 1024;
            for (std::int32_t v : node.inputs) {
                const tensor* x = observed(v);
                if (!x || x->dtype() != t->dtype()) {
                    fits = false;
                    break;
                }
                if (x->shape() == t->shape() && x->is_contiguous()) {
                    ins.push_back({fused_group::operand::full, v});
                    has_full = true;
                    continue;
                }
                // Repeats along the result: a broadcast view of it, or its trailing extents.
                bool trailing = x->dim() <= t->dim();
                for (int d = 0; trailing && d < x->dim(); ++d) {
                    const int e = t->dim() - x->dim() + d;
                    trailing = x->shape()[d] == t->shape()[e] || x->shape()[d] == 1;
                }
                const std::ptrdiff_t period = trailing ? repeating_period(*x) : 0;
                bool repeats = period > 0 && t->numel() % period == 0;
                // (The period's elements must be the result's trailing extents, each one x's own.)
                std::ptrdiff_t tail = 1;
                for (int d = t->dim() - 1; repeats && d >= 0 && tail < period; --d) {
                    const int xd = x->dim() - (t->dim() - d);
                    repeats = xd >= 0 && x->shape()[xd] == t->shape()[d];
                    tail *= t->shape()[d];
                }
                repeats = repeats && tail == period;
                const std::ptrdiff_t grown = repeats ? tile_with_period(tile, period, g.periodic) : 0;
                if (grown == 0) {
                    fits = false;
                    break;
                }
                tile = grown;
                ins.push_back({fused_group::operand::periodic, v, period});
                g.periodic = true;
            }
            if (fits && has_full) {
                g.tile = tile;
                g.inputs = {std::move(ins)};
                singleton[i] = static_cast<std::int32_t>(plan->groups.size());
                plan->groups.push_back(std::move(g));
                val.kind = buffer_plan::value::arena;
                continue;
            }
        }
        val.kind = buffer_plan::value::owned;
    }
    // The executor's groups must fit as watched: contiguous operands of the group's shape, or operands that repeat
    // along it (a full operand that is a broadcast view becomes a repeating one here).
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        fused_group& g = plan->groups[gi];
        if (g.members.size() > 64) return fail("group " + std::to_string(gi) + " has more than 64 ops");
        const tensor* first = nullptr;
        for (std::size_t j = 0; j < g.members.size(); ++j)
            if (g.exported[j]) first = observed(g.members[j]);
        if (!first) return fail("group " + std::to_string(gi) + " exports nothing");
        for (auto& ins : g.inputs) {
            if (ins.size() > 8) return fail("group " + std::to_string(gi) + " has an op of more than 8 operands");
            for (auto& op : ins) {
                if (op.kind == fused_group::operand::member) continue;
                const tensor* x = observed(op.index);
                const std::string which = "group " + std::to_string(gi) + ": operand %" + std::to_string(op.index);
                if (!x || x->dtype() != g.dtype) return fail(which + " is not a value of the group's dtype");
                if (op.kind == fused_group::operand::full && !(x->shape() == first->shape()))
                    return fail(which + " has another shape");
                const std::ptrdiff_t period = repeating_period(*x);
                if (period == 0 || x->numel() % period != 0) return fail(which + " is neither contiguous nor a broadcast");
                if (op.kind == fused_group::operand::full && period == x->numel()) continue;
                if (op.kind == fused_group::operand::periodic && period != op.period) {
                    if (period == 0 || op.period % period != 0) return fail(which + " does not repeat");
                }
                const std::ptrdiff_t tile = tile_with_period(g.tile, period, g.periodic);
                if (tile == 0) return fail(which + " repeats with too long a period");
                g.tile = tile;
                op.kind = fused_group::operand::periodic;
                op.period = period;
                g.periodic = true;
            }
        }
    }

    // Matmul + bias + activation: a group whose first member adds a bias along the rows of a planned matrix product
    // that nothing else reads takes that add into the product's step, which adds the bias in place as it finishes
    // (the same additions, so the same bits); a unary op of the sum that comes next in the group, with a buffer of
    // its own, follows it there (relu of a hidden layer). What remains of the group runs as before.
    std::vector<std::int32_t> readers(n, 0);
    for (std::size_t i = 0; i < n; ++i)
        for (std::int32_t in : graph.nodes[i].inputs) ++readers[static_cast<std::size_t>(in)];
    for (std::int32_t o : graph.outputs) ++readers[static_cast<std::size_t>(o)];
    std::vector<char> absorbed(n, 0);
    std::vector<buffer_plan::step> epilogue(n);  // per matmul node: its bias, add and act
    for (std::size_t gi = 0; gi < plan->groups.size(); ++gi) {
        fused_group& g = plan->groups[gi];
        if (g.members.empty() || g.inputs[0].size() != 2) continue;
        const std::int32_t a = g.members[0];
        const graph_node& an = graph.nodes[static_cast<std::size_t>(a)];
        if (an.op != "add" || an.inputs.size() != 2) continue;
        for (int side = 0; side < 2; ++side) {
            const fused_group::operand& pm = g.inputs[0][static_cast<std::size_t>(side)];
            const fused_group::operand& pb = g.inputs[0][static_cast<std::size_t>(1 - side)];
            if (pm.kind != fused_group::operand::full || pb.kind != fused_group::operand::periodic) continue;
            const std::int32_t mm = pm.index;
            const graph_node& mn = graph.nodes[static_cast<std::size_t>(mm)];
            const buffer_plan::value& mv = values[static_cast<std::size_t>(mm)];
            if (mn.kind != node_kind::op || mn.op != "matmul" || mn.group >= 0 || singleton[static_cast<std::size_t>(mm)] >= 0 ||
                mv.kind != buffer_plan::value::arena || mv.dtype != g.dtype || mv.shape.rank != 2 ||
                readers[static_cast<std::size_t>(mm)] != 1 || epilogue[static_cast<std::size_t>(mm)].bias >= 0)
                break;
            const std::ptrdiff_t cols = mv.shape[1];
            if (pb.period <= 0 || cols % pb.period != 0) break;
            // The add moves up to the product's step: the bias must be made by then, and nothing may write between.
            const buffer_plan::value::kind_t bk = values[static_cast<std::size_t>(pb.index)].kind;
            if (bk != buffer_plan::value::argument && bk != buffer_plan::value::fixed && position[static_cast<std::size_t>(pb.index)] >= mm)
                break;
            bool written_between = false;
            for (std::int32_t k = mm + 1; k < a && !written_between; ++k)
                written_between = graph.nodes[static_cast<std::size_t>(k)].kind == node_kind::effect;
            if (written_between) break;
            // The next member: a unary op of the sum with a buffer of its own.
            const bool act = g.members.size() > 1 && g.inputs[1].size() == 1 &&
                             g.inputs[1][0].kind == fused_group::operand::member && g.inputs[1][0].index == 0 &&
                             g.exported[1] && graph.nodes[static_cast<std::size_t>(g.members[1])].params.tile;
            const std::size_t taken = act ? 2 : 1;
            if (g.jit && g.members.size() > taken) break;  // (its compiled kernel computes the whole group)
            buffer_plan::step& e = epilogue[static_cast<std::size_t>(mm)];
            e.bias = pb.index;
            e.period = pb.period;
            e.add = a;
            e.act = act ? g.members[1] : -1;
            // The sum lives in the product's buffer.
            buffer_plan::value& av = values[static_cast<std::size_t>(a)];
            av.kind = buffer_plan::value::view;
            av.source = mm;
            av.offset = 0;
            av.root = mm;
            av.result = false;
            av.dtype = mv.dtype;
            av.shape = mv.shape;
            av.strides = mv.strides;
            const std::vector<std::int32_t> gone(g.members.begin(), g.members.begin() + static_cast<std::ptrdiff_t>(taken));
            for (std::int32_t x : gone) {
                absorbed[static_cast<std::size_t>(x)] = 1;
                position[static_cast<std::size_t>(x)] = mm;
            }
            g.members.erase(g.members.begin(), g.members.begin() + static_cast<std::ptrdiff_t>(taken));
            g.inputs.erase(g.inputs.begin(), g.inputs.begin() + static_cast<std::ptrdiff_t>(taken));
            g.exported.erase(g.exported.begin(), g.exported.begin() + static_cast<std::ptrdiff_t>(taken));
            for (auto& ins : g.inputs)
                for (auto& op : ins)
                    if (op.kind == fused_group::operand::member) {
                        if (op.index < static_cast<std::int32_t>(taken)) op = {fused_group::operand::full, gone[static_cast<std::size_t>(op.index)]};
                        else op.index -= static_cast<std::int32_t>(taken);
                    }
            if (g.members.empty()) g.jit.reset();
            break;
        }
    }
    // A group emptied by this runs nowhere; the others run at their last member, as before.

    // Liveness of each buffer (root): the last position that reads it or any view of it.
    constexpr std::int32_t forever = std::numeric_limits<std::int32_t>::max();
    std::vector<std::int32_t> last(n, -1);
    auto use = [&](std::int32_t v, std::int32_t at) {
        const std::int32_t r = values[static_cast<std::size_t>(v)].root;
        if (r >= 0) last[static_cast<std::size_t>(r)] = std::max(last[static_cast<std::size_t>(r)], at);
    };
    for (std::size_t i = 0; i < n; ++i)
        for (std::int32_t in : graph.nodes[i].inputs) use(in, position[i]);
    for (std::int32_t o : graph.outputs) use(o, forever);
    for (std::size_t i = 0; i < n; ++i) {
        const buffer_plan::value& v = values[i];
        if (v.kind != buffer_plan::value::none && v.root == static_cast<std::int32_t>(i) && last[i] < 0)
            last[i] = position[i];  // never read: dies where it is made
    }
    std::vector<std::vector<std::int32_t>> dies(n);
    for (std::size_t i = 0; i < n; ++i)
        if (last[i] >= 0 && last[i] != forever) dies[static_cast<std::size_t>(last[i])].push_back(static_cast<std::int32_t>(i));

    // Steps in program order; arena offsets first fit, a step's results over its operands only in place (below).
    arena_allocator arena;
    auto bytes_of = [&](const buffer_plan::value& v) {
        return static_cast<std::size_t>(v.shape.numel()) * size_of(v.dtype);
    };
    // A buffer that a result lives in is the caller's new tensor, written in place (not the arena, then copied).
    for (std::int32_t o : graph.outputs) {
        buffer_plan::value& r = values[static_cast<std::size_t>(values[static_cast<std::size_t>(o)].root)];
        if (r.kind == buffer_plan::value::arena) r.result = true;
    }
    auto place = [&](buffer_plan::value& v) {
        if (!v.result) v.offset = static_cast<std::ptrdiff_t>(arena.allocate(bytes_of(v)));
    };
    // In place: a group's exported member may take the buffer of one of its own full operands that dies at this
    // step, when no later member of the group reads that buffer (tile by tile, a member reads each element of its
    // operands before it writes the same element of its result, and earlier members have read the tile by then).
    // Not for a group with a compiled kernel, which may read an operand again after storing a result.
    std::vector<char> handed(n, 0);  // buffers taken over at this step: not released here
    auto place_group = [&](const fused_group& g, std::size_t at, buffer_plan::step& st) {
        for (std::size_t j = 0; j < g.members.size(); ++j) {
            if (!g.exported[j]) continue;
            buffer_plan::value& out = values[static_cast<std::size_t>(g.members[j])];
            if (out.result) continue;
            std::int32_t taken = -1;
            if (!g.jit)
                for (const fused_group::operand& op : g.inputs[j]) {
                    if (op.kind != fused_group::operand::full) continue;
                    const std::int32_t x = values[static_cast<std::size_t>(op.index)].root;
                    const buffer_plan::value& xv = values[static_cast<std::size_t>(x)];
                    if (xv.kind != buffer_plan::value::arena || xv.result || handed[static_cast<std::size_t>(x)] ||
                        last[static_cast<std::size_t>(x)] != static_cast<std::int32_t>(at) || bytes_of(xv) != bytes_of(out))
                        continue;
                    bool read_later = false;
                    for (std::size_t k = j + 1; k < g.members.size() && !read_later; ++k)
                        for (const fused_group::operand& later : g.inputs[k])
                            read_later = read_later || (later.kind != fused_group::operand::member &&
                                                        values[static_cast<std::size_t>(later.index)].root == x);
                    if (read_later) continue;
                    taken = x;
                    break;
                }
            if (taken < 0) {
                place(out);
                continue;
            }
            out.offset = values[static_cast<std::size_t>(taken)].offset;
            handed[static_cast<std::size_t>(taken)] = 1;
            st.in_place.push_back({g.members[j], taken});
        }
    };
    for (std::size_t i = 0; i < n; ++i) {
        const graph_node& node = graph.nodes[i];
        buffer_plan::value& val = values[i];
        buffer_plan::step st;
        st.node = static_cast<std::int32_t>(i);
        bool emit = true;
        if (node.kind == node_kind::effect) {
            st.kind = buffer_plan::step::effect;
        } else if (node.kind != node_kind::op || absorbed[i]) {
            emit = false;  // (an absorbed add or activation runs in its product's step)
        } else if (node.group >= 0) {
            const fused_group& g = plan->groups[static_cast<std::size_t>(node.group)];
            if (g.members.empty() || g.members.back() != static_cast<std::int32_t>(i)) {
                emit = false;
            } else {
                st.kind = buffer_plan::step::group;
                st.node = node.group;
                place_group(g, i, st);
            }
        } else if (val.kind == buffer_plan::value::view) {
            st.kind = buffer_plan::step::view;
        } else if (val.kind == buffer_plan::value::owned) {
            st.kind = buffer_plan::step::op;
        } else if (singleton[i] >= 0) {
            st.kind = buffer_plan::step::group;
            st.node = singleton[i];
            place_group(plan->groups[static_cast<std::size_t>(singleton[i])], i, st);
        } else if (node.op == "matmul") {
            st.kind = buffer_plan::step::matmul;
            const tensor& a = *observed(node.inputs[0]);
            const tensor& b = *observed(node.inputs[1]);
            st.m = a.shape()[0];
            st.k = a.shape()[1];
            st.n = b.shape()[1];
            st.ars = a.strides()[0], st.acs = a.strides()[1];
            st.brs = b.strides()[0], st.bcs = b.strides()[1];
            place(val);
            const buffer_plan::step& e = epilogue[i];
            if (e.bias >= 0) {
                st.bias = e.bias;
                st.period = e.period;
                st.add = e.add;
                st.act = e.act;
                if (e.act >= 0) place(values[static_cast<std::size_t>(e.act)]);
            }
        } else {
            st.kind = buffer_plan::step::sum;
            const tensor& x = *observed(node.inputs[0]);
            std::vector<int> axes;
            bool keepdims = false;
            parse_reduction_attrs(node.attrs, axes, keepdims);
            st.keep = reduced_shape(x, axes, keepdims, "sum").keep;
            place(val);
        }
        // Buffers whose last reader ran at this position.
        for (std::int32_t d : dies[i]) {
            const buffer_plan::value& v = values[static_cast<std::size_t>(d)];
            if (v.kind == buffer_plan::value::arena && !v.result && !handed[static_cast<std::size_t>(d)])
                arena.release(static_cast<std::size_t>(v.offset), bytes_of(v));
            else if (v.kind == buffer_plan::value::owned) st.release.push_back(d);
        }
        if (emit) {
            plan->steps.push_back(std::move(st));
        } else if (!st.release.empty()) {
            // (Nothing runs here: the releases wait for the next step.)
            buffer_plan::step carry;
            carry.kind = buffer_plan::step::view;
            carry.node = -1;
            carry.release = std::move(st.release);
            plan->steps.push_back(std::move(carry));
        }
    }
    plan->arena_bytes = arena.size();
    plan->ok = true;
    return plan;
}

}  // namespace detail
}  // namespace kiln
