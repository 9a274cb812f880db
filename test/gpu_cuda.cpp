// The nvcc build of the device tests: test/gpu.cpp (eager mode) and test/gpu_modes.cpp (graph mode, sessions, traced
// functions) in one translation unit, so that the eager kernels both use are compiled once (nvcc's device passes,
// cicc and ptxas, cost most of the build; two units took 543 s of one core here). Built by the test command as the
// target test_gpu_cuda and run where a GPU exists (exit 77, "skipped", elsewhere). The emulated device's build of the
// same unit by the host compiler is the target test_gpu_emulated, run everywhere.
#define KILN_GPU_TEST_NO_MAIN
#include "gpu.cpp"
#include "gpu_modes.cpp"

int main(int argc, char** argv) { return kiln_test::gpu_main("test_gpu_cuda", argc, argv); }
