#!/usr/bin/env python3
"""tests/gpu/run.sh's summary, from the files each row wrote in OUT_DIR (stdlib only):

- the steps, each with its planned budget, the seconds it took and its verdict
  (steps.tsv, written by run.sh as each step ends);
- the BERT table: trident's rows (bert_predict.json, bert_fit.json, from `trident run
  --json`) beside PyTorch's (torch_<task>_<mode>.json, from torch_bert.py), each with its
  floor (the roofline sheet's step floor, the sum of every kernel's, from
  roofline_bert_<task>.json; without it the graph's FLOPs over the measured GEMM ceiling
  of its math mode, from ceilings.json) and its ratio to PyTorch eager;
- the roofline sheets (roofline_<config>.json, from `trident roofline --run`): each step's
  floor, design and measured sum, and its costliest kernels, each against its floor;
- the LLM, SD and SAM rows on cuda (cuda_{gemma,mistral}_{generate,fit}.json, cuda_sd_*, cuda_vae_predict,
  cuda_sam_*), each with its preset;
- the rows that are missing, each with why: skipped by the time guard, timed out (its
  JSON, if any, kept as NAME.json.partial), failed, or unreadable.

A file that is missing, partial or not the shape expected is reported, never fatal.
Writes OUT/bert.json and prints the tables. Exit 1 when a trident BERT report is missing
or unreadable or a trident BERT row failed.

  summarize.py OUT_DIR
"""
import json
import os
import sys

CEILING_KEY = {"bf16": "gemm_bf16_tflops", "tf32": "gemm_tf32_tflops", "f32": "gemm_f32_tflops"}
TORCH_MODES = ("eager", "reduce-overhead")
LLM_ROWS = ("cuda_gemma_generate", "cuda_mistral_generate", "cuda_gemma_fit", "cuda_mistral_fit", "cuda_sd_predict",
            "cuda_vae_predict", "cuda_sd_fit", "cuda_sam_predict", "cuda_sam_fit", "cuda_sd_reference")
# every row that writes a JSON file, in run.sh's order
ROOF_ROWS = tuple(f"roofline_{c}" for c in ("bert_fit", "bert_predict", "gemma_fit", "mistral_fit", "gemma_generate",
                                               "mistral_generate"))
JSON_ROWS = (("ceilings", "bert_predict", "bert_fit") + ROOF_ROWS + LLM_ROWS +
             tuple(f"torch_{t}_{m}" for m in TORCH_MODES for t in ("predict", "fit")))


def load(path):
    """(object, None) or (None, why): why is 'missing' or 'unreadable (...)'."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except FileNotFoundError:
        return None, "missing"
    except (OSError, ValueError) as e:
        return None, f"unreadable ({type(e).__name__}: {str(e)[:60]})"
    if not isinstance(obj, dict):
        return None, "unreadable (not a JSON object)"
    return obj, None


def steps_of(out):
    """steps.tsv: name -> (planned s, timeout s, used s, verdict), in the order written."""
    steps = {}
    try:
        with open(os.path.join(out, "steps.tsv")) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if len(p) >= 5:
                    steps[p[0]] = tuple(p[1:5])
    except OSError:
        pass
    return steps


def last_error(out, name):
    """The last line of the row's log (NAME.log; bench.log, roofline.log) that says error, or None."""
    log = "bench" if name == "ceilings" else "roofline" if name.startswith("roofline_") else name
    try:
        with open(os.path.join(out, log + ".log"), errors="replace") as f:
            lines = [ln.strip() for ln in f if "error" in ln.lower()]
    except OSError:
        return None
    return lines[-1][:120] if lines else None


def num(d, k):
    v = d.get(k)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def fmt(v, spec, width):
    return format(v, spec) if v is not None else "?".rjust(width)


def print_table(title, header, rows, label, cells):
    """title and header, then a line per row: label(r) and cells(r), or for a row that
    failed, label(r) and its error."""
    print(title)
    print(header)
    for r in rows:
        if not r["ok"]:
            print(f"{label(r)}  FAILED: {str(r.get('error', ''))[:80]}")
            continue
        print(f"{label(r)} {cells(r)}")


def backends_of(rep):
    b = rep.get("backends")
    return [x for x in b if isinstance(x, dict)] if isinstance(b, list) else []


