// Training pieces: layers, losses, optimizers (against hand-computed updates) and batching; a small model learns.
#include <kiln/kiln.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"
#include "tensor_check.hpp"

using kiln_test::f64;
using kiln_test::values;

TEST_CASE("softmax, losses and their gradients") {
    const auto logits = f64({1, 2, 3, 1, 1, 1}, {2, 3});
    const auto p = kiln::nn::softmax(logits);
    const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), z = e1 + e2 + e3;
    kiln_test::check_all_close(values(p), std::vector<double>{e1 / z, e2 / z, e3 / z, 1. / 3, 1. / 3, 1. / 3}, 1e-12);
    // Stable for huge logits.
    CHECK(!std::isnan(kiln::nn::softmax(f64({1000, 0}, {1, 2})).at<double>({0, 0})));
    const auto labels = kiln::from_values<std::int64_t>({2, 0}, {2});
    const double ce = (-(std::log(e3 / z)) - std::log(1. / 3)) / 2;
    CHECK(kiln::nn::cross_entropy(logits, labels).item<double>() == doctest::Approx(ce).epsilon(1e-12));
    CHECK(kiln::nn::mse(f64({1, 2}, {2}), f64({0, 4}, {2})).item<double>() == 2.5);
    // A (n, 1) prediction against (n,) targets would broadcast to (n, n): refused, naming both shapes.
    CHECK_THROWS_WITH_AS(kiln::nn::mse(f64({1, 2}, {2, 1}), f64({0, 4}, {2})),
                         "kiln: shape_error in 'nn::mse': the prediction has shape (2, 1) and the target (2,); they must be "
                         "equal (broadcasting them would compare every prediction with every target): reshape one",
                         kiln::shape_error);
    // d CE / d logits = (softmax - onehot) / batch.
    kiln::gradient_tape tape;
    tape.watch(logits);
    const auto g = tape.gradient(kiln::nn::cross_entropy(logits, labels), logits);
    kiln_test::check_all_close(values(g), std::vector<double>{e1 / z / 2, e2 / z / 2, (e3 / z - 1) / 2, (1. / 3 - 1) / 2,
                                                             1. / 6, 1. / 6},
                               1e-9);
    CHECK_THROWS_AS(kiln::nn::cross_entropy(f64({1, 2}, {2}), labels), kiln::shape_error);
    // Probabilities of the logits' shape give the same loss as the class indices they encode; a (batch, 1) or
    // (batch,) floating tensor would broadcast over the classes, and is refused.
    const auto probs = f64({0, 0, 1, 1, 0, 0}, {2, 3});
    CHECK(kiln::nn::cross_entropy(logits, probs).item<double>() == doctest::Approx(ce).epsilon(1e-12));
    CHECK_THROWS_WITH_AS(kiln::nn::cross_entropy(logits, f64({1, 1}, {2, 1})),
                         "kiln: shape_error in 'nn::cross_entropy': probabilities (2, 1) do not match logits (2, 3) (floating "
                         "labels are probabilities of the logits' shape; class indices are integers)",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::cross_entropy(logits, f64({1, 1, 1}, {3})), kiln::shape_error);
}

TEST_CASE("l1, huber, smooth L1 and binary cross-entropy losses equal their formulas, with their gradients") {
    const kiln::tensor p = f64({0.5, -2, 3, 0.25, 4, -0.75}, {2, 3}), t = f64({0, 1, 3.5, 0.25, -1, 0}, {2, 3});
    const std::vector<double> pv = values(p), tv = values(t);
    double l1 = 0, huber = 0, huber2 = 0, smooth = 0;
    for (std::size_t i = 0; i < pv.size(); ++i) {
        const double d = std::fabs(pv[i] - tv[i]);
        l1 += d;
        huber += d < 1 ? 0.5 * d * d : d - 0.5;
        huber2 += d < 2 ? 0.5 * d * d : 2 * (d - 1);
        smooth += d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
    }
    CHECK(kiln::nn::l1_loss(p, t).item<double>() == doctest::Approx(l1 / 6).epsilon(1e-15));
    CHECK(kiln::nn::huber_loss(p, t).item<double>() == doctest::Approx(huber / 6).epsilon(1e-15));
    CHECK(kiln::nn::huber_loss(p, t, 2.0).item<double>() == doctest::Approx(huber2 / 6).epsilon(1e-15));
    CHECK(kiln::nn::smooth_l1_loss(p, t, 0.5).item<double>() == doctest::Approx(smooth / 6).epsilon(1e-15));
    CHECK(kiln::nn::smooth_l1_loss(p, t, 0.0).item<double>() == doctest::Approx(l1 / 6).epsilon(1e-15));
    CHECK(kiln::nn::smooth_l1_loss(p, t, 2.0).item<double>() == doctest::Approx(huber2 / 6 / 2).epsilon(1e-15));

    // Binary cross-entropy: of probabilities (logs clamped at -100, so 0 and 1 are finite), and of logits, stable
    // where the naive formula overflows (x = 800: exp(800) is inf) or loses every digit (x = -40, t = 0).
    const kiln::tensor q = f64({0.9, 0.2, 0, 1, 0.5}, {5}), y = f64({1, 0, 1, 0, 0.3}, {5});
    const double bce = -(std::log(0.9) + std::log(0.8) - 100 - 100 + 0.3 * std::log(0.5) + 0.7 * std::log(0.5)) / 5;
    CHECK(kiln::nn::binary_cross_entropy(q, y).item<double>() == doctest::Approx(bce).epsilon(1e-14));
    const kiln::tensor x = f64({800, -40, 0, 2.5, -1}, {5}), z = f64({0, 0, 1, 1, 0.25}, {5});
    auto softplus = [](double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::fabs(v))); };
    double bcel = 0, weighted = 0;
    const std::vector<double> xv = values(x), zv = values(z);
    for (std::size_t i = 0; i < xv.size(); ++i) {
        bcel += softplus(xv[i]) - xv[i] * zv[i];
        weighted += (1 - zv[i]) * xv[i] + (1 + (3 - 1) * zv[i]) * softplus(-xv[i]);
    }
    CHECK(bcel / 5 > 160);  // (the 800 with target 0 costs 800)
    CHECK(kiln::nn::binary_cross_entropy_with_logits(x, z).item<double>() == doctest::Approx(bcel / 5).epsilon(1e-15));
    CHECK(kiln::nn::binary_cross_entropy_with_logits(x, z, f64({3}, {1})).item<double>() == doctest::Approx(weighted / 5).epsilon(1e-15));
    // With logits of moderate size, the logit form equals the probability form of sigmoid(x).
    const kiln::tensor xm = f64({0.3, -1.2, 2, 0}, {2, 2}), zm = f64({1, 0, 0.5, 1}, {2, 2});
    CHECK(kiln::nn::binary_cross_entropy_with_logits(xm, zm).item<double>() ==
          doctest::Approx(kiln::nn::binary_cross_entropy(kiln::sigmoid(xm), zm).item<double>()).epsilon(1e-14));
    // pos_weight per class of the last axis.
    const double w0 = 2, w1 = 0.5;
    double per_class = 0;
    for (int i = 0; i < 4; ++i) {
        const double v = values(xm)[static_cast<std::size_t>(i)], tt = values(zm)[static_cast<std::size_t>(i)], pw = i % 2 ? w1 : w0;
        per_class += (1 - tt) * v + (1 + (pw - 1) * tt) * softplus(-v);
    }
    CHECK(kiln::nn::binary_cross_entropy_with_logits(xm, zm, f64({w0, w1}, {2})).item<double>() == doctest::Approx(per_class / 4).epsilon(1e-14));

    // Gradients: d/dx of the logit form is (sigmoid(x) - t) / n; of the Huber loss, clip(d, -delta, delta) / n.
    {
        kiln::gradient_tape tape;
        tape.watch(xm);
        const kiln::tensor gx = tape.gradient(kiln::nn::binary_cross_entropy_with_logits(xm, zm), xm);
        for (int i = 0; i < 4; ++i) {
            const double v = values(xm)[static_cast<std::size_t>(i)];
            CHECK(values(gx)[static_cast<std::size_t>(i)] == doctest::Approx((1 / (1 + std::exp(-v)) - values(zm)[static_cast<std::size_t>(i)]) / 4).epsilon(1e-14));
        }
    }
    {
        kiln::gradient_tape tape;
        tape.watch(p);
        const kiln::tensor gp = tape.gradient(kiln::nn::huber_loss(p, t, 2.0), p);
        for (std::size_t i = 0; i < pv.size(); ++i)
            CHECK(values(gp)[i] == doctest::Approx(std::clamp(pv[i] - tv[i], -2.0, 2.0) / 6).epsilon(1e-15));
    }
    // Traced: one trace for any batch, eager mode's values.
    auto traced = kiln::function([](const kiln::tensor& a, const kiln::tensor& b) {
        return kiln::nn::binary_cross_entropy_with_logits(a, b) + kiln::nn::huber_loss(a, b) + kiln::nn::l1_loss(a, b);
    }, {kiln::spec(kiln::float64, {kiln::dyn, 2}), kiln::spec(kiln::float64, {kiln::dyn, 2})});
    CHECK(traced(xm, zm).item<double>() == doctest::Approx((kiln::nn::binary_cross_entropy_with_logits(xm, zm) +
                                                            kiln::nn::huber_loss(xm, zm) + kiln::nn::l1_loss(xm, zm)).item<double>()).epsilon(1e-15));
    const kiln::tensor x3 = f64({1, 2, 3, 4, 5, 6}, {3, 2}), z3 = f64({1, 0, 1, 0, 1, 0}, {3, 2});
    CHECK(traced(x3, z3).item<double>() == doctest::Approx((kiln::nn::binary_cross_entropy_with_logits(x3, z3) +
                                                            kiln::nn::huber_loss(x3, z3) + kiln::nn::l1_loss(x3, z3)).item<double>()).epsilon(1e-15));
    CHECK(traced.trace_count() == 1);

    // Refusals, in sentences.
    CHECK_THROWS_WITH_AS(kiln::nn::huber_loss(p, t.reshape({3, 2})),
                         "kiln: shape_error in 'nn::huber_loss': the prediction has shape (2, 3) and the target (3, 2); they must be "
                         "equal (broadcasting them would compare every prediction with every target): reshape one", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::huber_loss(p, t, 0.0), "kiln: value_error in 'nn::huber_loss': delta must be positive and finite, got 0",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::smooth_l1_loss(p, t, -1.0), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::binary_cross_entropy(f64({0.5, 1.5}, {2}), f64({0, 1}, {2})),
                         "kiln: value_error in 'nn::binary_cross_entropy': probabilities must be in [0, 1], got 1.5 (use "
                         "binary_cross_entropy_with_logits for logits)", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::binary_cross_entropy_with_logits(kiln::from_values<std::int64_t>({1, 2}, {2}), f64({0, 1}, {2})),
                         "kiln: dtype_error in 'nn::binary_cross_entropy_with_logits': the logits must be floating, got int64", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(kiln::nn::binary_cross_entropy_with_logits(xm, zm, f64({1, 2, 3}, {3})),
                         "kiln: shape_error in 'nn::binary_cross_entropy_with_logits': pos_weight (3,) must be one weight per class of "
                         "the last axis of (2, 2)", kiln::shape_error);
}

// One LSTM or GRU layer step by its definition (PyTorch's formulas), on row-major vectors: x (batch, in), h and c
// (batch, hidden), weights (gates * hidden, in) and (gates * hidden, hidden).
struct recurrent_ref {
    std::vector<double> w_ih, w_hh, b_ih, b_hh;
    std::ptrdiff_t in, hidden;
    static double sig(double v) { return 1 / (1 + std::exp(-v)); }
    // The projection of row b: gate row j of x w_ih^T + b_ih (xi) and of h w_hh^T + b_hh (hh).
    std::pair<double, double> parts(const std::vector<double>& x, const std::vector<double>& h, std::ptrdiff_t b, std::ptrdiff_t j) const {
        double xi = b_ih[static_cast<std::size_t>(j)], hh = b_hh[static_cast<std::size_t>(j)];
        for (std::ptrdiff_t k = 0; k < in; ++k) xi += w_ih[static_cast<std::size_t>(j * in + k)] * x[static_cast<std::size_t>(b * in + k)];
        for (std::ptrdiff_t k = 0; k < hidden; ++k)
            hh += w_hh[static_cast<std::size_t>(j * hidden + k)] * h[static_cast<std::size_t>(b * hidden + k)];
        return {xi, hh};
    }
    void lstm(const std::vector<double>& x, std::vector<double>& h, std::vector<double>& c, std::ptrdiff_t batch) const {
        std::vector<double> h2 = h;
        for (std::ptrdiff_t b = 0; b < batch; ++b)
            for (std::ptrdiff_t u = 0; u < hidden; ++u) {
                auto gate = [&](std::ptrdiff_t k) {
                    const auto [xi, hh] = parts(x, h, b, k * hidden + u);
                    return xi + hh;
                };
                const double i = sig(gate(0)), f = sig(gate(1)), g = std::tanh(gate(2)), o = sig(gate(3));
                double& cell = c[static_cast<std::size_t>(b * hidden + u)];
                cell = f * cell + i * g;
                h2[static_cast<std::size_t>(b * hidden + u)] = o * std::tanh(cell);
            }
        h = h2;
    }
    void gru(const std::vector<double>& x, std::vector<double>& h, std::ptrdiff_t batch) const {
        std::vector<double> h2 = h;
        for (std::ptrdiff_t b = 0; b < batch; ++b)
            for (std::ptrdiff_t u = 0; u < hidden; ++u) {
                const auto [xr, hr] = parts(x, h, b, u);
                const auto [xz, hz] = parts(x, h, b, hidden + u);
                const auto [xn, hn] = parts(x, h, b, 2 * hidden + u);
                const double r = sig(xr + hr), z = sig(xz + hz), n = std::tanh(xn + r * hn);
                h2[static_cast<std::size_t>(b * hidden + u)] = (1 - z) * n + z * h[static_cast<std::size_t>(b * hidden + u)];
            }
        h = h2;
    }
};

