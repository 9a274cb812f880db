// The run-time op registry (issue #13): every registered op has a sample here, and on each sample
//   - kiln::apply by name gives what the C++ function of that name gives,
//   - kiln::infer gives the dtype and shape that apply gives,
//   - kiln::op_gradient agrees with central differences (for the differentiable ops);
// plus lookups, attribute checks and their messages, parsing attributes from text, and recording on a tape.
#include <algorithm>
#include <kiln/io.hpp>
#include <kiln/kiln.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tensor_check.hpp"

using kiln_test::f64;
using kiln_test::values;

namespace {

using tensors = std::vector<kiln::tensor>;

struct sample {
    tensors inputs;
    kiln::attributes attrs;
    std::function<kiln::tensor(const tensors&)> direct;  // the same op through its C++ function
};

// Smooth points: unary ops see values in (0.2, 0.8) (inside every domain: log, asin, acosh-free), binary ops a
// second operand in (1.2, 1.8), and no two values tie.
kiln::tensor u23() { return f64({0.21, 0.34, 0.47, 0.52, 0.66, 0.79}, {2, 3}); }
kiln::tensor v23() { return f64({1.25, 1.61, 1.33, 1.72, 1.48, 1.29}, {2, 3}); }
kiln::tensor mixed23() { return f64({-0.71, 0.34, -0.27, 0.52, 0.66, -0.43}, {2, 3}); }

std::map<std::string, sample> samples() {
    std::map<std::string, sample> s;
    auto x = u23(), y = v23(), m = mixed23();
#define KILN_U(op) s[#op] = {{x}, {}, [](const tensors& t) { return kiln::op(t[0]); }};
#define KILN_B(op) s[#op] = {{x, y}, {}, [](const tensors& t) { return kiln::op(t[0], t[1]); }};
    KILN_U(abs) KILN_U(exp) KILN_U(log) KILN_U(sqrt) KILN_U(rsqrt) KILN_U(square) KILN_U(sin) KILN_U(cos) KILN_U(tan)
    KILN_U(asin) KILN_U(acos) KILN_U(atan) KILN_U(tanh) KILN_U(log1p) KILN_U(expm1) KILN_U(erf) KILN_U(floor)
    KILN_U(ceil) KILN_U(trunc) KILN_U(round) KILN_U(sign) KILN_U(isnan) KILN_U(isinf) KILN_U(isfinite)
    KILN_U(sigmoid) KILN_U(relu) KILN_U(softplus) KILN_U(silu) KILN_U(gelu) KILN_U(elu) KILN_U(logical_not)
    KILN_B(pow) KILN_B(maximum) KILN_B(minimum) KILN_B(floor_divide) KILN_B(remainder) KILN_B(atan2) KILN_B(equal)
    KILN_B(not_equal) KILN_B(logical_and) KILN_B(logical_or) KILN_B(logical_xor)
#undef KILN_U
#undef KILN_B
    s["relu"].inputs = {m};
    s["elu"].inputs = {m};
    s["abs"].inputs = {m};
    s["sign"].inputs = {m};
    s["neg"] = {{m}, {}, [](const tensors& t) { return -t[0]; }};
    s["add"] = {{x, y}, {}, [](const tensors& t) { return t[0] + t[1]; }};
    s["sub"] = {{x, y}, {}, [](const tensors& t) { return t[0] - t[1]; }};
    s["mul"] = {{x, y}, {}, [](const tensors& t) { return t[0] * t[1]; }};
    s["div"] = {{x, y}, {}, [](const tensors& t) { return t[0] / t[1]; }};
    s["less"] = {{x, y}, {}, [](const tensors& t) { return t[0] < t[1]; }};
    s["less_equal"] = {{x, y}, {}, [](const tensors& t) { return t[0] <= t[1]; }};
    s["greater"] = {{x, y}, {}, [](const tensors& t) { return t[0] > t[1]; }};
    s["greater_equal"] = {{x, y}, {}, [](const tensors& t) { return t[0] >= t[1]; }};
    const kiln::tensor i1 = kiln::from_values<std::int64_t>({5, -3, 12, 7, 0, 9}, {2, 3});
    const kiln::tensor i2 = kiln::from_values<std::int64_t>({3, 6, 10}, {3});
    s["bitwise_and"] = {{i1, i2}, {}, [](const tensors& t) { return t[0] & t[1]; }};
    s["bitwise_or"] = {{i1, i2}, {}, [](const tensors& t) { return t[0] | t[1]; }};
    s["bitwise_xor"] = {{i1, i2}, {}, [](const tensors& t) { return t[0] ^ t[1]; }};
    s["bitwise_not"] = {{i1}, {}, [](const tensors& t) { return ~t[0]; }};
    const kiln::tensor slope = f64({0.1, 0.2, 0.3}, {3});
    s["leaky_relu"] = {{m, slope}, {}, [](const tensors& t) { return kiln::leaky_relu(t[0], t[1]); }};
    s["relu_backward"] = {{y, m}, {}, [](const tensors& t) { return kiln::where(t[1] > 0, t[0], 0); }};
    const kiln::tensor lo = f64({-0.5}, {1}), hi = f64({0.1, 0.6, 0.45}, {3});
    s["clamp"] = {{m, lo, hi}, {}, [](const tensors& t) { return kiln::clamp(t[0], t[1], t[2]); }};
    const kiln::tensor c = kiln::from_values<bool>({true, false, true}, {3});
    s["where"] = {{c, x, y}, {}, [](const tensors& t) { return kiln::where(t[0], t[1], t[2]); }};

    // Reductions.
    s["sum"] = {{x}, {{"axes", {1}}}, [](const tensors& t) { return kiln::sum(t[0], {1}); }};
    s["prod"] = {{x}, {{"axes", {0}}, {"keepdims", true}}, [](const tensors& t) { return kiln::prod(t[0], {0}, true); }};
    s["max"] = {{x}, {}, [](const tensors& t) { return kiln::max(t[0]); }};
    s["min"] = {{x}, {{"axes", {-1}}}, [](const tensors& t) { return kiln::min(t[0], {-1}); }};
    s["mean"] = {{x}, {{"axes", {0, 1}}}, [](const tensors& t) { return kiln::mean(t[0], {0, 1}); }};
    const kiln::tensor b = kiln::from_values<bool>({false, true, false, false, false, false}, {2, 3});
    s["any"] = {{b}, {{"axes", {1}}}, [](const tensors& t) { return kiln::any(t[0], {1}); }};
    s["all"] = {{b}, {}, [](const tensors& t) { return kiln::all(t[0]); }};
    s["var"] = {{x}, {{"axes", {1}}, {"correction", 0}}, [](const tensors& t) { return kiln::var(t[0], {1}, 0); }};
    s["std"] = {{x}, {{"axes", {0}}}, [](const tensors& t) { return kiln::std(t[0], {0}); }};
    s["argmax"] = {{m}, {{"axis", 1}}, [](const tensors& t) { return kiln::argmax(t[0], 1); }};
    s["argmin"] = {{m}, {}, [](const tensors& t) { return kiln::argmin(t[0]); }};
    s["cumsum"] = {{x}, {{"axis", 1}}, [](const tensors& t) { return kiln::cumsum(t[0], 1); }};
    s["cumprod"] = {{x}, {{"axis", 0}}, [](const tensors& t) { return kiln::cumprod(t[0], 0); }};

    // Products.
    const kiln::tensor w = f64({0.5, -1.25, 0.75, 2.0, -0.3, 1.1}, {3, 2});
    s["matmul"] = {{x, w}, {}, [](const tensors& t) { return kiln::matmul(t[0], t[1]); }};
    const kiln::tensor p = f64({0.3, -0.6}, {2}), q = f64({1.5, 0.25, -0.4}, {3});
    s["outer"] = {{p, q}, {}, [](const tensors& t) { return kiln::outer(t[0], t[1]); }};
    s["einsum"] = {{x, w}, {{"equation", "ij,jk->ik"}}, [](const tensors& t) { return kiln::einsum("ij,jk->ik", t[0], t[1]); }};

    // Views.
    s["transpose"] = {{x}, {}, [](const tensors& t) { return t[0].transpose(-2, -1); }};
    s["permute"] = {{x.reshape({1, 2, 3})}, {{"dims", {2, 0, 1}}}, [](const tensors& t) { return t[0].permute({2, 0, 1}); }};
    s["slice"] = {{x}, {{"axis", 1}, {"start", 2}, {"step", -2}}, [](const tensors& t) {
                      return t[0].slice(1, 2, kiln::slice_end, -2);
                  }};
    s["select"] = {{x}, {{"axis", 0}, {"index", -1}}, [](const tensors& t) { return t[0].select(0, -1); }};
    s["squeeze"] = {{x.reshape({2, 1, 3})}, {}, [](const tensors& t) { return t[0].squeeze(); }};
    s["unsqueeze"] = {{x}, {{"axis", 1}}, [](const tensors& t) { return t[0].unsqueeze(1); }};
    s["broadcast_to"] = {{q}, {{"shape", {2, 3}}}, [](const tensors& t) { return t[0].broadcast_to({2, 3}); }};
    s["flip"] = {{x}, {{"axes", {1}}}, [](const tensors& t) { return kiln::flip(t[0], {1}); }};
    s["reshape"] = {{x}, {{"shape", {3, -1}}}, [](const tensors& t) { return t[0].reshape({3, -1}); }};

    // Conversion, joins, repetition.
    s["cast"] = {{x}, {{"dtype", kiln::float64}}, [](const tensors& t) { return t[0].to(kiln::float64); }};
    s["concat"] = {{x, y, x}, {{"axis", 1}}, [](const tensors& t) { return kiln::concat(t, 1); }};
    s["stack"] = {{x, y}, {{"axis", -1}}, [](const tensors& t) { return kiln::stack(t, -1); }};
    s["tile"] = {{q}, {{"reps", {2, 2}}}, [](const tensors& t) { return kiln::tile(t[0], {2, 2}); }};
    s["repeat"] = {{x}, {{"repeats", 2}, {"axis", 0}}, [](const tensors& t) { return kiln::repeat(t[0], 2, 0); }};
    s["pad"] = {{x}, {{"widths", {1, 0, 0, 2}}, {"value", 0.5}}, [](const tensors& t) {
                    return kiln::pad(t[0], {{1, 0}, {0, 2}}, 0.5);
                }};

    const kiln::tensor image = kiln::arange(0, 12, 1, kiln::float64).reshape({1, 1, 3, 4});
    s["im2col"] = {{image}, {{"kernel", {2, 3}}, {"stride", {1, 2}}, {"pads", {1, 0, 0, 1}}, {"value", -1.0}}, [](const tensors& t) {
                       return kiln::eager_op<kiln::ops::im2col>(kiln::ops::make_window_attrs({2, 3}, {1, 2}, {1, 0, 0, 1}, {1, 1}, -1.0), t[0]);
                   }};

    // Sorting and indexing.
    s["sort"] = {{m}, {{"descending", true}}, [](const tensors& t) { return kiln::sort(t[0], -1, true); }};
    s["argsort"] = {{m}, {{"axis", 1}}, [](const tensors& t) { return kiln::argsort(t[0], 1); }};
    const kiln::tensor idx = kiln::from_values<std::int64_t>({2, 0, 2}, {3});
    s["index_select"] = {{x, idx}, {{"axis", 1}}, [](const tensors& t) { return kiln::index_select(t[0], 1, t[1]); }};
    const kiln::tensor along = kiln::from_values<std::int64_t>({1, 0, 2, 2, 1, 0}, {2, 3});
    s["take_along_axis"] = {{x, along}, {{"axis", 1}}, [](const tensors& t) { return kiln::take_along_axis(t[0], t[1], 1); }};
    const kiln::tensor src = f64({1.5, -2.0, 0.25, 0.75, 3.0, -1.0}, {2, 3});
    s["scatter_add"] = {{x, along, src}, {{"axis", 1}}, [](const tensors& t) {
                            return kiln::scatter_add(t[0], 1, t[1], t[2]);
                        }};
    const kiln::tensor mask = kiln::from_values<bool>({true, false, true, true, false, false}, {2, 3});
    s["masked_select"] = {{x, mask}, {}, [](const tensors& t) { return kiln::masked_select(t[0], t[1]); }};
    s["softmax"] = {{m}, {}, [](const tensors& t) { return kiln::softmax(t[0]); }};
    s["log_softmax"] = {{m}, {{"axis", 0}}, [](const tensors& t) { return kiln::log_softmax(t[0], 0); }};
    s["dropout"] = {{m, kiln::from_values<std::int64_t>({12345, 7}, {2})}, {{"p", 0.5}}, [](const tensors& t) {
                        // (nn::dropout moves its key on, then draws; the op by name draws with the key it is given)
                        kiln::tensor key = t[1] - kiln::from_values<std::int64_t>({0, 1}, {2});
                        return kiln::nn::dropout(t[0], 0.5, key);
                    }};
    s["layer_norm"] = {{m, f64({0.5, -1.5, 2.0}, {3}), f64({0.25, 0.0, -0.75}, {3})}, {{"epsilon", 0.01}}, [](const tensors& t) {
                           return kiln::nn::layer_norm(t[0], {3}, t[1], t[2], 0.01);
                       }};
    return s;
}

void check_same(const kiln::tensor& got, const kiln::tensor& want, const std::string& op) {
    INFO("op: " << op);
    REQUIRE(got.dtype() == want.dtype());
    REQUIRE(got.shape() == want.shape());
    const std::vector<double> g = values(got), w = values(want);
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(w[i]).epsilon(1e-12));
}

