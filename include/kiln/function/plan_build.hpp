#pragma once
// Making a buffer plan (function/buffer_plan.hpp) from a call that the executor watched, in five phases, each a
// member of plan_builder:
//   1. place_values: what each value is (argument, fixed, view, arena buffer or owned result), and single
//      elementwise ops that the plan runs as groups of one;
//   2. fit_groups: the executor's fused groups checked against the layouts watched (operands contiguous or
//      repeating along the group);
//   3. fuse_epilogues: a bias add (and the unary op after it) taken into the matrix product that feeds it;
//   4. find_lifetimes: where each buffer is read last;
//   5. emit_steps: the steps in program order, arena offsets by first fit, a group's result over a dying operand.
// A phase that finds a layout the plan cannot run says why, and the signature runs node by node.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "buffer_plan.hpp"

namespace kiln {
namespace detail {

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

// (A template on an unused int, as eager mode's bodies are: compiled only where a traced function is called.)
template <int N = 0>
class plan_builder {
public:
    // `slots`: the watched call's values (null for a fused group's values that never left it); `groups`: the
    // executor's fused groups.
    plan_builder(const function_graph& graph, const std::vector<fused_group>& groups,
                 const std::vector<std::optional<tensor>>& slots,
                 std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params)
        : graph_(graph), slots_(slots), n_(graph.nodes.size()), plan_(std::make_shared<buffer_plan>()),
          values_(plan_->values) {
        plan_->id = next_plan_id();
        plan_->params = std::move(params);
        plan_->groups = groups;
        executor_groups_ = groups.size();
        values_.resize(n_);
        // Where each node's step runs: a group's members run at its last member.
        position_.resize(n_);
        for (std::size_t i = 0; i < n_; ++i) {
            const int g = graph.nodes[i].group;
            position_[i] = g >= 0 ? groups[static_cast<std::size_t>(g)].members.back() : static_cast<std::int32_t>(i);
        }
        singleton_.assign(n_, -1);
    }

    std::shared_ptr<buffer_plan> build() {
        if (!place_values() || !fit_groups()) {
            plan_->ok = false;
            plan_->why_not = std::move(why_not_);
            plan_->steps.clear();
            return plan_;
        }
        fuse_epilogues();
        find_lifetimes();
        emit_steps();
        plan_->arena_bytes = arena_.size();
        plan_->ok = true;
        return plan_;
    }

private:
    using value = buffer_plan::value;
    using step = buffer_plan::step;
    static constexpr std::int32_t forever = std::numeric_limits<std::int32_t>::max();

    bool fail(std::string why) {
        why_not_ = std::move(why);
        return false;
    }
    const tensor* observed(std::int32_t v) const {
        const auto& s = slots_[static_cast<std::size_t>(v)];
        return s ? &*s : nullptr;
    }
    static void set_layout(value& val, const tensor& t) {
        val.dtype = t.dtype();
        val.shape = t.shape();
        val.strides = t.strides();
    }
    std::size_t bytes_of(const value& v) const { return static_cast<std::size_t>(v.shape.numel()) * size_of(v.dtype); }
    value& at(std::int32_t v) { return values_[static_cast<std::size_t>(v)]; }

    // ---- 1. what each value is ----------------------------------------------------------------------------------

    bool place_values() {
        for (std::size_t i = 0; i < n_; ++i) {
            const graph_node& node = graph_.nodes[i];
            value& val = values_[i];
            val.root = static_cast<std::int32_t>(i);
            const tensor* t = observed(static_cast<std::int32_t>(i));
            switch (node.kind) {
                case node_kind::argument:
                    val.kind = value::argument;
                    set_layout(val, *t);
                    continue;
                case node_kind::constant:
                case node_kind::variable:
                    val.kind = value::fixed;
                    set_layout(val, node.value);
                    continue;
                case node_kind::effect: continue;
                case node_kind::op: break;
            }
            if (node.group >= 0) {
                const fused_group& g = plan_->groups[static_cast<std::size_t>(node.group)];
                std::size_t j = 0;
                while (g.members[j] != static_cast<std::int32_t>(i)) ++j;
                if (g.exported[j]) {
                    if (!t || !t->is_contiguous()) return fail("a fused group's result was not a new contiguous tensor");
                    val.kind = value::arena;
                    set_layout(val, *t);
                }
                continue;
            }
            if (!t) return fail("%" + std::to_string(i) + " has no value");
            set_layout(val, *t);
            place_op(i, node, *t, val);
        }
        return true;
    }

