/* Suites (suite.h): the suite INI's rules and messages, --rows, the precedence of a row's
 * keys over [suite]'s over the row INI's [run], and the summary in text, Markdown, CSV and
 * JSON from reports made here (no backend runs: tests/cli.sh runs a real suite). */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/suite.h"

static const char row_ini[] = "[run]\nmodel = bert\npreset = tiny\nbackends = torch, jax\nbatch = 4\nsteps = 7\n"
                              "[backend.jax]\nfuse = false\n";

/* The group's directory, with row.ini in it: the config every suite here names. */
static int setup(void **state) {
    char p[PATH_MAX];
    if (tr_test_dir_setup(state)) return -1;
    tr_test_dir_file("row.ini", row_ini, p, sizeof p);
    return 0;
}

static void load_expect(const char *text, int status, const char *const *needles, int n) {
    char path[PATH_MAX];
    tr_test_dir_file("s.ini", text, path, sizeof path);
    struct tr_suite *s = malloc(sizeof *s);
    assert_non_null(s);
    struct tr_error e = {0};
    tr_test_expect_failure("suite", tr_suite_load(path, s, &e), &e, status, needles, n);
    free(s);
}

#define expect_refused(text, status, ...)                                                   \
    do {                                                                                     \
        const char *const needles_[] = {__VA_ARGS__};                                        \
        load_expect(text, status, needles_, (int)(sizeof needles_ / sizeof needles_[0]));   \
    } while (0)

static void test_load_errors(void **state) {
    (void)state;
    expect_refused("", TR_ERR_INVALID, "s.ini: no rows", "[row.NAME]");
    expect_refused("[suite]\nsteps = 3\n", TR_ERR_INVALID, "no rows");
    expect_refused("[row.a]\nlabel = A\n", TR_ERR_INVALID, "s.ini:1: [row.a] has no config");
    expect_refused("[rows.a]\nconfig = row.ini\n", TR_ERR_INVALID, "s.ini:1: [rows.a]: unknown section");
    expect_refused("[row.a b]\nconfig = row.ini\n", TR_ERR_INVALID, "[row.a b]: unknown section");
    expect_refused("[row.a]\nconfig = row.ini\n[row.a]\nconfig = row.ini\n", TR_ERR_INVALID,
                   "s.ini:3: [row.a] appears again (first on line 1)");
    expect_refused("[suite]\n[suite]\n[row.a]\nconfig = row.ini\n", TR_ERR_INVALID, "s.ini:2: [suite] appears again");
    expect_refused("[row.a]\nconfig = row.ini\nmodel = gemma\n", TR_ERR_INVALID, "s.ini:3: [row.a] model = gemma",
                   "unknown key", "config, label", "backends");
    expect_refused("[suite]\nweights = w.safetensors\n[row.a]\nconfig = row.ini\n", TR_ERR_INVALID,
                   "s.ini:2: [suite] weights = w.safetensors: unknown key");
    expect_refused("[suite]\nsteps = 3\nsteps = 4\n[row.a]\nconfig = row.ini\n", TR_ERR_INVALID,
                   "[suite] 'steps' is given twice, on lines 2 and 3");
    expect_refused("steps = 3\n[row.a]\nconfig = row.ini\n", TR_ERR_INVALID, "s.ini:1: steps = 3: a key before any section");
    expect_refused("[row.a]\nconfig = row.ini\nthis is not ini\n", TR_ERR_FORMAT, "s.ini:3: syntax error",
                   "this is not ini");
}

static struct tr_suite *load_ok(const char *text) {
    char path[PATH_MAX];
    tr_test_dir_file("s.ini", text, path, sizeof path);
    struct tr_suite *s = malloc(sizeof *s);
    assert_non_null(s);
    struct tr_error e = {0};
    if (tr_suite_load(path, s, &e)) fail_msg("%s", e.msg);
    return s;
}

/* A row's config that is not there is that row's problem, said when its config is read
 * (with every other row's: the suite's load goes on). */
