#pragma once
// Shapes: run-time shapes of bounded rank with NumPy broadcasting, and static shapes for graph mode.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>

#include "config.hpp"
#include "error.hpp"

namespace kiln {

// The largest rank kiln handles; fixed so that shapes live on the stack and running a graph never allocates.
inline constexpr int max_rank = 8;

// For slices that run to the end in either direction: t.slice(0, kiln::slice_end, kiln::slice_begin, -1) reverses
// (start past the end clamps to the last element; stop before the start means "through the first").
inline constexpr std::ptrdiff_t slice_begin = std::numeric_limits<std::ptrdiff_t>::min() / 2;
inline constexpr std::ptrdiff_t slice_end = std::numeric_limits<std::ptrdiff_t>::max() / 2;

// A dimension whose extent is known only at run time.
inline constexpr std::ptrdiff_t dyn = -1;

// A static shape: each dimension is an extent or kiln::dyn.
template <std::ptrdiff_t... Dims>
struct shape {
    static constexpr int rank = sizeof...(Dims);
    static constexpr std::array<std::ptrdiff_t, sizeof...(Dims)> dims{Dims...};
};

// A shape whose rank is known only at run time.
struct dynamic {};

// A run-time shape (and, with the same layout, strides).
struct dims {
    int rank = 0;
    std::array<std::ptrdiff_t, max_rank> d;  // only the first `rank` entries are meaningful; not zeroed (hot path)

    constexpr dims() = default;
    dims(std::initializer_list<std::ptrdiff_t> extents) { assign(extents.begin(), extents.size()); }

    template <class It>
    void assign(It first, std::size_t n) {
        if (n > static_cast<std::size_t>(max_rank))
            throw value_error("kiln: value_error in 'dims': rank " + std::to_string(n) + " exceeds kiln::max_rank (" +
                              std::to_string(max_rank) + ")");
        rank = static_cast<int>(n);
        for (int i = 0; i < rank; ++i, ++first) d[i] = static_cast<std::ptrdiff_t>(*first);
    }

    constexpr std::ptrdiff_t operator[](int i) const noexcept { return d[i]; }
    constexpr std::ptrdiff_t& operator[](int i) noexcept { return d[i]; }

    // A shape reads as a container of its extents, as xtensor's shapes and std::vector do: size() is the rank (the
    // element count is numel()), and a range-for visits the extents.
    constexpr std::size_t size() const noexcept { return static_cast<std::size_t>(rank); }
    constexpr const std::ptrdiff_t* begin() const noexcept { return d.data(); }
    constexpr const std::ptrdiff_t* end() const noexcept { return d.data() + rank; }
    constexpr std::ptrdiff_t* begin() noexcept { return d.data(); }
    constexpr std::ptrdiff_t* end() noexcept { return d.data() + rank; }

    // The element count. Computed in unsigned arithmetic: a shape with a zero extent has no elements even when the
    // product of its other extents would overflow ((2^42, 2^25, 0) is a valid empty shape), and shapes that kiln
    // accepts (detail::checked_numel) have at most 2^62 elements, so the result is exact for them.
    constexpr std::ptrdiff_t numel() const noexcept {
        std::size_t n = 1;
        for (int i = 0; i < rank; ++i) n *= static_cast<std::size_t>(d[i]);
        return static_cast<std::ptrdiff_t>(n);
    }

