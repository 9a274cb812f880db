// Every op of the vocabulary, in float32 and float64, run through graph mode against hand-computed values,
// including NaN, infinities and signed zeros; and every gradient rule against central differences.
#include <kiln/kiln.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "check.hpp"

using namespace kiln::literals;
using kiln_test::check_all_close;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double qnan = std::numeric_limits<double>::quiet_NaN();

template <class T>
std::vector<T> vec(std::initializer_list<double> v) {
    std::vector<T> out;
    for (double d : v) out.push_back(static_cast<T>(d));
    return out;
}

// The sizes every case runs at: empty, one element, fewer than a batch, a size that is no multiple of any SIMD
// width, and one large enough to be split over two threads (the threshold is lowered for the test).
constexpr std::size_t case_sizes[] = {0, 1, 3, 37, 5003};

struct threaded_sizes {
    int threads = kiln::num_threads();
    std::ptrdiff_t threshold = kiln::parallel_threshold();
    threaded_sizes() {
        kiln::set_num_threads(2);
        kiln::set_parallel_threshold(4096);
    }
    ~threaded_sizes() {
        kiln::set_num_threads(threads);
        kiln::set_parallel_threshold(threshold);
    }
};

template <class T>
std::vector<T> cycle(const std::vector<T>& v, std::size_t n) {
    std::vector<T> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = v[i % v.size()];
    return out;
}

// Runs f over the cases repeated to each size, so the SIMD body, the padded tail, the threaded split and the
// scalar path all see every case, and compares with the hand-computed values.
template <class T, class F>
void unary_case(F f, std::initializer_list<double> in, std::initializer_list<double> expected, double rtol) {
    const threaded_sizes threads;
    const auto x = kiln::input<"x", T>{};
    const auto xs = vec<T>(in);
    const auto es = vec<double>(expected);
    for (std::size_t n : case_sizes) {
        CAPTURE(n);
        check_all_close(kiln::run(f(x), x = cycle(xs, n)), cycle(es, n), rtol);
    }
}

template <class T, class F>
void binary_case(F f, std::initializer_list<double> a, std::initializer_list<double> b,
                 std::initializer_list<double> expected, double rtol) {
    const threaded_sizes threads;
    const auto x = kiln::input<"x", T>{};
    const auto y = kiln::input<"y", T>{};
    const auto as = vec<T>(a), bs = vec<T>(b);
    const auto es = vec<double>(expected);
    for (std::size_t n : case_sizes) {
        CAPTURE(n);
        check_all_close(kiln::run(f(x, y), x = cycle(as, n), y = cycle(bs, n)), cycle(es, n), rtol);
    }
}

}  // namespace

TEST_CASE_TEMPLATE("arithmetic ops", T, float, double) {
    const double r = std::numeric_limits<T>::epsilon();
    binary_case<T>([](auto x, auto y) { return x + y; }, {1, -2.5, inf, inf, qnan, 0.1}, {2, 2.5, 1, -inf, 1, 0.2},
                   {3, 0, inf, qnan, qnan, 0.1 + 0.2}, r);
    binary_case<T>([](auto x, auto y) { return x - y; }, {1, -2.5, inf, inf, qnan}, {2, 2.5, 1, inf, 1},
                   {-1, -5, inf, qnan, qnan}, r);
    binary_case<T>([](auto x, auto y) { return x * y; }, {3, -2, 0, inf, qnan}, {4, 0.5, inf, -2, 0},
                   {12, -1, qnan, -inf, qnan}, r);
    binary_case<T>([](auto x, auto y) { return x / y; }, {1, -3, 1, 0, inf}, {4, 2, 0, 0, inf}, {0.25, -1.5, inf, qnan, qnan},
                   r);
    unary_case<T>([](auto x) { return -x; }, {1, -2, 0, inf, qnan}, {-1, 2, -0.0, -inf, qnan}, 0);
    unary_case<T>([](auto x) { return kiln::neg(x); }, {3}, {-3}, 0);
    binary_case<T>([](auto x, auto y) { return kiln::add(x, y) * kiln::sub(x, y) / kiln::mul(x, kiln::div(x, y)); },
                   {3}, {2}, {5.0 * 1 / (3 * 1.5)}, 4 * r);
}

