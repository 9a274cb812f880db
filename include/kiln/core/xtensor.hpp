#pragma once
// xtensor as kiln includes it: every kiln header that needs xtensor includes it through this one.
//
// clang 19 matches template template parameters the relaxed way (P0522R0, on by default there), and Debian's
// xtensor 0.24 then has two partial specializations of xt::rebind_container that fit its own shape type,
// svector<std::size_t> (the one for svector and the one for any C<T, N>): every xarray fails to compile with
// "ambiguous partial specializations of 'rebind_container'". A partial specialization for the shape and stride types
// (svector<T, 4> with its default allocator) is more specialized than both, so kiln declares it before anything
// instantiates them. (A program that instantiates an xarray before it includes kiln under clang 19 meets
// xtensor's error first.)
#include <cstddef>
#include <memory>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#if defined(__clang__) && !defined(__CUDACC__) && __clang_major__ >= 19
namespace xt {
template <class X, class T>
struct rebind_container<X, svector<T, 4, std::allocator<T>, true>> {
    using type = svector<X, 4, std::allocator<X>, true>;
};
}  // namespace xt
#endif
