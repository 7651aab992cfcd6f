#!/usr/bin/env python3
"""Native PyTorch on the CPU, on the work of one of trident's conf/cpu configs: the peer row
that the Keras 3 benchmark sets beside Keras ("native PyTorch"), measured as trident
measures (ms/step over `steps` steps after `warmup` left out; the first step on its own).

    torch_cpu.py conf/cpu/bert_predict.ini [--mode eager|fused|compile] [--threads N] [--steps N] [--json OUT]

--mode fused is eager with the fit's optimizer as `fused=True` (PyTorch's one-kernel
Adam/AdamW step on the CPU, since 2.4; not the default), beside trident's fused AdamW; a
predict or generate INI is refused in that mode (it has no optimizer).

dtype f32, or bf16 for predict and generate (weights and float inputs in bf16, as
trident's bf16 run; a bf16 fit is refused: PyTorch's and trident's master weights differ).

The model is the Hugging Face class trident names its model after (transformers' BERT,
Gemma, Mistral, CLIP and SAM; diffusers' UNet and VAE), built from the config of the
preset the INI names (random weights: speed does not depend on them), at the INI's batch,
sequence length and task:

  bert predict/fit        BertForSequenceClassification, 1/8 of each row padded; fit: AdamW
  gemma, mistral predict  *ForCausalLM logits of every position
  gemma, mistral fit      LoRA (peft) on [model] lora_targets at lora_rank; AdamW
  gemma, mistral generate greedy model.generate to max_length from prompt_len tokens
  stable_diffusion predict one denoising step: the UNet on the unconditional and the
                          conditional batch as one call of 2B, guidance, DDIM's update
  autoencoder_kl fit      the VAE encoder (to the moments) against a random target; Adam
  sam predict/fit         SamModel with two point prompts, 3 masks; fit: the vision encoder

The presets' configs are written out below, as trident's models/*/ state them; a config
this script does not know is refused. Threads: [run] threads of the INI, else all cores
(as trident). Prints one JSON line. Needs torch, transformers, diffusers and peft; the
build and the tests never run it (tests/peer/compare_cpu.sh does, beside trident).
"""
import argparse
import configparser
import json
import os
import sys
import time

