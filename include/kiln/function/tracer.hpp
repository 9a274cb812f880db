#pragma once
// Function mode's tracer: the recorder behind eager mode's seam (detail::tracer_base) that turns the ops a
// traced function runs into the SSA nodes of a function_graph, and what a traced function may return.
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "../eager/shape_run.hpp"
#include "graph.hpp"
#include "passes.hpp"

namespace kiln {

namespace detail {

// What a symbolic tensor kept past the end of its trace answers to: every use is a trace_error.
struct finished_trace final : tracer_base {
    tensor record(std::string_view op, std::string, std::span<const tensor>, replay_fn, op_params) override { refuse(op); }
    void record_effect(std::string_view op, std::string, std::span<const tensor>, effect_fn, std::size_t, op_params) override {
        refuse(op);
    }
    [[noreturn]] void refuse(std::string_view what, std::string_view at = {}) const override {
        throw trace_error(error_prefix("trace_error", what) + (at.empty() ? "" : "at " + std::string(at) + ": ") +
                          "the tensor is a symbolic tensor kept from inside a traced "
                          "function after its trace ended; it has no values (return it from the function instead)");
    }
    static finished_trace& instance() {
        static finished_trace t;
        return t;
    }
};

// Records one trace: the nodes of its graph, and the values of the tensors it has seen.
// (A class template on an unused int: its member functions compile only in the programs that trace.)
template <int = 0>
class basic_tracer final : public tracer_base {
public:
    explicit basic_tracer(std::string function_name, basic_tracer* parent = nullptr)
        : name_(std::move(function_name)), first_id_(next_tensor_id()), parent_(parent) {}

    const std::string& name() const noexcept { return name_; }
    // A sub-trace's arguments after its own: the enclosing traces' values it uses.
    const std::vector<tensor>& captures() const noexcept { return captures_; }
    void set_first_capture(int position) noexcept { next_capture_ = position; }
    basic_tracer(const basic_tracer&) = delete;
    basic_tracer& operator=(const basic_tracer&) = delete;
    ~basic_tracer() override {
        for (const std::weak_ptr<storage>& w : made_)
            if (const std::shared_ptr<storage> s = w.lock()) s->trace_owner = &finished_trace::instance();
    }

    function_graph graph;

    tensor argument(kiln::dtype d, const dims& shape, int position, kiln::device where = kiln::cpu) {
        graph_node n;
        n.kind = node_kind::argument;
        n.argument = position;
        n.dtype = d;
        n.shape = shape;
        n.device = where;
        return add(std::move(n));
    }

    // The value a tensor seen by the function stands for: a symbolic tensor of this trace, or a captured one.
    std::int32_t value_of(const tensor& t, std::string_view op) {
        t.check_valid(std::string(op).c_str());
        const storage& s = *t.storage_handle();
        if (s.trace_owner && s.trace_owner != this) {
            // A value of an enclosing trace (a while_loop's body using the function's tensors): an argument here.
            for (basic_tracer* p = parent_; p; p = p->parent_)
                if (p == s.trace_owner) {
                    const auto found = captured_symbols_.find(&s);
                    if (found != captured_symbols_.end()) return found->second;
                    if (!(t.offset() == 0 && t.strides() == contiguous_strides(t.shape())))
                        throw trace_error(error_prefix("trace_error", op) + "a view of an enclosing trace's value was made "
                                          "without the tracer seeing it");
                    const tensor a = argument(t.dtype(), t.shape(), next_capture_++, t.device());
                    captures_.push_back(t);
                    const std::int32_t v = index_of(a);
                    captured_symbols_.emplace(&s, v);
                    return v;
                }
        }
        if (s.trace_owner) {
            if (s.trace_owner != this)
                throw trace_error(error_prefix("trace_error", op) + "a symbolic tensor from another trace reached '" +
                                  name_ + "' (a tensor kept from inside a traced function has no values outside it)");
            const graph_node& n = graph.nodes[static_cast<std::size_t>(s.trace_value)];
            if (!(t.shape() == n.shape) || t.offset() != 0 || !(t.strides() == contiguous_strides(n.shape)))
                throw trace_error(error_prefix("trace_error", op) + "a view of a symbolic tensor was made without the "
                                  "tracer seeing it (an eager function that builds views by hand is not traceable yet)");
            return static_cast<std::int32_t>(s.trace_value);
        }
        const key k{t.storage_handle().get(), t.offset(), t.dtype(), t.shape(), t.strides()};
        auto found = captured_.find(k);
        if (found != captured_.end()) return found->second;
        graph_node n;
        n.kind = t.trainable() || written_storage_.count(t.storage_handle().get()) ? node_kind::variable : node_kind::constant;
        n.dtype = t.dtype();
        n.shape = t.shape();
        n.device = t.device();
        // A variable is read where it lives; a plain tensor is captured by its value now (its handle is kept
        // too, in case the function writes into it: then it becomes state, read where it lives).
        n.value = t;
        const std::int32_t v = index_of(add(std::move(n)));
        captured_.emplace(k, v);
        return v;
    }

