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
    constexpr std::string_view view() const noexcept { return {chars, N - 1}; }
    constexpr std::size_t size() const noexcept { return N - 1; }

    template <std::size_t M>
    constexpr bool operator==(const fixed_string<M>& other) const noexcept {
        return view() == other.view();
    }
};

}  // namespace kiln
