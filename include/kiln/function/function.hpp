#pragma once
// Function mode: kiln::function(f) traces eager code into a run-time graph, optimizes it, caches it by the
// signature of its arguments and replays it.
//
//   kiln::optim::adam opt(model.parameters());
//   auto train_step = kiln::function([&](const kiln::tensor& x, const kiln::tensor& y) {
//       kiln::gradient_tape tape;
//       kiln::tensor loss = kiln::nn::mse(model(x), y);
//       opt.apply_gradients(tape.gradient(loss, model.parameters()), model.parameters());
//       return loss;
//   });
//   kiln::tensor loss = train_step(x, y);  // the first call for a signature traces; later calls replay
//
// The tracer records at eager mode's seam (detail::tracer_base in eager/tensor.hpp): no op is written again for
// function mode. docs/function-mode.md says what tracing captures and what it does not.
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "graph.hpp"
#include "passes.hpp"

namespace kiln {

namespace detail {

inline std::atomic<bool> functions_run_eagerly{false};

// Records one trace: the nodes of its graph, and the values of the tensors it has seen.
class tracer final : public tracer_base {
public:
    explicit tracer(std::string function_name) : name_(std::move(function_name)), first_id_(next_tensor_id()) {}

    function_graph graph;

    tensor argument(const tensor& like, int position) {
        graph_node n;
        n.kind = node_kind::argument;
        n.argument = position;
        n.dtype = like.dtype();
        n.shape = like.shape();
        return add(std::move(n));
    }

    // The value a tensor seen by the function stands for: a symbolic tensor of this trace, or a captured one.
    std::int32_t value_of(const tensor& t, std::string_view op) {
        t.check_valid(std::string(op).c_str());
        const storage& s = *t.storage_handle();
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
        n.kind = t.trainable() ? node_kind::variable : node_kind::constant;
        n.dtype = t.dtype();
        n.shape = t.shape();
        // A variable is read where it lives; a plain tensor is captured by its value now (its handle is kept
        // too, in case the function writes into it: then it becomes state, read where it lives).
        n.value = t;
        const std::int32_t v = index_of(add(std::move(n)));
        captured_.emplace(k, v);
        return v;
    }

    tensor record(std::string_view op, std::string attrs, std::span<const tensor> inputs, replay_fn fn) override {
        graph_node n;
        n.kind = node_kind::op;
        n.op = std::string(op);
        n.attrs = std::move(attrs);
        for (const tensor& t : inputs) n.inputs.push_back(value_of(t, op));
        // The result's dtype and shape, with the errors eager mode gives: the op itself on placeholders (one
        // element broadcast by stride 0, so inputs take no memory) with nothing recording.
        const tensor y = passes::detail::untraced([&] {
            std::vector<tensor> ph;
            for (std::int32_t v : n.inputs) ph.push_back(placeholder(v));
            return fn(ph);
        });
        n.dtype = y.dtype();
        n.shape = y.shape();
        n.fn = std::move(fn);
        return add(std::move(n));
    }

    void record_effect(std::string_view op, std::string attrs, std::span<const tensor> inputs, effect_fn fn,
                       std::size_t writes) override {
        graph_node n;
        n.kind = node_kind::effect;
        n.op = std::string(op);
        n.attrs = std::move(attrs);
        n.writes = writes;
        for (std::size_t i = 0; i < inputs.size(); ++i) {
            const tensor& t = inputs[i];
            const std::int32_t v = value_of(t, op);
            if (i < writes && !t.is_symbolic()) {
                graph_node& target = graph.nodes[static_cast<std::size_t>(v)];
                if (t.id() >= first_id_ && !t.trainable())
                    throw trace_error(error_prefix("trace_error", op) + "'" + name_ + "' writes into a tensor that "
                                      "was made while tracing by code the tracer does not see; make it with "
                                      "kiln::zeros or kiln::full, or run the function eagerly");
                target.kind = node_kind::variable;  // written: read where it lives from now on
            }
            n.inputs.push_back(v);
        }
        n.effect = std::move(fn);
        graph.nodes.push_back(std::move(n));
    }

