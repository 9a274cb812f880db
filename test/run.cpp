// kiln::run, run_into and fetch on the CPU: sizes around the SIMD width, threads, broadcasting by strides, every
// kind of feed and output, and the run-time errors.
#include <kiln/kiln.hpp>

#include <array>
#include <numeric>
#include <span>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "check.hpp"
#include "threads_guard.hpp"

using namespace kiln::literals;
using kiln_test::threads_guard;
using kiln_test::check_all_close;

namespace {

const auto x = "x"_in;
const auto y = "y"_in;

auto chain = [](auto a, auto b) { return kiln::relu(a * b + 0.5_c * a - b) * 2_c + b; };

// The chain written out by hand in double precision.
double chain_ref(double a, double b) {
    const double t = a * b + 0.5 * a - b;
    return (t > 0 ? t : 0) * 2 + b;
}

template <class T>
std::vector<T> ramp(std::size_t n, double scale, double offset) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(std::sin(scale * static_cast<double>(i)) * 3 + offset);
    return v;
}

}  // namespace

TEST_CASE_TEMPLATE("the chain at every size class, with one and two threads", T, float, double) {
    threads_guard guard;
    const auto xt_ = kiln::input<"x", T>{};
    const auto yt_ = kiln::input<"y", T>{};
    const std::size_t w = xsimd::batch<T>::size;
    for (int threads : {1, 2}) {
        kiln::set_num_threads(threads);
        kiln::set_parallel_threshold(1000);  // makes the larger sizes below split over threads
        for (std::size_t n : {std::size_t{0}, std::size_t{1}, w - 1, w, w + 1, 3 * w + 2, std::size_t{1000},
                              std::size_t{4099}, std::size_t{(1 << 17) + 3}}) {
            CAPTURE(n);
            CAPTURE(threads);
            const auto a = ramp<T>(n, 0.37, 0.1), b = ramp<T>(n, 0.11, -0.2);
            std::vector<double> expected(n);
            for (std::size_t i = 0; i < n; ++i) expected[i] = chain_ref(a[i], b[i]);
            const auto r = kiln::run(chain(xt_, yt_), xt_ = a, yt_ = b);
            REQUIRE(r.dimension() == 1);
            check_all_close(r, expected, 8 * std::numeric_limits<T>::epsilon(), 1e-6);
            std::vector<T> out(n, T(-99));
            kiln::run_into(out, chain(xt_, yt_), xt_ = a, yt_ = b);
            check_all_close(out, expected, 8 * std::numeric_limits<T>::epsilon(), 1e-6);
        }
    }
}

TEST_CASE("broadcasting by strides: size-1 and missing leading dimensions") {
    threads_guard guard;
    const xt::xarray<float> m = {{1, 2, 3}, {4, 5, 6}};
    const xt::xarray<float> row = {10, 20, 30};
    xt::xarray<float> col = xt::zeros<float>({2, 1});
    col(0, 0) = 100;
    col(1, 0) = 200;
    xt::xarray<float> one = xt::zeros<float>({1});
    one(0) = 7.f;

    auto r = kiln::run(x + y, x = m, y = row);
    REQUIRE(r.shape().size() == 2);
    CHECK(r.shape()[0] == 2);
    CHECK(r.shape()[1] == 3);
    check_all_close(r, std::vector<double>{11, 22, 33, 14, 25, 36}, 0);
    check_all_close(kiln::run(x * y, x = m, y = col), std::vector<double>{100, 200, 300, 800, 1000, 1200}, 0);
    check_all_close(kiln::run(x - y, x = row, y = col), std::vector<double>{-90, -80, -70, -190, -180, -170}, 0);
    check_all_close(kiln::run(x * y, x = m, y = one), std::vector<double>{7, 14, 21, 28, 35, 42}, 0);

    // A rank-0 feed broadcasts everywhere.
    const xt::xarray<float> s = 3.f;
    check_all_close(kiln::run(x - y, x = m, y = s), std::vector<double>{-2, -1, 0, 1, 2, 3}, 0);

    // Rank 3 against rank 1 and a middle size-1 dimension, larger than the SIMD width, on two threads.
    kiln::set_num_threads(2);
    kiln::set_parallel_threshold(16);
    xt::xarray<double> big = xt::zeros<double>({4, 1, 19});
    xt::xarray<double> mid = xt::zeros<double>({5, 1});
    for (std::size_t i = 0; i < big.size(); ++i) big.data()[i] = static_cast<double>(i);
    for (std::size_t i = 0; i < mid.size(); ++i) mid.data()[i] = 1000.0 * static_cast<double>(i);
    const auto X = kiln::input<"x", double>{};
    const auto Y = kiln::input<"y", double>{};
    const auto b3 = kiln::run(X + Y, X = big, Y = mid);
    REQUIRE(b3.dimension() == 3);
    CHECK(b3.shape()[0] == 4);
    CHECK(b3.shape()[1] == 5);
    CHECK(b3.shape()[2] == 19);
    for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t j = 0; j < 5; ++j)
            for (std::size_t k = 0; k < 19; ++k) CHECK(b3(i, j, k) == static_cast<double>(i * 19 + k) + 1000.0 * j);
}