// sum(apply(op, inputs) * weights) at inputs with element j of input i moved by h.
double weighted(const kiln::op_schema& o, tensors inputs, const kiln::attributes& a, const kiln::tensor& weights,
                std::size_t i, std::size_t j, double h) {
    std::vector<double> v = values(inputs[i]);
    v[j] += h;
    inputs[i] = kiln::from_vector(v, inputs[i].shape());
    return kiln::sum(o.apply(inputs, a) * weights).item<double>();
}

}  // namespace

TEST_CASE("every registered op has a sample, and apply by name is the op of that name") {
    const auto all = samples();
    REQUIRE(kiln::registered_ops().size() >= 90);
    for (const kiln::op_schema& o : kiln::registered_ops()) {
        INFO("op: " << o.name);
        auto found = all.find(o.name);
        REQUIRE_MESSAGE(found != all.end(), "registered op without a sample in test/registry.cpp");
        const sample& s = found->second;
        check_same(kiln::apply(o.name, s.inputs, s.attrs), s.direct(s.inputs), o.name);
        CHECK(&kiln::find_op(o.name) == &o);
    }
    for (const auto& entry : all) CHECK_MESSAGE(kiln::find_op_or_null(entry.first) != nullptr, entry.first);
}

TEST_CASE("infer gives apply's dtype and shape for every op, on float64, float32 and int64 inputs") {
    for (const auto& entry : samples()) {
        const std::string& name = entry.first;  // (not a structured binding: clang 14 cannot capture one in INFO)
        const sample& s = entry.second;
        const kiln::op_schema& o = kiln::find_op(name);
        for (kiln::dtype d : {kiln::float64, kiln::float32, kiln::int64}) {
            INFO("op: " << name << " on " << kiln::name(d));
            tensors in = s.inputs;
            // The floating inputs take the dtype d (indices, masks and conditions keep theirs).
            for (kiln::tensor& t : in)
                if (t.dtype() == kiln::float64) t = t.to(d);
            std::vector<kiln::tensor_spec> specs;
            for (const kiln::tensor& t : in) specs.push_back(kiln::spec_of(t));
            kiln::tensor y;
            try {
                y = o.apply(in, s.attrs);
            } catch (const kiln::dtype_error&) {
                CHECK_THROWS_AS(o.infer(specs, s.attrs), kiln::dtype_error);  // the same refusal (sqrt of int64 is not one)
                continue;
            }
            if (o.rule == kiln::shape_rule::data_dependent) {
                CHECK_THROWS_AS(o.infer(specs, s.attrs), kiln::value_error);
                continue;
            }
            const kiln::tensor_spec got = o.infer(specs, s.attrs);
            CHECK(kiln::to_string(got) == kiln::to_string(kiln::spec_of(y)));
        }
    }
}

