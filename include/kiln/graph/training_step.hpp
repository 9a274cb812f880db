#pragma once
// Graph mode's training steps: kiln::optim::minimize(loss, rule) makes a training_step (a type: the loss, its rule and
// the parameters it trains), and detail::step_state is what a kiln::session keeps for one: the plan's workspace, the
// parameters' gradients, the rule's slots and step count, with their checkpoints (save/restore) and device moves.
// The session (graph/session.hpp) runs the steps.
#include <array>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <tuple>

#include "../eager/convert.hpp"
#include "../eager/tensor.hpp"
#if KILN_HAS_GPU
#include "../eager/tape.hpp"  // tensor::to(device) records on tapes: its definition
#endif
#include "grad.hpp"
#include "plan.hpp"
#include "rules.hpp"

namespace kiln {

template <class Loss, class Rule, class Params>
struct training_step;

namespace optim {

// A training step: minimize(loss, rule) updates every parameter of the loss; run it with session::run.
template <class Loss, class Rule>
constexpr auto minimize(const Loss& loss, Rule rule) {
    static_assert(is_graph_v<Loss>, "kiln::optim::minimize: the loss must be a graph-mode expression.");
    static_assert(std::is_same_v<kiln::detail::shape_of_t<Loss>, shape<>>,
                  "kiln::optim::minimize: the loss must be a scalar (static shape ()); reduce it with kiln::mean or "
                  "kiln::sum.");
    static_assert(kiln::detail::is_pure<Loss>::value,
                  "kiln::optim::minimize: the loss holds a run-time scalar (such as 0.5f * x); write it as a constant "
                  "(0.5_c) or feed it as an input, so that the loss can be differentiated.");
    using leaves = kiln::detail::leaves_t<kiln::detail::unique_nodes_t<Loss>>;
    using params = decltype([]<class... L>(kiln::detail::types<L...>) {
        return (kiln::detail::types<>{} + ... + std::conditional_t<is_param_v<L>, kiln::detail::types<L>, kiln::detail::types<>>{});
    }(leaves{}));
    static_assert(params::size > 0, "kiln::optim::minimize: the loss has no kiln::param to train.");
    return training_step<Loss, Rule, params>{loss, rule};
}

}  // namespace optim

namespace detail {
template <class... A, class... B>
constexpr types<A..., B...> operator+(types<A...>, types<B...>) {
    return {};
}
}  // namespace detail

template <class Loss, class Rule, class... Params>
struct training_step<Loss, Rule, detail::types<Params...>> {
    Loss loss;
    Rule rule;
    // The gradient of the loss with respect to each parameter, as expressions (for inspection).
    static constexpr auto gradients() { return detail::as_tuple(gradient_types()); }
    // The same as detail::grad_types (kiln's own uses: no std::tuple of large expression types is built).
    static constexpr auto gradient_types() { return detail::gradients(Loss{}, Params{}...); }
};

namespace detail {

// t on device d (t itself when it is there). Without the GPU device every tensor is on the CPU: graph-only
// programs then compile no device move (nor the tape, which tensor::to records on).
inline tensor session_on_device(const tensor& t, kiln::device d) {
#if KILN_HAS_GPU
    return t.to(d);
#else
    (void)d;
    return t;
#endif
}

// dst = src's values (dst's dtype and shape), on either device.
inline void eager_copy(tensor& dst, const tensor& src) {
#if KILN_HAS_GPU
    if (!dst.is_cpu() || !src.is_cpu()) {  // a device's copy (the source moved there first)
        const tensor from = src.to(dst.device());
        detail::copy_into(dst, from);
        return;
    }
#endif
    kiln::detail::dispatch(dst.dtype(), [&]<class U>() {
        detail::strided<const U> v;
        detail::fill_strided(v, src);
        detail::copy_row_major(dst.template data<U>(), v);
    });
}

// What a session keeps for one expression or training step (its cache, by type).
struct session_cache {
    virtual ~session_cache() = default;
    // A training step's state (checkpoints): its rule's kind (empty for other plans), its slots and step count.
    virtual std::string_view optimizer() const { return {}; }
    virtual void save(std::map<std::string, tensor>&) const {}
    virtual void restore(const std::map<std::string, tensor>&, const std::string&, const char*) {}
    // Moving the session (to(device)): copies what must move, then drops what is made again (workspaces).
    virtual void prepare_move(kiln::device) {}
    virtual void commit_move() = 0;
};

// A plan's cached state in a session: its workspace. One type per plan (the cache's key), whatever the feeds' types.
template <class Plan>
struct plan_session_state : session_cache {
    typename Plan::workspace ws;
    bool declared = false;
    void commit_move() override { ws = typename Plan::workspace{}; }
};

// A training step's state: its plan's workspace, its parameters, gradients and slots, its rule and step count.
template <class Loss, class Rule, class... Params>
struct step_state : session_cache {
    using step_t = training_step<Loss, Rule, types<Params...>>;
    using T = root_type_t<Loss>;
    static constexpr std::size_t slot_count = Rule::slots;
    static constexpr auto grads_of() { return step_t::gradient_types(); }
    using plan_t = decltype([]<class... G>(grad_types<G...>) { return plan<Loss, G...>{}; }(grads_of()));
    typename plan_t::workspace ws;
    std::array<tensor*, sizeof...(Params)> params{};
    std::array<aligned_buffer<T>, sizeof...(Params)> grad_buffers;
    std::array<device_block, sizeof...(Params)> grad_blocks;  // the same on a device
    device_block loss_block;                                   // a loss that is not a slot, on a device
    device_block coef_block;  // on a device: a recorded update's step size and eps_hat (session::record_update)
    std::array<strided<const T>, sizeof...(Params)> grads;  // a slot, or a grad buffer
    std::array<std::array<tensor, Rule::slots>, sizeof...(Params)> slots;
    Rule rule;
    int t = 0;

