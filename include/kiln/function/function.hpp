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
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "graph.hpp"
#include "passes.hpp"

namespace kiln {

namespace detail {

inline std::atomic<bool> functions_run_eagerly{false};

// What a symbolic tensor kept past the end of its trace answers to: every use is a trace_error.
struct finished_trace final : tracer_base {
    tensor record(std::string_view op, std::string, std::span<const tensor>, replay_fn, op_params) override { refuse(op); }
    void record_effect(std::string_view op, std::string, std::span<const tensor>, effect_fn, std::size_t, op_params) override {
        refuse(op);
    }
    [[noreturn]] void refuse(std::string_view what) const override {
        throw trace_error(error_prefix("trace_error", what) + "the tensor is a symbolic tensor kept from inside a traced "
                          "function after its trace ended; it has no values (return it from the function instead)");
    }
    static finished_trace& instance() {
        static finished_trace t;
        return t;
    }
};

// Records one trace: the nodes of its graph, and the values of the tensors it has seen.
class tracer final : public tracer_base {
public:
    explicit tracer(std::string function_name, tracer* parent = nullptr)
        : name_(std::move(function_name)), first_id_(next_tensor_id()), parent_(parent) {}

    const std::string& name() const noexcept { return name_; }
    // A sub-trace's arguments after its own: the enclosing traces' values it uses.
    const std::vector<tensor>& captures() const noexcept { return captures_; }
    void set_first_capture(int position) noexcept { next_capture_ = position; }
    tracer(const tracer&) = delete;
    tracer& operator=(const tracer&) = delete;
    ~tracer() override {
        for (const std::weak_ptr<storage>& w : made_)
            if (const std::shared_ptr<storage> s = w.lock()) s->trace_owner = &finished_trace::instance();
    }

    function_graph graph;

    tensor argument(kiln::dtype d, const dims& shape, int position) {
        graph_node n;
        n.kind = node_kind::argument;
        n.argument = position;
        n.dtype = d;
        n.shape = shape;
        return add(std::move(n));
    }

