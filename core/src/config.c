/* INI configuration, parsed by inih (Debian's libinih 55, built with the defaults of
 * /usr/include/ini.h). What a user may write:
 *
 *   - "[section]" lines and "key = value" lines ("key: value" works too: inih's concession
 *     to Python's configparser); spaces around keys and values are dropped.
 *   - Comment lines starting with ';' or '#'. An inline comment needs ';' after a space
 *     ("batch = 8   ; per step"): INI_ALLOW_INLINE_COMMENTS is on with ';' as the only
 *     prefix, so '#' after a value is part of the value ("batch = 8 # x" is rejected).
 *     After "[section]" anything starting with ';' or '#' may follow.
 *   - Indentation is ignored. inih reads an indented line as the continuation of the
 *     previous value (INI_ALLOW_MULTILINE), which silently glues an indented
 *     "preset = tiny" onto the line above; our reader strips leading blanks before inih
 *     sees a line, so that never happens and a value cannot span lines.
 *   - No quoting: quotes are part of the value.
 *   - Lines of at most 197 characters. inih's line buffer is fixed (INI_MAX_LINE = 200)
 *     and it would split a longer line in two; we refuse such a line instead.
 *
 * inih hands the handler no line numbers (INI_HANDLER_LINENO is 0), so we feed it through
 * ini_parse_stream with the reader of ini_text.h, which counts lines (inih never reads ahead: the
 * handler runs for the line the reader returned last) and sees every section header,
 * including those of sections without keys. The first error stops the reader; the
 * handler then only returns 0 (inih keeps calling it until the reader stops).
 */
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "trident/parse.h"
#include "trident/config.h"
#include "trident/log.h"
#include "trident/model.h"
#include "trident/tensor.h"
#include "trident/train.h"
#include "ini_text.h"

#define KEY_NAME_MAX 63         /* struct tr_config_kv's key */
#define TR_CONFIG_MAX_SECTIONS 40 /* 5 fixed kinds and a [backend.NAME] for each listed backend, and then some */
#define BACKEND_NAME_MAX 40     /* "backend." + NAME must fit inih's 50-byte section */
/* A backend's NAME: letters, digits, '_' and '-', as the loader takes a vtable's name
 * (backend.h) and trident-config.cmake's trident_add_backend a target's */
#define NAME_CHARS "_-"
#define NAME_SAID "letters, digits, '_' and '-'"

enum run_key {
    RUN_MODEL, RUN_PRESET, RUN_TASK, RUN_BACKENDS, RUN_DEVICE, RUN_DTYPE,
    RUN_BATCH, RUN_SEQ_LEN, RUN_STEPS, RUN_WARMUP, RUN_SEED, RUN_WEIGHTS, RUN_MATH, RUN_THREADS,
    RUN_TOLERANCE, RUN_INPUTS, RUN_REFERENCE, RUN_MISSING, RUN_SCHEDULE, RUN_ISOLATE, RUN_BACKEND_TIMEOUT,
    RUN_PARALLEL, RUN_BUCKET_MB, RUN_COLLECTIVE_TIMEOUT, RUN_CHECK_EVERY, RUN_REFERENCE_TOLERANCE,
    RUN_WEIGHTS_VARIANT, RUN_KEY_COUNT
};
_Static_assert(RUN_KEY_COUNT <= TR_CONFIG_RUN_KEYS, "tr_config.run_key_lines holds every [run] key");
static const char *const run_keys[RUN_KEY_COUNT] = {
    "model", "preset", "task", "backends", "device", "dtype",
    "batch", "seq_len", "steps", "warmup", "seed", "weights", "math", "threads", "tolerance",
    "inputs", "reference", "missing", "schedule", "isolate", "backend_timeout",
    "parallel", "bucket_mb", "collective_timeout", "check_every", "reference_tolerance", "weights_variant",
};

struct ini_state {
    struct tr_config *cfg;
    struct tr_error *err;
    struct tr_ini_text in;      /* the reader: the position in the text, the line number */
    int fail_line;              /* where our first error is; 0 while all is well */
    int fail_status;
    int run_lines[RUN_KEY_COUNT];
    /* while an override is applied: where it was written (fail_kv's file and section) */
    const char *where_file, *where_section;
    int plugins_path_line;
    /* the sections seen, for repeats and for [backend.NAME]s no listed backend has */
    struct {
        char name[128];
        int line;
    } sections[TR_CONFIG_MAX_SECTIONS];
    int n_sections;
};

void tr_config_defaults(struct tr_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    strcpy(cfg->dir, ".");
    strcpy(cfg->model, "bert");
    strcpy(cfg->preset, "tiny");
    strcpy(cfg->task, "predict");
    strcpy(cfg->backends[0].spec, "torch");
    strcpy(cfg->backends[0].name, "torch");
    cfg->n_backends = 1;
    strcpy(cfg->device, "cpu");
    cfg->device_type = TR_DEVICE_CPU;
    cfg->dtype = TR_DTYPE_F32;
    cfg->batch = 8;
    cfg->seq_len = 128;
    cfg->steps = 10;
    cfg->warmup = 2;
    cfg->seed = 1234;
    cfg->threads = tr_config_default_threads();
    cfg->isolate = 1;
    cfg->backend_timeout = 1800; /* generous: vit-h's cpu step is 20 s, its compile more */
    cfg->bucket_mb = 25;         /* PyTorch DDP's bucket_cap_mb */
    cfg->collective_timeout = 60;
    cfg->check_every = 10;
    cfg->ranks = 1;
}

#define THREADS_MAX 1024

int tr_config_default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > THREADS_MAX ? THREADS_MAX : n;
}

/* ---- messages ---- */

