/* GEMM on CUDA through cuBLASLt: c = act(alpha · op(a) · op(b) + bias), batch axes
 * broadcast as one strided batch (host/gemm_plan.c maps the row-major shapes onto
 * cuBLASLt's column-major view). f32 accumulation for every dtype (TF32 only when the
 * context allows it). The bias and the activations cuBLASLt has (ReLU, tanh-GELU) run as
 * its epilogues; erf-GELU, tanh and SiLU, and a bias of another dtype than c, run as one
 * elementwise kernel after it. A plan (descriptors, layouts and the algorithm the
 * heuristic chose) is made once per shape and kept in the context's LRU cache. */
#include <stdlib.h>
#include <cublasLt.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/cuda_entry.h"
#include "host/gemm_plan.h"

struct gemm_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t l1, l2, lc;
    cublasLtMatmulAlgo_t algo;
};

void tr_cuda_gemm_release(void *p) {
    struct gemm_plan *g = p;
    if (!g) return;
    if (g->op) cublasLtMatmulDescDestroy(g->op);
    if (g->l1) cublasLtMatrixLayoutDestroy(g->l1);
    if (g->l2) cublasLtMatrixLayoutDestroy(g->l2);
    if (g->lc) cublasLtMatrixLayoutDestroy(g->lc);
    free(g);
}

static cudaDataType_t cu_type(int dt) {
    return dt == TR_DTYPE_F32 ? CUDA_R_32F : dt == TR_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

static int lt_status(cublasStatus_t s, const char *what, struct tr_error *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return TR_OK;
    return tr_error_set(err, TR_ERR_DEVICE, "matmul: %s failed: %s", what, cublasLtGetStatusString(s));
}

static int layout(cublasLtMatrixLayout_t *l, int dt, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                  int64_t stride, struct tr_error *err) {
    int st = lt_status(cublasLtMatrixLayoutCreate(l, cu_type(dt), (uint64_t)rows, (uint64_t)cols, ld),
                       "cublasLtMatrixLayoutCreate", err);
    if (st || batch <= 1) return st;
    int32_t bc = (int32_t)batch;
    st = lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
                   "layout batch count", err);
    if (!st)
        st = lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                        sizeof stride),
                       "layout batch stride", err);
    return st;
}

static int make_plan(struct tr_cuda_ctx *c, const struct tr_cuda_gemm_key *key, const struct tr_cuda_gemm_shape *s,
                     struct gemm_plan **out, struct tr_error *err) {
    struct gemm_plan *g = calloc(1, sizeof *g);
    if (!g) return tr_error_set(err, TR_ERR_NOMEM, "matmul: no host memory for a plan");
    cublasOperation_t t1 = s->op1_trans ? CUBLAS_OP_T : CUBLAS_OP_N, t2 = s->op2_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    int st = lt_status(cublasLtMatmulDescCreate(&g->op, (cublasComputeType_t)key->compute, CUDA_R_32F),
                       "cublasLtMatmulDescCreate", err);
    if (!st)
        st = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof t1), "transa", err);
    if (!st)
        st = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof t2), "transb", err);
    if (!st)
        st = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                       "epilogue", err);
    if (!st) st = layout(&g->l1, key->dtype_ab, s->rows1, s->cols1, s->ld1, s->batch, s->stride1, err);
    if (!st) st = layout(&g->l2, key->dtype_ab, s->rows2, s->cols2, s->ld2, s->batch, s->stride2, err);
    if (!st) st = layout(&g->lc, key->dtype_c, s->N, s->M, s->ldc, s->batch, s->stridec, err);
    cublasLtMatmulPreference_t pref = NULL;
    if (!st) st = lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", err);
    if (!st) {
        uint64_t ws = c->workspace_size;
        uint32_t al = (uint32_t)key->align;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
        cublasLtMatmulHeuristicResult_t res;
        int n = 0;
        st = lt_status(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, g->op, g->l1, g->l2, g->lc, g->lc, pref,
                                                      1, &res, &n),
                       "cublasLtMatmulAlgoGetHeuristic", err);
        if (!st && n < 1)
            st = tr_error_set(err, TR_ERR_UNSUPPORTED, "matmul: cuBLASLt has no algorithm for M=%lld N=%lld K=%lld "
                              "batch=%lld %s (epilogue %d, alignment %d)", (long long)s->M, (long long)s->N,
                              (long long)s->K, (long long)s->batch, tr_dtype_name((enum tr_dtype)key->dtype_ab),
                              key->epilogue, key->align);
        if (!st) g->algo = res.algo;
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (st) {
        tr_cuda_gemm_release(g);
        return st;
    }
    *out = g;
    return TR_OK;
}

