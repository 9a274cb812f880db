#!/usr/bin/env bash
# Installs what is missing, builds every test (and the examples they run) and runs them all with CTest, twice:
# - built by g++ (build-test/): the optimized suites, function mode's suite, the examples, the compile-time checks
#   and the nvcc build of the GPU tests (its host code compiled by clang++ where it is installed: the unit then
#   takes about 0.8x the CPU);
# - built by clang (build-test-clang/), where clang++ is installed (scripts/install-deps.sh test installs it): the
#   tests at -O0 under AddressSanitizer with UndefinedBehaviorSanitizer (KILN_SANITIZE_ALL; the graph-mode suites
#   that test/CMakeLists.txt names are left to the g++ build), among them the NumPy differential test and the
#   safetensors and ONNX interoperability tests, which run in a virtual environment with NumPy 2, safetensors, onnx
#   and onnxruntime (created under build-test/ when missing), and the concurrency test under ThreadSanitizer. The
#   g++ build leaves out the programs built at -O0 that the clang build runs (KILN_TESTS_UNOPTIMIZED=OFF).
# Without clang, the g++ build builds them all and makes the sanitizer builds instead (ASan and UBSan for the eager,
# tape, function, graph-run and reliability tests and the loaders' corpora, TSan for the concurrency test).
# KILN_TEST_CLANG=0 leaves the clang build out; KILN_TEST_CLANG=/path/to/clang++ picks the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test
venv=build-test/venv
if ! "$venv/bin/python3" -c 'import numpy, sys; sys.exit(int(numpy.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  echo "kiln: creating $venv with NumPy 2 for the differential test"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "numpy>=2,<3"
fi
# Python's safetensors, onnx and onnxruntime packages for the interoperability tests (which say they are skipped
# where this fails).
"$venv/bin/python3" -c 'import safetensors, onnx, onnxruntime' 2>/dev/null ||
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "safetensors>=0.4" "onnx>=1.14" "onnxruntime>=1.16" ||
  echo "kiln: Python's safetensors, onnx or onnxruntime package could not be installed; the safetensors_interop and onnx_export tests will be skipped"
clangxx="${KILN_TEST_CLANG:-clang++}"
if [ "$clangxx" = 0 ] || ! command -v "$clangxx" > /dev/null; then clangxx=""; fi
sanitize=ON
unoptimized=ON
# (The clang build runs the tests under the sanitizers; the g++ build then leaves out those built at -O0, which the
# clang build runs the same way under them: KILN_TESTS_UNOPTIMIZED in test/CMakeLists.txt.)
nvcc_host=()
[ -n "$clangxx" ] && { sanitize=OFF; unoptimized=OFF; nvcc_host=(-DKILN_NVCC_HOST="$(command -v "$clangxx")"); }
# Programs are linked by lld where it is installed (install-deps.sh test installs it): the sanitizer builds' programs
# are about 300 MB each, and GNU ld took 5x lld's CPU to link one.
link=()
command -v ld.lld > /dev/null && link=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld)
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_EXAMPLES=ON "${link[@]}" \
      -DKILN_SANITIZE_TESTS=$sanitize -DKILN_TESTS_UNOPTIMIZED=$unoptimized "${nvcc_host[@]}" -DKILN_PYTHON3="$PWD/$venv/bin/python3" > build-test-configure.log 2>&1 ||
  { cat build-test-configure.log; exit 1; }
cmake --build build-test -j"$(( $(nproc) + 1 ))"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"
if [ -n "$clangxx" ]; then
  echo "kiln: the same suite built by $clangxx, under AddressSanitizer and UBSan (build-test-clang/)"
  # (nvcc's builds are the g++ build's: KILN_USE_CUDA=OFF here.)
  cmake -S . -B build-test-clang -DCMAKE_CXX_COMPILER="$clangxx" -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON "${link[@]}" \
        -DKILN_BUILD_EXAMPLES=OFF -DKILN_SANITIZE_ALL=ON -DKILN_USE_CUDA=OFF -DKILN_PYTHON3="$PWD/$venv/bin/python3" \
        > build-test-clang-configure.log 2>&1 || { cat build-test-clang-configure.log; exit 1; }
  cmake --build build-test-clang -j"$(( $(nproc) + 1 ))"
  ctest --test-dir build-test-clang --output-on-failure -j"$(nproc)"
fi
