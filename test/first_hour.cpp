// What a new user meets in the first hour (issue #19): moved-from tensors, graphs that fold to a constant, session
// names and feeds, the eager training API, element access and assignment, printing, and the new elementwise ops of
// the vocabulary (hand-computed values in both modes, gradient rules against central differences).
#include <kiln/kiln.hpp>
#include <xtensor/xio.hpp>  // printing kiln::run's results, as documented

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::check_all_close;
using kiln_test::values;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
}  // namespace

TEST_CASE("a moved-from tensor is empty and every use of it is a value_error") {
    kiln::tensor a = kiln::from_values<float>({1, 2, 3}, {3});
    kiln::tensor b = std::move(a);
    CHECK(values(b) == std::vector<double>{1, 2, 3});
    CHECK_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the point of the test
    CHECK(a.numel() == 0);
    CHECK(a.dim() == 1);
    CHECK_THROWS_WITH_AS(a + 1, doctest::Contains("the tensor was moved from"), kiln::value_error);
    CHECK_THROWS_AS(a + b, kiln::value_error);
    CHECK_THROWS_AS(kiln::exp(a), kiln::value_error);
    CHECK_THROWS_AS(a.item<float>(), kiln::value_error);
    CHECK_THROWS_AS(a.reshape({-1}), kiln::value_error);
    CHECK_THROWS_AS(kiln::sum(a), kiln::value_error);
    CHECK_THROWS_AS(a.data<float>(), kiln::value_error);
    // Move assignment leaves the source empty too; assigning to a moved-from tensor makes it usable again.
    kiln::tensor c;
    c = std::move(b);
    CHECK_FALSE(b.valid());
    CHECK_THROWS_AS(b * 2, kiln::value_error);
    a = c;
    CHECK(values(a + 1) == std::vector<double>{2, 3, 4});
    kiln::variable v(kiln::ones({2}));
    kiln::variable w = std::move(v);
    CHECK(w.trainable());
    CHECK_FALSE(v.trainable());
    CHECK_THROWS_AS(v + 1, kiln::value_error);
}

TEST_CASE("kiln::run of a graph that folded to a constant gives the constant") {
    CHECK(kiln::run(2_c + 3_c)() == 5);
    const auto x = kiln::input<"x", float>();
    std::vector<float> xv{1, 2, 3};
    // A constant root beside a root of another shape: each gets its own shape.
    auto [five, y] = kiln::run(kiln::fetch(2_c + 3_c, x + 1_c), x = xv);
    CHECK(five.dimension() == 0);
    CHECK(five() == 5);
    check_all_close(std::vector<double>(y.begin(), y.end()), std::vector<double>{2, 3, 4}, 0);
    // x * 0 + 3 keeps x's shape.
    auto z = kiln::run(x * 0_c + 3_c, x = xv);
    check_all_close(std::vector<double>(z.begin(), z.end()), std::vector<double>{3, 3, 3}, 0);
    // Results print with std::cout once <xtensor/xio.hpp> is included.
    std::ostringstream os;
    os << kiln::run(x * 2_c, x = xv);
    CHECK(os.str() == "{ 2.,  4.,  6.}");
}

