// Fused multiply-add contraction (KILN_FP_CONTRACT): built with -mavx2 -mfma, so that a * b + c, a * b - c and
// c - a * b in a graph round once, in every loop (SIMD body, peeled head, tail, strided rows, threads) and under
// every compiler. Skipped (exit 77) on a CPU without FMA.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <kiln/graph.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <vector>

#include <xtensor/xarray.hpp>

#include "threads_guard.hpp"

static_assert(KILN_FP_CONTRACT == 1, "this test is built for a target with FMA instructions");

using namespace kiln::literals;
using kiln_test::threads_guard;

namespace {

// a = 1 + 2^-k with k = digits / 2 + 1: a * a = 1 + 2^(1-k) + 2^-2k, whose last term is below half an ulp of 1.
// Rounded once (fused), a * a - (1 + 2^(1-k)) is 2^-2k; rounded twice it is 0.
template <class T>
struct near_one {
    static constexpr int k = std::numeric_limits<T>::digits / 2 + 1;
    static T a() { return T(1) + std::ldexp(T(1), -k); }
    static T product_rounded() { return T(1) + std::ldexp(T(1), 1 - k); }
    static T fused_residue() { return std::ldexp(T(1), -2 * k); }
};

template <class T>
int count_not_equal(std::span<const T> v, T expected) {
    int bad = 0;
    for (T e : v) bad += !(e == expected);
    return bad;
}

}  // namespace

TEST_CASE_TEMPLATE("a * b + c, a * b - c and c - a * b round once at every size, offset and thread count", T, float,
                   double) {
    threads_guard guard;
    using v = near_one<T>;
    const auto a = kiln::input<"a", T>{};
    const auto b = kiln::input<"b", T>{};
    const auto c = kiln::input<"c", T>{};
    const std::size_t big = (std::size_t{1} << 12) + 37;
    const std::vector<T> va(big + 8, v::a()), vc(big + 8, v::product_rounded()), vn(big + 8, -v::product_rounded());
    std::vector<T> out(big + 8);
    for (int threads : {1, 2}) {
        kiln::set_num_threads(threads);
        kiln::set_parallel_threshold(threads == 1 ? std::ptrdiff_t{1} << 30 : 64);
        for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{9}, std::size_t{31},
                              std::size_t{33}, std::size_t{1031}, big}) {
            for (std::size_t off : {0, 1, 3}) {
                CAPTURE(threads);
                CAPTURE(n);
                CAPTURE(off);
                const std::span<const T> sa(va.data() + off, n), sc(vc.data() + off, n), sn(vn.data() + off, n);
                const std::span<T> so(out.data() + (off + 2) % 4, n);
                kiln::run_into(so, a * b + c, a = sa, b = sa, c = sn);
                CHECK(count_not_equal<T>(so, v::fused_residue()) == 0);
                kiln::run_into(so, c + a * b, a = sa, b = sa, c = sn);
                CHECK(count_not_equal<T>(so, v::fused_residue()) == 0);
                kiln::run_into(so, a * b - c, a = sa, b = sa, c = sc);
                CHECK(count_not_equal<T>(so, v::fused_residue()) == 0);
                kiln::run_into(so, c - a * b, a = sa, b = sa, c = sc);
                CHECK(count_not_equal<T>(so, -v::fused_residue()) == 0);
            }
        }
    }
}

TEST_CASE("a product that another root also uses is rounded for that root and fused in the sum") {
    using v = near_one<float>;
    const auto a = "a"_in;
    const auto c = "c"_in;
    const std::vector<float> va(37, v::a()), vn(37, -v::product_rounded());
    const auto p = a * a;
    const auto [sum, prod] = kiln::run(kiln::fetch(p + c, p), a = va, c = vn);
    for (std::size_t i = 0; i < 37; ++i) {
        CHECK(sum(i) == v::fused_residue());
        CHECK(prod(i) == v::product_rounded());
    }
}

TEST_CASE("broadcast and strided operands are contracted too") {
    using v = near_one<float>;
    const auto a = "a"_in;
    const auto b = "b"_in;
    const auto c = "c"_in;
    // A column times a row plus a matrix: the broadcast rows of the strided loop.
    xt::xarray<float> col = xt::xarray<float>::from_shape({5, 1});
    xt::xarray<float> row = xt::xarray<float>::from_shape({1, 19});
    xt::xarray<float> m = xt::xarray<float>::from_shape({5, 19});
    col.fill(v::a());
    row.fill(v::a());
    m.fill(-v::product_rounded());
    const auto r = kiln::run(a * b + c, a = col, b = row, c = m);
    REQUIRE(r.size() == 5 * 19);
    for (float e : r) CHECK(e == v::fused_residue());
    // A transposed view: no unit inner stride, the element-by-element loop.
    std::vector<float> raw(6, v::a());
    const auto tr = kiln::view(raw.data(), {3, 2}, {1, 3});
    const auto t = kiln::run(a * a - c, a = tr, c = std::vector<float>{v::product_rounded(), v::product_rounded()});
    REQUIRE(t.size() == 6);
    for (float e : t) CHECK(e == v::fused_residue());
}

TEST_CASE("the chain fuses x * y + 0.5x and its last step, and matches std::fma written out") {
    const auto x = "x"_in;
    const auto y = "y"_in;
    const std::size_t n = 1031;
    std::vector<float> xs(n), ys(n), out(n);
    for (std::size_t i = 0; i < n; ++i) {
        xs[i] = std::sin(0.37f * static_cast<float>(i)) * 3.1f + 0.2f;
        ys[i] = std::cos(0.11f * static_cast<float>(i)) * 1.7f - 0.1f;
    }
    kiln::run_into(out, kiln::relu(x * y + 0.5_c * x - y) * 2_c + y, x = xs, y = ys);
    int bad = 0, differs_from_unfused = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const float t = std::max(std::fma(xs[i], ys[i], 0.5f * xs[i]) - ys[i], 0.f);
        bad += !(out[i] == std::fma(t, 2.f, ys[i]));
        volatile float prod = xs[i] * ys[i];  // rounded on its own
        const float u = std::max(prod + 0.5f * xs[i] - ys[i], 0.f);
        differs_from_unfused += !(out[i] == u * 2.f + ys[i]);
    }
    CHECK(bad == 0);
    // The inputs are such that single rounding shows: otherwise this test could not tell the two apart.
    CHECK(differs_from_unfused > 10);
}

TEST_CASE("integer graphs are not contracted and stay exact") {
    const auto a = kiln::input<"a", std::int32_t>{};
    const auto c = kiln::input<"c", std::int32_t>{};
    const std::vector<std::int32_t> va{-3, 0, 7, 46340}, vc{5, -1, 2, -2147395600};
    const auto r = kiln::run(a * a + c, a = va, c = vc);
    CHECK(r(0) == 14);
    CHECK(r(1) == -1);
    CHECK(r(2) == 51);
    CHECK(r(3) == 0);
}

int main(int argc, char** argv) {
    if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2")) {
        std::puts("skipped: this CPU has no FMA/AVX2, and this test is built for them");
        return 77;
    }
    doctest::Context context(argc, argv);
    return context.run();
}
