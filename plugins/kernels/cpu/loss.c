/* Losses of ops.h: cross entropy (with an ignore index), its gradient, and mean squared
 * error. Sums in f64 whatever the storage dtype (cross entropy's exps in f32 for data
 * that is not f64); a loss is written as a 0-d f32, or
 * f64 when its inputs are f64. Per-row (or per-block) partial sums are kept and added in
 * order after the parallel part, so the loss does not depend on the thread count.
 *
 * Every label is checked before anything is computed: a label outside [0,C) that is not
 * the ignore index is TR_ERR_INVALID naming its position and value. When every label is
 * ignored the mean has no terms: the loss is 0 and so is its gradient (PyTorch gives
 * NaN there; 0 keeps a batch of padding from poisoning a training run). */
#include <stdlib.h>
#include "grad_internal.h"

#define load_f64 tr_grad_load
#define store_f64 tr_grad_store
#define check_real tr_grad_check_real

/* A loss: one element, f64 when the inputs are f64 and f32 otherwise. */
static int check_loss_out(const char *kn, const struct tr_tensor *out, int in_dt, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(out, kn, "out", err);
    if (rc) return rc;
    int want = in_dt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32;
    if (tr_tensor_numel(out) != 1 || out->dtype != want) {
        char d[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should be 0-d %s", kn, tr_cpu_desc(out, d, sizeof d),
                            tr_dtype_name((enum tr_dtype)want));
    }
    return TR_OK;
}

static void write_loss(struct tr_tensor *out, double v) {
    if (out->dtype == TR_DTYPE_F64) *(double *)out->data = v;
    else *(float *)out->data = (float)v;
}

/* ---- cross entropy ---- */

/* logits (...,C) and labels of its leading shape (i32/i64); the labels are read into lab
 * (−1 for an ignored one) and checked. Returns the count of labels not ignored in *valid. */
static int ce_labels(const char *kn, const struct tr_tensor *logits, const struct tr_tensor *labels, int has_ignore,
                     int64_t ignore_index, int64_t **lab, int64_t *valid, struct tr_error *err) {
    char d1[200], d2[200];
    *lab = NULL;
    if (labels->dtype != TR_DTYPE_I32 && labels->dtype != TR_DTYPE_I64)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: labels %s should be i32 or i64", kn, tr_cpu_desc(labels, d1, sizeof d1));
    int ok = logits->ndim >= 1 && labels->ndim == logits->ndim - 1;
    for (int i = 0; ok && i < labels->ndim; i++) ok = labels->shape[i] == logits->shape[i];
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: labels %s should have the shape of logits %s without its last axis "
                            "(logits (N,C), labels (N))", kn, tr_cpu_desc(labels, d1, sizeof d1),
                            tr_cpu_desc(logits, d2, sizeof d2));
    int64_t C = logits->shape[logits->ndim - 1], N = tr_tensor_numel(labels), nv = 0;
    int64_t *l = malloc(sizeof(int64_t) * (size_t)(N > 0 ? N : 1));
    if (!l) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %lld labels", kn, (long long)N);
    for (int64_t i = 0; i < N; i++) {
        int64_t y = labels->dtype == TR_DTYPE_I64 ? ((const int64_t *)labels->data)[i] : ((const int32_t *)labels->data)[i];
        if (has_ignore && y == ignore_index) {
            l[i] = -1;
            continue;
        }
        if (y < 0 || y >= C) {
            free(l);
            if (has_ignore)
                return tr_error_set(err, TR_ERR_INVALID, "%s: labels[%lld] = %lld is outside [0, %lld) and is not the "
                                    "ignore index %lld (logits %s)", kn, (long long)i, (long long)y, (long long)C,
                                    (long long)ignore_index, tr_cpu_desc(logits, d1, sizeof d1));
            return tr_error_set(err, TR_ERR_INVALID, "%s: labels[%lld] = %lld is outside [0, %lld) (logits %s)", kn,
                                (long long)i, (long long)y, (long long)C, tr_cpu_desc(logits, d1, sizeof d1));
        }
        l[i] = y;
        nv++;
    }
    *lab = l;
    *valid = nv;
    return TR_OK;
}

/* log Σ exp over a row, max-subtracted. */
TR_CPU_MULTI(double, row_lse, (const double *x, int64_t C), (x, C)) {
    double mx = -INFINITY, s = 0.0;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
    if (mx == -INFINITY) return -INFINITY;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++) s += tr_grad_exp(x[c] - mx);
    return mx + log(s);
}

/* x = g·(softmax(x) − onehot(label)) in place. */
TR_CPU_MULTI(void, row_grad, (double *x, int64_t C, int64_t label, double g), (x, C, label, g)) {
    const double lse = row_lse(x, C);
#pragma omp simd
    for (int64_t c = 0; c < C; c++) x[c] = g * tr_grad_exp(x[c] - lse);
    x[label] -= g;
}

