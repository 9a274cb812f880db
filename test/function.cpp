// Function mode (issue #14): kiln::function traces eager code into a run-time graph, optimizes it, caches it by
// signature and replays it. Every traced result is checked against the same code run eagerly or against values
// worked out by hand; the passes are checked node by node.
#include <kiln/kiln.hpp>

#include <atomic>
#include <cmath>
#include <thread>
#include <tuple>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"
#include "check.hpp"
#include "tensor_check.hpp"

using kiln_test::f64;
using kiln_test::values;

namespace {

kiln::tensor chain(const kiln::tensor& x, const kiln::tensor& y) { return kiln::relu(x * y + 0.5 * x - y) * 2 + y; }

void check_same(const kiln::tensor& a, const kiln::tensor& b) {
    REQUIRE(a.dtype() == b.dtype());
    REQUIRE(a.shape() == b.shape());
    const std::vector<double> va = values(a), vb = values(b);
    for (std::size_t i = 0; i < va.size(); ++i) CHECK(va[i] == doctest::Approx(vb[i]).epsilon(1e-6));
}

}  // namespace

TEST_CASE("a traced elementwise chain gives the values worked out by hand, and traces once per signature") {
    auto f = kiln::function(chain);
    const kiln::tensor x = f64({-1, 0, 1, 2, 3, 4}, {2, 3}), y = f64({1, 1, 1, 2, 2, 2}, {2, 3});
    // relu(x*y + x/2 - y)*2 + y by hand: row 0 -> relu(-2.5, -1, 0.5)*2 + 1; row 1 -> relu(3, 5.5, 8)*2 + 2.
    const std::vector<double> expect{1, 1, 2, 8, 13, 18};
    CHECK(values(f(x, y)) == expect);
    CHECK(values(f(x, y)) == expect);
    CHECK(f.trace_count() == 1);
    // New values of one signature replay the same graph.
    const kiln::tensor x2 = f64({0, 0, 0, 0, 0, 0}, {2, 3});
    check_same(f(x2, y), chain(x2, y));
    CHECK(f.trace_count() == 1);
    // The graph is the chain's seven ops on two arguments.
    const kiln::function_graph& g = f.graph(x, y);
    CHECK(g.count(kiln::node_kind::argument) == 2);
    CHECK(g.count(kiln::node_kind::op) == 7);
    CHECK(g.count("relu") == 1);
    CHECK(g.outputs.size() == 1);
}

TEST_CASE("a new shape, dtype or static argument traces again, and the reason is kept") {
    auto f = kiln::function([](const kiln::tensor& x, double scale) { return x * scale; });
    const kiln::tensor a = kiln::ones({32, 10}), b = kiln::ones({8, 10});
    CHECK(values(f(a, 2.0))[0] == 2);
    CHECK(values(f(b, 2.0))[0] == 2);
    CHECK(values(f(b, 3.0))[0] == 3);
    CHECK(values(f(b.to(kiln::float64), 3.0))[0] == 3);
    CHECK(f.trace_count() == 4);
    const std::vector<std::string> r = f.retrace_reasons();
    REQUIRE(r.size() == 3);
    CHECK(r[0] == "argument 0: shape (32, 10) float32 on cpu -> shape (8, 10) float32 on cpu");
    CHECK(r[1] == "argument 1: value 2 -> value 3");
    CHECK(r[2] == "argument 0: shape (8, 10) float32 on cpu -> shape (8, 10) float64 on cpu");
    // Signatures seen before do not trace again.
    f(a, 2.0);
    f(b, 3.0);
    CHECK(f.trace_count() == 4);
}

TEST_CASE("tracing on each of five calls warns through the callback") {
    std::vector<std::string> warnings;
    auto f = kiln::function([](const kiln::tensor& x) { return x + 1; },
                            {.name = "shapes", .on_warning = [&](const std::string& w) { warnings.push_back(w); }});
    for (int n = 1; n <= 4; ++n) f(kiln::ones({n}));
    CHECK(warnings.empty());
    f(kiln::ones({5}));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("function 'shapes' traced on each of its last 5 calls") != std::string::npos);
    f(kiln::ones({5}));  // a cached call breaks the run
    f(kiln::ones({6}));
    CHECK(warnings.size() == 1);
}

