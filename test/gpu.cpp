// Eager tensors on kiln's GPU device (kiln::cuda), checked against the same ops on the CPU.
// Built twice by the test command: with g++ on Thrust's OpenMP device system (the emulated device, host memory: runs
// on every machine) and with nvcc -arch=sm_90 through test/gpu_cuda.cpp (runs where a GPU exists and exits with 77,
// "skipped", where none does).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_main.hpp"

#include <kiln/eager/eager.hpp>
#include <kiln/nn/layers.hpp>
#include <kiln/nn/optim.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

std::vector<double> host_values(const kiln::tensor& t) {
    const kiln::tensor c = t.to(kiln::cpu).contiguous().to(kiln::float64);
    const double* p = c.data<const double>();
    return std::vector<double>(p, p + c.numel());
}

// a and b (either device) have one shape and agree to `rel` relative (exactly when rel is 0).
void check_close(const kiln::tensor& a, const kiln::tensor& b, double rel = 0) {
    REQUIRE(a.shape() == b.shape());
    CHECK(a.dtype() == b.dtype());
    const auto x = host_values(a), y = host_values(b);
    for (std::size_t i = 0; i < x.size(); ++i) {
        CAPTURE(i);
        if (std::isnan(y[i])) {
            CHECK(std::isnan(x[i]));
        } else if (rel == 0) {
            CHECK(x[i] == y[i]);
        } else {
            CHECK(std::abs(x[i] - y[i]) <= rel * (1 + std::abs(y[i])));
        }
    }
}

kiln::tensor seq(kiln::dims shape, double scale = 0.37) {
    const std::ptrdiff_t n = shape.numel();
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::ptrdiff_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(std::sin(scale * static_cast<double>(i + 1)) * 3);
    return kiln::from_vector(v, shape);
}

}  // namespace

TEST_CASE("tensors move to the device and back with their values, dtype and shape") {
    CHECK(kiln::cuda_available());
    CHECK(kiln::device_count() >= 1);
    const kiln::tensor h = seq({3, 4});
    const kiln::tensor d = h.to(kiln::cuda);
    CHECK(d.device() == kiln::cuda);
    CHECK(!d.is_cpu());
    CHECK(d.shape() == kiln::dims{3, 4});
    CHECK(d.to(kiln::cuda).shares_storage_with(d));  // already there: the same tensor
    const kiln::tensor back = d.to(kiln::cpu);
    CHECK(back.device() == kiln::cpu);
    check_close(back, h);
    // A view (transposed, sliced) moves as its values.
    check_close(h.transpose(0, 1).slice(0, 1, 4).to(kiln::cuda), h.transpose(0, 1).slice(0, 1, 4));
    // item() and at() copy one element to the host.
    CHECK(d.at<float>({1, 2}) == h.at<float>({1, 2}));
    CHECK(kiln::sum(d).item<double>() == doctest::Approx(kiln::sum(h).item<double>()).epsilon(1e-6));
    // Printing copies to the host and names the device, as PyTorch does.
    const std::string s = kiln::to_string(kiln::from_values<float>({1, 2}, {2}).to(kiln::cuda));
    CHECK(s.find("device='cuda:0'") != std::string::npos);
    CHECK(s.find("1.") != std::string::npos);
}

TEST_CASE("factories fill on the device; random tensors draw the CPU generator's numbers") {
    const kiln::tensor z = kiln::zeros({2, 3}, kiln::float32, kiln::cuda);
    CHECK(z.device() == kiln::cuda);
    check_close(z, kiln::zeros({2, 3}));
    check_close(kiln::full({4}, 2.5, kiln::float64, kiln::cuda), kiln::full({4}, 2.5, kiln::float64));
    check_close(kiln::ones_like(z), kiln::ones({2, 3}));
    check_close(kiln::arange(0, 5, 1, kiln::int64, kiln::cuda), kiln::arange(0, 5));
    check_close(kiln::linspace(0, 1, 5, kiln::float32, kiln::cuda), kiln::linspace(0, 1, 5));
    const kiln::tensor fv = kiln::from_values<float>({1, 2, 3, 4}, {2, 2}, kiln::cuda);
    CHECK(fv.device() == kiln::cuda);
    CHECK(fv.at<float>({1, 0}) == 3.0f);
    CHECK(kiln::ones_like(z).device() == kiln::cuda);
    kiln::manual_seed(7);
    const kiln::tensor a = kiln::randn({5}, kiln::float32, kiln::cuda);
    kiln::manual_seed(7);
    const kiln::tensor b = kiln::randn({5});
    check_close(a, b);
}

