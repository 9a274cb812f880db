#!/usr/bin/env bash
# Installs the Debian packages kiln needs, only those that are missing, without questions.
# usage: install-deps.sh [demo|test|bench]  (default: demo, what the examples need)
set -euo pipefail
what="${1:-demo}"
packages=(g++ cmake make libxtensor-dev libxsimd-dev xtl-dev libopenblas-dev)
case "$what" in
  demo) ;;
  # The tests: doctest, python3 with venv for the NumPy differential test (NumPy 2 comes from PyPI into a virtual
  # environment), clang with its sanitizer and fuzzer runtimes and OpenMP (the test command builds the suite with clang
  # as well).
  # OpenMPI for the data-parallel tests (kiln/distributed.hpp), run under mpirun. LLVM's linker, lld: the sanitizer
  # builds' programs are about 300 MB each, and GNU ld took 5x lld's CPU to link one.
  test) packages+=(doctest-dev python3 python3-venv clang libclang-rt-dev libomp-dev libopenmpi-dev openmpi-bin lld) ;;
  # Debian's clang 19 for bench/compile_time_deep.sh (CXX=clang++-19); where it is installed the test command builds one
  # test with it too.
  bench) packages+=(libbenchmark-dev libeigen3-dev python3 clang-19) ;;
  *) echo "install-deps.sh: unknown set '$what' (demo, test or bench)" >&2; exit 2 ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kiln: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
