// The mode-neutral layout and indexing ops (ops/layout.hpp, ops/gather.hpp): flip, slice, split, tile, repeat, pad,
// take_along_axis, index_select, argsort, sort and outer in graph mode, against hand-computed values, against
// eager mode (the same op), against central differences for their gradients, on the tape, and traced.
#include <kiln/io.hpp>
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "check.hpp"
#include "graph_check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::check_all_close;
using kiln_test::check_gradient;
using kiln_test::flat;
using kiln_test::x;

namespace {

constexpr kiln::input<"i", std::int64_t> idx{};

const std::vector<double> xv{0.3, -1.2, 0.7, 2.0, -0.5, 0.1};
const kiln::dims xs{2, 3};

template <class Loss>
std::vector<double> graph_gradient(const Loss& loss) {
    std::vector<double> v = xv;
    return flat(kiln::run(kiln::grad(loss, x), x = kiln::view(v.data(), xs)));
}

// The tape's gradient of loss_fn(x) with respect to x at xv.
template <class F>
std::vector<double> tape_gradient(F loss_fn) {
    kiln::variable xt(kiln::from_values<double>({0.3, -1.2, 0.7, 2.0, -0.5, 0.1}, xs));
    kiln::gradient_tape tape;
    const kiln::tensor loss = loss_fn(kiln::tensor(xt));
    return kiln_test::values(tape.gradient(loss, xt));
}

}  // namespace

TEST_CASE("flip in graph mode: the same op as eager mode's, its gradient the flip of g") {
    std::vector<double> v{1, 2, 3, 4, 5, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(flat(kiln::run(kiln::flip(x), x = X6)) == std::vector<double>{6, 5, 4, 3, 2, 1});
    CHECK(flat(kiln::run(kiln::flip<1>(x), x = X6)) == std::vector<double>{3, 2, 1, 6, 5, 4});
    CHECK(flat(kiln::run(kiln::flip<-2>(x), x = X6)) == std::vector<double>{4, 5, 6, 1, 2, 3});
    CHECK(kiln_test::values(kiln::flip(t, {1})) == std::vector<double>{3, 2, 1, 6, 5, 4});
    // Static shapes flow through; a bad axis is one sentence in both modes.
    using S = kiln::detail::shape_of_t<decltype(kiln::flip<0>(kiln::input<"a", float, kiln::shape<4, 5>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<4, 5>>);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::flip<2>(x), x = X6), "kiln: value_error in 'flip': axis 2 is out of range for shape (2, 3)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::flip(t, {0, -2}), "kiln: value_error in 'flip': axis -2 repeats (axes {0, -2} on shape (2, 3))",
                         kiln::value_error);
    const std::vector<double> wv{1, 2, 3, 4, 5, 6};
    const auto weights = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    (void)wv;
    check_gradient(kiln::sum(kiln::flip<1>(x) * kiln::cumsum<1>(x)), xv, xs);
    check_all_close(tape_gradient([](const kiln::tensor& a) { return kiln::sum(kiln::flip(a, {1}) * kiln::cumsum(a, 1)); }),
                    graph_gradient(kiln::sum(kiln::flip<1>(x) * kiln::cumsum<1>(x))), 1e-15, 1e-15);
    (void)weights;
}

