#!/usr/bin/env bash
# The trident program end to end: the quickstart runs and prints its table; bad input
# (broken INI, unknown backend, missing plugin, unknown model/preset, device without a
# GPU) gives a non-zero exit and a message that says what to fix. Run from the repo root
# as: tests/cli.sh path/to/trident
set -u
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/harness.sh"

# rejects FILE TEXT NAME REGEX: `trident run` on the INI FILE holding TEXT fails cleanly
# with a message matching REGEX.
rejects() { ini "$1" "$2"; expect "$3" 1 "$4" -- "$bin" run "$tmp/$1"; }

expect "quickstart runs" 0 '^torch +[0-9.]+ +[0-9.]+ +[0-9.]+' -- "$bin" run conf/quickstart.ini --steps 3
check "quickstart draws its chart" '^jax +\|#* [0-9.]+ ms$'
for row in 'torch:reduce-overhead' 'tf' 'jax'; do
  check "quickstart row $row agrees" "^$row +[0-9.]+ +[0-9.]+.* ok *$"
done
if grep -Eq '^cpu .+, isa [a-z0-9]+ \((native|forced .*)\), oneDNN [a-z0-9_]+, bf16 GEMM (native|via f32), [0-9]+ threads?, OpenMP wait .+$' "$tmp/out"; then
  ok "quickstart names the host"; else bad "quickstart names the host"; fi
expect "quickstart writes json" 0 'all backends ran' -- "$bin" run conf/quickstart.ini --steps 2 --json "$tmp/q.json"
expect "trident list --help prints the usage" 0 '^usage: trident run' -- "$bin" list --help
expect "trident list SUITE.ini lists the models and backends" 0 '^backends \(search order' -- "$bin" list conf/suite.ini
expect "trident list MODEL lists its INI keys with their meaning" 0 '^  num_hidden_layers +2 +encoder layers$' -- \
  "$bin" list bert
check "trident list MODEL: [train] keys and their defaults" '^  beta2 +0.999 +AdamW'
expect "trident list MODEL: [generate] keys of a token generate" 0 '^  top_k +50 +top_k sampling' -- "$bin" list gemma
# [train] and [generate] keys are checked whatever the task: a typo in an unread section is an error
rejects unreadtypo.ini $'[run]\nmodel = bert\nbatch = 1\nseq_len = 8\n[train]\noptimiser = adamw' \
  "a typo in a section the task leaves unread is refused" 'unreadtypo.ini:6: \[train\] optimiser = adamw: unknown key for training'
expect "an option without its value is refused" 2 'trident: --steps needs a value' -- "$bin" run conf/quickstart.ini --steps
expect "an empty value is refused as none" 2 'trident: --json needs a value' -- "$bin" run conf/quickstart.ini --json ''
expect "list: a misspelt model is said as such" 1 "list BERT: no such model \(models: bert, gemma" -- "$bin" list BERT
expect "bench-kernels: an unknown argument is named" 2 "unknown option 'extra'" -- "$bin" bench-kernels extra
expect "bench-kernels: an option twice is refused" 2 '--reps is given twice' -- "$bin" bench-kernels --reps 1 --reps 2
expect "bench-kernels: --size for conv2d's fixed shapes is refused" 2 '--size is not read by --op conv2d' -- \
  "$bin" bench-kernels --op conv2d --size 8
expect "bench-kernels: --head-dim without attention is refused" 2 "--head-dim is attention's" -- \
  "$bin" bench-kernels --op matmul --head-dim 8
# a CRLF line may be as long as an LF one (197 characters)
printf '[run]\r\nmodel = bert\r\npreset = tiny\r\n; %s\r\n' "$(printf 'x%.0s' $(seq 1 195))" > "$tmp/crlf.ini"
expect "a CRLF line of 197 characters is read" 0 '' -- "$bin" dump "$tmp/crlf.ini"
expect "an option given twice is refused" 2 'trident: --json is given twice' -- \
  "$bin" run conf/quickstart.ini --json "$tmp/a.json" --json "$tmp/b.json"
expect "--json and --outputs into one file is refused" 2 'are one file; give each its own' -- \
  "$bin" run conf/quickstart.ini --json "$tmp/same.x" --outputs "$tmp/../$(basename "$tmp")/same.x"
cp conf/quickstart.ini "$tmp/self.ini"
expect "--json naming the config itself is refused" 2 'json .*self.ini is the config .*self.ini, which the run reads' -- \
  "$bin" run "$tmp/self.ini" --json "$tmp/../$(basename "$tmp")/self.ini"
ln -s "$tmp/self.ini" "$tmp/link.ini"
expect "--outputs onto the config through a link is refused" 2 'outputs .*link.ini is the config' -- \
  "$bin" run "$tmp/self.ini" --outputs "$tmp/link.ini"
expect "roofline --json naming the config is refused" 2 'json names the config itself' -- \
  "$bin" roofline "$tmp/self.ini" --json "$tmp/self.ini"
if cmp -s conf/quickstart.ini "$tmp/self.ini"; then ok "the config is left as it was"; else bad "the config is left as it was"; fi
# nor any file the run reads ([run] reference, inputs, a key's file), nor another output
echo keep > "$tmp/clob_ref.st"
echo keep > "$tmp/clob_in.st"
ini clob.ini "[run]
model = bert
preset = tiny
batch = 1
seq_len = 4
reference = clob_ref.st
inputs = clob_in.st"
expect "--outputs onto [run] reference is refused" 2 'outputs .*clob_ref.st is \[run\] reference \(.*clob.ini:6\), which the run reads' -- \
  "$bin" run "$tmp/clob.ini" --outputs "$tmp/clob_ref.st"
expect "--json onto [run] inputs is refused" 2 'json .*clob_in.st is \[run\] inputs \(.*clob.ini:7\)' -- \
  "$bin" run "$tmp/clob.ini" --json "$tmp/clob_in.st"
if [ "$(cat "$tmp/clob_ref.st" "$tmp/clob_in.st")" = "$(printf 'keep\nkeep')" ]; then ok "the run's inputs are left as they were"
else bad "the run's inputs are left as they were"; fi
expect "--outputs into --report's own report.json is refused" 2 'outputs .*rr/report.json and --report .*rr \(its report.json\) .* are one file' -- \
  "$bin" run conf/quickstart.ini --report "$tmp/rr" --outputs "$tmp/rr/report.json"
ini clob_suite.ini "[suite]
steps = 1
[row.a]
config = clob.ini"
expect "bench SUITE --json onto a row's config is refused" 1 'clob_suite.ini:3: \[row.a\]: --json .*clob.ini is the config' -- \
  "$bin" bench "$tmp/clob_suite.ini" --json "$tmp/clob.ini"
# a row whose config is not there is one of the suite's problems, said with the others
ini miss_suite.ini "[suite]
[row.a]
config = missing.ini
[row.b]
config = clob.ini
batch = 0"
expect "suite: a missing row config and another row's bad key, said together" 1 \
  'miss_suite.ini:3: \[row.a\] config = missing.ini: cannot open ' -- "$bin" bench "$tmp/miss_suite.ini"
check "... the other row's too" 'miss_suite.ini:6: \[row.b\] batch = 0: expected an integer'
if grep -q '"mean_ms"' "$tmp/q.json" 2>/dev/null; then ok "json has mean_ms"; else echo > "$tmp/out"; bad "json has mean_ms"; fi
for key in '"cpu":' '"onednn_isa":' '"threads":' '"omp_wait":' '"noisy":'; do
  if grep -q "$key" "$tmp/q.json" 2>/dev/null; then ok "json has $key"; else echo > "$tmp/out"; bad "json has $key"; fi
done
# The wait policy: the program's default (it re-executes itself so that libgomp sees it),
# and a user's setting left alone. [run] threads reaches OpenMP and the header.
ini small.ini $'[run]\nmodel = bert\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8'
expect "default wait policy: a short spin" 0 "OpenMP wait spin 1000 \\(GOMP_SPINCOUNT\\) \\(trident's default\\)\$" -- \
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u TRIDENT_OMP_WAIT_DEFAULT "$bin" run "$tmp/small.ini"
expect "a user's GOMP_SPINCOUNT wins" 0 'OpenMP wait spin 5000 \(GOMP_SPINCOUNT\) \(set in the environment\)$' -- \
  env -u OMP_WAIT_POLICY -u TRIDENT_OMP_WAIT_DEFAULT GOMP_SPINCOUNT=5000 "$bin" run "$tmp/small.ini"
expect "a user's OMP_WAIT_POLICY wins" 0 'OpenMP wait active \(set in the environment\)$' -- \
  env -u GOMP_SPINCOUNT -u TRIDENT_OMP_WAIT_DEFAULT OMP_WAIT_POLICY=active "$bin" run "$tmp/small.ini"
# TRIDENT_F32_GEMM: each f32 product on oneDNN's jit sgemm or its first choice (to measure
# matmul.c's rules again); the backends agree either way; a wrong value stops at once
expect "TRIDENT_F32_GEMM=jit runs and agrees" 0 'all backends ran and agree' -- \
  env TRIDENT_F32_GEMM=jit "$bin" run "$tmp/small.ini"
expect "TRIDENT_F32_GEMM=jit reaches oneDNN" 0 '^onednn_verbose,exec,cpu,matmul,gemm:jit,' -- \
  env TRIDENT_F32_GEMM=jit ONEDNN_VERBOSE=1 "$bin" run "$tmp/small.ini"
expect "TRIDENT_F32_GEMM=first runs and agrees" 0 'all backends ran and agree' -- \
  env TRIDENT_F32_GEMM=first "$bin" run "$tmp/small.ini"
expect "TRIDENT_F32_GEMM=fast is refused" 1 'TRIDENT_F32_GEMM=fast is not a choice: expected auto' -- \
  env TRIDENT_F32_GEMM=fast "$bin" run "$tmp/small.ini"
# TRIDENT_BF16_GEMM: oneDNN's bf16 kernels (where AMX is, by default) or f32; the header says which
ini small_bf16.ini "$(cat "$tmp/small.ini")
dtype = bf16
backends = tf, jax"
expect "TRIDENT_BF16_GEMM=f32 runs bf16 via f32 and agrees" 0 'bf16 GEMM via f32, ' -- \
  env TRIDENT_BF16_GEMM=f32 "$bin" run "$tmp/small_bf16.ini"
check "TRIDENT_BF16_GEMM=f32: the backends agree" 'all backends ran and agree'
expect "TRIDENT_BF16_GEMM=f32 reaches oneDNN" 0 '^onednn_verbose,exec,cpu,matmul,' -- \
  env TRIDENT_BF16_GEMM=f32 ONEDNN_VERBOSE=1 "$bin" run "$tmp/small_bf16.ini"
if grep -q '^onednn_verbose,exec,cpu,matmul,.*src_bf16' "$tmp/out"; then bad "TRIDENT_BF16_GEMM=f32: no bf16 product, decode-sized ones neither"
else ok "TRIDENT_BF16_GEMM=f32: no bf16 product, decode-sized ones neither"; fi
expect "TRIDENT_BF16_GEMM=native runs and agrees" 0 'all backends ran and agree' -- \
  env TRIDENT_BF16_GEMM=native "$bin" run "$tmp/small_bf16.ini"
expect "TRIDENT_BF16_GEMM=fast is refused" 1 'TRIDENT_BF16_GEMM=fast is not a choice: expected auto' -- \
  env TRIDENT_BF16_GEMM=fast "$bin" run "$tmp/small_bf16.ini"
ini threads1.ini "$(cat "$tmp/small.ini")
threads = 1"
expect "[run] threads = 1 reaches OpenMP" 0 ', 1 thread, OpenMP' -- env OMP_NUM_THREADS=2 "$bin" run "$tmp/threads1.ini"
ini threads0.ini "$(cat "$tmp/small.ini")
threads = 0"
expect "[run] threads = 0 names file, line, key" 1 'threads0.ini:7: \[run\] threads = 0: expected an integer from 1 to 1024' -- \
  "$bin" run "$tmp/threads0.ini"
expect "list shows bert and torch" 0 'preset tiny' -- "$bin" list
expect "list shows the torch plugin" 0 'libtrident_backend_torch.so' -- "$bin" list
expect "dump prints the graph" 0 'attention' -- "$bin" dump conf/quickstart.ini
expect "dump prints a token generate's two passes" 0 '^# decode \(once a new token after the first: [0-9]+ a call\)$' -- \
  "$bin" dump conf/gemma_generate.ini
check "dump: the prefill first" '^# prefill \(once a call\)$'
expect "bench-kernels matmul" 0 '^matmul +f32 +64\^3 ' -- "$bin" bench-kernels --op matmul --size 64 --reps 1
expect "bench-kernels conv2d at the UNet's shapes" 0 '^conv2d +bf16 +2x64x64x320>320 .* of it$' -- \
  "$bin" bench-kernels --op conv2d --reps 1
expect "bench-kernels adamw: fused beside the graph's ops" 0 '^adamw +f32 +4096 .* GB/s  the graph.s 8 ops: .* fused [0-9.]+x$' -- \
  "$bin" bench-kernels --op adamw --dtype f32 --size 4096 --reps 1
