#pragma once
// ONNX export: kiln::export_onnx(fn, signature, path) writes a traced function's inference graph as an ONNX model
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
// ConstantOfShape. A parameter that follows a dynamic dimension (a reshape's target) is computed in the model from
// the input's Shape. Captured tensors are initializers. An op with no mapping is a kiln::value_error naming it.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "function_file.hpp"

namespace kiln {

namespace detail {

// ---- the protobuf wire format (what ONNX's messages need of it) ----
namespace proto {

inline void varint(std::string& s, std::uint64_t v) {
    while (v >= 0x80) {
        s += static_cast<char>((v & 0x7f) | 0x80);
        v >>= 7;
    }
    s += static_cast<char>(v);
}
inline void key(std::string& s, int field, int wire) { varint(s, (static_cast<std::uint64_t>(field) << 3) | static_cast<unsigned>(wire)); }
inline void int_field(std::string& s, int field, std::int64_t v) {
    key(s, field, 0);
    varint(s, static_cast<std::uint64_t>(v));  // (negative int64: ten bytes, two's complement, as protobuf does)
}
inline void bytes_field(std::string& s, int field, std::string_view b) {
    key(s, field, 2);
    varint(s, b.size());
    s.append(b.data(), b.size());
}
inline void float_field(std::string& s, int field, float f) {
    key(s, field, 5);
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 0; i < 4; ++i, u >>= 8) s += static_cast<char>(u & 0xff);
}

}  // namespace proto

inline int onnx_dtype(dtype d) {
    switch (d) {
        case dtype::boolean: return 9;
        case dtype::int32: return 6;
        case dtype::int64: return 7;
        case dtype::float32: return 1;
        case dtype::float64: return 11;
    }
    return 0;
}

// A TensorProto: dims, data_type, name, raw_data.
inline std::string onnx_tensor(const std::string& name, const tensor& t) {
    std::string s;
    const tensor c = t.contiguous();
    for (int i = 0; i < c.dim(); ++i) proto::int_field(s, 1, c.shape()[i]);
    proto::int_field(s, 2, onnx_dtype(c.dtype()));
    proto::bytes_field(s, 8, name);
    proto::bytes_field(s, 9, std::string_view(static_cast<const char*>(c.raw_data()), static_cast<std::size_t>(c.numel()) * c.itemsize()));
    return s;
}

// Builds the GraphProto's parts.
class onnx_builder {
public:
    std::string nodes, initializers;
    int counter = 0;

    std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter++); }

    struct attr {
        std::string name;
        enum { integer, integers, real, tensor_value } kind;
        std::int64_t i = 0;
        std::vector<std::int64_t> ints;
        float f = 0;
        std::string t;  // a TensorProto
    };
    static attr int_attr(std::string n, std::int64_t v) { return {std::move(n), attr::integer, v, {}, 0, {}}; }
    static attr ints_attr(std::string n, std::vector<std::int64_t> v) { return {std::move(n), attr::integers, 0, std::move(v), 0, {}}; }
    static attr float_attr(std::string n, float v) { return {std::move(n), attr::real, 0, {}, v, {}}; }
    static attr tensor_attr(std::string n, std::string t) { return {std::move(n), attr::tensor_value, 0, {}, 0, std::move(t)}; }

    // A NodeProto: inputs, outputs, name, op_type, attributes.
    void node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
              const std::vector<attr>& attrs = {}) {
        std::string n;
        for (const std::string& i : in) proto::bytes_field(n, 1, i);
        for (const std::string& o : out) proto::bytes_field(n, 2, o);
        proto::bytes_field(n, 3, fresh(op));
        proto::bytes_field(n, 4, op);
        for (const attr& a : attrs) {
            std::string p;
            proto::bytes_field(p, 1, a.name);
            switch (a.kind) {
                case attr::integer:
                    proto::int_field(p, 3, a.i);
                    proto::int_field(p, 20, 2);
                    break;
                case attr::integers:
                    for (std::int64_t v : a.ints) proto::int_field(p, 8, v);
                    proto::int_field(p, 20, 7);
                    break;
                case attr::real:
                    proto::float_field(p, 2, a.f);
                    proto::int_field(p, 20, 1);
                    break;
                case attr::tensor_value:
                    proto::bytes_field(p, 5, a.t);
                    proto::int_field(p, 20, 4);
                    break;
            }
            proto::bytes_field(n, 5, p);
        }
        proto::bytes_field(nodes, 1, n);
    }
    // One output: its name.
    std::string op1(const std::string& op, const std::vector<std::string>& in, const std::vector<attr>& attrs = {}) {
        const std::string out = fresh("t");
        node(op, in, {out}, attrs);
        return out;
    }
    std::string initializer(const tensor& t, const std::string& hint = "c") {
        const std::string name = fresh(hint);
        proto::bytes_field(initializers, 5, onnx_tensor(name, t));
        return name;
    }
    std::string int64s(const std::vector<std::int64_t>& v) {
        tensor t(dtype::int64, dims{static_cast<std::ptrdiff_t>(v.size())});
        for (std::size_t i = 0; i < v.size(); ++i) t.data<std::int64_t>()[i] = v[i];
        return initializer(t, "i64");
    }
    std::string cast(const std::string& v, dtype from, dtype to) {
        if (from == to) return v;
        return op1("Cast", {v}, {int_attr("to", onnx_dtype(to))});
    }
};

inline std::string onnx_value_info(const std::string& name, dtype d, const std::vector<std::string>& dim_names,
                                   const std::vector<std::ptrdiff_t>* dims_or_null) {
    std::string shape;
    if (dims_or_null) {
        for (std::size_t i = 0; i < dims_or_null->size(); ++i) {
            std::string dim;
            if ((*dims_or_null)[i] == dyn) proto::bytes_field(dim, 2, dim_names[i]);
            else proto::int_field(dim, 1, (*dims_or_null)[i]);
            proto::bytes_field(shape, 1, dim);
        }
    }
    std::string tensor_type;
    proto::int_field(tensor_type, 1, onnx_dtype(d));
    if (dims_or_null) proto::bytes_field(tensor_type, 2, shape);
    std::string type;
    proto::bytes_field(type, 1, tensor_type);
    std::string vi;
    proto::bytes_field(vi, 1, name);
    proto::bytes_field(vi, 2, type);
    return vi;
}

