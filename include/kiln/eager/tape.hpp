#pragma once
// Reverse-mode gradients in eager mode: kiln::gradient_tape records the ops applied to watched tensors and
// trainable variables, and gradient() walks them backwards with each op's rule from the vocabulary. Tapes nest:
// while one tape computes a gradient, the tapes around it record that computation, which gives higher derivatives.
#include <array>
#include <bit>
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "elementwise.hpp"
#include "factories.hpp"
#include "linalg.hpp"
#include "reduce.hpp"
#include "../ops/scan.hpp"

namespace kiln {

class gradient_tape;
class variable;

namespace detail {

// (Function-local: a program that never records compiles and emits none of this thread-local state.)
inline std::vector<gradient_tape*>& tape_stack() {
    thread_local std::vector<gradient_tape*> s;
    return s;
}

// The tensor inputs of a tape entry: up to three inline (no allocation for the ops of the vocabulary), more on
// the heap (concat of many parts).
class tensor_list {
public:
    tensor_list() = default;
    tensor_list(std::initializer_list<tensor> ts) {
        for (const tensor& t : ts) push_back(t);
    }
    tensor_list(const std::vector<tensor>& ts) {
        for (const tensor& t : ts) push_back(t);
    }
    tensor_list(const tensor_list& o) {
        for (const tensor& t : o) push_back(t);
    }
    tensor_list(tensor_list&& o) noexcept { take(o); }
    tensor_list& operator=(const tensor_list& o) {
        if (this != &o) {
            clear();
            for (const tensor& t : o) push_back(t);
        }
        return *this;
    }
    tensor_list& operator=(tensor_list&& o) noexcept {
        if (this != &o) {
            clear();
            take(o);
        }
        return *this;
    }
    ~tensor_list() { clear(); }

    void push_back(const tensor& t) {
        if (n_ < N) {
            new (inline_at(n_)) tensor(t);
        } else {
            if (n_ == N) {
                heap_.reserve(2 * N);
                for (std::size_t i = 0; i < N; ++i) {
                    heap_.push_back(std::move(*inline_at(i)));
                    inline_at(i)->~tensor();
                }
            }
            heap_.push_back(t);
        }
        ++n_;
    }
    std::size_t size() const noexcept { return n_; }
    const tensor& operator[](std::size_t i) const noexcept { return begin()[i]; }
    const tensor* begin() const noexcept { return n_ > N ? heap_.data() : inline_at(0); }
    const tensor* end() const noexcept { return begin() + n_; }

private:
    static constexpr std::size_t N = 3;
    tensor* inline_at(std::size_t i) noexcept { return std::launder(reinterpret_cast<tensor*>(buf_)) + i; }
    const tensor* inline_at(std::size_t i) const noexcept {
        return std::launder(reinterpret_cast<const tensor*>(buf_)) + i;
    }
    void clear() noexcept {
        if (n_ <= N)
            for (std::size_t i = 0; i < n_; ++i) inline_at(i)->~tensor();
        heap_.clear();
        n_ = 0;
    }
    void take(tensor_list& o) noexcept {
        if (o.n_ > N) {
            heap_ = std::move(o.heap_);
        } else {
            for (std::size_t i = 0; i < o.n_; ++i) {
                new (inline_at(i)) tensor(std::move(*o.inline_at(i)));
                o.inline_at(i)->~tensor();
            }
        }
        n_ = o.n_;
        o.n_ = 0;
        o.heap_.clear();
    }

    alignas(tensor) std::byte buf_[N * sizeof(tensor)];
    std::vector<tensor> heap_;
    std::size_t n_ = 0;
};

struct tape_entry;
using gradient_list = std::vector<std::optional<tensor>>;
// The gradient rule of an entry recorded by record_op: reads the entry's inputs, output and numbers.
using entry_rule = gradient_list (*)(const tape_entry& e, const tensor& g);

// One recorded op: its tensor inputs, its output, and the map from the output's gradient to the inputs'. Ops of
// the vocabulary keep a plain function and their numeric operands (no closure to allocate); views, reductions,
// products and joins keep a closure.
struct tape_entry {
    tensor_list inputs;
    tensor output;
    std::function<gradient_list(const tensor& g)> backward;
    entry_rule rule = nullptr;
    std::array<std::uint64_t, 2> numbers{};  // the op's number operands, bit for bit