/* "FILE:LINE: [SECTION] KEY = VALUE: what" and stop. */
__attribute__((format(printf, 6, 7)))
static int fail_kv(struct ini_state *st, int status, const char *section, const char *key, const char *value,
                   const char *fmt, ...) {
    char what[TR_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (st->where_section && strcmp(section, "run") == 0) section = st->where_section;
    if (!st->cfg) /* tr_config_backend_parse: an entry from the command line */
        tr_error_set(st->err, status, "%s: %.600s", value, what);
    else
        tr_error_set(st->err, status, "%s:%d: [%s] %s = %s: %.600s", st->where_file ? st->where_file : st->cfg->file,
                 st->in.line, section, key, value, what);
    st->fail_line = st->in.line;
    st->fail_status = status;
    st->in.stop = 1;
    return status;
}

/* "FILE:LINE: what" and stop. */
__attribute__((format(printf, 3, 4)))
static int fail_line(struct ini_state *st, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tr_error_set_atv(st->err, status, st->cfg->file, st->in.line, fmt, ap);
    va_end(ap);
    st->fail_line = st->in.line;
    st->fail_status = status;
    st->in.stop = 1;
    return status;
}

/* ---- small parsers ---- */

/* Non-empty and only ASCII a-z, 0-9 (A-Z when upper) and the extra characters: ctype's
 * classes would follow the locale. */
static int all_chars(const char *s, const char *extra, int upper) {
    if (!*s) return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (upper && c >= 'A' && c <= 'Z') ||
              strchr(extra, c)))
            return 0;
    }
    return 1;
}

/* A whole-string base-10 integer in [lo, hi]; why says what was wrong. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out, const char **why) {
    const char *d = (*s == '+' || *s == '-') ? s + 1 : s;
    if (!isdigit((unsigned char)*d)) {
        *why = "not a number";
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end) {
        *why = "trailing characters after the number";
        return 0;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        *why = "out of range";
        return 0;
    }
    *out = v;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!isdigit((unsigned char)*s)) return 0;  /* strtoull would take "-1" as 2^64-1 */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

static int copy_str(char *dst, size_t n, const char *src) {
    size_t len = strlen(src);
    if (len >= n) return 0;
    memcpy(dst, src, len + 1);
    return 1;
}

/* dir/rel unless rel is absolute or dir is "."; 0 when it does not fit. */
static int resolve_path(const char *dir, const char *rel, char *out, size_t n) {
    int len;
    if (strcmp(rel, ".") == 0) len = snprintf(out, n, "%s", dir);
    else if (rel[0] == '/' || strcmp(dir, ".") == 0) len = snprintf(out, n, "%s", rel);
    else if (strcmp(dir, "/") == 0) len = snprintf(out, n, "/%s", rel);
    else len = snprintf(out, n, "%s/%s", dir, rel);
    return len >= 0 && (size_t)len < n;
}

void tr_config_preset_label(const struct tr_config *cfg, char *out, size_t n) {
    int hf = 0;
    for (int i = 0; i < cfg->n_kv && !hf; i++)
        hf = strcmp(cfg->kv[i].section, "model") == 0 && strcmp(cfg->kv[i].key, "hf_config") == 0;
    snprintf(out, n, "%s%s", cfg->preset, hf ? " + hf_config" : "");
}

int tr_config_model_line(const struct tr_config *cfg, const char *text) {
    const char *first = NULL;
    int line = 0;
    for (int i = 0; i < cfg->n_kv; i++) {
        if (strcmp(cfg->kv[i].section, "model") != 0) continue;
        const size_t kn = strlen(cfg->kv[i].key);
        for (const char *at = strstr(text, cfg->kv[i].key); at; at = strstr(at + 1, cfg->kv[i].key)) {
            const int word = (at == text || !(isalnum((unsigned char)at[-1]) || at[-1] == '_')) &&
                             strncmp(at + kn, " = ", 3) == 0;
            if (word && (!first || at < first)) first = at, line = cfg->kv[i].line;
            if (word) break;
        }
    }
    return line;
}

int tr_config_path(const struct tr_config *cfg, const char *rel, char *out, size_t n, struct tr_error *err) {
    if (!resolve_path(cfg->dir, rel, out, n))
        return tr_error_set(err, TR_ERR_INVALID, "%s: path '%s' (relative to '%s') is longer than %zu bytes", cfg->file,
                            rel, cfg->dir, n - 1);
    return TR_OK;
}

static int ends_with(const char *s, size_t len, const char *suffix) {
    size_t k = strlen(suffix);
    return len >= k && memcmp(s + len - k, suffix, k) == 0;
}

/* v one of two words: *out = the value paired with it; -1 when v is neither (the
 * caller's message says what each word means). */
static int parse_word2(const char *v, const char *w0, int v0, const char *w1, int v1, int *out) {
    if (strcmp(v, w0) == 0) *out = v0;
    else if (strcmp(v, w1) == 0) *out = v1;
    else return -1;
    return 0;
}

/* ---- [run] backends ---- */

#define BACKENDS_EXPECTED "expected a comma-separated list of NAME, NAME:MODE or paths to .so files"

