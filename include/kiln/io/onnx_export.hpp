#pragma once
// ONNX export (ONNX import is io/onnx_import.hpp): kiln::export_onnx(fn, signature, path) writes a traced function's inference graph as an ONNX model
// (IR version 8, opset 17), with dynamic dimensions as named dimensions ("dim0", ...). kiln stays header-only: the
// protobuf wire format is written directly (field numbers from onnx.proto), with no libprotobuf.
//
//   auto predict = kiln::function([&](const kiln::tensor& x) { return kiln::nn::softmax(model(x), -1); });
//   kiln::export_onnx(predict, {kiln::spec(kiln::float32, {kiln::dyn, 10})}, "model.onnx");
//
// Each node of the optimized graph becomes ONNX nodes: elementwise ops their ONNX operator (Add, Mul, Relu, Where,
// Greater, ...), with Casts where kiln promotes dtypes and ONNX does not, and composites where ONNX has no operator
// (silu, gelu, leaky_relu, clamp, relu_backward); matmul MatMul; reductions ReduceSum/Max/Min/Prod and ArgMax/ArgMin;
// the views Reshape, Expand, Transpose, Slice, Gather (select) and Unsqueeze; concat Concat; casts Cast; full
// ConstantOfShape; nn::conv2d, nn::conv_transpose2d and the pools (traced as their parts, with a note of what they
// are) Conv, ConvTranspose, MaxPool and AveragePool, nn::layer_norm LayerNormalization, nn::batch_norm (evaluation) BatchNormalization. A parameter that
// follows a dynamic dimension (a reshape's target) is computed in the model from the input's Shape. Captured
// tensors are initializers. An op with no mapping is a kiln::value_error naming it. Each node's writer is in
// io/onnx_writers.hpp (a table by op name for the structural ops); this header names the dynamic dimensions and
// assembles the model.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "function_file.hpp"
#include "onnx_plan.hpp"
#include "onnx_proto.hpp"
#include "onnx_writers.hpp"

namespace kiln {

namespace detail {

// The name of each dynamic extent of the signature, in order: the spec's name where it gives one; extents that
// were equal when traced share one, since the trace assumed them equal; "dim<k>" otherwise.
inline std::vector<std::string> onnx_dim_names(const executable& exe, const std::vector<spec>& specs) {
    std::vector<std::string> dim_name;
    std::set<std::string> taken;
    for (const spec& s : specs)
        for (std::size_t i = 0; i < s.shape.size(); ++i)
            if (s.shape[i] == dyn) {
                dim_name.push_back(s.name_of(i));
                if (!dim_name.back().empty()) taken.insert(dim_name.back());
            }
    auto traced_equal = [&](std::size_t a, std::size_t b) {
        return a < exe.traced_extents.size() && b < exe.traced_extents.size() && exe.traced_extents[a] == exe.traced_extents[b];
    };
    for (std::size_t d = 0, fresh = 0; d < dim_name.size(); ++d) {
        if (!dim_name[d].empty()) continue;
        for (std::size_t e = 0; e < dim_name.size() && dim_name[d].empty(); ++e)
            if (e != d && !dim_name[e].empty() && traced_equal(e, d)) dim_name[d] = dim_name[e];
        if (!dim_name[d].empty()) continue;
        std::string nm;
        do nm = "dim" + std::to_string(fresh++);
        while (taken.count(nm) != 0);
        taken.insert(nm);
        // (every unnamed extent traced equal to this one takes the name too)
        for (std::size_t e = d; e < dim_name.size(); ++e)
            if (dim_name[e].empty() && (e == d || traced_equal(e, d))) dim_name[e] = nm;
    }
    return dim_name;
}

template <int N = 0>
std::string onnx_model_bytes(const executable& exe, const std::vector<spec>& specs, const std::string& model_name,
                             const char* entry) {
    const function_graph& g = exe.graph;
    const std::vector<std::string> dim_name = onnx_dim_names(exe, specs);
    std::vector<int> same_dim(dim_name.size());  // (the first dynamic extent of each one's name)
    for (std::size_t d = 0; d < dim_name.size(); ++d)
        same_dim[d] = static_cast<int>(std::find(dim_name.begin(), dim_name.end(), dim_name[d]) - dim_name.begin());
    const onnx_plan plan = make_onnx_plan<N>(g, specs, same_dim);
    onnx_export_state s{g, plan, entry, {}, std::vector<std::string>(g.nodes.size()), {}, {}, {}};
    for (std::size_t k = 0; k < specs.size(); ++k) {
        s.input_name.push_back("input_" + std::to_string(k));
        for (std::size_t i = 0; i < specs[k].shape.size(); ++i)
            if (specs[k].shape[i] == dyn) s.dim_at.emplace_back(k, static_cast<int>(i));
    }
    onnx_builder& b = s.b;

    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        if (!plan.live[i] && n.kind != node_kind::argument && n.kind != node_kind::effect) continue;
        switch (n.kind) {
            case node_kind::argument: s.value[i] = s.input_name[static_cast<std::size_t>(n.argument)]; continue;
            case node_kind::constant:
            case node_kind::variable: s.value[i] = b.initializer(n.value, "w"); continue;
            case node_kind::effect:
                throw value_error(error_prefix("value_error", entry) + "the function writes into tensors (node %" +
                                  std::to_string(i) + ", '" + n.op + "'): only inference functions can be exported");
            case node_kind::op: break;
        }
        if (plan.fused[i].kind != onnx_fused::none) {
            s.value[i] = onnx_write_fused(s, plan.fused[i]);
            continue;
        }
        onnx_node x{i, n, {}, {}, {}, split_attrs(n.attrs)};
        for (std::int32_t v : n.inputs) {
            x.in.push_back(s.of(v));
            x.in_dtype.push_back(s.node(v).dtype);
            x.in_rank.push_back(s.node(v).shape.rank);
        }
        const auto& writers = onnx_op_writers();
        const auto w = writers.find(n.op);
        s.value[i] = w != writers.end() ? w->second(s, x) : onnx_write_elementwise<N>(s, x);
    }

