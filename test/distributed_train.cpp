// Data parallelism on MPI (issue #17), run under mpirun by the test command:
//   distributed_train eager|function|graph   the reference problem (Dense(64, relu), Dense(1), Adam, MSE, global
//       batches of 32) trained for 2 epochs on every rank from a different seed: rank 0's parameters are broadcast
//       first, each rank takes its shard of every global batch (kiln::data::loader's shard), gradients are averaged
//       over the ranks weighted by their rows. After every step the parameters must be equal bit for bit on every
//       rank, and the loss curve must equal one process training on the same global batches to 1e-5 relative.
//   distributed_train collectives   broadcast, all_reduce (sum, mean, max, min), all_gather of every dtype, with
//       values worked out from the ranks' numbers.
//   distributed_train mismatch   ranks that pass different shapes, dtypes or collectives get a kiln::distributed_error
//       naming every rank's call, on every rank, instead of a hang.
//   distributed_train devices cuda   (GPU builds with two devices or more) rank r's collectives on cuda:(r mod the
//       device count); a later one on another device throws kiln::device_error on every rank, or a
//       kiln::distributed_error naming the rank where only some ranks moved.
//   distributed_train throw   rank 1 throws while the others wait in a collective: the job must end (test/mpi_abort_check.sh).
// A second argument `cuda` runs eager, function, graph, collectives and mismatch with every tensor, model and
// session on kiln's GPU device (built with kiln::gpu_emulated by the test command: the collectives then go through
// the host, as on a GPU without NCCL); the single-process reference of the training modes stays on the CPU, so the
// device's data-parallel curve is checked against the CPU's.
#include <kiln/distributed.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"

namespace dist = kiln::distributed;

