#pragma once
// Function mode's kernel compiler: each fused elementwise group of a traced function can be written out as C++
// source (the group's ops composed into one graph-mode expression type), compiled by the system's C++ compiler
// into a shared object, loaded, and run in place of the group's tile-by-tile interpretation. The compiled kernel is
// graph mode's own fused loop (backend/cpu/fused_loop.hpp) over that expression: every member's value stays in
// registers, where the interpreter stores each op's tile to L1 and reads it back for the next op.
//
// Off unless asked for (kiln::set_jit or the environment variable KILN_JIT): it needs a compiler and kiln's headers
// at run time. In the background mode a group runs interpreted until its kernel is ready; both compute the same
// bits (the kernel is built with no contraction of products into sums, as the interpreter's separate ops are).
// Kernels are cached on disk by a digest of their source, the command and kiln's headers, so a second process
// loads them in a millisecond.
//
// This header: the kernel's C++ source (jit_source), asking for a group's kernel (jit_prepare) and the public
// switches (set_jit, jit_stats, jit_wait); function/jit_service.hpp compiles, caches and loads the kernels.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jit_service.hpp"

namespace kiln {
namespace detail {

inline bool jit_identifier_ok(std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':' || c == '<' || c == '>' || c == ',' ||
              c == ' '))
            return false;
    return true;
}

// The C++ source of group g's kernel: its members as graph-mode node types over indexed leaves (one per distinct
// operand from outside the group) and exact constants (its numbers, by their bits), its exported members as the
// roots of one fused loop. Empty, with `why` set, where a member's op cannot be written into source.
// On kiln's GPU device (`device`), the roots of the device's elementwise kernel, one kernel launch.
template <int N = 0>
std::string jit_source(const function_graph& graph, const fused_group& g, jit_slot& slot, std::string& why,
                       bool device = false) {
    if (g.dtype != kiln::float32 && g.dtype != kiln::float64) return why = "not float32 or float64", std::string();
    const std::string T = g.dtype == kiln::float32 ? "float" : "double";
    std::string numbers, members;
    std::vector<std::int32_t> leaf_value;  // the node each leaf reads
    std::vector<std::string> seen_numbers;
    slot.operands.clear();
    for (std::size_t j = 0; j < g.members.size(); ++j) {
        const graph_node& n = graph.nodes[static_cast<std::size_t>(g.members[j])];
        const tile_recipe* r = n.params.recipe;
        if (!r || !jit_identifier_ok(r->op) || r->value_type != T)
            return why = "op " + n.op + " has no kernel recipe", std::string();
        std::string args;
        std::size_t tensor_at = 0, number_at = 0;
        for (std::size_t q = 0; q < r->arity; ++q) {
            if (q) args += ", ";
            if (r->tensors & (1u << q)) {
                if (tensor_at >= g.inputs[j].size()) return why = "op " + n.op + ": operands do not match", std::string();
                const auto& op = g.inputs[j][tensor_at];
                if (op.kind == fused_group::operand::member) {
                    args += "M" + std::to_string(op.index);
                } else {
                    std::size_t leaf = 0;
                    while (leaf < leaf_value.size() && leaf_value[leaf] != op.index) ++leaf;
                    if (leaf == leaf_value.size()) {
                        leaf_value.push_back(op.index);
                        slot.operands.push_back({static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(tensor_at)});
                    }
                    args += "kiln::detail::indexed_leaf<" + std::to_string(leaf) + ", T>";
                }
                ++tensor_at;
            } else {
                const std::uint64_t bits = r->number(n.params.values.data(), number_at++);
                const std::string name = "N" + hex64(bits);
                if (std::find(seen_numbers.begin(), seen_numbers.end(), name) == seen_numbers.end()) {
                    seen_numbers.push_back(name);
                    const std::string literal = T == "float" ? "std::uint32_t{0x" + hex64(bits).substr(8) + "u}"
                                                             : "std::uint64_t{0x" + hex64(bits) + "ull}";
                    numbers += "struct " + name + " {\n    template <class D>\n    static constexpr D value() noexcept { "
                               "return static_cast<D>(std::bit_cast<T>(" + literal + ")); }\n};\n";
                }
                args += name;
            }
        }
        if (tensor_at != g.inputs[j].size()) return why = "op " + n.op + ": operands do not match", std::string();
        members += "using M" + std::to_string(j) + " = kiln::detail::node<" + std::string(r->op) + ", " + args + ">;\n";
    }
    std::string roots, outs;
    std::size_t k = 0;
    for (std::size_t j = 0; j < g.members.size(); ++j)
        if (g.exported[j]) {
            roots += (roots.empty() ? "M" : ", M") + std::to_string(j);
            outs += std::string(k ? ", " : "") + "static_cast<T*>(out[" + std::to_string(k) + "])";
            ++k;
        }
    if (k == 0) return why = "the group exports nothing", std::string();
    std::string s = std::string("// kiln: the kernel of one fused group of a traced function (kiln/function/jit.hpp)\n") +
                    (device ? "#include <kiln/function/jit_device_kernel.hpp>\n" : "#include <kiln/function/jit_kernel.hpp>\n");
    for (const std::string& h : basic_jit_service<N>::instance().options().includes) s += "#include \"" + h + "\"\n";
    s += "namespace {\nusing T = " + T + ";\n" + numbers + "}  // namespace\nnamespace kiln {\n";
    for (const std::string& name : seen_numbers)
        s += "template <>\nstruct is_constant<::" + name + "> : std::true_type {};\n";
    s += "}  // namespace kiln\nnamespace {\n" + members + "}  // namespace\n";
    if (device)
        return s + "extern \"C\" void kiln_fused_group_device(const void* const* in, void* const* out, "
                   "const std::ptrdiff_t* periods, std::ptrdiff_t n, void* stream) {\n    "
                   "kiln::detail::run_device_group<" + roots + ">(in, out, periods, n, stream);\n}\n";
    std::string ptrs;
    for (std::size_t j = 0; j < k; ++j) ptrs += std::string(j ? ", " : "") + "T*";
    s += "extern \"C\" void kiln_fused_group(const void* const* in, void* const* out, std::ptrdiff_t b, "
         "std::ptrdiff_t e, bool stream) {\n"
         "    kiln::detail::run_jit_group<" + roots + ">(in, std::tuple<" + ptrs + ">(" + outs + "), b, e, stream);\n}\n";
    return s;
}

