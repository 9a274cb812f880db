#pragma once
// The windows of an image, for convolution and pooling: im2col gathers every kernel-sized window of a (N, C, H, W)
// tensor into a (N, C, kh * kw, out_h, out_w) one, and col2im, its adjoint (and gradient), adds such windows back
// into an image of x's shape. nn::conv2d (one product with the weight), the pools (a max or a sum over axis 2) and
// nn::unfold (PyTorch's F.unfold) are written with them. Their kernels are the device's fill, strided copy and
// strided add, one of each per kernel offset: no padded copy of the image, and no image-sized zeros per offset in
// the gradient.
#include <array>
#include <bit>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "layout.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// A 2-d window: kernel, stride and dilation per (height, width), padding per side (top, bottom, left, right), and the
// value padding reads as (kept as its bits, so that the attributes stay a structural type for every compiler).
struct window_attrs {
    std::array<std::ptrdiff_t, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1};
    std::array<std::ptrdiff_t, 4> pads{};
    std::uint64_t value_bits = 0;  // 0.0
    constexpr double value() const { return std::bit_cast<double>(value_bits); }
    friend constexpr bool operator==(const window_attrs&, const window_attrs&) = default;
};

inline window_attrs make_window_attrs(std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride,
                                      std::array<std::ptrdiff_t, 4> pads, std::array<std::ptrdiff_t, 2> dilation, double value) {
    window_attrs a;
    a.kernel = kernel, a.stride = stride, a.pads = pads, a.dilation = dilation;
    a.value_bits = std::bit_cast<std::uint64_t>(value);
    return a;
}

// The window from attributes read as lists of integers (the registry's, a loaded trace's): kernel, stride and dilation
// hold 2 numbers each, pads 4 (top, bottom, left, right). `op` names the op in the message for a wrong count.
template <class Ints>
window_attrs make_window_attrs(std::string_view op, const Ints& kernel, const Ints& stride, const Ints& pads, const Ints& dilation,
                               double value) {
    auto check = [&](const char* key, const Ints& v, std::size_t n) {
        if (std::size(v) != n)
            throw value_error(detail::error_prefix("value_error", op) + "'" + key + "' holds " + std::to_string(n) +
                              " numbers, got " + std::to_string(std::size(v)));
    };
    check("kernel", kernel, 2), check("stride", stride, 2), check("pads", pads, 4), check("dilation", dilation, 2);
    auto at = [](const Ints& v, std::size_t i) { return static_cast<std::ptrdiff_t>(v[i]); };
    return make_window_attrs({at(kernel, 0), at(kernel, 1)}, {at(stride, 0), at(stride, 1)},
                             {at(pads, 0), at(pads, 1), at(pads, 2), at(pads, 3)}, {at(dilation, 0), at(dilation, 1)}, value);
}

// A window's attributes as text, "kernel=3,3 stride=1,1 pads=1,1,1,1 dilation=1,1" (im2col's attributes add the
// value; the composite notes of nn::conv2d and the pools, which the ONNX export reads back, add their own).
inline std::string window_text(std::array<std::ptrdiff_t, 2> kernel, std::array<std::ptrdiff_t, 2> stride,
                               std::array<std::ptrdiff_t, 4> pads, std::array<std::ptrdiff_t, 2> dilation) {
    auto two = [](const std::array<std::ptrdiff_t, 2>& v) { return std::to_string(v[0]) + "," + std::to_string(v[1]); };
    return "kernel=" + two(kernel) + " stride=" + two(stride) + " pads=" + std::to_string(pads[0]) + "," + std::to_string(pads[1]) +
           "," + std::to_string(pads[2]) + "," + std::to_string(pads[3]) + " dilation=" + two(dilation);
}

// The same window padding with 0 (col2im's gradient), as a value or at compile time.
constexpr window_attrs with_zero(window_attrs a) {
    a.value_bits = 0;
    return a;
}
template <window_attrs A>
constexpr attrs_c<with_zero(A)> with_zero(attrs_c<A>) {
    return {};
}

