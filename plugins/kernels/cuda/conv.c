/* CONV2D and its two gradients on cuda. Activations are NHWC end to end, weights torch's
 * (Cout, Cin, KH, KW). Two paths (host/conv_plan.h says which runs when):
 *
 * - cuDNN (where the library was built with it): one cudnnConvolutionForward,
 *   BackwardData or BackwardFilter call on NHWC descriptors, the algorithm from cuDNN's
 *   heuristic (as PyTorch without cudnn.benchmark), planned once per shape and kept in
 *   the context's conv plan cache. cuDNN's NHWC kernels want the filter KRSC (Cout, KH,
 *   KW, Cin): a KxK weight is copied so into the scratch before the call, and dW comes
 *   back so and is copied out (a 1x1 filter is the same either way). The bias is added
 *   after the convolution by the elementwise kernel.
 * - im2col: the columns of a chunk of images, then one cuBLASLt GEMM (out = col · Wᵀ +
 *   bias, W the (Cout, Cin·KH·KW) flattening of torch's layout, out's rows the NHWC
 *   pixels): the column buffer is at most 256 MiB, so SD's 26 images at 64x64 (1.2 GB of
 *   columns) take five. Its gradients on the same columns: dx = col2im(dy · W), dW = the
 *   sum over chunks of dyᵀ · col. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/conv_plan.h"
#include "host/cuda_entry.h"
#include "host/gemm_plan.h"
#ifdef TR_HAVE_CUDNN
#include <cudnn.h>
#endif

#define CONV_COL_BYTES ((size_t)256 << 20)
#define CONV_MAX_WORKSPACE ((size_t)512 << 20) /* the most scratch a cuDNN algorithm may ask */
#define CONV_PLANS 256

/* The geometry of op on its two operands (CONV2D: x, w; GRAD_INPUT: dy, w with H, W in
 * ints[5..6]; GRAD_WEIGHT: x, dy with KH, KW, Cout in ints[5..7]) and out, checked. */
static int conv_geom(int op, const struct tr_attrs *at, const struct tr_tensor *a, const struct tr_tensor *b,
                     const struct tr_tensor *out, struct tr_cuda_conv_shape *g, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    char d1[200], d2[200], d3[200];
    if (a->ndim != 4 || b->ndim != 4 || out->ndim != 4 || a->dtype != b->dtype || out->dtype != a->dtype)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s, %s and out %s should be 4-D of one dtype", kn,
                            tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(out, d3, sizeof d3));
    *g = (struct tr_cuda_conv_shape){.s = at->ints[0] ? at->ints[0] : 1, .p = at->ints[1],
                                     .dil = at->ints[2] ? at->ints[2] : 1, .pe = at->ints[4]};
    const int64_t groups = at->ints[3] ? at->ints[3] : 1;
    if (g->s < 1 || g->p < 0 || g->pe < 0 || g->dil < 1 || groups != 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: stride %lld, padding %lld+%lld, dilation %lld, groups %lld: "
                            "expected stride and dilation >= 1, padding >= 0, groups 1", kn, (long long)g->s,
                            (long long)g->p, (long long)g->pe, (long long)g->dil, (long long)groups);
    const struct tr_tensor *x = op == TR_OP_CONV2D_GRAD_INPUT ? out : a, *w = op == TR_OP_CONV2D_GRAD_WEIGHT ? out : b;
    const struct tr_tensor *y = op == TR_OP_CONV2D ? out : op == TR_OP_CONV2D_GRAD_INPUT ? a : b;
    g->N = x->shape[0], g->H = x->shape[1], g->W = x->shape[2], g->Ci = x->shape[3];
    g->Co = w->shape[0], g->KH = w->shape[2], g->KW = w->shape[3];
    g->OH = (g->H + 2 * g->p + g->pe - g->dil * (g->KH - 1) - 1) / g->s + 1;
    g->OW = (g->W + 2 * g->p + g->pe - g->dil * (g->KW - 1) - 1) / g->s + 1;
    const int ok = w->shape[1] == g->Ci && g->OH >= 1 && g->OW >= 1 && y->shape[0] == g->N && y->shape[1] == g->OH &&
                   y->shape[2] == g->OW && y->shape[3] == g->Co &&
                   (op != TR_OP_CONV2D_GRAD_INPUT || (at->ints[5] == g->H && at->ints[6] == g->W)) &&
                   (op != TR_OP_CONV2D_GRAD_WEIGHT || (at->ints[5] == g->KH && at->ints[6] == g->KW));
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x (N,H,W,Cin), w (Cout,Cin,KH,KW) and dy (N,OH,OW,Cout) do not fit "
                            "(%s, %s, out %s)", kn, tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2),
                            tr_cpu_desc(out, d3, sizeof d3));
    return TR_OK;
}