    tensor record(std::string_view op, std::string attrs, std::span<const tensor> inputs, replay_fn fn,
                  op_params params) override {
        graph_node n;
        n.kind = node_kind::op;
        n.op = std::string(op);
        n.attrs = std::move(attrs);
        n.params = std::move(params);
        for (const tensor& t : inputs) n.inputs.push_back(value_of(t, op));
        // The result's dtype and shape, with the errors eager mode gives: the op's spec where it has one and can
        // tell (elementwise ops: nothing computed, nothing allocated but one element), else the op itself on
        // placeholders (one element broadcast by stride 0, so inputs take no memory) with nothing recording; a
        // matrix product there gives a placeholder too, after its checks (placeholder_products, eager/linalg.hpp).
        std::vector<tensor> ph;
        for (std::int32_t v : n.inputs) ph.push_back(passes::detail::untraced([&] { return placeholder(v); }));
        const tensor y = result_of_op(ph, fn, n.params);
        n.dtype = y.dtype();
        n.shape = y.shape();
        n.device = y.device();
        n.fn = std::move(fn);
        return add(std::move(n));
    }

    void record_effect(std::string_view op, std::string attrs, std::span<const tensor> inputs, effect_fn fn,
                       std::size_t writes, op_params params) override {
        graph_node n;
        n.kind = node_kind::effect;
        n.op = std::string(op);
        n.attrs = std::move(attrs);
        n.params = std::move(params);
        n.writes = writes;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            const tensor& t = inputs[i];
            const std::int32_t v = value_of(t, op);
            if (i < writes) {
                // The tensor written: t itself, or, for a view the trace made (state[1] += x, state.slice(...) =
                // y), the tensor at the end of its chain of views. A captured tensor that is written into is
                // state: read where it lives from now on, never its value of trace time.
                graph_node& target = graph.nodes[static_cast<std::size_t>(passes::detail::view_root(graph, v))];
                const bool captured = target.kind == node_kind::variable ||
                                      (target.kind == node_kind::constant && target.op.empty());
                if (captured) {
                    const tensor& base = t.is_symbolic() ? target.value : t;
                    if (base.id() >= first_id_ && !base.trainable())
                        throw trace_error(error_prefix("trace_error", op) + "'" + name_ + "' writes into a tensor "
                                          "that was made while tracing by code the tracer does not see; make it "
                                          "with kiln::zeros or kiln::full, or run the function eagerly");
                    target.kind = node_kind::variable;
                    // Every other capture of that storage (a view of it captured whole, the tensor read before
                    // the write) is state too, and so is any later one (value_of).
                    const storage* written = base.storage_handle().get();
                    written_storage_.insert(written);
                    for (graph_node& other : graph.nodes)
                        if (other.kind == node_kind::constant && other.op.empty() && other.value.valid() &&
                            other.value.storage_handle().get() == written)
                            other.kind = node_kind::variable;
                }
            }
            n.inputs.push_back(v);
        }
        n.effect = std::move(fn);
        graph.nodes.push_back(std::move(n));
    }