static int parse_backend(struct ini_state *st, const char *dir, const char *v, int idx, const char *e,
                         struct tr_config_backend *be) {
    memset(be, 0, sizeof *be);
    if (!copy_str(be->spec, sizeof be->spec, e))
        return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "entry %d is too long; " BACKENDS_EXPECTED, idx);
    size_t len = strlen(e);
    const char *colon = strrchr(e, ':');
    /* "path/x.so:MODE" takes a mode as NAME:MODE does; a colon elsewhere belongs to the path. */
    size_t base_len = len;
    if (colon && all_chars(colon + 1, "_-", 0) && (ends_with(e, (size_t)(colon - e), ".so") || !strchr(e, '/')))
        base_len = (size_t)(colon - e);
    int is_path = memchr(e, '/', base_len) || ends_with(e, base_len, ".so");

    if (!is_path) {
        if (colon) {
            size_t nlen = (size_t)(colon - e);
            if (nlen == 0 || nlen > BACKEND_NAME_MAX)
                return fail_kv(st, TR_ERR_INVALID, "run", "backends", v,
                               "entry %d ('%s'): expected NAME:MODE with a backend NAME before the ':'", idx, e);
            memcpy(be->name, e, nlen);
            if (!all_chars(colon + 1, "_-", 0) || strlen(colon + 1) >= sizeof be->mode)
                return fail_kv(st, TR_ERR_INVALID, "run", "backends", v,
                               "entry %d ('%s'): expected NAME:MODE with MODE made of a-z, 0-9, '_' and '-'", idx,
                               e);
            strcpy(be->mode, colon + 1);
        } else {
            if (len > BACKEND_NAME_MAX) goto bad_name;
            strcpy(be->name, e);
        }
        if (!all_chars(be->name, NAME_CHARS, 1)) goto bad_name;
        return TR_OK;
    bad_name:
        return fail_kv(st, TR_ERR_INVALID, "run", "backends", v,
                       "entry %d ('%s'): expected a backend name made of " NAME_SAID " (up to %d characters), "
                       "NAME:MODE, or a path to a .so file",
                       idx, e, BACKEND_NAME_MAX);
    }

    char rel[TR_CONFIG_PATH];
    if (base_len >= sizeof rel || base_len == 0)
        return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "entry %d: the path is too long or empty", idx);
    memcpy(rel, e, base_len);
    rel[base_len] = '\0';
    if (base_len < len) strcpy(be->mode, colon + 1);
    if (!resolve_path(dir, rel, be->path, sizeof be->path))
        return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "entry %d: the resolved path is too long", idx);
    const char *stem = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
    size_t stem_len = strlen(stem);
    if (ends_with(stem, stem_len, ".so")) stem_len -= 3;
    static const char prefix[] = "libtrident_backend_";
    if (stem_len > sizeof prefix - 1 && memcmp(stem, prefix, sizeof prefix - 1) == 0) {
        stem += sizeof prefix - 1;
        stem_len -= sizeof prefix - 1;
    }
    if (stem_len == 0 || stem_len > BACKEND_NAME_MAX) goto bad_stem;
    memcpy(be->name, stem, stem_len);
    be->name[stem_len] = '\0';
    if (!all_chars(be->name, NAME_CHARS, 1)) goto bad_stem;
    return TR_OK;
bad_stem:
    return fail_kv(st, TR_ERR_INVALID, "run", "backends", v,
                   "entry %d ('%s'): the file name gives no usable backend name; expected "
                   "libtrident_backend_NAME.so or NAME.so with NAME made of " NAME_SAID " (up to %d characters)",
                   idx, e, BACKEND_NAME_MAX);
}

int tr_config_backend_parse(const char *entry, struct tr_config_backend *out, struct tr_error *err) {
    struct ini_state st = {.err = err};
    if (!entry || !out) return tr_error_set(err, TR_ERR_INVALID, "tr_config_backend_parse: NULL argument");
    return parse_backend(&st, ".", entry, 1, entry, out);
}

static int parse_backends(struct ini_state *st, const char *v) {
    struct tr_config_backend list[TR_CONFIG_MAX_BACKENDS];
    int n = 0, idx = 0;
    const char *p = v;
    for (;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        idx++;
        while (p < end && isspace((unsigned char)*p)) p++;
        while (end > p && isspace((unsigned char)end[-1])) end--;
        if (end == p)
            return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "entry %d is empty; " BACKENDS_EXPECTED, idx);
        if (n == TR_CONFIG_MAX_BACKENDS)
            return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "expected at most %d backends",
                           TR_CONFIG_MAX_BACKENDS);
        char e[TR_CONFIG_STR];
        size_t elen = (size_t)(end - p);
        if (elen >= sizeof e)
            return fail_kv(st, TR_ERR_INVALID, "run", "backends", v, "entry %d is too long", idx);
        memcpy(e, p, elen);
        e[elen] = '\0';
        int rc = parse_backend(st, st->cfg->dir, v, idx, e, &list[n]);
        if (rc) return rc;
        /* The same backend in two modes, or two builds of one backend, may run side by
         * side; the same one twice is a mistake. */
        for (int j = 0; j < n; j++) {
            if (strcmp(list[j].name, list[n].name) == 0 && strcmp(list[j].mode, list[n].mode) == 0 &&
                strcmp(list[j].path, list[n].path) == 0)
                return fail_kv(st, TR_ERR_INVALID, "run", "backends", v,
                               "entry %d ('%s') repeats '%s'; expected each backend (and mode) once", idx, e,
                               list[j].spec);
        }
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    memcpy(st->cfg->backends, list, (size_t)n * sizeof list[0]);
    st->cfg->n_backends = n;
    st->cfg->backends_line = st->in.line;
    snprintf(st->cfg->backends_from, sizeof st->cfg->backends_from, "%s", st->where_file ? st->where_file : "");
    return TR_OK;
}

/* ---- sections ---- */

