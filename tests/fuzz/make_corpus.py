#!/usr/bin/env python3
"""Remake the seed corpora and the known reproducers of tests/fuzz (README.md).

corpus/config       conf/*.ini, conf/cpu/*.ini, and small configs of every model and task
corpus/hf_config    tests/fixtures/hf/*.json, and tiny configs of each model family
corpus/safetensors  bert_mini.safetensors (written by fuzz_safetensors, FUZZ_WRITE_SEED)
                    and variants of it, the fixtures under 64 KiB, bert_tiny's header
corpus/tokenizer    "\0" + texts (encoded by the toy tokenizers), "\1" + each toy
                    tokenizer.json of tests/fixtures/llm_tokenizer (fuzz_tokenizer.c)
corpus/png          tests/fixtures/png_zoo/*.png (every colour type and bit depth, a bomb)
corpus/report       left alone: reports written by `trident run --json` (README.md)
regressions/*       the reproducers of the bugs fuzzing is there to keep fixed; crash
                    inputs found later are added by hand (README.md), never removed

Run from anywhere: python3 tests/fuzz/make_corpus.py
"""
import json
import pathlib
import shutil
import struct

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SMALL = 64 * 1024


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def read_safetensors(path):
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


CONFIGS = {
    "bert_tiny_predict.ini": "[run]\nmodel = bert\npreset = tiny\nbatch = 2\nseq_len = 16\n",
    "bert_tiny_fit_lora.ini": "[run]\nmodel = bert\npreset = tiny\ntask = fit\ndtype = bf16\nbatch = 2\n"
                              "seq_len = 8\n[model]\nlora_rank = 2\nlora_alpha = 4\nlora_targets = query, value, output\n"
                              "[train]\noptimizer = adam\nlearning_rate = 1e-2\neps = 1e-6\nweight_decay = 0.1\n",
    "bert_edits.ini": "[run]\nmodel = bert\npreset = tiny\nbackends = torch:reduce-overhead, jax, ./x.so\nthreads = 2\n"
                      "math = f32\nschedule = sequential\nisolate = off\nbackend_timeout = 30\ntolerance = 1e-4\n"
                      "[model]\nvocab_size = 50\nhidden_size = 8\nnum_attention_heads = 2\nnum_hidden_layers = 1\n"
                      "pad_fraction = 0.25\npad_token_id = 0\n[backend.torch]\nmode = default\n"
                      "[backend.jax]\nxla = on\n[plugins]\npath = .\n",
    "gemma_tiny_generate.ini": "[run]\nmodel = gemma\npreset = tiny\ntask = generate\nbatch = 2\nseq_len = 8\n"
                               "[generate]\nmax_length = 16\n",
    "gemma_tiny_fit.ini": "[run]\nmodel = gemma\npreset = tiny\ntask = fit\nbatch = 2\nseq_len = 8\n"
                          "[model]\nlora_rank = 2\nlora_targets = q_proj,v_proj\n[train]\noptimizer = adamw\n",
    "gemma_hf.ini": "[run]\nmodel = gemma\npreset = tiny\nbatch = 1\nseq_len = 8\n"
                    "[model]\nhf_config = ../../tests/fixtures/hf/gemma-2b.json\nnum_hidden_layers = 1\n",
    "mistral_tiny_generate.ini": "[run]\nmodel = mistral\npreset = tiny\ntask = generate\ndtype = bf16\nbatch = 1\n"
                                 "seq_len = 6\n[model]\nsliding_window = 4\n[generate]\nmax_length = 12\n",
    "mistral_tiny_predict.ini": "[run]\nmodel = mistral\npreset = tiny\nbatch = 2\nseq_len = 8\n"
                                "[model]\nnum_key_value_heads = 4\nrope_theta = 10000\n",
    "sam_tiny_predict.ini": "[run]\nmodel = sam\npreset = tiny\nbatch = 1\n",
    "sam_tiny_fit.ini": "[run]\nmodel = sam\npreset = tiny\ntask = fit\nbatch = 1\n",
    "vae_tiny_predict.ini": "[run]\nmodel = autoencoder_kl\npreset = tiny\nbatch = 1\n",
    "clip_tiny_predict.ini": "[run]\nmodel = clip_text\npreset = tiny\nbatch = 2\nseq_len = 16\n",
    "unet_tiny_predict.ini": "[run]\nmodel = unet_2d_condition\npreset = tiny\nbatch = 1\nseq_len = 16\n",
    "sd_tiny_generate.ini": "[run]\nmodel = stable_diffusion\npreset = tiny\ntask = generate\nbatch = 1\n"
                            "seq_len = 16\n[model]\nnum_inference_steps = 2\n[generate]\n"
                            "image = out.png\n",
}

HF = {
    "gemma_tiny.json": {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "vocab_size": 512,
                        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 32,
                        "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
                        "pad_token_id": 0},
    "mistral_tiny.json": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 512,
                          "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
                          "sliding_window": 6, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                          "hidden_act": "silu", "tie_word_embeddings": False},
}


