#!/usr/bin/env bash
# tests/with_isa.sh PROBE ISA PROGRAM [ARGS...]: PROGRAM with TRIDENT_CPU_ISA=ISA, so the
# kernels' copies for that level (and oneDNN capped to it) run here. Exit 77, which ctest
# counts as skipped and says so, where this cpu cannot run ISA or it would only repeat
# the native run (tests/isa_probe.c decides).
set -u
probe=$1 isa=$2
shift 2
export TRIDENT_CPU_ISA=$isa
line=$("$probe")
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIPPED: TRIDENT_CPU_ISA=$isa not run here: $line"
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "TRIDENT_CPU_ISA=$isa: $line"; exit 1; }
echo "TRIDENT_CPU_ISA=$isa: $line"
exec "$@"
