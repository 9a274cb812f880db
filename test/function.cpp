// Function mode (issue #14): kiln::function traces eager code into a run-time graph, optimizes it, caches it by
// signature and replays it. Every traced result is checked against the same code run eagerly or against values
// worked out by hand; the passes are checked node by node.
#include <kiln/kiln.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <tuple>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"
#include "check.hpp"
#include "random_programs.hpp"
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

TEST_CASE("a std::vector of tensors is an argument: each element traced, its length part of the signature") {
    // f(xs, w) = sum_i xs[i] * w^(i + 1), by hand below.
    auto f = kiln::function([](const std::vector<kiln::tensor>& xs, const kiln::tensor& w) {
        kiln::tensor acc = kiln::zeros_like(w);
        kiln::tensor p = w;
        for (const kiln::tensor& x : xs) {
            acc = acc + x * p;
            p = p * w;
        }
        return acc;
    });
    const kiln::tensor w = f64({2, -1}, {2});
    const std::vector<kiln::tensor> two{f64({1, 2}, {2}), f64({3, 4}, {2})};
    // (1*2 + 3*4, 2*-1 + 4*1) = (14, 2)
    CHECK(values(f(two, w)) == std::vector<double>{14, 2});
    CHECK(f.trace_count() == 1);
    // New values: the same trace.
    const std::vector<kiln::tensor> two_b{f64({0, 1}, {2}), f64({1, 0}, {2})};
    CHECK(values(f(two_b, w)) == std::vector<double>{4, -1});
    CHECK(f.trace_count() == 1);
    // Three elements: a new signature, traced again with its reason.
    const std::vector<kiln::tensor> three{f64({1, 2}, {2}), f64({3, 4}, {2}), f64({1, 1}, {2})};
    // (14 + 1*8, 2 + 1*-1) = (22, 1)
    CHECK(values(f(three, w)) == std::vector<double>{22, 1});
    CHECK(f.trace_count() == 2);
    const std::vector<std::string> r = f.retrace_reasons();
    REQUIRE(r.size() == 1);
    CHECK(r[0].find("argument 0: a list of 2 tensors") != std::string::npos);
    CHECK(r[0].find("-> a list of 3 tensors") != std::string::npos);
    // An element of a new shape retraces too; a spec covers the list's elements in order, then the other tensors.
    const std::vector<kiln::tensor> wide{f64({1, 2, 3}, {3}), f64({1, 1, 1}, {3})};
    CHECK(values(f(wide, f64({1, 2, 3}, {3}))) == std::vector<double>{2, 8, 18});
    CHECK(f.trace_count() == 3);
    auto g = kiln::function([](const std::vector<kiln::tensor>& xs, const kiln::tensor& y) { return xs[0] + xs[1] * y; },
                            {kiln::spec(kiln::float64, {kiln::dyn}), kiln::spec(kiln::float64, {kiln::dyn}),
                             kiln::spec(kiln::float64, {kiln::dyn})});
    CHECK(values(g(two, w)) == std::vector<double>{7, -2});
    CHECK(values(g(wide, f64({2, 2, 2}, {3}))) == std::vector<double>{3, 4, 5});
    CHECK(g.trace_count() == 1);
    CHECK_THROWS_AS((void)g(std::vector<kiln::tensor>{f64({1}, {1}), kiln::ones({1}, kiln::float32)}, f64({1}, {1})),
                    kiln::dtype_error);
}

TEST_CASE("scatter_add traces: values by hand, its gradient, and an index out of range in a later call") {
    // out = x with src added at index along axis 1: out[i][index[i][j]] += src[i][j].
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& index, const kiln::tensor& src) {
        return kiln::scatter_add(x, 1, index, src);
    });
    const kiln::tensor x = f64({1, 1, 1, 2, 2, 2}, {2, 3});
    const kiln::tensor index = kiln::from_values<std::int64_t>({2, 0, 2, 1, 1, 0}, {2, 3});
    const kiln::tensor src = f64({10, 20, 30, 40, 50, 60}, {2, 3});
    // row 0: [1 + 20, 1, 1 + 10 + 30]; row 1: [2 + 60, 2 + 40 + 50, 2]
    const std::vector<double> want{21, 1, 41, 62, 92, 2};
    CHECK(values(f(x, index, src)) == want);
    CHECK(values(kiln::scatter_add(x, 1, index, src)) == want);  // eager mode
    const kiln::tensor index2 = kiln::from_values<std::int64_t>({0, 0, 0, 2, 2, 2}, {2, 3});
    CHECK(values(f(x, index2, src)) == std::vector<double>{61, 1, 1, 2, 2, 152});
    CHECK(f.trace_count() == 1);
    // An index out of range in a later call of the trace: the kernel's value_error, not a write out of bounds.
    const kiln::tensor bad = kiln::from_values<std::int64_t>({0, 3, 0, 0, 0, 0}, {2, 3});
    CHECK_THROWS_AS((void)f(x, bad, src), kiln::value_error);
    // A traced training-style step: the tape's gradient of sum(w * scatter_add(x, 1, index, src)) with respect to
    // src is w gathered at index (take_along_axis), and with respect to x is w.
    kiln::variable xv(x), sv(src);
    const kiln::tensor w = f64({1, 2, 3, 4, 5, 6}, {2, 3});
    auto grads = kiln::function([&](const kiln::tensor& idx) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(kiln::scatter_add(xv, 1, idx, sv) * w);
        const std::vector<kiln::tensor> g = tape.gradient(loss, std::vector<kiln::variable*>{&xv, &sv});
        return std::make_tuple(g[0], g[1]);
    });
    const auto [gx, gs] = grads(index);
    CHECK(values(gx) == std::vector<double>{1, 2, 3, 4, 5, 6});
    // src[i][j] lands at w[i][index[i][j]]: row 0 -> w[0][2], w[0][0], w[0][2]; row 1 -> w[1][1], w[1][1], w[1][0].
    CHECK(values(gs) == std::vector<double>{3, 1, 3, 5, 5, 4});
    CHECK(grads.trace_count() == 1);
}

TEST_CASE("tracing on each of five calls warns through the callback") {
    std::vector<std::string> warnings;
    auto f = kiln::function([](const kiln::tensor& x) { return x + 1; },
                            {.name = "shapes", .on_warning = [&](const std::string& w) { warnings.push_back(w); }});
    for (int n = 1; n <= 4; ++n) f(kiln::ones({n}));
    CHECK(warnings.empty());
    f(kiln::ones({5}));
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("function 'shapes' traced on each of its last 5 calls (5 traces; the last because argument 0: "
                           "shape (4,) float32 on cpu -> shape (5,) float32 on cpu)") != std::string::npos);
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

TEST_CASE("an optimizer made without parameters adopts them at its first, traced, step and trains as eagerly") {
    // Its slots are made during the trace; they must hold values (a symbolic slot left the next call a trace_error).
    auto run = [](auto make_optimizer, bool traced) {
        kiln::generator g(4);
        kiln::nn::dense layer(3, 2, kiln::nn::identity, g);
        auto opt = make_optimizer();
        const kiln::tensor x = kiln::randn({8, 3}, kiln::float64, g).to(kiln::float32), y = kiln::ones({8, 2});
        auto step = [&](const kiln::tensor& xb, const kiln::tensor& yb) {
            kiln::gradient_tape tape;
            kiln::tensor loss = kiln::nn::mse(layer(xb), yb);
            opt.apply_gradients(tape.gradient(loss, layer.parameters()), layer.parameters());
            return loss;
        };
        auto fn = kiln::function(step);
        std::vector<float> losses;
        for (int i = 0; i < 6; ++i) losses.push_back((traced ? fn(x, y) : step(x, y)).template item<float>());
        losses.push_back(layer.w.template at<float>({0, 0}));
        return losses;
    };
    auto adam = [] { return kiln::optim::adam(1e-2); };
    auto momentum = [] { return kiln::optim::sgd(1e-2, 0.9); };
    const auto adam_eager = run(adam, false), adam_traced = run(adam, true);
    const auto sgd_eager = run(momentum, false), sgd_traced = run(momentum, true);
    REQUIRE(adam_traced.size() == adam_eager.size());
    for (std::size_t i = 0; i < adam_eager.size(); ++i) {
        CHECK(adam_traced[i] == doctest::Approx(adam_eager[i]).epsilon(1e-6));
        CHECK(sgd_traced[i] == doctest::Approx(sgd_eager[i]).epsilon(1e-6));
    }
    CHECK(adam_traced[5] < adam_traced[0]);
    CHECK(sgd_traced[5] < sgd_traced[0]);
}