    // An op outside the executor's groups: a view of its input, a buffer of the arena for what the plan runs itself
    // (a 2-D matrix product, a contiguous sum, a single elementwise op), or the tensor its replay returns.
    void place_op(std::size_t i, const graph_node& node, const tensor& t, value& val) {
        // A view: the result shares an input's storage.
        for (std::int32_t in : node.inputs) {
            const tensor* x = observed(in);
            if (x && x->shares_storage_with(t) && x->storage_handle()) {
                val.kind = value::view;
                val.source = in;
                val.offset = static_cast<const std::byte*>(t.raw_data()) - static_cast<const std::byte*>(x->raw_data());
                val.root = at(in).root;
                return;
            }
        }
        val.kind = value::owned;
        if (!t.is_contiguous()) return;
        const bool floating = t.dtype() == kiln::float32 || t.dtype() == kiln::float64;
        // A matrix product of two 2-D operands: the device's gemm takes any strides.
        if (node.op == "matmul" && floating && node.inputs.size() == 2) {
            const tensor* a = observed(node.inputs[0]);
            const tensor* b = observed(node.inputs[1]);
            if (a && b && a->dtype() == t.dtype() && b->dtype() == t.dtype() && a->dim() == 2 && b->dim() == 2 &&
                t.dim() == 2 && a->shape()[1] == b->shape()[0] && t.shape()[0] == a->shape()[0] &&
                t.shape()[1] == b->shape()[1] && a->shape()[0] < (1 << 30) && a->shape()[1] < (1 << 30) &&
                b->shape()[1] < (1 << 30)) {
                val.kind = value::arena;
                return;
            }
        }
        // A sum of a contiguous floating tensor (the device's reduction engine, as in eager mode).
        if (node.op == "sum" && floating && node.inputs.size() == 1) {
            const tensor* x = observed(node.inputs[0]);
            std::vector<int> axes;
            bool keepdims = false;
            if (x && x->dtype() == t.dtype() && x->is_contiguous() && parse_reduction_attrs(node.attrs, axes, keepdims)) {
                try {
                    const reduction_shape r = reduced_shape(*x, axes, keepdims, "sum");
                    if (r.keep.numel() == t.numel()) {
                        val.kind = value::arena;
                        return;
                    }
                } catch (const error&) {
                }
            }
        }
        if (node.params.tile && node.inputs.size() <= 8 && place_single_op(i, node, t)) val.kind = value::arena;
    }

    // A single elementwise op whose operands are contiguous values of its shape or repeat along it: a group of one.
    bool place_single_op(std::size_t i, const graph_node& node, const tensor& t) {
        fused_group g;
        g.members = {static_cast<std::int32_t>(i)};
        g.exported = {1};
        g.dtype = t.dtype();
        g.rank = t.dim();
        std::vector<fused_group::operand> ins;
        bool has_full = false;
        std::ptrdiff_t tile = 1024;
        for (std::int32_t v : node.inputs) {
            const tensor* x = observed(v);
            if (!x || x->dtype() != t.dtype()) return false;
            if (x->shape() == t.shape() && x->is_contiguous()) {
                ins.push_back({fused_group::operand::full, v});
                has_full = true;
                continue;
            }
            // Repeats along the result: a broadcast view of it, or its trailing extents.
            bool trailing = x->dim() <= t.dim();
            for (int d = 0; trailing && d < x->dim(); ++d) {
                const int e = t.dim() - x->dim() + d;
                trailing = x->shape()[d] == t.shape()[e] || x->shape()[d] == 1;
            }
            const std::ptrdiff_t period = trailing ? repeating_period(*x) : 0;
            bool repeats = period > 0 && t.numel() % period == 0;
            // (The period's elements must be the result's trailing extents, each one x's own.)
            std::ptrdiff_t tail = 1;
            for (int d = t.dim() - 1; repeats && d >= 0 && tail < period; --d) {
                const int xd = x->dim() - (t.dim() - d);
                repeats = xd >= 0 && x->shape()[xd] == t.shape()[d];
                tail *= t.shape()[d];
            }
            repeats = repeats && tail == period;
            const std::ptrdiff_t grown = repeats ? tile_with_period(tile, period, g.periodic) : 0;
            if (grown == 0) return false;
            tile = grown;
            ins.push_back({fused_group::operand::periodic, v, period});
            g.periodic = true;
        }
        if (!has_full) return false;
        g.tile = tile;
        g.inputs = {std::move(ins)};
        singleton_[i] = static_cast<std::int32_t>(plan_->groups.size());
        plan_->groups.push_back(std::move(g));
        return true;
    }