    gradient_list operator()(const tensor& g) const { return rule ? rule(*this, g) : backward(g); }
};

// A list of entries kept from the last tape destroyed on this thread.
inline std::vector<tape_entry>& spare_entries() {
    thread_local std::vector<tape_entry> s;
    return s;
}

// A set of tensor ids (never 0): open addressing in one array, with room for a few ids before it allocates.
class id_set {
public:
    bool contains(std::uint64_t id) const noexcept {
        const std::uint64_t* k = keys();
        for (std::size_t i = slot(id);; i = (i + 1) & mask()) {
            if (k[i] == id) return true;
            if (k[i] == 0) return false;
        }
    }
    void insert(std::uint64_t id) {
        if ((count_ + 1) * 4 > capacity_ * 3) grow();
        std::uint64_t* k = keys();
        std::size_t i = slot(id);
        for (; k[i] != 0; i = (i + 1) & mask())
            if (k[i] == id) return;
        k[i] = id;
        ++count_;
    }

private:
    static constexpr std::size_t inline_capacity = 16;
    std::size_t mask() const noexcept { return capacity_ - 1; }
    std::size_t slot(std::uint64_t id) const noexcept {
        return static_cast<std::size_t>((id * 0x9E3779B97F4A7C15ull) >> 40) & mask();
    }
    std::uint64_t* keys() noexcept { return heap_.empty() ? small_.data() : heap_.data(); }
    const std::uint64_t* keys() const noexcept { return heap_.empty() ? small_.data() : heap_.data(); }
    void grow() {
        std::vector<std::uint64_t> old(keys(), keys() + capacity_);
        capacity_ *= 2;
        heap_.assign(capacity_, 0);
        count_ = 0;
        for (std::uint64_t id : old)
            if (id != 0) insert(id);
    }

    std::array<std::uint64_t, inline_capacity> small_{};
    std::vector<std::uint64_t> heap_;
    std::size_t capacity_ = inline_capacity;
    std::size_t count_ = 0;
};

}  // namespace detail

class gradient_tape {
public:
    // Starts recording on this thread until destroyed. A persistent tape allows several gradient() calls.
    explicit gradient_tape(bool persistent = false) : persistent_(persistent) {
        entries_.swap(detail::spare_entries());
        detail::tape_stack().push_back(this);
        ++detail::recording_tapes;
    }
    gradient_tape(const gradient_tape&) = delete;
    gradient_tape& operator=(const gradient_tape&) = delete;
    ~gradient_tape() {
        stop_recording();
        // The cleared list of entries goes to the next tape on this thread: recording allocates no list per tape.
        entries_.clear();
        if (entries_.capacity() > detail::spare_entries().capacity()) detail::spare_entries().swap(entries_);
    }

    // Records ops on t from now on.
    void watch(const tensor& t) { watched_.insert(t.id()); }

    bool watches(const tensor& t) const { return t.trainable() || watched_.contains(t.id()); }

    // Stops recording (gradient() still works on what was recorded).
    void stop_recording() {
        auto& st = detail::tape_stack();
        for (auto it = st.begin(); it != st.end(); ++it)
            if (*it == this) {
                st.erase(it);
                --detail::recording_tapes;
                break;
            }
    }

    // d target / d source for each source. A non-scalar target is summed first (its seed is ones). A source the
    // target does not depend on, or that this tape does not watch, gets zeros of its shape.
    template <int N = 0>
    std::vector<tensor> gradient(const tensor& target, const std::vector<tensor>& sources) {
        return gradient_from<N>(target, sources, nullptr);
    }

    // The same with the target's gradient given (TensorFlow's output_gradients): the vector-Jacobian product
    // sum over target of output_gradient * d target / d source. output_gradient has the target's shape.
    template <int N = 0>
    std::vector<tensor> gradient(const tensor& target, const std::vector<tensor>& sources,
                                 const tensor& output_gradient) {
        output_gradient.check_valid("gradient_tape::gradient");
        if (!(output_gradient.shape() == target.shape()))
            throw shape_error("kiln: shape_error in 'gradient_tape::gradient': the output gradient has shape " +
                              to_string(output_gradient.shape()) + " but the target has shape " +
                              to_string(target.shape()));
        return gradient_from<N>(target, sources, &output_gradient);
    }

