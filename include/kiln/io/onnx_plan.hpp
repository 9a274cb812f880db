#pragma once
// What the ONNX export (io/onnx_export.hpp) works out before it writes a node:
// - which extents of each value are static (the same for every call) and which follow a dynamic dimension of the
//   signature, so that outputs get fixed dimensions where they have them and a select of a static size-1 axis
//   can be a Squeeze;
// - the patterns ONNX has one operator for: softmax and log_softmax (kiln traces them as max, sub, exp, sum and div
//   or log) become Softmax and LogSoftmax, a matmul of matrices plus a bias becomes Gemm (with transA/transB where
//   an operand is a transposed matrix), and a sum divided by its count (kiln's mean) becomes ReduceMean;
// - the composites the tracer noted (function/graph.hpp): nn::conv2d, nn::conv_transpose2d and the pools as Conv,
//   ConvTranspose, MaxPool and AveragePool, nn::layer_norm as LayerNormalization, nn::batch_norm (evaluation) as BatchNormalization;
// - which values the outputs need once those patterns stand for their parts, so that nothing else is written.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "function_file.hpp"

namespace kiln::detail {

struct onnx_fused {
    enum kind_t { none, softmax, log_softmax, gemm, squeeze, reduce_mean, conv, conv_transpose, max_pool, avg_pool, layer_norm, batch_norm } kind = none;
    std::vector<std::int32_t> inputs;  // the values it reads instead of the node's own inputs
    int axis = 0;
    bool trans_a = false, trans_b = false;
    std::vector<std::int64_t> axes;  // reduce_mean: the axes (normalized) and keepdims
    bool keepdims = false;
    std::string attrs;  // conv, conv_transpose, max_pool, avg_pool, layer_norm: the composite note's attributes (nn/conv.hpp's window_attrs,
                        // nn/normalization.hpp's axis, epsilon, scale and bias)