TEST_CASE("elementwise ops with broadcasting, strided views and type promotion agree with the CPU") {
    const kiln::tensor x = seq({4, 5}), y = seq({5}, 0.91), c = seq({4, 1}, 1.3);
    const kiln::tensor dx = x.to(kiln::cuda), dy = y.to(kiln::cuda), dc = c.to(kiln::cuda);
    check_close(dx + dy, x + y);
    check_close(dx * dc - dy, x * c - y);
    check_close(kiln::relu(dx * dy + dc) * 2.0f + dy, kiln::relu(x * y + c) * 2.0f + y, 1e-6);
    check_close(kiln::exp(dx) / (dy + 4.0f), kiln::exp(x) / (y + 4.0f), 1e-6);
    check_close(kiln::tanh(dx.transpose(0, 1)), kiln::tanh(x.transpose(0, 1)), 1e-6);  // a strided operand
    check_close(dx.slice(1, 0, 5, 2) * 3.0f, x.slice(1, 0, 5, 2) * 3.0f);
    check_close(kiln::where(dx > 0.0f, dx, dy), kiln::where(x > 0.0f, x, y));
    // int32 + float32 promotes to float32; comparisons give bool.
    const kiln::tensor i = kiln::from_values<std::int32_t>({1, 2, 3, 4, 5}, {5});
    check_close(i.to(kiln::cuda) + dy, i + y);
    CHECK((i.to(kiln::cuda) + dy).dtype() == kiln::float32);
    check_close(dx > dy, x > y);
    // casts run on the device.
    check_close(dx.to(kiln::int32), x.to(kiln::int32));
    check_close(dx.to(kiln::float64), x.to(kiln::float64));
    // A rank-0 CPU tensor joins a device op (PyTorch's rule); the result stays on the device.
    const kiln::tensor two = 2.0f;
    CHECK((dx * two).device() == kiln::cuda);
    check_close(dx * two, x * two);
    // In place, and assignment into a device view.
    kiln::tensor w = dx.clone();
    w += dy;
    check_close(w, x + y);
    kiln::tensor v = dx.clone();
    v.slice(0, 1, 3) = dy;
    kiln::tensor hv = x.clone();
    hv.slice(0, 1, 3) = y;
    check_close(v, hv);
}

TEST_CASE("integer and bool ops, rank-0 and empty tensors on the device") {
    const kiln::tensor a = kiln::from_values<std::int64_t>({-7, -3, 0, 5, 9}, {5});
    const kiln::tensor b = kiln::from_values<std::int64_t>({2, -2, 3, 0, 4}, {5});
    const kiln::tensor da = a.to(kiln::cuda), db = b.to(kiln::cuda);
    check_close(kiln::floor_divide(da, db), kiln::floor_divide(a, b));  // Python's rules; x // 0 is 0
    check_close(kiln::remainder(da, db), kiln::remainder(a, b));
    check_close(da / db, a / b);  // true division: float32
    check_close(kiln::logical_and(da > 0l, db > 0l), kiln::logical_and(a > 0l, b > 0l));
    // A rank-0 device tensor: a number that stays on the device.
    const kiln::tensor s = kiln::sum(da);
    CHECK(s.dim() == 0);
    CHECK(s.device() == kiln::cuda);
    CHECK(s.item<std::int64_t>() == 4);
    check_close(da * s, a * kiln::sum(a));
    // Empty tensors: nothing launched, shapes right.
    const kiln::tensor e = kiln::zeros({0, 4}, kiln::float32, kiln::cuda);
    CHECK((e + 1.0f).shape() == kiln::dims{0, 4});
    CHECK(kiln::matmul(e, kiln::ones({4, 2}, kiln::float32, kiln::cuda)).shape() == kiln::dims{0, 2});
    check_close(kiln::matmul(kiln::zeros({3, 0}, kiln::float32, kiln::cuda), kiln::zeros({0, 2}, kiln::float32, kiln::cuda)),
                kiln::zeros({3, 2}));
}

