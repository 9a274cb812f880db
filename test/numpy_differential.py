#!/usr/bin/env python3
"""Differential test of kiln's eager mode against NumPy.

Draws random programs (elementwise ops with broadcasting and promotion, scalar operands, true and floor division,
logical ops, reductions over random and negative axes with and without keepdims, matmul, views, joins, casts,
comparisons, where with tensors or numbers, and in-place adds between overlapping views of one tensor), evaluates
each one with NumPy while drawing it, runs the same programs through test/numpy_runner.cpp, and compares dtype,
shape and values. Inputs include zero-size and 0-d tensors, NaN, infinities, signed zeros, subnormals and integers
near the ends of their range (integer arithmetic wraps in both). Operands of mixed kinds are drawn too: there kiln
follows PyTorch (int32 + float32 -> float32, int / int -> float32), and the NumPy side computes in the dtype kiln's
rule gives (kiln_binary_dtype below). Some programs are drawn to fail (shapes that do not broadcast, axes out of
range or repeated, bool subtraction): kiln must throw the matching kiln::error.

usage: numpy_differential.py <numpy_runner> <work directory> [cases] [seed]
Exit status: 0 when every case agrees, 1 otherwise (NumPy older than 2.0 is a failure: its 0-d promotion differs),
77 (skipped) when NumPy is not installed.
"""
import math
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy_differential: NumPy is not installed; skipped")
    sys.exit(77)

if int(np.__version__.split(".")[0]) < 2:
    print(f"numpy_differential: NumPy {np.__version__} is older than 2.0 (scripts/test.sh installs NumPy 2 in a "
          "virtual environment)")
    sys.exit(1)

FLOAT = ("float32", "float64")
INT = ("int32", "int64")
RANK = {"bool": 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}


def kiln_binary_dtype(a, b):
    """PyTorch's result type for two tensors: the higher of the two kinds and sizes."""
    a, b = np.dtype(a).name, np.dtype(b).name
    return np.dtype(a if RANK[a] >= RANK[b] else b)


def kiln_scalar_dtype(t, s):
    """A C++ number meets a tensor: it changes the dtype only across kinds."""
    t = np.dtype(t)
    if isinstance(s, float):
        return t if t.kind == "f" else np.dtype("float32")
    return np.dtype("int64") if t.kind == "b" else t


def true_div_dtype(d):
    return d if d.kind == "f" else np.dtype("float32")


class Program:
    def __init__(self, rng, work, cid):
        self.rng, self.work, self.cid = rng, work, cid
        self.lines = [f"case {cid}"]
        self.values = {}  # name -> NumPy value
        self.count = 0
        self.single = False  # whether a float32 value takes part (float64 results then carry float32 errors)
        self.family, self.special, self.zero = "float", False, False

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


SPECIAL = {"float32": [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, 1e-40],
           "float64": [np.nan, np.inf, -np.inf, -0.0, 0.0, 5e-324, 1e-310]}


def random_input(rng, shape, dt, special=False):
    """Uniform values; with `special`, some are NaN, infinities, signed zeros, subnormals or extreme integers."""
    if dt == "bool":
        return rng.random(size=shape) < 0.5
    if dt in FLOAT:
        v = rng.uniform(-2.0, 2.0, size=shape).astype(dt)
    else:
        v = rng.integers(-5, 6, size=shape).astype(dt)
    if special and v.size:
        mask = rng.random(size=v.shape) < 0.3
        if dt in FLOAT:
            picks = np.array(SPECIAL[dt], dtype=dt)[rng.integers(len(SPECIAL[dt]), size=v.shape)]
        else:
            info = np.iinfo(dt)
            ends = np.array([info.max, info.min, info.max - 1, info.min + 1, 0], dtype=dt)
            picks = ends[rng.integers(len(ends), size=v.shape)]
        v = np.where(mask, picks, v).astype(dt)
    return v


def broadcast_variant(rng, shape):
    """A shape that broadcasts against `shape`: some leading dimensions dropped, some dimensions set to 1."""
    drop = int(rng.integers(0, len(shape) + 1)) if len(shape) else 0
    out = [d if rng.random() < 0.7 else 1 for d in shape[drop:]]
    return tuple(out)


