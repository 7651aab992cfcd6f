#!/usr/bin/env bash
# The fixtures' float64 references on cuda, for tests/gpu/run.sh's cuda_sd_reference row:
#   tests/gpu/references.sh TRIDENT OUT JSON REF...
# each tests/fixtures/REF/check.ini run with device = cuda and its paths made absolute
# (OUT/REF.ini), one step; the first one's JSON to JSON. Stops at the first that fails.
set -uo pipefail
trident=$1 out=$2 json=$3
shift 3
fx=$PWD/tests/fixtures
first=1
for d in "$@"; do
  src=$fx/$d
  sed -E -e 's/^\[run\]$/[run]\ndevice = cuda/' -e "s#^([a-z_]+) = \.\./#\1 = $fx/#" \
    -e "s#^(weights|inputs|reference|init_image|mask_image|hf_config|tokenizer|prompts) = ([^/ ][^ ]*)\$#\1 = $src/\2#" \
    "$src/check.ini" >"$out/$d.ini" || exit 1
  args=()
  [ $first = 1 ] && args=(--json "$json")
  echo "== $d"
  "$trident" run "$out/$d.ini" --steps 1 "${args[@]}" || { echo "$d: FAIL"; exit 1; }
  first=0
done
