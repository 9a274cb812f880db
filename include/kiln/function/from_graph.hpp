#pragma once
// kiln::trace(expr): a compile-time graph (a graph-mode expression, its gradients included) as a traced function,
// so that the run-time graph, its passes and everything built on run-time graphs serve graph mode too.
//
//   const auto x = kiln::input<"x", float, kiln::shape<kiln::dyn, 3>>{};
//   const auto w = kiln::input<"w", float, kiln::shape<3, 1>>{};
//   auto loss = kiln::mean(kiln::square(kiln::matmul(x, w)));
//   auto f = kiln::trace(loss, kiln::grad(loss, w));    // a kiln::function of (x, w): its leaves in first-use order
//   auto [l, gw] = f(x_tensor, w_tensor);                // traced on the first call for a signature, then replayed
//   kiln::input_names(loss, kiln::grad(loss, w));        // {"x", "w"}
//
// Each node becomes the eager op of the same vocabulary entry (the elementwise op's own struct; the structural
// ops' eager forms: sum/mean/max/min, matmul, the views), recorded by function mode's tracer. Nodes shared in the
// expression (a gradient's subtrees) are evaluated once.
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../eager/eager.hpp"
#include "../graph/graph.hpp"
#include "../graph/structural.hpp"
#include "function.hpp"

namespace kiln {

namespace detail {

template <class S>
struct spec_extents {
    static constexpr bool known = false;
};
template <std::ptrdiff_t... D>
struct spec_extents<shape<D...>> {
    static constexpr bool known = true;
    static std::vector<std::ptrdiff_t> get() { return {D...}; }
};

// The expression evaluated with eager ops, once per listed node.
template <class... Roots>
class graph_evaluator {
public:
    using nodes = unique_nodes_t<Roots...>;
    using leaves = leaves_t<nodes>;

    // (Numbers the graph makes into tensors live where the inputs do: a traced session on a GPU stays there.)
    explicit graph_evaluator(std::span<const tensor> inputs)
        : inputs_(inputs), dev_(inputs.empty() ? kiln::cpu : inputs.front().device()) {}

    template <class E>
    decltype(auto) eval(const E& e) {
        if constexpr (is_leaf_v<E>) {
            return static_cast<const tensor&>(inputs_[index_of<E, leaves>::value]);
        } else if constexpr (is_constant_v<E>) {
            return e;
        } else if constexpr (is_scalar_node<E>::value) {
            return e.value;
        } else if constexpr (contains<E, nodes>::value) {
            std::optional<tensor>& slot = memo_[index_of<E, nodes>::value];
            if (!slot) slot = as_tensor(compute(e), e, dev_);
            return static_cast<const tensor&>(*slot);
        } else {
            return compute(e);
        }
    }

    kiln::device device() const { return dev_; }

    // A constant's or a run-time scalar's value.
    template <class V>
    static double number_value(const V& v) {
        if constexpr (is_constant_v<V>) return V::template value<double>();
        else return static_cast<double>(v);
    }

    // A root that folded to a number is a tensor of its value.
    template <class E, class V>
    static tensor as_tensor(const V& v, const E&, kiln::device where = kiln::cpu) {
        if constexpr (std::is_base_of_v<tensor, V>) {
            return v;
        } else {
            using T = value_type_t<E>;
            using U = std::conditional_t<std::is_same_v<T, weak>, float, T>;
            return full(dims{}, number_value(v), dtype_of<U>(), where);
        }
    }

private:
    template <class N>
        requires is_node_v<N>
    auto compute(const N& e) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return apply<typename N::op>(e, eval(e.template arg<I>())...);
        }(std::make_index_sequence<N::arity>{});
    }

    template <class X>
    static tensor need_tensor(const X& x, const tensor& like) {
        if constexpr (std::is_base_of_v<tensor, X>) return x;
        else return full(dims{}, number_value(x), like.dtype(), like.device());
    }

