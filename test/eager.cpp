// Eager mode: tensors, views that alias, factories, elementwise ops with broadcasting and PyTorch's promotion,
// in-place forms, reductions, printing, errors; and the same generic lambda in eager and graph mode.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::f64;
using kiln_test::values;

namespace {

kiln::tensor f32(std::initializer_list<float> v, kiln::dims shape) { return kiln::from_values<float>(v, shape); }

}  // namespace

TEST_CASE("factories") {
    const auto z = kiln::zeros({2, 3});
    CHECK(z.dtype() == kiln::float32);
    CHECK(z.shape() == kiln::dims{2, 3});
    CHECK(values(z) == std::vector<double>(6, 0.0));
    CHECK(values(kiln::ones({2}, kiln::int32)) == std::vector<double>{1, 1});
    CHECK(values(kiln::full({3}, 2.5, kiln::float64)) == std::vector<double>{2.5, 2.5, 2.5});
    CHECK(values(kiln::arange(5)) == std::vector<double>{0, 1, 2, 3, 4});
    CHECK(kiln::arange(5).dtype() == kiln::int64);
    CHECK(values(kiln::arange(1, 2, 0.25, kiln::float64)) == std::vector<double>{1, 1.25, 1.5, 1.75});
    // Without a dtype, PyTorch's inference: whole numbers give int64, any fraction float32 (not truncated values).
    CHECK(kiln::arange(0, 6, 2).dtype() == kiln::int64);
    CHECK(values(kiln::arange(0, 6, 2)) == std::vector<double>{0, 2, 4});
    CHECK(kiln::arange(0, 1, 0.25).dtype() == kiln::float32);
    CHECK(values(kiln::arange(0, 1, 0.25)) == std::vector<double>{0, 0.25, 0.5, 0.75});
    CHECK(values(kiln::arange(1.5, 3)) == std::vector<double>{1.5, 2.5});
    CHECK(kiln::arange(4, kiln::float64).dtype() == kiln::float64);
    CHECK(values(kiln::arange(4, kiln::float64)) == std::vector<double>{0, 1, 2, 3});
    CHECK(values(kiln::linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
    CHECK(kiln::linspace(0, 1, 0).numel() == 0);
    CHECK_THROWS_AS(kiln::arange(0, 1, 0), kiln::value_error);

    const auto v = kiln::from_vector(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(v.dtype() == kiln::int32);
    CHECK(v.at<int>({1, 2}) == 6);
    CHECK(v.at<int>({-1, 0}) == 4);
    CHECK_THROWS_AS(kiln::from_vector(std::vector<float>{1, 2, 3}, {2, 2}), kiln::shape_error);
    // Without a shape, a braced list is a vector of its values, with their element type.
    const auto lv = kiln::from_values({1.5, 2.5, 3.5});
    CHECK(lv.dtype() == kiln::float64);
    CHECK(lv.shape() == kiln::dims{3});
    CHECK(lv.at<double>({2}) == 3.5);
    CHECK(kiln::from_values({std::int64_t{4}, std::int64_t{5}}).dtype() == kiln::int64);
    const xt::xarray<double> xa = {{1.5, 2.5}, {3.5, 4.5}};
    const auto fx = kiln::from_xtensor(xa);
    CHECK(fx.dtype() == kiln::float64);
    CHECK(values(fx) == std::vector<double>{1.5, 2.5, 3.5, 4.5});

    // Zero-copy wrapping: writes through the tensor reach the caller's memory.
    std::vector<float> mem{1, 2, 3, 4};
    auto w = kiln::wrap(mem.data(), {2, 2});
    w *= 10;
    CHECK(mem == std::vector<float>{10, 20, 30, 40});
}

TEST_CASE("a shape reads as a container of extents: size() is the rank, numel() the element count") {
    const auto t = kiln::zeros({2, 3, 4});
    CHECK(t.shape().size() == 3);
    CHECK(t.shape().numel() == 24);
    CHECK(t.dim() == 3);
    CHECK(t.ndim() == 3);
    CHECK(t.numel() == 24);
    CHECK(t.size(-1) == 4);
    std::vector<std::ptrdiff_t> extents(t.shape().begin(), t.shape().end());
    CHECK(extents == std::vector<std::ptrdiff_t>{2, 3, 4});
    std::ptrdiff_t product = 1;
    for (std::ptrdiff_t e : t.shape()) product *= e;
    CHECK(product == 24);
    CHECK(t.strides().size() == 3);
    CHECK(t.strides()[0] == 12);
    // A rank-0 tensor has an empty shape and one element; a zero extent gives no elements.
    const kiln::tensor s = 2.0f;
    CHECK(s.shape().size() == 0);
    CHECK(s.shape().begin() == s.shape().end());
    CHECK(s.numel() == 1);
    CHECK(kiln::zeros({3, 0}).shape().size() == 2);
    CHECK(kiln::zeros({3, 0}).numel() == 0);
    // The same reading as a graph-mode result's (xtensor) shape.
    CHECK(kiln::sum(kiln::ones({2, 3}), {0}).shape().size() == 1);
}

TEST_CASE("isclose and allclose compare within a tolerance as NumPy's do; eye is the identity") {
    const auto inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    const auto a = kiln::from_values<double>({1.0, 1.0, 100.0, inf, inf, nan, 0.0, -0.0}, {8});
    const auto b = kiln::from_values<double>({1.0 + 1e-6, 1.1, 100.0005, inf, -inf, nan, 1e-9, 0.0}, {8});
    const auto c = kiln::isclose(a, b);
    CHECK(c.dtype() == kiln::bool_);
    // |a - b| <= 1e-8 + 1e-5 * |b|: 1e-6 is within 1e-5 * 1; 0.1 is not; 5e-4 is within 1e-3; equal infinities are
    // close, opposite ones and NaN are not; 1e-9 is within atol; -0 equals 0.
    CHECK(values(c) == std::vector<double>{1, 0, 1, 1, 0, 0, 1, 1});
    CHECK(values(kiln::isclose(a, b, 1e-5, 1e-8, true)) == std::vector<double>{1, 0, 1, 1, 0, 1, 1, 1});
    // A finite number is never close to an infinity, however large rtol * |b| is.
    CHECK_FALSE(kiln::isclose(kiln::tensor(1.0), kiln::tensor(inf), 1.0, 0.0).item<bool>());
    CHECK(values(kiln::isclose(a, b, 0.2)) == std::vector<double>{1, 1, 1, 1, 0, 0, 1, 1});
    // Broadcast, float32 against a float64 rank-0 tensor, integers compared as float64.
    CHECK(values(kiln::isclose(kiln::from_values<float>({2.0f, 2.5f}, {2, 1}), kiln::tensor(2.0))) == std::vector<double>{1, 0});
    CHECK(kiln::isclose(kiln::ones({2, 3}), kiln::ones({3})).shape() == kiln::dims{2, 3});
    CHECK(values(kiln::isclose(kiln::from_values<std::int64_t>({3, 4}, {2}), kiln::from_values<std::int32_t>({3, 5}, {2}))) ==
          std::vector<double>{1, 0});
    CHECK(kiln::allclose(kiln::ones({3}), kiln::full({3}, 1.0 + 1e-7)));
    CHECK_FALSE(kiln::allclose(a, b));
    CHECK(kiln::allclose(kiln::from_values<double>({nan}, {1}), kiln::from_values<double>({nan}, {1}), 1e-5, 1e-8, true));
    CHECK(kiln::allclose(kiln::zeros({0}), kiln::zeros({0})));
    CHECK_THROWS_AS(kiln::isclose(a, b, -1.0), kiln::value_error);
    CHECK_THROWS_AS(kiln::allclose(a, b, 1e-5, nan), kiln::value_error);
    CHECK_THROWS_AS(kiln::isclose(kiln::ones({2}), kiln::ones({3})), kiln::shape_error);

    const auto e = kiln::eye(3);
    CHECK(e.dtype() == kiln::float32);
    CHECK(values(e) == std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1});
    const auto r = kiln::eye(2, 3, kiln::int64);
    CHECK(r.dtype() == kiln::int64);
    CHECK(r.shape() == kiln::dims{2, 3});
    CHECK(values(r) == std::vector<double>{1, 0, 0, 0, 1, 0});
    CHECK(kiln::eye(0).shape() == kiln::dims{0, 0});
    CHECK_THROWS_AS(kiln::eye(-1), kiln::value_error);
}

TEST_CASE("random numbers are seedable and have the right moments") {
    kiln::generator g1(42), g2(42), g3(43);
    const auto a = kiln::rand({1000}, kiln::float64, g1), b = kiln::rand({1000}, kiln::float64, g2),
               c = kiln::rand({1000}, kiln::float64, g3);
    CHECK(values(a) == values(b));
    CHECK(values(a) != values(c));
    const auto u = values(a);
    CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
    CHECK(*std::max_element(u.begin(), u.end()) < 1.0);
    kiln::generator g(7);
    const auto n = kiln::randn({20000}, kiln::float64, g);
    const double m = kiln::mean(n).item<double>();
    const double var = kiln::mean(kiln::square(n - m)).item<double>();
    CHECK(std::abs(m) < 0.03);            // 4 standard errors
    CHECK(std::abs(var - 1.0) < 0.05);
    const auto un = values(kiln::uniform({5000}, -2, 3, kiln::float64, g));
    CHECK(*std::min_element(un.begin(), un.end()) >= -2.0);
    CHECK(*std::max_element(un.begin(), un.end()) < 3.0);
    CHECK_THROWS_AS(kiln::randn({2}, kiln::int32), kiln::dtype_error);
    // The generator may follow the shape directly (float32), as PyTorch's generator= does.
    kiln::generator h1(9), h2(9);
    CHECK(values(kiln::randn({4}, h1)) == values(kiln::randn({4}, kiln::float32, h2)));
    CHECK(values(kiln::rand({4}, h1)) == values(kiln::rand({4}, kiln::float32, h2)));
    CHECK(values(kiln::uniform({4}, -1, 1, h1)) == values(kiln::uniform({4}, -1, 1, kiln::float32, h2)));
    CHECK(kiln::randn({2}, h1).dtype() == kiln::float32);
}

TEST_CASE("uniform stays below its upper bound after rounding, and refuses bounds that are not a range") {
    // Between 1 and the next float32 up, low + (high - low) * u rounds to high for every u >= 1/2: each such draw
    // must become the largest float32 below high (here 1 itself), so that every value lies in [low, high).
    const double next = static_cast<double>(std::nextafter(1.0f, 2.0f));
    kiln::generator g(5);
    const auto narrow = kiln::uniform({1000}, 1.0, next, kiln::float32, g);
    const auto nv = values(narrow);
    CHECK(std::count(nv.begin(), nv.end(), 1.0) == 1000);
    // The same in float64, where 1 + u * 2^-52 rounds to the upper bound for u > 1/2.
    const double next64 = std::nextafter(1.0, 2.0);
    const auto narrow64 = values(kiln::uniform({1000}, 1.0, next64, kiln::float64, g));
    CHECK(*std::max_element(narrow64.begin(), narrow64.end()) == 1.0);
    // rand() in float32 over many draws: never 1.
    const auto r = kiln::rand({1 << 16}, g);
    CHECK(kiln::max(r).item<float>() < 1.0f);
    CHECK(kiln::uniform({3}, 2.5, 2.5, kiln::float64, g).at<double>({1}) == 2.5);  // an empty range gives low
    CHECK_THROWS_WITH_AS(kiln::uniform({3}, 1.0, 0.0), "kiln: value_error in 'uniform': the bounds must be finite with low <= high, got [1, 0)",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::uniform({3}, 0.0, std::numeric_limits<double>::infinity()), kiln::value_error);
    CHECK_THROWS_AS(kiln::uniform({3}, std::nan(""), 1.0), kiln::value_error);
    CHECK_THROWS_AS(kiln::uniform({3}, -1e308, 1e308), kiln::value_error);  // high - low overflows
}

TEST_CASE("a seed restarts the stream even after an odd count of normals") {
    // Box-Muller draws normals in pairs; seeding must drop the one kept from the last pair.
    kiln::manual_seed(3);
    const float first = kiln::randn({1}).item<float>();
    kiln::manual_seed(3);
    CHECK(kiln::randn({1}).item<float>() == first);
    kiln::manual_seed(3);
    const kiln::tensor a = kiln::randn({5});
    kiln::manual_seed(3);
    CHECK(kiln::all(kiln::equal(kiln::randn({5}), a)).item<bool>());
}

TEST_CASE("without kiln's GPU device, kiln::cuda is refused with a clear message") {
    CHECK(!kiln::gpu_compiled_in);
    CHECK(!kiln::cuda_available());
    CHECK(kiln::device_count() == 0);
    CHECK(!kiln::cuda_emulated());
    CHECK(kiln::to_string(kiln::cuda) == "cuda:0");
    // Portable code may ask for the device's statistics and synchronize: nothing is held, nothing waits.
    kiln::synchronize();
    const kiln::gpu_memory_stats st = kiln::cuda_memory_stats();
    CHECK(st.allocated_bytes == 0);
    CHECK(st.peak_bytes == 0);
    CHECK(st.allocations == 0);
    try {
        (void)kiln::ones({2}).to(kiln::cuda);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("cuda:0 is not available: this program was compiled without kiln's GPU device") !=
              std::string::npos);
    }
    CHECK_THROWS_AS(kiln::zeros({2}, kiln::float32, kiln::cuda), kiln::device_error);
    // The CPU device itself is fine through the same calls.
    const kiln::tensor z = kiln::zeros({2}, kiln::float32, kiln::cpu);
    CHECK(z.is_cpu());
    CHECK(kiln::ones_like(z).at<float>({1}) == 1.0f);
    CHECK(z.to(kiln::cpu).shares_storage_with(z));
    // Graph mode: a session on the device, and device memory fed as a kiln::view, say the same.
    CHECK_THROWS_AS(kiln::session(1, kiln::cuda), kiln::device_error);
    const auto x = kiln::input<"x", float>{};
    std::vector<float> mem(4, 1.0f), out(4);
    try {
        (void)kiln::run(x * 2.0f, x = kiln::view(mem.data(), {4}, kiln::cuda));
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()) == "kiln: device_error in 'run': input 'x' was fed memory on cuda:0, but this program "
                                       "was built without kiln's GPU device (KILN_GPU) (move tensors with .to(device); "
                                       "docs/gpu.md)");
    }
    try {
        kiln::run_into(kiln::view(out.data(), {4}, kiln::cuda), x * 2.0f, x = mem);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()) == "kiln: device_error in 'run_into': memory on cuda:0 was given, but this program was "
                                       "built without kiln's GPU device (KILN_GPU; docs/gpu.md)");
    }
    kiln::run_into(out, x * 2.0f, x = kiln::view(mem.data(), {4}, kiln::cpu));
    CHECK(out == std::vector<float>{2, 2, 2, 2});
}

