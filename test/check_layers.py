#!/usr/bin/env python3
"""kiln's headers form layers (issue #13): no header includes one from a layer above its own. Reads every
#include "..." line under include/kiln and fails, naming each offending line, when a header reaches up.

    python3 test/check_layers.py [include/kiln]

The layers, lowest first (a folder, or a header at the top of include/kiln):
  0 core/                        dtypes, shapes, errors, the allocator, BLAS detection
  1 ops/                         the op vocabulary
  2 expr/                        the expression core every mode builds on
  3 backend/                     the device interface; the CPU device (fused loop, threads, kernels); Thrust
  4 eager/                       kiln::tensor and eager ops
  5 graph/                       graph mode (its session holds kiln::tensor feeds and results)
  6 nn/, data/                   layers, losses, optimizers and their rules; data loaders
  7 function/                    function mode (traces eager code and graph-mode expressions)
  8 registry/, registry.hpp      ops by name at run time
  9 io/                          files
 10 the umbrella headers (kiln.hpp, graph.hpp, function.hpp, io.hpp, distributed.hpp) and distributed/,
                                which stands on kiln.hpp
Headers in one layer may include each other.
"""
import os
import re
import sys

LAYERS = {
    "core": 0,
    "ops": 1,
    "expr": 2,
    "backend": 3,
    "eager": 4,
    "graph": 5,
    "nn": 6,
    "data": 6,
    "function": 7,
    "registry": 8,
    "io": 9,
    "distributed": 10,
}
TOP = 10
FILES = {"registry.hpp": 8}  # a header at the top of include/kiln that is a layer's own, not an umbrella


def layer_of(path, root):
    rel = os.path.relpath(path, root)
    first = rel.split(os.sep)[0]
    if first == rel:  # a header at the top of include/kiln
        return FILES.get(rel, TOP), rel
    if first not in LAYERS:
        raise SystemExit(f"check_layers: {rel} is in folder '{first}', which has no layer; add it to LAYERS")
    return LAYERS[first], first


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "include", "kiln")
    root = os.path.normpath(root)
    include = re.compile(r'\s*#\s*include\s+"([^"]+)"')
    bad, checked = [], 0
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".hpp"):
                continue
            path = os.path.join(folder, name)
            mine, mine_name = layer_of(path, root)
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    m = include.match(line)
                    if not m:
                        continue
                    target = os.path.normpath(os.path.join(folder, m.group(1)))
                    if not target.startswith(root + os.sep):
                        continue  # outside kiln (none today)
                    if not os.path.exists(target):
                        bad.append(f"{os.path.relpath(path, root)}:{number}: includes {m.group(1)}, which does not exist")
                        continue
                    theirs, their_name = layer_of(target, root)
                    checked += 1
                    if theirs > mine:
                        bad.append(f"{os.path.relpath(path, root)}:{number}: layer {mine} ({mine_name}) includes "
                                   f"{os.path.relpath(target, root)}, layer {theirs} ({their_name}) above it")
    for b in bad:
        print(b)
    print(f"check_layers: {checked} includes checked, {len(bad)} reaching up")
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