TEST_CASE("session::set refuses a name that no parameter has, naming the closest ones") {
    constexpr kiln::param<"l1/w", float, kiln::shape<2, 3>> w1{};
    constexpr kiln::param<"l1/b", float, kiln::shape<3>> b1{};
    constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, 2>> x{};
    const auto out = kiln::sum(kiln::matmul(x, w1) + b1);
    kiln::session s;
    CHECK_THROWS_WITH_AS(s.set("l1/W", kiln::zeros({2, 3})),
                         doctest::Contains("has seen no expression with parameters yet"), kiln::value_error);
    s.declare(out);
    CHECK(s.parameter_names().empty());  // declare creates nothing
    CHECK_THROWS_WITH_AS(s.set("l1/W", kiln::zeros({2, 3})),
                         "kiln: value_error in 'session::set': no parameter named 'l1/W'; closest known: 'l1/w', 'l1/b'",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(s.set("l1/w", kiln::zeros({2, 3}, kiln::float64)),
                         doctest::Contains("is declared float32 but the value's dtype is float64"), kiln::dtype_error);
    // A value that contradicts the parameter's static shape is refused when it is set, not at the next run.
    CHECK_THROWS_WITH_AS(s.set("l1/w", kiln::zeros({3, 2})),
                         "kiln: shape_error in 'session::set': parameter 'l1/w' is declared with shape (2, 3) but was fed shape (3, 2)",
                         kiln::shape_error);
    CHECK_THROWS_AS(s.set(b1, kiln::zeros({4})), kiln::shape_error);
    CHECK(s.parameter_names().empty());
    s.set("l1/w", kiln::ones({2, 3}));
    s.set(b1, kiln::full({3}, 0.5));
    CHECK_THROWS_WITH_AS(s.parameter("l1/bb"), doctest::Contains("closest known: 'l1/b'"), kiln::value_error);
    std::vector<float> xv{1, 2};
    CHECK(s.run(out, x = kiln::view(xv.data(), {1, 2}))() == doctest::Approx(3 * 3 + 1.5));
    // The parameter itself needs no declaration.
    kiln::session t;
    t.set(w1, kiln::ones({2, 3}));
    CHECK(values(t.parameter("l1/w")) == std::vector<double>(6, 1.0));
}

TEST_CASE("a tensor of another dtype fed to a session names the entry point and the input") {
    constexpr kiln::input<"x", float> x{};
    constexpr kiln::param<"p", float, kiln::shape<3>> p{};
    kiln::session s;
    const kiln::tensor d = kiln::ones({3}, kiln::float64);
    CHECK_THROWS_WITH_AS(s.run(kiln::sum(x + p), x = d),
                         "kiln: dtype_error in 'session::run': input 'x' is declared float32 but was fed a tensor of dtype float64 "
                         "(convert it with .to(kiln::float32))",
                         kiln::dtype_error);
    CHECK_THROWS_WITH_AS(kiln::run(x * 2_c, x = d), doctest::Contains("kiln: dtype_error in 'run': input 'x' is declared float32"),
                         kiln::dtype_error);
    const kiln::tensor f = kiln::ones({3});
    CHECK(s.run(kiln::sum(x + p), x = f)() == 3);
}

TEST_CASE("the eager training API: gradients of parameters(), apply_gradients and indexed layers") {
    kiln::generator g(3);
    kiln::nn::sequential model(kiln::nn::dense(2, 4, kiln::nn::relu, g), kiln::nn::dense(4, 1, kiln::nn::identity, g));
    CHECK(model.size() == 2);
    CHECK(model.layers().size() == 2);
    CHECK(model[0].parameters().size() == 2);
    CHECK(model.layer<kiln::nn::dense>(1).w.shape() == kiln::dims{4, 1});
    CHECK_THROWS_AS(model[2], kiln::value_error);
    const kiln::tensor xb = kiln::from_values<float>({1, 2, -1, 0.5, 0.3, -2}, {3, 2});
    const kiln::tensor yb = kiln::from_values<float>({1, 0, 2}, {3, 1});
    kiln::optim::adam opt(0.05);
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(model(xb), yb);
        const std::vector<kiln::tensor> grads = tape.gradient(loss, model.parameters());
        CHECK(grads.size() == 4);
        opt.apply_gradients(grads, model.parameters());
        (step == 0 ? first : last) = loss.item<double>();
    }
    CHECK(last < 0.5 * first);
    // The optimizer keeps the parameters it adopted.
    kiln::variable other(kiln::zeros({1}));
    CHECK_THROWS_AS(opt.apply_gradients({kiln::zeros({1})}, {&other}), kiln::value_error);
}

