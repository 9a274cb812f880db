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
// The tracer records at eager mode's seam (detail::tracer_base in eager/trace_seam.hpp): no op is written again for
// function mode. docs/function-mode.md says what tracing captures and what it does not.
#include <algorithm>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control_flow.hpp"
#include "dynamic_dims.hpp"
#include "separate.hpp"
#include "spec.hpp"

namespace kiln {

namespace detail {

inline std::atomic<bool> functions_run_eagerly{false};

template <class T>
inline constexpr bool is_tensor_arg_v = std::is_base_of_v<tensor, std::remove_cvref_t<T>>;
// A list of tensors (a model's parameters, a batch of several inputs): each element is a tensor argument, and the
// list's length is part of the signature.
template <class T>
inline constexpr bool is_tensor_list_v = std::is_same_v<std::remove_cvref_t<T>, std::vector<tensor>>;

// A static argument's part of a signature: its value.
template <class T>
std::string static_key(const T& v) {
    using U = std::remove_cvref_t<T>;
    if constexpr (std::is_same_v<U, bool>) return v ? "true" : "false";
    else if constexpr (std::is_enum_v<U>) return "enum " + std::to_string(static_cast<long long>(v));
    else if constexpr (std::is_floating_point_v<U>) return number_text(static_cast<double>(v));
    else if constexpr (std::is_arithmetic_v<U>) return std::to_string(v);
    else if constexpr (std::is_convertible_v<const U&, std::string_view>) return "\"" + std::string(std::string_view(v)) + "\"";
    else {
        static_assert(std::is_arithmetic_v<U>, "kiln::function: an argument that is neither a tensor nor a std::vector<kiln::tensor> must be a number, a bool, an enum or a string (it is part of the signature, by value)");
        return {};
    }
}

}  // namespace detail

// Every kiln::function runs its callable directly, without tracing (for debugging), while this is true.
inline void run_functions_eagerly(bool on) { detail::functions_run_eagerly.store(on, std::memory_order_relaxed); }
inline bool functions_run_eagerly() { return detail::functions_run_eagerly.load(std::memory_order_relaxed); }

struct function_options {
    std::string name = "function";  // names the function in errors and warnings
    bool optimize = true;           // run the passes on each trace
    bool fuse = true;               // run chains of elementwise ops tile by tile (fused groups)
    // From the second call of a signature, run it from a buffer plan (function/buffer_plan.hpp): values in a
    // reused arena, matrix products, sums and elementwise ops run from raw pointers, views computed once.
    bool plan = true;
    // How this function's fused groups are compiled (function/jit.hpp); empty: the process's setting (kiln::set_jit,
    // or KILN_JIT), read when a signature is prepared.
    std::optional<jit_mode> jit = std::nullopt;
    // On a CUDA device, capture a signature's whole call as a CUDA graph at its third call and replay that graph
    // from then on: one launch per call instead of one per kernel (docs/gpu.md). Calls whose graph cannot be
    // recorded once (an optimizer step, a print, a loop: their host code runs at each call) run node by node;
    // cuda_graph_status() says which.
    bool cuda_graphs = true;
    // TensorFlow's reduce_retracing: an extent of a tensor argument that changes between traces becomes dynamic
    // (as if declared kiln::dyn in a spec), so the next trace serves every extent of it.
    bool reduce_retracing = false;
    // Called with a warning when each of the last 5 calls traced (stderr when empty).
    std::function<void(const std::string&)> on_warning = nullptr;
};

// A traced function: f with tensor arguments (and static ones: numbers, bools, enums, strings) and a tensor, a
// std::tuple, std::pair, std::array or std::vector of tensors, or nothing as its result.
template <class F>
class function {
public:
    explicit function(F f, function_options options = {}) : f_(std::move(f)), options_(std::move(options)) {}
    // With a spec for each tensor argument: calls are checked against it, and its kiln::dyn extents are dynamic.
    // An empty list declares nothing (`kiln::function(f, {}, options)` is `kiln::function(f, options)`).
    function(F f, spec_list specs, function_options options = {})
        : f_(std::move(f)), options_(std::move(options)), specs_(std::move(specs.items)), has_specs_(!specs_.empty()),
          same_name_(detail::dim_name_groups(specs_)) {}

