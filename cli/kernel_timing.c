/* Device tensors of random data, and a kernel call timed (cli.h): shared by bench-kernels
 * and roofline. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "trident/kernels.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int tr_cli_device_tensor(struct tr_kernels *k, struct tr_tensor *t, enum tr_dtype dt, int nd, const int64_t *shape,
                         uint64_t seed, int fill_one, struct tr_error *err) {
    int rc = tr_tensor_make(t, NULL, dt, nd, shape, err);
    if (rc) return rc;
    const size_t nb = tr_tensor_nbytes(t);
    if ((rc = tr_kernels_alloc(k, nb ? nb : 1, &t->data, err)) != TR_OK) return rc;
    t->device = tr_kernels_device_type(k); /* where the data is: the kernels refuse a cpu tensor on cuda */
    if (tr_dtype_is_float(dt) && !fill_one) { /* drawn where it lives: a vocabulary's table is 10^9 values */
        rc = tr_k_random(k, TR_RANDOM_NORMAL, seed, 0.0f, 1.0f, t, err);
    } else { /* integers (ids, labels, positions, starts) 0: in range for every op that reads one */
        struct tr_tensor host = *t;
        host.data = calloc(1, nb ? nb : 1);
        if (!host.data) rc = tr_error_set(err, TR_ERR_NOMEM, "no host memory for %zu bytes", nb);
        for (int64_t i = 0; !rc && fill_one && i < tr_tensor_numel(t); i++) tr_tensor_set_f64(&host, i, 1.0);
        if (!rc) rc = tr_kernels_to_device(k, t->data, host.data, nb, err);
        free(host.data);
    }
    if (rc) {
        tr_kernels_dealloc(k, t->data);
        t->data = NULL;
    }
    return rc;
}

/* One op (n < 0: op, at, n_in, in, out) or n bound calls, timed reps times after a warm-up. */
static int time_runs(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                     struct tr_tensor *out, int n, const struct tr_kernel_call *calls, int reps, double *med,
                     double *best, struct tr_error *err) {
    double *times = calloc((size_t)reps, sizeof(double));
    if (!times) return tr_error_set(err, TR_ERR_NOMEM, "no memory for %d timings", reps);
    int rc = TR_OK;
    for (int i = -1; i < reps && !rc; i++) {
        const double t0 = now_s();
        if (n < 0) rc = tr_kernels_run(k, op, at, n_in, in, out, err);
        for (int c = 0; c < n && !rc; c++) rc = tr_kernels_call(k, &calls[c], err);
        if (!rc) rc = tr_kernels_sync(k, err);
        if (i >= 0) times[i] = now_s() - t0;
    }
    if (!rc) {
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        *med = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
        if (best) *best = times[0];
    }
    free(times);
    return rc;
}

int tr_cli_time_op(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                   struct tr_tensor *out, int reps, double *med, double *best, struct tr_error *err) {
    return time_runs(k, op, at, n_in, in, out, -1, NULL, reps, med, best, err);
}

int tr_cli_time_calls(struct tr_kernels *k, int n, const struct tr_kernel_call *calls, int reps, double *med,
                      double *best, struct tr_error *err) {
    return time_runs(k, 0, NULL, 0, NULL, NULL, n, calls, reps, med, best, err);
}

int tr_cli_adamw_update_call(struct tr_kernels *k, enum tr_dtype pdt, enum tr_dtype gdt, int nd, const int64_t *shape,
                             const float hp[4], struct tr_tensor *t, struct tr_kernel_call *call,
                             struct tr_error *err) {
    enum { P, M, V, G, LR, T, NT };
    memset(t, 0, NT * sizeof *t);
    int rc = TR_OK;
    for (int i = 0; i < NT && !rc; i++) {
        const enum tr_dtype d = i == P ? pdt : i == G ? gdt : TR_DTYPE_F32;
        rc = i >= LR ? tr_cli_device_tensor(k, &t[i], d, 0, NULL, 0, 1, err)
                     : tr_cli_device_tensor(k, &t[i], d, nd, shape, 20 + (uint64_t)i, i == V, err);
    }
    if (!rc)
        rc = tr_kernels_bind_adamw_update(k, &t[P], &t[M], &t[V], &t[G], &t[LR], &t[T], hp[0], hp[1], hp[2], hp[3],
                                          &t[P], &t[M], &t[V], call, err);
    for (int i = 0; rc && i < NT; i++)
        if (t[i].data) tr_kernels_dealloc(k, t[i].data), t[i].data = NULL;
    return rc;
}
