#!/usr/bin/env bash
# Set up, build and run every test twice: a normal build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/), with a Release build
# (build-release/) compiled between them; then the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
# In parallel: test_cuda_kernels@cuemu-forward (the CUDA kernels on the cpu, tests/cuemu)
# takes about 13 minutes on one core and starts first, beside the rest.
ctest --test-dir build --output-on-failure --timeout 900 -j"$jobs"

# A Release build compiles too (under a minute, C only): GCC 12 at -O3 warns where -O2 does
# not (-Wmaybe-uninitialized after inlining), and warnings are errors; a user's
# `-DCMAKE_BUILD_TYPE=Release` and tests/gpu/run.sh build this way.
cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DTRIDENT_CUDA=OFF >/dev/null
cmake --build build-release -j"$jobs"

# The sanitizer build leaves CUDA out: nvcc code is not instrumented and it only costs time.
# It repeats only the kernels-level tests under a forced AVX2 (the other level's copies and
# the bf16 GEMMs converted to f32 take scratch of their own); the normal build repeats
# every numeric test under every lower level (tests/CMakeLists.txt).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRIDENT_SANITIZE=ON -DTRIDENT_CUDA=OFF \
  -DTRIDENT_TEST_ISAS=avx2 \
  "-DTRIDENT_TEST_ISA_TESTS=test_kernels;test_kernels_layout;test_grad_kernels;test_fused;test_llm_ops;test_bind;test_bert" \
  >/dev/null
cmake --build build-asan -j"$jobs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan --output-on-failure --timeout 1800

# The libFuzzer harnesses (clang, build-fuzz/): the kept crash inputs, then a fixed number of
# runs of each (about a minute and a half with the build; tests/fuzz/README.md).
bash scripts/fuzz.sh
echo "tests: both builds and the fuzzers passed"
