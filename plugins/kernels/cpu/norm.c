/* Softmax and layer norm over the last axis: one row per work item, the row converted
 * to f32 once into a per-thread buffer, two passes with f32 vector accumulators. */
#include <stdlib.h>
#include "cpu_internal.h"

/* A row whose every entry is -inf has no mass: it becomes zeros rather than NaN, as a
 * fully masked attention row does. */
TR_CPU_CLONES
static void softmax_rows(int dt, const char *x, char *o, int64_t D, int64_t r0, int64_t r1, float *buf) {
    size_t es = tr_dtype_size((enum tr_dtype)dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, x + r * D * (int64_t)es, dt, D);
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int64_t i = 0; i < D; i++) mx = buf[i] > mx ? buf[i] : mx;
        if (mx == -INFINITY) {
            for (int64_t i = 0; i < D; i++) buf[i] = 0.0f;
        } else {
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < D; i++) {
                buf[i] = tr_fexp(buf[i] - mx);
                s += buf[i];
            }
            float inv = 1.0f / s;
            for (int64_t i = 0; i < D; i++) buf[i] *= inv;
        }
        tr_cpu_store_f32(o + r * D * (int64_t)es, dt, buf, D);
    }
}

TR_CPU_CLONES
static void layer_norm_rows(int dt, const char *x, char *o, int64_t D, int64_t r0, int64_t r1, const float *g,
                            const float *b, float eps, float *buf) {
    size_t es = tr_dtype_size((enum tr_dtype)dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, x + r * D * (int64_t)es, dt, D);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < D; i++) s += buf[i];
        float mean = s / (float)D, v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int64_t i = 0; i < D; i++) v += (buf[i] - mean) * (buf[i] - mean);
        float rstd = 1.0f / sqrtf(v / (float)D + eps);
        for (int64_t i = 0; i < D; i++) buf[i] = (buf[i] - mean) * rstd * g[i] + b[i];
        tr_cpu_store_f32(o + r * D * (int64_t)es, dt, buf, D);
    }
}

/* Rows split among threads, each with a D-float buffer; kind 0 softmax, 1 layer norm. */
static int run_rows(int kind, const struct tr_tensor *x, struct tr_tensor *out, const float *g, const float *b,
                    float eps, const char *kname, struct tr_error *err) {
    int64_t D = x->ndim ? x->shape[x->ndim - 1] : 1, n = tr_tensor_numel(x);
    if (n == 0 || D == 0) return TR_OK;
    int64_t rows = n / D;
    int64_t per = rows < 16 ? 1 : 4; /* rows per work item */
    int64_t items = (rows + per - 1) / per;
    int failed = 0;
    const char *px = x->data;
    char *po = out->data;
    int dt = x->dtype;
#pragma omp parallel if (n > TR_CPU_PAR_MIN && rows > 1)
    {
        float *buf = aligned_alloc(64, ((size_t)D * sizeof(float) + 63) & ~(size_t)63);
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            if (!buf) continue;
            int64_t r0 = it * per, r1 = r0 + per < rows ? r0 + per : rows;
            if (kind == 0) softmax_rows(dt, px, po, D, r0, r1, buf);
            else layer_norm_rows(dt, px, po, D, r0, r1, g, b, eps, buf);
        }
        free(buf);
    }
    if (failed) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a row buffer of %lld floats", kname, (long long)D);
    return TR_OK;
}

int tr_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_ctx(k, "softmax", err);
    if (!st) st = tr_cpu_check_float(x, "softmax", "x", err);
    if (!st) st = tr_cpu_check_float(out, "softmax", "out", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "softmax: x %s and out %s should have the same shape and dtype",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    return run_rows(0, x, out, NULL, NULL, 0.0f, "softmax", err);
}

int tr_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                    const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_ctx(k, "layer_norm", err);
    if (!st) st = tr_cpu_check_float(x, "layer_norm", "x", err);
    if (!st) st = tr_cpu_check_float(out, "layer_norm", "out", err);
    if (!st && gamma) st = tr_cpu_check_float(gamma, "layer_norm", "gamma", err);
    if (!st && beta) st = tr_cpu_check_float(beta, "layer_norm", "beta", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "layer_norm: x %s and out %s should have the same shape and dtype",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "layer_norm: x is 0-d (it normalises the last axis)");
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tr_error_set(err, TR_ERR_INVALID, "layer_norm: eps %g should be finite and >= 0", (double)eps);
    int64_t D = x->shape[x->ndim - 1];
    const struct tr_tensor *gb[2] = {gamma, beta};
    for (int i = 0; i < 2; i++) {
        const struct tr_tensor *t = gb[i];
        if (!t) continue;
        if (tr_tensor_numel(t) != D || (t->ndim && t->shape[t->ndim - 1] != D) ||
            (t->dtype != x->dtype && t->dtype != TR_DTYPE_F32))
            return tr_error_set(err, TR_ERR_SHAPE, "layer_norm: %s %s should be [%lld] of %s or f32 (x is %s)",
                                i ? "beta" : "gamma", tr_cpu_desc(t, d1, sizeof d1), (long long)D,
                                tr_dtype_name((enum tr_dtype)x->dtype), tr_cpu_desc(x, d2, sizeof d2));
    }
    float *gbuf = malloc(sizeof(float) * (size_t)(2 * D + 1));
    if (!gbuf) return tr_error_set(err, TR_ERR_NOMEM, "layer_norm: no memory for gamma/beta (D=%lld)", (long long)D);
    for (int64_t i = 0; i < D; i++) {
        gbuf[i] = gamma ? tr_cpu_get_f32(gamma->data, gamma->dtype, i) : 1.0f;
        gbuf[D + i] = beta ? tr_cpu_get_f32(beta->data, beta->dtype, i) : 0.0f;
    }
    st = run_rows(1, x, out, gbuf, gbuf + D, eps, "layer_norm", err);
    free(gbuf);
    return st;
}
