// The file tests' programs in one translation unit (each would otherwise compile every op's kernels again for the
// loaders, about a minute of CPU apiece in the test command):
//   io_tool deploy-write DIR         test/deploy_writer.cpp (its reader, test/deploy_reader.cpp, is a program of its
//                                    own: it must run without the model's code)
//   io_tool onnx export|import DIR   test/onnx_tool.cpp
//   io_tool replay function|onnx PATH...   the fuzz targets of test/fuzz/ over files (test/fuzz/replay.hpp)
#include <kiln/io.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "../examples/mlp_eager.hpp"
#include "../examples/mlp_graph.hpp"
#include "fuzz/replay.hpp"
#include "fuzz/run_loaded.hpp"

namespace writer {
#define main deploy_writer_main
#include "deploy_writer.cpp"
#undef main
}  // namespace writer
namespace onnx_tool {
#define main onnx_tool_main
#include "onnx_tool.cpp"
#undef main
}  // namespace onnx_tool
#define LLVMFuzzerTestOneInput kiln_fuzz_function
#include "fuzz/function_fuzz.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput kiln_fuzz_onnx
#include "fuzz/onnx_fuzz.cpp"
#undef LLVMFuzzerTestOneInput


int main(int argc, char** argv) {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "deploy-write") return writer::deploy_writer_main(argc - 1, argv + 1);
    if (cmd == "onnx") return onnx_tool::onnx_tool_main(argc - 1, argv + 1);
    if (cmd == "replay" && argc > 2 && std::string(argv[2]) == "function") return kiln_fuzz::replay_paths(&kiln_fuzz_function, argc - 3, argv + 3);
    if (cmd == "replay" && argc > 2 && std::string(argv[2]) == "onnx") return kiln_fuzz::replay_paths(&kiln_fuzz_onnx, argc - 3, argv + 3);
    std::fprintf(stderr, "usage: io_tool deploy-write DIR | onnx export|import DIR | replay function|onnx PATH...\n");
    return 2;
}