def main():
    out = sys.argv[1]
    steps = steps_of(out)
    reports, why = {}, {}
    for name in JSON_ROWS:
        reports[name], why[name] = load(os.path.join(out, name + ".json"))
    ceil = reports["ceilings"] or {}
    bert_reps = [reports[f"bert_{t}"] for t in ("predict", "fit") if reports[f"bert_{t}"]]
    # the card: the ceilings' name for it, else the BERT reports' (`gpu`)
    device = ceil.get("device") or next((str(r["gpu"]) for r in bert_reps if r.get("gpu")), "?")
    # what the BERT rows ran (base at sequence 512 on the GPU; tiny in run.sh's rehearsal)
    bert_what = ", ".join(sorted({f"{r.get('preset', '?')}, sequence {r.get('seq_len', '?')}"
                                  for r in bert_reps})) or "?"

    if steps:
        print(f"{'step':30} {'planned s':>9} {'timeout s':>9} {'used s':>6}  result")
        for name, (planned, slot, used, verdict) in steps.items():
            print(f"{name:30} {planned:>9} {slot if slot != '0' else '-':>9} {used:>6}  {verdict}")
        print()

    rows, ok = [], True
    for task in ("predict", "fit"):
        rep = reports[f"bert_{task}"]
        if rep is None:  # said under "missing rows"; PyTorch's rows are still shown
            ok = False
            rep = {}
        math = rep.get("math", rep.get("dtype", "f32"))
        tflops = num(ceil, CEILING_KEY.get(math, "")) or 0
        flops = num(rep, "flops_per_step")
        floor_ms = flops / (tflops * 1e12) * 1e3 if tflops and flops else None
        sheet = reports.get(f"roofline_bert_{task}")
        if sheet and num(sheet, "floor_ms"):  # every kernel's floor, summed
            floor_ms = num(sheet, "floor_ms")
        base = reports[f"torch_{task}_eager"]
        base_ms = num(base, "mean_ms") if base and base.get("ok") else None
        if rep and not backends_of(rep):
            ok = False
            why[f"bert_{task}"] = "unreadable (no backends in it)"
        peers = [reports[f"torch_{task}_{m}"] for m in TORCH_MODES]
        for b, trident in [(b, True) for b in backends_of(rep)] + [(p, False) for p in peers if p is not None]:
            r = {"task": task, "backend": b.get("backend", "?"), "math": b.get("math", math),
                 "batch": b.get("batch", rep.get("batch", "?")), "seq_len": b.get("seq_len", rep.get("seq_len", "?")),
                 "ok": bool(b.get("ok")), "trident": trident}
            if not r["ok"]:
                r["error"] = str(b.get("error", ""))
                if r["trident"]:
                    ok = False
            else:
                for k in ("mean_ms", "first_step_ms", "peak_bytes", "agrees"):
                    if k in b:
                        r[k] = b[k]
                ms = num(b, "mean_ms")
                if floor_ms and ms:
                    r["floor_ms"] = floor_ms
                    r["floor_fraction"] = floor_ms / ms
                if base_ms and ms:
                    r["vs_pytorch_eager"] = ms / base_ms
            rows.append(r)

    llm = []
    for name in LLM_ROWS:
        rep = reports[name]
        for b in backends_of(rep) if rep else []:
            r = {"row": name, "preset": str(rep.get("preset", "?")).split(" ")[0], "backend": b.get("backend", "?"),
                 "ok": bool(b.get("ok"))}
            for k in ("mean_ms", "first_step_ms", "ms_per_token", "tokens_per_s", "tokens_agree", "loss_first",
                      "loss_last", "agrees", "error"):
                if k in b:
                    r[k] = b[k]
            ref = b.get("against_reference")
            if ref:  # cuda_sd_reference: held to diffusers' float64 pictures
                d = num(ref, "max_rel_diff")
                r["reference"] = f"{'within' if ref.get('agrees') else 'BEYOND'} the tolerance of diffusers' " \
                                 f"({fmt(d, '.1e', 1)})"
            llm.append(r)

    missing = {}
    for name in JSON_ROWS:
        if reports[name] is not None and why[name] is None:
            continue
        reason = why[name]
        # a roofline sheet's verdict is its step's (roofline.sh makes all six)
        verdict = steps.get("roofline" if name.startswith("roofline_") else name, (None,) * 4)[3]
        if verdict:
            reason = f"{verdict}; JSON {reason}"
        if os.path.exists(os.path.join(out, name + ".json.partial")):
            reason += f" (what it wrote is kept as {name}.json.partial)"
        elif verdict and verdict.startswith("FAIL") and last_error(out, name):
            reason += f": {last_error(out, name)}"
        missing[name] = reason

    try:
        with open(os.path.join(out, "bert.json"), "w") as f:
            json.dump({"device": device, "rows": rows, "llm_rows": llm, "missing": missing}, f, indent=1)
    except OSError as e:
        print(f"could not write bert.json: {e}")

    def bert_cells(r):
        peak = num(r, "peak_bytes")
        ff = 100 * r["floor_fraction"] if "floor_fraction" in r else None
        return (f"{fmt(num(r, 'mean_ms'), '9.2f', 9)} "
                f"{fmt(num(r, 'first_step_ms'), '9.1f', 9)} {fmt(peak / 2**30 if peak else None, '8.2f', 8)} "
                f"{fmt(r.get('floor_ms'), '8.1f', 8)} {fmt(ff, '7.1f', 7)}{'%' if ff is not None else ' '} "
                f"{fmt(r.get('vs_pytorch_eager'), '9.2f', 9)}{'x' if 'vs_pytorch_eager' in r else ' '}")

    print_table(f"BERT {bert_what}, on {device} (floor: the roofline sheet's step floor, every kernel's summed; "
                "else FLOPs / measured GEMM ceiling)",
                f"{'task':8} {'backend':26} {'math':5} {'batch':>5} {'mean ms':>9} {'first ms':>9} {'peak GiB':>8} "
                f"{'floor ms':>8} {'of floor':>8} {'vs PyTorch':>10}",
                rows, lambda r: f"{r['task']:8} {r['backend']:26} {r['math']:5} {r['batch']:>5}", bert_cells)

    def llm_cells(r):
        agree = r.get("agrees")
        if "tokens_agree" in r:
            agree = f"{agree}, tokens {r['tokens_agree']}"
        if "reference" in r:
            agree = f"{agree}, {r['reference']}"
        return (f"{fmt(num(r, 'mean_ms'), '9.2f', 9)} "
                f"{fmt(num(r, 'first_step_ms'), '9.1f', 9)} {fmt(num(r, 'ms_per_token'), '8.3f', 8)} "
                f"{fmt(num(r, 'tokens_per_s'), '8.0f', 8)} {fmt(num(r, 'loss_first'), '8.4f', 8)} "
                f"{fmt(num(r, 'loss_last'), '9.4f', 9)} {agree}")

    print_table("\nGemma, Mistral, Stable Diffusion and SAM on cuda (generate: a step is one whole generate call)",
                f"{'row':22} {'preset':6} {'backend':22} {'mean ms':>9} {'first ms':>9} {'ms/token':>8} {'tok/s':>8} "
                f"{'loss 1st':>8} {'loss last':>9} agrees",
                llm, lambda r: f"{r['row']:22} {r['preset']:6} {r['backend']:22}", llm_cells)

    if "conv_nshw" in ceil:  # SD's UNet 3x3 on each of cuda/conv.c's paths (bench_cuda.c)
        print(f"\nconv2d 3x3 {'x'.join(str(v) for v in ceil['conv_nshw'])} (TFLOP/s): auto took "
              f"{ceil.get('conv_auto_path', '?')}")
        for m in ("bf16", "tf32"):
            a, i = num(ceil, f"conv_{m}_auto_tflops"), num(ceil, f"conv_{m}_im2col_tflops")
            am, im = num(ceil, f"conv_{m}_auto_ms"), num(ceil, f"conv_{m}_im2col_ms")
            print(f"   {m:5} auto {fmt(a, '7.1f', 7)}  im2col {fmt(i, '7.1f', 7)}  "
                  f"auto {fmt(im / am if am and im else None, '5.2f', 5)}x as fast as im2col")

    peaks = sorted({str(reports[n].get("device_peaks")) for n in ROOF_ROWS if reports[n]})
    print(f"\nroofline sheets (trident roofline --run: each kernel alone at its shapes; peaks: {', '.join(peaks) or '-'})")
    for name in ROOF_ROWS:
        sh = reports[name]
        if not sh:
            continue
        m = num(sh, "measured_ms")
        fl = num(sh, "floor_ms")
        print(f"{name[9:]:18} floor {fmt(fl, '8.2f', 8)} ms  design {fmt(num(sh, 'design_ms'), '8.2f', 8)} ms  "
              f"measured {fmt(m, '8.2f', 8)} ms  {fmt(100 * fl / m if fl and m else None, '5.0f', 5)}% of floor")
        ks = [k for k in sh.get("kernels", []) if isinstance(k, dict)]
        ks.sort(key=lambda k: -(num(k, "calls") or 0) * (num(k, "measured_us") or num(k, "design_us") or 0))
        for k in ks[:6]:
            mu, fu = num(k, "measured_us"), num(k, "floor_us")
            print(f"   {str(k.get('kernel', '?'))[:58]:58} x{num(k, 'calls') or 0:<4} floor {fmt(fu, '9.1f', 9)} us  "
                  f"design {fmt(num(k, 'design_us'), '9.1f', 9)} us  measured {fmt(mu, '9.1f', 9)} us  "
                  f"{fmt(100 * fu / mu if fu and mu else None, '4.0f', 4)}%")

    if missing:
        print(f"\nmissing rows ({len(missing)} of {len(JSON_ROWS)}):")
        for name, reason in missing.items():
            print(f"  {name:30} {reason}")
    else:
        print(f"\nno row missing ({len(JSON_ROWS)} of {len(JSON_ROWS)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
