#pragma once
// Eager-mode layers and activations, written once against the op vocabulary (the losses: losses.hpp).
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "../eager/eager.hpp"
#include "activations.hpp"
#include "conv.hpp"
#include "dropout.hpp"
#include "losses.hpp"
#include "normalization.hpp"

namespace kiln::nn {

using activation = std::function<tensor(const tensor&)>;


// Glorot (Xavier) uniform initialization for a (fan_in, fan_out) weight.
// The same initializer as graph mode's kiln::init::glorot_uniform (eager/init.hpp).
inline tensor glorot_uniform(std::ptrdiff_t fan_in, std::ptrdiff_t fan_out, generator& g = default_generator(),
                             dtype d = dtype::float32) {
    return init::glorot_uniform::make(dims{fan_in, fan_out}, d, g);
}

// Anything with parameters and a forward pass.
class module {
public:
    virtual ~module() = default;
    virtual tensor forward(const tensor& x) = 0;
    virtual std::vector<variable*> parameters() = 0;
    tensor operator()(const tensor& x) { return forward(x); }
    // Moves every parameter to device d (model.to(kiln::cuda)), as PyTorch's Module.to does. Make the optimizer after
    // the move: its slots are made on its parameters' device.
    auto to(const device& d) -> module& {
        for (variable* p : parameters())
            if (!(p->device() == d)) *p = variable(p->to(d));
        move_state(d);
        return *this;
    }
    // Training or evaluation mode (PyTorch's train() and eval(); a module starts in training mode): layers that
    // behave differently while training read it (dropout_layer passes its input through in evaluation), and a
    // sequential model sets it on every layer.
    virtual auto train(bool on = true) -> module& {
        training_ = on;
        return *this;
    }
    auto eval() -> module& { return train(false); }
    bool training() const noexcept { return training_; }
    // State that belongs to the model but is not trained (PyTorch's buffers: batch_norm_layer's running statistics).
    // A checkpoint of the module (kiln::save_checkpoint(path, model, opt)) holds them beside the parameters.
    virtual std::vector<variable*> buffers() { return {}; }

protected:
    // State that is not a parameter (a dropout layer's key) moves with the module (to()).
    virtual void move_state(const device&) {}
    bool training_ = true;
};

// y = activation(x @ w + b), w of shape (in, out) with Glorot initialization and b zeros. (A class template with
// one instance, kiln::nn::dense, so that its forward pass compiles only where a dense layer is made.)
template <int N = 0>
class basic_dense : public module {
public:
    basic_dense(std::ptrdiff_t in, std::ptrdiff_t out, activation act = identity, generator& g = default_generator(),
                dtype d = dtype::float32)
        : w(glorot_uniform(in, out, g, d)), b(zeros({out}, d)), act_(std::move(act)) {}

    tensor forward(const tensor& x_in) override {
        const detail::dependent_tensor<N>& x = x_in;
        if (x.dim() < 1 || x.shape()[x.dim() - 1] != w.shape()[0])
            throw shape_error("kiln: shape_error in 'nn::dense': input " + to_string(x.shape()) + " does not end in " +
                              std::to_string(w.shape()[0]) + " features");
        return act_(matmul(x, w) + b);
    }
    std::vector<variable*> parameters() override { return {&w, &b}; }

    variable w, b;

private:
    activation act_;
};
using dense = basic_dense<>;

namespace detail_layers {
// A convolution's weight with Glorot uniform initialization over the fans c / groups * kh * kw and m / groups * kh *
// kw (Keras's Conv2D and Conv2DTranspose): (m, c / groups, kh, kw) for conv2d, (c, m / groups, kh, kw) transposed.
inline tensor conv_weight(const char* layer, std::ptrdiff_t c, std::ptrdiff_t m, std::array<std::ptrdiff_t, 2> k, std::ptrdiff_t groups,
                          bool transposed, generator& g, dtype d) {
    if (c < 1 || m < 1 || k[0] < 1 || k[1] < 1 || groups < 1 || c % groups != 0 || m % groups != 0)
        throw value_error(std::string("kiln: value_error in 'nn::") + layer + "': " + std::to_string(c) + " input and " +
                          std::to_string(m) + " output channels, kernel (" + std::to_string(k[0]) + ", " + std::to_string(k[1]) +
                          ") and " + std::to_string(groups) + " groups: each must be positive, and the groups must divide the channels");
    const double fan_in = static_cast<double>(c / groups * k[0] * k[1]), fan_out = static_cast<double>(m / groups * k[0] * k[1]);
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    return transposed ? uniform({c, m / groups, k[0], k[1]}, -limit, limit, d, g) : uniform({m, c / groups, k[0], k[1]}, -limit, limit, d, g);
}
}  // namespace detail_layers

// y = activation(conv2d(x, w) + b) over (batch, channels, height, width) inputs (nn/conv.hpp): w (out_channels,
// in_channels / groups, kh, kw) with Glorot uniform initialization over the fans in_channels / groups * kh * kw and
// out_channels / groups * kh * kw (as Keras's Conv2D), b zeros.
template <int N = 0>
class basic_conv2d_layer : public module {
public:
    basic_conv2d_layer(std::ptrdiff_t in_channels, std::ptrdiff_t out_channels, std::array<std::ptrdiff_t, 2> kernel,
                       conv2d_options options = {}, activation act = identity, generator& g = default_generator(),
                       dtype d = dtype::float32)
        : w(detail_layers::conv_weight("conv2d_layer", in_channels, out_channels, kernel, options.groups, false, g, d)),
          b(zeros({out_channels}, d)), options_(options), act_(std::move(act)) {}

