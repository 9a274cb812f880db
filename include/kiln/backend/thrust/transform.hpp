#pragma once
// Lowering an elementwise graph to Thrust: one thrust::transform over a zip of the leaves' pointers, with the fused
// expression as the functor. Compiles with nvcc for GPUs and with a host compiler on Thrust's OpenMP or CPP device
// systems. Leaves and output must have one size (no broadcasting on this path yet).
#include <string>

#include <thrust/device_vector.h>
#include <thrust/iterator/zip_iterator.h>
#include <thrust/transform.h>
#include <thrust/tuple.h>

#include "../../expr/anonymize.hpp"
#include "../../expr/build.hpp"
#include "../../expr/evaluate.hpp"
#include "../../expr/feed.hpp"
#include "../../expr/unique_nodes.hpp"

namespace kiln {
namespace detail {

template <class Tuple>
struct thrust_tuple_loader {
    const Tuple& t;
    template <std::size_t K>
    KILN_HD KILN_INLINE auto get() const {
        return ::thrust::get<K>(t);
    }
};

// The kernel: evaluates the unique nodes of one position, then the root. Trivially copyable, like the expression.
template <class List, class Root>
struct fused_functor {
    Root root;
    template <class Tuple>
    KILN_HD root_type_t<Root> operator()(const Tuple& t) const {
        const frame<scalar_mode, List> f(thrust_tuple_loader<Tuple>{t});
        return f.template evaluate<root_type_t<Root>>(root);
    }
};

template <class Feed>
auto thrust_data(const Feed& f) {
    return f.data->data();
}

}  // namespace detail

namespace thrust_backend {

// Runs `expr` into `out` (a thrust::device_vector or anything with data() giving a device pointer and size()).
template <class Out, class E, class... Feeds>
void run_into(Out& out, const E& expr, const Feeds&... feeds) {
    static_assert(is_graph_v<E>, "kiln::thrust_backend::run_into: the second argument must be a graph expression.");
    static_assert(std::is_trivially_copyable_v<E>, "kiln: graph expressions must be trivially copyable.");
    using list = detail::unique_nodes_t<E>;
    using leaves = detail::leaves_t<list>;
    static_assert(leaves::size > 0, "kiln::thrust_backend::run_into: the expression has no input to iterate over.");
    using R = detail::root_type_t<E>;
    static_assert(std::is_same_v<typename Out::value_type, R>,
                  "kiln::thrust_backend::run_into: the output's element type differs from the expression's.");
    const auto n = static_cast<std::ptrdiff_t>(out.size());
    [&]<class... Leaves>(detail::types<Leaves...>) {
        if constexpr (detail::bound_leaves<leaves>::template check<Feeds...>()) {
            const auto all = std::forward_as_tuple(feeds...);
            auto check = [&](const auto& f, std::string_view name) {
                const auto m = static_cast<std::ptrdiff_t>(f.data->size());
                if (m != n)
                    throw shape_error("kiln: shape_error in 'thrust_backend::run_into': input '" + std::string(name) + "' has " +
                                      std::to_string(m) + " elements but the output has " + std::to_string(n) +
                                      " (this path does not broadcast)");
            };
            (check(std::get<detail::feed_index<Leaves, Feeds...>()>(all), Leaves::name.view()), ...);
            auto first = ::thrust::make_zip_iterator(
                ::thrust::make_tuple(detail::thrust_data(std::get<detail::feed_index<Leaves, Feeds...>()>(all))...));
            const auto anonymous = detail::anonymize<leaves>(expr);
            using A = std::remove_const_t<decltype(anonymous)>;
            ::thrust::transform(first, first + n, out.begin(),
                                detail::fused_functor<detail::unique_nodes_t<A>, A>{anonymous});
        } else {
            detail::bound_leaves<leaves>::template report<Feeds...>();
        }
    }(leaves{});
}

// Runs `expr` into a new thrust::device_vector sized like the inputs.
template <class E, class... Feeds>
auto run(const E& expr, const Feeds&... feeds) {
    using R = detail::root_type_t<E>;
    std::size_t n = 0;
    ((n = feeds.get().size()), ...);
    ::thrust::device_vector<R> out(n);
    run_into(out, expr, feeds...);
    return out;
}

}  // namespace thrust_backend
}  // namespace kiln