namespace {

kiln::device dev = kiln::cpu;  // where this run's tensors live (the second argument)

// A tensor's values on the host, to read them.
kiln::tensor host(const kiln::tensor& t) { return t.to(kiln::cpu); }

int failures = 0;
void expect(bool ok, const std::string& what) {
    if (dist::rank() == 0 || !ok) std::printf("%s: rank %d: %s\n", ok ? "ok" : "FAILED", dist::rank(), what.c_str());
    if (!ok) ++failures;
}

// A digest of tensors' bytes (FNV-1a), to compare parameters across ranks bit for bit.
std::int64_t digest(const std::vector<kiln::tensor>& ts) {
    std::uint64_t h = 1469598103934665603ull;
    for (const kiln::tensor& t : ts) {
        const kiln::tensor c = host(t).contiguous();
        const auto* p = static_cast<const unsigned char*>(c.raw_data());
        for (std::size_t i = 0; i < static_cast<std::size_t>(c.numel()) * c.itemsize(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    }
    return static_cast<std::int64_t>(h >> 1);
}

// True when every rank has the same digest.
bool same_everywhere(std::int64_t d) {
    const kiln::tensor all = dist::all_gather(kiln::tensor(d));
    for (std::ptrdiff_t r = 1; r < all.numel(); ++r)
        if (all.data<std::int64_t>()[r] != all.data<std::int64_t>()[0]) return false;
    return true;
}

std::vector<kiln::tensor> values_of(const std::vector<kiln::variable*>& ps) {
    std::vector<kiln::tensor> out;
    for (kiln::variable* p : ps) out.push_back(*p);
    return out;
}

struct problem {
    mlp::dataset d = mlp::make_data();
    kiln::tensor x = kiln::wrap(d.x.data(), {mlp::samples, mlp::features}).to(dev);
    kiln::tensor y = kiln::wrap(d.y.data(), {mlp::samples, 1}).to(dev);
};
constexpr int epochs = 2;
constexpr std::uint64_t order_seed = 7;

// Compares the distributed loss curve with one process's (on rank 0).
void compare_curves(const std::vector<double>& got, const std::vector<double>& want, const char* mode) {
    if (dist::rank() != 0) return;
    bool ok = got.size() == want.size() && !got.empty();
    double worst = 0;
    for (std::size_t i = 0; ok && i < got.size(); ++i) {
        const double rel = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1e-12);
        worst = std::max(worst, rel);
        ok = rel <= 1e-5;
    }
    char text[200];
    std::snprintf(text, sizeof text, "%s: %zu steps on %d ranks give one process's loss curve (largest relative difference %.2e; first %.6f, last %.6f)",
                  mode, got.size(), dist::size(), worst, got.empty() ? 0.0 : got.front(), got.empty() ? 0.0 : got.back());
    expect(ok, text);
}

// Eager and function mode: the step written once; `traced` wraps it in kiln::function.
int train_eager_or_function(bool traced) {
    const char* mode = traced ? "function" : "eager";
    problem p;
    kiln::generator g(100 + static_cast<std::uint64_t>(dist::rank()));  // a different start on every rank
    mlp::eager_model m(g);
    m.l1.to(dev);
    m.l2.to(dev);
    expect(dist::size() == 1 || !same_everywhere(digest(values_of(m.parameters()))), std::string(mode) + ": the ranks start from different values");
    dist::broadcast_parameters(m.parameters());
    expect(same_everywhere(digest(values_of(m.parameters()))), std::string(mode) + ": rank 0's parameters are broadcast");
    std::vector<kiln::tensor> start;
    for (kiln::variable* v : m.parameters()) start.push_back(host(*v).clone());

    kiln::optim::adam opt(m.parameters(), mlp::learning_rate);
    auto step = [&](const kiln::tensor& x, const kiln::tensor& y) {
        const double rows = static_cast<double>(x.shape()[0]);
        kiln::gradient_tape tape;
        const kiln::tensor loss = kiln::nn::mse(m(x), y);
        const std::vector<kiln::tensor> grads = dist::all_reduce_mean(tape.gradient(loss, m.parameters()), rows);
        opt.apply_gradients(grads, m.parameters());
        return dist::all_reduce_mean(loss, rows);  // the global batch's loss
    };
    auto traced_step = kiln::function(step, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features}), kiln::spec(kiln::float32, {kiln::dyn, 1})},
                                      {.name = "data_parallel_step"});
    kiln::data::loader data(p.x, p.y, mlp::batch_size, {.seed = order_seed, .shard = {dist::rank(), dist::size()}});
    std::vector<double> curve;
    int differing = 0;
    for (int e = 0; e < epochs; ++e)
        for (const kiln::data::batch& b : data) {
            curve.push_back((traced ? traced_step(b.x, b.y) : step(b.x, b.y)).item<float>());
            if (curve.size() == 1) expect(b.x.device() == dev && m.l1.w.device() == dev, std::string(mode) + ": the batches and the model live on " + kiln::to_string(dev));
            differing += !same_everywhere(digest(values_of(m.parameters())));
        }
    expect(differing == 0, std::string(mode) + ": the parameters are equal bit for bit on every rank after every step (" +
                               std::to_string(differing) + " steps differ)");
    if (traced) expect(traced_step.trace_count() == 1, "function: one trace serves every shard and the last partial batch");

    // One process on the same global batches from the same start.
    if (dist::rank() == 0) {  // (on the CPU)
        const kiln::tensor hx = host(p.x), hy = host(p.y);
        kiln::generator g2(1);
        mlp::eager_model ref(g2);
        for (std::size_t i = 0; i < start.size(); ++i) ref.parameters()[i]->assign(start[i]);
        kiln::optim::adam ref_opt(ref.parameters(), mlp::learning_rate);
        kiln::data::loader all(hx, hy, mlp::batch_size, {.seed = order_seed});
        std::vector<double> want;
        for (int e = 0; e < epochs; ++e)
            for (const kiln::data::batch& b : all) {
                kiln::gradient_tape tape;
                const kiln::tensor loss = kiln::nn::mse(ref(b.x), b.y);
                ref_opt.apply_gradients(tape.gradient(loss, ref.parameters()), ref.parameters());
                want.push_back(loss.item<float>());
            }
        compare_curves(curve, want, mode);
    }
    return failures;
}