TEST_CASE("files and xtensor views read device tensors through the host") {
    const kiln::tensor x = seq({2, 3});
    const std::string path = "test_gpu_roundtrip.npy";
    kiln::save_npy(path, x.to(kiln::cuda).transpose(0, 1));
    check_close(kiln::load_npy(path), x.transpose(0, 1));
    std::remove(path.c_str());
    try {
        (void)kiln::as_xtensor<float>(x.to(kiln::cuda));
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("xtensor views need host memory") != std::string::npos);
    }
}

TEST_CASE("gradients through gathers, sorts and layout ops on the device agree with the CPU") {
    auto grads = [](const kiln::device& dev) {
        const kiln::tensor x = seq({4, 5}).to(dev);
        const kiln::tensor idx = kiln::from_values<std::int64_t>({0, 2, 2, 3}, {4}).to(dev);
        kiln::gradient_tape tape;
        tape.watch(x);
        const kiln::tensor y = kiln::sum(kiln::index_select(x, 0, idx) * 2.0f) + kiln::sum(kiln::sort(x, 1) * seq({5}, 0.3).to(dev)) +
                               kiln::sum(kiln::tile(x, {1, 2})) + kiln::sum(kiln::cumsum(x, 0) * x);
        return tape.gradient(y, x);
    };
    check_close(grads(kiln::cuda), grads(kiln::cpu), 1e-5);
}

TEST_CASE("operands on different devices are refused with both devices named") {
    const kiln::tensor h = seq({3}), d = seq({3}).to(kiln::cuda);
    try {
        (void)(h + d);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        const std::string m = e.what();
        CHECK(m.find("'add'") != std::string::npos);
        CHECK(m.find("cpu") != std::string::npos);
        CHECK(m.find("cuda:0") != std::string::npos);
    }
    CHECK_THROWS_AS(kiln::matmul(seq({2, 3}), seq({3, 2}).to(kiln::cuda)), kiln::device_error);
    CHECK_THROWS_AS(kiln::concat({h, d}), kiln::device_error);
    kiln::tensor hh = h.clone();
    CHECK_THROWS_AS(hh += d, kiln::device_error);
    try {
        (void)h.to(kiln::device{kiln::device_type::cuda, 99});
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("cuda:99 does not exist") != std::string::npos);
    }
}

TEST_CASE("reductions and scans agree with the CPU") {
    const kiln::tensor x = seq({6, 7, 5});
    const kiln::tensor d = x.to(kiln::cuda);
    check_close(kiln::sum(d), kiln::sum(x), 1e-6);
    check_close(kiln::sum(d, {1}), kiln::sum(x, {1}), 1e-6);
    check_close(kiln::mean(d, {0, 2}, true), kiln::mean(x, {0, 2}, true), 1e-6);
    check_close(kiln::max(d, {2}), kiln::max(x, {2}));
    check_close(kiln::min(d.transpose(0, 2), {1}), kiln::min(x.transpose(0, 2), {1}));
    check_close(kiln::prod(d.slice(2, 0, 2), {2}), kiln::prod(x.slice(2, 0, 2), {2}), 1e-6);
    check_close(kiln::argmax(d, 1), kiln::argmax(x, 1));
    check_close(kiln::argmin(d, 0), kiln::argmin(x, 0));
    check_close(kiln::cumsum(d, 1), kiln::cumsum(x, 1), 1e-6);
    check_close(kiln::cumprod(d.slice(2, 0, 3), 2), kiln::cumprod(x.slice(2, 0, 3), 2), 1e-6);
    // Integer sums accumulate in int64; a NaN wins a maximum, and argmax finds the first of equal values.
    const kiln::tensor i = kiln::from_values<std::int32_t>({2000000000, 2000000000, 5}, {3});
    check_close(kiln::sum(i.to(kiln::cuda)), kiln::sum(i));
    const kiln::tensor n = kiln::from_values<float>({1, NAN, 3, 3}, {4});
    check_close(kiln::max(n.to(kiln::cuda)), kiln::max(n));
    check_close(kiln::argmax(kiln::from_values<float>({1, 3, 3, 2}, {4}).to(kiln::cuda), 0),
                kiln::from_values<std::int64_t>({1}, {}).reshape({}));
    check_close(kiln::sum(kiln::zeros({0, 3}, kiln::float32, kiln::cuda), {0}), kiln::zeros({3}));
}

