/* A suite of benchmark rows (suite.h): the suite INI, each row's config, the summary. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "trident/report.h"
#include "trident/suite.h"
#include "bench_util.h"
#include "bench_json.h"
#include "ini_text.h"

/* ---- reading the suite INI ---- */

struct suite_state {
    struct tr_suite *s;
    struct tr_error *err;
    struct tr_ini_text in;
    int failed;
    int suite_line;             /* of [suite]; 0 before it */
    struct tr_suite_row *row;   /* the [row.NAME] being read; NULL in [suite] */
};

__attribute__((format(printf, 2, 3)))
static int fail(struct suite_state *st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tr_error_set_atv(st->err, TR_ERR_INVALID, st->s->file, st->in.line, fmt, ap);
    va_end(ap);
    st->failed = st->in.stop = 1;
    return 1;
}

static int name_ok(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '-')) return 0;
    return 1;
}

/* "[suite]" or "[row.NAME]", each once; anything else is refused by name. */
static int on_section(void *user, const char *line, size_t len) {
    struct suite_state *st = user;
    const char *close = memchr(line, ']', len);
    if (!close) return 0; /* inih reports the syntax error */
    char name[128];
    size_t n = (size_t)(close - line - 1);
    if (n >= sizeof name) return fail(st, "a section name of %zu characters; expected [suite] or [row.NAME]", n);
    memcpy(name, line + 1, n);
    name[n] = '\0';
    for (const char *p = close + 1; p < line + len && *p != ';' && *p != '#'; p++)
        if (!isspace((unsigned char)*p))
            return fail(st, "[%s]: unexpected text after the section name; expected nothing or a comment", name);
    if (strcmp(name, "suite") == 0) {
        if (st->suite_line) return fail(st, "[suite] appears again (first on line %d); expected it once", st->suite_line);
        st->suite_line = st->in.line;
        st->row = NULL;
        return 0;
    }
    if (strncmp(name, "row.", 4) != 0 || !name_ok(name + 4) || strlen(name + 4) >= sizeof st->row->name)
        return fail(st, "[%s]: unknown section; expected [suite] or [row.NAME] with NAME made of letters, digits, "
                    "'_' and '-' (up to %zu characters)", name, sizeof st->row->name - 1);
    struct tr_suite *s = st->s;
    for (int i = 0; i < s->n_rows; i++)
        if (strcmp(s->rows[i].name, name + 4) == 0)
            return fail(st, "[%s] appears again (first on line %d); expected each row once", name, s->rows[i].line);
    if (s->n_rows == TR_SUITE_MAX_ROWS) return fail(st, "[%s]: more than %d rows", name, TR_SUITE_MAX_ROWS);
    st->row = &s->rows[s->n_rows++];
    memset(st->row, 0, sizeof *st->row);
    snprintf(st->row->name, sizeof st->row->name, "%s", name + 4);
    snprintf(st->row->section, sizeof st->row->section, "row.%s", st->row->name);
    snprintf(st->row->label, sizeof st->row->label, "%s", st->row->name);
    st->row->line = st->in.line;
    return 0;
}

static void on_too_long(void *user, int max) {
    fail(user, "line too long; expected at most %d characters", max);
}

static int add_key(struct suite_state *st, struct tr_suite_key *keys, int *n, const char *section, const char *key,
                   const char *value) {
    if (!tr_config_override_key(key)) {
        static const char *const words[] = {"config", "label", "backends", "preset", "device", "dtype", "batch",
                                            "seq_len", "steps", "warmup", "seed", "tolerance", "isolate",
                                            "backend_timeout"};
        char hint[128];
        tr_config_key_hint(key, "suite", st->row ? words : words + 2, st->row ? 14 : 12, hint, sizeof hint);
        return fail(st, "[%s] %s = %s: unknown key%s; expected %sa [run] key a suite may set (" TR_CONFIG_OVERRIDE_KEYS
                    ")", section, key, value, hint, st->row ? "config, label or " : "");
    }
    for (int i = 0; i < *n; i++)
        if (strcmp(keys[i].key, key) == 0)
            return fail(st, "[%s] '%s' is given twice, on lines %d and %d; expected it once", section, key,
                        keys[i].line, st->in.line);
    if (*n == TR_SUITE_MAX_KEYS) return fail(st, "[%s]: more than %d keys", section, TR_SUITE_MAX_KEYS);
    if (strlen(value) >= sizeof keys[0].value)
        return fail(st, "[%s] %s: a value of more than %zu characters", section, key, sizeof keys[0].value - 1);
    struct tr_suite_key *k = &keys[(*n)++];
    snprintf(k->key, sizeof k->key, "%s", key);
    snprintf(k->value, sizeof k->value, "%s", value);
    k->line = st->in.line;
    return 0;
}

