#pragma once
// Views and broadcasting: transpose, reshape, reshape_as, expand, broadcast_to (views of their operand when the
// layout allows, copies otherwise), sum_to (the reduction back to a broadcast operand's shape) and broadcast_like
// (elementwise, fused).
#include "reduce.hpp"

namespace kiln {
namespace detail {

template <class S>
struct reversed_static_shape {
    using type = dynamic;
};
template <std::ptrdiff_t... D>
struct reversed_static_shape<shape<D...>> {
    static constexpr std::array<std::ptrdiff_t, (sizeof...(D) > 0 ? sizeof...(D) : 1)> in{D...};
    template <std::size_t... I>
    static auto make(std::index_sequence<I...>) -> shape<in[sizeof...(D) - 1 - I]...>;
    using type = decltype(make(std::make_index_sequence<sizeof...(D)>{}));
};


}  // namespace detail

namespace ops {

// Reverses the axes (the matrix transpose for rank 2): a view.
struct transpose {
    static constexpr std::string_view name = "transpose";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = typename detail::reversed_static_shape<S>::type;
    static dims shape(const dims& a) {
        dims out = a;
        std::reverse(out.d.begin(), out.d.begin() + out.rank);
        return out;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        out = a;
        std::reverse(out.shape.d.begin(), out.shape.d.begin() + out.shape.rank);
        std::reverse(out.strides.d.begin(), out.strides.d.begin() + out.strides.rank);
        return true;
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y& y, const G& g);
};

// Shared by reshape<...> and reshape_as: a view of row-major data, or a row-major copy.
struct reshape_base {
    static constexpr bool structural = true;
    template <class T>
    static bool try_view(detail::strided<const T>& out, const dims& shape, const detail::strided<const T>& a) {
        if (!detail::is_row_major(a)) return false;
        out = detail::strided<const T>(a.data, shape, detail::contiguous_strides(shape));
        return true;
    }
    template <class Device, class T>
    static void copy(T* out, const detail::strided<const T>& a) {
        Device::copy_strided(detail::strided<T>(out, a.shape, detail::contiguous_strides(a.shape)), a);
    }
};

// reshape<D...>(x): a new static shape of the same size; one extent may be kiln::dyn (-1), inferred.
template <std::ptrdiff_t... D>
struct reshape : reshape_base {
    static constexpr std::string_view name = "reshape";
    static constexpr int arity = 1;
    static_assert(((D == dyn ? 1 : 0) + ... + 0) <= 1, "kiln::reshape: at most one extent may be kiln::dyn (inferred).");
    static_assert(((D >= 0 || D == dyn) && ...), "kiln::reshape: extents are non-negative or kiln::dyn.");
    template <class A>
    static A apply(const A&);
    template <class S>
    struct rule {
        using type = shape<D...>;
    };
    template <std::ptrdiff_t... S>
        requires(((S != dyn) && ...) && ((D == dyn ? 1 : 0) + ... + 0) == 1)
    struct rule<shape<S...>> {
        static constexpr std::ptrdiff_t total = (std::ptrdiff_t{1} * ... * S);
        static constexpr std::ptrdiff_t known = (std::ptrdiff_t{1} * ... * (D == dyn ? 1 : D));
        using type = shape<(D == dyn ? (known == 0 ? 0 : total / known) : D)...>;
    };
    template <class S>
    using static_shape = typename rule<S>::type;

    static dims shape(const dims& a) {
        dims out{D...};
        std::ptrdiff_t known = 1;
        int infer = -1;
        for (int i = 0; i < out.rank; ++i) {
            if (out[i] == dyn) infer = i;
            else known *= out[i];
        }
        if (infer >= 0) out[infer] = known == 0 ? 0 : a.numel() / known;
        if (out.numel() != a.numel())
            throw shape_error("kiln: shape_error in 'reshape': cannot reshape " + to_string(a) + " (" + std::to_string(a.numel()) +
                              " elements) to " + to_string(out));
        return out;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        return reshape_base::try_view(out, shape(a.shape), a);
    }
    template <class Device, class T>
    static void compute(T* out, const dims&, const detail::strided<const T>& a) {
        copy<Device>(out, a);
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a));
    }
};

