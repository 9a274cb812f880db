// The device interface and the CPU device's kernels (backend/device.hpp, backend/cpu/): the one matrix product,
// the one reduction engine and the one strided copy, against plain loops written here; and the three modes, which
// all run through those kernels, agreeing bit for bit.
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "check.hpp"

namespace {

using dev = kiln::backend::cpu_device;
using kiln::dims;
using kiln::detail::fold_kind;
using kiln::detail::matrix_ref;
using kiln::detail::strided;

static_assert(kiln::backend::device_backend<dev>);

// A matrix laid out row-major, column-major (a transposed operand) or with every other element skipped in both
// directions (no unit stride, which BLAS cannot take).
enum class layout { row, column, gapped };

template <class T>
struct laid_out {
    std::vector<T> storage;
    matrix_ref<T> ref;
};

template <class T>
laid_out<T> lay_out(const std::vector<double>& values, std::ptrdiff_t rows, std::ptrdiff_t cols, layout l) {
    laid_out<T> m;
    const std::ptrdiff_t gap = l == layout::gapped ? 2 : 1;
    m.storage.assign(static_cast<std::size_t>(rows * cols * gap * gap + 1), T(0));
    std::ptrdiff_t rs = 0, cs = 0;
    if (l == layout::row) rs = cols, cs = 1;
    if (l == layout::column) rs = 1, cs = rows;
    if (l == layout::gapped) rs = cols * gap * gap, cs = gap;
    for (std::ptrdiff_t i = 0; i < rows; ++i)
        for (std::ptrdiff_t j = 0; j < cols; ++j)
            m.storage[static_cast<std::size_t>(i * rs + j * cs)] = static_cast<T>(values[static_cast<std::size_t>(i * cols + j)]);
    m.ref = matrix_ref<T>{m.storage.data(), rs, cs};
    return m;
}

// Quarters for floating types (every product and sum below is then exact in float), integers otherwise.
std::vector<double> random_values(std::size_t n, std::mt19937& g, double scale) {
    std::uniform_int_distribution<int> d(-4, 4);
    std::vector<double> v(n);
    for (double& x : v) x = d(g) / scale;
    return v;
}

// C = A B in double, the plain way.
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, std::ptrdiff_t m, std::ptrdiff_t n,
                            std::ptrdiff_t k) {
    std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
    for (std::ptrdiff_t i = 0; i < m; ++i)
        for (std::ptrdiff_t j = 0; j < n; ++j)
            for (std::ptrdiff_t p = 0; p < k; ++p)
                c[static_cast<std::size_t>(i * n + j)] += a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(p * n + j)];
    return c;
}

template <class T>
void check_gemm(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, std::mt19937& g) {
    const double scale = std::is_floating_point_v<T> ? 4.0 : 1.0;
    const std::vector<double> a = random_values(static_cast<std::size_t>(m * k), g, scale);
    const std::vector<double> b = random_values(static_cast<std::size_t>(k * n), g, scale);
    const std::vector<double> expect = product(a, b, m, n, k);
    for (layout la : {layout::row, layout::column, layout::gapped})
        for (layout lb : {layout::row, layout::column, layout::gapped}) {
            const laid_out<T> A = lay_out<T>(a, m, k, la), B = lay_out<T>(b, k, n, lb);
            std::vector<T> c(static_cast<std::size_t>(m * n) + 1, T(-7));
            dev::gemm(c.data(), m, n, k, A.ref, B.ref);
            INFO("m=" << m << " n=" << n << " k=" << k << " layouts " << int(la) << ", " << int(lb));
            std::vector<double> got(c.begin(), c.end() - 1);
            kiln_test::check_all_close(got, expect, 0.0);  // quarters: exact
            CHECK(c.back() == T(-7));                      // nothing written past C
        }
}

}  // namespace