static int handler(void *user, const char *section, const char *key, const char *value) {
    struct suite_state *st = user;
    if (st->failed) return 0;
    if (!*section) {
        fail(st, "%s = %.200s: a key before any section; expected a [suite] or [row.NAME] line above it", key, value);
        return 0;
    }
    struct tr_suite_row *r = st->row;
    if (!r) return !add_key(st, st->s->keys, &st->s->n_keys, "suite", key, value);
    if (strcmp(key, "label") == 0) {
        if (!*value || strlen(value) >= sizeof r->label)
            return !fail(st, "[%s] label = %.200s: expected a name of 1 to %zu characters", r->section, value,
                         sizeof r->label - 1);
        snprintf(r->label, sizeof r->label, "%s", value);
        return 1;
    }
    if (strcmp(key, "config") == 0) {
        if (r->config[0]) return !fail(st, "[%s] 'config' is given twice; expected it once", r->section);
        struct tr_config *base = calloc(1, sizeof *base); /* tr_config_path reads its dir */
        if (!base) return !fail(st, "out of memory");
        snprintf(base->dir, sizeof base->dir, "%s", st->s->dir);
        struct tr_error e = {0};
        int rc = tr_config_path(base, value, r->config, sizeof r->config, &e);
        free(base);
        if (rc) return !fail(st, "[%s] config = %.200s: %s", r->section, value, e.msg);
        /* a file that is not there is the row's problem (tr_suite_row_config), said with
         * every other row's, not the suite's */
        snprintf(r->config_value, sizeof r->config_value, "%s", value);
        r->config_line = st->in.line;
        return 1;
    }
    return !add_key(st, r->keys, &r->n_keys, r->section, key, value);
}

static int scan_suite_section(void *user, const char *line, size_t len) {
    int *found = user;
    *found |= len >= 7 && strncmp(line, "[suite]", 7) == 0;
    return 0;
}

static int ignore_kv(void *user, const char *section, const char *key, const char *value) {
    (void)user, (void)section, (void)key, (void)value;
    return 1;
}

int tr_suite_detect(const char *path, int *is_suite, struct tr_error *err) {
    *is_suite = 0;
    char *text;
    int rc = tr_ini_text_load(path, "config file", &text, err);
    if (rc) return rc;
    struct tr_ini_text in = {.pos = text, .user = is_suite, .section = scan_suite_section};
    ini_parse_stream(tr_ini_text_read, &in, ignore_kv, NULL); /* a syntax error is the real reader's to report */
    free(text);
    return TR_OK;
}

int tr_suite_load(const char *path, struct tr_suite *s, struct tr_error *err) {
    memset(s, 0, sizeof *s);
    if (strlen(path) >= sizeof s->file)
        return tr_error_set(err, TR_ERR_INVALID, "suite path too long (at most %zu characters)", sizeof s->file - 1);
    snprintf(s->file, sizeof s->file, "%s", path);
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(s->dir, sizeof s->dir, ".");
    else if (slash == path) snprintf(s->dir, sizeof s->dir, "/");
    else snprintf(s->dir, sizeof s->dir, "%.*s", (int)(slash - path), path);
    char *text;
    int rc = tr_ini_text_load(path, "suite file", &text, err);
    if (rc) return rc;
    struct suite_state st = {.s = s, .err = err};
    st.in = (struct tr_ini_text){.pos = text, .user = &st, .section = on_section, .too_long = on_too_long};
    int bad = ini_parse_stream(tr_ini_text_read, &st.in, handler, &st);
    if (bad > 0 && !st.failed) {
        char found[64];
        tr_ini_text_line(text, bad, found, sizeof found);
        tr_error_set(err, TR_ERR_FORMAT, "%s:%d: syntax error: expected '[section]' or 'key = value' (found '%s')",
                     path, bad, found);
        st.failed = 1;
    }
    free(text);
    if (st.failed) return err->status ? err->status : TR_ERR_FORMAT;
    if (bad < 0) return tr_error_set(err, TR_ERR_NOMEM, "%s: the INI parser ran out of memory", path);
    if (s->n_rows == 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: no rows; expected [row.NAME] sections, each with config = "
                            "A_RUN.ini", path);
    for (int i = 0; i < s->n_rows; i++)
        if (!s->rows[i].config[0])
            return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] has no config; expected config = A_RUN.ini", path,
                                s->rows[i].line, s->rows[i].section);
    return TR_OK;
}

