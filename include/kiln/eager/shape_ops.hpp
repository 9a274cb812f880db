#pragma once
// Shape ops: tile, repeat, split, pad, outer and two-operand einsum. tile, repeat, pad and einsum are the
// mode-neutral ops of ops/layout.hpp, ops/pad.hpp and ops/einsum.hpp, run through eager mode's seam (their gradient rules are the
// ops' own); split is views and outer a product of views, recorded as such.
//
// (Eager-mode functions, as those of eager/indexing.hpp.)
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../ops/einsum.hpp"
#include "../ops/pad.hpp"
#include "indexing.hpp"

namespace kiln {

// ---- shape ops --------------------------------------------------------------------------------------------------

// x repeated reps[i] times along each dimension (numpy.tile): reps longer than x's rank adds leading dimensions.
// The op is ops::tile (ops/layout.hpp): its gradient sums g over the repetitions.
template <int N = 0>
tensor tile(const tensor& x, const std::vector<std::ptrdiff_t>& reps) {
    return detail::apply_structural<ops::tile, N>(ops::make_tile_attrs(reps), x);
}

// Each element repeated `repeats` times along `axis` (numpy.repeat; the flattened tensor when axis is omitted).
template <int N = 0>
tensor repeat(const tensor& x, std::ptrdiff_t repeats, std::optional<int> axis = std::nullopt) {
    if (!axis) return repeat<N>(x.reshape({-1}), repeats, 0);
    return detail::apply_structural<ops::repeat, N>(ops::repeat_attrs{repeats, *axis}, x);
}

// Views of consecutive parts of x along `axis`: `sections` equal parts (which must divide the extent) ...
template <int = 0>
std::vector<tensor> split(const tensor& x, std::ptrdiff_t sections, int axis = 0) {
    const int ax = detail::checked_axis(x, axis, "split");
    if (sections <= 0 || x.shape()[ax] % sections != 0)
        throw value_error("kiln: value_error in 'split': " + std::to_string(sections) +
                          " sections do not divide an extent of " + std::to_string(x.shape()[ax]));
    std::vector<tensor> out;
    const std::ptrdiff_t part = x.shape()[ax] / sections;
    for (std::ptrdiff_t k = 0; k < sections; ++k) out.push_back(x.slice(ax, k * part, (k + 1) * part));
    return out;
}
// ... or parts of the given sizes (which must add up to the extent), as torch.split with a list.
template <int = 0>
std::vector<tensor> split(const tensor& x, const std::vector<std::ptrdiff_t>& sizes, int axis) {
    const int ax = detail::checked_axis(x, axis, "split");
    std::ptrdiff_t total = 0;
    for (std::ptrdiff_t s : sizes) {
        if (s < 0) throw value_error("kiln: value_error in 'split': sizes must be non-negative");
        total += s;
    }
    if (total != x.shape()[ax])
        throw value_error("kiln: value_error in 'split': the sizes add up to " + std::to_string(total) +
                          ", not the extent " + std::to_string(x.shape()[ax]));
    std::vector<tensor> out;
    std::ptrdiff_t at = 0;
    for (std::ptrdiff_t s : sizes) out.push_back(x.slice(ax, at, at + s)), at += s;
    return out;
}

// x with `widths[i] = {before, after}` elements of `value` added around dimension i (numpy.pad, constant mode);
// fewer widths than dimensions pad the leading ones. The op is ops::pad: its gradient is the interior of g.
template <int N = 0>
tensor pad(const tensor& x, const std::vector<std::pair<std::ptrdiff_t, std::ptrdiff_t>>& widths, double value = 0) {
    return detail::apply_structural<ops::pad, N>(ops::make_pad_attrs(widths, value), x);
}

// The outer product of two tensors, flattened: out[i][j] = a[i] * b[j].
template <int N = 0>
tensor outer(const tensor& a, const tensor& b) {
    const detail::dependent_tensor<N> x = a.reshape({-1}).unsqueeze(1);
    return x * b.reshape({-1}).unsqueeze(0);
}

// Einstein summation over two operands ("ij,jk->ik", "bij,bjk->bik", "i,i->", "i,j->ij"; one operand, as
// "ij->ji", is not covered): letters in both operands and the output are batch dimensions, letters in both but not
// the output are contracted, letters of one operand missing from the output are summed first. The op is
// ops::einsum (ops/einsum.hpp), graph mode's kiln::einsum<"ij,jk->ik"> too: one batched matrix product, and its
// gradient is an einsum per operand. The operands are promoted to one dtype first.
template <int N = 0>
tensor einsum(const std::string& spec, const tensor& a, const tensor& b) {
    const ops::einsum_attrs at = ops::make_einsum_attrs(spec);
    a.check_valid("einsum");
    b.check_valid("einsum");
    const dtype d = detail::promote(a.dtype(), b.dtype());
    return detail::apply_structural<ops::einsum, N>(at, a.to(d), b.to(d));
}

// softmax and log_softmax along an axis (kiln::nn's, reachable from kiln:: as in PyTorch's torch.softmax).

}  // namespace kiln
