#pragma once
// The run-time op registry: every op of the vocabulary found by its stable name, with its arity, its attribute
// schema, its shape and dtype rule, its eager kernel and its gradient.
//
//   const kiln::op_schema& add = kiln::find_op("add");
//   kiln::tensor y = kiln::apply("sum", {x}, {{"axes", {0}}, {"keepdims", true}});
//   kiln::tensor_spec s = kiln::infer("matmul", {{kiln::float32, {2, 3}}, {kiln::float32, {3, 4}}});  // (2, 4)
//
// Elementwise entries are built from the op structs of ops/ (name, arity, kernel, gradient rule); structural
// entries (reductions, matmul, views, joins, indexing) from eager mode's functions. `apply` records on gradient
// tapes like the ops it names, so `op_gradient` is each op's own rule. What reads ops from text (the NumPy
// differential runner, files later) parses attributes with `parse_attribute`.
//
// Every function here is a template with a defaulted parameter: a translation unit that includes kiln and never
// calls the registry compiles none of its kernels.
//
// The schema types (attr_value, attributes, tensor_spec, op_schema, parse_attribute) are in registry/schema.hpp; the
// built-in ops' entries (detail::build_registry) in registry/builtin.hpp.
#include <deque>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nn/layers.hpp"
#include "registry/builtin.hpp"
#include "registry/schema.hpp"

namespace kiln {


// Every built-in op, in a fixed order (ops a program adds with register_op are found by name, not listed here).
template <int N = 0>
const std::vector<op_schema>& registered_ops() {
    static const std::vector<op_schema> table = detail::build_registry<N>();
    return table;
}

namespace detail {
// Ops registered by a program (kiln::register_op): a deque, so that the schemas' addresses stay valid as it grows.
struct added_ops {
    std::shared_mutex mutex;
    std::deque<op_schema> ops;
};
template <int N = 0>
added_ops& program_ops() {
    static added_ops table;
    return table;
}
}  // namespace detail

// The op named `name` (built in, or registered by the program with kiln::register_op), or nullptr.
template <int N = 0>
const op_schema* find_op_or_null(std::string_view name) noexcept {
    for (const op_schema& o : registered_ops<N>())
        if (o.name == name) return &o;
    detail::added_ops& added = detail::program_ops<N>();
    std::shared_lock lock(added.mutex);
    for (const op_schema& o : added.ops)
        if (o.name == name) return &o;
    return nullptr;
}

namespace detail {
// A mode-neutral structural op (ops/structural.hpp) that also states its attributes for the registry:
//   static std::vector<attr_spec> registry_attrs();                  the schema (names, kinds, defaults)
//   static typename Op::attributes from_registry(const attributes&); its attribute value from them
// Its attrs_text must write the same names in parse_attribute's forms ("axis=1 shift=2"), so that a saved
// function that holds it loads in a program that registered it.
template <class Op>
concept registrable_structural_op = requires(const attributes& a) {
    typename Op::attributes;
    { Op::registry_attrs() } -> std::convertible_to<std::vector<attr_spec>>;
    { Op::from_registry(a) } -> std::convertible_to<typename Op::attributes>;
};

template <class Op>
tensor structural_registry_kernel(std::span<const tensor> in, const attributes& a) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return apply_structural<Op>(Op::from_registry(a), in[I]...);
    }(std::make_index_sequence<Op::arity>{});
}

template <class Op>
tensor_spec structural_registry_shape(std::span<const tensor_spec> in, const attributes& a) {
    const auto at = Op::from_registry(a);
    dtype d = in[0].dtype;
    dispatch(in[0].dtype, [&]<class T>() { d = dtype_of<typename Op::template result_type<T>>(); });
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return tensor_spec{d, Op::result_shape(at, in[I].shape...)};
    }(std::make_index_sequence<Op::arity>{});
}

template <class Op, int N>
op_schema structural_entry(std::string summary) {
    return structural(std::string(Op::name), op_family::join, Op::arity, Op::arity, Op::registry_attrs(), true,
                      shape_rule::closed, &structural_registry_kernel<Op>, &structural_registry_shape<Op>,
                      std::move(summary));
}
}  // namespace detail

