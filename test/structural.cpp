// Graph mode's structural ops (reductions, matmul, views) and compile-time gradients, against hand-computed values,
// central differences and the eager tape. (Sessions, optimizers and training: training.cpp.)
#include <kiln/kiln.hpp>

#include <array>
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

TEST_CASE("reductions over axes, with and without keepdims") {
    std::vector<double> v{1, 5, 3, 4, 2, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    CHECK(kiln::run(kiln::sum(x), x = X6)() == 21);
    CHECK(kiln::run(kiln::mean(x), x = X6)() == 3.5);
    CHECK(kiln::run(kiln::max(x), x = X6)() == 6);
    CHECK(kiln::run(kiln::min(x), x = X6)() == 1);
    CHECK(kiln::run(kiln::prod(x), x = X6)() == 720);
    check_all_close(flat(kiln::run(kiln::prod<1>(x), x = X6)), std::vector<double>{15, 48}, 0);
    check_all_close(flat(kiln::run(kiln::sum<0>(x), x = X6)), std::vector<double>{5, 7, 9}, 0);
    check_all_close(flat(kiln::run(kiln::max<1>(x), x = X6)), std::vector<double>{5, 6}, 0);
    check_all_close(flat(kiln::run(kiln::min<-1>(x), x = X6)), std::vector<double>{1, 2}, 0);
    const auto m = kiln::run(kiln::mean<1>(x, kiln::keep_dims), x = X6);
    CHECK(m.shape().size() == 2);
    CHECK(m.shape()[1] == 1);
    check_all_close(flat(m), std::vector<double>{3, 4}, 1e-15);
    // Reductions compose with elementwise work on either side.
    check_all_close(flat(kiln::run(x - kiln::mean<1>(x, kiln::keep_dims), x = X6)), std::vector<double>{-2, 2, 0, 0, -2, 2}, 1e-15);
    // NaN is sticky in max; an empty max is an error; a bad axis is the same value_error as in eager mode (one shape
    // rule, ops::reduce_shape).
    std::vector<double> n{1, NAN, 3};
    CHECK(std::isnan(kiln::run(kiln::max(x), x = kiln::view(n.data(), {3}))()));
    CHECK_THROWS_AS(kiln::run(kiln::max(x), x = kiln::view(n.data(), {0})), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::sum<2>(x), x = X6), "kiln: value_error in 'sum': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::sum<0, -2>(x), x = X6), "kiln: value_error in 'sum': axis -2 repeats (axes {0, -2} on shape (2, 3))",
                         kiln::value_error);
    // Static shapes flow through: (dyn, 10) summed over axis 1 is (dyn,).
    using S = kiln::detail::shape_of_t<decltype(kiln::sum<1>(kiln::input<"a", float, kiln::shape<kiln::dyn, 10>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<kiln::dyn>>);
}

TEST_CASE("sums over leading, trailing and inner axes agree with eager mode's reductions") {
    // (3, 5, 37): column sums (leading axes, blocks of 16 columns and a tail), row sums (trailing axes, a length
    // that is not a multiple of 4), an inner axis (the general fold) and everything; float32 and int32.
    kiln::generator g(11);
    const kiln::tensor tf = kiln::uniform({3, 5, 37}, -2, 2, kiln::float32, g);
    const kiln::tensor ti = (kiln::uniform({3, 5, 37}, -50, 50, kiln::float64, g)).to(kiln::int32);
    constexpr kiln::input<"a", float> af{};
    constexpr kiln::input<"b", std::int32_t> ai{};
    const auto fv = kiln::view(tf.data<float>(), {3, 5, 37});
    const auto iv = kiln::view(ti.data<std::int32_t>(), {3, 5, 37});
    auto same = [](const auto& graph_result, const kiln::tensor& eager, double tol) {
        CHECK(graph_result.shape().size() == static_cast<std::size_t>(eager.dim()));
        check_all_close(flat(graph_result), kiln_test::values(eager), tol);
    };
    same(kiln::run(kiln::sum<0>(af), af = fv), kiln::sum(tf, {0}), 1e-6);
    same(kiln::run(kiln::sum<0, 1>(af), af = fv), kiln::sum(tf, {0, 1}), 1e-6);
    same(kiln::run(kiln::sum<2>(af), af = fv), kiln::sum(tf, {2}), 1e-6);
    same(kiln::run(kiln::sum<1, 2>(af, kiln::keep_dims), af = fv), kiln::sum(tf, {1, 2}, true), 1e-6);
    same(kiln::run(kiln::sum<1>(af), af = fv), kiln::sum(tf, {1}), 1e-6);
    same(kiln::run(kiln::mean<0>(af), af = fv), kiln::mean(tf, {0}), 1e-6);
    same(kiln::run(kiln::mean<-1>(af), af = fv), kiln::mean(tf, {2}), 1e-6);
    CHECK(kiln::run(kiln::sum(af), af = fv)() == doctest::Approx(kiln::sum(tf).item<double>()).epsilon(1e-6));
    // A transposed view is not row-major: the general fold.
    same(kiln::run(kiln::sum<0>(kiln::transpose(kiln::reshape<15, 37>(af))), af = fv),
         kiln::sum(tf.reshape({15, 37}).transpose(0, 1), {0}), 1e-6);
    // Integers sum exactly.
    same(kiln::run(kiln::sum<0, 1>(ai), ai = iv), kiln::sum(ti, {0, 1}), 0);
    same(kiln::run(kiln::sum<2>(ai), ai = iv), kiln::sum(ti, {2}), 0);
    same(kiln::run(kiln::sum<1>(ai), ai = iv), kiln::sum(ti, {1}), 0);
}

TEST_CASE("matmul, transpose, reshape and broadcast_to") {
    std::vector<double> a{1, 2, 3, 4, 5, 6}, b{1, 0, 2, 1, 0, 1};  // (2, 3) and (3, 2)
    const auto A = kiln::view(a.data(), {2, 3}), B = kiln::view(b.data(), {3, 2});
    check_all_close(flat(kiln::run(kiln::matmul(x, w), x = A, w = B)), std::vector<double>{5, 5, 14, 11}, 0);
    // Transposed operands are views; the product with its own transpose.
    check_all_close(flat(kiln::run(kiln::matmul(x, kiln::transpose(x)), x = A)), std::vector<double>{14, 32, 32, 77}, 0);
    check_all_close(flat(kiln::run(kiln::transpose(x), x = A)), std::vector<double>{1, 4, 2, 5, 3, 6}, 0);
    static_assert(std::is_same_v<decltype(kiln::transpose(kiln::transpose(x))), X>);
    const auto r = kiln::run(kiln::reshape<3, kiln::dyn>(x), x = A);
    CHECK(r.shape()[0] == 3);
    CHECK(r.shape()[1] == 2);
    check_all_close(flat(r), a, 0);
    // A reshape of a transposed (non-contiguous) view copies in row-major order.
    check_all_close(flat(kiln::run(kiln::reshape<6>(kiln::transpose(x)), x = A)), std::vector<double>{1, 4, 2, 5, 3, 6}, 0);
    std::vector<double> row{1, 2, 3};
    check_all_close(flat(kiln::run(kiln::broadcast_to<2, 3>(x) * 2_c, x = kiln::view(row.data(), {3}))),
                    std::vector<double>{2, 4, 6, 2, 4, 6}, 0);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::matmul(x, w), x = A, w = A),
                         doctest::Contains("kiln: shape_error in 'matmul': cannot multiply (2, 3) by (2, 3)"), kiln::shape_error);
    CHECK_THROWS_AS(kiln::run(kiln::reshape<4>(x), x = A), kiln::shape_error);
    // Larger products go through BLAS (or the portable kernel) and agree with a naive loop.
    const std::ptrdiff_t M = 70, K = 65, N = 80;
    std::vector<double> p(M * K), q(K * N), expect(M * N, 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::sin(0.1 * static_cast<double>(i));
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.07 * static_cast<double>(i));
    for (std::ptrdiff_t i = 0; i < M; ++i)
        for (std::ptrdiff_t k = 0; k < K; ++k)
            for (std::ptrdiff_t j = 0; j < N; ++j) expect[i * N + j] += p[i * K + k] * q[k * N + j];
    check_all_close(flat(kiln::run(kiln::matmul(x, w), x = kiln::view(p.data(), {M, K}), w = kiln::view(q.data(), {K, N}))),
                    expect, 1e-12, 1e-12);
    // Every path of the small kernel against a naive loop: contiguous rows of B (strips of 8, 2 and 1 batches and a
    // scalar tail), a transposed A times a column (a weight gradient's shape), narrow outputs, dot products.
    auto naive = [](const std::vector<double>& a, std::ptrdiff_t m, std::ptrdiff_t k, bool a_t, const std::vector<double>& b,
                    std::ptrdiff_t n) {
        std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
        for (std::ptrdiff_t i = 0; i < m; ++i)
            for (std::ptrdiff_t j = 0; j < n; ++j)
                for (std::ptrdiff_t t = 0; t < k; ++t) c[i * n + j] += (a_t ? a[t * m + i] : a[i * k + t]) * b[t * n + j];
        return c;
    };
    auto filled = [](std::ptrdiff_t count, double f) {
        std::vector<double> v(static_cast<std::size_t>(count));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(f * static_cast<double>(i + 1));
        return v;
    };
    for (const auto [m, k, n] : {std::array<std::ptrdiff_t, 3>{5, 7, 83}, {3, 4, 1}, {75, 9, 1}, {6, 5, 3}, {4, 33, 2}}) {
        const auto av = filled(m * k, 0.31), bv = filled(k * n, 0.17);
        check_all_close(flat(kiln::run(kiln::matmul(x, w), x = kiln::view(av.data(), {m, k}), w = kiln::view(bv.data(), {k, n}))),
                        naive(av, m, k, false, bv, n), 1e-12, 1e-12);
        // A stored as (k, m) and used transposed: its columns are contiguous.
        check_all_close(flat(kiln::run(kiln::matmul(kiln::transpose(x), w), x = kiln::view(av.data(), {k, m}),
                                       w = kiln::view(bv.data(), {k, n}))),
                        naive(av, m, k, true, bv, n), 1e-12, 1e-12);
    }
}

