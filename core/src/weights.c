/* Weights: one host buffer per PARAM, made from a seed or read from a safetensors file,
 * bound to the graph so every backend compiled from it sees the same bytes. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "trident/parse.h"
#include "trident/safetensors.h"
#include "trident/weights.h"
#include "ini_text.h"
#include "shard_index.h"

struct tr_weights {
    int n;
    void **bufs;                /* one per PARAM, in param order */
    uint64_t bytes;
    int n_seeded;               /* non-fresh PARAMs the file lacked, made from the seed */
    char **seeded;              /* their names, copied: the graph may go first */
    int n_unused;               /* the files' tensors no PARAM read (tr_weights_n_unused) */
    int n_unused_files;
    int lora_read;              /* the files' LoRA adapters a PARAM read (LoRA is on) */
    struct unused_file {        /* one per file with any */
        char *path;
        int n_tensors;          /* all of the file's */
        int n;                  /* those not read, named in the file's order */
        char **names;
    } *unused;
};

void tr_weights_free(struct tr_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) tr_host_free(w->bufs[i]);
    for (int i = 0; i < w->n_seeded; i++) free(w->seeded[i]);
    free(w->seeded);
    for (int i = 0; i < w->n_unused_files; i++) {
        for (int j = 0; j < w->unused[i].n; j++) free(w->unused[i].names[j]);
        free(w->unused[i].names);
        free(w->unused[i].path);
    }
    free(w->unused);
    free(w->bufs);
    free(w);
}

int tr_weights_n_seeded(const struct tr_weights *w) { return w ? w->n_seeded : 0; }

const char *tr_weights_seeded_name(const struct tr_weights *w, int i) {
    return w && i >= 0 && i < w->n_seeded ? w->seeded[i] : NULL;
}

int tr_weights_warn_seeded(const struct tr_weights *w, const char *path, uint64_t seed, FILE *f) {
    const int n = tr_weights_n_seeded(w);
    if (n == 0 || !f) return 0;
    fprintf(f, "trident: warning: %s lacks %d tensor%s the model has, made from [run] seed %llu: ", path ? path : "",
            n, n == 1 ? "" : "s", (unsigned long long)seed);
    const int shown = n > TR_WEIGHTS_WARN_NAMES ? TR_WEIGHTS_WARN_NAMES : n;
    for (int i = 0; i < shown; i++) fprintf(f, "%s%s", i ? ", " : "", w->seeded[i]);
    if (n > shown) fprintf(f, " and %d more", n - shown);
    fputc('\n', f);
    return n;
}

int tr_weights_n_unused(const struct tr_weights *w) { return w ? w->n_unused : 0; }

const char *tr_weights_unused_name(const struct tr_weights *w, int i) {
    if (!w || i < 0) return NULL;
    for (int k = 0; k < w->n_unused_files; i -= w->unused[k++].n)
        if (i < w->unused[k].n) return w->unused[k].names[i];
    return NULL;
}

#define TR_NAME_PATTERN_MAX 160

/* src cut to its first d dot-separated components and ".*" when it has more */
static void cut_pattern(const char *src, int d, char *out, size_t cap) {
    const char *c = src;
    for (int k = 0; k < d && c; k++) {
        c = strchr(c, '.');
        if (c) c++;
    }
    if (!c || !*c) snprintf(out, cap, "%s", src);
    else snprintf(out, cap, "%.*s*", (int)(c - src), src);
}

static int n_components(const char *s) {
    int n = 1;
    for (; *s; s++) n += *s == '.';
    return n;
}

/* A name as a warning shows it: control characters (a file's names are anyone's bytes)
 * as '?', so a name cannot forge or garble a log line. */

/* Writes (with f) each of pat[0..n) once, in order, with how many it stands for, the first
 * TR_WEIGHTS_WARN_NAMES of them and "and K more"; returns how many distinct ones there are. */
static int list_patterns(FILE *f, char (*pat)[TR_NAME_PATTERN_MAX], int n) {
    int distinct = 0;
    for (int i = 0; i < n; i++) {
        int earlier = 0, count = 1;
        for (int j = 0; j < i && !earlier; j++) earlier = strcmp(pat[i], pat[j]) == 0;
        if (earlier) continue;
        for (int j = i + 1; j < n; j++) count += strcmp(pat[i], pat[j]) == 0;
        if (f && distinct < TR_WEIGHTS_WARN_NAMES) {
            fprintf(f, "%s%s", distinct ? ", " : "", pat[i]);
            if (count > 1) fprintf(f, " (%d)", count);
        }
        distinct++;
    }
    if (f && distinct > TR_WEIGHTS_WARN_NAMES) fprintf(f, " and %d more", distinct - TR_WEIGHTS_WARN_NAMES);
    return distinct;
}

