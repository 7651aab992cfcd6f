/* The report files (trident/report.h) from a report made by hand: report.md's table with
 * the best mean in bold, report.csv's RFC 4180 quoting, report.json's schema, build,
 * machine, weights and per-step fields and its UTF-8 repair, chart.svg's basics and its
 * rendering by rsvg-convert (the PNG's size is the one the SVG declares); the step times
 * kept in step order; a JSON write that fails says why; and `trident report A B` run in
 * process (tr_cli_report): the ratio, CHANGED, and the messages of its errors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "backendutil.h"
#include "cli.h"
#include "trident/bench.h"
#include "trident/report.h"
#include "../core/src/bench_util.h"

/* A row that ran with `n` step times around `ms` (p90 - median: 0.07 ms). */
static void add_row(struct tr_bench_report *rep, const char *label, double ms, int n) {
    struct tr_bench_row *r = tr_test_report_row(rep, label);
    r->max_rel_diff = r->is_reference ? 0 : 3.1e-7;
    r->first_ms = 100 * ms;
    double times[64];
    for (int i = 0; i < n; i++) times[i] = ms + 0.02 * (i % 10) - 0.09;  /* mean ms, p90 - median 0.07 */
    tr_bench_row_times(r, times, n);
    r->steps_run = n;
    r->items_per_s = 8e3 / r->mean_ms;
    r->stats.kernel_calls = 42;
    r->stats.alloc_hits = 40, r->stats.alloc_misses = 2;
    r->stats.peak_bytes = 3u << 20, r->stats.arena_bytes = 1u << 20;
}

static void make_report(struct tr_bench_report *rep) {
    tr_test_report_init(rep, "predict");
    snprintf(rep->input, sizeof rep->input, "input_ids [8,128]");
    rep->seed = 7;
    add_row(rep, "torch", 6.8, 20);
    add_row(rep, "tf, \"fast\"", 10.0, 20);          /* a comma and quotes: CSV quotes it */
    add_row(rep, "jax", 4.0, 20);                    /* the best */
    add_row(rep, "t<&>|x", 400.0, 20);               /* XML's and Markdown's specials */
    struct tr_bench_row *failed = &rep->rows[rep->n_rows++];
    snprintf(failed->label, sizeof failed->label, "broken");
    snprintf(failed->error, sizeof failed->error, "line one\nline two");  /* CSV quotes a newline */
}

static void expect_in(const char *what, const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("%s lacks \"%s\":\n%s", what, needle, text);
}

/* make_report's report, in the one static every test starts from anew (it is large). */
static struct tr_bench_report *new_report(void) {
    static struct tr_bench_report rep;
    make_report(&rep);
    return &rep;
}

static void write_dir(const struct tr_bench_report *rep, const char *name, int log_scale, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s/nested", tr_test_dir, name);  /* the parents too are made */
    struct tr_report_opts opts = {.log_scale = log_scale};
    struct tr_error err = {0};
    if (tr_report_write_dir(rep, dir, &opts, &err) != TR_OK) fail_msg("%s", err.msg);
}

static void test_utf8(void **state) {
    (void)state;
    char out[64];
    assert_true(tr_utf8_valid("plain ascii, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80"));
    assert_int_equal(tr_utf8_sanitize(out, sizeof out, "caf\xC3\xA9"), 5);
    assert_string_equal(out, "caf\xC3\xA9");
    /* each invalid byte or maximal subpart one U+FFFD */
    const struct {
        const char *in, *want;
    } cases[] = {
        {"a\xFF" "b", "a\xEF\xBF\xBD" "b"},                          /* never in UTF-8 */
        {"\x80", "\xEF\xBF\xBD"},                                    /* a stray continuation */
        {"\xC3", "\xEF\xBF\xBD"},                                    /* cut short at the end */
        {"\xE2\x82" "x", "\xEF\xBF\xBD" "x"},                        /* cut short: one U+FFFD */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},                    /* overlong '/' */
        {"\xE0\x80\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},    /* overlong */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},    /* a surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* past U+10FFFF */
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},                            /* a 4-byte one cut short */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_false(tr_utf8_valid(cases[i].in));
        size_t n = tr_utf8_sanitize(out, sizeof out, cases[i].in);
        if (strcmp(out, cases[i].want) != 0) fail_msg("case %zu: sanitized wrong", i);
        assert_int_equal(n, strlen(cases[i].want));
        assert_true(tr_utf8_valid(out));
    }
    /* cut at the buffer's end: never half a character, the full length returned */
    assert_int_equal(tr_utf8_sanitize(out, 5, "ab\xE2\x82\xAC"), 5);
    assert_string_equal(out, "ab");
    assert_int_equal(tr_utf8_sanitize(NULL, 0, "\xFF\xFF"), 6);
}