TEST_CASE("the traced training step against graph mode: the same losses from the same start") {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(1);
    mlp::eager_model m(init);
    kiln::session s;
    mlp::start_from(s, m);
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

TEST_CASE("a variable rebound to a new tensor retraces, naming the variable and its shapes") {
    kiln::variable w(f64({1, 2}, {2}));
    auto f = kiln::function([&](const kiln::tensor& x) { return kiln::sum(w * x); });
    const kiln::tensor x2 = f64({10, 20}, {2});
    CHECK(values(f(x2)) == std::vector<double>{50});
    CHECK(f.trace_count() == 1);
    // Same shape, new storage: the trace must not go on reading the old one.
    w = kiln::variable(f64({3, 4}, {2}));
    CHECK(values(f(x2)) == std::vector<double>{110});
    CHECK(f.trace_count() == 2);
    REQUIRE(f.retrace_reasons().size() == 1);
    CHECK(f.retrace_reasons()[0].find("the variable was assigned a new tensor") != std::string::npos);
    // A new shape: a broadcast against the same argument, and the reason names both shapes.
    w = kiln::variable(f64({1, 2, 3, 4}, {2, 2}));
    CHECK(values(f(x2)) == std::vector<double>{10 + 40 + 30 + 80});
    CHECK(f.trace_count() == 3);
    REQUIRE(f.retrace_reasons().size() == 2);
    CHECK(f.retrace_reasons()[1].find("shape (2,) float64 -> (2, 2) float64") != std::string::npos);
    // Writes through assign keep the storage: no retrace, and the new values are read.
    w.assign(f64({0, 0, 0, 1}, {2, 2}));
    CHECK(values(f(x2)) == std::vector<double>{20});
    CHECK(f.trace_count() == 3);
    // Assigning a variable to itself, or a copy sharing its storage, is not a rebinding.
    const kiln::variable& same = w;
    w = same;
    kiln::variable alias = w;
    w = alias;
    CHECK(values(f(x2)) == std::vector<double>{20});
    CHECK(f.trace_count() == 3);
}

TEST_CASE("a variable read only inside a traced while_loop, nested or not, retraces when rebound") {
    kiln::variable v(f64({1, 2}, {2}));
    auto f = kiln::function([&](const kiln::tensor& x) {
        auto [i, s] = kiln::while_loop([](const kiln::tensor& k, const kiln::tensor&) { return k < 3; },
                                       [&](const kiln::tensor& k, const kiln::tensor& acc) { return std::make_tuple(k + 1, acc + v); },
                                       kiln::tensor(std::int64_t{0}), x);
        return s;
    });
    const kiln::tensor x = f64({0, 0}, {2});
    CHECK(values(f(x)) == std::vector<double>{3, 6});
    v.assign(f64({2, 3}, {2}));  // the same storage: no retrace
    CHECK(values(f(x)) == std::vector<double>{6, 9});
    CHECK(f.trace_count() == 1);
    v = kiln::variable(f64({10, 20}, {2}));  // new storage: the loop must read it
    CHECK(values(f(x)) == std::vector<double>{30, 60});
    CHECK(f.trace_count() == 2);
    REQUIRE(f.retrace_reasons().size() == 1);
    CHECK(f.retrace_reasons()[0].find("a variable read by while_loop") != std::string::npos);
    CHECK(f.retrace_reasons()[0].find("the variable was assigned a new tensor") != std::string::npos);

    // A loop inside a loop's body: its variables reach the outermost trace.
    kiln::variable w(f64({1}, {1}));
    auto g = kiln::function([&](const kiln::tensor& x) {
        auto [i, s] = kiln::while_loop([](const kiln::tensor& k, const kiln::tensor&) { return k < 2; },
                                       [&](const kiln::tensor& k, const kiln::tensor& acc) {
                                           auto [j, t] = kiln::while_loop([](const kiln::tensor& m, const kiln::tensor&) { return m < 2; },
                                                                          [&](const kiln::tensor& m, const kiln::tensor& a) { return std::make_tuple(m + 1, a + w); },
                                                                          kiln::tensor(std::int64_t{0}), acc);
                                           return std::make_tuple(k + 1, t);
                                       },
                                       kiln::tensor(std::int64_t{0}), x);
        return s;
    });
    const kiln::tensor y = f64({0}, {1});
    CHECK(values(g(y)) == std::vector<double>{4});
    w = kiln::variable(f64({5}, {1}));
    CHECK(values(g(y)) == std::vector<double>{20});
    CHECK(g.trace_count() == 2);
}

TEST_CASE("an optimizer step traced before a layer's parameter is replaced trains the new parameter") {
    kiln::variable w(f64({1}, {1}));
    kiln::optim::sgd opt({&w}, 0.5);
    auto step = kiln::function([&](const kiln::tensor& x) {
        kiln::gradient_tape tape;
        kiln::tensor loss = kiln::sum(w * x);
        opt.apply_gradients(tape.gradient(loss, std::vector<kiln::variable*>{&w}), std::vector<kiln::variable*>{&w});
        return loss;
    });
    const kiln::tensor x = f64({2}, {1});
    CHECK(values(step(x)) == std::vector<double>{2});
    CHECK(values(w) == std::vector<double>{0});  // 1 - 0.5 * 2
    w = kiln::variable(f64({10}, {1}));
    CHECK(values(step(x)) == std::vector<double>{20});
    CHECK(values(w) == std::vector<double>{9});
    CHECK(step.trace_count() == 2);
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

TEST_CASE("writes into views of a captured plain tensor are state: applied at every call and read back") {
    // Each write below goes through a view the trace makes of `state`; before, the trace wrote into its copy of
    // state's value at trace time, and reads of state were folded to that value (wrong answers, no error).
    kiln::tensor state = f64({0, 0, 0, 0}, {4});
    auto f = kiln::function([&](const kiln::tensor& x) {
        state(1) = x(0);                                      // assignment to an element
        state[2] += x[0];                                     // in place on an element
        state.slice(0, 3, 4).copy_(x * 10.0);                 // copy_ into a slice
        return state * 1.0;
    });
    const kiln::tensor x = f64({2}, {1});
    CHECK(values(f(x)) == std::vector<double>{0, 2, 2, 20});
    CHECK(values(f(f64({3}, {1}))) == std::vector<double>{0, 3, 5, 30});
    CHECK(values(state) == std::vector<double>{0, 3, 5, 30});
    CHECK(f.trace_count() == 1);
    // A view captured whole (made outside the function) and the tensor it views: one storage, both state.
    kiln::tensor base = f64({1, 1}, {2});
    const kiln::tensor first = base.slice(0, 0, 1);
    auto g = kiln::function([&](const kiln::tensor& y) {
        const kiln::tensor before = base * 1.0;
        kiln::tensor w = first;
        w += y;
        return std::make_tuple(before, base * 1.0);
    });
    auto [b1, a1] = g(f64({5}, {1}));
    CHECK(values(b1) == std::vector<double>{1, 1});
    CHECK(values(a1) == std::vector<double>{6, 1});
    auto [b2, a2] = g(f64({5}, {1}));
    CHECK(values(b2) == std::vector<double>{6, 1});
    CHECK(values(a2) == std::vector<double>{11, 1});
    // A copy made before a write keeps the value before it: `x * 1` and `x / 1` are not replaced by a value
    // written later (they were, and returned the written value).
    kiln::variable v(f64({0, 0}, {2}));
    auto h = kiln::function([&](const kiln::tensor& y) {
        const kiln::tensor before = v / 1;
        v.assign(v + y);
        return std::make_tuple(before, v * 1.0);
    });
    auto [h1, v1] = h(f64({1, 1}, {2}));
    CHECK(values(h1) == std::vector<double>{0, 0});
    CHECK(values(v1) == std::vector<double>{1, 1});
    auto [h2, v2] = h(f64({1, 1}, {2}));
    CHECK(values(h2) == std::vector<double>{1, 1});
    CHECK(values(v2) == std::vector<double>{2, 2});
}

TEST_CASE("results are separate tensors where eager mode's are, after the passes merged them") {
    // x * 2.0 twice is one value after common-subexpression elimination; eagerly they are two tensors.
    auto f = kiln::function([](const kiln::tensor& x) { return std::make_tuple(x * 2.0, x * 2.0, (x * 2.0).reshape({2, 1}), x); });
    const kiln::tensor a = f64({1, 2}, {2});
    for (int call = 0; call < 2; ++call) {  // the first call runs node by node, the second from the buffer plan
        auto [p, q, r, same] = f(a);
        p += 1;
        CHECK(values(p) == std::vector<double>{3, 5});
        CHECK(values(q) == std::vector<double>{2, 4});
        CHECK(values(r) == std::vector<double>{2, 4});
        CHECK(same.storage_handle() == a.storage_handle());  // returned as it was given, as eagerly
    }
    CHECK(f.graph(a).count("mul") == 1);
}

TEST_CASE("a traced function may return a variable") {
    kiln::variable v(f64({1, 2}, {2}));
    auto f = kiln::function([&]() { return v; });
    CHECK(values(f()) == std::vector<double>{1, 2});
    v.assign(f64({5, 6}, {2}));
    CHECK(values(f()) == std::vector<double>{5, 6});  // read where it lives at every call
    auto g = kiln::function([&](const kiln::tensor& x) { return std::make_tuple(v, x + v); });
    auto [w, s] = g(f64({1, 1}, {2}));
    CHECK(values(w) == std::vector<double>{5, 6});
    CHECK(values(s) == std::vector<double>{6, 7});
    g.run_eagerly(true);
    auto [w2, s2] = g(f64({1, 1}, {2}));
    CHECK(values(s2) == std::vector<double>{6, 7});
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

TEST_CASE("values read while tracing are a trace_error that names the function, the line and the way out") {
    const int item_line = __LINE__ + 1;
    auto f = kiln::function([](const kiln::tensor& x) { return x * kiln::sum(x).item<double>(); }, {.name = "scaled"});
    try {
        f(kiln::ones({3}));
        FAIL("item() on a symbolic tensor did not throw");
    } catch (const kiln::trace_error& e) {
        const std::string m = e.what();
        CHECK(m.find("kiln: trace_error in 'tensor::item': at ") == 0);
        CHECK(m.find("function.cpp:" + std::to_string(item_line) + ": ") != std::string::npos);
        CHECK(m.find("'scaled'") != std::string::npos);
        CHECK(m.find("run_functions_eagerly") != std::string::npos);
    }
    const int at_line = __LINE__ + 1;
    auto g = kiln::function([](const kiln::tensor& x) { return x * (x.at<double>({0}) > 0 ? 1.0 : -1.0); });
    CHECK_THROWS_WITH_AS(g(kiln::ones({3})),
                         doctest::Contains(("function.cpp:" + std::to_string(at_line) + ": the tensor is symbolic").c_str()),
                         kiln::trace_error);
    // A C++ branch on a tensor: eagerly the value of a one-element tensor, traced a trace_error.
    CHECK(static_cast<bool>(kiln::ones({1})));
    CHECK_FALSE(static_cast<bool>(kiln::zeros({1, 1})));
    CHECK_THROWS_WITH_AS((void)static_cast<bool>(kiln::ones({2})),
                         "kiln: value_error in 'tensor::operator bool': the tensor has 2 elements (shape (2,)), so it "
                         "has no one truth value; reduce it with kiln::any or kiln::all first",
                         kiln::value_error);
    auto branch = kiln::function([](const kiln::tensor& x) { return kiln::sum(x) > 0 ? x : -x; });
    CHECK_THROWS_WITH_AS(branch(kiln::ones({3})), doctest::Contains("trace_error in 'tensor::operator bool'"),
                         kiln::trace_error);
    kiln::run_functions_eagerly(true);
    CHECK(branch(kiln::ones({3})).at<float>({0}) == 1.0f);
    CHECK(branch(-kiln::ones({3})).at<float>({0}) == 1.0f);
    kiln::run_functions_eagerly(false);
    // Eager errors keep their type and message inside a trace.
    auto h = kiln::function([](const kiln::tensor& x) { return x + kiln::ones({4}); });
    CHECK_THROWS_WITH_AS(h(kiln::ones({3})), "kiln: shape_error in 'add': cannot broadcast (3,) float32 and (4,) float32",
                         kiln::shape_error);
    // A failed trace is not cached: a good signature still traces and runs.
    CHECK(values(h(kiln::ones({4}))) == std::vector<double>{2, 2, 2, 2});
}

TEST_CASE("tracing computes no elementwise op and no matrix product: a (2^20, 2^20) argument traces in microseconds") {
    // The trace needs each op's dtype and shape only: elementwise ops give theirs by their rule (broadcast, and the
    // op on one element of each operand), a product runs its checks and gives zeros of stride 0. Computing either on
    // the placeholders would allocate 4 TiB here, and the product would take hours.
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& w) { return kiln::relu(kiln::matmul(x, w) + 1.0f) * 2.0f; });
    const kiln::tensor x = kiln::full({}, 1.0, kiln::float32).broadcast_to({1 << 20, 1 << 20});
    const kiln::tensor w = kiln::full({}, 1.0, kiln::float32).broadcast_to({1 << 20, 8});
    const kiln::function_graph& g = f.graph(x, w);
    REQUIRE(g.outputs.size() == 1);
    const auto& out = g.nodes[static_cast<std::size_t>(g.outputs[0])];
    CHECK(out.shape == kiln::dims{1 << 20, 8});
    CHECK(out.dtype == kiln::float32);
    // The errors stay eager mode's own, word for word.
    auto errors = [](auto&& fn, const kiln::tensor& a) {
        std::string traced, eager;
        try {
            kiln::function(fn).graph(a);
        } catch (const kiln::error& e) {
            traced = e.what();
        }
        try {
            fn(a);
        } catch (const kiln::error& e) {
            eager = e.what();
        }
        CHECK(!traced.empty());
        CHECK(traced == eager);
    };
    errors([](const kiln::tensor& a) { return kiln::matmul(a, a); }, kiln::zeros({3, 4}));
    errors([](const kiln::tensor& a) { return a + kiln::zeros({5}); }, kiln::zeros({3, 4}));
    errors([](const kiln::tensor& a) { return kiln::where(a > 0.0, a, kiln::zeros({2, 1, 5})); }, kiln::zeros({3, 4}));
    errors([](const kiln::tensor& a) { return kiln::bitwise_and(a, 1.5); }, kiln::zeros({3, 4}));
    // Dtypes by eager mode's promotion, numbers included (an int32 product with an int64 one is int64; int32 / 2
    // is float32; a bool mask times 2.5 is float32).
    auto h = kiln::function([](const kiln::tensor& a, const kiln::tensor& m) {
        return std::make_tuple(kiln::matmul(a, a.to(kiln::int64)), a / 2, m * 2.5, kiln::clamp(a, 0.5, 2));
    });
    const kiln::tensor a = kiln::full({}, 3, kiln::int32).broadcast_to({4, 4}), m = kiln::ones({4}, kiln::bool_);
    const kiln::function_graph& hg = h.graph(a, m);
    const auto dtype_of = [&](std::size_t k) { return hg.nodes[static_cast<std::size_t>(hg.outputs[k])].dtype; };
    const auto [p0, p1, p2, p3] = h(a, m);
    CHECK(dtype_of(0) == kiln::int64);
    CHECK(dtype_of(1) == kiln::float32);
    CHECK(dtype_of(2) == kiln::float32);
    CHECK(dtype_of(3) == p3.dtype());
    CHECK(p0.dtype() == kiln::int64);
    CHECK(values(p0) == std::vector<double>(16, 36.0));
    CHECK(values(p1) == std::vector<double>(16, 1.5));
    CHECK(values(p2) == std::vector<double>(4, 2.5));
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

TEST_CASE("a spec's dynamic dimension: one trace serves every batch size, and the results are eager mode's") {
    // mean's count, a reshape to the batch and a fill of the batch's shape all follow the extent.
    auto f = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor m = kiln::mean(x, {0}, true);                     // divides by the batch size
        const kiln::tensor flat = x.reshape({x.shape()[0] * 3});              // a shape made from the extent
        const kiln::tensor ones = kiln::ones({x.shape()[0], 1}, kiln::float64);  // a fill of that shape
        return std::make_tuple(x - m + ones, kiln::sum(flat * 2.0) / static_cast<double>(x.shape()[0]));
    }, {kiln::spec(kiln::float64, {kiln::dyn, 3})}, {.name = "centered"});
    for (std::ptrdiff_t n : {4, 1, 7, 32, 8}) {
        const kiln::tensor x = kiln::arange(0, static_cast<double>(3 * n), 1, kiln::float64).reshape({n, 3}) * 0.5;
        const auto [a, b] = f(x);
        const kiln::tensor ea = x - kiln::mean(x, {0}, true) + 1.0;
        check_same(a, ea);
        CHECK(b.item<double>() == doctest::Approx(kiln::sum(x).item<double>() * 2.0 / static_cast<double>(n)));
    }
    CHECK(f.trace_count() == 1);
    CHECK(f.retrace_reasons().empty());
    const kiln::function_graph& g = f.graph(kiln::zeros({5, 3}, kiln::float64));
    std::size_t dynamic = 0;
    for (const kiln::graph_node& n : g.nodes) dynamic += n.dynamic.size();
    CHECK(dynamic >= 3);
    CHECK(f.trace_count() == 1);
}

