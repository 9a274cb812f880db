#pragma once
// Batching with seeded shuffling: rows of the inputs gathered into batches, one shuffle per epoch.
#include <algorithm>
#include <numeric>
#include <vector>

#include "../eager/eager.hpp"

namespace kiln::data {

// Rows `index` of t (along the first dimension), copied into a new tensor.
inline tensor take_rows(const tensor& t, const std::vector<std::ptrdiff_t>& index) {
    if (t.dim() == 0) throw shape_error("kiln::data::take_rows: a scalar has no rows");
    dims shape = t.shape();
    shape[0] = static_cast<std::ptrdiff_t>(index.size());
    tensor out(t.dtype(), shape);
    kiln::detail::dispatch(t.dtype(), [&]<class T>() {
        for (std::size_t i = 0; i < index.size(); ++i) {
            if (index[i] < 0 || index[i] >= t.shape()[0])
                throw value_error("kiln::data::take_rows: row " + std::to_string(index[i]) + " is out of range for shape " +
                                  to_string(t.shape()));
            tensor dst = out.select(0, static_cast<std::ptrdiff_t>(i));
            kiln::detail::run_eager_into(dst, kiln::detail::indexed_leaf<0, T>{}, t.select(0, index[i]));
        }
    });
    return out;
}

struct batch {
    tensor x, y;
};

// Splits (x, y) into batches of `size` rows (the last may be smaller), in a shuffled order when `shuffle`.
inline std::vector<batch> batches(const tensor& x, const tensor& y, std::ptrdiff_t size, bool shuffle,
                                  generator& g = default_generator()) {
    if (size <= 0) throw value_error("kiln::data::batches: the batch size must be positive");
    if (x.dim() == 0 || y.dim() == 0 || x.shape()[0] != y.shape()[0])
        throw shape_error("kiln::data::batches: x " + to_string(x.shape()) + " and y " + to_string(y.shape()) +
                          " must have the same number of rows");
    const std::ptrdiff_t n = x.shape()[0];
    std::vector<std::ptrdiff_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (shuffle)  // Fisher-Yates with kiln's generator: the same order on every platform for a seed
        for (std::ptrdiff_t i = n - 1; i > 0; --i)
            std::swap(order[static_cast<std::size_t>(i)],
                      order[static_cast<std::size_t>(g.next() % static_cast<std::uint64_t>(i + 1))]);
    std::vector<batch> out;
    for (std::ptrdiff_t s = 0; s < n; s += size) {
        const std::vector<std::ptrdiff_t> idx(order.begin() + s, order.begin() + std::min(n, s + size));
        out.push_back({take_rows(x, idx), take_rows(y, idx)});
    }
    return out;
}

}  // namespace kiln::data
