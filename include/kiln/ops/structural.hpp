#pragma once
// What a mode-neutral structural op (a reduction, a product, a view) is made of, before any mode exists.
//
// A structural op is one struct in ops/ (ops/reduce.hpp and ops/matmul.hpp): its name, its attributes as a value (a
// structural type, so that graph mode can take the same value as a template argument), its shape rule, its kernel
// as a call to the device, and its gradient rule. The gradient rule is written once, for every mode:
//
//     template <class A, class X, class Y, class G>
//     static constexpr auto gradient(const A& attrs, const X& x, const Y& y, const G& g);
//
// `X`, `Y` and `G` are graph-mode expressions or kiln::tensor (eager mode, the tape, and traced functions through
// the tape). `A` is the attribute value in eager mode and `attrs_c<value>` in graph mode, where the attributes are
// part of the node's type. The rule builds its result with the vocabulary's elementwise functions (mode-neutral
// already) and with the few structural helpers every mode provides under the same names, `structural_fns<X>`:
//
//     like(g, ref)              g, tied to ref's shape (graph mode's shape keys; eager mode returns g)
//     unreduce(attrs, g, ref)   a reduction's result (or gradient) spread back over ref's shape
//     reduce<K>(attrs, v)       a reduction of v
//     count(attrs, ref)         how many elements a reduction of ref folds into each result
//     cast_like(v, ref)         v converted to ref's element type
//     matmul(a, b), matrix_transpose(v), sum_batches_to(v, ref)
//                               products, the transpose of the last two axes, and a product's gradient summed
//                               over the batch dimensions along which ref was broadcast
//
// Graph mode specializes structural_fns in graph/structural/fns.hpp, eager mode in eager/tape.hpp.
#include <type_traits>

#include "op_base.hpp"

namespace kiln {
namespace ops {

// Attributes known at compile time: graph mode's form of an attribute value.
template <auto A>
struct attrs_c {
    static constexpr auto value = A;
};

template <class A>
inline constexpr bool is_attrs_c_v = false;
template <auto A>
inline constexpr bool is_attrs_c_v<attrs_c<A>> = true;

// The attribute value, whichever form it comes in.
template <class A>
constexpr decltype(auto) attrs_value(const A& a) {
    if constexpr (is_attrs_c_v<A>) return A::value;
    else return (a);
}

// The structural helpers of the mode that value type V belongs to (specialized by each mode).
template <class V, class = void>
struct structural_fns {
    static_assert(sizeof(V) == 0,
                  "kiln: a structural op's gradient rule was called with a value of no mode (neither a graph-mode "
                  "expression nor a kiln::tensor); include the mode's header first.");
};

}  // namespace ops
}  // namespace kiln