TEST_CASE("the reference step with a dynamic batch: the last partial batch does not trace again") {
    const mlp::dataset data = mlp::make_data();
    kiln::generator g1(1), g2(1);
    mlp::eager_model em(g1), fm(g2);
    kiln::optim::adam eo(em.parameters(), mlp::learning_rate), fo(fm.parameters(), mlp::learning_rate);
    auto step = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        kiln::tensor loss = kiln::nn::mse(fm(x), y);
        fo.apply_gradients(tape.gradient(loss, fm.parameters()), fm.parameters());
        return loss;
    }, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features}), kiln::spec(kiln::float32, {kiln::dyn, 1})});
    const auto e = mlp::train_loop(data, 7, "eager", false, mlp::eager_step(em, eo));
    const auto f = mlp::train_loop(data, 7, "function", false, [&](float* xb, float* yb, std::ptrdiff_t n) {
        return static_cast<double>(step(kiln::wrap(xb, {n, mlp::features}), kiln::wrap(yb, {n, 1})).item<float>());
    });
    for (std::size_t i = 0; i < e.epoch_loss.size(); ++i)
        CHECK(std::abs(e.epoch_loss[i] - f.epoch_loss[i]) <= 1e-5 * std::abs(e.epoch_loss[i]));
    CHECK(step.trace_count() == 1);
    for (const std::string& r : step.retrace_reasons()) MESSAGE(r);
    CHECK(step.retrace_reasons().empty());
}

TEST_CASE("dynamic dimensions that the code turns into other numbers fall back to one trace per extent") {
    // n / 2 does not follow n linearly: the two traces disagree, so each extent gets its own trace, and the
    // results stay right.
    auto f = kiln::function([](const kiln::tensor& x) { return x.slice(0, 0, x.shape()[0] / 2) * 1.5; },
                            {kiln::spec(kiln::float64, {kiln::dyn})});
    CHECK(values(f(f64({1, 2, 3, 4}, {4}))) == std::vector<double>{1.5, 3});
    CHECK(values(f(f64({1, 2, 3, 4, 5, 6}, {6}))) == std::vector<double>{1.5, 3, 4.5});
    CHECK(values(f(f64({1, 2, 3, 4}, {4}))) == std::vector<double>{1.5, 3});
    CHECK(f.trace_count() == 2);
    const std::vector<std::string> r = f.retrace_reasons();
    REQUIRE(r.size() == 2);
    CHECK(r[0].find("the spec's dynamic dimensions cannot share one trace (node %") == 0);
    CHECK(r[0].find("'slice'") != std::string::npos);
}

TEST_CASE("a constant made afresh on each trace shares one trace when its values do not follow the extent") {
    // from_values runs while tracing, so each of the three traces holds its own copy of the table: the same values,
    // so the same program. A table made from the extent (arange(n)) differs between the traces and falls back.
    auto f = kiln::function([](const kiln::tensor& x) { return x * kiln::from_values({2.0, -1.0}); },
                            {kiln::spec(kiln::float64, {kiln::dyn, 2})});
    CHECK(values(f(f64({1, 2, 3, 4}, {2, 2}))) == std::vector<double>{2, -2, 6, -4});
    CHECK(values(f(f64({5, 6}, {1, 2}))) == std::vector<double>{10, -6});
    CHECK(f.trace_count() == 1);
    CHECK(f.retrace_reasons().empty());
    auto by_extent = kiln::function(
        [](const kiln::tensor& x) { return x + kiln::arange(0, static_cast<double>(x.shape()[0]), 1, kiln::float64); },
        {kiln::spec(kiln::float64, {kiln::dyn})});
    CHECK(values(by_extent(f64({1, 1}, {2}))) == std::vector<double>{1, 2});
    CHECK(values(by_extent(f64({1, 1, 1}, {3}))) == std::vector<double>{1, 2, 3});
    CHECK(by_extent.trace_count() == 2);
    REQUIRE(!by_extent.retrace_reasons().empty());
    CHECK(by_extent.retrace_reasons()[0].find("captures a tensor that the code made from the extent") != std::string::npos);
}

TEST_CASE("a parameter that follows a sum of two dynamic extents is not taken for the line of a third") {
    // mean(concat(x, z)) divides by n1 + n3. Traced at (2, 3, 4) and probed at (5, 7, 9) and (8, 11, 14), the counts
    // 6, 14, 22 lie on 2 * n2's line, which gave 4 for 9 at (3, 2, 6) (a wrong mean) before the traces that move
    // one extent alone; now the function traces per extent, and says why.
    const auto body = [](const kiln::tensor& x, const kiln::tensor& y, const kiln::tensor& z) {
        return kiln::mean(kiln::concat({x, z}, 0)) + kiln::sum(y) * 0.0;
    };
    const kiln::spec column(kiln::float64, {kiln::dyn, 1});
    auto f = kiln::function(body, {column, column, column});
    kiln::generator g(9);
    for (auto [a, b, c] : std::vector<std::array<std::ptrdiff_t, 3>>{{2, 3, 4}, {3, 2, 6}, {5, 7, 9}, {1, 4, 2}, {2, 3, 4}}) {
        const kiln::tensor x = kiln::randn({a, 1}, kiln::float64, g), y = kiln::randn({b, 1}, kiln::float64, g),
                           z = kiln::randn({c, 1}, kiln::float64, g);
        CHECK(f(x, y, z).item<double>() == doctest::Approx(body(x, y, z).item<double>()).epsilon(1e-12));
    }
    REQUIRE(!f.retrace_reasons().empty());
    CHECK(f.retrace_reasons()[0].find("follows more than one dynamic extent") != std::string::npos);
    // One extent, or extents that move together (a batch of inputs and labels), still share one trace.
    auto shared = kiln::function(body, {column, column, column});
    for (std::ptrdiff_t n : {2, 5, 3}) {
        const kiln::tensor x = kiln::randn({n, 1}, kiln::float64, g);
        CHECK(shared(x, x, x).item<double>() == doctest::Approx(body(x, x, x).item<double>()).epsilon(1e-12));
    }
    CHECK(shared.trace_count() == 1);
}

TEST_CASE("a parameter that two traces put on a line but that grows as the extent squared falls back per extent") {
    // The mean of x x^T divides by n^2: 9 at n = 3 and 49 at n = 7 fit the line 10n - 21, which the third trace
    // (121 at n = 11) is not on. Taking the line gave 29 for n = 5, and a wrong mean, before the third trace.
    const auto body = [](const kiln::tensor& x) { return kiln::mean(kiln::matmul(x, x.transpose(0, 1))); };
    auto f = kiln::function(body, {kiln::spec(kiln::float64, {kiln::dyn, 2})});
    kiln::generator g(5);
    for (std::ptrdiff_t n : {3, 5, 1, 8, 3}) {
        const kiln::tensor x = kiln::randn({n, 2}, kiln::float64, g);
        CHECK(f(x).item<double>() == doctest::Approx(body(x).item<double>()).epsilon(1e-12));
    }
    CHECK(f.trace_count() == 4);  // one per extent: 3, 5, 1, 8
    const std::vector<std::string> r = f.retrace_reasons();
    REQUIRE(!r.empty());
    CHECK(r[0].find("the spec's dynamic dimensions cannot share one trace (") == 0);
    CHECK(r[0].find("not linearly") != std::string::npos);
}

TEST_CASE("a planned fused group whose operands all repeat along it computes its whole extent") {
    // The gradient of sum(square(x broadcast to (8, 1))) for x of shape (1,) is one group, 2 * view * ones, whose
    // operands are both broadcasts of one element: the plan once took the group's extent from an operand of the
    // group's shape, found none, and computed one element of eight (and 2x, not 16x, from the second call on).
    auto f = kiln::function([](kiln::tensor x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        tape.watch(x);
        const kiln::tensor loss = kiln::sum(kiln::square(x.broadcast_to(y.shape())));
        return tape.gradient(loss, x);
    });
    for (double v : {1.0, 2.0, 3.0, -0.5}) {
        const kiln::tensor g = f(f64({v}, {1}), kiln::zeros({8, 1}, kiln::float64));
        CHECK(values(g) == std::vector<double>{16 * v});
    }
    REQUIRE(f.compiled(f64({1}, {1}), kiln::zeros({8, 1}, kiln::float64))->plan() != nullptr);
}

TEST_CASE("random programs give eager mode's values traced, planned, under a tape and with a dynamic batch") {
    // Programs of 4 to 15 ops of the vocabulary (elementwise, broadcasts, views, reductions, products, concat and
    // stack, casts, in-place writes, indexing: test/random_programs.hpp) drawn from seeds; each runs as a
    // kiln::function on five calls (new values, a new batch, back) in four ways: plain, under a gradient tape
    // with the gradients as results, with the batch dynamic in its specs, and both. Two bugs found this way
    // have tests of their own above. KILN_RANDOM_PROGRAMS sets how many seeds (default 200; 50 under
    // AddressSanitizer, whose build runs about 8x slower).
    namespace rp = kiln_test::random_programs;
    const char* env = std::getenv("KILN_RANDOM_PROGRAMS");
#if defined(__SANITIZE_ADDRESS__)
    constexpr std::uint32_t default_count = 50;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    constexpr std::uint32_t default_count = 50;
#else
    constexpr std::uint32_t default_count = 200;
#endif
#else
    constexpr std::uint32_t default_count = 200;
#endif
    const std::uint32_t count = env ? static_cast<std::uint32_t>(std::atoi(env)) : default_count;
    std::size_t ops = 0;
    for (std::uint32_t seed = 0; seed < count; ++seed) {
        rp::setup su{};
        const std::vector<rp::step> program = rp::make(seed, su);
        ops += program.size();
        for (int mode = 0; mode < 4; ++mode) {
            CAPTURE(seed);
            CAPTURE(mode);
            CAPTURE(rp::describe(program));
            CHECK(rp::check(seed, su, program, (mode & 1) != 0, (mode & 2) != 0) == "");
        }
    }
    CHECK(ops >= 4 * count);
}