template <int N = 0>
std::string onnx_model_bytes(const executable& exe, const std::vector<spec>& specs, const std::string& model_name,
                             const char* entry) {
    const function_graph& g = exe.graph;
    onnx_builder b;
    std::vector<std::string> value(g.nodes.size());
    // Dynamic dimensions: their names (extents that were equal when traced share one) and, when a parameter needs
    // one, its value computed from the input's shape.
    std::vector<std::string> dim_name;
    std::vector<std::pair<std::size_t, int>> dim_at;  // (argument, axis)
    for (std::size_t k = 0; k < specs.size(); ++k)
        for (std::size_t i = 0; i < specs[k].shape.size(); ++i)
            if (specs[k].shape[i] == dyn) {
                const std::size_t d = dim_at.size();
                std::string nm = "dim" + std::to_string(d);
                for (std::size_t e = 0; e < d && d < exe.traced_extents.size(); ++e)
                    if (exe.traced_extents[e] == exe.traced_extents[d]) {
                        nm = dim_name[e];  // equal when traced: the trace assumed them equal
                        break;
                    }
                dim_name.push_back(nm);
                dim_at.emplace_back(k, static_cast<int>(i));
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

    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
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
        if (op == "matmul") {
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
        } else if (op == "full") {
            const std::size_t r = n.params.values.size() - 1;
            const std::string v = onnx_tensor("value", full(dims{1}, param_number(n.params.values[r]), n.dtype));
            out = b.op1("ConstantOfShape", {params_tensor(i, 0, r)}, {onnx_builder::tensor_attr("value", v)});
        } else {
            // Elementwise: tensors and numbers in operand order, each as the dtype the op computes in.
            const op_schema* s = find_op_or_null<N>(op);
            if (!s || (s->family != op_family::elementwise && s->family != op_family::activation) || s->min_inputs != s->max_inputs)
                unsupported(i, "ONNX has no mapping for it in kiln");
            const std::size_t arity = static_cast<std::size_t>(s->min_inputs);
            std::uint32_t numbers = 0;
            for (const auto& [k, v] : a)
                if (k.rfind("operand", 0) == 0 && k.size() == 8) numbers |= 1u << (k[7] - '0');
            // The tensors' dtype (where's condition aside) and each number as the loader makes it.
            bool any = false;
            dtype td = dtype::boolean;
            for (std::size_t k = 0, t = 0; k < arity; ++k)
                if (!(numbers >> k & 1)) {
                    if (!(op == "where" && k == 0)) td = any ? promote(td, in_dtype[t]) : in_dtype[t], any = true;
                    ++t;
                }
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
                const dtype nd = is_float ? (any && is_floating(td) ? td : dtype::float32) : (any ? (td == dtype::boolean ? dtype::int64 : td) : dtype::int64);
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
        // (Its rank; each extent a named dimension of its own, since which of them follow a dynamic input is not
        // recorded: shape inference fills in the fixed ones.)
        const graph_node& o = g.nodes[static_cast<std::size_t>(g.outputs[k])];
        std::vector<std::ptrdiff_t> unknown(static_cast<std::size_t>(o.shape.rank), dyn);
        std::vector<std::string> names;
        for (int i = 0; i < o.shape.rank; ++i) names.push_back(name + "_dim" + std::to_string(i));
        proto::bytes_field(outputs, 12, onnx_value_info(name, o.dtype, names, &unknown));
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

namespace kiln {

// ---- ONNX import ----

namespace detail {

// A strict reader of protobuf's wire format over bytes in memory: every length is checked against what is left.
struct pb_reader {
    const unsigned char* p;
    const unsigned char* end;
    const std::string* file;
    std::size_t base;  // the offset of p in the file, for messages

    [[noreturn]] void fail(const std::string& what) const {
        throw file_error("kiln: file_error in 'load_onnx': '" + *file + "', byte " + std::to_string(base) + ": " + what);
    }
    bool done() const { return p >= end; }
    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p >= end) fail("a varint is cut off");
            const unsigned char c = *p++;
            ++base;
            v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
            if (!(c & 0x80)) return v;
        }
        fail("a varint is longer than 10 bytes");
    }
    // (field number, wire type)
    std::pair<std::uint64_t, int> key() {
        const std::uint64_t k = varint();
        return {k >> 3, static_cast<int>(k & 7)};
    }
    pb_reader sub() {
        const std::uint64_t n = varint();
        if (n > static_cast<std::uint64_t>(end - p)) fail("a field of " + std::to_string(n) + " bytes runs past its message");
        pb_reader r{p, p + n, file, base};
        p += n;
        base += n;
        return r;
    }
    std::string_view bytes() {
        pb_reader r = sub();
        return {reinterpret_cast<const char*>(r.p), static_cast<std::size_t>(r.end - r.p)};
    }
    std::uint32_t fixed32() {
        if (end - p < 4) fail("a 32-bit field is cut off");
        std::uint32_t v = 0;
        for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
        p += 4;
        base += 4;
        return v;
    }
    void skip(int wire) {
        switch (wire) {
            case 0: (void)varint(); break;
            case 1:
                if (end - p < 8) fail("a 64-bit field is cut off");
                p += 8;
                base += 8;
                break;
            case 2: (void)sub(); break;
            case 5: (void)fixed32(); break;
            default: fail("wire type " + std::to_string(wire) + " is not one protobuf writes");
        }
    }
    // A repeated int64 field: packed (wire 2) or one value (wire 0).
    void ints(int wire, std::vector<std::int64_t>& out, std::size_t limit) {
        if (wire == 0) {
            out.push_back(static_cast<std::int64_t>(varint()));
        } else if (wire == 2) {
            pb_reader r = sub();
            while (!r.done()) out.push_back(static_cast<std::int64_t>(r.varint()));
        } else {
            fail("an integer field has wire type " + std::to_string(wire));
        }
        if (out.size() > limit) fail("more than " + std::to_string(limit) + " integers in one field");
    }
    std::string text(int wire) {
        if (wire != 2) fail("a string field has wire type " + std::to_string(wire));
        return std::string(bytes());
    }
};

struct onnx_attr {
    std::string name;
    int type = 0;
    float f = 0;
    std::int64_t i = 0;
    std::string s;
    std::vector<std::int64_t> ints;
    std::vector<float> floats;
    tensor t;
    bool has_t = false;
};

inline std::optional<dtype> from_onnx_dtype(std::int64_t t) {
    switch (t) {
        case 1: return dtype::float32;
        case 6: return dtype::int32;
        case 7: return dtype::int64;
        case 9: return dtype::boolean;
        case 11: return dtype::float64;
        default: return std::nullopt;
    }
}

inline std::string onnx_dtype_name(std::int64_t t) {
    static const char* names[] = {"UNDEFINED", "FLOAT", "UINT8", "INT8", "UINT16", "INT16", "INT32", "INT64", "STRING", "BOOL",
                                  "FLOAT16", "DOUBLE", "UINT32", "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    return t >= 0 && t <= 16 ? names[t] : "type " + std::to_string(t);
}

// A TensorProto as a kiln tensor (raw_data or the typed fields), every size checked.
inline tensor read_onnx_tensor(pb_reader r, std::string& name) {
    std::vector<std::int64_t> dims_v, i64;
    std::int64_t type = 0;
    std::string_view raw;
    bool has_raw = false;
    std::vector<float> f32;
    std::vector<double> f64;
    while (!r.done()) {
        const auto [field, wire] = r.key();
        switch (field) {
            case 1: r.ints(wire, dims_v, max_rank); break;
            case 2: type = static_cast<std::int64_t>(r.varint()); break;
            case 4:  // float_data
                if (wire == 2) {
                    pb_reader q = r.sub();
                    while (!q.done()) {
                        const std::uint32_t u = q.fixed32();
                        float v;
                        std::memcpy(&v, &u, 4);
                        f32.push_back(v);
                    }
                } else if (wire == 5) {
                    const std::uint32_t u = r.fixed32();
                    float v;
                    std::memcpy(&v, &u, 4);
                    f32.push_back(v);
                } else {
                    r.fail("float_data has wire type " + std::to_string(wire));
                }
                break;
            case 5:  // int32_data (int32, bool)
            case 7:  // int64_data
                r.ints(wire, i64, std::size_t{1} << 28);
                break;
            case 8: name = r.text(wire); break;
            case 9:
                if (wire != 2) r.fail("raw_data has wire type " + std::to_string(wire));
                raw = r.bytes();
                has_raw = true;
                break;
            case 10:  // double_data
                if (wire != 2) r.fail("double_data must be packed");
                {
                    pb_reader q = r.sub();
                    if ((q.end - q.p) % 8) q.fail("double_data is not a whole number of doubles");
                    while (!q.done()) {
                        std::uint64_t u = 0;
                        for (int i = 7; i >= 0; --i) u = (u << 8) | q.p[i];
                        q.p += 8;
                        double v;
                        std::memcpy(&v, &u, 8);
                        f64.push_back(v);
                    }
                }
                break;
            case 13:
            case 14: r.fail("tensor '" + json::reader::printable(name) + "' keeps its data in an external file, which kiln does not read");
            default: r.skip(wire);
        }
    }
    const auto d = from_onnx_dtype(type);
    if (!d) r.fail("tensor '" + json::reader::printable(name) + "' is " + onnx_dtype_name(type) + ", a dtype kiln does not have");
    dims shape;
    shape.rank = static_cast<int>(dims_v.size());
    std::uint64_t numel = 1;
    for (std::size_t i = 0; i < dims_v.size(); ++i) {
        if (dims_v[i] < 0 || dims_v[i] > (std::int64_t{1} << 40)) r.fail("tensor '" + json::reader::printable(name) + "' has a bad extent");
        shape[static_cast<int>(i)] = static_cast<std::ptrdiff_t>(dims_v[i]);
        numel = numel > 0 && static_cast<std::uint64_t>(dims_v[i]) > (std::uint64_t{1} << 40) / numel ? std::uint64_t{1} << 41
                                                                                                     : numel * static_cast<std::uint64_t>(dims_v[i]);
    }
    if (numel > (std::uint64_t{1} << 40)) r.fail("tensor '" + json::reader::printable(name) + "' has too many elements");
    const std::uint64_t bytes = numel * size_of(*d);
    std::uint64_t given = has_raw ? raw.size() : *d == dtype::float32 ? f32.size() * 4 : *d == dtype::float64 ? f64.size() * 8
                                                                     : i64.size() * size_of(*d);
    if (given != bytes)
        r.fail("tensor '" + json::reader::printable(name) + "' of shape " + to_string(shape) + " needs " + std::to_string(bytes) +
               " bytes of data and has " + std::to_string(given));
    tensor t(*d, shape);
    auto* out = static_cast<unsigned char*>(t.raw_data());
    if (has_raw) {
        if (bytes) std::memcpy(out, raw.data(), static_cast<std::size_t>(bytes));
        if (*d == dtype::boolean)
            for (std::uint64_t k = 0; k < bytes; ++k) out[k] = out[k] != 0;
    } else if (*d == dtype::float32) {
        if (bytes) std::memcpy(out, f32.data(), static_cast<std::size_t>(bytes));
    } else if (*d == dtype::float64) {
        if (bytes) std::memcpy(out, f64.data(), static_cast<std::size_t>(bytes));
    } else {
        dispatch(*d, [&]<class T>() {
            T* q = t.data<T>();
            for (std::size_t k = 0; k < i64.size(); ++k) {
                if constexpr (std::is_same_v<T, bool>) q[k] = i64[k] != 0;
                else q[k] = static_cast<T>(i64[k]);
            }
        });
    }
    return t;
}

// An int64 (or int32) tensor's values, for the inputs ONNX gives as tensors (shapes, axes, starts).
inline std::vector<std::int64_t> int_values(const tensor& t, const char* what) {
    if (t.dtype() != dtype::int64 && t.dtype() != dtype::int32)
        throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " must be int64, not " + std::string(name(t.dtype())));
    if (t.numel() > 64) throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " has more than 64 entries");
    const tensor c = t.contiguous().to(dtype::int64);
    const std::int64_t* p = c.data<std::int64_t>();
    return std::vector<std::int64_t>(p, p + c.numel());
}

inline dims dims_of(const std::vector<std::int64_t>& v, const char* what) {
    if (v.size() > static_cast<std::size_t>(max_rank))
        throw value_error(std::string("kiln: value_error in 'load_onnx': ") + what + " has more than " + std::to_string(max_rank) + " entries");
    dims d;
    d.rank = static_cast<int>(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) d[static_cast<int>(i)] = static_cast<std::ptrdiff_t>(v[i]);
    return d;
}

struct onnx_importer {
    std::string file;
    load_options opt;

    template <int N = 0>
    loaded_function read(const unsigned char* data, std::size_t size) {
        pb_reader model{data, data + size, &file, 0};
        std::string graph_bytes_owner;
        pb_reader graph{nullptr, nullptr, &file, 0};
        bool have_graph = false;
        std::int64_t ir = 0, opset = -1;
        while (!model.done()) {
            const auto [field, wire] = model.key();
            if (field == 1 && wire == 0) {
                ir = static_cast<std::int64_t>(model.varint());
            } else if (field == 7 && wire == 2) {
                graph = model.sub();
                have_graph = true;
            } else if (field == 8 && wire == 2) {
                pb_reader o = model.sub();
                std::string domain;
                std::int64_t version = 0;
                while (!o.done()) {
                    const auto [f2, w2] = o.key();
                    if (f2 == 1) domain = o.text(w2);
                    else if (f2 == 2 && w2 == 0) version = static_cast<std::int64_t>(o.varint());
                    else o.skip(w2);
                }
                if (domain.empty() || domain == "ai.onnx") opset = version;
                else model.fail("the model imports operator set '" + json::reader::printable(domain) + "', which kiln does not read");
            } else {
                model.skip(wire);
            }
        }
        if (!have_graph) model.fail("the model has no graph (is this an ONNX file?)");
        if (ir < 3 || ir > 10) model.fail("IR version " + std::to_string(ir) + "; kiln reads IR versions 3 to 10");
        if (opset < 13 || opset > 17) model.fail("opset " + std::to_string(opset) + "; kiln reads opsets 13 to 17 of the default domain");

        // The graph's parts.
        std::vector<pb_reader> nodes, inputs, outputs;
        std::vector<std::pair<std::string, tensor>> inits;
        std::string graph_name = "onnx";
        while (!graph.done()) {
            const auto [field, wire] = graph.key();
            if (wire != 2) {
                graph.skip(wire);
                continue;
            }
            switch (field) {
                case 1: nodes.push_back(graph.sub()); break;
                case 2: graph_name = std::string(graph.bytes()); break;
                case 5: {
                    std::string nm;
                    tensor t = read_onnx_tensor(graph.sub(), nm);
                    inits.emplace_back(std::move(nm), std::move(t));
                    break;
                }
                case 11: inputs.push_back(graph.sub()); break;
                case 12: outputs.push_back(graph.sub()); break;
                case 15: graph.fail("the graph has sparse initializers, which kiln does not read");
                default: graph.skip(wire);
            }
            if (nodes.size() > function_max_nodes) graph.fail("the graph has more than " + std::to_string(function_max_nodes) + " nodes");
        }

        loaded_function f;
        f.name_ = graph_name;
        auto exe = std::make_shared<executable>();
        function_graph& g = exe->graph;
        std::map<std::string, std::int32_t> value;
        auto define = [&](const std::string& nm, graph_node n, pb_reader& at) {
            if (nm.empty()) at.fail("a value has an empty name");
            if (value.count(nm)) at.fail("value '" + json::reader::printable(nm) + "' is defined twice");
            value[nm] = static_cast<std::int32_t>(g.nodes.size());
            g.nodes.push_back(std::move(n));
        };
        for (auto& [nm, t] : inits) {
            graph_node n;
            n.kind = node_kind::constant;
            n.dtype = t.dtype();
            n.shape = t.shape();
            n.value = t;
            n.op = "";
            define(nm, std::move(n), graph);
        }
        // Arguments: the graph inputs that are not initializers; each dynamic dimension named by its dim_param.
        std::map<std::string, int> dim_names;
        std::vector<tensor> examples;
        int argc = 0;
        for (pb_reader& in : inputs) {
            std::string nm;
            std::int64_t elem = 0;
            bool has_shape = false;
            std::vector<std::ptrdiff_t> shape;
            std::vector<std::string> params;
            while (!in.done()) {
                const auto [field, wire] = in.key();
                if (field == 1) {
                    nm = in.text(wire);
                } else if (field == 2 && wire == 2) {
                    pb_reader type = in.sub();
                    while (!type.done()) {
                        const auto [tf, tw] = type.key();
                        if (tf != 1 || tw != 2) {
                            if (tf == 4 || tf == 5) type.fail("input '" + json::reader::printable(nm) + "' is not a tensor");
                            type.skip(tw);
                            continue;
                        }
                        pb_reader tt = type.sub();
                        while (!tt.done()) {
                            const auto [f3, w3] = tt.key();
                            if (f3 == 1 && w3 == 0) {
                                elem = static_cast<std::int64_t>(tt.varint());
                            } else if (f3 == 2 && w3 == 2) {
                                has_shape = true;
                                pb_reader sh = tt.sub();
                                while (!sh.done()) {
                                    const auto [f4, w4] = sh.key();
                                    if (f4 != 1 || w4 != 2) {
                                        sh.skip(w4);
                                        continue;
                                    }
                                    pb_reader dim = sh.sub();
                                    std::ptrdiff_t e = dyn;
                                    std::string param;
                                    while (!dim.done()) {
                                        const auto [f5, w5] = dim.key();
                                        if (f5 == 1 && w5 == 0) {
                                            const std::uint64_t v = dim.varint();
                                            if (v > (std::uint64_t{1} << 40)) dim.fail("an input extent is out of range");
                                            e = static_cast<std::ptrdiff_t>(v);
                                        } else if (f5 == 2) {
                                            param = dim.text(w5);
                                        } else {
                                            dim.skip(w5);
                                        }
                                    }
                                    shape.push_back(e);
                                    params.push_back(e == dyn ? (param.empty() ? "?" + std::to_string(shape.size()) + nm : param) : "");
                                    if (shape.size() > static_cast<std::size_t>(max_rank)) sh.fail("an input has more than 8 dimensions");
                                }
                            } else {
                                tt.skip(w3);
                            }
                        }
                    }
                } else {
                    in.skip(wire);
                }
            }
            if (value.count(nm)) continue;  // an initializer listed as an input too (older exporters)
            const auto d = from_onnx_dtype(elem);
            if (!d) in.fail("input '" + json::reader::printable(nm) + "' is " + onnx_dtype_name(elem) + ", a dtype kiln does not have");
            if (!has_shape) in.fail("input '" + json::reader::printable(nm) + "' has no shape (kiln needs its rank)");
            graph_node n;
            n.kind = node_kind::argument;
            n.argument = argc++;
            n.dtype = *d;
            dims ex;
            ex.rank = static_cast<int>(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i) {
                std::ptrdiff_t e = shape[i];
                if (e == dyn) {
                    auto it = dim_names.find(params[i]);
                    if (it == dim_names.end()) it = dim_names.emplace(params[i], static_cast<int>(dim_names.size())).first;
                    f.group_.push_back(it->second);
                    e = 2 + it->second;  // (distinct extents for distinct names while checking)
                    f.traced_.push_back(e);
                }
                ex[static_cast<int>(i)] = e;
            }
            n.shape = ex;
            f.specs_.emplace_back(*d, shape);
            examples.push_back(zeros(ex, *d));
            define(nm, std::move(n), in);
        }

        // Nodes, in the graph's (topological) order.
        for (std::size_t k = 0; k < nodes.size(); ++k) {
            pb_reader& r = nodes[k];
            std::vector<std::string> ins, outs;
            std::string op_type, domain, node_name;
            std::vector<onnx_attr> attrs;
            while (!r.done()) {
                const auto [field, wire] = r.key();
                switch (field) {
                    case 1: ins.push_back(r.text(wire)); break;
                    case 2: outs.push_back(r.text(wire)); break;
                    case 3: node_name = r.text(wire); break;
                    case 4: op_type = r.text(wire); break;
                    case 7: domain = r.text(wire); break;
                    case 5: {
                        if (wire != 2) r.fail("an attribute has wire type " + std::to_string(wire));
                        pb_reader a = r.sub();
                        onnx_attr at;
                        while (!a.done()) {
                            const auto [af, aw] = a.key();
                            switch (af) {
                                case 1: at.name = a.text(aw); break;
                                case 2: {
                                    const std::uint32_t u = a.fixed32();
                                    std::memcpy(&at.f, &u, 4);
                                    break;
                                }
                                case 3: at.i = static_cast<std::int64_t>(a.varint()); break;
                                case 4: at.s = a.text(aw); break;
                                case 5: {
                                    std::string tn;
                                    at.t = read_onnx_tensor(a.sub(), tn);
                                    at.has_t = true;
                                    break;
                                }
                                case 6:
                                case 11: a.fail("node " + std::to_string(k) + " has a graph attribute (subgraphs are not read)");
                                case 8: a.ints(aw, at.ints, 64); break;
                                case 20: at.type = static_cast<int>(a.varint()); break;
                                default: a.skip(aw);
                            }
                        }
                        attrs.push_back(std::move(at));
                        break;
                    }
                    default: r.skip(wire);
                }
                if (ins.size() > 4096 || outs.size() > 16 || attrs.size() > 64) r.fail("node " + std::to_string(k) + " is too large");
            }
            const std::string where = "node " + std::to_string(k) + " ('" + json::reader::printable(op_type) + "'" +
                                      (node_name.empty() ? "" : " " + json::reader::printable(node_name)) + ")";
            if (!domain.empty() && domain != "ai.onnx") r.fail(where + " is of domain '" + json::reader::printable(domain) + "'");
            std::vector<std::int32_t> in_values;
            for (const std::string& i : ins) {
                if (i.empty()) {
                    in_values.push_back(-1);  // an optional input left out
                    continue;
                }
                const auto it = value.find(i);
                if (it == value.end()) r.fail(where + " takes '" + json::reader::printable(i) + "', which no earlier node or input defines");
                in_values.push_back(it->second);
            }
            auto A = [&](const char* nm) -> const onnx_attr* {
                for (const onnx_attr& a : attrs)
                    if (a.name == nm) return &a;
                return nullptr;
            };
            auto ai = [&](const char* nm, std::int64_t dflt) { const onnx_attr* a = A(nm); return a ? a->i : dflt; };
            replay_fn fn;
            std::size_t lo = 1, hi = 1;
            try {
                fn = make_op<N>(op_type, opset, A, ai, lo, hi);
            } catch (const value_error& e) {
                r.fail(where + ": " + e.what());
            }
            if (in_values.size() < lo || in_values.size() > hi)
                r.fail(where + " has " + std::to_string(in_values.size()) + " inputs; kiln reads it with " +
                       (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)));
            std::size_t used_outputs = 0;
            for (const std::string& o : outs) used_outputs += !o.empty();
            if (outs.empty() || outs[0].empty() || used_outputs != 1)
                r.fail(where + " has " + std::to_string(used_outputs) + " outputs in use; kiln reads ops of one output");
            graph_node n;
            n.kind = node_kind::op;
            n.op = op_type;
            // Left-out optional inputs: pass an empty tensor (the op's code sees it as absent).
            std::vector<std::int32_t> present;
            std::vector<char> is_present;
            for (std::int32_t v : in_values) {
                is_present.push_back(v >= 0);
                if (v >= 0) present.push_back(v);
            }
            n.inputs = present;
            if (std::find(is_present.begin(), is_present.end(), 0) != is_present.end())
                n.fn = [inner = std::move(fn), is_present](auto in, auto p) {
                    std::vector<tensor> all;
                    std::size_t j = 0;
                    for (char pr : is_present) all.push_back(pr ? in[j++] : tensor());
                    return inner(all, p);
                };
            else
                n.fn = std::move(fn);
            define(outs[0], std::move(n), r);
        }
        for (pb_reader& o : outputs) {
            std::string nm;
            while (!o.done()) {
                const auto [field, wire] = o.key();
                if (field == 1) nm = o.text(wire);
                else o.skip(wire);
            }
            const auto it = value.find(nm);
            if (it == value.end()) o.fail("output '" + json::reader::printable(nm) + "' is not a value of the graph");
            g.outputs.push_back(it->second);
        }
        if (f.specs_.size() > 1024) graph.fail("more than 1024 inputs");

        // Run once on zeros at example extents: each op's dtype and shape, and every failure named by its node.
        std::vector<tensor> vals(g.nodes.size());
        for (std::size_t i = 0; i < g.nodes.size(); ++i) {
            graph_node& n = g.nodes[i];
            if (n.kind == node_kind::argument) vals[i] = examples[static_cast<std::size_t>(n.argument)];
            else if (n.kind == node_kind::constant) vals[i] = n.value;
            else {
                std::vector<tensor> in;
                for (std::int32_t v : n.inputs) in.push_back(vals[static_cast<std::size_t>(v)]);
                try {
                    vals[i] = n.fn(in, {});
                } catch (const error& e) {
                    throw file_error("kiln: file_error in 'load_onnx': '" + file + "': the op of value %" + std::to_string(i) +
                                     " ('" + n.op + "') fails on inputs of the declared shapes: " + e.what());
                }
                if (static_cast<std::uint64_t>(vals[i].numel()) * vals[i].itemsize() > opt.max_node_bytes)
                    throw file_error("kiln: file_error in 'load_onnx': '" + file + "': value %" + std::to_string(i) + " ('" + n.op +
                                     "') is larger than load_options::max_node_bytes");
            }
            n.dtype = vals[i].dtype();
            n.shape = vals[i].shape();
        }
        exe->traced = g;
        exe->traced_extents = f.traced_;
        exe->prepare();
        f.exe_ = std::move(exe);
        return f;
    }

    // The kernel of an ONNX op (opsets 13 to 17): eager kiln ops on the inputs, which the executor passes in order.
    template <int N, class Attr, class AttrInt>
    static replay_fn make_op(const std::string& op, std::int64_t opset, Attr&& A, AttrInt&& ai, std::size_t& lo, std::size_t& hi) {
        (void)opset;
        static const std::map<std::string, std::string> unary = {
            {"Neg", "neg"}, {"Abs", "abs"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Sin", "sin"}, {"Cos", "cos"},
            {"Tan", "tan"}, {"Asin", "asin"}, {"Acos", "acos"}, {"Atan", "atan"}, {"Tanh", "tanh"}, {"Erf", "erf"},
            {"Floor", "floor"}, {"Ceil", "ceil"}, {"Round", "round"}, {"Sign", "sign"}, {"Sigmoid", "sigmoid"},
            {"Relu", "relu"}, {"Softplus", "softplus"}, {"IsNaN", "isnan"}, {"Not", "logical_not"}};
        static const std::map<std::string, std::string> binary = {
            {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}, {"Less", "less"},
            {"LessOrEqual", "less_equal"}, {"Greater", "greater"}, {"GreaterOrEqual", "greater_equal"}, {"Equal", "equal"},
            {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "logical_xor"}};
        lo = hi = 1;
        if (auto it = unary.find(op); it != unary.end()) {
            const op_schema* s = find_op_or_null<N>(it->second);
            return [k = s->kernel](auto in, auto) { return k(in, {}); };
        }
        if (auto it = binary.find(op); it != binary.end()) {
            lo = hi = 2;
            const op_schema* s = find_op_or_null<N>(it->second);
            const bool integer_div = op == "Div";
            return [k = s->kernel, integer_div](auto in, auto) {
                // ONNX divides integers with truncation; kiln's div is true division.
                if (integer_div && !is_floating(in[0].dtype())) {
                    const auto q = k(in, {});
                    const auto t = where(q < 0.0, ceil(q), floor(q));
                    return t.to(in[0].dtype());
                }
                return k(in, {});
            };
        }
        if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
            lo = 1, hi = 64;
            const bool mx = op == "Max", mn = op == "Min", mean_op = op == "Mean";
            return [mx, mn, mean_op](auto in, auto) {
                auto acc = in[0];
                for (std::size_t i = 1; i < in.size(); ++i) acc = mx ? maximum(acc, in[i]) : mn ? minimum(acc, in[i]) : acc + in[i];
                if (mean_op) acc = acc / static_cast<double>(in.size());
                return acc;
            };
        }
        if (op == "Identity" || op == "Dropout") {
            hi = op == "Dropout" ? 3 : 1;
            return [](auto in, auto) { return in[0]; };
        }
        if (op == "IsInf") {
            const std::int64_t pos = ai("detect_positive", 1), neg = ai("detect_negative", 1);
            return [pos, neg](auto in, auto) {
                const auto x = in[0];
                if (pos && neg) return isinf(x);
                if (pos) return logical_and(isinf(x), x > 0.0);
                if (neg) return logical_and(isinf(x), x < 0.0);
                return isinf(x) & false;
            };
        }
        if (op == "Reciprocal") return [](auto in, auto) { return 1.0 / in[0]; };
        if (op == "Elu") {
            const onnx_attr* a = A("alpha");
            const double alpha = a ? a->f : 1.0;
            return [alpha](auto in, auto) { return where(in[0] > 0.0, in[0], alpha * expm1(in[0])); };
        }
        if (op == "LeakyRelu") {
            const onnx_attr* a = A("alpha");
            const double alpha = a ? a->f : 0.01;
            return [alpha](auto in, auto) { return where(in[0] < 0.0, in[0] * alpha, in[0]); };
        }
        if (op == "Where") {
            lo = hi = 3;
            return [](auto in, auto) { return where(in[0], in[1], in[2]); };
        }
        if (op == "Cast") {
            const auto d = from_onnx_dtype(ai("to", 0));
            if (!d) throw value_error("casts to " + onnx_dtype_name(ai("to", 0)) + ", a dtype kiln does not have");
            return [d = *d](auto in, auto) { return in[0].to(d); };
        }
        if (op == "MatMul") {
            lo = hi = 2;
            return [](auto in, auto) { return matmul(in[0], in[1]); };
        }
        if (op == "Gemm") {
            lo = 2, hi = 3;
            const onnx_attr* al = A("alpha");
            const onnx_attr* be = A("beta");
            const double alpha = al ? al->f : 1.0, beta = be ? be->f : 1.0;
            const bool ta = ai("transA", 0) != 0, tb = ai("transB", 0) != 0;
            return [alpha, beta, ta, tb](auto in, auto) {
                if (in[0].dim() != 2 || in[1].dim() != 2) throw shape_error("kiln: shape_error in 'Gemm': A and B must be matrices");
                auto y = matmul(ta ? in[0].transpose(0, 1) : in[0], tb ? in[1].transpose(0, 1) : in[1]);
                if (alpha != 1.0) y = y * alpha;
                if (in.size() > 2 && in[2].valid()) y = beta == 1.0 ? y + in[2] : y + in[2] * beta;
                return y;
            };
        }
        if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
            const bool axes_input = op == "ReduceSum";  // (opset 13: ReduceSum's axes are an input; the others', attributes)
            lo = 1, hi = axes_input ? 2 : 1;
            std::vector<std::int64_t> attr_axes;
            if (const onnx_attr* a = A("axes")) attr_axes = a->ints;
            const bool keep = ai("keepdims", 1) != 0, noop = ai("noop_with_empty_axes", 0) != 0;
            const int which = op == "ReduceSum" ? 0 : op == "ReduceMean" ? 1 : op == "ReduceMax" ? 2 : op == "ReduceMin" ? 3 : 4;
            return [attr_axes, keep, noop, which](auto in, auto) {
                std::vector<std::int64_t> ax = attr_axes;
                if (in.size() > 1 && in[1].valid()) ax = int_values(in[1], "the axes");
                if (ax.empty() && noop) return in[0];
                std::vector<int> axes;
                for (std::int64_t a : ax) {
                    if (a < -max_rank || a >= max_rank) throw value_error("kiln: value_error in 'load_onnx': an axis is out of range");
                    axes.push_back(static_cast<int>(a));
                }
                switch (which) {
                    case 0: return sum(in[0], axes, keep).to(in[0].dtype());
                    case 1: return mean(in[0], axes, keep);
                    case 2: return max(in[0], axes, keep);
                    case 3: return min(in[0], axes, keep);
                    default: return prod(in[0], axes, keep).to(in[0].dtype());
                }
            };
        }
        if (op == "ArgMax" || op == "ArgMin") {
            if (ai("select_last_index", 0)) throw value_error("select_last_index is not read");
            const int axis = static_cast<int>(ai("axis", 0));
            const bool keep = ai("keepdims", 1) != 0, is_max = op == "ArgMax";
            return [axis, keep, is_max](auto in, auto) {
                return is_max ? argmax(in[0], axis, keep) : argmin(in[0], axis, keep);
            };
        }
        if (op == "Softmax" || op == "LogSoftmax") {
            const int axis = static_cast<int>(ai("axis", -1));
            const bool log_op = op == "LogSoftmax";
            return [axis, log_op](auto in, auto) {
                return log_op ? nn::log_softmax(in[0], axis) : nn::softmax(in[0], axis);
            };
        }
        if (op == "Reshape") {
            lo = hi = 2;
            const bool allowzero = ai("allowzero", 0) != 0;
            return [allowzero](auto in, auto) {
                std::vector<std::int64_t> s = int_values(in[1], "Reshape's shape");
                for (std::size_t i = 0; i < s.size(); ++i)
                    if (s[i] == 0 && !allowzero) {
                        if (static_cast<int>(i) >= in[0].dim()) throw shape_error("kiln: shape_error in 'Reshape': a 0 copies a dimension the input lacks");
                        s[i] = in[0].shape()[static_cast<int>(i)];
                    }
                return in[0].reshape(dims_of(s, "Reshape's shape"));
            };
        }
        if (op == "Flatten") {
            const std::int64_t axis = ai("axis", 1);
            return [axis](auto in, auto) {
                const int r = in[0].dim();
                const int a = static_cast<int>(axis < 0 ? axis + r : axis);
                if (a < 0 || a > r) throw value_error("kiln: value_error in 'Flatten': the axis is out of range");
                std::ptrdiff_t outer = 1, inner = 1;
                for (int i = 0; i < r; ++i) (i < a ? outer : inner) *= in[0].shape()[i];
                return in[0].reshape({outer, inner});
            };
        }
        if (op == "Expand") {
            lo = hi = 2;
            return [](auto in, auto) {
                const dims want = dims_of(int_values(in[1], "Expand's shape"), "Expand's shape");
                dims out;
                if (!broadcast_into(in[0].shape(), want, out)) throw shape_error("kiln: shape_error in 'Expand': cannot broadcast");
                return in[0].broadcast_to(out);
            };
        }
        if (op == "Transpose") {
            std::vector<std::int64_t> perm;
            if (const onnx_attr* a = A("perm")) perm = a->ints;
            return [perm](auto in, auto) {
                const int r = in[0].dim();
                std::array<int, max_rank> fwd{};
                bool seen[max_rank] = {};
                if (!perm.empty() && static_cast<int>(perm.size()) != r) throw value_error("kiln: value_error in 'Transpose': perm has the wrong length");
                for (int i = 0; i < r; ++i) {
                    const std::int64_t ax = perm.empty() ? r - 1 - i : perm[static_cast<std::size_t>(i)];
                    if (ax < 0 || ax >= r || seen[ax]) throw value_error("kiln: value_error in 'Transpose': perm is not a permutation");
                    seen[ax] = true;
                    fwd[static_cast<std::size_t>(i)] = static_cast<int>(ax);
                }
                return in[0].permute_array(fwd, r);
            };
        }
        if (op == "Slice") {
            lo = 3, hi = 5;
            return [](auto in, auto) {
                const auto starts = int_values(in[1], "Slice's starts"), ends = int_values(in[2], "Slice's ends");
                std::vector<std::int64_t> axes, steps;
                if (in.size() > 3 && in[3].valid()) axes = int_values(in[3], "Slice's axes");
                if (in.size() > 4 && in[4].valid()) steps = int_values(in[4], "Slice's steps");
                if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size()) ||
                    (!steps.empty() && steps.size() != starts.size()))
                    throw value_error("kiln: value_error in 'Slice': starts, ends, axes and steps differ in length");
                auto x = in[0];
                for (std::size_t i = 0; i < starts.size(); ++i) {
                    const std::int64_t ax = axes.empty() ? static_cast<std::int64_t>(i) : axes[i];
                    if (ax < -x.dim() || ax >= x.dim()) throw value_error("kiln: value_error in 'Slice': an axis is out of range");
                    const std::int64_t step = steps.empty() ? 1 : steps[i];
                    if (step == 0) throw value_error("kiln: value_error in 'Slice': a step is 0");
                    // (ONNX's INT64_MAX and INT64_MIN mean "to the end": kiln clamps as Python does.)
                    auto clampi = [](std::int64_t v) { return std::clamp<std::int64_t>(v, -(std::int64_t{1} << 50), std::int64_t{1} << 50); };
                    x = x.slice(static_cast<int>(ax), clampi(starts[i]), clampi(ends[i]), clampi(step));
                }
                return x;
            };
        }
        if (op == "Gather") {
            lo = hi = 2;
            const int axis = static_cast<int>(ai("axis", 0));
            return [axis](auto in, auto) {
                const auto& x = in[0];
                if (in[1].dtype() != dtype::int64 && in[1].dtype() != dtype::int32)
                    throw dtype_error("kiln: dtype_error in 'Gather': indices must be int32 or int64");
                const int ax = axis < 0 ? axis + x.dim() : axis;
                if (ax < 0 || ax >= x.dim()) throw value_error("kiln: value_error in 'Gather': the axis is out of range");
                if (in[1].dim() == 0) return x.select(ax, in[1].to(dtype::int64).contiguous().template data<std::int64_t>()[0]);
                const auto flat = in[1].to(dtype::int64).reshape({-1});
                const auto picked = index_select(x, ax, flat);
                dims s;
                s.rank = 0;
                for (int i = 0; i < ax; ++i) s[s.rank++] = x.shape()[i];
                for (int i = 0; i < in[1].dim(); ++i) {
                    if (s.rank >= max_rank) throw value_error("kiln: value_error in 'Gather': the result has more than 8 dimensions");
                    s[s.rank++] = in[1].shape()[i];
                }
                for (int i = ax + 1; i < x.dim(); ++i) {
                    if (s.rank >= max_rank) throw value_error("kiln: value_error in 'Gather': the result has more than 8 dimensions");
                    s[s.rank++] = x.shape()[i];
                }
                return picked.reshape(s);
            };
        }
        if (op == "Squeeze" || op == "Unsqueeze") {
            lo = op == "Squeeze" ? 1 : 2, hi = 2;
            const bool squeeze = op == "Squeeze";
            return [squeeze](auto in, auto) {
                auto x = in[0];
                if (squeeze && (in.size() < 2 || !in[1].valid())) return x.squeeze();
                std::vector<std::int64_t> axes = int_values(in[1], "the axes");
                const int r = x.dim() + (squeeze ? 0 : static_cast<int>(axes.size()));
                for (std::int64_t& a : axes) {
                    if (a < -r || a >= r) throw value_error("kiln: value_error in 'load_onnx': an axis is out of range");
                    if (a < 0) a += r;
                }
                std::sort(axes.begin(), axes.end());
                if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) throw value_error("kiln: value_error in 'load_onnx': an axis repeats");
                if (squeeze)
                    for (auto it = axes.rbegin(); it != axes.rend(); ++it) x = x.squeeze(static_cast<int>(*it));
                else
                    for (std::int64_t a : axes) x = x.unsqueeze(static_cast<int>(a));
                return x;
            };
        }
        if (op == "Concat") {
            lo = 1, hi = 4096;
            const int axis = static_cast<int>(ai("axis", 0));
            return [axis](auto in, auto) { return concat(std::vector<tensor>(in.begin(), in.end()), axis); };
        }
        if (op == "Shape") {
            return [](auto in, auto) {
                tensor s(dtype::int64, dims{in[0].dim()});
                for (int i = 0; i < in[0].dim(); ++i) s.data<std::int64_t>()[i] = in[0].shape()[i];
                return s;
            };
        }
        if (op == "Constant") {
            lo = hi = 0;
            const onnx_attr* v = A("value");
            if (!v || !v->has_t) throw value_error("Constant without a 'value' tensor is not read");
            return [t = v->t](auto, auto) { return t; };
        }
        if (op == "ConstantOfShape") {
            const onnx_attr* v = A("value");
            if (v && (!v->has_t || v->t.numel() != 1)) throw value_error("its value must be a one-element tensor");
            const tensor value = v ? v->t.reshape(dims{}) : zeros(dims{}, dtype::float32);
            return [value](auto in, auto) {
                const dims s = dims_of(int_values(in[0], "ConstantOfShape's shape"), "ConstantOfShape's shape");
                checked_numel(s, "ConstantOfShape");
                return value.broadcast_to(s).contiguous();
            };
        }
        throw value_error("ONNX op '" + json::reader::printable(op) + "' has no reading in kiln");
    }
};

}  // namespace detail

