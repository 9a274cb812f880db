#pragma once
// Writing traced functions as files (the format: kiln/io/function_file.hpp's header comment and
// docs/file-format.md): kiln::save and the pieces export_onnx shares with it, compile_for (the trace of a copy of
// the function for a signature, with dynamic extents apart where the function allows) and the file's bytes.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../function/function.hpp"
#include "../registry.hpp"
#include "recorded_ops.hpp"
#include "safetensors.hpp"

namespace kiln {
namespace detail {

inline constexpr char function_magic[8] = {'K', 'I', 'L', 'N', 'F', 'U', 'N', 'C'};
inline constexpr std::uint32_t function_format_version = 1;

// ---- writing ----

inline void append_u32(std::string& s, std::uint32_t v) {
    for (int i = 0; i < 4; ++i, v >>= 8) s += static_cast<char>(v & 0xff);
}
inline void append_u64(std::string& s, std::uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) s += static_cast<char>(v & 0xff);
}

inline std::string json_dims(const dims& d) {
    std::string s = "[";
    for (int i = 0; i < d.rank; ++i) {
        if (i) s += ',';
        s += std::to_string(d[i]);
    }
    return s + "]";
}

// Writes the file for an executable traced for `specs` to `sink(const unsigned char*, std::size_t)`, piece by piece
// (the weights go from the tensors to the sink without another copy).
template <int N = 0, class Sink>
void write_function_file(Sink&& sink, const executable& exe, const std::vector<spec>& specs, const std::string& fname,
                         const char* entry) {
    // The file holds what the function computes: the inputs that only a composite note kept (a constant weight
    // whose reshape was folded, kept for the ONNX export's Conv) are not written.
    function_graph pruned;
    if (!exe.graph.composites.empty()) {
        pruned = exe.graph;
        pruned.composites.clear();
        passes::remove_dead_code(pruned);
    }
    const function_graph& g = exe.graph.composites.empty() ? exe.graph : pruned;
    std::set<std::string> used;
    std::map<std::string, tensor> payload;
    std::string nodes;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        std::string line = "  {\"kind\":" + json::quote(name(n.kind == node_kind::variable ? node_kind::constant : n.kind));
        switch (n.kind) {
            case node_kind::effect:
                throw value_error(error_prefix("value_error", entry) + "the function writes into tensors (node %" +
                                  std::to_string(i) + ", '" + n.op + "'): only functions that compute without side "
                                  "effects (inference) can be saved yet");
            case node_kind::argument: line += ",\"argument\":" + std::to_string(n.argument); break;
            case node_kind::constant:
            case node_kind::variable: payload.emplace("node/" + std::to_string(i), n.value.to(kiln::cpu).contiguous()); break;
            case node_kind::op: {
                try {
                    (void)rebuild_op<N>(n.op, n.attrs, n.inputs.size(), n.params);
                } catch (const value_error& e) {
                    throw value_error(error_prefix("value_error", entry) + "node %" + std::to_string(i) + " ('" + n.op +
                                      "' " + n.attrs + ") cannot be saved: it " + e.what());
                }
                used.insert(n.op);
                line += ",\"op\":" + json::quote(n.op) + ",\"attrs\":" + json::quote(n.attrs) + ",\"inputs\":[";
                for (std::size_t k = 0; k < n.inputs.size(); ++k) line += (k ? "," : "") + std::to_string(n.inputs[k]);
                line += "]";
                if (!n.params.values.empty()) {
                    line += ",\"params\":[";
                    for (std::size_t k = 0; k < n.params.values.size(); ++k) {
                        if (k) line += ',';
                        line += std::to_string(n.params.values[k]);
                    }
                    line += "],\"float_params\":" + std::to_string(n.params.float_params) +
                            ",\"opaque_params\":" + std::to_string(n.params.opaque);
                    // (only where there is one: files without bool numbers stay what older readers read)
                    if (n.params.bool_params) line += ",\"bool_params\":" + std::to_string(n.params.bool_params);
                }
                if (!n.dynamic.empty()) {
                    line += ",\"dynamic\":[";
                    for (std::size_t k = 0; k < n.dynamic.size(); ++k) {
                        const dynamic_param& d = n.dynamic[k];
                        if (k) line += ',';
                        line += "[" + std::to_string(d.index) + "," + std::to_string(d.dim) + "," + std::to_string(d.scale) +
                                "," + std::to_string(d.offset) + "]";
                    }
                    line += "]";
                }
                break;
            }
        }
        line += ",\"dtype\":" + json::quote(name(n.dtype)) + ",\"shape\":" + json_dims(n.shape) + "}";
        nodes += line + (i + 1 < g.nodes.size() ? ",\n" : "\n");
    }
    std::string text = "{\n \"format\":\"kiln function\",\n \"name\":" + json::quote(fname) + ",\n \"ops\":{";
    bool first = true;
    for (const std::string& o : used) {
        text += (first ? "" : ",") + json::quote(o) + ":" + std::to_string(op_version(o));
        first = false;
    }
    text += "},\n \"arguments\":[";
    for (std::size_t k = 0; k < specs.size(); ++k) {
        text += (k ? "," : "") + std::string("{\"dtype\":") + json::quote(name(specs[k].dtype)) + ",\"shape\":[";
        for (std::size_t j = 0; j < specs[k].shape.size(); ++j)
            text += (j ? "," : "") + std::to_string(specs[k].shape[j] == dyn ? -1 : specs[k].shape[j]);
        text += "]";
        if (!specs[k].names.empty()) {  // (named dynamic extents: "" for an axis without a name)
            text += ",\"names\":[";
            for (std::size_t j = 0; j < specs[k].shape.size(); ++j) text += (j ? "," : "") + json::quote(specs[k].name_of(j));
            text += "]";
        }
        text += "}";
    }
    text += "],\n \"extents\":[";
    for (std::size_t k = 0; k < exe.traced_extents.size(); ++k) text += (k ? "," : "") + std::to_string(exe.traced_extents[k]);
    text += "],\n \"nodes\":[\n" + nodes + " ],\n \"outputs\":[";
    for (std::size_t k = 0; k < g.outputs.size(); ++k) text += (k ? "," : "") + std::to_string(g.outputs[k]);
    text += "]\n}\n";

