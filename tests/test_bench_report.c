/* The benchmark's reports on made-up numbers: the host line of the header, the "noisy"
 * warning under the table (present past 1.5x, absent at and under it, for predict and for
 * generate), the same fields in the JSON, and tr_bench_host_info's account of the OpenMP
 * wait policy from the environment. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "models.h"
#include "trident/bench.h"

static void add_row(struct tr_bench_report *rep, const char *label, double median, double p90) {
    struct tr_bench_row *r = tr_test_report_row(rep, label);
    r->median_ms = median;
    r->p90_ms = p90;
    r->mean_ms = 0.5 * (median + p90);
    r->min_ms = 0.9 * median;
}

static void make_report(struct tr_bench_report *rep, const char *task) {
    tr_test_report_init(rep, task);
    rep->cpu.avx512_bf16 = 1;
    add_row(rep, "torch", 6.8, 12.3);                  /* 1.81x: noisy */
    add_row(rep, "tf", 10.0, 14.0);                    /* 1.4x: steady */
    add_row(rep, "jax", 4.0, 6.0);                     /* exactly 1.5x: steady */
    add_row(rep, "torch:reduce-overhead", 0.25, 0.5);  /* 2x on a small time: noisy */
    struct tr_bench_row *failed = &rep->rows[rep->n_rows++];
    snprintf(failed->label, sizeof failed->label, "broken");
    snprintf(failed->error, sizeof failed->error, "it broke");  /* no times: never noisy */
}