    void note_composite(std::string_view op, std::string attrs, std::span<const tensor> inputs, const tensor& output) override {
        // Only a result of this trace, from values this trace has already seen (a note names values; it makes none).
        auto seen = [&](const tensor& t, std::int32_t* v) {
            if (!t.valid() || !t.storage_handle()) return false;
            const storage& s = *t.storage_handle();
            if (s.trace_owner == this) {
                *v = static_cast<std::int32_t>(s.trace_value);
                const graph_node& n = graph.nodes[static_cast<std::size_t>(*v)];
                return t.shape() == n.shape && t.offset() == 0 && t.strides() == contiguous_strides(n.shape);
            }
            if (s.trace_owner) return false;
            const auto found = captured_.find(key{t.storage_handle().get(), t.offset(), t.dtype(), t.shape(), t.strides()});
            if (found == captured_.end()) return false;
            *v = found->second;
            return true;
        };
        composite_note c;
        c.op = std::string(op);
        c.attrs = std::move(attrs);
        if (!seen(output, &c.output) || graph.nodes[static_cast<std::size_t>(c.output)].kind != node_kind::op) return;
        for (const tensor& t : inputs) {
            std::int32_t v = -1;
            if (!seen(t, &v)) return;
            c.inputs.push_back(v);
        }
        graph.composites.push_back(std::move(c));
    }

    [[noreturn]] void refuse(std::string_view what, std::string_view at = {}) const override {
        throw trace_error(error_prefix("trace_error", what) + (at.empty() ? "" : "at " + std::string(at) + ": ") +
                          "the tensor is symbolic: kiln::function '" + name_ +
                          "' is being traced, and its values exist only when it runs. Code that reads values "
                          "(item(), at(), data(), printing, a C++ branch on a value) cannot be traced; write it "
                          "with tensor ops (kiln::where), or run the function eagerly "
                          "(kiln::run_functions_eagerly(true), or the function's run_eagerly(true))");
    }

    // The function's result: its values, in order.
    void set_outputs(const std::vector<tensor>& outs) {
        graph.outputs.clear();
        for (const tensor& t : outs) graph.outputs.push_back(value_of(t, "return"));
    }

private:
    struct key {
        const void* storage;
        std::ptrdiff_t offset;
        kiln::dtype dt;
        dims shape, strides;
        bool operator<(const key& o) const {
            if (storage != o.storage) return storage < o.storage;
            if (offset != o.offset) return offset < o.offset;
            if (dt != o.dt) return dt < o.dt;
            for (int i = 0; i < max_rank; ++i) {
                if (i >= shape.rank || i >= o.shape.rank) return shape.rank < o.shape.rank;
                if (shape[i] != o.shape[i]) return shape[i] < o.shape[i];
                if (strides[i] != o.strides[i]) return strides[i] < o.strides[i];
            }
            return false;
        }
    };

    std::int32_t index_of(const tensor& t) const { return static_cast<std::int32_t>(t.storage_handle()->trace_value); }

    tensor add(graph_node&& n) {
        const auto v = static_cast<std::int64_t>(graph.nodes.size());
        auto s = std::make_shared<storage>();
        s->trace_owner = this;
        s->trace_value = v;
        made_.push_back(s);
        s->dev = n.device;
        tensor t(std::move(s), n.dtype, n.shape, contiguous_strides(n.shape), 0);
        graph.nodes.push_back(std::move(n));
        return t;
    }

    tensor placeholder(std::int32_t v) const {
        const graph_node& n = graph.nodes[static_cast<std::size_t>(v)];
        if (n.kind == node_kind::constant || n.kind == node_kind::variable) return n.value;
        return zeros(dims{}, n.dtype, n.device).broadcast_to(n.shape);
    }

