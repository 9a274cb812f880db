#pragma once
// Reverse-mode gradients in eager mode: kiln::gradient_tape records the ops applied to watched tensors and
// trainable variables, and gradient() walks them backwards with each op's rule from the vocabulary. Tapes nest:
// while one tape computes a gradient, the tapes around it record that computation, which gives higher derivatives.
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "elementwise.hpp"
#include "linalg.hpp"
#include "reduce.hpp"

namespace kiln {

class gradient_tape;

namespace detail {

inline thread_local std::vector<gradient_tape*> tape_stack;

// One recorded op: its tensor inputs, its output, and the map from the output's gradient to the inputs'.
struct tape_entry {
    std::vector<tensor> inputs;
    tensor output;
    std::function<std::vector<std::optional<tensor>>(const tensor& g)> backward;
};

}  // namespace detail

class gradient_tape {
public:
    // Starts recording on this thread until destroyed. A persistent tape allows several gradient() calls.
    explicit gradient_tape(bool persistent = false) : persistent_(persistent) {
        detail::tape_stack.push_back(this);
        ++detail::recording_tapes;
    }
    gradient_tape(const gradient_tape&) = delete;
    gradient_tape& operator=(const gradient_tape&) = delete;
    ~gradient_tape() { stop_recording(); }

    // Records ops on t from now on.
    void watch(const tensor& t) { watched_.insert(t.id()); }

    bool watches(const tensor& t) const { return t.trainable() || watched_.count(t.id()) > 0; }

    // Stops recording (gradient() still works on what was recorded).
    void stop_recording() {
        auto& st = detail::tape_stack;
        for (auto it = st.begin(); it != st.end(); ++it)
            if (*it == this) {
                st.erase(it);
                --detail::recording_tapes;
                break;
            }
    }

    // d target / d source for each source. A non-scalar target is summed first (its seed is ones). A source the
    // target does not depend on, or that this tape does not watch, gets zeros of its shape.
    std::vector<tensor> gradient(const tensor& target, const std::vector<tensor>& sources) {
        if (used_ && !persistent_)
            throw value_error("kiln::gradient_tape::gradient: a non-persistent tape computes gradients once; make it "
                              "with gradient_tape(true) to call gradient() again");
        used_ = true;
        // This tape must not record its own backward pass; the tapes around it do.
        const bool was_recording = pause();
        std::unordered_map<std::uint64_t, tensor> grads;
        grads.emplace(target.id(), full(target.shape(), 1.0, target.dtype()));
        for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
            auto found = grads.find(it->output.id());
            if (found == grads.end()) continue;
            const tensor g = found->second;
            const auto in_grads = it->backward(g);
            for (std::size_t i = 0; i < it->inputs.size(); ++i) {
                if (!in_grads[i]) continue;
                const std::uint64_t id = it->inputs[i].id();
                auto slot = grads.find(id);
                if (slot == grads.end()) grads.emplace(id, *in_grads[i]);
                else slot->second = slot->second + *in_grads[i];
            }
        }
        if (was_recording) resume();
        std::vector<tensor> out;
        for (const tensor& s : sources) {
            // Like TensorFlow, only watched sources have gradients; others get zeros.
            auto found = watches(s) ? grads.find(s.id()) : grads.end();
            out.push_back(found != grads.end() ? found->second : zeros(s.shape(), s.dtype()));
        }
        return out;
    }

    tensor gradient(const tensor& target, const tensor& source) { return gradient(target, std::vector<tensor>{source})[0]; }

    void record(const detail::tape_entry& e) { record(detail::tape_entry(e)); }

    // Used by the op hooks: records `e` when one of its inputs is watched; its output is then watched too.
    void record(detail::tape_entry&& e) {
        bool any = false;
        for (const tensor& t : e.inputs) any = any || watches(t);
        if (!any) return;
        watched_.insert(e.output.id());
        entries_.push_back(std::move(e));
    }

private:
    bool pause() {
        const auto& st = detail::tape_stack;
        const bool active = std::find(st.begin(), st.end(), this) != st.end();
        if (active) stop_recording();
        return active;
    }
    void resume() {
        detail::tape_stack.push_back(this);
        ++detail::recording_tapes;
    }