    template <class... A>
    decltype(auto) operator()(A&&... args) {
        static_assert(std::is_invocable_v<F&, A&&...>,
                      "kiln::function: the wrapped function cannot be called with these arguments; check their number "
                      "and types against its parameters (the first lines of this error's instantiation trace name them)");
        if constexpr (std::is_invocable_v<F&, A&&...>) return call(std::forward<A>(args)...);
        else return tensor{};  // (only the assertion above speaks)
    }

    // How many times f was traced (one per new signature).
    std::size_t trace_count() const {
        std::lock_guard lock(*mutex_);
        return traces_;
    }
    // Why each trace after the first happened: "argument 0: shape (32, 10) -> (8, 10)"; and why a spec's dynamic
    // dimensions could not be shared, where they could not.
    std::vector<std::string> retrace_reasons() const {
        std::lock_guard lock(*mutex_);
        return reasons_;
    }
    // Runs f directly instead of tracing (this function only).
    void run_eagerly(bool on) { eager_ = on; }

    // The wrapped callable and the options (kiln::save traces a copy of the function for the signature it saves).
    const F& callable() const noexcept { return f_; }
    const function_options& options() const noexcept { return options_; }
    // The prepared graph for the signature of `args` (traced now if it was not): what kiln::save writes.
    template <class... A>
    std::shared_ptr<const detail::executable> compiled(A&&... args) {
        return executable_for(std::forward<A>(args)...);
    }

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
    // The fused elementwise groups of that graph, and how many of them run a compiled kernel now (kiln::set_jit:
    // a group waiting for its kernel, or one that could not be compiled, runs interpreted).
    template <class... A>
    std::pair<std::size_t, std::size_t> compiled_groups(A&&... args) {
        const auto e = executable_for(std::forward<A>(args)...);
        std::size_t ready = 0;
        for (const detail::fused_group& g : e->groups)
            ready += g.jit && (g.jit->fn.load(std::memory_order_acquire) || g.jit->device_fn.load(std::memory_order_acquire));
        return {e->groups.size(), ready};
    }

    // Whether calls with the signature of `args` replay a captured CUDA graph (function_options::cuda_graphs), how
    // many did, and why they do not where they do not (empty while the capture is still to come).
    struct cuda_graph_info {
        bool captured = false;
        std::uint64_t replays = 0;
        std::string why;
    };
    template <class... A>
    cuda_graph_info cuda_graph_status(A&&... args) {
#if KILN_HAS_GPU
        const auto e = executable_for(std::forward<A>(args)...);
        const auto s = e->capture_status();
        return {s.captured, s.replays, s.why};
#else
        (void)executable_for(std::forward<A>(args)...);
        return {false, 0, "no GPU device in this build"};
#endif
    }

private:
    template <class... A>
    decltype(auto) call(A&&... args) {
        using R = detail::traced_result_t<std::invoke_result_t<F&, A&&...>>;
        // Debugging, nesting (a function called while another traces inlines into that trace), and gradient
        // tapes recording around the call (they must see the ops) run f itself.
        if (eager_ || functions_run_eagerly() || detail::active_tracer || detail::recording_tapes > 0) {
            if constexpr (std::is_void_v<R>) return std::invoke(f_, std::forward<A>(args)...);
            else return R(std::invoke(f_, std::forward<A>(args)...));
        }
        call_info info = describe_locked(args...);
        const std::shared_ptr<const detail::executable> exe = find_or_trace<R>(info, args...);
        if (exe->has_dynamic && info.extents.size() != exe->traced_extents.size())
            info = describe_locked(args...);  // reduce_retracing made extents dynamic during this call
        std::vector<tensor> outs = exe->run(info.tensors, info.extents);
        if constexpr (std::is_void_v<R>) return;
        else return detail::result_traits<R>::rebuild(outs);
    }

    struct call_info {
        std::vector<tensor> tensors;
        std::string key, concrete_key;            // the signature by the specs, and by the tensors themselves
        std::vector<std::string> concrete_parts;  // one per argument, for retrace reasons
        std::vector<std::ptrdiff_t> extents;      // of the dynamic dimensions, in order
        std::vector<std::pair<std::size_t, int>> dynamic;  // (tensor argument, axis) of each
    };

