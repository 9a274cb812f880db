// Graph mode (kiln::run, run_into, kiln::session) and traced functions on kiln's GPU device, against the same on the
// CPU, and their device errors. Built twice by the test command, as test/gpu.cpp: with g++ on Thrust's OpenMP device
// system (the emulated device: runs everywhere) and with nvcc -arch=sm_90 through test/gpu_cuda.cpp (runs where a GPU
// exists; exit 77 elsewhere).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "gpu_main.hpp"

#include <kiln/io.hpp>
#include <kiln/kiln.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace kiln::literals;

namespace {
// Every element of a host container against a host tensor.
template <class C>
void same_values(const C& got, const kiln::tensor& want, double tol) {
    const kiln::tensor w = want.to(kiln::float64).contiguous();
    REQUIRE(static_cast<std::ptrdiff_t>(got.size()) == w.numel());
    const double* q = w.data<double>();
    std::size_t k = 0;
    for (auto v : got) {
        if (tol == 0) CHECK(static_cast<double>(v) == q[k]);
        else CHECK(static_cast<double>(v) == doctest::Approx(q[k]).epsilon(tol).scale(1.0));
        ++k;
    }
}
// Two host tensors of one shape, element by element.
void same_tensor(const kiln::tensor& got, const kiln::tensor& want, double tol) {
    REQUIRE(got.device() == kiln::cpu);
    REQUIRE(got.shape() == want.shape());
    const kiln::tensor g = got.to(kiln::float64).contiguous();
    std::vector<double> v(g.data<double>(), g.data<double>() + g.numel());
    same_values(v, want, tol);
}
}  // namespace

TEST_CASE("a traced function runs on the device where its arguments live") {
    kiln::generator gen(4);
    const kiln::tensor xc = kiln::randn({6, 5}, kiln::float32, gen);
    const kiln::tensor xd = xc.to(kiln::cuda);
    auto f = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor h = kiln::exp(x * 0.5f) - 1.0f;
        return std::make_tuple(kiln::sum(h * h, {1}), kiln::matmul(x.transpose(0, 1), h));
    });
    const auto [sc, mc] = f(xc);
    const auto [sd, md] = f(xd);
    CHECK(sd.device() == kiln::cuda);
    CHECK(md.device() == kiln::cuda);
    same_tensor(sd.to(kiln::cpu), sc, 1e-5);
    same_tensor(md.to(kiln::cpu), mc, 1e-5);
    CHECK(f.trace_count() == 2);  // the device is part of the signature
    (void)f(xd);
    CHECK(f.trace_count() == 2);

    // A whole training step with a tape and Adam, traced, against the same step run eagerly on the CPU.
    auto train = [&](const kiln::device& dev, bool traced) {
        kiln::generator g(11);
        kiln::nn::sequential model(kiln::nn::dense(5, 8, kiln::nn::relu, g), kiln::nn::dense(8, 1, kiln::nn::identity, g));
        model.to(dev);
        kiln::optim::adam opt(model.parameters(), 0.05);
        auto body = [&](const kiln::tensor& x, const kiln::tensor& y) {
            kiln::gradient_tape tape;
            kiln::tensor loss = kiln::nn::mse(model(x), y);
            opt.step(tape.gradient(loss, model.parameters()));
            return loss;
        };
        auto step = kiln::function(body);
        const kiln::tensor x = xc.to(dev), y = kiln::sum(xc * xc, {1}, true).to(dev);
        std::vector<float> losses;
        for (int i = 0; i < 10; ++i) losses.push_back((traced ? step(x, y) : body(x, y)).item<float>());
        if (traced) CHECK(step.trace_count() == 1);
        for (kiln::variable* p : model.parameters()) CHECK(p->device() == dev);
        return losses;
    };
    const auto eager_cpu = train(kiln::cpu, false), traced_gpu = train(kiln::cuda, true);
    REQUIRE(eager_cpu.size() == traced_gpu.size());
    for (std::size_t i = 0; i < eager_cpu.size(); ++i) {
        CAPTURE(i);
        CHECK(traced_gpu[i] == doctest::Approx(eager_cpu[i]).epsilon(1e-4));
    }
    CHECK(traced_gpu.back() < traced_gpu.front());

    // An eager checkpoint of device parameters and Adam's device slots: saved through the host, loaded back onto
    // the device.
    kiln::generator g(2);
    kiln::nn::dense layer(5, 3, kiln::nn::identity, g);
    layer.to(kiln::cuda);
    kiln::optim::adam opt(layer.parameters(), 0.1);
    {
        kiln::gradient_tape tape;
        const kiln::tensor l = kiln::sum(kiln::square(layer(xd)));
        opt.step(tape.gradient(l, layer.parameters()));
    }
    const std::string file = "gpu_modes_eager.ckpt";
    kiln::save_checkpoint(file, layer.parameters(), opt);
    kiln::generator g2(3);
    kiln::nn::dense other(5, 3, kiln::nn::identity, g2);
    other.to(kiln::cuda);
    kiln::optim::adam opt2(other.parameters(), 0.1);
    kiln::load_checkpoint(file, other.parameters(), opt2);
    std::remove(file.c_str());
    for (std::size_t i = 0; i < layer.parameters().size(); ++i) {
        CHECK(other.parameters()[i]->device() == kiln::cuda);
        same_tensor(other.parameters()[i]->to(kiln::cpu), layer.parameters()[i]->to(kiln::cpu), 0);
    }
}