namespace detail_window {

// The output extent of one axis, or 0 with `why` set.
constexpr std::ptrdiff_t out_extent(std::ptrdiff_t in, std::ptrdiff_t before, std::ptrdiff_t after, std::ptrdiff_t kernel,
                                    std::ptrdiff_t stride, std::ptrdiff_t dilation, const char*& why) {
    std::ptrdiff_t span = 0, padded = 0;
    if (__builtin_mul_overflow(dilation, kernel - 1, &span) || __builtin_add_overflow(span, 1, &span) ||
        __builtin_add_overflow(in, before, &padded) || __builtin_add_overflow(padded, after, &padded)) {
        why = "the window or the padding is too large";
        return 0;
    }
    if (padded < span) {
        why = "the window is larger than the padded image";
        return 0;
    }
    return (padded - span) / stride + 1;
}

// Where kernel offset k of an axis reads: the first output position whose input lies inside the image, how many
// consecutive outputs do, and the input position of the first.
struct tap_range {
    std::ptrdiff_t first = 0, count = 0, in = 0;
};
constexpr tap_range tap_of(std::ptrdiff_t k, std::ptrdiff_t in, std::ptrdiff_t before, std::ptrdiff_t out,
                           std::ptrdiff_t stride, std::ptrdiff_t dilation) {
    // Output o reads input o * stride + k * dilation - before, which must lie in [0, in).
    const std::ptrdiff_t shift = k * dilation - before;
    std::ptrdiff_t lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
    const std::ptrdiff_t last_in = in - 1 - shift;  // o * stride <= last_in
    std::ptrdiff_t hi = last_in < 0 ? 0 : last_in / stride + 1;
    if (hi > out) hi = out;
    if (lo > hi) lo = hi;
    return {lo, hi - lo, lo * stride + shift};
}

}  // namespace detail_window

// im2col: x (N, C, H, W) -> (N, C, kh * kw, out_h, out_w), element [n, c, i * kw + j, p, q] being x[n, c, p * sh + i *
// dh - top, q * sw + j * dw - left], or the padding value outside the image. Its gradient is col2im of g.
struct im2col {
    static constexpr std::string_view name = "im2col";
    static constexpr int arity = 1;
    using attributes = window_attrs;
    static constexpr std::ptrdiff_t limit = std::ptrdiff_t{1} << 31;  // (each number: no index arithmetic overflows)
    static constexpr shape_or_error rule(const window_attrs& a, const dims& x) {
        if (x.rank != 4) return shape_fail("the input must be (batch, channels, height, width)");
        for (int i = 0; i < 2; ++i) {
            const auto k = static_cast<std::size_t>(i);
            if (a.kernel[k] < 1 || a.stride[k] < 1 || a.dilation[k] < 1) return shape_fail("kernel, stride and dilation must be positive");
            if (a.kernel[k] > limit || a.stride[k] > limit || a.dilation[k] > limit) return shape_fail("the window is too large");
        }
        for (std::ptrdiff_t p : a.pads) {
            if (p < 0) return shape_fail("padding must not be negative");
            if (p > limit) return shape_fail("the padding is too large");
        }
        const char* why = nullptr;
        const std::ptrdiff_t oh = detail_window::out_extent(x[2], a.pads[0], a.pads[1], a.kernel[0], a.stride[0], a.dilation[0], why);
        const std::ptrdiff_t ow = detail_window::out_extent(x[3], a.pads[2], a.pads[3], a.kernel[1], a.stride[1], a.dilation[1], why);
        if (why) return shape_fail(why);
        dims out{};
        out.rank = 5;
        out[0] = x[0], out[1] = x[1], out[3] = oh, out[4] = ow;
        if (__builtin_mul_overflow(a.kernel[0], a.kernel[1], &out[2])) return shape_fail("the kernel is too large");
        return shape_ok(out);
    }
    template <window_attrs A, class S>
    using static_shape = typename rule_static_shape<im2col, A, S>::type;
    static dims result_shape(const window_attrs& a, const dims& x, std::string_view = {}) {
        return detail_layout::throw_unless(rule(a, x), name, x);
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const window_attrs& a) {
        return window_text(a.kernel, a.stride, a.pads, a.dilation) + " value=" + detail::number_text(a.value());
    }
    // Calls f(tap, rows, cols) for each kernel offset, with the output rows and columns whose windows read the image
    // at that offset (the others read padding; with no padding there are none).
    template <class F>
    static void for_each_tap(const window_attrs& a, const dims& x, std::ptrdiff_t oh, std::ptrdiff_t ow, F&& f) {
        for (std::ptrdiff_t i = 0; i < a.kernel[0]; ++i) {
            const auto r = detail_window::tap_of(i, x[2], a.pads[0], oh, a.stride[0], a.dilation[0]);
            for (std::ptrdiff_t j = 0; j < a.kernel[1]; ++j)
                f(i * a.kernel[1] + j, r, detail_window::tap_of(j, x[3], a.pads[2], ow, a.stride[1], a.dilation[1]));
        }
    }
    // Rows [r0, r1) and columns [c0, c1) of one offset's (N, C, oh, ow) part of the windows `w`.
    template <class U>
    static detail::strided<U> block(const detail::strided<U>& w, std::ptrdiff_t tap, std::ptrdiff_t r0, std::ptrdiff_t r1,
                                    std::ptrdiff_t c0, std::ptrdiff_t c1) {
        return detail::strided<U>(w.data + tap * w.strides[2] + r0 * w.strides[3] + c0 * w.strides[4],
                                  dims{w.shape[0], w.shape[1], r1 - r0, c1 - c0},
                                  dims{w.strides[0], w.strides[1], w.strides[3], w.strides[4]});
    }
    // The part of x that a tap reads, and the part of the (N, C, K, oh, ow) windows `w` it fills, as 4-d views.
    template <class U, class T>
    static std::pair<detail::strided<U>, detail::strided<T>> tap_views(const window_attrs& a, const detail::strided<U>& w,
                                                                       const detail::strided<T>& x, std::ptrdiff_t tap,
                                                                       const detail_window::tap_range& r,
                                                                       const detail_window::tap_range& c) {
        const dims shape{x.shape[0], x.shape[1], r.count, c.count};
        const dims ws{w.strides[0], w.strides[1], w.strides[3], w.strides[4]};
        const dims xs{x.strides[0], x.strides[1], x.strides[2] * a.stride[0], x.strides[3] * a.stride[1]};
        return {detail::strided<U>(w.data + tap * w.strides[2] + r.first * w.strides[3] + c.first * w.strides[4], shape, ws),
                detail::strided<T>(x.data + r.in * x.strides[2] + c.in * x.strides[3], shape, xs)};
    }
    template <class Device, class U, class X>
    static void compute(const window_attrs& a, U* out, const X& x, std::string_view = {}) {
        const dims s = result_shape(a, x.shape);
        const detail::strided<U> all(out, s, detail::contiguous_strides(s));
        if (s.numel() == 0) return;
        const U v = static_cast<U>(a.value());
        const std::ptrdiff_t oh = s[3], ow = s[4];
        for_each_tap(a, x.shape, oh, ow, [&](std::ptrdiff_t tap, const auto& r, const auto& c) {
            if (r.count == 0 || c.count == 0) return Device::fill(block(all, tap, 0, oh, 0, ow), v);  // padding only
            // The padding around the part that reads the image (each write once: no pass over the whole result).
            const std::ptrdiff_t r1 = r.first + r.count, c1 = c.first + c.count;
            if (r.first > 0) Device::fill(block(all, tap, 0, r.first, 0, ow), v);
            if (r1 < oh) Device::fill(block(all, tap, r1, oh, 0, ow), v);
            if (c.first > 0) Device::fill(block(all, tap, r.first, r1, 0, c.first), v);
            if (c1 < ow) Device::fill(block(all, tap, r.first, r1, c1, ow), v);
            const auto [to, from] = tap_views(a, all, x, tap, r, c);
            Device::copy_strided(to, from);
        });
    }
    template <class A, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y&, const G& g);
};