TEST_CASE("nn::lstm and nn::gru (and their cells) equal PyTorch's formulas over layers and time, differentiate and trace") {
    kiln::generator g(29);
    const std::ptrdiff_t batch = 2, length = 5, in = 3, hidden = 4, layers = 2;
    for (bool is_lstm : {true, false}) {
        CAPTURE(is_lstm);
        kiln::nn::lstm lstm(in, hidden, layers, g, kiln::float64);
        kiln::nn::gru gru(in, hidden, layers, g, kiln::float64);
        kiln::nn::module& m = is_lstm ? static_cast<kiln::nn::module&>(lstm) : gru;
        const std::vector<kiln::variable>& w_ih = is_lstm ? lstm.w_ih : gru.w_ih;
        std::vector<kiln::variable>& w_hh = is_lstm ? lstm.w_hh : gru.w_hh;
        const std::vector<kiln::variable>& b_ih = is_lstm ? lstm.b_ih : gru.b_ih;
        const std::vector<kiln::variable>& b_hh = is_lstm ? lstm.b_hh : gru.b_hh;
        const std::ptrdiff_t gates = is_lstm ? 4 : 3;
        CHECK(m.parameters().size() == 8);
        CHECK(w_ih[0].shape() == kiln::dims{gates * hidden, in});
        CHECK(w_ih[1].shape() == kiln::dims{gates * hidden, hidden});
        const double k = 1 / std::sqrt(4.0);
        CHECK(kiln::max(kiln::abs(w_hh[1])).item<double>() <= k);
        const kiln::tensor x = kiln::randn({batch, length, in}, kiln::float64, g);
        const kiln::tensor h0 = kiln::randn({layers, batch, hidden}, kiln::float64, g), c0 = kiln::randn({layers, batch, hidden}, kiln::float64, g);
        const auto r = is_lstm ? lstm(x, h0, c0) : gru(x, h0);
        REQUIRE(r.output.shape() == kiln::dims{batch, length, hidden});
        REQUIRE(r.h.shape() == kiln::dims{layers, batch, hidden});
        // The reference, layer by layer and step by step.
        std::vector<std::vector<double>> seq;
        for (std::ptrdiff_t t = 0; t < length; ++t) seq.push_back(values(x.select(1, t)));
        std::vector<double> want_h, want_c;
        for (std::ptrdiff_t l = 0; l < layers; ++l) {
            const std::size_t li = static_cast<std::size_t>(l);
            const recurrent_ref ref{values(w_ih[li]), values(w_hh[li]), values(b_ih[li]), values(b_hh[li]), l == 0 ? in : hidden, hidden};
            std::vector<double> h = values(h0.select(0, static_cast<int>(l))), c = values(c0.select(0, static_cast<int>(l)));
            for (std::ptrdiff_t t = 0; t < length; ++t) {
                if (is_lstm) ref.lstm(seq[static_cast<std::size_t>(t)], h, c, batch);
                else ref.gru(seq[static_cast<std::size_t>(t)], h, batch);
                seq[static_cast<std::size_t>(t)] = h;
            }
            want_h.insert(want_h.end(), h.begin(), h.end());
            want_c.insert(want_c.end(), c.begin(), c.end());
        }
        for (std::ptrdiff_t t = 0; t < length; ++t)
            kiln_test::check_all_close(values(r.output.select(1, t)), seq[static_cast<std::size_t>(t)], 1e-13, 1e-13);
        kiln_test::check_all_close(values(r.h), want_h, 1e-13, 1e-13);
        if (is_lstm) kiln_test::check_all_close(values(r.c), want_c, 1e-13, 1e-13);
        else CHECK(r.c.numel() == 0);
        // The cells: one step of layer 0.
        const kiln::tensor x0 = x.select(1, 0), h00 = h0.select(0, 0), c00 = c0.select(0, 0);
        const recurrent_ref ref0{values(w_ih[0]), values(w_hh[0]), values(b_ih[0]), values(b_hh[0]), in, hidden};
        std::vector<double> hv = values(h00), cv = values(c00);
        if (is_lstm) {
            ref0.lstm(values(x0), hv, cv, batch);
            const auto [h1, c1] = kiln::nn::lstm_cell(x0, h00, c00, w_ih[0], w_hh[0], b_ih[0], b_hh[0]);
            kiln_test::check_all_close(values(h1), hv, 1e-13, 1e-13);
            kiln_test::check_all_close(values(c1), cv, 1e-13, 1e-13);
        } else {
            ref0.gru(values(x0), hv, batch);
            kiln_test::check_all_close(values(kiln::nn::gru_cell(x0, h00, w_ih[0], w_hh[0], b_ih[0], b_hh[0])), hv, 1e-13, 1e-13);
        }
        // Zeros as the initial state when none is given.
        const auto r0 = is_lstm ? lstm.run(x) : gru.run(x);
        const auto rz = is_lstm ? lstm(x, kiln::zeros({layers, batch, hidden}, kiln::float64), kiln::zeros({layers, batch, hidden}, kiln::float64))
                                : gru(x, kiln::zeros({layers, batch, hidden}, kiln::float64));
        CHECK(kiln::allclose(r0.output, rz.output, 0, 0));

        // The gradient through time against central differences, for a recurrent weight of layer 0.
        const kiln::tensor proj = kiln::randn({batch, length, hidden}, kiln::float64, g);
        kiln::tensor grad;
        {
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::sum(m(x) * proj);
            grad = tape.gradient(loss, w_hh[0]);
        }
        for (std::ptrdiff_t at : {0, 7, 21, 40}) {
            kiln::tensor& w = w_hh[0];
            const double keep = w.data<double>()[at];
            w.data<double>()[at] = keep + 1e-6;
            const double up = kiln::sum(m(x) * proj).item<double>();
            w.data<double>()[at] = keep - 1e-6;
            const double down = kiln::sum(m(x) * proj).item<double>();
            w.data<double>()[at] = keep;
            CHECK(grad.contiguous().data<double>()[at] == doctest::Approx((up - down) / 2e-6).epsilon(1e-6));
        }
        // Traced with a dynamic batch: one trace for batches 2 and 3, eager mode's values bit for bit.
        auto fn = kiln::function([&](const kiln::tensor& xx) { return m(xx); }, {kiln::spec(kiln::float64, {kiln::dyn, length, in})});
        CHECK(kiln::allclose(fn(x), m(x), 0, 0));
        const kiln::tensor x3 = kiln::randn({3, length, in}, kiln::float64, g);
        CHECK(kiln::allclose(fn(x3), m(x3), 0, 0));
        CHECK(fn.trace_count() == 1);
    }
    // Refusals, in sentences.
    kiln::nn::lstm lstm(3, 4, 2, g, kiln::float64);
    kiln::nn::gru gru(3, 4, 1, g, kiln::float64);
    CHECK_THROWS_WITH_AS(lstm(kiln::zeros({2, 5, 4}, kiln::float64)),
                         "kiln: shape_error in 'nn::lstm': the input must be (batch, length, 3) with a length of at least 1, got (2, 5, 4)",
                         kiln::shape_error);
    CHECK_THROWS_AS(lstm(kiln::zeros({2, 0, 3}, kiln::float64)), kiln::shape_error);
    CHECK_THROWS_WITH_AS(lstm(kiln::zeros({2, 5, 3}, kiln::float32)),
                         "kiln: dtype_error in 'nn::lstm': the input is float32, the parameters float64", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(lstm(kiln::zeros({2, 5, 3}, kiln::float64), kiln::zeros({1, 2, 4}, kiln::float64)),
                         "kiln: shape_error in 'nn::lstm': the initial state h0 must be (num_layers, batch, hidden) = (2, 2, 4), "
                         "got (1, 2, 4)", kiln::shape_error);
    CHECK_THROWS_WITH_AS(lstm(kiln::zeros({2, 5, 3}, kiln::float64), kiln::zeros({2, 2, 4}, kiln::float64), kiln::zeros({2, 2, 4})),
                         "kiln: dtype_error in 'nn::lstm': the initial state c0 is float32, the input float64", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(gru(kiln::zeros({2, 5, 3}, kiln::float64), kiln::zeros({1, 2, 4}, kiln::float64), kiln::zeros({1, 2, 4}, kiln::float64)),
                         "kiln: value_error in 'nn::gru': a GRU has no cell state (c0)", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::lstm(3, 0), "kiln: value_error in 'nn::lstm': input_size 3, hidden_size 0 and num_layers 1 must be positive",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::gru_cell(kiln::zeros({2, 3}), kiln::zeros({2, 4}), kiln::zeros({12, 3}), kiln::zeros({8, 4})), kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::lstm_cell(kiln::zeros({2, 3}), kiln::zeros({2, 4}), kiln::zeros({2, 4}), kiln::zeros({16, 3}),
                                             kiln::zeros({16, 4}, kiln::float64)),
                         "kiln: dtype_error in 'nn::lstm_cell': the operands must have one dtype, the weights' float32, got float64",
                         kiln::dtype_error);
}

TEST_CASE("sgd and adam update in one pass as the formulas say") {
    kiln::variable w(f64({1, -2}, {2}));
    kiln::optim::sgd plain({&w}, 0.1);
    plain.step({f64({0.5, 1}, {2})});
    kiln_test::check_all_close(values(w), std::vector<double>{0.95, -2.1}, 1e-15);
    kiln::optim::sgd momentum({&w}, 0.1, 0.9);
    momentum.step({f64({1, 1}, {2})});   // v = 1, w -= 0.1
    momentum.step({f64({1, 1}, {2})});   // v = 1.9, w -= 0.19
    kiln_test::check_all_close(values(w), std::vector<double>{0.95 - 0.29, -2.1 - 0.29}, 1e-14);

    kiln::variable a(f64({1, 1}, {2}));
    kiln::optim::adam opt({&a}, 0.01);
    double m = 0, v = 0, x = 1;
    for (int t = 1; t <= 3; ++t) {
        const double gr = 0.5 * t;
        opt.step({f64({gr, -gr}, {2})});
        m = 0.9 * m + 0.1 * gr;
        v = 0.999 * v + 0.001 * gr * gr;
        const double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
        x -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
    }
    CHECK(a.at<double>({0}) == doctest::Approx(x).epsilon(1e-9));
    CHECK(a.at<double>({1}) == doctest::Approx(2 - x).epsilon(1e-9));
    CHECK_THROWS_AS(opt.step({}), kiln::value_error);
    CHECK_THROWS_AS(opt.step({f64({1, 2, 3}, {3})}), kiln::shape_error);
}

TEST_CASE("adamw decays each parameter by 1 - lr * weight_decay before Adam's step, eagerly, traced and in graph mode") {
    // PyTorch's AdamW, step by step: p *= 1 - lr * wd, then Adam's update with bias correction.
    kiln::variable a(f64({1, -3}, {2}));
    kiln::optim::adamw opt({&a}, 0.05, 0.9, 0.999, 1e-8, 0.1);
    CHECK(opt.weight_decay() == 0.1);
    CHECK(kiln::optim::adamw::kind() == "adamw");
    double m = 0, v = 0, x = 1, y = -3, my = 0, vy = 0;
    for (int t = 1; t <= 4; ++t) {
        const double lr = t == 3 ? 0.02 : 0.05;  // the decay follows a rate changed between steps
        opt.set_learning_rate(lr);
        const double gx = 0.5 * t, gy = -0.25;
        opt.step({f64({gx, gy}, {2})});
        auto adam = [&](double& p, double& mm, double& vv, double gr) {
            p *= 1 - lr * 0.1;
            mm = 0.9 * mm + 0.1 * gr;
            vv = 0.999 * vv + 0.001 * gr * gr;
            const double mh = mm / (1 - std::pow(0.9, t)), vh = vv / (1 - std::pow(0.999, t));
            p -= lr * mh / (std::sqrt(vh) + 1e-8);
        };
        adam(x, m, v, gx);
        adam(y, my, vy, gy);
    }
    CHECK(a.at<double>({0}) == doctest::Approx(x).epsilon(1e-12));
    CHECK(a.at<double>({1}) == doctest::Approx(y).epsilon(1e-12));
    CHECK(opt.hyperparameters().find(" weight_decay=" + kiln::detail::number_text(0.1)) != std::string::npos);
    CHECK(kiln::optim::adam(0.1).hyperparameters().find("weight_decay") == std::string::npos);
    // With weight_decay 0 it is Adam, bit for bit.
    kiln::variable b1(f64({0.3, -0.7, 2}, {3})), b2(f64({0.3, -0.7, 2}, {3}));
    kiln::optim::adam plain({&b1}, 0.01);
    kiln::optim::adamw none({&b2}, 0.01, 0.9, 0.999, 1e-8, 0.0);
    for (int t = 0; t < 3; ++t) {
        plain.step({f64({0.1 * t, 1, -2}, {3})});
        none.step({f64({0.1 * t, 1, -2}, {3})});
    }
    CHECK(values(b1) == values(b2));
    // Traced: the step happens at every call with the rate of the moment, as eagerly.
    kiln::variable c1(f64({1, 2}, {2})), c2(f64({1, 2}, {2}));
    kiln::optim::adamw e1({&c1}, 0.1), e2({&c2}, 0.1);
    auto traced_step = kiln::function([&](const kiln::tensor& g) { e2.step({g}); });
    for (int t = 0; t < 3; ++t) {
        if (t == 2) e1.set_learning_rate(0.01), e2.set_learning_rate(0.01);
        e1.step({f64({0.5, -1}, {2})});
        traced_step(f64({0.5, -1}, {2}));
    }
    CHECK(values(c1) == values(c2));
    CHECK(traced_step.trace_count() == 1);
    // Graph mode takes the same rule: minimize with adam_rule's weight_decay equals the eager AdamW step.
    const auto xin = kiln::input<"x", double, kiln::shape<2>>{};
    const auto u = kiln::param<"u", double, kiln::shape<2>>{};
    const auto step = kiln::optim::minimize(kiln::sum(u * xin), kiln::optim::adam_rule{.lr = 0.05, .weight_decay = 0.2});
    kiln::session s;
    s.initialize(kiln::sum(u));
    s.set("u", f64({1, -1}, {2}));
    kiln::variable d(f64({1, -1}, {2}));
    kiln::optim::adamw ed({&d}, 0.05, 0.9, 0.999, 1e-8, 0.2);
    std::vector<double> xs{0.5, 2};
    for (int t = 0; t < 3; ++t) {
        s.run(step, xin = kiln::view(xs.data(), {2}));
        ed.step({f64({0.5, 2}, {2})});
    }
    kiln_test::check_all_close(values(s.parameter("u")), values(d), 1e-15, 1e-15);
    // A weight decay that is negative or not finite is refused, naming AdamW.
    CHECK_THROWS_WITH_AS(kiln::optim::adamw(0.1, 0.9, 0.999, 1e-8, -1.0),
                         "kiln: value_error in 'optim::adamw': weight_decay must be finite and non-negative, got -1", kiln::value_error);
}

TEST_CASE("adam flushes moments below the smallest normal number to zero, in eager and graph mode") {
    // One step with a gradient, then zero gradients: the moments decay geometrically (beta1 = beta2 = 0.5 here, so
    // that they reach the subnormal range within 130 steps) and must go from normal numbers straight to zero.
    const float tiny = std::numeric_limits<float>::min();
    auto normal_or_zero = [&](const kiln::tensor& t) {
        const double v = values(t).at(0);
        return v == 0 || std::abs(v) >= tiny;
    };
    kiln::variable w(kiln::from_values<float>({1.0f}, {1}));
    kiln::optim::adam opt({&w}, 1e-3, 0.5, 0.5);
    opt.step({kiln::from_values<float>({1.0f}, {1})});
    int subnormal = 0;
    for (int k = 0; k < 200; ++k) {
        opt.step({kiln::zeros({1})});
        const auto st = opt.state();
        subnormal += !normal_or_zero(st.at("m/0")) + !normal_or_zero(st.at("v/0"));
    }
    CHECK(subnormal == 0);
    CHECK(values(opt.state().at("v/0")).at(0) == 0.0);
    CHECK(values(opt.state().at("m/0")).at(0) == 0.0);
    // Graph mode runs the same rule: a parameter whose gradient is zero ends with zero moments.
    const auto x = kiln::input<"x", float, kiln::shape<2>>{};
    const auto u = kiln::param<"u", float, kiln::shape<2>>{};
    const auto loss = kiln::sum(u * x);
    const auto step = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 1e-3, .beta1 = 0.5, .beta2 = 0.5});
    kiln::session s;
    std::vector<float> xs{1.0f, 0.0f}, zero{0.0f, 0.0f};
    s.run(step, x = kiln::view(xs.data(), {2}));
    for (int k = 0; k < 200; ++k) s.run(step, x = kiln::view(zero.data(), {2}));
    std::map<std::string, kiln::tensor> state;
    std::string optimizer;
    s.save_training_state(state, optimizer, "test");
    CHECK(values(state.at("optimizer/u/0")) == std::vector<double>{0.0, 0.0});
    CHECK(values(state.at("optimizer/u/1")) == std::vector<double>{0.0, 0.0});
}

