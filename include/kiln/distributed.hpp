#pragma once
// Data-parallel training across processes on MPI. Opt in: #include <kiln/distributed.hpp> and link
// kiln::distributed (which finds MPI); kiln/kiln.hpp and kiln::kiln need no MPI.
//
//   int main() {
//       return kiln::distributed::run([] {                        // MPI set up once; a throw aborts every rank
//           namespace dist = kiln::distributed;
//           kiln::nn::sequential model(...);                         // any seed: rank 0's values are broadcast
//           dist::broadcast_parameters(model.parameters());
//           kiln::data::loader data(x, y, 256, {.seed = 7, .shard = {dist::rank(), dist::size()}});
//           for (const kiln::data::batch& b : data) {
//               kiln::gradient_tape tape;
//               const kiln::tensor loss = kiln::nn::mse(model(b.x), b.y);
//               auto grads = tape.gradient(loss, model.parameters());
//               grads = dist::all_reduce_mean(grads, double(b.x.shape()[0]));   // the global batch's gradient
//               opt.apply_gradients(grads, model.parameters());
//           }
//       });
//   }
//
// Every collective first compares what each rank passes (the operation, dtype and shape) with one small
// MPI_Allgather, so that ranks that disagree get a kiln::distributed_error naming each rank's tensor instead of
// hanging or reading past a buffer (distributed::set_checks(false) turns the comparison off). Inside a traced
// function (kiln::function) the collectives are effects of the graph, run at every call in program order, so a
// data-parallel training step is still one call. kiln::session steps average their gradients through
// all_reduce_gradients(session). Tensors of every dtype; reductions of bools are logical (or for sum and max, and
// for min).
//
// Tensors on kiln's GPU device (kiln::cuda) take part in every collective, in every mode (docs/distributed.md):
// - with NCCL (compile with KILN_NCCL=1 and link libnccl; the CMake target kiln::nccl does both), their memory goes
//   through NCCL on the device's stream, with one communicator per job made from an id that rank 0 broadcasts over
//   MPI; the host does not wait for the collective;
// - without NCCL (and on the emulated device), their bytes are copied to the host, reduced by MPI and copied back.
// Every rank must pass a tensor on the same kind of device (the signature check compares devices too). A process's
// collectives on GPU tensors all run on one device, the device of its first one (NCCL binds a communicator to one
// device); a later one on another device throws kiln::device_error on every rank. Ranks may use different devices:
// rank r on cuda:r of a shared machine, or each rank's cuda:0 under its own CUDA_VISIBLE_DEVICES (NCCL refuses two
// ranks on one GPU).
//
// The pieces, lowest first: distributed/process.hpp (MPI and NCCL setup, signature checks),
// distributed/transport.hpp (moving a contiguous tensor between ranks) and distributed/collectives.hpp (the API).
#include "distributed/collectives.hpp"