TEST_CASE("matmul on the device: layouts, vectors, batches and integers") {
    const kiln::tensor a = seq({5, 3}), b = seq({3, 4}, 0.53);
    const kiln::tensor da = a.to(kiln::cuda), db = b.to(kiln::cuda);
    check_close(kiln::matmul(da, db), kiln::matmul(a, b), 1e-5);
    // Transposed operands are read in place; a slice with steps in both strides is copied first.
    check_close(kiln::matmul(db.transpose(0, 1), da.transpose(0, 1)), kiln::matmul(b.transpose(0, 1), a.transpose(0, 1)), 1e-5);
    const kiln::tensor big = seq({8, 8});
    const kiln::tensor hs = big.slice(0, 0, 8, 2).slice(1, 0, 8, 2), ds = big.to(kiln::cuda).slice(0, 0, 8, 2).slice(1, 0, 8, 2);
    check_close(kiln::matmul(ds, ds), kiln::matmul(hs, hs), 1e-5);
    // Vectors and batches (broadcast over the batch).
    const kiln::tensor v = seq({3}, 0.7);
    check_close(kiln::matmul(da, v.to(kiln::cuda)), kiln::matmul(a, v), 1e-5);
    check_close(kiln::matmul(v.to(kiln::cuda), db), kiln::matmul(v, b), 1e-5);
    const kiln::tensor ba = seq({2, 5, 3}, 0.21);
    check_close(kiln::matmul(ba.to(kiln::cuda), db), kiln::matmul(ba, b), 1e-5);
    // Batches in one strided-batched product (cuBLAS's gemmStridedBatched; one pass of the reference kernel on the
    // emulated device) when each operand's batches are one stride apart: both batched, two batch axes, a matrix
    // broadcast over the batches (stride 0), transposed matrices in each batch, a batch of one kept as an axis.
    const kiln::tensor bb = seq({2, 3, 4}, 0.37), b4a = seq({2, 3, 5, 3}, 0.11), b4b = seq({2, 3, 3, 4}, 0.29);
    check_close(kiln::matmul(ba.to(kiln::cuda), bb.to(kiln::cuda)), kiln::matmul(ba, bb), 1e-5);
    check_close(kiln::matmul(b4a.to(kiln::cuda), b4b.to(kiln::cuda)), kiln::matmul(b4a, b4b), 1e-5);
    check_close(kiln::matmul(da, bb.to(kiln::cuda)), kiln::matmul(a, bb), 1e-5);
    check_close(kiln::matmul(bb.to(kiln::cuda).transpose(1, 2), ba.to(kiln::cuda).transpose(1, 2)),
                kiln::matmul(bb.transpose(1, 2), ba.transpose(1, 2)), 1e-5);
    check_close(kiln::matmul(seq({1, 5, 3}).to(kiln::cuda), db), kiln::matmul(seq({1, 5, 3}), b), 1e-5);
    const kiln::tensor moved = seq({5, 2, 3}, 0.17).permute({1, 0, 2});  // (2, 5, 3): batches 3 apart, rows 6
    check_close(kiln::matmul(seq({5, 2, 3}, 0.17).to(kiln::cuda).permute({1, 0, 2}), bb.to(kiln::cuda)), kiln::matmul(moved, bb), 1e-5);
    // Batches that are not one stride apart (broadcast along one of two batch axes) and an operand that must be
    // copied to row-major first: batch by batch.
    const kiln::tensor b1 = seq({1, 3, 3, 4}, 0.43);
    check_close(kiln::matmul(b4a.to(kiln::cuda), b1.to(kiln::cuda)), kiln::matmul(b4a, b1), 1e-5);
    const kiln::tensor gapped = seq({2, 6, 8}, 0.19).slice(1, 0, 6, 2).slice(2, 0, 8, 2);  // (2, 3, 4), no unit stride
    check_close(kiln::matmul(ba.to(kiln::cuda), seq({2, 6, 8}, 0.19).to(kiln::cuda).slice(1, 0, 6, 2).slice(2, 0, 8, 2)),
                kiln::matmul(ba, gapped), 1e-5);
    const kiln::tensor ia = kiln::from_values<std::int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
    check_close(kiln::matmul(ia.to(kiln::cuda), ia.transpose(0, 1).to(kiln::cuda)), kiln::matmul(ia, ia.transpose(0, 1)));
}

