// Compile-time gradients of every op of the vocabulary and of deep chains, against central differences and the eager
// tape. (Split from structural.cpp to keep each translation unit quick to build.)
#include <kiln/kiln.hpp>

#include <cmath>
#include <vector>

#include "check.hpp"
#include "graph_check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::check_all_close;

using kiln_test::check_gradient;
using kiln_test::flat;
using kiln_test::W;
using kiln_test::X;
using kiln_test::w;
using kiln_test::x;

TEST_CASE("gradient of every differentiable op against central differences (float64)") {
    const std::vector<double> pos{0.5, 0.9, 1.3, 1.7, 2.2, 2.9};  // inside every op's domain
    const std::vector<double> mixed{-1.5, -0.4, 0.3, 0.8, -2.1, 1.2};
    const kiln::dims s{2, 3};
    check_gradient(kiln::sum(-x * x), mixed, s);
    check_gradient(kiln::sum(kiln::abs(x) * x), mixed, s);
    check_gradient(kiln::sum(kiln::exp(x)), mixed, s);
    check_gradient(kiln::sum(kiln::log(x)), pos, s);
    check_gradient(kiln::sum(kiln::sqrt(x)), pos, s);
    check_gradient(kiln::sum(kiln::rsqrt(x)), pos, s);
    check_gradient(kiln::sum(kiln::square(x)), mixed, s);
    check_gradient(kiln::sum(kiln::sin(x) * kiln::cos(x)), mixed, s);
    check_gradient(kiln::sum(kiln::tanh(x)), mixed, s);
    check_gradient(kiln::sum(kiln::sigmoid(x)), mixed, s);
    check_gradient(kiln::sum(kiln::relu(x) * x), mixed, s);
    check_gradient(kiln::sum(kiln::pow(x, 3_c)), pos, s);
    check_gradient(kiln::sum(kiln::pow(2_c, x)), mixed, s);
    check_gradient(kiln::sum(x / (x * x + 1_c)), mixed, s);
    check_gradient(kiln::sum(kiln::maximum(x, 0.5_c) + kiln::minimum(x, 0.5_c) * x), mixed, s);
    check_gradient(kiln::sum(kiln::where(x > 0_c, x * x, 3_c * x)), mixed, s);
    check_gradient(kiln::sum(kiln::cast<double>(x) * x), mixed, s);
}

namespace {
// h_{k+1} = tanh(h_k @ w): a deep chain whose gradient uses every h_k twice (the tanh rule and the product rule).
template <int Depth, class H>
constexpr auto deep(const H& h) {
    if constexpr (Depth == 0) return h;
    else return deep<Depth - 1>(kiln::tanh(kiln::matmul(h, w)));
}
template <int Depth>
constexpr std::size_t nodes_with_gradient() {
    constexpr auto l = kiln::sum(deep<Depth>(x));
    return kiln::detail::unique_nodes_t<decltype(l), decltype(kiln::grad(l, w))>::size;
}
}  // namespace

TEST_CASE("a gradient's size grows linearly with depth, and its run shares the forward nodes") {
    // The loss and its gradient together: the same number of unique nodes for every added layer.
    constexpr std::size_t n4 = nodes_with_gradient<4>(), n8 = nodes_with_gradient<8>(), n16 = nodes_with_gradient<16>();
    static_assert(n8 - n4 == 4 * (n8 - n4) / 4 && n16 - n8 == 2 * (n8 - n4));
    static_assert(n16 <= 11 * 16);
    // The loss and its gradient in one run agree with central differences.
    std::vector<double> wv{0.3, -0.5, 0.8, 0.2};
    check_gradient(kiln::sum(deep<5>(x)), std::vector<double>{0.1, -0.2, 0.4, 0.7}, kiln::dims{2, 2},
                   w = kiln::view(wv.data(), {2, 2}));
}

namespace {
// h_{k+1} = h_k + tanh(h_k): each layer uses its input twice, so the expression written out as a tree has 2^depth
// leaves. Its type, its size and its compile time must follow the unique nodes instead.
template <int Depth, class H>
constexpr auto residual(const H& h) {
    if constexpr (Depth == 0) return h;
    else return residual<Depth - 1>(h + kiln::tanh(h));
}
}  // namespace

