#!/usr/bin/env bash
# The one script run where a GPU is lent (an H100 or H200, 16 cores), as one command, in at most
# 540 s all told (TRIDENT_GPU_BUDGET):
#   bash tests/gpu/run.sh OUT_DIR
# Every step has a planned budget in seconds (`plan` below, printed first; the plans add
# up to 535 of the 540 s). Each step runs under `timeout`: its plan, plus whatever the
# steps before it left unused beyond what the steps after it are planned (the build may
# also take up to 120 s of theirs: nothing runs without it). A time guard skips a step, by
# name, when its plan no longer fits in what is left. In order:
# 1. configure and build with CUDA (sm_90 only, to save time there): nvcc found on PATH,
#    else /usr/local/cuda/bin, else the newest /usr/local/cuda-*/bin (passed as
#    CMAKE_CUDA_COMPILER); make, else Ninja (carried in build-gpu-deps where missing);
# 2. the CUDA tests, each program once, through ctest (not the cpu-only kernel tests, nor
#    their NAME@ISA repeats): every CUDA kernel against the cpu kernel on random inputs
#    (test_cuda_kernels, test_cuda_vision), the backends on cuda, the allocator, GEMM plans and NVRTC, and the
#    one-rank data-parallel fit on cuda (test_dp: NCCL's path, its losses one process's bit
#    for bit); the kernels' verdicts by name from ctest's log;
# 3. compute-sanitizer memcheck on one small BERT training step on one backend (torch, or
#    TRIDENT_GPU_MEMCHECK_BACKEND; said so, and gone on, if the machine refuses it);
# 4. the ceilings: cuBLASLt bf16 GEMM TFLOP/s at 8192^3, device-to-device copy GB/s,
#    attention forward TFLOP/s at sequence 2048, SD's UNet 3x3 conv through cuDNN and through
#    im2col (tests/gpu/bench_cuda.c); then the roofline
#    sheets (trident roofline --run) of BERT base predict/fit and the 7B LLMs' fit and
#    generate: each kernel timed alone beside its floor on the card found (h100, h200) and its design time;
# 5. BERT base predict (batch 256) and fit (batch 32), sequence 512, on every backend
#    (conf/bert_predict.ini, conf/bert_fit.ini, 5 timed steps);
# 6. Gemma and Mistral small: generate (2 steps) and LoRA fit (5 steps) on every backend on cuda;
#    Stable Diffusion's small step, the small VAE's predict and its encoder's fit, the small
#    SAM's predict and its image encoder's fit (5 steps) on every backend; a random diffusers
#    pipeline's text to image against diffusers' float64 pictures (tests/fixtures/reference_sd),
#    then image to image, inpainting, UniPC and SAM on a photo against theirs (references.sh);
#    which path ran their convolutions (cuDNN, im2col, a shape cuDNN turned down) is said;
# 7. the PyTorch peers, last, so that the trident rows exist if time runs out: the BERT
#    tasks through the PyTorch + transformers of that machine (tests/gpu/torch_bert.py,
#    5 timed steps, eager first, then torch.compile reduce-overhead, same math mode);
# then tests/gpu/summarize.py: the steps with their budgets, each BERT row with its
# fraction of the FLOP floor and its ratio to PyTorch eager, the LLM rows, and the rows
# that are missing, and why. Each row writes its own JSON (one killed by its timeout leaves
# NAME.json.partial, and touches no other row's file); OUT_DIR/gpu_results.tar.gz holds
# every log, ini and JSON, and the summary table is printed last. Where no GPU is seen
# (nvidia-smi, /dev/nvidia*), the GPU steps are skipped, by name (a dry run);
# TRIDENT_GPU_FORCE=1 runs them anyway.
#
# The GPU machine reaches no package registry: first run tests/gpu/fetch_deps.sh on the
# development machine and carry build-gpu-deps (the libraries, and ninja for a machine with
# no make). Exit status: 0 when build, tests, ceilings and bert passed, else 1 (so a dry run
# without a GPU exits 1).
#
# TRIDENT_GPU_REHEARSAL=1 (off by default; tests/gpu/rehearse.sh sets it) is a dress
# rehearsal of this script on a machine without a GPU: every step runs its success path on
# cuemu (tests/cuemu: the CUDA side on the cpu) in the existing build TRIDENT_GPU_BUILD
# (default build), at sizes that take seconds there. What it changes, and only then: the
# GPU is taken as seen (as TRIDENT_GPU_FORCE=1), LD_LIBRARY_PATH starts with BUILD/cuemu;
# configure is `cmake -S . -B BUILD` on that build's own cache (no arguments: nothing
# rebuilt); ctest runs from a test dir of its own under OUT (its LastTest.log is not the
# build's) and leaves out test_cuda_kernels and test_cuda_vision (3 and 8 minutes on cuemu)
# and the NVRTC tests (they check the real NVRTC, cuemu has a stand-in); memcheck runs its INI without
# compute-sanitizer (which needs a GPU) and says so; the ceilings are trident_bench_cuda
# --small; every INI (BERT, roofline, the LLM/SD/SAM rows) its tiny preset, batch 2,
# sequence 16 (generate: 12 tokens after 8), and the PyTorch rows the same BERT on the cpu.
set -uo pipefail
out=${1:?usage: tests/gpu/run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.." || exit 1
t0=$SECONDS
limit=${TRIDENT_GPU_BUDGET:-540}
rehearsal=${TRIDENT_GPU_REHEARSAL:-0}
declare -A result status plan borrow gpu slot_of used_of

# ---- the plan: each step's budget in seconds, in the order they run ----
order=(setup configure build tests memcheck ceilings roofline bert_predict bert_fit
       cuda_gemma_generate cuda_mistral_generate cuda_gemma_fit cuda_mistral_fit cuda_sd_predict cuda_vae_predict cuda_sd_fit
       cuda_sam_predict cuda_sam_fit cuda_sd_reference
       torch_predict_eager torch_fit_eager torch_predict_reduce-overhead torch_fit_reduce-overhead
       summary)
plan=([setup]=10 [configure]=20 [build]=120 [tests]=55 [memcheck]=23 [ceilings]=20 [roofline]=20
      [bert_predict]=40 [bert_fit]=40
      [cuda_gemma_generate]=15 [cuda_mistral_generate]=15 [cuda_gemma_fit]=15 [cuda_mistral_fit]=15
      [cuda_sd_predict]=12 [cuda_vae_predict]=8 [cuda_sd_fit]=10 [cuda_sam_predict]=10 [cuda_sam_fit]=10
      [cuda_sd_reference]=12
      [torch_predict_eager]=14 [torch_fit_eager]=14
      [torch_predict_reduce-overhead]=14 [torch_fit_reduce-overhead]=14
      [summary]=15)
borrow=([build]=120)
for k in "${order[@]}"; do # every step but these needs the GPU
  case $k in setup | configure | build | summary) ;; *) gpu[$k]=1 ;; esac
