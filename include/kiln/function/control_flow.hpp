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

// A sub-trace made ready to run: its graph optimized and prepared, with the enclosing traces' values it reads.
template <int N = 0>
loop_part finish_loop_part(tracer& tr) {
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
    return finish_loop_part(tr);
}

// Runs a traced loop from `state`: while the condition holds, the body gives the next state; `trip(state)` sees each
// state the body makes. Returns the last state.
template <class Trip>
std::vector<tensor> run_trips(const executable& cond, const executable& body, std::vector<tensor> state,
                              std::span<const tensor> cond_captures, std::span<const tensor> body_captures, Trip&& trip) {
    std::vector<tensor> args;
    while (true) {
        args.assign(state.begin(), state.end());
        args.insert(args.end(), cond_captures.begin(), cond_captures.end());
        if (!cond.run(args)[0].template item<bool>()) return state;
        args.assign(state.begin(), state.end());
        args.insert(args.end(), body_captures.begin(), body_captures.end());
        state = body.run(args);
        trip(state);
    }
}

// Hides every gradient tape of this thread for a scope (a sub-trace's own tape must be the only one recording).
struct tapes_hidden {
    std::vector<gradient_tape*> saved;
    int saved_count = recording_tapes;
    tapes_hidden() noexcept {
        saved.swap(tape_stack());
        recording_tapes = 0;
    }
    ~tapes_hidden() {
        tape_stack().swap(saved);
        recording_tapes = saved_count;
    }
    tapes_hidden(const tapes_hidden&) = delete;
    tapes_hidden& operator=(const tapes_hidden&) = delete;
};

// The body's vector-Jacobian product traced on its own: arguments (state..., g...) with one g per floating state
// tensor (its gradient after the trip), then the enclosing traces' values it uses; results: the gradients of
// sum_k <next_k, g_k> with respect to every floating state tensor, then to each of `sources` (tensors of the
// enclosing trace, or variables and watched tensors read where they live).
template <class F>
loop_part trace_loop_vjp(tracer& outer, const std::vector<tensor>& state, const std::vector<tensor>& sources, F&& body) {
    tracer tr(outer.name(), &outer);
    std::vector<tensor> args, gs;
    std::vector<std::size_t> floating;
    for (std::size_t k = 0; k < state.size(); ++k) args.push_back(tr.argument(state[k].dtype(), state[k].shape(), static_cast<int>(k), state[k].device()));
    for (std::size_t k = 0; k < state.size(); ++k)
        if (is_floating(state[k].dtype())) {
            floating.push_back(k);
            gs.push_back(tr.argument(state[k].dtype(), state[k].shape(), static_cast<int>(state.size() + gs.size()), state[k].device()));
        }
    tr.set_first_capture(static_cast<int>(state.size() + gs.size()));
    {
        const tracing_scope scope(&tr);
        const tapes_hidden hidden;
        std::vector<tensor> grads;
        {
            gradient_tape tape;
            std::vector<tensor> wrt;
            for (std::size_t k : floating) {
                tape.watch(args[k]);
                wrt.push_back(args[k]);
            }
            for (const tensor& t : sources) {
                tape.watch(t);
                wrt.push_back(t);
            }
            const auto next = body(args);  // (auto: the ops below stay dependent, compiled only where a loop is traced)
            tensor total = zeros({}, dtype::float64, state[floating[0]].device());
            for (std::size_t j = 0; j < floating.size(); ++j) total = total + sum(next[floating[j]] * gs[j]).to(dtype::float64);
            grads = tape.gradient(total, wrt);
        }
        for (std::size_t j = 0; j < grads.size(); ++j) {
            const tensor& like = j < floating.size() ? state[floating[j]] : sources[j - floating.size()];
            grads[j] = grads[j].to(like.dtype());
        }
        tr.set_outputs(grads);
    }
    return finish_loop_part(tr);
}

// What the gradient of a traced loop needs: its condition, body and the body's vector-Jacobian product, and the
// values each reads.
struct loop_gradient {
    std::shared_ptr<executable> cond, body, vjp;
    std::vector<tensor> state, cond_captures, body_captures, vjp_captures;
    std::vector<tensor> inputs;              // the tape entry's inputs: floating state tensors watched, then sources
    std::vector<std::size_t> state_inputs;   // for each of the first inputs, its place among the floating state tensors
    std::size_t floating = 0;                // how many state tensors are floating
};

