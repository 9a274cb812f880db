#pragma once
// Eager mode's tracing seam: the one interface through which kiln::function (kiln/function.hpp) records eager
// code, and the only thing eager mode knows of tracing.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/shape.hpp"

namespace kiln {

class tensor;

namespace detail {

struct storage;

// kiln::function (kiln/function.hpp) traces eager code by handing its tensors symbolic values: tensors with a
// dtype and a shape but no data. While a tracer records on a thread, each primitive of eager mode (elementwise
// ops, reductions, matmul, views, joins, conversions, factories, in-place writes, optimizer steps) gives the tracer
// its op instead of computing: a name, its attributes as text, its inputs and a function that computes it from
// real inputs. The tracer returns the symbolic result. Composite functions (mean, softmax, the losses, layers,
// gradient rules) trace as the primitives they call, so a gradient tape inside a traced function works unchanged.
//
// Integers and numbers that may come from a shape (a reshape's target, slice bounds, a fill value, a number operand
// such as a mean's count) are the op's *parameters*: the function reads them from the node when it runs, so that
// a graph traced for one extent of a dynamic dimension runs for every other (kiln::spec). Each parameter is an
// int64, or a double's bits where `float_params` has its bit set.
using replay_fn = std::function<tensor(std::span<const tensor>, std::span<const std::int64_t>)>;
using effect_fn = std::function<void(std::span<const tensor>, std::span<const std::int64_t>)>;

// An elementwise op's kernel over one tile of contiguous elements, every operand and the result of one floating
// dtype: in[k] for its k-th tensor operand, its numbers from `params`. Function mode runs a chain of such ops tile
// by tile (see executable in function/executor.hpp); an op whose operands differ in dtype has none.
using tile_kernel = void (*)(const void* const* in, void* out, std::ptrdiff_t n, const std::int64_t* params);

// What function mode's kernel compiler (function/jit.hpp) needs to write a tile kernel's op into C++ source: the
// op struct's name as C++ spells it, the element type, which operands are tensors, and each number operand as the
// kernel sees it (converted to the element type, as tile_run converts it).
struct tile_recipe {
    std::string_view op;          // "kiln::ops::add"
    std::string_view value_type;  // "float" or "double"
    std::uint8_t arity = 0;
    std::uint8_t tensors = 0;     // bit k: operand k is a tensor; the others are numbers, in order
    // The i-th number operand from the node's parameters, in the element type, as its bits (a float's in the low 32).
    std::uint64_t (*number)(const std::int64_t* params, std::size_t i) = nullptr;
};

// An op's result spec without computing it: `out` set to a placeholder (one element broadcast by stride 0) of the
// result's dtype, shape and device, and true; false where the op must run to tell (the op then runs on
// placeholders, which also gives eager mode's exact errors). See result_of_op (eager/shape_run.hpp).
using spec_fn = std::function<bool(std::span<const tensor> in, std::span<const std::int64_t> params, tensor& out)>;

struct op_params {
    tile_kernel tile = nullptr;
    spec_fn spec = nullptr;  // (or null: the op runs on placeholders)
    // With `spec`: where every input is uniform (one value read everywhere), the spec's placeholder holds the op's
    // very value (elementwise ops, casts, fills), not only its dtype and shape (the structural ops' zeros).
    bool spec_is_value = false;
    const tile_recipe* recipe = nullptr;  // with `tile`: how to write the op into a compiled group (or null)
    std::vector<std::int64_t> values;
    std::uint64_t float_params = 0;  // bit k: values[k] holds a double's bits
    std::uint64_t opaque = 0;        // bit k: values[k] must be the same for every extent (a digest, not a size)
    std::uint64_t bool_params = 0;   // bit k: values[k] is a bool number operand (1 or 0)
    // An effect that computes what it writes from its inputs and parameters alone (an assignment, an in-place op),
    // with no host state of its own: a CUDA graph may record it once and replay it (function/executor.hpp).
    bool pure_effect = false;
    // An effect that keeps none of its input tensors once it returns (an optimizer's step): a planned call may hand
    // it views that share no ownership of their storage, which then lives at least as long as the call (the arena,
    // a variable, an argument), so that a replayed step counts no references per input.
    bool borrows_inputs = false;
    // An effect with host code that must run at each call (an optimizer's step count) whose device work can still be
    // recorded once: `host_part` runs at each replay of a CUDA graph, before the graph (it may queue device work of
    // its own, such as writing this step's numbers into device memory), and `device_part` queues the device work that
    // reads them, once, while the call is captured. Without them the effect runs whole at each call.
    std::function<void()> host_part = nullptr;
    std::function<void(std::span<const tensor>, std::span<const std::int64_t>)> device_part = nullptr;
    // With host_part and device_part, where set: whether the recorded device work still does what the whole effect
    // would, checked before the capture and before each replay (a session's update stops being recordable when an
    // on_gradients hook is set). False drops the CUDA graph: that call and the later ones run node by node.
    std::function<bool()> replayable = nullptr;
    // Variables an effect reads that are not nodes of the graph it is in (those of a while_loop's sub-graphs), with
    // the dtype and shape they were read as: the enclosing trace is stale when one of them is rebound, as it is for
    // its own variables (function/executor.hpp, collect_variables).
    struct read_variable {
        std::shared_ptr<storage> where;
        kiln::dtype dtype;
        dims shape;
    };
    std::vector<read_variable> reads{};