static int check_operand(const struct tr_tensor *t, const char *what, struct tr_error *err) {
    char d[200];
    if (!t) return tr_error_set(err, TR_ERR_INVALID, "matmul: %s is NULL", what);
    if (t->device != TR_DEVICE_CUDA)
        return tr_error_set(err, TR_ERR_DEVICE, "matmul: %s %s is on device %d, not cuda", what,
                            tr_cpu_desc(t, d, sizeof d), t->device);
    if (t->dtype != TR_DTYPE_F32 && t->dtype != TR_DTYPE_BF16 && t->dtype != TR_DTYPE_F16)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "matmul: %s %s: expected f32, bf16 or f16", what,
                            tr_cpu_desc(t, d, sizeof d));
    if (!tr_tensor_is_contiguous(t))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "matmul: %s %s is not contiguous", what, tr_cpu_desc(t, d, sizeof d));
    if (!t->data && tr_tensor_numel(t) > 0)
        return tr_error_set(err, TR_ERR_INVALID, "matmul: %s %s has no data", what, tr_cpu_desc(t, d, sizeof d));
    return TR_OK;
}

int tr_cuda_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b, struct tr_tensor *c,
                   int trans_a, int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act,
                   struct tr_error *err) {
    struct tr_cuda_ctx *cx = k->cuda;
    char d1[200], d2[200];
    int st = check_operand(a, "a", err);
    if (!st) st = check_operand(b, "b", err);
    if (!st) st = check_operand(c, "c", err);
    if (!st && bias) st = check_operand(bias, "bias", err);
    if (st) return st;
    if (a->dtype != b->dtype || a->dtype != c->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: a %s, b %s and c should share one dtype",
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2));
    struct tr_cuda_gemm_shape s;
    if ((st = tr_cuda_gemm_shape(a, b, c, trans_a, trans_b, &s, err)) != TR_OK) return st;
    if (bias && (bias->ndim < 1 || tr_tensor_numel(bias) != s.N || bias->shape[bias->ndim - 1] != s.N ||
                 (bias->dtype != a->dtype && bias->dtype != TR_DTYPE_F32)))
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: bias %s should have shape [%lld] and be %s (as a) or f32",
                            tr_cpu_desc(bias, d1, sizeof d1), (long long)s.N, tr_dtype_name((enum tr_dtype)a->dtype));
    k->stats.calls++;
    k->stats.gemm_calls++;
    int64_t rows = s.M * s.batch;
    if (rows * s.N == 0) return TR_OK;
    if (s.K == 0) { /* the sum is empty: c = act(bias) */
        st = tr_cu_fill_zero(cx->stream, c->data, tr_tensor_nbytes(c), err);
        if (!st && (bias || act != TR_ACT_NONE))
            st = tr_cu_bias_act(cx->stream, c->dtype, c->data, bias ? bias->data : NULL, bias ? bias->dtype : 0, rows,
                                s.N, act, err);
        return st;
    }
    /* what cuBLASLt does itself, and what is left for one kernel after it */
    int bias_in_lt = bias && bias->dtype == c->dtype;
    int act_in_lt = act == TR_ACT_NONE || act == TR_ACT_RELU || act == TR_ACT_GELU_TANH;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (act_in_lt && act == TR_ACT_RELU) epi = bias_in_lt ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act_in_lt && act == TR_ACT_GELU_TANH) epi = bias_in_lt ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (bias_in_lt) epi = CUBLASLT_EPILOGUE_BIAS;
    /* a bias of another dtype comes after, and the activation with it */
    int post_bias = bias && !bias_in_lt;
    int post_act = act != TR_ACT_NONE && (!act_in_lt || post_bias);
    if (post_bias && act_in_lt && act != TR_ACT_NONE) epi = CUBLASLT_EPILOGUE_DEFAULT;
    cublasComputeType_t compute =
        a->dtype == TR_DTYPE_F32 && cx->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int align = tr_cuda_ptr_align(a->data, b->data, c->data, bias_in_lt ? bias->data : NULL);
    struct tr_cuda_gemm_key key;
    tr_cuda_gemm_key_make(&key, &s, a->dtype, c->dtype, bias_in_lt ? bias->dtype : -1, (int)epi, (int)compute, align);
    struct gemm_plan *g = tr_cuda_plan_cache_get(cx->gemm_plans, &key, sizeof key);
    if (!g) {
        if ((st = make_plan(cx, &key, &s, &g, err)) != TR_OK) return st;
        if ((st = tr_cuda_plan_cache_put(cx->gemm_plans, &key, sizeof key, g, err)) != TR_OK) return st;
    }
    if (bias_in_lt) {
        const void *bp = bias->data;
        st = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp),
                       "bias pointer", err);
        if (st) return st;
    }
    const float beta = 0.0f;
    st = lt_status(cublasLtMatmul((cublasLtHandle_t)cx->lt, g->op, &alpha, b->data, g->l1, a->data, g->l2, &beta,
                                  c->data, g->lc, c->data, g->lc, &g->algo, cx->workspace, cx->workspace_size,
                                  cx->stream),
                   "cublasLtMatmul", err);
    if (st) return st;
    if (post_bias || post_act)
        st = tr_cu_bias_act(cx->stream, c->dtype, c->data, post_bias ? bias->data : NULL, post_bias ? bias->dtype : 0,
                            rows, s.N, post_act ? act : TR_ACT_NONE, err);
    return st;
}
