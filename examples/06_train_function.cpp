// TensorFlow's hybrid in kiln: the training step written once in eager style (a gradient tape, the layers, Adam)
// and wrapped in kiln::function, which traces it on its first call into a run-time graph and replays that graph on
// every later call. The batch dimension is declared dynamic, so the last partial batch (1000 = 31 x 32 + 8) replays
// the same trace. Its losses are eager mode's, from the same start and batch order.
#include "mlp_eager.hpp"

int main() {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(/*seed=*/1);
    mlp::eager_model m(init);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);

    auto train_step = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) {
        kiln::gradient_tape tape;
        kiln::tensor loss = kiln::nn::mse(m(x), y);
        opt.apply_gradients(tape.gradient(loss, m.parameters()), m.parameters());
        return loss;
    }, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features}), kiln::spec(kiln::float32, {kiln::dyn, 1})},
       {.name = "train_step"});

    const auto r = mlp::train_loop(data, 7, "function", /*verbose=*/true, [&](float* xb, float* yb, std::ptrdiff_t n) {
        const kiln::tensor x = kiln::wrap(xb, {n, mlp::features}), y = kiln::wrap(yb, {n, 1});
        return static_cast<double>(train_step(x, y).item<float>());
    });
    std::printf("function mode: %.2f us per step, final loss %.6f, %zu trace (batches of 32 and the last of 8)\n",
                r.us_per_step, r.epoch_loss.back(), train_step.trace_count());
    const kiln::tensor x = kiln::zeros({mlp::batch_size, mlp::features}), y = kiln::zeros({mlp::batch_size, 1});
    const kiln::function_graph& g = train_step.graph(x, y);
    std::printf("the traced step: %zu nodes (%zu before the passes), %zu matmuls, %zu effect\n", g.size(),
                train_step.traced_graph(x, y).size(), g.count("matmul"), g.count(kiln::node_kind::effect));
    return r.epoch_loss.back() < r.epoch_loss.front() ? 0 : 1;
}