expect "bench-kernels refuses an unknown op" 2 'conv2d, adamw or all' -- "$bin" bench-kernels --op conv3d
roof_ini() { ini "$1" "[run]
model = $2
preset = tiny
task = $3
batch = 2
seq_len = 16"; }
roof_ini roof.ini bert fit
expect "roofline: the step's floor on the H200" 0 '^step: [0-9]+ kernel calls in [0-9]+ groups, .* floor [0-9.]+ ms, designed [0-9.]+ ms$' -- \
  "$bin" roofline "$tmp/roof.ini" --device-peaks h200
expect "roofline --run times every group beside its floor" 0 'measured [0-9.]+ ms \([0-9]+% of floor\)$' -- \
  "$bin" roofline "$tmp/roof.ini" --device-peaks h200 --run --reps 1 --top 5 --json "$tmp/roof.json"
if grep -q '"measured_us"' "$tmp/roof.json" 2>/dev/null; then ok "roofline --json has every group"; else bad "roofline --json has every group"; fi
roof_ini roofgen.ini gemma generate
expect "roofline of generate is its decode step's" 0 '\(the decode step: one token\)' -- \
  "$bin" roofline "$tmp/roofgen.ini" --device-peaks h100
expect "roofline refuses an unknown device" 1 "no device 'b200' \(h200, h100; or measure\)" -- \
  "$bin" roofline "$tmp/roof.ini" --device-peaks b200
# A batch that cannot fit is refused before any weight is made, with the bytes needed and available.
rejects big.ini "[run]
model = stable_diffusion
preset = sd-v1-4
batch = 4096
seq_len = 77
backends = torch" "a batch that does not fit is refused" \
  'big.ini: stable_diffusion/sd-v1-4 predict at batch 4096 does not fit: it needs about [0-9]+ bytes .* and [0-9]+ bytes .* are available'
rejects bigsam.ini "[run]
model = sam
preset = vit-h
batch = 4096
backends = torch" "a SAM batch that does not fit is refused before any weight is made" \
  'bigsam.ini: sam/vit-h predict at batch 4096 does not fit: it needs about [0-9]+ bytes'
# SAM's prompt from the INI: a point outside the image, a label SAM has no meaning for
rejects sampt.ini "[run]
model = sam
preset = tiny
backends = torch
[model]
points = 10,10,70,5
labels = 1,1" "a SAM point outside the image is refused" 'point 1 \(70,5\) of points = .10,10,70,5. is outside the 64x64 image'
rejects samlb.ini "[run]
model = sam
preset = tiny
backends = torch
[model]
labels = 1,7" "a SAM label outside -1..3 is refused" 'label 7 \(entry 1 of labels = .1,7.\) is not one of -1'
rejects sampx.ini "[run]
model = sam
preset = tiny
backends = torch
[model]
image_size = 60" "a SAM image size that is not a multiple of the patch is refused" \
  'image_size = 60 is not a multiple of patch_size = 8'
ini samrun.ini "[run]
model = sam
preset = tiny
backends = torch, tf, jax
batch = 2
steps = 2
warmup = 1
[model]
points = 5,60,40,12,63,63
labels = 1,0,-1"
expect "SAM predict with three points on three backends" 0 'all backends ran and agree' -- "$bin" run "$tmp/samrun.ini"
# A checkpoint of another size: the tensor and both shapes.
rejects vaew.ini "[run]
model = autoencoder_kl
preset = small
batch = 1
backends = torch
weights = $PWD/tests/fixtures/sd_tiny/vae/diffusion_pytorch_model.safetensors" "a checkpoint of another size names the tensor and the shapes" \
  "tensor 'encoder.conv_in.weight' has shape \\[16,3,3,3\\], the graph expects \\[32,3,3,3\\]"
# Text to image: the tiny parts of a diffusers pipeline's directory, the picture written.
ini gen.ini "[run]
model = stable_diffusion
preset = tiny
task = generate
backends = torch, jax
batch = 1
seq_len = 16
steps = 1
weights = $PWD/tests/fixtures/sd_tiny
[model]
num_inference_steps = 2
[generate]
prompt = a photo of an astronaut riding a horse
tokenizer = $PWD/tests/fixtures/clip_tokenizer
image = $tmp/tiny.png"
expect "generate writes the picture of a prompt" 0 "wrote $tmp/tiny.png" -- "$bin" run "$tmp/gen.ini"
# the pipeline's VAE encoder is left out by design (tr_graph_omit): no warning of it
if grep -q "the model's" "$tmp/out"; then bad "a pipeline's parts generate leaves out are not warned of"
else ok "a pipeline's parts generate leaves out are not warned of"; fi
# A pipeline downloaded whole has variants beside its files (unet/diffusion_pytorch_model.
# fp16.safetensors): the plain files are read, as diffusers reads them without variant=;
# [run] weights_variant = fp16 reads those; a variant it lacks is refused, naming its own.
mkdir -p "$tmp/pipe" && cp -r tests/fixtures/sd_tiny/. "$tmp/pipe/" &&
  cp "$tmp/pipe/unet/diffusion_pytorch_model.safetensors" "$tmp/pipe/unet/diffusion_pytorch_model.fp16.safetensors"
ini genvar.ini "$(sed "s#^weights = .*#weights = $tmp/pipe#" "$tmp/gen.ini")"
expect "a pipeline with variants: its plain files read" 0 "wrote $tmp/tiny.png" -- "$bin" run "$tmp/genvar.ini"
ini genvar16.ini "$(sed "s#^weights = .*#weights = $tmp/pipe\nweights_variant = fp16#" "$tmp/gen.ini")"
expect "weights_variant = fp16 reads the fp16 files" 0 "wrote $tmp/tiny.png" -- "$bin" run "$tmp/genvar16.ini"
ini genvarno.ini "$(sed "s#^weights = .*#weights = $tmp/pipe\nweights_variant = bf16#" "$tmp/gen.ini")"
expect "a variant the pipeline lacks is refused, naming those it has" 1 \
  "no file of variant 'bf16' under '$tmp/pipe' .*; its variants: fp16" -- "$bin" run "$tmp/genvarno.ini"
if [ -s "$tmp/tiny.png" ] && head -c 8 "$tmp/tiny.png" | od -An -c | grep -q 'P   N   G'; then ok "the picture is a PNG"; else bad "the picture is a PNG"; fi
rejects genbad.ini "[run]
model = stable_diffusion
preset = tiny
task = generate
[generate]
max_length = 8" "generate of a one-graph model names its keys" 'genbad.ini:6: \[generate\] max_length = 8: unknown key for model .stable_diffusion. \(keys: image, prompt, prompts, negative_prompt, tokenizer, init_image, mask_image\)'
# bf16 text to image: ten guided steps drift the backends apart past bf16's 2e-2 (each
# step multiplies the two halves' difference by 7.5): a sampler's run is held to 1e-1 in
# bf16, and says so; [run] tolerance says what to accept instead.
ini genbf.ini "[run]
model = stable_diffusion
preset = tiny
task = generate
backends = torch, tf
dtype = bf16
batch = 1
seq_len = 8
steps = 1
tolerance = 6.5e-2
[model]
num_inference_steps = 10"
expect "[run] tolerance sets the agreement" 0 'all backends ran and agree \(within 6.5e-02, \[run\] tolerance\)$' -- \
  "$bin" run "$tmp/genbf.ini"
grep -v '^tolerance' "$tmp/genbf.ini" > "$tmp/genbf1.ini"
expect "bf16 text to image: the sampler's bound, said" 0 \
  "all backends ran and agree \(within 1e-01, bf16 over a sampler's denoising steps\)$" -- \
  "$bin" run "$tmp/genbf1.ini" --json "$tmp/genbf1.json"
if grep -Eq '"tolerance_from":[[:space:]]*"bf16 over a sampler.s denoising steps"' "$tmp/genbf1.json"; then
  ok "the JSON says where the bound came from"; else bad "the JSON says where the bound came from"; fi
# bf16 through a deep network: diffusers' own VAE decoder, UNet and transformers' SAM masks
# are themselves 3e-2 to 1.2e-1 from float64 in bf16 (make_vision_reference.py draws), so
# two backends are held to the model's measured bound, and the run says which and why;
# in f32 the same runs keep 1e-4.
for m in "autoencoder_kl|6e-02, bf16 through a VAE decoder \\(diffusers': up to 2.9e-2 from f64\\)" \
         "unet_2d_condition|7e-02, bf16 through a UNet \\(diffusers' own: up to 3.4e-2 from f64\\)" \
         "stable_diffusion|7e-02, bf16 through a UNet \\(diffusers' own: up to 3.4e-2 from f64\\)" \
         "sam|2e-01, bf16 through SAM's masks \\(transformers': up to 1.2e-1 off f64\\)"; do
  ini lowp.ini "[run]
model = ${m%%|*}
preset = tiny
task = predict
backends = torch, tf
dtype = bf16
batch = 1
steps = 1
warmup = 1"
  expect "${m%%|*} bf16: the model's bound, said" 0 "all backends ran and agree \(within ${m#*|}\)$" -- \
    "$bin" run "$tmp/lowp.ini"
done
sed -i 's/^task = predict/task = fit/' "$tmp/lowp.ini"
expect "sam fit in bf16 (losses): the bf16 tolerance" 0 'all backends ran and agree \(within 2e-02, the bf16 tolerance\)$' -- \
  "$bin" run "$tmp/lowp.ini"
sed -i 's/^task = fit/task = predict/; s/^dtype = bf16/dtype = f32/' "$tmp/lowp.ini"
expect "sam f32: the f32 tolerance" 0 'all backends ran and agree \(within 1e-04, the f32 tolerance\)$' -- \
  "$bin" run "$tmp/lowp.ini"
rejects tol.ini "[run]
tolerance = 2" "[run] tolerance out of range" 'tol.ini:2: \[run\] tolerance = 2: expected a relative difference above 0 and at most 1'
# Every shipped config builds its task graph (the full-size ones too: no weights are made).
for f in conf/*.ini conf/cpu/*.ini; do
  expect "$f builds" 0 '^# [0-9]+ nodes' -- "$bin" dump "$f"
done

# Nothing silently defaulted: an INI without [run] model, a section twice, a [backend.X] for a
# backend the run does not list
rejects empty.ini "" "an empty INI is refused" 'empty.ini: no \[run\] model; expected a line such as .model = bert. in \[run\] \(models: bert, gemma'
rejects nomodel.ini $'[run]\nbatch = 2' "an INI without [run] model is refused" 'nomodel.ini: no \[run\] model'
rejects twice.ini $'[run]\nmodel = bert\n[model]\nhidden_size = 8\n[model]\nnum_hidden_layers = 1' \
  "a repeated section is refused" 'twice.ini:5: \[model\] appears again \(first on line 3\); expected each section once'
# jax fused and unfused side by side, each row reporting its mode; a mode fuse = false
# contradicts is refused
ini jaxmodes.ini $'[run]\nmodel = bert\nbackends = jax, jax:unfused\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 4'
expect "jax and jax:unfused side by side" 0 'all backends ran and agree' -- "$bin" run "$tmp/jaxmodes.ini" --json "$tmp/jm.json"
if grep -q '^jax:unfused: .* 0 gemm epilogues' "$tmp/out" && grep -Eq '"mode":[[:space:]]*"unfused"' "$tmp/jm.json" &&
   grep -Eq '"mode":[[:space:]]*"fused"' "$tmp/jm.json"; then ok "... each row its mode"; else bad "... each row its mode"; fi
# one backend in one mode under two spellings: said, the run goes on
ini samerows.ini $'[run]\nmodel = bert\nbackends = torch:eager, torch, tf\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 4'
expect "torch:eager and torch: the second row is said to time the same thing" 0 \
  "note: 'torch:eager' and 'torch' ran one backend .* in one mode \(eager\)" -- "$bin" run "$tmp/samerows.ini"
ini jaxconflict.ini $'[run]\nmodel = bert\nbackends = jax:fused\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 4\n[backend.jax]\nfuse = false'
expect "jax:fused under [backend.jax] fuse = false is refused" 1 'asks for mode fused, and \[backend.jax\] fuse = false' -- \
  "$bin" run "$tmp/jaxconflict.ini"
# a [backend.X] for a backend not listed: kept unused and said (backends = jax is the one
# line that swaps a file that configures torch and tf too)
ini unlisted.ini $'[run]\nmodel = bert\nbackends = torch, tf\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 4\n[backend.jax]\nfuse = false'
expect "a [backend.X] for a backend not listed is said, and the run goes on" 0 \
  "warning: .*unlisted.ini:8: \\[backend.jax\\]: 'jax' is not among the backends this run lists \\(torch, tf\\): its options are not used" \
  -- "$bin" run "$tmp/unlisted.ini"
expect "OMP_NUM_THREADS past [run] threads' bound: said, the default kept" 0 \
  'warning: OMP_NUM_THREADS=100000: expected a count from 1 to 1024' -- env OMP_NUM_THREADS=100000 "$bin" run "$tmp/unlisted.ini"
expect "an OMP_WAIT_POLICY libgomp rejects is reported as its default, not as the value" 0 \
  'OpenMP wait libgomp default \(OMP_WAIT_POLICY=bogus is invalid\)' -- env OMP_WAIT_POLICY=bogus "$bin" run "$tmp/unlisted.ini"
# the noise schedule's errors name the scheduler the run takes (every sampler's, not DDIM's)
rejects eusched.ini $'[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbackends = torch\nbatch = 1\nsteps = 1\nwarmup = 1\n[model]\nscheduler = euler\nsteps_offset = 5000\nnum_inference_steps = 3' \
  "a schedule's error names the scheduler" 'stable_diffusion: scheduler = euler: steps_offset = 5000 puts the first timestep past 999'
# keys nothing reads are said with their lines: LoRA's under lora_rank = 0, greedy's seed
ini lora_off.ini $'[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = tf\nbatch = 2\nseq_len = 8\nsteps = 1\nwarmup = 1\n[model]\nlora_targets = foo'
expect "[model] lora_targets under lora_rank = 0 is said to be unread" 0 \
  'warning: .*lora_off.ini:11: \[model\] lora_targets = foo is not read: lora_rank = 0 \(LoRA off\)' -- "$bin" run "$tmp/lora_off.ini"
ini gen_seed.ini $'[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch\nbatch = 1\n[generate]\nprompt_len = 4\nmax_length = 6\nseed = 7'
expect "[generate] seed under greedy is said to be unread" 0 \
  'gen_seed.ini:10: \[generate\] seed is read by top_k and top_p sampling; sampling = greedy leaves it unread' -- \
  "$bin" run "$tmp/gen_seed.ini"
# a build error the run's size causes names the size's line; SAM's points without labels
rejects seq129.ini $'[run]\nmodel = bert\npreset = tiny\nbackends = tf\nbatch = 2\nseq_len = 129' \
  "a seq_len past the positions names its line" 'seq129.ini:6: building model .bert.*seq_len = 129 is longer than max_position_embeddings'
rejects sam_nolab.ini $'[run]\nmodel = sam\npreset = tiny\nbackends = tf\nbatch = 1\n[model]\npoints = 10,10' \
  "SAM points without labels" "sam_nolab.ini:7: .*points = '10,10' gives 1 point and no labels: expected \\[model\\] labels"
# a [run] seq_len a model of images does not read: said, not silently dropped
ini seqsam.ini $'[run]\nmodel = sam\npreset = tiny\nbackends = tf\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 77'
expect "[run] seq_len for SAM is said to be unread" 0 \
  "warning: .*seqsam.ini:8: \\[run\\] seq_len = 77 is not read: model 'sam' takes images, no sequence" \
  -- "$bin" run "$tmp/seqsam.ini"
# fit from a checkpoint: the model's params come from the file, the optimizer state is made
ini fitw.ini "[run]
model = bert
task = fit
backends = torch, tf
weights = $PWD/tests/fixtures/bert_tiny.safetensors
batch = 2
seq_len = 16
steps = 2
warmup = 1"
expect "fit from a weights file" 0 'all backends ran and agree' -- "$bin" run "$tmp/fitw.ini"
# LoRA from a base checkpoint: the adapters are not in it and are made from the seed
ini fitlora.ini "$(cat "$tmp/fitw.ini")
[model]
lora_rank = 4"
expect "LoRA fit from a base checkpoint" 0 'all backends ran and agree' -- "$bin" run "$tmp/fitlora.ini"
# [run] missing = seed: a checkpoint without the task's head (as bert-base-cased ships) runs
# with the head made from the seed, named in one warning; without the line it is refused.
LC_ALL=C sed 's/"classifier\.weight"/"classifier_weight"/; s/"classifier\.bias"/"classifier_bias"/' \
  tests/fixtures/bert_tiny.safetensors > "$tmp/headless.safetensors"
ini headless.ini "[run]
model = bert
backends = torch, tf
weights = headless.safetensors
batch = 2
seq_len = 16
steps = 1
warmup = 1"
expect "a checkpoint without the head is refused, naming [run] missing" 1 \
  "headless.safetensors: no tensor 'classifier.weight' .*\[run\] missing = seed" -- "$bin" run "$tmp/headless.ini"
ini headless_seed.ini "$(cat "$tmp/headless.ini")
missing = seed"
expect "missing = seed makes the head from the seed and says so" 0 \
  "warning: .*headless.safetensors lacks 2 tensors the model has, made from \[run\] seed 1234: classifier.weight, classifier.bias" -- \
  "$bin" run "$tmp/headless_seed.ini"
if grep -q 'all backends ran and agree' "$tmp/out"; then ok "missing = seed: the backends agree"; else bad "missing = seed: the backends agree"; fi
# [model] hf_config is taken from the INI's directory, as weights is, whatever the working
# directory, and a path longer than 63 characters is fine.
deep=$tmp/a_directory_name_long_enough/to_make_the_path_longer_than_sixty_three_characters
mkdir -p "$deep"
cp tests/fixtures/hf/gemma-2b.json "$deep/config.json"
ini hfrel.ini "[run]
model = gemma
preset = tiny
[model]
hf_config = ${deep#$tmp/}/config.json"
expect "hf_config from the INI's directory, a long path" 0 'f32\[256000,2048\] +.model.embed_tokens.weight.' -- \
  sh -c 'cd / && "$0" dump "$1"' "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" "$tmp/hfrel.ini"
rejects unknown_backend.ini $'[run]\nmodel = bert\npreset = tiny\nbackends = nosuch\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8' \
  "unknown backend" 'nosuch'
rejects broken.ini $'[run]\nmodel = bert\nbatch = eight' "broken value names file, line, key" 'broken.ini:3.*batch'
rejects unknown_key.ini $'[run]\nmodel = bert\nbatchsize = 8' "unknown key" 'unknown_key.ini:3.*batchsize'
rejects heads.ini $'[run]\nmodel = unet_2d_condition\n[model]\nsample_size = 8\n\nattention_head_dim = 3' \
  "a model's own refusal names the INI's line" "heads.ini:6: building model 'unet_2d_condition' .*attention_head_dim = '3'"
rejects sdpart.ini $'[run]\nmodel = stable_diffusion\n[model]\nvae = tiny\nunet = huge' \
  "a part that is no preset names the INI's line" "sdpart.ini:5: building model 'stable_diffusion' .*unet = 'huge'"
rejects syntax.ini $'[run\nmodel = bert' "syntax error" 'syntax.ini:1'
expect "missing file" 1 'nosuchfile.ini' -- "$bin" run "$tmp/nosuchfile.ini"
rejects missing_plugin.ini $'[plugins]\npath = .\n[run]\nmodel = bert\nbackends = ./libtrident_backend_gone.so\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8' \
  "missing plugin file" 'libtrident_backend_gone.so'
echo "not a shared object" > "$tmp/libtrident_backend_text.so"
rejects notplugin.ini $'[run]\nmodel = bert\nbackends = ./libtrident_backend_text.so\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8' \
  "file that is not a plugin" 'libtrident_backend_text.so'
rejects model.ini $'[run]\nmodel = gpt9\nsteps = 1' "unknown model lists models" 'bert'
rejects preset.ini $'[run]\nmodel = bert\npreset = huge\nsteps = 1' "unknown preset lists presets" 'tiny'
rejects modelkey.ini $'[run]\nmodel = bert\npreset = tiny\nsteps = 1\n[model]\nhidden = 3' "unknown model key" 'modelkey.ini:6.*hidden'
rejects seq.ini $'[run]\nmodel = bert\npreset = tiny\nseq_len = 4096\nsteps = 1\nwarmup = 1\nbatch = 1' \
  "sequence longer than the positions" 'max_position_embeddings'
rejects opt.ini $'[run]\nmodel = bert\nbackends = torch\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8\n[backend.torch]\nmdoe = eager' \
  "unknown backend option" 'mdoe'
ini cuda.ini $'[run]\nmodel = bert\ndevice = cuda\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8'
if nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: cuda without a GPU (this machine has one; tests/gpu/run.sh covers device = cuda)"
else
  expect "cuda without a GPU" 1 'cuda.ini:3: \[run\] device = cuda: no CUDA device' -- "$bin" run "$tmp/cuda.ini"
  if [ "${TRIDENT_TEST_CUDA_BUILT:-0}" = 1 ]; then # checked before the device is looked for
    expect "TRIDENT_CUDA_CONV=fast is refused" 1 'TRIDENT_CUDA_CONV=fast is not a choice: expected auto' -- \
      env TRIDENT_CUDA_CONV=fast "$bin" run "$tmp/cuda.ini"
    expect "TRIDENT_CUDA_CONV=im2col is a choice" 1 'no CUDA device' -- \
      env TRIDENT_CUDA_CONV=im2col "$bin" run "$tmp/cuda.ini"
  fi
  # the 7B rows say their size before the device check stops them
  expect "gemma 7b size before the device check" 1 'gemma/7b: 8537680896 parameters, 15.90 GiB in bf16' -- \
    "$bin" run conf/gemma_generate.ini
  expect "mistral 7b fit: size and trained parameters" 1 'mistral/7b: 7243436032 parameters.*fit trains 1703936 of them' -- \
    "$bin" run conf/mistral_fit.ini
fi
rejects tf32.ini $'[run]\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8\nmath = tf32' \
  "tf32 on the cpu" 'tf32.ini:6: .run. math = tf32 with device = cpu: expected device = cuda'
wrong=$(cd "$(dirname "$bin")" && pwd)/test_plugins/libtrident_backend_wrong.so
ini disagree.ini "[run]
backends = torch, $wrong
steps = 1
warmup = 1
batch = 2
seq_len = 8"
expect "a backend with wrong numbers fails the run" 1 'disagree' -- "$bin" run "$tmp/disagree.ini"
# check-backend: the in-tree backends conform (ABI checks, every op against the reference
# kernels); one that computes wrong numbers does not, and says where.
for be in torch torch:reduce-overhead tf jax; do
  expect "check-backend $be conforms" 0 'the backend conforms' -- "$bin" check-backend "$be"
done
expect "check-backend fails a wrong backend" 1 'FAIL +f32 +matmul.*rel err 1.0e-02' -- "$bin" check-backend "$wrong"
# An f32-only backend (the loader tests' good plugin) conforms: no cast to bf16 is asked of it.
expect "check-backend passes an f32-only backend" 0 'the backend conforms' -- \
  "$bin" check-backend "$(dirname "$wrong")/libtrident_backend_good.so"
check "check-backend skips a cast to a dtype the caps leave out" 'SKIP +f32 +cast to bf16 +casts to a dtype'
# a file named other than its vtable: said, not failed
cp "$(dirname "$wrong")/libtrident_backend_good.so" "$tmp/libtrident_backend_other.so"
expect "check-backend notes a vtable named other than its file" 0 \
  "NOTE +the vtable's name is the file's +the file says 'other', the vtable 'good'" -- \
  "$bin" check-backend "$tmp/libtrident_backend_other.so"
# A 1.0 plugin that declares training: fit would be refused (no graph updates before 1.1).
expect "check-backend fails a 1.0 plugin that declares training" 1 \
  'FAIL +training needs ABI 1.1 +declares TR_CAP_TRAINING but speaks ABI 1.0' -- \
  "$bin" check-backend "$(dirname "$wrong")/libtrident_backend_v10.so"
expect "check-backend refuses a missing backend" 1 "not found" -- "$bin" check-backend nosuch
expect "unknown command" 2 'usage' -- "$bin" frobnicate

# ---- issue 17: mistakes caught before the first step, outputs, inputs, reference,
# progress, Ctrl-C ----
ini pre.ini $'[run]\nmodel = bert\nbackends = torch, pytorch\nsteps = 1\nwarmup = 1\nbatch = 1\nseq_len = 8\n[backend.torch]\nmdoe = eager'
expect "every problem before any backend runs" 1 '2 problems, found before any backend ran' -- "$bin" run "$tmp/pre.ini"
if ! grep -q 'ms/step' "$tmp/out" && grep -q "pre.ini:9: \[backend.torch\] unknown key 'mdoe' (keys: mode" "$tmp/out" &&
   grep -Eq "pre.ini:3: \[run\] backends: 'pytorch': no such backend \(backends found: [a-z, ]*torch" "$tmp/out"; then
  ok "preflight names both, with the backends found, and runs nothing"; else bad "preflight names both, with the backends found, and runs nothing"; fi
expect "--json into a missing directory: refused before running" 1 "error: $tmp/nodir/x.json: cannot be written \\(No such file" -- \
  "$bin" run "$tmp/small.ini" --json "$tmp/nodir/x.json"
if grep -q 'ms/step\|^torch ' "$tmp/out"; then bad "--json refusal ran nothing"; else ok "--json refusal ran nothing"; fi
expect "--outputs into a missing directory: refused" 1 "nodir/o.safetensors: cannot be written" -- \
  "$bin" run "$tmp/small.ini" --outputs "$tmp/nodir/o.safetensors"
ini fitcaps.ini $'[run]\nmodel = bert\ntask = fit\nbackends = torch, '"$(cd "$(dirname "$bin")" && pwd)"$'/test_plugins/libtrident_backend_good.so\nsteps = 1\nwarmup = 1\nbatch = 2\nseq_len = 8'
if [ -f "$(dirname "$bin")/test_plugins/libtrident_backend_good.so" ]; then
  expect "a backend's caps are checked before the run" 1 "cannot run bert/tiny fit in f32: backend '[a-z_]+' does not declare TR_CAP_TRAINING" -- "$bin" run "$tmp/fitcaps.ini"
else echo > "$tmp/out"; bad "the test plugin libtrident_backend_good.so is built"; fi
ini sched.ini $'[run]\nmodel = bert\ntask = fit\nschedule = interleaved\nisolate = off\nsteps = 1\nwarmup = 1\nbatch = 2\nseq_len = 8'
expect "interleaved fit in one process refused with the reason" 1 'sched.ini:4: \[run\] schedule = interleaved: fit runs its backends one after another \(in one process the backends train the same host copy' -- "$bin" run "$tmp/sched.ini"
ini two.ini $'[run]\nmodel = bert\nbackends = torch, tf\nsteps = 3\nwarmup = 1\nbatch = 2\nseq_len = 8'
expect "--outputs writes every backend's outputs" 0 'wrote .*o.safetensors \(6 tensors' -- "$bin" run "$tmp/two.ini" --outputs "$tmp/o.safetensors"
for name in torch/logits tf/logits tf/pooler_output; do
  if grep -aq "\"$name\"" "$tmp/o.safetensors"; then ok "outputs file has $name"; else bad "outputs file has $name"; fi
done
check "the table says the schedule" '^3 timed steps after 1 warm-up step.*interleaved'
ini twofit.ini "$(sed 's/^backends = .*/&\ntask = fit/' "$tmp/two.ini")"
expect "--outputs of fit: each step's loss" 0 'each step.s loss' -- "$bin" run "$tmp/twofit.ini" --outputs "$tmp/of.safetensors"
# A file of --outputs is a reference: each BACKEND/OUTPUT holds that backend, fit step by step.
ini twofit_ref.ini "$(cat "$tmp/twofit.ini")
reference = of.safetensors"
expect "--outputs' file as a reference: the same run agrees" 0 'torch +ok +.loss. 0.00e\+00; worst element loss of step' -- \
  "$bin" run "$tmp/twofit_ref.ini"
ini twofit_lr.ini "$(cat "$tmp/twofit_ref.ini")
[train]
learning_rate = 0.05"
expect "--outputs' file as a reference: another learning rate differs from step 2" 1 \
  "'torch' differs from it: 'loss' [0-9.e+-]+; worst element loss of step [2-9]" -- "$bin" run "$tmp/twofit_lr.ini"
expect "--outputs' file as a reference: a run of another length is said, not cut to the shorter" 1 \
  "'loss' holds 4 steps' losses in the reference, the run took 6 steps" -- "$bin" run "$tmp/twofit_ref.ini" --steps 5
ini twofit_jax.ini "$(sed 's/^backends = .*/backends = jax/' "$tmp/twofit_ref.ini")"
expect "a reference of another backend's outputs is refused by name" 1 \
  "tensor 'torch/loss' is for backend 'torch', which this run does not list" -- "$bin" run "$tmp/twofit_jax.ini"
if grep -aq '"torch/loss":{"shape":\[4\],[^}]*"dtype":"F64"' "$tmp/of.safetensors"; then ok "fit loss series of 4 steps"; else bad "fit loss series of 4 steps"; fi
# The reference: a batch and outputs made by transformers (tests/fixtures/make_reference.py).
expect "every backend against transformers' outputs" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference/check.ini
if [ "$(grep -cE '^  (torch|torch:reduce-overhead|tf|jax) +ok +.*worst element' "$tmp/out")" = 4 ]; then
  ok "each backend's worst element against the reference"; else bad "each backend's worst element against the reference"; fi
# The same batch with a torch.bool attention_mask (make_bool_mask_fixture.py): read as 0/1, as transformers does
sed -e "s|^weights = ..|weights = $PWD/tests/fixtures|" -e "s|^reference = |reference = $PWD/tests/fixtures/reference/|" \
  -e "s|^inputs = .*|inputs = $PWD/tests/fixtures/reference/batch_bool_mask.safetensors|" \
  -e 's/^backends = .*/backends = torch, tf/' tests/fixtures/reference/check.ini > "$tmp/boolmask.ini"
expect "a bool attention_mask against transformers' outputs" 0 'all backends ran and agree' -- "$bin" run "$tmp/boolmask.ini"
# BERT of another ACT2FN activation, from a config.json (tests/fixtures/reference_bert_*/
# config.json; make_reference.py --config ... --batch 3): relu (predict, --seq-len 11 --seed 3;
# gelu in its place is 9e-3 off) and gelu_new, the tanh form (fit, 4 AdamW steps at --lr 0.05
# --steps 5, so that the activation shows in the losses: the erf form in its place is 1.2e-3 off).
# And fit's other losses, by the config's problem_type (--task fit --lr 0.05): regression
# (num_labels 1, problem_type null: MSE on labels [B]) and multi_label_classification (3
# labels: BCEWithLogitsLoss), BertForSequenceClassification's own loss as the reference.
expect "bert with hidden_act = relu against transformers" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_relu/check.ini
# The same directory as [run] weights without hf_config: from_pretrained would build the model
# from its config.json; trident builds the preset, and says where the two differ (here the
# sizes too, so the weights then fail to bind).
sed -e "s|^weights = .*|weights = $PWD/tests/fixtures/reference_bert_relu|" -e '/^hf_config/d' -e '/^reference/d' \
  -e "s|^inputs = .*|inputs = $PWD/tests/fixtures/reference_bert_relu/batch.safetensors|" \
  -e 's/^backends = .*/backends = torch/' tests/fixtures/reference_bert_relu/check.ini > "$tmp/noconf.ini"
expect "a config.json beside the weights that no hf_config names is said, with the keys that differ" 1 \
  'holds a config.json that \[model\] hf_config does not name, and it differs from preset tiny in .*hidden_act = relu there, gelu here.*add \[model\] hf_config = ' \
  -- "$bin" run "$tmp/noconf.ini"
# The directory as [run] weights, the run's batch and reference in it: they are not weights
d=$PWD/tests/fixtures/reference_bert_relu
sed -e "s|^weights = .*|weights = $d|" -e "s#^\(inputs\|reference\|hf_config\) = #\1 = $d/#" "$d/check.ini" > "$tmp/wdir.ini"
expect "weights = a directory that also holds the run's batch and reference" 0 'all backends ran and agree' -- \
  "$bin" run "$tmp/wdir.ini" --steps 1
if grep -q 'is the model.s\|are not the model.s' "$tmp/out"; then bad "... reads neither as weights"; else ok "... reads neither as weights"; fi
expect "bert with hidden_act = gelu_new, fit against torch's AdamW" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_gelu_new/check.ini
expect "bert regression (one label, MSE), fit against transformers" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_regression/check.ini
expect "bert multi_label_classification (BCE with logits), fit against transformers" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_multilabel/check.ini
# ... and its float labels under a config that does not say multi-label: the key to set
d=$PWD/tests/fixtures/reference_bert_multilabel
ini nomulti.ini "[run]
model = bert
task = fit
backends = tf
batch = 3
seq_len = 9
steps = 1
warmup = 1
weights = $d/model.safetensors
inputs = $d/batch.safetensors
[model]
vocab_size = 100
hidden_size = 32
num_hidden_layers = 2
num_attention_heads = 4
intermediate_size = 48
max_position_embeddings = 32
num_labels = 3"
# a fit's batch (its labels) run by predict: the labels said unread, the run goes on
d=$PWD/tests/fixtures/reference_bert_regression
sed -e 's/^task = .*/task = predict/' -e 's/^backends = .*/backends = tf/' -e '/^reference = /d' -e '/^\[train\]/,$d' \
  -e "s#^\(weights\|inputs\|hf_config\) = #\1 = $d/#" "$d/check.ini" > "$tmp/predlabels.ini"
expect "predict over a fit's batch: its labels said unread" 0 "note: \[run\] inputs: 'labels' is read by task = fit" \
  -- "$bin" run "$tmp/predlabels.ini"
d=$PWD/tests/fixtures/reference_bert_multilabel
expect "float [B, C] labels without problem_type: the key to set" 1 \
  "'labels' is f32\[3,3\], the graph's input is i32\[3\] \(float labels .*set \[model\] problem_type = multi_label_classification" \
  -- "$bin" run "$tmp/nomulti.ini"
# peft adapters on a Gemma, against the PeftModel's logits (make_peft_llm_fixture.py):
# bias = "all" (the trained biases under base_layer.), a tied model's lm_head or
# embed_tokens copy (modules_to_save: the head untied as the PeftModel computes)
for c in bias_all tied_lm_head tied_embed; do
  expect "a Gemma PeftModel ($c) against its logits" 0 'all backends ran and agree' -- \
    "$bin" run tests/fixtures/reference_gemma_peft/$c/check.ini
done
expect "peft's lm_head copy on a tied Gemma unties the head" 0 "holds peft's trained copy of lm_head" -- \
  "$bin" run tests/fixtures/reference_gemma_peft/tied_lm_head/check.ini
mkdir -p "$tmp/peft_dora"; cp -rL tests/fixtures/reference_gemma_peft/bias_all/weights/. "$tmp/peft_dora/"
printf '{"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "use_dora": true}' \
  > "$tmp/peft_dora/adapter/adapter_config.json"
sed -e "s|^weights = weights|weights = $tmp/peft_dora|" -e "s|^inputs = ../|inputs = $PWD/tests/fixtures/reference_gemma_peft/|" \
  -e "s|^reference = |reference = $PWD/tests/fixtures/reference_gemma_peft/bias_all/|" \
  -e "s|^hf_config = ../../|hf_config = $PWD/tests/fixtures/|" -e 's/^backends = .*/backends = tf/' \
  tests/fixtures/reference_gemma_peft/bias_all/check.ini > "$tmp/peft_dora.ini"
expect "use_dora is refused" 1 'adapter_config.json: use_dora = true .*which trident does not compute' -- \
  "$bin" run "$tmp/peft_dora.ini"
printf '{"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "alpha_pattern": {"v_proj": 32}}' \
  > "$tmp/peft_dora/adapter/adapter_config.json"
expect "alpha_pattern is refused" 1 'alpha_pattern gives "v_proj" lora_alpha = 32, not the file.s lora_alpha = 8' -- \
  "$bin" run "$tmp/peft_dora.ini"
expect "bert fit with optimizer = adam and weight_decay (L2, torch.optim.Adam's), against torch" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_adam_l2/check.ini
expect "bert fit with a sample of padding alone (attention rows of finfo.min), against transformers" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_pad_all/check.ini
# Decoders fed transformers' own batch: a tokenizer's int64 attention_mask of 1s and 0s (the
# last sample padded at the end), and a greedy generate from a left-padded prompt whose
# tokens must equal transformers' generate's.
expect "gemma against transformers, an HF padded batch" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_gemma/check.ini
if [ "$(grep -cE '^  (torch|torch:reduce-overhead|tf|jax) +ok +.logits. [0-9.]+e-0[7-9]' "$tmp/out")" = 4 ]; then
  ok "gemma: each backend within 1e-6 of transformers"; else bad "gemma: each backend within 1e-6 of transformers"; fi
# a batch of input_ids alone: the mask, token types and positions as transformers' forward
# takes their absence (they were refused: "no tensor 'attention_mask'")
for m in bert gemma; do
  expect "$m: input_ids alone, against transformers' forward given them alone" 0 'all backends ran and agree' -- \
    "$bin" run tests/fixtures/reference_${m}_ids_only/check.ini
  check "... the absent mask said" "note: \[run\] inputs has no attention_mask: all ones"
done
expect "mistral generate against transformers greedy tokens" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_mistral_generate/check.ini
expect "mistral fit, every weight trained: each step's loss against torch's AdamW" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_mistral_fit/check.ini
# GemmaConfig's attention_bias (q/k/v/o_proj with biases, drawn at std 0.5 so a lost one
# shows): the fit's losses, every weight and bias trained, and a greedy generate's prefill
# logits and tokens (a reference that differs is exit 1).
expect "gemma attention_bias fit against torch's AdamW" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_gemma_bias/check.ini
# hidden_size 50 over 4 heads and no head_dim: MistralConfig's hidden_size // heads = 12, a
# q_proj of 48 outputs (make_reference.py --model mistral --config its config.json --batch 2
# --seq-len 8)
expect "mistral with hidden_size not a multiple of the heads (head_dim floored, as MistralConfig) against transformers" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_mistral_head_floor/check.ini
expect "gemma attention_bias generate against transformers" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_gemma_bias_generate/check.ini
# A value the model refuses that came from hf_config's file names the hf_config line and file.
d=$PWD/tests/fixtures/reference_gemma_bias_generate
sed 's/"rope_theta": *[0-9.e+]*/"rope_theta": 0/' "$d/config.json" > "$tmp/bad_config.json"
sed -e "s|^hf_config = .*|hf_config = $tmp/bad_config.json|" -e "s#^\(weights\|inputs\) = #\1 = $d/#" -e '/^reference/d' \
  "$d/check.ini" > "$tmp/badhf.ini"
expect "a bad value from hf_config's file names its line and the file" 1 \
  "badhf.ini:14: building model 'gemma' \\(preset tiny \\+ hf_config = $tmp/bad_config.json\\) for generate.*rope_theta = 0" \
  -- "$bin" run "$tmp/badhf.ini"
if grep -q "the model's" "$tmp/out"; then bad "a checkpoint read whole warns of nothing"; else ok "a checkpoint read whole warns of nothing"; fi
# A peft adapter as PeftModel.save_pretrained writes it, beside its base model (LoRA on
# query and value, and modules_to_save's trained copy of the classifier, which replaces the
# base model's), against the PeftModel's logits (tests/fixtures/make_peft_fixture.py).
expect "a peft adapter (LoRA + modules_to_save) beside its base model against the PeftModel" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_bert_peft/check.ini
if grep -q "warning" "$tmp/out"; then bad "a peft adapter and its base model warn of nothing"; else ok "a peft adapter and its base model warn of nothing"; fi
# [model] LoRA keys that differ from the adapter's adapter_config.json (another scale):
# said, since trident takes r, alpha and the targets from [model]
p=$PWD/tests/fixtures/reference_bert_peft
sed -e 's/^lora_alpha = 8/lora_alpha = 4/' -e "s|^weights = weights|weights = $p/weights|" -e "s|^inputs = |inputs = $p/|" \
  -e "s|^reference = |reference = $p/|" -e 's/^backends = .*/backends = tf/' "$p/check.ini" > "$tmp/peft_alpha.ini"
expect "a peft adapter under other [model] LoRA keys: the difference said" 1 \
  "warning: .*adapter/adapter_config.json \(peft's\), which trident does not read, differs from the run's \[model\] LoRA keys \(lora_alpha = 8 there \(scale 2\), 4 here \(scale 1\)\)" \
  -- "$bin" run "$tmp/peft_alpha.ini"
# peft's names for the targeted modules are its module paths, matched by suffix: another
# spelling of the same layers is no difference; one that reaches other layers ("dense":
# every dense Linear) is said, with the lora_targets it means
mkdir -p "$tmp/peft_paths"; cp -rL "$p/weights/." "$tmp/peft_paths/"
printf '{"r": 4, "lora_alpha": 8, "target_modules": ["attention.self.query", "value"]}' > "$tmp/peft_paths/adapter/adapter_config.json"
sed -e "s|^weights = weights|weights = $tmp/peft_paths|" -e "s|^inputs = |inputs = $p/|" -e "s|^reference = |reference = $p/|" \
  -e 's/^backends = .*/backends = tf/' "$p/check.ini" > "$tmp/peft_paths.ini"
expect "peft's module paths for lora_targets' layers: no difference" 0 'all backends ran and agree' -- "$bin" run "$tmp/peft_paths.ini"
if grep -q "warning" "$tmp/out"; then bad "... and no warning"; else ok "... and no warning"; fi
printf '{"r": 4, "lora_alpha": 8, "target_modules": ["query", "dense"]}' > "$tmp/peft_paths/adapter/adapter_config.json"
expect "peft's 'dense' reaching three more layers is said, with the lora_targets it means" 0 \
  "target_modules = dense,query \(lora_targets = attention_output,intermediate,output,query\) there, lora_targets = query,value here" \
  -- "$bin" run "$tmp/peft_paths.ini"
# LoRA on, the adapters of a layer lora_targets leaves out: named, with that as the reason
sed -e 's/^lora_targets = .*/lora_targets = query/' "$tmp/peft_paths.ini" > "$tmp/peft_query.ini"
expect "adapters of layers outside lora_targets are said to be so" 1 \
  'value.lora_B.weight \(2\) \(LoRA adapter tensors of layers outside \[model\] lora_targets: name those layers there to read them\)$' \
  -- "$bin" run "$tmp/peft_query.ini"
# The same checkpoint under a config that leaves its biases out loads, and the tensors it
# did not read are named, by pattern: the model is not the checkpoint's.
d=$PWD/tests/fixtures/reference_gemma_bias
sed -e "s#^\(weights\|hf_config\) = #\1 = $d/#" -e '/^\(inputs\|reference\) = /d' -e 's/^backends = .*/backends = torch/' \
  -e 's/^task = .*/task = predict/' -e 's/^\[model\]/&\nattention_bias = false/' "$d/check.ini" > "$tmp/nobias.ini"
expect "a checkpoint's tensors the model does not read are named in a warning" 0 \
  "^trident: warning: $d/model.safetensors: 8 of its 28 tensors are not the model's \(not read; .*\): model.layers.\\*.self_attn.k_proj.bias \(2\), model.layers.\\*.self_attn.o_proj.bias \(2\), .*v_proj.bias \(2\)$" \
  -- "$bin" run "$tmp/nobias.ini"
# hf_config = a model's directory (a Hub download, as from_pretrained takes it): its
# config.json, here the biased one the reference was made with
sed -e "s#^\(weights\|inputs\|reference\) = #\1 = $d/#" -e "s#^hf_config = .*#hf_config = $d#" "$d/check.ini" > "$tmp/hfdir.ini"
expect "hf_config = a model's directory reads its config.json" 0 'all backends ran and agree' -- "$bin" run "$tmp/hfdir.ini"
# A SamModel config.json of transformers' own (no global block: "global_attn_indexes": [];
# a 48x48 image; the default prompt scaled to it), its batch and outputs in float64
# (tests/fixtures/make_vision_reference.py --model sam --random 9).
expect "sam from a random transformers config against its float64 outputs" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sam/check.ini
expect "sam with the processor's padding label -10 against transformers" 0 'all backends ran and agree' -- \
  "$bin" run tests/fixtures/reference_sam_pad_label/check.ini
expect "sam with attention_downsample_rate 4 (the two-way blocks keep 2, as transformers builds them)" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sam_rate4/check.ini
# SAM on a photo (task = generate, [generate] init_image; make_sam_photo_fixture.py):
# SamProcessor's resize (Pillow's, enlarging 40x30 and shrinking 97x150 and 150x97),
# normalisation and padding, the prompt scaled with the photo, and post_process_masks'
# logits at the photo's size, against transformers in float64.
for case in "photo|two points (foreground, background) on a photo enlarged to the model's size" \
    "photo_box|a box and a point on a shrunk photo, the single-mask output" \
    "photo_box_only|a box alone, three masks"; do
  expect "sam: ${case#*|}" 0 '^  jax +ok ' -- "$bin" run "tests/fixtures/reference_sam_${case%%|*}/check.ini"
done
sed -e "s|^weights = ..|weights = $PWD/tests/fixtures|" -e "s|^reference = |reference = $PWD/tests/fixtures/reference_sam_photo/|" \
  -e "s|^init_image = |init_image = $PWD/tests/fixtures/reference_sam_photo/|" -e "s|^backends = .*|backends = jax|" \
  tests/fixtures/reference_sam_photo/check.ini > "$tmp/samphoto.ini"
printf 'image = %s\n' "$tmp/sammask.png" >> "$tmp/samphoto.ini"
expect "sam: [generate] image writes the best mask of each image" 0 "wrote $tmp/sammask.png \\(jax's outputs\\)" -- "$bin" run "$tmp/samphoto.ini"
check "sam: the IoU predictions are printed" '^sample 1: IoU predictions -?[0-9.]+ -?[0-9.]+ -?[0-9.]+; mask [0-2] drawn$'
# SAM's generate is one pass: held to f16's tolerance, not a sampler's 1e-1
ini samgen16.ini $'[run]\nmodel = sam\npreset = tiny\ntask = generate\nbackends = torch, tf\ndtype = f16\nbatch = 1\nsteps = 1\nwarmup = 1'
expect "sam: generate in f16 within f16's tolerance (one pass, no sampler)" 0 \
  'all backends ran and agree \(within 2e-02, the f16 tolerance\)' -- "$bin" run "$tmp/samgen16.ini"
rejects samprompt.ini "[run]
model = sam
preset = tiny
task = generate
backends = jax
[generate]
mask_image = m.png" "sam: a mask image is refused" 'sam: \[generate\] mask_image: SAM takes no text prompt and no mask image'
rejects samout.ini "[run]
model = sam
preset = tiny
task = generate
backends = jax
[model]
points = 39,29,40.5,10
labels = 1,1
[generate]
init_image = $PWD/tests/fixtures/reference_sam_photo/photo.png" "sam: a point outside the photo (not the model's 64x64) is refused" \
  'point 1 \(40.5,10\) of points = .39,29,40.5,10. is outside the 40x30 image \(x from 0 to 40, y from 0 to 30\)'
# A whole diffusers pipeline directory (hf_config = it: its parts' config.json, the UNet's
# linear projections, and its scheduler's: linear betas rescaled to zero SNR, leading
# timesteps, v prediction, the clamp on x0), text to image on every backend against
# diffusers' StableDiffusionPipeline in float64 (tests/fixtures/make_sd_reference.py
# --random 330 --batch 2 --steps 3 --guidance 7.5 --seed 1).
expect "stable_diffusion from a random diffusers pipeline against its float64 pictures" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sd/check.ini
# A UNet with no mid block ("mid_block_type": null, as the distilled BK-SDM UNets have;
# heads that divide only the blocks that attend), against diffusers in float64
# (tests/fixtures/make_vision_reference.py --config its config.json --batch 2 --seq-len 5 --seed 4).
expect "unet_2d_condition without a mid block against its float64 outputs" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_unet_nomid/check.ini
# A pipeline whose scheduler is a PNDMScheduler's (as SD v1's are): PNDM's PLMS steps (4
# steps, 5 UNet runs: every order of its multistep), against the pipeline in float64
# (tests/fixtures/make_sd_reference.py --random 817 --batch 2 --steps 4 --guidance 7.5 --seed 1).
expect "stable_diffusion with PNDM against diffusers' pipeline in float64" 0 'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sd_pndm/check.ini
# The same pipeline with EulerDiscreteScheduler.from_config(its scheduler's config) and Karras
# sigmas (scheduler = euler, use_karras_sigmas = true: fractional timesteps, the initial noise
# and the UNet's input scaled by sigma), against diffusers in float64; Euler's own sigmas are
# 0.11 away (make_sd_reference.py --pipeline tests/fixtures/reference_sd_pndm/pipeline --batch 2
# --seq-len 5 --steps 4 --guidance 7.5 --seed 3 --scheduler euler-karras).
expect "stable_diffusion with Euler (Karras sigmas) against diffusers' pipeline in float64" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sd_euler/check.ini
# ... and with DPMSolverMultistepScheduler.from_config(it) and Karras sigmas, "DPM++ 2M Karras"
# (scheduler = dpm: second-order multistep on the data predictions, the last step first
# order), against diffusers in float64 (make_sd_reference.py ... --steps 5 --scheduler dpm-karras).
expect "stable_diffusion with DPM-Solver++ 2M (Karras) against diffusers' pipeline in float64" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sd_dpm/check.ini
# ... and with HeunDiscreteScheduler.from_config(it) (scheduler = heun: Euler's schedule, each
# step but the last taken twice, 5 UNet runs for 3 steps); as Euler it is 0.25 away
# (make_sd_reference.py ... --steps 3 --scheduler heun).
expect "stable_diffusion with Heun against diffusers' pipeline in float64" 0 \
  'all backends ran and agree' -- "$bin" run tests/fixtures/reference_sd_heun/check.ini
# A pipeline whose HeunDiscreteScheduler file has clip_sample = true: the pipeline's
# constructor turns it off, so it runs as reference_sd_heun (from_config of the PNDM file)
mkdir -p "$tmp/heunpipe/scheduler"
for p in unet vae text_encoder; do ln -sfn "$PWD/tests/fixtures/reference_sd_pndm/pipeline/$p" "$tmp/heunpipe/$p"; done
sed 's/PNDMScheduler/HeunDiscreteScheduler/' tests/fixtures/reference_sd_pndm/pipeline/model_index.json > "$tmp/heunpipe/model_index.json"
sed -e 's/"PNDMScheduler"/"HeunDiscreteScheduler"/' -e 's/"set_alpha_to_one": true,/"clip_sample": true,/' \
  tests/fixtures/reference_sd_pndm/pipeline/scheduler/scheduler_config.json > "$tmp/heunpipe/scheduler/scheduler_config.json"
d=$PWD/tests/fixtures/reference_sd_heun
sed -e "s|^hf_config = .*|hf_config = $tmp/heunpipe|" -e "s|^weights = .*|weights = $tmp/heunpipe|" -e "s#^\(inputs\|reference\) = #\1 = $d/#" \
  -e '/^scheduler = heun/d' -e 's/^backends = .*/backends = tf/' "$d/check.ini" > "$tmp/heun_clip.ini"
expect "stable_diffusion: a pipeline's Heun file with clip_sample = true runs as the pipeline turns it off" 0 \
  '^  tf +ok ' -- "$bin" run "$tmp/heun_clip.ini"
# From a prompt and a seed, no batch file (make_sd_seed_fixture.py): trident tokenizes the
# prompt and draws the initial latents as torch does for diffusers' pipeline(prompt,
# generator=torch.manual_seed(2024)) (tr_torch_randn), so the pictures are the pipeline's
# (with seed 2025 every backend is 0.97 away); the samplers that draw fresh noise each step
# (the graph's input "noise") draw it after the latents from the same generator. Away from
# each reference without what it checks: ancestral run as Euler 0.095, eta 0 0.17, the
# deterministic DPM++ 2M 0.41, LMS as Euler 0.025, no guidance_rescale 0.026, UniPC without
# its corrector 0.031 (DPM++ 2M's picture) and with bh1 0.057, without clip_skip 0.84.
for case in "seed|a prompt and a seed give diffusers' pictures for that generator" \
    "ancestral|Euler ancestral, its noise as diffusers draws it" \
    "eta|DDIM with eta 0.8, its noise as diffusers draws it" \
    "dpm_sde|DPM++ 2M SDE Karras, its noise as diffusers draws it" \
    "ddpm|DDPM, its noise as diffusers draws it" \
    "lms|LMS over 6 steps (order 4 from the fourth)" \
    "unipc|UniPC (bh2, order 2: predictor and corrector)" \
    "unipc3|UniPC of order 3 with Karras sigmas" \
    "unipc_range|UniPC with Karras sigmas between sigma_min 0.5 and sigma_max 5" \
    "unipc1_final|UniPC, one step, Karras, final_sigmas_type sigma_min (the ramp's last sigma: no move)" \
    "lms_karras|LMS with Karras sigmas, its schedule's ends (LMS reads no sigma_min)" \
    "clip_skip|the pipeline's clip_skip 1 (the prompt's embeddings from the layer before the last)" \
    "prompts|a prompt for each sample ([generate] prompts = a file)" \
    "rescale|guidance_rescale 0.7 as diffusers' pipeline rescales"; do
  expect "stable_diffusion: ${case#*|}" 0 '^  jax +ok ' -- "$bin" run "tests/fixtures/reference_sd_${case%%|*}/check.ini"
done
# Image to image ([model] strength, [generate] init_image, make_sd_img2img_fixture.py): the
# PNG through the VAE's encoder, its posterior's sample and the noise drawn from the seed as
# diffusers' StableDiffusionImg2ImgPipeline draws them, the last int(steps * strength) steps.
for case in "img2img|image to image with DDIM (the last 3 of 5 steps)" \
    "img2img_ancestral|image to image with Euler ancestral" \
    "img2img_lms|image to image with LMS (diffusers' coefficients from t_start)" \
    "img2img_unipc|image to image with UniPC (Karras)" \
    "img2img_dpm|image to image with DPM++ 2M" \
    "img2img_heun|image to image with Heun (from run 2 * t_start)" \
    "img2img_ddpm|image to image with DDPM, its noise as diffusers draws it" \
    "img2img_pndm|image to image with PNDM (from run 2 of its list)" \
    "img2img_pndm1|image to image with PNDM from run 1 (its counter 1 from one step higher)" \
    "inpaint|inpainting (an inpainting UNet, mask_image) from noise at strength 1" \
    "inpaint_ancestral|inpainting from the picture at strength 0.6 with Euler ancestral" \
    "inpaint_blend|inpainting with the 4-channel UNet (the known region blended back each step)" \
    "inpaint_blend_heun|inpainting's blend after every Heun run" \
    "inpaint_blend_unipc|inpainting's blend with UniPC (strength 0.8)"; do
  expect "stable_diffusion: ${case#*|}" 0 '^  jax +ok ' -- "$bin" run "tests/fixtures/reference_sd_${case%%|*}/check.ini"
done
# The ancestral run again from the scheduler's own file rather than `scheduler = euler_ancestral`.
anc=$PWD/tests/fixtures/reference_sd_ancestral
sed -e "s|^weights = ..|weights = $PWD/tests/fixtures|" -e "s|^tokenizer = ..|tokenizer = $PWD/tests/fixtures|" \
  -e "s|^reference = |reference = $anc/|" -e '/^scheduler = /d' -e '/^timestep_spacing = /d' \
  -e "s|^\[model\]|[model]\nhf_config = $anc/scheduler_config.json|" "$anc/check.ini" > "$tmp/anc.ini"
expect "stable_diffusion: an EulerAncestralDiscreteScheduler's file runs it" 0 '^  jax +ok ' -- "$bin" run "$tmp/anc.ini"
rejects etaeuler.ini "[run]
model = stable_diffusion
preset = tiny
task = generate
backends = jax
[model]
scheduler = euler
eta = 0.5" "eta is DDIM's" "etaeuler.ini:8: .*eta = 0.5: eta is DDIM's .*scheduler = euler"
rejects etapredict.ini "[run]
model = stable_diffusion
preset = tiny
backends = jax
[model]
eta = 0.5" "eta is generate's" 'eta = 0.5 runs in task generate'
rejects anckarras.ini "[run]
model = stable_diffusion
preset = tiny
task = generate
backends = jax
[model]
scheduler = euler_ancestral
use_karras_sigmas = true" "euler_ancestral refuses karras sigmas, as diffusers' class has none" \
  'anckarras.ini:8: .*euler_ancestral: use_karras_sigmas = true is not provided'
rejects ancpredict.ini "[run]
model = stable_diffusion
preset = tiny
backends = jax
[model]
scheduler = euler_ancestral" "euler_ancestral is generate's" 'scheduler = euler_ancestral runs in task generate'
# The same pipeline in bf16: every backend no farther from its float64 pictures than twice
# diffusers' own bf16 pipeline is (0.033; trident's backends 0.030 to 0.033) (make_sd_reference.py
# --pipeline tests/fixtures/reference_sd_pndm/pipeline --batch 2 --seq-len 5 --steps 4
# --guidance 7.5 --dtype bf16 --seed 3).
# Its reference_tolerance holds each backend to the pictures; the backends to each other keep
# the sampler's bound.
expect "stable_diffusion in bf16 against diffusers' pipeline in float64, within twice diffusers' bf16 error" 0 \
  'all backends ran and agree \(within 1e-01, bf16 over a sampler' -- "$bin" run tests/fixtures/reference_sd_bf16/check.ini
check "the reference's own bound, said" \
  '^against \[run\] reference = tests/fixtures/reference_sd_bf16/reference.safetensors \(within 6.7e-02, \[run\] reference_tolerance\):$'
d=$PWD/tests/fixtures/reference_sd_bf16
sed -e 's/^reference_tolerance = .*/reference_tolerance = 0.01/' -e "s#^\(weights\|hf_config\) = \.\.#\1 = $d/..#" \
  -e "s#^\(inputs\|reference\) = #\1 = $d/#" "$d/check.ini" > "$tmp/tight.ini"
expect "reference_tolerance below the backends' error fails, naming it" 1 \
  "reference.safetensors: '[a-z:-]+' differs from it: .*\(\[run\] reference_tolerance is 1e-02\)" -- \
  "$bin" run "$tmp/tight.ini" --steps 1
rejects reftol.ini "[run]
reference_tolerance = 0.01" "reference_tolerance without a reference" \
  'reftol.ini:2: \[run\] reference_tolerance without a \[run\] reference; expected a reference = FILE.safetensors line'
rejects reftol.ini "[run]
reference_tolerance = 0
reference = x.safetensors" "reference_tolerance out of range" \
  'reftol.ini:2: \[run\] reference_tolerance = 0: expected a relative difference above 0 and at most 1 \(each backend against \[run\] reference'
expect "a preset under hf_config is named so" 0 '^trident: stable_diffusion/tiny \+ hf_config: 39216 parameters' -- "$bin" run tests/fixtures/reference_sd/check.ini --steps 1
# One source of prompts: text and an inputs file are refused together (the file's ids would
# run under the text's name); a [model] key's fault met while opening the tokenizer names its line.
d=$PWD/tests/fixtures/reference_mistral_generate
sed -e "s|^weights = ..|weights = $PWD/tests/fixtures|" -e "s|^inputs = |inputs = $d/|" -e '/^reference/d' \
  -e 's/^backends = .*/backends = torch/' -e '/^prompt_len/d' "$d/check.ini" > "$tmp/pi.ini"
printf 'prompt = Hello world\ntokenizer = %s/tests/fixtures/llm_tokenizer/mistral\n' "$PWD" >> "$tmp/pi.ini"
expect "generate: prompt with [run] inputs is refused" 1 \
  'pi.ini:16: \[generate\] prompt and \[run\] inputs \(line 11\) both give the prompts; give one of them' -- \
  "$bin" run "$tmp/pi.ini"
sed -e "s|^inputs = .*|inputs = $PWD/tests/fixtures/right_padded_batch.safetensors|" "$tmp/pi.ini" | sed '/^prompt = /d;/^tokenizer = /d' > "$tmp/rp.ini"
echo 'prompt_len = 12' >> "$tmp/rp.ini"
expect "generate: a prompt padded on the right is refused, naming the sample" 1 \
  "sample 2's prompt ends in padding \\(attention_mask\\[2\\]\\[11\\] = 0\\).*padded on the left" -- "$bin" run "$tmp/rp.ini"
sed -i '/^inputs = /d' "$tmp/pi.ini"
printf '[model]\neos_token_id = 9999\n' >> "$tmp/pi.ini"
expect "generate: a bad [model] eos_token_id names its own line" 1 'pi.ini:18: \[model\]: mistral: eos_token_id' -- \
  "$bin" run "$tmp/pi.ini"
sed 's/^weights = .*/weights =/' tests/fixtures/reference_mistral_generate/check.ini > "$tmp/gen_seeded.ini"
sed -i 's#^inputs = #inputs = '"$PWD"'/tests/fixtures/reference_mistral_generate/#; s#^reference = #reference = '"$PWD"'/tests/fixtures/reference_mistral_generate/#' "$tmp/gen_seeded.ini"
expect "generate: other weights' tokens are named where they first differ" 1 \
  "'torch' differs from it: 'tokens': [0-9]+ of 18 differ, the first tokens\[[0-9],[0-9]\]: [0-9]+ here, [0-9]+ in the reference" -- "$bin" run "$tmp/gen_seeded.ini"
cp tests/fixtures/reference/check.ini tests/fixtures/reference/*.safetensors "$tmp/" 2>/dev/null
sed -i 's#^weights = .*#weights = '"$PWD"'/tests/fixtures/bert_tiny.safetensors#' "$tmp/check.ini"
sed 's/^weights = .*/weights =/' "$tmp/check.ini" > "$tmp/seeded.ini"
expect "a reference beyond the tolerance fails, naming the element" 1 "\[run\] reference = .*reference.safetensors: 'torch' differs from it: '[a-z_]+' [0-9.e+-]+; worst element [a-z_]+\[[0-9,]+\]" -- "$bin" run "$tmp/seeded.ini"
sed -i 's/^inputs = .*/inputs = reference.safetensors/' "$tmp/check.ini"
expect "an inputs file without the graph's inputs" 1 "\[run\] inputs = .*/reference.safetensors: no tensor 'input_ids'; the graph's inputs are input_ids i32\[2,16\], attention_mask f32\[2,16\], token_type_ids i32\[2,16\]" -- "$bin" run "$tmp/check.ini"
sed -i 's/^inputs = .*/inputs = batch.safetensors/; s/^batch = 2/batch = 3/; /^reference/d' "$tmp/check.ini"
expect "an inputs file of another batch" 1 "'input_ids' is i64\[2,16\], the graph's input is i32\[3,16\]" -- "$bin" run "$tmp/check.ini"
# Progress: one line per backend in a log; a live line on a terminal (script gives a pty).
expect "progress: a line per backend when not a terminal" 0 'bert/tiny predict  tf  3 steps, [0-9.]+ ms/step' -- "$bin" run "$tmp/two.ini"
if command -v script >/dev/null; then
  script -qec "TRIDENT_PROGRESS= $bin run $tmp/two.ini --steps 40" /dev/null > "$tmp/pty" 2>&1
  if grep -aq $'\r''bert/tiny predict  step [0-9]*/40 .*ms/step  ETA' "$tmp/pty"; then ok "progress: a live line under a pseudo-terminal"
  else cp "$tmp/pty" "$tmp/out"; bad "progress: a live line under a pseudo-terminal"; fi
else echo > "$tmp/out"; bad "progress: script(1) (bsdutils) is missing"; fi
# Ctrl-C: the current step finishes, the table and the JSON are written, marked; exit 130.
"$bin" run "$tmp/two.ini" --steps 1000000 --json "$tmp/int.json" --outputs "$tmp/int.safetensors" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q 'bert/tiny' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
sleep 1; kill -INT $pid; wait $pid; rc=$?
if [ $rc = 130 ] && grep -Eq '^tf +[0-9.]+ +[0-9.]+ ' "$tmp/out" && grep -q 'interrupted' "$tmp/out" && [ -s "$tmp/int.safetensors" ]; then
  ok "Ctrl-C: exit 130, the table so far, the outputs"; else echo "exit $rc" >> "$tmp/out"; bad "Ctrl-C: exit 130, the table so far, the outputs"; fi
if grep -Eq '"interrupted":[[:space:]]*true' "$tmp/int.json" 2>/dev/null; then ok "Ctrl-C: the JSON says interrupted"; else bad "Ctrl-C: the JSON says interrupted"; fi
# ... and never "all backends ran and agree": each ran some of its steps (it once said so,
# with all_ok true)
if grep -q '^interrupted: 2 of 2 backends took timed steps, and they agree over them' "$tmp/out" &&
   ! grep -q 'all backends ran and agree' "$tmp/out" && grep -Eq '"all_ok":[[:space:]]*false' "$tmp/int.json"; then
  ok "Ctrl-C: the verdict says the steps were cut short"; else bad "Ctrl-C: the verdict says the steps were cut short"; fi
# Ctrl-C in a sequential run, during the first backend: the second never starts, and the
# verdict says not all backends ran (it once said "all backends ran and agree").
ini two_seq.ini "$(cat "$tmp/two.ini")
schedule = sequential"
"$bin" run "$tmp/two_seq.ini" --steps 1000000 --json "$tmp/sint1.json" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q 'bert/tiny' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
sleep 1; kill -INT $pid; wait $pid; rc=$?
if [ $rc = 130 ] && grep -q 'interrupted before it started' "$tmp/out" &&
   grep -q '^interrupted: 1 of 2 backends took timed steps (.*): nothing to compare' "$tmp/out" &&
   grep -Eq '"all_ok":[[:space:]]*false' "$tmp/sint1.json" 2>/dev/null; then
  ok "Ctrl-C before a backend started: not all backends ran"
else echo "exit $rc" >> "$tmp/out"; bad "Ctrl-C before a backend started: not all backends ran"; fi
if grep -q 'interrupted (Ctrl-C): 1 of 2 backends took timed steps' "$tmp/out" &&
   [ "$(grep -c '"plugin":[[:space:]]*".*libtrident_backend_[a-z]*\.so"' "$tmp/sint1.json")" = 2 ]; then
  ok "... 1 of 2 ran, and the one that never started keeps its plugin's file"
else bad "... 1 of 2 ran, and the one that never started keeps its plugin's file"; fi
# The parent killed (SIGTERM, not the group) amid a long generate: its backend's child
# process ends with it (it ran on, reparented, until its command was done)
ini orphan.ini $'[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch, tf\nbatch = 1\nsteps = 2\nwarmup = 1\n[generate]\nmax_length = 30000'
"$bin" run "$tmp/orphan.ini" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do pgrep -f "run $tmp/orphan.ini" | grep -qv "^$pid\$" && break; sleep 0.1; done
sleep 1; kill -TERM $pid; wait $pid 2>/dev/null
for _ in $(seq 30); do pgrep -f "run $tmp/orphan.ini" > /dev/null || break; sleep 0.1; done
if pgrep -f "run $tmp/orphan.ini" > /dev/null; then
  pkill -9 -f "run $tmp/orphan.ini"; bad "the backend's child ends with a killed parent"
else ok "the backend's child ends with a killed parent"; fi
# Ctrl-C in the warm-up: it stops there, though an isolated backend's child runs the whole
# warm-up in one command (it ran all of it, then said "after 100000 warm-up steps")
ini warm_int.ini "$(sed 's/^warmup = .*/warmup = 1000000/' "$tmp/two.ini")"
"$bin" run "$tmp/warm_int.ini" --report "$tmp/wint" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q 'bert/tiny' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
sleep 1; kill -INT $pid
for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then kill -9 $pid; wait $pid; echo "still running 30 s after Ctrl-C" >> "$tmp/out"; rc=-1
else wait $pid; rc=$?; fi
if [ $rc = 130 ] && grep -q '^interrupted: no backend reached its timed steps' "$tmp/out" &&
   grep -q 'Interrupted before any of its 3 timed steps, in the 1000000 warm-up steps' "$tmp/wint/report.md" 2>/dev/null &&
   ! grep -q 'fastest in green' "$tmp/wint/chart.svg"; then ok "Ctrl-C in the warm-up: stops there, and the report says so"
else echo "exit $rc" >> "$tmp/out"; bad "Ctrl-C in the warm-up: stops there, and the report says so"; fi

# trident bench SUITE.ini: each row's table, then the summary in the benchmark page's shape.
ini s_gen.ini $'[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch, jax\nbatch = 2\n[backend.jax]\nfuse = false\n[generate]\nprompt_len = 4\nmax_length = 8'
ini suite.ini "; two rows of the benchmark at tiny sizes
[suite]
backends = torch, tf
steps = 2
warmup = 1

[row.bert_predict]
config = two.ini
label = BERT predict

[row.gemma_generate_b1]
config = s_gen.ini
label = Gemma generate (batch 1)
batch = 1"
expect "suite: every row, then the summary" 0 '^Gemma generate \(batch 1\) +gemma/tiny generate, batch 1, f32 +' -- \
  "$bin" bench "$tmp/suite.ini" --report "$tmp/srep" --json "$tmp/suite.json"
if grep -q '^\[1/2\] BERT predict: ' "$tmp/out" && grep -q '^\[2/2\] Gemma generate (batch 1): ' "$tmp/out" &&
   grep -Eq '^row +run +torch +tf *$' "$tmp/out"; then ok "suite: a table per row and a column per backend"
else bad "suite: a table per row and a column per backend"; fi
if grep -Eq '^BERT predict +bert/tiny predict, batch 2, f32 +(\*[0-9.]+( \(noisy\))? +[0-9.]+ \([0-9.]+x(, noisy)?\)|[0-9.]+ \([0-9.]+x(, noisy)?\) +\*[0-9.]+( \(noisy\))?) *$' "$tmp/out"; then
  ok "suite: the best starred, the other with its ratio"; else bad "suite: the best starred, the other with its ratio"; fi
if grep -Eq '^\| BERT predict \| bert/tiny predict, batch 2, f32 \| .*\*\*[0-9.]+\*\*' "$tmp/srep/suite.md" 2>/dev/null &&
   [ -s "$tmp/srep/suite.csv" ] && [ -s "$tmp/srep/gemma_generate_b1/report.json" ] &&
   grep -q '"kind":[[:space:]]*"suite"' "$tmp/suite.json"; then ok "suite: --report and --json write the suite's files and each row's"
else bad "suite: --report and --json write the suite's files and each row's"; fi
expect "report: two suites, row by row" 0 '^2 rows compared' -- "$bin" report "$tmp/suite.json" "$tmp/suite.json"
if grep -q '^== row gemma_generate_b1 (Gemma generate (batch 1))' "$tmp/out"; then ok "report: each row named"; else bad "report: each row named"; fi
expect "report: a suite against a run is refused" 1 "is a suite's and .* a run's; compare a suite with a suite" -- \
  "$bin" report "$tmp/suite.json" "$tmp/srep/bert_predict/report.json"
# Ctrl-C in a suite: the current row stops after its step, the rest are not run, and the
# summary and the JSON still come out, marked.
"$bin" bench "$tmp/suite.ini" --steps 1000000 --json "$tmp/sint.json" > "$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q 'bert/tiny' "$tmp/out" 2>/dev/null && break; sleep 0.1; done
sleep 1; kill -INT $pid; wait $pid; rc=$?
if [ $rc = 130 ] && grep -Eq '^Gemma generate \(batch 1\) +\(not run\) +not run +not run' "$tmp/out" &&
   grep -Eq '"interrupted":[[:space:]]*true' "$tmp/sint.json" 2>/dev/null; then
  ok "suite: Ctrl-C gives exit 130, the summary with the rest not run, the JSON marked"
else echo "exit $rc" >> "$tmp/out"; bad "suite: Ctrl-C gives exit 130, the summary with the rest not run, the JSON marked"; fi
expect "suite: --rows picks rows by pattern" 0 '^\[1/1\] Gemma generate' -- "$bin" bench "$tmp/suite.ini" --rows 'gemma_*'
expect "suite: --rows that matches nothing lists the rows" 1 "'nope' matches no row of .*suite.ini \(rows: bert_predict, gemma_generate_b1\)" -- \
  "$bin" bench "$tmp/suite.ini" --rows nope
# A row's warning is said once, when the row runs (not also while every row is checked first)
ini suite_warn.ini "$(cat "$tmp/suite.ini")
seq_len = 9"
expect "suite: a row's warning" 0 '\[row.gemma_generate_b1\] seq_len = 9 is not read by generate' -- \
  "$bin" bench "$tmp/suite_warn.ini" --rows 'gemma_*'
if [ "$(grep -c 'seq_len = 9 is not read by generate' "$tmp/out")" = 1 ]; then ok "suite: ... said once"; else bad "suite: ... said once"; fi
expect "suite: --rows is for suites" 2 'picks rows of a suite' -- "$bin" bench "$tmp/two.ini" --rows bert
expect "suite: --rows with no name in it is refused, not an empty suite" 1 "--rows ',': no row name or pattern in it" -- \
  "$bin" bench "$tmp/suite.ini" --rows ','
expect "suite: --outputs is for one run" 2 'is a suite: --outputs' -- "$bin" bench "$tmp/suite.ini" --outputs "$tmp/x.safetensors"
ini nested.ini $'[suite]\nsteps = 1\n[row.inner]\nconfig = suite.ini'
expect "suite: a row whose config is a suite is said so" 1 \
  'nested.ini:4: \[row.inner\] config = suite.ini: a suite \(its \[suite\] section\); .*suites do not nest' -- \
  "$bin" bench "$tmp/nested.ini"
ini suite_bad.ini "$(cat "$tmp/suite.ini")
[row.broken]
config = s_gen.ini
dtype = f64"
expect "suite: a bad row is found before any row runs" 1 'suite_bad.ini:17: \[row.broken\] dtype = f64: expected f32, bf16 or f16' -- \
  "$bin" bench "$tmp/suite_bad.ini"
if grep -q '^\[1/' "$tmp/out"; then bad "suite: nothing ran before the bad row was found"; else ok "suite: nothing ran before the bad row was found"; fi
ini gen.ini $'[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbackends = torch, jax\nbatch = 2\nsteps = 1\nwarmup = 1\n[generate]\nprompt_len = 8\nmax_length = 12'
expect "--outputs of generate: tokens and prefill logits" 0 'wrote .*og.safetensors \(4 tensors' -- "$bin" run "$tmp/gen.ini" --outputs "$tmp/og.safetensors"
if grep -aq '"jax/tokens":{"shape":\[2,4\],[^}]*"dtype":"I32"' "$tmp/og.safetensors"; then ok "generate's tokens [2,4] i32"; else bad "generate's tokens [2,4] i32"; fi
# A crashing, aborting, exiting or hanging plugin costs only its own row: each backend runs
# in a child process (tests/plugins/backend_test.c's faulty variant misbehaves on request).
faulty=$(cd "$(dirname "$bin")" && pwd)/fault_plugins/libtrident_backend_faulty.so
# In the sanitizer build ASan's own SEGV handler would report the plugin's crash and abort
# (signal 6); these cases check what trident says of the signal a plugin dies of, so ASan
# leaves SIGSEGV to its default action here.
nosegv=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0")
# faulty_bert FILE FAULT AT_STEP RUN_LINES: BERT tiny on torch, the faulty plugin and tf,
# the plugin doing FAULT at step AT_STEP; RUN_LINES go in [run] (steps, ...)
faulty_bert() {
  ini "$1" "[run]
model = bert
backends = torch, $faulty, tf
warmup = 1
batch = 2
seq_len = 8
$4
[backend.faulty]
fault = $2
at_step = $3"
}
for case in "segv:killed by signal 11 \(Segmentation fault\) during timed step 2" \
            "abort:killed by signal 6 \(Aborted\) during timed step 2" \
            "exit:exited with status 0 during timed step 2" \
            "hang:no answer within \[run\] backend_timeout = 2 s during timed step 2"; do
  fault=${case%%:*} why=${case#*:}
  faulty_bert "f_$fault.ini" "$fault" 3 "steps = 4
backend_timeout = 2"
  expect "a plugin that does $fault costs only its row" 1 "faulty: FAILED: (the backend's process (was )?)?$why" -- \
    "${nosegv[@]}" "$bin" run "$tmp/f_$fault.ini" --json "$tmp/f_$fault.json"
  if grep -Eq '^tf +[0-9.]+ +[0-9.]+ .* ok *$' "$tmp/out" && grep -q '"backend":[[:space:]]*"tf"' "$tmp/f_$fault.json"; then
    ok "$fault: the other rows and the JSON survive"; else bad "$fault: the other rows and the JSON survive"; fi
done
# generate runs its backends one after another in one child: a plugin that crashes there
# costs the run's remaining rows, not trident (the JSON is written, the row says why).
ini g_crash.ini "[run]
model = gemma
preset = tiny
task = generate
backends = torch, $faulty
steps = 1
warmup = 1
batch = 2
[backend.faulty]
fault = segv
at_step = 3
[generate]
max_length = 10
prompt_len = 4"
expect "generate: a plugin that crashes costs its row, not trident" 1 \
  "faulty: FAILED: the backend's process was killed by signal 11 \(Segmentation fault\) during generate" -- \
  "${nosegv[@]}" "$bin" run "$tmp/g_crash.ini" --json "$tmp/g_crash.json"
if grep -q '"backend":[[:space:]]*"torch"' "$tmp/g_crash.json" 2>/dev/null; then ok "generate: the torch row survives in the JSON"
else bad "generate: the torch row survives in the JSON"; fi
# A plugin that rewrites an output's descriptor (a NULL data pointer, another shape) in a
# step: refused by the host, naming the output, in the step it did it (the last one here),
# in process too (isolate = off), and under --check nodes.
for case in "nullout:data pointer" "reshape:shape or strides"; do
  fault=${case%%:*} why=${case#*:}
  faulty_bert "o_$fault.ini" "$fault" 4 "steps = 3
isolate = off"
  expect "a plugin that rewrites an output ($fault) is refused" 1 \
    "faulty: FAILED: step 4: backend 'faulty': execute changed output 0 \('logits'\)'s $why" -- "$bin" run "$tmp/o_$fault.ini"
done
# isolate = off: every backend reads the one host copy of the weights; one that writes
# into it is named (not the next backend, whose numbers it changed)
faulty_bert w_param.ini writeparam 2 "steps = 3
isolate = off"
expect "isolate = off: a plugin that writes into a weight is named" 1 \
  "faulty: FAILED: wrote into the memory of PARAM 'bert\.embeddings\.word_embeddings\.weight', which the graph does not update" \
  -- "$bin" run "$tmp/w_param.ini"
check "isolate = off: the backend after it still runs" '^tf +[0-9.]+ '
ini o_check.ini "$(sed 's/^at_step = 4/at_step = 1/' "$tmp/o_nullout.ini")"
ini cn_missing.ini $'[run]\nmodel = bert\npreset = tiny\nbackends = torch, nosuch, tf\nbatch = 1\nseq_len = 4'
expect "--check nodes refuses a missing backend before any runs" 1 \
  "cn_missing.ini:4: \\[run\\] backends: 'nosuch': backend 'nosuch' not found" -- "$bin" run "$tmp/cn_missing.ini" --check nodes
if grep -q 'running one step' "$tmp/out"; then bad "... no backend's step ran"; else ok "... no backend's step ran"; fi
expect "--check nodes survives a plugin that rewrites an output" 1 "faulty: backend 'faulty': execute changed output 0" -- \
  "$bin" run "$tmp/o_check.ini" --check nodes
ini f_init.ini "[run]
model = bert
backends = torch, $faulty
steps = 1
warmup = 1
batch = 2
seq_len = 8
[backend.faulty]
fault = init_segv"
expect "a plugin that crashes in init costs its row, found before the run" 1 "faulty: FAILED: the backend's process was killed by signal 11 .* during the check before the run \(in its init\)" -- "${nosegv[@]}" "$bin" run "$tmp/f_init.ini"
check "a plugin that crashes in init: the other backends run" '^torch +[0-9.]+ +[0-9.]+ .*reference$'

# trident list names a plugin as backends = takes it (its file's), and its vtable's name
# where that differs
mkdir -p "$tmp/renamed"
cp "$(dirname "$wrong")/libtrident_backend_minimal.so" "$tmp/renamed/libtrident_backend_other.so"
ini rlist.ini "[plugins]
path = $tmp/renamed"
expect "list: a renamed plugin by its file's name, its vtable's said" 0 \
  "^  other +.*libtrident_backend_other.so +\(its vtable's name: minimal\)" -- "$bin" list "$tmp/rlist.ini"
# jax's cache: the build files of a process that died mid-compile (a backend_timeout) are
# swept when their entry is made again; a live process's are left
mkdir -p "$tmp/jcache"
ini jcache.ini "[run]
model = bert
preset = tiny
backends = jax
batch = 1
seq_len = 4
steps = 1
warmup = 1
[backend.jax]
cache_dir = $tmp/jcache"
"$bin" run "$tmp/jcache.ini" > "$tmp/out" 2>&1
entry=$(ls "$tmp/jcache"/*.so 2>/dev/null | head -1)
sh -c 'exit 0' & dead=$!; wait $dead
if [ -n "$entry" ]; then
  rm -f "$tmp/jcache"/*.so
  touch "${entry%.so}.$dead.1.c" "$entry.tmp.$dead.1" "$entry.log.$dead.1" "${entry%.so}.$$.1.c"
  "$bin" run "$tmp/jcache.ini" > "$tmp/out" 2>&1
fi
if [ -n "$entry" ] && [ -f "$entry" ] && [ ! -e "${entry%.so}.$dead.1.c" ] && [ ! -e "$entry.tmp.$dead.1" ] &&
   [ ! -e "$entry.log.$dead.1" ] && [ -e "${entry%.so}.$$.1.c" ]; then
  ok "jax: a dead build's files are swept, a live one's kept"
else ls -la "$tmp/jcache" >> "$tmp/out"; bad "jax: a dead build's files are swept, a live one's kept"; fi
# trident list and check-backend probe a plugin in a child process too.
ini flist.ini "[plugins]
path = $(dirname "$faulty")"
for case in "segv:killed by signal 11 \(Segmentation fault\) during its load" "exit:exited with status 3 during its load"; do
  fault=${case%%:*} why=${case#*:}
  expect "list: a plugin whose constructor does $fault is refused" 0 "refused +.*faulty\.so +.*$why" -- \
    env TP_FAULTY_LOAD="$fault" "${nosegv[@]}" "$bin" list "$tmp/flist.ini"
  check "list: the scan goes on past it ($fault)" '^  torch +'
done
ini fcb.ini "[run]
model = bert
backends = $faulty
[backend.faulty]
fault = segv
at_step = 1"
expect "check-backend: a plugin that crashes is a failed check naming the signal" 1 \
  "FAIL +runs without killing its process +the backend's process was killed by signal 11" -- \
  "${nosegv[@]}" "$bin" check-backend "$faulty" "$tmp/fcb.ini"
check "check-backend: the rows before the crash are kept" '^  PASS '
check "check-backend: the crash names the case it was in" 'it was in: the case f32  matmul \[4,8\]x\[8,16\]'
ini fcb_hang.ini "[run]
model = bert
backends = $faulty
backend_timeout = 2
[backend.faulty]
fault = hang
at_step = 1"
expect "check-backend: a plugin that hangs is a failed check after the INI's backend_timeout" 1 \
  "FAIL +runs without killing its process +.*no answer within .*2 s" -- "$bin" check-backend "$faulty" "$tmp/fcb_hang.ini"
ini fcb_noupd.ini "[run]
model = bert
backends = $faulty
[backend.faulty]
fault = noupdate"
expect "check-backend: a training backend that drops its updates fails the state check" 1 \
  "FAIL +state: 3 updates, then sync +rel err: p's host memory" -- "$bin" check-backend "$faulty" "$tmp/fcb_noupd.ini"
check "check-backend: get_stats is called" 'PASS +get_stats after execute +kernel calls'
# A path's [backend.NAME] is its file's stem, as in run, not the vtable's name.
cp "$(dirname "$wrong")/libtrident_backend_minimal.so" "$tmp/stemname.so"
ini stem.ini "[run]
model = bert
backends = ./stemname.so
[backend.stemname]
verbsoe = true"
expect "check-backend reads a path's [backend.STEM] section, as run does (options refused: exit 2)" 2 \
  "FAIL +init with the INI's options .*unknown key 'verbsoe'" -- "$bin" check-backend "$tmp/stemname.so" "$tmp/stem.ini"
check "check-backend tries the unknown key alone after the INI's options fail" 'PASS +unknown option refused by name'
check "check-backend: refused options are the user's to fix, not a verdict on the backend" 'init refused the options given'
# A suite whose row crashes a backend goes on to its next row.
ini suite_fail.ini "[suite]
steps = 2
warmup = 1
[row.faulty]
config = f_segv.ini
[row.bert]
config = two.ini"
expect "suite: a failing row is a failed row, the next one runs" 1 '^bert +bert/tiny predict, batch 2, f32 ' -- \
  "${nosegv[@]}" "$bin" bench "$tmp/suite_fail.ini" --steps 4
check "suite: the failed backend's cell says FAILED" '^faulty +bert/tiny predict.* FAILED '
ini inproc.ini "$(cat "$tmp/two.ini")
isolate = off"
expect "isolate = off runs in one process, and says so" 0 'backends: in one process \(\[run\] isolate = off\)' -- "$bin" run "$tmp/inproc.ini"
expect "isolated by default, and says so" 0 'backends: each in its own process' -- "$bin" run "$tmp/two.ini"
ini fitint.ini "$(sed 's/^backends = .*/&\ntask = fit\nschedule = interleaved/' "$tmp/two.ini")"
expect "fit interleaved across processes" 0 'interleaved \(the backends took their steps in turns\).*all backends ran and agree|all backends ran and agree' -- "$bin" run "$tmp/fitint.ini"

# --check nodes: every node of one step against the reference backend.
ini chk.ini "$(sed "s#^backends = .*#backends = torch, tf, $wrong#" "$tmp/two.ini")"
expect "--check nodes names the first node that diverges" 1 "wrong: first divergence: node [0-9]+ 'classifier' \(add\) rel 1.0e-02 > 1e-04" -- "$bin" run "$tmp/chk.ini" --check nodes
if grep -q "tf: every node within tolerance" "$tmp/out"; then ok "--check nodes: tf agrees node by node"; else bad "--check nodes: tf agrees node by node"; fi
expect "--check takes only nodes" 2 'expected --check nodes' -- "$bin" run "$tmp/two.ini" --check everything

# Reports: --report DIR writes the four files; trident report compares two runs.
expect "--report writes its files" 0 'all backends ran' -- "$bin" run "$tmp/two.ini" --report "$tmp/rep" --json "$tmp/a.json"
for f in report.md report.csv report.json chart.svg; do
  if [ -s "$tmp/rep/$f" ]; then ok "--report wrote $f"; else echo > "$tmp/out"; bad "--report wrote $f"; fi
done
if grep -q '| \*\*[0-9.]*\*\* |' "$tmp/rep/report.md"; then ok "report.md puts the best in bold"; else cp "$tmp/rep/report.md" "$tmp/out"; bad "report.md puts the best in bold"; fi
expect "report: two runs side by side" 0 'B/A' -- "$bin" report "$tmp/a.json" "$tmp/rep/report.json"
if ! grep -q '^note: A and B differ' "$tmp/out"; then ok "report: one host and setup: no note"; else bad "report: one host and setup: no note"; fi
sed -e 's/"threads":[[:space:]]*[0-9]*/"threads": 77/' -e 's/"seed":[[:space:]]*[0-9]*/"seed": 99/' "$tmp/a.json" > "$tmp/b.json"
expect "report: runs of other threads and seeds say so above the table" 0 \
  'note: A and B differ in threads: [0-9]+ vs 77' -- "$bin" report "$tmp/a.json" "$tmp/b.json"
check "report: ... and in the seed" 'note: A and B differ in seed: [0-9]+ vs 99'
sed -e 's/"flops_per_step":[[:space:]]*[0-9.e+]*/"flops_per_step": 12345/' "$tmp/a.json" > "$tmp/c.json"
expect "report: runs of other work (flops per step) say so" 0 'note: A and B differ in flops_per_step: [0-9.e+]+ vs 12345' \
  -- "$bin" report "$tmp/a.json" "$tmp/c.json"
expect "report: one argument is a usage error" 2 'usage' -- "$bin" report "$tmp/a.json"
expect "report: a missing file" 1 'nofile.json' -- "$bin" report "$tmp/a.json" "$tmp/nofile.json"
expect "--log-scale needs --report" 2 'with --report DIR' -- "$bin" run "$tmp/two.ini" --log-scale

# Without [run] seq_len a Stable Diffusion prompt is the text encoder's every position (as
# its pipeline pads it: 77 at sd-v1-4, 16 at tiny), not core's 128; with it, the INI's.
ini sd.ini $'[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbackends = torch\nsteps = 1\nwarmup = 1\nbatch = 1'
expect "stable_diffusion: the prompt's length by default" 0 'input input_ids \[2,16\]' -- "$bin" run "$tmp/sd.ini"
ini sd8.ini "$(cat "$tmp/sd.ini")
seq_len = 8"
expect "stable_diffusion: [run] seq_len wins" 0 'input input_ids \[2,8\]' -- "$bin" run "$tmp/sd8.ini"
ini clip.ini $'[run]\nmodel = clip_text\npreset = tiny\nbackends = torch\nsteps = 1\nwarmup = 1\nbatch = 1'
expect "clip_text: every position by default" 0 'input input_ids \[1,16\]' -- "$bin" run "$tmp/clip.ini"

finish
