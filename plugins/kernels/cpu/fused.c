/* The hand-fused kernels of the tf backend (kernels.h): each reads its inputs once and
 * writes its output once, where the unfused chain writes and rereads an intermediate
 * per op. One row of the last axis per work item, converted to f32 into the thread's
 * slice of the context's scratch (reserved by the first call of a shape, or at bind:
 * later calls allocate nothing, which a static executor relies on), reduced with f32
 * vector accumulators. Each kernel is a check that fills a plan and a compute part that
 * runs it (cpu_internal.h), so it can be bound (tr_kernels_bind_* in kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include "rows.h"

#define FUSED_MAX_TABLES 8

/* dst += src, src in any float storage dtype. */
static inline void acc_f32(float *restrict dst, const void *restrict src, int dtype, int64_t n) {
    if (dtype == TR_DTYPE_F32) {
        const float *s = src;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) dst[i] += s[i];
    } else if (dtype == TR_DTYPE_BF16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] += tr_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] += tr_f16_to_f32(s[i]);
    }
}

/* Offset of row r (row-major over the nl leading axes `lead`) in a broadcast operand. */
static inline int64_t row_offset(int64_t r, int nl, const int64_t *lead, const int64_t *st) {
    int64_t off = 0;
    for (int d = nl - 1; d >= 0 && r; d--) {
        off += (r % lead[d]) * st[d];
        r /= lead[d];
    }
    return off;
}

/* A float vector operand (gamma, beta, bias) as a plan keeps it: its data and dtype. */
struct vec_ref {
    const void *data; /* NULL: absent */
    int dtype;
};

static struct vec_ref vec_of(const struct tr_tensor *t) {
    return t ? (struct vec_ref){t->data, t->dtype} : (struct vec_ref){NULL, 0};
}

/* gamma, beta and bias as f32 vectors: f32 data is used in place, other dtypes are
 * converted into slot (D floats of the shared scratch), and absent stands for dflt.
 * Done at every call: weights may change in place between steps. */
static const float *params_f32(struct vec_ref t, float dflt, int64_t D, float *slot) {
    if (t.data && t.dtype == TR_DTYPE_F32) return t.data;
    for (int64_t i = 0; i < D; i++) slot[i] = t.data ? tr_cpu_get_f32(t.data, t.dtype, i) : dflt;
    return slot;
}

/* Scratch of a row kernel: `vecs` D-float vectors shared, `per_row` D floats a thread. */
static int reserve_rows(struct tr_kernels *k, int64_t D, int vecs, int per_row, const char *kname,
                        struct tr_error *err) {
    return tr_cpu_scratch_reserve(k, sizeof(float) * (size_t)(vecs * D), sizeof(float) * (size_t)(per_row * D), kname,
                                  err);
}

/* A float vector of D elements (gamma, beta, bias): x's dtype or f32. */
static int check_vec(const struct tr_tensor *t, int64_t D, const struct tr_tensor *x, const char *kname, const char *what,
                     struct tr_error *err) {
    int rc = tr_cpu_check_float(t, kname, what, err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (tr_tensor_numel(t) != D || (t->ndim && t->shape[t->ndim - 1] != D) ||
        (t->dtype != x->dtype && t->dtype != TR_DTYPE_F32))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kname, what,
                            tr_cpu_desc(t, d1, sizeof d1), (long long)D, tr_dtype_name((enum tr_dtype)x->dtype),
                            tr_cpu_desc(x, d2, sizeof d2));
    return TR_OK;
}

static int check_eps(float eps, const char *kname, struct tr_error *err) {
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kname, (double)eps);
    return TR_OK;
}

/* ---- bias + residual + layer norm ---- */

struct brln_args {
    const char *x, *res;
    char *out;
    const float *bias, *g, *b;  /* bias NULL: none */
    int dt;
    int64_t D;
    float eps;
};

TR_CPU_MULTI(void, brln_rows, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct brln_args *A = ctx;
    float *restrict buf = vbuf;
    const int64_t D = A->D;
    const size_t rb = (size_t)D * tr_dtype_size((enum tr_dtype)A->dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, A->x + r * (int64_t)rb, A->dt, D);
        if (A->bias) {
            const float *bias = A->bias;
#pragma omp simd
            for (int64_t i = 0; i < D; i++) buf[i] += bias[i];
        }
        if (A->res) acc_f32(buf, A->res + r * (int64_t)rb, A->dt, D);
        tr_cpu_ln_row(buf, D, A->g, A->b, A->eps);
        tr_cpu_store_f32(A->out + r * (int64_t)rb, A->dt, buf, D);
    }
}