TEST_CASE_TEMPLATE("unary math ops", T, float, double) {
    const double r = 4 * std::numeric_limits<T>::epsilon();
    unary_case<T>([](auto x) { return kiln::abs(x); }, {-2, 3, -0.0, -inf, qnan}, {2, 3, 0, inf, qnan}, 0);
    unary_case<T>([](auto x) { return kiln::exp(x); }, {0, 1, -1, 2, inf, -inf, qnan},
                  {1, 2.718281828459045, 0.36787944117144233, 7.38905609893065, inf, 0, qnan}, r);
    unary_case<T>([](auto x) { return kiln::log(x); }, {1, 2.718281828459045, 0.5, 0, -1, inf, qnan},
                  {0, 1, -0.6931471805599453, -inf, qnan, inf, qnan}, r);
    unary_case<T>([](auto x) { return kiln::sqrt(x); }, {4, 2, 0, -1, inf, qnan}, {2, 1.4142135623730951, 0, qnan, inf, qnan},
                  r);
    unary_case<T>([](auto x) { return kiln::rsqrt(x); }, {4, 2, 0, -1, inf}, {0.5, 0.7071067811865476, inf, qnan, 0}, r);
    unary_case<T>([](auto x) { return kiln::square(x); }, {3, -1.5, inf, qnan}, {9, 2.25, inf, qnan}, 0);
    unary_case<T>([](auto x) { return kiln::sin(x); }, {0, 1.5707963267948966, 1, -0.5, inf, qnan},
                  {0, 1, 0.8414709848078965, -0.479425538604203, qnan, qnan}, r);
    unary_case<T>([](auto x) { return kiln::cos(x); }, {0, 3.141592653589793, 1, -0.5, inf, qnan},
                  {1, -1, 0.5403023058681398, 0.8775825618903728, qnan, qnan}, r);
    unary_case<T>([](auto x) { return kiln::tanh(x); }, {0, 1, -2, 30, -inf, qnan},
                  {0, 0.7615941559557649, -0.9640275800758169, 1, -1, qnan}, r);
    unary_case<T>([](auto x) { return kiln::sigmoid(x); }, {0, 2, -2, 800, -800, qnan},
                  {0.5, 0.8807970779778823, 0.11920292202211755, 1, 0, qnan}, r);
    unary_case<T>([](auto x) { return kiln::relu(x); }, {-1, 2, 0, inf, -inf, qnan}, {0, 2, 0, inf, 0, qnan}, 0);
}

TEST_CASE_TEMPLATE("binary math ops", T, float, double) {
    const double r = 4 * std::numeric_limits<T>::epsilon();
    binary_case<T>([](auto x, auto y) { return kiln::pow(x, y); }, {2, 9, 2, 0, -8, qnan, 1},
                   {10, 0.5, -1, 0, 2, 0, qnan}, {1024, 3, 0.5, 1, 64, 1, 1}, r);
    binary_case<T>([](auto x, auto y) { return kiln::maximum(x, y); }, {1, 5, -inf, qnan, 2}, {2, 3, 0, 1, qnan},
                   {2, 5, 0, qnan, qnan}, 0);
    binary_case<T>([](auto x, auto y) { return kiln::minimum(x, y); }, {1, 5, -inf, qnan, 2}, {2, 3, 0, 1, qnan},
                   {1, 3, -inf, qnan, qnan}, 0);
}

