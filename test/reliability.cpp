// What a 10,000-program NumPy differential, hostile .npy files and the sanitizers found (issue: reliability): each
// case reproduces one finding. Also built with -fsanitize=address,undefined by the test command, so that every size
// and integer case here also proves the absence of undefined behaviour.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::values;

namespace {

kiln::tensor f32(std::initializer_list<float> v, kiln::dims shape) { return kiln::from_values<float>(v, shape); }
kiln::tensor i32(std::initializer_list<std::int32_t> v, kiln::dims shape) { return kiln::from_values<std::int32_t>(v, shape); }
kiln::tensor i64(std::initializer_list<std::int64_t> v, kiln::dims shape) { return kiln::from_values<std::int64_t>(v, shape); }
kiln::tensor bools(std::initializer_list<bool> v, kiln::dims shape) { return kiln::from_values<bool>(v, shape); }

constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
constexpr double pinf = std::numeric_limits<double>::infinity();

// The exception's message, or "" when nothing was thrown.
template <class F>
std::string message_of(F&& f) {
    try {
        f();
    } catch (const kiln::error& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("zero-size tensors reshape, copy and reduce (a (2, 0) tensor once recursed until the stack overflowed)") {
    const auto z = kiln::zeros({2, 0});
    CHECK(z.is_contiguous());
    CHECK(z.reshape({0}).shape() == kiln::dims{0});
    CHECK(z.reshape({0, 5}).shape() == kiln::dims{0, 5});
    CHECK(z.transpose(0, 1).contiguous().shape() == kiln::dims{0, 2});
    CHECK(z.clone().numel() == 0);
    const auto x = kiln::zeros({3, 2, 0});
    CHECK(kiln::sum(x, {1}).shape() == kiln::dims{3, 0});
    CHECK(kiln::prod(x, {1}).shape() == kiln::dims{3, 0});
    CHECK(kiln::mean(x, {1}).shape() == kiln::dims{3, 0});
    CHECK(kiln::max(x, {1}).shape() == kiln::dims{3, 0});
    CHECK(kiln::min(x, {1}).shape() == kiln::dims{3, 0});
    CHECK(kiln::argmax(x, 1).shape() == kiln::dims{3, 0});
    CHECK(kiln::argmin(x, 0).shape() == kiln::dims{2, 0});
    CHECK(kiln::sum(x).item<double>() == 0.0);
    CHECK(kiln::prod(x).item<double>() == 1.0);
    CHECK_THROWS_AS(kiln::max(x, {2}), kiln::value_error);  // over the empty axis itself: no identity
    // Empty shapes whose other extents multiply past 2^63 (found by fuzzing load_npy): no overflow anywhere.
    const auto huge = kiln::zeros({4000352850118, 20200000, 0, 3});
    CHECK(huge.numel() == 0);
    CHECK(huge.permute({3, 2, 1, 0}).contiguous().numel() == 0);
    CHECK(kiln::sum(huge, {0, 1}).shape() == kiln::dims{0, 3});
    CHECK(kiln::mean(huge, {0, 1, 3}).shape() == kiln::dims{0});
}

TEST_CASE("where with a number in either branch takes the number's value and promotes like a binary op") {
    const auto c = bools({true, false, true}, {3});
    const auto x = f32({1, 2, 3}, {3});
    CHECK(values(kiln::where(c, x, -1.5)) == std::vector<double>{1, -1.5, 3});
    CHECK(values(kiln::where(c, -1.5, x)) == std::vector<double>{-1.5, 2, -1.5});
    CHECK(values(kiln::where(c, 7, -1.5)) == std::vector<double>{7, -1.5, 7});
    CHECK(kiln::where(c, 7, -1.5).dtype() == kiln::float32);
    CHECK(kiln::where(c, 7, 8).dtype() == kiln::int64);
    const auto xi = i32({1, 2, 3}, {3});
    CHECK(kiln::where(c, xi, 2.5).dtype() == kiln::float32);  // a number across kinds promotes, as int32 * 0.5 does
    CHECK(values(kiln::where(c, xi, 2.5)) == std::vector<double>{1, 2.5, 3});
    CHECK(kiln::where(c, xi, 4).dtype() == kiln::int32);      // within a kind it does not
    CHECK(kiln::where(c, c, 5).dtype() == kiln::int64);
    CHECK(values(kiln::where(c, c, 5)) == std::vector<double>{1, 5, 1});
    CHECK(kiln::where(c, x, 2.0).dtype() == kiln::float32);
}

TEST_CASE("maximum and minimum propagate NaN from either operand on the scalar, SIMD and strided paths") {
    for (std::ptrdiff_t n : {1, 3, 8, 16, 37, 1000}) {
        CAPTURE(n);
        const auto a = kiln::full({n}, qnan), b = kiln::ones({n});
        for (const auto& r : {kiln::maximum(a, b), kiln::minimum(a, b), kiln::maximum(b, a), kiln::minimum(b, a)})
            CHECK(std::isnan(r.at<double>({n - 1})));
        for (const auto& r : {kiln::maximum(a.to(kiln::float64), 1.0), kiln::minimum(2.0, a.to(kiln::float64))})
            CHECK(std::isnan(r.at<double>({0})));
    }
    const auto m = kiln::full({16, 16}, qnan), o = kiln::ones({16, 16});
    CHECK(std::isnan(kiln::maximum(m.transpose(0, 1), o).at<double>({3, 5})));
    // Ordinary values are still the larger and smaller one.
    CHECK(values(kiln::maximum(f32({1, 5, -3}, {3}), f32({2, 4, -4}, {3}))) == std::vector<double>{2, 5, -3});
    CHECK(values(kiln::minimum(f32({1, 5, -3}, {3}), f32({2, 4, -4}, {3}))) == std::vector<double>{1, 4, -4});
}

TEST_CASE("in-place ops read an overlapping source as if it were copied first") {
    auto y = kiln::arange(0, 6, 1, kiln::float64);
    auto head = y.slice(0, 1, 6);
    head += y.slice(0, 0, 5);
    CHECK(values(y) == std::vector<double>{0, 1, 3, 5, 7, 9});
    auto m = kiln::arange(0, 9, 1, kiln::float32).reshape({3, 3});
    m += m.transpose(0, 1);
    CHECK(values(m) == std::vector<double>{0, 4, 8, 4, 8, 12, 8, 12, 16});
    auto same = kiln::arange(0, 4, 1, kiln::float32);
    same *= same;  // the same view: element i reads only element i
    CHECK(values(same) == std::vector<double>{0, 1, 4, 9});
}

TEST_CASE("in-place writes through a broadcast view are refused") {
    auto t = kiln::ones({1});
    auto b = t.broadcast_to({1000000});
    const std::string msg = message_of([&] { b += 1; });
    CHECK(contains(msg, "kiln: value_error in 'add_' (in place)"));
    CHECK(contains(msg, "broadcast view"));
    CHECK(t.item<float>() == 1.0f);
    auto rows = kiln::ones({3}).unsqueeze(0).broadcast_to({4, 3});
    CHECK_THROWS_AS(rows *= 2, kiln::value_error);
    auto fine = kiln::ones({1, 3});
    fine *= 2;  // a size-1 dimension is not a repeat
    CHECK(values(fine) == std::vector<double>{2, 2, 2});
}

TEST_CASE("float64 log of subnormals is right on the SIMD path (and float32's)") {
    const double tiny = 5e-324;
    for (std::ptrdiff_t n : {1, 4, 16, 33}) {
        CAPTURE(n);
        const auto l = kiln::log(kiln::full({n}, tiny, kiln::float64));
        CHECK(kiln_test::close(l.at<double>({n - 1}), std::log(tiny), 1e-14));
        const auto lf = kiln::log(kiln::full({n}, 1e-45, kiln::float32));
        CHECK(kiln_test::close(lf.at<double>({n - 1}), std::log(1e-45f), 1e-6));
        const auto mixed = kiln::log(kiln::linspace(1e-310, 2e-308, n, kiln::float64));
        const auto xs = values(kiln::linspace(1e-310, 2e-308, n, kiln::float64));
        for (std::ptrdiff_t i = 0; i < n; ++i) CHECK(kiln_test::close(mixed.at<double>({i}), std::log(xs[i]), 1e-14));
    }
    const auto special = kiln::log(kiln_test::f64({0.0, -1.0, pinf, 1.0, qnan, 2.2250738585072014e-308, 1, 1}, {8}));
    CHECK(special.at<double>({0}) == -pinf);
    CHECK(std::isnan(special.at<double>({1})));
    CHECK(special.at<double>({2}) == pinf);
    CHECK(special.at<double>({3}) == 0.0);
    CHECK(std::isnan(special.at<double>({4})));
    CHECK(kiln_test::close(special.at<double>({5}), std::log(2.2250738585072014e-308), 1e-15));
}

TEST_CASE("repeated axes are refused after negative axes are normalized") {
    const auto x = kiln::zeros({2, 3});
    const std::string msg = message_of([&] { kiln::sum(x, {0, -2}); });
    CHECK(msg == "kiln: value_error in 'sum': axis -2 repeats (axes {0, -2} on shape (2, 3))");
    CHECK_THROWS_AS(kiln::max(x, {1, -1}), kiln::value_error);
    CHECK_THROWS_AS(kiln::mean(x, {-1, 1}), kiln::value_error);
    CHECK(kiln::sum(x, {0, -1}).shape() == kiln::dims{});
}

TEST_CASE("integer division is true division; floor_divide and remainder are Python's") {
    const auto a = i32({7, -7, 7, -7, 0}, {5}), b = i32({2, 2, -2, -2, 3}, {5});
    CHECK((a / b).dtype() == kiln::float32);
    CHECK(values(a / b) == std::vector<double>{3.5, -3.5, -3.5, 3.5, 0});
    CHECK((i64({1}, {1}) / i64({4}, {1})).dtype() == kiln::float32);
    CHECK((a / 2).dtype() == kiln::float32);
    CHECK((bools({true}, {1}) / bools({true}, {1})).dtype() == kiln::float32);
    CHECK(values(kiln::floor_divide(a, b)) == std::vector<double>{3, -4, -4, 3, 0});
    CHECK(kiln::floor_divide(a, b).dtype() == kiln::int32);
    CHECK(values(kiln::remainder(a, b)) == std::vector<double>{1, 1, -1, -1, 0});
    CHECK(values(kiln::floor_divide(a, 0)) == std::vector<double>{0, 0, 0, 0, 0});  // as kiln's integer division
    CHECK(values(kiln::floor_divide(f32({7, -7}, {2}), 2.0)) == std::vector<double>{3, -4});
    CHECK(values(kiln::remainder(f32({7, -7, 5.5f}, {3}), 2.0)) == std::vector<double>{1, 1, 1.5});
    CHECK(values(kiln::remainder(f32({7, -7}, {2}), -2.0)) == std::vector<double>{-1, -1});
    const auto lo = i32({std::numeric_limits<std::int32_t>::min()}, {1});
    CHECK(values(kiln::floor_divide(lo, -1)) == std::vector<double>{std::numeric_limits<std::int32_t>::min()});
    auto in = i32({1, 2}, {2});
    const kiln::tensor& same = in;  // (the same tensor on both sides, without clang's self-assignment warning)
    const std::string msg = message_of([&] { in /= same; });
    CHECK(msg == "kiln: dtype_error in 'div_' (in place): the result's dtype float32 cannot be stored in the output's "
                 "dtype int32 (a result may not move from floating to integer or from a number to bool)");
    CHECK_THROWS_AS(in /= 2, kiln::dtype_error);
}

TEST_CASE("integer ** integer stays an integer") {
    const auto a = i32({3, -2, 2, 1, -1, 2, 0}, {7}), b = i32({3, 3, 0, -5, -3, -1, 0}, {7});
    const auto p = kiln::pow(a, b);
    CHECK(p.dtype() == kiln::int32);
    CHECK(values(p) == std::vector<double>{27, -8, 1, 1, -1, 0, 1});
    CHECK(kiln::pow(i64({2}, {1}), 62).dtype() == kiln::int64);
    CHECK(kiln::pow(i64({2}, {1}), 62).item<std::int64_t>() == (std::int64_t{1} << 62));
    CHECK(kiln::pow(i64({2}, {1}), 64).item<std::int64_t>() == 0);  // wraps
    CHECK(kiln::pow(a, 0.5).dtype() == kiln::float32);
    CHECK(kiln::pow(f32({2}, {1}), i32({3}, {1})).dtype() == kiln::float32);
}

TEST_CASE("bool op bool stays bool; sub and neg of bools are refused") {
    const auto x = bools({true, true, false, false}, {4}), y = bools({true, false, true, false}, {4});
    for (const auto& r : {x + y, x * y, kiln::maximum(x, y), kiln::minimum(x, y), kiln::logical_and(x, y),
                          kiln::logical_or(x, y), kiln::logical_xor(x, y), kiln::logical_not(x)})
        CHECK(r.dtype() == kiln::bool_);
    CHECK(values(x + y) == std::vector<double>{1, 1, 1, 0});
    CHECK(values(x * y) == std::vector<double>{1, 0, 0, 0});
    CHECK(values(kiln::maximum(x, y)) == std::vector<double>{1, 1, 1, 0});
    CHECK(values(kiln::minimum(x, y)) == std::vector<double>{1, 0, 0, 0});
    CHECK(values(kiln::logical_xor(x, y)) == std::vector<double>{0, 1, 1, 0});
    CHECK(values(kiln::logical_not(x)) == std::vector<double>{0, 0, 1, 1});
    CHECK(values(kiln::logical_and(f32({0, 2.5f}, {2}), i32({3, 3}, {2}))) == std::vector<double>{0, 1});
    CHECK(message_of([&] { (void)(x - y); }) ==
          "kiln: dtype_error in 'sub': 'sub' is not defined for bool operands (use logical_xor or logical_not, or "
          "convert with .to(kiln::int64))");
    CHECK_THROWS_AS(-x, kiln::dtype_error);
    CHECK_THROWS_AS(kiln::pow(x, y), kiln::dtype_error);
    CHECK((x + 1).dtype() == kiln::int64);
    CHECK(values(x - 1) == std::vector<double>{0, 0, -1, -1});  // bool with an integer is an integer op
}

TEST_CASE("in-place promotion treats bool as its own kind, with a message that names the op and both dtypes") {
    auto b = bools({true, false}, {2});
    CHECK(message_of([&] { b += 1; }) ==
          "kiln: dtype_error in 'add_' (in place): the result's dtype int64 cannot be stored in the output's dtype "
          "bool (a result may not move from floating to integer or from a number to bool)");
    CHECK_THROWS_AS(b += i32({1, 1}, {2}), kiln::dtype_error);
    CHECK_THROWS_AS(b *= 2.0, kiln::dtype_error);
    b += bools({false, true}, {2});  // bool into bool: logical or
    CHECK(values(b) == std::vector<double>{1, 1});
    auto i = i32({1, 2}, {2});
    i += b;  // bool into an integer tensor is allowed
    CHECK(values(i) == std::vector<double>{2, 3});
    auto f = f32({1, 2}, {2});
    f += i;
    CHECK(values(f) == std::vector<double>{3, 5});
}

TEST_CASE("the promotion table of docs/eager-mode.md, cell by cell") {
    using kiln::dtype;
    const dtype all[] = {kiln::bool_, kiln::int32, kiln::int64, kiln::float32, kiln::float64};
    // Rows and columns in the order above; the table for add, mul, maximum, minimum (and sub, except bool - bool).
    const dtype table[5][5] = {
        {kiln::bool_, kiln::int32, kiln::int64, kiln::float32, kiln::float64},
        {kiln::int32, kiln::int32, kiln::int64, kiln::float32, kiln::float64},
        {kiln::int64, kiln::int64, kiln::int64, kiln::float32, kiln::float64},
        {kiln::float32, kiln::float32, kiln::float32, kiln::float32, kiln::float64},
        {kiln::float64, kiln::float64, kiln::float64, kiln::float64, kiln::float64}};
    auto floating = [](dtype d) { return d == kiln::float32 || d == kiln::float64; };
    for (int r = 0; r < 5; ++r) {
        for (int c = 0; c < 5; ++c) {
            CAPTURE(r);
            CAPTURE(c);
            const auto a = kiln::ones({2}, all[r]), b = kiln::ones({2}, all[c]);
            const dtype want = table[r][c];
            CHECK((a + b).dtype() == want);
            CHECK((a * b).dtype() == want);
            CHECK(kiln::maximum(a, b).dtype() == want);
            CHECK(kiln::minimum(a, b).dtype() == want);
            if (want == kiln::bool_) CHECK_THROWS_AS(a - b, kiln::dtype_error);
            else CHECK((a - b).dtype() == want);
            // True division: floating always.
            CHECK((a / b).dtype() == (floating(want) ? want : kiln::float32));
            CHECK(kiln::where(a > 0_c, a, b).dtype() == want);
            CHECK((a < b).dtype() == kiln::bool_);
            if (want != kiln::bool_) CHECK(kiln::pow(a, b).dtype() == want);
            else CHECK_THROWS_AS(kiln::pow(a, b), kiln::dtype_error);
        }
        // A C++ number: bool, an integer, a double.
        const auto a = kiln::ones({2}, all[r]);
        const dtype with_bool = all[r];
        const dtype with_int = all[r] == kiln::bool_ ? kiln::int64 : all[r];
        const dtype with_double = floating(all[r]) ? all[r] : kiln::float32;
        CAPTURE(r);
        CHECK((a + true).dtype() == with_bool);
        CHECK((a + 2).dtype() == with_int);
        CHECK((2 * a).dtype() == with_int);
        CHECK((a + std::int64_t{2}).dtype() == with_int);
        CHECK((a * 0.5).dtype() == with_double);
        CHECK((a * 2_c).dtype() == with_int);  // an integral constant is an integer number
        CHECK((a * 0.5_c).dtype() == with_double);
        CHECK(kiln::where(a > 0_c, a, 2).dtype() == with_int);
        CHECK(kiln::where(a > 0_c, 2.5, a).dtype() == with_double);
    }
}

TEST_CASE("every size is checked: shapes, reshape, slice, broadcast_to, arange, wrap") {
    CHECK(message_of([] { kiln::zeros({std::ptrdiff_t{1} << 32, std::ptrdiff_t{1} << 32}); }) ==
          "kiln: value_error in 'tensor': shape (4294967296, 4294967296) has more elements than kiln can address "
          "(at most 2^62 bytes)");
    // The element count fits, the byte count does not.
    CHECK(contains(message_of([] { kiln::zeros({std::ptrdiff_t{1} << 31, std::ptrdiff_t{1} << 30}, kiln::float64); }),
                   "needs more bytes than kiln can address"));
    CHECK_THROWS_AS(kiln::zeros({-1, 3}), kiln::value_error);
    CHECK_THROWS_AS(kiln::zeros({3, std::numeric_limits<std::ptrdiff_t>::max(), 3}), kiln::value_error);
    CHECK(kiln::zeros({0, std::ptrdiff_t{1} << 62, std::ptrdiff_t{1} << 62}).numel() == 0);  // nothing to hold
    const auto t = kiln::arange(0, 10, 1, kiln::float32);
    CHECK_THROWS_AS(t.reshape({std::ptrdiff_t{1} << 40, std::ptrdiff_t{1} << 40}), kiln::error);
    CHECK_THROWS_AS(t.reshape({std::ptrdiff_t{1} << 62, 4, 4}), kiln::error);
    CHECK(message_of([&] { t.reshape({-2, -5}); }) ==
          "kiln: value_error in 'reshape': negative dimension -2 in (-2, -5) (only -1, to infer one dimension, is "
          "allowed)");
    CHECK_THROWS_AS(t.reshape({-1, -1}), kiln::value_error);
    CHECK_THROWS_AS(t.reshape({-1, 3}), kiln::shape_error);
    CHECK(t.reshape({-1, 5}).shape() == kiln::dims{2, 5});
    const auto s = t.slice(0, 0, 10, std::ptrdiff_t{1} << 62);
    CHECK(s.shape() == kiln::dims{1});
    CHECK(s.item<float>() == 0.0f);
    CHECK(t.slice(0, 3, 10, std::numeric_limits<std::ptrdiff_t>::max()).item<float>() == 3.0f);
    CHECK(values(t.slice(0, 1, 10, 4)) == std::vector<double>{1, 5, 9});
    CHECK(message_of([] { kiln::ones({1}).broadcast_to({-5}); }) ==
          "kiln: value_error in 'broadcast_to': negative dimension -5 in shape (-5,)");
    CHECK_THROWS_AS(kiln::ones({1}).broadcast_to({std::ptrdiff_t{1} << 40, std::ptrdiff_t{1} << 40}), kiln::error);
    CHECK(contains(message_of([] { kiln::arange(0, 1e300); }), "kiln: value_error in 'arange': 1e+300 elements"));
    CHECK_THROWS_AS(kiln::arange(0, 1e300, 1, kiln::float32), kiln::value_error);
    CHECK(message_of([] { kiln::wrap<float>(nullptr, {4}); }) ==
          "kiln: value_error in 'wrap': a null pointer cannot hold shape (4,)");
    CHECK(kiln::wrap<float>(nullptr, {0, 3}).numel() == 0);
    float buf[4] = {1, 2, 3, 4};
    CHECK_THROWS_AS(kiln::wrap(buf, {-2, -2}), kiln::value_error);
    CHECK_THROWS_AS(kiln::wrap(buf, {std::ptrdiff_t{1} << 62, 8}), kiln::value_error);
    CHECK(values(kiln::wrap(buf, {2, 2})) == std::vector<double>{1, 2, 3, 4});
    CHECK_THROWS_AS(kiln::from_vector(std::vector<float>{1, 2}, {-1, -2}), kiln::value_error);
}

TEST_CASE("the caching allocator's size classes never overflow, and an impossible allocation is a kiln::error") {
    using A = kiln::detail::caching_allocator;
    CHECK(A::size_class(0) == 64);
    CHECK(A::size_class(4097) == 5120);
    CHECK(A::size_class(std::size_t{1} << 40) == std::size_t{1} << 40);
    const std::size_t huge = (std::size_t{1} << 63) + 12345;
    CHECK(A::size_class(huge) == huge);  // once a loop that doubled until it overflowed to 0, forever
    CHECK(A::size_class((std::size_t{1} << 62) - 1) >= (std::size_t{1} << 62) - 1);
    // 2^61 bytes is within kiln's limit and beyond any machine's memory: the system refuses, kiln says so.
    CHECK_THROWS_AS(kiln::zeros({std::ptrdiff_t{1} << 59}, kiln::float32), kiln::device_error);
}

TEST_CASE("integer arithmetic wraps with defined behaviour") {
    constexpr std::int32_t max32 = std::numeric_limits<std::int32_t>::max(), min32 = std::numeric_limits<std::int32_t>::min();
    constexpr std::int64_t max64 = std::numeric_limits<std::int64_t>::max(), min64 = std::numeric_limits<std::int64_t>::min();
    const auto a = i32({max32, min32, 3}, {3});
    CHECK(values(a + a) == std::vector<double>{-2, 0, 6});
    CHECK(values(a - i32({-1, 1, 0}, {3})) == std::vector<double>{min32, max32, 3});
    CHECK(values(a * 2) == std::vector<double>{-2, 0, 6});
    CHECK(values(-a) == std::vector<double>{-max32, min32, -3});
    CHECK(values(kiln::abs(a)) == std::vector<double>{max32, min32, 3});
    CHECK(values(kiln::square(a)) == std::vector<double>{1, 0, 9});
    const auto b = i64({max64, 1, min64}, {3});
    CHECK(kiln::sum(b).item<std::int64_t>() == 0);  // max + 1 + min wraps to 0
    CHECK(kiln::prod(i64({max64, 2}, {2})).item<std::int64_t>() == -2);
    CHECK((b + b).at<std::int64_t>({0}) == -2);
    CHECK(kiln::sum(i32({max32, max32}, {2})).item<std::int64_t>() == 2 * std::int64_t{max32});  // int64 sums
}

TEST_CASE("float to integer conversions saturate and NaN gives 0 (item, at, to, casts)") {
    const auto f = f32({std::numeric_limits<float>::quiet_NaN(), 1e20f, -1e20f, 3.7f, -3.7f, INFINITY, -INFINITY}, {7});
    const std::int32_t max32 = std::numeric_limits<std::int32_t>::max(), min32 = std::numeric_limits<std::int32_t>::min();
    CHECK(values(f.to(kiln::int32)) == std::vector<double>{0, max32, min32, 3, -3, max32, min32});
    const auto d = f.to(kiln::int64);
    CHECK(d.at<std::int64_t>({1}) == std::numeric_limits<std::int64_t>::max());
    CHECK(d.at<std::int64_t>({2}) == std::numeric_limits<std::int64_t>::min());
    CHECK(kiln::full({}, qnan).item<int>() == 0);
    CHECK(kiln::full({}, 1e300, kiln::float64).item<std::int32_t>() == max32);
    CHECK(kiln::full({}, -1e300, kiln::float64).item<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
    CHECK(f.at<int>({0}) == 0);
    CHECK(kiln::full({2}, 1e300, kiln::int32).at<int>({1}) == max32);
    CHECK(kiln::value_cast<std::int64_t>(9.3e18) == std::numeric_limits<std::int64_t>::max());
    CHECK(kiln::value_cast<std::int64_t>(-9.223372036854775808e18) == std::numeric_limits<std::int64_t>::min());
    CHECK(kiln::value_cast<bool>(qnan));
    // Graph mode's cast op uses the same conversion.
    const auto g = kiln::run(kiln::cast<std::int32_t>(kiln::input<"x", float>{}),
                             kiln::input<"x", float>{} = std::vector<float>{NAN, 1e20f, -2.5f});
    CHECK(g(0) == 0);
    CHECK(g(1) == max32);
    CHECK(g(2) == -2);
}

TEST_CASE("cross_entropy refuses class indices out of range") {
    const auto logits = kiln::zeros({2, 3});
    CHECK(message_of([&] { kiln::nn::cross_entropy(logits, i64({0, 5}, {2})); }) ==
          "kiln: value_error in 'nn::cross_entropy': class index 5 is out of range for 3 classes");
    CHECK_THROWS_AS(kiln::nn::cross_entropy(logits, i32({-1, 0}, {2})), kiln::value_error);
    CHECK(kiln_test::close(kiln::nn::cross_entropy(logits, i64({0, 2}, {2})).item<double>(), std::log(3.0), 1e-6));
}

TEST_CASE("large float64 values print whole") {
    const std::string s = kiln::to_string(kiln_test::f64({1e47, 2}, {2}));
    CHECK(s == "tensor([1.e+47, 2.e+00], dtype=float64)");  // numpy.array([1e47, 2])'s repr
    CHECK(kiln::to_string(kiln_test::f64({-1.5e300}, {1})) == "tensor([-1.5e+300], dtype=float64)");
    CHECK(kiln::to_string(kiln_test::f64({3, 4}, {2})) == "tensor([3., 4.], dtype=float64)");
}

TEST_CASE("the thread count may change while other threads run ops") {
    const int before = kiln::num_threads();
    std::thread worker([] {
        for (int i = 0; i < 50; ++i) {
            const auto t = kiln::ones({300000}) * 2.0;
            CHECK(t.at<float>({299999}) == 2.0f);
        }
    });
    for (int i = 0; i < 50; ++i) (void)kiln::num_threads();
    worker.join();
    kiln::set_num_threads(before);
    CHECK(kiln::num_threads() == before);
}

namespace {

std::string npy_file(const std::string& dict, const std::string& data, int version = 1) {
    std::string h = dict;
    const std::size_t prefix = version == 1 ? 10 : 12;
    h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
    const std::size_t n = h.size();
    out += static_cast<char>(n & 0xff);
    out += static_cast<char>((n >> 8) & 0xff);
    if (version != 1) out += std::string(2, '\0');
    return out + h + data;
}

std::string load_error(const std::string& bytes) {
    return message_of([&] { kiln::load_npy_bytes(bytes.data(), bytes.size(), "t.npy"); });
}

}  // namespace

TEST_CASE(".npy files are untrusted: sizes are checked against the bytes present before anything is allocated") {
    const std::string eight(8, '\0');
    auto refused = [](const std::string& bytes, const std::string& part) {
        const std::string msg = load_error(bytes);
        CAPTURE(msg);
        CHECK(contains(msg, "kiln: file_error in 'load_npy': 't.npy': "));
        CHECK(contains(msg, part));
        CHECK_THROWS_AS(kiln::load_npy_bytes(bytes.data(), bytes.size(), "t.npy"), kiln::file_error);
    };
    refused(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", eight),
            "has more elements than kiln can address");
    refused(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }", eight),
            "truncated: shape (1152921504606846976,) of float32 needs 4611686018427387904 bytes of data and the file "
            "has 8");
    refused(npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", eight),
            "has more elements than kiln can address");
    refused(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }", eight), "truncated");
    refused(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1152921504606846976,), }", eight),
            "truncated");
    refused(npy_file("{'descr':'<f4','fortran_order':False,'shape':(4611686018427387903,)}", ""), "");
    refused(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string(12, '\0')),
            "4 bytes follow the data that shape (2,) of float32 needs");
    refused(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", eight),
            "a dimension of the shape is too large");
}

