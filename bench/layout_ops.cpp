// The layout and indexing ops in eager mode against plain C++ loops that do the same work, in the same run:
// an embedding lookup (index_select of 4,096 rows of 64 float32 from a 10,000-row table), take_along_axis,
// a row sort (sort of 256 rows of 1,024 float32 along the rows), tile (a 512 x 512 float32 matrix tiled 2 x 2)
// and a batched einsum ("bij,bjk->bik", 16 x 64 x 64 float32) against kiln::matmul. A plain program: each pair
// of contenders runs in alternation, and the best of the rounds is reported, with the ratio to its baseline.
//
//     build/bench/bench_layout_ops
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace {

template <class F>
double best_us(F&& f, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        const auto t1 = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    return best;
}

// Runs a and b alternately for `rounds` rounds of `reps` calls each; prints the best time of each and b / a.
template <class A, class B>
void pair(const char* what, const char* base_name, A&& base, const char* name, B&& kiln_fn, int reps = 20, int rounds = 6) {
    double ta = 1e30, tb = 1e30;
    for (int r = 0; r < rounds; ++r) {
        ta = std::min(ta, best_us(base, reps));
        tb = std::min(tb, best_us(kiln_fn, reps));
    }
    std::printf("| %s | %s | %.1f us | %s | %.1f us | %.2fx |\n", what, base_name, ta, name, tb, tb / ta);
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uni(-1, 1);
    std::printf("| work | baseline | time | kiln | time | kiln / baseline |\n|---|---|---:|---|---:|---:|\n");

    {  // Embedding lookup.
        const std::ptrdiff_t rows = 10000, width = 64, n = 4096;
        std::vector<float> table(static_cast<std::size_t>(rows * width));
        for (float& v : table) v = uni(rng);
        std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
        std::uniform_int_distribution<std::int64_t> pick(0, rows - 1);
        for (auto& i : idx) i = pick(rng);
        const kiln::tensor t = kiln::from_vector(table, kiln::dims{rows, width});
        const kiln::tensor it = kiln::from_vector(idx, kiln::dims{n});
        std::vector<float> out(static_cast<std::size_t>(n * width));
        pair(
            "embedding lookup (4,096 rows of 64)", "memcpy per row",
            [&] {
                for (std::ptrdiff_t k = 0; k < n; ++k)
                    std::memcpy(out.data() + k * width, table.data() + idx[static_cast<std::size_t>(k)] * width, width * sizeof(float));
                asm volatile("" : : "r"(out.data()) : "memory");
            },
            "`index_select(t, 0, idx)`",
            [&] {
                kiln::tensor r = kiln::index_select(t, 0, it);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            });
        // Its gradient: the rows of g added back into a zero table (repeated indices add up).
        std::vector<float> gv(static_cast<std::size_t>(n * width));
        for (float& v : gv) v = uni(rng);
        const kiln::tensor g = kiln::from_vector(gv, kiln::dims{n, width});
        std::vector<float> grad(table.size());
        pair(
            "embedding gradient (4,096 rows of 64 into 10,000)", "zero fill + row adds",
            [&] {
                std::fill(grad.begin(), grad.end(), 0.f);
                for (std::ptrdiff_t k = 0; k < n; ++k) {
                    float* to = grad.data() + idx[static_cast<std::size_t>(k)] * width;
                    const float* from = gv.data() + k * width;
                    for (std::ptrdiff_t j = 0; j < width; ++j) to[j] += from[j];
                }
                asm volatile("" : : "r"(grad.data()) : "memory");
            },
            "`op_gradient(\"index_select\", ...)`",
            [&] {
                auto r = kiln::op_gradient("index_select", {t, it}, g, {{"axis", 0}});
                asm volatile("" : : "r"(r[0]->raw_data()) : "memory");
            });
    }
    {  // Row sort.
        const std::ptrdiff_t rows = 256, len = 1024;
        std::vector<float> data(static_cast<std::size_t>(rows * len));
        for (float& v : data) v = uni(rng);
        const kiln::tensor t = kiln::from_vector(data, kiln::dims{rows, len});
        std::vector<float> out(data.size());
        pair(
            "sort 256 rows of 1,024", "copy + std::stable_sort per row",
            [&] {
                std::copy(data.begin(), data.end(), out.begin());
                for (std::ptrdiff_t r = 0; r < rows; ++r) std::stable_sort(out.begin() + r * len, out.begin() + (r + 1) * len);
                asm volatile("" : : "r"(out.data()) : "memory");
            },
            "`sort(t, 1)`",
            [&] {
                kiln::tensor r = kiln::sort(t, 1);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            },
            3, 4);
        // take_along_axis with the sort order: the gather alone.
        const kiln::tensor order = kiln::argsort(t, 1);
        const std::int64_t* op = order.data<const std::int64_t>();
        pair(
            "take_along_axis (256 x 1,024)", "indexed loop",
            [&] {
                for (std::ptrdiff_t r = 0; r < rows; ++r)
                    for (std::ptrdiff_t j = 0; j < len; ++j) out[static_cast<std::size_t>(r * len + j)] = data[static_cast<std::size_t>(r * len + op[r * len + j])];
                asm volatile("" : : "r"(out.data()) : "memory");
            },
            "`take_along_axis(t, order, 1)`",
            [&] {
                kiln::tensor r = kiln::take_along_axis(t, order, 1);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            });
    }
    {  // Tile.
        const std::ptrdiff_t n = 512;
        std::vector<float> data(static_cast<std::size_t>(n * n));
        for (float& v : data) v = uni(rng);
        const kiln::tensor t = kiln::from_vector(data, kiln::dims{n, n});
        std::vector<float> out(data.size() * 4);
        pair(
            "tile 512 x 512 by (2, 2)", "memcpy per row",
            [&] {
                for (std::ptrdiff_t a = 0; a < 2; ++a)
                    for (std::ptrdiff_t i = 0; i < n; ++i)
                        for (std::ptrdiff_t b = 0; b < 2; ++b)
                            std::memcpy(out.data() + ((a * n + i) * 2 + b) * n, data.data() + i * n, n * sizeof(float));
                asm volatile("" : : "r"(out.data()) : "memory");
            },
            "`tile(t, {2, 2})`",
            [&] {
                kiln::tensor r = kiln::tile(t, {2, 2});
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            });
    }
    {  // Batched einsum against the batched matmul.
        const std::ptrdiff_t b = 16, n = 64;
        std::vector<float> x(static_cast<std::size_t>(b * n * n)), y(x.size());
        for (float& v : x) v = uni(rng);
        for (float& v : y) v = uni(rng);
        const kiln::tensor a = kiln::from_vector(x, kiln::dims{b, n, n}), c = kiln::from_vector(y, kiln::dims{b, n, n});
        pair(
            "batched product 16 x 64 x 64", "`matmul(a, c)`",
            [&] {
                kiln::tensor r = kiln::matmul(a, c);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            },
            "`einsum(\"bij,bjk->bik\", a, c)`",
            [&] {
                kiln::tensor r = kiln::einsum("bij,bjk->bik", a, c);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            });
    }
    {  // Dropout (p = 0.5) of 128 Ki float32, below the parallel threshold: its counter-based draw per element against
       // the floor of applying a mask that is already stored (what a framework that keeps its mask pays in backward).
        const std::ptrdiff_t n = 256 * 512;
        std::vector<float> xv(static_cast<std::size_t>(n)), mask(xv.size()), out(xv.size());
        for (float& v : xv) v = uni(rng);
        for (float& m : mask) m = uni(rng) < 0 ? 0.0f : 2.0f;
        const kiln::tensor x = kiln::from_vector(xv, kiln::dims{256, 512});
        kiln::tensor key = kiln::nn::dropout_key();
        pair(
            "dropout, 256 x 512, p = 0.5", "x * stored mask",
            [&] {
                for (std::size_t i = 0; i < out.size(); ++i) out[i] = xv[i] * mask[i];
                asm volatile("" : : "r"(out.data()) : "memory");
            },
            "`nn::dropout(x, 0.5, key)`",
            [&] {
                kiln::tensor r = kiln::nn::dropout(x, 0.5, key);
                asm volatile("" : : "r"(r.raw_data()) : "memory");
            });
    }
    return 0;
}
