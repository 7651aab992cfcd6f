#!/usr/bin/env python3
"""trident beside native PyTorch on this CPU, config by config, in one run.

    python3 tests/peer/compare_cpu.py [--trident build/trident] [--compile] [--fused] [--keras jax,torch] [--rounds 2] [--dtype bf16] [--json OUT] [INI...]

For each INI (default: every conf/cpu/*.ini that tests/peer/torch_cpu.py knows), runs
`trident run INI --json` (every backend the INI names) and torch_cpu.py on the same work,
alternating which goes first from round to round so that a drift in the machine's load
falls on both; each side's figure is its best round's mean ms/step. Prints one table:
trident's fastest backend, trident's torch backend (its eager model of PyTorch, the
like-for-like row), PyTorch eager (and torch.compile with --compile), and PyTorch's time
over trident's fastest (above 1: trident is faster). The peers run with OpenMP's wait as
trident's (GOMP_SPINCOUNT=1000, unless the environment sets a wait). Absolute CPU times are noisy on a shared
machine; the ratio, measured minutes apart on the same cores, is the figure to quote.
--fused adds PyTorch eager with the fit's optimizer fused (`AdamW(fused=True)`, not
PyTorch's default) for the fit configs, beside trident's fused AdamW; other rows show n/a.
--dtype bf16 runs each INI as a copy with [run] dtype = bf16 (predict and generate only).
--keras jax,torch adds Keras 3 on those backends (tests/peer/keras_cpu.py: keras_hub's
models, Keras' default jit_compile), each two more columns, its ms/step and its ratio over
trident's fastest, run in the same alternating rounds; a config with no Keras model written
(Stable Diffusion's) shows n/a there and does not count as failed.
"""
import argparse
import configparser
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KNOWN = ["bert_predict", "bert_fit", "gemma_predict", "gemma_fit", "gemma_generate", "mistral_predict", "mistral_fit",
         "mistral_generate", "sd_predict", "sd_fit", "sam_predict", "sam_fit"]


def fresh(path):
    """path with no file of an earlier call at it (each call writes the same name)."""
    if os.path.exists(path):
        os.remove(path)
    return path


def trident(exe, ini, tmp):
    out = fresh(os.path.join(tmp, "t.json"))
    p = subprocess.run([exe, "run", ini, "--json", out], cwd=ROOT, capture_output=True, text=True)
    if not os.path.exists(out):
        return None, f"trident exit {p.returncode}: {p.stderr.strip()[-300:]}"
    d = json.load(open(out))
    rows = [b for b in d["backends"] if b.get("ok")]
    if not rows:
        return None, "no trident backend ran"
    best = min(rows, key=lambda b: b["mean_ms"])
    row = dict(backend=best["backend"], mean_ms=best["mean_ms"], first_step_ms=best["first_step_ms"],
               all_ok=d["all_ok"], rows={b["backend"]: b["mean_ms"] for b in rows})
    # a time from backends that disagree is still shown, but the config counts as failed
    return row, None if d["all_ok"] else f"exit {p.returncode}: not all backends ran and agree"


def peer_env():
    """The environment of the peers' processes: OpenMP's wait as trident sets its own (a
    short spin, GOMP_SPINCOUNT=1000) unless the user chose one, so that both sides wait
    alike. On a shared machine libgomp's default spin made PyTorch BERT small predict
    6.5-7.7x slower (638-648 ms against 84-100), which would credit trident with it."""
    env = dict(os.environ)
    if "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env:
        env["GOMP_SPINCOUNT"] = "1000"
    return env


def torch_row(ini, mode, tmp):
    out = fresh(os.path.join(tmp, "p.json"))
    p = subprocess.run([sys.executable, os.path.join(HERE, "torch_cpu.py"), ini, "--mode", mode, "--json", out],
                       cwd=ROOT, capture_output=True, text=True, env=peer_env())
    if p.returncode or not os.path.exists(out):
        return None, f"torch_cpu.py exit {p.returncode}: {p.stderr.strip()[-300:]}"
    return json.load(open(out)), None


def keras_row(ini, backend, tmp):
    """keras_cpu.py's row; (None, None) where it has no model for the INI (exit status 3)."""
    out = fresh(os.path.join(tmp, "k.json"))
    p = subprocess.run([sys.executable, os.path.join(HERE, "keras_cpu.py"), ini, "--backend", backend, "--json", out],
                       cwd=ROOT, capture_output=True, text=True, env=peer_env())
    if p.returncode == 3:
        return None, None
    if p.returncode or not os.path.exists(out):
        return None, f"keras_cpu.py exit {p.returncode}: {p.stderr.strip()[-300:]}"
    return json.load(open(out)), None


