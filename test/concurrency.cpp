// Concurrency under ThreadSanitizer (issue: reliability): 8 threads at once. Six run eager ops on sizes from 4 to
// 10^6 elements, each under its own gradient tape, and hand their tensors to another thread to free (so the
// per-thread block caches are crossed); two run large compile-time graphs through the shared thread pool; one more
// changes and reads the thread count meanwhile. Then one traced function (kiln::function) is called from 8 threads,
// interpreted and then with its fused groups compiled in the background.
// Every result is compared with a single-threaded (or eager) reference.
// Built with -fsanitize=thread by the test command; also a plain build.
#include <kiln/kiln.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

using namespace kiln::literals;

namespace {

struct eager_result {
    double loss = 0, grad = 0;
};

// One eager training-like step on n elements: a tape, elementwise ops, a reduction, views and a gradient.
eager_result eager_step(std::ptrdiff_t n, std::uint64_t seed, std::vector<kiln::tensor>* hand_over) {
    kiln::generator g(seed);
    const kiln::tensor x = kiln::randn({n}, kiln::float32, g);
    const kiln::tensor w = kiln::randn({n}, kiln::float32, g);
    kiln::gradient_tape tape;
    tape.watch(x);
    const kiln::tensor h = kiln::relu(x * w + 0.5_c * x - w) * 2_c + kiln::tanh(w);
    const kiln::tensor y = kiln::sum(h.reshape({-1}).slice(0, 0, n, 1) * x);
    const kiln::tensor dx = tape.gradient(y, x);
    if (hand_over) {
        hand_over->push_back(h);
        hand_over->push_back(dx);
    }
    return {y.item<double>(), kiln::sum(dx.to(kiln::float64)).item<double>()};
}

// A compile-time graph large enough to run on the thread pool.
double graph_run(std::size_t n, float shift) {
    const auto x = "x"_in;
    const auto y = "y"_in;
    std::vector<float> xs(n), ys(n);
    for (std::size_t i = 0; i < n; ++i) {
        xs[i] = static_cast<float>(i % 97) * 0.01f - shift;
        ys[i] = static_cast<float>(i % 13) * 0.1f;
    }
    const auto r = kiln::run(kiln::relu(x * y + 0.5_c * x - y) * 2_c + kiln::sigmoid(y), x = xs, y = ys);
    double s = 0;
    for (std::size_t i = 0; i < n; i += 1021) s += r(i);
    return s;
}

constexpr std::ptrdiff_t sizes[] = {4, 100, 5000, 300000, 1000000};

}  // namespace