TEST_CASE("gradients through a traced while_loop on the device match eager mode's on the CPU") {
    // h <- tanh(h * w + x) for n trips (n a value); d sum(h^2) / d (h0, x, w), traced on the device, eagerly on the CPU.
    auto run = [](const kiln::device& dev, bool traced) {
        kiln::variable w(kiln::from_values<float>({0.5f, -0.3f, 0.8f}, {3}).to(dev));
        auto body = [&](const kiln::tensor& h0, const kiln::tensor& x, const kiln::tensor& n) {
            kiln::gradient_tape tape;
            tape.watch(h0);
            tape.watch(x);
            auto [k, h] = kiln::while_loop([&](const kiln::tensor& i, const kiln::tensor&) { return i < n; },
                                           [&](const kiln::tensor& i, const kiln::tensor& v) {
                                               return std::make_tuple(i + 1, kiln::tanh(v * w + x));
                                           },
                                           kiln::zeros({}, kiln::int64, dev), h0);
            const std::vector<kiln::tensor> g = tape.gradient(kiln::sum(h * h), {h0, x, w});
            return std::make_tuple(g[0], g[1], g[2]);
        };
        auto f = kiln::function(body);
        const kiln::tensor h0 = kiln::from_values<float>({0.2f, -0.7f, 0.1f}, {3}).to(dev);
        const kiln::tensor x = kiln::from_values<float>({0.1f, 0.4f, -0.2f}, {3}).to(dev);
        const kiln::tensor n = kiln::tensor(std::int64_t{4}).to(dev);
        auto [gh, gx, gw] = traced ? f(h0, x, n) : body(h0, x, n);
        if (traced) CHECK(gh.device() == dev);
        return std::vector<kiln::tensor>{gh.to(kiln::cpu), gx.to(kiln::cpu), gw.to(kiln::cpu)};
    };
    const auto eager_cpu = run(kiln::cpu, false), traced_gpu = run(kiln::cuda, true);
    for (std::size_t i = 0; i < eager_cpu.size(); ++i) same_tensor(traced_gpu[i], eager_cpu[i], 1e-5);
}

TEST_CASE("a traced function's fused groups run on the device as one compiled kernel each") {
    // kiln/function/jit.hpp: on the emulated device the kernel is built by g++ on Thrust's OpenMP system (nvcc for a
    // GPU); it computes what the group's ops compute one by one there, bit for bit.
    kiln::generator gen(21);
    const kiln::tensor xc = kiln::randn({300, 7}, kiln::float32, gen), yc = kiln::randn({300, 7}, kiln::float32, gen);
    const kiln::tensor xd = xc.to(kiln::cuda), yd = yc.to(kiln::cuda);
    auto body = [](const kiln::tensor& x, const kiln::tensor& y) {
        const kiln::tensor t = kiln::tanh(x * y + 0.5f * x) - kiln::abs(y) / 3.0f;  // used after the group too
        return std::make_tuple(kiln::relu(t) * 2.0f + y, kiln::sum(t, {1}));
    };
    auto node_by_node = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::off});
    auto compiled = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::blocking});
    const auto [a0, s0] = node_by_node(xd, yd);
    const auto [a1, s1] = compiled(xd, yd);
    INFO(kiln::jit_stats().last_error);
    const auto [groups, ready] = compiled.compiled_groups(xd, yd);
    CHECK(groups >= 1);
    CHECK(ready == groups);
    CHECK(node_by_node.compiled_groups(xd, yd) == std::pair<std::size_t, std::size_t>{0, 0});
    CHECK(a1.device() == kiln::cuda);
    CHECK(s1.device() == kiln::cuda);
    same_tensor(a1.to(kiln::cpu), a0.to(kiln::cpu), 0);  // bit for bit
    same_tensor(s1.to(kiln::cpu), s0.to(kiln::cpu), 0);
    const auto [ac, sc] = body(xc, yc);  // and eager mode on the CPU
    same_tensor(a1.to(kiln::cpu), ac, 1e-5);
    same_tensor(s1.to(kiln::cpu), sc, 1e-5);
    // A second call runs the same kernel on new values.
    const kiln::tensor x2 = kiln::randn({300, 7}, kiln::float32, gen).to(kiln::cuda);
    const auto [a2, s2] = compiled(x2, yd);
    const auto [a3, s3] = node_by_node(x2, yd);
    same_tensor(a2.to(kiln::cpu), a3.to(kiln::cpu), 0);
    same_tensor(s2.to(kiln::cpu), s3.to(kiln::cpu), 0);
    // Both calls ran every group's kernel (not the ops one by one).
    for (const auto& g : compiled.compiled(xd, yd)->groups) {
        REQUIRE(g.jit);
        CHECK(g.jit->runs.load() == 2);
    }
}