TEST_CASE("calls that contradict the specs name the argument and the spec") {
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return x + y; },
                            {kiln::spec(kiln::float32, {kiln::dyn, 10}), kiln::spec(kiln::float32, {1})},
                            {.name = "step"});
    CHECK_THROWS_WITH_AS(f(kiln::zeros({4, 10}, kiln::float64), kiln::zeros({1})),
                         "kiln: dtype_error in 'step': argument 0 is float64, but its spec is (?, 10) float32",
                         kiln::dtype_error);
    CHECK_THROWS_WITH_AS(f(kiln::zeros({4, 11}), kiln::zeros({1})),
                         "kiln: shape_error in 'step': argument 0 has shape (4, 11), but its spec is (?, 10) float32",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(f(kiln::zeros({4, 10}), kiln::zeros({1, 1})),
                         "kiln: shape_error in 'step': argument 1 has shape (1, 1), but its spec is (1,) float32",
                         kiln::shape_error);
    auto g = kiln::function([](const kiln::tensor& x) { return x; }, {kiln::spec(kiln::float32, {2}), kiln::spec(kiln::float32, {2})},
                            {.name = "one"});
    CHECK_THROWS_WITH_AS(g(kiln::zeros({2})), "kiln: value_error in 'one': the function has 2 specs but was called with 1 tensor argument",
                         kiln::value_error);
    CHECK(f.trace_count() == 0);
    // An empty spec list declares nothing: the options after it apply, and every shape traces as without specs.
    kiln::function_options o;
    o.name = "no_specs";
    o.reduce_retracing = true;
    auto h = kiln::function([](const kiln::tensor& x) { return kiln::sum(x * 2.0); }, {}, o);
    CHECK(h(kiln::ones({1, 3})).item<float>() == 6.0f);
    CHECK(h(kiln::ones({2, 3})).item<float>() == 12.0f);
    CHECK(h(kiln::ones({5, 3})).item<float>() == 30.0f);  // the changed extent became dynamic: no third trace
    CHECK(h.trace_count() == 2);
}

TEST_CASE("named dynamic extents: one name is one extent in every argument, and a call keeps them equal") {
    // x (batch, length) and a mask of the same names: a masked mean per row.
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& m) { return kiln::sum(x * m, {1}) / kiln::sum(m, {1}); },
                            {kiln::spec(kiln::float64, {"batch", "length"}), kiln::spec(kiln::float64, {"batch", "length"})},
                            {.name = "masked"});
    const kiln::tensor x = kiln::from_values({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
    const kiln::tensor m = kiln::from_values({1.0, 0.0, 1.0, 0.0, 1.0, 1.0}, {2, 3});
    CHECK(values(f(x, m)) == std::vector<double>{2.0, 5.5});
    CHECK(values(f(kiln::ones({4, 5}, kiln::float64), kiln::ones({4, 5}, kiln::float64))) == std::vector<double>(4, 1.0));
    CHECK(f.trace_count() == 1);
    CHECK_THROWS_WITH_AS(f(kiln::ones({3, 4}, kiln::float64), kiln::ones({2, 4}, kiln::float64)),
                         "kiln: shape_error in 'masked': argument 1 has shape (2, 4), whose axis 0 ('batch') is 2, but axis 0 of "
                         "argument 0 (shape (3, 4)), of the same name, is 3 (extents of one name are equal in a call)",
                         kiln::shape_error);
    // One name twice in one spec: a square matrix of any size.
    auto gram = kiln::function([](const kiln::tensor& a) { return kiln::sum(a * a.transpose(0, 1)); },
                               {kiln::spec(kiln::float64, {"n", "n"})});
    CHECK(gram(kiln::from_values({1.0, 2.0, 3.0, 4.0}, {2, 2})).item<double>() == 1.0 + 2.0 * 3.0 * 2.0 + 16.0);
    CHECK(gram(kiln::ones({3, 3}, kiln::float64)).item<double>() == 9.0);
    CHECK(gram.trace_count() == 1);
    CHECK_THROWS_WITH_AS(gram(kiln::ones({3, 4}, kiln::float64)), doctest::Contains("whose axis 1 ('n') is 4, but axis 0 of argument 0"),
                         kiln::shape_error);
    // Printed by name; kiln::dyn prints as "?".
    CHECK(kiln::to_string(kiln::spec(kiln::float32, {"batch", kiln::dyn, 8})) == "(batch, ?, 8) float32");
    CHECK(kiln::spec(kiln::float32, {kiln::dyn, 8}).names.empty());
    CHECK(kiln::spec(kiln::float32, {0, 8}).shape == std::vector<std::ptrdiff_t>{0, 8});
    CHECK(kiln::spec(kiln::float32, {"b", 8}).names == std::vector<std::string>{"b", ""});
    // Names that are not names, and names on static extents, are refused where the spec is made.
    CHECK_THROWS_WITH_AS(kiln::spec(kiln::float32, {"2nd", 8}), doctest::Contains("a dimension's name is 1 to 64 letters, digits and underscores"),
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::spec(kiln::float32, {"", 8}), kiln::value_error);
    CHECK_THROWS_AS(kiln::spec(kiln::float32, {"a b"}), kiln::value_error);
    CHECK_THROWS_AS(kiln::spec(kiln::float32, {std::string(65, 'a')}), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::spec(kiln::float32, {2, kiln::dyn}, {"two", "n"}),
                         "kiln: value_error in 'kiln::spec': axis 0 is named 'two' but has the static extent 2 (a name is a dynamic extent)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::spec(kiln::float32, {kiln::dyn, kiln::dyn}, {"n"}), "kiln: value_error in 'kiln::spec': 1 names for 2 axes",
                         kiln::value_error);
    kiln::spec edited(kiln::float32, {kiln::dyn, 2});
    edited.names = {"n", "m"};  // (set by hand: checked when a function takes it)
    CHECK_THROWS_WITH_AS(edited.check_names(),
                         "kiln: value_error in 'kiln::spec': axis 1 is named 'm' but has the static extent 2 (a name is a dynamic extent)",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::function([](const kiln::tensor& t) { return t; }, {edited}), kiln::value_error);
    edited.names = {"n", ""};
    CHECK_NOTHROW(edited.check_names());
    CHECK(kiln::to_string(edited) == "(n, 2) float32");
}

TEST_CASE("options in braces alone are the options, whichever field comes first") {
    // kiln::function(f, {.plan = false}) once also read as a std::vector<spec> of size `false`: an ambiguous call.
    auto twice = [](const kiln::tensor& x) { return x * 2.0; };
    auto a = kiln::function(twice, {.plan = false});
    auto b = kiln::function(twice, {.reduce_retracing = true});
    auto c = kiln::function(twice, {.optimize = false});
    auto d = kiln::function(twice, {.fuse = false});
    auto e = kiln::function(twice, {.cuda_graphs = false});
    auto n = kiln::function(twice, {.name = "named", .plan = false});
    for (int i = 1; i <= 3; ++i) {
        const kiln::tensor x = kiln::ones({i, 2});
        CHECK(a(x).at<float>({0, 0}) == 2.0f);
        CHECK(b(x).at<float>({0, 1}) == 2.0f);
        CHECK(c(x).at<float>({0, 0}) == 2.0f);
        CHECK(d(x).at<float>({0, 0}) == 2.0f);
        CHECK(e(x).at<float>({0, 0}) == 2.0f);
        CHECK(n(x).at<float>({0, 0}) == 2.0f);
    }
    CHECK(a.options().plan == false);
    CHECK(b.trace_count() == 2);  // reduce_retracing took effect: the batch became dynamic at the second trace
    CHECK(a.trace_count() == 3);
    CHECK(c.options().optimize == false);
    CHECK(d.options().fuse == false);
    CHECK(e.options().cuda_graphs == false);
    CHECK(n.options().name == "named");
    // and a braced list of specs, or a std::vector of them, is the specs
    std::vector<kiln::spec> specs{kiln::spec(kiln::float32, {kiln::dyn, 2})};
    auto s = kiln::function(twice, specs, {.plan = false});
    auto t = kiln::function(twice, {kiln::spec(kiln::float32, {kiln::dyn, 2})});
    for (int i = 1; i <= 3; ++i) {
        CHECK(s(kiln::ones({i, 2})).shape() == kiln::dims({i, 2}));
        CHECK(t(kiln::ones({i, 2})).shape() == kiln::dims({i, 2}));
    }
    CHECK(s.trace_count() == 1);
    CHECK(t.trace_count() == 1);
    CHECK_THROWS_AS(t(kiln::ones({2, 3})), kiln::shape_error);
    // a plan exists once a call of the signature has run
    auto p = kiln::function(twice);
    const kiln::tensor x = kiln::ones({4, 2});
    CHECK(p.compiled(x)->plan() == nullptr);
    p(x);
    p(x);
    REQUIRE(p.compiled(x)->plan() != nullptr);
    CHECK(p.compiled(x)->plan()->ok);
}

TEST_CASE("a parameter taken by kiln::tensor& is traced, and writes into it reach the caller's tensor at every call") {
    auto step = kiln::function([](kiln::tensor& x) {
        x += 1;
        return x * 2;
    });
    kiln::tensor a = kiln::ones({2});
    const kiln::tensor r1 = step(a);
    const kiln::tensor r2 = step(a);
    CHECK(r1.at<float>({0}) == 4.0f);
    CHECK(r2.at<float>({1}) == 6.0f);
    CHECK(a.at<float>({0}) == 3.0f);  // as eagerly: two increments
    CHECK(step.trace_count() == 1);
}

TEST_CASE("a function may return a std::pair or a std::array of tensors") {
    auto f = kiln::function([](const kiln::tensor& x) { return std::pair{x + 1, x * 2}; });
    auto g = kiln::function([](const kiln::tensor& x) { return std::array<kiln::tensor, 3>{x + 1, x * 2, x - 5}; });
    const kiln::tensor a = kiln::full({2}, 3.0);
    for (int call = 0; call < 3; ++call) {
        const auto [p, q] = f(a);
        CHECK(p.at<float>({0}) == 4.0f);
        CHECK(q.at<float>({1}) == 6.0f);
        const std::array<kiln::tensor, 3> r = g(a);
        CHECK(r[0].at<float>({0}) == 4.0f);
        CHECK(r[1].at<float>({0}) == 6.0f);
        CHECK(r[2].at<float>({1}) == -2.0f);
    }
    CHECK(f.trace_count() == 1);
    CHECK(g.trace_count() == 1);
    CHECK(g.graph(a).outputs.size() == 3);
    g.run_eagerly(true);
    CHECK(g(a)[2].at<float>({0}) == -2.0f);
    // cond's branches may return pairs too
    auto c = kiln::function([](const kiln::tensor& x) {
        return kiln::cond(kiln::sum(x) > 0, [&] { return std::pair{x, x * 2}; }, [&] { return std::pair{-x, x}; });
    });
    const auto [c1, c2] = c(-a);
    CHECK(c1.at<float>({0}) == 3.0f);
    CHECK(c2.at<float>({0}) == -3.0f);
}

TEST_CASE("a symbolic tensor kept past its trace is a trace_error, not a crash") {
    kiln::tensor kept;
    auto f = kiln::function([&](const kiln::tensor& x) {
        kept = x * 2;
        return x + 1;
    });
    f(kiln::ones({2}));
    CHECK(kept.is_symbolic());
    CHECK_THROWS_AS(kept.item<float>(), kiln::trace_error);
    CHECK_THROWS_AS(kiln::to_string(kept), kiln::trace_error);
    auto g = kiln::function([&](const kiln::tensor& x) { return x + kept; });
    CHECK_THROWS_AS(g(kiln::ones({2})), kiln::trace_error);
}

TEST_CASE("dynamic extents that are equal in one call and different in another are different signatures") {
    // x's batch and w's length are both dynamic; sum(w) / len(w) depends on the second, x's mean on the first.
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& w) { return kiln::mean(x) + kiln::mean(w); },
                            {kiln::spec(kiln::float64, {kiln::dyn}), kiln::spec(kiln::float64, {kiln::dyn})});
    CHECK(f(f64({1, 2, 3}, {3}), f64({4, 5, 6}, {3})).item<double>() == doctest::Approx(7));
    CHECK(f(f64({1, 2, 3}, {3}), f64({4, 8}, {2})).item<double>() == doctest::Approx(8));
    CHECK(f(f64({2, 2, 2, 2}, {4}), f64({1}, {1})).item<double>() == doctest::Approx(3));
    CHECK(f(f64({1, 2}, {2}), f64({3, 5}, {2})).item<double>() == doctest::Approx(5.5));
    CHECK(f.trace_count() == 2);  // equal extents, then different ones
}