TEST_CASE("scalar tensors, element access and assignment into views") {
    kiln::tensor f = 2.5f, d = 2.5, i = 7, l = 7L, b = true;
    CHECK(f.dtype() == kiln::float32);
    CHECK(d.dtype() == kiln::float64);
    CHECK(i.dtype() == kiln::int32);
    CHECK(l.dtype() == kiln::int64);
    CHECK(b.dtype() == kiln::bool_);
    CHECK(f.dim() == 0);
    CHECK(f.item<double>() == 2.5);
    kiln::tensor m = kiln::arange(0, 6).reshape({2, 3}).to(kiln::float32);
    CHECK(values(m[1]) == std::vector<double>{3, 4, 5});
    CHECK(m[-1](0).item<int>() == 3);
    CHECK(m(1, 2).item<int>() == 5);
    CHECK(m(1, 2).dim() == 0);
    CHECK_THROWS_AS(m(0, 0, 0), kiln::value_error);
    CHECK_THROWS_AS(m[2], kiln::value_error);
    // Assigning to a view writes into the tensor it views.
    m(0, 1) = 10;
    m[1] = 0.5f;  // converted to m's dtype (float32 from arange)
    CHECK(values(m) == std::vector<double>{0, 10, 2, 0.5, 0.5, 0.5});
    m[0] = kiln::from_values<float>({7, 8, 9}, {3});
    m.slice(1, 0, 1) = kiln::from_values<float>({-1, -2}, {2, 1});
    CHECK(values(m) == std::vector<double>{-1, 8, 9, -2, 0.5, 0.5});
    CHECK_THROWS_AS(m[0] = kiln::zeros({2}), kiln::shape_error);
    kiln::tensor z = kiln::zeros({3});
    z.fill_(4);
    CHECK(values(z) == std::vector<double>{4, 4, 4});
    // A named tensor is rebound by assignment, as before.
    kiln::tensor r = m;
    r = kiln::ones({1});
    CHECK(m.numel() == 6);
}

TEST_CASE("rounding, sign and the floating tests, in eager and graph mode") {
    const kiln::tensor x = kiln::from_values<double>({-2.5, -1.5, -0.5, -0.0, 0.4, 0.5, 1.5, 2.5, 2.7}, {9});
    check_all_close(values(kiln::floor(x)), std::vector<double>{-3, -2, -1, -0.0, 0, 0, 1, 2, 2}, 0);
    check_all_close(values(kiln::ceil(x)), std::vector<double>{-2, -1, -0.0, -0.0, 1, 1, 2, 3, 3}, 0);
    check_all_close(values(kiln::trunc(x)), std::vector<double>{-2, -1, -0.0, -0.0, 0, 0, 1, 2, 2}, 0);
    check_all_close(values(kiln::round(x)), std::vector<double>{-2, -2, -0.0, -0.0, 0, 0, 2, 2, 3}, 0);  // halves to even
    check_all_close(values(kiln::sign(x)), std::vector<double>{-1, -1, -1, 0, 1, 1, 1, 1, 1}, 0);
    CHECK(!std::signbit(values(kiln::sign(x))[3]));  // sign(-0) is +0, as numpy.sign gives
    // Zero results keep the operand's sign on the vector path too (xsimd's SSE2 fallbacks lose it).
    CHECK(std::signbit(values(kiln::ceil(x))[2]));   // ceil(-0.5) = -0
    CHECK(std::signbit(values(kiln::trunc(x))[2]));  // trunc(-0.5) = -0
    CHECK(std::signbit(values(kiln::round(x))[2]));  // round(-0.5) = -0
    CHECK(std::signbit(values(kiln::floor(x))[3]));  // floor(-0) = -0
    CHECK(std::signbit(values(kiln::log1p(x))[3]));  // log1p(-0) = -0
    CHECK(std::signbit(values(kiln::expm1(x))[3]));  // expm1(-0) = -0
    const kiln::tensor xi = kiln::from_values<std::int32_t>({-3, 0, 4}, {3});
    CHECK(kiln::floor(xi).dtype() == kiln::int32);
    CHECK(values(kiln::round(xi)) == std::vector<double>{-3, 0, 4});
    CHECK(values(kiln::sign(xi)) == std::vector<double>{-1, 0, 1});
    const kiln::tensor s = kiln::from_values<double>({1, inf, -inf, qnan, 0}, {5}).to(kiln::float32);
    CHECK(kiln::isnan(s).dtype() == kiln::bool_);
    CHECK(values(kiln::isnan(s)) == std::vector<double>{0, 0, 0, 1, 0});
    CHECK(values(kiln::isinf(s)) == std::vector<double>{0, 1, 1, 0, 0});
    CHECK(values(kiln::isfinite(s)) == std::vector<double>{1, 0, 0, 0, 1});
    CHECK(values(kiln::isfinite(xi)) == std::vector<double>{1, 1, 1});
    // Graph mode runs the same structs.
    const auto in = kiln::input<"x", double>();
    std::vector<double> xv{-2.5, 0.5, 1.5, 2.7};
    auto r = kiln::run(kiln::round(in) + kiln::floor(in) * 10_c, in = xv);
    check_all_close(std::vector<double>(r.begin(), r.end()), std::vector<double>{-2 - 30, 0 + 0, 2 + 10, 3 + 20}, 0);
    auto nan_test = kiln::run(kiln::isnan(in / in), in = std::vector<double>{0, 1});
    CHECK(nan_test(0) == true);
    CHECK(nan_test(1) == false);
}