TEST_CASE("the reference training step traced with its tape and optimizer trains as eager mode does") {
    const mlp::dataset data = mlp::make_data();
    kiln::generator g1(1), g2(1);
    mlp::eager_model eager_m(g1), traced_m(g2);
    kiln::optim::adam eager_opt(eager_m.parameters(), mlp::learning_rate), traced_opt(traced_m.parameters(), mlp::learning_rate);
    const auto e = mlp::train_loop(data, 7, "eager", false, mlp::eager_step(eager_m, eager_opt));
    const auto f = mlp::train_loop(data, 7, "function", false, mlp::function_step(traced_m, traced_opt));
    REQUIRE(e.epoch_loss.size() == f.epoch_loss.size());
    for (std::size_t i = 0; i < e.epoch_loss.size(); ++i)
        CHECK(std::abs(e.epoch_loss[i] - f.epoch_loss[i]) <= 1e-5 * std::abs(e.epoch_loss[i]));
    CHECK(f.epoch_loss.back() < f.epoch_loss.front());
    // The parameters end where eager mode's end.
    check_same(traced_m.l1.w, eager_m.l1.w);
    check_same(traced_m.l2.b, eager_m.l2.b);
}

TEST_CASE("the traced training step against graph mode: the same losses from the same start") {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(1);
    mlp::eager_model m(init);
    kiln::session s;
    s.declare(mlp::graph_model::loss);
    s.set("l1/w", m.l1.w);
    s.set("l1/b", m.l1.b);
    s.set("l2/w", m.l2.w);
    s.set("l2/b", m.l2.b);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    const auto [gr, fn] = mlp::train_interleaved(data, 7, mlp::graph_step(s), mlp::function_step(m, opt));
    for (std::size_t i = 0; i < gr.epoch_loss.size(); ++i)
        CHECK(std::abs(gr.epoch_loss[i] - fn.epoch_loss[i]) <= 1e-5 * std::abs(gr.epoch_loss[i]));
}

TEST_CASE("gradients from a tape inside a traced function equal eager gradients") {
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& w) {
        kiln::gradient_tape tape;
        tape.watch(x);
        tape.watch(w);
        const kiln::tensor y = kiln::sum(kiln::tanh(kiln::matmul(x, w)) * kiln::softmax(x.transpose(0, 1).reshape({3, 2}), 0).reshape({2, 3}).slice(1, 0, 2));
        const std::vector<kiln::tensor> g = tape.gradient(y, std::vector<kiln::tensor>{x, w});
        return std::make_tuple(y, g[0], g[1]);
    });
    const kiln::tensor x = f64({0.1, -0.4, 0.7, 1.2, 0.3, -0.9}, {2, 3}), w = f64({0.5, -1, 0.25, 2, 1.5, -0.5}, {3, 2});
    const auto [y, gx, gw] = f(x, w);
    kiln::gradient_tape tape;
    tape.watch(x);
    tape.watch(w);
    const kiln::tensor ye = kiln::sum(kiln::tanh(kiln::matmul(x, w)) * kiln::softmax(x.transpose(0, 1).reshape({3, 2}), 0).reshape({2, 3}).slice(1, 0, 2));
    const std::vector<kiln::tensor> ge = tape.gradient(ye, std::vector<kiln::tensor>{x, w});
    check_same(y, ye);
    check_same(gx, ge[0]);
    check_same(gw, ge[1]);
}

TEST_CASE("variables are read where they live and assignments happen at every call, in program order") {
    kiln::variable v(f64({1, 2}, {2}));
    auto f = kiln::function([&](const kiln::tensor& x) {
        const kiln::tensor before = v * 1.0 + 0.0;
        v.assign(v + x);
        const kiln::tensor after = v * 1.0 + 0.0;  // the same expression after the write: not merged with `before`
        return std::make_tuple(before, after);
    });
    const kiln::tensor x = f64({10, 20}, {2});
    auto [b1, a1] = f(x);
    CHECK(values(b1) == std::vector<double>{1, 2});
    CHECK(values(a1) == std::vector<double>{11, 22});
    auto [b2, a2] = f(x);
    CHECK(values(b2) == std::vector<double>{11, 22});
    CHECK(values(a2) == std::vector<double>{21, 42});
    CHECK(values(v) == std::vector<double>{21, 42});
    // A variable changed outside the function is seen by the next call.
    v.assign(f64({0, 0}, {2}));
    auto [b3, a3] = f(x);
    CHECK(values(b3) == std::vector<double>{0, 0});
    CHECK(values(a3) == std::vector<double>{10, 20});
    CHECK(f.trace_count() == 1);
}