TEST_CASE("layout, gather and sort ops agree with the CPU; bad indices are reported") {
    const kiln::tensor x = seq({4, 6});
    const kiln::tensor d = x.to(kiln::cuda);
    check_close(kiln::flip(d, {1}) + 0.0f, kiln::flip(x, {1}) + 0.0f);
    check_close(kiln::tile(d, {2, 1}), kiln::tile(x, {2, 1}));
    check_close(kiln::pad(d, {{1, 0}, {0, 2}}, 9.0), kiln::pad(x, {{1, 0}, {0, 2}}, 9.0));
    check_close(kiln::sort(d, 1), kiln::sort(x, 1));
    check_close(kiln::argsort(d, 0, true), kiln::argsort(x, 0, true));
    const kiln::tensor idx = kiln::from_values<std::int64_t>({3, 0, -1}, {3});
    check_close(kiln::index_select(d, 0, idx.to(kiln::cuda)), kiln::index_select(x, 0, idx));
    const kiln::tensor along = kiln::argsort(x, 1);
    check_close(kiln::take_along_axis(d, along.to(kiln::cuda), 1), kiln::take_along_axis(x, along, 1));
    check_close(kiln::concat({d, d.slice(0, 0, 2)}, 0), kiln::concat({x, x.slice(0, 0, 2)}, 0));
    check_close(kiln::stack({d, d}, 1), kiln::stack({x, x}, 1));
    check_close(d[kiln::from_values<std::int64_t>({1, 1}, {2}).to(kiln::cuda)], x[kiln::from_values<std::int64_t>({1, 1}, {2})]);
    check_close(kiln::masked_select(d, (d > 0.0f)), kiln::masked_select(x, x > 0.0f));
    // The mask's positions are found on the device; a broadcast mask, an empty selection and a rank-0 host mask.
    const kiln::tensor row = kiln::from_values<bool>({true, false, false, true, true, false}, {6});
    check_close(kiln::masked_select(d, row.to(kiln::cuda)), kiln::masked_select(x, row));
    check_close(kiln::masked_select(d, d > 100.0f), kiln::masked_select(x, x > 100.0f));
    check_close(kiln::masked_select(d, kiln::tensor(true)), kiln::masked_select(x, kiln::tensor(true)));
    // scatter_add on the device (atomic adds), with repeated and negative indices, and a promoted dtype.
    const kiln::tensor at = kiln::from_values<std::int64_t>({0, 3, 3, -1, 1, 0}, {1, 6}).broadcast_to({4, 6}).contiguous();
    const kiln::tensor src = seq({4, 6}, 0.21);
    check_close(kiln::scatter_add(d, 1, at.to(kiln::cuda), src.to(kiln::cuda)), kiln::scatter_add(x, 1, at, src), 1e-6);
    const kiln::tensor xi = kiln::arange(0, 24).reshape({4, 6});
    check_close(kiln::scatter_add(xi.to(kiln::cuda), 1, at.to(kiln::cuda), src.to(kiln::cuda)), kiln::scatter_add(xi, 1, at, src),
                1e-6);
    CHECK_THROWS_AS(kiln::scatter_add(d, 1, kiln::full({4, 1}, 9.0, kiln::int64, kiln::cuda), d.slice(1, 0, 1)), kiln::value_error);
    try {
        (void)kiln::index_select(d, 0, kiln::from_values<std::int64_t>({1, 7}, {2}).to(kiln::cuda));
        FAIL("expected a value_error");
    } catch (const kiln::value_error& e) {
        CHECK(std::string(e.what()).find("index 7 is out of range for a dimension of size 4") != std::string::npos);
    }
}

