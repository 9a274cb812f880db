#pragma once
// Traced functions as files: kiln::save writes a kiln::function's run-time graph for one signature (dynamic
// dimensions kept) with the current values of the tensors it captures; kiln::load gives a callable that runs it in
// a program that has none of the model's C++ code. The format is docs/file-format.md:
//
//   bytes 0-7     "KILNFUNC"
//   bytes 8-11    format version, little-endian u32 (1)
//   bytes 12-15   flags, little-endian u32 (0)
//   bytes 16-23   G, the graph's length in bytes, little-endian u64
//   G bytes       the graph as JSON (UTF-8, one node per line: readable by a person)
//   the rest      a safetensors file (kiln/io/safetensors.hpp) holding each captured tensor as "node/<index>"
//
//   auto step = kiln::function(model_fn);
//   kiln::save(step, {kiln::spec(kiln::float32, {kiln::dyn, 10})}, "model.kfn");
//   kiln::loaded_function f = kiln::load("model.kfn");       // elsewhere: no model code needed
//   std::vector<kiln::tensor> y = f(x);
//
// Ops are written by their registry names (kiln/registry.hpp) with a version each, and read back through the
// same vocabulary: the elementwise ops through the registry's kernels, the views, reductions, matmul, concat, casts
// and `full` through eager mode's own functions. A function that writes into tensors (an optimizer step, an
// in-place op, an assignment, kiln::print, a while_loop) cannot be saved yet: kiln::save says which op.
//
// Loading validates everything before it runs anything, and each failure is a kiln::file_error naming the file and
// the node or byte offset: the magic, version and flags; the graph's length against the file; the JSON (strict:
// kiln/io/json.hpp) and every field's kind and range; each op known, in a version this kiln reads, with its arity
// and attributes; inputs that refer only to earlier nodes (so no cycle can be written); the tensors' dtypes and
// shapes against the payload, which must hold exactly the captured tensors; then each op's dtype and shape as its
// own rule gives them (the op run on inputs of stride 0, so no input takes memory) against the file's. A result
// larger than `load_options::max_node_bytes` is refused before anything is allocated for it.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "../eager/shape_run.hpp"
#include "../function/function.hpp"
#include "../registry.hpp"
#include "function_write.hpp"
#include "recorded_ops.hpp"
#include "safetensors.hpp"
#include "value_axes.hpp"

namespace kiln {

struct load_options {
    // The most bytes one node's result may declare (the loader checks each op's rule by running it once on
    // placeholder inputs, which allocates its result).
    std::uint64_t max_node_bytes = std::uint64_t{1} << 31;
};

namespace detail {

inline constexpr std::uint64_t function_max_graph = std::uint64_t{64} << 20;
inline constexpr std::size_t function_max_nodes = std::size_t{1} << 20;
struct onnx_importer;

}  // namespace detail

// A traced function read from a file: call it with tensors of its signature; it returns its results in order.
class loaded_function {
public:
    loaded_function() = default;

    // The arguments it takes: dtype and shape, kiln::dyn for a dynamic extent.
    const std::vector<spec>& signature() const noexcept { return specs_; }
    const std::string& name() const noexcept { return name_; }
    // Its graph, as kiln::to_string and kiln::to_dot print it.
    const function_graph& graph() const {
        check();
        return exe_->graph;
    }
    std::size_t outputs() const { return exe_ ? exe_->graph.outputs.size() : 0; }
    // What it returns, one spec per output: its dtype, its static extents, and kiln::dyn where an extent may change
    // from call to call, with the name of the input extent it always equals where the signature names that extent
    // ("{(batch, 10) float32}" for a classifier of "(batch, 784)" inputs). Worked out from the graph (elementwise
    // ops, products, reductions, casts, axis moves, slices, concats, gathers, windows, reshapes that keep an
    // extent); an extent it cannot follow is dynamic and unnamed.
    // An ONNX model's: its outputs' declared element types and dimensions (dim_params that name an input's
    // dimension are that name), where the model's two check runs at load (at two sets of extents for its dynamic
    // dimensions) agreed with them, and kiln::dyn elsewhere.
    template <int N = 0>
    std::vector<spec> output_signature() const {
        check();
        if (!declared_outputs_.empty()) return declared_outputs_;
        const function_graph& g = exe_->graph;
        const detail::dim_names by_name = detail::dynamic_dim_names(specs_);
        const std::vector<int> first(by_name.first.begin(), by_name.first.end());
        const detail::value_axes axes = detail::value_axes_of<N>(g, specs_, first);
        const std::vector<std::uint32_t>& dynamic = axes.dynamic;
        const std::vector<std::vector<int>>& equal_to = axes.dims;
        std::vector<spec> out;
        for (const std::int32_t v : g.outputs) {
            const std::size_t at = static_cast<std::size_t>(v);
            const graph_node& o = g.nodes[at];
            std::vector<std::ptrdiff_t> shape(static_cast<std::size_t>(o.shape.rank));
            std::vector<std::string> names(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i) {
                const bool moves = dynamic[at] >> i & 1u;
                shape[i] = moves ? dyn : o.shape[static_cast<int>(i)];
                const int d = moves && i < equal_to[at].size() ? equal_to[at][i] : -1;
                if (d >= 0 && static_cast<std::size_t>(d) < by_name.name.size()) names[i] = by_name.name[static_cast<std::size_t>(d)];
            }
            out.emplace_back(o.dtype, std::move(shape), std::move(names));
        }
        return out;
    }
    // The extents its dynamic dimensions had when it was traced (its graph's shapes show them).
    const std::vector<std::ptrdiff_t>& traced_extents() const noexcept { return traced_; }

