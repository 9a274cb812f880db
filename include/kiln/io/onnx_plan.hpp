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

inline std::uint32_t all_axes(int rank) { return rank >= 32 ? ~0u : (1u << rank) - 1u; }
inline int normalized_axis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// Bit j of the result: bit j of `m` for a value of rank `from` aligned at the right with one of rank `to`.
inline std::uint32_t aligned_axes(std::uint32_t m, int from, int to) {
    std::uint32_t out = 0;
    for (int j = 0; j < to; ++j) {
        const int k = j - (to - from);
        if (k >= 0 && (m >> k & 1u)) out |= 1u << j;
    }
    return out;
}

// For a permute or transpose node over an operand of rank `ri`: the operand's axis that each result axis is.
inline std::vector<int> permuted_from(const std::string& op, const std::map<std::string, std::string>& a, int ri) {
    std::vector<int> from(static_cast<std::size_t>(std::max(ri, 0)));
    for (int k = 0; k < ri; ++k) from[static_cast<std::size_t>(k)] = k;
    if (op == "permute") {
        const std::vector<int> d = attr_axes(a, "dims");
        for (std::size_t k = 0; k < d.size() && k < from.size(); ++k) from[k] = normalized_axis(d[k], ri);
    } else {
        std::swap(from[static_cast<std::size_t>(normalized_axis(attr_axis(a, "dim0"), ri))],
                  from[static_cast<std::size_t>(normalized_axis(attr_axis(a, "dim1"), ri))]);
    }
    return from;
}

inline bool is_reduction_op(const std::string& op) {
    return op == "sum" || op == "prod" || op == "max" || op == "min" || op == "argmax" || op == "argmin";
}

// For a reduction node over an operand of rank `ri`: the result axis of each operand axis, -1 where it is gone.
inline std::vector<int> reduction_kept_axes(const std::string& op, const std::map<std::string, std::string>& a, int ri) {
    std::uint32_t reduced = 0;
    if (op == "argmax" || op == "argmin") {
        reduced = 1u << normalized_axis(attr_axis(a, "axis"), ri);
    } else {
        for (int ax : attr_axes(a, "axes")) reduced |= 1u << normalized_axis(ax, ri);
        if (reduced == 0) reduced = all_axes(ri);
    }
    const bool keep = attr_bool(a, "keepdims");
    std::vector<int> to(static_cast<std::size_t>(std::max(ri, 0)), -1);
    for (int k = 0, j = 0; k < ri; ++k) {
        const bool gone = reduced >> k & 1u;
        if (!gone) to[static_cast<std::size_t>(k)] = j;
        if (keep || !gone) ++j;
    }
    return to;
}

