#pragma once
// Compile-time strings usable as template arguments: a node's name is part of its type.
#include <cstddef>
#include <string_view>

namespace kiln {

template <std::size_t N>
struct fixed_string {
    char chars[N]{};

    constexpr fixed_string(const char (&s)[N]) noexcept {
        for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
    }
    constexpr fixed_string() = default;
    constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
    constexpr std::size_t size() const noexcept { return N - 1; }

    template <std::size_t M>
    constexpr bool operator==(const fixed_string<M>& other) const noexcept {
        return view() == other.view();
    }
};

// A + B at compile time: kiln::join<"dense", "/w"> is "dense/w".
template <fixed_string A, fixed_string B>
inline constexpr auto join = [] {
    fixed_string<A.size() + B.size() + 1> out;
    for (std::size_t i = 0; i < A.size(); ++i) out.chars[i] = A.chars[i];
    for (std::size_t i = 0; i < B.size(); ++i) out.chars[A.size() + i] = B.chars[i];
    return out;
}();

}  // namespace kiln
