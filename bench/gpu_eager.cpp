// The GPU device against its baselines, measured in one run (issue #15). Self-timed (no Google Benchmark), so that
// nvcc builds it as easily as g++:
//   nvcc -std=c++20 -arch=sm_90 -O3 --expt-relaxed-constexpr -x cu -DKILN_GPU=1 -Iinclude bench/gpu_eager.cpp -lcublas
//   g++ -std=c++20 -O3 -fopenmp -DKILN_GPU=1 -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP
//       -I/usr/local/cuda/include/cccl -Iinclude bench/gpu_eager.cpp -lopenblas          (the emulated device)
// Every figure is a ratio against a baseline timed in the same run, contenders interleaved, best of the repeats:
//   1. the fused chain relu(x*y + 0.5x - y)*2 + y (graph mode's Thrust lowering: one kernel) against a triad
//      a = b + s*c on the same device (both move 12 bytes per element);
//   2. the same chain as eager ops on device tensors (one kernel per op) against the fused kernel, and one eager
//      product against a triad of the same size;
//   3. host time per small eager op on the device against the same op on the CPU;
//   4. matmul on the device against cuBLAS called directly (CUDA), or against the CPU's matmul (emulated);
//   5. the emulated device's eager chain against the CPU's eager chain (the device path's logic, on every machine);
//   6. training steps on the device against the same steps on the CPU, in graph mode (kiln::session), function mode
//      (a traced eager step, with and without its CUDA graph), eager mode and the graph-mode step traced with its
//      session (kiln::trace(session, step)): the reference model (10-64-1, Adam, batch 32) everywhere, and the
//      larger model (784-512-512-10, batch 256) where a GPU exists (the emulated device's products are a reference
//      kernel, too slow to time it);
//   7. host time per node of a replayed traced call on the device.
// `gpu_eager 67` runs rows 6 and 7 only; with no argument every row runs.
#define KILN_GPU_LAUNCH_COMPARE 1  // both kernel launches compiled in: row 3 compares them
#include <kiln/backend/thrust/transform.hpp>
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <thrust/device_vector.h>
#include <thrust/transform.h>

#if KILN_GPU_CUDA
#include <cublas_v2.h>
#endif

using namespace kiln::literals;

namespace {

double seconds(const std::function<void()>& f) {
    kiln::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    kiln::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of `reps` for each contender, run alternately.
std::vector<double> race(const std::vector<std::function<void()>>& fs, int reps) {
    std::vector<double> best(fs.size(), 1e30);
    for (int r = 0; r < reps; ++r)
        for (std::size_t i = 0; i < fs.size(); ++i) best[i] = std::min(best[i], seconds(fs[i]));
    return best;
}

namespace reference {
inline constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, 10>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<kiln::dyn, 1>> y{};
inline constexpr auto loss =
    kiln::mean(kiln::square(kiln::layers::dense<"l2", 1>(kiln::layers::dense<"l1", 64>(x, kiln::nn::relu)) - y));
inline constexpr auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3f});
}  // namespace reference
namespace larger {
inline constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, 784>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<kiln::dyn, 10>> y{};
inline constexpr auto loss = kiln::mean(kiln::square(
    kiln::layers::dense<"l3", 10>(kiln::layers::dense<"l2", 512>(kiln::layers::dense<"l1", 512>(x, kiln::nn::relu), kiln::nn::relu)) - y));
inline constexpr auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3f});
}  // namespace larger

