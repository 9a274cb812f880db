#pragma once
// Losses (and the softmax they use), written once against the op vocabulary: each differentiates by the tape,
// traces, saves and runs on every device. Prediction and target must have one shape (a shape_error otherwise);
// every loss is the mean over all elements (PyTorch's reduction='mean').
#include <cmath>
#include <string>

#include "../eager/eager.hpp"

namespace kiln::nn {

namespace detail_losses {

inline void check_pair(const char* loss, const tensor& prediction, const tensor& target) {
    const std::string op = std::string("nn::") + loss;
    prediction.check_valid(op.c_str());
    target.check_valid(op.c_str());
    if (!(prediction.shape() == target.shape()))
        throw shape_error(std::string("kiln: shape_error in 'nn::") + loss + "': the prediction has shape " + to_string(prediction.shape()) +
                          " and the target " + to_string(target.shape()) +
                          "; they must be equal (broadcasting them would compare every prediction with every target): "
                          "reshape one");
}

inline void check_floating(const char* loss, const char* what, const tensor& t) {
    if (!detail::is_floating(t.dtype()))
        throw dtype_error(std::string("kiln: dtype_error in 'nn::") + loss + "': the " + what + " must be floating, got " +
                          std::string(name(t.dtype())));
}

}  // namespace detail_losses

// The functions below are templates on an unused int (kiln::nn::mse(p, y) needs no brackets): their kernels are
// compiled only in the translation units that call them (see detail::dependent_tensor).

// Softmax along an axis, shifted by the (gradient-free) maximum for stability.
template <int N = 0>
tensor softmax(const tensor& x_in, int axis = -1) {
    const detail::dependent_tensor<N>& x = x_in;
    const detail::dependent_tensor<N> z = x - stop_gradient(max<N>(x, {axis}, true));
    const detail::dependent_tensor<N> e = exp(z);
    return e / sum(e, {axis}, true);
}

template <int N = 0>
tensor log_softmax(const tensor& x_in, int axis = -1) {
    const detail::dependent_tensor<N>& x = x_in;
    const detail::dependent_tensor<N> z = x - stop_gradient(max<N>(x, {axis}, true));
    return z - log(sum(exp(z), {axis}, true));
}

// Mean squared error. The prediction and the target must have one shape: broadcasting them, as a (n, 1) prediction
// against (n,) targets would, silently averages every prediction against every target.
template <int N = 0>
tensor mse(const tensor& prediction, const tensor& target) {
    detail_losses::check_pair("mse", prediction, target);
    const detail::dependent_tensor<N>& p = prediction;
    return mean<N>(square(p - target));
}

// Mean absolute error (PyTorch's l1_loss), with mse's rule for shapes.
template <int N = 0>
tensor l1_loss(const tensor& prediction, const tensor& target) {
    detail_losses::check_pair("l1_loss", prediction, target);
    const detail::dependent_tensor<N>& p = prediction;
    return mean<N>(abs(p - target));
}

// PyTorch's huber_loss: the mean of 0.5 * d^2 where |d| < delta and delta * (|d| - 0.5 * delta) elsewhere, d =
// prediction - target (quadratic near 0, linear beyond delta; Keras's Huber). delta must be positive.
template <int N = 0>
tensor huber_loss(const tensor& prediction, const tensor& target, double delta = 1.0) {
    detail_losses::check_pair("huber_loss", prediction, target);
    if (!(delta > 0) || !std::isfinite(delta))
        throw value_error("kiln: value_error in 'nn::huber_loss': delta must be positive and finite, got " + detail::number_text(delta));
    const detail::dependent_tensor<N>& p = prediction;
    const detail::dependent_tensor<N> d = abs(p - target);
    return mean<N>(where(d < delta, square(d) * 0.5, (d - 0.5 * delta) * delta));
}

// PyTorch's smooth_l1_loss: huber_loss(prediction, target, beta) / beta, and the L1 loss for beta = 0.
template <int N = 0>
tensor smooth_l1_loss(const tensor& prediction, const tensor& target, double beta = 1.0) {
    detail_losses::check_pair("smooth_l1_loss", prediction, target);
    if (!(beta >= 0) || !std::isfinite(beta))
        throw value_error("kiln: value_error in 'nn::smooth_l1_loss': beta must be at least 0 and finite, got " + detail::number_text(beta));
    if (beta == 0) return l1_loss<N>(prediction, target);
    const detail::dependent_tensor<N>& p = prediction;
    const detail::dependent_tensor<N> d = abs(p - target);
    return mean<N>(where(d < beta, square(d) * (0.5 / beta), d - 0.5 * beta));
}

// Binary cross-entropy of probabilities p in [0, 1] against targets t of the same shape (PyTorch's
// binary_cross_entropy): -mean(t * log(p) + (1 - t) * log(1 - p)), each log at least -100 (as PyTorch clamps them,
// so that p = 0 or 1 gives a finite loss). Eagerly, a probability outside [0, 1] is a value_error, as in PyTorch.
template <int N = 0>
tensor binary_cross_entropy(const tensor& probabilities, const tensor& target) {
    detail_losses::check_pair("binary_cross_entropy", probabilities, target);
    detail_losses::check_floating("binary_cross_entropy", "probabilities", probabilities);
    const detail::dependent_tensor<N>& p = probabilities;
    if (!p.is_symbolic() && p.numel() > 0) {
        const double lo = kiln::min<N>(p).template item<double>(), hi = kiln::max<N>(p).template item<double>();
        if (!(lo >= 0 && hi <= 1))
            throw value_error("kiln: value_error in 'nn::binary_cross_entropy': probabilities must be in [0, 1], got " +
                              detail::number_text(lo >= 0 ? hi : lo) + " (use binary_cross_entropy_with_logits for logits)");
    }
    const detail::dependent_tensor<N>& t = target;
    const detail::dependent_tensor<N> log_p = maximum(log(p), -100.0), log_q = maximum(log1p(-p), -100.0);
    return -mean<N>(t * log_p + (1.0 - t) * log_q);
}

// Binary cross-entropy of logits x (PyTorch's binary_cross_entropy_with_logits, TensorFlow's
// sigmoid_cross_entropy_with_logits): the mean of softplus(x) - x * t, which neither overflows nor loses digits for
// large |x|. With pos_weight (broadcast against the last axis, one weight per class), the positive term is scaled:
// (1 - t) * x + (1 + (pos_weight - 1) * t) * softplus(-x).
template <int N = 0>
tensor binary_cross_entropy_with_logits(const tensor& logits, const tensor& target, const tensor& pos_weight = tensor()) {
    detail_losses::check_pair("binary_cross_entropy_with_logits", logits, target);
    detail_losses::check_floating("binary_cross_entropy_with_logits", "logits", logits);
    const detail::dependent_tensor<N>& x = logits;
    if (pos_weight.numel() == 0 && !pos_weight.is_symbolic()) return mean<N>(softplus(x) - x * target);
    const bool fits = pos_weight.dim() == 0 ||
                      (pos_weight.dim() == 1 && (pos_weight.shape()[0] == 1 || (logits.dim() > 0 && pos_weight.shape()[0] == logits.shape()[logits.dim() - 1])));
    if (!fits)
        throw shape_error("kiln: shape_error in 'nn::binary_cross_entropy_with_logits': pos_weight " + to_string(pos_weight.shape()) +
                          " must be one weight per class of the last axis of " + to_string(logits.shape()));
    const detail::dependent_tensor<N>& t = target;
    const detail::dependent_tensor<N>& w = pos_weight;
    return mean<N>((1.0 - t) * x + (1.0 + (w - 1.0) * t) * softplus(-x));
}

// Cross-entropy of logits (batch, classes) against int64/int32 class indices (batch,) or probabilities (batch,
// classes); averaged over the batch. Class indices pick their log-probabilities with take_along_axis (no one-hot
// product, so a -inf logit of another class does not make 0 * -inf), which also traces: eagerly the labels' range
// is checked here with this loss's name; in a traced function take_along_axis checks them at every call (a
// negative label is moved below -classes first, so that it cannot count from the end).
template <int N = 0>
tensor cross_entropy(const tensor& logits_in, const tensor& labels_in) {
    const detail::dependent_tensor<N>& logits = logits_in;
    const detail::dependent_tensor<N>& labels = labels_in;
    if (logits.dim() != 2)
        throw shape_error("kiln: shape_error in 'nn::cross_entropy': logits must be (batch, classes), got " + to_string(logits.shape()));
    if (detail::is_floating(labels.dtype())) {
        // Probabilities: one row per example, one column per class (a (batch,) or (batch, 1) tensor would broadcast
        // against every class and give a wrong loss without a word).
        if (!(labels.shape() == logits.shape()))
            throw shape_error("kiln: shape_error in 'nn::cross_entropy': probabilities " + to_string(labels.shape()) +
                              " do not match logits " + to_string(logits.shape()) +
                              " (floating labels are probabilities of the logits' shape; class indices are integers)");
        return -mean<N>(sum(labels * log_softmax<N>(logits, 1), {1}));
    }
    if (labels.dim() != 1 || labels.shape()[0] != logits.shape()[0])
        throw shape_error("kiln: shape_error in 'nn::cross_entropy': labels " + to_string(labels.shape()) + " do not match logits " +
                          to_string(logits.shape()));
    if (labels.dtype() == dtype::boolean)
        throw dtype_error("kiln: dtype_error in 'nn::cross_entropy': class labels must be integers, got bool");
    const std::ptrdiff_t k = logits.shape()[1];
    detail::dependent_tensor<N> index = labels;
    if (!labels.is_symbolic()) {
        const tensor lo = kiln::min<N>(labels), hi = kiln::max<N>(labels);
        if (labels.numel() > 0 && (lo.item<std::int64_t>() < 0 || hi.item<std::int64_t>() >= k))
            throw value_error("kiln: value_error in 'nn::cross_entropy': class index " +
                              std::to_string(lo.item<std::int64_t>() < 0 ? lo.item<std::int64_t>()
                                                                         : hi.item<std::int64_t>()) +
                              " is out of range for " + std::to_string(k) + " classes");
    } else {
        index = where(labels < 0, labels - static_cast<std::int64_t>(k), labels);
    }
    return -mean<N>(take_along_axis<N>(log_softmax<N>(logits, 1), index.unsqueeze(1), 1));
}

}  // namespace kiln::nn