    tensor forward(const tensor& x) override { return act_(conv2d<N>(x, w, b, options_)); }
    std::vector<variable*> parameters() override { return {&w, &b}; }

    variable w, b;

private:
    conv2d_options options_;
    activation act_;
};
using conv2d_layer = basic_conv2d_layer<>;

// y = activation(conv_transpose2d(x, w) + b) (nn/conv.hpp): w (in_channels, out_channels / groups, kh, kw) with
// Glorot uniform initialization over conv2d_layer's fans (Keras's Conv2DTranspose), b zeros.
template <int N = 0>
class basic_conv_transpose2d_layer : public module {
public:
    basic_conv_transpose2d_layer(std::ptrdiff_t in_channels, std::ptrdiff_t out_channels, std::array<std::ptrdiff_t, 2> kernel,
                                 conv_transpose2d_options options = {}, activation act = identity, generator& g = default_generator(),
                                 dtype d = dtype::float32)
        : w(detail_layers::conv_weight("conv_transpose2d_layer", in_channels, out_channels, kernel, options.groups, true, g, d)),
          b(zeros({out_channels}, d)), options_(options), act_(std::move(act)) {}

    tensor forward(const tensor& x) override { return act_(conv_transpose2d<N>(x, w, b, options_)); }
    std::vector<variable*> parameters() override { return {&w, &b}; }

    variable w, b;

private:
    conv_transpose2d_options options_;
    activation act_;
};
using conv_transpose2d_layer = basic_conv_transpose2d_layer<>;

// Pooling and flattening as modules, for nn::sequential: max_pool2d_layer({2, 2}), avg_pool2d_layer({2, 2}, {...}),
// flatten_layer() ((batch, ...) -> (batch, everything else)).
// (Class templates with one instance each, as basic_dense: their forward passes compile only where one is made.)
template <bool Max, int N = 0>
class basic_pool2d_layer : public module {
public:
    explicit basic_pool2d_layer(std::array<std::ptrdiff_t, 2> kernel, pool2d_options options = {}) : kernel_(kernel), options_(options) {}
    tensor forward(const tensor& x) override {
        return Max ? max_pool2d<N>(x, kernel_, options_) : avg_pool2d<N>(x, kernel_, options_);
    }
    std::vector<variable*> parameters() override { return {}; }

private:
    std::array<std::ptrdiff_t, 2> kernel_;
    pool2d_options options_;
};
using max_pool2d_layer = basic_pool2d_layer<true>;
using avg_pool2d_layer = basic_pool2d_layer<false>;
class flatten_layer : public module {
public:
    tensor forward(const tensor& x) override {
        if (x.dim() < 1) throw shape_error("kiln: shape_error in 'nn::flatten_layer': the input needs a batch dimension, got a scalar");
        return x.reshape({x.shape()[0], -1});
    }
    std::vector<variable*> parameters() override { return {}; }
};

// An activation as a layer of its own (PyTorch's nn.ReLU, nn.Tanh, ...): activation_layer(kiln::nn::relu).
class activation_layer : public module {
public:
    explicit activation_layer(activation act) : act_(std::move(act)) {
        if (!act_) throw value_error("kiln: value_error in 'nn::activation_layer': the activation is empty");
    }
    tensor forward(const tensor& x) override { return act_(x); }
    std::vector<variable*> parameters() override { return {}; }

private:
    activation act_;
};

// A lookup table: each integer id of the input (int32 or int64, any shape) becomes row `id` of w (num, dim), so
// the result has the ids' shape and one more axis of `dim`. w starts normally distributed, N(0, 1), as PyTorch's
// nn.Embedding. The gradient adds each row of the result's gradient back to the row it came from (index_select's),
// so only the rows used change. An id must lie in [0, num): eagerly one outside is a value_error naming nn::embedding;
// traced (where ids have no values yet) it is index_select's value_error at the call, for negative ids too (they
// never count from the end).
template <int N = 0>
class basic_embedding : public module {
public:
    basic_embedding(std::ptrdiff_t num, std::ptrdiff_t dim, generator& g = default_generator(), dtype d = dtype::float32)
        : w(make_table(num, dim, g, d)) {}