TEST_CASE("optimizers refuse hyperparameters out of range when they are made, as PyTorch's do") {
    kiln::variable w(kiln::ones({2}));
    auto message = [](auto make) {
        try {
            make();
        } catch (const kiln::value_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message([&] { kiln::optim::sgd o({&w}, -0.1); }) ==
          "kiln: value_error in 'optim::sgd': the learning rate must be finite and non-negative, got -0.1");
    CHECK(message([&] { kiln::optim::sgd o(0.1, -0.9); }) ==
          "kiln: value_error in 'optim::sgd': momentum must be finite and non-negative, got -0.9");
    CHECK(message([&] { kiln::optim::adam o({&w}, std::nan("")); }) ==
          "kiln: value_error in 'optim::adam': the learning rate must be finite and non-negative, got nan");
    CHECK(message([&] { kiln::optim::adam o({&w}, 1e-3, 1.0); }) == "kiln: value_error in 'optim::adam': beta1 must be in [0, 1), got 1");
    CHECK(message([&] { kiln::optim::adam o(1e-3, 0.9, -0.5); }) ==
          "kiln: value_error in 'optim::adam': beta2 must be finite and non-negative, got -0.5");
    CHECK(message([&] { kiln::optim::adam o(1e-3, 0.9, 0.999, -1e-8); }) ==
          "kiln: value_error in 'optim::adam': eps must be finite and non-negative, got -1e-08");
    CHECK(message([&] { kiln::optim::adam o({&w}, 0.0, 0.0, 0.0, 0.0); }) == "no error");  // the edges are allowed
    CHECK(values(w) == std::vector<double>{1, 1});
}

TEST_CASE("a parameter rebound to another shape or dtype after the optimizer made its slots is refused, untouched") {
    kiln::variable w(kiln::ones({2})), u(kiln::ones({3}));
    kiln::optim::adam opt({&u, &w}, 0.1);
    kiln::optim::sgd mom({&u, &w}, 0.1, 0.9);
    opt.step({kiln::ones({3}), kiln::ones({2})});
    const std::vector<double> u_before = values(u);
    w = kiln::variable(kiln::ones({1000}));  // rebinds the handle the optimizers point at
    std::string message;
    try {
        opt.step({kiln::ones({3}), kiln::ones({1000})});
    } catch (const kiln::shape_error& e) {
        message = e.what();
    }
    CHECK(message == "kiln: shape_error in 'optim::adam': parameter 1 has shape (1000,) but its optimizer slots have (2,) "
                     "(the variable was rebound after the optimizer made its slots; make the optimizer again)");
    CHECK(values(u) == u_before);  // nothing changed, the first parameter included
    CHECK(opt.steps() == 1);
    CHECK_THROWS_AS(mom.step({kiln::ones({3}), kiln::ones({1000})}), kiln::shape_error);
    w = kiln::variable(kiln::ones({2}, kiln::float64));
    CHECK_THROWS_AS(opt.step({kiln::ones({3}), kiln::ones({2}, kiln::float64)}), kiln::dtype_error);
    CHECK(values(u) == u_before);
}

TEST_CASE("adam's beta powers reach zero instead of the subnormal range, with the same step to the last bit") {
    // 0.999^t passes 2^-60 near t = 41,500 and the smallest normal double near t = 708,000. Below 2^-54,
    // 1 - beta^t is exactly 1, so a power flushed at 2^-60 changes no step.
    kiln::optim::adam_rule r{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999};
    r.resume(41000);
    CHECK(r.beta2_t > 0);
    CHECK(r.beta1_t == 0);  // 0.9^41000 went below 2^-60 long before
    double expect_power = r.beta2_t;
    bool subnormal_or_tiny = false, step_changed = false;
    int zero_from = 0;
    for (int t = 41001; t <= 800000; ++t) {
        r.next_step(t);
        expect_power *= 0.999;
        subnormal_or_tiny = subnormal_or_tiny || (r.beta2_t != 0 && r.beta2_t < 0x1p-60);
        if (r.beta2_t == 0 && zero_from == 0) zero_from = t;
        // Unflushed, the step would be lr * sqrt(1 - 0.999^t) / (1 - 0.9^t): the same double.
        if (r.beta2_t == 0) step_changed = step_changed || r.step != 1e-3 * std::sqrt(1 - expect_power) / 1.0 || r.eps_hat != 1e-8;
    }
    CHECK_FALSE(subnormal_or_tiny);
    CHECK_FALSE(step_changed);
    CHECK(zero_from > 41001);
    CHECK(zero_from < 45000);
    CHECK(r.beta2_t == 0);
    r.next_step(900000);  // not following the last step: std::pow, flushed too
    CHECK(r.beta2_t == 0);
    CHECK(r.step == 1e-3);
}

TEST_CASE("batches: seeded shuffles, every row once, a short last batch") {
    const auto x = kiln::arange(0, 10, 1, kiln::float64).reshape({5, 2});
    const auto y = kiln::arange(0, 5, 1, kiln::int64);
    kiln::generator g1(1), g2(1);
    const auto b1 = kiln::data::batches(x, y, 2, true, g1), b2 = kiln::data::batches(x, y, 2, true, g2);
    REQUIRE(b1.size() == 3);
    CHECK(b1[2].x.shape() == kiln::dims{1, 2});
    std::vector<double> seen;
    for (std::size_t i = 0; i < b1.size(); ++i) {
        CHECK(values(b1[i].y) == values(b2[i].y));
        for (double r : values(b1[i].y)) seen.push_back(r);
        // Rows stay paired: x's row r is (2r, 2r + 1).
        const auto ys = values(b1[i].y), xs = values(b1[i].x);
        for (std::size_t k = 0; k < ys.size(); ++k) CHECK(xs[2 * k] == 2 * ys[k]);
    }
    std::sort(seen.begin(), seen.end());
    CHECK(seen == std::vector<double>{0, 1, 2, 3, 4});
    const auto plain = kiln::data::batches(x, y, 4, false);
    CHECK(values(plain[0].y) == std::vector<double>{0, 1, 2, 3});
    CHECK_THROWS_AS(kiln::data::batches(x, kiln::zeros({4}), 2, false), kiln::shape_error);
}

TEST_CASE("a small model learns y = 2x - 1 with dense layers, mse and adam") {
    kiln::generator g(11);
    const auto x = kiln::randn({256, 1}, kiln::float32, g);
    const auto y = x * 2 - 1;
    kiln::nn::sequential model(kiln::nn::dense(1, 16, kiln::nn::tanh, g), kiln::nn::dense(16, 1, kiln::nn::identity, g));
    kiln::optim::adam opt(model.parameters(), 0.02);
    double first = 0, last = 0;
    for (int epoch = 0; epoch < 60; ++epoch) {
        for (const auto& b : kiln::data::batches(x, y, 32, true, g)) {
            kiln::gradient_tape tape;
            const auto loss = kiln::nn::mse(model(b.x), b.y);
            std::vector<kiln::tensor> params;
            for (auto* p : model.parameters()) params.push_back(*p);
            opt.step(tape.gradient(loss, params));
        }
        const double l = kiln::nn::mse(model(x), y).item<double>();
        if (epoch == 0) first = l;
        last = l;
    }
    CHECK(last < first / 20);
    CHECK(last < 0.02);
}

#include "training_loop.hpp"  // the long training loop: resident memory stays flat

namespace {

// conv2d by its definition, in float64 loops: y[n, m, i, j] = b[m] + sum over c, a, e of
// x[n, g * C/g + c, i * stride - pad + a * dilation, j * stride - pad + e * dilation] * w[m, c, a, e].
std::vector<double> conv2d_by_loops(const kiln::tensor& x, const kiln::tensor& w, const kiln::tensor& b,
                                    const kiln::nn::conv2d_options& o) {
    const kiln::tensor xd = x.to(kiln::float64).contiguous(), wd = w.to(kiln::float64).contiguous();
    const std::ptrdiff_t n = x.shape()[0], h = x.shape()[2], wid = x.shape()[3];
    const std::ptrdiff_t m = w.shape()[0], cg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], c = cg * o.groups;
    const std::ptrdiff_t oh = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
    const std::ptrdiff_t ow = (wid + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
    const double* xp = xd.data<double>();
    const double* wp = wd.data<double>();
    std::vector<double> y;
    for (std::ptrdiff_t in = 0; in < n; ++in)
        for (std::ptrdiff_t om = 0; om < m; ++om)
            for (std::ptrdiff_t i = 0; i < oh; ++i)
                for (std::ptrdiff_t j = 0; j < ow; ++j) {
                    double s = b.numel() ? b.to(kiln::float64).at<double>({om}) : 0.0;
                    const std::ptrdiff_t group = om / (m / o.groups);
                    for (std::ptrdiff_t cc = 0; cc < cg; ++cc)
                        for (std::ptrdiff_t a = 0; a < kh; ++a)
                            for (std::ptrdiff_t e = 0; e < kw; ++e) {
                                const std::ptrdiff_t r = i * o.stride[0] - o.padding[0] + a * o.dilation[0];
                                const std::ptrdiff_t q = j * o.stride[1] - o.padding[1] + e * o.dilation[1];
                                if (r < 0 || r >= h || q < 0 || q >= wid) continue;
                                s += xp[((in * c + group * cg + cc) * h + r) * wid + q] * wp[((om * cg + cc) * kh + a) * kw + e];
                            }
                    y.push_back(s);
                }
    return y;
}

}  // namespace

TEST_CASE("conv2d equals its definition with strides, padding, dilation and groups, and its gradients are the derivative") {
    kiln::generator g(11);
    struct shape_case {
        std::ptrdiff_t n, c, h, w, m, kh, kw;
        kiln::nn::conv2d_options o;
        bool bias;
    };
    const shape_case cases[] = {{2, 3, 7, 6, 4, 3, 3, {}, true},
                                {1, 4, 9, 8, 6, 3, 2, {{2, 1}, {1, 2}, {1, 1}, 2}, true},
                                {2, 2, 10, 10, 2, 3, 3, {{1, 2}, {2, 0}, {2, 1}, 1}, false},
                                {3, 6, 5, 5, 6, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 6}, true}};
    for (const shape_case& p : cases) {
        CAPTURE(p.c);
        CAPTURE(p.o.groups);
        const kiln::tensor x = kiln::randn({p.n, p.c, p.h, p.w}, g), w = kiln::randn({p.m, p.c / p.o.groups, p.kh, p.kw}, g);
        const kiln::tensor b = p.bias ? kiln::randn({p.m}, g) : kiln::tensor();
        const kiln::tensor y = kiln::nn::conv2d(x, w, b, p.o);
        const std::ptrdiff_t oh = (p.h + 2 * p.o.padding[0] - p.o.dilation[0] * (p.kh - 1) - 1) / p.o.stride[0] + 1;
        const std::ptrdiff_t ow = (p.w + 2 * p.o.padding[1] - p.o.dilation[1] * (p.kw - 1) - 1) / p.o.stride[1] + 1;
        REQUIRE(y.shape() == kiln::dims{p.n, p.m, oh, ow});
        kiln_test::check_all_close(values(y), conv2d_by_loops(x, w, b, p.o), 1e-5, 1e-5);

        // Gradients (float64) against central differences of a random projection of the output.
        const kiln::tensor xd = x.to(kiln::float64), wd = w.to(kiln::float64), bd = p.bias ? b.to(kiln::float64) : kiln::tensor();
        const kiln::tensor proj = kiln::randn(y.shape(), g).to(kiln::float64);
        kiln::gradient_tape tape;
        tape.watch(xd);
        tape.watch(wd);
        const kiln::tensor loss = kiln::sum(kiln::nn::conv2d(xd, wd, bd, p.o) * proj);
        const std::vector<kiln::tensor> grads = tape.gradient(loss, std::vector<kiln::tensor>{xd, wd});
        auto objective = [&](const kiln::tensor& xx, const kiln::tensor& ww) {
            return kiln::sum(kiln::nn::conv2d(xx, ww, bd, p.o) * proj).item<double>();
        };
        for (int t = 0; t < 6; ++t) {
            for (int which = 0; which < 2; ++which) {
                const kiln::tensor& base = which ? wd : xd;
                const std::ptrdiff_t at = (t * 7919 + which * 31) % base.numel();
                kiln::tensor plus = base.clone(), minus = base.clone();
                plus.data<double>()[at] += 1e-6;
                minus.data<double>()[at] -= 1e-6;
                const double numeric = which ? (objective(xd, plus) - objective(xd, minus)) / 2e-6
                                             : (objective(plus, wd) - objective(minus, wd)) / 2e-6;
                CHECK(grads[static_cast<std::size_t>(which)].contiguous().data<double>()[at] == doctest::Approx(numeric).epsilon(1e-6));
            }
        }
        // Traced, it computes what eager mode does, bit for bit, on new inputs too.
        auto fn = kiln::function([&](const kiln::tensor& xx) { return kiln::nn::conv2d(xx, w, b, p.o); });
        CHECK(kiln::allclose(fn(x), y, 0, 0));
        const kiln::tensor x2 = kiln::randn({p.n, p.c, p.h, p.w}, g);
        CHECK(kiln::allclose(fn(x2), kiln::nn::conv2d(x2, w, b, p.o), 0, 0));
    }
}

// conv_transpose2d by its definition: each input element scatters its channel's kernels into the result.
std::vector<double> conv_transpose2d_by_loops(const kiln::tensor& x, const kiln::tensor& w, const kiln::tensor& b,
                                              const kiln::nn::conv_transpose2d_options& o, std::ptrdiff_t oh, std::ptrdiff_t ow) {
    const std::ptrdiff_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], wd = x.shape()[3];
    const std::ptrdiff_t mg = w.shape()[1], kh = w.shape()[2], kw = w.shape()[3], m = mg * o.groups, cg = c / o.groups;
    const std::vector<double> xv = values(x), wv = values(w), bv = b.numel() ? values(b) : std::vector<double>(static_cast<std::size_t>(m), 0.0);
    std::vector<double> y(static_cast<std::size_t>(n * m * oh * ow), 0.0);
    for (std::ptrdiff_t i = 0; i < n; ++i)
        for (std::ptrdiff_t o_ = 0; o_ < m; ++o_)
            for (std::ptrdiff_t r = 0; r < oh * ow; ++r) y[static_cast<std::size_t>((i * m + o_) * oh * ow + r)] = bv[static_cast<std::size_t>(o_)];
    for (std::ptrdiff_t i = 0; i < n; ++i)
        for (std::ptrdiff_t ci = 0; ci < c; ++ci)
            for (std::ptrdiff_t iy = 0; iy < h; ++iy)
                for (std::ptrdiff_t ix = 0; ix < wd; ++ix)
                    for (std::ptrdiff_t mo = 0; mo < mg; ++mo)
                        for (std::ptrdiff_t ky = 0; ky < kh; ++ky)
                            for (std::ptrdiff_t kx = 0; kx < kw; ++kx) {
                                const std::ptrdiff_t oy = iy * o.stride[0] - o.padding[0] + ky * o.dilation[0];
                                const std::ptrdiff_t ox = ix * o.stride[1] - o.padding[1] + kx * o.dilation[1];
                                if (oy < 0 || oy >= oh || ox < 0 || ox >= ow) continue;
                                const std::ptrdiff_t out_c = (ci / cg) * mg + mo;
                                y[static_cast<std::size_t>(((i * m + out_c) * oh + oy) * ow + ox)] +=
                                    xv[static_cast<std::size_t>(((i * c + ci) * h + iy) * wd + ix)] *
                                    wv[static_cast<std::size_t>(((ci * mg + mo) * kh + ky) * kw + kx)];
                            }
    return y;
}

