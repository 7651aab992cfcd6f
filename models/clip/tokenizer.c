/* CLIP's byte-level BPE tokenizer (tokenizer.h). The vocabulary and the merge ranks are
 * tables of their strings (strtab.h) (a merge is "left right", as merges.txt writes
 * it); a word is merged as GPT-2's BPE does: the adjacent pair of lowest rank, everywhere
 * in the word, until none is left. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/file.h"
#include "hf_json.h"
#include "strtab.h"
#include "tokenizer.h"

struct tr_clip_tokenizer {
    struct tr_strtab vocab, ranks;
    char byte_enc[256][3]; /* each byte as the UTF-8 of GPT-2's bytes_to_unicode character */
    int32_t bos, eos;
};

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

int tr_clip_tokenizer_load(const char *dir, struct tr_clip_tokenizer **out, struct tr_error *err) {
    *out = NULL;
    char path[4096];
    struct tr_clip_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return tr_error_set(err, TR_ERR_NOMEM, "clip tokenizer: no memory");
    byte_encoder(t->byte_enc);
    cJSON *root = NULL;
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    int rc = tr_hf_json_load(path, &root, err);
    if (!rc && tr_strtab_init(&t->vocab, (size_t)cJSON_GetArraySize(root))) rc = tr_error_set(err, TR_ERR_NOMEM, "no memory");
    const cJSON *e, *entries = rc ? NULL : root;
    cJSON_ArrayForEach(e, entries) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8) {
            rc = tr_error_set(err, TR_ERR_FORMAT, "'%s': \"%s\" is not a token id", path, e->string);
            break;
        }
        if ((rc = tr_strtab_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble, NULL)) != TR_OK) break;
    }
    cJSON_Delete(root);
    char *merges = NULL;
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if (!rc) rc = read_text(path, &merges, err);
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
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' ')) {
            rc = tr_error_set(err, TR_ERR_FORMAT, "'%s':%d: '%.40s' is not a merge (two symbols, one space)", path,
                              lineno, line);
            break;
        }
        if ((rc = tr_strtab_put(&t->ranks, line, n, rank++, NULL)) != TR_OK) break;
    }
    free(merges);
    t->bos = rc ? -1 : tr_strtab_get(&t->vocab, "<|startoftext|>", 15);
    t->eos = rc ? -1 : tr_strtab_get(&t->vocab, "<|endoftext|>", 13);
    if (!rc && (t->bos < 0 || t->eos < 0))
        rc = tr_error_set(err, TR_ERR_FORMAT, "'%s/vocab.json' has no <|startoftext|> or <|endoftext|>", dir);
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

static int is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* The length of the piece at s (CLIP's pre-tokenizer pattern, in its order), 0 at a space. */
static size_t piece(const char *s) {
    static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t i = 0; i < sizeof contractions / sizeof contractions[0]; i++)
        if (strncmp(s, contractions[i], strlen(contractions[i])) == 0) return strlen(contractions[i]);
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0;
    if (is_letter(u[0])) {
        while (u[n] && is_letter(u[n])) n++;
    } else if (is_digit(u[0])) {
        n = 1;
    } else if (!is_space(u[0])) {
        while (u[n] && !is_space(u[n]) && !is_letter(u[n]) && !is_digit(u[n])) n++;
    }
    return n;
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

int tr_clip_tokenize(const struct tr_clip_tokenizer *t, const char *text, int32_t *ids, int n, struct tr_error *err) {
    if (!t || !text || !ids || n < 2)
        return tr_error_set(err, TR_ERR_INVALID, "clip tokenizer: NULL argument or length %d below 2", n);
    size_t len = strlen(text);
    char *low = malloc(len + 1);
    if (!low) return tr_error_set(err, TR_ERR_NOMEM, "clip tokenizer: no memory");
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = (unsigned char)text[i];
        low[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    int k = 0;
    ids[k++] = t->bos;
    for (const char *p = low; *p && k < n - 1;) {
        if (is_space((unsigned char)*p)) {
            p++;
            continue;
        }
        size_t m = piece(p);
        bpe(t, p, m, ids, n - 1, &k);
        p += m;
    }
    free(low);
    while (k < n) ids[k++] = t->eos;
    return TR_OK;
}
