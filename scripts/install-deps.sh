#!/usr/bin/env bash
# Installs the Debian packages kiln needs, only those that are missing, without questions.
set -euo pipefail
packages=(g++ cmake make libboost-dev libxtensor-dev libxsimd-dev xtl-dev doctest-dev libopenblas-dev
          libbenchmark-dev libeigen3-dev graphviz python3)
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
# NumPy for the differential test (test/numpy_differential.py): Debian's package when python3 lacks it.
if ! python3 -c 'import numpy' 2>/dev/null; then
  echo "kiln: installing NumPy"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  { $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-numpy; } ||
    python3 -m pip install --quiet numpy
fi