    std::vector<tensor> operator()(const std::vector<tensor>& args) const {
        check();
        if (args.size() != specs_.size())
            throw value_error(detail::error_prefix("value_error", name_) + "takes " + std::to_string(specs_.size()) +
                              (specs_.size() == 1 ? " argument, not " : " arguments, not ") + std::to_string(args.size()));
        std::vector<std::ptrdiff_t> extents;
        for (std::size_t k = 0; k < args.size(); ++k) {
            const tensor& t = args[k];
            t.check_valid(name_.c_str());
            const spec& sp = specs_[k];
            if (t.dtype() != sp.dtype)
                throw dtype_error(detail::error_prefix("dtype_error", name_) + "argument " + std::to_string(k) + " is " +
                                  std::string(kiln::name(t.dtype())) + ", but its spec is " + kiln::to_string(sp));
            bool fits = static_cast<std::size_t>(t.dim()) == sp.shape.size();
            for (int i = 0; fits && i < t.dim(); ++i)
                fits = sp.shape[static_cast<std::size_t>(i)] == dyn || sp.shape[static_cast<std::size_t>(i)] == t.shape()[i];
            if (!fits)
                throw shape_error(detail::error_prefix("shape_error", name_) + "argument " + std::to_string(k) + " has shape " +
                                  to_string(t.shape()) + ", but its spec is " + kiln::to_string(sp));
            for (int i = 0; i < t.dim(); ++i)
                if (sp.shape[static_cast<std::size_t>(i)] == dyn) extents.push_back(t.shape()[i]);
        }
        if (const auto bad = unequal_extents(extents)) {
            const auto [a, b] = *bad;
            const auto [arg_a, axis_a] = dynamic_at(a);
            const auto [arg_b, axis_b] = dynamic_at(b);
            const std::string& nm = specs_[arg_b].name_of(static_cast<std::size_t>(axis_b));
            throw shape_error(detail::error_prefix("shape_error", name_) + "axis " + std::to_string(axis_b) + " of argument " +
                              std::to_string(arg_b) + (nm.empty() ? std::string() : " ('" + nm + "')") + " is " +
                              std::to_string(extents[b]) + ", but axis " + std::to_string(axis_a) + " of argument " +
                              std::to_string(arg_a) + " is " + std::to_string(extents[a]) +
                              (nm.empty() || specs_[arg_a].name_of(static_cast<std::size_t>(axis_a)) != nm
                                   ? std::string(": dynamic extents that were equal when it was traced must be equal in a call "
                                                 "(a batch of inputs and labels)")
                                   : std::string(": extents of one name must be equal in a call")));
        }
        return exe_->run(args, extents);
    }
    template <class... T>
        requires(std::is_base_of_v<tensor, std::remove_cvref_t<T>> && ...)
    std::vector<tensor> operator()(const T&... args) const {
        return (*this)(std::vector<tensor>{args...});
    }

private:
    template <int N, class Source>
    friend loaded_function read_function(Source&, const std::string&, const load_options&, const char*);
    friend struct detail::onnx_importer;

