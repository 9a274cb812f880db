#pragma once
// Attention, as PyTorch computes it: scaled_dot_product_attention (torch.nn.functional's) and multi_head_attention
// (nn.MultiheadAttention with batch_first=True). Both are written with the vocabulary's ops (matmul, softmax, where,
// reshape, transpose; a causal mask from cumsum of ones), so the tape differentiates them, kiln::function traces them
// (one trace for every batch and sequence length declared kiln::dyn), kiln::save and the ONNX export write them, and
// every device runs them.
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "layers.hpp"

namespace kiln::nn {

namespace detail_attention {

// The (L, S) causal mask of the device and dtype bool: query i attends to keys j <= i (PyTorch's is_causal, aligned at
// the top left). Made of traced ops, so that its extents follow a dynamic sequence length.
template <int N>
tensor causal_mask(std::ptrdiff_t l, std::ptrdiff_t s, const device& dev) {
    const kiln::detail::dependent_tensor<N> rows = cumsum<N>(ones({l, 1}, dtype::int64, dev), 0, false);
    const kiln::detail::dependent_tensor<N> cols = cumsum<N>(ones({1, s}, dtype::int64, dev), 1, false);
    return less_equal(cols, rows);
}

inline std::string shapes_text(const tensor& q, const tensor& k, const tensor& v) {
    return "query " + to_string(q.shape()) + ", key " + to_string(k.shape()) + " and value " + to_string(v.shape());
}

}  // namespace detail_attention

// softmax(q k^T * scale + mask) v over the last two axes: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev),
// the leading axes broadcast. scale defaults to 1 / sqrt(E). mask, broadcast to (..., L, S): a bool tensor (true:
// the query attends to the key; false: the score is -inf), or a floating one added to the scores (an empty tensor():
// none). causal: query i attends to keys j <= i (not with a mask). A query whose keys are all masked gets NaN, as in
// PyTorch.
template <int N = 0>
tensor scaled_dot_product_attention(const tensor& q, const tensor& k, const tensor& v, const tensor& mask = tensor(),
                                    bool causal = false, std::optional<double> scale = std::nullopt) {
    const char* op = "kiln: shape_error in 'nn::scaled_dot_product_attention': ";
    q.check_valid("nn::scaled_dot_product_attention");
    k.check_valid("nn::scaled_dot_product_attention");
    v.check_valid("nn::scaled_dot_product_attention");
    if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
        throw shape_error(op + detail_attention::shapes_text(q, k, v) + " must each have at least two axes (length, features)");
    const std::ptrdiff_t l = q.shape()[q.dim() - 2], e = q.shape()[q.dim() - 1], s = k.shape()[k.dim() - 2];
    if (k.shape()[k.dim() - 1] != e)
        throw shape_error(op + detail_attention::shapes_text(q, k, v) + ": the query and the key must have the same features");
    if (v.shape()[v.dim() - 2] != s)
        throw shape_error(op + detail_attention::shapes_text(q, k, v) + ": the key and the value must have the same length");
    if (!kiln::detail::is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
        throw dtype_error("kiln: dtype_error in 'nn::scaled_dot_product_attention': the query, key and value must have one "
                          "floating dtype, got " + std::string(name(q.dtype())) + ", " + std::string(name(k.dtype())) +
                          " and " + std::string(name(v.dtype())));
    const bool masked = kiln::detail::given(mask);  // (kiln::tensor(): none)
    if (masked && causal)
        throw value_error("kiln: value_error in 'nn::scaled_dot_product_attention': give a mask or causal = true, not both "
                          "(for both, pass the causal mask combined with yours)");
    if (masked) {
        mask.check_valid("nn::scaled_dot_product_attention");
        const int r = std::max(q.dim(), k.dim());
        bool fits = mask.dim() <= r;
        for (int i = 1; fits && i <= std::min(mask.dim(), 2); ++i) {
            const std::ptrdiff_t want = i == 1 ? s : l, got = mask.shape()[mask.dim() - i];
            fits = got == want || got == 1;
        }
        if (!fits)
            throw shape_error(op + std::string("the mask ") + to_string(mask.shape()) + " does not broadcast to the scores (..., " +
                              std::to_string(l) + ", " + std::to_string(s) + ")");
        if (mask.dtype() != dtype::boolean && mask.dtype() != q.dtype())
            throw dtype_error("kiln: dtype_error in 'nn::scaled_dot_product_attention': the mask must be bool or " +
                              std::string(name(q.dtype())) + " (the scores' dtype), got " + std::string(name(mask.dtype())));
    }
    const double factor = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(std::max<std::ptrdiff_t>(e, 1)));
    const kiln::detail::dependent_tensor<N>& qd = q;
    kiln::detail::dependent_tensor<N> scores = matmul(qd, k.transpose(-2, -1)) * factor;
    const double minus_inf = -std::numeric_limits<double>::infinity();
    if (causal) scores = where(detail_attention::causal_mask<N>(l, s, q.device()), scores, minus_inf);
    else if (masked && mask.dtype() == dtype::boolean) scores = where(mask, scores, minus_inf);
    else if (masked) scores = scores + mask;
    return matmul(softmax<N>(scores, -1), v);
}

// nn.MultiheadAttention (batch_first): inputs (N, L, E); the query, key and value projected by w_q, w_k, w_v (E, E)
// and biases, split into num_heads heads of E / num_heads features, attended per head (scaled_dot_product_attention),
// joined and projected by w_o. The weights are Glorot uniform (as PyTorch's in_proj_weight), the biases zeros. As a
// layer of a sequential model it is self-attention (query, key and value all x), causal if made so.
template <int N = 0>
class basic_multi_head_attention : public module {
public:
    basic_multi_head_attention(std::ptrdiff_t embed_dim, std::ptrdiff_t num_heads, bool causal = false,
                               generator& g = default_generator(), dtype d = dtype::float32)
        : w_q(glorot_uniform(checked(embed_dim, num_heads), embed_dim, g, d)), w_k(glorot_uniform(embed_dim, embed_dim, g, d)),
          w_v(glorot_uniform(embed_dim, embed_dim, g, d)), w_o(glorot_uniform(embed_dim, embed_dim, g, d)),
          b_q(zeros({embed_dim}, d)), b_k(zeros({embed_dim}, d)), b_v(zeros({embed_dim}, d)), b_o(zeros({embed_dim}, d)),
          heads_(num_heads), causal_(causal) {}

