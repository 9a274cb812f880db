#pragma once
// Optimizers. Each step updates a parameter and its slots in one fused pass over memory: the update is a small
// graph (the vocabulary's ops on indexed leaves and run-time scalars) run by graph mode's loop, in place.
#include <algorithm>
#include <array>
#include <cstdint>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../eager/eager.hpp"
#include "../graph/rules.hpp"

namespace kiln::optim {

namespace detail {

inline void check_grads(const std::vector<variable*>& params, const std::vector<tensor>& grads, const char* who) {
    if (params.size() != grads.size())
        throw value_error(std::string("kiln: value_error in 'optim::") + who + "': " + std::to_string(grads.size()) + " gradients for " +
                          std::to_string(params.size()) + " parameters");
    for (std::size_t i = 0; i < params.size(); ++i)
        if (!(params[i]->shape() == grads[i].shape()))
            throw shape_error(std::string("kiln: shape_error in 'optim::") + who + "': gradient " + std::to_string(i) + " has shape " +
                              to_string(grads[i].shape()) + " but its parameter has " + to_string(params[i]->shape()));
}

// An optimizer's slots (Adam's moments, SGD's velocities) are made when it meets its parameters. A variable rebound
// since to another shape or dtype (w = kiln::variable(...)) no longer fits them; the update reads and writes every
// slot over the parameter's elements, so that is refused before any parameter changes.
inline void check_slots(const std::vector<variable*>& params, const std::vector<tensor>& slots, const char* who) {
    for (std::size_t i = 0; i < params.size() && i < slots.size(); ++i) {
        const tensor& p = *params[i];
        const tensor& slot = slots[i];
        if (slot.dtype() == p.dtype() && slot.shape() == p.shape()) [[likely]] continue;  // (every step: no text made)
        const std::string head = std::string("in 'optim::") + who + "': parameter " + std::to_string(i);
        const std::string fix = " (the variable was rebound after the optimizer made its slots; make the optimizer again)";
        if (slot.dtype() != p.dtype())
            throw dtype_error("kiln: dtype_error " + head + " is " + std::string(name(p.dtype())) + " but its optimizer slots are " +
                              std::string(name(slot.dtype())) + fix);
        throw shape_error("kiln: shape_error " + head + " has shape " + to_string(p.shape()) + " but its optimizer slots have " +
                          to_string(slot.shape()) + fix);
    }
}

// Runs roots over leaves (indexed_leaf<K, T>, K naming `inputs[K]`) into `outputs`, all of one shape: one pass.
// Outputs may be inputs too: each position is read before it is written.
// (Pointers, not tensor copies: a step touches no reference count.)
template <std::size_t I, std::size_t O, class... Roots>
void fused_update(const std::array<const tensor*, I>& inputs, const std::array<tensor*, O>& outputs, const Roots&... roots) {
    using namespace kiln::detail;
    using list = unique_nodes_t<Roots...>;
    const device dev = outputs[0]->device();
    for (const tensor* t : inputs)
        if (!(t->device() == dev)) throw_device_mismatch("optimizer step", dev, t->device());
#if KILN_HAS_GPU
    if (dev.type != device_type::cpu) {
        // On the GPU: the parameter and its slots in one kernel.
        auto bound = [&]<class... L>(types<L...>) {
            return std::tuple<strided<const typename L::value_type>...>(
                strided_of<typename L::value_type>(*inputs[leaf_position<L>::value])...);
        }(leaves_t<list>{});
        auto outs = [&]<std::size_t... J>(std::index_sequence<J...>) {
            return std::tuple<strided<root_type_t<Roots>>...>(strided_out<root_type_t<Roots>>(*outputs[J])...);
        }(std::index_sequence_for<Roots...>{});
        const backend::gpu_memory::device_scope on(dev.index);
        backend::thrust_device::run_elementwise_roots(outs, bound, roots...);
        return;
    }
#endif
    using loop = fused_loop<list, Roots...>;
    const bool contiguous = [&] {
        const dims& shape = outputs[0]->shape();
        for (const tensor* t : inputs)
            if (!t->is_contiguous() || !(t->shape() == shape)) return false;
        for (const tensor* t : outputs)
            if (!t->is_contiguous() || !(t->shape() == shape)) return false;
        return true;
    }();
    if (contiguous) {
        // The common case (a parameter, its gradient and its slots, each dense, of one shape): the flat loop on
        // raw pointers, as eager ops run, with no views to build.
        const auto lp = [&]<class... L>(types<L...>) {
            return std::tuple<const typename L::value_type*...>(
                static_cast<const typename L::value_type*>(inputs[leaf_position<L>::value]->raw_data())...);
        }(leaves_t<list>{});
        const auto op = [&]<std::size_t... J>(std::index_sequence<J...>) {
            return std::tuple<root_type_t<Roots>*...>(static_cast<root_type_t<Roots>*>(outputs[J]->raw_data())...);
        }(std::index_sequence_for<Roots...>{});
        loop::run_flat_ptrs(root_pack<Roots...>(roots...), lp, op, outputs[0]->numel());
        return;
    }
    auto bound = [&]<class... L>(types<L...>) {
        return std::tuple<strided<const typename L::value_type>...>(
            strided_of<typename L::value_type>(*inputs[leaf_position<L>::value])...);
    }(leaves_t<list>{});
    auto outs = [&]<std::size_t... J>(std::index_sequence<J...>) {
        return typename loop::outs_t{strided_out<root_type_t<Roots>>(*outputs[J])...};
    }(std::index_sequence_for<Roots...>{});
    loop::run(root_pack<Roots...>(roots...), bound, outs, outputs[0]->shape());
}

// Calls f.template operator()<T>(i, parameter, gradient) for each parameter, T its floating element type; the
// gradient is converted to the parameter's dtype and made contiguous (gradients may be broadcast views).
template <class F>
void for_each_parameter(const std::vector<variable*>& params, const std::vector<tensor>& grads, const char* who, F&& f) {
    check_grads(params, grads, who);
    for (std::size_t i = 0; i < params.size(); ++i) {
        tensor& p = *params[i];
        auto with = [&](const tensor& g) {
            kiln::detail::dispatch(p.dtype(), [&]<class T>() {
                if constexpr (std::is_floating_point_v<T>) f.template operator()<T>(i, p, g);
                else throw dtype_error(std::string("kiln: dtype_error in 'optim::") + who + "': parameters must be float32 or float64");
            });
        };
        const tensor& given = grads[i];
        if (given.dtype() == p.dtype() && given.is_contiguous()) with(given);  // (the common case: no copy of the handle)
        else with(given.to(p.dtype()).contiguous());
    }
}

// An optimizer step while kiln::function traces: one effect that writes every parameter, with the parameters and
// then the gradients as inputs; `run` takes the step with real gradients each time the function runs.
// With `host` and `device` (see kiln::detail::op_params::host_part), a CUDA graph may record the step: `host` moves
// the step count on at each call, `device(grads)` queues the update that reads what `host` wrote.
// Empties a vector when the scope ends (an exception included). (A class at namespace scope: clang 19 reports a
// local class's destructor inside a generic lambda as an undefined inline function, -Wundefined-inline.)
struct clear_on_exit {
    std::vector<tensor>& v;
    ~clear_on_exit() { v.clear(); }
};

template <class Run>
void trace_step(const std::vector<variable*>& params, const std::vector<tensor>& grads, const char* op, std::string attrs,
                Run run, std::function<void()> host = nullptr,
                std::function<void(const std::vector<tensor>&)> device = nullptr) {
    std::vector<tensor> ins;
    for (variable* p : params) ins.push_back(*p);
    for (const tensor& g : grads) ins.push_back(g);
    const std::size_t n = params.size();
    auto with_grads = [n](auto&& f) {
        return [f, n](std::span<const tensor> in, auto) {
            thread_local std::vector<tensor> grads;  // (kept: a replayed step allocates nothing here)
            grads.assign(in.begin() + static_cast<std::ptrdiff_t>(n), in.end());
            const clear_on_exit clear{grads};
            f(grads);
        };
    };
    kiln::detail::op_params params_;
    params_.borrows_inputs = true;  // (the step reads the gradients and lets them go: with_grads clears its copies)
    if (host && device) {
        params_.host_part = std::move(host);
        params_.device_part = with_grads(std::move(device));
    }
    kiln::detail::active_tracer->record_effect(op, std::move(attrs), ins, with_grads(run), n, std::move(params_));
}

// Hyperparameters are checked when an optimizer is made, as PyTorch's are: the learning rate and each named value
// finite and non-negative (beta1 and beta2 below 1 as well).
struct hyperparameter {
    const char* name;
    double value;
    bool below_one;
};
inline void check_hyperparameters(const char* who, double lr, const std::vector<hyperparameter>& others) {
    auto fail = [&](const std::string& what) {
        throw value_error(std::string("kiln: value_error in 'optim::") + who + "': " + what);
    };
    auto text = [](double v) {  // the shortest form that reads back as v: -0.1, not -0.10000000000000001
        char buf[32];
        return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    };
    if (!(std::isfinite(lr) && lr >= 0)) fail("the learning rate must be finite and non-negative, got " + text(lr));
    for (const hyperparameter& h : others) {
        if (!(std::isfinite(h.value) && h.value >= 0))
            fail(std::string(h.name) + " must be finite and non-negative, got " + text(h.value));
        if (h.below_one && !(h.value < 1)) fail(std::string(h.name) + " must be in [0, 1), got " + text(h.value));
    }
}

// apply_gradients(grads, params): an optimizer made without parameters adopts the first ones it is given (its
// slots are made then); later calls must pass the same parameters in the same order.
inline bool adopt_parameters(std::vector<variable*>& mine, const std::vector<variable*>& given, const char* who) {
    if (mine.empty()) {
        for (std::size_t i = 0; i < given.size(); ++i)
            if (!given[i])
                throw value_error(std::string("kiln: value_error in 'optim::") + who + "::apply_gradients': parameter " +
                                  std::to_string(i) + " is a null pointer");
        mine = given;
        return true;
    }
    if (mine != given)
        throw value_error(std::string("kiln: value_error in 'optim::") + who + "::apply_gradients': the parameters differ from the " +
                          std::to_string(mine.size()) + " this optimizer updates (an optimizer keeps one set of " +
                          "parameters and their slots; make one optimizer per set)");
    return false;
}

}  // namespace detail

// Stochastic gradient descent, with optional momentum: v = momentum * v + g; p -= lr * v.
class sgd {
public:
    sgd(std::vector<variable*> params, double lr, double momentum = 0.0) : params_(std::move(params)), lr_(lr), momentum_(momentum) {
        detail::check_hyperparameters("sgd", lr, {{"momentum", momentum, false}});
        make_slots();
    }
    // Without parameters: they come with the first apply_gradients(grads, params), as in TensorFlow.
    explicit sgd(double lr, double momentum = 0.0) : lr_(lr), momentum_(momentum) {
        detail::check_hyperparameters("sgd", lr, {{"momentum", momentum, false}});
    }

