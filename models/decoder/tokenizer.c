/* tokenizer.json's BPE with byte fallback (tokenizer.h). The vocabulary is a string table;
 * a merge is keyed by its two ids (8 bytes) to its rank, and merged[rank] is the id it
 * makes. A word is merged as tokenizers' BPE merges it: the adjacent pair of lowest rank,
 * the leftmost of equals, until none is left (every occurrence of that pair, left to
 * right, in one pass: the same result). */
#include "tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "hf_json.h"
#include "strtab.h"

/* Gemma's tokenizer.json is 17 MB, Gemma 3's 33 MB. */
#define MAX_TOKENIZER_BYTES (256u << 20)
#define MAX_STEPS 8

enum step_kind { STEP_REPLACE, STEP_PREPEND, STEP_BYTE_FALLBACK, STEP_FUSE, STEP_STRIP };
enum pre_kind { PRE_NONE, PRE_METASPACE, PRE_SPLIT };
enum split_how { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_WITH_PREVIOUS, SPLIT_WITH_NEXT };

struct step {
    enum step_kind kind;
    char *a, *b;     /* Replace: a -> b; Prepend: a; Strip: a (one character) */
    int start, stop; /* Strip */
};

struct added {
    char *content;
    size_t len;
    int32_t id;
    int lstrip, rstrip;
};

struct tr_hf_tokenizer {
    char path[4096];
    struct tr_strtab vocab, merges;
    char **piece;           /* id -> its string (the vocab's or an added token's) */
    unsigned char *special; /* id -> an added token marked special */
    int32_t n_ids, *merged, n_merges, byte_id[256], unk;
    int byte_fallback, fuse_unk, ignore_merges;
    struct added *added;
    int n_added;
    struct step norm[MAX_STEPS], dec[MAX_STEPS];
    int n_norm, n_dec, has_decoder;
    enum pre_kind pre;
    char *meta;             /* Metaspace's replacement, or Split's pattern */
    int meta_prepend;       /* 0 never, 1 first, 2 always */
    int meta_split;
    enum split_how split_how;
    int32_t before[4], after[4]; /* the template's special ids around $A */
    int n_before, n_after;
};

/* ---- a growing string ---- */
struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
};

static void sb_add(struct sbuf *s, const char *x, size_t n) {
    if (s->oom) return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->n + n + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->oom = 1;
            return;
        }
        s->p = p, s->cap = cap;
    }
    memcpy(s->p + s->n, x, n);
    s->n += n;
    s->p[s->n] = 0;
}

/* s[0..n) with every a replaced by b, appended to out */
static void replace_into(struct sbuf *out, const char *s, size_t n, const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    size_t i = 0;
    while (i < n) {
        if (la && i + la <= n && memcmp(s + i, a, la) == 0) {
            sb_add(out, b, lb);
            i += la;
        } else {
            sb_add(out, s + i, 1);
            i++;
        }
    }
}

/* ---- loading ---- */

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "(no type)";
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}

static int bool_of(const cJSON *o, const char *key, int dflt) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(b) ? cJSON_IsTrue(b) : dflt;
}

/* A pattern given as {"String": s}; a {"Regex": ...} is refused. */
static int string_pattern(const struct tr_hf_tokenizer *t, const cJSON *o, const char *part, const char **out,
                          struct tr_error *err) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *s = str_of(p, "String");
    *out = NULL; /* set on every path: gcc -O1 cannot see that tr_error_set returns nonzero */
    if (!s || !*s)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': %s %s's pattern is not a string (a regex is not "
                            "supported)", t->path, part, type_of(o));
    *out = s;
    return TR_OK;
}

static int add_step(struct tr_hf_tokenizer *t, struct step *steps, int *n, struct step s, const char *part,
                    struct tr_error *err) {
    if (*n == MAX_STEPS) {
        free(s.a), free(s.b);
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': more than %d steps in the %s", t->path, MAX_STEPS, part);
    }
    if ((s.kind == STEP_REPLACE && (!s.a || !s.b)) || ((s.kind == STEP_PREPEND || s.kind == STEP_STRIP) && !s.a)) {
        free(s.a), free(s.b);
        return tr_error_set(err, TR_ERR_NOMEM, "'%s': no memory", t->path);
    }
    steps[(*n)++] = s;
    return TR_OK;
}

