// Function mode against graph mode and eager mode in one run, each pair interleaved (best of 9 rounds; the machine
// drifts, so read the ratios): the chain relu(x*y + 0.5*x - y)*2 + y at 2^16, 2^20 and 2^25 elements (graph mode's
// run_into, a traced function, eager ops), the per-call cost of a traced a + b on 4 elements against eager a + b,
// and the first call of the reference training step (tracing three times for its dynamic batch, the passes, one run)
// against a replayed call; a trace alone against a replayed call, first. The chain also runs as the traced function
// with its fused group compiled (kiln::jit_mode: kiln/function/jit.hpp); its kernels are cached under
// $KILN_JIT_CACHE or ~/.cache/kiln/jit.
//   cmake --build build-bench --target bench_function_mode && build-bench/bench/bench_function_mode
#include <chrono>
#include <cstdio>
#include <vector>

#include "../examples/mlp_eager.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double seconds_per_call(F&& f, int calls) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < calls; ++i) f();
    return std::chrono::duration<double>(clock_type::now() - t0).count() / calls;
}

// Best time per call of a and of b, their rounds alternating.
template <class A, class B>
std::pair<double, double> interleaved(A&& a, B&& b, int calls) {
    double ba = 1e30, bb = 1e30;
    for (int round = 0; round < 9; ++round) {
        ba = std::min(ba, seconds_per_call(a, calls));
        bb = std::min(bb, seconds_per_call(b, calls));
    }
    return {ba, bb};
}

void chain(std::ptrdiff_t n) {
    using namespace kiln::literals;
    const kiln::tensor x = kiln::randn({n}), y = kiln::randn({n});
    std::vector<float> out(static_cast<std::size_t>(n));
    const auto graph = kiln::relu("x"_in * "y"_in + 0.5_c * "x"_in - "y"_in) * 2_c + "y"_in;
    auto f = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::relu(a * b + 0.5 * a - b) * 2 + b; });
    const int calls = n >= (1 << 25) ? 3 : n >= (1 << 20) ? 20 : 400;
    const auto xv = kiln::view(x.data<float>(), {n}), yv = kiln::view(y.data<float>(), {n});
    auto ov = kiln::view(out.data(), {n});
    auto run_graph = [&] { kiln::run_into(ov, graph, "x"_in = xv, "y"_in = yv); };
    auto run_function = [&] { volatile float s = *f(x, y).data<float>(); (void)s; };
    auto run_eager = [&] { volatile float s = *(kiln::relu(x * y + 0.5 * x - y) * 2 + y).data<float>(); (void)s; };
    // The same function with its fused group compiled (kiln::set_jit; prepared, and compiled, at its first call).
    auto fc = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) { return kiln::relu(a * b + 0.5 * a - b) * 2 + b; });
    kiln::jit_options jit = kiln::jit_settings();
    jit.mode = kiln::jit_mode::blocking;
    kiln::set_jit(jit);
    (void)fc(x, y);
    jit.mode = kiln::jit_mode::off;
    kiln::set_jit(jit);
    auto run_compiled = [&] { volatile float s = *fc(x, y).data<float>(); (void)s; };
    const auto [g, fn] = interleaved(run_graph, run_function, calls);
    const auto [g2, fcomp] = interleaved(run_graph, run_compiled, calls);
    const auto [fn2, e] = interleaved(run_function, run_eager, calls);
    std::printf("chain 2^%-2d  graph run_into %9.1f us  function %9.1f us  compiled %9.1f us  eager %9.1f us  "
                "function/graph %5.2f  compiled/graph %5.2f  eager/function %5.2f\n",
                n == (1 << 16) ? 16 : n == (1 << 20) ? 20 : 25, g * 1e6, fn * 1e6, fcomp * 1e6, e * 1e6, fn / g,
                fcomp / g2, e / fn2);
}

void small_add() {
    const kiln::tensor a = kiln::ones({4}), b = kiln::ones({4});
    auto f = kiln::function([](const kiln::tensor& x, const kiln::tensor& y) { return x + y; });
    auto traced = [&] { volatile float s = *f(a, b).data<float>(); (void)s; };
    auto eager = [&] { volatile float s = *(a + b).data<float>(); (void)s; };
    const auto [t, e] = interleaved(traced, eager, 100000);
    std::printf("a + b on 4 float32: traced %.0f ns, eager %.0f ns (traced/eager %.2f)\n", t * 1e9, e * 1e9, t / e);
}

void first_call() {
    const mlp::dataset d = mlp::make_data();
    std::vector<float> x(d.x.begin(), d.x.begin() + mlp::batch_size * mlp::features), y(d.y.begin(), d.y.begin() + mlp::batch_size);
    double first = 1e30, replay = 1e30;
    for (int round = 0; round < 9; ++round) {
        kiln::generator g(1);
        mlp::eager_model m(g);
        kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
        auto step = mlp::function_step(m, opt);
        first = std::min(first, seconds_per_call([&] { step(x.data(), y.data(), mlp::batch_size); }, 1));
        replay = std::min(replay, seconds_per_call([&] { step(x.data(), y.data(), mlp::batch_size); }, 200));
    }
    std::printf("reference step: first call (three traces, passes, one run) %.0f us, a replayed call %.1f us\n", first * 1e6,
                replay * 1e6);
}

// What a trace costs against a replayed call of the same function (best of `rounds`, each a fresh function): the
// tracer needs each result's dtype and shape, not its values. The chain at 2^24 elements, and tanh of two products
// of 2048 x 2048 matrices.
template <class F>
void trace_cost(const char* what, F fn, const kiln::tensor& p, const kiln::tensor& q, int rounds) {
    double trace = 1e30, call = 1e30;
    for (int round = 0; round < rounds; ++round) {
        auto f = kiln::function(fn);
        trace = std::min(trace, seconds_per_call([&] { (void)f.graph(p, q); }, 1));
        (void)f(p, q);
        call = std::min(call, seconds_per_call([&] { volatile float s = *f(p, q).template data<float>(); (void)s; }, 3));
    }
    std::printf("trace of %s: %.3f ms, a replayed call %.3f ms (trace/call %.4f)\n", what, trace * 1e3, call * 1e3, trace / call);
}

}  // namespace

int main() {
    {
        const kiln::tensor x = kiln::randn({1 << 24}), y = kiln::randn({1 << 24});
        const kiln::tensor a = kiln::randn({2048, 2048}), w = kiln::randn({2048, 2048});
        trace_cost("the chain at 2^24", [](const kiln::tensor& p, const kiln::tensor& q) { return kiln::relu(p * q + 0.5 * p - q) * 2 + q; }, x, y, 5);
        trace_cost("tanh(matmul(matmul(a, w), w)) at 2048", [](const kiln::tensor& p, const kiln::tensor& q) {
            return kiln::tanh(kiln::matmul(kiln::matmul(p, q), q));
        }, a, w, 3);
        const kiln::tensor s = kiln::randn({4096, 4096}), t = kiln::randn({4096, 4096});
        trace_cost("softmax(a * b, 1) at 4096 x 4096", [](const kiln::tensor& p, const kiln::tensor& q) {
            return kiln::nn::softmax(p * q, 1);
        }, s, t, 5);
    }
    chain(1 << 16);
    chain(1 << 20);
    chain(1 << 25);
    small_add();
    first_call();
}
