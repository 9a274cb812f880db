#pragma once
// kiln::session: parameter storage, optimizer state and reusable workspace for graph mode.
//
//   kiln::session s(seed);
//   auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3});
//   float l = s.run(step, "x"_in = xb, "y"_in = yb);     // loss, gradients and one fused update per parameter
//   auto p = s.run(prediction, "x"_in = xb);             // any expression; parameters come from the session
//
// Parameters are created on first use from their static shape and initializer (kiln::param<"w", float,
// kiln::shape<10, 64>, kiln::init::glorot_uniform>), or set from tensors. Each distinct expression or step type
// keeps its own workspace in the session, so after the first run on given shapes a run allocates nothing.
// A session is not thread-safe.
//
// kiln::session s(seed, kiln::cuda) keeps its parameters, optimizer slots and workspaces on the GPU: feeds are
// device tensors (or kiln::view(ptr, shape, kiln::cuda)), each fusion group is one kernel, and a training step
// copies nothing to the host but its loss (docs/gpu.md).
#include <algorithm>
#include <array>
#include <limits>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "../core/names.hpp"
#include "../eager/convert.hpp"
#include "../eager/init.hpp"
#include "../eager/random.hpp"
#include "../eager/tensor.hpp"
#if KILN_HAS_GPU
#include "../eager/tape.hpp"  // tensor::to(device) and clone record on tapes: their definitions
#endif
#include "grad.hpp"
#include "plan.hpp"
#include "rules.hpp"
#include "run.hpp"
#include "session_parameters.hpp"
#include "session_update.hpp"
#include "training_step.hpp"

namespace kiln {

class session : public detail::session_parameters {
public:
    explicit session(std::uint64_t seed = 0) : detail::session_parameters(seed) {}
    // A session on a device: its parameters are made on the CPU from the seed (the same values as a CPU session's)
    // and kept on `where`; its runs take feeds that live there.
    session(std::uint64_t seed, kiln::device where) : detail::session_parameters(seed, where) {}
    // Moves the session to another device: its parameters and every training step's optimizer slots are copied
    // there, and its workspaces are made again there on their next run (a trained model moved to the CPU for
    // inference, or back). Nothing happens when it is already there. A function traced from the session
    // (kiln::trace(session, ...)) traces again at its next call, on the parameters' new storage, with the reason.
    session& to(kiln::device where) {
        if (where == dev_) return *this;
        if (where.type != device_type::cpu) (void)tensor(float32, dims{0}, where);  // a device_error when it does not exist
        // Every copy is made before anything changes, so a failure leaves the session as it was.
        std::vector<tensor> moved;
        for (auto& kv : params_) moved.push_back(detail::session_on_device(kv.second, where));
        for (auto& kv : cache_) kv.second->prepare_move(where);
        std::size_t i = 0;
        for (auto& kv : params_) {  // (map nodes stay: steps hold their addresses)
            // Traced functions that read the old storage (kiln::trace(session, ...)) trace again at their next
            // call, reading the parameter where it is now; none goes on reading the copy left behind.
            if (const auto& old = kv.second.storage_handle())
                old->mark_rebound(kv.second.dtype(), kv.second.shape(), "its kiln::session moved to another device");
            kv.second = std::move(moved[i++]);
        }
        for (auto& kv : cache_) kv.second->commit_move();
        dev_ = where;
        return *this;
    }

    // Runs an expression or kiln::fetch(...): like kiln::run, with parameters taken from the session unless fed.
    // The feeds are checked first, as in kiln::run (see detail::feeds_ok): a mistake gives one static_assert.
    template <class E, class... Feeds>
    auto run(const E& expr, const Feeds&... feeds) {
        if constexpr (detail::is_fetch_v<E>) {
            using traits = detail::pack_traits<std::remove_cvref_t<decltype(expr.roots)>>;
            if constexpr (feeds_ok<typename traits::leaves, Feeds...>()) {
                return run_roots(expr.roots, feeds...);
            } else {
                report_feeds<typename traits::leaves, Feeds...>();
                return typename traits::results{};
            }
        } else if constexpr (!is_graph_v<E>) {
            static_assert(is_graph_v<E>, "kiln::session::run: the first argument must be a graph-mode expression, "
                                         "kiln::fetch or a training step.");
        } else if constexpr (feeds_ok<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>()) {
            return std::get<0>(run_roots(detail::root_pack<E>(expr), feeds...));
        } else {
            report_feeds<detail::leaves_t<detail::unique_nodes_t<E>>, Feeds...>();
            return detail::result_container_t<E>{};
        }
    }

