#pragma once
// Function mode on a CUDA device: from the third call of a signature, its whole call is captured as a CUDA graph and
// replayed (function_options::cuda_graphs). The executor (executor.hpp) holds a capture_record and calls
// replay_captured at each call of its traced extents.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "graph.hpp"
#include "passes.hpp"

#if KILN_HAS_GPU && KILN_GPU_CUDA
#include "../backend/thrust/capture.hpp"
#endif

namespace kiln {
namespace detail {

#if KILN_HAS_GPU
// A call captured as a CUDA graph: the graph reads the arguments from `inputs` (each call's arguments are
// copied there first) and leaves the results in `outputs` (each call's results are copied from there), both at
// fixed addresses; variables and constants are read and written where they live, as node by node.
// On the emulated device (no CUDA graphs) the same replay runs the recorded call again at each call, node by
// node from the input buffers with the effects' device parts, so that the test command checks the replay's
// logic (host parts, buffers, results) on every machine.
struct capture_record {
    std::mutex mutex;
    int calls = 0;          // calls run without the graph so far
    bool given_up = false;  // the call cannot be captured (why says why)
    bool ready = false;     // captured: calls replay it
    std::string why;
#if KILN_GPU_CUDA
    std::unique_ptr<backend::gpu_memory::cuda_graph> graph;
#endif
    std::vector<tensor> inputs, outputs;
    // Rank-0 host constants (numbers captured as tensors, which eager mode lets join a device op) copied to the
    // device before the capture: the graph reads these copies (a host value cannot be read by a kernel, and its
    // upload inside the op would wait for the device).
    std::vector<std::pair<std::int32_t, tensor>> uploaded;
    // The effects with host code around the replay (a `replayable` check, a `host_part`), in program order.
    std::vector<std::int32_t> effects;
    std::uint64_t replays = 0;
    ~capture_record() { drop(); }
    void drop() {
#if KILN_GPU_CUDA
        if (graph) {
            // The results' blocks go back to the graph's pool, which the graph then frees.
            const backend::gpu_memory::capture_scope scope(&graph->pool(), nullptr, graph->index());
            outputs.clear();
        }
        graph.reset();
#endif
        outputs.clear();
        inputs.clear();
        uploaded.clear();
    }
};

// Whether calls replay a captured CUDA graph, how many did, and why the call is not captured (empty: it is, or
// it will be from the third call).
struct capture_info {
    bool captured = false;
    std::uint64_t replays = 0;
    std::string why;
};
template <class Exe>
capture_info capture_status(const Exe& exe) {
    if (!exe.captured) return {false, 0, exe.cuda_graphs ? "the graph does not run on a CUDA device" : "cuda_graphs is off"};
    std::lock_guard lock(exe.captured->mutex);
    return {exe.captured->ready, exe.captured->replays, exe.captured->why};
}


// A rank-0 host constant, copied to the device for a capture (capture_record::uploaded).
inline bool uploadable(const graph_node& n) {
    return n.kind == node_kind::constant && n.device.type == device_type::cpu && n.shape.rank == 0 && n.value.valid();
}
// Whether every node can be recorded once and replayed: pure ops, and effects that only write their inputs'
// storage (an optimizer's step reads its step count and learning rate on the host at each call, a print reads
// values, a loop reads its condition: they run node by node).
template <class Exe>
std::string capture_refusal(const Exe& exe, std::span<const tensor> args) {
    for (const graph_node& n : exe.graph.nodes) {
        if (n.kind == node_kind::effect && !n.params.pure_effect && !(n.params.host_part && n.params.device_part))
            return "it has the effect '" + n.op + "' (its host code runs at each call)";
        if (n.kind == node_kind::effect && n.params.replayable && !n.params.replayable())
            return "the effect '" + n.op + "' cannot be recorded now (its host code runs at each call)";
        if (n.kind != node_kind::effect && n.device.type != device_type::cuda && !uploadable(n))
            return "a value lives on " + to_string(n.device);
    }
    using passes::detail::view_root;
    for (std::int32_t o : exe.graph.outputs) {
        const graph_node& r = exe.graph.nodes[static_cast<std::size_t>(view_root(exe.graph, o))];
        if (view_root(exe.graph, o) != o && r.kind != node_kind::op)
            return "a result is a view of an argument, a constant or a variable";
    }
    for (const tensor& a : args)
        if (a.device().type != device_type::cuda) return "an argument lives on " + to_string(a.device());
    return {};
}
// Whether every fused group that will have a compiled kernel has it (a capture records what runs now).
template <class Exe>
bool kernels_ready(const Exe& exe) {
    for (const fused_group& g : exe.groups)
        if (g.jit && !g.jit->device_fn.load(std::memory_order_acquire)) return false;
    return true;
}

// A call by replaying the captured graph; empty when the call runs node by node instead (its first two calls,
// a call whose arguments are not contiguous, and every call of a graph that cannot be captured).
template <class Exe>
std::optional<std::vector<tensor>> replay_captured(const Exe& exe, std::span<const tensor> args) {
    capture_record& r = *exe.captured;
    std::lock_guard lock(r.mutex);
    if (r.given_up) return std::nullopt;
    for (const tensor& a : args)
        if (!a.is_contiguous()) return std::nullopt;
    if (!r.ready) {
        // The first calls run node by node (caches, cuBLAS and the compiled kernels settle); a compiled group
        // still being built waits, up to 64 calls, since the capture records what runs now.
        if (++r.calls < 3 || (r.calls < 64 && !kernels_ready(exe))) return std::nullopt;
        if (std::string no = capture_refusal(exe, args); !no.empty()) {
            r.given_up = true;
            r.why = "not captured: " + no;
            return std::nullopt;
        }
        std::vector<tensor> in, out;
        for (const tensor& a : args) in.push_back(tensor(a.dtype(), a.shape(), a.device()));
        r.uploaded.clear();
        for (std::size_t i = 0; i < exe.graph.nodes.size(); ++i)
            if (uploadable(exe.graph.nodes[i]) && !args.empty())
                r.uploaded.emplace_back(static_cast<std::int32_t>(i), exe.graph.nodes[i].value.to(args[0].device()));
#if KILN_GPU_CUDA
        const int index = args.empty() ? 0 : args[0].device().index;
        auto g = std::make_unique<backend::gpu_memory::cuda_graph>(index);
        std::string why;
        const bool ok = g->capture([&] { out = exe.run_nodes(in, nullptr, nullptr, true, r.uploaded); }, why);
        // Every block of the graph's pool still in use must be a result's: a block held anywhere else would be
        // written by the replays behind its holder's back.
        bool escaped = false;
        if (ok) {
            std::vector<const void*> held;
            for (const tensor& t : out)
                if (t.storage_handle()) held.push_back(t.storage_handle()->data);
            for (const auto& [p, n] : g->pool().in_use)
                escaped = escaped || std::find(held.begin(), held.end(), p) == held.end();
        }
        if (!ok || escaped) {
            r.given_up = true;
            r.why = "not captured: " + (ok ? std::string("a value made during the capture outlived it") : why);
            if (escaped) g->pool().leak = true;  // its blocks stay allocated: one is in use elsewhere
            {
                const backend::gpu_memory::capture_scope scope(&g->pool(), nullptr, index);
                out.clear();
            }
            return std::nullopt;  // nothing ran: the call runs node by node
        }
        r.graph = std::move(g);
        r.outputs = std::move(out);
#endif
        r.inputs = std::move(in);
        r.effects.clear();
        for (std::size_t i = 0; i < exe.graph.nodes.size(); ++i) {
            const graph_node& n = exe.graph.nodes[i];
            if (n.kind == node_kind::effect && (n.params.replayable || n.params.host_part))
                r.effects.push_back(static_cast<std::int32_t>(i));
        }
        r.ready = true;
        r.why.clear();
    }
    for (std::size_t k = 0; k < args.size(); ++k) {
        const tensor& a = args[k];
        const tensor& to = r.inputs[k];
        if (a.dtype() != to.dtype() || !(a.shape() == to.shape()) || !(a.device() == to.device())) return std::nullopt;
    }
    for (std::int32_t e : r.effects) {
        const graph_node& n = exe.graph.nodes[static_cast<std::size_t>(e)];
        if (n.params.replayable && !n.params.replayable()) {
            r.given_up = true;  // (the graph and its pool go with the function)
            r.ready = false;
            r.why = "no longer replayed: the effect '" + n.op + "' cannot be recorded now (its host code runs at each call)";
            return std::nullopt;
        }
    }
    // The host code of the recorded effects (an optimizer's step count and this step's numbers), in program
    // order, then the arguments, then the graph: all queued in that order on the device's stream.
    for (std::int32_t e : r.effects)
        if (const graph_node& n = exe.graph.nodes[static_cast<std::size_t>(e)]; n.params.host_part) n.params.host_part();
    for (std::size_t k = 0; k < args.size(); ++k)
        backend::gpu_memory::within(r.inputs[k].raw_data(), args[k].raw_data(), args[k].numel() * size_of(args[k].dtype()),
                                    args[k].device().index);
#if KILN_GPU_CUDA
    r.graph->launch();
#else
    r.outputs = exe.run_nodes(r.inputs, nullptr, nullptr, true, r.uploaded);
#endif
    ++r.replays;
    std::vector<tensor> out;
    out.reserve(exe.graph.outputs.size());
    for (std::size_t k = 0; k < exe.graph.outputs.size(); ++k) {
        const graph_node& node = exe.graph.nodes[static_cast<std::size_t>(exe.graph.outputs[k])];
        if (node.kind == node_kind::argument) {
            const tensor& a = args[static_cast<std::size_t>(node.argument)];
            out.push_back(exe.copy_result[k] ? a.clone() : a);
        } else if (node.kind == node_kind::variable || node.kind == node_kind::constant) {
            out.push_back(exe.copy_result[k] ? node.value.clone() : node.value);
        } else {
            out.push_back(r.outputs[k].clone());  // queued after the replay, on the same stream
        }
    }
    return out;
}
#endif  // KILN_HAS_GPU

}  // namespace detail
}  // namespace kiln
