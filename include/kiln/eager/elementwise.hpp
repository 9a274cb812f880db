#pragma once
// Eager elementwise ops: a run-time dtype dispatch onto the op's own kernel, run by graph mode's fused loop.
// `a + b` on tensors plans the one-node graph add(leaf0, leaf1) for the promoted element type and runs it over the
// tensors' strided views, so broadcasting, SIMD and threads are graph mode's.
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>

#include "../backend/cpu/device.hpp"
#include "../backend/cpu/fused_loop.hpp"
#include "../core/names.hpp"
#include "../ops/ops.hpp"
#include "convert.hpp"
#include "promotion.hpp"
#include "tensor.hpp"

namespace kiln {
namespace detail {

template <>
struct mode_of<tensor> {
    static constexpr operand_mode value = operand_mode::eager;
};

template <class T>
strided<const T> strided_of(const tensor& t) {
    return strided<const T>(t.data<const T>(), t.shape(), t.strides());
}

template <class T>
strided<T> strided_out(tensor& t) {
    return strided<T>(t.data<T>(), t.shape(), t.strides());
}

template <class L>
using leaf_position = indexed_position<L>;
template <class L>
inline constexpr std::size_t leaf_position_v = indexed_position<L>::value;

inline std::string operands_text(std::initializer_list<const tensor*> ts) {
    std::string s;
    for (const tensor* t : ts) {
        if (!s.empty()) s += " and ";
        s += to_string(t->shape()) + " " + std::string(name(t->dtype()));
    }
    return s;
}

// Operands of one op live on one device; a rank-0 CPU tensor (a number) may join a GPU op, as in PyTorch.
inline void check_same_device(std::string_view op, std::initializer_list<const tensor*> ts) {
    const device d = (*ts.begin())->device();
    bool same = true;
    for (const tensor* t : ts) same = same && t->device() == d;
    if (same) [[likely]]
        return;
    device gpu = d;
    for (const tensor* t : ts)
        if (t->device().type != device_type::cpu) gpu = t->device();
    for (const tensor* t : ts)
        if (!joins_device(*t, gpu)) throw_device_mismatch(op, gpu, t->device());
}

// The device an op on these operands runs on: the GPU one among them, the CPU otherwise.
template <class... In>
device device_of_operands(const In&... inputs) {
    device d = kiln::cpu;
    ((inputs.device().type != device_type::cpu ? (void)(d = inputs.device()) : (void)0), ...);
    return d;
}

#if KILN_HAS_GPU
template <class T>
tensor on_device(const T& t, const device& d) {
    return t.device() == d ? static_cast<const tensor&>(t) : t.to(d);
}

template <class E, class... In>
void run_eager_gpu_into(tensor& out, const E& expr, const In&... inputs) {
    using R = root_type_t<E>;
    using list = unique_nodes_t<E>;
    const auto bound = [&]<class... L>(types<L...>) {
        const std::tuple<const In&...> all(inputs...);
        return std::tuple<strided<const typename L::value_type>...>(
            strided_of<typename L::value_type>(std::get<leaf_position_v<L>>(all))...);
    }(leaves_t<list>{});
    const backend::gpu_memory::device_scope on(out.device().index);
    backend::thrust_device::run_elementwise(expr, strided_out<R>(out), bound);
}
#endif


// Runs the graph `expr` (whose leaves are indexed_leaf<K, T>, K naming the input) over `inputs` into `out`, whose
// shape is the broadcast shape and whose dtype is the expression's.
template <class E, class... In>
void run_eager_into(tensor& out, const E& expr, const In&... inputs) {
#if KILN_HAS_GPU
    if (const device dev = out.device(); dev.type != device_type::cpu) [[unlikely]] {
        run_eager_gpu_into(out, expr, on_device(inputs, dev)...);
        return;
    }
#endif
    using R = root_type_t<E>;
    using list = unique_nodes_t<E>;
    using loop = fused_loop<list, E>;
    auto bound = [&]<class... L>(types<L...>) {
        const std::tuple<const In&...> all(inputs...);
        return std::tuple<strided<const typename L::value_type>...>(
            strided_of<typename L::value_type>(std::get<leaf_position<L>::value>(all))...);
    }(leaves_t<list>{});
    loop::run(root_pack<E>(expr), bound, typename loop::outs_t{strided_out<R>(out)}, out.shape());
}

// The common case of eager ops on small tensors: every input contiguous and of the result's shape. The fused
// loop then runs over the raw pointers, without strided views.
template <class E, class... In>
bool run_eager_flat(tensor& out, const E& expr, const In&... inputs) {
    const dims& shape = out.shape();
    if (!((inputs.shape() == shape && inputs.is_contiguous()) && ...)) return false;
    using list = unique_nodes_t<E>;
    using loop = fused_loop<list, E>;
    const std::tuple<const In&...> all(inputs...);
    const auto lp = [&]<class... L>(types<L...>) {
        return std::tuple<const typename L::value_type*...>(
            static_cast<const typename L::value_type*>(std::get<leaf_position<L>::value>(all).raw_data())...);
    }(leaves_t<list>{});
    using R = root_type_t<E>;
    loop::run_flat_ptrs(root_pack<E>(expr), lp, std::tuple<R*>(static_cast<R*>(out.raw_data())), shape.numel());
    return true;
}

template <class E, class... In>
tensor run_eager(const E& expr, const dims& shape, const In&... inputs) {
#if KILN_HAS_GPU
    if (const device dev = device_of_operands(inputs...); dev.type != device_type::cpu) [[unlikely]] {
        tensor out(dtype_of<root_type_t<E>>(), shape, dev);
        run_eager_into(out, expr, inputs...);
        return out;
    }
#endif
    tensor out(dtype_of<root_type_t<E>>(), shape);
    if (!run_eager_flat(out, expr, inputs...)) run_eager_into(out, expr, inputs...);
    return out;
}

inline dims broadcast_named(std::string_view op, std::initializer_list<const tensor*> ts) {
    bool same = true;
    for (const tensor* t : ts) same = same && t->shape() == (*ts.begin())->shape();
    if (same) return (*ts.begin())->shape();
    dims out = (*ts.begin())->shape();
    for (const tensor* t : ts)
        if (!broadcast_into(out, t->shape(), out))
            throw shape_error("kiln: shape_error in '" + std::string(op) + "': cannot broadcast " + operands_text(ts));
    return out;
}

template <class Op>
tensor eager_unary(const tensor& a) {
    const dtype d = compute_dtype<Op>(a.dtype());
    tensor xc;
    const tensor& x = a.dtype() == d ? a : (xc = as_dtype(a, d));
    return dispatch(d, [&]<class T>() {
        if constexpr (!runs_on_v<Op, T>) return tensor{};
        else return run_eager(make_node<Op>(indexed_leaf<0, T>{}), x.shape(), x);
    });
}

template <class Op>
tensor eager_binary(const tensor& a, const tensor& b) {
    check_same_device(Op::name, {&a, &b});
    const dims shape = broadcast_named(Op::name, {&a, &b});
    const dtype d = compute_dtype<Op>(promote(a.dtype(), b.dtype()));
    // Converted copies only where the dtype differs (the common case copies nothing).
    tensor xc, yc;
    const tensor& x = a.dtype() == d ? a : (xc = as_dtype(a, d));
    const tensor& y = b.dtype() == d ? b : (yc = as_dtype(b, d));
    return dispatch(d, [&]<class T>() {
        if constexpr (!runs_on_v<Op, T>) return tensor{};
        else return run_eager(make_node<Op>(indexed_leaf<0, T>{}, indexed_leaf<1, T>{}), shape, x, y);
    });
}

// A tensor and a C++ number; `scalar_first` keeps the operands' order (2 - t).
template <class Op, class S>
tensor eager_scalar(const tensor& a, S s, bool scalar_first) {
    const dtype d = compute_dtype<Op>(promote_with_scalar<S>(a.dtype()));
    tensor xc;
    const tensor& x = a.dtype() == d ? a : (xc = as_dtype(a, d));
    return dispatch(d, [&]<class T>() {
        if constexpr (!runs_on_v<Op, T>) {
            return tensor{};
        } else {
            const scalar<T> v{value_cast<T>(s)};
            if (scalar_first) return run_eager(make_node<Op>(v, indexed_leaf<0, T>{}), x.shape(), x);
            return run_eager(make_node<Op>(indexed_leaf<0, T>{}, v), x.shape(), x);
        }
    });
}

template <int N = 0>
tensor eager_where(const dependent_tensor<N>& c, const dependent_tensor<N>& a, const dependent_tensor<N>& b) {
    check_same_device("where", {&c, &a, &b});
    const dims shape = broadcast_named("where", {&c, &a, &b});
    const dtype d = promote(a.dtype(), b.dtype());
    const tensor m = as_dtype(c, dtype::boolean), x = as_dtype(a, d), y = as_dtype(b, d);
    return dispatch(d, [&]<class T>() {
        return run_eager(make_node<ops::where>(indexed_leaf<0, bool>{}, indexed_leaf<1, T>{}, indexed_leaf<2, T>{}),
                         shape, m, x, y);
    });
}

template <class Op>
tensor eager_ternary(const tensor& a, const tensor& b, const tensor& c) {
    check_same_device(Op::name, {&a, &b, &c});
    const dims shape = broadcast_named(Op::name, {&a, &b, &c});
    return dispatch(a.dtype(), [&]<class T>() {
        if constexpr (!runs_on_v<Op, T>) return tensor{};
        else return run_eager(make_node<Op>(indexed_leaf<0, T>{}, indexed_leaf<1, T>{}, indexed_leaf<2, T>{}), shape,
                              a, b, c);
    });
}

// Numbers and constants become tensors' partners; constants are numbers here.
// Tensors (and variables) pass by reference: copying a handle costs a reference count and 190 bytes.
template <class A>
decltype(auto) eager_operand(const A& a) {
    if constexpr (is_constant_v<A>) {
        // An integral constant is an integer (int_tensor * 2_c stays an integer tensor), any other a double.
        if constexpr (A::den == 1) return A::template value<std::int64_t>();
        else return A::template value<double>();
    }
    else if constexpr (std::is_base_of_v<tensor, A>) return static_cast<const tensor&>(a);  // kiln::variable
    else return a;
}

template <class Op, class... Args>
void record_op(const tensor& y, const Args&... args);

// The one entry of an elementwise op in eager mode: computes it (or records it in a trace) and records it on the
// tapes. A plain (not inline) function template, so that `KILN_SEPARATE_KERNELS` can declare its instantiations
// `extern` and one translation unit compile them for the whole program (kiln/eager/separate.hpp).
template <class Op, class... Args>
tensor eager_apply(const Args&... args);

// Where each operand of an op recorded with `Args` lives: its index among the tensors (the Args that are
// kiln::tensor), or among the numbers (the others), in the order of Args. (A trace's node keeps the tensors as inputs
// and the numbers as parameters; a tape's entry keeps them apart too.)
template <class... Args>
inline constexpr std::array<std::size_t, sizeof...(Args)> operand_slots = [] {
    constexpr std::array<bool, sizeof...(Args)> is_tensor{std::is_same_v<Args, tensor>...};
    std::array<std::size_t, sizeof...(Args)> at{};
    std::size_t t = 0, v = 0;
    for (std::size_t i = 0; i < at.size(); ++i) at[i] = is_tensor[i] ? t++ : v++;
    return at;
}();

template <>
struct op_builder<operand_mode::eager> {
    template <class Op, class... Args>
    static tensor build(const Args&... args) {
        return build_operands<Op>(eager_operand(args)...);
    }