    template <class Op, class E, class... V>
    tensor apply(const E&, const V&... v) {
        if constexpr (requires { Op::structural; }) {
            return structural_apply(static_cast<const Op*>(nullptr), v...);
        } else if constexpr (std::is_same_v<Op, ops::broadcast_like>) {
            const auto& [a, ref] = std::tie(v...);
            if constexpr (std::is_base_of_v<tensor, std::remove_cvref_t<decltype(a)>>)
                return a.broadcast_to(broadcast_named("broadcast_like", {&a, &ref}));
            else return full(ref.shape(), number_value(a), ref.dtype(), ref.device());
        } else {
            return as_tensor(make<Op>(v...), E{}, dev_);
        }
    }

    // The structural ops' eager forms.
    template <class A>
    static tensor structural_apply(const ops::transpose*, const A& a) {
        std::array<int, max_rank> order{};
        const int r = a.dim();
        for (int i = 0; i < r; ++i) order[static_cast<std::size_t>(i)] = r - 1 - i;
        return a.permute_array(order, r);
    }
    template <std::ptrdiff_t... D, class A>
    static tensor structural_apply(const ops::reshape<D...>*, const A& a) {
        return a.reshape(ops::reshape<D...>::shape(a.shape()));
    }
    template <class A, class R>
    static tensor structural_apply(const ops::reshape_as*, const A& a, const R& ref) {
        const tensor g = need_tensor(a, ref);
        return g.reshape(ops::reshape_as::shape(g.shape(), ref.shape()));
    }
    template <ops::reduce_attrs At, class A, class R>
    static tensor structural_apply(const ops::expand_axes<At>*, const A& a, const R& ref) {
        const tensor g = need_tensor(a, ref);
        return g.reshape(ops::expand_axes<At>::shape(g.shape(), ref.shape()));
    }
    template <std::ptrdiff_t... D, class A>
    static tensor structural_apply(const ops::broadcast_to<D...>*, const A& a) {
        return a.broadcast_to(ops::broadcast_to<D...>::shape(a.shape()));
    }
    template <class A, class R>
    static tensor structural_apply(const ops::sum_to*, const A& a, const R& ref) {
        const tensor g = need_tensor(a, ref);
        (void)ops::sum_to::shape(g.shape(), ref.shape());
        return reduce_to(g, ref.shape());
    }
    // A mode-neutral structural op (ops/structural.hpp) runs through eager mode's seam with the node's attributes.
    template <class Op, auto At, class... A>
    static tensor structural_apply(const ops::with_attrs<Op, At>*, const A&... a) {
        return detail::apply_structural<Op>(At, a...);
    }
    // A graph-mode slice is eager mode's slice view (traced with its bounds as parameters).
    template <ops::slice_attrs At, class A>
    static tensor structural_apply(const ops::with_attrs<ops::slice, At>*, const A& a) {
        (void)ops::slice::result_shape(At, a.shape());
        if constexpr (At.parts > 0) {
            const int ax = At.axis < 0 ? At.axis + a.dim() : At.axis;
            const ops::slice_range r = ops::slice_of(At, a.shape()[ax]);
            return a.slice(ax, r.first, r.first + r.count);
        } else {
            return a.slice(At.axis, At.start, At.stop, At.step);
        }
    }
    // Eager mode's mean is a sum and a division.
    template <ops::reduce_attrs At, class A>
    static tensor structural_apply(const ops::with_attrs<ops::reduce<ops::reduction::mean>, At>*, const A& a) {
        std::vector<int> axes(At.axes.begin(), At.axes.begin() + At.naxes);
        return kiln::mean(a, std::move(axes), At.keepdims);
    }
    template <ops::reduce_attrs At, class A>
    static tensor structural_apply(const ops::with_attrs<ops::count, At>*, const A& ref) {
        // The number of elements each reduced position covers: a product of the reduced extents, so a parameter
        // of the trace that follows dynamic extents.
        return full(dims{}, static_cast<double>(ops::count::of(At, ref.shape())), ref.dtype(), ref.device());
    }
    template <class A, class B>
    static tensor structural_apply(const ops::matmul*, const A& a, const B& b) {
        return kiln::matmul(a, b);
    }