    [[noreturn]] void refuse(std::string_view what) const override {
        throw trace_error(error_prefix("trace_error", what) + "the tensor is symbolic: kiln::function '" + name_ +
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

    // Captured plain tensors that nothing writes into keep their value of now.
    void finish() {
        for (graph_node& n : graph.nodes)
            if (n.kind == node_kind::constant && n.op.empty()) n.value = n.value.clone();
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
        tensor t(std::move(s), n.dtype, n.shape, contiguous_strides(n.shape), 0);
        graph.nodes.push_back(std::move(n));
        return t;
    }

    tensor placeholder(std::int32_t v) const {
        const graph_node& n = graph.nodes[static_cast<std::size_t>(v)];
        if (n.kind == node_kind::constant || n.kind == node_kind::variable) return n.value;
        return zeros(dims{}, n.dtype).broadcast_to(n.shape);
    }

    std::string name_;
    std::uint64_t first_id_;
    std::map<key, std::int32_t> captured_;
};

// Sets the thread's tracer for a scope.
struct tracing_scope {
    tracer_base* saved = active_tracer;
    explicit tracing_scope(tracer_base* t) noexcept { active_tracer = t; }
    ~tracing_scope() { active_tracer = saved; }
    tracing_scope(const tracing_scope&) = delete;
    tracing_scope& operator=(const tracing_scope&) = delete;
};

// A graph ready to run: the optimized graph and, for each node, the values that die after it.
struct executable {
    function_graph traced;     // as traced, before the passes
    function_graph graph;      // after them
    passes::pass_report report;
    std::vector<std::int32_t> release_start;  // release[release_start[i] .. release_start[i + 1]) die after node i
    std::vector<std::int32_t> release;
    // Whether result k was, as traced, an argument or a variable itself (returned as it is, as eager mode does);
    // a result that the passes turned into one (x * 1 is x) is the caller's own copy.
    std::vector<char> result_aliases;

    void prepare() {
        result_aliases.clear();
        for (std::int32_t o : traced.outputs) {
            const node_kind k = traced.nodes[static_cast<std::size_t>(o)].kind;
            result_aliases.push_back(k == node_kind::argument || k == node_kind::variable);
        }
        const std::size_t n = graph.nodes.size();
        std::vector<std::int32_t> last(n, -1);
        for (std::size_t i = 0; i < n; ++i)
            for (std::int32_t in : graph.nodes[i].inputs) last[static_cast<std::size_t>(in)] = static_cast<std::int32_t>(i);
        for (std::int32_t o : graph.outputs) last[static_cast<std::size_t>(o)] = static_cast<std::int32_t>(n);
        std::vector<std::vector<std::int32_t>> at(n);
        for (std::size_t v = 0; v < n; ++v)
            if (last[v] >= 0 && last[v] < static_cast<std::int32_t>(n)) at[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
        release_start.assign(n + 1, 0);
        release.clear();
        for (std::size_t i = 0; i < n; ++i) {
            release_start[i] = static_cast<std::int32_t>(release.size());
            release.insert(release.end(), at[i].begin(), at[i].end());
        }
        release_start[n] = static_cast<std::int32_t>(release.size());
    }

    std::vector<tensor> run(std::span<const tensor> args) const {
        const std::size_t n = graph.nodes.size();
        std::vector<tensor> slots(n);
        std::vector<tensor> in;
        in.reserve(8);
        for (std::size_t i = 0; i < n; ++i) {
            const graph_node& node = graph.nodes[i];
            switch (node.kind) {
                case node_kind::argument: slots[i] = args[static_cast<std::size_t>(node.argument)]; break;
                case node_kind::constant:
                case node_kind::variable: slots[i] = node.value; break;
                case node_kind::op:
                case node_kind::effect:
                    in.clear();
                    for (std::int32_t v : node.inputs) in.push_back(slots[static_cast<std::size_t>(v)]);
                    if (node.kind == node_kind::op) slots[i] = node.fn(in);
                    else node.effect(in);
                    break;
            }
            for (std::int32_t k = release_start[i]; k < release_start[i + 1]; ++k)
                slots[static_cast<std::size_t>(release[static_cast<std::size_t>(k)])] = tensor();
        }
        std::vector<tensor> out;
        out.reserve(graph.outputs.size());
        for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
            const std::int32_t o = graph.outputs[k];
            const node_kind kind = graph.nodes[static_cast<std::size_t>(o)].kind;
            // A constant result, and one that became an argument or a variable, is the caller's own copy, as eager
            // mode's results are.
            const bool copy = kind == node_kind::constant ||
                              ((kind == node_kind::argument || kind == node_kind::variable) && !result_aliases[k]);
            out.push_back(copy ? slots[static_cast<std::size_t>(o)].clone() : slots[static_cast<std::size_t>(o)]);
        }
        return out;
    }
};

template <class T>
inline constexpr bool is_tensor_arg_v = std::is_base_of_v<tensor, std::remove_cvref_t<T>>;

// A static argument's part of a signature: its value.
template <class T>
std::string static_key(const T& v) {
    using U = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<U, bool>) return v ? "true" : "false";
    else if constexpr (std::is_enum_v<U>) return "enum " + std::to_string(static_cast<long long>(v));
    else if constexpr (std::is_floating_point_v<U>) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(v));
        return buf;
    } else if constexpr (std::is_arithmetic_v<U>) return std::to_string(v);
    else if constexpr (std::is_convertible_v<const U&, std::string_view>) return "\"" + std::string(std::string_view(v)) + "\"";
    else {
        static_assert(std::is_arithmetic_v<U>, "kiln::function: an argument that is not a tensor must be a number, a bool, an enum or a string (it is part of the signature, by value)");
        return {};
    }
}

template <class R>
struct result_traits {
    static_assert(std::is_same_v<R, tensor> || std::is_void_v<R>,
                  "kiln::function: the function must return a kiln::tensor, a std::tuple or std::vector of tensors, or nothing");
    static std::vector<tensor> flatten(const tensor& t) { return {t}; }
    static tensor rebuild(std::vector<tensor>& v) { return std::move(v[0]); }
};
template <>
struct result_traits<std::vector<tensor>> {
    static std::vector<tensor> flatten(const std::vector<tensor>& v) { return v; }
    static std::vector<tensor> rebuild(std::vector<tensor>& v) { return std::move(v); }
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

// Every kiln::function runs its callable directly, without tracing (for debugging), while this is true.
inline void run_functions_eagerly(bool on) { detail::functions_run_eagerly.store(on, std::memory_order_relaxed); }
inline bool functions_run_eagerly() { return detail::functions_run_eagerly.load(std::memory_order_relaxed); }

struct function_options {
    std::string name = "function";  // names the function in errors and warnings
    bool optimize = true;           // run the passes on each trace
    // Called with a warning when each of the last 5 calls traced (stderr when empty).
    std::function<void(const std::string&)> on_warning;
};

// A traced function: f with tensor arguments (and static ones: numbers, bools, enums, strings) and a tensor, a
// std::tuple or std::vector of tensors, or nothing as its result.
template <class F>
class function {
public:
    explicit function(F f, function_options options = {}) : f_(std::move(f)), options_(std::move(options)) {}

