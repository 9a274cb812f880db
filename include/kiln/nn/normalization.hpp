#pragma once
// Layer, RMS, group and batch normalization. Layer normalization, as PyTorch's torch.nn.functional.layer_norm and nn.LayerNorm and ONNX's LayerNormalization
// compute it: over the trailing axes that `normalized_shape` names, y = (x - mean) / sqrt(var + eps) * w + b with
// the biased variance (divided by the count). It is written with the vocabulary's ops (mean, sub, mul, sqrt, div),
// so the tape differentiates it, kiln::function traces and fuses it, every device runs it, and the tracer keeps a
// note of it (function/graph.hpp's composites) from which the ONNX export writes one LayerNormalization.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../eager/eager.hpp"

namespace kiln::detail {

// Whether layer_norm was given a weight or bias: an empty tensor (kiln::tensor(), as conv2d's bias) is none.
inline bool given(const tensor& t) { return t.valid() && t.numel() != 0; }

// The normalizations' checks: x floating; for layer_norm and rms_norm x ends in `normalized` and w and b have that
// shape; for group_norm (channels > 0) w and b are (channels,); both of x's dtype; eps finite and not negative.
inline void check_normalization(const char* op, const tensor& x, const dims& normalized, const tensor& w, const tensor& b, double eps,
                                std::ptrdiff_t channels = 0) {
    x.check_valid(op);
    if (!is_floating(x.dtype()))
        throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the input must be floating, got " + std::string(name(x.dtype())));
    const dims want = channels > 0 ? dims{channels} : normalized;
    if (channels == 0) {
        const int k = normalized.rank, r = x.dim();
        bool ends = k >= 1 && k <= r;
        for (int i = 0; ends && i < k; ++i) ends = x.shape()[r - k + i] == normalized[i];
        if (!ends)
            throw shape_error(std::string("kiln: shape_error in '") + op + "': the input " + to_string(x.shape()) +
                              " does not end in the normalized shape " + to_string(normalized) + (k == 0 ? " (name at least one axis)" : ""));
    }
    for (const tensor* t : {&w, &b}) {
        if (!given(*t)) continue;
        const char* what = t == &w ? "weight" : "bias";
        if (!(t->shape() == want))
            throw shape_error(std::string("kiln: shape_error in '") + op + "': the " + what + " has shape " + to_string(t->shape()) +
                              (channels > 0 ? ", but it must be " : ", but the normalized shape is ") + to_string(want));
        if (t->dtype() != x.dtype())
            throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the " + what + " is " + std::string(name(t->dtype())) +
                              ", but the input is " + std::string(name(x.dtype())));
    }
    if (!(eps >= 0) || !std::isfinite(eps))
        throw value_error(std::string("kiln: value_error in '") + op + "': eps must be finite and not negative, got " + number_text(eps));
}

// x standardized over `axes` (each slice less its mean, over the square root of its biased variance plus eps): the
// body of layer_norm and group_norm.
template <int N>
dependent_tensor<N> standardize(const dependent_tensor<N>& x, const std::vector<int>& axes, double eps) {
    const dependent_tensor<N> centred = x - kiln::mean<N>(x, axes, true);
    const dependent_tensor<N> var = kiln::mean<N>(centred * centred, axes, true);
    return centred / kiln::sqrt(var + eps);
}

}  // namespace kiln::detail