/* A Replace (a string pattern -> content) of the normalizer or the decoder. */
static int add_replace(struct tr_hf_tokenizer *t, const cJSON *o, const char *part, struct step *steps, int *n,
                       struct tr_error *err) {
    const char *s = NULL, *c = str_of(o, "content");
    int rc = string_pattern(t, o, part, &s, err);
    if (rc) return rc;
    if (!c) return tr_error_set(err, TR_ERR_FORMAT, "'%s': %s Replace without a content", t->path, part);
    return add_step(t, steps, n, (struct step){STEP_REPLACE, dup_str(s), dup_str(c), 0, 0}, part, err);
}

static int read_normalizer(struct tr_hf_tokenizer *t, const cJSON *o, struct tr_error *err) {
    if (!o || cJSON_IsNull(o)) return TR_OK;
    const char *type = type_of(o), *s;
    int rc;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
        cJSON_ArrayForEach(e, list) if ((rc = read_normalizer(t, e, err)) != TR_OK) return rc;
        return TR_OK;
    }
    if (strcmp(type, "Replace") == 0) return add_replace(t, o, "normalizer", t->norm, &t->n_norm, err);
    if (strcmp(type, "Prepend") == 0 && (s = str_of(o, "prepend")) != NULL)
        return add_step(t, t->norm, &t->n_norm, (struct step){STEP_PREPEND, dup_str(s), NULL, 0, 0}, "normalizer",
                        err);
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': normalizer %s is not supported (trident reads Replace of a "
                        "string, Prepend and Sequence: SentencePiece's BPE as Gemma, Mistral and Llama 2 ship it)",
                        t->path, type);
}

static int read_pre_tokenizer(struct tr_hf_tokenizer *t, const cJSON *o, struct tr_error *err) {
    if (!o || cJSON_IsNull(o)) return TR_OK;
    const char *type = type_of(o);
    if (strcmp(type, "Metaspace") == 0) {
        const char *r = str_of(o, "replacement"), *scheme = str_of(o, "prepend_scheme");
        if (!r || !*r) return tr_error_set(err, TR_ERR_FORMAT, "'%s': pre_tokenizer Metaspace without a replacement",
                                           t->path);
        if (scheme) {
            t->meta_prepend = strcmp(scheme, "never") == 0 ? 0 : strcmp(scheme, "first") == 0 ? 1
                              : strcmp(scheme, "always") == 0 ? 2 : -1;
            if (t->meta_prepend < 0)
                return tr_error_set(err, TR_ERR_FORMAT, "'%s': pre_tokenizer Metaspace prepend_scheme \"%s\": "
                                    "expected always, first or never", t->path, scheme);
        } else {
            t->meta_prepend = bool_of(o, "add_prefix_space", 1) ? 2 : 0; /* the older files' key */
        }
        t->meta_split = bool_of(o, "split", 1);
        t->pre = PRE_METASPACE;
        return (t->meta = dup_str(r)) ? TR_OK : tr_error_set(err, TR_ERR_NOMEM, "no memory");
    }
    if (strcmp(type, "Split") == 0) {
        const char *s = NULL, *how = str_of(o, "behavior");
        int rc = string_pattern(t, o, "pre_tokenizer", &s, err);
        if (rc) return rc;
        static const char *const hows[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext"};
        int k = 0;
        while (k < 4 && !(how && strcmp(how, hows[k]) == 0)) k++;
        if (k == 4 || bool_of(o, "invert", 0))
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': pre_tokenizer Split with behavior %s%s is not "
                                "supported (Removed, Isolated, MergedWithPrevious, MergedWithNext)", t->path,
                                how ? how : "(none)", bool_of(o, "invert", 0) ? " inverted" : "");
        t->split_how = (enum split_how)k;
        t->pre = PRE_SPLIT;
        return (t->meta = dup_str(s)) ? TR_OK : tr_error_set(err, TR_ERR_NOMEM, "no memory");
    }
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': pre_tokenizer %s is not supported (trident reads "
                        "SentencePiece's BPE: Metaspace or Split on a string; %s)", t->path, type,
                        strcmp(type, "ByteLevel") == 0 || strcmp(type, "Sequence") == 0
                            ? "a byte-level BPE, as GPT-2's and Llama 3's, is not read"
                            : "none at all");
}