static int run_set(struct ini_state *st, enum run_key k, const char *v) {
    struct tr_config *cfg = st->cfg;
    const char *key = run_keys[k], *why = "";
    int64_t i64;
    switch (k) {
    case RUN_MODEL:
    case RUN_PRESET: {
        char *dst = k == RUN_MODEL ? cfg->model : cfg->preset;
        if (!all_chars(v, "_.-", 1) || !copy_str(dst, sizeof cfg->model, v))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected a %s name made of letters, digits, '_', '.' and '-' (up to %zu characters)",
                           key, sizeof cfg->model - 1);
        return TR_OK;
    }
    case RUN_TASK: {
        enum tr_task t;
        if (tr_task_from_name(v, &t) != TR_OK)
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected predict, fit or generate");
        strcpy(cfg->task, tr_task_name(t));
        return TR_OK;
    }
    case RUN_BACKENDS:
        return parse_backends(st, v);
    case RUN_DEVICE:
        if (parse_word2(v, "cpu", TR_DEVICE_CPU, "cuda", TR_DEVICE_CUDA, &cfg->device_type))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected cpu or cuda");
        strcpy(cfg->device, v);
        return TR_OK;
    case RUN_DTYPE: {
        enum tr_dtype dt;
        if (tr_dtype_from_name(v, &dt) != TR_OK ||
            (dt != TR_DTYPE_F32 && dt != TR_DTYPE_BF16 && dt != TR_DTYPE_F16))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected f32, bf16 or f16");
        cfg->dtype = dt;
        return TR_OK;
    }
    case RUN_BATCH:
    case RUN_SEQ_LEN:
    case RUN_STEPS:
    case RUN_WARMUP: {
        /* warmup >= 1: the first step (build + compile) is always timed apart and left out. */
        int64_t hi = (k == RUN_BATCH || k == RUN_SEQ_LEN) ? (int64_t)1 << 20 : 1000000;
        if (!parse_int(v, 1, hi, &i64, &why))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected an integer from 1 to %lld (%s)",
                           (long long)hi, why);
        int64_t *dst = k == RUN_BATCH ? &cfg->batch : k == RUN_SEQ_LEN ? &cfg->seq_len
                     : k == RUN_STEPS ? &cfg->steps : &cfg->warmup;
        *dst = i64;
        if (k == RUN_SEQ_LEN) cfg->seq_len_line = st->in.line;
        return TR_OK;
    }
    case RUN_SEED:
        if (!parse_u64(v, &cfg->seed))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected an integer from 0 to %llu",
                           (unsigned long long)UINT64_MAX);
        return TR_OK;
    case RUN_WEIGHTS: {
        if (!*v) {
            cfg->weights[0] = '\0';  /* explicitly: weights made from seed */
            return TR_OK;
        }
        if (!resolve_path(cfg->dir, v, cfg->weights, sizeof cfg->weights))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected a shorter path");
        cfg->weights_line = st->in.line;
        struct stat sb;
        if (stat(cfg->weights, &sb) != 0)
            return fail_kv(st, TR_ERR_IO, "run", key, v,
                           "cannot open %s: %s; expected a safetensors file or a directory of them (a "
                           "relative path is taken from the INI file's directory), or nothing for weights made "
                           "from the seed",
                           cfg->weights, strerror(errno));
        return TR_OK; /* a directory: its .safetensors files and its subdirectories' (weights.h) */
    }
    case RUN_WEIGHTS_VARIANT: { /* diffusers' and transformers' variant= (weights.h) */
        const size_t n = strlen(v);
        if (n >= sizeof cfg->weights_variant || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789_") != n)
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected a variant's name, as in NAME.fp16.safetensors (fp16, non_ema: letters, digits "
                           "and _, at most %d), or nothing for the files without one",
                           (int)sizeof cfg->weights_variant - 1);
        memcpy(cfg->weights_variant, v, n + 1);
        return TR_OK;
    }
    case RUN_INPUTS:
    case RUN_REFERENCE: {
        char *dst = k == RUN_INPUTS ? cfg->inputs : cfg->reference;
        if (!*v) {
            dst[0] = '\0';
            return TR_OK;
        }
        if (!resolve_path(cfg->dir, v, dst, TR_CONFIG_PATH))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected a shorter path");
        struct stat sb;
        const int found = stat(dst, &sb) == 0;
        if (!found || !S_ISREG(sb.st_mode))
            return fail_kv(st, TR_ERR_IO, "run", key, v,
                           "cannot open %s: %s; expected a safetensors file (a relative path is taken from the "
                           "INI file's directory)%s",
                           dst, found ? "not a regular file" : strerror(errno),
                           k == RUN_INPUTS ? ", or nothing for the synthetic batch made from the seed" : "");
        if (k == RUN_INPUTS) cfg->inputs_line = st->in.line;
        else cfg->reference_line = st->in.line;
        return TR_OK;
    }
    case RUN_MISSING:
        if (parse_word2(v, "error", 0, "seed", 1, &cfg->missing_seed))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected error (a tensor the weights file lacks is an error) or seed (made from "
                           "[run] seed, and listed in a warning)");
        return TR_OK;
    case RUN_SCHEDULE:
        if (parse_word2(v, "interleaved", TR_SCHEDULE_INTERLEAVED, "sequential", TR_SCHEDULE_SEQUENTIAL,
                        &cfg->schedule))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected interleaved (the backends take their timed steps in turns) or sequential "
                           "(each backend's steps one after another)");
        cfg->schedule_line = st->in.line;
        return TR_OK;
    case RUN_ISOLATE: {
        int b;
        if (tr_parse_bool(v, &b))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected on (each backend in a child process, so a crash costs only its row) or off "
                           "(in this process, for a debugger) (%s)", TR_BOOL_WORDS);
        cfg->isolate = b ? 1 : 0;
        return TR_OK;
    }
    case RUN_BACKEND_TIMEOUT: {
        char *end = NULL;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || *end || errno || !(x >= 1 && x <= 604800))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected seconds from 1 to 604800: the longest a backend may take to answer (its "
                           "load, compile and warm-up; one step; its finish) before it is killed");
        cfg->backend_timeout = x;
        return TR_OK;
    }
    case RUN_MATH: {
        enum tr_math m;
        if (tr_math_from_name(v, &m) != TR_OK || m == TR_MATH_DEFAULT)
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected f32, tf32 or bf16");
        cfg->math = m;
        return TR_OK;
    }
    case RUN_THREADS:
        if (!parse_int(v, 1, THREADS_MAX, &i64, &why))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected an integer from 1 to %d (%s), or no threads line for every core this "
                           "process may run on (%d here)",
                           THREADS_MAX, why, tr_config_default_threads());
        cfg->threads = (int)i64;
        cfg->threads_line = st->in.line;
        return TR_OK;
    case RUN_TOLERANCE:
    case RUN_REFERENCE_TOLERANCE: {
        char *end = NULL;
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0.0 && x <= 1.0))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "expected a relative difference above 0 and at most 1 (%s)",
                           k == RUN_TOLERANCE ? "the backends' agreement; absent: 1e-4 in f32, 2e-2 in bf16 and f16, "
                                                "2e-2 with tf32 math, or the model's own in bf16"
                                              : "each backend against [run] reference; absent: tolerance's");
        *(k == RUN_TOLERANCE ? &cfg->tolerance : &cfg->reference_tolerance) = x;
        return TR_OK;
    }
    case RUN_PARALLEL:
        if (parse_word2(v, "none", TR_PARALLEL_NONE, "data", TR_PARALLEL_DATA, &cfg->parallel))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected none (one process) or data (the processes mpirun starts each train on "
                           "their share of the batch and average their gradients)");
        return TR_OK;
    case RUN_BUCKET_MB:
    case RUN_COLLECTIVE_TIMEOUT: {
        char *end = NULL;
        errno = 0;
        double x = strtod(v, &end);
        const double lo = k == RUN_BUCKET_MB ? 1.0 / 1024 : 1, hi = k == RUN_BUCKET_MB ? 65536 : 604800;
        if (end == v || *end || errno || !(x >= lo && x <= hi))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v, "%s",
                           k == RUN_BUCKET_MB ? "expected MiB from 1/1024 to 65536: the most gradient data one "
                                                "all-reduce carries (PyTorch DDP's bucket_cap_mb, 25)"
                                              : "expected seconds from 1 to 604800: the longest a collective may "
                                                "wait for the other ranks before the job is stopped");
        *(k == RUN_BUCKET_MB ? &cfg->bucket_mb : &cfg->collective_timeout) = x;
        return TR_OK;
    }
    case RUN_CHECK_EVERY:
        if (!parse_int(v, 0, 1000000, &i64, &why))
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "expected steps from 0 to 1000000 between checks that every rank holds the same trained "
                           "weights (0: never) (%s)", why);
        cfg->check_every = i64;
        return TR_OK;
    case RUN_KEY_COUNT:
        break;
    }
    return fail_kv(st, TR_ERR_INTERNAL, "run", key, v, "unhandled key");
}

