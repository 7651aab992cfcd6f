/* The tf backend's fused kernels on a cuda context (host/cuda_entry.h): the checks of
 * cpu/fused.c's contract, then fused.cu's launchers. An embedding id out of range is
 * reported by the next tr_kernels_sync, as for tr_kernels_run's EMBEDDING. */
#include <stdio.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/cuda_entry.h"

/* The cpu kernels' tensor checks (cpu/context.c) on the cuda device. */
static int check(const struct tr_tensor *t, const char *kn, const char *what, int want_float, struct tr_error *err) {
    return want_float ? tr_cpu_check_float_on(t, TR_DEVICE_CUDA, kn, what, err)
                      : tr_cpu_check_tensor_on(t, TR_DEVICE_CUDA, kn, what, err);
}

static int ctx_ok(const struct tr_kernels *k, const char *kn, struct tr_error *err) {
    if (!k || k->device_type != TR_DEVICE_CUDA || !k->cuda)
        return tr_error_set(err, TR_ERR_INVALID, "%s: not a cuda kernels context", kn);
    return TR_OK;
}

/* A vector of D elements, x's dtype or f32, or absent. */
static int check_vec(const struct tr_tensor *t, int64_t D, int dt, const char *kn, const char *what,
                     struct tr_error *err) {
    if (!t) return TR_OK;
    int rc = check(t, kn, what, 1, err);
    if (rc) return rc;
    if (tr_tensor_numel(t) != D || (t->dtype != dt && t->dtype != TR_DTYPE_F32)) {
        char d[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should have %lld elements, of x's dtype or f32", kn, what,
                            tr_cpu_desc(t, d, sizeof d), (long long)D);
    }
    return TR_OK;
}

/* out: x's shape (of at least one axis) and dtype. */
static int check_like_x(const struct tr_tensor *x, const struct tr_tensor *out, const char *kn, struct tr_error *err) {
    if (x->ndim >= 1 && out->dtype == x->dtype && tr_cpu_same_shape(x, out)) return TR_OK;
    char d1[200], d2[200];
    return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should have one shape (>= 1 axis) and dtype", kn,
                        tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
}

static void lead_of(const struct tr_tensor *out, struct tr_cu_lead *L) {
    L->nl = out->ndim - 1;
    for (int i = 0; i < L->nl; i++) L->lead[i] = out->shape[i];
}

int tr_cuda_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                     const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err) {
    static const char kn[] = "bias_residual_layer_norm";
    int rc = ctx_ok(k, kn, err);
    if (!rc) rc = check(x, kn, "x", 1, err);
    if (!rc) rc = check(out, kn, "out", 1, err);
    if (!rc) rc = check_like_x(x, out, kn, err);
    if (rc) return rc;
    char d1[200], d2[200];
    int64_t D = x->shape[x->ndim - 1], rows = D ? tr_tensor_numel(x) / D : 0;
    if (!rc) rc = check_vec(bias, D, x->dtype, kn, "bias", err);
    if (!rc) rc = check_vec(gamma, D, x->dtype, kn, "gamma", err);
    if (!rc) rc = check_vec(beta, D, x->dtype, kn, "beta", err);
    if (!rc && residual && (rc = check(residual, kn, "residual", 1, err)) == TR_OK &&
        (residual->dtype != x->dtype || !tr_cpu_same_shape(residual, x)))
        rc = tr_error_set(err, TR_ERR_SHAPE, "%s: residual %s should be x's shape and dtype (x is %s)", kn,
                          tr_cpu_desc(residual, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2));
    if (!rc && (!(eps >= 0.0f) || !isfinite(eps)))
        rc = tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)eps);
    if (rc) return rc;
    k->stats.calls++;
    return TR_CU_LAUNCH(k->cuda, tr_cu_bias_residual_ln(k->cuda->stream, x->dtype, x->data, bias ? bias->data : NULL,
                                                        bias ? bias->dtype : 0, residual ? residual->data : NULL,
                                                        gamma ? gamma->data : NULL, gamma ? gamma->dtype : 0,
                                                        beta ? beta->data : NULL, beta ? beta->dtype : 0, out->data,
                                                        rows, D, eps, err));
}