def acceptable(v, special=False):
    """Values that keep later ops well conditioned: finite and of moderate size (NaN, infinities and any integer are
    accepted in programs drawn with special values)."""
    if v.dtype == np.bool_:
        return True
    if v.size == 0:
        return True
    if np.issubdtype(v.dtype, np.floating):
        finite = v[np.isfinite(v)]
        if not special and finite.size != v.size:
            return False
        return finite.size == 0 or float(np.max(np.abs(finite))) < 1e4
    return special or int(np.max(np.abs(v.astype(np.int64)))) < 10**6


UNARY_FLOAT = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "square": np.square, "sin": np.sin, "cos": np.cos,
    "tanh": np.tanh, "sigmoid": lambda a: (1 / (1 + np.exp(-a))).astype(a.dtype),
    "relu": lambda a: np.maximum(a, 0).astype(a.dtype),
    "log": lambda a: np.log(a) if np.all(a > 0) else None,
    "sqrt": lambda a: np.sqrt(a) if np.all(a >= 0) else None,
    "rsqrt": lambda a: (1 / np.sqrt(a)).astype(a.dtype) if np.all(a > 0.05) else None,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round, "sign": np.sign,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "tan": lambda a: np.tan(a) if np.all(np.abs(a) < 1.4) else None, "atan": np.arctan,
    "asin": lambda a: np.arcsin(a) if np.all(np.abs(a) <= 0.99) else None,
    "acos": lambda a: np.arccos(a) if np.all(np.abs(a) <= 0.99) else None,
    "log1p": lambda a: np.log1p(a) if np.all(a > -0.9) else None, "expm1": np.expm1,
    "erf": lambda a: np.vectorize(math.erf, otypes=[np.float64])(a).astype(a.dtype),
    "softplus": lambda a: np.logaddexp(a.dtype.type(0), a), "silu": lambda a: (a / (1 + np.exp(-a))).astype(a.dtype),
    # x Phi(x) as 0.5 x erfc(-x / sqrt 2) in float64: 1 + erf(x / sqrt 2) cancels to 0 below about -8 (gelu(-19.2)
    # is about -5e-81, not 0), which a cast to bool then tells apart.
    "gelu": lambda a: (0.5 * a.astype(np.float64)
                       * np.vectorize(math.erfc, otypes=[np.float64])(-a.astype(np.float64) / np.sqrt(2))).astype(a.dtype),
    "elu": lambda a: np.where(a > 0, a, np.expm1(a)).astype(a.dtype),
    "leaky_relu": lambda a: np.where(a < 0, a * a.dtype.type(0.01), a).astype(a.dtype),
    "clamp_unit": lambda a: np.clip(a, a.dtype.type(-1), a.dtype.type(1)),
}
UNARY_INT = {"neg": np.negative, "abs": np.abs, "square": np.square,
             "relu": lambda a: np.maximum(a, 0).astype(a.dtype),
             # rounding leaves integers as they are, in their dtype (NumPy 2 does too for floor, ceil and trunc)
             "floor": lambda a: a.copy(), "ceil": lambda a: a.copy(), "trunc": lambda a: a.copy(),
             "round": lambda a: a.copy(), "sign": np.sign, "isnan": np.isnan, "isinf": np.isinf,
             "isfinite": np.isfinite, "clamp_unit": lambda a: np.clip(a, -1, 1).astype(a.dtype)}
UNARY_BOOL = {"abs": np.abs, "logical_not": np.logical_not}
# Binary ops computed by NumPy in the dtype kiln's rule gives (the operands converted to it first, as kiln does).
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
          "div": np.divide, "pow": np.power, "floor_divide": np.floor_divide, "remainder": np.remainder,
          "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
          "atan2": np.arctan2}
BINARY_BOOL = ("add", "mul", "maximum", "minimum", "logical_and", "logical_or", "logical_xor")
COMPARE = {"less": np.less, "greater_equal": np.greater_equal, "equal": np.equal}