    std::string name_;
    std::uint64_t first_id_;
    std::map<key, std::int32_t> captured_;
    std::set<const storage*> written_storage_;  // captured tensors' storage that the function writes into
    std::vector<std::weak_ptr<storage>> made_;
    basic_tracer* parent_ = nullptr;
    std::vector<tensor> captures_;
    std::map<const storage*, std::int32_t> captured_symbols_;
    int next_capture_ = 0;
};
using tracer = basic_tracer<>;

// Sets the thread's tracer for a scope.
struct tracing_scope {
    tracer_base* saved = active_tracer;
    explicit tracing_scope(tracer_base* t) noexcept { active_tracer = t; }
    ~tracing_scope() { active_tracer = saved; }
    tracing_scope(const tracing_scope&) = delete;
    tracing_scope& operator=(const tracing_scope&) = delete;
};

// What a traced function returns, from what f returns: a tensor for anything that is one (a kiln::variable, a
// layer's parameter), element by element in a tuple.
template <class R>
struct traced_result {
    using type = std::conditional_t<std::is_base_of_v<tensor, std::remove_cvref_t<R>>, tensor, std::remove_cvref_t<R>>;
};
template <class... T>
struct traced_result<std::tuple<T...>> {
    using type = std::tuple<typename traced_result<T>::type...>;
};
template <class A, class B>
struct traced_result<std::pair<A, B>> {
    using type = std::pair<typename traced_result<A>::type, typename traced_result<B>::type>;
};
template <class T, std::size_t N>
struct traced_result<std::array<T, N>> {
    using type = std::array<typename traced_result<T>::type, N>;
};
template <class R>
using traced_result_t = typename traced_result<std::remove_cvref_t<R>>::type;

template <class R>
struct result_traits {
    static_assert(std::is_same_v<R, tensor> || std::is_void_v<R>,
                  "kiln::function: the function must return a kiln::tensor, a std::tuple, std::pair, std::array or "
                  "std::vector of tensors, or nothing");
    static std::vector<tensor> flatten(const tensor& t) { return {t}; }
    static tensor rebuild(std::vector<tensor>& v) { return std::move(v[0]); }
};
template <>
struct result_traits<std::vector<tensor>> {
    static std::vector<tensor> flatten(const std::vector<tensor>& v) { return v; }
    static std::vector<tensor> rebuild(std::vector<tensor>& v) { return std::move(v); }
};
template <class A, class B>
struct result_traits<std::pair<A, B>> {
    static_assert(std::is_same_v<A, tensor> && std::is_same_v<B, tensor>, "kiln::function: a returned std::pair must hold kiln::tensors");
    static std::vector<tensor> flatten(const std::pair<A, B>& p) { return {p.first, p.second}; }
    static std::pair<A, B> rebuild(std::vector<tensor>& v) { return {std::move(v[0]), std::move(v[1])}; }
};
template <class T, std::size_t N>
struct result_traits<std::array<T, N>> {
    static_assert(std::is_same_v<T, tensor>, "kiln::function: a returned std::array must hold kiln::tensors");
    static std::vector<tensor> flatten(const std::array<T, N>& a) { return std::vector<tensor>(a.begin(), a.end()); }
    static std::array<T, N> rebuild(std::vector<tensor>& v) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) { return std::array<T, N>{std::move(v[I])...}; }(
            std::make_index_sequence<N>{});
    }
};
template <class... T>
struct result_traits<std::tuple<T...>> {
    static_assert((std::is_same_v<T, tensor> && ...), "kiln::function: a returned std::tuple must hold kiln::tensors");
    static std::vector<tensor> flatten(const std::tuple<T...>& t) {
        return std::apply([](const auto&... x) { return std::vector<tensor>{x...}; }, t);
    }
    static std::tuple<T...> rebuild(std::vector<tensor>& v) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) { return std::tuple<T...>(std::move(v[I])...); }(
            std::index_sequence_for<T...>{});
    }
};

}  // namespace detail
}  // namespace kiln