static int read_decoder(struct tr_hf_tokenizer *t, const cJSON *o, struct tr_error *err) {
    if (!o || cJSON_IsNull(o)) return TR_OK;
    t->has_decoder = 1;
    const char *type = type_of(o);
    int rc;
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(o, "decoders");
        cJSON_ArrayForEach(e, list) if ((rc = read_decoder(t, e, err)) != TR_OK) return rc;
        return TR_OK;
    }
    if (strcmp(type, "Replace") == 0) return add_replace(t, o, "decoder", t->dec, &t->n_dec, err);
    if (strcmp(type, "ByteFallback") == 0)
        return add_step(t, t->dec, &t->n_dec, (struct step){STEP_BYTE_FALLBACK, NULL, NULL, 0, 0}, "decoder", err);
    if (strcmp(type, "Fuse") == 0)
        return add_step(t, t->dec, &t->n_dec, (struct step){STEP_FUSE, NULL, NULL, 0, 0}, "decoder", err);
    if (strcmp(type, "Strip") == 0) {
        const char *c = str_of(o, "content");
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "start"), *b = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!c || !*c || !cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valueint < 0 || b->valueint < 0)
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': decoder Strip needs a content and start and stop counts",
                                t->path);
        return add_step(t, t->dec, &t->n_dec, (struct step){STEP_STRIP, dup_str(c), NULL, a->valueint, b->valueint},
                        "decoder", err);
    }
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': decoder %s is not supported (trident reads Replace, "
                        "ByteFallback, Fuse, Strip and Sequence)", t->path, type);
}

/* TemplateProcessing's single template: special tokens, then $A, then special tokens. */
static int read_post(struct tr_hf_tokenizer *t, const cJSON *o, struct tr_error *err) {
    if (!o || cJSON_IsNull(o)) return TR_OK;
    if (strcmp(type_of(o), "TemplateProcessing") != 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': post_processor %s is not supported (trident reads "
                            "TemplateProcessing)", t->path, type_of(o));
    const cJSON *e, *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    int seen_a = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "single")) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            if (seen_a++) return tr_error_set(err, TR_ERR_FORMAT, "'%s': the template has $A twice", t->path);
            continue;
        }
        const char *name = str_of(sp, "id");
        const cJSON *ids = name ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, name),
                                                                   "ids") : NULL;
        if (!cJSON_IsArray(ids))
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': the template's special token %s has no ids in "
                                "special_tokens", t->path, name ? name : "(unnamed)");
        const cJSON *id;
        cJSON_ArrayForEach(id, ids) {
            int32_t *list = seen_a ? t->after : t->before;
            int *n = seen_a ? &t->n_after : &t->n_before;
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= t->n_ids || *n == 4)
                return tr_error_set(err, TR_ERR_FORMAT, "'%s': the template's %s: an id outside the vocabulary, or "
                                    "more than 4 special tokens on a side", t->path, name);
            list[(*n)++] = (int32_t)id->valuedouble;
        }
    }
    if (!seen_a) return tr_error_set(err, TR_ERR_FORMAT, "'%s': the single template has no $A", t->path);
    return TR_OK;
}

static int set_piece(struct tr_hf_tokenizer *t, int32_t id, const char *s, struct tr_error *err) {
    if (id < 0 || id >= t->n_ids) return tr_error_set(err, TR_ERR_FORMAT, "'%s': id %d of \"%s\"", t->path, id, s);
    if (t->piece[id] && strcmp(t->piece[id], s) != 0)
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': id %d is both \"%s\" and \"%s\"", t->path, id, t->piece[id], s);
    if (!t->piece[id] && !(t->piece[id] = dup_str(s))) return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    return TR_OK;
}

static int id_of(const cJSON *j, double lo, double hi) {
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble < hi && j->valuedouble == (int32_t)j->valuedouble;
}

