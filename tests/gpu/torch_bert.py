#!/usr/bin/env python3
"""The PyTorch side of tests/gpu/run.sh: BERT base predict and fit through the torch and
transformers installed on the GPU machine, measured as trident measures (ms/step over
`steps` steps after `warmup` left out, CUDA-synchronised), so every trident row gets its
ratio to PyTorch from the same run on the same card.

  torch_bert.py --task predict|fit --batch B --seq S --math f32|tf32|bf16 --mode eager|reduce-overhead
                --steps N --warmup W --json OUT [--preset base|small|tiny] [--device cuda|cpu]

BertForSequenceClassification is built from the config of trident's BERT preset (base:
bert-base-cased's; random weights, num_labels 2, no dropout: trident's BERT has none), the
batch is random token ids; fit is AdamW(lr 5e-5, weight_decay 0.01) on the sparse
cross-entropy, as conf/bert_fit.ini. --device cpu (run.sh's rehearsal on cuemu, where
torch has no GPU) times with the wall clock and reports no peak memory. Writes one JSON
object; exits 2 (with the reason in the JSON) when torch, transformers or the GPU is
missing, so run.sh can say so and go on.
"""
import argparse
import json
import statistics
import sys
import time

# trident's BERT presets (models/bert/bert.c), as transformers' BertConfig arguments
PRESETS = {
    "base": dict(vocab_size=28996, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512),
    "small": dict(vocab_size=28996, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=1024, max_position_embeddings=512),
    "tiny": dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=128, max_position_embeddings=128),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", choices=["predict", "fit"], required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--math", choices=["f32", "tf32", "bf16"], default="f32")
    ap.add_argument("--mode", choices=["eager", "reduce-overhead"], default="eager")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="base")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    row = {"backend": "pytorch" + ("" if a.mode == "eager" else ":reduce-overhead"), "task": a.task,
           "preset": a.preset, "batch": a.batch, "seq_len": a.seq, "math": a.math, "device": a.device}

    def out(code, **kw):
        row.update(kw)
        with open(a.json, "w") as f:
            json.dump(row, f, indent=1)
        print(json.dumps(row))
        sys.exit(code)

    try:
        import torch
        import transformers
    except Exception as e:  # noqa: BLE001 (any import failure is "not installed" here)
        out(2, ok=False, error=f"torch/transformers not importable: {e}")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        out(2, ok=False, error="torch sees no CUDA device")
    row["torch"] = torch.__version__
    row["transformers"] = transformers.__version__
    torch.backends.cuda.matmul.allow_tf32 = a.math == "tf32"
    torch.backends.cudnn.allow_tf32 = a.math == "tf32"
    dtype = torch.bfloat16 if a.math == "bf16" else torch.float32

    cfg = transformers.BertConfig(**PRESETS[a.preset], type_vocab_size=2, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, num_labels=2)
    torch.manual_seed(1234)
    model = transformers.BertForSequenceClassification(cfg).to(a.device, dtype)
    ids = torch.randint(1, cfg.vocab_size, (a.batch, a.seq), device=a.device)
    mask = torch.ones_like(ids)
    labels = ids[:, 0] % 2

    if a.task == "predict":
        model.eval()

        def step():
            with torch.no_grad():
                return model(input_ids=ids, attention_mask=mask).logits
    else:
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)

        def step():
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def timed():  # one step's milliseconds: CUDA events on the GPU, the wall clock on the cpu
        if not cuda:
            t = time.perf_counter()
            step()
            return (time.perf_counter() - t) * 1e3
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1)

    if a.mode == "reduce-overhead":
        step = torch.compile(step, mode="reduce-overhead")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    step()
    sync()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(a.warmup - 1):
        step()
    sync()
    times = sorted(timed() for _ in range(a.steps))
    out(0, ok=True, first_step_ms=first_ms, mean_ms=sum(times) / len(times), median_ms=statistics.median(times),
        peak_bytes=torch.cuda.max_memory_allocated() if cuda else None)


if __name__ == "__main__":
    main()
