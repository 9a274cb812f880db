#!/usr/bin/env bash
# The GPU checks in one run (docs/gpu.md): builds with nvcc for sm_90 the device tests (test/gpu_cuda.cpp: test/gpu.cpp
# for eager mode and test/gpu_modes.cpp for graph mode, sessions and traced functions, in one unit), the Thrust
# lowering tests (test/thrust_lowering.cpp), the GPU example (examples/07_gpu.cpp) and the device benchmark
# (bench/gpu_eager.cpp), and, where MPI and NCCL are installed, the data-parallel test with NCCL
# (test/distributed_train.cpp, one rank), compiles in parallel, then runs them all on this machine's GPU and prints
# the figures.
# Meant to finish in under 8 minutes on a machine with a GPU and 16 cores.
#
# Needs nvcc (CUDA 12 or later, with CCCL and cuBLAS) and the headers kiln includes: xtensor, xsimd, xtl and doctest.
# Where they are not installed system-wide, point KILN_DEPS_INCLUDE at a folder that holds them.
# Output: logs and binaries in ${KILN_GPU_OUT:-build-gpu}; exit status 0 only when every test passed.
# KILN_GPU_PREBUILT=1 runs the binaries already in that folder (built by this script elsewhere, with the same nvcc,
# and carried to the GPU machine) and builds only those that are missing. KILN_GPU_BUILD_ONLY=1 builds and stops
# (on a machine with nvcc and no GPU), and also copies the headers the tests and kernels need (xtensor, xsimd, xtl,
# doctest) into $out/deps/include, so that the folder alone can be carried to a GPU machine and run there with
#   KILN_GPU_OUT=<folder> KILN_GPU_PREBUILT=1 KILN_DEPS_INCLUDE=<folder>/deps/include scripts/gpu-check.sh
# (about 45 MB; one run there then takes under 3 minutes, against about 8 to build there first).
# KILN_GPU_TIMEOUT (seconds, default 300) bounds each program's run.
# Where python3 has PyTorch, bench/torch_gpu_steps.py times PyTorch's training steps on the same GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${KILN_GPU_OUT:-build-gpu}"
mkdir -p "$out"
nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
arch="${KILN_CUDA_ARCH:-sm_90}"
# Function mode's kernel compiler (test/gpu_modes.cpp's compiled groups) builds device kernels with the same nvcc
# and architecture, into a cache under the output directory.
case "$out" in /*) jit_cache="$out/jit-cache" ;; *) jit_cache="$PWD/$out/jit-cache" ;; esac
export KILN_JIT_NVCC="${KILN_JIT_NVCC:-$nvcc}" KILN_JIT_CUDA_ARCH="$arch" KILN_JIT_INCLUDE="$PWD/include" \
       KILN_JIT_CACHE="$jit_cache"
[ -n "${KILN_DEPS_INCLUDE:-}" ] && export KILN_JIT_FLAGS="-I$KILN_DEPS_INCLUDE"
flags=(-std=c++20 "-arch=$arch" -O2 --expt-relaxed-constexpr -x cu -DKILN_GPU=1 -DKILN_HAVE_CBLAS=0 -Iinclude)
[ -n "${KILN_DEPS_INCLUDE:-}" ] && flags+=("-I$KILN_DEPS_INCLUDE")

echo "== gpu-check: $("$nvcc" --version | tail -1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "(nvidia-smi not found)"

start=$(date +%s)
build() {  # name source [extra flags...]
  local name=$1 src=$2
  shift 2
  if [ "${KILN_GPU_PREBUILT:-0}" = 1 ] && [ -x "$out/$name" ]; then
    echo "prebuilt $name"
    return 0
  fi
  if "$nvcc" "${flags[@]}" "$src" -o "$out/$name" "$@" -lcublas >"$out/$name.build.log" 2>&1; then
    echo "built $name ($(( $(date +%s) - start )) s)"
  else
    echo "BUILD FAILED: $name (log: $out/$name.build.log)"
    tail -30 "$out/$name.build.log"
    return 1
  fi
}
build test_gpu test/gpu_cuda.cpp & p1=$!
build test_thrust test/thrust_lowering.cpp & p2=$!
build 07_gpu examples/07_gpu.cpp & p3=$!
build gpu_eager bench/gpu_eager.cpp & p4=$!
# The data-parallel test with NCCL for GPU tensors, where MPI (mpicxx) and NCCL are installed.
p5=
if [ "${KILN_GPU_PREBUILT:-0}" = 1 ] && [ -x "$out/distributed_nccl" ]; then
  echo "prebuilt distributed_nccl"
elif command -v mpicxx >/dev/null && [ -e "$(dirname "$nvcc")/../include/nccl.h" ]; then
  build distributed_nccl test/distributed_train.cpp -DKILN_NCCL=1 $(mpicxx --showme:compile) -lnccl $(mpicxx --showme:link) & p5=$!
else
  echo "(no mpicxx or no nccl.h: the NCCL data-parallel test is not built)"
fi
fail=0
for p in $p1 $p2 $p3 $p4 $p5; do wait "$p" || fail=1; done
warnings=$(cat "$out"/*.build.log 2>/dev/null | grep -c "warning")
echo "nvcc warnings across the builds: $warnings"
if [ "${KILN_GPU_BUILD_ONLY:-0}" = 1 ]; then
  mkdir -p "$out/deps/include"
  for h in xtensor xsimd xtl doctest; do
    src="${KILN_DEPS_INCLUDE:-/usr/include}/$h"
    [ -d "$src" ] && cp -r "$src" "$out/deps/include/" || echo "($h not found under ${KILN_DEPS_INCLUDE:-/usr/include})"
  done
  echo "== gpu-check: built in $(( $(date +%s) - start )) s into $out; carry it and run with KILN_GPU_PREBUILT=1"
  exit $fail
fi

# Libraries a binary built elsewhere may not find here (cuBLAS, NCCL): the CUDA toolkit's, then those of python3's
# nvidia packages (PyTorch's images carry them), after whatever LD_LIBRARY_PATH already names.
for d in /usr/local/cuda/lib64 $(python3 -c 'import nvidia, os
for p in nvidia.__path__:
    for q in sorted(os.listdir(p)): print(os.path.join(p, q, "lib"))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH

run() {  # name [args...]
  local name=$1
  shift
  echo "== $name"
  if [ -x "$out/$name" ]; then
    timeout "${KILN_GPU_TIMEOUT:-300}" "$out/$name" "$@"
    local rc=$?
    if [ $rc -ne 0 ]; then echo "FAILED: $name (exit $rc)"; fail=1; fi
  else
    echo "not built: $name"
    fail=1
  fi
}
run test_gpu
run test_thrust
run 07_gpu
run gpu_eager
if python3 -c "import torch" 2>/dev/null; then
  echo "== PyTorch on the same GPU (bench/torch_gpu_steps.py)"
  timeout 120 python3 bench/torch_gpu_steps.py || echo "(bench/torch_gpu_steps.py failed; not a kiln failure)"
fi
if [ -n "$p5" ] || [ -x "$out/distributed_nccl" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for mode in collectives eager function graph; do run distributed_nccl "$mode" cuda; done
fi
echo "== gpu-check done in $(( $(date +%s) - start )) s; $([ $fail -eq 0 ] && echo 'all passed' || echo 'FAILURES above')"
exit $fail
