/* trident — a suite: several benchmark rows in one command (`trident bench SUITE.ini`).
 *
 * A suite INI names rows; each row is a run INI of its own (conf/cpu/bert_fit.ini) and may
 * change how it runs, never what it is:
 *
 *   [suite]
 *   backends = torch, tf, jax       ; every row runs these (absent: each row's own list)
 *   steps = 10                      ; any key of TR_CONFIG_OVERRIDE_KEYS, for every row
 *
 *   [row.gemma_generate_b1]         ; NAME: letters, digits, '_' and '-'
 *   config = gemma_generate.ini     ; required; relative to the suite's directory
 *   label = Gemma generate (batch 1); the summary's name for it (default: NAME)
 *   batch = 1                       ; TR_CONFIG_OVERRIDE_KEYS again, over the [suite] ones
 *
 * A row's keys win over [suite]'s, which win over the row INI's [run]. The summary is the
 * benchmark page's shape: a row per benchmark row, a column per backend, each cell the
 * mean ms/step and its ratio to the row's best (docs/report.md).
 */
#ifndef TRIDENT_SUITE_H
#define TRIDENT_SUITE_H

#include <stdio.h>
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_SUITE_MAX_ROWS 32
#define TR_SUITE_MAX_KEYS 12    /* keys of [suite], and of each row besides config and label */
#define TR_SUITE_MAX_COLUMNS (2 * TR_BENCH_MAX_ROWS)

struct tr_suite_key {
    char key[64];
    char value[TR_CONFIG_STR];
    int line;
};

struct tr_suite_row {
    char name[64];              /* of [row.NAME] */
    char section[72];           /* "row.NAME", for messages */
    char label[96];             /* label =, or NAME */
    char config[TR_CONFIG_PATH]; /* resolved against the suite's directory */
    char config_value[TR_CONFIG_PATH]; /* as the suite writes it */
    int line;                   /* of its section header */
    int config_line;            /* of its config = */
    struct tr_suite_key keys[TR_SUITE_MAX_KEYS];
    int n_keys;
};

struct tr_suite {
    char file[TR_CONFIG_PATH];
    char dir[TR_CONFIG_PATH];
    struct tr_suite_key keys[TR_SUITE_MAX_KEYS];    /* [suite] */
    int n_keys;
    struct tr_suite_row rows[TR_SUITE_MAX_ROWS];    /* in file order */
    int n_rows;
};

/* *is_suite = 1 when the INI at path has a [suite] section (checked before it is read as a
 * run). TR_ERR_IO when it cannot be read. */
int tr_suite_detect(const char *path, int *is_suite, struct tr_error *err);

/* Reads a suite INI: every key checked (file, line, what was expected), every row's config
 * file found, at least one row. */
int tr_suite_load(const char *path, struct tr_suite *s, struct tr_error *err);

/* Keeps the rows whose NAME matches one of the comma-separated shell patterns of `rows`
 * (fnmatch: "bert_*,gemma_fit"), in suite order. A pattern that matches no row is an error
 * listing the rows there are. */
int tr_suite_select(struct tr_suite *s, const char *rows, struct tr_error *err);

/* Row i's config: its INI with [suite]'s keys and then its own over [run]. */
int tr_suite_row_config(const struct tr_suite *s, int i, struct tr_config *cfg, struct tr_error *err);

/* What one row gave. */
enum tr_suite_status { TR_SUITE_NOT_RUN = 0, TR_SUITE_OK, TR_SUITE_FAILED };
struct tr_suite_result {
    enum tr_suite_status status;
    char error[TR_ERROR_MSG_MAX];   /* FAILED: why (the run's error; a failed backend's is in rep) */
    struct tr_bench_report rep;     /* rep.n_rows == 0: it failed before any backend ran */
};

/* The summary: one line per row (label, what ran), one column per backend seen in any row
 * (first-seen order), each cell the mean ms/step, '*' on the row's best and its ratio to
 * the best on the others; FAILED, "disagrees", "-" for a backend the row did not list. */
void tr_suite_print(const struct tr_suite *s, const struct tr_suite_result *res, FILE *f);
/* The same as Markdown (the best in bold), as CSV (one record per row and backend) and as
 * JSON (schema TR_REPORT_SCHEMA, "kind": "suite", every row's whole report inside). Each
 * names the file in err when it cannot be written. */
int tr_suite_write_md(const struct tr_suite *s, const struct tr_suite_result *res, const char *path,
                      struct tr_error *err);
int tr_suite_write_csv(const struct tr_suite *s, const struct tr_suite_result *res, const char *path,
                       struct tr_error *err);
int tr_suite_write_json(const struct tr_suite *s, const struct tr_suite_result *res, int interrupted,
                        const char *path, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
