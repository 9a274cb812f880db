#pragma once
// Planning and running graphs that contain structural ops (reductions, matmul, views).
//
// At compile time the unique nodes of the roots are split into *materialized* nodes (every structural node, and
// every operand of a structural node that is not already a leaf) and the rest. Each materialized node gets a slot;
// in every expression that uses it, it is replaced by a slot leaf, so each fusion group is an ordinary elementwise
// graph over user leaves and slots, run by the fused loop. A value used by several consumers is thus computed once
// when it feeds a structural op, and recomputed inside the fused loops otherwise (recomputing an elementwise
// expression is cheaper than a round trip through memory).
//
// At run time a `workspace` holds the slots' buffers; they grow on the first run and are reused afterwards, so a
// run of the same plan on the same shapes allocates nothing.
#include <array>
#include <tuple>
#include <utility>
#include <vector>

#include "../backend/cpu/fused_loop.hpp"
#include "../core/allocator.hpp"
#include "structural.hpp"

namespace kiln::detail {

template <class E>
struct is_structural_node : std::false_type {};
template <class N>
    requires is_node_v<N>
struct is_structural_node<N> : std::bool_constant<structural_op<typename N::op>> {};

template <class E>
struct has_structural : std::false_type {};
template <class N>
    requires is_node_v<N>
struct has_structural<N> : has_structural<form_of<N>> {};
template <class Op, class... A>
struct has_structural<node_form<Op, A...>> : std::bool_constant<structural_op<Op> || (has_structural<A>::value || ...)> {};

template <class E>
struct structural_is_pure : std::true_type {};
template <class N>
    requires is_node_v<N>
struct structural_is_pure<N> : structural_is_pure<form_of<N>> {};
template <class Op, class... A>
struct structural_is_pure<node_form<Op, A...>>
    : std::bool_constant<(!structural_op<Op> || is_pure<node_form<Op, A...>>::value) && (structural_is_pure<A>::value && ...)> {};

// The value of materialized node K: a leaf that the fused loop reads from the slot's view.
template <std::size_t K, class T>
struct slot_leaf : leaf_base {
    static constexpr std::size_t slot = K;
    using value_type = T;
    using shape_type = dynamic;
    using kind = input_kind;
};
template <class L>
struct is_slot : std::false_type {};
template <std::size_t K, class T>
struct is_slot<slot_leaf<K, T>> : std::true_type {};
template <class L>
struct slot_index;
template <std::size_t K, class T>
struct slot_index<slot_leaf<K, T>> : std::integral_constant<std::size_t, K> {};

template <class Op>
constexpr int shape_only_arg() {
    if constexpr (requires { Op::shape_only_arg; }) return Op::shape_only_arg;
    else return -1;
}

// The operands whose values structural nodes read (an operand read only for its shape is not materialized). A
// broadcast_like operand is materialized as a view of its first operand, which is then materialized itself.
template <class List>
struct structural_operands;
template <class... N>
struct structural_operands<types<N...>> {
    template <class L, class X>
    using add1 = std::conditional_t<contains<X, L>::value || !is_node_v<X>, L, typename append<L, X>::type>;
    template <class L, class X>
    struct add_operand {
        using type = add1<L, X>;
    };
    template <class L, class X>
        requires(is_node_v<X> && std::is_same_v<typename X::op, ops::broadcast_like>)
    struct add_operand<L, X> {
        using type = add1<add1<L, X>, typename X::template arg_type<0>>;
    };
    template <class Acc, class E>
    struct add_args {
        using type = Acc;
    };
    template <class Acc, class X>
        requires is_node_v<X>
    struct add_args<Acc, X> : add_args<Acc, form_of<X>> {};
    template <class Acc, class Op, class... A>
    struct add_args<Acc, node_form<Op, A...>> {
        template <class L, std::size_t I, class... X>
        struct add_all {
            using type = L;
        };
        template <class L, std::size_t I, class X, class... Xs>
        struct add_all<L, I, X, Xs...> {
            using next = std::conditional_t<static_cast<int>(I) == shape_only_arg<Op>(), L, typename add_operand<L, X>::type>;
            using type = typename add_all<next, I + 1, Xs...>::type;
        };
        using type = std::conditional_t<structural_op<Op>, typename add_all<Acc, 0, A...>::type, Acc>;
    };
    template <class Acc, class... Rest>
    struct fold {
        using type = Acc;
    };
    template <class Acc, class X, class... Rest>
    struct fold<Acc, X, Rest...> {
        using type = typename fold<typename add_args<Acc, X>::type, Rest...>::type;
    };
    using type = typename fold<types<>, N...>::type;
};

template <class List>
struct materialized;
template <class... N>
struct materialized<types<N...>> {
    using operands = typename structural_operands<types<N...>>::type;
    template <class E>
    static constexpr bool keep = is_structural_node<E>::value || (is_node_v<E> && contains<E, operands>::value);
    template <class Acc, class... Rest>
    struct fold {
        using type = Acc;
    };
    template <class Acc, class X, class... Rest>
    struct fold<Acc, X, Rest...> {
        using type = typename fold<std::conditional_t<keep<X>, typename append<Acc, X>::type, Acc>, Rest...>::type;
    };
    using type = typename fold<types<>, N...>::type;
};

// Replaces every materialized node of E by its slot leaf.
template <class Mat, class E>
constexpr auto rewrite(const E& e) {
    if constexpr (contains<E, Mat>::value) {
        return slot_leaf<index_of<E, Mat>::value, value_type_t<E>>{};
    } else if constexpr (is_node_v<E>) {
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
            return make_node<typename E::op>(rewrite<Mat>(e.template arg<J>())...);
        }(std::make_index_sequence<E::arity>{});
    } else {
        return e;
    }
}