TEST_CASE_TEMPLATE("comparisons give bool and where selects", T, float, double) {
    const auto x = kiln::input<"x", T>{};
    const auto y = kiln::input<"y", T>{};
    const std::vector<T> a = vec<T>({1, 2, 3, qnan, inf}), b = vec<T>({2, 2, 1, qnan, inf});
    auto lt = kiln::run(x < y, x = a, y = b);
    static_assert(std::is_same_v<typename decltype(lt)::value_type, bool>);
    check_all_close(lt, std::vector<double>{1, 0, 0, 0, 0}, 0);
    check_all_close(kiln::run(x <= y, x = a, y = b), std::vector<double>{1, 1, 0, 0, 1}, 0);
    check_all_close(kiln::run(x > y, x = a, y = b), std::vector<double>{0, 0, 1, 0, 0}, 0);
    check_all_close(kiln::run(x >= y, x = a, y = b), std::vector<double>{0, 1, 1, 0, 1}, 0);
    check_all_close(kiln::run(kiln::less(x, y), x = a, y = b), std::vector<double>{1, 0, 0, 0, 0}, 0);
    check_all_close(kiln::run(kiln::less_equal(x, y), x = a, y = b), std::vector<double>{1, 1, 0, 0, 1}, 0);
    check_all_close(kiln::run(kiln::greater(x, y), x = a, y = b), std::vector<double>{0, 0, 1, 0, 0}, 0);
    check_all_close(kiln::run(kiln::greater_equal(x, y), x = a, y = b), std::vector<double>{0, 1, 1, 0, 1}, 0);
    check_all_close(kiln::run(kiln::equal(x, y), x = a, y = b), std::vector<double>{0, 1, 0, 0, 1}, 0);
    check_all_close(kiln::run(kiln::not_equal(x, y), x = a, y = b), std::vector<double>{1, 0, 1, 1, 0}, 0);
    check_all_close(kiln::run(kiln::where(x < y, x, y * 10_c), x = a, y = b), std::vector<double>{1, 20, 10, qnan, inf}, 0);

    // A bool input as the condition (the element-by-element path).
    const auto m = kiln::input<"m", bool>{};
    const std::vector<T> big_a(100, T(1)), big_b(100, T(-1));
    std::vector<std::uint8_t> bytes(100);
    xt::xarray<bool> mask = xt::zeros<bool>({100});
    for (int i = 0; i < 100; i += 3) mask(i) = true;
    auto w = kiln::run(kiln::where(m, x, y), m = mask, x = big_a, y = big_b);
    for (int i = 0; i < 100; ++i) CHECK(w(i) == (i % 3 == 0 ? 1 : -1));
}

TEST_CASE("cast converts element types") {
    const auto x = kiln::input<"x", double>{};
    const std::vector<double> a{1.5, -2.7, 1e10};
    auto f = kiln::run(kiln::cast<float>(x), x = a);
    static_assert(std::is_same_v<typename decltype(f)::value_type, float>);
    check_all_close(f, std::vector<double>{1.5, -2.7f, 1e10f}, 0);
    auto i = kiln::run(kiln::cast<std::int32_t>(x * 2_c), x = std::vector<double>{1.5, -2.7});
    check_all_close(i, std::vector<double>{3, -5}, 0);
    static_assert(std::is_same_v<decltype(kiln::cast<double>(x)), std::remove_const_t<decltype(x)>>,
                  "a cast to the own type is the identity");
}

TEST_CASE("integer graphs run element by element, and division by zero does not trap") {
    const auto x = kiln::input<"x", std::int32_t>{};
    const auto y = kiln::input<"y", std::int32_t>{};
    const std::vector<std::int32_t> a{7, -7, 5, std::numeric_limits<std::int32_t>::min(), 3},
        b{2, 2, 0, -1, -3};
    check_all_close(kiln::run(x / y, x = a, y = b),
                    std::vector<double>{3, -3, 0, static_cast<double>(std::numeric_limits<std::int32_t>::min()), -1}, 0);
    const std::vector<std::int32_t> c{7, -7, 5, 4, 3};
    check_all_close(kiln::run(x * y + x - kiln::abs(y), x = c, y = b),
                    std::vector<double>{7 * 2 + 7 - 2, -14 - 7 - 2, 5, -4 + 4 - 1, -9 + 3 - 3}, 0);
}