TEST_CASE("slice and split in graph mode: views with Python's rules, gradients back into place") {
    std::vector<double> v{1, 2, 3, 4, 5, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    CHECK(flat(kiln::run(kiln::slice<1, 1>(x), x = X6)) == std::vector<double>{2, 3, 5, 6});
    CHECK(flat(kiln::run(kiln::slice<1, 0, kiln::slice_end, 2>(x), x = X6)) == std::vector<double>{1, 3, 4, 6});
    CHECK(flat(kiln::run(kiln::slice<1, -1, kiln::slice_begin, -1>(x), x = X6)) == std::vector<double>{3, 2, 1, 6, 5, 4});
    CHECK(flat(kiln::run(kiln::slice<0, -1>(x), x = X6)) == std::vector<double>{4, 5, 6});
    CHECK(flat(kiln::run(kiln::slice<1, 5, 9>(x), x = X6)).empty());  // clamped, as Python
    // A slice of a static shape is static.
    using S = kiln::detail::shape_of_t<decltype(kiln::slice<1, 1, 4>(kiln::input<"a", float, kiln::shape<2, 6>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<2, 3>>);
    const auto [a, b, c] = kiln::split<3, 1>(x);
    CHECK(flat(kiln::run(a, x = X6)) == std::vector<double>{1, 4});
    CHECK(flat(kiln::run(c, x = X6)) == std::vector<double>{3, 6});
    const auto [top, bottom] = kiln::split<2>(x);
    CHECK(flat(kiln::run(bottom - top, x = X6)) == std::vector<double>{3, 3, 3});
    CHECK_THROWS_WITH_AS(kiln::run(std::get<0>(kiln::split<2, 1>(x)), x = X6),
                         "kiln: value_error in 'split': the parts do not divide the extent (shape (2, 3))", kiln::value_error);
    // Gradients: each part's gradient lands where the part came from.
    check_gradient(kiln::sum(kiln::square(kiln::slice<1, 0, kiln::slice_end, 2>(x))), xv, xs);
    check_gradient(kiln::sum(kiln::slice<1, -1, kiln::slice_begin, -1>(x) * x), xv, xs);
    check_gradient(kiln::sum(a * b + kiln::square(c)), xv, xs);
}

TEST_CASE("tile and repeat in graph mode: numpy's values, gradients summed over the copies") {
    std::vector<double> v{1, 2, 3, 4, 5, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    // numpy.tile(x, (2, 1)), numpy.tile(x, 2), numpy.tile(x, (2, 1, 1)).
    const std::vector<double> rows{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, cols{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6};
    CHECK(flat(kiln::run(kiln::tile<2, 1>(x), x = X6)) == rows);
    CHECK(flat(kiln::run(kiln::tile<2>(x), x = X6)) == cols);
    const auto lead = kiln::run(kiln::tile<2, 1, 1>(x), x = X6);
    CHECK(lead.shape().size() == 3);
    CHECK(flat(lead) == rows);
    CHECK(kiln_test::values(kiln::tile(t, {2, 1})) == rows);
    // numpy.repeat(x, 2, axis=1) and numpy.repeat(x, 2).
    const std::vector<double> rep1{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
    CHECK(flat(kiln::run(kiln::repeat<2, 1>(x), x = X6)) == rep1);
    CHECK(flat(kiln::run(kiln::repeat<2>(x), x = X6)) == rep1);
    CHECK(flat(kiln::run(kiln::repeat<2, 0>(x), x = X6)) == std::vector<double>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6});
    CHECK(kiln_test::values(kiln::repeat(t, 2, 1)) == rep1);
    using S = kiln::detail::shape_of_t<decltype(kiln::tile<3, 2>(kiln::input<"a", float, kiln::shape<2, 5>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<6, 10>>);
    // Sizes that overflow are refused by the rule, not wrapped.
    CHECK_THROWS_WITH_AS(kiln::tile(t, {std::int64_t{1} << 62, 4}), "kiln: value_error in 'tile': the result is too large (shape (2, 3))",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::repeat(t, std::int64_t{1} << 62, 0), "kiln: value_error in 'repeat': the result is too large (shape (2, 3))",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::pad(t, {{std::int64_t{1} << 62, std::int64_t{1} << 62}}),
                         "kiln: value_error in 'pad': the result is too large (shape (2, 3))", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::repeat<2, 2>(x), x = X6),
                         "kiln: value_error in 'repeat': the axis is out of range (shape (2, 3))", kiln::value_error);
    // Gradients (weights make each copy count differently).
    check_gradient(kiln::sum(kiln::square(kiln::tile<2, 2>(x)) * kiln::cumsum<1>(kiln::tile<2, 2>(x))), xv, xs);
    check_gradient(kiln::sum(kiln::cumsum<0>(kiln::repeat<3, 0>(x)) * kiln::repeat<3, 0>(x)), xv, xs);
    check_gradient(kiln::sum(kiln::cumsum<0>(kiln::repeat<2>(x)) * kiln::repeat<2>(x)), xv, xs);
    check_all_close(tape_gradient([](const kiln::tensor& a) { return kiln::sum(kiln::cumsum(kiln::repeat(a, 3, 0), 0) * kiln::repeat(a, 3, 0)); }),
                    graph_gradient(kiln::sum(kiln::cumsum<0>(kiln::repeat<3, 0>(x)) * kiln::repeat<3, 0>(x))), 1e-14, 1e-14);
    check_all_close(tape_gradient([](const kiln::tensor& a) { return kiln::sum(kiln::square(kiln::tile(a, {2, 1, 2}))); }),
                    graph_gradient(kiln::sum(kiln::square(kiln::tile<2, 1, 2>(x)))), 1e-14, 1e-14);
}

TEST_CASE("tile of rank 5 to 8: numpy.tile's values and its gradient, an error past 8 axes that are not 1") {
    // x of shape (2, 1, 3, 1, 2), values 0..11; numpy.tile(x, (1, 2, 1, 1, 3)) has shape (2, 2, 3, 1, 6) and
    // r[a, b, c, d, e] = x[a, 0, c, 0, e % 2].
    std::vector<double> x5v(12);
    for (int i = 0; i < 12; ++i) x5v[static_cast<std::size_t>(i)] = i;
    const kiln::tensor x5 = kiln::from_vector(x5v, {2, 1, 3, 1, 2});
    const kiln::tensor r = kiln::tile(x5, {1, 2, 1, 1, 3});
    CHECK(r.shape() == kiln::dims{2, 2, 3, 1, 6});
    std::vector<double> want;
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 3; ++c)
                for (int e = 0; e < 6; ++e) want.push_back(x5v[static_cast<std::size_t>(a * 6 + c * 2 + e % 2)]);
    CHECK(kiln_test::values(r) == want);
    CHECK(flat(kiln::run(kiln::tile<1, 2, 1, 1, 3>(x), x = kiln::view(x5v.data(), {2, 1, 3, 1, 2}))) == want);
    // Repetitions of 1 and extents of 1 need no axis of their own: a rank-8 tensor tiles by ones, and leading
    // repetitions add dimensions up to rank 8.
    const kiln::tensor ones8 = kiln::ones({1, 2, 1, 1, 2, 1, 1, 1});
    CHECK(kiln::tile(ones8, {1, 1, 1, 1, 1, 1, 1, 3}).shape() == kiln::dims{1, 2, 1, 1, 2, 1, 1, 3});
    CHECK(kiln::tile(x5, {2, 1, 1, 1, 1, 1}).shape() == kiln::dims{2, 2, 1, 3, 1, 2});
    // The gradient of sum(w * tile(x)) adds w over each element's copies: 2 copies along b, 3 along e.
    kiln::variable xs(x5);
    kiln::gradient_tape tape;
    const kiln::tensor w = kiln::arange(0.0, 72.0, 1.0, kiln::float64).reshape({2, 2, 3, 1, 6});
    const kiln::tensor g = tape.gradient(kiln::sum(kiln::tile(xs, {1, 2, 1, 1, 3}) * w), xs);
    std::vector<double> gw(12, 0.0);
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b)
            for (int c = 0; c < 3; ++c)
                for (int e = 0; e < 6; ++e) gw[static_cast<std::size_t>(a * 6 + c * 2 + e % 2)] += ((a * 2 + b) * 3 + c) * 6 + e;
    CHECK(kiln_test::values(g) == gw);
    // Nine axes that are not 1 (x's five, four repetitions) do not fit.
    const kiln::tensor big = kiln::ones({2, 2, 2, 2, 2});
    CHECK_THROWS_WITH_AS(kiln::tile(big, {2, 2, 2, 2, 1}),
                         "kiln: value_error in 'tile': at most 8 of the repetitions and of x's extents may differ from 1 "
                         "(shape (2, 2, 2, 2, 2))",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::tile(big, {1, 1, 1, 1, 1, 1, 1, 1, 1}),
                         "kiln: value_error in 'tile': at most 8 repetitions (the largest rank)", kiln::value_error);
}

TEST_CASE("pad in graph mode: constant padding, its gradient the interior of g") {
    std::vector<double> v{1, 2, 3, 4, 5, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    // numpy.pad(x, ((1, 0), (0, 1)))
    const std::vector<double> padded{0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6, 0};
    CHECK(flat(kiln::run(kiln::pad<kiln::width{1, 0}, kiln::width{0, 1}>(x), x = X6)) == padded);
    CHECK(kiln_test::values(kiln::pad(t, {{1, 0}, {0, 1}})) == padded);
    // numpy.pad(x, ((0, 1),), constant_values=2.5): fewer widths pad the leading dimensions.
    CHECK(flat(kiln::run(kiln::pad<kiln::width{0, 1}>(x, 2.5_c), x = X6)) == std::vector<double>{1, 2, 3, 4, 5, 6, 2.5, 2.5, 2.5});
    CHECK(kiln_test::values(kiln::pad(t, {{0, 1}}, 2.5)) == std::vector<double>{1, 2, 3, 4, 5, 6, 2.5, 2.5, 2.5});
    using S = kiln::detail::shape_of_t<decltype(kiln::pad<kiln::width{1, 2}>(kiln::input<"a", float, kiln::shape<2, 5>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<5, 5>>);
    CHECK_THROWS_WITH_AS(kiln::pad(t, {{-1, 0}}), "kiln: value_error in 'pad': pad widths must be non-negative (shape (2, 3))",
                         kiln::value_error);
    check_gradient(kiln::sum(kiln::cumsum<1>(kiln::pad<kiln::width{1, 1}, kiln::width{2, 0}>(x, 3_c)) * kiln::pad<kiln::width{1, 1}, kiln::width{2, 0}>(x)),
                   xv, xs);
    check_all_close(tape_gradient([](const kiln::tensor& a) { return kiln::sum(kiln::cumsum(kiln::pad(a, {{1, 1}, {2, 0}}), 1)); }),
                    graph_gradient(kiln::sum(kiln::cumsum<1>(kiln::pad<kiln::width{1, 1}, kiln::width{2, 0}>(x)))), 1e-15, 1e-15);
}

TEST_CASE("take_along_axis, index_select, argsort and sort in graph mode: integer indices, checked at run time") {
    std::vector<double> v{3, 1, 2, 6, 5, 4};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({3, 1, 2, 6, 5, 4}, {2, 3});
    std::vector<std::int64_t> iv{2, 0, 1, -1};
    // take_along_axis with a (2, 2) index along axis 1.
    const auto along = kiln::run(kiln::take_along_axis<1>(x, idx), x = X6, idx = kiln::view(iv.data(), {2, 2}));
    CHECK(flat(along) == std::vector<double>{2, 3, 5, 4});
    // index_select: numpy.take(x, [2, 0, 1, -1], axis=1).
    CHECK(flat(kiln::run(kiln::index_select<1>(x, idx), x = X6, idx = kiln::view(iv.data(), {4}))) ==
          std::vector<double>{2, 3, 1, 2, 4, 6, 5, 4});
    CHECK(kiln_test::values(kiln::index_select(t, 1, kiln::from_values<std::int64_t>({2, 0, 1, -1}, {4}))) ==
          std::vector<double>{2, 3, 1, 2, 4, 6, 5, 4});
    std::vector<std::int64_t> bad{0, 3};
    CHECK_THROWS_WITH_AS(kiln::run(kiln::index_select<1>(x, idx), x = X6, idx = kiln::view(bad.data(), {2})),
                         "kiln: value_error in 'index_select': index 3 is out of range for a dimension of size 3", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::take_along_axis<1>(x, idx), x = X6, idx = kiln::view(bad.data(), {2})),
                         "kiln: shape_error in 'take_along_axis': the index (2,) must have the shape of x (2, 3) except along axis 1",
                         kiln::shape_error);
    // argsort and sort, ascending and descending (stable; NaN last).
    const auto order = kiln::run(kiln::argsort<1>(x), x = X6);
    static_assert(std::is_same_v<std::decay_t<decltype(order(0, 0))>, std::int64_t>);
    CHECK(flat(order) == std::vector<double>{1, 2, 0, 2, 1, 0});
    CHECK(flat(kiln::run(kiln::sort<1>(x), x = X6)) == std::vector<double>{1, 2, 3, 4, 5, 6});
    CHECK(flat(kiln::run(kiln::sort<0>(x, kiln::descending), x = X6)) == std::vector<double>{6, 5, 4, 3, 1, 2});
    CHECK(kiln_test::values(kiln::argsort(t, 1)) == flat(order));
    std::vector<double> n{2, NAN, 1, 2};
    CHECK(flat(kiln::run(kiln::argsort<0>(x), x = kiln::view(n.data(), {4}))) == std::vector<double>{2, 0, 3, 1});
    // Gradients: the scatter-add of take_along_axis and index_select (a repeated index adds twice).
    std::vector<std::int64_t> rep{1, 1, 0, 2, 2, 2};
    // (A feed refers to what it is given, so the view must outlive it: a named view, not a temporary.)
    const auto rep_view = kiln::view(rep.data(), {2, 3});
    const auto feeds = idx = rep_view;
    check_gradient(kiln::sum(kiln::square(kiln::take_along_axis<1>(x, idx))), xv, xs, feeds);
    std::vector<std::int64_t> cols{2, 2, 0};
    check_gradient(kiln::sum(kiln::cumsum<1>(kiln::index_select<1>(x, idx)) * kiln::index_select<1>(x, idx)), xv, xs,
                   idx = kiln::view(cols.data(), {3}));
    check_gradient(kiln::sum(kiln::cumsum<1>(kiln::sort<1>(x)) * kiln::sort<1>(x)), xv, xs);
    check_all_close(tape_gradient([](const kiln::tensor& a) { return kiln::sum(kiln::cumsum(kiln::sort(a, 1), 1) * kiln::sort(a, 1)); }),
                    graph_gradient(kiln::sum(kiln::cumsum<1>(kiln::sort<1>(x)) * kiln::sort<1>(x))), 1e-15, 1e-15);
}

TEST_CASE("outer in graph mode, and the new ops traced: kiln::trace of graph expressions and kiln::function of eager code") {
    std::vector<double> v{1, 2, 3, 4, 5, 6};
    const auto X6 = kiln::view(v.data(), {2, 3});
    constexpr kiln::input<"y", double> y{};
    std::vector<double> yv{1, 10};
    CHECK(flat(kiln::run(kiln::outer(x, y), x = X6, y = kiln::view(yv.data(), {2}))) ==
          std::vector<double>{1, 10, 2, 20, 3, 30, 4, 40, 5, 50, 6, 60});
    check_gradient(kiln::sum(kiln::square(kiln::outer(x, y))), xv, xs, y = kiln::view(yv.data(), {2}));

    const kiln::tensor t = kiln::from_values<double>({3, 1, 2, 6, 5, 4}, {2, 3});
    // Eager code with these ops traces (argsort and the gathers read no data while tracing) and replays.
    auto f = kiln::function([](const kiln::tensor& a) {
        return kiln::sort(a, 1) + kiln::flip(kiln::tile(a, {1, 1}), {0}) + kiln::pad(a, {{0, 0}, {0, 0}}) +
               kiln::repeat(a, 1, 1);
    });
    const auto expect = [](const kiln::tensor& a) {
        return kiln_test::values(kiln::sort(a, 1) + kiln::flip(a, {0}) + a + a);
    };
    CHECK(kiln_test::values(f(t)) == expect(t));
    const kiln::tensor t2 = kiln::from_values<double>({0, 9, 8, 7, -1, 2}, {2, 3});
    CHECK(kiln_test::values(f(t2)) == expect(t2));
    CHECK(f.trace_count() == 1);
    auto g = kiln::function([](const kiln::tensor& a, const kiln::tensor& i) { return kiln::index_select(a, 1, i); });
    CHECK(kiln_test::values(g(t, kiln::from_values<std::int64_t>({2, 0}, {2}))) == std::vector<double>{2, 3, 4, 6});
    CHECK(kiln_test::values(g(t, kiln::from_values<std::int64_t>({1, 1}, {2}))) == std::vector<double>{1, 1, 5, 5});
    CHECK(g.trace_count() == 1);
    CHECK_THROWS_AS(g(t, kiln::from_values<std::int64_t>({1, 7}, {2})), kiln::value_error);
    // A graph-mode expression traces to the same ops.
    auto traced = kiln::trace(kiln::sort<1>(x) + kiln::pad<kiln::width{0, 0}>(kiln::flip<0>(x)));
    CHECK(kiln_test::values(traced(t)) == kiln_test::values(kiln::sort(t, 1) + kiln::flip(t, {0})));
}

TEST_CASE("a traced training-style function with these ops and their gradients is saved, loaded and replayed") {
    // Gradients inside the trace bring the gradient ops (untile, unrepeat, crop, scatter_add_along, index_add).
    auto step = kiln::function([](const kiln::tensor& a, const kiln::tensor& i) {
        kiln::gradient_tape tape;
        tape.watch(a);
        const kiln::tensor loss = kiln::sum(kiln::square(kiln::tile(a, {2, 1}))) +
                                  kiln::sum(kiln::cumsum(kiln::pad(a, {{1, 0}, {0, 2}}, 0.5), 1)) +
                                  kiln::sum(kiln::cumsum(kiln::sort(a, 1), 1)) +
                                  kiln::sum(kiln::cumsum(kiln::repeat(a, 2, 0), 0) * kiln::cumsum(kiln::repeat(a, 2, 0), 1)) +
                                  kiln::sum(kiln::square(kiln::index_select(a, 1, i)));
        return std::tuple(loss, tape.gradient(loss, a));
    });
    const kiln::tensor a = kiln::from_values<float>({0.3f, -1.2f, 0.7f, 2.0f, -0.5f, 0.1f}, {2, 3});
    const kiln::tensor i = kiln::from_values<std::int64_t>({2, 2, 0}, {3});
    const auto [loss, grad] = step(a, i);
    // The same step eagerly.
    kiln::tensor want_loss, want_grad;
    {
        kiln::variable av(a.clone());
        kiln::gradient_tape tape;
        const kiln::tensor x = av;
        want_loss = kiln::sum(kiln::square(kiln::tile(x, {2, 1}))) + kiln::sum(kiln::cumsum(kiln::pad(x, {{1, 0}, {0, 2}}, 0.5), 1)) +
                    kiln::sum(kiln::cumsum(kiln::sort(x, 1), 1)) +
                    kiln::sum(kiln::cumsum(kiln::repeat(x, 2, 0), 0) * kiln::cumsum(kiln::repeat(x, 2, 0), 1)) +
                    kiln::sum(kiln::square(kiln::index_select(x, 1, i)));
        want_grad = tape.gradient(want_loss, av);
    }
    check_all_close(kiln_test::values(loss), kiln_test::values(want_loss), 1e-6, 1e-6);
    check_all_close(kiln_test::values(grad), kiln_test::values(want_grad), 1e-6, 1e-6);
    const std::string path = "layout_ops_step.kfn";
    kiln::save(step, {kiln::spec(kiln::float32, {2, 3}), kiln::spec(kiln::int64, {3})}, path);
    const kiln::loaded_function f = kiln::load(path);
    std::remove(path.c_str());
    const auto out = f({a, i});
    REQUIRE(out.size() == 2);
    check_all_close(kiln_test::values(out[0]), kiln_test::values(want_loss), 1e-6, 1e-6);
    check_all_close(kiln_test::values(out[1]), kiln_test::values(want_grad), 1e-6, 1e-6);
}

TEST_CASE("the registry infers these ops' shapes with the ops' own rules (closed: nothing computed)") {
    for (const char* name : {"tile", "repeat", "pad", "sort", "argsort", "index_select", "take_along_axis"}) {
        INFO(name);
        CHECK(kiln::find_op(name).rule == kiln::shape_rule::closed);
    }
    const kiln::tensor_spec t = kiln::infer("tile", {{kiln::float32, {2, 3}}}, {{"reps", std::vector<std::int64_t>{2, 1, 2}}});
    CHECK(t.dtype == kiln::float32);
    CHECK(t.shape == kiln::dims{2, 2, 6});  // numpy.tile(ones((2, 3)), (2, 1, 2)).shape
    CHECK(kiln::infer("repeat", {{kiln::int32, {2, 3}}}, {{"repeats", 3}}).shape == kiln::dims{18});
    CHECK(kiln::infer("pad", {{kiln::float64, {2, 3}}}, {{"widths", std::vector<std::int64_t>{1, 0, 0, 2}}}).shape == kiln::dims{3, 5});
    CHECK(kiln::infer("argsort", {{kiln::float64, {2, 3}}}, {}).dtype == kiln::int64);
    CHECK(kiln::infer("index_select", {{kiln::float64, {2, 3}}, {kiln::int32, {5}}}, {{"axis", 1}}).shape == kiln::dims{2, 5});
    CHECK(kiln::infer("take_along_axis", {{kiln::float64, {2, 3}}, {kiln::int64, {2, 7}}}, {{"axis", 1}}).shape == kiln::dims{2, 7});
    // The errors are apply's.
    const kiln::tensor x = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    const kiln::tensor fi = kiln::from_values<double>({0, 1}, {2});
    CHECK_THROWS_WITH_AS(kiln::infer("index_select", {{kiln::float64, {2, 3}}, {kiln::float64, {2}}}, {{"axis", 1}}),
                         "kiln: dtype_error in 'index_select': indices must be int32 or int64, not float64", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(kiln::apply("index_select", {x, fi}, {{"axis", 1}}),
                         "kiln: dtype_error in 'index_select': indices must be int32 or int64, not float64", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(kiln::infer("tile", {{kiln::float32, {2, 3}}}, {{"reps", std::vector<std::int64_t>{-1}}}),
                         "kiln: value_error in 'tile': repetitions must be non-negative (shape (2, 3))", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::apply("tile", {x}, {{"reps", std::vector<std::int64_t>{-1}}}),
                         "kiln: value_error in 'tile': repetitions must be non-negative (shape (2, 3))", kiln::value_error);
}

TEST_CASE("einsum in graph mode: the same op as eager mode's, gradients per operand (summed letters broadcast back)") {
    constexpr kiln::input<"y", double> y{};
    std::vector<double> v{1, 2, 3, 4, 5, 6}, u{1, -1, 2, 0.5, 3, -2};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const kiln::tensor t = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    const kiln::tensor s = kiln::from_values<double>({1, -1, 2, 0.5, 3, -2}, {3, 2});
    const auto U32 = kiln::view(u.data(), {3, 2});  // (a feed refers to its view: a named one outlives it)
    const auto Y32 = y = U32;
    // Static operand shapes give a static result shape.
    using S = kiln::detail::shape_of_t<decltype(kiln::einsum<"bij,bjk->kib">(kiln::input<"p", float, kiln::shape<4, 2, 3>>{},
                                                                              kiln::input<"q", float, kiln::shape<4, 3, 5>>{}))>;
    static_assert(std::is_same_v<S, kiln::shape<5, 2, 4>>);
    // A product, a transposed product, a trace-like contraction, an outer product, a sum of one operand's letter.
    CHECK(flat(kiln::run(kiln::einsum<"ij,jk->ik">(x, y), x = X6, Y32)) == kiln_test::values(kiln::matmul(t, s)));
    CHECK(flat(kiln::run(kiln::einsum<"ij,jk->ki">(x, y), x = X6, Y32)) == kiln_test::values(kiln::matmul(t, s).transpose(0, 1)));
    CHECK(kiln::run(kiln::einsum<"ij,ji->">(x, y), x = X6, Y32)() == 1 * 1 + 2 * 2 + 3 * 3 + 4 * -1 + 5 * 0.5 + 6 * -2);
    CHECK(flat(kiln::run(kiln::einsum<"ij,kl->ik">(x, y), x = X6, Y32)) ==
          std::vector<double>{0, 6 * 2.5, 6 * 1, 0, 15 * 2.5, 15 * 1});
    CHECK(kiln_test::values(kiln::einsum("ij,kl->ik", t, s)) == std::vector<double>{0, 6 * 2.5, 6 * 1, 0, 15 * 2.5, 15 * 1});
    CHECK_THROWS_WITH_AS(kiln::run(kiln::einsum<"ij,jk->ik">(x, y), x = X6, y = kiln::view(u.data(), {2, 3})),
                         "kiln: value_error in 'einsum': 'ij,jk->ik': 'j' is 3 in one operand and 2 in the other", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::einsum("ij,jk->iz", t, s),
                         "kiln: value_error in 'einsum': 'ij,jk->iz': an output subscript is in no operand ('z')", kiln::value_error);
    // Gradients against central differences, with letters contracted, kept, batched and summed away.
    const auto feeds = Y32;
    check_gradient(kiln::sum(kiln::square(kiln::einsum<"ij,jk->ik">(x, y))), xv, xs, feeds);
    check_gradient(kiln::sum(kiln::cumsum<0>(kiln::einsum<"ij,kl->ik">(x, y))), xv, xs, feeds);
    check_gradient(kiln::sum(kiln::square(kiln::einsum<"ij,kj->ki">(kiln::transpose(y), x))), xv, xs, feeds);
    check_gradient(kiln::square(kiln::einsum<"ij,ij->">(x, x)), xv, xs);
    // The tape runs the same rule.
    check_all_close(tape_gradient([&](const kiln::tensor& a) { return kiln::sum(kiln::square(kiln::einsum("ij,kl->ik", a, s))); }),
                    [&] {
                        std::vector<double> xm = xv;
                        return flat(kiln::run(kiln::grad(kiln::sum(kiln::square(kiln::einsum<"ij,kl->ik">(x, y))), x),
                                              x = kiln::view(xm.data(), xs), Y32));
                    }(),
                    1e-14, 1e-14);
    // Traced: eager code and a graph-mode expression.
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::einsum("ij,jk->ik", a, b); });
    CHECK(kiln_test::values(f(t, s)) == kiln_test::values(kiln::matmul(t, s)));
    auto traced = kiln::trace(kiln::einsum<"ij,jk->ki">(x, y));
    CHECK(kiln_test::values(traced(t, s)) == kiln_test::values(kiln::matmul(t, s).transpose(0, 1)));
    CHECK(kiln::infer("einsum", {{kiln::float32, {2, 3}}, {kiln::float64, {3, 5}}}, {{"equation", "ij,jk->ki"}}).shape ==
          kiln::dims{5, 2});
}

TEST_CASE("the gathers, scatters, sort order, tiles and pads read strided operands as they read contiguous ones") {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-2, 2);
    std::vector<double> xv20(20);
    for (double& v : xv20) v = std::round(u(rng) * 4) / 4;  // ties, to check stability
    const kiln::tensor x = kiln::from_vector(xv20, kiln::dims{4, 5});
    const kiln::tensor xt = x.transpose(0, 1);  // (5, 4), not contiguous
    REQUIRE_FALSE(xt.is_contiguous());
    const kiln::tensor xc = xt.contiguous();
    const kiln::tensor idx = kiln::from_values<std::int64_t>({0, -1, 2, 3, 1, 1, -4, 0, 2, 3, 3, 0, 1, 2, -2}, {5, 3});
    const kiln::tensor idx_t = kiln::from_values<std::int64_t>({0, 3, 1, 2, 0, -1, 1, 0, 2, 3, 2, 1, 1, 0, -2}, {3, 5}).transpose(0, 1);
    CHECK(kiln_test::values(kiln::take_along_axis(xt, idx, 1)) == kiln_test::values(kiln::take_along_axis(xc, idx, 1)));
    CHECK(kiln_test::values(kiln::take_along_axis(xt, idx_t, 1)) == kiln_test::values(kiln::take_along_axis(xc, idx_t.contiguous(), 1)));
    const kiln::tensor rows = kiln::from_values<std::int64_t>({4, 0, -1, 2}, {4});
    CHECK(kiln_test::values(kiln::index_select(xt, 0, rows)) == kiln_test::values(kiln::index_select(xc, 0, rows)));
    const kiln::tensor cols4 = kiln::from_values<std::int64_t>({3, 0, -1, 2}, {4});
    CHECK(kiln_test::values(kiln::index_select(xt, 1, cols4)) == kiln_test::values(kiln::index_select(xc, 1, cols4)));
    for (int axis : {0, 1}) {
        CHECK(kiln_test::values(kiln::argsort(xt, axis)) == kiln_test::values(kiln::argsort(xc, axis)));
        CHECK(kiln_test::values(kiln::sort(xt, axis, true)) == kiln_test::values(kiln::sort(xc, axis, true)));
    }
    // Stable: equal values keep their order (numpy.argsort(kind="stable") of [1, 0.5, 1, 0.5, 1]).
    CHECK(kiln_test::values(kiln::argsort(kiln::from_values<double>({1, 0.5, 1, 0.5, 1}, {5}))) == std::vector<double>{1, 3, 0, 2, 4});
    CHECK(kiln_test::values(kiln::argsort(kiln::from_values<double>({1, 0.5, 1, 0.5, 1}, {5}), 0, true)) ==
          std::vector<double>{0, 2, 4, 1, 3});
    CHECK(kiln_test::values(kiln::tile(xt, {2, 1, 3})) == kiln_test::values(kiln::tile(xc, {2, 1, 3})));
    CHECK(kiln_test::values(kiln::repeat(xt, 3, 1)) == kiln_test::values(kiln::repeat(xc, 3, 1)));
    CHECK(kiln_test::values(kiln::pad(xt, {{1, 2}, {0, 1}}, -1)) == kiln_test::values(kiln::pad(xc, {{1, 2}, {0, 1}}, -1)));
    CHECK(kiln_test::values(kiln::einsum("ij,kj->ik", xt, xt)) == kiln_test::values(kiln::einsum("ij,kj->ik", xc, xc)));
    // Gradients through the strided operand on the tape, and graph-mode gradients whose g is a broadcast (stride 0).
    {
        kiln::variable v(x.clone());
        kiln::gradient_tape tape;
        const kiln::tensor vt = kiln::tensor(v).transpose(0, 1);
        const kiln::tensor loss = kiln::sum(kiln::square(kiln::take_along_axis(vt, idx, 1))) +
                                  kiln::sum(kiln::cumsum(kiln::index_select(vt, 1, cols4), 1));
        const kiln::tensor gv = tape.gradient(loss, v);
        // By hand: each use of x[i][j] adds 2 x[i][j] (the squares) or its count of later positions (cumsum).
        std::vector<double> want(20, 0.0);
        const std::vector<std::int64_t> iv{0, -1, 2, 3, 1, 1, -4, 0, 2, 3, 3, 0, 1, 2, -2};
        for (int r = 0; r < 5; ++r)
            for (int c = 0; c < 3; ++c) {
                const auto j = static_cast<int>((iv[static_cast<std::size_t>(r * 3 + c)] + 4) % 4);  // xt[r][j] = x[j][r]
                want[static_cast<std::size_t>(j * 5 + r)] += 2 * xv20[static_cast<std::size_t>(j * 5 + r)];
            }
        const std::vector<int> cols{3, 0, 3, 2};  // {3, 0, -1, 2} along xt's axis 1 (extent 4): -1 is 3
        for (int r = 0; r < 5; ++r)
            for (int c = 0; c < 4; ++c) want[static_cast<std::size_t>(cols[static_cast<std::size_t>(c)] * 5 + r)] += 4 - c;
        check_all_close(kiln_test::values(gv), want, 1e-12, 1e-12);
    }
    std::vector<std::int64_t> picks{2, 0, 0, -1};
    check_gradient(kiln::sum(kiln::take_along_axis<0>(kiln::transpose(kiln_test::x), ::idx)), xv, xs,
                   ::idx = kiln::view(picks.data(), {2, 2}));
}

TEST_CASE("index_select's gradient adds each row of g back where it was read, for row-major and strided operands alike") {
    // An embedding's gradient: 6 rows of a (5, 4) table, a row read three times, once by a negative index; against
    // a loop. The same with a strided index and a strided g.
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> u(-1, 1);
    std::vector<double> gv(24);
    for (double& v : gv) v = u(rng);
    const kiln::tensor table = kiln::zeros({5, 4}, kiln::float64);
    const std::vector<std::int64_t> iv{1, 3, -4, 0, 1, 4};
    const kiln::tensor idx = kiln::from_vector(iv, kiln::dims{6});
    const kiln::tensor g = kiln::from_vector(gv, kiln::dims{6, 4});
    std::vector<double> want(20, 0.0);
    for (std::size_t k = 0; k < 6; ++k) {
        const std::int64_t row = iv[k] < 0 ? iv[k] + 5 : iv[k];
        for (std::size_t a = 0; a < 4; ++a) want[static_cast<std::size_t>(row) * 4 + a] += gv[k * 4 + a];
    }
    const auto grads = kiln::op_gradient("index_select", {table, idx}, g, {{"axis", 0}});
    REQUIRE(grads[0]);
    CHECK(kiln_test::values(*grads[0]) == want);
    CHECK_FALSE(grads[1]);
    // Strided: every other element of a longer index; g as a transposed copy transposed back.
    std::vector<std::int64_t> spread(12, 99);
    for (std::size_t k = 0; k < 6; ++k) spread[2 * k] = iv[k];
    const kiln::tensor idx_s = kiln::from_vector(spread, kiln::dims{12}).slice(0, 0, 12, 2);
    const kiln::tensor g_s = g.transpose(0, 1).contiguous().transpose(0, 1);
    REQUIRE_FALSE(idx_s.is_contiguous());
    REQUIRE_FALSE(g_s.is_contiguous());
    CHECK(kiln_test::values(*kiln::op_gradient("index_select", {table, idx_s}, g, {{"axis", 0}})[0]) == want);
    CHECK(kiln_test::values(*kiln::op_gradient("index_select", {table, idx}, g_s, {{"axis", 0}})[0]) == want);
    // Along a middle axis, through the tape, against central differences' exact answer for a linear function.
    const kiln::tensor x = kiln::from_vector(std::vector<double>(2 * 5 * 3, 0.5), kiln::dims{2, 5, 3});
    kiln::gradient_tape tape;
    tape.watch(x);
    const kiln::tensor cols = kiln::from_values<std::int64_t>({4, 4, 0, -1}, {4});
    const kiln::tensor y = kiln::sum(kiln::index_select(x, 1, cols) * 2.0);
    const std::vector<double> gx = kiln_test::values(tape.gradient(y, x));
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t r = 0; r < 5; ++r)
            for (std::size_t c = 0; c < 3; ++c) CHECK(gx[(b * 5 + r) * 3 + c] == (r == 4 ? 6.0 : r == 0 ? 2.0 : 0.0));
    // Columns picked from a matrix (one element per index: the gather's own loop), with a row-major and a strided
    // index, against a loop; an index out of range is refused, except where x has no lines to pick from.
    const kiln::tensor m = kiln::arange(0, 12, 1, kiln::float64).reshape({3, 4});
    const std::vector<std::int64_t> picks{3, -4, 3, 1, -1};
    std::vector<double> cols_want;
    for (std::int64_t r = 0; r < 3; ++r)
        for (std::int64_t p : picks) cols_want.push_back(static_cast<double>(r * 4 + (p < 0 ? p + 4 : p)));
    CHECK(kiln_test::values(kiln::index_select(m, 1, kiln::from_vector(picks, kiln::dims{5}))) == cols_want);
    std::vector<std::int64_t> picks_spread(10, 0);
    for (std::size_t k = 0; k < 5; ++k) picks_spread[2 * k + 1] = picks[k];
    CHECK(kiln_test::values(kiln::index_select(m, 1, kiln::from_vector(picks_spread, kiln::dims{10}).slice(0, 1, 10, 2))) == cols_want);
    CHECK(kiln_test::values(kiln::index_select(m.transpose(0, 1), 0, kiln::from_vector(picks, kiln::dims{5}).slice(0, 0, 5, 2))) ==
          std::vector<double>({3, 7, 11, 3, 7, 11, 3, 7, 11}));
    CHECK_THROWS_WITH_AS(kiln::index_select(m, 1, kiln::from_values<std::int64_t>({4}, {1})),
                         "kiln: value_error in 'index_select': index 4 is out of range for a dimension of size 4", kiln::value_error);
    CHECK(kiln::index_select(kiln::zeros({0, 4}), 1, kiln::from_values<std::int64_t>({9}, {1})).shape() == kiln::dims{0, 1});
    // An index out of range is refused by the gradient as by the gather.
    CHECK_THROWS_AS(kiln::op_gradient("index_select", {table, kiln::from_values<std::int64_t>({5}, {1})}, kiln::ones({1, 4}, kiln::float64), {{"axis", 0}}),
                    kiln::value_error);
}

TEST_CASE("concat, stack, expand_dims and squeeze in graph mode: the same rule and sentences as eager mode's concat") {
    constexpr kiln::input<"y", double> y{};
    std::vector<double> v{1, 2, 3, 4, 5, 6}, u{7, 8, 9, 10};
    const auto X6 = kiln::view(v.data(), {2, 3});
    const auto U4 = kiln::view(u.data(), {2, 2});  // (a feed refers to its view: a named one outlives it)
    const auto Y4 = y = U4;
    const kiln::tensor t = kiln::from_values<double>({1, 2, 3, 4, 5, 6}, {2, 3});
    const kiln::tensor s = kiln::from_values<double>({7, 8, 9, 10}, {2, 2});
    // numpy.concatenate((x, y), axis=1), and three operands along axis 0.
    CHECK(flat(kiln::run(kiln::concat<1>(x, y), x = X6, Y4)) == std::vector<double>{1, 2, 3, 7, 8, 4, 5, 6, 9, 10});
    CHECK(flat(kiln::run(kiln::concat<-1>(x, y), x = X6, Y4)) == kiln_test::values(kiln::concat({t, s}, 1)));
    CHECK(flat(kiln::run(kiln::concat<0>(x, x * 2_c, x), x = X6)) ==
          std::vector<double>{1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12, 1, 2, 3, 4, 5, 6});
    // numpy.stack((x, 2x), axis=0) and axis=-1.
    CHECK(flat(kiln::run(kiln::stack<0>(x, x * 2_c), x = X6)) == std::vector<double>{1, 2, 3, 4, 5, 6, 2, 4, 6, 8, 10, 12});
    const auto last = kiln::run(kiln::stack<-1>(x, x * 2_c), x = X6);
    CHECK(last.shape().size() == 3);
    CHECK(last.shape()[2] == 2);
    CHECK(flat(last) == std::vector<double>{1, 2, 2, 4, 3, 6, 4, 8, 5, 10, 6, 12});
    // Static shapes: concat, expand_dims and squeeze keep them.
    using A = kiln::input<"p", float, kiln::shape<2, 3>>;
    using B = kiln::input<"q", float, kiln::shape<2, 5>>;
    static_assert(std::is_same_v<kiln::detail::shape_of_t<decltype(kiln::concat<1>(A{}, B{}))>, kiln::shape<2, 8>>);
    static_assert(std::is_same_v<kiln::detail::shape_of_t<decltype(kiln::expand_dims<1>(A{}))>, kiln::shape<2, 1, 3>>);
    static_assert(std::is_same_v<kiln::detail::shape_of_t<decltype(kiln::squeeze<1>(kiln::expand_dims<1>(A{})))>, kiln::shape<2, 3>>);
    // The sentences are eager mode's.
    CHECK_THROWS_WITH_AS(kiln::run(kiln::concat<0>(x, y), x = X6, Y4),
                         "kiln: shape_error in 'concat': shapes (2, 3) and (2, 2) differ outside axis 0", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::concat({t, s}, 0), "kiln: shape_error in 'concat': shapes (2, 3) and (2, 2) differ outside axis 0",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::squeeze<0>(x), x = X6),
                         "kiln: value_error in 'squeeze': the axis does not have extent 1 (shape (2, 3))", kiln::value_error);
    // Gradients: each operand gets its part of g.
    const auto feeds = Y4;
    check_gradient(kiln::sum(kiln::cumsum<1>(kiln::concat<1>(x, y)) * kiln::concat<1>(y, x)), xv, xs, feeds);
    check_gradient(kiln::sum(kiln::cumsum<0>(kiln::stack<0>(x, kiln::square(x), x))), xv, xs);
    check_gradient(kiln::sum(kiln::square(kiln::squeeze<0>(kiln::expand_dims<0>(x)) * kiln::cumsum<1>(x))), xv, xs);
    check_all_close(tape_gradient([](const kiln::tensor& a) {
                        return kiln::sum(kiln::cumsum(kiln::stack({a, kiln::square(a), a}, 0), 0));
                    }),
                    graph_gradient(kiln::sum(kiln::cumsum<0>(kiln::stack<0>(x, kiln::square(x), x)))), 1e-14, 1e-14);
    // permute: numpy.transpose(x, (1, 0)) and a rank-3 order, with its static shape and its gradient.
    CHECK(flat(kiln::run(kiln::permute<1, 0>(x), x = X6)) == std::vector<double>{1, 4, 2, 5, 3, 6});
    CHECK(flat(kiln::run(kiln::permute<2, 0, 1>(kiln::stack<0>(x, x * 2_c)), x = X6)) ==
          kiln_test::values(kiln::stack({t, t * 2.0}, 0).permute({2, 0, 1})));
    static_assert(std::is_same_v<kiln::detail::shape_of_t<decltype(kiln::permute<1, 2, 0>(kiln::expand_dims<0>(A{})))>,
                                 kiln::shape<2, 3, 1>>);
    CHECK_THROWS_WITH_AS(kiln::run(kiln::permute<0, 0>(x), x = X6),
                         "kiln: value_error in 'permute': the order must name every axis once (shape (2, 3))", kiln::value_error);
    check_gradient(kiln::sum(kiln::cumsum<0>(kiln::permute<1, 0>(x)) * kiln::permute<1, 0>(x)), xv, xs);
    check_gradient(kiln::sum(kiln::cumsum<2>(kiln::permute<2, 0, 1>(kiln::stack<0>(x, kiln::square(x))))), xv, xs);
    // Traced: a graph-mode expression becomes eager concat and unsqueeze nodes.
    auto traced = kiln::trace(kiln::stack<1>(x, x * 2_c));
    CHECK(kiln_test::values(traced(t)) == kiln_test::values(kiln::stack({t, t * 2.0}, 1)));
}

