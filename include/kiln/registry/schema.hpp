#pragma once
// The vocabulary of the op registry, without its table: attribute values and their kinds, named attributes,
// tensor specs (a dtype and a shape), and op_schema, the description of one op (name, family, arity, attribute
// specs, shape rule, eager kernel) with the checks every use of it makes. What reads or writes ops by name (the
// registry's table in kiln/registry.hpp; saved graphs and the tracer next) stands on this.
#include <charconv>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "../core/names.hpp"
#include "../eager/eager.hpp"

namespace kiln {

// ---- attributes ---------------------------------------------------------------------------------------------

enum class attr_kind : std::uint8_t { integer, integers, number, boolean, dtype, text };

constexpr std::string_view name(attr_kind k) noexcept {
    switch (k) {
        case attr_kind::integer: return "an integer";
        case attr_kind::integers: return "a list of integers";
        case attr_kind::number: return "a number";
        case attr_kind::boolean: return "a bool";
        case attr_kind::dtype: return "a dtype";
        case attr_kind::text: return "a string";
    }
    return "unknown";
}

// One attribute value: an integer, a list of integers (axes, a shape), a number, a flag, a dtype or a string.
class attr_value {
public:
    attr_value(bool v) : v_(v) {}
    attr_value(int v) : v_(std::int64_t{v}) {}
    attr_value(long v) : v_(static_cast<std::int64_t>(v)) {}
    attr_value(long long v) : v_(static_cast<std::int64_t>(v)) {}
    attr_value(double v) : v_(v) {}
    attr_value(std::vector<std::int64_t> v) : v_(std::move(v)) {}
    attr_value(std::initializer_list<std::int64_t> v) : v_(std::vector<std::int64_t>(v)) {}
    attr_value(const std::vector<int>& v) : v_(std::vector<std::int64_t>(v.begin(), v.end())) {}
    attr_value(kiln::dtype v) : v_(v) {}
    attr_value(const char* v) : v_(std::string(v)) {}
    attr_value(std::string v) : v_(std::move(v)) {}

    attr_kind kind() const noexcept {
        switch (v_.index()) {
            case 0: return attr_kind::integer;
            case 1: return attr_kind::integers;
            case 2: return attr_kind::number;
            case 3: return attr_kind::boolean;
            case 4: return attr_kind::dtype;
            default: return attr_kind::text;
        }
    }
    // The value as `k`, where it converts exactly: an integer is also a list of one and a number, a bool an integer.
    bool converts_to(attr_kind k) const noexcept {
        const attr_kind h = kind();
        return h == k || (h == attr_kind::integer && (k == attr_kind::integers || k == attr_kind::number)) ||
               (h == attr_kind::boolean && k == attr_kind::integer);
    }
    std::int64_t integer() const {
        if (const bool* b = std::get_if<bool>(&v_)) return *b;
        return std::get<std::int64_t>(v_);
    }
    std::vector<std::int64_t> integers() const {
        if (const std::int64_t* i = std::get_if<std::int64_t>(&v_)) return {*i};
        return std::get<std::vector<std::int64_t>>(v_);
    }
    double number() const {
        if (const std::int64_t* i = std::get_if<std::int64_t>(&v_)) return static_cast<double>(*i);
        return std::get<double>(v_);
    }
    bool boolean() const { return std::get<bool>(v_); }
    kiln::dtype dtype() const { return std::get<kiln::dtype>(v_); }
    const std::string& text() const { return std::get<std::string>(v_); }

    friend bool operator==(const attr_value&, const attr_value&) = default;

private:
    std::variant<std::int64_t, std::vector<std::int64_t>, double, bool, kiln::dtype, std::string> v_;
};

inline std::string to_string(const attr_value& v) {
    switch (v.kind()) {
        case attr_kind::integer: return std::to_string(v.integer());
        case attr_kind::integers: {
            std::string s;
            for (std::int64_t i : v.integers()) s += (s.empty() ? "" : ",") + std::to_string(i);
            return s;
        }
        case attr_kind::number: {
            char buf[32];
            const auto r = std::to_chars(buf, buf + sizeof buf, v.number());
            return std::string(buf, r.ptr);
        }
        case attr_kind::boolean: return v.boolean() ? "true" : "false";
        case attr_kind::dtype: return std::string(name(v.dtype()));
        case attr_kind::text: return v.text();
    }
    return {};
}

// Named attribute values: {{"axes", {0, 1}}, {"keepdims", true}}.
class attributes {
public:
    attributes() = default;
    attributes(std::initializer_list<std::pair<std::string, attr_value>> values) {
        for (const auto& [k, v] : values) set(k, v);
    }

