#pragma once
// Dropout (PyTorch's torch.nn.functional.dropout, Keras's Dropout): while training, each element is zeroed with
// probability p and the others are scaled by 1 / (1 - p), so the expected value is unchanged; in evaluation the
// input passes through. The op is ops::dropout (ops/random.hpp), counter-based: its draws are a pure function of a
// key (an int64 tensor (seed, counter)), so the tape's gradient drops the same elements, every device runs it, and
// a traced function replays it with the key it reads at each call. The key is state the caller owns and each
// dropout moves on by one in place, so the next call draws new numbers, eagerly and traced alike.
#include <bit>
#include <cstdint>
#include <string>

#include "../eager/eager.hpp"
#include "../ops/random.hpp"

namespace kiln::detail {
inline ops::dropout_attrs check_dropout(const tensor& x, double p) {
    const ops::dropout_attrs a = ops::make_dropout_attrs(p, "nn::dropout");
    x.check_valid("nn::dropout");
    if (!is_floating(x.dtype()))
        throw dtype_error("kiln: dtype_error in 'nn::dropout': the input must be floating, got " + std::string(name(x.dtype())));
    return a;
}
}  // namespace kiln::detail

namespace kiln::nn {

// A dropout key: (a seed drawn from g, counter 0), on device d. kiln::nn::dropout(x, p, key) moves its counter on by
// one and draws with the new counter.
inline tensor dropout_key(generator& g = default_generator(), const device& d = kiln::cpu) {
    return from_vector(std::vector<std::int64_t>{std::bit_cast<std::int64_t>(g.next()), 0}, dims{2}).to(d);
}

// Dropout drawing from `key` (shape (2,), int64, on x's device), which it first advances in place. In a kiln::function
// the key is state: it is read and advanced at every call, so every call drops other elements. Without training
// x passes through (and the key does not move).
template <int N = 0>
tensor dropout(const tensor& x_in, double p, tensor& key, bool training = true) {
    const ops::dropout_attrs a = detail::check_dropout(x_in, p);
    if (key.dtype() != dtype::int64 || !(key.shape() == dims{2}))
        throw value_error("kiln: value_error in 'nn::dropout': the key must be an int64 tensor of shape (2,) (kiln::nn::dropout_key), got " +
                          std::string(name(key.dtype())) + " " + to_string(key.shape()));
    if (!training || p == 0) return x_in;
    const detail::dependent_tensor<N>& x = x_in;
    // The counter moves on first, then this call draws with it from a copy (which the tape keeps for the gradient
    // while `key` moves on later).
    key += from_vector(std::vector<std::int64_t>{0, 1}, dims{2}).to(key.device());
    const tensor now = key.clone();
    return detail::apply_structural<ops::dropout, N>(a, x, now);
}

// Dropout with a key drawn from g now: for eager code. In a kiln::function the draw would happen once, while
// tracing, and every call would drop the same elements, so there it is a trace_error: keep a key (dropout_key) or
// use dropout_layer.
template <int N = 0>
tensor dropout(const tensor& x, double p, bool training = true, generator& g = default_generator()) {
    if (detail::active_tracer != nullptr || x.is_symbolic())
        throw trace_error("kiln: trace_error in 'nn::dropout': dropout(x, p, training, generator) draws its key while tracing, so every "
                          "call of the function would drop the same elements; pass a key that the function keeps "
                          "(kiln::nn::dropout(x, p, key) with key = kiln::nn::dropout_key(g)) or use kiln::nn::dropout_layer");
    (void)detail::check_dropout(x, p);
    if (!training || p == 0) return x;
    tensor key = dropout_key(g, x.device());
    return dropout<N>(x, p, key, true);
}

}  // namespace kiln::nn
