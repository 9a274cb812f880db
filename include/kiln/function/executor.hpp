#pragma once
// Function mode's executor: a function_graph prepared once per signature (liveness, fused elementwise groups,
// dynamic extents) and run for each call.
#include "plan_build.hpp"
#include "captured_call.hpp"
#include "fused_group.hpp"
#include "jit.hpp"
#include "plan_run.hpp"
#include "tracer.hpp"

namespace kiln {

namespace detail {

// A graph ready to run: the optimized graph and, for each node, the values that die after it.
// (A class template on an unused int: its member functions compile only in the programs that run a function.)
template <int = 0>
struct basic_executable {
    function_graph traced;     // as traced, before the passes
    function_graph graph;      // after them
    passes::pass_report report;
    std::vector<std::int32_t> release_start;  // release[release_start[i] .. release_start[i + 1]) die after node i
    std::vector<std::int32_t> release;
    // Whether result k was, as traced, an argument or a variable itself (returned as it is, as eager mode does);
    // a result that the passes turned into one (x * 1 is x) is the caller's own copy.
    std::vector<char> result_aliases;
    // Whether `traced` is the graph as traced in this program; a loaded function's is the file's graph, after the
    // passes, so its results that share storage are given apart.
    bool traced_here = true;

    std::vector<fused_group> groups;

    // The storages of the variables the trace reads (kiln::variable, layer parameters, optimizer slots, captured
    // tensors it writes into), with the dtype and shape it read them as.
    struct captured_variable {
        std::shared_ptr<storage> where;
        kiln::dtype dtype;
        dims shape;
        std::int32_t node;
        bool inside = false;  // read by the effect at `node` (a while_loop's sub-graph), not a node itself
    };
    std::vector<captured_variable> variables;
    void collect_variables() {
        variables.clear();
        for (std::size_t i = 0; i < traced.nodes.size(); ++i) {
            const graph_node& n = traced.nodes[i];
            const auto at = static_cast<std::int32_t>(i);
            if (n.kind == node_kind::variable && n.value.storage_handle())
                variables.push_back({n.value.storage_handle(), n.dtype, n.shape, at});
            if (n.kind == node_kind::effect)
                for (const op_params::read_variable& r : n.params.reads) variables.push_back({r.where, r.dtype, r.shape, at, true});
        }
    }
    // Whether a variable the trace reads has left its storage (a few loads per call).
    bool is_stale() const noexcept {
        for (const captured_variable& v : variables)
            if (v.where->rebound.load(std::memory_order_acquire)) return true;
        return false;
    }
    // Empty while every variable the trace reads still holds its storage; otherwise why the trace is stale:
    // "variable %3: shape (3,) float32 -> (4,) float32 (the variable was assigned a new tensor)".
    std::string stale() const {
        for (const captured_variable& v : variables)
            if (v.where->rebound.load(std::memory_order_acquire)) {
                std::string what = (v.inside ? "a variable read by " + traced.nodes[static_cast<std::size_t>(v.node)].op + " %"
                                             : std::string("variable %")) + std::to_string(v.node) + ": ";
                if (v.where->rebound_dtype != v.dtype || !(v.where->rebound_shape == v.shape))
                    what += "shape " + to_string(v.shape) + " " + std::string(name(v.dtype)) + " -> " +
                            to_string(v.where->rebound_shape) + " " + std::string(name(v.where->rebound_dtype)) + " (";
                else
                    what += "shape " + to_string(v.shape) + " " + std::string(name(v.dtype)) + " (";
                return what + (v.where->rebound_why ? v.where->rebound_why
                                                    : "the variable was assigned a new tensor; its trace read the old one") + ")";
            }
        return {};
    }

    // Groups consecutive elementwise ops (arguments, constants, variables and pure ops that need nothing of the
    // group may sit between them) of one floating dtype and one shape whose other operands are values of that shape, or repeat along it (a bias, a
    // number): each op's tile kernel then runs tile by tile.
    template <int N = 0>
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
                jit_prepare<N>(graph, groups.back(), jit, device_groups);
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
                    const std::ptrdiff_t period = x.shape.numel();
                    if (!periodic || period == 0 || period > 4096) return false;
                    // The tile: about 1,024 elements, a multiple of every period.
                    tile = tile_with_period(tile, period, cur.periodic);
                    if (tile == 0) return false;
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
    std::optional<jit_mode> jit;  // the kernel compiler's mode for this graph's groups (empty: the process's)
    // The graph's values live on kiln's GPU device, and its groups run as compiled kernels there (node by node
    // until a kernel is ready, or where none can be made).
    bool device_groups = false;

