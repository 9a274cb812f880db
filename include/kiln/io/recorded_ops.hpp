#pragma once
// The ops of a traced function's graph rebuilt from what a file holds of them (their registry names, attributes as
// the tracer prints them, and parameters), as kiln::load (io/function_file.hpp) and the ONNX export read them: each
// through the vocabulary, the elementwise ops by the registry's kernels and the others by eager mode's functions.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../function/function.hpp"
#include "../registry.hpp"
#include "json.hpp"

namespace kiln::detail {

inline std::optional<dtype> dtype_named(std::string_view s) {
    for (dtype d : {dtype::boolean, dtype::int32, dtype::int64, dtype::float32, dtype::float64})
        if (name(d) == s) return d;
    return std::nullopt;
}

// A node's attributes as the tracer writes them: "k=v k=v" (v an integer, a list "1,2", true/false, a dtype or a
// number's text).
inline std::map<std::string, std::string> split_attrs(std::string_view text) {
    std::map<std::string, std::string> out;
    std::size_t i = 0;
    while (i < text.size()) {
        while (i < text.size() && text[i] == ' ') ++i;
        if (i >= text.size()) break;
        std::size_t end = text.find(' ', i);
        if (end == std::string_view::npos) end = text.size();
        const std::string_view item = text.substr(i, end - i);
        const std::size_t eq = item.find('=');
        if (eq == std::string_view::npos || eq == 0)
            throw value_error("attribute '" + json::reader::printable(item) + "' is not name=value");
        if (!out.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))).second)
            throw value_error("attribute '" + json::reader::printable(item.substr(0, eq)) + "' is given twice");
        i = end;
    }
    return out;
}

inline std::int64_t attr_int(const std::map<std::string, std::string>& a, const char* key) {
    const auto it = a.find(key);
    if (it == a.end()) throw value_error(std::string("attribute '") + key + "' is missing");
    const std::string& s = it->second;
    std::size_t i = 0;
    const bool neg = !s.empty() && s[0] == '-';
    if (neg) ++i;
    if (i >= s.size() || s.size() - i > 19) throw value_error(std::string("attribute '") + key + "' is not an integer");
    std::int64_t v = 0;
    for (; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') throw value_error(std::string("attribute '") + key + "' is not an integer");
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s[i] - '0', &v))
            throw value_error(std::string("attribute '") + key + "' is out of range");
    }
    return neg ? -v : v;
}

inline int attr_axis(const std::map<std::string, std::string>& a, const char* key) {
    const std::int64_t v = attr_int(a, key);
    if (v < -max_rank || v > max_rank) throw value_error(std::string("attribute '") + key + "' is out of range");
    return static_cast<int>(v);
}

inline std::vector<int> attr_axes(const std::map<std::string, std::string>& a, const char* key) {
    const auto it = a.find(key);
    if (it == a.end()) throw value_error(std::string("attribute '") + key + "' is missing");
    std::vector<int> out;
    std::string_view s = it->second;
    while (!s.empty()) {
        const std::size_t c = s.find(',');
        const std::string one(s.substr(0, c));
        if (out.size() >= static_cast<std::size_t>(max_rank)) throw value_error(std::string("attribute '") + key + "' lists too many axes");
        out.push_back(attr_axis({{key, one}}, key));
        if (c == std::string_view::npos) break;
        s.remove_prefix(c + 1);
        if (s.empty()) throw value_error(std::string("attribute '") + key + "' ends with a comma");
    }
    return out;
}

inline bool attr_bool(const std::map<std::string, std::string>& a, const char* key) {
    const auto it = a.find(key);
    if (it == a.end()) throw value_error(std::string("attribute '") + key + "' is missing");
    if (it->second == "true") return true;
    if (it->second == "false") return false;
    throw value_error(std::string("attribute '") + key + "' is neither true nor false");
}

inline void attrs_only(const std::map<std::string, std::string>& a, std::initializer_list<const char*> allowed) {
    for (const auto& [k, v] : a) {
        bool ok = false;
        for (const char* n : allowed) ok = ok || k == n;
        if (!ok) throw value_error("unknown attribute '" + json::reader::printable(k) + "'");
    }
}

// The versions of the ops this kiln writes and reads (all 1: an op whose meaning changes gets a new version, and
// files of the old one are refused with a message, or translated).
inline std::uint32_t op_version(std::string_view) { return 1; }

