/* GROUP_NORM and its gradients (ops.h) over NHWC: one work item per (n, group), its C/G
 * channels of every pixel gathered to f32 in the thread's scratch slice a pixel at a time.
 * The statistics are summed in double, two passes (mean, then the squared deviations), so
 * that a group of a large image (64x64 pixels x 40 channels and more) loses nothing to f32
 * sums and the variance is never a difference of two large numbers. The optional SiLU is
 * applied to the affine result in f32, before the one rounding to the storage dtype.
 *
 * Gradients, with x̂ = (x − μ)·rstd over a group of M elements and ĝ = dy·γ:
 *   dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))       (GROUP_NORM_GRAD, per item)
 *   dγ_c = Σ over n and pixels of dy·x̂           (GROUP_NORM_GRAD_GAMMA: per item into a
 *          row of N·C doubles, then summed over n in order, so the result does not depend
 *          on the thread count) */
#include <stdlib.h>
#include "cpu_internal.h"

struct gn_args {
    int dt;
    const char *x, *dy;
    char *o;
    int64_t N, HW, C, G, cg;
    const float *g, *b;
    double *part; /* GROUP_NORM_GRAD_GAMMA: N·C partial sums */
    float eps;
    int silu;
};

/* Mean and 1/std of item's group, in double; buf holds cg floats. */
static void gn_stats(const struct gn_args *A, const char *x, int64_t step, float *buf, double *mean_out,
                     double *rstd_out) {
    const int64_t cg = A->cg;
    double sum = 0.0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(buf, x + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) sum += buf[j];
    }
    const double cnt = (double)(A->HW * cg), mean = sum / cnt;
    double ss = 0.0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(buf, x + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) {
            double d = buf[j] - mean;
            ss += d * d;
        }
    }
    *mean_out = mean;
    *rstd_out = 1.0 / sqrt(ss / cnt + (double)A->eps);
}

/* Item's offset (bytes) into an (N,H,W,C) tensor, its first channel c0. */
static int64_t gn_offset(const struct gn_args *A, int64_t item, int64_t *c0) {
    const int64_t n = item / A->G;
    *c0 = (item % A->G) * A->cg;
    return (n * A->HW * A->C + *c0) * (int64_t)tr_dtype_size((enum tr_dtype)A->dt);
}

static void gn_group(const struct gn_args *A, int64_t item, float *buf) {
    int64_t c0;
    const int64_t off = gn_offset(A, item, &c0), cg = A->cg;
    const char *x = A->x + off;
    char *o = A->o + off;
    const int64_t step = A->C * (int64_t)tr_dtype_size((enum tr_dtype)A->dt);
    double mean, rstd;
    gn_stats(A, x, step, buf, &mean, &rstd);
    const float m = (float)mean, r = (float)rstd;
    const float *g = A->g + c0, *b = A->b + c0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(buf, x + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) {
            float y = (buf[j] - m) * r * g[j] + b[j];
            buf[j] = A->silu ? y / (1.0f + expf(-y)) : y;
        }
        tr_cpu_store_f32(o + p * step, A->dt, buf, cg);
    }
}

/* GROUP_NORM_GRAD for one item; buf holds 2·cg floats (x's and dy's rows). */
static void gn_grad_group(const struct gn_args *A, int64_t item, float *buf) {
    int64_t c0;
    const int64_t off = gn_offset(A, item, &c0), cg = A->cg;
    const char *x = A->x + off, *dy = A->dy + off;
    char *o = A->o + off;
    const int64_t step = A->C * (int64_t)tr_dtype_size((enum tr_dtype)A->dt);
    float *xb = buf, *db = buf + cg;
    double mean, rstd;
    gn_stats(A, x, step, xb, &mean, &rstd);
    const float *g = A->g + c0;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(xb, x + p * step, A->dt, cg);
        tr_cpu_load_f32(db, dy + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) {
            double gh = (double)db[j] * g[j];
            s1 += gh;
            s2 += gh * ((xb[j] - mean) * rstd);
        }
    }
    const double cnt = (double)(A->HW * cg), m1 = s1 / cnt, m2 = s2 / cnt;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(xb, x + p * step, A->dt, cg);
        tr_cpu_load_f32(db, dy + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) {
            double xh = (xb[j] - mean) * rstd;
            db[j] = (float)(rstd * ((double)db[j] * g[j] - m1 - xh * m2));
        }
        tr_cpu_store_f32(o + p * step, A->dt, db, cg);
    }
}

/* GROUP_NORM_GRAD_GAMMA's partial sums of one item into A->part[n·C + c0 ..]. */
static void gn_grad_gamma_group(const struct gn_args *A, int64_t item, float *buf) {
    int64_t c0;
    const int64_t off = gn_offset(A, item, &c0), cg = A->cg;
    const char *x = A->x + off, *dy = A->dy + off;
    const int64_t step = A->C * (int64_t)tr_dtype_size((enum tr_dtype)A->dt);
    float *xb = buf, *db = buf + cg;
    double mean, rstd;
    gn_stats(A, x, step, xb, &mean, &rstd);
    double *part = A->part + (item / A->G) * A->C + c0;
    for (int64_t j = 0; j < cg; j++) part[j] = 0.0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(xb, x + p * step, A->dt, cg);
        tr_cpu_load_f32(db, dy + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) part[j] += (double)db[j] * ((xb[j] - mean) * rstd);
    }
}

static const char *gn_name(int op) {
    return op == TR_OP_GROUP_NORM_GRAD ? "group_norm_grad" : op == TR_OP_GROUP_NORM_GRAD_GAMMA ? "group_norm_grad_gamma"
                                                                                                : "group_norm";
}