    friend constexpr bool operator==(const dims& a, const dims& b) noexcept {
        if (a.rank != b.rank) return false;
        for (int i = 0; i < a.rank; ++i)
            if (a.d[i] != b.d[i]) return false;
        return true;
    }
};

// "(3, 4)" like NumPy; "()" for a scalar.
inline std::string to_string(const dims& s);

namespace detail {

// The most elements and bytes kiln lets one tensor have: every byte offset then fits in std::ptrdiff_t with room
// to spare (2^62 bytes), so index arithmetic over a tensor never overflows.
inline constexpr std::ptrdiff_t max_bytes = std::ptrdiff_t{1} << 62;

// The element count of `shape`, checked: every extent non-negative and the product within max_bytes. `what` names
// the operation in the error.
inline std::ptrdiff_t checked_numel(const dims& shape, std::string_view what) {
    std::ptrdiff_t n = 1;
    bool overflow = false;
    for (int i = 0; i < shape.rank; ++i) {
        if (shape.d[i] < 0)
            throw value_error("kiln: value_error in '" + std::string(what) + "': negative dimension " +
                              std::to_string(shape.d[i]) + " in shape " + to_string(shape));
        if (!overflow && __builtin_mul_overflow(n, shape.d[i], &n)) overflow = true;
        if (n > max_bytes) overflow = true;
    }
    // A zero extent anywhere makes the count 0 whatever the others are (NumPy allows (0, 2^62)).
    for (int i = 0; i < shape.rank; ++i)
        if (shape.d[i] == 0) return 0;
    if (overflow)
        throw value_error("kiln: value_error in '" + std::string(what) + "': shape " + to_string(shape) +
                          " has more elements than kiln can address (at most 2^62 bytes)");
    return n;
}

// The byte count of `count` elements of `itemsize` bytes, checked against max_bytes.
inline std::size_t checked_bytes(std::ptrdiff_t count, std::size_t itemsize, const dims& shape, std::string_view what) {
    std::ptrdiff_t b = 0;
    if (count < 0 || __builtin_mul_overflow(count, static_cast<std::ptrdiff_t>(itemsize), &b) || b > max_bytes)
        throw value_error("kiln: value_error in '" + std::string(what) + "': shape " + to_string(shape) + " of " +
                          std::to_string(itemsize) + "-byte elements needs more bytes than kiln can address "
                          "(at most 2^62)");
    return static_cast<std::size_t>(b);
}

}  // namespace detail

inline std::string to_string(const dims& s) {
    std::string out = "(";
    for (int i = 0; i < s.rank; ++i) {
        if (i) out += ", ";
        out += std::to_string(s.d[i]);
    }
    if (s.rank == 1) out += ",";
    return out + ")";
}

namespace detail {

// A shape as attribute text: "2,3" (empty for rank 0).
inline std::string dims_text(const dims& s) {
    std::string out;
    for (int i = 0; i < s.rank; ++i) {
        if (i) out += ',';
        out += std::to_string(s.d[i]);
    }
    return out;
}

// Row-major strides (in elements) of a shape.
inline dims contiguous_strides(const dims& shape) {
    dims st;
    st.rank = shape.rank;
    // Unsigned: a shape that is refused afterwards (too many elements) must not overflow here first.
    std::size_t s = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
        st[i] = static_cast<std::ptrdiff_t>(s);
        s *= shape[i] > 0 ? static_cast<std::size_t>(shape[i]) : 1;
    }
    return st;
}

// NumPy broadcasting; returns false when the shapes are incompatible.
constexpr bool broadcast_into(const dims& a, const dims& b, dims& out) noexcept {
    const int r = a.rank > b.rank ? a.rank : b.rank;
    dims res;
    res.rank = r;
    for (int i = 0; i < r; ++i) {
        const int ia = i - (r - a.rank), ib = i - (r - b.rank);
        const std::ptrdiff_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
        if (da == db || db == 1) res.d[i] = da;
        else if (da == 1) res.d[i] = db;
        else return false;
    }
    out = res;
    return true;
}

}  // namespace detail

// Broadcasts two shapes, naming the operation in the error.
inline dims broadcast_shapes(const dims& a, const dims& b, std::string_view op) {
    dims out;
    if (!detail::broadcast_into(a, b, out))
        throw shape_error("kiln: shape_error in '" + std::string(op) + "': cannot broadcast shapes " + to_string(a) +
                          " and " + to_string(b));
    return out;
}

namespace detail {

template <class S>
struct static_shape_text;

template <std::ptrdiff_t... D>
struct static_shape_text<shape<D...>> {
    static std::string get() {
        std::string out = "(";
        int i = 0;
        ((out += (i++ ? ", " : "") + (D == dyn ? std::string("?") : std::to_string(D))), ...);
        if (sizeof...(D) == 1) out += ",";
        return out + ")";
    }
};

template <>
struct static_shape_text<dynamic> {
    static std::string get() { return "(...)"; }
};

// Static broadcasting: dyn meets n gives n (checked at run time), 1 meets n gives n.
template <class A, class B>
struct static_broadcast {
    using type = dynamic;
    static constexpr bool ok = true;
};

constexpr std::ptrdiff_t static_broadcast_dim(std::ptrdiff_t a, std::ptrdiff_t b) {
    if (a == b) return a;
    if (a == 1) return b;
    if (b == 1) return a;
    if (a == dyn) return b;
    if (b == dyn) return a;
    return -2;  // incompatible
}

template <std::ptrdiff_t... A, std::ptrdiff_t... B>
struct static_broadcast<shape<A...>, shape<B...>> {
    static constexpr int ra = sizeof...(A), rb = sizeof...(B), r = ra > rb ? ra : rb;
    static constexpr std::array<std::ptrdiff_t, (r > 0 ? r : 1)> result = [] {
        std::array<std::ptrdiff_t, (r > 0 ? r : 1)> out{};
        constexpr std::array<std::ptrdiff_t, (ra > 0 ? ra : 1)> a{A...};
        constexpr std::array<std::ptrdiff_t, (rb > 0 ? rb : 1)> b{B...};
        for (int i = 0; i < r; ++i) {
            const int ia = i - (r - ra), ib = i - (r - rb);
            out[i] = static_broadcast_dim(ia >= 0 ? a[ia] : 1, ib >= 0 ? b[ib] : 1);
        }
        return out;
    }();
    static constexpr bool ok = [] {
        for (int i = 0; i < r; ++i)
            if (result[i] == -2) return false;
        return true;
    }();
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<result[I]...>;
    using type = decltype(make(std::make_index_sequence<r>{}));
};

}  // namespace detail
}  // namespace kiln