TEST_CASE("a traced call on a CUDA device is captured as a CUDA graph from its third call and replayed") {
    // kiln/function/executor.hpp: on CUDA the third call of a signature records the whole call once (cuBLAS, the
    // compiled groups, in-place writes into variables) and every later call is one graph launch, with the arguments
    // copied in and the results copied out. The emulated device has no graphs: its replay runs the recorded call
    // again from the same buffers, with the same host and device parts of the effects, so everything below but the
    // graph itself is checked there too.
    kiln::generator gen(33);
    std::vector<kiln::tensor> w, b;
    for (int i = 0; i < 3; ++i) {
        w.push_back((kiln::randn({16, 16}, kiln::float32, gen) * 0.3f).to(kiln::cuda));
        b.push_back(kiln::randn({16}, kiln::float32, gen).to(kiln::cuda));
    }
    auto dense = [&](const kiln::tensor& x) {
        kiln::tensor h = x;
        for (std::size_t i = 0; i < 3; ++i) h = kiln::relu(kiln::matmul(h, w[i]) + b[i]);
        return h;
    };
    auto captured = kiln::function(dense, kiln::function_options{.jit = kiln::jit_mode::blocking});
    auto plain = kiln::function(dense, kiln::function_options{.jit = kiln::jit_mode::blocking, .cuda_graphs = false});
    std::vector<kiln::tensor> xs, got;
    for (int i = 0; i < 10; ++i) xs.push_back(kiln::randn({8, 16}, kiln::float32, gen).to(kiln::cuda));
    for (const kiln::tensor& x : xs) got.push_back(captured(x));
    // Each result is the caller's own: later replays did not write over the earlier ones.
    for (std::size_t i = 0; i < xs.size(); ++i) {
        INFO("call " << i);
        REQUIRE(got[i].device() == kiln::cuda);
        same_tensor(got[i].to(kiln::cpu), plain(xs[i]).to(kiln::cpu), 1e-6);
        same_tensor(got[i].to(kiln::cpu), dense(xs[i]).to(kiln::cpu), 1e-5);  // eager mode
    }
    const auto st = captured.cuda_graph_status(xs[0]);
    const auto off = plain.cuda_graph_status(xs[0]);
    CHECK_FALSE(off.captured);
    CHECK(off.replays == 0);
    {
        INFO(st.why);
        CHECK(st.captured);
        CHECK(st.replays == 8);  // calls 3 to 10
        CHECK(st.why.empty());
        CHECK(off.why == "cuda_graphs is off");
    }

    // A variable written in place at each call (copy_ and an in-place op are recorded once): the replays update it
    // where it lives, and a read after the write sees the new value.
    kiln::variable v((kiln::ones({8, 16}) * 0.5f).to(kiln::cuda)), u((kiln::ones({8, 16}) * 0.5f).to(kiln::cuda));
    auto state = [](kiln::variable& s) {
        return [&s](const kiln::tensor& x) {
            s.assign(s * 0.5f + x);
            s += 1.0f;
            return s * 2.0f;
        };
    };
    auto fv = kiln::function(state(v));
    auto fu = kiln::function(state(u), kiln::function_options{.cuda_graphs = false});
    for (int i = 0; i < 6; ++i) {
        const kiln::tensor a = fv(xs[static_cast<std::size_t>(i)]), c = fu(xs[static_cast<std::size_t>(i)]);
        same_tensor(a.to(kiln::cpu), c.to(kiln::cpu), 1e-6);
    }
    same_tensor(v.to(kiln::cpu), u.to(kiln::cpu), 1e-6);
    CHECK(fv.cuda_graph_status(xs[0]).captured);

    // From 4 threads at once: each call's result is its own arguments'.
    std::vector<std::thread> threads;
    std::vector<kiln::tensor> par(40);
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = t; i < 40; i += 4) par[static_cast<std::size_t>(i)] = captured(xs[static_cast<std::size_t>(i % 10)]);
        });
    for (std::thread& th : threads) th.join();
    for (int i = 0; i < 40; ++i) same_tensor(par[static_cast<std::size_t>(i)].to(kiln::cpu), got[static_cast<std::size_t>(i % 10)].to(kiln::cpu), 1e-6);

    // A number captured as a rank-0 host tensor (eager mode lets it join a device op, as PyTorch does) is copied to
    // the device when the call is captured, so the call is still one graph.
    const kiln::tensor two = kiln::full({}, 2.0, kiln::float32);
    auto scaled = kiln::function([&](const kiln::tensor& x) { return kiln::relu(x) * two + 1.0f; });
    for (std::size_t i = 0; i < 5; ++i)
        same_tensor(scaled(xs[i]).to(kiln::cpu), (kiln::relu(xs[i]) * two + 1.0f).to(kiln::cpu), 1e-6);
    {
        const auto sc = scaled.cuda_graph_status(xs[0]);
        INFO(sc.why);
        CHECK(sc.captured);
        CHECK(sc.replays == 3);
    }

    // A training step with Adam: the optimizer's step count moves on at each call on the host, and the step size and
    // eps_hat it gives are written to the device before each replay, so the whole step is recorded. It trains as the
    // same step run node by node does.
    kiln::generator g1(5), g2(5);
    kiln::nn::dense l1(16, 1, kiln::nn::identity, g1), l2(16, 1, kiln::nn::identity, g2);
    l1.to(kiln::cuda);
    l2.to(kiln::cuda);
    kiln::optim::adam o1(1e-2), o2(1e-2);
    o1.bind(l1.parameters());  // (the slots made before the trace)
    o2.bind(l2.parameters());
    auto train_step = [](kiln::nn::dense& layer, kiln::optim::adam& opt) {
        return [&layer, &opt](const kiln::tensor& x) {
            kiln::gradient_tape tape;
            const kiln::tensor y = layer(x);
            const kiln::tensor loss = kiln::mean(y * y);
            opt.apply_gradients(tape.gradient(loss, layer.parameters()), layer.parameters());
            return loss;
        };
    };
    auto t1 = kiln::function(train_step(l1, o1));
    auto t2 = kiln::function(train_step(l2, o2), kiln::function_options{.cuda_graphs = false});
    for (std::size_t i = 0; i < 10; ++i) {
        const float a = t1(xs[i]).item<float>(), c = t2(xs[i]).item<float>();
        CHECK(a == doctest::Approx(c).epsilon(1e-6));
    }
    CHECK(o1.steps() == 10);
    CHECK(o2.steps() == 10);
    same_tensor(l1.w.to(kiln::cpu), l2.w.to(kiln::cpu), 1e-6);
    same_tensor(l1.b.to(kiln::cpu), l2.b.to(kiln::cpu), 1e-6);
    const auto ts = t1.cuda_graph_status(xs[0]);
    INFO(ts.why);
    CHECK(ts.captured);
    CHECK(ts.replays == 8);

    // An optimizer whose step is not recorded (SGD reads its learning rate on the host at each call): the call runs
    // node by node and says why.
    kiln::optim::sgd o3(1e-2);
    o3.bind(l2.parameters());
    auto t3 = kiln::function([&](const kiln::tensor& x) {
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::mean(l2(x));
        o3.apply_gradients(tape.gradient(loss, l2.parameters()), l2.parameters());
        return loss;
    });
    for (std::size_t i = 0; i < 4; ++i) (void)t3(xs[i]);
    const auto ss = t3.cuda_graph_status(xs[0]);
    CHECK_FALSE(ss.captured);
    CHECK(ss.why.find("sgd_step") != std::string::npos);
}