    bool persistent_;
    bool used_ = false;
    std::unordered_set<std::uint64_t> watched_;
    std::vector<detail::tape_entry> entries_;
};

namespace detail {

inline bool watched_by_a_tape(const tensor& t) {
    for (gradient_tape* tape : tape_stack)
        if (tape->watches(t)) return true;
    return false;
}

inline void record_entry(tape_entry e) {
    // The innermost tape takes the entry itself; outer tapes (nesting is rare) take copies.
    for (std::size_t i = 0; i + 1 < tape_stack.size(); ++i) tape_stack[i]->record(e);
    if (!tape_stack.empty()) tape_stack.back()->record(std::move(e));
}

// The gradient of a broadcast operand: summed over the dimensions it was repeated along, in its own shape.
inline tensor reduce_to(const tensor& g, const dims& shape) {
    if (g.shape() == shape) return g;
    std::vector<int> axes;
    const int lead = g.dim() - shape.rank;
    for (int i = 0; i < g.dim(); ++i)
        if (i < lead || (shape[i - lead] == 1 && g.shape()[i] != 1)) axes.push_back(i);
    tensor s = axes.empty() ? g : sum(g, axes, true);
    // Drop the leading dimensions that the operand did not have.
    return s.reshape(shape);
}

inline tensor scatter_slice(const tensor& source, const tensor& g, int axis, std::ptrdiff_t start, std::ptrdiff_t stop,
                            std::ptrdiff_t step) {
    tensor z = zeros(source.shape(), g.dtype());
    tensor part = z.slice(axis, start, stop, step);
    dispatch(g.dtype(), [&]<class T>() { run_eager_into(part, indexed_leaf<0, T>{}, g); });
    return z;
}

inline void record_view(const tensor& source, const tensor& view, std::function<tensor(const tensor&)> backward) {
    record_entry({{source}, view, [bw = std::move(backward)](const tensor& g) {
                      return std::vector<std::optional<tensor>>{bw(g)};
                  }});
}

// A gradient for operand `a` from an op's rule: reduced to a's shape and converted back to a's dtype.
template <class G>
std::optional<tensor> operand_gradient(const tensor& a, const G& g) {
    if constexpr (std::is_same_v<G, no_grad>) {
        return std::nullopt;
    } else if constexpr (std::is_same_v<G, tensor>) {
        if (!is_floating(a.dtype())) return std::nullopt;
        return reduce_to(g, a.shape()).to(a.dtype());
    } else {
        return std::nullopt;  // a number: the operand was constant in this op
    }
}

// Records Op(args...) -> y on the active tapes. Numbers among args are constants of the op.
template <class Op, class... Args>
void record_op(const tensor& y, const Args&... args) {
    if (recording_tapes == 0) return;
    bool watched = false;
    ([&] {
        if constexpr (std::is_same_v<Args, tensor>) watched = watched || watched_by_a_tape(args);
    }(), ...);
    if (!watched) return;  // nothing to record: no closure, no allocation
    tape_entry e;
    e.output = y;
    ([&] {
        if constexpr (std::is_same_v<Args, tensor>) e.inputs.push_back(args);
    }(), ...);
    e.backward = [args..., y](const tensor& g) {
        const auto rule = Op::gradient(args..., y, g);
        std::vector<std::optional<tensor>> out;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            ([&] {
                using A = std::tuple_element_t<I, std::tuple<Args...>>;
                if constexpr (std::is_same_v<A, tensor>)
                    out.push_back(operand_gradient(std::get<I>(std::tie(args...)), std::get<I>(rule)));
            }(), ...);
        }(std::index_sequence_for<Args...>{});
        return out;
    };
    record_entry(std::move(e));
}