    // One training step: the loss and its gradients in one plan, then one fused update per parameter. Returns the
    // loss before the update. (The gradients' leaves are among the loss's, so the loss's leaves are checked.)
    template <class Loss, class Rule, class... Params, class... Feeds>
    auto run(const training_step<Loss, Rule, detail::types<Params...>>& step, const Feeds&... feeds) {
        using leaves = detail::leaves_t<detail::unique_nodes_t<Loss>>;
        if constexpr (feeds_ok<leaves, Feeds...>()) {
            return run_step(step, feeds...);
        } else {
            report_feeds<leaves, Feeds...>();
            return detail::root_type_t<Loss>{};
        }
    }


    // A training step's gradient, as on_gradients() hands it over: the parameter's name and its gradient's
    // contiguous, writable memory (`numel` elements of `dtype`).
    struct gradient {
        std::string_view name;
        kiln::dtype dtype;
        void* data;
        std::ptrdiff_t numel;
        kiln::device device = kiln::cpu;  // where `data` lives (the session's device)
    };
    // Calls `hook` in every training step (run(step, ...)) with every parameter's gradient, after all of them are
    // computed and before any parameter changes; what the hook writes into them is what the update uses. A
    // data-parallel all-reduce goes here (kiln::distributed::all_reduce_gradients). An empty function removes it.
    void on_gradients(std::function<void(std::span<const gradient>)> hook) { gradient_hook_ = std::move(hook); }

    // The update of a training step with gradients computed elsewhere, one per parameter in the step's order
    // (kiln::trace(session, step) computes them in a traced function): the step's rule, slots and step count, as
    // run(step, ...) uses them, and the on_gradients hook. The gradients are copied first.
    template <class Loss, class Rule, class... Params>
    void apply_gradients(const training_step<Loss, Rule, detail::types<Params...>>& step, std::span<const tensor> grads) {
        using state = detail::step_state<Loss, Rule, Params...>;
        using T = typename state::T;
        state& st = state_of(step);
        take_gradients<T, Params...>(st, grads, false);
        on_backend_of<int>([&]<class Device>() {
            // (On a device, the buffer a recorded update reads its numbers from is made here, before a CUDA graph
            // records the update: see record_update_device_part.)
            if constexpr (!std::is_same_v<Device, backend::cpu_device>) (void)st.coef_block.template grow<Device>(2 * sizeof(T));
            finish_step<Device, T, Params...>(st);
            return 0;
        });
    }

