#pragma once
// Eager kernels compiled once per program (opt in). By default every translation unit that calls an eager op
// compiles that op's kernels for every dtype (a fused loop with SIMD paths per dtype: 2 to 4 s of CPU per op at
// -O1). A program may instead compile them in one translation unit:
//
//   every translation unit:     -DKILN_SEPARATE_KERNELS (the same for all of them, for example a compile definition)
//   one translation unit:       #define KILN_IMPLEMENTATION
//                               #include <kiln/kiln.hpp>
//
// With KILN_SEPARATE_KERNELS the headers declare the instantiations below `extern`, so a translation unit calls
// them and compiles none; the KILN_IMPLEMENTATION unit defines them all. Calls with other argument kinds (a
// `short` operand, say) are still compiled where they are made, so nothing fails to link. A large program may
// split the implementation into parts built in parallel: KILN_IMPLEMENTATION_PARTS=4 and KILN_IMPLEMENTATION_PART=k
// (k = 0..3) in four units. kiln/nn/separate.hpp lists the losses, layers and optimizers the same way;
// kiln/implementation.hpp defines them all. docs/internals.md, section 11, says more.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "elementwise.hpp"
#include "indexing.hpp"
#include "linalg.hpp"
#include "reduce.hpp"
#include "shape_ops.hpp"
#include "sorting.hpp"
#include "tape.hpp"

// The elementwise ops in four groups of about equal compile time. U: one tensor operand; B: two operands, each a
// tensor or a number; T: three; I: binary ops with an in-place form (a += b).
#define KILN_SEPARATE_GROUP_0(U, B, T, I)                                                                          \
    B(add) B(sub) B(mul) B(div) I(add) I(sub) I(mul) I(div) B(pow) B(maximum) B(minimum) B(floor_divide)           \
    B(remainder) B(atan2)
#define KILN_SEPARATE_GROUP_1(U, B, T, I)                                                                          \
    B(relu_backward) B(leaky_relu) B(less) B(less_equal) B(greater) B(greater_equal) B(equal) B(not_equal)        \
    B(logical_and) B(logical_or)
#define KILN_SEPARATE_GROUP_2(U, B, T, I)                                                                          \
    B(logical_xor) B(bitwise_and) B(bitwise_or) B(bitwise_xor) T(clamp) T(where) U(neg) U(abs) U(exp) U(log)       \
    U(sqrt) U(rsqrt) U(square) U(sin)
#define KILN_SEPARATE_GROUP_3(U, B, T, I)                                                                          \
    U(cos) U(tan) U(asin) U(acos) U(atan) U(tanh) U(log1p) U(expm1) U(erf) U(floor) U(ceil) U(trunc) U(round)     \
    U(sign) U(isnan) U(isinf) U(isfinite) U(sigmoid) U(relu) U(softplus) U(silu) U(gelu) U(elu) U(logical_not)    \
    U(bitwise_not)

namespace kiln::detail {

// The names of the ops above (test/registry.cpp checks that every elementwise op of the registry is among them).
#define KILN_DETAIL_NAME(op) std::string_view(#op),
#define KILN_DETAIL_NONE(op)
inline constexpr std::string_view separately_compiled_ops[] = {
    KILN_SEPARATE_GROUP_0(KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NONE)
    KILN_SEPARATE_GROUP_1(KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NONE)
    KILN_SEPARATE_GROUP_2(KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NONE)
    KILN_SEPARATE_GROUP_3(KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NAME, KILN_DETAIL_NONE)};
#undef KILN_DETAIL_NAME
#undef KILN_DETAIL_NONE

}  // namespace kiln::detail

// The instantiations of one group, each line prefixed by P (`extern template` or `template`). Numbers are the
// kinds C++ code writes (2, 2.0, 2.0f, an int64_t) and kiln's constants become (int64_t, double).
#define KILN_DETAIL_NUMBER_FORMS(P, op, S)                                                                         \
    P tensor eager_apply<ops::op, tensor, S>(const tensor&, const S&);                                             \
    P tensor eager_apply<ops::op, S, tensor>(const S&, const tensor&);
#define KILN_DETAIL_U(P, op) P tensor eager_apply<ops::op, tensor>(const tensor&);
#define KILN_DETAIL_B(P, op)                                                                                       \
    P tensor eager_apply<ops::op, tensor, tensor>(const tensor&, const tensor&);                                   \
    KILN_DETAIL_NUMBER_FORMS(P, op, double)                                                                        \
    KILN_DETAIL_NUMBER_FORMS(P, op, float)                                                                         \
    KILN_DETAIL_NUMBER_FORMS(P, op, int)                                                                           \
    KILN_DETAIL_NUMBER_FORMS(P, op, std::int64_t)
#define KILN_DETAIL_T(P, op)                                                                                       \
    P tensor eager_apply<ops::op, tensor, tensor, tensor>(const tensor&, const tensor&, const tensor&);            \
    P tensor eager_apply<ops::op, tensor, tensor, double>(const tensor&, const tensor&, const double&);            \
    P tensor eager_apply<ops::op, tensor, double, tensor>(const tensor&, const double&, const tensor&);            \
    P tensor eager_apply<ops::op, tensor, double, double>(const tensor&, const double&, const double&);
