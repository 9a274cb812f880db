#pragma once
// The declared dtype and shape of a traced function's tensor argument: kiln::spec(kiln::float32, {kiln::dyn, 10}),
// with named dynamic extents, kiln::spec(kiln::float32, {"batch", "length", 8}), which every extent of the same name
// equals. function.hpp checks calls against specs; io/ saves, exports and loads them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"

namespace kiln {

namespace detail {

// A dimension's name: 1 to 64 letters, digits and underscores, not starting with a digit (so that it is a name in
// every format that names dimensions: ONNX's dim_param, the file's JSON, printed signatures).
inline bool valid_dim_name(std::string_view n) {
    if (n.empty() || n.size() > 64 || (n[0] >= '0' && n[0] <= '9')) return false;
    for (char c : n)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
    return true;
}

inline std::string checked_dim_name(std::string n) {
    if (!valid_dim_name(n)) {
        std::string shown;  // (at most 80 characters, control bytes and non-ASCII as '?')
        for (std::size_t i = 0; i < n.size() && i < 80; ++i) shown += n[i] >= 32 && n[i] < 127 ? n[i] : '?';
        throw value_error("kiln: value_error in 'kiln::spec': a dimension's name is 1 to 64 letters, digits and underscores, "
                          "not starting with a digit; got '" + shown + (n.size() > 80 ? "...'" : "'"));
    }
    return n;
}

}  // namespace detail

// One extent of a spec's shape, as a braced list gives it: a number, kiln::dyn, or a name, which is a dynamic extent
// that every extent of the same name equals: {"batch", "length", 8}.
struct spec_extent {
    std::ptrdiff_t value = dyn;
    std::string name;
    template <std::integral I>
    spec_extent(I v) : value(static_cast<std::ptrdiff_t>(v)) {}
    spec_extent(const char* n) : name(detail::checked_dim_name(n ? n : "")) {}
    spec_extent(std::string n) : name(detail::checked_dim_name(std::move(n))) {}
};

// The declared dtype and shape of a tensor argument: kiln::spec(kiln::float32, {kiln::dyn, 10}). A kiln::dyn
// extent is dynamic: one trace serves every extent of it. A named extent, kiln::spec(kiln::float32, {"batch", 10}),
// is dynamic too, and every extent of that name, in any argument, must be equal in a call; extents of different
// names are independent (kiln::save traces them apart, and an ONNX export names them so).
struct spec {
    kiln::dtype dtype = kiln::float32;
    std::vector<std::ptrdiff_t> shape;
    // Empty, or one per axis: the name of a named dynamic extent, "" for the others.
    std::vector<std::string> names;
    spec(kiln::dtype d, std::vector<std::ptrdiff_t> s) : dtype(d), shape(std::move(s)) {}
    spec(kiln::dtype d, std::initializer_list<spec_extent> s) : dtype(d) {
        for (const spec_extent& e : s) {
            shape.push_back(e.value);
            names.push_back(e.name);
        }
        drop_empty_names();
    }
    // With a name per axis ("" for none); a name on a static extent is a value_error.
    spec(kiln::dtype d, std::vector<std::ptrdiff_t> s, std::vector<std::string> axis_names)
        : dtype(d), shape(std::move(s)), names(std::move(axis_names)) {
        check_names();
        drop_empty_names();
    }
    // The name of axis i ("" when it has none).
    const std::string& name_of(std::size_t i) const {
        static const std::string none;
        return i < names.size() ? names[i] : none;
    }
    // Throws a value_error unless `names` is empty or one per axis, each "" or a valid name on a dynamic extent (what
    // the constructors promise; kiln::function checks a spec whose names were assigned afterwards).
    void check_names() const {
        if (names.empty()) return;
        if (names.size() != shape.size())
            throw value_error("kiln: value_error in 'kiln::spec': " + std::to_string(names.size()) + " names for " +
                              std::to_string(shape.size()) + " axes");
        for (std::size_t i = 0; i < names.size(); ++i) {
            if (names[i].empty()) continue;
            detail::checked_dim_name(names[i]);
            if (shape[i] != dyn)
                throw value_error("kiln: value_error in 'kiln::spec': axis " + std::to_string(i) + " is named '" + names[i] +
                                  "' but has the static extent " + std::to_string(shape[i]) + " (a name is a dynamic extent)");
        }
    }

private:
    void drop_empty_names() {
        if (std::all_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); })) names.clear();
    }
};

// The specs of a function's tensor arguments as kiln::function takes them: a braced list of specs or a
// std::vector<spec>. It is a type of its own so that kiln::function(f, {.plan = false}) means the options alone:
// a std::vector<spec> parameter would take `{false}` too (through its size constructor) and make the call ambiguous.
struct spec_list {
    std::vector<spec> items;
    spec_list() = default;
    spec_list(std::initializer_list<spec> s) : items(s) {}
    spec_list(std::vector<spec> s) : items(std::move(s)) {}
};

inline std::string to_string(const spec& s) {
    std::string out = "(";
    for (std::size_t i = 0; i < s.shape.size(); ++i) {
        if (i) out += ", ";
        out += s.shape[i] != dyn ? std::to_string(s.shape[i]) : !s.name_of(i).empty() ? s.name_of(i) : std::string("?");
    }
    if (s.shape.size() == 1) out += ",";
    return out + ") " + std::string(name(s.dtype));
}

// A signature (one spec per tensor argument, as `loaded_function::signature()` gives it): "{(?, 10) float32}".
inline std::string to_string(const std::vector<spec>& specs) {
    std::string out = "{";
    for (std::size_t i = 0; i < specs.size(); ++i) out += (i ? ", " : "") + to_string(specs[i]);
    return out + "}";
}

namespace detail {

// The dynamic extents of a signature, numbered in the order of the arguments and their axes, and what their names
// make of them.
struct dim_names {
    // For each dynamic extent, the first dynamic extent of the same name (itself when it has none, or is the first).
    std::vector<std::uint32_t> first;
    // For each dynamic extent, its name ("" for none).
    std::vector<std::string> name;
    // Whether any extent is named (when none is, every extent is its own).
    bool any() const {
        return std::any_of(name.begin(), name.end(), [](const std::string& n) { return !n.empty(); });
    }
};

// Checks each spec's names (spec::check_names) and numbers the signature's dynamic extents by name.
inline dim_names dynamic_dim_names(const std::vector<spec>& specs) {
    dim_names out;
    for (const spec& s : specs) {
        s.check_names();
        for (std::size_t i = 0; i < s.shape.size(); ++i) {
            if (s.shape[i] != dyn) continue;
            const std::string& n = s.name_of(i);
            std::uint32_t first = static_cast<std::uint32_t>(out.name.size());
            if (!n.empty())
                for (std::size_t e = 0; e < out.name.size(); ++e)
                    if (out.name[e] == n) {
                        first = static_cast<std::uint32_t>(e);
                        break;
                    }
            out.first.push_back(first);
            out.name.push_back(n);
        }
    }
    return out;
}

// dynamic_dim_names(specs).first where some extent is named; empty where none is (no call needs checking).
inline std::vector<std::uint32_t> dim_name_groups(const std::vector<spec>& specs) {
    dim_names d = dynamic_dim_names(specs);
    if (!d.any()) d.first.clear();
    return std::move(d.first);
}

}  // namespace detail

}  // namespace kiln
