#!/usr/bin/env bash
# Compile time and peak compiler memory at -O2 of the 50-node expression and of the graph-mode training example,
# against a translation unit that only
# includes kiln (the baseline: what any kiln user pays for the headers).
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
flags="-std=c++20 -O2 -Iinclude -c -o /dev/null"
echo '#include <kiln/kiln.hpp>
int main() {}' > /tmp/kiln_include_only.cpp
measure() {
  /usr/bin/time -f "%e %M" $cxx $flags "$1" 2>&1 | tail -1
}
echo '#include <kiln/backend/cpu/run.hpp>
#include <kiln/graph/session.hpp>
int main() {}' > /tmp/kiln_graph_only.cpp
read -r all_s all_kb < <(measure /tmp/kiln_include_only.cpp)
read -r base_s base_kb < <(measure /tmp/kiln_graph_only.cpp)
read -r fifty_s fifty_kb < <(measure bench/compile_time/fifty_nodes.cpp)
read -r train_s train_kb < <(measure examples/03_train_graph.cpp)
echo "| translation unit | seconds | peak MB | ratio to graph-mode headers only |"
echo "|---|---|---|---|"
echo "| include <kiln/kiln.hpp> only (both modes) | $all_s | $((all_kb / 1024)) | $(python3 -c "print(f'{$all_s / $base_s:.2f}x')") |"
echo "| include graph-mode headers only (run.hpp, session.hpp) | $base_s | $((base_kb / 1024)) | 1.00x |"
echo "| 50-node expression, planned and run | $fifty_s | $((fifty_kb / 1024)) | $(python3 -c "print(f'{$fifty_s / $base_s:.2f}x')") |"
echo "| graph-mode training example (examples/03_train_graph.cpp) | $train_s | $((train_kb / 1024)) | $(python3 -c "print(f'{$train_s / $base_s:.2f}x')") |"