def near_tie(x, axis, is_max):
    """Whether some value along `axis` differs from the extreme but lies within float32 rounding of it."""
    with np.errstate(all="ignore"):
        nan_rows = np.isnan(x).any(axis=axis, keepdims=True)  # a NaN wins there, whatever else the row holds
        ext = (np.max if is_max else np.min)(np.where(np.isnan(x), -np.inf if is_max else np.inf, x), axis=axis,
                                             keepdims=True)
        close = np.isclose(x, ext, rtol=1e-5, atol=0) & np.isfinite(ext)
        # values near the extreme that are not all one whole number (exact ties such as 0, 1 or -5 are kept: the
        # first of equal values is the answer)
        many = close.sum(axis=axis, keepdims=True) > 1
        whole = ext == np.round(ext)
        exact = (close <= (x == ext)).all(axis=axis, keepdims=True)
    return bool((many & ~(whole & exact) & ~nan_rows).any())


def ill_conditioned_sum(x, axes):
    """Whether a floating sum over `axes` (None: every axis) cancels so much that the order of its additions decides
    its value: the sum of magnitudes over 1e6 times the exact sum (math.fsum) in some result. kiln adds in another
    order than NumPy (SIMD lanes, in double), so such a program has no one right answer to compare."""
    if x.dtype.kind != "f" or x.size == 0 or not np.all(np.isfinite(x)):
        return False
    ax = tuple(range(x.ndim)) if axes is None else tuple(int(i) % x.ndim for i in axes)
    rest = [i for i in range(x.ndim) if i not in ax]
    rows = np.transpose(x.astype(np.float64), rest + list(ax)).reshape(int(np.prod([x.shape[i] for i in rest])), -1)
    exact = np.array([math.fsum(r) for r in rows])
    return bool(np.any(np.abs(rows).sum(axis=1) > 1e6 * np.abs(exact)))


def numeric(p, names):
    return [n for n in names if p.values[n].dtype != np.bool_ or p.family == "bool"]


def binary_value(name, x, y, special):
    """NumPy's answer in kiln's dtype, or None when the op is not drawn for these operands."""
    d = kiln_binary_dtype(x.dtype, y.dtype)
    if name.startswith("logical_"):
        return BINARY[name](x.astype(bool), y.astype(bool))
    if d.kind == "b" and name not in BINARY_BOOL:
        return None
    if name == "atan2":
        return np.arctan2(x.astype(true_div_dtype(d)), y.astype(true_div_dtype(d)))
    if name == "div":
        d = true_div_dtype(d)
        if not special and not np.all(np.abs(y.astype(np.float64)) > 0.1):
            return None
    if name == "pow":
        if d.kind == "f" and not np.all(x > 0.1):
            return None
        if d.kind == "i" and (np.any(y < 0) or np.any(y > 40)):
            return None  # NumPy refuses negative integer powers
    if name in ("floor_divide", "remainder") and d.kind == "f" and not special:
        if not np.all(np.abs(y) > 0.1):
            return None
        # x / y within rounding of a whole number: the result jumps there (by 1, or by y), and operands that carry
        # float32 rounding from earlier ops may land on either side of it
        with np.errstate(all="ignore"):
            q = np.broadcast_to(x, np.broadcast_shapes(x.shape, y.shape)).astype(np.float64) / y.astype(np.float64)
        if np.any(np.isfinite(q) & (np.abs(q - np.round(q)) < 1e-4 * np.maximum(1.0, np.abs(q)))):
            return None
    return BINARY[name](x.astype(d), y.astype(d))