TEST_CASE("views share storage and alias") {
    auto t = kiln::arange(0, 12, 1, kiln::float32).reshape({3, 4});
    CHECK(t.is_contiguous());
    auto row = t.select(0, 1);            // [4 5 6 7]
    auto col = t.slice(1, 1, 4, 2);       // columns 1 and 3
    auto tr = t.transpose(0, 1);
    CHECK(values(row) == std::vector<double>{4, 5, 6, 7});
    CHECK(col.shape() == kiln::dims{3, 2});
    CHECK(values(col) == std::vector<double>{1, 3, 5, 7, 9, 11});
    CHECK(!tr.is_contiguous());
    CHECK(tr.at<float>({3, 2}) == 11.f);
    CHECK(tr.shares_storage_with(t));
    row += 100;  // through a view
    CHECK(t.at<float>({1, 0}) == 104.f);
    CHECK(tr.at<float>({2, 1}) == 106.f);
    col *= 0;
    CHECK(t.at<float>({0, 1}) == 0.f);
    CHECK(t.at<float>({2, 3}) == 0.f);
    CHECK(t.at<float>({2, 2}) == 10.f);

    // reshape: a view when contiguous, a copy otherwise.
    auto r = t.reshape({-1});
    CHECK(r.shares_storage_with(t));
    auto rt = tr.reshape({12});
    CHECK(!rt.shares_storage_with(t));
    CHECK(rt.at<float>({1}) == 104.f);  // t[0][0]=0, t[1][0]=104 (transposed order)
    CHECK_THROWS_AS(t.reshape({5, -1}), kiln::shape_error);

    auto p = kiln::zeros({2, 3, 4}).permute({2, 0, 1});
    CHECK(p.shape() == kiln::dims{4, 2, 3});
    CHECK_THROWS_AS(p.permute({0, 0, 1}), kiln::value_error);
    auto u = kiln::ones({3}).unsqueeze(0);
    CHECK(u.shape() == kiln::dims{1, 3});
    CHECK(u.squeeze().shape() == kiln::dims{3});
    CHECK_THROWS_AS(u.squeeze(1), kiln::value_error);
    auto b = f32({1, 2, 3}, {3}).broadcast_to({2, 3});
    CHECK(values(b) == std::vector<double>{1, 2, 3, 1, 2, 3});
    CHECK_THROWS_AS(f32({1, 2, 3}, {3}).broadcast_to({2, 4}), kiln::shape_error);
    CHECK(kiln::full({1}, 3.5).item<double>() == 3.5);
    CHECK_THROWS_AS(kiln::zeros({2}).item<float>(), kiln::value_error);
    CHECK_THROWS_AS(t.at<float>({3, 0}), kiln::value_error);
    CHECK_THROWS_AS(t.data<double>(), kiln::dtype_error);
    CHECK(values(tr.contiguous()) == values(tr));
    CHECK(tr.contiguous().is_contiguous());
}

