#pragma once
// The run-time op registry: every op of the vocabulary found by its stable name, with its arity, its attribute
// schema, its shape and dtype rule, its eager kernel and its gradient.
//
//   const kiln::op_schema& add = kiln::find_op("add");
//   kiln::tensor y = kiln::apply("sum", {x}, {{"axes", {0}}, {"keepdims", true}});
//   kiln::tensor_spec s = kiln::infer("matmul", {{kiln::float32, {2, 3}}, {kiln::float32, {3, 4}}});  // (2, 4)
//
// Elementwise entries are built from the op structs of ops/ (name, arity, kernel, gradient rule); structural
// entries (reductions, matmul, views, joins, indexing) from eager mode's functions. `apply` records on gradient
// tapes like the ops it names, so `op_gradient` is each op's own rule. What reads ops from text (the NumPy
// differential runner, files later) parses attributes with `parse_attribute`.
//
// Every function here is a template with a defaulted parameter: a translation unit that includes kiln and never
// calls the registry compiles none of its kernels.
#include <charconv>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/names.hpp"
#include "eager/eager.hpp"
#include "nn/layers.hpp"

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

namespace detail {

// ---- elementwise entries, from the op structs -------------------------------------------------------------

template <class Op>
constexpr op_family family_of() {
    if constexpr (std::is_same_v<Op, ops::relu> || std::is_same_v<Op, ops::sigmoid> || std::is_same_v<Op, ops::softplus> ||
                  std::is_same_v<Op, ops::silu> || std::is_same_v<Op, ops::gelu> || std::is_same_v<Op, ops::elu> ||
                  std::is_same_v<Op, ops::leaky_relu>)
        return op_family::activation;
    else return op_family::elementwise;
}

template <class Op, int N>
tensor elementwise_kernel(std::span<const tensor> in, const attributes&) {
    using B = op_builder<operand_mode::eager>;
    if constexpr (Op::arity == 1) return B::template build_operands<Op>(in[0]);
    else if constexpr (Op::arity == 2) return B::template build_operands<Op>(in[0], in[1]);
    else return B::template build_operands<Op>(in[0], in[1], in[2]);
}

template <class Op, int N>
tensor_spec elementwise_shape(std::span<const tensor_spec> in, const attributes&) {
    dims shape = in[0].shape;
    for (const tensor_spec& s : in)
        if (!broadcast_into(shape, s.shape, shape)) {
            std::string text;
            for (const tensor_spec& t : in) text += (text.empty() ? "" : " and ") + to_string(t);
            throw shape_error("kiln: shape_error in '" + std::string(Op::name) + "': cannot broadcast " + text);
        }
    dtype d;
    if constexpr (std::is_same_v<Op, ops::where>) {
        d = promote(in[1].dtype, in[2].dtype);
    } else {
        d = in[0].dtype;
        for (const tensor_spec& s : in) d = promote(d, s.dtype);
        d = compute_dtype<Op>(d);
    }
    const dtype r = dispatch(d, [&]<class T>() {
        if constexpr (!runs_on_v<Op, T>) {
            return d;
        } else {
            using C = std::conditional_t<std::is_same_v<Op, ops::where>, bool, T>;
            if constexpr (Op::arity == 1)
                return dtype_of<root_type_t<decltype(make_node<Op>(indexed_leaf<0, T>{}))>>();
            else if constexpr (Op::arity == 2)
                return dtype_of<root_type_t<decltype(make_node<Op>(indexed_leaf<0, T>{}, indexed_leaf<1, T>{}))>>();
            else
                return dtype_of<root_type_t<decltype(make_node<Op>(indexed_leaf<0, C>{}, indexed_leaf<1, T>{},
                                                                   indexed_leaf<2, T>{}))>>();
        }
    });
    return {r, shape};
}

template <class Op, int N>
op_schema elementwise_entry(std::string summary) {
    op_schema s;
    s.name = std::string(Op::name);
    s.family = family_of<Op>();
    s.min_inputs = s.max_inputs = Op::arity;
    s.summary = std::move(summary);
    s.kernel = &elementwise_kernel<Op, N>;
    s.shape = &elementwise_shape<Op, N>;
    // Differentiable when a floating input gives a floating result (comparisons, predicates and the integer-only
    // ops give bools or refuse floats).
    std::vector<tensor_spec> probe(static_cast<std::size_t>(Op::arity), tensor_spec{dtype::float64, dims{}});
    if constexpr (std::is_same_v<Op, ops::where>) probe[0].dtype = dtype::boolean;
    try {
        s.differentiable = is_floating(elementwise_shape<Op, N>(probe, {}).dtype) && !logical_op<Op>();
    } catch (const error&) {
        s.differentiable = false;
    }
    return s;
}

// ---- structural entries, from eager mode's functions --------------------------------------------------------

inline std::vector<int> int_list(const attributes& a, std::string_view n) {
    std::vector<int> out;
    if (const attr_value* v = a.find(n))
        for (std::int64_t i : v->integers()) {
            if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
                throw value_error("kiln: value_error: attribute '" + std::string(n) + "' holds " + std::to_string(i) +
                                  ", out of range for an axis");
            out.push_back(static_cast<int>(i));
        }
    return out;
}

inline int int_attr(const attributes& a, std::string_view n) {
    const std::int64_t i = a.integer(n);
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
        throw value_error("kiln: value_error: attribute '" + std::string(n) + "' holds " + std::to_string(i) +
                          ", out of range for an axis");
    return static_cast<int>(i);
}

inline dims dims_attr(const attributes& a, std::string_view n) {
    const std::vector<std::int64_t> v = a.integers(n);
    dims d;
    d.assign(v.begin(), v.size());
    return d;
}

inline dtype sum_dtype(dtype d) { return is_floating(d) ? d : dtype::int64; }
inline dtype mean_dtype(dtype d) { return is_floating(d) ? d : dtype::float32; }

inline op_schema structural(std::string name, op_family f, int lo, int hi, std::vector<attr_spec> attrs,
                            bool differentiable, shape_rule rule, op_kernel k, op_shape_rule s, std::string summary) {
    op_schema o;
    o.name = std::move(name);
    o.family = f;
    o.min_inputs = lo;
    o.max_inputs = hi;
    o.attrs = std::move(attrs);
    o.differentiable = differentiable;
    o.rule = rule;
    o.kernel = k;
    o.shape = s;
    o.summary = std::move(summary);
    return o;
}

inline attr_spec axes_attr() { return {"axes", attr_kind::integers, false, std::nullopt, "the axes to reduce; every axis when absent"}; }
inline attr_spec keepdims_attr() { return {"keepdims", attr_kind::boolean, false, attr_value(false), "keep reduced axes as size 1"}; }
inline attr_spec axis_attr(std::optional<attr_value> fallback, std::string meaning) {
    return {"axis", attr_kind::integer, !fallback, std::move(fallback), std::move(meaning)};
}
inline attr_spec optional_axis_attr(std::string meaning) {
    return {"axis", attr_kind::integer, false, std::nullopt, std::move(meaning)};
}

// The reductions' shape rule: fold (sum, prod, max, min), mean-like, or boolean (any, all).
enum class reduce_out { sum, same, mean, boolean };
template <fixed_string Name, reduce_out R, bool NonEmpty>
tensor_spec reduction_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    const reduction_shape r =
        reduced_shape(in[0].shape, in[0].dtype, int_list(a, "axes"), a.boolean("keepdims"), Name.chars);
    if (NonEmpty && r.count == 0)
        throw value_error("kiln: value_error in '" + std::string(Name.view()) + "': cannot reduce over an empty dimension (shape " +
                          to_string(in[0]) + ")");
    const dtype d = R == reduce_out::sum ? sum_dtype(in[0].dtype)
                    : R == reduce_out::same ? in[0].dtype
                    : R == reduce_out::mean ? mean_dtype(in[0].dtype)
                                            : dtype::boolean;
    return {d, r.result};
}

