#pragma once
// Two-dimensional convolution and pooling over (batch, channels, height, width) tensors, as PyTorch's
// torch.nn.functional.conv2d, max_pool2d and avg_pool2d compute them. Each is written with the vocabulary's own ops
// (im2col, reshape, a batched matmul, max and sum), so the gradient tape, kiln::function's
// tracing, kiln::save and ONNX export take them as they take any eager code, on every device that runs those ops.
// The patches are gathered by ops::im2col (ops/window.hpp) into a (batch, channels * kh * kw, out_h * out_w) matrix:
// memory for that matrix is the cost, and the product is one matmul per group.
#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../eager/eager.hpp"
#include "../ops/window.hpp"

namespace kiln::nn {

// Strides, zero padding (the same on both sides of an axis) and dilations of a 2-d window, per (height, width).
struct conv2d_options {
    std::array<std::ptrdiff_t, 2> stride{1, 1};
    std::array<std::ptrdiff_t, 2> padding{0, 0};
    std::array<std::ptrdiff_t, 2> dilation{1, 1};
    std::ptrdiff_t groups = 1;
};

// A transposed convolution's: stride, padding (removed from both sides of an axis of the full result), extra rows
// and columns at the end of the result (output_padding, below the stride), dilation and groups, per (height, width).
struct conv_transpose2d_options {
    std::array<std::ptrdiff_t, 2> stride{1, 1};
    std::array<std::ptrdiff_t, 2> padding{0, 0};
    std::array<std::ptrdiff_t, 2> output_padding{0, 0};
    std::array<std::ptrdiff_t, 2> dilation{1, 1};
    std::ptrdiff_t groups = 1;
};

struct pool2d_options {
    std::array<std::ptrdiff_t, 2> stride{0, 0};  // 0: the kernel's extent (PyTorch's default stride)
    std::array<std::ptrdiff_t, 2> padding{0, 0};
    std::array<std::ptrdiff_t, 2> dilation{1, 1};  // (max pooling only)
    bool count_include_pad = true;                 // (average pooling: padded zeros count in the divisor)
    bool ceil_mode = false;                        // (max pooling only: the output extent rounded up, as PyTorch's)
};

}  // namespace kiln::nn

