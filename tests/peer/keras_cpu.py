#!/usr/bin/env python3
"""Keras 3 (keras_hub's models) on the CPU, on the work of one of trident's conf/cpu configs:
the Keras rows of the Keras 3 benchmark (Keras on JAX, PyTorch or TensorFlow), measured as
trident and tests/peer/torch_cpu.py measure (ms/step over `steps` steps after `warmup` left
out; the first step, which compiles, on its own).

    keras_cpu.py conf/cpu/bert_predict.ini [--backend jax|torch|tensorflow] [--threads N] [--steps N] [--json OUT]

The model is keras_hub's class for trident's model, built from arguments (random weights,
nothing downloaded) at the sizes of the preset the INI names, as torch_cpu.py's tables state
them (imported from it, so the two peers cannot drift), at the INI's batch, sequence length
and task. Each step is one call of Keras' own per-batch API, which runs the function that
fit/predict compile (jit_compile "auto", Keras' default: XLA on JAX, eager on PyTorch):

  bert predict/fit        BertBackbone + BertTextClassifier (Dense head on the pooled output),
                          1/8 of each row padded; predict_on_batch, train_on_batch with AdamW
  gemma, mistral predict  GemmaCausalLM / MistralCausalLM predict_on_batch: logits of every
                          position, 1/8 of each row left-padded
  gemma, mistral fit      backbone.enable_lora(lora_rank) on [model] lora_targets; causal LM
                          cross-entropy, train_on_batch with AdamW
  gemma, mistral generate generate() with preprocessor=None, greedy sampler, token_ids and
                          padding_mask of max_length holding prompt_len tokens, no stop token
  sam predict             SAMImageSegmenter (ViTDetBackbone, SAMPromptEncoder, SAMMaskDecoder),
                          two point prompts, 3 masks
  sam fit                 the ViTDetBackbone image encoder against a random target; Adam
  stable_diffusion, autoencoder_kl  refused: keras_hub has Stable Diffusion 3 (an MMDiT and a
                          16-channel VAE), not the SD 1.x UNet and VAE trident runs

The JSON line's "params" (and "params_before_lora") equal transformers' counts for every
preset here. Where keras_hub's model differs: Keras' LoRA on an EinsumDense factors the
kernel as A (every kernel axis but the last, r) times B (r, head_dim), not peft's A (r, d)
times B (heads*head_dim, r), so "trainable" exceeds peft's (small: Gemma 22528 vs 13312,
Mistral 41984 vs 13312); generate prefills all of max_length (the padding too) into a
static cache and decodes in a compiled loop; SAM's prompt encoder adds no padding point to
points without a box (transformers adds one), reads label 2 as foreground, and its decoder
returns all 4 masks (transformers drops the first). dtype f32, or bf16 for
predict and generate (Keras' "bfloat16" dtype policy: weights and compute). Threads: [run]
threads of the INI, else all cores; on JAX, whose XLA pool takes every core it may run on,
fewer threads than cores pin the process to that many cores. Prints one JSON line;
exit status 3: no Keras model is written for the INI's model and task.

Needs keras (3.x), keras-hub and the backend's package (jax; torch; tensorflow). keras-hub's
pip metadata asks for tensorflow-text (and so tensorflow), but keras_hub imports both only
if present; with preprocessor=None they are never used, and JAX and PyTorch run without them
(`pip install --no-deps keras-hub` after its other requirements). The build and the tests
never run this script (tests/peer/compare_cpu.py --keras does, beside trident).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_cpu as presets  # noqa: E402  the preset tables; it imports nothing heavy at load


def fail(msg, code=1):
    print(f"keras_cpu.py: {msg}", file=sys.stderr)
    sys.exit(code)


NO_PEER = 3  # the exit status of a config with no Keras model written for it (compare_cpu.py shows n/a)


def preset(table, name, model):
    if name not in table:
        fail(f"{model} preset '{name}' is not written in torch_cpu.py (known: {', '.join(table)})")
    return table[name]


# trident's (and peft's) LoRA target names -> the names of keras_hub's Gemma and Mistral
# attention EinsumDense layers
LORA_NAMES = dict(q_proj="query", k_proj="key", v_proj="value", o_proj="attention_output")


def adamw(keras, train, lr, wd, eps):
    return keras.optimizers.AdamW(learning_rate=float(train.get("learning_rate", lr)),
                                  weight_decay=float(train.get("weight_decay", wd)),
                                  epsilon=float(train.get("eps", eps)))


def build(cp, keras, kh, np):
    """(model, step, info): step is one call, one step as trident counts it."""
    run = cp["run"]
    model, task, name = run["model"], run["task"], run.get("preset", "tiny")
    batch = run.getint("batch")
    seq = run.getint("seq_len", 128)
    train = cp["train"] if cp.has_section("train") else {}
    rng = np.random.default_rng(run.getint("seed", 1234))
    info = {}

    if model == "bert":
        c = preset(presets.BERT, name, model)
        bb = kh.models.BertBackbone(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
                                    num_heads=c["num_attention_heads"], hidden_dim=c["hidden_size"],
                                    intermediate_dim=c["intermediate_size"], dropout=0.0,
                                    max_sequence_length=c["max_position_embeddings"], num_segments=2)
        m = kh.models.BertTextClassifier(bb, num_classes=2, preprocessor=None, dropout=0.0)
        ids = rng.integers(1, c["vocab_size"], (batch, seq)).astype("int32")
        mask = np.ones_like(ids, dtype=bool)
        mask[:, seq - seq // 8:] = False
        x = dict(token_ids=ids, segment_ids=np.zeros_like(ids), padding_mask=mask)
        if task == "predict":
            return m, lambda: m.predict_on_batch(x), info
        labels = ids[:, 0] % 2
        # torch_cpu.py's AdamW: torch's defaults (eps 1e-8) unless the INI says
        m.compile(optimizer=adamw(keras, train, 1e-4, 0.01, 1e-8),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=None)
        return m, lambda: m.train_on_batch(x, labels), info

    if model in ("gemma", "mistral"):
        if model == "gemma":
            c = dict(preset(presets.GEMMA, name, model), **presets.GEMMA_COMMON)
            bb = kh.models.GemmaBackbone(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
                                         num_query_heads=c["num_attention_heads"],
                                         num_key_value_heads=c["num_key_value_heads"], hidden_dim=c["hidden_size"],
                                         intermediate_dim=2 * c["intermediate_size"],  # keras_hub halves it
                                         head_dim=c["head_dim"], layer_norm_epsilon=c["rms_norm_eps"], dropout=0)
            m = kh.models.GemmaCausalLM(bb, preprocessor=None)
        else:
            c = dict(preset(presets.MISTRAL, name, model), **presets.MISTRAL_COMMON)
            bb = kh.models.MistralBackbone(vocabulary_size=c["vocab_size"], num_layers=c["num_hidden_layers"],
                                           num_query_heads=c["num_attention_heads"],
                                           num_key_value_heads=c["num_key_value_heads"], hidden_dim=c["hidden_size"],
                                           intermediate_dim=c["intermediate_size"],
                                           rope_max_wavelength=c["rope_theta"], layer_norm_epsilon=c["rms_norm_eps"],
                                           sliding_window=c["sliding_window"], dropout=0)
            m = kh.models.MistralCausalLM(bb, preprocessor=None)
        if task == "generate":
            g = cp["generate"]
            plen, maxlen = int(g.get("prompt_len", 5)), int(g.get("max_length", 50))
            if g.get("sampling", "greedy").strip() != "greedy":
                fail("generate is written for sampling = greedy")
            ids = np.zeros((batch, maxlen), "int32")
            ids[:, :plen] = rng.integers(1, c["vocab_size"], (batch, plen))
            mask = np.zeros((batch, maxlen), bool)
            mask[:, :plen] = True
            m.compile(sampler="greedy")
            return m, lambda: m.generate(dict(token_ids=ids, padding_mask=mask), stop_token_ids=None), info
        ids = rng.integers(1, c["vocab_size"], (batch, seq)).astype("int32")
        mask = np.ones_like(ids, dtype=bool)
        mask[:, :seq // 8] = False  # trident left-pads 1/8 of each row
        x = dict(token_ids=ids, padding_mask=mask)
        if task == "predict":
            return m, lambda: m.predict_on_batch(x), info
        mcfg = cp["model"] if cp.has_section("model") else {}
        rank = int(mcfg.get("lora_rank", 4))
        targets = [t.strip() for t in mcfg.get("lora_targets", "q_proj,v_proj").split(",")]
        if any(t not in LORA_NAMES for t in targets):
            fail(f"lora_targets {targets}: known here {', '.join(LORA_NAMES)}")
        info["params_before_lora"] = int(m.count_params())
        bb.enable_lora(rank, target_layer_names=[LORA_NAMES[t] for t in targets])
        if not m.trainable_weights:
            fail(f"enable_lora found none of {targets} in keras_hub's {model}")
        # the next token's cross-entropy at every position but the last, padding left out
        # (what transformers' labels with -100 on the padding compute)
        y = np.zeros_like(ids)
        y[:, :-1] = ids[:, 1:]
        w = np.zeros(ids.shape, "float32")
        w[:, :-1] = mask[:, 1:]
        m.compile(optimizer=adamw(keras, train, 1e-2, 0.004, 1e-7),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), weighted_metrics=[])
        return m, lambda: m.train_on_batch(x, y, sample_weight=w), info

    if model == "sam":
        from keras_hub.src.models.sam.sam_mask_decoder import SAMMaskDecoder
        from keras_hub.src.models.sam.sam_prompt_encoder import SAMPromptEncoder

        class Segmenter(kh.models.SAMImageSegmenter):
            """SAMImageSegmenter whose predict_step takes the whole input (its own fills in the
            prompts left out of a dict, and predict_on_batch hands it the dict in a tuple;
            predict() instead needs grain or tensorflow to batch a dict)."""

            def predict_step(self, *args, **kwargs):
                return kh.models.ImageSegmenter.predict_step(self, *args, **kwargs)
        v = preset(presets.SAM, name, model)
        side, grid = v["image_size"], v["image_size"] // v["patch_size"]
        enc = kh.models.ViTDetBackbone(hidden_size=v["hidden_size"], num_layers=v["num_hidden_layers"],
                                       intermediate_dim=v["mlp_dim"], num_heads=v["num_attention_heads"],
                                       global_attention_layer_indices=v["global_attn_indexes"],
                                       image_shape=(side, side, 3), patch_size=v["patch_size"],
                                       num_output_channels=v["output_channels"], use_bias=v["qkv_bias"],
                                       window_size=v["window_size"], layer_norm_epsilon=v["layer_norm_eps"])
        px = rng.standard_normal((batch, side, side, 3), dtype="float32")
        if task == "fit":
            enc.compile(optimizer=keras.optimizers.Adam(learning_rate=float(train.get("learning_rate", 1e-3)),
                                                        epsilon=1e-7), loss="mse")
            target = rng.standard_normal((batch, grid, grid, 256), dtype="float32")
            return enc, lambda: enc.train_on_batch(px, target), info
        # transformers' SamPromptEncoderConfig and SamMaskDecoderConfig defaults
        pe = SAMPromptEncoder(hidden_size=256, image_embedding_size=(grid, grid), input_image_size=(side, side),
                              mask_in_channels=16)
        md = SAMMaskDecoder(hidden_size=256, num_layers=2, intermediate_dim=2048, num_heads=8, embedding_dim=256,
                            num_multimask_outputs=3, iou_head_depth=3, iou_head_hidden_dim=256)
        m = Segmenter(kh.models.SAMBackbone(image_encoder=enc, prompt_encoder=pe, mask_decoder=md), preprocessor=None)
        k = side / 1024  # the benchmark's points, of a 1024 image, scaled as trident scales them
        # no box and no mask prompt: empty placeholders, as SAMImageSegmenter's predict_step adds
        x = dict(images=px, points=np.tile(np.array([[[500 * k, 375 * k], [250 * k, 375 * k]]], "float32"), (batch, 1, 1)),
                 labels=np.tile(np.array([[1, 2]], "float32"), (batch, 1)), boxes=np.zeros((batch, 0, 2, 2), "float32"),
                 masks=np.zeros((batch, 0, 4 * grid, 4 * grid, 1), "float32"))
        return m, lambda: m.predict_on_batch(x), info

    if model in ("stable_diffusion", "autoencoder_kl"):
        fail(f"{model}: keras_hub has Stable Diffusion 3 (an MMDiT and its 16-channel VAE), not the SD 1.x "
             "UNet and AutoencoderKL that trident and torch_cpu.py run; no Keras peer is written for it", NO_PEER)
    fail(f"model '{model}' with task '{task}' is not written here", NO_PEER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ini")
    ap.add_argument("--backend", choices=["jax", "torch", "tensorflow"], default="jax")
    ap.add_argument("--threads", type=int, default=0, help="default: [run] threads, else every core")
    ap.add_argument("--steps", type=int, default=0, help="default: the INI's steps")
    ap.add_argument("--json")
    a = ap.parse_args()
    cp = presets.ini(a.ini, "keras_cpu.py")
    run = cp["run"]
    dtype = run.get("dtype", "f32")
    ncpu = os.cpu_count()
    threads = a.threads or run.getint("threads", 0) or ncpu

    # before keras, and the backend under it, are imported
    os.environ["KERAS_BACKEND"] = a.backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if a.backend == "jax":
        os.environ["JAX_PLATFORMS"] = "cpu"
        if threads < ncpu:
            os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    try:
        import keras
        import keras_hub as kh
        import numpy as np
        if a.backend == "tensorflow":
            import tensorflow as bk
        else:
            bk = __import__(a.backend)
    except ImportError as e:
        fail(f"--backend {a.backend}: {e} (pip install keras keras-hub {a.backend})")
    if a.backend == "torch":
        bk.set_num_threads(threads)
    elif a.backend == "tensorflow":
        bk.config.threading.set_intra_op_parallelism_threads(threads)
        bk.config.threading.set_inter_op_parallelism_threads(1)
    keras.utils.set_random_seed(run.getint("seed", 1234))
    if dtype == "bf16":
        keras.config.set_dtype_policy("bfloat16")  # the models' weights and compute

    steps = a.steps or run.getint("steps", 20)
    warmup = max(run.getint("warmup", 2), 1)
    m, step, info = build(cp, keras, kh, np)
    def check_first(y):  # numpy out of Keras' per-batch calls: the step has finished
        if dtype == "bf16" and hasattr(y, "dtype") and y.dtype.kind == "f" and y.dtype.itemsize != 2:
            fail(f"the bf16 step's output is {y.dtype}")
    timing = presets.measure(step, warmup, steps, check_first)
    trainable = sum(int(np.prod(w.shape)) for w in m.trainable_weights)
    row = dict(config=a.ini, backend=f"keras:{a.backend}", keras=keras.__version__, keras_hub=kh.__version__,
               **{a.backend: bk.__version__}, jit_compile=bool(getattr(m, "jit_compile", False)), dtype=dtype,
               threads=threads, **timing, params=int(m.count_params()), trainable=trainable, **info)
    presets.emit(row, a.json)


if __name__ == "__main__":
    main()