    void check() const {
        if (!exe_) throw value_error("kiln: value_error in 'loaded_function': it is empty (assign it from kiln::load)");
    }
    // The first two dynamic extents of a call that must be equal and are not.
    std::optional<std::pair<std::size_t, std::size_t>> unequal_extents(const std::vector<std::ptrdiff_t>& e) const {
        for (std::size_t b = 1; b < e.size(); ++b)
            for (std::size_t a = 0; a < b; ++a) {
                if (e[a] == e[b]) continue;
                if (!group_.empty()) {  // (ONNX: dimensions of one name must be equal; others may be anything)
                    if (group_[a] == group_[b]) return std::pair{a, b};
                } else if (traced_[a] == traced_[b]) {  // (traced apart: anything, equal too)
                    return std::pair{a, b};
                } else if (!named_.empty() && named_[a] == named_[b]) {  // (one name: equal, however traced)
                    return std::pair{a, b};
                }
            }
        return std::nullopt;
    }
    // (argument, axis) of dynamic extent d.
    std::pair<std::size_t, int> dynamic_at(std::size_t d) const {
        for (std::size_t k = 0; k < specs_.size(); ++k)
            for (std::size_t i = 0; i < specs_[k].shape.size(); ++i)
                if (specs_[k].shape[i] == dyn && d-- == 0) return {k, static_cast<int>(i)};
        return {0, 0};
    }

