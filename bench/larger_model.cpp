// The larger model of issue #14, where compute dominates: 784-512-512-10, relu, softmax cross-entropy against soft
// labels, Adam (lr 1e-3), a batch of 256, one thread. The same step in graph mode (a kiln::session), function mode
// (kiln::function over the eager step) and eager mode, from the same initial parameters, interleaved round by
// round; the median of each mode's rounds, and each mode's time against graph mode's from the same run.
//   bench_larger_model [rounds=7] [steps per round=20]
// The loss is written the same way in every mode: mean(log(sum(exp(z), 1)) - sum(y * z, 1)) (logits from this
// initialization are small, so it needs no shift by the maximum).
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr std::ptrdiff_t batch = 256, in = 784, hidden = 512, classes = 10;

namespace graph_model {
inline constexpr kiln::input<"x", float, kiln::shape<batch, in>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<batch, classes>> y{};
inline constexpr auto logits = kiln::layers::dense<"l3", classes>(
    kiln::layers::dense<"l2", hidden>(kiln::layers::dense<"l1", hidden>(x, kiln::nn::relu), kiln::nn::relu));
inline constexpr auto loss =
    kiln::mean(kiln::log(kiln::sum<1>(kiln::exp(logits), kiln::keep_dims)) - kiln::sum<1>(y * logits, kiln::keep_dims));
inline constexpr auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3});
}  // namespace graph_model

struct eager_model {
    kiln::nn::dense l1, l2, l3;
    explicit eager_model(kiln::generator& g)
        : l1(in, hidden, kiln::nn::relu, g), l2(hidden, hidden, kiln::nn::relu, g), l3(hidden, classes, kiln::nn::identity, g) {}
    std::vector<kiln::variable*> parameters() { return {&l1.w, &l1.b, &l2.w, &l2.b, &l3.w, &l3.b}; }
    kiln::tensor loss(const kiln::tensor& x, const kiln::tensor& y) {
        const kiln::tensor z = l3(l2(l1(x)));
        return kiln::mean(kiln::log(kiln::sum(kiln::exp(z), {1}, true)) - kiln::sum(y * z, {1}, true));
    }
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
    kiln::set_num_threads(1);
    kiln::generator g(1);
    eager_model eager(g), traced(g);
    // The same initial parameters in every mode.
    const std::vector<kiln::variable*> pe = eager.parameters(), pt = traced.parameters();
    for (std::size_t i = 0; i < pe.size(); ++i) pt[i]->assign(pe[i]->clone());
    kiln::session s;
    s.declare(graph_model::loss);
    const char* names[] = {"l1/w", "l1/b", "l2/w", "l2/b", "l3/w", "l3/b"};
    for (std::size_t i = 0; i < pe.size(); ++i) s.set(names[i], pe[i]->clone());

    kiln::optim::adam opt_eager(eager.parameters(), 1e-3), opt_traced(traced.parameters(), 1e-3);
    auto function_step = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        kiln::tensor loss = traced.loss(x, y);
        opt_traced.apply_gradients(tape.gradient(loss, traced.parameters()), traced.parameters());
        return loss;
    });
    const kiln::tensor x = kiln::randn({batch, in}, kiln::float32, g);
    const kiln::tensor y = kiln::nn::softmax(kiln::randn({batch, classes}, kiln::float32, g), -1);  // soft labels
    std::vector<float> xs(x.data<float>(), x.data<float>() + x.numel()), ys(y.data<float>(), y.data<float>() + y.numel());

    double lg = 0, lf = 0, le = 0;
    auto graph_run = [&] { lg = s.run(graph_model::step, graph_model::x = kiln::view(xs.data(), {batch, in}),
                                      graph_model::y = kiln::view(ys.data(), {batch, classes})); };
    auto function_run = [&] { lf = function_step(x, y).item<float>(); };
    auto eager_run = [&] {
        kiln::gradient_tape tape;
        const kiln::tensor loss = eager.loss(x, y);
        opt_eager.apply_gradients(tape.gradient(loss, eager.parameters()), eager.parameters());
        le = loss.item<float>();
    };
    graph_run(), graph_run(), function_run(), function_run(), eager_run(), eager_run();  // traced, planned, warmed
    std::vector<double> tg, tf, te;
    auto time_of = [&](auto&& f) {
        const double t0 = now();
        for (int i = 0; i < steps; ++i) f();
        return (now() - t0) / steps;
    };
    for (int r = 0; r < rounds; ++r) {
        tg.push_back(time_of(graph_run));
        tf.push_back(time_of(function_run));
        te.push_back(time_of(eager_run));
    }
    const double g_ms = median(tg) * 1e3, f_ms = median(tf) * 1e3, e_ms = median(te) * 1e3;
    std::printf("784-512-512-10, batch 256, softmax cross-entropy, Adam, one thread; median of %d rounds of %d steps\n", rounds, steps);
    std::printf("%-10s %10s %14s %12s\n", "mode", "ms/step", "against graph", "last loss");
    std::printf("%-10s %10.3f %13.2fx %12.6f\n", "graph", g_ms, 1.0, lg);
    std::printf("%-10s %10.3f %13.2fx %12.6f\n", "function", f_ms, f_ms / g_ms, lf);
    std::printf("%-10s %10.3f %13.2fx %12.6f\n", "eager", e_ms, e_ms / g_ms, le);
    // The three modes train the same model from the same start on the same batch: their losses agree.
    const double spread = std::max({std::abs(lg - lf), std::abs(lg - le), std::abs(lf - le)}) / std::abs(lg);
    std::printf("relative spread of the three losses after %d steps: %.2e\n", 3 + rounds * steps, spread);
    return spread < 1e-3 ? 0 : 1;
}
