// Eager mode in one page: tensors that compute at once, views, printing, gradients, and a tiny training loop.
#include <kiln/kiln.hpp>

#include <iostream>

using namespace kiln::literals;

int main() {
    // 1. Tensors: a run-time dtype and shape; operations run immediately.
    const kiln::tensor a = kiln::arange(0, 6, 1, kiln::float32).reshape({2, 3});
    const kiln::tensor b = kiln::from_values<float>({10, 20, 30}, {3});
    std::cout << "a =\n" << a << "\n";
    std::cout << "a * b + 1 (broadcast) =\n" << a * b + 1 << "\n";
    std::cout << "sum over rows: " << kiln::sum(a, {1}) << "\n";

    // 2. Views share storage: writing through a slice changes the tensor.
    kiln::tensor m = a.clone();
    kiln::tensor column = m.slice(1, 1, 2);
    column *= 100;
    std::cout << "after scaling column 1 through a view:\n" << m << "\n";

    // 3. The same generic code runs eagerly and as a compile-time graph.
    auto f = [](auto x, auto y) { return kiln::relu(x * y + 0.5_c * x - y) * 2_c + y; };
    const kiln::tensor x = kiln::linspace(-1, 1, 5), y = kiln::full({5}, 0.5);
    std::cout << "eager f(x, y): " << f(x, y) << "\n";
    std::cout << "graph f(x, y): " << kiln::from_xtensor(kiln::run(f("x"_in, "y"_in), "x"_in = x, "y"_in = y)) << "\n";

    // 4. Gradients from a tape.
    kiln::gradient_tape tape;
    tape.watch(x);
    const kiln::tensor loss = kiln::sum(kiln::square(x) * 3);
    std::cout << "d/dx sum(3x^2) = " << tape.gradient(loss, x) << "\n";

    // 5. Train y = 2x - 1 with a dense layer and Adam.
    kiln::generator g(0);
    const kiln::tensor xs = kiln::randn({128, 1}, kiln::float32, g), ys = xs * 2 - 1;
    kiln::nn::dense layer(1, 1, kiln::nn::identity, g);
    kiln::optim::adam opt(layer.parameters(), 0.1);
    for (int epoch = 0; epoch < 40; ++epoch)
        for (const auto& batch : kiln::data::batches(xs, ys, 32, true, g)) {
            kiln::gradient_tape t;
            const kiln::tensor l = kiln::nn::mse(layer(batch.x), batch.y);
            opt.step(t.gradient(l, std::vector<kiln::tensor>{layer.w, layer.b}));
        }
    std::cout << "learned w = " << layer.w.item<float>() << ", b = " << layer.b.item<float>() << " (want 2, -1)\n";
}
