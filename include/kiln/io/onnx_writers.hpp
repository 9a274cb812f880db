#pragma once
// ONNX export's writers: each node of a traced function's optimized graph as ONNX nodes (io/onnx_export.hpp
// assembles the model around them). Three kinds:
// - onnx_write_fused: the patterns io/onnx_plan.hpp recognizes among kiln's parts (Softmax, Gemm, ReduceMean,
//   Conv, ConvTranspose, the pools, LayerNormalization, BatchNormalization, Squeeze);
// - onnx_op_writers(): one writer per structural op, by its name (matmul MatMul, the reductions, the views, concat,
//   cast, pad, im2col, the gathers, full, ...): exporting a new structural op is one entry there;
// - onnx_write_elementwise: every elementwise op of the vocabulary (the tables of its one-to-one operators, then the
//   composites for the ops ONNX has none for, and the bools and integers ONNX computes differently), with Casts
//   where kiln promotes dtypes and ONNX does not.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "function_file.hpp"
#include "onnx_plan.hpp"
#include "onnx_proto.hpp"

namespace kiln::detail {

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
// What every node's writer shares: the model being built, each graph value's name in it, and the dynamic extents.
struct onnx_export_state {
    const function_graph& g;
    const onnx_plan& plan;
    const char* entry;  // (the API's name, for errors)
    onnx_builder b;
    std::vector<std::string> value;                   // each graph value's name in the model
    std::vector<std::string> input_name;              // each argument's
    std::vector<std::pair<std::size_t, int>> dim_at;  // each dynamic extent: (argument, axis)
    std::map<int, std::string> extent_value;          // dynamic extent -> a 1-element int64 tensor, once written

    // The dynamic extent d as a 1-element int64 tensor, from its input's Shape.
    std::string extent(int d) {
        auto it = extent_value.find(d);
        if (it != extent_value.end()) return it->second;
        const auto [arg, axis] = dim_at[static_cast<std::size_t>(d)];
        const std::string shape = b.op1("Shape", {input_name[arg]});
        const std::string e = b.op1("Gather", {shape, b.int64s({axis})}, {onnx_builder::int_attr("axis", 0)});
        return extent_value[d] = e;
    }

    [[noreturn]] void unsupported(std::size_t i, const std::string& why) const {
        const graph_node& n = g.nodes[i];
        throw value_error(error_prefix("value_error", entry) + "node %" + std::to_string(i) + " ('" + n.op + "'" +
                          (n.attrs.empty() ? "" : " " + n.attrs) + ") cannot be exported to ONNX: " + why);
    }

    // Parameters [first, first + count) of node i as a 1-D int64 tensor (computed where they follow an extent).
    // (Slice and Gather take 1-D starts and a rank-0 index: a 1-D one here, reshaped where needed.)
    std::string params_tensor(std::size_t i, std::size_t first, std::size_t count) {
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
    }