TEST_CASE("a traced dropout on the device draws new elements at every call, captured and replayed, as eagerly on the CPU") {
    // The layer's key lives on the device and is the function's state: the replays read it and move it on in
    // device memory, so every call drops other elements, the ones the same layer drops eagerly on the CPU.
    kiln::generator ga(17), gb(17);
    kiln::nn::dropout_layer on_cpu(0.5, ga), on_device(0.5, gb);
    on_device.to(kiln::cuda);
    CHECK(on_device.key.device() == kiln::cuda);
    auto fn = kiln::function([&](const kiln::tensor& x) { return on_device(x) * 2.0f; });
    const kiln::tensor x = kiln::ones({6, 10});
    const kiln::tensor xd = x.to(kiln::cuda);
    std::vector<std::vector<double>> seen;
    for (int call = 0; call < 6; ++call) {
        INFO("call " << call);
        const kiln::tensor got = fn(xd);
        REQUIRE(got.device() == kiln::cuda);
        same_tensor(got.to(kiln::cpu), on_cpu(x) * 2.0f, 0);
        const kiln::tensor h = got.to(kiln::cpu);
        seen.emplace_back(h.data<float>(), h.data<float>() + h.numel());
    }
    CHECK(seen[2] != seen[3]);
    CHECK(seen[4] != seen[5]);
    CHECK(fn.trace_count() == 1);
    const auto st = fn.cuda_graph_status(xd);
    INFO(st.why);
    CHECK(st.captured);
    CHECK(st.replays == 4);
    CHECK(on_device.key.to(kiln::cpu).at<std::int64_t>({1}) == 6);
}

TEST_CASE("a fused group with an operand that repeats along it (a bias) runs on the device as one compiled kernel") {
    // x W + b, relu: the bias (16,) repeats along the (40, 16) group; the group's kernel reads it at i % 16.
    kiln::generator gen(22);
    const kiln::tensor xc = kiln::randn({40, 8}, kiln::float32, gen), wc = kiln::randn({8, 16}, kiln::float32, gen),
                       bc = kiln::randn({16}, kiln::float32, gen), sc = kiln::randn({1, 16}, kiln::float32, gen);
    auto body = [](const kiln::tensor& x, const kiln::tensor& w, const kiln::tensor& b, const kiln::tensor& s) {
        return kiln::relu(kiln::matmul(x, w) + b) * s - 0.25f * b;
    };
    auto node_by_node = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::off});
    auto compiled = kiln::function(body, kiln::function_options{.jit = kiln::jit_mode::blocking});
    const kiln::tensor xd = xc.to(kiln::cuda), wd = wc.to(kiln::cuda), bd = bc.to(kiln::cuda), sd = sc.to(kiln::cuda);
    const kiln::tensor r0 = node_by_node(xd, wd, bd, sd), r1 = compiled(xd, wd, bd, sd);
    INFO(kiln::jit_stats().last_error);
    const auto [groups, ready] = compiled.compiled_groups(xd, wd, bd, sd);
    CHECK(groups == 1);
    CHECK(ready == 1);
    CHECK(r1.device() == kiln::cuda);
    same_tensor(r1.to(kiln::cpu), r0.to(kiln::cpu), 0);  // bit for bit
    // Against values computed here from the CPU product: element (i, j) reads b[j] and s[0, j].
    const kiln::tensor p = kiln::matmul(xc, wc);
    const kiln::tensor got = r1.to(kiln::cpu);
    for (std::ptrdiff_t i = 0; i < 40; ++i)
        for (std::ptrdiff_t j = 0; j < 16; ++j) {
            const float v = p.at<float>({i, j}) + bc.at<float>({j});
            const float want = (v > 0 ? v : 0.0f) * sc.at<float>({0, j}) - 0.25f * bc.at<float>({j});
            CHECK(got.at<float>({i, j}) == doctest::Approx(want).epsilon(1e-5));
        }
    for (const auto& g : compiled.compiled(xd, wd, bd, sd)->groups) {
        REQUIRE(g.jit);
        CHECK(g.jit->runs.load() == 1);
    }
}

TEST_CASE("a traced function mixes devices only as eager mode does") {
    const kiln::tensor d = kiln::ones({4}, kiln::float32, kiln::cuda);
    // A captured CPU tensor with a device argument: eager mode's device_error, raised while tracing.
    const kiln::tensor c = kiln::ones({4});
    auto g = kiln::function([c](const kiln::tensor& x) { return x + c; });
    CHECK_THROWS_AS((void)g(d), kiln::device_error);
    CHECK(kiln::all(kiln::equal(g(c), kiln::full({4}, 2.0))).item<bool>());
    // A captured device tensor with a device argument is read where it lives; numbers join any device.
    auto h = kiln::function([d](const kiln::tensor& x) { return (x + d) * 3.0f; });
    same_tensor(h(d).to(kiln::cpu), kiln::full({4}, 6.0f), 0);
}

TEST_CASE("tensor::to(device) inside a traced function copies at every call, and its gradient copies back") {
    // A host argument moved to the device and back, with values that change from call to call.
    auto m = kiln::function([](const kiln::tensor& x) {
        const kiln::tensor on_device = x.to(kiln::cuda) * 2.0f;
        return std::make_tuple(on_device, (on_device + 1.0f).to(kiln::cpu));
    });
    for (float v : {1.0f, 3.0f, -2.0f}) {
        const auto [d, h] = m(kiln::full({4}, v));
        CHECK(d.device() == kiln::cuda);
        CHECK(h.device() == kiln::cpu);
        same_tensor(d.to(kiln::cpu), kiln::full({4}, 2.0f * v), 0);
        same_tensor(h, kiln::full({4}, 2.0f * v + 1.0f), 0);
    }
    CHECK(m.trace_count() == 1);
    // An index made on the host while tracing (a constant) and moved to the device for a device gather.
    auto pick = kiln::function([](const kiln::tensor& x) {
        return kiln::index_select(x, 0, kiln::from_vector(std::vector<std::int64_t>{2, 0}).to(x.device()));
    });
    const kiln::tensor x = kiln::from_vector(std::vector<float>{5, 6, 7}).to(kiln::cuda);
    same_tensor(pick(x).to(kiln::cpu), kiln::from_vector(std::vector<float>{7, 5}), 0);
    same_tensor(pick(x * 2.0f).to(kiln::cpu), kiln::from_vector(std::vector<float>{14, 10}), 0);
    // The gradient of a host argument through device ops: a tape inside the function, as eagerly.
    auto grad = kiln::function([](kiln::tensor x) {
        kiln::gradient_tape tape;
        tape.watch(x);
        const kiln::tensor loss = kiln::sum(kiln::square(x.to(kiln::cuda)));
        return tape.gradient(loss, x);
    });
    const kiln::tensor g = grad(kiln::from_vector(std::vector<float>{1, -2, 3}));
    CHECK(g.device() == kiln::cpu);
    same_tensor(g, kiln::from_vector(std::vector<float>{2, -4, 6}), 0);
}