    std::shared_ptr<const detail::executable> exe_;
    std::vector<spec> specs_;
    std::vector<std::ptrdiff_t> traced_;
    std::vector<int> group_;  // ONNX: each dynamic dimension's name, as a number
    std::vector<std::uint32_t> named_;  // a kiln file's named extents: detail::dim_name_groups of the signature
    std::vector<spec> declared_outputs_;  // ONNX: the outputs as the model declares them (what its run confirmed)
    std::string name_ = "loaded function";
};

template <int N, class Source>
loaded_function read_function(Source& src, const std::string& file, const load_options& opt, const char* entry) {
    struct failer {
        const char* entry;
        const std::string& file;
        [[noreturn]] void operator()(const std::string& what) const { detail::st_fail(entry, file, what); }
    } const fail{entry, file};
    const std::uint64_t total = src.size();
    if (total < 24) fail("truncated: " + std::to_string(total) + " bytes, and a kiln function file begins with 24");
    unsigned char head[24];
    src.read(0, head, 24);
    if (std::memcmp(head, detail::function_magic, 8) != 0)
        fail("not a kiln function file (it does not begin with \"KILNFUNC\")");
    auto u32 = [&](int at) {
        std::uint32_t v = 0;
        for (int i = 3; i >= 0; --i) v = (v << 8) | head[at + i];
        return v;
    };
    std::uint64_t glen = 0;
    for (int i = 7; i >= 0; --i) glen = (glen << 8) | head[16 + i];
    if (u32(8) != detail::function_format_version)
        fail("format version " + std::to_string(u32(8)) + "; this kiln reads version " + std::to_string(detail::function_format_version));
    if (u32(12) != 0) fail("flags " + std::to_string(u32(12)) + " are set; version 1 has none");
    if (glen > detail::function_max_graph) fail("declares a graph of " + std::to_string(glen) + " bytes (at most 64 MiB are read)");
    if (glen > total - 24)
        fail("truncated: the graph needs " + std::to_string(glen) + " bytes and " + std::to_string(total - 24) + " follow the header");
    std::string text(static_cast<std::size_t>(glen), '\0');
    src.read(24, reinterpret_cast<unsigned char*>(text.data()), text.size());
    const json::value root = json::reader(text, "'" + file + "': graph", entry, 24).parse();

    // The payload: a safetensors file after the graph.
    struct offset_source {
        Source& s;
        std::uint64_t base, bytes;
        std::uint64_t size() const { return bytes; }
        void read(std::uint64_t off, unsigned char* dst, std::size_t n) { s.read(base + off, dst, n); }
    } payload_src{src, 24 + glen, total - 24 - glen};
    const tensor_file payload = detail::read_safetensors(payload_src, file + " (weights at byte " + std::to_string(24 + glen) + ")", entry);

    using json::value;
    auto field = [&](const value& obj, const char* key, value::kind_t kind, const std::string& where) -> const value& {
        const value* v = obj.find(key);
        if (!v) fail(where + " lacks '" + key + "'");
        if (v->kind != kind) fail(where + ": '" + key + "' is " + std::string(json::kind_name(v->kind)) + ", not " + std::string(json::kind_name(kind)));
        return *v;
    };
    auto count_of = [&](const value& v, std::uint64_t limit, const std::string& what) -> std::uint64_t {
        if (v.kind != value::number || !v.is_count || v.count > limit) fail(what + " is not an integer from 0 to " + std::to_string(limit));
        return v.count;
    };
    auto only = [&](const value& obj, std::initializer_list<const char*> keys, const std::string& where) {
        for (const std::string& k : obj.keys) {
            bool ok = false;
            for (const char* a : keys) ok = ok || k == a;
            if (!ok) fail(where + " has an unknown field '" + json::reader::printable(k) + "'");
        }
    };
    if (root.kind != value::object) fail("the graph is not a JSON object");
    only(root, {"format", "name", "ops", "arguments", "extents", "nodes", "outputs"}, "the graph");
    if (field(root, "format", value::string, "the graph").text != "kiln function") fail("the graph's format is not \"kiln function\"");
    loaded_function f;
    f.name_ = field(root, "name", value::string, "the graph").text;
    // Ops and versions.
    const value& ops = field(root, "ops", value::object, "the graph");
    for (std::size_t i = 0; i < ops.keys.size(); ++i) {
        const std::uint64_t ver = count_of(ops.items[i], UINT32_MAX, "the version of op '" + json::reader::printable(ops.keys[i]) + "'");
        if (ver == 0 || ver > detail::op_version(ops.keys[i]))
            fail("op '" + json::reader::printable(ops.keys[i]) + "' has version " + std::to_string(ver) + "; this kiln reads version " +
                 std::to_string(detail::op_version(ops.keys[i])));
    }
    // The signature.
    const value& args = field(root, "arguments", value::array, "the graph");
    if (args.items.size() > 1024) fail("has " + std::to_string(args.items.size()) + " arguments (at most 1024)");
    std::size_t dynamic_count = 0;
    for (std::size_t k = 0; k < args.items.size(); ++k) {
        const std::string where = "argument " + std::to_string(k);
        const value& a = args.items[k];
        if (a.kind != value::object) fail(where + " is not an object");
        only(a, {"dtype", "shape", "names"}, where);
        const auto d = detail::dtype_named(field(a, "dtype", value::string, where).text);
        if (!d) fail(where + " has an unknown dtype");
        const value& sh = field(a, "shape", value::array, where);
        if (sh.items.size() > static_cast<std::size_t>(max_rank)) fail(where + " has more than " + std::to_string(max_rank) + " dimensions");
        std::vector<std::ptrdiff_t> s;
        for (const value& e : sh.items) {
            if (e.kind == value::number && e.text == "-1") {
                s.push_back(dyn);
                ++dynamic_count;
            } else {
                s.push_back(static_cast<std::ptrdiff_t>(count_of(e, std::uint64_t{1} << 40, where + "'s extent")));
            }
        }
        std::vector<std::string> names;
        if (a.find("names")) {
            const value& nv = field(a, "names", value::array, where);
            if (nv.items.size() != s.size())
                fail(where + " has " + std::to_string(nv.items.size()) + " names for " + std::to_string(s.size()) + " dimensions");
            for (std::size_t j = 0; j < s.size(); ++j) {
                if (nv.items[j].kind != value::string) fail(where + "'s name " + std::to_string(j) + " is not a string");
                const std::string& n = nv.items[j].text;
                if (!n.empty() && !detail::valid_dim_name(n))
                    fail(where + "'s name " + std::to_string(j) + " ('" + json::reader::printable(n) +
                         "') is not 1 to 64 letters, digits and underscores");
                if (!n.empty() && s[j] != dyn) fail(where + " names its static dimension " + std::to_string(j));
                names.push_back(n);
            }
        }
        f.specs_.emplace_back(*d, std::move(s), std::move(names));
    }
    const value& ext = field(root, "extents", value::array, "the graph");
    if (ext.items.size() != dynamic_count)
        fail("lists " + std::to_string(ext.items.size()) + " traced extents for " + std::to_string(dynamic_count) + " dynamic dimensions");
    for (const value& e : ext.items) f.traced_.push_back(static_cast<std::ptrdiff_t>(count_of(e, std::uint64_t{1} << 40, "a traced extent")));
    f.named_ = detail::dim_name_groups(f.specs_);

    // Nodes.
    const value& nodes = field(root, "nodes", value::array, "the graph");
    if (nodes.items.size() > detail::function_max_nodes) fail("has more than " + std::to_string(detail::function_max_nodes) + " nodes");
    auto exe = std::make_shared<detail::executable>();
    function_graph& g = exe->graph;
    std::set<std::string> payload_used;
    for (std::size_t i = 0; i < nodes.items.size(); ++i) {
        const std::string where = "node %" + std::to_string(i);
        const value& v = nodes.items[i];
        if (v.kind != value::object) fail(where + " is not an object");
        graph_node n;
        const std::string& kind = field(v, "kind", value::string, where).text;
        const auto d = detail::dtype_named(field(v, "dtype", value::string, where).text);
        if (!d) fail(where + " has an unknown dtype");
        n.dtype = *d;
        const value& sh = field(v, "shape", value::array, where);
        if (sh.items.size() > static_cast<std::size_t>(max_rank)) fail(where + " has more than " + std::to_string(max_rank) + " dimensions");
        n.shape.rank = static_cast<int>(sh.items.size());
        std::uint64_t numel = 1;
        bool zero = false, big = false;
        for (std::size_t j = 0; j < sh.items.size(); ++j) {
            const std::uint64_t e = count_of(sh.items[j], std::uint64_t{1} << 40, where + "'s extent");
            n.shape[static_cast<int>(j)] = static_cast<std::ptrdiff_t>(e);
            zero = zero || e == 0;
            if (e && numel > (UINT64_MAX >> 8) / e) big = true;
            else numel *= e;
        }
        if (!zero && (big || numel * size_of(n.dtype) > opt.max_node_bytes))
            fail(where + " declares a result of shape " + to_string(n.shape) + " " + std::string(name(n.dtype)) + ", more than " +
                 std::to_string(opt.max_node_bytes) + " bytes (load_options::max_node_bytes)");
        if (kind == "argument") {
            only(v, {"kind", "argument", "dtype", "shape"}, where);
            n.kind = node_kind::argument;
            const std::uint64_t a = count_of(field(v, "argument", value::number, where), 1023, where + "'s argument");
            if (a >= f.specs_.size()) fail(where + " is argument " + std::to_string(a) + " of " + std::to_string(f.specs_.size()));
            n.argument = static_cast<int>(a);
            // Its dtype and shape are the argument's, with the traced extents.
            const spec& sp = f.specs_[a];
            bool ok = n.dtype == sp.dtype && sp.shape.size() == static_cast<std::size_t>(n.shape.rank);
            std::size_t first_dyn = 0;
            for (std::size_t k = 0; k < a; ++k)
                for (std::ptrdiff_t e : f.specs_[k].shape) first_dyn += e == dyn;
            for (std::size_t j = 0; ok && j < sp.shape.size(); ++j)
                ok = n.shape[static_cast<int>(j)] == (sp.shape[j] == dyn ? f.traced_[first_dyn++] : sp.shape[j]);
            if (!ok) fail(where + " (argument " + std::to_string(a) + ") is " + to_string(n.shape) + " " + std::string(name(n.dtype)) +
                          ", which its spec " + to_string(sp) + " does not give");
        } else if (kind == "constant") {
            only(v, {"kind", "dtype", "shape"}, where);
            n.kind = node_kind::constant;
            const std::string key = "node/" + std::to_string(i);
            const auto it = payload.tensors.find(key);
            if (it == payload.tensors.end()) fail(where + " is a constant, but the weights hold no tensor '" + key + "'");
            if (it->second.dtype() != n.dtype || !(it->second.shape() == n.shape))
                fail(where + " is " + to_string(n.shape) + " " + std::string(name(n.dtype)) + ", but tensor '" + key + "' is " +
                     to_string(it->second.shape()) + " " + std::string(name(it->second.dtype())));
            n.value = it->second;
            payload_used.insert(key);
        } else if (kind == "op") {
            only(v, {"kind", "op", "attrs", "inputs", "params", "float_params", "opaque_params", "bool_params", "dynamic", "dtype", "shape"}, where);
            n.kind = node_kind::op;
            n.op = field(v, "op", value::string, where).text;
            if (!ops.find(n.op)) fail(where + " is op '" + json::reader::printable(n.op) + "', which the graph's op list does not name");
            n.attrs = field(v, "attrs", value::string, where).text;
            for (const value& in : field(v, "inputs", value::array, where).items) {
                const std::uint64_t x = count_of(in, UINT32_MAX, where + "'s input");
                if (x >= i) fail(where + " takes node %" + std::to_string(x) + " as an input, which does not come before it");
                if (g.nodes[x].kind == node_kind::effect) fail(where + " takes an effect as an input");
                n.inputs.push_back(static_cast<std::int32_t>(x));
            }
            if (n.inputs.size() > 4096) fail(where + " has more than 4096 inputs");
            if (const value* p = v.find("params")) {
                if (p->kind != value::array || p->items.size() > 64) fail(where + "'s params are not an array of at most 64 integers");
                for (const value& x : p->items) {
                    if (x.kind != value::number) fail(where + "'s params are not integers");
                    // An int64 written as text: non-negative ones parsed as counts, negative ones here.
                    if (x.is_count) {
                        if (x.count > static_cast<std::uint64_t>(INT64_MAX)) fail(where + " has a parameter out of range");
                        n.params.values.push_back(static_cast<std::int64_t>(x.count));
                    } else {
                        const std::string& t = x.text;
                        bool ok = t.size() >= 2 && t.size() <= 20 && t[0] == '-';
                        std::uint64_t m = 0;
                        for (std::size_t c = 1; ok && c < t.size(); ++c) {
                            ok = t[c] >= '0' && t[c] <= '9';
                            const auto digit = static_cast<std::uint64_t>(t[c] - '0');
                            ok = ok && m <= (static_cast<std::uint64_t>(INT64_MAX) + 1 - digit) / 10;
                            m = m * 10 + digit;
                        }
                        if (!ok) fail(where + " has a parameter that is not a 64-bit integer");
                        n.params.values.push_back(static_cast<std::int64_t>(0 - m));
                    }
                }
                n.params.float_params = count_of(field(v, "float_params", value::number, where), UINT64_MAX, where + "'s float_params");
                n.params.opaque = count_of(field(v, "opaque_params", value::number, where), UINT64_MAX, where + "'s opaque_params");
                const std::uint64_t mask = n.params.values.size() == 64 ? UINT64_MAX : (std::uint64_t{1} << n.params.values.size()) - 1;
                if ((n.params.float_params | n.params.opaque) & ~mask) fail(where + " marks parameters it does not have");
                if (const value* b = v.find("bool_params")) {
                    n.params.bool_params = count_of(*b, UINT64_MAX, where + "'s bool_params");
                    if (n.params.bool_params & ~mask) fail(where + " marks parameters it does not have");
                    if (n.params.bool_params & (n.params.float_params | n.params.opaque))
                        fail(where + " marks a parameter both bool and floating or opaque");
                    for (std::size_t k = 0; k < n.params.values.size(); ++k)
                        if ((n.params.bool_params >> k & 1) && n.params.values[k] != 0 && n.params.values[k] != 1)
                            fail(where + "'s bool parameter " + std::to_string(k) + " is neither 0 nor 1");
                }
            } else if (v.find("float_params") || v.find("opaque_params") || v.find("bool_params")) {
                fail(where + " marks parameters it does not have");
            }
            if (const value* dyn_list = v.find("dynamic")) {
                if (dyn_list->kind != value::array || dyn_list->items.size() > n.params.values.size())
                    fail(where + "'s dynamic parameters are not a list of at most one per parameter");
                for (const value& x : dyn_list->items) {
                    if (x.kind != value::array || x.items.size() != 4) fail(where + "'s dynamic parameter is not [index, dim, scale, offset]");
                    dynamic_param dp;
                    dp.index = static_cast<std::uint32_t>(count_of(x.items[0], n.params.values.size() - 1, where + "'s dynamic index"));
                    if (f.traced_.empty()) fail(where + " has a dynamic parameter, but the signature has no dynamic dimension");
                    dp.dim = static_cast<int>(count_of(x.items[1], f.traced_.size() - 1, where + "'s dynamic dimension"));
                    auto small_int = [&](const value& e) -> std::int64_t {
                        if (e.kind != value::number) fail(where + "'s dynamic scale and offset must be integers");
                        if (e.is_count && e.count <= (std::uint64_t{1} << 40)) return static_cast<std::int64_t>(e.count);
                        const std::string& t = e.text;
                        if (t.size() >= 2 && t.size() <= 14 && t[0] == '-' && t.find_first_not_of("0123456789", 1) == std::string::npos)
                            return -std::stoll(t.substr(1));
                        fail(where + "'s dynamic scale and offset must be integers of at most 2^40");
                        return 0;
                    };
                    dp.scale = small_int(x.items[2]);
                    dp.offset = small_int(x.items[3]);
                    n.dynamic.push_back(dp);
                }
            }
            try {
                n.fn = detail::rebuild_op<N>(n.op, n.attrs, n.inputs.size(), n.params);
            } catch (const value_error& e) {
                fail(where + " ('" + json::reader::printable(n.op) + "' " + json::reader::printable(n.attrs) + ") " + e.what());
            }
        } else {
            fail(where + " has an unknown kind '" + json::reader::printable(kind) + "'");
        }
        g.nodes.push_back(std::move(n));
    }
    for (const auto& [k, t] : payload.tensors)
        if (!payload_used.count(k)) fail("the weights hold tensor '" + json::reader::printable(k) + "', which no constant node uses");
    for (const value& o : field(root, "outputs", value::array, "the graph").items) {
        const std::uint64_t x = count_of(o, UINT32_MAX, "an output");
        if (x >= g.nodes.size()) fail("output %" + std::to_string(x) + " is not a node");
        g.outputs.push_back(static_cast<std::int32_t>(x));
    }

    // Each op's dtype and shape by its own rule, on placeholders of its inputs' declared shapes (stride 0: they
    // take no memory), against the file's. Under shape_run (eager/shape_run.hpp) an op with a result spec (an
    // elementwise op, a cast, a fill, a structural op) gives a placeholder and a matrix product one of zeros: none of
    // them computes or allocates what the declared shapes would cost.
    const detail::shape_run checking(detail::check_values::none);  // (each node on fresh placeholders: values never matter)
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        graph_node& n = g.nodes[i];
        if (n.kind != node_kind::op) continue;
        std::vector<tensor> ph;
        for (std::int32_t in : n.inputs) {
            const graph_node& x = g.nodes[static_cast<std::size_t>(in)];
            ph.push_back(x.kind == node_kind::constant ? x.value : zeros(dims{}, x.dtype).broadcast_to(x.shape));
        }
        tensor y;
        try {
            y = n.fn(ph, n.params.values);
        } catch (const error& e) {
            fail("node %" + std::to_string(i) + " ('" + json::reader::printable(n.op) + "') fails on its inputs: " + e.what());
        }
        if (y.dtype() != n.dtype || !(y.shape() == n.shape))
            fail("node %" + std::to_string(i) + " ('" + json::reader::printable(n.op) + "') computes " + to_string(y.shape()) + " " +
                 std::string(name(y.dtype())) + ", but the file says " + to_string(n.shape) + " " + std::string(name(n.dtype)));
    }
    exe->traced = g;
    exe->traced_here = false;
    for (const graph_node& n : g.nodes) exe->has_dynamic = exe->has_dynamic || !n.dynamic.empty();
    exe->traced_extents = f.traced_;
    exe->prepare();
    f.exe_ = std::move(exe);
    return f;
}

// Reads a function written by kiln::save (validated as the header comment says before anything runs).
// (Templates on an unused int, as the registry's functions are: a program that never loads compiles no kernels.)
template <int N = 0>
loaded_function load(const std::string& path, const load_options& opt = {}) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw file_error("kiln: file_error in 'load': cannot open '" + path + "'");
    const std::streamoff end = in.tellg();
    if (end < 0) throw file_error("kiln: file_error in 'load': cannot read the size of '" + path + "'");
    detail::st_file_source src{in, static_cast<std::uint64_t>(end), path, "load"};
    return read_function<N>(src, path, opt, "load");
}

// The same from bytes in memory (`name` stands for the file in messages).
template <int N = 0>
loaded_function load_bytes(const void* data, std::size_t size, const std::string& name = "<memory>",
                           const load_options& opt = {}) {
    if (data == nullptr && size > 0) throw value_error("kiln: value_error in 'load_bytes': null data");
    detail::st_memory_source src{static_cast<const unsigned char*>(data), size};
    return read_function<N>(src, name, opt, "load_bytes");
}

}  // namespace kiln