// Records, in the trace that computes a gradient, the effect that computes the gradients of a loop's inputs from
// the gradient `g` of its floating state tensor `k` (the j-th floating one): the loop runs again from its first
// state, keeping each trip's state, then the body's vector-Jacobian product runs backwards over the trips.
template <int N = 0>
gradient_list loop_backward(const std::shared_ptr<const loop_gradient>& lg, std::size_t j, const tensor& g) {
    auto* tr = dynamic_cast<tracer*>(active_tracer);
    if (!tr)
        throw value_error(error_prefix("value_error", "while_loop") + "the gradient of a traced while_loop must be "
                          "computed inside the function that traced it");
    // A tape recording this gradient's computation (a second derivative) would need the backward effect's
    // dependence on the loop's inputs, which an effect does not record.
    if (recording_tapes > 0 && (watched_by_a_tape(g) || std::ranges::any_of(lg->inputs, watched_by_a_tape)))
        throw value_error(error_prefix("value_error", "while_loop") + "second derivatives through a traced while_loop "
                          "are not supported (run the function eagerly, or unroll the loop in C++)");
    std::vector<tensor> ins;
    for (const tensor& t : lg->inputs) ins.push_back(zeros(t.shape(), t.dtype(), t.device()));
    const std::size_t m = ins.size(), n = lg->state.size();
    const std::vector<tensor> outs = ins;
    ins.insert(ins.end(), lg->state.begin(), lg->state.end());
    ins.insert(ins.end(), lg->cond_captures.begin(), lg->cond_captures.end());
    ins.insert(ins.end(), lg->body_captures.begin(), lg->body_captures.end());
    ins.insert(ins.end(), lg->vjp_captures.begin(), lg->vjp_captures.end());
    ins.push_back(g);
    // The product's position and a digest of the sub-graphs: traces at other extents of a dynamic dimension must
    // have the same loop.
    const std::uint64_t h = fnv1a(to_string(lg->cond->graph) + to_string(lg->body->graph) + to_string(lg->vjp->graph));
    op_params params;
    params.add(static_cast<std::int64_t>(j));
    params.add(static_cast<std::int64_t>(h));
    params.opaque = 3;
    for (const executable* e : {lg->cond.get(), lg->body.get(), lg->vjp.get()})
        for (const auto& v : e->variables) params.reads.push_back({v.where, v.dtype, v.shape});
    tr->record_effect(
        "while_loop_gradient", "output=" + std::to_string(j) + " trips run again, then " +
                                   std::to_string(lg->vjp->graph.size()) + " nodes each backwards",
        ins,
        [lg, j, m, n](std::span<const tensor> in, auto) {
            const tape_pause pause;
            const std::size_t nc = lg->cond_captures.size(), nb = lg->body_captures.size(), nv = lg->vjp_captures.size();
            const auto cap_c = in.subspan(m + n, nc), cap_b = in.subspan(m + n + nc, nb), cap_v = in.subspan(m + n + nc + nb, nv);
            // The trips, from the first state.
            std::vector<std::vector<tensor>> trips{std::vector<tensor>(in.begin() + static_cast<std::ptrdiff_t>(m),
                                                                       in.begin() + static_cast<std::ptrdiff_t>(m + n))};
            run_trips(*lg->cond, *lg->body, trips[0], cap_c, cap_b, [&](const std::vector<tensor>& s) { trips.push_back(s); });
            std::vector<tensor> args;
            // Backwards: gs holds the gradient of each floating state tensor after trip t, acc the sources'.
            std::vector<tensor> gs;
            std::size_t f = 0;
            for (std::size_t k = 0; k < n; ++k)
                if (is_floating(trips[0][k].dtype())) gs.push_back(f++ == j ? tensor(in[m + n + nc + nb + nv]) : zeros(trips[0][k].shape(), trips[0][k].dtype(), trips[0][k].device()));
            const std::size_t ns = lg->inputs.size() - lg->state_inputs.size();
            std::vector<tensor> acc;
            for (std::size_t s = 0; s < ns; ++s) acc.push_back(zeros(in[lg->state_inputs.size() + s].shape(), in[lg->state_inputs.size() + s].dtype(), in[lg->state_inputs.size() + s].device()));
            for (std::size_t t = trips.size() - 1; t-- > 0;) {
                args.assign(trips[t].begin(), trips[t].end());
                args.insert(args.end(), gs.begin(), gs.end());
                args.insert(args.end(), cap_v.begin(), cap_v.end());
                const std::vector<tensor> r = lg->vjp->run(args);
                for (std::size_t q = 0; q < gs.size(); ++q) gs[q] = r[q];
                for (std::size_t s = 0; s < ns; ++s) {
                    const dependent_tensor<N>& sum_so_far = acc[s];  // (dependent: the sum is compiled only where a loop is differentiated)
                    acc[s] = sum_so_far + r[gs.size() + s];
                }
            }
            // The watched state tensors' gradients, then the sources'.
            for (std::size_t i = 0; i < m; ++i) {
                tensor o = in[i];
                copy_into(o, i < lg->state_inputs.size() ? gs[lg->state_inputs[i]] : acc[i - lg->state_inputs.size()]);
            }
        },
        m, std::move(params));
    gradient_list out;
    for (const tensor& t : outs) out.push_back(t);
    return out;
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
    const loop_part c = trace_loop_part<true>(*outer, state, cond);
    const loop_part b = trace_loop_part<false>(*outer, state, body);
    // Under a gradient tape: the inputs the tape follows into the loop (floating state tensors and, of the values
    // the body reads, the enclosing trace's and variables or watched tensors read where they live).
    std::shared_ptr<loop_gradient> lg;
    if (recording_tapes > 0) {
        auto grad = std::make_shared<loop_gradient>();
        for (std::size_t k = 0; k < state.size(); ++k)
            if (is_floating(state[k].dtype())) {
                if (watched_by_a_tape(state[k])) {
                    grad->inputs.push_back(state[k]);
                    grad->state_inputs.push_back(grad->floating);
                }
                ++grad->floating;
            }
        std::vector<tensor> sources;
        auto add_source = [&](const tensor& t) {  // (each tensor once: the tape sums an entry's inputs by id)
            if (!is_floating(t.dtype()) || !watched_by_a_tape(t)) return;
            for (const tensor& seen : sources)
                if (seen.id() == t.id()) return;
            sources.push_back(t);
        };
        for (const tensor& t : b.captures) add_source(t);
        for (const graph_node& node : b.exe->traced.nodes)
            if ((node.kind == node_kind::variable || node.kind == node_kind::constant) && node.op.empty() && node.value.valid())
                add_source(node.value);
        grad->inputs.insert(grad->inputs.end(), sources.begin(), sources.end());
        if (grad->floating > 0 && !grad->inputs.empty()) {
            if (b.exe->traced.count(node_kind::effect) > 0)
                throw value_error(error_prefix("value_error", "while_loop") + "gradients through a traced while_loop "
                                  "whose body writes into tensors are not supported (its gradient runs the body again); "
                                  "run the function eagerly, or unroll the loop in C++");
            const loop_part v = trace_loop_vjp(*outer, state, sources, body);
            v.exe->collect_variables();
            grad->vjp = v.exe;
            grad->vjp_captures = v.captures;
            lg = std::move(grad);
        }
    }
    const std::size_t n = state.size(), nc = c.captures.size(), nb = b.captures.size();
    std::vector<tensor> outs, ins;
    for (const tensor& t : state) outs.push_back(zeros(t.shape(), t.dtype(), t.device()));
    ins = outs;
    ins.insert(ins.end(), state.begin(), state.end());
    ins.insert(ins.end(), c.captures.begin(), c.captures.end());
    ins.insert(ins.end(), b.captures.begin(), b.captures.end());
    // A digest of the two sub-graphs: traces at other extents of a dynamic dimension must have the same loop.
    const std::uint64_t h = fnv1a(to_string(c.exe->graph) + to_string(b.exe->graph));
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
            const std::vector<tensor> cur =
                run_trips(*cexe, *bexe, std::vector<tensor>(in.begin() + static_cast<std::ptrdiff_t>(n), in.begin() + static_cast<std::ptrdiff_t>(2 * n)),
                          in.subspan(2 * n, nc), in.subspan(2 * n + nc, nb), [](const std::vector<tensor>&) {});
            for (std::size_t k = 0; k < n; ++k) {
                tensor o = in[k];
                copy_into(o, cur[k]);
            }
        },
        n, std::move(params));
    if (lg) {
        // One tape entry per floating state tensor: its gradient gives the inputs' through the loop run backwards.
        lg->cond = c.exe;
        lg->body = b.exe;
        lg->state = state;
        lg->cond_captures = c.captures;
        lg->body_captures = b.captures;
        const std::shared_ptr<const loop_gradient> shared = lg;
        std::size_t j = 0;
        for (std::size_t k = 0; k < n; ++k)
            if (is_floating(state[k].dtype()))
                record_entry({tensor_list(lg->inputs), outs[k], [shared, at = j++](const tensor& g) { return loop_backward<>(shared, at, g); }});
    }
    return outs;
}

}  // namespace detail

// while (cond_fn(state...)) state = body_fn(state...), on tensors: kiln::while_loop(cond, body, i, x). cond_fn
// returns a one-element tensor; body_fn returns the next state (a tensor for one state tensor, a std::tuple of
// tensors for several) with the same dtypes and shapes. Eagerly it is a C++ loop. Traced, the condition and the
// body are traced once each into sub-graphs, and the loop runs them when the function runs, as many times as the
// values say; the body may use the function's tensors and write into variables. Gradients flow through a traced
// loop to its state, the function's tensors it reads and the variables it reads: the loop runs again from its first
// state and the body's vector-Jacobian product runs backwards over the trips.
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