done
reserve=${plan[summary]} # kept for summarize.py and the archive (and a killed step's 5 s grace)

note() { echo "[gpu $((SECONDS - t0))s] $*"; }
: >"$out/steps.tsv"
# record NAME VERDICT [SECONDS]: the step's verdict, also in steps.tsv (for summarize.py):
# name, planned s, timeout s (0: not run), used s, verdict. Again for the same NAME (a
# verdict read from the step's output: the tests' skips, memcheck's refusal), its line is
# replaced in place, its seconds kept.
record() {
  local line
  status[$1]=$2
  used_of[$1]=${3:-${used_of[$1]:-0}}
  line=$(printf '%s\t%s\t%s\t%s\t%s' "$1" "${plan[$1]}" "${slot_of[$1]:-0}" "${used_of[$1]}" "$2")
  awk -F '\t' -v n="$1" -v l="$line" '$1 == n {print l; done = 1; next} {print} END {if (!done) print l}' \
    "$out/steps.tsv" >"$out/steps.tsv.new" && mv -f "$out/steps.tsv.new" "$out/steps.tsv"
}
# fits NAME: the time guard. NAME's timeout into slot_of[NAME], or, when its plan no longer
# fits in what is left, NAME skipped, by name (status 1).
fits() {
  local name=$1 left=$((limit - reserve - (SECONDS - t0))) later=0 after=0 k t
  for k in "${order[@]}"; do
    if [ $after = 1 ] && [ "$k" != summary ] && [ -z "${status[$k]+x}" ] &&
       { [ "$have_gpu" = 1 ] || [ -z "${gpu[$k]+x}" ]; }; then
      later=$((later + plan[$k]))
    fi
    [ "$k" = "$name" ] && after=1
  done
  # the build (a step that may borrow) runs with what is left: nothing runs without it
  if [ "$left" -lt "${plan[$name]}" ] && { [ -z "${borrow[$name]:-}" ] || [ "$left" -le 0 ]; }; then
    note "$name: skipped by the time guard ($((SECONDS - t0)) s used, ${plan[$name]} s planned, $left s left of $limit s less $reserve s for the summary)"
    record "$name" "skipped (time guard)" 0
    return 1
  fi
  t=$((left - later))
  [ "$t" -lt "${plan[$name]}" ] && t=${plan[$name]}
  if [ -n "${borrow[$name]:-}" ] && [ "$t" -lt $((plan[$name] + borrow[$name])) ]; then
    t=$((plan[$name] + borrow[$name]))
  fi
  [ "$t" -gt "$left" ] && t=$left
  slot_of[$name]=$t
}
# gpu_step NAME: fits, and a GPU is seen (else skipped, by name)
gpu_step() {
  if [ "$have_gpu" = 0 ]; then
    note "$1: skipped (no GPU)"
    record "$1" "skipped (no GPU)" 0
    return 1
  fi
  fits "$1"
}
# run_row NAME LOG CMD...: CMD under timeout (NAME's slot, from fits), its output in LOG.
# The timeout sends SIGINT, as Ctrl-C: trident run then writes its JSON so far, marked
# interrupted (it does not on SIGTERM), kept as NAME.json.partial; SIGKILL 5 s later.
run_row() {
  local name=$1 log=$2 s=$SECONDS rc v
  shift 2
  note "$name: up to ${slot_of[$name]} s (planned ${plan[$name]} s)"
  timeout -s INT -k 5 "${slot_of[$name]}" "$@" >"$log" 2>&1
  rc=$?
  case $rc in
    0) v=pass ;;
    124 | 137) v="timed out (${slot_of[$name]} s)" ;;
    *) v="FAIL (exit $rc)" ;;
  esac
  record "$name" "$v" $((SECONDS - s))
  return $rc
}
# json_done NAME RC: NAME.json.part (written by the row) into place as NAME.json, or, when
# the row was killed by its timeout, kept as NAME.json.partial; no other file is touched.
json_done() {
  local part="$out/$1.json.part"
  [ -f "$part" ] || return 0
  case $2 in
    124 | 137) mv -f "$part" "$out/$1.json.partial" ;;
    *) mv -f "$part" "$out/$1.json" ;;
  esac
}