TEST_CASE("the new functions and activations against hand-computed values") {
    const kiln::tensor x = kiln::from_values<double>({-2, -0.5, 0, 0.3, 1.5}, {5});
    auto each = [&](auto f) {
        std::vector<double> out;
        for (double v : values(x)) out.push_back(f(v));
        return out;
    };
    check_all_close(values(kiln::tan(x)), each([](double v) { return std::tan(v); }), 1e-15);
    check_all_close(values(kiln::atan(x)), each([](double v) { return std::atan(v); }), 1e-15);
    check_all_close(values(kiln::log1p(x * 1e-10)), each([](double v) { return std::log1p(v * 1e-10); }), 1e-15);
    check_all_close(values(kiln::expm1(x * 1e-10)), each([](double v) { return v * 1e-10 + 0.5 * v * v * 1e-20; }),
                    1e-12);
    check_all_close(values(kiln::erf(x)), std::vector<double>{-0.99532226501895271, -0.52049987781304652, 0, 0.32862675945912739,
                                            0.96610514647531076}, 1e-13);
    const kiln::tensor u = kiln::from_values<double>({-1, -0.5, 0, 0.5, 1}, {5});
    check_all_close(values(kiln::asin(u)), std::vector<double>{-M_PI / 2, -M_PI / 6, 0, M_PI / 6, M_PI / 2}, 1e-15);
    check_all_close(values(kiln::acos(u)), std::vector<double>{M_PI, 2 * M_PI / 3, M_PI / 2, M_PI / 3, 0}, 1e-15);
    check_all_close(values(kiln::atan2(kiln::from_values<double>({1, 1, -1, 0}, {4}),
                                       kiln::from_values<double>({1, -1, -1, -1}, {4}))),
                    std::vector<double>{M_PI / 4, 3 * M_PI / 4, -3 * M_PI / 4, M_PI}, 1e-15);
    // softplus(x) = log(1 + e^x), without overflow at 1000 or lost digits at -40.
    check_all_close(values(kiln::softplus(kiln::from_values<double>({0, 1000, -40, 2}, {4}))),
                    std::vector<double>{std::log(2.0), 1000, 4.248354255291589e-18, std::log1p(std::exp(2.0))}, 1e-15);
    check_all_close(values(kiln::silu(x)), each([](double v) { return v / (1 + std::exp(-v)); }), 1e-15);
    check_all_close(values(kiln::gelu(x)), each([](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }),
                    1e-13);  // (xsimd's vector erf is within a few units in the last place of std::erf)
    check_all_close(values(kiln::elu(x)), std::vector<double>{std::expm1(-2.0), std::expm1(-0.5), 0, 0.3, 1.5}, 1e-15);
    check_all_close(values(kiln::leaky_relu(x)), std::vector<double>{-0.02, -0.005, 0, 0.3, 1.5}, 1e-15);
    check_all_close(values(kiln::leaky_relu(x, 0.2)), std::vector<double>{-0.4, -0.1, 0, 0.3, 1.5}, 1e-15);
    // clamp (and NumPy's name clip): NaN propagates; the bounds may be tensors or numbers.
    const kiln::tensor n = kiln::from_values<double>({-3, 0.2, 5, qnan}, {4});
    const auto c = values(kiln::clamp(n, -1.0, 1.0));
    check_all_close(std::vector<double>(c.begin(), c.begin() + 3), std::vector<double>{-1, 0.2, 1}, 0);
    CHECK(std::isnan(c[3]));
    check_all_close(values(kiln::clip(n.slice(0, 0, 3), kiln::from_values<double>({0, 0, 0}, {3}), 4.0)), std::vector<double>{0, 0.2, 4},
                    0);
    CHECK(kiln::clamp(kiln::from_values<std::int32_t>({-5, 3}, {2}), 0, 2).dtype() == kiln::int32);
    CHECK(kiln::clamp(kiln::from_values<std::int32_t>({-5, 3}, {2}), 0.5, 2).dtype() == kiln::float32);
    // Integer inputs of fractional functions become float32, as in PyTorch.
    CHECK(kiln::erf(kiln::from_values<std::int32_t>({1}, {1})).dtype() == kiln::float32);
    // Graph mode: the same ops in one fused loop.
    const auto in = kiln::input<"x", double>();
    std::vector<double> xv{-2, -0.5, 0, 0.3, 1.5};
    auto r = kiln::run(kiln::clamp(kiln::gelu(in) + kiln::softplus(in), -0.5_c, 1_c), in = xv);
    const std::vector<double> got(r.begin(), r.end());
    for (std::size_t i = 0; i < xv.size(); ++i) {
        const double v = xv[i];
        const double want = std::min(std::max(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))) + std::log1p(std::exp(v)),
                                              -0.5), 1.0);
        CHECK(got[i] == doctest::Approx(want).epsilon(1e-14));
    }
}

