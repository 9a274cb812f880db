#!/usr/bin/env python3
"""Differential test of kiln's eager mode against NumPy.

Draws random programs (elementwise ops with broadcasting and promotion, reductions over random axes with and
without keepdims, matmul, views, joins, casts and comparisons), evaluates each one with NumPy while drawing it,
runs the same programs through test/numpy_runner.cpp, and compares dtype, shape and values. Some programs are
drawn to fail (shapes that do not broadcast, axes out of range): kiln must throw the matching kiln::error.

usage: numpy_differential.py <numpy_runner> <work directory> [cases] [seed]
Exit status: 0 when every case agrees, 1 otherwise, 77 (skipped) when NumPy is not installed.
"""
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy_differential: NumPy is not installed; skipped")
    sys.exit(77)

FLOAT = ("float32", "float64")
INT = ("int32", "int64")


class Program:
    def __init__(self, rng, work, cid):
        self.rng, self.work, self.cid = rng, work, cid
        self.lines = [f"case {cid}"]
        self.values = {}  # name -> NumPy value
        self.count = 0
        self.single = False  # whether a float32 value takes part (float64 results then carry float32 errors)

    def fresh(self):
        self.count += 1
        return f"t{self.count}"

    def load(self, value):
        name = self.fresh()
        path = os.path.join(self.work, f"{self.cid}_{name}.npy")
        value = np.asarray(value)
        np.save(path, value)
        self.lines.append(f"load {name} {path}")
        self.values[name] = value
        self.single = self.single or value.dtype == np.float32
        return name

    def op(self, value, *words):
        value = np.asarray(value)
        name = self.fresh()
        self.lines.append("op " + name + " " + " ".join(str(w) for w in words))
        self.values[name] = value
        self.single = self.single or value.dtype == np.float32
        return name


def random_input(rng, shape, dt):
    if dt in FLOAT:
        return rng.uniform(-2.0, 2.0, size=shape).astype(dt)
    return rng.integers(-5, 6, size=shape).astype(dt)


def broadcast_variant(rng, shape):
    """A shape that broadcasts against `shape`: some leading dimensions dropped, some dimensions set to 1."""
    drop = int(rng.integers(0, len(shape) + 1)) if len(shape) else 0
    out = [d if rng.random() < 0.7 else 1 for d in shape[drop:]]
    return tuple(out)


def acceptable(v):
    """Values that keep later ops well conditioned: finite and of moderate size."""
    if v.dtype == np.bool_:
        return True
    if v.size == 0:
        return True
    if np.issubdtype(v.dtype, np.floating):
        return bool(np.all(np.isfinite(v))) and float(np.max(np.abs(v))) < 1e4
    return int(np.max(np.abs(v.astype(np.int64)))) < 10**6


UNARY_FLOAT = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "square": np.square, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda a: (1 / (1 + np.exp(-a))).astype(a.dtype),
    "relu": lambda a: np.maximum(a, 0).astype(a.dtype),
    "log": lambda a: np.log(a) if np.all(a > 0) else None,
    "sqrt": lambda a: np.sqrt(a) if np.all(a >= 0) else None,
    "rsqrt": lambda a: (1 / np.sqrt(a)).astype(a.dtype) if np.all(a > 0.05) else None,
}
UNARY_INT = {"neg": np.negative, "abs": np.abs, "square": np.square,
             "relu": lambda a: np.maximum(a, 0).astype(a.dtype)}
BINARY_FLOAT = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
    "div": lambda a, b: np.divide(a, b) if np.all(np.abs(b) > 0.1) else None,
    "pow": lambda a, b: np.power(a, b) if np.all(a > 0.1) else None,
}
BINARY_INT = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum}
COMPARE = {"less": np.less, "greater_equal": np.greater_equal, "equal": np.equal}


def numeric(p, names):
    return [n for n in names if p.values[n].dtype != np.bool_]


