// Eager gradients: every differentiable op against central differences in float64, compositions with
// broadcasting, reductions, views and matmul; persistent and nested tapes, variables and stop_gradient.
#include <kiln/kiln.hpp>

#include <functional>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::f64;
using kiln_test::values;

namespace {

// Central differences of sum(f(x)) with respect to every element of x (float64).
std::vector<double> numeric_gradient(const std::function<kiln::tensor(const kiln::tensor&)>& f, const kiln::tensor& x) {
    const double h = 1e-6;
    std::vector<double> out;
    for (std::ptrdiff_t i = 0; i < x.numel(); ++i) {
        kiln::tensor xp = x.clone(), xm = x.clone();
        xp.data<double>()[i] += h;
        xm.data<double>()[i] -= h;
        out.push_back((kiln::sum(f(xp)).item<double>() - kiln::sum(f(xm)).item<double>()) / (2 * h));
    }
    return out;
}

void check_gradient(const std::function<kiln::tensor(const kiln::tensor&)>& f, const kiln::tensor& x) {
    kiln::gradient_tape tape;
    tape.watch(x);
    const kiln::tensor y = f(x);
    const kiln::tensor g = tape.gradient(y, x);
    CHECK(g.shape() == x.shape());
    kiln_test::check_all_close(values(g), numeric_gradient(f, x), 1e-6, 1e-8);
}

}  // namespace

