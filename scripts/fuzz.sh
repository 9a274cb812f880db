#!/usr/bin/env bash
# Fuzzes one of kiln's file loaders with libFuzzer for a given time.
# usage: scripts/fuzz.sh TARGET SECONDS    (TARGET: npy, safetensors, function or onnx; the target is test/fuzz/TARGET_fuzz.cpp)
# Builds the target with clang++ and -fsanitize=fuzzer,address,undefined in build-fuzz/, runs it over a working copy
# of test/fuzz/corpus/TARGET (new inputs that widen coverage are kept in build-fuzz/corpus-TARGET), and copies every
# crashing input into test/fuzz/crashes/TARGET/, which the test suite replays (test/fuzz/replay.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:?usage: scripts/fuzz.sh TARGET SECONDS}"
seconds="${2:?usage: scripts/fuzz.sh TARGET SECONDS}"
src="test/fuzz/${target}_fuzz.cpp"
[ -f "$src" ] || { echo "fuzz.sh: no fuzz target $src" >&2; exit 2; }
clangxx="$(command -v clang++ || command -v clang++-14 || true)"
[ -n "$clangxx" ] || { echo "fuzz.sh: clang++ is needed (scripts/install-deps.sh test installs it)" >&2; exit 2; }
mkdir -p build-fuzz "build-fuzz/corpus-$target" "test/fuzz/crashes/$target" "build-fuzz/artifacts-$target"
bin="build-fuzz/${target}_fuzz"
xtensor_inc="$(dirname "$(find /usr/include /usr/local/include -name xtensor.hpp -path '*xtensor/*' 2>/dev/null | head -1)")/.."
"$clangxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DKILN_HAVE_CBLAS=0 \
  -Iinclude -I"$xtensor_inc" "$src" -o "$bin" -pthread
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=1"
set +e
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="build-fuzz/artifacts-$target/" "build-fuzz/corpus-$target" "test/fuzz/corpus/$target"
status=$?
set -e
found=0
for f in build-fuzz/artifacts-"$target"/*; do
  [ -f "$f" ] || continue
  cp "$f" "test/fuzz/crashes/$target/"
  found=$((found + 1))
done
echo "fuzz.sh: $target ran ${seconds}s, exit status $status, $found crashing inputs copied to test/fuzz/crashes/$target/"
[ "$status" -eq 0 ] && [ "$found" -eq 0 ]
