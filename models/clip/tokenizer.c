/* CLIP's byte-level BPE tokenizer (tokenizer.h). The vocabulary and the merge ranks are
 * tables of their strings (strtab.h) (a merge is "left right", as merges.txt writes
 * it); a word is merged as GPT-2's BPE does: the adjacent pair of lowest rank, everywhere
 * in the word, until none is left. Unicode (NFC, letters, numbers, lowering) is utf8proc's. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>
#include "trident/file.h"
#include "hf_json.h"
#include "strtab.h"
#include "tokenizer.h"

struct tr_clip_tokenizer {
    struct tr_strtab vocab, ranks;
    char byte_enc[256][3]; /* each byte as the UTF-8 of GPT-2's bytes_to_unicode character */
    int32_t bos, eos, pad;
    char pad_text[64];
    /* tokens matched in the raw text before any normalizing (transformers' special and
     * added tokens: <|startoftext|>, <|endoftext|>, the pad token), each its own id */
    struct {
        char text[64];
        int32_t id;
    } special[16];
    int n_special;
};

static void add_special(struct tr_clip_tokenizer *t, const char *text, int32_t id) {
    const size_t n = strlen(text);
    if (!n || n >= sizeof t->special[0].text || id < 0) return;
    for (int i = 0; i < t->n_special; i++)
        if (!strcmp(t->special[i].text, text)) return;
    if (t->n_special == (int)(sizeof t->special / sizeof t->special[0])) return;
    memcpy(t->special[t->n_special].text, text, n + 1);
    t->special[t->n_special++].id = id;
}

/* GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the others for 256 + k. */
static void byte_encoder(char enc[256][3]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n++;
        if (cp < 0x80) enc[b][0] = (char)cp, enc[b][1] = 0;
        else enc[b][0] = (char)(0xC0 | (cp >> 6)), enc[b][1] = (char)(0x80 | (cp & 0x3F)), enc[b][2] = 0;
    }
}

static int read_text(const char *path, char **out, struct tr_error *err) {
    FILE *f;
    int rc0 = tr_fopen_regular(path, &f, err);
    if (rc0) return tr_error_prefix(err, "clip tokenizer");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 && n < (64L << 20) ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return tr_error_set(err, TR_ERR_IO, "clip tokenizer: cannot read '%s'", path);
    }
    fclose(f);
    b[n] = 0;
    *out = b;
    return TR_OK;
}

/* vocab.json: {token: id}; or tokenizer.json's model.vocab (transformers 5 saves that alone). */
static int put_vocab(struct tr_clip_tokenizer *t, const cJSON *entries, const char *path, struct tr_error *err) {
    if (!cJSON_IsObject(entries)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': no vocabulary object", path);
    if (tr_strtab_init(&t->vocab, (size_t)cJSON_GetArraySize(entries) + 2))
        return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, entries) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8 || e->valuedouble != floor(e->valuedouble))
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a token id", path, e->string);
        int rc = tr_strtab_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble, NULL);
        if (rc) return rc;
    }
    return TR_OK;
}

/* One merge "left right" (either written so, or as tokenizer.json's ["left", "right"]). */
static int put_merge(struct tr_clip_tokenizer *t, const char *line, size_t n, int32_t *rank, const char *path,
                     int lineno, struct tr_error *err) {
    const char *sp = memchr(line, ' ', n);
    if (!sp || sp == line || sp + 1 == line + n || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1)))
        return tr_error_set(err, TR_ERR_FORMAT, "'%s':%d: '%.40s' is not a merge (two symbols, one space)", path,
                            lineno, line);
    return tr_strtab_put(&t->ranks, line, n, (*rank)++, NULL);
}

static int load_merges_txt(struct tr_clip_tokenizer *t, const char *path, struct tr_error *err) {
    char *merges = NULL;
    int rc = read_text(path, &merges, err);
    size_t lines = 0;
    for (const char *p = merges; !rc && *p; p++) lines += *p == '\n';
    if (!rc && tr_strtab_init(&t->ranks, lines + 1)) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    int32_t rank = 0, lineno = 0;
    for (char *line = rc ? NULL : merges, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r') line[--n] = 0;
        if (n == 0 || (lineno == 1 && strncmp(line, "#version", 8) == 0)) continue;
        if ((rc = put_merge(t, line, n, &rank, path, lineno, err)) != TR_OK) break;
    }
    free(merges);
    return rc;
}

