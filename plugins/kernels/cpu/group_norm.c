/* GROUP_NORM (ops.h) over NHWC: one work item per (n, group), its C/G channels of every
 * pixel gathered to f32 in the thread's scratch slice a pixel at a time. The statistics
 * are summed in double, two passes (mean, then the squared deviations), so that a group
 * of a large image (64x64 pixels x 40 channels and more) loses nothing to f32 sums and
 * the variance is never a difference of two large numbers. The optional SiLU is applied
 * to the affine result in f32, before the one rounding to the storage dtype. */
#include "cpu_internal.h"

struct gn_args {
    int dt;
    const char *x;
    char *o;
    int64_t N, HW, C, G, cg;
    const float *g, *b;
    float eps;
    int silu;
};

static void gn_group(const struct gn_args *A, int64_t item, float *buf) {
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    const int64_t n = item / A->G, c0 = (item % A->G) * A->cg, cg = A->cg;
    const char *x = A->x + (n * A->HW * A->C + c0) * (int64_t)es;
    char *o = A->o + (n * A->HW * A->C + c0) * (int64_t)es;
    const int64_t step = A->C * (int64_t)es;
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
    const float m = (float)mean, rstd = (float)(1.0 / sqrt(ss / cnt + (double)A->eps));
    const float *g = A->g + c0, *b = A->b + c0;
    for (int64_t p = 0; p < A->HW; p++) {
        tr_cpu_load_f32(buf, x + p * step, A->dt, cg);
        for (int64_t j = 0; j < cg; j++) {
            float y = (buf[j] - m) * rstd * g[j] + b[j];
            buf[j] = A->silu ? y / (1.0f + expf(-y)) : y;
        }
        tr_cpu_store_f32(o + p * step, A->dt, buf, cg);
    }
}

static int gn_check(const struct tr_attrs *at, const struct tr_tensor *in, const struct tr_tensor *out,
                    struct tr_error *err) {
    const char *kn = "group_norm";
    const struct tr_tensor *x = &in[0], *g = &in[1], *b = &in[2];
    int rc = tr_cpu_check_float(x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_float(g, kn, "gamma", err);
    if (!rc) rc = tr_cpu_check_float(b, kn, "beta", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->ndim != 4) return tr_error_set(err, TR_ERR_SHAPE, "group_norm: x %s should be 4-D (N,H,W,C)",
                                          tr_cpu_desc(x, d1, sizeof d1));
    const int64_t C = x->shape[3], G = at->ints[0];
    if (G < 1 || C % G != 0)
        return tr_error_set(err, TR_ERR_INVALID, "group_norm: %lld groups do not divide the %lld channels of x %s",
                            (long long)G, (long long)C, tr_cpu_desc(x, d1, sizeof d1));
    const struct tr_tensor *gb[2] = {g, b};
    for (int i = 0; i < 2; i++)
        if (tr_tensor_numel(gb[i]) != C || (gb[i]->dtype != x->dtype && gb[i]->dtype != TR_DTYPE_F32))
            return tr_error_set(err, TR_ERR_SHAPE, "group_norm: %s %s should be [%lld] of %s or f32 (x is %s)",
                                i ? "beta" : "gamma", tr_cpu_desc(gb[i], d1, sizeof d1), (long long)C,
                                tr_dtype_name((enum tr_dtype)x->dtype), tr_cpu_desc(x, d2, sizeof d2));
    if (at->ints[1] != 0 && at->ints[1] != 1)
        return tr_error_set(err, TR_ERR_INVALID, "group_norm: silu flag ints[1]=%lld, expected 0 or 1",
                            (long long)at->ints[1]);
    if (!(at->floats[0] >= 0.0f) || !isfinite(at->floats[0]))
        return tr_error_set(err, TR_ERR_INVALID, "group_norm: eps %g should be finite and >= 0",
                            (double)at->floats[0]);
    return TR_OK;
}

int tr_cpu_group_norm_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    int rc = tr_cpu_check_ctx(k, "group_norm", err);
    if (!rc) rc = gn_check(at, in, out, err);
    if (rc) return rc;
    const struct tr_tensor *x = &in[0];
    const int64_t C = x->shape[3], G = at->ints[0], cg = C / G;
    if (tr_tensor_numel(x) == 0) return TR_OK;
    /* gamma and beta to f32 in the shared part, read at every call (weights change in place) */
    if ((rc = tr_cpu_scratch_reserve(k, sizeof(float) * (size_t)(2 * C), sizeof(float) * (size_t)cg, "group_norm",
                                     err)) != TR_OK)
        return rc;
    float *g = tr_cpu_scratch_shared(k), *b = g + C;
    tr_cpu_load_f32(g, in[1].data, in[1].dtype, C);
    tr_cpu_load_f32(b, in[2].data, in[2].dtype, C);
    const struct gn_args A = {x->dtype, x->data, out->data, x->shape[0], x->shape[1] * x->shape[2], C, G, cg,
                              g, b, at->floats[0], at->ints[1] != 0};
    const int64_t items = A.N * G;
    const int par = tr_tensor_numel(x) > TR_CPU_PAR_MIN && items > 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(tr_cpu_threads(k)) if (par)
    for (int64_t i = 0; i < items; i++) gn_group(&A, i, tr_cpu_scratch_thread(k, tr_cpu_thread_num()));
    return TR_OK;
}
