#pragma once
// Eager mode's dtype rules, as PyTorch's: which dtype two operands promote to (result_type), how a C++ number
// meets a tensor, which dtype an op computes in (logical ops on bool, fractional ops on floating types), and the
// kinds that an in-place result may be stored in. eager/elementwise.hpp dispatches with them.
#include <string>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../ops/ops.hpp"

namespace kiln {
namespace detail {

constexpr int promotion_rank(dtype d) {
    switch (d) {
        case dtype::boolean: return 0;
        case dtype::int32: return 1;
        case dtype::int64: return 2;
        case dtype::float32: return 3;
        case dtype::float64: return 4;
    }
    return 0;
}

// PyTorch's result_type for two tensors: the higher of the two kinds and sizes.
constexpr dtype promote(dtype a, dtype b) { return promotion_rank(a) >= promotion_rank(b) ? a : b; }

// A C++ number meets a tensor: it changes the tensor's dtype only across kinds (an integer tensor times 0.5 becomes
// float32, a bool tensor plus 1 becomes int64), never within one (a float32 tensor times a double stays float32).
template <class S>
constexpr dtype promote_with_scalar(dtype t) {
    if constexpr (std::is_floating_point_v<S>) return is_floating(t) ? t : dtype::float32;
    else if constexpr (std::is_same_v<S, bool>) return t;
    else return t == dtype::boolean ? dtype::int64 : t;
}

// Ops whose results are fractional (they say so in the vocabulary) promote integer inputs to float32 first, as in
// PyTorch (exp of an int tensor).
template <class Op>
constexpr bool floating_op() {
    if constexpr (requires { Op::promotes_to_floating; }) return Op::promotes_to_floating;
    else return false;
}

template <class Op>
constexpr bool logical_op() {
    if constexpr (requires { Op::logical; }) return Op::logical;
    else return false;
}

// Ops that PyTorch refuses on bool operands (bool - bool, -bool, bool ** bool, // and % of bools) say so in the
// vocabulary: `static constexpr bool refuses_bool = true`.
template <class Op>
constexpr bool refuses_bool() {
    if constexpr (requires { Op::refuses_bool; }) return Op::refuses_bool;
    else return false;
}

template <class Op>
constexpr bool integral_only_op() {
    if constexpr (requires { Op::integral_only; }) return Op::integral_only;
    else return false;
}
// Whether eager dispatch instantiates Op's kernel for T (an integer-only op has none for floating types; its
// compute_dtype has refused them already).
template <class Op, class T>
inline constexpr bool runs_on_v = !(integral_only_op<Op>() && std::is_floating_point_v<T>);

// The dtype an op computes in, from its operands' promoted dtype: logical ops work on bool, fractional ops (exp,
// true division) on floating types, every other op on the promoted dtype itself.
template <class Op>
dtype compute_dtype(dtype d) {
    if constexpr (logical_op<Op>()) {
        return dtype::boolean;
    } else {
        if constexpr (integral_only_op<Op>())
            if (is_floating(d)) [[unlikely]]
                throw dtype_error("kiln: dtype_error in '" + std::string(Op::name) + "': '" + std::string(Op::name) +
                                  "' is defined for integer and bool operands, not " + std::string(name(d)));
        if constexpr (refuses_bool<Op>())
            if (d == dtype::boolean) [[unlikely]]
                throw dtype_error("kiln: dtype_error in '" + std::string(Op::name) + "': '" + std::string(Op::name) +
                                  "' is not defined for bool operands (use logical_xor or logical_not, or convert "
                                  "with .to(kiln::int64))");
        if constexpr (floating_op<Op>())
            if (!is_floating(d)) return dtype::float32;
        return d;
    }
}

// The kinds of PyTorch's in-place rule: a result may be stored in a tensor of its own kind or a higher one.
constexpr int kind_rank(dtype d) { return d == dtype::boolean ? 0 : is_floating(d) ? 2 : 1; }

}  // namespace detail
}  // namespace kiln
