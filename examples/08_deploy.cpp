// Deployment in kiln: train the reference model with kiln::function (a gradient tape and Adam, traced once), save
// a checkpoint, save the inference function with its weights (kiln::save) and load it as a stranger would, from the
// file alone (kiln::load); export it to ONNX (kiln::export_onnx) and read that back too (kiln::load_onnx). Every
// loaded model must give the trained model's predictions; the program says so and fails if not.
#include <cmath>
#include <cstdio>

#include <kiln/io.hpp>

#include "mlp_eager.hpp"

namespace {

double largest_difference(const kiln::tensor& a, const kiln::tensor& b) {
    const kiln::tensor d = kiln::abs(a.to(kiln::float64) - b.to(kiln::float64));
    return kiln::max(d).item<double>();
}

}  // namespace

int main() {
    const mlp::dataset data = mlp::make_data();
    kiln::generator init(/*seed=*/1);
    mlp::eager_model m(init);
    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);

    // Train: the step in eager style, traced once (the batch dimension is dynamic): mlp::function_step, as in
    // examples/06_train_function.cpp.
    const auto r = mlp::train_loop(data, 7, "function", /*verbose=*/false, mlp::function_step(m, opt));
    std::printf("trained: 5 epochs, loss %.5f -> %.5f\n", r.epoch_loss.front(), r.epoch_loss.back());

    // A checkpoint: parameters, Adam's slots and step count (kiln::load_checkpoint resumes training from it).
    kiln::save_checkpoint("08_deploy.ckpt.safetensors", m.parameters(), opt);

    // The inference function, saved with its weights and a dynamic batch dimension.
    auto predict = kiln::function([&](const kiln::tensor& x) { return m(x); }, {.name = "predict"});
    const std::vector<kiln::spec> signature{kiln::spec(kiln::float32, {kiln::dyn, mlp::features})};
    kiln::save(predict, signature, "08_deploy.kfn");
    kiln::export_onnx(predict, signature, "08_deploy.onnx");

    // Loaded from the files alone: no model code is used below.
    const kiln::loaded_function from_kiln = kiln::load("08_deploy.kfn");
    const kiln::loaded_function from_onnx = kiln::load_onnx("08_deploy.onnx");
    std::printf("loaded '%s' taking %s: %zu nodes\n", from_kiln.name().c_str(), kiln::to_string(from_kiln.signature()[0]).c_str(),
                from_kiln.graph().size());
    // What each returns: (?, 1) float32 from the kiln file; the ONNX file names the batch dim0 in and out.
    std::printf("returning %s (kiln file) and %s (ONNX)\n", kiln::to_string(from_kiln.output_signature()).c_str(),
                kiln::to_string(from_onnx.output_signature()).c_str());

    kiln::generator g(99);
    bool ok = true;
    for (std::ptrdiff_t n : {1, 32, 100}) {
        const kiln::tensor x = kiln::randn({n, mlp::features}, kiln::float32, g);
        const kiln::tensor want = m(x);
        const double dk = largest_difference(from_kiln(x)[0], want), dx = largest_difference(from_onnx(x)[0], want);
        std::printf("batch %3td: kiln file differs by %.3g, ONNX file by %.3g\n", n, dk, dx);
        ok = ok && dk == 0.0 && dx <= 1e-5;
    }
    std::printf("%s\n", ok ? "deployed models match the trained model" : "MISMATCH");
    return ok ? 0 : 1;
}