TEST_CASE("conv_transpose2d equals its definition, is conv2d's adjoint, differentiates, traces and exports as ConvTranspose") {
    kiln::generator g(17);
    struct shape_case {
        std::ptrdiff_t n, c, h, w, m, kh, kw;
        kiln::nn::conv_transpose2d_options o;
        bool bias;
    };
    const shape_case cases[] = {{2, 3, 4, 5, 4, 3, 3, {}, true},
                                {1, 4, 3, 4, 6, 3, 2, {{2, 2}, {1, 0}, {1, 1}, {1, 1}, 2}, true},
                                {2, 2, 5, 4, 3, 2, 3, {{3, 2}, {2, 1}, {2, 0}, {2, 1}, 1}, false},
                                {1, 6, 3, 3, 6, 1, 1, {{1, 1}, {0, 0}, {0, 0}, {1, 1}, 6}, true}};
    for (const shape_case& p : cases) {
        CAPTURE(p.c);
        CAPTURE(p.o.groups);
        const kiln::tensor x = kiln::randn({p.n, p.c, p.h, p.w}, kiln::float64, g), w = kiln::randn({p.c, p.m / p.o.groups, p.kh, p.kw}, kiln::float64, g);
        const kiln::tensor b = p.bias ? kiln::randn({p.m}, kiln::float64, g) : kiln::tensor();
        const kiln::tensor y = kiln::nn::conv_transpose2d(x, w, b, p.o);
        const std::ptrdiff_t oh = (p.h - 1) * p.o.stride[0] - 2 * p.o.padding[0] + p.o.dilation[0] * (p.kh - 1) + p.o.output_padding[0] + 1;
        const std::ptrdiff_t ow = (p.w - 1) * p.o.stride[1] - 2 * p.o.padding[1] + p.o.dilation[1] * (p.kw - 1) + p.o.output_padding[1] + 1;
        REQUIRE(y.shape() == kiln::dims{p.n, p.m, oh, ow});
        kiln_test::check_all_close(values(y), conv_transpose2d_by_loops(x, w, b, p.o, oh, ow), 1e-12, 1e-12);

        // The adjoint of conv2d with the same weight, stride, padding, dilation and groups: <conv2d(z, w), x> =
        // <z, conv_transpose2d(x, w)> for every z of the result's shape (the definition of a transposed convolution).
        if (!p.bias) {
            const kiln::tensor z = kiln::randn({p.n, p.m, oh, ow}, kiln::float64, g);
            const kiln::nn::conv2d_options co{p.o.stride, p.o.padding, p.o.dilation, p.o.groups};
            // (conv2d's weight is (out, in / groups, kh, kw): out = x's channels, in = z's.)
            const kiln::tensor forward = kiln::nn::conv2d(z, w, kiln::tensor(), co);
            REQUIRE(forward.shape() == x.shape());
            CHECK(kiln::sum(forward * x).item<double>() == doctest::Approx(kiln::sum(z * y).item<double>()).epsilon(1e-12));
        }

        // Gradients against central differences of a random projection of the output.
        const kiln::tensor proj = kiln::randn(y.shape(), kiln::float64, g);
        std::vector<kiln::tensor> grads;
        {
            kiln::gradient_tape tape;
            tape.watch(x);
            tape.watch(w);
            const kiln::tensor loss = kiln::sum(kiln::nn::conv_transpose2d(x, w, b, p.o) * proj);
            grads = tape.gradient(loss, std::vector<kiln::tensor>{x, w});
        }
        auto objective = [&](const kiln::tensor& xx, const kiln::tensor& ww) {
            return kiln::sum(kiln::nn::conv_transpose2d(xx, ww, b, p.o) * proj).item<double>();
        };
        for (int t = 0; t < 6; ++t) {
            for (int which = 0; which < 2; ++which) {
                const kiln::tensor& base = which ? w : x;
                const std::ptrdiff_t at = (t * 7919 + which * 31) % base.numel();
                kiln::tensor plus = base.clone(), minus = base.clone();
                plus.data<double>()[at] += 1e-6;
                minus.data<double>()[at] -= 1e-6;
                const double numeric = which ? (objective(x, plus) - objective(x, minus)) / 2e-6 : (objective(plus, w) - objective(minus, w)) / 2e-6;
                CHECK(grads[static_cast<std::size_t>(which)].contiguous().data<double>()[at] == doctest::Approx(numeric).epsilon(1e-6));
            }
        }
        // Traced with a dynamic batch: one trace, eager mode's results bit for bit.
        auto fn = kiln::function([&](const kiln::tensor& xx) { return kiln::nn::conv_transpose2d(xx, w, b, p.o); },
                                 {kiln::spec(kiln::float64, {kiln::dyn, p.c, p.h, p.w})});
        CHECK(kiln::allclose(fn(x), y, 0, 0));
        const kiln::tensor x3 = kiln::randn({p.n + 2, p.c, p.h, p.w}, kiln::float64, g);
        CHECK(kiln::allclose(fn(x3), kiln::nn::conv_transpose2d(x3, w, b, p.o), 0, 0));
        CHECK(fn.trace_count() == 1);
    }
    // As a layer: (in, out, kernel) with the weight (in, out / groups, kh, kw), in a sequential model.
    kiln::nn::conv_transpose2d_layer up(4, 2, {2, 2}, {.stride = {2, 2}}, kiln::nn::relu, g);
    CHECK(up.w.shape() == kiln::dims{4, 2, 2, 2});
    const kiln::tensor small = kiln::randn({3, 4, 5, 6}, g);
    CHECK(up(small).shape() == kiln::dims{3, 2, 10, 12});
    CHECK(values(kiln::min(up(small))) == std::vector<double>{0});
    // Bad shapes and options, in sentences.
    const kiln::tensor x = kiln::zeros({1, 4, 5, 5}), w = kiln::zeros({4, 3, 3, 3});
    CHECK_THROWS_WITH_AS(kiln::nn::conv_transpose2d(x, kiln::zeros({3, 3, 3, 3})),
                         "kiln: shape_error in 'nn::conv_transpose2d': the weight (3, 3, 3, 3) takes 3 input channels, but the input "
                         "(1, 4, 5, 5) has 4", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv_transpose2d(x, w, kiln::tensor(), {.stride = {2, 2}, .output_padding = {2, 0}}),
                         "kiln: value_error in 'nn::conv_transpose2d': output_padding (2, 0) must be at least 0 and below the stride (2, 2)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv_transpose2d(x, w, kiln::tensor(), {.padding = {4, 0}}),
                         "kiln: shape_error in 'nn::conv_transpose2d': the height of the result would be -1 (input (1, 4, 5, 5), "
                         "kernel (3, 3), padding 4 and 4)", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv_transpose2d(x, w, kiln::zeros({4})),
                         "kiln: shape_error in 'nn::conv_transpose2d': the bias must be (3,), got (4,)", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv_transpose2d(x, w, kiln::tensor(), {.groups = 3}),
                         "kiln: value_error in 'nn::conv_transpose2d': 3 groups must divide the input's 4 channels", kiln::value_error);
}

// PyTorch's interpolate by its definition (not separable code): bilinear mixes the four neighbours of each output
// pixel's source position; nearest takes floor(dst * in / out).
std::vector<double> interpolate_by_loops(const kiln::tensor& x, std::ptrdiff_t oh, std::ptrdiff_t ow, bool bilinear, bool align) {
    const std::ptrdiff_t n = x.shape()[0], c = x.shape()[1], h = x.shape()[2], w = x.shape()[3];
    const std::vector<double> xv = values(x);
    auto at = [&](std::ptrdiff_t i, std::ptrdiff_t y, std::ptrdiff_t z) { return xv[static_cast<std::size_t>((i * h + y) * w + z)]; };
    auto source = [&](std::ptrdiff_t d, std::ptrdiff_t in, std::ptrdiff_t out) {
        if (align) return out > 1 ? static_cast<double>(d) * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
        return std::max((static_cast<double>(d) + 0.5) * static_cast<double>(in) / static_cast<double>(out) - 0.5, 0.0);
    };
    std::vector<double> y;
    for (std::ptrdiff_t i = 0; i < n * c; ++i)
        for (std::ptrdiff_t r = 0; r < oh; ++r)
            for (std::ptrdiff_t q = 0; q < ow; ++q) {
                if (!bilinear) {
                    const auto sr = std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(std::floor(static_cast<double>(r) * h / oh)), h - 1);
                    const auto sq = std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(std::floor(static_cast<double>(q) * w / ow)), w - 1);
                    y.push_back(at(i, sr, sq));
                    continue;
                }
                const double sr = source(r, h, oh), sq = source(q, w, ow);
                const auto r0 = std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(sr), h - 1), q0 = std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(sq), w - 1);
                const auto r1 = std::min<std::ptrdiff_t>(r0 + 1, h - 1), q1 = std::min<std::ptrdiff_t>(q0 + 1, w - 1);
                const double lr = sr - static_cast<double>(r0), lq = sq - static_cast<double>(q0);
                y.push_back((1 - lr) * ((1 - lq) * at(i, r0, q0) + lq * at(i, r0, q1)) + lr * ((1 - lq) * at(i, r1, q0) + lq * at(i, r1, q1)));
            }
    return y;
}

