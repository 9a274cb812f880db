// expect: input_fed_twice<(kiln::fixed_string<2>.?"x"|.*kiln::detail::chars<'x'>)
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4);
    (void)kiln::run("x"_in * 2_c, "x"_in = a, "x"_in = a);
}
