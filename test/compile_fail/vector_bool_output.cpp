// expect: std::vector<bool> stores bits, not bools
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4), b(4);
    std::vector<bool> out(4);
    kiln::run_into(out, "x"_in < "y"_in, "x"_in = a, "y"_in = b);
}