// An elementwise node's number operands: bit k set when operand k is a number ("operand<k>=..." in its
// attributes, as the tracer writes them); any other attribute is an error.
inline std::uint32_t number_operands(const std::map<std::string, std::string>& a, std::size_t arity) {
    std::uint32_t numbers = 0;
    for (const auto& [k, v] : a) {
        if (k.rfind("operand", 0) != 0 || k.size() != 8 || k[7] < '0' || k[7] >= static_cast<char>('0' + arity))
            throw value_error("unknown attribute '" + json::reader::printable(k) + "'");
        numbers |= 1u << (k[7] - '0');
    }
    return numbers;
}

// The promoted dtype of an elementwise node's tensor operands (where's condition aside), or none; `dtype_of(t)` is
// the t-th tensor operand's dtype.
template <class DtypeOf>
std::optional<dtype> tensor_operands_dtype(std::uint32_t numbers, std::size_t arity, bool is_where, DtypeOf&& dtype_of) {
    std::optional<dtype> d;
    for (std::size_t k = 0, t = 0; k < arity; ++k)
        if (!(numbers >> k & 1)) {
            if (!(is_where && k == 0)) d = d ? promote(*d, dtype_of(t)) : dtype_of(t);
            ++t;
        }
    return d;
}

// The dtype a number operand computes in beside tensors of dtype `d` (PyTorch's rule, as eager mode applies it: a
// number joins its tensors' dtype, and a floating number makes an integer or bool tensor float32; where's two
// numbers give float32, or int64; a bool number takes its tensors' dtype, or is a bool). A file holds it as a
// rank-0 tensor of this dtype.
inline dtype number_operand_dtype(bool is_float, std::optional<dtype> d, bool is_bool = false) {
    if (is_bool) return d ? *d : dtype::boolean;
    if (is_float) return d && is_floating(*d) ? *d : dtype::float32;
    return d && *d != dtype::boolean ? *d : dtype::int64;
}

// A list of integers of any size ("2,3"; "" is empty), at most kiln::max_rank of them.
inline std::vector<std::int64_t> attr_ints(const std::map<std::string, std::string>& a, const char* key) {
    const auto it = a.find(key);
    if (it == a.end()) throw value_error(std::string("attribute '") + key + "' is missing");
    std::vector<std::int64_t> out;
    std::string_view s = it->second;
    while (!s.empty()) {
        const std::size_t c = s.find(',');
        if (out.size() >= static_cast<std::size_t>(max_rank)) throw value_error(std::string("attribute '") + key + "' lists too many values");
        out.push_back(attr_int({{key, std::string(s.substr(0, c))}}, key));
        if (c == std::string_view::npos) break;
        s.remove_prefix(c + 1);
        if (s.empty()) throw value_error(std::string("attribute '") + key + "' ends with a comma");
    }
    return out;
}

inline double attr_number(const std::map<std::string, std::string>& a, const char* key) {
    const auto it = a.find(key);
    if (it == a.end()) throw value_error(std::string("attribute '") + key + "' is missing");
    const std::string& s = it->second;
    char* end = nullptr;
    const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
    if (s.empty() || end != s.c_str() + s.size()) throw value_error(std::string("attribute '") + key + "' is not a number");
    return v;
}

// The mode-neutral structural ops (ops/layout.hpp, ops/gather.hpp) rebuilt from their attributes: each runs
// through eager mode's seam, as it ran when it was traced.
template <class Op>
replay_fn structural_replay(const typename Op::attributes& at, std::size_t inputs) {
    if (inputs != static_cast<std::size_t>(Op::arity))
        throw value_error("takes " + std::to_string(Op::arity) + " inputs, not " + std::to_string(inputs));
    return [at](auto in, auto) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return detail::apply_structural<Op>(at, in[I]...);
        }(std::make_index_sequence<Op::arity>{});
    };
}

