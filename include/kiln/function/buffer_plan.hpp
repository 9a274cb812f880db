#pragma once
// The buffer plan of a traced function: for one signature and one set of dynamic extents, where every value lives
// and how every node runs, worked out once from a call that the executor watched (function/executor.hpp).
//
// Each value is one of: an argument; a constant or variable (read where it lives); a view of another value (an
// op whose result shared its input's storage when watched: it costs nothing at run time); a buffer in the call's
// arena (the results of fused groups, single elementwise ops, 2-D matrix products and contiguous sums, which the
// plan runs itself from raw pointers); or the tensor that the op's own replay function returns (every other op).
// A result is written into a new tensor of its own rather than into the arena.
// Arena buffers are reused once the values in them, and every view of them, are dead (first fit by liveness), and
// an elementwise result takes over its operand's buffer when that operand dies there (in place).
//
// A call runs the plan when its arguments have the layouts (dtype, shape, strides) of the watched call; any other
// call runs node by node, as before. This header says what a plan is; function/plan_build.hpp makes plans and
// function/plan_run.hpp runs them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../backend/cpu/device.hpp"
#include "fused_group.hpp"
#include "graph.hpp"

namespace kiln {
namespace detail {

struct buffer_plan {
    struct value {
        enum kind_t : std::uint8_t { none, argument, fixed, arena, view, owned } kind = none;
        std::int32_t source = -1;    // view: the value it views
        std::ptrdiff_t offset = 0;   // arena: byte offset; view: bytes from its source's first element
        std::int32_t root = -1;      // the value whose buffer this one lives in (itself unless a view)
        bool result = false;         // arena kind: a result's buffer, a new tensor each call instead of the arena
        kiln::dtype dtype = kiln::float32;
        dims shape, strides;
    };
    struct step {
        enum kind_t : std::uint8_t { view, group, matmul, sum, op, effect } kind = op;
        std::int32_t node = -1;   // group: its index in `groups`
        // matmul: C (m x n) = A (m x k) B (k x n), A[i, j] at i * ars + j * acs (B likewise)
        std::ptrdiff_t m = 0, n = 0, k = 0, ars = 0, acs = 0, brs = 0, bcs = 0;
        // matmul's epilogue (the matmul + bias + activation fusion): C[i, j] += bias[j % period] in place, which
        // is then the value of the add node `add`; with `act`, that unary elementwise op of C into its own buffer.
        std::int32_t bias = -1, add = -1, act = -1;
        std::ptrdiff_t period = 0;
        // sum: the operand's shape with the reduced axes set to 1
        dims keep;
        std::vector<std::int32_t> release;  // owned values (fallback results) that die after this step
        std::vector<std::pair<std::int32_t, std::int32_t>> in_place;  // group: (member, operand buffer it took over)
    };

    std::uint64_t id = 0;
    bool ok = false;            // false: this signature and these extents run node by node
    std::string why_not;        // when not ok: why ("group 0: operand %3 is not contiguous")
    std::vector<value> values;  // per node
    std::vector<step> steps;
    std::vector<fused_group> groups;  // the executor's groups, and single elementwise ops as groups of one
    std::size_t arena_bytes = 0;
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params;  // bound for these extents (null: traced)