// Registers an op struct of the program's own under Op::name, so that find_op, apply, infer and op_gradient reach
// it as they reach the built-in ops: an elementwise op (the op protocol of ops/op_base.hpp: a name, an arity, an
// apply, a gradient rule), or a mode-neutral structural op (ops/structural.hpp) that states registry_attrs() and
// from_registry() (docs/internals.md walks through one). A name that is already taken is a kiln::value_error.
// Thread-safe; the schema lives as long as the program.
template <class Op, int N = 0>
const op_schema& register_op(std::string summary) {
    static_assert(detail::elementwise_op<Op> || detail::registrable_structural_op<Op>,
                  "kiln::register_op: the op must be an elementwise op struct (a name, an arity and an apply taking "
                  "that many numbers; the op protocol in kiln/ops/op_base.hpp), or a structural op struct with "
                  "attributes, registry_attrs() and from_registry() (kiln/ops/structural.hpp).");
    op_schema s;
    if constexpr (detail::registrable_structural_op<Op>) s = detail::structural_entry<Op, N>(std::move(summary));
    else s = detail::elementwise_entry<Op, N>(std::move(summary));
    detail::added_ops& added = detail::program_ops<N>();
    std::unique_lock lock(added.mutex);
    bool taken = false;
    for (const op_schema& o : registered_ops<N>()) taken = taken || o.name == s.name;
    for (const op_schema& o : added.ops) taken = taken || o.name == s.name;
    if (taken)
        throw value_error("kiln: value_error in 'register_op': an op named '" + s.name + "' is already registered");
    added.ops.push_back(std::move(s));
    return added.ops.back();
}

// The op named `name`; a kiln::value_error naming the closest names when there is none.
template <int N = 0>
const op_schema& find_op(std::string_view name) {
    if (const op_schema* o = find_op_or_null<N>(name)) return *o;
    std::vector<std::string> known;
    for (const op_schema& o : registered_ops<N>()) known.push_back(o.name);
    {
        detail::added_ops& added = detail::program_ops<N>();
        std::shared_lock lock(added.mutex);
        for (const op_schema& o : added.ops) known.push_back(o.name);
    }
    throw value_error("kiln: value_error in 'find_op': no op named '" + std::string(name) +
                      "'; closest: " + detail::closest_text(name, std::move(known)));
}

// Runs the op named `op` on `inputs` eagerly (recorded on the active gradient tapes), after checking the arity
// and the attributes against its schema.
template <int N = 0>
tensor apply(std::string_view op, std::span<const tensor> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).apply(inputs, attrs);
}
template <int N = 0>
tensor apply(std::string_view op, std::initializer_list<tensor> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).apply(std::span<const tensor>(inputs.begin(), inputs.size()), attrs);
}

// The dtype and shape that `apply` would give, without running the op (for closed rules) and with its errors.
template <int N = 0>
tensor_spec infer(std::string_view op, std::span<const tensor_spec> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).infer(inputs, attrs);
}
template <int N = 0>
tensor_spec infer(std::string_view op, std::initializer_list<tensor_spec> inputs, const attributes& attrs = {}) {
    return find_op<N>(op).infer(std::span<const tensor_spec>(inputs.begin(), inputs.size()), attrs);
}

// The vector-Jacobian product of the op at `inputs`: for each input, the sum over the output of
// output_gradient * d output / d input, by the op's own gradient rule (the one the tape uses). Inputs that are
// not floating (indices, conditions, masks) get no gradient (nullopt).
template <int N = 0>
std::vector<std::optional<tensor>> op_gradient(std::string_view op, std::span<const tensor> inputs,
                                               const tensor& output_gradient, const attributes& attrs = {}) {
    const op_schema& o = find_op<N>(op);
    // Fresh handles on the same storage: an input passed twice (x * x) gets one gradient per position.
    std::vector<tensor> in;
    for (const tensor& t : inputs) in.push_back(stop_gradient(t));
    gradient_tape tape;
    for (const tensor& t : in)
        if (detail::is_floating(t.dtype())) tape.watch(t);
    const tensor y = o.apply(in, attrs);
    std::vector<std::optional<tensor>> out(in.size());
    if (!o.differentiable || !detail::is_floating(y.dtype())) return out;
    const std::vector<tensor> g = tape.gradient(y, in, output_gradient);
    for (std::size_t i = 0; i < in.size(); ++i)
        if (detail::is_floating(in[i].dtype())) out[i] = g[i];
    return out;
}
template <int N = 0>
std::vector<std::optional<tensor>> op_gradient(std::string_view op, std::initializer_list<tensor> inputs,
                                               const tensor& output_gradient, const attributes& attrs = {}) {
    return op_gradient<N>(op, std::span<const tensor>(inputs.begin(), inputs.size()), output_gradient, attrs);
}

}  // namespace kiln

// With KILN_SEPARATE_KERNELS the built-in table (every op's kernels, shape rules and gradients: 9 s of CPU under
// clang 14 at -O0 with AddressSanitizer) compiles in the implementation unit only (kiln/implementation.hpp).
#define KILN_DETAIL_REGISTRY(P) P std::vector<kiln::op_schema> kiln::detail::build_registry<0>();
#if defined(KILN_SEPARATE_KERNELS) && !defined(KILN_IMPLEMENTATION)
KILN_DETAIL_REGISTRY(extern template)
#endif
