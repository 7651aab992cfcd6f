#!/usr/bin/env bash
# Data-parallel fit under mpirun (docs/parallel.md), two ranks on this machine:
#   - BERT tiny and Gemma tiny LoRA fit on every backend: each step's loss within 1e-5 of
#     one process on the same global batch ([run] reference = the one-process run's
#     --outputs), and the trained state the same, bit for bit, on both ranks (checked by the
#     run at step 10);
#   - one table, from rank 0; --baseline (a one-process run's JSON) and --scaling (measured
#     first in the same run) give the scaling against one process;
#   - a rank that hangs: the other stops inside [run] collective_timeout, naming it;
#   - a rank that dies: the job stops, the dead rank named;
#   - a rank whose trained state drifts: the run fails naming the first state that differs.
# Run from the repo root as: tests/dp.sh path/to/trident MPIRUN
set -u
bin=$1
mpirun=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# a command may run 5 minutes; a rank killed by a signal is a failure the run reports
expect_timeout=300 expect_signal_ok=1
. "$(dirname "$0")/harness.sh"

# Two ranks on whatever cores there are, one OpenMP thread each; as root too (CI). In the
# sanitizer build the ranks keep ASan's checks but not its leak report, which lists Open
# MPI's own (its components are unloaded at MPI_Finalize, their frames unnamed): trident's
# side of the transform is leak-checked without MPI by test_dp. SIGSEGV is left to its
# default action, so that the dead rank's signal is what mpirun reports.
# Open MPI's shared-memory transport copies between processes through CMA (process_vm_readv),
# which a container's ptrace policy may forbid; plain copies always work.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
mpi=("$mpirun" -np 2 --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x XDG_CACHE_HOME
     -x "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:handle_segv=0")


# fit_pair NAME RUN_LINES [SECTIONS]: one process, then two ranks held to its losses.
fit_pair() {
  local name=$1 run=$2 more=${3:-}
  local common="[run]
$run
task = fit
backends = torch, torch:reduce-overhead, tf, jax
batch = 4
seq_len = 16
warmup = 1
steps = 9"
  ini "$name.ini" "$common
$more"
  expect "$name: one process" 0 'all backends ran and agree' -- \
    env OMP_NUM_THREADS=1 "$bin" run "$tmp/$name.ini" --outputs "$tmp/$name.one.safetensors" --json "$tmp/$name.one.json"
  ini "$name.dp.ini" "$common
tolerance = 1e-5
reference = $name.one.safetensors
$more"
  # stdout alone from here: the table and its notes, never cut by a progress line
  expect_stderr=$tmp/err expect "$name: two ranks" 0 'data parallel: 2 ranks, batch 4 = 2 x 2' -- \
    "${mpi[@]}" "$bin" run "$tmp/$name.dp.ini" --baseline "$tmp/$name.one.json"
  local agree
  agree=$(grep -Ec "^  (torch|torch:reduce-overhead|tf|jax) +ok +'loss'" "$tmp/out")
  if [ "$agree" = 4 ]; then ok "$name: every step's loss within 1e-5 of one process, every backend"
  else bad "$name: every step's loss within 1e-5 of one process, every backend ($agree of 4)"; fi
  agree=$(grep -Ec 'the trained state was the same on all 2 ranks at 1 check$' "$tmp/out")
  if [ "$agree" = 4 ]; then ok "$name: the trained state the same on both ranks after 10 steps, every backend"
  else bad "$name: the trained state the same on both ranks after 10 steps, every backend ($agree of 4)"; fi
  if [ "$(grep -Ec '^backend +first ms' "$tmp/out")" = 1 ]; then ok "$name: one table, from rank 0"
  else bad "$name: one table, from rank 0"; fi
  if grep -Eq '^jax +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9]+%$' "$tmp/out"; then ok "$name: scaling against the baseline"
  else bad "$name: scaling against the baseline"; fi
}

