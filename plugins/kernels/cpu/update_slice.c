/* UPDATE_SLICE (ops.h): out = x with [start, start+n) along an axis replaced by update.
 *
 * Any dtype the kernels store (the float ones, i32; it is a byte copy). start is a
 * one-element i32 tensor read at every call, never at bind time: it is data (the decode
 * position), so a bound call stays valid as it changes. When out and x are the same
 * memory (a backend computing the op in x's buffer, tr_pir_reads_in_place) only the
 * slice is written; otherwise x is copied first. A start outside [0, extent − n] is
 * refused before anything is written, naming start, n and the extent. */
#include "cpu_internal.h"

struct update_slice_plan {
    struct tr_cpu_prepared hdr;
    int64_t outer, dim, n, inner; /* inner in bytes */
    int axis;
    const char *px, *pu;
    const int32_t *start;
    char *po;
};

int tr_cpu_update_slice_args(int device, const struct tr_tensor *x, const struct tr_tensor *u,
                             const struct tr_tensor *start, int axis, const struct tr_tensor *out, int *axis_out,
                             struct tr_error *err) {
    const char *kn = "update_slice";
    int rc = tr_cpu_check_tensor_on(x, device, kn, "x", err);
    if (!rc) rc = tr_cpu_check_tensor_on(u, device, kn, "update", err);
    if (!rc) rc = tr_cpu_check_tensor_on(start, device, kn, "start", err);
    if (!rc) rc = tr_cpu_check_tensor_on(out, device, kn, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->dtype == TR_DTYPE_I64)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s should be a float dtype or i32", kn,
                            tr_cpu_desc(x, d1, sizeof d1));
    if (out->dtype != x->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should have the shape and dtype of x %s", kn,
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2));
    int ax = tr_cpu_axis(axis, x->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: axis %d out of range for x %s", kn, axis,
                            tr_cpu_desc(x, d1, sizeof d1));
    int ok = u->dtype == x->dtype && u->ndim == x->ndim;
    for (int i = 0; ok && i < x->ndim; i++) ok = i == ax ? u->shape[i] <= x->shape[i] : u->shape[i] == x->shape[i];
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: update %s should be x %s's dtype and shape except on axis %d, "
                            "where it may be shorter", kn, tr_cpu_desc(u, d1, sizeof d1),
                            tr_cpu_desc(x, d2, sizeof d2), ax);
    if (start->dtype != TR_DTYPE_I32 || tr_tensor_numel(start) != 1)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: start %s should be an i32 tensor of exactly one element", kn,
                            tr_cpu_desc(start, d1, sizeof d1));
    *axis_out = ax;
    return TR_OK;
}

static int update_slice_check(const struct tr_tensor *x, const struct tr_tensor *u, const struct tr_tensor *start,
                              int axis, const struct tr_tensor *out, struct update_slice_plan *pl,
                              struct tr_error *err) {
    int ax;
    int rc = tr_cpu_update_slice_args(TR_DEVICE_CPU, x, u, start, axis, out, &ax, err);
    if (rc != TR_OK) return rc;
    size_t es = tr_dtype_size((enum tr_dtype)x->dtype);
    memset(pl, 0, sizeof *pl);
    pl->axis = ax;
    pl->outer = tr_shape_numel(ax, x->shape);
    pl->dim = x->shape[ax];
    pl->n = u->shape[ax];
    pl->inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1) * (int64_t)es;
    pl->px = x->data;
    pl->pu = u->data;
    pl->start = start->data;
    pl->po = out->data;
    return TR_OK;
}

static int update_slice_compute(const struct update_slice_plan *pl, struct tr_error *err) {
    const int64_t outer = pl->outer, dim = pl->dim, n = pl->n, inner = pl->inner, s = pl->start[0];
    if (s < 0 || s + n > dim)
        return tr_error_set(err, TR_ERR_INVALID, "update_slice: start %lld with n %lld leaves axis %d of extent %lld "
                            "(need 0 <= start <= %lld)", (long long)s, (long long)n, pl->axis, (long long)dim,
                            (long long)(dim - n));
    const char *px = pl->px, *pu = pl->pu;
    char *po = pl->po;
    if (outer == 0 || inner == 0) return TR_OK;
    if (po != px) {
        const int64_t row = dim * inner;
#pragma omp parallel for schedule(static) if (outer * row > 4 * TR_CPU_PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++) memcpy(po + o * row, px + o * row, (size_t)row);
    }
    if (n == 0) return TR_OK;
#pragma omp parallel for schedule(static) if (outer * n * inner > 4 * TR_CPU_PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) memcpy(po + (o * dim + s) * inner, pu + o * n * inner, (size_t)(n * inner));
    return TR_OK;
}

static int update_slice_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    return update_slice_compute(c->prepared, err);
}

int tr_cpu_update_slice_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                               const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    struct update_slice_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx(k, "update_slice", err);
    if (!rc) rc = update_slice_check(&in[0], &in[1], &in[2], (int)at->ints[0], out, &pl, err);
    return rc ? rc : update_slice_compute(&pl, err);
}

int tr_cpu_update_slice_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct update_slice_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx_bind(k, "update_slice", err);
    if (!rc) rc = update_slice_check(&c->in[0], &c->in[1], &c->in[2], (int)c->attrs.ints[0], &c->out, &pl, err);
    return rc ? rc : tr_cpu_keep_plan(c, &pl, sizeof pl, update_slice_call, "update_slice", err);
}