    // kiln::trace(session, step) recorded in a CUDA graph (function/executor.hpp, op_params::host_part): the update
    // can be recorded where the session lives on a GPU, its rule can read its numbers from device memory (Adam's
    // roots_read) and no on_gradients hook is set (a hook's host code runs at each step). Then the host part moves
    // the step count on and queues this step's step size and eps_hat into device memory, and the device part queues
    // the update (one kernel per parameter, reading the gradients where they are) that reads them.
    template <class Loss, class Rule, class... Params>
    bool update_recordable(const training_step<Loss, Rule, detail::types<Params...>>&) const {
        using T = detail::root_type_t<Loss>;
        if constexpr (requires(const Rule& r) { r.template roots_read<T>(); })
            return dev_.type != device_type::cpu && !gradient_hook_;
        else
            return false;
    }
    template <class Loss, class Rule, class... Params>
    void record_update_host_part(const training_step<Loss, Rule, detail::types<Params...>>& step) {
        using state = detail::step_state<Loss, Rule, Params...>;
        using T = typename state::T;
        state& st = state_of(step);
        st.rule.next_step(++st.t);
        if constexpr (requires(const Rule& r) { r.step; r.eps_hat; }) {
            on_backend_of<int>([&]<class Device>() {
                const T v[2] = {static_cast<T>(st.rule.step), static_cast<T>(st.rule.eps_hat)};
                Device::queue_from_host(st.coef_block.template grow<Device>(sizeof v), v, sizeof v);
                return 0;
            });
        }
    }
    template <class Loss, class Rule, class... Params>
    void record_update_device_part(const training_step<Loss, Rule, detail::types<Params...>>& step, std::span<const tensor> grads) {
        using state = detail::step_state<Loss, Rule, Params...>;
        using T = typename state::T;
        state& st = state_of(step);
        take_gradients<T, Params...>(st, grads, true);
        on_backend_of<int>([&]<class Device>() {
            if constexpr (!std::is_same_v<Device, backend::cpu_device> && requires(const Rule& r) { r.template roots_read<T>(); }) {
                [&]<std::size_t... I>(std::index_sequence<I...>) {
                    (detail::session_update<Device, Params, I, true>(st), ...);
                }(std::index_sequence_for<Params...>{});
            }
            return 0;
        });
    }

private:
    // The gradients of apply_gradients into st.grads: each copied into a buffer of the step's (which the
    // on_gradients hook may write), or, `in_place`, read where it is when it is contiguous, of the step's dtype
    // and on its device (a recorded update: no hook).
    template <class T, class... Params, class State>
    void take_gradients(State& st, std::span<const tensor> grads, bool in_place) {
        (void)in_place;  // (a device's case only)
        if (grads.size() != sizeof...(Params))
            throw value_error("kiln: value_error in 'session::apply_gradients': " + std::to_string(grads.size()) +
                              " gradients for a training step of " + std::to_string(sizeof...(Params)) + " parameters");
        constexpr std::array<std::string_view, sizeof...(Params)> names{Params::name.view()...};
        for (std::size_t p = 0; p < sizeof...(Params); ++p) {
            const tensor& g = grads[p];
            g.check_valid("session::apply_gradients");
            const dims& ps = st.params[p]->shape();
            if (!(g.shape() == ps))
                throw shape_error("kiln: shape_error in 'session::apply_gradients': the gradient of parameter '" +
                                  std::string(names[p]) + "' has shape " + to_string(g.shape()) + ", the parameter " + to_string(ps));
#if KILN_HAS_GPU
            if (dev_.type != device_type::cpu) {  // into a device buffer of the step's
                if (in_place && g.dtype() == dtype_of<T>() && g.device() == dev_ && g.is_contiguous()) {
                    st.grads[p] = detail::strided<const T>(static_cast<const T*>(g.raw_data()), ps, detail::contiguous_strides(ps));
                    continue;
                }
                const tensor src = g.to(dtype_of<T>()).to(dev_).contiguous();
                const std::size_t bytes = static_cast<std::size_t>(ps.numel()) * sizeof(T);
                T* b = on_backend_of<T*>([&]<class Device>() {
                    T* q = static_cast<T*>(st.grad_blocks[p].template grow<Device>(bytes));
                    Device::copy(q, src.raw_data(), bytes);
                    return q;
                });
                st.grads[p] = detail::strided<const T>(b, ps, detail::contiguous_strides(ps));
                continue;
            }
#endif
            auto& buf = st.grad_buffers[p];
            if (buf.size() != static_cast<std::size_t>(ps.numel())) buf.resize(static_cast<std::size_t>(ps.numel()));
            const tensor src = g.to(dtype_of<T>());  // into the step's own buffer, which the hook may write
            detail::strided<const T> v;
            detail::fill_strided(v, src);
            detail::copy_row_major(buf.data(), v);
            st.grads[p] = detail::strided<const T>(buf.data(), ps, detail::contiguous_strides(ps));
        }
    }

public:
    // Checkpoints (kiln/io/checkpoint.hpp). The state of the training step that has run: "optimizer/<parameter>/<k>"
    // for its k-th slot of each parameter, "optimizer/step" (int64), and its rule's kind ("adam", ...).
    template <int N = 0>
    void save_training_state(std::map<std::string, tensor>& out, std::string& optimizer, const char* entry) const {
        const detail::session_cache* found = nullptr;
        for (const auto& [key, st] : cache_)
            if (st && !st->optimizer().empty()) {
                if (found)
                    throw value_error(detail::error_prefix("value_error", entry) + "the session has run more than one "
                                      "training step; a checkpoint holds the state of one");
                found = st.get();
            }
        if (!found) return;
        optimizer = std::string(found->optimizer());
        found->save(out);
    }
    // Restores that state: now, into the training step that has run, or when a step of this kind first runs (its
    // slots must then match its parameters). `in` holds the "optimizer/..." tensors of a checkpoint.
    template <int N = 0>
    void load_training_state(const std::map<std::string, tensor>& in, const std::string& optimizer, const std::string& file,
                             const char* entry) {
        pending_.clear();
        pending_kind_.clear();
        pending_file_ = file;
        if (in.empty() && optimizer == "none") return;
        for (const auto& [key, st] : cache_)
            if (st && !st->optimizer().empty()) {
                if (st->optimizer() != optimizer)
                    throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + file + "' holds the state of "
                                     "optimizer '" + optimizer + "', but the session's training step is '" +
                                     std::string(st->optimizer()) + "'");
                st->restore(in, file, entry);
                return;
            }
        pending_ = in;
        pending_kind_ = optimizer;
    }

private:
    // The state of `step` in this session, created (parameters, zero slots, a pending checkpoint's state) on first use.
    template <class Loss, class Rule, class... Params>
    auto& state_of(const training_step<Loss, Rule, detail::types<Params...>>& step) {
        using state = detail::step_state<Loss, Rule, Params...>;
        using step_t = training_step<Loss, Rule, detail::types<Params...>>;
        state& st = cached<state, step_t>();
        if (st.t == 0) {
            declare_leaves<detail::leaves_t<detail::unique_nodes_t<Loss>>>();
            st.rule = step.rule;
            std::size_t i = 0;
            ((st.params[i] = &parameter_for<Params>(), ++i), ...);
            for (std::size_t p = 0; p < sizeof...(Params); ++p)
                for (auto& s : st.slots[p]) s = detail::session_on_device(init::zeros::make(st.params[p]->shape(), st.params[p]->dtype(), gen_), dev_);
            if (!pending_kind_.empty()) {  // a checkpoint's state, loaded before this step first ran
                if (pending_kind_ != Rule::kind)
                    throw file_error("kiln: file_error in 'load_checkpoint': '" + pending_file_ + "' holds the state of "
                                     "optimizer '" + pending_kind_ + "', but the training step run is '" + std::string(Rule::kind) + "'");
                const std::map<std::string, tensor> in = std::move(pending_);
                pending_.clear();
                pending_kind_.clear();
                st.restore(in, pending_file_, "load_checkpoint");
            }
        }
        return st;
    }