TEST_CASE("op_gradient is each differentiable op's rule, against central differences") {
    int checked = 0;
    for (const auto& entry : samples()) {
        const std::string& name = entry.first;  // (not a structured binding: clang 14 cannot capture one in INFO)
        const sample& s = entry.second;
        const kiln::op_schema& o = kiln::find_op(name);
        const kiln::tensor y = o.apply(s.inputs, s.attrs);
        if (!o.differentiable || y.dtype() != kiln::float64) continue;
        INFO("op: " << name);
        const kiln::tensor weights =
            kiln::arange(1, static_cast<double>(y.numel()) + 1, 1, kiln::float64).reshape(y.shape()) * 0.1;
        const auto grads = kiln::op_gradient(name, s.inputs, weights, s.attrs);
        REQUIRE(grads.size() == s.inputs.size());
        for (std::size_t i = 0; i < s.inputs.size(); ++i) {
            if (s.inputs[i].dtype() != kiln::float64) {
                CHECK_FALSE(grads[i].has_value());
                continue;
            }
            REQUIRE(grads[i].has_value());
            REQUIRE(grads[i]->shape() == s.inputs[i].shape());
            const std::vector<double> g = values(*grads[i]);
            for (std::size_t j = 0; j < g.size(); ++j) {
                const double h = 1e-6;
                const double fd = (weighted(o, s.inputs, s.attrs, weights, i, j, h) -
                                   weighted(o, s.inputs, s.attrs, weights, i, j, -h)) / (2 * h);
                INFO("input " << i << " element " << j);
                CHECK(g[j] == doctest::Approx(fd).epsilon(1e-5).scale(1.0));
            }
        }
        ++checked;
    }
    CHECK(checked >= 60);
}

