#pragma once
// Recurrent layers, as PyTorch computes them: lstm_cell and gru_cell (torch.nn.LSTMCell and GRUCell), and the
// multi-layer lstm and gru over (batch, length, features) sequences (nn.LSTM and nn.GRU with batch_first=True).
// They are written with the vocabulary's ops (matmul, slices, sigmoid, tanh, stack), so the tape differentiates them
// through time, kiln::function traces them (the time loop unrolled: a dynamic batch shares one trace, and each
// sequence length has its own), kiln::save and the ONNX export write them as their parts, and every device runs them.
// The input's projection is one matmul over the whole sequence per layer; each step adds the hidden state's.
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layers.hpp"

namespace kiln::nn {

namespace detail_recurrent {

inline std::string shape_list(std::initializer_list<const tensor*> ts) {
    std::string s;
    for (const tensor* t : ts) s += (s.empty() ? "" : ", ") + to_string(t->shape());
    return s;
}

// A cell's operands: x (batch, input), h (batch, hidden), w_ih (gates * hidden, input), w_hh (gates * hidden,
// hidden), each bias (gates * hidden,) or empty; one floating dtype.
inline void check_cell(const char* op, std::ptrdiff_t gates, const tensor& x, const tensor& h, const tensor& w_ih, const tensor& w_hh,
                       const tensor& b_ih, const tensor& b_hh) {
    const std::string name = std::string("nn::") + op;
    for (const tensor* t : {&x, &h, &w_ih, &w_hh, &b_ih, &b_hh}) t->check_valid(name.c_str());
    const bool fits = x.dim() == 2 && h.dim() == 2 && w_ih.dim() == 2 && w_hh.dim() == 2 && h.shape()[0] == x.shape()[0] &&
                      w_ih.shape()[0] == gates * h.shape()[1] && w_ih.shape()[1] == x.shape()[1] &&
                      w_hh.shape()[0] == gates * h.shape()[1] && w_hh.shape()[1] == h.shape()[1] &&
                      (!kiln::detail::given(b_ih) || (b_ih.dim() == 1 && b_ih.shape()[0] == gates * h.shape()[1])) &&
                      (!kiln::detail::given(b_hh) || (b_hh.dim() == 1 && b_hh.shape()[0] == gates * h.shape()[1]));
    if (!fits)
        throw shape_error("kiln: shape_error in '" + name + "': x (batch, input), h (batch, hidden), w_ih (" + std::to_string(gates) +
                          " * hidden, input), w_hh (" + std::to_string(gates) + " * hidden, hidden) and biases (" + std::to_string(gates) +
                          " * hidden,) do not fit: got " + shape_list({&x, &h, &w_ih, &w_hh}) +
                          (kiln::detail::given(b_ih) ? ", b_ih " + to_string(b_ih.shape()) : std::string()) +
                          (kiln::detail::given(b_hh) ? ", b_hh " + to_string(b_hh.shape()) : std::string()));
    for (const tensor* t : {&x, &h, &w_ih, &w_hh, &b_ih, &b_hh})
        if (kiln::detail::given(*t) && t->dtype() != w_ih.dtype())
            throw dtype_error("kiln: dtype_error in '" + name + "': the operands must have one dtype, the weights' " +
                              std::string(kiln::name(w_ih.dtype())) + ", got " + std::string(kiln::name(t->dtype())));
    if (!kiln::detail::is_floating(w_ih.dtype()))
        throw dtype_error("kiln: dtype_error in '" + name + "': the operands must be floating, got " + std::string(kiln::name(w_ih.dtype())));
}

// x w^T (+ b): the projection of a (..., in) tensor by a (out, in) weight.
template <int N>
tensor project(const tensor& x, const tensor& w, const tensor& b) {
    const kiln::detail::dependent_tensor<N> y = kiln::matmul(x, w.transpose(0, 1));
    return kiln::detail::given(b) ? tensor(y + b) : tensor(y);
}

// One LSTM step from the input's projection xi (batch, 4 * hidden): (h', c').
template <int N>
std::pair<tensor, tensor> lstm_step(const tensor& xi, const tensor& h, const tensor& c, const tensor& w_hh, const tensor& b_hh) {
    const std::ptrdiff_t n = h.shape()[1];
    const kiln::detail::dependent_tensor<N> gates = xi + project<N>(h, w_hh, b_hh);
    const kiln::detail::dependent_tensor<N> i = sigmoid(gates.slice(1, 0, n)), f = sigmoid(gates.slice(1, n, 2 * n));
    const kiln::detail::dependent_tensor<N> g = tanh(gates.slice(1, 2 * n, 3 * n)), o = sigmoid(gates.slice(1, 3 * n, 4 * n));
    const kiln::detail::dependent_tensor<N> c2 = f * c + i * g;
    return {o * tanh(c2), c2};
}

// One GRU step from the input's projection xi (batch, 3 * hidden): h'.
template <int N>
tensor gru_step(const tensor& xi, const tensor& h, const tensor& w_hh, const tensor& b_hh) {
    const std::ptrdiff_t n = h.shape()[1];
    const kiln::detail::dependent_tensor<N> hh = project<N>(h, w_hh, b_hh);
    const kiln::detail::dependent_tensor<N> x = xi;
    const kiln::detail::dependent_tensor<N> r = sigmoid(x.slice(1, 0, n) + hh.slice(1, 0, n));
    const kiln::detail::dependent_tensor<N> z = sigmoid(x.slice(1, n, 2 * n) + hh.slice(1, n, 2 * n));
    const kiln::detail::dependent_tensor<N> cand = tanh(x.slice(1, 2 * n, 3 * n) + r * hh.slice(1, 2 * n, 3 * n));
    return (1.0 - z) * cand + z * h;
}

}  // namespace detail_recurrent

// PyTorch's LSTMCell: gates = x w_ih^T + b_ih + h w_hh^T + b_hh, split into i, f, g, o (in that order, each hidden
// wide); c' = sigmoid(f) * c + sigmoid(i) * tanh(g) and h' = sigmoid(o) * tanh(c'). Returns (h', c'). The biases may
// be left out (kiln::tensor()).
template <int N = 0>
std::pair<tensor, tensor> lstm_cell(const tensor& x, const tensor& h, const tensor& c, const tensor& w_ih, const tensor& w_hh,
                                    const tensor& b_ih = tensor(), const tensor& b_hh = tensor()) {
    detail_recurrent::check_cell("lstm_cell", 4, x, h, w_ih, w_hh, b_ih, b_hh);
    if (!(c.shape() == h.shape()))
        throw shape_error("kiln: shape_error in 'nn::lstm_cell': the cell state c " + to_string(c.shape()) + " must have h's shape " +
                          to_string(h.shape()));
    return detail_recurrent::lstm_step<N>(detail_recurrent::project<N>(x, w_ih, b_ih), h, c, w_hh, b_hh);
}

// PyTorch's GRUCell: r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr), z likewise with the second rows, n = tanh(x W_in^T
// + b_in + r * (h W_hn^T + b_hn)), h' = (1 - z) * n + z * h; w_ih and w_hh stack the rows of r, z and n.
template <int N = 0>
tensor gru_cell(const tensor& x, const tensor& h, const tensor& w_ih, const tensor& w_hh, const tensor& b_ih = tensor(),
                const tensor& b_hh = tensor()) {
    detail_recurrent::check_cell("gru_cell", 3, x, h, w_ih, w_hh, b_ih, b_hh);
    return detail_recurrent::gru_step<N>(detail_recurrent::project<N>(x, w_ih, b_ih), h, w_hh, b_hh);
}

// What an lstm or gru gives: the outputs of the last layer at every step (batch, length, hidden), and each layer's
// last hidden state (num_layers, batch, hidden); for an LSTM also its last cell state c (the same shape; empty for a
// GRU).
struct recurrent_result {
    tensor output, h, c;
};

// A multi-layer LSTM (Lstm) or GRU over (batch, length, input_size) sequences, PyTorch's nn.LSTM and nn.GRU with
// batch_first=True: layer l has w_ih[l] (gates * hidden, in), w_hh[l] (gates * hidden, hidden) and biases b_ih[l],
// b_hh[l] (gates * hidden,), all uniform in [-1 / sqrt(hidden), 1 / sqrt(hidden)] as PyTorch initializes them; layer
// 0 reads the input, each next layer the outputs of the one before.
template <bool Lstm, int N = 0>
class basic_recurrent : public module {
public:
    static constexpr std::ptrdiff_t gates = Lstm ? 4 : 3;
    static constexpr const char* op = Lstm ? "nn::lstm" : "nn::gru";

