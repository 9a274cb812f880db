// Graph-mode training: sessions, initializers, optimizers, and the graph-vs-eager training example.
// (Structural ops and gradients: structural.cpp.)
#include <kiln/kiln.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"
#include "check.hpp"
#include "tensor_check.hpp"

using namespace kiln::literals;
using kiln_test::check_all_close;

// Counts heap allocations, to check that a training step after the first allocates nothing.
// (g++ warns when it inlines a replaced operator delete that calls free into code that called operator new; the
// pair is consistent here.)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
static std::atomic<long> allocations{0};
void* operator new(std::size_t n) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// (The nothrow form too, which std::stable_sort's buffer uses: left to the runtime, it would pair its allocation with
// the free above, which AddressSanitizer reports.)
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    allocations.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

TEST_CASE("a session creates parameters from static shapes and initializers") {
    kiln::param<"w", float, kiln::shape<20, 30>, kiln::init::glorot_uniform> pw;
    kiln::param<"b", float, kiln::shape<30>> pb;  // zeros
    kiln::param<"h", double, kiln::shape<50, 40>, kiln::init::he_normal> ph;
    kiln::session s(3);
    s.initialize(kiln::sum(pw) + kiln::sum(pb));
    s.initialize(kiln::sum(ph));
    const double limit = std::sqrt(6.0 / 50);
    const auto wvals = kiln_test::values(s.parameter("w"));
    CHECK(*std::max_element(wvals.begin(), wvals.end()) <= limit);
    CHECK(*std::min_element(wvals.begin(), wvals.end()) >= -limit);
    CHECK(*std::max_element(wvals.begin(), wvals.end()) > 0.9 * limit);  // 600 draws reach near the bound
    for (double v : kiln_test::values(s.parameter("b"))) CHECK(v == 0);
    double sq = 0;
    for (double v : kiln_test::values(s.parameter("h"))) sq += v * v;
    CHECK(std::sqrt(sq / 2000) == doctest::Approx(std::sqrt(2.0 / 50)).epsilon(0.1));
    // Running an expression takes parameters from the session; a fed parameter overrides it.
    CHECK(s.run(kiln::sum(pb))() == 0);
    std::vector<float> ones(30, 1.f);
    CHECK(s.run(kiln::sum(pb), pb = kiln::view(ones.data(), {30}))() == 30);
    s.set("b", kiln::full({30}, 2.0));
    CHECK(s.run(kiln::sum(pb))() == 60);
    CHECK_THROWS_AS(s.set("b", kiln::zeros({31})), kiln::shape_error);
    // A feed that contradicts a static shape is named, with the entry point that was called.
    std::vector<float> twenty_nine(29, 1.f);
    CHECK_THROWS_WITH_AS(s.run(kiln::sum(pb), pb = kiln::view(twenty_nine.data(), {29})),
                         "kiln: shape_error in 'session::run': parameter 'b' is declared with shape (30,) but was fed shape (29,)",
                         kiln::shape_error);
    CHECK_THROWS_AS(s.parameter("nope"), kiln::value_error);
    kiln::param<"d", float> dynamic_param;
    CHECK_THROWS_WITH_AS(s.run(kiln::sum(dynamic_param)), doctest::Contains("has no static shape"), kiln::value_error);
}

TEST_CASE("a session's cached shapes survive a feed whose layout changes but not its shape") {
    // reshape of row-major data is a view; of a transposed feed, a copy. With the same shapes both runs reuse one
    // workspace, so the copy must not rely on a shape the view never recorded.
    constexpr kiln::input<"m", double> m{};
    kiln::session s;
    std::vector<double> a{1, 2, 3, 4, 5, 6};
    const auto plain = kiln::view(a.data(), {2, 3});
    const auto expr = kiln::reshape<6>(m) * 2_c;
    check_all_close(s.run(expr, m = plain), std::vector<double>{2, 4, 6, 8, 10, 12}, 0);
    std::vector<double> t{1, 4, 2, 5, 3, 6};  // (3, 2) row-major, read as its (2, 3) transpose
    const auto transposed = kiln::view(t.data(), {2, 3}, {1, 2});
    check_all_close(s.run(expr, m = transposed), std::vector<double>{2, 4, 6, 8, 10, 12}, 0);
    check_all_close(s.run(expr, m = plain), std::vector<double>{2, 4, 6, 8, 10, 12}, 0);
}

