// expect: kiln::grad: an op's gradient rule holds a run-time number
// errors: 1
#include <kiln/graph.hpp>
// A user's op whose gradient rule multiplies by a C++ double: graph mode's gradients are types, so the 3.0 would
// be lost (the gradient would read 0); kiln::grad refuses it with one sentence.
struct cube {
    static constexpr std::string_view name = "cube";
    static constexpr int arity = 1;
    template <class A>
    static constexpr auto apply(const A& a) { return a * a * a; }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y&, const G& g) { return kiln::detail::grads(g * 3.0 * kiln::square(a)); }
};
int main() {
    const kiln::input<"x", double> x{};
    auto g = kiln::grad(kiln::sum(kiln::detail::make<cube>(x)), x);
    (void)g;
}