int tr_suite_select(struct tr_suite *s, const char *rows, struct tr_error *err) {
    if (!rows) return TR_OK;
    unsigned char keep[TR_SUITE_MAX_ROWS] = {0};
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", rows);
    for (char *save = NULL, *pat = strtok_r(buf, ",", &save); pat; pat = strtok_r(NULL, ",", &save)) {
        while (isspace((unsigned char)*pat)) pat++;
        for (char *e = pat + strlen(pat); e > pat && isspace((unsigned char)e[-1]);) *--e = '\0';
        int hits = 0;
        for (int i = 0; i < s->n_rows; i++)
            if (fnmatch(pat, s->rows[i].name, 0) == 0) keep[i] = 1, hits++;
        if (!hits) {
            char names[1024] = "";
            for (int i = 0; i < s->n_rows; i++) {
                size_t n = strlen(names);
                snprintf(names + n, sizeof names - n, "%s%s", i ? ", " : "", s->rows[i].name);
            }
            return tr_error_set(err, TR_ERR_NOT_FOUND, "--rows %s: '%s' matches no row of %s (rows: %s)", rows, pat,
                                s->file, names);
        }
    }
    int n = 0;
    for (int i = 0; i < s->n_rows; i++)
        if (keep[i]) s->rows[n++] = s->rows[i];
    if (n == 0) /* "" or "," names no row: a suite of nothing is no answer */
        return tr_error_set(err, TR_ERR_INVALID, "--rows '%s': no row name or pattern in it; expected NAME,PATTERN...",
                            rows);
    s->n_rows = n;
    return TR_OK;
}

int tr_suite_row_config(const struct tr_suite *s, int i, struct tr_config *cfg, struct tr_error *err) {
    if (i < 0 || i >= s->n_rows) return tr_error_set(err, TR_ERR_INVALID, "tr_suite_row_config: no row %d", i);
    const struct tr_suite_row *r = &s->rows[i];
    struct stat sb;
    if (stat(r->config, &sb) != 0 || !S_ISREG(sb.st_mode))
        return tr_error_set(err, TR_ERR_IO, "%s:%d: [%s] config = %.200s: cannot open %s: %s; expected a run INI (a "
                            "relative path is taken from the suite's directory)", s->file, r->config_line, r->section,
                            r->config_value, r->config, stat(r->config, &sb) != 0 ? strerror(errno) : "not a regular file");
    struct tr_config_override over[2 * TR_SUITE_MAX_KEYS];
    int n = 0;
    for (int k = 0; k < s->n_keys; k++)
        over[n++] = (struct tr_config_override){s->file, s->keys[k].line, "suite", s->keys[k].key, s->keys[k].value};
    for (int k = 0; k < r->n_keys; k++)
        over[n++] = (struct tr_config_override){s->file, r->keys[k].line, r->section, r->keys[k].key, r->keys[k].value};
    int rc = tr_config_load_over(r->config, over, n, cfg, err);
    const size_t len = strlen(s->file);
    if (rc && strncmp(err->msg, s->file, len) == 0 && err->msg[len] == ':') return rc; /* an override's: named */
    if (rc && strstr(err->msg, "[suite]: unknown section")) /* a suite for a row: said as that */
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [%s] config = %.200s: a suite (its [suite] section); a row's "
                            "config is a run INI ([run], [model] ...): suites do not nest", s->file, r->config_line,
                            r->section, r->config_value);
    return rc ? tr_error_prefix(err, "%s:%d: [%s]", s->file, r->line, r->section) : TR_OK;
}