    template <class... A>
    std::shared_ptr<const detail::executable> executable_for(A&&... args) {
        // (graph(), report(), compiled() and kiln::save reach here without operator()'s check)
        static_assert(std::is_invocable_v<F&, A&&...>,
                      "kiln::function: the wrapped function cannot be called with these arguments; check their number "
                      "and types against its parameters (the first lines of this error's instantiation trace name them)");
        if constexpr (std::is_invocable_v<F&, A&&...>) {
            using R = detail::traced_result_t<std::invoke_result_t<F&, A&&...>>;
            call_info info = describe_locked(args...);
            return find_or_trace<R>(info, args...);
        } else {
            return nullptr;
        }
    }

    template <class... A>
    call_info describe_all(const A&... args) const {
        return describe_all_with(false, args...);
    }
    // (With reduce_retracing the specs change as calls come: they are read under the lock.)
    template <class... A>
    call_info describe_locked(const A&... args) const {
        if (!options_.reduce_retracing) return describe_all(args...);
        std::lock_guard lock(*mutex_);
        return describe_all(args...);
    }
    template <class... A>
    call_info describe_all_with(bool parts, const A&... args) const {
        call_info info;
        info.key.reserve(64);
        info.concrete_key.reserve(64);
        (describe(args, info, parts), ...);
        static_cast<void>(parts);  // (a function of no tensor arguments)
        // Dynamic extents that are equal in a call are one extent to its trace (a batch of inputs and labels):
        // which of them are equal is part of the signature.
        if (!info.extents.empty()) {
            info.key += "equal extents";
            for (std::size_t d = 0; d < info.extents.size(); ++d) {
                std::size_t first = d;
                for (std::size_t e = 0; e < d; ++e)
                    if (info.extents[e] == info.extents[d]) {
                        first = e;
                        break;
                    }
                append_bytes(info.key, static_cast<std::uint32_t>(first));
            }
        }
        if (has_specs_ && !auto_specs_ && info.tensors.size() != specs_.size())
            throw value_error(detail::error_prefix("value_error", options_.name) + "the function has " +
                              detail::count_of(specs_.size(), "spec") + " but was called with " +
                              detail::count_of(info.tensors.size(), "tensor argument"));
        if (!same_name_.empty() && !auto_specs_) check_named_extents(info);
        return info;
    }

    // Extents of one name are equal in a call.
    void check_named_extents(const call_info& info) const {
        for (std::size_t d = 0; d < info.extents.size() && d < same_name_.size(); ++d) {
            const std::size_t e = same_name_[d];
            if (e == d || info.extents[e] == info.extents[d]) continue;
            const auto [arg, axis] = info.dynamic[d];
            const auto [arg0, axis0] = info.dynamic[e];
            throw shape_error(detail::error_prefix("shape_error", options_.name) + "argument " + std::to_string(arg) + " has shape " +
                              to_string(info.tensors[arg].shape()) + ", whose axis " + std::to_string(axis) + " ('" +
                              specs_[arg].name_of(static_cast<std::size_t>(axis)) + "') is " + std::to_string(info.extents[d]) +
                              ", but axis " + std::to_string(axis0) + " of argument " + std::to_string(arg0) + " (shape " +
                              to_string(info.tensors[arg0].shape()) + "), of the same name, is " + std::to_string(info.extents[e]) +
                              " (extents of one name are equal in a call)");
        }
    }

    // The signature as bytes (what the cache looks up on every call: no text is made) and, when `parts` is set,
    // as text for retrace reasons (made only when tracing).
    template <class V>
    static void append_bytes(std::string& key, const V& v) {
        key.append(reinterpret_cast<const char*>(&v), sizeof v);
    }

    template <class A>
    void describe(const A& a, call_info& info, bool parts) const {
        if constexpr (detail::is_tensor_arg_v<A>) {
            describe_tensor(a, info, parts);
        } else if constexpr (detail::is_tensor_list_v<A>) {
            const std::uint32_t n = static_cast<std::uint32_t>(a.size());
            info.key += 'L';
            append_bytes(info.key, n);
            info.concrete_key += 'L';
            append_bytes(info.concrete_key, n);
            const std::size_t first = info.concrete_parts.size();
            for (const tensor& t : a) describe_tensor(t, info, parts);
            if (parts) {  // one part for the list, so that retrace reasons count arguments as the function has them
                std::string list = "a list of " + std::to_string(n) + " tensors (";
                for (std::size_t i = first; i < info.concrete_parts.size(); ++i)
                    list += (i > first ? "; " : "") + info.concrete_parts[i];
                info.concrete_parts.resize(first);
                info.concrete_parts.push_back(list + ")");
            }
        } else {
            std::string v = detail::static_key(a);
            info.key += 'V';
            info.key += v;
            info.key += '\0';
            info.concrete_key += 'V';
            info.concrete_key += v;
            info.concrete_key += '\0';
            if (parts) info.concrete_parts.push_back("value " + std::move(v));
        }
    }