// (A template on an unused int, as rebuild_op: the kernels of every op a file may hold compile only in the
// translation units that load a function.)
template <int N = 0>
std::optional<replay_fn> rebuild_layout_op(const std::string& op, const std::map<std::string, std::string>& a,
                                           std::size_t inputs) {
    auto axis_op = [&]<class Op>() {
        attrs_only(a, {"axis"});
        return structural_replay<Op>(ops::axis_attrs{attr_axis(a, "axis")}, inputs);
    };
    if (op == "take_along_axis") return axis_op.template operator()<ops::take_along_axis>();
    if (op == "scatter_add_along") return axis_op.template operator()<ops::scatter_add_along>();
    if (op == "index_select") return axis_op.template operator()<ops::take>();
    if (op == "index_add") return axis_op.template operator()<ops::take_add>();
    if (op == "argsort") {
        attrs_only(a, {"axis", "descending"});
        return structural_replay<ops::argsort>(ops::sort_attrs{attr_axis(a, "axis"), attr_bool(a, "descending")}, inputs);
    }
    if (op == "dropout") {
        attrs_only(a, {"p"});
        return structural_replay<ops::dropout>(ops::make_dropout_attrs(attr_number(a, "p")), inputs);
    }
    if (op == "flip") {
        attrs_only(a, {"axes"});
        return structural_replay<ops::flip>(ops::make_flip_attrs(attr_axes(a, "axes")), inputs);
    }
    if (op == "tile" || op == "untile") {
        attrs_only(a, {"reps"});
        const auto r = attr_ints(a, "reps");
        const auto at = ops::make_tile_attrs(std::vector<std::ptrdiff_t>(r.begin(), r.end()));
        return op == "tile" ? structural_replay<ops::tile>(at, inputs) : structural_replay<ops::untile>(at, inputs);
    }
    if (op == "repeat" || op == "unrepeat") {
        attrs_only(a, {"repeats", "axis"});
        const ops::repeat_attrs at{attr_int(a, "repeats"), attr_axis(a, "axis")};
        return op == "repeat" ? structural_replay<ops::repeat>(at, inputs) : structural_replay<ops::unrepeat>(at, inputs);
    }
    if (op == "pad" || op == "crop") {
        attrs_only(a, {"before", "after", "value"});
        const auto b = attr_ints(a, "before"), e = attr_ints(a, "after");
        if (b.size() != e.size()) throw value_error("attributes 'before' and 'after' differ in length");
        std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> w;
        for (std::size_t i = 0; i < b.size(); ++i) w.emplace_back(b[i], e[i]);
        const auto at = ops::make_pad_attrs(w, attr_number(a, "value"));
        return op == "pad" ? structural_replay<ops::pad>(at, inputs) : structural_replay<ops::crop>(at, inputs);
    }
    if (op == "im2col" || op == "col2im") {
        attrs_only(a, {"kernel", "stride", "pads", "dilation", "value"});
        const auto at = ops::make_window_attrs(op, attr_ints(a, "kernel"), attr_ints(a, "stride"), attr_ints(a, "pads"),
                                               attr_ints(a, "dilation"), attr_number(a, "value"));
        return op == "im2col" ? structural_replay<ops::im2col>(at, inputs) : structural_replay<ops::col2im>(at, inputs);
    }
    if (op == "take_part" || op == "put_part") {
        attrs_only(a, {"axis", "from_end"});
        const ops::part_attrs at{attr_axis(a, "axis"), attr_bool(a, "from_end")};
        return op == "take_part" ? structural_replay<ops::take_part>(at, inputs) : structural_replay<ops::put_part>(at, inputs);
    }
    if (op == "squeeze" && a.count("axis")) {
        attrs_only(a, {"axis"});
        return structural_replay<ops::squeeze>(ops::join_attrs{attr_axis(a, "axis")}, inputs);
    }
    if (op == "einsum" || op == "einsum_to") {
        attrs_only(a, {"equation"});
        const auto at = ops::make_einsum_attrs(a.count("equation") ? a.at("equation") : "");
        return op == "einsum" ? structural_replay<ops::einsum>(at, inputs) : structural_replay<ops::einsum_to>(at, inputs);
    }
    if (op == "unslice") {
        ops::slice_attrs at;
        if (a.count("parts")) {
            attrs_only(a, {"axis", "parts", "part"});
            const auto parts = attr_int(a, "parts"), part = attr_int(a, "part");
            if (parts <= 0 || parts > 1 << 30 || part < 0 || part >= parts) throw value_error("attribute 'part' is out of range");
            at = ops::slice_attrs{attr_axis(a, "axis"), 0, 0, 1, static_cast<int>(parts), static_cast<int>(part)};
        } else {
            attrs_only(a, {"axis", "start", "stop", "step"});
            at = ops::slice_attrs{attr_axis(a, "axis"), attr_int(a, "start"), attr_int(a, "stop"), attr_int(a, "step"), 0, 0};
        }
        return structural_replay<ops::unslice>(at, inputs);
    }
    return std::nullopt;
}

