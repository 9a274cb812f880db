#pragma once
// The problem the training examples share: 1000 samples of 10 standard-normal features and one target, a model
// Dense(64, relu) -> Dense(1), mean squared error, Adam (learning rate 1e-3), batches of 32, 5 epochs.
// Data and batch order come from kiln's seeded generator, so every program sees the same numbers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <kiln/eager/random.hpp>

namespace mlp {

inline constexpr std::ptrdiff_t samples = 1000, features = 10, hidden = 64, batch_size = 32;
inline constexpr int epochs = 5;
inline constexpr double learning_rate = 1e-3;

struct dataset {
    std::vector<float> x;  // samples x features, row-major
    std::vector<float> y;  // samples x 1
};

// y = x . w_true + 0.5 sin(x_0) + 0.1 noise, with w_true standard normal: mostly linear, a little curved.
inline dataset make_data(std::uint64_t seed = 2024) {
    kiln::generator g(seed);
    dataset d;
    d.x.resize(samples * features);
    d.y.resize(samples);
    std::vector<double> w(features);
    for (double& v : w) v = g.normal();
    for (auto& v : d.x) v = static_cast<float>(g.normal());
    for (std::ptrdiff_t i = 0; i < samples; ++i) {
        double t = 0;
        for (std::ptrdiff_t j = 0; j < features; ++j) t += w[j] * d.x[i * features + j];
        d.y[i] = static_cast<float>(t + 0.5 * std::sin(d.x[i * features]) + 0.1 * g.normal());
    }
    return d;
}

// The rows of each batch of one epoch, shuffled by g (Fisher-Yates); the last batch has 1000 % 32 = 8 rows.
inline std::vector<std::vector<std::ptrdiff_t>> epoch_batches(kiln::generator& g) {
    std::vector<std::ptrdiff_t> order(samples);
    std::iota(order.begin(), order.end(), 0);
    for (std::ptrdiff_t i = samples - 1; i > 0; --i)
        std::swap(order[i], order[g.next() % static_cast<std::uint64_t>(i + 1)]);
    std::vector<std::vector<std::ptrdiff_t>> out;
    for (std::ptrdiff_t s = 0; s < samples; s += batch_size)
        out.emplace_back(order.begin() + s, order.begin() + std::min(samples, s + batch_size));
    return out;
}

// Copies the rows `index` of a row-major (rows x cols) array into `out`.
inline void gather(const std::vector<float>& src, std::ptrdiff_t cols, const std::vector<std::ptrdiff_t>& index,
                   std::vector<float>& out) {
    out.resize(index.size() * cols);
    for (std::size_t i = 0; i < index.size(); ++i)
        std::copy_n(src.begin() + index[i] * cols, cols, out.begin() + static_cast<std::ptrdiff_t>(i) * cols);
}

struct run_result {
    std::vector<double> epoch_loss;  // mean batch loss of each epoch
    double us_per_step = 0;          // mean time of one training step (gathering the batch excluded)
};

// The training loop both modes share: `step(x, y, rows)` trains on one batch and returns its loss.
template <class Step>
run_result train_loop(const dataset& d, std::uint64_t order_seed, const char* label, bool verbose, Step&& step) {
    run_result r;
    kiln::generator order(order_seed);
    std::vector<float> xb, yb;
    double seconds = 0;
    long steps = 0;
    for (int e = 0; e < epochs; ++e) {
        double total = 0;
        const auto batches = epoch_batches(order);
        for (const auto& idx : batches) {
            gather(d.x, features, idx, xb);
            gather(d.y, 1, idx, yb);
            const auto t0 = std::chrono::steady_clock::now();
            total += step(xb.data(), yb.data(), static_cast<std::ptrdiff_t>(idx.size()));
            seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++steps;
        }
        r.epoch_loss.push_back(total / static_cast<double>(batches.size()));
        if (verbose) std::printf("%s  epoch %d  loss %.6f\n", label, e + 1, r.epoch_loss.back());
    }
    r.us_per_step = seconds / static_cast<double>(steps) * 1e6;
    return r;
}

// Two training loops over the same batches, their steps interleaved (a, b, then b, a on the next batch), so that
// both see the same state of a busy machine and the ratio of their times means something.
template <class StepA, class StepB>
std::pair<run_result, run_result> train_interleaved(const dataset& d, std::uint64_t order_seed, StepA&& step_a,
                                                    StepB&& step_b) {
    run_result ra, rb;
    kiln::generator order(order_seed);
    std::vector<float> xb, yb;
    double sa = 0, sb = 0;
    long steps = 0;
    auto timed = [&](auto& step, double& seconds) {
        const auto t0 = std::chrono::steady_clock::now();
        const double l = step(xb.data(), yb.data(), static_cast<std::ptrdiff_t>(yb.size()));
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return l;
    };
    for (int e = 0; e < epochs; ++e) {
        double ta = 0, tb = 0;
        const auto batches = epoch_batches(order);
        for (const auto& idx : batches) {
            gather(d.x, features, idx, xb);
            gather(d.y, 1, idx, yb);
            if (steps % 2 == 0) {
                ta += timed(step_a, sa);
                tb += timed(step_b, sb);
            } else {
                tb += timed(step_b, sb);
                ta += timed(step_a, sa);
            }
            ++steps;
        }
        ra.epoch_loss.push_back(ta / static_cast<double>(batches.size()));
        rb.epoch_loss.push_back(tb / static_cast<double>(batches.size()));
    }
    ra.us_per_step = sa / static_cast<double>(steps) * 1e6;
    rb.us_per_step = sb / static_cast<double>(steps) * 1e6;
    return {ra, rb};
}

}  // namespace mlp
