// libFuzzer target for kiln::load_safetensors: any bytes must either load as named tensors whose every byte can be
// read, or be refused with a kiln::error. Built by scripts/fuzz.sh with clang's -fsanitize=fuzzer,address,undefined;
// the same function is replayed over the seed corpus and every input that ever crashed by test/fuzz/replay.cpp in
// the suite.
#include <kiln/io/safetensors.hpp>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const kiln::tensor_file f = kiln::load_safetensors_bytes(data, size, "fuzz input");
        unsigned sum = 0;
        for (const auto& [name, t] : f.tensors) {
            // Read every byte of each tensor, so that a tensor larger than its storage shows under AddressSanitizer.
            const auto* p = static_cast<const unsigned char*>(t.raw_data());
            const std::size_t n = static_cast<std::size_t>(t.numel()) * t.itemsize();
            for (std::size_t i = 0; i < n; ++i) sum += p[i];
            if (t.dtype() == kiln::dtype::boolean)
                for (std::size_t i = 0; i < n; ++i)
                    if (p[i] > 1) __builtin_trap();  // the loader promises 0 or 1
            for (char c : name) sum += static_cast<unsigned char>(c);
        }
        [[maybe_unused]] static volatile unsigned sink;
        sink = sum;
    } catch (const kiln::error&) {
        // a refusal is the right answer for a bad file
    }
    return 0;
}