TEST_CASE("nn::interpolate and upsample resize as PyTorch's interpolate does (nearest, bilinear, align_corners), differentiate and trace") {
    kiln::generator g(37);
    const kiln::tensor x = kiln::randn({2, 3, 5, 4}, kiln::float64, g);
    using kiln::nn::interpolation;
    for (const std::array<std::ptrdiff_t, 2> size : {std::array<std::ptrdiff_t, 2>{10, 8}, {7, 3}, {3, 9}, {1, 1}, {5, 4}}) {
        CAPTURE(size[0]);
        CAPTURE(size[1]);
        kiln_test::check_all_close(values(kiln::nn::interpolate(x, size)), interpolate_by_loops(x, size[0], size[1], false, false), 0, 0);
        for (bool align : {false, true}) {
            const kiln::tensor y = kiln::nn::interpolate(x, size, {.mode = interpolation::bilinear, .align_corners = align});
            REQUIRE(y.shape() == kiln::dims{2, 3, size[0], size[1]});
            kiln_test::check_all_close(values(y), interpolate_by_loops(x, size[0], size[1], true, align), 1e-14, 1e-14);
        }
    }
    // The same size is the identity; upsample by 2 is interpolate to twice the size; nearest keeps an integer dtype.
    CHECK(kiln::allclose(kiln::nn::interpolate(x, {5, 4}, {.mode = interpolation::bilinear}), x, 0, 0));
    CHECK(kiln::allclose(kiln::nn::upsample(x, 2, {.mode = interpolation::bilinear}),
                         kiln::nn::interpolate(x, {10, 8}, {.mode = interpolation::bilinear}), 0, 0));
    const kiln::tensor ids = kiln::from_values<std::int64_t>({1, 2, 3, 4}, {1, 1, 2, 2});
    CHECK(values(kiln::nn::upsample(ids, 2)) == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
    CHECK(kiln::nn::upsample(ids, 2).dtype() == kiln::int64);
    // The gradient against central differences.
    const kiln::tensor proj = kiln::randn({2, 3, 7, 6}, kiln::float64, g);
    kiln::tensor grad;
    {
        kiln::gradient_tape tape;
        tape.watch(x);
        grad = tape.gradient(kiln::sum(kiln::nn::interpolate(x, {7, 6}, {.mode = interpolation::bilinear}) * proj), x);
    }
    for (std::ptrdiff_t at : {0, 9, 33, 119}) {
        kiln::tensor up = x.clone(), down = x.clone();
        up.data<double>()[at] += 1e-6;
        down.data<double>()[at] -= 1e-6;
        const double numeric = (kiln::sum(kiln::nn::interpolate(up, {7, 6}, {.mode = interpolation::bilinear}) * proj).item<double>() -
                                kiln::sum(kiln::nn::interpolate(down, {7, 6}, {.mode = interpolation::bilinear}) * proj).item<double>()) / 2e-6;
        CHECK(grad.data<double>()[at] == doctest::Approx(numeric).epsilon(1e-6));
    }
    // As a layer, traced with a dynamic batch: one trace.
    kiln::nn::upsample_layer up2(2, {.mode = interpolation::bilinear, .align_corners = true});
    auto fn = kiln::function([&](const kiln::tensor& t) { return up2(t); }, {kiln::spec(kiln::float64, {kiln::dyn, 3, 5, 4})});
    for (std::ptrdiff_t n : {2, 4}) {
        const kiln::tensor t = kiln::randn({n, 3, 5, 4}, kiln::float64, g);
        CHECK(kiln::allclose(fn(t), kiln::nn::upsample(t, 2, {.mode = interpolation::bilinear, .align_corners = true}), 0, 0));
    }
    CHECK(fn.trace_count() == 1);
    // Refusals, in sentences.
    CHECK_THROWS_WITH_AS(kiln::nn::interpolate(x, {0, 3}),
                         "kiln: value_error in 'nn::interpolate': the output size (0, 3) and the input's height and width must be "
                         "positive (input (2, 3, 5, 4))", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::interpolate(x, {3, 3}, {.align_corners = true}),
                         "kiln: value_error in 'nn::interpolate': align_corners is read by bilinear interpolation only", kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::interpolate(ids, {3, 3}, {.mode = interpolation::bilinear}),
                         "kiln: dtype_error in 'nn::interpolate': bilinear interpolation needs a floating input, got int64", kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::interpolate(kiln::zeros({3, 4, 5}), {2, 2}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::upsample(x, 0), kiln::value_error);
}

TEST_CASE("max_pool2d and avg_pool2d take each window's maximum and mean; padding never wins a maximum") {
    kiln::generator g(12);
    const kiln::tensor x = kiln::randn({2, 3, 7, 8}, g) - 5.0;  // (all negative: a zero of padding would win a maximum)
    const kiln::tensor mp = kiln::nn::max_pool2d(x, {3, 2}, {.stride = {2, 2}, .padding = {1, 1}});
    REQUIRE(mp.shape() == kiln::dims{2, 3, 4, 5});
    for (bool include : {true, false}) {
        const kiln::tensor ap = kiln::nn::avg_pool2d(x, {3, 3}, {.stride = {2, 3}, .padding = {1, 1}, .count_include_pad = include});
        REQUIRE(ap.shape() == kiln::dims{2, 3, 4, 3});
        std::vector<double> want_max, want_avg;
        for (std::ptrdiff_t a = 0; a < 2; ++a)
            for (std::ptrdiff_t c = 0; c < 3; ++c)
                for (std::ptrdiff_t i = 0; i < 4; ++i)
                    for (std::ptrdiff_t j = 0; j < 5; ++j) {
                        double best = -1e300, total = 0;
                        int count = 0;
                        for (std::ptrdiff_t u = 0; u < 3; ++u)
                            for (std::ptrdiff_t v = 0; v < 2; ++v) {
                                const std::ptrdiff_t r = i * 2 - 1 + u, q = j * 2 - 1 + v;
                                if (r >= 0 && r < 7 && q >= 0 && q < 8) best = std::max(best, double(x.at<float>({a, c, r, q})));
                            }
                        want_max.push_back(best);
                        if (j >= 3) continue;
                        for (std::ptrdiff_t u = 0; u < 3; ++u)
                            for (std::ptrdiff_t v = 0; v < 3; ++v) {
                                const std::ptrdiff_t r = i * 2 - 1 + u, q = j * 3 - 1 + v;
                                if (r >= 0 && r < 7 && q >= 0 && q < 8) total += x.at<float>({a, c, r, q}), ++count;
                            }
                        want_avg.push_back(total / (include ? 9 : count));
                    }
        kiln_test::check_all_close(values(mp), want_max, 0);
        kiln_test::check_all_close(values(ap), want_avg, 1e-6, 1e-6);
    }
    // ceil_mode: a 5 x 5 image, kernel 2, stride 2 gives 3 x 3 windows (the last row and column alone), where the
    // default gives 2 x 2; with padding 1 the windows would begin in the end padding at 4, so there are still 3.
    const kiln::tensor img = kiln::arange(25, kiln::float32).reshape({1, 1, 5, 5});
    kiln_test::check_all_close(values(kiln::nn::max_pool2d(img, {2, 2}, {.ceil_mode = true})),
                               std::vector<double>{6, 8, 9, 16, 18, 19, 21, 23, 24}, 0);
    CHECK(kiln::nn::max_pool2d(img, {2, 2}).shape() == kiln::dims{1, 1, 2, 2});
    kiln_test::check_all_close(values(kiln::nn::max_pool2d(img, {2, 2}, {.padding = {1, 1}, .ceil_mode = true})),
                               std::vector<double>{0, 2, 4, 10, 12, 14, 20, 22, 24}, 0);
    CHECK_THROWS_AS(kiln::nn::avg_pool2d(img, {2, 2}, {.ceil_mode = true}), kiln::value_error);
    // The gradient of a max pool reaches each window's maximum (a unique one here).
    const kiln::tensor xd = kiln::from_values<double>({1, 5, 2, 0, 3, 4, 9, 1, 0, 0, 7, 8, 6, 2, 1, 0}, {1, 1, 4, 4});
    kiln::gradient_tape tape;
    tape.watch(xd);
    const kiln::tensor loss = kiln::sum(kiln::nn::max_pool2d(xd, {2, 2}));
    kiln_test::check_all_close(values(tape.gradient(loss, xd)), std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0}, 0);
}

TEST_CASE("nn::unfold gathers PyTorch's columns, nn::fold adds them back (its adjoint), and both differentiate") {
    kiln::generator g(31);
    const kiln::tensor x = kiln::randn({2, 3, 5, 6}, kiln::float64, g);
    const kiln::nn::conv2d_options o{.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}};
    const kiln::tensor u = kiln::nn::unfold(x, {3, 2}, o);
    // out_h = (5 + 2 - 3) / 2 + 1 = 3, out_w = (6 + 2 - 2 - 1) / 1 + 1 = 6; rows c * 6 + i * 2 + j.
    REQUIRE(u.shape() == kiln::dims{2, 18, 18});
    std::vector<double> want;
    for (std::ptrdiff_t n = 0; n < 2; ++n)
        for (std::ptrdiff_t c = 0; c < 3; ++c)
            for (std::ptrdiff_t i = 0; i < 3; ++i)
                for (std::ptrdiff_t j = 0; j < 2; ++j)
                    for (std::ptrdiff_t p = 0; p < 3; ++p)
                        for (std::ptrdiff_t q = 0; q < 6; ++q) {
                            const std::ptrdiff_t r = p * 2 + i - 1, k = q + j * 2 - 1;
                            want.push_back(r >= 0 && r < 5 && k >= 0 && k < 6 ? x.at<double>({n, c, r, k}) : 0.0);
                        }
    CHECK(values(u) == want);
    // fold is the adjoint: <unfold(x), c> = <x, fold(c)>, and fold adds overlapping windows.
    const kiln::tensor cols = kiln::randn(u.shape(), kiln::float64, g);
    const kiln::tensor f = kiln::nn::fold(cols, {5, 6}, {3, 2}, o);
    REQUIRE(f.shape() == kiln::dims{2, 3, 5, 6});
    CHECK(kiln::sum(u * cols).item<double>() == doctest::Approx(kiln::sum(x * f).item<double>()).epsilon(1e-12));
    const kiln::tensor counts = kiln::nn::fold(kiln::nn::unfold(kiln::ones({1, 1, 4, 4}, kiln::float64), {2, 2}), {4, 4}, {2, 2});
    CHECK(values(counts) == std::vector<double>{1, 2, 2, 1, 2, 4, 4, 2, 2, 4, 4, 2, 1, 2, 2, 1});
    // Gradients: unfold's is fold, fold's is unfold; under a trace, the same values.
    kiln::gradient_tape tape;
    tape.watch(x);
    tape.watch(cols);
    const kiln::tensor loss = kiln::sum(kiln::nn::unfold(x, {3, 2}, o) * cols) + kiln::sum(kiln::nn::fold(cols, {5, 6}, {3, 2}, o) * x);
    const std::vector<kiln::tensor> grads = tape.gradient(loss, std::vector<kiln::tensor>{x, cols});
    CHECK(kiln::allclose(grads[0], f * 2.0, 1e-12, 1e-12));
    CHECK(kiln::allclose(grads[1], u * 2.0, 1e-12, 1e-12));
    auto traced = kiln::function([&](const kiln::tensor& xx) { return kiln::nn::fold(kiln::nn::unfold(xx, {3, 2}, o) * 0.5, {5, 6}, {3, 2}, o); });
    CHECK(kiln::allclose(traced(x), kiln::nn::fold(u * 0.5, {5, 6}, {3, 2}, o), 0, 0));
    // Integers and bools move unchanged (a window of bools folds as "any").
    const kiln::tensor ints = kiln::arange(12, kiln::int32).reshape({1, 1, 3, 4});
    CHECK(kiln::nn::unfold(ints, {2, 2}).dtype() == kiln::int32);
    CHECK(values(kiln::nn::unfold(ints, {2, 2}).select(2, 1)) == std::vector<double>{1, 2, 5, 6});  // (window (0, 1))
    const kiln::tensor mask = kiln::greater(kiln::arange(12, kiln::int32).reshape({1, 1, 3, 4}), 6);
    CHECK(values(kiln::nn::fold(kiln::nn::unfold(mask, {2, 2}), {3, 4}, {2, 2})) == values(mask));
    // Bad input.
    CHECK_THROWS_WITH_AS(kiln::nn::fold(cols, {5, 7}, {3, 2}, o),
                         "kiln: shape_error in 'nn::fold': the columns must be (batch, channels * 6, 21) for kernel (3, 2) and "
                         "output size (5, 7), got (2, 18, 18)",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::unfold(x, {7, 2}),
                         "kiln: shape_error in 'nn::unfold': the height of the input is 5, smaller than the window's 7 (kernel 7)",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::unfold(x, {2, 2}, {.groups = 3}), kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::unfold(x.select(0, 0), {2, 2}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::unfold(x, {0, 2}), kiln::value_error);
}

TEST_CASE("scaled_dot_product_attention equals its definition with no mask, a bool mask and a causal one") {
    kiln::generator g(41);
    const std::ptrdiff_t B = 2, L = 3, S = 4, E = 5, Ev = 2;
    const kiln::tensor q = kiln::randn({B, L, E}, kiln::float64, g), k = kiln::randn({B, S, E}, kiln::float64, g),
                       v = kiln::randn({B, S, Ev}, kiln::float64, g);
    const kiln::tensor m = kiln::greater(kiln::randn({L, S}, kiln::float64, g), -0.5);
    auto by_loops = [&](int mode, double scale) {  // 0: no mask, 1: m, 2: causal
        std::vector<double> out;
        for (std::ptrdiff_t b = 0; b < B; ++b)
            for (std::ptrdiff_t i = 0; i < L; ++i) {
                std::vector<double> w(static_cast<std::size_t>(S));
                double most = -INFINITY, total = 0;
                for (std::ptrdiff_t j = 0; j < S; ++j) {
                    double dot = 0;
                    for (std::ptrdiff_t e = 0; e < E; ++e) dot += q.at<double>({b, i, e}) * k.at<double>({b, j, e});
                    const bool keep = mode == 0 || (mode == 1 ? m.at<bool>({i, j}) : j <= i);
                    w[static_cast<std::size_t>(j)] = keep ? dot * scale : -INFINITY;
                    most = std::max(most, w[static_cast<std::size_t>(j)]);
                }
                for (double& x : w) total += x = std::exp(x - most);
                for (std::ptrdiff_t c = 0; c < Ev; ++c) {
                    double o = 0;
                    for (std::ptrdiff_t j = 0; j < S; ++j) o += w[static_cast<std::size_t>(j)] / total * v.at<double>({b, j, c});
                    out.push_back(o);
                }
            }
        return out;
    };
    const double d = 1 / std::sqrt(5.0);
    kiln_test::check_all_close(values(kiln::nn::scaled_dot_product_attention(q, k, v)), by_loops(0, d), 1e-12, 1e-12);
    kiln_test::check_all_close(values(kiln::nn::scaled_dot_product_attention(q, k, v, m)), by_loops(1, d), 1e-12, 1e-12);
    kiln_test::check_all_close(values(kiln::nn::scaled_dot_product_attention(q, k, v, kiln::tensor(), true)), by_loops(2, d), 1e-12, 1e-12);
    kiln_test::check_all_close(values(kiln::nn::scaled_dot_product_attention(q, k, v, kiln::tensor(), false, 0.25)), by_loops(0, 0.25), 1e-12, 1e-12);
    // A floating mask is added: -inf where m is false is the bool mask.
    const kiln::tensor additive = kiln::where(m, 0.0, -INFINITY).to(kiln::float64);  // (two numbers: float32)
    kiln_test::check_all_close(values(kiln::nn::scaled_dot_product_attention(q, k, v, additive)), by_loops(1, d), 1e-12, 1e-12);
    // Bad input.
    CHECK_THROWS_WITH_AS(kiln::nn::scaled_dot_product_attention(q, k.slice(2, 0, 4), v),
                         "kiln: shape_error in 'nn::scaled_dot_product_attention': query (2, 3, 5), key (2, 4, 4) and value "
                         "(2, 4, 2): the query and the key must have the same features",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::scaled_dot_product_attention(q, k, v.slice(1, 0, 3)), kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::scaled_dot_product_attention(q, k, v, kiln::ones({3, 5}, kiln::bool_)),
                         "kiln: shape_error in 'nn::scaled_dot_product_attention': the mask (3, 5) does not broadcast to the "
                         "scores (..., 3, 4)",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::scaled_dot_product_attention(q, k, v, m, true), kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::scaled_dot_product_attention(q.to(kiln::float32), k, v), kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::scaled_dot_product_attention(q, k, v, kiln::ones({3, 4}, kiln::int32)), kiln::dtype_error);
}

TEST_CASE("multi_head_attention: per-head attention of the projections, traced once for any batch and length") {
    kiln::generator g(43);
    kiln::nn::multi_head_attention mha(6, 3, false, g, kiln::float64);
    CHECK(mha.parameters().size() == 8);
    mha.b_q.assign(kiln::randn({6}, kiln::float64, g));
    mha.b_o.assign(kiln::randn({6}, kiln::float64, g));
    const kiln::tensor query = kiln::randn({2, 3, 6}, kiln::float64, g), memory = kiln::randn({2, 5, 6}, kiln::float64, g);
    const kiln::tensor mask = kiln::greater(kiln::randn({2, 1, 1, 5}, kiln::float64, g), -1.0);  // a key padding mask
    // Head by head, with slices of the projections.
    const kiln::tensor qp = kiln::matmul(query, mha.w_q) + mha.b_q, kp = kiln::matmul(memory, mha.w_k) + mha.b_k,
                       vp = kiln::matmul(memory, mha.w_v) + mha.b_v;
    std::vector<kiln::tensor> heads;
    for (std::ptrdiff_t h = 0; h < 3; ++h)
        heads.push_back(kiln::nn::scaled_dot_product_attention(qp.slice(2, 2 * h, 2 * h + 2), kp.slice(2, 2 * h, 2 * h + 2),
                                                               vp.slice(2, 2 * h, 2 * h + 2), mask.squeeze(1)));
    const kiln::tensor want = kiln::matmul(kiln::concat(heads, 2), mha.w_o) + mha.b_o;
    CHECK(kiln::allclose(mha(query, memory, memory, mask), want, 1e-12, 1e-12));
    // Self-attention as a layer, causal: the first position attends to itself only, so later positions do not move it.
    kiln::nn::multi_head_attention causal(6, 2, true, g, kiln::float64);
    const kiln::tensor x = kiln::randn({2, 4, 6}, kiln::float64, g);
    kiln::tensor later = x.clone();
    later.slice(1, 1, 4).copy_(kiln::randn({2, 3, 6}, kiln::float64, g));
    CHECK(kiln::allclose(causal(x).slice(1, 0, 1), causal(later).slice(1, 0, 1), 1e-12, 1e-12));
    CHECK_FALSE(kiln::allclose(causal(x).slice(1, 1, 2), causal(later).slice(1, 1, 2), 1e-6, 1e-6));
    // Traced with the batch and the length dynamic: one trace.
    auto f = kiln::function([&](const kiln::tensor& xb) { return causal(xb); }, {kiln::spec(kiln::float64, {kiln::dyn, kiln::dyn, 6})});
    for (std::ptrdiff_t n : {2, 3, 1})
        for (std::ptrdiff_t t : {4, 7}) {
            const kiln::tensor xn = kiln::randn({n, t, 6}, kiln::float64, g);
            CHECK(kiln::allclose(f(xn), causal(xn), 1e-12, 1e-12));
        }
    CHECK(f.trace_count() == 1);
    // The gradient against central differences.
    const kiln::tensor proj = kiln::randn({2, 4, 6}, kiln::float64, g);
    const kiln::tensor grad = [&] {
        kiln::gradient_tape tape;
        tape.watch(x);
        return tape.gradient(kiln::sum(causal(x) * proj), x);
    }();
    for (int t = 0; t < 6; ++t) {
        const std::ptrdiff_t i = (t * 13) % x.numel();
        kiln::tensor plus = x.clone(), minus = x.clone();
        plus.data<double>()[i] += 1e-6;
        minus.data<double>()[i] -= 1e-6;
        const double numeric = (kiln::sum(causal(plus) * proj).item<double>() - kiln::sum(causal(minus) * proj).item<double>()) / 2e-6;
        CHECK(grad.contiguous().data<double>()[i] == doctest::Approx(numeric).epsilon(1e-6));
    }
    // Bad input.
    CHECK_THROWS_WITH_AS(kiln::nn::multi_head_attention(6, 4), "kiln: value_error in 'nn::multi_head_attention': 4 heads must "
                         "divide the embedding's 6 features (both positive)", kiln::value_error);
    CHECK_THROWS_AS(mha(kiln::randn({2, 3, 5}, kiln::float64, g)), kiln::shape_error);
    CHECK_THROWS_AS(mha(query, kiln::randn({3, 5, 6}, kiln::float64, g), kiln::randn({3, 5, 6}, kiln::float64, g)), kiln::shape_error);
}

TEST_CASE("conv2d and pooling refuse bad shapes, groups and windows with sentences that name them") {
    CHECK_THROWS_WITH_AS(kiln::nn::conv2d(kiln::ones({1, 3, 2, 2}), kiln::ones({4, 3, 3, 3})),
                         "kiln: shape_error in 'nn::conv2d': the height of the input is 2, smaller than the window's 3 (kernel 3)",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv2d(kiln::ones({1, 3, 5, 5}), kiln::ones({4, 2, 3, 3})),
                         "kiln: shape_error in 'nn::conv2d': the weight (4, 2, 3, 3) takes 2 input channels, but the input (1, 3, 5, 5) has 3",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::conv2d(kiln::ones({3, 5, 5}), kiln::ones({4, 3, 3, 3})),
                         "kiln: shape_error in 'nn::conv2d': the input must be (batch, channels, height, width), got (3, 5, 5)",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::conv2d(kiln::ones({1, 4, 5, 5}), kiln::ones({4, 2, 3, 3}), kiln::tensor(), {.groups = 3}), kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::conv2d(kiln::ones({1, 3, 5, 5}), kiln::ones({4, 3, 3, 3}), kiln::ones({3})), kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::conv2d(kiln::ones({1, 3, 5, 5}), kiln::ones({4, 3, 3, 3}), kiln::tensor(), {.stride = {0, 1}}), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::max_pool2d(kiln::ones({1, 1, 5, 5}), {2, 2}, {.padding = {2, 2}}),
                         "kiln: value_error in 'nn::max_pool2d': padding 2 is more than half the kernel's 2 (a window could hold padding alone)",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::avg_pool2d(kiln::ones({1, 1, 4, 4}, kiln::int32), {2, 2}), kiln::dtype_error);
}

TEST_CASE("a small convolutional network learns, eagerly and as a kiln::function, to the same losses") {
    // Which half of an 8 x 8 image holds a bright 2 x 2 square: conv -> relu -> max pool -> flatten -> dense.
    kiln::generator data_gen(5);
    const std::ptrdiff_t n = 64;
    std::vector<float> xs(static_cast<std::size_t>(n * 64), 0.f), ys(static_cast<std::size_t>(n), 0.f);
    for (std::ptrdiff_t i = 0; i < n; ++i) {
        const bool right = i % 2 == 1;
        const std::ptrdiff_t r = (i * 5) % 7, c = (right ? 4 : 0) + (i * 3) % 3;
        for (std::ptrdiff_t a = 0; a < 2; ++a)
            for (std::ptrdiff_t e = 0; e < 2; ++e) xs[static_cast<std::size_t>(i * 64 + (r + a) * 8 + c + e)] = 1.f;
        ys[static_cast<std::size_t>(i)] = right ? 1.f : 0.f;
    }
    const kiln::tensor x = kiln::wrap(xs.data(), {n, 1, 8, 8}).clone() + kiln::randn({n, 1, 8, 8}, data_gen) * 0.05;
    const kiln::tensor y = kiln::wrap(ys.data(), {n, 1}).clone();
    auto train = [&](bool traced) {
        kiln::generator g(9);
        kiln::nn::sequential model(kiln::nn::conv2d_layer(1, 4, {3, 3}, {.padding = {1, 1}}, kiln::nn::relu, g),
                                   kiln::nn::max_pool2d_layer({2, 2}), kiln::nn::flatten_layer(),
                                   kiln::nn::dense(64, 1, kiln::nn::identity, g));
        kiln::optim::adam opt(model.parameters(), 0.02);
        auto step = [&](const kiln::tensor& xb, const kiln::tensor& yb) {
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::mse(kiln::sigmoid(model(xb)), yb);
            opt.apply_gradients(tape.gradient(loss, model.parameters()), model.parameters());
            return loss;
        };
        auto fn = kiln::function(step);
        std::vector<double> losses;
        for (int epoch = 0; epoch < 40; ++epoch) losses.push_back((traced ? fn(x, y) : step(x, y)).item<double>());
        return losses;
    };
    const std::vector<double> eager = train(false), traced = train(true);
    MESSAGE("losses: first " << eager.front() << ", last " << eager.back());
    CHECK(eager.front() > 0.2);
    CHECK(eager.back() < 0.05);
    kiln_test::check_all_close(traced, eager, 1e-5);
}

TEST_CASE("nn::embedding looks rows up by id, adds gradients back to the rows used, refuses ids outside the table, and traces") {
    kiln::generator g(17);
    kiln::nn::embedding emb(5, 3, g);
    REQUIRE(emb.w.shape() == kiln::dims{5, 3});
    REQUIRE(emb.parameters().size() == 1);
    const std::vector<double> table = values(emb.w);
    // Ids of any shape: the result has their shape and one more axis.
    const kiln::tensor ids = kiln::from_values<std::int64_t>({4, 0, 4, 2}, {2, 2});
    const kiln::tensor y = emb(ids);
    REQUIRE(y.shape() == kiln::dims{2, 2, 3});
    const std::vector<double> got = values(y);
    const std::int64_t picked[4] = {4, 0, 4, 2};
    for (std::size_t k = 0; k < 4; ++k)
        for (std::size_t c = 0; c < 3; ++c) CHECK(got[k * 3 + c] == table[static_cast<std::size_t>(picked[k]) * 3 + c]);
    CHECK(emb(kiln::from_values<std::int32_t>({1}, {1})).shape() == kiln::dims{1, 3});
    CHECK(emb(kiln::zeros({0}, kiln::int64)).shape() == kiln::dims{0, 3});
    // The gradient of sum(y * weights): row 4 read twice gets both, rows 1 and 3 nothing.
    const kiln::tensor weights = kiln::from_values<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
    kiln::gradient_tape tape;
    const kiln::tensor loss = kiln::sum(emb(ids) * weights);
    const std::vector<double> gw = values(tape.gradient(loss, emb.w));
    CHECK(gw == std::vector<double>{4, 5, 6, 0, 0, 0, 10, 11, 12, 0, 0, 0, 8, 10, 12});
    // Ids outside [0, 5), negative ones too, and ids that are not integers.
    CHECK_THROWS_WITH_AS(emb(kiln::from_values<std::int64_t>({0, 5}, {2})),
                         "kiln: value_error in 'nn::embedding': id 5 is out of range for a table of 5 rows", kiln::value_error);
    CHECK_THROWS_WITH_AS(emb(kiln::from_values<std::int64_t>({-1}, {1})),
                         "kiln: value_error in 'nn::embedding': id -1 is out of range for a table of 5 rows", kiln::value_error);
    CHECK_THROWS_WITH_AS(emb(kiln::from_values<float>({1}, {1})),
                         "kiln: dtype_error in 'nn::embedding': ids must be int32 or int64, got float32", kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::embedding(0, 3), kiln::value_error);
    // Traced: the same values; an id out of range in a later call, negative too, is index_select's value_error.
    auto f = kiln::function([&](const kiln::tensor& i) { return emb(i); });
    CHECK(values(f(ids)) == got);
    CHECK(values(f(kiln::from_values<std::int64_t>({3, 1, 0, 2}, {2, 2}))).size() == 12);
    CHECK_THROWS_AS(f(kiln::from_values<std::int64_t>({0, 1, 2, 7}, {2, 2})), kiln::value_error);
    CHECK_THROWS_AS(f(kiln::from_values<std::int64_t>({0, 1, 2, -1}, {2, 2})), kiln::value_error);
    // A bag-of-words classifier trains, eagerly and traced to the same losses: the mean of each sentence's
    // embeddings, then a dense layer; sentences with id 1 are class 1.
    const kiln::tensor sentences = kiln::from_values<std::int64_t>({1, 2, 3, 0, 2, 3, 4, 1, 0, 0, 2, 4, 3, 4, 1, 2}, {4, 4});
    const kiln::tensor labels = kiln::from_values<float>({1, 1, 0, 1}, {4, 1});
    auto train = [&](bool traced) {
        kiln::generator g2(5);
        kiln::nn::embedding words(5, 4, g2);
        kiln::nn::dense out(4, 1, kiln::nn::identity, g2);
        std::vector<kiln::variable*> params{&words.w, &out.w, &out.b};
        kiln::optim::adam opt(params, 0.05);
        auto step = [&](const kiln::tensor& s, const kiln::tensor& l) {
            kiln::gradient_tape t;
            const kiln::tensor loss = kiln::nn::mse(kiln::sigmoid(out(kiln::mean(words(s), {1}))), l);
            opt.apply_gradients(t.gradient(loss, params), params);
            return loss;
        };
        auto fn = kiln::function(step);
        std::vector<double> losses;
        for (int e = 0; e < 60; ++e) losses.push_back((traced ? fn(sentences, labels) : step(sentences, labels)).item<double>());
        return losses;
    };
    const std::vector<double> eager = train(false), traced = train(true);
    CHECK(eager.back() < eager.front() * 0.2);
    kiln_test::check_all_close(traced, eager, 1e-5);
}

// Layer normalization by its definition, in double: each row of the trailing `inner` elements centred, divided by
// sqrt(biased variance + eps), then scaled and shifted elementwise where w and b are given.
static std::vector<double> layer_norm_by_loops(const std::vector<double>& x, std::size_t inner, const std::vector<double>& w,
                                               const std::vector<double>& b, double eps) {
    std::vector<double> out(x.size());
    for (std::size_t r = 0; r < x.size() / inner; ++r) {
        double mean = 0, var = 0;
        for (std::size_t j = 0; j < inner; ++j) mean += x[r * inner + j];
        mean /= static_cast<double>(inner);
        for (std::size_t j = 0; j < inner; ++j) var += (x[r * inner + j] - mean) * (x[r * inner + j] - mean);
        var /= static_cast<double>(inner);
        for (std::size_t j = 0; j < inner; ++j)
            out[r * inner + j] = (x[r * inner + j] - mean) / std::sqrt(var + eps) * (w.empty() ? 1.0 : w[j]) + (b.empty() ? 0.0 : b[j]);
    }
    return out;
}

TEST_CASE("nn::layer_norm normalizes the trailing axes as PyTorch does, differentiates, traces, and refuses bad shapes") {
    kiln::generator g(23);
    const kiln::tensor x = kiln::randn({3, 4, 5}, g) * 3.0f + 2.0f;
    const kiln::tensor w = kiln::randn({4, 5}, g), b = kiln::randn({4, 5}, g), b5 = kiln::randn({5}, g);
    // Over the last two axes with weight and bias, over the last one with a bias only and with neither.
    kiln_test::check_all_close(values(kiln::nn::layer_norm(x, {4, 5}, w, b)), layer_norm_by_loops(values(x), 20, values(w), values(b), 1e-5),
                               2e-5, 2e-5);
    kiln_test::check_all_close(values(kiln::nn::layer_norm(x, {5}, kiln::tensor(), b5, 0.5)),
                               layer_norm_by_loops(values(x), 5, {}, values(b5), 0.5), 2e-5, 2e-5);
    const kiln::tensor plain = kiln::nn::layer_norm(x, {5});
    kiln_test::check_all_close(values(plain), layer_norm_by_loops(values(x), 5, {}, {}, 1e-5), 2e-5, 2e-5);
    // Each row of the result has mean 0 and (biased) variance 1 - eps / (var + eps), near 1.
    CHECK(kiln::max(kiln::abs(kiln::mean(plain, {-1}))).item<float>() < 1e-6f);
    CHECK(kiln::max(kiln::abs(kiln::var(plain, {-1}, 0) - 1.0f)).item<float>() < 1e-4f);
    CHECK(kiln::nn::layer_norm(x.to(kiln::float64), {5}).dtype() == kiln::float64);

    // Gradients (float64) of a random projection against central differences, for x, the weight and the bias.
    const kiln::tensor xd = x.to(kiln::float64), wd = w.to(kiln::float64), bd = b.to(kiln::float64);
    const kiln::tensor proj = kiln::randn({3, 4, 5}, g).to(kiln::float64);
    kiln::gradient_tape tape;
    tape.watch(xd);
    tape.watch(wd);
    tape.watch(bd);
    const std::vector<kiln::tensor> grads =
        tape.gradient(kiln::sum(kiln::nn::layer_norm(xd, {4, 5}, wd, bd) * proj), std::vector<kiln::tensor>{xd, wd, bd});
    auto objective = [&](const kiln::tensor& xx, const kiln::tensor& ww, const kiln::tensor& bb) {
        return kiln::sum(kiln::nn::layer_norm(xx, {4, 5}, ww, bb) * proj).item<double>();
    };
    for (int which = 0; which < 3; ++which)
        for (int t = 0; t < 8; ++t) {
            const kiln::tensor& base = which == 0 ? xd : which == 1 ? wd : bd;
            const std::ptrdiff_t at = (t * 7919 + which * 13) % base.numel();
            kiln::tensor plus = base.clone(), minus = base.clone();
            plus.data<double>()[at] += 1e-6;
            minus.data<double>()[at] -= 1e-6;
            auto eval = [&](const kiln::tensor& v) {
                return which == 0 ? objective(v, wd, bd) : which == 1 ? objective(xd, v, bd) : objective(xd, wd, v);
            };
            const double numeric = (eval(plus) - eval(minus)) / 2e-6;
            CAPTURE(which);
            CHECK(grads[static_cast<std::size_t>(which)].contiguous().data<double>()[at] == doctest::Approx(numeric).epsilon(1e-6));
        }

    // The layer: a weight of ones and a bias of zeros, trainable; without the affine part it has no parameters.
    kiln::nn::layer_norm_layer layer({5});
    REQUIRE(layer.parameters().size() == 2);
    CHECK(values(layer.w) == std::vector<double>(5, 1.0));
    CHECK(values(layer.b) == std::vector<double>(5, 0.0));
    CHECK(kiln::allclose(layer(x), plain, 0, 0));
    CHECK(kiln::nn::layer_norm_layer({5}, 1e-5, false).parameters().empty());
    // Traced, bit for bit what eager mode computes, and the tracer notes it (the ONNX export's LayerNormalization).
    layer.w.assign(kiln::randn({5}, g));
    auto fn = kiln::function([&](const kiln::tensor& a) { return layer(a); });
    CHECK(kiln::allclose(fn(x), layer(x), 0, 0));
    const kiln::function_graph& graph = fn.graph(x);
    REQUIRE(graph.composites.size() == 1);
    CHECK(graph.composites[0].op == "layer_norm");
    CHECK(graph.composites[0].attrs == "axis=2 epsilon=1.0000000000000001e-05 scale=true bias=true");
    CHECK(graph.composites[0].inputs.size() == 3);

    // Bad input, each with a sentence.
    CHECK_THROWS_WITH_AS(kiln::nn::layer_norm(x, {5, 4}),
                         "kiln: shape_error in 'nn::layer_norm': the input (3, 4, 5) does not end in the normalized shape (5, 4)",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::layer_norm(x, {5}, w),
                         "kiln: shape_error in 'nn::layer_norm': the weight has shape (4, 5), but the normalized shape is (5,)",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::layer_norm(x, {4, 5}, w, b.to(kiln::float64)),
                         "kiln: dtype_error in 'nn::layer_norm': the bias is float64, but the input is float32", kiln::dtype_error);
    CHECK_THROWS_WITH_AS(kiln::nn::layer_norm(kiln::arange(5), {5}),
                         "kiln: dtype_error in 'nn::layer_norm': the input must be floating, got int64", kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::layer_norm(x, {5}, kiln::tensor(), kiln::tensor(), -1.0), kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::layer_norm(x, {}), kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::layer_norm_layer({0}), kiln::value_error);
}

TEST_CASE("nn::rms_norm and nn::group_norm normalize as PyTorch does, differentiate, trace, and refuse bad shapes") {
    kiln::generator g(31);
    // RMS norm over the last two axes of (3, 2, 4), with a weight.
    const kiln::tensor x = kiln::randn({3, 2, 4}, kiln::float64, g), w = kiln::randn({2, 4}, kiln::float64, g);
    const std::vector<double> xv = values(x), wv = values(w);
    std::vector<double> want(xv.size());
    for (std::size_t r = 0; r < 3; ++r) {
        double ms = 0;
        for (std::size_t j = 0; j < 8; ++j) ms += xv[r * 8 + j] * xv[r * 8 + j] / 8;
        for (std::size_t j = 0; j < 8; ++j) want[r * 8 + j] = xv[r * 8 + j] / std::sqrt(ms + 1e-6) * wv[j];
    }
    kiln_test::check_all_close(values(kiln::nn::rms_norm(x, {2, 4}, w, 1e-6)), want, 1e-14, 1e-14);
    // The default eps is the dtype's machine epsilon: on rows of zeros, 0 / sqrt(eps) = 0, not NaN.
    CHECK(values(kiln::nn::rms_norm(kiln::zeros({2, 3}), {3})) == std::vector<double>(6, 0.0));
    kiln::nn::rms_norm_layer rms({4});
    CHECK(rms.parameters().size() == 1);
    CHECK(kiln::allclose(rms(x.to(kiln::float32)), kiln::nn::rms_norm(x.to(kiln::float32), {4}), 0, 0));

    // Group norm: (2, 6, 3) in 3 groups of 2 channels, with a weight and a bias per channel.
    const kiln::tensor y = kiln::randn({2, 6, 3}, kiln::float64, g), gw = kiln::randn({6}, kiln::float64, g), gb = kiln::randn({6}, kiln::float64, g);
    const std::vector<double> yv = values(y), gwv = values(gw), gbv = values(gb);
    std::vector<double> gwant(yv.size());
    for (std::size_t n = 0; n < 2; ++n)
        for (std::size_t grp = 0; grp < 3; ++grp) {
            const std::size_t at = n * 18 + grp * 6;  // 2 channels of 3 values
            double mean = 0, var = 0;
            for (std::size_t j = 0; j < 6; ++j) mean += yv[at + j] / 6;
            for (std::size_t j = 0; j < 6; ++j) var += (yv[at + j] - mean) * (yv[at + j] - mean) / 6;
            for (std::size_t j = 0; j < 6; ++j) {
                const std::size_t ch = grp * 2 + j / 3;
                gwant[at + j] = (yv[at + j] - mean) / std::sqrt(var + 1e-5) * gwv[ch] + gbv[ch];
            }
        }
    kiln_test::check_all_close(values(kiln::nn::group_norm(y, 3, gw, gb)), gwant, 1e-13, 1e-13);
    // One group is layer normalization over (C, ...).
    CHECK(kiln::allclose(kiln::nn::group_norm(y, 1), kiln::nn::layer_norm(y, {6, 3}), 1e-13, 1e-13));
    // The gradient against central differences.
    const kiln::tensor proj = kiln::randn({2, 6, 3}, kiln::float64, g);
    kiln::tensor grad;
    {
        kiln::gradient_tape tape;
        tape.watch(y);
        grad = tape.gradient(kiln::sum(kiln::nn::group_norm(y, 3, gw, gb) * proj), y);
    }
    for (std::ptrdiff_t at : {0, 5, 17, 30}) {
        kiln::tensor up = y.clone(), down = y.clone();
        up.data<double>()[at] += 1e-6;
        down.data<double>()[at] -= 1e-6;
        const double numeric = (kiln::sum(kiln::nn::group_norm(up, 3, gw, gb) * proj).item<double>() -
                                kiln::sum(kiln::nn::group_norm(down, 3, gw, gb) * proj).item<double>()) / 2e-6;
        CHECK(grad.data<double>()[at] == doctest::Approx(numeric).epsilon(1e-6));
    }
    // Layers, traced with a dynamic batch: one trace.
    kiln::nn::group_norm_layer gn(2, 6, 1e-5, true, kiln::float64);
    CHECK(gn.parameters().size() == 2);
    auto fn = kiln::function([&](const kiln::tensor& t) { return gn(t) + kiln::nn::rms_norm(t, {3}); },
                             {kiln::spec(kiln::float64, {kiln::dyn, 6, 3})});
    for (std::ptrdiff_t n : {2, 5}) {
        const kiln::tensor t = kiln::randn({n, 6, 3}, kiln::float64, g);
        CHECK(kiln::allclose(fn(t), gn(t) + kiln::nn::rms_norm(t, {3}), 0, 0));
    }
    CHECK(fn.trace_count() == 1);
    // Refusals, in sentences.
    CHECK_THROWS_WITH_AS(kiln::nn::group_norm(y, 4), "kiln: value_error in 'nn::group_norm': 4 groups must divide the 6 channels of (2, 6, 3)",
                         kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::group_norm(y, 3, kiln::ones({3}, kiln::float64)),
                         "kiln: shape_error in 'nn::group_norm': the weight has shape (3,), but it must be (6,)", kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::rms_norm(x, {4, 2}), "kiln: shape_error in 'nn::rms_norm': the input (3, 2, 4) does not end in the normalized shape (4, 2)",
                         kiln::shape_error);
    CHECK_THROWS_WITH_AS(kiln::nn::rms_norm(kiln::from_values<std::int64_t>({1, 2}, {2}), {2}),
                         "kiln: dtype_error in 'nn::rms_norm': the input must be floating, got int64", kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::group_norm_layer(4, 6), kiln::value_error);
}

TEST_CASE("optim::clip_by_global_norm scales every gradient by max_norm / norm above max_norm, as TensorFlow does") {
    const kiln::tensor a = kiln::from_values<float>({3, 4}, {2}), b = f64({12}, {1, 1});
    kiln::tensor norm;
    const std::vector<kiln::tensor> half = kiln::optim::clip_by_global_norm({a, b}, 6.5, &norm);  // norm 13
    CHECK(norm.dtype() == kiln::float64);
    CHECK(norm.dim() == 0);
    CHECK(norm.item<double>() == 13.0);
    REQUIRE(half.size() == 2);
    CHECK(half[0].dtype() == kiln::float32);
    CHECK(values(half[0]) == std::vector<double>{1.5, 2.0});
    CHECK(half[1].shape() == kiln::dims{1, 1});
    CHECK(values(half[1]) == std::vector<double>{6.0});
    // At or below max_norm the gradients come back unchanged, to the bit.
    for (double m : {13.0, 100.0}) {
        const std::vector<kiln::tensor> same = kiln::optim::clip_by_global_norm({a, b}, m);
        CHECK(values(same[0]) == values(a));
        CHECK(values(same[1]) == values(b));
    }
    // A NaN or infinite norm makes every gradient NaN.
    for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
        const std::vector<kiln::tensor> out = kiln::optim::clip_by_global_norm({a, f64({1, bad}, {2})}, 1.0);
        for (const kiln::tensor& t : out)
            for (double v : values(t)) CHECK(std::isnan(v));
    }
    // No gradients: none back, and a norm of 0.
    CHECK(kiln::optim::clip_by_global_norm({}, 1.0, &norm).empty());
    CHECK(norm.item<double>() == 0.0);
    CHECK_THROWS_WITH_AS(kiln::optim::clip_by_global_norm({a}, 0.0),
                         "kiln: value_error in 'optim::clip_by_global_norm': max_norm must be positive and finite, got 0",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::optim::clip_by_global_norm({a}, std::numeric_limits<double>::infinity()), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::optim::clip_by_global_norm({a, kiln::arange(3)}, 1.0),
                         "kiln: dtype_error in 'optim::clip_by_global_norm': gradient 1 is int64; gradients are floating",
                         kiln::dtype_error);

    // Inside a traced training step: the same parameters as eager steps, step by step.
    kiln::generator g(31);
    const kiln::tensor x = kiln::randn({8, 3}, g) * 10.0f, y = kiln::randn({8, 1}, g);
    kiln::generator g1(5), g2(5);
    kiln::nn::dense eager_layer(3, 1, kiln::nn::identity, g1), traced_layer(3, 1, kiln::nn::identity, g2);
    kiln::optim::sgd eager_opt({&eager_layer.w, &eager_layer.b}, 0.1), traced_opt({&traced_layer.w, &traced_layer.b}, 0.1);
    auto eager_step = [&] {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(eager_layer(x), y);
        eager_opt.step(kiln::optim::clip_by_global_norm(tape.gradient(loss, {eager_layer.w, eager_layer.b}), 0.5));
    };
    auto traced_step = kiln::function([&](const kiln::tensor& xx, const kiln::tensor& yy) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(traced_layer(xx), yy);
        traced_opt.step(kiln::optim::clip_by_global_norm(tape.gradient(loss, {traced_layer.w, traced_layer.b}), 0.5));
    });
    for (int i = 0; i < 3; ++i) {
        const std::vector<double> before = values(eager_layer.w);
        eager_step();
        traced_step(x, y);
        // Each step moves the parameters by at most lr * max_norm (the gradients are large: they are clipped).
        double moved = 0;
        for (std::size_t k = 0; k < before.size(); ++k) moved += (values(eager_layer.w)[k] - before[k]) * (values(eager_layer.w)[k] - before[k]);
        CHECK(std::sqrt(moved) <= 0.05 * (1 + 1e-6));
        CHECK(std::sqrt(moved) > 0.01);
        kiln_test::check_all_close(values(traced_layer.w), values(eager_layer.w), 1e-6, 1e-7);
        kiln_test::check_all_close(values(traced_layer.b), values(eager_layer.b), 1e-6, 1e-7);
    }
    CHECK(traced_step.trace_count() == 1);
}