    template <int N = 0>
    tensor gradient(const tensor& target, const tensor& source) {
        return gradient<N>(target, std::vector<tensor>{source})[0];
    }

    template <int N = 0>
    tensor gradient(const tensor& target, const tensor& source, const tensor& output_gradient) {
        return gradient<N>(target, std::vector<tensor>{source}, output_gradient)[0];
    }

    // A braced list is a list of sources, one element too: tape.gradient(loss, {w}) is a vector of one gradient, as
    // TensorFlow's tape.gradient(loss, [w]) is a list (without these overloads `{w}` would pick a one-source form).
    template <int N = 0>
    std::vector<tensor> gradient(const tensor& target, std::initializer_list<tensor> sources) {
        return gradient<N>(target, std::vector<tensor>(sources));
    }
    template <int N = 0>
    std::vector<tensor> gradient(const tensor& target, std::initializer_list<tensor> sources, const tensor& output_gradient) {
        return gradient<N>(target, std::vector<tensor>(sources), output_gradient);
    }

    // The gradients of a model's parameters: tape.gradient(loss, model.parameters()).
    template <int N = 0>
    std::vector<tensor> gradient(const tensor& target, const std::vector<variable*>& sources);

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
    // (A template: its sums of gradients compile where gradients are asked for. Defined below the class, not
    // inline, so that KILN_SEPARATE_KERNELS can compile it once: kiln/eager/separate.hpp.)
    template <int N>
    std::vector<tensor> gradient_from(const tensor& target, const std::vector<tensor>& sources, const tensor* seed);

    bool pause() {
        const auto& st = detail::tape_stack();
        const bool active = std::find(st.begin(), st.end(), this) != st.end();
        if (active) stop_recording();
        return active;
    }
    void resume() {
        detail::tape_stack().push_back(this);
        ++detail::recording_tapes;
    }

    bool persistent_;
    bool used_ = false;
    detail::id_set watched_;
    std::vector<detail::tape_entry> entries_;
};

template <int N>
std::vector<tensor> gradient_tape::gradient_from(const tensor& target, const std::vector<tensor>& sources,
                                             const tensor* seed) {
    if (used_ && !persistent_)
        throw value_error("kiln: value_error in 'gradient_tape::gradient': a non-persistent tape computes gradients once; make it "
                          "with gradient_tape(true) to call gradient() again");
    used_ = true;
    // This tape must not record its own backward pass; the tapes around it do.
    const bool was_recording = pause();
    std::unordered_map<std::uint64_t, detail::dependent_tensor<N>> grads;
    grads.emplace(target.id(), seed ? seed->to(target.dtype()) : full(target.shape(), 1.0, target.dtype(), target.device()));
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
        auto found = grads.find(it->output.id());
        if (found == grads.end()) continue;
        const tensor g = found->second;
        const auto in_grads = (*it)(g);
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
        out.push_back(found != grads.end() ? found->second : zeros(s.shape(), s.dtype(), s.device()));
    }
    return out;
}