static int run_key(struct ini_state *st, const char *key, const char *v) {
    for (int k = 0; k < RUN_KEY_COUNT; k++) {
        if (strcmp(key, run_keys[k]) != 0) continue;
        if (st->run_lines[k])
            return fail_kv(st, TR_ERR_INVALID, "run", key, v,
                           "'%s' is given twice in [run], on lines %d and %d; expected it once", key,
                           st->run_lines[k], st->in.line);
        st->run_lines[k] = st->in.line;
        return run_set(st, (enum run_key)k, v);
    }
    char hint[128];
    return fail_kv(st, TR_ERR_NOT_FOUND, "run", key, v,
                   "unknown key%s (expected one of model, preset, task, backends, device, dtype, batch, seq_len, "
                   "steps, warmup, seed, weights, math, threads, tolerance, inputs, reference, reference_tolerance, "
                   "weights_variant, missing, schedule, isolate, backend_timeout, parallel, bucket_mb, "
                   "collective_timeout, check_every)",
                   tr_config_key_hint(key, "run", run_keys, RUN_KEY_COUNT, hint, sizeof hint));
}

static int plugins_key(struct ini_state *st, const char *key, const char *v) {
    if (strcmp(key, "path") != 0)
        return fail_kv(st, TR_ERR_NOT_FOUND, "plugins", key, v, "unknown key (expected path)");
    if (st->plugins_path_line)
        return fail_kv(st, TR_ERR_INVALID, "plugins", key, v,
                       "'path' is given twice in [plugins], on lines %d and %d; expected it once",
                       st->plugins_path_line, st->in.line);
    st->plugins_path_line = st->in.line;
    char *dst = st->cfg->plugin_path;
    if (!*v) {
        dst[0] = '\0';
        return TR_OK;
    }
    if (!resolve_path(st->cfg->dir, v, dst, sizeof st->cfg->plugin_path))
        return fail_kv(st, TR_ERR_INVALID, "plugins", key, v, "expected a shorter path");
    struct stat sb;
    if (stat(dst, &sb) != 0)
        return fail_kv(st, TR_ERR_IO, "plugins", key, v,
                       "cannot open %s: %s; expected a directory of backends (a relative path is taken from "
                       "the INI file's directory)",
                       dst, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return fail_kv(st, TR_ERR_IO, "plugins", key, v, "%s is not a directory; expected a directory of backends",
                       dst);
    return TR_OK;
}

/* [model] and [backend.NAME]: stored as written, for the model or the plugin to judge. */
static int store_kv(struct ini_state *st, const char *section, const char *key, const char *v) {
    struct tr_config *cfg = st->cfg;
    for (int i = 0; i < cfg->n_kv; i++) {
        if (strcmp(cfg->kv[i].section, section) == 0 && strcmp(cfg->kv[i].key, key) == 0)
            return fail_kv(st, TR_ERR_INVALID, section, key, v,
                           "'%s' is given twice in [%s], on lines %d and %d; expected it once", key, section,
                           cfg->kv[i].line, st->in.line);
    }
    if (cfg->n_kv == TR_CONFIG_MAX_KV)
        return fail_kv(st, TR_ERR_INVALID, section, key, v,
                       "expected at most %d keys in [model] and [backend.NAME] sections together", TR_CONFIG_MAX_KV);
    struct tr_config_kv *kv = &cfg->kv[cfg->n_kv];
    if (!copy_str(kv->value, sizeof kv->value, v))
        return fail_kv(st, TR_ERR_INVALID, section, key, v, "expected a value of at most %zu characters",
                       sizeof kv->value - 1);
    strcpy(kv->section, section);  /* checked by the reader: short enough */
    strcpy(kv->key, key);          /* checked by the handler */
    kv->line = st->in.line;
    cfg->n_kv++;
    return TR_OK;
}

static int handler(void *user, const char *section, const char *key, const char *value) {
    struct ini_state *st = user;
    if (st->fail_line) return 0;
    if (!*key || strlen(key) > KEY_NAME_MAX) {
        fail_line(st, TR_ERR_FORMAT, "syntax error: expected 'key = value' with a key of 1 to %d characters",
                  KEY_NAME_MAX);
        return 0;
    }
    int rc;
    if (!*section)
        rc = fail_line(st, TR_ERR_FORMAT,
                       "%s = %.300s: a key before any section; expected a [run], [plugins], [backend.NAME] or "
                       "[model] line above it",
                       key, value);
    else if (strcmp(section, "run") == 0) rc = run_key(st, key, value);
    else if (strcmp(section, "plugins") == 0) rc = plugins_key(st, key, value);
    else rc = store_kv(st, section, key, value);  /* "model", "train", "generate" or "backend.NAME": the reader checks */
    return rc == TR_OK;
}

/* A "[section]" line as inih reads it: the name ends at ']' unless an inline ';' comment
 * comes first. Anything after the ']' but a comment is refused (inih would ignore it). */
static int check_section_line(struct ini_state *st, const char *s, size_t len) {
    int was_space = 0;
    size_t i = 1;
    while (i < len && s[i] != ']' && !(was_space && s[i] == ';')) was_space = isspace((unsigned char)s[i++]);
    if (i >= len || s[i] != ']') return TR_OK;  /* no ']': inih reports the syntax error */
    char name[128];
    size_t nlen = i - 1 < sizeof name - 1 ? i - 1 : sizeof name - 1;  /* a longer one is unknown anyway */
    memcpy(name, s + 1, nlen);
    name[nlen] = '\0';
    size_t j = i + 1;
    while (j < len && isspace((unsigned char)s[j])) j++;
    if (j < len && s[j] != ';' && s[j] != '#')
        return fail_line(st, TR_ERR_FORMAT, "[%s]: unexpected text after the section name; expected nothing or a "
                         "comment starting with ';' or '#'", name);
    int known = strcmp(name, "run") == 0 || strcmp(name, "plugins") == 0 || strcmp(name, "model") == 0 ||
                strcmp(name, "train") == 0 || strcmp(name, "generate") == 0;
    if (!known && strncmp(name, "backend.", 8) == 0) {
        const char *be = name + 8;
        if (!all_chars(be, NAME_CHARS, 1) || strlen(be) > BACKEND_NAME_MAX)
            return fail_line(st, TR_ERR_INVALID, "[%s]: bad backend name '%s'; expected [backend.NAME] with NAME "
                             "made of " NAME_SAID " (up to %d characters)", name, be, BACKEND_NAME_MAX);
        known = 1;
    }
    if (!known)
        return fail_line(st, TR_ERR_NOT_FOUND, "[%s]: unknown section (expected [run], [plugins], [backend.NAME], "
                         "[model], [train] or [generate])", name);
    /* a section given twice would merge its keys silently: refused, like a repeated key */
    for (int k = 0; k < st->n_sections; k++)
        if (strcmp(st->sections[k].name, name) == 0)
            return fail_line(st, TR_ERR_INVALID, "[%s] appears again (first on line %d); expected each section once",
                             name, st->sections[k].line);
    if (st->n_sections == TR_CONFIG_MAX_SECTIONS)
        return fail_line(st, TR_ERR_INVALID, "[%s]: more than %d sections", name, TR_CONFIG_MAX_SECTIONS);
    snprintf(st->sections[st->n_sections].name, sizeof st->sections[0].name, "%s", name);
    st->sections[st->n_sections++].line = st->in.line;
    return TR_OK;
}

/* Every [backend.NAME] is for a backend that [run] backends lists (a section for another
 * would be ignored silently: a typo in NAME, or a backend dropped from the list). */
/* A [backend.NAME] for a backend the run does not list: kept, unused, and said, so that
 * swapping the backends is the one line (`backends = jax` over a file that configures
 * torch and tf too) and a misspelt section is not silently without effect. */
static void warn_backend_sections(const struct ini_state *st) {
    const struct tr_config *cfg = st->cfg;
    for (int k = 0; k < st->n_sections; k++) {
        const char *name = st->sections[k].name;
        if (strncmp(name, "backend.", 8) != 0) continue;
        int found = 0;
        for (int b = 0; b < cfg->n_backends && !found; b++) found = strcmp(cfg->backends[b].name, name + 8) == 0;
        if (found) continue;
        char list[TR_CONFIG_MAX_BACKENDS * (BACKEND_NAME_MAX + 2) + 1] = "";
        for (int b = 0; b < cfg->n_backends; b++) {
            size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s", b ? ", " : "", cfg->backends[b].name);
        }
        tr_log(TR_LOG_WARN, "warning: %s:%d: [%s]: '%s' is not among the backends this run lists (%s%s): its "
               "options are not used", cfg->file, st->sections[k].line, name, name + 8, list,
               cfg->backends_line ? "" : ", the default");
    }
}

/* A [backend.NAME] mode is for the NAME entries that give none: they take it (so the
 * row's label says the mode that runs). One that no entry takes (each gives its own) is
 * refused, as entries that become the same are (written twice). */
static int fold_section_modes(struct tr_config *cfg, struct tr_error *err) {
    for (int b = 0; b < cfg->n_backends; b++) {
        struct tr_config_backend *be = &cfg->backends[b];
        char section[80];
        snprintf(section, sizeof section, "backend.%s", be->name);
        const struct tr_config_kv *mode = NULL;
        for (int i = 0; i < cfg->n_kv; i++)
            if (!strcmp(cfg->kv[i].section, section) && !strcmp(cfg->kv[i].key, "mode")) mode = &cfg->kv[i];
        if (!mode) continue;
        int taker = 0;
        for (int j = 0; j < cfg->n_backends; j++)
            taker |= !strcmp(cfg->backends[j].name, be->name) &&
                     (!cfg->backends[j].mode[0] || !strcmp(cfg->backends[j].mode, mode->value)); /* or took it */
        if (be->mode[0] && !taker && strcmp(be->mode, mode->value) != 0)
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] mode = %s: the backends entry '%s' (%s:%d) gives "
                                "mode %s, and no '%s' entry goes without one to take this; expected the mode given "
                                "once, in the entry or in the section", cfg->file, mode->line, section, mode->value,
                                be->spec, tr_config_backends_file(cfg), cfg->backends_line, be->mode, be->name);
        if (be->mode[0]) continue;
        if (strlen(mode->value) >= sizeof be->mode || strlen(be->spec) + strlen(mode->value) + 2 > sizeof be->spec)
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] mode = %s: too long", cfg->file, mode->line, section,
                                mode->value);
        snprintf(be->mode, sizeof be->mode, "%s", mode->value);
        be->mode_line = mode->line;
        if (!be->path[0]) {
            const size_t len = strlen(be->spec);
            snprintf(be->spec + len, sizeof be->spec - len, ":%s", mode->value);
        }
        for (int j = 0; j < cfg->n_backends; j++)
            if (j != b && !strcmp(cfg->backends[j].name, be->name) && !strcmp(cfg->backends[j].mode, be->mode) &&
                !strcmp(cfg->backends[j].path, be->path))
                return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] mode = %s makes the backends entry '%s' the "
                                    "same as '%s'; expected each backend (and mode) once", cfg->file, mode->line,
                                    section, mode->value, be->path[0] ? be->spec : be->name, cfg->backends[j].spec);
    }
    return TR_OK;
}

