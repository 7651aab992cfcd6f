/* trident bench SUITE.ini: every row of a suite, one table each, then the summary.
 *
 * Every row's config is read and its graph built before the first row runs, so a typo in
 * the last row costs nothing; each row then runs as `trident run` runs it (its own
 * preflight: backends, options, caps, output paths). A failed row is reported and the
 * suite goes on; Ctrl-C stops after the current step of the current row, and the summary,
 * the JSON and the report still come out, marked interrupted. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "models.h"
#include "trident/trident.h"
#include "trident/suite.h"

static int fail_msg(const struct tr_error *err) {
    fflush(stdout);
    fprintf(stderr, "trident: error: %s\n", err->msg);
    return 1;
}

/* stderr to /dev/null while the rows are checked, and back (quiet_stderr(saved)): a row's
 * warnings come when it runs, once, not here as well. Returns the saved descriptor, or -1
 * (nothing changed) where it cannot. */
static int quiet_stderr(int saved) {
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, STDERR_FILENO);
        close(saved);
        return -1;
    }
    const int null = open("/dev/null", O_WRONLY);
    saved = null < 0 ? -1 : dup(STDERR_FILENO);
    if (saved >= 0) dup2(null, STDERR_FILENO);
    if (null >= 0) close(null);
    return saved;
}

/* Every row's config and graph, before anything runs: all problems at once. */
static int check_rows(const struct tr_suite *s, const char *json, struct tr_config *cfg, struct tr_error *err) {
    char all[TR_ERROR_MSG_MAX] = "";
    int bad = 0, status = TR_OK;
    const int saved = quiet_stderr(-1);
    for (int i = 0; i < s->n_rows; i++) {
        struct tr_error e = {0};
        int rc = tr_suite_row_config(s, i, cfg, &e);
        if (!rc && !cfg->model_line)
            rc = tr_error_set(&e, TR_ERR_INVALID, "%s:%d: [%s]: %s has no [run] model", s->file, s->rows[i].line,
                              s->rows[i].section, s->rows[i].config);
        const struct tr_cli_outs co = {.json = json, .ini = s->rows[i].config};
        if (!rc && (rc = tr_cli_check_clobber(cfg, &co, &e)) != TR_OK)
            tr_error_prefix(&e, "%s:%d: [%s]", s->file, s->rows[i].line, s->rows[i].section);
        struct tr_task_graph tg;
        if (!rc && (rc = tr_task_graph_build(cfg, tr_builtin_models, &tg, &e)) == TR_OK) tr_task_graph_free(&tg);
        if (!rc) continue;
        status = status ? status : rc;
        size_t n = strlen(all);
        if (n + 4 < sizeof all) snprintf(all + n, sizeof all - n, "%s%.*s", bad ? "\n  " : "", (int)(sizeof all - n - 4), e.msg);
        bad++;
    }
    quiet_stderr(saved);
    return bad ? tr_error_set(err, status, "%s", all) : TR_OK;
}