/* ---- the summary ---- */

struct columns {
    const char *label[TR_SUITE_MAX_COLUMNS];
    int n;
};

static void columns_of(const struct tr_suite *s, const struct tr_suite_result *res, struct columns *c) {
    c->n = 0;
    for (int i = 0; i < s->n_rows; i++)
        for (int b = 0; b < res[i].rep.n_rows; b++) {
            const char *l = res[i].rep.rows[b].label;
            int seen = 0;
            for (int k = 0; k < c->n && !seen; k++) seen = strcmp(c->label[k], l) == 0;
            if (!seen && c->n < TR_SUITE_MAX_COLUMNS) c->label[c->n++] = l;
        }
}

static const struct tr_bench_row *row_of(const struct tr_suite_result *r, const char *label) {
    for (int b = 0; b < r->rep.n_rows; b++)
        if (strcmp(r->rep.rows[b].label, label) == 0) return &r->rep.rows[b];
    return NULL;
}

/* A row's best: its run's table's (a wrong answer fast is no one's best). */
static double best_of(const struct tr_suite_result *r) { return tr_bench_best_mean(&r->rep); }

/* A backend of the row took timed steps. */
static int row_ran(const struct tr_suite_result *r) {
    for (int b = 0; b < r->rep.n_rows; b++)
        if (r->rep.rows[b].ok && r->rep.rows[b].steps_run > 0) return 1;
    return 0;
}

/* What ran: "bert/small fit, batch 8, f32". */
static void what_ran(const struct tr_suite_result *r, char *buf, size_t n) {
    if (!r->rep.model[0]) {
        snprintf(buf, n, "%s", r->status == TR_SUITE_NOT_RUN ? "(not run)" : "(failed before it ran)");
        return;
    }
    snprintf(buf, n, "%.40s/%.40s %.16s, batch %lld, %.8s", r->rep.model, r->rep.preset, r->rep.task, (long long)r->rep.batch,
             r->rep.math[0] ? r->rep.math : r->rep.dtype);
}

enum cell_style { CELL_TEXT, CELL_MD };

/* One backend's cell of one row. */
static void cell(const struct tr_suite_result *r, const char *label, enum cell_style style, char *buf, size_t n) {
    const struct tr_bench_row *x = row_of(r, label);
    if (!x) { /* no backend row at all: the row never reached its backends */
        snprintf(buf, n, "%s", r->rep.n_rows == 0 ? "not run" : "-");
        return;
    }
    if (!x->ok) {
        snprintf(buf, n, "FAILED");
        return;
    }
    if (x->steps_run == 0) {
        snprintf(buf, n, "not run");
        return;
    }
    const double best = best_of(r);
    /* what a reader must weigh the number by: wrong outputs, or a p90 far above the median */
    char tags[40];
    snprintf(tags, sizeof tags, "%s%s%s", x->agrees ? "" : "disagrees", !x->agrees && tr_bench_row_noisy(x) ? ", " : "",
             tr_bench_row_noisy(x) ? "noisy" : "");
    if (x->mean_ms == best) {
        const char *open = tags[0] ? " (" : "", *close = tags[0] ? ")" : "";
        if (style == CELL_MD) snprintf(buf, n, "**%.2f**%s%s%s", x->mean_ms, open, tags, close);
        else snprintf(buf, n, "*%.2f%s%s%s", x->mean_ms, open, tags, close);
    } else snprintf(buf, n, "%.2f (%.2fx%s%s)", x->mean_ms, x->mean_ms / best, tags[0] ? ", " : "", tags);
}

static void summary_title(const struct tr_suite *s, const struct tr_suite_result *res, char *buf, size_t n) {
    int ran = 0, ok = 0, early = 0;
    for (int i = 0; i < s->n_rows; i++) {
        ran += row_ran(&res[i]), ok += res[i].status == TR_SUITE_OK;
        early += res[i].status == TR_SUITE_FAILED && !row_ran(&res[i]);
    }
    char tail[64] = "";
    if (early) snprintf(tail, sizeof tail, "; %d failed before any backend ran", early);
    snprintf(buf, n, "suite %s: %d rows, %d ran, %d of them with every backend ran and agreeing%s", s->file, s->n_rows,
             ran, ok, tail);
}

