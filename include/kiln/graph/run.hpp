#pragma once
// kiln::run, kiln::run_into and kiln::fetch: on the CPU, or on the GPU when the feeds live there (docs/gpu.md).
#include <array>
#include <span>
#include <tuple>
#include <vector>

#include "../core/xtensor.hpp"

#include "../backend/cpu/fused_loop.hpp"
#include "../backend/gpu.hpp"
#include "plan.hpp"
#if KILN_HAS_GPU
#include "../backend/thrust/device.hpp"
#endif

namespace kiln {

namespace detail {
template <class... Roots>
struct fetch_t {
    root_pack<Roots...> roots;
};
// Whether E is a kiln::fetch(...). (A trait, not `requires { expr.roots; }`: clang writes out the type of a failed
// requirement as text, and a graph's type written out is exponential in its depth.)
template <class E>
inline constexpr bool is_fetch_v = false;
template <class... Roots>
inline constexpr bool is_fetch_v<fetch_t<Roots...>> = true;
}  // namespace detail

// Several roots computed in one pass: kiln::run(kiln::fetch(loss, y), feeds...).
template <class... Roots>
constexpr detail::fetch_t<Roots...> fetch(const Roots&... roots) {
    static_assert(sizeof...(Roots) > 0, "kiln::fetch: name at least one expression to compute.");
    static_assert((is_graph_v<Roots> && ...), "kiln::fetch: every argument must be a graph-mode expression.");
    return {detail::root_pack<Roots...>(roots...)};
}

namespace detail {

template <class S>
struct static_rank {
    static constexpr std::size_t value = 0;
};
template <std::ptrdiff_t... D>
struct static_rank<shape<D...>> {
    static constexpr std::size_t value = sizeof...(D);
};

}  // namespace detail

// What kiln::run returns: xtensor containers whose memory comes from kiln's caching allocator, so that a large
// result reuses the blocks of an earlier one instead of faulting in fresh pages (xt::xarray<T> and xt::xtensor<T, N>
// with another allocator; assigning one to a plain xt::xarray<T> copies it).
template <class T>
using xarray = xt::xarray<T, XTENSOR_DEFAULT_LAYOUT, detail::cached_allocator<T>>;
template <class T, std::size_t N>
using xtensor = xt::xtensor<T, N, XTENSOR_DEFAULT_LAYOUT, detail::cached_allocator<T>>;

namespace detail {

// kiln::xtensor<T, N> when the rank is known at compile time, kiln::xarray<T> otherwise.
template <class Root>
using result_container_t =
    std::conditional_t<std::is_same_v<shape_of_t<Root>, dynamic>, kiln::xarray<root_type_t<Root>>,
                       kiln::xtensor<root_type_t<Root>, static_rank<shape_of_t<Root>>::value>>;

template <class C>
C allocate_result(const dims& shape) {
    if constexpr (requires { std::tuple_size<typename C::shape_type>::value; }) {  // xt::xtensor: a std::array shape
        if (static_cast<std::size_t>(shape.rank) != std::tuple_size<typename C::shape_type>::value)
            throw shape_error("kiln: shape_error in 'run': the result has shape " + to_string(shape) + " but the expression's static "
                              "rank is " + std::to_string(std::tuple_size<typename C::shape_type>::value));
        typename C::shape_type s{};
        for (int i = 0; i < shape.rank; ++i) s[i] = static_cast<std::size_t>(shape[i]);
        return C::from_shape(s);
    } else {
        std::vector<std::size_t> s(shape.d.begin(), shape.d.begin() + shape.rank);
        return C::from_shape(s);
    }
}

// One root in its own loop (fetch's roots of different shapes).
template <class Root, class Out, class... Feeds>
void run_one(const Root& root, Out& out, const dims& shape, const Feeds&... feeds) {
    using list = unique_nodes_t<Root>;
    using loop = fused_loop<list, Root>;
    const auto bound = bound_leaves<leaves_t<list>>::bind_checked("kiln::run", feeds...);
    typename loop::outs_t outs{as_strided<root_type_t<Root>>(out)};
    loop::run(root_pack<Root>(root), bound, outs, shape);
}

template <class... Roots, class... Feeds>
auto run_unplanned(const root_pack<Roots...>& roots, const Feeds&... feeds);

// Graphs with reductions, matmul or views: materialized nodes first, then one fused loop per root.
template <class... Roots, class... Feeds>
auto run_planned(const root_pack<Roots...>& roots, const Feeds&... feeds) {
    using plan_t = plan<Roots...>;
    const auto users = bound_leaves<typename plan_t::user_leaves>::bind("kiln::run", feeds...);
    typename plan_t::workspace ws;
    plan_t::prepare(users, ws);
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::tuple<result_container_t<Roots>...>([&] {
            using R = result_container_t<Roots>;
            const auto r = plan_t::rewritten(roots.template get<J>());
            const dims s = plan_t::shape_of_expression(r, users, ws);
            R out = allocate_result<R>(s);
            plan_t::run_elementwise(r, users, ws, as_strided<root_type_t<Roots>>(out), s);
            return out;
        }()...);
    }(std::index_sequence_for<Roots...>{});
}

#if KILN_HAS_GPU
// The GPU: feeds that live on a device. The plan's slots live there and each fusion group is one kernel; the
// results come back to the host as kiln::run's containers (run_into keeps a result on the device).
template <class... Roots, class... Feeds>
auto run_roots_on_gpu(kiln::device dev, const root_pack<Roots...>& roots, const Feeds&... feeds) {
    using D = backend::thrust_device;
    using plan_t = plan<Roots...>;
    backend::gpu_memory::require(dev, "kiln::run");
    const backend::gpu_memory::device_scope on(dev.index);
    const auto users = bound_leaves<typename plan_t::user_leaves>::bind_on(dev, "kiln::run", feeds...);
    typename plan_t::workspace ws;
    plan_t::template prepare<D>(users, ws);
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return std::tuple<result_container_t<Roots>...>([&] {
            using R = result_container_t<Roots>;
            using T = root_type_t<Roots>;
            const auto r = plan_t::rewritten(roots.template get<J>());
            const dims s = plan_t::shape_of_expression(r, users, ws);
            R out = allocate_result<R>(s);
            device_block result;
            const std::size_t bytes = static_cast<std::size_t>(s.numel()) * sizeof(T);
            T* p = static_cast<T*>(result.template grow<D>(bytes));
            plan_t::template run_elementwise<D>(r, users, ws, strided<T>(p, s, contiguous_strides(s)), s);
            backend::gpu_memory::to_host(out.data(), p, bytes, dev.index);
            return out;
        }()...);
    }(std::index_sequence_for<Roots...>{});
}
#endif