    std::string head(function_magic, 8);
    append_u32(head, function_format_version);
    append_u32(head, 0);
    append_u64(head, text.size());
    head += text;
    sink(reinterpret_cast<const unsigned char*>(head.data()), head.size());
    write_safetensors(sink, payload, {{"kiln.function", "1"}}, entry);
}

// The file written to a stream (kiln::save's; one instantiation, which KILN_SEPARATE_KERNELS compiles once).
template <int N = 0>
void write_function_stream(std::ostream& out, const executable& exe, const std::vector<spec>& specs,
                           const std::string& fname, const char* entry) {
    write_function_file<N>([&](const unsigned char* p, std::size_t n) {
        out.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
    }, exe, specs, fname, entry);
}

// The ways to make n dynamic extents equal or apart, each as a group number per extent: the finest first (all
// apart), then by fewer groups, in the order of restricted growth strings; the last is always one group (all
// equal). At most `limit` of them (every one up to n = 5 extents; beyond 8, only all apart and all equal).
inline std::vector<std::vector<int>> extent_groupings(std::size_t n, std::size_t limit = 64) {
    std::vector<std::vector<int>> all;
    if (n <= 8) {
        std::vector<int> g(n, 0);
        for (;;) {
            all.push_back(g);
            // The next restricted growth string: the last g[i] (i >= 1) that can grow (g[i] <= max of g before it)
            // grows, and what follows it restarts at 0.
            std::ptrdiff_t i = static_cast<std::ptrdiff_t>(n) - 1;
            for (; i >= 1; --i)
                if (g[static_cast<std::size_t>(i)] <= *std::max_element(g.begin(), g.begin() + i)) break;
            if (i < 1) break;
            ++g[static_cast<std::size_t>(i)];
            std::fill(g.begin() + i + 1, g.end(), 0);
        }
    } else {
        std::vector<int> apart(n);
        for (std::size_t k = 0; k < n; ++k) apart[k] = static_cast<int>(k);
        all = {apart, std::vector<int>(n, 0)};
    }
    auto groups = [](const std::vector<int>& g) { return g.empty() ? 0 : *std::max_element(g.begin(), g.end()) + 1; };
    std::stable_sort(all.begin(), all.end(), [&](const auto& a, const auto& b) { return groups(a) > groups(b); });
    if (all.size() > limit) {
        all.erase(all.begin() + static_cast<std::ptrdiff_t>(limit) - 1, all.end() - 1);
    }
    return all;
}

