#pragma once
// Helpers for eager-mode tests: a tensor's values as doubles, and float64 tensors from literals.
#include <kiln/kiln.hpp>

#include <vector>

namespace kiln_test {

inline std::vector<double> values(const kiln::tensor& t) {
    const kiln::tensor c = t.contiguous().to(kiln::float64);
    const double* p = c.data<const double>();
    return std::vector<double>(p, p + c.numel());
}

inline kiln::tensor f64(std::initializer_list<double> v, kiln::dims s) { return kiln::from_values<double>(v, s); }

}  // namespace kiln_test