def main():
    c = HERE / "corpus" / "config"
    for ini in sorted((ROOT / "conf").glob("*.ini")):
        shutil.copy(ini, c / ("conf_" + ini.name))
    for ini in sorted((ROOT / "conf" / "cpu").glob("*.ini")):
        shutil.copy(ini, c / ("cpu_" + ini.name))
    for name, text in CONFIGS.items():
        write(c / name, text)

    h = HERE / "corpus" / "hf_config"
    for js in sorted((ROOT / "tests" / "fixtures" / "hf").glob("*.json")):
        shutil.copy(js, h / js.name)
    for name, obj in HF.items():
        write(h / name, json.dumps(obj, indent=2) + "\n")

    t = HERE / "corpus" / "tokenizer"
    toks = ROOT / "tests" / "fixtures" / "llm_tokenizer"
    for style in sorted(p.name for p in toks.iterdir() if p.is_dir()):
        write(t / f"json_{style}", b"\x01" + (toks / style / "tokenizer.json").read_bytes())
    texts = json.loads((toks / "gemma" / "expected.json").read_text(encoding="utf-8"))["encode"]
    for i, (text, _) in enumerate(texts):
        write(t / f"text_{i:02d}", b"\x00" + text.encode())

    s = HERE / "corpus" / "safetensors"
    for st in sorted((ROOT / "tests" / "fixtures").glob("*.safetensors")):
        if st.stat().st_size < SMALL:
            shutil.copy(st, s / st.name)
    big = (ROOT / "tests" / "fixtures" / "bert_tiny.safetensors").read_bytes()
    write(s / "bert_tiny_head.safetensors", big[:8 + struct.unpack("<Q", big[:8])[0] + 4096])
    mini = s / "bert_mini.safetensors"
    if mini.exists():   # written by the harness (README.md)
        header, data = read_safetensors(mini)
        # without the base prefix ("bert."), as Hugging Face saves a bare BertModel
        bare = {k.split(".", 1)[1] if k.startswith("bert.") else k: v for k, v in header.items()}
        write(s / "bert_mini_bare.safetensors", safetensors(bare, data))
        meta = dict(header, __metadata__={"format": "pt"})
        write(s / "bert_mini_meta.safetensors", safetensors(meta, data))
        # bf16: the high halves of the f32 values
        bf, out, off = {}, b"", 0
        for k, v in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            a, b = v["data_offsets"]
            f = data[a:b]
            half = b"".join(f[i + 2:i + 4] for i in range(0, len(f), 4))
            bf[k] = {"dtype": "BF16", "shape": v["shape"], "data_offsets": [off, off + len(half)]}
            out += half
            off += len(half)
        write(s / "bert_mini_bf16.safetensors", safetensors(bf, out))

    p = HERE / "corpus" / "png"
    p.mkdir(parents=True, exist_ok=True)
    for png in sorted((ROOT / "tests" / "fixtures" / "png_zoo").glob("*.png")):
        shutil.copy(png, p / png.name)

    # The reproducers of issue 18 (fixed before fuzzing came): each must load or fail
    # cleanly, never crash.
    r = HERE / "regressions"
    write(r / "hf_config" / "issue18_vocab_2p30_hidden_2p32.json",
          json.dumps(dict(HF["gemma_tiny.json"], vocab_size=2 ** 30, hidden_size=2 ** 32)) + "\n")
    write(r / "hf_config" / "issue18_mistral_vocab_2p30_hidden_2p32.json",
          json.dumps(dict(HF["mistral_tiny.json"], vocab_size=2 ** 30, hidden_size=2 ** 32)) + "\n")
    write(r / "safetensors" / "issue18_shape_0_2p53_2p53.safetensors",
          safetensors({"t": {"dtype": "F32", "shape": [0, 2 ** 53, 2 ** 53], "data_offsets": [0, 0]}}))
    write(r / "safetensors" / "issue18_overlapping_offsets.safetensors",
          safetensors({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                       "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24)))
    write(r / "safetensors" / "issue18_end_before_start.safetensors",
          safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [16, 8]}}, bytes(16)))
    write(r / "safetensors" / "issue18_gap_and_trailing_bytes.safetensors",
          safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(24)))
    write(r / "hf_config" / "issue18_million_layers.json",
          json.dumps(dict(HF["gemma_tiny.json"], num_hidden_layers=10 ** 6)) + "\n")
    write(r / "hf_config" / "issue18_integer_past_2p53.json",
          json.dumps(dict(HF["mistral_tiny.json"], intermediate_size=9 * 10 ** 15)) + "\n")
    # The INI cases issue 18 listed as silently accepted: each must be refused, not crash.
    write(r / "config" / "issue18_empty.ini", "")
    write(r / "config" / "issue18_section_twice.ini", "[run]\nmodel = bert\n[model]\nhidden_size = 8\n[model]\n"
                                                     "num_hidden_layers = 1\n")
    write(r / "config" / "issue18_unlisted_backend.ini", "[run]\nmodel = bert\nbackends = torch, tf\n"
                                                        "[backend.jax]\nfuse = false\n")
    write(r / "config" / "issue18_batch_2p20.ini", "[run]\nmodel = bert\nbatch = 1048576\n")
    # A report whose strings hold bytes that are not UTF-8 (a Latin-1 path), as trident's
    # writer used to copy them in.
    rep = (HERE / "corpus" / "report" / "bert_tiny_predict.json").read_bytes()
    write(r / "report" / "issue17_latin1_path.json", rep.replace(b'"model":\t"bert"', b'"model":\t"b\xe9rt\xff"', 1))


if __name__ == "__main__":
    main()