def draw_shape_op(p, rng, a, x):
    """The ops a NumPy user reaches for beyond the elementwise vocabulary (issue #19)."""
    floating = x.dtype.kind == "f"
    name = rng.choice(["flip", "cumsum", "sort", "argsort", "any", "all", "var", "std", "tile", "repeat", "take",
                       "outer", "argmax_flat"])
    if x.ndim == 0 and name not in ("any", "all", "outer", "argmax_flat"):
        return False
    axis = int(rng.integers(x.ndim)) if x.ndim else 0
    if name == "flip":
        return p.op(np.flip(x, axis), "flip", a, axis)
    if name == "cumsum":
        if x.dtype.kind != "f" and np.max(np.abs(x.astype(np.int64)), initial=0) > 10**6:
            return False
        d = x.dtype if floating else np.dtype("int64")
        v = np.cumsum(x.astype(d), axis=axis)
        return acceptable(v, p.special) and p.op(v, "cumsum", a, axis)
    if name in ("sort", "argsort"):
        if x.dtype == np.bool_:
            return False
        if name == "argsort" and floating and x.size > 1:
            # Computed values that differ only by rounding would sort in either order: draw argsort only where
            # distinct values are clearly apart (exact ties are fine: both sorts are stable).
            s = np.sort(x, axis=axis)
            gaps = np.abs(np.diff(s, axis=axis))
            scale = 1 + np.abs(np.take(s, range(1, s.shape[axis]), axis=axis))
            with np.errstate(invalid="ignore"):
                if np.any((gaps != 0) & (gaps < 1e-3 * scale)):
                    return False
        v = np.sort(x, axis=axis, kind="stable") if name == "sort" else np.argsort(x, axis=axis, kind="stable")
        return p.op(v, name, a, axis)
    if name in ("any", "all"):
        v = np.any(x) if name == "any" else np.all(x)
        return p.op(np.asarray(v), name, a)
    if name in ("var", "std"):
        if not floating or x.shape[axis] < 2 or not np.all(np.isfinite(x)):
            return False
        # In double for float32, as kiln accumulates: NumPy's float32 mean of equal values can miss them by an ulp,
        # which leaves a variance of rounding noise where the exact one (and kiln's) is 0.
        v = (np.var if name == "var" else np.std)(x.astype(np.float64) if x.dtype == np.float32 else x, axis=axis, ddof=1)
        spread = v if name == "var" else v * v
        if x.size and np.any(spread <= 1e-9 * float(np.max(np.abs(x))) ** 2):
            return False  # a spread at rounding level (equal values): exactly 0 on one side, noise on the other
        return acceptable(v, p.special) and p.op(v.astype(x.dtype), name, a, axis)
    if name == "tile":
        reps = tuple(int(r) for r in rng.integers(1, 3, size=x.ndim))
        return p.op(np.tile(x, reps), "tile", a, ",".join(map(str, reps)))
    if name == "repeat":
        r = int(rng.integers(0, 3))
        v = np.repeat(x, r, axis=axis)
        return (v.size > 0 or p.zero) and p.op(v, "repeat", a, r, axis)
    if name == "take":
        n = x.shape[axis]
        if n == 0:
            return False
        idx = [int(i) for i in rng.integers(-n, n, size=int(rng.integers(1, 4)))]
        index = p.load(np.asarray(idx, dtype=np.int64))
        return p.op(np.take(x, idx, axis=axis), "index_select", a, index, axis)
    if name == "outer":
        if x.dtype == np.bool_ or x.size > 64:
            return False
        if x.dtype.kind == "i" and np.max(np.abs(x.astype(np.int64)), initial=0) > 10**4:
            return False
        v = np.outer(x, x)
        return acceptable(v, p.special) and p.op(v, "outer", a, a)
    if x.size == 0 or x.dtype == np.bool_ or (floating and np.any(np.isnan(x))):
        return False
    return p.op(np.asarray(np.argmax(x), dtype=np.int64), "argmax", a)