TEST_CASE("xtensor adaptors are zero-copy views in both directions") {
    auto t = kiln::arange(0, 12, 1, kiln::float64).reshape({3, 4});
    auto xa = kiln::as_xtensor<double>(t);
    CHECK(xa.dimension() == 2);
    CHECK(xa.shape()[0] == 3);
    CHECK(xa.shape()[1] == 4);
    CHECK(xa(2, 1) == 9.0);
    xa(0, 3) = -1.0;  // writes reach the tensor
    CHECK(t.at<double>({0, 3}) == -1.0);
    t += 1;  // and the tensor's writes reach the adaptor
    CHECK(xa(1, 0) == 5.0);

    // Strided kiln views stay views: a transpose, a stepped slice, a broadcast (stride 0).
    auto tr = kiln::as_xtensor<double, 2>(t.transpose(0, 1));
    CHECK(tr.shape()[0] == 4);
    CHECK(tr(3, 0) == 0.0);  // t[0][3] = -1 + 1
    CHECK(tr(1, 2) == 10.0);
    auto sl = kiln::as_xtensor<double>(t.slice(1, 1, 4, 2));
    CHECK(sl(2, 1) == 12.0);
    sl(0, 0) = 50.0;
    CHECK(t.at<double>({0, 1}) == 50.0);
    auto b = kiln::as_xtensor<double>(kiln::arange(0, 3, 1, kiln::float64).broadcast_to({2, 3}));
    CHECK(b(1, 2) == 2.0);
    const xt::xarray<double> b_copy = b, sl_copy = sl;  // whole-array reads follow the strides
    CHECK(std::vector<double>(b_copy.begin(), b_copy.end()) == std::vector<double>{0, 1, 2, 0, 1, 2});
    CHECK(std::vector<double>(sl_copy.begin(), sl_copy.end()) == std::vector<double>{50, 0, 6, 8, 10, 12});
    // xtensor expressions over the adaptor read the tensor's memory.
    const xt::xarray<double> doubled = 2.0 * kiln::as_xtensor<double>(t.select(0, 2));
    CHECK(doubled(3) == 24.0);
    // Whole-array assignment writes through.
    auto whole = kiln::as_xtensor<double>(t);
    xt::noalias(whole) = xt::zeros<double>({3, 4});
    CHECK(kiln::sum(t).item<double>() == 0.0);
    CHECK(kiln::as_xtensor<float>(kiln::zeros({0, 3})).size() == 0);

    CHECK_THROWS_WITH_AS(kiln::as_xtensor<float>(t), doctest::Contains("float64"), kiln::dtype_error);
    CHECK_THROWS_AS((kiln::as_xtensor<double, 3>(t)), kiln::shape_error);
}

