#pragma once
// What a traced graph's values' extents are from call to call, worked out from the graph and its signature alone:
// which axes of each value may change, and which dynamic input extent an axis always equals (value_axes_of, one walk
// of the graph). The ONNX export (io/onnx_plan.hpp) fixes and names its outputs' dimensions with them, and a
// loaded function's output_signature() reads them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../function/function.hpp"
#include "../registry.hpp"
#include "recorded_ops.hpp"

namespace kiln::detail {

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

inline bool axis_in(int axis, int rank) { return axis >= 0 && axis < rank; }

// For a permute or transpose node over an operand of rank `ri`: the operand's axis that each result axis is (empty
// where the attributes do not make a permutation, which a graph that loaded never has).
inline std::vector<int> permuted_from(const std::string& op, const std::map<std::string, std::string>& a, int ri) {
    std::vector<int> from(static_cast<std::size_t>(std::max(ri, 0)));
    for (int k = 0; k < ri; ++k) from[static_cast<std::size_t>(k)] = k;
    if (op == "permute") {
        const std::vector<int> d = attr_axes(a, "dims");
        for (std::size_t k = 0; k < d.size() && k < from.size(); ++k) from[k] = normalized_axis(d[k], ri);
    } else {
        const int d0 = normalized_axis(attr_axis(a, "dim0"), ri), d1 = normalized_axis(attr_axis(a, "dim1"), ri);
        if (!axis_in(d0, ri) || !axis_in(d1, ri)) return {};
        std::swap(from[static_cast<std::size_t>(d0)], from[static_cast<std::size_t>(d1)]);
    }
    std::vector<bool> seen(from.size(), false);
    for (int k : from) {
        if (!axis_in(k, ri) || seen[static_cast<std::size_t>(k)]) return {};
        seen[static_cast<std::size_t>(k)] = true;
    }
    return from;
}

inline bool is_reduction_op(const std::string& op) {
    return op == "sum" || op == "prod" || op == "max" || op == "min" || op == "argmax" || op == "argmin";
}

// For a reduction node over an operand of rank `ri`: the result axis of each operand axis, -1 where it is gone
// (empty where an axis is out of range).
inline std::vector<int> reduction_kept_axes(const std::string& op, const std::map<std::string, std::string>& a, int ri) {
    std::uint32_t reduced = 0;
    std::vector<int> axes = op == "argmax" || op == "argmin" ? std::vector<int>{attr_axis(a, "axis")} : attr_axes(a, "axes");
    for (int ax : axes) {
        if (!axis_in(normalized_axis(ax, ri), ri)) return {};
        reduced |= 1u << normalized_axis(ax, ri);
    }
    if (reduced == 0) reduced = all_axes(ri);
    const bool keep = attr_bool(a, "keepdims");
    std::vector<int> to(static_cast<std::size_t>(std::max(ri, 0)), -1);
    for (int k = 0, j = 0; k < ri; ++k) {
        const bool gone = reduced >> k & 1u;
        if (!gone) to[static_cast<std::size_t>(k)] = j;
        if (keep || !gone) ++j;
    }
    return to;
}

// What a walk of the graph works out for each value: which axes may change from call to call (`dynamic`, bit j for
// axis j; what is not worked out may change), and which dynamic input extent each axis equals at every call (`dims`,
// -1: static, or not worked out). Extents are followed through the ops that carry one whole: arguments, casts and
// copies, elementwise ops (an axis that some operand has at a static extent above 1 is static, one that operands give
// two different extents is left out), matrix products, reductions, axis insertion, selection and permutation, the
// axes a slice or a concat leaves alone, and the extents of a reshape, broadcast or fill that a parameter gives as
// the extent itself. `same_dim` (when not empty) gives each dynamic input extent the first one it is equal to
// (extents that share a name): an axis is said to equal that one.
struct value_axes {
    std::vector<std::uint32_t> dynamic;
    std::vector<std::vector<int>> dims;
};

template <int N = 0>
value_axes value_axes_of(const function_graph& g, const std::vector<spec>& specs, const std::vector<int>& same_dim = {}) {
    value_axes va;
    std::vector<std::uint32_t>& m = va.dynamic;
    std::vector<std::vector<int>>& e = va.dims;
    m.assign(g.nodes.size(), 0);
    e.resize(g.nodes.size());
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
        auto in = [&](std::size_t k) -> const graph_node& { return g.nodes[static_cast<std::size_t>(n.inputs[k])]; };
        auto mask = [&](std::size_t k) { return m[static_cast<std::size_t>(n.inputs[k])]; };
        auto src = [&](std::size_t k) -> const std::vector<int>& { return e[static_cast<std::size_t>(n.inputs[k])]; };
        // Output axis j of the operands broadcast together (aligned at the right): the extent they all give it.
        auto broadcast = [&](int j) {
            int found = -1;
            for (std::size_t k = 0; k < n.inputs.size(); ++k) {
                const int rk = in(k).shape.rank, a = j - (r - rk);
                if (a < 0) continue;
                const bool is_dynamic = mask(k) >> a & 1u;
                if (!is_dynamic && in(k).shape[a] == 1) continue;  // (broadcast)
                const int d = is_dynamic ? src(k)[static_cast<std::size_t>(a)] : -1;
                if (d < 0 || (found >= 0 && found != d)) return -1;
                found = d;
            }
            return found;
        };
        std::uint32_t out = all_axes(r);  // what is not worked out below may change
        std::vector<int> eq(static_cast<std::size_t>(std::max(r, 0)), -1);
        auto all_but = [&](int ax) {  // (the axes that a slice or a concat leaves alone)
            for (int j = 0; j < r; ++j)
                if (j != ax) eq[static_cast<std::size_t>(j)] = broadcast(j);
        };
        if (n.kind == node_kind::argument) {
            out = 0;
            const spec& s = specs[static_cast<std::size_t>(n.argument)];
            int d = first_dim_of[static_cast<std::size_t>(n.argument)];
            for (std::size_t a = 0; a < s.shape.size(); ++a)
                if (s.shape[a] == dyn) {
                    out |= 1u << a;
                    if (a < eq.size()) eq[a] = first_equal(d);
                    ++d;
                }
        } else if (n.kind != node_kind::op) {
            out = 0;  // constants, variables: their shapes are fixed
        } else if (n.op == "reshape" || n.op == "broadcast_to" || n.op == "full") {
            // Parameters are the result's extents (a fill's value last): the axes whose extent follows one, or is
            // worked out when the op runs (-1, which kiln's traces never leave but a file may hold).
            out = 0;
            for (const dynamic_param& dp : n.dynamic)
                if (static_cast<int>(dp.index) < r) {
                    out |= 1u << dp.index;
                    if (dp.scale == 1 && dp.offset == 0) eq[dp.index] = first_equal(dp.dim);
                }
            for (int j = 0; j < r; ++j)
                if (static_cast<std::size_t>(j) >= n.params.values.size() || n.params.values[static_cast<std::size_t>(j)] < 0)
                    out |= 1u << j;
        } else if (n.dynamic.empty()) {  // (a parameter that follows an extent: every axis counts as dynamic)
            const std::map<std::string, std::string> a = split_attrs(n.attrs);
            const std::string& op = n.op;
            const op_schema* s = find_op_or_null<N>(op);
            if (op == "im2col") {  // (N, C, H, W) -> (N, C, K, out_h, out_w)
                const std::uint32_t x = mask(0);
                out = (x & 3u) | ((x >> 2 & 3u) << 3);
                for (std::size_t j = 0; j < 2 && j < eq.size() && j < src(0).size(); ++j) eq[j] = src(0)[j];
            } else if (op == "cast" || op == "copy" || op == "cumsum" || op == "cumprod") {
                out = mask(0);
                if (src(0).size() == eq.size()) eq = src(0);
            } else if (op == "slice") {
                out = mask(0);  // (a slice "to the end" of a dynamic axis keeps it dynamic)
                all_but(normalized_axis(attr_axis(a, "axis"), r));
            } else if (op == "col2im" && n.inputs.size() == 2) {
                out = mask(1);  // (the image's shape is its second operand's)
                if (src(1).size() == eq.size()) eq = src(1);
            } else if (op == "index_select" && n.inputs.size() == 2) {
                // x's axes before `axis`, the index's, x's after
                const int ri = in(0).shape.rank, ax = normalized_axis(attr_axis(a, "axis"), ri), ir = in(1).shape.rank;
                if (axis_in(ax, ri)) {
                    const std::uint32_t low = all_axes(ax);
                    out = (mask(0) & low) | (mask(1) << ax) | ((mask(0) >> (ax + 1)) << (ax + ir));
                    if (r == ri - 1 + ir)
                        for (int j = 0; j < r; ++j)
                            eq[static_cast<std::size_t>(j)] = j < ax        ? src(0)[static_cast<std::size_t>(j)]
                                                              : j < ax + ir ? src(1)[static_cast<std::size_t>(j - ax)]
                                                                            : src(0)[static_cast<std::size_t>(j - ir + 1)];
                }
            } else if (op == "concat") {
                out = 0;
                for (std::size_t k = 0; k < n.inputs.size(); ++k) out |= mask(k);
                all_but(normalized_axis(attr_axis(a, "axis"), r));
            } else if (op == "unsqueeze" && axis_in(normalized_axis(attr_axis(a, "axis"), r), r)) {
                const int ax = normalized_axis(attr_axis(a, "axis"), r);
                const std::uint32_t x = mask(0), low = all_axes(ax);
                out = (x & low) | ((x & ~low) << 1);
                if (r == in(0).shape.rank + 1)
                    for (int j = 0; j < r; ++j)
                        if (j != ax) eq[static_cast<std::size_t>(j)] = src(0)[static_cast<std::size_t>(j < ax ? j : j - 1)];
            } else if (op == "select" && axis_in(normalized_axis(attr_axis(a, "axis"), in(0).shape.rank), in(0).shape.rank)) {
                const int ax = normalized_axis(attr_axis(a, "axis"), in(0).shape.rank);
                const std::uint32_t x = mask(0), low = all_axes(ax);
                out = (x & low) | ((x >> 1) & ~low);
                if (r == in(0).shape.rank - 1)
                    for (int j = 0; j < r; ++j) eq[static_cast<std::size_t>(j)] = src(0)[static_cast<std::size_t>(j < ax ? j : j + 1)];
            } else if (op == "permute" || op == "transpose") {
                const std::vector<int> from = permuted_from(op, a, in(0).shape.rank);
                if (!from.empty()) out = 0;
                for (std::size_t k = 0; k < from.size(); ++k)
                    if (mask(0) >> from[k] & 1u) out |= 1u << k;
                for (std::size_t j = 0; j < eq.size() && j < from.size(); ++j) eq[j] = src(0)[static_cast<std::size_t>(from[j])];
            } else if (is_reduction_op(op)) {
                const std::vector<int> to = reduction_kept_axes(op, a, in(0).shape.rank);
                if (!to.empty()) out = 0;
                for (std::size_t k = 0; k < to.size(); ++k)
                    if (to[k] >= 0) {
                        if (mask(0) >> k & 1u) out |= 1u << to[k];
                        if (to[k] < r) eq[static_cast<std::size_t>(to[k])] = src(0)[k];
                    }
            } else if (op == "matmul" && in(0).shape.rank >= 2 && in(1).shape.rank >= 2 && r >= 2) {
                const int ra = in(0).shape.rank, rb = in(1).shape.rank;
                const std::uint32_t batch = all_axes(r - 2);
                out = ((aligned_axes(mask(0), ra, r) | aligned_axes(mask(1), rb, r)) & batch);
                if (mask(0) >> (ra - 2) & 1u) out |= 1u << (r - 2);
                if (mask(1) >> (rb - 1) & 1u) out |= 1u << (r - 1);
                for (int j = 0; j < r - 2; ++j) eq[static_cast<std::size_t>(j)] = broadcast(j);
                eq[static_cast<std::size_t>(r - 2)] = src(0)[static_cast<std::size_t>(ra - 2)];
                eq[static_cast<std::size_t>(r - 1)] = src(1)[static_cast<std::size_t>(rb - 1)];
            } else if (s && (s->family == op_family::elementwise || s->family == op_family::activation) &&
                       s->min_inputs == s->max_inputs) {
                out = 0;
                for (std::size_t k = 0; k < n.inputs.size(); ++k) out |= aligned_axes(mask(k), in(k).shape.rank, r);
                for (int j = 0; j < r; ++j) eq[static_cast<std::size_t>(j)] = broadcast(j);
            }
        }
        m[i] = out & all_axes(r);
        // (an axis that is not dynamic equals no input extent)
        for (int j = 0; j < r; ++j)
            if (!(m[i] >> j & 1u)) eq[static_cast<std::size_t>(j)] = -1;
        e[i] = std::move(eq);
    }
    return va;
}

}  // namespace kiln::detail
