// Training in graph mode: Dense(64, relu) -> Dense(1) on 1000 samples, Adam, batches of 32, 5 epochs.
// The model is a type: kiln::grad derives the backward pass at compile time and a kiln::session runs each step
// as one plan whose workspace is reused, so steps after the first allocate nothing.
#include "mlp_graph.hpp"

int main() {
    const mlp::dataset data = mlp::make_data();
    kiln::session s(/*seed=*/1);
    std::printf("model: %s\n", kiln::to_string(mlp::graph_model::prediction).c_str());
    const auto r = mlp::train_graph(data, s, 7, /*verbose=*/true);
    std::printf("graph mode: %.2f us per step, final loss %.6f\n", r.us_per_step, r.epoch_loss.back());
    std::printf("parameters:");
    for (const auto& name : s.parameter_names()) std::printf(" %s", name.c_str());
    std::printf("\n");
    return r.epoch_loss.back() < r.epoch_loss.front() ? 0 : 1;
}