/* tokenizer.json: model.vocab, model.merges (strings or pairs), and the added tokens. */
static int load_tokenizer_json(struct tr_clip_tokenizer *t, const char *path, struct tr_error *err) {
    cJSON *root = NULL;
    int rc = tr_hf_json_load_max(path, (size_t)256 << 20, "tokenizer.json", &root, err);
    const cJSON *model = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!rc && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 || !cJSON_IsArray(merges)))
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': expected a BPE model with its vocab and merges (CLIP's)", path);
    if (!rc) rc = put_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), path, err);
    const cJSON *a, *added = rc ? NULL : cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    cJSON_ArrayForEach(a, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id"), *c = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c)) continue;
        if (tr_strtab_get(&t->vocab, c->valuestring, strlen(c->valuestring)) < 0 &&
            (rc = tr_strtab_put(&t->vocab, c->valuestring, strlen(c->valuestring), (int32_t)id->valuedouble,
                                NULL)) != TR_OK)
            break;
        add_special(t, c->valuestring, (int32_t)id->valuedouble);
    }
    if (!rc && tr_strtab_init(&t->ranks, (size_t)cJSON_GetArraySize(merges) + 1))
        rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    int32_t rank = 0;
    const cJSON *m;
    const cJSON *list = rc ? NULL : merges;
    cJSON_ArrayForEach(m, list) {
        char pair[256];
        int n = -1;
        if (cJSON_IsString(m)) n = snprintf(pair, sizeof pair, "%s", m->valuestring);
        else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                 cJSON_IsString(cJSON_GetArrayItem(m, 1)))
            n = snprintf(pair, sizeof pair, "%s %s", cJSON_GetArrayItem(m, 0)->valuestring,
                         cJSON_GetArrayItem(m, 1)->valuestring);
        if (n < 0 || n >= (int)sizeof pair) {
            rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': merge %d is not two symbols", path, rank + 1);
            break;
        }
        if ((rc = put_merge(t, pair, (size_t)n, &rank, path, rank + 1, err)) != TR_OK) break;
    }
    cJSON_Delete(root);
    return rc;
}

/* The pad token as tokenizer_config.json (or special_tokens_map.json) names it: Stable
 * Diffusion 2's "!" (id 0), where v1 pads with <|endoftext|>. -1: none named. */
static int pad_token(struct tr_clip_tokenizer *t, const char *dir, struct tr_error *err) {
    static const char *const files[] = {"tokenizer_config.json", "special_tokens_map.json"};
    t->pad = -1;
    for (int f = 0; f < 2 && t->pad < 0; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        FILE *probe = fopen(path, "rb");
        if (!probe) continue;
        fclose(probe);
        cJSON *root = NULL;
        int rc = tr_hf_json_load(path, &root, err);
        if (rc) return rc;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "pad_token");
        if (cJSON_IsObject(p)) p = cJSON_GetObjectItemCaseSensitive(p, "content");
        if (cJSON_IsString(p)) {
            snprintf(t->pad_text, sizeof t->pad_text, "%s", p->valuestring);
            t->pad = tr_strtab_get(&t->vocab, p->valuestring, strlen(p->valuestring));
            if (t->pad < 0)
                rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': pad_token \"%.40s\" is not in the vocabulary", path,
                                  p->valuestring);
        }
        cJSON_Delete(root);
        if (rc) return rc;
    }
    return TR_OK;
}

