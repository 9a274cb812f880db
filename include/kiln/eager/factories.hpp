#pragma once
// Making tensors: constants, ranges, random numbers, copies of C++ containers and zero-copy wraps.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <numbers>
#include <vector>

#include "elementwise.hpp"
#include "random.hpp"

namespace kiln {

namespace detail {
// full's result spec (op_params::spec) for dtype d: its value, read at every index of its shape; nothing of the
// shape's size is allocated. False where the shape is refused, so that the op runs and gives its own error. (One
// function for every dtype: full is inline, and a spec per dtype would be compiled in every translation unit.)
inline bool full_spec(dtype d, std::span<const std::int64_t> p, tensor& out);
}  // namespace detail

// A tensor of `shape` filled with `value`.
inline tensor full(const dims& shape, double value, dtype d = dtype::float32) {
    if (detail::active_tracer) [[unlikely]] {
        detail::op_params p;
        p.add_dims(shape);
        p.add_number(value);
        p.spec = [d](std::span<const tensor>, std::span<const std::int64_t> q, tensor& out) { return detail::full_spec(d, q, out); };
        p.spec_is_value = true;
        return detail::active_tracer->record(
            "full", "shape=" + detail::dims_text(shape) + " value=" + detail::number_text(value) + " dtype=" + std::string(name(d)), {},
            [r = shape.rank, d](std::span<const tensor>, std::span<const std::int64_t> q) {
                return full(detail::param_dims(q, 0, r), detail::param_number(q[static_cast<std::size_t>(r)]), d);
            },
            std::move(p));
    }
    tensor t(d, shape);
    detail::dispatch(d, [&]<class T>() {
        T* p = t.data<T>();
        const T v = value_cast<T>(value);
        for (std::ptrdiff_t i = 0, n = t.numel(); i < n; ++i) p[i] = v;
    });
    return t;
}
inline bool detail::full_spec(dtype d, std::span<const std::int64_t> p, tensor& out) {
    if (p.empty() || p.size() - 1 > static_cast<std::size_t>(max_rank)) return false;
    const dims shape = param_dims(p, 0, static_cast<int>(p.size() - 1));
    try {
        (void)checked_bytes(checked_numel(shape, "full"), size_of(d), shape, "full");
    } catch (const error&) {
        return false;
    }
    out = full(dims{}, param_number(p.back()), d).broadcast_to(shape);  // (a spec runs untraced: result_of_op)
    return true;
}
inline tensor zeros(const dims& shape, dtype d = dtype::float32) { return full(shape, 0.0, d); }
inline tensor ones(const dims& shape, dtype d = dtype::float32) { return full(shape, 1.0, d); }

// The same on a device (kiln::cpu or kiln::cuda): filled where it lives, nothing copied but the value.
inline tensor full(const dims& shape, double value, dtype d, const device& dev) {
    if (dev.type == device_type::cpu) return full(shape, value, d);
    if (detail::active_tracer) [[unlikely]] {  // a traced function on the device: filled there at every call
        detail::op_params p;
        p.add_dims(shape);
        p.add_number(value);
        return detail::active_tracer->record(
            "full", "shape=" + detail::dims_text(shape) + " value=" + detail::number_text(value) + " dtype=" + std::string(name(d)) +
                        " device=" + to_string(dev),
            {},
            [r = shape.rank, d, dev](std::span<const tensor>, std::span<const std::int64_t> q) {
                return full(detail::param_dims(q, 0, r), detail::param_number(q[static_cast<std::size_t>(r)]), d, dev);
            },
            std::move(p));
    }
    tensor t(d, shape, dev);
    t.fill_(value);
    return t;
}
inline tensor zeros(const dims& shape, dtype d, const device& dev) { return full(shape, 0.0, d, dev); }
inline tensor ones(const dims& shape, dtype d, const device& dev) { return full(shape, 1.0, d, dev); }
// A tensor of t's shape, dtype and device filled with `value` (zeros_like, ones_like, full_like).
inline tensor full_like(const tensor& t, double value) { return full(t.shape(), value, t.dtype(), t.device()); }
inline tensor zeros_like(const tensor& t) { return full_like(t, 0.0); }
inline tensor ones_like(const tensor& t) { return full_like(t, 1.0); }

// start, start + step, ... below stop (like numpy.arange), of dtype d.
inline tensor arange(double start, double stop, double step, dtype d) {
    if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
        throw value_error("kiln: value_error in 'arange': start, stop and step must be finite and step nonzero");
    // The count is computed in double and checked before it becomes an integer (arange(0, 1e300) has no answer).
    const double count = std::max(0.0, std::ceil((stop - start) / step));
    if (!(count <= static_cast<double>(detail::max_bytes / static_cast<std::ptrdiff_t>(size_of(d)))))
    {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%.6g elements from %.6g to %.6g by %.6g", count, start, stop, step);
        throw value_error("kiln: value_error in 'arange': " + std::string(buf) + " are more than kiln can address");
    }
    const auto n = static_cast<std::ptrdiff_t>(count);
    tensor t(d, dims{n});
    detail::dispatch(d, [&]<class T>() {
        T* p = t.data<T>();
        for (std::ptrdiff_t i = 0; i < n; ++i) p[i] = value_cast<T>(start + static_cast<double>(i) * step);
    });
    return t;
}
// Without a dtype, as PyTorch infers it from its arguments: int64 when start, stop and step are whole numbers,
// float32 otherwise (so arange(0, 1, 0.25) is 0, 0.25, 0.5, 0.75, not four zeros).
inline tensor arange(double start, double stop, double step = 1.0) {
    const auto whole = [](double v) { return std::isfinite(v) && v == std::trunc(v); };
    return arange(start, stop, step, whole(start) && whole(stop) && whole(step) ? dtype::int64 : dtype::float32);
}
inline tensor arange(double stop) { return arange(0, stop); }
inline tensor arange(double stop, dtype d) { return arange(0, stop, 1, d); }  // arange(6, kiln::float32)

// n points from a to b inclusive.
inline tensor linspace(double a, double b, std::ptrdiff_t n, dtype d = dtype::float32) {
    if (n < 0) throw value_error("kiln: value_error in 'linspace': the number of points must be non-negative, got " + std::to_string(n));
    tensor t(d, dims{n});
    detail::dispatch(d, [&]<class T>() {
        T* p = t.data<T>();
        for (std::ptrdiff_t i = 0; i < n; ++i)
            p[i] = value_cast<T>(n == 1 ? a : a + (b - a) * static_cast<double>(i) / static_cast<double>(n - 1));
    });
    return t;
}

// The same on a device: made on the host and copied over (one transfer).
inline tensor arange(double start, double stop, double step, dtype d, const device& dev) {
    return arange(start, stop, step, d).to(dev);
}
inline tensor linspace(double a, double b, std::ptrdiff_t n, dtype d, const device& dev) { return linspace(a, b, n, d).to(dev); }

// A copy of C++ data with a shape (default: one dimension).
template <class T>
tensor from_vector(const std::vector<T>& v, dims shape) {
    static_assert(is_dtype_v<T>, "kiln::from_vector: element types are bool, int32_t, int64_t, float and double.");
    if (detail::checked_numel(shape, "from_vector") != static_cast<std::ptrdiff_t>(v.size()))
        throw shape_error("kiln: shape_error in 'from_vector': " + std::to_string(v.size()) + " values do not fill shape " +
                          to_string(shape));
    tensor t(dtype_of<T>(), shape);
    std::copy(v.begin(), v.end(), t.data<T>());
    return t;
}
template <class T>
tensor from_vector(const std::vector<T>& v, dims shape, const device& dev) {
    return from_vector(v, shape).to(dev);
}
template <class T>
tensor from_vector(const std::vector<T>& v) {
    return from_vector(v, dims{static_cast<std::ptrdiff_t>(v.size())});
}
// A vector of the values: kiln::from_values({1.f, 2.f, 3.f}) has shape (3,).
template <class T>
tensor from_values(std::initializer_list<T> v) {
    return from_vector(std::vector<T>(v));
}
template <class T>
tensor from_values(std::initializer_list<T> v, dims shape) {
    return from_vector(std::vector<T>(v), shape);
}
template <class T>
tensor from_values(std::initializer_list<T> v, dims shape, const device& dev) {
    return from_vector(std::vector<T>(v), shape).to(dev);
}

// A copy of an xtensor container or expression.
template <class X>
    requires requires(const X& x) { x.shape(); x.begin(); }
tensor from_xtensor(const X& x) {
    using T = std::remove_cv_t<typename X::value_type>;
    dims shape;
    shape.assign(x.shape().begin(), x.shape().size());
    tensor t(dtype_of<T>(), shape);
    std::copy(x.begin(), x.end(), t.data<T>());  // row-major iteration
    return t;
}

// Zero-copy: a tensor over external memory. `keeper` keeps it alive (pass {} if the caller guarantees it).
// `data` may be null only for a shape with no elements; extents must be non-negative.
template <class T>
tensor wrap(T* data, const dims& shape, std::shared_ptr<void> keeper = {}) {
    const std::ptrdiff_t n = detail::checked_numel(shape, "wrap");
    const std::size_t bytes = detail::checked_bytes(n, sizeof(T), shape, "wrap");
    if (data == nullptr && n > 0)
        throw value_error("kiln: value_error in 'wrap': a null pointer cannot hold shape " + to_string(shape));
    auto s = std::make_shared<detail::storage>();
    s->data = reinterpret_cast<std::byte*>(const_cast<std::remove_const_t<T>*>(data));
    s->bytes = bytes;
    s->keeper = std::move(keeper);
    return tensor(std::move(s), dtype_of<std::remove_const_t<T>>(), shape, detail::contiguous_strides(shape), 0);
}

// The generator used when none is passed; kiln::manual_seed(s) makes runs repeatable.
inline generator& default_generator() {
    thread_local generator g;
    return g;
}
inline void manual_seed(std::uint64_t seed) { default_generator().seed(seed); }

// Uniform in [low, high).
inline tensor uniform(const dims& shape, double low, double high, dtype d = dtype::float32,
                      generator& g = default_generator()) {
    if (!detail::is_floating(d)) throw dtype_error("kiln: dtype_error in 'uniform': the dtype must be float32 or float64");
    if (!std::isfinite(low) || !std::isfinite(high) || !std::isfinite(high - low) || low > high)
        throw value_error("kiln: value_error in 'uniform': the bounds must be finite with low <= high, got [" +
                          detail::number_text(low) + ", " + detail::number_text(high) + ")");
    tensor t(d, shape);
    detail::dispatch(d, [&]<class T>() {
        T* p = t.data<T>();
        // low + (high - low) * u can round up to high (a float32 of u just below 1 is 1): the largest T below high
        // takes its place, so that every value lies in [low, high) as PyTorch's and NumPy's do (low == high gives low).
        const T top = static_cast<T>(high) > static_cast<T>(low) ? std::nextafter(static_cast<T>(high), static_cast<T>(low))
                                                               : static_cast<T>(low);
        for (std::ptrdiff_t i = 0, n = t.numel(); i < n; ++i) {
            const T v = static_cast<T>(low + (high - low) * g.uniform());
            p[i] = v < static_cast<T>(high) ? v : top;
        }
    });
    return t;
}
inline tensor rand(const dims& shape, dtype d = dtype::float32, generator& g = default_generator()) {
    return uniform(shape, 0.0, 1.0, d, g);
}
inline tensor randn(const dims& shape, dtype d = dtype::float32, generator& g = default_generator()) {
    if (!detail::is_floating(d)) throw dtype_error("kiln: dtype_error in 'randn': the dtype must be float32 or float64");
    tensor t(d, shape);
    detail::dispatch(d, [&]<class T>() {
        T* p = t.data<T>();
        for (std::ptrdiff_t i = 0, n = t.numel(); i < n; ++i) p[i] = static_cast<T>(g.normal());
    });
    return t;
}

// Random tensors on a device: drawn on the host from the same generator (so a seed gives the same numbers on every
// device) and copied to the device.
inline tensor uniform(const dims& shape, double low, double high, dtype d, const device& dev,
                      generator& g = default_generator()) {
    return uniform(shape, low, high, d, g).to(dev);
}
inline tensor rand(const dims& shape, dtype d, const device& dev, generator& g = default_generator()) {
    return rand(shape, d, g).to(dev);
}
inline tensor randn(const dims& shape, dtype d, const device& dev, generator& g = default_generator()) {
    return randn(shape, d, g).to(dev);
}

// The generator right after the shape (float32), as PyTorch's generator= reads: kiln::randn({3, 4}, g).
inline tensor uniform(const dims& shape, double low, double high, generator& g) { return uniform(shape, low, high, dtype::float32, g); }
inline tensor rand(const dims& shape, generator& g) { return rand(shape, dtype::float32, g); }
inline tensor randn(const dims& shape, generator& g) { return randn(shape, dtype::float32, g); }

}  // namespace kiln