struct brln_plan {
    struct tr_cpu_prepared hdr;
    struct brln_args A; /* bias, g, b set per call */
    struct vec_ref bias, gamma, beta;
    int64_t n, rows;
};

static int brln_check(const struct tr_tensor *x, const struct tr_tensor *bias, const struct tr_tensor *residual,
                      const struct tr_tensor *gamma, const struct tr_tensor *beta, float eps,
                      const struct tr_tensor *out, struct brln_plan *pl, struct tr_error *err) {
    static const char kn[] = "bias_residual_layer_norm";
    int rc = tr_cpu_check_float(x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc && residual) rc = tr_cpu_check_float(residual, kn, "residual", err);
    if (!rc) rc = check_eps(eps, kn, err);
    if (!rc) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (residual && (residual->dtype != x->dtype || !tr_cpu_same_shape(x, residual)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: residual %s should have x's shape and dtype (x is %s)", kn,
                            tr_cpu_desc(residual, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2));
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (it normalises the last axis)", kn);
    const int64_t D = x->shape[x->ndim - 1], n = tr_tensor_numel(x);
    if (!rc && bias) rc = check_vec(bias, D, x, kn, "bias", err);
    if (!rc && gamma) rc = check_vec(gamma, D, x, kn, "gamma", err);
    if (!rc && beta) rc = check_vec(beta, D, x, kn, "beta", err);
    if (rc) return rc;
    memset(pl, 0, sizeof *pl);
    pl->A = (struct brln_args){.x = x->data, .res = residual ? residual->data : NULL, .out = out->data,
                               .dt = x->dtype, .D = D, .eps = eps};
    pl->bias = vec_of(bias);
    pl->gamma = vec_of(gamma);
    pl->beta = vec_of(beta);
    pl->n = n;
    pl->rows = D ? n / D : 0;
    return TR_OK;
}

static void brln_compute(struct tr_kernels *k, const void *plan) {
    const struct brln_plan *pl = plan;
    const int64_t D = pl->A.D, n = pl->n, rows = pl->rows;
    if (n == 0 || D == 0) return;
    float *pbuf = tr_cpu_scratch_shared(k);
    struct brln_args A = pl->A;
    A.g = params_f32(pl->gamma, 1.0f, D, pbuf);
    A.b = params_f32(pl->beta, 0.0f, D, pbuf + D);
    A.bias = pl->bias.data ? params_f32(pl->bias, 0.0f, D, pbuf + 2 * D) : NULL;
    tr_cpu_rows(k, rows, 4, n > TR_CPU_PAR_MIN, brln_rows, &A);
}

int tr_k_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                  const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bias_residual_layer_norm(k, x, bias, residual, gamma, beta, eps, out, err));
    static const char kn[] = "bias_residual_layer_norm";
    struct brln_plan pl;
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = brln_check(x, bias, residual, gamma, beta, eps, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 3, 1, kn, err);
    return tr_cpu_compute_now(k, rc, brln_compute, &pl);
}

int tr_kernels_bind_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x,
                                             const struct tr_tensor *bias, const struct tr_tensor *residual,
                                             const struct tr_tensor *gamma, const struct tr_tensor *beta, float eps,
                                             const struct tr_tensor *out, struct tr_kernel_call *call,
                                             struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_bias_residual_layer_norm(k, x, bias, residual, gamma, beta, eps, out, call, err));
    static const char kn[] = "bias_residual_layer_norm";
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "%s: call is NULL", kn);
    memset(call, 0, sizeof *call);
    struct brln_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc) rc = brln_check(x, bias, residual, gamma, beta, eps, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 3, 1, kn, err);
    if (rc) return rc;
    const struct tr_tensor *ins[5] = {x, gamma, beta, bias, residual};
    call->op = -1;
    for (int i = 0; i < 5; i++)
        if (ins[i]) call->in[call->n_in++] = *ins[i];
    call->attrs.floats[0] = eps;
    call->out = *out;
    return tr_cpu_keep_compute(call, &pl, sizeof pl, brln_compute, kn, err);
}

/* ---- scale + mask + softmax ---- */

