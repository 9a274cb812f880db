#pragma once
// Graph mode's matmul: ops::matmul (ops/matmul.hpp: shape rule, kernel, gradient) on matrices.
#include "../../ops/matmul.hpp"
#include "views.hpp"

namespace kiln {
namespace ops {

// The node op of a graph-mode product: ops::matmul restricted to matrices, since graph mode's transpose reverses
// every axis (the gradient's transposes are matrix transposes only for rank 2).
struct matrix_product : matmul {
    static constexpr bool structural = true;
    template <class A, class B>
    static A apply(const A&, const B&);  // the element type; never called
    static dims shape(const dims& a, const dims& b) {
        if (a.rank != 2 || b.rank != 2)
            throw shape_error(detail::error_prefix("shape_error", name) + "graph mode multiplies matrices, got shapes " +
                              to_string(a) + " and " + to_string(b));
        return matmul::result_shape(a, b);
    }
    template <class Device, class T>
    static void compute(T* c, const dims& s, const detail::strided<const T>& a, const detail::strided<const T>& b) {
        detail::matmul_shape m;  // the plan checked the shapes: matrices, with no batch
        m.batch.rank = 0;
        m.m = s[0], m.n = s[1], m.k = a.shape[1];
        m.result = s;
        matmul::compute<Device>(c, m, a, b);
    }
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
        return detail::structural<ops::matrix_product>(a, b);
    }
}

}  // namespace kiln
