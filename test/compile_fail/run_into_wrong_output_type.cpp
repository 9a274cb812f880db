// expect: run_into: the output's element type differs
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4);
    std::vector<double> out(4);
    kiln::run_into(out, "x"_in * 2_c, "x"_in = a);
}