/* A 2-D device view [rows, cols] of like's dtype and device at data. */
static struct tr_tensor view2(const struct tr_tensor *like, void *data, int64_t rows, int64_t cols) {
    return (struct tr_tensor){.data = data, .dtype = like->dtype, .device = like->device,
                              .device_index = like->device_index, .ndim = 2, .shape = {rows, cols},
                              .strides = {cols, 1}};
}

/* One GEMM of a convolution: the convolution is the call, its GEMMs count as gemm_calls. */
static int conv_gemm(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_tensor *a, const struct tr_tensor *b,
                     struct tr_tensor *o, int ta, int tb, const struct tr_tensor *bias, const char *kn,
                     struct tr_error *err) {
    int rc = tr_cuda_matmul(k, a, b, o, ta, tb, 1.0f, bias, TR_ACT_NONE, err);
    if (rc) return tr_error_prefix(err, "%s", kn);
    if (!c->dry) k->stats.calls--;
    return TR_OK;
}

static int run_im2col(struct tr_kernels *k, struct tr_cuda_ctx *c, int op, const struct tr_cuda_conv_shape *gp,
                      const struct tr_tensor *in, const struct tr_tensor *bias, struct tr_tensor *out,
                      struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const struct tr_cuda_conv_shape g = *gp;
    const int64_t K = g.Ci * g.KH * g.KW, px = g.OH * g.OW;
    const size_t es = tr_dtype_size((enum tr_dtype)out->dtype), per_image = (size_t)(px * K) * es;
    int64_t nb = per_image ? (int64_t)(CONV_COL_BYTES / per_image) : g.N;
    nb = nb < 1 ? 1 : nb > g.N ? g.N : nb;
    const int chunks = (int)((g.N + nb - 1) / nb);
    /* scratch: the columns; for dW with several chunks also one chunk's dW and the f32 sum,
     * each of the first two rounded up to 256 bytes below (up to 255 more bytes each: 512) */
    const size_t col_bytes = (size_t)nb * per_image, dw_n = (size_t)(g.Co * K),
                 extra = op == TR_OP_CONV2D_GRAD_WEIGHT && chunks > 1 ? dw_n * es + dw_n * sizeof(float) + 512 : 0;
    char *scratch = NULL;
    int rc;
    if ((rc = tr_cuda_scratch(c, col_bytes + extra, (void **)&scratch, err)) != TR_OK) return rc;
    void *part = scratch + ((col_bytes + 255) / 256) * 256;
    float *acc = (float *)((char *)part + ((dw_n * es + 255) / 256) * 256);
    const struct tr_tensor *w = op == TR_OP_CONV2D_GRAD_WEIGHT ? out : &in[1];
    struct tr_tensor wk = view2(w, w->data, g.Co, K);
    for (int64_t n0 = 0, ci = 0; n0 < g.N; n0 += nb, ci++) {
        const int64_t m = n0 + nb <= g.N ? nb : g.N - n0;
        struct tr_tensor col = view2(out, scratch, m * px, K);
        if (op == TR_OP_CONV2D || op == TR_OP_CONV2D_GRAD_WEIGHT) {
            rc = TR_CU_LAUNCH(c, tr_cu_im2col(c->stream, out->dtype, in[0].data, scratch, n0, m, g.H, g.W, g.Ci, g.KH,
                                              g.KW, g.OH, g.OW, g.s, g.p, g.dil, err));
            if (rc) return rc;
        }
        if (op == TR_OP_CONV2D) {
            struct tr_tensor o = view2(out, (char *)out->data + (size_t)(n0 * px * g.Co) * es, m * px, g.Co);
            rc = conv_gemm(k, c, &col, &wk, &o, 0, 1, bias, kn, err);
        } else if (op == TR_OP_CONV2D_GRAD_INPUT) {
            struct tr_tensor dy = view2(out, (char *)in[0].data + (size_t)(n0 * px * g.Co) * es, m * px, g.Co);
            rc = conv_gemm(k, c, &dy, &wk, &col, 0, 0, NULL, kn, err);
            if (!rc)
                rc = TR_CU_LAUNCH(c, tr_cu_col2im(c->stream, out->dtype, scratch, (char *)out->data, n0, m, g.H, g.W,
                                                  g.Ci, g.KH, g.KW, g.OH, g.OW, g.s, g.p, g.dil, err));
        } else {
            struct tr_tensor dy = view2(out, (char *)in[1].data + (size_t)(n0 * px * g.Co) * es, m * px, g.Co);
            struct tr_tensor dw = chunks > 1 ? view2(out, part, g.Co, K) : wk;
            rc = conv_gemm(k, c, &dy, &col, &dw, 1, 0, NULL, kn, err);
            if (!rc && chunks > 1)
                rc = TR_CU_LAUNCH(c, tr_cu_accumulate(c->stream, out->dtype, part, acc, (int64_t)dw_n, ci == 0, err));
        }
        if (rc) return rc;
    }
    if (op == TR_OP_CONV2D_GRAD_WEIGHT && chunks > 1)
        return TR_CU_LAUNCH(c, tr_cu_from_f32(c->stream, out->dtype, acc, out->data, (int64_t)dw_n, err));
    return TR_OK;
}