TEST_CASE("gradients are simplified expressions, visible in their types") {
    static_assert(std::is_same_v<decltype(kiln::grad(x * 2_c, x)), kiln::constant<2>>);
    static_assert(std::is_same_v<decltype(kiln::grad(x + 3_c * x, x)), kiln::constant<4>>);
    static_assert(std::is_same_v<decltype(kiln::grad(-x, x)), kiln::constant<-1>>);
    static_assert(std::is_same_v<decltype(kiln::grad(w * 3_c, x)), kiln::constant<0>>);  // x does not occur
    // d/da (a * v) is v when the static shapes say that nothing broadcasts; several parameters give a tuple.
    const kiln::input<"a", double, kiln::shape<3>> a;
    const kiln::param<"v", double, kiln::shape<3>> v;
    static_assert(std::is_same_v<decltype(kiln::grad(a * v, a)), std::remove_const_t<decltype(v)>>);
    auto [ga, gv] = kiln::grad(a * v, a, v);
    static_assert(std::is_same_v<decltype(ga), std::remove_const_t<decltype(v)>> &&
                  std::is_same_v<decltype(gv), std::remove_const_t<decltype(a)>>);
    // Where x and w may broadcast against each other, the gradient sums back to x's shape.
    std::vector<double> xv{1, 2}, wv{1, 2, 3, 4, 5, 6};
    check_all_close(flat(kiln::run(kiln::grad(x * w, x), x = kiln::view(xv.data(), {2}), w = kiln::view(wv.data(), {3, 2}))),
                    std::vector<double>{9, 12}, 0);
}