    // (Templates on an unused int, called without brackets: the update kernels compile where a step is taken.)
    template <int N = 0>
    void apply_gradients(const std::vector<tensor>& grads, const std::vector<variable*>& params) {
        if (detail::adopt_parameters(params_, params, "sgd")) make_slots();
        step<N>(grads);
    }

    template <int N = 0>
    void step(const std::vector<tensor>& grads) { step_impl<N>(grads); }

    // Checkpoints (kiln/io/checkpoint.hpp): the optimizer's kind, its state by name ("velocity/0", ...: tensors that
    // traced steps read where they live, so restore() writes into them), and restore() of that state.
    static constexpr std::string_view kind() { return "sgd"; }
    // The learning rate, settable between steps (a schedule: set_learning_rate(schedule(step))). A traced step reads
    // it at every call, so a new rate needs no new trace. A rate that is negative or not finite is a value_error.
    double learning_rate() const noexcept { return lr_; }
    void set_learning_rate(double lr) {
        detail::check_hyperparameters("sgd", lr, {});
        lr_ = lr;
    }
    template <int N = 0>
    std::string hyperparameters() const {
        return "lr=" + kiln::detail::number_text(lr_) + " momentum=" + kiln::detail::number_text(momentum_);
    }
    // Adopts `params` as apply_gradients does (an optimizer made without parameters makes its slots now).
    void bind(const std::vector<variable*>& params) {
        if (detail::adopt_parameters(params_, params, "sgd")) make_slots();
    }
    template <int N = 0>
    std::map<std::string, tensor> state() const {
        std::map<std::string, tensor> s;
        if (momentum_ != 0.0)
            for (std::size_t i = 0; i < velocity_.size(); ++i) s.emplace("velocity/" + std::to_string(i), velocity_[i]);
        return s;
    }
    template <int N = 0>
    void restore(const std::map<std::string, tensor>& s) {
        if (momentum_ != 0.0)
            for (std::size_t i = 0; i < velocity_.size(); ++i) velocity_[i].copy_(s.at("velocity/" + std::to_string(i)));
    }

private:
    // (Defined below the class, not inline, so that KILN_SEPARATE_KERNELS can compile it once: a member defined
    // in its class is inline, and nvcc rejects a default template argument on a member defined outside it.)
    template <int N>
    void step_impl(const std::vector<tensor>& grads);