static int read_model(struct tr_hf_tokenizer *t, const cJSON *root, struct tr_error *err) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (strcmp(type_of(m), "BPE") != 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': model %s is not supported (trident reads BPE, as Gemma, "
                            "Mistral and Llama 2 ship it)", t->path, type_of(m));
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *added = cJSON_GetObjectItemCaseSensitive(root,
                                                                                                          "added_tokens");
    const char *prefix = str_of(m, "continuing_subword_prefix"), *suffix = str_of(m, "end_of_word_suffix");
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    if ((prefix && *prefix) || (suffix && *suffix) || (cJSON_IsNumber(dropout) && dropout->valuedouble != 0))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "'%s': a BPE with a continuing_subword_prefix, an "
                            "end_of_word_suffix or dropout is not supported", t->path);
    if (!cJSON_IsObject(vocab)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': model.vocab is not an object", t->path);
    const cJSON *e;
    double top = -1;
    cJSON_ArrayForEach(e, vocab) {
        if (!id_of(e, 0, 1 << 30)) return tr_error_set(err, TR_ERR_FORMAT, "'%s': model.vocab \"%s\" is not an id",
                                                        t->path, e->string);
        if (e->valuedouble > top) top = e->valuedouble;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (!id_of(id, 0, 1 << 30) || !str_of(e, "content") || !*str_of(e, "content"))
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': an added token without an id or a content", t->path);
        if (id->valuedouble > top) top = id->valuedouble;
        t->n_added++;
    }
    t->n_ids = (int32_t)top + 1;
    t->piece = calloc((size_t)t->n_ids + 1, sizeof *t->piece);
    t->special = calloc((size_t)t->n_ids + 1, 1);
    t->added = calloc((size_t)t->n_added + 1, sizeof *t->added);
    if (!t->piece || !t->special || !t->added || tr_strtab_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab)))
        return tr_error_set(err, TR_ERR_NOMEM, "no memory for '%s'", t->path);
    int rc;
    cJSON_ArrayForEach(e, vocab) {
        if ((rc = set_piece(t, (int32_t)e->valuedouble, e->string, err)) != TR_OK) return rc;
        if (tr_strtab_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble, NULL))
            return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    }
    int k = 0;
    cJSON_ArrayForEach(e, added) {
        struct added *a = &t->added[k++];
        a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(e, "id")->valuedouble;
        if ((rc = set_piece(t, a->id, str_of(e, "content"), err)) != TR_OK) return rc;
        a->content = t->piece[a->id];
        a->len = strlen(a->content);
        a->lstrip = bool_of(e, "lstrip", 0);
        a->rstrip = bool_of(e, "rstrip", 0);
        t->special[a->id] = (unsigned char)bool_of(e, "special", 0);
    }
    for (int b = 0; b < 256; b++) {
        char code[8];
        snprintf(code, sizeof code, "<0x%02X>", b);
        t->byte_id[b] = tr_strtab_get(&t->vocab, code, 6);
    }
    t->byte_fallback = bool_of(m, "byte_fallback", 0);
    t->fuse_unk = bool_of(m, "fuse_unk", 0);
    t->ignore_merges = bool_of(m, "ignore_merges", 0);
    const char *unk = str_of(m, "unk_token");
    t->unk = unk ? tr_strtab_get(&t->vocab, unk, strlen(unk)) : -1;
    if (unk && t->unk < 0)
        return tr_error_set(err, TR_ERR_FORMAT, "'%s': model.unk_token \"%s\" is not in the vocabulary", t->path, unk);
    /* the merges: "a b" (older files) or ["a", "b"] */
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    const int n = cJSON_GetArraySize(merges);
    if (!(t->merged = malloc(((size_t)n + 1) * sizeof *t->merged)) || tr_strtab_init(&t->merges, (size_t)n))
        return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    struct sbuf both = {0};
    cJSON_ArrayForEach(e, merges) {
        const char *l = NULL, *r = NULL;
        char *sp = NULL;
        /* a string splits at its first space, as tokenizers reads it (a piece with a space
         * in it needs the array form) */
        if (cJSON_IsString(e) && (sp = strchr(e->valuestring, ' ')) != NULL) {
            *sp = 0; /* the parsed file is ours */
            l = e->valuestring, r = sp + 1;
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            l = cJSON_GetArrayItem(e, 0)->valuestring, r = cJSON_GetArrayItem(e, 1)->valuestring;
        }
        int32_t a = l ? tr_strtab_get(&t->vocab, l, strlen(l)) : -1, b = r ? tr_strtab_get(&t->vocab, r, strlen(r)) : -1;
        both.n = 0;
        if (l) sb_add(&both, l, strlen(l)), sb_add(&both, r, strlen(r));
        int32_t ab = l && !both.oom ? tr_strtab_get(&t->vocab, both.p, both.n) : -1;
        if (sp) *sp = ' ';
        if (a < 0 || b < 0 || ab < 0) {
            free(both.p);
            return tr_error_set(err, TR_ERR_FORMAT, "'%s': merge %d is not two pieces of the vocabulary whose join "
                                "is one too", t->path, t->n_merges + 1);
        }
        const int32_t key[2] = {a, b};
        int fresh;
        if (tr_strtab_put(&t->merges, (const char *)key, sizeof key, t->n_merges, &fresh)) {
            free(both.p);
            return tr_error_set(err, TR_ERR_NOMEM, "no memory");
        }
        if (fresh) t->merged[t->n_merges++] = ab; /* a repeated merge keeps its first rank */
    }
    free(both.p);
    return TR_OK;
}

