#pragma once
// The passes over a traced function's run-time graph. Each is its own function, returns how many nodes it
// changed, and keeps the graph's meaning, effects included:
//   fold_constants                   pure ops whose inputs are all constants become constants;
//   eliminate_common_subexpressions  a pure op equal to an earlier one (same op, attributes and inputs, with no
//                                    effect between them) is replaced by it;
//   simplify_identities              exact identities (x * 1, a reshape to the same shape) become their input;
//   remove_dead_code                 pure ops and constants that no output and no effect needs are removed.
// A value that an effect writes into, and every value it is a view of, is never folded or merged; a node whose
// parameters follow a dynamic dimension is never folded or simplified, and merges only with its equal.
#include <algorithm>
#include <ostream>
#include <unordered_map>

#include "graph.hpp"

namespace kiln::passes {

namespace detail {

inline bool is_view(std::string_view op) {
    return op == "reshape" || op == "transpose" || op == "permute" || op == "slice" || op == "select" ||
           op == "unsqueeze" || op == "broadcast_to";
}

// The value whose storage v lives in: the end of v's chain of views (v itself when it is not a view).
inline std::int32_t view_root(const function_graph& g, std::int32_t v) {
    while (true) {
        const graph_node& n = g.nodes[static_cast<std::size_t>(v)];
        if (n.kind != node_kind::op || !is_view(n.op) || n.inputs.empty()) return v;
        v = n.inputs[0];
    }
}

// The values whose storage an effect writes: its written inputs and what they are views of.
template <int = 0>
std::vector<char> written_values(const function_graph& g) {
    std::vector<char> w(g.nodes.size(), 0);
    auto mark = [&](std::int32_t v) {
        while (v >= 0 && !w[static_cast<std::size_t>(v)]) {
            w[static_cast<std::size_t>(v)] = 1;
            const graph_node& n = g.nodes[static_cast<std::size_t>(v)];
            v = n.kind == node_kind::op && is_view(n.op) && !n.inputs.empty() ? n.inputs[0] : -1;
        }
    };
    for (const graph_node& n : g.nodes)
        if (n.kind == node_kind::effect)
            for (std::size_t k = 0; k < n.writes && k < n.inputs.size(); ++k) mark(n.inputs[k]);
    // Captures of one storage (a tensor and a view of it, captured apart) are written together.
    std::vector<const void*> written;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& n = g.nodes[i];
        if (w[i] && n.kind == node_kind::variable && n.value.valid()) written.push_back(n.value.storage_handle().get());
    }
    if (!written.empty())
        for (std::size_t i = 0; i < g.nodes.size(); ++i) {
            const graph_node& n = g.nodes[i];
            if (!w[i] && n.kind == node_kind::variable && n.value.valid() &&
                std::find(written.begin(), written.end(), n.value.storage_handle().get()) != written.end())
                w[i] = 1;
        }
    return w;
}

// The composite notes' values after a pass moved them (`to[v]`, -1 for removed): a note that lost a value goes.
inline void remap_composites(function_graph& g, const std::vector<std::int32_t>& to) {
    std::vector<composite_note> kept;
    for (composite_note& c : g.composites) {
        bool whole = c.output >= 0 && to[static_cast<std::size_t>(c.output)] >= 0;
        for (std::int32_t v : c.inputs) whole = whole && to[static_cast<std::size_t>(v)] >= 0;
        if (!whole) continue;
        c.output = to[static_cast<std::size_t>(c.output)];
        for (std::int32_t& v : c.inputs) v = to[static_cast<std::size_t>(v)];
        kept.push_back(std::move(c));
    }
    g.composites = std::move(kept);
}

template <int = 0>
void remap(function_graph& g, const std::vector<std::int32_t>& to) {
    for (graph_node& n : g.nodes)
        for (std::int32_t& in : n.inputs) in = to[static_cast<std::size_t>(in)];
    for (std::int32_t& o : g.outputs) o = to[static_cast<std::size_t>(o)];
    remap_composites(g, to);
}

// Runs f with no tracer and no tape recording (what a pass evaluates is not part of any trace or tape).
template <class F>
decltype(auto) untraced(F&& f) {
    const kiln::detail::untraced_scope no_tracer;
    const kiln::detail::tape_pause pause;
    return f();
}

}  // namespace detail

// Results above this many elements stay ops (folding them would keep their memory for the function's life).
inline constexpr std::ptrdiff_t max_folded_elements = std::ptrdiff_t{1} << 22;

template <int = 0>
std::size_t fold_constants(function_graph& g) {
    const std::vector<char> written = detail::written_values(g);
    std::size_t folded = 0;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        graph_node& n = g.nodes[i];
        if (n.kind != node_kind::op || written[i] || !n.dynamic.empty() || n.shape.numel() > max_folded_elements) continue;
        bool all = true;
        for (std::int32_t in : n.inputs) all = all && g.nodes[static_cast<std::size_t>(in)].kind == node_kind::constant;
        if (!all) continue;
        std::vector<tensor> ins;
        for (std::int32_t in : n.inputs) ins.push_back(g.nodes[static_cast<std::size_t>(in)].value);
        n.value = detail::untraced([&] { return n.fn(ins, n.params.values); });
        n.kind = node_kind::constant;
        n.attrs = "folded from " + n.op;
        n.op.clear();
        n.inputs.clear();
        n.fn = nullptr;
        ++folded;
    }
    return folded;
}

