/* Softmax and layer norm over the last axis: one row per work item, the row converted
 * to f32 once into the thread's slice of the context's scratch, two passes with f32
 * vector accumulators. */
#include <stdlib.h>
#include "rows.h"

/* A call's rows as the leaves read them (gamma and beta already f32). */
struct rows_args {
    int dt;
    const char *x;
    char *o;
    int64_t D;
    const float *g, *b;
    float eps;
};

TR_CPU_MULTI(void, softmax_rows, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct rows_args *A = ctx;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(vbuf, A->x + r * A->D * (int64_t)es, A->dt, A->D);
        tr_cpu_softmax_row(vbuf, A->D);
        tr_cpu_store_f32(A->o + r * A->D * (int64_t)es, A->dt, vbuf, A->D);
    }
}

TR_CPU_MULTI(void, layer_norm_rows, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct rows_args *A = ctx;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(vbuf, A->x + r * A->D * (int64_t)es, A->dt, A->D);
        tr_cpu_ln_row(vbuf, A->D, A->g, A->b, A->eps);
        tr_cpu_store_f32(A->o + r * A->D * (int64_t)es, A->dt, vbuf, A->D);
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
static void rows_compute(struct tr_kernels *k, const void *plan) {
    const struct rows_plan *pl = plan;
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
    const struct rows_args A = {pl->dt, pl->x, pl->out, D, g, b, pl->eps};
    /* a few rows per work item amortise the scheduling of short rows */
    tr_cpu_rows(k, rows, rows < 16 ? 1 : 4, pl->n > TR_CPU_PAR_MIN, pl->kind ? layer_norm_rows : softmax_rows, &A);
}

static int softmax_check(const struct tr_tensor *x, const struct tr_tensor *out, struct rows_plan *pl,
                         struct tr_error *err) {
    int rc = tr_cpu_check_float(x, "softmax", "x", err);
    if (!rc) rc = tr_cpu_check_float(out, "softmax", "out", err);
    if (!rc) rc = tr_cpu_check_like("softmax", x, "x", out, "out", err);
    if (rc) return rc;
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
    int rc = tr_cpu_check_float(x, "layer_norm", "x", err);
    if (!rc) rc = tr_cpu_check_float(out, "layer_norm", "out", err);
    if (!rc && gamma) rc = tr_cpu_check_float(gamma, "layer_norm", "gamma", err);
    if (!rc && beta) rc = tr_cpu_check_float(beta, "layer_norm", "beta", err);
    if (!rc) rc = tr_cpu_check_like("layer_norm", x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
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
    int rc = tr_cpu_scratch_reserve(k, rows_shared(pl), rows_per_thread(pl), kname, err);
    if (rc) return rc;
    rows_compute(k, pl);
    return TR_OK;
}

static int rows_keep(struct tr_kernels *k, struct tr_kernel_call *c, const struct rows_plan *pl, const char *kname,
                     struct tr_error *err) {
    int rc = tr_cpu_scratch_reserve(k, rows_shared(pl), rows_per_thread(pl), kname, err);
    if (rc) return rc;
    return tr_cpu_keep_compute(c, pl, sizeof *pl, rows_compute, kname, err);
}

int tr_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_softmax(k, x, out, err));
    struct rows_plan pl;
    int rc = tr_cpu_check_ctx(k, "softmax", err);
    if (!rc) rc = softmax_check(x, out, &pl, err);
    return rc ? rc : rows_run(k, &pl, "softmax", err);
}

int tr_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                    const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_layer_norm(k, x, gamma, beta, eps, out, err));
    struct rows_plan pl;
    int rc = tr_cpu_check_ctx(k, "layer_norm", err);
    if (!rc) rc = layer_norm_check(x, gamma, beta, eps, out, &pl, err);
    return rc ? rc : rows_run(k, &pl, "layer_norm", err);
}

int tr_cpu_softmax_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rows_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "softmax", err);
    if (!rc) rc = softmax_check(&c->in[0], &c->out, &pl, err);
    return rc ? rc : rows_keep(k, c, &pl, "softmax", err);
}

int tr_cpu_layer_norm_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rows_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, "layer_norm", err);
    if (!rc) rc = layer_norm_check(&c->in[0], &c->in[1], &c->in[2], c->attrs.floats[0], &c->out, &pl, err);
    return rc ? rc : rows_keep(k, c, &pl, "layer_norm", err);
}
