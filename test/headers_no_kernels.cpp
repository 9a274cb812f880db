// Compiled (not run) by the test "headers_compile_no_kernels" with KILN_DETAIL_NO_HEADER_KERNELS: including kiln's
// headers and calling nothing must compile no eager kernel (core/config.hpp says why; a kernel instantiated by
// inline code in a header cost every translation unit 0.2 to 0.4 s of CPU per op). The guard's own control is
// test/compile_fail/header_kernel_guard.cpp.
#include <kiln/function.hpp>
#include <kiln/graph.hpp>
#include <kiln/io.hpp>
#include <kiln/kiln.hpp>
#include <kiln/registry.hpp>

int main() {}