    // A graph value's name in the model, and its dtype and rank.
    const std::string& of(std::int32_t v) const { return value[static_cast<std::size_t>(v)]; }
    const graph_node& node(std::int32_t v) const { return g.nodes[static_cast<std::size_t>(v)]; }
};

// The node being written: its index, its operands' names and dtypes in the model, and its attributes.
struct onnx_node {
    std::size_t i;
    const graph_node& n;
    std::vector<std::string> in;
    std::vector<dtype> in_dtype;
    std::vector<int> in_rank;
    std::map<std::string, std::string> a;
};

// ---- the patterns of parts ------------------------------------------------------------------------------------

inline std::string onnx_write_fused(onnx_export_state& s, const onnx_fused& f) {
    onnx_builder& b = s.b;
    auto in = [&](std::size_t k) { return s.of(f.inputs[k]); };
    switch (f.kind) {
        case onnx_fused::softmax:
        case onnx_fused::log_softmax:
            return b.op1(f.kind == onnx_fused::softmax ? "Softmax" : "LogSoftmax", {in(0)}, {onnx_builder::int_attr("axis", f.axis)});
        case onnx_fused::gemm:
            return b.op1("Gemm", {in(0), in(1), in(2)},
                         {onnx_builder::int_attr("transA", f.trans_a), onnx_builder::int_attr("transB", f.trans_b)});
        case onnx_fused::reduce_mean:
            return b.op1("ReduceMean", {in(0)}, {onnx_builder::ints_attr("axes", f.axes), onnx_builder::int_attr("keepdims", f.keepdims)});
        case onnx_fused::squeeze: return b.op1("Squeeze", {in(0), b.int64s({f.axis})});
        case onnx_fused::conv:
        case onnx_fused::conv_transpose:
        case onnx_fused::max_pool:
        case onnx_fused::avg_pool: {
            // The note's pads are top, bottom, left, right; ONNX lists the starts, then the ends.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const std::vector<std::int64_t> p4 = attr_ints(w, "pads");
            std::vector<onnx_builder::attr> at = {onnx_builder::ints_attr("kernel_shape", attr_ints(w, "kernel")),
                                                  onnx_builder::ints_attr("strides", attr_ints(w, "stride")),
                                                  onnx_builder::ints_attr("pads", {p4.at(0), p4.at(2), p4.at(1), p4.at(3)})};
            std::vector<std::string> ins;
            for (std::size_t k = 0; k < f.inputs.size(); ++k) ins.push_back(in(k));
            if (f.kind == onnx_fused::avg_pool) {
                at.push_back(onnx_builder::int_attr("count_include_pad", attr_bool(w, "count_include_pad") ? 1 : 0));
                return b.op1("AveragePool", ins, at);
            }
            at.push_back(onnx_builder::ints_attr("dilations", attr_ints(w, "dilation")));
            if (f.kind == onnx_fused::max_pool) {
                at.push_back(onnx_builder::int_attr("ceil_mode", attr_bool(w, "ceil_mode") ? 1 : 0));
                return b.op1("MaxPool", ins, at);
            }
            at.push_back(onnx_builder::int_attr("group", attr_int(w, "groups")));
            if (f.kind == onnx_fused::conv) return b.op1("Conv", ins, at);
            at.push_back(onnx_builder::ints_attr("output_padding", attr_ints(w, "output_padding")));
            return b.op1("ConvTranspose", ins, at);
        }
        case onnx_fused::layer_norm: {
            // Inputs X, Scale, B: the note lists x, then the weight and the bias that it has.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const bool scale = attr_bool(w, "scale"), bias = attr_bool(w, "bias");
            std::vector<std::string> ins{in(0)};
            if (scale) {
                ins.push_back(in(1));
            } else {
                const graph_node& x = s.node(f.inputs[0]);
                std::vector<std::int64_t> normalized;
                for (int k = f.axis; k < x.shape.rank; ++k) normalized.push_back(x.shape[k]);
                const std::string one = onnx_tensor("value", full(dims{1}, 1.0, dtype::float32));
                ins.push_back(b.op1("ConstantOfShape", {b.int64s(normalized)}, {onnx_builder::tensor_attr("value", one)}));
            }
            if (bias) ins.push_back(in(scale ? 2 : 1));
            return b.op1("LayerNormalization", ins,
                         {onnx_builder::int_attr("axis", f.axis),
                          onnx_builder::float_attr("epsilon", static_cast<float>(attr_number(w, "epsilon")))});
        }
        case onnx_fused::batch_norm: {
            // Inputs X, scale, B, mean, var: the note lists x, the running mean and variance, then the weight and the
            // bias that it has.
            const std::map<std::string, std::string> w = split_attrs(f.attrs);
            const bool scale = attr_bool(w, "scale"), bias = attr_bool(w, "bias");
            const std::int64_t channels = s.node(f.inputs[0]).shape[1];
            auto filled = [&](double v) {
                const std::string t = onnx_tensor("value", full(dims{1}, v, dtype::float32));
                return b.op1("ConstantOfShape", {b.int64s({channels})}, {onnx_builder::tensor_attr("value", t)});
            };
            const std::string sc = scale ? in(3) : filled(1.0), sh = bias ? in(scale ? 4 : 3) : filled(0.0);
            return b.op1("BatchNormalization", {in(0), sc, sh, in(1), in(2)},
                         {onnx_builder::float_attr("epsilon", static_cast<float>(attr_number(w, "epsilon")))});
        }
        case onnx_fused::none: break;
    }
    return {};
}

// ---- structural ops, one writer each --------------------------------------------------------------------------

using onnx_op_writer = std::string (*)(onnx_export_state&, const onnx_node&);

// The reductions sum, prod, max and min (ONNX reduces numbers only: max and min of bools go through int32).
inline std::string onnx_write_reduction(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::string& op = x.n.op;
    std::vector<std::int64_t> axes;
    for (int ax : attr_axes(x.a, "axes")) axes.push_back(ax);
    if (axes.empty())
        for (int k = 0; k < x.in_rank[0]; ++k) axes.push_back(k);
    const std::int64_t keep = attr_bool(x.a, "keepdims") ? 1 : 0;
    const bool boolean = x.n.dtype == dtype::boolean;
    const std::string v = b.cast(x.in[0], x.in_dtype[0], boolean ? dtype::int32 : x.n.dtype);
    std::string out;
    if (axes.empty()) out = b.op1("Identity", {v});  // (a rank-0 operand)
    else if (op == "sum") out = b.op1("ReduceSum", {v, b.int64s(axes)}, {onnx_builder::int_attr("keepdims", keep)});
    else
        out = b.op1(op == "prod" ? "ReduceProd" : op == "max" ? "ReduceMax" : "ReduceMin", {v},
                    {onnx_builder::ints_attr("axes", axes), onnx_builder::int_attr("keepdims", keep)});
    return boolean ? b.cast(out, dtype::int32, dtype::boolean) : out;
}

inline std::string onnx_write_arg_reduction(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::vector<onnx_builder::attr> at = {onnx_builder::int_attr("axis", attr_axis(x.a, "axis")),
                                                onnx_builder::int_attr("keepdims", attr_bool(x.a, "keepdims"))};
    const std::string v = x.in_dtype[0] == dtype::boolean ? b.cast(x.in[0], dtype::boolean, dtype::int32) : x.in[0];
    const std::string out = b.op1(x.n.op == "argmax" ? "ArgMax" : "ArgMin", {v}, at);
    if (!is_floating(x.in_dtype[0])) return out;
    // As NumPy and kiln: the first NaN wins (ONNX leaves NaN to the runtime).
    const std::string nan = b.cast(b.op1("IsNaN", {v}), dtype::boolean, dtype::int32);
    const std::string any = b.op1("ReduceMax", {nan}, {onnx_builder::ints_attr("axes", {attr_axis(x.a, "axis")}),
                                                       onnx_builder::int_attr("keepdims", attr_bool(x.a, "keepdims"))});
    return b.op1("Where", {b.cast(any, dtype::int32, dtype::boolean), b.op1("ArgMax", {nan}, at), out});
}

// Tile, after Unsqueeze of the leading axes that more repetitions than dimensions add.
inline std::string onnx_write_tile(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::vector<std::int64_t> reps = attr_ints(x.a, "reps");
    const int r = x.in_rank[0], rank = std::max(r, static_cast<int>(reps.size()));
    std::string v = x.in[0];
    if (rank > r) {
        std::vector<std::int64_t> lead;
        for (int k = 0; k < rank - r; ++k) lead.push_back(k);
        v = b.op1("Unsqueeze", {v, b.int64s(lead)});
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(rank), 1);
    for (std::size_t k = 0; k < reps.size(); ++k) all[static_cast<std::size_t>(rank) - reps.size() + k] = reps[k];
    return b.op1("Tile", {v, b.int64s(all)});
}

// Each element repeated: Unsqueeze after the axis, Tile along the new axis, Reshape to x's shape with the axis grown.
inline std::string onnx_write_repeat(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const int r = x.in_rank[0], raw = attr_axis(x.a, "axis"), ax = raw < 0 ? raw + r : raw;
    const std::int64_t times = attr_int(x.a, "repeats");
    std::vector<std::int64_t> reps(static_cast<std::size_t>(r + 1), 1), grow(static_cast<std::size_t>(r), 1);
    reps[static_cast<std::size_t>(ax + 1)] = times;
    grow[static_cast<std::size_t>(ax)] = times;
    const std::string t = b.op1("Tile", {b.op1("Unsqueeze", {x.in[0], b.int64s({ax + 1})}), b.int64s(reps)});
    return b.op1("Reshape", {t, b.op1("Mul", {b.op1("Shape", {x.in[0]}), b.int64s(grow)})}, {onnx_builder::int_attr("allowzero", 1)});
}

inline std::string onnx_write_pad(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::vector<std::int64_t> before = attr_ints(x.a, "before"), after = attr_ints(x.a, "after");
    const int r = x.in_rank[0];
    std::vector<std::int64_t> pads(static_cast<std::size_t>(2 * r), 0);
    for (std::size_t k = 0; k < before.size() && k < after.size(); ++k) {
        pads[k] = before[k];
        pads[static_cast<std::size_t>(r) + k] = after[k];
    }
    const std::string value = b.initializer(full(dims{}, attr_number(x.a, "value"), x.n.dtype), "n");
    return b.op1("Pad", {x.in[0], b.int64s(pads), value});
}

// The windows as their parts: Pad (where padded), then per kernel offset a strided Slice of the image, Unsqueezed
// at axis 2, and one Concat along it (nn::conv2d and the pools of dtypes ONNX Runtime's Conv and pools do not take).
inline std::string onnx_write_im2col(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::vector<std::int64_t> k = attr_ints(x.a, "kernel"), st = attr_ints(x.a, "stride"), p4 = attr_ints(x.a, "pads"),
                                    dl = attr_ints(x.a, "dilation");
    if (k.size() != 2 || st.size() != 2 || p4.size() != 4 || dl.size() != 2) s.unsupported(x.i, "its attributes are malformed");
    if (s.plan.dynamic_axes[static_cast<std::size_t>(x.n.inputs[0])] >> 2 & 3u)
        s.unsupported(x.i, "its image's height or width is dynamic, and the windows' slices are written for fixed ones");
    std::string v = x.in[0];
    if (p4[0] || p4[1] || p4[2] || p4[3]) {
        const std::string value = b.initializer(full(dims{}, attr_number(x.a, "value"), x.n.dtype), "n");
        v = b.op1("Pad", {v, b.int64s({0, 0, p4[0], p4[2], 0, 0, p4[1], p4[3]}), value});
    }
    const std::int64_t oh = x.n.shape[3], ow = x.n.shape[4];
    std::vector<std::string> taps;
    for (std::int64_t r = 0; r < k[0]; ++r)
        for (std::int64_t c = 0; c < k[1]; ++c) {
            const std::int64_t r0 = r * dl[0], c0 = c * dl[1];
            const std::string tap = b.op1("Slice", {v, b.int64s({r0, c0}), b.int64s({r0 + st[0] * (oh - 1) + 1, c0 + st[1] * (ow - 1) + 1}),
                                                    b.int64s({2, 3}), b.int64s({st[0], st[1]})});
            taps.push_back(b.op1("Unsqueeze", {tap, b.int64s({2})}));
        }
    return taps.size() == 1 ? taps[0] : b.op1("Concat", taps, {onnx_builder::int_attr("axis", 2)});
}

// One Slice that walks the flipped axes backwards.
inline std::string onnx_write_flip(onnx_export_state& s, const onnx_node& x) {
    std::vector<int> axes = attr_axes(x.a, "axes");
    if (axes.empty())
        for (int k = 0; k < x.in_rank[0]; ++k) axes.push_back(k);
    std::vector<std::int64_t> ax, starts, ends, steps;
    for (int k : axes) {
        ax.push_back(k);
        starts.push_back(-1);
        ends.push_back(std::numeric_limits<std::int64_t>::min());
        steps.push_back(-1);
    }
    return s.b.op1("Slice", {x.in[0], s.b.int64s(starts), s.b.int64s(ends), s.b.int64s(ax), s.b.int64s(steps)});
}

// The writers by op name.
inline const std::map<std::string, onnx_op_writer, std::less<>>& onnx_op_writers() {
    using st = onnx_export_state;
    using nd = onnx_node;
    static const std::map<std::string, onnx_op_writer, std::less<>> writers = {
        {"matmul", +[](st& s, const nd& x) {
             return s.b.op1("MatMul", {s.b.cast(x.in[0], x.in_dtype[0], x.n.dtype), s.b.cast(x.in[1], x.in_dtype[1], x.n.dtype)});
         }},
        {"einsum", +[](st& s, const nd& x) {
             return s.b.op1("Einsum", {s.b.cast(x.in[0], x.in_dtype[0], x.n.dtype), s.b.cast(x.in[1], x.in_dtype[1], x.n.dtype)},
                            {onnx_builder::string_attr("equation", x.a.count("equation") ? x.a.at("equation") : "")});
         }},
        {"concat", +[](st& s, const nd& x) {
             std::vector<std::string> parts;
             for (std::size_t k = 0; k < x.in.size(); ++k) parts.push_back(s.b.cast(x.in[k], x.in_dtype[k], x.n.dtype));
             return s.b.op1("Concat", parts, {onnx_builder::int_attr("axis", attr_axis(x.a, "axis"))});
         }},
        {"copy", +[](st& s, const nd& x) { return s.b.op1("Identity", {x.in[0]}); }},
        {"cast", +[](st& s, const nd& x) {
             const std::string out = s.b.cast(x.in[0], x.in_dtype[0], x.n.dtype);
             return out == x.in[0] ? s.b.op1("Identity", {x.in[0]}) : out;
         }},
        {"sum", &onnx_write_reduction},
        {"prod", &onnx_write_reduction},
        {"max", &onnx_write_reduction},
        {"min", &onnx_write_reduction},
        {"argmax", &onnx_write_arg_reduction},
        {"argmin", &onnx_write_arg_reduction},
        {"cumsum", +[](st& s, const nd& x) {
             // ONNX's CumSum, with kiln's result dtype (int64 for integers and bools) and a rank-0 axis.
             tensor axis(dtype::int64, dims{});
             axis.data<std::int64_t>()[0] = attr_axis(x.a, "axis");
             return s.b.op1("CumSum", {s.b.cast(x.in[0], x.in_dtype[0], x.n.dtype), s.b.initializer(axis, "axis")},
                            {onnx_builder::int_attr("reverse", attr_bool(x.a, "reverse") ? 1 : 0)});
         }},
        {"reshape", +[](st& s, const nd& x) {
             return s.b.op1("Reshape", {x.in[0], s.params_tensor(x.i, 0, x.n.params.values.size())},
                            {onnx_builder::int_attr("allowzero", 1)});
         }},
        {"broadcast_to", +[](st& s, const nd& x) {
             return s.b.op1("Expand", {x.in[0], s.params_tensor(x.i, 0, x.n.params.values.size())});
         }},
        {"permute", +[](st& s, const nd& x) {
             std::vector<std::int64_t> perm;
             for (int ax : attr_axes(x.a, "dims")) perm.push_back(ax);
             return s.b.op1("Transpose", {x.in[0]}, {onnx_builder::ints_attr("perm", perm)});
         }},
        {"transpose", +[](st& s, const nd& x) {
             std::vector<std::int64_t> perm;
             const int r = x.in_rank[0], d0 = attr_axis(x.a, "dim0"), d1 = attr_axis(x.a, "dim1");
             for (int k = 0; k < r; ++k) perm.push_back(k);
             std::swap(perm[static_cast<std::size_t>(d0 < 0 ? d0 + r : d0)], perm[static_cast<std::size_t>(d1 < 0 ? d1 + r : d1)]);
             return s.b.op1("Transpose", {x.in[0]}, {onnx_builder::ints_attr("perm", perm)});
         }},
        {"slice", +[](st& s, const nd& x) {
             return s.b.op1("Slice", {x.in[0], s.params_tensor(x.i, 0, 1), s.params_tensor(x.i, 1, 1),
                                      s.b.int64s({attr_axis(x.a, "axis")}), s.params_tensor(x.i, 2, 1)});
         }},
        {"select", +[](st& s, const nd& x) {
             const std::string index = s.b.op1("Reshape", {s.params_tensor(x.i, 0, 1), s.b.int64s({})});  // rank 0: the axis goes
             return s.b.op1("Gather", {x.in[0], index}, {onnx_builder::int_attr("axis", attr_axis(x.a, "axis"))});
         }},
        {"unsqueeze", +[](st& s, const nd& x) { return s.b.op1("Unsqueeze", {x.in[0], s.b.int64s({attr_axis(x.a, "axis")})}); }},
        {"tile", &onnx_write_tile},
        {"repeat", &onnx_write_repeat},
        {"pad", &onnx_write_pad},
        {"im2col", &onnx_write_im2col},
        {"flip", &onnx_write_flip},
        {"index_select", +[](st& s, const nd& x) {
             return s.b.op1("Gather", {x.in[0], x.in[1]}, {onnx_builder::int_attr("axis", attr_axis(x.a, "axis"))});
         }},
        {"take_along_axis", +[](st& s, const nd& x) {
             return s.b.op1("GatherElements", {x.in[0], x.in[1]}, {onnx_builder::int_attr("axis", attr_axis(x.a, "axis"))});
         }},
        {"scatter_add_along", +[](st& s, const nd& x) {
             // The source added at the indices into zeros of the third operand's shape (scatter_add, and
             // take_along_axis's gradient): ScatterElements with reduction "add" (opset 16).
             const std::string v = onnx_tensor("value", full(dims{1}, 0.0, x.n.dtype));
             const std::string zeros = s.b.op1("ConstantOfShape", {s.b.op1("Shape", {x.in[2]})}, {onnx_builder::tensor_attr("value", v)});
             return s.b.op1("ScatterElements", {zeros, x.in[1], s.b.cast(x.in[0], x.in_dtype[0], x.n.dtype)},
                            {onnx_builder::int_attr("axis", attr_axis(x.a, "axis")), onnx_builder::string_attr("reduction", "add")});
         }},
        {"full", +[](st& s, const nd& x) {
             const std::size_t r = x.n.params.values.size() - 1;
             const std::string v = onnx_tensor("value", full(dims{1}, param_number(x.n.params.values[r]), x.n.dtype));
             return s.b.op1("ConstantOfShape", {s.params_tensor(x.i, 0, r)}, {onnx_builder::tensor_attr("value", v)});
         }},
    };
    return writers;
}

// ---- elementwise ops ------------------------------------------------------------------------------------------

// The elementwise ops whose ONNX operator computes what kiln computes, given operands of the dtype kiln computes in.
inline const std::map<std::string, std::string, std::less<>>& onnx_unary_operators() {
    static const std::map<std::string, std::string, std::less<>> m = {
        {"neg", "Neg"}, {"abs", "Abs"}, {"exp", "Exp"}, {"log", "Log"}, {"sqrt", "Sqrt"}, {"sin", "Sin"},
        {"cos", "Cos"}, {"tan", "Tan"}, {"asin", "Asin"}, {"acos", "Acos"}, {"atan", "Atan"}, {"tanh", "Tanh"},
        {"erf", "Erf"}, {"floor", "Floor"}, {"ceil", "Ceil"}, {"round", "Round"}, {"sign", "Sign"},
        {"sigmoid", "Sigmoid"}, {"relu", "Relu"}, {"softplus", "Softplus"}, {"isnan", "IsNaN"}, {"logical_not", "Not"}};
    return m;
}
inline const std::map<std::string, std::string, std::less<>>& onnx_binary_operators() {
    static const std::map<std::string, std::string, std::less<>> m = {
        {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}, {"div", "Div"}, {"pow", "Pow"}, {"maximum", "Max"},
        {"minimum", "Min"}, {"less", "Less"}, {"less_equal", "LessOrEqual"}, {"greater", "Greater"},
        {"greater_equal", "GreaterOrEqual"}, {"equal", "Equal"}, {"logical_and", "And"}, {"logical_or", "Or"},
        {"logical_xor", "Xor"}};
    return m;
}

// Ops that ONNX has no one operator for (or computes differently on bools and integers), from the operands `c`
// already in the dtype `cd` the op computes in; empty where there is no mapping.
inline std::string onnx_elementwise_composite(onnx_builder& b, const std::string& op, const std::vector<std::string>& c,
                                              dtype cd, dtype result) {
    auto zero = [&] { return b.initializer(full(dims{}, 0.0, cd), "n"); };
    const bool round_op = op == "floor" || op == "ceil" || op == "round" || op == "trunc";
    const bool predicate = op == "isnan" || op == "isinf" || op == "isfinite";
    if ((round_op || op == "abs") && result == dtype::boolean) return b.op1("Identity", c);  // bools pass through unchanged
    if (round_op && !is_floating(result)) return b.op1("Identity", c);  // integers and bools pass through unchanged
    if (predicate && !is_floating(cd)) {
        const std::string same = b.op1("Equal", c.size() ? std::vector<std::string>{c[0], c[0]} : c);  // all true
        return op == "isfinite" ? same : b.op1("Not", {same});
    }
    if (op == "isfinite") return b.op1("Not", {b.op1("Or", {b.op1("IsNaN", c), b.op1("IsInf", c)})});
    if (result == dtype::boolean && (op == "bitwise_and" || op == "bitwise_or" || op == "bitwise_xor" || op == "bitwise_not"))
        // On bools the bitwise ops are the logical ones (ONNX's bitwise operators come with opset 18).
        return b.op1(op == "bitwise_and" ? "And" : op == "bitwise_or" ? "Or" : op == "bitwise_xor" ? "Xor" : "Not", c);
    if (result == dtype::boolean && (op == "add" || op == "mul" || op == "maximum" || op == "minimum"))
        return b.op1(op == "add" || op == "maximum" ? "Or" : "And", c);  // bools: or and and, as kiln computes them
    if (auto u = onnx_unary_operators().find(op); u != onnx_unary_operators().end() && c.size() == 1) return b.op1(u->second, c);
    if (auto u = onnx_binary_operators().find(op); u != onnx_binary_operators().end() && c.size() == 2) return b.op1(u->second, c);
    if (op == "not_equal") return b.op1("Not", {b.op1("Equal", c)});
    if (op == "isinf") return b.op1("IsInf", c);
    if (op == "square") return b.op1("Mul", {c[0], c[0]});
    if (op == "rsqrt") return b.op1("Reciprocal", {b.op1("Sqrt", c)});
    if (op == "where" && cd == dtype::boolean)
        // (c and x) or (not c and y): exact, and ONNX Runtime has no Where kernel for bools.
        return b.op1("Or", {b.op1("And", {c[0], c[1]}), b.op1("And", {b.op1("Not", {c[0]}), c[2]})});
    if (op == "where") return b.op1("Where", c);
    if (op == "clamp") return b.op1("Min", {b.op1("Max", {c[0], c[1]}), c[2]});
    if (op == "silu") return b.op1("Mul", {c[0], b.op1("Sigmoid", {c[0]})});
    if (op == "gelu") {
        const std::string half = b.initializer(full(dims{}, 0.5, cd), "n"), one = b.initializer(full(dims{}, 1.0, cd), "n");
        const std::string r2 = b.initializer(full(dims{}, 0.70710678118654752440, cd), "n");
        return b.op1("Mul", {b.op1("Mul", {half, c[0]}), b.op1("Add", {one, b.op1("Erf", {b.op1("Mul", {c[0], r2})})})});
    }
    if (op == "elu") return b.op1("Elu", c, {onnx_builder::float_attr("alpha", 1.0f)});
    if (op == "leaky_relu") return b.op1("Where", {b.op1("Less", {c[0], zero()}), b.op1("Mul", {c[0], c[1]}), c[0]});
    if (op == "relu_backward") {
        const std::string z = zero();
        return b.op1("Where", {b.op1("Greater", {c[1], z}), c[0], b.op1("Mul", {c[0], z})});
    }
    if (op == "trunc") return b.op1("Where", {b.op1("Less", {c[0], zero()}), b.op1("Ceil", c), b.op1("Floor", c)});
    if (op == "log1p" || op == "expm1" || op == "atan2" || ((op == "floor_divide" || op == "remainder") && is_floating(cd)))
        return onnx_float_composite(b, op, c, cd);
    if (op == "floor_divide" || op == "remainder") return onnx_integer_division(b, op, c, cd);
    return {};
}

// An elementwise op of the vocabulary: its tensors and numbers in operand order, each as the dtype the op computes
// in, then its operator or composite.
template <int N>
std::string onnx_write_elementwise(onnx_export_state& s, const onnx_node& x) {
    onnx_builder& b = s.b;
    const std::string& op = x.n.op;
    if (op == "dropout")
        s.unsupported(x.i, "a training-mode dropout draws from kiln's own generator, which ONNX has no operator for; "
                           "export the model in evaluation mode (model.eval()), where dropout passes its input through");
    if (op == "argsort")
        s.unsupported(x.i, "ONNX's TopK neither promises a stable order for ties nor places NaN last, so it would "
                           "not compute what kiln's argsort (and sort, which gathers with it) computes");
    const op_schema* schema = find_op_or_null<N>(op);
    if (!schema || (schema->family != op_family::elementwise && schema->family != op_family::activation) ||
        schema->min_inputs != schema->max_inputs)
        s.unsupported(x.i, "ONNX has no mapping for it in kiln");
    const std::size_t arity = static_cast<std::size_t>(schema->min_inputs);
    const std::uint32_t numbers = number_operands(x.a, arity);
    // The tensors' dtype and each number's, as the loader makes them.
    const std::optional<dtype> td =
        tensor_operands_dtype(numbers, arity, op == "where", [&](std::size_t t) { return x.in_dtype[t]; });
    std::vector<std::string> v;
    std::vector<dtype> vd;
    for (std::size_t k = 0, t = 0, q = 0; k < arity; ++k) {
        if (!(numbers >> k & 1)) {
            v.push_back(x.in[t]);
            vd.push_back(x.in_dtype[t++]);
            continue;
        }
        const bool is_float = x.n.params.float_params >> q & 1, is_bool = x.n.params.bool_params >> q & 1;
        bool follows_extent = false;
        for (const dynamic_param& dp : x.n.dynamic) follows_extent = follows_extent || dp.index == q;
        const std::int64_t bits = x.n.params.values[q++];
        const dtype nd = number_operand_dtype(is_float, td, is_bool);
        vd.push_back(nd);
        if (follows_extent) {
            // A number that follows a dynamic extent (a mean's count): computed from the input's shape.
            const std::string e = b.op1("Reshape", {s.params_tensor(x.i, q - 1, 1), b.int64s({})});
            v.push_back(b.cast(e, dtype::int64, nd));
            continue;
        }
        // (An integer is stored exactly: full() goes through double, exact below 2^53.)
        if (!is_float && (bits > (std::int64_t{1} << 53) || bits < -(std::int64_t{1} << 53)))
            s.unsupported(x.i, "an integer operand beyond 2^53");
        v.push_back(b.initializer(full(dims{}, is_float ? param_number(bits) : static_cast<double>(bits), nd), "n"));
    }
    // The dtype the operands are computed in: the result's, except for predicates (their operands' promoted
    // dtype; ONNX orders numbers only, so bools compare as 0 and 1) and logical ops (bools).
    const bool predicate = op == "less" || op == "less_equal" || op == "greater" || op == "greater_equal" ||
                           op == "equal" || op == "not_equal" || op == "isnan" || op == "isinf" || op == "isfinite";
    const bool logical = op == "logical_and" || op == "logical_or" || op == "logical_xor" || op == "logical_not";
    dtype cd = x.n.dtype;
    if (predicate) {
        cd = vd[0];
        for (dtype d : vd) cd = promote(cd, d);
        if (cd == dtype::boolean && op != "equal" && op != "not_equal") cd = dtype::int32;
    }
    if (logical || (x.n.dtype == dtype::boolean && op.rfind("bitwise_", 0) == 0)) cd = dtype::boolean;
    std::vector<std::string> c;
    for (std::size_t k = 0; k < v.size(); ++k)
        c.push_back(b.cast(v[k], vd[k], op == "where" && k == 0 ? dtype::boolean : cd));
    std::string out = onnx_elementwise_composite(b, op, c, cd, x.n.dtype);
    if (out.empty()) s.unsupported(x.i, "ONNX opset 17 has no operator for it that computes what kiln computes");
    return out;
}

}  // namespace kiln::detail