static int on_section(void *user, const char *s, size_t len) { return check_section_line(user, s, len) != TR_OK; }

static void on_too_long(void *user, int max) {
    fail_line(user, TR_ERR_FORMAT, "line too long; expected at most %d characters (a longer prompt goes in a "
              "file: [generate] prompts = FILE, one prompt a line)", max);
}

static int set_file(struct tr_config *cfg, const char *name, struct tr_error *err) {
    if (!copy_str(cfg->file, sizeof cfg->file, name))
        return tr_error_set(err, TR_ERR_INVALID, "config path too long (at most %zu characters): %.200s...",
                            sizeof cfg->file - 1, name);
    const char *slash = strrchr(name, '/');
    if (!slash) strcpy(cfg->dir, ".");
    else if (slash == name) strcpy(cfg->dir, "/");
    else snprintf(cfg->dir, sizeof cfg->dir, "%.*s", (int)(slash - name), name);
    return TR_OK;
}

/* math must fit the dtype and the device; said here, with the line, rather than by a
 * backend halfway through a run. */
static int check_math(struct tr_config *cfg, const int *lines, struct tr_error *err) {
    enum tr_math m = cfg->math;
    const char *dt = tr_dtype_name(cfg->dtype);
    if (m == TR_MATH_DEFAULT) return TR_OK;
    if (m == TR_MATH_BF16 && cfg->dtype != TR_DTYPE_BF16)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [run] math = bf16 with dtype = %s: expected dtype = bf16 (bf16 math is bf16 "
                            "data with f32 accumulation)",
                            cfg->file, lines[RUN_MATH], dt);
    if ((m == TR_MATH_F32 || m == TR_MATH_TF32) && cfg->dtype != TR_DTYPE_F32)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [run] math = %s with dtype = %s: expected dtype = f32",
                            cfg->file, lines[RUN_MATH], tr_math_name(m), dt);
    if (m == TR_MATH_TF32 && cfg->device_type != TR_DEVICE_CUDA)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [run] math = tf32 with device = %s: expected device = cuda (tf32 is a tensor-core "
                            "mode; the cpu computes f32)",
                            cfg->file, lines[RUN_MATH], cfg->device);
    return TR_OK;
}

