#pragma once
// The problem the training examples share: 1000 samples of 10 standard-normal features and one target, a model
// Dense(64, relu) -> Dense(1), mean squared error, Adam (learning rate 1e-3), batches of 32, 5 epochs.
// Data and batch order come from kiln's seeded generator, so every program sees the same numbers.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <functional>
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
    double first_call_us = 0;        // train_interleaved: the first step alone (a function's trace), not in us_per_step
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

// Training loops over the same batches with their steps interleaved (the first one first on one batch, the second
// one first on the next, and so on), so that all see the same state of a busy machine and the ratios of their
// times mean something. The results come in the order of the steps. The first step of each is timed on its own
// (function mode traces and optimizes its step there) and us_per_step is the mean of the others.
template <class... Steps>
std::array<run_result, sizeof...(Steps)> train_interleaved(const dataset& d, std::uint64_t order_seed,
                                                           Steps&&... steps_in) {
    constexpr std::size_t n = sizeof...(Steps);
    std::array<run_result, n> results;
    std::array<double, n> seconds{}, first{}, epoch_sum{};
    std::array<std::function<double(float*, float*, std::ptrdiff_t)>, n> steps{std::ref(steps_in)...};
    kiln::generator order(order_seed);
    std::vector<float> xb, yb;
    long count = 0;
    for (int e = 0; e < epochs; ++e) {
        epoch_sum.fill(0);
        const auto batches = epoch_batches(order);
        for (const auto& idx : batches) {
            gather(d.x, features, idx, xb);
            gather(d.y, 1, idx, yb);
            for (std::size_t j = 0; j < n; ++j) {
                const std::size_t k = (j + static_cast<std::size_t>(count)) % n;
                const auto t0 = std::chrono::steady_clock::now();
                epoch_sum[k] += steps[k](xb.data(), yb.data(), static_cast<std::ptrdiff_t>(yb.size()));
                const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                (count == 0 ? first[k] : seconds[k]) += dt;
            }
            ++count;
        }
        for (std::size_t k = 0; k < n; ++k)
            results[k].epoch_loss.push_back(epoch_sum[k] / static_cast<double>(batches.size()));
    }
    for (std::size_t k = 0; k < n; ++k) {
        results[k].us_per_step = seconds[k] / static_cast<double>(std::max(count - 1, 1L)) * 1e6;
        results[k].first_call_us = first[k] * 1e6;
    }
    return results;
}

}  // namespace mlp