template <fixed_string Name>
tensor_spec arg_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    const bool keep = a.boolean("keepdims");
    auto empty = [&] {
        return value_error("kiln: value_error in '" + std::string(Name.view()) + "': cannot reduce over an empty dimension (shape " +
                           to_string(in[0].shape.rank == 0 || a.has("axis") ? in[0].shape : dims{in[0].shape.size()}) +
                           ", " + std::string(name(in[0].dtype)) + ")");
    };
    if (!a.has("axis")) {
        if (in[0].shape.size() == 0) throw empty();
        dims out;
        if (keep) {
            out.rank = in[0].shape.rank;
            for (int i = 0; i < out.rank; ++i) out[i] = 1;
        }
        return {dtype::int64, out};
    }
    const reduction_shape r = reduced_shape(in[0].shape, in[0].dtype, {int_attr(a, "axis")}, keep, Name.chars);
    if (r.count == 0) throw empty();
    return {dtype::int64, r.result};
}

template <bool Max>
tensor arg_kernel(std::span<const tensor> in, const attributes& a) {
    const bool keep = a.boolean("keepdims");
    if (a.has("axis")) return Max ? kiln::argmax(in[0], int_attr(a, "axis"), keep) : kiln::argmin(in[0], int_attr(a, "axis"), keep);
    tensor y = Max ? kiln::argmax(in[0]) : kiln::argmin(in[0]);
    if (!keep) return y;
    dims ones;
    ones.rank = in[0].dim();
    for (int i = 0; i < ones.rank; ++i) ones[i] = 1;
    return y.reshape(ones);
}

