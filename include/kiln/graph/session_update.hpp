// A graph-mode training step's work in a kiln::session (graph/session.hpp), once its plan has run: each
// parameter's gradient into a buffer of the step's (or used where a structural op computed it), and the update of
// each parameter and its optimizer slots as one fused loop, or one kernel on a device.
#pragma once

#include <array>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../eager/tensor.hpp"
#include "run.hpp"
#include "training_step.hpp"

namespace kiln {
namespace detail {

// A leaf's number in an update's leaves (0 the parameter, 1 its gradient, 2... its slots, then read numbers).
template <class L>
struct session_leaf_number;
template <std::size_t K, class T>
struct session_leaf_number<indexed_leaf<K, T>> : std::integral_constant<std::size_t, K> {};

// The gradient `g` of parameter P (the step's I-th) after the step's plan has run: into st.grads[I].
template <class Device, class Plan, class P, std::size_t I, class G, class Users, class State>
void session_compute_gradient(const G& g, const Users& users, State& st) {
    constexpr bool on_cpu = std::is_same_v<Device, backend::cpu_device>;
    using T = typename P::value_type;
    tensor& p = *st.params[I];
    const dims& ps = p.shape();
    const auto r = Plan::rewritten(g);
    using R = std::remove_cvref_t<decltype(r)>;
    if constexpr (detail::is_slot<R>::value) {
        // A gradient that a structural op computed into its own buffer (a matmul, a sum) is used in place: no
        // other step of this run writes that buffer. (A view may alias a parameter, so it is copied.)
        constexpr std::size_t k = detail::slot_index<R>::value;
        const auto& v = std::get<k>(st.ws.slots);
        const void* own = on_cpu ? static_cast<const void*>(std::get<k>(st.ws.buffers).data()) : st.ws.on_device[k].p;
        if (v.shape == ps && static_cast<const void*>(v.data) == own && detail::is_row_major(v)) {
            st.grads[I] = v;
            return;
        }
    }
    T* buf = nullptr;
    if constexpr (on_cpu) {
        auto& b = st.grad_buffers[I];
        if (b.size() != static_cast<std::size_t>(ps.numel())) b.resize(static_cast<std::size_t>(ps.numel()));
        buf = b.data();
    } else {
        buf = static_cast<T*>(st.grad_blocks[I].template grow<Device>(static_cast<std::size_t>(ps.numel()) * sizeof(T)));
    }
    const dims gs = st.ws.same ? ps : Plan::shape_of_expression(r, users, st.ws);  // checked on new shapes
    dims b;
    if (!detail::broadcast_into(gs, ps, b) || !(b == ps))
        throw shape_error("kiln: shape_error in 'session': the gradient of parameter '" + std::string(P::name.view()) +
                          "' has shape " + to_string(gs) + ", which does not fit the parameter's " + to_string(ps));
    const dims rs = detail::contiguous_strides(ps);
    Plan::template run_elementwise<Device>(r, users, st.ws, detail::strided<T>(buf, ps, rs), ps);
    st.grads[I] = detail::strided<const T>(buf, ps, rs);
}

// The update of parameter I and its slots. `Reading` (on a device only): the rule's roots_read, with the step's
// numbers read from st.coef_block (leaves after the slots, broadcast over the parameter).
template <class Device, class P, std::size_t I, bool Reading = false, class State>
void session_update(State& st) {
    using T = typename P::value_type;
    tensor& p = *st.params[I];
    const dims& ps = p.shape();
    const auto roots = [&] {
        if constexpr (Reading) return st.rule.template roots_read<T>();
        else return st.rule.template roots<T>();
    }();
    if (!p.is_contiguous()) throw value_error("kiln: value_error in 'session': parameter '" + std::string(P::name.view()) + "' is not contiguous");
    using roots_t = std::remove_cvref_t<decltype(roots)>;
    std::apply([&](const auto&... r) {
        using list = detail::unique_nodes_t<std::remove_cvref_t<decltype(r)>...>;
        using loop = detail::fused_loop<list, std::remove_cvref_t<decltype(r)>...>;
        // Every operand is dense and of the parameter's shape (the gradient is a row-major slot or buffer):
        // one flat loop over pointers. Leaves: 0 the parameter, 1 the gradient, 2... the slots; outputs: the
        // parameter, then the slots.
        constexpr std::size_t nroots = std::tuple_size_v<roots_t>;
        std::array<T*, nroots> out;
        out[0] = p.template data<T>();
        for (std::size_t s = 0; s + 1 < nroots; ++s) out[1 + s] = st.slots[I][s].template data<T>();
        std::array<const T*, nroots + 3> in{};
        in[0] = out[0];
        in[1] = st.grads[I].data;
        for (std::size_t s = 0; s + 1 < nroots; ++s) in[2 + s] = out[1 + s];
        if constexpr (Reading) {
            in[nroots + 1] = static_cast<const T*>(st.coef_block.p);
            in[nroots + 2] = static_cast<const T*>(st.coef_block.p) + 1;
        }
        const auto lp = [&]<class... L>(detail::types<L...>) {
            return std::tuple<const typename L::value_type*...>{in[session_leaf_number<L>::value]...};
        }(detail::leaves_t<list>{});
        if constexpr (std::is_same_v<Device, backend::cpu_device>) {
            const auto op = [&]<std::size_t... J>(std::index_sequence<J...>) {
                return std::tuple<decltype((void)J, static_cast<T*>(nullptr))...>{out[J]...};
            }(std::make_index_sequence<nroots>{});
            loop::run_flat_ptrs(typename loop::roots_t(r...), lp, op, ps.numel());
        } else {
            // One kernel for the parameter and its slots, every root evaluated before any is stored.
            const dims cs = detail::contiguous_strides(ps);
            dims zero = cs;  // (a read number, broadcast)
            for (int d = 0; d < zero.rank; ++d) zero[d] = 0;
            const auto outs = [&]<std::size_t... J>(std::index_sequence<J...>) {
                return std::tuple<decltype((void)J, detail::strided<T>{})...>{detail::strided<T>(out[J], ps, cs)...};
            }(std::make_index_sequence<nroots>{});
            const auto ins = [&]<class... L>(detail::types<L...>) {
                return std::tuple<detail::strided<const typename L::value_type>...>{detail::strided<const typename L::value_type>(
                    in[session_leaf_number<L>::value], ps, session_leaf_number<L>::value > nroots ? zero : cs)...};
            }(detail::leaves_t<list>{});
            Device::run_elementwise_roots(outs, ins, r...);
        }
    }, roots);
}

}  // namespace detail
}  // namespace kiln