template <class... Roots, class... Feeds>
auto run_roots(const root_pack<Roots...>& roots, const Feeds&... feeds) {
#if KILN_HAS_GPU
    if (const kiln::device dev = device_of_feeds(feeds...); dev.type != device_type::cpu) [[unlikely]]
        return run_roots_on_gpu(dev, roots, feeds...);
#endif
    if constexpr ((has_structural<Roots>::value || ...)) return run_planned(roots, feeds...);
    else return run_unplanned(roots, feeds...);
}

template <class... Roots, class... Feeds>
auto run_unplanned(const root_pack<Roots...>& roots, const Feeds&... feeds) {
    using list = unique_nodes_t<Roots...>;
    using leaves = leaves_t<list>;
    const auto bound = bound_leaves<leaves>::bind("kiln::run", feeds...);
    std::array<dims, sizeof...(Roots)> shapes;
    bool same = true;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((shapes[J] = output_shape<leaves>(bound, roots.template get<J>()), same = same && shapes[J] == shapes[0]), ...);
    }(std::index_sequence_for<Roots...>{});

    std::tuple<result_container_t<Roots>...> results;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((std::get<J>(results) = allocate_result<result_container_t<Roots>>(shapes[J])), ...);
        if (same) {
            using loop = fused_loop<list, Roots...>;
            typename loop::outs_t outs{as_strided<root_type_t<Roots>>(std::get<J>(results))...};
            loop::run(roots, bound, outs, shapes[0]);
        } else {
            // Roots of different shapes: one loop each.
            (run_one(roots.template get<J>(), std::get<J>(results), shapes[J], feeds...), ...);
        }
    }(std::index_sequence_for<Roots...>{});
    return results;
}