TEST_CASE("the CPU device's matrix product: equal rows of A give equal rows of C wherever they fall") {
    // Each element's sum takes one order whatever tile, block or tail computes it (found by the NumPy differential
    // test: an argmax over 17 equal dot products picked the 17th, which a separate tail loop had summed in another
    // order).
    std::mt19937 g(11);
    std::uniform_real_distribution<double> u(-2, 2);
    for (const auto& mnk : std::vector<std::array<std::ptrdiff_t, 3>>{{17, 1, 17}, {17, 1, 64}, {9, 3, 33}, {13, 37, 10}, {6, 1, 5}}) {
        // (Not a structured binding: doctest's INFO captures m, n and k in a lambda, which clang 14 refuses for a
        // binding.)
        const std::ptrdiff_t m = mnk[0], n = mnk[1], k = mnk[2];
        std::vector<double> row(static_cast<std::size_t>(k)), a, b(static_cast<std::size_t>(k * n));
        for (double& x : row) x = u(g);
        for (std::ptrdiff_t i = 0; i < m; ++i) a.insert(a.end(), row.begin(), row.end());
        for (double& x : b) x = u(g);
        for (layout la : {layout::row, layout::column, layout::gapped})
            for (layout lb : {layout::row, layout::column}) {
                const laid_out<float> A = lay_out<float>(a, m, k, la), B = lay_out<float>(b, k, n, lb);
                std::vector<float> c(static_cast<std::size_t>(m * n));
                dev::gemm(c.data(), m, n, k, A.ref, B.ref);
                INFO("m=" << m << " n=" << n << " k=" << k << " layouts " << int(la) << ", " << int(lb));
                for (std::ptrdiff_t i = 1; i < m; ++i)
                    for (std::ptrdiff_t j = 0; j < n; ++j) CHECK(c[static_cast<std::size_t>(i * n + j)] == c[static_cast<std::size_t>(j)]);
            }
    }
}

TEST_CASE("the CPU device's matrix product: every layout, small, BLAS-sized and degenerate shapes, every dtype") {
    std::mt19937 g(7);
    // Small products take the register-blocked kernel (tiles of 4 rows and up to 4 vectors, then narrower ones, then
    // single columns); 80 x 70 x 90 is past its limit (BLAS when found, with unit
    // strides); gapped operands take the portable kernel.
    for (auto [m, n, k] : std::vector<std::array<std::ptrdiff_t, 3>>{{2, 3, 4}, {33, 17, 65}, {1, 50, 7}, {50, 1, 7},
                                                                     {7, 3, 1}, {9, 4, 20}, {80, 70, 90},
                                                                     // the reference step's products; odd tails
                                                                     {32, 64, 10}, {10, 64, 32}, {32, 64, 1}, {64, 1, 32},
                                                                     {6, 130, 9}, {5, 40, 3}}) {
        check_gemm<float>(m, n, k, g);
        check_gemm<double>(m, n, k, g);
    }
    check_gemm<std::int32_t>(5, 6, 7, g);
    check_gemm<std::int64_t>(5, 6, 7, g);
    // k = 0: C is zeros; m = 0: nothing is written.
    std::vector<float> c(6, 5.0f);
    const float none = 0;
    dev::gemm(c.data(), 2, 3, 0, matrix_ref<float>{&none, 0, 1}, matrix_ref<float>{&none, 3, 1});
    CHECK(c == std::vector<float>(6, 0.0f));
    dev::gemm(c.data() + 0, 0, 3, 4, matrix_ref<float>{&none, 4, 1}, matrix_ref<float>{&none, 3, 1});
    CHECK(c == std::vector<float>(6, 0.0f));
    // Bool: any true product makes the element true.
    const bool ab[4] = {true, false, false, false}, bb[4] = {false, true, true, false};
    bool cb[4] = {};
    dev::gemm(cb, 2, 2, 2, matrix_ref<bool>{ab, 2, 1}, matrix_ref<bool>{bb, 2, 1});
    CHECK(cb[0] == false);
    CHECK(cb[1] == true);
    CHECK(cb[2] == false);
    CHECK(cb[3] == false);
}

