#pragma once
// Shape ops: tile, repeat, split, pad, outer and two-operand einsum. Each is recorded on gradient tapes as a
// composition of recorded ops (views, concatenations, products).
//
// (Eager-mode functions, as those of eager/indexing.hpp.)
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

// Einstein summation over two operands ("ij,jk->ik", "bij,bjk->bik", "i,i->", "ij->ji" needs one operand and is
// not covered): letters in both operands and the output are batch dimensions, letters in both but not the output
// are contracted, letters of one operand missing from the output are summed first. Computed with one (batched)
// matmul; gradients come from the recorded views, sums and matmul. An output spec is required ("->").
template <int = 0>
tensor einsum(const std::string& spec, const tensor& a, const tensor& b) {
    auto fail = [&](const std::string& why) -> tensor {
        throw value_error("kiln: value_error in 'einsum': '" + spec + "': " + why);
    };
    const auto comma = spec.find(','), arrow = spec.find("->");
    if (comma == std::string::npos || arrow == std::string::npos || arrow < comma) return fail("write \"ab,bc->ac\"");
    const std::string sa = spec.substr(0, comma), sb = spec.substr(comma + 1, arrow - comma - 1),
                      so = spec.substr(arrow + 2);
    auto check = [&](const std::string& s, const tensor* t) {
        std::string seen;
        for (char c : s) {
            if (c < 'a' || c > 'z') return fail("subscripts are lowercase letters");
            if (seen.find(c) != std::string::npos) return fail(std::string("'") + c + "' repeats within one operand");
            seen += c;
        }
        if (t && static_cast<int>(s.size()) != t->dim())
            return fail("'" + s + "' has " + std::to_string(s.size()) + " subscripts for a tensor of rank " +
                        std::to_string(t->dim()));
        return tensor{};
    };
    check(sa, &a);
    check(sb, &b);
    check(so, nullptr);
    std::map<char, std::ptrdiff_t> extent;
    auto note = [&](const std::string& s, const tensor& t) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            const auto n = t.shape()[static_cast<int>(i)];
            auto [it, fresh] = extent.emplace(s[i], n);
            if (!fresh && it->second != n)
                fail(std::string("'") + s[i] + "' is " + std::to_string(it->second) + " in one operand and " +
                     std::to_string(n) + " in the other");
        }
    };
    note(sa, a);
    note(sb, b);
    for (char c : so)
        if (!extent.count(c)) return fail(std::string("output subscript '") + c + "' is in no operand");
    auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
    // Sum away what only one operand has and the output does not.
    auto reduce_own = [&](const tensor& t, const std::string& s, const std::string& other, std::string& kept) {
        std::vector<int> axes;
        kept.clear();
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (!has(other, s[i]) && !has(so, s[i])) axes.push_back(static_cast<int>(i));
            else kept += s[i];
        }
        return axes.empty() ? t : sum(t, axes);
    };
    std::string ka, kb;
    const tensor ta = reduce_own(a, sa, sb, ka), tb = reduce_own(b, sb, sa, kb);
    std::string batch, contract, left, right;
    for (char c : ka) {
        if (has(kb, c)) (has(so, c) ? batch : contract) += c;
        else left += c;
    }
    for (char c : kb)
        if (!has(ka, c)) right += c;
    auto arrange = [&](const tensor& t, const std::string& s, const std::string& order) {
        if (order.empty()) return t;
        std::array<int, max_rank> perm{};
        for (std::size_t i = 0; i < order.size(); ++i) perm[i] = static_cast<int>(s.find(order[i]));
        return t.permute_array(perm, static_cast<int>(order.size()));
    };
    auto count = [&](const std::string& s) {
        std::ptrdiff_t n = 1;
        for (char c : s) n *= extent[c];
        return n;
    };
    const std::ptrdiff_t B = count(batch), M = count(left), K = count(contract), N = count(right);
    const tensor am = arrange(ta, ka, batch + left + contract).reshape({B, M, K});
    const tensor bm = arrange(tb, kb, batch + contract + right).reshape({B, K, N});
    const tensor prod = matmul(am, bm);  // (B, M, N)
    const std::string have = batch + left + right;
    dims full_shape;
    full_shape.rank = static_cast<int>(have.size());
    for (std::size_t i = 0; i < have.size(); ++i) full_shape[static_cast<int>(i)] = extent[have[i]];
    const tensor r = prod.reshape(full_shape);
    if (so.size() != have.size()) return fail("every output subscript must appear once");
    return arrange(r, have, so);
}

// softmax and log_softmax along an axis (kiln::nn's, reachable from kiln:: as in PyTorch's torch.softmax).

}  // namespace kiln
