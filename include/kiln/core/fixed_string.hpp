#pragma once
// Compile-time strings usable as template arguments: a node's name is part of its type.
#include <cstddef>
#include <string_view>
#include <utility>

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

namespace detail {
// A name spelled as characters, for diagnostics: clang writes a class-type template argument out as its members'
// numbers (kiln::fixed_string<2>{{121, 0}}), but a character pack as characters (chars<'y'>).
template <char... C>
struct chars {};
template <fixed_string S, class I = std::make_index_sequence<S.size()>>
struct spelled;
template <fixed_string S, std::size_t... I>
struct spelled<S, std::index_sequence<I...>> {
    using type = chars<S.chars[I]...>;
};
template <fixed_string S>
using spelled_t = typename spelled<S>::type;
// A false that depends on T: a static_assert on it fails only when its template is instantiated.
template <class T>
inline constexpr bool never = false;
}  // namespace detail

}  // namespace kiln
