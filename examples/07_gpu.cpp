// Eager tensors and graph mode on the GPU: move data to kiln::cuda, compute there (elementwise ops, reductions, matmul,
// the gradient tape), train the same model as a graph in a kiln::session on the device, read results back. Built
// three ways:
//   - by nvcc with the kiln::cuda target (KILN_GPU=1): runs on the GPU where one exists;
//   - by the host compiler with kiln::gpu_emulated: the same device code on Thrust's OpenMP system (host memory);
//   - by the host compiler alone: kiln::cuda is not compiled in, so the program says so and runs on the CPU.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <iostream>
#include <vector>

int main() {
    const kiln::device dev = kiln::cuda_available() ? kiln::cuda : kiln::cpu;
    if (!kiln::gpu_compiled_in)
        std::printf("kiln's GPU device is not compiled into this program (build with the kiln::cuda target); running on the CPU\n");
    else if (!kiln::cuda_available())
        std::printf("no CUDA device on this machine; running on the CPU\n");
    else
        std::printf("running on %s%s\n", kiln::to_string(dev).c_str(), kiln::cuda_emulated() ? " (emulated on Thrust's OpenMP system)" : "");

    // Data made on the host and moved, or made on the device directly.
    kiln::manual_seed(1);
    const kiln::tensor x = kiln::randn({256, 16}).to(dev);
    const kiln::tensor y = kiln::sum(x * x, {1}, true);  // a target: the squared norm of each row
    kiln::variable w(kiln::randn({16, 1}, kiln::float32, dev) * 0.1f);
    kiln::variable b(kiln::zeros({1}, kiln::float32, dev));

    // Linear regression on the features x^2, trained by gradient descent on the device: every op below runs where
    // its operands live, and only the printed loss is copied to the host.
    const kiln::tensor features = x * x;
    float loss_value = 0;
    for (int step = 0; step < 400; ++step) {
        kiln::tensor loss;
        std::vector<kiln::tensor> g;
        {
            kiln::gradient_tape tape;
            const kiln::tensor pred = kiln::matmul(features, w) + b;
            loss = kiln::mean((pred - y) * (pred - y));
            g = tape.gradient(loss, {w, b});
        }
        w -= g[0] * 0.05f;
        b -= g[1] * 0.05f;
        if (step % 100 == 0 || step == 399) {
            loss_value = loss.item<float>();  // waits for the device and copies one number
            std::printf("step %3d  loss %.6f\n", step, loss_value);
        }
    }
    std::cout << "w (every weight should be near 1): " << kiln::to_string(kiln::mean(w)) << "\n";
    std::printf("final loss %.6f on %s\n", loss_value, kiln::to_string(w.device()).c_str());

    // The same model in graph mode: a session on the device keeps its parameters, slots and workspace there; each
    // step runs as one plan there and copies back only the loss.
    float graph_loss = 0;
    {
        constexpr kiln::input<"features", float, kiln::shape<kiln::dyn, 16>> f{};
        constexpr kiln::input<"target", float, kiln::shape<kiln::dyn, 1>> t{};
        constexpr kiln::param<"w", float, kiln::shape<16, 1>, kiln::init::zeros> wp{};
        constexpr kiln::param<"b", float, kiln::shape<1>, kiln::init::zeros> bp{};
        constexpr auto loss = kiln::mean(kiln::square(kiln::matmul(f, wp) + bp - t));
        constexpr auto step = kiln::optim::minimize(loss, kiln::optim::sgd_rule{.lr = 0.05f});
        kiln::session s(/*seed=*/1, dev);
        for (int i = 0; i < 400; ++i) graph_loss = s.run(step, f = features, t = y);
        std::printf("graph mode: final loss %.6f on %s\n", graph_loss, kiln::to_string(s.parameter("w").device()).c_str());
    }

    // Operands on two devices are refused with both named.
    if (dev != kiln::cpu) {
        try {
            (void)(x + kiln::ones({256, 16}));
        } catch (const kiln::device_error& e) {
            std::printf("%s\n", e.what());
        }
    }
    return loss_value < 1e-3f && graph_loss < 1e-3f ? 0 : 1;
}