template <int N = 0>
std::vector<std::uint32_t> onnx_dynamic_axes(const function_graph& g, const std::vector<spec>& specs) {
    std::vector<std::uint32_t> m(g.nodes.size(), 0);
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        const int r = n.shape.rank;
        auto in = [&](std::size_t k) -> const graph_node& { return g.nodes[static_cast<std::size_t>(n.inputs[k])]; };
        auto mask = [&](std::size_t k) { return m[static_cast<std::size_t>(n.inputs[k])]; };
        std::uint32_t out = all_axes(r);  // what is not worked out below may change
        if (n.kind == node_kind::argument) {
            out = 0;
            const spec& s = specs[static_cast<std::size_t>(n.argument)];
            for (std::size_t a = 0; a < s.shape.size(); ++a)
                if (s.shape[a] == dyn) out |= 1u << a;
        } else if (n.kind != node_kind::op) {
            out = 0;  // constants, variables: their shapes are fixed
        } else if (!n.dynamic.empty() && (n.op == "reshape" || n.op == "broadcast_to" || n.op == "full")) {
            // Parameters are the result's extents (a fill's value last): the axes whose extent follows one.
            out = 0;
            for (const dynamic_param& dp : n.dynamic)
                if (static_cast<int>(dp.index) < r) out |= 1u << dp.index;
        } else if (n.dynamic.empty()) {  // (a parameter that follows an extent: every axis counts as dynamic)
            const std::map<std::string, std::string> a = split_attrs(n.attrs);
            const std::string& op = n.op;
            const op_schema* s = find_op_or_null<N>(op);
            if (op == "reshape" || op == "broadcast_to" || op == "full") {
                out = 0;  // every extent is a parameter, and none follows an extent
            } else if (op == "im2col") {
                const std::uint32_t x = mask(0);  // (N, C, H, W) -> (N, C, K, out_h, out_w)
                out = (x & 3u) | ((x >> 2 & 3u) << 3);
            } else if (op == "cast" || op == "copy" || op == "slice" || op == "cumsum" || op == "cumprod") {
                out = mask(0);  // (a slice "to the end" of a dynamic axis keeps it dynamic)
            } else if (op == "col2im" && n.inputs.size() == 2) {
                out = mask(1);  // (the image's shape is its second operand's)
            } else if (op == "index_select" && n.inputs.size() == 2) {
                const int ax = normalized_axis(attr_axis(a, "axis"), in(0).shape.rank), ir = in(1).shape.rank;
                const std::uint32_t low = all_axes(ax);
                out = (mask(0) & low) | (mask(1) << ax) | ((mask(0) >> (ax + 1)) << (ax + ir));
            } else if (op == "concat") {
                out = 0;
                for (std::size_t k = 0; k < n.inputs.size(); ++k) out |= mask(k);
            } else if (op == "unsqueeze") {
                const int ax = normalized_axis(attr_axis(a, "axis"), r);
                const std::uint32_t x = mask(0), low = all_axes(ax);
                out = (x & low) | ((x & ~low) << 1);
            } else if (op == "select") {
                const int ax = normalized_axis(attr_axis(a, "axis"), in(0).shape.rank);
                const std::uint32_t x = mask(0), low = all_axes(ax);
                out = (x & low) | ((x >> 1) & ~low);
            } else if (op == "permute" || op == "transpose") {
                const int ri = in(0).shape.rank;
                const std::vector<int> from = permuted_from(op, a, ri);
                out = 0;
                for (int k = 0; k < ri; ++k)
                    if (mask(0) >> from[static_cast<std::size_t>(k)] & 1u) out |= 1u << k;
            } else if (is_reduction_op(op)) {
                const std::vector<int> to = reduction_kept_axes(op, a, in(0).shape.rank);
                out = 0;
                for (std::size_t k = 0; k < to.size(); ++k)
                    if (to[k] >= 0 && (mask(0) >> k & 1u)) out |= 1u << to[k];
            } else if (op == "matmul" && in(0).shape.rank >= 2 && in(1).shape.rank >= 2) {
                const int ra = in(0).shape.rank, rb = in(1).shape.rank;
                const std::uint32_t batch = all_axes(r - 2);
                out = ((aligned_axes(mask(0), ra, r) | aligned_axes(mask(1), rb, r)) & batch);
                if (mask(0) >> (ra - 2) & 1u) out |= 1u << (r - 2);
                if (mask(1) >> (rb - 1) & 1u) out |= 1u << (r - 1);
            } else if (s && (s->family == op_family::elementwise || s->family == op_family::activation) &&
                       s->min_inputs == s->max_inputs) {
                out = 0;
                for (std::size_t k = 0; k < n.inputs.size(); ++k) out |= aligned_axes(mask(k), in(k).shape.rank, r);
            }
        }
        m[i] = out & all_axes(r);
    }
    return m;
}