    tensor forward(const tensor& ids_in) override {
        const detail::dependent_tensor<N>& ids = ids_in;
        if (ids.dtype() != dtype::int32 && ids.dtype() != dtype::int64)
            throw dtype_error("kiln: dtype_error in 'nn::embedding': ids must be int32 or int64, got " + std::string(name(ids.dtype())));
        if (ids.dim() + 1 > max_rank)
            throw shape_error("kiln: shape_error in 'nn::embedding': ids of rank " + std::to_string(ids.dim()) +
                              " leave no room for the embedding's axis");
        const std::ptrdiff_t num = w.shape()[0];
        // (While a trace records, even ids with values are read by the ops it records: no item() then.)
        const bool traced = ids.is_symbolic() || detail::active_tracer != nullptr;
        if (!traced && ids.numel() > 0) {
            const auto low = kiln::min(ids).template item<std::int64_t>(), high = kiln::max(ids).template item<std::int64_t>();
            if (low < 0 || high >= num)
                throw value_error("kiln: value_error in 'nn::embedding': id " + std::to_string(low < 0 ? low : high) +
                                  " is out of range for a table of " + std::to_string(num) + " rows");
        }
        // Traced, a negative id is moved below -num, so that index_select refuses it rather than counting from the
        // end (eagerly the check above has seen every id).
        const detail::dependent_tensor<N>& table = w;
        const detail::dependent_tensor<N> flat = ids.reshape({-1});
        const detail::dependent_tensor<N> safe = traced ? tensor(kiln::where(flat < 0, flat - num, flat)) : tensor(flat);
        dims out = ids.shape();
        out.rank = ids.dim() + 1;
        out[ids.dim()] = w.shape()[1];
        return kiln::index_select(table, 0, safe).reshape(out);
    }
    std::vector<variable*> parameters() override { return {&w}; }

    variable w;

private:
    static tensor make_table(std::ptrdiff_t num, std::ptrdiff_t dim, generator& g, dtype d) {
        if (num < 1 || dim < 1)
            throw value_error("kiln: value_error in 'nn::embedding': " + std::to_string(num) + " rows of " + std::to_string(dim) +
                              ": both must be positive");
        return randn({num, dim}, d, g);
    }
};
using embedding = basic_embedding<>;

// nn.LayerNorm: layer normalization over `normalized_shape` with a weight of ones and a bias of zeros (both
// trainable) unless `elementwise_affine` is false, when it has no parameters.
template <int N = 0>
class basic_layer_norm : public module {
public:
    explicit basic_layer_norm(dims normalized_shape, double eps = 1e-5, bool elementwise_affine = true, dtype d = dtype::float32)
        : w(ones(checked(normalized_shape, eps), d)), b(zeros(normalized_shape, d)), shape_(normalized_shape), eps_(eps),
          affine_(elementwise_affine) {}

    tensor forward(const tensor& x) override {
        return affine_ ? layer_norm<N>(x, shape_, w, b, eps_) : layer_norm<N>(x, shape_, tensor(), tensor(), eps_);
    }
    std::vector<variable*> parameters() override {
        if (!affine_) return {};
        return {&w, &b};
    }
    const dims& normalized_shape() const noexcept { return shape_; }
    double eps() const noexcept { return eps_; }