int tr_weights_warn_unused(const struct tr_weights *w, FILE *f) {
    if (!w || !f) return 0;
    for (int k = 0; k < w->n_unused_files; k++) {
        const struct unused_file *u = &w->unused[k];
        if (u->n == u->n_tensors)
            fprintf(f, "trident: warning: %s: none of its %d tensor%s is the model's (not read): ", u->path,
                    u->n_tensors, u->n_tensors == 1 ? "" : "s");
        else
            fprintf(f, "trident: warning: %s: %d of its %d tensors are not the model's (not read; a checkpoint of "
                    "another task, or a config that leaves them out?): ", u->path, u->n, u->n_tensors);
        char (*pat)[TR_NAME_PATTERN_MAX] = malloc((size_t)u->n * sizeof *pat);
        if (!pat) {
            fputs("(no memory to name them)\n", f);
            continue;
        }
        int depth = 1, lora = 0, head = 0;
        for (int i = 0; i < u->n; i++) {
            tr_text_layer_pattern(u->names[i], pat[i], sizeof pat[i]);
            depth = n_components(u->names[i]) > depth ? n_components(u->names[i]) : depth;
            lora |= strstr(u->names[i], "lora_A") || strstr(u->names[i], "lora_B");
            head |= !strcmp(u->names[i], "lm_head.weight");
        }
        /* too many to name one by one: cut to fewer components until they fit, the names
         * as written (a whole layer left over shows as "model.layers.1.*") before layer
         * numbers as "*" at each depth, down to the first component ("decoder.*") */
        int cut = 0;
        for (int d = depth; d >= 1 && list_patterns(NULL, pat, u->n) > TR_WEIGHTS_WARN_NAMES; d--, cut = 1)
            for (int as_written = 1; as_written >= 0; as_written--) {
                for (int i = 0; i < u->n; i++) {
                    char full[TR_NAME_PATTERN_MAX];
                    if (as_written) snprintf(full, sizeof full, "%s", u->names[i]);
                    else tr_text_layer_pattern(u->names[i], full, sizeof full);
                    cut_pattern(full, d, pat[i], sizeof pat[i]);
                }
                if (list_patterns(NULL, pat, u->n) <= TR_WEIGHTS_WARN_NAMES || (d == 1 && !as_written)) break;
            }
        for (int i = 0; cut && i < u->n; i++) { /* a cut that stands for one name: the name itself */
            int same = 0;
            for (int j = 0; j < u->n && same < 2; j++) same += strcmp(pat[i], pat[j]) == 0;
            if (same == 1) snprintf(pat[i], sizeof pat[i], "%s", u->names[i]);
        }
        for (int i = 0; i < u->n; i++) tr_text_printable(pat[i]);
        list_patterns(f, pat, u->n);
        free(pat);
        if (lora && w->lora_read) /* LoRA is on: these are of layers it leaves out */
            fputs(" (LoRA adapter tensors of layers outside [model] lora_targets: name those layers there to read "
                  "them)", f);
        else if (lora) fputs(" (LoRA adapter tensors: predict and generate read them with [model] lora_predict = true)", f);
        if (head) /* a tied config over a checkpoint with its own head: transformers keeps the file's where they differ */
            fputs(" (lm_head.weight: the config ties the head to the embedding table (tie_word_embeddings); "
                  "transformers uses the file's head where the two differ: [model] tie_word_embeddings = false "
                  "reads it)", f);
        fputc('\n', f);
    }
    return w->n_unused;
}

/* Records that the non-fresh PARAM `name` was made from the seed (capacity: one per PARAM). */
static int note_seeded(struct tr_weights *w, int n_params, const char *name, struct tr_error *err) {
    if (!w->seeded) w->seeded = calloc((size_t)n_params, sizeof *w->seeded);
    char *copy = w->seeded ? malloc(strlen(name) + 1) : NULL;
    if (!copy) return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory for the name '%s'", name);
    w->seeded[w->n_seeded++] = strcpy(copy, name);
    return TR_OK;
}

uint64_t tr_weights_bytes(const struct tr_weights *w) { return w ? w->bytes : 0; }

static int weights_new(struct tr_graph *g, struct tr_weights **out, struct tr_error *err) {
    int rc = tr_graph_status(g, err);
    if (rc) {
        if (err) tr_error_prefix(err, "weights: the graph has an error");
        return rc;
    }
    struct tr_weights *w = calloc(1, sizeof *w);
    int n = tr_graph_n_params(g);
    if (w) w->bufs = calloc((size_t)(n ? n : 1), sizeof *w->bufs);
    if (!w || !w->bufs) {
        free(w);
        return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory for %d parameters", n);
    }
    *out = w;
    return TR_OK;
}

/* The next PARAM's buffer, owned by w from here on (tr_weights_free frees it). */
static int weights_alloc(struct tr_weights *w, const struct tr_tensor *t, void **p, struct tr_error *err) {
    size_t nb = tr_tensor_nbytes(t);
    int rc = tr_host_alloc(p, nb, err);
    if (rc) return rc;
    w->bufs[w->n++] = *p;
    w->bytes += nb;
    return TR_OK;
}

/* Bound only once every buffer is filled, so a failure leaves the graph as it was. */
static int bind_all(struct tr_graph *g, const struct tr_weights *w, struct tr_error *err) {
    for (int i = 0; i < w->n; i++) {
        int rc = tr_graph_bind_param(g, tr_graph_param(g, i), w->bufs[i], err);
        if (rc) return rc;
    }
    return TR_OK;
}

/* Elements [lo, hi) of t: mean + std·normal(seed, key, i), rounded to t's dtype. */
struct fill_job {
    struct tr_tensor *t;
    uint64_t seed, key;
    double mean, std;
    int64_t lo, hi;
};

static void fill_one(const struct fill_job *j, int64_t i, double z) {
    double v = j->mean + j->std * z;
    switch (j->t->dtype) {
    case TR_DTYPE_F32: ((float *)j->t->data)[i] = (float)v; break;
    case TR_DTYPE_BF16: ((uint16_t *)j->t->data)[i] = tr_f32_to_bf16((float)v); break;
    case TR_DTYPE_F16: ((uint16_t *)j->t->data)[i] = tr_f32_to_f16((float)v); break;
    default: ((double *)j->t->data)[i] = v; break;
    }
}