int tr_clip_tokenizer_load(const char *dir, struct tr_clip_tokenizer **out, struct tr_error *err) {
    *out = NULL;
    char path[4096];
    struct tr_clip_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tr_error_set(err, TR_ERR_NOMEM, "clip tokenizer: no memory");
    byte_encoder(t->byte_enc);
    int rc;
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    FILE *probe = fopen(path, "rb");
    if (probe) { /* the Hub's CLIP files */
        fclose(probe);
        cJSON *root = NULL;
        rc = tr_hf_json_load(path, &root, err);
        if (!rc) rc = put_vocab(t, root, path, err);
        cJSON_Delete(root);
        snprintf(path, sizeof path, "%s/merges.txt", dir);
        if (!rc) rc = load_merges_txt(t, path, err);
    } else { /* what transformers 5's save_pretrained writes */
        snprintf(path, sizeof path, "%s/tokenizer.json", dir);
        probe = fopen(path, "rb");
        if (probe) fclose(probe);
        rc = probe ? load_tokenizer_json(t, path, err)
                   : tr_error_set(err, TR_ERR_IO, "clip tokenizer: '%s' has neither vocab.json and merges.txt nor "
                                  "tokenizer.json", dir);
    }
    t->bos = rc ? -1 : tr_strtab_get(&t->vocab, "<|startoftext|>", 15);
    t->eos = rc ? -1 : tr_strtab_get(&t->vocab, "<|endoftext|>", 13);
    if (!rc && (t->bos < 0 || t->eos < 0))
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': the vocabulary has no <|startoftext|> or <|endoftext|>", dir);
    if (!rc) rc = pad_token(t, dir, err);
    if (!rc && t->pad < 0) t->pad = t->eos;
    if (!rc) {
        add_special(t, "<|startoftext|>", t->bos);
        add_special(t, "<|endoftext|>", t->eos);
        if (t->pad != t->eos) add_special(t, t->pad_text, t->pad);
    }
    if (rc) {
        tr_clip_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return TR_OK;
}

void tr_clip_tokenizer_free(struct tr_clip_tokenizer *t) {
    if (!t) return;
    tr_strtab_free(&t->vocab);
    tr_strtab_free(&t->ranks);
    free(t);
}

/* Unicode's classes as the tokenizer's pattern has them: \p{L}, \p{N}, \s (White_Space). */
static int is_letter(int32_t c) {
    const utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}
static int is_number(int32_t c) {
    const utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
}
static int is_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* The length in code points of the piece at cp[0..n) (CLIP's pre-tokenizer pattern, in
 * its order: a contraction, letters, one number, other non-spaces), its UTF-8 at s. */
static size_t piece(const int32_t *cp, size_t n, const char *s) {
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t i = 0; i < sizeof contractions / sizeof contractions[0]; i++)
        if (strncmp(s, contractions[i], strlen(contractions[i])) == 0) return strlen(contractions[i]);
    size_t m = 0;
    if (is_letter(cp[0])) {
        while (m < n && is_letter(cp[m])) m++;
    } else if (is_number(cp[0])) {
        m = 1;
    } else {
        while (m < n && !is_space(cp[m]) && !is_letter(cp[m]) && !is_number(cp[m])) m++;
    }
    return m;
}

#define MAX_SYMBOLS 256

/* The BPE of one piece (already lowered) appended to ids (room for max, *n so far). */
static void bpe(const struct tr_clip_tokenizer *t, const char *s, size_t len, int32_t *ids, int max, int *n) {
    char sym[MAX_SYMBOLS][64];
    int ns = 0;
    for (size_t i = 0; i < len && ns < MAX_SYMBOLS; i++) strcpy(sym[ns++], t->byte_enc[(unsigned char)s[i]]);
    if (ns == 0) return;
    strcat(sym[ns - 1], "</w>");
    for (;;) {
        int best = -1;
        int32_t best_rank = INT32_MAX;
        char pair[130];
        for (int i = 0; i + 1 < ns; i++) {
            int k = snprintf(pair, sizeof pair, "%s %s", sym[i], sym[i + 1]);
            int32_t r = k < (int)sizeof pair ? tr_strtab_get(&t->ranks, pair, (size_t)k) : -1;
            if (r >= 0 && r < best_rank) best_rank = r, best = i;
        }
        if (best < 0) break;
        char a[64], b[64];
        strcpy(a, sym[best]);
        strcpy(b, sym[best + 1]);
        int w = 0;
        for (int i = 0; i < ns; i++) { /* merge every occurrence of (a, b), left to right */
            const size_t la = strlen(a), lb = strlen(b);
            if (i + 1 < ns && strcmp(sym[i], a) == 0 && strcmp(sym[i + 1], b) == 0 && la + lb < 64) {
                memcpy(sym[w], a, la);
                memcpy(sym[w] + la, b, lb + 1);
                w++;
                i++;
            } else if (w != i) {
                memmove(sym[w++], sym[i], strlen(sym[i]) + 1);
            } else {
                w++;
            }
        }
        ns = w;
    }
    for (int i = 0; i < ns && *n < max; i++) {
        int32_t id = tr_strtab_get(&t->vocab, sym[i], strlen(sym[i]));
        ids[(*n)++] = id >= 0 ? id : t->eos; /* unknown: CLIP's unk is <|endoftext|> */
    }
}

/* The normalizer of CLIP's tokenizer.json: NFC, every run of spaces one ' ', lowered (the
 * one lowering into two code points, U+0130, as Unicode's SpecialCasing has it). Code
 * points into cp, their UTF-8 into s with each one's offset (off[n] the end); NULL on
 * text that is not UTF-8. */