    attributes& set(std::string name, attr_value value) {
        for (auto& [k, v] : values_)
            if (k == name) {
                v = std::move(value);
                return *this;
            }
        values_.emplace_back(std::move(name), std::move(value));
        return *this;
    }
    const attr_value* find(std::string_view name) const noexcept {
        for (const auto& [k, v] : values_)
            if (k == name) return &v;
        return nullptr;
    }
    bool has(std::string_view name) const noexcept { return find(name) != nullptr; }
    const attr_value& at(std::string_view name) const {
        if (const attr_value* v = find(name)) return *v;
        throw value_error("kiln: value_error in 'attributes': no attribute named '" + std::string(name) + "'");
    }
    std::int64_t integer(std::string_view n) const { return at(n).integer(); }
    std::vector<std::int64_t> integers(std::string_view n) const { return at(n).integers(); }
    double number(std::string_view n) const { return at(n).number(); }
    bool boolean(std::string_view n) const { return at(n).boolean(); }
    kiln::dtype dtype(std::string_view n) const { return at(n).dtype(); }
    const std::string& text(std::string_view n) const { return at(n).text(); }

    std::size_t size() const noexcept { return values_.size(); }
    auto begin() const noexcept { return values_.begin(); }
    auto end() const noexcept { return values_.end(); }

private:
    std::vector<std::pair<std::string, attr_value>> values_;
};

// ---- schemas ------------------------------------------------------------------------------------------------

// What a shape rule needs of a tensor: its dtype and shape.
struct tensor_spec {
    kiln::dtype dtype = kiln::float32;
    dims shape;
    friend bool operator==(const tensor_spec& a, const tensor_spec& b) noexcept {
        return a.dtype == b.dtype && a.shape == b.shape;
    }
};

inline tensor_spec spec_of(const tensor& t) { return {t.dtype(), t.shape()}; }

inline std::string to_string(const tensor_spec& s) { return to_string(s.shape) + " " + std::string(name(s.dtype)); }

enum class op_family : std::uint8_t { elementwise, reduction, linalg, view, join, indexing, conversion, activation };

constexpr std::string_view name(op_family f) noexcept {
    switch (f) {
        case op_family::elementwise: return "elementwise";
        case op_family::reduction: return "reduction";
        case op_family::linalg: return "linalg";
        case op_family::view: return "view";
        case op_family::join: return "join";
        case op_family::indexing: return "indexing";
        case op_family::conversion: return "conversion";
        case op_family::activation: return "activation";
    }
    return "unknown";
}

// How `infer` finds an op's result: a closed rule on dtypes and shapes; by running the op's kernel on placeholder
// inputs (stride-0 zeros: no input memory, the result is allocated); or not at all, because the result's shape
// depends on the inputs' values (masked_select).
enum class shape_rule : std::uint8_t { closed, evaluated, data_dependent };

// An attribute of an op: its name, kind, whether it must be given, its default otherwise (an absent optional
// attribute without a default means something of its own: `axes` absent is every axis).
struct attr_spec {
    std::string name;
    attr_kind kind;
    bool required = false;
    std::optional<attr_value> fallback;
    std::string meaning;
};

using op_kernel = tensor (*)(std::span<const tensor> inputs, const attributes& attrs);
using op_shape_rule = tensor_spec (*)(std::span<const tensor_spec> inputs, const attributes& attrs);

struct op_schema {
    std::string name;
    op_family family;
    int min_inputs = 1, max_inputs = 1;  // max_inputs -1: any number (concat, stack)
    std::vector<attr_spec> attrs;
    bool differentiable = false;  // gradients flow to its floating inputs
    shape_rule rule = shape_rule::closed;
    std::string summary;
    op_kernel kernel = nullptr;
    op_shape_rule shape = nullptr;

    const attr_spec* find_attr(std::string_view n) const noexcept {
        for (const attr_spec& a : attrs)
            if (a.name == n) return &a;
        return nullptr;
    }