const char *tr_config_math_name(const struct tr_config *cfg) {
    return cfg->math == TR_MATH_DEFAULT ? tr_dtype_name(cfg->dtype) : tr_math_name(cfg->math);
}

const char *tr_config_key_hint(const char *key, const char *section, const char *const *words, int n, char *buf,
                               size_t cap) {
    const char *near = tr_text_nearest(key, words, n);
    buf[0] = '\0';
    if (near) {
        snprintf(buf, cap, "; did you mean '%s'?", near);
        return buf;
    }
    const char *home = NULL;
    for (int k = 0; k < RUN_KEY_COUNT && !home; k++)
        if (!strcmp(key, run_keys[k])) home = "run";
    int nt = 0;
    const struct tr_model_key *tk = tr_train_keys(&nt);
    for (int k = 0; k < nt && !home; k++)
        if (!strcmp(key, tk[k].name)) home = "train";
    if (home && strcmp(home, section) != 0) snprintf(buf, cap, "; %s is a [%s] key: move it there", key, home);
    return buf;
}

int tr_config_override_key(const char *key) {
    static const enum run_key ok[] = {RUN_BACKENDS, RUN_PRESET, RUN_DEVICE, RUN_DTYPE, RUN_BATCH, RUN_SEQ_LEN,
                                      RUN_STEPS, RUN_WARMUP, RUN_SEED, RUN_TOLERANCE, RUN_ISOLATE,
                                      RUN_BACKEND_TIMEOUT};
    for (size_t i = 0; key && i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(key, run_keys[ok[i]]) == 0) return 1;
    return 0;
}

const char *tr_config_backends_file(const struct tr_config *cfg) {
    return cfg->backends_from[0] ? cfg->backends_from : cfg->file;
}

int tr_config_run_line(const struct tr_config *cfg, const char *key) {
    for (int k = 0; k < RUN_KEY_COUNT && k < TR_CONFIG_RUN_KEYS; k++)
        if (!strcmp(run_keys[k], key)) return cfg->run_key_lines[k];
    return 0;
}

const char *tr_config_where(const struct tr_config *cfg, const char *key, int line, char *buf, size_t n) {
    for (int i = cfg->n_over - 1; i >= 0; i--) /* the last override of a key is the one that holds */
        if (strcmp(cfg->over[i].key, key) == 0) {
            snprintf(buf, n, "%s:%d: [%s] %s", cfg->over_file, cfg->over[i].line, cfg->over[i].section, key);
            return buf;
        }
    if (line > 0) snprintf(buf, n, "%s:%d: [run] %s", cfg->file, line, key);
    else snprintf(buf, n, "%s: [run] %s", cfg->file, key);
    return buf;
}

const char *tr_config_overrides_str(const struct tr_config *cfg, char *buf, size_t n) {
    size_t off = 0;
    if (n) buf[0] = '\0';
    for (int i = 0; i < cfg->n_over && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%s = %s (%s:%d [%s])", i ? ", " : "; the suite set ",
                                cfg->over[i].key, cfg->over[i].value, cfg->over_file, cfg->over[i].line,
                                cfg->over[i].section);
    return buf;
}