    void describe_tensor(const tensor& t, call_info& info, bool parts) const {
        t.check_valid(options_.name.c_str());
        const std::size_t k = info.tensors.size();
        const kiln::device dev = t.device();
        const char head[4] = {'T', static_cast<char>(t.dtype()), static_cast<char>(dev.type), static_cast<char>(t.dim())};
        const std::size_t at = info.concrete_key.size();
        info.concrete_key.append(head, 4);
        append_bytes(info.concrete_key, dev.index);
        for (int i = 0; i < t.dim(); ++i) append_bytes(info.concrete_key, t.shape()[i]);
        bool use_spec = has_specs_ && k < specs_.size();
        if (use_spec && auto_specs_) {
            const spec& sp = specs_[k];
            bool fits = t.dtype() == sp.dtype && static_cast<std::size_t>(t.dim()) == sp.shape.size();
            for (int i = 0; fits && i < t.dim(); ++i)
                fits = sp.shape[static_cast<std::size_t>(i)] == dyn || sp.shape[static_cast<std::size_t>(i)] == t.shape()[i];
            use_spec = fits;  // a call the relaxed spec does not describe goes by its own shape
        }
        if (use_spec) {
            const spec& sp = specs_[k];
            if (t.dtype() != sp.dtype)
                throw dtype_error(detail::error_prefix("dtype_error", options_.name) + "argument " + std::to_string(k) +
                                  " is " + std::string(name(t.dtype())) + ", but its spec is " + kiln::to_string(sp));
            bool fits = static_cast<std::size_t>(t.dim()) == sp.shape.size();
            for (int i = 0; fits && i < t.dim(); ++i) fits = sp.shape[static_cast<std::size_t>(i)] == dyn || sp.shape[static_cast<std::size_t>(i)] == t.shape()[i];
            if (!fits)
                throw shape_error(detail::error_prefix("shape_error", options_.name) + "argument " + std::to_string(k) +
                                  " has shape " + to_string(t.shape()) + ", but its spec is " + kiln::to_string(sp));
            for (int i = 0; i < t.dim(); ++i)
                if (sp.shape[static_cast<std::size_t>(i)] == dyn) {
                    info.extents.push_back(t.shape()[i]);
                    info.dynamic.emplace_back(k, i);
                }
            // The spec fixes the dtype and the static extents: the device is what is left.
            const char sh[2] = {'S', static_cast<char>(dev.type)};
            info.key.append(sh, 2);
            append_bytes(info.key, dev.index);
        } else {
            info.key.append(info.concrete_key, at, std::string::npos);
        }
        info.tensors.push_back(t);
        if (parts)
            info.concrete_parts.push_back("shape " + to_string(t.shape()) + " " + std::string(name(t.dtype())) + " on " +
                                          to_string(dev));
    }

    // A traced argument: a symbolic tensor for a tensor argument, a list of them for a list, the value itself for a
    // static one.
    template <class A>
    static decltype(auto) traced_arg(A&& a, const std::vector<tensor>& symbols, std::size_t& k) {
        if constexpr (detail::is_tensor_arg_v<A>) {
            return tensor(symbols[k++]);
        } else if constexpr (detail::is_tensor_list_v<A>) {
            std::vector<tensor> list(symbols.begin() + static_cast<std::ptrdiff_t>(k),
                                     symbols.begin() + static_cast<std::ptrdiff_t>(k + a.size()));
            k += a.size();
            return list;
        } else {
            return std::forward<A>(a);
        }
    }