TEST_CASE("kiln::print prints at every call, eagerly and traced") {
    std::FILE* capture = std::tmpfile();
    REQUIRE(capture);
    auto f = kiln::function([&](const kiln::tensor& x) {
        const kiln::tensor y = x * 2.0;
        kiln::print(y, "y", capture);
        return y + 1.0;
    });
    f(f64({1, 2}, {2}));
    f(f64({3, 4}, {2}));
    kiln::print(f64({5}, {1}), "", capture);
    std::rewind(capture);
    std::string text;
    for (int c; (c = std::fgetc(capture)) != EOF;) text += static_cast<char>(c);
    std::fclose(capture);
    CHECK(text == "y: tensor([2., 4.], dtype=float64)\ny: tensor([6., 8.], dtype=float64)\ntensor([5.], dtype=float64)\n");
    // The print is an effect: dead-code removal keeps it although nothing uses its result.
    CHECK(f.graph(f64({1, 2}, {2})).count("print") == 1);
}

TEST_CASE("kiln::cond: eagerly one branch runs; traced, each call takes the branch its predicate picks") {
    auto f = kiln::function([](const kiln::tensor& x) {
        return kiln::cond(kiln::sum(x) > 0, [&] { return x * 2.0; }, [&] { return -x; });
    });
    CHECK(values(f(f64({1, 2}, {2}))) == std::vector<double>{2, 4});
    CHECK(values(f(f64({-1, -2}, {2}))) == std::vector<double>{1, 2});
    CHECK(f.trace_count() == 1);
    // Eagerly (no trace), the same values.
    CHECK(values(kiln::cond(kiln::sum(f64({-1, -2}, {2})) > 0, [] { return f64({9}, {1}); }, [] { return f64({7}, {1}); })) ==
          std::vector<double>{7});
    // Gradients flow to the branch taken, traced and eagerly alike.
    auto g = kiln::function([](const kiln::tensor& x) {
        kiln::gradient_tape tape;
        tape.watch(x);
        const kiln::tensor y = kiln::cond(kiln::sum(x) > 0, [&] { return kiln::sum(x * x); }, [&] { return kiln::sum(x * 3.0); });
        return tape.gradient(y, x);
    });
    CHECK(values(g(f64({1, 2}, {2}))) == std::vector<double>{2, 4});
    CHECK(values(g(f64({-1, -2}, {2}))) == std::vector<double>{3, 3});
    // Branches must be pure and agree in shape.
    kiln::variable v(f64({0}, {1}));
    auto bad = kiln::function([&](const kiln::tensor& x) {
        return kiln::cond(kiln::sum(x) > 0, [&] { v.assign(x); return x; }, [&] { return x; });
    });
    CHECK_THROWS_AS(bad(f64({1}, {1})), kiln::trace_error);
    auto shapes = kiln::function([](const kiln::tensor& x) {
        return kiln::cond(kiln::sum(x) > 0, [&] { return x; }, [&] { return kiln::sum(x); });
    });
    CHECK_THROWS_AS(shapes(f64({1, 2}, {2})), kiln::value_error);
}

TEST_CASE("after the first calls, a replayed training step takes every tensor from kiln's cache") {
    kiln::generator g(1);
    mlp::eager_model m(g);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    auto step = mlp::function_step(m, opt);
    std::vector<float> x(static_cast<std::size_t>(mlp::batch_size * mlp::features), 0.5f), y(static_cast<std::size_t>(mlp::batch_size), 1.0f);
    for (int i = 0; i < 3; ++i) step(x.data(), y.data(), mlp::batch_size);
    const kiln::allocator_stats before = kiln::cache_stats();
    for (int i = 0; i < 50; ++i) step(x.data(), y.data(), mlp::batch_size);
    const kiln::allocator_stats after = kiln::cache_stats();
    CHECK(after.misses == before.misses);
    // From its buffer plan, a call allocates one tensor: the loss it returns (the rest lives in the thread's arena).
    CHECK(after.hits - before.hits == 50);
}

TEST_CASE("a dynamic batch that no parameter follows: each batch size gets its own buffer plan") {
    // Dense layers only: nothing in the graph follows the batch (no reshape, no mean), yet a plan holds its values'
    // shapes. Traced at batch 1, then called at 32: the calls at 32 run from a plan of their own (allocating only
    // the result), not node by node from a plan that does not fit.
    kiln::generator g(2);
    mlp::eager_model m(g);
    auto predict = kiln::function([&](const kiln::tensor& x) { return m(x); }, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features})});
    const kiln::tensor one = kiln::randn({1, mlp::features}, kiln::float32, g), many = kiln::randn({32, mlp::features}, kiln::float32, g);
    CHECK(values(predict(one)) == values(m(one)));
    for (int i = 0; i < 3; ++i) CHECK(values(predict(many)) == values(m(many)));
    const kiln::allocator_stats before = kiln::cache_stats();
    for (int i = 0; i < 20; ++i) (void)predict(many);
    const kiln::allocator_stats after = kiln::cache_stats();
    CHECK(after.misses == before.misses);
    CHECK(after.hits - before.hits == 20);
    CHECK(values(predict(one)) == values(m(one)));  // (and batch 1 still from its own)
    CHECK(predict.trace_count() == 1);
}

TEST_CASE("kiln::while_loop: eagerly a C++ loop; traced, the trip count comes from the values at each call") {
    // Doubles x until its sum passes a limit given as a tensor: the number of trips depends on the data.
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& limit) {
        auto [i, y] = kiln::while_loop([&](const kiln::tensor&, const kiln::tensor& v) { return kiln::sum(v) < limit; },
                                       [&](const kiln::tensor& k, const kiln::tensor& v) { return std::make_tuple(k + 1, v * 2.0); },
                                       kiln::zeros({}, kiln::int64), x);
        return std::make_tuple(i, y);
    });
    const kiln::tensor x = f64({1, 2}, {2});
    auto [i1, y1] = f(x, f64({10}, {}));
    CHECK(i1.item<std::int64_t>() == 2);  // 3 -> 6 -> 12
    CHECK(values(y1) == std::vector<double>{4, 8});
    auto [i2, y2] = f(x, f64({100}, {}));
    CHECK(i2.item<std::int64_t>() == 6);  // 3 * 2^6 = 192
    CHECK(values(y2) == std::vector<double>{64, 128});
    auto [i3, y3] = f(x, f64({1}, {}));
    CHECK(i3.item<std::int64_t>() == 0);
    CHECK(values(y3) == std::vector<double>{1, 2});
    CHECK(f.trace_count() == 1);
    CHECK(f.graph(x, f64({10}, {})).count("while_loop") == 1);
    // Eagerly, the same.
    const kiln::tensor e = kiln::while_loop([](const kiln::tensor& v) { return kiln::sum(v) < 10.0; },
                                            [](const kiln::tensor& v) { return v * 2.0; }, x);
    CHECK(values(e) == std::vector<double>{4, 8});
    // A body that changes the state's shape is refused while tracing.
    auto bad = kiln::function([](const kiln::tensor& v) {
        return kiln::while_loop([](const kiln::tensor& s) { return kiln::sum(s) < 10.0; },
                                [](const kiln::tensor& s) { return kiln::concat({s, s}); }, v);
    });
    CHECK_THROWS_AS(bad(x), kiln::value_error);
}

TEST_CASE("a while_loop's condition and body may use plain tensors captured from outside: constants of trace time") {
    // docs/function-mode.md's example: the limit is a plain tensor the lambdas capture, not an argument.
    kiln::tensor limit = f64({10}, {});
    const kiln::tensor factor = f64({2}, {});
    auto f = kiln::function([&](const kiln::tensor& x) {
        auto [i, y] = kiln::while_loop([&](const kiln::tensor&, const kiln::tensor& v) { return kiln::sum(v) < limit + 0.0; },
                                       [&](const kiln::tensor& k, const kiln::tensor& v) { return std::make_tuple(k + 1, v * factor); },
                                       kiln::zeros({}, kiln::int64), x);
        return std::make_tuple(i, y);
    });
    auto [i1, y1] = f(f64({1, 2}, {2}));
    CHECK(i1.item<std::int64_t>() == 2);  // 3 -> 6 -> 12
    CHECK(values(y1) == std::vector<double>{4, 8});
    auto [i2, y2] = f(f64({0.5, 0.5}, {2}));
    CHECK(i2.item<std::int64_t>() == 4);  // 1 -> 2 -> 4 -> 8 -> 16
    CHECK(values(y2) == std::vector<double>{8, 8});
    // Captured by value at trace time, as TensorFlow captures a Python tensor: a later change is not seen.
    limit = f64({1000}, {});
    auto [i3, y3] = f(f64({1, 2}, {2}));
    CHECK(i3.item<std::int64_t>() == 2);
    CHECK(f.trace_count() == 1);
}

TEST_CASE("a while_loop's body may write into variables, at every trip and every call") {
    kiln::variable total(f64({0}, {1}));
    auto f = kiln::function([&](const kiln::tensor& n) {
        return kiln::while_loop([&](const kiln::tensor& k) { return k < n; },
                                [&](const kiln::tensor& k) {
                                    total.assign(total + k.to(kiln::float64).reshape({1}));
                                    return k + 1;
                                },
                                kiln::zeros({}, kiln::int64));
    });
    CHECK(f(kiln::tensor(std::int64_t{4})).item<std::int64_t>() == 4);
    CHECK(values(total) == std::vector<double>{6});  // 0 + 1 + 2 + 3
    f(kiln::tensor(std::int64_t{3}));
    CHECK(values(total) == std::vector<double>{9});
    CHECK(f.trace_count() == 1);
}

TEST_CASE("gradients flow through a traced while_loop: to its state, the function's tensors and the variables it reads") {
    // A recurrence h <- tanh(h * w + u) + c-style accumulator c <- c + h, for n trips (n is an argument, so the trip
    // count is a value); the loss reads both floating state tensors. The same lambda runs eagerly (a C++ loop that
    // the tape records op by op) and traced (one effect; the gradient runs the loop again and the body's
    // vector-Jacobian product backwards).
    kiln::variable w(f64({0.5, -0.3}, {2}));
    auto step = [&](const kiln::tensor& h0, const kiln::tensor& x, const kiln::tensor& n) {
        kiln::gradient_tape tape;
        tape.watch(h0);
        tape.watch(x);
        const kiln::tensor u = x * 2.0;  // a value of the trace that the body reads
        auto [k, h, c] = kiln::while_loop(
            [&](const kiln::tensor& i, const kiln::tensor&, const kiln::tensor&) { return i < n; },
            [&](const kiln::tensor& i, const kiln::tensor& v, const kiln::tensor& acc) {
                const kiln::tensor next = kiln::tanh(v * w + u);
                return std::make_tuple(i + 1, next, acc + next * next);
            },
            kiln::zeros({}, kiln::int64), h0, kiln::zeros({2}, kiln::float64));
        const kiln::tensor loss = kiln::sum(h * h) + kiln::sum(c) * 0.5;
        const std::vector<kiln::tensor> g = tape.gradient(loss, {h0, x, w});
        return std::make_tuple(loss, k, g[0], g[1], g[2]);
    };
    auto f = kiln::function(step);
    const kiln::tensor h0 = f64({0.2, -0.7}, {2}), x = f64({0.1, 0.4}, {2});
    for (std::int64_t trips : {3, 0, 1, 6}) {
        const kiln::tensor n(trips);
        auto [loss, k, gh, gx, gw] = f(h0, x, n);
        auto [eloss, ek, egh, egx, egw] = step(h0, x, n);
        CHECK(k.item<std::int64_t>() == trips);
        CHECK(loss.item<double>() == doctest::Approx(eloss.item<double>()).epsilon(1e-12));
        for (int i = 0; i < 2; ++i) {
            CHECK(gh.at<double>({i}) == doctest::Approx(egh.at<double>({i})).epsilon(1e-12));
            CHECK(gx.at<double>({i}) == doctest::Approx(egx.at<double>({i})).epsilon(1e-12));
            CHECK(gw.at<double>({i}) == doctest::Approx(egw.at<double>({i})).epsilon(1e-12));
        }
        if (trips == 0) {  // no trip: the loss is sum(h0^2), so only h0 has a gradient
            CHECK(values(gh) == std::vector<double>{0.4, -1.4});
            CHECK(values(gx) == std::vector<double>{0, 0});
            CHECK(values(gw) == std::vector<double>{0, 0});
        }
    }
    CHECK(f.trace_count() == 1);
    CHECK(f.graph(h0, x, kiln::tensor(std::int64_t{3})).count("while_loop_gradient") == 2);  // one per floating state
    // One trip by hand: h1 = tanh(h0 w + 2x), loss = h1^2 + h1^2 / 2, d loss / d w = 3 h1 (1 - h1^2) h0.
    auto [l1, k1, gh1, gx1, gw1] = f(h0, x, kiln::tensor(std::int64_t{1}));
    for (int i = 0; i < 2; ++i) {
        const double h1 = std::tanh(h0.at<double>({i}) * w.at<double>({i}) + 2 * x.at<double>({i}));
        CHECK(gw1.at<double>({i}) == doctest::Approx(3 * h1 * (1 - h1 * h1) * h0.at<double>({i})).epsilon(1e-12));
        CHECK(gx1.at<double>({i}) == doctest::Approx(3 * h1 * (1 - h1 * h1) * 2).epsilon(1e-12));
    }
    // A second derivative through the loop (an outer tape recording the inner tape's gradient) is refused, not zero.
    auto second = kiln::function([&](const kiln::tensor& v0) {
        kiln::gradient_tape outer;
        outer.watch(v0);
        kiln::gradient_tape inner;
        inner.watch(v0);
        const kiln::tensor v = kiln::while_loop([](const kiln::tensor& v) { return kiln::sum(v) < 10.0; },
                                                [](const kiln::tensor& v) { return v * v + 1.0; }, v0);
        const kiln::tensor g = inner.gradient(kiln::sum(v), v0);
        return outer.gradient(kiln::sum(g), v0);
    });
    CHECK_THROWS_WITH_AS(second(f64({1, 2}, {2})), doctest::Contains("second derivatives through a traced while_loop"),
                         kiln::value_error);
    // A body that writes into a variable cannot be run again for the gradient: a clear error, not a wrong answer.
    kiln::variable total(f64({0}, {1}));
    auto writes = kiln::function([&](const kiln::tensor& v0) {
        kiln::gradient_tape tape;
        tape.watch(v0);
        const kiln::tensor v = kiln::while_loop([](const kiln::tensor& v) { return kiln::sum(v) < 10.0; },
                                                [&](const kiln::tensor& v) {
                                                    total.assign(total + 1.0);
                                                    return v * 2.0;
                                                },
                                                v0);
        return tape.gradient(kiln::sum(v), v0);
    });
    CHECK_THROWS_WITH_AS(writes(f64({1, 2}, {2})),
                         doctest::Contains("gradients through a traced while_loop whose body writes into tensors"),
                         kiln::value_error);
}