    // ---- 2. the executor's groups against the layouts watched ---------------------------------------------------

    // Each group must fit as watched: contiguous operands of the group's shape, or operands that repeat along it (a
    // full operand that is a broadcast view becomes a repeating one here).
    bool fit_groups() {
        for (std::size_t gi = 0; gi < executor_groups_; ++gi) {
            fused_group& g = plan_->groups[gi];
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
        return true;
    }

    // ---- 3. matmul + bias + activation ------------------------------------------------------------------------

    // A group whose first member adds a bias along the rows of a planned matrix product that nothing else reads
    // takes that add into the product's step, which adds the bias in place as it finishes (the same additions, so
    // the same bits); a unary op of the sum that comes next in the group, with a buffer of its own, follows it there
    // (relu of a hidden layer). What remains of the group runs as before; a group emptied by this runs nowhere.
    void fuse_epilogues() {
        std::vector<std::int32_t> readers(n_, 0);
        for (std::size_t i = 0; i < n_; ++i)
            for (std::int32_t in : graph_.nodes[i].inputs) ++readers[static_cast<std::size_t>(in)];
        for (std::int32_t o : graph_.outputs) ++readers[static_cast<std::size_t>(o)];
        absorbed_.assign(n_, 0);
        epilogue_.assign(n_, step{});
        for (std::size_t gi = 0; gi < plan_->groups.size(); ++gi) {
            fused_group& g = plan_->groups[gi];
            if (g.members.empty() || g.inputs[0].size() != 2) continue;
            const graph_node& an = graph_.nodes[static_cast<std::size_t>(g.members[0])];
            if (an.op != "add" || an.inputs.size() != 2) continue;
            for (int side = 0; side < 2; ++side)
                if (const auto r = fuse_epilogue(g, side, readers)) {
                    if (*r) break;  // (taken)
                } else {
                    break;  // (this group cannot give its add to a product)
                }
        }
    }

    // The group's first member, an add with the product as operand `side`: nullopt where it cannot move, false
    // where this side is not a product and its bias, true where it moved.
    std::optional<bool> fuse_epilogue(fused_group& g, int side, const std::vector<std::int32_t>& readers) {
        const std::int32_t a = g.members[0];
        const fused_group::operand& pm = g.inputs[0][static_cast<std::size_t>(side)];
        const fused_group::operand& pb = g.inputs[0][static_cast<std::size_t>(1 - side)];
        if (pm.kind != fused_group::operand::full || pb.kind != fused_group::operand::periodic) return false;
        const std::int32_t mm = pm.index;
        const graph_node& mn = graph_.nodes[static_cast<std::size_t>(mm)];
        const value& mv = at(mm);
        if (mn.kind != node_kind::op || mn.op != "matmul" || mn.group >= 0 || singleton_[static_cast<std::size_t>(mm)] >= 0 ||
            mv.kind != value::arena || mv.dtype != g.dtype || mv.shape.rank != 2 ||
            readers[static_cast<std::size_t>(mm)] != 1 || epilogue_[static_cast<std::size_t>(mm)].bias >= 0)
            return std::nullopt;
        const std::ptrdiff_t cols = mv.shape[1];
        if (pb.period <= 0 || cols % pb.period != 0) return std::nullopt;
        // The add moves up to the product's step: the bias must be made by then, and nothing may write between.
        const value::kind_t bk = at(pb.index).kind;
        if (bk != value::argument && bk != value::fixed && position_[static_cast<std::size_t>(pb.index)] >= mm)
            return std::nullopt;
        for (std::int32_t k = mm + 1; k < a; ++k)
            if (graph_.nodes[static_cast<std::size_t>(k)].kind == node_kind::effect) return std::nullopt;
        // The next member: a unary op of the sum with a buffer of its own.
        const bool act = g.members.size() > 1 && g.inputs[1].size() == 1 &&
                         g.inputs[1][0].kind == fused_group::operand::member && g.inputs[1][0].index == 0 &&
                         g.exported[1] && graph_.nodes[static_cast<std::size_t>(g.members[1])].params.tile;
        const std::size_t taken = act ? 2 : 1;
        if (g.jit && g.members.size() > taken) return std::nullopt;  // (its compiled kernel computes the whole group)
        step& e = epilogue_[static_cast<std::size_t>(mm)];
        e.bias = pb.index;
        e.period = pb.period;
        e.add = a;
        e.act = act ? g.members[1] : -1;
        // The sum lives in the product's buffer.
        value& av = at(a);
        av.kind = value::view;
        av.source = mm;
        av.offset = 0;
        av.root = mm;
        av.result = false;
        av.dtype = mv.dtype;
        av.shape = mv.shape;
        av.strides = mv.strides;
        const std::vector<std::int32_t> gone(g.members.begin(), g.members.begin() + static_cast<std::ptrdiff_t>(taken));
        for (std::int32_t x : gone) {
            absorbed_[static_cast<std::size_t>(x)] = 1;
            position_[static_cast<std::size_t>(x)] = mm;
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
        return true;
    }

    // ---- 4. liveness ------------------------------------------------------------------------------------------

    // Each buffer (root): the last position that reads it or any view of it; `dies_[p]`, the buffers whose last
    // reader runs at p.
    void find_lifetimes() {
        last_.assign(n_, -1);
        auto use = [&](std::int32_t v, std::int32_t p) {
            const std::int32_t r = at(v).root;
            if (r >= 0) last_[static_cast<std::size_t>(r)] = std::max(last_[static_cast<std::size_t>(r)], p);
        };
        for (std::size_t i = 0; i < n_; ++i)
            for (std::int32_t in : graph_.nodes[i].inputs) use(in, position_[i]);
        for (std::int32_t o : graph_.outputs) use(o, forever);
        for (std::size_t i = 0; i < n_; ++i) {
            const value& v = values_[i];
            if (v.kind != value::none && v.root == static_cast<std::int32_t>(i) && last_[i] < 0)
                last_[i] = position_[i];  // never read: dies where it is made
        }
        dies_.assign(n_, {});
        for (std::size_t i = 0; i < n_; ++i)
            if (last_[i] >= 0 && last_[i] != forever) dies_[static_cast<std::size_t>(last_[i])].push_back(static_cast<std::int32_t>(i));
    }

    // ---- 5. the steps -----------------------------------------------------------------------------------------

    void place(value& v) {
        if (!v.result) v.offset = static_cast<std::ptrdiff_t>(arena_.allocate(bytes_of(v)));
    }

    // In place: a group's exported member may take the buffer of one of its own full operands that dies at this
    // step, when no later member of the group reads that buffer (tile by tile, a member reads each element of its
    // operands before it writes the same element of its result, and earlier members have read the tile by then).
    // Not for a group with a compiled kernel, which may read an operand again after storing a result.
    void place_group(const fused_group& g, std::size_t p, step& st) {
        for (std::size_t j = 0; j < g.members.size(); ++j) {
            if (!g.exported[j]) continue;
            value& out = at(g.members[j]);
            if (out.result) continue;
            const std::int32_t taken = g.jit ? -1 : buffer_to_take(g, j, p, out);
            if (taken < 0) {
                place(out);
                continue;
            }
            out.offset = at(taken).offset;
            handed_[static_cast<std::size_t>(taken)] = 1;
            st.in_place.push_back({g.members[j], taken});
        }
    }

    // The buffer of a full operand of member j that dies at p, of `out`'s size, and that no later member reads; -1
    // where there is none.
    std::int32_t buffer_to_take(const fused_group& g, std::size_t j, std::size_t p, const value& out) const {
        for (const fused_group::operand& op : g.inputs[j]) {
            if (op.kind != fused_group::operand::full) continue;
            const std::int32_t x = values_[static_cast<std::size_t>(op.index)].root;
            const value& xv = values_[static_cast<std::size_t>(x)];
            if (xv.kind != value::arena || xv.result || handed_[static_cast<std::size_t>(x)] ||
                last_[static_cast<std::size_t>(x)] != static_cast<std::int32_t>(p) || bytes_of(xv) != bytes_of(out))
                continue;
            bool read_later = false;
            for (std::size_t k = j + 1; k < g.members.size() && !read_later; ++k)
                for (const fused_group::operand& later : g.inputs[k])
                    read_later = read_later || (later.kind != fused_group::operand::member &&
                                                values_[static_cast<std::size_t>(later.index)].root == x);
            if (!read_later) return x;
        }
        return -1;
    }

    // Steps in program order; arena offsets first fit, a step's results over its operands only in place.
    void emit_steps() {
        // A buffer that a result lives in is the caller's new tensor, written in place (not the arena, then copied).
        for (std::int32_t o : graph_.outputs) {
            value& r = at(at(o).root);
            if (r.kind == value::arena) r.result = true;
        }
        handed_.assign(n_, 0);  // buffers taken over at this step: not released here
        for (std::size_t i = 0; i < n_; ++i) {
            step st;
            st.node = static_cast<std::int32_t>(i);
            const bool emit = make_step(i, st);
            // Buffers whose last reader ran at this position.
            for (std::int32_t d : dies_[i]) {
                const value& v = at(d);
                if (v.kind == value::arena && !v.result && !handed_[static_cast<std::size_t>(d)])
                    arena_.release(static_cast<std::size_t>(v.offset), bytes_of(v));
                else if (v.kind == value::owned) st.release.push_back(d);
            }
            if (emit) {
                plan_->steps.push_back(std::move(st));
            } else if (!st.release.empty()) {
                // (Nothing runs here: the releases wait for the next step.)
                step carry;
                carry.kind = step::view;
                carry.node = -1;
                carry.release = std::move(st.release);
                plan_->steps.push_back(std::move(carry));
            }
        }
    }

    // Node i's step, its buffers placed; false where nothing runs at i.
    bool make_step(std::size_t i, step& st) {
        const graph_node& node = graph_.nodes[i];
        value& val = values_[i];
        if (node.kind == node_kind::effect) {
            st.kind = step::effect;
            return true;
        }
        if (node.kind != node_kind::op || absorbed_[i]) return false;  // (an absorbed add or activation runs in its product's step)
        if (node.group >= 0) {
            const fused_group& g = plan_->groups[static_cast<std::size_t>(node.group)];
            if (g.members.empty() || g.members.back() != static_cast<std::int32_t>(i)) return false;
            st.kind = step::group;
            st.node = node.group;
            place_group(g, i, st);
            return true;
        }
        if (val.kind == value::view) {
            st.kind = step::view;
        } else if (val.kind == value::owned) {
            st.kind = step::op;
        } else if (singleton_[i] >= 0) {
            st.kind = step::group;
            st.node = singleton_[i];
            place_group(plan_->groups[static_cast<std::size_t>(singleton_[i])], i, st);
        } else if (node.op == "matmul") {
            st.kind = step::matmul;
            const tensor& a = *observed(node.inputs[0]);
            const tensor& b = *observed(node.inputs[1]);
            st.m = a.shape()[0];
            st.k = a.shape()[1];
            st.n = b.shape()[1];
            st.ars = a.strides()[0], st.acs = a.strides()[1];
            st.brs = b.strides()[0], st.bcs = b.strides()[1];
            place(val);
            const step& e = epilogue_[i];
            if (e.bias >= 0) {
                st.bias = e.bias;
                st.period = e.period;
                st.add = e.add;
                st.act = e.act;
                if (e.act >= 0) place(at(e.act));
            }
        } else {
            st.kind = step::sum;
            const tensor& x = *observed(node.inputs[0]);
            std::vector<int> axes;
            bool keepdims = false;
            parse_reduction_attrs(node.attrs, axes, keepdims);
            st.keep = reduced_shape(x, axes, keepdims, "sum").keep;
            place(val);
        }
        return true;
    }

    const function_graph& graph_;
    const std::vector<std::optional<tensor>>& slots_;
    const std::size_t n_;
    std::shared_ptr<buffer_plan> plan_;
    std::vector<value>& values_;                  // plan_->values
    std::size_t executor_groups_ = 0;             // plan_->groups' first ones; single ops' groups follow
    std::vector<std::int32_t> position_;          // where each node's step runs
    std::vector<std::int32_t> singleton_;         // a single elementwise op planned as a group of one: its group
    std::vector<char> absorbed_;                  // an add or activation run in its product's step
    std::vector<step> epilogue_;                  // per matmul node: its bias, add and act
    std::vector<std::int32_t> last_;              // per buffer: the last position that reads it
    std::vector<std::vector<std::int32_t>> dies_; // per position: buffers read last there
    std::vector<char> handed_;                    // buffers a group's result took over
    arena_allocator arena_;
    std::string why_not_;
};

// Builds the plan of `graph` from a call that ran node by node and kept every value (`slots`: null for a fused
// group's values that never left it). `groups` are the executor's fused groups.
template <int N = 0>
std::shared_ptr<buffer_plan> build_buffer_plan(
    const function_graph& graph, const std::vector<fused_group>& groups, const std::vector<std::optional<tensor>>& slots,
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params) {
    return plan_builder<N>(graph, groups, slots, std::move(params)).build();
}

}  // namespace detail
}  // namespace kiln