namespace {
// The documented draw (ops/random.hpp), written again here: SplitMix64's output function; the key's stream and its
// block key; element i kept when lowbias32(block key ^ low 32 bits of i) >= p * 2^32.
std::uint64_t splitmix_out(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
std::uint32_t lowbias32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}
bool kept_by_formula(std::int64_t seed, std::int64_t counter, std::uint64_t i, double p) {
    const std::uint64_t stream = splitmix_out(static_cast<std::uint64_t>(seed) ^ splitmix_out(static_cast<std::uint64_t>(counter)));
    const auto block = static_cast<std::uint32_t>(splitmix_out(stream + (i >> 32)));
    return static_cast<double>(lowbias32(block ^ static_cast<std::uint32_t>(i))) >= p * 4294967296.0;
}
}  // namespace

TEST_CASE("nn::dropout drops with probability p, scales the rest, advances its key, and its gradient drops the same") {
    kiln::generator g(41);
    kiln::tensor key = kiln::nn::dropout_key(g);
    REQUIRE(key.dtype() == kiln::int64);
    REQUIRE(key.shape() == kiln::dims{2});
    const std::int64_t seed = key.at<std::int64_t>({0});
    CHECK(key.at<std::int64_t>({1}) == 0);
    const kiln::tensor ones = kiln::ones({200, 500});
    const kiln::tensor y = kiln::nn::dropout(ones, 0.3, key);
    CHECK(key.at<std::int64_t>({0}) == seed);
    CHECK(key.at<std::int64_t>({1}) == 1);  // moved on by one call
    // Every element is 0 or exactly float(1 / 0.7); which ones is the documented formula's.
    const float scale = static_cast<float>(1.0 / 0.7);
    const std::vector<double> v = values(y);
    std::size_t kept = 0, formula_mismatches = 0, other_values = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        kept += v[i] != 0;
        other_values += v[i] != 0 && v[i] != scale;
        formula_mismatches += (v[i] != 0) != kept_by_formula(seed, 1, i, 0.3);  // (the call's counter: moved on, then drawn)
    }
    CHECK(other_values == 0);
    CHECK(formula_mismatches == 0);
    // 100000 draws kept with probability 0.7: within five standard deviations (145) of 70000.
    CHECK(std::abs(static_cast<double>(kept) - 70000.0) < 5 * 145.0);
    // The next call draws new numbers: about 2 p (1 - p) = 42% of the elements differ.
    const std::vector<double> v2 = values(kiln::nn::dropout(ones, 0.3, key));
    std::size_t differ = 0;
    for (std::size_t i = 0; i < v.size(); ++i) differ += v[i] != v2[i];
    CHECK(std::abs(static_cast<double>(differ) - 42000.0) < 5 * 156.0);
    // The same key gives the same elements; a NaN stays NaN whether kept or dropped (a mask multiplies, as in
    // PyTorch); p = 0 and training = false pass x through without moving the key; p = 1 drops everything.
    kiln::tensor k1 = kiln::nn::dropout_key(g), k2 = k1.clone();
    const kiln::tensor x = kiln::randn({6, 7}, g);
    CHECK(kiln::allclose(kiln::nn::dropout(x, 0.5, k1), kiln::nn::dropout(x, 0.5, k2), 0, 0));
    const kiln::tensor nans = kiln::full({64}, std::numeric_limits<double>::quiet_NaN());
    for (double e : values(kiln::nn::dropout(nans, 0.5, k1))) CHECK(std::isnan(e));
    const kiln::tensor before = k1.clone();
    CHECK(kiln::nn::dropout(x, 0.0, k1).shares_storage_with(x));
    CHECK(kiln::nn::dropout(x, 0.5, k1, false).shares_storage_with(x));
    CHECK(values(k1) == values(before));
    CHECK(values(kiln::nn::dropout(x, 1.0, k1)) == std::vector<double>(42, 0.0));
    // A transposed input drops by its own row-major positions: as its contiguous copy does.
    kiln::tensor k3 = kiln::nn::dropout_key(g), k4 = k3.clone();
    CHECK(kiln::allclose(kiln::nn::dropout(x.transpose(0, 1), 0.5, k3), kiln::nn::dropout(x.transpose(0, 1).contiguous(), 0.5, k4), 0, 0));

    // The gradient is dropout of g with the call's key: g scaled where the element was kept, 0 where dropped.
    kiln::tensor k5 = kiln::nn::dropout_key(g);
    const kiln::tensor xd = kiln::randn({5, 9}, g).to(kiln::float64), w = kiln::randn({5, 9}, g).to(kiln::float64);
    kiln::gradient_tape tape;
    tape.watch(xd);
    const kiln::tensor out = kiln::nn::dropout(xd, 0.25, k5);
    const kiln::tensor grad = tape.gradient(kiln::sum(out * w), xd);
    const std::vector<double> o = values(out), gv = values(grad), xv = values(xd), wv = values(w);
    for (std::size_t i = 0; i < o.size(); ++i) {
        const bool keep = o[i] != 0;
        CHECK(o[i] == (keep ? xv[i] * (1.0 / 0.75) : 0.0));
        CHECK(gv[i] == (keep ? wv[i] * (1.0 / 0.75) : 0.0));
    }

    // Bad input, each with a sentence.
    CHECK_THROWS_WITH_AS(kiln::nn::dropout(x, 1.5, k1),
                         "kiln: value_error in 'nn::dropout': the drop probability must lie in [0, 1], got 1.5", kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::dropout(x, std::numeric_limits<double>::quiet_NaN(), k1), kiln::value_error);
    CHECK_THROWS_WITH_AS(kiln::nn::dropout(kiln::arange(3), 0.5, k1),
                         "kiln: dtype_error in 'nn::dropout': the input must be floating, got int64", kiln::dtype_error);
    kiln::tensor bad = kiln::zeros({3}, kiln::int64);
    CHECK_THROWS_WITH_AS(kiln::nn::dropout(x, 0.5, bad),
                         "kiln: value_error in 'nn::dropout': the key must be an int64 tensor of shape (2,) "
                         "(kiln::nn::dropout_key), got int64 (3,)",
                         kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::dropout_layer(-0.1), kiln::value_error);
}