    variable w, b;  // (unused when elementwise_affine is false)

private:
    static const dims& checked(const dims& s, double eps) {
        if (s.rank < 1)
            throw value_error("kiln: value_error in 'nn::layer_norm_layer': the normalized shape must name at least one axis");
        for (int i = 0; i < s.rank; ++i)
            if (s[i] < 1)
                throw value_error("kiln: value_error in 'nn::layer_norm_layer': the normalized shape " + to_string(s) +
                                  " must have positive extents");
        if (!(eps >= 0) || !std::isfinite(eps))
            throw value_error("kiln: value_error in 'nn::layer_norm_layer': eps must be finite and not negative, got " +
                              kiln::detail::number_text(eps));
        return s;
    }
    dims shape_;
    double eps_;
    bool affine_;
};
using layer_norm_layer = basic_layer_norm<>;

// nn.RMSNorm: RMS normalization over `normalized_shape` with a trainable weight of ones unless `elementwise_affine`
// is false; eps empty: the machine epsilon of the input's dtype.
template <int N = 0>
class basic_rms_norm : public module {
public:
    explicit basic_rms_norm(dims normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true,
                            dtype d = dtype::float32)
        : w(ones(normalized_shape, d)), shape_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
        kiln::detail::check_normalization("nn::rms_norm_layer", ones(normalized_shape, d), normalized_shape, tensor(), tensor(),
                                          eps.value_or(0.0));
    }
    tensor forward(const tensor& x) override { return rms_norm<N>(x, shape_, affine_ ? tensor(w) : tensor(), eps_); }
    std::vector<variable*> parameters() override {
        if (!affine_) return {};
        return {&w};
    }

    variable w;  // (unused when elementwise_affine is false)

private:
    dims shape_;
    std::optional<double> eps_;
    bool affine_;
};
using rms_norm_layer = basic_rms_norm<>;

// nn.GroupNorm: group normalization of (N, num_channels, ...) inputs in num_groups groups, with a trainable weight of
// ones and bias of zeros per channel unless affine is false.
template <int N = 0>
class basic_group_norm : public module {
public:
    basic_group_norm(std::ptrdiff_t num_groups, std::ptrdiff_t num_channels, double eps = 1e-5, bool affine = true, dtype d = dtype::float32)
        : w(ones({checked(num_groups, num_channels, eps)}, d)), b(zeros({num_channels}, d)), groups_(num_groups), eps_(eps), affine_(affine) {}
    tensor forward(const tensor& x) override {
        return affine_ ? group_norm<N>(x, groups_, w, b, eps_) : group_norm<N>(x, groups_, tensor(), tensor(), eps_);
    }
    std::vector<variable*> parameters() override {
        if (!affine_) return {};
        return {&w, &b};
    }

    variable w, b;  // (unused when affine is false)

private:
    static std::ptrdiff_t checked(std::ptrdiff_t g, std::ptrdiff_t c, double eps) {
        if (g < 1 || c < 1 || c % g != 0 || !(eps >= 0) || !std::isfinite(eps))
            throw value_error("kiln: value_error in 'nn::group_norm_layer': " + std::to_string(g) + " groups must divide " +
                              std::to_string(c) + " channels (both positive), and eps (" + kiln::detail::number_text(eps) +
                              ") must be finite and not negative");
        return c;
    }
    std::ptrdiff_t groups_;
    double eps_;
    bool affine_;
};
using group_norm_layer = basic_group_norm<>;

// nn.BatchNorm1d/2d/3d: batch normalization of (N, C, ...) inputs (nn::batch_norm) over every axis but the channels,
// with a trainable weight of ones and bias of zeros (unless affine is false) and running statistics (mean 0,
// variance 1 at first) that training moves and evaluation (eval()) uses. The running statistics are variables but
// not parameters: parameters() leaves them out, buffers() lists them (a checkpoint of the module holds them), to()
// moves them, and a traced function reads (and, training, assigns) them at every call.
template <int N = 0>
class basic_batch_norm_layer : public module {
public:
    explicit basic_batch_norm_layer(std::ptrdiff_t num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                                    dtype d = dtype::float32)
        : w(ones({checked(num_features)}, d)), b(zeros({num_features}, d)), running_mean(zeros({num_features}, d)),
          running_var(ones({num_features}, d)), eps_(eps), momentum_(momentum), affine_(affine) {}

    tensor forward(const tensor& x) override {
        return affine_ ? batch_norm<N>(x, running_mean, running_var, w, b, training_, momentum_, eps_)
                       : batch_norm<N>(x, running_mean, running_var, tensor(), tensor(), training_, momentum_, eps_);
    }
    std::vector<variable*> parameters() override {
        if (!affine_) return {};
        return {&w, &b};
    }
    std::vector<variable*> buffers() override { return {&running_mean, &running_var}; }

