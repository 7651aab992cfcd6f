#!/usr/bin/env bash
# Run HERE (the development machine, which reaches Debian's registry) before sending
# tests/gpu/run.sh to a GPU machine, which reaches none: downloads the Debian packages the
# build needs (headers, .pc files, oneDNN, and ninja for a machine with no make) into
# build-gpu-deps/, which git ignores. Then name build-gpu-deps in the device call's carry;
# run.sh unpacks it under /opt/trdeps when the machine lacks the libraries or has neither
# make nor ninja (then it builds with cmake -G Ninja). About 8 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build-gpu-deps
cd build-gpu-deps
pkgs=(libinih-dev libinih1 libinireader0 libcmocka-dev libcmocka0 libcjson-dev libcjson1 libdnnl-dev libdnnl2
      ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers pkgconf pkgconf-bin libpkgconf3
      pkg-config ninja-build libpng-dev libpng16-16 zlib1g-dev libssl-dev libssl3)
apt-get download "${pkgs[@]}" 2>/dev/null || { apt-get update -q >/dev/null && apt-get download "${pkgs[@]}"; }
ls -la
