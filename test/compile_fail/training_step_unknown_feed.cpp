// expect: feed_names_no_input_of_the_expression<(kiln::fixed_string<2>.?"z"|.*kiln::detail::chars<'z'>)
// errors: 1
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
int main() {
    std::vector<float> a(4), b(4);
    const auto x = kiln::input<"x", float, kiln::shape<4>>{};
    const auto w = kiln::param<"w", float, kiln::shape<4>>{};
    kiln::session s;
    const auto step = kiln::optim::minimize(kiln::sum(kiln::square(x * w)), kiln::optim::sgd_rule{.lr = 0.1f});
    auto loss = s.run(step, x = a, "z"_in = b);
    (void)loss;
}