fit_pair bert "model = bert
preset = tiny"
# a loss with no labels to count (BCE): each rank's share is its rows'
fit_pair bert_multilabel "model = bert
preset = tiny" "[model]
num_labels = 3
problem_type = multi_label_classification"
fit_pair gemma "model = gemma
preset = tiny" "[model]
lora_rank = 4"

# --scaling: rank 0 measures the step in one process first, in the same run.
expect_stderr=$tmp/err expect "--scaling measures one process in the same run" 0 \
  '^scaling against one process \(measured first, in this run\)' -- "${mpi[@]}" "$bin" run "$tmp/bert.ini" --scaling
if grep -Eq '^tf +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9]+%$' "$tmp/out"; then ok "--scaling: a row per backend"
else # the table and every tf line, where the first 40 lines of the output may not reach them
  grep -E -A6 '^scaling against|^tf' "$tmp/out" > "$tmp/out.tf"; mv "$tmp/out.tf" "$tmp/out"
  bad "--scaling: a row per backend"; fi
expect "--scaling in one process is refused" 2 'compare a data-parallel run' -- "$bin" run "$tmp/bert.ini" --scaling
# --baseline from a one-process run slowed (as by other load then): efficiency far past
# 100% is said to be more likely the baseline's than the ranks'
"$bin" run "$tmp/bert.ini" --json "$tmp/one.json" > /dev/null 2>&1
sed -E 's/"mean_ms":[[:space:]]*[0-9.e+-]+/"mean_ms": 100000/' "$tmp/one.json" > "$tmp/slow.json"
expect "--baseline: efficiency past 110% is said" 0 'note: efficiency over 110% \(.*\): more likely the one-process time' \
  -- "${mpi[@]}" "$bin" run "$tmp/bert.ini" --baseline "$tmp/slow.json"

# Faults, through tests/plugins' faulty backend (it trains), misbehaving on rank 1 only.
faulty=$(cd "$(dirname "$bin")" && pwd)/fault_plugins/libtrident_backend_faulty.so
fault_ini() {
  ini "f_$1.ini" "[run]
model = bert
preset = tiny
task = fit
backends = $faulty
batch = 4
seq_len = 8
warmup = 1
steps = 6
collective_timeout = 3
check_every = 2
[backend.faulty]
fault = $1
rank = 1
at_step = 3"
}
fault_ini hang
# within SECONDS NAME: the last `expect` (begun at $start) took less than SECONDS
within() { local took=$((SECONDS - start)); if [ "$took" -lt "$1" ]; then ok "$2 ($took s)"; else bad "$2 ($took s)"; fi; }
start=$SECONDS
expect "a rank that hangs: the other stops, naming it" 1 \
  "rank 0: .*did not complete within \[run\] collective_timeout = 3 s: rank 1 is behind, last at #[0-9]+ \(faulty, step 2" -- \
  "${mpi[@]}" "$bin" run "$tmp/f_hang.ini"
within 60 "a rank that hangs: stopped within the timeout"
fault_ini segv
expect "a rank that dies: the job stops, naming it" 1 'rank 1 .*(signal 11|Segmentation fault)' -- \
  "${mpi[@]}" "$bin" run "$tmp/f_segv.ini"
# A step that fails (an error, not a crash) on rank 1 alone: rank 1 goes on to the step's
# status exchange while rank 0 sums a gradient; every rank stops at once, naming both
# (it used to pair the two collectives and write a bucket into an 8-byte buffer).
fault_ini fail
start=$SECONDS
expect "a step that fails on one rank: every rank stops at once, naming both" 1 \
  "collective #[0-9]+ is .* here and .* on rank [01]: the ranks left the step in different places" -- \
  "${mpi[@]}" "$bin" run "$tmp/f_fail.ini"
within 3 "a step that fails on one rank: stopped before the collective timeout"
fault_ini perturb
expect "a rank whose trained state drifts: named" 1 \
  "after step 4 the ranks' trained state differs: '[^']+' hashes to [0-9a-f]{16} on rank 0 and [0-9a-f]{16} on rank 1" -- \
  "${mpi[@]}" "$bin" run "$tmp/f_perturb.ini"

