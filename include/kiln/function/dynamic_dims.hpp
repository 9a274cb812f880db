#pragma once
// How a kiln::dyn signature's probe traces are compared (function.hpp traces the function at the call's extents e,
// then at 2e + 1 and 3e + 2, and, where the extents take several values, once more per value with that extent moved
// alone): which parameters follow an extent, on which line, and where the traces part.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "graph.hpp"

namespace kiln {

namespace detail {

// True when two tensors hold the same dtype, shape and bytes: a constant that the traced code makes afresh at every
// call (an increment, a table) is the same constant in traces made at different extents.
inline bool same_value(const tensor& a, const tensor& b) {
    if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
    const tensor ha = a.to(cpu).contiguous(), hb = b.to(cpu).contiguous();
    const std::size_t bytes = static_cast<std::size_t>(ha.numel()) * ha.itemsize();
    return bytes == 0 || std::memcmp(ha.raw_data(), hb.raw_data(), bytes) == 0;
}

// Two traces of one function, made with different extents of its dynamic dimensions (`a` and `b` per dimension),
// compared node by node. Where they agree except for parameters that follow an extent linearly (a reshape's
// target, a mean's count, a fill's shape), those parameters are marked in `g` as dynamic and the answer is empty;
// otherwise it says where the traces part.
template <int = 0>
std::string mark_dynamic(function_graph& g, const function_graph& h,
                                const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& extents) {
    auto where = [&](std::size_t i) {
        const graph_node& n = g.nodes[i];
        return "node %" + std::to_string(i) + " (" + (n.op.empty() ? std::string(name(n.kind)) : "'" + n.op + "'") + ")";
    };
    if (g.nodes.size() != h.nodes.size())
        return "the traces have " + std::to_string(g.nodes.size()) + " and " + std::to_string(h.nodes.size()) + " nodes";
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        graph_node& x = g.nodes[i];
        const graph_node& y = h.nodes[i];
        if (x.kind != y.kind || x.op != y.op || x.inputs != y.inputs || x.writes != y.writes || x.argument != y.argument ||
            x.dtype != y.dtype || x.shape.rank != y.shape.rank)
            return where(i) + " is a different op in the two traces";
        if ((x.kind == node_kind::constant || x.kind == node_kind::variable) &&
            (x.value.storage_handle() != y.value.storage_handle() || !(x.value.shape() == y.value.shape())) &&
            !(x.kind == node_kind::constant && same_value(x.value, y.value)))
            return where(i) + " captures a tensor that the code made from the extent (make it inside the traced ops, "
                              "for example with kiln::full)";
        if (x.params.values.size() != y.params.values.size() || x.params.float_params != y.params.float_params)
            return where(i) + " has different parameters";
        if (x.params.values == y.params.values) {
            if (x.attrs != y.attrs) return where(i) + " has different attributes (" + x.attrs + " and " + y.attrs + ")";
            continue;
        }
        for (std::size_t j = 0; j < x.params.values.size(); ++j) {
            if (x.params.values[j] == y.params.values[j]) continue;
            if (x.params.opaque >> j & 1) return where(i) + " holds a part of the program that depends on the extent";
            const bool is_float = x.params.float_params >> j & 1;
            const double va = is_float ? param_number(x.params.values[j]) : static_cast<double>(x.params.values[j]);
            const double vb = is_float ? param_number(y.params.values[j]) : static_cast<double>(y.params.values[j]);
            bool found = false;
            for (std::size_t k = 0; k < extents.size() && !found; ++k) {
                const double ea = static_cast<double>(extents[k].first), eb = static_cast<double>(extents[k].second);
                const double scale = (vb - va) / (eb - ea), offset = va - scale * ea;
                if (std::isfinite(scale) && scale == std::round(scale) && offset == std::round(offset) &&
                    std::abs(scale) < 9e15 && std::abs(offset) < 9e15) {
                    x.dynamic.push_back({static_cast<std::uint32_t>(j), static_cast<int>(k),
                                         static_cast<std::int64_t>(scale), static_cast<std::int64_t>(offset)});
                    found = true;
                }
            }
            if (!found) {
                return where(i) + " has a parameter (" + number_text(va) + " and " + number_text(vb) +
                       " in the two traces) that does not follow a dynamic "
                                  "extent";
            }
        }
    }
    if (g.outputs != h.outputs) return "the results are different values in the two traces";
    return {};
}

// A third trace `h3` (extents `extents[k].second`) against `g`, whose dynamic parameters mark_dynamic found from two
// traces: h3 must be the same program with each of those parameters on its line (and no other parameter moved).
template <int N = 0>
std::string check_dynamic(const function_graph& g, const function_graph& h3,
                          const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& extents) {
    function_graph again = g;
    for (graph_node& n : again.nodes) n.dynamic.clear();
    std::string why = mark_dynamic<N>(again, h3, extents);
    if (!why.empty()) return why + " (in a third trace)";
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
        if (again.nodes[i].dynamic != g.nodes[i].dynamic)
            return "node %" + std::to_string(i) + " ('" + g.nodes[i].op + "') has a parameter that follows a dynamic extent, "
                   "but not linearly";
    return {};
}

// A trace `h` made with every dynamic dimension at `extents` (one value per dimension), against `g` whose dynamic
// parameters mark_dynamic found: h must be the same program with each of those parameters where its line puts it at
// these extents, and every other parameter unchanged. The probe traces move every dimension at once, so a parameter
// that follows a sum of two extents (a concatenation of two dynamic lengths) can fit the line of a third; a trace
// that moves one extent alone shows it.
template <int N = 0>
std::string check_predicted(const function_graph& g, const function_graph& h, const std::vector<std::ptrdiff_t>& extents) {
    function_graph again = g;
    std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> same;
    for (std::ptrdiff_t e : extents) same.emplace_back(e, e);
    // (Pairs of equal extents: the structure is compared, and no parameter can be fitted to a line.)
    for (graph_node& n : again.nodes) n.dynamic.clear();
    for (std::size_t i = 0; i < again.nodes.size() && i < h.nodes.size(); ++i)
        if (!(again.nodes[i].params.values == h.nodes[i].params.values)) {  // (its attributes' text shows them too)
            again.nodes[i].params = h.nodes[i].params;
            again.nodes[i].attrs = h.nodes[i].attrs;
        }
    std::string why = mark_dynamic<N>(again, h, same);
    if (!why.empty()) return why + " (in a trace that moves one extent)";
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        const graph_node& x = g.nodes[i];
        const graph_node& y = h.nodes[i];
        for (std::size_t j = 0; j < x.params.values.size(); ++j) {
            const dynamic_param* d = nullptr;
            for (const dynamic_param& dp : x.dynamic)
                if (dp.index == j) d = &dp;
            const bool is_float = x.params.float_params >> j & 1;
            const double got = is_float ? param_number(y.params.values[j]) : static_cast<double>(y.params.values[j]);
            const double want = d ? static_cast<double>(d->scale * static_cast<std::int64_t>(extents[static_cast<std::size_t>(d->dim)]) + d->offset)
                                  : is_float ? param_number(x.params.values[j]) : static_cast<double>(x.params.values[j]);
            if (got != want)
                return "node %" + std::to_string(i) + " ('" + x.op + "') has a parameter that follows more than one dynamic "
                       "extent (" + number_text(got) + " where one extent's line gives " + number_text(want) + ")";
        }
    }
    return {};
}

}  // namespace detail

}  // namespace kiln