inline tensor_spec matmul_shape_rule(std::span<const tensor_spec> in, const attributes&) {
    const dims& a = in[0].shape;
    const dims& b = in[1].shape;
    auto text = [&] { return to_string(in[0]) + " and " + to_string(in[1]); };
    if (a.rank == 0 || b.rank == 0)
        throw shape_error("kiln: shape_error in 'matmul': operands must have at least one dimension, got " + text());
    const std::ptrdiff_t k_a = a[a.rank - 1], k_b = b.rank == 1 ? b[0] : b[b.rank - 2];
    if (k_a != k_b)
        throw shape_error("kiln: shape_error in 'matmul': cannot multiply " + to_string(a) + " by " + to_string(b) +
                          ": the inner dimensions " + std::to_string(k_a) + " and " + std::to_string(k_b) + " differ");
    dims ba, bb, batch;
    ba.rank = a.rank > 2 ? a.rank - 2 : 0;
    bb.rank = b.rank > 2 ? b.rank - 2 : 0;
    for (int i = 0; i < ba.rank; ++i) ba[i] = a[i];
    for (int i = 0; i < bb.rank; ++i) bb[i] = b[i];
    if (!broadcast_into(ba, bb, batch))
        throw shape_error("kiln: shape_error in 'matmul': batch dimensions do not broadcast: " + text());
    dims out = batch;
    if (a.rank > 1) out[out.rank++] = a[a.rank - 2];
    if (b.rank > 1) out[out.rank++] = b[b.rank - 1];
    return {promote(in[0].dtype, in[1].dtype), out};
}

inline tensor_spec reshape_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {in[0].dtype, reshaped(in[0].shape, dims_attr(a, "shape"))};
}

inline tensor_spec concat_shape_rule(std::span<const tensor_spec> in, const attributes& a, bool stack) {
    const int r = in[0].shape.rank + (stack ? 1 : 0);
    const int axis = int_attr(a, "axis");
    const int ax = axis < 0 ? axis + r : axis;
    const char* op = stack ? "stack" : "concat";
    if (ax < 0 || ax >= r)
        throw value_error("kiln: value_error in '" + std::string(op) + "': axis " + std::to_string(axis) +
                          " is out of range for shape " + to_string(in[0].shape));
    dtype d = in[0].dtype;
    dims out;
    out.rank = r;
    for (int i = 0, j = 0; i < r; ++i) out[i] = stack && i == ax ? 0 : in[0].shape[j++];
    out[ax] = 0;
    for (const tensor_spec& s : in) {
        bool same = s.shape.rank == in[0].shape.rank;
        for (int i = 0; same && i < s.shape.rank; ++i) same = (!stack && i == ax) || s.shape[i] == in[0].shape[i];
        if (!same)
            throw shape_error("kiln: shape_error in '" + std::string(op) + "': shapes " + to_string(in[0].shape) +
                              " and " + to_string(s.shape) + " differ" +
                              (stack ? std::string() : " outside axis " + std::to_string(ax)));
        out[ax] += stack ? 1 : s.shape[ax];
        d = promote(d, s.dtype);
    }
    return {d, out};
}

inline tensor_spec softmax_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    reduced_shape(in[0].shape, in[0].dtype, {int_attr(a, "axis")}, true, "softmax");  // checks the axis
    return {mean_dtype(in[0].dtype), in[0].shape};
}