TEST_CASE("the gradient tape runs on device tensors and agrees with the CPU") {
    // A small MLP's loss and gradients: matmul, broadcasting add, relu, mean, and their gradients on the device.
    auto loss_and_grads = [](const kiln::device& dev) {
        const kiln::tensor x = seq({8, 3}, 0.29).to(dev), y = seq({8, 1}, 0.77).to(dev);
        kiln::variable w1(seq({3, 5}, 0.41).to(dev)), b1(kiln::zeros({5}, kiln::float32, dev));
        kiln::variable w2(seq({5, 1}, 0.13).to(dev));
        kiln::gradient_tape tape;
        const kiln::tensor h = kiln::relu(kiln::matmul(x, w1) + b1);
        const kiln::tensor d = kiln::matmul(h, w2) - y;
        const kiln::tensor loss = kiln::mean(d * d);
        auto g = tape.gradient(loss, {w1, b1, w2});
        for (const auto& t : g) CHECK(t.device() == dev);
        return std::make_pair(loss, g);
    };
    const auto [lc, gc] = loss_and_grads(kiln::cpu);
    const auto [lg, gg] = loss_and_grads(kiln::cuda);
    check_close(lg, lc, 1e-5);
    for (std::size_t i = 0; i < gc.size(); ++i) check_close(gg[i], gc[i], 1e-5);
    // Gradients of masked_select and scatter_add on the device.
    auto mask_grads = [](const kiln::device& dev) {
        kiln::variable x(seq({3, 4}, 0.5).to(dev)), src(seq({3, 2}, 0.3).to(dev));
        const kiln::tensor at = kiln::from_values<std::int64_t>({1, 1, 0, 3, 2, 2}, {3, 2}).to(dev);
        kiln::gradient_tape tape;
        const kiln::tensor picked = kiln::masked_select(x, x > 0.0f);
        const kiln::tensor added = kiln::scatter_add(x, 1, at, src);
        const kiln::tensor loss = kiln::sum(picked * picked) + kiln::sum(added * added);
        return tape.gradient(loss, {x, src});
    };
    const auto mc = mask_grads(kiln::cpu), mg = mask_grads(kiln::cuda);
    for (std::size_t i = 0; i < mc.size(); ++i) {
        CHECK(mg[i].device() == kiln::cuda);
        check_close(mg[i], mc[i], 1e-5);
    }
    // A gradient through a device move returns to the source's device.
    const kiln::tensor h = seq({3});
    kiln::gradient_tape tape;
    tape.watch(h);
    const kiln::tensor s = kiln::sum(h.to(kiln::cuda) * 2.0f);
    const kiln::tensor g = tape.gradient(s, h);
    CHECK(g.device() == kiln::cpu);
    check_close(g, kiln::full({3}, 2.0));
}