TEST_CASE("the new ops' gradient rules match central differences") {
    const double h = 1e-6;
    auto check_unary = [](auto op, double a) { kiln_test::check_unary_rule<decltype(op)>(a); };
    for (double a : {-1.3, -0.4, 0.35, 0.7, 2.1}) {
        check_unary(kiln::ops::tan{}, a);
        check_unary(kiln::ops::atan{}, a);
        check_unary(kiln::ops::expm1{}, a);
        check_unary(kiln::ops::erf{}, a);
        check_unary(kiln::ops::softplus{}, a);
        check_unary(kiln::ops::silu{}, a);
        check_unary(kiln::ops::gelu{}, a);
        check_unary(kiln::ops::elu{}, a);
    }
    for (double a : {-0.8, -0.3, 0.2, 0.6}) {
        check_unary(kiln::ops::asin{}, a);
        check_unary(kiln::ops::acos{}, a);
        check_unary(kiln::ops::log1p{}, a);
    }
    for (double a : {-1.0, 0.5, 2.0}) {
        const double b = 0.7;
        const auto g = kiln::ops::atan2::gradient(a, b, std::atan2(a, b), 1.0);
        CHECK(kiln_test::close(std::get<0>(g), (std::atan2(a + h, b) - std::atan2(a - h, b)) / (2 * h), 1e-6, 1e-9));
        CHECK(kiln_test::close(std::get<1>(g), (std::atan2(a, b + h) - std::atan2(a, b - h)) / (2 * h), 1e-6, 1e-9));
        const auto gl = kiln::ops::leaky_relu::gradient(a, 0.1, 0.0, 1.0);
        CHECK(std::get<0>(gl) == (a < 0 ? 0.1 : 1.0));
        CHECK(std::get<1>(gl) == (a < 0 ? a : 0.0));  // d/dslope: x where x < 0
    }
    // Through the tape and graph mode's grad: clamp sends the gradient to x inside the bounds, to a bound outside.
    kiln::variable x(kiln::from_values<double>({-3, 0.2, 5}, {3}));
    kiln::variable lo(kiln::from_values<double>({-1, -1, -1}, {3}));
    kiln::gradient_tape tape;
    const kiln::tensor y = kiln::sum(kiln::clamp(x, lo, 1.0) * kiln::from_values<double>({1, 2, 3}, {3}));
    const auto grads = tape.gradient(y, std::vector<kiln::tensor>{x, lo});
    CHECK(values(grads[0]) == std::vector<double>{0, 2, 0});
    CHECK(values(grads[1]) == std::vector<double>{1, 0, 0});
    const auto in = kiln::input<"x", double>();
    std::vector<double> xv{-3, 0.2, 5, 0.4};
    auto gx = kiln::run(kiln::grad(kiln::sum(kiln::clamp(in, -1_c, 1_c) + kiln::tan(in) + kiln::round(in)), in),
                        in = xv);
    for (std::size_t i = 0; i < xv.size(); ++i)
        CHECK(gx(i) == doctest::Approx((std::abs(xv[i]) <= 1 ? 1 : 0) + 1 + std::pow(std::tan(xv[i]), 2)));
    // Rounding ops pass no gradient.
    kiln::variable r(kiln::from_values<double>({0.3, 1.7}, {2}));
    kiln::gradient_tape t2;
    const kiln::tensor s = kiln::sum(kiln::floor(r) + r);
    CHECK(values(t2.gradient(s, r)) == std::vector<double>{1, 1});
}