    template <class Op, class... Args>
    static tensor build_operands(const Args&... args) {
        return eager_apply<Op>(args...);
    }

    template <class Op, class... Args>
    static tensor compute(const Args&... args) {
        if (active_tracer) [[unlikely]] return traced<Op>(args...);
        return compute_now<Op>(args...);
    }

    // The op handed to kiln::function's tracer: its tensors are inputs, its numbers attributes (exact, with their
    // C++ kind: `x * 2` and `x * 2.0` promote differently).
    template <class Op, class... Args>
    static tensor traced(const Args&... args) {
        std::vector<tensor> ins;
        std::string attrs;
        op_params params;
        std::size_t k = 0;
        ([&] {
            if constexpr (std::is_same_v<Args, tensor>) {
                ins.push_back(args);
            } else {
                // (Appended piece by piece: `"operand" + std::to_string(k)` is an insert at 0, which GCC 12's
                // -Wrestrict misreads as a 2^63-byte memcpy when it inlines it, bug 105329.)
                if (!attrs.empty()) attrs += ' ';
                attrs += "operand";
                attrs += std::to_string(k);
                attrs += '=';
                attrs += number_text(args);
                if constexpr (std::is_floating_point_v<Args>) {
                    params.add_number(static_cast<double>(args));
                } else {
                    if constexpr (std::is_same_v<Args, bool>) params.bool_params |= std::uint64_t{1} << params.values.size();
                    params.add(static_cast<std::int64_t>(args));
                }
            }
            ++k;
        }(), ...);
        params.tile = tile_for<Op, Args...>(args...);
        if (params.tile) params.recipe = recipe_for<Op, Args...>(args...);
        params.spec = &result_spec<Op, Args...>;
        params.spec_is_value = true;
        return active_tracer->record(Op::name, std::move(attrs), ins, &replay<Op, Args...>, std::move(params));
    }