namespace detail {

inline bool watched_by_a_tape(const tensor& t) {
    for (gradient_tape* tape : tape_stack())
        if (tape->watches(t)) return true;
    return false;
}

inline void record_entry(tape_entry e) {
    // The innermost tape takes the entry itself; outer tapes (nesting is rare) take copies.
    std::vector<gradient_tape*>& st = tape_stack();
    for (std::size_t i = 0; i + 1 < st.size(); ++i) st[i]->record(e);
    if (!st.empty()) st.back()->record(std::move(e));
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

}  // namespace detail

namespace ops {

// Eager mode's structural helpers for the mode-neutral gradient rules (ops/structural.hpp): attributes are values.
template <>
struct structural_fns<tensor> {
    static const tensor& like(const tensor& g, const tensor&) { return g; }
    static tensor unreduce(const reduce_attrs& a, const tensor& g, const tensor& ref) {
        return g.reshape(reduce_shape(a, ref.shape(), "unreduce").keep).broadcast_to(ref.shape());
    }
    template <reduction K>
    static tensor reduce(const reduce_attrs& a, const tensor& x) {
        return detail::reduce<K>(x, a);
    }
    static double count(const reduce_attrs& a, const tensor& ref) { return static_cast<double>(count::of(a, ref.shape())); }
    static tensor cast_like(const tensor& x, const tensor& ref) { return x.to(ref.dtype()); }
    static tensor sum_batches_to(const tensor& g, const tensor& ref) { return detail::reduce_to(g, ref.shape()); }
    template <int N = 0>
    static tensor matmul(const detail::dependent_tensor<N>& a, const tensor& b) {
        return kiln::matmul<N>(a, b);
    }
    static tensor matrix_transpose(const tensor& v) { return v.transpose(-1, -2); }
    template <scan_kind K>
    static tensor scan(const scan_attrs& a, const tensor& x) {
        return detail::apply_structural<ops::scan<K>>(a, x);
    }
    // Any mode-neutral op with attributes (flip, tile, pad, gathers and their gradients' ops).
    template <class Op, class... X>
    static tensor apply(const typename Op::attributes& a, const tensor& x, const X&... more) {
        return detail::apply_structural<Op>(a, x, static_cast<const tensor&>(more)...);
    }
};

}  // namespace ops

namespace detail {

inline tensor scatter_slice(const tensor& source, const tensor& g, int axis, std::ptrdiff_t start, std::ptrdiff_t stop,
                            std::ptrdiff_t step) {
    tensor z = zeros(source.shape(), g.dtype(), g.device());
    tensor part = z.slice(axis, start, stop, step);
    copy_into(part, g);
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

// A number operand of an op, kept bit for bit in a tape entry.
template <class S>
std::uint64_t number_bits(const S& v) {
    if constexpr (std::is_floating_point_v<S>) return std::bit_cast<std::uint64_t>(static_cast<double>(v));
    else return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
}
template <class S>
S number_from_bits(std::uint64_t b) {
    if constexpr (std::is_floating_point_v<S>) return static_cast<S>(std::bit_cast<double>(b));
    else return static_cast<S>(static_cast<std::int64_t>(b));
}

// The gradient of an op of the vocabulary from its rule: Op::gradient(args..., y, g), with the tensor operands
// taken from the entry's inputs and the numbers from its number slots, in the order of Args.
template <class Op, class... Args>
gradient_list op_rule(const tape_entry& e, const tensor& g) {
    static constexpr auto where = operand_slots<Args...>;  // (operand I: its index among the tensors or the numbers)
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        auto arg = [&]<std::size_t K>() -> decltype(auto) {
            using A = std::tuple_element_t<K, std::tuple<Args...>>;
            if constexpr (std::is_same_v<A, tensor>) return (e.inputs[where[K]]);
            else return number_from_bits<A>(e.numbers[where[K]]);
        };
        const auto rule = Op::gradient(arg.template operator()<I>()..., e.output, g);
        gradient_list out;
        out.reserve(e.inputs.size());
        ([&] {
            // (The type test, not is_tensor[I]: nvcc's front end does not see a captured constexpr array as a constant.)
            if constexpr (std::is_same_v<std::tuple_element_t<I, std::tuple<Args...>>, tensor>)
                out.push_back(operand_gradient(e.inputs[where[I]], grad_at<I>(rule)));
        }(), ...);
        return out;
    }(std::index_sequence_for<Args...>{});
}

// Records Op(args...) -> y on the active tapes. Numbers among args are constants of the op.
template <class Op, class... Args>
void record_op(const tensor& y, const Args&... args) {
    if (recording_tapes == 0) return;
    bool watched = false;
    ([&] {
        if constexpr (std::is_same_v<Args, tensor>) watched = watched || watched_by_a_tape(args);
    }(), ...);
    if (!watched) return;  // nothing to record: no entry, no allocation
    static_assert(((std::is_same_v<Args, tensor> ? 0 : 1) + ... + 0) <= 2, "kiln: an op records at most two numbers");
    tensor_list inputs;
    std::array<std::uint64_t, 2> numbers{};
    std::size_t v = 0;
    ([&] {
        if constexpr (std::is_same_v<Args, tensor>) inputs.push_back(args);
        else numbers[v++] = number_bits(args);
    }(), ...);
    record_entry(tape_entry{std::move(inputs), y, {}, &op_rule<Op, Args...>, numbers});
}

template <class Op, int N, class... X>
void record_structural(const typename Op::attributes& a, const dependent_tensor<N>& y, const X&... x) {
    if (!(watched_by_a_tape(x) || ...)) return;
    record_entry({{x...}, y, [a, x..., y](const dependent_tensor<N>& g) {
                      const auto r = Op::gradient(a, x..., y, g);
                      const auto xs = std::forward_as_tuple(x...);
                      return [&]<std::size_t... I>(std::index_sequence<I...>) {
                          return gradient_list{operand_gradient(std::get<I>(xs), grad_at<I>(r))...};
                      }(std::index_sequence_for<X...>{});
                  }});
}

// Only the operands that a tape follows get a gradient: the product for the other one (a batch of data times the
// first layer's weights) is as large as the forward product, and nothing would read it. The rule is ops::matmul's,
// on the operands as matrices (a vector was a row on the left, a column on the right).
template <int N>
void record_matmul(const dependent_tensor<N>& a, const dependent_tensor<N>& b, const dependent_tensor<N>& y) {
    const bool need_a = watched_by_a_tape(a), need_b = watched_by_a_tape(b);
    record_entry({{a, b}, y, [a, b, y, need_a, need_b](const dependent_tensor<N>& g) {
                      const tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a, b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
                      dependent_tensor<N> g2 = g;
                      if (a.dim() == 1) g2 = g2.unsqueeze(g2.dim() - (b.dim() == 1 ? 0 : 1));
                      if (b.dim() == 1) g2 = g2.unsqueeze(g2.dim());
                      gradient_list out(2);
                      if (need_a) out[0] = ops::matmul::operand_gradient<0>(a2, b2, y, g2).reshape(a.shape()).to(a.dtype());
                      if (need_b) out[1] = ops::matmul::operand_gradient<1>(a2, b2, y, g2).reshape(b.shape()).to(b.dtype());
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
    // A variable over `t`'s own storage, not a copy: writes through either are seen by both (a graph-mode
    // session's parameter read by a traced function, kiln::trace(session, expr)).
    static variable over(const tensor& t) {
        t.check_valid("variable::over");
        return variable(t, shared{});
    }
    variable(const variable&) = default;
    variable(variable&&) noexcept = default;
    ~variable() = default;

    // Rebinds the variable to another's storage (`v = kiln::variable(kiln::zeros({4}))`). A traced function that
    // read the old storage traces again at its next call, with the reason (function/function.hpp): it never goes
    // on reading a storage the variable has left.
    variable& operator=(const variable& other) {
        if (storage_handle() != other.storage_handle()) mark_rebound(other);
        tensor::operator=(other);
        return *this;
    }
    variable& operator=(variable&& other) noexcept {
        if (storage_handle() != other.storage_handle()) mark_rebound(other);
        tensor::operator=(std::move(other));
        return *this;
    }

    // Copies `value` into the variable's storage (same shape; converted to its dtype). Not recorded.
    void assign(const tensor& value) {
        if (!(value.shape() == shape()))
            throw shape_error("kiln: shape_error in 'variable::assign': the value has shape " + to_string(value.shape()) +
                              " but the variable has shape " + to_string(shape()));
        const tensor v = value.to(dtype());
        tensor& self = *this;
        detail::copy_into(self, v);  // (a traced effect while kiln::function traces)
    }

private:
    struct shared {};
    variable(const tensor& t, shared) : tensor(t) { trainable_ = true; }

    void mark_rebound(const variable& next) noexcept {
        detail::storage* s = storage_handle().get();
        if (!s) return;  // moved from
        if (!next.storage_handle()) s->mark_rebound(dtype(), dims{});
        else s->mark_rebound(next.dtype(), next.shape());
    }
};

template <int N>
std::vector<tensor> gradient_tape::gradient(const tensor& target, const std::vector<variable*>& sources) {
    std::vector<tensor> s;
    s.reserve(sources.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
        if (!sources[i])
            throw value_error("kiln: value_error in 'gradient_tape::gradient': source " + std::to_string(i) + " is a null pointer");
        s.push_back(*sources[i]);
    }
    return gradient<N>(target, s);
}

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
