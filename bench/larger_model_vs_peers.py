#!/usr/bin/env python3
"""The larger model of issue #14 (784-512-512-10, relu, softmax cross-entropy against soft labels, Adam with lr 1e-3,
a batch of 256) in kiln's three modes (bench/larger_model.cpp), PyTorch eager and JAX `jit`, measured in one run on
one CPU core. Usage:

    python3 bench/larger_model_vs_peers.py build-bench/bench/bench_larger_model [rounds] [steps]

Every contender is pinned to the same core (this process's affinity, inherited by kiln's binary) and single-threaded
(OPENBLAS_NUM_THREADS, torch.set_num_threads(1), XLA's single-threaded Eigen). The loss is written as kiln's is:
mean(log(sum(exp(z), 1)) - sum(y * z, 1)). JAX's Adam is written out in jax.numpy inside the jitted step (the
update as optax computes it), so one call is one compiled training step. Each peer: the median of `rounds` timed
rounds of `steps` steps after 5 warm-up steps. kiln's binary and the peers take turns, twice; each ratio is
against kiln's graph mode in the same pass. A missing package is reported and skipped.
"""
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np

BATCH, IN, HIDDEN, CLASSES = 256, 784, 512, 10
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-7


def pin():
    """One core for everything (kiln's binary inherits it)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[0]})
        return cpus[0]
    except (AttributeError, OSError):
        return None


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    logits = rng.standard_normal((BATCH, CLASSES))
    y = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return x, y.astype(np.float32)


def init():
    rng = np.random.default_rng(1)
    params = []
    for fan_in, fan_out in ((IN, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, CLASSES)):
        limit = np.sqrt(6.0 / (fan_in + fan_out))  # Glorot uniform, zero biases, as kiln's dense layer
        params.append(rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32))
        params.append(np.zeros(fan_out, np.float32))
    return params


def timed(step, rounds, steps):
    for _ in range(5):
        step()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        times.append((time.perf_counter() - t0) / steps * 1e3)
    times.sort()
    return times[len(times) // 2], float(loss)


def torch_step():
    import torch
    torch.set_num_threads(1)
    x, y = (torch.from_numpy(a) for a in data())
    params = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in init()]
    opt = torch.optim.Adam(params, lr=LR, eps=EPS)

    def step():
        opt.zero_grad(set_to_none=True)
        w1, b1, w2, b2, w3, b3 = params
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        z = h @ w3 + b3
        loss = torch.mean(torch.log(torch.sum(torch.exp(z), 1, keepdim=True)) - torch.sum(y * z, 1, keepdim=True))
        loss.backward()
        opt.step()
        return loss.item()
    return step, torch.__version__


def jax_step():
    import jax
    import jax.numpy as jnp
    x, y = (jnp.asarray(a) for a in data())
    params = [jnp.asarray(p) for p in init()]

    def loss_fn(ps):
        w1, b1, w2, b2, w3, b3 = ps
        h = jax.nn.relu(x @ w1 + b1)
        h = jax.nn.relu(h @ w2 + b2)
        z = h @ w3 + b3
        return jnp.mean(jnp.log(jnp.sum(jnp.exp(z), 1, keepdims=True)) - jnp.sum(y * z, 1, keepdims=True))

    @jax.jit
    def train(ps, m, v, t):
        loss, g = jax.value_and_grad(loss_fn)(ps)
        t = t + 1
        m = [B1 * mi + (1 - B1) * gi for mi, gi in zip(m, g)]
        v = [B2 * vi + (1 - B2) * gi * gi for vi, gi in zip(v, g)]
        c1, c2 = 1 - B1 ** t, 1 - B2 ** t
        ps = [p - LR * (mi / c1) / (jnp.sqrt(vi / c2) + EPS) for p, mi, vi in zip(ps, m, v)]
        return ps, m, v, t, loss

    state = [params, [jnp.zeros_like(p) for p in params], [jnp.zeros_like(p) for p in params], jnp.float32(0)]

    def step():
        state[0], state[1], state[2], state[3], loss = train(*state)
        return loss.block_until_ready()
    return step, jax.__version__


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    passes = 2  # every contender measured twice, in turn, so that a drift in the machine's speed shows
    core = pin()
    print(f"pinned to CPU {core}" if core is not None else "could not pin to one CPU")
    peers = []
    for name, make in (("PyTorch", torch_step), ("JAX", jax_step)):
        try:
            step, version = make()
        except ImportError:
            print(f"{name} is not installed; skipped")
            continue
        peers.append((f"{name} {version} {'eager' if name == 'PyTorch' else 'jit'}", step))
    results = {}  # name -> [(ms, loss) per pass]
    for _ in range(passes):
        out = subprocess.run([sys.argv[1], str(rounds), str(steps)], check=True, capture_output=True, text=True).stdout
        kiln = {}
        for line in out.splitlines():
            m = re.match(r"(graph|function|eager)\s+([0-9.]+)\s", line)
            if m:
                kiln[m.group(1)] = float(m.group(2))
        if set(kiln) != {"graph", "function", "eager"}:
            sys.exit("could not read kiln's three modes from:\n" + out)
        for mode, label in (("graph", "kiln graph mode (session)"), ("function", "kiln function mode (kiln::function)"),
                            ("eager", "kiln eager mode (tape)")):
            results.setdefault(label, []).append((kiln[mode], None, kiln["graph"]))
        for label, step in peers:
            ms, loss = timed(step, rounds, steps)
            results.setdefault(label, []).append((ms, loss, kiln["graph"]))
    print("| one step, 784-512-512-10, batch 256, one core | ms per step, pass 1 / pass 2 "
          "| time / kiln graph's (same pass) | last loss |")
    print("|---|---:|---:|---:|")
    for label, runs in results.items():
        ms = " / ".join(f"{r[0]:.3f}" for r in runs)
        ratio = " / ".join(f"{r[0] / r[2]:.2f}" for r in runs)
        loss = runs[-1][1]
        print(f"| {label} | {ms} | {ratio} | {'' if loss is None else f'{loss:.6f}'} |")


if __name__ == "__main__":
    main()