TEST_CASE("gradients through matmul, broadcasting, views and reductions (float64)") {
    const std::vector<double> xv{0.3, -1.2, 0.7, 2.0, -0.5, 0.1, 1.1, -0.8};  // (2, 4)
    std::vector<double> wv{0.5, -0.3, 0.8, 0.1, -0.6, 0.4, 0.9, 0.2, -0.7, 0.3, 0.6, -0.1};  // (4, 3)
    std::vector<double> bv{0.1, -0.2, 0.3};
    const kiln::dims xs{2, 4};
    const auto Wv = kiln::view(wv.data(), {4, 3});
    const kiln::input<"b", double> b{};
    const auto Bv = kiln::view(bv.data(), {3});
    // A dense layer with a broadcast bias, a nonlinearity and a mean.
    check_gradient(kiln::mean(kiln::square(kiln::tanh(kiln::matmul(x, w) + b))), xv, xs, w = Wv, b = Bv);
    check_gradient(kiln::sum(kiln::matmul(kiln::transpose(x), x) * 0.5_c), xv, xs);
    // Reductions over one axis, keepdims, max with its arg, a softmax-like normalization.
    check_gradient(kiln::sum(kiln::square(x - kiln::mean<1>(x, kiln::keep_dims))), xv, xs);
    check_gradient(kiln::sum(kiln::max<0>(x) * kiln::min<1>(x, kiln::keep_dims)), xv, xs);
    check_gradient(kiln::sum(kiln::exp(x) / kiln::sum<1>(kiln::exp(x), kiln::keep_dims) * x), xv, xs);
    check_gradient(kiln::sum(kiln::sum<0>(x) * kiln::sum<1>(kiln::transpose(x))), xv, xs);
    // prod: one struct (ops::reduce<prod>) gives graph mode the same reduction and gradient rule as eager mode.
    check_gradient(kiln::sum(kiln::prod<1>(x, kiln::keep_dims) * kiln::prod<0>(x, kiln::keep_dims)), xv, xs);
    check_gradient(kiln::sum(kiln::prod(x) * x), xv, xs);
    // Views: reshape and broadcast_to.
    check_gradient(kiln::sum(kiln::square(kiln::reshape<4, 2>(x)) * kiln::reshape<4, 2>(kiln::exp(x))), xv, xs);
    std::vector<double> rv{0.2, -0.4, 0.9, 1.3};
    check_gradient(kiln::sum(kiln::square(kiln::broadcast_to<3, 4>(x))), rv, kiln::dims{4});
    // A broadcast operand gets its gradient summed back to its own shape.
    check_gradient(kiln::sum(kiln::matmul(w, kiln::transpose(w)) * kiln::sum<0>(x)), rv, kiln::dims{1, 4}, w = Wv);
    check_gradient(kiln::mean(kiln::square(w * x)), rv, kiln::dims{4, 1}, w = Wv);
}