    // The value a tensor seen by the function stands for: a symbolic tensor of this trace, or a captured one.
    std::int32_t value_of(const tensor& t, std::string_view op) {
        t.check_valid(std::string(op).c_str());
        const storage& s = *t.storage_handle();
        if (s.trace_owner && s.trace_owner != this) {
            // A value of an enclosing trace (a while_loop's body using the function's tensors): an argument here.
            for (tracer* p = parent_; p; p = p->parent_)
                if (p == s.trace_owner) {
                    const auto found = captured_symbols_.find(&s);
                    if (found != captured_symbols_.end()) return found->second;
                    if (!(t.offset() == 0 && t.strides() == contiguous_strides(t.shape())))
                        throw trace_error(error_prefix("trace_error", op) + "a view of an enclosing trace's value was made "
                                          "without the tracer seeing it");
                    const tensor a = argument(t.dtype(), t.shape(), next_capture_++);
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

    tensor record(std::string_view op, std::string attrs, std::span<const tensor> inputs, replay_fn fn,
                  op_params params) override {
        graph_node n;
        n.kind = node_kind::op;
        n.op = std::string(op);
        n.attrs = std::move(attrs);
        n.params = std::move(params);
        for (const tensor& t : inputs) n.inputs.push_back(value_of(t, op));
        // The result's dtype and shape, with the errors eager mode gives: the op itself on placeholders (one
        // element broadcast by stride 0, so inputs take no memory) with nothing recording.
        const tensor y = passes::detail::untraced([&] {
            std::vector<tensor> ph;
            for (std::int32_t v : n.inputs) ph.push_back(placeholder(v));
            return fn(ph, n.params.values);
        });
        n.dtype = y.dtype();
        n.shape = y.shape();
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
    std::vector<std::weak_ptr<storage>> made_;
    tracer* parent_ = nullptr;
    std::vector<tensor> captures_;
    std::map<const storage*, std::int32_t> captured_symbols_;
    int next_capture_ = 0;
};

// Sets the thread's tracer for a scope.
struct tracing_scope {
    tracer_base* saved = active_tracer;
    explicit tracing_scope(tracer_base* t) noexcept { active_tracer = t; }
    ~tracing_scope() { active_tracer = saved; }
    tracing_scope(const tracing_scope&) = delete;
    tracing_scope& operator=(const tracing_scope&) = delete;
};

// A chain of elementwise ops that runs tile by tile: each tile of every member is computed before the next tile,
// so values used only inside the group never exist beyond one tile (which stays in L1).
struct fused_group {
    struct operand {
        enum kind_t : std::uint8_t { member, full, periodic } kind;
        std::int32_t index;           // member: its position in the group; otherwise the value
        std::ptrdiff_t period = 0;    // periodic: its element count (it repeats along the group's elements)
    };
    std::vector<std::int32_t> members;        // node indices, in program order
    std::vector<std::vector<operand>> inputs; // per member
    std::vector<char> exported;               // per member: its value is used after the group
    kiln::dtype dtype = kiln::float32;
    int rank = 0;
    std::ptrdiff_t tile = 1024;  // elements per tile: a multiple of every periodic operand's period
    bool periodic = false;       // some operand repeats along the group
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

    std::vector<fused_group> groups;

    // Groups consecutive elementwise ops (arguments, constants, variables and pure ops that need nothing of the
    // group may sit between them) of one floating dtype and one shape whose other operands are values of that shape, or repeat along it (a bias, a
    // number): each op's tile kernel then runs tile by tile.
    void fuse() {
        groups.clear();
        const std::vector<char> written = passes::detail::written_values(graph);
        std::vector<std::int32_t> used_after(graph.nodes.size(), -1);  // the last node that uses each value
        for (std::size_t i = 0; i < graph.nodes.size(); ++i)
            for (std::int32_t in : graph.nodes[i].inputs) used_after[static_cast<std::size_t>(in)] = static_cast<std::int32_t>(i);
        for (std::int32_t o : graph.outputs) used_after[static_cast<std::size_t>(o)] = std::numeric_limits<std::int32_t>::max();
        fused_group cur;
        dims shape;
        auto close = [&] {
            bool has_full = false;
            for (const auto& ins : cur.inputs)
                for (const auto& op : ins) has_full = has_full || op.kind == fused_group::operand::full;
            if (cur.members.size() >= 2 && has_full) {
                const int id = static_cast<int>(groups.size());
                const std::int32_t last = cur.members.back();
                std::vector<char> inside(graph.nodes.size(), 0);
                for (std::int32_t m : cur.members) inside[static_cast<std::size_t>(m)] = 1;
                for (std::int32_t m : cur.members) {
                    graph.nodes[static_cast<std::size_t>(m)].group = id;
                    bool out = used_after[static_cast<std::size_t>(m)] > last;
                    for (std::size_t j = 0; !out && j < graph.nodes.size(); ++j)
                        if (!inside[j])
                            for (std::int32_t in : graph.nodes[j].inputs) out = out || in == m;
                    cur.exported.push_back(out);
                }
                groups.push_back(std::move(cur));
            }
            cur = fused_group{};
        };
        auto position = [&](std::int32_t v) {
            for (std::size_t j = 0; j < cur.members.size(); ++j)
                if (cur.members[j] == v) return static_cast<std::int32_t>(j);
            return std::int32_t{-1};
        };
        for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
            const graph_node& n = graph.nodes[i];
            if (n.kind == node_kind::argument || n.kind == node_kind::constant || n.kind == node_kind::variable) continue;
            const bool candidate = n.kind == node_kind::op && n.params.tile && !written[i] && n.dynamic.empty();
            if (!candidate) {
                // A pure op that needs nothing of the group (a view of an operand) runs at its place, before the
                // group, which runs at its last op: it does not end the group.
                bool touches = false;
                for (std::int32_t v : n.inputs) touches = touches || position(v) >= 0;
                if (n.kind == node_kind::op && !touches && !cur.members.empty()) continue;
                close();
                continue;
            }
            if (!cur.members.empty() && (!(n.shape == shape) || n.dtype != cur.dtype)) close();
            // Adds node i to the group if its operands fit (false leaves the group as it was).
            auto try_add = [&]() {
                if (cur.members.empty()) {
                    shape = n.shape;
                    cur.dtype = n.dtype;
                    cur.rank = n.shape.rank;
                }
                std::vector<fused_group::operand> ins;
                std::ptrdiff_t tile = cur.tile;
                for (std::int32_t v : n.inputs) {
                    const std::int32_t at = position(v);
                    if (at >= 0) {
                        ins.push_back({fused_group::operand::member, at});
                        continue;
                    }
                    // (A value that an effect writes later is read here before that effect: no effect runs
                    // between a group's ops.)
                    const graph_node& x = graph.nodes[static_cast<std::size_t>(v)];
                    if (x.dtype != cur.dtype) return false;
                    if (x.shape == shape) {
                        ins.push_back({fused_group::operand::full, v});
                        continue;
                    }
                    // Repeats along the group: its shape is the group's trailing extents (leading ones of size 1).
                    bool periodic = x.shape.rank <= shape.rank;
                    for (int d = 0; periodic && d < x.shape.rank; ++d) {
                        const int e = shape.rank - x.shape.rank + d;
                        bool lead = true;
                        for (int q = 0; q < d; ++q) lead = lead && x.shape[q] == 1;
                        periodic = x.shape[d] == shape[e] || (lead && x.shape[d] == 1);
                    }
                    const std::ptrdiff_t period = x.shape.size();
                    if (!periodic || period == 0 || period > 4096) return false;
                    // The tile: about 1,024 elements, a multiple of every period.
                    if (tile % period != 0) {
                        const std::ptrdiff_t base = tile == 1024 && !cur.periodic ? period * ((1024 + period - 1) / period)
                                                                                  : tile / std::gcd(tile, period) * period;
                        if (base > 8192) return false;
                        tile = base;
                    }
                    ins.push_back({fused_group::operand::periodic, v, period});
                }
                for (const auto& op : ins) cur.periodic = cur.periodic || op.kind == fused_group::operand::periodic;
                cur.tile = tile;
                cur.members.push_back(static_cast<std::int32_t>(i));
                cur.inputs.push_back(std::move(ins));
                return true;
            };
            if (!try_add()) {
                close();
                try_add();  // the first op of a new group, its operands all from outside
            }
        }
        close();
    }

    bool fusion = true;

    void prepare() {
        if (fusion) fuse();
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

    // The extents of the spec's dynamic dimensions as traced; the parameters bound for other extents.
    std::vector<std::ptrdiff_t> traced_extents;
    bool has_dynamic = false;
    mutable std::mutex bind_mutex;
    mutable std::map<std::vector<std::ptrdiff_t>, std::shared_ptr<const std::vector<std::vector<std::int64_t>>>> bound;

    // The parameters of every node for these extents (null: the traced ones).
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> bind(const std::vector<std::ptrdiff_t>& extents) const {
        if (!has_dynamic || extents == traced_extents) return nullptr;
        if (extents.size() != traced_extents.size())
            throw value_error(error_prefix("value_error", "function") + "internal: " + std::to_string(extents.size()) +
                              " dynamic extents for a graph traced with " + std::to_string(traced_extents.size()));
        std::lock_guard lock(bind_mutex);
        auto found = bound.find(extents);
        if (found != bound.end()) return found->second;
        auto p = std::make_shared<std::vector<std::vector<std::int64_t>>>(graph.nodes.size());
        for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
            const graph_node& node = graph.nodes[i];
            if (node.dynamic.empty()) continue;
            std::vector<std::int64_t>& v = (*p)[i] = node.params.values;
            for (const dynamic_param& d : node.dynamic) {
                const std::int64_t value = d.scale * static_cast<std::int64_t>(extents[static_cast<std::size_t>(d.dim)]) + d.offset;
                if (node.params.float_params >> d.index & 1) {
                    const double x = static_cast<double>(value);
                    std::memcpy(&v[d.index], &x, sizeof x);
                } else {
                    v[d.index] = value;
                }
            }
        }
        return bound.emplace(extents, std::move(p)).first->second;
    }

    // One fused group: its shape comes from a full operand (dynamic extents included); operands that are not
    // contiguous are copied first; a call whose operands do not fit the group's pattern runs its ops one by one.
    void run_group(const fused_group& g, std::vector<std::optional<tensor>>& slots,
                   const std::shared_ptr<const std::vector<std::vector<std::int64_t>>>& params) const {
        const std::size_t m = g.members.size();
        auto params_of = [&](std::int32_t node) -> const std::int64_t* {
            if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)].data();
            return graph.nodes[static_cast<std::size_t>(node)].params.values.data();
        };
        dims shape;
        bool have = false, fits = true;
        for (const auto& ins : g.inputs)
            for (const auto& op : ins)
                if (op.kind == fused_group::operand::full) {
                    const tensor& t = *slots[static_cast<std::size_t>(op.index)];
                    if (!have) shape = t.shape(), have = true;
                    fits = fits && t.shape() == shape && t.dtype() == g.dtype;
                }
        for (const auto& ins : g.inputs)
            for (const auto& op : ins)
                if (op.kind == fused_group::operand::periodic) {
                    const tensor& t = *slots[static_cast<std::size_t>(op.index)];
                    fits = fits && t.numel() == op.period && t.dtype() == g.dtype && t.dim() <= shape.rank;
                    for (int d = 0; fits && d < t.dim(); ++d)
                        fits = t.shape()[d] == shape[shape.rank - t.dim() + d] || t.shape()[d] == 1;
                }
        bool narrow = m <= 64;
        for (const auto& ins : g.inputs) narrow = narrow && ins.size() <= 8;
        if (!fits || !narrow || shape.rank != g.rank) {
            // One by one, as without fusion.
            std::vector<tensor> in;
            for (std::int32_t node : g.members) {
                const graph_node& nd = graph.nodes[static_cast<std::size_t>(node)];
                in.clear();
                for (std::int32_t v : nd.inputs) in.push_back(*slots[static_cast<std::size_t>(v)]);
                const std::int64_t* p = params_of(node);
                slots[static_cast<std::size_t>(node)] = nd.fn(in, std::span<const std::int64_t>(p, nd.params.values.size()));
            }
            return;
        }
        const std::ptrdiff_t total = shape.size(), L = g.tile;
        const std::size_t item = size_of(g.dtype);
        // This thread's buffers, kept from call to call (a replay allocates them once).
        struct setup {
            std::vector<tensor> keep;                // contiguous copies of strided operands
            std::vector<const std::byte*> base;      // per operand of each member, in order
            std::vector<std::byte> repeated;         // periodic operands laid out over one tile each
            std::vector<std::byte*> outs;
        };
        thread_local setup su;
        su.keep.clear();
        su.base.clear();
        su.outs.assign(m, nullptr);
        std::size_t periodic = 0;
        for (const auto& ins : g.inputs)
            for (const auto& op : ins) periodic += op.kind == fused_group::operand::periodic;
        su.repeated.resize(periodic * static_cast<std::size_t>(L) * item);
        std::size_t next_repeated = 0;
        for (std::size_t j = 0; j < m; ++j) {
            for (const auto& op : g.inputs[j]) {
                const std::byte* b = nullptr;
                if (op.kind != fused_group::operand::member) {
                    const tensor* t = &*slots[static_cast<std::size_t>(op.index)];
                    if (!t->is_contiguous()) {
                        su.keep.push_back(t->clone());
                        t = &su.keep.back();
                    }
                    b = static_cast<const std::byte*>(t->raw_data());
                    if (op.kind == fused_group::operand::periodic) {
                        std::byte* r = su.repeated.data() + next_repeated++ * static_cast<std::size_t>(L) * item;
                        // One period, then the filled part doubled (L is a multiple of the period).
                        const std::size_t bytes = static_cast<std::size_t>(L) * item;
                        std::size_t done = static_cast<std::size_t>(op.period) * item;
                        std::memcpy(r, b, done);
                        while (done < bytes) {
                            const std::size_t step = std::min(done, bytes - done);
                            std::memcpy(r + done, r, step);
                            done += step;
                        }
                        b = r;
                    }
                }
                su.base.push_back(b);
            }
            if (g.exported[j]) {
                slots[static_cast<std::size_t>(g.members[j])] = tensor(g.dtype, shape);
                su.outs[j] = static_cast<std::byte*>(slots[static_cast<std::size_t>(g.members[j])]->raw_data());
            }
        }
        const std::vector<std::byte*>& outs = su.outs;
        const std::vector<const std::byte*>& su_base = su.base;  // (the caller's: pool threads read it)
        // Where each member's operands start in `base`.
        std::size_t first_operand[64];
        for (std::size_t j = 0, at = 0; j < m; at += g.inputs[j].size(), ++j) first_operand[j] = at;
        auto tiles = [&](std::ptrdiff_t first, std::ptrdiff_t last) {
            thread_local std::vector<std::byte> scratch;
            scratch.resize(m * static_cast<std::size_t>(L) * item);
            const void* ptrs[8];
            for (std::ptrdiff_t at = first; at < last; at += L) {
                const std::ptrdiff_t len = std::min(L, last - at);
                const std::size_t off = static_cast<std::size_t>(at) * item;
                auto value_ptr = [&](std::size_t j) -> std::byte* {
                    return g.exported[j] ? outs[j] + off : scratch.data() + j * static_cast<std::size_t>(L) * item;
                };
                for (std::size_t j = 0; j < m; ++j) {
                    const std::size_t b0 = first_operand[j];
                    for (std::size_t k = 0; k < g.inputs[j].size(); ++k) {
                        const auto& op = g.inputs[j][k];
                        if (op.kind == fused_group::operand::member) ptrs[k] = value_ptr(static_cast<std::size_t>(op.index));
                        else if (op.kind == fused_group::operand::full) ptrs[k] = su_base[b0 + k] + off;
                        else ptrs[k] = su_base[b0 + k];  // one tile of the repeated operand, aligned with the tile
                    }
                    const std::int32_t node = g.members[j];
                    graph.nodes[static_cast<std::size_t>(node)].params.tile(ptrs, value_ptr(j), len, params_of(node));
                }
            }
        };
        const std::ptrdiff_t count = (total + L - 1) / L;
        // (The thread count only past the threshold: asking for it starts the pool, whose workers then compete
        // with this thread on small steps.)
        const int threads = total < parallel_threshold() || count < 2 ? 1 : num_threads();
        if (threads <= 1) {
            tiles(0, total);
        } else {
            const int tasks = static_cast<int>(std::min<std::ptrdiff_t>(threads, count));
            thread_pool::instance().parallel_for(tasks, [&](int t) {
                const std::ptrdiff_t a = count * t / tasks * L, b = std::min(total, count * (t + 1) / tasks * L);
                tiles(a, b);
            });
        }
    }

    std::vector<tensor> run(std::span<const tensor> args, const std::vector<std::ptrdiff_t>& extents = {}) const {
        const std::size_t n = graph.nodes.size();
        const auto params = bind(extents);
        // (Optional: an empty slot costs nothing to make, a default tensor an id and a reference count.)
        std::vector<std::optional<tensor>> slots(n);
        std::vector<tensor> in;
        in.reserve(8);
        std::int32_t deferred_from = -1;  // releases inside a group wait for the group, which runs at its last op
        for (std::size_t i = 0; i < n; ++i) {
            const graph_node& node = graph.nodes[i];
            if (node.group >= 0) {
                const fused_group& g = groups[static_cast<std::size_t>(node.group)];
                if (deferred_from < 0) deferred_from = static_cast<std::int32_t>(i);
                if (static_cast<std::int32_t>(i) != g.members.back()) continue;
                run_group(g, slots, params);
                for (std::size_t j = static_cast<std::size_t>(deferred_from); j <= i; ++j)
                    for (std::int32_t k = release_start[j]; k < release_start[j + 1]; ++k)
                        slots[static_cast<std::size_t>(release[static_cast<std::size_t>(k)])].reset();
                deferred_from = -1;
                continue;
            }
            switch (node.kind) {
                case node_kind::argument: slots[i] = args[static_cast<std::size_t>(node.argument)]; break;
                case node_kind::constant:
                case node_kind::variable: slots[i] = node.value; break;
                case node_kind::op:
                case node_kind::effect:
                    in.clear();
                    for (std::int32_t v : node.inputs) in.push_back(*slots[static_cast<std::size_t>(v)]);
                    const std::span<const std::int64_t> p =
                        params && !(*params)[i].empty() ? std::span<const std::int64_t>((*params)[i]) : node.params.values;
                    if (node.kind == node_kind::op) slots[i] = node.fn(in, p);
                    else node.effect(in, p);
                    break;
            }
            if (deferred_from >= 0) continue;  // (a free node between a group's ops)
            for (std::int32_t k = release_start[i]; k < release_start[i + 1]; ++k)
                slots[static_cast<std::size_t>(release[static_cast<std::size_t>(k)])].reset();
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
            const tensor& r = *slots[static_cast<std::size_t>(o)];
            out.push_back(copy ? r.clone() : r);
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
    bool fuse = true;               // run chains of elementwise ops tile by tile (fused groups)
    // TensorFlow's reduce_retracing: an extent of a tensor argument that changes between traces becomes dynamic
    // (as if declared kiln::dyn in a spec), so the next trace serves every extent of it.
    bool reduce_retracing = false;
    // Called with a warning when each of the last 5 calls traced (stderr when empty).
    std::function<void(const std::string&)> on_warning = nullptr;
};

namespace detail {

inline tensor select_result(const tensor& p, const tensor& a, const tensor& b) {
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
    for (std::size_t k = 0; k < state.size(); ++k) args.push_back(tr.argument(state[k].dtype(), state[k].shape(), static_cast<int>(k)));
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
    capture_constants(g);
    part.exe->traced = g;
    part.exe->graph = std::move(g);
    part.exe->report = passes::optimize(part.exe->graph);
    part.exe->prepare();
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

// The declared dtype and shape of a tensor argument: kiln::spec(kiln::float32, {kiln::dyn, 10}). A kiln::dyn
// extent is dynamic: one trace serves every extent of it.
struct spec {
    kiln::dtype dtype = kiln::float32;
    std::vector<std::ptrdiff_t> shape;
    spec(kiln::dtype d, std::vector<std::ptrdiff_t> s) : dtype(d), shape(std::move(s)) {}
};

inline std::string to_string(const spec& s) {
    std::string out = "(";
    for (std::size_t i = 0; i < s.shape.size(); ++i) {
        if (i) out += ", ";
        out += s.shape[i] == dyn ? std::string("?") : std::to_string(s.shape[i]);
    }
    if (s.shape.size() == 1) out += ",";
    return out + ") " + std::string(name(s.dtype));
}

namespace detail {

// Two traces of one function, made with different extents of its dynamic dimensions (`a` and `b` per dimension),
// compared node by node. Where they agree except for parameters that follow an extent linearly (a reshape's
// target, a mean's count, a fill's shape), those parameters are marked in `g` as dynamic and the answer is empty;
// otherwise it says where the traces part.
inline std::string mark_dynamic(function_graph& g, const function_graph& h,
                                const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& extents) {
    auto where = [&](std::size_t i) {
        const graph_node& n = g.nodes[i];
        return "node %" + std::to_string(i) + " (" + (n.op.empty() ? std::string(name(n.kind)) : "'" + n.op + "'") + ")";
    };
    if (g.nodes.size() != h.nodes.size())
        return "the traces have " + std::to_string(g.nodes.size()) + " and " + std::to_string(h.nodes.size()) + " nodes";
    for (std::size_t i = 0; i < g.nodes.size(); ++i) {
        graph_node& x = g.nodes[i];
        const graph_node& y = h.nodes[i];
        if (x.kind != y.kind || x.op != y.op || x.inputs != y.inputs || x.writes != y.writes || x.argument != y.argument ||
            x.dtype != y.dtype || x.shape.rank != y.shape.rank)
            return where(i) + " is a different op in the two traces";
        if ((x.kind == node_kind::constant || x.kind == node_kind::variable) &&
            (x.value.storage_handle() != y.value.storage_handle() || !(x.value.shape() == y.value.shape())))
            return where(i) + " captures a tensor that the code made from the extent (make it inside the traced ops, "
                              "for example with kiln::full)";
        if (x.params.values.size() != y.params.values.size() || x.params.float_params != y.params.float_params)
            return where(i) + " has different parameters";
        if (x.params.values == y.params.values) {
            if (x.attrs != y.attrs) return where(i) + " has different attributes (" + x.attrs + " and " + y.attrs + ")";
            continue;
        }
        for (std::size_t j = 0; j < x.params.values.size(); ++j) {
            if (x.params.values[j] == y.params.values[j]) continue;
            if (x.params.opaque >> j & 1) return where(i) + " holds a part of the program that depends on the extent";
            const bool is_float = x.params.float_params >> j & 1;
            const double va = is_float ? param_number(x.params.values[j]) : static_cast<double>(x.params.values[j]);
            const double vb = is_float ? param_number(y.params.values[j]) : static_cast<double>(y.params.values[j]);
            bool found = false;
            for (std::size_t k = 0; k < extents.size() && !found; ++k) {
                const double ea = static_cast<double>(extents[k].first), eb = static_cast<double>(extents[k].second);
                const double scale = (vb - va) / (eb - ea), offset = va - scale * ea;
                if (std::isfinite(scale) && scale == std::round(scale) && offset == std::round(offset) &&
                    std::abs(scale) < 9e15 && std::abs(offset) < 9e15) {
                    x.dynamic.push_back({static_cast<std::uint32_t>(j), static_cast<int>(k),
                                         static_cast<std::int64_t>(scale), static_cast<std::int64_t>(offset)});
                    found = true;
                }
            }
            if (!found) {
                char buf[96];
                std::snprintf(buf, sizeof buf, "%.17g and %.17g", va, vb);
                return where(i) + " has a parameter (" + buf + " in the two traces) that does not follow a dynamic "
                                  "extent";
            }
        }
    }
    if (g.outputs != h.outputs) return "the results are different values in the two traces";
    return {};
}

}  // namespace detail

// A traced function: f with tensor arguments (and static ones: numbers, bools, enums, strings) and a tensor, a
// std::tuple or std::vector of tensors, or nothing as its result.
template <class F>
class function {
public:
    explicit function(F f, function_options options = {}) : f_(std::move(f)), options_(std::move(options)) {}
    // With a spec for each tensor argument: calls are checked against it, and its kiln::dyn extents are dynamic.
    function(F f, std::vector<spec> specs, function_options options = {})
        : f_(std::move(f)), options_(std::move(options)), specs_(std::move(specs)), has_specs_(true) {}

    template <class... A>
    decltype(auto) operator()(A&&... args) {
        using R = std::invoke_result_t<F&, A&&...>;
        // Debugging, nesting (a function called while another traces inlines into that trace), and gradient
        // tapes recording around the call (they must see the ops) run f itself.
        if (eager_ || functions_run_eagerly() || detail::active_tracer || detail::recording_tapes > 0)
            return std::invoke(f_, std::forward<A>(args)...);
        call_info info = describe_locked(args...);
        const std::shared_ptr<const detail::executable> exe = find_or_trace<R>(info, args...);
        if (exe->has_dynamic && info.extents.size() != exe->traced_extents.size())
            info = describe_locked(args...);  // reduce_retracing made extents dynamic during this call
        std::vector<tensor> outs = exe->run(info.tensors, info.extents);
        if constexpr (std::is_void_v<R>) return;
        else return detail::result_traits<R>::rebuild(outs);
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
    struct call_info {
        std::vector<tensor> tensors;
        std::string key, concrete_key;            // the signature by the specs, and by the tensors themselves
        std::vector<std::string> concrete_parts;  // one per argument, for retrace reasons
        std::vector<std::ptrdiff_t> extents;      // of the dynamic dimensions, in order
        std::vector<std::pair<std::size_t, int>> dynamic;  // (tensor argument, axis) of each
    };

    template <class... A>
    std::shared_ptr<const detail::executable> executable_for(A&&... args) {
        using R = std::invoke_result_t<F&, A&&...>;
        call_info info = describe_locked(args...);
        return find_or_trace<R>(info, args...);
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
                              std::to_string(specs_.size()) + " specs but was called with " +
                              std::to_string(info.tensors.size()) + " tensor arguments");
        return info;
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
            const tensor& t = a;
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

    // A traced argument: a symbolic tensor for a tensor argument, the value itself for a static one.
    template <class A>
    static decltype(auto) traced_arg(A&& a, const std::vector<tensor>& symbols, std::size_t& k) {
        if constexpr (detail::is_tensor_arg_v<A>) return tensor(symbols[k++]);
        else return std::forward<A>(a);
    }

    // One trace of f with tensor arguments of these shapes.
    template <class R, class... A>
    function_graph trace(const call_info& info, const std::vector<dims>& shapes, A&&... args) {
        detail::tracer tr(options_.name);
        std::vector<tensor> symbols;
        for (std::size_t i = 0; i < info.tensors.size(); ++i)
            symbols.push_back(tr.argument(info.tensors[i].dtype(), shapes[i], static_cast<int>(i)));
        const detail::tracing_scope scope(&tr);
        std::size_t k = 0;
        auto call = [&](auto&&... ts) -> decltype(auto) { return std::invoke(f_, std::forward<decltype(ts)>(ts)...); };
        // (Braced initialization: the arguments are made in order.)
        using tuple_t = std::tuple<decltype(traced_arg(std::forward<A>(args), symbols, k))...>;
        if constexpr (std::is_void_v<R>) {
            std::apply(call, tuple_t{traced_arg(std::forward<A>(args), symbols, k)...});
            tr.set_outputs({});
        } else {
            R r = std::apply(call, tuple_t{traced_arg(std::forward<A>(args), symbols, k)...});
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
        if (found != cache_.end()) return found->second;
        record_call(true);
        const std::vector<std::string> parts = describe_all_with(true, args...).concrete_parts;
        if (traces_ > 0) reasons_.push_back(reason(parts));
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
            // follows them.
            std::vector<dims> other = shapes;
            std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> extents;
            for (std::size_t d = 0; d < info2.dynamic.size(); ++d) {
                const auto [arg, axis] = info2.dynamic[d];
                const std::ptrdiff_t e = info2.extents[d], e2 = 2 * e + 1;
                other[arg][axis] = e2;
                extents.emplace_back(e, e2);
            }
            std::string why;
            try {
                const function_graph h = trace<R>(info2, other, args...);
                why = detail::mark_dynamic(g, h, extents);
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
function(F, std::vector<spec>) -> function<F>;
template <class F>
function(F, std::vector<spec>, function_options) -> function<F>;

}  // namespace kiln