TEST_CASE("conv2d and the pools run on device tensors, with their gradients, as on the CPU") {
    auto run = [](const kiln::device& dev) {
        kiln::variable w(seq({4, 1, 3, 3}, 0.37).to(dev)), b(seq({4}, 0.11).to(dev));
        const kiln::tensor x = seq({2, 2, 9, 9}, 0.23).to(dev);
        const kiln::nn::conv2d_options o{.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2};
        kiln::gradient_tape tape;
        const kiln::tensor y = kiln::nn::conv2d(x, w, b, o);
        const kiln::tensor loss = kiln::sum(kiln::nn::max_pool2d(y, {2, 2}, {.padding = {1, 1}})) +
                                  kiln::sum(kiln::nn::avg_pool2d(y, {3, 3}, {.padding = {1, 1}, .count_include_pad = false}));
        auto g = tape.gradient(loss, {w, b});
        CHECK(y.device() == dev);
        for (const auto& t : g) CHECK(t.device() == dev);
        return std::make_tuple(y, loss, g);
    };
    const auto [yc, lc, gc] = run(kiln::cpu);
    const auto [yg, lg, gg] = run(kiln::cuda);
    check_close(yg, yc, 1e-5);
    check_close(lg, lc, 1e-5);
    for (std::size_t i = 0; i < gc.size(); ++i) check_close(gg[i], gc[i], 1e-5);
}

TEST_CASE("conv_transpose2d runs on device tensors, with its gradients, as on the CPU") {
    auto run = [](const kiln::device& dev) {
        kiln::variable w(seq({4, 3, 3, 2}, 0.29).to(dev)), b(seq({6}, 0.13).to(dev));
        const kiln::tensor x = seq({2, 4, 5, 4}, 0.31).to(dev);
        const kiln::nn::conv_transpose2d_options o{.stride = {2, 3}, .padding = {1, 0}, .output_padding = {1, 2}, .dilation = {1, 2}, .groups = 2};
        kiln::gradient_tape tape;
        const kiln::tensor y = kiln::nn::conv_transpose2d(x, w, b, o);
        const kiln::tensor loss = kiln::sum(y * y);
        auto g = tape.gradient(loss, {w, b});
        CHECK(y.device() == dev);
        CHECK(y.shape() == kiln::dims{2, 6, 10, 14});
        for (const auto& t : g) CHECK(t.device() == dev);
        return std::make_tuple(y, loss, g);
    };
    const auto [yc, lc, gc] = run(kiln::cpu);
    const auto [yg, lg, gg] = run(kiln::cuda);
    check_close(yg, yc, 1e-5);
    check_close(lg, lc, 1e-5);
    for (std::size_t i = 0; i < gc.size(); ++i) check_close(gg[i], gc[i], 1e-5);
}

TEST_CASE("nn::embedding moved to the device looks rows up and adds its gradient back as on the CPU") {
    auto run = [](const kiln::device& dev) {
        kiln::generator g(3);
        kiln::nn::embedding emb(6, 4, g);
        emb.to(dev);
        const kiln::tensor ids = kiln::from_values<std::int64_t>({5, 0, 5, 2, 1, 5}, {2, 3}).to(dev);
        kiln::gradient_tape tape;
        const kiln::tensor y = emb(ids);
        const kiln::tensor loss = kiln::sum(y * seq({2, 3, 4}, 0.3).to(dev));
        const kiln::tensor gw = tape.gradient(loss, emb.w);
        CHECK(y.device() == dev);
        CHECK(gw.device() == dev);
        CHECK_THROWS_AS(emb(kiln::from_values<std::int64_t>({6}, {1}).to(dev)), kiln::value_error);
        return std::make_tuple(y, gw);
    };
    const auto [yc, gc] = run(kiln::cpu);
    const auto [yg, gg] = run(kiln::cuda);
    check_close(yg, yc, 0);
    check_close(gg, gc, 1e-6);
}