// Gives group g a slot and asks for its kernel (nothing when the compiler is off or the group cannot be written).
template <int N = 0>
void jit_prepare(const function_graph& graph, fused_group& g, std::optional<jit_mode> mode = std::nullopt,
                 bool device = false) {
    basic_jit_service<N>& svc = basic_jit_service<N>::instance();
    const jit_mode m = mode ? *mode : svc.mode();
    if (m == jit_mode::off || g.members.size() < 2) return;
    auto slot = std::make_shared<jit_slot>();
    std::string why;
    const std::string source = jit_source<N>(graph, g, *slot, why, device);
    if (source.empty()) return svc.refuse("a fused group cannot be written as C++ (" + why + "); it is interpreted");
    g.jit = slot;
    svc.request(slot, source, m, device);
}

}  // namespace detail

// Sets how kiln::function compiles its fused groups, for the whole process (functions prepared for a signature
// afterwards). The environment variable KILN_JIT (off, background or blocking) sets the mode at start.
template <int N = 0>
void set_jit(jit_options options) {
    detail::basic_jit_service<N>::instance().set(std::move(options));
}
template <int N = 0>
jit_options jit_settings() {
    return detail::basic_jit_service<N>::instance().options();
}
// Counts of the kernels asked for, compiled, loaded and failed, and the last failure's reason.
template <int N = 0>
jit_statistics jit_stats() {
    return detail::basic_jit_service<N>::instance().stats();
}
// Waits until every kernel being compiled is ready (or has failed).
template <int N = 0>
void jit_wait() {
    detail::basic_jit_service<N>::instance().wait();
}

}  // namespace kiln
