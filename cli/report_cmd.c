/* trident report A.json B.json: two runs' reports side by side, and which backends
 * changed beyond the runs' own spread (two suites' documents: row by row). Also `trident run --report DIR` (its files are
 * core's: trident/report.h). docs/report.md states the rule for CHANGED. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/parse.h"
#include "cli.h"
#include "trident/bench.h"
#include "trident/report.h"

int tr_cli_write_report_dir(const struct tr_bench_report *rep, const char *dir, int log_scale) {
    struct tr_report_opts opts = {.log_scale = log_scale};
    struct tr_error err = {0};
    if (tr_report_write_dir(rep, dir, &opts, &err)) {
        fflush(stdout);
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    printf("\nreport: %s/report.md, report.csv, report.json, chart.svg\n", dir);
    return 0;
}

/* A report file, parsed; the caller frees with cJSON_Delete. */
/* A suite's document (trident bench SUITE.ini --json): "kind": "suite", its rows' reports inside. */
static int is_suite(const cJSON *root) {
    const char *k = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(root, "kind"));
    return k && strcmp(k, "suite") == 0;
}

/* Every string of the report made safe to print: a control character (a label or path
 * edited to hold an escape sequence) becomes '?', before anything reads or prints it. */
static void printable(cJSON *j) {
    for (; j; j = j->next) {
        if (cJSON_IsString(j)) tr_text_printable(j->valuestring);
        tr_text_printable(j->string);
        printable(j->child);
    }
}

static int load_report(const char *path, cJSON **out, struct tr_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tr_error_set(err, TR_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    /* a report is some KiB (a MiB with 1024 step times for 8 backends): far under this */
    enum { MAX_BYTES = 64 << 20 };
    size_t n = 0, cap = 1 << 16;
    char *text = malloc(cap);
    int rc = TR_OK;
    while (text) {
        n += fread(text + n, 1, cap - n, f);
        if (n < cap || ferror(f)) break;
        if (cap >= MAX_BYTES) {
            rc = tr_error_set(err, TR_ERR_FORMAT, "%s: over %d MiB: not a trident report", path, MAX_BYTES >> 20);
            break;
        }
        char *t = realloc(text, cap *= 2);
        if (!t) free(text);
        text = t;
    }
    if (!text) rc = tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory", path);
    else if (!rc && ferror(f)) rc = tr_error_set(err, TR_ERR_IO, "%s: read failed: %s", path, strerror(errno));
    fclose(f);
    if (rc) {
        free(text);
        return rc;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        /* where it broke, as line:column, so the file can be fixed or recognised */
        size_t at = end && end >= text ? (size_t)(end - text) : 0, line = 1, col = 1;
        for (size_t i = 0; i < at && i < n; i++) {
            if (text[i] == '\n') line++, col = 1;
            else col++;
        }
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: not JSON (parse error near line %zu, column %zu); expected a trident "
                          "report (trident run --json or --report)", path, line, col);
    }
    free(text);
    if (rc) return rc;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(root, "schema");
    const int suite = is_suite(root);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, suite ? "rows" : "backends");
    if (!cJSON_IsObject(root) || !cJSON_IsNumber(schema))
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: no \"schema\" field: not a trident report of schema %d (written by "
                          "trident run --json or --report; one from before schema %d has to be made again)",
                          path, TR_REPORT_SCHEMA, TR_REPORT_SCHEMA);
    else if (schema->valuedouble != TR_REPORT_SCHEMA)
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: report schema %g; this trident reads schema %d", path,
                          schema->valuedouble, TR_REPORT_SCHEMA);
    else if (!cJSON_IsArray(rows))
        rc = tr_error_set(err, TR_ERR_FORMAT, "%s: schema %d %s without a \"%s\" array", path, TR_REPORT_SCHEMA,
                          suite ? "suite" : "report", suite ? "rows" : "backends");
    if (rc) {
        cJSON_Delete(root);
        return rc;
    }
    printable(root);
    *out = root;
    return TR_OK;
}

