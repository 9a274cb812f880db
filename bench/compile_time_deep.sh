#!/usr/bin/env bash
# Compile time ($CXX, default g++, -O2; user seconds and peak MB) of residual chains h = h + tanh(h), run forward and
# differentiated, at growing depth. Written out as a tree such a graph has 2^depth leaves; its unique nodes grow
# linearly, and so must its compile time. The baseline is a translation unit that only includes kiln.
# usage: [CXX=clang++|clang++-19] [DEPTHS="4 8 12 16 20 24"] [LIMIT=600] bench/compile_time_deep.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
measure() {
  /usr/bin/time -f "%U %M" timeout "${LIMIT:-600}" $cxx -std=c++20 -O2 -Iinclude -c -o /dev/null "$1" 2>&1 | tail -1
}
printf '#include <kiln/kiln.hpp>\nint main() {}\n' > "$dir/base.cpp"
read -r base_s base_kb < <(measure "$dir/base.cpp")
echo "| depth | run + run_into: s | MB | grad + run: s | MB |"
echo "|---|---|---|---|---|"
echo "| 0 (includes only) | $base_s | $((base_kb / 1024)) | $base_s | $((base_kb / 1024)) |"
for depth in ${DEPTHS:-4 8 12 16 20 24}; do
  {
    printf '#include <kiln/kiln.hpp>\n#include <vector>\nint main() {\n'
    printf '    const auto x = kiln::input<"x", double>{};\n    const auto h0 = x;\n'
    for i in $(seq 1 "$depth"); do printf '    const auto h%d = h%d + kiln::tanh(h%d);\n' "$i" $((i - 1)) $((i - 1)); done
    printf '    std::vector<double> v(64, 0.1), o(64);\n'
  } > "$dir/head.cpp"
  { cat "$dir/head.cpp"; printf '    kiln::run_into(o, h%d, x = v);\n    auto r = kiln::run(h%d, x = v);\n    return int(r(0) + o[0]) == 7;\n}\n' "$depth" "$depth"; } > "$dir/fwd.cpp"
  { cat "$dir/head.cpp"; printf '    auto g = kiln::run(kiln::grad(kiln::sum(h%d), x), x = v);\n    return int(g(0)) == 7;\n}\n' "$depth"; } > "$dir/grad.cpp"
  read -r f_s f_kb < <(measure "$dir/fwd.cpp" || echo "timeout 0")
  read -r g_s g_kb < <(measure "$dir/grad.cpp" || echo "timeout 0")
  echo "| $depth | $f_s | $((f_kb / 1024)) | $g_s | $((g_kb / 1024)) |"
done