TEST_CASE("nn::dropout_layer: train and eval, in a sequential model, and traced, where each call drops other elements") {
    // A traced layer computes what the same layer computes eagerly, call after call: its key is the function's
    // state, read and moved on at every call (one trace).
    kiln::generator ga(8), gb(8);
    kiln::nn::dropout_layer eager_layer(0.5, ga), traced_layer(0.5, gb);
    auto fn = kiln::function([&](const kiln::tensor& a) { return traced_layer(a); });
    const kiln::tensor z = kiln::ones({4, 16});
    std::vector<std::vector<double>> seen;
    for (int call = 0; call < 4; ++call) {
        const kiln::tensor e = eager_layer(z), t = fn(z);
        CHECK(values(t) == values(e));
        seen.push_back(values(t));
    }
    CHECK(fn.trace_count() == 1);
    CHECK(seen[0] != seen[1]);
    CHECK(seen[1] != seen[2]);
    CHECK(values(traced_layer.key) == values(eager_layer.key));
    CHECK(traced_layer.key.at<std::int64_t>({1}) == 4);
    // In evaluation the layer passes its input through.
    eager_layer.eval();
    CHECK_FALSE(eager_layer.training());
    CHECK(eager_layer(z).shares_storage_with(z));
    // A sequential model sets the mode of every layer, and a training step with dropout traces and learns.
    kiln::generator g(12);
    kiln::nn::sequential model(kiln::nn::dense(3, 32, kiln::nn::relu, g), kiln::nn::dropout_layer(0.2, g),
                               kiln::nn::dense(32, 1, kiln::nn::identity, g));
    model.eval();
    CHECK_FALSE(model.layer<kiln::nn::dropout_layer>(1).training());
    model.train();
    CHECK(model.layer<kiln::nn::dropout_layer>(1).training());
    CHECK(model.parameters().size() == 4);  // the dropout layer has none
    kiln::optim::adam opt(model.parameters(), 0.01);
    const kiln::tensor x = kiln::randn({64, 3}, g), y = kiln::sum(x, {1}, true);
    auto step = kiln::function([&](const kiln::tensor& xb, const kiln::tensor& yb) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(model(xb), yb);
        opt.apply_gradients(tape.gradient(loss, model.parameters()), model.parameters());
        return loss;
    });
    const float first = step(x, y).item<float>();
    float last = first;
    for (int i = 0; i < 150; ++i) last = step(x, y).item<float>();
    CHECK(last < 0.2f * first);
    CHECK(step.trace_count() == 1);
    model.eval();
    const float evaluated = kiln::nn::mse(model(x), y).item<float>();
    CHECK(evaluated < 0.2f * first);
    // The functional form with a generator draws its key while tracing: a trace_error that names the way out.
    auto wrong = kiln::function([](const kiln::tensor& a) { return kiln::nn::dropout(a, 0.5); });
    CHECK_THROWS_WITH_AS(wrong(z), doctest::Contains("pass a key that the function keeps"), kiln::trace_error);
}