TEST_CASE("hand-computed values through the registry") {
    const kiln::tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(values(kiln::apply("sum", {x}, {{"axes", {0}}})) == std::vector<double>{5, 7, 9});
    CHECK(kiln::apply("sum", {x}, {{"axes", {0}}, {"keepdims", true}}).shape() == kiln::dims{1, 3});
    CHECK(values(kiln::apply("sub", {x, f64({1}, {1})})) == std::vector<double>{0, 1, 2, 3, 4, 5});
    CHECK(values(kiln::apply("argmax", {x})) == std::vector<double>{5});
    CHECK(kiln::apply("argmax", {x}, {{"keepdims", true}}).shape() == kiln::dims{1, 1});
    CHECK(values(kiln::apply("slice", {x}, {{"axis", 1}, {"start", 1}})) == std::vector<double>{2, 3, 5, 6});
    CHECK(values(kiln::apply("matmul", {x, f64({1, 0, -1}, {3})})) == std::vector<double>{-2, -2});
    CHECK(kiln::apply("cast", {x}, {{"dtype", kiln::int32}}).dtype() == kiln::int32);
    // relu's gradient: g where x > 0; NaN, -0 and negative x give 0, as where(x > 0, g, 0) does.
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    const kiln::tensor rx = f64({nan, -0.0, -2, 1e-300, inf, 3}, {2, 3});
    CHECK(values(kiln::apply("relu_backward", {x, rx})) == std::vector<double>{0, 0, 0, 4, 5, 6});
    const kiln::tensor_spec mm = kiln::infer("matmul", {{kiln::float32, {5, 2, 3}}, {kiln::float64, {3, 4}}});
    CHECK(mm.dtype == kiln::float64);
    CHECK(mm.shape == kiln::dims{5, 2, 4});
    CHECK(kiln::infer("matmul", {{kiln::float32, {3}}, {kiln::float32, {3}}}).shape == kiln::dims{});
    CHECK(kiln::infer("less", {{kiln::int32, {2, 1}}, {kiln::float32, {3}}}).dtype == kiln::bool_);
    CHECK(kiln::infer("div", {{kiln::int32, {2}}, {kiln::int32, {2}}}).dtype == kiln::float32);
    CHECK(kiln::infer("sum", {{kiln::bool_, {4, 2}}}).dtype == kiln::int64);
    CHECK(kiln::infer("reshape", {{kiln::float32, {4, 6}}}, {{"shape", {2, -1, 3}}}).shape == kiln::dims{2, 4, 3});
    // A shape rule for shapes too large to allocate: views and closed rules allocate nothing.
    const kiln::tensor_spec huge{kiln::float32, {1 << 20, 1 << 20}};
    CHECK(kiln::infer("transpose", {huge}).shape == kiln::dims{1 << 20, 1 << 20});
    CHECK(kiln::infer("sum", {huge}, {{"axes", {1}}}).shape == kiln::dims{1 << 20});
}

