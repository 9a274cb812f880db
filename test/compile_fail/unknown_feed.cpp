// expect: feed_names_no_input_of_the_expression<(kiln::fixed_string<2>.?"z"|.*kiln::detail::chars<'z'>)
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4);
    (void)kiln::run("x"_in * 2_c, "x"_in = a, "z"_in = a);
}
