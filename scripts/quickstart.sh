#!/usr/bin/env bash
# Set up, build, and run the main job: BERT tiny predict on the cpu (conf/quickstart.ini).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
./build/trident run conf/quickstart.ini