TEST_CASE("the schema describes each op") {
    const kiln::op_schema& sum = kiln::find_op("sum");
    CHECK(sum.family == kiln::op_family::reduction);
    CHECK(sum.min_inputs == 1);
    CHECK(sum.max_inputs == 1);
    REQUIRE(sum.attrs.size() == 2);
    CHECK(sum.attrs[0].name == "axes");
    CHECK(sum.attrs[0].kind == kiln::attr_kind::integers);
    CHECK_FALSE(sum.attrs[0].required);
    CHECK(sum.attrs[1].name == "keepdims");
    CHECK(*sum.attrs[1].fallback == kiln::attr_value(false));
    CHECK(sum.differentiable);
    CHECK(kiln::find_op("add").family == kiln::op_family::elementwise);
    CHECK(kiln::find_op("add").differentiable);
    CHECK_FALSE(kiln::find_op("less").differentiable);
    CHECK_FALSE(kiln::find_op("bitwise_and").differentiable);
    CHECK_FALSE(kiln::find_op("argmax").differentiable);
    CHECK(kiln::find_op("where").min_inputs == 3);
    CHECK(kiln::find_op("concat").max_inputs == -1);
    CHECK(kiln::find_op("masked_select").rule == kiln::shape_rule::data_dependent);
    CHECK(kiln::find_op("tile").rule == kiln::shape_rule::closed);  // ops::tile's own rule
    CHECK(kiln::find_op("outer").rule == kiln::shape_rule::evaluated);
    CHECK(kiln::find_op("einsum").rule == kiln::shape_rule::closed);  // ops::einsum's own rule
    CHECK(kiln::find_op("matmul").rule == kiln::shape_rule::closed);
    for (const kiln::op_schema& o : kiln::registered_ops()) {
        INFO(o.name);
        CHECK_FALSE(o.summary.empty());
        CHECK(static_cast<bool>(o.kernel));
        CHECK((o.shape != nullptr || o.rule != kiln::shape_rule::closed || o.family == kiln::op_family::view));
    }
}

TEST_CASE("the kernels that KILN_SEPARATE_KERNELS compiles once cover every built-in elementwise op") {
    // kiln/eager/separate.hpp lists the ops by hand; an elementwise op missing there would still work, compiled in
    // every translation unit that calls it, which is what the list is for.
    const auto& listed = kiln::detail::separately_compiled_ops;
    for (const kiln::op_schema& o : kiln::registered_ops()) {
        if (o.family != kiln::op_family::elementwise) continue;
        INFO(o.name);
        CHECK(std::find(std::begin(listed), std::end(listed), o.name) != std::end(listed));
    }
    for (std::string_view name : listed) {
        INFO(name);
        const kiln::op_schema* o = kiln::find_op_or_null(name);
        REQUIRE(o != nullptr);
        CHECK((o->family == kiln::op_family::elementwise || o->family == kiln::op_family::activation));
    }
    CHECK(std::size(listed) == 59);
}

