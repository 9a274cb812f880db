#pragma once
// The ONNX ops that model layers export (activations of their own, LayerNormalization and BatchNormalization for
// inference, Conv and the pools through nn/conv.hpp, CumSum, Size) and the two ops of several outputs kiln computes
// (Split, TopK: one kernel per output), each as eager kiln ops on its inputs. onnx_ops.hpp asks onnx_layer_kernel
// first; docs/deployment.md lists the ops and what is refused.
#include <algorithm>
#include <limits>
#include <optional>

#include "../nn/normalization.hpp"
#include "onnx_read.hpp"

namespace kiln {
namespace detail {

// An ONNX axis attribute or input (int64, negative from the end) as an axis of `x`, by the vocabulary's own check.
inline int onnx_axis(std::int64_t axis, const dims& x, std::string_view op) {
    return ops::detail_gather::axis_in(static_cast<int>(std::clamp<std::int64_t>(axis, -max_rank - 1, max_rank)), x, op);
}

// The window attributes Conv, ConvTranspose and the pools share, read once at import: kernel_shape, strides,
// dilations, pads and auto_pad (checked to be one of ONNX's four).
struct onnx_window_attrs {
    std::string op, auto_pad;
    std::vector<std::int64_t> kernel, strides, dilations, pads;
    bool same() const { return auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"; }
};

template <class Attr>
onnx_window_attrs read_onnx_window_attrs(const std::string& op, Attr&& A) {
    auto ints = [&](const char* name) {
        const onnx_attr* a = A(name);
        return a ? a->ints : std::vector<std::int64_t>{};
    };
    onnx_window_attrs w{op, "NOTSET", ints("kernel_shape"), ints("strides"), ints("dilations"), ints("pads")};
    if (const onnx_attr* ap = A("auto_pad")) w.auto_pad = ap->s;
    if (w.auto_pad != "NOTSET" && w.auto_pad != "VALID" && !w.same())
        throw value_error("auto_pad '" + json::reader::printable(w.auto_pad) + "' is none of NOTSET, VALID, SAME_UPPER and SAME_LOWER");
    return w;
}

// Those attributes against one call's input (and weight, for the convolutions): one or two spatial axes, a value
// per axis (or the default), the kernel the weight holds, and the 1-d case run as 2-d of height 1.
struct onnx_window_axes {
    const onnx_window_attrs& a;
    const tensor& x;
    int spatial;
    std::size_t s;
    std::vector<std::int64_t> weight_kernel, st, di;