TEST_CASE("in-place ops inside a traced function: on intermediate values and on captured state") {
    kiln::tensor counter = f64({0}, {1});
    auto f = kiln::function([&](const kiln::tensor& x) {
        kiln::tensor t = x * 2.0;
        t += 1.0;
        t.slice(0, 0, 1) = kiln::full({1}, -5.0, kiln::float64);
        counter += 1.0;  // a plain tensor the function writes into is state, not a constant
        return t;
    });
    const kiln::tensor x = f64({1, 2, 3}, {3});
    CHECK(values(f(x)) == std::vector<double>{-5, 5, 7});
    CHECK(values(f(x)) == std::vector<double>{-5, 5, 7});
    CHECK(values(counter) == std::vector<double>{2});
}

TEST_CASE("plain captured tensors are constants with their values at trace time") {
    kiln::tensor bias = f64({1, 1}, {2});
    auto f = kiln::function([&](const kiln::tensor& x) { return x + bias; });
    const kiln::tensor x = f64({1, 2}, {2});
    CHECK(values(f(x)) == std::vector<double>{2, 3});
    bias.data<double>()[0] = 100;  // after the trace: not seen, as in TensorFlow
    CHECK(values(f(x)) == std::vector<double>{2, 3});
}

TEST_CASE("the passes: folding, identities, common subexpressions and dead code, each counted") {
    const kiln::tensor c = f64({1, 2, 3}, {3});
    auto f = kiln::function([&](const kiln::tensor& x) {
        const kiln::tensor k = kiln::exp(c) * 2.0;        // constants only: folded
        const kiln::tensor a = kiln::sin(x) * k, b = kiln::sin(x) * k;  // the same twice: merged
        const kiln::tensor unused = kiln::cos(x) * 3.0;  // never used: removed
        (void)unused;
        return (a + b).reshape({3}) * 1;                 // a reshape to the same shape and * 1: identities
    });
    const kiln::tensor x = f64({0.5, -1, 2}, {3});
    const kiln::passes::pass_report r = f.report(x);
    CHECK(r.folded == 2);      // exp(c), then * 2
    CHECK(r.simplified == 2);  // the reshape and the * 1
    CHECK(r.merged == 2);      // the second sin and the second product
    const kiln::function_graph& before = f.traced_graph(x);
    const kiln::function_graph& after = f.graph(x);
    CHECK(before.count("cos") == 1);
    CHECK(after.count("cos") == 0);
    CHECK(after.count("sin") == 1);
    CHECK(after.count("exp") == 0);
    CHECK(after.count("reshape") == 0);
    // What is left: the argument, the folded constant, sin, the product, the sum.
    CHECK(after.size() == 5);
    const std::string text = kiln::to_string(after);
    CHECK(text.find("sin(%0)") != std::string::npos);
    CHECK(kiln::to_dot(after).find("digraph function") == 0);
    // And the values are the eager ones.
    check_same(f(x), (kiln::sin(x) * (kiln::exp(c) * 2.0)) * 2.0);
}

TEST_CASE("an identity is only taken where it is exact") {
    auto f = kiln::function([](const kiln::tensor& x) { return std::make_tuple(x + 0, x - 0, x * 1.0, x / 1); });
    const kiln::tensor x = f64({-0.0, std::nan(""), INFINITY}, {3});
    const kiln::passes::pass_report r = f.report(x);
    CHECK(r.simplified == 3);  // x + 0 stays: -0 + 0 is +0
    const auto [a, b, c, d] = f(x);
    CHECK(!std::signbit(values(a)[0]));
    CHECK(std::signbit(values(b)[0]));
    CHECK(std::isnan(values(c)[1]));
    CHECK(std::isinf(values(d)[2]));
}