    // One trace of f with tensor arguments of these shapes.
    template <class R, class... A>
    function_graph trace(const call_info& info, const std::vector<dims>& shapes, A&&... args) {
        detail::tracer tr(options_.name);
        std::vector<tensor> symbols;
        for (std::size_t i = 0; i < info.tensors.size(); ++i)
            symbols.push_back(tr.argument(info.tensors[i].dtype(), shapes[i], static_cast<int>(i), info.tensors[i].device()));
        const detail::tracing_scope scope(&tr);
        std::size_t k = 0;
        auto call = [&](auto&&... ts) -> decltype(auto) { return std::invoke(f_, std::forward<decltype(ts)>(ts)...); };
        // (Braced initialization: the arguments are made in order. They are passed as lvalues, so that a parameter
        // taken by `kiln::tensor&`, which the call's own lvalue argument satisfied, binds to its symbolic tensor.)
        using tuple_t = std::tuple<decltype(traced_arg(std::forward<A>(args), symbols, k))...>;
        tuple_t traced_args{traced_arg(std::forward<A>(args), symbols, k)...};
        if constexpr (std::is_void_v<R>) {
            std::apply(call, traced_args);
            tr.set_outputs({});
        } else {
            R r = std::apply(call, traced_args);
            tr.set_outputs(detail::result_traits<R>::flatten(r));
        }
        return std::move(tr.graph);
    }

    std::shared_ptr<detail::executable> build(function_graph g) {
        detail::capture_constants(g);
        auto exe = std::make_shared<detail::executable>();
        exe->traced = g;
        exe->graph = std::move(g);
        if (options_.optimize) exe->report = passes::optimize(exe->graph);
        for (const graph_node& n : exe->graph.nodes) exe->has_dynamic = exe->has_dynamic || !n.dynamic.empty();
        exe->fusion = options_.fuse;
        exe->planning = options_.plan;
        exe->jit = options_.jit;
        exe->cuda_graphs = options_.cuda_graphs;
        exe->collect_variables();
        exe->prepare();
        return exe;
    }