TEST_CASE("dropout on the device drops the elements the CPU drops, with the key on the device, and its gradient too") {
    auto run = [](const kiln::device& dev) {
        kiln::generator g(19);
        kiln::nn::sequential model(kiln::nn::dense(6, 8, kiln::nn::relu, g), kiln::nn::dropout_layer(0.4, g));
        model.to(dev);
        CHECK(model.layer<kiln::nn::dropout_layer>(1).key.device() == dev);
        const kiln::tensor x = seq({5, 6}, 0.37).to(dev);
        std::vector<kiln::tensor> out;
        for (int call = 0; call < 2; ++call) {
            kiln::gradient_tape tape;
            const kiln::tensor y = model(x);
            const kiln::tensor gw = tape.gradient(kiln::sum(y * seq({5, 8}, 0.2).to(dev)), model.layer<kiln::nn::dense>(0).w);
            CHECK(y.device() == dev);
            out.push_back(y);
            out.push_back(gw);
        }
        // A transposed (strided) input drops by its row-major positions, as its contiguous copy does.
        kiln::tensor k1 = kiln::nn::dropout_key(g, dev), k2 = k1.clone();
        const kiln::tensor t = seq({7, 3}, 0.5).to(dev).transpose(0, 1);
        check_close(kiln::nn::dropout(t, 0.5, k1), kiln::nn::dropout(t.contiguous(), 0.5, k2), 0);
        out.push_back(kiln::nn::dropout(t, 0.5, k1));
        return out;
    };
    const std::vector<kiln::tensor> c = run(kiln::cpu), d = run(kiln::cuda);
    REQUIRE(c.size() == d.size());
    for (std::size_t i = 0; i < c.size(); ++i) check_close(d[i], c[i], i % 2 ? 1e-6 : 0);
    CHECK_FALSE(kiln::allclose(c[0].to(kiln::cpu), c[2].to(kiln::cpu), 0, 0));  // each call drops other elements
}

TEST_CASE("a model moved to the device trains with Adam (one kernel per parameter) as on the CPU") {
    auto train = [](const kiln::device& dev) {
        kiln::generator g(11);
        kiln::nn::sequential model(kiln::nn::dense(3, 8, kiln::nn::relu, g), kiln::nn::dense(8, 1, kiln::nn::identity, g));
        model.to(dev);
        for (kiln::variable* p : model.parameters()) CHECK(p->device() == dev);
        kiln::optim::adam opt(model.parameters(), 0.05);
        const kiln::tensor x = seq({16, 3}, 0.43).to(dev);
        const kiln::tensor y = kiln::sum(x * x, {1}, true);
        std::vector<float> losses;
        for (int step = 0; step < 20; ++step) {
            kiln::tensor loss;
            std::vector<kiln::tensor> grads;
            {
                kiln::gradient_tape tape;
                loss = kiln::nn::mse(model(x), y);
                grads = tape.gradient(loss, model.parameters());
            }
            opt.step(grads);
            losses.push_back(loss.item<float>());
        }
        return losses;
    };
    const auto cpu = train(kiln::cpu), gpu = train(kiln::cuda);
    REQUIRE(cpu.size() == gpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i) {
        CAPTURE(i);
        CHECK(gpu[i] == doctest::Approx(cpu[i]).epsilon(1e-4));
    }
    CHECK(gpu.back() < 0.5f * gpu.front());
    // Gradients on another device than the parameters are refused.
    kiln::variable w(kiln::zeros({2}, kiln::float32, kiln::cuda));
    kiln::optim::sgd sgd({&w}, 0.1);
    CHECK_THROWS_AS(sgd.step({kiln::ones({2})}), kiln::device_error);
}

TEST_CASE("memory statistics count device allocations") {
    const kiln::gpu_memory_stats before = kiln::cuda_memory_stats();
    {
        const kiln::tensor big = kiln::zeros({1 << 20}, kiln::float32, kiln::cuda);
        const kiln::gpu_memory_stats during = kiln::cuda_memory_stats();
        CHECK(during.allocated_bytes >= before.allocated_bytes + (std::size_t{4} << 20));
        CHECK(during.peak_bytes >= during.allocated_bytes);
    }
    kiln::synchronize();
    CHECK(kiln::cuda_memory_stats().allocated_bytes == before.allocated_bytes);
    kiln::empty_cache();
}

#ifndef KILN_GPU_TEST_NO_MAIN  // (test/gpu_cuda.cpp builds this file with test/gpu_modes.cpp and its own main)
int main(int argc, char** argv) { return kiln_test::gpu_main("test_gpu", argc, argv); }
#endif
