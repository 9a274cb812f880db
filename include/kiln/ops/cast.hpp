#pragma once
// cast<U>(x): element type conversion.
#include "../core/dtype.hpp"
#include "op_base.hpp"

namespace kiln {
namespace ops {

template <class U>
struct cast {
    static constexpr std::string_view name = "cast";
    static constexpr int arity = 1;
    using target = U;
    template <class A>
    KILN_HD KILN_INLINE static constexpr auto apply(const A& a) {
        if constexpr (requires { typename A::batch_type; }) {  // a comparison's mask on xsimd batches: 1 or 0
            using B = typename A::batch_type;
            return select(a, B(typename B::value_type(1)), B(typename B::value_type(0)));
        } else {
            return value_cast<U>(a);  // float to integer saturates, NaN gives 0 (defined, unlike static_cast)
        }
    }
    // The gradient flows back in the source's element type.
    template <class A, class Y, class G>
    static constexpr auto gradient(const A&, const Y&, const G& g);
};

}  // namespace ops

// The element type of an operand (a number's own type; graph nodes and tensors specialize this).
template <class T, class = void>
struct element_type {
    using type = T;
};
template <class T>
using element_type_t = typename element_type<std::remove_cvref_t<T>>::type;

template <class U, class A>
constexpr auto cast(const A& a) {
    if constexpr (std::is_same_v<element_type_t<A>, U>) return a;  // cast to its own type is the identity
    else return detail::make<ops::cast<U>>(a);
}

template <class U>
template <class A, class Y, class G>
constexpr auto ops::cast<U>::gradient(const A&, const Y&, const G& g) {
    if constexpr (std::is_floating_point_v<element_type_t<A>>) return detail::grads(kiln::cast<element_type_t<A>>(g));
    else return detail::grads(detail::no_grad{});
}

}  // namespace kiln