TEST_CASE("feeds: xtensor containers, std::vector, std::span, strided kiln::view") {
    const std::vector<float> v{1, 2, 3, 4, 5, 6};
    const std::span<const float> sp(v.data() + 1, 3);
    check_all_close(kiln::run(x * 2_c, x = sp), std::vector<double>{4, 6, 8}, 0);
    xt::xtensor<float, 2> t = {{1, 2}, {3, 4}};
    check_all_close(kiln::run(x + 1_c, x = t), std::vector<double>{2, 3, 4, 5}, 0);
    // A column of a row-major 2x3 matrix, as a strided view, and a transposed view.
    const auto col = kiln::view(v.data() + 1, {2}, {3});
    check_all_close(kiln::run(x + 0.5_c, x = col), std::vector<double>{2.5, 5.5}, 0);
    const auto tr = kiln::view(v.data(), {3, 2}, {1, 3});
    check_all_close(kiln::run(x * 1_c + y, x = tr, y = std::vector<float>{0, 10}),
                    std::vector<double>{1, 14, 2, 15, 3, 16}, 0);
    // A column-major xarray.
    xt::xarray<float, xt::layout_type::column_major> cm = {{1, 2, 3}, {4, 5, 6}};
    const auto r = kiln::run(x + 0_c * x, x = cm);
    CHECK(r(1, 0) == 4.f);
    CHECK(r(0, 2) == 3.f);
    // An xtensor adaptor over external memory.
    std::vector<double> raw{1, 2, 3, 4};
    auto adapted = xt::adapt(raw, std::vector<std::size_t>{2, 2});
    const auto X = kiln::input<"x", double>{};
    CHECK(kiln::run(X * X, X = adapted)(1, 1) == 16.0);
    // kiln::view over a contiguous range gives it a shape, and checks its length against the shape.
    const auto m = kiln::view(v, {2, 3});
    const auto rm = kiln::run(x * 1_c + y, x = m, y = std::vector<float>{0, 10, 20});
    REQUIRE(rm.dimension() == 2);
    CHECK(rm(0, 0) == 1.f);
    CHECK(rm(1, 2) == 26.f);
    std::array<double, 4> a{1, 2, 3, 4};
    CHECK(kiln::run(X * X, X = kiln::view(a, {2, 2}))(1, 0) == 9.0);
    std::vector<float> out(6);
    kiln::run_into(kiln::view(out, {2, 3}), x + 1_c, x = m);
    CHECK(out == std::vector<float>{2, 3, 4, 5, 6, 7});
    CHECK_THROWS_WITH_AS(kiln::view(v, {2, 4}),
                         "kiln: shape_error in 'view': the range holds 6 elements, and shape (2, 4) needs 8",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::view(out, {5}), kiln::shape_error);
}