// An eager model of the given widths (relu between layers) and its Adam optimizer, on a device.
struct eager_model {
    kiln::nn::sequential net;
    kiln::optim::adam opt;
    eager_model(const std::vector<std::ptrdiff_t>& widths, const kiln::device& dev) : net(make(widths)), opt() {
        net.to(dev);
        opt = kiln::optim::adam(net.parameters(), 1e-3);
    }
    static kiln::nn::sequential make(const std::vector<std::ptrdiff_t>& w) {
        kiln::generator g(1);
        kiln::nn::sequential s;
        for (std::size_t i = 0; i + 1 < w.size(); ++i) {
            if (i + 2 < w.size()) s.add(kiln::nn::dense(w[i], w[i + 1], kiln::nn::relu, g));
            else s.add(kiln::nn::dense(w[i], w[i + 1], kiln::nn::identity, g));
        }
        return s;
    }
    kiln::tensor step(const kiln::tensor& x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        kiln::tensor loss = kiln::nn::mse(net(x), y);
        opt.step(tape.gradient(loss, net.parameters()));
        return loss;
    }
};

// Microseconds per training step of one model in each mode on the device and on the CPU, contenders interleaved.
template <class Step, class X, class Y>
void training_steps(const char* label, const Step& graph_step, X xin, Y yin, const std::vector<std::ptrdiff_t>& widths,
                    std::ptrdiff_t batch, int steps, int reps) {
    kiln::manual_seed(3);
    const kiln::tensor xh = kiln::randn({batch, widths.front()}), yh = kiln::randn({batch, widths.back()});
    const kiln::tensor xd = xh.to(kiln::cuda), yd = yh.to(kiln::cuda);
    kiln::session sh(1), sd(1, kiln::cuda);
    eager_model eh(widths, kiln::cpu), ed(widths, kiln::cuda), fh(widths, kiln::cpu), fd(widths, kiln::cuda),
        fn(widths, kiln::cuda);
    auto trace_h = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) { return fh.step(x, y); });
    auto trace_d = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) { return fd.step(x, y); });
    // The same traced step on the device without its CUDA graph (node by node): the capture's same-run baseline.
    auto trace_n = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) { return fn.step(x, y); },
                                  kiln::function_options{.cuda_graphs = false});
    // The graph-mode step traced with its own device session (kiln::trace(session, step)): one CUDA graph per step.
    kiln::session ss(1, kiln::cuda);
    auto trace_s = kiln::trace(ss, graph_step);
    float sink = 0;
    auto loop = [&](auto&& one) {
        return [&, one] {
            for (int i = 0; i < steps; ++i) one();
        };
    };
    const auto t = race({loop([&] { sink += sd.run(graph_step, xin = xd, yin = yd); }),
                         loop([&] { sink += sh.run(graph_step, xin = xh, yin = yh); }),
                         loop([&] { (void)trace_d(xd, yd); }), loop([&] { (void)trace_h(xh, yh); }),
                         loop([&] { (void)ed.step(xd, yd); }), loop([&] { (void)eh.step(xh, yh); }),
                         loop([&] { (void)trace_n(xd, yd); }), loop([&] { (void)trace_s(xd, yd); })},
                        reps);
    const char* mode[] = {"graph", "function", "eager"};
    for (int m = 0; m < 3; ++m)
        std::printf("6. %s, %s mode: device %.1f us per step, CPU %.1f us: device/CPU %.2fx\n", label, mode[m],
                    t[2 * m] / steps * 1e6, t[2 * m + 1] / steps * 1e6, t[2 * m] / t[2 * m + 1]);
    const auto st = trace_d.cuda_graph_status(xd, yd);
    std::printf("6. %s, function mode on the device node by node (no CUDA graph): %.1f us per step; with it: %.2fx that "
                "time (captured: %s, %llu replays%s%s)\n",
                label, t[6] / steps * 1e6, t[2] / t[6], st.captured ? "yes" : "no", static_cast<unsigned long long>(st.replays),
                st.why.empty() ? "" : "; ", st.why.c_str());
    const auto ts = trace_s.cuda_graph_status(xd, yd);
    std::printf("6. %s, graph mode traced with its session (kiln::trace(session, step)) on the device: %.1f us per step: "
                "%.2fx session::run's (captured: %s, %llu replays%s%s)\n",
                label, t[7] / steps * 1e6, t[7] / t[0], ts.captured ? "yes" : "no", static_cast<unsigned long long>(ts.replays),
                ts.why.empty() ? "" : "; ", ts.why.c_str());
    if (sink == 12345.0f) std::printf(" ");
}

