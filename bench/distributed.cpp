// Data parallelism on MPI (issue #17), a plain program run under mpirun (see bench/RESULTS.md for the commands):
//   bench_distributed allreduce   kiln's all-reduce of float32 buffers of 1 KB to 64 MB against a bare
//                                 MPI_Allreduce of the same buffer, interleaved; kiln with its signature check
//                                 (the default) and without it (distributed::set_checks(false)).
//   bench_distributed step        the larger model (784-512-512-10, relu, cross-entropy against soft labels, Adam,
//                                 a global batch of 256) trained data-parallel in function mode: the time per step, and its parts
//                                 (the step without its all-reduce, and the all-reduce of the gradients alone).
#include <kiln/distributed.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace dist = kiln::distributed;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The median of `reps` timings of f (every rank runs it; a barrier before each).
template <class F>
double median_seconds(int reps, F&& f) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        dist::barrier();
        const double t0 = now();
        f();
        t.push_back(now() - t0);
    }
    std::sort(t.begin(), t.end());
    // The slowest rank's median: a collective takes as long as its slowest rank.
    return dist::all_reduce(kiln::tensor(t[t.size() / 2]), dist::reduce_op::max).item<double>();
}

void allreduce() {
    if (dist::rank() == 0)
        std::printf("all-reduce of float32 on %d ranks (median of the slowest rank)\n%10s %14s %14s %14s %12s %12s\n", dist::size(), "bytes",
                    "MPI_Allreduce", "kiln", "kiln unchecked", "kiln / MPI", "unchk / MPI");
    for (std::ptrdiff_t bytes = 1024; bytes <= (std::ptrdiff_t{64} << 20); bytes *= 4) {
        const std::ptrdiff_t n = bytes / 4;
        kiln::tensor t = kiln::full({n}, 1.0, kiln::float32);
        std::vector<float> raw(static_cast<std::size_t>(n), 1.0f);
        const int reps = bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 20 : 6;
        double mpi = 0, kiln_checked = 0, kiln_unchecked = 0;
        for (int round = 0; round < 3; ++round) {  // interleaved
            mpi += median_seconds(reps, [&] { MPI_Allreduce(MPI_IN_PLACE, raw.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
            kiln_checked += median_seconds(reps, [&] { dist::all_reduce_in_place(t); });
            dist::set_checks(false);
            kiln_unchecked += median_seconds(reps, [&] { dist::all_reduce_in_place(t); });
            dist::set_checks(true);
        }
        if (dist::rank() == 0)
            std::printf("%10td %12.1f us %12.1f us %12.1f us %11.2fx %11.2fx\n", bytes, mpi / 3 * 1e6, kiln_checked / 3 * 1e6,
                        kiln_unchecked / 3 * 1e6, kiln_checked / mpi, kiln_unchecked / mpi);
    }
}

void step() {
    constexpr std::ptrdiff_t global_batch = 256, in = 784, hidden = 512, classes = 10;
    const std::ptrdiff_t local = global_batch / dist::size();
    kiln::generator g(1);
    kiln::nn::dense l1(in, hidden, kiln::nn::relu, g), l2(hidden, hidden, kiln::nn::relu, g), l3(hidden, classes, kiln::nn::identity, g);
    std::vector<kiln::variable*> params{&l1.w, &l1.b, &l2.w, &l2.b, &l3.w, &l3.b};
    dist::broadcast_parameters(params);
    kiln::optim::adam opt(params, 1e-3);
    auto make_step = [&](bool reduce) {
        return kiln::function([&, reduce](const kiln::tensor& x, const kiln::tensor& y) {
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::cross_entropy(l3(l2(l1(x))), y);
            std::vector<kiln::tensor> grads = tape.gradient(loss, params);
            if (reduce) grads = dist::all_reduce_mean(grads);
            opt.apply_gradients(grads, params);
            return loss;
        });
    };
    auto full_step = make_step(true);
    auto compute_only = make_step(false);
    const kiln::tensor x = kiln::randn({local, in}, kiln::float32, g);
    const kiln::tensor y = kiln::nn::softmax(kiln::randn({local, classes}, kiln::float32, g), -1);  // soft labels
    std::vector<kiln::tensor> grads;
    for (kiln::variable* p : params) grads.push_back(kiln::zeros(p->shape()));
    (void)full_step(x, y), (void)compute_only(x, y);  // traced
    double t_step = 0, t_compute = 0, t_reduce = 0;
    const int reps = 20;
    for (int round = 0; round < 3; ++round) {
        t_step += median_seconds(reps, [&] { (void)full_step(x, y).item<float>(); });
        t_compute += median_seconds(reps, [&] { (void)compute_only(x, y).item<float>(); });
        t_reduce += median_seconds(reps, [&] { (void)dist::all_reduce_mean(grads); });
    }
    std::ptrdiff_t count = 0;
    for (kiln::variable* p : params) count += p->numel();
    if (dist::rank() == 0)
        std::printf("784-512-512-10, global batch 256, function mode, %d ranks (%td rows each): step %.2f ms = compute %.2f ms "
                    "+ all-reduce of %td gradients (%.1f MB) %.2f ms\n",
                    dist::size(), local, t_step / 3 * 1e3, t_compute / 3 * 1e3, count, count * 4 / 1e6, t_reduce / 3 * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "";
    return dist::run([&] {
        if (what == "allreduce") allreduce();
        else if (what == "step") step();
        else std::fprintf(stderr, "usage: bench_distributed allreduce|step\n");
    });
}