// Feeds built from temporary handles and kept for later runs: the feed holds the view, span or tensor itself.
// (Under the clang build's AddressSanitizer a feed that pointed at the dead temporary fails here.)
auto feed_of_view(const std::vector<float>& v) { return x = kiln::view(v.data() + 1, {2}, {2}); }

TEST_CASE("feeds of temporary views, spans and tensors may be kept") {
    const std::vector<float> v{1, 2, 3, 4, 5};
    const auto fx = feed_of_view(v);  // every other element from the second: 2, 4
    auto fy = y = std::span<const float>(v.data(), 2);
    static_assert(requires { fx.value.strides; fy.value.size(); }, "temporary handles are held by value");
    std::vector<float> scratch(64, -1.0f);  // reuses the stack that the temporaries had
    CHECK(scratch[0] == -1.0f);
    check_all_close(kiln::run(x * 10_c + y, fx, fy), std::vector<double>{21, 42}, 0);
    const auto ft = x = kiln::from_vector(std::vector<float>{7, 8}, {2});
    check_all_close(kiln::run(x - y, ft, fy), std::vector<double>{6, 6}, 0);
    std::vector<float> out(2);
    kiln::run_into(out, x * y, ft, fy);
    CHECK(out == std::vector<float>{7, 16});
    // An lvalue is referred to, not copied: a later change to it shows.
    std::vector<float> w{1, 1};
    const auto fw = y = w;
    static_assert(requires { fw.data; }, "an lvalue container is referred to");
    w[1] = 3;
    check_all_close(kiln::run(x * y, ft, fw), std::vector<double>{7, 24}, 0);
}

TEST_CASE("results have a static rank when the inputs declare static shapes") {
    const auto a = kiln::input<"a", float, kiln::shape<kiln::dyn, 3>>{};
    const auto b = kiln::input<"b", float, kiln::shape<3>>{};
    const xt::xtensor<float, 2> ma = {{1, 2, 3}, {4, 5, 6}};
    const std::vector<float> vb{1, 1, 2};
    auto r = kiln::run(a * b, a = ma, b = vb);
    static_assert(std::is_same_v<decltype(r), kiln::xtensor<float, 2>>);
    check_all_close(r, std::vector<double>{1, 2, 6, 4, 5, 12}, 0);
    auto d = kiln::run(x * 2_c, x = vb);
    static_assert(std::is_same_v<decltype(d), kiln::xarray<float>>);
}

TEST_CASE("fetch computes several roots in one pass") {
    const std::vector<float> a{1, -2, 3}, b{2, 2, 2};
    auto [s, p, c] = kiln::run(kiln::fetch(x + y, x * y, x > y), x = a, y = b);
    check_all_close(s, std::vector<double>{3, 0, 5}, 0);
    check_all_close(p, std::vector<double>{2, -4, 6}, 0);
    check_all_close(c, std::vector<double>{0, 0, 1}, 0);
    // Roots of different shapes run as separate loops.
    const xt::xarray<float> m = {{1, 2, 3}, {4, 5, 6}};
    auto [full, own] = kiln::run(kiln::fetch(x + y, y * 2_c), x = m, y = b);
    CHECK(full.dimension() == 2);
    check_all_close(full, std::vector<double>{3, 4, 5, 6, 7, 8}, 0);
    check_all_close(own, std::vector<double>{4, 4, 4}, 0);
}