    std::string graph = b.nodes;
    // Outputs: an Identity each, so an output is a value of its own (an argument or a constant returned, or the
    // same value twice, included).
    std::string outputs;
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
        const std::string name = "output_" + std::to_string(k);
        std::string node;
        proto::bytes_field(node, 1, s.value[static_cast<std::size_t>(g.outputs[k])]);
        proto::bytes_field(node, 2, name);
        proto::bytes_field(node, 3, "return_" + std::to_string(k));
        proto::bytes_field(node, 4, "Identity");
        proto::bytes_field(graph, 1, node);
        // Its extents: fixed where they are static; where one always equals an input's dynamic extent, that
        // extent's name; otherwise a named dimension of its own.
        const std::size_t out_value = static_cast<std::size_t>(g.outputs[k]);
        const graph_node& o = g.nodes[out_value];
        std::vector<std::ptrdiff_t> extents(static_cast<std::size_t>(o.shape.rank), dyn);
        std::vector<std::string> names(extents.size());
        for (int i = 0; i < o.shape.rank; ++i) {
            const std::size_t ax = static_cast<std::size_t>(i);
            const int d = ax < plan.axis_dims[out_value].size() ? plan.axis_dims[out_value][ax] : -1;
            if (d >= 0 && static_cast<std::size_t>(d) < dim_name.size()) names[ax] = dim_name[static_cast<std::size_t>(d)];
            else if (plan.dynamic_axes[out_value] >> i & 1u) names[ax] = name + "_dim" + std::to_string(i);
            else extents[ax] = o.shape[i];
        }
        proto::bytes_field(outputs, 12, onnx_value_info(name, o.dtype, names, &extents));
    }
    proto::bytes_field(graph, 2, model_name);
    graph += b.initializers;
    std::size_t d = 0;
    for (std::size_t k = 0; k < specs.size(); ++k) {
        std::vector<std::string> names(specs[k].shape.size());
        for (std::size_t i = 0; i < specs[k].shape.size(); ++i)
            if (specs[k].shape[i] == dyn) names[i] = dim_name[d++];
        proto::bytes_field(graph, 11, onnx_value_info(s.input_name[k], specs[k].dtype, names, &specs[k].shape));
    }
    graph += outputs;

    std::string model;
    proto::int_field(model, 1, 8);  // ir_version
    proto::bytes_field(model, 2, "kiln");
    proto::bytes_field(model, 3, "1");
    proto::bytes_field(model, 7, graph);
    std::string opset;
    proto::bytes_field(opset, 1, "");
    proto::int_field(opset, 2, 17);
    proto::bytes_field(model, 8, opset);
    return model;
}

}  // namespace detail

// The ONNX model's bytes for `fn` traced for `signature`.
template <class F>
std::string onnx_bytes(const function<F>& fn, const std::vector<spec>& signature) {
    const auto exe = detail::compile_for(fn, signature, "export_onnx");
    return detail::onnx_model_bytes(*exe, signature, fn.options().name, "export_onnx");
}

// Writes `fn` traced for `signature` as an ONNX model (IR 8, opset 17); kiln::dyn extents are named dimensions.
template <class F>
void export_onnx(const function<F>& fn, const std::vector<spec>& signature, const std::string& path) {
    detail::write_file_atomically(path, onnx_bytes(fn, signature), "export_onnx");
}

}  // namespace kiln
