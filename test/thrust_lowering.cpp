// The Thrust lowering: one thrust::transform over a zip of the leaves with the fused expression as functor.
// Built by the test command on Thrust's OpenMP device system (runs everywhere), and by nvcc as part of
// test/gpu_cuda.cpp (runs where a GPU exists; exit 77, "skipped", where none does).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <kiln/backend/thrust/transform.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#include <thrust/host_vector.h>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#endif

using namespace kiln::literals;

namespace {

double chain_ref(double a, double b) {
    const double t = a * b + 0.5 * a - b;
    return (t > 0 ? t : 0) * 2 + b;
}

}  // namespace

TEST_CASE("the chain runs through thrust::transform") {
    const auto x = "x"_in;
    const auto y = "y"_in;
    const std::size_t n = 100003;
    thrust::host_vector<float> ha(n), hb(n);
    for (std::size_t i = 0; i < n; ++i) {
        ha[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 3);
        hb[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * 2);
    }
    thrust::device_vector<float> a = ha, b = hb, out(n);
    kiln::thrust_backend::run_into(out, kiln::relu(x * y + 0.5_c * x - y) * 2_c + y, x = a, y = b);
    thrust::host_vector<float> r = out;
    for (std::size_t i = 0; i < n; i += 97) {
        CAPTURE(i);
        CHECK(r[i] == doctest::Approx(chain_ref(ha[i], hb[i])).epsilon(1e-5));
    }
}

TEST_CASE("run-time scalars, shared nodes, comparisons and transcendental ops in a kernel") {
    const auto x = kiln::input<"x", double>{};
    thrust::host_vector<double> hx(1000);
    for (std::size_t i = 0; i < hx.size(); ++i) hx[i] = 0.01 * static_cast<double>(i) - 5;
    thrust::device_vector<double> dx = hx;
    const double s = 0.25;
    auto e = kiln::where(x > 0_c, kiln::exp(-kiln::square(x)) * s, kiln::tanh(x) + kiln::sqrt(kiln::abs(x))) +
             kiln::square(x) * 0.5;
    thrust::device_vector<double> out = kiln::thrust_backend::run(e, x = dx);
    thrust::host_vector<double> r = out;
    for (std::size_t i = 0; i < hx.size(); i += 7) {
        const double v = hx[i];
        const double expect = (v > 0 ? std::exp(-v * v) * s : std::tanh(v) + std::sqrt(std::abs(v))) + v * v * 0.5;
        CHECK(r[i] == doctest::Approx(expect).epsilon(1e-12));
    }
}

TEST_CASE("inputs of another size than the output are rejected") {
    const auto x = "x"_in;
    thrust::device_vector<float> a(10), out(11);
    CHECK_THROWS_AS(kiln::thrust_backend::run_into(out, x * 2_c, x = a), kiln::shape_error);
}

#ifndef KILN_GPU_TEST_NO_MAIN  // (test/gpu_cuda.cpp builds this file with the device's tests and its own main)
int main(int argc, char** argv) {
#if defined(__CUDACC__)
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::puts("thrust_lowering (CUDA): no GPU on this machine; compiled and linked, not run (skipped)");
        return 77;
    }
#endif
    doctest::Context context(argc, argv);
    return context.run();
}
#endif
