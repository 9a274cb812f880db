// Training in eager mode: the same model, data, optimizer and batch order as 03_train_graph, written with
// kiln::nn::dense objects and a gradient tape.
#include "mlp_eager.hpp"

int main() {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(/*seed=*/1);
    mlp::eager_model m(init);
    const auto r = mlp::train_eager(data, m, 7, /*verbose=*/true);
    std::printf("eager mode: %.2f us per step, final loss %.6f\n", r.us_per_step, r.epoch_loss.back());
    return r.epoch_loss.back() < r.epoch_loss.front() ? 0 : 1;
}
