#!/usr/bin/env bash
# Install what trident's build and tests need on Debian (run as root). Only what is
# missing is installed, so running it twice is cheap.
set -euo pipefail
# ocl-icd-opencl-dev: oneDNN's CMake package looks for OpenCL (a Recommends of libdnnl-dev
# that --no-install-recommends leaves out).
# librsvg2-bin: rsvg-convert, with which test_report renders chart.svg (a test, not the build).
# clang, libclang-rt-dev (libclang_rt.fuzzer, the sanitizers' runtimes), libomp-dev (clang's
# OpenMP) and llvm (llvm-symbolizer, for readable reports): the fuzz build (scripts/fuzz.sh).
# libopenmpi-dev and openmpi-bin (mpirun): data-parallel fit (libtrident_mpi, tests/dp.sh).
pkgs=(build-essential cmake pkg-config libinih-dev libcmocka-dev libdnnl-dev ocl-icd-opencl-dev libcjson-dev libutf8proc-dev libpng-dev libssl-dev
      librsvg2-bin clang libclang-rt-dev libomp-dev llvm libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
