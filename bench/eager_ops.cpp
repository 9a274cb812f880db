// Eager mode: per-op dispatch cost on tiny tensors (with and without a recording tape), large elementwise ops
// against a STREAM triad, the chain relu(x*y + 0.5*x - y)*2 + y op by op, and matmul against calling OpenBLAS
// directly. With KILN_BENCH_TORCH, LibTorch's at::add on the same tiny tensors is measured in the same run.
#include <benchmark/benchmark.h>

#include <kiln/kiln.hpp>

#if KILN_HAVE_CBLAS
#include <cblas.h>
#endif
#if defined(KILN_BENCH_TORCH)
#include <ATen/ATen.h>
#endif

#include <vector>

using namespace kiln::literals;

namespace {

void add_tiny(benchmark::State& state) {
    const kiln::tensor a = kiln::ones({4}), b = kiln::ones({4});
    for (auto _ : state) {
        kiln::tensor c = a + b;
        benchmark::DoNotOptimize(c.raw_data());
    }
}

void add_tiny_taped(benchmark::State& state) {
    const kiln::tensor a = kiln::ones({4}), b = kiln::ones({4});
    for (auto _ : state) {
        kiln::gradient_tape tape;
        tape.watch(a);
        kiln::tensor c = a + b;
        benchmark::DoNotOptimize(c.raw_data());
    }
}

// The tape's own cost (construction, watch) without the op, to subtract from the taped figure.
void tape_alone(benchmark::State& state) {
    const kiln::tensor a = kiln::ones({4});
    for (auto _ : state) {
        kiln::gradient_tape tape;
        tape.watch(a);
        benchmark::DoNotOptimize(&tape);
    }
}

#if defined(KILN_BENCH_TORCH)
void torch_add_tiny(benchmark::State& state) {
    const at::Tensor a = at::ones({4}), b = at::ones({4});
    for (auto _ : state) {
        at::Tensor c = at::add(a, b);
        benchmark::DoNotOptimize(c.data_ptr());
    }
}
BENCHMARK(torch_add_tiny);
#endif

void add_large(benchmark::State& state) {
    const auto n = state.range(0);
    const kiln::tensor a = kiln::ones({n}), b = kiln::ones({n});
    for (auto _ : state) {
        kiln::tensor c = a + b;
        benchmark::DoNotOptimize(c.raw_data());
    }
    state.SetBytesProcessed(state.iterations() * 3 * n * 4);
}

void triad(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    std::vector<float> a(n, 1.f), b(n, 2.f), c(n);
    for (auto _ : state) {
        const float* __restrict x = a.data();
        const float* __restrict y = b.data();
        float* __restrict o = c.data();
        for (std::size_t i = 0; i < n; ++i) o[i] = x[i] + 3.f * y[i];
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * 3 * state.range(0) * 4);
}

void eager_chain(benchmark::State& state) {
    const auto n = state.range(0);
    kiln::generator g(1);
    const kiln::tensor x = kiln::randn({n}, kiln::float32, g), y = kiln::randn({n}, kiln::float32, g);
    for (auto _ : state) {
        kiln::tensor r = kiln::relu(x * y + 0.5_c * x - y) * 2_c + y;
        benchmark::DoNotOptimize(r.raw_data());
    }
}

void matmul_kiln(benchmark::State& state) {
    const auto n = state.range(0);
    kiln::generator g(2);
    const kiln::tensor a = kiln::randn({n, n}, kiln::float32, g), b = kiln::randn({n, n}, kiln::float32, g);
    for (auto _ : state) {
        kiln::tensor c = kiln::matmul(a, b);
        benchmark::DoNotOptimize(c.raw_data());
    }
    state.counters["flops"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

#if KILN_HAVE_CBLAS
void matmul_openblas(benchmark::State& state) {
    const auto n = state.range(0);
    kiln::generator g(2);
    const kiln::tensor a = kiln::randn({n, n}, kiln::float32, g), b = kiln::randn({n, n}, kiln::float32, g);
    std::vector<float> c(static_cast<std::size_t>(n * n));
    const int m = static_cast<int>(n);
    for (auto _ : state) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.f, a.data<const float>(), m,
                    b.data<const float>(), m, 0.f, c.data(), m);
        benchmark::DoNotOptimize(c.data());
    }
    state.counters["flops"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(matmul_openblas)->Arg(64)->Arg(256)->Arg(1024)->UseRealTime();
#endif

}  // namespace

BENCHMARK(add_tiny);
BENCHMARK(add_tiny_taped);
BENCHMARK(tape_alone);
BENCHMARK(triad)->Arg(1 << 25)->UseRealTime();
BENCHMARK(add_large)->Arg(1 << 25)->UseRealTime();
BENCHMARK(eager_chain)->Arg(1 << 20)->UseRealTime();
BENCHMARK(matmul_kiln)->Arg(64)->Arg(256)->Arg(1024)->UseRealTime();

BENCHMARK_MAIN();