int tr_cuda_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                               const struct tr_tensor *mask, struct tr_tensor *out, struct tr_error *err) {
    static const char kn[] = "scale_mask_softmax";
    int rc = ctx_ok(k, kn, err);
    if (!rc) rc = check(x, kn, "x", 1, err);
    if (!rc) rc = check(out, kn, "out", 1, err);
    if (!rc && mask) rc = check(mask, kn, "mask", 1, err);
    if (!rc) rc = check_like_x(x, out, kn, err);
    if (rc) return rc;
    char d1[200], d2[200];
    struct tr_cu_lead L;
    lead_of(x, &L);
    struct tr_cu_index mi = {.ndim = x->ndim};
    if (mask && ((mask->dtype != TR_DTYPE_F32 && mask->dtype != x->dtype) ||
                 !tr_broadcast_strides(mask->ndim, mask->shape, x->ndim, x->shape, mi.stride[1])))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s should be f32 or x's dtype and broadcast to x %s", kn,
                            tr_cpu_desc(mask, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2));
    int64_t D = x->shape[x->ndim - 1], rows = D ? tr_tensor_numel(x) / D : 0;
    k->stats.calls++;
    return TR_CU_LAUNCH(k->cuda,
                        tr_cu_scale_mask_softmax(k->cuda->stream, x->dtype, x->data, scale, mask ? mask->data : NULL,
                                                 mask ? mask->dtype : 0, &L, &mi, out->data, rows, D, err));
}

int tr_cuda_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                     const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err) {
    static const char kn[] = "embedding_sum_layer_norm";
    int rc = ctx_ok(k, kn, err);
    if (!rc) rc = check(out, kn, "out", 1, err);
    if (rc) return rc;
    if (n < 1 || n > TR_CU_ESLN_MAX || !tables || !ids)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d tables (1 to %d, with their ids) given", kn, n, TR_CU_ESLN_MAX);
    if (out->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: out is 0-d (it normalises the last axis)", kn);
    char d1[200], d2[200];
    const int64_t D = out->shape[out->ndim - 1], rows = D ? tr_tensor_numel(out) / D : 0;
    struct tr_cu_lead L;
    lead_of(out, &L);
    struct tr_cu_esln E = {.n = n};
    for (int t = 0; t < n; t++) {
        char what[32];
        snprintf(what, sizeof what, "tables[%d]", t);
        if ((rc = check(&tables[t], kn, what, 1, err)) != TR_OK) return rc;
        snprintf(what, sizeof what, "ids[%d]", t);
        if ((rc = check(&ids[t], kn, what, 0, err)) != TR_OK) return rc;
        if (tables[t].ndim != 2 || tables[t].shape[1] != D || tables[t].dtype != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "%s: tables[%d] %s should be (V,%lld) of out's dtype", kn, t,
                                tr_cpu_desc(&tables[t], d1, sizeof d1), (long long)D);
        if ((ids[t].dtype != TR_DTYPE_I32 && ids[t].dtype != TR_DTYPE_I64) ||
            !tr_broadcast_strides(ids[t].ndim, ids[t].shape, L.nl, out->shape, E.ist[t]))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: ids[%d] %s should be i32 or i64 and broadcast to out's leading "
                                "axes (out is %s)", kn, t, tr_cpu_desc(&ids[t], d1, sizeof d1),
                                tr_cpu_desc(out, d2, sizeof d2));
        E.tab[t] = tables[t].data;
        E.ids[t] = ids[t].data;
        E.is64[t] = ids[t].dtype == TR_DTYPE_I64;
        E.V[t] = tables[t].shape[0];
    }
    if ((rc = check_vec(gamma, D, out->dtype, kn, "gamma", err)) != TR_OK ||
        (rc = check_vec(beta, D, out->dtype, kn, "beta", err)) != TR_OK)
        return rc;
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)eps);
    k->stats.calls++;
    return TR_CU_LAUNCH(k->cuda,
                        tr_cu_embedding_sum_ln(k->cuda->stream, out->dtype, &E, &L, gamma ? gamma->data : NULL,
                                               gamma ? gamma->dtype : 0, beta ? beta->data : NULL,
                                               beta ? beta->dtype : 0, out->data, rows, D, eps, k->cuda->flag, err));
}