// Graph mode: a kiln::session whose training step averages its gradients over the ranks.
int train_graph() {
    using namespace mlp::graph_model;
    problem p;
    kiln::session s(100 + static_cast<std::uint64_t>(dist::rank()), dev);
    s.initialize(loss);
    auto params = [&] {
        std::vector<kiln::tensor> out;
        for (const std::string& n : s.parameter_names()) out.push_back(s.parameter(n));
        return out;
    };
    expect(dist::size() == 1 || !same_everywhere(digest(params())), "graph: the ranks start from different values");
    dist::broadcast_parameters(s);
    expect(same_everywhere(digest(params())), "graph: rank 0's parameters are broadcast");
    std::map<std::string, kiln::tensor> start;
    for (const std::string& n : s.parameter_names()) start.emplace(n, host(s.parameter(n)).clone());
    expect(s.parameter(s.parameter_names()[0]).device() == dev, "graph: the session's parameters live on " + kiln::to_string(dev));

    double rows = 0;
    dist::all_reduce_gradients(s, [&] { return rows; });
    kiln::data::loader data(p.x, p.y, mlp::batch_size, {.seed = order_seed, .shard = {dist::rank(), dist::size()}});
    std::vector<double> curve;
    int differing = 0;
    for (int e = 0; e < epochs; ++e)
        for (const kiln::data::batch& b : data) {
            rows = static_cast<double>(b.x.shape()[0]);
            const float local = s.run(step, x = b.x, y = b.y);
            curve.push_back(dist::all_reduce_mean(kiln::tensor(local), rows).item<float>());
            differing += !same_everywhere(digest(params()));
        }
    expect(differing == 0, "graph: the parameters are equal bit for bit on every rank after every step (" + std::to_string(differing) +
                               " steps differ)");
    if (dist::rank() == 0) {  // (on the CPU)
        kiln::session ref;
        ref.declare(loss);
        for (const auto& [n, t] : start) ref.set(n, t);
        kiln::data::loader all(host(p.x), host(p.y), mlp::batch_size, {.seed = order_seed});
        std::vector<double> want;
        for (int e = 0; e < epochs; ++e)
            for (const kiln::data::batch& b : all) want.push_back(ref.run(step, x = b.x, y = b.y));
        compare_curves(curve, want, "graph");
    }
    return failures;
}

int collectives() {
    const int r = dist::rank(), n = dist::size();
    // all_reduce of every dtype, from the ranks' own numbers: rank r holds r + 1 (and r + 1 > 1 as a bool).
    for (kiln::dtype d : {kiln::float32, kiln::float64, kiln::int32, kiln::int64}) {
        const kiln::tensor t = kiln::full({2, 3}, r + 1.0, d, dev);
        const double sum = n * (n + 1) / 2.0;
        expect(host(dist::all_reduce(t, dist::reduce_op::sum)).to(kiln::float64).data<double>()[5] == sum,
               "all_reduce(sum) of " + std::string(kiln::name(d)));
        expect(host(dist::all_reduce(t, dist::reduce_op::max)).to(kiln::float64).data<double>()[0] == n, "all_reduce(max) of " + std::string(kiln::name(d)));
        expect(host(dist::all_reduce(t, dist::reduce_op::min)).to(kiln::float64).data<double>()[3] == 1, "all_reduce(min) of " + std::string(kiln::name(d)));
        if (kiln::detail::is_floating(d))
            expect(host(dist::all_reduce(t, dist::reduce_op::mean)).to(kiln::float64).data<double>()[1] == sum / n,
                   "all_reduce(mean) of " + std::string(kiln::name(d)));
    }
    const kiln::tensor flag = kiln::full({3}, r == 0 ? 1.0 : 0.0, kiln::bool_, dev);
    expect(host(dist::all_reduce(flag, dist::reduce_op::max)).data<bool>()[0] == true, "all_reduce(max) of bool is a logical or");
    expect(host(dist::all_reduce(flag, dist::reduce_op::min)).data<bool>()[0] == (n == 1), "all_reduce(min) of bool is a logical and");
    bool refused = false;
    try {
        (void)dist::all_reduce(kiln::full({2}, 1.0, kiln::int32, dev), dist::reduce_op::mean);
    } catch (const kiln::dtype_error& e) {
        refused = std::string(e.what()).find("a mean needs a floating dtype, not int32") != std::string::npos;
    }
    expect(refused, "all_reduce(mean) of int32 is a dtype_error");
    // broadcast from the last rank, into a strided view too.
    kiln::tensor bd = kiln::full({4, 2}, static_cast<double>(r), kiln::int64, dev);
    kiln::tensor column = bd.slice(1, 1, 2);
    dist::broadcast(column, n - 1);
    const kiln::tensor b = host(bd);
    expect(b.data<std::int64_t>()[1] == n - 1 && b.data<std::int64_t>()[7] == n - 1 && b.data<std::int64_t>()[0] == r,
           "broadcast from the last rank writes through a strided view and nowhere else");
    // all_gather: rank order.
    const kiln::tensor gathered_on = dist::all_gather(kiln::full({2}, r * 10.0, kiln::float32, dev));
    expect(gathered_on.device() == dev, "all_gather's result lives on the tensor's device");
    const kiln::tensor gathered = host(gathered_on);
    bool ordered = gathered.dim() == 2 && gathered.shape()[0] == n && gathered.shape()[1] == 2;
    for (int k = 0; ordered && k < n; ++k) ordered = gathered.data<float>()[2 * k + 1] == k * 10.0f;
    expect(ordered, "all_gather stacks every rank's tensor in rank order");
    // all_reduce_mean of several dtypes and shapes, weighted: sum(w_r x_r) / sum(w_r) with w_r = r + 1, x_r = r.
    std::vector<kiln::tensor> means = dist::all_reduce_mean(
        {kiln::full({3}, r, kiln::float32, dev), kiln::full({}, r, kiln::float64, dev), kiln::full({2, 2}, r, kiln::float32, dev)}, r + 1.0);
    expect(means[0].device() == dev && means[1].device() == dev, "all_reduce_mean's results live on the tensors' device");
    for (kiln::tensor& m : means) m = host(m);
    double num = 0, den = 0;
    for (int k = 0; k < n; ++k) num += (k + 1.0) * k, den += k + 1.0;
    expect(means.size() == 3 && means[1].dim() == 0 && std::abs(means[1].item<double>() - num / den) < 1e-12 &&
               means[2].dim() == 2 && means[2].numel() == 4 && std::abs(means[2].data<float>()[3] - num / den) < 1e-6,
           "all_reduce_mean weights by rows, per dtype, keeping each tensor's shape");
    // In a traced function the all-reduce runs at every call.
    auto traced = kiln::function([](const kiln::tensor& t) { return dist::all_reduce(t * 2, dist::reduce_op::sum); });
    for (int call = 1; call <= 3; ++call) {
        const kiln::tensor got = host(traced(kiln::full({2}, static_cast<double>(r + call), kiln::float32, dev)));
        double want = 0;
        for (int k = 0; k < n; ++k) want += 2.0 * (k + call);
        expect(got.data<float>()[1] == want, "a traced all_reduce runs at call " + std::to_string(call));
    }
    expect(traced.trace_count() == 1, "the traced all_reduce is traced once");
    return failures;
}