TEST_CASE("the CPU device's reduction engine: every axis pattern and layout, NaN, empty operands, integer wrapping") {
    // x[i, j, k] = 100 i + 10 j + k over (2, 3, 4), and the same values through a permuted (non-contiguous) view.
    std::vector<double> flat(24);
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
            for (int k = 0; k < 4; ++k) flat[static_cast<std::size_t>(i * 12 + j * 4 + k)] = 100 * i + 10 * j + k;
    const dims shape{2, 3, 4};
    const strided<const double> row(flat.data(), shape, kiln::detail::contiguous_strides(shape));
    std::vector<double> permuted(24);  // stored as [k][i][j]
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 3; ++j)
            for (int k = 0; k < 4; ++k) permuted[static_cast<std::size_t>(k * 6 + i * 3 + j)] = flat[static_cast<std::size_t>(i * 12 + j * 4 + k)];
    const strided<const double> perm(permuted.data(), shape, dims{3, 1, 6});
    auto expected = [&](const dims& keep, fold_kind kind) {
        std::vector<double> out(static_cast<std::size_t>(keep.numel()));
        std::vector<bool> started(out.size(), false);
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j)
                for (int k = 0; k < 4; ++k) {
                    const std::size_t o = static_cast<std::size_t>((keep[0] == 1 ? 0 : i) * keep[1] * keep[2] +
                                                                   (keep[1] == 1 ? 0 : j) * keep[2] + (keep[2] == 1 ? 0 : k));
                    const double v = 100 * i + 10 * j + k;
                    if (!started[o]) out[o] = kind == fold_kind::sum ? 0 : kind == fold_kind::prod ? 1 : v;
                    started[o] = true;
                    if (kind == fold_kind::sum) out[o] += v;
                    if (kind == fold_kind::prod) out[o] *= v / 100 + 1;
                    if (kind == fold_kind::max) out[o] = std::max(out[o], v);
                    if (kind == fold_kind::min) out[o] = std::min(out[o], v);
                }
        return out;
    };
    for (const dims& keep : {dims{1, 1, 1}, dims{1, 3, 4}, dims{2, 1, 4}, dims{2, 3, 1}, dims{1, 3, 1}, dims{2, 1, 1}}) {
        for (fold_kind kind : {fold_kind::sum, fold_kind::max, fold_kind::min}) {
            for (const auto* x : {&row, &perm}) {
                std::vector<double> out(static_cast<std::size_t>(keep.numel()), -1.0);
                dev::reduce(kind, *x, keep, out.data());
                INFO("keep " << kiln::to_string(keep) << " kind " << int(kind) << (x == &perm ? " (permuted)" : ""));
                kiln_test::check_all_close(out, expected(keep, kind), 0.0);
            }
        }
        // Products of v / 100 + 1 (kept small so that they are exact).
        std::vector<double> scaled(24);
        for (std::size_t q = 0; q < 24; ++q) scaled[q] = flat[q] / 100 + 1;
        std::vector<double> out(static_cast<std::size_t>(keep.numel()));
        dev::reduce(fold_kind::prod, strided<const double>(scaled.data(), shape, kiln::detail::contiguous_strides(shape)), keep,
                    out.data());
        kiln_test::check_all_close(out, expected(keep, fold_kind::prod), 1e-15);
    }
    // Means divide in the element type; a NaN, once met, is an extremum's result.
    const float fx[5] = {1, 2, 3, 4, 6};
    float mean = 0;
    dev::reduce(fold_kind::sum, strided<const float>(fx, dims{5}, dims{1}), dims{1}, &mean, true, 5);
    CHECK(mean == 3.2f);
    const float nx[4] = {1, NAN, 7, 2};
    float mx = 0, mn = 0;
    dev::reduce(fold_kind::max, strided<const float>(nx, dims{4}, dims{1}), dims{1}, &mx);
    dev::reduce(fold_kind::min, strided<const float>(nx, dims{4}, dims{1}), dims{1}, &mn);
    CHECK(std::isnan(mx));
    CHECK(std::isnan(mn));
    // An empty operand: its sums are 0, its products 1.
    double e[3] = {-1, -1, -1};
    dev::reduce(fold_kind::sum, strided<const double>(nullptr, dims{0, 3}, dims{3, 1}), dims{1, 3}, e);
    CHECK(e[0] == 0);
    CHECK(e[2] == 0);
    dev::reduce(fold_kind::prod, strided<const double>(nullptr, dims{0, 3}, dims{3, 1}), dims{1, 3}, e);
    CHECK(e[1] == 1);
    // Integer sums accumulate in int64 and wrap, as NumPy's do; long contiguous rows take four partial sums.
    const std::int64_t big[2] = {std::numeric_limits<std::int64_t>::max(), 1};
    std::int64_t wrapped = 0;
    dev::reduce(fold_kind::sum, strided<const std::int64_t>(big, dims{2}, dims{1}), dims{1}, &wrapped);
    CHECK(wrapped == std::numeric_limits<std::int64_t>::min());
    std::vector<std::int32_t> ones(1001, 1);
    std::int64_t count = 0;
    dev::reduce(fold_kind::sum, strided<const std::int32_t>(ones.data(), dims{1001}, dims{1}), dims{1}, &count);
    CHECK(count == 1001);
}