// Reads an ONNX model (opsets 13 to 17 of the default domain) into a callable that runs it with kiln's kernels.
// The model is untrusted input: every length, count and size is checked as it is read; an op kiln does not read,
// another domain, an unsupported dtype, subgraphs or external data are kiln::file_errors naming them; the model is
// run once on zeros of its inputs' shapes (dynamic dimensions at small extents) before it is returned, so an op
// that fails on them is named then.
template <int N = 0>
loaded_function load_onnx_bytes(const void* data, std::size_t size, const std::string& name = "<memory>",
                                const load_options& opt = {}) {
    if (data == nullptr && size > 0) throw value_error("kiln: value_error in 'load_onnx_bytes': null data");
    detail::onnx_importer r{name, opt};
    return r.template read<N>(static_cast<const unsigned char*>(data), size);
}

template <int N = 0>
loaded_function load_onnx(const std::string& path, const load_options& opt = {}) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw file_error("kiln: file_error in 'load_onnx': cannot open '" + path + "'");
    const std::streamoff end = in.tellg();
    if (end < 0) throw file_error("kiln: file_error in 'load_onnx': cannot read the size of '" + path + "'");
    if (static_cast<std::uint64_t>(end) > (std::uint64_t{1} << 34))
        throw file_error("kiln: file_error in 'load_onnx': '" + path + "' is larger than 16 GiB");
    std::string bytes(static_cast<std::size_t>(end), '\0');
    in.seekg(0);
    if (!in.read(bytes.data(), end)) throw file_error("kiln: file_error in 'load_onnx': reading '" + path + "' failed");
    return load_onnx_bytes<N>(bytes.data(), bytes.size(), path, opt);
}

}  // namespace kiln
