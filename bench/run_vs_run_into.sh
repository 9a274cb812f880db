#!/usr/bin/env bash
# kiln::run against kiln::run_into on the chain at 2^24 float32 (64 MiB results), with the old path as a control: a
# fresh default-allocator xt::xarray filled by run_into, which is what kiln::run did before its results came from
# the caching allocator. Interleaved repetitions in one process; prints medians and ratios to run_into.
set -euo pipefail
cd "$(dirname "$0")/.."
bb=build-bench
cmake -S . -B $bb -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON -DKILN_BUILD_TESTS=OFF \
      -DKILN_BUILD_EXAMPLES=OFF -DKILN_NATIVE=ON > $bb.configure.log 2>&1 || { cat $bb.configure.log; exit 1; }
cmake --build $bb --target bench_graph_chain -j"$(nproc)"
$bb/bench/bench_graph_chain --benchmark_filter='^large/' --benchmark_min_time=0.5 --benchmark_repetitions=11 \
  --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \
  --benchmark_out=$bb/run_vs_run_into.json --benchmark_out_format=json >/dev/null
python3 - "$bb/run_vs_run_into.json" <<'PY'
import json, sys
rows = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name, n, threads = b["run_name"].split("/")[1:4]
    rows.setdefault(threads, {})[name] = b["real_time"]
print("| threads | run_into (ms) | kiln::run / run_into | fresh xt::xarray + run_into / run_into |")
print("|---|---|---|---|")
for threads, r in sorted(rows.items()):
    base = r["kiln_run_into"]
    print(f"| {threads.split(':')[1]} | {base / 1e6:.2f} | {r['kiln_run'] / base:.2f} | {r['fresh_xarray_run_into'] / base:.2f} |")
PY