template <int N = 0>
replay_fn rebuild_op(const std::string& op, const std::string& attrs_text, std::size_t inputs, const op_params& params) {
    const std::map<std::string, std::string> a = split_attrs(attrs_text);
    const std::size_t np = params.values.size();
    auto need = [&](std::size_t lo, std::size_t hi, std::size_t nparams) {
        if (inputs < lo || inputs > hi)
            throw value_error("takes " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + " or more") + " inputs, not " +
                              std::to_string(inputs));
        if (np != nparams)
            throw value_error("takes " + std::to_string(nparams) + " parameters, not " + std::to_string(np));
    };
    if (auto f = rebuild_layout_op<N>(op, a, inputs)) {
        if (np != 0) throw value_error("takes no parameters, not " + std::to_string(np));
        return *f;
    }
    if (op == "matmul") {
        need(2, 2, 0);
        attrs_only(a, {});
        return [](auto in, auto) { return matmul(in[0], in[1]); };
    }
    if (op == "concat") {
        need(1, SIZE_MAX, 0);
        attrs_only(a, {"axis"});
        const int ax = attr_axis(a, "axis");
        return [ax](auto in, auto) { return concat(std::vector<tensor>(in.begin(), in.end()), ax); };
    }
    if (op == "copy") {
        need(1, 1, 0);
        attrs_only(a, {});
        return [](auto in, auto) { return in[0].clone(); };
    }
    if (op == "cast") {
        need(1, 1, 0);
        attrs_only(a, {"dtype"});
        const auto d = dtype_named(a.count("dtype") ? a.at("dtype") : "");
        if (!d) throw value_error("attribute 'dtype' is not a dtype");
        return [d = *d](auto in, auto) { return in[0].to(d); };
    }
    if (op == "sum" || op == "prod" || op == "max" || op == "min") {
        need(1, 1, 0);
        attrs_only(a, {"axes", "keepdims"});
        const std::vector<int> axes = attr_axes(a, "axes");
        const bool keep = attr_bool(a, "keepdims");
        const int which = op == "sum" ? 0 : op == "prod" ? 1 : op == "max" ? 2 : 3;
        return [axes, keep, which](auto in, auto) -> tensor {
            switch (which) {
                case 0: return sum(in[0], axes, keep);
                case 1: return prod(in[0], axes, keep);
                case 2: return max(in[0], axes, keep);
                default: return min(in[0], axes, keep);
            }
        };
    }
    if (op == "cumsum" || op == "cumprod") {
        need(1, 1, 0);
        attrs_only(a, {"axis", "reverse"});
        const int ax = attr_axis(a, "axis");
        const bool rev = attr_bool(a, "reverse");
        if (op == "cumsum") return [ax, rev](auto in, auto) { return cumsum(in[0], ax, rev); };
        return [ax, rev](auto in, auto) { return cumprod(in[0], ax, rev); };
    }
    if (op == "argmax" || op == "argmin") {
        need(1, 1, 0);
        attrs_only(a, {"axis", "keepdims"});
        const int ax = attr_axis(a, "axis");
        const bool keep = attr_bool(a, "keepdims");
        if (op == "argmax") return [ax, keep](auto in, auto) { return argmax(in[0], ax, keep); };
        return [ax, keep](auto in, auto) { return argmin(in[0], ax, keep); };
    }
    if (op == "reshape" || op == "broadcast_to") {
        if (np > static_cast<std::size_t>(max_rank)) throw value_error("has more parameters than a shape has dimensions");
        need(1, 1, np);
        attrs_only(a, {"shape"});
        const int r = static_cast<int>(np);
        if (op == "reshape")
            return [r](auto in, auto p) { return in[0].reshape(param_dims(p, 0, r)); };
        return [r](auto in, auto p) { return in[0].broadcast_to(param_dims(p, 0, r)); };
    }
    if (op == "permute") {
        need(1, 1, 0);
        attrs_only(a, {"dims"});
        const std::vector<int> order = attr_axes(a, "dims");
        return [order](auto in, auto) {
            const int r = in[0].dim();
            std::array<int, max_rank> fwd{};
            bool seen[max_rank] = {};
            if (static_cast<int>(order.size()) != r)
                throw value_error("kiln: value_error in 'permute': " + std::to_string(order.size()) + " axes for rank " + std::to_string(r));
            for (int i = 0; i < r; ++i) {
                const int ax = order[static_cast<std::size_t>(i)];
                if (ax < 0 || ax >= r || seen[ax]) throw value_error("kiln: value_error in 'permute': the axes are not a permutation");
                seen[ax] = true;
                fwd[static_cast<std::size_t>(i)] = ax;
            }
            return in[0].permute_array(fwd, r);
        };
    }
    if (op == "transpose") {
        need(1, 1, 0);
        attrs_only(a, {"dim0", "dim1"});
        const int x = attr_axis(a, "dim0"), y = attr_axis(a, "dim1");
        return [x, y](auto in, auto) { return in[0].transpose(x, y); };
    }
    if (op == "slice") {
        need(1, 1, 3);
        attrs_only(a, {"axis", "start", "stop", "step"});
        const int ax = attr_axis(a, "axis");
        return [ax](auto in, auto p) { return in[0].slice(ax, p[0], p[1], p[2]); };
    }
    if (op == "select") {
        need(1, 1, 1);
        attrs_only(a, {"axis", "index"});
        const int ax = attr_axis(a, "axis");
        return [ax](auto in, auto p) { return in[0].select(ax, p[0]); };
    }
    if (op == "unsqueeze") {
        need(1, 1, 0);
        attrs_only(a, {"axis"});
        const int ax = attr_axis(a, "axis");
        return [ax](auto in, auto) { return in[0].unsqueeze(ax); };
    }
    if (op == "full") {
        if (np == 0 || np - 1 > static_cast<std::size_t>(max_rank)) throw value_error("has a wrong number of parameters");
        need(0, 0, np);
        attrs_only(a, {"shape", "value", "dtype"});
        if (!(params.float_params >> (np - 1) & 1)) throw value_error("its value parameter is not a number");
        const auto d = dtype_named(a.count("dtype") ? a.at("dtype") : "");
        if (!d) throw value_error("attribute 'dtype' is not a dtype");
        const int r = static_cast<int>(np - 1);
        return [r, d = *d](auto, auto p) {
            return full(param_dims(p, 0, r), param_number(p[static_cast<std::size_t>(r)]), d);
        };
    }
    // Elementwise ops of the vocabulary, from the registry: tensor operands are inputs, number operands
    // ("operand<k>=...") parameters.
    const op_schema* s = find_op_or_null<N>(op);
    // A program's own structural op (kiln::register_op): its attributes in the registry's text forms.
    if (s && s->family == op_family::join && s->rule == shape_rule::closed && s->kernel &&
        !std::any_of(registered_ops<N>().begin(), registered_ops<N>().end(), [&](const op_schema& o) { return &o == s; })) {
        if (inputs != static_cast<std::size_t>(s->min_inputs))
            throw value_error("takes " + std::to_string(s->min_inputs) + " inputs, not " + std::to_string(inputs));
        if (np != 0) throw value_error("takes no parameters, not " + std::to_string(np));
        attributes given;
        for (const auto& [k, v] : a) given.set(k, parse_attribute(*s, k, v));
        const attributes resolved = s->resolve(given);
        return [kernel = s->kernel, resolved](auto in, auto) { return kernel(in, resolved); };
    }
    if (!s || (s->family != op_family::elementwise && s->family != op_family::activation) || s->min_inputs != s->max_inputs)
        throw value_error("is not an op kiln can load (no such op in this kiln's vocabulary, or one that cannot be saved)");
    const std::size_t arity = static_cast<std::size_t>(s->min_inputs);
    if (arity > 8) throw value_error("has too many operands");
    const std::uint32_t numbers = number_operands(a, arity);
    const std::size_t count = static_cast<std::size_t>(std::popcount(numbers));
    if (count == arity) throw value_error("has no tensor operand");
    need(arity - count, arity - count, count);
    const bool is_where = op == "where";
    const std::uint64_t floats = params.float_params, bools = params.bool_params;
    const op_kernel kernel = s->kernel;
    return [numbers, arity, floats, bools, kernel, is_where](auto in, auto p) {
        if (numbers == 0) return kernel(in, {});
        // A number becomes a rank-0 tensor of the dtype the op would convert it to, so the op computes what it
        // computed with the number.
        const std::optional<dtype> d = tensor_operands_dtype(numbers, arity, is_where, [&](std::size_t t) { return in[t].dtype(); });
        std::vector<tensor> ops;
        ops.reserve(arity);
        for (std::size_t k = 0, t = 0, q = 0; k < arity; ++k) {
            if (!(numbers >> k & 1)) {
                ops.push_back(in[t++]);
                continue;
            }
            const bool is_float = floats >> q & 1, is_bool = bools >> q & 1;
            const std::int64_t bits = p[q++];
            const dtype nd = number_operand_dtype(is_float, d, is_bool);
            if (is_float) {
                ops.push_back(full(dims{}, param_number(bits), nd));
            } else {
                tensor t(nd, dims{});
                dispatch(nd, [&]<class T>() { *t.data<T>() = static_cast<T>(bits); });
                ops.push_back(t);
            }
        }
        return kernel(ops, {});
    };
}

}  // namespace kiln::detail