namespace kiln::detail {

// Padding of each side: {top, bottom, left, right} (ONNX's pads may differ between the sides).
using pads4 = std::array<std::ptrdiff_t, 4>;

inline std::string window_text(std::array<std::ptrdiff_t, 2> a) {
    return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// The output extent of one axis, or a shape_error naming the op when the window does not fit.
inline std::ptrdiff_t window_out(const char* op, const char* axis, std::ptrdiff_t in, std::ptrdiff_t pad_before,
                                 std::ptrdiff_t pad_after, std::ptrdiff_t kernel, std::ptrdiff_t stride, std::ptrdiff_t dilation) {
    const std::ptrdiff_t span = dilation * (kernel - 1) + 1, padded = in + pad_before + pad_after;
    if (padded < span)
        throw shape_error(std::string("kiln: shape_error in 'nn::") + op + "': the " + axis + " of the input is " + std::to_string(in) +
                          (pad_before || pad_after ? " (" + std::to_string(padded) + " padded)" : std::string()) +
                          ", smaller than the window's " + std::to_string(span) + " (kernel " + std::to_string(kernel) +
                          (dilation > 1 ? ", dilation " + std::to_string(dilation) : std::string()) + ")");
    return (padded - span) / stride + 1;
}

inline void check_window(const char* op, std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride,
                         const pads4& pads, std::array<std::ptrdiff_t, 2> dilation) {
    for (int i = 0; i < 2; ++i) {
        if (kernel[i] < 1 || stride[i] < 1 || dilation[i] < 1)
            throw value_error(std::string("kiln: value_error in 'nn::") + op + "': kernel " + window_text(kernel) + ", stride " +
                              window_text(stride) + " and dilation " + window_text(dilation) + " must be positive");
    }
    for (std::ptrdiff_t p : pads)
        if (p < 0) throw value_error(std::string("kiln: value_error in 'nn::") + op + "': padding must not be negative");
}

inline void check_images(const char* op, const tensor& x) {
    if (x.dim() != 4)
        throw shape_error(std::string("kiln: shape_error in 'nn::") + op + "': the input must be (batch, channels, height, width), got " +
                          to_string(x.shape()));
}

// The windows of x (N, C, H, W), padded with `fill`: a (N, C, kh * kw, out_h, out_w) tensor whose axis 2 runs over
// the kernel's offsets in row-major order (ops::im2col; its gradient is ops::col2im).
template <int N>
tensor windows(const tensor& x, std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride, const pads4& pads,
               std::array<std::ptrdiff_t, 2> dilation, double fill) {
    return apply_structural<ops::im2col, N>(ops::make_window_attrs(kernel, stride, pads, dilation, fill), x);
}

// windows' adjoint: columns (N, C, kh * kw, out_h, out_w) added back into an image (N, C, size[0], size[1]), each
// to the element it was read from (ops::col2im; the image's shape is given as a broadcast zero, read for its shape).
template <int N>
tensor unwindows(const tensor& cols, std::array<std::ptrdiff_t, 2> size, std::array<std::ptrdiff_t, 2> kernel,
                 std::array<std::ptrdiff_t, 2> stride, const pads4& pads, std::array<std::ptrdiff_t, 2> dilation) {
    const tensor like = kiln::zeros({1}, cols.dtype(), cols.device())
                            .reshape({1, 1, 1, 1})
                            .broadcast_to({cols.shape()[0], cols.shape()[1], size[0], size[1]});
    return apply_structural<ops::col2im, N>(ops::make_window_attrs(kernel, stride, pads, dilation, 0.0), cols, like);
}

// A composite note's attributes (function/graph.hpp): ops::window_text, "kernel=3,3 stride=1,1 pads=1,1,1,1
// dilation=1,1", the pads as top, bottom, left, right.
inline std::string window_attrs(std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride, const pads4& pads,
                                std::array<std::ptrdiff_t, 2> dilation) {
    return ops::window_text(kernel, stride, pads, dilation);
}

template <int N>
tensor conv2d_padded(const tensor& x, const tensor& w, const tensor& b, std::array<std::ptrdiff_t, 2> stride, const pads4& pads,
                     std::array<std::ptrdiff_t, 2> dilation, std::ptrdiff_t groups) {
    check_images("conv2d", x);
    if (w.dim() != 4)
        throw shape_error("kiln: shape_error in 'nn::conv2d': the weight must be (out_channels, in_channels / groups, kh, kw), got " +
                          to_string(w.shape()));
    const std::ptrdiff_t n = x.shape()[0], c = x.shape()[1], m = w.shape()[0], kh = w.shape()[2], kw = w.shape()[3];
    if (groups < 1 || c % groups != 0 || m % groups != 0)
        throw value_error("kiln: value_error in 'nn::conv2d': " + std::to_string(groups) + " groups must divide the input's " +
                          std::to_string(c) + " channels and the weight's " + std::to_string(m) + " output channels");
    if (w.shape()[1] * groups != c)
        throw shape_error("kiln: shape_error in 'nn::conv2d': the weight " + to_string(w.shape()) + " takes " +
                          std::to_string(w.shape()[1] * groups) + " input channels" +
                          (groups > 1 ? " (" + std::to_string(w.shape()[1]) + " per group, " + std::to_string(groups) + " groups)" : std::string()) +
                          ", but the input " + to_string(x.shape()) + " has " + std::to_string(c));
    if (b.numel() != 0 && !(b.dim() == 1 && b.shape()[0] == m))
        throw shape_error("kiln: shape_error in 'nn::conv2d': the bias must be (" + std::to_string(m) + ",), got " + to_string(b.shape()));
    check_window("conv2d", {kh, kw}, stride, pads, dilation);
    const std::ptrdiff_t oh = window_out("conv2d", "height", x.shape()[2], pads[0], pads[1], kh, stride[0], dilation[0]);
    const std::ptrdiff_t ow = window_out("conv2d", "width", x.shape()[3], pads[2], pads[3], kw, stride[1], dilation[1]);
    // (N, C, kh*kw, oh, ow) -> (N, groups, C/groups * kh*kw, oh*ow), against the weight as (groups, M/groups, C/groups * kh*kw).
    const dependent_tensor<N> cols =
        windows<N>(x, {kh, kw}, stride, pads, dilation, 0.0).reshape({n, groups, (c / groups) * kh * kw, oh * ow});
    const dependent_tensor<N> y = kiln::matmul(w.reshape({groups, m / groups, (c / groups) * kh * kw}), cols).reshape({n, m, oh, ow});
    tensor out = b.numel() != 0 ? tensor(y + b.reshape({m, 1, 1})) : tensor(y);
    const tensor parts[3] = {x, w, b};
    note_composite("conv2d", [&] { return window_attrs({kh, kw}, stride, pads, dilation) + " groups=" + std::to_string(groups); },
                   std::span<const tensor>(parts, b.numel() != 0 ? 3 : 2), out);
    return out;
}

template <int N>
tensor max_pool2d_padded(const tensor& x_in, std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride,
                         const pads4& given, std::array<std::ptrdiff_t, 2> dilation, bool ceil_mode = false) {
    check_images("max_pool2d", x_in);
    check_window("max_pool2d", kernel, stride, given, dilation);
    for (int i = 0; i < 2; ++i)
        if (2 * std::max(given[2 * i], given[2 * i + 1]) > kernel[i])
            throw value_error("kiln: value_error in 'nn::max_pool2d': padding " + std::to_string(std::max(given[2 * i], given[2 * i + 1])) +
                              " is more than half the kernel's " + std::to_string(kernel[i]) + " (a window could hold padding alone)");
    pads4 pads = given;
    if (ceil_mode)
        // The output extent rounded up, as ONNX's and PyTorch's ceil_mode: one more window where a partial one is left,
        // unless it would start in the end padding. The windows reach past the input by padding added at its end.
        for (int i = 0; i < 2; ++i) {
            const std::ptrdiff_t in = x_in.shape()[2 + i], span = dilation[i] * (kernel[i] - 1) + 1;
            const std::ptrdiff_t room = in + given[2 * i] + given[2 * i + 1] - span;
            if (room < 0) break;  // (window_out below names it)
            std::ptrdiff_t out = (room + stride[i] - 1) / stride[i] + 1;
            if ((out - 1) * stride[i] >= in + given[2 * i]) --out;
            pads[2 * i + 1] += std::max<std::ptrdiff_t>(0, (out - 1) * stride[i] + span - (in + given[2 * i] + given[2 * i + 1]));
        }
    // (The windows must fit: the messages name the axis.)
    (void)window_out("max_pool2d", "height", x_in.shape()[2], pads[0], pads[1], kernel[0], stride[0], dilation[0]);
    (void)window_out("max_pool2d", "width", x_in.shape()[3], pads[2], pads[3], kernel[1], stride[1], dilation[1]);
    // Padding is the lowest value, so it is never a window's maximum (the check above keeps a real element in each).
    const dtype d = x_in.dtype();
    const double low = is_floating(d) ? -std::numeric_limits<double>::infinity()
                       : d == dtype::int32 ? static_cast<double>(std::numeric_limits<std::int32_t>::lowest())
                       : d == dtype::int64 ? -9.2233720368547758e18  // (-2^63, exact in a double)
                                           : 0.0;                    // (bool: false)
    tensor out = kiln::max<N>(windows<N>(x_in, kernel, stride, pads, dilation, low), {2});
    note_composite("max_pool2d", [&] { return window_attrs(kernel, stride, given, dilation) + (ceil_mode ? " ceil_mode=true" : " ceil_mode=false"); },
                   std::span<const tensor>(&x_in, 1), out);
    return out;
}

template <int N>
tensor avg_pool2d_padded(const tensor& x_in, std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride,
                         const pads4& pads, bool count_include_pad) {
    check_images("avg_pool2d", x_in);
    check_window("avg_pool2d", kernel, stride, pads, {1, 1});
    if (!is_floating(x_in.dtype()))
        throw dtype_error("kiln: dtype_error in 'nn::avg_pool2d': the input must be floating, got " + std::string(name(x_in.dtype())));
    (void)window_out("avg_pool2d", "height", x_in.shape()[2], pads[0], pads[1], kernel[0], stride[0], 1);
    (void)window_out("avg_pool2d", "width", x_in.shape()[3], pads[2], pads[3], kernel[1], stride[1], 1);
    const dependent_tensor<N> total = kiln::sum<N>(windows<N>(x_in, kernel, stride, pads, {1, 1}, 0.0), {2});
    const bool padded = pads[0] || pads[1] || pads[2] || pads[3];
    tensor out;
    if (count_include_pad || !padded) {
        out = total / static_cast<double>(kernel[0] * kernel[1]);
    } else {
        // The number of real elements in each window: the same windows over ones, as a (1, 1, oh, ow) divisor.
        const tensor ones_image = kiln::ones({1, 1, x_in.shape()[2], x_in.shape()[3]}, x_in.dtype(), x_in.device());
        out = total / kiln::sum<N>(windows<N>(ones_image, kernel, stride, pads, {1, 1}, 0.0), {2});
    }
    note_composite("avg_pool2d", [&] { return window_attrs(kernel, stride, pads, {1, 1}) + (count_include_pad ? " count_include_pad=true" : " count_include_pad=false"); },
                   std::span<const tensor>(&x_in, 1), out);
    return out;
}

inline pads4 symmetric(std::array<std::ptrdiff_t, 2> p) { return {p[0], p[0], p[1], p[1]}; }

// The transposed convolution (the gradient of conv2d with respect to its input, as a layer): each input element
// scatters w's kernel for its channel into the output, which is col2im of the product of w and x. `pads` are the
// rows and columns cropped from each side of the full result (top, bottom, left, right: ONNX's ConvTranspose may
// crop the sides apart); output_padding adds that many at the end, below the stride (the windows col2im reads stay
// those of the input's positions).
template <int N>
tensor conv_transpose2d_padded(const tensor& x, const tensor& w, const tensor& b, std::array<std::ptrdiff_t, 2> stride,
                               const pads4& pads, std::array<std::ptrdiff_t, 2> output_padding, std::array<std::ptrdiff_t, 2> dilation,
                               std::ptrdiff_t groups) {
    const char* op = "conv_transpose2d";
    check_images(op, x);
    if (w.dim() != 4)
        throw shape_error("kiln: shape_error in 'nn::conv_transpose2d': the weight must be (in_channels, out_channels / groups, kh, kw), got " +
                          to_string(w.shape()));
    const std::ptrdiff_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
    const std::ptrdiff_t kh = w.shape()[2], kw = w.shape()[3];
    if (groups < 1 || c % groups != 0)
        throw value_error("kiln: value_error in 'nn::conv_transpose2d': " + std::to_string(groups) + " groups must divide the input's " +
                          std::to_string(c) + " channels");
    if (w.shape()[0] != c)
        throw shape_error("kiln: shape_error in 'nn::conv_transpose2d': the weight " + to_string(w.shape()) + " takes " +
                          std::to_string(w.shape()[0]) + " input channels, but the input " + to_string(x.shape()) + " has " +
                          std::to_string(c));
    const std::ptrdiff_t m = w.shape()[1] * groups;
    if (b.numel() != 0 && !(b.dim() == 1 && b.shape()[0] == m))
        throw shape_error("kiln: shape_error in 'nn::conv_transpose2d': the bias must be (" + std::to_string(m) + ",), got " +
                          to_string(b.shape()));
    check_window(op, {kh, kw}, stride, pads, dilation);
    std::array<std::ptrdiff_t, 2> size{};
    for (int i = 0; i < 2; ++i) {
        if (output_padding[i] < 0 || output_padding[i] >= stride[i])
            throw value_error("kiln: value_error in 'nn::conv_transpose2d': output_padding " + window_text(output_padding) +
                              " must be at least 0 and below the stride " + window_text(stride));
        const std::ptrdiff_t in = i == 0 ? h : wd;
        size[static_cast<std::size_t>(i)] = (in - 1) * stride[i] + dilation[i] * ((i == 0 ? kh : kw) - 1) + 1 + output_padding[i] -
                                            pads[2 * i] - pads[2 * i + 1];
        if (in < 1 || size[static_cast<std::size_t>(i)] < 1)
            throw shape_error(std::string("kiln: shape_error in 'nn::conv_transpose2d': the ") + (i == 0 ? "height" : "width") +
                              " of the result would be " + std::to_string(size[static_cast<std::size_t>(i)]) + " (input " +
                              to_string(x.shape()) + ", kernel " + window_text({kh, kw}) + ", padding " +
                              std::to_string(pads[2 * i]) + " and " + std::to_string(pads[2 * i + 1]) + ")");
    }
    // x as (N, groups, C / groups, H * W) against w as (groups, M / groups * kh * kw, C / groups): the columns of each
    // input position, (N, M, kh * kw, H, W), which col2im adds into the result.
    const std::ptrdiff_t cg = c / groups, k = kh * kw;
    const dependent_tensor<N> cols =
        kiln::matmul(w.reshape({groups, cg, (m / groups) * k}).transpose(1, 2), x.reshape({n, groups, cg, h * wd})).reshape({n, m, k, h, wd});
    const dependent_tensor<N> y = unwindows<N>(tensor(cols), size, {kh, kw}, stride, pads, dilation);
    tensor out = b.numel() != 0 ? tensor(y + b.reshape({m, 1, 1})) : tensor(y);
    const tensor parts[3] = {x, w, b};
    note_composite(op, [&] {
        return window_attrs({kh, kw}, stride, pads, dilation) + " output_padding=" + std::to_string(output_padding[0]) + "," +
               std::to_string(output_padding[1]) + " groups=" + std::to_string(groups);
    }, std::span<const tensor>(parts, b.numel() != 0 ? 3 : 2), out);
    return out;
}

}  // namespace kiln::detail

namespace kiln::nn {

// y = conv2d(x, w) + b: x (batch, in_channels, height, width), w (out_channels, in_channels / groups, kh, kw), b
// (out_channels,) or an empty tensor for none; the result is (batch, out_channels, out_h, out_w) with out_h =
// (height + 2 * padding - dilation * (kh - 1) - 1) / stride + 1. A cross-correlation, as in PyTorch and ONNX.
template <int N = 0>
tensor conv2d(const tensor& x, const tensor& w, const tensor& b = tensor(), const conv2d_options& o = {}) {
    return detail::conv2d_padded<N>(x, w, b, o.stride, detail::symmetric(o.padding), o.dilation, o.groups);
}

// PyTorch's F.conv_transpose2d: x (batch, in_channels, height, width), w (in_channels, out_channels / groups, kh, kw),
// b (out_channels,) or an empty tensor; the result is (batch, out_channels, out_h, out_w) with out_h = (height - 1) *
// stride - 2 * padding + dilation * (kh - 1) + output_padding + 1. conv2d's gradient with respect to its input, as
// a layer of its own (upsampling in decoders and generators).
template <int N = 0>
tensor conv_transpose2d(const tensor& x, const tensor& w, const tensor& b = tensor(), const conv_transpose2d_options& o = {}) {
    return detail::conv_transpose2d_padded<N>(x, w, b, o.stride, detail::symmetric(o.padding), o.output_padding, o.dilation, o.groups);
}

// PyTorch's F.unfold: every kernel-sized window of x (N, C, H, W) as a column, (N, C * kh * kw, L) with L =
// out_h * out_w windows in row-major order; row c * kh * kw + i * kw + j holds channel c at kernel offset (i, j).
// Padding reads as zeros; o.groups must be 1. Its gradient adds each column back where it was read (nn::fold).
template <int N = 0>
tensor unfold(const tensor& x, std::array<std::ptrdiff_t, 2> kernel, const conv2d_options& o = {}) {
    detail::check_images("unfold", x);
    const detail::pads4 pads = detail::symmetric(o.padding);
    detail::check_window("unfold", kernel, o.stride, pads, o.dilation);
    if (o.groups != 1) throw value_error("kiln: value_error in 'nn::unfold': windows have no groups, got groups = " + std::to_string(o.groups));
    const std::ptrdiff_t oh = detail::window_out("unfold", "height", x.shape()[2], pads[0], pads[1], kernel[0], o.stride[0], o.dilation[0]);
    const std::ptrdiff_t ow = detail::window_out("unfold", "width", x.shape()[3], pads[2], pads[3], kernel[1], o.stride[1], o.dilation[1]);
    return detail::windows<N>(x, kernel, o.stride, pads, o.dilation, 0.0).reshape({x.shape()[0], x.shape()[1] * kernel[0] * kernel[1], oh * ow});
}

// PyTorch's F.fold, unfold's adjoint: columns (N, C * kh * kw, L) added back into (N, C, size[0], size[1]), each to
// the element it would be read from (parts that fall into the padding are dropped). Overlapping windows add up, so
// fold(unfold(x)) is x times the number of windows that hold each element.
template <int N = 0>
tensor fold(const tensor& cols, std::array<std::ptrdiff_t, 2> size, std::array<std::ptrdiff_t, 2> kernel, const conv2d_options& o = {}) {
    cols.check_valid("nn::fold");
    const detail::pads4 pads = detail::symmetric(o.padding);
    detail::check_window("fold", kernel, o.stride, pads, o.dilation);
    if (o.groups != 1) throw value_error("kiln: value_error in 'nn::fold': windows have no groups, got groups = " + std::to_string(o.groups));
    if (size[0] < 0 || size[1] < 0)
        throw value_error("kiln: value_error in 'nn::fold': the output size " + detail::window_text(size) + " is negative");
    const std::ptrdiff_t oh = detail::window_out("fold", "height", size[0], pads[0], pads[1], kernel[0], o.stride[0], o.dilation[0]);
    const std::ptrdiff_t ow = detail::window_out("fold", "width", size[1], pads[2], pads[3], kernel[1], o.stride[1], o.dilation[1]);
    const std::ptrdiff_t k = kernel[0] * kernel[1];
    if (cols.dim() != 3 || cols.shape()[1] % k != 0 || cols.shape()[2] != oh * ow)
        throw shape_error("kiln: shape_error in 'nn::fold': the columns must be (batch, channels * " + std::to_string(k) + ", " +
                          std::to_string(oh * ow) + ") for kernel " + detail::window_text(kernel) + " and output size " +
                          detail::window_text(size) + ", got " + to_string(cols.shape()));
    const std::ptrdiff_t n = cols.shape()[0], c = cols.shape()[1] / k;
    return detail::unwindows<N>(cols.reshape({n, c, k, oh, ow}), size, kernel, o.stride, pads, o.dilation);
}

// The maximum of each kernel-sized window (padding never wins); the stride defaults to the kernel.
template <int N = 0>
tensor max_pool2d(const tensor& x, std::array<std::ptrdiff_t, 2> kernel, const pool2d_options& o = {}) {
    const std::array<std::ptrdiff_t, 2> stride{o.stride[0] ? o.stride[0] : kernel[0], o.stride[1] ? o.stride[1] : kernel[1]};
    return detail::max_pool2d_padded<N>(x, kernel, stride, detail::symmetric(o.padding), o.dilation, o.ceil_mode);
}

// The mean of each kernel-sized window; with padding, count_include_pad says whether padded zeros count in the
// divisor (PyTorch's default: they do).
template <int N = 0>
tensor avg_pool2d(const tensor& x, std::array<std::ptrdiff_t, 2> kernel, const pool2d_options& o = {}) {
    const std::array<std::ptrdiff_t, 2> stride{o.stride[0] ? o.stride[0] : kernel[0], o.stride[1] ? o.stride[1] : kernel[1]};
    if (o.dilation[0] != 1 || o.dilation[1] != 1)
        throw value_error("kiln: value_error in 'nn::avg_pool2d': average pooling has no dilation");
    if (o.ceil_mode) throw value_error("kiln: value_error in 'nn::avg_pool2d': ceil_mode is read by max pooling only");
    return detail::avg_pool2d_padded<N>(x, kernel, stride, detail::symmetric(o.padding), o.count_include_pad);
}

}  // namespace kiln::nn
