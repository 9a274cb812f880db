// Graph mode in one page: define an expression over named inputs, print it, draw it, run it.
#include <kiln/kiln.hpp>

#include <xtensor/xio.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

using namespace kiln::literals;

int main() {
    // 1. Define. Nothing is computed: `graph` is a type that describes the computation.
    auto f = [](auto x, auto y) { return kiln::relu(x * y + 0.5_c * x - y) * 2_c + y; };
    auto graph = f("x"_in, "y"_in);

    // Constants fold and exact identities vanish at compile time; the type shows it.
    static_assert(std::is_same_v<decltype(2_c * 3_c), decltype(6_c)>);
    static_assert(std::is_same_v<decltype("x"_in * 1_c + 0_c), decltype("x"_in)>);

    // 2. Print.
    std::cout << "graph:   " << kiln::to_string(graph) << '\n';

    // 3. Draw: a Graphviz file, and a PNG when `dot` is installed.
    std::ofstream("graph_basics.dot") << kiln::to_dot(graph);
    if (std::system("command -v dot >/dev/null 2>&1") == 0 &&
        std::system("dot -Tpng graph_basics.dot -o graph_basics.png") == 0)
        std::cout << "picture: " << (std::filesystem::current_path() / "graph_basics.png").string() << '\n';
    else
        std::cout << "picture: " << (std::filesystem::current_path() / "graph_basics.dot").string()
                  << " (install graphviz to render it as a PNG)\n";

    // 4. Run: one fused, vectorized pass over the data, whatever the container.
    const std::vector<float> x{1, 2, 3, 4, -1}, y{0.5f, -1, 2, 0, 3};
    const auto r = kiln::run(graph, "x"_in = x, "y"_in = y);
    std::cout << "result: ";
    for (float v : r) std::cout << ' ' << v;
    std::cout << '\n';

    // Broadcasting: a (2, 3) matrix against a row, into existing storage (no allocation).
    const xt::xarray<float> m = {{1, 2, 3}, {4, 5, 6}};
    const xt::xarray<float> row = {1, 0, -1};
    xt::xarray<float> out = xt::zeros<float>({2, 3});
    kiln::run_into(out, graph, "x"_in = m, "y"_in = row);
    std::cout << "broadcast:\n" << out << '\n';

    // Several results from one pass, and an error a user can read.
    auto [sum, prod] = kiln::run(kiln::fetch("x"_in + "y"_in, "x"_in * "y"_in), "x"_in = x, "y"_in = y);
    std::cout << "x + y: " << sum << "\nx * y: " << prod << '\n';
    try {
        (void)kiln::run(graph, "x"_in = x, "y"_in = std::vector<float>{1, 2});
    } catch (const kiln::shape_error& e) {
        std::cout << "error:   " << e.what() << '\n';
    }
}