def with_dtype(ini, dtype, tmp):
    """A copy of ini in tmp with [run] dtype set (the conf/cpu INIs name no relative paths)."""
    lines, out, in_run, done = open(ini).read().splitlines(), [], False, False
    for ln in lines:
        s = ln.strip()
        if s.startswith("["):
            if in_run and not done:
                out.append(f"dtype = {dtype}")
                done = True
            in_run = s.lower() == "[run]"
        elif in_run and s.split("=")[0].strip() == "dtype":
            ln, done = f"dtype = {dtype}", True
        out.append(ln)
    if in_run and not done:
        out.append(f"dtype = {dtype}")
    path = os.path.join(tmp, f"{os.path.basename(ini)[:-4]}.{dtype}.ini")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def task_of(ini):
    """[run] task of an INI (the conf/cpu INIs: no includes)."""
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    cp.read(ini)
    return cp.get("run", "task", fallback="")


def peer_name(mode):
    return "pytorch" + ("" if mode == "eager" else ":" + mode)


def width(mode):
    """The ms/step column's width under a peer's name."""
    return max(9, len(peer_name(mode)))


def line(e, modes, kbs=()):
    """One config's row of the table."""
    t = e["trident"]
    s = f"{e['config']:34s}  " + (f"{t['backend']:22s} {t['mean_ms']:9.2f} {t['rows'].get('torch', float('nan')):9.2f}"
                                  if t else f"{'FAILED':42s}")
    for m in modes:
        q, w = e["pytorch"][m], width(m)
        s += (f"  {q['mean_ms']:{w}.2f} {q['mean_ms'] / t['mean_ms']:5.2f}x" if t and q else
              f"  {'n/a' if m in e['pytorch_na'] else 'FAILED':>{w + 7}s}")
    for b in kbs:
        q = e["keras"][b]
        s += (f"  {q['mean_ms']:11.2f} {q['mean_ms'] / t['mean_ms']:5.2f}x" if t and q else
              f"  {'n/a' if b in e['keras_na'] else 'FAILED':>18s}")
    return s


def better(a, b):
    return b if a is None or (b is not None and b["mean_ms"] < a["mean_ms"]) else a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ini", nargs="*")
    ap.add_argument("--trident", default=os.path.join(ROOT, "build", "trident"))
    ap.add_argument("--compile", action="store_true", help="also torch.compile (inductor; needs a C++ compiler)")
    ap.add_argument("--fused", action="store_true", help="also PyTorch eager with a fused optimizer (fit rows)")
    ap.add_argument("--keras", default="", help="Keras 3 backends to add, comma-separated: jax, torch, tensorflow")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dtype", choices=["f32", "bf16"], help="run each INI at this dtype (a copy of it)")
    ap.add_argument("--json")
    a = ap.parse_args()
    inis = a.ini or [p for p in sorted(glob.glob(os.path.join(ROOT, "conf", "cpu", "*.ini")))
                     if os.path.basename(p)[:-4] in KNOWN]
    modes = ["eager"] + (["fused"] if a.fused else []) + (["compile"] if a.compile else [])
    kbs = [b.strip() for b in a.keras.split(",") if b.strip()]
    if any(b not in ("jax", "torch", "tensorflow") for b in kbs):
        ap.error(f"--keras {a.keras}: the backends are jax, torch, tensorflow")
    peers = modes + ["keras:" + b for b in kbs]
    table, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for ini in inis:
            name = os.path.relpath(ini, ROOT) + (f" ({a.dtype})" if a.dtype else "")
            if a.dtype:
                ini = with_dtype(ini, a.dtype, tmp)
            t, p, errs = None, {m: None for m in modes}, []
            k, kna = {b: None for b in kbs}, set()
            pna = {"fused"} if a.fused and task_of(ini) != "fit" else set()
            for r in range(a.rounds):
                order = ["trident"] + peers if r % 2 == 0 else peers + ["trident"]
                for who in order:
                    if who == "trident":
                        row, e = trident(a.trident, ini, tmp)
                        t = better(t, row)
                    elif who.startswith("keras:"):
                        b = who[6:]
                        if b in kna:
                            continue
                        row, e = keras_row(ini, b, tmp)
                        if row is None and e is None:
                            kna.add(b)
                        k[b] = better(k[b], row)
                    elif who in pna:
                        continue
                    else:
                        row, e = torch_row(ini, who, tmp)
                        p[who] = better(p[who], row)
                    if e:
                        errs.append(f"{who}: {e}")
            entry = dict(config=name, trident=t, pytorch=p, pytorch_na=sorted(pna), errors=errs)
            if kbs:
                entry.update(keras=k, keras_na=sorted(kna))
            table.append(entry)
            if errs:
                failed += 1
            print(line(entry, modes, kbs), flush=True)
            for e in errs:
                print(f"    {e}", flush=True)
    head = f"{'config':34s}  {'trident fastest':22s} {'ms/step':>9s} {'its torch':>9s}" + "".join(
        f"  {peer_name(m):>{width(m)}s} {'ratio':>6s}" for m in modes) + "".join(
        f"  {'keras:' + b:>11s} {'ratio':>6s}" for b in kbs)
    print("\n" + head)
    for e in table:
        print(line(e, modes, kbs))
    print("its torch = trident's torch backend (eager); ratio = PyTorch's ms/step over trident's fastest backend's "
          "(above 1: trident is faster)" + ("; keras:B = Keras 3 on backend B, its ratio likewise" if kbs else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(table, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