    std::span<const tensor> inputs_;
    kiln::device dev_;
    std::array<std::optional<tensor>, nodes::size> memo_{};
};

template <class... Leaves>
std::vector<std::string> leaf_names(types<Leaves...>) {
    return {std::string(Leaves::name.view())...};
}

// The callable that kiln::trace wraps: the expression's leaves as its tensor arguments.
template <class... Roots>
struct expression_function {
    using leaves = typename graph_evaluator<Roots...>::leaves;
    static constexpr std::size_t arity = leaves::size;
    std::tuple<Roots...> roots;

    template <class... T>
        requires(sizeof...(T) == arity && (std::is_base_of_v<tensor, std::remove_cvref_t<T>> && ...))
    auto operator()(const T&... ts) const {
        return evaluate(std::array<tensor, arity>{static_cast<const tensor&>(ts)...});
    }

    auto evaluate(const std::array<tensor, arity>& in) const {
        check(in, leaves{});
        graph_evaluator<Roots...> ev(in);
        if constexpr (sizeof...(Roots) == 1) {
            return ev.as_tensor(ev.eval(std::get<0>(roots)), std::get<0>(roots), ev.device());
        } else {
            return std::apply([&](const auto&... r) { return std::tuple(ev.as_tensor(ev.eval(r), r, ev.device())...); }, roots);
        }
    }

    template <class... Leaves>
    static void check(const std::array<tensor, arity>& in, types<Leaves...>) {
        std::size_t k = 0;
        ([&] {
            const tensor& t = in[k++];
            t.check_valid("trace");
            using T = typename Leaves::value_type;
            if (t.dtype() != dtype_of<T>())
                throw dtype_error(error_prefix("dtype_error", "trace") + "input '" + std::string(Leaves::name.view()) +
                                  "' is " + std::string(name(dtype_of<T>())) + " in the expression, but the tensor " +
                                  "given for it is " + std::string(name(t.dtype())));
            using S = typename Leaves::shape_type;
            if constexpr (spec_extents<S>::known) {
                const std::vector<std::ptrdiff_t> want = spec_extents<S>::get();
                bool ok = static_cast<int>(want.size()) == t.dim();
                for (std::size_t i = 0; ok && i < want.size(); ++i)
                    ok = want[i] == dyn || want[i] == t.shape()[static_cast<int>(i)];
                if (!ok)
                    throw shape_error(error_prefix("shape_error", "trace") + "input '" +
                                      std::string(Leaves::name.view()) + "' has the static shape " +
                                      to_string(spec(dtype_of<T>(), want)) + " in the expression, but the tensor " +
                                      "given for it has shape " + to_string(t.shape()));
            }
        }(), ...);
    }
};

// kiln::trace(session, roots...)'s callable: the expression's inputs are its arguments and its parameters are the
// session's, read as variables over the session's own storage (so a call sees the values the session holds then,
// and kiln::save writes them). The storage is looked up at each trace: a session moved to another device
// (session::to) leaves its old storage marked, the trace that read it is dropped, and the next trace reads the new.
template <class Session, class... Roots>
struct session_expression_function {
    using full = expression_function<Roots...>;
    using leaves = typename full::leaves;
    static constexpr std::size_t inputs = []<class... L>(types<L...>) { return (std::size_t{0} + ... + (is_param_v<L> ? 0 : 1)); }(leaves{});
    full expr;
    Session* session;

    template <class... T>
        requires(sizeof...(T) == inputs && (std::is_base_of_v<tensor, std::remove_cvref_t<T>> && ...))
    auto operator()(const T&... ts) const {
        const std::array<tensor, inputs> given{static_cast<const tensor&>(ts)...};
        std::array<tensor, full::arity> in;
        [&]<class... L>(types<L...>) {
            std::size_t k = 0, a = 0;
            ([&] {
                if constexpr (is_param_v<L>) in[k++] = variable::over(session->parameter(L::name.view()));
                else in[k++] = given[a++];
            }(), ...);
        }(leaves{});
        return expr.evaluate(in);
    }
};

