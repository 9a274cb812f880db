#!/usr/bin/env bash
# Installs what is missing, builds the examples and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh demo
cmake -S . -B build-demo -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=ON \
      > build-demo-configure.log 2>&1 || { cat build-demo-configure.log; exit 1; }
cmake --build build-demo -j"$(nproc)"
cd build-demo/examples
for example in ./01_graph_basics ./02_eager_basics ./03_train_graph ./04_train_eager ./05_train_compare; do
  echo "== $example"
  "$example"
done