/* tr_bench_row_times keeps the times as they came, then sorts its own argument. */
static void test_step_order(void **state) {
    (void)state;
    static struct tr_bench_row row;
    double t[5] = {5, 1, 4, 2, 3};
    tr_bench_row_times(&row, t, 5);
    assert_int_equal(row.n_step_ms, 5);
    const double want[5] = {5, 1, 4, 2, 3};
    for (int i = 0; i < 5; i++) assert_true(row.step_ms[i] == want[i]);
    assert_true(row.median_ms == 3 && row.min_ms == 1 && row.mean_ms == 3);
    /* more steps than the row keeps: the first TR_BENCH_MAX_STEP_TIMES */
    static double many[TR_BENCH_MAX_STEP_TIMES + 100];
    for (int i = 0; i < TR_BENCH_MAX_STEP_TIMES + 100; i++) many[i] = TR_BENCH_MAX_STEP_TIMES + 100 - i;
    tr_bench_row_times(&row, many, TR_BENCH_MAX_STEP_TIMES + 100);
    assert_int_equal(row.n_step_ms, TR_BENCH_MAX_STEP_TIMES);
    assert_true(row.step_ms[0] == TR_BENCH_MAX_STEP_TIMES + 100 && row.step_ms[TR_BENCH_MAX_STEP_TIMES - 1] == 101);
}

/* "vs best" divides by the fastest row that agrees: a row computing something else (its
 * execute wrote nothing) is never the best, however fast; when none agrees, any row. */