TEST_CASE("printing wraps long rows, summarizes and takes a precision") {
    const kiln::tensor row = kiln::arange(0, 64).to(kiln::float32) / 7;
    const std::string text = kiln::to_string(row);
    std::size_t longest = 0, lines = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line); ++lines) longest = std::max(longest, line.size());
    CHECK(longest <= 75);  // the 64-value row was one 780-character line
    CHECK(lines > 5);
    // Every value shows its point and the points line up, as NumPy lays them out (6 significant digits for float32).
    CHECK(text.rfind("tensor([0.      , 0.142857, 0.285714, 0.428571, 0.571429, 0.714286,\n"
                     "        0.857143, 1.      , 1.14286 ,", 0) == 0);
    const kiln::print_options saved = kiln::get_printoptions();
    kiln::set_printoptions({.precision = 3, .threshold = 10, .edgeitems = 2, .linewidth = 200});
    CHECK(kiln::to_string(row) == "tensor([0.   , 0.143, ..., 8.86 , 9.   ], dtype=float32)");
    CHECK(kiln::to_string(kiln::from_values<double>({1.23456789}, {1})) == "tensor([1.23], dtype=float64)");
    kiln::set_printoptions({.precision = -1, .threshold = 1000, .edgeitems = 3, .linewidth = 30});
    const std::string narrow = kiln::to_string(kiln::arange(0, 12));
    CHECK(narrow == "tensor([ 0,  1,  2,  3,  4,\n"
                    "         5,  6,  7,  8,  9,\n"
                    "        10, 11], dtype=int64)");
    CHECK_THROWS_AS(kiln::set_printoptions({.linewidth = 3}), kiln::value_error);
    kiln::set_printoptions(saved);
    CHECK(kiln::to_string(kiln::from_values<float>({1.5f, 2}, {2})) == "tensor([1.5, 2. ], dtype=float32)");
}

