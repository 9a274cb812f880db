#pragma once
// Einstein summation over two operands, one mode-neutral op (ops/structural.hpp): ops::einsum. Its attributes are
// the parsed subscripts ("ij,jk->ik"), a structural type, so graph mode's kiln::einsum<"ij,jk->ik">(a, b) and
// eager mode's kiln::einsum("ij,jk->ik", a, b) are the same op with the same messages. The kernel sums away the
// letters that only one operand has, arranges both operands as batches of matrices and runs the device's matrix
// product once per batch. The gradient of each operand is another einsum (ops::einsum_to, whose third operand gives
// the shape for letters that only that operand had).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/shape.hpp"
#include "../core/strided.hpp"
#include "matmul.hpp"
#include "reduce.hpp"
#include "structural.hpp"

namespace kiln {
namespace ops {

// The subscripts of the two operands and of the result, letters 'a' to 'z', each at most kiln::max_rank long.
struct einsum_attrs {
    std::array<char, max_rank> a{}, b{}, out{};
    int na = 0, nb = 0, nout = 0;
    friend constexpr bool operator==(const einsum_attrs&, const einsum_attrs&) = default;

    static constexpr bool has(const std::array<char, max_rank>& s, int n, char c) {
        for (int i = 0; i < n; ++i)
            if (s[static_cast<std::size_t>(i)] == c) return true;
        return false;
    }
    constexpr bool in_a(char c) const { return has(a, na, c); }
    constexpr bool in_b(char c) const { return has(b, nb, c); }
    constexpr bool in_out(char c) const { return has(out, nout, c); }
};

// Parsed subscripts, or why they cannot be (`why` completes "kiln: value_error in 'einsum': '<spec>': ...").
struct einsum_parse {
    einsum_attrs attrs{};
    const char* why = nullptr;
    char letter = 0;  // the letter the message is about, if any
};

constexpr einsum_parse parse_einsum(std::string_view spec) {
    einsum_parse p;
    const std::size_t comma = spec.find(','), arrow = spec.find("->");
    if (comma == std::string_view::npos || arrow == std::string_view::npos || arrow < comma) {
        p.why = "write \"ab,bc->ac\"";
        return p;
    }
    auto fill = [&](std::string_view s, std::array<char, max_rank>& to, int& n) {
        for (char c : s) {
            if (c < 'a' || c > 'z') {
                p.why = "subscripts are lowercase letters";
                return;
            }
            if (einsum_attrs::has(to, n, c)) {
                p.why = "a subscript repeats within one operand";
                p.letter = c;
                return;
            }
            if (n == max_rank) {
                p.why = "more subscripts than kiln::max_rank";
                return;
            }
            to[static_cast<std::size_t>(n++)] = c;
        }
    };
    fill(spec.substr(0, comma), p.attrs.a, p.attrs.na);
    if (!p.why) fill(spec.substr(comma + 1, arrow - comma - 1), p.attrs.b, p.attrs.nb);
    if (!p.why) fill(spec.substr(arrow + 2), p.attrs.out, p.attrs.nout);
    if (p.why) return p;
    for (int i = 0; i < p.attrs.nout; ++i) {
        const char c = p.attrs.out[static_cast<std::size_t>(i)];
        if (!p.attrs.in_a(c) && !p.attrs.in_b(c)) {
            p.why = "an output subscript is in no operand";
            p.letter = c;
            return p;
        }
    }
    return p;
}

inline std::string einsum_text(const einsum_attrs& a) {
    return std::string(a.a.data(), static_cast<std::size_t>(a.na)) + "," + std::string(a.b.data(), static_cast<std::size_t>(a.nb)) +
           "->" + std::string(a.out.data(), static_cast<std::size_t>(a.nout));
}

inline einsum_attrs make_einsum_attrs(std::string_view spec) {
    const einsum_parse p = parse_einsum(spec);
    if (p.why)
        throw value_error(detail::error_prefix("value_error", "einsum") + "'" + std::string(spec) + "': " + p.why +
                          (p.letter ? std::string(" ('") + p.letter + "')" : std::string()));
    return p.attrs;
}

// The gradient's subscripts: (g, other -> this operand).
constexpr einsum_attrs einsum_grad_attrs(const einsum_attrs& a, int operand) {
    einsum_attrs g;
    g.a = a.out, g.na = a.nout;
    if (operand == 0) g.b = a.b, g.nb = a.nb, g.out = a.a, g.nout = a.na;
    else g.b = a.a, g.nb = a.na, g.out = a.b, g.nout = a.nb;
    return g;
}
template <int I, class A>
constexpr auto einsum_grad_attrs_of(const A& a) {
    if constexpr (is_attrs_c_v<A>) return attrs_c<einsum_grad_attrs(A::value, I)>{};
    else return einsum_grad_attrs(a, I);
}

namespace detail_einsum {

// Every letter's extent, from the operands (and, for einsum_to, the result's reference shape).
struct extents {
    std::array<std::ptrdiff_t, 26> of{};
    std::array<bool, 26> known{};
};

inline extents extents_of(const einsum_attrs& a, const dims& x, const dims& y, const dims* ref, std::string_view spec_op) {
    const std::string spec = einsum_text(a);
    auto fail = [&](const std::string& why) {
        return value_error(detail::error_prefix("value_error", spec_op) + "'" + spec + "': " + why);
    };
    if (x.rank != a.na)
        throw fail("'" + std::string(a.a.data(), static_cast<std::size_t>(a.na)) + "' has " + std::to_string(a.na) +
                   " subscripts for a tensor of rank " + std::to_string(x.rank));
    if (y.rank != a.nb)
        throw fail("'" + std::string(a.b.data(), static_cast<std::size_t>(a.nb)) + "' has " + std::to_string(a.nb) +
                   " subscripts for a tensor of rank " + std::to_string(y.rank));
    extents e;
    auto note = [&](const std::array<char, max_rank>& s, int n, const dims& d) {
        for (int i = 0; i < n; ++i) {
            const int c = s[static_cast<std::size_t>(i)] - 'a';
            const auto k = static_cast<std::size_t>(c);
            if (e.known[k] && e.of[k] != d[i])
                throw fail(std::string("'") + s[static_cast<std::size_t>(i)] + "' is " + std::to_string(e.of[k]) +
                           " in one operand and " + std::to_string(d[i]) + " in the other");
            e.known[k] = true;
            e.of[k] = d[i];
        }
    };
    note(a.a, a.na, x);
    note(a.b, a.nb, y);
    if (ref) {
        if (ref->rank != a.nout) throw fail("the reference shape " + to_string(*ref) + " does not fit the output");
        for (int i = 0; i < a.nout; ++i) {
            const auto k = static_cast<std::size_t>(a.out[static_cast<std::size_t>(i)] - 'a');
            if (!e.known[k]) e.known[k] = true, e.of[k] = (*ref)[i];
        }
    }
    return e;
}

inline dims result_of(const einsum_attrs& a, const extents& e) {
    dims out{};
    out.rank = a.nout;
    for (int i = 0; i < a.nout; ++i) out[i] = e.of[static_cast<std::size_t>(a.out[static_cast<std::size_t>(i)] - 'a')];
    return out;
}

// A view of v (subscripts s) with its dimensions in the order of `order` (each letter of order is in s).
template <class T>
detail::strided<T> arranged(const detail::strided<T>& v, const char* s, int n, const char* order, int m) {
    detail::strided<T> r(v.data, dims{}, dims{});
    r.shape.rank = r.strides.rank = m;
    for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
            if (s[j] == order[i]) {
                r.shape[i] = v.shape[j];
                r.strides[i] = v.strides[j];
            }
    return r;
}

// A buffer from the device, taken on first use and handed back when the scope ends.
template <class Device, class T>
struct scratch {
    T* p = nullptr;
    std::size_t bytes = 0;
    scratch() = default;
    T* get(std::ptrdiff_t n) {
        bytes = static_cast<std::size_t>(n > 0 ? n : 1) * sizeof(T);
        p = static_cast<T*>(Device::allocate(bytes));
        return p;
    }
    ~scratch() {
        if (p) Device::deallocate(p, bytes);
    }
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
};


// out (row-major, out subscripts, extents e) = the contraction of x and y.
template <class Device, class U, class T>
void contract(const einsum_attrs& a, const extents& e, U* out, const detail::strided<const T>& x, const detail::strided<const T>& y) {
    // Letters by role: batch (both operands and the output), contracted (both, not the output), left (x only,
    // kept), right (y only, kept). Letters of one operand missing from the output and the other are summed first.
    char batch[max_rank], contr[max_rank], left[max_rank], right[max_rank], kx[max_rank], ky[max_rank];
    int nbatch = 0, ncontr = 0, nleft = 0, nright = 0, nkx = 0, nky = 0;
    for (int i = 0; i < a.na; ++i) {
        const char c = a.a[static_cast<std::size_t>(i)];
        if (a.in_b(c)) (a.in_out(c) ? batch[nbatch++] : contr[ncontr++]) = c, kx[nkx++] = c;
        else if (a.in_out(c)) left[nleft++] = c, kx[nkx++] = c;
    }
    for (int i = 0; i < a.nb; ++i) {
        const char c = a.b[static_cast<std::size_t>(i)];
        if (a.in_a(c)) ky[nky++] = c;
        else if (a.in_out(c)) right[nright++] = c, ky[nky++] = c;
    }
    auto count = [&](const char* s, int n) {
        std::ptrdiff_t k = 1;
        for (int i = 0; i < n; ++i) k *= e.of[static_cast<std::size_t>(s[i] - 'a')];
        return k;
    };
    const std::ptrdiff_t B = count(batch, nbatch), M = count(left, nleft), K = count(contr, ncontr), N = count(right, nright);
    // Each operand summed over its own letters and arranged as (batch, rows, inner) row-major: read in place when
    // its layout already is that, copied otherwise.
    auto prepare = [&](const detail::strided<const T>& v, const char* s, int n, const char* kept, int nkept, const char* rows,
                       int nrows, const char* inner, int ninner, scratch<Device, T>& sum_buf,
                       scratch<Device, T>& buf) -> const T* {
        char order[max_rank];
        int m = 0;
        for (int i = 0; i < nbatch; ++i) order[m++] = batch[i];
        for (int i = 0; i < nrows; ++i) order[m++] = rows[i];
        for (int i = 0; i < ninner; ++i) order[m++] = inner[i];
        dims shape{};
        shape.rank = m;
        for (int i = 0; i < m; ++i) shape[i] = e.of[static_cast<std::size_t>(order[i] - 'a')];
        detail::strided<const T> src = v;
        if (nkept != n) {
            // Sum away the letters that are not kept (into a row-major buffer of v's shape with those extents 1).
            dims keep = v.shape;
            for (int i = 0; i < n; ++i) {
                bool k = false;
                for (int j = 0; j < nkept; ++j) k = k || kept[j] == s[i];
                if (!k) keep[i] = 1;
            }
            T* p = sum_buf.get(keep.numel());
            Device::reduce(detail::fold_kind::sum, v, keep, p);
            src = detail::strided<const T>(p, keep, detail::contiguous_strides(keep));
        }
        const detail::strided<const T> view = arranged(src, s, n, order, m);
        if (detail::is_row_major(view)) return view.data;
        T* to = buf.get(shape.numel());
        Device::copy_strided(detail::strided<T>(to, shape, detail::contiguous_strides(shape)), view);
        return to;
    };
    scratch<Device, T> sx, sy, ax, by, prod;
    const T* pa = prepare(x, a.a.data(), a.na, kx, nkx, left, nleft, contr, ncontr, sx, ax);
    const T* pb = prepare(y, a.b.data(), a.nb, ky, nky, contr, ncontr, right, nright, sy, by);
    // The product as (batch, left, right); letters of the output in neither operand (einsum_to) repeat by stride 0.
    char have[3 * max_rank];
    int nhave = 0;
    for (int i = 0; i < nbatch; ++i) have[nhave++] = batch[i];
    for (int i = 0; i < nleft; ++i) have[nhave++] = left[i];
    for (int i = 0; i < nright; ++i) have[nhave++] = right[i];
    bool direct = std::is_same_v<U, T> && nhave == a.nout;
    for (int i = 0; direct && i < nhave; ++i) direct = have[i] == a.out[static_cast<std::size_t>(i)];
    T* c = nullptr;
    if constexpr (std::is_same_v<U, T>) c = direct ? out : prod.get(B * M * N);
    else c = prod.get(B * M * N);
    for (std::ptrdiff_t i = 0; i < B; ++i)
        Device::gemm(c + i * M * N, M, N, K, detail::matrix_ref<T>{pa + i * M * K, K, 1},
                     detail::matrix_ref<T>{pb + i * K * N, N, 1});
    if (direct) return;
    dims hs{};
    hs.rank = nhave;
    for (int i = 0; i < nhave; ++i) hs[i] = e.of[static_cast<std::size_t>(have[i] - 'a')];
    const dims hst = detail::contiguous_strides(hs);
    const dims os = result_of(a, e);
    detail::strided<const T> src(c, os, dims{});
    src.strides.rank = os.rank;
    for (int i = 0; i < a.nout; ++i) {
        src.strides[i] = 0;
        for (int j = 0; j < nhave; ++j)
            if (have[j] == a.out[static_cast<std::size_t>(i)]) src.strides[i] = hst[j];
    }
    Device::copy_strided(detail::strided<U>(out, os, detail::contiguous_strides(os)), src);
}

}  // namespace detail_einsum

struct einsum_to;

template <class SX, class SY, einsum_attrs A>
struct einsum_static_shapes_do_not_fit {
    static_assert(sizeof(SX) == 0,
                  "kiln::einsum: the operands' static shapes do not fit the subscripts: a rank differs from its "
                  "operand's number of letters, or a letter has two extents (see SX, SY and A above).");
    using type = dynamic;
};

// The static shape rule: with both operands' shapes fully static, the result's is static (and a mismatch is a
// static_assert at the call); otherwise dynamic.
template <einsum_attrs A, class SX, class SY>
struct einsum_static_shape {
    using type = dynamic;
};
template <einsum_attrs A, std::ptrdiff_t... X, std::ptrdiff_t... Y>
    requires(((X != dyn) && ...) && ((Y != dyn) && ...))
struct einsum_static_shape<A, shape<X...>, shape<Y...>> {
    struct letters {
        std::array<std::ptrdiff_t, 26> of{};
        bool ok = true;
    };
    static constexpr letters e = [] {
        letters r;
        std::array<bool, 26> seen{};
        constexpr std::array<std::ptrdiff_t, sizeof...(X) + 1> xs{X..., 0};
        constexpr std::array<std::ptrdiff_t, sizeof...(Y) + 1> ys{Y..., 0};
        if (static_cast<int>(sizeof...(X)) != A.na || static_cast<int>(sizeof...(Y)) != A.nb) {
            r.ok = false;
            return r;
        }
        auto note = [&](char c, std::ptrdiff_t n) {
            const auto k = static_cast<std::size_t>(c - 'a');
            if (seen[k] && r.of[k] != n) r.ok = false;
            seen[k] = true;
            r.of[k] = n;
        };
        for (int i = 0; i < A.na; ++i) note(A.a[static_cast<std::size_t>(i)], xs[static_cast<std::size_t>(i)]);
        for (int i = 0; i < A.nb; ++i) note(A.b[static_cast<std::size_t>(i)], ys[static_cast<std::size_t>(i)]);
        return r;
    }();
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<e.of[static_cast<std::size_t>(A.out[I] - 'a')]...>;
    using type = typename std::conditional_t<e.ok, std::type_identity<decltype(make(std::make_index_sequence<static_cast<std::size_t>(A.nout)>{}))>,
                                             einsum_static_shapes_do_not_fit<shape<X...>, shape<Y...>, A>>::type;
};

// einsum(a, b) with subscripts "x,y->out": letters in both operands and the output are batch dimensions, letters
// in both but not the output are contracted, letters of one operand that the output lacks are summed.
struct einsum {
    static constexpr std::string_view name = "einsum";
    static constexpr int arity = 2;
    using attributes = einsum_attrs;
    template <einsum_attrs A, class SX, class SY>
    using static_shape = typename einsum_static_shape<A, SX, SY>::type;
    static dims result_shape(const einsum_attrs& a, const dims& x, const dims& y) {
        return detail_einsum::result_of(a, detail_einsum::extents_of(a, x, y, nullptr, name));
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const einsum_attrs& a) { return "equation=" + einsum_text(a); }
    template <class Device, class U, class X, class Y>
    static void compute(const einsum_attrs& a, U* out, const X& x, const Y& y) {
        detail_einsum::contract<Device>(a, detail_einsum::extents_of(a, x.shape, y.shape, nullptr, name), out, x, y);
    }
    template <class A, class X, class Y, class R, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y& y, const R&, const G& g) {
        using F = structural_fns<X>;
        return detail::grads(F::template apply<einsum_to>(einsum_grad_attrs_of<0>(a), g, y, x),
                             F::template apply<einsum_to>(einsum_grad_attrs_of<1>(a), g, x, y));
    }
};

// einsum_to(g, other, ref): an einsum whose result has ref's shape: letters of the result that neither operand has
// take ref's extents and repeat (an operand's gradient, where that operand had letters summed away).
struct einsum_to {
    static constexpr std::string_view name = "einsum_to";
    static constexpr int arity = 3;
    static constexpr int shape_only_arg = 2;
    using attributes = einsum_attrs;
    template <einsum_attrs A, class SX, class SY, class SR>
    using static_shape = SR;
    static dims result_shape(const einsum_attrs& a, const dims& x, const dims& y, const dims& ref) {
        const dims r = detail_einsum::result_of(a, detail_einsum::extents_of(a, x, y, &ref, name));
        if (!(r == ref))
            throw shape_error(detail::error_prefix("shape_error", name) + "the result " + to_string(r) + " is not " + to_string(ref));
        return r;
    }
    template <class T>
    using result_type = T;
    static std::string attrs_text(const einsum_attrs& a) { return "equation=" + einsum_text(a); }
    template <class Device, class U, class X, class Y, class R>
    static void compute(const einsum_attrs& a, U* out, const X& x, const Y& y, const R& ref) {
        detail_einsum::contract<Device>(a, detail_einsum::extents_of(a, x.shape, y.shape, &ref.shape, name), out, x, y);
    }
    template <class A, class X, class Y, class R, class RR, class G>
    static constexpr auto gradient(const A& a, const X& x, const Y& y, const R&, const RR&, const G& g) {
        using F = structural_fns<X>;
        return detail::grads(F::template apply<einsum_to>(einsum_grad_attrs_of<0>(a), g, y, x),
                             F::template apply<einsum_to>(einsum_grad_attrs_of<1>(a), g, x, y), detail::no_grad{});
    }
};

}  // namespace ops
}  // namespace kiln
