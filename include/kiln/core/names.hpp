#pragma once
// Closest names for error messages: "no op named 'ad'; closest: 'add', 'abs'".
#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::detail {

// Levenshtein distance.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        std::size_t diag = row[0];
        row[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diag = up;
        }
    }
    return row[b.size()];
}

inline std::string lowercase(std::string_view v) {
    std::string out(v);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
}

// `known` sorted closest first: by the distance ignoring case (a wrong capital is the likeliest typo), then by the
// exact distance; ties keep their order.
inline std::vector<std::string> closest_names(std::string_view name, std::vector<std::string> known) {
    const std::string lname = lowercase(name);
    // (the position as the last key: std::sort, stable by construction)
    std::vector<std::pair<std::array<std::size_t, 3>, std::string>> keyed;
    keyed.reserve(known.size());
    for (std::string& k : known)
        keyed.push_back({{edit_distance(lname, lowercase(k)), edit_distance(name, k), keyed.size()}, std::move(k)});
    std::sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<std::string> out;
    out.reserve(keyed.size());
    for (auto& k : keyed) out.push_back(std::move(k.second));
    return out;
}

// "'a', 'b', 'c' (12 known in all)": the `count` closest of `known`, quoted.
inline std::string closest_text(std::string_view name, std::vector<std::string> known, std::size_t count = 3) {
    const std::vector<std::string> sorted = closest_names(name, std::move(known));
    std::string msg;
    for (std::size_t i = 0; i < sorted.size() && i < count; ++i) msg += (i ? ", '" : "'") + sorted[i] + "'";
    if (sorted.size() > count) msg += " (" + std::to_string(sorted.size()) + " known in all)";
    return msg;
}

// How C++ spells type T ("kiln::ops::add"), from the compiler's name of this function; empty where the compiler
// does not say. Function mode's kernel compiler writes op structs into source with it (function/jit.hpp).
template <class T>
constexpr std::string_view type_spelling() noexcept {
#if defined(__clang__) || defined(__GNUC__)
    constexpr std::string_view p = __PRETTY_FUNCTION__;
    constexpr std::size_t at = p.find("T = ");
    if constexpr (at == std::string_view::npos) {
        return {};
    } else {
        constexpr std::string_view rest = p.substr(at + 4);
        constexpr std::size_t end = rest.find_first_of(";]");
        return end == std::string_view::npos ? std::string_view{} : rest.substr(0, end);
    }
#else
    return {};
#endif
}

}  // namespace kiln::detail