    using module::operator();
    // Attention of query (N, L, E) over key and value (N, S, E): (N, L, E). mask broadcasts to (N, heads, L, S) (a
    // (L, S) one is shared by every sample and head; a key padding mask is (N, 1, 1, S)), as in
    // scaled_dot_product_attention.
    tensor operator()(const tensor& query, const tensor& key, const tensor& value, const tensor& mask = tensor(), bool causal = false) {
        return attend(query, key, value, mask, causal);
    }
    tensor forward(const tensor& x) override { return attend(x, x, x, tensor(), causal_); }
    std::vector<variable*> parameters() override { return {&w_q, &w_k, &w_v, &w_o, &b_q, &b_k, &b_v, &b_o}; }
    std::ptrdiff_t num_heads() const noexcept { return heads_; }

    variable w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o;

private:
    static std::ptrdiff_t checked(std::ptrdiff_t e, std::ptrdiff_t h) {
        if (e < 1 || h < 1 || e % h != 0)
            throw value_error("kiln: value_error in 'nn::multi_head_attention': " + std::to_string(h) +
                              " heads must divide the embedding's " + std::to_string(e) + " features (both positive)");
        return e;
    }
    // (N, T, E) -> (N, heads, T, E / heads).
    tensor split(const tensor& x) const {
        const std::ptrdiff_t e = w_q.shape()[0];
        return x.reshape({x.shape()[0], x.shape()[1], heads_, e / heads_}).transpose(1, 2);
    }
    tensor attend(const tensor& query, const tensor& key, const tensor& value, const tensor& mask, bool causal) {
        const std::ptrdiff_t e = w_q.shape()[0];
        for (const tensor* t : {&query, &key, &value})
            if (t->dim() != 3 || t->shape()[2] != e)
                throw shape_error("kiln: shape_error in 'nn::multi_head_attention': the query, key and value must be (batch, "
                                  "length, " + std::to_string(e) + "), got " + to_string(query.shape()) + ", " +
                                  to_string(key.shape()) + " and " + to_string(value.shape()));
        if (key.shape()[0] != query.shape()[0] || value.shape()[0] != query.shape()[0] || key.shape()[1] != value.shape()[1])
            throw shape_error("kiln: shape_error in 'nn::multi_head_attention': the query " + to_string(query.shape()) +
                              ", key " + to_string(key.shape()) + " and value " + to_string(value.shape()) +
                              " must share the batch, and the key and value their length");
        using dependent = kiln::detail::dependent_tensor<N>;  // (kernels compiled where a layer is used)
        const dependent& q0 = query;
        const dependent& k0 = key;
        const dependent& v0 = value;
        const tensor q = split(matmul(q0, w_q) + b_q), k = split(matmul(k0, w_k) + b_k), v = split(matmul(v0, w_v) + b_v);
        const dependent o = scaled_dot_product_attention<N>(q, k, v, mask, causal).transpose(1, 2).reshape(query.shape());
        return matmul(o, w_o) + b_o;
    }
    std::ptrdiff_t heads_;
    bool causal_;
};
using multi_head_attention = basic_multi_head_attention<>;

}  // namespace kiln::nn