TEST_CASE("elementwise ops broadcast and promote like PyTorch") {
    const auto i32 = kiln::from_values<std::int32_t>({1, 2, 3}, {3});
    const auto i64 = kiln::from_values<std::int64_t>({10, 20, 30}, {3});
    const auto fl = f32({0.5f, 1.5f, 2.5f}, {3});
    const auto db = kiln::from_values<double>({1, 2, 3}, {3});
    const auto bo = kiln::from_values<bool>({true, false, true}, {3});

    CHECK((i32 + i64).dtype() == kiln::int64);
    CHECK((i32 + fl).dtype() == kiln::float32);
    CHECK((i64 * fl).dtype() == kiln::float32);
    CHECK((fl + db).dtype() == kiln::float64);
    CHECK((bo + i32).dtype() == kiln::int32);
    CHECK((fl * 2.0).dtype() == kiln::float32);    // a C++ double does not promote float32
    CHECK((i32 * 2).dtype() == kiln::int32);
    CHECK((i32 * 0.5).dtype() == kiln::float32);   // an int tensor meets a float number
    CHECK((bo + 1).dtype() == kiln::int64);
    CHECK(kiln::exp(i32).dtype() == kiln::float32);
    CHECK((i32 < fl).dtype() == kiln::bool_);
    CHECK(values(i32 + i64) == std::vector<double>{11, 22, 33});
    CHECK(values(i32 * 0.5) == std::vector<double>{0.5, 1, 1.5});
    CHECK(values(2 - i32) == std::vector<double>{1, 0, -1});
    CHECK(values(i32 / 2) == std::vector<double>{0.5, 1, 1.5});  // true division, as in PyTorch
    CHECK(values(i32 < fl) == std::vector<double>{0, 0, 0});
    CHECK(values(kiln::where(bo, db, -db)) == std::vector<double>{1, -2, 3});
    CHECK(values(kiln::where(i32 > 1, i32, 0_c)) == std::vector<double>{0, 2, 3});

    // Broadcasting: (2, 1) with (3,) gives (2, 3).
    const auto col = f32({1, 2}, {2, 1});
    const auto r = col * fl;
    CHECK(r.shape() == kiln::dims{2, 3});
    CHECK(values(r) == std::vector<double>{0.5, 1.5, 2.5, 1, 3, 5});

    // Every unary op matches its graph-mode result on the same data.
    const auto x = kiln::linspace(-2, 2, 9, kiln::float64);
    const auto gx = kiln::input<"x", double>{};
    std::vector<double> xv = values(x);
    auto same = [&](auto f) {
        const auto eager = values(f(x));
        const auto graph = kiln::run(f(gx), gx = xv);
        kiln_test::check_all_close(graph, eager, 1e-15);
    };
    same([](auto a) { return kiln::abs(a) + kiln::square(a) - kiln::relu(a); });
    same([](auto a) { return kiln::exp(a) * kiln::sigmoid(a) / (kiln::tanh(a) + 3_c); });
    same([](auto a) { return kiln::sin(a) - kiln::cos(a) + kiln::sqrt(kiln::abs(a) + 1_c) * kiln::rsqrt(a * a + 1_c); });
    same([](auto a) { return kiln::log(a * a + 1_c) + kiln::pow(kiln::abs(a), 1.5) + kiln::maximum(a, -a * 0.5); });
    same([](auto a) { return kiln::minimum(a, 0.25 * a) - kiln::neg(a); });
}