// Gradient rules are generic code over the vocabulary; on plain numbers they evaluate at once, which lets each rule
// be checked against a central difference of its own kernel.
TEST_CASE("every gradient rule matches central differences in float64") {
    const double h = 1e-6;
    auto check_unary = [](auto op, double a) { kiln_test::check_unary_rule<decltype(op)>(a); };
    auto check_binary = [&](auto op, double a, double b) {
        using Op = decltype(op);
        const double y = Op::apply(a, b);
        const auto g = Op::gradient(a, b, y, 1.0);
        const double fa = (Op::apply(a + h, b) - Op::apply(a - h, b)) / (2 * h);
        const double fb = (Op::apply(a, b + h) - Op::apply(a, b - h)) / (2 * h);
        INFO(Op::name << " at " << a << ", " << b);
        CHECK(kiln_test::close(std::get<0>(g), fa, 1e-6, 1e-9));
        CHECK(kiln_test::close(std::get<1>(g), fb, 1e-6, 1e-9));
    };
    for (double a : {-1.3, 0.7, 2.1}) {
        check_unary(kiln::ops::neg{}, a);
        check_unary(kiln::ops::abs{}, a);
        check_unary(kiln::ops::exp{}, a);
        check_unary(kiln::ops::square{}, a);
        check_unary(kiln::ops::sin{}, a);
        check_unary(kiln::ops::cos{}, a);
        check_unary(kiln::ops::tanh{}, a);
        check_unary(kiln::ops::sigmoid{}, a);
        check_unary(kiln::ops::relu{}, a);
        check_binary(kiln::ops::add{}, a, 0.4);
        check_binary(kiln::ops::sub{}, a, 0.4);
        check_binary(kiln::ops::mul{}, a, 0.4);
        check_binary(kiln::ops::div{}, a, 0.4);
        check_binary(kiln::ops::maximum{}, a, 0.4);
        check_binary(kiln::ops::minimum{}, a, 0.4);
    }
    for (double a : {0.3, 1.7, 5.0}) {
        check_unary(kiln::ops::log{}, a);
        check_unary(kiln::ops::sqrt{}, a);
        check_unary(kiln::ops::rsqrt{}, a);
        check_binary(kiln::ops::pow{}, a, 1.3);
    }
    // where: the condition gets no gradient, the branches get g where chosen.
    const auto gw = kiln::ops::where::gradient(true, 2.0, 3.0, 2.0, 5.0);
    static_assert(std::is_same_v<std::tuple_element_t<0, std::remove_const_t<decltype(gw)>>, kiln::detail::no_grad>);
    CHECK(std::get<1>(gw) == 5.0);
    CHECK(std::get<2>(gw) == 0.0);
    const auto gl = kiln::ops::less::gradient(1.0, 2.0, true, 1.0);
    static_assert(std::is_same_v<std::tuple_element_t<0, std::remove_const_t<decltype(gl)>>, kiln::detail::no_grad>);
    const auto gc = kiln::ops::cast<float>::gradient(1.0, 1.0f, 2.5f);
    CHECK(std::get<0>(gc) == 2.5);
    static_assert(std::is_same_v<std::tuple_element_t<0, std::remove_const_t<decltype(gc)>>, double>);
}

TEST_CASE("exp, expm1, tanh, erf and the activations built on them at huge float64 magnitudes, infinities and NaN") {
    // xsimd's vector versions convert each lane to a 64-bit integer, which for float64 without AVX-512 was a
    // scalar cast of an out-of-range value or NaN (undefined behaviour; erf(1e300) and gelu(1e300) came out NaN).
    // Lanes are bounded where the functions saturate first: every value is the C library's.
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> v{1e300, -1e300, 1e28, -1e28, 800, -800, 709.9, 710.1, -745.5, -746.1, 41, -41, 11, -11,
                                inf, -inf, nan, 0.5, -0.5, 0.0, -0.0, 4503599627370497.0, -4503599627370497.5, 1e20};
    const kiln::tensor x = kiln::from_vector(v, {static_cast<std::ptrdiff_t>(v.size())});
    auto check = [&](const char* name, const kiln::tensor& r, auto f) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double got = r.at<double>({static_cast<std::ptrdiff_t>(i)}), want = f(v[i]);
            INFO(std::string(name) << "(" << v[i] << ") = " << got << ", the C library's " << want);
            if (std::isnan(want)) CHECK(std::isnan(got));
            else if (std::isinf(want) || want == 0) CHECK(got == want);
            else CHECK(got == doctest::Approx(want).epsilon(1e-12));
        }
    };
    check("exp", kiln::exp(x), [](double a) { return std::exp(a); });
    check("expm1", kiln::expm1(x), [](double a) { return std::expm1(a); });
    check("tanh", kiln::tanh(x), [](double a) { return std::tanh(a); });
    check("erf", kiln::erf(x), [](double a) { return std::erf(a); });
    check("trunc", kiln::trunc(x), [](double a) { return std::trunc(a); });
    check("sigmoid", kiln::sigmoid(x), [](double a) { return 1 / (1 + std::exp(-a)); });
    check("elu", kiln::elu(x), [](double a) { return a > 0 ? a : std::expm1(a); });
    check("gelu", kiln::gelu(x), [](double a) { return 0.5 * a * std::erfc(-a * 0.70710678118654752440); });
    check("softplus", kiln::softplus(x), [](double a) { return std::max(a, 0.0) + std::log1p(std::exp(-std::abs(a))); });
}