// Containers that are always one dense row-major range: std::vector, std::span, std::array (rank 1) and xtensor's
// row-major containers and adaptors. For these a pointer and the shape say everything, so run_into can skip the
// strided views (their binding and checks are a tenth of a 2^10-element chain).
template <class C>
inline constexpr bool std_range_v = false;
// (Not std::vector<bool>: it has no data(); the general path rejects it with kiln's own message.)
template <class T, class A>
inline constexpr bool std_range_v<std::vector<T, A>> = !is_vector_bool_v<std::vector<T, A>>;
template <class T, std::size_t E>
inline constexpr bool std_range_v<std::span<T, E>> = true;
template <class T, std::size_t N>
inline constexpr bool std_range_v<std::array<T, N>> = true;

template <class C>
concept dense_range = std_range_v<std::remove_cv_t<C>> || requires(const C& c) {
    requires C::static_layout == xt::layout_type::row_major;
    c.storage();
    c.shape();
};

template <class C>
std::size_t dense_rank(const C& c) noexcept {
    if constexpr (std_range_v<std::remove_cv_t<C>>) return 1;
    else return c.shape().size();
}
template <class C>
std::size_t dense_extent(const C& c, std::size_t d) noexcept {
    if constexpr (std_range_v<std::remove_cv_t<C>>) return (void)d, c.size();
    else return c.shape()[d];
}
template <class A, class B>
bool dense_same_shape(const A& a, const B& b) noexcept {
    if constexpr (std_range_v<std::remove_cv_t<A>> && std_range_v<std::remove_cv_t<B>>) {
        return a.size() == b.size();
    } else {
        const std::size_t r = dense_rank(a);
        if (r != dense_rank(b)) return false;
        for (std::size_t d = 0; d < r; ++d)
            if (dense_extent(a, d) != dense_extent(b, d)) return false;
        return true;
    }
}

template <class LeafList>
struct dense_leaves;
template <class... Leaves>
struct dense_leaves<types<Leaves...>> {
    // Statically shaped leaves need their declared shapes checked: they take the general path.
    static constexpr bool all_dynamic = (std::is_same_v<typename Leaves::shape_type, dynamic> && ...);

    using pointer_tuple = std::tuple<const typename Leaves::value_type*...>;

    // The leaves' first elements when every feed has the output's shape, otherwise false.
    template <class Out, class... Feeds>
    static bool pointers(pointer_tuple& lp, const Out& out,
                         const Feeds&... feeds) {
        [[maybe_unused]] const auto all = std::forward_as_tuple(feeds...);
        const bool same = (dense_same_shape(std::get<feed_index<Leaves, Feeds...>()>(all).get(), out) && ...);
        if (same) lp = {std::get<feed_index<Leaves, Feeds...>()>(all).get().data()...};
        return same;
    }
};

// The user leaves of a fetch's roots, and the results it gives.
template <class Pack>
struct pack_traits;
template <class... Roots>
struct pack_traits<root_pack<Roots...>> {
    using leaves = leaves_t<unique_nodes_t<Roots...>>;
    using results = std::tuple<result_container_t<Roots>...>;
};