    // Calls f.template operator()<Device>() with the session's device backend; returns its R.
    template <class R, class F>
    R on_backend_of(F&& f) {
#if KILN_HAS_GPU
        if (dev_.type != device_type::cpu) [[unlikely]] {
            const backend::gpu_memory::device_scope on(dev_.index);
            return f.template operator()<backend::thrust_device>();
        }
#endif
        return f.template operator()<backend::cpu_device>();
    }

    // The body of run(step, feeds...), once the feeds have passed their checks.
    template <class Loss, class Rule, class... Params, class... Feeds>
    auto run_step(const training_step<Loss, Rule, detail::types<Params...>>& step, const Feeds&... feeds) {
        using T = detail::root_type_t<Loss>;
        return on_backend_of<T>([&]<class Device>() { return run_step_on<Device>(step, feeds...); });
    }

    template <class Device, class Loss, class Rule, class... Params, class... Feeds>
    auto run_step_on(const training_step<Loss, Rule, detail::types<Params...>>& step, const Feeds&... feeds) {
        using state = detail::step_state<Loss, Rule, Params...>;
        using T = typename state::T;
        using plan_t = typename state::plan_t;
        constexpr bool on_cpu = std::is_same_v<Device, backend::cpu_device>;
        constexpr auto grads = state::grads_of();
        state& st = state_of(step);
        const auto users = bind<typename plan_t::user_leaves>(feeds...);
        plan_t::template prepare<Device>(users, st.ws);

        T loss_value{};
        const dims scalar_shape{};
        using loss_leaf = decltype(plan_t::rewritten(step.loss));
        const T* loss_at = nullptr;  // on a device: where the loss is, read back once the step is queued
        if constexpr (detail::is_slot<loss_leaf>::value) {  // usually: the loss is a reduction, already computed
            loss_at = std::get<detail::slot_index<loss_leaf>::value>(st.ws.slots).data;
            if constexpr (on_cpu) loss_value = *loss_at;
        } else {
            T* at = &loss_value;
            if constexpr (!on_cpu) loss_at = at = static_cast<T*>(st.loss_block.template grow<Device>(sizeof(T)));
            plan_t::template run_elementwise<Device>(plan_t::rewritten(step.loss), users, st.ws,
                                                     detail::strided<T>(at, scalar_shape, scalar_shape), scalar_shape);
        }
        // Every gradient is computed before any parameter changes.
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (detail::session_compute_gradient<Device, plan_t, Params, I>(detail::grad_at<I>(grads), users, st), ...);
        }(std::index_sequence_for<Params...>{});