#define KILN_DETAIL_I(P, op)                                                                                       \
    P tensor& eager_in_place<ops::op, tensor>(tensor&, const tensor&);                                             \
    P tensor& eager_in_place<ops::op, double>(tensor&, const double&);                                             \
    P tensor& eager_in_place<ops::op, float>(tensor&, const float&);                                               \
    P tensor& eager_in_place<ops::op, int>(tensor&, const int&);                                                   \
    P tensor& eager_in_place<ops::op, std::int64_t>(tensor&, const std::int64_t&);

// The reductions, products and indexing ops (templates on an unused int, kiln/eager/reduce.hpp and beside it), and
// the tape's backward pass.
#define KILN_DETAIL_STRUCTURAL(P)                                                                                  \
    namespace kiln {                                                                                               \
    P tensor sum<0>(const tensor&, std::vector<int>, bool);                                                        \
    P tensor prod<0>(const tensor&, std::vector<int>, bool);                                                       \
    P tensor max<0>(const tensor&, std::vector<int>, bool);                                                        \
    P tensor min<0>(const tensor&, std::vector<int>, bool);                                                        \
    P tensor mean<0>(const tensor&, std::vector<int>, bool);                                                       \
    P tensor any<0>(const tensor&, std::vector<int>, bool);                                                        \
    P tensor all<0>(const tensor&, std::vector<int>, bool);                                                        \
    P tensor var<0>(const tensor&, std::vector<int>, double, bool);                                                \
    P tensor std<0>(const tensor&, std::vector<int>, double, bool);                                                \
    P tensor argmax<0>(const tensor&, int, bool);                                                                  \
    P tensor argmin<0>(const tensor&, int, bool);                                                                  \
    P tensor argsort<0>(const tensor&, int, bool);                                                                 \
    P tensor sort<0>(const tensor&, int, bool);                                                                    \
    P tensor cumsum<0>(const tensor&, int, bool);                                                                  \
    P tensor cumprod<0>(const tensor&, int, bool);                                                                 \
    P tensor matmul<0>(const tensor&, const tensor&);                                                              \
    P tensor outer<0>(const tensor&, const tensor&);                                                               \
    P tensor einsum<0>(const std::string&, const tensor&, const tensor&);                                          \
    P tensor index_select<0>(const tensor&, int, const tensor&);                                                   \
    P tensor take_along_axis<0>(const tensor&, const tensor&, int);                                                \
    P tensor scatter_add<0>(const tensor&, int, const tensor&, const tensor&);                                     \
    P tensor masked_select<0>(const tensor&, const tensor&);                                                       \
    P tensor tile<0>(const tensor&, const std::vector<std::ptrdiff_t>&);                                           \
    P tensor repeat<0>(const tensor&, std::ptrdiff_t, std::optional<int>);                                         \
    P tensor pad<0>(const tensor&, const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>&, double);         \
    P std::vector<tensor> gradient_tape::gradient_from<0>(const tensor&, const std::vector<tensor>&, const tensor*); \
    P std::vector<tensor> gradient_tape::gradient<0>(const tensor&, const std::vector<variable*>&);                \
    namespace detail {                                                                                             \
    P tensor eager_where<0>(const tensor&, const tensor&, const tensor&);                                          \
    P tensor& tensor_copy<0>(tensor&, const tensor&);                                                              \
    P void record_matmul<0>(const tensor&, const tensor&, const tensor&);                                          \
    P tensor convert<bool>(const tensor&);                                                                         \
    P tensor convert<std::int32_t>(const tensor&);                                                                 \
    P tensor convert<std::int64_t>(const tensor&);                                                                 \
    P tensor convert<float>(const tensor&);                                                                        \
    P tensor convert<double>(const tensor&);                                                                       \
    }                                                                                                              \
    }

#define KILN_DETAIL_EXTERN_U(op) KILN_DETAIL_U(extern template, op)
#define KILN_DETAIL_EXTERN_B(op) KILN_DETAIL_B(extern template, op)
#define KILN_DETAIL_EXTERN_T(op) KILN_DETAIL_T(extern template, op)
#define KILN_DETAIL_EXTERN_I(op) KILN_DETAIL_I(extern template, op)
#define KILN_DETAIL_DEFINE_U(op) KILN_DETAIL_U(template, op)
#define KILN_DETAIL_DEFINE_B(op) KILN_DETAIL_B(template, op)
#define KILN_DETAIL_DEFINE_T(op) KILN_DETAIL_T(template, op)
#define KILN_DETAIL_DEFINE_I(op) KILN_DETAIL_I(template, op)

#if defined(KILN_SEPARATE_KERNELS) && !defined(KILN_IMPLEMENTATION)
namespace kiln::detail {
KILN_SEPARATE_GROUP_0(KILN_DETAIL_EXTERN_U, KILN_DETAIL_EXTERN_B, KILN_DETAIL_EXTERN_T, KILN_DETAIL_EXTERN_I)
KILN_SEPARATE_GROUP_1(KILN_DETAIL_EXTERN_U, KILN_DETAIL_EXTERN_B, KILN_DETAIL_EXTERN_T, KILN_DETAIL_EXTERN_I)
KILN_SEPARATE_GROUP_2(KILN_DETAIL_EXTERN_U, KILN_DETAIL_EXTERN_B, KILN_DETAIL_EXTERN_T, KILN_DETAIL_EXTERN_I)
KILN_SEPARATE_GROUP_3(KILN_DETAIL_EXTERN_U, KILN_DETAIL_EXTERN_B, KILN_DETAIL_EXTERN_T, KILN_DETAIL_EXTERN_I)
}  // namespace kiln::detail
KILN_DETAIL_STRUCTURAL(extern template)
#endif