TEST_CASE("integer scatter_add wraps on overflow like every integer add (eager and traced)") {
    constexpr std::int32_t big = 2147483647;
    const kiln::tensor x = kiln::from_vector(std::vector<std::int32_t>{big, 5}, {2});
    const kiln::tensor index = kiln::from_vector(std::vector<std::int64_t>{0, 0, 1}, {3});
    const kiln::tensor src = kiln::from_vector(std::vector<std::int32_t>{1, 1, 2}, {3});
    // 2^31 - 1 + 2 wraps to -2^31 + 1, as in NumPy's int32 (np.add.at) and PyTorch's scatter_add.
    const std::vector<std::int32_t> want{-2147483647, 7};
    const kiln::tensor eager = kiln::scatter_add(x, 0, index, src);
    CHECK(eager.dtype() == kiln::int32);
    CHECK(std::vector<std::int32_t>(eager.data<std::int32_t>(), eager.data<std::int32_t>() + 2) == want);
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& i, const kiln::tensor& s) {
        return kiln::scatter_add(a, 0, i, s);
    });
    const kiln::tensor traced = f(x, index, src);
    CHECK(std::vector<std::int32_t>(traced.data<std::int32_t>(), traced.data<std::int32_t>() + 2) == want);
    const kiln::tensor x64 = kiln::from_vector(std::vector<std::int64_t>{INT64_MAX, 0}, {2});
    const kiln::tensor src64 = kiln::from_vector(std::vector<std::int64_t>{1, 1, -3}, {3});
    const kiln::tensor r64 = kiln::scatter_add(x64, 0, index, src64);
    CHECK(r64.data<std::int64_t>()[0] == INT64_MIN + 1);
    CHECK(r64.data<std::int64_t>()[1] == -3);
}