    template <class... A>
    decltype(auto) operator()(A&&... args) {
        using R = std::invoke_result_t<F&, A&&...>;
        // Debugging, nesting (a function called while another traces inlines into that trace), and gradient
        // tapes recording around the call (they must see the ops) run f itself.
        if (eager_ || functions_run_eagerly() || detail::active_tracer || detail::recording_tapes > 0)
            return std::invoke(f_, std::forward<A>(args)...);
        std::vector<tensor> tensors;
        std::string key;
        std::vector<std::string> parts;
        (describe(args, tensors, key, parts), ...);
        const std::shared_ptr<const detail::executable> exe = find_or_trace<R>(key, parts, tensors, args...);
        std::vector<tensor> outs = exe->run(tensors);
        if constexpr (std::is_void_v<R>) return;
        else return detail::result_traits<R>::rebuild(outs);
    }

    // How many times f was traced (one per new signature).
    std::size_t trace_count() const {
        std::lock_guard lock(*mutex_);
        return traces_;
    }
    // Why each trace after the first happened: "argument 0: shape (32, 10) -> (8, 10)".
    std::vector<std::string> retrace_reasons() const {
        std::lock_guard lock(*mutex_);
        return reasons_;
    }
    // Runs f directly instead of tracing (this function only).
    void run_eagerly(bool on) { eager_ = on; }

    // The run-time graph for the signature of `args` (traced now if it was not), after the passes.
    template <class... A>
    const function_graph& graph(A&&... args) {
        return executable_for(std::forward<A>(args)...)->graph;
    }
    // The same graph as traced, before the passes.
    template <class... A>
    const function_graph& traced_graph(A&&... args) {
        return executable_for(std::forward<A>(args)...)->traced;
    }
    // What the passes did to that graph.
    template <class... A>
    passes::pass_report report(A&&... args) {
        return executable_for(std::forward<A>(args)...)->report;
    }

private:
    template <class... A>
    std::shared_ptr<const detail::executable> executable_for(A&&... args) {
        using R = std::invoke_result_t<F&, A&&...>;
        std::vector<tensor> tensors;
        std::string key;
        std::vector<std::string> parts;
        (describe(args, tensors, key, parts), ...);
        return find_or_trace<R>(key, parts, tensors, args...);
    }