    template <class R, class... A>
    std::shared_ptr<const detail::executable> find_or_trace(const call_info& info, A&&... args) {
        std::lock_guard lock(*mutex_);
        record_call(false);
        const std::string* key = &info.key;
        auto found = cache_.find(info.key);
        if (found != cache_.end() && !found->second) {  // the spec's dynamic dimensions are not shared: by extent
            key = &info.concrete_key;
            found = cache_.find(info.concrete_key);
        }
        std::string stale;
        if (found != cache_.end()) {
            if (!found->second->is_stale()) return found->second;
            stale = found->second->stale();
            drop_stale();  // a variable was rebound: every trace that read its old storage goes
        }
        const std::vector<std::string> parts = describe_all_with(true, args...).concrete_parts;
        if (traces_ > 0) reasons_.push_back(stale.empty() ? reason(parts) : stale);
        record_call(true);  // (after the reason: the warning names this call's)
        last_parts_ = parts;
        // reduce_retracing: extents that changed since the last trace become dynamic, and the call is described
        // again with them (it may then find a trace already made).
        call_info relaxed_info;
        const call_info* use = &info;
        if (options_.reduce_retracing && (!has_specs_ || auto_specs_) && !last_traced_.empty()) {
            std::vector<spec> next = has_specs_ ? specs_ : last_traced_;
            bool relaxed = false;
            std::string what;
            for (std::size_t k = 0; k < info.tensors.size() && k < next.size(); ++k) {
                const tensor& t = info.tensors[k];
                if (t.dtype() != next[k].dtype || static_cast<std::size_t>(t.dim()) != next[k].shape.size()) continue;
                for (int i = 0; i < t.dim(); ++i) {
                    std::ptrdiff_t& e = next[k].shape[static_cast<std::size_t>(i)];
                    if (e != dyn && e != t.shape()[i]) {
                        e = dyn;
                        relaxed = true;
                        what += (what.empty() ? "" : ", ") + ("argument " + std::to_string(k) + " dimension " + std::to_string(i));
                    }
                }
            }
            if (relaxed) {
                specs_ = std::move(next);
                has_specs_ = auto_specs_ = true;
                reasons_.back() += "; reduce_retracing makes " + what + " dynamic";
                relaxed_info = describe_all(args...);
                use = &relaxed_info;
                key = &relaxed_info.key;
                auto again = cache_.find(relaxed_info.key);
                if (again != cache_.end() && again->second && again->second->is_stale()) {
                    drop_stale();
                    again = cache_.end();
                }
                if (again != cache_.end()) {
                    if (again->second) return again->second;
                    key = &relaxed_info.concrete_key;  // not shareable: by extent
                }
            }
        }
        last_traced_.clear();
        for (const tensor& t : info.tensors)
            last_traced_.emplace_back(t.dtype(), std::vector<std::ptrdiff_t>(t.shape().d.begin(), t.shape().d.begin() + t.dim()));
        const call_info& info2 = *use;

        std::vector<dims> shapes;
        for (const tensor& t : info2.tensors) shapes.push_back(t.shape());
        function_graph g = trace<R>(info2, shapes, args...);
        ++traces_;
        std::shared_ptr<detail::executable> exe;
        if (!info2.extents.empty() && key == &info2.key) {
            // Trace again with other extents (2e + 1: equal extents stay equal, others stay apart) and keep what
            // follows them; then a third time (3e + 2), where every parameter marked dynamic must be on the line
            // the first two traces drew (two traces alone take 2e^2, say 18 and 98, for the line 20e - 42).
            std::vector<dims> other = shapes, third = shapes;
            std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> extents, extents3;
            for (std::size_t d = 0; d < info2.dynamic.size(); ++d) {
                const auto [arg, axis] = info2.dynamic[d];
                const std::ptrdiff_t e = info2.extents[d], e2 = 2 * e + 1, e3 = 3 * e + 2;
                other[arg][axis] = e2;
                third[arg][axis] = e3;
                extents.emplace_back(e, e2);
                extents3.emplace_back(e, e3);
            }
            std::string why;
            try {
                const function_graph h = trace<R>(info2, other, args...);
                why = detail::mark_dynamic(g, h, extents);
                if (why.empty()) why = detail::check_dynamic(g, trace<R>(info2, third, args...), extents3);
                // With extents of two or more values, one more trace per value that moves it alone (to a value no
                // other extent has, so that equal extents stay equal and distinct ones distinct).
                std::vector<std::ptrdiff_t> values(info2.extents.begin(), info2.extents.end());
                std::sort(values.begin(), values.end());
                values.erase(std::unique(values.begin(), values.end()), values.end());
                const std::ptrdiff_t top = values.empty() ? 0 : values.back();
                for (std::size_t v = 0; values.size() > 1 && v < values.size() && why.empty(); ++v) {
                    std::vector<dims> moved = shapes;
                    std::vector<std::ptrdiff_t> at(info2.extents.begin(), info2.extents.end());
                    for (std::size_t d = 0; d < info2.dynamic.size(); ++d) {
                        if (info2.extents[d] != values[v]) continue;
                        at[d] = 3 * top + 3 + static_cast<std::ptrdiff_t>(v);
                        moved[info2.dynamic[d].first][info2.dynamic[d].second] = at[d];
                    }
                    why = detail::check_predicted(g, trace<R>(info2, moved, args...), at);
                }
            } catch (const error& e) {
                why = std::string("tracing with other extents failed: ") + e.what();
            }
            if (why.empty()) {
                exe = build(std::move(g));
                exe->traced_extents = info2.extents;
                cache_.emplace(info2.key, exe);
                return exe;
            }
            for (graph_node& n : g.nodes) n.dynamic.clear();
            reasons_.push_back("the spec's dynamic dimensions cannot share one trace (" + why + "): one trace per extent");
            cache_.emplace(info2.key, nullptr);
            key = &info2.concrete_key;
        }
        exe = build(std::move(g));
        cache_.emplace(*key, exe);
        return exe;
    }

    // Forgets every trace that reads a storage a variable has left (kept: the null entries that say a spec's
    // dynamic dimensions cannot share a trace).
    void drop_stale() {
        for (auto it = cache_.begin(); it != cache_.end();) {
            if (it->second && it->second->is_stale()) it = cache_.erase(it);
            else ++it;
        }
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
                                    "); tensors of new shapes or new static argument values trace again (declare "
                                    "changing extents dynamic with kiln::spec and kiln::dyn)";
            if (options_.on_warning) options_.on_warning(msg);
            else std::fprintf(stderr, "%s\n", msg.c_str());
        }
    }

    F f_;
    function_options options_;
    std::vector<spec> specs_;
    bool has_specs_ = false;
    bool auto_specs_ = false;         // specs_ made by reduce_retracing: a call that does not fit one is not an error
    // detail::dim_name_groups of the specs: a call's extents of one name must be equal (empty: no names).
    std::vector<std::uint32_t> same_name_;
    std::vector<spec> last_traced_;   // the tensor arguments of the last trace (reduce_retracing)
    bool eager_ = false;
    std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // (a pointer: functions move)
    // A null entry: the spec's dynamic dimensions could not share a trace, so its signatures go by extent.
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
template <class F>
function(F, spec_list) -> function<F>;
template <class F>
function(F, spec_list, function_options) -> function<F>;

}  // namespace kiln