struct sms_args {
    const char *x, *mask;
    char *out;
    int dt, mdt;
    int64_t D;
    float scale;
    int nl;                     /* leading axes of x */
    const int64_t *lead;
    int64_t mst[TR_MAX_DIMS];   /* mask strides over x's axes (0: broadcast) */
};

TR_CPU_MULTI(void, sms_rows, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct sms_args *A = ctx;
    const int64_t D = A->D;
    float *restrict buf = vbuf, *restrict mrow = buf + D;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt), mes = A->mask ? tr_dtype_size((enum tr_dtype)A->mdt) : 0;
    const float sc = A->scale;
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, A->x + r * D * (int64_t)es, A->dt, D);
#pragma omp simd
        for (int64_t i = 0; i < D; i++) buf[i] *= sc;
        if (A->mask) {
            const char *mp = A->mask + row_offset(r, A->nl, A->lead, A->mst) * (int64_t)mes;
            if (A->mst[A->nl] == 0) {
                float m = tr_cpu_get_f32(mp, A->mdt, 0);
#pragma omp simd
                for (int64_t i = 0; i < D; i++) buf[i] += m;
            } else {
                tr_cpu_load_f32(mrow, mp, A->mdt, D);
#pragma omp simd
                for (int64_t i = 0; i < D; i++) buf[i] += mrow[i];
            }
        }
        tr_cpu_softmax_row(buf, D);
        tr_cpu_store_f32(A->out + r * D * (int64_t)es, A->dt, buf, D);
    }
}

struct sms_plan {
    struct tr_cpu_prepared hdr;
    struct sms_args A; /* lead points into shape */
    int64_t shape[TR_MAX_DIMS];
    int64_t n, rows;
};

static int sms_check(const struct tr_tensor *x, float scale, const struct tr_tensor *mask, const struct tr_tensor *out,
                     struct sms_plan *pl, struct tr_error *err) {
    static const char kn[] = "scale_mask_softmax";
    int rc = tr_cpu_check_float(x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc && mask) rc = tr_cpu_check_float(mask, kn, "mask", err);
    if (!rc) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (!isfinite(scale)) return tr_error_set(err, TR_ERR_INVALID, "%s: scale %g is not finite", kn, (double)scale);
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (softmax is over the last axis)", kn);
    memset(pl, 0, sizeof *pl);
    memcpy(pl->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    struct sms_args *A = &pl->A;
    *A = (struct sms_args){.x = x->data, .out = out->data, .dt = x->dtype, .D = x->shape[x->ndim - 1],
                           .scale = scale, .nl = x->ndim - 1};
    if (mask) {
        if ((mask->dtype != TR_DTYPE_F32 && mask->dtype != x->dtype) ||
            !tr_broadcast_strides(mask->ndim, mask->shape, x->ndim, x->shape, A->mst))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s should be f32 or %s and broadcast to x %s", kn,
                                tr_cpu_desc(mask, d1, sizeof d1), tr_dtype_name((enum tr_dtype)x->dtype),
                                tr_cpu_desc(x, d2, sizeof d2));
        A->mask = mask->data;
        A->mdt = mask->dtype;
    }
    pl->n = tr_tensor_numel(x);
    pl->rows = A->D ? pl->n / A->D : 0;
    return TR_OK;
}

static void sms_compute(struct tr_kernels *k, const void *plan) {
    const struct sms_plan *pl = plan;
    const int64_t D = pl->A.D, n = pl->n, rows = pl->rows;
    if (n == 0 || D == 0) return;
    struct sms_args A = pl->A;
    A.lead = pl->shape;
    tr_cpu_rows(k, rows, 4, n > TR_CPU_PAR_MIN, sms_rows, &A);
}

int tr_k_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale, const struct tr_tensor *mask,
                            struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_scale_mask_softmax(k, x, scale, mask, out, err));
    static const char kn[] = "scale_mask_softmax";
    struct sms_plan pl;
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = sms_check(x, scale, mask, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 0, 2, kn, err);
    return tr_cpu_compute_now(k, rc, sms_compute, &pl);
}

int tr_kernels_bind_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                                       const struct tr_tensor *mask, const struct tr_tensor *out,
                                       struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_scale_mask_softmax(k, x, scale, mask, out, call, err));
    static const char kn[] = "scale_mask_softmax";
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "%s: call is NULL", kn);
    memset(call, 0, sizeof *call);
    struct sms_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc) rc = sms_check(x, scale, mask, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 0, 2, kn, err);
    if (rc) return rc;
    call->op = -1;
    call->in[call->n_in++] = *x;
    if (mask) call->in[call->n_in++] = *mask;
    call->attrs.floats[0] = scale;
    call->out = *out;
    return tr_cpu_keep_compute(call, &pl, sizeof pl, sms_compute, kn, err);
}