inline std::vector<tensor> tensor_vector(std::span<const tensor> in) { return {in.begin(), in.end()}; }

template <int N>
std::vector<op_schema> build_registry() {
    using ar = attr_kind;
    std::vector<op_schema> r;
    auto ew = [&]<class Op>(std::string summary) { r.push_back(elementwise_entry<Op, N>(std::move(summary))); };

    // Elementwise, from ops/ (broadcasting, PyTorch's type promotion).
    ew.template operator()<ops::neg>("-x");
    ew.template operator()<ops::add>("x + y (logical or on bools)");
    ew.template operator()<ops::sub>("x - y");
    ew.template operator()<ops::mul>("x * y");
    ew.template operator()<ops::div>("x / y, true division (integers give float32)");
    ew.template operator()<ops::pow>("x ** y");
    ew.template operator()<ops::maximum>("the larger of x and y (NaN propagates)");
    ew.template operator()<ops::minimum>("the smaller of x and y (NaN propagates)");
    ew.template operator()<ops::floor_divide>("floor(x / y) (Python's //)");
    ew.template operator()<ops::remainder>("x - floor(x / y) * y (Python's %: the divisor's sign)");
    ew.template operator()<ops::atan2>("the angle of (y = x0, x = x1)");
    ew.template operator()<ops::abs>("|x|");
    ew.template operator()<ops::exp>("e^x");
    ew.template operator()<ops::log>("natural logarithm");
    ew.template operator()<ops::sqrt>("square root");
    ew.template operator()<ops::rsqrt>("1 / sqrt(x)");
    ew.template operator()<ops::square>("x * x");
    ew.template operator()<ops::sin>("sine");
    ew.template operator()<ops::cos>("cosine");
    ew.template operator()<ops::tan>("tangent");
    ew.template operator()<ops::asin>("arcsine");
    ew.template operator()<ops::acos>("arccosine");
    ew.template operator()<ops::atan>("arctangent");
    ew.template operator()<ops::tanh>("hyperbolic tangent");
    ew.template operator()<ops::log1p>("log(1 + x), exact near 0");
    ew.template operator()<ops::expm1>("e^x - 1, exact near 0");
    ew.template operator()<ops::erf>("the error function");
    ew.template operator()<ops::floor>("round down");
    ew.template operator()<ops::ceil>("round up");
    ew.template operator()<ops::trunc>("round toward zero");
    ew.template operator()<ops::round>("round half to even");
    ew.template operator()<ops::sign>("-1, 0 or 1 (NaN stays NaN)");
    ew.template operator()<ops::isnan>("x is NaN");
    ew.template operator()<ops::isinf>("x is infinite");
    ew.template operator()<ops::isfinite>("x is neither infinite nor NaN");
    ew.template operator()<ops::sigmoid>("1 / (1 + e^-x)");
    ew.template operator()<ops::relu>("max(x, 0) (NaN propagates)");
    ew.template operator()<ops::softplus>("log(1 + e^x)");
    ew.template operator()<ops::silu>("x * sigmoid(x)");
    ew.template operator()<ops::gelu>("x * Phi(x), the exact form");
    ew.template operator()<ops::elu>("x for x > 0, e^x - 1 otherwise");
    ew.template operator()<ops::leaky_relu>("x for x >= 0, slope * x otherwise (inputs x, slope)");
    ew.template operator()<ops::clamp>("x limited to [lo, hi] (inputs x, lo, hi)");
    ew.template operator()<ops::less>("x < y");
    ew.template operator()<ops::less_equal>("x <= y");
    ew.template operator()<ops::greater>("x > y");
    ew.template operator()<ops::greater_equal>("x >= y");
    ew.template operator()<ops::equal>("x == y");
    ew.template operator()<ops::not_equal>("x != y");
    ew.template operator()<ops::logical_and>("x and y, as bools");
    ew.template operator()<ops::logical_or>("x or y, as bools");
    ew.template operator()<ops::logical_xor>("x xor y, as bools");
    ew.template operator()<ops::logical_not>("not x, as a bool");
    ew.template operator()<ops::bitwise_and>("x & y (integers and bools)");
    ew.template operator()<ops::bitwise_or>("x | y (integers and bools)");
    ew.template operator()<ops::bitwise_xor>("x ^ y (integers and bools)");
    ew.template operator()<ops::bitwise_not>("~x (integers and bools)");
    ew.template operator()<ops::where>("x1 where the condition x0 holds, x2 elsewhere");

    // Reductions.
    const std::vector<attr_spec> fold_attrs{axes_attr(), keepdims_attr()};
    auto fold = [&](std::string n, op_kernel k, op_shape_rule s, bool diff, std::string summary) {
        r.push_back(structural(std::move(n), op_family::reduction, 1, 1, fold_attrs, diff, shape_rule::closed, k, s,
                               std::move(summary)));
    };
    fold("sum", [](std::span<const tensor> in, const attributes& a) { return kiln::sum(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"sum", reduce_out::sum, false>, true, "sum over axes (integers and bools give int64)");
    fold("prod", [](std::span<const tensor> in, const attributes& a) { return kiln::prod(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"prod", reduce_out::sum, false>, true, "product over axes (integers and bools give int64)");
    fold("max", [](std::span<const tensor> in, const attributes& a) { return kiln::max(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"max", reduce_out::same, true>, true, "maximum over axes (NaN propagates; ties share the gradient)");
    fold("min", [](std::span<const tensor> in, const attributes& a) { return kiln::min(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"min", reduce_out::same, true>, true, "minimum over axes (NaN propagates; ties share the gradient)");
    fold("mean", [](std::span<const tensor> in, const attributes& a) { return kiln::mean(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"mean", reduce_out::mean, false>, true, "mean over axes (integers give float32)");
    fold("any", [](std::span<const tensor> in, const attributes& a) { return kiln::any(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"any", reduce_out::boolean, false>, false, "whether any element is nonzero");
    fold("all", [](std::span<const tensor> in, const attributes& a) { return kiln::all(in[0], int_list(a, "axes"), a.boolean("keepdims")); },
         &reduction_shape_rule<"all", reduce_out::boolean, false>, false, "whether every element is nonzero");
    const std::vector<attr_spec> var_attrs{axes_attr(),
                                           {"correction", ar::number, false, attr_value(1.0), "subtracted from the count (1: the sample variance)"},
                                           keepdims_attr()};
    r.push_back(structural("var", op_family::reduction, 1, 1, var_attrs, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               return kiln::var(in[0], int_list(a, "axes"), a.number("correction"), a.boolean("keepdims"));
                           },
                           &reduction_shape_rule<"var", reduce_out::mean, false>, "variance over axes"));
    r.push_back(structural("std", op_family::reduction, 1, 1, var_attrs, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               return kiln::std(in[0], int_list(a, "axes"), a.number("correction"), a.boolean("keepdims"));
                           },
                           &reduction_shape_rule<"std", reduce_out::mean, false>, "standard deviation over axes"));
    const std::vector<attr_spec> arg_attrs{optional_axis_attr("the axis to search; the flattened tensor when absent"),
                                           keepdims_attr()};
    r.push_back(structural("argmax", op_family::reduction, 1, 1, arg_attrs, false, shape_rule::closed, &arg_kernel<true>,
                           &arg_shape_rule<"argmax">, "the index of the first maximum (int64)"));
    r.push_back(structural("argmin", op_family::reduction, 1, 1, arg_attrs, false, shape_rule::closed, &arg_kernel<false>,
                           &arg_shape_rule<"argmin">, "the index of the first minimum (int64)"));

    // Products.
    r.push_back(structural("matmul", op_family::linalg, 2, 2, {}, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes&) { return kiln::matmul(in[0], in[1]); },
                           &matmul_shape_rule, "the matrix product with NumPy's rules (vectors, broadcast batches)"));
    // Views (no copies): their shape rules are the views themselves, run on placeholders (which allocates nothing).
    auto view = [&](op_kernel k, std::string n, std::vector<attr_spec> attrs, std::string summary) {
        r.push_back(structural(std::move(n), op_family::view, 1, 1, std::move(attrs), true, shape_rule::closed, k,
                               nullptr, std::move(summary)));
    };
    view([](std::span<const tensor> in, const attributes& a) {
        return in[0].transpose(int_attr(a, "dim0"), int_attr(a, "dim1"));
    }, "transpose", {{"dim0", ar::integer, false, attr_value(-2), "the first axis"},
                     {"dim1", ar::integer, false, attr_value(-1), "the second axis"}},
       "swaps two axes");
    view([](std::span<const tensor> in, const attributes& a) {
        const std::vector<int> order = int_list(a, "dims");
        if (static_cast<int>(order.size()) != in[0].dim())
            throw value_error("kiln: value_error in 'permute': " + std::to_string(order.size()) + " axes for shape " +
                              to_string(in[0].shape()));
        std::array<int, max_rank> o{};
        std::copy(order.begin(), order.end(), o.begin());
        return in[0].permute_array(o, in[0].dim());
    }, "permute", {{"dims", ar::integers, true, std::nullopt, "the new order of the axes"}}, "reorders the axes");
    view([](std::span<const tensor> in, const attributes& a) {
        return in[0].slice(int_attr(a, "axis"), a.integer("start"), a.integer("stop"), a.integer("step"));
    }, "slice", {axis_attr(std::nullopt, "the axis to slice"),
                 {"start", ar::integer, false, attr_value(0), "the first index (negative counts from the end)"},
                 {"stop", ar::integer, false, attr_value(static_cast<long long>(slice_end)), "one past the last index"},
                 {"step", ar::integer, false, attr_value(1), "the step (negative walks backwards)"}},
       "elements [start, stop) by step along an axis, with NumPy's rules");
    view([](std::span<const tensor> in, const attributes& a) {
        return in[0].select(int_attr(a, "axis"), a.integer("index"));
    }, "select", {axis_attr(std::nullopt, "the axis to index"), {"index", ar::integer, true, std::nullopt, "the index"}},
       "the sub-tensor at one index (the axis is removed)");
    view([](std::span<const tensor> in, const attributes& a) {
        return a.has("axis") ? in[0].squeeze(int_attr(a, "axis")) : in[0].squeeze();
    }, "squeeze", {optional_axis_attr("the size-1 axis to remove; every one when absent")},
       "removes size-1 axes");
    view([](std::span<const tensor> in, const attributes& a) {
        return in[0].unsqueeze(int_attr(a, "axis"));
    }, "unsqueeze", {axis_attr(std::nullopt, "where the new axis goes")}, "inserts a size-1 axis");
    view([](std::span<const tensor> in, const attributes& a) {
        return in[0].broadcast_to(dims_attr(a, "shape"));
    }, "broadcast_to", {{"shape", ar::integers, true, std::nullopt, "the target shape"}},
       "repeats size-1 and missing leading axes (stride 0)");
    view([](std::span<const tensor> in, const attributes& a) { return kiln::flip(in[0], int_list(a, "axes")); }, 
        "flip", {{"axes", ar::integers, false, std::nullopt, "the axes to reverse; every axis when absent"}},
        "reverses the order along axes");
    r.push_back(structural("reshape", op_family::view, 1, 1,
                           {{"shape", ar::integers, true, std::nullopt, "the new shape; one extent may be -1"}}, true,
                           shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) { return in[0].reshape(dims_attr(a, "shape")); },
                           &reshape_shape_rule, "the same elements in a new shape (a view when the layout allows)"));

    // Conversion and joins.
    r.push_back(structural("cast", op_family::conversion, 1, 1,
                           {{"dtype", ar::dtype, true, std::nullopt, "the target dtype"}}, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) { return in[0].to(a.dtype("dtype")); },
                           [](std::span<const tensor_spec> in, const attributes& a) {
                               return tensor_spec{a.dtype("dtype"), in[0].shape};
                           },
                           "converts elements (floating to integer saturates, NaN gives 0)"));
    r.push_back(structural("concat", op_family::join, 1, -1, {axis_attr(attr_value(0), "the axis to join along")}, true,
                           shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) { return kiln::concat(tensor_vector(in), int_attr(a, "axis")); },
                           [](std::span<const tensor_spec> in, const attributes& a) { return concat_shape_rule(in, a, false); },
                           "joins tensors along an existing axis (dtypes promote)"));
    r.push_back(structural("stack", op_family::join, 1, -1, {axis_attr(attr_value(0), "where the new axis goes")}, true,
                           shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) { return kiln::stack(tensor_vector(in), int_attr(a, "axis")); },
                           [](std::span<const tensor_spec> in, const attributes& a) { return concat_shape_rule(in, a, true); },
                           "joins tensors of one shape along a new axis"));

    // Outer products, scans, sorting, repetition and indexing: evaluated shape rules.
    auto evaluated = [&](op_kernel k, std::string n, op_family f, int arity, std::vector<attr_spec> attrs, bool diff,
                         std::string summary) {
        r.push_back(structural(std::move(n), f, arity, arity, std::move(attrs), diff, shape_rule::evaluated, k,
                               nullptr, std::move(summary)));
    };
    evaluated([](std::span<const tensor> in, const attributes&) { return kiln::outer(in[0], in[1]); }, 
        "outer", op_family::linalg, 2, {}, true, "the outer product of two vectors");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::einsum(a.text("equation"), in[0], in[1]);
    }, "einsum", op_family::linalg, 2, {{"equation", ar::text, true, std::nullopt, "the subscripts, as 'ij,jk->ik'"}},
       true, "Einstein summation over two operands");
    evaluated([](std::span<const tensor> in, const attributes& a) { return kiln::cumsum(in[0], int_attr(a, "axis")); }, 
        "cumsum", op_family::reduction, 1, {axis_attr(std::nullopt, "the axis to scan")}, true, "running sums along an axis");
    evaluated([](std::span<const tensor> in, const attributes& a) { return kiln::cumprod(in[0], int_attr(a, "axis")); }, 
        "cumprod", op_family::reduction, 1, {axis_attr(std::nullopt, "the axis to scan")}, true,
        "running products along an axis");
    const std::vector<attr_spec> sort_attrs{axis_attr(attr_value(-1), "the axis to sort along"),
                                            {"descending", ar::boolean, false, attr_value(false), "largest first"}};
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::sort(in[0], int_attr(a, "axis"), a.boolean("descending"));
    }, "sort", op_family::indexing, 1, sort_attrs, true, "sorted along an axis (stable; NaN last)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::argsort(in[0], int_attr(a, "axis"), a.boolean("descending"));
    }, "argsort", op_family::indexing, 1, sort_attrs, false, "the indices that sort along an axis (int64)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        const std::vector<std::int64_t> v = a.integers("reps");
        return kiln::tile(in[0], std::vector<std::ptrdiff_t>(v.begin(), v.end()));
    }, "tile", op_family::join, 1, {{"reps", ar::integers, true, std::nullopt, "repetitions per axis"}}, true,
       "the tensor repeated as whole blocks (numpy.tile)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return a.has("axis") ? kiln::repeat(in[0], a.integer("repeats"), int_attr(a, "axis")) : kiln::repeat(in[0], a.integer("repeats"));
    }, "repeat", op_family::join, 1,
       {{"repeats", ar::integer, true, std::nullopt, "copies of each element"},
        {"axis", ar::integer, false, std::nullopt, "the axis; the flattened tensor when absent"}},
       true, "each element repeated (numpy.repeat)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        const std::vector<std::int64_t> w = a.integers("widths");
        if (w.size() % 2 != 0)
            throw value_error("kiln: value_error in 'pad': 'widths' holds (before, after) pairs, got " +
                              std::to_string(w.size()) + " numbers");
        std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> p;
        for (std::size_t i = 0; i < w.size(); i += 2) p.emplace_back(w[i], w[i + 1]);
        return kiln::pad(in[0], p, a.number("value"));
    }, "pad", op_family::join, 1,
       {{"widths", ar::integers, true, std::nullopt, "before, after pairs for the leading axes"},
        {"value", ar::number, false, attr_value(0.0), "the fill value"}},
       true, "constant padding (numpy.pad)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::index_select(in[0], int_attr(a, "axis"), in[1]);
    }, "index_select", op_family::indexing, 2, {axis_attr(std::nullopt, "the axis to gather along")}, true,
       "the entries at an integer index tensor along an axis (inputs x, index)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::take_along_axis(in[0], in[1], int_attr(a, "axis"));
    }, "take_along_axis", op_family::indexing, 2, {axis_attr(std::nullopt, "the axis to gather along")}, true,
       "gathers with an index of the input's rank (inputs x, index)");
    evaluated([](std::span<const tensor> in, const attributes& a) {
        return kiln::scatter_add(in[0], int_attr(a, "axis"), in[1], in[2]);
    }, "scatter_add", op_family::indexing, 3, {axis_attr(std::nullopt, "the axis to scatter along")}, true,
       "x with src added at index along an axis (inputs x, index, src)");
    r.push_back(structural("masked_select", op_family::indexing, 2, 2, {}, true, shape_rule::data_dependent,
                           [](std::span<const tensor> in, const attributes&) { return kiln::masked_select(in[0], in[1]); },
                           nullptr, "the elements where a bool mask holds, as a vector (inputs x, mask)"));

    // Normalizations.
    r.push_back(structural("softmax", op_family::activation, 1, 1, {axis_attr(attr_value(-1), "the axis to normalize")},
                           true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) { return nn::softmax(in[0], int_attr(a, "axis")); },
                           &softmax_shape_rule, "exp(x) / sum(exp(x)) along an axis"));
    r.push_back(structural("log_softmax", op_family::activation, 1, 1,
                           {axis_attr(attr_value(-1), "the axis to normalize")}, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               return nn::log_softmax(in[0], int_attr(a, "axis"));
                           },
                           &softmax_shape_rule, "log(softmax(x)) along an axis, computed stably"));
    return r;
}

}  // namespace detail