TEST_CASE("graph mode runs on the device where its feeds live") {
    const auto x = kiln::input<"x", float>{};
    const auto w = kiln::input<"w", float>{};
    const auto b = kiln::input<"b", float>{};
    kiln::generator gen(3);
    const kiln::tensor xc = kiln::randn({5, 7}, kiln::float32, gen), wc = kiln::randn({7, 3}, kiln::float32, gen),
                       bc = kiln::randn({3}, kiln::float32, gen);
    const kiln::tensor xd = xc.to(kiln::cuda), wd = wc.to(kiln::cuda), bd = bc.to(kiln::cuda);
    const auto before = kiln::cuda_memory_stats();

    // An elementwise graph with broadcasting: one kernel; the result comes back as run's host container.
    const auto e = kiln::exp(x) * 2_c + b * x;
    const auto ec = kiln::run(kiln::exp(x * 0.5f) - 1_c, x = xc);
    const auto ed = kiln::run(kiln::exp(x * 0.5f) - 1_c, x = xd);
    REQUIRE(ed.shape() == ec.shape());
    for (std::size_t i = 0; i < ec.size(); ++i) CHECK(ed.data()[i] == doctest::Approx(ec.data()[i]).epsilon(1e-6));
    const kiln::tensor x3 = xc.slice(1, 0, 3).contiguous();
    same_values(kiln::run(e, x = x3.to(kiln::cuda), b = bd), kiln::exp(x3) * 2.0f + bc * x3, 1e-6);

    // A layer with a product, a reduction and a view: slots on the device, structural nodes through its kernels.
    const auto layer = kiln::relu(kiln::matmul(x, w) + b);
    same_values(kiln::run(layer, x = xd, w = wd, b = bd), kiln::relu(kiln::matmul(xc, wc) + bc), 1e-5);
    const auto [s0, s1, m] = kiln::run(kiln::fetch(kiln::sum<0>(layer), kiln::sum(kiln::transpose(x)), kiln::max<1>(x)),
                                       x = xd, w = wd, b = bd);
    same_values(s0, kiln::sum(kiln::relu(kiln::matmul(xc, wc) + bc), {0}), 1e-5);
    CHECK(s1() == doctest::Approx(kiln::sum(xc).item<double>()).epsilon(1e-5));
    same_values(m, kiln::max(xc, {1}), 0);

    // A compile-time gradient runs there too.
    const auto loss = kiln::sum(kiln::square(layer));
    const auto gw_c = kiln::run(kiln::grad(loss, w), x = xc, w = wc, b = bc);
    const auto gw_d = kiln::run(kiln::grad(loss, w), x = xd, w = wd, b = bd);
    REQUIRE(gw_d.size() == gw_c.size());
    for (std::size_t i = 0; i < gw_c.size(); ++i) CHECK(gw_d.data()[i] == doctest::Approx(gw_c.data()[i]).epsilon(1e-4));

    // run_into a device tensor keeps the result there; a kiln::view of device memory is a feed and an output.
    kiln::tensor out = kiln::zeros({5, 3}, kiln::float32, kiln::cuda);
    kiln::run_into(out, layer, x = xd, w = wd, b = bd);
    CHECK(out.device() == kiln::cuda);
    same_tensor(out.to(kiln::cpu), kiln::relu(kiln::matmul(xc, wc) + bc), 1e-5);
    kiln::tensor raw = kiln::zeros({5, 7}, kiln::float32, kiln::cuda);
    kiln::run_into(kiln::view(raw.data<float>(), {5, 7}, kiln::cuda), x * 3_c,
                   x = kiln::view(xd.data<float>(), {5, 7}, kiln::cuda));
    same_tensor(raw.to(kiln::cpu), xc * 3.0f, 1e-6);
    // A strided (transposed) device output.
    kiln::tensor wide = kiln::zeros({3, 5}, kiln::float32, kiln::cuda);
    kiln::run_into(wide.transpose(0, 1), layer, x = xd, w = wd, b = bd);
    same_tensor(wide.to(kiln::cpu), kiln::relu(kiln::matmul(xc, wc) + bc).transpose(0, 1), 1e-5);
    // The workspace went back to the pool.
    CHECK(kiln::cuda_memory_stats().allocated_bytes == before.allocated_bytes + static_cast<std::size_t>(out.numel() + raw.numel() + wide.numel()) * 4);
}

