#pragma once
// The ONNX ops kiln::load_onnx reads (opsets 13 to 28 of the default domain), each as eager kiln ops on its inputs:
// onnx_op_kernel gives the kernel that function mode's executor replays for a node. docs/deployment.md lists the
// ops and what is refused.
#include "onnx_layer_ops.hpp"

namespace kiln {
namespace detail {

// The kernel of an ONNX op (opsets 13 to 28): eager kiln ops on the inputs, which the executor passes in order.
// What changed for these ops after opset 17, other than element types that kiln refuses anyway: opset 18 made the
// axes of ReduceMean, ReduceMax, ReduceMin and ReduceProd an input (as ReduceSum's since 13) and gave Pad an optional
// axes input (and ScatterElements the reductions max and min, which are refused like mul); opset 19 gave Cast a
// saturate attribute and Pad a wrap mode, 24 gave Cast a round mode (both for 8-bit floats only); opset 28 defined
// Mod with fmod=0 for floating numbers, as A - floor(A / B) * B. Gelu is an operator from opset 20.
template <int N, class Attr, class AttrInt>
replay_fn onnx_op_kernel(const std::string& op, std::int64_t opset, Attr&& A, AttrInt&& ai, std::size_t& lo, std::size_t& hi) {
    static const std::map<std::string, std::string> unary = {
        {"Neg", "neg"}, {"Abs", "abs"}, {"Exp", "exp"}, {"Log", "log"}, {"Sqrt", "sqrt"}, {"Sin", "sin"}, {"Cos", "cos"},
        {"Tan", "tan"}, {"Asin", "asin"}, {"Acos", "acos"}, {"Atan", "atan"}, {"Tanh", "tanh"}, {"Erf", "erf"},
        {"Floor", "floor"}, {"Ceil", "ceil"}, {"Round", "round"}, {"Sign", "sign"}, {"Sigmoid", "sigmoid"},
        {"Relu", "relu"}, {"Softplus", "softplus"}, {"IsNaN", "isnan"}, {"Not", "logical_not"}};
    static const std::map<std::string, std::string> binary = {
        {"Add", "add"}, {"Sub", "sub"}, {"Mul", "mul"}, {"Div", "div"}, {"Pow", "pow"}, {"Less", "less"},
        {"LessOrEqual", "less_equal"}, {"Greater", "greater"}, {"GreaterOrEqual", "greater_equal"}, {"Equal", "equal"},
        {"And", "logical_and"}, {"Or", "logical_or"}, {"Xor", "logical_xor"}};
    lo = hi = 1;
    if (auto it = unary.find(op); it != unary.end()) {
        const op_schema* s = find_op_or_null<N>(it->second);
        return [k = s->kernel](auto in, auto) { return k(in, {}); };
    }
    if (auto it = binary.find(op); it != binary.end()) {
        lo = hi = 2;
        const op_schema* s = find_op_or_null<N>(it->second);
        const bool integer_div = op == "Div";
        return [k = s->kernel, integer_div](auto in, auto) {
            // ONNX divides integers with truncation; kiln's div is true division.
            if (integer_div && !is_floating(in[0].dtype())) {
                // (Exactly, from kiln's floor division: one more where the remainder is nonzero and the signs
                // differ.)
                const auto q = floor_divide(in[0], in[1]);
                return where(logical_and(not_equal(remainder(in[0], in[1]), 0), logical_xor(in[0] < 0.0, in[1] < 0.0)), q + 1, q);
            }
            return k(in, {});
        };
    }
    if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
        lo = 1, hi = 64;
        const bool mx = op == "Max", mn = op == "Min", mean_op = op == "Mean";
        return [mx, mn, mean_op](auto in, auto) {
            auto acc = in[0];
            for (std::size_t i = 1; i < in.size(); ++i) acc = mx ? maximum(acc, in[i]) : mn ? minimum(acc, in[i]) : acc + in[i];
            if (mean_op) acc = acc / static_cast<double>(in.size());
            return acc;
        };
    }
    if (op == "Identity" || op == "Dropout") {
        hi = op == "Dropout" ? 3 : 1;
        return [](auto in, auto) { return in[0]; };
    }
    if (op == "IsInf") {
        const std::int64_t pos = ai("detect_positive", 1), neg = ai("detect_negative", 1);
        return [pos, neg](auto in, auto) {
            const auto x = in[0];
            if (pos && neg) return isinf(x);
            if (pos) return logical_and(isinf(x), x > 0.0);
            if (neg) return logical_and(isinf(x), x < 0.0);
            return isinf(x) & false;
        };
    }
    if (op == "Reciprocal") return [](auto in, auto) { return 1.0 / in[0]; };
    if (op == "Mod") {
        lo = hi = 2;
        const bool c_fmod = ai("fmod", 0) != 0, floor_mod_floats = opset >= 28;
        return [c_fmod, floor_mod_floats](auto in, auto) {
            if (!c_fmod && !floor_mod_floats && (is_floating(in[0].dtype()) || is_floating(in[1].dtype())))
                throw value_error("kiln: value_error in 'Mod': fmod=0 is for integers before opset 28 (ONNX requires fmod=1 "
                                  "for floating numbers there)");
            if (!c_fmod) return remainder(in[0], in[1]);  // the divisor's sign, as kiln's remainder
            // C's fmod (the dividend's sign): of magnitudes, kiln's remainder is fmod itself.
            const auto r = remainder(abs(in[0]), abs(in[1]));
            return where(in[0] < 0.0, -r, r);
        };
    }
    if (op == "Gelu") {  // (opset 20 on: exact, or the tanh approximation)
        if (opset < 20) throw value_error("Gelu is an operator of opset 20 on, and the model's opset is " + std::to_string(opset));
        const onnx_attr* a = A("approximate");
        const std::string how = a ? a->s : "none";
        if (how != "none" && how != "tanh") throw value_error("Gelu's approximate must be \"none\" or \"tanh\"");
        if (how == "none") return [](auto in, auto) { return gelu(in[0]); };
        return [](auto in, auto) {
            const auto& x = in[0];
            return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        };
    }
    if (op == "Elu") {
        const onnx_attr* a = A("alpha");
        const double alpha = a ? a->f : 1.0;
        return [alpha](auto in, auto) { return where(in[0] > 0.0, in[0], alpha * expm1(in[0])); };
    }
    if (op == "LeakyRelu") {
        const onnx_attr* a = A("alpha");
        const double alpha = a ? a->f : 0.01;
        return [alpha](auto in, auto) { return where(in[0] < 0.0, in[0] * alpha, in[0]); };
    }
    // Activations, normalizations, convolution and pooling, CumSum and Size: onnx_layer_ops.hpp.
    if (replay_fn layer = onnx_layer_kernel<N>(op, opset, A, ai, lo, hi)) return layer;
    if (op == "Where") {
        lo = hi = 3;
        return [](auto in, auto) { return where(in[0], in[1], in[2]); };
    }
    if (op == "Cast") {
        const auto d = from_onnx_dtype(ai("to", 0));
        if (!d) throw value_error("casts to " + onnx_dtype_name(ai("to", 0)) + ", a dtype kiln does not have");
        return [d = *d](auto in, auto) { return in[0].to(d); };
    }
    if (op == "MatMul") {
        lo = hi = 2;
        return [](auto in, auto) { return matmul(in[0], in[1]); };
    }
    if (op == "Gemm") {
        lo = 2, hi = 3;
        const onnx_attr* al = A("alpha");
        const onnx_attr* be = A("beta");
        const double alpha = al ? al->f : 1.0, beta = be ? be->f : 1.0;
        const bool ta = ai("transA", 0) != 0, tb = ai("transB", 0) != 0;
        return [alpha, beta, ta, tb](auto in, auto) {
            if (in[0].dim() != 2 || in[1].dim() != 2) throw shape_error("kiln: shape_error in 'Gemm': A and B must be matrices");
            auto y = matmul(ta ? in[0].transpose(0, 1) : in[0], tb ? in[1].transpose(0, 1) : in[1]);
            if (alpha != 1.0) y = y * alpha;
            if (in.size() > 2 && in[2].valid()) y = beta == 1.0 ? y + in[2] : y + in[2] * beta;
            return y;
        };
    }
    static const std::map<std::string, int> reductions = {
        {"ReduceSum", 0}, {"ReduceMean", 1}, {"ReduceMax", 2}, {"ReduceMin", 3}, {"ReduceProd", 4}, {"ReduceL1", 5},
        {"ReduceL2", 6}, {"ReduceSumSquare", 7}, {"ReduceLogSum", 8}, {"ReduceLogSumExp", 9}};
    if (reductions.count(op)) {
        // (ReduceSum's axes are an input from opset 13, the others' from opset 18; attributes before.)
        const bool axes_input = op == "ReduceSum" || opset >= 18;
        lo = 1, hi = axes_input ? 2 : 1;
        std::vector<std::int64_t> attr_axes;
        if (const onnx_attr* a = A("axes")) {
            if (axes_input)
                throw value_error(op + "'s axes are an input in opset " + std::to_string(opset) + ", not an attribute");
            attr_axes = a->ints;
        }
        const bool keep = ai("keepdims", 1) != 0, noop = ai("noop_with_empty_axes", 0) != 0;
        const int which = reductions.at(op);
        return [attr_axes, keep, noop, which](auto in, auto) {
            std::vector<std::int64_t> ax = attr_axes;
            if (in.size() > 1 && in[1].valid()) ax = int_values(in[1], "the axes");
            if (ax.empty() && noop) return in[0];
            std::vector<int> axes;
            for (std::int64_t a : ax) {
                if (a < -max_rank || a >= max_rank) throw value_error("kiln: value_error in 'load_onnx': an axis is out of range");
                axes.push_back(static_cast<int>(a));
            }
            switch (which) {
                case 0: return sum(in[0], axes, keep).to(in[0].dtype());
                case 1: return mean(in[0], axes, keep);
                case 2: return max(in[0], axes, keep);
                case 3: return min(in[0], axes, keep);
                case 4: return prod(in[0], axes, keep).to(in[0].dtype());
                case 5: return sum(abs(in[0]), axes, keep).to(in[0].dtype());
                case 6: return sqrt(sum(in[0] * in[0], axes, keep)).to(in[0].dtype());
                case 7: return sum(in[0] * in[0], axes, keep).to(in[0].dtype());
                case 8: return log(sum(in[0], axes, keep)).to(in[0].dtype());
                default: {
                    // log(sum(exp(x))) as m + log(sum(exp(x - m))) with m the largest element (0 where it is
                    // infinite, so that a row of -inf gives -inf and not NaN).
                    const auto top = max(in[0], axes, true);
                    const auto m = where(isinf(top), 0.0, top);
                    const auto y = log(sum(exp(in[0] - m), axes, true)) + m;
                    return (keep ? y : sum(y, axes, false)).to(in[0].dtype());
                }
            }
        };
    }
    if (op == "ArgMax" || op == "ArgMin") {
        if (ai("select_last_index", 0)) throw value_error("select_last_index is not read");
        const int axis = static_cast<int>(ai("axis", 0));
        const bool keep = ai("keepdims", 1) != 0, is_max = op == "ArgMax";
        return [axis, keep, is_max](auto in, auto) {
            return is_max ? argmax(in[0], axis, keep) : argmin(in[0], axis, keep);
        };
    }
    if (op == "Softmax" || op == "LogSoftmax") {
        const int axis = static_cast<int>(ai("axis", -1));
        const bool log_op = op == "LogSoftmax";
        return [axis, log_op](auto in, auto) {
            return log_op ? nn::log_softmax(in[0], axis) : nn::softmax(in[0], axis);
        };
    }
    if (op == "Reshape") {
        lo = hi = 2;
        const bool allowzero = ai("allowzero", 0) != 0;
        return [allowzero](auto in, auto) {
            std::vector<std::int64_t> s = int_values(in[1], "Reshape's shape");
            for (std::size_t i = 0; i < s.size(); ++i)
                if (s[i] == 0 && !allowzero) {
                    if (static_cast<int>(i) >= in[0].dim()) throw shape_error("kiln: shape_error in 'Reshape': a 0 copies a dimension the input lacks");
                    s[i] = in[0].shape()[static_cast<int>(i)];
                }
            return in[0].reshape(dims_of(s, "Reshape's shape"));
        };
    }
    if (op == "Flatten") {
        const std::int64_t axis = ai("axis", 1);
        return [axis](auto in, auto) {
            const int r = in[0].dim();
            const int a = static_cast<int>(axis < 0 ? axis + r : axis);
            if (a < 0 || a > r) throw value_error("kiln: value_error in 'Flatten': the axis is out of range");
            std::ptrdiff_t outer = 1, inner = 1;
            for (int i = 0; i < r; ++i) (i < a ? outer : inner) *= in[0].shape()[i];
            return in[0].reshape({outer, inner});
        };
    }
    if (op == "Expand") {
        lo = hi = 2;
        return [](auto in, auto) {
            const dims want = dims_of(int_values(in[1], "Expand's shape"), "Expand's shape");
            dims out;
            if (!broadcast_into(in[0].shape(), want, out)) throw shape_error("kiln: shape_error in 'Expand': cannot broadcast");
            return in[0].broadcast_to(out);
        };
    }
    if (op == "Transpose") {
        std::vector<std::int64_t> perm;
        if (const onnx_attr* a = A("perm")) perm = a->ints;
        return [perm](auto in, auto) {
            const int r = in[0].dim();
            std::array<int, max_rank> fwd{};
            bool seen[max_rank] = {};
            if (!perm.empty() && static_cast<int>(perm.size()) != r) throw value_error("kiln: value_error in 'Transpose': perm has the wrong length");
            for (int i = 0; i < r; ++i) {
                const std::int64_t ax = perm.empty() ? r - 1 - i : perm[static_cast<std::size_t>(i)];
                if (ax < 0 || ax >= r || seen[ax]) throw value_error("kiln: value_error in 'Transpose': perm is not a permutation");
                seen[ax] = true;
                fwd[static_cast<std::size_t>(i)] = static_cast<int>(ax);
            }
            return in[0].permute_array(fwd, r);
        };
    }
    if (op == "Slice") {
        lo = 3, hi = 5;
        return [](auto in, auto) {
            const auto starts = int_values(in[1], "Slice's starts"), ends = int_values(in[2], "Slice's ends");
            std::vector<std::int64_t> axes, steps;
            if (in.size() > 3 && in[3].valid()) axes = int_values(in[3], "Slice's axes");
            if (in.size() > 4 && in[4].valid()) steps = int_values(in[4], "Slice's steps");
            if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size()) ||
                (!steps.empty() && steps.size() != starts.size()))
                throw value_error("kiln: value_error in 'Slice': starts, ends, axes and steps differ in length");
            auto x = in[0];
            for (std::size_t i = 0; i < starts.size(); ++i) {
                const std::int64_t ax = axes.empty() ? static_cast<std::int64_t>(i) : axes[i];
                if (ax < -x.dim() || ax >= x.dim()) throw value_error("kiln: value_error in 'Slice': an axis is out of range");
                const std::int64_t step = steps.empty() ? 1 : steps[i];
                if (step == 0) throw value_error("kiln: value_error in 'Slice': a step is 0");
                // (ONNX's INT64_MAX and INT64_MIN mean "to the end": kiln clamps as Python does.)
                auto clampi = [](std::int64_t v) { return std::clamp<std::int64_t>(v, -(std::int64_t{1} << 50), std::int64_t{1} << 50); };
                x = x.slice(static_cast<int>(ax), clampi(starts[i]), clampi(ends[i]), clampi(step));
            }
            return x;
        };
    }
    if (op == "Gather") {
        lo = hi = 2;
        const int axis = static_cast<int>(ai("axis", 0));
        return [axis](auto in, auto) {
            const auto& x = in[0];
            if (in[1].dtype() != dtype::int64 && in[1].dtype() != dtype::int32)
                throw dtype_error("kiln: dtype_error in 'Gather': indices must be int32 or int64");
            const int ax = axis < 0 ? axis + x.dim() : axis;
            if (ax < 0 || ax >= x.dim()) throw value_error("kiln: value_error in 'Gather': the axis is out of range");
            if (in[1].dim() == 0) {
                read_exact(in[1], "Gather's index");  // (in the loader's check run: a value it computed)
                return x.select(ax, in[1].to(dtype::int64).contiguous().template data<std::int64_t>()[0]);
            }
            const auto flat = in[1].to(dtype::int64).reshape({-1});
            const auto picked = index_select(x, ax, flat);
            dims s;
            s.rank = 0;
            for (int i = 0; i < ax; ++i) s[s.rank++] = x.shape()[i];
            for (int i = 0; i < in[1].dim(); ++i) {
                if (s.rank >= max_rank) throw value_error("kiln: value_error in 'Gather': the result has more than 8 dimensions");
                s[s.rank++] = in[1].shape()[i];
            }
            for (int i = ax + 1; i < x.dim(); ++i) {
                if (s.rank >= max_rank) throw value_error("kiln: value_error in 'Gather': the result has more than 8 dimensions");
                s[s.rank++] = x.shape()[i];
            }
            return picked.reshape(s);
        };
    }
    if (op == "GatherElements") {
        lo = hi = 2;
        const int axis = static_cast<int>(ai("axis", 0));
        return [axis](auto in, auto) { return take_along_axis(in[0], in[1], axis); };
    }
    if (op == "ScatterElements") {
        // Read with reduction "add" only (what kiln's scatter_add and its exports write): data plus the updates
        // added at the indices along the axis.
        lo = hi = 3;
        const onnx_attr* r = A("reduction");
        if (!r || r->s != "add") throw value_error("only ScatterElements' reduction \"add\" is read");
        const int axis = static_cast<int>(ai("axis", 0));
        return [axis](auto in, auto) { return scatter_add(in[0], axis, in[1], in[2]); };
    }
    if (op == "Tile") {
        lo = hi = 2;
        return [](auto in, auto) {
            const std::vector<std::int64_t> reps = int_values(in[1], "Tile's repeats");
            if (static_cast<int>(reps.size()) != in[0].dim())
                throw value_error("kiln: value_error in 'Tile': one repetition per dimension is needed");
            return tile(in[0], std::vector<std::ptrdiff_t>(reps.begin(), reps.end()));
        };
    }
    if (op == "Pad") {
        lo = 2, hi = opset >= 18 ? 4 : 3;  // (opset 18: the axes that the pads are for, an optional input)
        if (const onnx_attr* m = A("mode"); m && m->s != "constant") throw value_error("only Pad's constant mode is read");
        return [](auto in, auto) {
            const std::vector<std::int64_t> pads = int_values(in[1], "Pad's pads");
            const int r = in[0].dim();
            std::vector<int> axes;
            if (in.size() > 3 && in[3].valid()) {
                for (std::int64_t a : int_values(in[3], "Pad's axes")) {
                    if (a < -r || a >= r) throw value_error("kiln: value_error in 'Pad': axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
                    const int ax = static_cast<int>(a < 0 ? a + r : a);
                    if (std::find(axes.begin(), axes.end(), ax) != axes.end())
                        throw value_error("kiln: value_error in 'Pad': axis " + std::to_string(a) + " is given twice");
                    axes.push_back(ax);
                }
            } else {
                for (int k = 0; k < r; ++k) axes.push_back(k);
            }
            const std::size_t n = axes.size();
            if (pads.size() != 2 * n)
                throw value_error("kiln: value_error in 'Pad': pads must hold 2 values per padded axis (" + std::to_string(2 * n) +
                                  "), not " + std::to_string(pads.size()));
            std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>> w(static_cast<std::size_t>(r), {0, 0});
            for (std::size_t k = 0; k < n; ++k) w[static_cast<std::size_t>(axes[k])] = {pads[k], pads[n + k]};
            double value = 0;
            if (in.size() > 2 && in[2].valid()) {
                if (in[2].numel() != 1) throw value_error("kiln: value_error in 'Pad': the constant value has more than one element");
                read_exact(in[2], "Pad's constant value");
                value = in[2].to(dtype::float64).reshape(dims{}).template item<double>();
            }
            return pad(in[0], w, value);  // (negative pads, which ONNX allows for cropping, are a value_error)
        };
    }
    if (op == "Einsum") {
        lo = hi = 2;
        std::string eq;
        if (const onnx_attr* e = A("equation")) eq = e->s;
        std::string spec;
        for (char c : eq)
            if (c != ' ') spec += c;
        (void)ops::make_einsum_attrs(spec);  // a bad equation is refused when the model is read
        return [spec](auto in, auto) { return einsum(spec, in[0], in[1]); };
    }
    if (op == "Squeeze" || op == "Unsqueeze") {
        lo = op == "Squeeze" ? 1 : 2, hi = 2;
        const bool squeeze = op == "Squeeze";
        return [squeeze](auto in, auto) {
            auto x = in[0];
            if (squeeze && (in.size() < 2 || !in[1].valid())) return x.squeeze();
            std::vector<std::int64_t> axes = int_values(in[1], "the axes");
            const int r = x.dim() + (squeeze ? 0 : static_cast<int>(axes.size()));
            for (std::int64_t& a : axes) {
                if (a < -r || a >= r) throw value_error("kiln: value_error in 'load_onnx': an axis is out of range");
                if (a < 0) a += r;
            }
            std::sort(axes.begin(), axes.end());
            if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) throw value_error("kiln: value_error in 'load_onnx': an axis repeats");
            if (squeeze)
                for (auto it = axes.rbegin(); it != axes.rend(); ++it) x = x.squeeze(static_cast<int>(*it));
            else
                for (std::int64_t a : axes) x = x.unsqueeze(static_cast<int>(a));
            return x;
        };
    }
    if (op == "Concat") {
        lo = 1, hi = 4096;
        const int axis = static_cast<int>(ai("axis", 0));
        return [axis](auto in, auto) { return concat(std::vector<tensor>(in.begin(), in.end()), axis); };
    }
    if (op == "Shape") {
        return [](auto in, auto) {
            tensor s(dtype::int64, dims{in[0].dim()});
            for (int i = 0; i < in[0].dim(); ++i) s.data<std::int64_t>()[i] = in[0].shape()[i];
            return s;
        };
    }
    if (op == "Constant") {
        lo = hi = 0;
        const onnx_attr* v = A("value");
        if (!v || !v->has_t) throw value_error("Constant without a 'value' tensor is not read");
        return [t = v->t](auto, auto) { return t; };
    }
    if (op == "ConstantOfShape") {
        const onnx_attr* v = A("value");
        if (v && (!v->has_t || v->t.numel() != 1)) throw value_error("its value must be a one-element tensor");
        const tensor value = v ? v->t.reshape(dims{}) : zeros(dims{}, dtype::float32);
        return [value](auto in, auto) {
            const dims s = dims_of(int_values(in[0], "ConstantOfShape's shape"), "ConstantOfShape's shape");
            checked_numel(s, "ConstantOfShape");
            return value.broadcast_to(s).contiguous();
        };
    }
    throw value_error("ONNX op '" + json::reader::printable(op) + "' has no reading in kiln");
}

}  // namespace detail
}  // namespace kiln
