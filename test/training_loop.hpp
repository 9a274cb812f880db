#pragma once
// A long eager training loop whose resident memory must stay flat (issue: reliability). Included by test/nn.cpp,
// which checks the resident size, and by test/reliability.cpp, whose AddressSanitizer build runs the same loop
// under LeakSanitizer (there the resident check is skipped: ASan's quarantine grows by design).
#include <kiln/kiln.hpp>

#include <cstddef>
#include <fstream>

#include <doctest/doctest.h>

namespace {

// Resident memory of this process in bytes (Linux: /proc/self/statm), 0 where unknown.
std::size_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0, resident = 0;
    if (!(statm >> pages >> resident)) return 0;
    return resident * 4096;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool under_asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool under_asan = true;
#else
constexpr bool under_asan = false;
#endif
#else
constexpr bool under_asan = false;
#endif

}  // namespace

TEST_CASE("a long eager training loop keeps resident memory flat and leaks nothing") {
    kiln::generator g(5);
    const kiln::tensor x = kiln::randn({256, 16}, kiln::float32, g);
    const kiln::tensor y = kiln::randn({256, 1}, kiln::float32, g);
    kiln::nn::dense l1(16, 32, kiln::nn::relu, g), l2(32, 1, kiln::nn::identity, g);
    kiln::optim::adam opt({&l1.w, &l1.b, &l2.w, &l2.b}, 1e-3);
    auto epoch = [&] {
        double total = 0;
        for (std::ptrdiff_t b = 0; b < 256; b += 32) {
            const kiln::tensor xb = x.slice(0, b, b + 32), yb = y.slice(0, b, b + 32);
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::mse(l2(l1(xb)), yb);
            opt.step(tape.gradient(loss, {l1.w, l1.b, l2.w, l2.b}));
            total += loss.item<double>();
        }
        return total;
    };
    const double first = epoch();
    for (int e = 0; e < 4; ++e) epoch();
    const std::size_t warm = resident_bytes();
    double last = 0;
    for (int e = 0; e < 60; ++e) last = epoch();
    const std::size_t after = resident_bytes();
    CHECK(last < first);
    MESSAGE("resident memory after 5 epochs: " << warm << " bytes; after 65 epochs: " << after << " bytes");
    // (Under AddressSanitizer the quarantine grows by design; LeakSanitizer checks the sanitizer builds instead.)
    if (!under_asan && warm > 0) CHECK(after <= warm + (std::size_t{1} << 20));
}
