/* What the predict/fit runner (bench.c) and the generate runner (generate*.c) share:
 * a monotonic clock, the relative difference backends are compared by, and the step-time
 * statistics of a report row. Internal to libtrident. */
#ifndef TRIDENT_BENCH_UTIL_H
#define TRIDENT_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include "trident/bench.h"
#include "trident/tensor.h"

double tr_bench_now_ms(void);

/* ‖a − b‖ / ‖b‖ over all elements; +inf when a has a non-finite value. */
double tr_bench_rel_diff(const struct tr_tensor *a, const struct tr_tensor *b);

/* "75.5 MiB", "15.90 GiB" into buf; returns buf. */
const char *tr_bench_bytes_str(uint64_t bytes, char *buf, size_t n);

/* The row's label: the entry as written ("torch:reduce-overhead"), or for a path its
 * backend name (and mode): the table stays readable, the path is in plugin_path. */
void tr_bench_row_label(struct tr_bench_row *row, const struct tr_config_backend *cb);

/* The label of the reference row ("" when none ran). */
const char *tr_bench_reference_label(const struct tr_bench_report *rep);

/* TR_ERR_PLUGIN, "N of M backends failed; LABEL: why" for the first row that failed. */
int tr_bench_first_failure(const struct tr_bench_report *rep, int failures, struct tr_error *err);

/* Sorts times (n > 0 step times in ms) and fills row's mean, median, p90 and min. */
void tr_bench_row_times(struct tr_bench_row *row, double *times, int64_t n);

#endif