    template <class A>
    static void describe(const A& a, std::vector<tensor>& tensors, std::string& key, std::vector<std::string>& parts) {
        std::string part;
        if constexpr (detail::is_tensor_arg_v<A>) {
            const tensor& t = a;
            t.check_valid("function");
            part = "shape " + to_string(t.shape()) + " " + std::string(name(t.dtype())) + " on " + to_string(t.device());
            tensors.push_back(t);
        } else {
            part = "value " + detail::static_key(a);
        }
        key += part + ";";
        parts.push_back(std::move(part));
    }

    // A traced argument: a symbolic tensor for a tensor argument, the value itself for a static one.
    template <class A>
    static decltype(auto) traced_arg(A&& a, const std::vector<tensor>& symbols, std::size_t& k) {
        if constexpr (detail::is_tensor_arg_v<A>) return tensor(symbols[k++]);
        else return std::forward<A>(a);
    }

    template <class R, class... A>
    std::shared_ptr<const detail::executable> find_or_trace(const std::string& key, const std::vector<std::string>& parts,
                                                            const std::vector<tensor>& tensors, A&&... args) {
        std::lock_guard lock(*mutex_);
        record_call(false);
        auto found = cache_.find(key);
        if (found != cache_.end()) return found->second;
        record_call(true);
        if (traces_ > 0) reasons_.push_back(reason(parts));
        last_parts_ = parts;

        auto exe = std::make_shared<detail::executable>();
        {
            detail::tracer tr(options_.name);
            std::vector<tensor> symbols;
            for (std::size_t i = 0; i < tensors.size(); ++i) symbols.push_back(tr.argument(tensors[i], static_cast<int>(i)));
            {
                const detail::tracing_scope scope(&tr);
                std::size_t k = 0;
                // (Braced initialization: the arguments are made in order.)
                auto call = [&](auto&&... ts) -> decltype(auto) { return std::invoke(f_, std::forward<decltype(ts)>(ts)...); };
                if constexpr (std::is_void_v<R>) {
                    std::apply(call, std::tuple<decltype(traced_arg(std::forward<A>(args), symbols, k))...>{
                                         traced_arg(std::forward<A>(args), symbols, k)...});
                    tr.set_outputs({});
                } else {
                    R r = std::apply(call, std::tuple<decltype(traced_arg(std::forward<A>(args), symbols, k))...>{
                                               traced_arg(std::forward<A>(args), symbols, k)...});
                    tr.set_outputs(detail::result_traits<R>::flatten(r));
                }
            }
            tr.finish();
            exe->traced = tr.graph;
        }
        exe->graph = exe->traced;
        if (options_.optimize) exe->report = passes::optimize(exe->graph);
        exe->prepare();
        ++traces_;
        cache_.emplace(key, exe);
        return exe;
    }

    std::string reason(const std::vector<std::string>& parts) const {
        std::string r;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const std::string before = i < last_parts_.size() ? last_parts_[i] : "nothing";
            if (before != parts[i]) r += (r.empty() ? "" : "; ") + ("argument " + std::to_string(i) + ": " + before + " -> " + parts[i]);
        }
        if (parts.size() != last_parts_.size())
            r += (r.empty() ? "" : "; ") + std::to_string(last_parts_.size()) + " arguments -> " + std::to_string(parts.size());
        return r.empty() ? "a signature seen before was traced again" : r;
    }

    // TensorFlow's warning: when each of the last five calls traced, tracing is probably not what was meant.
    void record_call(bool traced) {
        if (!traced) {
            recent_ = (recent_ << 1) & 0x1f;
            return;
        }
        recent_ |= 1;  // the call counted as not tracing a moment ago does trace
        if (recent_ == 0x1f && traces_ >= 4) {
            const std::string msg = "kiln: warning: function '" + options_.name + "' traced on each of its last 5 calls (" +
                                    std::to_string(traces_ + 1) + " traces; the last because " +
                                    (reasons_.empty() ? std::string("it was new") : reasons_.back()) +
                                    "); tensors of new shapes or new static argument values trace again";
            if (options_.on_warning) options_.on_warning(msg);
            else std::fprintf(stderr, "%s\n", msg.c_str());
        }
    }

    F f_;
    function_options options_;
    bool eager_ = false;
    std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // (a pointer: functions move)
    std::unordered_map<std::string, std::shared_ptr<const detail::executable>> cache_;
    std::size_t traces_ = 0;
    std::vector<std::string> reasons_;
    std::vector<std::string> last_parts_;
    unsigned recent_ = 0;
};

template <class F>
function(F) -> function<F>;
template <class F>
function(F, function_options) -> function<F>;

}  // namespace kiln
