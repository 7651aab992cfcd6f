#!/usr/bin/env python3
"""tests/gpu/run.sh's BERT table: trident's rows (bert_predict.json, bert_fit.json, from
`trident run --json`) beside PyTorch's (torch_<task>_<mode>.json, from torch_bert.py),
each with its FLOP floor (the graph's FLOPs over the measured GEMM ceiling of its math
mode, from ceilings.json) and its ratio to PyTorch eager. Writes OUT/bert.json and prints
the table. Exit 1 when a trident report is missing or a trident row failed.

  summarize.py OUT_DIR
"""
import json
import os
import sys

CEILING_KEY = {"bf16": "gemm_bf16_8192_tflops", "tf32": "gemm_tf32_8192_tflops", "f32": "gemm_f32_8192_tflops"}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1]
    ceil = load(os.path.join(out, "ceilings.json")) or {}
    rows, ok = [], True
    for task in ("predict", "fit"):
        rep = load(os.path.join(out, f"bert_{task}.json"))
        if rep is None:
            print(f"bert {task}: no trident report (see bert_{task}.log)")
            ok = False
            continue
        math = rep.get("math", rep.get("dtype", "f32"))
        tflops = ceil.get(CEILING_KEY.get(math, ""), 0)
        floor_ms = rep["flops_per_step"] / (tflops * 1e12) * 1e3 if tflops else None
        base = load(os.path.join(out, f"torch_{task}_eager.json"))
        base_ms = base["mean_ms"] if base and base.get("ok") else None
        for b in rep["backends"]:
            r = {"task": task, "backend": b["backend"], "math": b.get("math", math), "batch": rep["batch"],
                 "seq_len": rep["seq_len"], "ok": b["ok"]}
            if not b["ok"]:
                r["error"] = b.get("error", "")
                ok = False
            else:
                r.update(mean_ms=b["mean_ms"], first_step_ms=b["first_step_ms"], peak_bytes=b["peak_bytes"],
                         agrees=b["agrees"])
                if floor_ms:
                    r["floor_ms"] = floor_ms
                    r["floor_fraction"] = floor_ms / b["mean_ms"]
                if base_ms:
                    r["vs_pytorch_eager"] = b["mean_ms"] / base_ms
            rows.append(r)
        for mode in ("eager", "reduce-overhead"):
            t = load(os.path.join(out, f"torch_{task}_{mode}.json"))
            if t is None:
                continue
            r = {"task": task, "backend": t["backend"], "math": t["math"], "batch": t["batch"], "seq_len": t["seq_len"],
                 "ok": t.get("ok", False)}
            if r["ok"]:
                r.update(mean_ms=t["mean_ms"], first_step_ms=t["first_step_ms"], peak_bytes=t["peak_bytes"])
                if floor_ms:
                    r["floor_ms"] = floor_ms
                    r["floor_fraction"] = floor_ms / t["mean_ms"]
                if base_ms:
                    r["vs_pytorch_eager"] = t["mean_ms"] / base_ms
            else:
                r["error"] = t.get("error", "")
            rows.append(r)
    with open(os.path.join(out, "bert.json"), "w") as f:
        json.dump({"device": ceil.get("device", "?"), "rows": rows}, f, indent=1)
    print(f"\nBERT base, sequence 512, on {ceil.get('device', '?')} (floor: FLOPs / measured GEMM ceiling of the math mode)")
    print(f"{'task':8} {'backend':26} {'math':5} {'batch':>5} {'mean ms':>9} {'first ms':>9} {'peak GiB':>8} "
          f"{'floor ms':>8} {'of floor':>8} {'vs PyTorch':>10}")
    for r in rows:
        if not r["ok"]:
            print(f"{r['task']:8} {r['backend']:26} {r['math']:5} {r['batch']:>5}  FAILED: {r.get('error', '')[:80]}")
            continue
        fl = f"{r['floor_ms']:8.1f}" if "floor_ms" in r else f"{'?':>8}"
        ff = f"{100 * r['floor_fraction']:7.1f}%" if "floor_fraction" in r else f"{'?':>8}"
        vs = f"{r['vs_pytorch_eager']:9.2f}x" if "vs_pytorch_eager" in r else f"{'?':>10}"
        print(f"{r['task']:8} {r['backend']:26} {r['math']:5} {r['batch']:>5} {r['mean_ms']:9.2f} "
              f"{r['first_step_ms']:9.1f} {r['peak_bytes'] / 2**30:8.2f} {fl} {ff} {vs}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