    basic_recurrent(std::ptrdiff_t input_size, std::ptrdiff_t hidden_size, std::ptrdiff_t num_layers = 1,
                    generator& g = default_generator(), dtype d = dtype::float32) {
        if (input_size < 1 || hidden_size < 1 || num_layers < 1)
            throw value_error(std::string("kiln: value_error in '") + op + "': input_size " + std::to_string(input_size) +
                              ", hidden_size " + std::to_string(hidden_size) + " and num_layers " + std::to_string(num_layers) +
                              " must be positive");
        if (!kiln::detail::is_floating(d))
            throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the parameters must be floating, got " +
                              std::string(kiln::name(d)));
        const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
        for (std::ptrdiff_t l = 0; l < num_layers; ++l) {
            const std::ptrdiff_t in = l == 0 ? input_size : hidden_size;
            w_ih.emplace_back(uniform({gates * hidden_size, in}, -k, k, d, g));
            w_hh.emplace_back(uniform({gates * hidden_size, hidden_size}, -k, k, d, g));
            b_ih.emplace_back(uniform({gates * hidden_size}, -k, k, d, g));
            b_hh.emplace_back(uniform({gates * hidden_size}, -k, k, d, g));
        }
    }
    // (The parameters are addressed by pointer: a copy or a move would leave them behind.)
    basic_recurrent(const basic_recurrent&) = delete;
    basic_recurrent& operator=(const basic_recurrent&) = delete;

