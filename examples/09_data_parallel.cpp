// Data-parallel training on MPI: the reference problem (Dense(64, relu), Dense(1), Adam, MSE, global batches of
// 32) on every rank of an MPI job. Each rank takes its shard of every global batch, and its gradients are averaged
// over the ranks before the optimizer step, so every rank holds the same model: the one a single process would
// train on the same global batches. The step is written in eager style and traced with kiln::function, the
// all-reduce included.
//
//   mpirun -np 2 ./09_data_parallel        (as root: --allow-run-as-root; more ranks than cores: --oversubscribe)
//   ./09_data_parallel                     one process: a job of one rank
#include <kiln/distributed.hpp>

#include <cstdio>

#include "mlp_eager.hpp"

namespace dist = kiln::distributed;

int main() {
    return dist::run([] {
        const mlp::dataset d = mlp::make_data();
        const kiln::tensor x = kiln::from_vector(d.x).reshape({mlp::samples, mlp::features});
        const kiln::tensor y = kiln::from_vector(d.y).reshape({mlp::samples, 1});

        kiln::generator g(static_cast<std::uint64_t>(dist::rank()));  // any seed: rank 0's values are broadcast
        mlp::eager_model model(g);
        dist::broadcast_parameters(model.parameters());
        kiln::optim::adam opt(model.parameters(), mlp::learning_rate);

        auto train_step = kiln::function([&](const kiln::tensor& xb, const kiln::tensor& yb) {
            const double rows = static_cast<double>(xb.shape()[0]);
            kiln::gradient_tape tape;
            const kiln::tensor loss = kiln::nn::mse(model(xb), yb);
            // The global batch's gradient: the ranks' gradients averaged, weighted by their rows.
            const auto grads = dist::all_reduce_mean(tape.gradient(loss, model.parameters()), rows);
            opt.apply_gradients(grads, model.parameters());
            return dist::all_reduce_mean(loss, rows);
        }, {kiln::spec(kiln::float32, {kiln::dyn, mlp::features}), kiln::spec(kiln::float32, {kiln::dyn, 1})});

        // The same shuffled global batches on every rank; each rank takes its slice of each.
        kiln::data::loader data(x, y, mlp::batch_size, {.seed = 7, .shard = {dist::rank(), dist::size()}});
        for (int epoch = 1; epoch <= mlp::epochs; ++epoch) {
            double total = 0;
            for (const kiln::data::batch& b : data) total += train_step(b.x, b.y).item<float>();
            if (dist::rank() == 0)
                std::printf("data parallel on %d ranks  epoch %d  loss %.6f\n", dist::size(), epoch, total / static_cast<double>(data.size()));
        }
        // Every rank holds the same parameters, bit for bit: compare a checksum of them across the ranks.
        double sum = 0;
        for (kiln::variable* p : model.parameters()) sum += kiln::sum(p->to(kiln::float64)).item<double>();
        const kiln::tensor sums = dist::all_gather(kiln::tensor(sum));
        bool same = true;
        for (std::ptrdiff_t r = 1; r < sums.numel(); ++r) same = same && sums.data<double>()[r] == sums.data<double>()[0];
        if (dist::rank() == 0)
            std::printf("%s parameters on every rank after %d traced steps (%zu trace)\n", same ? "identical" : "DIFFERENT",
                        mlp::epochs * static_cast<int>(data.size()), train_step.trace_count());
    });
}