namespace kiln::nn {

// Layer normalization of x over its trailing axes, which must be `normalized_shape`; w and b (of that shape) scale
// and shift the result where given (an empty kiln::tensor() leaves them out). kiln::nn::layer_norm(x, {64}, w, b).
template <int N = 0>
tensor layer_norm(const tensor& x_in, const dims& normalized_shape, const tensor& w = tensor(), const tensor& b = tensor(),
                  double eps = 1e-5) {
    detail::check_normalization("nn::layer_norm", x_in, normalized_shape, w, b, eps);
    const detail::dependent_tensor<N>& x = x_in;
    std::vector<int> axes;
    for (int i = x.dim() - normalized_shape.rank; i < x.dim(); ++i) axes.push_back(i);
    detail::dependent_tensor<N> y = detail::standardize<N>(x, axes, eps);
    if (detail::given(w)) y = y * static_cast<const detail::dependent_tensor<N>&>(w);
    if (detail::given(b)) y = y + static_cast<const detail::dependent_tensor<N>&>(b);
    const tensor out = y;
    const bool scale = detail::given(w), shift = detail::given(b);
    const tensor parts[3] = {x_in, scale ? w : b, b};
    const std::size_t count = 1 + (scale ? 1 : 0) + (shift ? 1 : 0);
    detail::note_composite("layer_norm", [&] {
        return "axis=" + std::to_string(x_in.dim() - normalized_shape.rank) + " epsilon=" + detail::number_text(eps) +
               " scale=" + (scale ? "true" : "false") + " bias=" + (shift ? "true" : "false");
    }, std::span<const tensor>(parts, count), out);
    return out;
}

}  // namespace kiln::nn

namespace kiln::detail {

// batch_norm's checks: x floating and (N, C, ...); the statistics, and w and b where given, (C,) of x's dtype.
template <int N = 0>
void check_batch_norm(const tensor& x, const tensor& mean, const tensor& var, const tensor& w, const tensor& b,
                      double eps, double momentum, const char* op) {
    x.check_valid(op);
    if (!is_floating(x.dtype()))
        throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the input must be floating, got " + std::string(name(x.dtype())));
    if (x.dim() < 2)
        throw shape_error(std::string("kiln: shape_error in '") + op + "': the input must be (batch, channels, ...), got " + to_string(x.shape()));
    const std::ptrdiff_t c = x.shape()[1];
    auto check_channels = [&](const tensor& t, const char* what, bool optional) {
        if (optional && !given(t)) return;
        t.check_valid(op);
        if (!(t.shape() == dims{c}))
            throw shape_error(std::string("kiln: shape_error in '") + op + "': the " + what + " has shape " + to_string(t.shape()) +
                              ", but the input " + to_string(x.shape()) + " has " + std::to_string(c) + " channels");
        if (t.dtype() != x.dtype())
            throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the " + what + " is " + std::string(name(t.dtype())) +
                              ", but the input is " + std::string(name(x.dtype())));
    };
    const bool running = std::string_view(op) == "nn::batch_norm";
    check_channels(mean, running ? "running mean" : "mean", false);
    check_channels(var, running ? "running variance" : "variance", false);
    check_channels(w, "weight", true);
    check_channels(b, "bias", true);
    if (!(eps >= 0) || !std::isfinite(eps))
        throw value_error(std::string("kiln: value_error in '") + op + "': eps must be finite and not negative, got " + number_text(eps));
    if (!(momentum >= 0 && momentum <= 1))
        throw value_error(std::string("kiln: value_error in '") + op + "': momentum must lie in [0, 1], got " + number_text(momentum));
}

// (1, C, 1, ...) for an (N, C, ...) input: a per-channel tensor broadcast over the rest.
inline dims batch_norm_along(const dims& x) {
    dims along = x;
    for (int i = 0; i < along.rank; ++i) along[i] = i == 1 ? x[1] : 1;
    return along;
}

template <int N = 0>
tensor batch_norm_affine(dependent_tensor<N> y, const tensor& w, const tensor& b) {
    const dims along = batch_norm_along(y.shape());
    if (given(w)) y = y * static_cast<const dependent_tensor<N>&>(w).reshape(along);
    if (given(b)) y = y + static_cast<const dependent_tensor<N>&>(b).reshape(along);
    return y;
}