int mismatch() {
    const int r = dist::rank(), n = dist::size();
    auto refusal = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const kiln::distributed_error& e) {
            return e.what();
        }
        return "";
    };
    const std::string on = dev == kiln::cpu ? "" : " (cuda)";
    const std::string shape = refusal([&] { (void)dist::all_reduce(kiln::zeros({r + 3}, kiln::float32, dev)); });
    expect(n == 1 ? shape.empty()
                  : shape.find("the ranks disagree on the collective (rank 0: all_reduce(sum) on (3,) float32" + on +
                               "; rank 1: all_reduce(sum) on (4,) float32" + on) != std::string::npos,
           "different shapes: every rank is told each rank's call (" + shape + ")");
    const std::string dt = refusal([&] { (void)dist::all_reduce(kiln::zeros({2}, r == 0 ? kiln::float32 : kiln::float64, dev)); });
    expect(n == 1 ? dt.empty() : dt.find("rank 1: all_reduce(sum) on (2,) float64" + on) != std::string::npos, "different dtypes are named");
    if (dev != kiln::cpu) {  // rank 0's tensor on the CPU, the others' on the GPU: named, not hung on (NCCL against MPI)
        const std::string where = refusal([&] { (void)dist::all_reduce(kiln::zeros({2}, kiln::float32, r == 0 ? kiln::cpu : dev)); });
        expect(n == 1 ? where.empty()
                      : where.find("rank 0: all_reduce(sum) on (2,) float32; rank 1: all_reduce(sum) on (2,) float32 (cuda)") != std::string::npos,
               "tensors on different kinds of device are named (" + where + ")");
    }
    const std::string op = refusal([&] {
        kiln::tensor t = kiln::zeros({2}, kiln::float32, dev);
        if (r == 0) dist::broadcast(t, 0);
        else dist::all_reduce_in_place(t, dist::reduce_op::max);
    });
    expect(n == 1 ? op.empty() : op.find("rank 0: broadcast(root 0) on (2,) float32" + on + "; rank 1: all_reduce(max)") != std::string::npos,
           "different collectives are named");
    const std::string root = refusal([&] {
        kiln::tensor t = kiln::zeros({2});
        dist::broadcast(t, n);
    });
    expect(root.find("root " + std::to_string(n) + " is not a rank of this job of " + std::to_string(n)) != std::string::npos,
           "a root that is not a rank is refused");
    // After the refusals the ranks still agree: a collective works.
    expect(host(dist::all_reduce(kiln::ones({2}, kiln::float32, dev))).data<float>()[0] == n, "the job goes on after refused collectives");
    return failures;
}

