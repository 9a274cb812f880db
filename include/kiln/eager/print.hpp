#pragma once
// Printing like NumPy: nested brackets, right-aligned columns, summarized with "..." when large.
#include <cmath>
#include <cstdio>
#include <algorithm>
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

// How the shown floating values of one tensor print, decided from all of them as NumPy decides it: scientific
// notation when the largest magnitude is at least 1e8, the smallest non-zero one below 1e-4 or their ratio above
// 1e3; otherwise positional. Either way every value shows its point and the points line up: [ 0. , 10. ,  0.5],
// [1.0e-05, 1.5e+00]. `precision` counts significant digits (NumPy's counts fractional ones).
struct float_layout {
    bool scientific = false;
    int digits = 6;        // significant digits
    int frac = 0;          // scientific: digits after the point, the same for every value
    std::size_t left = 0;  // positional: the widest integer part (sign included); scientific: the widest mantissa's
    std::size_t right = 0; // positional: the widest fractional part
    std::size_t exp_digits = 2;

    template <class T>
    static float_layout of(const std::vector<T>& shown, int precision) {
        float_layout f;
        f.digits = precision >= 0 ? std::max(precision, 1) : std::is_same_v<T, float> ? 6 : 8;
        double lo = 0, hi = 0;
        bool any = false;
        for (const T v : shown) {
            if (!std::isfinite(v) || v == 0) continue;
            const double a = std::abs(static_cast<double>(v));
            lo = any ? std::min(lo, a) : a;
            hi = any ? std::max(hi, a) : a;
            any = true;
        }
        f.scientific = any && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1e3);
        for (const T v : shown) {
            if (!std::isfinite(v)) continue;
            const std::string r = f.raw(static_cast<double>(v));
            const std::size_t dot = r.find('.'), e = r.find('e');
            f.left = std::max(f.left, dot);
            if (f.scientific) {
                f.frac = std::max(f.frac, static_cast<int>(e - dot - 1));
                f.exp_digits = std::max(f.exp_digits, r.size() - e - 2);
            } else {
                f.right = std::max(f.right, r.size() - dot - 1);
            }
        }
        return f;
    }

    // One value with `digits` significant digits, trailing zeros dropped, the point kept: "10.", "0.5", "1.e-05".
    std::string raw(double v) const {
        char buf[64];
        std::string s;
        if (scientific) {
            std::snprintf(buf, sizeof buf, "%#.*e", digits - 1, v);
            s = buf;
            const std::size_t e = s.find('e');
            std::size_t end = e;
            while (end > 0 && s[end - 1] == '0') --end;
            s.erase(end, e - end);
            return s;
        }
        int after = 0;
        if (v != 0) after = std::max(0, digits - 1 - static_cast<int>(std::floor(std::log10(std::abs(v)))));
        std::snprintf(buf, sizeof buf, "%#.*f", after, v);
        s = buf;
        while (s.back() == '0') s.pop_back();
        return s;
    }

    // The value laid out: its point at the same column as every other value's.
    std::string text(double v) const {
        if (v != v) return "nan";
        if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
        char buf[64];
        std::string s;
        if (scientific) {
            std::snprintf(buf, sizeof buf, "%#.*e", frac, v);
            s = buf;
            const std::size_t e = s.find('e');
            const std::string digits_part = s.substr(e + 2);
            s = s.substr(0, e + 2) + std::string(exp_digits > digits_part.size() ? exp_digits - digits_part.size() : 0, '0') + digits_part;
        } else {
            s = raw(v);
            s += std::string(right - (s.size() - s.find('.') - 1), ' ');
        }
        const std::size_t dot = s.find('.');
        return std::string(left > dot ? left - dot : 0, ' ') + s;
    }
};

template <class T>
std::string element_text(T v) {
    char buf[32];
    if constexpr (std::is_same_v<T, bool>) {
        return v ? "True" : "False";
    } else {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
        return buf;
    }
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

    // The shown elements in visiting order.
    template <class T>
    void gather(const T* base, int d, std::ptrdiff_t off, std::vector<T>& out) const {
        if (d == t.dim()) return out.push_back(base[off]);
        for (std::ptrdiff_t i = 0; i < t.shape()[d]; ++i)
            if (shown(d, i)) gather(base, d + 1, off + i * t.strides()[d], out);
    }

    template <class T>
    void collect(const T* base) {
        std::vector<T> values;
        gather(base, 0, 0, values);
        if constexpr (std::is_floating_point_v<T>) {
            const float_layout f = float_layout::of(values, opt.precision);
            for (const T v : values) cells.push_back(f.text(static_cast<double>(v)));
        } else {
            for (const T v : values) cells.push_back(element_text(v));
        }
        for (const std::string& c : cells) width = std::max(width, c.size());
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
        detail::dispatch(t.dtype(), [&]<class T>() { p.collect(t.data<const T>()); });
    }
    std::string out = "tensor(";
    if (t.numel() == 0) out += "[]";
    else p.write(out, 0, 7);
    out += ", dtype=" + std::string(name(t.dtype()));
    if (t.numel() == 0) out += ", shape=" + to_string(t.shape());
    return out + ")";
}

inline std::ostream& operator<<(std::ostream& os, const tensor& t) { return os << to_string(t); }
// A tensor's dtype, shape and device print as they read in messages: `float32`, `(2, 3)`, `cpu`.
inline std::ostream& operator<<(std::ostream& os, dtype d) { return os << name(d); }
inline std::ostream& operator<<(std::ostream& os, const dims& s) { return os << to_string(s); }
inline std::ostream& operator<<(std::ostream& os, const device& d) { return os << to_string(d); }

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
