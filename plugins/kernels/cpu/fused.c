/* The hand-fused kernels of the tf backend (kernels.h): each reads its inputs once and
 * writes its output once, where the unfused chain writes and rereads an intermediate
 * per op. One row of the last axis per work item, converted to f32 into a per-thread
 * buffer (on the stack up to FUSED_STACK floats: no allocation in the common case,
 * which a static executor relies on), reduced with f32 vector accumulators. */
#include <stdio.h>
#include <stdlib.h>
#include "cpu_internal.h"

/* Per-thread row buffer on the stack (16 KiB); longer rows take heap memory per call. */
#define FUSED_STACK 4096
/* gamma/beta/bias converted to f32 once per call on the caller's stack up to this D. */
#define FUSED_PARAM_STACK 2048
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

/* (x - mean)·rstd·g + b over buf in place; biased variance, as tr_k_layer_norm. The row
 * is in cache here: the second pass costs no memory traffic. */
static inline void ln_row(float *restrict buf, int64_t D, const float *restrict g, const float *restrict b, float eps) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < D; i++) s += buf[i];
    float mean = s / (float)D, v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < D; i++) v += (buf[i] - mean) * (buf[i] - mean);
    float rstd = 1.0f / sqrtf(v / (float)D + eps);
#pragma omp simd
    for (int64_t i = 0; i < D; i++) buf[i] = (buf[i] - mean) * rstd * g[i] + b[i];
}

/* Strides in elements of a tensor of shape s (nd axes) broadcast right-aligned to
 * `full` (nf axes), 0 on axes where it broadcasts. 0 if it does not broadcast. */
static int bcast_strides(int nd, const int64_t *s, int nf, const int64_t *full, int64_t *st) {
    if (nd > nf) return 0;
    int64_t acc = 1;
    for (int i = nf - 1; i >= 0; i--) {
        int j = i - (nf - nd);
        int64_t e = j >= 0 ? s[j] : 1;
        if (e != 1 && e != full[i]) return 0;
        st[i] = e == 1 ? 0 : acc;
        acc *= e;
    }
    return 1;
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

/* gamma, beta and bias as f32 vectors: f32 data is used in place, other dtypes are
 * converted into pbuf (3·D floats), and NULL stands for 1, 0, 0. */
static void params_f32(const struct tr_tensor *t, float dflt, int64_t D, float *slot, const float **out) {
    if (t && t->dtype == TR_DTYPE_F32) {
        *out = t->data;
        return;
    }
    for (int64_t i = 0; i < D; i++) slot[i] = t ? tr_cpu_get_f32(t->data, t->dtype, i) : dflt;
    *out = slot;
}

/* A float vector of D elements (gamma, beta, bias): x's dtype or f32. */
static int check_vec(const struct tr_tensor *t, int64_t D, const struct tr_tensor *x, const char *kname, const char *what,
                     struct tr_error *err) {
    int st = tr_cpu_check_float(t, kname, what, err);
    if (st) return st;
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

TR_CPU_CLONES
static void brln_rows(const struct brln_args *A, int64_t r0, int64_t r1, float *buf) {
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
        ln_row(buf, D, A->g, A->b, A->eps);
        tr_cpu_store_f32(A->out + r * (int64_t)rb, A->dt, buf, D);
    }
}

int tr_k_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                  const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err) {
    static const char kn[] = "bias_residual_layer_norm";
    int st = tr_cpu_check_ctx(k, kn, err);
    if (!st) st = tr_cpu_check_float(x, kn, "x", err);
    if (!st) st = tr_cpu_check_float(out, kn, "out", err);
    if (!st && residual) st = tr_cpu_check_float(residual, kn, "residual", err);
    if (!st) st = check_eps(eps, kn, err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should have the same shape and dtype", kn,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    if (residual && (residual->dtype != x->dtype || !tr_cpu_same_shape(x, residual)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: residual %s should have x's shape and dtype (x is %s)", kn,
                            tr_cpu_desc(residual, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2));
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (it normalises the last axis)", kn);
    const int64_t D = x->shape[x->ndim - 1], n = tr_tensor_numel(x);
    if (!st && bias) st = check_vec(bias, D, x, kn, "bias", err);
    if (!st && gamma) st = check_vec(gamma, D, x, kn, "gamma", err);
    if (!st && beta) st = check_vec(beta, D, x, kn, "beta", err);
    if (st) return st;
    if (n == 0 || D == 0) return TR_OK;

    float pstack[3 * FUSED_PARAM_STACK];
    float *pbuf = D <= FUSED_PARAM_STACK ? pstack : malloc(sizeof(float) * 3 * (size_t)D);
    if (!pbuf) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for gamma/beta/bias (D=%lld)", kn, (long long)D);
    struct brln_args A = {.x = x->data, .res = residual ? residual->data : NULL, .out = out->data, .dt = x->dtype,
                          .D = D, .eps = eps};
    params_f32(gamma, 1.0f, D, pbuf, &A.g);
    params_f32(beta, 0.0f, D, pbuf + D, &A.b);
    if (bias) params_f32(bias, 0.0f, D, pbuf + 2 * D, &A.bias);
    const int64_t rows = n / D;
    int failed = 0;
#pragma omp parallel if (n > TR_CPU_PAR_MIN && rows > 1)
    {
        float sbuf[FUSED_STACK];
        float *buf = D <= FUSED_STACK ? sbuf : malloc(sizeof(float) * (size_t)D);
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r += 4) {
            if (buf) brln_rows(&A, r, r + 4 < rows ? r + 4 : rows, buf);
        }
        if (buf != sbuf) free(buf);
    }
    if (pbuf != pstack) free(pbuf);
    if (failed) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a row buffer of %lld floats", kn, (long long)D);
    return TR_OK;
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