int tr_hf_tokenizer_load(const char *path, struct tr_hf_tokenizer **out, struct tr_error *err) {
    *out = NULL;
    struct tr_hf_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    struct stat sb;
    const int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (snprintf(t->path, sizeof t->path, "%s%s", path, dir ? "/tokenizer.json" : "") >= (int)sizeof t->path) {
        free(t);
        return tr_error_set(err, TR_ERR_INVALID, "tokenizer: the path '%.64s...' is too long", path);
    }
    cJSON *root = NULL;
    int rc = tr_hf_json_load_max(t->path, MAX_TOKENIZER_BYTES, "a tokenizer.json", &root, err);
    char spm[sizeof t->path + 32];
    if (rc == TR_ERR_IO && dir && snprintf(spm, sizeof spm, "%s/tokenizer.model", path) < (int)sizeof spm &&
        stat(spm, &sb) == 0) /* a slow tokenizer's file alone: which one is read, and how to make it */
        tr_error_prefix(err, "tokenizer: %s holds a SentencePiece tokenizer.model and no tokenizer.json, which is the "
                        "one trident reads (AutoTokenizer.from_pretrained(DIR).save_pretrained(DIR) writes it)", path);
    if (!rc) rc = read_model(t, root, err);
    if (!rc) rc = read_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err);
    if (!rc) rc = read_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err);
    if (!rc) rc = read_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err);
    if (!rc) rc = read_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err);
    cJSON_Delete(root);
    if (rc) {
        tr_hf_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return TR_OK;
}

static void free_steps(struct step *s, int n) {
    for (int i = 0; i < n; i++) free(s[i].a), free(s[i].b);
}

void tr_hf_tokenizer_free(struct tr_hf_tokenizer *t) {
    if (!t) return;
    tr_strtab_free(&t->vocab);
    tr_strtab_free(&t->merges);
    for (int32_t i = 0; t->piece && i < t->n_ids; i++) free(t->piece[i]);
    free(t->piece);
    free(t->special);
    free(t->merged);
    free(t->added);
    free_steps(t->norm, t->n_norm);
    free_steps(t->dec, t->n_dec);
    free(t->meta);
    free(t);
}

int32_t tr_hf_tokenizer_n_ids(const struct tr_hf_tokenizer *t) { return t->n_ids; }

/* ---- encoding ---- */

struct ids {
    int32_t *p;
    int n, cap, oom;
};

static void ids_add(struct ids *v, int32_t id) {
    if (v->oom) return;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        int32_t *p = realloc(v->p, (size_t)cap * sizeof *p);
        if (!p) {
            v->oom = 1;
            return;
        }
        v->p = p, v->cap = cap;
    }
    v->p[v->n++] = id;
}

static size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* ---- merging: tokenizers' word.rs, a heap of the adjacent pairs by (rank, position) ---- */

struct cand {
    int32_t rank, pos, left, right; /* the pair (left, right) at symbol pos */
};