int tr_cli_suite(const char *ini, const struct tr_cli_suite_args *a) {
    struct tr_error err = {0};
    struct tr_suite *s = malloc(sizeof *s);
    struct tr_suite_result *res = NULL;
    static struct tr_config cfg;
    int rc, status = 0;
    if (!s) {
        fprintf(stderr, "trident: error: out of memory for the suite\n");
        return 1;
    }
    if ((rc = tr_suite_load(ini, s, &err)) || (rc = tr_suite_select(s, a->rows, &err))) {
        free(s);
        return fail_msg(&err);
    }
    if ((rc = check_rows(s, a->json, &cfg, &err))) {
        free(s);
        return fail_msg(&err);
    }
    if (!(res = calloc((size_t)s->n_rows, sizeof *res))) {
        fprintf(stderr, "trident: error: out of memory for %d rows' reports\n", s->n_rows);
        free(s);
        return 1;
    }

    /* The suite's own files, checked by every row's preflight, with that row's report files. */
    char suite_files[3][TR_CONFIG_PATH + 32];
    const char *out_paths[4 + TR_REPORT_N_FILES];
    int n_suite_out = 0;
    if (a->json) out_paths[n_suite_out++] = a->json;
    if (a->report) {
        if (tr_report_make_dir(a->report, &err)) {
            status = fail_msg(&err);
            goto done;
        }
        static const char *const names[3] = {"suite.md", "suite.csv", "suite.json"};
        for (int k = 0; k < 3; k++) {
            snprintf(suite_files[k], sizeof suite_files[k], "%s/%s", a->report, names[k]);
            out_paths[n_suite_out++] = suite_files[k];
        }
    }

    int interrupted = 0, failed = 0;
    for (int i = 0; i < s->n_rows && !interrupted; i++) {
        const struct tr_suite_row *row = &s->rows[i];
        printf("%s[%d/%d] %s: %s\n", i ? "\n" : "", i + 1, s->n_rows, row->label, row->config);
        fflush(stdout);
        struct tr_suite_result *r = &res[i];
        err = (struct tr_error){0};
        if ((rc = tr_suite_row_config(s, i, &cfg, &err)) != TR_OK) {
            r->status = TR_SUITE_FAILED;
            snprintf(r->error, sizeof r->error, "%s", err.msg);
            fail_msg(&err);
            failed++;
            continue;
        }
        if (a->steps) cfg.steps = a->steps;
        tr_cli_apply_threads(&cfg);
        char row_dir[TR_CONFIG_PATH + 80], row_files[TR_REPORT_N_FILES][TR_CONFIG_PATH + 128];
        int n_out = n_suite_out;
        if (a->report) {
            snprintf(row_dir, sizeof row_dir, "%s/%s", a->report, row->name);
            if (tr_report_make_dir(row_dir, &err)) {
                r->status = TR_SUITE_FAILED;
                snprintf(r->error, sizeof r->error, "%s", err.msg);
                fail_msg(&err);
                failed++;
                continue;
            }
            for (int k = 0; k < TR_REPORT_N_FILES; k++) {
                snprintf(row_files[k], sizeof row_files[k], "%s/%s", row_dir, tr_report_file_name(k));
                out_paths[n_out++] = row_files[k];
            }
        }
        const struct tr_bench_opts opts = {.out_paths = out_paths, .n_out_paths = n_out};
        rc = tr_bench_run_opts(&cfg, tr_builtin_models, &opts, &r->rep, &err);
        if (r->rep.n_rows > 0) {
            tr_bench_print(&r->rep, stdout);
            tr_bench_print_reference(&r->rep, &cfg, stdout);
            if (a->report) failed += tr_cli_write_report_dir(&r->rep, row_dir, a->log_scale) != 0;
        }
        r->status = rc == TR_OK ? TR_SUITE_OK : TR_SUITE_FAILED;
        if (rc) {
            snprintf(r->error, sizeof r->error, "%s", err.msg);
            fail_msg(&err);
            failed++;
        }
        interrupted = rc == TR_ERR_INTERRUPTED || r->rep.interrupted;
    }

    tr_suite_print(s, res, stdout);
    fflush(stdout);
    int write_failed = 0;
    if (a->json && tr_suite_write_json(s, res, interrupted, a->json, &err)) write_failed |= fail_msg(&err);
    if (a->report) {
        if (tr_suite_write_md(s, res, suite_files[0], &err)) write_failed |= fail_msg(&err);
        if (tr_suite_write_csv(s, res, suite_files[1], &err)) write_failed |= fail_msg(&err);
        if (tr_suite_write_json(s, res, interrupted, suite_files[2], &err)) write_failed |= fail_msg(&err);
        if (!write_failed) printf("wrote %s/suite.md, suite.csv, suite.json and a folder per row\n", a->report);
    }
    status = interrupted ? 130 : failed || write_failed ? 1 : 0;
done:
    free(res);
    free(s);
    return status;
}