TEST_CASE("run_into writes in place and does not reallocate") {
    std::vector<float> out(4, 0.f);
    const float* before = out.data();
    kiln::run_into(out, x * x, x = std::vector<float>{1, 2, 3, 4});
    CHECK(out.data() == before);
    check_all_close(out, std::vector<double>{1, 4, 9, 16}, 0);
    // Into a strided view: every other element.
    std::vector<float> wide(8, -1.f);
    kiln::run_into(kiln::view(wide.data(), {4}, {2}), x + 1_c, x = std::vector<float>{1, 2, 3, 4});
    check_all_close(wide, std::vector<double>{2, -1, 3, -1, 4, -1, 5, -1}, 0);
    // In place: the output is also the input.
    std::vector<float> v{1, 2, 3};
    kiln::run_into(v, x * 10_c, x = v);
    check_all_close(v, std::vector<double>{10, 20, 30}, 0);
    // Long enough to peel a head up to alignment (the view starts one element in) and with a partial tail: in
    // place the head and tail are padded batches, out of place they are full batches stored twice; both must give
    // every element once.
    for (const std::ptrdiff_t n : {1003, 1000, 300, 13}) {
        std::vector<float> mem(static_cast<std::size_t>(n) + 1), src(static_cast<std::size_t>(n)), other(src.size());
        std::vector<double> expect(src.size());
        for (std::size_t i = 0; i < src.size(); ++i) {
            src[i] = static_cast<float>(i % 17) - 8.f;
            expect[i] = static_cast<double>(src[i]) * 3 + 1;
        }
        std::copy(src.begin(), src.end(), mem.begin() + 1);
        const auto in_place = kiln::view(mem.data() + 1, {n});
        kiln::run_into(in_place, x * 3_c + 1_c, x = in_place);
        check_all_close(std::vector<float>(mem.begin() + 1, mem.end()), expect, 0);
        kiln::run_into(kiln::view(other.data(), {n}), x * 3_c + 1_c, x = kiln::view(mem.data() + 1, {n}));
        for (auto& e : expect) e = e * 3 + 1;
        check_all_close(other, expect, 0);
    }
    // Rows of a matrix with a broadcast row, in place and not: (37, 13) * (13,).
    std::vector<float> m(37 * 13), row(13), product(m.size());
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i % 11);
    for (std::size_t j = 0; j < row.size(); ++j) row[j] = static_cast<float>(j) - 6.f;
    std::vector<double> prod(m.size());
    for (std::size_t i = 0; i < m.size(); ++i) prod[i] = static_cast<double>(m[i]) * row[i % 13];
    kiln::run_into(kiln::view(product.data(), {37, 13}), x * y, x = kiln::view(m.data(), {37, 13}), y = row);
    check_all_close(product, prod, 0);
    kiln::run_into(kiln::view(m.data(), {37, 13}), x * y, x = kiln::view(m.data(), {37, 13}), y = row);
    check_all_close(m, prod, 0);
}

TEST_CASE("run_into over dense containers takes raw pointers only when every shape agrees") {
    // xtensor row-major containers of one shape: the chain, element by element.
    xt::xtensor<float, 2> a = xt::zeros<float>({std::size_t{7}, std::size_t{37}}), b = a, out = a;
    std::vector<double> expected(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        a.data()[i] = static_cast<float>(std::sin(0.3 * static_cast<double>(i)) * 3);
        b.data()[i] = static_cast<float>(std::cos(0.7 * static_cast<double>(i)));
        expected[i] = chain_ref(a.data()[i], b.data()[i]);
    }
    kiln::run_into(out, chain(x, y), x = a, y = b);
    check_all_close(std::vector<float>(out.begin(), out.end()), expected, 8e-7, 1e-6);
    // std::span, std::array and an xtensor<T, 1> output mix.
    const std::array<float, 5> arr{1, 2, 3, 4, 5};
    const std::vector<float> vec{10, 20, 30, 40, 50};
    xt::xtensor<float, 1> o1 = xt::zeros<float>({std::size_t{5}});
    kiln::run_into(o1, x * y - x, x = std::span<const float>(arr), y = vec);
    check_all_close(std::vector<float>(o1.begin(), o1.end()), std::vector<double>{9, 38, 87, 156, 245}, 0);
    // A column-major feed is not one row-major range: it is read by its strides.
    xt::xarray<float, xt::layout_type::column_major> cm = {{1, 2, 3}, {4, 5, 6}};
    xt::xtensor<float, 2> rm = {{10, 20, 30}, {40, 50, 60}}, sum = xt::zeros<float>({2, 3});
    kiln::run_into(sum, x + y, x = cm, y = rm);
    check_all_close(std::vector<float>(sum.begin(), sum.end()), std::vector<double>{11, 22, 33, 44, 55, 66}, 0);
    // A row broadcast over a dense matrix takes the strided path.
    const std::vector<float> row{1, 2, 3};
    kiln::run_into(sum, x * y, x = rm, y = row);
    check_all_close(std::vector<float>(sum.begin(), sum.end()), std::vector<double>{10, 40, 90, 40, 100, 180}, 0);
    // Same element count, other shape: an error, not a flat run.
    std::vector<float> flat(6, 7.f);
    CHECK_THROWS_WITH_AS(kiln::run_into(flat, x + y, x = rm, y = rm),
                         "kiln: shape_error in 'run_into': the output has shape (6,) but the expression gives shape (2, 3)",
                         kiln::shape_error);
    CHECK(flat[0] == 7.f);
    const std::vector<float> four(4), six(6);
    CHECK_THROWS_WITH_AS(kiln::run_into(flat, x + y, x = six, y = four),
                         "kiln: shape_error in 'add': cannot broadcast shapes (6,) and (4,)", kiln::shape_error);
    // A statically shaped input keeps its declared-shape check.
    const auto s = kiln::input<"s", float, kiln::shape<kiln::dyn, 3>>{};
    CHECK_THROWS_WITH_AS(kiln::run_into(flat, s * 2_c, s = six),
                         "kiln: shape_error in 'run_into': input 's' is declared with shape (?, 3) but was fed shape (6,)",
                         kiln::shape_error);
    // In place through the unrolled loop, at sizes around two batches.
    for (std::size_t n : {std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{33}, std::size_t{1001}}) {
        std::vector<float> v(n);
        std::vector<double> want(n);
        for (std::size_t i = 0; i < n; ++i) {
            v[i] = static_cast<float>(i % 13) - 6.f;
            want[i] = static_cast<double>(v[i]) * 3 + 1;
        }
        kiln::run_into(v, x * 3_c + 1_c, x = v);
        check_all_close(v, want, 0);
    }
}