// Normalization by the given statistics, noted for the export (BatchNormalization).
template <int N = 0>
tensor batch_norm_by(const tensor& x_in, const tensor& mean, const tensor& var, const tensor& w, const tensor& b, double eps) {
    const dependent_tensor<N>& x = x_in;
    const dims along = batch_norm_along(x.shape());
    const dependent_tensor<N>& rm = mean;
    const dependent_tensor<N>& rv = var;
    const tensor out = batch_norm_affine<N>((x - rm.reshape(along)) / kiln::sqrt(rv.reshape(along) + eps), w, b);
    const bool scale = given(w), shift = given(b);
    const tensor parts[5] = {x_in, mean, var, scale ? w : b, b};
    const std::size_t count = 3 + (scale ? 1 : 0) + (shift ? 1 : 0);
    note_composite("batch_norm", [&] {
        return "epsilon=" + number_text(eps) + " scale=" + (scale ? "true" : "false") + " bias=" + (shift ? "true" : "false");
    }, std::span<const tensor>(parts, count), out);
    return out;
}

}  // namespace kiln::detail

namespace kiln::nn {

// Batch normalization (PyTorch's torch.nn.functional.batch_norm, BatchNorm1d/2d/3d): x is (N, C, ...) and each
// channel is normalized over every other axis. Training: by the batch's mean and biased variance, and the running
// statistics move towards them (running = (1 - momentum) * running + momentum * batch, the variance unbiased), as
// assignments that a kiln::function replays at every call. Evaluation: by the running statistics, which are read
// at every call (they are variables). w and b, of shape (C,), scale and shift where given (an empty tensor() leaves
// either out). In evaluation the tracer notes it (the ONNX export's BatchNormalization).
template <int N = 0>
tensor batch_norm(const tensor& x_in, variable& running_mean, variable& running_var, const tensor& w = tensor(),
                  const tensor& b = tensor(), bool training = false, double momentum = 0.1, double eps = 1e-5) {
    detail::check_batch_norm<N>(x_in, running_mean, running_var, w, b, eps, momentum, "nn::batch_norm");
    const detail::dependent_tensor<N>& x = x_in;
    const std::ptrdiff_t c = x.shape()[1];
    std::vector<int> axes{0};
    for (int i = 2; i < x.dim(); ++i) axes.push_back(i);
    if (training) {
        const std::ptrdiff_t count = x.numel() / std::max<std::ptrdiff_t>(c, 1);
        if (count < 2)
            throw value_error("kiln: value_error in 'nn::batch_norm': training needs more than one value per channel, got input " +
                              to_string(x.shape()));
        const detail::dependent_tensor<N> mean = kiln::mean<N>(x, axes, true);
        const detail::dependent_tensor<N> centred = x - mean;
        const detail::dependent_tensor<N> squares = centred * centred;
        const detail::dependent_tensor<N> var = kiln::mean<N>(squares, axes, true);
        const tensor out = detail::batch_norm_affine<N>(centred / kiln::sqrt(var + eps), w, b);
        // The running statistics, from values cut from the tapes (no gradient flows into them). The unbiased variance
        // divides by count - 1, a number that follows a dynamic batch linearly, so one trace serves every batch size.
        const detail::dependent_tensor<N> bm = stop_gradient(mean).reshape({c});
        const detail::dependent_tensor<N> bv = (stop_gradient(kiln::sum<N>(squares, axes)) / static_cast<double>(count - 1)).reshape({c});
        running_mean.assign(static_cast<const detail::dependent_tensor<N>&>(running_mean) * (1 - momentum) + bm * momentum);
        running_var.assign(static_cast<const detail::dependent_tensor<N>&>(running_var) * (1 - momentum) + bv * momentum);
        return out;
    }
    return detail::batch_norm_by<N>(x_in, running_mean, running_var, w, b, eps);
}

// Batch normalization by given statistics (TensorFlow's tf.nn.batch_normalization; PyTorch's F.batch_norm with
// training=False): x is (N, C, ...), and mean, variance, w and b are (C,) tensors of x's dtype (w and b may be
// empty tensors). It is batch_norm's evaluation, and the export writes it as BatchNormalization as well.
template <int N = 0>
tensor batch_normalization(const tensor& x, const tensor& mean, const tensor& variance, const tensor& w = tensor(),
                           const tensor& b = tensor(), double eps = 1e-5) {
    detail::check_batch_norm<N>(x, mean, variance, w, b, eps, 0.0, "nn::batch_normalization");
    return detail::batch_norm_by<N>(x, mean, variance, w, b, eps);
}

// RMS normalization (PyTorch's F.rms_norm and nn.RMSNorm, as LLaMA-style models use it): over the trailing axes,
// which must be `normalized_shape`, y = x / sqrt(mean(x^2) + eps) * w (w of the normalized shape, or an empty
// kiln::tensor() for none). eps defaults to the machine epsilon of x's dtype, as PyTorch's does.
template <int N = 0>
tensor rms_norm(const tensor& x_in, const dims& normalized_shape, const tensor& w = tensor(), std::optional<double> eps = std::nullopt) {
    const double e = eps ? *eps : x_in.valid() && x_in.dtype() == dtype::float64 ? std::numeric_limits<double>::epsilon()
                                                                                  : static_cast<double>(std::numeric_limits<float>::epsilon());
    detail::check_normalization("nn::rms_norm", x_in, normalized_shape, w, tensor(), e);
    const detail::dependent_tensor<N>& x = x_in;
    std::vector<int> axes;
    for (int i = x.dim() - normalized_shape.rank; i < x.dim(); ++i) axes.push_back(i);
    const detail::dependent_tensor<N> y = x * kiln::rsqrt(kiln::mean<N>(x * x, axes, true) + e);
    return detail::given(w) ? tensor(y * static_cast<const detail::dependent_tensor<N>&>(w)) : tensor(y);
}

// Group normalization (PyTorch's F.group_norm and nn.GroupNorm): the C channels of x (N, C, ...) in num_groups
// groups of C / num_groups, each group of each sample normalized over its channels and every other axis by its mean
// and biased variance; then w and b, (C,) each, scale and shift each channel where given. One group is layer
// normalization over (C, ...); C groups is instance normalization.
template <int N = 0>
tensor group_norm(const tensor& x_in, std::ptrdiff_t num_groups, const tensor& w = tensor(), const tensor& b = tensor(), double eps = 1e-5) {
    x_in.check_valid("nn::group_norm");
    if (x_in.dim() < 2)
        throw shape_error("kiln: shape_error in 'nn::group_norm': the input must be (N, C, ...), got " + to_string(x_in.shape()));
    const std::ptrdiff_t n = x_in.shape()[0], c = x_in.shape()[1];
    if (num_groups < 1 || c % num_groups != 0)
        throw value_error("kiln: value_error in 'nn::group_norm': " + std::to_string(num_groups) + " groups must divide the " +
                          std::to_string(c) + " channels of " + to_string(x_in.shape()));
    detail::check_normalization("nn::group_norm", x_in, dims{}, w, b, eps, c);
    const detail::dependent_tensor<N>& x = x_in;
    // (N, G, C / G * rest): one row of values per group of each sample.
    const detail::dependent_tensor<N> g = x.reshape({n, num_groups, -1});
    detail::dependent_tensor<N> y = detail::standardize<N>(g, {2}, eps).reshape(x.shape());
    dims per_channel;  // (C, 1, ...): w and b broadcast along the channels
    per_channel.rank = x.dim() - 1;
    for (int i = 0; i < per_channel.rank; ++i) per_channel[i] = i == 0 ? c : 1;
    if (detail::given(w)) y = y * static_cast<const detail::dependent_tensor<N>&>(w).reshape(per_channel);
    if (detail::given(b)) y = y + static_cast<const detail::dependent_tensor<N>&>(b).reshape(per_channel);
    return y;
}

}  // namespace kiln::nn
