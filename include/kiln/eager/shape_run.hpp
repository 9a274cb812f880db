#pragma once
// Running eager ops for what they make (dtype, shape, device, eager mode's errors) rather than for their values:
// what the tracer does to learn each node's result, and what the loaders' check runs do with a file's declared
// shapes (io/function_file.hpp, io/onnx_import.hpp). Declared shapes are untrusted: a file of a few hundred bytes
// may declare inputs of terabytes, so nothing here may cost what the shapes say.
#include <algorithm>
#include <cstdint>
#include <set>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "linalg.hpp"
#include "tensor.hpp"
#include "trace_seam.hpp"
#include "uniform.hpp"

namespace kiln::detail {

// The result of a recorded op `fn` of `inputs` while tracing: its spec (op_params::spec), where it has one and can
// tell, else the op run with nothing recording and matrix products as placeholders (placeholder_products). Only
// dtypes, shapes and eager mode's errors matter there; a check run (shape_run, below) also keeps track of values.
inline tensor result_of_op(std::span<const tensor> inputs, const replay_fn& fn, const op_params& params) {
    const untraced_scope plain;
    const placeholder_products_scope products;
    if (params.spec) {
        tensor out;
        if (params.spec(inputs, params.values, out)) return out;
    }
    return fn(inputs, params.values);
}

// What a check run (shape_run) must get right besides dtypes and shapes.
enum class check_values {
    // Nothing: each op runs on fresh placeholders, so values never matter (kiln::load's check).
    none,
    // Every value that an op reads as a shape, an axis, a count or an index (load_onnx's check, where a computed value
    // may become a later op's shape): ops give their specs as with `none`, and the run tracks the values that are
    // not their op's very value (a structural op's or a join's zeros, a product's, and anything computed from them); reading
    // such a value through read_exact throws inexact_value, and the loader checks again with `exact`.
    tracked,
    // The same, with a spec used only where it is the op's very value (an elementwise op, a cast or a fill of
    // uniform values): every other op runs, within a budget (check_budget_elements) of elements read over inputs
    // of 2^16 elements or more, and a matrix product is computed where the budget allows its multiply-adds. Only a
    // product beyond it is then not its value (read, it is a file_error).
    exact,
};

// Thrown by read_exact where a check run would read a value it did not compute (not a kiln::error: nothing on the
// way may take it for an op's failure).
struct inexact_value {
    std::string what;  // what was read ("Reshape's shape")
};

// What an exact check run may spend in all on ops over large inputs: 2^32 elements read, and multiply-adds of the
// matrix products it computes (seconds).
inline constexpr std::uint64_t check_budget_elements = std::uint64_t{1} << 32;

class shape_run;
inline thread_local shape_run* active_shape_run = nullptr;

// While it lives, eager ops on this thread make their results as result_of_op does: a matrix product gives a
// placeholder of zeros after its checks, an op with a spec (elementwise ops, casts, fills, joins, the structural ops
// of eager/structural.hpp; with check_values::exact only the spec that is its op's value) whose result or an input has
// at least 2^16 elements gives its placeholder, computing and allocating nothing of its shape's size; every other
// op runs, as do the small ones (microseconds; their results keep the layout their ops promise, contiguous() a
// contiguous tensor), and a product whose operands are all small. Effects (writes) run as they would. The loaders'
// check runs use it, so that a file declaring huge inputs is checked in time and memory that do not grow with them
// (short of the ops that must run: ops of values, not placeholders; and with check_values::exact, where a value read
// as a shape was not computed the first time, every op without an exact spec, within check_budget_elements).
class shape_run final : public tracer_base {
public:
    explicit shape_run(check_values mode) noexcept
        : saved_(active_tracer), saved_run_(active_shape_run), mode_(mode) {
        active_tracer = this;
        active_shape_run = this;
    }
    ~shape_run() override {
        active_tracer = saved_;
        active_shape_run = saved_run_;
    }
    shape_run(const shape_run&) = delete;
    shape_run& operator=(const shape_run&) = delete;