struct normal {
    int32_t *cp;
    size_t *off, n;
    char *s;
};

static int normalize(const char *text, struct normal *o, struct tr_error *err) {
    memset(o, 0, sizeof *o);
    utf8proc_uint8_t *nfc = utf8proc_NFC((const utf8proc_uint8_t *)text);
    if (!nfc) return tr_error_set(err, TR_ERR_INVALID, "clip tokenizer: the prompt is not UTF-8 text");
    const size_t len = strlen((const char *)nfc);
    o->cp = malloc((2 * len + 1) * sizeof *o->cp);
    o->off = malloc((2 * len + 2) * sizeof *o->off);
    o->s = malloc(8 * len + 1);
    if (!o->cp || !o->off || !o->s) {
        free(nfc);
        return tr_error_set(err, TR_ERR_NOMEM, "clip tokenizer: no memory");
    }
    size_t w = 0;
    for (utf8proc_ssize_t i = 0, step; i < (utf8proc_ssize_t)len; i += step) {
        int32_t c;
        step = utf8proc_iterate(nfc + i, (utf8proc_ssize_t)len - i, &c);
        if (step <= 0) break; /* NFC gave valid UTF-8 */
        if (is_space(c)) {
            if (o->n && o->cp[o->n - 1] == ' ') continue; /* one space for the run */
            c = ' ';
        } else if (c == 0x130) {
            o->off[o->n] = w;
            o->cp[o->n++] = 'i';
            w += (size_t)utf8proc_encode_char('i', (utf8proc_uint8_t *)o->s + w);
            c = 0x307;
        } else {
            c = utf8proc_tolower(c);
        }
        o->off[o->n] = w;
        o->cp[o->n++] = c;
        w += (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)o->s + w);
    }
    o->off[o->n] = w;
    o->s[w] = 0;
    free(nfc);
    return TR_OK;
}

/* The special token at s (the longest), or -1. */
static int special_at(const struct tr_clip_tokenizer *t, const char *s) {
    int best = -1;
    size_t best_n = 0;
    for (int i = 0; i < t->n_special; i++) {
        const size_t n = strlen(t->special[i].text);
        if (n > best_n && strncmp(s, t->special[i].text, n) == 0) best = i, best_n = n;
    }
    return best;
}

/* text[0..len) (no special token in it): normalized, split, merged, appended to ids. */
static int tokenize_span(const struct tr_clip_tokenizer *t, const char *text, size_t len, int32_t *ids, int max,
                         int *k, struct tr_error *err) {
    char *span = malloc(len + 1);
    if (!span) return tr_error_set(err, TR_ERR_NOMEM, "clip tokenizer: no memory");
    memcpy(span, text, len);
    span[len] = 0;
    struct normal nm;
    int rc = normalize(span, &nm, err);
    free(span);
    for (size_t i = 0; !rc && i < nm.n && *k < max;) {
        if (nm.cp[i] == ' ') {
            i++;
            continue;
        }
        const size_t m = piece(nm.cp + i, nm.n - i, nm.s + nm.off[i]);
        bpe(t, nm.s + nm.off[i], nm.off[i + m] - nm.off[i], ids, max, k);
        i += m;
    }
    free(nm.cp);
    free(nm.off);
    free(nm.s);
    return rc;
}

int tr_clip_tokenize(const struct tr_clip_tokenizer *t, const char *text, int32_t *ids, int n, struct tr_error *err) {
    if (!t || !text || !ids || n < 2)
        return tr_error_set(err, TR_ERR_INVALID, "clip tokenizer: NULL argument or length %d below 2", n);
    int k = 0, rc = TR_OK;
    ids[k++] = t->bos;
    for (const char *p = text, *start = text;; p++) {
        const int sp = *p ? special_at(t, p) : -1;
        if (!*p || sp >= 0) { /* the text before it, then the token itself */
            if ((rc = tokenize_span(t, start, (size_t)(p - start), ids, n - 1, &k, err)) != TR_OK || !*p) break;
            if (k < n - 1) ids[k++] = t->special[sp].id;
            p += strlen(t->special[sp].text) - 1;
            start = p + 1;
        }
    }
    if (rc) return rc;
    ids[k++] = t->eos;
    while (k < n) ids[k++] = t->pad;
    return TR_OK;
}
