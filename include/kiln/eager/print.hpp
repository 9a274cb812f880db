#pragma once
// Printing like NumPy: nested brackets, right-aligned columns, summarized with "..." when large.
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "convert.hpp"
#include "tensor.hpp"

namespace kiln {
namespace detail {

}  // namespace detail

// How tensors print, like NumPy's set_printoptions. `precision` is the number of significant digits of floating
// values (-1: 6 for float32, 8 for float64); tensors of more than `threshold` elements show the first and last
// `edgeitems` entries of each dimension around "..."; rows wrap to lines of at most `linewidth` characters.
struct print_options {
    int precision = -1;
    std::ptrdiff_t threshold = 1000;
    std::ptrdiff_t edgeitems = 3;
    std::ptrdiff_t linewidth = 75;
};

namespace detail {
inline print_options& current_print_options() {
    static print_options o;
    return o;
}
}  // namespace detail

// Sets the options for every later print (not thread-safe against concurrent printing); checked: precision from -1
// to 17, threshold and edgeitems non-negative, linewidth at least 10 (a kiln::value_error otherwise).
inline void set_printoptions(const print_options& o) {
    if (o.precision < -1 || o.precision > 17 || o.threshold < 0 || o.edgeitems < 0 || o.linewidth < 10)
        throw value_error("kiln: value_error in 'set_printoptions': precision must be -1 to 17, threshold and "
                          "edgeitems non-negative and linewidth at least 10");
    detail::current_print_options() = o;
}
inline print_options get_printoptions() { return detail::current_print_options(); }

namespace detail {

template <class T>
std::string element_text(T v, bool all_integral, int precision) {
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
        else std::snprintf(buf, sizeof buf, "%.*g", precision >= 0 ? precision : std::is_same_v<T, float> ? 6 : 8,
                           static_cast<double>(v));
    }
    return buf;
}

struct printer {
    const tensor& t;
    bool summarize;
    print_options opt;
    std::vector<std::string> cells;  // formatted elements in visiting order
    std::size_t width = 0;

    bool shown(int d, std::ptrdiff_t i) const {
        const std::ptrdiff_t n = t.shape()[d], e = opt.edgeitems;
        return !summarize || n <= 2 * e || i < e || i >= n - e;
    }

    // The length of the line `out` ends with.
    static std::size_t line_length(const std::string& out) {
        const auto nl = out.rfind('\n');
        return nl == std::string::npos ? out.size() : out.size() - nl - 1;
    }
    // Before a cell (or "...") of the innermost dimension: ", " and a new line when the next item would pass the
    // line width (a closing bracket per open dimension is allowed for).
    void separate(std::string& out, int indent, std::size_t next, int d) {
        out += ',';
        const std::size_t closing = static_cast<std::size_t>(d + 1) + 1;
        if (line_length(out) + 1 + next + closing > static_cast<std::size_t>(opt.linewidth))
            out += "\n" + std::string(static_cast<std::size_t>(indent), ' ');
        else
            out += ' ';
    }

    template <class T>
    void collect(const T* base, int d, std::ptrdiff_t off, bool all_integral) {
        if (d == t.dim()) {
            cells.push_back(element_text(base[off], all_integral, opt.precision));
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
                if (i == opt.edgeitems) {
                    if (d + 1 == t.dim()) {
                        separate(out, indent + 1, 3, d);
                        out += "...";
                    } else {
                        out += ",\n" + std::string(static_cast<std::size_t>(indent + 1), ' ') + "...";
                    }
                }
                continue;
            }
            if (!first) {
                if (d + 1 == t.dim()) separate(out, indent + 1, width, d);
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
    t.check_valid("print");
    if (!t.is_symbolic() && !t.is_cpu()) {
        // Printed from a host copy, with the device named as PyTorch does: "tensor([1., 2.], device='cuda:0')".
        std::string s = to_string(t.to(kiln::cpu));
        const std::size_t close = s.rfind(')');
        const std::string where = "device='" + to_string(t.device()) + "'";
        if (close != std::string::npos) s.insert(close, s[close - 1] == '(' ? where : ", " + where);
        return s;
    }
    const print_options opt = get_printoptions();
    detail::printer p{t, t.numel() > opt.threshold, opt, {}, 0};
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

// Prints t ("label: tensor(...)" with a label) to `out`, now in eager mode and every time a traced function that
// calls it runs (a C++ printf inside a traced function prints only while tracing).
inline void print(const tensor& t, const std::string& label = "", std::FILE* out = stdout) {
    if (detail::active_tracer) [[unlikely]] {
        detail::active_tracer->record_effect(
            "print", label.empty() ? "" : "label=" + label, std::span<const tensor>(&t, 1),
            [label, out](std::span<const tensor> in, auto) { print(in[0], label, out); }, /*writes=*/0);
        return;
    }
    const std::string text = (label.empty() ? "" : label + ": ") + to_string(t) + "\n";
    std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace kiln
