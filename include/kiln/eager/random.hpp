#pragma once
// kiln::generator: the seedable random generator behind rand, randn, uniform, shuffling and initializers.
#include <cmath>
#include <cstdint>
#include <numbers>

namespace kiln {

// A seedable random generator (xoshiro256**: fast, and the same stream on every platform and compiler).
class generator {
public:
    explicit generator(std::uint64_t seed = 0x9E3779B97F4A7C15ull) { this->seed(seed); }

    // Restarts the stream: the same seed gives the same numbers (a normal kept from an earlier pair is dropped).
    void seed(std::uint64_t seed) {
        has_spare_ = false;
        std::uint64_t z = seed;
        for (auto& s : state_) {  // splitmix64 expands the seed
            z += 0x9E3779B97F4A7C15ull;
            std::uint64_t x = z;
            x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
            x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
            s = x ^ (x >> 31);
        }
    }

    std::uint64_t next() {
        const std::uint64_t result = rotl(state_[1] * 5, 7) * 9, t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1) with 53 random bits.
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

    // Standard normal (Box-Muller; one of the pair is kept for the next call).
    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        double u1 = uniform();
        while (u1 <= 0.0) u1 = uniform();
        const double u2 = uniform(), r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * u2;
        spare_ = r * std::sin(a);
        has_spare_ = true;
        return r * std::cos(a);
    }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::uint64_t state_[4];
    double spare_ = 0;
    bool has_spare_ = false;
};

}  // namespace kiln
