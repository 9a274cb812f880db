#pragma once
// Control flow in traced functions: kiln::cond (both branches traced, the result selected) and kiln::while_loop
// (the condition and body as sub-graphs run by one effect). Eagerly, both are plain C++ control flow.
#include "executor.hpp"
#include "passes.hpp"

namespace kiln {

namespace detail {

// A template so that where's kernels are compiled only in programs that call cond.
template <int N = 0>
tensor select_result(const dependent_tensor<N>& p, const dependent_tensor<N>& a, const dependent_tensor<N>& b) {
    if (!(a.shape() == b.shape()) || a.dtype() != b.dtype())
        throw value_error(error_prefix("value_error", "cond") + "the branches return " + to_string(a.shape()) + " " +
                          std::string(name(a.dtype())) + " and " + to_string(b.shape()) + " " +
                          std::string(name(b.dtype())) + "; they must return the same dtypes and shapes");
    return where(p, a, b);
}

}  // namespace detail

// if (pred) then_fn() else else_fn(), where pred is a one-element tensor and both branches return the same type (a
// tensor, a tuple or a vector of them, of the same dtypes and shapes). Eagerly, and while tracing when pred's
// value is known, one branch runs. While tracing a symbolic pred, both branches are traced and each result is
// where(pred, then, else): gradients flow to the branch taken. So the branches must not write into tensors
// (a trace_error says so), and both run when the function runs.
template <class Then, class Else>
auto cond(const tensor& pred, Then&& then_fn, Else&& else_fn) {
    using R = std::invoke_result_t<Then&>;
    static_assert(std::is_same_v<R, std::invoke_result_t<Else&>>,
                  "kiln::cond: both branches must return the same type (a kiln::tensor, a std::tuple or a std::vector "
                  "of tensors)");
    pred.check_valid("cond");
    if (pred.numel() != 1)
        throw value_error(detail::error_prefix("value_error", "cond") + "the predicate has shape " +
                          to_string(pred.shape()) + "; it must have one element");
    auto* tr = dynamic_cast<detail::tracer*>(detail::active_tracer);
    if (!tr || !pred.is_symbolic()) return pred.item<bool>() ? then_fn() : else_fn();
    const std::size_t effects = tr->graph.count(node_kind::effect);
    R a = then_fn();
    R b = else_fn();
    if (tr->graph.count(node_kind::effect) != effects)
        throw trace_error(detail::error_prefix("trace_error", "cond") + "a branch writes into a tensor (an assignment, "
                          "an in-place op or an optimizer step); traced branches both run, so they must be pure");
    const tensor p = pred.to(dtype::boolean).reshape(dims{});
    if constexpr (std::is_same_v<R, tensor>) {
        return detail::select_result(p, a, b);
    } else if constexpr (std::is_same_v<R, std::vector<tensor>>) {
        if (a.size() != b.size())
            throw value_error(detail::error_prefix("value_error", "cond") + "the branches return " +
                              std::to_string(a.size()) + " and " + std::to_string(b.size()) + " tensors");
        std::vector<tensor> out;
        for (std::size_t i = 0; i < a.size(); ++i) out.push_back(detail::select_result(p, a[i], b[i]));
        return out;
    } else {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return R(detail::select_result(p, std::get<I>(a), std::get<I>(b))...);
        }(std::make_index_sequence<std::tuple_size_v<R>>{});
    }
}

