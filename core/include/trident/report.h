/* trident — a benchmark's report as files: `trident run FILE.ini --report DIR`.
 *
 * tr_report_write_dir writes, into DIR (made when missing, parents too):
 *   report.md    the table of tr_bench_print as Markdown, the best mean in bold
 *   report.csv   one record per backend under a header record (RFC 4180: CRLF, quoted
 *                where a field holds a comma, a quote, CR or LF)
 *   report.json  tr_bench_write_json's document (schema TR_REPORT_SCHEMA)
 *   chart.svg    a horizontal bar per backend that ran, mean ms/step, the best highlighted
 * docs/report.md describes every column and field.
 *
 * Text from outside (labels, paths, a backend's notes and errors) is written as valid
 * UTF-8 in every file: an invalid byte sequence becomes U+FFFD (tr_utf8_sanitize).
 */
#ifndef TRIDENT_REPORT_H
#define TRIDENT_REPORT_H

#include <stddef.h>
#include <stdio.h>
#include "trident/bench.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version of report.json's layout ("schema"). Bumped when a field changes meaning or
 * goes away; a field added keeps it. */
#define TR_REPORT_SCHEMA 1

struct tr_report_opts {
    int log_scale;              /* chart.svg: a log10 axis (backends orders of magnitude apart) */
};

/* The files tr_report_write_dir writes, by index 0 .. TR_REPORT_N_FILES - 1 ("report.md",
 * "report.csv", "chart.svg", "report.json"); NULL past the end. A caller checking before a
 * run that it will be able to write them (tr_bench_opts.out_paths) makes the directory
 * first (tr_report_make_dir) and checks dir/NAME for each. */
#define TR_REPORT_N_FILES 4
const char *tr_report_file_name(int i);

/* mkdir -p: dir and its missing parents; TR_ERR_IO naming the part that could not be made
 * (or that exists and is not a directory). */
int tr_report_make_dir(const char *dir, struct tr_error *err);

/* Writes the four files into dir (tr_report_make_dir first); opts may be NULL (defaults).
 * On failure err names the file and why; files written before it stay. */
int tr_report_write_dir(const struct tr_bench_report *rep, const char *dir, const struct tr_report_opts *opts,
                        struct tr_error *err);

/* The files one by one, to an open stream; TR_ERR_IO when the stream reports an error. */
int tr_report_write_md(const struct tr_bench_report *rep, FILE *f, struct tr_error *err);
int tr_report_write_csv(const struct tr_bench_report *rep, FILE *f, struct tr_error *err);
/* The chart's size in pixels is in the root element's width and height attributes. */
int tr_report_write_svg(const struct tr_bench_report *rep, const struct tr_report_opts *opts, FILE *f,
                        struct tr_error *err);

/* The program's version ("0.1.0") and the git commit it was configured from ("3bb0222";
 * "unknown" outside a git checkout). */
const char *tr_report_version(void);
const char *tr_report_git_commit(void);

/* 1 when s (NUL-terminated) is valid UTF-8: no stray continuation byte, truncated, overlong
 * or surrogate sequence, nothing above U+10FFFF. */
int tr_utf8_valid(const char *s);

/* src as valid UTF-8 into dst (n bytes, NUL-terminated when n > 0): each maximal invalid
 * subsequence (Unicode's "maximal subpart" practice, as browsers decode) becomes U+FFFD
 * (EF BF BD). A character is never cut in two at the end of dst. Returns the length the
 * whole result has (as snprintf: n <= return value means it was cut short). */
size_t tr_utf8_sanitize(char *dst, size_t n, const char *src);

/* s into f as one Markdown table cell's text: valid UTF-8, line breaks as spaces, and
 * Markdown's table and emphasis characters (\\ | * _ ` < > [ ]) behind a backslash, so a
 * label from outside shows as written. */
void tr_md_text(FILE *f, const char *s);

#ifdef __cplusplus
}
#endif
#endif