total=0
for k in "${order[@]}"; do total=$((total + plan[$k])); done
echo "planned budget per step (s), $total s planned of $limit s:"
for k in "${order[@]}"; do printf '  %-30s %4d\n' "$k" "${plan[$k]}"; done

# ---- 0. the machine: the GPU, and the build's tools and libraries, from the carried .debs ----
s=$SECONDS
have_gpu=0
if timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt" 2>/dev/null; then
  have_gpu=1
elif ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  have_gpu=1
  echo "a GPU (/dev/nvidia*), nvidia-smi failed" >"$out/gpu.txt"
else
  echo "no GPU (nvidia-smi failed, no /dev/nvidia*)" >"$out/gpu.txt"
fi
[ "${TRIDENT_GPU_FORCE:-0}" = 1 ] && have_gpu=1
# TRIDENT_GPU_BUILD and TRIDENT_GPU_CMAKE_ARGS let a dry run elsewhere reuse a build.
bdir=${TRIDENT_GPU_BUILD:-build-gpu}
if [ "$rehearsal" = 1 ]; then # the "GPU" is cuemu, in the build's own tree
  bdir=${TRIDENT_GPU_BUILD:-build}
  if [ -e "$bdir/cuemu/libtrident_kernels.so.1" ]; then
    have_gpu=1
    LD_LIBRARY_PATH="$(cd "$bdir/cuemu" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    echo "cuemu (rehearsal: no GPU, the CUDA side on the cpu, $bdir/cuemu)" >"$out/gpu.txt"
  else
    have_gpu=0
    echo "no cuemu (rehearsal: $bdir/cuemu/libtrident_kernels.so.1 not built; a CUDA build makes it)" >"$out/gpu.txt"
  fi