TEST_CASE(".npy headers are parsed strictly") {
    auto refused = [](const std::string& dict, const std::string& data, const std::string& part) {
        const std::string msg = load_error(npy_file(dict, data));
        CAPTURE(dict);
        CAPTURE(msg);
        CHECK(contains(msg, "kiln: file_error in 'load_npy': 't.npy': "));
        CHECK(contains(msg, part));
    };
    const std::string d12(12, '\0');
    refused("{'descr': '<f4', 'fortran_order': False, 'shape':12, }", std::string(48, '\0'), "expected '('");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape':3, }", d12, "expected '('");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", d12, "is not a tuple");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1  3 1), }", d12, "expected ',' or ')'");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }", std::string(8, '\0'), "expected a non-negative");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", std::string(8, '\0'), "expected a non-negative");
    refused("{'descr': '<f4', 'fortran_order': 'True', 'shape': (2, 2), }", std::string(16, '\0'), "True or False");
    refused("{'descr': '<f4', 'fortran_order': False, }", "", "no 'shape'");
    refused("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", "", "appears twice");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1, }", "", "unexpected key 'x'");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk", "", "unexpected bytes after");
    refused("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", "", "unsupported dtype '<c8'");
    refused("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", "", "unsupported dtype '|O'");
    refused("{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }", "", "unsupported dtype '<U2'");
    refused("{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", "", "truncated: shape (2,) of uint16 needs 4 bytes");
    refused("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }",
            std::string("\x05\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x80", 16),
            "the uint64 at element 1 (9223372036854775808) is beyond int64");
    refused("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", "", "more than 8 dimensions");
    refused("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x01\x07", 3),
            "the bool at element 2 is neither 0 nor 1");
    // Accepted spellings: any key order, no trailing comma, a trailing comma in the shape, versions 2 and 3.
    const auto ok = [](const std::string& bytes) { return kiln::load_npy_bytes(bytes.data(), bytes.size()); };
    float v[3] = {1, 2, 3};
    const std::string data(reinterpret_cast<const char*>(v), 12);
    CHECK(ok(npy_file("{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}", data)).shape() == kiln::dims{3});
    CHECK(ok(npy_file("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (1, 3,)}", data)).shape() ==
          kiln::dims{1, 3});
    CHECK(values(ok(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", data, 2))) ==
          std::vector<double>{1, 2, 3});
    CHECK(ok(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (3L,), }", data, 3)).numel() == 3);
    CHECK(ok(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data.substr(0, 4))).dim() == 0);
    CHECK(ok(npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (0, 3), }", "")).shape() == kiln::dims{0, 3});
}

TEST_CASE(".npy dtypes that kiln lacks are widened on load: narrow integers, unsigned integers, float16") {
    const auto load = [](const std::string& descr, const std::string& shape, const std::string& data) {
        const std::string bytes = npy_file("{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }", data);
        return kiln::load_npy_bytes(bytes.data(), bytes.size(), "t.npy");
    };
    const auto i1 = load("|i1", "(4,)", std::string("\x80\xff\x00\x7f", 4));
    CHECK(i1.dtype() == kiln::int32);
    CHECK(values(i1) == std::vector<double>{-128, -1, 0, 127});
    const auto u1 = load("|u1", "(2, 2)", std::string("\x00\xc8\xff\x01", 4));
    CHECK(u1.dtype() == kiln::int32);
    CHECK(u1.shape() == kiln::dims{2, 2});
    CHECK(values(u1) == std::vector<double>{0, 200, 255, 1});
    // int16 -32768 and 300, little- and big-endian.
    CHECK(values(load("<i2", "(2,)", std::string("\x00\x80\x2c\x01", 4))) == std::vector<double>{-32768, 300});
    CHECK(values(load(">i2", "(2,)", std::string("\x80\x00\x01\x2c", 4))) == std::vector<double>{-32768, 300});
    const auto u2 = load("<u2", "(1,)", std::string("\xff\xff", 2));
    CHECK(u2.dtype() == kiln::int32);
    CHECK(u2.item<std::int32_t>() == 65535);
    const auto u4 = load(">u4", "(1,)", std::string("\xff\xff\xff\xfe", 4));
    CHECK(u4.dtype() == kiln::int64);
    CHECK(u4.item<std::int64_t>() == 4294967294);
    const auto u8 = load("<u8", "(1,)", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8));
    CHECK(u8.dtype() == kiln::int64);
    CHECK(u8.item<std::int64_t>() == std::numeric_limits<std::int64_t>::max());
    // float16: 1, -2.5, 65504 (the largest), 2^-24 (the smallest subnormal), 2^-14 - 2^-24 (the largest subnormal),
    // -0, inf and a NaN, exactly.
    const std::uint16_t halves[8] = {0x3c00, 0xc100, 0x7bff, 0x0001, 0x03ff, 0x8000, 0x7c00, 0x7e00};
    const auto f2 = load("<f2", "(8,)", std::string(reinterpret_cast<const char*>(halves), 16));
    CHECK(f2.dtype() == kiln::float32);
    const float* f = f2.data<float>();
    CHECK(f[0] == 1.0f);
    CHECK(f[1] == -2.5f);
    CHECK(f[2] == 65504.0f);
    CHECK(f[3] == std::ldexp(1.0f, -24));
    CHECK(f[4] == std::ldexp(1.0f, -14) - std::ldexp(1.0f, -24));
    CHECK(f[5] == 0.0f);
    CHECK(std::signbit(f[5]));
    CHECK(f[6] == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(f[7]));
    // A big-endian float16 in Fortran order: [[1, 2], [3, 4]] stored column by column.
    {
        const std::string bytes = npy_file("{'descr': '>f2', 'fortran_order': True, 'shape': (2, 2), }",
                                           std::string("\x3c\x00\x42\x00\x40\x00\x44\x00", 8));
        const auto m = kiln::load_npy_bytes(bytes.data(), bytes.size());
        CHECK(values(m) == std::vector<double>{1, 2, 3, 4});
    }
}

TEST_CASE("every truncation of a valid .npy file is a file_error, and the files on disk are named") {
    const std::string path = "kiln_test_reliability.npy";
    kiln::save_npy(path, kiln::arange(0, 12, 1, kiln::float64).reshape({3, 4}));
    std::ifstream in(path, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    int refused = 0;
    for (std::size_t n = 0; n < all.size(); ++n) {
        try {
            kiln::load_npy_bytes(all.data(), n, "cut");
        } catch (const kiln::file_error&) {
            ++refused;
        }
    }
    CHECK(refused == static_cast<int>(all.size()));
    CHECK(values(kiln::load_npy_bytes(all.data(), all.size())) == values(kiln::arange(0, 12, 1, kiln::float64)));
    std::ofstream(path, std::ios::binary) << all.substr(0, all.size() - 1);
    CHECK(contains(message_of([&] { kiln::load_npy(path); }), "'kiln_test_reliability.npy': truncated"));
    std::remove(path.c_str());
    CHECK(message_of([] { kiln::load_npy("/nonexistent/kiln.npy"); }) ==
          "kiln: file_error in 'load_npy': cannot open '/nonexistent/kiln.npy'");
}

#include "training_loop.hpp"  // the long eager training loop, here under LeakSanitizer