static void test_best_agrees(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    assert_true(tr_bench_best_mean(rep) == rep->rows[2].mean_ms); /* jax, 4 ms */
    rep->rows[2].agrees = 0;
    assert_true(tr_bench_best_mean(rep) == rep->rows[0].mean_ms); /* torch, 6.8 ms */
    for (int i = 0; i < rep->n_rows; i++) rep->rows[i].agrees = 0;
    assert_true(tr_bench_best_mean(rep) == rep->rows[2].mean_ms);
    char dir[512], path[600];
    rep->rows[2].agrees = 0, rep->rows[0].agrees = 1;
    write_dir(rep, "best", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/report.md", dir);
    expect_in("report.md", tr_test_read_file(path, NULL), "| torch | f32 | 680.00 | **6.800** |");
}

static void test_markdown(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    char dir[512], path[600];
    write_dir(rep, "md", 0, dir, sizeof dir);
    /* the files tr_report_file_name lists, and no more */
    for (int i = 0; i < TR_REPORT_N_FILES; i++) {
        struct stat sb;
        assert_non_null(tr_report_file_name(i));
        snprintf(path, sizeof path, "%s/%s", dir, tr_report_file_name(i));
        if (stat(path, &sb) != 0 || sb.st_size == 0) fail_msg("%s: not written", path);
    }
    assert_null(tr_report_file_name(TR_REPORT_N_FILES));
    snprintf(path, sizeof path, "%s/report.md", dir);
    const char *md = tr_test_read_file(path, NULL);
    expect_in("report.md", md, "# trident report: bert/tiny predict\n");
    expect_in("report.md", md, "| backend | math | first ms | mean ms | median | p90 | vs best | samples/s | GFLOP/s | "
                               "kern/st | hit/miss | peak MiB | arena MiB | max rel diff |\n");
    /* the best mean in bold, its ratio 1.00x; the others plain, with theirs */
    expect_in("report.md", md, "| jax | f32 | 400.00 | **4.000** | 4.000 | 4.070 | 1.00x | 2000.0 | 0.0 | 42 | 40/2 | "
                               "3.0 | 1.0 | 3.1e-07 ok |\n");
    expect_in("report.md", md, "| torch | f32 | 680.00 | 6.800 | 6.800 | 6.870 | 1.70x |");
    expect_in("report.md", md, "| reference |\n");
    assert_null(strstr(md, "**6.800**"));
    expect_in("report.md", md, "| t\\<&\\>\\|x | f32 |");  /* a | would end the cell */
    expect_in("report.md", md, "| broken | FAILED |");
    expect_in("report.md", md, "- broken: FAILED: line one line two\n");
    expect_in("report.md", md, "Host: cpu AMD EPYC 9B14, isa avx512 (native)");
    expect_in("report.md", md, "Weights made from [run] seed 7.");
    expect_in("report.md", md, "![mean ms per step, per backend](chart.svg)");
    /* every table line has the header's 15 pipes */
    for (const char *l = strstr(md, "| backend"); l && *l == '|'; l = strchr(l, '\n') + 1) {
        int pipes = 0;
        for (const char *p = l; *p && *p != '\n'; p++) pipes += *p == '|' && (p == l || p[-1] != '\\');
        if (pipes != 15) fail_msg("a table line with %d cells' pipes, not 15: %.*s", pipes, (int)strcspn(l, "\n"), l);
    }
    expect_in("report.md", md, ". 20 timed steps after 2 warm-up steps;");
    assert_null(strstr(md, "Interrupted"));

    /* stopped after 20 of 200 steps: said where the step count is, and in the chart */
    rep = new_report();
    rep->steps = 200, rep->interrupted = 1;
    write_dir(rep, "md_int", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/report.md", dir);
    md = tr_test_read_file(path, NULL);
    expect_in("report.md", md, ". Interrupted after 20 of 200 timed steps, after 2 warm-up steps;");
    expect_in("report.md", md, "**Interrupted**: the run was stopped (Ctrl-C) after 20 of its 200 timed steps");
    snprintf(path, sizeof path, "%s/chart.svg", dir);
    expect_in("chart.svg", tr_test_read_file(path, NULL), "interrupted after 20 of 200 timed steps");
}

/* The CSV's records, split by RFC 4180's rules: fields at commas outside quotes, records at
 * CRLF outside quotes, "" inside quotes a quote. */
static int csv_parse(const char *s, char fields[][16][256], int max_records, int *n_fields) {
    int rec = 0, fld = 0, q = 0;  /* fld counts every field; those past 16 share the last slot */
    size_t k = 0;
    for (const char *p = s; *p; p++) {
        if (rec >= max_records) fail_msg("more than %d CSV records", max_records);
        char *cur = fields[rec][fld < 16 ? fld : 15];
        if (q) {
            if (*p == '"' && p[1] == '"') cur[k++] = '"', p++;
            else if (*p == '"') q = 0;
            else cur[k++] = *p;
        } else if (*p == '"') {
            if (k) fail_msg("a quote inside an unquoted field");
            q = 1;
        } else if (*p == ',') {
            cur[k] = '\0', k = 0, fld++;
        } else if (*p == '\r' && p[1] == '\n') {
            cur[k] = '\0', k = 0;
            n_fields[rec++] = fld + 1;
            fld = 0, p++;
        } else if (*p == '\n') fail_msg("a bare LF ends a CSV record (RFC 4180: CRLF)");
        else cur[k++] = *p;
        if (k >= 255) k = 254;
    }
    if (q || k || fld) fail_msg("the CSV does not end with a whole record");
    return rec;
}

static void test_csv(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    char dir[512], path[600];
    write_dir(rep, "csv", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/report.csv", dir);
    const char *csv = tr_test_read_file(path, NULL);
    expect_in("report.csv", csv, "backend,plugin,ok,steps_run,math,first_ms,mean_ms,median_ms,p90_ms,min_ms,vs_best,");
    expect_in("report.csv", csv, "\r\n\"tf, \"\"fast\"\"\",,1,20,f32,");   /* quoted, quotes doubled */
    expect_in("report.csv", csv, "\r\njax,,1,20,f32,400,4,4,4.07,3.91,1,2000,");  /* unquoted */
    expect_in("report.csv", csv, ",\"line one\nline two\"\r\n");
    static char fields[8][16][256];
    int n[8];
    int recs = csv_parse(csv, fields, 8, n);
    assert_int_equal(recs, 1 + rep->n_rows);
    for (int r = 0; r < recs; r++)
        if (n[r] != 25) fail_msg("record %d has %d fields, the header 25", r, n[r]);
    assert_string_equal(fields[2][0], "tf, \"fast\"");
    assert_string_equal(fields[5][0], "broken");
    assert_string_equal(fields[5][2], "0");
    assert_string_equal(fields[1][0], "torch");
}

/* [run] reference: report.md's table of each row against the file, its last line's count
 * of those that do not agree (the rows agreeing among themselves), report.csv's
 * ref_max_rel_diff and ref_agrees, report.json's reference. */
static void test_reference(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    rep->n_rows = 2;
    for (int i = 0; i < 2; i++) {
        struct tr_bench_row *r = &rep->rows[i];
        r->ok = r->agrees = 1;
        r->ref_compared = 1;
        r->ref_rel_diff = i ? 3e-7 : 2e-3;
        r->ref_agrees = i == 1;
        snprintf(r->ref_worst, sizeof r->ref_worst, "'logits' %.2e", r->ref_rel_diff);
    }
    rep->all_ok = 0;
    rep->tolerance = 1e-4;
    snprintf(rep->tolerance_why, sizeof rep->tolerance_why, "the f32 tolerance");
    snprintf(rep->reference, sizeof rep->reference, "ref.safetensors");
    rep->reference_tolerance = 1.5e-4;
    snprintf(rep->reference_why, sizeof rep->reference_why, "[run] reference_tolerance");
    char dir[512], path[600];
    write_dir(rep, "reference", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/report.md", dir);
    const char *md = tr_test_read_file(path, NULL);
    expect_in("report.md", md, "Against [run] reference = ref.safetensors (within 1.5e-04, \\[run\\] reference\\_tolerance):");
    expect_in("report.md", md, "| torch | **NO** | 'logits' 2.00e-03 |\n");
    expect_in("report.md", md, " | ok | 'logits' 3.00e-07 |\n");
    expect_in("report.md", md, "All backends ran and agree (within 1e-04, the f32 tolerance); **1 does NOT** agree with "
                               "[run] reference.\n");
    snprintf(path, sizeof path, "%s/report.csv", dir);
    const char *csv = tr_test_read_file(path, NULL);
    expect_in("report.csv", csv, ",noisy,ref_max_rel_diff,ref_agrees,error\r\n");
    expect_in("report.csv", csv, ",0.002,0,\r\n");
    expect_in("report.csv", csv, ",3e-07,1,\r\n");
    snprintf(path, sizeof path, "%s/report.json", dir);
    size_t len;
    const char *text = tr_test_read_file(path, &len);
    cJSON *root = cJSON_ParseWithLength(text, len);
    assert_non_null(root);
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "reference");
    assert_non_null(rf);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rf, "path")), "ref.safetensors");
    assert_true(cJSON_GetObjectItemCaseSensitive(rf, "tolerance")->valuedouble == 1.5e-4);
    cJSON_Delete(root);
}

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) fail_msg("the JSON lacks \"%s\"", key);
    return v;
}