TEST_CASE("the CPU device's arg_reduce and strided copy") {
    // argmax / argmin along axis 1 of [[3, 9, 9, 1], [NaN, 2, 5, 0]]: the first of ties, and a NaN wins.
    const double x[8] = {3, 9, 9, 1, NAN, 2, 5, 0};
    std::int64_t pos[2] = {-1, -1};
    dev::arg_reduce(true, strided<const double>(x, dims{2, 4}, dims{4, 1}), dims{2, 1}, pos);
    CHECK(pos[0] == 1);
    CHECK(pos[1] == 0);
    dev::arg_reduce(false, strided<const double>(x, dims{2, 4}, dims{4, 1}), dims{2, 1}, pos);
    CHECK(pos[0] == 3);
    CHECK(pos[1] == 0);
    // Along axis 0 of the same matrix seen transposed (4 x 2, strides (1, 4)).
    std::int64_t col[2] = {-1, -1};
    dev::arg_reduce(true, strided<const double>(x, dims{4, 2}, dims{1, 4}), dims{1, 2}, col);
    CHECK(col[0] == 1);
    CHECK(col[1] == 0);

    // A row broadcast down a transposed output, converted from double to int32 (saturating, NaN to 0).
    const double src[3] = {1.9, -2.5, NAN};
    std::int32_t out[6] = {};
    dev::copy_strided(strided<std::int32_t>(out, dims{2, 3}, dims{1, 2}), strided<const double>(src, dims{2, 3}, dims{0, 1}));
    CHECK(std::vector<std::int32_t>(out, out + 6) == std::vector<std::int32_t>{1, 1, -2, -2, 0, 0});
    // Contiguous copies of one dtype are one move; a source that overlaps its output is fine.
    float v[5] = {1, 2, 3, 4, 5};
    dev::copy_strided(strided<float>(v + 1, dims{4}, dims{1}), strided<const float>(v, dims{4}, dims{1}));
    CHECK(std::vector<float>(v, v + 5) == std::vector<float>{1, 1, 2, 3, 4});
    // A strided add (col2im's): a row added down a transposed output, converted; bools add as "or".
    double acc[6] = {10, 20, 30, 40, 50, 60};
    const float row[3] = {1.5f, -2.f, 4.f};
    dev::add_strided(strided<double>(acc, dims{2, 3}, dims{1, 2}), strided<const float>(row, dims{2, 3}, dims{0, 1}));
    CHECK(std::vector<double>(acc, acc + 6) == std::vector<double>{11.5, 21.5, 28, 38, 54, 64});
    bool any[3] = {false, true, false};
    const bool more[3] = {false, false, true};
    dev::add_strided(strided<bool>(any, dims{3}, dims{1}), strided<const bool>(more, dims{3}, dims{1}));
    CHECK((any[0] == false && any[1] == true && any[2] == true));
    // A fill of a row-major view and of a strided one.
    float f[6] = {};
    dev::fill(strided<float>(f, dims{2, 3}, dims{3, 1}), 2.5f);
    dev::fill(strided<float>(f, dims{2}, dims{3}), -1.f);
    CHECK(std::vector<float>(f, f + 6) == std::vector<float>{-1, 2.5, 2.5, -1, 2.5, 2.5});
    // Memory and work.
    void* p = dev::allocate(100);
    dev::copy(p, v, sizeof v);
    CHECK(std::memcmp(p, v, sizeof v) == 0);
    dev::deallocate(p, 100);
    std::vector<int> hit(37, 0);
    dev::parallel_for(37, [&](int i) { hit[static_cast<std::size_t>(i)] += 1; });
    CHECK(hit == std::vector<int>(37, 1));
}

