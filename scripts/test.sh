#!/usr/bin/env bash
# Installs what is missing, builds every test (and the examples they run) and runs them all with CTest: the plain
# suite, the sanitizer builds (AddressSanitizer with UndefinedBehaviorSanitizer, ThreadSanitizer) and the NumPy
# differential test and the safetensors and ONNX interoperability tests, which run in a virtual environment with
# NumPy 2, safetensors, onnx and onnxruntime (created under build-test/ when missing).
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
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=ON -DKILN_BUILD_EXAMPLES=ON \
      -DKILN_PYTHON3="$PWD/$venv/bin/python3" > build-test-configure.log 2>&1 || { cat build-test-configure.log; exit 1; }
cmake --build build-test -j"$(( $(nproc) + 1 ))"
ctest --test-dir build-test --output-on-failure -j"$(nproc)"