TEST_CASE("run-time shape errors name the op and both shapes") {
    const std::vector<float> a(3), b(4);
    try {
        (void)kiln::run(kiln::relu(x * y) + x, x = a, y = b);
        FAIL("expected a shape_error");
    } catch (const kiln::shape_error& e) {
        CHECK(std::string(e.what()) == "kiln: shape_error in 'mul': cannot broadcast shapes (3,) and (4,)");
    }
    const xt::xarray<float> m = xt::zeros<float>({2, 3}), n = xt::zeros<float>({3, 2});
    CHECK_THROWS_WITH_AS((void)kiln::run(x + 1_c - y, x = m, y = n),
                         "kiln: shape_error in 'sub': cannot broadcast shapes (2, 3) and (3, 2)", kiln::shape_error);
    std::vector<float> out(5);
    CHECK_THROWS_WITH_AS(kiln::run_into(out, x * 2_c, x = a),
                         "kiln: shape_error in 'run_into': the output has shape (5,) but the expression gives shape (3,)",
                         kiln::shape_error);
    const auto s = kiln::input<"s", float, kiln::shape<kiln::dyn, 3>>{};
    CHECK_THROWS_WITH_AS((void)kiln::run(s * 2_c, s = n),
                         "kiln: shape_error in 'run': input 's' is declared with shape (?, 3) but was fed shape (3, 2)",
                         kiln::shape_error);
    CHECK_THROWS_AS((void)kiln::view(a.data(), {3}, {1, 1}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::set_num_threads(0), kiln::value_error);
    // Errors are kiln::error, and nothing was written on failure.
    std::vector<float> untouched(4, 7.f);
    CHECK_THROWS_AS(kiln::run_into(untouched, x + y, x = a, y = b), kiln::error);
    CHECK(untouched[0] == 7.f);
}

TEST_CASE("zero-size inputs give empty results of the broadcast shape") {
    const xt::xarray<float> empty = xt::zeros<float>({0, 3});
    const std::vector<float> row{1, 2, 3};
    const auto r = kiln::run(x + y, x = empty, y = row);
    CHECK(r.size() == 0);
    CHECK(r.shape()[0] == 0);
    CHECK(r.shape()[1] == 3);
}

TEST_CASE("the thread pool runs every task exactly once, across resizes") {
    threads_guard guard;
    kiln::set_num_threads(2);
    std::vector<std::atomic<int>> hits(8);
    long expected = 0;
    for (int it = 0; it < 20000; ++it) {
        if (it % 1000 == 999) kiln::set_num_threads(1 + (it / 1000) % 3);
        const int n = 2 + it % 7;
        kiln::detail::thread_pool::instance().parallel_for(n, [&](int t) {
            volatile double sink = 0;
            for (int k = 0; k < 50 * (t + 1); ++k) sink = sink + k;  // uneven work, so both threads take tasks
            hits[static_cast<std::size_t>(t)].fetch_add(1);
        });
        expected += n;
    }
    long total = 0;
    for (auto& h : hits) total += h.load();
    CHECK(total == expected);
    CHECK(hits[0].load() == 20000);
    CHECK(hits[7].load() == 20000 * 1 / 7 + (20000 % 7 > 6 ? 1 : 0));
}

TEST_CASE("the flat loop writes every element once at every alignment and size") {
    // The contiguous loop peels to the output's alignment, computes the head and the last batch first (full
    // unaligned batches when nothing aliases), then runs software-pipelined batches. Every combination of output
    // and input offsets, around the batch width and the peel threshold, must give each element and nothing more.
    threads_guard guard;
    kiln::set_num_threads(1);
    const std::ptrdiff_t before = kiln::streaming_threshold();
    for (const std::ptrdiff_t threshold : {before, std::ptrdiff_t{0}}) {
        kiln::set_streaming_threshold(threshold);
        for (const std::size_t n : {1, 7, 8, 9, 16, 17, 24, 31, 255, 256, 257, 263, 1031}) {
            for (const std::size_t oo : {0, 1, 2, 3, 5, 7}) {
                for (const std::size_t xo : {0, 1, 4}) {
                    std::vector<float> xs(n + 8), ys(n + 8), out(n + 16, -99.f);
                    for (std::size_t i = 0; i < xs.size(); ++i) {
                        xs[i] = static_cast<float>(i % 23) - 11.f;
                        ys[i] = static_cast<float>(i % 7);
                    }
                    const auto len = static_cast<std::ptrdiff_t>(n);
                    kiln::run_into(kiln::view(out.data() + oo, {len}), x * 3_c + y,
                                   x = kiln::view(xs.data() + xo, {len}), y = kiln::view(ys.data() + 1, {len}));
                    std::size_t wrong = 0, first = out.size();
                    for (std::size_t i = 0; i < out.size(); ++i) {
                        const float want =
                            i >= oo && i < oo + n ? xs[i - oo + xo] * 3.f + ys[i - oo + 1] : -99.f;
                        if (out[i] != want && wrong++ == 0) first = i;
                    }
                    INFO("n " << n << ", output offset " << oo << ", input offset " << xo << ", streaming threshold "
                              << threshold << ": first wrong element " << first);
                    CHECK(wrong == 0);
                }
            }
        }
    }
    kiln::set_streaming_threshold(before);
}

TEST_CASE("streaming stores give the same results") {
    threads_guard guard;
    const std::ptrdiff_t before = kiln::streaming_threshold();
    kiln::set_streaming_threshold(0);
    for (std::size_t n : {std::size_t{5}, std::size_t{64}, std::size_t{1001}, std::size_t{(1 << 18) + 5}}) {
        const auto a = ramp<float>(n, 0.37, 0.1), b = ramp<float>(n, 0.11, -0.2);
        std::vector<float> out(n + 1);
        // Start one element in, so the output is misaligned and the peel runs before the streaming loop.
        auto view = kiln::view(out.data() + 1, {static_cast<std::ptrdiff_t>(n)});
        kiln::run_into(view, chain(x, y), x = a, y = b);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(kiln_test::close(out[i + 1], chain_ref(a[i], b[i]), 1e-6, 1e-6));
    }
    kiln::set_streaming_threshold(before);
    CHECK(kiln::streaming_threshold() == before);
}