static void test_missing_config(void **state) {
    (void)state;
    struct tr_suite *s = load_ok("[row.a]\nlabel = A\nconfig = nosuch.ini\n");
    static struct tr_config cfg;
    struct tr_error e = {0};
    assert_int_equal(tr_suite_row_config(s, 0, &cfg, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "s.ini:3: [row.a] config = nosuch.ini: cannot open ");
    tr_assert_msg_has(&e, "nosuch.ini: No such file or directory; expected a run INI (a relative path is taken from "
                          "the suite's directory)");
    free(s);
}

static void test_detect(void **state) {
    (void)state;
    char p[PATH_MAX];
    struct tr_error e = {0};
    int is = -1;
    tr_test_dir_file("run.ini", row_ini, p, sizeof p);
    assert_int_equal(tr_suite_detect(p, &is, &e), TR_OK);
    assert_int_equal(is, 0);
    tr_test_dir_file("s.ini", "; a suite\n  [suite] ; with a comment\n[row.a]\nconfig = run.ini\n", p, sizeof p);
    assert_int_equal(tr_suite_detect(p, &is, &e), TR_OK);
    assert_int_equal(is, 1);
    assert_int_equal(tr_suite_detect("/no/such/file.ini", &is, &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "/no/such/file.ini");
}

/* A row's keys over [suite]'s over the INI's; a changed backend list leaves the INI's
 * sections for the others unused; messages name the suite's file and line. */
static void test_row_config(void **state) {
    (void)state;
    struct tr_suite *s = load_ok("[suite]\nsteps = 3\nbackends = torch, tf\n\n[row.plain]\nconfig = row.ini\n\n"
                                 "[row.b1]\nconfig = row.ini\nlabel = Batch one\nbatch = 1\nsteps = 5\n");
    assert_int_equal(s->n_rows, 2);
    assert_string_equal(s->rows[0].label, "plain");
    assert_string_equal(s->rows[1].label, "Batch one");
    static struct tr_config cfg;
    struct tr_error e = {0};
    assert_int_equal(tr_suite_row_config(s, 0, &cfg, &e), TR_OK);
    assert_int_equal(cfg.batch, 4);
    assert_int_equal(cfg.steps, 3);
    assert_int_equal(cfg.n_backends, 2);
    assert_string_equal(cfg.backends[1].name, "tf");
    assert_int_equal(cfg.backends_line, 3);
    assert_string_equal(tr_config_backends_file(&cfg), s->file);
    assert_int_equal(tr_suite_row_config(s, 1, &cfg, &e), TR_OK);
    assert_int_equal(cfg.batch, 1);
    assert_int_equal(cfg.steps, 5);
    assert_string_equal(cfg.model, "bert");
    free(s);

    /* Without a backends override the row INI's own rules hold, and its file is named. */
    s = load_ok("[row.a]\nconfig = row.ini\nbatch = 2\n");
    assert_int_equal(tr_suite_row_config(s, 0, &cfg, &e), TR_OK);
    assert_string_equal(tr_config_backends_file(&cfg), cfg.file);
    assert_int_equal(cfg.backends_line, 4);
    free(s);

    /* A bad value is the suite's line's fault. */
    s = load_ok("[suite]\nsteps = 3\n[row.a]\nconfig = row.ini\nbatch = 0\n");
    assert_int_equal(tr_suite_row_config(s, 0, &cfg, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "s.ini:5: [row.a] batch = 0: expected an integer from 1");
    assert_null(strstr(e.msg, "s.ini:3:")); /* named once, at the line that holds the value */
    free(s);

    /* Later messages about a key name the override that set it, the rest the row's INI. */
    s = load_ok("[suite]\nseq_len = 16\n[row.a]\nconfig = row.ini\npreset = small\n");
    assert_int_equal(tr_suite_row_config(s, 0, &cfg, &e), TR_OK);
    char w[TR_CONFIG_PATH + 96], over[512];
    assert_non_null(strstr(tr_config_where(&cfg, "preset", cfg.preset_line, w, sizeof w), "s.ini:5: [row.a] preset"));
    assert_non_null(strstr(tr_config_where(&cfg, "seq_len", cfg.seq_len_line, w, sizeof w), "s.ini:2: [suite] seq_len"));
    assert_non_null(strstr(tr_config_where(&cfg, "model", cfg.model_line, w, sizeof w), "row.ini:2: [run] model"));
    assert_non_null(strstr(tr_config_overrides_str(&cfg, over, sizeof over), "; the suite set seq_len = 16 ("));
    assert_non_null(strstr(over, "s.ini:2 [suite]), preset = small ("));
    free(s);
}

static void test_select(void **state) {
    (void)state;
    struct tr_suite *s = load_ok("[row.bert_fit]\nconfig = row.ini\n[row.bert_predict]\nconfig = row.ini\n"
                                 "[row.gemma_fit]\nconfig = row.ini\n");
    struct tr_error e = {0};
    assert_int_equal(tr_suite_select(s, NULL, &e), TR_OK);
    assert_int_equal(s->n_rows, 3);
    assert_int_equal(tr_suite_select(s, "nope*", &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "'nope*' matches no row");
    tr_assert_msg_has(&e, "rows: bert_fit, bert_predict, gemma_fit");
    assert_int_equal(s->n_rows, 3);
    assert_int_equal(tr_suite_select(s, " gemma_fit , bert_* ", &e), TR_OK);
    assert_int_equal(s->n_rows, 3); /* suite order, each once */
    assert_int_equal(tr_suite_select(s, "gemma_fit,bert_predict", &e), TR_OK);
    assert_int_equal(s->n_rows, 2);
    assert_string_equal(s->rows[0].name, "bert_predict");
    assert_string_equal(s->rows[1].name, "gemma_fit");
    free(s);
}

static void backend_row(struct tr_bench_report *rep, const char *label, double mean, int ok, int agrees) {
    struct tr_bench_row *r = &rep->rows[rep->n_rows++];
    snprintf(r->label, sizeof r->label, "%s", label);
    r->ok = ok;
    r->agrees = agrees;
    r->mean_ms = r->median_ms = mean;
    r->p90_ms = mean * 1.1;
    r->first_ms = mean * 3;
    r->steps_run = ok ? 5 : 0;
    if (!ok) snprintf(r->error, sizeof r->error, "the backend's process was killed by signal 11");
}

/* Four rows: one with both backends (tf best) and a faster jax that disagrees and is
 * noisy, one where torch failed and a third backend appears, one not run, one that failed
 * before any backend ran; every format puts the numbers in the right cells. */
static void test_summary(void **state) {
    (void)state;
    struct tr_suite *s = load_ok("[row.a]\nconfig = row.ini\nlabel = Row | A <b>*x*</b>\n[row.b]\nconfig = row.ini\n"
                                 "[row.c]\nconfig = row.ini\n[row.d]\nconfig = row.ini\n");
    struct tr_suite_result *res = calloc(4, sizeof *res);
    assert_non_null(res);
    for (int i = 0; i < 4; i += i == 1 ? 2 : 1) { /* a, b and d got as far as the model */
        struct tr_bench_report *rep = &res[i].rep;
        snprintf(rep->model, sizeof rep->model, "bert");
        snprintf(rep->preset, sizeof rep->preset, "tiny");
        snprintf(rep->task, sizeof rep->task, "predict");
        snprintf(rep->math, sizeof rep->math, "f32");
        rep->batch = 8;
    }
    backend_row(&res[0].rep, "torch", 4.0, 1, 1);
    backend_row(&res[0].rep, "tf", 2.0, 1, 1);
    backend_row(&res[0].rep, "jax", 1.0, 1, 0);
    res[0].rep.rows[2].p90_ms = 3.0; /* 3x its median: noisy */
    res[0].status = TR_SUITE_FAILED;
    backend_row(&res[1].rep, "torch", 0, 0, 0);
    backend_row(&res[1].rep, "jax", 3.0, 1, 0);
    res[1].status = TR_SUITE_FAILED;
    snprintf(res[1].error, sizeof res[1].error, "a backend failed");
    res[3].status = TR_SUITE_FAILED;
    snprintf(res[3].error, sizeof res[3].error, "row.ini:7: [run] inputs = x.safetensors: wrong shape");

    char text[8192];
    FILE *f = fmemopen(text, sizeof text, "w");
    assert_non_null(f);
    tr_suite_print(s, res, f);
    fclose(f);
    assert_non_null(strstr(text, "4 rows, 2 ran, 0 of them with every backend ran and agreeing; 1 failed before any "
                                 "backend ran"));
    assert_non_null(strstr(text, "4.00 (2.00x)"));
    assert_non_null(strstr(text, "*2.00"));
    assert_non_null(strstr(text, "1.00 (0.50x, disagrees, noisy)")); /* fastest, but wrong: not the best */
    assert_non_null(strstr(text, "FAILED"));
    assert_non_null(strstr(text, "*3.00 (disagrees)"));
    assert_non_null(strstr(text, "(not run)"));
    assert_non_null(strstr(text, "b: a backend failed"));

    struct tr_error e = {0};
    char md[PATH_MAX], csv[PATH_MAX], json[PATH_MAX];
    snprintf(md, sizeof md, "%s/suite.md", tr_test_dir);
    snprintf(csv, sizeof csv, "%s/suite.csv", tr_test_dir);
    snprintf(json, sizeof json, "%s/suite.json", tr_test_dir);
    assert_int_equal(tr_suite_write_md(s, res, md, &e), TR_OK);
    const char *m = tr_test_read_file(md, NULL);
    assert_non_null(strstr(m, "| row | run | torch | tf | jax |"));
    assert_non_null(strstr(m, "| Row \\| A \\<b\\>\\*x\\*\\</b\\> | bert/tiny predict, batch 8, f32 | 4.00 (2.00x) | "
                              "**2.00** | 1.00 (0.50x, disagrees, noisy) |"));
    assert_non_null(strstr(m, "| FAILED | - | **3.00** (disagrees) |"));
    assert_non_null(strstr(m, "| c | (not run) | not run | not run | not run |"));
    assert_non_null(strstr(m, "| d | bert/tiny predict, batch 8, f32 | not run | not run | not run |"));

    assert_int_equal(tr_suite_write_csv(s, res, csv, &e), TR_OK);
    const char *c = tr_test_read_file(csv, NULL);
    assert_non_null(strstr(c, "a,Row | A <b>*x*</b>,bert,tiny,predict,8,f32,torch,1,1,4,4,4.4,12,2.0000\r\n"));
    assert_non_null(strstr(c, "b,b,bert,tiny,predict,8,f32,torch,0,0,,,,,\r\n"));
    assert_non_null(strstr(c, "\nc,c,,,,,,,0,0,,,,,\r\n"));
    assert_non_null(strstr(c, "\nd,d,bert,tiny,predict,8,f32,,0,0,,,,,\r\n"));

    assert_int_equal(tr_suite_write_json(s, res, 1, json, &e), TR_OK);
    cJSON *root = cJSON_Parse(tr_test_read_file(json, NULL));
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "kind")->valuestring, "suite");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(root, "interrupted")));
    cJSON *rows = cJSON_GetObjectItem(root, "rows");
    assert_int_equal(cJSON_GetArraySize(rows), 4);
    cJSON *r1 = cJSON_GetArrayItem(rows, 1);
    assert_string_equal(cJSON_GetObjectItem(r1, "status")->valuestring, "failed");
    cJSON *be = cJSON_GetObjectItem(cJSON_GetObjectItem(r1, "report"), "backends");
    assert_int_equal(cJSON_GetArraySize(be), 2);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 2), "status")->valuestring, "not run");
    assert_null(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 2), "report"));
    cJSON_Delete(root);

    assert_int_equal(tr_suite_write_md(s, res, "/no/such/dir/suite.md", &e), TR_ERR_IO);
    tr_assert_msg_has(&e, "/no/such/dir/suite.md: cannot write");
    free(res);
    free(s);
}

TR_TEST_MAIN(setup, tr_test_dir_teardown, test_load_errors, test_missing_config, test_detect, test_row_config, test_select,
             test_summary)
