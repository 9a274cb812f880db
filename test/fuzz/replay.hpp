#pragma once
// Replays files (or every file of directories) through a fuzz target's entry point, so that seed corpora and every
// input that ever crashed run in the test suite without libFuzzer. 0 when every input was handled (loaded or
// refused with a kiln::error), 2 when no input was found.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <vector>

namespace kiln_fuzz {

inline int replay_paths(int (*target)(const std::uint8_t*, std::size_t), int argc, char** argv) {
    std::vector<std::filesystem::path> files;
    for (int i = 0; i < argc; ++i) {
        const std::filesystem::path p(argv[i]);
        if (std::filesystem::is_directory(p)) {
            for (const auto& e : std::filesystem::directory_iterator(p))
                if (e.is_regular_file()) files.push_back(e.path());
        } else if (std::filesystem::is_regular_file(p)) {
            files.push_back(p);
        }
    }
    if (files.empty()) {
        std::cerr << "replay: no inputs found\n";
        return 2;
    }
    for (const auto& f : files) {
        std::ifstream in(f, std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    }
    std::cout << "replay: " << files.size() << " inputs handled\n";
    return 0;
}

}  // namespace kiln_fuzz