    // The recorded op: Op(args...) with the tensors from `in` and the numbers from the node's parameters, in the
    // order of Args.
    template <class Op, class... Args>
    static tensor replay(std::span<const tensor> in, std::span<const std::int64_t> p) {
        static constexpr auto at = operand_slots<Args...>;
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            auto pick = [&]<std::size_t K>() -> decltype(auto) {
                using A = std::tuple_element_t<K, std::tuple<Args...>>;
                if constexpr (std::is_same_v<A, tensor>) return (in[at[K]]);
                else if constexpr (std::is_floating_point_v<A>) return static_cast<A>(param_number(p[at[K]]));
                else return static_cast<A>(p[at[K]]);
            };
            return compute_now<Op>(pick.template operator()<I>()...);
        }(std::index_sequence_for<Args...>{});
    }

    // The recorded op's result spec without computing it (op_params::spec): the tensor operands' broadcast shape,
    // and the dtype and device of the op run on one element of each. False (run the op) where the devices differ,
    // the shapes do not broadcast, an operand is empty or the op refuses its operands, so that every error is eager
    // mode's own.
    template <class Op, class... Args>
    static bool result_spec(std::span<const tensor> in, std::span<const std::int64_t> p, tensor& out) {
        if (in.empty()) return false;
        dims shape = in[0].shape();
        std::array<tensor, 3> one;
        for (std::size_t k = 0; k < in.size(); ++k) {
            const tensor& t = in[k];
            if (k >= one.size() || t.device() != in[0].device() || t.numel() == 0 || !broadcast_into(shape, t.shape(), shape))
                return false;
            one[k] = tensor(t.storage_handle(), t.dtype(), dims{}, dims{}, t.offset());  // (its first element)
        }
        tensor y;
        try {
            y = replay<Op, Args...>(std::span<const tensor>(one.data(), in.size()), p);
        } catch (const error&) {
            return false;
        }
        if (y.dim() != 0) return false;
        out = y.broadcast_to(shape);  // (untraced: see result_of_op, eager/shape_run.hpp)
        return true;
    }