static const char *str_of(const cJSON *o, const char *key) {
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
    return s ? s : "?";
}

static double num_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const cJSON *find_row(const cJSON *rep, const char *label) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(rep, "backends"))
        if (strcmp(str_of(r, "backend"), label) == 0) return r;
    return NULL;
}

static int row_ok(const cJSON *r) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok")); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A row's spread: p90 - median of its step times (step_ms, as tr_bench_row_times takes
 * them); from its "p90_ms" and "median_ms" when it has fewer than 2 step times. */
static double row_spread(const cJSON *r) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(r, "step_ms");
    int n = cJSON_GetArraySize(st);
    double *t = n >= 2 ? malloc(sizeof(double) * (size_t)n) : NULL;
    if (!t) return num_of(r, "p90_ms") - num_of(r, "median_ms");
    int k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, st) if (cJSON_IsNumber(v)) t[k++] = v->valuedouble;
    double spread = NAN;
    if (k >= 2) {
        qsort(t, (size_t)k, sizeof(double), cmp_double);
        double median = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
        spread = t[(size_t)ceil(0.9 * k) - 1] - median;
    }
    free(t);
    return spread;
}

/* "A: a.json  bert/tiny predict, cpu f32, batch 8, 20 steps; trident 0.1.0 3bb0222; cpu X" */
static void print_source(const char *name, const char *path, const cJSON *rep) {
    const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(rep, "cpu");
    printf("%s: %s  %s/%s %s, %s %s, batch %g, %g steps; trident %s %s; cpu %s%s\n", name, path, str_of(rep, "model"),
           str_of(rep, "preset"), str_of(rep, "task"), str_of(rep, "device"), str_of(rep, "dtype"),
           num_of(rep, "batch"), num_of(rep, "steps"), str_of(rep, "trident_version"), str_of(rep, "git_commit"),
           str_of(cpu, "model"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "interrupted")) ? " (INTERRUPTED)" : "");
}

/* rep's item at "key" or "object.key" */
static const cJSON *item_at(const cJSON *rep, const char *path) {
    const char *dot = strchr(path, '.');
    if (!dot) return cJSON_GetObjectItemCaseSensitive(rep, path);
    char head[32];
    snprintf(head, sizeof head, "%.*s", (int)(dot - path), path);
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rep, head), dot + 1);
}

/* A and B measured different things, or on different hosts, threads, weights: said above
 * the table, which still compares them (a ratio across hosts is the hosts' as much as the
 * code's). */
static void print_differences(const cJSON *a, const cJSON *b) {
    static const char *const keys[] = {"model",     "preset",  "task",      "device",         "dtype",
                                       "math",      "batch",   "seq_len",   "cpu.model",      "cpu.isa",
                                       "gpu",       "threads", "omp_wait",  "ranks",          "weights",
                                       "seed",      "schedule", "isolation",
                                       /* the same names, other work: a [model] override, another
                                          number of denoising steps */
                                       "param_count", "flops_per_step"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *x = item_at(a, keys[i]), *y = item_at(b, keys[i]);
        if (!x && !y) continue; /* neither has it: an older report, or no GPU */
        char *sx = x ? cJSON_PrintUnformatted(x) : NULL, *sy = y ? cJSON_PrintUnformatted(y) : NULL;
        if (!(sx && sy && strcmp(sx, sy) == 0))
            printf("note: A and B differ in %s: %s vs %s\n", keys[i], sx ? sx : "(none)", sy ? sy : "(none)");
        cJSON_free(sx);
        cJSON_free(sy);
    }
}

/* What compare reads of each row: a label once per report (rows are matched by it), and a
 * finite, non-negative mean_ms where the row ran. */
