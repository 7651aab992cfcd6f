#!/usr/bin/env bash
# Build the libFuzzer harnesses (build-fuzz/, clang, ASan + UBSan) and run them: first every
# kept regression input (tests/fuzz/regressions/HARNESS/), then each harness for a fixed
# number of runs from its seed corpus (tests/fuzz/corpus/HARNESS/). Any crash, leak,
# sanitizer report, timeout or out-of-memory fails the script. tests/fuzz/README.md.
#
#   scripts/fuzz.sh                   what CI runs (scripts/test.sh): about a minute of fuzzing
#   TRIDENT_FUZZ_TIME=300 scripts/fuzz.sh   each harness for 300 s instead of a run count
#   TRIDENT_FUZZ_SEED=0 scripts/fuzz.sh     a random seed (default 1: CI sees the same runs)
#   scripts/fuzz.sh config report    only those harnesses
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${TRIDENT_FUZZ_BUILD:-build-fuzz}
jobs=$(nproc)

# Runs per harness for CI, chosen so that the six take about a minute and a quarter in all
# on 2 cores (exec/s measured on the seeds: config ~1100, safetensors ~2700, hf_config ~330,
# report ~3000, tokenizer ~260, png ~21000).
declare -A runs=([config]=20000 [safetensors]=50000 [hf_config]=6000 [report]=60000 [tokenizer]=4000 [png]=100000)
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(config safetensors hf_config report tokenizer png)

cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIDENT_FUZZ=ON \
  -DTRIDENT_CUDA=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
command -v llvm-symbolizer >/dev/null && export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer)}
seed=${TRIDENT_FUZZ_SEED:-1}
# -close_fd_mask=2: the readers' own stderr is hidden; libFuzzer's and the sanitizers'
# reports still show. -timeout: seconds one input may take. -rss_limit_mb: the process's cap.
common=(-close_fd_mask=2 -timeout=10 -rss_limit_mb=2048 -seed="$seed")

start=$SECONDS
for h in "${harnesses[@]}"; do
  [[ -n ${runs[$h]:-} ]] || { echo "fuzz: no harness '$h' (${!runs[*]})" >&2; exit 2; }
  bin=$root/$build/fuzz/fuzz_$h
  reg=$root/tests/fuzz/regressions/$h
  crashes=$root/$build/crashes/$h
  work=$root/$build/corpus/$h   # what this machine's runs found, kept between runs; not committed
  mkdir -p "$crashes" "$work"
  mapfile -t kept < <(find "$reg" -type f ! -name '.*' 2>/dev/null | sort)
  if ((${#kept[@]})); then
    if ! (cd "$work" && "$bin" "${common[@]}" "${kept[@]}" >"$root/$build/fuzz_${h}_regressions.log" 2>&1); then
      tail -n 60 "$root/$build/fuzz_${h}_regressions.log" >&2
      echo "fuzz: $h: a regression input of $reg fails again" >&2
      exit 1
    fi
    echo "fuzz: $h: ${#kept[@]} regression inputs passed"
  fi
  if [[ -n ${TRIDENT_FUZZ_TIME:-} ]]; then limit=(-max_total_time="$TRIDENT_FUZZ_TIME"); else limit=(-runs="${runs[$h]}"); fi
  t0=$SECONDS
  log=$root/$build/fuzz_$h.log
  dirs=("$work" "$root/tests/fuzz/corpus/$h")
  [[ -d $reg ]] && dirs+=("$reg")   # libFuzzer stops at a corpus directory that is not there
  if ! (cd "$work" && "$bin" "${common[@]}" "${limit[@]}" -dict="$root/tests/fuzz/$h.dict" \
        -artifact_prefix="$crashes/" "${dirs[@]}" >"$log" 2>&1); then
    tail -n 60 "$log" >&2
    echo "fuzz: $h: FAILED; the input is in $crashes/ (reproduce: $bin FILE). Once it is fixed, copy it" \
         "to tests/fuzz/regressions/$h/ so that every later run checks it." >&2
    exit 1
  fi
  echo "fuzz: $h: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1) ($((SECONDS - t0)) s;" \
       "$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1))"
done
echo "fuzz: ${#harnesses[@]} harnesses passed in $((SECONDS - start)) s"
