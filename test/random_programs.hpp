#pragma once
// Random eager programs for differential tests of function mode (test/function.cpp): a program is a list of
// steps, each an op of the vocabulary applied to earlier values (the four arguments first), made from a seed and
// kept only where every step is valid eagerly. The same program then runs eagerly and as a kiln::function, with
// and without a gradient tape and a dynamic batch, on several calls with new values and a new batch, and the
// results must agree.
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace kiln_test::random_programs {

using kiln::tensor;

struct step {
    int op, a, b, p;  // the op; its operands (indices of earlier values); a number that picks axes and flags
};

// The ops, by name (for messages). Each takes its operands from earlier values; an op that does not apply to its
// operands' shapes throws kiln::shape_error, and the generator drops it.
inline constexpr const char* op_names[] = {
    "add", "sub", "mul", "div", "maximum", "minimum", "where", "clamp", "relu", "tanh", "sigmoid", "exp", "sqrt",
    "square", "neg", "affine", "sum", "mean", "max", "matmul", "transpose", "flatten", "slice", "concat", "cast",
    "add_in_place", "abs", "sin", "stack", "center", "softmax", "reshape_like", "pow", "broadcast_to", "slice_step",
    "number_minus", "select", "flip", "tile", "pad", "cumsum", "argmax_take", "index_select", "prod", "var",
    "repeat", "outer", "write_view", "cast_int", "compare", "min", "sub_in_place", "where_number", "matmul_batched",
    "assign_slice", "plus_transpose", "mean_all"};
inline constexpr int op_count = static_cast<int>(sizeof(op_names) / sizeof(op_names[0]));

inline tensor apply_step(const step& s, const std::vector<tensor>& pool) {
    const tensor& a = pool[static_cast<std::size_t>(s.a)];
    const tensor& b = pool[static_cast<std::size_t>(s.b)];
    const int ax = a.dim() > 0 ? s.p % a.dim() : 0;
    const bool keep = (s.p / 7) % 2 != 0;
    auto need = [](bool ok) {
        if (!ok) throw kiln::shape_error("random program: the op does not apply to these shapes");
    };
    switch (s.op) {
        case 0: return a + b;
        case 1: return a - b;
        case 2: return a * b;
        case 3: return a / (kiln::abs(b) + 1);
        case 4: return kiln::maximum(a, b);
        case 5: return kiln::minimum(a, b);
        case 6: return kiln::where(a > b, a, b);
        case 7: return kiln::clamp(a, -1.0, 1.0);
        case 8: return kiln::relu(a);
        case 9: return kiln::tanh(a);
        case 10: return kiln::sigmoid(a);
        case 11: return kiln::exp(kiln::clamp(a, -5.0, 5.0));
        case 12: return kiln::sqrt(kiln::abs(a) + 0.25);
        case 13: return kiln::square(a);
        case 14: return -a;
        case 15: return a * 0.5 + 1;
        case 16: need(a.dim() > 0); return kiln::sum(a, {ax}, keep);
        case 17: need(a.dim() > 0); return kiln::mean(a, {ax}, keep);
        case 18: need(a.dim() > 0); return kiln::max(a, {ax}, keep);
        case 19: need(a.dim() == 2 && b.dim() == 2); return kiln::matmul(a, b.transpose(0, 1));
        case 20: need(a.dim() == 2); return a.transpose(0, 1);
        case 21: return a.reshape({-1});
        case 22: need(a.dim() > 0); return a.slice(ax, 0, a.shape()[ax] / 2 + 1);
        case 23: need(a.dim() > 0); return kiln::concat({a, b}, ax);
        case 24: return a.to(kiln::float64) * 3 - b.to(kiln::float64);
        case 25: {
            tensor c = a * 1;
            c += b;
            return c;
        }
        case 26: return kiln::abs(a);
        case 27: return kiln::sin(a);
        case 28: return kiln::sum(kiln::stack({a, b}), {0});
        case 29: need(a.dim() > 0); return a - kiln::mean(a, {ax}, true);
        case 30: need(a.dim() > 0); return kiln::nn::softmax(a, ax);
        case 31: return a.reshape(b.shape());
        case 32: return kiln::pow(kiln::abs(a) + 0.5, 1.5);
        case 33: return a.broadcast_to(b.shape());
        case 34: need(a.dim() > 0); return a.slice(ax, 0, a.shape()[ax], 2);
        case 35: return 2.0 - a;
        case 36: need(a.dim() > 0); return a.select(ax, 0);
        case 37: need(a.dim() > 0); return kiln::flip(a, {ax});
        case 38: need(a.dim() == 2); return kiln::tile(a, {1 + s.p % 2, 2});
        case 39: need(a.dim() == 2); return kiln::pad(a, {{1, 0}, {0, 2}}, 0.5);
        case 40: need(a.dim() > 0); return kiln::cumsum(a, ax, s.p % 2 != 0);
        case 41: {
            need(a.dim() > 0);
            const tensor i = kiln::argmax(a, ax, true);
            return kiln::take_along_axis(a, i, ax) + i.to(a.dtype());
        }
        case 42: {
            need(a.dim() > 0);
            const std::int64_t n = a.shape()[ax];
            return kiln::index_select(a, ax, kiln::from_vector(std::vector<std::int64_t>{n - 1, 0, n / 2}).to(a.device()));
        }
        case 43: need(a.dim() > 0); return kiln::prod(kiln::tanh(a) + 1, {ax}, keep);
        case 44: need(a.dim() > 0); return kiln::var(a, {ax}, 0, keep);
        case 45: return kiln::repeat(a, 2, a.dim() > 0 ? std::optional<int>(ax) : std::nullopt);
        case 46: need(a.dim() == 1 && b.dim() == 1); return kiln::outer(a, b);
        case 47: {
            need(a.dim() > 0);
            tensor c = a * 1;
            tensor v = c.slice(ax, 0, 1);
            v += 1;
            return c;
        }
        case 48: return (a * 4).to(kiln::int32).to(a.dtype()) + b;
        case 49: return kiln::sum((a > b).to(a.dtype()) * a);
        case 50: need(a.dim() > 0); return kiln::min(a, {ax}, keep);
        case 51: {
            tensor c = b.clone();
            c -= a;
            return c * 2;
        }
        case 52: return kiln::where(a < 0.1, 0.25, a);
        case 53: need(a.dim() == 2 && b.dim() == 2); return kiln::matmul(kiln::stack({a, a * 2}), b.transpose(0, 1));
        case 54: {
            need(a.dim() > 0);
            tensor c = kiln::zeros(a.shape(), a.dtype(), a.device());
            c.slice(ax, 0, 1) = a.slice(ax, 0, 1) * 3;
            return c + a;
        }
        case 55: need(a.dim() == 2 && a.shape()[0] == a.shape()[1]); return a + a.transpose(0, 1);
        default: return kiln::mean(a) * b;
    }
}

// How a program's arguments are made: (B, F), (F,), (B, 1) and (B, F), of one floating dtype.
struct setup {
    std::int64_t batch, features, other_batch;
    kiln::dtype dtype;
    int outputs;  // how many of the last values are results
};

inline std::vector<tensor> arguments(const setup& su, std::int64_t batch, kiln::generator& g,
                                     const kiln::device& where = kiln::cpu) {
    return {kiln::randn({batch, su.features}, g).to(su.dtype).to(where), kiln::randn({su.features}, g).to(su.dtype).to(where),
            kiln::randn({batch, 1}, g).to(su.dtype).to(where), kiln::randn({batch, su.features}, g).to(su.dtype).to(where)};
}

inline std::vector<tensor> run(const std::vector<step>& program, std::vector<tensor> values) {
    for (const step& s : program) values.push_back(apply_step(s, values));
    return values;
}

// A program of 4 to 15 valid steps from `seed`, and how its arguments are made.
inline std::vector<step> make(std::uint32_t seed, setup& su) {
    std::mt19937 rng(seed);
    const std::int64_t batches[] = {1, 3, 8, 33}, features[] = {1, 4, 17};
    su.batch = batches[rng() % 4];
    su.features = features[rng() % 3];
    su.other_batch = batches[rng() % 4];
    su.dtype = rng() % 4 == 0 ? kiln::float64 : kiln::float32;
    kiln::generator g(seed);
    std::vector<tensor> values = arguments(su, su.batch, g);
    std::vector<step> program;
    const std::size_t length = 4 + rng() % 12;
    for (int tries = 0; program.size() < length && tries < 200; ++tries) {
        step s{static_cast<int>(rng() % op_count), static_cast<int>(rng() % values.size()),
               static_cast<int>(rng() % values.size()), static_cast<int>(rng() % 100)};
        if (rng() % 2) s.a = static_cast<int>(values.size() - 1 - rng() % std::min<std::size_t>(3, values.size()));
        try {
            values.push_back(apply_step(s, values));
            program.push_back(s);
        } catch (const kiln::shape_error&) {
        }
    }
    su.outputs = 1 + static_cast<int>(rng() % 3);
    return program;
}

inline std::string describe(const std::vector<step>& program) {
    std::string out;
    for (const step& s : program)
        out += std::string(op_names[s.op]) + "(%" + std::to_string(s.a) + ", %" + std::to_string(s.b) + ", " +
               std::to_string(s.p) + ") ";
    return out;
}

// The program's results (its last `outputs` values), then with `gradients` the gradients of the sum of their
// squares with respect to the four arguments.
inline std::vector<tensor> results(const std::vector<step>& program, const setup& su, std::vector<tensor> args,
                                   bool gradients) {
    auto last = [&](const std::vector<tensor>& values) {
        std::vector<tensor> r;
        for (int i = 0; i < su.outputs && i < static_cast<int>(values.size()); ++i) r.push_back(values[values.size() - 1 - static_cast<std::size_t>(i)]);
        return r;
    };
    if (!gradients) return last(run(program, args));
    kiln::gradient_tape tape;
    for (tensor& t : args) tape.watch(t);
    std::vector<tensor> r = last(run(program, args));
    tensor loss = kiln::zeros({}, kiln::float64, args[0].device());
    for (const tensor& t : r)
        if (kiln::detail::is_floating(t.dtype())) loss = loss + kiln::sum(kiln::square(t).to(kiln::float64));
    const std::vector<tensor> gs = tape.gradient(loss, args);
    r.insert(r.end(), gs.begin(), gs.end());
    return r;
}

// Empty when the two lists agree (dtypes, shapes, values within `tol` relative to max(1, |value|); NaN where
// both are NaN); otherwise where they part.
inline std::string compare(const std::vector<tensor>& expect, const std::vector<tensor>& got, double tol) {
    if (expect.size() != got.size())
        return std::to_string(expect.size()) + " results against " + std::to_string(got.size());
    for (std::size_t i = 0; i < expect.size(); ++i) {
        if (expect[i].dtype() != got[i].dtype() || !(expect[i].shape() == got[i].shape()))
            return "result " + std::to_string(i) + ": " + kiln::to_string(expect[i].shape()) + " " +
                   std::string(kiln::name(expect[i].dtype())) + " against " + kiln::to_string(got[i].shape()) + " " +
                   std::string(kiln::name(got[i].dtype()));
        const tensor e = expect[i].to(kiln::float64).contiguous(), g = got[i].to(kiln::float64).contiguous();
        const double* pe = e.data<const double>();
        const double* pg = g.data<const double>();
        for (std::int64_t k = 0; k < e.numel(); ++k) {
            const double d = std::fabs(pe[k] - pg[k]) / std::max({1.0, std::fabs(pe[k]), std::fabs(pg[k])});
            if (!(d <= tol) && !(std::isnan(pe[k]) && std::isnan(pg[k])))
                return "result " + std::to_string(i) + ", element " + std::to_string(k) + ": eager " +
                       std::to_string(pe[k]) + ", traced " + std::to_string(pg[k]);
        }
    }
    return {};
}

// Runs `program` eagerly and as a kiln::function (a dynamic batch in its specs when `dynamic`) on five calls: the
// arguments it was made with, new values, a new batch, the first batch again, the new batch again. Empty when
// every call agrees; otherwise the first disagreement.
inline std::string check(std::uint32_t seed, const setup& su, const std::vector<step>& program, bool gradients,
                         bool dynamic) {
    std::vector<kiln::spec> specs;
    if (dynamic)
        specs = {kiln::spec(su.dtype, {kiln::dyn, su.features}), kiln::spec(su.dtype, {su.features}),
                 kiln::spec(su.dtype, {kiln::dyn, 1}), kiln::spec(su.dtype, {kiln::dyn, su.features})};
    auto traced = kiln::function(
        [&](const tensor& a0, const tensor& a1, const tensor& a2, const tensor& a3) {
            return results(program, su, {a0, a1, a2, a3}, gradients);
        },
        specs, {.name = "random_program"});
    const double tol = su.dtype == kiln::float64 ? 1e-11 : 2e-5;
    kiln::generator g(seed);
    const std::int64_t batches[] = {su.batch, su.batch, su.other_batch, su.batch, su.other_batch};
    for (int call = 0; call < 5; ++call) {
        const std::vector<tensor> args = arguments(su, batches[call], g);
        std::vector<tensor> expect;
        try {
            expect = results(program, su, args, gradients);
        } catch (const kiln::error& e) {
            // The program does not apply to this batch (a square matrix op, say), or eager mode refuses it (an
            // in-place write into a tensor a tape follows): the traced call must refuse it too.
            try {
                (void)traced(args[0], args[1], args[2], args[3]);
            } catch (const kiln::error&) {
                continue;
            }
            return "call " + std::to_string(call) + ": eager mode threw (" + e.what() + "), the traced call did not";
        }
        std::string why;
        try {
            why = compare(expect, traced(args[0], args[1], args[2], args[3]), tol);
        } catch (const std::exception& e) {
            why = std::string("the traced call threw: ") + e.what();
        }
        if (!why.empty()) return "call " + std::to_string(call) + ": " + why;
    }
    return {};
}

}  // namespace kiln_test::random_programs