#ifdef TR_HAVE_CUDNN

/* What a plan depends on (the shape as conv_geom checked it); zeroed before it is filled,
 * so keys compare with memcmp. */
struct conv_key {
    int32_t op, dtype, strict_f32, pad_;
    struct tr_cuda_conv_shape g;
};

/* A shape's cuDNN plan: its descriptors and algorithm, or use 0 (no algorithm fits:
 * im2col, every time, for this shape). */
struct conv_plan {
    int use;
    cudnnTensorDescriptor_t x, y; /* y: the output's for CONV2D, dy's for the gradients */
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int algo;
    size_t workspace;
};

static void plan_release(void *p) {
    struct conv_plan *q = p;
    if (!q) return;
    /* destroying a descriptor frees host memory; it has no failure to act on */
    if (q->x) (void)cudnnDestroyTensorDescriptor(q->x);
    if (q->y) (void)cudnnDestroyTensorDescriptor(q->y);
    if (q->w) (void)cudnnDestroyFilterDescriptor(q->w);
    if (q->conv) (void)cudnnDestroyConvolutionDescriptor(q->conv);
    free(q);
}

/* cuDNN's status as ours: its BAD_PARAM and NOT_SUPPORTED families (2000s, 3000s) are
 * TR_ERR_UNSUPPORTED, which a plan answers by im2col (plan_make). */
