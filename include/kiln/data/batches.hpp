#pragma once
// Batching with seeded shuffling: rows of the inputs gathered into batches, one shuffle per epoch.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "../eager/eager.hpp"

namespace kiln::data {

// Rows `index` of t (along the first dimension), copied into a new tensor.
inline tensor take_rows(const tensor& t, const std::vector<std::ptrdiff_t>& index) {
    if (t.dim() == 0) throw shape_error("kiln: shape_error in 'data::take_rows': a scalar has no rows");
    dims shape = t.shape();
    shape[0] = static_cast<std::ptrdiff_t>(index.size());
    tensor out(t.dtype(), shape, t.device());
    for (std::size_t i = 0; i < index.size(); ++i) {
        if (index[i] < 0 || index[i] >= t.shape()[0])
            throw value_error("kiln: value_error in 'data::take_rows': row " + std::to_string(index[i]) + " is out of range for shape " +
                              to_string(t.shape()));
        tensor dst = out.select(0, static_cast<std::ptrdiff_t>(i));
        kiln::detail::copy_into(dst, t.select(0, index[i]));
    }
    return out;
}

struct batch {
    tensor x, y;
    std::ptrdiff_t global_rows = 0;  // the rows of the global batch this one is a shard of (x's rows when unsharded)
};

// Data parallelism: process `index` of `count` takes the index-th of `count` disjoint, contiguous slices of each
// global batch (rows [n * index / count, n * (index + 1) / count) of its n rows), every process drawing the same
// shuffled order from the same seed. A last batch of fewer rows than processes is dropped on every process alike;
// other uneven slices differ by at most one row, so average gradients weighted by rows
// (kiln::distributed::all_reduce_mean(grads, rows)) to get the global batch's.
struct shard {
    int index = 0;
    int count = 1;
};

namespace detail {
inline void check_shard(const shard& s, std::ptrdiff_t batch_size, const char* entry) {
    if (s.count < 1 || s.index < 0 || s.index >= s.count)
        throw value_error(std::string("kiln: value_error in '") + entry + "': shard " + std::to_string(s.index) + " of " +
                          std::to_string(s.count) + " does not exist (0 <= index < count)");
    if (batch_size < s.count)
        throw value_error(std::string("kiln: value_error in '") + entry + "': a global batch of " + std::to_string(batch_size) +
                          " rows cannot be split over " + std::to_string(s.count) + " processes");
}
// x and y are rows along their first axis, as many of each.
inline void check_rows(const tensor& x, const tensor& y, const char* entry) {
    if (x.dim() == 0 || y.dim() == 0)
        throw shape_error(std::string("kiln: shape_error in '") + entry + "': x " + to_string(x.shape()) + " and y " +
                          to_string(y.shape()) + " must have a first axis of rows (a rank-0 tensor has none)");
    if (x.shape()[0] != y.shape()[0])
        throw shape_error(std::string("kiln: shape_error in '") + entry + "': x " + to_string(x.shape()) + " and y " +
                          to_string(y.shape()) + " must have the same number of rows");
}
// [first, last) of the shard's rows within a batch of n rows.
inline std::pair<std::ptrdiff_t, std::ptrdiff_t> shard_rows(const shard& s, std::ptrdiff_t n) {
    return {n * s.index / s.count, n * (s.index + 1) / s.count};
}
}  // namespace detail

// Splits (x, y) into batches of `size` rows (the last may be smaller), in a shuffled order when `shuffle`; with a
// shard, each batch's slice for that process (see kiln::data::shard).
inline std::vector<batch> batches(const tensor& x, const tensor& y, std::ptrdiff_t size, bool shuffle,
                                  generator& g = default_generator(), shard part = {}) {
    if (size <= 0) throw value_error("kiln: value_error in 'data::batches': the batch size must be positive");
    detail::check_shard(part, size, "data::batches");
    detail::check_rows(x, y, "data::batches");
    const std::ptrdiff_t n = x.shape()[0];
    std::vector<std::ptrdiff_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (shuffle)  // Fisher-Yates with kiln's generator: the same order on every platform for a seed
        for (std::ptrdiff_t i = n - 1; i > 0; --i)
            std::swap(order[static_cast<std::size_t>(i)],
                      order[static_cast<std::size_t>(g.next() % static_cast<std::uint64_t>(i + 1))]);
    std::vector<batch> out;
    for (std::ptrdiff_t s = 0; s < n; s += size) {
        const std::ptrdiff_t rows = std::min(n, s + size) - s;
        if (rows < part.count) break;  // (too few rows to give every process one: dropped everywhere)
        const auto [lo, hi] = detail::shard_rows(part, rows);
        const std::vector<std::ptrdiff_t> idx(order.begin() + s + lo, order.begin() + s + hi);
        out.push_back({take_rows(x, idx), take_rows(y, idx), rows});
    }
    return out;
}

// A lazy loader: each pass over it is one epoch, reshuffled from its own generator (seeded once, so the sequence of
// epochs is the same on every run and platform), and each batch is gathered into storage that the loader reuses,
// so an epoch allocates nothing after the first batch. The last partial batch is kept (a batch of fewer rows) or
// dropped with `drop_last`.
//
//   kiln::data::loader data(x, y, 32, {.seed = 7});
//   for (int epoch = 0; epoch < 5; ++epoch)
//       for (const kiln::data::batch& b : data) train(b.x, b.y);
//
// A batch's tensors are valid until the loader gathers the next one (clone() them to keep them); x and y are
// shared with the caller, not copied. x and y may live on a GPU (both on one device): each batch is then gathered
// there and lives there.
template <class Unused = void>
class basic_loader {
public:
    struct options {
        bool shuffle = true;
        bool drop_last = false;
        std::uint64_t seed = 0;
        kiln::data::shard shard = {};  // this process's slice of each global batch (data parallelism)
    };