TEST_CASE("one struct per structural op: ops::scan (cumsum, cumprod) in graph mode, grad, eager mode, the tape, traces and the registry") {
    std::vector<double> v{1, 5, 3, 4, 2, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 5, 3, 4, 2, 6}, {2, 3});
    const std::vector<double> along1{1, 6, 9, 4, 6, 12}, along0{1, 5, 3, 5, 7, 9}, back1{9, 8, 3, 12, 8, 6},
        prod1{1, 5, 15, 4, 8, 48};
    // Graph mode and eager mode: the same op, the same values.
    CHECK(flat(kiln::run(kiln::cumsum<1>(x), x = X6)) == along1);
    CHECK(flat(kiln::run(kiln::cumsum<0>(x), x = X6)) == along0);
    CHECK(flat(kiln::run(kiln::cumsum<-1>(x, kiln::reverse), x = X6)) == back1);
    CHECK(flat(kiln::run(kiln::cumprod<1>(x), x = X6)) == prod1);
    CHECK(kiln_test::values(kiln::cumsum(t, 1)) == along1);
    CHECK(kiln_test::values(kiln::cumsum(t, -1, true)) == back1);
    CHECK(kiln_test::values(kiln::cumprod(t, 1)) == prod1);
    // Static shapes flow through; the same sentence for a bad axis in both modes.
    using S = kiln::detail::shape_of_t<decltype(kiln::cumsum<1>(kiln::input<"a", float, kiln::shape<kiln::dyn, 10>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<kiln::dyn, 10>>);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::cumsum<2>(x), x = X6), "kiln: value_error in 'cumsum': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::cumsum(t, 2), "kiln: value_error in 'cumsum': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    // grad: the op's rule (a scan of g the other way) against central differences.
    const std::vector<double> xv{0.3, -1.2, 0.7, 2.0, -0.5, 0.1};
    const kiln::dims xs{2, 3};
    check_gradient(kiln::sum(kiln::cumsum<1>(x) * x), xv, xs);
    check_gradient(kiln::sum(kiln::square(kiln::cumsum<0>(x, kiln::reverse))), xv, xs);
    check_gradient(kiln::sum(kiln::cumprod<1>(x) * x), xv, xs);
    // The tape runs the same rule on tensors: it gives graph mode's gradient.
    std::vector<double> xm = xv;
    const auto graph_grad = flat(kiln::run(kiln::grad(kiln::sum(kiln::cumprod<1>(x) * x), x), x = kiln::view(xm.data(), xs)));
    {
        kiln::variable xt(kiln::from_values<double>({0.3, -1.2, 0.7, 2.0, -0.5, 0.1}, xs));
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(kiln::cumprod(xt, 1) * xt);
        check_all_close(kiln_test::values(tape.gradient(loss, xt)), graph_grad, 1e-15, 1e-15);
    }
    // A traced function records the op and replays it; a graph-mode expression traces to the same op.
    auto f = kiln::function([](const kiln::tensor& a) { return kiln::cumsum(a, 1, true); });
    CHECK(kiln_test::values(f(t)) == back1);
    CHECK(kiln_test::values(f(t * 2.0)) == std::vector<double>{18, 16, 6, 24, 16, 12});
    CHECK(f.trace_count() == 1);
    auto traced = kiln::trace(kiln::cumsum<1>(x));
    CHECK(kiln_test::values(traced(t)) == along1);
    // The registry finds it by name, with its attributes and its shape rule.
    CHECK(kiln_test::values(kiln::apply("cumsum", {t}, {{"axis", 1}, {"reverse", true}})) == back1);
    const kiln::tensor_spec s = kiln::infer("cumprod", {{kiln::int32, {4, 5}}}, {{"axis", 0}});
    CHECK(s.dtype == kiln::int64);
    CHECK(s.shape == kiln::dims{4, 5});
    // Printing names it.
    CHECK(kiln::to_string(kiln::cumsum<1>(x) * 2_c).find("cumsum") != std::string::npos);
}