    tensor record(std::string_view, std::string, std::span<const tensor> inputs, replay_fn fn, op_params params) override {
        constexpr std::ptrdiff_t at_least = std::ptrdiff_t{1} << 16;
        const auto large = [&](const tensor& t) { return t.numel() >= at_least; };
        const bool any_large = std::any_of(inputs.begin(), inputs.end(), large);
        const bool inexact_in = mode_ != check_values::none && std::any_of(inputs.begin(), inputs.end(), [&](const tensor& t) {
            return tracked(t);
        });
        const bool value_spec = params.spec_is_value && std::all_of(inputs.begin(), inputs.end(), is_uniform);
        const untraced_scope plain;
        if (params.spec && (mode_ != check_values::exact || value_spec)) {
            tensor out;
            if (params.spec(inputs, params.values, out) && (any_large || large(out))) {
                if (inexact_in || !value_spec) track(out);
                return out;
            }
        }
        if (mode_ == check_values::exact && any_large) {
            std::uint64_t n = 0;
            for (const tensor& t : inputs) n += static_cast<std::uint64_t>(t.numel());
            read_ += n;
            if (read_ > check_budget_elements)
                throw value_error("kiln: value_error in 'check': checking the values at the declared shapes would read more "
                                  "than 2^32 elements (ops over enormous inputs, whose values a later op reads as a shape)");
        }
        const std::uint64_t products = placeholder_products_made;
        tensor out;
        {
            struct restore {
                int& c;
                int v;
                ~restore() { c = v; }
            } r{inexact_context_, inexact_context_};
            inexact_context_ += inexact_in ? 1 : 0;
            if (any_large) {
                const placeholder_products_scope placeholders;
                // (With exact values, a product is computed where the budget still allows its multiply-adds.)
                struct spend {
                    std::uint64_t& read;
                    bool on;
                    ~spend() {
                        if (on) read = check_budget_elements - computed_products_budget;
                        computed_products_budget = 0;
                    }
                } charge{read_, mode_ == check_values::exact};
                if (charge.on) computed_products_budget = check_budget_elements - read_;
                out = fn(inputs, params.values);
            } else {
                out = fn(inputs, params.values);
            }
        }
        if (placeholder_products_made != products || inexact_in) track(out);
        return out;
    }
    void record_effect(std::string_view, std::string, std::span<const tensor> inputs, effect_fn fn, std::size_t,
                       op_params params) override {
        const untraced_scope plain;
        fn(inputs, params.values);
    }
    [[noreturn]] void refuse(std::string_view what, std::string_view) const override {
        // (No symbolic tensor reaches a check run: its inputs are placeholders with values.)
        throw trace_error(error_prefix("trace_error", what) + "a symbolic tensor's values were read while checking a file");
    }

    // Throws inexact_value where `t` (read as `what`) is not its ops' very value, or is read by an op of inputs that
    // are not.
    void read_exact(const tensor& t, const char* what) const {
        if (mode_ == check_values::none) return;
        if (inexact_context_ > 0 || tracked(t)) throw inexact_value{what};
    }

private:
    // (The values tracked as inexact, by their storage: a view of one shares it. A weak_ptr keeps a freed storage's
    // control block, so that its address is not taken for another's.)
    bool tracked(const tensor& t) const {
        if (!t.storage_handle() || inexact_.empty()) return false;
        return inexact_.count(std::weak_ptr<storage>(t.storage_handle())) > 0;
    }
    void track(const tensor& t) {
        if (mode_ == check_values::none || !t.storage_handle()) return;
        inexact_.insert(std::weak_ptr<storage>(t.storage_handle()));
    }

    tracer_base* saved_;
    shape_run* saved_run_;
    check_values mode_;
    std::set<std::weak_ptr<storage>, std::owner_less<std::weak_ptr<storage>>> inexact_;
    int inexact_context_ = 0;  // (an op of inexact inputs is running: whatever it reads is)
    std::uint64_t read_ = 0;
};

// Reads of values in a check run that must be exact (a shape, axes, a count or an index that an op takes from a
// tensor): throws inexact_value where the running check (shape_run) did not compute `t`'s values. Nothing outside
// a check run.
inline void read_exact(const tensor& t, const char* what) {
    if (active_shape_run) [[unlikely]]
        active_shape_run->read_exact(t, what);
}

}  // namespace kiln::detail