/* The same for f32, bf16 and f16 data: exp in f32 (the forward's vector tr_fexp, 8x the
 * double polynomial's rate on a vocabulary's row), the sum in f64 so that a 256000-word
 * row loses nothing to it; f64 data keeps the f64 path (finite-difference checks). */
TR_CPU_MULTI(double, row_lse_f32, (const float *x, int64_t C), (x, C)) {
    float mx = -INFINITY;
    double s = 0.0;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < C; c++) mx = x[c] > mx ? x[c] : mx;
    if (mx == -INFINITY) return -INFINITY;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++) s += (double)tr_fexp(x[c] - mx);
    return (double)mx + log(s);
}

TR_CPU_MULTI(void, row_grad_f32, (float *x, int64_t C, int64_t label, double g), (x, C, label, g)) {
    const double lse = row_lse_f32(x, C);
    const float fl = (float)lse, fg = (float)g;
#pragma omp simd
    for (int64_t c = 0; c < C; c++) x[c] = fg * tr_fexp(x[c] - fl);
    x[label] -= fg;
}

/* Cross entropy's rows as ce_loss_rows and ce_grad_rows read them. */
struct ce_rows {
    const char *x; /* logits, rows of C */
    char *o;       /* dlogits */
    int dt;
    int64_t C;
    const int64_t *lab; /* -1: ignored */
    double g;           /* dloss / valid */
    double *rl;         /* row losses */
};

static void ce_loss_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    const struct ce_rows *A = ctx;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    double *xb = buf;
    float *fb = buf;
    for (int64_t i = r0; i < r1; i++) {
        A->rl[i] = 0.0;
        if (A->lab[i] < 0) continue;
        const char *row = A->x + i * A->C * (int64_t)es;
        if (A->dt == TR_DTYPE_F64) {
            load_f64(xb, row, A->dt, A->C);
            A->rl[i] = row_lse(xb, A->C) - xb[A->lab[i]];
        } else {
            const float *fx = (const float *)row;
            if (A->dt != TR_DTYPE_F32) {
                tr_cpu_load_f32(fb, row, A->dt, A->C);
                fx = fb;
            }
            A->rl[i] = row_lse_f32(fx, A->C) - (double)fx[A->lab[i]];
        }
    }
}

static void ce_grad_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    const struct ce_rows *A = ctx;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    double *xb = buf;
    for (int64_t i = r0; i < r1; i++) {
        char *orow = A->o + i * A->C * (int64_t)es;
        if (A->lab[i] < 0) {
            memset(orow, 0, (size_t)A->C * es); /* all-zero bits are 0.0 in every float dtype */
            continue;
        }
        if (A->dt == TR_DTYPE_F64) {
            load_f64(xb, A->x + i * A->C * (int64_t)es, A->dt, A->C);
            row_grad(xb, A->C, A->lab[i], A->g);
            store_f64(orow, A->dt, xb, A->C);
        } else {
            float *fb = buf;
            tr_cpu_load_f32(fb, A->x + i * A->C * (int64_t)es, A->dt, A->C);
            row_grad_f32(fb, A->C, A->lab[i], A->g);
            tr_cpu_store_f32(orow, A->dt, fb, A->C);
        }
    }
}

/* The row losses in shared scratch, a row of C doubles per thread. */
static int ce_reserve(struct tr_kernels *k, int64_t N, int64_t C, const char *kn, struct tr_error *err) {
    return tr_cpu_scratch_reserve(k, sizeof(double) * (size_t)N, sizeof(double) * (size_t)C, kn, err);
}

int tr_k_cross_entropy(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                       int has_ignore, int64_t ignore_index, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_cross_entropy(k, logits, labels, has_ignore, ignore_index, out, err));
    const char *kn = "cross_entropy";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_real(logits, kn, "logits", err);
    if (!rc) rc = tr_cpu_check_tensor(labels, kn, "labels", err);
    if (!rc) rc = check_loss_out(kn, out, logits->dtype, err);
    if (rc) return rc;
    int64_t *lab, nv;
    if ((rc = ce_labels(kn, logits, labels, has_ignore, ignore_index, &lab, &nv, err)) != TR_OK) return rc;
    int64_t C = logits->shape[logits->ndim - 1], N = tr_tensor_numel(labels);
    if (nv == 0 || C == 0) {
        free(lab);
        write_loss(out, 0.0);
        return TR_OK;
    }
    if ((rc = ce_reserve(k, N, C, kn, err)) != TR_OK) {
        free(lab);
        return rc;
    }
    double *rl = tr_cpu_scratch_shared(k);
    const struct ce_rows A = {.x = logits->data, .dt = logits->dtype, .C = C, .lab = lab, .rl = rl};
    tr_cpu_rows(k, N, 1, N * C > TR_CPU_PAR_MIN, ce_loss_rows, &A);
    double s = 0.0;
    for (int64_t i = 0; i < N; i++) s += rl[i];
    free(lab);
    write_loss(out, s / (double)nv);
    return TR_OK;
}

