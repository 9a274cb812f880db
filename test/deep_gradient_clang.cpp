// A graph-mode gradient of a residual chain 12 layers deep (h = h + tanh(h)), built by clang in the test command
// under a time limit. Written out, its type is a tree of 2^12 leaves, and clang 14 took about 150 s to compile it
// (time exponential in the depth) before nodes became local classes (docs/internals.md, section 2); it takes a few
// seconds now. Checked against the chain rule computed by hand.
#include <kiln/graph.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

#define KILN_STEP(a, b) const auto b = a + kiln::tanh(a);

int main() {
    const auto x = kiln::input<"x", double>{};
    KILN_STEP(x, h1) KILN_STEP(h1, h2) KILN_STEP(h2, h3) KILN_STEP(h3, h4) KILN_STEP(h4, h5) KILN_STEP(h5, h6)
    KILN_STEP(h6, h7) KILN_STEP(h7, h8) KILN_STEP(h8, h9) KILN_STEP(h9, h10) KILN_STEP(h10, h11) KILN_STEP(h11, h12)
    const std::vector<double> v{-1.5, -0.25, 0.0, 0.3, 2.0};
    const auto value = kiln::run(h12, x = v);
    const auto grad = kiln::run(kiln::grad(kiln::sum(h12), x), x = v);
    int failures = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        double h = v[i], d = 1.0;  // h_k and dh_k/dx
        for (int k = 0; k < 12; ++k) {
            const double t = std::tanh(h);
            d *= 2.0 - t * t;
            h += t;
        }
        const bool ok = std::abs(value(i) - h) <= 1e-12 * std::abs(h) + 1e-300 &&
                        std::abs(grad(i) - d) <= 1e-12 * std::abs(d);
        if (!ok) {
            std::printf("x = %g: h12 %.17g (expected %.17g), dh12/dx %.17g (expected %.17g)\n", v[i], value(i), h,
                        grad(i), d);
            ++failures;
        }
    }
    std::printf("%s: 5 values and gradients of a 12-deep residual chain\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