    // The op's tile kernel when every tensor operand, every number's promotion and the result keep one floating
    // dtype; null otherwise.
    template <class Op, class... Args>
    static tile_kernel tile_for(const Args&... args) {
        if constexpr (logical_op<Op>() || integral_only_op<Op>() || std::is_same_v<Op, ops::where>) {
            return nullptr;
        } else {
            dtype d = dtype::boolean;
            bool any = false, same = true;
            ([&] {
                if constexpr (std::is_same_v<Args, tensor>) {
                    if (!any) d = args.dtype(), any = true;
                    else same = same && args.dtype() == d;
                }
            }(), ...);
            if (!any || !same || !is_floating(d)) return nullptr;
            ([&] {
                if constexpr (!std::is_same_v<Args, tensor>) same = same && promote_with_scalar<Args>(d) == d;
            }(), ...);
            if (!same || compute_dtype<Op>(d) != d) return nullptr;
            return dispatch(d, [&]<class T>() -> tile_kernel {
                if constexpr (std::is_floating_point_v<T>) {
                    using E = decltype(tile_expr<Op, T, Args...>(nullptr));
                    if constexpr (std::is_same_v<root_type_t<E>, T>) return &tile_run<Op, T, Args...>;
                    else return nullptr;
                } else {
                    return nullptr;
                }
            });
        }
    }

