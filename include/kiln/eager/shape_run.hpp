#pragma once
// Running eager ops for what they make (dtype, shape, device, eager mode's errors) rather than for their values:
// what the tracer does to learn each node's result, and what the loaders' check runs do with a file's declared
// shapes (io/function_file.hpp, io/onnx_import.hpp). Declared shapes are untrusted: a file of a few hundred bytes
// may declare inputs of terabytes, so nothing here may cost what the shapes say.
#include <algorithm>
#include <span>
#include <string_view>

#include "linalg.hpp"
#include "tensor.hpp"
#include "trace_seam.hpp"
#include "uniform.hpp"

namespace kiln::detail {

// The result of a recorded op `fn` of `inputs`: its spec (op_params::spec), where it has one and can tell, else the
// op run with nothing recording and matrix products as placeholders (placeholder_products). With `exact` (a check
// run whose values may feed a later op's shape: load_onnx's), a spec is used only where it is the op's very value:
// a spec_is_value op of uniform inputs; without it (the tracer, kiln::load's check, where only dtypes and shapes
// matter) any spec is used. Where the result and every input have fewer than `at_least` elements, the spec is
// dropped and the op runs (it costs microseconds then): code that reads a small result's values (a shape that a
// loader reads, after contiguous(), as int64s) gets a tensor laid out as the op promises, not a placeholder of
// stride 0. (A small result of a large input, a reduction's, keeps its spec: running the op would cost the input.)
inline tensor result_of_op(std::span<const tensor> inputs, const replay_fn& fn, const op_params& params, bool exact,
                           std::ptrdiff_t at_least = 0) {
    const untraced_scope plain;
    const placeholder_products_scope products;
    if (params.spec && (!exact || (params.spec_is_value && std::all_of(inputs.begin(), inputs.end(), is_uniform)))) {
        tensor out;
        const auto small = [&](const tensor& t) { return t.numel() < at_least; };
        if (params.spec(inputs, params.values, out) && !(small(out) && std::all_of(inputs.begin(), inputs.end(), small)))
            return out;
    }
    return fn(inputs, params.values);
}

// While it lives, eager ops on this thread make their results as result_of_op does: a matrix product gives a
// placeholder of zeros after its checks, an op with a spec (elementwise ops, casts, fills; without `exact`, the
// structural ops of eager/structural.hpp too) whose result or an input has at least 2^16 elements gives its
// placeholder, computing and allocating nothing of its shape's size; every other op runs, as do the small ones
// (microseconds; their results keep the layout their ops promise, contiguous() a contiguous tensor). Effects (writes) run as
// they would. The loaders' check runs use it, so that a file declaring huge inputs is checked in time and memory
// that do not grow with them (short of the ops that must run: joins, and with `exact` the structural ops).
class shape_run final : public tracer_base {
public:
    explicit shape_run(bool exact) noexcept : saved_(active_tracer), exact_(exact) { active_tracer = this; }
    ~shape_run() override { active_tracer = saved_; }
    shape_run(const shape_run&) = delete;
    shape_run& operator=(const shape_run&) = delete;

    tensor record(std::string_view, std::string, std::span<const tensor> inputs, replay_fn fn, op_params params) override {
        return result_of_op(inputs, fn, params, exact_, std::ptrdiff_t{1} << 16);
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

private:
    tracer_base* saved_;
    bool exact_;
};

}  // namespace kiln::detail