TEST_CASE("fused groups: elementwise chains run tile by tile and give eager mode's values bit for bit") {
    // A chain over (300, 70) with a bias that repeats along rows, a number, and an operand that is a transposed view
    // (copied before the tiles); 21000 elements is several tiles, with a last partial one.
    auto chain_of = [](const kiln::tensor& x, const kiln::tensor& b, const kiln::tensor& t) {
        return kiln::tanh(kiln::relu(x * 1.5 + b) - t.transpose(0, 1) * 0.25) * x;
    };
    auto f = kiln::function(chain_of);
    auto unfused = kiln::function(chain_of, kiln::function_options{.fuse = false});
    kiln::generator g(5);
    const kiln::tensor x = kiln::randn({300, 70}, kiln::float32, g), b = kiln::randn({70}, kiln::float32, g),
                       t = kiln::randn({70, 300}, kiln::float32, g);
    const kiln::tensor want = chain_of(x, b, t);
    const kiln::tensor got = f(x, b, t), plain = unfused(x, b, t);
    REQUIRE(got.shape() == want.shape());
    CHECK(values(got) == values(want));
    CHECK(values(plain) == values(want));
    const kiln::function_graph& fg = f.graph(x, b, t);
    CHECK(fg.groups() == 1);
    CHECK(unfused.graph(x, b, t).groups() == 0);
    CHECK(kiln::to_string(fg).find("[fused 0]") != std::string::npos);
    // A value used after the group is written out; the others live in tiles only.
    auto g2 = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor h = kiln::exp(x * 0.5);
        return std::make_tuple(kiln::sum(h), h * 2.0 + 1.0);
    });
    const kiln::tensor x64 = kiln::randn({5000}, kiln::float64, g);
    const auto [s, y] = g2(x64);
    CHECK(s.item<double>() == kiln::sum(kiln::exp(x64 * 0.5)).item<double>());
    CHECK(values(y) == values(kiln::exp(x64 * 0.5) * 2.0 + 1.0));
}

TEST_CASE("a fused group's values used only inside it share scratch tiles once dead, and every value stays right") {
    // a is read by c and g (alive across d, e, f); b by c and e; c dies at d, which reads it twice and may write
    // over its tile; d is also a result (written out, and read again inside the group); five values live only in
    // tiles, never more than three at once.
    auto body = [](const kiln::tensor& x, const kiln::tensor& y) {
        const kiln::tensor a = x * y;
        const kiln::tensor b = x - 0.5;
        const kiln::tensor c = a + b;
        const kiln::tensor d = c * c;
        const kiln::tensor e = kiln::tanh(d) - b;
        const kiln::tensor f = e * 3.0 + d;
        const kiln::tensor g = f / (kiln::abs(a) + 1.0);
        return std::make_tuple(g - y, d);
    };
    kiln::generator gen(12);
    for (kiln::dtype dt : {kiln::float32, kiln::float64})
        for (bool plan : {true, false}) {
            auto fn = kiln::function(body, kiln::function_options{.plan = plan});
            const kiln::tensor x = kiln::randn({5001}, dt, gen), y = kiln::randn({5001}, dt, gen);
            const auto [want_g, want_d] = body(x, y);
            for (int call = 0; call < 3; ++call) {  // traced, watched, then planned
                const auto [got_g, got_d] = fn(x, y);
                CHECK(values(got_g) == values(want_g));
                CHECK(values(got_d) == values(want_d));
            }
            CHECK(fn.graph(x, y).groups() == 1);
        }
}

TEST_CASE("a fused group with a dynamic extent, and one whose operands change layout between calls") {
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& b) { return kiln::sigmoid(x * 2.0 - b) + x; },
                            {kiln::spec(kiln::float64, {kiln::dyn, 8}), kiln::spec(kiln::float64, {8})});
    kiln::generator g(9);
    const kiln::tensor b = kiln::randn({8}, kiln::float64, g);
    for (std::ptrdiff_t n : {3, 1000, 1}) {
        const kiln::tensor x = kiln::randn({n, 8}, kiln::float64, g);
        CHECK(values(f(x, b)) == values(kiln::sigmoid(x * 2.0 - b) + x));
    }
    CHECK(f.trace_count() == 1);
    // The same signature fed a strided view: it is copied, and the values stay right.
    const kiln::tensor wide = kiln::randn({8, 40}, kiln::float64, g);
    const kiln::tensor view = wide.transpose(0, 1);  // (40, 8), not contiguous
    CHECK(values(f(view, b)) == values(kiln::sigmoid(view * 2.0 - b) + view));
}

TEST_CASE("reduce_retracing: an extent that changed becomes dynamic, and the next trace serves every extent") {
    auto f = kiln::function([](const kiln::tensor& x) { return kiln::mean(x * 3.0, {0}); },
                            kiln::function_options{.name = "relaxed", .reduce_retracing = true});
    for (std::ptrdiff_t n : {32, 8, 16, 5, 32}) {
        const kiln::tensor x = kiln::full({n, 4}, static_cast<double>(n), kiln::float64);
        CHECK(values(f(x)) == std::vector<double>(4, 3.0 * static_cast<double>(n)));
    }
    CHECK(f.trace_count() == 2);  // (32, 4), then (?, 4) for every other batch
    const std::vector<std::string> r = f.retrace_reasons();
    REQUIRE(!r.empty());
    CHECK(r[0].find("reduce_retracing makes argument 0 dimension 0 dynamic") != std::string::npos);
    // A call of another rank is not an error: it goes by its own shape.
    CHECK(values(f(kiln::full({2}, 1.0, kiln::float64))) == std::vector<double>{3});
    CHECK(f.trace_count() == 3);
}

TEST_CASE("after its first call a traced training step takes all its memory from the cache: no system allocation") {
    kiln::generator init(1);
    mlp::eager_model m(init);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    auto step = mlp::function_step(m, opt);
    std::vector<float> xb(32 * mlp::features, 0.25f), yb(32, 1.0f);
    step(xb.data(), yb.data(), 32);
    step(xb.data(), yb.data(), 8);  // the partial batch: the same trace
    step(xb.data(), yb.data(), 32);
    const kiln::allocator_stats before = kiln::cache_stats();
    for (int i = 0; i < 10; ++i) {
        step(xb.data(), yb.data(), 32);
        step(xb.data(), yb.data(), 8);
    }
    const kiln::allocator_stats after = kiln::cache_stats();
    CHECK(after.misses == before.misses);
    CHECK(after.hits > before.hits);  // its buffers are the cache's, handed back and forth
}

TEST_CASE("kiln::trace: a compile-time graph and its gradients as a traced function, equal to kiln::run") {
    using namespace kiln::literals;
    const auto x = kiln::input<"x", double, kiln::shape<kiln::dyn, 3>>{};
    const auto w = kiln::input<"w", double, kiln::shape<3, 2>>{};
    const auto b = kiln::input<"b", double, kiln::shape<2>>{};
    const auto y = kiln::input<"y", double, kiln::shape<kiln::dyn, 2>>{};
    // A dense layer with relu, a bias broadcast over the batch (its gradient sums it back) and a mean-square loss.
    const auto pred = kiln::relu(kiln::matmul(x, w) + b);
    const auto loss = kiln::mean(kiln::square(pred - y));
    const auto gw = kiln::grad(loss, w);
    const auto gb = kiln::grad(loss, b);
    CHECK(kiln::input_names(loss, gw, gb) == std::vector<std::string>{"x", "w", "b", "y"});
    auto f = kiln::trace(loss, gw, gb);
    kiln::generator gen(3);
    for (const std::ptrdiff_t n : {4, 7}) {
        const kiln::tensor xt = kiln::randn({n, 3}, kiln::float64, gen), wt = kiln::randn({3, 2}, kiln::float64, gen);
        const kiln::tensor bt = kiln::randn({2}, kiln::float64, gen), yt = kiln::randn({n, 2}, kiln::float64, gen);
        const auto [l, dw, db] = f(xt, wt, bt, yt);
        const auto run = [&](const auto& e) { return kiln::run(e, x = xt, w = wt, b = bt, y = yt); };
        const auto rl = run(loss);
        const auto rw = run(gw);
        const auto rb = run(gb);
        CHECK(l.item<double>() == doctest::Approx(static_cast<double>(rl())).epsilon(1e-12));
        REQUIRE(dw.shape() == kiln::dims{3, 2});
        REQUIRE(db.shape() == kiln::dims{2});
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 2; ++j) CHECK(dw.at<double>({i, j}) == doctest::Approx(rw(i, j)).epsilon(1e-12));
        for (int j = 0; j < 2; ++j) CHECK(db.at<double>({j}) == doctest::Approx(rb(j)).epsilon(1e-12));
        // ... and the same gradients as a tape in eager mode.
        kiln::gradient_tape tape;
        tape.watch(wt);
        tape.watch(bt);
        const kiln::tensor el = kiln::mean(kiln::square(kiln::relu(kiln::matmul(xt, wt) + bt) - yt));
        const std::vector<kiln::tensor> g = tape.gradient(el, std::vector<kiln::tensor>{wt, bt});
        check_same(dw, g[0]);
        check_same(db, g[1]);
    }
    // The batch extent is dynamic (kiln::dyn in the inputs' static shapes): one trace served both batches.
    CHECK(f.trace_count() == 1);
    // The inputs' dtypes and static shapes are the function's specs.
    CHECK_THROWS_WITH_AS(f(kiln::ones({4, 3}), kiln::ones({3, 2}), kiln::ones({2}), kiln::ones({4, 2})),
                         doctest::Contains("argument 0"), kiln::dtype_error);
    CHECK_THROWS_AS(f(kiln::ones({4, 4}, kiln::float64), kiln::ones({3, 2}, kiln::float64), kiln::ones({2}, kiln::float64),
                      kiln::ones({4, 2}, kiln::float64)),
                    kiln::shape_error);
}