/* Element i is mean + std·tr_rng_normal(seed, key, i), drawn a pair at a time. */
static void *fill_range(void *arg) {
    const struct fill_job *j = arg;
    for (int64_t i = j->lo; i < j->hi;) {
        double even, odd;
        tr_rng_normal2(j->seed, j->key, (uint64_t)i >> 1, &even, &odd);
        if (!(i & 1)) fill_one(j, i++, even);
        if (i < j->hi) fill_one(j, i++, odd);
    }
    return NULL;
}

/* A pair of draws costs ~60 ns (two hashes, log, sqrt, sin and cos, for two values):
 * bert-base's 108M values take ~3 s on one core, so large tensors are split over threads. Each element depends only on
 * (seed, name, index), so the result is the same for any thread count. */
#define FILL_THREADS_MAX 16
#define FILL_MIN_PER_THREAD (1 << 18)

static int fill_normal(struct tr_tensor *t, const char *name, uint64_t seed, double mean, double std,
                       struct tr_error *err) {
    if (t->dtype != TR_DTYPE_F32 && t->dtype != TR_DTYPE_BF16 && t->dtype != TR_DTYPE_F16 && t->dtype != TR_DTYPE_F64)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "weights: parameter '%s' is %s; only float parameters are drawn "
                            "from a seed", name, tr_dtype_name((enum tr_dtype)t->dtype));
    int64_t n = tr_tensor_numel(t);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t nt = n / FILL_MIN_PER_THREAD;
    if (nt > cpus) nt = cpus;
    if (nt > FILL_THREADS_MAX) nt = FILL_THREADS_MAX;
    if (nt < 1) nt = 1;
    struct fill_job jobs[FILL_THREADS_MAX];
    pthread_t tids[FILL_THREADS_MAX];
    int started[FILL_THREADS_MAX] = {0};
    for (int64_t k = 0; k < nt; k++)
        jobs[k] = (struct fill_job){t, seed, tr_hash_str(name), mean, std, n * k / nt, n * (k + 1) / nt};
    /* Job 0 runs here; a thread that cannot start has its job run here too. */
    for (int64_t k = 1; k < nt; k++) started[k] = pthread_create(&tids[k], NULL, fill_range, &jobs[k]) == 0;
    fill_range(&jobs[0]);
    for (int64_t k = 1; k < nt; k++) {
        if (started[k]) pthread_join(tids[k], NULL);
        else fill_range(&jobs[k]);
    }
    return TR_OK;
}

