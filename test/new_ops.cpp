// The eager ops a NumPy or PyTorch user reaches for (issue #19): flip and negative slice steps, advanced indexing,
// sorting, cumulative ops, any/all, var/std, argmax without an axis, tile/repeat/split/pad, outer, einsum, and the
// bitwise ops; each against hand-computed values, and each differentiable one against central differences through
// the gradient tape.
#include <kiln/kiln.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using kiln_test::check_all_close;
using kiln_test::f64;
using kiln_test::values;

namespace {

using vec = std::vector<double>;

// d sum(f(x) * weights) / dx by the tape and by central differences, for a float64 x.
void check_tape_gradient(const std::function<kiln::tensor(const kiln::tensor&)>& f, const kiln::tensor& x0) {
    const kiln::tensor y0 = f(x0);
    const kiln::tensor weights = kiln::arange(1, static_cast<double>(y0.numel()) + 1, 1, kiln::float64).reshape(y0.shape());
    kiln::variable x(x0);
    kiln::gradient_tape tape;
    const kiln::tensor loss = kiln::sum(f(x) * weights);
    const vec got = values(tape.gradient(loss, x));
    vec xv = values(x0), fd(xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
        const double h = 1e-6, keep = xv[i];
        xv[i] = keep + h;
        const double up = kiln::sum(f(kiln::from_vector(xv, x0.shape())) * weights).item<double>();
        xv[i] = keep - h;
        const double down = kiln::sum(f(kiln::from_vector(xv, x0.shape())) * weights).item<double>();
        xv[i] = keep;
        fd[i] = (up - down) / (2 * h);
    }
    check_all_close(got, fd, 1e-6, 1e-8);
}

}  // namespace