    basic_loader(const tensor& x, const tensor& y, std::ptrdiff_t batch_size)
        : basic_loader(x, y, batch_size, options{}) {}
    basic_loader(const tensor& x, const tensor& y, std::ptrdiff_t batch_size, options o)
        : x_(x), y_(y), size_(batch_size), opt_(o), gen_(o.seed) {
        if (batch_size <= 0) throw value_error("kiln: value_error in 'data::loader': the batch size must be positive, got " +
                                               std::to_string(batch_size));
        detail::check_rows(x, y, "data::loader");
        if (!(x.device() == y.device()))
            throw device_error("kiln: device_error in 'data::loader': x lives on " + to_string(x.device()) + " and y on " +
                               to_string(y.device()) + "; move both to one device (.to(device))");
        detail::check_shard(o.shard, batch_size, "data::loader");
        rows_ = x.shape()[0];
        order_.resize(static_cast<std::size_t>(rows_));
    }

    // Batches per epoch (with a shard, a last batch of fewer rows than processes is dropped).
    std::ptrdiff_t size() const noexcept {
        const std::ptrdiff_t full = rows_ / size_, rest = rows_ % size_;
        return full + (!opt_.drop_last && rest > 0 && rest >= opt_.shard.count ? 1 : 0);
    }
    std::ptrdiff_t rows() const noexcept { return rows_; }
    // How many epochs have begun.
    int epochs() const noexcept { return epoch_; }

    class iterator {
    public:
        using value_type = batch;
        using difference_type = std::ptrdiff_t;
        const batch& operator*() const { return owner_->current_; }
        const batch* operator->() const { return &owner_->current_; }
        iterator& operator++() {
            ++index_;
            if (index_ < owner_->size()) owner_->gather(index_);
            return *this;
        }
        bool operator==(const iterator& o) const noexcept { return index_ == o.index_; }

    private:
        friend class basic_loader;
        iterator(basic_loader* l, std::ptrdiff_t i) : owner_(l), index_(i) {}
        basic_loader* owner_;
        std::ptrdiff_t index_;
    };

    // Starts an epoch: a new order (when shuffling) and the first batch.
    iterator begin() {
        std::iota(order_.begin(), order_.end(), std::ptrdiff_t{0});
        if (opt_.shuffle)
            for (std::ptrdiff_t i = rows_ - 1; i > 0; --i)
                std::swap(order_[static_cast<std::size_t>(i)],
                          order_[static_cast<std::size_t>(gen_.next() % static_cast<std::uint64_t>(i + 1))]);
        ++epoch_;
        if (size() > 0) gather(0);
        return iterator(this, 0);
    }
    iterator end() { return iterator(this, size()); }

private:
    static void copy_rows(const tensor& src, tensor& dst, const std::ptrdiff_t* rows, std::ptrdiff_t n) {
        if (src.device().type != device_type::cpu) {  // data on a GPU: the rows are gathered there (index_select)
            tensor index(dtype::int64, dims{n});
            std::copy(rows, rows + n, index.data<std::int64_t>());
            kiln::detail::copy_into(dst, index_select<std::is_void_v<Unused> ? 0 : 0>(src, 0, index.to(src.device())));
            return;
        }
        const std::size_t row_bytes = static_cast<std::size_t>(src.numel() / std::max<std::ptrdiff_t>(src.shape()[0], 1)) *
                                      src.itemsize();
        if (src.is_contiguous()) {
            const auto* s = static_cast<const std::byte*>(src.raw_data());
            auto* d = static_cast<std::byte*>(dst.raw_data());
            for (std::ptrdiff_t i = 0; i < n; ++i)
                std::memcpy(d + static_cast<std::size_t>(i) * row_bytes, s + static_cast<std::size_t>(rows[i]) * row_bytes,
                            row_bytes);
        } else {
            for (std::ptrdiff_t i = 0; i < n; ++i) dst.select(0, i).copy_(src.select(0, rows[i]));
        }
    }

    void gather(std::ptrdiff_t b) {
        const std::ptrdiff_t global_first = b * size_, global_n = std::min(size_, rows_ - global_first);
        const auto [lo, hi] = detail::shard_rows(opt_.shard, global_n);
        const std::ptrdiff_t first = global_first + lo, n = hi - lo;
        current_.global_rows = global_n;
        auto fill = [&](const tensor& src, tensor& buf, tensor& view) {
            if (buf.numel() == 0 && src.numel() > 0) {
                dims s = src.shape();
                s[0] = size_;
                buf = tensor(src.dtype(), s, src.device());
            }
            view = n == size_ ? buf : buf.slice(0, 0, n);
            copy_rows(src, view, order_.data() + first, n);
        };
        fill(x_, xbuf_, current_.x);
        fill(y_, ybuf_, current_.y);
    }

    tensor x_, y_;
    std::ptrdiff_t size_, rows_ = 0;
    options opt_;
    generator gen_;
    std::vector<std::ptrdiff_t> order_;
    tensor xbuf_, ybuf_;
    batch current_;
    int epoch_ = 0;
};

// (A class template only so that its kernels are compiled in the programs that use it.)
using loader = basic_loader<>;

}  // namespace kiln::data