TEST_CASE("argmax and argmin in graph mode: the same op (ops::arg_reduce) as eager mode's") {
    std::vector<double> v{1, 5, 3, 4, 2, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 5, 3, 4, 2, 6}, {2, 3});
    const auto a1 = kiln::run(kiln::argmax<1>(x), x = X6);
    static_assert(std::is_same_v<std::decay_t<decltype(a1(0))>, std::int64_t>);
    CHECK(flat(a1) == std::vector<double>{1, 2});
    CHECK(flat(kiln::run(kiln::argmin<0>(x), x = X6)) == std::vector<double>{0, 1, 0});
    const auto kept = kiln::run(kiln::argmax<-1>(x, kiln::keep_dims), x = X6);
    CHECK(kept.shape()[0] == 2);
    CHECK(kept.shape()[1] == 1);
    CHECK(kiln_test::values(kiln::argmax(t, 1)) == flat(a1));
    CHECK(kiln_test::values(kiln::argmin(t, 0)) == std::vector<double>{0, 1, 0});
    // The first NaN wins, as in NumPy; an empty axis and a bad axis are the eager sentences.
    std::vector<double> n{1, NAN, 3, NAN};
    CHECK(kiln::run(kiln::argmax<0>(x), x = kiln::view(n.data(), {4}))() == 1);
    CHECK(kiln::run(kiln::argmin<0>(x), x = kiln::view(n.data(), {4}))() == 1);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::argmax<0>(x), x = kiln::view(n.data(), {0})),
                         "kiln: value_error in 'argmax': cannot reduce over an empty dimension (shape (0,))", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::argmax<2>(x), x = X6), "kiln: value_error in 'argmax': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::argmax(t, 2), "kiln: value_error in 'argmax': axis 2 is out of range for shape (2, 3) (float64)",
                         kiln::value_error);
    // No gradient flows through the positions; the rest of the loss still differentiates.
    check_gradient(kiln::sum(kiln::square(x) * kiln::cast<double>(kiln::argmax<1>(x, kiln::keep_dims))),
                   std::vector<double>{0.3, -1.2, 0.7, 2.0, -0.5, 0.1}, kiln::dims{2, 3});
    // Traced: the graph-mode expression and the eager call give the same positions.
    auto traced = kiln::trace(kiln::argmin<1>(x));
    CHECK(kiln_test::values(traced(t)) == kiln_test::values(kiln::argmin(t, 1)));
    auto f = kiln::function([](const kiln::tensor& a) { return kiln::argmax(a, -1); });
    CHECK(kiln_test::values(f(t)) == flat(a1));
}

TEST_CASE("any and all in graph mode, as eager mode's (NaN is nonzero; empty gives false and true)") {
    std::vector<double> v{0, 2, 0, 0, 0, NAN};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({0, 2, 0, 0, 0, NAN}, {2, 3});
    CHECK(kiln::run(kiln::any(x), x = X6)() == true);
    CHECK(kiln::run(kiln::all(x), x = X6)() == false);
    CHECK(flat(kiln::run(kiln::any<0>(x), x = X6)) == kiln_test::values(kiln::any(t, {0})));
    CHECK(flat(kiln::run(kiln::all<1>(x, kiln::keep_dims), x = X6)) == kiln_test::values(kiln::all(t, {1}, true)));
    CHECK(flat(kiln::run(kiln::any<1>(x), x = X6)) == std::vector<double>{1, 1});
    std::vector<double> ones{1, -1, 3};
    CHECK(kiln::run(kiln::all(x), x = kiln::view(ones.data(), {3}))() == true);
    CHECK(kiln::run(kiln::any(x), x = kiln::view(ones.data(), {0}))() == false);
    CHECK(kiln::run(kiln::all(x), x = kiln::view(ones.data(), {0}))() == true);
}