TEST_CASE("bad names, arities and attributes are value_errors that say what is wrong") {
    const kiln::tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    auto message = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const kiln::value_error& e) {
            return e.what();
        }
        return "(no value_error)";
    };
    CHECK(message([&] { kiln::find_op("ad"); }) ==
          "kiln: value_error in 'find_op': no op named 'ad'; closest: 'add', 'pad', 'abs' (" +
              std::to_string(kiln::registered_ops().size()) + " known in all)");
    CHECK(message([&] { kiln::apply("Sum", {x}); }).find("closest: 'sum'") != std::string::npos);
    CHECK(message([&] { kiln::apply("sum", {x}, {{"axis", 0}}); }) ==
          "kiln: value_error in 'sum': no attribute named 'axis'; closest: 'axes', 'keepdims'");
    CHECK(message([&] { kiln::apply("add", {x}); }) == "kiln: value_error in 'add': takes 2 inputs, got 1");
    CHECK(message([&] { kiln::apply("exp", {x, x}); }) == "kiln: value_error in 'exp': takes 1 input, got 2");
    CHECK(message([&] { kiln::apply("concat", {}); }) == "kiln: value_error in 'concat': takes at least 1 input, got 0");
    CHECK(message([&] { kiln::apply("sum", {x}, {{"keepdims", 2.5}}); }) ==
          "kiln: value_error in 'sum': attribute 'keepdims' is a bool, not a number ('2.5')");
    CHECK(message([&] { kiln::apply("reshape", {x}); }) ==
          "kiln: value_error in 'reshape': the attribute 'shape' (a list of integers: the new shape; one extent may "
          "be -1) is required");
    CHECK(message([&] { kiln::apply("exp", {x}, {{"axis", 0}}); }) ==
          "kiln: value_error in 'exp': no attribute named 'axis'; 'exp' takes no attributes");
    CHECK(message([&] { kiln::infer("masked_select", {{kiln::float32, {3}}, {kiln::bool_, {3}}}); }) ==
          "kiln: value_error in 'masked_select': the result's shape depends on the input values, so it has no shape "
          "rule");
    CHECK(message([&] {
              kiln::infer("im2col", {{kiln::float32, {1, 1, 4, 4}}}, {{"kernel", {2, 2, 2}}, {"stride", {1, 1}}, {"pads", {0, 0, 0, 0}}});
          }) == "kiln: value_error in 'im2col': 'kernel' holds 2 numbers, got 3");
    // The op's own errors come through apply and infer alike.
    CHECK_THROWS_AS(kiln::apply("add", {x, f64({1, 2}, {2})}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::infer("add", {{kiln::float64, {2, 3}}, {kiln::float64, {2}}}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::infer("matmul", {{kiln::float64, {2, 3}}, {kiln::float64, {2, 3}}}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::infer("sum", {{kiln::float64, {2, 3}}}, {{"axes", {2}}}), kiln::value_error);
    CHECK_THROWS_AS(kiln::infer("bitwise_and", {{kiln::float32, {2}}, {kiln::float32, {2}}}), kiln::dtype_error);
    CHECK_THROWS_AS(kiln::infer("reshape", {{kiln::float32, {2, 3}}}, {{"shape", {4, -1}}}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::infer("max", {{kiln::float32, {0, 3}}}), kiln::value_error);
    // A moved-from tensor is refused by name.
    kiln::tensor gone = x;
    kiln::tensor keep = std::move(gone);
    CHECK(message([&] { kiln::apply("exp", {gone}); }).find("moved") != std::string::npos);
}

TEST_CASE("attributes read from text by their schema's kind") {
    const kiln::op_schema& sum = kiln::find_op("sum");
    CHECK(kiln::parse_attribute(sum, "axes", "0,-1") == kiln::attr_value({0, -1}));
    CHECK(kiln::parse_attribute(sum, "axes", "") == kiln::attr_value(std::vector<std::int64_t>{}));
    CHECK(kiln::parse_attribute(sum, "keepdims", "true") == kiln::attr_value(true));
    CHECK(kiln::parse_attribute(sum, "keepdims", "0") == kiln::attr_value(false));
    CHECK(kiln::parse_attribute(kiln::find_op("cast"), "dtype", "int32") == kiln::attr_value(kiln::int32));
    CHECK(kiln::parse_attribute(kiln::find_op("pad"), "value", "-2.5") == kiln::attr_value(-2.5));
    CHECK(kiln::parse_attribute(kiln::find_op("einsum"), "equation", "i,i->") == kiln::attr_value("i,i->"));
    CHECK_THROWS_WITH_AS(kiln::parse_attribute(sum, "axes", "0,x"),
                         "kiln: value_error in 'sum': attribute 'axes' is a list of integers, not '0,x'", kiln::value_error);
    CHECK_THROWS_AS(kiln::parse_attribute(sum, "axes", "1,"), kiln::value_error);
    CHECK_THROWS_AS(kiln::parse_attribute(sum, "keepdims", "yes"), kiln::value_error);
    CHECK_THROWS_AS(kiln::parse_attribute(kiln::find_op("cast"), "dtype", "float16"), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::parse_attribute(sum, "keepdim", "1"),
                         "kiln: value_error in 'sum': no attribute named 'keepdim'; closest: 'keepdims', 'axes'",
                         kiln::value_error);
    // Round trip through to_string.
    for (const kiln::attr_value& v : {kiln::attr_value(3), kiln::attr_value({1, 2}), kiln::attr_value(0.25),
                                      kiln::attr_value(true), kiln::attr_value(kiln::float64)}) {
        const kiln::op_schema* o = nullptr;
        const char* key = nullptr;
        switch (v.kind()) {
            case kiln::attr_kind::integer: o = &kiln::find_op("select"), key = "index"; break;
            case kiln::attr_kind::integers: o = &sum, key = "axes"; break;
            case kiln::attr_kind::number: o = &kiln::find_op("pad"), key = "value"; break;
            case kiln::attr_kind::boolean: o = &sum, key = "keepdims"; break;
            default: o = &kiln::find_op("cast"), key = "dtype"; break;
        }
        CHECK(kiln::parse_attribute(*o, key, kiln::to_string(v)) == v);
    }
}

TEST_CASE("apply records on gradient tapes like the ops it names") {
    kiln::variable x(f64({0.5, -1.5, 2.0}, {3}));
    kiln::gradient_tape tape;
    const kiln::tensor y = kiln::apply("sum", {kiln::apply("mul", {x, x})});
    CHECK(values(tape.gradient(y, x)) == std::vector<double>{1.0, -3.0, 4.0});

    // A seed for the output: the vector-Jacobian product.
    kiln::variable z(f64({1, 2, 3}, {3}));
    kiln::gradient_tape t2;
    const kiln::tensor e = kiln::apply("square", {z});
    CHECK(values(t2.gradient(e, {z}, f64({1, 0, -1}, {3}))[0]) == std::vector<double>{2, 0, -6});
    kiln::gradient_tape t3;
    const kiln::tensor e3 = kiln::square(z);
    CHECK_THROWS_AS(t3.gradient(e3, {z}, f64({1, 0}, {2})), kiln::shape_error);

    // op_gradient gives each position of a repeated input its own gradient.
    const auto g = kiln::op_gradient("mul", {z, z}, kiln::ones({3}, kiln::float64));
    CHECK(values(*g[0]) == std::vector<double>{1, 2, 3});
    CHECK(values(*g[1]) == std::vector<double>{1, 2, 3});
}

// ---- adding an op: one struct, then every mode and the registry have it (docs/internals.md, section 1) ----------

namespace user_ops {
// x^3, written as a user of kiln would write a new op: a name, an arity, a kernel, a gradient rule.
struct cube {
    static constexpr std::string_view name = "cube";
    static constexpr int arity = 1;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        return a * a * a;
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) {
        return kiln::detail::grads(g * kiln::c<3> * kiln::square(a));
    }
};
template <class A>
constexpr auto cube_of(const A& a) {
    return kiln::detail::make<cube>(a);
}
}  // namespace user_ops

TEST_CASE("an op added as one struct reaches graph mode, grad, eager mode, the tape, printing and the registry") {
    using namespace kiln::literals;
    const kiln::input<"x", double> x{};
    std::vector<double> xv{-1.5, 0.5, 2.0};
    const auto X = kiln::view(xv.data(), {3});
    // Graph mode and its compile-time gradient.
    const auto y = kiln::run(user_ops::cube_of(x) + 1_c, x = X);
    CHECK(std::vector<double>(y.begin(), y.end()) == std::vector<double>{-2.375, 1.125, 9.0});
    const auto g = kiln::run(kiln::grad(kiln::sum(user_ops::cube_of(x)), x), x = X);
    CHECK(std::vector<double>(g.begin(), g.end()) == std::vector<double>{6.75, 0.75, 12.0});
    CHECK(kiln::to_string(user_ops::cube_of(x) * 2_c) == "cube(x) * 2");
    // Eager mode (with PyTorch's promotion: int32 stays int32) and the tape.
    const kiln::tensor t = f64({-1.5, 0.5, 2.0}, {3});
    CHECK(values(user_ops::cube_of(t)) == std::vector<double>{-3.375, 0.125, 8.0});
    CHECK(user_ops::cube_of(kiln::from_values<std::int32_t>({2, -3}, {2})).dtype() == kiln::int32);
    {
        kiln::variable v(t);
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(user_ops::cube_of(v));
        CHECK(values(tape.gradient(loss, v)) == std::vector<double>{6.75, 0.75, 12.0});
    }
    // The registry, once the program registers it; a second registration of the name is refused.
    CHECK(kiln::find_op_or_null("cube") == nullptr);
    const kiln::op_schema& s = kiln::register_op<user_ops::cube>("x cubed");
    CHECK(&kiln::find_op("cube") == &s);
    CHECK(s.min_inputs == 1);
    CHECK(s.differentiable);
    CHECK(values(kiln::apply("cube", {t})) == std::vector<double>{-3.375, 0.125, 8.0});
    const kiln::tensor_spec spec = kiln::infer("cube", {{kiln::float32, {4, 5}}});
    CHECK(spec.dtype == kiln::float32);
    CHECK(spec.shape == kiln::dims{4, 5});
    const auto vjp = kiln::op_gradient("cube", {t}, kiln::ones({3}, kiln::float64));
    REQUIRE(vjp[0].has_value());
    CHECK(values(*vjp[0]) == std::vector<double>{6.75, 0.75, 12.0});
    CHECK_THROWS_WITH_AS(kiln::register_op<user_ops::cube>("again"),
                         "kiln: value_error in 'register_op': an op named 'cube' is already registered", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::register_op<kiln::ops::exp>("again"),
                         "kiln: value_error in 'register_op': an op named 'exp' is already registered", kiln::value_error);
}

namespace user_ops {
// numpy.roll along one axis, as a program would add it: one mode-neutral structural op struct (ops/structural.hpp).
struct roll_attrs {
    int axis = 0;
    std::int64_t shift = 0;
    friend constexpr bool operator==(const roll_attrs&, const roll_attrs&) = default;
};
// The gradient rolls back: the attributes negated, as a value (eager mode) or at compile time (graph mode).
constexpr roll_attrs back(roll_attrs a) {
    a.shift = -a.shift;
    return a;
}
template <roll_attrs A>
constexpr kiln::ops::attrs_c<back(A)> back(kiln::ops::attrs_c<A>) {
    return {};
}
struct roll {
    static constexpr std::string_view name = "roll";
    static constexpr int arity = 1;
    using attributes = roll_attrs;
    template <roll_attrs A, class S>
    using static_shape = S;
    static kiln::dims result_shape(const roll_attrs& a, const kiln::dims& x, std::string_view = {}) {
        if (a.axis < 0 || a.axis >= x.rank)
            throw kiln::value_error("kiln: value_error in 'roll': axis " + std::to_string(a.axis) + " is out of range for shape " +
                                    kiln::to_string(x));
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const roll_attrs& a) {
        return "axis=" + std::to_string(a.axis) + " shift=" + std::to_string(a.shift);
    }
    // Two strided copies on the device: out[s:] = x[:n - s] and out[:s] = x[n - s:] along the axis.
    template <class Device, class U, class X>
    static void compute(const roll_attrs& a, U* out, const X& x, std::string_view = {}) {
        const std::ptrdiff_t n = x.shape[a.axis];
        const kiln::dims cs = kiln::detail::contiguous_strides(x.shape);
        if (n == 0 || x.shape.numel() == 0) return;
        const std::ptrdiff_t s = ((a.shift % n) + n) % n;
        auto part = [&](std::ptrdiff_t to, std::ptrdiff_t from, std::ptrdiff_t len) {
            kiln::dims shape = x.shape;
            shape[a.axis] = len;
            Device::copy_strided(kiln::detail::strided<U>(out + to * cs[a.axis], shape, cs),
                                 X(x.data + from * x.strides[a.axis], shape, x.strides));
        };
        if (n - s > 0) part(s, 0, n - s);
        if (s > 0) part(0, n - s, s);
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const Y&, const G& g) {
        return kiln::detail::grads(kiln::ops::structural_fns<X>::template apply<roll>(back(a), g));
    }
    // For kiln::register_op: the attributes by name.
    static std::vector<kiln::attr_spec> registry_attrs() {
        return {{"axis", kiln::attr_kind::integer, true, std::nullopt, "the axis to roll"},
                {"shift", kiln::attr_kind::integer, false, kiln::attr_value(1), "places to move each element"}};
    }
    static roll_attrs from_registry(const kiln::attributes& a) {
        return {static_cast<int>(a.integer("axis")), a.integer("shift")};
    }
};
}  // namespace user_ops

namespace {
template <class A>
std::vector<double> flat(const A& a) {
    return std::vector<double>(a.begin(), a.end());
}
}  // namespace

TEST_CASE("a structural op added as one struct reaches graph mode, grad, eager mode, the tape, traces, files and the registry") {
    using namespace kiln::literals;
    const kiln::input<"x", double> x{};
    std::vector<double> xv{1, 2, 3, 4, 5, 6};
    const auto X = kiln::view(xv.data(), {2, 3});
    const std::vector<double> rolled{3, 1, 2, 6, 4, 5};  // numpy.roll(x, 1, axis=1)
    // Graph mode: a node of the op with its attributes; its gradient by the op's rule, against central differences.
    constexpr auto node = kiln::graph_op<user_ops::roll, user_ops::roll_attrs{1, 1}>(x);
    CHECK(flat(kiln::run(node, x = X)) == rolled);
    CHECK(flat(kiln::run(kiln::graph_op<user_ops::roll, user_ops::roll_attrs{0, -3}>(x), x = X)) ==
          std::vector<double>{4, 5, 6, 1, 2, 3});
    const auto g = kiln::run(kiln::grad(kiln::sum(kiln::cumsum<1>(node) * x), x), x = X);
    // d/dx of sum(cumsum(roll(x)) * x): by hand, roll(x) = (3, 1, 2), cumsum = (3, 4, 6); the cumsum's gradient
    // w.r.t. its input is the reversed cumsum of x, (6, 5, 3), rolled back: (5, 3, 6); plus cumsum itself.
    CHECK(flat(g) == std::vector<double>{3 + 5, 4 + 3, 6 + 6, 6 + 11, 10 + 6, 15 + 15});
    CHECK(kiln::to_string(node * 2_c).find("roll") != std::string::npos);
    // Eager mode and the tape: the same op, the same rule.
    const kiln::tensor t = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(values(kiln::eager_op<user_ops::roll>({1, 1}, t)) == rolled);
    {
        kiln::variable v(t.clone());
        kiln::gradient_tape tape;
        const kiln::tensor tv = v;
        const kiln::tensor loss = kiln::sum(kiln::cumsum(kiln::eager_op<user_ops::roll>({1, 1}, tv), 1) * tv);
        CHECK(values(tape.gradient(loss, v)) == flat(g));
    }
    CHECK_THROWS_WITH_AS(kiln::eager_op<user_ops::roll>({2, 1}, t), "kiln: value_error in 'roll': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    // Traced: a function records the op and replays it.
    auto f = kiln::function([](const kiln::tensor& a) { return kiln::eager_op<user_ops::roll>({1, 2}, a); });
    CHECK(values(f(t)) == std::vector<double>{2, 3, 1, 5, 6, 4});
    CHECK(values(f(t * 2.0)) == std::vector<double>{4, 6, 2, 10, 12, 8});
    CHECK(f.trace_count() == 1);
    // The registry, once registered: apply, infer (closed: the op's own rule), op_gradient.
    CHECK(kiln::find_op_or_null("roll") == nullptr);
    const kiln::op_schema& s = kiln::register_op<user_ops::roll>("numpy.roll along an axis");
    CHECK(&kiln::find_op("roll") == &s);
    CHECK(s.rule == kiln::shape_rule::closed);
    CHECK(values(kiln::apply("roll", {t}, {{"axis", 1}})) == rolled);
    CHECK(kiln::infer("roll", {{kiln::int32, {4, 5}}}, {{"axis", 0}, {"shift", 7}}).shape == kiln::dims{4, 5});
    CHECK_THROWS_WITH_AS(kiln::infer("roll", {{kiln::int32, {4, 5}}}, {{"axis", 2}}),
                         "kiln: value_error in 'roll': axis 2 is out of range for shape (4, 5)", kiln::value_error);
    const auto vjp = kiln::op_gradient("roll", {t}, f64({1, 0, 0, 0, 0, 2}, {2, 3}), {{"axis", 1}});
    REQUIRE(vjp[0].has_value());
    CHECK(values(*vjp[0]) == std::vector<double>{0, 0, 1, 0, 2, 0});
    // A saved function that holds the op loads in a program that registered it (its attributes in their text forms).
    const std::string path = "registry_roll.kfn";
    kiln::save(f, {kiln::spec(kiln::float64, {2, 3})}, path);
    const kiln::loaded_function loaded = kiln::load(path);
    std::remove(path.c_str());
    CHECK(values(loaded({t})[0]) == std::vector<double>{2, 3, 1, 5, 6, 4});
}