fi
cat "$out/gpu.txt"
need_libs=0 need_gen=0
if ! pkg-config --exists inih cmocka libcjson 2>/dev/null || [ ! -e /usr/include/oneapi/dnnl/dnnl.h ]; then need_libs=1; fi
if ! command -v make >/dev/null && ! command -v ninja >/dev/null; then need_gen=1; fi
if [ $need_libs = 1 ] || [ $need_gen = 1 ]; then
  deps=${TRIDENT_GPU_DEPS_PREFIX:-/opt/trdeps}
  if ls build-gpu-deps/*.deb >/dev/null 2>&1; then
    note "unpacking build-gpu-deps into $deps"
    mkdir -p "$deps"
    for f in build-gpu-deps/*.deb; do dpkg -x "$f" "$deps"; done
    if [ $need_libs = 1 ]; then
      lib=$deps/usr/lib/x86_64-linux-gnu
      export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$deps/usr/share/pkgconfig"
      export PKG_CONFIG_SYSROOT_DIR=$deps
      export CMAKE_PREFIX_PATH=$deps/usr
      command -v pkg-config >/dev/null || export PATH="$deps/usr/bin:$PATH" PKG_CONFIG=$deps/usr/bin/pkgconf
    fi
    # ninja last on PATH: what the machine has comes first
    if [ $need_gen = 1 ]; then export PATH="$PATH:$deps/usr/bin"; fi
  else
    [ $need_libs = 1 ] && note "WARNING: inih/cmocka/cjson/oneDNN missing and no build-gpu-deps carried (run tests/gpu/fetch_deps.sh here first)"
    [ $need_gen = 1 ] && note "WARNING: neither make nor ninja, and no build-gpu-deps carried (tests/gpu/fetch_deps.sh fetches ninja-build)"
  fi
fi
record setup "$([ $have_gpu = 1 ] && echo pass || echo "pass (no GPU)")" $((SECONDS - s))

# ---- 1. build ----
read -r -a cargs <<<"${TRIDENT_GPU_CMAKE_ARGS:--DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90}"
nvcc=$(command -v nvcc || true)
if [ -z "$nvcc" ]; then
  # the newest /usr/local/cuda-X.Y first (an unmatched glob stays itself, and is not executable)
  for c in /usr/local/cuda/bin/nvcc $(printf '%s\n' /usr/local/cuda-*/bin/nvcc | sort -rV); do
    if [ -x "$c" ]; then nvcc=$c; break; fi
  done
fi
gen=()
if [ -f "$bdir/CMakeCache.txt" ]; then
  gen_name=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$bdir/CMakeCache.txt")
  gen_why="$bdir's own"
elif command -v make >/dev/null; then
  gen_name="Unix Makefiles"
  gen_why="make found"
elif command -v ninja >/dev/null; then
  gen_name=Ninja
  gen_why="no make, ninja found"
  gen=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$(command -v ninja)")
else
  gen_name=""
fi
configured=0
if ! command -v cmake >/dev/null; then
  note "configure: FAIL: no cmake on this machine"
  record configure "FAIL (no cmake)" 0
elif [ -z "$gen_name" ]; then
  note "configure: FAIL: neither make nor ninja on this machine, and none carried (carry build-gpu-deps, from tests/gpu/fetch_deps.sh)"
  record configure "FAIL (no make, no ninja)" 0