    variable w, b;                          // (unused when affine is false)
    variable running_mean, running_var;     // not parameters

private:
    static std::ptrdiff_t checked(std::ptrdiff_t n) {
        if (n < 1)
            throw value_error("kiln: value_error in 'nn::batch_norm_layer': the number of features must be positive, got " +
                              std::to_string(n));
        return n;
    }
    void move_state(const device& d) override {
        if (!(running_mean.device() == d)) running_mean = variable(running_mean.to(d));
        if (!(running_var.device() == d)) running_var = variable(running_var.to(d));
    }
    double eps_, momentum_;
    bool affine_;
};
using batch_norm_layer = basic_batch_norm_layer<>;

// nn.Dropout: while training, each element zeroed with probability p and the others scaled by 1 / (1 - p); in
// evaluation (eval()) the input passes through. The layer keeps its key (nn::dropout_key, a seed drawn from g), which
// every training call moves on, eagerly and in a kiln::function, where the key is state read and advanced at each
// call. The key moves with the layer (to()).
template <int N = 0>
class basic_dropout_layer : public module {
public:
    explicit basic_dropout_layer(double p = 0.5, generator& g = default_generator())
        : key(dropout_key(g)), p_(ops::make_dropout_attrs(p, "nn::dropout_layer").p()) {}
    tensor forward(const tensor& x) override {
        if (!training_) return x;
        if (!(key.device() == x.device())) {
            if (detail::active_tracer != nullptr || x.is_symbolic())
                throw device_error("kiln: device_error in 'nn::dropout_layer': its key lives on " + to_string(key.device()) +
                                   " and the input on " + to_string(x.device()) + "; move the layer (or the model) with .to(" +
                                   to_string(x.device()) + ") before tracing");
            key = key.to(x.device());
        }
        return dropout<N>(x, p_, key, true);
    }
    std::vector<variable*> parameters() override { return {}; }
    double p() const noexcept { return p_; }

    tensor key;  // (seed, counter): int64 of shape (2,)

private:
    void move_state(const device& d) override {
        if (!(key.device() == d)) key = key.to(d);
    }
    double p_;
};
using dropout_layer = basic_dropout_layer<>;

// Modules applied in order.
class sequential : public module {
public:
    sequential() = default;
    template <class... M>
    explicit sequential(M... ms) {
        (layers_.push_back(std::make_unique<M>(std::move(ms))), ...);
    }
    template <class M>
    sequential& add(M m) {
        layers_.push_back(std::make_unique<M>(std::move(m)));
        return *this;
    }
    tensor forward(const tensor& x) override {
        tensor h = x;
        for (auto& l : layers_) h = l->forward(h);
        return h;
    }
    std::vector<variable*> parameters() override {
        std::vector<variable*> out;
        for (auto& l : layers_)
            for (variable* p : l->parameters()) out.push_back(p);
        return out;
    }
    std::vector<variable*> buffers() override {
        std::vector<variable*> out;
        for (auto& l : layers_)
            for (variable* b : l->buffers()) out.push_back(b);
        return out;
    }
    auto train(bool on = true) -> module& override {
        training_ = on;
        for (auto& l : layers_) l->train(on);
        return *this;
    }

    // The layers, in order: model[0], model.size(), model.layers(), model.layer<kiln::nn::dense>(0).w.
    std::size_t size() const noexcept { return layers_.size(); }
    auto operator[](std::size_t i) const -> module& {
        if (i >= layers_.size())
            throw value_error("kiln: value_error in 'nn::sequential': layer " + std::to_string(i) + " is out of range for " +
                              std::to_string(layers_.size()) + " layers");
        return *layers_[i];
    }
    std::vector<module*> layers() const {
        std::vector<module*> out;
        for (const auto& l : layers_) out.push_back(l.get());
        return out;
    }
    template <class M>
    M& layer(std::size_t i) const {
        auto* m = dynamic_cast<M*>(&(*this)[i]);
        if (!m)
            throw value_error("kiln: value_error in 'nn::sequential': layer " + std::to_string(i) + " is not of the requested type");
        return *m;
    }

private:
    void move_state(const device& d) override {
        for (auto& l : layers_) l->to(d);  // (their parameters are moved already: to() moves only what is elsewhere)
    }
    std::vector<std::unique_ptr<module>> layers_;
};

}  // namespace kiln::nn

namespace kiln {
// softmax and log_softmax are also reachable as kiln::softmax and kiln::log_softmax, as in PyTorch.
using nn::log_softmax;
using nn::softmax;
}  // namespace kiln