        finish_step<Device, T, Params...>(st);
        // (The loss's slot is not written by the gradients or the update: reading it last waits once per step.)
        if constexpr (!on_cpu) Device::to_host(&loss_value, loss_at, sizeof(T));
        return loss_value;
    }

    // The gradients' hook, then the update of every parameter and its slots (st.grads holds the gradients: contiguous
    // buffers the step owns).
    template <class Device, class T, class... Params, class State>
    void finish_step(State& st) {
        if (gradient_hook_) {
            constexpr std::array<std::string_view, sizeof...(Params)> names{Params::name.view()...};
            std::array<gradient, sizeof...(Params)> gs;
            for (std::size_t p = 0; p < sizeof...(Params); ++p)
                gs[p] = {names[p], dtype_of<T>(), const_cast<T*>(st.grads[p].data), st.params[p]->numel(), dev_};
            gradient_hook_(std::span<const gradient>(gs));
        }
        st.rule.next_step(++st.t);
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (detail::session_update<Device, Params, I>(st), ...);
        }(std::index_sequence_for<Params...>{});
    }

    // The compile-time checks of feeds against a plan's leaves: as kiln::run's, except that a parameter may go unfed
    // (the session holds it). Where feeds_ok is false, report_feeds gives the static_assert naming the mistake.
    template <class LeafList, class... Feeds>
    static constexpr bool feeds_ok() {
        return []<class... L>(detail::types<L...>) {
            return (detail::check_name_unique<L, L...>() && ...) && (detail::check_feed_used<Feeds, L...>() && ...) &&
                   (check_session_leaf<L, Feeds...>() && ...);
        }(LeafList{});
    }
    template <class LeafList, class... Feeds>
    static void report_feeds() {
        []<class... L>(detail::types<L...>) {
            (detail::report_name_unique<L, L...>(), ...);
            (detail::report_feed_used<Feeds, L...>(), ...);
            (report_session_leaf<L, Feeds...>(), ...);
        }(LeafList{});
    }


    template <class State, class Key>
    State& cached() {
        const std::type_index key(typeid(Key));
        if (last_key_ == key && last_) return static_cast<State&>(*last_);
        auto& slot = cache_[key];
        if (!slot) slot = std::make_unique<State>();
        last_key_ = key;
        last_ = slot.get();
        return static_cast<State&>(*slot);
    }

    // Binds feeds to the plan's leaves; parameters that are not fed come from the session.
    template <class LeafList, class... Feeds>
    auto bind(const Feeds&... feeds) {
        return [&]<class... L>(detail::types<L...>) {
            using type = std::tuple<detail::strided<const typename L::value_type>...>;
            constexpr bool ok = feeds_ok<LeafList, Feeds...>();
            type out;
            if constexpr (ok) {
                [[maybe_unused]] const auto all = std::forward_as_tuple(feeds...);
                [&]<std::size_t... K>(std::index_sequence<K...>) {
                    (bind_one<L, K>(std::get<K>(out), all), ...);
                }(std::index_sequence_for<L...>{});
            } else {
                report_feeds<LeafList, Feeds...>();
            }
            return out;
        }(LeafList{});
    }

    template <class L, class... Feeds>
    static constexpr bool check_session_leaf() {
        constexpr std::size_t count = (std::size_t{detail::names_match<L, Feeds>} + ... + 0);
        if constexpr (is_param_v<L> && count == 0) return true;
        else return detail::check_leaf_feed<L, Feeds...>();
    }
    template <class L, class... Feeds>
    static void report_session_leaf() {
        if constexpr (!check_session_leaf<L, Feeds...>()) detail::report_leaf_feed<L, Feeds...>();
    }

    template <class L, std::size_t K, class View, class... Feeds>
    void bind_one(View& v, const std::tuple<const Feeds&...>& all) {
        constexpr std::size_t count = (std::size_t{detail::names_match<L, Feeds>} + ... + 0);
        if constexpr (count == 0) {
            detail::fill_strided(v, parameter_for<L>(), dev_, "kiln::session::run");
        } else {
            detail::fill_leaf<L>(v, std::get<detail::feed_index<L, Feeds...>()>(all).get(), "kiln::session::run", dev_);
        }
        detail::check_static_shape<L>(v.shape, "kiln::session::run");
    }

    template <class... Roots, class... Feeds>
    auto run_roots(const detail::root_pack<Roots...>& roots, const Feeds&... feeds) {
        using R = std::tuple<detail::result_container_t<Roots>...>;
        return on_backend_of<R>([&]<class Device>() { return run_roots_on<Device>(roots, feeds...); });
    }

    // Results come back to the host as kiln::run's containers.
    template <class Device, class... Roots, class... Feeds>
    auto run_roots_on(const detail::root_pack<Roots...>& roots, const Feeds&... feeds) {
        using plan_t = detail::plan<Roots...>;
        // (Keyed by the plan: a class local to this function would be another type for every set of feed types.)
        using state = detail::plan_session_state<plan_t>;
        state& st = cached<state, plan_t>();
        if (!st.declared) {
            declare_leaves<typename plan_t::user_leaves>();
            st.declared = true;
        }
        const auto users = bind<typename plan_t::user_leaves>(feeds...);
        plan_t::template prepare<Device>(users, st.ws);
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
            return std::tuple<detail::result_container_t<Roots>...>([&] {
                using R = detail::result_container_t<Roots>;
                using T = detail::root_type_t<Roots>;
                const auto r = plan_t::rewritten(roots.template get<J>());
                const dims s = plan_t::shape_of_expression(r, users, st.ws);
                R out = detail::allocate_result<R>(s);
                if constexpr (std::is_same_v<Device, backend::cpu_device>) {
                    plan_t::run_elementwise(r, users, st.ws, detail::as_strided<T>(out), s);
                } else {
                    detail::device_block result;
                    const std::size_t bytes = static_cast<std::size_t>(s.numel()) * sizeof(T);
                    T* p = static_cast<T*>(result.template grow<Device>(bytes));
                    plan_t::template run_elementwise<Device>(r, users, st.ws, detail::strided<T>(p, s, detail::contiguous_strides(s)), s);
                    Device::to_host(out.data(), p, bytes);
                }
                return out;
            }()...);
        }(std::index_sequence_for<Roots...>{});
    }

    std::unordered_map<std::type_index, std::unique_ptr<detail::session_cache>> cache_;
    std::type_index last_key_{typeid(void)};
    detail::session_cache* last_ = nullptr;
    std::function<void(std::span<const gradient>)> gradient_hook_;
    // A checkpoint's training state loaded before its step first ran (load_training_state).
    std::map<std::string, tensor> pending_;
    std::string pending_kind_, pending_file_;
};

}  // namespace kiln