// Every registered op, in a fixed order.
template <int N = 0>
const std::vector<op_schema>& registered_ops() {
    static const std::vector<op_schema> table = detail::build_registry<N>();
    return table;
}

// The op named `name`, or nullptr.
template <int N = 0>
const op_schema* find_op_or_null(std::string_view name) noexcept {
    for (const op_schema& o : registered_ops<N>())
        if (o.name == name) return &o;
    return nullptr;
}

// The op named `name`; a kiln::value_error naming the closest names when there is none.
template <int N = 0>
const op_schema& find_op(std::string_view name) {
    if (const op_schema* o = find_op_or_null<N>(name)) return *o;
    std::vector<std::string> known;
    for (const op_schema& o : registered_ops<N>()) known.push_back(o.name);
    throw value_error("kiln: value_error in 'find_op': no op named '" + std::string(name) +
                      "'; closest: " + detail::closest_text(name, std::move(known)));
}

// Runs the op named `op` on `inputs` eagerly (recorded on the active gradient tapes), after checking the arity
// and the attributes against its schema.
template <int N = 0>
tensor apply(std::string_view op, std::span<const tensor> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).apply(inputs, attrs);
}
template <int N = 0>
tensor apply(std::string_view op, std::initializer_list<tensor> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).apply(std::span<const tensor>(inputs.begin(), inputs.size()), attrs);
}

