#pragma once
// Zero-copy xtensor views of kiln tensors: the adaptor reads and writes the tensor's own memory with its shape
// and strides, so slices, transposes and broadcasts stay views on both sides. The adaptor does not own the
// memory: keep the tensor (or another tensor sharing its storage) alive while the adaptor is used.
// xtensor sizes an adaptor's buffer by its shape; with kiln's strides it only takes the linear (storage-order)
// path when those strides are contiguous, so strided and broadcast views are walked by their strides.
#include <array>
#include <cstddef>
#include <vector>

#include "../core/xtensor.hpp"
#include <xtensor/xadapt.hpp>
#include <xtensor/xnoalias.hpp>

#include "tensor.hpp"

namespace kiln {
namespace detail {

template <class T>
T* checked_data(const tensor& t, const char* op) {
    if (t.dtype() != dtype_of<T>())
        throw dtype_error(detail::error_prefix("dtype_error", op) + "the tensor's dtype is " + std::string(name(t.dtype())) +
                          ", not the requested " + std::string(name(dtype_of<T>())) + "; convert with .to() first");
    if (!(t.device() == kiln::cpu))
        throw device_error(detail::error_prefix("device_error", op) + "the tensor lives on " + to_string(t.device()) +
                           "; xtensor views need host memory");
    return t.data<T>();
}

}  // namespace detail

// A dynamic-rank view: xt::xarray_adaptor over the tensor's memory (dtype T must be the tensor's dtype).
template <class T>
auto as_xtensor(const tensor& t) {
    T* p = detail::checked_data<T>(t, "as_xtensor");
    std::vector<std::size_t> shape(static_cast<std::size_t>(t.dim()));
    std::vector<std::ptrdiff_t> strides(static_cast<std::size_t>(t.dim()));
    for (int i = 0; i < t.dim(); ++i) shape[i] = static_cast<std::size_t>(t.shape()[i]), strides[i] = t.strides()[i];
    return xt::adapt(p, static_cast<std::size_t>(t.numel()), xt::no_ownership(), std::move(shape), std::move(strides));
}

// A fixed-rank view: xt::xtensor_adaptor of rank N (the tensor's rank must be N).
template <class T, std::size_t N>
auto as_xtensor(const tensor& t) {
    T* p = detail::checked_data<T>(t, "as_xtensor");
    if (t.dim() != static_cast<int>(N))
        throw shape_error("kiln: shape_error in 'as_xtensor': the tensor has shape " + to_string(t.shape()) +
                          ", not rank " + std::to_string(N));
    std::array<std::size_t, N> shape{};
    std::array<std::ptrdiff_t, N> strides{};
    for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(t.shape()[i]), strides[i] = t.strides()[i];
    return xt::adapt(p, static_cast<std::size_t>(t.numel()), xt::no_ownership(), shape, strides);
}

}  // namespace kiln
