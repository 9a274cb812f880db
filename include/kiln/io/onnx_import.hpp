#pragma once
// ONNX import: kiln::load_onnx(path) reads a model of opsets 13 to 28 of the default domain into a
// kiln::loaded_function that runs it with kiln's kernels (ONNX export is io/onnx_export.hpp). A strict reader of
// protobuf's wire format checks every length against what is left (io/onnx_read.hpp); each ONNX op is read as eager
// mode's ops on its inputs (io/onnx_ops.hpp); docs/deployment.md lists the ops and what is refused.
#include "../eager/shape_run.hpp"
#include "onnx_ops.hpp"
#include "onnx_read.hpp"

namespace kiln {

namespace detail {

// A graph input's or output's ValueInfoProto: its name, element type (0 when not given) and, where it has a shape,
// each extent (dyn where it is not a number) with its dim_param ("?<axis><name>" for a dynamic extent without one,
// "" for a number). `what` ("input", "output") names it in messages.
struct onnx_declared_value {
    std::string name;
    std::int64_t elem = 0;
    bool has_shape = false;
    std::vector<std::ptrdiff_t> shape;
    std::vector<std::string> params;
};

inline onnx_declared_value read_onnx_declared_value(pb_reader& in, const char* what) {
    onnx_declared_value v;
    while (!in.done()) {
        const auto [field, wire] = in.key();
        if (field == 1) {
            v.name = in.text(wire);
        } else if (field == 2 && wire == 2) {
            pb_reader type = in.sub();
            while (!type.done()) {
                const auto [tf, tw] = type.key();
                if (tf != 1 || tw != 2) {
                    if (tf == 4 || tf == 5) type.fail(std::string(what) + " '" + json::reader::printable(v.name) + "' is not a tensor");
                    type.skip(tw);
                    continue;
                }
                pb_reader tt = type.sub();
                while (!tt.done()) {
                    const auto [f3, w3] = tt.key();
                    if (f3 == 1 && w3 == 0) {
                        v.elem = static_cast<std::int64_t>(tt.varint());
                    } else if (f3 == 2 && w3 == 2) {
                        v.has_shape = true;
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
                                    const std::uint64_t x = dim.varint();
                                    if (x > (std::uint64_t{1} << 40)) dim.fail(std::string("an ") + what + " extent is out of range");
                                    e = static_cast<std::ptrdiff_t>(x);
                                } else if (f5 == 2) {
                                    param = dim.text(w5);
                                } else {
                                    dim.skip(w5);
                                }
                            }
                            v.shape.push_back(e);
                            v.params.push_back(e == dyn ? (param.empty() ? "?" + std::to_string(v.shape.size()) + v.name : param) : "");
                            if (v.shape.size() > static_cast<std::size_t>(max_rank))
                                sh.fail(std::string("an ") + what + " has more than 8 dimensions");
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
    return v;
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
        // (IR versions 11 to 14 add element types, which are refused where they are used, and fields kiln skips.)
        if (ir < 3 || ir > 14) model.fail("IR version " + std::to_string(ir) + "; kiln reads IR versions 3 to 14");
        if (opset < 13 || opset > 28) model.fail("opset " + std::to_string(opset) + "; kiln reads opsets 13 to 28 of the default domain");

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
        std::map<std::string, std::string> unread;  // outputs after an op's first: why nothing may read them
        auto define = [&](const std::string& nm, graph_node n, pb_reader& at) {
            if (nm.empty()) at.fail("a value has an empty name");
            if (value.count(nm) || unread.count(nm)) at.fail("value '" + json::reader::printable(nm) + "' is defined twice");
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
        std::vector<tensor> examples, other_examples;  // (the check runs' inputs: below)
        int argc = 0;
        for (pb_reader& in : inputs) {
            const onnx_declared_value info = read_onnx_declared_value(in, "input");
            const std::string& nm = info.name;
            const std::int64_t elem = info.elem;
            const bool has_shape = info.has_shape;
            const std::vector<std::ptrdiff_t>& shape = info.shape;
            const std::vector<std::string>& params = info.params;
            if (value.count(nm)) continue;  // an initializer listed as an input too (older exporters)
            const auto d = from_onnx_dtype(elem);
            if (!d) in.fail("input '" + json::reader::printable(nm) + "' is " + onnx_dtype_name(elem) + ", a dtype kiln does not have");
            if (!has_shape) in.fail("input '" + json::reader::printable(nm) + "' has no shape (kiln needs its rank)");
            graph_node n;
            n.kind = node_kind::argument;
            n.argument = argc++;
            n.dtype = *d;
            dims ex, other;
            ex.rank = other.rank = static_cast<int>(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i) {
                std::ptrdiff_t e = shape[i], o = shape[i];
                if (e == dyn) {
                    auto it = dim_names.find(params[i]);
                    if (it == dim_names.end()) it = dim_names.emplace(params[i], static_cast<int>(dim_names.size())).first;
                    f.group_.push_back(it->second);
                    e = 2 + it->second;  // (distinct extents for distinct names while checking)
                    o = 3 + 2 * it->second;  // (and other ones, each unlike the first run's: 3, 5, 7, ...)
                    f.traced_.push_back(e);
                }
                ex[static_cast<int>(i)] = e;
                other[static_cast<int>(i)] = o;
            }
            n.shape = ex;
            // The dim_params that are names kiln takes (letters, digits, underscores) name the signature's extents.
            std::vector<std::string> names;
            for (std::size_t i = 0; i < shape.size(); ++i) names.push_back(shape[i] == dyn && valid_dim_name(params[i]) ? params[i] : "");
            f.specs_.emplace_back(*d, shape, std::move(names));
            // The check runs' inputs take no memory (stride 0: a declared extent is untrusted), and their element
            // counts must fit the index type.
            for (const dims& e : {ex, other}) {
                std::int64_t count = 1;
                for (int i = 0; i < e.rank; ++i)
                    if (__builtin_mul_overflow(count, static_cast<std::int64_t>(e[i]), &count) || count > (std::int64_t{1} << 56))
                        in.fail("input '" + json::reader::printable(nm) + "' declares more than 2^56 elements");
            }
            examples.push_back(zeros(dims{}, *d).broadcast_to(ex));
            other_examples.push_back(zeros(dims{}, *d).broadcast_to(other));
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
                if (const auto u = unread.find(i); u != unread.end())
                    r.fail(where + " takes '" + json::reader::printable(i) + "', " + u->second);
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
            // Split and TopK are the ops of several outputs that kiln computes: one node per output.
            const bool split = op_type == "Split" || op_type == "TopK";
            std::vector<replay_fn> fns;
            std::size_t lo = 1, hi = 1;
            try {
                if (op_type == "Split")
                    for (std::size_t o = 0; o < outs.size(); ++o) fns.push_back(onnx_split_kernel(opset, ai, o, outs.size(), lo, hi));
                else if (op_type == "TopK")
                    for (std::size_t o = 0; o < std::min<std::size_t>(outs.size(), 2); ++o) fns.push_back(onnx_topk_kernel(ai, o, lo, hi));
                else
                    fns.push_back(onnx_op_kernel<N>(op_type, opset, A, ai, lo, hi));
            } catch (const value_error& e) {
                r.fail(where + ": " + e.what());
            }
            if (in_values.size() < lo || in_values.size() > hi)
                r.fail(where + " has " + std::to_string(in_values.size()) + " inputs; kiln reads it with " +
                       (lo == hi ? std::to_string(lo) : std::to_string(lo) + " to " + std::to_string(hi)));
            // kiln computes an op's first output. Its other outputs (Dropout's mask, LayerNormalization's mean and
            // inverse deviation) may be named as long as nothing reads them: a node or graph output that does is refused.
            if (outs.empty() || (outs[0].empty() && !split)) r.fail(where + " has no first output; kiln reads an op's first output");
            for (std::size_t o = split ? fns.size() : 1; o < outs.size(); ++o)
                if (!outs[o].empty()) {
                    if (value.count(outs[o]) || unread.count(outs[o]))
                        r.fail("value '" + json::reader::printable(outs[o]) + "' is defined twice");
                    unread[outs[o]] = "output " + std::to_string(o) + " of " + where + ", which kiln does not compute (it reads an op's first output only)";
                }
            // Left-out optional inputs: pass a tensor without storage, whose valid() is false, so that the op's code
            // sees it as absent (a default tensor is a valid empty one: Clip(x, "", max) read it as a bound).
            std::vector<std::int32_t> present;
            std::vector<char> is_present;
            for (std::int32_t v : in_values) {
                is_present.push_back(v >= 0);
                if (v >= 0) present.push_back(v);
            }
            for (std::size_t o = 0; o < fns.size(); ++o) {
                if (outs[o].empty()) continue;  // (a Split's output that the file leaves unnamed)
                replay_fn& fn = fns[o];
                graph_node n;
                n.kind = node_kind::op;
                n.op = op_type;
                n.inputs = present;
                if (std::find(is_present.begin(), is_present.end(), 0) != is_present.end())
                    n.fn = [inner = std::move(fn), is_present](auto in, auto p) {
                        std::vector<tensor> all;
                        std::size_t j = 0;
                        for (char pr : is_present) {
                            if (pr) {
                                all.push_back(in[j++]);
                            } else {
                                tensor left_out, taken = std::move(left_out);  // (moved from: no storage)
                                all.push_back(std::move(left_out));
                            }
                        }
                        return inner(all, p);
                    };
                else
                    n.fn = std::move(fn);
                define(outs[o], std::move(n), r);
            }
        }
        std::vector<onnx_declared_value> declared;  // (each output's declared element type, checked below)
        for (pb_reader& o : outputs) {
            declared.push_back(read_onnx_declared_value(o, "output"));
            const std::string& nm = declared.back().name;
            if (const auto u = unread.find(nm); u != unread.end())
                o.fail("graph output '" + json::reader::printable(nm) + "' is " + u->second);
            const auto it = value.find(nm);
            if (it == value.end()) o.fail("output '" + json::reader::printable(nm) + "' is not a value of the graph");
            g.outputs.push_back(it->second);
        }
        if (f.specs_.size() > 1024) graph.fail("more than 1024 inputs");

        // A check run on zeros of `inputs`' shapes: each op's value from its inputs', every failure named by its
        // node, each value freed after its last use (a run holds only its live values). No result may take more
        // than max_node_bytes: an op is refused before it allocates a larger one. Gives each output's shape; the
        // first run also writes each node's dtype and shape into the graph.
        std::vector<std::size_t> last_use(g.nodes.size());
        for (std::size_t i = 0; i < g.nodes.size(); ++i) {
            last_use[i] = i;  // (a value nobody reads: freed once its dtype and shape are known)
            for (std::int32_t v : g.nodes[i].inputs) last_use[static_cast<std::size_t>(v)] = i;
        }
        for (std::int32_t v : g.outputs) last_use[static_cast<std::size_t>(v)] = g.nodes.size();
        const allocation_cap_scope cap(opt.max_node_bytes);
        // (Under shape_run, eager/shape_run.hpp, an op of large values gives its result by its spec where it has
        // one, a placeholder of one element read with stride 0, and a matrix product gives zeros so: ops of the
        // declared shapes cost nothing, however large. Values that a later op reads as a shape, axes, a count or an
        // index must be exact: the run keeps track of those that are not their ops' values, and where an op reads
        // one, the check starts again with only exact specs, running the other ops, within a budget of elements.)
        auto check_run = [&](const std::vector<tensor>& inputs, bool first, bool exact) {
            std::vector<tensor> vals(g.nodes.size());
            for (std::size_t i = 0; i < g.nodes.size(); ++i) {
                graph_node& n = g.nodes[i];
                if (n.kind == node_kind::argument) vals[i] = inputs[static_cast<std::size_t>(n.argument)];
                else if (n.kind == node_kind::constant) vals[i] = n.value;
                else {
                    std::vector<tensor> in;
                    for (std::int32_t v : n.inputs) in.push_back(vals[static_cast<std::size_t>(v)]);
                    try {
                        vals[i] = n.fn(in, {});
                    } catch (const inexact_value& e) {
                        if (!exact) throw;  // (checked again with exact values)
                        throw file_error("kiln: file_error in 'load_onnx': '" + file + "': the op of value %" + std::to_string(i) +
                                         " ('" + n.op + "') reads " + e.what + " from a matrix product's values, which checking "
                                         "the model at its declared shapes does not compute (more than 2^32 multiply-adds)");
                    } catch (const error& e) {
                        throw file_error("kiln: file_error in 'load_onnx': '" + file + "': the op of value %" + std::to_string(i) +
                                         " ('" + n.op + "') fails on inputs of the declared shapes: " + e.what());
                    }
                    if (static_cast<std::uint64_t>(vals[i].numel()) * vals[i].itemsize() > opt.max_node_bytes)
                        throw file_error("kiln: file_error in 'load_onnx': '" + file + "': value %" + std::to_string(i) + " ('" +
                                         n.op + "') is larger than load_options::max_node_bytes");
                    for (std::int32_t v : n.inputs)
                        if (last_use[static_cast<std::size_t>(v)] == i) vals[static_cast<std::size_t>(v)] = tensor();
                }
                if (first) {
                    n.dtype = vals[i].dtype();
                    n.shape = vals[i].shape();
                }
                if (last_use[i] == i) vals[i] = tensor();
            }
            std::vector<dims> shapes;
            for (std::int32_t v : g.outputs) shapes.push_back(vals[static_cast<std::size_t>(v)].shape());
            return shapes;
        };
        const auto checked = [&](const std::vector<tensor>& inputs, bool first) {
            try {
                const shape_run checking(check_values::tracked);
                return check_run(inputs, first, false);
            } catch (const inexact_value&) {
                const shape_run checking(check_values::exact);
                return check_run(inputs, first, true);
            }
        };
        checked(examples, true);
        // An output computes the element type the model declares (ONNX Runtime refuses a model where they differ).
        for (std::size_t k = 0; k < g.outputs.size(); ++k) {
            const std::int64_t elem = declared[k].elem;
            if (elem == 0) continue;
            const dtype got = g.nodes[static_cast<std::size_t>(g.outputs[k])].dtype;
            if (from_onnx_dtype(elem) != std::optional<dtype>(got))
                throw file_error("kiln: file_error in 'load_onnx': '" + file + "': output '" + json::reader::printable(declared[k].name) +
                                 "' is declared " + onnx_dtype_name(elem) + ", but the model computes " + onnx_dtype_name(onnx_dtype(got)) +
                                 " (" + std::string(kiln::name(got)) + ") for it");
        }
        // With dynamic dimensions, a second run at other extents (3, 5, 7, ... where the first had 2, 3, 4, ...): an
        // output extent that both runs computed, or that followed a dimension in both, is a fact of the model, not a
        // coincidence of one run's extents. Where the model fails at the second extents, its outputs' extents are
        // left unknown.
        const bool any_dynamic = !f.traced_.empty();
        std::vector<dims> other_shapes;  // (each output's, in the second run; empty where it did not run)
        if (any_dynamic) {
            try {
                other_shapes = checked(other_examples, false);
            } catch (const error&) {
                other_shapes.clear();
            }
        }
        // The outputs as declared, where the check runs agree: a declared extent they computed, and a dim_param that
        // names an input's dynamic dimension where the output's extent was that dimension's in both runs.
        for (std::size_t k = 0; k < g.outputs.size(); ++k) {
            const graph_node& o = g.nodes[static_cast<std::size_t>(g.outputs[k])];
            const onnx_declared_value& d = declared[k];
            const bool same_rank = d.has_shape && d.shape.size() == static_cast<std::size_t>(o.shape.rank);
            const bool second = !other_shapes.empty() && other_shapes[k].rank == o.shape.rank;
            std::vector<std::ptrdiff_t> shape(static_cast<std::size_t>(o.shape.rank), dyn);
            std::vector<std::string> names(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i) {
                const std::ptrdiff_t ran = o.shape[static_cast<int>(i)];
                const std::ptrdiff_t ran2 = second ? other_shapes[k][static_cast<int>(i)] : -1;
                if (!any_dynamic || (same_rank && d.shape[i] == ran && ran2 == ran)) {
                    shape[i] = ran;
                } else if (same_rank && d.shape[i] == dyn && valid_dim_name(d.params[i])) {
                    const auto it = dim_names.find(d.params[i]);
                    if (it != dim_names.end() && 2 + it->second == ran && 3 + 2 * it->second == ran2) names[i] = d.params[i];
                }
            }
            f.declared_outputs_.emplace_back(o.dtype, std::move(shape), std::move(names));
        }
        exe->traced = g;
        exe->traced_here = false;
        exe->traced_extents = f.traced_;
        exe->prepare();
        f.exe_ = std::move(exe);
        return f;
    }
};

}  // namespace detail

// Reads an ONNX model (opsets 13 to 28 of the default domain) into a callable that runs it with kiln's kernels.
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
