#!/usr/bin/env bash
# Installs what is missing, builds the flagship examples for this machine's CPU (-march=native, as the benchmarks
# are built) and runs them: 01 (a graph: folding, printing, one fused loop) and 05 (one model trained in graph,
# function and eager mode, timed step by step). Two programs keep the demo near a minute and a half of CPU; the other
# examples build with `cmake --build build-demo --target <name>`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh demo
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=ON -DKILN_NATIVE=ON \
      > build-demo-configure.log 2>&1 || { cat build-demo-configure.log; exit 1; }
cmake --build build-demo -j"$(nproc)" --target 01_graph_basics 05_train_compare
cd build-demo/examples
for example in ./01_graph_basics ./05_train_compare; do
  echo "== $example"
  "$example"
done
