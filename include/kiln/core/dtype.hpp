#pragma once
// Element types kiln knows, as compile-time traits and as a run-time tag.
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>

#include "config.hpp"

namespace kiln {

enum class dtype : std::uint8_t { boolean, int32, int64, float32, float64 };

inline constexpr dtype bool_ = dtype::boolean;
inline constexpr dtype int32 = dtype::int32;
inline constexpr dtype int64 = dtype::int64;
inline constexpr dtype float32 = dtype::float32;
inline constexpr dtype float64 = dtype::float64;

template <class T>
inline constexpr bool is_dtype_v = std::is_same_v<T, bool> || std::is_same_v<T, std::int32_t> ||
                                   std::is_same_v<T, std::int64_t> || std::is_same_v<T, float> ||
                                   std::is_same_v<T, double>;

template <class T>
constexpr dtype dtype_of() noexcept {
    static_assert(is_dtype_v<T>, "kiln: element types are bool, int32_t, int64_t, float and double.");
    if constexpr (std::is_same_v<T, bool>) return dtype::boolean;
    else if constexpr (std::is_same_v<T, std::int32_t>) return dtype::int32;
    else if constexpr (std::is_same_v<T, std::int64_t>) return dtype::int64;
    else if constexpr (std::is_same_v<T, float>) return dtype::float32;
    else return dtype::float64;
}

constexpr std::string_view name(dtype d) noexcept {
    switch (d) {
        case dtype::boolean: return "bool";
        case dtype::int32: return "int32";
        case dtype::int64: return "int64";
        case dtype::float32: return "float32";
        case dtype::float64: return "float64";
    }
    return "unknown";
}

template <class T>
constexpr std::string_view dtype_name() noexcept {
    return name(dtype_of<T>());
}

constexpr std::size_t size_of(dtype d) noexcept {
    switch (d) {
        case dtype::boolean: return 1;
        case dtype::int32: return 4;
        case dtype::int64: return 8;
        case dtype::float32: return 4;
        case dtype::float64: return 8;
    }
    return 0;
}

namespace detail {
constexpr bool is_floating(dtype d) { return d == dtype::float32 || d == dtype::float64; }
}  // namespace detail

// Converts one element between dtypes with a defined result everywhere: a floating value converted to an integer
// type saturates (values beyond the type's range give its minimum or maximum, infinities included) and NaN gives 0,
// where a plain C++ conversion is undefined. Every other conversion is C++'s (to bool: nonzero is true, NaN too).
template <class To, class From>
KILN_HD constexpr To value_cast(From v) noexcept {
    if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> && std::is_floating_point_v<From>) {
        // 2^(digits) is exact in every floating type; To's maximum is 2^digits - 1.
        constexpr From hi = static_cast<From>(static_cast<double>(std::uint64_t{1} << std::numeric_limits<To>::digits));
        constexpr To most = std::numeric_limits<To>::max(), least = std::numeric_limits<To>::min();
        if (v != v) return To(0);
        if (v >= hi) return most;
        if (v < -hi) return least;
        return static_cast<To>(v);
    } else {
        return static_cast<To>(v);
    }
}

namespace detail {
// a + b in the element type, and a || b for bools (a sum of bools is "any"): a strided add's accumulation.
template <class U>
KILN_HD constexpr U add_value(U a, U b) noexcept {
    if constexpr (std::is_same_v<U, bool>) return a || b;
    else return static_cast<U>(a + b);
}
}  // namespace detail

}  // namespace kiln
