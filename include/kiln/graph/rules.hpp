#pragma once
// Update rules of the optimizers, written once as small graphs over indexed leaves and shared by eager mode
// (kiln::optim::sgd, adam) and graph mode (kiln::optim::minimize): leaf 0 is the parameter, leaf 1 its gradient,
// leaves 2... its slots. `roots<T>()` gives the new parameter followed by the new slots, computed in one fused pass.
#include <cmath>
#include <limits>
#include <string_view>
#include <tuple>

#include "../expr/build.hpp"

namespace kiln::optim {

// p -= lr * g
struct sgd_rule {
    double lr = 0.01;
    static constexpr int slots = 0;
    static constexpr std::string_view kind = "sgd";
    void next_step(int) {}
    void resume(int) {}
    template <class T>
    auto roots() const {
        using kiln::detail::make_node;
        using kiln::detail::scalar;
        const kiln::detail::indexed_leaf<0, T> P;
        const kiln::detail::indexed_leaf<1, T> G;
        return std::make_tuple(make_node<ops::sub>(P, make_node<ops::mul>(scalar<T>{static_cast<T>(lr)}, G)));
    }
};

// v = momentum * v + g; p -= lr * v
struct momentum_rule {
    double lr = 0.01, momentum = 0.9;
    static constexpr int slots = 1;
    static constexpr std::string_view kind = "momentum";
    void next_step(int) {}
    void resume(int) {}
    template <class T>
    auto roots() const {
        using kiln::detail::make_node;
        using kiln::detail::scalar;
        const kiln::detail::indexed_leaf<0, T> P;
        const kiln::detail::indexed_leaf<1, T> G;
        const kiln::detail::indexed_leaf<2, T> V;
        const auto v = make_node<ops::add>(make_node<ops::mul>(scalar<T>{static_cast<T>(momentum)}, V), G);
        const auto p = make_node<ops::sub>(P, make_node<ops::mul>(scalar<T>{static_cast<T>(lr)}, v));
        return std::make_tuple(p, v);
    }
};

// Adam (Kingma and Ba) with the bias correction folded into the step size and epsilon; with weight_decay, AdamW's
// decoupled decay (Loshchilov and Hutter, as PyTorch's AdamW): the parameter is first multiplied by 1 - lr *
// weight_decay (exactly 1, which changes no bit, when weight_decay is 0).
struct adam_rule {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    static constexpr int slots = 2;
    double step = 0, eps_hat = 0, decay = 1;
    // beta1^t and beta2^t, carried from step to step (std::pow only when t does not follow the last step).
    double beta1_t = 1, beta2_t = 1;
    int last_t = 0;
    static constexpr std::string_view kind = "adam";
    // After t steps restored from a checkpoint: beta1^t and beta2^t as t steps of next_step compute them (the same
    // products, so that a resumed run's numbers are bit for bit those of an uninterrupted one).
    void resume(int t) {
        beta1_t = beta2_t = 1;
        for (int k = 0; k < t; ++k) {
            beta1_t = flushed(beta1_t * beta1);
            beta2_t = flushed(beta2_t * beta2);
        }
        last_t = t;
    }
    // beta^t below 2^-60 is 0: 1 - beta^t is exactly 1 from 2^-54 down, so the step is the same to the last bit,
    // and a run of millions of steps does not go on multiplying subnormal numbers (a microcode assist each, about
    // 75 ns a step here).
    static double flushed(double x) { return x < 0x1p-60 ? 0.0 : x; }
    // t counts from 1.
    void next_step(int t) {
        if (t == last_t + 1) {
            beta1_t = flushed(beta1_t * beta1);
            beta2_t = flushed(beta2_t * beta2);
        } else {
            beta1_t = flushed(std::pow(beta1, t));
            beta2_t = flushed(std::pow(beta2, t));
        }
        last_t = t;
        step = lr * std::sqrt(1 - beta2_t) / (1 - beta1_t);
        eps_hat = eps * std::sqrt(1 - beta2_t);
        decay = 1 - lr * weight_decay;
    }
    template <class T>
    auto roots() const {
        return roots_with<T>(kiln::detail::scalar<T>{static_cast<T>(step)}, kiln::detail::scalar<T>{static_cast<T>(eps_hat)});
    }
    // The same update with the step size and eps_hat read from operands 4 and 5 (one value each, broadcast over the
    // parameter) instead of numbers in the kernel: a CUDA graph records that kernel once while the step count moves
    // on, written there before each replay (kiln::optim::adam in a traced function, function/executor.hpp). The
    // decay stays a number in the kernel: a rule whose learning rate can change between steps (optim::adamw's) is
    // not recorded.
    template <class T>
    auto roots_read() const {
        return roots_with<T>(kiln::detail::indexed_leaf<4, T>{}, kiln::detail::indexed_leaf<5, T>{});
    }
    template <class T, class Step, class EpsHat>
    auto roots_with(const Step& step_size, const EpsHat& eps_hat_value) const {
        using kiln::detail::make_node;
        using kiln::detail::scalar;
        const kiln::detail::indexed_leaf<0, T> P;
        const kiln::detail::indexed_leaf<1, T> G;
        const kiln::detail::indexed_leaf<2, T> M;
        const kiln::detail::indexed_leaf<3, T> V;
        auto s = [](double x) { return scalar<T>{static_cast<T>(x)}; };
        // Moments smaller than the smallest normal number are flushed to zero. A parameter whose gradient is zero
        // (a dead relu unit's) has moments that decay through the subnormal range for thousands of steps (v by
        // 0.999 a step), and every operation on a subnormal is a microcode assist: a long training run slowed
        // down 1.5x. The update such moments would give is below 1e-30.
        const auto tiny = s(static_cast<double>(std::numeric_limits<T>::min()));
        auto flush = [&](const auto& x) {
            return make_node<ops::where>(make_node<ops::less>(make_node<ops::abs>(x), tiny), s(0), x);
        };
        const auto m = flush(make_node<ops::add>(make_node<ops::mul>(s(beta1), M), make_node<ops::mul>(s(1 - beta1), G)));
        const auto v = flush(make_node<ops::add>(make_node<ops::mul>(s(beta2), V),
                                                 make_node<ops::mul>(s(1 - beta2), make_node<ops::square>(G))));
        const auto p = make_node<ops::sub>(
            make_node<ops::mul>(P, s(decay)),
            make_node<ops::div>(make_node<ops::mul>(step_size, m), make_node<ops::add>(make_node<ops::sqrt>(v), eps_hat_value)));
        return std::make_tuple(p, m, v);
    }
};

}  // namespace kiln::optim
