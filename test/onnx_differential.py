#!/usr/bin/env python3
"""Random programs of the NumPy differential test (numpy_differential.py draws them), traced by kiln as functions,
exported to ONNX and run by ONNX Runtime: ONNX Runtime's results must match kiln's (issue #16).

usage: onnx_differential.py NUMPY_RUNNER WORKDIR [N] [SEED]

Each program runs eagerly in kiln (its result as .npy) and, traced, is exported by kiln::export_onnx. Programs with
an op ONNX cannot express as kiln computes it (kiln::export_onnx says so) are counted, not compared; at least 200
programs must be compared, every exported model must pass onnx.checker, and ONNX Runtime must agree with kiln to
1e-5 relative on floats (the differential test's tolerance on float32) and exactly on integers and bools, but for
integers that overflow (programs whose integer inputs hold their dtype's ends): ONNX leaves integer overflow
unspecified, so those are counted and printed, not compared.
Exit 77 (a skip, which CTest reports as such) when onnx or onnxruntime cannot be imported, saying so.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:
    print("onnx_differential: SKIPPED: the onnx or onnxruntime package cannot be imported (%s)" % e)
    sys.exit(77)
import numpy_differential as nd  # noqa: E402 - the program generator


def extreme_integers(arrays):
    """Whether an integer array holds its dtype's largest or smallest values (or one short of them)."""
    for a in arrays:
        if a.dtype.kind in "iu" and a.size:
            info = np.iinfo(a.dtype)
            if np.any((a >= info.max - 1) | (a <= info.min + 1)):
                return True
    return False


def main():
    runner, work = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 20261202
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "out"))
    rng = np.random.default_rng(seed)
    programs, inputs = [], {}
    for i in range(n):
        lines, _ = nd.draw_case(rng, work, "c%d" % i)
        programs += lines
        inputs["c%d" % i] = [ln.split()[2] for ln in lines if ln.startswith("load ")]
    cases = os.path.join(work, "cases.txt")
    with open(cases, "w") as f:
        f.write("\n".join(programs) + "\n")
    run = subprocess.run([runner, cases, os.path.join(work, "out"), "--onnx"], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        print("onnx_differential: the runner failed")
        return 1
    compared, unsupported, runtime_lacks, overflowed, failures, reasons = 0, 0, 0, 0, [], {}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    for cid, files in inputs.items():
        base = os.path.join(work, "out", cid)
        if not os.path.exists(base + ".npy"):
            continue  # the program raised a kiln::error eagerly (not an ONNX question)
        if os.path.exists(base + ".onnx.err"):
            unsupported += 1
            why = open(base + ".onnx.err").read().strip()
            key = why.split("cannot be exported to ONNX")[0].split("(")[-1] if "cannot be exported" in why else why[:60]
            reasons[key] = reasons.get(key, 0) + 1
            continue
        want = np.load(base + ".npy")
        try:
            model = onnx.load(base + ".onnx")
            onnx.checker.check_model(model, full_check=True)
            sess = ort.InferenceSession(base + ".onnx", opts, providers=["CPUExecutionProvider"])
            feeds = {"input_%d" % k: np.load(f) for k, f in enumerate(files)}
            got = sess.run(None, feeds)[0]
        except Exception as e:  # noqa: BLE001
            if "NOT_IMPLEMENTED" in str(e):  # a valid model whose kernel ONNX Runtime lacks (Erf on float64)
                runtime_lacks += 1
                print("%s: ONNX Runtime has no kernel for it: %s" % (cid, str(e)[:200]))
                continue
            failures.append((cid, "checker or ONNX Runtime refused it: %s" % str(e)[:300]))
            continue
        compared += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            failures.append((cid, "ONNX Runtime gave %s%s, kiln %s%s" % (got.dtype, got.shape, want.dtype, want.shape)))
            continue
        if want.dtype.kind == "f":
            finite = want[np.isfinite(want)]
            scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
            ok = np.allclose(got, want, rtol=1e-5, atol=1e-5 * scale, equal_nan=True) and \
                np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
        else:
            ok = np.array_equal(got, want)
            if not ok and extreme_integers(feeds.values()):
                # Integers at their dtype's ends (drawn on purpose) overflow: kiln wraps as NumPy does, and ONNX
                # leaves integer overflow unspecified (ONNX Runtime 1.32's int64 ReduceProd gives INT64_MIN).
                overflowed += 1
                print("%s: integer overflow, which ONNX leaves unspecified: kiln %s, ONNX Runtime %s"
                      % (cid, want.ravel()[:4], got.ravel()[:4]))
                continue
        if not ok:
            worst = float(np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
            failures.append((cid, "values differ (largest difference %g)" % worst))
    for cid, why in failures[:10]:
        lines = [ln for ln in programs if ln]  # (the program's statements)
        start = programs.index("case %s" % cid)
        end = next((i for i in range(start + 1, len(programs)) if programs[i].startswith("case ")), len(programs))
        print("%s: %s\n    %s" % (cid, why, "\n    ".join(programs[start + 1:end])))
    print("onnx_differential: %d programs (seed %d): %d compared with ONNX Runtime, %d not exportable %s, "
          "%d valid models ONNX Runtime has no kernel for, %d integer results that overflowed, %d disagreements"
          % (n, seed, compared, unsupported, dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:8]), runtime_lacks,
             overflowed, len(failures)))
    if compared < 200:
        print("onnx_differential: fewer than 200 programs compared")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