/* A row whose every entry is -inf has no mass: zeros rather than NaN, as tr_k_softmax. */
TR_CPU_CLONES
static void sms_rows(const struct sms_args *A, int64_t r0, int64_t r1, float *buf, float *mrow) {
    const int64_t D = A->D;
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
#pragma omp simd
            for (int64_t i = 0; i < D; i++) buf[i] *= inv;
        }
        tr_cpu_store_f32(A->out + r * D * (int64_t)es, A->dt, buf, D);
    }
}

int tr_k_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale, const struct tr_tensor *mask,
                            struct tr_tensor *out, struct tr_error *err) {
    static const char kn[] = "scale_mask_softmax";
    int st = tr_cpu_check_ctx(k, kn, err);
    if (!st) st = tr_cpu_check_float(x, kn, "x", err);
    if (!st) st = tr_cpu_check_float(out, kn, "out", err);
    if (!st && mask) st = tr_cpu_check_float(mask, kn, "mask", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should have the same shape and dtype", kn,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    if (!isfinite(scale)) return tr_error_set(err, TR_ERR_INVALID, "%s: scale %g is not finite", kn, (double)scale);
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (softmax is over the last axis)", kn);
    struct sms_args A = {.x = x->data, .out = out->data, .dt = x->dtype, .D = x->shape[x->ndim - 1], .scale = scale,
                         .nl = x->ndim - 1, .lead = x->shape};
    if (mask) {
        if ((mask->dtype != TR_DTYPE_F32 && mask->dtype != x->dtype) ||
            !bcast_strides(mask->ndim, mask->shape, x->ndim, x->shape, A.mst))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s should be f32 or %s and broadcast to x %s", kn,
                                tr_cpu_desc(mask, d1, sizeof d1), tr_dtype_name((enum tr_dtype)x->dtype),
                                tr_cpu_desc(x, d2, sizeof d2));
        A.mask = mask->data;
        A.mdt = mask->dtype;
    }
    const int64_t D = A.D, n = tr_tensor_numel(x);
    if (n == 0 || D == 0) return TR_OK;
    const int64_t rows = n / D;
    int failed = 0;
#pragma omp parallel if (n > TR_CPU_PAR_MIN && rows > 1)
    {
        float sbuf[FUSED_STACK];
        float *buf = 2 * D <= FUSED_STACK ? sbuf : malloc(sizeof(float) * 2 * (size_t)D);
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r += 4) {
            if (buf) sms_rows(&A, r, r + 4 < rows ? r + 4 : rows, buf, buf + D);
        }
        if (buf != sbuf) free(buf);
    }
    if (failed) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a row buffer of %lld floats", kn, (long long)D);
    return TR_OK;
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

TR_CPU_CLONES
static void esln_rows(const struct esln_args *A, int64_t r0, int64_t r1, float *buf) {
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
        ln_row(buf, D, A->g, A->b, A->eps);
        tr_cpu_store_f32(A->out + r * (int64_t)rb, A->dt, buf, D);
    }
}