void tr_suite_print(const struct tr_suite *s, const struct tr_suite_result *res, FILE *f) {
    struct columns c;
    columns_of(s, res, &c);
    char title[TR_CONFIG_PATH + 128];
    summary_title(s, res, title, sizeof title);
    fprintf(f, "\n%s\nmean ms/step over the timed steps (first step left out); * the row's best, the others' ratio "
            "to it\n\n", title);
    int wl = 3, ww = 3, w[TR_SUITE_MAX_COLUMNS];
    char buf[160];
    for (int i = 0; i < s->n_rows; i++) {
        what_ran(&res[i], buf, sizeof buf);
        int a = (int)strlen(s->rows[i].label), b = (int)strlen(buf);
        wl = a > wl ? a : wl, ww = b > ww ? b : ww;
    }
    /* c.n <= TR_SUITE_MAX_COLUMNS (columns_of), said again for GCC 12 at -O3, which warns
     * of reading c past its labels (-Wmaybe-uninitialized) otherwise */
    for (int k = 0; k < c.n && k < TR_SUITE_MAX_COLUMNS; k++) {
        w[k] = (int)strlen(c.label[k]);
        for (int i = 0; i < s->n_rows; i++) {
            cell(&res[i], c.label[k], CELL_TEXT, buf, sizeof buf);
            w[k] = (int)strlen(buf) > w[k] ? (int)strlen(buf) : w[k];
        }
    }
    fprintf(f, "%-*s  %-*s", wl, "row", ww, "run");
    for (int k = 0; k < c.n; k++) fprintf(f, "  %-*s", w[k], c.label[k]);
    fputc('\n', f);
    for (int i = 0; i < s->n_rows; i++) {
        what_ran(&res[i], buf, sizeof buf);
        fprintf(f, "%-*s  %-*s", wl, s->rows[i].label, ww, buf);
        for (int k = 0; k < c.n; k++) {
            cell(&res[i], c.label[k], CELL_TEXT, buf, sizeof buf);
            fprintf(f, "  %-*s", w[k], buf);
        }
        fputc('\n', f);
    }
    for (int i = 0; i < s->n_rows; i++)
        if (res[i].status == TR_SUITE_FAILED && res[i].error[0])
            fprintf(f, "%s: %s\n", s->rows[i].name, res[i].error);
}

static FILE *open_out(const char *path, struct tr_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) tr_error_set(err, TR_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return f;
}

