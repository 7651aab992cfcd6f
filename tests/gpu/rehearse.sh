#!/usr/bin/env bash
# A dress rehearsal of tests/gpu/run.sh where there is no GPU: run.sh with
# TRIDENT_GPU_REHEARSAL=1 (its header says what that changes) on the CUDA build BUILD
# (default build; cuemu, BUILD/cuemu, is its "GPU"), then its results checked, so that a bug
# in the script's own plumbing shows here and not on the rare GPU run:
#   tests/gpu/rehearse.sh OUT [BUILD]
# OUT must be empty, missing, or an earlier rehearsal's (then emptied). Checked: run.sh's
# exit status 0; summary.json's build, tests, ceilings, bert and llm "pass", memcheck
# refused (compute-sanitizer needs a GPU), pytorch "4 of 4 ran"; every step in steps.tsv
# passed; every row's JSON there ("no row missing" in the table); the table's BERT rows (4
# trident backends and 2 PyTorch modes per task) and the 10 LLM/SD/SAM rows; the archive
# holding every file. The PyTorch rows run on the cpu with the python3 on PATH; where it has
# no torch and transformers, their 4 rows are accepted as "not importable" (said so).
# Exit 1 on any failed check. On 2 cores: 1.5 minutes without torch; with it 2.5, or 4
# when torch.compile's cache is cold (the PyTorch rows' reduce-overhead compiles).
set -uo pipefail
out=${1:?usage: tests/gpu/rehearse.sh OUT [BUILD]}
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
bdir=${2:-$root/build}
[ -d "$bdir" ] || { echo "rehearse: no build directory $bdir"; exit 1; }
bdir=$(cd "$bdir" && pwd)
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  [ -f "$out/steps.tsv" ] || { echo "rehearse: $out is not empty and not a rehearsal's: not touched"; exit 1; }
  rm -rf "${out:?}"/* # an earlier rehearsal's files: no stale JSON is read as this run's
fi
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 1
TRIDENT_GPU_REHEARSAL=1 TRIDENT_GPU_BUILD=$bdir bash "$root/tests/gpu/run.sh" "$out"
rc=$?

pass=0 fail=0
check() { # check WHAT OK(0/1)
  if [ "$2" = 0 ]; then echo "ok   $1"; pass=$((pass + 1)); else echo "FAIL $1"; fail=$((fail + 1)); fi
}
echo
echo "== the rehearsal's checks =="
check "run.sh exits 0 (it exited $rc)" "$([ "$rc" = 0 ]; echo $?)"
torch=1
python3 -c 'import torch, transformers' 2>/dev/null || torch=0
[ $torch = 0 ] && echo "note: python3 has no torch/transformers: the 4 PyTorch rows are expected to say so"
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ""))' \
  "$out/summary.json" "$1" 2>/dev/null; }
for k in build tests ceilings bert llm; do
  v=$(field $k)
  check "summary.json: $k is pass ($v)" "$([ "$v" = pass ]; echo $?)"
done
v=$(field memcheck)
check "summary.json: memcheck refused, its INI ran ($v)" "$([[ $v == "refused (rehearsal"*": pass)" ]]; echo $?)"
v=$(field pytorch)
want="4 of 4 ran"
[ $torch = 0 ] && want="0 of 4 ran"
check "summary.json: pytorch is '$want' ($v)" "$([ "$v" = "$want" ]; echo $?)"
# every step passed (memcheck: refused, its INI's run passed; the PyTorch rows without
# torch: exit 2, said in their JSON)
bad=$(awk -F'\t' -v t=$torch '$5 != "pass" && !($1 == "memcheck" && $5 ~ /^refused \(rehearsal.*: pass\)$/) &&
  !(t == 0 && $1 ~ /^torch_/ && $5 == "FAIL (exit 2)")' "$out/steps.tsv")
check "every step in steps.tsv passed${bad:+: $bad}" "$([ -z "$bad" ]; echo $?)"
n=$(wc -l <"$out/steps.tsv")
check "steps.tsv has all 23 steps before the summary ($n)" "$([ "$n" = 23 ]; echo $?)"
check "the table: no row missing" "$(grep -q '^no row missing' "$out/table.txt"; echo $?)"
if [ $torch = 0 ]; then
  n=$(grep -Ec '^(predict|fit) +pytorch(:reduce-overhead)? .* FAILED: torch/transformers not importable' "$out/table.txt")
  check "the table: the 4 PyTorch rows say torch is not importable ($n)" "$([ "$n" = 4 ]; echo $?)"
fi
for task in predict fit; do
  n=$(grep -Ec "^$task +(torch|torch:reduce-overhead|tf|jax) " "$out/table.txt")
  check "the table: 4 trident BERT $task rows ($n)" "$([ "$n" = 4 ]; echo $?)"
  if [ $torch = 1 ]; then
    n=$(grep -Ec "^$task +pytorch(:reduce-overhead)? .*[0-9.]+x$" "$out/table.txt")
    check "the table: 2 PyTorch BERT $task rows, each with its ratio ($n)" "$([ "$n" = 2 ]; echo $?)"
  fi
done
n=$(grep -Ec "^cuda_[a-z_]+ +[a-z0-9?]+ +(torch|torch:reduce-overhead|tf|jax) .* True" "$out/table.txt")
check "the table: 40 LLM/SD/SAM rows, all agreeing ($n)" "$([ "$n" = 40 ]; echo $?)"
n=$(grep -c "within the tolerance of diffusers'" "$out/table.txt")
check "the table: sd_reference's 4 rows within diffusers' tolerance ($n)" "$([ "$n" = 4 ]; echo $?)"
sheet="^(bert|gemma|mistral)_(fit|predict|generate) +floor +[0-9.]+ ms +design +[0-9.]+ ms +measured +[0-9.]+ ms"
n=$(grep -Ec "$sheet" "$out/table.txt")
check "the table: 6 roofline sheets, each measured ($n)" "$([ "$n" = 6 ]; echo $?)"
check "the table: the ceilings" "$(grep -q '^cuBLASLt GEMM 256^3 .* TFLOP/s$' "$out/table.txt"; echo $?)"
listed=$(tar -tzf "$out/gpu_results.tar.gz" 2>/dev/null | sort)
files=$(cd "$out" && find . -maxdepth 1 -type f ! -name 'gpu_results.tar.gz*' -printf '%P\n' | sort)
check "the archive holds every file of OUT ($(echo "$listed" | wc -l) files)" \
  "$([ -n "$listed" ] && [ "$listed" = "$files" ]; echo $?)"
echo "rehearsal: $pass passed, $fail failed"
[ "$fail" = 0 ]
