#pragma once
// The problem the training examples share: 1000 samples of 10 standard-normal features and one target, a model
// Dense(64, relu) -> Dense(1), mean squared error, Adam (learning rate 1e-3), batches of 32, 5 epochs.
// Data and batch order come from kiln's seeded generator, so every program sees the same numbers.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
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

}  // namespace mlp
