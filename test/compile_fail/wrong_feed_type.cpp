// expect: feed_has_wrong_element_type<[^;]*, float, double, kiln::detail::chars<'x'> ?>
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<double> a(4);
    (void)kiln::run("x"_in * 2_c, "x"_in = a);
}