TEST_CASE("signed zeros as NumPy has them, gelu's far negative tail, float32 products accumulated in double") {
    const double nz = -0.0;
    auto bits = [](const kiln::tensor& t) {
        std::vector<bool> neg;
        const kiln::tensor c = t.to(kiln::float64).contiguous();
        for (std::ptrdiff_t i = 0; i < c.numel(); ++i) neg.push_back(std::signbit(c.data<double>()[i]));
        return neg;
    };
    for (kiln::dtype d : {kiln::float32, kiln::float64}) {
        CAPTURE(d);
        // sign(-0) and relu(-0) are +0 (numpy.sign, numpy.maximum(x, 0)); NaN stays NaN; elu(-0) is expm1(-0) = -0.
        // 37 elements: the vector body and the scalar tail.
        std::vector<double> v(37, nz);
        v[1] = std::numeric_limits<double>::quiet_NaN();
        const kiln::tensor x = kiln::from_vector(v, {37}).to(d);
        const kiln::tensor s = kiln::sign(x), r = kiln::relu(x), e = kiln::elu(x);
        for (std::ptrdiff_t i = 0; i < 37; ++i) {
            CAPTURE(i);
            const double sv = s.to(kiln::float64).at<double>({i}), rv = r.to(kiln::float64).at<double>({i}),
                         ev = e.to(kiln::float64).at<double>({i});
            if (i == 1) {
                CHECK(std::isnan(sv));
                CHECK(std::isnan(rv));
                CHECK(std::isnan(ev));
            } else {
                CHECK((sv == 0 && !std::signbit(sv)));
                CHECK((rv == 0 && !std::signbit(rv)));
                CHECK((ev == 0 && std::signbit(ev)));
            }
        }
        // A sum starts from +0, as NumPy's do, so a sum of negative zeros is +0, along rows, columns and
        // everything; but cumsum's first running sum is the first element itself (numpy.cumsum keeps -0).
        const kiln::tensor z = kiln::from_vector(std::vector<double>(12, nz), {3, 4}).to(d);
        CHECK(bits(kiln::sum(z)) == std::vector<bool>{false});
        CHECK(bits(kiln::sum(z, {1})) == std::vector<bool>(3, false));
        CHECK(bits(kiln::sum(z, {0})) == std::vector<bool>(4, false));
        CHECK(bits(kiln::mean(z, {1})) == std::vector<bool>(3, false));
        CHECK(bits(kiln::cumsum(z, 1)) == std::vector<bool>(12, true));
        const kiln::tensor m = kiln::from_values<double>({nz, 0.0, nz, 2.0, -2.0}, {5}).to(d);
        CHECK(bits(kiln::cumsum(m, 0)) == std::vector<bool>{true, false, false, false, false});
    }
    // gelu(x) = x Phi(x) keeps its relative accuracy far into the negative tail: 1 + erf(x / sqrt 2) cancels to 0
    // in float32 below about -4 (gelu(-6) came out 0), erfc does not. Values from erfc in double.
    const std::vector<double> xs{-4.0, -6.0, -9.0, -12.0, -14.0};
    const kiln::tensor g32 = kiln::gelu(kiln::from_vector(xs, {5}).to(kiln::float32));
    for (std::ptrdiff_t i = 0; i < 5; ++i) {
        const double a = xs[static_cast<std::size_t>(i)], want = 0.5 * a * std::erfc(-a / std::sqrt(2.0));
        CAPTURE(a);
        CHECK(want < 0);
        CHECK(static_cast<double>(g32.at<float>({i})) == doctest::Approx(want).epsilon(1e-5));
    }
    // A float32 product accumulates in double: 1e30 * 1e30 * 1e-30 * 1e-30 is 1 (float32 steps would give inf, and
    // inf * 1e-30 * 1e-30 stays inf), and 1e-30 * 1e-30 * 1e30 * 1e30 is 1 (float32 steps would give 0).
    const kiln::tensor p = kiln::from_values<float>({1e30f, 1e30f, 1e-30f, 1e-30f}, {4});
    CHECK(kiln::prod(p).item<float>() == doctest::Approx(1.0f).epsilon(1e-6));
    CHECK(kiln::prod(kiln::flip(p, {0})).item<float>() == doctest::Approx(1.0f).epsilon(1e-6));
}