/* ---- embedding sum + layer norm ---- */

struct esln_args {
    int n, dt;
    const char *tab[FUSED_MAX_TABLES];
    const void *ids[FUSED_MAX_TABLES];
    int is64[FUSED_MAX_TABLES];
    int64_t ist[FUSED_MAX_TABLES][TR_MAX_DIMS];   /* ids strides over out's leading axes */
    int nl;
    const int64_t *lead;
    char *out;
    const float *g, *b;
    int64_t D;
    float eps;
};

TR_CPU_MULTI(void, esln_rows, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct esln_args *A = ctx;
    float *restrict buf = vbuf;
    const int64_t D = A->D;
    const size_t rb = (size_t)D * tr_dtype_size((enum tr_dtype)A->dt);
    for (int64_t r = r0; r < r1; r++) {
        for (int t = 0; t < A->n; t++) {
            int64_t o = row_offset(r, A->nl, A->lead, A->ist[t]);
            int64_t id = A->is64[t] ? ((const int64_t *)A->ids[t])[o] : ((const int32_t *)A->ids[t])[o];
            const char *row = A->tab[t] + id * (int64_t)rb;
            if (t == 0) tr_cpu_load_f32(buf, row, A->dt, D);
            else acc_f32(buf, row, A->dt, D);
        }
        tr_cpu_ln_row(buf, D, A->g, A->b, A->eps);
        tr_cpu_store_f32(A->out + r * (int64_t)rb, A->dt, buf, D);
    }
}

/* The ids are data: a bound call checks them at every call, as tr_k_embedding does. */
struct esln_plan {
    struct tr_cpu_prepared hdr;
    struct esln_args A; /* lead, g, b set per call */
    int64_t shape[TR_MAX_DIMS];
    struct vec_ref gamma, beta;
    int64_t V[FUSED_MAX_TABLES], m[FUSED_MAX_TABLES];
    struct tr_tensor tables[FUSED_MAX_TABLES]; /* for the message about a bad id */
    int64_t rows;
};

static int esln_check(int n, const struct tr_tensor *tables, const struct tr_tensor *ids, const struct tr_tensor *gamma,
                      const struct tr_tensor *beta, float eps, const struct tr_tensor *out, struct esln_plan *pl,
                      struct tr_error *err) {
    static const char kn[] = "embedding_sum_layer_norm";
    int rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc) rc = check_eps(eps, kn, err);
    if (rc) return rc;
    if (n < 1 || n > FUSED_MAX_TABLES || !tables || !ids)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d tables (1 to %d, with their ids) given", kn, n,
                            FUSED_MAX_TABLES);
    char d1[200], d2[200], d3[200];
    if (out->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: out is 0-d (it normalises the last axis)", kn);
    const int64_t D = out->shape[out->ndim - 1];
    memset(pl, 0, sizeof *pl);
    memcpy(pl->shape, out->shape, sizeof(int64_t) * (size_t)out->ndim);
    struct esln_args *A = &pl->A;
    *A = (struct esln_args){.n = n, .dt = out->dtype, .nl = out->ndim - 1, .out = out->data, .D = D, .eps = eps};
    pl->rows = D ? tr_tensor_numel(out) / D : 0;
    for (int t = 0; t < n; t++) {
        char what[32];
        snprintf(what, sizeof what, "tables[%d]", t);
        if ((rc = tr_cpu_check_float(&tables[t], kn, what, err))) return rc;
        snprintf(what, sizeof what, "ids[%d]", t);
        if ((rc = tr_cpu_check_tensor(&ids[t], kn, what, err))) return rc;
        if (tables[t].ndim != 2 || tables[t].shape[1] != D || tables[t].dtype != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "%s: tables[%d] %s should be (V,%lld) of out's dtype (out is %s)", kn,
                                t, tr_cpu_desc(&tables[t], d1, sizeof d1), (long long)D,
                                tr_cpu_desc(out, d2, sizeof d2));
        if ((ids[t].dtype != TR_DTYPE_I32 && ids[t].dtype != TR_DTYPE_I64) ||
            !tr_broadcast_strides(ids[t].ndim, ids[t].shape, A->nl, out->shape, A->ist[t]))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: ids[%d] %s should be i32 or i64 and broadcast to out's leading "
                                "axes (out is %s, table %s)", kn, t, tr_cpu_desc(&ids[t], d1, sizeof d1),
                                tr_cpu_desc(out, d2, sizeof d2), tr_cpu_desc(&tables[t], d3, sizeof d3));
        A->tab[t] = tables[t].data;
        A->ids[t] = ids[t].data;
        A->is64[t] = ids[t].dtype == TR_DTYPE_I64;
        pl->V[t] = tables[t].shape[0];
        pl->m[t] = tr_tensor_numel(&ids[t]);
        pl->tables[t] = tables[t];
    }
    if (!rc && gamma) rc = check_vec(gamma, D, out, kn, "gamma", err);
    if (!rc && beta) rc = check_vec(beta, D, out, kn, "beta", err);
    if (rc) return rc;
    pl->gamma = vec_of(gamma);
    pl->beta = vec_of(beta);
    return TR_OK;
}