    std::string_view optimizer() const override { return t > 0 ? Rule::kind : std::string_view{}; }
    std::array<std::array<tensor, Rule::slots>, sizeof...(Params)> moving;
    void prepare_move(kiln::device where) override {
        for (std::size_t p = 0; p < sizeof...(Params); ++p)
            for (std::size_t k = 0; k != slot_count; ++k) moving[p][k] = session_on_device(slots[p][k], where);
    }
    void commit_move() override {
        slots = std::move(moving);
        moving = {};
        ws = typename plan_t::workspace{};
        for (auto& b : grad_buffers) b = {};
        for (auto& b : grad_blocks) b.reset();
        loss_block.reset();
        coef_block.reset();
    }
    static std::string slot_name(std::size_t p, std::size_t k) {
        constexpr std::array<std::string_view, sizeof...(Params)> names{Params::name.view()...};
        return "optimizer/" + std::string(names[p]) + "/" + std::to_string(k);
    }
    void save(std::map<std::string, tensor>& out) const override {
        for (std::size_t p = 0; p < sizeof...(Params); ++p)
            for (std::size_t k = 0; k != slot_count; ++k)
                out.emplace(slot_name(p, k), session_on_device(slots[p][k], kiln::cpu));  // (the tensor itself on the CPU)
        out.emplace("optimizer/step", tensor(static_cast<std::int64_t>(t)));
    }
    void restore(const std::map<std::string, tensor>& in, const std::string& file, const char* entry) override {
        auto fail = [&](const std::string& what) {
            throw file_error("kiln: file_error in '" + std::string(entry) + "': '" + file + "': " + what);
        };
        const std::size_t expected = sizeof...(Params) * static_cast<std::size_t>(Rule::slots) + 1;
        const auto step_it = in.find("optimizer/step");
        if (step_it == in.end() || step_it->second.dtype() != int64 || step_it->second.dim() != 0)
            fail("'optimizer/step' is missing or is not an int64 scalar");
        const std::int64_t steps = step_it->second.template data<std::int64_t>()[0];
        if (steps < 1 || steps > std::numeric_limits<int>::max())
            fail("'optimizer/step' holds " + std::to_string(steps) + ", not a step count");
        for (std::size_t p = 0; p < sizeof...(Params); ++p)
            for (std::size_t k = 0; k != slot_count; ++k) {
                const auto it = in.find(slot_name(p, k));
                if (it == in.end()) fail("no tensor '" + slot_name(p, k) + "' for the training step's parameters");
                if (it->second.dtype() != slots[p][k].dtype() || !(it->second.shape() == slots[p][k].shape()))
                    fail("tensor '" + slot_name(p, k) + "' is " + to_string(it->second.shape()) + " " +
                         std::string(kiln::name(it->second.dtype())) + ", but the slot is " +
                         to_string(slots[p][k].shape()) + " " + std::string(kiln::name(slots[p][k].dtype())));
            }
        if (in.size() != expected)
            fail("holds " + std::to_string(in.size()) + " optimizer tensors; the training step has " +
                 std::to_string(expected));
        for (std::size_t p = 0; p < sizeof...(Params); ++p)
            for (std::size_t k = 0; k != slot_count; ++k)
                eager_copy(slots[p][k], in.at(slot_name(p, k)));
        t = static_cast<int>(steps);
        rule.resume(t);
    }
};

}  // namespace detail
}  // namespace kiln