TEST_CASE("a residual chain 24 layers deep: empty nodes, linear plans, values and gradient") {
    constexpr auto h = residual<24>(x);
    static_assert(std::is_empty_v<decltype(h)>);  // empty children are not stored: no 2^24-byte expression
    static_assert(kiln::detail::unique_nodes_t<std::remove_const_t<decltype(h)>>::size == 1 + 2 * 24);
    const std::vector<double> in{-1.2, -0.3, 0.0, 0.4, 0.9, 1.7, -2.0};
    std::vector<double> want(in.size()), dwant(in.size());
    for (std::size_t i = 0; i < in.size(); ++i) {
        double v = in[i], d = 1;
        for (int k = 0; k < 24; ++k) {
            const double t = std::tanh(v);
            d *= 2 - t * t;  // d(v + tanh v)/dv
            v += t;
        }
        want[i] = v;
        dwant[i] = d;
    }
    const auto xv = kiln::view(in.data(), {static_cast<std::ptrdiff_t>(in.size())});
    check_all_close(kiln::run(h, x = xv), want, 1e-12);
    std::vector<double> out(in.size());
    kiln::run_into(out, h, x = in);
    check_all_close(out, want, 1e-12);
    // The gradient of sum(h) by x, and both in one fetch.
    const auto g = kiln::grad(kiln::sum(h), x);
    check_all_close(kiln::run(g, x = xv), dwant, 1e-10);
    const auto [value, slope] = kiln::run(kiln::fetch(h, g), x = xv);
    check_all_close(value, want, 1e-12);
    check_all_close(slope, dwant, 1e-10);
    // Shapes that broadcast go through shape inference, once per unique node: (3, 1) * (2,) gives (3, 2).
    const std::vector<double> col{-0.3, 0.4, 1.7}, row{0.5, -2.0};
    const auto y = kiln::input<"y", double>{};
    const auto r = kiln::run(h * y, x = kiln::view(col.data(), {3, 1}), y = row);
    REQUIRE(r.dimension() == 2);
    CHECK(r.shape()[0] == 3);
    CHECK(r.shape()[1] == 2);
    for (std::size_t i = 0; i < 3; ++i)
        for (std::size_t j = 0; j < 2; ++j) CHECK(r(i, j) == doctest::Approx(want[1 + 2 * i] * row[j]).epsilon(1e-12));
    CHECK_THROWS_WITH_AS((void)kiln::run(h * y, x = in, y = row),
                         "kiln: shape_error in 'mul': cannot broadcast shapes (7,) and (2,)", kiln::shape_error);
}

TEST_CASE("graph gradients agree with the eager tape") {
    const std::vector<double> xv{0.3, -1.2, 0.7, 2.0, -0.5, 0.1, 1.1, -0.8};
    std::vector<double> wv{0.5, -0.3, 0.8, 0.1, -0.6, 0.4, 0.9, 0.2, -0.7, 0.3, 0.6, -0.1};
    auto f = [](auto a, auto v) { return kiln::relu(kiln::matmul(a, v)) * kiln::sigmoid(kiln::matmul(a, v)); };
    auto graph = kiln::run(kiln::grad(kiln::sum(f(x, w)), w), x = kiln::view(xv.data(), {2, 4}),
                           w = kiln::view(wv.data(), {4, 3}));
    kiln::variable a(kiln::from_vector(xv, {2, 4})), v(kiln::from_vector(wv, {4, 3}));
    kiln::gradient_tape tape;
    const auto y = kiln::sum(f(kiln::tensor(a), kiln::tensor(v)));
    const auto eager = tape.gradient(y, std::vector<kiln::tensor>{v})[0];
    check_all_close(flat(graph), kiln_test::values(eager), 1e-12);

    // The same generic lambdas over the vocabulary, differentiated in both modes.
    std::vector<double> pv{0.6, 1.1, 1.9, 0.8, 1.4, 2.3};
    auto compare = [&](auto fn) {
        const auto g = kiln::run(kiln::grad(kiln::sum(fn(x)), x), x = kiln::view(pv.data(), {2, 3}));
        kiln::variable t(kiln::from_vector(pv, {2, 3}));
        kiln::gradient_tape tp;
        const auto e = tp.gradient(kiln::sum(fn(kiln::tensor(t))), std::vector<kiln::tensor>{t})[0];
        std::vector<double> got = flat(g);
        if (got.size() == 1) got.assign(pv.size(), got[0]);
        check_all_close(got, kiln_test::values(e), 1e-12);
    };
    compare([](auto a) { return kiln::exp(a) * kiln::log(a); });
    compare([](auto a) { return kiln::sqrt(a) / kiln::square(a); });
    compare([](auto a) { return kiln::sigmoid(a) - kiln::tanh(a) * kiln::rsqrt(a); });
    compare([](auto a) { return kiln::pow(a, a) + kiln::abs(-a); });
    compare([](auto a) { return kiln::maximum(a, 1.2_c) * kiln::minimum(a, 0.9_c) + kiln::sin(a) * kiln::cos(a); });
    compare([](auto a) { return kiln::where(a > 1_c, kiln::relu(a - 1.5_c), -a); });
}

