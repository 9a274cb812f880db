// Checkpoints resume training bit for bit, in a fresh process (issue #16): the reference problem (Dense(64, relu),
// Dense(1), Adam, MSE, batches of 32) in eager, function and graph mode.
//
//   checkpoint_resume save DIR     trains epochs 1-3 in each mode and saves DIR/<mode>.ckpt
//   checkpoint_resume resume DIR   in a new process: a model started from other random values loads the checkpoint
//                                  and trains epochs 4-5; an uninterrupted 5-epoch run is made beside it; their
//                                  parameters and the losses of epochs 4-5 must be equal bit for bit.
//
// Epoch e's batch order comes from generator(100 + e), so a resumed run sees the batches an uninterrupted one sees.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <kiln/io.hpp>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"

namespace {

using step_fn = std::function<double(float*, float*, std::ptrdiff_t)>;

std::vector<double> train_epochs(const mlp::dataset& d, int first, int last, const step_fn& step) {
    std::vector<double> out;
    std::vector<float> xb, yb;
    for (int e = first; e < last; ++e) {
        kiln::generator order(100 + static_cast<std::uint64_t>(e));
        double total = 0;
        const auto batches = mlp::epoch_batches(order);
        for (const auto& idx : batches) {
            mlp::gather(d.x, mlp::features, idx, xb);
            mlp::gather(d.y, 1, idx, yb);
            total += step(xb.data(), yb.data(), static_cast<std::ptrdiff_t>(idx.size()));
        }
        out.push_back(total / static_cast<double>(batches.size()));
    }
    return out;
}

// A step that may not be copied (a kiln::function holds its cache) as a step_fn.
template <class F>
step_fn shared_step(F&& f) {
    auto p = std::make_shared<std::remove_cvref_t<F>>(std::forward<F>(f));
    return [p](float* x, float* y, std::ptrdiff_t n) { return (*p)(x, y, n); };
}

bool same_bits(const kiln::tensor& a, const kiln::tensor& b) {
    const kiln::tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.dtype() == cb.dtype() && ca.shape() == cb.shape() &&
           std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<std::size_t>(ca.numel()) * ca.itemsize()) == 0;
}

int failures = 0;
void expect(bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    if (!ok) ++failures;
}

void compare(const char* mode, const std::vector<kiln::tensor>& resumed, const std::vector<kiln::tensor>& straight,
             const std::vector<double>& resumed_loss, const std::vector<double>& straight_loss) {
    bool params = resumed.size() == straight.size();
    for (std::size_t i = 0; params && i < resumed.size(); ++i) params = same_bits(resumed[i], straight[i]);
    expect(params, std::string(mode) + ": parameters after 3 + 2 epochs equal those after 5, bit for bit");
    bool losses = resumed_loss.size() == 2 && straight_loss.size() == 5;
    for (std::size_t i = 0; losses && i < 2; ++i) losses = resumed_loss[i] == straight_loss[3 + i];
    if (losses)
        std::printf("  %s: epoch 4 and 5 losses %.9g %.9g\n", mode, resumed_loss[0], resumed_loss[1]);
    expect(losses, std::string(mode) + ": the losses of epochs 4 and 5 equal the uninterrupted run's, bit for bit");
}

std::vector<kiln::tensor> copies(const std::vector<kiln::variable*>& ps) {
    std::vector<kiln::tensor> out;
    for (const kiln::variable* p : ps) out.push_back(p->clone());
    return out;
}

std::vector<kiln::tensor> session_params(const kiln::session& s) {
    std::vector<kiln::tensor> out;
    for (const char* n : {"l1/w", "l1/b", "l2/w", "l2/b"}) out.push_back(s.parameter(n).clone());
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || (std::string(argv[1]) != "save" && std::string(argv[1]) != "resume")) {
        std::fprintf(stderr, "usage: checkpoint_resume save|resume DIR\n");
        return 2;
    }
    const bool save = std::string(argv[1]) == "save";
    const std::string dir = argv[2];
    if (save) std::filesystem::create_directories(dir);
    const mlp::dataset d = mlp::make_data();
    try {
        // ---- eager mode ----
        {
            kiln::generator g(save ? 1 : 999);
            mlp::eager_model m(g);
            kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
            if (save) {
                train_epochs(d, 0, 3, mlp::eager_step(m, opt));
                kiln::save_checkpoint(dir + "/eager.ckpt", m.parameters(), opt);
            } else {
                const std::vector<kiln::tensor> before = copies(m.parameters());
                kiln::load_checkpoint(dir + "/eager.ckpt", m.parameters(), opt);
                expect(!same_bits(before[0], m.l1.w), "eager: loading replaced the parameters");
                expect(opt.steps() == 3 * 32, "eager: Adam's step count is restored (" + std::to_string(opt.steps()) + ")");
                const std::vector<double> resumed = train_epochs(d, 3, 5, mlp::eager_step(m, opt));
                kiln::generator g1(1);
                mlp::eager_model m5(g1);
                kiln::optim::adam opt5(m5.parameters(), mlp::learning_rate);
                const std::vector<double> straight = train_epochs(d, 0, 5, mlp::eager_step(m5, opt5));
                compare("eager", copies(m.parameters()), copies(m5.parameters()), resumed, straight);
            }
        }
        // ---- function mode: the step traced once; loading writes into the storage the trace reads ----
        {
            kiln::generator g(save ? 1 : 999);
            mlp::eager_model m(g);
            kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
            step_fn step = shared_step(mlp::function_step(m, opt));
            if (save) {
                train_epochs(d, 0, 3, step);
                kiln::save_checkpoint(dir + "/function.ckpt", m.parameters(), opt);
            } else {
                // One call traces before the load: the loaded values must reach the existing trace.
                std::vector<float> xb(static_cast<std::size_t>(mlp::features), 0.0f), yb(1, 0.0f);
                step(xb.data(), yb.data(), 1);
                kiln::load_checkpoint(dir + "/function.ckpt", m.parameters(), opt);
                const std::vector<double> resumed = train_epochs(d, 3, 5, step);
                kiln::generator g1(1);
                mlp::eager_model m5(g1);
                kiln::optim::adam opt5(m5.parameters(), mlp::learning_rate);
                const std::vector<double> straight = train_epochs(d, 0, 5, shared_step(mlp::function_step(m5, opt5)));
                compare("function", copies(m.parameters()), copies(m5.parameters()), resumed, straight);
            }
        }
        // ---- graph mode: a session ----
        {
            kiln::generator g(save ? 1 : 999);
            const mlp::eager_model start(g);
            kiln::session s(5);
            mlp::start_from(s, start);
            if (save) {
                train_epochs(d, 0, 3, mlp::graph_step(s));
                kiln::save_checkpoint(dir + "/graph.ckpt", s);
            } else {
                kiln::load_checkpoint(dir + "/graph.ckpt", s);  // the slots wait for the step's first run
                const std::vector<double> resumed = train_epochs(d, 3, 5, mlp::graph_step(s));
                kiln::generator g1(1);
                const mlp::eager_model start5(g1);
                kiln::session s5(5);
                mlp::start_from(s5, start5);
                const std::vector<double> straight = train_epochs(d, 0, 5, mlp::graph_step(s5));
                compare("graph", session_params(s), session_params(s5), resumed, straight);
            }
        }
    } catch (const kiln::error& e) {
        std::fprintf(stderr, "checkpoint_resume: %s\n", e.what());
        return 1;
    }
    if (save) std::printf("checkpoint_resume: saved 3 epochs of each mode in %s\n", dir.c_str());
    return failures ? 1 : 0;
}