static void test_json(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    snprintf(rep->weights, sizeof rep->weights, "/data/w\xFF" "eights.safetensors");  /* not UTF-8 */
    snprintf(rep->rows[0].stats.notes, sizeof rep->rows[0].stats.notes, "caf\xC3\xA9 \xC3");
    rep->interrupted = 1;
    char dir[512], path[600];
    write_dir(rep, "json", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/report.json", dir);
    size_t len;
    const char *text = tr_test_read_file(path, &len);
    /* the whole file is valid UTF-8: the bad bytes are U+FFFD, the good ones kept */
    assert_true(tr_utf8_valid(text));
    cJSON *root = cJSON_ParseWithLength(text, len);
    assert_non_null(root);
    assert_true(get(root, "schema")->valuedouble == TR_REPORT_SCHEMA);
    assert_string_equal(cJSON_GetStringValue(get(root, "trident_version")), tr_report_version());
    const char *commit = cJSON_GetStringValue(get(root, "git_commit"));
    assert_non_null(commit);
    assert_true(strlen(commit) >= 4);  /* a short hash, or "unknown" outside a checkout */
    assert_true(cJSON_IsTrue(get(root, "interrupted")));
    assert_true(cJSON_IsNull(get(root, "gpu")));
    const cJSON *w = get(root, "weights");
    assert_string_equal(cJSON_GetStringValue(get(w, "source")), "file");
    assert_string_equal(cJSON_GetStringValue(get(w, "path")), "/data/w\xEF\xBF\xBD" "eights.safetensors");
    const cJSON *cpu = get(root, "cpu");
    assert_string_equal(cJSON_GetStringValue(get(cpu, "model")), "AMD EPYC 9B14");
    assert_string_equal(cJSON_GetStringValue(get(cpu, "isa")), "avx512");
    assert_string_equal(cJSON_GetStringValue(get(cpu, "native_isa")), "avx512");
    assert_true(cJSON_IsFalse(get(cpu, "isa_forced")));
    assert_true(cJSON_IsTrue(get(cpu, "bf16_native")));
    assert_string_equal(cJSON_GetStringValue(get(cpu, "onednn_isa")), "avx512_core_bf16");
    assert_true(get(root, "threads")->valuedouble == 2);
    assert_string_equal(cJSON_GetStringValue(get(root, "omp_wait")), "passive");
    const cJSON *rows = get(root, "backends");
    assert_int_equal(cJSON_GetArraySize(rows), rep->n_rows);
    const cJSON *torch = cJSON_GetArrayItem(rows, 0);
    assert_string_equal(cJSON_GetStringValue(get(torch, "notes")), "caf\xC3\xA9 \xEF\xBF\xBD");
    /* the step times in step order, as made: 6.71, 6.73, ... */
    const cJSON *st = get(torch, "step_ms");
    assert_int_equal(cJSON_GetArraySize(st), 20);
    for (int i = 0; i < 20; i++) {
        double want = 6.8 + 0.02 * (i % 10) - 0.09;
        /* cJSON writes 15 significant digits where they read back within an ulp or so */
        if (!(fabs(cJSON_GetArrayItem(st, i)->valuedouble - want) <= 1e-14 * want)) fail_msg("step_ms[%d] is not %g", i, want);
    }
    assert_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(rows, 4), "step_ms"));  /* failed: none */
    cJSON_Delete(root);

    /* made from the seed: no path, the seed */
    rep->weights[0] = '\0';
    snprintf(rep->gpu, sizeof rep->gpu, "NVIDIA H200");
    struct tr_error err = {0};
    if (tr_bench_write_json(rep, path, &err)) fail_msg("%s", err.msg);
    root = cJSON_Parse(tr_test_read_file(path, NULL));
    assert_non_null(root);
    w = get(root, "weights");
    assert_string_equal(cJSON_GetStringValue(get(w, "source")), "seed");
    assert_true(get(w, "seed")->valuedouble == 7);
    assert_null(cJSON_GetObjectItemCaseSensitive(w, "path"));
    assert_string_equal(cJSON_GetStringValue(get(root, "gpu")), "NVIDIA H200");
    cJSON_Delete(root);
    /* a seed past 2^53 written as the integer it is (a double would round it) */
    rep->seed = 18446744073709551557ull;
    if (tr_bench_write_json(rep, path, &err)) fail_msg("%s", err.msg);
    const char *json = tr_test_read_file(path, NULL);
    if (!strstr(json, "\"seed\":\t18446744073709551557")) fail_msg("the seed is not exact: %s", json);
    root = cJSON_Parse(json);
    assert_non_null(root); /* still JSON */
    cJSON_Delete(root);
}