// Which dynamic input extent each axis of each value equals at every call (-1: static, or not worked out). Worked out
// through the ops that carry an extent whole: arguments, casts and copies, elementwise ops (an axis that some operand
// has at a static extent above 1 is static, one that operands give two different extents is left out), matrix
// products, reductions, axis insertion, selection and permutation, the axes a slice or a concat leaves alone, and
// the extents of a reshape, broadcast or fill that a parameter gives as the extent itself.
// `same_dim` (when not empty) gives each dynamic input extent the first one it is equal to (extents that share a name):
// an axis is said to equal that one.
template <int N = 0>
std::vector<std::vector<int>> onnx_axis_dims(const function_graph& g, const std::vector<spec>& specs,
                                             const std::vector<std::uint32_t>& dynamic, const std::vector<int>& same_dim) {
    std::vector<std::vector<int>> m(g.nodes.size());
    auto first_equal = [&](int d) { return d >= 0 && static_cast<std::size_t>(d) < same_dim.size() ? same_dim[static_cast<std::size_t>(d)] : d; };
    int first_dim = 0;
    std::vector<int> first_dim_of(specs.size(), 0);  // the number of the argument's first dynamic extent
    for (std::size_t k = 0; k < specs.size(); ++k) {
        first_dim_of[k] = first_dim;
        first_dim += static_cast<int>(std::count(specs[k].shape.begin(), specs[k].shape.end(), dyn));
    }
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        const int r = n.shape.rank;
        std::vector<int> out(static_cast<std::size_t>(std::max(r, 0)), -1);
        auto in = [&](std::size_t k) -> const graph_node& { return g.nodes[static_cast<std::size_t>(n.inputs[k])]; };
        auto src = [&](std::size_t k) -> const std::vector<int>& { return m[static_cast<std::size_t>(n.inputs[k])]; };
        // Output axis j of operands broadcast together (aligned at the right), over the operands in `ks`.
        auto broadcast = [&](int j, const std::vector<std::size_t>& ks) {
            int found = -1;
            for (std::size_t k : ks) {
                const int rk = in(k).shape.rank, a = j - (r - rk);
                if (a < 0) continue;
                const bool is_dynamic = dynamic[static_cast<std::size_t>(n.inputs[k])] >> a & 1u;
                if (!is_dynamic && in(k).shape[a] == 1) continue;  // (broadcast)
                const int d = is_dynamic ? src(k)[static_cast<std::size_t>(a)] : -1;
                if (d < 0 || (found >= 0 && found != d)) return -1;
                found = d;
            }
            return found;
        };
        if (n.kind == node_kind::argument) {
            const spec& s = specs[static_cast<std::size_t>(n.argument)];
            int d = first_dim_of[static_cast<std::size_t>(n.argument)];
            for (std::size_t a = 0; a < s.shape.size() && a < out.size(); ++a)
                if (s.shape[a] == dyn) out[a] = first_equal(d++);
        } else if (n.kind == node_kind::op && !n.dynamic.empty()) {
            if (n.op == "reshape" || n.op == "broadcast_to" || n.op == "full")
                for (const dynamic_param& dp : n.dynamic)
                    if (static_cast<int>(dp.index) < r && dp.scale == 1 && dp.offset == 0)
                        out[dp.index] = first_equal(dp.dim);
        } else if (n.kind == node_kind::op) {
            const std::map<std::string, std::string> a = split_attrs(n.attrs);
            const std::string& op = n.op;
            const op_schema* s = find_op_or_null<N>(op);
            std::vector<std::size_t> all(n.inputs.size());
            for (std::size_t k = 0; k < all.size(); ++k) all[k] = k;
            if (op == "cast" || op == "copy" || op == "cumsum" || op == "cumprod") {
                out = src(0);
            } else if (op == "col2im" && n.inputs.size() == 2) {  // (windows, an operand of the image's shape)
                out = src(1);
            } else if (op == "index_select" && n.inputs.size() == 2) {  // x's axes before `axis`, the index's, x's after
                const int ax = normalized_axis(attr_axis(a, "axis"), in(0).shape.rank), ir = in(1).shape.rank;
                for (int j = 0; j < r; ++j)
                    out[static_cast<std::size_t>(j)] = j < ax ? src(0)[static_cast<std::size_t>(j)]
                                                       : j < ax + ir ? src(1)[static_cast<std::size_t>(j - ax)]
                                                                     : src(0)[static_cast<std::size_t>(j - ir + 1)];
            } else if (op == "im2col") {  // (N, C, H, W) -> (N, C, K, out_h, out_w)
                for (std::size_t j = 0; j < 2 && j < out.size() && j < src(0).size(); ++j) out[j] = src(0)[j];
            } else if (op == "slice" || op == "concat") {
                const int ax = normalized_axis(attr_axis(a, "axis"), r);
                for (int j = 0; j < r; ++j)
                    if (j != ax) out[static_cast<std::size_t>(j)] = broadcast(j, all);
            } else if (op == "unsqueeze") {
                const int ax = normalized_axis(attr_axis(a, "axis"), r);
                for (int j = 0; j < r; ++j)
                    if (j != ax) out[static_cast<std::size_t>(j)] = src(0)[static_cast<std::size_t>(j < ax ? j : j - 1)];
            } else if (op == "select") {
                const int ax = normalized_axis(attr_axis(a, "axis"), in(0).shape.rank);
                for (int j = 0; j < r; ++j) out[static_cast<std::size_t>(j)] = src(0)[static_cast<std::size_t>(j < ax ? j : j + 1)];
            } else if (op == "permute" || op == "transpose") {
                const std::vector<int> from = permuted_from(op, a, in(0).shape.rank);
                for (std::size_t j = 0; j < out.size() && j < from.size(); ++j) out[j] = src(0)[static_cast<std::size_t>(from[j])];
            } else if (is_reduction_op(op)) {
                const std::vector<int> to = reduction_kept_axes(op, a, in(0).shape.rank);
                for (std::size_t k = 0; k < to.size(); ++k)
                    if (to[k] >= 0 && to[k] < r) out[static_cast<std::size_t>(to[k])] = src(0)[k];
            } else if (op == "matmul" && in(0).shape.rank >= 2 && in(1).shape.rank >= 2) {
                for (int j = 0; j < r - 2; ++j) out[static_cast<std::size_t>(j)] = broadcast(j, all);
                out[static_cast<std::size_t>(r - 2)] = src(0)[static_cast<std::size_t>(in(0).shape.rank - 2)];
                out[static_cast<std::size_t>(r - 1)] = src(1)[static_cast<std::size_t>(in(1).shape.rank - 1)];
            } else if (s && (s->family == op_family::elementwise || s->family == op_family::activation) &&
                       s->min_inputs == s->max_inputs) {
                for (int j = 0; j < r; ++j) out[static_cast<std::size_t>(j)] = broadcast(j, all);
            }
        }
        // (an axis that is not dynamic equals no input extent)
        for (int j = 0; j < r; ++j)
            if (!(dynamic[i] >> j & 1u)) out[static_cast<std::size_t>(j)] = -1;
        m[i] = std::move(out);
    }
    return m;
}

// `same_dim`: as onnx_axis_dims takes it.
template <int N = 0>
onnx_plan make_onnx_plan(const function_graph& g, const std::vector<spec>& specs, const std::vector<int>& same_dim = {}) {
    onnx_plan p;
    const std::size_t size = g.nodes.size();
    p.dynamic_axes = onnx_dynamic_axes<N>(g, specs);
    p.axis_dims = onnx_axis_dims<N>(g, specs, p.dynamic_axes, same_dim);
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