// E's definition in terms of slots: its own operands rewritten (used to compute E itself into its slot).
template <class Mat, class E>
constexpr auto rewrite_children(const E& e) {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
        return make_node<typename E::op>(rewrite<Mat>(e.template arg<J>())...);
    }(std::make_index_sequence<E::arity>{});
}

template <class Mat>
struct slot_views;
template <class... M>
struct slot_views<types<M...>> {
    using type = std::tuple<strided<const value_type_t<M>>...>;
    using buffers = std::tuple<std::vector<value_type_t<M>>...>;
};

// Whether a structural op makes its result as a view of its operands (try_view), and whether it computes it on
// Device. (Traits outside the plan's lambdas: nvcc does not take a requires-expression over a lambda's pack.)
template <class Op, class Slot, class Args>
struct can_try_view : std::false_type {};
template <class Op, class Slot, class... A>
    requires requires(Slot& s, const A&... a) { Op::try_view(s, a...); }
struct can_try_view<Op, Slot, std::tuple<A...>> : std::true_type {};
template <class Op, class Device, class T, class Args>
struct can_compute : std::false_type {};
template <class Op, class Device, class T, class... A>
    requires requires(T* p, const dims& s, const A&... a) { Op::template compute<Device>(p, s, a...); }
struct can_compute<Op, Device, T, std::tuple<A...>> : std::true_type {};

// A slot's memory on a device other than the CPU (the GPU's): grown on demand through the device's allocate,
// returned with the workspace.
struct device_block {
    void* p = nullptr;
    std::size_t bytes = 0;
    void (*release)(void*, std::size_t) = nullptr;

    device_block() = default;
    device_block(device_block&& o) noexcept
        : p(std::exchange(o.p, nullptr)), bytes(std::exchange(o.bytes, 0)), release(o.release) {}
    device_block& operator=(device_block&& o) noexcept {
        if (this != &o) {
            reset();
            p = std::exchange(o.p, nullptr);
            bytes = std::exchange(o.bytes, 0);
            release = o.release;
        }
        return *this;
    }
    ~device_block() { reset(); }
    void reset() noexcept {
        if (p) release(p, bytes);
        p = nullptr;
        bytes = 0;
    }
    // At least `n` bytes of Device's memory (its contents are not kept when it grows).
    template <class Device>
    void* grow(std::size_t n) {
        if (p && n <= bytes) return p;
        reset();
        p = Device::allocate(n == 0 ? 1 : n);
        bytes = n == 0 ? 1 : n;
        release = &Device::deallocate;
        return p;
    }
};

// Workspace buffers: 64-byte aligned blocks from kiln's caching allocator, so that a session's memory shows in
// kiln::cache_stats() (a training step after the first allocates nothing) and a freed workspace is reused.
template <class T>
using aligned_buffer = std::vector<T, cached_allocator<T>>;

template <class T>
struct not_bool {
    using type = T;
};
template <>
struct not_bool<bool> {
    using type = unsigned char;  // std::vector<bool> is not a buffer
};

// A plan over the roots: user leaves, materialized nodes, and the roots rewritten over slots.
template <class... Roots>
struct plan {
    static_assert((structural_is_pure<Roots>::value && ...),
                  "kiln: a reduction, matmul or view has a run-time scalar (such as 0.5f * x) below it; write the "
                  "number as a constant (0.5_c) or feed it as an input, so that each node has one identity.");
    using list = unique_nodes_t<Roots...>;
    using user_leaves = leaves_t<list>;
    using mat = typename materialized<list>::type;
    static constexpr std::size_t NM = mat::size;
    using user_bound_t = typename bound_leaves<user_leaves>::type;
    using slots_t = typename slot_views<mat>::type;