TEST_CASE("the same generic lambda runs in eager and graph mode and agrees") {
    auto f = [](auto x, auto y) { return kiln::relu(x * y + 0.5_c * x - y) * 2_c + y; };
    kiln::generator g(3);
    const auto a = kiln::randn({1000}, kiln::float32, g), b = kiln::randn({1000}, kiln::float32, g);
    const kiln::tensor eager = f(a, b);
    // Tensors feed graph mode directly.
    const auto graph = kiln::run(f("x"_in, "y"_in), "x"_in = a, "y"_in = b);
    kiln_test::check_all_close(graph, values(eager), 1e-6, 1e-6);
    // A tensor of another dtype is refused at bind time with a dtype_error.
    CHECK_THROWS_AS((void)kiln::run(f("x"_in, "y"_in), "x"_in = a.to(kiln::float64), "y"_in = b), kiln::dtype_error);
}

TEST_CASE("in-place forms write into the tensor and check shape and dtype") {
    auto a = f32({1, 2, 3, 4}, {2, 2});
    const auto before = a.data<float>();
    a += f32({10, 20}, {2});
    a -= 1;
    a *= 2_c;
    a /= 2;
    CHECK(a.data<float>() == before);
    CHECK(values(a) == std::vector<double>{10, 21, 12, 23});
    auto i = kiln::from_values<std::int32_t>({1, 2}, {2});
    CHECK_THROWS_AS(i += f32({0.5f, 0.5f}, {2}), kiln::dtype_error);
    CHECK_THROWS_AS(i *= 0.5, kiln::dtype_error);
    i += kiln::from_values<std::int64_t>({5, 5}, {2});  // int64 into int32 stays an integer: allowed, like PyTorch
    CHECK(values(i) == std::vector<double>{6, 7});
    CHECK_THROWS_AS(a += kiln::ones({3}), kiln::shape_error);
    CHECK_THROWS_AS(a += kiln::ones({2, 2, 2}), kiln::shape_error);
}

