#!/usr/bin/env bash
# The chain relu(x*y + 0.5*x - y)*2 + y on 2^20 float32 values, op by op: kiln's eager mode against NumPy, in one
# run of this script. Prints both medians and the ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import numpy" 2>/dev/null || pip install -q numpy
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON -DKILN_BUILD_TESTS=OFF \
      -DKILN_BUILD_EXAMPLES=OFF -DKILN_NATIVE=ON >/dev/null
cmake --build build-bench --target bench_eager_ops -j"$(nproc)" >/dev/null
kiln_ns=$(build-bench/bench/bench_eager_ops --benchmark_filter='eager_chain' --benchmark_min_time=0.3 \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json |
  python3 -c "import json,sys; d=json.load(sys.stdin); print([b['real_time'] for b in d['benchmarks'] if b.get('aggregate_name')=='median'][0])")
numpy_ns=$(python3 - <<'PY'
import statistics, timeit
import numpy as np
rng = np.random.default_rng(1)
x = rng.standard_normal(1 << 20, dtype=np.float32)
y = rng.standard_normal(1 << 20, dtype=np.float32)
def chain():
    return np.maximum(x * y + np.float32(0.5) * x - y, np.float32(0)) * np.float32(2) + y
runs = [min(timeit.repeat(chain, number=20, repeat=5)) / 20 for _ in range(5)]
print(statistics.median(runs) * 1e9)
PY
)
python3 -c "k=$kiln_ns; n=$numpy_ns; print(f'kiln eager {k/1e6:.3f} ms, NumPy {n/1e6:.3f} ms, kiln/NumPy time ratio {k/n:.2f}')"