    static onnx_fused of(kind_t k, std::vector<std::int32_t> in, int axis = 0, bool ta = false, bool tb = false) {
        onnx_fused f;
        f.kind = k;
        f.inputs = std::move(in);
        f.axis = axis;
        f.trans_a = ta;
        f.trans_b = tb;
        return f;
    }
};

struct onnx_plan {
    std::vector<std::uint32_t> dynamic_axes;  // per value: bit j set where axis j may differ from call to call
    // per value and axis: the dynamic input extent (numbered in the order of the arguments and their axes) that the
    // axis always equals, where that is worked out; -1 otherwise
    std::vector<std::vector<int>> axis_dims;
    std::vector<onnx_fused> fused;            // per value: the operator that computes it, where a pattern matched
    std::vector<bool> live;                   // per value: the outputs need it
};

// `same_dim`: as value_axes_of takes it.
template <int N = 0>
onnx_plan make_onnx_plan(const function_graph& g, const std::vector<spec>& specs, const std::vector<int>& same_dim = {}) {
    onnx_plan p;
    const std::size_t size = g.nodes.size();
    value_axes axes = value_axes_of<N>(g, specs, same_dim);
    p.dynamic_axes = std::move(axes.dynamic);
    p.axis_dims = std::move(axes.dims);
    p.fused.resize(size);
    std::vector<int> uses(size, 0);
    for (const graph_node& n : g.nodes)
        for (std::int32_t v : n.inputs) ++uses[static_cast<std::size_t>(v)];
    for (std::int32_t v : g.outputs) ++uses[static_cast<std::size_t>(v)];

    auto node = [&](std::int32_t v) -> const graph_node& { return g.nodes[static_cast<std::size_t>(v)]; };
    auto is_op = [&](std::int32_t v, const char* op, std::size_t inputs) {
        const graph_node& n = node(v);
        return n.kind == node_kind::op && n.op == op && n.inputs.size() == inputs;
    };
    // A reduction of `x` along the one axis `axis` (normalized) with keepdims.
    auto reduces_one_axis = [&](std::int32_t v, const char* op, int* axis) {
        if (!is_op(v, op, 1)) return false;
        const graph_node& n = node(v);
        const std::map<std::string, std::string> a = split_attrs(n.attrs);
        const std::vector<int> axes = attr_axes(a, "axes");
        if (axes.size() != 1 || !attr_bool(a, "keepdims")) return false;
        *axis = normalized_axis(axes[0], n.shape.rank);
        return true;
    };
    // z = x - max(x, axis, keepdims): x, or -1.
    auto shifted = [&](std::int32_t z, int axis) -> std::int32_t {
        if (!is_op(z, "sub", 2) || !node(z).attrs.empty()) return -1;
        const std::int32_t x = node(z).inputs[0], mx = node(z).inputs[1];
        int ax = -1;
        if (!reduces_one_axis(mx, "max", &ax) || ax != axis || node(mx).inputs[0] != x) return -1;
        return x;
    };
    auto floating = [&](std::int32_t v) { return is_floating(node(v).dtype); };

    for (std::size_t i = 0; i < size; ++i) {
        const graph_node& n = g.nodes[i];
        if (n.kind != node_kind::op || n.inputs.size() != 2 || !n.attrs.empty() || !is_floating(n.dtype)) continue;
        const std::int32_t a = n.inputs[0], b = n.inputs[1];
        onnx_fused& f = p.fused[i];
        int axis = -1;
        if (n.op == "div" && is_op(a, "exp", 1) && reduces_one_axis(b, "sum", &axis) && node(b).inputs[0] == a) {
            // softmax: exp(z) / sum(exp(z), axis, keepdims), z = x - max(x, axis, keepdims)
            const std::int32_t x = shifted(node(a).inputs[0], axis);
            if (x >= 0 && node(x).dtype == n.dtype) f = onnx_fused::of(onnx_fused::softmax, {x}, axis);
        } else if (n.op == "sub" && is_op(b, "log", 1) && reduces_one_axis(node(b).inputs[0], "sum", &axis)) {
            // log_softmax: z - log(sum(exp(z), axis, keepdims))
            const std::int32_t s = node(b).inputs[0], e = node(s).inputs[0];
            const std::int32_t x = shifted(a, axis);
            if (x >= 0 && is_op(e, "exp", 1) && node(e).inputs[0] == a && node(x).dtype == n.dtype)
                f = onnx_fused::of(onnx_fused::log_softmax, {x}, axis);
        } else if (n.op == "add") {
            // Gemm: matmul(A, B) + C for matrices A and B, C broadcasting to the product (not the other way)
            for (int side = 0; side < 2 && f.kind == onnx_fused::none; ++side) {
                const std::int32_t mm = side ? b : a, c = side ? a : b;
                if (!is_op(mm, "matmul", 2) || uses[static_cast<std::size_t>(mm)] != 1) continue;
                const graph_node& m = node(mm);
                std::int32_t x = m.inputs[0], y = m.inputs[1];
                if (node(x).shape.rank != 2 || node(y).shape.rank != 2 || node(c).shape.rank < 1 || node(c).shape.rank > 2 ||
                    !(m.shape == n.shape) || m.dtype != n.dtype || node(x).dtype != n.dtype || node(y).dtype != n.dtype ||
                    node(c).dtype != n.dtype || !floating(c))
                    continue;
                // A transposed matrix operand: Gemm's transA/transB read the matrix itself.
                auto untransposed = [&](std::int32_t& v) {
                    const graph_node& t = node(v);
                    if (t.kind != node_kind::op || t.inputs.size() != 1 || t.shape.rank != 2 || !t.dynamic.empty()) return false;
                    if (t.op != "transpose" && t.op != "permute") return false;
                    const std::map<std::string, std::string> at = split_attrs(t.attrs);
                    if (t.op == "permute" && normalized_axis(attr_axes(at, "dims").at(0), 2) != 1) return false;
                    if (t.op == "transpose" && normalized_axis(attr_axis(at, "dim0"), 2) == normalized_axis(attr_axis(at, "dim1"), 2))
                        return false;
                    v = t.inputs[0];
                    return true;
                };
                const bool ta = untransposed(x), tb = untransposed(y);
                f = onnx_fused::of(onnx_fused::gemm, {x, y, c}, 0, ta, tb);
            }
        }
    }
    // mean: sum(x, axes, keepdims) / count, the count the product of the reduced extents (a parameter, so it
    // follows a dynamic extent).
    for (std::size_t i = 0; i < size; ++i) {
        const graph_node& n = g.nodes[i];
        if (n.kind != node_kind::op || n.op != "div" || n.inputs.size() != 1 || !is_floating(n.dtype) ||
            n.params.values.size() != 1 || n.params.float_params != 1 || n.attrs.rfind("operand1=", 0) != 0)
            continue;
        const std::int32_t sv = n.inputs[0];
        if (!is_op(sv, "sum", 1) || uses[static_cast<std::size_t>(sv)] != 1 || node(sv).dtype != n.dtype) continue;
        const graph_node& x = node(node(sv).inputs[0]);
        if (x.shape.rank == 0 || x.dtype != n.dtype) continue;
        const std::map<std::string, std::string> a = split_attrs(node(sv).attrs);
        std::vector<std::int64_t> axes;
        for (int ax : attr_axes(a, "axes")) axes.push_back(normalized_axis(ax, x.shape.rank));
        if (axes.empty())
            for (int k = 0; k < x.shape.rank; ++k) axes.push_back(k);
        double count = 1;
        for (std::int64_t ax : axes) count *= static_cast<double>(x.shape[static_cast<int>(ax)]);
        if (param_number(n.params.values[0]) != count || count == 0) continue;
        onnx_fused f = onnx_fused::of(onnx_fused::reduce_mean, {node(sv).inputs[0]});
        f.axes = std::move(axes);
        f.keepdims = attr_bool(a, "keepdims");
        p.fused[i] = std::move(f);
    }
    // A select of index 0 on a static axis of extent 1: Squeeze.
    for (std::size_t i = 0; i < size; ++i) {
        const graph_node& n = g.nodes[i];
        if (n.kind != node_kind::op || n.op != "select" || n.inputs.size() != 1 || !n.dynamic.empty() ||
            n.params.values.size() != 1 || n.params.values[0] != 0)
            continue;
        const graph_node& x = node(n.inputs[0]);
        const int ax = normalized_axis(attr_axis(split_attrs(n.attrs), "axis"), x.shape.rank);
        if (ax >= 0 && ax < x.shape.rank && x.shape[ax] == 1 && !(p.dynamic_axes[static_cast<std::size_t>(n.inputs[0])] >> ax & 1u))
            p.fused[i] = onnx_fused::of(onnx_fused::squeeze, {n.inputs[0]}, ax);
    }
    // Convolution and pooling, traced as their parts (nn/conv.hpp), from the notes the tracer kept: Conv,
    // ConvTranspose, MaxPool and AveragePool of float32 images (the dtype ONNX Runtime's kernels all take).
    for (const composite_note& c : g.composites) {
        if (c.output < 0 || static_cast<std::size_t>(c.output) >= size || c.inputs.empty()) continue;
        const graph_node& out = node(c.output);
        if (c.op == "batch_norm") {
            // BatchNormalization (inference) of float32 (N, C, ...) with the running statistics; a missing scale or
            // bias is written as ones or zeros of the channels.
            bool fits = out.kind == node_kind::op && out.dtype == dtype::float32 && out.shape.rank >= 2 && c.inputs.size() >= 3;
            for (std::int32_t v : c.inputs) fits = fits && v >= 0 && v < c.output && node(v).dtype == dtype::float32;
            if (!fits || !(node(c.inputs[0]).shape == out.shape)) continue;
            onnx_fused f = onnx_fused::of(onnx_fused::batch_norm, c.inputs);
            f.attrs = c.attrs;
            p.fused[static_cast<std::size_t>(c.output)] = std::move(f);
            continue;
        }
        if (c.op == "layer_norm") {
            // LayerNormalization (opset 17) of float32 over static trailing axes: the scale, when the note has none,
            // is written as ones of the normalized shape, which must then be the same for every call.
            bool fits = out.kind == node_kind::op && out.dtype == dtype::float32;
            for (std::int32_t v : c.inputs) fits = fits && v >= 0 && v < c.output && node(v).dtype == dtype::float32;
            if (!fits) continue;
            const std::map<std::string, std::string> w = split_attrs(c.attrs);
            const std::int64_t axis = attr_int(w, "axis");
            const graph_node& x = node(c.inputs[0]);
            if (axis < 0 || axis >= x.shape.rank || !(x.shape == out.shape)) continue;
            if (p.dynamic_axes[static_cast<std::size_t>(c.inputs[0])] >> axis) continue;  // (a normalized axis may change)
            onnx_fused f = onnx_fused::of(onnx_fused::layer_norm, c.inputs, static_cast<int>(axis));
            f.attrs = c.attrs;
            p.fused[static_cast<std::size_t>(c.output)] = std::move(f);
            continue;
        }
        bool fits = out.kind == node_kind::op && out.dtype == dtype::float32 && out.shape.rank == 4;
        for (std::int32_t v : c.inputs) fits = fits && v >= 0 && v < c.output && node(v).dtype == dtype::float32;
        if (!fits || node(c.inputs[0]).shape.rank != 4) continue;
        const onnx_fused::kind_t k = c.op == "conv2d" ? onnx_fused::conv : c.op == "conv_transpose2d" ? onnx_fused::conv_transpose
                                   : c.op == "max_pool2d" ? onnx_fused::max_pool
                                   : c.op == "avg_pool2d" ? onnx_fused::avg_pool : onnx_fused::none;
        if (k == onnx_fused::none) continue;
        const std::map<std::string, std::string> w = split_attrs(c.attrs);
        if (k == onnx_fused::max_pool && attr_bool(w, "ceil_mode")) {
            // ONNX's ceil_mode formula has no exception for a last window that would start in the end padding
            // (PyTorch's and kiln's drop it): where the two differ, the parts are written instead.
            const std::vector<std::int64_t> kr = attr_ints(w, "kernel"), st = attr_ints(w, "stride"), pd = attr_ints(w, "pads"),
                                            dl = attr_ints(w, "dilation");
            bool same = true;
            for (int i = 0; i < 2; ++i) {
                const std::int64_t room = node(c.inputs[0]).shape[2 + i] + pd[2 * i] + pd[2 * i + 1] - (dl[i] * (kr[i] - 1) + 1);
                same = same && room >= 0 && (room + st[i] - 1) / st[i] + 1 == out.shape[2 + i];
            }
            if (!same) continue;
        }
        onnx_fused f = onnx_fused::of(k, c.inputs);
        f.attrs = c.attrs;
        p.fused[static_cast<std::size_t>(c.output)] = std::move(f);
    }
    // The values the outputs need, from the last node back.
    p.live.assign(size, false);
    for (std::int32_t v : g.outputs) p.live[static_cast<std::size_t>(v)] = true;
    for (std::size_t i = size; i-- > 0;) {
        if (!p.live[i]) continue;
        const onnx_fused& f = p.fused[i];
        for (std::int32_t v : f.kind == onnx_fused::none ? g.nodes[i].inputs : f.inputs) p.live[static_cast<std::size_t>(v)] = true;
    }
    return p;
}

}  // namespace kiln::detail
