// libFuzzer target for kiln::load_onnx_bytes: any bytes must either load as a model that then runs on zeros of its
// inputs' shapes, or be refused with a kiln::error. Built by scripts/fuzz.sh with clang's
// -fsanitize=fuzzer,address,undefined; the same function is replayed over the seed corpus (ONNX files written by
// the tests) and every input that ever crashed by test/fuzz/replay.cpp in the suite.
#include <kiln/io/onnx.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const kiln::loaded_function f = kiln::load_onnx_bytes(data, size, "fuzz input", {.max_node_bytes = 1 << 20});
        std::vector<kiln::tensor> args;
        std::size_t d = 0;
        for (const kiln::spec& s : f.signature()) {
            kiln::dims shape;
            shape.rank = static_cast<int>(s.shape.size());
            for (std::size_t i = 0; i < s.shape.size(); ++i)
                shape[static_cast<int>(i)] = s.shape[i] == kiln::dyn ? f.traced_extents()[d++] : s.shape[i];
            args.push_back(kiln::zeros(shape, s.dtype));
        }
        unsigned sum = 0;
        for (const kiln::tensor& t : f(args)) {
            const kiln::tensor c = t.contiguous();
            const auto* p = static_cast<const unsigned char*>(c.raw_data());
            for (std::size_t i = 0, n = static_cast<std::size_t>(c.numel()) * c.itemsize(); i < n; ++i) sum += p[i];
        }
        [[maybe_unused]] static volatile unsigned sink;
        sink = sum;
    } catch (const kiln::error&) {
        // a refusal is the right answer for a bad file
    }
    return 0;
}
