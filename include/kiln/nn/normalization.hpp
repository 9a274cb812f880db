#pragma once
// Layer normalization, as PyTorch's torch.nn.functional.layer_norm and nn.LayerNorm and ONNX's LayerNormalization
// compute it: over the trailing axes that `normalized_shape` names, y = (x - mean) / sqrt(var + eps) * w + b with
// the biased variance (divided by the count). It is written with the vocabulary's ops (mean, sub, mul, sqrt, div),
// so the tape differentiates it, kiln::function traces and fuses it, every device runs it, and the tracer keeps a
// note of it (function/graph.hpp's composites) from which the ONNX export writes one LayerNormalization.
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "../eager/eager.hpp"

namespace kiln::detail {

// The number as the note's text keeps it: every bit of a double.
inline std::string exact_number_text(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// Whether layer_norm was given a weight or bias: an empty tensor (kiln::tensor(), as conv2d's bias) is none.
inline bool given(const tensor& t) { return t.valid() && t.numel() != 0; }

inline void check_layer_norm(const tensor& x, const dims& normalized, const tensor& w, const tensor& b, double eps) {
    x.check_valid("nn::layer_norm");
    if (!is_floating(x.dtype()))
        throw dtype_error("kiln: dtype_error in 'nn::layer_norm': the input must be floating, got " + std::string(name(x.dtype())));
    const int k = normalized.rank, r = x.dim();
    bool ends = k >= 1 && k <= r;
    for (int i = 0; ends && i < k; ++i) ends = x.shape()[r - k + i] == normalized[i];
    if (!ends)
        throw shape_error("kiln: shape_error in 'nn::layer_norm': the input " + to_string(x.shape()) + " does not end in the normalized shape " +
                          to_string(normalized) + (k == 0 ? " (name at least one axis)" : ""));
    auto check_affine = [&](const tensor& t, const char* what) {
        if (!given(t)) return;
        if (!(t.shape() == normalized))
            throw shape_error(std::string("kiln: shape_error in 'nn::layer_norm': the ") + what + " has shape " + to_string(t.shape()) +
                              ", but the normalized shape is " + to_string(normalized));
        if (t.dtype() != x.dtype())
            throw dtype_error(std::string("kiln: dtype_error in 'nn::layer_norm': the ") + what + " is " + std::string(name(t.dtype())) +
                              ", but the input is " + std::string(name(x.dtype())));
    };
    check_affine(w, "weight");
    check_affine(b, "bias");
    if (!(eps >= 0) || !std::isfinite(eps))
        throw value_error("kiln: value_error in 'nn::layer_norm': eps must be finite and not negative, got " + exact_number_text(eps));
}

}  // namespace kiln::detail

namespace kiln::nn {

// Layer normalization of x over its trailing axes, which must be `normalized_shape`; w and b (of that shape) scale
// and shift the result where given (an empty kiln::tensor() leaves them out). kiln::nn::layer_norm(x, {64}, w, b).
template <int N = 0>
tensor layer_norm(const tensor& x_in, const dims& normalized_shape, const tensor& w = tensor(), const tensor& b = tensor(),
                  double eps = 1e-5) {
    detail::check_layer_norm(x_in, normalized_shape, w, b, eps);
    const detail::dependent_tensor<N>& x = x_in;
    std::vector<int> axes;
    for (int i = x.dim() - normalized_shape.rank; i < x.dim(); ++i) axes.push_back(i);
    const detail::dependent_tensor<N> centred = x - kiln::mean<N>(x, axes, true);
    const detail::dependent_tensor<N> var = kiln::mean<N>(centred * centred, axes, true);
    detail::dependent_tensor<N> y = centred / kiln::sqrt(var + eps);
    if (detail::given(w)) y = y * static_cast<const detail::dependent_tensor<N>&>(w);
    if (detail::given(b)) y = y + static_cast<const detail::dependent_tensor<N>&>(b);
    const tensor out = y;
    const bool scale = detail::given(w), shift = detail::given(b);
    const tensor parts[3] = {x_in, scale ? w : b, b};
    const std::size_t count = 1 + (scale ? 1 : 0) + (shift ? 1 : 0);
    detail::note_composite("layer_norm", [&] {
        return "axis=" + std::to_string(x_in.dim() - normalized_shape.rank) + " epsilon=" + detail::exact_number_text(eps) +
               " scale=" + (scale ? "true" : "false") + " bias=" + (shift ? "true" : "false");
    }, std::span<const tensor>(parts, count), out);
    return out;
}

}  // namespace kiln::nn