// reshape_as(g, ref): g in ref's shape (what reshape's gradient uses).
struct reshape_as : reshape_base {
    static constexpr std::string_view name = "reshape_as";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SG, class SR>
    using static_shape = SR;
    static dims shape(const dims& g, const dims& ref) {
        if (g.numel() != ref.numel())
            throw shape_error("kiln: shape_error in 'reshape_as': cannot reshape " + to_string(g) + " to " + to_string(ref));
        return ref;
    }
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        return reshape_base::try_view(out, shape(g.shape, ref.shape), g);
    }
    template <class Device, class T, class R>
    static void compute(T* out, const dims&, const detail::strided<const T>& g, const detail::strided<const R>&) {
        copy<Device>(out, g);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a), detail::no_grad{});
    }
};

// expand<A>(g, ref): g, which lacks the axes that a reduction with attributes A folded out of ref, with those axes
// put back as extent 1 (a view).
template <reduce_attrs A>
struct expand_axes {
    static constexpr std::string_view name = "expand";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 1;
    template <class X, class B>
    static X apply(const X&, const B&);
    template <class SG, class SR>
    using static_shape = typename reduced_static_shape<keeping_dims(A), SR>::type;
    static dims shape(const dims& g, const dims& ref) {
        const detail::reduction_shape r = reduce_shape(A, ref, "expand");
        if (!(g == r.result))
            throw shape_error("kiln: shape_error in 'expand': shape " + to_string(g) + " is not " + to_string(ref) +
                              " reduced over the expanded axes");
        return r.keep;
    }
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        const dims s = shape(g.shape, ref.shape);
        const axis_mask m = reduced_axes(A, ref.shape.rank);
        out.data = g.data;
        out.shape = s;
        out.strides.rank = s.rank;
        int j = 0;
        for (int i = 0; i < s.rank; ++i) out.strides[i] = m.reduced[static_cast<std::size_t>(i)] ? 0 : g.strides[j++];
        return true;
    }
    template <class X, class B, class Y, class G>
    static constexpr auto gradient(const X& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::reshape_as(detail::like(g, y), a), detail::no_grad{});
    }
};

// broadcast_to<D...>(x): x repeated to a static shape (a view with zero strides).
template <std::ptrdiff_t... D>
struct broadcast_to {
    static constexpr std::string_view name = "broadcast_to";
    static constexpr int arity = 1;
    static constexpr bool structural = true;
    static_assert(((D >= 0) && ...), "kiln::broadcast_to: the target shape's extents must be known.");
    template <class A>
    static A apply(const A&);
    template <class S>
    using static_shape = shape<D...>;
    static dims shape(const dims& a) {
        const dims target{D...};
        dims out;
        if (!detail::broadcast_into(a, target, out) || !(out == target))
            throw shape_error("kiln: shape_error in 'broadcast_to': cannot broadcast shape " + to_string(a) + " to " + to_string(target));
        return target;
    }
    template <class T>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& a) {
        out = detail::broadcast_view(a, shape(a.shape));
        return true;
    }
    template <class A, class Y, class G>
    static constexpr auto gradient(const A& a, const Y& y, const G& g) {
        return detail::grads(detail::sum_to(detail::like(g, y), a));
    }
};