TEST_CASE("results: a tuple, a vector, nothing; static arguments of every kind") {
    auto split = kiln::function([](const kiln::tensor& x) { return std::vector<kiln::tensor>{x + 1, x * 2, -x}; });
    const std::vector<kiln::tensor> parts = split(f64({1, 2}, {2}));
    REQUIRE(parts.size() == 3);
    CHECK(values(parts[2]) == std::vector<double>{-1, -2});
    kiln::variable total(f64({0}, {1}));
    auto add_to = kiln::function([&](const kiln::tensor& x) { total.assign(total + kiln::sum(x, {}, true).reshape({1})); });
    add_to(f64({1, 2, 3}, {3}));
    add_to(f64({1, 2, 3}, {3}));
    CHECK(values(total) == std::vector<double>{12});
    enum class mode { add, mul };
    auto pick = kiln::function([](const kiln::tensor& x, mode m, bool neg, const char* label) {
        (void)label;
        const kiln::tensor y = m == mode::add ? x + x : x * x;
        return neg ? -y : y;
    });
    const kiln::tensor x = f64({3}, {1});
    CHECK(values(pick(x, mode::add, false, "a"))[0] == 6);
    CHECK(values(pick(x, mode::mul, true, "a"))[0] == -9);
    CHECK(values(pick(x, mode::mul, true, "b"))[0] == -9);
    CHECK(pick.trace_count() == 3);
}

TEST_CASE("values read while tracing are a trace_error that names the function and the way out") {
    auto f = kiln::function([](const kiln::tensor& x) { return x * kiln::sum(x).item<double>(); }, {.name = "scaled"});
    try {
        f(kiln::ones({3}));
        FAIL("item() on a symbolic tensor did not throw");
    } catch (const kiln::trace_error& e) {
        const std::string m = e.what();
        CHECK(m.find("kiln: trace_error in 'tensor::item'") == 0);
        CHECK(m.find("'scaled'") != std::string::npos);
        CHECK(m.find("run_functions_eagerly") != std::string::npos);
    }
    auto g = kiln::function([](const kiln::tensor& x) { return x * (x.at<double>({0}) > 0 ? 1.0 : -1.0); });
    CHECK_THROWS_AS(g(kiln::ones({3})), kiln::trace_error);
    // Eager errors keep their type and message inside a trace.
    auto h = kiln::function([](const kiln::tensor& x) { return x + kiln::ones({4}); });
    CHECK_THROWS_WITH_AS(h(kiln::ones({3})), "kiln: shape_error in 'add': cannot broadcast (3,) float32 and (4,) float32",
                         kiln::shape_error);
    // A failed trace is not cached: a good signature still traces and runs.
    CHECK(values(h(kiln::ones({4}))) == std::vector<double>{2, 2, 2, 2});
}

TEST_CASE("running functions eagerly, globally or one at a time, and nesting") {
    int calls = 0;
    auto f = kiln::function([&](const kiln::tensor& x) {
        ++calls;  // a C++ side effect: it happens only while tracing
        return x * 3;
    });
    const kiln::tensor x = f64({1}, {1});
    f(x);
    f(x);
    CHECK(calls == 1);
    kiln::run_functions_eagerly(true);
    f(x);
    kiln::run_functions_eagerly(false);
    CHECK(calls == 2);
    f.run_eagerly(true);
    CHECK(values(f(x))[0] == 3);
    CHECK(calls == 3);
    f.run_eagerly(false);
    // A function called inside another's trace becomes part of that trace.
    auto outer = kiln::function([&](const kiln::tensor& y) { return f(y) + 1; });
    CHECK(values(outer(x))[0] == 4);
    CHECK(outer.graph(x).count("mul") == 1);
    // Under a recording tape the function runs eagerly, so that the tape sees its ops.
    kiln::gradient_tape tape;
    tape.watch(x);
    const kiln::tensor y = f(x);
    CHECK(values(tape.gradient(y, x))[0] == 3);
}

TEST_CASE("one function called from 8 threads at once: serial results, one trace per signature") {
    auto f = kiln::function([](const kiln::tensor& x) { return kiln::sum(kiln::square(x) + 1.0); });
    std::vector<kiln::tensor> inputs;
    for (int i = 0; i < 8; ++i) inputs.push_back(kiln::full({16}, static_cast<double>(i), kiln::float64));
    std::vector<double> got(8 * 50);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int k = 0; k < 50; ++k) got[static_cast<std::size_t>(t * 50 + k)] = f(inputs[static_cast<std::size_t>((t + k) % 8)]).item<double>();
        });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 8; ++t)
        for (int k = 0; k < 50; ++k) {
            const double i = (t + k) % 8;
            CHECK(got[static_cast<std::size_t>(t * 50 + k)] == 16 * (i * i + 1));
        }
    CHECK(f.trace_count() == 1);
}
