// Replays files through the fuzz target of a loader (test/fuzz/<loader>_fuzz.cpp), so that the seed corpus and every
// input that ever crashed run in the test suite without libFuzzer. Usage: replay <directory or file>...
// Exit status 0 when every input was handled (loaded or refused with a kiln::error), 2 when no input was found.
#include <cstddef>
#include <cstdint>

#include "replay.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) { return kiln_fuzz::replay_paths(&LLVMFuzzerTestOneInput, argc - 1, argv + 1); }