template <class... Leaves>
std::vector<spec> input_leaf_specs(types<Leaves...>) {
    std::vector<spec> out;
    bool known = true;
    ([&] {
        if constexpr (!is_param_v<Leaves>) {
            if constexpr (spec_extents<typename Leaves::shape_type>::known)
                out.push_back(spec(dtype_of<typename Leaves::value_type>(), spec_extents<typename Leaves::shape_type>::get()));
            else known = false;
        }
    }(), ...);
    if (!known) out.clear();
    return out;
}

template <class... Leaves>
std::vector<spec> leaf_specs(types<Leaves...>) {
    if constexpr ((spec_extents<typename Leaves::shape_type>::known && ...))
        return {spec(dtype_of<typename Leaves::value_type>(), spec_extents<typename Leaves::shape_type>::get())...};
    else return {};
}

}  // namespace detail

// The names of the leaves (inputs and parameters) of graph-mode expressions, in first-use order: the order of the
// arguments of kiln::trace(roots...).
template <class... Roots>
    requires(sizeof...(Roots) > 0 && (is_graph_v<Roots> && ...))
std::vector<std::string> input_names(const Roots&...) {
    return detail::leaf_names(typename detail::graph_evaluator<Roots...>::leaves{});
}

// A compile-time graph as a traced function (see the top of this file). Its arguments are the roots' leaves in
// first-use order (kiln::input_names), as kiln::tensors of the leaves' dtypes; a leaf with a static shape is a spec
// (kiln::dyn extents dynamic). It returns a tensor for one root and a std::tuple of tensors for several.
template <class... Roots>
    requires(sizeof...(Roots) > 0 && (is_graph_v<Roots> && ...))
auto trace(const Roots&... roots) {
    using fn = detail::expression_function<Roots...>;
    static_assert(fn::arity > 0, "kiln::trace: the expression has no inputs or parameters; kiln::run computes it");
    function_options o;
    o.name = "trace";
    std::vector<spec> specs = detail::leaf_specs(typename fn::leaves{});
    if (specs.empty()) return function<fn>(fn{std::tuple<Roots...>(roots...)}, std::move(o));
    return function<fn>(fn{std::tuple<Roots...>(roots...)}, std::move(specs), std::move(o));
}

// A compile-time graph whose parameters live in a kiln::session, as a traced function of its inputs only: the
// deployable form of a graph-mode model (kiln::save and kiln::export_onnx write the session's values).
//
//   kiln::session s;  ... s.run(step, x = ..., y = ...);                // trained in graph mode
//   auto predict = kiln::trace(s, prediction);                        // a kiln::function of x
//   kiln::save(predict, {kiln::spec(kiln::float32, {kiln::dyn, 10})}, "model.kiln");
//
// The session creates the parameters it does not hold yet from their initializers (session::initialize), and
// each parameter is read as a variable over the session's storage: a call sees the values the session holds
// then, so training the session on does not need a new trace. kiln::input_names(roots...) with the parameters left
// out is the arguments' order.
template <class Session, class... Roots>
    requires(sizeof...(Roots) > 0 && !is_graph_v<Session> && (is_graph_v<Roots> && ...) &&
             requires(Session& s, std::string_view n) { s.parameter(n); s.has_parameter(n); })
auto trace(Session& session, const Roots&... roots) {
    using fn = detail::session_expression_function<Session, Roots...>;
    using leaves = typename fn::leaves;
    static_assert(fn::inputs > 0, "kiln::trace(session, expr): the expression has no inputs (only parameters); "
                                  "kiln::session::run computes it");
    (session.initialize(roots), ...);
    fn f{typename fn::full{std::tuple<Roots...>(roots...)}, &session};
    function_options o;
    o.name = "trace";
    std::vector<spec> specs = detail::input_leaf_specs(leaves{});
    if (specs.empty()) return function<fn>(std::move(f), std::move(o));
    return function<fn>(std::move(f), std::move(specs), std::move(o));
}