TEST_CASE("flip and negative slice steps are views with NumPy's elements") {
    const kiln::tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(values(kiln::flip(m, {1})) == vec{3, 2, 1, 6, 5, 4});
    CHECK(values(kiln::flip(m)) == vec{6, 5, 4, 3, 2, 1});
    CHECK(kiln::flip(m).shares_storage_with(m));
    const kiln::tensor r = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {10});
    CHECK(values(r.slice(0, kiln::slice_end, kiln::slice_begin, -1)) == vec{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    CHECK(values(r.slice(0, 8, 2, -2)) == vec{8, 6, 4});           // x[8:2:-2]
    CHECK(values(r.slice(0, -1, -4, -1)) == vec{9, 8, 7});          // x[-1:-4:-1]
    CHECK(values(r.slice(0, 2, 8, -1)).empty());                    // x[2:8:-1]
    CHECK(values(r.slice(0, 100, kiln::slice_begin, -3)) == vec{9, 6, 3, 0});
    // Operations on negative-stride views, and writes through them.
    CHECK(values(kiln::flip(r) + r) == vec(10, 9.0));
    kiln::tensor c = r.clone();
    kiln::flip(c).slice(0, 0, 3) = f64({-1, -2, -3}, {3});
    CHECK(values(c) == vec{0, 1, 2, 3, 4, 5, 6, -3, -2, -1});
    CHECK(values(kiln::matmul(kiln::flip(m, {0}), kiln::flip(m.transpose(0, 1), {1}))) ==
          vec{4 * 4 + 5 * 5 + 6 * 6, 4 * 1 + 5 * 2 + 6 * 3, 1 * 4 + 2 * 5 + 3 * 6, 1 * 1 + 2 * 2 + 3 * 3});
    CHECK_THROWS_AS(r.slice(0, 0, 3, 0), kiln::value_error);
    CHECK_THROWS_AS(kiln::flip(m, {0, -2}), kiln::value_error);
    check_tape_gradient([](const kiln::tensor& x) { return kiln::flip(x, {0}) * x; }, f64({0.5, -1, 2, 3}, {4}));
    check_tape_gradient([](const kiln::tensor& x) { return x.slice(0, 3, 0, -2) * 2; }, f64({0.5, -1, 2, 3}, {4}));
}

TEST_CASE("advanced indexing: index_select, t[index], masks, take_along_axis and scatter_add") {
    const kiln::tensor m = f64({1, 2, 3, 4, 5, 6}, {3, 2});
    const kiln::tensor idx = kiln::from_values<std::int64_t>({2, 0, -1}, {3});
    CHECK(values(kiln::index_select(m, 0, idx)) == vec{5, 6, 1, 2, 5, 6});
    CHECK(values(kiln::index_select(m, 1, kiln::from_values<std::int32_t>({1}, {1}))) == vec{2, 4, 6});
    CHECK(values(m[idx]) == vec{5, 6, 1, 2, 5, 6});
    CHECK(m[kiln::from_values<std::int64_t>({1, 0, 0, 2}, {2, 2})].shape() == kiln::dims{2, 2, 2});
    CHECK_THROWS_WITH_AS(kiln::index_select(m, 0, kiln::from_values<std::int64_t>({3}, {1})),
                         doctest::Contains("index 3 is out of range for a dimension of size 3"), kiln::value_error);
    CHECK_THROWS_AS(kiln::index_select(m, 0, f64({1}, {1})), kiln::dtype_error);
    // Boolean masks select elements in row-major order.
    CHECK(values(m[m > 2.5]) == vec{3, 4, 5, 6});
    CHECK(values(kiln::masked_select(m, kiln::from_values<bool>({true, false}, {2}))) == vec{1, 3, 5});
    // t[mask] with a mask of the leading extents picks those rows, as NumPy's m[[True, False, True]] does; it does not
    // broadcast (NumPy and PyTorch refuse a mask of another shape).
    const kiln::tensor rows = m[kiln::from_values<bool>({true, false, true}, {3})];
    CHECK(rows.shape() == kiln::dims{2, 2});
    CHECK(values(rows) == vec{1, 2, 5, 6});
    CHECK(m[kiln::from_values<bool>({false, false, false}, {3})].shape() == kiln::dims{0, 2});
    CHECK_THROWS_WITH_AS(m[kiln::from_values<bool>({true, false}, {2})],
                         "kiln: shape_error in 'index': the bool mask has shape (2,); it must have the tensor's shape (3, 2) "
                         "or its leading extents", kiln::shape_error);
    CHECK_THROWS_AS(kiln::ones({3})[kiln::from_values<bool>({true}, {1})], kiln::shape_error);
    check_tape_gradient([&](const kiln::tensor& x) { return x[kiln::from_values<bool>({false, true, true}, {3})] * x[kiln::from_values<bool>({false, true, true}, {3})]; }, m);
    // take_along_axis and scatter_add.
    const kiln::tensor order = kiln::from_values<std::int64_t>({1, 0, 0, 0, 1, 1}, {3, 2});
    CHECK(values(kiln::take_along_axis(m, order, 1)) == vec{2, 1, 3, 3, 6, 6});
    const kiln::tensor sa = kiln::scatter_add(kiln::zeros({2, 3}, kiln::float64), 1,
                                              kiln::from_values<std::int64_t>({0, 0, 2, 1}, {2, 2}),
                                              f64({1, 2, 3, 4}, {2, 2}));
    CHECK(values(sa) == vec{3, 0, 0, 0, 4, 3});
    check_tape_gradient([&](const kiln::tensor& x) { return kiln::index_select(x, 0, idx); }, m);
    check_tape_gradient([&](const kiln::tensor& x) { return x[x > 2.5] * x[x > 2.5]; }, m);
    check_tape_gradient([&](const kiln::tensor& x) { return kiln::take_along_axis(x, order, 1); }, m);
    check_tape_gradient(
        [&](const kiln::tensor& x) {
            return kiln::scatter_add(x, 1, kiln::from_values<std::int64_t>({1, 1, 0}, {3, 1}), x.slice(1, 0, 1) * x.slice(1, 1, 2));
        },
        m);
}

TEST_CASE("sort and argsort are stable, put NaN last and pass gradients to where values came from") {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    const kiln::tensor x = f64({3, 1, nan, 2, 1}, {5});
    const vec s = values(kiln::sort(x));
    CHECK(vec(s.begin(), s.begin() + 4) == vec{1, 1, 2, 3});
    CHECK(std::isnan(s[4]));
    CHECK(values(kiln::argsort(x)) == vec{1, 4, 3, 0, 2});
    CHECK(values(kiln::argsort(x, 0, true)) == vec{0, 3, 1, 4, 2});
    const kiln::tensor m = f64({3, 1, 2, 0, 5, 4}, {2, 3});
    CHECK(values(kiln::sort(m, 1)) == vec{1, 2, 3, 0, 4, 5});
    CHECK(values(kiln::sort(m, 0)) == vec{0, 1, 2, 3, 5, 4});
    CHECK(kiln::argsort(m).dtype() == kiln::int64);
    check_tape_gradient([](const kiln::tensor& v) { return kiln::sort(v, 1, true); }, f64({3, 1, 2, 0, 5, 4}, {2, 3}));
    // An axis out of range names the op called (sort is take_along_axis of argsort underneath).
    CHECK_THROWS_WITH_AS(kiln::sort(m, 2), "kiln: value_error in 'sort': axis 2 is out of range for shape (2, 3)", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::sort(kiln::tensor(1.0)), "kiln: value_error in 'sort': axis -1 is out of range for shape ()",
                         kiln::value_error);
}

TEST_CASE("cumsum and cumprod along an axis, with their gradients") {
    const kiln::tensor m = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    CHECK(values(kiln::cumsum(m, 1)) == vec{1, 3, 6, 4, 9, 15});
    CHECK(values(kiln::cumsum(m, 0)) == vec{1, 2, 3, 5, 7, 9});
    CHECK(values(kiln::cumprod(m, -1)) == vec{1, 2, 6, 4, 20, 120});
    CHECK(kiln::cumsum(kiln::from_values<std::int32_t>({1, 2}, {2}), 0).dtype() == kiln::int64);
    CHECK(values(kiln::cumsum(kiln::from_values<bool>({true, false, true}, {3}), 0)) == vec{1, 1, 2});
    check_tape_gradient([](const kiln::tensor& x) { return kiln::cumsum(x, 1); }, m);
    check_tape_gradient([](const kiln::tensor& x) { return kiln::cumprod(x, 0) * kiln::cumprod(x, 1); },
                        f64({1.5, -2, 0.5, 3, 1.1, -0.7}, {2, 3}));
}

TEST_CASE("any, all, argmax without an axis, var and std") {
    const kiln::tensor m = f64({0, 2, 0, 0, 0, 1}, {2, 3});
    CHECK(kiln::any(m).item<bool>());
    CHECK_FALSE(kiln::all(m).item<bool>());
    CHECK(values(kiln::any(m, {0})) == vec{0, 1, 1});
    CHECK(values(kiln::all(m + 1, {1})) == vec{1, 1});
    CHECK(kiln::any(m).dtype() == kiln::bool_);
    CHECK_FALSE(kiln::any(kiln::zeros({0})).item<bool>());
    CHECK(kiln::all(kiln::zeros({0})).item<bool>());
    CHECK(kiln::argmax(m).item<std::int64_t>() == 1);
    CHECK(kiln::argmin(f64({3, -1, 2, -1}, {2, 2})).item<std::int64_t>() == 1);
    const kiln::tensor v = f64({1, 2, 3, 4}, {4});
    CHECK(kiln::var(v).item<double>() == doctest::Approx(5.0 / 3));  // unbiased, as torch.var
    CHECK(kiln::var(v, {}, 0).item<double>() == doctest::Approx(1.25));  // NumPy's default
    CHECK(kiln::std(v, {}, 0).item<double>() == doctest::Approx(std::sqrt(1.25)));
    check_all_close(values(kiln::var(f64({1, 2, 3, 5, 7, 9}, {2, 3}), {1})), vec{1, 4}, 1e-15);
    CHECK(kiln::var(kiln::from_values<std::int32_t>({1, 3}, {2})).dtype() == kiln::float32);
    const double one_sample = kiln::var(f64({2}, {1})).item<double>();  // 0 / 0, as torch.var of one value
    CHECK(std::isnan(one_sample));
    check_tape_gradient([](const kiln::tensor& x) { return kiln::std(x, {1}); }, f64({1, 2.5, 3, 5, 7, 9.5}, {2, 3}));
}

TEST_CASE("tile, repeat, split, pad and outer") {
    const kiln::tensor r = f64({1, 2}, {2});
    CHECK(values(kiln::tile(r, {3})) == vec{1, 2, 1, 2, 1, 2});
    const kiln::tensor t2 = kiln::tile(r, {2, 2});
    CHECK(t2.shape() == kiln::dims{2, 4});
    CHECK(values(t2) == vec{1, 2, 1, 2, 1, 2, 1, 2});
    const kiln::tensor m = f64({1, 2, 3, 4}, {2, 2});
    CHECK(values(kiln::repeat(m, 2, 0)) == vec{1, 2, 1, 2, 3, 4, 3, 4});
    CHECK(values(kiln::repeat(m, 2, 1)) == vec{1, 1, 2, 2, 3, 3, 4, 4});
    CHECK(values(kiln::repeat(m, 2)) == vec{1, 1, 2, 2, 3, 3, 4, 4});
    const auto parts = kiln::split(f64({1, 2, 3, 4, 5, 6}, {6}), 3);
    REQUIRE(parts.size() == 3);
    CHECK(values(parts[2]) == vec{5, 6});
    const auto sized = kiln::split(f64({1, 2, 3, 4, 5, 6}, {6}), std::vector<std::ptrdiff_t>{1, 5}, 0);
    CHECK(values(sized[1]) == vec{2, 3, 4, 5, 6});
    CHECK_THROWS_AS(kiln::split(r, 3), kiln::value_error);
    const kiln::tensor p = kiln::pad(m, {{1, 0}, {0, 2}}, -1);
    CHECK(p.shape() == kiln::dims{3, 4});
    CHECK(values(p) == vec{-1, -1, -1, -1, 1, 2, -1, -1, 3, 4, -1, -1});
    CHECK(values(kiln::outer(r, f64({1, 10, 100}, {3}))) == vec{1, 10, 100, 2, 20, 200});
    check_tape_gradient([](const kiln::tensor& x) { return kiln::tile(x, {2, 3}); }, m);
    check_tape_gradient([](const kiln::tensor& x) { return kiln::repeat(x, 3, 1); }, m);
    check_tape_gradient([](const kiln::tensor& x) { return kiln::pad(x, {{2, 1}}) * kiln::pad(x, {{1, 2}}); }, r);
    check_tape_gradient([](const kiln::tensor& x) { return kiln::split(x, 2, 1)[1] * 3; }, m);
}

TEST_CASE("einsum over two operands") {
    const kiln::tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({1, 0, 2, 1, 0, 3}, {3, 2});
    CHECK(values(kiln::einsum("ij,jk->ik", a, b)) == values(kiln::matmul(a, b)));
    CHECK(values(kiln::einsum("ij,kj->ik", a, b.transpose(0, 1))) == values(kiln::matmul(a, b)));
    CHECK(values(kiln::einsum("ij,jk->ki", a, b)) == values(kiln::matmul(a, b).transpose(0, 1)));
    CHECK(kiln::einsum("i,i->", f64({1, 2, 3}, {3}), f64({4, 5, 6}, {3})).item<double>() == 32);
    CHECK(values(kiln::einsum("i,j->ij", f64({1, 2}, {2}), f64({3, 4, 5}, {3}))) == vec{3, 4, 5, 6, 8, 10});
    const kiln::tensor x = kiln::arange(0, 12, 1, kiln::float64).reshape({2, 2, 3});
    const kiln::tensor y = kiln::arange(0, 12, 1, kiln::float64).reshape({2, 3, 2});
    CHECK(values(kiln::einsum("bij,bjk->bik", x, y)) == values(kiln::matmul(x, y)));
    CHECK(values(kiln::einsum("bij,bjk->", x, y)) == values(kiln::sum(kiln::matmul(x, y))));
    CHECK(values(kiln::einsum("ij,jk->i", a, b)) == values(kiln::sum(kiln::matmul(a, b), {1})));
    CHECK_THROWS_WITH_AS(kiln::einsum("ij,jk->ik", a, a), doctest::Contains("'j' is 3 in one operand and 2"),
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::einsum("ij,jk", a, b), kiln::value_error);
    CHECK_THROWS_AS(kiln::einsum("ij,jk->iz", a, b), kiln::value_error);
    CHECK_THROWS_AS(kiln::einsum("ii,jk->ik", a, b), kiln::value_error);
    check_tape_gradient([&](const kiln::tensor& v) { return kiln::einsum("ij,jk->ki", v, b); }, a);
    check_tape_gradient([&](const kiln::tensor& v) { return kiln::einsum("bij,bjk->bik", x, v); }, y);
}

TEST_CASE("bitwise ops on integers and bools, refused on floating tensors") {
    const kiln::tensor a = kiln::from_values<std::int32_t>({12, -1, 5}, {3}), b = kiln::from_values<std::int32_t>({10, 3, 0}, {3});
    CHECK(values(kiln::bitwise_and(a, b)) == vec{8, 3, 0});
    CHECK(values(a | b) == vec{14, -1, 5});
    CHECK(values(a ^ b) == vec{6, -4, 5});
    CHECK(values(~a) == vec{-13, 0, -6});
    CHECK(values(a & 4) == vec{4, 4, 4});
    CHECK((a & b).dtype() == kiln::int32);
    const kiln::tensor t = kiln::from_values<bool>({true, true, false}, {3}), f = kiln::from_values<bool>({true, false, false}, {3});
    CHECK((t & f).dtype() == kiln::bool_);
    CHECK(values(t ^ f) == vec{0, 1, 0});
    CHECK(values(~t) == vec{0, 0, 1});
    CHECK_THROWS_WITH_AS(kiln::bitwise_and(f64({1}, {1}), f64({1}, {1})),
                         doctest::Contains("'bitwise_and' is defined for integer and bool operands"), kiln::dtype_error);
    // Graph mode on integers.
    const auto x = kiln::input<"x", std::int64_t>();
    std::vector<std::int64_t> xv{6, 9};
    auto r = kiln::run((x & kiln::c<3>) | kiln::c<8>, x = xv);
    CHECK(r(0) == 10);
    CHECK(r(1) == 9);
}