def draw_step(p, rng, family):
    """Appends one random op whose NumPy result is acceptable; returns False when the drawn op did not apply."""
    names = numeric(p, list(p.values))
    if not names:
        return False
    a = names[-1] if rng.random() < 0.6 else names[int(rng.integers(len(names)))]
    x = p.values[a]
    floating = np.issubdtype(x.dtype, np.floating)
    sp = p.special
    kind = rng.choice(["unary", "binary", "binary", "scalar", "reduce", "compare", "view", "matmul", "join", "cast",
                       "inplace", "where_number", "shape_ops"])
    if kind == "unary":
        table = UNARY_BOOL if x.dtype == np.bool_ else UNARY_FLOAT if floating else UNARY_INT
        name = rng.choice(sorted(table))
        v = table[name](x)
        return v is not None and acceptable(v, sp) and p.op(v, name, a)
    if kind in ("binary", "compare"):
        # The other operand: an existing value or a new input of a shape that broadcasts with this one; of another
        # kind now and then (kiln's promotion is computed, not skipped).
        if rng.random() < 0.5 and len(names) > 1:
            b = names[int(rng.integers(len(names)))]
        else:
            pool = {"float": FLOAT, "int": INT, "bool": ("bool",)}[family]
            if rng.random() < 0.25:
                pool = FLOAT + INT + ("bool",)
            dt = rng.choice(pool)
            b = p.load(random_input(rng, broadcast_variant(rng, x.shape), dt, sp))
        y = p.values[b]
        try:
            np.broadcast_shapes(x.shape, y.shape)
        except ValueError:
            return False
        if kind == "compare":
            name = rng.choice(sorted(COMPARE))
            d = kiln_binary_dtype(x.dtype, y.dtype)
            cond = p.op(COMPARE[name](x.astype(d), y.astype(d)), name, a, b)
            v = np.where(p.values[cond], x.astype(d), y.astype(d))
            return acceptable(v, sp) and p.op(v, "where", cond, a, b)
        name = rng.choice(sorted(BINARY))
        if family == "bool" and rng.random() < 0.6:
            name = rng.choice(BINARY_BOOL)
        v = binary_value(name, x, y, sp)
        return v is not None and acceptable(v, sp) and p.op(v, name, a, b)
    if kind == "scalar":
        if floating or rng.random() < 0.3:
            s = float(np.round(rng.uniform(-3, 3), 3))
        else:
            s = int(rng.integers(-4, 5))
        text = repr(s)
        if isinstance(s, float) and "." not in text and "e" not in text:
            text += ".0"
        name = rng.choice(["adds", "muls", "rsubs", "divs", "rdivs"])
        d = kiln_scalar_dtype(x.dtype, s)
        if name in ("divs", "rdivs"):
            d = true_div_dtype(d)
        if name == "divs" and abs(s) < 0.1:
            return False
        if name == "rdivs" and not sp and not np.all(np.abs(x.astype(np.float64)) > 0.1):
            return False
        if name == "rsubs" and d.kind == "b":
            return False
        xs, ss = x.astype(d), np.array(s).astype(d)
        v = {"adds": lambda: xs + ss, "muls": lambda: xs * ss, "rsubs": lambda: ss - xs, "divs": lambda: xs / ss,
             "rdivs": lambda: ss / xs}[name]()
        return acceptable(v, sp) and p.op(v, name, a, text)
    if kind == "where_number":
        cond = p.load(random_input(rng, broadcast_variant(rng, x.shape), "bool"))
        s = float(np.round(rng.uniform(-3, 3), 2)) if rng.random() < 0.5 else int(rng.integers(-4, 5))
        text = repr(s) if isinstance(s, int) or "." in repr(s) or "e" in repr(s) else repr(s) + ".0"
        d = kiln_scalar_dtype(x.dtype, s)
        number_first = rng.random() < 0.5
        c = p.values[cond]
        ss = np.array(s).astype(d)
        v = np.where(c, ss, x.astype(d)) if number_first else np.where(c, x.astype(d), ss)
        return acceptable(v, sp) and p.op(v, "where_st" if number_first else "where_ts", cond, a, text)
    if kind == "inplace":
        if x.dtype == np.bool_ or x.ndim == 0:
            return False
        if x.ndim == 2 and x.shape[0] == x.shape[1] and rng.random() < 0.3:
            v = x + x.T
            return acceptable(v, sp) and p.op(v, "iadd_transpose", a)
        axis = int(rng.integers(x.ndim))
        n = x.shape[axis]
        if n < 2:
            return False
        length = int(rng.integers(1, n))
        dst, src = int(rng.integers(0, n - length + 1)), int(rng.integers(0, n - length + 1))
        c = x.copy()
        lead = (slice(None),) * axis
        c[lead + (slice(dst, dst + length),)] = c[lead + (slice(dst, dst + length),)] + c[lead + (slice(src, src + length),)]
        return acceptable(c, sp) and p.op(c, "iadd_view", a, axis, dst, src, length)
    if kind == "reduce":
        if x.ndim == 0:
            return False
        if x.dtype == np.bool_:
            choices = ["sum", "max", "min", "prod", "argmax", "argmin"]
        else:
            choices = ["sum", "mean", "max", "min", "prod", "argmax", "argmin"] if floating else \
                      ["sum", "max", "min", "prod", "argmax", "argmin"]
        name = rng.choice(choices)
        keep = int(rng.integers(2))
        try:
            if name in ("argmax", "argmin"):
                axis = int(rng.integers(-x.ndim, x.ndim))
                if x.dtype.kind == "f" and x.size and near_tie(x, axis, name == "argmax"):
                    return False  # a value computed to within rounding of the extreme: either position is right
                v = getattr(np, name)(x, axis=axis, keepdims=bool(keep))
                return p.op(v, name, a, axis, keep)
            if name == "prod" and x.size > 64:
                return False
            if rng.random() < 0.25:
                axes, text = None, "all"
            else:
                k = int(rng.integers(1, x.ndim + 1))
                axes = [int(i) for i in rng.choice(x.ndim, size=k, replace=False)]
                axes = tuple(i - x.ndim if rng.random() < 0.4 else i for i in axes)  # negative axes now and then
                text = ",".join(str(i) for i in axes)
            if name in ("sum", "mean") and ill_conditioned_sum(x, axes):
                return False
            with np.errstate(all="ignore"):
                if name in ("sum", "prod") and x.dtype == np.float32:
                    # kiln accumulates float32 sums and products in double (PyTorch's CPU accumulation type), so a
                    # product whose partial results leave float32's range still ends where the exact one does
                    v = np.asarray(getattr(np, name)(x, axis=axes, keepdims=bool(keep), dtype=np.float64)).astype(np.float32)
                else:
                    v = np.asarray(getattr(np, name)(x, axis=axes, keepdims=bool(keep)))
        except ValueError:
            return False  # an extremum over an empty axis: NumPy refuses it (kiln too, tested elsewhere)
        # Attributes by position (in the schema's order) or by name; no axes means every axis.
        return acceptable(v, sp) and p.op(v, name, a, *([] if axes is None else [text]), f"keepdims={keep}")
    if kind == "view":
        if x.ndim >= 2 and rng.random() < 0.4:
            i, j = (int(k) for k in rng.choice(x.ndim, size=2, replace=False))
            return p.op(np.swapaxes(x, i, j), "transpose", a, i, j)
        if x.ndim >= 1 and rng.random() < 0.5:
            axis = int(rng.integers(x.ndim))
            n = x.shape[axis]
            start, stop = int(rng.integers(-n - 1, n + 2)), int(rng.integers(-n - 1, n + 2))
            step = int(rng.choice([1, 2, -1, -2]))
            v = x[(slice(None),) * axis + (slice(start, stop, step),)]
            return (v.size > 0 or p.zero) and p.op(v, "slice", a, axis, start, stop, step)
        if x.ndim >= 1 and rng.random() < 0.5:
            target = (int(rng.integers(1, 4)),) + tuple(d if d != 1 else int(rng.integers(1, 4)) for d in x.shape)
            return p.op(np.broadcast_to(x, target), "broadcast_to", a, ",".join(map(str, target)))
        shape = (-1,) if x.ndim <= 1 or rng.random() < 0.5 else (x.shape[0], -1)
        try:
            v = x.reshape(shape)
        except ValueError:
            return False
        return p.op(v, "reshape", a, ",".join(map(str, shape)))
    if kind == "shape_ops":
        return draw_shape_op(p, rng, a, x)
    if kind == "matmul":
        if x.ndim == 0 or x.shape[-1] == 0 or x.dtype == np.bool_ or (floating and not np.all(np.isfinite(x))):
            return False
        k = x.shape[-1]
        right = (k,) if rng.random() < 0.3 else (k, int(rng.integers(1, 6)))
        if len(right) == 2 and x.ndim >= 3 and rng.random() < 0.5:
            right = x.shape[-3:-2] + right  # a batch dimension matching x's
        dt = x.dtype.name if rng.random() < 0.7 else rng.choice(FLOAT if floating else INT)
        b = p.load(random_input(rng, right, dt))
        y = p.values[b]
        d = kiln_binary_dtype(x.dtype, y.dtype)
        if d.kind != "f" and (np.max(np.abs(x), initial=0) > 10**6):
            return False
        v = np.matmul(x.astype(d), y.astype(d))
        return acceptable(v, sp) and p.op(v, "matmul", a, b)
    if kind == "join":
        same = [n for n in names if p.values[n].shape == x.shape and p.values[n].dtype.kind == x.dtype.kind]
        others = [same[int(rng.integers(len(same)))] for _ in range(int(rng.integers(1, 3)))]
        parts = [x] + [p.values[o] for o in others]
        d = parts[0].dtype
        for o in parts[1:]:
            d = kiln_binary_dtype(d, o.dtype)
        parts = [q.astype(d) for q in parts]
        if rng.random() < 0.5 and x.ndim >= 1:
            axis = int(rng.integers(-x.ndim, x.ndim))
            return p.op(np.concatenate(parts, axis=axis), "concat", axis, a, *others)
        axis = int(rng.integers(-x.ndim - 1, x.ndim + 1))
        return p.op(np.stack(parts, axis=axis), "stack", axis, a, *others)
    # cast
    target = rng.choice([d for d in FLOAT + INT + ("bool",) if d != x.dtype.name])
    if target in INT and floating:
        return False  # float -> int truncation of values near integers is not worth comparing
    return p.op(x.astype(target), "cast", a, target)