def draw_step(p, rng, family):
    """Appends one random op whose NumPy result is acceptable; returns False when the drawn op did not apply."""
    names = numeric(p, list(p.values))
    a = names[-1] if rng.random() < 0.6 else names[int(rng.integers(len(names)))]
    x = p.values[a]
    floating = np.issubdtype(x.dtype, np.floating)
    kind = rng.choice(["unary", "binary", "binary", "scalar", "reduce", "compare", "view", "matmul", "join", "cast"])
    if kind == "unary":
        table = UNARY_FLOAT if floating else UNARY_INT
        name = rng.choice(sorted(table))
        v = table[name](x)
        return v is not None and acceptable(v) and p.op(v, name, a)
    if kind in ("binary", "compare"):
        # The other operand: an existing value or a new input of a shape that broadcasts with this one.
        if rng.random() < 0.5 and len(names) > 1:
            b = names[int(rng.integers(len(names)))]
        else:
            dt = rng.choice(FLOAT if family == "float" else INT)
            b = p.load(random_input(rng, broadcast_variant(rng, x.shape), dt))
        y = p.values[b]
        try:
            np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            return False
        if floating != np.issubdtype(y.dtype, np.floating):
            return False  # NumPy and PyTorch promote int with float differently; kiln follows PyTorch
        if kind == "compare":
            name = rng.choice(sorted(COMPARE))
            cond = p.op(COMPARE[name](x, y), name, a, b)
            v = np.where(p.values[cond], x, y)
            return acceptable(v) and p.op(v, "where", cond, a, b)
        table = BINARY_FLOAT if floating else BINARY_INT
        name = rng.choice(sorted(table))
        v = table[name](x, y)
        return v is not None and acceptable(v) and p.op(v, name, a, b)
    if kind == "scalar":
        s = float(np.round(rng.uniform(-3, 3), 3)) if floating else int(rng.integers(-4, 5))
        text = repr(s) if floating else str(s)
        if floating and "." not in text and "e" not in text:
            text += ".0"
        name = rng.choice(["adds", "muls", "rsubs"])
        v = {"adds": lambda: x + s, "muls": lambda: x * s, "rsubs": lambda: s - x}[name]()
        return acceptable(v) and p.op(v, name, a, text)
    if kind == "reduce":
        if x.ndim == 0:
            return False
        name = rng.choice(["sum", "mean", "max", "min", "prod", "argmax", "argmin"] if floating else
                          ["sum", "max", "min", "prod", "argmax", "argmin"])
        keep = int(rng.integers(2))
        if name in ("argmax", "argmin"):
            axis = int(rng.integers(-x.ndim, x.ndim))
            v = getattr(np, name)(x, axis=axis, keepdims=bool(keep))
            return p.op(v, name, a, axis, keep)
        if name == "prod" and x.size > 64:
            return False
        if rng.random() < 0.25:
            axes, text = None, "all"
        else:
            k = int(rng.integers(1, x.ndim + 1))
            axes = tuple(sorted(int(i) for i in rng.choice(x.ndim, size=k, replace=False)))
            text = ",".join(str(i) for i in axes)
        v = np.asarray(getattr(np, name)(x, axis=axes, keepdims=bool(keep)))
        return acceptable(v) and p.op(v, name, a, text, keep)
    if kind == "view":
        if x.ndim >= 2 and rng.random() < 0.4:
            i, j = (int(k) for k in rng.choice(x.ndim, size=2, replace=False))
            return p.op(np.swapaxes(x, i, j), "transpose", a, i, j)
        if x.ndim >= 1 and rng.random() < 0.5:
            axis = int(rng.integers(x.ndim))
            n = x.shape[axis]
            start, stop, step = int(rng.integers(0, n + 1)), int(rng.integers(0, n + 1)), int(rng.integers(1, 3))
            v = x[(slice(None),) * axis + (slice(start, stop, step),)]
            return v.size > 0 and p.op(v, "slice", a, axis, start, stop, step)
        if x.ndim >= 1 and rng.random() < 0.5:
            target = (int(rng.integers(1, 4)),) + tuple(d if d != 1 else int(rng.integers(1, 4)) for d in x.shape)
            return p.op(np.broadcast_to(x, target), "broadcast_to", a, ",".join(map(str, target)))
        shape = (-1,) if x.ndim <= 1 or rng.random() < 0.5 else (x.shape[0], -1)
        return x.size > 0 and p.op(x.reshape(shape), "reshape", a, ",".join(map(str, shape)))
    if kind == "matmul":
        if x.ndim == 0 or x.shape[-1] == 0:
            return False
        k = x.shape[-1]
        right = (k,) if rng.random() < 0.3 else (k, int(rng.integers(1, 6)))
        if len(right) == 2 and x.ndim >= 3 and rng.random() < 0.5:
            right = x.shape[-3:-2] + right  # a batch dimension matching x's
        dt = x.dtype.name if rng.random() < 0.7 else rng.choice(FLOAT if floating else INT)
        b = p.load(random_input(rng, right, dt))
        v = np.matmul(x, p.values[b])
        return acceptable(v) and p.op(v, "matmul", a, b)
    if kind == "join":
        same = [n for n in names if p.values[n].shape == x.shape and
                np.issubdtype(p.values[n].dtype, np.floating) == floating]
        others = [same[int(rng.integers(len(same)))] for _ in range(int(rng.integers(1, 3)))]
        if rng.random() < 0.5 and x.ndim >= 1:
            axis = int(rng.integers(-x.ndim, x.ndim))
            return p.op(np.concatenate([x] + [p.values[o] for o in others], axis=axis), "concat", axis, a, *others)
        axis = int(rng.integers(-x.ndim - 1, x.ndim + 1))
        return p.op(np.stack([x] + [p.values[o] for o in others], axis=axis), "stack", axis, a, *others)
    # cast
    target = rng.choice([d for d in FLOAT + INT if d != x.dtype.name])
    if target in INT and floating:
        return False  # float -> int truncation of values near integers is not worth comparing
    return p.op(x.astype(target), "cast", a, target)


