#pragma once
// Dropout as one mode-neutral structural op (ops/structural.hpp). Its randomness is counter-based: element i of a
// dropout with key (seed, counter) keeps or drops by a hash of (seed, counter, i) (detail_random below, which the
// docs and test/nn.cpp state and check), so the op is a pure function
// of its operands. That is what lets every mode run it: a traced function replays it with the key it reads at
// each call (the caller advances the key in place, as state), a device computes each element on its own, and the
// gradient is the same op applied to g with the same key, which drops the same elements (no mask is stored).
#include <bit>
#include <cstdio>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../core/shape.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// The drop probability, as its bits (a structural attribute value).
struct dropout_attrs {
    std::uint64_t p_bits = 0;
    constexpr double p() const { return std::bit_cast<double>(p_bits); }
    friend constexpr bool operator==(const dropout_attrs&, const dropout_attrs&) = default;
};

// The attributes of a drop probability p, which must lie in [0, 1] (a value_error naming `who` otherwise).
inline dropout_attrs make_dropout_attrs(double p, std::string_view who = "dropout") {
    if (!(p >= 0 && p <= 1)) {
        char got[32];
        std::snprintf(got, sizeof got, "%g", p);
        throw value_error(detail::error_prefix("value_error", who) + "the drop probability must lie in [0, 1], got " + got);
    }
    return dropout_attrs{std::bit_cast<std::uint64_t>(p)};
}

namespace detail_random {

// SplitMix64's output function: a bijection of 64-bit words that spreads every input bit over the output.
KILN_HD constexpr std::uint64_t mix64(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A 32-bit bijection with full avalanche (two multiplies: "lowbias32"), cheap enough to run per element in SIMD
// lanes (32-bit multiplies are one AVX2 instruction; 64-bit ones are not).
KILN_HD constexpr std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

// The stream of key (seed, counter): a word that differs for every counter of one seed (mix64 is a bijection).
KILN_HD constexpr std::uint64_t stream(std::uint64_t seed, std::uint64_t counter) { return mix64(seed ^ mix64(counter)); }

// The 32-bit key of block b (elements b * 2^32 to (b + 1) * 2^32 - 1) of a stream.
KILN_HD constexpr std::uint32_t block_key(std::uint64_t stream, std::uint64_t block) {
    return static_cast<std::uint32_t>(mix64(stream + block));
}

// Element i of a stream is kept when hash32(block_key(stream, i >> 32) ^ low 32 bits of i) >= p * 2^32, so with
// probability 1 - p (to 2^-32). The threshold ceil(p * 2^32) and the factor of a kept element: p = 1 (or a p so
// close to 1 that no hash reaches it) keeps none, as a threshold of 0 with a factor of 0.
struct keep_rule {
    std::uint32_t threshold;
    double scale;
};
KILN_HD constexpr keep_rule rule_of(double p) {
    const double t = p * 4294967296.0;  // (exact: a power of two)
    if (!(t < 4294967295.0)) return {0, 0.0};
    std::uint32_t threshold = static_cast<std::uint32_t>(t);  // floor, then up to the ceiling
    if (static_cast<double>(threshold) < t) ++threshold;
    return {threshold, 1.0 / (1.0 - p)};
}

// x times the factor where the element is kept and times 0 where it is dropped (so a NaN stays NaN, as in PyTorch
// and TensorFlow, whose dropout multiplies by a mask). Branch-free, so a loop of it vectorizes.
template <class T>
KILN_HD constexpr T dropped(T x, std::uint32_t key, std::uint32_t low, std::uint32_t threshold, T scale) {
    if constexpr (std::is_floating_point_v<T>) return x * (static_cast<T>(hash32(key ^ low) >= threshold) * scale);
    else return x;  // (never called: nn::dropout takes floating tensors only; the seam instantiates every dtype)
}

}  // namespace detail_random

// dropout(x, key): x with each element dropped (set to zero) with probability p and the others scaled by
// 1 / (1 - p), by the counter-based draws of key = (seed, counter), an int64 tensor of shape (2,) (the element at
// row-major position i draws the i-th number of the key's stream; the caller moves the counter on by one for the
// next call). The gradient is dropout(g, key): the same elements dropped.
struct dropout {
    static constexpr std::string_view name = "dropout";
    static constexpr int arity = 2;
    using attributes = dropout_attrs;
    static dims result_shape(const dropout_attrs&, const dims& x, const dims& key) {
        if (!(key == dims{2}))
            throw shape_error(detail::error_prefix("shape_error", name) + "the key must have shape (2,) (a seed and a counter), got " +
                              to_string(key));
        return x;
    }
    template <class T>
    using result_type = T;
    template <std::size_t I, class T>
    using operand_type = std::int64_t;  // the key
    static std::string attrs_text(const dropout_attrs& a) {
        return "p=" + detail::number_text(a.p());
    }
    template <class Device, class U, class X, class K>
    static void compute(const dropout_attrs& a, U* out, const X& x, const K& key) {
        Device::dropout(out, x, key.data, key.strides[0], a.p());
    }
    template <class A, class X, class K, class Y, class G>
    static constexpr auto gradient(const A& a, const X&, const K& key, const Y&, const G& g) {
        return detail::grads(structural_fns<X>::template apply<dropout>(a, g, key), detail::no_grad{});
    }
};

}  // namespace ops
}  // namespace kiln