/* The overrides over what the file's [run] said; *backends_set when one set the list. */
static int apply_overrides(struct ini_state *st, const struct tr_config_override *over, int n_over,
                           int *backends_set) {
    for (int i = 0; i < n_over; i++) {
        const struct tr_config_override *o = &over[i];
        st->in.line = o->line;
        st->where_file = o->file;
        st->where_section = o->section;
        int rc = TR_ERR_NOT_FOUND;
        if (!tr_config_override_key(o->key))
            rc = fail_kv(st, TR_ERR_INVALID, "run", o->key, o->value,
                         "not a key a suite may set; expected one of " TR_CONFIG_OVERRIDE_KEYS
                         " (the rest is the row's INI's)");
        for (int k = 0; rc == TR_ERR_NOT_FOUND && k < RUN_KEY_COUNT; k++)
            if (strcmp(o->key, run_keys[k]) == 0) {
                st->run_lines[k] = o->line;
                rc = run_set(st, (enum run_key)k, o->value);
                *backends_set |= k == RUN_BACKENDS;
            }
        if (rc) return rc;
        struct tr_config *cfg = st->cfg;
        if (cfg->n_over < (int)(sizeof cfg->over / sizeof cfg->over[0])) {
            struct tr_config_origin *g = &cfg->over[cfg->n_over++];
            snprintf(cfg->over_file, sizeof cfg->over_file, "%s", o->file);
            snprintf(g->key, sizeof g->key, "%s", o->key);
            snprintf(g->section, sizeof g->section, "%s", o->section);
            snprintf(g->value, sizeof g->value, "%s", o->value);
            g->line = o->line;
        }
    }
    st->where_file = st->where_section = NULL;
    return TR_OK;
}

static int load_text(const char *text, const char *name, const struct tr_config_override *over, int n_over,
                     struct tr_config *cfg, struct tr_error *err) {
    if (!text || !cfg) return tr_error_set(err, TR_ERR_INVALID, "tr_config_load_string: NULL text or config");
    tr_config_defaults(cfg);
    int rc = set_file(cfg, name ? name : "<string>", err);
    if (rc) return rc;
    struct ini_state st = {.cfg = cfg, .err = err};
    st.in = (struct tr_ini_text){.pos = text, .user = &st, .section = on_section, .too_long = on_too_long};
    int bad = ini_parse_stream(tr_ini_text_read, &st.in, handler, &st);
    if (bad > 0 && (!st.fail_line || bad < st.fail_line)) {
        char found[64];
        tr_ini_text_line(text, bad, found, sizeof found);
        return tr_error_set(err, TR_ERR_FORMAT,
                            "%s:%d: syntax error: expected '[section]' or 'key = value' (found '%s')", cfg->file,
                            bad, found);
    }
    if (st.fail_line) return st.fail_status;
    if (bad < 0) return tr_error_set(err, TR_ERR_NOMEM, "%s: the INI parser ran out of memory", cfg->file);
    for (int k = 0; k < RUN_KEY_COUNT && k < TR_CONFIG_RUN_KEYS; k++) cfg->run_key_lines[k] = st.run_lines[k];
    cfg->model_line = st.run_lines[RUN_MODEL];
    cfg->preset_line = st.run_lines[RUN_PRESET];
    cfg->task_line = st.run_lines[RUN_TASK];
    int backends_set = 0;
    if ((rc = apply_overrides(&st, over, n_over, &backends_set)) != TR_OK) return rc;
    if (!backends_set) warn_backend_sections(&st);
    if ((rc = fold_section_modes(cfg, err)) != TR_OK) return rc;
    if (cfg->weights_variant[0] && !cfg->weights[0])
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [run] weights_variant = %s without [run] weights; expected a weights = DIR line "
                            "whose files it picks (or no weights_variant)",
                            cfg->file, st.run_lines[RUN_WEIGHTS_VARIANT], cfg->weights_variant);
    if (cfg->reference_tolerance > 0 && !cfg->reference[0])
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s:%d: [run] reference_tolerance without a [run] reference; expected a reference = "
                            "FILE.safetensors line to compare against (or no reference_tolerance)",
                            cfg->file, st.run_lines[RUN_REFERENCE_TOLERANCE]);
    return check_math(cfg, st.run_lines, err);
}

int tr_config_load_string(const char *text, const char *name, struct tr_config *cfg, struct tr_error *err) {
    return load_text(text, name, NULL, 0, cfg, err);
}

int tr_config_load(const char *path, struct tr_config *cfg, struct tr_error *err) {
    return tr_config_load_over(path, NULL, 0, cfg, err);
}

int tr_config_load_over(const char *path, const struct tr_config_override *over, int n_over, struct tr_config *cfg,
                        struct tr_error *err) {
    if (!path || !cfg) return tr_error_set(err, TR_ERR_INVALID, "tr_config_load: NULL path or config");
    char *text;
    int rc = tr_ini_text_load(path, "config file", &text, err);
    if (rc) return rc;
    rc = load_text(text, path, over, n_over, cfg, err);
    free(text);
    return rc;
}

int tr_config_backend_options(const struct tr_config *cfg, const struct tr_config_backend *be,
                              struct tr_option *out, int max) {
    char section[80];
    snprintf(section, sizeof section, "backend.%s", be->name);
    int n = 0;
    for (int i = 0; i < cfg->n_kv && n < max; i++) {
        const struct tr_config_kv *kv = &cfg->kv[i];
        if (strcmp(kv->section, section) != 0) continue;
        /* The entry's own mode ("torch:reduce-overhead") wins over a mode in the section. */
        if (be->mode[0] && strcmp(kv->key, "mode") == 0) continue;
        out[n++] = (struct tr_option){.key = kv->key, .value = kv->value, .file = cfg->file, .line = kv->line};
    }
    if (be->mode[0] && n < max) /* the line that gave it: the entry's, or the section's it took */
        out[n++] = (struct tr_option){.key = "mode", .value = be->mode, .file = cfg->file,
                                      .line = be->mode_line ? be->mode_line : cfg->backends_line};
    return n;
}

int tr_config_data_parallel(const struct tr_config *cfg) { return cfg && (cfg->joined || cfg->ranks > 1); }
