/* GEMM on CUDA through cuBLASLt: c = act(alpha · op(a) · op(b) + bias), batch axes
 * broadcast as one strided batch (host/gemm_plan.c maps the row-major shapes onto
 * cuBLASLt's column-major view). f32 accumulation for every dtype; f32 data in TF32 when
 * the context's math is TF32 (tr_kernels_set_math), strict f32 otherwise (DEFAULT, F32,
 * BF16: bf16 data is always computed with f32 accumulation). The compute type is part
 * of the plan key, so a math change never reuses a plan made for the other mode. The
 * bias and the activations cuBLASLt has (ReLU, tanh-GELU) run as its epilogues; erf-GELU, tanh and SiLU, and a bias of another dtype than c, run as one
 * elementwise kernel after it. A plan (descriptors, layouts and the algorithm the
 * heuristic chose) is made once per shape and kept in the context's LRU cache; a bound
 * GEMM (tr_kernels_bind_matmul) owns a plan of its own, made at bind with its bias
 * pointer set, so that the LRU cannot evict it and its call only queues cublasLtMatmul
 * (and the elementwise epilogue), without a lookup, an allocation or a sync.
 *
 * When the heuristic has no algorithm for the epilogue asked (an odd shape, alignment or
 * dtype; tr_cuda_gemm_route decides), the plan is made again without it and marked
 * fallback: the plain GEMM, then the bias and the activation in tr_cu_bias_act, counted
 * in tr_cuda_gemm_route_counts. Only a plain GEMM without an algorithm is an error. */
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
    int fallback; /* no algorithm had the epilogue: the plain GEMM, bias and activation after it */
};

void tr_cuda_gemm_release(void *p) {
    struct gemm_plan *g = p;
    if (!g) return;
    /* destroying a descriptor frees host memory; it has no failure to act on */
    if (g->op) (void)cublasLtMatmulDescDestroy(g->op);
    if (g->l1) (void)cublasLtMatrixLayoutDestroy(g->l1);
    if (g->l2) (void)cublasLtMatrixLayoutDestroy(g->l2);
    if (g->lc) (void)cublasLtMatrixLayoutDestroy(g->lc);
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
    int rc = lt_status(cublasLtMatrixLayoutCreate(l, cu_type(dt), (uint64_t)rows, (uint64_t)cols, ld),
                       "cublasLtMatrixLayoutCreate", err);
    if (rc || batch <= 1) return rc;
    int32_t bc = (int32_t)batch;
    rc = lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc),
                   "layout batch count", err);
    if (!rc)
        rc = lt_status(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                        sizeof stride),
                       "layout batch stride", err);
    return rc;
}

/* The heuristic's best algorithm for g's descriptors into g->algo; *n 0 when it has none
 * (CUBLAS_STATUS_NOT_SUPPORTED is that answer too, for an epilogue it cannot do). */
static int heuristic(struct tr_cuda_ctx *c, struct gemm_plan *g, cublasLtMatmulPreference_t pref, int *n,
                     struct tr_error *err) {
    cublasLtMatmulHeuristicResult_t res;
    memset(&res, 0, sizeof res);
    *n = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)c->lt, g->op, g->l1, g->l2, g->lc, g->lc, pref,
                                                       1, &res, n);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
        *n = 0;
        return TR_OK;
    }
    int rc = lt_status(st, "cublasLtMatmulAlgoGetHeuristic", err);
    if (!rc && *n > 0) g->algo = res.algo;
    return rc;
}

static int no_algorithm(const struct tr_cuda_gemm_key *key, const struct tr_cuda_gemm_shape *s, struct tr_error *err) {
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "matmul: cuBLASLt has no algorithm for M=%lld N=%lld K=%lld "
                        "batch=%lld %s (alignment %d), with epilogue %d nor without one", (long long)s->M,
                        (long long)s->N, (long long)s->K, (long long)s->batch,
                        tr_dtype_name((enum tr_dtype)key->dtype_ab), key->align, key->epilogue);
}