/* A write that fails says which file and why (the program prints only this message). */
static void test_json_write_fails(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    char path[700];
    snprintf(path, sizeof path, "%s/no/such/dir/r.json", tr_test_dir);
    struct tr_error err = {0};
    assert_int_equal(tr_bench_write_json(rep, path, &err), TR_ERR_IO);
    assert_int_equal(err.status, TR_ERR_IO);
    expect_in("the message", err.msg, path);
    expect_in("the message", err.msg, "cannot write: No such file or directory");
    /* a report directory where a file is */
    char file[600];
    snprintf(file, sizeof file, "%s/plainfile", tr_test_dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    memset(&err, 0, sizeof err);
    snprintf(path, sizeof path, "%s/sub", file);
    assert_int_equal(tr_report_write_dir(rep, path, NULL, &err), TR_ERR_IO);
    expect_in("the message", err.msg, "plainfile: cannot make the report directory: it exists and is not a directory");
    /* /dev/full: every write fails; the message says so */
    if (access("/dev/full", W_OK) == 0) {
        memset(&err, 0, sizeof err);
        assert_int_equal(tr_bench_write_json(rep, "/dev/full", &err), TR_ERR_IO);
        expect_in("the message", err.msg, "/dev/full: write failed");
    }
}

/* The width and height attributes of the root <svg> element. */
static void svg_size(const char *svg, int *w, int *h) {
    const char *root = strstr(svg, "<svg ");
    assert_non_null(root);
    const char *pw = strstr(root, " width=\""), *ph = strstr(root, " height=\""), *gt = strchr(root, '>');
    assert_true(pw && ph && pw < gt && ph < gt);
    *w = atoi(pw + 8), *h = atoi(ph + 9);
}

/* Crude well-formedness: every < opens a tag that closes, elements nest (a stack of names),
 * no & outside an entity, and the text holds no raw < > of a label. */
static void check_xml(const char *s) {
    char stack[64][32];
    int depth = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '&') {
            if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) && strncmp(p, "&quot;", 6) &&
                strncmp(p, "&apos;", 6))
                fail_msg("a bare & at: %.40s", p);
            continue;
        }
        if (*p == '>') fail_msg("a bare > at: %.40s", p);
        if (*p != '<') continue;
        const char *end = strchr(p, '>');
        if (!end) fail_msg("an unclosed tag at: %.40s", p);
        if (strchr(p + 1, '<') && strchr(p + 1, '<') < end) fail_msg("a < inside a tag at: %.40s", p);
        if (p[1] == '?') {
            p = end;
            continue;
        }
        char name[32];
        int close = p[1] == '/';
        size_t n = strcspn(p + 1 + close, " />");
        snprintf(name, sizeof name, "%.*s", (int)n, p + 1 + close);
        if (close) {
            if (depth == 0 || strcmp(stack[depth - 1], name)) fail_msg("</%s> closes <%s>", name, depth ? stack[depth - 1] : "");
            depth--;
        } else if (end[-1] != '/') {
            if (depth == 64) fail_msg("too deep");
            snprintf(stack[depth++], 32, "%s", name);
        }
        p = end;
    }
    if (depth) fail_msg("<%s> is not closed", stack[depth - 1]);
}