    // 64-byte aligned, so that rows of a power-of-two width start on a vector boundary and the fused loops need
    // no peeled partial batch per row.
    template <class M>
    using buffer_t = aligned_buffer<typename not_bool<value_type_t<M>>::type>;
    template <class L>
    struct buffers_of;
    template <class... M>
    struct buffers_of<types<M...>> {
        using type = std::tuple<buffer_t<M>...>;
    };
    using buffers_t = typename buffers_of<mat>::type;

    struct workspace {
        buffers_t buffers;                         // the slots' memory on the CPU
        std::array<device_block, NM> on_device;    // or on the device the plan runs on (graph mode on the GPU)
        slots_t slots;
        // Shapes of the last run: when the user leaves have the same shapes again, so does every node, and shape
        // inference is skipped.
        std::array<dims, user_leaves::size> user_shapes{};
        std::array<dims, NM> shapes{};
        bool primed = false, same = false;
    };

    // The view of leaf L (a user leaf or a slot).
    template <class L>
    static const auto& leaf_view(const user_bound_t& users, const workspace& ws) {
        if constexpr (is_slot<L>::value) return std::get<slot_index<L>::value>(ws.slots);
        else return std::get<index_of<L, user_leaves>::value>(users);
    }

    // The views of an elementwise expression's leaves, in its own plan's leaf order.
    template <class LeafList>
    struct binder;
    template <class... L>
    struct binder<types<L...>> {
        // References, not copies: a view is about 150 bytes and a step binds dozens of them.
        static std::tuple<const strided<const typename L::value_type>&...> bind(const user_bound_t& users,
                                                                                const workspace& ws) {
            return {leaf_view<L>(users, ws)...};
        }
    };

    template <class T, class A>
    static T* grow(std::vector<T, A>& buf, std::ptrdiff_t n) {
        if (static_cast<std::ptrdiff_t>(buf.size()) < n) buf.resize(static_cast<std::size_t>(n));
        return buf.data();
    }

    // Runs an elementwise expression over user leaves and slots into `out` (shape `shape`): the CPU's fused loop, or
    // one kernel of another device (Device::run_elementwise).
    template <class Device = backend::cpu_device, class E, class T>
    static void run_elementwise(const E& e, const user_bound_t& users, const workspace& ws, const strided<T>& out,
                                const dims& shape) {
        using l = unique_nodes_t<E>;
        const auto bound = binder<leaves_t<l>>::bind(users, ws);
        if constexpr (std::is_same_v<Device, backend::cpu_device>) {
            using loop = fused_loop<l, E>;
            typename loop::outs_t outs{out};
            loop::run(root_pack<E>(e), bound, outs, shape);
        } else {
            (void)shape;  // (out's own)
            Device::run_elementwise(e, out, std::apply([](const auto&... v) { return std::make_tuple(v...); }, bound));
        }
    }

    // Memory for slot K's n elements: the CPU's aligned buffer, or a block of the device's memory.
    template <class Device, std::size_t K>
    static auto* slot_memory(workspace& ws, std::ptrdiff_t n) {
        using T = value_type_t<typename at<K, mat>::type>;
        if constexpr (std::is_same_v<Device, backend::cpu_device>)
            return reinterpret_cast<T*>(grow(std::get<K>(ws.buffers), n));
        else
            return static_cast<T*>(ws.on_device[K].template grow<Device>(static_cast<std::size_t>(n) * sizeof(T)));
    }

    template <class E>
    static dims shape_of_expression(const E& e, const user_bound_t& users, const workspace& ws) {
        using l = unique_nodes_t<E>;
        if constexpr (is_leaf_v<E>) {
            return leaf_view<E>(users, ws).shape;
        } else {
            const auto bound = binder<leaves_t<l>>::bind(users, ws);
            return output_shape<leaves_t<l>>(bound, e);
        }
    }