    // The recipe of the tile kernel that tile_for returns (call it only where that is not null).
    template <class Op, class... Args>
    static const tile_recipe* recipe_for(const Args&... args) {
        dtype d = dtype::float32;
        bool any = false;
        ([&] {
            if constexpr (std::is_same_v<Args, tensor>)
                if (!any) d = args.dtype(), any = true;
        }(), ...);
        return dispatch(d, [&]<class T>() -> const tile_recipe* {
            if constexpr (std::is_floating_point_v<T>) return &tile_recipe_v<Op, T, Args...>;
            else return nullptr;
        });
    }
    template <class Op, class T, class... Args>
    static std::uint64_t recipe_number(const std::int64_t* p, std::size_t i) {
        std::uint64_t bits = 0;
        std::size_t seen = 0;
        ([&] {
            if constexpr (!std::is_same_v<Args, tensor>) {
                if (seen++ == i) {
                    T v;
                    if constexpr (std::is_floating_point_v<Args>) v = value_cast<T>(static_cast<Args>(param_number(p[i])));
                    else v = value_cast<T>(static_cast<Args>(p[i]));
                    std::memcpy(&bits, &v, sizeof v);
                }
            }
        }(), ...);
        return bits;
    }
    template <class Op, class T, class... Args>
    static constexpr tile_recipe tile_recipe_v{
        type_spelling<Op>(), std::is_same_v<T, float> ? std::string_view("float") : std::string_view("double"),
        static_cast<std::uint8_t>(sizeof...(Args)),
        [] {
            std::uint8_t m = 0, k = 0;
            ((m |= static_cast<std::uint8_t>(std::is_same_v<Args, tensor> ? 1u << k : 0u), ++k), ...);
            return m;
        }(),
        &recipe_number<Op, T, Args...>};

    // The op on indexed leaves (its tensors) and scalars (its numbers, from the parameters), as eager mode builds it.
    template <class Op, class T, class... Args>
    static auto tile_expr(const std::int64_t* p) {
        static constexpr auto at = operand_slots<Args...>;
        auto operand = [&]<std::size_t K>() {
            using A = std::tuple_element_t<K, std::tuple<Args...>>;
            if constexpr (std::is_same_v<A, tensor>) return indexed_leaf<at[K], T>{};
            else if constexpr (std::is_floating_point_v<A>)
                return scalar<T>{value_cast<T>(p ? static_cast<A>(param_number(p[at[K]])) : A{})};
            else return scalar<T>{value_cast<T>(p ? static_cast<A>(p[at[K]]) : A{})};
        };
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return make_node<Op>(operand.template operator()<I>()...);
        }(std::index_sequence_for<Args...>{});
    }

    template <class Op, class T, class... Args>
    static void tile_run(const void* const* in, void* out, std::ptrdiff_t n, const std::int64_t* p) {
        const auto expr = tile_expr<Op, T, Args...>(p);
        using E = std::remove_const_t<decltype(expr)>;
        using list = unique_nodes_t<E>;
        using loop = fused_loop<list, E>;
        const auto lp = [&]<class... L>(types<L...>) {
            return std::tuple<const typename L::value_type*...>(
                static_cast<const typename L::value_type*>(in[leaf_position<L>::value])...);
        }(leaves_t<list>{});
        loop::run_flat_ptrs(root_pack<E>(expr), lp, std::tuple<T*>(static_cast<T*>(out)), n);
    }