    // On a CUDA device, from the third call of a signature its whole call is captured as a CUDA graph and replayed
    // (function_options::cuda_graphs; see replay_captured).
    bool cuda_graphs = true;

    // (Templates on an unused int: compiled only where a function is prepared, with the kernel compiler's hook.)
    template <int N = 0>
    void prepare() {
        // A graph whose values live on a GPU runs node by node there, each op the device's kernels (eager mode's);
        // the CPU's fused tile loops and buffer plans read host memory.
        bool on_device = false;
        for (const graph_node& n : graph.nodes) on_device = on_device || n.device.type != device_type::cpu;
#if KILN_HAS_GPU
        captured.reset();
        if (on_device && cuda_graphs) captured = std::make_shared<capture_record>();
#endif
        if (on_device) {
            planning = false;
            const jit_mode m = jit ? *jit : basic_jit_service<N>::instance().mode();
            device_groups = fusion = fusion && m != jit_mode::off;
        }
        if (fusion) fuse<N>();
        result_aliases.clear();
        for (std::int32_t o : traced.outputs) {
            const node_kind k = traced.nodes[static_cast<std::size_t>(o)].kind;
            result_aliases.push_back(k == node_kind::argument || k == node_kind::variable);
        }
        copy_result.clear();
        using passes::detail::view_root;
        for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
            const node_kind kind = graph.nodes[static_cast<std::size_t>(graph.outputs[k])].kind;
            // Results that the passes made share storage (two equal results merged into one, or one a view of
            // the other) are separate tensors, as eager mode's are, unless they shared it when traced. (A loaded
            // function's traced graph is the file's: run() gives its results apart.)
            bool merged = false;
            for (std::size_t j = 0; j < k && !merged && traced_here; ++j)
                merged = view_root(graph, graph.outputs[j]) == view_root(graph, graph.outputs[k]) &&
                         view_root(traced, traced.outputs[j]) != view_root(traced, traced.outputs[k]);
            copy_result.push_back(merged || kind == node_kind::constant ||
                                  ((kind == node_kind::argument || kind == node_kind::variable) && !result_aliases[k]));
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
        std::lock_guard lock(bind_mutex);
        return bind_locked(extents);
    }
    // bind() for extents other than the traced ones, with bind_mutex held.
    std::shared_ptr<const std::vector<std::vector<std::int64_t>>> bind_locked(const std::vector<std::ptrdiff_t>& extents) const {
        if (extents.size() != traced_extents.size())
            throw value_error(error_prefix("value_error", "function") + "internal: " + std::to_string(extents.size()) +
                              " dynamic extents for a graph traced with " + std::to_string(traced_extents.size()));
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

    // A group on kiln's GPU device through its compiled kernel: false (and nothing done) while the kernel is not
    // ready or the operands are not contiguous values of one dtype and device, each of the group's shape or (an
    // operand that repeats along the group, such as a bias) of its period's element count.
    bool run_on_device(const fused_group& g, std::vector<std::optional<tensor>>& slots) const {
        const device_group_kernel fn = g.jit ? g.jit->device_fn.load(std::memory_order_acquire) : nullptr;
        if (!fn || g.jit->operands.size() > 512) return false;
        const tensor* first = nullptr;
        for (const auto& ins : g.inputs)
            for (const auto& op : ins)
                if (op.kind == fused_group::operand::full && !first) first = &*slots[static_cast<std::size_t>(op.index)];
        if (!first || first->device().type == device_type::cpu) return false;
        for (const auto& ins : g.inputs)
            for (const auto& op : ins) {
                if (op.kind == fused_group::operand::member) continue;
                const tensor& t = *slots[static_cast<std::size_t>(op.index)];
                const bool fits = op.kind == fused_group::operand::full
                                      ? t.shape() == first->shape()
                                      : op.period > 0 && t.numel() == op.period && first->numel() % op.period == 0;
                if (!fits || !t.is_contiguous() || t.dtype() != g.dtype || !(t.device() == first->device())) return false;
            }
        std::array<const void*, 512> in;
        std::array<std::ptrdiff_t, 512> periods;
        std::array<void*, 64> out;
        for (std::size_t k = 0; k < g.jit->operands.size(); ++k) {
            const auto [j, q] = g.jit->operands[k];
            const fused_group::operand& op = g.inputs[j][q];
            in[k] = slots[static_cast<std::size_t>(op.index)]->raw_data();
            periods[k] = op.kind == fused_group::operand::periodic ? op.period : 0;
        }
        std::size_t nout = 0;
        for (std::size_t j = 0; j < g.members.size(); ++j)
            if (g.exported[j]) {
                slots[static_cast<std::size_t>(g.members[j])] = tensor(g.dtype, first->shape(), first->device());
                out[nout++] = slots[static_cast<std::size_t>(g.members[j])]->raw_data();
            }
        void* stream = nullptr;
#if KILN_HAS_GPU && KILN_GPU_CUDA
        stream = static_cast<void*>(backend::gpu_memory::stream(first->device().index));
#endif
        {
#if KILN_HAS_GPU
            const backend::gpu_memory::device_scope on(first->device().index);
            const backend::gpu_memory::device_section work;  // (KILN_GPU_GUARD, emulated device)
#endif
            fn(in.data(), out.data(), periods.data(), first->numel(), stream);
        }
        g.jit->runs.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    // One fused group on a device where its kernel is ready, else on the CPU (run_group_from_slots).
    void run_group(const fused_group& g, std::vector<std::optional<tensor>>& slots,
                   const std::shared_ptr<const std::vector<std::vector<std::int64_t>>>& params) const {
        auto params_of = [&](std::int32_t node) -> const std::int64_t* {
            if (params && !(*params)[static_cast<std::size_t>(node)].empty()) return (*params)[static_cast<std::size_t>(node)].data();
            return graph.nodes[static_cast<std::size_t>(node)].params.values.data();
        };
        if (device_groups) {
            if (!run_on_device(g, slots)) run_group_members(graph, g, slots, params_of);
            return;
        }
        run_group_from_slots(graph, g, slots, params_of);
    }

    // Runs a call: from the buffer plan of its extents when there is one and the arguments fit it; otherwise node
    // by node, and the first such call for its extents is watched to make the plan.
    // (A template on an unused int: compiled only where a traced function runs.)
    template <int N = 0>
    std::vector<tensor> run(std::span<const tensor> args, const std::vector<std::ptrdiff_t>& extents = {}) const {
        std::vector<tensor> out = run_graph<N>(args, extents);
        if (!traced_here)
            // A loaded graph's results that share storage (an ONNX Identity of another result, two results the
            // saving program's passes merged) are given apart; an argument returned stays the caller's tensor.
            for (std::size_t k = 1; k < out.size(); ++k) {
                const auto* s = out[k].storage_handle().get();
                bool shared = false;
                for (std::size_t j = 0; j < k && !shared; ++j) shared = out[j].storage_handle().get() == s;
                for (const tensor& a : args) shared = shared && a.storage_handle().get() != s;
                if (shared) out[k] = out[k].clone();
            }
        return out;
    }

    template <int N = 0>
    std::vector<tensor> run_graph(std::span<const tensor> args, const std::vector<std::ptrdiff_t>& extents) const {
        // The traced extents take no lock; other extents take it once, for their parameters (where some follow the
        // extents) and their plan (always: a plan holds its values' shapes, even where no parameter moves).
        const bool traced_key = extents == traced_extents;
        // Called while a kiln::function traces (a loaded function inside a traced one): each node runs its eager op,
        // which records; the fused groups, the buffer plan and a captured CUDA graph would read values that a
        // symbolic tensor does not have.
        const bool tracing = active_tracer != nullptr;
#if KILN_HAS_GPU
        if (captured && traced_key && !tracing)
            if (std::optional<std::vector<tensor>> r = replay_captured(args)) return std::move(*r);
#endif
        std::shared_ptr<const std::vector<std::vector<std::int64_t>>> params;
        const buffer_plan* p = nullptr;
        if (traced_key) {
            if (planning) p = traced_plan.load(std::memory_order_acquire);
        } else {
            std::lock_guard lock(bind_mutex);
            if (has_dynamic) params = bind_locked(extents);
            if (planning) {
                auto found = plans.find(extents);
                if (found != plans.end()) p = found->second.get();
            }
        }
        if (tracing) [[unlikely]] return run_nodes(args, params, nullptr, false, {}, true);
        if (!planning) return run_nodes(args, params, nullptr);
        if (p) {
            if (p->ok && plan_fits(*p, graph, args)) return run_buffer_plan<N>(*p, graph, args, copy_result);
            return run_nodes(args, params, nullptr);
        }
        std::vector<std::optional<tensor>> watched;
        std::vector<tensor> out = run_nodes(args, params, &watched);
        std::shared_ptr<const buffer_plan> plan = build_buffer_plan<N>(graph, groups, watched, params);
        watched.clear();
        {
            std::lock_guard lock(bind_mutex);
            auto [at, made] = plans.emplace(traced_key ? traced_extents : extents, plan);
            if (traced_key && made) traced_plan.store(at->second.get(), std::memory_order_release);
        }
        if (plan->ok) {
            // This thread's arena now, so that the next call allocates nothing.
            std::unique_ptr<plan_frame> f = plan_frames::take(plan->id);
            f->plan_id = plan->id;
            f->reserve(plan->arena_bytes);
            plan_frames::give_back(std::move(f));
        }
        return out;
    }

    // The buffer plan made for the traced extents (null before the second call, or with planning off).
    const buffer_plan* plan() const noexcept { return traced_plan.load(std::memory_order_acquire); }

#if KILN_HAS_GPU
    mutable std::shared_ptr<capture_record> captured;  // made by prepare() for a graph on a CUDA device (captured_call.hpp)
    capture_info capture_status() const { return detail::capture_status(*this); }
    std::optional<std::vector<tensor>> replay_captured(std::span<const tensor> args) const { return detail::replay_captured(*this, args); }
#endif

    bool planning = true;
    mutable std::map<std::vector<std::ptrdiff_t>, std::shared_ptr<const buffer_plan>> plans;  // under bind_mutex
    mutable std::atomic<const buffer_plan*> traced_plan{nullptr};  // plans[traced_extents]: read without the lock
    std::vector<char> copy_result;  // per result: the caller gets a copy (see run_nodes)

    // Node by node. With `keep`, every value stays alive and ends there (a watched call).
    // With `recording` (a CUDA graph's capture), effects with a device part queue only that (their host part runs
    // at each replay instead), and the nodes in `substitutes` read the tensors given there.
    std::vector<tensor> run_nodes(std::span<const tensor> args,
                                  const std::shared_ptr<const std::vector<std::vector<std::int64_t>>>& params,
                                  std::vector<std::optional<tensor>>* keep, bool recording = false,
                                  std::span<const std::pair<std::int32_t, tensor>> substitutes = {}, bool ungrouped = false) const {
        const std::size_t n = graph.nodes.size();
        // (Optional: an empty slot costs nothing to make, a default tensor an id and a reference count.)
        std::vector<std::optional<tensor>> slots(n);
        std::vector<tensor> in;
        in.reserve(8);
        std::int32_t deferred_from = -1;  // releases inside a group wait for the group, which runs at its last op
        for (std::size_t i = 0; i < n; ++i) {
            const graph_node& node = graph.nodes[i];
            if (node.group >= 0 && !ungrouped) {
                const fused_group& g = groups[static_cast<std::size_t>(node.group)];
                if (deferred_from < 0) deferred_from = static_cast<std::int32_t>(i);
                if (static_cast<std::int32_t>(i) != g.members.back()) continue;
                run_group(g, slots, params);
                if (!keep)
                    for (std::size_t j = static_cast<std::size_t>(deferred_from); j <= i; ++j)
                        for (std::int32_t k = release_start[j]; k < release_start[j + 1]; ++k)
                            slots[static_cast<std::size_t>(release[static_cast<std::size_t>(k)])].reset();
                deferred_from = -1;
                continue;
            }
            switch (node.kind) {
                case node_kind::argument: slots[i] = args[static_cast<std::size_t>(node.argument)]; break;
                case node_kind::constant:
                case node_kind::variable:
                    slots[i] = node.value;
                    for (const auto& [at, value] : substitutes)
                        if (at == static_cast<std::int32_t>(i)) slots[i] = value;
                    break;
                case node_kind::op:
                case node_kind::effect:
                    in.clear();
                    for (std::int32_t v : node.inputs) in.push_back(*slots[static_cast<std::size_t>(v)]);
                    const std::span<const std::int64_t> p =
                        params && !(*params)[i].empty() ? std::span<const std::int64_t>((*params)[i]) : node.params.values;
                    if (node.kind == node_kind::op) slots[i] = node.fn(in, p);
                    else if (recording && node.params.device_part) node.params.device_part(in, p);
                    else node.effect(in, p);
                    break;
            }
            if (deferred_from >= 0 || keep) continue;  // (a free node between a group's ops)
            for (std::int32_t k = release_start[i]; k < release_start[i + 1]; ++k)
                slots[static_cast<std::size_t>(release[static_cast<std::size_t>(k)])].reset();
        }
        std::vector<tensor> out;
        out.reserve(graph.outputs.size());
        for (std::size_t k = 0; k < graph.outputs.size(); ++k) {
            const std::int32_t o = graph.outputs[k];
            // A constant result, and one that became an argument or a variable, is the caller's own copy, as eager
            // mode's results are (copy_result, made by prepare()).
            const tensor& r = *slots[static_cast<std::size_t>(o)];
            out.push_back(copy_result[k] ? r.clone() : r);
        }
        if (keep) *keep = std::move(slots);
        return out;
    }
};
using executable = basic_executable<>;

}  // namespace detail
}  // namespace kiln