static int dnn_status(cudnnStatus_t s, const char *what, struct tr_error *err) {
    if (s == CUDNN_STATUS_SUCCESS) return TR_OK;
    const int code = s == CUDNN_STATUS_ALLOC_FAILED                ? TR_ERR_NOMEM
                     : (int)s / 1000 == 2 || (int)s / 1000 == 3 ? TR_ERR_UNSUPPORTED
                                                                 : TR_ERR_DEVICE;
    return tr_error_set(err, code, "cuDNN: %s: %s", what, cudnnGetErrorString(s));
}
#define DNN(call, what)                                                \
    do {                                                               \
        if ((rc = dnn_status((call), (what), err)) != TR_OK) goto out; \
    } while (0)

static cudnnDataType_t dnn_dtype(int dt) {
    return dt == TR_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : dt == TR_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

/* The heuristic's algorithms for the plan's op, as conv_plan.h reads them; the chosen
 * one's math type is set on the descriptor, as cuDNN's answer says it runs. */
#define CONV_ALGOS 16
#define READ_PERF(p, n)                                                                                     \
    for (int i = 0; i < (n) && i < CONV_ALGOS; i++) {                                                       \
        a[i] = (struct tr_cuda_conv_algo){(p)[i].status == CUDNN_STATUS_SUCCESS,                            \
                                          (p)[i].determinism == CUDNN_DETERMINISTIC,                        \
                                          (p)[i].mathType != CUDNN_FMA_MATH, (p)[i].memory};                \
        algo[i] = (int)(p)[i].algo;                                                                         \
        math[i] = (int)(p)[i].mathType;                                                                     \
    }
static int plan_pick(struct tr_cuda_ctx *c, int op, int strict_f32, struct conv_plan *q, struct tr_error *err) {
    cudnnHandle_t h = (cudnnHandle_t)c->cudnn;
    struct tr_cuda_conv_algo a[CONV_ALGOS];
    int algo[CONV_ALGOS], math[CONV_ALGOS], n = 0, rc = TR_OK;
    if (op == TR_OP_CONV2D) {
        cudnnConvolutionFwdAlgoPerf_t p[CONV_ALGOS];
        DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, q->x, q->w, q->conv, q->y, CONV_ALGOS, &n, p),
            "cudnnGetConvolutionForwardAlgorithm_v7");
        READ_PERF(p, n);
    } else if (op == TR_OP_CONV2D_GRAD_INPUT) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CONV_ALGOS];
        DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, q->w, q->y, q->conv, q->x, CONV_ALGOS, &n, p),
            "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        READ_PERF(p, n);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CONV_ALGOS];
        DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, q->x, q->y, q->conv, q->w, CONV_ALGOS, &n, p),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        READ_PERF(p, n);
    }
    const int i = tr_cuda_conv_pick(a, n < CONV_ALGOS ? n : CONV_ALGOS, strict_f32, CONV_MAX_WORKSPACE);
    q->use = i >= 0;
    if (i >= 0) {
        q->algo = algo[i];
        q->workspace = a[i].workspace;
        DNN(cudnnSetConvolutionMathType(q->conv, (cudnnMathType_t)math[i]), "cudnnSetConvolutionMathType");
    }
out:
    return rc;
}