TEST_CASE("learning-rate schedules and set_learning_rate, eagerly and in a traced step, which reads the rate at every call") {
    // The schedules by their formulas.
    const kiln::optim::exponential_decay ed{0.1, 10, 0.5};
    CHECK(ed(0) == 0.1);
    CHECK(ed(10) == doctest::Approx(0.05).epsilon(1e-15));
    CHECK(ed(5) == doctest::Approx(0.1 * std::sqrt(0.5)).epsilon(1e-15));
    const kiln::optim::exponential_decay stairs{0.1, 10, 0.5, true};
    CHECK(stairs(9) == 0.1);
    CHECK(stairs(25) == doctest::Approx(0.025).epsilon(1e-15));
    const kiln::optim::cosine_decay cd{0.2, 100, 0.1};
    CHECK(cd(0) == doctest::Approx(0.2).epsilon(1e-15));
    CHECK(cd(50) == doctest::Approx(0.2 * (0.9 * 0.5 + 0.1)).epsilon(1e-12));
    CHECK(cd(100) == doctest::Approx(0.02).epsilon(1e-12));
    CHECK(cd(1000) == doctest::Approx(0.02).epsilon(1e-12));  // level after decay_steps
    const kiln::optim::step_decay sd{1.0, 3, 0.5};
    CHECK(sd(2) == 1.0);
    CHECK(sd(3) == 0.5);
    CHECK(sd(7) == 0.25);
    CHECK_THROWS_WITH_AS(ed(-1), "kiln: value_error in 'optim::exponential_decay': the step must not be negative, got -1",
                         kiln::value_error);
    CHECK_THROWS_AS((kiln::optim::cosine_decay{0.1, 0}(1)), kiln::value_error);
    CHECK_THROWS_AS((kiln::optim::step_decay{0.1, 2, -1.0}(1)), kiln::value_error);

    // SGD on sum(w * x): the gradient is x, so each step moves w by -lr * x with the rate set before it.
    const kiln::tensor x = kiln::from_values<float>({1.0f, -2.0f, 0.5f}, {3});
    kiln::variable w_eager(kiln::zeros({3})), w_traced(kiln::zeros({3}));
    kiln::optim::sgd eager({&w_eager}, 0.1), traced({&w_traced}, 0.1);
    CHECK(traced.learning_rate() == 0.1);
    auto step = kiln::function([&](const kiln::tensor& xb) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::sum(w_traced * xb);
        traced.step(tape.gradient(loss, {w_traced}));
        return loss;
    });
    double moved = 0;
    for (std::int64_t k = 0; k < 6; ++k) {
        const double lr = sd(k) * 0.1;
        eager.set_learning_rate(lr);
        traced.set_learning_rate(lr);
        {
            kiln::gradient_tape tape;
            eager.step(tape.gradient(kiln::sum(w_eager * x), {w_eager}));
        }
        (void)step(x);
        moved += lr;
        CHECK(w_traced.at<float>({0}) == doctest::Approx(-moved).epsilon(1e-6));
        CHECK(w_traced.at<float>({1}) == doctest::Approx(2 * moved).epsilon(1e-6));
        CHECK(values(w_traced) == values(w_eager));
    }
    CHECK(step.trace_count() == 1);
    // Adam's step follows its rate too: with the rate 0 a step changes nothing, and the same rate again moves on.
    kiln::variable a(kiln::ones({3}));
    kiln::optim::adam opt({&a}, 0.01);
    auto adam_step = kiln::function([&](const kiln::tensor& xb) {
        kiln::gradient_tape tape;
        opt.step(tape.gradient(kiln::sum(a * xb), {a}));
    });
    adam_step(x);
    const std::vector<double> after_one = values(a);
    opt.set_learning_rate(0.0);
    CHECK(opt.learning_rate() == 0.0);
    adam_step(x);
    CHECK(values(a) == after_one);
    opt.set_learning_rate(0.01);
    adam_step(x);
    CHECK(values(a) != after_one);
    CHECK(adam_step.trace_count() == 1);
    CHECK_THROWS_WITH_AS(opt.set_learning_rate(-1.0),
                         "kiln: value_error in 'optim::adam': the learning rate must be finite and non-negative, got -1",
                         kiln::value_error);
    CHECK_THROWS_AS(eager.set_learning_rate(std::numeric_limits<double>::infinity()), kiln::value_error);
}

TEST_CASE("nn::batch_norm_layer normalizes each channel by the batch while training and by its running statistics in eval") {
    kiln::generator g(47);
    const kiln::tensor x = kiln::randn({4, 3, 2, 5}, kiln::float64, g) * 2.0 + 1.5;
    kiln::nn::batch_norm_layer bn(3, 1e-5, 0.1, true, kiln::float64);
    REQUIRE(bn.parameters().size() == 2);
    bn.w.assign(kiln::from_values<double>({0.5, -1.0, 2.0}, {3}));
    bn.b.assign(kiln::from_values<double>({0.1, 0.2, -0.3}, {3}));
    // Per channel, by loops: the batch's mean and biased variance normalize; the running statistics move to
    // 0.9 * (0, 1) + 0.1 * (mean, unbiased variance).
    const std::vector<double> xv = values(x), wv = values(bn.w), bv = values(bn.b);
    const std::size_t per = 10, count = 40;  // 2 * 5 values per (sample, channel); 4 samples
    std::vector<double> mean(3, 0), var(3, 0);
    auto at = [&](std::size_t n, std::size_t ch, std::size_t k) { return (n * 3 + ch) * per + k; };
    for (std::size_t ch = 0; ch < 3; ++ch) {
        for (std::size_t n = 0; n < 4; ++n)
            for (std::size_t k = 0; k < per; ++k) mean[ch] += xv[at(n, ch, k)];
        mean[ch] /= count;
        for (std::size_t n = 0; n < 4; ++n)
            for (std::size_t k = 0; k < per; ++k) var[ch] += (xv[at(n, ch, k)] - mean[ch]) * (xv[at(n, ch, k)] - mean[ch]);
        var[ch] /= count;
    }
    const std::vector<double> y = values(bn(x));
    for (std::size_t n = 0; n < 4; ++n)
        for (std::size_t ch = 0; ch < 3; ++ch)
            for (std::size_t k = 0; k < per; ++k)
                CHECK(y[at(n, ch, k)] == doctest::Approx((xv[at(n, ch, k)] - mean[ch]) / std::sqrt(var[ch] + 1e-5) * wv[ch] + bv[ch]).epsilon(1e-12));
    for (std::size_t ch = 0; ch < 3; ++ch) {
        CHECK(values(bn.running_mean)[ch] == doctest::Approx(0.1 * mean[ch]).epsilon(1e-12));
        CHECK(values(bn.running_var)[ch] == doctest::Approx(0.9 + 0.1 * var[ch] * count / (count - 1)).epsilon(1e-12));
    }
    // Evaluation: the running statistics, and nothing moves.
    bn.eval();
    const std::vector<double> rm = values(bn.running_mean), rv = values(bn.running_var);
    const std::vector<double> ye = values(bn(x));
    for (std::size_t n = 0; n < 4; ++n)
        for (std::size_t ch = 0; ch < 3; ++ch)
            for (std::size_t k = 0; k < per; ++k)
                CHECK(ye[at(n, ch, k)] == doctest::Approx((xv[at(n, ch, k)] - rm[ch]) / std::sqrt(rv[ch] + 1e-5) * wv[ch] + bv[ch]).epsilon(1e-12));
    CHECK(values(bn.running_mean) == rm);
    // By given statistics (plain tensors): the same values as the evaluating layer, bit for bit; w and b optional.
    CHECK(values(kiln::nn::batch_normalization(x, bn.running_mean.clone(), bn.running_var.clone(), bn.w, bn.b)) == ye);
    const std::vector<double> bare = values(kiln::nn::batch_normalization(x, bn.running_mean, bn.running_var));
    CHECK(bare[at(1, 2, 3)] == doctest::Approx((xv[at(1, 2, 3)] - rm[2]) / std::sqrt(rv[2] + 1e-5)).epsilon(1e-12));
    CHECK_THROWS_WITH_AS(kiln::nn::batch_normalization(x, bn.running_mean, kiln::ones({4}, kiln::float64)),
                         "kiln: shape_error in 'nn::batch_normalization': the variance has shape (4,), but the input "
                         "(4, 3, 2, 5) has 3 channels",
                         kiln::shape_error);
    CHECK_THROWS_AS(kiln::nn::batch_normalization(x, bn.running_mean, bn.running_var, kiln::tensor(), kiln::tensor(), -1.0),
                    kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::batch_normalization(x, bn.running_mean.to(kiln::float32), bn.running_var), kiln::dtype_error);

    // Training-mode gradients (through the batch's statistics) against central differences.
    bn.train();
    const kiln::tensor proj = kiln::randn({4, 3, 2, 5}, kiln::float64, g);
    auto objective = [&](const kiln::tensor& xx) {
        kiln::variable m(kiln::zeros({3}, kiln::float64)), v(kiln::ones({3}, kiln::float64));
        return kiln::sum(kiln::nn::batch_norm(xx, m, v, bn.w, bn.b, true) * proj).item<double>();
    };
    kiln::variable m0(kiln::zeros({3}, kiln::float64)), v0(kiln::ones({3}, kiln::float64));
    const std::vector<kiln::tensor> grads = [&] {
        kiln::gradient_tape tape;  // (ended before the traced calls below: a call under a recording tape runs eagerly)
        tape.watch(x);
        return tape.gradient(kiln::sum(kiln::nn::batch_norm(x, m0, v0, bn.w, bn.b, true) * proj), std::vector<kiln::tensor>{x, bn.w, bn.b});
    }();
    for (int t = 0; t < 10; ++t) {
        const std::ptrdiff_t i = (t * 7919) % x.numel();
        kiln::tensor plus = x.clone(), minus = x.clone();
        plus.data<double>()[i] += 1e-6;
        minus.data<double>()[i] -= 1e-6;
        CHECK(grads[0].contiguous().data<double>()[i] == doctest::Approx((objective(plus) - objective(minus)) / 2e-6).epsilon(1e-6));
    }
    CHECK(grads[1].shape() == kiln::dims{3});
    CHECK(grads[2].shape() == kiln::dims{3});
    CHECK(values(m0) != std::vector<double>(3, 0.0));  // (the functional form moved the running mean it was given)

    // Traced training steps compute what eager ones do, assigning the running statistics at every call (one trace);
    // a traced evaluation reads them at every call, so it follows further training without a new trace.
    kiln::nn::batch_norm_layer a(3), b(3);
    auto traced = kiln::function([&](const kiln::tensor& xb) { return b(xb); });
    const kiln::tensor xf = x.to(kiln::float32);
    for (int call = 0; call < 3; ++call) CHECK(kiln::allclose(traced(xf), a(xf), 0, 0));
    CHECK(values(b.running_mean) == values(a.running_mean));
    CHECK(values(b.running_var) == values(a.running_var));
    CHECK(traced.trace_count() == 1);
    b.eval();
    auto evaluate = kiln::function([&](const kiln::tensor& xb) { return b(xb); });
    const std::vector<double> first = values(evaluate(xf));
    b.train();
    (void)b(xf * 3.0f);
    b.eval();
    const std::vector<double> later = values(evaluate(xf));
    CHECK(later != first);
    CHECK(later == values(b(xf)));
    CHECK(evaluate.trace_count() == 1);
    // With a dynamic batch, one trace serves every batch size (the unbiased variance's count - 1 follows the batch).
    kiln::nn::batch_norm_layer c1(3), c2(3);
    auto dynamic = kiln::function([&](const kiln::tensor& xb) { return c2(xb); }, {kiln::spec(kiln::float32, {kiln::dyn, 3, 2, 5})});
    for (std::ptrdiff_t n : {4, 2, 3}) {
        const kiln::tensor xn = xf.slice(0, 0, n);
        CHECK(kiln::allclose(dynamic(xn), c1(xn), 1e-6, 1e-6));
    }
    CHECK(kiln::allclose(c2.running_var, c1.running_var, 1e-6, 1e-7));
    CHECK(dynamic.trace_count() == 1);

    // Bad input.
    CHECK_THROWS_WITH_AS(b(kiln::randn({4, 2}, g)),
                         "kiln: shape_error in 'nn::batch_norm': the running mean has shape (3,), but the input (4, 2) has 2 channels",
                         kiln::shape_error);
    CHECK_THROWS_AS(b(kiln::randn({3}, g)), kiln::shape_error);
    b.train();
    CHECK_THROWS_WITH_AS(b(kiln::randn({1, 3}, g)),
                         "kiln: value_error in 'nn::batch_norm': training needs more than one value per channel, got input (1, 3)",
                         kiln::value_error);
    CHECK_THROWS_AS(b(kiln::arange(6).reshape({2, 3})), kiln::dtype_error);
    CHECK_THROWS_AS(kiln::nn::batch_norm_layer(0), kiln::value_error);
    CHECK_THROWS_AS(kiln::nn::batch_norm(xf, b.running_mean, b.running_var, kiln::tensor(), kiln::tensor(), true, 1.5), kiln::value_error);
    CHECK(kiln::nn::batch_norm_layer(3, 1e-5, 0.1, false).parameters().empty());
    // An activation as a layer of a sequential model (nn.ReLU).
    kiln::nn::sequential net(kiln::nn::batch_norm_layer(3), kiln::nn::activation_layer(kiln::nn::relu));
    const kiln::tensor h = net(xf);
    CHECK(kiln::min(h).item<float>() == 0.0f);
    net.eval();
    CHECK(kiln::allclose(net(xf), kiln::relu(net.layer<kiln::nn::batch_norm_layer>(0)(xf)), 0, 0));
    CHECK(net.parameters().size() == 2);
    CHECK_THROWS_AS(kiln::nn::activation_layer{kiln::nn::activation{}}, kiln::value_error);
}