TEST_CASE("a second device: eager ops, traced functions, graph mode and training on cuda:1") {
    // Every kernel, cuBLAS call and scratch buffer goes to the device of its op's operands. The test command's
    // emulated device shows two devices (KILN_GPU_EMULATED_DEVICES=2); a machine with one GPU has no cuda:1.
    if (kiln::device_count() < 2) {
        MESSAGE("one device here: the cuda:1 checks need two (the test command runs them on the emulated device)");
        return;
    }
    const kiln::device d1{kiln::device_type::cuda, 1};
    kiln::generator gen(41);
    const kiln::tensor ah = kiln::randn({5, 4}, kiln::float32, gen), bh = kiln::randn({4, 3}, kiln::float32, gen);
    const kiln::tensor a = ah.to(d1), b = bh.to(d1);
    CHECK(a.device() == d1);
    CHECK(kiln::to_string(a.device()) == "cuda:1");
    // Eager ops: a product, a broadcast add, a reduction and a view, each on cuda:1.
    const kiln::tensor c = kiln::matmul(a, b) + 1.0f;
    const kiln::tensor s = kiln::sum(c, {0});
    CHECK(c.device() == d1);
    CHECK(s.device() == d1);
    CHECK(c.transpose(0, 1).device() == d1);
    same_tensor(c.to(kiln::cpu), kiln::matmul(ah, bh) + 1.0f, 1e-5);
    same_tensor(s.to(kiln::cpu), kiln::sum(kiln::matmul(ah, bh) + 1.0f, {0}), 1e-5);
    // Between the two devices: moves work both ways; an op across them names both.
    const kiln::tensor a0 = a.to(kiln::cuda);
    CHECK(a0.device() == kiln::cuda);
    same_tensor(a0.to(kiln::cpu), ah, 0);
    try {
        (void)(a0 + a);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        const std::string what = e.what();
        CHECK(what.find("cuda:0") != std::string::npos);
        CHECK(what.find("cuda:1") != std::string::npos);
    }
    // A traced function (its graph replayed from the third call) on cuda:1.
    const kiln::tensor w = b;
    auto f = kiln::function([&w](const kiln::tensor& x) { return kiln::relu(kiln::matmul(x, w) - 0.25f); });
    for (int i = 0; i < 4; ++i) {
        const kiln::tensor r = f(a);
        CHECK(r.device() == d1);
        same_tensor(r.to(kiln::cpu), kiln::relu(kiln::matmul(ah, bh) - 0.25f), 1e-5);
    }
    CHECK(f.cuda_graph_status(a).captured);
    // Graph mode on cuda:1's memory.
    const auto x = kiln::input<"x", float>{};
    const auto xr = kiln::run(x * 2_c, x = kiln::view(a.data<float>(), {5, 4}, d1));
    same_values(xr, ah * 2.0f, 1e-6);
    // Training with Adam on cuda:1 gives cuda:0's numbers.
    kiln::generator g1(8), g0(8);
    kiln::nn::dense l1(4, 1, kiln::nn::identity, g1), l0(4, 1, kiln::nn::identity, g0);
    l1.to(d1);
    l0.to(kiln::cuda);
    kiln::optim::adam o1(l1.parameters(), 1e-2), o0(l0.parameters(), 1e-2);
    for (int i = 0; i < 5; ++i) {
        for (auto [layer, opt, x_] : {std::tuple{&l1, &o1, a}, std::tuple{&l0, &o0, a0}}) {
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::mean(kiln::square((*layer)(x_)));
            opt->step(tape.gradient(loss, layer->parameters()));
        }
    }
    CHECK(l1.w.device() == d1);
    same_tensor(l1.w.to(kiln::cpu), l0.w.to(kiln::cpu), 1e-6);
    same_tensor(l1.b.to(kiln::cpu), l0.b.to(kiln::cpu), 1e-6);
}

TEST_CASE("graph mode refuses feeds and outputs on different devices") {
    const auto x = kiln::input<"x", float>{};
    const auto y = kiln::input<"y", float>{};
    const kiln::tensor d = kiln::ones({4}, kiln::float32, kiln::cuda), c = kiln::ones({4});
    try {
        (void)kiln::run(x + y, x = d, y = c);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()) == "kiln: device_error in 'run': input 'y' was fed memory on cpu, but this run "
                                       "is on cuda:0, where its other feeds live (move tensors with .to(device); docs/gpu.md)");
    }
    CHECK_THROWS_AS((void)kiln::run(x + y, x = c, y = d), kiln::device_error);
    std::vector<float> host(4);
    try {
        kiln::run_into(host, x * 2_c, x = d);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("memory on cpu was given to a run on cuda:0") != std::string::npos);
    }
    kiln::tensor dout = kiln::zeros({4}, kiln::float32, kiln::cuda);
    CHECK_THROWS_AS(kiln::run_into(dout, x * 2_c, x = c), kiln::device_error);
    // A device that does not exist.
    float* p = d.data<float>();
    CHECK_THROWS_AS((void)kiln::run(x * 2_c, x = kiln::view(p, {4}, kiln::device{kiln::device_type::cuda, 3})),
                    kiln::device_error);
    // The wrong shape of output still says so.
    kiln::tensor small = kiln::zeros({3}, kiln::float32, kiln::cuda);
    CHECK_THROWS_AS(kiln::run_into(small, x * 2_c, x = d), kiln::shape_error);
    // A rank-0 tensor on the CPU is a feed like any other: it must live on the run's device too.
    CHECK_THROWS_AS((void)kiln::run(x * y, x = d, y = kiln::tensor(2.0f)), kiln::device_error);
}

namespace {
namespace model {
inline constexpr kiln::input<"x", float, kiln::shape<kiln::dyn, 6>> x{};
inline constexpr kiln::input<"y", float, kiln::shape<kiln::dyn, 1>> y{};
inline constexpr auto prediction = kiln::layers::dense<"l2", 1>(kiln::layers::dense<"l1", 16>(x, kiln::nn::relu));
inline constexpr auto loss = kiln::mean(kiln::square(prediction - y));
inline constexpr auto adam = kiln::optim::minimize(loss, kiln::optim::adam_rule{.lr = 0.01f});
inline constexpr auto sgd = kiln::optim::minimize(loss * 1_c, kiln::optim::sgd_rule{.lr = 0.05f});
}  // namespace model
}  // namespace