/* in: (x, gamma, beta), (x, gamma, dy) or (x, dy) by op. */
static int gn_check(int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                    const struct tr_tensor *out, struct tr_error *err) {
    const char *kn = gn_name(op);
    const int want = op == TR_OP_GROUP_NORM_GRAD_GAMMA ? 2 : 3;
    if (n_in != want) return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", kn, n_in, want);
    const struct tr_tensor *x = &in[0], *dy = op == TR_OP_GROUP_NORM ? NULL : &in[want - 1];
    const struct tr_tensor *gb[2] = {op == TR_OP_GROUP_NORM_GRAD_GAMMA ? NULL : &in[1],
                                     op == TR_OP_GROUP_NORM ? &in[2] : NULL};
    static const char *const gb_name[2] = {"gamma", "beta"};
    int rc = tr_cpu_check_float(x, kn, "x", err);
    for (int i = 0; i < 2; i++)
        if (!rc && gb[i]) rc = tr_cpu_check_float(gb[i], kn, gb_name[i], err);
    if (!rc && dy) rc = tr_cpu_check_float(dy, kn, "dy", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc && dy) rc = tr_cpu_check_like(kn, x, "x", dy, "dy", err);
    if (!rc && op != TR_OP_GROUP_NORM_GRAD_GAMMA) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->ndim != 4)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s should be 4-D (N,H,W,C)", kn, tr_cpu_desc(x, d1, sizeof d1));
    const int64_t C = x->shape[3], G = at->ints[0];
    if (G < 1 || C % G != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %lld groups do not divide the %lld channels of x %s", kn,
                            (long long)G, (long long)C, tr_cpu_desc(x, d1, sizeof d1));
    for (int i = 0; i < 2; i++)
        if (gb[i] && (tr_tensor_numel(gb[i]) != C || (gb[i]->dtype != x->dtype && gb[i]->dtype != TR_DTYPE_F32)))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kn,
                                gb_name[i], tr_cpu_desc(gb[i], d1, sizeof d1), (long long)C,
                                tr_dtype_name((enum tr_dtype)x->dtype), tr_cpu_desc(x, d2, sizeof d2));
    if (op == TR_OP_GROUP_NORM_GRAD_GAMMA && (tr_tensor_numel(out) != C || !tr_tensor_is_contiguous(out)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should be a contiguous [%lld]", kn,
                            tr_cpu_desc(out, d1, sizeof d1), (long long)C);
    if (at->ints[1] != 0 && (op != TR_OP_GROUP_NORM || at->ints[1] != 1))
        return tr_error_set(err, TR_ERR_INVALID, "%s: silu flag ints[1]=%lld, expected %s", kn,
                            (long long)at->ints[1], op == TR_OP_GROUP_NORM ? "0 or 1" : "0");
    if (!(at->floats[0] >= 0.0f) || !isfinite(at->floats[0]))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)at->floats[0]);
    return TR_OK;
}

int tr_cpu_group_norm_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    const char *kn = gn_name(op);
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = gn_check(op, at, n_in, in, out, err);
    if (rc) return rc;
    const struct tr_tensor *x = &in[0];
    const int64_t N = x->shape[0], C = x->shape[3], G = at->ints[0], cg = C / G;
    const int gamma_grad = op == TR_OP_GROUP_NORM_GRAD_GAMMA;
    if (tr_tensor_numel(x) == 0) { /* an empty group: no statistics, dgamma sums nothing */
        if (gamma_grad) {
            float z = 0.0f;
            for (int64_t c = 0; c < C; c++)
                tr_cpu_store_f32((char *)out->data + c * (int64_t)tr_dtype_size((enum tr_dtype)out->dtype),
                                 out->dtype, &z, 1);
        }
        return TR_OK;
    }
    /* shared part: gamma and beta in f32 (read at every call: weights change in place), or
     * the N·C partial sums of dgamma; per thread: two rows of the group's channels */
    const size_t shared = gamma_grad ? sizeof(double) * (size_t)(N * C) : sizeof(float) * (size_t)(2 * C);
    if ((rc = tr_cpu_scratch_reserve(k, shared, 2 * sizeof(float) * (size_t)cg, kn, err)) != TR_OK) return rc;
    float *g = tr_cpu_scratch_shared(k), *b = g + C;
    if (!gamma_grad) tr_cpu_load_f32(g, in[1].data, in[1].dtype, C);
    if (op == TR_OP_GROUP_NORM) tr_cpu_load_f32(b, in[2].data, in[2].dtype, C);
    const struct gn_args A = {x->dtype, x->data, op == TR_OP_GROUP_NORM ? NULL : in[n_in - 1].data, out->data, N,
                              x->shape[1] * x->shape[2], C, G, cg, g, b,
                              gamma_grad ? (double *)tr_cpu_scratch_shared(k) : NULL, at->floats[0],
                              at->ints[1] != 0};
    const int64_t items = N * G;
    const int par = tr_tensor_numel(x) > TR_CPU_PAR_MIN && items > 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(tr_cpu_threads(k)) if (par)
    for (int64_t i = 0; i < items; i++) {
        float *buf = tr_cpu_scratch_thread(k, tr_cpu_thread_num());
        if (op == TR_OP_GROUP_NORM) gn_group(&A, i, buf);
        else if (op == TR_OP_GROUP_NORM_GRAD) gn_grad_group(&A, i, buf);
        else gn_grad_gamma_group(&A, i, buf);
    }
    if (gamma_grad) {
        const size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
        for (int64_t c = 0; c < C; c++) {
            double acc = 0.0;
            for (int64_t n = 0; n < N; n++) acc += A.part[n * C + c];
            float v = (float)acc;
            tr_cpu_store_f32((char *)out->data + c * (int64_t)es, out->dtype, &v, 1);
        }
    }
    return TR_OK;
}
