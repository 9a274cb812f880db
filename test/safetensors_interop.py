#!/usr/bin/env python3
"""kiln's safetensors files against Python's `safetensors` package, both ways (issue #16).

usage: safetensors_interop.py SAFETENSORS_TOOL WORKDIR

1. kiln writes (safetensors_tool write); safetensors.numpy.load_file reads it and safe_open reads its metadata;
   every value is compared with the values written out by hand below.
2. safetensors.numpy.save_file writes tensors of every dtype kiln has, and of the narrower ones kiln reads widened
   (I8 to U64, F16); kiln loads them (safetensors_tool dump) and every printed value is compared with NumPy's.
Exit 77 (a skip, which CTest reports as such) when `safetensors` cannot be imported, saying so.
"""
import math
import os
import subprocess
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file
except ImportError as e:  # the test command installs it where PyPI can be reached
    print("safetensors_interop: SKIPPED: Python's safetensors package cannot be imported (%s)" % e)
    sys.exit(77)

tool, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failures.append(what)


# ---- kiln writes, safetensors reads ----
path = os.path.join(work, "from_kiln.safetensors")
subprocess.run([tool, "write", path], check=True)
t = load_file(path)
expect = {
    "weights/f64": np.array([[1.5, -2.25, 1e300], [-0.0, 5e-324, 3.0]], dtype=np.float64),
    "weights/f32_t": np.array([[1.5, -0.0], [-2.25, 5e-324]], dtype=np.float32),
    "counts/i32": np.array([-2**31, 0, 7], dtype=np.int32),
    "counts/i64": np.array([[2**53 + 1, -1]], dtype=np.int64),
    "mask": np.array([[True, False], [False, True]]),
    "empty": np.zeros((3, 0), dtype=np.float32),
    "scalar": np.array(42, dtype=np.int64),
}
check(sorted(t) == sorted(expect), "kiln's file holds the tensors written: %s" % sorted(t))
for name, want in expect.items():
    got = t.get(name)
    ok = got is not None and got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    check(ok, "%s: %s %s, bit for bit" % (name, want.dtype, want.shape))
with safe_open(path, framework="numpy") as f:
    meta = f.metadata()
check(meta == {"written_by": "kiln", "caf\u00e9": "cr\u00e8me"}, "kiln's metadata reads back: %s" % meta)

# ---- safetensors writes, kiln reads ----
path2 = os.path.join(work, "from_python.safetensors")
arrays = {
    "b": np.array([[True, False, True]]),
    "i32": np.array([2**31 - 1, -5], dtype=np.int32),
    "i64": np.arange(6, dtype=np.int64).reshape(2, 1, 3) - 2**40,
    "f32": np.array([0.1, -1e-38, np.inf], dtype=np.float32),
    "f64": np.array([[math.pi, -0.0], [1e-310, 2.0]], dtype=np.float64),
    "zero_d": np.array(0.5, dtype=np.float64),
    "layer.0.weight \u00e9": np.ones((2, 2), dtype=np.float32),
    # dtypes kiln lacks, read widened: the small integers to int32, U32 and U64 to int64, F16 to float32
    "narrow/i8": np.array([-128, -1, 127], dtype=np.int8),
    "narrow/i16": np.array([[-32768], [32767]], dtype=np.int16),
    "narrow/u8": np.array([0, 200, 255], dtype=np.uint8),
    "narrow/u16": np.array([65535, 1], dtype=np.uint16),
    "narrow/u32": np.array([4294967295, 0], dtype=np.uint32),
    "narrow/u64": np.array([2**63 - 1, 3], dtype=np.uint64),
    "narrow/f16": np.array([1.0, -2.5, 65504.0, 2.0**-24, -0.0, np.inf], dtype=np.float16),
}
widened = {np.int8: np.int32, np.int16: np.int32, np.uint8: np.int32, np.uint16: np.int32, np.uint32: np.int64,
           np.uint64: np.int64, np.float16: np.float32}
save_file(arrays, path2, metadata={"format": "np", "origin": "python"})
out = subprocess.run([tool, "dump", path2], check=True, capture_output=True, text=True).stdout.splitlines()
names = {"bool": np.bool_, "int32": np.int32, "int64": np.int64, "float32": np.float32, "float64": np.float64}
seen = {}
for line in out:
    if line.startswith("meta "):
        k, v = line[5:].split("=", 1)
        seen.setdefault("__meta__", {})[k] = v
        continue
    head, rest = line[len("tensor "):].rsplit(" (", 1)
    name, dtype = head.rsplit(" ", 1)
    shape_text, _, values = rest.partition(")")
    shape = tuple(int(s) for s in shape_text.split(",") if s)
    seen[name] = (dtype, shape, values.split())
check(seen.get("__meta__") == {"format": "np", "origin": "python"}, "the metadata Python wrote reads in kiln")
for name, a in arrays.items():
    got = seen.get(name)
    if got is None:
        check(False, "kiln read tensor %r" % name)
        continue
    dtype, shape, values = got
    ok = names.get(dtype) == widened.get(a.dtype.type, a.dtype.type) and shape == a.shape
    flat = a.reshape(-1)
    if ok and a.dtype.kind == "f":
        ok = len(values) == flat.size and all(float(v) == float(x) and math.copysign(1, float(v)) == math.copysign(1, float(x))
                                              for v, x in zip(values, flat))
    elif ok:
        ok = len(values) == flat.size and all(int(v) == int(x) for v, x in zip(values, flat))
    check(ok, "kiln reads Python's %r as %s %s with its values" % (name, a.dtype, a.shape))

if failures:
    print("safetensors_interop: %d failures" % len(failures))
    sys.exit(1)
print("safetensors_interop: kiln and Python's safetensors agree both ways")
