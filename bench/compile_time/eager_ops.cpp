// Twelve eager elementwise ops on tensors: what a translation unit that calls them compiles (bench/compile_time.sh
// builds it the default way and with KILN_SEPARATE_KERNELS, where the ops' kernels are compiled in another unit).
#include <kiln/kiln.hpp>

#include <iostream>

int main() {
    kiln::tensor a = kiln::ones({4}), b = kiln::full({4}, 2.0);
    kiln::tensor c = a + b;
    c = c * a;
    c = c - b;
    c = c / a;
    c = kiln::exp(c);
    c = kiln::log(c);
    c = kiln::tanh(c);
    c = kiln::relu(c);
    c = kiln::sqrt(c);
    c = kiln::abs(c);
    c = kiln::maximum(c, a);
    c = kiln::minimum(c, b);
    std::cout << c << "\n";
}
