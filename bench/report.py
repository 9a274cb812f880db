#!/usr/bin/env python3
"""Turns Google Benchmark JSON from bench_graph_chain into the markdown tables of bench/RESULTS.md.

Every figure is a ratio against a baseline from the same run: time relative to the hand-written fused loop, and
bandwidth relative to the STREAM triad (all contenders move 3 * n * 4 bytes per run, as the triad does).
"""
import json
import sys
from collections import defaultdict


def shape(b):
    parts = b["run_name"].split("/") if "run_name" in b else b["name"].split("/")
    return parts[0], int(parts[1].split(":")[1]), int(parts[2].split(":")[1])


def paired_table(paths):
    # Each round of the paired benchmark times kiln and every peer back to back; a process reports the median of
    # kiln's time over each peer's across its rounds. The table gives the median over processes and the lowest and
    # highest process: the spread between processes is what a single process cannot cancel.
    per = defaultdict(lambda: defaultdict(list))
    rounds = defaultdict(list)
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data["benchmarks"]:
            contender, n, threads = shape(b)
            if contender != "paired":
                continue
            rounds[(n, threads)].append(int(b["rounds"]))
            for p in ("eigen", "xtensor", "hand"):
                per[(n, threads)][p].append(b["over_" + p])
            if "eigen_copy_over_eigen" in b:
                per[(n, threads)]["control"].append(b["eigen_copy_over_eigen"])

    def median(v):
        v = sorted(v)
        return v[len(v) // 2]

    print()
    print(f"kiln_run_into's time over each peer's in paired rounds, {len(paths)} processes: median over processes "
          "[lowest, highest] (below 1.00 kiln is faster):")
    print()
    print("Control: a second copy of Eigen's loop over Eigen, timed in the same rounds (identical code at another")
    print("address; how far from 1.000 it lands is the resolution of the / Eigen column).")
    print()
    print("| n | threads | rounds per process | / Eigen | / xtensor | / hand loop | control: Eigen copy / Eigen |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(per):
        n, threads = key
        cells = [f"{median(v):.3f} [{min(v):.3f}, {max(v):.3f}]" if v else "-"
                 for v in (per[key][p] for p in ("eigen", "xtensor", "hand", "control"))]
        print(f"| 2^{n.bit_length() - 1} | {threads} | {median(rounds[key])} | " + " | ".join(cells) + " |")


def main(path, paired_paths=()):
    with open(path) as f:
        data = json.load(f)
    # Every repetition of every contender, interleaved in random order by the run script, so that the VM's drifts
    # in speed fall on all contenders alike. The first table uses medians; the second compares kiln with the peers
    # by the median and by the minimum (the run least disturbed by other load) of the same run.
    runs = defaultdict(lambda: defaultdict(list))
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        contender, n, threads = shape(b)
        runs[(n, threads)][contender].append((b["real_time"], b.get("bytes_per_second", 0.0)))

    def median(v):
        v = sorted(v)
        return v[len(v) // 2]

    rows = {}
    for key, by in runs.items():
        rows[key] = {c: (median([t for t, _ in v]), median([bw for _, bw in v]), min(t for t, _ in v))
                     for c, v in by.items()}
    contenders = ["kiln_run_into", "kiln_run", "hand_loop", "eigen_array", "xtensor_noalias", "unfused"]
    print("| n | threads | hand loop | triad GB/s | " + " | ".join(c for c in contenders) + " |")
    print("|---|---|---|---|" + "---|" * len(contenders))
    for (n, threads) in sorted(rows):
        r = rows[(n, threads)]
        hand_t = r["hand_loop"][0]
        triad_bw = r["stream_triad"][1]
        cells = []
        for c in contenders:
            t, bw, _ = r[c]
            cells.append(f"{t / hand_t:.2f}x time, {bw / triad_bw:.0%} bw")
        unit = "us" if hand_t >= 1000 else "ns"
        shown = hand_t / 1000 if unit == "us" else hand_t
        print(f"| 2^{n.bit_length() - 1} | {threads} | {shown:.1f} {unit} | {triad_bw / 1e9:.1f} | " +
              " | ".join(cells) + " |")
    reps = min(len(v) for by in runs.values() for v in by.values())
    print()
    print(f"kiln_run_into's time over each peer's ({reps} interleaved repetitions; below 1.00 kiln is faster):")
    print()
    print("| n | threads | / Eigen, median | / Eigen, min | / xtensor, median | / xtensor, min |")
    print("|---|---|---|---|---|---|")
    for (n, threads) in sorted(rows):
        r = rows[(n, threads)]
        k = r["kiln_run_into"]
        e = r["eigen_array"]
        x = r["xtensor_noalias"]
        print(f"| 2^{n.bit_length() - 1} | {threads} | {k[0] / e[0]:.2f} | {k[2] / e[2]:.2f} | "
              f"{k[0] / x[0]:.2f} | {k[2] / x[2]:.2f} |")
    if paired_paths:
        paired_table(paired_paths)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench_graph_chain.json", sys.argv[2:])
