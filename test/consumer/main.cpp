// A project that uses an installed kiln through find_package(kiln).
#include <kiln/kiln.hpp>

#include <iostream>
#include <vector>

int main() {
    using namespace kiln::literals;
    const std::vector<float> x{2, -1, 3}, y{3, 5, 4};
    const auto r = kiln::run(kiln::relu("x"_in * "y"_in), "x"_in = x, "y"_in = y);
    std::cout << "relu(x * y) = " << r(0) << ' ' << r(1) << ' ' << r(2) << '\n';
}