static int check_rows(const char *name, const char *path, const cJSON *rep, struct tr_error *err) {
    const cJSON *r;
    int i = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(rep, "backends")) {
        const char *label = str_of(r, "backend");
        if (find_row(rep, label) != r)
            return tr_error_set(err, TR_ERR_INVALID, "%s: %s: backends[%d]: backend '%s' is there twice; rows are "
                                "matched by their label", name, path, i, label);
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "mean_ms");
        if (row_ok(r) && !(cJSON_IsNumber(m) && isfinite(m->valuedouble) && m->valuedouble >= 0)) {
            char *text = m ? cJSON_PrintUnformatted(m) : NULL;
            const int rc = tr_error_set(err, TR_ERR_INVALID, "%s: %s: backends[%d] ('%s'): mean_ms is %s, expected "
                                        "a number of milliseconds", name, path, i, label, text ? text : "missing");
            cJSON_free(text);
            return rc;
        }
        i++;
    }
    return TR_OK;
}

static int compare(const char *pa, const cJSON *a, const char *pb, const cJSON *b, struct tr_error *err) {
    int rc = check_rows("A", pa, a, err);
    if (!rc) rc = check_rows("B", pb, b, err);
    if (rc) return rc;
    print_source("A", pa, a);
    print_source("B", pb, b);
    print_differences(a, b);
    printf("\n%-24s %12s %12s %8s %12s\n", "backend", "A mean ms", "B mean ms", "B/A", "threshold ms");
    int common = 0, changed = 0, noisy = 0;
    const cJSON *ra;
    cJSON_ArrayForEach(ra, cJSON_GetObjectItemCaseSensitive(a, "backends")) {
        const char *label = str_of(ra, "backend");
        const cJSON *rb = find_row(b, label);
        if (!rb) continue;
        common++;
        if (!row_ok(ra) || !row_ok(rb)) {  /* what ran is shown; no ratio to a failure */
            char ta[32] = "FAILED", tb[32] = "FAILED";
            if (row_ok(ra)) snprintf(ta, sizeof ta, "%.3f", num_of(ra, "mean_ms"));
            if (row_ok(rb)) snprintf(tb, sizeof tb, "%.3f", num_of(rb, "mean_ms"));
            printf("%-24s %12s %12s %8s %12s\n", label, ta, tb, "-", "-");
            continue;
        }
        double ma = num_of(ra, "mean_ms"), mb = num_of(rb, "mean_ms");
        double sa = row_spread(ra), sb = row_spread(rb);
        double thr = TR_REPORT_CHANGE_REL * ma;
        if (sa > thr) thr = sa;
        if (sb > thr) thr = sb;
        int ch = fabs(mb - ma) > thr;
        /* a noisy row's mean carries its stalls: said beside it, as the run's table says it */
        int na = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ra, "noisy")),
            nb = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rb, "noisy"));
        changed += ch;
        noisy += na || nb;
        printf("%-24s %12.3f %12.3f %7.2fx %12.3f%s%s\n", label, ma, mb, ma > 0 ? mb / ma : NAN, thr,
               ch ? (mb > ma ? "  CHANGED (slower)" : "  CHANGED (faster)") : "",
               na && nb ? "  noisy in A and B" : na ? "  noisy in A" : nb ? "  noisy in B" : "");
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(a, "backends"))
        if (!find_row(b, str_of(r, "backend"))) printf("only in A: %s\n", str_of(r, "backend"));
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(b, "backends"))
        if (!find_row(a, str_of(r, "backend"))) printf("only in B: %s\n", str_of(r, "backend"));
    if (!common) return tr_error_set(err, TR_ERR_INVALID, "%s and %s have no backend in common", pa, pb);
    printf("\n%d of %d backends CHANGED: the means differ by more than the threshold, the larger of either run's "
           "spread (p90 - median of its step times) and %.0f%% of A's mean\n",
           changed, common, 100 * TR_REPORT_CHANGE_REL);
    if (noisy) printf("noisy: a row whose p90 is over %.1fx its median had stalled steps; run it again\n", TR_BENCH_NOISY_P90);
    return TR_OK;
}