inline void record_reduction(const tensor& x, const tensor& y, const dims& keep, fold_kind kind) {
    record_entry({{x}, y, [x, y, keep, kind](const tensor& g) {
                      const tensor gb = g.reshape(keep).broadcast_to(x.shape());
                      tensor r;
                      if (kind == fold_kind::sum) {
                          r = gb;
                      } else if (kind == fold_kind::prod) {
                          r = gb * y.reshape(keep) / x;  // undefined where x is 0
                      } else {
                          // Ties share the gradient equally.
                          const tensor hit = (kiln::equal(x, y.reshape(keep))).to(g.dtype());
                          r = gb * hit / reduce_to(hit, keep).broadcast_to(x.shape());
                      }
                      return std::vector<std::optional<tensor>>{r.to(x.dtype())};
                  }});
}

inline void record_matmul(const tensor& a, const tensor& b, const tensor& y) {
    record_entry({{a, b}, y, [a, b](const tensor& g) {
                      // Work with the 2-D (or batched) forms; vectors were a row (left) or a column (right).
                      const tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a, b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
                      tensor g2 = g;
                      if (a.dim() == 1) g2 = g2.unsqueeze(g2.dim() - (b.dim() == 1 ? 0 : 1));
                      if (b.dim() == 1) g2 = g2.unsqueeze(g2.dim());
                      const tensor ga = kiln::matmul(g2, b2.transpose(-1, -2)), gb = kiln::matmul(a2.transpose(-1, -2), g2);
                      std::vector<std::optional<tensor>> out;
                      out.push_back(reduce_to(ga, a2.shape()).reshape(a.shape()).to(a.dtype()));
                      out.push_back(reduce_to(gb, b2.shape()).reshape(b.shape()).to(b.dtype()));
                      return out;
                  }});
}

// Each part's gradient is its slice of the output's gradient along the joined axis.
inline void record_concat(const std::vector<tensor>& parts, const tensor& y, int axis) {
    std::vector<std::ptrdiff_t> starts;
    std::vector<dtype> types;
    std::ptrdiff_t at = 0;
    for (const tensor& p : parts) starts.push_back(at), types.push_back(p.dtype()), at += p.shape()[axis];
    starts.push_back(at);
    record_entry({parts, y, [starts = std::move(starts), types = std::move(types), axis](const tensor& g) {
                      std::vector<std::optional<tensor>> out;
                      for (std::size_t i = 0; i < types.size(); ++i) {
                          if (!is_floating(types[i])) out.emplace_back();
                          else out.emplace_back(g.slice(axis, starts[i], starts[i + 1]).to(types[i]));
                      }
                      return out;
                  }});
}

}  // namespace detail

// A tensor that gradient tapes watch without being told (trainable state). Updates through assign() keep its
// identity, so the same variable is a source of every training step's gradient.
class variable : public tensor {
public:
    explicit variable(const tensor& initial) : tensor(initial.clone()) { trainable_ = true; }

    // Copies `value` into the variable's storage (same shape; converted to its dtype). Not recorded.
    void assign(const tensor& value) {
        if (!(value.shape() == shape()))
            throw shape_error("kiln::variable::assign: the value has shape " + to_string(value.shape()) +
                              " but the variable has shape " + to_string(shape()));
        const tensor v = value.to(dtype());
        tensor& self = *this;
        detail::dispatch(dtype(), [&]<class T>() { detail::run_eager_into(self, detail::indexed_leaf<0, T>{}, v); });
    }
};

namespace detail {
template <>
struct mode_of<variable> {
    static constexpr operand_mode value = operand_mode::eager;
};
}  // namespace detail

// The same values, cut from every tape: no gradient flows through the result.
inline tensor stop_gradient(const tensor& t) {
    return tensor(t.storage_handle(), t.dtype(), t.shape(), t.strides(), t.offset());
}

}  // namespace kiln
