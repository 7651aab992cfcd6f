#!/bin/bash
# models.sh TRIDENT CUEMU_LIB_DIR: each model's tiny preset on every backend with
# device = cuda on cuemu, held to the same run on the cpu: `[run] reference` is the cpu
# run's --outputs, each backend to its own (predict: every output; fit: every step's
# loss; generate: the prefill's logits and the tokens, equal). The CUDA side end to end:
# the models' graphs, the backends' cuda paths (torch's pool, reduce-overhead's CUDA graph,
# tf's device arena, jax's NVRTC kernels), and the kernels under them.
# Last, `trident roofline --run` on cuda (tests/gpu/roofline.sh's step).
set -u
bin=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

pair() { # name, the [run] lines that make the model, then any other sections
  local name=$1 body=$2 more=${3:-}
  local common="backends = torch, torch:reduce-overhead, tf, jax
batch = 1
steps = 3
warmup = 1
seed = 1234"
  printf '[run]\n%s\n%s\ndevice = cpu\n%s\n' "$body" "$common" "$more" > "$tmp/$name.cpu.ini"
  printf '[run]\n%s\n%s\ndevice = cuda\nreference = %s.cpu.safetensors\n%s\n' "$body" "$common" "$name" "$more" \
    > "$tmp/$name.cuda.ini"
  if ! OMP_NUM_THREADS=1 "$bin" run "$tmp/$name.cpu.ini" --outputs "$tmp/$name.cpu.safetensors" > "$tmp/out" 2>&1; then
    echo "FAIL $name: the cpu run"; cat "$tmp/out"; fail=$((fail + 1)); return
  fi
  local rc=0
  LD_LIBRARY_PATH=$lib OMP_NUM_THREADS=1 "$bin" run "$tmp/$name.cuda.ini" > "$tmp/out" 2>&1 || rc=$?
  local agree
  agree=$(grep -Ec "^  (torch|torch:reduce-overhead|tf|jax) +ok " "$tmp/out")
  if [ "$rc" = 0 ] && [ "$agree" = 4 ] && grep -q 'all backends ran and agree' "$tmp/out"; then
    echo "ok   $name: 4 backends on cuda (cuemu) agree with each other and with the cpu's run"
    grep -E "^  torch +ok " "$tmp/out" | sed 's/^/       /'
    pass=$((pass + 1))
  else
    echo "FAIL $name: exit $rc, $agree of 4 backends held to the cpu's outputs"; cat "$tmp/out"
    fail=$((fail + 1))
  fi
}

pair bert_predict "model = bert
preset = tiny
task = predict
seq_len = 16"
pair bert_fit "model = bert
preset = tiny
task = fit
seq_len = 16"
pair gemma_generate "model = gemma
preset = tiny
task = generate
seq_len = 12" "[generate]
max_length = 12
prompt_len = 8"
pair mistral_fit_lora "model = mistral
preset = tiny
task = fit
seq_len = 16" "[model]
lora_rank = 4"
tiny() { pair "$1" "model = $2
preset = tiny
task = $3"; } # name, model, task: the tiny preset at its own sizes
tiny sd_predict stable_diffusion predict
tiny vae_fit autoencoder_kl fit
tiny sam_predict sam predict
tiny sam_fit sam fit

# A transformers fixture (tests/fixtures/make_reference.py) on cuda: every backend held to
# transformers' own numbers rather than to the cpu's run
hf() { # name, the fixture's directory
  local d=$PWD/$2 rc=0
  sed -e 's/^\[run\]$/[run]\ndevice = cuda/' -e "s#^\(weights\|inputs\|reference\|hf_config\) = #\1 = $d/#" \
    "$d/check.ini" > "$tmp/$1.ini"
  LD_LIBRARY_PATH=$lib OMP_NUM_THREADS=1 "$bin" run "$tmp/$1.ini" > "$tmp/out" 2>&1 || rc=$?
  local agree
  agree=$(grep -Ec "^  (torch|torch:reduce-overhead|tf|jax) +ok " "$tmp/out")
  if [ "$rc" = 0 ] && [ "$agree" = 4 ] && grep -q 'all backends ran and agree' "$tmp/out"; then
    echo "ok   $1: 4 backends on cuda (cuemu) agree with transformers"
    pass=$((pass + 1))
  else
    echo "FAIL $1: exit $rc, $agree of 4 backends held to transformers"; cat "$tmp/out"
    fail=$((fail + 1))
  fi
}
# BERT fit with a sample of padding alone: its attention rows' scores are all finfo.min,
# and the backward's P must be 1/Tk there (attention_bwd.cu's huge rows)
hf bert_fit_pad_all tests/fixtures/reference_bert_pad_all

# trident roofline --run on cuda: each group's kernel timed on the device (its random inputs
# must be cuda tensors: they were cpu ones, and every kernel refused them)
printf '[run]\nmodel = bert\npreset = tiny\ntask = fit\ndevice = cuda\nbatch = 2\nseq_len = 16\n' > "$tmp/roof.ini"
if LD_LIBRARY_PATH=$lib OMP_NUM_THREADS=1 "$bin" roofline "$tmp/roof.ini" --run --reps 1 --top 3 > "$tmp/out" 2>&1 &&
   grep -Eq 'measured [0-9.]+ ms \([0-9]+% of floor\)$' "$tmp/out"; then
  echo "ok   roofline --run: every group timed on cuda (cuemu)"
  pass=$((pass + 1))
else
  echo "FAIL roofline --run on cuda"; cat "$tmp/out"
  fail=$((fail + 1))
fi

echo "models on cuemu: $pass passed, $fail failed"
[ "$fail" = 0 ]