TEST_CASE("a session on the device trains as a session on the CPU does") {
    using namespace model;
    kiln::session host(5), dev(5, kiln::cuda);
    CHECK(dev.device() == kiln::cuda);
    CHECK(host.device() == kiln::cpu);
    kiln::generator gen(11);
    const kiln::tensor xs = kiln::randn({40, 6}, kiln::float32, gen);
    const kiln::tensor ys = kiln::sum(xs * xs, {1}, true) * 0.3f - xs.slice(1, 0, 1);
    for (int step = 0; step < 12; ++step) {
        // Batches of 16, 16 and 8 rows: the workspace follows the batch.
        const std::ptrdiff_t from = (step % 3) * 16, n = step % 3 == 2 ? 8 : 16;
        const kiln::tensor xb = xs.slice(0, from, from + n), yb = ys.slice(0, from, from + n);
        const float lh = host.run(adam, x = xb, y = yb);
        const float ld = dev.run(adam, x = xb.to(kiln::cuda), y = yb.to(kiln::cuda));
        CHECK(ld == doctest::Approx(lh).epsilon(1e-4));
    }
    for (const std::string& name : host.parameter_names()) {
        CAPTURE(name);
        CHECK(dev.parameter(name).device() == kiln::cuda);
        same_tensor(dev.parameter(name).to(kiln::cpu), host.parameter(name), 1e-4);
    }
    // Any expression: parameters from the session, the result back on the host.
    const auto ph = host.run(prediction, x = xs);
    const auto pd = dev.run(prediction, x = xs.to(kiln::cuda));
    REQUIRE(pd.size() == ph.size());
    for (std::size_t i = 0; i < ph.size(); ++i) CHECK(pd.data()[i] == doctest::Approx(ph.data()[i]).epsilon(1e-4));
    // A loss that is not a reduction's slot (loss * 1 stays elementwise over the mean), and SGD.
    kiln::session h2(2), d2(2, kiln::cuda);
    for (int step = 0; step < 3; ++step) {
        const float lh = h2.run(sgd, x = xs, y = ys);
        const float ld = d2.run(sgd, x = xs.to(kiln::cuda), y = ys.to(kiln::cuda));
        CHECK(ld == doctest::Approx(lh).epsilon(1e-4));
    }
    // A checkpoint of the device session loads into a CPU session (parameters and Adam's slots), and back.
    const std::string file = "gpu_modes_session.ckpt";
    kiln::save_checkpoint(file, dev);
    kiln::session back(9);
    back.declare(loss);
    kiln::load_checkpoint(file, back);
    for (const std::string& name : host.parameter_names()) same_tensor(back.parameter(name), host.parameter(name), 1e-4);
    const kiln::tensor xb = xs.slice(0, 0, 16), yb = ys.slice(0, 0, 16);
    const float next_host = host.run(adam, x = xb, y = yb);
    CHECK(back.run(adam, x = xb, y = yb) == doctest::Approx(next_host).epsilon(1e-4));
    kiln::session again(9, kiln::cuda);
    again.declare(loss);
    kiln::load_checkpoint(file, again);
    CHECK(again.parameter("l1/w").device() == kiln::cuda);
    CHECK(again.run(adam, x = xb.to(kiln::cuda), y = yb.to(kiln::cuda)) == doctest::Approx(next_host).epsilon(1e-4));
    std::remove(file.c_str());
    // set() copies a host value onto the device.
    dev.set("l2/b", kiln::full({1}, 0.25));
    CHECK(dev.parameter("l2/b").device() == kiln::cuda);
    CHECK(dev.parameter("l2/b").to(kiln::cpu).item<float>() == 0.25f);
}

TEST_CASE("kiln::trace(session, step) on the device is captured as one CUDA graph, Adam's update included") {
    // The session's update is recorded as function mode's Adam is: its step count moves on the host at each call and
    // the step size and eps_hat are written to device memory before each replay (session::update_recordable).
    using namespace model;
    kiln::session traced_s(5, kiln::cuda), plain_s(5, kiln::cuda);
    auto step = kiln::trace(traced_s, adam);
    kiln::generator gen(17);
    const kiln::tensor xs = kiln::randn({16, 6}, kiln::float32, gen).to(kiln::cuda);
    const kiln::tensor ys = (kiln::sum(xs * xs, {1}, true) * 0.3f - xs.slice(1, 0, 1)).contiguous();
    for (int i = 0; i < 10; ++i) {
        CAPTURE(i);
        const float a = step(xs, ys).item<float>();
        const float b = plain_s.run(adam, x = xs, y = ys);
        CHECK(a == doctest::Approx(b).epsilon(1e-5));
    }
    for (const std::string& name : plain_s.parameter_names()) {
        CAPTURE(name);
        same_tensor(traced_s.parameter(name).to(kiln::cpu), plain_s.parameter(name).to(kiln::cpu), 1e-5);
    }
    std::map<std::string, kiln::tensor> state;
    std::string kind;
    traced_s.save_training_state(state, kind, "test");
    CHECK(kind == "adam");
    CHECK(state.at("optimizer/step").item<std::int64_t>() == 10);
    {
        const auto st = step.cuda_graph_status(xs, ys);
        INFO(st.why);
        CHECK(st.captured);
        CHECK(st.replays == 8);  // calls 3 to 10
    }
    // A hook set afterwards has host code to run at each step: the graph is dropped, the hook runs, and the step
    // goes on as session::run's does.
    int hooked = 0;
    traced_s.on_gradients([&](std::span<const kiln::session::gradient> gs) { hooked += static_cast<int>(gs.size()); });
    const float a = step(xs, ys).item<float>();
    const float b = plain_s.run(adam, x = xs, y = ys);
    CHECK(a == doctest::Approx(b).epsilon(1e-5));
    CHECK(hooked == 4);
    const auto after = step.cuda_graph_status(xs, ys);
    CHECK_FALSE(after.captured);
    CHECK(after.why.find("'session_step' cannot be recorded now") != std::string::npos);
    same_tensor(traced_s.parameter("l1/w").to(kiln::cpu), plain_s.parameter("l1/w").to(kiln::cpu), 1e-5);
    // SGD's rule reads its numbers on the host: not recorded, and said so.
    kiln::session sgd_s(2, kiln::cuda);
    auto sgd_step = kiln::trace(sgd_s, sgd);
    for (int i = 0; i < 4; ++i) (void)sgd_step(xs, ys);
    const auto ss = sgd_step.cuda_graph_status(xs, ys);
    CHECK_FALSE(ss.captured);
    CHECK(ss.why.find("session_step") != std::string::npos);
}