def draw_case(rng, work, cid):
    """A random program and NumPy's answer to it."""
    p = Program(rng, work, cid)
    family = "float" if rng.random() < 0.75 else "int"
    rank = int(rng.integers(0, 4))
    sizes = [1, 2, 3, 4, 5, 7, 17]
    shape = tuple(int(rng.choice(sizes)) for _ in range(rank))
    for _ in range(int(rng.integers(1, 4))):
        p.load(random_input(rng, broadcast_variant(rng, shape) if p.values else shape,
                            rng.choice(FLOAT if family == "float" else INT)))
    steps, tries = int(rng.integers(2, 8)), 0
    while steps > 0 and tries < 60:
        tries += 1
        if draw_step(p, rng, family):
            steps -= 1
    result = list(p.values)[-1]
    p.lines.append(f"out {result}")
    return p.lines, ("value", p.values[result], p.single)


def draw_error_case(rng, work, cid):
    """A program that NumPy rejects, with the kiln::error kiln must throw for it."""
    p = Program(rng, work, cid)
    if rng.random() < 0.6:
        a = p.load(random_input(rng, (3, 4), "float32"))
        b = p.load(random_input(rng, (int(rng.choice([2, 5])), int(rng.choice([3, 5]))), "float32"))
        name = rng.choice(["add", "mul", "maximum", "less"])
        p.lines.append(f"op t9 {name} {a} {b}")
        expected = "shape_error"
    else:
        a = p.load(random_input(rng, (2, 3), "float64"))
        axis = int(rng.choice([2, 3, -3]))
        p.lines.append(f"op t9 {rng.choice(['sum', 'max', 'mean'])} {a} {axis} 0")
        expected = "value_error"
    p.lines.append("out t9")
    return p.lines, ("error", expected, False)


def tolerance(dt, single):
    if dt.name == "float64" and not single:
        return 1e-10
    return 2e-4 if dt.kind == "f" else 0.0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    runner, work = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 20261129
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "out"))
    rng = np.random.default_rng(seed)
    programs, expected = [], {}
    for i in range(n):
        lines, answer = (draw_error_case if i % 10 == 9 else draw_case)(rng, work, f"c{i}")
        programs += lines
        expected[f"c{i}"] = (answer, lines)
    cases = os.path.join(work, "cases.txt")
    with open(cases, "w") as f:
        f.write("\n".join(programs) + "\n")
    run = subprocess.run([runner, cases, os.path.join(work, "out")], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        print("numpy_differential: the runner failed")
        return 1
    failures, counted = [], {"value": 0, "error": 0}
    for cid, ((kind, want, single), lines) in expected.items():
        counted[kind] += 1
        npy, err = os.path.join(work, "out", cid + ".npy"), os.path.join(work, "out", cid + ".err")
        got_error = open(err).read().strip() if os.path.exists(err) else None
        if kind == "error":
            if got_error != want:
                failures.append((cid, f"expected kiln::{want}, got {got_error or 'a value'}", lines))
            continue
        if got_error is not None:
            failures.append((cid, f"kiln threw {got_error}", lines))
            continue
        got = np.load(npy)
        if got.dtype != want.dtype or got.shape != want.shape:
            failures.append((cid, f"kiln gave {got.dtype}{got.shape}, NumPy {want.dtype}{want.shape}", lines))
            continue
        tol = tolerance(want.dtype, single)
        if tol == 0.0:
            ok = np.array_equal(got, want)
        else:
            scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
            ok = np.allclose(got, want, rtol=tol, atol=tol * scale)
        if not ok:
            worst = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
            failures.append((cid, f"values differ (largest difference {worst:g})", lines))
    for cid, why, lines in failures[:10]:
        print(f"{cid}: {why}\n    " + "\n    ".join(lines))
    print(f"numpy_differential: {counted['value']} programs and {counted['error']} error cases "
          f"(seed {seed}, NumPy {np.__version__}): {len(failures)} disagreements")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