    onnx_window_axes(const onnx_window_attrs& attrs, const tensor& input, const tensor* weight)
        : a(attrs), x(input), spatial(input.dim() - 2), s(0) {
        if (spatial != 1 && spatial != 2)
            throw shape_error("kiln: shape_error in '" + a.op + "': kiln reads 1-d and 2-d inputs ((N, C, L) or (N, C, H, W)), got " +
                              to_string(x.shape()));
        s = static_cast<std::size_t>(spatial);
        if (weight) {
            if (weight->dim() != x.dim())
                throw shape_error("kiln: shape_error in '" + a.op + "': the weight " + to_string(weight->shape()) +
                                  " does not match the input " + to_string(x.shape()));
            for (int i = 2; i < weight->dim(); ++i) weight_kernel.push_back(weight->shape()[i]);
            if (!a.kernel.empty() && a.kernel != weight_kernel)
                throw shape_error("kiln: shape_error in '" + a.op + "': kernel_shape disagrees with the weight");
        }
        st = per_axis(a.strides, s, 1, "strides");
        di = per_axis(a.dilations, s, 1, "dilations");
    }
    std::vector<std::int64_t> per_axis(const std::vector<std::int64_t>& v, std::size_t want, std::int64_t fallback, const char* what) const {
        if (v.empty()) return std::vector<std::int64_t>(want, fallback);
        if (v.size() != want)
            throw value_error("kiln: value_error in '" + a.op + "': " + what + " has " + std::to_string(v.size()) + " values for " +
                              std::to_string(spatial) + " spatial axes");
        return v;
    }
    std::int64_t extent(std::size_t i) const { return x.shape()[static_cast<int>(2 + i)]; }
    // A total padding of axis i split as auto_pad says (SAME_UPPER: the odd one at the end; otherwise at the start).
    void split_pad(std::vector<std::int64_t>& pd, std::size_t i, std::int64_t total) const {
        pd[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pd[i + s] = total - pd[i];
    }
    // (N, C, L) as (N, C, 1, L), and back.
    tensor as_2d(const tensor& t) const { return spatial == 1 ? t.unsqueeze(2) : t; }
    tensor from_2d(const tensor& t) const { return spatial == 1 ? t.squeeze(2) : t; }
    std::array<std::ptrdiff_t, 2> two(const std::vector<std::int64_t>& v, std::ptrdiff_t one) const {
        return {spatial == 1 ? one : v[0], spatial == 1 ? v[0] : v[1]};
    }
    pads4 pads_2d(const std::vector<std::int64_t>& pd) const {
        return spatial == 1 ? pads4{0, 0, pd[0], pd[1]} : pads4{pd[0], pd[2], pd[1], pd[3]};
    }
};

// Output `which` of a Split into `count` parts along `axis`: the sizes come from its second input (opset 13 on),
// or from num_outputs (opset 18 on: parts of ceil(extent / n), the last smaller), or are equal.
template <class AttrInt>
replay_fn onnx_split_kernel(std::int64_t opset, AttrInt&& ai, std::size_t which, std::size_t count, std::size_t& lo, std::size_t& hi) {
    lo = 1, hi = 2;
    const std::int64_t axis = ai("axis", 0), num_outputs = ai("num_outputs", 0);
    if (num_outputs != 0 && opset < 18) throw value_error("num_outputs is an attribute of opset 18 on");
    if (num_outputs != 0 && num_outputs != static_cast<std::int64_t>(count))
        throw value_error("num_outputs is " + std::to_string(num_outputs) + " but the node has " + std::to_string(count) + " outputs");
    return [axis, num_outputs, which, count](auto in, auto) {
        const auto& x = in[0];
        const int a = onnx_axis(axis, x.shape(), "Split");
        const std::int64_t extent = x.shape()[a], n = static_cast<std::int64_t>(count);
        std::vector<std::int64_t> sizes;
        if (in.size() > 1 && in[1].valid()) {
            sizes = int_values(in[1], "Split's sizes");
            std::int64_t total = 0;
            for (std::int64_t v : sizes) {
                if (v < 0 || v > extent) throw value_error("kiln: value_error in 'Split': a part's size is out of range");
                total += v;
            }
            if (static_cast<std::int64_t>(sizes.size()) != n || total != extent)
                throw shape_error("kiln: shape_error in 'Split': " + std::to_string(sizes.size()) + " sizes summing to " +
                                  std::to_string(total) + " for " + std::to_string(n) + " outputs of an axis of " + std::to_string(extent));
        } else if (num_outputs != 0) {
            const std::int64_t part = (extent + n - 1) / n;
            for (std::int64_t i = 0; i < n; ++i) sizes.push_back(std::max<std::int64_t>(0, std::min(part, extent - i * part)));
        } else {
            if (extent % n != 0)
                throw shape_error("kiln: shape_error in 'Split': an axis of " + std::to_string(extent) + " does not split into " +
                                  std::to_string(n) + " equal parts");
            sizes.assign(static_cast<std::size_t>(n), extent / n);
        }
        std::int64_t begin = 0;
        for (std::size_t i = 0; i < which; ++i) begin += sizes[i];
        return x.slice(a, begin, begin + sizes[which]);
    };
}

// Output `which` of a TopK (0: the values, 1: their int64 indices) along `axis`: the k largest (or smallest) in
// order, ties by the lower index (kiln's argsort is stable).
template <class AttrInt>
replay_fn onnx_topk_kernel(AttrInt&& ai, std::size_t which, std::size_t& lo, std::size_t& hi) {
    lo = hi = 2;
    const std::int64_t axis = ai("axis", -1);
    const bool largest = ai("largest", 1) != 0;
    return [axis, largest, which](auto in, auto) {
        const auto& x = in[0];
        const int a = onnx_axis(axis, x.shape(), "TopK");
        const std::vector<std::int64_t> k = int_values(in[1], "TopK's k");
        if (k.size() != 1 || k[0] < 0 || k[0] > x.shape()[a])
            throw value_error("kiln: value_error in 'TopK': k must be one value in [0, " + std::to_string(x.shape()[a]) + "]");
        const auto order = argsort(x, a, largest).slice(a, 0, k[0]);
        if (which == 1) return order.contiguous();
        return take_along_axis(x, order, a);
    };
}

// The kernel of a layer op above, or an empty replay_fn when `op` is none of them (lo and hi as onnx_op_kernel's).
template <int N, class Attr, class AttrInt>
replay_fn onnx_layer_kernel(const std::string& op, std::int64_t opset, Attr&& A, AttrInt&& ai, std::size_t& lo, std::size_t& hi) {
    // Activations that PyTorch and Keras export as ops of their own.
    auto attr_f = [&](const char* name, double fallback) {
        const onnx_attr* a = A(name);
        return a ? static_cast<double>(a->f) : fallback;
    };
    if (op == "Clip") {  // (opset 13: the bounds are optional inputs, rank 0)
        lo = 1, hi = 3;
        return [](auto in, auto) {
            auto bound = [&](std::size_t i) -> std::optional<tensor> {
                if (in.size() <= i || !in[i].valid()) return std::nullopt;
                if (in[i].dim() != 0 && in[i].numel() != 1)
                    throw shape_error("kiln: shape_error in 'Clip': a bound must hold one value, got " + to_string(in[i].shape()));
                return in[i].reshape(dims{});
            };
            auto low = bound(1), high = bound(2);
            // A bound left out is the dtype's lowest or largest value (ONNX's definition: so Clip(-inf) without a
            // lower bound is float's lowest finite value); for integers that is no bound at all.
            if (is_floating(in[0].dtype())) {
                const double top = in[0].dtype() == dtype::float32 ? static_cast<double>(std::numeric_limits<float>::max())
                                                                   : std::numeric_limits<double>::max();
                if (!low) low = full(dims{}, -top, in[0].dtype());
                if (!high) high = full(dims{}, top, in[0].dtype());
            }
            if (low && high) return clamp(in[0], *low, *high);
            if (low) return maximum(in[0], *low);
            if (high) return minimum(in[0], *high);
            return in[0];
        };
    }
    if (op == "HardSigmoid" || op == "HardSwish") {
        const bool swish = op == "HardSwish";
        const double alpha = swish ? 1.0 / 6 : attr_f("alpha", 0.2), beta = swish ? 0.5 : attr_f("beta", 0.5);
        return [alpha, beta, swish](auto in, auto) {
            const auto h = clamp(in[0] * alpha + beta, 0.0, 1.0);
            return swish ? in[0] * h : h;
        };
    }
    if (op == "PRelu") {
        lo = hi = 2;
        return [](auto in, auto) { return where(in[0] < 0.0, in[0] * in[1], in[0]); };
    }
    if (op == "Selu") {
        const double alpha = attr_f("alpha", 1.67326319217681884765625), gamma = attr_f("gamma", 1.05070102214813232421875);
        return [alpha, gamma](auto in, auto) { return where(in[0] > 0.0, in[0] * gamma, expm1(in[0]) * (alpha * gamma)); };
    }
    if (op == "Celu") {
        const double alpha = attr_f("alpha", 1.0);
        if (alpha == 0) throw value_error("Celu's alpha must not be 0");
        return [alpha](auto in, auto) { return where(in[0] > 0.0, in[0], expm1(in[0] / alpha) * alpha); };
    }
    if (op == "ThresholdedRelu") {
        const double alpha = attr_f("alpha", 1.0);
        return [alpha](auto in, auto) { return where(in[0] > alpha, in[0], 0.0); };
    }
    if (op == "Softsign") return [](auto in, auto) { return in[0] / (abs(in[0]) + 1.0); };
    if (op == "Mish") {  // (opset 18 on)
        if (opset < 18) throw value_error("Mish is an operator of opset 18 on, and the model's opset is " + std::to_string(opset));
        return [](auto in, auto) { return in[0] * tanh(softplus(in[0])); };
    }
    // Normalizations for inference: LayerNormalization (opset 17) over the axes from `axis` on, BatchNormalization
    // with its running statistics over axis 1. Only their first output can be read (the others are training's).
    if (op == "LayerNormalization") {
        if (opset < 17) throw value_error("LayerNormalization is an operator of opset 17 on, and the model's opset is " + std::to_string(opset));
        lo = 2, hi = 3;
        const std::int64_t axis = ai("axis", -1);
        const double eps = attr_f("epsilon", 1e-5);
        return [axis, eps](auto in, auto) {
            const auto& x = in[0];
            const int r = x.dim();
            std::vector<int> axes;
            const int first = onnx_axis(axis, x.shape(), "LayerNormalization");
            for (int i = first; i < r; ++i) axes.push_back(i);
            // A scale and bias of the normalized shape and x's dtype: nn::layer_norm itself, so that the model
            // traced inside a kiln::function exports as a LayerNormalization again. Others broadcast, as below.
            dims normalized;
            normalized.rank = r - first;
            for (int i = first; i < r; ++i) normalized[i - first] = x.shape()[i];
            const bool has_bias = in.size() > 2 && in[2].valid();
            if (is_floating(x.dtype()) && in[1].shape() == normalized && in[1].dtype() == x.dtype() &&
                (!has_bias || (in[2].shape() == normalized && in[2].dtype() == x.dtype())))
                return nn::layer_norm(x, normalized, in[1], has_bias ? in[2] : tensor(), eps);
            const auto centred = x - mean(x, axes, true);
            const auto y = centred / sqrt(mean(centred * centred, axes, true) + eps) * in[1];
            return (in.size() > 2 && in[2].valid() ? y + in[2] : y).to(x.dtype());
        };
    }
    if (op == "BatchNormalization") {
        lo = hi = 5;
        if (ai("training_mode", 0) != 0) throw value_error("BatchNormalization with training_mode=1 is training; kiln reads models for inference");
        const double eps = attr_f("epsilon", 1e-5);
        return [eps](auto in, auto) {
            const auto& x = in[0];
            if (x.dim() < 2) throw shape_error("kiln: shape_error in 'BatchNormalization': the input must be (N, C, ...), got " + to_string(x.shape()));
            const std::ptrdiff_t c = x.shape()[1];
            std::vector<std::ptrdiff_t> extents(static_cast<std::size_t>(x.dim() - 1), 1);
            extents[0] = c;
            dims per_channel;
            per_channel.assign(extents.begin(), extents.size());
            auto channel = [&](std::size_t i, const char* what) {
                if (in[i].numel() != c)
                    throw shape_error(std::string("kiln: shape_error in 'BatchNormalization': ") + what + " has " +
                                      std::to_string(in[i].numel()) + " values for " + std::to_string(c) + " channels");
                return in[i].reshape(per_channel);
            };
            // Statistics, scale and bias of shape (C,) and x's dtype: nn::batch_normalization itself, so that the
            // model traced inside a kiln::function exports as a BatchNormalization again. Others broadcast.
            bool plain = is_floating(x.dtype());
            for (std::size_t i = 1; i < 5 && plain; ++i) plain = in[i].shape() == dims{c} && in[i].dtype() == x.dtype();
            if (plain) return nn::batch_normalization(x, in[3], in[4], in[1], in[2], eps);
            const auto scale = channel(1, "the scale"), bias = channel(2, "the bias"), m = channel(3, "the mean"),
                       v = channel(4, "the variance");
            return ((x - m) / sqrt(v + eps) * scale + bias).to(x.dtype());
        };
    }
    // Convolution and pooling over one or two spatial axes (N, C, L) or (N, C, H, W), with nn::conv2d and the
    // pools of nn/conv.hpp (a 1-d op runs as a 2-d one of height 1).
    if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
        const bool conv = op == "Conv", max_pool = op == "MaxPool";
        lo = conv ? 2 : 1, hi = conv ? 3 : 1;
        const onnx_window_attrs wa = read_onnx_window_attrs(op, A);
        if (wa.auto_pad != "NOTSET" && !wa.pads.empty()) throw value_error("pads are given with auto_pad " + wa.auto_pad);
        const bool ceil_mode = ai("ceil_mode", 0) != 0;
        if (op == "AveragePool" && ceil_mode) throw value_error("ceil_mode=1 is read for MaxPool only");
        if (max_pool && ai("storage_order", 0) != 0) throw value_error("storage_order=1 is not read");
        if (!conv && wa.kernel.empty()) throw value_error("kernel_shape is required");
        const std::int64_t groups = conv ? ai("group", 1) : 1;
        const bool include_pad = ai("count_include_pad", 0) != 0;
        return [=](auto in, auto) {
            const tensor& x0 = in[0];
            const onnx_window_axes ax(wa, x0, conv ? &in[1] : nullptr);
            const std::vector<std::int64_t> kernel = ax.per_axis(conv ? ax.weight_kernel : wa.kernel, ax.s, 1, "kernel_shape");
            std::vector<std::int64_t> pd = ax.per_axis(wa.pads, 2 * ax.s, 0, "pads");
            if (wa.same())
                for (std::size_t i = 0; i < ax.s; ++i) {
                    const std::int64_t extent = ax.extent(i), out = (extent + ax.st[i] - 1) / ax.st[i];
                    ax.split_pad(pd, i, std::max<std::int64_t>((out - 1) * ax.st[i] + (kernel[i] - 1) * ax.di[i] + 1 - extent, 0));
                }
            const tensor x = ax.as_2d(x0);
            const std::array<std::ptrdiff_t, 2> k2 = ax.two(kernel, 1), s2 = ax.two(ax.st, 1), d2 = ax.two(ax.di, 1);
            const pads4 p4 = ax.pads_2d(pd);
            tensor y;
            if (conv) {
                const tensor b = in.size() > 2 && in[2].valid() ? in[2] : tensor();
                y = conv2d_padded<0>(x, ax.as_2d(in[1]), b, s2, p4, d2, groups);
            } else if (max_pool) {
                y = max_pool2d_padded<0>(x, k2, s2, p4, d2, ceil_mode);
            } else {
                if (d2[0] != 1 || d2[1] != 1) throw value_error("kiln: value_error in 'AveragePool': dilations are not read");
                y = avg_pool2d_padded<0>(x, k2, s2, p4, include_pad);
            }
            return ax.from_2d(y);
        };
    }
    // The transposed convolution over one or two spatial axes, with nn::conv_transpose2d; output_shape (or auto_pad
    // SAME_UPPER/SAME_LOWER, which asks for input * stride) sets the pads by ONNX's formula.
    if (op == "ConvTranspose") {
        lo = 2, hi = 3;
        const onnx_window_attrs wa = read_onnx_window_attrs(op, A);
        auto ints = [&](const char* name) {
            const onnx_attr* a = A(name);
            return a ? a->ints : std::vector<std::int64_t>{};
        };
        const std::vector<std::int64_t> output_padding = ints("output_padding"), output_shape = ints("output_shape");
        if ((wa.auto_pad != "NOTSET" || !output_shape.empty()) && !wa.pads.empty())
            throw value_error("pads are given with " + std::string(output_shape.empty() ? "auto_pad " + wa.auto_pad : "output_shape"));
        const std::int64_t groups = ai("group", 1);
        return [=](auto in, auto) {
            const tensor& x0 = in[0];
            const onnx_window_axes ax(wa, x0, &in[1]);
            const std::vector<std::int64_t>& kernel = ax.weight_kernel;
            const std::vector<std::int64_t> op_pad = ax.per_axis(output_padding, ax.s, 0, "output_padding");
            std::vector<std::int64_t> pd = ax.per_axis(wa.pads, 2 * ax.s, 0, "pads");
            if (!output_shape.empty() || wa.same()) {
                std::vector<std::int64_t> want = output_shape;
                if (want.size() == ax.s + 2) want.erase(want.begin(), want.begin() + 2);  // (the whole shape, as some writers give)
                if (want.empty())
                    for (std::size_t i = 0; i < ax.s; ++i) want.push_back(ax.extent(i) * ax.st[i]);
                want = ax.per_axis(want, ax.s, 0, "output_shape");
                for (std::size_t i = 0; i < ax.s; ++i) {
                    const std::int64_t total = ax.st[i] * (ax.extent(i) - 1) + op_pad[i] + (kernel[i] - 1) * ax.di[i] + 1 - want[i];
                    if (total < 0)
                        throw value_error("kiln: value_error in 'ConvTranspose': output_shape " + std::to_string(want[i]) +
                                          " is larger than the full result's " + std::to_string(want[i] + total) + " (kiln does not pad it)");
                    ax.split_pad(pd, i, total);
                }
            }
            const tensor b = in.size() > 2 && in[2].valid() ? in[2] : tensor();
            const tensor y = conv_transpose2d_padded<0>(ax.as_2d(x0), ax.as_2d(in[1]), b, ax.two(ax.st, 1), ax.pads_2d(pd),
                                                        ax.two(op_pad, 0), ax.two(ax.di, 1), groups);
            return ax.from_2d(y);
        };
    }
    if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
        const bool average = op == "GlobalAveragePool";
        return [average](auto in, auto) {
            if (in[0].dim() < 3)
                throw shape_error("kiln: shape_error in '" + std::string(average ? "GlobalAveragePool" : "GlobalMaxPool") +
                                  "': the input must be (N, C, spatial...), got " + to_string(in[0].shape()));
            std::vector<int> axes;
            for (int i = 2; i < in[0].dim(); ++i) axes.push_back(i);
            return average ? mean(in[0], axes, true) : max(in[0], axes, true);
        };
    }
    if (op == "CumSum") {
        lo = hi = 2;
        const bool exclusive = ai("exclusive", 0) != 0, reverse = ai("reverse", 0) != 0;
        return [exclusive, reverse](auto in, auto) {
            const std::vector<std::int64_t> ax = int_values(in[1], "CumSum's axis");
            const auto& x = in[0];
            if (ax.size() != 1) throw value_error("kiln: value_error in 'CumSum': the axis must be one value");
            const int a = onnx_axis(ax[0], x.shape(), "CumSum");
            if (!exclusive || x.shape()[a] == 0) return cumsum(x, a, reverse).to(x.dtype());
            // Exclusive: the sums of the elements before each one (after it, reversed), so the first is 0.
            const std::ptrdiff_t n = x.shape()[a];
            dims one = x.shape();
            one[static_cast<std::size_t>(a)] = 1;
            const tensor zero = zeros(one, x.dtype(), x.device());
            const auto shifted = reverse ? concat({x.slice(a, 1, n), zero}, a) : concat({zero, x.slice(a, 0, n - 1)}, a);
            return cumsum(shifted, a, reverse).to(x.dtype());
        };
    }
    if (op == "Size") return [](auto in, auto) { return full(dims{}, static_cast<double>(in[0].numel()), dtype::int64); };
    return {};
}

}  // namespace detail
}  // namespace kiln