// Each rank's collectives on its own device (rank r on cuda:r, as a process per GPU of one machine is set up).
int devices() {
    const int r = dist::rank(), n = dist::size(), count = kiln::device_count();
    const kiln::device mine{kiln::device_type::cuda, r % count}, other{kiln::device_type::cuda, (r + 1) % count};
    double want = 0;
    for (int k = 0; k < n; ++k) want += k + 1.0;
    const kiln::tensor sum = dist::all_reduce(kiln::full({3}, r + 1.0, kiln::float32, mine));
    expect(sum.device() == mine && host(sum).data<float>()[2] == want,
           "rank r's all_reduce on cuda:" + std::to_string(r % count) + " sums every rank's values");
    kiln::tensor b = kiln::full({2}, r + 5.0, kiln::float64, mine);
    dist::broadcast(b, n - 1);
    expect(host(b).data<double>()[0] == n + 4.0, "broadcast on each rank's own device");
    auto refusal = [](auto&& f) -> std::string {
        try {
            f();
        } catch (const kiln::error& e) {
            return std::string(dynamic_cast<const kiln::device_error*>(&e) ? "device_error: " : "other: ") + e.what();
        }
        return "";
    };
    // Every rank moves to another device: each is told where its collectives run.
    const std::string all = refusal([&] { (void)dist::all_reduce(kiln::ones({2}, kiln::float32, other)); });
    expect(all.find("device_error: kiln: device_error in 'distributed::all_reduce': the tensor lives on " +
                    kiln::to_string(other) + ", but this process's collectives on GPU tensors run on " +
                    kiln::to_string(mine)) != std::string::npos,
           "a collective on another device than the process's earlier ones is refused on every rank (" + all + ")");
    // Only rank 1 moves: every rank is told which one (no rank reaches the exchange alone).
    const std::string one = refusal([&] { (void)dist::all_reduce(kiln::ones({2}, kiln::float32, r == 1 ? other : mine)); });
    expect(one.find("other: kiln: distributed_error in 'distributed::all_reduce': the ranks disagree on the collective (rank 0: "
                    "all_reduce(sum) on (2,) float32 (cuda); rank 1: all_reduce(sum) on (2,) float32 (cuda, not the device "
                    "of the rank's earlier GPU collectives)") != std::string::npos,
           "one rank on another device is named to every rank (" + one + ")");
    expect(host(dist::all_reduce(kiln::ones({2}, kiln::float32, mine))).data<float>()[1] == n,
           "the job goes on after the refusals, on each rank's device");
    return failures;
}

}  // namespace

// (test/gpu_cuda.cpp builds this file into the nvcc build of the device's tests, with NCCL, under another name.)
#ifndef KILN_DISTRIBUTED_TEST_MAIN
#define KILN_DISTRIBUTED_TEST_MAIN main
#endif
int KILN_DISTRIBUTED_TEST_MAIN(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (argc > 2) {
        if (std::string(argv[2]) != "cuda" || !kiln::gpu_compiled_in) {
            std::fprintf(stderr, "distributed_train: the second argument is `cuda`, in a build with kiln's GPU device\n");
            return 2;
        }
        if (!kiln::cuda_available()) {
            std::printf("distributed_train: skipped: no CUDA device on this machine\n");
            return 77;
        }
        dev = kiln::cuda;
    }
    return dist::run([&] {
        if (mode == "throw") {
            dist::barrier();
            if (dist::rank() == 1) throw kiln::value_error("kiln: value_error in 'test': rank 1 fails on purpose");
            (void)dist::all_reduce(kiln::ones({4}));  // the others wait here for rank 1, which never comes
            std::printf("FAILED: rank %d got past the collective\n", dist::rank());
            std::exit(3);
        }
        int f = 0;
        if (mode == "eager") f = train_eager_or_function(false);
        else if (mode == "function") f = train_eager_or_function(true);
        else if (mode == "graph") f = train_graph();
        else if (mode == "collectives") f = collectives();
        else if (mode == "mismatch") f = mismatch();
        else if (mode == "devices" && dev != kiln::cpu && kiln::device_count() >= 2) f = devices();
        else if (mode == "devices") {
            std::fprintf(stderr, "distributed_train: `devices cuda` needs a GPU build with two devices or more\n");
            std::exit(2);
        }
        else {
            std::fprintf(stderr, "usage: distributed_train eager|function|graph|collectives|mismatch|devices|throw [cuda]\n");
            std::exit(2);
        }
        // Every rank's verdict: the job fails when any rank failed.
        const int total = static_cast<int>(dist::all_reduce(kiln::full({}, f, kiln::int32)).item<std::int32_t>());
        if (dist::rank() == 0)
            std::printf("distributed_train %s on %d ranks%s: %s\n", mode.c_str(), dist::size(), dev == kiln::cpu ? "" : " on the GPU device",
                        total ? "FAILED" : "passed");
        if (total) std::exit(1);
    });
}
