// Graph mode and traced functions with device tensors: refused with a clear message until they run on the device
// (docs/gpu.md). Built on the emulated device only (test_gpu_modes): nvcc need not compile all of kiln for it.
#include <kiln/kiln.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace kiln::literals;

TEST_CASE("traced functions refuse device arguments and captured device tensors") {
    const kiln::tensor d = kiln::ones({4}, kiln::float32, kiln::cuda);
    auto f = kiln::function([](const kiln::tensor& x) { return x * 2.0f; });
    try {
        (void)f(d);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("argument 0 lives on cuda:0; traced functions run on the CPU for now") !=
              std::string::npos);
    }
    auto g = kiln::function([d](const kiln::tensor& x) { return x + d; });
    CHECK_THROWS_AS((void)g(kiln::ones({4})), kiln::device_error);
    CHECK(kiln::all(kiln::equal(f(kiln::ones({4})), kiln::full({4}, 2.0))).item<bool>());
    // A device move inside the traced code is refused while tracing.
    auto h = kiln::function([](const kiln::tensor& x) { return x.to(kiln::cuda); });
    CHECK_THROWS_AS((void)h(kiln::ones({4})), kiln::trace_error);
}

TEST_CASE("graph mode refuses device feeds") {
    const auto x = kiln::input<"x", float>{};
    const kiln::tensor d = kiln::ones({4}, kiln::float32, kiln::cuda);
    try {
        (void)kiln::run(x * 2_c, x = d);
        FAIL("expected a device_error");
    } catch (const kiln::device_error& e) {
        CHECK(std::string(e.what()).find("graph mode runs on the CPU for now") != std::string::npos);
    }
}