    void add(std::int64_t v) { values.push_back(v); }
    void add_number(double v) {
        float_params |= std::uint64_t{1} << values.size();
        std::int64_t bits;
        std::memcpy(&bits, &v, sizeof v);
        values.push_back(bits);
    }
    void add_dims(const dims& d) {
        for (int i = 0; i < d.rank; ++i) values.push_back(d[i]);
    }
};
inline double param_number(std::int64_t bits) {
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}
// Where a user's call was made, as a defaulted argument: `f(..., call_site loc = call_site::current())`. (Not
// std::source_location: clang 14 with libstdc++ 12 has none. The builtins, which GCC, clang and MSVC have, take the
// caller's file and line when they are default arguments.)
struct call_site {
    const char* file = "";
    int line = 0;
    static constexpr call_site current(const char* file = __builtin_FILE(), int line = __builtin_LINE()) noexcept {
        return {file, line};
    }
};

// "file.cpp:12" (the file's path as the compiler saw it).
inline std::string location_text(const call_site& loc) { return std::string(loc.file) + ":" + std::to_string(loc.line); }
inline dims param_dims(std::span<const std::int64_t> p, std::size_t first, int rank) {
    dims d;
    d.rank = rank;
    for (int i = 0; i < rank; ++i) d[i] = p[first + static_cast<std::size_t>(i)];
    return d;
}

struct tracer_base {
    virtual ~tracer_base() = default;
    // A pure op: its result depends only on its inputs (and parameters).
    virtual tensor record(std::string_view op, std::string attrs, std::span<const tensor> inputs, replay_fn fn,
                          op_params params = {}) = 0;
    // A write into the storage of its first `writes` inputs (in place, an assignment, an optimizer step), run in
    // program order.
    virtual void record_effect(std::string_view op, std::string attrs, std::span<const tensor> inputs, effect_fn fn,
                               std::size_t writes = 1, op_params params = {}) = 0;
    // A use of a symbolic tensor's values (item(), at(), data()): throws kiln::trace_error saying what to do.
    // `at` is where the user's code read it ("file.cpp:12"), or empty.
    [[noreturn]] virtual void refuse(std::string_view what, std::string_view at = {}) const = 0;
    // Notes that `output`, computed just now by ops already recorded, is the composite op `op` (attributes as
    // text) of `inputs` ("conv2d" of the image, the weight and the bias), so that an exporter can write it as one
    // operator. Nothing runs differently.
    virtual void note_composite(std::string_view /*op*/, std::string /*attrs*/, std::span<const tensor> /*inputs*/,
                                const tensor& /*output*/) {}
};

// The tracer recording on this thread, or null (the common case: eager ops test this one pointer).
inline thread_local tracer_base* active_tracer = nullptr;

// Tells the thread's tracer, if any, that `output` is the composite op `op` of `inputs` (tracer_base::note_composite).
// `attrs()` makes the attributes' text, only while tracing (an eager call builds no string).
template <class MakeAttrs>
void note_composite(std::string_view op, MakeAttrs&& attrs, std::span<const tensor> inputs, const tensor& output) {
    if (active_tracer) [[unlikely]]
        active_tracer->note_composite(op, attrs(), inputs, output);
}

// Runs eager ops with values for a scope while a trace records: state that outlives the trace (an optimizer's slots
// made at its first, traced, step) must hold values, not symbolic tensors that the trace's end leaves empty.
struct untraced_scope {
    tracer_base* saved = active_tracer;
    untraced_scope() noexcept { active_tracer = nullptr; }
    ~untraced_scope() { active_tracer = saved; }
    untraced_scope(const untraced_scope&) = delete;
    untraced_scope& operator=(const untraced_scope&) = delete;
};

}  // namespace detail
}  // namespace kiln