/* The PNG's IHDR width and height: signature, then the IHDR chunk first (PNG spec 5.2, 11.2.2). */
static void png_size(const char *path, int *w, int *h) {
    size_t n;
    const unsigned char *b = (const unsigned char *)tr_test_read_file(path, &n);
    assert_true(n > 24);
    if (memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0) fail_msg("%s: no PNG signature", path);
    if (memcmp(b + 12, "IHDR", 4) != 0) fail_msg("%s: the first chunk is not IHDR", path);
    *w = (int)((unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19]);
    *h = (int)((unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23]);
}

static void render_and_check(const char *svg_path, int w, int h) {
    /* setup.sh installs it (librsvg2-bin): a machine without it fails here, not passes */
    if (system("command -v rsvg-convert >/dev/null 2>&1") != 0)
        fail_msg("rsvg-convert not found: install librsvg2-bin (scripts/setup.sh does)");
    char png[640], cmd[1400];
    snprintf(png, sizeof png, "%s.png", svg_path);
    snprintf(cmd, sizeof cmd, "rsvg-convert -o '%s' '%s' 2>&1", png, svg_path);
    int rc = system(cmd);
    if (rc != 0) fail_msg("%s: rsvg-convert failed (status %d)", svg_path, rc);
    int pw, ph;
    png_size(png, &pw, &ph);
    if (pw != w || ph != h) fail_msg("%s: the PNG is %dx%d, the SVG declares %dx%d", svg_path, pw, ph, w, h);
}