static int make_plan(struct tr_cuda_ctx *c, const struct tr_cuda_gemm_key *key, const struct tr_cuda_gemm_shape *s,
                     struct gemm_plan **out, struct tr_error *err) {
    struct gemm_plan *g = calloc(1, sizeof *g);
    if (!g) return tr_error_set(err, TR_ERR_NOMEM, "matmul: no host memory for a plan");
    cublasOperation_t t1 = s->op1_trans ? CUBLAS_OP_T : CUBLAS_OP_N, t2 = s->op2_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtEpilogue_t epi = (cublasLtEpilogue_t)key->epilogue;
    int rc = lt_status(cublasLtMatmulDescCreate(&g->op, (cublasComputeType_t)key->compute, CUDA_R_32F),
                       "cublasLtMatmulDescCreate", err);
    if (!rc)
        rc = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &t1, sizeof t1), "transa", err);
    if (!rc)
        rc = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &t2, sizeof t2), "transb", err);
    if (!rc)
        rc = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
                       "epilogue", err);
    if (!rc) rc = layout(&g->l1, key->dtype_ab, s->rows1, s->cols1, s->ld1, s->batch, s->stride1, err);
    if (!rc) rc = layout(&g->l2, key->dtype_ab, s->rows2, s->cols2, s->ld2, s->batch, s->stride2, err);
    if (!rc) rc = layout(&g->lc, key->dtype_c, s->N, s->M, s->ldc, s->batch, s->stridec, err);
    cublasLtMatmulPreference_t pref = NULL;
    if (!rc) rc = lt_status(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", err);
    if (!rc) {
        uint64_t ws = c->workspace_size;
        uint32_t al = (uint32_t)key->align;
        static const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
        rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws),
                       "preference max workspace", err);
        for (int i = 0; i < 4 && !rc; i++)
            rc = lt_status(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &al, sizeof al),
                           "preference min alignment", err);
    }
    int n = 0;
    if (!rc) rc = heuristic(c, g, pref, &n, err);
    if (!rc) {
        switch (tr_cuda_gemm_route(n, epi != CUBLASLT_EPILOGUE_DEFAULT)) {
        case TR_CUDA_GEMM_ROUTE_LT: break;
        case TR_CUDA_GEMM_ROUTE_RETRY_PLAIN: {
            cublasLtEpilogue_t plain = CUBLASLT_EPILOGUE_DEFAULT;
            rc = lt_status(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &plain, sizeof plain),
                           "epilogue (fallback)", err);
            if (!rc) rc = heuristic(c, g, pref, &n, err);
            if (!rc && tr_cuda_gemm_route(n, 0) != TR_CUDA_GEMM_ROUTE_LT) rc = no_algorithm(key, s, err);
            g->fallback = 1;
            break;
        }
        case TR_CUDA_GEMM_ROUTE_NONE: rc = no_algorithm(key, s, err); break;
        }
    }
    if (!rc) tr_cuda_gemm_route_note(g->fallback);
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    if (rc) {
        tr_cuda_gemm_release(g);
        return rc;
    }
    *out = g;
    return TR_OK;
}

/* The cpu kernels' checks of a float tensor (cpu/context.c) on the cuda device. */
static int check_operand(const struct tr_tensor *t, const char *what, struct tr_error *err) {
    return tr_cpu_check_float_on(t, TR_DEVICE_CUDA, "matmul", what, err);
}

/* What one GEMM is, once checked: its shape, the epilogue cuBLASLt does, what is left
 * for the elementwise kernel after it, and the plan key. */
struct gemm_args {
    struct tr_cuda_gemm_shape s;
    struct tr_cuda_gemm_key key;
    int64_t rows;           /* M·batch */
    int dtype;              /* c's */
    int bias_in_lt, post_bias, post_act;
    int bias_dtype;
    enum tr_act act;
    cublasLtEpilogue_t epi;
};