TEST_CASE("the lazy loader reshuffles every epoch from its seed and reuses its batch storage") {
    const kiln::tensor x = kiln::arange(0, 10).reshape({5, 2}).to(kiln::float32);
    const kiln::tensor y = kiln::arange(0, 5);
    kiln::data::loader data(x, y, 2, {.shuffle = true, .drop_last = false, .seed = 11});
    CHECK(data.size() == 3);
    std::vector<std::vector<double>> epochs;
    const void* storage = nullptr;
    for (int e = 0; e < 3; ++e) {
        std::vector<double> seen;
        std::vector<std::ptrdiff_t> rows;
        for (const kiln::data::batch& b : data) {
            rows.push_back(b.x.shape()[0]);
            const auto xv = values(b.x), yv = values(b.y);
            for (std::size_t i = 0; i < yv.size(); ++i) {
                CHECK(xv[2 * i] == 2 * yv[i]);  // x's row k is (2k, 2k + 1): the rows of x and y stay paired
                CHECK(xv[2 * i + 1] == 2 * yv[i] + 1);
                seen.push_back(yv[i]);
            }
            if (rows.size() == 1) {
                if (storage) CHECK(b.x.raw_data() == storage);  // the same storage every epoch
                storage = b.x.raw_data();
            }
        }
        CHECK(rows == std::vector<std::ptrdiff_t>{2, 2, 1});  // the last partial batch is kept
        std::vector<double> sorted = seen;
        std::sort(sorted.begin(), sorted.end());
        CHECK(sorted == std::vector<double>{0, 1, 2, 3, 4});
        epochs.push_back(seen);
    }
    CHECK(data.epochs() == 3);
    CHECK((epochs[0] != epochs[1] || epochs[1] != epochs[2]));  // reshuffled
    // The same seed gives the same epochs.
    kiln::data::loader again(x, y, 2, {.seed = 11});
    std::vector<double> first;
    for (const auto& b : again)
        for (double v : values(b.y)) first.push_back(v);
    CHECK(first == epochs[0]);
    // drop_last drops the partial batch; no shuffle keeps the order.
    kiln::data::loader plain(x, y, 2, {.shuffle = false, .drop_last = true});
    CHECK(plain.size() == 2);
    std::vector<double> order;
    for (const auto& b : plain)
        for (double v : values(b.y)) order.push_back(v);
    CHECK(order == std::vector<double>{0, 1, 2, 3});
    CHECK_THROWS_AS(kiln::data::loader(x, kiln::arange(0, 4), 2), kiln::shape_error);
    CHECK_THROWS_AS(kiln::data::loader(x, y, 0), kiln::value_error);
    std::string rank0;
    try {
        kiln::data::loader(kiln::tensor(1.0f), kiln::tensor(2.0f), 1);
    } catch (const kiln::shape_error& e) {
        rank0 = e.what();
    }
    CHECK(rank0 == "kiln: shape_error in 'data::loader': x () and y () must have a first axis of rows (a rank-0 tensor has none)");
}