def draw_case(rng, work, cid):
    """A random program and NumPy's answer to it."""
    p = Program(rng, work, cid)
    u = rng.random()
    family = "float" if u < 0.6 else "int" if u < 0.85 else "bool"
    p.family = family
    p.special = rng.random() < 0.3
    p.zero = rng.random() < 0.1
    rank = int(rng.integers(0, 4))
    sizes = [1, 2, 3, 4, 5, 7, 17]
    shape = tuple(int(rng.choice(sizes)) for _ in range(rank))
    if p.zero and rank:
        shape = tuple(0 if i == int(rng.integers(rank)) else d for i, d in enumerate(shape))
    pool = {"float": FLOAT, "int": INT, "bool": ("bool",)}[family]
    for _ in range(int(rng.integers(1, 4))):
        p.load(random_input(rng, broadcast_variant(rng, shape) if p.values else shape, rng.choice(pool), p.special))
    steps, tries = int(rng.integers(2, 8)), 0
    with np.errstate(all="ignore"):
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
    u = rng.random()
    if u < 0.5:
        a = p.load(random_input(rng, (3, 4), "float32"))
        b = p.load(random_input(rng, (int(rng.choice([2, 5])), int(rng.choice([3, 5]))), "float32"))
        name = rng.choice(["add", "mul", "maximum", "less"])
        p.lines.append(f"op t9 {name} {a} {b}")
        expected = "shape_error"
    elif u < 0.75:
        a = p.load(random_input(rng, (2, 3), "float64"))
        axis = rng.choice(["2", "3", "-3", "0,-2", "1,-1", "-1,1"])  # out of range, or one axis named twice
        p.lines.append(f"op t9 {rng.choice(['sum', 'max', 'mean'])} {a} {axis} 0")
        expected = "value_error"
    else:
        a = p.load(random_input(rng, (3,), "bool"))
        b = p.load(random_input(rng, (3,), "bool"))
        p.lines.append(f"op t9 {rng.choice(['sub', 'pow', 'floor_divide'])} {a} {b}")  # NumPy: TypeError too
        expected = "dtype_error"
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
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
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
            ok = np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
        else:
            finite = want[np.isfinite(want)]
            scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
            ok = np.allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True)
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