    void make_slots() {
        const kiln::detail::untraced_scope with_values;  // (the first step may be traced: the slots outlive the trace)
        velocity_.clear();
        for (variable* p : params_) velocity_.push_back(zeros(p->shape(), p->dtype(), p->device()));
    }

    std::vector<variable*> params_;
    std::vector<tensor> velocity_;
    double lr_, momentum_;
};

template <int N>
void sgd::step_impl(const std::vector<tensor>& grads) {
    if (momentum_ != 0.0) detail::check_slots(params_, velocity_, "sgd");
    if (kiln::detail::active_tracer) [[unlikely]] {
        detail::check_grads(params_, grads, "sgd");
        detail::trace_step(params_, grads, "sgd_step", "lr=" + kiln::detail::number_text(lr_) + " momentum=" + kiln::detail::number_text(momentum_),
                           [this](const std::vector<tensor>& g) { step<N>(g); });
        return;
    }
    detail::for_each_parameter(params_, grads, "sgd", [&]<class T>(std::size_t i, tensor& p, const tensor& g) {
        // The update graphs of graph mode's sgd_rule and momentum_rule.
        if (momentum_ == 0.0)
            std::apply([&](const auto&... roots) { detail::fused_update(std::array<const tensor*, 2>{&p, &g}, std::array<tensor*, 1>{&p}, roots...); },
                       sgd_rule{lr_}.template roots<T>());
        else
            std::apply([&](const auto&... roots) { detail::fused_update(std::array<const tensor*, 3>{&p, &g, &velocity_[i]},
                                                                     std::array<tensor*, 2>{&p, &velocity_[i]}, roots...); },
                       momentum_rule{lr_, momentum_}.template roots<T>());
    });
}

// Adam (Kingma and Ba), with bias correction folded into the step size.
class adam {
public:
    adam(std::vector<variable*> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
        : params_(std::move(params)), rule_{lr, beta1, beta2, eps} {
        detail::check_hyperparameters("adam", lr, adam_ranges(beta1, beta2, eps));
        make_slots();
    }
    // Without parameters: they come with the first apply_gradients(grads, params), as in TensorFlow.
    explicit adam(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8)
        : rule_{lr, beta1, beta2, eps} {
        detail::check_hyperparameters("adam", lr, adam_ranges(beta1, beta2, eps));
    }

    // (Templates on an unused int, called without brackets: the update kernels compile where a step is taken.)
    template <int N = 0>
    void apply_gradients(const std::vector<tensor>& grads, const std::vector<variable*>& params) {
        if (detail::adopt_parameters(params_, params, "adam")) make_slots();
        step<N>(grads);
    }

    template <int N = 0>
    void step(const std::vector<tensor>& grads) { step_impl<N>(grads); }

    static std::vector<detail::hyperparameter> adam_ranges(double beta1, double beta2, double eps) {
        return {{"beta1", beta1, true}, {"beta2", beta2, true}, {"eps", eps, false}};
    }
    // The decoupled weight decay (optim::adamw's; 0 for Adam).
    double weight_decay() const noexcept { return rule_.weight_decay; }

    // Checkpoints (kiln/io/checkpoint.hpp): as sgd's. The step count is the int64 "step".
    static constexpr std::string_view kind() { return "adam"; }
    // The learning rate, settable between steps, as sgd's (a traced step, and a step replayed as a CUDA graph, read it
    // at every call).
    double learning_rate() const noexcept { return rule_.lr; }
    void set_learning_rate(double lr) {
        detail::check_hyperparameters("adam", lr, {});
        rule_.lr = lr;
    }
    template <int N = 0>
    std::string hyperparameters() const {
        return "lr=" + kiln::detail::number_text(rule_.lr) + " beta1=" + kiln::detail::number_text(rule_.beta1) +
               " beta2=" + kiln::detail::number_text(rule_.beta2) + " eps=" + kiln::detail::number_text(rule_.eps) +
               (rule_.weight_decay != 0 ? " weight_decay=" + kiln::detail::number_text(rule_.weight_decay) : std::string());
    }
    void bind(const std::vector<variable*>& params) {
        if (detail::adopt_parameters(params_, params, "adam")) make_slots();
    }
    int steps() const noexcept { return t_; }
    template <int N = 0>
    std::map<std::string, tensor> state() const {
        std::map<std::string, tensor> s;
        for (std::size_t i = 0; i < m_.size(); ++i) {
            s.emplace("m/" + std::to_string(i), m_[i]);
            s.emplace("v/" + std::to_string(i), v_[i]);
        }
        s.emplace("step", tensor(static_cast<std::int64_t>(t_)));
        return s;
    }
    template <int N = 0>
    void restore(const std::map<std::string, tensor>& s) {
        for (std::size_t i = 0; i < m_.size(); ++i) {
            m_[i].copy_(s.at("m/" + std::to_string(i)));
            v_[i].copy_(s.at("v/" + std::to_string(i)));
        }
        const std::int64_t t = s.at("step").contiguous().template data<std::int64_t>()[0];
        if (t < 0 || t > std::numeric_limits<int>::max())
            throw value_error("kiln: value_error in 'optim::adam::restore': step count " + std::to_string(t) + " is out of range");
        t_ = static_cast<int>(t);
        rule_.resume(t_);
    }

protected:
    // optim::adamw's: the hyperparameters checked under its name, and the decoupled weight decay.
    adam(const char* who, std::vector<variable*> params, bool bound, double lr, double beta1, double beta2, double eps, double weight_decay)
        : params_(std::move(params)), rule_{lr, beta1, beta2, eps, weight_decay} {
        std::vector<detail::hyperparameter> ranges = adam_ranges(beta1, beta2, eps);
        ranges.push_back({"weight_decay", weight_decay, false});
        detail::check_hyperparameters(who, lr, ranges);
        if (bound) make_slots();
    }

private:
    // (Defined below the class, not inline, so that KILN_SEPARATE_KERNELS can compile it once: a member defined
    // in its class is inline, and nvcc rejects a default template argument on a member defined outside it.)
    template <int N>
    void step_impl(const std::vector<tensor>& grads);

    void make_slots() {
        const kiln::detail::untraced_scope with_values;  // (the first step may be traced: the slots outlive the trace)
        m_.clear();
        v_.clear();
        coef_.clear();
        for (variable* p : params_) {
            m_.push_back(zeros(p->shape(), p->dtype(), p->device()));
            v_.push_back(zeros(p->shape(), p->dtype(), p->device()));
            // On a device: where a recorded step reads its step size and eps_hat (one pair per dtype and device).
            std::optional<tensor> c;
            if (p->device().type != device_type::cpu) {
                for (std::size_t j = 0; j < coef_.size(); ++j)
                    if (coef_[j] && coef_[j]->dtype() == p->dtype() && coef_[j]->device() == p->device()) c = coef_[j];
                if (!c) c = zeros({2}, p->dtype(), p->device());
            }
            coef_.push_back(std::move(c));
        }
    }

    // This step's step size and eps_hat into coef_, queued on the device.
    void write_coefficients() {
        for (std::size_t i = 0; i < coef_.size(); ++i) {
            if (!coef_[i]) continue;
            bool first = true;
            for (std::size_t j = 0; j < i; ++j)
                first = first && !(coef_[j] && coef_[j]->storage_handle() == coef_[i]->storage_handle());
            if (!first) continue;
#if KILN_HAS_GPU
            const tensor& c = *coef_[i];
            kiln::detail::dispatch(c.dtype(), [&]<class T>() {
                if constexpr (std::is_floating_point_v<T>) {
                    const T v[2] = {static_cast<T>(rule_.step), static_cast<T>(rule_.eps_hat)};
                    backend::gpu_memory::from_host_queued(c.raw_data(), v, sizeof v, c.device().index);
                }
            });
#endif
        }
    }

    // The update of step_impl with the step size and eps_hat read from coef_ (what a CUDA graph records).
    template <int N>
    void update_reading_coefficients(const std::vector<tensor>& grads) {
        detail::for_each_parameter(params_, grads, "adam", [&]<class T>(std::size_t i, tensor& p, const tensor& g) {
            const tensor step_size = coef_[i]->slice(0, 0, 1).broadcast_to(p.shape());
            const tensor eps_hat = coef_[i]->slice(0, 1, 2).broadcast_to(p.shape());
            std::apply([&](const auto&... roots) {
                detail::fused_update(std::array<const tensor*, 6>{&p, &g, &m_[i], &v_[i], &step_size, &eps_hat},
                                     std::array<tensor*, 3>{&p, &m_[i], &v_[i]}, roots...);
            }, rule_.template roots_read<T>());
        });
    }

    std::vector<variable*> params_;
    std::vector<tensor> m_, v_;
    std::vector<std::optional<tensor>> coef_;  // per parameter on a device (shared by those of one dtype and device)
    adam_rule rule_;
    int t_ = 0;
};

template <int N>
void adam::step_impl(const std::vector<tensor>& grads) {
    detail::check_grads(params_, grads, "adam");  // before the step count moves
    detail::check_slots(params_, m_, "adam");
    if (kiln::detail::active_tracer) [[unlikely]] {
        // Traced: the step (its count included) happens each time the function runs. On a CUDA device the update may
        // be recorded in a CUDA graph: the count then moves on the host at each call, and the update reads its step
        // size and eps_hat from device memory written before each replay (coef_).
        // (AdamW's decay, 1 - lr * weight_decay, would be a number in the recorded kernel while the rate may change.)
        bool recordable = !params_.empty() && rule_.weight_decay == 0;
        for (std::size_t i = 0; i < params_.size(); ++i)
            recordable = recordable && i < coef_.size() && coef_[i] && coef_[i]->device() == params_[i]->device() &&
                         params_[i]->device().type == device_type::cuda;
        std::function<void()> host;
        std::function<void(const std::vector<tensor>&)> device;
#if !KILN_HAS_GPU
        recordable = false;  // (no device here: the recorded update is not compiled)
#else
        if (recordable) {
            host = [this] {
                rule_.next_step(++t_);
                write_coefficients();
            };
            device = [this](const std::vector<tensor>& g) { update_reading_coefficients<N>(g); };
        }
#endif
        detail::trace_step(params_, grads, "adam_step", hyperparameters<N>(),
                           [this](const std::vector<tensor>& g) { step<N>(g); }, std::move(host), std::move(device));
        return;
    }
    rule_.next_step(++t_);
    // The update's expression, built once per dtype for this step (not once per parameter: a tree of numbers
    // copied field by field).
    // (rule_ as a dependent type: a decltype on rule_ itself compiles roots' bodies in every translation unit.)
    const typename kiln::detail::dependent<N, adam_rule>::type& rule = rule_;
    std::optional<decltype(rule.template roots<float>())> roots_f;
    std::optional<decltype(rule.template roots<double>())> roots_d;
    detail::for_each_parameter(params_, grads, "adam", [&]<class T>(std::size_t i, tensor& p, const tensor& g) {
        auto& roots = *[&] {
            if constexpr (std::is_same_v<T, float>) return &roots_f;
            else return &roots_d;
        }();
        if (!roots) roots.emplace(rule.template roots<T>());
        // The same update graph as graph mode's kiln::optim::minimize with adam_rule.
        std::apply([&](const auto&... rs) { detail::fused_update(std::array<const tensor*, 4>{&p, &g, &m_[i], &v_[i]},
                                                              std::array<tensor*, 3>{&p, &m_[i], &v_[i]}, rs...); },
                   *roots);
    });
}

// AdamW (Loshchilov and Hutter; PyTorch's torch.optim.AdamW, its defaults included): Adam whose step first
// multiplies each parameter by 1 - lr * weight_decay (decoupled weight decay: the decay is not in the gradient, so
// the moments do not see it). Everything else is adam's: the fused update (one pass per parameter), slots,
// learning rate settable between steps (the decay follows it), checkpoints (kind "adamw"), tracing. A traced AdamW
// step on a GPU is not captured in a CUDA graph (its host code runs at each call). Graph mode takes the same rule:
// kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3, .weight_decay = 1e-2}).
class adamw : public adam {
public:
    adamw(std::vector<variable*> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8,
          double weight_decay = 1e-2)
        : adam("adamw", std::move(params), true, lr, beta1, beta2, eps, weight_decay) {}
    // Without parameters: they come with the first apply_gradients(grads, params).
    explicit adamw(double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8, double weight_decay = 1e-2)
        : adam("adamw", {}, false, lr, beta1, beta2, eps, weight_decay) {}
    static constexpr std::string_view kind() { return "adamw"; }
};

// TensorFlow's tf.clip_by_global_norm (what PyTorch's clip_grad_norm_ computes): with norm = sqrt(the sum of every
// squared element of every gradient), each gradient times max_norm / max(norm, max_norm), so nothing changes while
// norm <= max_norm (the factor is exactly 1). A norm that is NaN or infinite makes every gradient NaN, as in
// TensorFlow. Written with the vocabulary's ops, so it traces inside a kiln::function step. `global_norm`, when
// given, receives the norm before clipping (a float64 rank-0 tensor).
template <int N = 0>
std::vector<tensor> clip_by_global_norm(const std::vector<tensor>& grads, double max_norm, tensor* global_norm = nullptr) {
    if (!(max_norm > 0) || !std::isfinite(max_norm)) {
        char got[32];
        std::snprintf(got, sizeof got, "%g", max_norm);
        throw value_error(std::string("kiln: value_error in 'optim::clip_by_global_norm': max_norm must be positive and finite, got ") + got);
    }
    using dt = kiln::detail::dependent_tensor<N>;
    std::optional<dt> total;
    for (std::size_t i = 0; i < grads.size(); ++i) {
        const dt& g = grads[i];
        g.check_valid("optim::clip_by_global_norm");
        if (!kiln::detail::is_floating(g.dtype()))
            throw dtype_error("kiln: dtype_error in 'optim::clip_by_global_norm': gradient " + std::to_string(i) + " is " +
                              std::string(name(g.dtype())) + "; gradients are floating");
        const dt squares = kiln::sum<N>(g * g).to(dtype::float64);
        total = total ? dt(*total + squares) : squares;
    }
    const dt norm = total ? dt(kiln::sqrt(*total)) : dt(zeros({}, dtype::float64));
    // max_norm / max(norm, max_norm), plus (norm - norm): 0 for a finite norm, NaN for an infinite or NaN one.
    const dt scale = max_norm / kiln::maximum(norm, max_norm) + (norm - norm);
    if (global_norm) *global_norm = norm;
    std::vector<tensor> out;
    out.reserve(grads.size());
    for (const tensor& g_in : grads) {
        const dt& g = g_in;
        out.push_back(g * scale.to(g.dtype()));
    }
    return out;
}

// Learning-rate schedules: the rate for a step (0, 1, ...), as Keras's schedules and PyTorch's schedulers compute
// it; pass it on with opt.set_learning_rate(schedule(step)). Each checks its numbers when it is called: a step below
// 0 or a schedule that is not finite and non-negative is a value_error.
namespace detail {
inline void check_schedule(const char* who, bool ok, const std::string& what) {
    if (!ok) throw value_error(std::string("kiln: value_error in 'optim::") + who + "': " + what);
}
}  // namespace detail

// initial * rate^(step / decay_steps), the exponent floored with staircase (Keras's ExponentialDecay).
struct exponential_decay {
    double initial;
    std::int64_t decay_steps;
    double rate;
    bool staircase = false;
    double operator()(std::int64_t step) const {
        detail::check_schedule("exponential_decay", std::isfinite(initial) && initial >= 0 && decay_steps > 0 && std::isfinite(rate) && rate > 0,
                               "needs a finite, non-negative initial rate, decay_steps > 0 and a positive rate");
        detail::check_schedule("exponential_decay", step >= 0, "the step must not be negative, got " + std::to_string(step));
        const double e = static_cast<double>(step) / static_cast<double>(decay_steps);
        return initial * std::pow(rate, staircase ? std::floor(e) : e);
    }
};

// initial * ((1 - alpha) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2 + alpha) (Keras's CosineDecay;
// PyTorch's CosineAnnealingLR with eta_min = alpha * initial): from initial down to alpha * initial, then level.
struct cosine_decay {
    double initial;
    std::int64_t decay_steps;
    double alpha = 0.0;
    double operator()(std::int64_t step) const {
        detail::check_schedule("cosine_decay", std::isfinite(initial) && initial >= 0 && decay_steps > 0 && alpha >= 0 && alpha <= 1,
                               "needs a finite, non-negative initial rate, decay_steps > 0 and alpha in [0, 1]");
        detail::check_schedule("cosine_decay", step >= 0, "the step must not be negative, got " + std::to_string(step));
        const double t = static_cast<double>(std::min(step, decay_steps)) / static_cast<double>(decay_steps);
        return initial * ((1 - alpha) * 0.5 * (1 + std::cos(3.141592653589793 * t)) + alpha);
    }
};

// initial * gamma^floor(step / step_size) (PyTorch's StepLR).
struct step_decay {
    double initial;
    std::int64_t step_size;
    double gamma = 0.1;
    double operator()(std::int64_t step) const {
        detail::check_schedule("step_decay", std::isfinite(initial) && initial >= 0 && step_size > 0 && std::isfinite(gamma) && gamma >= 0,
                               "needs a finite, non-negative initial rate, step_size > 0 and a finite, non-negative gamma");
        detail::check_schedule("step_decay", step >= 0, "the step must not be negative, got " + std::to_string(step));
        return initial * std::pow(gamma, static_cast<double>(step / step_size));
    }
};

}  // namespace kiln::optim