elif fits configure; then
  if [ -n "$nvcc" ]; then cargs+=("-DCMAKE_CUDA_COMPILER=$nvcc")
  else note "WARNING: no nvcc on PATH, in /usr/local/cuda/bin or /usr/local/cuda-*/bin: the CUDA configure will fail"; fi
  note "configure in $bdir (generator: $gen_name, $gen_why; nvcc: ${nvcc:-none}; ${cargs[*]})"
  # That machine's compilers are not CI's: their new warnings are shown, not fatal (CI keeps
  # warnings as errors). -Wno-error goes last on each C compile line, after the project's -Werror.
  if [ "$rehearsal" = 1 ]; then # the build's own cache, as it is: nothing to rebuild
    note "rehearsal: configure $bdir as it was (its own cache), not with the options above"
    run_row configure "$out/configure.log" cmake -S . -B "$bdir" && configured=1
  else
    run_row configure "$out/configure.log" cmake -S . -B "$bdir" "${gen[@]}" -DTRIDENT_CUDA=ON -DTRIDENT_CUDA_WERROR=OFF \
      "${cargs[@]}" "-DCMAKE_C_COMPILE_OBJECT=<CMAKE_C_COMPILER> <DEFINES> <INCLUDES> <FLAGS> -Wno-error -o <OBJECT> -c <SOURCE>" &&
      configured=1
  fi
fi
if [ $configured = 0 ]; then
  record build "not run (no configure)" 0
elif fits build; then
  run_row build "$out/build.log" cmake --build "$bdir" -j"$(nproc)"
fi
built=0
if [ "${status[build]}" = pass ]; then
  result[build]=pass
  built=1
else
  result[build]="FAIL (configure: ${status[configure]}; build: ${status[build]})"
  [ -f "$out/configure.log" ] && tail -n 40 "$out/configure.log"
  [ -f "$out/build.log" ] && tail -n 40 "$out/build.log"
fi
note "build: ${result[build]}"
# need_build NAME: the build is there (else NAME is not run, by name), then gpu_step
need_build() {
  if [ $built = 0 ]; then
    note "$1: not run (no build)"
    record "$1" "not run (no build)" 0
    return 1
  fi
  gpu_step "$1"
}
# ini_of SRC DEST: the INI SRC as this run runs it, into DEST: device = cuda; in a rehearsal,
# its tiny preset, batch 2, sequence 16, and generate's 12 tokens after 8
ini_of() {
  local tiny=()
  [ "$rehearsal" = 1 ] && tiny=(-e 's/^preset *=.*/preset = tiny/' -e 's/^batch *=.*/batch = 2/'
    -e 's/^seq_len *=.*/seq_len = 16/' -e 's/^max_length *=.*/max_length = 12/' -e 's/^prompt_len *=.*/prompt_len = 8/')
  sed -e 's/^device *= *cpu/device = cuda/' "${tiny[@]}" "$1" >"$2"
}
# ini_get FILE KEY: KEY's value in FILE (its first, without a trailing comment)
ini_get() { sed -n "s/^$2 *= *\([^ ;]*\).*/\1/p" "$1" | head -n 1; }
# 8 threads and 8 tests at once on the GPU machine's 16 cores; fewer where there are fewer
jobs=$(nproc)
[ "$jobs" -gt 8 ] && jobs=8
export OMP_NUM_THREADS=$jobs