TEST_CASE("every differentiable elementwise op matches central differences") {
    const auto x = f64({-1.3, -0.4, 0.7, 1.9, 2.6, -2.2}, {2, 3});
    const auto pos = f64({0.3, 0.9, 1.7, 2.4, 3.1, 0.6}, {2, 3});
    const auto other = f64({0.5, -1.5, 2.0, 0.25, -0.75, 1.25}, {2, 3});
    check_gradient([](const kiln::tensor& a) { return -a; }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::abs(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::exp(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::log(a); }, pos);
    check_gradient([](const kiln::tensor& a) { return kiln::sqrt(a); }, pos);
    check_gradient([](const kiln::tensor& a) { return kiln::rsqrt(a); }, pos);
    check_gradient([](const kiln::tensor& a) { return kiln::square(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::sin(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::cos(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::tanh(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::sigmoid(a); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::relu(a); }, x);
    check_gradient([&](const kiln::tensor& a) { return a + other; }, x);
    check_gradient([&](const kiln::tensor& a) { return other - a; }, x);
    check_gradient([&](const kiln::tensor& a) { return a * other; }, x);
    check_gradient([&](const kiln::tensor& a) { return other / a; }, pos);
    check_gradient([&](const kiln::tensor& a) { return a / other; }, x);
    check_gradient([&](const kiln::tensor& a) { return kiln::pow(a, other); }, pos);
    check_gradient([&](const kiln::tensor& a) { return kiln::pow(other * other + 1_c, a); }, x);
    check_gradient([&](const kiln::tensor& a) { return kiln::maximum(a, other); }, x);
    check_gradient([&](const kiln::tensor& a) { return kiln::minimum(other, a); }, x);
    check_gradient([&](const kiln::tensor& a) { return kiln::where(other > 0_c, a * 3, -a); }, x);
    check_gradient([](const kiln::tensor& a) { return 2.5 * a - 1 + a / 4; }, x);
}

TEST_CASE("compositions with broadcasting, reductions, views and matmul") {
    const auto x = f64({0.2, -0.5, 1.1, 0.7, -1.4, 0.3}, {2, 3});
    const auto row = f64({1.5, -0.5, 2.0}, {3});
    const auto col = f64({0.5, -2.0}, {2, 1});
    // Broadcast operands: the gradient is summed back to each operand's shape.
    check_gradient([&](const kiln::tensor& r) { return kiln::tanh(x * r + col); }, row);
    check_gradient([&](const kiln::tensor& c) { return kiln::sigmoid(x - c) * row; }, col);
    // Reductions.
    check_gradient([](const kiln::tensor& a) { return kiln::sum(a * a, {1}); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::mean(kiln::exp(a), {0}, true) * 3; }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::max(a, {1}); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::min(a, {0}); }, x);
    check_gradient([](const kiln::tensor& a) { return kiln::prod(a + 3_c, {1}); }, x);
    // Views.
    check_gradient([](const kiln::tensor& a) { return kiln::square(a.transpose(0, 1).reshape({-1})); }, x);
    check_gradient([](const kiln::tensor& a) { return a.slice(1, 0, 3, 2) * 2 + a.select(1, 1).unsqueeze(1); }, x);
    check_gradient([](const kiln::tensor& a) { return a.permute({1, 0}).broadcast_to({4, 3, 2}) * 0.5; }, x);
    {
        // Through dtype conversions (float32 is too coarse for differences: compare with exp itself).
        kiln::gradient_tape tape;
        tape.watch(x);
        const auto g = tape.gradient(kiln::exp(x.to(kiln::float32)).to(kiln::float64), x);
        CHECK(g.dtype() == kiln::float64);
        kiln_test::check_all_close(values(g), values(kiln::exp(x)), 1e-6);
    }
    // matmul: matrices, vectors, batches.
    const auto w = f64({0.3, -0.2, 0.8, 1.1, -0.6, 0.4}, {3, 2});
    check_gradient([&](const kiln::tensor& a) { return kiln::matmul(a, w); }, x);
    check_gradient([&](const kiln::tensor& b) { return kiln::relu(kiln::matmul(x, b)); }, w);
    check_gradient([&](const kiln::tensor& v) { return kiln::matmul(x, v); }, row);
    check_gradient([&](const kiln::tensor& v) { return kiln::matmul(v, w); }, row);
    check_gradient([&](const kiln::tensor& v) { return kiln::matmul(v, v); }, row);
    const auto batch = f64({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2}, {2, 2, 3});
    check_gradient([&](const kiln::tensor& b) { return kiln::matmul(batch, b); }, w);
    check_gradient([&](const kiln::tensor& a) { return kiln::matmul(a, w); }, batch);
    // concat and stack: each part gets its slice of the gradient, including a part used twice.
    const auto k = f64({1.0, -2.0, 0.5, 3.0, -1.5, 2.5}, {2, 3});
    const auto weights = f64({0.5, 1.0, -1.0, 2.0, 0.25, -0.5, 1.5, 3.0, -2.0}, {9});
    check_gradient([&](const kiln::tensor& a) { return kiln::concat({a, k * 2, kiln::exp(a)}, 1) * weights; }, x);
    check_gradient([&](const kiln::tensor& a) { return kiln::square(kiln::concat({k, a}, 0)); }, x);
    const auto kk = f64({0.5, -1.0, 2.0, 1.5, 0.25, -0.75, 1.0, 3.0, -2.0}, {3, 3});
    check_gradient([&](const kiln::tensor& r) { return kiln::stack({r, r * r, k.select(0, 1)}, 1) * kk; }, row);
    check_gradient([&](const kiln::tensor& a) { return kiln::sum(kiln::stack({a, k}, 0) * kiln::stack({k, a * a}, 0), {0}); }, x);
    {
        // A float32 part joined with float64 ones: its gradient comes back in float32; integer parts get none.
        kiln::gradient_tape tape;
        const kiln::tensor p = kiln::from_values<float>({1, 2}, {2});
        tape.watch(p);
        const kiln::tensor joined = kiln::concat({p, f64({3, 4, 5}, {3}), kiln::from_values<int>({7}, {1})}, 0);
        CHECK(joined.dtype() == kiln::float64);
        const auto g = tape.gradient(kiln::sum(joined * joined), p);
        CHECK(g.dtype() == kiln::float32);
        CHECK(values(g) == std::vector<double>{2, 4});
    }
}

TEST_CASE("matmul values: vectors, matrices, batches, transposed operands") {
    const auto a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    const auto b = f64({1, 0, 0, 1, 1, 1}, {3, 2});
    CHECK(values(kiln::matmul(a, b)) == std::vector<double>{4, 5, 10, 11});
    CHECK(values(kiln::matmul(a, f64({1, 1, 1}, {3}))) == std::vector<double>{6, 15});
    CHECK(values(kiln::matmul(f64({1, 1}, {2}), a)) == std::vector<double>{5, 7, 9});
    CHECK(kiln::matmul(f64({1, 2}, {2}), f64({3, 4}, {2})).item<double>() == 11);
    CHECK(values(kiln::matmul(a.transpose(0, 1), a)) == std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45});
    const auto ai = kiln::from_values<std::int32_t>({1, 2, 3, 4}, {2, 2});
    CHECK(values(kiln::matmul(ai, ai)) == std::vector<double>{7, 10, 15, 22});
    CHECK(kiln::matmul(ai, ai).dtype() == kiln::int32);
    const auto batch = kiln::stack({a, a * 2}, 0);  // (2, 2, 3)
    const auto r = kiln::matmul(batch, b);
    CHECK(r.shape() == kiln::dims{2, 2, 2});
    CHECK(values(r) == std::vector<double>{4, 5, 10, 11, 8, 10, 20, 22});
    // The same sentence as graph mode's.
    CHECK_THROWS_WITH_AS(kiln::matmul(a, a), "kiln: shape_error in 'matmul': cannot multiply (2, 3) by (2, 3): the "
                         "inner dimensions 3 and 2 differ", kiln::shape_error);
    CHECK(values(kiln::concat({a, b.transpose(0, 1)}, 0)) == std::vector<double>{1, 2, 3, 4, 5, 6, 1, 0, 1, 0, 1, 1});
    CHECK_THROWS_AS(kiln::concat({a, b}, 0), kiln::shape_error);
    // Large enough for the blocked path and BLAS, against a plain triple loop.
    kiln::generator g(5);
    const auto p = kiln::randn({37, 300}, kiln::float64, g), q = kiln::randn({300, 29}, kiln::float64, g);
    const auto pq = kiln::matmul(p, q);
    double worst = 0;
    for (int i = 0; i < 37; ++i)
        for (int j = 0; j < 29; ++j) {
            double s = 0;
            for (int k = 0; k < 300; ++k) s += p.at<double>({i, k}) * q.at<double>({k, j});
            worst = std::max(worst, std::abs(s - pq.at<double>({i, j})));
        }
    CHECK(worst < 1e-10);
}

TEST_CASE("tapes: persistence, nesting, variables, stop_gradient") {
    const auto x = f64({1.5, -0.5}, {2});
    {
        kiln::gradient_tape tape;
        tape.watch(x);
        const auto y = x * x;
        CHECK(values(tape.gradient(y, x)) == std::vector<double>{3, -1});
        CHECK_THROWS_AS(tape.gradient(y, x), kiln::value_error);
    }
    {
        kiln::gradient_tape tape(true);
        tape.watch(x);
        const auto y = x * x * x;
        const auto z = kiln::sum(y);
        CHECK(values(tape.gradient(z, x)) == std::vector<double>{3 * 2.25, 3 * 0.25});
        CHECK(values(tape.gradient(y, x)) == std::vector<double>{3 * 2.25, 3 * 0.25});
    }
    {
        // Second derivative: d2/dx2 x^3 = 6x.
        kiln::gradient_tape outer;
        outer.watch(x);
        kiln::tensor dy;
        {
            kiln::gradient_tape inner;
            inner.watch(x);
            const auto y = x * x * x;
            dy = inner.gradient(y, x);
        }
        CHECK(values(outer.gradient(dy, x)) == std::vector<double>{9, -3});
    }
    {
        kiln::variable w(f64({2, 3}, {2}));
        kiln::gradient_tape tape;
        const auto loss = kiln::sum(w * x + kiln::stop_gradient(w) * 100);
        const auto g = tape.gradient(loss, std::vector<kiln::tensor>{w, x});
        CHECK(values(g[0]) == std::vector<double>{1.5, -0.5});  // stop_gradient cut the second use
        CHECK(values(g[1]) == std::vector<double>{0, 0});        // x was not watched
        CHECK_THROWS_AS(w += 1, kiln::value_error);             // in place on a watched tensor
        // A braced list is a list of sources, of one too (TensorFlow's tape.gradient(loss, [w])).
        kiln::gradient_tape t2(true);
        const auto l2 = kiln::sum(w * w);
        const std::vector<kiln::tensor> one = t2.gradient(l2, {w});
        REQUIRE(one.size() == 1);
        CHECK(values(one[0]) == std::vector<double>{4, 6});
        CHECK(values(t2.gradient(l2, {w, x})[0]) == std::vector<double>{4, 6});
        CHECK(values(t2.gradient(l2, w)) == std::vector<double>{4, 6});  // one source without braces: one tensor
    }
    kiln::variable v(f64({1, 2}, {2}));
    const auto id = v.id();
    v.assign(f64({5, 6}, {2}));
    CHECK(v.id() == id);
    CHECK(values(v) == std::vector<double>{5, 6});
    CHECK_THROWS_AS(v.assign(f64({1}, {1})), kiln::shape_error);
}

TEST_CASE("matmul's gradient goes only to the operands a tape follows, and the values are unchanged") {
    // y = sum(x w): d/dw = x^T 1, and x (data, not watched) gets no gradient computed.
    const kiln::tensor x = f64({1, 2, 3, 4}, {2, 2});
    kiln::tensor w = f64({0.5, -1, 2, 3}, {2, 2});
    kiln::gradient_tape tape;
    tape.watch(w);
    const kiln::tensor y = kiln::sum(kiln::matmul(x, w));
    const std::vector<kiln::tensor> g = tape.gradient(y, std::vector<kiln::tensor>{w, x});
    // d sum(x w) / d w[k][j] = sum_i x[i][k]: column sums of x, repeated along j.
    CHECK(values(g[0]) == std::vector<double>{4, 4, 6, 6});
    // x is not watched: zeros, as for any source the tape does not follow.
    CHECK(values(g[1]) == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("an output gradient seeds the target: vector-Jacobian products, for one source, a list and a braced list") {
    kiln::variable w(f64({1, 2, 3}, {3}));
    const kiln::tensor x = f64({4, 5, 6}, {3});
    kiln::gradient_tape tape(true);
    const kiln::tensor y = w * w * x;             // dy_i/dw_i = 2 w_i x_i = 8, 20, 36
    const kiln::tensor seed = f64({1, 0.5, -1}, {3});
    const kiln::tensor one = tape.gradient(y, w, seed);  // one source: one tensor
    CHECK(values(one) == std::vector<double>{8, 10, -36});
    const std::vector<kiln::tensor> braced = tape.gradient(y, {w}, seed);  // a braced list: a vector
    REQUIRE(braced.size() == 1);
    CHECK(values(braced[0]) == std::vector<double>{8, 10, -36});
    const std::vector<kiln::tensor> listed = tape.gradient(y, std::vector<kiln::tensor>{w, x}, seed);
    CHECK(values(listed[0]) == std::vector<double>{8, 10, -36});
    CHECK(values(listed[1]) == std::vector<double>{0, 0, 0});  // x is not watched by the tape: zeros
    CHECK_THROWS_AS(tape.gradient(y, w, f64({1, 2}, {2})), kiln::shape_error);
}