TEST_CASE("graph, eager and function mode run the same kernels: sums and products agree bit for bit") {
    kiln::generator gen(11);
    const kiln::tensor x = kiln::uniform({64, 37}, -1, 1, kiln::float32, gen);
    const kiln::tensor w = kiln::uniform({37, 10}, -1, 1, kiln::float32, gen);
    constexpr kiln::input<"x", float> X{};
    constexpr kiln::input<"w", float> Wg{};
    auto bits = [](const float* p, std::size_t n) { return std::vector<std::uint32_t>(reinterpret_cast<const std::uint32_t*>(p), reinterpret_cast<const std::uint32_t*>(p) + n); };
    auto tensor_bits = [&](const kiln::tensor& t) {
        const kiln::tensor c = t.contiguous();
        return bits(c.data<const float>(), static_cast<std::size_t>(c.numel()));
    };
    // Row sums (contiguous rows: four partial sums), column sums (a bias gradient), and a whole sum.
    auto traced_rows = kiln::function([](const kiln::tensor& a) { return kiln::sum(a, {1}); });
    auto traced_cols = kiln::function([](const kiln::tensor& a) { return kiln::sum(a, {0}); });
    auto traced_all = kiln::function([](const kiln::tensor& a) { return kiln::sum(a); });
    for (int call = 0; call < 2; ++call) {  // the second call runs the buffer plan
        const auto rows = kiln::run(kiln::sum<1>(X), X = x);
        CHECK(bits(rows.data(), rows.size()) == tensor_bits(kiln::sum(x, {1})));
        CHECK(tensor_bits(traced_rows(x)) == tensor_bits(kiln::sum(x, {1})));
        const auto cols = kiln::run(kiln::sum<0>(X), X = x);
        CHECK(bits(cols.data(), cols.size()) == tensor_bits(kiln::sum(x, {0})));
        CHECK(tensor_bits(traced_cols(x)) == tensor_bits(kiln::sum(x, {0})));
        const auto all = kiln::run(kiln::sum(X), X = x);
        CHECK(bits(all.data(), 1) == tensor_bits(kiln::sum(x)));
        CHECK(tensor_bits(traced_all(x)) == tensor_bits(kiln::sum(x)));
    }
    // Products: the register-blocked kernel in all three modes, and through a transposed operand.
    auto traced_mm = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::matmul(a, b); });
    const auto eager_mm = tensor_bits(kiln::matmul(x, w));
    for (int call = 0; call < 2; ++call) {
        const auto mm = kiln::run(kiln::matmul(X, Wg), X = x, Wg = w);
        CHECK(bits(mm.data(), mm.size()) == eager_mm);
        CHECK(tensor_bits(traced_mm(x, w)) == eager_mm);
    }
    const kiln::tensor xt = x.transpose(0, 1).contiguous();  // 37 x 64, used transposed
    constexpr kiln::input<"t", float> T{};
    const auto mmt = kiln::run(kiln::matmul(kiln::transpose(T), Wg), T = xt, Wg = w);
    CHECK(bits(mmt.data(), mmt.size()) == tensor_bits(kiln::matmul(xt.transpose(0, 1), w)));
    auto traced_t = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::matmul(a.transpose(0, 1), b); });
    traced_t(xt, w);
    CHECK(tensor_bits(traced_t(xt, w)) == tensor_bits(kiln::matmul(xt.transpose(0, 1), w)));
}

TEST_CASE("the scan kernel: running sums and products along each axis, both directions, any strides") {
    // A (2, 3, 4) operand read through a transposed layout: element (i, j, k) lives at k * 6 + j * 2 + i.
    std::vector<double> store(24);
    for (int i = 0; i < 24; ++i) store[static_cast<std::size_t>(i)] = (i % 7) - 3 + 0.25 * (i % 3);
    const strided<const double> x(store.data(), dims{2, 3, 4}, dims{1, 2, 6});
    auto at = [&](int i, int j, int k) { return store[static_cast<std::size_t>(k * 6 + j * 2 + i)]; };
    for (int axis = 0; axis < 3; ++axis)
        for (bool reverse : {false, true})
            for (bool product : {false, true}) {
                std::vector<double> out(24, -99);
                dev::scan(product, x, axis, reverse, out.data());
                const int ext[3] = {2, 3, 4};
                for (int i = 0; i < 2; ++i)
                    for (int j = 0; j < 3; ++j)
                        for (int k = 0; k < 4; ++k) {
                            const int idx[3] = {i, j, k};
                            double acc = product ? 1 : 0;
                            for (int p = 0; p < ext[axis]; ++p) {
                                const bool in = reverse ? p >= idx[axis] : p <= idx[axis];
                                if (!in) continue;
                                int q[3] = {i, j, k};
                                q[axis] = p;
                                acc = product ? acc * at(q[0], q[1], q[2]) : acc + at(q[0], q[1], q[2]);
                            }
                            // Sums of quarters are exact; products are compared with a relative tolerance.
                            const double got = out[static_cast<std::size_t>((i * 3 + j) * 4 + k)];
                            CHECK(got == doctest::Approx(acc).epsilon(1e-14));
                        }
            }
    // Integers accumulate in the result type and wrap; an empty axis writes nothing.
    const std::vector<std::int32_t> big{2147483647, 1, 1};
    std::vector<std::int64_t> wide(3);
    dev::scan(false, strided<const std::int32_t>(big.data(), dims{3}, dims{1}), 0, false, wide.data());
    CHECK(wide == std::vector<std::int64_t>{2147483647, 2147483648, 2147483649});
    std::vector<std::int32_t> narrow(3);
    dev::scan(false, strided<const std::int32_t>(big.data(), dims{3}, dims{1}), 0, false, narrow.data());
    CHECK(narrow[1] == std::numeric_limits<std::int32_t>::min());
    std::vector<double> none(1, 5.0);
    dev::scan(false, strided<const double>(store.data(), dims{2, 0}, dims{0, 1}), 1, false, none.data());
    CHECK(none[0] == 5.0);
}