BERT = {
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 max_position_embeddings=128),
    "small": dict(vocab_size=28996, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=1024, max_position_embeddings=512),
    "base": dict(vocab_size=28996, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
}
GEMMA_COMMON = dict(rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
                    hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh")
GEMMA = {
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=32, max_position_embeddings=128),
    "small": dict(vocab_size=16384, hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64, max_position_embeddings=1024),
}
MISTRAL_COMMON = dict(rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, hidden_act="silu")
MISTRAL = {
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=128, sliding_window=6),
    "small": dict(vocab_size=32000, hidden_size=256, intermediate_size=896, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024, sliding_window=64),
}
# stable_diffusion's presets: (unet, text width, latent side); the text encoder runs outside the step.
UNET = {
    "tiny": dict(sample_size=8, layers_per_block=1, attention_head_dim=2, cross_attention_dim=64, norm_num_groups=4,
                 block_out_channels=(16, 32), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D")),
    "small": dict(sample_size=32, layers_per_block=1, attention_head_dim=4, cross_attention_dim=256,
                  norm_num_groups=16, block_out_channels=(64, 128, 256),
                  down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                  up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")),
}
VAE = {
    "tiny": dict(layers_per_block=1, norm_num_groups=4, sample_size=16, block_out_channels=(16, 32)),
    "small": dict(layers_per_block=1, norm_num_groups=16, sample_size=64, block_out_channels=(32, 64, 128)),
}
SAM = {
    "small": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, mlp_dim=1024, image_size=512,
                  patch_size=16, window_size=7, global_attn_indexes=[2, 5], output_channels=256,
                  layer_norm_eps=1e-6, qkv_bias=True),
}


def ini(path, who="torch_cpu.py"):
    """The INI, with [run] model and task; its dtype checked as the peers take it (f32, or
    bf16 for predict and generate: a bf16 fit's master weights differ). Shared with
    keras_cpu.py, as the timing below."""
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    if not cp.read(path):
        sys.exit(f"{who}: {path}: cannot read it")
    if not cp.has_section("run") or "model" not in cp["run"] or "task" not in cp["run"]:
        sys.exit(f"{who}: {path}: no [run] model and task")
    run = cp["run"]
    if run.get("device", "cpu") != "cpu" or run.get("dtype", "f32") not in ("f32", "bf16"):
        sys.exit(f"{who}: only device = cpu, dtype f32 or bf16, are written here")
    if run.get("dtype", "f32") == "bf16" and run["task"] not in ("predict", "generate"):
        sys.exit(f"{who}: bf16 is written for predict and generate (a bf16 fit's master weights differ)")
    return cp


def emit(row, path):
    """The row as one JSON line, and into path where given."""
    print(json.dumps(row))
    if path:
        with open(path, "w") as f:
            json.dump(row, f, indent=1)


def measure(step, warmup, steps, check_first=None):
    """As trident counts: the first call on its own (check_first sees its output), warmup - 1
    more left out, then steps timed calls. Returns the row's timing fields."""
    t0 = time.perf_counter()
    y = step()
    first = (time.perf_counter() - t0) * 1e3
    if check_first:
        check_first(y)
    for _ in range(warmup - 1):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return dict(steps=steps, first_step_ms=round(first, 2), mean_ms=round(sum(times) / len(times), 3),
                median_ms=round(times[len(times) // 2], 3))


def preset(table, name, model):
    if name not in table:
        sys.exit(f"torch_cpu.py: {model} preset '{name}' is not written here (known: {', '.join(table)})")
    return table[name]


FUSED = {}  # {"fused": True} in --mode fused: every fit's Adam/AdamW as one kernel per step


def build(cp, torch):
    """The step function of the INI's work (one call: one step as trident counts it)."""
    run = cp["run"]
    model, task, name = run["model"], run["task"], run.get("preset", "tiny")
    batch = run.getint("batch")
    seq = run.getint("seq_len", 128)
    train = cp["train"] if cp.has_section("train") else {}
    torch.manual_seed(run.getint("seed", 1234))

    if model == "bert":
        import transformers as tf
        cfg = tf.BertConfig(**preset(BERT, name, model), type_vocab_size=2, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, num_labels=2)
        m = tf.BertForSequenceClassification(cfg)
        ids = torch.randint(1, cfg.vocab_size, (batch, seq))
        mask = torch.ones_like(ids)
        mask[:, seq - seq // 8:] = 0
        labels = ids[:, 0] % 2
        if task == "predict":
            m.eval()
            return lambda: m(input_ids=ids, attention_mask=mask).logits
        m.train()
        opt = torch.optim.AdamW(m.parameters(), **FUSED, lr=float(train.get("learning_rate", 1e-4)),
                                weight_decay=float(train.get("weight_decay", 0.01)))

        def fit():
            m(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return fit

    if model in ("gemma", "mistral"):
        import transformers as tf
        if model == "gemma":
            cfg = tf.GemmaConfig(**preset(GEMMA, name, model), **GEMMA_COMMON)
            m = tf.GemmaForCausalLM(cfg)
        else:
            cfg = tf.MistralConfig(**preset(MISTRAL, name, model), **MISTRAL_COMMON)
            m = tf.MistralForCausalLM(cfg)
        if task == "generate":
            g = cp["generate"]
            plen, maxlen = int(g.get("prompt_len", 5)), int(g.get("max_length", 50))
            ids = torch.randint(1, cfg.vocab_size, (batch, plen))
            m.eval()
            return lambda: m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_length=maxlen,
                                      min_length=maxlen, do_sample=False, pad_token_id=0)
        ids = torch.randint(1, cfg.vocab_size, (batch, seq))
        mask = torch.ones_like(ids)
        mask[:, :seq // 8] = 0  # trident left-pads 1/8 of each row
        if task == "predict":
            m.eval()
            return lambda: m(input_ids=ids, attention_mask=mask).logits
        import peft
        mcfg = cp["model"] if cp.has_section("model") else {}
        rank = int(mcfg.get("lora_rank", 4))
        targets = [t.strip() for t in mcfg.get("lora_targets", "q_proj,v_proj").split(",")]
        m = peft.get_peft_model(m, peft.LoraConfig(r=rank, lora_alpha=rank, target_modules=targets,
                                                   lora_dropout=0.0))
        m.train()
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], **FUSED,
                                lr=float(train.get("learning_rate", 1e-2)),
                                weight_decay=float(train.get("weight_decay", 0.004)), eps=float(train.get("eps", 1e-7)))
        labels = ids.masked_fill(mask == 0, -100)

        def fit():
            m(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return fit

    if model == "stable_diffusion" and task == "predict":
        from diffusers import DDIMScheduler, UNet2DConditionModel
        c = preset(UNET, name, model)
        u = UNet2DConditionModel(in_channels=4, out_channels=4, **c).eval()
        sch = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                            set_alpha_to_one=False, steps_offset=1)
        sch.set_timesteps(50)
        s = c["sample_size"]
        lat = torch.randn(batch, 4, s, s)
        text = torch.randn(2 * batch, seq, c["cross_attention_dim"])
        t = sch.timesteps[10]

        def step():
            e = u(torch.cat([lat, lat]), t, encoder_hidden_states=text).sample
            eu, ec = e.chunk(2)
            return sch.step(eu + 7.5 * (ec - eu), t, lat).prev_sample
        return step

    if model == "autoencoder_kl" and task == "fit":
        from diffusers import AutoencoderKL
        c = dict(preset(VAE, name, model))
        nb = len(c["block_out_channels"])
        vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, down_block_types=["DownEncoderBlock2D"] * nb,
                            up_block_types=["UpDecoderBlock2D"] * nb, **c)
        enc, quant = vae.encoder.train(), vae.quant_conv.train()
        params = list(enc.parameters()) + list(quant.parameters())
        opt = torch.optim.Adam(params, **FUSED, lr=float(train.get("learning_rate", 1e-3)), eps=1e-7)
        s, down = c["sample_size"], 2 ** (nb - 1)
        x = torch.randn(batch, 3, s, s)
        target = torch.randn(batch, 8, s // down, s // down)

        def fit():
            ((quant(enc(x)) - target) ** 2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return fit

    if model == "sam":
        import transformers as tf
        v = preset(SAM, name, model)
        cfg = tf.SamConfig(vision_config=v, prompt_encoder_config=dict(hidden_size=256, image_size=v["image_size"],
                                                                       patch_size=v["patch_size"],
                                                                       mask_input_channels=16))
        m = tf.SamModel(cfg)
        side = v["image_size"]
        px = torch.randn(batch, 3, side, side)
        if task == "predict":
            m.eval()
            k = side / 1024  # the benchmark's points, of a 1024 image, scaled as trident scales them
            pts = torch.tensor([[[[500 * k, 375 * k], [250 * k, 375 * k]]]]).repeat(batch, 1, 1, 1)
            lab = torch.tensor([[[1, 2]]]).repeat(batch, 1, 1)
            return lambda: m(pixel_values=px, input_points=pts, input_labels=lab, multimask_output=True).pred_masks
        enc = m.vision_encoder.train()
        opt = torch.optim.Adam(enc.parameters(), **FUSED, lr=float(train.get("learning_rate", 1e-3)), eps=1e-7)
        grid = side // v["patch_size"]
        target = torch.randn(batch, 256, grid, grid)

        def fit():
            ((enc(px).last_hidden_state - target) ** 2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return fit

    sys.exit(f"torch_cpu.py: model '{model}' with task '{task}' is not written here")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ini")
    ap.add_argument("--mode", choices=["eager", "fused", "compile"], default="eager")
    ap.add_argument("--threads", type=int, default=0, help="default: [run] threads, else every core")
    ap.add_argument("--steps", type=int, default=0, help="default: the INI's steps")
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    cp = ini(a.ini)
    run = cp["run"]
    dtype = run.get("dtype", "f32")
    if dtype == "bf16":
        torch.set_default_dtype(torch.bfloat16)  # the models' weights and the float inputs
    threads = a.threads or run.getint("threads", 0) or os.cpu_count()
    torch.set_num_threads(threads)
    steps = a.steps or run.getint("steps", 20)
    warmup = max(run.getint("warmup", 2), 1)
    if a.mode == "fused":
        if run["task"] != "fit":
            sys.exit(f"torch_cpu.py: --mode fused is for fit (a fused optimizer); '{a.ini}' is task {run['task']}")
        FUSED["fused"] = True
    step = build(cp, torch)
    if a.mode == "compile":
        step = torch.compile(step)
    def check_first(y):
        if dtype == "bf16" and torch.is_tensor(y) and y.is_floating_point() and y.dtype != torch.bfloat16:
            sys.exit(f"torch_cpu.py: the bf16 step's output is {y.dtype}")
    with torch.inference_mode(run["task"] in ("predict", "generate")):
        timing = measure(step, warmup, steps, check_first)
    row = dict(config=a.ini, backend="pytorch" + ("" if a.mode == "eager" else ":" + a.mode), torch=torch.__version__,
               dtype=dtype, threads=threads, **timing)
    emit(row, a.json)


if __name__ == "__main__":
    main()