TEST_CASE("in-place forms on a temporary view write into the tensor it views") {
    auto m = f32({1, 2, 3, 4, 5, 6}, {2, 3});
    m.slice(1, 1, 2) *= 100;  // docs/eager-mode.md's example
    CHECK(values(m) == std::vector<double>{1, 200, 3, 4, 500, 6});
    m[0] += 1;
    m(1, 2) -= 6;
    m.transpose(0, 1)[2] /= 2;  // column 2
    CHECK(values(m) == std::vector<double>{2, 201, 2, 4, 500, 0});
    auto y = kiln::arange(0, 6, 1, kiln::float64);
    y.slice(0, 1, 6) += y.slice(0, 0, 5);  // overlapping: read as if copied first, as NumPy does
    CHECK(values(y) == std::vector<double>{0, 1, 3, 5, 7, 9});
    const kiln::tensor r = (m[1] *= 2);  // the result is the view
    CHECK(values(r) == std::vector<double>{8, 1000, 0});
    CHECK(values(m[1]) == std::vector<double>{8, 1000, 0});
    CHECK_THROWS_AS(m.slice(0, 0, 1) += kiln::ones({3, 3}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::ones({3}).broadcast_to({2, 3}) += 1, kiln::value_error);
}

TEST_CASE("errors name the op, the shapes and the dtypes") {
    const auto a = kiln::ones({2, 3}), b = kiln::ones({4}, kiln::float64);
    CHECK_THROWS_WITH_AS(a + b, "kiln: shape_error in 'add': cannot broadcast (2, 3) float32 and (4,) float64",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::where(a > 0_c, a, b), "kiln: shape_error in 'where': cannot broadcast (2, 3) bool and "
                         "(2, 3) float32 and (4,) float64", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::sum(a, {2}), "kiln: value_error in 'sum': axis 2 is out of range for shape (2, 3) (float32)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::max(kiln::zeros({0, 3}), {0}),
                         "kiln: value_error in 'max': cannot reduce over an empty dimension (shape (0, 3), float32)", kiln::value_error);
}

TEST_CASE("reductions over axes with keepdims") {
    const auto t = kiln::arange(0, 6, 1, kiln::float32).reshape({2, 3});  // [[0 1 2] [3 4 5]]
    CHECK(kiln::sum(t).item<double>() == 15);
    CHECK(kiln::sum(t).dim() == 0);
    CHECK(values(kiln::sum(t, {0})) == std::vector<double>{3, 5, 7});
    CHECK(values(kiln::sum(t, {1})) == std::vector<double>{3, 12});
    CHECK(kiln::sum(t, {1}, true).shape() == kiln::dims{2, 1});
    CHECK(values(kiln::sum(t, {-1, 0})) == std::vector<double>{15});
    CHECK(values(kiln::mean(t, {0})) == std::vector<double>{1.5, 2.5, 3.5});
    CHECK(values(kiln::max(t, {1})) == std::vector<double>{2, 5});
    CHECK(values(kiln::min(t, {0})) == std::vector<double>{0, 1, 2});
    CHECK(values(kiln::prod(t + 1_c, {1})) == std::vector<double>{6, 120});
    CHECK(values(kiln::argmax(t, 1)) == std::vector<double>{2, 2});
    CHECK(values(kiln::argmin(t, 0)) == std::vector<double>{0, 0, 0});
    CHECK(kiln::argmax(t, 0, true).shape() == kiln::dims{1, 3});
    // On a transposed view, and integers accumulate in int64.
    CHECK(values(kiln::sum(t.transpose(0, 1), {1})) == std::vector<double>{3, 5, 7});
    const auto i = kiln::from_values<std::int32_t>({2000000000, 2000000000}, {2});
    CHECK(kiln::sum(i).dtype() == kiln::int64);
    CHECK(kiln::sum(i).item<std::int64_t>() == 4000000000LL);
    CHECK(kiln::mean(i).dtype() == kiln::float32);
    // NaN propagates through max and argmax; mean of nothing is NaN.
    const auto n = kiln::from_values<double>({1, std::nan(""), 3}, {3});
    CHECK(std::isnan(kiln::max(n).item<double>()));
    CHECK(kiln::argmax(n, 0).item<std::int64_t>() == 1);
    CHECK(std::isnan(kiln::mean(kiln::zeros({0})).item<double>()));
    CHECK(kiln::sum(kiln::zeros({0})).item<double>() == 0);
}

TEST_CASE("printing like NumPy") {
    CHECK(kiln::to_string(f32({1, 2, 3, 4}, {2, 2})) == "tensor([[1., 2.],\n        [3., 4.]], dtype=float32)");
    // The layouts below are numpy.array's repr of the same values (NumPy 2.4): every value shows its point, the points
    // line up, and scientific notation is chosen for all values at once.
    CHECK(kiln::to_string(f32({0.5f, -1.25f}, {2})) == "tensor([ 0.5 , -1.25], dtype=float32)");
    CHECK(kiln::to_string(f64({0, 10, 0.5}, {3})) == "tensor([ 0. , 10. ,  0.5], dtype=float64)");
    CHECK(kiln::to_string(f64({1.5, 2, 3, 4.25}, {2, 2})) == "tensor([[1.5 , 2.  ],\n        [3.  , 4.25]], dtype=float64)");
    CHECK(kiln::to_string(f64({1e-5, 1, 100}, {3})) == "tensor([1.e-05, 1.e+00, 1.e+02], dtype=float64)");
    CHECK(kiln::to_string(f64({1e-5, 1.5, std::nan(""), -INFINITY}, {4})) == "tensor([1.0e-05, 1.5e+00,     nan,    -inf], dtype=float64)");
    CHECK(kiln::to_string(f64({1e9, 2e9}, {2})) == "tensor([1.e+09, 2.e+09], dtype=float64)");
    CHECK(kiln::to_string(f64({1e-5, 1e100}, {2})) == "tensor([1.e-005, 1.e+100], dtype=float64)");
    CHECK(kiln::to_string(f64({123456.7, 1.5}, {2})) == "tensor([1.234567e+05, 1.500000e+00], dtype=float64)");
    CHECK(kiln::to_string(f64({0.0, -0.0}, {2})) == "tensor([ 0., -0.], dtype=float64)");
    CHECK(kiln::to_string(f64({1.5, std::nan(""), 2}, {3})) == "tensor([1.5, nan, 2. ], dtype=float64)");
    CHECK(kiln::to_string(f64({1, std::nan(""), 2}, {3})) == "tensor([ 1., nan,  2.], dtype=float64)");
    CHECK(kiln::to_string(f64({0.1 + 0.2, 1}, {2})) == "tensor([0.3, 1. ], dtype=float64)");
    CHECK(kiln::to_string(f64({9.99999999999, 1}, {2})) == "tensor([10.,  1.], dtype=float64)");
    CHECK(kiln::to_string(kiln::from_values<std::int64_t>({1, -20}, {2})) == "tensor([  1, -20], dtype=int64)");
    CHECK(kiln::to_string(kiln::from_values<bool>({true, false}, {2})) == "tensor([ True, False], dtype=bool)");
    CHECK(kiln::to_string(kiln::full({}, 7)) == "tensor(7., dtype=float32)");
    CHECK(kiln::to_string(kiln::zeros({0, 2})) == "tensor([], dtype=float32, shape=(0, 2))");
    std::ostringstream parts;
    parts << kiln::float64 << ' ' << f64({1, 2, 3, 4, 5, 6}, {2, 3}).shape() << ' ' << kiln::cpu << ' ' << kiln::dims{};
    CHECK(parts.str() == "float64 (2, 3) cpu ()");
    const std::string big = kiln::to_string(kiln::arange(2000));
    CHECK(big == "tensor([   0,    1,    2, ..., 1997, 1998, 1999], dtype=int64)");
    std::ostringstream os;
    os << kiln::arange(3);
    CHECK(os.str() == "tensor([0, 1, 2], dtype=int64)");
}

TEST_CASE("the caching allocator reuses freed blocks") {
    kiln::empty_cache();
    const auto before = kiln::cache_stats();
    const void* first;
    {
        const auto a = kiln::zeros({1 << 20});
        first = a.raw_data();
    }
    CHECK(kiln::cache_stats().cached_bytes >= (std::size_t{1} << 22));
    const auto b = kiln::zeros({1 << 20});
    CHECK(b.raw_data() == first);
    CHECK(kiln::cache_stats().hits == before.hits + 1);
    // Blocks are 64-byte aligned for the vector loops.
    CHECK(reinterpret_cast<std::uintptr_t>(b.raw_data()) % 64 == 0);
    kiln::empty_cache();
    CHECK(kiln::cache_stats().cached_bytes == 0);
}

TEST_CASE("small blocks are cached per thread and may be freed on another thread") {
    const auto before = kiln::cache_stats();
    std::vector<kiln::tensor> handed_over(64);
    std::thread producer([&] {
        for (int i = 0; i < 200; ++i) {
            const auto t = kiln::full({16}, i) + 1;  // allocated and freed on this thread: reused
            CHECK(t.at<float>({3}) == static_cast<float>(i + 1));
        }
        for (auto& t : handed_over) t = kiln::full({8}, 2.0);
    });
    producer.join();
    // Blocks made on the finished thread are freed here, into this thread's cache.
    double total = 0;
    for (const auto& t : handed_over) total += kiln::sum(t).item<double>();
    CHECK(total == 64 * 16.0);
    handed_over.clear();
    const auto after = kiln::cache_stats();
    CHECK(after.hits >= before.hits + 150);  // the producer's loop reused its own blocks
    const auto a = kiln::ones({8});            // served from the blocks handed over
    CHECK(kiln::cache_stats().hits == after.hits + 1);
    CHECK(reinterpret_cast<std::uintptr_t>(a.raw_data()) % 64 == 0);
}

TEST_CASE(".npy files: the bytes numpy.save writes, round trips, other orders, bad files") {
    const std::string path = "kiln_test_eager.npy";
    const auto t = kiln::from_values<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    kiln::save_npy(path, t.transpose(0, 1).transpose(0, 1));
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // The format's preamble, then the dict padded with spaces to 128 bytes in all, then the data.
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    const std::string header = dict + std::string(128 - 10 - dict.size() - 1, ' ') + "\n";
    REQUIRE(bytes.size() == 128 + 24);
    CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
    CHECK(static_cast<unsigned char>(bytes[8]) == header.size());
    CHECK(bytes[9] == 0);
    CHECK(bytes.substr(10, header.size()) == header);
    float second;
    std::memcpy(&second, bytes.data() + 128 + 4, 4);
    CHECK(second == 2.f);

    for (const auto& x : {kiln::arange(0, 7, 1, kiln::int32).reshape({7}), kiln::from_values<bool>({true, false}, {2, 1}),
                          kiln::randn({3, 2, 2}, kiln::float64), kiln::full({}, 4.5), kiln::zeros({0, 4}, kiln::int64)}) {
        kiln::save_npy(path, x);
        const auto y = kiln::load_npy(path);
        CHECK(y.dtype() == x.dtype());
        CHECK(y.shape() == x.shape());
        CHECK(values(y) == values(x));
    }

    // A big-endian, Fortran-order int32 2x3 array [[1 2 3] [4 5 6]] written by hand.
    {
        const std::string d2 = "{'descr': '>i4', 'fortran_order': True, 'shape': (2, 3), }";
        std::string h2 = d2 + std::string(128 - 10 - d2.size() - 1, ' ') + "\n";
        std::ofstream out(path, std::ios::binary);
        out.write("\x93NUMPY\x01\x00", 8);
        out.put(static_cast<char>(h2.size()));
        out.put(0);
        out << h2;
        for (int v : {1, 4, 2, 5, 3, 6}) {
            const char be[4] = {0, 0, 0, static_cast<char>(v)};
            out.write(be, 4);
        }
    }
    const auto f = kiln::load_npy(path);
    CHECK(f.dtype() == kiln::int32);
    CHECK(f.shape() == kiln::dims{2, 3});
    CHECK(values(f) == std::vector<double>{1, 2, 3, 4, 5, 6});

    {
        std::ofstream(path, std::ios::binary) << "not a numpy file";
    }
    CHECK_THROWS_WITH_AS(kiln::load_npy(path),
                         "kiln: file_error in 'load_npy': 'kiln_test_eager.npy': not a .npy file (bad magic)",
                         kiln::file_error);
    kiln::save_npy(path, t);
    {
        std::ifstream full(path, std::ios::binary);
        std::string all((std::istreambuf_iterator<char>(full)), std::istreambuf_iterator<char>());
        std::ofstream(path, std::ios::binary) << all.substr(0, all.size() - 3);
    }
    CHECK_THROWS_AS(kiln::load_npy(path), kiln::file_error);
    CHECK_THROWS_AS(kiln::load_npy("/nonexistent/kiln.npy"), kiln::file_error);
    std::remove(path.c_str());
}
