#pragma once
// Resizing images, as PyTorch's torch.nn.functional.interpolate computes it for (N, C, H, W) tensors: mode nearest
// (its legacy "nearest": source index floor(dst * in / out)) or bilinear (align_corners false or true). Each axis is
// an index_select of the source rows (and, for bilinear, of their next rows, mixed by constant weights), so the
// tape differentiates it (the gradient adds back into the rows read), kiln::function traces it (one trace for a
// kiln::dyn batch), save and the ONNX export write it (Gather, Sub, Mul, Add), and every device runs it.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "layers.hpp"

namespace kiln::nn {

enum class interpolation { nearest, bilinear };

struct interpolate_options {
    interpolation mode = interpolation::nearest;
    bool align_corners = false;  // (bilinear only: the corner pixels' centres of input and output coincide)
};

namespace detail_resize {

// For each output index along one axis: the source index, the next one (bilinear) and the weight of the next.
struct axis_plan {
    std::vector<std::int64_t> i0, i1;
    std::vector<double> w1;
};

inline axis_plan plan(std::ptrdiff_t in, std::ptrdiff_t out, const interpolate_options& o) {
    axis_plan p;
    for (std::ptrdiff_t d = 0; d < out; ++d) {
        if (o.mode == interpolation::nearest) {
            const double scale = static_cast<double>(in) / static_cast<double>(out);
            p.i0.push_back(std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(static_cast<double>(d) * scale)), in - 1));
            continue;
        }
        double src = 0;
        if (o.align_corners) {
            src = out > 1 ? static_cast<double>(d) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
        } else {
            src = std::max((static_cast<double>(d) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5, 0.0);
        }
        const std::int64_t lo = std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(src)), in - 1);
        p.i0.push_back(lo);
        p.i1.push_back(lo < in - 1 ? lo + 1 : lo);
        p.w1.push_back(src - static_cast<double>(lo));
    }
    return p;
}

template <int N>
tensor along(const tensor& x, int axis, const axis_plan& p, const interpolate_options& o) {
    const std::ptrdiff_t out = static_cast<std::ptrdiff_t>(p.i0.size());
    const tensor i0 = from_vector(p.i0, dims{out}).to(x.device());
    if (o.mode == interpolation::nearest) return index_select<N>(x, axis, i0);
    const kiln::detail::dependent_tensor<N> a = index_select<N>(x, axis, i0);
    const kiln::detail::dependent_tensor<N> b = index_select<N>(x, axis, from_vector(p.i1, dims{out}).to(x.device()));
    dims at;  // the weights along `axis`, broadcast over the axes after it
    at.rank = x.dim() - axis;
    for (int i = 0; i < at.rank; ++i) at[i] = i == 0 ? out : 1;
    const tensor w = from_vector(p.w1, at).to(x.dtype()).to(x.device());
    return a + (b - a) * w;
}

}  // namespace detail_resize

// x (N, C, H, W) resized to (N, C, size[0], size[1]). Nearest takes every dtype; bilinear a floating one.
template <int N = 0>
tensor interpolate(const tensor& x, std::array<std::ptrdiff_t, 2> size, const interpolate_options& o = {}) {
    x.check_valid("nn::interpolate");
    if (x.dim() != 4)
        throw shape_error("kiln: shape_error in 'nn::interpolate': the input must be (batch, channels, height, width), got " +
                          to_string(x.shape()));
    if (size[0] < 1 || size[1] < 1 || x.shape()[2] < 1 || x.shape()[3] < 1)
        throw value_error("kiln: value_error in 'nn::interpolate': the output size (" + std::to_string(size[0]) + ", " +
                          std::to_string(size[1]) + ") and the input's height and width must be positive (input " +
                          to_string(x.shape()) + ")");
    if (o.mode == interpolation::nearest && o.align_corners)
        throw value_error("kiln: value_error in 'nn::interpolate': align_corners is read by bilinear interpolation only");
    if (o.mode == interpolation::bilinear && !kiln::detail::is_floating(x.dtype()))
        throw dtype_error("kiln: dtype_error in 'nn::interpolate': bilinear interpolation needs a floating input, got " +
                          std::string(kiln::name(x.dtype())));
    const tensor rows = detail_resize::along<N>(x, 2, detail_resize::plan(x.shape()[2], size[0], o), o);
    return detail_resize::along<N>(rows, 3, detail_resize::plan(x.shape()[3], size[1], o), o);
}

// interpolate to (scale * H, scale * W): PyTorch's nn.Upsample(scale_factor=scale) for an integer scale.
template <int N = 0>
tensor upsample(const tensor& x, std::ptrdiff_t scale, const interpolate_options& o = {}) {
    x.check_valid("nn::upsample");
    if (scale < 1) throw value_error("kiln: value_error in 'nn::upsample': the scale must be positive, got " + std::to_string(scale));
    if (x.dim() != 4)
        throw shape_error("kiln: shape_error in 'nn::upsample': the input must be (batch, channels, height, width), got " +
                          to_string(x.shape()));
    return interpolate<N>(x, {x.shape()[2] * scale, x.shape()[3] * scale}, o);
}

// nn.Upsample(scale_factor = scale, mode) as a layer for nn::sequential (no parameters).
template <int N = 0>
class basic_upsample_layer : public module {
public:
    explicit basic_upsample_layer(std::ptrdiff_t scale, interpolate_options o = {}) : scale_(scale), o_(o) {
        if (scale < 1) throw value_error("kiln: value_error in 'nn::upsample_layer': the scale must be positive, got " + std::to_string(scale));
    }
    tensor forward(const tensor& x) override { return upsample<N>(x, scale_, o_); }
    std::vector<variable*> parameters() override { return {}; }

private:
    std::ptrdiff_t scale_;
    interpolate_options o_;
};
using upsample_layer = basic_upsample_layer<>;

}  // namespace kiln::nn
