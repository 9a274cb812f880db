#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_graph_chain into the markdown tables of bench/RESULTS.md.

Every figure is a ratio against a baseline from the same run: time relative to the hand-written fused loop, and
bandwidth relative to the STREAM triad (all contenders move 3 * n * 4 bytes per run, as the triad does).
"""
import json
import sys
from collections import defaultdict


def main(path):
    with open(path) as f:
        data = json.load(f)
    # Prefer medians when repetitions were run.
    rows = defaultdict(dict)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        parts = name.split("/")
        contender = parts[0]
        n = int(parts[1].split(":")[1])
        threads = int(parts[2].split(":")[1])
        rows[(n, threads)][contender] = (b["real_time"], b.get("bytes_per_second", 0.0))
    contenders = ["kiln_run_into", "kiln_run", "hand_loop", "eigen_array", "xtensor_noalias", "unfused"]
    print("| n | threads | hand loop | triad GB/s | " + " | ".join(c for c in contenders) + " |")
    print("|---|---|---|---|" + "---|" * len(contenders))
    for (n, threads) in sorted(rows):
        r = rows[(n, threads)]
        hand_t = r["hand_loop"][0]
        triad_bw = r["stream_triad"][1]
        cells = []
        for c in contenders:
            t, bw = r[c]
            cells.append(f"{t / hand_t:.2f}x time, {bw / triad_bw:.0%} bw")
        unit = "us" if hand_t >= 1000 else "ns"
        shown = hand_t / 1000 if unit == "us" else hand_t
        print(f"| 2^{n.bit_length() - 1} | {threads} | {shown:.1f} {unit} | {triad_bw / 1e9:.1f} | " +
              " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench_graph_chain.json")
