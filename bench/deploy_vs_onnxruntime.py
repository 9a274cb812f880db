#!/usr/bin/env python3
"""The reference model at inference: kiln (a traced function, kiln::load, kiln::load_onnx) against ONNX Runtime on
the same ONNX file, one thread, batch 1 and 32 (issue #16). Runs bench_deploy (which writes the files and prints
kiln's times and the save/load table), then times ONNX Runtime the same way, and prints the ratios.

usage: deploy_vs_onnxruntime.py BENCH_DEPLOY WORKDIR   (python with numpy and onnxruntime)
"""
import re
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort


def per_call(f, budget=0.2):
    f()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        s = time.perf_counter() - t0
        if s > budget:
            return s / n
        n *= 2


def main():
    tool, work = sys.argv[1], sys.argv[2]
    out = subprocess.run([tool, work], check=True, capture_output=True, text=True).stdout
    print(out.strip())
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(work + "/reference.onnx", opts, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for batch in (1, 32):
        x = rng.standard_normal((batch, 10)).astype(np.float32)
        t = sorted(per_call(lambda: sess.run(None, {"input_0": x})) for _ in range(5))[2]
        m = re.search(r"batch +%d: traced function ([0-9.]+) us, kiln::load ([0-9.]+) us, kiln::load_onnx ([0-9.]+) us" % batch, out)
        kt, kk, ko = (float(v) for v in m.groups())
        print("batch %2d: ONNX Runtime %.2f us; kiln::load %.2fx of it, kiln::load_onnx %.2fx, the traced function %.2fx"
              % (batch, t * 1e6, kk / (t * 1e6), ko / (t * 1e6), kt / (t * 1e6)))


if __name__ == "__main__":
    main()