static int close_out(FILE *f, const char *path, struct tr_error *err) {
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return tr_error_set(err, TR_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return TR_OK;
}

static void md_text(FILE *f, const char *s) { tr_md_text(f, s); }

int tr_suite_write_md(const struct tr_suite *s, const struct tr_suite_result *res, const char *path,
                      struct tr_error *err) {
    FILE *f = open_out(path, err);
    if (!f) return err->status;
    struct columns c;
    columns_of(s, res, &c);
    char title[TR_CONFIG_PATH + 128], buf[160];
    summary_title(s, res, title, sizeof title);
    fputs("# ", f);
    md_text(f, title);
    fputs("\n\nMean ms/step over the timed steps (the first step left out); the row's best in bold, the others "
          "with their ratio to it.\n\n| row | run |", f);
    for (int k = 0; k < c.n; k++) {
        fputc(' ', f);
        md_text(f, c.label[k]);
        fputs(" |", f);
    }
    fputs("\n|---|---|", f);
    for (int k = 0; k < c.n; k++) fputs("---:|", f);
    fputc('\n', f);
    for (int i = 0; i < s->n_rows; i++) {
        fputs("| ", f);
        md_text(f, s->rows[i].label);
        what_ran(&res[i], buf, sizeof buf);
        fputs(" | ", f);
        md_text(f, buf);
        fputs(" |", f);
        for (int k = 0; k < c.n; k++) {
            cell(&res[i], c.label[k], CELL_MD, buf, sizeof buf);
            fprintf(f, " %s |", buf);
        }
        fputc('\n', f);
    }
    for (int i = 0; i < s->n_rows; i++)
        if (res[i].status == TR_SUITE_FAILED && res[i].error[0]) {
            fprintf(f, "\n%s: ", s->rows[i].name);
            md_text(f, res[i].error);
            fputc('\n', f);
        }
    if (s->n_rows && res[0].rep.cpu.model[0]) {
        fputs("\nHost: ", f);
        md_text(f, res[0].rep.cpu.model);
        fprintf(f, ", isa %s, %d threads.\n", tr_cpu_isa_name(res[0].rep.cpu.isa), res[0].rep.threads);
    }
    for (int i = 0; i < s->n_rows; i++) /* the first row that ran on a GPU names it */
        if (res[i].rep.gpu[0]) {
            fputs("\nGPU: ", f);
            md_text(f, res[i].rep.gpu);
            fputs(".\n", f);
            break;
        }
    return close_out(f, path, err);
}

static void csv_field(FILE *f, const char *s) {
    char clean[512];
    tr_utf8_sanitize(clean, sizeof clean, s);
    if (!strpbrk(clean, ",\"\r\n")) {
        fputs(clean, f);
        return;
    }
    fputc('"', f);
    for (const char *p = clean; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

int tr_suite_write_csv(const struct tr_suite *s, const struct tr_suite_result *res, const char *path,
                       struct tr_error *err) {
    FILE *f = open_out(path, err);
    if (!f) return err->status;
    fputs("row,label,model,preset,task,batch,math,backend,ok,agrees,mean_ms,median_ms,p90_ms,first_ms,"
          "ratio_to_best\r\n", f);
    for (int i = 0; i < s->n_rows; i++) {
        const struct tr_suite_result *r = &res[i];
        const double best = best_of(r);
        /* a row that reached no backend still has its record, the backend empty */
        for (int b = 0; b < (r->rep.n_rows ? r->rep.n_rows : 1); b++) {
            const struct tr_bench_row *x = r->rep.n_rows ? &r->rep.rows[b] : &(const struct tr_bench_row){0};
            const int ran = x->ok && x->steps_run > 0;
            csv_field(f, s->rows[i].name);
            fputc(',', f);
            csv_field(f, s->rows[i].label);
            fputc(',', f);
            if (r->rep.model[0])
                fprintf(f, "%s,%s,%s,%lld,%s,", r->rep.model, r->rep.preset, r->rep.task, (long long)r->rep.batch,
                        r->rep.math[0] ? r->rep.math : r->rep.dtype);
            else fputs(",,,,,", f);
            csv_field(f, x->label);
            fprintf(f, ",%d,%d,", x->ok, x->agrees);
            if (ran)
                fprintf(f, "%.6g,%.6g,%.6g,%.6g,%.4f\r\n", x->mean_ms, x->median_ms, x->p90_ms, x->first_ms,
                        best > 0 ? x->mean_ms / best : 0.0);
            else fputs(",,,,\r\n", f);
        }
    }
    return close_out(f, path, err);
}

int tr_suite_write_json(const struct tr_suite *s, const struct tr_suite_result *res, int interrupted,
                        const char *path, struct tr_error *err) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory", path);
    cJSON_AddNumberToObject(root, "schema", TR_REPORT_SCHEMA);
    tr_json_add_str(root, "kind", "suite");
    tr_json_add_str(root, "trident_version", tr_report_version());
    tr_json_add_str(root, "git_commit", tr_report_git_commit());
    tr_json_add_str(root, "suite", s->file);
    cJSON_AddBoolToObject(root, "interrupted", interrupted);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    static const char *const status[] = {"not run", "ok", "failed"};
    for (int i = 0; i < s->n_rows; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(rows, o);
        tr_json_add_str(o, "name", s->rows[i].name);
        tr_json_add_str(o, "label", s->rows[i].label);
        tr_json_add_str(o, "config", s->rows[i].config);
        tr_json_add_str(o, "status", status[res[i].status]);
        if (res[i].error[0]) tr_json_add_str(o, "error", res[i].error);
        if (res[i].rep.n_rows > 0) {
            cJSON *rep = tr_bench_json(&res[i].rep);
            if (rep) cJSON_AddItemToObject(o, "report", rep);
        }
    }
    int rc = tr_json_write(root, path, err);
    cJSON_Delete(root);
    return rc;
}