static int gemm_check(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b,
                      const struct tr_tensor *c, int trans_a, int trans_b, const struct tr_tensor *bias,
                      enum tr_act act, struct gemm_args *g, struct tr_error *err) {
    char d1[200], d2[200];
    if (!k || k->device_type != TR_DEVICE_CUDA || !k->cuda)
        return tr_error_set(err, TR_ERR_INVALID, "matmul: not a cuda kernels context");
    int rc = check_operand(a, "a", err);
    if (!rc) rc = check_operand(b, "b", err);
    if (!rc) rc = check_operand(c, "c", err);
    if (!rc && bias) rc = check_operand(bias, "bias", err);
    if (rc) return rc;
    if (a->dtype != b->dtype || a->dtype != c->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: a %s, b %s and c should share one dtype",
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2));
    if ((unsigned)act > TR_ACT_SILU)
        return tr_error_set(err, TR_ERR_INVALID, "matmul: unknown activation %d", (int)act);
    memset(g, 0, sizeof *g);
    struct tr_cuda_gemm_shape *s = &g->s;
    if ((rc = tr_cuda_gemm_shape(a, b, c, trans_a, trans_b, s, err)) != TR_OK) return rc;
    if (bias && (bias->ndim < 1 || tr_tensor_numel(bias) != s->N || bias->shape[bias->ndim - 1] != s->N ||
                 (bias->dtype != a->dtype && bias->dtype != TR_DTYPE_F32)))
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: bias %s should have shape [%lld] and be %s (as a) or f32",
                            tr_cpu_desc(bias, d1, sizeof d1), (long long)s->N, tr_dtype_name((enum tr_dtype)a->dtype));
    g->rows = s->M * s->batch;
    g->dtype = c->dtype;
    g->act = act;
    g->bias_dtype = bias ? bias->dtype : 0;
    /* what cuBLASLt does itself, and what is left for one kernel after it */
    g->bias_in_lt = bias && bias->dtype == c->dtype;
    int act_in_lt = act == TR_ACT_NONE || act == TR_ACT_RELU || act == TR_ACT_GELU_TANH;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (act_in_lt && act == TR_ACT_RELU)
        epi = g->bias_in_lt ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (act_in_lt && act == TR_ACT_GELU_TANH)
        epi = g->bias_in_lt ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (g->bias_in_lt)
        epi = CUBLASLT_EPILOGUE_BIAS;
    /* a bias of another dtype comes after, and the activation with it */
    g->post_bias = bias && !g->bias_in_lt;
    g->post_act = act != TR_ACT_NONE && (!act_in_lt || g->post_bias);
    if (g->post_bias && act_in_lt && act != TR_ACT_NONE) epi = CUBLASLT_EPILOGUE_DEFAULT;
    g->epi = epi;
    cublasComputeType_t compute =
        a->dtype == TR_DTYPE_F32 && k->math == TR_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    int align = tr_cuda_ptr_align(a->data, b->data, c->data, g->bias_in_lt ? bias->data : NULL);
    tr_cuda_gemm_key_make(&g->key, s, a->dtype, c->dtype, g->bias_in_lt ? bias->dtype : -1, (int)epi, (int)compute,
                          align);
    return TR_OK;
}

/* No product to compute: rows·N == 0, or K == 0 (the sum is empty: c = act(bias)). */
static int gemm_trivial(const struct gemm_args *g) { return g->rows * g->s.N == 0 || g->s.K == 0; }

/* Queues the GEMM on plan p (NULL when gemm_trivial) and its elementwise epilogue. */
static int gemm_launch(struct tr_cuda_ctx *cx, const struct gemm_args *g, struct gemm_plan *p, float alpha,
                       const void *A, const void *B, void *C, const void *bias, struct tr_error *err) {
    int rc;
    if (g->rows * g->s.N == 0) return TR_OK;
    if (g->s.K == 0) {
        rc = tr_cu_fill_zero(cx->stream, C, (size_t)(g->rows * g->s.N) * tr_dtype_size((enum tr_dtype)g->dtype), err);
        if (!rc && (bias || g->act != TR_ACT_NONE))
            rc = tr_cu_bias_act(cx->stream, g->dtype, C, bias, bias ? g->bias_dtype : 0, g->rows, g->s.N, g->act, err);
        return rc;
    }
    const float beta = 0.0f;
    rc = lt_status(cublasLtMatmul((cublasLtHandle_t)cx->lt, p->op, &alpha, B, p->l1, A, p->l2, &beta, C, p->lc, C,
                                  p->lc, &p->algo, cx->workspace, cx->workspace_size, cx->stream),
                   "cublasLtMatmul", err);
    if (rc) return rc;
    /* a fallback plan left cuBLASLt's part of the epilogue to the kernel as well */
    const int post_bias = g->post_bias || (p->fallback && g->bias_in_lt);
    const int post_act = g->post_act || (p->fallback && g->act != TR_ACT_NONE);
    if (post_bias || post_act)
        rc = tr_cu_bias_act(cx->stream, g->dtype, C, post_bias ? bias : NULL, post_bias ? g->bias_dtype : 0, g->rows,
                            g->s.N, post_act ? g->act : TR_ACT_NONE, err);
    return rc;
}

