// libFuzzer target for kiln::load_npy: any bytes must either load as a tensor whose every byte can be read, or be
// refused with a kiln::error. Built by scripts/fuzz.sh with clang's -fsanitize=fuzzer,address,undefined; the same
// function is replayed over the seed corpus and every input that ever crashed by test/fuzz/replay.cpp in the suite.
#include <kiln/eager/eager.hpp>  // the loader with the tape that its views record on

#include <cstddef>
#include <cstdint>

// Where the sum of the bytes goes, so that reading them is not optimized away.
volatile unsigned npy_fuzz_sink = 0;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const kiln::tensor t = kiln::load_npy_bytes(data, size, "fuzz input");
        // Read every byte of the result, so that a tensor larger than its storage shows under AddressSanitizer.
        const auto* p = static_cast<const unsigned char*>(t.raw_data());
        const std::size_t n = static_cast<std::size_t>(t.numel()) * t.itemsize();
        unsigned sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += p[i];
        if (t.dtype() == kiln::dtype::boolean)
            for (std::size_t i = 0; i < n; ++i)
                if (p[i] > 1) __builtin_trap();  // the loader promises 0 or 1
        npy_fuzz_sink = sum;
    } catch (const kiln::error&) {
        // a refusal is the right answer for a bad file
    }
    return 0;
}
