#!/usr/bin/env python3
"""trident's tokenizer.json reader (models/decoder/tokenizer.c) against Hugging Face's
tokenizers on vocabularies of a realistic size, text by text.

    python3 tests/peer/llm_tokenizer_fuzz.py [--build build] [--texts 3000] [--vocab 8000]

Trains a SentencePiece-style BPE (byte fallback, Gemma's and Mistral's layouts) on this
machine's Python sources, then encodes and decodes random texts (pieces of the corpus,
and strings of ASCII, accents, CJK, emoji, white space and the special tokens' text) with
both: trident's through a small driver compiled against the build tree. Prints the
mismatches (none expected). Needs tokenizers and a C compiler; the tests never run it
(tests/test_llm_tokenizer.c holds the committed toy fixtures).
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "decoder/tokenizer.h"
#include "hf_json.h"
int main(int argc, char **argv) {
    struct tr_hf_tokenizer *t; struct tr_error e = {0};
    if (tr_hf_tokenizer_load(argv[1], &t, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    FILE *f = fopen(argv[2], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(n + 1); fread(b, 1, n, f); b[n] = 0; fclose(f);
    cJSON *texts = cJSON_Parse(b), *x, *out = cJSON_CreateArray();
    cJSON_ArrayForEach(x, texts) {
        int32_t *ids; int m;
        if (tr_hf_encode(t, x->valuestring, &ids, &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        cJSON *a = cJSON_CreateArray();
        for (int i = 0; i < m; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        char *txt; tr_hf_decode(t, ids, m, &txt, &e);
        cJSON *pair = cJSON_CreateArray(); cJSON_AddItemToArray(pair, a); cJSON_AddItemToArray(pair, cJSON_CreateString(txt));
        cJSON_AddItemToArray(out, pair); free(ids); free(txt);
    }
    char *s = cJSON_PrintUnformatted(out); puts(s);
    return 0;
}
"""


def compile_driver(build, out):
    inc = ["-I" + os.path.join(ROOT, d) for d in ("models", "core/base/include", "core/include")]
    libs = [os.path.join(build, d) for d in ("models", "core", "")]
    src = out + ".c"
    with open(src, "w") as f:
        f.write(DRIVER)
    subprocess.run(["cc", "-O1", *inc, src, "-o", out, *["-L" + l for l in libs], "-ltrident_models", "-ltrident",
                    "-lcjson", "-Wl,-rpath," + ":".join(libs)], check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--texts", type=int, default=3000)
    ap.add_argument("--vocab", type=int, default=8000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    drv = os.path.join(tmp, "drv")
    compile_driver(os.path.abspath(a.build), drv)
    files = glob.glob("/usr/lib/python3*/**/*.py", recursive=True)[:400]
    corpus = []
    for f in files:
        try:
            corpus += open(f, encoding="utf-8").read().split("\n\n")
        except (OSError, UnicodeDecodeError):
            pass
    corpus += ["caf\u00e9 na\u00efve \u00fcber stra\u00dfe \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac"] * 50
    def build(style, vocab_size):
        specials = ["<pad>", "<eos>", "<bos>", "<unk>"] if style == "gemma" else ["<unk>", "<s>", "</s>"]
        tt = Tokenizer(models.BPE(unk_token="<unk>"))
        tt.normalizer = normalizers.Replace(" ", "\u2581")
        tt.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never", split=(style != "gemma"))
        tt.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, limit_alphabet=300))
        learnt = json.loads(tt.to_str())["model"]
        vocab = {}
        for t in specials + [f"<0x{b:02X}>" for b in range(256)]: vocab[t] = len(vocab)
        for t, _ in sorted(learnt["vocab"].items(), key=lambda kv: kv[1]):
            if t not in vocab: vocab[t] = len(vocab)
        merges = [tuple(m) if not isinstance(m, str) else tuple(m.split(" ")) for m in learnt["merges"]]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.add_special_tokens(specials)
        if style == "gemma":
            tok.normalizer = normalizers.Replace(" ", "\u2581")
            tok.pre_tokenizer = pre_tokenizers.Split(" ", "merged_with_previous")
            tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
            bos = "<bos>"
        else:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
            tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
            bos = "<s>"
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
        return tok

    rnd = random.Random(1)
    alphabet = list("abcdefghijklmnopqrstuvwxyz ABC  \t\n.,;:!?()[]{}'\"-_=+0123456789") + \
        list("\u00e9\u00fc\u00df\u65e5\u672c\u8a9e\u4e2d\ud55c\u03a9\u0436\U0001F680\U0001F642\u200b\u00a0") + \
        ["<bos>", "<s>", "</s>", "<eos>", "<unk>", "  ", "def ", "return ", "self."]
    texts = []
    for i in range(a.texts):
        if i % 3 == 0:
            p = rnd.choice(corpus)
            s = rnd.randrange(max(1, len(p)))
            texts.append(p[s:s + rnd.randrange(1, 300)])
        else:
            texts.append("".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 80))))
    with open(os.path.join(tmp, "texts.json"), "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    failed = 0
    for style in ("gemma", "mistral"):
        tok = build(style, a.vocab)
        path = os.path.join(tmp, style + ".json")
        tok.save(path)
        out = json.loads(subprocess.run([drv, path, os.path.join(tmp, "texts.json")], capture_output=True,
                                        text=True, check=True).stdout)
        bad = 0
        for t, (ids, txt) in zip(texts, out):
            want = tok.encode(t).ids
            wtxt = tok.decode(want, skip_special_tokens=True)
            if ids != want or txt != wtxt:
                bad += 1
                if bad <= 3:
                    print(style, "MISMATCH", repr(t[:80]), ids[:20], want[:20], repr(txt[:60]), repr(wtxt[:60]))
        print(f"{style}: vocabulary {tok.get_vocab_size()}, {len(texts)} texts, {bad} mismatches")
        failed += bad
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