static void test_svg(void **state) {
    (void)state;
    struct tr_bench_report *rep = new_report();
    snprintf(rep->rows[2].label, sizeof rep->rows[2].label, "jax\xFF");  /* XML must be UTF-8 too */
    for (int log_scale = 0; log_scale < 2; log_scale++) {
        char dir[512], path[600];
        write_dir(rep, log_scale ? "svg_log" : "svg", log_scale, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/chart.svg", dir);
        const char *svg = tr_test_read_file(path, NULL);
        assert_true(tr_utf8_valid(svg));
        assert_int_equal(strncmp(svg, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 44), 0);
        expect_in("chart.svg", svg, "xmlns=\"http://www.w3.org/2000/svg\"");
        check_xml(svg);
        int w, h;
        svg_size(svg, &w, &h);
        assert_true(w > 400 && w < 2000 && h > 100 && h < 1000);
        char vb[64];
        snprintf(vb, sizeof vb, "viewBox=\"0 0 %d %d\"", w, h);
        expect_in("chart.svg", svg, vb);
        /* labels escaped; one bar per row that ran; the best bold and green */
        expect_in("chart.svg", svg, ">t&lt;&amp;&gt;|x</text>");
        expect_in("chart.svg", svg, " font-weight=\"bold\">jax\xEF\xBF\xBD</text>");
        expect_in("chart.svg", svg, " font-weight=\"bold\">4.00 ms (best)</text>");
        expect_in("chart.svg", svg, ">6.80 ms (1.70x)</text>");
        expect_in("chart.svg", svg, ">FAILED</text>");
        int bars = 0, green = 0;
        for (const char *p = svg; (p = strstr(p, "<rect x=")); p++) bars++, green += !strncmp(strstr(p, "fill="), "fill=\"#2e9e5b\"", 14);
        assert_int_equal(bars, 4);
        assert_int_equal(green, 1);
        expect_in("chart.svg", svg, log_scale ? "ms per step (log scale)</text>" : "ms per step</text>");
        if (log_scale) {  /* decades from 1 to 1000 around 4 .. 400 */
            expect_in("chart.svg", svg, "text-anchor=\"middle\">1</text>");
            expect_in("chart.svg", svg, "text-anchor=\"middle\">1000</text>");
        } else {
            expect_in("chart.svg", svg, "text-anchor=\"middle\">0</text>");
            expect_in("chart.svg", svg, "text-anchor=\"middle\">400</text>");
        }
        render_and_check(path, w, h);
    }
    /* nothing ran: still a chart that renders */
    rep->n_rows = 0;
    char dir[512], path[600];
    write_dir(rep, "svg_empty", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/chart.svg", dir);
    const char *svg = tr_test_read_file(path, NULL);
    check_xml(svg);
    expect_in("chart.svg", svg, "no backend ran");
    int w, h;
    svg_size(svg, &w, &h);
    render_and_check(path, w, h);
    /* every row failed: each says so, and the chart says why it has no bars, apart from them */
    rep = new_report();
    for (int i = 0; i < rep->n_rows; i++) rep->rows[i].ok = 0;
    write_dir(rep, "svg_failed", 0, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/chart.svg", dir);
    svg = tr_test_read_file(path, NULL);
    check_xml(svg);
    expect_in("chart.svg", svg, "every backend failed: no times to draw");
    assert_null(strstr(svg, "no backend ran"));
    const char *msg = strstr(svg, "every backend failed"), *failed = strstr(svg, ">FAILED<");
    assert_non_null(failed);
    /* not drawn where a row's FAILED is: another x */
    int mx = 0, fx = 0;
    const char *m0 = msg, *f0 = failed;
    while (m0 > svg && strncmp(m0, "<text", 5)) m0--;
    while (f0 > svg && strncmp(f0, "<text", 5)) f0--;
    assert_int_equal(sscanf(m0, "<text x=\"%d\"", &mx), 1);
    assert_int_equal(sscanf(f0, "<text x=\"%d\"", &fx), 1);
    assert_true(mx - fx > 100);
    svg_size(svg, &w, &h);
    render_and_check(path, w, h);
}

/* ---- trident report A B, in process ---- */

static char cli_out[1 << 16], cli_err[1 << 16];

/* tr_cli_report on args, its stdout and stderr caught in cli_out and cli_err. */
static int run_report(int argc, const char **args) {
    char po[600], pe[600];
    snprintf(po, sizeof po, "%s/cli.out", tr_test_dir);
    snprintf(pe, sizeof pe, "%s/cli.err", tr_test_dir);
    fflush(stdout), fflush(stderr);
    int so = dup(1), se = dup(2);
    int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(so >= 0 && se >= 0 && fo >= 0 && fe >= 0);
    dup2(fo, 1), dup2(fe, 2);
    char *argv[8];
    for (int i = 0; i < argc; i++) argv[i] = (char *)args[i];
    argv[argc] = NULL;
    int rc = tr_cli_report(argc, argv);
    fflush(stdout), fflush(stderr);
    dup2(so, 1), dup2(se, 2);
    close(so), close(se), close(fo), close(fe);
    snprintf(cli_out, sizeof cli_out, "%s", tr_test_read_file(po, NULL));
    snprintf(cli_err, sizeof cli_err, "%s", tr_test_read_file(pe, NULL));
    return rc;
}

/* The line of out that starts with label followed by spaces. */
static const char *row_line(const char *out, const char *label) {
    char key[128];
    snprintf(key, sizeof key, "\n%s ", label);
    const char *p = strstr(out, key);
    if (!p) fail_msg("no row %s in:\n%s", label, out);
    return p + 1;
}

static int line_has(const char *line, const char *needle) {
    const char *p = strstr(line, needle), *nl = strchr(line, '\n');
    return p && (!nl || p < nl);
}

static void test_report_cmd(void **state) {
    (void)state;
    static struct tr_bench_report a, b;
    make_report(&a);
    make_report(&b);
    /* B: torch 30% slower (far past its spread of 0.07 ms and 5%), tf 2% slower (within
     * 5% of 10 ms: not changed), jax 4.0 -> 3.0 faster, "t<&>|x" noisy in B: a 10% change
     * inside B's spread of 133 ms; "broken" failed in A only; "a-only" and "extra" in one each */
    b.n_rows = 0;
    add_row(&b, "torch", 6.8 * 1.3, 20);
    add_row(&b, "tf, \"fast\"", 10.2, 20);
    add_row(&b, "jax", 3.0, 20);
    add_row(&b, "t<&>|x", 440.0, 20);
    struct tr_bench_row *noisy = &b.rows[3];
    for (int i = 0; i < 20; i++) noisy->step_ms[i] = i % 10 >= 8 ? 560.0 : 426.0 + i % 3;  /* p90 - median: ~133 */
    noisy->p90_ms = 700.0;  /* over 1.5x its median of 440: "noisy" in B's JSON */
    add_row(&b, "extra", 1.0, 20);
    add_row(&b, "broken", 2.0, 20);   /* failed in A, ran in B: no ratio */
    add_row(&a, "a-only", 1.0, 20);
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/a.json", tr_test_dir);
    snprintf(pb, sizeof pb, "%s/b.json", tr_test_dir);
    struct tr_error err = {0};
    if (tr_bench_write_json(&a, pa, &err) || tr_bench_write_json(&b, pb, &err)) fail_msg("%s", err.msg);

    const char *args[] = {pa, pb};
    int rc = run_report(2, args);
    if (rc != 0) fail_msg("exit %d:\n%s%s", rc, cli_out, cli_err);
    const char *t = row_line(cli_out, "torch");
    if (!line_has(t, " 6.800 ") || !line_has(t, " 8.840 ") || !line_has(t, " 1.30x") || !line_has(t, "CHANGED (slower)"))
        fail_msg("torch:\n%s", cli_out);
    const char *tf = row_line(cli_out, "tf, \"fast\"");
    if (!line_has(tf, "1.02x") || line_has(tf, "CHANGED")) fail_msg("tf:\n%s", cli_out);
    const char *jx = row_line(cli_out, "jax");
    if (!line_has(jx, "0.75x") || !line_has(jx, "CHANGED (faster)")) fail_msg("jax:\n%s", cli_out);
    const char *nz = row_line(cli_out, "t<&>|x");
    if (!line_has(nz, "1.10x") || line_has(nz, "CHANGED") || !line_has(nz, "  noisy in B\n"))
        fail_msg("the noisy row:\n%s", cli_out);
    if (line_has(t, "noisy")) fail_msg("torch is steady:\n%s", cli_out);
    expect_in("the output", cli_out, "\nnoisy: a row whose p90 is over 1.5x its median had stalled steps");
    const char *br = row_line(cli_out, "broken");
    if (!line_has(br, " FAILED        2.000        -            -\n")) fail_msg("broken:\n%s", cli_out);
    expect_in("the output", cli_out, "\nonly in A: a-only\n");
    expect_in("the output", cli_out, "\nonly in B: extra\n");
    expect_in("the output", cli_out, "2 of 5 backends CHANGED");

    /* the errors: usage 2; a missing file, not JSON, no schema, another schema: 1 with the file named */
    const char *one[] = {pa};
    assert_int_equal(run_report(1, one), 2);
    expect_in("stderr", cli_err, "usage: trident report A.json B.json");
    static const struct {
        const char *file, *text; /* text NULL: no such file */
        int is_a;                /* the file is A (against pb), else B (against pa) */
        const char *want;
    } bad[] = {
        {"missing.json", NULL, 0, "missing.json: cannot read: No such file or directory"},
        {"junk.json", "{\n  \"schema\": 1,\n  oops\n}\n", 1, "junk.json: not JSON (parse error near line 3, column "},
        {"old.json", "{\"model\": \"bert\", \"backends\": []}", 0,
         "old.json: no \"schema\" field: not a trident report of schema 1"},
        {"newer.json", "{\"schema\": 2, \"backends\": []}", 1, "newer.json: report schema 2; this trident reads schema 1"},
        {"newer.json", "{\"schema\": 1, \"backends\": [{\"backend\": \"other\", \"ok\": true, \"mean_ms\": 1}]}", 1,
         "have no backend in common"},
        {"text.json", "{\"schema\": 1, \"backends\": [{\"backend\": \"tf\", \"ok\": true, \"mean_ms\": \"x\"}]}", 0,
         "text.json: backends[0] ('tf'): mean_ms is \"x\", expected a number of milliseconds"},
        {"twice.json", "{\"schema\": 1, \"backends\": [{\"backend\": \"tf\", \"ok\": true, \"mean_ms\": 1}, "
         "{\"backend\": \"tf\", \"ok\": true, \"mean_ms\": 2}]}", 1, "backends[1]: backend 'tf' is there twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char p[600];
        tr_test_dir_file(bad[i].file, bad[i].text, p, sizeof p);
        const char *ab[2] = {bad[i].is_a ? p : pa, bad[i].is_a ? pb : p};
        assert_int_equal(run_report(2, ab), 1);
        expect_in("stderr", cli_err, bad[i].want);
    }
}

/* A report edited to hold control characters (an escape sequence in a label): printed
 * with '?' in their place, never raw to the terminal. */
static void test_report_cmd_control_chars(void **state) {
    (void)state;
    char p[600];
    tr_test_dir_file("esc.json", "{\"schema\": 1, \"backends\": [{\"backend\": \"a\\u001b[31mb\\nc\", \"ok\": true, "
                     "\"mean_ms\": 1}]}", p, sizeof p);
    const char *ab[2] = {p, p};
    assert_int_equal(run_report(2, ab), 0);
    expect_in("the output", cli_out, "a?[31mb?c");
    assert_null(strchr(cli_out, 0x1b));
}

/* Rows are known by their labels, so entries that would share one (two builds of one
 * backend, a backend by name and by path) are told apart: "#2" on the later one. */
static void test_labels_unique(void **state) {
    (void)state;
    static struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string("[run]\nbackends = tf, old/libtrident_backend_tf.so, new/libtrident_backend_tf.so, "
                              "torch:reduce-overhead, /x/libtrident_backend_torch.so:reduce-overhead, jax\n",
                              "labels.ini", &cfg, &e))
        fail_msg("%s", e.msg);
    static const char *const want[] = {"tf", "tf#2", "tf#3", "torch:reduce-overhead", "torch:reduce-overhead#2", "jax"};
    for (int b = 0; b < cfg.n_backends; b++) {
        char label[96];
        tr_bench_label(&cfg, b, label, sizeof label);
        assert_string_equal(label, want[b]);
    }
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_labels_unique, test_report_cmd_control_chars, test_utf8, test_step_order, test_best_agrees, test_markdown, test_csv, test_reference, test_json,
             test_json_write_fails, test_svg, test_report_cmd)
