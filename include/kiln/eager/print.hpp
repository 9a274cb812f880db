#pragma once
// Printing like NumPy: nested brackets, right-aligned columns, summarized with "..." when large.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace kiln {
namespace detail {

// Above this many elements, each dimension shows its first and last `edge` entries.
inline constexpr std::ptrdiff_t print_threshold = 1000;
inline constexpr std::ptrdiff_t print_edge = 3;

template <class T>
std::string element_text(T v, bool all_integral) {
    char buf[48];
    if constexpr (std::is_same_v<T, bool>) {
        return v ? "True" : "False";
    } else if constexpr (std::is_integral_v<T>) {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else {
        if (v != v) return "nan";
        if (v == std::numeric_limits<T>::infinity()) return "inf";
        if (v == -std::numeric_limits<T>::infinity()) return "-inf";
        if (all_integral) std::snprintf(buf, sizeof buf, "%.0f.", static_cast<double>(v));
        else std::snprintf(buf, sizeof buf, "%.*g", std::is_same_v<T, float> ? 6 : 8, static_cast<double>(v));
    }
    return buf;
}

struct printer {
    const tensor& t;
    bool summarize;
    std::vector<std::string> cells;  // formatted elements in visiting order
    std::size_t width = 0;

    bool shown(int d, std::ptrdiff_t i) const {
        const std::ptrdiff_t n = t.shape()[d];
        return !summarize || n <= 2 * print_edge || i < print_edge || i >= n - print_edge;
    }

    template <class T>
    void collect(const T* base, int d, std::ptrdiff_t off, bool all_integral) {
        if (d == t.dim()) {
            cells.push_back(element_text(base[off], all_integral));
            width = std::max(width, cells.back().size());
            return;
        }
        for (std::ptrdiff_t i = 0; i < t.shape()[d]; ++i)
            if (shown(d, i)) collect(base, d + 1, off + i * t.strides()[d], all_integral);
    }

    std::size_t next = 0;
    void write(std::string& out, int d, int indent) {
        if (d == t.dim()) {
            const std::string& c = cells[next++];
            out += std::string(width - c.size(), ' ') + c;
            return;
        }
        out += '[';
        const std::ptrdiff_t n = t.shape()[d];
        bool first = true;
        for (std::ptrdiff_t i = 0; i < n; ++i) {
            if (!shown(d, i)) {
                if (i == print_edge) {
                    out += d + 1 == t.dim() ? ", ..." : ",\n" + std::string(static_cast<std::size_t>(indent + 1), ' ') + "...";
                }
                continue;
            }
            if (!first) {
                if (d + 1 == t.dim()) out += ", ";
                else out += "," + std::string(static_cast<std::size_t>(t.dim() - d - 1), '\n') +
                            std::string(static_cast<std::size_t>(indent + 1), ' ');
            }
            first = false;
            write(out, d + 1, indent + 1);
        }
        out += ']';
    }
};

}  // namespace detail

// "tensor([[1., 2.],\n        [3., 4.]], dtype=float32)"
inline std::string to_string(const tensor& t) {
    detail::printer p{t, t.numel() > detail::print_threshold, {}, 0};
    if (t.numel() > 0) {
        detail::dispatch(t.dtype(), [&]<class T>() {
            const T* base = t.data<const T>();
            bool all_integral = true;
            if constexpr (std::is_floating_point_v<T>) {
                // Only the shown elements decide the format, as in NumPy.
                auto check = [&](T v) { all_integral = all_integral && (v != v || std::isinf(v) || (v == std::floor(v) && std::abs(v) < 1e16)); };
                std::function<void(int, std::ptrdiff_t)> walk = [&](int d, std::ptrdiff_t off) {
                    if (d == t.dim()) return check(base[off]);
                    for (std::ptrdiff_t i = 0; i < t.shape()[d]; ++i)
                        if (p.shown(d, i)) walk(d + 1, off + i * t.strides()[d]);
                };
                walk(0, 0);
            }
            p.collect(base, 0, 0, all_integral);
        });
    }
    std::string out = "tensor(";
    if (t.numel() == 0) out += "[]";
    else p.write(out, 0, 7);
    out += ", dtype=" + std::string(name(t.dtype()));
    if (t.numel() == 0) out += ", shape=" + to_string(t.shape());
    return out + ")";
}

inline std::ostream& operator<<(std::ostream& os, const tensor& t) { return os << to_string(t); }

}  // namespace kiln