    using result = recurrent_result;

    using module::operator();
    // x (batch, length, input_size); h0 (and, for an LSTM, c0): (num_layers, batch, hidden), zeros if left out.
    result operator()(const tensor& x, const tensor& h0, const tensor& c0 = tensor()) { return run(x, h0, c0); }
    result run(const tensor& x, const tensor& h0 = tensor(), const tensor& c0 = tensor()) {
        check_input(x, h0, c0);
        const std::ptrdiff_t batch = x.shape()[0], length = x.shape()[1], hidden = hidden_size();
        std::vector<tensor> last_h, last_c;
        tensor seq = x;
        for (std::size_t l = 0; l < w_ih.size(); ++l) {
            const int li = static_cast<int>(l);
            tensor h = kiln::detail::given(h0) ? h0.select(0, li) : zeros({batch, hidden}, x.dtype(), x.device());
            tensor c;
            if constexpr (Lstm) c = kiln::detail::given(c0) ? c0.select(0, li) : zeros({batch, hidden}, x.dtype(), x.device());
            // The input's projection for every step at once: (batch, length, gates * hidden).
            const tensor xi = detail_recurrent::project<N>(seq, w_ih[l], b_ih[l]);
            std::vector<tensor> outs;
            outs.reserve(static_cast<std::size_t>(length));
            for (std::ptrdiff_t t = 0; t < length; ++t) {
                if constexpr (Lstm) {
                    std::tie(h, c) = detail_recurrent::lstm_step<N>(xi.select(1, t), h, c, w_hh[l], b_hh[l]);
                } else {
                    h = detail_recurrent::gru_step<N>(xi.select(1, t), h, w_hh[l], b_hh[l]);
                }
                outs.push_back(h);
            }
            seq = stack(outs, 1);
            last_h.push_back(h);
            if constexpr (Lstm) last_c.push_back(c);
        }
        result r;
        r.output = seq;
        r.h = stack(last_h, 0);
        if constexpr (Lstm) r.c = stack(last_c, 0);
        return r;
    }
    tensor forward(const tensor& x) override { return run(x).output; }
    std::vector<variable*> parameters() override {
        std::vector<variable*> p;
        for (std::size_t l = 0; l < w_ih.size(); ++l)
            for (variable* v : {&w_ih[l], &w_hh[l], &b_ih[l], &b_hh[l]}) p.push_back(v);
        return p;
    }

    std::ptrdiff_t input_size() const { return w_ih[0].shape()[1]; }
    std::ptrdiff_t hidden_size() const { return w_hh[0].shape()[1]; }
    std::ptrdiff_t num_layers() const { return static_cast<std::ptrdiff_t>(w_ih.size()); }

    std::vector<variable> w_ih, w_hh, b_ih, b_hh;

private:
    void check_input(const tensor& x, const tensor& h0, const tensor& c0) const {
        for (const tensor* t : {&x, &h0, &c0}) t->check_valid(op);
        if (x.dim() != 3 || x.shape()[2] != input_size() || x.shape()[1] < 1)
            throw shape_error(std::string("kiln: shape_error in '") + op + "': the input must be (batch, length, " +
                              std::to_string(input_size()) + ") with a length of at least 1, got " + to_string(x.shape()));
        if (x.dtype() != w_ih[0].dtype())
            throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the input is " + std::string(kiln::name(x.dtype())) +
                              ", the parameters " + std::string(kiln::name(w_ih[0].dtype())));
        const dims state{num_layers(), x.shape()[0], hidden_size()};
        if (!Lstm && kiln::detail::given(c0))
            throw value_error("kiln: value_error in 'nn::gru': a GRU has no cell state (c0)");
        for (const tensor* t : {&h0, &c0}) {
            if (!kiln::detail::given(*t)) continue;
            const char* which = t == &h0 ? "h0" : "c0";
            if (!(t->shape() == state))
                throw shape_error(std::string("kiln: shape_error in '") + op + "': the initial state " + which +
                                  " must be (num_layers, batch, hidden) = " + to_string(state) + ", got " + to_string(t->shape()));
            if (t->dtype() != x.dtype())
                throw dtype_error(std::string("kiln: dtype_error in '") + op + "': the initial state " + which + " is " +
                                  std::string(kiln::name(t->dtype())) + ", the input " + std::string(kiln::name(x.dtype())));
        }
    }
};
using lstm = basic_recurrent<true>;
using gru = basic_recurrent<false>;

}  // namespace kiln::nn
