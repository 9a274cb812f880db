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
// tensors are initializers. An op with no mapping is a kiln::value_error naming it.
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "function_file.hpp"
#include "onnx_plan.hpp"
#include "onnx_proto.hpp"

namespace kiln {

namespace detail {

// Ops that ONNX has no operator for, as ONNX operators that compute what kiln computes, special values included.
inline std::string onnx_float_composite(onnx_builder& b, const std::string& op, const std::vector<std::string>& c, dtype cd) {
    auto k = [&](double v) { return b.initializer(full(dims{}, v, cd), "n"); };
    auto where = [&](const std::string& p, const std::string& x, const std::string& y) { return b.op1("Where", {p, x, y}); };
    auto eq = [&](const std::string& x, const std::string& y) { return b.op1("Equal", {x, y}); };
    auto less = [&](const std::string& x, const std::string& y) { return b.op1("Less", {x, y}); };
    // The sign bit: x < 0, or x is -0 (1 / -0 is -inf).
    auto signbit = [&](const std::string& x) {
        return b.op1("Or", {less(x, k(0)), b.op1("And", {eq(x, k(0)), less(b.op1("Div", {k(1), x}), k(0))})});
    };
    const std::string& x = c[0];
    if (op == "log1p") {
        // u = 1 + x; log(u) * x / (u - 1), exact where u rounds to 1 (x itself, -0 kept) and at +inf.
        const std::string u = b.op1("Add", {k(1), x});
        const std::string q = b.op1("Mul", {b.op1("Log", {u}), b.op1("Div", {x, b.op1("Sub", {u, k(1)})})});
        const std::string pos_inf = b.op1("IsInf", {x}, {onnx_builder::int_attr("detect_negative", 0)});
        return where(b.op1("Or", {eq(u, k(1)), pos_inf}), where(eq(u, k(1)), x, u), q);
    }
    if (op == "expm1") {
        // u = exp(x); (u - 1) * x / log(u), exact where u rounds to 1 (x itself), to 0 (-1) and at +inf.
        const std::string u = b.op1("Exp", {x}), um1 = b.op1("Sub", {u, k(1)});
        const std::string q = b.op1("Mul", {um1, b.op1("Div", {x, b.op1("Log", {u})})});
        return where(eq(u, k(1)), x, where(b.op1("Or", {eq(um1, k(-1)), b.op1("IsInf", {u})}), um1, q));
    }
    if (op == "atan2") {
        // atan(y / x) moved by pi by the signs of x and y; two infinities as their signs, two zeros as y (the
        // signed zero) before the move, as IEEE's atan2.
        const std::string y0 = c[0], x0 = c[1];
        const std::string both_inf = b.op1("And", {b.op1("IsInf", {y0}), b.op1("IsInf", {x0})});
        const std::string y = where(both_inf, b.op1("Sign", {y0}), y0), xx = where(both_inf, b.op1("Sign", {x0}), x0);
        const std::string both_zero = b.op1("And", {eq(y, k(0)), eq(xx, k(0))});
        const std::string r = where(both_zero, y, b.op1("Atan", {b.op1("Div", {y, xx})}));
        const std::string pi = k(3.14159265358979323846);
        return where(signbit(xx), where(signbit(y), b.op1("Sub", {r, pi}), b.op1("Add", {r, pi})), r);
    }
    // floor_divide and remainder of floating numbers, from C's fmod (ONNX's Mod with fmod=1), as kiln computes them.
    const std::string a = c[0], d = c[1];
    const std::string mod = b.op1("Mod", {a, d}, {onnx_builder::int_attr("fmod", 1)});
    const std::string mod_nonzero = b.op1("Not", {eq(mod, k(0))});
    const std::string other_sign = b.op1("Xor", {less(mod, k(0)), less(d, k(0))});
    if (op == "remainder") {
        // A nonzero remainder takes the divisor's sign (r + d); a zero one is 0 with the divisor's sign.
        const std::string signed_zero = where(signbit(d), k(-0.0), k(0));
        return where(mod_nonzero, where(other_sign, b.op1("Add", {mod, d}), mod), signed_zero);
    }
    const std::string q = b.op1("Div", {a, d});
    std::string div = b.op1("Div", {b.op1("Sub", {a, mod}), d});
    div = where(b.op1("And", {mod_nonzero, other_sign}), b.op1("Sub", {div, k(1)}), div);
    std::string fl = b.op1("Floor", {div});
    fl = where(b.op1("Greater", {b.op1("Sub", {div, fl}), k(0.5)}), b.op1("Add", {fl, k(1)}), fl);
    const std::string signed_zero = where(signbit(q), k(-0.0), k(0));
    return where(eq(d, k(0)), q, where(eq(div, k(0)), signed_zero, fl));
}

// floor_divide and remainder of integers: ONNX's Div truncates and its Mod (fmod=0) takes the divisor's sign; a
// divisor of 0 (and of -1, which overflows for the smallest integer) is replaced before dividing, and the result is
// kiln's for those divisors (0, and -a or 0).
inline std::string onnx_integer_division(onnx_builder& b, const std::string& op, const std::vector<std::string>& c, dtype cd) {
    auto k = [&](double v) { return b.initializer(full(dims{}, v, cd), "n"); };
    auto eq = [&](const std::string& x, const std::string& y) { return b.op1("Equal", {x, y}); };
    const std::string a = c[0], d = c[1];
    const std::string zero = eq(d, k(0)), minus_one = eq(d, k(-1));
    const std::string safe = b.op1("Where", {b.op1("Or", {zero, minus_one}), k(1), d});
    const std::string mod = b.op1("Mod", {a, safe}, {onnx_builder::int_attr("fmod", 0)});
    if (op == "remainder") return b.op1("Where", {b.op1("Or", {zero, minus_one}), k(0), mod});
    std::string q = b.op1("Div", {a, safe});
    const std::string adjust = b.op1("And", {b.op1("Not", {eq(mod, k(0))}),
                                             b.op1("Xor", {b.op1("Less", {a, k(0)}), b.op1("Less", {d, k(0)})})});
    q = b.op1("Where", {adjust, b.op1("Sub", {q, k(1)}), q});
    return b.op1("Where", {zero, k(0), b.op1("Where", {minus_one, b.op1("Neg", {a}), q})});
}

template <int N = 0>
std::string onnx_model_bytes(const executable& exe, const std::vector<spec>& specs, const std::string& model_name,
                             const char* entry) {
    const function_graph& g = exe.graph;
    onnx_builder b;
    std::vector<std::string> value(g.nodes.size());
    // Dynamic dimensions: their names (the spec's name where it gives one; extents that were equal when traced
    // share one, since the trace assumed them equal; "dim<k>" otherwise) and, when a parameter needs one, its value
    // computed from the input's shape.
    std::vector<std::string> dim_name;
    std::vector<std::pair<std::size_t, int>> dim_at;  // (argument, axis)
    std::set<std::string> taken;
    for (std::size_t k = 0; k < specs.size(); ++k)
        for (std::size_t i = 0; i < specs[k].shape.size(); ++i)
            if (specs[k].shape[i] == dyn) {
                dim_name.push_back(specs[k].name_of(i));
                dim_at.emplace_back(k, static_cast<int>(i));
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
    std::vector<std::string> input_name(specs.size());
    for (std::size_t k = 0; k < specs.size(); ++k) input_name[k] = "input_" + std::to_string(k);
    std::map<int, std::string> extent_value;  // dynamic dim -> a 1-element int64 tensor
    auto extent = [&](int d) -> std::string {
        auto it = extent_value.find(d);
        if (it != extent_value.end()) return it->second;
        const auto [arg, axis] = dim_at[static_cast<std::size_t>(d)];
        const std::string shape = b.op1("Shape", {input_name[arg]});
        const std::string e = b.op1("Gather", {shape, b.int64s({axis})}, {onnx_builder::int_attr("axis", 0)});
        return extent_value[d] = e;
    };
    auto unsupported = [&](std::size_t i, const std::string& why) {
        const graph_node& n = g.nodes[i];
        throw value_error(error_prefix("value_error", entry) + "node %" + std::to_string(i) + " ('" + n.op + "'" +
                          (n.attrs.empty() ? "" : " " + n.attrs) + ") cannot be exported to ONNX: " + why);
    };
    // Parameters [first, first + count) of node i as a 1-D int64 tensor (computed where they follow an extent).
    auto params_tensor = [&](std::size_t i, std::size_t first, std::size_t count) -> std::string {
        const graph_node& n = g.nodes[i];
        bool any_dynamic = false;
        for (const dynamic_param& d : n.dynamic) any_dynamic = any_dynamic || (d.index >= first && d.index < first + count);
        std::vector<std::int64_t> fixed(n.params.values.begin() + static_cast<std::ptrdiff_t>(first),
                                        n.params.values.begin() + static_cast<std::ptrdiff_t>(first + count));
        if (!any_dynamic) return b.int64s(fixed);
        std::vector<std::string> parts;
        for (std::size_t j = first; j < first + count; ++j) {
            const dynamic_param* dp = nullptr;
            for (const dynamic_param& d : n.dynamic)
                if (d.index == j) dp = &d;
            if (!dp) {
                parts.push_back(b.int64s({n.params.values[j]}));
                continue;
            }
            std::string v = extent(dp->dim);
            if (dp->scale != 1) v = b.op1("Mul", {v, b.int64s({dp->scale})});
            if (dp->offset != 0) v = b.op1("Add", {v, b.int64s({dp->offset})});
            parts.push_back(v);
        }
        return parts.size() == 1 ? parts[0] : b.op1("Concat", parts, {onnx_builder::int_attr("axis", 0)});
    };
    auto scalar_param = [&](std::size_t i, std::size_t j) -> std::string {
        // (Slice and Gather take 1-D starts and a rank-0 index: a 1-D one here, reshaped where needed.)
        return params_tensor(i, j, 1);
    };

    std::vector<int> same_dim(dim_name.size());  // (the first dynamic extent of each one's name)
    for (std::size_t d = 0; d < dim_name.size(); ++d)
        same_dim[d] = static_cast<int>(std::find(dim_name.begin(), dim_name.end(), dim_name[d]) - dim_name.begin());
    const onnx_plan plan = make_onnx_plan<N>(g, specs, same_dim);
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        if (!plan.live[i] && n.kind != node_kind::argument && n.kind != node_kind::effect) continue;
        switch (n.kind) {
            case node_kind::argument: value[i] = input_name[static_cast<std::size_t>(n.argument)]; continue;
            case node_kind::constant:
            case node_kind::variable: value[i] = b.initializer(n.value, "w"); continue;
            case node_kind::effect:
                throw value_error(error_prefix("value_error", entry) + "the function writes into tensors (node %" +
                                  std::to_string(i) + ", '" + n.op + "'): only inference functions can be exported");
            case node_kind::op: break;
        }
        std::vector<std::string> in;
        std::vector<dtype> in_dtype;
        for (std::int32_t v : n.inputs) {
            in.push_back(value[static_cast<std::size_t>(v)]);
            in_dtype.push_back(g.nodes[static_cast<std::size_t>(v)].dtype);
        }
        const std::map<std::string, std::string> a = split_attrs(n.attrs);
        const std::string& op = n.op;
        auto in_rank = [&](std::size_t k) { return g.nodes[static_cast<std::size_t>(n.inputs[k])].shape.rank; };
        std::string out;
        const onnx_fused& f = plan.fused[i];
        auto fused_in = [&](std::size_t k) { return value[static_cast<std::size_t>(f.inputs[k])]; };
        if (f.kind == onnx_fused::softmax || f.kind == onnx_fused::log_softmax) {
            out = b.op1(f.kind == onnx_fused::softmax ? "Softmax" : "LogSoftmax", {fused_in(0)}, {onnx_builder::int_attr("axis", f.axis)});
        } else if (f.kind == onnx_fused::gemm) {
            out = b.op1("Gemm", {fused_in(0), fused_in(1), fused_in(2)},
                        {onnx_builder::int_attr("transA", f.trans_a), onnx_builder::int_attr("transB", f.trans_b)});
        } else if (f.kind == onnx_fused::reduce_mean) {
            out = b.op1("ReduceMean", {fused_in(0)}, {onnx_builder::ints_attr("axes", f.axes), onnx_builder::int_attr("keepdims", f.keepdims)});
        } else if (f.kind == onnx_fused::conv || f.kind == onnx_fused::conv_transpose || f.kind == onnx_fused::max_pool ||
                   f.kind == onnx_fused::avg_pool) {
            // The note's pads are top, bottom, left, right; ONNX lists the starts, then the ends.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const std::vector<std::int64_t> p4 = attr_ints(w, "pads");
            std::vector<onnx_builder::attr> at = {onnx_builder::ints_attr("kernel_shape", attr_ints(w, "kernel")),
                                                  onnx_builder::ints_attr("strides", attr_ints(w, "stride")),
                                                  onnx_builder::ints_attr("pads", {p4.at(0), p4.at(2), p4.at(1), p4.at(3)})};
            std::vector<std::string> ins;
            for (std::size_t k = 0; k < f.inputs.size(); ++k) ins.push_back(fused_in(k));
            if (f.kind == onnx_fused::conv) {
                at.push_back(onnx_builder::ints_attr("dilations", attr_ints(w, "dilation")));
                at.push_back(onnx_builder::int_attr("group", attr_int(w, "groups")));
                out = b.op1("Conv", ins, at);
            } else if (f.kind == onnx_fused::conv_transpose) {
                at.push_back(onnx_builder::ints_attr("dilations", attr_ints(w, "dilation")));
                at.push_back(onnx_builder::int_attr("group", attr_int(w, "groups")));
                at.push_back(onnx_builder::ints_attr("output_padding", attr_ints(w, "output_padding")));
                out = b.op1("ConvTranspose", ins, at);
            } else if (f.kind == onnx_fused::max_pool) {
                at.push_back(onnx_builder::ints_attr("dilations", attr_ints(w, "dilation")));
                at.push_back(onnx_builder::int_attr("ceil_mode", attr_bool(w, "ceil_mode") ? 1 : 0));
                out = b.op1("MaxPool", ins, at);
            } else {
                at.push_back(onnx_builder::int_attr("count_include_pad", attr_bool(w, "count_include_pad") ? 1 : 0));
                out = b.op1("AveragePool", ins, at);
            }
        } else if (f.kind == onnx_fused::layer_norm) {
            // Inputs X, Scale, B: the note lists x, then the weight and the bias that it has.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const bool scale = attr_bool(w, "scale"), bias = attr_bool(w, "bias");
            std::vector<std::string> ins{fused_in(0)};
            if (scale) {
                ins.push_back(fused_in(1));
            } else {
                const graph_node& x = g.nodes[static_cast<std::size_t>(f.inputs[0])];
                std::vector<std::int64_t> normalized;
                for (int k = f.axis; k < x.shape.rank; ++k) normalized.push_back(x.shape[k]);
                const std::string one = onnx_tensor("value", full(dims{1}, 1.0, dtype::float32));
                ins.push_back(b.op1("ConstantOfShape", {b.int64s(normalized)}, {onnx_builder::tensor_attr("value", one)}));
            }
            if (bias) ins.push_back(fused_in(scale ? 2 : 1));
            out = b.op1("LayerNormalization", ins,
                        {onnx_builder::int_attr("axis", f.axis),
                         onnx_builder::float_attr("epsilon", static_cast<float>(attr_number(w, "epsilon")))});
        } else if (f.kind == onnx_fused::batch_norm) {
            // Inputs X, scale, B, mean, var: the note lists x, the running mean and variance, then the weight and the
            // bias that it has.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const bool scale = attr_bool(w, "scale"), bias = attr_bool(w, "bias");
            const std::int64_t channels = g.nodes[static_cast<std::size_t>(f.inputs[0])].shape[1];
            auto filled = [&](double v) {
                const std::string t = onnx_tensor("value", full(dims{1}, v, dtype::float32));
                return b.op1("ConstantOfShape", {b.int64s({channels})}, {onnx_builder::tensor_attr("value", t)});
            };
            const std::string sc = scale ? fused_in(3) : filled(1.0), sh = bias ? fused_in(scale ? 4 : 3) : filled(0.0);
            out = b.op1("BatchNormalization", {fused_in(0), sc, sh, fused_in(1), fused_in(2)},
                        {onnx_builder::float_attr("epsilon", static_cast<float>(attr_number(w, "epsilon")))});
        } else if (f.kind == onnx_fused::squeeze) {
            out = b.op1("Squeeze", {fused_in(0), b.int64s({f.axis})});
        } else if (op == "matmul") {
            out = b.op1("MatMul", {b.cast(in[0], in_dtype[0], n.dtype), b.cast(in[1], in_dtype[1], n.dtype)});
        } else if (op == "concat") {
            std::vector<std::string> parts;
            for (std::size_t k = 0; k < in.size(); ++k) parts.push_back(b.cast(in[k], in_dtype[k], n.dtype));
            out = b.op1("Concat", parts, {onnx_builder::int_attr("axis", attr_axis(a, "axis"))});
        } else if (op == "copy") {
            out = b.op1("Identity", {in[0]});
        } else if (op == "cast") {
            out = b.cast(in[0], in_dtype[0], n.dtype);
            if (out == in[0]) out = b.op1("Identity", {in[0]});
        } else if (op == "sum" || op == "prod" || op == "max" || op == "min") {
            std::vector<std::int64_t> axes;
            for (int ax : attr_axes(a, "axes")) axes.push_back(ax);
            if (axes.empty())
                for (int k = 0; k < in_rank(0); ++k) axes.push_back(k);
            const std::int64_t keep = attr_bool(a, "keepdims") ? 1 : 0;
            const bool boolean = n.dtype == dtype::boolean;  // (max and min of bools: ONNX reduces numbers only)
            const std::string x = boolean ? b.cast(in[0], in_dtype[0], dtype::int32) : b.cast(in[0], in_dtype[0], n.dtype);
            if (axes.empty()) out = b.op1("Identity", {x});  // (a rank-0 operand)
            else if (op == "sum") out = b.op1("ReduceSum", {x, b.int64s(axes)}, {onnx_builder::int_attr("keepdims", keep)});
            else
                out = b.op1(op == "prod" ? "ReduceProd" : op == "max" ? "ReduceMax" : "ReduceMin", {x},
                            {onnx_builder::ints_attr("axes", axes), onnx_builder::int_attr("keepdims", keep)});
            if (boolean) out = b.cast(out, dtype::int32, dtype::boolean);
        } else if (op == "cumsum") {
            // ONNX's CumSum, with kiln's result dtype (int64 for integers and bools) and a rank-0 axis.
            tensor axis(dtype::int64, dims{});
            axis.data<std::int64_t>()[0] = attr_axis(a, "axis");
            out = b.op1("CumSum", {b.cast(in[0], in_dtype[0], n.dtype), b.initializer(axis, "axis")},
                        {onnx_builder::int_attr("reverse", attr_bool(a, "reverse") ? 1 : 0)});
        } else if (op == "argmax" || op == "argmin") {
            const std::vector<onnx_builder::attr> at = {onnx_builder::int_attr("axis", attr_axis(a, "axis")),
                                                        onnx_builder::int_attr("keepdims", attr_bool(a, "keepdims"))};
            const std::string x = in_dtype[0] == dtype::boolean ? b.cast(in[0], dtype::boolean, dtype::int32) : in[0];
            out = b.op1(op == "argmax" ? "ArgMax" : "ArgMin", {x}, at);
            if (is_floating(in_dtype[0])) {
                // As NumPy and kiln: the first NaN wins (ONNX leaves NaN to the runtime).
                const std::string nan = b.cast(b.op1("IsNaN", {x}), dtype::boolean, dtype::int32);
                const std::string any = b.op1("ReduceMax", {nan}, {onnx_builder::ints_attr("axes", {attr_axis(a, "axis")}),
                                                                   onnx_builder::int_attr("keepdims", attr_bool(a, "keepdims"))});
                out = b.op1("Where", {b.cast(any, dtype::int32, dtype::boolean), b.op1("ArgMax", {nan}, at), out});
            }
        } else if (op == "reshape") {
            out = b.op1("Reshape", {in[0], params_tensor(i, 0, n.params.values.size())}, {onnx_builder::int_attr("allowzero", 1)});
        } else if (op == "broadcast_to") {
            out = b.op1("Expand", {in[0], params_tensor(i, 0, n.params.values.size())});
        } else if (op == "permute") {
            std::vector<std::int64_t> perm;
            for (int ax : attr_axes(a, "dims")) perm.push_back(ax);
            out = b.op1("Transpose", {in[0]}, {onnx_builder::ints_attr("perm", perm)});
        } else if (op == "transpose") {
            std::vector<std::int64_t> perm;
            for (int k = 0; k < in_rank(0); ++k) perm.push_back(k);
            const int r = in_rank(0), x = attr_axis(a, "dim0"), y = attr_axis(a, "dim1");
            std::swap(perm[static_cast<std::size_t>(x < 0 ? x + r : x)], perm[static_cast<std::size_t>(y < 0 ? y + r : y)]);
            out = b.op1("Transpose", {in[0]}, {onnx_builder::ints_attr("perm", perm)});
        } else if (op == "slice") {
            out = b.op1("Slice", {in[0], scalar_param(i, 0), scalar_param(i, 1), b.int64s({attr_axis(a, "axis")}), scalar_param(i, 2)});
        } else if (op == "select") {
            const std::string index = b.op1("Reshape", {scalar_param(i, 0), b.int64s({})});  // rank 0: the axis goes
            out = b.op1("Gather", {in[0], index}, {onnx_builder::int_attr("axis", attr_axis(a, "axis"))});
        } else if (op == "unsqueeze") {
            out = b.op1("Unsqueeze", {in[0], b.int64s({attr_axis(a, "axis")})});
        } else if (op == "tile") {
            // Tile, after Unsqueeze of the leading axes that more repetitions than dimensions add.
            const std::vector<std::int64_t> reps = attr_ints(a, "reps");
            const int r = in_rank(0), rank = std::max(r, static_cast<int>(reps.size()));
            std::string x = in[0];
            if (rank > r) {
                std::vector<std::int64_t> lead;
                for (int k = 0; k < rank - r; ++k) lead.push_back(k);
                x = b.op1("Unsqueeze", {x, b.int64s(lead)});
            }
            std::vector<std::int64_t> all(static_cast<std::size_t>(rank), 1);
            for (std::size_t k = 0; k < reps.size(); ++k) all[static_cast<std::size_t>(rank) - reps.size() + k] = reps[k];
            out = b.op1("Tile", {x, b.int64s(all)});
        } else if (op == "repeat") {
            // Each element repeated: Unsqueeze after the axis, Tile along the new axis, Reshape to x's shape with the
            // axis grown.
            const int r = in_rank(0), raw = attr_axis(a, "axis"), ax = raw < 0 ? raw + r : raw;
            const std::int64_t times = attr_int(a, "repeats");
            std::vector<std::int64_t> reps(static_cast<std::size_t>(r + 1), 1), grow(static_cast<std::size_t>(r), 1);
            reps[static_cast<std::size_t>(ax + 1)] = times;
            grow[static_cast<std::size_t>(ax)] = times;
            const std::string t = b.op1("Tile", {b.op1("Unsqueeze", {in[0], b.int64s({ax + 1})}), b.int64s(reps)});
            out = b.op1("Reshape", {t, b.op1("Mul", {b.op1("Shape", {in[0]}), b.int64s(grow)})}, {onnx_builder::int_attr("allowzero", 1)});
        } else if (op == "pad") {
            const std::vector<std::int64_t> before = attr_ints(a, "before"), after = attr_ints(a, "after");
            const int r = in_rank(0);
            std::vector<std::int64_t> pads(static_cast<std::size_t>(2 * r), 0);
            for (std::size_t k = 0; k < before.size() && k < after.size(); ++k) {
                pads[k] = before[k];
                pads[static_cast<std::size_t>(r) + k] = after[k];
            }
            const std::string value = b.initializer(full(dims{}, attr_number(a, "value"), n.dtype), "n");
            out = b.op1("Pad", {in[0], b.int64s(pads), value});
        } else if (op == "im2col") {
            // The windows as their parts: Pad (where padded), then per kernel offset a strided Slice of the image,
            // Unsqueezed at axis 2, and one Concat along it (nn::conv2d and the pools of dtypes ONNX Runtime's Conv
            // and pools do not take).
            const std::vector<std::int64_t> k = attr_ints(a, "kernel"), st = attr_ints(a, "stride"), p4 = attr_ints(a, "pads"),
                                            dl = attr_ints(a, "dilation");
            if (k.size() != 2 || st.size() != 2 || p4.size() != 4 || dl.size() != 2) unsupported(i, "its attributes are malformed");
            if (plan.dynamic_axes[static_cast<std::size_t>(n.inputs[0])] >> 2 & 3u)
                unsupported(i, "its image's height or width is dynamic, and the windows' slices are written for fixed ones");
            std::string x = in[0];
            if (p4[0] || p4[1] || p4[2] || p4[3]) {
                const std::string value = b.initializer(full(dims{}, attr_number(a, "value"), n.dtype), "n");
                x = b.op1("Pad", {x, b.int64s({0, 0, p4[0], p4[2], 0, 0, p4[1], p4[3]}), value});
            }
            const std::int64_t oh = n.shape[3], ow = n.shape[4];
            std::vector<std::string> taps;
            for (std::int64_t r = 0; r < k[0]; ++r)
                for (std::int64_t c = 0; c < k[1]; ++c) {
                    const std::int64_t r0 = r * dl[0], c0 = c * dl[1];
                    const std::string tap = b.op1("Slice", {x, b.int64s({r0, c0}), b.int64s({r0 + st[0] * (oh - 1) + 1, c0 + st[1] * (ow - 1) + 1}),
                                                            b.int64s({2, 3}), b.int64s({st[0], st[1]})});
                    taps.push_back(b.op1("Unsqueeze", {tap, b.int64s({2})}));
                }
            out = taps.size() == 1 ? taps[0] : b.op1("Concat", taps, {onnx_builder::int_attr("axis", 2)});
        } else if (op == "einsum") {
            out = b.op1("Einsum", {b.cast(in[0], in_dtype[0], n.dtype), b.cast(in[1], in_dtype[1], n.dtype)},
                        {onnx_builder::string_attr("equation", a.count("equation") ? a.at("equation") : "")});
        } else if (op == "index_select") {
            out = b.op1("Gather", {in[0], in[1]}, {onnx_builder::int_attr("axis", attr_axis(a, "axis"))});
        } else if (op == "take_along_axis") {
            out = b.op1("GatherElements", {in[0], in[1]}, {onnx_builder::int_attr("axis", attr_axis(a, "axis"))});
        } else if (op == "scatter_add_along") {
            // The source added at the indices into zeros of the third operand's shape (scatter_add, and
            // take_along_axis's gradient): ScatterElements with reduction "add" (opset 16).
            const std::string v = onnx_tensor("value", full(dims{1}, 0.0, n.dtype));
            const std::string zeros = b.op1("ConstantOfShape", {b.op1("Shape", {in[2]})}, {onnx_builder::tensor_attr("value", v)});
            out = b.op1("ScatterElements", {zeros, in[1], b.cast(in[0], in_dtype[0], n.dtype)},
                        {onnx_builder::int_attr("axis", attr_axis(a, "axis")), onnx_builder::string_attr("reduction", "add")});
        } else if (op == "flip") {
            // One Slice that walks the flipped axes backwards.
            std::vector<int> axes = attr_axes(a, "axes");
            if (axes.empty())
                for (int k = 0; k < in_rank(0); ++k) axes.push_back(k);
            std::vector<std::int64_t> ax, starts, ends, steps;
            for (int k : axes) {
                ax.push_back(k);
                starts.push_back(-1);
                ends.push_back(std::numeric_limits<std::int64_t>::min());
                steps.push_back(-1);
            }
            out = b.op1("Slice", {in[0], b.int64s(starts), b.int64s(ends), b.int64s(ax), b.int64s(steps)});
        } else if (op == "full") {
            const std::size_t r = n.params.values.size() - 1;
            const std::string v = onnx_tensor("value", full(dims{1}, param_number(n.params.values[r]), n.dtype));
            out = b.op1("ConstantOfShape", {params_tensor(i, 0, r)}, {onnx_builder::tensor_attr("value", v)});
        } else {
            // Elementwise: tensors and numbers in operand order, each as the dtype the op computes in.
            if (op == "dropout")
                unsupported(i, "a training-mode dropout draws from kiln's own generator, which ONNX has no operator for; "
                               "export the model in evaluation mode (model.eval()), where dropout passes its input through");
            if (op == "argsort")
                unsupported(i, "ONNX's TopK neither promises a stable order for ties nor places NaN last, so it would "
                               "not compute what kiln's argsort (and sort, which gathers with it) computes");
            const op_schema* s = find_op_or_null<N>(op);
            if (!s || (s->family != op_family::elementwise && s->family != op_family::activation) || s->min_inputs != s->max_inputs)
                unsupported(i, "ONNX has no mapping for it in kiln");
            const std::size_t arity = static_cast<std::size_t>(s->min_inputs);
            const std::uint32_t numbers = number_operands(a, arity);
            // The tensors' dtype and each number's, as the loader makes them.
            const std::optional<dtype> td =
                tensor_operands_dtype(numbers, arity, op == "where", [&](std::size_t t) { return in_dtype[t]; });
            std::vector<std::string> x;
            std::vector<dtype> xd;
            for (std::size_t k = 0, t = 0, q = 0; k < arity; ++k) {
                if (!(numbers >> k & 1)) {
                    x.push_back(in[t]);
                    xd.push_back(in_dtype[t++]);
                    continue;
                }
                const bool is_float = n.params.float_params >> q & 1;
                bool follows_extent = false;
                for (const dynamic_param& dp : n.dynamic) follows_extent = follows_extent || dp.index == q;
                const std::int64_t bits = n.params.values[q++];
                const dtype nd = number_operand_dtype(is_float, td);
                if (follows_extent) {
                    // A number that follows a dynamic extent (a mean's count): computed from the input's shape.
                    const std::string v = b.op1("Reshape", {params_tensor(i, q - 1, 1), b.int64s({})});
                    x.push_back(b.cast(v, dtype::int64, nd));
                    xd.push_back(nd);
                    continue;
                }
                x.push_back(b.initializer(is_float ? full(dims{}, param_number(bits), nd) : full(dims{}, static_cast<double>(bits), nd).to(nd), "n"));
                if (!is_float) {
                    // (An integer stored exactly: full() goes through double, exact below 2^53.)
                    if (bits > (std::int64_t{1} << 53) || bits < -(std::int64_t{1} << 53)) unsupported(i, "an integer operand beyond 2^53");
                }
                xd.push_back(nd);
            }
            // The dtype the operands are computed in: the result's, except for predicates (their operands'
            // promoted dtype) and where (its condition is bool).
            static const std::map<std::string, std::string> unary = {
                {"neg", "Neg"}, {"abs", "Abs"}, {"exp", "Exp"}, {"log", "Log"}, {"sqrt", "Sqrt"}, {"sin", "Sin"},
                {"cos", "Cos"}, {"tan", "Tan"}, {"asin", "Asin"}, {"acos", "Acos"}, {"atan", "Atan"}, {"tanh", "Tanh"},
                {"erf", "Erf"}, {"floor", "Floor"}, {"ceil", "Ceil"}, {"round", "Round"}, {"sign", "Sign"},
                {"sigmoid", "Sigmoid"}, {"relu", "Relu"}, {"softplus", "Softplus"}, {"isnan", "IsNaN"}, {"logical_not", "Not"}};
            static const std::map<std::string, std::string> binary = {
                {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}, {"div", "Div"}, {"pow", "Pow"}, {"maximum", "Max"},
                {"minimum", "Min"}, {"less", "Less"}, {"less_equal", "LessOrEqual"}, {"greater", "Greater"},
                {"greater_equal", "GreaterOrEqual"}, {"equal", "Equal"}, {"logical_and", "And"}, {"logical_or", "Or"},
                {"logical_xor", "Xor"}};
            const bool predicate = op == "less" || op == "less_equal" || op == "greater" || op == "greater_equal" ||
                                   op == "equal" || op == "not_equal" || op == "isnan" || op == "isinf" || op == "isfinite";
            const bool logical = op == "logical_and" || op == "logical_or" || op == "logical_xor" || op == "logical_not";
            dtype cd = n.dtype;
            if (predicate) {
                cd = xd[0];
                for (dtype d : xd) cd = promote(cd, d);
                // ONNX orders numbers only: bools compare as 0 and 1.
                if (cd == dtype::boolean && op != "equal" && op != "not_equal") cd = dtype::int32;
            }
            if (logical || (n.dtype == dtype::boolean && op.rfind("bitwise_", 0) == 0)) cd = dtype::boolean;
            std::vector<std::string> c;
            for (std::size_t k = 0; k < x.size(); ++k)
                c.push_back(op == "where" && k == 0 ? b.cast(x[k], xd[k], dtype::boolean) : b.cast(x[k], xd[k], cd));
            if ((op == "floor" || op == "ceil" || op == "round" || op == "trunc" || op == "abs") && n.dtype == dtype::boolean) {
                out = b.op1("Identity", c);  // bools pass through unchanged
            } else if ((op == "floor" || op == "ceil" || op == "round" || op == "trunc") && !is_floating(n.dtype)) {
                out = b.op1("Identity", c);  // integers and bools pass through unchanged
            } else if ((op == "isnan" || op == "isinf" || op == "isfinite") && !is_floating(cd)) {
                const std::string same = b.op1("Equal", c.size() ? std::vector<std::string>{c[0], c[0]} : c);  // all true
                out = op == "isfinite" ? same : b.op1("Not", {same});
            } else if (op == "isfinite") {
                out = b.op1("Not", {b.op1("Or", {b.op1("IsNaN", c), b.op1("IsInf", c)})});
            } else if (n.dtype == dtype::boolean && (op == "bitwise_and" || op == "bitwise_or" || op == "bitwise_xor" || op == "bitwise_not")) {
                // On bools the bitwise ops are the logical ones (ONNX's bitwise operators come with opset 18).
                out = b.op1(op == "bitwise_and" ? "And" : op == "bitwise_or" ? "Or" : op == "bitwise_xor" ? "Xor" : "Not", c);
            } else if (n.dtype == dtype::boolean && (op == "add" || op == "mul" || op == "maximum" || op == "minimum")) {
                out = b.op1(op == "add" || op == "maximum" ? "Or" : "And", c);  // bools: or and and, as kiln computes them
            } else if (unary.count(op) && arity == 1) {
                out = b.op1(unary.at(op), c);
            } else if (binary.count(op) && arity == 2) {
                out = b.op1(binary.at(op), c);
            } else if (op == "not_equal") {
                out = b.op1("Not", {b.op1("Equal", c)});
            } else if (op == "isinf") {
                out = b.op1("IsInf", c);
            } else if (op == "square") {
                out = b.op1("Mul", {c[0], c[0]});
            } else if (op == "rsqrt") {
                out = b.op1("Reciprocal", {b.op1("Sqrt", c)});
            } else if (op == "where" && cd == dtype::boolean) {
                // (c and x) or (not c and y): exact, and ONNX Runtime has no Where kernel for bools.
                out = b.op1("Or", {b.op1("And", {c[0], c[1]}), b.op1("And", {b.op1("Not", {c[0]}), c[2]})});
            } else if (op == "where") {
                out = b.op1("Where", c);
            } else if (op == "clamp") {
                out = b.op1("Min", {b.op1("Max", {c[0], c[1]}), c[2]});
            } else if (op == "silu") {
                out = b.op1("Mul", {c[0], b.op1("Sigmoid", {c[0]})});
            } else if (op == "gelu") {
                const std::string half = b.initializer(full(dims{}, 0.5, cd), "n"), one = b.initializer(full(dims{}, 1.0, cd), "n");
                const std::string r2 = b.initializer(full(dims{}, 0.70710678118654752440, cd), "n");
                out = b.op1("Mul", {b.op1("Mul", {half, c[0]}), b.op1("Add", {one, b.op1("Erf", {b.op1("Mul", {c[0], r2})})})});
            } else if (op == "elu") {
                out = b.op1("Elu", c, {onnx_builder::float_attr("alpha", 1.0f)});
            } else if (op == "leaky_relu") {
                const std::string zero = b.initializer(full(dims{}, 0.0, cd), "n");
                out = b.op1("Where", {b.op1("Less", {c[0], zero}), b.op1("Mul", {c[0], c[1]}), c[0]});
            } else if (op == "relu_backward") {
                const std::string zero = b.initializer(full(dims{}, 0.0, cd), "n");
                out = b.op1("Where", {b.op1("Greater", {c[1], zero}), c[0], b.op1("Mul", {c[0], zero})});
            } else if (op == "trunc") {
                const std::string zero = b.initializer(full(dims{}, 0.0, cd), "n");
                out = b.op1("Where", {b.op1("Less", {c[0], zero}), b.op1("Ceil", c), b.op1("Floor", c)});
            } else if (op == "log1p" || op == "expm1" || op == "atan2" ||
                       ((op == "floor_divide" || op == "remainder") && is_floating(cd))) {
                out = onnx_float_composite(b, op, c, cd);
            } else if (op == "floor_divide" || op == "remainder") {
                out = onnx_integer_division(b, op, c, cd);
            } else {
                unsupported(i, "ONNX opset 17 has no operator for it that computes what kiln computes");
            }
        }
        value[i] = out;
    }

    std::string graph = b.nodes;
    // Outputs: an Identity each, so an output is a value of its own (an argument or a constant returned, or the
    // same value twice, included).
    std::string outputs;
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
        const std::string name = "output_" + std::to_string(k);
        std::string node;
        proto::bytes_field(node, 1, value[static_cast<std::size_t>(g.outputs[k])]);
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
        proto::bytes_field(graph, 11, onnx_value_info(input_name[k], specs[k].dtype, names, &specs[k].shape));
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