TEST_CASE("sgd, momentum and adam steps in graph mode follow their formulas") {
    // loss = sum(w * x): the gradient is x, whatever w is.
    kiln::param<"w", double, kiln::shape<2>> pw;
    const kiln::input<"x", double, kiln::shape<2>> in;
    std::vector<double> xv{0.5, -1};
    const auto loss = kiln::sum(pw * in);
    kiln::session s;
    s.set(pw, kiln::from_values<double>({1, 2}, {2}));
    const double l0 = s.run(kiln::optim::minimize(loss, kiln::optim::sgd_rule{.lr = 0.1}), in = kiln::view(xv.data(), {2}));
    CHECK(l0 == -1.5);
    check_all_close(kiln_test::values(s.parameter("w")), std::vector<double>{0.95, 2.1}, 1e-15);
    kiln::session m;
    m.declare(loss);
    m.set("w", kiln::from_values<double>({1, 2}, {2}));
    const auto mstep = kiln::optim::minimize(loss, kiln::optim::momentum_rule{.lr = 0.1, .momentum = 0.9});
    m.run(mstep, in = kiln::view(xv.data(), {2}));  // v = x, w -= 0.1 x
    m.run(mstep, in = kiln::view(xv.data(), {2}));  // v = 1.9 x, w -= 0.19 x
    check_all_close(kiln_test::values(m.parameter("w")), std::vector<double>{1 - 0.29 * 0.5, 2 + 0.29}, 1e-14);
    // Adam's first step moves each weight by lr against the sign of its gradient.
    kiln::session a;
    a.set(pw, kiln::from_values<double>({1, 2}, {2}));
    a.run(kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 0.01}), in = kiln::view(xv.data(), {2}));
    check_all_close(kiln_test::values(a.parameter("w")), std::vector<double>{0.99, 2.01}, 1e-7);
}

TEST_CASE("graph and eager training agree, and a graph step allocates nothing after the first") {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(1);
    mlp::eager_model model(init);
    kiln::session s(1);  // the same seed: the session's initializers draw what eager mode drew
    s.initialize(mlp::graph_model::loss);
    check_all_close(kiln_test::values(s.parameter("l1/w")), kiln_test::values(model.l1.w), 0);
    check_all_close(kiln_test::values(s.parameter("l2/w")), kiln_test::values(model.l2.w), 0);
    const auto g = mlp::train_graph(data, s);
    const auto e = mlp::train_eager(data, model);
    REQUIRE(g.epoch_loss.size() == 5);
    check_all_close(g.epoch_loss, e.epoch_loss, 1e-5);
    CHECK(g.epoch_loss.back() < 0.5 * g.epoch_loss.front());
    check_all_close(kiln_test::values(s.parameter("l1/w")), kiln_test::values(model.l1.w), 1e-4, 1e-6);

    std::vector<float> xb(32 * 10, 0.5f), yb(32, 1.f);
    auto step = [&] {
        return s.run(mlp::graph_model::step, mlp::graph_model::x = kiln::view(xb.data(), {32, 10}),
                     mlp::graph_model::y = kiln::view(yb.data(), {32, 1}));
    };
    // The first step of a new session sizes its workspace through kiln's caching allocator (visible in
    // kiln::cache_stats(), where posix_memalign once hid it); the steps after it allocate nothing at all.
    kiln::session fresh(1);
    fresh.initialize(mlp::graph_model::loss);
    auto fresh_step = [&] {
        return fresh.run(mlp::graph_model::step, mlp::graph_model::x = kiln::view(xb.data(), {32, 10}),
                         mlp::graph_model::y = kiln::view(yb.data(), {32, 1}));
    };
    const kiln::allocator_stats s0 = kiln::cache_stats();
    fresh_step();
    const kiln::allocator_stats s1 = kiln::cache_stats();
    CHECK(s1.hits + s1.misses > s0.hits + s0.misses);
    step();
    const long before = allocations.load();
    for (int i = 0; i < 10; ++i) {
        step();
        fresh_step();
    }
    CHECK(allocations.load() - before == 0);
    const kiln::allocator_stats s2 = kiln::cache_stats();
    CHECK(s2.hits + s2.misses == s1.hits + s1.misses);
}

TEST_CASE("kiln::run's results come from the caching allocator: a large result reuses an earlier one's memory") {
    const auto x = kiln::input<"x", float>{};
    std::vector<float> xs(1 << 20, 1.5f);
    const void* first = nullptr;
    {
        const auto r = kiln::run(x * 2_c, x = xs);
        first = r.data();
        CHECK(r(1 << 19) == 3.0f);
        CHECK(reinterpret_cast<std::uintptr_t>(r.data()) % 64 == 0);
    }
    const kiln::allocator_stats before = kiln::cache_stats();
    const auto again = kiln::run(x * 2_c + 1_c, x = xs);
    const kiln::allocator_stats after = kiln::cache_stats();
    CHECK(again.data() == first);  // the same 4 MiB block, handed back
    CHECK(after.hits >= before.hits + 1);
    CHECK(after.misses == before.misses);  // nothing new from the system
    CHECK(again((1 << 20) - 1) == 4.0f);
    xt::xarray<float> copy = again;  // an ordinary xtensor container: converts to the default allocator's
    CHECK(copy(7) == 4.0f);
}