    template <class S>
    static std::string number_text(const S& v) {
        if constexpr (std::is_same_v<S, bool>) {
            return v ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<S>) {
            return detail::number_text(static_cast<double>(v)) + (sizeof(S) == 4 ? "f" : "");
        } else {
            return std::to_string(v) + "i";
        }
    }

    template <class Op, class... Args>
    static tensor compute_now(const Args&... args) {
        constexpr std::size_t n = sizeof...(Args);
        if constexpr (n == 1) {
            return eager_unary<Op>(args...);
        } else if constexpr (n == 2) {
            return binary<Op>(args...);
        } else {
            static_assert(n == 3, "kiln: eager mode runs ops of one, two or three operands.");
            if constexpr (std::is_same_v<Op, ops::where>) return where_of(args...);
            else return ternary<Op>(args...);
        }
    }

    // A ternary op other than where (clamp): the tensors' promoted dtype, then each number promotes with it as in
    // a binary op (clamp(int32_x, 0.5, 2) is float32); numbers become rank-0 tensors of the computed dtype.
    template <class Op, class... Args>
    static tensor ternary(const Args&... args) {
        bool any = false;
        dtype td = dtype::boolean;
        ([&] {
            if constexpr (std::is_same_v<Args, tensor>) td = any ? promote(td, args.dtype()) : args.dtype(), any = true;
        }(), ...);
        ([&] {
            if constexpr (!std::is_same_v<Args, tensor>) td = promote_with_scalar<Args>(td);
        }(), ...);
        const dtype d = compute_dtype<Op>(td);
        auto as_tensor = [&](const auto& v) -> tensor {
            if constexpr (std::is_same_v<std::remove_cvref_t<decltype(v)>, tensor>) return as_dtype(v, d);
            else return dispatch(d, [&]<class T>() { return scalar_tensor(value_cast<T>(v)); });
        };
        return eager_ternary<Op>(as_tensor(args)...);
    }

    // The dtype of a number among where's branches: it promotes with the other branch as in any binary op
    // (where(c, int32_x, 2.5) is float32, where(c, bool_x, 5) int64); two numbers give float32 when either is
    // floating, int64 when either is an integer, bool otherwise.
    template <class S>
    static dtype number_dtype() {
        if constexpr (std::is_floating_point_v<S>) return dtype::float32;
        else if constexpr (std::is_same_v<S, bool>) return dtype::boolean;
        else return dtype::int64;
    }
    template <class S, class Other>
    static tensor branch_of(const S& s, const Other& other) {
        if constexpr (std::is_same_v<S, tensor>) {
            return s;
        } else {
            dtype d;
            if constexpr (std::is_same_v<Other, tensor>) d = promote_with_scalar<S>(other.dtype());
            else d = promote(number_dtype<S>(), number_dtype<Other>());
            return dispatch(d, [&]<class T>() { return scalar_tensor(value_cast<T>(s)); });
        }
    }
    template <class C, class A, class B>
    static tensor where_of(const C& c, const A& a, const B& b) {
        tensor cond;
        if constexpr (std::is_same_v<C, tensor>) cond = c;
        else cond = scalar_tensor(static_cast<bool>(c));
        return eager_where<sizeof(C) * 0>(cond, branch_of(a, b), branch_of(b, a));
    }

    template <class Op, class A, class B>
    static tensor binary(const A& a, const B& b) {
        if constexpr (std::is_same_v<A, tensor> && std::is_same_v<B, tensor>) return eager_binary<Op>(a, b);
        else if constexpr (std::is_same_v<A, tensor>) return eager_scalar<Op>(a, b, false);
        else return eager_scalar<Op>(b, a, true);
    }
};

template <class Op, class... Args>
tensor eager_apply(const Args&... args) {
    KILN_DETAIL_KERNEL_GUARD(Op, false);
    tensor y = op_builder<operand_mode::eager>::compute<Op>(args...);
    record_op<Op>(y, args...);
    return y;
}

}  // namespace detail

template <>
struct element_type<tensor> {
    using type = void;  // known only at run time
};

}  // namespace kiln

// (a op= b, and copying into a tensor: eager_apply's users, defined after it)
#include "in_place.hpp"
