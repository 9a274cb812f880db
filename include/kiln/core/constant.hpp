#pragma once
// Compile-time constants are exact rationals, so folding (2_c * 0.5_c -> 1_c) is exact and visible in types.
#include <cstdint>
#include <numeric>
#include <type_traits>

#include "config.hpp"

namespace kiln {

template <std::int64_t Num, std::int64_t Den = 1>
struct constant {
    static_assert(Den > 0, "kiln::constant: the denominator must be positive.");
    static_assert(std::gcd(Num, Den) == 1 || (Num == 0 && Den == 1), "kiln::constant: use the reduced form.");
    static constexpr std::int64_t num = Num;
    static constexpr std::int64_t den = Den;

    // The value in type T, correctly rounded for T in {float, double} since it is one division.
    template <class T>
    KILN_HD static constexpr T value() noexcept {
        if constexpr (Den == 1) return static_cast<T>(Num);
        else return static_cast<T>(static_cast<T>(Num) / static_cast<T>(Den));
    }
};

template <class T>
struct is_constant : std::false_type {};
template <std::int64_t N, std::int64_t D>
struct is_constant<constant<N, D>> : std::true_type {};
template <class T>
inline constexpr bool is_constant_v = is_constant<std::remove_cvref_t<T>>::value;

namespace detail {

struct rational {
    std::int64_t num = 0, den = 1;
    bool ok = true;  // false after an overflow: such a result is not folded
};

constexpr rational make_rational(__int128 n, __int128 d) {
    if (d < 0) n = -n, d = -d;
    __int128 a = n < 0 ? -n : n, b = d;
    while (b) {
        __int128 t = a % b;
        a = b;
        b = t;
    }
    if (a == 0) a = 1;
    n /= a;
    d /= a;
    constexpr __int128 lim = INT64_MAX;
    if (n > lim || n < -lim || d > lim || d == 0) return {0, 1, false};
    return {static_cast<std::int64_t>(n), static_cast<std::int64_t>(d), true};
}

template <rational R>
using constant_of = constant<R.num, R.den>;

// Parses a numeric literal ("2", "0.5", "1e-3", "2.5E2") into an exact rational.
template <char... Cs>
constexpr rational parse_literal() {
    constexpr char s[] = {Cs..., '\0'};
    __int128 num = 0, den = 1;
    int exp = 0, exp_sign = 1, i = 0, digits = 0;
    bool frac = false;
    for (; s[i] && s[i] != 'e' && s[i] != 'E'; ++i) {
        if (s[i] == '\'') continue;
        if (s[i] == '.') {
            frac = true;
            continue;
        }
        num = num * 10 + (s[i] - '0');
        if (num) ++digits;
        if (frac) den *= 10;
    }
    if (s[i]) {
        ++i;
        if (s[i] == '-') exp_sign = -1, ++i;
        else if (s[i] == '+') ++i;
        for (; s[i]; ++i) exp = exp * 10 + (s[i] - '0');
    }
    if (digits > 18 || exp > 18) return {0, 1, false};
    for (int k = 0; k < exp; ++k) (exp_sign > 0 ? num : den) *= 10;
    return make_rational(num, den);
}

}  // namespace detail

// kiln::c<3, 2> is the constant 1.5. (A floating-point template argument, c<1.5f>, would not be exact and is not
// supported by every compiler kiln targets, so constants are rationals.)
template <std::int64_t Num, std::int64_t Den = 1>
inline constexpr detail::constant_of<detail::make_rational(Num, Den)> c{};

namespace literals {

// 2_c, 0.5_c, 1e-3_c: compile-time constants.
template <char... Cs>
constexpr auto operator""_c() {
    constexpr detail::rational r = detail::parse_literal<Cs...>();
    static_assert(r.ok, "kiln: a _c literal must have at most 18 significant digits and a small exponent.");
    return detail::constant_of<r>{};
}

}  // namespace literals
}  // namespace kiln
