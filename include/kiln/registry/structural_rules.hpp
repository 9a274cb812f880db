#pragma once
// The structural entries' parts (registry/builtin.hpp's table uses them): readers of attributes by name, the
// attribute specs that several entries share, and the shape rules and kernels of reductions, scans, layout and
// indexing ops, windows, matmul, reshape, joins, softmax, layer_norm and dropout, each the op's own rule
// (ops/) read through `attributes` and `tensor_spec`.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../nn/layers.hpp"
#include "schema.hpp"

namespace kiln {

namespace detail {

inline std::vector<int> int_list(const attributes& a, std::string_view n) {
    std::vector<int> out;
    if (const attr_value* v = a.find(n))
        for (std::int64_t i : v->integers()) {
            if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
                throw value_error("kiln: value_error in 'attributes': attribute '" + std::string(n) + "' holds " + std::to_string(i) +
                                  ", out of range for an axis");
            out.push_back(static_cast<int>(i));
        }
    return out;
}

inline int int_attr(const attributes& a, std::string_view n) {
    const std::int64_t i = a.integer(n);
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
        throw value_error("kiln: value_error in 'attributes': attribute '" + std::string(n) + "' holds " + std::to_string(i) +
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

template <ops::scan_kind K>
tensor_spec scan_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    using op = ops::scan<K>;
    const ops::scan_attrs at{int_attr(a, "axis"), a.boolean("reverse")};
    return {op::result_dtype(at, in[0].dtype), op::result_shape(at, in[0].shape)};
}

// The layout and indexing ops' closed rules: the ops' own shape rules (ops/layout.hpp, ops/gather.hpp).
inline ops::sort_attrs sort_attrs_of(const attributes& a) { return {int_attr(a, "axis"), a.boolean("descending")}; }
inline tensor_spec sort_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {in[0].dtype, ops::argsort::result_shape(sort_attrs_of(a), in[0].shape)};
}
inline tensor_spec argsort_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {dtype::int64, ops::argsort::result_shape(sort_attrs_of(a), in[0].shape)};
}
inline tensor_spec tile_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    const std::vector<std::int64_t> v = a.integers("reps");
    return {in[0].dtype, ops::tile::result_shape(ops::make_tile_attrs(std::vector<std::ptrdiff_t>(v.begin(), v.end())), in[0].shape)};
}
inline tensor_spec repeat_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    if (a.has("axis")) return {in[0].dtype, ops::repeat::result_shape({a.integer("repeats"), int_attr(a, "axis")}, in[0].shape)};
    return {in[0].dtype, ops::repeat::result_shape({a.integer("repeats"), 0}, dims{in[0].shape.numel()})};
}
inline std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> pad_widths_of(const attributes& a) {
    const std::vector<std::int64_t> w = a.integers("widths");
    if (w.size() % 2 != 0)
        throw value_error("kiln: value_error in 'pad': 'widths' holds (before, after) pairs, got " + std::to_string(w.size()) +
                          " numbers");
    std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> p;
    for (std::size_t i = 0; i < w.size(); i += 2) p.emplace_back(w[i], w[i + 1]);
    return p;
}
inline tensor_spec pad_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {in[0].dtype, ops::pad::result_shape(ops::make_pad_attrs(pad_widths_of(a), a.number("value")), in[0].shape)};
}
// im2col's window from its attributes: kernel (2 numbers), stride and dilation (2 each), pads (4: top, bottom,
// left, right), value.
inline ops::window_attrs window_attrs_of(const attributes& a) {
    return ops::make_window_attrs("im2col", a.integers("kernel"), a.integers("stride"), a.integers("pads"), a.integers("dilation"),
                                  a.number("value"));
}
inline tensor_spec im2col_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {in[0].dtype, ops::im2col::result_shape(window_attrs_of(a), in[0].shape)};
}
inline tensor_spec einsum_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    return {promote(in[0].dtype, in[1].dtype),
            ops::einsum::result_shape(ops::make_einsum_attrs(a.text("equation")), in[0].shape, in[1].shape)};
}
inline void check_index_spec(const tensor_spec& index, const char* op) {
    if (index.dtype != dtype::int32 && index.dtype != dtype::int64)
        throw dtype_error("kiln: dtype_error in '" + std::string(op) + "': indices must be int32 or int64, not " +
                          std::string(name(index.dtype)));
}
inline tensor_spec index_select_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    if (in[1].shape.rank != 1)
        throw shape_error("kiln: shape_error in 'index_select': the index must be 1-D, got shape " + to_string(in[1].shape));
    check_index_spec(in[1], "index_select");
    return {in[0].dtype, ops::take::result_shape({int_attr(a, "axis")}, in[0].shape, in[1].shape)};
}
inline tensor_spec take_along_axis_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    check_index_spec(in[1], "take_along_axis");
    return {in[0].dtype, ops::take_along_axis::result_shape({int_attr(a, "axis")}, in[0].shape, in[1].shape)};
}

template <fixed_string Name>
tensor_spec arg_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    const bool keep = a.boolean("keepdims");
    auto empty = [&] {
        return value_error("kiln: value_error in '" + std::string(Name.view()) + "': cannot reduce over an empty dimension (shape " +
                           to_string(in[0].shape.rank == 0 || a.has("axis") ? in[0].shape : dims{in[0].shape.numel()}) +
                           ", " + std::string(name(in[0].dtype)) + ")");
    };
    if (!a.has("axis")) {
        if (in[0].shape.numel() == 0) throw empty();
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

// layer_norm by name: the axes from `axis` on are normalized; the weight and bias, where given, have their shape.
inline tensor_spec layer_norm_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    reduced_shape(in[0].shape, in[0].dtype, {int_attr(a, "axis")}, true, "layer_norm");  // checks the axis
    if (!is_floating(in[0].dtype))
        throw dtype_error("kiln: dtype_error in 'nn::layer_norm': the input must be floating, got " + std::string(name(in[0].dtype)));
    return {in[0].dtype, in[0].shape};
}
inline dims layer_norm_normalized(const dims& x, int axis) {
    if (axis < 0) axis += x.rank;
    dims d;
    d.rank = x.rank - axis;
    for (int i = axis; i < x.rank; ++i) d[i - axis] = x[i];
    return d;
}

// dropout by name: the pure op of a key's current value (nn::dropout is the one that moves a key on).
inline tensor_spec dropout_shape_rule(std::span<const tensor_spec> in, const attributes& a) {
    (void)ops::make_dropout_attrs(a.number("p"));  // checks p
    if (!is_floating(in[0].dtype))
        throw dtype_error("kiln: dtype_error in 'nn::dropout': the input must be floating, got " + std::string(name(in[0].dtype)));
    if (in[1].dtype != dtype::int64) throw dtype_error("kiln: dtype_error in 'dropout': the key must be int64, got " + std::string(name(in[1].dtype)));
    return {in[0].dtype, ops::dropout::result_shape(ops::dropout_attrs{}, in[0].shape, in[1].shape)};
}

inline std::vector<tensor> tensor_vector(std::span<const tensor> in) { return {in.begin(), in.end()}; }
}  // namespace detail

}  // namespace kiln