static int set_bias_pointer(struct gemm_plan *p, const void *bias, struct tr_error *err) {
    return lt_status(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                     "bias pointer", err);
}

int tr_cuda_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b, struct tr_tensor *c,
                   int trans_a, int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act,
                   struct tr_error *err) {
    struct gemm_args g;
    int rc = gemm_check(k, a, b, c, trans_a, trans_b, bias, act, &g, err);
    if (rc) return rc;
    struct tr_cuda_ctx *cx = k->cuda;
    struct gemm_plan *p = NULL;
    if (!gemm_trivial(&g)) {
        p = tr_cuda_plan_cache_get(cx->gemm_plans, &g.key, sizeof g.key);
        if (!p) {
            if ((rc = make_plan(cx, &g.key, &g.s, &p, err)) != TR_OK) return rc;
            if ((rc = tr_cuda_plan_cache_put(cx->gemm_plans, &g.key, sizeof g.key, p, err)) != TR_OK) return rc;
        }
        if (g.bias_in_lt && !p->fallback && (rc = set_bias_pointer(p, bias->data, err)) != TR_OK) return rc;
    }
    if (cx->dry) return TR_OK; /* checked, and the plan made: what a bind wants */
    k->stats.calls++;
    k->stats.gemm_calls++;
    return gemm_launch(cx, &g, p, alpha, a->data, b->data, c->data, bias ? bias->data : NULL, err);
}

/* ---- bound ---- */

struct gemm_bound {
    struct tr_cpu_prepared base;    /* first: tr_kernels_unbind releases through it */
    struct gemm_args g;
    struct gemm_plan *plan;         /* owned (NULL when the product is trivial) */
    float alpha;
    const void *A, *B, *bias;
    void *C;
};

static void gemm_bound_release(void *self) {
    struct gemm_bound *b = self;
    tr_cuda_gemm_release(b->plan);
    free(b);
}

static int gemm_bound_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct gemm_bound *b = c->prepared;
    k->stats.calls++;
    k->stats.gemm_calls++;
    return gemm_launch(k->cuda, &b->g, b->plan, b->alpha, b->A, b->B, b->C, b->bias, err);
}

int tr_cuda_bind_matmul(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                        struct tr_error *err) {
    struct gemm_args g;
    int rc = gemm_check(k, &c->in[0], &c->in[1], &c->out, c->attrs.ints[0] != 0, c->attrs.ints[1] != 0, bias, act, &g,
                        err);
    if (rc) return rc;
    struct gemm_bound *b = calloc(1, sizeof *b);
    if (!b) return tr_error_set(err, TR_ERR_NOMEM, "matmul: no host memory for a bound call");
    b->base.release = gemm_bound_release;
    b->g = g;
    b->alpha = c->attrs.floats[0];
    b->A = c->in[0].data;
    b->B = c->in[1].data;
    b->C = c->out.data;
    b->bias = bias ? bias->data : NULL;
    if (!gemm_trivial(&g)) {
        rc = make_plan(k->cuda, &g.key, &g.s, &b->plan, err);
        if (!rc && g.bias_in_lt && !b->plan->fallback) rc = set_bias_pointer(b->plan, b->bias, err);
        if (rc) {
            gemm_bound_release(b);
            return rc;
        }
    }
    c->prepared = b;
    c->fn = gemm_bound_call;
    return TR_OK;
}