template <int = 0>
std::size_t eliminate_common_subexpressions(function_graph& g) {
    const std::vector<char> written = detail::written_values(g);
    std::vector<std::int32_t> to(g.nodes.size());
    std::unordered_map<std::string, std::int32_t> seen;
    std::size_t merged = 0;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        to[i] = static_cast<std::int32_t>(i);
        graph_node& n = g.nodes[i];
        for (std::int32_t& in : n.inputs) in = to[static_cast<std::size_t>(in)];
        if (n.kind == node_kind::effect) {
            seen.clear();  // what was computed before a write is not what the same op computes after it
            continue;
        }
        if (n.kind != node_kind::op || written[i]) continue;
        std::string key = n.op + '\x1f' + n.attrs;
        for (std::int32_t in : n.inputs) key += '\x1f' + std::to_string(in);
        for (const dynamic_param& d : n.dynamic)
            key += "\x1f$" + std::to_string(d.index) + ":" + std::to_string(d.dim) + "*" + std::to_string(d.scale) + "+" +
                   std::to_string(d.offset);
        const auto [it, fresh] = seen.emplace(std::move(key), static_cast<std::int32_t>(i));
        if (!fresh) {
            to[i] = it->second;
            ++merged;
        }
    }
    for (std::int32_t& o : g.outputs) o = to[static_cast<std::size_t>(o)];
    detail::remap_composites(g, to);
    return merged;
}

template <int = 0>
std::size_t remove_dead_code(function_graph& g) {
    const std::size_t n = g.nodes.size();
    std::vector<char> live(n, 0);
    for (std::int32_t o : g.outputs) live[static_cast<std::size_t>(o)] = 1;
    // A live composite's inputs stay (a constant weight whose reshape was folded), so that its note can name them.
    std::unordered_multimap<std::int32_t, const composite_note*> noted;
    for (const composite_note& c : g.composites) noted.emplace(c.output, &c);
    for (std::size_t i = n; i-- > 0;) {
        const graph_node& node = g.nodes[i];
        if (node.kind == node_kind::effect || node.kind == node_kind::argument) live[i] = 1;
        if (!live[i]) continue;
        for (std::int32_t in : node.inputs) live[static_cast<std::size_t>(in)] = 1;
        if (!noted.empty()) {
            const auto [first, last] = noted.equal_range(static_cast<std::int32_t>(i));
            for (auto it = first; it != last; ++it)
                for (std::int32_t in : it->second->inputs) live[static_cast<std::size_t>(in)] = 1;
        }
    }
    std::vector<std::int32_t> to(n, -1);
    std::vector<graph_node> kept;
    for (std::size_t i = 0; i < n; ++i)
        if (live[i]) {
            to[i] = static_cast<std::int32_t>(kept.size());
            kept.push_back(std::move(g.nodes[i]));
        }
    const std::size_t removed = n - kept.size();
    g.nodes = std::move(kept);
    detail::remap(g, to);
    return removed;
}

// Exact identities of the vocabulary, each true for every value NaN and infinity included: a reshape or
// broadcast_to to the input's own shape, x * 1, x / 1 and x - 0 where the result keeps x's dtype and shape. (x + 0
// is not one: -0 + 0 is +0.) Returns how many nodes were replaced by their input.
template <int = 0>
std::size_t simplify_identities(function_graph& g) {
    const std::vector<char> written = detail::written_values(g);
    std::vector<std::int32_t> to(g.nodes.size());
    std::size_t simplified = 0;
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        to[i] = static_cast<std::int32_t>(i);
        graph_node& n = g.nodes[i];
        for (std::int32_t& in : n.inputs) in = to[static_cast<std::size_t>(in)];
        if (n.kind != node_kind::op || written[i] || !n.dynamic.empty() || n.inputs.size() != 1) continue;
        const graph_node& x = g.nodes[static_cast<std::size_t>(n.inputs[0])];
        if (!(x.shape == n.shape) || x.dtype != n.dtype) continue;
        const bool one = n.attrs == "operand1=1i" || n.attrs == "operand1=1" || n.attrs == "operand1=1f";
        const bool zero = n.attrs == "operand1=0i" || n.attrs == "operand1=0" || n.attrs == "operand1=0f";
        const bool same = n.op == "reshape" || n.op == "broadcast_to" ||
                          (n.op == "mul" && (one || n.attrs == "operand0=1i" || n.attrs == "operand0=1" ||
                                             n.attrs == "operand0=1f")) ||
                          (n.op == "div" && one) || (n.op == "sub" && zero);
        // x * 1 is a copy of x: where something writes into x, the copy keeps x's value before the write, so it
        // stays (a reshape or broadcast_to is a view of x either way).
        const bool copy = n.op != "reshape" && n.op != "broadcast_to";
        if (same && !(copy && written[static_cast<std::size_t>(n.inputs[0])])) {
            to[i] = n.inputs[0];
            ++simplified;
        }
    }
    for (std::int32_t& o : g.outputs) o = to[static_cast<std::size_t>(o)];
    detail::remap_composites(g, to);
    return simplified;
}

// What each pass did to one graph.
// How many nodes each pass changed; printed as "folded 1, simplified 2, merged 0, removed 3".
struct pass_report {
    std::size_t folded = 0, simplified = 0, merged = 0, removed = 0;
    friend bool operator==(const pass_report&, const pass_report&) = default;
    friend std::ostream& operator<<(std::ostream& os, const pass_report& r) {
        return os << "folded " << r.folded << ", simplified " << r.simplified << ", merged " << r.merged
                  << ", removed " << r.removed;
    }
};

// The passes in order: folding, identities, merging, then removing what became dead.
template <int = 0>
pass_report optimize(function_graph& g) {
    pass_report r;
    r.folded = fold_constants(g);
    r.simplified = simplify_identities(g);
    r.merged = eliminate_common_subexpressions(g);
    r.removed = remove_dead_code(g);
    return r;
}

}  // namespace kiln::passes
