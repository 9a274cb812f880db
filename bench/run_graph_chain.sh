#!/usr/bin/env bash
# Builds and runs the graph-chain benchmark (-O3 -march=native) and prints the ratio table for RESULTS.md.
# CXX=clang++ bench/run_graph_chain.sh builds with another compiler, in build-bench-clang++.
set -euo pipefail
cd "$(dirname "$0")/.."
bb=build-bench${CXX:+-${CXX##*/}}
cmake -S . -B $bb -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON -DKILN_BUILD_TESTS=OFF \
      -DKILN_BUILD_EXAMPLES=OFF -DKILN_NATIVE=ON >/dev/null
cmake --build $bb --target bench_graph_chain -j"$(nproc)"
# Separate repetitions, interleaved in random order: the time and bandwidth tables.
$bb/bench/bench_graph_chain --benchmark_filter=-paired --benchmark_min_time=0.1 --benchmark_repetitions=15 \
  --benchmark_enable_random_interleaving=true \
  --benchmark_out=$bb/bench_graph_chain.json --benchmark_out_format=json >/dev/null
# Paired rounds (kiln and each peer timed back to back, about 2 s per row), in five processes: the kiln-over-peer
# table. One process cancels the VM's drift; separate processes show what it cannot cancel (code and data layout).
paired=()
for p in 1 2 3 4 5; do
  $bb/bench/bench_graph_chain --benchmark_filter=paired \
    --benchmark_out=$bb/bench_graph_chain_paired_$p.json --benchmark_out_format=json >/dev/null
  paired+=($bb/bench_graph_chain_paired_$p.json)
done
python3 bench/report.py $bb/bench_graph_chain.json "${paired[@]}"