# ---- 2. the CUDA tests, each program once (ctest), the verdicts by name from its log ----
if need_build tests; then
  # the programs that touch CUDA, each once: not the cpu-only kernel tests, nor any NAME@ISA
  # or NAME@cuemu-* (the same program again under another instruction set, or on cuemu),
  # nor cuda_spills (ptxas's spill counts: no GPU in it, CI runs it)
  # (test_dp: the one-rank data-parallel fit on cuda, whose sums take NCCL's path)
  tdir=$bdir skip='@|^cuda_spills$' named=(test_cuda_kernels test_cuda_vision test_cuda_kernels_api test_backend_cuda test_dp)
  if [ "$rehearsal" = 1 ]; then # a test dir of its own (ctest may be running this), fewer programs
    tdir=$out/ctest skip='@|^cuda_spills$|^test_cuda_kernels$|^test_cuda_vision$|nvrtc' named=(test_cuda_kernels_api test_backend_cuda test_dp)
    mkdir -p "$tdir" && printf 'subdirs("%s")\n' "$(cd "$bdir" && pwd)" >"$tdir/CTestTestfile.cmake"
  fi
  rm -f "$tdir/Testing/Temporary/LastTest.log"
  run_row tests "$out/tests.log" ctest --test-dir "$tdir" -R 'cuda|nvrtc|^test_kernels$|^test_dp$' -E "$skip" -j "$jobs" \
    --output-on-failure --timeout $((slot_of[tests] - 5))
  result[tests]=${status[tests]}
  cp "$tdir/Testing/Temporary/LastTest.log" "$out/tests_output.log" 2>/dev/null
  grep -E "tests passed|tests failed|Failed|SKIPPED|Timeout" "$out/tests.log" | head -20
  # the kernels' own verdicts, by name (a SKIPPED here means the GPU was not seen)
  for t in "${named[@]}"; do
    awk -v t="$t" '$0 ~ ("^[0-9]+/[0-9]+ Testing: " t "$") {on = 1} on {print} on && /end time:/ {exit}' \
      "$out/tests_output.log" >"$out/$t.log" 2>/dev/null
    if [ ! -s "$out/$t.log" ]; then
      note "$t: not in ctest's log (not run, or cut off)"
      result[tests]="FAIL ($t did not run)"
      continue
    fi
    grep -E "FAILED|ERROR|SKIPPED|PASSED|relative error|differ" "$out/$t.log" | head -20
    grep -q SKIPPED "$out/$t.log" && result[tests]="FAIL (skipped: no device seen)"
  done
  [ "${result[tests]}" = "${status[tests]}" ] || record tests "${result[tests]}"
  note "tests: ${result[tests]}"
else
  result[tests]=${status[tests]}
fi

# ---- 3. compute-sanitizer: one small BERT training step on one backend ----
trident="$bdir/trident"
mcb=${TRIDENT_GPU_MEMCHECK_BACKEND:-torch}
if need_build memcheck; then
  cat >"$out/memcheck.ini" <<EOF
[run]
model = bert
preset = tiny
task = fit
backends = $mcb
device = cuda
batch = 2
seq_len = 32
steps = 1
warmup = 1
; in this process: compute-sanitizer need not follow a forked backend
isolate = off
EOF
  cs=""
  [ -n "$nvcc" ] && [ -x "$(dirname "$nvcc")/compute-sanitizer" ] && cs=$(dirname "$nvcc")/compute-sanitizer
  [ -z "$cs" ] && cs=$(command -v compute-sanitizer)
  for c in /usr/local/cuda*/bin/compute-sanitizer; do [ -z "$cs" ] && [ -x "$c" ] && cs=$c; done
  if [ "$rehearsal" = 1 ]; then # compute-sanitizer needs a GPU: the step's own run, without it
    run_row memcheck "$out/memcheck.log" "$trident" run "$out/memcheck.ini"
    result[memcheck]="refused (rehearsal: compute-sanitizer needs a GPU; the step's run without it: ${status[memcheck]})"
    record memcheck "${result[memcheck]}"
    tail -n 5 "$out/memcheck.log"
  elif [ -z "$cs" ]; then
    unset 'slot_of[memcheck]' # not run: no timeout in steps.tsv
    record memcheck "not run (no compute-sanitizer)" 0
    result[memcheck]="not run (no compute-sanitizer beside nvcc, on PATH or in /usr/local/cuda*/bin)"
  else
    run_row memcheck "$out/memcheck.log" "$cs" --tool memcheck --error-exitcode 3 "$trident" run "$out/memcheck.ini"
    rc=$?
    if [ $rc = 0 ]; then result[memcheck]="pass ($mcb)"
    elif grep -qE "Device not supported|not supported on this|error 999" "$out/memcheck.log"; then
      result[memcheck]="refused by the machine (see memcheck.log)"
      record memcheck "${result[memcheck]}"
    else result[memcheck]="${status[memcheck]} ($mcb)"; fi
    tail -n 15 "$out/memcheck.log"
  fi
  note "memcheck: ${result[memcheck]}"
else
  result[memcheck]=${status[memcheck]}
fi

# ---- 4. ceilings ----
if need_build ceilings; then
  small=()
  [ "$rehearsal" = 1 ] && small=(--small)
  run_row ceilings "$out/bench.log" "$bdir"/plugins/kernels/trident_bench_cuda "${small[@]}" "$out/ceilings.json.part"
  json_done ceilings $?
  note "ceilings: ${status[ceilings]}"