TEST_CASE("a session moves between devices with its parameters and optimizer state") {
    using namespace model;
    kiln::session host(7), moving(7, kiln::cuda);
    kiln::generator gen(13);
    const kiln::tensor xs = kiln::randn({16, 6}, kiln::float32, gen), ys = kiln::randn({16, 1}, kiln::float32, gen);
    const kiln::tensor xd = xs.to(kiln::cuda), yd = ys.to(kiln::cuda);
    for (int i = 0; i < 3; ++i) CHECK(moving.run(adam, x = xd, y = yd) == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-4));
    (void)moving.run(prediction, x = xd);  // a second plan's workspace, made again after the move
    moving.to(kiln::cpu);
    CHECK(moving.device() == kiln::cpu);
    for (const std::string& name : moving.parameter_names()) CHECK(moving.parameter(name).device() == kiln::cpu);
    // Adam's slots and step count came along: the next steps agree with the session that stayed on the CPU.
    for (int i = 0; i < 2; ++i) CHECK(moving.run(adam, x = xs, y = ys) == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-4));
    CHECK_THROWS_AS((void)moving.run(adam, x = xd, y = yd), kiln::device_error);
    moving.to(kiln::cuda);
    CHECK(moving.run(adam, x = xd, y = yd) == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-4));
    const auto want = host.run(prediction, x = xs);
    same_values(moving.run(prediction, x = xd), kiln::from_vector(std::vector<float>(want.begin(), want.end()), {16, 1}), 1e-4);
    // A device that does not exist leaves the session where it was.
    CHECK_THROWS_AS(moving.to(kiln::device{kiln::device_type::cuda, 5}), kiln::device_error);
    CHECK(moving.device() == kiln::cuda);
    CHECK(moving.parameter("l1/w").device() == kiln::cuda);
}

TEST_CASE("functions traced from a session follow it when it moves between devices") {
    // kiln::trace(session, ...) reads the session's parameters as variables over their storage; session::to makes
    // new storage, so each trace that read the old one is dropped and the next call traces on the new one.
    using namespace model;
    kiln::session host(7), moving(7);
    auto train = kiln::trace(moving, adam);
    auto predict = kiln::trace(moving, prediction);
    kiln::generator gen(21);
    const kiln::tensor xs = kiln::randn({16, 6}, kiln::float32, gen), ys = kiln::randn({16, 1}, kiln::float32, gen);
    const kiln::tensor xd = xs.to(kiln::cuda), yd = ys.to(kiln::cuda);
    for (int i = 0; i < 3; ++i) CHECK(train(xs, ys).item<float>() == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-5));
    CHECK(train.trace_count() == 1);
    moving.to(kiln::cuda);
    for (int i = 0; i < 3; ++i) {
        const kiln::tensor l = train(xd, yd);
        CHECK(l.device() == kiln::cuda);
        CHECK(l.item<float>() == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-5));
    }
    CHECK(train.trace_count() == 2);
    for (const std::string& name : moving.parameter_names()) {
        CAPTURE(name);
        same_tensor(moving.parameter(name).to(kiln::cpu), host.parameter(name), 1e-5);
    }
    const auto want = host.run(prediction, x = xs);
    const kiln::tensor want_t = kiln::from_vector(std::vector<float>(want.begin(), want.end()), {16, 1});
    same_tensor(predict(xd).to(kiln::cpu), want_t, 1e-5);
    // Host arguments now meet device parameters: the CPU trace read the storage the session left, so it traces
    // again, says why, and the new trace refuses the mix as eager mode does.
    CHECK_THROWS_AS((void)train(xs, ys), kiln::device_error);
    REQUIRE_FALSE(train.retrace_reasons().empty());
    CHECK(train.retrace_reasons().back().find("its kiln::session moved to another device") != std::string::npos);
    // Back on the CPU: the host trace reads the moved-back values, not the ones left behind at the first move.
    moving.to(kiln::cpu);
    for (int i = 0; i < 2; ++i) CHECK(train(xs, ys).item<float>() == doctest::Approx(host.run(adam, x = xs, y = ys)).epsilon(1e-5));
    for (const std::string& name : moving.parameter_names()) {
        CAPTURE(name);
        same_tensor(moving.parameter(name), host.parameter(name), 1e-5);
    }
    const auto want2 = host.run(prediction, x = xs);
    same_tensor(predict(xs), kiln::from_vector(std::vector<float>(want2.begin(), want2.end()), {16, 1}), 1e-5);
}

TEST_CASE("a device session refuses host feeds, and its gradients carry their device") {
    using namespace model;
    kiln::session dev(1, kiln::cuda);
    const kiln::tensor xh = kiln::ones({4, 6}), yh = kiln::ones({4, 1});
    try {
        (void)dev.run(adam, x = xh, y = yh.to(kiln::cuda));
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()) == "kiln: device_error in 'session::run': input 'x' was fed memory on cpu, but this "
                                       "run is on cuda:0, where its other feeds live (move tensors with .to(device); "
                                       "docs/gpu.md)");
    }
    std::vector<kiln::device> seen;
    dev.on_gradients([&](std::span<const kiln::session::gradient> gs) {
        for (const auto& g : gs) seen.push_back(g.device);
    });
    (void)dev.run(adam, x = xh.to(kiln::cuda), y = yh.to(kiln::cuda));
    REQUIRE(seen.size() == 4);
    for (const auto& d : seen) CHECK(d == kiln::cuda);
    CHECK_THROWS_AS(kiln::session(1, kiln::device{kiln::device_type::cuda, 2}), kiln::device_error);
}

#ifndef KILN_GPU_TEST_NO_MAIN  // (test/gpu_cuda.cpp builds this file with test/gpu.cpp and its own main)
int main(int argc, char** argv) { return kiln_test::gpu_main("test_gpu_modes", argc, argv); }
#endif
