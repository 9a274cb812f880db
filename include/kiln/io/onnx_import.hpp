#pragma once
// ONNX import: kiln::load_onnx(path) reads a model of opsets 13 to 17 of the default domain into a
// kiln::loaded_function that runs it with kiln's kernels (ONNX export is io/onnx_export.hpp). A strict reader of
// protobuf's wire format checks every length against what is left; each ONNX op is read as eager mode's ops on its
// inputs; docs/deployment.md lists the ops and what is refused.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "function_file.hpp"

namespace kiln {

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
                    // (Exactly, from kiln's floor division: one more where the remainder is nonzero and the signs
                    // differ.)
                    const auto q = floor_divide(in[0], in[1]);
                    return where(logical_and(not_equal(remainder(in[0], in[1]), 0), logical_xor(in[0] < 0.0, in[1] < 0.0)), q + 1, q);
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
        if (op == "Mod") {
            lo = hi = 2;
            const bool c_fmod = ai("fmod", 0) != 0;
            return [c_fmod](auto in, auto) {
                if (!c_fmod && (is_floating(in[0].dtype()) || is_floating(in[1].dtype())))
                    throw value_error("kiln: value_error in 'Mod': fmod=0 is for integers (ONNX requires fmod=1 for floating numbers)");
                if (!c_fmod) return remainder(in[0], in[1]);  // the divisor's sign, as kiln's remainder
                // C's fmod (the dividend's sign): of magnitudes, kiln's remainder is fmod itself.
                const auto r = remainder(abs(in[0]), abs(in[1]));
                return where(in[0] < 0.0, -r, r);
            };
        }
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