// A copy of `fn` traced for `signature`, the specs' shapes with dynamic extents apart where the function allows:
// each grouping of extent_groupings is tried in turn, group g at extent 2 + g, until one traces and one trace serves
// every extent (function mode's probes); the last tries every extent at 2, and its error is the one reported.
template <class F>
std::shared_ptr<const executable> compile_for(const function<F>& fn, const std::vector<spec>& signature, const char* entry) {
    std::size_t n_dyn = 0;
    for (const spec& s : signature) {
        if (s.shape.size() > static_cast<std::size_t>(max_rank))
            throw value_error(error_prefix("value_error", entry) + "a spec has more than " + std::to_string(max_rank) + " dimensions");
        n_dyn += static_cast<std::size_t>(std::count(s.shape.begin(), s.shape.end(), dyn));
    }
    const bool dynamic = n_dyn > 0;
    // Named extents: one name is one extent, and different names are never traced equal. The groupings are of the
    // units (each name, each unnamed extent), those that put two names together left out.
    const dim_names by_name = dynamic_dim_names(signature);
    std::vector<std::size_t> unit(n_dyn);
    std::vector<bool> named_unit;
    for (std::size_t d = 0; d < n_dyn; ++d) {
        if (by_name.first[d] != d) {
            unit[d] = unit[by_name.first[d]];
            continue;
        }
        unit[d] = named_unit.size();
        named_unit.push_back(!by_name.name[d].empty());
    }
    std::vector<std::vector<int>> groupings;
    for (const std::vector<int>& g : extent_groupings(named_unit.size())) {
        bool apart = true;
        for (std::size_t a = 0; a < g.size() && apart; ++a)
            for (std::size_t b = a + 1; b < g.size() && apart; ++b) apart = !(named_unit[a] && named_unit[b] && g[a] == g[b]);
        if (!apart) continue;
        std::vector<int> per_extent(n_dyn);
        for (std::size_t d = 0; d < n_dyn; ++d) per_extent[d] = g[unit[d]];
        groupings.push_back(std::move(per_extent));
    }
    for (std::size_t attempt = 0; attempt < groupings.size(); ++attempt) {
        const bool last = attempt + 1 == groupings.size();
        function<F> traced(fn.callable(), signature, fn.options());
        std::vector<tensor> ex;
        std::size_t d_at = 0;
        for (const spec& s : signature) {
            dims d;
            d.rank = static_cast<int>(s.shape.size());
            for (std::size_t i = 0; i < s.shape.size(); ++i)
                d[static_cast<int>(i)] = s.shape[i] == dyn ? 2 + groupings[attempt][d_at++] : s.shape[i];
            // (The trace reads only dtypes and shapes: a placeholder of stride 0 stands for the input, so a signature
            // of any size traces in a few bytes.)
            ex.push_back(zeros(dims{}, s.dtype).broadcast_to(d));
        }
        std::shared_ptr<const executable> exe;
        auto call = [&](auto&&... ts) {
            if constexpr (std::is_invocable_v<const F&, decltype(ts)...>) {
                exe = traced.compiled(ts...);
            } else {
                throw value_error(error_prefix("value_error", entry) + "the function cannot be called with " +
                                  std::to_string(sizeof...(ts)) + " tensors (the signature has one spec per tensor argument)");
            }
        };
        try {
            switch (ex.size()) {
                case 0: call(); break;
                case 1: call(ex[0]); break;
                case 2: call(ex[0], ex[1]); break;
                case 3: call(ex[0], ex[1], ex[2]); break;
                case 4: call(ex[0], ex[1], ex[2], ex[3]); break;
                case 5: call(ex[0], ex[1], ex[2], ex[3], ex[4]); break;
                case 6: call(ex[0], ex[1], ex[2], ex[3], ex[4], ex[5]); break;
                default: throw value_error(error_prefix("value_error", entry) + "functions of at most 6 tensor arguments can be written");
            }
        } catch (const trace_error&) {
            throw;  // (reading values: the same at any extents)
        } catch (const shape_error& e) {
            if (!last) continue;  // (extents apart where the function needs them equal: a batch of inputs and labels)
            if (!dynamic) throw;
            if (std::count(named_unit.begin(), named_unit.end(), true) >= 2)
                throw shape_error(std::string(e.what()) + " (" + entry + " traces extents of different names apart, as "
                                  "their names say: extents that the function needs equal must share a name)");
            throw shape_error(std::string(e.what()) + " (" + entry + " traces the function with each kiln::dyn "
                              "extent at 2, then at 5 and 8, after trying them apart: a function that holds only for some "
                              "extents must be saved with those extents in its signature)");
        } catch (const std::exception&) {
            // (Another refusal at extents apart, the function's own check that two extents are equal included: the
            // next grouping is tried; the last one's error is the caller's.)
            if (last || ex.size() > 6 || !dynamic) throw;
            continue;
        }
        // A signature whose dynamic dimensions cannot share one trace gives a trace for one extent only (function
        // mode then traces per extent): a file could not serve the others.
        if (dynamic && exe->traced_extents.empty()) {
            if (!last) continue;
            const std::vector<std::string> why = traced.retrace_reasons();
            throw value_error(error_prefix("value_error", entry) + "the function cannot be saved with dynamic dimensions: " +
                              (why.empty() ? std::string("one trace does not serve every extent") : why.back()) +
                              "; save it with static extents in its signature");
        }
        return exe;
    }
    throw value_error(error_prefix("value_error", entry) + "no trace");  // (unreachable: the last grouping returns or throws)
}

}  // namespace detail

// Writes `fn` traced for `signature` (one spec per tensor argument; kiln::dyn extents stay dynamic) with the current
// values of the tensors it captures. The function must compute without writing into tensors.
template <class F>
void save(const function<F>& fn, const std::vector<spec>& signature, const std::string& path) {
    const char* entry = "save";
    const auto exe = detail::compile_for(fn, signature, entry);
    detail::write_file_atomically_with(path, [&](std::ofstream& out) {
        detail::write_function_stream(out, *exe, signature, fn.options().name, entry);
    }, entry);
}

}  // namespace kiln
