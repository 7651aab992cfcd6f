/* Softmax and layer norm over the last axis: one row per work item, the row converted
 * to f32 once into the thread's slice of the context's scratch, two passes with f32
 * vector accumulators. */
#include <stdlib.h>
#include "cpu_internal.h"

/* A row whose every entry is -inf has no mass: it becomes zeros rather than NaN, as a
 * fully masked attention row does. */
TR_CPU_MULTI(void, softmax_rows, (int dt, const char *x, char *o, int64_t D, int64_t r0, int64_t r1, float *buf), (dt, x, o, D, r0, r1, buf)) {
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

TR_CPU_MULTI(void, layer_norm_rows, (int dt, const char *x, char *o, int64_t D, int64_t r0, int64_t r1, const float *g, const float *b, float eps, float *buf), (dt, x, o, D, r0, r1, g, b, eps, buf)) {
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

/* What a softmax or layer norm call needs once checked. gamma/beta are read (and
 * converted to f32 into the shared scratch) at every call: weights may change in place
 * between steps. */
struct rows_plan {
    struct tr_cpu_prepared hdr;
    int kind; /* 0 softmax, 1 layer norm */
    int dt, gdt, bdt;
    const char *x;
    char *out;
    const void *g, *b; /* NULL: 1 and 0 */
    int64_t D, rows, n;
    float eps;
};

static size_t rows_shared(const struct rows_plan *pl) {
    return pl->kind ? sizeof(float) * (size_t)(2 * pl->D) : 0;
}

static size_t rows_per_thread(const struct rows_plan *pl) { return sizeof(float) * (size_t)pl->D; }

/* Rows split among threads, each with a D-float slice of the context's scratch. */
static void rows_compute(struct tr_kernels *k, const struct rows_plan *pl) {
    const int64_t D = pl->D, rows = pl->rows;
    if (pl->n == 0 || D == 0) return;
    float *g = NULL, *b = NULL;
    if (pl->kind) {
        g = tr_cpu_scratch_shared(k);
        b = g + D;
        for (int64_t i = 0; i < D; i++) {
            g[i] = pl->g ? tr_cpu_get_f32(pl->g, pl->gdt, i) : 1.0f;
            b[i] = pl->b ? tr_cpu_get_f32(pl->b, pl->bdt, i) : 0.0f;
        }
    }
    const int64_t per = rows < 16 ? 1 : 4; /* rows per work item */
    const int64_t items = (rows + per - 1) / per;
    const int kind = pl->kind, dt = pl->dt;
    const char *px = pl->x;
    char *po = pl->out;
    const float eps = pl->eps;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (pl->n > TR_CPU_PAR_MIN && rows > 1)
    {
        float *buf = tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            int64_t r0 = it * per, r1 = r0 + per < rows ? r0 + per : rows;
            if (kind == 0) softmax_rows(dt, px, po, D, r0, r1, buf);
            else layer_norm_rows(dt, px, po, D, r0, r1, g, b, eps, buf);
        }
    }
}

static int rows_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    k->stats.calls++;
    rows_compute(k, c->prepared);
    return TR_OK;
}

static int softmax_check(const struct tr_tensor *x, const struct tr_tensor *out, struct rows_plan *pl,
                         struct tr_error *err) {
    int st = tr_cpu_check_float(x, "softmax", "x", err);
    if (!st) st = tr_cpu_check_float(out, "softmax", "out", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "softmax: x %s and out %s should have the same shape and dtype",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    memset(pl, 0, sizeof *pl);
    pl->kind = 0;
    pl->dt = x->dtype;
    pl->x = x->data;
    pl->out = out->data;
    pl->D = x->ndim ? x->shape[x->ndim - 1] : 1;
    pl->n = tr_tensor_numel(x);
    pl->rows = pl->D ? pl->n / pl->D : 0;
    return TR_OK;
}

static int layer_norm_check(const struct tr_tensor *x, const struct tr_tensor *gamma, const struct tr_tensor *beta,
                            float eps, const struct tr_tensor *out, struct rows_plan *pl, struct tr_error *err) {
    int st = tr_cpu_check_float(x, "layer_norm", "x", err);
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
    memset(pl, 0, sizeof *pl);
    pl->kind = 1;
    pl->dt = x->dtype;
    pl->x = x->data;
    pl->out = out->data;
    pl->g = gamma ? gamma->data : NULL;
    pl->gdt = gamma ? gamma->dtype : 0;
    pl->b = beta ? beta->data : NULL;
    pl->bdt = beta ? beta->dtype : 0;
    pl->D = D;
    pl->n = tr_tensor_numel(x);
    pl->rows = D ? pl->n / D : 0;
    pl->eps = eps;
    return TR_OK;
}

static int rows_run(struct tr_kernels *k, const struct rows_plan *pl, const char *kname, struct tr_error *err) {
    int st = tr_cpu_scratch_reserve(k, rows_shared(pl), rows_per_thread(pl), kname, err);
    if (st) return st;
    rows_compute(k, pl);
    return TR_OK;
}

static int rows_keep(struct tr_kernels *k, struct tr_kernel_call *c, const struct rows_plan *pl, const char *kname,
                     struct tr_error *err) {
    int st = tr_cpu_scratch_reserve(k, rows_shared(pl), rows_per_thread(pl), kname, err);
    if (st) return st;
    return tr_cpu_keep_plan(c, pl, sizeof *pl, rows_call, kname, err);
}

int tr_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_softmax(k, x, out, err));
    struct rows_plan pl;
    int st = tr_cpu_check_ctx(k, "softmax", err);
    if (!st) st = softmax_check(x, out, &pl, err);
    return st ? st : rows_run(k, &pl, "softmax", err);
}

int tr_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                    const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_layer_norm(k, x, gamma, beta, eps, out, err));
    struct rows_plan pl;
    int st = tr_cpu_check_ctx(k, "layer_norm", err);
    if (!st) st = layer_norm_check(x, gamma, beta, eps, out, &pl, err);
    return st ? st : rows_run(k, &pl, "layer_norm", err);
}

int tr_cpu_softmax_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rows_plan pl;
    int st = tr_cpu_check_ctx_bind(k, "softmax", err);
    if (!st) st = softmax_check(&c->in[0], &c->out, &pl, err);
    return st ? st : rows_keep(k, c, &pl, "softmax", err);
}

int tr_cpu_layer_norm_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rows_plan pl;
    int st = tr_cpu_check_ctx_bind(k, "layer_norm", err);
    if (!st) st = layer_norm_check(&c->in[0], &c->in[1], &c->in[2], c->attrs.floats[0], &c->out, &pl, err);
    return st ? st : rows_keep(k, c, &pl, "layer_norm", err);
}
