#include "bench_util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double tr_bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

double tr_bench_rel_diff(const struct tr_tensor *a, const struct tr_tensor *b) {
    int64_t n = tr_tensor_numel(a);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tr_tensor_get_f64(a, i), y = tr_tensor_get_f64(b, i);
        if (!isfinite(x)) return INFINITY;
        num += (x - y) * (x - y);
        den += y * y;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void tr_bench_row_times(struct tr_bench_row *row, double *times, int64_t n) {
    /* Copied before the sort below puts them in order of size. */
    row->n_step_ms = (int)(n < TR_BENCH_MAX_STEP_TIMES ? n : TR_BENCH_MAX_STEP_TIMES);
    memcpy(row->step_ms, times, sizeof(double) * (size_t)row->n_step_ms);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += times[i];
    qsort(times, (size_t)n, sizeof(double), cmp_double);
    row->mean_ms = sum / (double)n;
    row->median_ms = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
    row->p90_ms = times[(size_t)ceil(0.9 * (double)n) - 1];
    row->min_ms = times[0];
}

const char *tr_bench_ms_str(double ms, char *buf, size_t n) {
    snprintf(buf, n, ms < 1 ? "%.3f" : ms < 10 ? "%.2f" : ms < 100 ? "%.1f" : "%.0f", ms);
    return buf;
}

const char *tr_bench_bytes_str(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else snprintf(buf, n, "%.1f MiB", (double)b / (1ull << 20));
    return buf;
}

static void base_label(const struct tr_config_backend *cb, char *buf, size_t n) {
    if (cb->path[0] && cb->mode[0]) snprintf(buf, n, "%.40s:%.50s", cb->name, cb->mode);
    else snprintf(buf, n, "%.90s", cb->path[0] ? cb->name : cb->spec);
}

void tr_bench_label(const struct tr_config *cfg, int b, char *buf, size_t n) {
    base_label(&cfg->backends[b], buf, n);
    int same = 0; /* earlier entries of the same label: two builds of one backend, a name and its path */
    for (int j = 0; j < b; j++) {
        char other[96];
        base_label(&cfg->backends[j], other, sizeof other);
        same += strcmp(other, buf) == 0;
    }
    if (same) {
        const size_t len = strlen(buf);
        snprintf(buf + len, n > len ? n - len : 0, "#%d", same + 1);
    }
}

const char *tr_bench_reference_label(const struct tr_bench_report *rep) {
    for (int r = 0; r < rep->n_rows; r++)
        if (rep->rows[r].is_reference) return rep->rows[r].label;
    return "";
}

int tr_bench_first_failure(const struct tr_bench_report *rep, int failures, struct tr_error *err) {
    const struct tr_bench_row *first = rep->rows;
    while (first < rep->rows + rep->n_rows - 1 && first->ok) first++;
    return tr_error_set(err, TR_ERR_PLUGIN, "%d of %d backends failed; %s: %s", failures, rep->n_rows, first->label,
                        first->error);
}

void tr_bench_note_same_rows(const struct tr_bench_report *rep, FILE *f) {
    for (int i = 0; i < rep->n_rows; i++)
        for (int j = i + 1; j < rep->n_rows; j++) {
            const struct tr_bench_row *a = &rep->rows[i], *b = &rep->rows[j];
            if (a->ok && b->ok && !strcmp(a->stats.mode, b->stats.mode) && !strcmp(a->plugin_path, b->plugin_path))
                fprintf(f, "trident: note: '%s' and '%s' ran one backend (%s) in one mode%s%s%s: the second row "
                        "times the same thing again\n", a->label, b->label, a->plugin_path, a->stats.mode[0] ? " (" : "",
                        a->stats.mode, a->stats.mode[0] ? ")" : "");
        }
}

double tr_bench_best_mean(const struct tr_bench_report *rep) {
    double best = 0;
    for (int pass = 0; pass < 2 && best == 0; pass++)
        for (int i = 0; i < rep->n_rows; i++) {
            const struct tr_bench_row *r = &rep->rows[i];
            if (r->ok && r->steps_run > 0 && (pass || r->agrees) && (best == 0 || r->mean_ms < best))
                best = r->mean_ms;
        }
    return best;
}

int tr_bench_interrupted_verdict(const struct tr_bench_report *rep, char *buf, size_t n) {
    int ran = 0, agree = 1;
    const char *one = "";
    for (int i = 0; i < rep->n_rows; i++)
        if (rep->rows[i].ok) ran++, agree &= rep->rows[i].agrees, one = rep->rows[i].label;
    if (!ran) snprintf(buf, n, "no backend reached its timed steps");
    else if (ran == 1) snprintf(buf, n, "1 of %d backends took timed steps (%s): nothing to compare", rep->n_rows, one);
    else snprintf(buf, n, "%d of %d backends took timed steps, and %s over them", ran, rep->n_rows,
                  agree ? "they agree" : "NOT all of them agree");
    return ran;
}

int tr_bench_verdict(struct tr_bench_report *rep, int failures, int disagreements, const struct tr_bench_row **bad,
                     struct tr_error *err) {
    *bad = NULL;
    /* a row interrupted before it ran is no failure (the user stopped the run), but not
     * every backend ran: the verdict is not "all ran and agree"; nor is it when each ran
     * only some of its steps */
    int ran = 0;
    for (int i = 0; i < rep->n_rows; i++) ran += rep->rows[i].ok != 0;
    rep->all_ok = failures == 0 && disagreements == 0 && ran == rep->n_rows && !rep->interrupted;
    if (failures) return tr_bench_first_failure(rep, failures, err);
    /* the first row that ran and disagrees (an interrupted row did not run) */
    for (int i = 0; disagreements && !*bad && i < rep->n_rows; i++)
        if (rep->rows[i].ok && !rep->rows[i].agrees) *bad = &rep->rows[i];
    return TR_OK;
}

int tr_bench_io_alloc(const struct tr_graph *g, int n, int (*node_of)(const struct tr_graph *, int),
                      struct tr_tensor **out, struct tr_error *err) {
    *out = calloc((size_t)(n ? n : 1), sizeof **out);
    if (!*out) return tr_error_set(err, TR_ERR_NOMEM, "out of memory for %d tensors", n);
    for (int i = 0; i < n; i++) {
        struct tr_tensor *t = &(*out)[i];
        *t = tr_node_tensor(g, node_of(g, i));
        void *p;
        int rc = tr_host_alloc(&p, tr_tensor_nbytes(t), err);
        if (rc) return tr_error_prefix(err, "%s", tr_node_name(g, node_of(g, i)));
        memset(p, 0, tr_tensor_nbytes(t)); /* never NaN before it is written (a cache, a poisoned output) */
        t->data = p;
    }
    return TR_OK;
}

void tr_bench_io_free(struct tr_tensor *ts, int n) {
    if (!ts) return;
    for (int i = 0; i < n; i++) tr_host_free(ts[i].data);
    free(ts);
}

int tr_bench_weights(const struct tr_config *cfg, struct tr_graph *g, const struct tr_weights_load_opts *wo,
                     struct tr_weights **w, struct tr_error *err) {
    if (!cfg->weights[0]) return tr_weights_from_seed(g, cfg->seed, w, err);
    int rc = tr_weights_load_opts(g, cfg->weights, wo, w, err);
    char where[TR_CONFIG_PATH + 96];
    if (rc && !strncmp(err->msg, "weights: ", 9)) /* the prefix says it: not "[run] weights: weights: " */
        memmove(err->msg, err->msg + 9, strlen(err->msg + 9) + 1);
    if (rc) tr_error_prefix(err, "%s", tr_config_where(cfg, "weights", cfg->weights_line, where, sizeof where));
    return rc;
}