/* Every id is checked before any row is written, as tr_k_embedding does. */
static int esln_check_ids(const struct esln_plan *pl, struct tr_error *err) {
    static const char kn[] = "embedding_sum_layer_norm";
    const struct esln_args *A = &pl->A;
    for (int t = 0; t < A->n; t++) {
        const int64_t V = pl->V[t], m = pl->m[t];
        for (int64_t i = 0; i < m && pl->rows > 0; i++) {
            int64_t id = A->is64[t] ? ((const int64_t *)A->ids[t])[i] : ((const int32_t *)A->ids[t])[i];
            if (id < 0 || id >= V) {
                char d1[200];
                return tr_error_set(err, TR_ERR_INVALID, "%s: ids[%d][%lld] = %lld is outside [0, %lld) (table %s)",
                                    kn, t, (long long)i, (long long)id, (long long)V,
                                    tr_cpu_desc(&pl->tables[t], d1, sizeof d1));
            }
        }
    }
    return TR_OK;
}

static int esln_compute(struct tr_kernels *k, const struct esln_plan *pl, struct tr_error *err) {
    int rc = esln_check_ids(pl, err);
    if (rc) return rc;
    const int64_t D = pl->A.D, rows = pl->rows;
    if (rows == 0 || D == 0) return TR_OK;
    float *pbuf = tr_cpu_scratch_shared(k);
    struct esln_args A = pl->A;
    A.lead = pl->shape;
    A.g = params_f32(pl->gamma, 1.0f, D, pbuf);
    A.b = params_f32(pl->beta, 0.0f, D, pbuf + D);
    tr_cpu_rows(k, rows, 4, rows * D > TR_CPU_PAR_MIN, esln_rows, &A);
    return TR_OK;
}

static int esln_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    return esln_compute(k, c->prepared, err);
}

int tr_k_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                  const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_embedding_sum_layer_norm(k, n, tables, ids, gamma, beta, eps, out, err));
    static const char kn[] = "embedding_sum_layer_norm";
    struct esln_plan pl;
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = esln_check(n, tables, ids, gamma, beta, eps, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 2, 1, kn, err);
    return rc ? rc : esln_compute(k, &pl, err);
}

int tr_kernels_bind_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                             const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                             const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                             struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_embedding_sum_layer_norm(k, n, tables, ids, gamma, beta, eps, out, call, err));
    static const char kn[] = "embedding_sum_layer_norm";
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "%s: call is NULL", kn);
    memset(call, 0, sizeof *call);
    struct esln_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc) rc = esln_check(n, tables, ids, gamma, beta, eps, out, &pl, err);
    if (!rc) rc = reserve_rows(k, pl.A.D, 2, 1, kn, err);
    if (rc) return rc;
    call->op = -1;
    for (int t = 0; t < n && call->n_in < TR_KERNEL_CALL_MAX_IN; t++) call->in[call->n_in++] = tables[t];
    for (int t = 0; t < n && call->n_in < TR_KERNEL_CALL_MAX_IN; t++) call->in[call->n_in++] = ids[t];
    call->attrs.ints[0] = n;
    call->attrs.floats[0] = eps;
    call->out = *out;
    return tr_cpu_keep_plan(call, &pl, sizeof pl, esln_call, kn, err);
}