// col2im(w, x): the (N, C, kh * kw, out_h, out_w) windows w added back into an image of x's shape, each element to
// the input it was read from (windows of the padding are dropped). im2col's gradient and adjoint; x is read for its
// shape only. Its gradient is im2col of g.
struct col2im {
    static constexpr std::string_view name = "col2im";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    using attributes = window_attrs;
    template <window_attrs A, class SW, class SX>
    using static_shape = SX;
    static dims result_shape(const window_attrs& a, const dims& w, const dims& x) {
        if (!(im2col::result_shape(a, x) == w))
            throw shape_error(detail::error_prefix("shape_error", name) + "shape " + to_string(w) + " is not the windows of " +
                              to_string(x));
        return x;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const window_attrs& a) { return im2col::attrs_text(a); }
    template <class Device, class U, class W, class X>
    static void compute(const window_attrs& a, U* out, const W& w, const X& x) {
        const detail::strided<U> img(out, x.shape, detail::contiguous_strides(x.shape));
        Device::fill(img, U(0));
        if (w.shape.numel() == 0) return;
        // One strided add per kernel offset: within one offset, distinct windows read distinct inputs.
        im2col::for_each_tap(a, x.shape, w.shape[3], w.shape[4], [&](std::ptrdiff_t tap, const auto& r, const auto& c) {
            if (r.count == 0 || c.count == 0) return;  // (windows of the padding only)
            const auto [from, to] = im2col::tap_views(a, w, img, tap, r, c);
            Device::add_strided(to, from);
        });
    }
    template <class A, class W, class X, class Y, class G>
    static constexpr auto gradient(const A& a, const W&, const X&, const Y&, const G& g) {
        return detail::grads(structural_fns<W>::template apply<im2col>(with_zero(a), g), detail::no_grad{});
    }
};

template <class A, class X, class Y, class G>
constexpr auto im2col::gradient(const A& a, const X& x, const Y&, const G& g) {
    return detail::grads(structural_fns<X>::template apply<col2im>(a, g, x));
}

}  // namespace ops
}  // namespace kiln