int tr_k_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                  const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                  const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                  struct tr_error *err) {
    static const char kn[] = "embedding_sum_layer_norm";
    int st = tr_cpu_check_ctx(k, kn, err);
    if (!st) st = tr_cpu_check_float(out, kn, "out", err);
    if (!st) st = check_eps(eps, kn, err);
    if (st) return st;
    if (n < 1 || n > FUSED_MAX_TABLES || !tables || !ids)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d tables (1 to %d, with their ids) given", kn, n,
                            FUSED_MAX_TABLES);
    char d1[200], d2[200], d3[200];
    if (out->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: out is 0-d (it normalises the last axis)", kn);
    const int64_t D = out->shape[out->ndim - 1];
    struct esln_args A = {.n = n, .dt = out->dtype, .nl = out->ndim - 1, .lead = out->shape, .out = out->data,
                          .D = D, .eps = eps};
    const int64_t rows = D ? tr_tensor_numel(out) / D : 0;
    for (int t = 0; t < n; t++) {
        char what[32];
        snprintf(what, sizeof what, "tables[%d]", t);
        if ((st = tr_cpu_check_float(&tables[t], kn, what, err))) return st;
        snprintf(what, sizeof what, "ids[%d]", t);
        if ((st = tr_cpu_check_tensor(&ids[t], kn, what, err))) return st;
        if (tables[t].ndim != 2 || tables[t].shape[1] != D || tables[t].dtype != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "%s: tables[%d] %s should be (V,%lld) of out's dtype (out is %s)", kn,
                                t, tr_cpu_desc(&tables[t], d1, sizeof d1), (long long)D,
                                tr_cpu_desc(out, d2, sizeof d2));
        if ((ids[t].dtype != TR_DTYPE_I32 && ids[t].dtype != TR_DTYPE_I64) ||
            !bcast_strides(ids[t].ndim, ids[t].shape, A.nl, out->shape, A.ist[t]))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: ids[%d] %s should be i32 or i64 and broadcast to out's leading "
                                "axes (out is %s, table %s)", kn, t, tr_cpu_desc(&ids[t], d1, sizeof d1),
                                tr_cpu_desc(out, d2, sizeof d2), tr_cpu_desc(&tables[t], d3, sizeof d3));
        A.tab[t] = tables[t].data;
        A.ids[t] = ids[t].data;
        A.is64[t] = ids[t].dtype == TR_DTYPE_I64;
        /* Every id is checked before any row is written, as tr_k_embedding does. */
        const int64_t V = tables[t].shape[0], m = tr_tensor_numel(&ids[t]);
        for (int64_t i = 0; i < m && rows > 0; i++) {
            int64_t id = A.is64[t] ? ((const int64_t *)A.ids[t])[i] : ((const int32_t *)A.ids[t])[i];
            if (id < 0 || id >= V)
                return tr_error_set(err, TR_ERR_INVALID, "%s: ids[%d][%lld] = %lld is outside [0, %lld) (table %s)", kn,
                                    t, (long long)i, (long long)id, (long long)V,
                                    tr_cpu_desc(&tables[t], d1, sizeof d1));
        }
    }
    if (!st && gamma) st = check_vec(gamma, D, out, kn, "gamma", err);
    if (!st && beta) st = check_vec(beta, D, out, kn, "beta", err);
    if (st) return st;
    if (rows == 0 || D == 0) return TR_OK;

    float pstack[2 * FUSED_PARAM_STACK];
    float *pbuf = D <= FUSED_PARAM_STACK ? pstack : malloc(sizeof(float) * 2 * (size_t)D);
    if (!pbuf) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for gamma/beta (D=%lld)", kn, (long long)D);
    params_f32(gamma, 1.0f, D, pbuf, &A.g);
    params_f32(beta, 0.0f, D, pbuf + D, &A.b);
    int failed = 0;
#pragma omp parallel if (rows * D > TR_CPU_PAR_MIN && rows > 1)
    {
        float sbuf[FUSED_STACK];
        float *buf = D <= FUSED_STACK ? sbuf : malloc(sizeof(float) * (size_t)D);
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r += 4) {
            if (buf) esln_rows(&A, r, r + 4 < rows ? r + 4 : rows, buf);
        }
        if (buf != sbuf) free(buf);
    }
    if (pbuf != pstack) free(pbuf);
    if (failed) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a row buffer of %lld floats", kn, (long long)D);
    return TR_OK;
}