struct triad {
    float s;
    KILN_HD float operator()(float b, float c) const { return b + s * c; }
};

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured, also into a pipe
    // Rows to run: the digits of the first argument ("gpu_eager 6" runs row 6 only); every row without one.
    const std::string rows = argc > 1 ? argv[1] : "1234567";
    const auto want = [&rows](char row) { return rows.find(row) != std::string::npos; };
    if (!kiln::cuda_available()) {
        std::printf("gpu_eager: no CUDA device; nothing to measure\n");
        return 0;
    }
    const bool emulated = kiln::cuda_emulated();
    std::printf("device: %s\n", emulated ? "emulated (Thrust's OpenMP system, host memory)" : "CUDA");

    // 1. The fused chain against a triad.
    if (want('1')) {
        const std::size_t n = emulated ? (std::size_t{1} << 22) : (std::size_t{1} << 28);
        thrust::device_vector<float> a(n, 1.5f), b(n, -0.25f), out(n);
        const auto x = "x"_in;
        const auto y = "y"_in;
        const auto chain = kiln::relu(x * y + 0.5_c * x - y) * 2_c + y;
        auto fused = [&] { kiln::thrust_backend::run_into(out, chain, x = a, y = b); };
        auto tri = [&] { thrust::transform(a.begin(), a.end(), b.begin(), out.begin(), triad{0.5f}); };
        const auto t = race({fused, tri}, 10);
        const double gbs = 12.0 * static_cast<double>(n) / t[1] / 1e9;
        std::printf("1. fused chain, %zu float32: %.3f ms; triad %.3f ms (%.0f GB/s): chain at %.0f%% of the triad's bandwidth\n",
                    n, t[0] * 1e3, t[1] * 1e3, gbs, 100.0 * t[1] / t[0]);
    }

    // 2. The chain as eager ops on the device against the fused kernel.
    if (want('2')) {
        const std::ptrdiff_t n = emulated ? (1 << 22) : (1 << 26);
        const kiln::tensor a = kiln::full({n}, 1.5, kiln::float32, kiln::cuda), b = kiln::full({n}, -0.25, kiln::float32, kiln::cuda);
        thrust::device_vector<float> out(static_cast<std::size_t>(n));
        const auto x = "x"_in;
        const auto y = "y"_in;
        const auto chain = kiln::relu(x * y + 0.5_c * x - y) * 2_c + y;
        // The fused run reads the tensors' device memory through thrust pointers.
        thrust::device_ptr<const float> pa(a.data<const float>()), pb(b.data<const float>());
        // (A Thrust algorithm of the program's own on kiln's device memory: a device section, for KILN_GPU_GUARD.)
        auto copy_of = [n](thrust::device_ptr<const float> p) {
            const kiln::backend::gpu_memory::device_section work;
            return thrust::device_vector<float>(p, p + n);
        };
        thrust::device_vector<float> va = copy_of(pa), vb = copy_of(pb);
        auto fused = [&] { kiln::thrust_backend::run_into(out, chain, x = va, y = vb); };
        auto eager = [&] { const kiln::tensor r = kiln::relu(a * b + 0.5f * a - b) * 2.0f + b; };
        // One eager product moves what the triad moves (two reads, one write): its kernel's own efficiency.
        kiln::tensor prod;
        auto one_op = [&] { prod = a * b; };
        auto tri = [&] { thrust::transform(va.begin(), va.end(), vb.begin(), out.begin(), triad{0.5f}); };
        const auto t = race({eager, fused, one_op, tri}, 8);
        std::printf("2. eager chain on the device (7 kernels), %td float32: %.3f ms; fused %.3f ms: eager/fused %.2fx; one eager "
                    "product %.3f ms, triad %.3f ms: product/triad %.2fx\n",
                    n, t[0] * 1e3, t[1] * 1e3, t[0] / t[1], t[2] * 1e3, t[3] * 1e3, t[2] / t[3]);
    }

    // 3. Host time per small eager op.
    if (want('3')) {
        const kiln::tensor hd = kiln::ones({16}), dd = kiln::ones({16}, kiln::float32, kiln::cuda);
        const int ops = 2000;
        auto on = [&](const kiln::tensor& t) {
            return [&t] {
                kiln::tensor acc = t;
                for (int i = 0; i < ops; ++i) acc = acc + t;
            };
        };
#if KILN_GPU_CUDA
        // The same ops with each kernel launched through Thrust's for_each_n (as before 2026-12) instead of directly.
        auto thrust_launch = [&] {
            kiln::backend::gpu::launch_through_thrust() = true;
            on(dd)();
            kiln::backend::gpu::launch_through_thrust() = false;
        };
        const auto t = race({on(dd), on(hd), thrust_launch}, 5);
        std::printf("3. small eager op (16 elements): device %.2f us per op (launched through Thrust: %.2f us), CPU %.3f us "
                    "per op: %.1fx\n", t[0] / ops * 1e6, t[2] / ops * 1e6, t[1] / ops * 1e6, t[0] / t[1]);
#else
        const auto t = race({on(dd), on(hd)}, 5);
        std::printf("3. small eager op (16 elements): device %.2f us per op, CPU %.3f us per op: %.1fx\n", t[0] / ops * 1e6,
                    t[1] / ops * 1e6, t[0] / t[1]);
#endif
    }

    // 4. matmul against its baseline.
    const std::vector<std::ptrdiff_t> sizes = !want('4') ? std::vector<std::ptrdiff_t>{}
                                              : emulated ? std::vector<std::ptrdiff_t>{256, 512}
                                                         : std::vector<std::ptrdiff_t>{1024, 4096, 8192};
    for (const std::ptrdiff_t m : sizes) {
        kiln::manual_seed(2);
        const kiln::tensor a = kiln::randn({m, m}, kiln::float32, kiln::cuda), b = kiln::randn({m, m}, kiln::float32, kiln::cuda);
        auto ours = [&] { const kiln::tensor c = kiln::matmul(a, b); };
#if KILN_GPU_CUDA
        kiln::tensor c = kiln::zeros({m, m}, kiln::float32, kiln::cuda);
        auto base = [&] {
            const float one = 1, zero = 0;
            cublasSgemm(kiln::backend::gpu::blas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(m),
                        static_cast<int>(m), &one, b.data<const float>(), static_cast<int>(m), a.data<const float>(),
                        static_cast<int>(m), &zero, c.data<float>(), static_cast<int>(m));
        };
        const char* what = "cuBLAS directly";
#else
        const kiln::tensor ha = a.to(kiln::cpu), hb = b.to(kiln::cpu);
        auto base = [&] { const kiln::tensor c = kiln::matmul(ha, hb); };
        const char* what = "the CPU's matmul";
#endif
        const auto t = race({ours, base}, 5);
        std::printf("4. matmul %td x %td float32: device %.3f ms, %s %.3f ms: baseline/device %.0f%%\n", m, m, t[0] * 1e3, what,
                    t[1] * 1e3, 100.0 * t[1] / t[0]);
    }

    // 5. The eager chain on the (emulated) device against the CPU's.
    if (want('5')) {
        const std::ptrdiff_t n = 1 << 20;
        const kiln::tensor ha = kiln::full({n}, 1.5), hb = kiln::full({n}, -0.25);
        const kiln::tensor da = ha.to(kiln::cuda), db = hb.to(kiln::cuda);
        auto chain = [](const kiln::tensor& a, const kiln::tensor& b) {
            return [&a, &b] { const kiln::tensor r = kiln::relu(a * b + 0.5f * a - b) * 2.0f + b; };
        };
        const auto t = race({chain(da, db), chain(ha, hb)}, 8);
        std::printf("5. eager chain, %td float32: device %.3f ms, CPU %.3f ms: device/CPU %.2fx\n", n, t[0] * 1e3, t[1] * 1e3,
                    t[0] / t[1]);
    }
    // 7. A replayed traced call on the device: host time per node of its graph (after the passes), for a stack of 8
    //    dense layers (matmul, then bias and relu as one fused group) on a batch of 32. The host's time to issue the
    //    calls is read before the device is waited for; 16 calls stay well inside CUDA's launch queue.
    if (want('7')) {
        kiln::manual_seed(4);
        std::vector<kiln::tensor> w, b;
        for (int i = 0; i < 8; ++i) {
            w.push_back(kiln::randn({64, 64}, kiln::float32, kiln::cuda) * 0.1f);
            b.push_back(kiln::randn({64}, kiln::float32, kiln::cuda));
        }
        auto body = [&](const kiln::tensor& x) {
            kiln::tensor h = x;
            for (int i = 0; i < 8; ++i) h = kiln::relu(kiln::matmul(h, w[static_cast<std::size_t>(i)]) + b[static_cast<std::size_t>(i)]);
            return h;
        };
        // Node by node (each op the device's eager kernel), with each fused group compiled into one kernel (the
        // kernel compiler, kiln::jit_mode::blocking: nvcc builds it when the function is first prepared), and the
        // whole call captured as a CUDA graph from its third call and replayed (function_options::cuda_graphs).
        for (int contender = 0; contender < 3; ++contender) {
            const kiln::jit_mode mode = contender == 0 ? kiln::jit_mode::off : kiln::jit_mode::blocking;
            auto f = kiln::function(body, kiln::function_options{.jit = mode, .cuda_graphs = contender == 2});
            const kiln::tensor xd = kiln::randn({32, 64}, kiln::float32, kiln::cuda);
            for (int i = 0; i < 4; ++i) (void)f(xd);  // traced, kernels compiled (and the call captured)
            const auto& g = f.graph(xd);
            const int calls = 16;
            double best_issue = 1e30, best_total = 1e30;
            for (int r = 0; r < 20; ++r) {
                kiln::synchronize();
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < calls; ++i) (void)f(xd);
                const auto t1 = std::chrono::steady_clock::now();
                kiln::synchronize();
                const auto t2 = std::chrono::steady_clock::now();
                best_issue = std::min(best_issue, std::chrono::duration<double>(t1 - t0).count() / calls);
                best_total = std::min(best_total, std::chrono::duration<double>(t2 - t0).count() / calls);
            }
            std::printf("7. traced call, 8 dense layers, %s (%zu nodes, %zu fused groups, %zu compiled, %zu matmuls): host %.2f us "
                        "per call, %.2f us per node; with the device's time %.2f us per call\n",
                        contender == 0 ? "node by node" : contender == 1 ? "compiled groups" : "CUDA graph replay",
                        g.size(), g.groups(),
                        f.compiled_groups(xd).second, g.count("matmul"), best_issue * 1e6,
                        best_issue * 1e6 / static_cast<double>(g.size()), best_total * 1e6);
            if (contender == 2) {
                const auto st = f.cuda_graph_status(xd);
                std::printf("7. (captured: %s, %llu replays%s%s)\n", st.captured ? "yes" : "no",
                            static_cast<unsigned long long>(st.replays), st.why.empty() ? "" : "; ", st.why.c_str());
            }
        }
    }
    // 6. Training steps on the device against the CPU.
    if (want('6')) {
        training_steps("reference model (10-64-1, batch 32)", reference::step, reference::x, reference::y, {10, 64, 1}, 32,
                       emulated ? 50 : 200, 5);
        // (The CPU's contenders of this row take tens of milliseconds a step: fewer steps and repeats.)
        if (!emulated)
            training_steps("larger model (784-512-512-10, batch 256)", larger::step, larger::x, larger::y,
                           {784, 512, 512, 10}, 256, 20, 3);
    }
    return 0;
}
