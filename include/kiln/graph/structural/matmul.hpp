#pragma once
// matmul of two graph-mode matrices; its kernel is the device's (backend/cpu/matmul.hpp on the CPU).
#include "views.hpp"

namespace kiln {
namespace detail {

template <class SA, class SB>
struct matmul_inner_dimensions_differ {
    static_assert(sizeof(SA) == 0,
                  "kiln::matmul: the static shapes of the operands do not fit: the columns of A must equal the rows "
                  "of B (see SA and SB in 'matmul_inner_dimensions_differ<SA, SB>' above).");
    using type = dynamic;
};
template <class SA, class SB>
struct graph_matmul_takes_matrices {
    static_assert(sizeof(SA) == 0,
                  "kiln::matmul: in graph mode both operands must be matrices (rank 2; see SA and SB above); "
                  "reshape vectors with kiln::reshape<1, n>(x).");
    using type = dynamic;
};

template <class SA, class SB>
struct matmul_static_shape {
    template <class S>
    struct as_matrix {
        using type = S;
    };
    template <class S>
        requires std::is_same_v<S, dynamic>
    struct as_matrix<S> {
        using type = shape<dyn, dyn>;
    };
    template <class A, class B>
    struct rule {
        using type = typename graph_matmul_takes_matrices<A, B>::type;
    };
    template <std::ptrdiff_t M, std::ptrdiff_t K, std::ptrdiff_t K2, std::ptrdiff_t N>
    struct rule<shape<M, K>, shape<K2, N>> {
        using type = typename std::conditional_t<(K == dyn || K2 == dyn || K == K2), std::type_identity<shape<M, N>>,
                                                 matmul_inner_dimensions_differ<shape<M, K>, shape<K2, N>>>::type;
    };
    using type = typename rule<typename as_matrix<SA>::type, typename as_matrix<SB>::type>::type;
};

// Whether two static shapes can be multiplied (checked first at kiln::matmul, so that its sentence opens the
// diagnostic instead of closing a chain of instantiations).
template <class SA, class SB>
inline constexpr bool matmul_fits = true;
template <std::ptrdiff_t M, std::ptrdiff_t K, std::ptrdiff_t K2, std::ptrdiff_t N>
inline constexpr bool matmul_fits<shape<M, K>, shape<K2, N>> = K == dyn || K2 == dyn || K == K2;
template <class S>
inline constexpr bool matrix_shape = true;  // dynamic: checked at run time
template <std::ptrdiff_t... D>
inline constexpr bool matrix_shape<shape<D...>> = sizeof...(D) == 2;
template <class SA, class SB>
inline constexpr bool matmul_matrices = matrix_shape<SA> && matrix_shape<SB>;


}  // namespace detail

namespace ops {

// The matrix product of two matrices.
struct matmul {
    static constexpr std::string_view name = "matmul";
    static constexpr int arity = 2;
    static constexpr bool structural = true;
    template <class A, class B>
    static A apply(const A&, const B&);
    template <class SA, class SB>
    using static_shape = typename detail::matmul_static_shape<SA, SB>::type;

    static dims shape(const dims& a, const dims& b) {
        if (a.rank != 2 || b.rank != 2)
            throw shape_error("kiln: shape_error in 'matmul': graph mode multiplies matrices, got shapes " +
                              to_string(a) + " and " + to_string(b));
        if (a[1] != b[0])
            throw shape_error("kiln: shape_error in 'matmul': cannot multiply " + to_string(a) + " by " +
                              to_string(b) + ": the inner dimensions " + std::to_string(a[1]) + " and " +
                              std::to_string(b[0]) + " differ");
        return dims{a[0], b[1]};
    }

    template <class Device, class T>
    static void compute(T* c, const dims& s, const detail::strided<const T>& a, const detail::strided<const T>& b) {
        Device::gemm(c, s[0], s[1], a.shape[1], detail::matrix_ref<T>{a.data, a.strides[0], a.strides[1]},
                     detail::matrix_ref<T>{b.data, b.strides[0], b.strides[1]});
    }

    template <class A, class B, class Y, class G>
    static constexpr auto gradient(const A& a, const B& b, const Y& y, const G& g);
};

}  // namespace ops

// The matrix product of two graph-mode matrices.
template <class A, class B>
    requires(is_graph_v<A> && is_graph_v<B>)
constexpr auto matmul(const A& a, const B& b) {
    using SA = detail::shape_of_t<A>;
    using SB = detail::shape_of_t<B>;
    if constexpr (!detail::matmul_matrices<SA, SB>) {
        static_assert(detail::matmul_matrices<SA, SB>,
                      "kiln::matmul: in graph mode both operands must be matrices (rank 2; the shapes are SA and SB "
                      "on the line above); reshape vectors with kiln::reshape<1, n>(x).");
        return 0;
    } else if constexpr (!detail::matmul_fits<SA, SB>) {
        static_assert(detail::matmul_fits<SA, SB>,
                      "kiln::matmul: the static shapes of the operands do not fit: the columns of A must equal the "
                      "rows of B (the note below names both shapes).");
        return 0;
    } else {
        return detail::structural<ops::matmul>(a, b);
    }
}
namespace ops {
template <class A, class B, class Y, class G>
constexpr auto matmul::gradient(const A& a, const B& b, const Y& y, const G& g) {
    const auto gy = detail::like(g, y);
    return detail::grads(detail::structural<matmul>(gy, kiln::transpose(b)),
                         detail::structural<matmul>(kiln::transpose(a), gy));
}
}  // namespace ops

}  // namespace kiln