// The compile-time checks of the feeds (names, element types, use), made first at each entry point. When one
// fails, the entry point calls report_feeds, whose static_assert is the only error: nothing past the check is
// instantiated, and the chain of "required from" lines prints the expression's type once, at the entry point,
// instead of once for every internal function (that printed form doubles with each layer that reuses a subtree).
template <class Leaves, class... Feeds>
inline constexpr bool feeds_ok = bound_leaves<Leaves>::template check<Feeds...>();
template <class Leaves, class... Feeds>
void report_feeds() {
    bound_leaves<Leaves>::template report<Feeds...>();
}
}  // namespace detail

// Runs an expression: one fused pass over memory; the result is an xtensor container.
template <class E, class... Feeds>
auto run(const E& expr, const Feeds&... feeds) {
    if constexpr (detail::is_fetch_v<E>) {
        using traits = detail::pack_traits<std::remove_cvref_t<decltype(expr.roots)>>;
        if constexpr (detail::feeds_ok<typename traits::leaves, Feeds...>) {
            return detail::run_roots(expr.roots, feeds...);
        } else {
            detail::report_feeds<typename traits::leaves, Feeds...>();
            return typename traits::results{};
        }
    } else if constexpr (!is_graph_v<E>) {
        static_assert(is_graph_v<E>, "kiln::run: the first argument must be a graph-mode expression or kiln::fetch.");
    } else if constexpr (detail::feeds_ok<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>) {
        return std::get<0>(detail::run_roots(detail::root_pack<E>(expr), feeds...));
    } else {
        detail::report_feeds<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>();
        return detail::result_container_t<E>{};
    }
}

