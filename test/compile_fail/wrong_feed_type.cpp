// expect: feed_has_wrong_element_type<kiln::fixed_string<2>.?"x".?, float, double>
// errors: 1
#include <kiln/kiln.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<double> a(4);
    (void)kiln::run("x"_in * 2_c, "x"_in = a);
}