static int cand_less(const struct cand *a, const struct cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct cand *h, int *n, struct cand c) {
    int i = (*n)++;
    for (; i > 0 && cand_less(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, int *n) {
    const struct cand top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

/* The candidate of symbols a and b (b = next[a]) onto the heap, where they merge. */
static void push_pair(const struct tr_hf_tokenizer *t, const int32_t *id, int a, int b, struct cand *h, int *n) {
    if (a < 0 || b < 0) return;
    const int32_t key[2] = {id[a], id[b]};
    const int32_t r = tr_strtab_get(&t->merges, (const char *)key, sizeof key);
    if (r >= 0) heap_push(h, n, (struct cand){r, a, id[a], id[b]});
}

/* sym's ids merged in place: the pair of lowest rank, the leftmost of equals, until no
 * adjacent pair merges. O(n log n): a word may be a whole prompt (no pre-tokenizer). 0, or
 * -1 without memory. */
static int merge_all(const struct tr_hf_tokenizer *t, struct ids *sym) {
    const int n = sym->n;
    if (n < 2) return 0;
    int32_t *id = sym->p;
    int *prev = malloc((size_t)n * sizeof *prev), *next = malloc((size_t)n * sizeof *next), nh = 0;
    /* each merge removes a symbol and pushes at most two pairs: n + 2n candidates at most */
    struct cand *h = malloc((size_t)3 * (size_t)n * sizeof *h);
    if (!prev || !next || !h) {
        free(prev), free(next), free(h);
        return -1;
    }
    for (int i = 0; i < n; i++) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
    for (int i = 0; i + 1 < n; i++) push_pair(t, id, i, i + 1, h, &nh);
    while (nh) {
        const struct cand c = heap_pop(h, &nh);
        const int b = next[c.pos];
        /* stale: its left symbol merged away or changed, or its right one did */
        if (id[c.pos] != c.left || b < 0 || id[b] != c.right || prev[c.pos] == -2) continue;
        id[c.pos] = t->merged[c.rank];
        next[c.pos] = next[b];
        if (next[b] >= 0) prev[next[b]] = c.pos;
        prev[b] = -2, id[b] = -1; /* gone */
        push_pair(t, id, prev[c.pos], c.pos, h, &nh);
        push_pair(t, id, c.pos, next[c.pos], h, &nh);
    }
    int o = 0;
    for (int i = 0; i >= 0; i = next[i]) id[o++] = id[i];
    sym->n = o;
    free(prev), free(next), free(h);
    return 0;
}

/* The BPE of one word into out. */
static int bpe_word(const struct tr_hf_tokenizer *t, const char *w, size_t n, struct ids *out, struct tr_error *err) {
    int32_t whole;
    if (t->ignore_merges && (whole = tr_strtab_get(&t->vocab, w, n)) >= 0) {
        ids_add(out, whole);
        return TR_OK;
    }
    struct ids sym = {0};
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((unsigned char)w[i]);
        if (k > n - i) k = n - i;
        int32_t id = tr_strtab_get(&t->vocab, w + i, k);
        int bytes = id < 0 && t->byte_fallback;
        for (size_t j = 0; bytes && j < k; j++) bytes = t->byte_id[(unsigned char)w[i + j]] >= 0;
        if (id >= 0) {
            ids_add(&sym, id);
        } else if (bytes) {
            for (size_t j = 0; j < k; j++) ids_add(&sym, t->byte_id[(unsigned char)w[i + j]]);
        } else if (t->unk < 0) {
            free(sym.p);
            return tr_error_set(err, TR_ERR_INVALID, "tokenizer '%s': '%.*s' is not in the vocabulary, which has no "
                                "unk_token", t->path, (int)k, w + i);
        } else if (!(t->fuse_unk && sym.n && sym.p[sym.n - 1] == t->unk)) {
            ids_add(&sym, t->unk);
        }
        i += k;
    }
    const int rc = merge_all(t, &sym);
    if (rc) {
        free(sym.p);
        return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    }
    for (int i = 0; i < sym.n; i++) ids_add(out, sym.p[i]);
    const int oom = sym.oom;
    free(sym.p);
    return oom ? tr_error_set(err, TR_ERR_NOMEM, "no memory") : TR_OK;
}

/* A segment of text between added tokens (at offset `at` of the text): normalized,
 * pre-tokenized and each word's BPE. */
static int encode_segment(const struct tr_hf_tokenizer *t, const char *s, size_t n, size_t at, struct ids *out,
                          struct tr_error *err) {
    if (n == 0) return TR_OK;
    struct sbuf cur = {0}, next = {0};
    sb_add(&cur, s, n);
    for (int i = 0; i < t->n_norm; i++) {
        const struct step *st = &t->norm[i];
        next.n = 0;
        if (st->kind == STEP_PREPEND) {
            if (cur.n) sb_add(&next, st->a, strlen(st->a));
            sb_add(&next, cur.p ? cur.p : "", cur.n);
        } else {
            replace_into(&next, cur.p, cur.n, st->a, st->b);
        }
        struct sbuf tmp = cur;
        cur = next, next = tmp;
    }
    int rc = TR_OK;
    if (t->pre == PRE_METASPACE && cur.n) {
        next.n = 0;
        const size_t lr = strlen(t->meta);
        replace_into(&next, cur.p, cur.n, " ", t->meta);
        cur.n = 0;
        const int starts = next.n >= lr && memcmp(next.p, t->meta, lr) == 0;
        if (!starts && (t->meta_prepend == 2 || (t->meta_prepend == 1 && at == 0))) sb_add(&cur, t->meta, lr);
        sb_add(&cur, next.p, next.n);
    }
    if (cur.oom || next.oom) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    /* the words: split before each replacement (Metaspace's split: MergedWithNext), or at
     * Split's pattern by its behaviour; empty words are none */
    const char *w = cur.p;
    const size_t len = rc ? 0 : cur.n, lp = t->meta ? strlen(t->meta) : 0;
    const int splits = (t->pre == PRE_METASPACE && t->meta_split) || t->pre == PRE_SPLIT;
    const enum split_how how = t->pre == PRE_METASPACE ? SPLIT_WITH_NEXT : t->split_how;
    size_t start = 0;
    for (size_t i = 0; !rc && splits && i < len;) {
        if (i + lp > len || memcmp(w + i, t->meta, lp) != 0) {
            i++;
            continue;
        }
        const size_t end = how == SPLIT_WITH_PREVIOUS ? i + lp : i;
        if (end > start) rc = bpe_word(t, w + start, end - start, out, err);
        if (!rc && how == SPLIT_ISOLATED) rc = bpe_word(t, w + i, lp, out, err);
        start = how == SPLIT_WITH_NEXT ? i : i + lp;
        i += lp;
    }
    if (!rc && len > start) rc = bpe_word(t, w + start, len - start, out, err);
    free(cur.p);
    free(next.p);
    return rc;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int tr_hf_encode(const struct tr_hf_tokenizer *t, const char *text, int32_t **ids, int *n, struct tr_error *err) {
    *ids = NULL, *n = 0;
    struct ids out = {0};
    for (int i = 0; i < t->n_before; i++) ids_add(&out, t->before[i]);
    const size_t len = strlen(text);
    size_t seg = 0; /* the start of the text not yet encoded */
    int rc = TR_OK;
    for (size_t i = 0; !rc && i <= len;) {
        const struct added *best = NULL;
        for (int k = 0; i < len && k < t->n_added; k++) {
            const struct added *a = &t->added[k];
            if (a->len <= len - i && memcmp(text + i, a->content, a->len) == 0 && (!best || a->len > best->len))
                best = a;
        }
        if (!best && i < len) {
            i++;
            continue;
        }
        size_t end = i, next = best ? i + best->len : len;
        if (best && best->lstrip)
            while (end > seg && is_ws(text[end - 1])) end--;
        if (best && best->rstrip)
            while (next < len && is_ws(text[next])) next++;
        rc = encode_segment(t, text + seg, end - seg, seg, &out, err);
        if (best) ids_add(&out, best->id);
        seg = next;
        i = best ? next : len + 1;
    }
    for (int i = 0; i < t->n_after; i++) ids_add(&out, t->after[i]);
    if (!rc && out.oom) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    if (rc) {
        free(out.p);
        return rc;
    }
    *ids = out.p;
    *n = out.n;
    return TR_OK;
}

/* ---- decoding ---- */

int tr_hf_utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))) return 0;
        if (k == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

/* "<0xHH>" -> HH, else -1 */
static int byte_piece(const char *s) {
    int v = 0;
    if (strlen(s) != 6 || strncmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    for (int i = 3; i < 5; i++) {
        const char c = s[i];
        v = 16 * v + (c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                     : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -256);
    }
    return v < 0 ? -1 : v;
}

struct toks {
    char **s;
    int n;
};

/* One decoder step over the tokens, in place (strings owned by tk). 0, or -1 without memory. */
static int decode_step(const struct step *st, struct toks *tk) {
    int o = 0;
    struct sbuf b = {0};
    switch (st->kind) {
    case STEP_REPLACE:
        for (int i = 0; i < tk->n; i++) {
            b = (struct sbuf){0};
            sb_add(&b, "", 0);
            replace_into(&b, tk->s[i], strlen(tk->s[i]), st->a, st->b);
            if (b.oom) return free(b.p), -1;
            free(tk->s[i]);
            tk->s[i] = b.p;
        }
        return 0;
    case STEP_BYTE_FALLBACK:
        for (int i = 0; i < tk->n;) {
            int j = i;
            b = (struct sbuf){0};
            sb_add(&b, "", 0);
            for (; j < tk->n && byte_piece(tk->s[j]) >= 0; j++) {
                const char c = (char)byte_piece(tk->s[j]);
                sb_add(&b, &c, 1);
            }
            if (j == i) { /* not a byte: kept */
                free(b.p);
                tk->s[o++] = tk->s[i++];
                continue;
            }
            if (b.oom) return free(b.p), -1;
            if (tr_hf_utf8_valid((const unsigned char *)b.p, b.n)) {
                for (int k = i; k < j; k++) free(tk->s[k]);
                tk->s[o++] = b.p;
            } else { /* each byte becomes U+FFFD */
                free(b.p);
                for (int k = i; k < j; k++) {
                    char *r = realloc(tk->s[k], 4);
                    if (!r) return -1;
                    memcpy(r, "\xEF\xBF\xBD", 4);
                    tk->s[o++] = r;
                }
            }
            i = j;
        }
        tk->n = o;
        return 0;
    case STEP_FUSE:
        b = (struct sbuf){0};
        sb_add(&b, "", 0);
        for (int i = 0; i < tk->n; i++) sb_add(&b, tk->s[i], strlen(tk->s[i]));
        if (b.oom) return free(b.p), -1;
        for (int i = 0; i < tk->n; i++) free(tk->s[i]);
        tk->s[0] = b.p;
        tk->n = tk->n ? 1 : (free(b.p), 0);
        return 0;
    case STEP_STRIP: {
        const size_t lc = strlen(st->a);
        for (int i = 0; i < tk->n; i++) {
            char *s = tk->s[i];
            size_t n = strlen(s), from = 0;
            for (int k = 0; k < st->start && from + lc <= n && memcmp(s + from, st->a, lc) == 0; k++) from += lc;
            for (int k = 0; k < st->stop && n >= from + lc && memcmp(s + n - lc, st->a, lc) == 0; k++) n -= lc;
            memmove(s, s + from, n - from);
            s[n - from] = 0;
        }
        return 0;
    }
    case STEP_PREPEND:
        break;
    }
    return 0;
}

int tr_hf_decode(const struct tr_hf_tokenizer *t, const int32_t *ids, int n, char **text, struct tr_error *err) {
    *text = NULL;
    struct toks tk = {calloc((size_t)n + 1, sizeof(char *)), 0};
    if (!tk.s) return tr_error_set(err, TR_ERR_NOMEM, "no memory");
    int rc = TR_OK;
    for (int i = 0; i < n && !rc; i++) {
        /* an id the vocabulary lacks (a model's vocab_size past the tokenizer's): skipped,
         * as tokenizers' decode skips it, the rest of the text kept */
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->piece[ids[i]]) continue;
        if (!t->special[ids[i]] && !(tk.s[tk.n++] = dup_str(t->piece[ids[i]])))
            rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    }
    for (int i = 0; i < t->n_dec && !rc; i++)
        if (decode_step(&t->dec[i], &tk)) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    struct sbuf out = {0};
    sb_add(&out, "", 0);
    for (int i = 0; i < tk.n && !rc; i++) { /* without a decoder, tokenizers joins with spaces */
        if (i && !t->has_decoder) sb_add(&out, " ", 1);
        sb_add(&out, tk.s[i], strlen(tk.s[i]));
    }
    for (int i = 0; i < tk.n; i++) free(tk.s[i]);
    free(tk.s);
    if (!rc && out.oom) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    if (rc) {
        free(out.p);
        return rc;
    }
    *text = out.p;
    return TR_OK;
}