namespace detail {
// An elementwise graph: one fused loop. (The views' extents past their rank are left unset on purpose, as in
// shape_inference.hpp; GCC's -Wmaybe-uninitialized cannot see that they are never read.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <class Out, class E, class... Feeds>
KILN_NOINLINE void run_into_views(Out& out, const E& expr, const Feeds&... feeds);

template <class Out, class E, class... Feeds>
KILN_INLINE void run_into_elementwise(Out& out, const E& expr, const Feeds&... feeds) {
    using R = root_type_t<E>;
    using list = unique_nodes_t<E>;
    using leaves = leaves_t<list>;
    using loop = fused_loop<list, E>;
    using dense = dense_leaves<leaves>;
    if constexpr (leaves::size > 0 && dense::all_dynamic && dense_range<std::remove_reference_t<Out>> &&
                  (dense_range<const typename Feeds::container_type> && ...)) {
        // Dense containers of one shape: raw pointers, no views.
        typename dense::pointer_tuple lp;
        if (dense::pointers(lp, out, feeds...)) {
            loop::run_flat_ptrs(root_pack<E>(expr), lp, std::tuple<R*>(out.data()),
                                static_cast<std::ptrdiff_t>(out.size()));
            return;
        }
    }
    run_into_views(out, expr, feeds...);
}

// The general case: strided views of the output and of every feed, shapes inferred when they differ. Out of line,
// so that the dense path above does not set up this path's stack frame (its views are large and aligned).
template <class Out, class E, class... Feeds>
void run_into_views(Out& out, const E& expr, const Feeds&... feeds) {
    using leaves = leaves_t<unique_nodes_t<E>>;
    using loop = fused_loop<unique_nodes_t<E>, E>;
    typename loop::outs_t outs;  // views are filled in place: copying them shows at small sizes
    auto& o = std::get<0>(outs);
    fill_strided(o, out, kiln::cpu, "kiln::run_into");
    const auto bound = bound_leaves<leaves>::bind("kiln::run_into", feeds...);
    // Leaves shaped like the output need no shape inference (an elementwise graph keeps their shape).
    const bool same = [&]<std::size_t... K>(std::index_sequence<K...>) {
        return sizeof...(K) > 0 && ((std::get<K>(bound).shape == o.shape) && ...);
    }(std::make_index_sequence<leaves::size>{});
    if (!same) {
        const dims shape = output_shape<leaves>(bound, expr);
        if (!(o.shape == shape))
            throw shape_error("kiln: shape_error in 'run_into': the output has shape " + to_string(o.shape) +
                              " but the expression gives shape " + to_string(shape));
    }
    loop::run(root_pack<E>(expr), bound, outs, o.shape);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if KILN_HAS_GPU
// run_into on the GPU: the output and every feed live on device `dev`.
template <class Out, class E, class... Feeds>
KILN_NOINLINE void run_into_gpu(kiln::device dev, Out& out, const E& expr, const Feeds&... feeds) {
    using D = backend::thrust_device;
    using R = root_type_t<E>;
    using plan_t = plan<E>;
    backend::gpu_memory::require(dev, "kiln::run_into");
    const backend::gpu_memory::device_scope on(dev.index);
    strided<R> o;
    fill_strided(o, out, dev, "kiln::run_into");
    const auto users = bound_leaves<typename plan_t::user_leaves>::bind_on(dev, "kiln::run_into", feeds...);
    typename plan_t::workspace ws;
    plan_t::template prepare<D>(users, ws);
    const auto r = plan_t::rewritten(expr);
    const dims shape = plan_t::shape_of_expression(r, users, ws);
    if (!(o.shape == shape))
        throw shape_error("kiln: shape_error in 'run_into': the output has shape " + to_string(o.shape) +
                          " but the expression gives shape " + to_string(shape));
    plan_t::template run_elementwise<D>(r, users, ws, o, shape);
}
#endif

template <class Out, class E, class... Feeds>
KILN_INLINE void run_into_checked(Out& out, const E& expr, const Feeds&... feeds) {
    using R = root_type_t<E>;
#if KILN_HAS_GPU
    {
        kiln::device dev = device_of_container(out);
        if (dev.type == device_type::cpu) dev = device_of_feeds(feeds...);
        if (dev.type != device_type::cpu) [[unlikely]] {
            run_into_gpu(dev, out, expr, feeds...);
            return;
        }
    }
#endif
    if constexpr (has_structural<E>::value) {
        using plan_t = plan<E>;
        const auto users = bound_leaves<typename plan_t::user_leaves>::bind("kiln::run_into", feeds...);
        typename plan_t::workspace ws;
        plan_t::prepare(users, ws);
        const auto r = plan_t::rewritten(expr);
        const dims shape = plan_t::shape_of_expression(r, users, ws);
        strided<R> o;
        fill_strided(o, out, kiln::cpu, "kiln::run_into");
        if (!(o.shape == shape))
            throw shape_error("kiln: shape_error in 'run_into': the output has shape " + to_string(o.shape) +
                              " but the expression gives shape " + to_string(shape));
        plan_t::run_elementwise(r, users, ws, o, shape);
    } else {
        run_into_elementwise(out, expr, feeds...);
    }
}
}  // namespace detail

// Runs an expression into existing storage (an xtensor container, std::vector, std::span, kiln::view or
// kiln::tensor) of the expression's shape and element type, without allocating. Storage on the GPU (a device tensor, or
// kiln::view(ptr, shape, kiln::cuda)) with feeds there runs there.
template <class Out, class E, class... Feeds>
void run_into(Out&& out, const E& expr, const Feeds&... feeds) {
    // Each check stops what follows it, so a mistake gives one error (see feeds_ok).
    if constexpr (!is_graph_v<E>) {
        static_assert(is_graph_v<E>, "kiln::run_into: the second argument must be a graph-mode expression.");
    } else {
        using R = detail::root_type_t<E>;
        using out_element = std::remove_const_t<detail::container_element_t<std::remove_reference_t<Out>>>;
        // (A kiln::tensor's dtype is checked when it is bound.)
        if constexpr (!std::is_same_v<out_element, R> && !std::is_same_v<out_element, detail::runtime_element>) {
            static_assert(std::is_same_v<out_element, R>,
                          "kiln::run_into: the output's element type differs from the expression's; see R and Out "
                          "above.");
        } else if constexpr (detail::feeds_ok<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>) {
            detail::run_into_checked(out, expr, feeds...);
        } else {
            detail::report_feeds<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>();
        }
    }
}

}  // namespace kiln
