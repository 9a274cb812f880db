// expect: feed_has_wrong_element_type<[^;]*, float, double, kiln::detail::chars<'x'> ?>
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<double> a(4);
    const auto x = "x"_in;
    const auto w = kiln::param<"w", float, kiln::shape<4>>{};
    kiln::session s;
    auto r = s.run(kiln::sum(x * w), x = a);
    (void)r;
}