// The dtype and shape that `apply` would give, without running the op (for closed rules) and with its errors.
template <int N = 0>
tensor_spec infer(std::string_view op, std::span<const tensor_spec> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).infer(inputs, attrs);
}
template <int N = 0>
tensor_spec infer(std::string_view op, std::initializer_list<tensor_spec> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).infer(std::span<const tensor_spec>(inputs.begin(), inputs.size()), attrs);
}

// The vector-Jacobian product of the op at `inputs`: for each input, the sum over the output of
// output_gradient * d output / d input, by the op's own gradient rule (the one the tape uses). Inputs that are
// not floating (indices, conditions, masks) get no gradient (nullopt).
template <int N = 0>
std::vector<std::optional<tensor>> op_gradient(std::string_view op, std::span<const tensor> inputs,
                                               const tensor& output_gradient, const attributes& attrs = {}) {
    const op_schema& o = find_op<N>(op);
    // Fresh handles on the same storage: an input passed twice (x * x) gets one gradient per position.
    std::vector<tensor> in;
    for (const tensor& t : inputs) in.push_back(stop_gradient(t));
    gradient_tape tape;
    for (const tensor& t : in)
        if (detail::is_floating(t.dtype())) tape.watch(t);
    const tensor y = o.apply(in, attrs);
    std::vector<std::optional<tensor>> out(in.size());
    if (!o.differentiable || !detail::is_floating(y.dtype())) return out;
    const std::vector<tensor> g = tape.gradient(y, in, output_gradient);
    for (std::size_t i = 0; i < in.size(); ++i)
        if (detail::is_floating(in[i].dtype())) out[i] = g[i];
    return out;
}
template <int N = 0>
std::vector<std::optional<tensor>> op_gradient(std::string_view op, std::initializer_list<tensor> inputs,
                                               const tensor& output_gradient, const attributes& attrs = {}) {
    return op_gradient<N>(op, std::span<const tensor>(inputs.begin(), inputs.size()), output_gradient, attrs);
}

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