TEST_CASE("kiln::trace of inputs without static shapes checks dtypes itself and retraces by shape") {
    using namespace kiln::literals;
    const auto e = kiln::tanh("a"_in) * 2_c + kiln::sum("b"_in);
    auto f = kiln::trace(e);
    CHECK(kiln::input_names(e) == std::vector<std::string>{"a", "b"});
    const kiln::tensor a = kiln::from_values<float>({0.5f, -1.0f}, {2}), b = kiln::from_values<float>({1, 2, 3}, {3});
    const kiln::tensor r = f(a, b);
    CHECK(r.at<float>({0}) == doctest::Approx(std::tanh(0.5) * 2 + 6));
    CHECK(r.at<float>({1}) == doctest::Approx(std::tanh(-1.0) * 2 + 6));
    CHECK_THROWS_WITH_AS(f(a.to(kiln::float64), b),
                         "kiln: dtype_error in 'trace': input 'a' is float32 in the expression, but the tensor given "
                         "for it is float64",
                         kiln::dtype_error);
    // The graph it traced is the run-time graph of function mode: printed, optimized, fused.
    const std::string text = kiln::to_string(f.graph(a, b));
    CHECK(text.find("tanh(%0)") != std::string::npos);
    CHECK(text.find("sum(%1)") != std::string::npos);
}

TEST_CASE("one generic lambda runs eager, traced and as a compile-time graph, with the same numbers") {
    using namespace kiln::literals;
    const auto model = [](const auto& x, const auto& y) { return kiln::relu(x * y + 0.5_c * x - y) * 2_c + y; };
    const kiln::tensor xt = f64({-1, 0, 1, 2, 3, 4}, {2, 3}), yt = f64({1, 1, 1, 2, 2, 2}, {2, 3});
    const std::vector<double> expect{1, 1, 2, 8, 13, 18};  // by hand, as in the first case of this file
    const kiln::tensor eager = model(xt, yt);
    auto traced = kiln::function(model);
    const auto x = kiln::input<"x", double>{};
    const auto y = kiln::input<"y", double>{};
    const auto graph = model(x, y);
    const auto compiled = kiln::run(graph, x = xt, y = yt);
    auto from_graph = kiln::trace(graph);
    CHECK(values(eager) == expect);
    CHECK(values(traced(xt, yt)) == expect);
    CHECK(values(from_graph(xt, yt)) == expect);
    REQUIRE(compiled.size() == 6);
    for (std::size_t i = 0; i < 6; ++i) CHECK(compiled.data()[i] == expect[i]);
    // The two run-time graphs, traced from eager code and from the compile-time graph, are the same graph.
    CHECK(kiln::to_string(traced.graph(xt, yt)) == kiln::to_string(from_graph.graph(xt, yt)));
}

TEST_CASE("relu's gradient is one relu_backward node in a traced step, with where's values") {
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& w) {
        kiln::gradient_tape tape;
        tape.watch(w);
        const kiln::tensor loss = kiln::sum(kiln::relu(kiln::matmul(x, w)));
        return tape.gradient(loss, w);
    });
    const kiln::tensor x = f64({1, -2, 0.5, 3, -1, 2}, {3, 2}), w = f64({0.5, -1, 2, 0.25}, {2, 2});
    const std::string text = kiln::to_string(f.graph(x, w));
    CHECK(text.find("relu_backward(") != std::string::npos);
    CHECK(text.find("where(") == std::string::npos);
    CHECK(text.find("greater(") == std::string::npos);
    // dL/dw = x^T (xw > 0): by hand, xw = [[-3.5, -1.5], [6.25, 0.25], [3.5, 1.5]], so only rows 1 and 2 count.
    CHECK(values(f(x, w)) == std::vector<double>{0.5 - 1, 0.5 - 1, 3 + 2, 3 + 2});
}

TEST_CASE("kiln::trace(session, step): a graph-mode training step as one traced call, sharing the session's state") {
    using namespace mlp::graph_model;
    const mlp::dataset d = mlp::make_data();
    const kiln::tensor xs = kiln::from_vector(d.x).reshape({mlp::samples, mlp::features});
    const kiln::tensor ys = kiln::from_vector(d.y).reshape({mlp::samples, 1});
    kiln::session a(3), b(3);  // the same seed: the same initial parameters
    a.initialize(loss);
    b.initialize(loss);
    auto train_step = kiln::trace(b, step);
    CHECK(train_step.options().name == "train_step");
    kiln::data::loader data(xs, ys, mlp::batch_size, {.seed = 7});
    int steps = 0;
    double worst = 0;
    for (int e = 0; e < 2; ++e)
        for (const kiln::data::batch& batch : data) {
            const double want = a.run(step, x = batch.x, y = batch.y);
            const double got = train_step(batch.x, batch.y).item<float>();
            worst = std::max(worst, std::abs(got - want) / std::abs(want));
            ++steps;
        }
    // kiln::run fuses elementwise chains and the traced step runs eager kernels: equal to rounding, step after step.
    CHECK(worst < 1e-5);
    CHECK(train_step.trace_count() == 1);  // the last partial batch replays the same trace
    for (const std::string& n : a.parameter_names()) {
        const std::vector<double> pa = values(a.parameter(n)), pb = values(b.parameter(n));
        REQUIRE(pa.size() == pb.size());
        double diff = 0;
        for (std::size_t i = 0; i < pa.size(); ++i) diff = std::max(diff, std::abs(pa[i] - pb[i]));
        CHECK_MESSAGE(diff < 1e-4, n);
    }
    // One state: session::run of the same step goes on from the traced steps' Adam moments and step count, so
    // alternating the two equals either alone.
    const kiln::data::batch first = *data.begin();
    const kiln::tensor bx = first.x.clone(), by = first.y.clone();
    const double l1 = a.run(step, x = bx, y = by), l2 = b.run(step, x = bx, y = by);
    CHECK(std::abs(l1 - l2) < 1e-4 * std::abs(l1));
    std::map<std::string, kiln::tensor> state;
    std::string optimizer;
    b.save_training_state(state, optimizer, "test");
    CHECK(optimizer == "adam");
    CHECK(state.at("optimizer/step").item<std::int64_t>() == steps + 1);
    // The graph: the loss's ops, then one effect that writes the four parameters.
    const kiln::function_graph& g = train_step.graph(bx, by);
    CHECK(g.count("session_step") == 1);
    CHECK(g.count(kiln::node_kind::effect) == 1);
    CHECK(g.count(kiln::node_kind::variable) == 4);
}

// The buffer plan (function/buffer_plan.hpp): from the second call of a signature, values live in a reused arena
// and matrix products, sums and elementwise ops run from raw pointers. Each case compares the planned calls with
// the same function run node by node (plan = false) and with hand-worked values.

TEST_CASE("the buffer plan runs the reference training step exactly as node-by-node replay does") {
    kiln::generator g1(3), g2(3);
    mlp::eager_model m1(g1), m2(g2);
    kiln::optim::adam o1(m1.parameters(), mlp::learning_rate), o2(m2.parameters(), mlp::learning_rate);
    auto body = [](mlp::eager_model& m, kiln::optim::adam& o) {
        return [&m, &o](const kiln::tensor& x, const kiln::tensor& y) {
            kiln::gradient_tape tape;
            kiln::tensor loss = kiln::nn::mse(m(x), y);
            o.apply_gradients(tape.gradient(loss, m.parameters()), m.parameters());
            return loss;
        };
    };
    const std::vector<kiln::spec> specs{kiln::spec(kiln::float32, {kiln::dyn, mlp::features}), kiln::spec(kiln::float32, {kiln::dyn, 1})};
    auto planned = kiln::function(body(m1, o1), specs);
    auto node_by_node = kiln::function(body(m2, o2), specs, {.plan = false});
    kiln::generator data(11);
    for (int step = 0; step < 12; ++step) {
        const std::ptrdiff_t rows = step % 4 == 3 ? 8 : mlp::batch_size;  // a partial batch: other extents, another plan
        const kiln::tensor x = kiln::randn({rows, mlp::features}, kiln::float32, data), y = kiln::randn({rows, 1}, kiln::float32, data);
        const float a = planned(x, y).item<float>(), b = node_by_node(x, y).item<float>();
        CHECK(a == b);
    }
    const std::vector<kiln::tensor> p1 = {m1.l1.w, m1.l1.b, m1.l2.w, m1.l2.b}, p2 = {m2.l1.w, m2.l1.b, m2.l2.w, m2.l2.b};
    for (std::size_t i = 0; i < p1.size(); ++i) CHECK(values(p1[i]) == values(p2[i]));
    const kiln::tensor x = kiln::zeros({mlp::batch_size, mlp::features}), y = kiln::zeros({mlp::batch_size, 1});
    const kiln::detail::buffer_plan* plan = planned.compiled(x, y)->plan();
    REQUIRE(plan != nullptr);
    CHECK(plan->ok);
    // The step's five matrix products, its three sums and its elementwise ops run from the plan; only the
    // optimizer's effect is replayed through its function.
    using step = kiln::detail::buffer_plan::step;
    CHECK(plan->planned(step::matmul) == 5);
    CHECK(plan->planned(step::sum) == 3);
    CHECK(plan->planned(step::op) == 0);
    CHECK(plan->planned(step::effect) == 1);
    // Both layers' bias adds run in their products' steps, and the hidden layer's relu with it.
    CHECK(plan->fused_epilogues() == 2);
    const std::string steps = plan->describe(planned.graph(x, y));
    CAPTURE(steps);
    CHECK(steps.find("+ bias %4 -> %5, relu -> %6") != std::string::npos);
    // relu's gradient is written over the product it reads, which dies there.
    CHECK(plan->in_place() >= 1);
    const std::size_t at = steps.find("relu_backward");
    REQUIRE(at != std::string::npos);
    CHECK(steps.substr(at, steps.find('\n', at) - at).find(" in place of %") != std::string::npos);
    // Buffers are reused: the arena is smaller than the values it holds laid end to end.
    std::size_t all = 0;
    for (const auto& v : plan->values)
        if (v.kind == kiln::detail::buffer_plan::value::arena) all += static_cast<std::size_t>(v.shape.numel()) * kiln::size_of(v.dtype);
    CHECK(plan->arena_bytes < all);
    CHECK(node_by_node.compiled(x, y)->plan() == nullptr);
    // The tape differentiates only what it follows: the batch x is not watched, so the trace holds the two forward
    // products and three backward ones (both weights' gradients and the hidden layer's), not x's gradient.
    CHECK(planned.traced_graph(x, y).count("matmul") == 5);
}