# A rank whose setup fails (rank 0 alone cannot write --outputs) meets the others before
# the first collective: every rank stops at once, not after collective_timeout.
ini setup.ini $'[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = torch\nbatch = 4\nseq_len = 8\nsteps = 2\ncollective_timeout = 60'
start=$SECONDS
expect "a rank whose setup fails: every rank stops" 1 'cannot be written' -- \
  "${mpi[@]}" "$bin" run "$tmp/setup.ini" --outputs "$tmp/no/such/dir/o.safetensors"
within 30 "a rank whose setup fails: stopped before the collective timeout"
# Ranks that do not run one config (an INI each, as two hosts' copies could differ).
ini setup_s.ini "$(sed 's/^steps = 2/steps = 3/' "$tmp/setup.ini")"
ini setup_w.ini "$(cat "$tmp/setup.ini")
weights = $tmp/setup.ini"
mpmd=("$mpirun" --oversubscribe --allow-run-as-root -x OMP_NUM_THREADS=1 -x XDG_CACHE_HOME
      -x "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:handle_segv=0")
expect "ranks of another [run] steps: refused before the first step, naming it" 1 \
  'the ranks do not run one config: \[run\] steps is 2 on rank 0 and 3 on rank 1' -- \
  "${mpmd[@]}" -np 1 "$bin" run "$tmp/setup.ini" : -np 1 "$bin" run "$tmp/setup_s.ini"
start=$SECONDS
expect "a rank whose weights fail to load: its error said, every rank stops" 1 \
  'rank 1: error: .*setup_w.ini:[0-9]+: \[run\] weights: ' -- \
  "${mpmd[@]}" -np 1 "$bin" run "$tmp/setup.ini" : -np 1 "$bin" run "$tmp/setup_w.ini"
check "a rank whose weights fail to load: rank 0 names it" 'rank 1 failed before its first step'
within 30 "a rank whose weights fail to load: stopped before the collective timeout"

# Ctrl-C on one rank (its own SIGINT; mpirun's own stops the job): every rank stops
# after the same step, as its status exchange says, and the table and JSON come out
# marked interrupted, exit 130, not a rank left in a collective until collective_timeout.
ini long.ini $'[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = torch\nbatch = 4\nseq_len = 8\nsteps = 1000000\ncollective_timeout = 60'
start=$SECONDS
"${mpi[@]}" "$bin" run "$tmp/long.ini" --json "$tmp/long.json" > "$tmp/out" 2>&1 &
launcher=$!
rank=""
for _ in $(seq 1 120); do
  sleep 0.5
  rank=$(pgrep -f "^$bin run $tmp/long.ini" | head -1)
  [ -n "$rank" ] && grep -q 'needs about' "$tmp/out" && break
done
sleep 2
[ -n "$rank" ] && kill -INT "$rank"
wait "$launcher"
rc=$?
if [ "$rc" = 130 ] && grep -q '^INTERRUPTED: timed steps run: torch [0-9]' "$tmp/out" && grep -Eq '"interrupted":[[:space:]]*true' "$tmp/long.json"; then
  ok "Ctrl-C on one rank: every rank stops, the table and JSON marked interrupted, exit 130"
else echo "exit $rc" >> "$tmp/out"; bad "Ctrl-C on one rank: every rank stops, the table and JSON marked interrupted, exit 130"; fi
within 40 "Ctrl-C on one rank: stopped at once"

# What a data-parallel run refuses.
ini pred.ini $'[run]\nmodel = bert\npreset = tiny\nbackends = torch'
expect "predict on two ranks is refused" 1 '\[run\] task = predict in a data-parallel run \(2 ranks\): data parallelism trains' -- \
  "${mpi[@]}" "$bin" run "$tmp/pred.ini"
ini odd.ini $'[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = torch\nbatch = 3'
expect "a batch two ranks do not divide is refused" 1 'batch = 3 on 2 ranks: expected a multiple of the ranks' -- \
  "${mpi[@]}" "$bin" run "$tmp/odd.ini"

finish
