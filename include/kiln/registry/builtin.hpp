#pragma once
// The registry's built-in entries (detail::build_registry, read through kiln::registered_ops in registry.hpp):
// elementwise entries built from the op structs of ops/ (name, arity, kernel, gradient rule), and structural entries
// (reductions, matmul, views, joins, indexing) from eager mode's functions, with their attribute schemas and shape
// rules (registry/structural_rules.hpp). Every function is a template or inline: a translation unit that never calls the registry compiles none of
// the kernels.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../nn/layers.hpp"
#include "schema.hpp"
#include "structural_rules.hpp"

namespace kiln {

namespace detail {

// ---- elementwise entries, from the op structs -------------------------------------------------------------

template <class Op>
constexpr op_family family_of() {
    if constexpr (std::is_same_v<Op, ops::relu> || std::is_same_v<Op, ops::relu_backward> || std::is_same_v<Op, ops::sigmoid> || std::is_same_v<Op, ops::softplus> ||
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

// ---- the table: every built-in op, elementwise and structural ----------------------------------------------

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
    ew.template operator()<ops::relu_backward>("relu's gradient: g where x > 0, 0 elsewhere (inputs g, x)");
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
    auto closed = [&](op_kernel k, std::string n, op_family f, int arity, std::vector<attr_spec> attrs, bool diff,
                      std::string summary, auto rule) {
        r.push_back(structural(std::move(n), f, arity, arity, std::move(attrs), diff, shape_rule::closed, k, rule,
                               std::move(summary)));
    };
    evaluated([](std::span<const tensor> in, const attributes&) { return kiln::outer(in[0], in[1]); }, 
        "outer", op_family::linalg, 2, {}, true, "the outer product of two vectors");
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::einsum(a.text("equation"), in[0], in[1]);
    }, "einsum", op_family::linalg, 2, {{"equation", ar::text, true, std::nullopt, "the subscripts, as 'ij,jk->ik'"}},
       true, "Einstein summation over two operands", &einsum_shape_rule);
    // Scans: ops::scan's own shape and dtype rule (a closed rule: nothing computed).
    const std::vector<attr_spec> scan_attrs{axis_attr(std::nullopt, "the axis to scan"),
                                            {"reverse", ar::boolean, false, attr_value(false), "scan from the end of the axis"}};
    r.push_back(structural("cumsum", op_family::reduction, 1, 1, scan_attrs, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               return kiln::cumsum(in[0], int_attr(a, "axis"), a.boolean("reverse"));
                           },
                           &scan_shape_rule<ops::scan_kind::sum>, "running sums along an axis (integers and bools give int64)"));
    r.push_back(structural("cumprod", op_family::reduction, 1, 1, scan_attrs, true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               return kiln::cumprod(in[0], int_attr(a, "axis"), a.boolean("reverse"));
                           },
                           &scan_shape_rule<ops::scan_kind::prod>, "running products along an axis (integers and bools give int64)"));
    const std::vector<attr_spec> sort_attrs{axis_attr(attr_value(-1), "the axis to sort along"),
                                            {"descending", ar::boolean, false, attr_value(false), "largest first"}};
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::sort(in[0], int_attr(a, "axis"), a.boolean("descending"));
    }, "sort", op_family::indexing, 1, sort_attrs, true, "sorted along an axis (stable; NaN last)", &sort_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::argsort(in[0], int_attr(a, "axis"), a.boolean("descending"));
    }, "argsort", op_family::indexing, 1, sort_attrs, false, "the indices that sort along an axis (int64)", &argsort_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        const std::vector<std::int64_t> v = a.integers("reps");
        return kiln::tile(in[0], std::vector<std::ptrdiff_t>(v.begin(), v.end()));
    }, "tile", op_family::join, 1, {{"reps", ar::integers, true, std::nullopt, "repetitions per axis"}}, true,
       "the tensor repeated as whole blocks (numpy.tile)", &tile_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return a.has("axis") ? kiln::repeat(in[0], a.integer("repeats"), int_attr(a, "axis")) : kiln::repeat(in[0], a.integer("repeats"));
    }, "repeat", op_family::join, 1,
       {{"repeats", ar::integer, true, std::nullopt, "copies of each element"},
        {"axis", ar::integer, false, std::nullopt, "the axis; the flattened tensor when absent"}},
       true, "each element repeated (numpy.repeat)", &repeat_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::pad(in[0], pad_widths_of(a), a.number("value"));
    }, "pad", op_family::join, 1,
       {{"widths", ar::integers, true, std::nullopt, "before, after pairs for the leading axes"},
        {"value", ar::number, false, attr_value(0.0), "the fill value"}},
       true, "constant padding (numpy.pad)", &pad_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return eager_op<ops::im2col>(window_attrs_of(a), in[0]);
    }, "im2col", op_family::join, 1,
       {{"kernel", ar::integers, true, std::nullopt, "the window's height and width"},
        {"stride", ar::integers, false, attr_value({1, 1}), "steps between windows, per axis"},
        {"pads", ar::integers, false, attr_value({0, 0, 0, 0}), "padding: top, bottom, left, right"},
        {"dilation", ar::integers, false, attr_value({1, 1}), "steps between a window's elements, per axis"},
        {"value", ar::number, false, attr_value(0.0), "what padding reads as"}},
       true, "the windows of an image (N, C, H, W) as (N, C, kh * kw, out_h, out_w) (convolution's im2col)", &im2col_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::index_select(in[0], int_attr(a, "axis"), in[1]);
    }, "index_select", op_family::indexing, 2, {axis_attr(std::nullopt, "the axis to gather along")}, true,
       "the entries at an integer index tensor along an axis (inputs x, index)", &index_select_shape_rule);
    closed([](std::span<const tensor> in, const attributes& a) {
        return kiln::take_along_axis(in[0], in[1], int_attr(a, "axis"));
    }, "take_along_axis", op_family::indexing, 2, {axis_attr(std::nullopt, "the axis to gather along")}, true,
       "gathers with an index of the input's rank (inputs x, index)", &take_along_axis_shape_rule);
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
    r.push_back(structural("dropout", op_family::activation, 2, 2,
                           {{"p", ar::number, true, std::nullopt, "the probability that an element is dropped"}}, true,
                           shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               const ops::dropout_attrs at = detail::check_dropout(in[0], a.number("p"));
                               if (in[1].dtype() != dtype::int64)
                                   throw dtype_error("kiln: dtype_error in 'dropout': the key must be int64, got " +
                                                     std::string(name(in[1].dtype())));
                               return detail::apply_structural<ops::dropout>(at, in[0], in[1]);
                           },
                           &dropout_shape_rule,
                           "x with elements zeroed with probability p and the rest scaled by 1 / (1 - p), by the draws of "
                           "an int64 key (seed, counter) of shape (2,) (inputs x, key); nn::dropout also moves the key on"));
    r.push_back(structural("layer_norm", op_family::activation, 1, 3,
                           {axis_attr(attr_value(-1), "the first normalized axis (every axis from it on)"),
                            {"epsilon", ar::number, false, attr_value(1e-5), "added to the variance"}},
                           true, shape_rule::closed,
                           [](std::span<const tensor> in, const attributes& a) {
                               const int axis = int_attr(a, "axis");
                               if (axis < -in[0].dim() || axis >= in[0].dim())
                                   throw value_error("kiln: value_error in 'layer_norm': axis " + std::to_string(axis) +
                                                     " is out of range for shape " + to_string(in[0].shape()));
                               return nn::layer_norm(in[0], layer_norm_normalized(in[0].shape(), axis),
                                                     in.size() > 1 ? in[1] : tensor(), in.size() > 2 ? in[2] : tensor(),
                                                     a.number("epsilon"));
                           },
                           &layer_norm_shape_rule,
                           "(x - mean) / sqrt(var + epsilon) * weight + bias over the trailing axes (inputs x[, weight[, bias]])"));
    return r;
}

}  // namespace detail

}  // namespace kiln
