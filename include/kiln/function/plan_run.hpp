#pragma once
// Running a buffer plan (function/buffer_plan.hpp): each call takes its thread's arena and call state from a
// thread-local pool, so a planned call allocates only what its replayed ops allocate themselves, and calls from
// many threads never share one.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "buffer_plan.hpp"

namespace kiln {
namespace detail {

// A thread's arena and per-call state, kept between calls (one per plan in use on the thread at once).
struct plan_frame {
    std::uint64_t plan_id = 0;
    std::shared_ptr<std::byte> memory;          // the arena
    std::size_t bytes = 0;
    std::shared_ptr<storage> arena_storage;     // over the arena: replayed ops and effects see its values through it
    std::vector<std::byte*> ptr;                // per value: its first element
    std::vector<std::optional<tensor>> owned;   // per value: a replayed op's result
    std::vector<const std::byte*> bases;
    repeat_buffer repeated;                     // a group's periodic operands, laid out over its tile
    std::vector<tensor> in;

    void reserve(std::size_t need) {
        if (bytes >= need && memory) return;
        const std::size_t size = std::max<std::size_t>(need, 64);
        std::byte* p = static_cast<std::byte*>(::operator new(size, std::align_val_t{64}));
        memory = std::shared_ptr<std::byte>(p, [](std::byte* q) { ::operator delete(q, std::align_val_t{64}); });
        bytes = size;
        arena_storage = std::make_shared<storage>();
        arena_storage->data = p;
        arena_storage->bytes = size;
        arena_storage->keeper = memory;  // a tensor that outlives the call keeps the memory (not its values)
    }
};

class plan_frames {
public:
    static std::unique_ptr<plan_frame> take(std::uint64_t id) {
        auto& pool = frames();
        for (std::size_t i = pool.size(); i-- > 0;)
            if (pool[i]->plan_id == id) {
                std::unique_ptr<plan_frame> f = std::move(pool[i]);
                pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
                return f;
            }
        if (!pool.empty()) {
            std::unique_ptr<plan_frame> f = std::move(pool.back());
            pool.pop_back();
            return f;
        }
        return std::make_unique<plan_frame>();
    }
    static void give_back(std::unique_ptr<plan_frame> f) {
        auto& pool = frames();
        if (pool.size() < 8) pool.push_back(std::move(f));
    }

private:
    static std::vector<std::unique_ptr<plan_frame>>& frames() {
        thread_local std::vector<std::unique_ptr<plan_frame>> pool;
        return pool;
    }
};

// Whether a call's arguments have the layouts the plan was made for.
template <int = 0>
bool plan_fits(const buffer_plan& plan, const function_graph& graph, std::span<const tensor> args) {
    for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
        const graph_node& node = graph.nodes[i];
        if (node.kind != node_kind::argument) continue;
        const tensor& a = args[static_cast<std::size_t>(node.argument)];
        const buffer_plan::value& v = plan.values[i];
        if (!a.valid() || a.is_symbolic() || a.dtype() != v.dtype || !(a.shape() == v.shape) || !(a.strides() == v.strides))
            return false;
    }
    return true;
}

// The tensor of value v in a planned call (a view of the arena for arena values), appended to `to` (built in
// place: a tensor returned and then moved in was read back whole before its fields were stored, a stall per
// input). `borrow`: a view that shares no ownership of the storage (for an effect that keeps no input:
// op_params::borrows_inputs), which the call keeps alive; copying it then counts no references.
template <int N = 0>
void append_plan_tensor(std::vector<tensor>& to, const buffer_plan& plan, const function_graph& graph, plan_frame& f,
                        std::span<const tensor> args, std::int32_t v, bool borrow = false) {
    const buffer_plan::value& val = plan.values[static_cast<std::size_t>(v)];
    if (val.kind == buffer_plan::value::owned || val.result) {
        to.push_back(*f.owned[static_cast<std::size_t>(v)]);
        return;
    }
    const buffer_plan::value& root = plan.values[static_cast<std::size_t>(val.root)];
    const graph_node& rn = graph.nodes[static_cast<std::size_t>(val.root)];
    const std::shared_ptr<storage>* s = nullptr;
    switch (root.kind) {
        case buffer_plan::value::argument: s = &args[static_cast<std::size_t>(rn.argument)].storage_handle(); break;
        case buffer_plan::value::fixed: s = &rn.value.storage_handle(); break;
        case buffer_plan::value::owned: s = &f.owned[static_cast<std::size_t>(val.root)]->storage_handle(); break;
        default: s = root.result ? &f.owned[static_cast<std::size_t>(val.root)]->storage_handle() : &f.arena_storage; break;
    }
    const std::ptrdiff_t bytes = f.ptr[static_cast<std::size_t>(v)] - (*s)->data;
    const std::ptrdiff_t offset = bytes / static_cast<std::ptrdiff_t>(size_of(val.dtype));
    if (borrow) to.emplace_back(std::shared_ptr<storage>(std::shared_ptr<storage>(), s->get()), val.dtype, val.shape, val.strides, offset);
    else to.emplace_back(*s, val.dtype, val.shape, val.strides, offset);
}

// A matrix product's epilogue in a plan (buffer_plan::step::bias): c[i] += bias[i % period] over `total` elements,
// then `act` (a unary tile kernel) of c into `out` where given, a block of rows at a time while it is in cache,
// split over the threads as a fused group is. The additions are the add op's own, so the bits are.
template <class T>
void add_bias_rows(T* c, std::ptrdiff_t total, const T* bias, std::ptrdiff_t period, tile_kernel act, T* out,
                   const std::int64_t* act_params) {
    const std::ptrdiff_t block = period * std::max<std::ptrdiff_t>(1, 2048 / period);
    split_tiles(total, block, [&](std::ptrdiff_t first, std::ptrdiff_t last) {
        for (std::ptrdiff_t at = first; at < last; at += block) {
            const std::ptrdiff_t end = std::min(last, at + block);
            if (period == 1) {
                const T b = bias[0];
                for (std::ptrdiff_t i = at; i < end; ++i) c[i] = c[i] + b;
            } else {
                for (std::ptrdiff_t row = at; row < end; row += period) {
                    T* r = c + row;
                    for (std::ptrdiff_t j = 0; j < period; ++j) r[j] = r[j] + bias[j];
                }
            }
            if (act) {
                const void* in[1] = {c + at};
                act(in, out + at, end - at, act_params);
            }
        }
    });
}

// Runs a planned call; the results as the executor returns them (`copy[k]`: result k is the caller's own copy).
template <int N = 0>
std::vector<tensor> run_buffer_plan(const buffer_plan& plan, const function_graph& graph, std::span<const tensor> args,
                                           const std::vector<char>& copy_result) {
    const std::size_t n = graph.nodes.size();
    std::unique_ptr<plan_frame> frame = plan_frames::take(plan.id);
    plan_frame& f = *frame;
    struct give_back_on_exit {
        std::unique_ptr<plan_frame>& frame;
        ~give_back_on_exit() {
            for (auto& o : frame->owned) o.reset();
            frame->in.clear();
            plan_frames::give_back(std::move(frame));
        }
    } guard{frame};
    f.plan_id = plan.id;
    f.reserve(plan.arena_bytes);
    f.ptr.assign(n, nullptr);
    f.owned.resize(n);
    std::byte* const arena = f.arena_storage->data;
    for (std::size_t i = 0; i < n; ++i) {
        const buffer_plan::value& v = plan.values[i];
        if (v.kind == buffer_plan::value::argument)
            f.ptr[i] = static_cast<std::byte*>(args[static_cast<std::size_t>(graph.nodes[i].argument)].raw_data());
        else if (v.kind == buffer_plan::value::fixed)
            f.ptr[i] = static_cast<std::byte*>(graph.nodes[i].value.raw_data());
        else if (v.kind == buffer_plan::value::arena && v.result) {
            f.owned[i] = tensor(v.dtype, v.shape);
            f.ptr[i] = static_cast<std::byte*>(f.owned[i]->raw_data());
        } else if (v.kind == buffer_plan::value::arena) {
            f.ptr[i] = arena + v.offset;
        }
    }
    auto inputs_of = [&](const graph_node& node, bool borrow = false) -> std::span<const tensor> {
        f.in.clear();
        for (std::int32_t v : node.inputs) append_plan_tensor<N>(f.in, plan, graph, f, args, v, borrow);
        return f.in;
    };
    for (const buffer_plan::step& st : plan.steps) {
        switch (st.kind) {
            case buffer_plan::step::view:
                if (st.node >= 0) {
                    const buffer_plan::value& v = plan.values[static_cast<std::size_t>(st.node)];
                    f.ptr[static_cast<std::size_t>(st.node)] = f.ptr[static_cast<std::size_t>(v.source)] + v.offset;
                }
                break;
            case buffer_plan::step::group: {
                const fused_group& g = plan.groups[static_cast<std::size_t>(st.node)];
                const std::size_t m = g.members.size();
                const std::size_t item = size_of(g.dtype);
                std::size_t operands = 0;
                for (const auto& ins : g.inputs) operands += ins.size();
                f.repeated.prepare(g, g.tile, item);
                f.bases.assign(operands, nullptr);
                std::byte* outs[64];
                const std::int64_t* params[64];
                std::size_t at = 0;
                // The group's extent is its exported members' own (every operand may repeat along it, with none of
                // the group's shape: a broadcast view times a broadcast constant). The plan has the layout of each
                // exported member, and a group exports at least one.
                std::size_t shown = 0;
                while (!g.exported[shown]) ++shown;
                const std::ptrdiff_t total = plan.values[static_cast<std::size_t>(g.members[shown])].shape.numel();
                for (std::size_t j = 0; j < m; ++j) {
                    for (const auto& op : g.inputs[j]) {
                        if (op.kind == fused_group::operand::full) {
                            f.bases[at] = f.ptr[static_cast<std::size_t>(op.index)];
                        } else if (op.kind == fused_group::operand::periodic) {
                            f.bases[at] = f.repeated.lay(f.ptr[static_cast<std::size_t>(op.index)], op.period, total);
                        }
                        ++at;
                    }
                    outs[j] = g.exported[j] ? f.ptr[static_cast<std::size_t>(g.members[j])] : nullptr;
                    params[j] = plan.params_of(graph, g.members[j]);
                }
                run_tiles(graph, g, f.bases.data(), outs, total, params);
                break;
            }
            case buffer_plan::step::matmul: {
                const graph_node& node = graph.nodes[static_cast<std::size_t>(st.node)];
                const std::byte* a = f.ptr[static_cast<std::size_t>(node.inputs[0])];
                const std::byte* b = f.ptr[static_cast<std::size_t>(node.inputs[1])];
                std::byte* c = f.ptr[static_cast<std::size_t>(st.node)];
                auto product = [&]<class T>() {
                    backend::cpu_device::gemm(reinterpret_cast<T*>(c), st.m, st.n, st.k,
                                              matrix_ref<T>{reinterpret_cast<const T*>(a), st.ars, st.acs},
                                              matrix_ref<T>{reinterpret_cast<const T*>(b), st.brs, st.bcs});
                };
                if (node.dtype == kiln::float32) product.template operator()<float>();
                else product.template operator()<double>();
                if (st.bias >= 0) {
                    const std::size_t item = size_of(node.dtype);
                    const std::int32_t act = st.act;
                    const std::int64_t* act_params = act >= 0 ? plan.params_of(graph, act) : nullptr;
                    std::byte* act_out = act >= 0 ? f.ptr[static_cast<std::size_t>(act)] : nullptr;
                    const std::byte* bias = f.ptr[static_cast<std::size_t>(st.bias)];
                    auto finish = [&]<class T>() {
                        add_bias_rows(reinterpret_cast<T*>(c), st.m * st.n, reinterpret_cast<const T*>(bias), st.period,
                                      act >= 0 ? graph.nodes[static_cast<std::size_t>(act)].params.tile : nullptr,
                                      reinterpret_cast<T*>(act_out), act_params);
                    };
                    if (item == sizeof(float)) finish.template operator()<float>();
                    else finish.template operator()<double>();
                    f.ptr[static_cast<std::size_t>(st.add)] = c;
                }
                break;
            }
            case buffer_plan::step::sum: {
                // The device's reduction engine, as eager mode's sum: the same order, the same bits.
                const graph_node& node = graph.nodes[static_cast<std::size_t>(st.node)];
                const buffer_plan::value& xv = plan.values[static_cast<std::size_t>(node.inputs[0])];
                auto fold = [&]<class T>() {
                    const T* x = reinterpret_cast<const T*>(f.ptr[static_cast<std::size_t>(node.inputs[0])]);
                    backend::cpu_device::reduce(fold_kind::sum, strided<const T>(x, xv.shape, contiguous_strides(xv.shape)),
                                                st.keep, reinterpret_cast<T*>(f.ptr[static_cast<std::size_t>(st.node)]));
                };
                if (node.dtype == kiln::float32) fold.template operator()<float>();
                else fold.template operator()<double>();
                break;
            }
            case buffer_plan::step::op: {
                const graph_node& node = graph.nodes[static_cast<std::size_t>(st.node)];
                std::optional<tensor>& r = f.owned[static_cast<std::size_t>(st.node)];
                r = node.fn(inputs_of(node), plan.param_span(graph, st.node));
                const buffer_plan::value& v = plan.values[static_cast<std::size_t>(st.node)];
                if (r->dtype() != v.dtype || !(r->shape() == v.shape))
                    throw value_error(error_prefix("value_error", "function") + "internal: %" + std::to_string(st.node) + " (" +
                                      node.op + ") gave " + to_string(r->shape()) + " " + std::string(name(r->dtype())) +
                                      " where its plan has " + to_string(v.shape) + " " + std::string(name(v.dtype)));
                f.ptr[static_cast<std::size_t>(st.node)] = static_cast<std::byte*>(r->raw_data());
                break;
            }
            case buffer_plan::step::effect: {
                const graph_node& node = graph.nodes[static_cast<std::size_t>(st.node)];
                node.effect(inputs_of(node, node.params.borrows_inputs), plan.param_span(graph, st.node));
                break;
            }
        }
        for (std::int32_t d : st.release) f.owned[static_cast<std::size_t>(d)].reset();
    }
    std::vector<tensor> out;
    out.reserve(graph.outputs.size());
    for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
        const std::int32_t o = graph.outputs[k];
        const buffer_plan::value& v = plan.values[static_cast<std::size_t>(o)];
        const buffer_plan::value& root = plan.values[static_cast<std::size_t>(v.root)];
        const bool in_arena = root.kind == buffer_plan::value::arena && !root.result;
        append_plan_tensor<N>(out, plan, graph, f, args, o);
        if (copy_result[k] || in_arena) out.back() = out.back().clone();
    }
    return out;
}

}  // namespace detail
}  // namespace kiln
