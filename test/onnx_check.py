#!/usr/bin/env python3
"""kiln's ONNX export against the onnx package and ONNX Runtime (issue #16).

usage: onnx_check.py ONNX_TOOL WORKDIR

ONNX_TOOL export WORKDIR writes models and kiln's results on their inputs; each model must pass
onnx.checker.check_model(full_check=True), and ONNX Runtime's outputs on the same inputs must match kiln's to 1e-5
relative (exactly for integers and bools). Exit 77 (a skip, which CTest reports as such) when onnx or onnxruntime
cannot be imported, saying so.
"""
import glob
import os
import subprocess
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from safetensors.numpy import load_file
except ImportError as e:  # the test command installs them where PyPI can be reached
    print("onnx_check: SKIPPED: the onnx, onnxruntime or safetensors package cannot be imported (%s)" % e)
    sys.exit(77)

tool, work = sys.argv[1], sys.argv[2]
subprocess.run([tool, "export", work], check=True)
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


models = sorted(glob.glob(os.path.join(work, "*.onnx")))
check(len(models) >= 4, "the tool wrote %d models" % len(models))
for path in models:
    name = os.path.basename(path)[:-5]
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
        check(True, "%s: onnx.checker accepts it (full check)" % name)
    except Exception as e:  # noqa: BLE001 - the checker's own exception types vary by version
        check(False, "%s: onnx.checker: %s" % (name, e))
        continue
    check(model.ir_version == 8 and [o.version for o in model.opset_import if o.domain == ""] == [17],
          "%s: IR version 8, opset 17" % name)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    ref = load_file(path[:-5] + ".safetensors")
    cases = sorted({k.split("/")[1] for k in ref})
    for c in cases:
        feeds = {}
        k = 0
        while "input_%d/%s" % (k, c) in ref:
            feeds["input_%d" % k] = ref["input_%d/%s" % (k, c)]
            k += 1
        outs = session.run(None, feeds)
        for j, got in enumerate(outs):
            want = ref.get("output_%d/%s" % (j, c))
            if want is None:
                check(False, "%s case %s: kiln has no output %d" % (name, c, j))
                continue
            ok = got.dtype == want.dtype and got.shape == want.shape
            if ok and want.dtype.kind == "f":
                ok = bool(np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True))
                err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-6))) if want.size else 0.0
            else:
                ok = ok and bool(np.array_equal(got, want))
                err = 0.0
            check(ok, "%s case %s output %d: %s %s, ONNX Runtime agrees (largest relative difference %.2e)" %
                  (name, c, j, want.dtype, want.shape, err))

if failures:
    print("onnx_check: %d failures" % len(failures))
    sys.exit(1)
print("onnx_check: every model passes the checker and ONNX Runtime agrees with kiln")