static const cJSON *find_suite_row(const cJSON *suite, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(suite, "rows"))
        if (strcmp(str_of(r, "name"), name) == 0) return r;
    return NULL;
}

/* Two suites: every row both ran, compared as two runs are, under a line naming it. */
static int compare_suites(const char *pa, const cJSON *a, const char *pb, const cJSON *b, struct tr_error *err) {
    printf("A: %s  suite %s; trident %s %s%s\nB: %s  suite %s; trident %s %s%s\n", pa, str_of(a, "suite"),
           str_of(a, "trident_version"), str_of(a, "git_commit"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "interrupted")) ? " (INTERRUPTED)" : "", pb,
           str_of(b, "suite"), str_of(b, "trident_version"), str_of(b, "git_commit"),
           cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "interrupted")) ? " (INTERRUPTED)" : "");
    int compared = 0;
    const cJSON *ra;
    cJSON_ArrayForEach(ra, cJSON_GetObjectItemCaseSensitive(a, "rows")) {
        const char *name = str_of(ra, "name");
        const cJSON *rb = find_suite_row(b, name);
        const cJSON *xa = cJSON_GetObjectItemCaseSensitive(ra, "report");
        const cJSON *xb = rb ? cJSON_GetObjectItemCaseSensitive(rb, "report") : NULL;
        if (!rb) {
            printf("\nonly in A: row %s\n", name);
            continue;
        }
        printf("\n== row %s (%s)\n", name, str_of(ra, "label"));
        if (!cJSON_IsObject(xa) || !cJSON_IsObject(xb)) {
            printf("not compared: no backend ran in %s (A: %s, B: %s)\n", !cJSON_IsObject(xa) ? "A" : "B",
                   str_of(ra, "status"), str_of(rb, "status"));
            continue;
        }
        struct tr_error e = {0};
        if (compare(pa, xa, pb, xb, &e)) printf("not compared: %s\n", e.msg);
        else compared++;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(b, "rows"))
        if (!find_suite_row(a, str_of(r, "name"))) printf("\nonly in B: row %s\n", str_of(r, "name"));
    if (!compared) return tr_error_set(err, TR_ERR_INVALID, "%s and %s have no row that ran in both", pa, pb);
    printf("\n%d rows compared\n", compared);
    return TR_OK;
}

