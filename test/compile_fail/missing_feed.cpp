// expect: no_feed_for_input<(kiln::fixed_string<2>.?"y"|.*kiln::detail::chars<'y'>)
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4);
    (void)kiln::run("x"_in * "y"_in, "x"_in = a);
}