/* What tr_bench_print writes, as a string (caller frees). */
static char *printed(const struct tr_bench_report *rep) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    tr_bench_print(rep, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void expect_in(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("the report lacks \"%s\":\n%s", needle, text);
}

static void expect_not_in(const char *text, const char *needle) {
    if (strstr(text, needle)) fail_msg("the report has \"%s\":\n%s", needle, text);
}

/* What tr_bench_print writes of rep holds needle, or (expect_not_printed) does not. */
static void expect_printed(const struct tr_bench_report *rep, const char *needle) {
    char *out = printed(rep);
    expect_in(out, needle);
    free(out);
}

static void expect_not_printed(const struct tr_bench_report *rep, const char *needle) {
    char *out = printed(rep);
    expect_not_in(out, needle);
    free(out);
}

static void check_noisy_lines(const char *out) {
    expect_in(out, "\nnoisy: torch p90 12.3 ms is 1.8x its median 6.80 ms (other load on the machine?)\n");
    expect_in(out, "\nnoisy: torch:reduce-overhead p90 0.500 ms is 2.0x its median 0.250 ms (other load on the machine?)\n");
    expect_not_in(out, "noisy: tf ");
    expect_not_in(out, "noisy: jax ");
    expect_not_in(out, "noisy: broken");
    /* under the table: after the last row, before the notes and the verdict */
    const char *table_end = strstr(out, " FAILED\n");
    assert_non_null(table_end);
    assert_true(strstr(out, "noisy: torch ") > table_end);
    assert_true(strstr(out, "noisy: torch ") < strstr(out, "broken: FAILED: it broke"));
}

/* A backend's stats are printed whatever they are: a peak of UINT64_MAX bytes keeps the
 * table's columns (8 characters, in e-notation), where it printed 17592186044416.0. */
static void test_huge_stats(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    make_report(&rep, "predict");
    rep.rows[1].stats.peak_bytes = UINT64_MAX;
    char *out = printed(&rep);
    expect_in(out, " 1.76e+13 ");
    expect_not_in(out, "17592186044416");
    free(out);
}

static void test_noisy_rows(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    make_report(&rep, "predict");
    assert_true(tr_bench_row_noisy(&rep.rows[0]));
    assert_false(tr_bench_row_noisy(&rep.rows[1]));
    assert_false(tr_bench_row_noisy(&rep.rows[2]));
    assert_true(tr_bench_row_noisy(&rep.rows[3]));
    assert_false(tr_bench_row_noisy(&rep.rows[4]));
    char *out = printed(&rep);
    check_noisy_lines(out);
    free(out);

    /* generate prints the same table, then its own: the warning is there too */
    make_report(&rep, "generate");
    rep.gen.prompt_len = 5, rep.gen.max_length = 50, rep.new_tokens = 45;
    snprintf(rep.gen.sampling, sizeof rep.gen.sampling, "greedy");
    out = printed(&rep);
    check_noisy_lines(out);
    expect_in(out, "generate: prompt_len 5");
    free(out);

    /* a steady report has none */
    make_report(&rep, "predict");
    for (int i = 0; i < rep.n_rows; i++) rep.rows[i].p90_ms = 1.2 * rep.rows[i].median_ms;
    expect_not_printed(&rep, "noisy:");
}

static void test_host_line(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    make_report(&rep, "predict");
    char *out = printed(&rep);
    expect_in(out, "\ncpu AMD EPYC 9B14, isa avx512 (native), oneDNN avx512_core_bf16, bf16 GEMM native, 2 threads, "
                   "OpenMP wait passive (trident's default)\n");
    /* it comes before the table */
    assert_true(strstr(out, "cpu AMD EPYC") < strstr(out, "first ms"));
    free(out);

    rep.cpu.isa = TR_CPU_ISA_AVX2;
    rep.cpu.forced = 1;
    rep.cpu.bf16_native = 0;
    snprintf(rep.cpu.onednn_isa, sizeof rep.cpu.onednn_isa, "avx2");
    rep.threads = 1;
    snprintf(rep.omp_wait, sizeof rep.omp_wait, "spin 10000 (GOMP_SPINCOUNT)");
    snprintf(rep.omp_wait_by, sizeof rep.omp_wait_by, "environment");
    expect_printed(&rep, "cpu AMD EPYC 9B14, isa avx2 (forced by TRIDENT_CPU_ISA; native avx512), oneDNN avx2, "
                         "bf16 GEMM via f32, 1 thread, OpenMP wait spin 10000 (GOMP_SPINCOUNT) (set in the environment)\n");

    snprintf(rep.omp_wait, sizeof rep.omp_wait, "libgomp default (spin 300000)");
    snprintf(rep.omp_wait_by, sizeof rep.omp_wait_by, "none");
    expect_printed(&rep, ", 1 thread, OpenMP wait libgomp default (spin 300000)\n");

    /* a run on a GPU names the card under the cpu, before the table; the cpu's run has no line */
    expect_not_printed(&rep, "\ngpu ");
    snprintf(rep.gpu, sizeof rep.gpu, "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, driver 13.0, runtime 13.0");
    char *gpu = printed(&rep);
    expect_in(gpu, "(spin 300000)\ngpu NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB, driver 13.0, runtime 13.0\n");
    assert_true(strstr(gpu, "\ngpu NVIDIA") < strstr(gpu, "first ms"));
    free(gpu);
}

static void test_json(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    make_report(&rep, "predict");
    char path[512];
    snprintf(path, sizeof path, "%s/report.json", tr_test_dir);
    struct tr_error err = {0};
    if (tr_bench_write_json(&rep, path, &err) != TR_OK) fail_msg("%s", err.msg);
    const char *js = tr_test_read_file(path, NULL);
    const char *want[] = {
        "\"cpu\":", "\"model\":\t\"AMD EPYC 9B14\"", "\"isa\":\t\"avx512\"", "\"native_isa\":\t\"avx512\"",
        "\"isa_forced\":\tfalse", "\"avx512_bf16\":\ttrue", "\"amx\":\tfalse", "\"bf16_native\":\ttrue",
        "\"onednn_isa\":\t\"avx512_core_bf16\"", "\"threads\":\t2", "\"omp_wait\":\t\"passive\"",
        "\"omp_wait_set_by\":\t\"trident\"",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(js, want[i])) fail_msg("the JSON lacks %s:\n%s", want[i], js);
    /* one "noisy" per row that ran, true for torch and torch:reduce-overhead only */
    int t = 0, f = 0;
    for (const char *p = js; (p = strstr(p, "\"noisy\":\t")); p++) {
        if (!strncmp(p + 9, "true", 4)) t++;
        else if (!strncmp(p + 9, "false", 5)) f++;
    }
    assert_int_equal(t, 2);
    assert_int_equal(f, 2);
}

/* tr_bench_host_info under the environment as it is now describes the wait policy as
 * `wait` (NULL: not checked) and says who set it: `by`. */
static void expect_wait(struct tr_bench_report *rep, const char *wait, const char *by) {
    struct tr_error err = {0};
    assert_int_equal(tr_bench_host_info(rep, &err), TR_OK);
    if (wait) assert_string_equal(rep->omp_wait, wait);
    assert_string_equal(rep->omp_wait_by, by);
}

/* The policy as libgomp took it from the environment (read once, at load: these settings
 * change only the description, which is what is tested). */
static void test_host_info(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    struct tr_error err = {0};
    const char *saved[3] = {getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT"), getenv(TR_BENCH_OMP_WAIT_MARK)};
    char keep[3][128] = {"", "", ""};
    for (int i = 0; i < 3; i++)
        if (saved[i]) snprintf(keep[i], sizeof keep[i], "%s", saved[i]);

    unsetenv("OMP_WAIT_POLICY"), unsetenv("GOMP_SPINCOUNT"), unsetenv(TR_BENCH_OMP_WAIT_MARK);
    if (tr_bench_host_info(&rep, &err) != TR_OK) fail_msg("%s", err.msg);
    assert_true(rep.cpu.model[0] != '\0');
    assert_true(rep.cpu.onednn_isa[0] != '\0');
    assert_true(rep.threads >= 1 && rep.threads == rep.cpu.threads);
    assert_string_equal(rep.omp_wait, "libgomp default (spin 300000)");
    assert_string_equal(rep.omp_wait_by, "none");

    setenv("OMP_WAIT_POLICY", "passive", 1);
    expect_wait(&rep, "passive", "environment");
    setenv(TR_BENCH_OMP_WAIT_MARK, "OMP_WAIT_POLICY=passive", 1);
    expect_wait(&rep, NULL, "trident");
    /* a mark that no longer matches what is set is the user's setting */
    setenv("OMP_WAIT_POLICY", "active", 1);
    expect_wait(&rep, "active", "environment");

    unsetenv("OMP_WAIT_POLICY");
    setenv("GOMP_SPINCOUNT", "10000", 1);
    setenv(TR_BENCH_OMP_WAIT_MARK, "GOMP_SPINCOUNT=10000", 1);
    expect_wait(&rep, "spin 10000 (GOMP_SPINCOUNT)", "trident");
    setenv("OMP_WAIT_POLICY", "passive", 1);
    expect_wait(&rep, "spin 10000 (GOMP_SPINCOUNT), OMP_WAIT_POLICY=passive", "environment");

    const char *names[3] = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", TR_BENCH_OMP_WAIT_MARK};
    for (int i = 0; i < 3; i++)
        if (saved[i]) setenv(names[i], keep[i], 1);
        else unsetenv(names[i]);
}

/* [run] threads is the caller's to apply (core does not link OpenMP): a run whose kernels
 * would get another count stops before any backend, naming the line. */
static void test_threads_not_applied(void **state) {
    (void)state;
    static struct tr_config cfg;
    static struct tr_bench_report rep;
    struct tr_error err = {0};
    tr_config_defaults(&cfg);
    snprintf(cfg.file, sizeof cfg.file, "t.ini");
    assert_int_equal(tr_bench_host_info(&rep, &err), TR_OK);
    cfg.threads = rep.threads + 1;
    cfg.threads_line = 3;
    assert_int_equal(tr_bench_run(&cfg, tr_builtin_models, &rep, &err), TR_ERR_INVALID);
    char want[128];
    snprintf(want, sizeof want, "t.ini:3: [run] threads = %d, but OpenMP gives the kernels %d", cfg.threads,
             cfg.threads - 1);
    if (!strstr(err.msg, want)) fail_msg("the message lacks \"%s\": %s", want, err.msg);
    assert_int_equal(rep.n_rows, 0);
}

/* A model's text keeps its line: control characters (a newline, a terminal's escape) are
 * written as C escapes, the rest (UTF-8 too) as it is. */
static void test_generate_text_visible(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    tr_test_report_init(&rep, "generate");
    rep.n_texts = 1;
    snprintf(rep.texts[0].prompt, sizeof rep.texts[0].prompt, "Hi\tthere");
    snprintf(rep.texts[0].text, sizeof rep.texts[0].text, " caf\xC3\xA9\n\x1b[31mred\x07");
    rep.new_tokens = rep.texts[0].text_tokens = 4;
    rep.gen.max_length = 9, rep.gen.prompt_len = 5;
    expect_printed(&rep, "sample 0: Hi\\tthere| caf\xC3\xA9\\n\\x1b[31mred\\x07\n");

    /* greedy reads no sampling key: the JSON says null, not the defaults it left unread */
    rep.gen.top_k = 50, rep.gen.top_p = 0.9, rep.gen.temperature = 1.0, rep.gen.seed = 3;
    char path[512];
    struct tr_error err = {0};
    snprintf(path, sizeof path, "%s/gen.json", tr_test_dir);
    if (tr_bench_write_json(&rep, path, &err) != TR_OK) fail_msg("%s", err.msg);
    const char *js = tr_test_read_file(path, NULL);
    expect_in(js, "\"top_k\":\tnull,\n\t\t\"top_p\":\tnull,\n\t\t\"temperature\":\tnull,\n\t\t\"seed\":\tnull");
    rep.gen.top_k_sampling = 1; /* top_k: its k, temperature and seed; no top_p */
    if (tr_bench_write_json(&rep, path, &err) != TR_OK) fail_msg("%s", err.msg);
    js = tr_test_read_file(path, NULL);
    expect_in(js, "\"top_k\":\t50,\n\t\t\"top_p\":\tnull,\n\t\t\"temperature\":\t1,\n\t\t\"seed\":\t3");
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_huge_stats, test_noisy_rows, test_host_line, test_json, test_host_info,
             test_threads_not_applied, test_generate_text_visible)