TEST_CASE("sharded batches: disjoint slices of the same global batches, the last one split or dropped alike") {
    // 11 rows in batches of 4 over 3 processes: batches of 4, 4 and 3 rows, sliced 1+1+2, 1+1+2 and 1+1+1.
    const kiln::tensor x = kiln::arange(0, 22).reshape({11, 2}).to(kiln::float32);
    const kiln::tensor y = kiln::arange(0, 11);
    std::vector<std::vector<double>> global;  // each batch's rows (y) from the unsharded loader
    kiln::data::loader whole(x, y, 4, {.seed = 3});
    for (const auto& b : whole) {
        global.push_back(values(b.y));
        CHECK(b.global_rows == b.y.shape()[0]);
    }
    REQUIRE(global.size() == 3);
    std::vector<std::vector<std::vector<double>>> parts(3);
    for (int k = 0; k < 3; ++k) {
        kiln::data::loader part(x, y, 4, {.seed = 3, .shard = {k, 3}});
        CHECK(part.size() == 3);
        for (const auto& b : part) {
            parts[static_cast<std::size_t>(k)].push_back(values(b.y));
            const auto xv = values(b.x), yv = values(b.y);
            for (std::size_t i = 0; i < yv.size(); ++i) CHECK(xv[2 * i] == 2 * yv[i]);  // x and y stay paired
        }
    }
    CHECK((global[0].size() == 4 && global[1].size() == 4 && global[2].size() == 3));
    for (std::size_t b = 0; b < 3; ++b) {
        std::vector<double> joined;  // the shards in process order are the global batch in order
        for (int k = 0; k < 3; ++k) {
            const auto& p = parts[static_cast<std::size_t>(k)][b];
            joined.insert(joined.end(), p.begin(), p.end());
        }
        CHECK(joined == global[b]);
    }
    CHECK(parts[2][0].size() == 2);
    CHECK(parts[0][2].size() == 1);
    // A last batch of fewer rows than processes is dropped on every process (11 rows in batches of 5 over 2: 1 left).
    kiln::data::loader tail(x, y, 5, {.seed = 3, .shard = {1, 2}});
    CHECK(tail.size() == 2);
    int count = 0;
    for (const auto& b : tail) {
        CHECK(b.global_rows == 5);
        CHECK(b.y.shape()[0] == 3);  // rows [2, 5) of 5
        ++count;
    }
    CHECK(count == 2);
    const auto listed = kiln::data::batches(x, y, 5, false, kiln::default_generator(), {0, 2});
    REQUIRE(listed.size() == 2);
    CHECK(values(listed[1].y) == std::vector<double>{5, 6});
    CHECK_THROWS_WITH_AS(kiln::data::loader(x, y, 4, {.shard = {3, 3}}), doctest::Contains("shard 3 of 3 does not exist"), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::data::loader(x, y, 2, {.shard = {0, 3}}),
                         doctest::Contains("a global batch of 2 rows cannot be split over 3 processes"), kiln::value_error);
}

TEST_CASE("graph-mode var and std, and the new activations as layer values") {
    const auto x = kiln::input<"x", double>();
    std::vector<double> xv{1, 2, 3, 5, 7, 9};
    const auto xs = kiln::view(xv.data(), {2, 3});
    auto v = kiln::run(kiln::var<1>(x), x = xs);
    CHECK(v(0) == doctest::Approx(1));
    CHECK(v(1) == doctest::Approx(4));
    CHECK(kiln::run(kiln::std(x), x = xs)() == doctest::Approx(std::sqrt(values(kiln::var(kiln::from_vector(xv))).at(0))));
    auto vk = kiln::run(kiln::var<1>(x, kiln::keep_dims), x = xs);
    CHECK(vk.shape()[1] == 1);
    // d var / dx = 2 (x - mean) / (N - 1)
    auto g = kiln::run(kiln::grad(kiln::sum(kiln::var<1>(x)), x), x = xs);
    check_all_close(std::vector<double>(g.begin(), g.end()), std::vector<double>{-1, 0, 1, -2, 0, 2}, 1e-12);
    // The eager and graph answers agree.
    check_all_close(values(kiln::std(kiln::from_vector(xv, {2, 3}), {0})),
                    [&] {
                        auto r = kiln::run(kiln::std<0>(x), x = xs);
                        return std::vector<double>(r.begin(), r.end());
                    }(),
                    1e-12);
    kiln::nn::dense layer(3, 2, kiln::nn::gelu);
    CHECK(layer(kiln::ones({4, 3})).shape() == kiln::dims{4, 2});
    CHECK(kiln::to_string(kiln::nn::silu(x)) == "silu(x)");
}