    // `given` checked against the schema (every name known, every kind right, every required one present) and
    // completed with the defaults. The errors name the op and the attribute.
    attributes resolve(const attributes& given) const {
        for (const auto& [k, v] : given) {
            const attr_spec* a = find_attr(k);
            if (!a) {
                std::vector<std::string> known;
                for (const attr_spec& s : attrs) known.push_back(s.name);
                throw value_error("kiln: value_error in '" + name + "': no attribute named '" + k + "'" +
                                  (known.empty() ? std::string("; '" + name + "' takes no attributes")
                                                 : "; closest: " + detail::closest_text(k, std::move(known))));
            }
            if (!v.converts_to(a->kind))
                throw value_error("kiln: value_error in '" + name + "': attribute '" + k + "' is " +
                                  std::string(kiln::name(a->kind)) + ", not " + std::string(kiln::name(v.kind())) +
                                  " ('" + to_string(v) + "')");
        }
        attributes out;
        for (const attr_spec& a : attrs) {
            if (const attr_value* v = given.find(a.name)) out.set(a.name, *v);
            else if (a.fallback) out.set(a.name, *a.fallback);
            else if (a.required)
                throw value_error("kiln: value_error in '" + name + "': the attribute '" + a.name + "' (" +
                                  std::string(kiln::name(a.kind)) + ": " + a.meaning + ") is required");
        }
        return out;
    }

    void check_arity(std::size_t n) const {
        const bool ok = static_cast<int>(n) >= min_inputs && (max_inputs < 0 || static_cast<int>(n) <= max_inputs);
        if (ok) return;
        std::string want = max_inputs < 0           ? "at least " + std::to_string(min_inputs)
                           : min_inputs == max_inputs ? std::to_string(min_inputs)
                                                      : std::to_string(min_inputs) + " to " + std::to_string(max_inputs);
        const bool one = (max_inputs < 0 ? min_inputs : max_inputs) == 1;
        throw value_error("kiln: value_error in '" + name + "': takes " + want + " input" + (one ? "" : "s") +
                          ", got " + std::to_string(n));
    }

    // Runs the op eagerly (recorded on the active gradient tapes).
    tensor apply(std::span<const tensor> inputs, const attributes& given = {}) const {
        check_arity(inputs.size());
        for (const tensor& t : inputs) t.check_valid(name.c_str());
        return kernel(inputs, resolve(given));
    }

    // The dtype and shape of the result, with the errors the kernel would give.
    tensor_spec infer(std::span<const tensor_spec> inputs, const attributes& given = {}) const {
        check_arity(inputs.size());
        if (rule == shape_rule::data_dependent)
            throw value_error("kiln: value_error in '" + name + "': the result's shape depends on the input values, "
                              "so it has no shape rule");
        const attributes a = resolve(given);
        if (rule == shape_rule::closed && shape) return shape(inputs, a);
        // The kernel is the rule: run on placeholders (one zero broadcast by stride 0, so views allocate
        // nothing), off the tapes.
        std::vector<tensor> ts;
        ts.reserve(inputs.size());
        for (const tensor_spec& s : inputs) ts.push_back(zeros(dims{}, s.dtype).broadcast_to(s.shape));
        const detail::tape_pause pause;
        const tensor y = kernel(ts, a);
        return {y.dtype(), y.shape()};
    }
};

// An attribute of `op` read from text, by the kind its schema gives: "0,1" (integers; "" is an empty list),
// "-1", "0.5", "true"/"false"/"1"/"0", "float32", or any string.
inline attr_value parse_attribute(const op_schema& op, std::string_view key, std::string_view text) {
    const attr_spec* a = op.find_attr(key);
    if (!a) [[unlikely]] {
        op.resolve(attributes{{std::string(key), attr_value(0)}});  // throws, naming the closest attribute
        throw value_error("kiln: value_error in '" + op.name + "': no attribute named '" + std::string(key) + "'");
    }
    const std::string whole(text);
    auto bad = [&]() -> value_error {
        return value_error("kiln: value_error in '" + op.name + "': attribute '" + std::string(key) + "' is " +
                           std::string(name(a->kind)) + ", not '" + whole + "'");
    };
    auto integer = [&](std::string_view s) {
        std::int64_t v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty()) throw bad();
        return v;
    };
    switch (a->kind) {
        case attr_kind::integer: return integer(text);
        case attr_kind::integers: {
            std::vector<std::int64_t> out;
            while (!text.empty()) {
                const std::size_t comma = text.find(',');
                out.push_back(integer(text.substr(0, comma)));
                if (comma == std::string_view::npos) break;
                text.remove_prefix(comma + 1);
                if (text.empty()) throw bad();
            }
            return out;
        }
        case attr_kind::number: {
            const std::string s(text);
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) throw bad();
            return v;
        }
        case attr_kind::boolean:
            if (text == "true" || text == "1") return true;
            if (text == "false" || text == "0") return false;
            throw bad();
        case attr_kind::dtype:
            for (dtype d : {dtype::boolean, dtype::int32, dtype::int64, dtype::float32, dtype::float64})
                if (text == name(d)) return d;
            throw bad();
        case attr_kind::text: return std::string(text);
    }
    throw bad();
}

}  // namespace kiln