int main() {
    // References, single-threaded.
    std::vector<std::vector<eager_result>> want(6);
    for (int t = 0; t < 6; ++t)
        for (std::ptrdiff_t n : sizes) want[t].push_back(eager_step(n, 100 + t, nullptr));
    const double graph_want[2] = {graph_run(1 << 20, 0.1f), graph_run(1 << 20, 0.3f)};

    std::mutex m;
    std::deque<kiln::tensor> to_free;
    std::atomic<bool> done{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t)
        threads.emplace_back([&, t] {
            for (int round = 0; round < 2; ++round)
                for (std::size_t k = 0; k < std::size(sizes); ++k) {
                    std::vector<kiln::tensor> made;
                    const eager_result r = eager_step(sizes[k], 100 + t, &made);
                    if (r.loss != want[t][k].loss || r.grad != want[t][k].grad) {
                        std::printf("concurrency: eager thread %d, n = %td: %.17g %.17g, expected %.17g %.17g\n", t,
                                    sizes[k], r.loss, r.grad, want[t][k].loss, want[t][k].grad);
                        ++failures;
                    }
                    std::lock_guard lock(m);
                    for (auto& x : made) to_free.push_back(std::move(x));
                }
        });
    for (int t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
            for (int round = 0; round < 3; ++round) {
                const double r = graph_run(1 << 20, t == 0 ? 0.1f : 0.3f);
                if (r != graph_want[t]) {
                    std::printf("concurrency: graph thread %d: %.17g, expected %.17g\n", t, r, graph_want[t]);
                    ++failures;
                }
            }
        });
    // Frees what the eager threads made, on this other thread, and reads the thread count meanwhile.
    std::thread freer([&] {
        while (!done.load()) {
            std::deque<kiln::tensor> batch;
            {
                std::lock_guard lock(m);
                batch.swap(to_free);
            }
            batch.clear();
            (void)kiln::num_threads();
            (void)kiln::cache_stats();
            std::this_thread::yield();
        }
    });
    for (auto& t : threads) t.join();
    done = true;
    freer.join();

    // One traced function (issue #14) called from 8 threads at once, on two signatures: each is traced once, under
    // the function's lock, and the replays run concurrently. Its tape's gradient is a node of the graph.
    auto traced = kiln::function([](const kiln::tensor& x, const kiln::tensor& w) {
        kiln::gradient_tape tape;
        tape.watch(x);
        const kiln::tensor y = kiln::sum(kiln::relu(x * w + 0.5_c * x - w) * 2_c + kiln::tanh(w));
        return std::make_tuple(y, tape.gradient(y, x));
    });
    std::vector<kiln::tensor> xs, ws;
    std::vector<double> traced_want;
    for (int i = 0; i < 8; ++i) {
        kiln::generator g(200 + i);
        xs.push_back(kiln::randn({i % 2 ? 64 : 5000}, kiln::float32, g));
        ws.push_back(kiln::randn({i % 2 ? 64 : 5000}, kiln::float32, g));
        kiln::run_functions_eagerly(true);
        const auto [y, dx] = traced(xs.back(), ws.back());
        kiln::run_functions_eagerly(false);
        traced_want.push_back(y.item<double>() + kiln::sum(dx.to(kiln::float64)).item<double>());
    }
    // Calls f from 8 threads, `calls` times each over the 8 inputs, and checks every result.
    auto call_from_8_threads = [&](auto& f, const char* what, int calls) {
        std::vector<std::thread> callers;
        for (int t = 0; t < 8; ++t)
            callers.emplace_back([&, t] {
                for (int k = 0; k < calls; ++k) {
                    const std::size_t i = static_cast<std::size_t>((t + k) % 8);
                    const auto [yr, dxr] = f(xs[i], ws[i]);
                    const kiln::tensor y = yr, dx = dxr;
                    const double r = y.item<double>() + kiln::sum(dx.to(kiln::float64)).item<double>();
                    if (r != traced_want[i]) {
                        std::printf("concurrency: %s, thread %d, input %zu: %.17g, expected %.17g\n", what, t, i, r,
                                    traced_want[i]);
                        ++failures;
                    }
                }
            });
        for (auto& t : callers) t.join();
    };
    call_from_8_threads(traced, "traced function", 20);
    if (traced.trace_count() != 2) {
        std::printf("concurrency: the traced function traced %zu times for 2 signatures\n", traced.trace_count());
        ++failures;
    }

    // The same function with its fused groups compiled in the background (kiln/function/jit.hpp): the 8 threads
    // call it while each group's kernel arrives, and after every kernel is in. The kernels compute the
    // interpreter's bits, so the expected values are the same.
    auto compiled = kiln::function(
        [](const kiln::tensor& x, const kiln::tensor& w) {
            kiln::gradient_tape tape;
            tape.watch(x);
            const kiln::tensor y = kiln::sum(kiln::relu(x * w + 0.5_c * x - w) * 2_c + kiln::tanh(w));
            return std::make_tuple(y, tape.gradient(y, x));
        },
        kiln::function_options{.name = "compiled", .jit = kiln::jit_mode::background});
    call_from_8_threads(compiled, "compiled function, while its kernels compile", 10);
    kiln::jit_wait();
    call_from_8_threads(compiled, "compiled function", 10);
    const auto [groups, ready] = compiled.compiled_groups(xs[0], ws[0]);
    std::printf("concurrency: compiled function: %zu of %zu fused groups compiled%s%s\n", ready, groups,
                kiln::jit_stats().last_error.empty() ? "" : "; ", kiln::jit_stats().last_error.c_str());
    if (failures) return 1;
    std::printf("concurrency: a traced function called from 8 threads agrees with eager mode and traced once per "
                "signature\n");
    std::printf("concurrency: 6 eager threads x %zu sizes x 2 rounds and 2 graph threads x 3 runs agree with the "
                "single-threaded reference\n", std::size(sizes));
    return 0;
}
