#pragma once
// The run-time graph of a traced function (kiln::function): nodes in program order, each an argument, a captured
// tensor (a constant, or a variable read where it lives), a pure op, or an effect (a write into a tensor's
// storage). Values are node indices; every node but an effect has one. The passes (function/passes.hpp) rewrite
// it and the executor (function/executor.hpp) runs it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../eager/eager.hpp"

namespace kiln {

enum class node_kind : std::uint8_t {
    argument,  // the function's tensor argument number `argument`
    constant,  // a tensor captured while tracing, by its value then (or folded from constants by a pass)
    variable,  // a kiln::variable (or a captured tensor that the function writes into): read where it lives
    op,        // a pure op: its result depends only on its inputs
    effect,    // a write into the storage of its first `writes` inputs, run in program order
};

constexpr std::string_view name(node_kind k) noexcept {
    switch (k) {
        case node_kind::argument: return "argument";
        case node_kind::constant: return "constant";
        case node_kind::variable: return "variable";
        case node_kind::op: return "op";
        case node_kind::effect: return "effect";
    }
    return "unknown";
}

// A parameter of a node that follows a dynamic dimension of the function's spec: scale * extent + offset.
struct dynamic_param {
    std::uint32_t index = 0;  // into the node's parameters
    int dim = 0;              // which dynamic dimension (in the order of the arguments and their axes)
    std::int64_t scale = 1, offset = 0;
    friend bool operator==(const dynamic_param&, const dynamic_param&) = default;
};

struct graph_node {
    node_kind kind = node_kind::op;
    std::string op;     // the vocabulary's name: "add", "matmul", "sum", "adam_step", ...
    std::string attrs;  // its attributes as text ("axes=0 keepdims=true"); with op and inputs, what the op computes
    std::vector<std::int32_t> inputs;
    kiln::dtype dtype = kiln::float32;  // the result's (an effect has none)
    dims shape;
    std::size_t writes = 0;   // an effect: how many leading inputs it writes into
    int argument = -1;        // an argument: its position among the tensor arguments
    detail::op_params params; // integers and numbers the op reads when it runs (see detail::tracer_base)
    std::vector<dynamic_param> dynamic;  // those of them that follow a dynamic dimension
    int group = -1;           // the fused elementwise group that runs it, tile by tile (-1: none)
    kiln::device device{};    // where its value lives (a trace runs on the device of its arguments)
    tensor value;             // a constant's value; a variable's storage
    detail::replay_fn fn;     // an op: computes it from real inputs
    detail::effect_fn effect; // an effect: performs it
};

// A value that the nodes before it computed as the parts of one composite op ("conv2d" as pad, slices, stack and
// matmul): the op, its attributes as text and the values it reads. Exporters may write the op in one operator
// (ONNX's Conv); the executor runs the parts, and the passes keep the note's values current (a note whose output
// is removed goes too).
struct composite_note {
    std::string op;
    std::string attrs;
    std::vector<std::int32_t> inputs;
    std::int32_t output = -1;
};

// A run-time graph: its nodes in program order and the values the function returns.
struct function_graph {
    std::vector<graph_node> nodes;
    std::vector<std::int32_t> outputs;
    std::vector<composite_note> composites;

    std::size_t size() const noexcept { return nodes.size(); }
    // How many nodes are the op `op` (or, with an empty name, of kind `k`).
    std::size_t count(std::string_view op) const {
        std::size_t n = 0;
        for (const graph_node& g : nodes) n += g.op == op;
        return n;
    }
    // How many fused elementwise groups run its ops.
    std::size_t groups() const {
        int most = -1;
        for (const graph_node& g : nodes) most = std::max(most, g.group);
        return static_cast<std::size_t>(most + 1);
    }
    std::size_t count(node_kind k) const {
        std::size_t n = 0;
        for (const graph_node& g : nodes) n += g.kind == k;
        return n;
    }
};

namespace detail {
inline std::string value_name(std::int32_t v) { return "%" + std::to_string(v); }
}  // namespace detail

// One line per node: "%3 = add(%1, %2) : (32, 64) float32", "adam_step(%0, %1, %5, %6) lr=0.001 ...".
inline std::string to_string(const function_graph& g) {
    std::string s;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        if (n.kind != node_kind::effect) s += detail::value_name(static_cast<std::int32_t>(i)) + " = ";
        switch (n.kind) {
            case node_kind::argument: s += "argument " + std::to_string(n.argument); break;
            case node_kind::constant: s += "constant"; break;
            case node_kind::variable: s += "variable"; break;
            case node_kind::op:
            case node_kind::effect: {
                s += n.op + "(";
                for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                    if (k) s += ", ";
                    s += detail::value_name(n.inputs[k]);
                }
                s += ")";
                if (!n.attrs.empty()) s += " " + n.attrs;
                break;
            }
        }
        if (n.kind != node_kind::effect) s += " : " + to_string(n.shape) + " " + std::string(name(n.dtype));
        if (n.group >= 0) s += " [fused " + std::to_string(n.group) + "]";
        s += "\n";
    }
    s += "return";
    for (std::size_t k = 0; k < g.outputs.size(); ++k) s += (k ? ", " : " ") + detail::value_name(g.outputs[k]);
    return s + "\n";
}

// Graphviz: values as boxes labelled with their op, edges from inputs, effects as octagons, outputs doubled.
inline std::string to_dot(const function_graph& g) {
    std::string s = "digraph function {\n  rankdir=LR;\n";
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        std::string label = n.kind == node_kind::op || n.kind == node_kind::effect ? n.op : std::string(name(n.kind));
        if (n.kind == node_kind::argument) label += " " + std::to_string(n.argument);
        if (n.kind != node_kind::effect) label += "\\n" + to_string(n.shape) + " " + std::string(name(n.dtype));
        bool out = false;
        for (std::int32_t o : g.outputs) out = out || o == static_cast<std::int32_t>(i);
        s += "  n" + std::to_string(i) + " [label=\"" + label + "\", shape=" +
             (n.kind == node_kind::effect ? "octagon" : "box") + (out ? ", peripheries=2" : "") + "];\n";
        for (std::int32_t in : n.inputs) s += "  n" + std::to_string(in) + " -> n" + std::to_string(i) + ";\n";
    }
    return s + "}\n";
}

}  // namespace kiln
