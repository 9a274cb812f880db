#!/usr/bin/env bash
# A rank that throws ends the whole job (issue #17): `distributed_train throw` on 3 ranks, where rank 1 throws while
# ranks 0 and 2 wait for it in a collective, must exit with a failure within 20 seconds, and its output must name
# rank 1 and its error. (The test's own timeout, 60 s here, turns a hang into a failure.)
# usage: mpi_abort_check.sh MPIEXEC DISTRIBUTED_TRAIN
set -u
start=$(date +%s)
out=$(timeout 60 "$1" -n 3 "$2" throw 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "mpi_abort_check: exit status $rc after ${elapsed} s"
fail=0
[ "$rc" -ne 0 ] || { echo "FAILED: the job reported success"; fail=1; }
[ "$rc" -ne 124 ] || { echo "FAILED: the job hung until the timeout"; fail=1; }
[ "$elapsed" -le 20 ] || { echo "FAILED: the job took ${elapsed} s to end"; fail=1; }
grep -q "kiln: rank 1 of 3 failed: kiln: value_error in 'test': rank 1 fails on purpose" <<<"$out" ||
  { echo "FAILED: the output does not name rank 1 and its error"; fail=1; }
grep -q "got past the collective" <<<"$out" && { echo "FAILED: a rank went on past the collective"; fail=1; }
[ "$fail" -eq 0 ] && echo "mpi_abort_check: the job ended in ${elapsed} s naming rank 1"
exit "$fail"