    template <std::size_t K, class Device = backend::cpu_device>
    static void materialize(const user_bound_t& users, workspace& ws) {
        using M = typename at<K, mat>::type;
        using T = value_type_t<M>;
        auto& slot = std::get<K>(ws.slots);
        if constexpr (is_structural_node<M>::value) {
            using Op = typename M::op;
            [&]<std::size_t... J>(std::index_sequence<J...>) {
                // Operands are leaves now (user leaves, or slots computed earlier), except an operand read only for
                // its shape, which may be an expression: its shape is inferred and its data never read.
                const std::tuple<decltype(operand_view<Op, J>(M{}.template arg<J>(), users, ws))...> args(
                    operand_view<Op, J>(M{}.template arg<J>(), users, ws)...);
                if (view_into<Op, K>(ws, std::get<J>(args)...)) return;
                compute_into<Op, K, Device>(ws, std::get<J>(args)...);
            }(std::make_index_sequence<M::arity>{});
        } else if constexpr (is_like_of_slot<M>()) {
            // broadcast_like of a materialized value: a view with zero strides along the repeated dimensions.
            const auto& g = leaf_view<decltype(rewrite<mat>(M{}.template arg<0>()))>(users, ws);
            if (!ws.same)
                ws.shapes[K] = broadcast_shapes(g.shape, shape_of_expression(rewrite<mat>(M{}.template arg<1>()), users, ws),
                                                "broadcast_like");
            slot = broadcast_view(g, ws.shapes[K]);
        } else {
            const auto def = rewrite_children<mat>(M{});
            const dims s = ws.same ? ws.shapes[K] : (ws.shapes[K] = shape_of_expression(def, users, ws));
            T* p = slot_memory<Device, K>(ws, s.numel());
            run_elementwise<Device>(def, users, ws, strided<T>(p, s, contiguous_strides(s)), s);
            set_contiguous(slot, p, s);
        }
    }

    // A structural node as a view of its operands, when its op makes one (slice, transpose, ...).
    // (These two are functions, not code inside materialize's lambda: nvcc compiles a discarded `if constexpr`
    // branch inside a generic lambda.)
    template <class Op, std::size_t K, class... A>
    static bool view_into(workspace& ws, const A&... a) {
        auto& slot = std::get<K>(ws.slots);
        if constexpr (can_try_view<Op, std::remove_cvref_t<decltype(slot)>, std::tuple<A...>>::value) {
            if (Op::try_view(slot, a...)) {
                if (!ws.same) ws.shapes[K] = slot.shape;  // a later run may need the compute path
                return true;
            }
        }
        return false;
    }
    // A structural node computed into its slot's memory on Device.
    template <class Op, std::size_t K, class Device, class... A>
    static void compute_into(workspace& ws, const A&... a) {
        using T = value_type_t<typename at<K, mat>::type>;
        if constexpr (can_compute<Op, Device, T, std::tuple<A...>>::value) {
            // Same user shapes as the last run: same shapes everywhere (checked then).
            const dims s = ws.same ? ws.shapes[K] : (ws.shapes[K] = Op::shape(a.shape...));
            T* p = slot_memory<Device, K>(ws, s.numel());
            Op::template compute<Device>(p, s, a...);
            set_contiguous(std::get<K>(ws.slots), p, s);
        }
    }

    // Fills a slot's view field by field: assigning a whole 150-byte view compiles to a call to memcpy.
    template <class T>
    static void set_contiguous(strided<const T>& v, const T* p, const dims& s) {
        v.data = p;
        v.shape = s;
        v.strides = contiguous_strides(s);
    }

    template <class M>
    static constexpr bool is_like_of_slot() {
        if constexpr (is_node_v<M>) {
            if constexpr (std::is_same_v<typename M::op, ops::broadcast_like>)
                return is_slot<decltype(rewrite<mat>(M{}.template arg<0>()))>::value;
            else return false;
        } else {
            return false;
        }
    }

    // A leaf operand's view by reference; a shape-only operand's (shape, no data) by value.
    template <class Op, std::size_t J, class A>
    static decltype(auto) operand_view(const A& a, const user_bound_t& users, const workspace& ws) {
        using R = decltype(rewrite<mat>(a));
        if constexpr (is_leaf_v<R>) {
            return leaf_view<R>(users, ws);
        } else {
            static_assert(static_cast<int>(J) == shape_only_arg<Op>(), "kiln: internal: an operand was not materialized");
            using T = value_type_t<A>;
            const dims s = shape_of_expression(rewrite<mat>(a), users, ws);
            return strided<const T>(nullptr, s, contiguous_strides(s));
        }
    }

    // Computes every materialized node, in topological order, on Device (the CPU unless graph mode runs on a GPU).
    template <class Device = backend::cpu_device>
    static void prepare(const user_bound_t& users, workspace& ws) {
        bool same = ws.primed;
        [&]<std::size_t... U>(std::index_sequence<U...>) {
            ((same = same && ws.user_shapes[U] == std::get<U>(users).shape), ...);
            if (!same) ((ws.user_shapes[U] = std::get<U>(users).shape), ...);
        }(std::make_index_sequence<user_leaves::size>{});
        ws.same = same;
        ws.primed = true;
        [&]<std::size_t... K>(std::index_sequence<K...>) { (materialize<K, Device>(users, ws), ...); }(std::make_index_sequence<NM>{});
    }

    template <class Root>
    static auto rewritten(const Root& r) {
        return rewrite<mat>(r);
    }
};

}  // namespace kiln::detail