fi
result[ceilings]=${status[ceilings]}

# ---- 4b. the roofline sheets: each kernel of the benchmark's BERT base and 7B LLM steps at
#      their shapes, timed alone on random data, beside its floor on that card and its design time
#      (trident roofline; the sheet's step floor is the BERT table's floor column) ----
if need_build roofline; then
  confs=conf
  if [ "$rehearsal" = 1 ]; then # the same INIs, tiny
    confs=$out/conf_tiny
    mkdir -p "$confs" && for f in conf/*.ini; do ini_of "$f" "$confs/${f#conf/}"; done
  fi
  run_row roofline "$out/roofline.log" bash tests/gpu/roofline.sh "$trident" "$out" "$confs"
  grep -E "^(step|conf/|roofline:|trident: error)" "$out/roofline.log" | head -20
  note "roofline: ${status[roofline]}"
fi

# ---- 5. BERT base on every backend ----
bert_ok=1
for task in predict fit; do # OUT/bert_TASK.ini: the INI run, also for the PyTorch rows' sizes
  ini_of "conf/bert_$task.ini" "$out/bert_$task.ini"
done
for task in predict fit; do
  r=bert_$task
  if need_build $r; then
    run_row $r "$out/$r.log" "$trident" run "$out/$r.ini" --steps 5 --json "$out/$r.json.part"
    json_done $r $?
    tail -n 12 "$out/$r.log"
    note "$r: ${status[$r]}"
  fi
  [ "${status[$r]}" = pass ] || bert_ok=0
done

# ---- 6. the LLM tasks on cuda, small presets: generate with the cache as graph state, LoRA fit;
#      then Stable Diffusion's small denoising step, the small VAE and its encoder's fit
#      (conv2d, group norm, their gradients and the timestep embedding on cuda), and the
#      small SAM's predict and encoder fit (ATTENTION_REL and its gradients on cuda) ----
llm_ok=1
for c in gemma_generate mistral_generate gemma_fit mistral_fit sd_predict vae_predict sd_fit sam_predict sam_fit \
    sd_reference; do
  r=cuda_$c
  if need_build $r; then
    case $c in
    sd_reference) # a random diffusers pipeline's text to image (3 DDIM steps, the clamp) on
      # cuda against diffusers' StableDiffusionPipeline in float64 (tests/fixtures/reference_sd);
      # then (tests/gpu/references.sh) image to image, inpainting's blend, UniPC and SAM on a
      # photo against theirs (in a rehearsal, SAM's alone: cuemu is slow)
      refs=(reference_sd reference_sam_photo_box)
      [ "$rehearsal" = 1 ] || refs=(reference_sd reference_sd_img2img reference_sd_inpaint_blend reference_sd_unipc3
        reference_sam_photo_box) ;;
    *) ini_of "conf/cpu/$c.ini" "$out/$r.ini" ;;
    esac
    case $c in *generate) n=2 ;; *) n=5 ;; esac
    if [ $c = sd_reference ]; then
      run_row $r "$out/$r.log" bash tests/gpu/references.sh "$trident" "$out" "$out/$r.json.part" "${refs[@]}"
    else
      run_row $r "$out/$r.log" "$trident" run "$out/$r.ini" --steps $n --json "$out/$r.json.part"
    fi
    json_done $r $?
    grep -E "^(torch|tf|jax)|agree" "$out/$r.log" | head -12
    [ "${status[$r]}" = pass ] || tail -n 5 "$out/$r.log"
    note "$r: ${status[$r]}"
  fi
  [ "${status[$r]}" = pass ] || llm_ok=0
done
# which path ran the convolutions: the gpu line names the mode; a shape cuDNN turned down
# (and im2col ran) is said once per process in the row's log (plugins/kernels/cuda/conv.c)
grep -h -m1 -o 'conv cuDNN [0-9.]*\|conv im2col ([^)]*)' "$out"/cuda_sd_predict.log 2>/dev/null | head -1 |
  while read -r path; do note "SD rows' convolutions: $path"; done
grep -h 'im2col runs it' "$out"/cuda_*.log 2>/dev/null | sort -u | while read -r line; do note "$line"; done
if [ $built = 0 ]; then result[llm]="not run (no build)"
elif [ $have_gpu = 0 ]; then result[llm]="skipped (no GPU)"
elif [ $llm_ok = 1 ]; then result[llm]=pass
else result[llm]=FAIL; fi

# ---- 7. the PyTorch peers of the BERT rows: eager first (the ratios' base), then compiled ----
torch_ran=0
for mode in eager reduce-overhead; do
  for task in predict fit; do
    r=torch_${task}_$mode
    if need_build "$r"; then
      # trident's row's sizes and math (OUT/bert_TASK.ini); in a rehearsal on the cpu
      ini=$out/bert_$task.ini dev=cuda
      [ "$rehearsal" = 1 ] && dev=cpu
      math=$(ini_get "$ini" math)
      run_row "$r" "$out/$r.log" python3 tests/gpu/torch_bert.py --task $task --preset "$(ini_get "$ini" preset)" \
        --batch "$(ini_get "$ini" batch)" --seq "$(ini_get "$ini" seq_len)" --math "${math:-f32}" --mode $mode \
        --steps 5 --warmup 3 --device $dev --json "$out/$r.json.part"
      rc=$?
      json_done "$r" $rc
      if [ $rc = 0 ]; then
        torch_ran=$((torch_ran + 1))
        note "$r: ${status[$r]}"
      else # torch_bert.py's reason, where it wrote one (exit 2: no torch, transformers or GPU)
        why=$(sed -n 's/^ *"error": "\(.*\)",\{0,1\}$/: \1/p' "$out/$r.json" 2>/dev/null | head -n 1)
        note "$r: did not run (${status[$r]}${why}; see $r.log)"
      fi
    fi
  done
done
if [ $built = 0 ]; then result[pytorch]="not run (no build)"
elif [ $have_gpu = 0 ]; then result[pytorch]="skipped (no GPU)"
else result[pytorch]="$torch_ran of 4 ran"; fi

# ---- summary: JSON, the archive, then the table last ----
if [ $built = 0 ]; then result[bert]="not run (no build)"
elif [ $have_gpu = 0 ]; then result[bert]="skipped (no GPU)"
else result[bert]=FAIL; fi
python3 tests/gpu/summarize.py "$out" >"$out/summary.txt" 2>&1
src=$?
[ $built = 1 ] && [ $have_gpu = 1 ] && [ $bert_ok = 1 ] && [ $src = 0 ] && result[bert]=pass
keys=(build tests memcheck ceilings bert llm pytorch)
jstr() { local v=${1//\\/}; printf '%s' "${v//\"/}"; } # a JSON string's text: no quote, no backslash
{
  echo "{"
  echo "  \"gpu\": \"$(jstr "$(head -1 "$out/gpu.txt")")\","
  for k in "${keys[@]}"; do echo "  \"$k\": \"$(jstr "${result[$k]}")\","; done
  echo "  \"budget_s\": $limit,"
  echo "  \"seconds\": $((SECONDS - t0))"
  echo "}"
} >"$out/summary.json"
{
  echo
  echo "== trident on $(head -1 "$out/gpu.txt") ($((SECONDS - t0)) s of $limit s) =="
  for k in "${keys[@]}"; do printf "%-10s %s\n" "$k" "${result[$k]}"; done
  [ -f "$out/bench.log" ] && grep -A10 "^ceiling" "$out/bench.log"
  cat "$out/summary.txt"
} >"$out/table.txt"
# every log, ini and JSON of this run in one archive (the loose files stay beside it)
if (cd "$out" && find . -maxdepth 1 -type f ! -name 'gpu_results.tar.gz*' -printf '%P\n' | sort |
    tar -czf gpu_results.tar.gz.part -T - && mv -f gpu_results.tar.gz.part gpu_results.tar.gz); then
  note "every log and JSON in $out/gpu_results.tar.gz"
else
  note "WARNING: could not write $out/gpu_results.tar.gz"
fi
cat "$out/table.txt"
for k in build tests ceilings bert; do [ "${result[$k]}" = pass ] || exit 1; done
exit 0