namespace detail {

// Captured plain tensors that nothing writes into keep their values of trace time.
inline void capture_constants(function_graph& g) {
    for (graph_node& n : g.nodes)
        if (n.kind == node_kind::constant && n.op.empty()) n.value = n.value.clone();
}

// A loop's condition or body traced on its own: the loop state as its first arguments, the enclosing traces'
// values it uses after them.
struct loop_part {
    std::shared_ptr<executable> exe;
    std::vector<tensor> captures;
};

template <bool IsCond, class F>
loop_part trace_loop_part(tracer& outer, const std::vector<tensor>& state, F&& fn) {
    tracer tr(outer.name(), &outer);
    std::vector<tensor> args;
    for (std::size_t k = 0; k < state.size(); ++k) args.push_back(tr.argument(state[k].dtype(), state[k].shape(), static_cast<int>(k), state[k].device()));
    tr.set_first_capture(static_cast<int>(state.size()));
    {
        const tracing_scope scope(&tr);
        const tape_pause pause;
        if constexpr (IsCond) {
            const tensor c = fn(args);
            if (c.numel() != 1)
                throw value_error(error_prefix("value_error", "while_loop") + "the condition has shape " +
                                  to_string(c.shape()) + "; it must have one element");
            tr.set_outputs({c.to(dtype::boolean)});
        } else {
            const std::vector<tensor> next = fn(args);
            if (next.size() != state.size())
                throw value_error(error_prefix("value_error", "while_loop") + "the body returns " + std::to_string(next.size()) +
                                  " tensors for a state of " + std::to_string(state.size()));
            for (std::size_t k = 0; k < next.size(); ++k)
                if (!(next[k].shape() == state[k].shape()) || next[k].dtype() != state[k].dtype())
                    throw value_error(error_prefix("value_error", "while_loop") + "the body turns state " + std::to_string(k) +
                                      " from " + to_string(state[k].shape()) + " " + std::string(name(state[k].dtype())) +
                                      " into " + to_string(next[k].shape()) + " " + std::string(name(next[k].dtype())) +
                                      "; a loop's state keeps its dtypes and shapes");
            tr.set_outputs(next);
        }
    }
    loop_part part;
    part.exe = std::make_shared<executable>();
    function_graph g = std::move(tr.graph);
    // The enclosing trace is still recording: copying the captured constants (and anything the passes compute)
    // must not become ops of it, or the sub-graph's constants would be that trace's symbolic tensors.
    passes::detail::untraced([&] {
        capture_constants(g);
        part.exe->traced = g;
        part.exe->graph = std::move(g);
        part.exe->report = passes::optimize(part.exe->graph);
        part.exe->prepare();
    });
    part.captures = tr.captures();
    return part;
}

// The loop on vectors of tensors: eagerly, a C++ loop; traced, one effect that runs the traced condition and body
// until the condition is false and writes the final state into one buffer per state tensor.
template <class CondV, class BodyV>
std::vector<tensor> while_vectors(CondV&& cond, BodyV&& body, std::vector<tensor> state) {
    for (const tensor& t : state) t.check_valid("while_loop");
    auto* outer = dynamic_cast<tracer*>(active_tracer);
    if (!outer) {
        while (true) {
            const tensor c = cond(state);
            if (c.numel() != 1)
                throw value_error(error_prefix("value_error", "while_loop") + "the condition has shape " +
                                  to_string(c.shape()) + "; it must have one element");
            if (!c.item<bool>()) return state;
            std::vector<tensor> next = body(state);
            if (next.size() != state.size())
                throw value_error(error_prefix("value_error", "while_loop") + "the body returns " + std::to_string(next.size()) +
                                  " tensors for a state of " + std::to_string(state.size()));
            state = std::move(next);
        }
    }
    if (recording_tapes > 0)
        for (const tensor& t : state)
            if (watched_by_a_tape(t))
                throw value_error(error_prefix("value_error", "while_loop") + "gradients through a traced while_loop are "
                                  "not supported yet (run the function eagerly, or unroll the loop in C++)");
    const loop_part c = trace_loop_part<true>(*outer, state, cond);
    const loop_part b = trace_loop_part<false>(*outer, state, body);
    const std::size_t n = state.size(), nc = c.captures.size(), nb = b.captures.size();
    std::vector<tensor> outs, ins;
    for (const tensor& t : state) outs.push_back(zeros(t.shape(), t.dtype()));
    ins = outs;
    ins.insert(ins.end(), state.begin(), state.end());
    ins.insert(ins.end(), c.captures.begin(), c.captures.end());
    ins.insert(ins.end(), b.captures.begin(), b.captures.end());
    // A digest of the two sub-graphs: traces at other extents of a dynamic dimension must have the same loop.
    const std::string text = to_string(c.exe->graph) + to_string(b.exe->graph);
    std::uint64_t h = 1469598103934665603ull;
    for (const unsigned char ch : text) h = (h ^ ch) * 1099511628211ull;
    op_params params;
    params.add(static_cast<std::int64_t>(h));
    params.opaque = 1;
    // The variables the condition and body read (their own loops' included): rebinding one makes this trace stale.
    for (const loop_part* part : {&c, &b}) {
        part->exe->collect_variables();
        for (const auto& v : part->exe->variables) params.reads.push_back({v.where, v.dtype, v.shape});
    }
    outer->record_effect(
        "while_loop", "state=" + std::to_string(n) + " condition=" + std::to_string(c.exe->graph.size()) +
                          " body=" + std::to_string(b.exe->graph.size()) + " nodes",
        ins,
        [cexe = c.exe, bexe = b.exe, n, nc, nb](std::span<const tensor> in, auto) {
            std::vector<tensor> cur(in.begin() + static_cast<std::ptrdiff_t>(n), in.begin() + static_cast<std::ptrdiff_t>(2 * n));
            const auto cap_c = in.subspan(2 * n, nc), cap_b = in.subspan(2 * n + nc, nb);
            std::vector<tensor> args;
            while (true) {
                args.assign(cur.begin(), cur.end());
                args.insert(args.end(), cap_c.begin(), cap_c.end());
                if (!cexe->run(args)[0].template item<bool>()) break;
                args.assign(cur.begin(), cur.end());
                args.insert(args.end(), cap_b.begin(), cap_b.end());
                cur = bexe->run(args);
            }
            for (std::size_t k = 0; k < n; ++k) {
                tensor o = in[k];
                copy_into(o, cur[k]);
            }
        },
        n, std::move(params));
    return outs;
}

}  // namespace detail

// while (cond_fn(state...)) state = body_fn(state...), on tensors: kiln::while_loop(cond, body, i, x). cond_fn
// returns a one-element tensor; body_fn returns the next state (a tensor for one state tensor, a std::tuple of
// tensors for several) with the same dtypes and shapes. Eagerly it is a C++ loop. Traced, the condition and the
// body are traced once each into sub-graphs, and the loop runs them when the function runs, as many times as the
// values say; the body may use the function's tensors and write into variables. Gradients through a traced loop
// are not supported yet.
template <class Cond, class Body, class... T>
    requires(sizeof...(T) > 0 && (std::is_same_v<T, tensor> && ...))
auto while_loop(Cond&& cond_fn, Body&& body_fn, const T&... state) {
    using R = std::invoke_result_t<Body&, const T&...>;
    constexpr std::size_t n = sizeof...(T);
    auto cond_v = [&](const std::vector<tensor>& s) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) { return tensor(cond_fn(s[I]...)); }(std::make_index_sequence<n>{});
    };
    auto body_v = [&](const std::vector<tensor>& s) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            R r = body_fn(s[I]...);
            if constexpr (std::is_same_v<R, tensor>) return std::vector<tensor>{std::move(r)};
            else return detail::result_traits<R>::flatten(r);
        }(std::make_index_sequence<n>{});
    };
    std::vector<tensor> out = detail::while_vectors(cond_v, body_v, std::vector<tensor>{state...});
    if constexpr (std::is_same_v<R, tensor>) return out[0];
    else return detail::result_traits<R>::rebuild(out);
}

}  // namespace kiln
