// libFuzzer target for kiln::load_bytes (traced functions as files): any bytes must either load as a function that
// then runs on zeros of its signature (at its traced extents) or throws a kiln::error, or be refused with a
// kiln::error. Built by scripts/fuzz.sh with clang's -fsanitize=fuzzer,address,undefined; the same function is
// replayed over the seed corpus and every input that ever crashed by test/io_tool.cpp (replay function) in the suite.
#include "run_loaded.hpp"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        // (A small limit on each node's result: the loader runs every op once while it checks the file.)
        kiln_fuzz::run_loaded(kiln::load_bytes(data, size, "fuzz input", {.max_node_bytes = 1 << 20}));
    } catch (const kiln::error&) {
        // a refusal is the right answer for a bad file
    }
    return 0;
}
