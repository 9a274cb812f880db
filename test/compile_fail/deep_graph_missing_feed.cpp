// expect: no_feed_for_input<(kiln::fixed_string<2>.?"y"|.*kiln::detail::chars<'y'>)
// errors: 1
// A residual chain 10 deep: its type's printed form doubles with each layer. The feed check runs first in
// kiln::run, so the one error prints that type once, not in every internal frame (7.5 MB of output at 12 layers
// before, 0.44 MB after).
#include <kiln/graph.hpp>
#include <vector>
using namespace kiln::literals;
template <int Depth, class H>
constexpr auto residual(const H& h) {
    if constexpr (Depth == 0) return h;
    else return residual<Depth - 1>(h + kiln::tanh(h));
}
int main() {
    std::vector<float> a(4);
    const auto x = "x"_in;
    auto r = kiln::run(residual<10>(x) * "y"_in, x = a);
    (void)r;
}