int tr_cli_report(int argc, char **argv) {
    if (argc != 2 || argv[0][0] == '-' || argv[1][0] == '-') {
        fputs("usage: trident report A.json B.json\n", stderr);
        return 2;
    }
    struct tr_error err = {0};
    cJSON *a = NULL, *b = NULL;
    int rc = load_report(argv[0], &a, &err);
    if (!rc) rc = load_report(argv[1], &b, &err);
    if (!rc && is_suite(a) != is_suite(b))
        rc = tr_error_set(&err, TR_ERR_INVALID, "%s is %s and %s %s; compare a suite with a suite, a run with a run",
                          argv[0], is_suite(a) ? "a suite's" : "a run's", argv[1],
                          is_suite(b) ? "a suite's" : "a run's");
    if (!rc) rc = is_suite(a) ? compare_suites(argv[0], a, argv[1], b, &err) : compare(argv[0], a, argv[1], b, &err);
    cJSON_Delete(a);
    cJSON_Delete(b);
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* The scaling table: each backend of rep (the ranks' run) against one[] (the one-process
 * means by label, NAN where that backend did not run there), measured in `source`. */
static void print_scaling(const struct tr_bench_report *rep, const char *source, const double *one, FILE *f) {
    fprintf(f, "\nscaling against one process (%s): speed-up = its mean ms/step / this run's; efficiency = speed-up / "
            "%d ranks\n%-24s %12s %12s %9s %11s\n", source, rep->ranks, "backend", "1 rank ms", "ranks ms",
            "speed-up", "efficiency");
    char over[256] = "";
    for (int i = 0; i < rep->n_rows; i++) {
        const struct tr_bench_row *r = &rep->rows[i];
        if (!r->ok || !(one[i] > 0) || !(r->mean_ms > 0)) {
            fprintf(f, "%-24s %12s\n", r->label, "-");
            continue;
        }
        const double up = one[i] / r->mean_ms;
        fprintf(f, "%-24s %12.3f %12.3f %8.2fx %10.0f%%\n", r->label, one[i], r->mean_ms, up, 100.0 * up / rep->ranks);
        const size_t l = strlen(over);
        if (up / rep->ranks > 1.1 && l + strlen(r->label) + 3 < sizeof over)
            snprintf(over + l, sizeof over - l, "%s%s", l ? ", " : "", r->label);
    }
    /* N ranks doing 1/N of the work each rarely beat N times one process by more than
     * noise: far past it, the one-process figure was more likely slowed (other load on the
     * machine then, a cold cache) than the ranks sped up */
    if (over[0])
        fprintf(f, "note: efficiency over 110%% (%s): more likely the one-process time was slowed (other load when "
                "it ran) than the ranks sped up; measure both in one run (--scaling), or run the baseline again\n",
                over);
}

void tr_cli_print_scaling_run(const struct tr_bench_report *rep, const struct tr_bench_report *one_process, FILE *f) {
    double one[TR_BENCH_MAX_ROWS];
    for (int i = 0; i < rep->n_rows; i++) {
        one[i] = NAN;
        for (int j = 0; j < one_process->n_rows; j++)
            if (one_process->rows[j].ok && strcmp(one_process->rows[j].label, rep->rows[i].label) == 0)
                one[i] = one_process->rows[j].mean_ms;
    }
    print_scaling(rep, "measured first, in this run", one, f);
}

int tr_cli_print_scaling(const struct tr_bench_report *rep, const char *baseline, FILE *f) {
    struct tr_error err = {0};
    cJSON *b = NULL;
    int rc = load_report(baseline, &b, &err);
    if (!rc && is_suite(b)) rc = tr_error_set(&err, TR_ERR_INVALID, "%s: a suite's JSON; expected one run's", baseline);
    /* the same work: a speed-up over another model or batch would be no speed-up at all */
    static const char *const keys[] = {"model", "preset", "task", "dtype"};
    for (size_t i = 0; !rc && i < sizeof keys / sizeof keys[0]; i++) {
        const char *mine = strcmp(keys[i], "model") == 0 ? rep->model : strcmp(keys[i], "preset") == 0 ? rep->preset
                         : strcmp(keys[i], "task") == 0 ? rep->task : rep->dtype;
        if (strcmp(str_of(b, keys[i]), mine) != 0)
            rc = tr_error_set(&err, TR_ERR_INVALID, "--baseline %s: %s %s, this run %s; expected the same run in one "
                              "process", baseline, keys[i], str_of(b, keys[i]), mine);
    }
    if (!rc && num_of(b, "batch") != (double)rep->batch)
        rc = tr_error_set(&err, TR_ERR_INVALID, "--baseline %s: batch %g, this run's global batch %lld; expected the "
                          "same global batch in one process", baseline, num_of(b, "batch"), (long long)rep->batch);
    if (!rc && num_of(b, "ranks") > 1)
        rc = tr_error_set(&err, TR_ERR_INVALID, "--baseline %s: a run of %g ranks; expected a run in one process",
                          baseline, num_of(b, "ranks"));
    if (rc) {
        cJSON_Delete(b);
        fflush(f);
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    double one[TR_BENCH_MAX_ROWS];
    for (int i = 0; i < rep->n_rows; i++) {
        const cJSON *o = find_row(b, rep->rows[i].label);
        one[i] = o && row_ok(o) ? num_of(o, "mean_ms") : NAN;
    }
    print_scaling(rep, baseline, one, f);
    cJSON_Delete(b);
    return 0;
}