namespace detail {

template <class Step>
struct step_parameters;
template <template <class, class, class> class TS, class Loss, class Rule, class... Params>
struct step_parameters<TS<Loss, Rule, types<Params...>>> {
    static std::vector<std::string> names() { return {std::string(Params::name.view())...}; }
};

// kiln::trace(session, step)'s callable: the loss and every gradient from the compile-time graph (the session's
// parameters read as variables), then the step's update as one effect that writes every parameter.
template <class Session, class Step, class Fn>
struct session_step_function {
    Fn fn;  // (loss, gradients...) of the inputs
    Session* session;
    Step step;

    template <class... T>
        requires(sizeof...(T) == Fn::inputs && (std::is_base_of_v<tensor, std::remove_cvref_t<T>> && ...))
    tensor operator()(const T&... ts) const {
        const auto all = fn(ts...);
        const tensor loss = std::get<0>(all);
        std::vector<tensor> grads;
        std::apply([&](const auto&, const auto&... g) { (grads.push_back(g), ...); }, all);
        if (active_tracer) {
            // The parameters the update writes, in the step's order, over the session's storage now (see above).
            std::vector<tensor> ins;
            for (const std::string& name : step_parameters<Step>::names()) ins.push_back(variable::over(session->parameter(name)));
            const std::size_t n = ins.size();
            ins.insert(ins.end(), grads.begin(), grads.end());
            op_params p;
            if (session->update_recordable(step)) {  // a CUDA graph may record the update (session::update_recordable)
                p.host_part = [s = session, st = step] { s->record_update_host_part(st); };
                p.device_part = [s = session, st = step, n](std::span<const tensor> in, auto) {
                    s->record_update_device_part(st, in.subspan(n));
                };
                p.replayable = [s = session, st = step] { return s->update_recordable(st); };
            }
            active_tracer->record_effect("session_step", "", ins, [s = session, st = step, n](std::span<const tensor> in, auto) {
                s->apply_gradients(st, in.subspan(n));
            }, n, std::move(p));
        } else {
            session->apply_gradients(step, std::span<const tensor>(grads));
        }
        return loss;
    }
};

}  // namespace detail

// A graph-mode training step (kiln::optim::minimize(loss, rule)) as a traced function of the loss's inputs that
// returns the loss and applies the update, as session::run(step, ...) does: the loss and the gradients are the
// compile-time graph's, evaluated by eager ops and recorded; the update is the session's own (its rule, slots and
// step count, shared with session::run of the same step, and its on_gradients hook), recorded as one effect.
//
//   auto train_step = kiln::trace(s, step);            // a kiln::function of (x, y)
//   kiln::tensor loss = train_step(x_batch, y_batch);
template <class Session, class Step>
    requires(!is_graph_v<Step> && requires(const Step& st) { st.loss; st.rule; Step::gradient_types(); } &&
             requires(Session& s, std::string_view n) { s.parameter(n); s.has_parameter(n); })
auto trace(Session& session, const Step& step) {
    session.initialize(step.loss);
    auto fn = [&]<class... G>(detail::grad_types<G...>) { return trace(session, step.loss, G{}...); }(Step::gradient_types());
    using fn_t = std::remove_cvref_t<decltype(fn.callable())>;
    static_assert(fn_t::inputs > 0, "kiln::trace(session, step): the loss has no inputs");
    using callable = detail::session_step_function<Session, Step, fn_t>;
    function_options o;
    o.name = "train_step";
    std::vector<spec> specs = detail::input_leaf_specs(typename fn_t::leaves{});
    callable c{fn.callable(), &session, step};
    if (specs.empty()) return function<callable>(std::move(c), std::move(o));
    return function<callable>(std::move(c), std::move(specs), std::move(o));
}

}  // namespace kiln