static int plan_make(struct tr_cuda_ctx *c, const struct conv_key *key, struct conv_plan **out, struct tr_error *err) {
    struct conv_plan *q = calloc(1, sizeof *q);
    if (!q) return tr_error_set(err, TR_ERR_NOMEM, "cuda conv2d: no host memory for a cuDNN plan");
    const cudnnDataType_t dt = dnn_dtype(key->dtype);
    const struct tr_cuda_conv_shape *g = &key->g;
    int rc = TR_OK;
    DNN(cudnnCreateTensorDescriptor(&q->x), "cudnnCreateTensorDescriptor");
    DNN(cudnnCreateTensorDescriptor(&q->y), "cudnnCreateTensorDescriptor");
    DNN(cudnnCreateFilterDescriptor(&q->w), "cudnnCreateFilterDescriptor");
    DNN(cudnnCreateConvolutionDescriptor(&q->conv), "cudnnCreateConvolutionDescriptor");
    /* dims in cuDNN's logical order (N, C, H, W; K, C, R, S), laid out NHWC and KRSC */
    DNN(cudnnSetTensor4dDescriptor(q->x, CUDNN_TENSOR_NHWC, dt, (int)g->N, (int)g->Ci, (int)g->H, (int)g->W),
        "cudnnSetTensor4dDescriptor (x)");
    DNN(cudnnSetTensor4dDescriptor(q->y, CUDNN_TENSOR_NHWC, dt, (int)g->N, (int)g->Co, (int)g->OH, (int)g->OW),
        "cudnnSetTensor4dDescriptor (y)");
    DNN(cudnnSetFilter4dDescriptor(q->w, dt, CUDNN_TENSOR_NHWC, (int)g->Co, (int)g->Ci, (int)g->KH, (int)g->KW),
        "cudnnSetFilter4dDescriptor");
    DNN(cudnnSetConvolution2dDescriptor(q->conv, (int)g->p, (int)g->p, (int)g->s, (int)g->s, (int)g->dil, (int)g->dil,
                                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        "cudnnSetConvolution2dDescriptor");
    /* the math asked before the heuristic is (as PyTorch does): FMA alone under strict f32,
     * TF32 allowed under tf32, tensor cores for bf16 and f16 */
    DNN(cudnnSetConvolutionMathType(q->conv, key->strict_f32            ? CUDNN_FMA_MATH
                                             : dt == CUDNN_DATA_FLOAT ? CUDNN_DEFAULT_MATH
                                                                      : CUDNN_TENSOR_OP_MATH),
        "cudnnSetConvolutionMathType");
    rc = plan_pick(c, key->op, key->strict_f32, q, err);
out:
    if (rc == TR_ERR_UNSUPPORTED) {
        /* cuDNN refused the problem itself: im2col runs this shape, said once a process
         * (the route counts tell a test) rather than a run stopped on a path with a twin */
        static atomic_int said;
        if (!atomic_exchange(&said, 1))
            fprintf(stderr, "trident: cuda %s (%lld,%lld,%lld,%lld) by %lldx%lld to %lld: %s; im2col runs it "
                            "(said once)\n", tr_op_name(key->op), (long long)g->N, (long long)g->H,
                    (long long)g->W, (long long)g->Ci, (long long)g->KH, (long long)g->KW, (long long)g->Co,
                    err ? err->msg : "refused");
        q->use = 0;
        rc = TR_OK;
    }
    if (rc) {
        plan_release(q);
        return tr_error_prefix(err, "cuda %s", tr_op_name(key->op));
    }
    *out = q;
    return TR_OK;
}

/* The weight between torch's (Cout, Cin, KH, KW) and cuDNN's KRSC (Cout, KH, KW, Cin):
 * to_krsc copies src (torch's) to dst (KRSC), else src (KRSC) to dst (torch's). */
static int filter_copy(struct tr_cuda_ctx *c, const struct tr_cuda_conv_shape *g, size_t es, const void *src, void *dst,
                       int to_krsc, struct tr_error *err) {
    struct tr_cu_index idx = {.ndim = 4, .shape = {g->Co, g->KH, g->KW, g->Ci}};
    const int64_t krsc[4] = {g->KH * g->KW * g->Ci, g->KW * g->Ci, g->Ci, 1}, kcrs[4] = {g->Ci * g->KH * g->KW, g->KW, 1,
                                                                                         g->KH * g->KW};
    for (int i = 0; i < 4; i++) {
        idx.stride[0][i] = to_krsc ? krsc[i] : kcrs[i];
        idx.stride[1][i] = to_krsc ? kcrs[i] : krsc[i];
    }
    return TR_CU_LAUNCH(c, tr_cu_copy(c->stream, es, src, dst, &idx, g->Co * g->KH * g->KW * g->Ci, err));
}

/* The cuDNN path; *ran 0 when this shape has no algorithm (or no handle can be made now),
 * and the caller takes im2col. */
static int run_cudnn(struct tr_kernels *k, struct tr_cuda_ctx *c, int op, const struct tr_cuda_conv_shape *g,
                     const struct tr_tensor *in, const struct tr_tensor *bias, struct tr_tensor *out, int *ran,
                     struct tr_error *err) {
    *ran = 0;
    int rc = TR_OK;
    if (!c->cudnn) {
        /* cudnnCreate allocates device memory, which a capture does not allow; bound calls
         * are checked (dry) before any capture, so this is a direct call inside one */
        enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(c->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) return TR_OK;
        cudnnHandle_t h = NULL;
        if ((rc = dnn_status(cudnnCreate(&h), "cudnnCreate", err)) != TR_OK) return rc;
        c->cudnn = h;
    }
    if (!c->conv_plans && (rc = tr_cuda_plan_cache_init(&c->conv_plans, CONV_PLANS, plan_release, err)) != TR_OK)
        return rc;
    struct conv_key key;
    memset(&key, 0, sizeof key);
    key.op = op, key.dtype = out->dtype, key.strict_f32 = out->dtype == TR_DTYPE_F32 && k->math != TR_MATH_TF32;
    key.g = *g;
    struct conv_plan *q = tr_cuda_plan_cache_get(c->conv_plans, &key, sizeof key);
    if (!q) {
        if ((rc = plan_make(c, &key, &q, err)) != TR_OK) return rc;
        if ((rc = tr_cuda_plan_cache_put(c->conv_plans, &key, sizeof key, q, err)) != TR_OK) return rc;
    }
    if (!q->use) return TR_OK;
    /* scratch: the KRSC filter (x or dW; none for 1x1), then the algorithm's workspace */
    const size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
    const int krsc = g->KH * g->KW > 1;
    const size_t fbytes = krsc ? ((size_t)(g->Co * g->Ci * g->KH * g->KW) * es + 255) / 256 * 256 : 0;
    char *scratch = NULL;
    if ((rc = tr_cuda_scratch(c, fbytes + q->workspace, (void **)&scratch, err)) != TR_OK) return rc;
    *ran = 1;
    if (c->dry) return TR_OK;
    void *ws = q->workspace ? scratch + fbytes : NULL;
    const struct tr_tensor *w = op == TR_OP_CONV2D_GRAD_WEIGHT ? out : &in[1];
    void *wk = krsc ? scratch : w->data;
    cudnnHandle_t h = (cudnnHandle_t)c->cudnn;
    const float one = 1.0f, zero = 0.0f;
    DNN(cudnnSetStream(h, c->stream), "cudnnSetStream");
    if (krsc && op != TR_OP_CONV2D_GRAD_WEIGHT && (rc = filter_copy(c, g, es, w->data, wk, 1, err)) != TR_OK) goto out;
    if (op == TR_OP_CONV2D) {
        DNN(cudnnConvolutionForward(h, &one, q->x, in[0].data, q->w, wk, q->conv, (cudnnConvolutionFwdAlgo_t)q->algo, ws,
                                    q->workspace, &zero, q->y, out->data),
            "cudnnConvolutionForward");
        if (bias)
            rc = tr_cu_bias_act(c->stream, out->dtype, out->data, bias->data, bias->dtype, g->N * g->OH * g->OW, g->Co,
                                TR_ACT_NONE, err);
    } else if (op == TR_OP_CONV2D_GRAD_INPUT) {
        DNN(cudnnConvolutionBackwardData(h, &one, q->w, wk, q->y, in[0].data, q->conv,
                                         (cudnnConvolutionBwdDataAlgo_t)q->algo, ws, q->workspace, &zero, q->x, out->data),
            "cudnnConvolutionBackwardData");
    } else {
        DNN(cudnnConvolutionBackwardFilter(h, &one, q->x, in[0].data, q->y, in[1].data, q->conv,
                                           (cudnnConvolutionBwdFilterAlgo_t)q->algo, ws, q->workspace, &zero, q->w, wk),
            "cudnnConvolutionBackwardFilter");
        if (krsc) rc = filter_copy(c, g, es, wk, out->data, 0, err);
    }
out:
    return rc ? tr_error_prefix(err, "cuda %s", tr_op_name(op)) : TR_OK;
}

void tr_cuda_conv_free(struct tr_cuda_ctx *c) {
    tr_cuda_plan_cache_free(c->conv_plans); /* the descriptors before their handle */
    c->conv_plans = NULL;
    if (c->cudnn) (void)cudnnDestroy((cudnnHandle_t)c->cudnn);
    c->cudnn = NULL;
}

void tr_cuda_conv_describe(char *buf, size_t n) {
    const size_t v = cudnnGetVersion();
    if (tr_cuda_conv_mode_get() == TR_CUDA_CONV_IM2COL) snprintf(buf, n, "conv im2col (TRIDENT_CUDA_CONV)");
    else snprintf(buf, n, "conv cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
}
#else
void tr_cuda_conv_free(struct tr_cuda_ctx *c) { (void)c; }
void tr_cuda_conv_describe(char *buf, size_t n) { snprintf(buf, n, "conv im2col (no cuDNN)"); }
#endif

int tr_cuda_conv_start(struct tr_error *err) {
    enum tr_cuda_conv_mode m;
    return tr_cuda_conv_mode_parse(getenv("TRIDENT_CUDA_CONV"), tr_cuda_conv_cudnn_built(), &m, err);
}

int tr_cuda_run_conv2d(struct tr_kernels *k, struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, int n_in,
                       const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const struct tr_tensor *bias = op == TR_OP_CONV2D && n_in == 3 ? &in[2] : NULL;
    int rc = tr_cpu_check_float_on(&in[0], TR_DEVICE_CUDA, kn, "the first input", err);
    if (!rc) rc = tr_cpu_check_float_on(&in[1], TR_DEVICE_CUDA, kn, "the second input", err);
    if (!rc) rc = tr_cpu_check_float_on(out, TR_DEVICE_CUDA, kn, "out", err);
    if (!rc && bias) rc = tr_cpu_check_float_on(bias, TR_DEVICE_CUDA, kn, "bias", err);
    struct tr_cuda_conv_shape g = {0};
    if (!rc) rc = conv_geom(op, at, &in[0], &in[1], out, &g, err);
    if (rc) return rc;
    char d1[200];
    if (bias && (tr_tensor_numel(bias) != g.Co || (bias->dtype != in[0].dtype && bias->dtype != TR_DTYPE_F32)))
        return tr_error_set(err, TR_ERR_SHAPE, "conv2d: bias %s should be [%lld] of x's dtype or f32",
                            tr_cpu_desc(bias, d1, sizeof d1), (long long)g.Co);
    if (tr_tensor_numel(out) == 0) return TR_OK;
    /* dW over no images (N 0, the only empty input left here): the empty sum, zeros, as the
     * cpu's; the chunk loop below would run no chunk and leave dW unwritten */
    if (g.N == 0) return TR_CU_LAUNCH(c, tr_cu_fill_zero(c->stream, out->data, tr_tensor_nbytes(out), err));
    const char *why;
    if (tr_cuda_conv_use_cudnn(tr_cuda_conv_mode_get(), tr_cuda_conv_cudnn_built(), &g, &why)) {
#ifdef TR_HAVE_CUDNN
        int ran = 0;
        if ((rc = run_cudnn(k, c, op, &g, in, bias, out, &ran, err)) != TR_OK) return rc;
        if (ran) {
            if (!c->dry) tr_cuda_conv_route_note(1);
            return TR_OK;
        }
#endif
    }
    if (!c->dry) tr_cuda_conv_route_note(0);
    return run_im2col(k, c, op, &g, in, bias, out, err);
}
