#!/usr/bin/env bash
# tests/gpu/run.sh's roofline step: the sheet of each benchmark step below (trident
# roofline --run on the GPU: every kernel timed alone at its shapes beside its floor on
# the card found (h100 or h200 by its name; H200's where there is no preset) and its
# design time), each into OUT/roofline_NAME.json; the BERT and LLM rows first, so that
# a step cut short by its timeout still has them. Exit 1 when any sheet is missing.
# CONF_DIR (default conf) holds the INIs: run.sh's rehearsal gives their tiny copies.
#   tests/gpu/roofline.sh TRIDENT OUT [CONF_DIR]
set -u
trident=$1
out=$2
conf=${3:-conf}
rc=0
for c in bert_fit bert_predict gemma_fit mistral_fit gemma_generate mistral_generate; do
  if "$trident" roofline "$conf/$c.ini" --run --reps 3 --top 12 --json "$out/roofline_$c.json.part"; then
    mv -f "$out/roofline_$c.json.part" "$out/roofline_$c.json"
  else
    echo "roofline: $conf/$c.ini failed"
    rc=1
  fi
  echo
done
exit $rc
