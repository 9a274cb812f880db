// The nvcc build of the device tests: test/gpu.cpp (eager mode), test/gpu_modes.cpp (graph mode, sessions, traced
// functions) and test/thrust_lowering.cpp (graph-mode expressions through thrust::transform) in one translation unit,
// so that the kernels they share are compiled once (nvcc's front end and device pass, cudafe++ and cicc, cost most of
// the build: three units took 1.66x its CPU). Built by the test command as the target test_gpu_cuda and run where a
// GPU exists (exit 77, "skipped", elsewhere). The emulated device's build of the same unit by the host compiler is
// the target test_gpu_emulated, run everywhere.
//
// Built with KILN_NCCL (and MPI), the unit also holds the data-parallel test with NCCL (test/distributed_train.cpp):
// `test_gpu_cuda MODE cuda` runs its MODE on one rank (that test's nvcc build of its own took 218 s of CPU here).
// The emulated device's build holds it too where MPI is found (KILN_GPU_TEST_DISTRIBUTED): `mpirun -n 2
// test_gpu_emulated eager cuda` runs the data-parallel test on the emulated device, with GPU tensors' collectives
// through the host (a program of its own cost 109 s of CPU under clang's sanitizers for kernels this unit compiles).
#define KILN_GPU_TEST_NO_MAIN
#include "gpu.cpp"
#include "gpu_modes.cpp"
#include "thrust_lowering.cpp"

#if defined(KILN_NCCL) || defined(KILN_GPU_TEST_DISTRIBUTED)
#define KILN_GPU_TEST_WITH_DISTRIBUTED 1
#define KILN_DISTRIBUTED_TEST_MAIN distributed_main
#include "distributed_train.cpp"
#endif

int main(int argc, char** argv) {
#if defined(KILN_GPU_TEST_WITH_DISTRIBUTED)
    if (argc > 1 && argv[1][0] != '-') return distributed_main(argc, argv);
#endif
    return kiln_test::gpu_main("test_gpu_cuda", argc, argv);
}