// sum_to(g, ref): g summed over the dimensions along which ref was broadcast, in ref's shape.
struct sum_to {
    static constexpr std::string_view name = "sum_to";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SG, class SR>
    using static_shape = SR;
    static dims shape(const dims& g, const dims& ref) {
        dims b;
        if (!detail::broadcast_into(g, ref, b) || !(b == g))
            throw shape_error("kiln: shape_error in 'sum_to': shape " + to_string(g) + " is not a broadcast of " + to_string(ref));
        return ref;
    }
    // Nothing to sum when g already has ref's shape.
    template <class T, class R>
    static bool try_view(detail::strided<const T>& out, const detail::strided<const T>& g, const detail::strided<const R>& ref) {
        if (!(shape(g.shape, ref.shape) == g.shape)) return false;
        out = g;
        return true;
    }
    template <class Device, class T, class R>
    static void compute(T* out, const dims& s, const detail::strided<const T>& g, const detail::strided<const R>&) {
        dims keep = g.shape;
        for (int i = 0; i < g.shape.rank; ++i) {
            const int ir = i - (g.shape.rank - s.rank);
            if (ir < 0 || s[ir] == 1) keep[i] = 1;
        }
        Device::reduce(detail::fold_kind::sum, g, keep, out);
    }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B&, const Y& y, const G& g) {
        return detail::grads(detail::like(detail::like(g, y), a), detail::no_grad{});
    }
};

// broadcast_like(g, ref): g broadcast to the shape of g and ref together; elementwise (fused), ref's value unused.
struct broadcast_like {
    static constexpr std::string_view name = "broadcast_like";
    static constexpr int arity = 2;
    static constexpr int shape_only_arg = 1;
    template <class A, class B>
    KILN_HD KILN_INLINE static constexpr A apply(const A& a, const B&) { return a; }
    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A&, const B&, const Y&, const G& g) {
        return detail::grads(g, detail::no_grad{});
    }
};

}  // namespace ops

namespace detail {

template <class G, class R>
constexpr auto like(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R> || !is_graph_v<R>) return g;
    else return make_node<ops::broadcast_like>(as_graph_operand(g), ref);
}

template <class G, class R>
constexpr auto sum_to(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R>) return g;
    else if constexpr (std::is_same_v<shape_key_t<G>, shape<>>) return structural<ops::sum_to>(like(g, ref), ref);
    else return structural<ops::sum_to>(g, ref);
}

template <class G, class R>
constexpr auto reshape_as(const G& g, const R& ref) {
    if constexpr (same_shape_v<G, R>) return g;
    else if constexpr (std::is_same_v<shape_key_t<G>, shape<>>) return like(g, ref);  // uniform: only the shape changes
    else return structural<ops::reshape_as>(g, ref);
}

template <ops::reduce_attrs A, class G, class R>
constexpr auto expand(const G& g, const R& ref) {
    if constexpr (A.keepdims || A.every_axis() || std::is_same_v<shape_key_t<G>, shape<>>) return g;
    else return structural<ops::expand_axes<A>>(g, ref);
}

}  // namespace detail

// The transpose (axes reversed): a view, no copy.
template <class E>
    requires is_graph_v<E>
constexpr auto transpose(const E& e) {
    if constexpr (is_node_v<E>) {
        if constexpr (std::is_same_v<typename E::op, ops::transpose>) return e.template arg<0>();  // T(T(x)) -> x
        else return detail::structural<ops::transpose>(e);
    } else {
        return detail::structural<ops::transpose>(e);
    }
}

namespace ops {
template <class A, class Y, class G>
constexpr auto transpose::gradient(const A&, const Y& y, const G& g) {
    return detail::grads(detail::structural<transpose>(detail::like(g, y)));
}
}  // namespace ops

// A new static shape of the same size; one extent may be kiln::dyn and is inferred.
template <std::ptrdiff_t... D, class E>
    requires is_graph_v<E>
constexpr auto reshape(const E& e) {
    return detail::structural<ops::reshape<D...>>(e);
}

// Repeats x to a static shape with NumPy's broadcasting rules (a view).
template <std::ptrdiff_t... D, class E>
    requires is_graph_v<E>
constexpr auto broadcast_to(const E& e) {
    return detail::structural<ops::broadcast_to<D...>>(e);
}

}  // namespace kiln
