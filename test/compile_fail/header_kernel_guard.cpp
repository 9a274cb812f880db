// expect: an eager kernel was instantiated by code in kiln's headers
// The control of the test "headers_compile_no_kernels": the guard it relies on fires at a kernel's instantiation.
#define KILN_DETAIL_NO_HEADER_KERNELS
#include <kiln/kiln.hpp>

int main() {
    const kiln::tensor a = kiln::ones({2});
    return (a * a).numel() == 2 ? 0 : 1;
}