/* PARAM i of g made from the seed, into memory of w. */
static int seed_one(struct tr_weights *w, struct tr_graph *g, int i, uint64_t seed, struct tr_error *err) {
    int id = tr_graph_param(g, i);
    struct tr_tensor t = tr_node_tensor(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int rc = weights_alloc(w, &t, &t.data, err);
    if (!rc) rc = fill_normal(&t, tr_node_name(g, id), seed, a ? a->floats[0] : 0, a ? a->floats[1] : 0, err);
    return rc;
}

int tr_weights_from_seed(struct tr_graph *g, uint64_t seed, struct tr_weights **out, struct tr_error *err) {
    *out = NULL;
    struct tr_weights *w;
    int rc = weights_new(g, &w, err);
    if (rc) return rc;
    for (int i = 0; i < tr_graph_n_params(g) && !rc; i++) rc = seed_one(w, g, i, seed, err);
    if (!rc) rc = bind_all(g, w, err);
    if (rc) {
        tr_weights_free(w);
        return rc;
    }
    *out = w;
    return TR_OK;
}

/* Element i of a float tensor's data as a double. */
static double float_at(const void *data, enum tr_dtype dt, int64_t i) {
    switch (dt) {
    case TR_DTYPE_F64: return ((const double *)data)[i];
    case TR_DTYPE_BF16: return tr_bf16_to_f32(((const uint16_t *)data)[i]);
    case TR_DTYPE_F16: return tr_f16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

/* Copy src (a view into the file) into dst, converting between float dtypes as torch's
 * .to(dtype) does when transformers loads a checkpoint of another dtype (a bf16 release
 * into an f32 model is exact; a narrower dtype rounds to nearest even). */
static int load_one(const struct tr_tensor *src, struct tr_tensor *dst, const char *name, const char *path,
                    struct tr_error *err) {
    char s1[128], s2[128];
    if (src->ndim != dst->ndim || memcmp(src->shape, dst->shape, sizeof(int64_t) * (size_t)dst->ndim) != 0)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: tensor '%s' has shape %s, the graph expects %s", path, name,
                            tr_shape_str(src->ndim, src->shape, s1, sizeof s1),
                            tr_shape_str(dst->ndim, dst->shape, s2, sizeof s2));
    int64_t n = tr_tensor_numel(dst);
    const enum tr_dtype st = (enum tr_dtype)src->dtype, dt = (enum tr_dtype)dst->dtype;
    if (st == dt) {
        memcpy(dst->data, src->data, tr_tensor_nbytes(dst));
        return TR_OK;
    }
    if (!tr_dtype_is_float(st) || !tr_dtype_is_float(dt))
        return tr_error_set(err, TR_ERR_SHAPE,
                            "%s: tensor '%s' is %s, the graph expects %s (floats are converted between f64, f32, bf16 "
                            "and f16; nothing else)",
                            path, name, tr_dtype_name(st), tr_dtype_name(dt));
    /* through f32, except f64 to f64 (same dtype, above): bf16 and f16 round once from f32,
     * which holds every bf16 and f16 exactly */
    for (int64_t i = 0; i < n; i++) {
        double v = float_at(src->data, st, i);
        switch (dt) {
        case TR_DTYPE_F64: ((double *)dst->data)[i] = v; break;
        case TR_DTYPE_BF16: ((uint16_t *)dst->data)[i] = tr_f32_to_bf16((float)v); break;
        case TR_DTYPE_F16: ((uint16_t *)dst->data)[i] = tr_f32_to_f16((float)v); break;
        default: ((float *)dst->data)[i] = (float)v; break;
        }
    }
    return TR_OK;
}

/* Hugging Face's base-model prefix: a model saved bare ("embeddings.x", as transformers 5
 * saves CLIPTextModel) loads into one whose names carry its prefix ("text_model.
 * embeddings.x", as the published Stable Diffusion checkpoints have them). `name` is
 * looked up without its first component only when the file holds no name at all under
 * that component, so a file of another model is not half matched. */
static int get_bare(const struct tr_safetensors *st, const char *name, struct tr_tensor *src, struct tr_error *err) {
    const char *dot = strchr(name, '.');
    if (!dot || !dot[1]) return TR_ERR_NOT_FOUND;
    const size_t n = (size_t)(dot - name) + 1;
    for (int i = 0; i < tr_safetensors_count(st); i++)
        if (strncmp(tr_safetensors_name(st, i), name, n) == 0) return TR_ERR_NOT_FOUND;
    return tr_safetensors_get(st, dot + 1, src, err);
}

int tr_weights_load(struct tr_graph *g, const char *path, struct tr_weights **out, struct tr_error *err) {
    return tr_weights_load_opts(g, path, NULL, out, err);
}

int tr_weights_load_seeded(struct tr_graph *g, const char *path, uint64_t seed, struct tr_weights **out,
                           struct tr_error *err) {
    const struct tr_weights_load_opts o = {.seed = seed, .missing_seed = 0};
    return tr_weights_load_opts(g, path, &o, out, err);
}

/* The files a path names: itself, or for a directory (a diffusers pipeline's layout:
 * unet/diffusion_pytorch_model.safetensors, vae/..., text_encoder/model.safetensors) every
 * *.safetensors in it and in its immediate subdirectories, in name order. */
#define MAX_FILES 128 /* a 70B model in f32 is 30 shards of 10 GB */
struct files {
    int n;
    char path[MAX_FILES][TR_WEIGHTS_PATH_MAX];
    struct tr_safetensors *st[MAX_FILES];
    unsigned char *read[MAX_FILES]; /* per tensor, in header order: a PARAM read it */
    size_t dir_len;                 /* a directory's: strlen(path) + 1, where a file's own name begins */
    dev_t dev[MAX_FILES];           /* collect's, of path[i] until the paths are sorted */
    ino_t ino[MAX_FILES];
};

static int by_path(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static int is_safetensors(const char *name) {
    size_t n = strlen(name);
    return n > 12 && strcmp(name + n - 12, ".safetensors") == 0;
}

/* One directory's part of f: its .safetensors files first, then (depth 0) its
 * subdirectories', so that a file reached twice (a link to it, a link to its directory)
 * is read once, by its shallowest path. A .safetensors link to nothing (a Hub cache's
 * blob of an interrupted download) is refused by name, not skipped. */
static int collect(const char *dir, int depth, struct files *f, struct tr_error *err) {
    DIR *d = opendir(dir);
    if (!d) return tr_error_set(err, TR_ERR_IO, "cannot read the directory '%s'", dir);
    struct dirent *e;
    int rc = TR_OK;
    for (int pass = 0; pass < 2 && !rc; pass++, rewinddir(d)) {
        while (!rc && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            char p[TR_WEIGHTS_PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
            struct stat sb, lb;
            if (stat(p, &sb) != 0) {
                char to[TR_WEIGHTS_PATH_MAX];
                const ssize_t n = readlink(p, to, sizeof to - 1);
                if (pass == 0 && is_safetensors(e->d_name) && lstat(p, &lb) == 0 && S_ISLNK(lb.st_mode) && n >= 0)
                    rc = tr_error_set(err, TR_ERR_IO, "weights: '%s' is a link to '%.*s', which is not there (an "
                                      "interrupted download?)", p, (int)n, to);
                continue;
            }
            if (pass == 1) {
                if (S_ISDIR(sb.st_mode) && depth == 0) rc = collect(p, 1, f, err);
                continue;
            }
            if (!S_ISREG(sb.st_mode) || !is_safetensors(e->d_name)) continue;
            int seen = 0;
            for (int i = 0; i < f->n && !seen; i++) seen = f->dev[i] == sb.st_dev && f->ino[i] == sb.st_ino;
            if (seen) continue;
            if (f->n == MAX_FILES)
                rc = tr_error_set(err, TR_ERR_INVALID, "weights: more than %d .safetensors files under '%s'", MAX_FILES,
                                  dir);
            else f->dev[f->n] = sb.st_dev, f->ino[f->n] = sb.st_ino, memcpy(f->path[f->n++], p, sizeof p);
        }
    }
    closedir(d);
    return rc;
}

/* The first .safetensors below dir, 2 to 4 levels down (a Hub cache's
 * snapshots/REV/model.safetensors), its path under dir in found; 0 when none. */
static int deeper_safetensors(const char *dir, const char *rel, int depth, char *found, size_t cap) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int hit = 0;
    while (d && !hit && (e = readdir(d)) != NULL) {
        char p[TR_WEIGHTS_PATH_MAX], r[TR_WEIGHTS_PATH_MAX];
        struct stat sb;
        if (e->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p ||
            snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >= (int)sizeof r || stat(p, &sb) != 0)
            continue;
        if (S_ISREG(sb.st_mode) && is_safetensors(e->d_name) && depth >= 2) hit = snprintf(found, cap, "%s", r) > 0;
        else if (S_ISDIR(sb.st_mode) && depth < 4) hit = deeper_safetensors(p, r, depth + 1, found, cap);
    }
    if (d) closedir(d);
    return hit;
}

/* The length of a trailing shard suffix "-00001-of-00002" of s[0..n) (save_pretrained's),
 * 0 when there is none. */
static size_t shard_suffix(const char *s, size_t n) {
    size_t i = n, d = 0;
    for (; i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9'; i--) d++;
    if (!d || i < 4 || strncmp(s + i - 4, "-of-", 4) != 0) return 0;
    i -= 4, d = 0;
    for (; i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9'; i--) d++;
    return d && i > 0 && s[i - 1] == '-' ? n - (i - 1) : 0;
}

/* f's i-th file is a variant (weights.h): DIR/NAME.V[-shard].safetensors, with its plain
 * sibling DIR/NAME[-shard].safetensors among f's files: *plain its index, v its V. */
static int variant_of(const struct files *f, int i, int *plain, char *v, size_t vcap) {
    const char *p = f->path[i], *slash = strrchr(p, '/'), *base = slash ? slash + 1 : p;
    const size_t n = strlen(p) - 12, sh = shard_suffix(p, n);
    const char *end = p + n - sh, *dot = NULL;
    for (const char *c = base; c < end; c++)
        if (*c == '.') dot = c;
    if (!dot || (size_t)(end - dot - 1) >= vcap) return 0;
    char want[TR_WEIGHTS_PATH_MAX];
    snprintf(want, sizeof want, "%.*s%.*s.safetensors", (int)(dot - p), p, (int)sh, end);
    for (int j = 0; j < f->n; j++)
        if (j != i && strcmp(f->path[j], want) == 0) {
            memcpy(v, dot + 1, (size_t)(end - dot - 1));
            v[end - dot - 1] = 0;
            *plain = j;
            return 1;
        }
    return 0;
}

/* Keeps of f's files (a directory's) those a load of `variant` reads (weights.h). */
static int pick_variants(struct files *f, const char *dir, const char *variant, struct tr_error *err) {
    unsigned char drop[MAX_FILES] = {0};
    char others[256] = "";
    int found = 0;
    for (int i = 0; i < f->n; i++) {
        char v[64];
        int plain;
        if (!variant_of(f, i, &plain, v, sizeof v)) continue;
        if (variant && strcmp(v, variant) == 0) {
            found = 1, drop[plain] = 1;
            continue;
        }
        drop[i] = 1;
        const size_t len = strlen(others);
        if (!strstr(others, v) && len + strlen(v) + 3 < sizeof others)
            snprintf(others + len, sizeof others - len, "%s%s", len ? ", " : "", v);
    }
    if (variant && !found)
        return tr_error_set(err, TR_ERR_NOT_FOUND, "weights: no file of variant '%s' under '%s' (NAME.%s.safetensors "
                            "beside NAME.safetensors); its variants: %s", variant, dir, variant,
                            others[0] ? others : "none");
    int n = 0;
    for (int i = 0; i < f->n; i++)
        if (!drop[i]) memmove(f->path[n++], f->path[i], sizeof f->path[i]);
    f->n = n;
    return TR_OK;
}

/* The weight files of other formats in dir (prefix: its name under the weights
 * directory, "" at the top), appended to found; *n counts them all, 3 are named. */
static void other_weight_files(const char *dir, const char *prefix, char *found, size_t cap, int *n) {
    static const char *const exts[] = {".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx"};
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        const size_t ln = strlen(e->d_name);
        for (size_t k = 0; k < sizeof exts / sizeof exts[0]; k++) {
            const size_t le = strlen(exts[k]);
            if (e->d_name[0] == '.' || ln <= le || strcmp(e->d_name + ln - le, exts[k]) != 0) continue;
            const size_t used = strlen(found);
            if ((*n)++ < 3) snprintf(found + used, cap - used, "%s%s%s", used ? ", " : "", prefix, e->d_name);
        }
    }
    if (d) closedir(d);
}

/* A directory without .safetensors (collect's depth): the error names the weight files of
 * other formats there, which trident does not read, and how to convert them. */
static int no_safetensors(const char *dir, struct tr_error *err) {
    char found[320] = "";
    int n = 0;
    other_weight_files(dir, "", found, sizeof found, &n);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[TR_WEIGHTS_PATH_MAX], prefix[300];
        if (e->d_name[0] == '.' || snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p) continue;
        snprintf(prefix, sizeof prefix, "%s/", e->d_name);
        other_weight_files(p, prefix, found, sizeof found, &n);
    }
    if (d) closedir(d);
    char deep[TR_WEIGHTS_PATH_MAX];
    if (!n && deeper_safetensors(dir, "", 0, deep, sizeof deep)) {
        const char *slash = strrchr(deep, '/');
        return tr_error_set(err, TR_ERR_NOT_FOUND, "weights: no .safetensors file in '%s' or its immediate "
                            "subdirectories (where a directory's are read); deeper, '%s': name its directory "
                            "('%s/%.*s') as [run] weights", dir, deep, dir, (int)(slash - deep), deep);
    }
    if (!n)
        return tr_error_set(err, TR_ERR_NOT_FOUND, "weights: no .safetensors file in '%s' or its immediate "
                            "subdirectories", dir);
    return tr_error_set(err, TR_ERR_NOT_FOUND, "weights: no .safetensors file in '%s' or its immediate subdirectories, only "
                        "%s%s, which trident does not read (transformers' save_pretrained writes .safetensors, "
                        "as does safetensors.torch.save_file of the state dict)", dir, found,
                        n > 3 ? " and more" : "");
}

/* A diffusers pipeline's directory (its model_index.json): DiffusionPipeline.from_pretrained
 * reads the parts' subdirectories, never a file at the top, where a Hub repo keeps the
 * original single-file checkpoints (v1-5-pruned-emaonly.safetensors, under the LDM's names):
 * those are left out here too. */
static int pipeline_parts(struct files *f, const char *dir, struct tr_error *err) {
    char index[TR_WEIGHTS_PATH_MAX], top[200] = "";
    struct stat sb;
    if (snprintf(index, sizeof index, "%s/model_index.json", dir) >= (int)sizeof index || stat(index, &sb) != 0)
        return TR_OK;
    int n = 0;
    for (int i = 0; i < f->n; i++) {
        const char *rel = f->path[i] + f->dir_len;
        if (strchr(rel, '/')) {
            memmove(f->path[n++], f->path[i], sizeof f->path[i]);
        } else if (!top[0]) {
            snprintf(top, sizeof top, "%s", rel);
        }
    }
    f->n = n;
    if (n == 0)
        return tr_error_set(err, TR_ERR_NOT_FOUND, "weights: '%s' is a diffusers pipeline (model_index.json) with no "
                            ".safetensors in its parts' subdirectories; its top level's (%s) are not the pipeline's, "
                            "as diffusers reads them (name that file as [run] weights to read it)", dir, top);
    return TR_OK;
}

/* The files a sharded checkpoint's index leaves out of its directory (shard_index.h),
 * dropped from f, each said. */
static void index_shards(struct files *f) {
    int kept = 0, said = 0;
    for (int i = 0; i < f->n; i++) {
        char why[TR_WEIGHTS_PATH_MAX + 512];
        if (tr_shard_index_skips(f->path[i], why, sizeof why)) {
            if (said++ < 3) fprintf(stderr, "trident: note: weights: %s\n", why);
            continue;
        }
        if (kept != i) memcpy(f->path[kept], f->path[i], sizeof f->path[i]);
        kept++;
    }
    if (said > 3) fprintf(stderr, "trident: note: weights: and %d more files left out so\n", said - 3);
    f->n = kept;
}

/* Drops from f the files that are one of skip's (by inode): a run's batch or outputs kept
 * beside its weights are not weights. */
static void drop_skipped(struct files *f, const char *const *skip, int n_skip) {
    struct stat a, b;
    int kept = 0;
    for (int i = 0; i < f->n; i++) {
        int drop = 0;
        for (int k = 0; k < n_skip && !drop && stat(f->path[i], &a) == 0; k++)
            drop = skip[k] && skip[k][0] && stat(skip[k], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        if (!drop && kept != i) memcpy(f->path[kept], f->path[i], sizeof f->path[i]);
        kept += !drop;
    }
    f->n = kept;
}

static int open_files(const char *path, const struct tr_weights_load_opts *o, struct files *f, struct tr_error *err) {
    const char *variant = o ? o->variant : NULL;
    memset(f, 0, sizeof *f);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        int rc = tr_shard_index_check(path, err);
        if (!rc) rc = collect(path, 0, f, err);
        if (rc) return rc;
        if (o) drop_skipped(f, o->skip, (int)(sizeof o->skip / sizeof o->skip[0]));
        index_shards(f);
        if (f->n == 0) return no_safetensors(path, err);
        qsort(f->path, (size_t)f->n, sizeof f->path[0], by_path);
        f->dir_len = strlen(path) + 1;
        if ((rc = pipeline_parts(f, path, err)) != TR_OK) return rc;
        if ((rc = pick_variants(f, path, variant && variant[0] ? variant : NULL, err)) != TR_OK) return rc;
    } else {
        if (variant && variant[0])
            return tr_error_set(err, TR_ERR_INVALID, "weights: variant '%s' picks among a directory's files; '%s' is "
                                "not a directory (name the directory, or no variant)", variant, path);
        if (strlen(path) >= sizeof f->path[0])
            return tr_error_set(err, TR_ERR_INVALID, "weights: path '%s' is too long", path);
        strcpy(f->path[0], path);
        f->n = 1;
    }
    for (int i = 0; i < f->n; i++) {
        int rc = tr_safetensors_open(f->path[i], &f->st[i], err);
        if (rc) return rc;
        const int n = tr_safetensors_count(f->st[i]);
        if (!(f->read[i] = calloc(n > 0 ? (size_t)n : 1, 1)))
            return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
    }
    return TR_OK;
}

static void close_files(struct files *f) {
    for (int i = 0; i < f->n; i++) {
        tr_safetensors_close(f->st[i]);
        free(f->read[i]);
    }
}

/* The name transformers' older checkpoints (BERT's, converted from TensorFlow) give a
 * LayerNorm's weight and bias, which from_pretrained renames on loading: "LayerNorm.gamma"
 * and "LayerNorm.beta". NULL for any other name. */
static const char *legacy_name(const char *name, char *buf, size_t cap) {
    static const char *const now[2] = {"LayerNorm.weight", "LayerNorm.bias"}, *const then[2] = {"gamma", "beta"};
    const size_t n = strlen(name);
    for (int k = 0; k < 2; k++) {
        const size_t m = strlen(now[k]);
        if (n < m || strcmp(name + n - m, now[k]) != 0 || n + 1 > cap) continue;
        snprintf(buf, cap, "%.*sLayerNorm.%s", (int)(n - m), name, then[k]);
        return buf;
    }
    return NULL;
}

/* The names peft saves a tensor of an adapter under (adapter_model.safetensors: the
 * PeftModel's "base_model.model." before the model's own name, the adapter's name left
 * out): the LoRA factors, and the trained copies of modules_to_save (a classifier head)
 * and of biases (bias = "all" or "lora_only"), which a PeftModel uses in place of the base
 * model's. A layer LoRA wraps keeps its own tensors under "base_layer." (bias = "all"
 * saves q_proj's trained bias as "...q_proj.base_layer.bias"): that is peft_base_name's,
 * "...q_proj.bias" for the graph. NULL where the name has no such form. */
static const char *peft_name(const char *name, char *buf, size_t cap) {
    return snprintf(buf, cap, "base_model.model.%s", name) < (int)cap ? buf : NULL;
}
static const char *peft_base_name(const char *name, char *buf, size_t cap) {
    const char *last = strrchr(name, '.');
    if (!last || (strcmp(last, ".bias") && strcmp(last, ".weight"))) return NULL;
    return snprintf(buf, cap, "base_model.model.%.*s.base_layer%s", (int)(last - name), name, last) < (int)cap ? buf
                                                                                                                : NULL;
}

/* Some file holds tensor `name` as it is (not bare). */
static int has_tensor(const struct files *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (tr_safetensors_find(f->st[i], name) >= 0) return 1;
    return 0;
}

/* name in exactly one file: peft's names for it first (peft_name, peft_base_name: an
 * adapter's copy wins over the base model's, which is then read too, as shadowed), then
 * its own name, or where no file has it so, bare (get_bare), then its legacy name
 * (legacy_name); *which the file. base_only: the base model's alone, peft's names left out.
 * An untied "lm_head.weight" that no file has, beside peft's copy of the embedding table
 * (modules_to_save = ["embed_tokens"] on a model that ties them; model.c unties it), is
 * the base model's table: the PeftModel embeds with the copy and keeps its head on the
 * original table, which the base checkpoint saved once, as the embedding. */
static int find_from(const struct files *f, const char *name, int base_only, struct tr_tensor *src, int *which,
                     struct tr_error *err) {
    char buf[TR_WEIGHTS_PATH_MAX], pbuf[TR_WEIGHTS_PATH_MAX], lbuf[TR_WEIGHTS_PATH_MAX];
    const char *keys[4] = {base_only ? NULL : peft_name(name, pbuf, sizeof pbuf),
                           base_only ? NULL : peft_base_name(name, lbuf, sizeof lbuf), name,
                           legacy_name(name, buf, sizeof buf)};
    *which = -1;
    for (int k = 0; k < 4 && *which < 0; k++) {
        if (!keys[k]) continue;
        const int peft = k < 2;
        for (int bare = 0; bare < (peft ? 1 : 2) && *which < 0; bare++)
            for (int i = 0; i < f->n; i++) {
                struct tr_tensor t;
                int rc = bare ? get_bare(f->st[i], keys[k], &t, err) : tr_safetensors_get(f->st[i], keys[k], &t, err);
                if (rc == TR_ERR_NOT_FOUND) continue;
                if (rc) return rc;
                if (*which >= 0)
                    return tr_error_set(err, TR_ERR_INVALID, "weights: '%s' is in both '%s' and '%s'", keys[k],
                                        f->path[*which], f->path[i]);
                *which = i;
                *src = t;
                f->read[i][tr_safetensors_find(f->st[i], bare ? strchr(keys[k], '.') + 1 : keys[k])] = 1;
            }
        for (int i = 0; peft && *which >= 0 && i < f->n; i++) { /* the base model's, shadowed */
            const int j = tr_safetensors_find(f->st[i], name);
            if (j >= 0) f->read[i][j] = 1;
        }
    }
    if (*which < 0 && !base_only && !strcmp(name, "lm_head.weight") &&
        has_tensor(f, "base_model.model.model.embed_tokens.weight"))
        return find_from(f, "model.embed_tokens.weight", 1, src, which, err);
    return *which >= 0 ? TR_OK : TR_ERR_NOT_FOUND;
}

static int find(const struct files *f, const char *name, struct tr_tensor *src, int *which, struct tr_error *err) {
    return find_from(f, name, 0, src, which, err);
}

/* The i-th file's tensor `name` falls under one of the parts g leaves out (tr_graph_omit):
 * a prefix ending in '/' names a subdirectory of a weights directory (a pipeline's
 * safety_checker/); any other starts the name, or its rest after the first component
 * where the file holds its names bare of that component (as find reads them: get_bare).
 * A "position_ids" is no part: transformers saved that buffer in its older checkpoints
 * (BERT's, CLIP's) and skips it on loading too. */
static int omitted(const struct tr_graph *g, const struct files *f, int i, const char *name) {
    const char *last = strrchr(name, '.');
    if (strcmp(last ? last + 1 : name, "position_ids") == 0) return 1;
    for (int k = 0; k < tr_graph_n_omitted(g); k++) {
        const char *p = tr_graph_omitted(g, k), *dot = strchr(p, '.');
        const size_t len = strlen(p);
        if (p[len - 1] == '/') {
            if (f->dir_len && strncmp(f->path[i] + f->dir_len, p, len) == 0) return 1;
            continue;
        }
        if (strncmp(name, p, len) == 0) return 1;
        /* bare: only a prefix of two components or more has a rest to match ("encoder."
         * bare of "encoder" would be every name) */
        if (!dot || !dot[1] || strncmp(name, dot + 1, strlen(dot + 1)) != 0) continue;
        int bare = 1;
        for (int j = 0; j < tr_safetensors_count(f->st[i]) && bare; j++)
            bare = strncmp(tr_safetensors_name(f->st[i], j), p, (size_t)(dot - p) + 1) != 0;
        if (bare) return 1;
    }
    return 0;
}

/* Records, file by file, the tensors no PARAM read, outside the parts g leaves out: a
 * checkpoint of another task (a pretraining head), or a config that leaves out what the
 * checkpoint has (biases, an untied head), would otherwise load without a word and give
 * other numbers than the model it came from. */
static int note_unused(struct tr_weights *w, const struct tr_graph *g, const struct files *f, struct tr_error *err) {
    if (!(w->unused = calloc((size_t)f->n, sizeof *w->unused)))
        return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
    for (int i = 0; i < f->n; i++) {
        const int n = tr_safetensors_count(f->st[i]);
        struct unused_file *u = &w->unused[w->n_unused_files];
        for (int j = 0; j < n; j++) {
            const char *name = tr_safetensors_name(f->st[i], j);
            w->lora_read += f->read[i][j] && strstr(name, "lora_A") != NULL;
            if (f->read[i][j] || omitted(g, f, i, name)) continue;
            if (!u->names) { /* the file's first: counted at once, so tr_weights_free frees it */
                w->n_unused_files++;
                u->n_tensors = n;
                if (!(u->names = calloc((size_t)n, sizeof *u->names)) || !(u->path = strdup(f->path[i])))
                    return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
            }
            if (!(u->names[u->n] = strdup(name))) return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
            u->n++, w->n_unused++;
        }
    }
    return TR_OK;
}

int tr_weights_load_opts(struct tr_graph *g, const char *path, const struct tr_weights_load_opts *o,
                         struct tr_weights **out, struct tr_error *err) {
    *out = NULL;
    const uint64_t seed = o ? o->seed : 0;
    const int missing_seed = o && o->missing_seed;
    struct tr_weights *w;
    int rc = weights_new(g, &w, err);
    if (rc) return rc;
    struct files *f = malloc(sizeof *f);
    if (!f) {
        tr_weights_free(w);
        return tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
    }
    rc = open_files(path, o, f, err);
    /* Fresh PARAMs (LoRA adapters, optimizer state) the file lacks are made from the seed
     * without a word, a fit from a base model; but where the file holds some of them (a
     * peft adapter), those it lacks are said, as peft warns of missing adapter keys. */
    int *fresh_missing = calloc((size_t)tr_graph_n_params(g) + 1, sizeof *fresh_missing), n_fresh_missing = 0;
    int fresh_found = 0;
    if (!fresh_missing && !rc) rc = tr_error_set(err, TR_ERR_NOMEM, "weights: no memory");
    for (int i = 0; i < tr_graph_n_params(g) && !rc; i++) {
        int id = tr_graph_param(g, i), which;
        const char *name = tr_node_name(g, id);
        struct tr_tensor src, dst = tr_node_tensor(g, id);
        rc = find(f, name, &src, &which, err);
        /* Only absence is seeded: a tensor found with another shape or dtype fails in
         * load_one below, whatever missing_seed says. */
        const int fresh = tr_param_is_fresh(g, id);
        fresh_found += fresh && rc == TR_OK;
        if (rc == TR_ERR_NOT_FOUND && (fresh || missing_seed)) {
            rc = seed_one(w, g, i, seed, err);
            if (!rc && !fresh) rc = note_seeded(w, tr_graph_n_params(g), name, err);
            if (!rc && fresh) fresh_missing[n_fresh_missing++] = id;
            continue;
        }
        if (rc == TR_ERR_NOT_FOUND) {
            char sh[128];
            tr_shape_str(dst.ndim, dst.shape, sh, sizeof sh);
            rc = tr_error_set(err, TR_ERR_NOT_FOUND,
                              "%s: no tensor '%s' (the graph's parameter %s%s)%s; [run] missing = seed makes what "
                              "the file lacks from the seed", path, name, tr_dtype_name((enum tr_dtype)dst.dtype), sh,
                              f->n > 1 ? " in any of its files" : "");
        }
        if (!rc) rc = weights_alloc(w, &dst, &dst.data, err);
        if (!rc) rc = load_one(&src, &dst, name, f->path[which], err);
    }
    for (int k = 0; !rc && fresh_found && k < n_fresh_missing; k++) {
        /* an adapter, not state kept for another PARAM ("<param>.adamw_m": an optimizer's) */
        const char *name = tr_node_name(g, fresh_missing[k]), *dot = strrchr(name, '.');
        char owner[512];
        const int state = dot && (size_t)(dot - name) < sizeof owner &&
                          (snprintf(owner, sizeof owner, "%.*s", (int)(dot - name), name), tr_graph_find(g, owner) >= 0);
        if (!state) rc = note_seeded(w, tr_graph_n_params(g), name, err);
    }
    free(fresh_missing);
    if (!rc) rc = note_unused(w, g, f, err);
    close_files(f);
    free(f);
    if (!rc) rc = bind_all(g, w, err);
    if (rc) {
        tr_weights_free(w);
        return rc;
    }
    *out = w;
    return TR_OK;
}