    std::size_t planned(step::kind_t k) const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.kind == k;
        return c;
    }
    // Values written over a buffer of their own operand that died there (in-place execution).
    std::size_t in_place() const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.in_place.size();
        return c;
    }
    // Matrix products that add a bias (and apply an activation) as they store their result.
    std::size_t fused_epilogues() const {
        std::size_t c = 0;
        for (const step& s : steps) c += s.kind == step::matmul && s.bias >= 0;
        return c;
    }
    // The steps, one a line: "matmul %3 (32x10 * 10x64) + bias %4 -> %5, relu -> %6", "group 1: %10 %11 %12", ...
    std::string describe(const function_graph& g) const {
        if (!ok) return "not planned: " + why_not + "\n";
        std::string out;
        auto v = [](std::int32_t i) { return "%" + std::to_string(i); };
        for (const step& s : steps) {
            switch (s.kind) {
                case step::view:
                    if (s.node < 0) continue;
                    out += "view " + v(s.node);
                    break;
                case step::group: {
                    out += "group " + std::to_string(s.node) + ":";
                    for (std::int32_t m : groups[static_cast<std::size_t>(s.node)].members)
                        out += " " + v(m) + " " + g.nodes[static_cast<std::size_t>(m)].op;
                    for (const auto& [m, over] : s.in_place) out += ", " + v(m) + " in place of " + v(over);
                    break;
                }
                case step::matmul:
                    out += "matmul " + v(s.node) + " (" + std::to_string(s.m) + "x" + std::to_string(s.k) + " * " +
                           std::to_string(s.k) + "x" + std::to_string(s.n) + ")";
                    if (s.bias >= 0) out += " + bias " + v(s.bias) + " -> " + v(s.add);
                    if (s.act >= 0) out += ", " + g.nodes[static_cast<std::size_t>(s.act)].op + " -> " + v(s.act);
                    break;
                case step::sum: out += "sum " + v(s.node); break;
                case step::op: out += "op " + v(s.node) + " " + g.nodes[static_cast<std::size_t>(s.node)].op; break;
                case step::effect: out += "effect " + v(s.node) + " " + g.nodes[static_cast<std::size_t>(s.node)].op; break;
            }
            out += "\n";
        }
        return out;
    }

    const std::int64_t* params_of(const function_graph& g, std::int32_t node) const {
        if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)].data();
        return g.nodes[static_cast<std::size_t>(node)].params.values.data();
    }
    std::span<const std::int64_t> param_span(const function_graph& g, std::int32_t node) const {
        if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)];
        return g.nodes[static_cast<std::size_t>(node)].params.values;
    }
};

inline std::uint64_t next_plan_id() {
    static std::atomic<std::uint64_t> counter{1};
    return counter.fetch_add(1, std::memory_order_relaxed);
}

// "axes=0,1 keepdims=true" -> {0, 1}, true (false when the text is not a reduction's).
template <int = 0>
bool parse_reduction_attrs(const std::string& attrs, std::vector<int>& axes, bool& keepdims) {
    const std::size_t a = attrs.find("axes="), k = attrs.find("keepdims=");
    if (a != 0 || k == std::string::npos) return false;
    axes.clear();
    std::size_t i = 5;
    while (i < attrs.size() && attrs[i] != ' ') {
        const std::size_t end = attrs.find_first_of(", ", i);
        const std::string part = attrs.substr(i, end - i);
        char* stop = nullptr;
        const long v = std::strtol(part.c_str(), &stop, 10);
        if (part.empty() || *stop != '\0') return false;
        axes.push_back(static_cast<int>(v));
        i = end == std::string::npos ? attrs.size() : end + (attrs[end] == ',' ? 1 : 0);
    }
    keepdims = attrs.compare(k + 9, 4, "true") == 0;
    return true;
}

// How many elements at x's first element repeat along it when x is a broadcast of a contiguous tail (leading axes of
// stride 0, then contiguous trailing axes: a bias broadcast over rows, a number broadcast over a shape); x.numel()
// for a contiguous x; 0 for other layouts.
template <int = 0>
std::ptrdiff_t repeating_period(const tensor& x) {
    std::ptrdiff_t period = 1;
    int d = x.dim() - 1;
    for (; d >= 0; --d) {
        if (x.shape()[d] == 1) continue;
        if (x.strides()[d] != period) break;
        period *= x.shape()[d];
    }
    for (; d >= 0; --d)
        if (x.shape()[d] != 1 && x.strides()[d] != 0) return 0;
    return period;
}

// A group's tile grown to a multiple of `period` (0 when that passes 8192 elements), as fuse() makes it.
// `periodic`: the group has repeating operands already (the tile must stay a multiple of their periods).
inline std::ptrdiff_t tile_with_period(std::ptrdiff_t tile, std::ptrdiff_t period, bool periodic) {
    const std::ptrdiff_t base = tile % period == 0       ? tile
                                : tile == 1024 && !periodic ? period * ((1024 + period - 1) / period)
                                                           : tile / std::gcd(tile, period) * period;
    return base > 8192 ? 0 : base;
}

}  // namespace detail
}  // namespace kiln
