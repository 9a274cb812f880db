#pragma once
// Value checks shared by the tests: NaN equals NaN, infinities must match exactly, finite values within rtol.
#include <cmath>
#include <string>
#include <tuple>

#include <doctest/doctest.h>

namespace kiln_test {

inline bool close(double actual, double expected, double rtol, double atol = 0.0) {
    if (std::isnan(expected)) return std::isnan(actual);
    if (std::isinf(expected)) return actual == expected;
    return std::abs(actual - expected) <= atol + rtol * std::abs(expected);
}

// One CHECK per comparison (not per element), naming the first mismatch: tests stay fast at large sizes.
template <class A, class E>
void check_all_close(const A& actual, const E& expected, double rtol, double atol = 0.0) {
    REQUIRE(actual.size() == expected.size());
    std::size_t i = 0, bad = 0, first = 0;
    double first_a = 0, first_e = 0;
    for (auto it = expected.begin(); it != expected.end(); ++it, ++i) {
        const double a = static_cast<double>(*(actual.begin() + static_cast<std::ptrdiff_t>(i)));
        const double e = static_cast<double>(*it);
        if (!close(a, e, rtol, atol)) {
            if (bad++ == 0) first = i, first_a = a, first_e = e;
        }
    }
    INFO(bad << " of " << i << " elements differ; the first is element " << first << ": got " << first_a
              << ", expected " << first_e);
    CHECK(bad == 0);
}

// An op's gradient rule on numbers (Op::gradient with doubles) against a central difference of its own kernel.
template <class Op>
void check_unary_rule(double a, double h = 1e-6) {
    const double y = Op::apply(a);
    const double g = std::get<0>(Op::gradient(a, y, 1.0));
    const double fd = (Op::apply(a + h) - Op::apply(a - h)) / (2 * h);
    INFO(Op::name << " at " << a << ": rule " << g << ", differences " << fd);
    CHECK(close(g, fd, 1e-6, 1e-9));
}

}  // namespace kiln_test