/* dlogits = dloss/valid · (softmax(logits) − onehot(label)) on rows not ignored, 0 on
 * the others. */
int tr_k_cross_entropy_grad(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                            int has_ignore, int64_t ignore_index, const struct tr_tensor *dloss,
                            struct tr_tensor *dlogits, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_cross_entropy_grad(k, logits, labels, has_ignore, ignore_index, dloss, dlogits, err));
    const char *kn = "cross_entropy_grad";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_real(logits, kn, "logits", err);
    if (!rc) rc = tr_cpu_check_tensor(labels, kn, "labels", err);
    if (!rc) rc = check_real(dloss, kn, "dloss", err);
    if (!rc) rc = check_real(dlogits, kn, "dlogits", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (dlogits->dtype != logits->dtype || !tr_cpu_same_shape(dlogits, logits))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dlogits %s should have the shape and dtype of logits %s", kn,
                            tr_cpu_desc(dlogits, d1, sizeof d1), tr_cpu_desc(logits, d2, sizeof d2));
    if (tr_tensor_numel(dloss) != 1)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dloss %s should be 0-d (one element)", kn,
                            tr_cpu_desc(dloss, d1, sizeof d1));
    int64_t *lab, nv;
    if ((rc = ce_labels(kn, logits, labels, has_ignore, ignore_index, &lab, &nv, err)) != TR_OK) return rc;
    int64_t C = logits->shape[logits->ndim - 1], N = tr_tensor_numel(labels);
    if (C == 0 || N == 0) {
        free(lab);
        return TR_OK;
    }
    const double g = nv ? (dloss->dtype == TR_DTYPE_F64 ? *(const double *)dloss->data
                                                        : (double)tr_cpu_get_f32(dloss->data, dloss->dtype, 0)) /
                              (double)nv
                        : 0.0;
    if ((rc = ce_reserve(k, 0, C, kn, err)) == TR_OK) {
        const struct ce_rows A = {.x = logits->data, .o = dlogits->data, .dt = logits->dtype, .C = C, .lab = lab, .g = g};
        tr_cpu_rows(k, N, 1, N * C > TR_CPU_PAR_MIN, ce_grad_rows, &A);
    }
    free(lab);
    return rc;
}

/* ---- mean squared error ---- */

#define MSE_BLOCK 4096 /* elements per partial sum */

int tr_k_mse(struct tr_kernels *k, const struct tr_tensor *pred, const struct tr_tensor *target, struct tr_tensor *out,
             struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_mse(k, pred, target, out, err));
    const char *kn = "mse";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_real(pred, kn, "pred", err);
    if (!rc) rc = check_real(target, kn, "target", err);
    if (!rc) rc = check_loss_out(kn, out, pred->dtype, err);
    if (!rc) rc = tr_cpu_check_like(kn, pred, "pred", target, "target", err);
    if (rc) return rc;
    char d1[200];
    int64_t n = tr_tensor_numel(pred);
    if (n == 0) return tr_error_set(err, TR_ERR_SHAPE, "%s: pred %s is empty (a mean of nothing)", kn,
                                    tr_cpu_desc(pred, d1, sizeof d1));
    int64_t nb = (n + MSE_BLOCK - 1) / MSE_BLOCK;
    double *part = malloc(sizeof(double) * (size_t)nb);
    if (!part) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for %lld partial sums", kn, (long long)nb);
    size_t es = tr_dtype_size((enum tr_dtype)pred->dtype);
    int dt = pred->dtype;
    const char *pp = pred->data, *pt = target->data;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        double pb[256], tb[256], s = 0.0;
        int64_t e = (b + 1) * MSE_BLOCK < n ? (b + 1) * MSE_BLOCK : n;
        for (int64_t i = b * MSE_BLOCK; i < e; i += 256) {
            int64_t len = e - i < 256 ? e - i : 256;
            load_f64(pb, pp + i * (int64_t)es, dt, len);
            load_f64(tb, pt + i * (int64_t)es, dt, len);
            for (int64_t j = 0; j < len; j++) s += (pb[j] - tb[j]) * (pb[j] - tb[j]);
        }
        part[b] = s;
    }
    double s = 0.0;
    for (int64_t b = 0; b < nb; b++) s += part[b];
    free(part);
    write_loss(out, s / (double)n);
    return TR_OK;
}