TEST_CASE("the buffer plan adds a bias and applies an activation in a matrix product's step, with the same bits") {
    const kiln::tensor a = f64({1, 0, 1, 0, 1, 1}, {2, 3}), w = f64({1, -2, 0, 3, 0, 4}, {3, 2});
    // a w = [[1, 2], [0, 7]]; with the bias [-2, 0.5]: [[-1, 2.5], [-2, 7.5]]; relu: [[0, 2.5], [0, 7.5]].
    const kiln::tensor b = f64({-2, 0.5}, {2});
    auto f = kiln::function([&](const kiln::tensor& x) {
        kiln::tensor z = kiln::matmul(x, w) + b;  // the pre-activation is a result too
        return std::make_tuple(kiln::relu(z), z * 2.0);
    });
    for (int call = 0; call < 3; ++call) {
        CAPTURE(call);
        auto [r, z2] = f(a);
        CHECK(values(r) == std::vector<double>{0, 2.5, 0, 7.5});
        CHECK(values(z2) == std::vector<double>{-2, 5, -4, 15});
    }
    const kiln::detail::buffer_plan* plan = f.compiled(a)->plan();
    REQUIRE(plan != nullptr);
    REQUIRE(plan->ok);
    CHECK(plan->fused_epilogues() == 1);

    // The bias first, a number broadcast over every element, and no activation after it: fused all the same.
    auto g = kiln::function([&](const kiln::tensor& x) { return kiln::sum(f64({10}, {1}) + kiln::matmul(x, w)); });
    for (int call = 0; call < 3; ++call) CHECK(values(g(a)) == std::vector<double>{1 + 2 + 0 + 7 + 40});
    CHECK(g.compiled(a)->plan()->fused_epilogues() == 1);

    // A product that something else reads keeps its own buffer: nothing is fused, and both values are right.
    auto h = kiln::function([&](const kiln::tensor& x) {
        kiln::tensor p = kiln::matmul(x, w);
        return std::make_tuple(p + b, p);
    });
    for (int call = 0; call < 3; ++call) {
        auto [pb, p] = h(a);
        CHECK(values(pb) == std::vector<double>{-1, 2.5, -2, 7.5});
        CHECK(values(p) == std::vector<double>{1, 2, 0, 7});
    }
    CHECK(h.compiled(a)->plan()->fused_epilogues() == 0);

    // A bias made after the product, or written between the product and the add, keeps the add where it was.
    auto late = kiln::function([&](const kiln::tensor& x, const kiln::tensor& c) {
        kiln::tensor p = kiln::matmul(x, w);
        kiln::tensor twice = c * 2.0;  // (of an argument: computed at each call, after the product)
        return p + twice;
    });
    for (int call = 0; call < 3; ++call) CHECK(values(late(a, b)) == std::vector<double>{-3, 3, -4, 8});
    CHECK(late.compiled(a, b)->plan()->fused_epilogues() == 0);
    kiln::variable vb(f64({-2, 0.5}, {2}));
    auto between = kiln::function([&](const kiln::tensor& x) {
        kiln::tensor p = kiln::matmul(x, w);
        vb.assign(vb * 3.0);
        return p + vb;
    });
    CHECK(values(between(a)) == std::vector<double>{-5, 3.5, -6, 8.5});    // vb = [-6, 1.5]
    CHECK(values(between(a)) == std::vector<double>{-17, 6.5, -18, 11.5});  // [-18, 4.5], planned
    CHECK(values(between(a)) == std::vector<double>{-53, 15.5, -54, 20.5});  // [-54, 13.5]
    CHECK(between.compiled(a)->plan()->fused_epilogues() == 0);

    // A large layer (split over the threads) gives what node-by-node replay gives, bit for bit, in float32.
    kiln::generator gen(5);
    const kiln::tensor xs = kiln::randn({300, 70}, kiln::float32, gen), ws = kiln::randn({70, 90}, kiln::float32, gen),
                       bs = kiln::randn({90}, kiln::float32, gen);
    auto layer = [&](const kiln::tensor& x) { return kiln::tanh(kiln::matmul(x, ws) + bs) * 3.0f; };
    auto planned = kiln::function(layer);
    auto plain = kiln::function(layer, kiln::function_options{.plan = false});
    for (int call = 0; call < 3; ++call) CHECK(values(planned(xs)) == values(plain(xs)));
    CHECK(planned.compiled(xs)->plan()->fused_epilogues() == 1);
}

TEST_CASE("the buffer plan writes an elementwise result over an operand that dies there, never over one read later") {
    kiln::generator gen(8);
    const kiln::tensor x = kiln::randn({64, 48}, kiln::float64, gen), w = kiln::randn({48, 40}, kiln::float64, gen);
    // One product %2 (the second is merged into it) and one fused group reading it twice:
    //   %3 = %2 * 0.01, %4 = exp(%3), %5 = %4 * 2 (a result's sum reads it), %6 = %2 * 3 (read by a sum and %8),
    //   %7 = tanh(%6), %8 = %7 + %6.
    // %5 may not take %2's buffer (%6 reads %2 after it); %6 may (no later member reads %2, and %2 dies there).
    auto body = [&](const kiln::tensor& a) {
        kiln::tensor p = kiln::matmul(a, w);
        kiln::tensor q = kiln::exp(p * 0.01) * 2.0;
        kiln::tensor r = kiln::matmul(a, w) * 3.0;
        kiln::tensor s = kiln::tanh(r) + r;
        return std::make_tuple(kiln::sum(q, {0}), kiln::sum(s, {1}), kiln::sum(r));
    };
    auto planned = kiln::function(body);
    auto plain = kiln::function(body, kiln::function_options{.plan = false});
    for (int call = 0; call < 3; ++call) {
        CAPTURE(call);
        auto [q1, s1, r1] = planned(x);
        auto [q2, s2, r2] = plain(x);
        CHECK(values(q1) == values(q2));
        CHECK(values(s1) == values(s2));
        CHECK(values(r1) == values(r2));
    }
    const kiln::detail::buffer_plan* plan = planned.compiled(x)->plan();
    REQUIRE(plan != nullptr);
    REQUIRE(plan->ok);
    const std::string steps = plan->describe(planned.graph(x));
    CAPTURE(steps);
    CHECK(plan->in_place() == 1);
    CHECK(steps.find("%6 in place of %2") != std::string::npos);
    CHECK(steps.find("%5 in place") == std::string::npos);
}

TEST_CASE("planned calls return results of their own, views of arguments, and fall back for other layouts") {
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) {
        kiln::tensor p = kiln::matmul(a, b.transpose(0, 1));      // BLAS with a transposed operand
        kiln::tensor s = kiln::sum(p * 2.0, {0}, true);          // a singleton elementwise op, a planned sum
        return std::make_tuple(p + s, a.transpose(0, 1), kiln::sum(p));
    });
    const kiln::tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), b = f64({1, 0, 1, 0, 1, 0, 2, 2, 2}, {3, 3});
    // p = a b^T = [[4, 2, 12], [10, 5, 30]]; s = 2 * column sums = [[28, 14, 84]]; p + s; sum(p) = 63.
    const std::vector<double> expect{32, 16, 96, 38, 19, 114};
    auto [r1, t1, s1] = f(a, b);
    auto [r2, t2, s2] = f(a, b);  // planned
    auto [r3, t3, s3] = f(a, b);
    CHECK(values(r1) == expect);
    CHECK(values(r2) == expect);
    CHECK(values(s2) == std::vector<double>{63});
    // Results of the arena are the caller's own: a later call does not change them.
    CHECK(!r2.shares_storage_with(r3));
    CHECK(values(r2) == expect);
    // A view of an argument is returned as a view, as node-by-node replay and eager mode return it.
    CHECK(t2.shares_storage_with(a));
    CHECK(values(t2) == std::vector<double>{1, 4, 2, 5, 3, 6});
    REQUIRE(f.compiled(a, b)->plan() != nullptr);
    CHECK(f.compiled(a, b)->plan()->ok);
    CHECK(f.compiled(a, b)->plan()->planned(kiln::detail::buffer_plan::step::matmul) == 1);
    // An argument of the same shape but another layout (a transposed view) runs node by node, correctly.
    const kiln::tensor bt = f64({1, 0, 2, 0, 1, 2, 1, 0, 2}, {3, 3}).transpose(0, 1);
    CHECK(values(bt) == values(b));
    auto [r4, t4, s4] = f(a, bt);
    CHECK(values(r4) == expect);
    CHECK(f.trace_count() == 1);
}

TEST_CASE("planned calls keep in-place writes, broadcasts and numbers in program order") {
    kiln::variable v(f64({1, 2, 3}, {3}));
    auto f = kiln::function([&v](const kiln::tensor& x) {
        kiln::tensor t = x * 2.0;     // (2, 3)
        t += v;                       // an effect into an intermediate value
        kiln::tensor u = t * 3.0 + kiln::sum(x, {1}, true);  // broadcast of a (2, 1) sum
        v.assign(v + kiln::sum(u, {0}));  // then the variable moves
        return u;
    });
    const kiln::tensor x = f64({1, 1, 1, 2, 2, 2}, {2, 3});
    // Call 1: t = [[3, 4, 5], [5, 6, 7]], u = 3t + [[3], [6]] = [[12, 15, 18], [21, 24, 27]]; v += [33, 39, 45].
    CHECK(values(f(x)) == std::vector<double>{12, 15, 18, 21, 24, 27});
    CHECK(values(v) == std::vector<double>{34, 41, 48});
    // Call 2 (planned): t = 2x + v = [[36, 43, 50], [38, 45, 52]], u = 3t + [[3], [6]].
    CHECK(values(f(x)) == std::vector<double>{111, 132, 153, 120, 141, 162});
    CHECK(values(v) == std::vector<double>{34 + 231, 41 + 273, 48 + 315});
    REQUIRE(f.compiled(x)->plan() != nullptr);
    CHECK(f.compiled(x)->plan()->ok);
}

TEST_CASE("parse_reduction_attrs reads a traced reduction's attributes") {
    std::vector<int> axes;
    bool keep = false;
    CHECK(kiln::detail::parse_reduction_attrs("axes=0,-1 keepdims=true", axes, keep));
    CHECK(axes == std::vector<int>{0, -1});
    CHECK(keep);
    CHECK(kiln::detail::parse_reduction_attrs("axes= keepdims=false", axes, keep));
    CHECK(axes.empty());
    CHECK(!keep);
    CHECK(!kiln::detail::parse_reduction_attrs("axis=1 keepdims=false", axes, keep));
    CHECK(!kiln::detail::parse_reduction_attrs("axes=x keepdims=false", axes, keep));
}

TEST_CASE("a classifier's step with integer class labels traces: eager mode's losses, and labels out of range at any call") {
    // nn::cross_entropy picks each row's log-probability with take_along_axis, which traces and checks the labels
    // at every call; eagerly the labels are checked up front with the loss's own name.
    kiln::generator g(1), g2(1), gd(5);
    kiln::nn::dense traced_layer(4, 3, kiln::nn::identity, g), eager_layer(4, 3, kiln::nn::identity, g2);
    kiln::optim::adam opt(traced_layer.parameters(), 0.1), opt2(eager_layer.parameters(), 0.1);
    const kiln::tensor x = kiln::randn({5, 4}, gd);
    for (kiln::dtype label_type : {kiln::int32, kiln::int64}) {
        const kiln::tensor labels = kiln::from_values<std::int64_t>({0, 2, 1, 1, 0}, {5}).to(label_type);
        auto step = kiln::function([&](const kiln::tensor& xb, const kiln::tensor& yb) {
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::cross_entropy(traced_layer(xb), yb);
            opt.step(tape.gradient(loss, traced_layer.parameters()));
            return loss;
        });
        for (int i = 0; i < 3; ++i) {
            kiln::tensor eager_loss;
            {
                kiln::gradient_tape tape;
                eager_loss = kiln::nn::cross_entropy(eager_layer(x), labels);
                opt2.step(tape.gradient(eager_loss, eager_layer.parameters()));
            }
            CHECK(step(x, labels).item<float>() == eager_loss.item<float>());
        }
        CHECK(step.trace_count() == 1);
        CHECK(values(traced_layer.w) == values(eager_layer.w));
        CHECK(values(traced_layer.b) == values(eager_layer.b));
        // Out of range in a later call, above and below: an error before the optimizer's effect, parameters kept.
        const std::vector<double> w_before = values(traced_layer.w);
        std::string message;
        try {
            step(x, kiln::from_values<std::int64_t>({0, 3, 1, 1, 0}, {5}).to(label_type));
        } catch (const kiln::value_error& e) {
            message = e.what();
        }
        CHECK(message == "kiln: value_error in 'take_along_axis': index 3 is out of range for a dimension of size 3");
        CHECK_THROWS_AS(step(x, kiln::from_values<std::int64_t>({0, -1, 1, 1, 0}, {5}).to(label_type)), kiln::value_error);
        CHECK(values(traced_layer.w) == w_before);
        CHECK(step.trace_count() == 1);
    }
    // By hand: log-softmax of (0, -inf) and (1, 2) picked at classes 0 and 1: -(0 + log(e^2 / (e + e^2))) / 2. A
    // -inf logit of another class leaves the loss finite (no 0 * -inf).
    const kiln::tensor logits = kiln::from_values<double>({0, -INFINITY, 1, 2}, {2, 2});
    const double expect = std::log1p(std::exp(-1.0)) / 2;
    CHECK(kiln::nn::cross_entropy(logits, kiln::from_values<std::int64_t>({0, 1}, {2})).item<double>() ==
          doctest::Approx(expect).epsilon(1e-12));
}
