// Eager dispatch overhead, without Google Benchmark so that two builds of kiln (two include paths) can be
// alternated: g++ -std=c++20 -O2 -DNDEBUG -I<kiln>/include bench/dispatch_overhead.cpp, then run the binaries in turn.
#include <kiln/kiln.hpp>
#include <chrono>
#include <cstdio>
// a + b on 4 float32 elements, without and with a recording tape; and a mean of 64 elements (a template now).
int main() {
    const kiln::tensor a = kiln::ones({4}), b = kiln::ones({4}), m = kiln::ones({64});
    auto time = [](auto&& f) {
        double best = 1e9;
        for (int rep = 0; rep < 15; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < 100000; ++i) f();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 100000 * 1e9);
        }
        return best;
    };
    const double plain = time([&] { kiln::tensor c = a + b; asm volatile("" : : "r"(c.raw_data()) : "memory"); });
    kiln::variable w(a);
    double taped;
    {
        taped = time([&] {
            kiln::gradient_tape tape;
            kiln::tensor c = w + b;
            asm volatile("" : : "r"(c.raw_data()) : "memory");
        });
    }
    const double mean = time([&] { kiln::tensor c = kiln::mean(m); asm volatile("" : : "r"(c.raw_data()) : "memory"); });
    std::printf("add %.1f ns, add under a tape (tape made per op) %.1f ns, mean %.1f ns\n", plain, taped, mean);
}
