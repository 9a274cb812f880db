#pragma once
// Helpers for graph-mode gradient tests: inputs x and w (float64, dynamic shape), and a check of kiln::grad against
// central differences.
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "check.hpp"

namespace kiln_test {

using X = kiln::input<"x", double>;
using W = kiln::input<"w", double>;
inline constexpr X x{};
inline constexpr W w{};

template <class C>
std::vector<double> flat(const C& c) {
    return std::vector<double>(c.begin(), c.end());
}

// The gradient of `loss` with respect to x (shape xs) at xv, by the compile-time rule and by central differences.
template <class Loss, class... Feeds>
void check_gradient(const Loss& loss, std::vector<double> xv, kiln::dims xs, const Feeds&... feeds) {
    auto g = kiln::run(kiln::grad(loss, x), x = kiln::view(xv.data(), xs), feeds...);
    std::vector<double> got = flat(g);
    if (got.size() == 1 && xv.size() > 1) got.assign(xv.size(), got[0]);  // a uniform gradient (a constant)
    std::vector<double> fd(xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) {
        const double h = 1e-6 * std::max(1.0, std::abs(xv[i])), keep = xv[i];
        xv[i] = keep + h;
        const double up = kiln::run(loss, x = kiln::view(xv.data(), xs), feeds...)();
        xv[i] = keep - h;
        const double down = kiln::run(loss, x = kiln::view(xv.data(), xs), feeds...)();
        xv[i] = keep;
        fd[i] = (up - down) / (2 * h);
    }
    check_all_close(got, fd, 1e-6, 1e-8);
}

}  // namespace kiln_test
