/* What the predict/fit runner (bench.c) and the generate runner (generate*.c) share:
 * a monotonic clock, the relative difference backends are compared by, and the step-time
 * statistics of a report row. Internal to libtrident. */
#ifndef TRIDENT_BENCH_UTIL_H
#define TRIDENT_BENCH_UTIL_H

#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include "trident/bench.h"
#include "trident/graph.h"
#include "trident/tensor.h"
#include "trident/weights.h"

double tr_bench_now_ms(void);

/* The run's weights: [run] weights read with wo's choices (an error then names the INI's
 * line first), or made from [run] seed without one. */
int tr_bench_weights(const struct tr_config *cfg, struct tr_graph *g, const struct tr_weights_load_opts *wo,
                     struct tr_weights **w, struct tr_error *err);

/* How far two backends' outputs may be apart: [run] tolerance, else the dtype's (f32 1e-4;
 * bf16, f16 and tf32 math 2e-2); bench.c says why. */
double tr_bench_tolerance(const struct tr_config *cfg);
/* rep->reference, and how far each backend may be from it (rep->reference_tolerance):
 * [run] reference_tolerance, else the run's agreement bound (rep->tolerance, set first);
 * rep->reference_why names which. */
void tr_bench_reference_set(const struct tr_config *cfg, struct tr_bench_report *rep);

/* n zero-filled host tensors shaped as the graph's node_of(g, 0..n-1) (tr_graph_input or
 * tr_graph_output); on failure what was made stays in *out for tr_bench_io_free. */
int tr_bench_io_alloc(const struct tr_graph *g, int n, int (*node_of)(const struct tr_graph *, int),
                      struct tr_tensor **out, struct tr_error *err);
void tr_bench_io_free(struct tr_tensor *ts, int n);

/* ‖a − b‖ / ‖b‖ over all elements; +inf when a has a non-finite value. */
double tr_bench_rel_diff(const struct tr_tensor *a, const struct tr_tensor *b);

/* Milliseconds in three significant digits, trailing zeros kept ("0.250", "1.00", "12.5", "123",
 * "4210"): the noisy notes and the chart's labels; returns buf. */
const char *tr_bench_ms_str(double ms, char *buf, size_t n);

/* "75.5 MiB", "15.90 GiB" into buf; returns buf. */
const char *tr_bench_bytes_str(uint64_t bytes, char *buf, size_t n);

/* Backend b's label, into buf (n bytes): the entry as written ("torch:reduce-overhead"),
 * or for a path its backend name (and mode): the table stays readable, the path is in
 * plugin_path. Labels name rows (tables, reports, `trident report`'s matching), so one
 * that an earlier entry has too (two builds of one backend, a name and its path) gets
 * "#2", "#3". */
void tr_bench_label(const struct tr_config *cfg, int b, char *buf, size_t n);

/* The label of the reference row ("" when none ran). */
const char *tr_bench_reference_label(const struct tr_bench_report *rep);

/* TR_ERR_PLUGIN, "N of M backends failed; LABEL: why" for the first row that failed. */
int tr_bench_first_failure(const struct tr_bench_report *rep, int failures, struct tr_error *err);

/* The last line of an interrupted run (after "interrupted: ") into buf, whose verdict
 * cannot be "all ran and agree": how many backends took timed steps, and whether they
 * agree over them. Returns how many took them (under 2: no comparison, no tolerance to
 * say). */
int tr_bench_interrupted_verdict(const struct tr_bench_report *rep, char *buf, size_t n);
/* The best mean ms/step, that "vs best" divides by: the lowest of the rows that ran and
 * agree with the reference row (one that disagrees computed something else, however
 * fast); of the rows that ran when none agrees; 0 when none ran. */
double tr_bench_best_mean(const struct tr_bench_report *rep);
/* Rows that ran the same plugin in the same mode (`torch` and `torch:eager`, `tf` and
 * `tf:graph`: entries spelled apart, one backend) said on f, once per pair: the second
 * times the same thing again. */
void tr_bench_note_same_rows(const struct tr_bench_report *rep, FILE *f);

/* The verdict once every row ran: sets rep->all_ok (false too where a row was interrupted
 * before it ran, which is no failure); with failures, the first one's error
 * (tr_bench_first_failure); else TR_OK, and in *bad the first row that disagrees (NULL
 * when all agree), for the caller to say how. */
int tr_bench_verdict(struct tr_bench_report *rep, int failures, int disagreements, const struct tr_bench_row **bad,
                     struct tr_error *err);

/* Fills row's step_ms with the first TR_BENCH_MAX_STEP_TIMES of times (n > 0 step times
 * in ms) as measured, then sorts times and fills row's mean, median, p90 and min. */
void tr_bench_row_times(struct tr_bench_row *row, double *times, int64_t n);

#endif
