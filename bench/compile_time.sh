#!/usr/bin/env bash
# Compile time and peak compiler memory at -O2: what a program pays for kiln's headers, against xtensor's own
# <xtensor/xarray.hpp> compiled in the same run (the baseline), what kiln.hpp includes from outside kiln alone (the
# floor under kiln.hpp), the 50-node expression and the graph-mode training example. Each translation unit is
# compiled ROUNDS times (default 3), interleaved; the median is shown.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
rounds=${ROUNDS:-3}
flags="-std=c++20 -O2 -Iinclude -c -o /dev/null"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <xtensor/xarray.hpp>\nint main() {}\n' > "$tmp/xtensor_only.cpp"
printf '#include <kiln/kiln.hpp>\nint main() {}\n' > "$tmp/kiln_all.cpp"
printf '#include <kiln/graph.hpp>\nint main() {}\n' > "$tmp/kiln_graph.cpp"
units=("$tmp/xtensor_only.cpp" bench/compile_time/dependencies_only.cpp "$tmp/kiln_all.cpp" "$tmp/kiln_graph.cpp" bench/compile_time/fifty_nodes.cpp
       examples/03_train_graph.cpp bench/compile_time/eager_ops.cpp bench/compile_time/eager_ops.cpp)
labels=("include <xtensor/xarray.hpp> only (baseline)"
        "kiln.hpp's dependencies only: std, xsimd, xtensor (bench/compile_time/dependencies_only.cpp)"
        "include <kiln/kiln.hpp> only (both modes)"
        "include <kiln/graph.hpp> only (graph mode)" "50-node expression, planned and run"
        "graph-mode training example (examples/03_train_graph.cpp)"
        "twelve eager ops (bench/compile_time/eager_ops.cpp)"
        "the same with -DKILN_SEPARATE_KERNELS (kernels compiled in another unit)")
extra=("" "" "" "" "" "" "" "-DKILN_SEPARATE_KERNELS")
declare -A secs mem
for ((r = 0; r < rounds; r++)); do
  for i in "${!units[@]}"; do
    read -r s kb < <(/usr/bin/time -f "%U %M" $cxx $flags ${extra[$i]} "${units[$i]}" 2>&1 | tail -1)
    secs[$i]="${secs[$i]:-} $s"
    mem[$i]=$kb
  done
done
median() { tr ' ' '\n' <<< "$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
base=$(median "${secs[0]}")
echo "| translation unit | user seconds (median of $rounds) | runs | peak MB | ratio to xtensor |"
echo "|---|---:|---|---:|---:|"
for i in "${!units[@]}"; do
  m=$(median "${secs[$i]}")
  echo "| ${labels[$i]} | $m |${secs[$i]} | $((mem[$i] / 1024)) | $(python3 -c "print(f'{$m / $base:.2f}x')") |"
done
