// expect: kiln::layers::dense: the input's last dimension \(its features\) must be static
// errors: 1
#include <kiln/nn/graph_layers.hpp>
int main() {
    const auto x = kiln::input<"x">{};
    auto h = kiln::layers::dense<"l1", 8>(x);
    (void)h;
}
