#!/usr/bin/env python3
"""One training step of the examples' model in kiln (graph, function and eager mode), PyTorch (eager) and TensorFlow
(eager and tf.function), measured in one run on the same machine. Usage:

    python3 bench/train_vs_peers.py build-bench/bench/bench_train_step

The model: Dense(10 -> 64, relu) -> Dense(64 -> 1), mean squared error, Adam (lr 1e-3), one batch of 32 rows.
Every framework runs single-threaded (at these sizes threads only add hand-off cost) and on the CPU.
PyTorch and TensorFlow come from PyPI (pip install torch tensorflow-cpu); a missing one is reported and skipped.
"""
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

import numpy as np

BATCH, FEATURES, HIDDEN = 32, 10, 64


def best_us(step, seconds=2.0, repeats=5):
    """Median over `repeats` rounds of the mean time per call, each round about seconds / repeats long."""
    for _ in range(50):
        step()
    n = 10
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        dt = time.perf_counter() - t0
        if dt > seconds / repeats / 4:
            break
        n *= 2
    n = max(1, int(n * (seconds / repeats) / dt))
    rounds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    rounds.sort()
    return rounds[len(rounds) // 2]


def kiln_steps(binary):
    out = subprocess.run([binary, "--benchmark_format=json", "--benchmark_repetitions=5",
                          "--benchmark_report_aggregates_only=true", "--benchmark_min_time=0.4"],
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
            res[b["run_name"]] = b["real_time"] * unit
    return res


def data():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
            rng.standard_normal((BATCH, 1)).astype(np.float32))


def torch_step():
    import torch
    torch.set_num_threads(1)
    x, y = (torch.from_numpy(a) for a in data())
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.MSELoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step, torch.__version__


def tf_steps():
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    x, y = (tf.constant(a) for a in data())
    model = tf.keras.Sequential([tf.keras.layers.Dense(HIDDEN, activation="relu"), tf.keras.layers.Dense(1)])
    model.build((None, FEATURES))
    opt = tf.keras.optimizers.Adam(learning_rate=1e-3)

    def eager():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    compiled = tf.function(eager)
    return (lambda: eager().numpy()), (lambda: compiled().numpy()), tf.__version__


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = []
    k = kiln_steps(sys.argv[1])
    graph, function, eager = k["graph_step"], k["function_step"], k["eager_step"]
    rows.append(("kiln graph mode (session)", graph))
    rows.append(("kiln function mode (kiln::function of the eager step)", function))
    rows.append(("kiln eager mode (tape)", eager))
    peers = {}
    try:
        step, version = torch_step()
        peers["torch"] = best_us(step)
        rows.append((f"PyTorch {version} eager", peers["torch"]))
    except ImportError:
        print("PyTorch is not installed (pip install torch); skipped")
    try:
        tf_eager, tf_function, version = tf_steps()
        peers["tf_eager"] = best_us(tf_eager)
        peers["tf_function"] = best_us(tf_function)
        rows.append((f"TensorFlow {version} eager", peers["tf_eager"]))
        rows.append((f"TensorFlow {version} tf.function", peers["tf_function"]))
    except ImportError:
        print("TensorFlow is not installed (pip install tensorflow-cpu); skipped")

    print("| one training step (Dense(64, relu) -> Dense(1), Adam, batch 32) | us per step | time / kiln graph's "
          "| time / kiln function's | time / kiln eager's |")
    print("|---|---:|---:|---:|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {us / graph:.1f} | {us / function:.1f} | {us / eager:.2f} |")


if __name__ == "__main__":
    main()
