/* Private to the CUDA kernels: the context's CUDA state, the checks that turn a CUDA
 * status into an error naming the kernel, and the launchers the .cu files define.
 * C and C++ (nvcc) both include it.
 *
 * Launchers queue one kernel on the stream and return a status; they check nothing but
 * the launch itself (the C dispatcher, dispatch.c, checked the arguments). Pointers are
 * device pointers; dtypes are enum tr_dtype; element counts int64. Float data is f32,
 * bf16 or f16, computed in f32. */
#ifndef TRIDENT_CUDA_INTERNAL_H
#define TRIDENT_CUDA_INTERNAL_H

#include <stdint.h>
#include <cuda_runtime_api.h>
#include "trident/cuda_pool.h"
#include "trident/kernels.h"
#include "attention_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_cuda_plan_cache;
struct tr_cuda_side;

struct tr_cuda_ctx {
    int device;
    int sm;                       /* compute capability, 90 for sm_90 */
    int sms;                      /* streaming multiprocessors (the column reductions' grid split) */
    cudaStream_t stream;
    void *lt;                     /* cublasLtHandle_t, one for the stream */
    void *workspace;              /* cuBLASLt workspace (from the pool) */
    size_t workspace_size;
    struct tr_cuda_plan_cache *gemm_plans;
    struct tr_cuda_pool *pool;
    /* device scratch, grown by tr_cuda_scratch (stream-ordered: the old one is given back
     * to the pool on the same stream, so no kernel still queued can see it reused) */
    void *scratch;
    size_t scratch_size;
    /* a device word a kernel sets when its data is bad (an id out of range): read and
     * reported by tr_cuda_sync. Layout: [0] code (0 none), [1] position, [2] value, [3] bound */
    long long *flag;
    void *curand;                 /* curandGenerator_t (Philox) on the stream, for tr_k_random */
    /* Set while a bound call is checked at bind time (cuda/bind.c): the run paths make
     * every check and reserve their scratch, and TR_CU_LAUNCH queues nothing. The GEMMs'
     * math (TF32 or strict f32) is the struct tr_kernels' math (tr_kernels_set_math). */
    int dry;
    void *nccl;                   /* ncclComm_t, made at the first ALLREDUCE (collective.c) */
    struct tr_cuda_side *side;    /* ALLREDUCE_START's stream and events (collective.c) */
    void *cudnn;                  /* cudnnHandle_t, made at the first cuDNN convolution (conv.c) */
    struct tr_cuda_plan_cache *conv_plans; /* cuDNN's descriptors and algorithm per shape */
};

/* CONV2D and its gradients (conv.c): cuDNN or im2col into cuBLASLt (host/conv_plan.h). */
int tr_cuda_run_conv2d(struct tr_kernels *k, struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, int n_in,
                       const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
/* TRIDENT_CUDA_CONV checked when a context starts; the handle and plans freed at its end;
 * "conv cuDNN 9.19.0", "conv im2col (TRIDENT_CUDA_CONV)" or "conv im2col (no cuDNN)" for
 * the device's description (tr_cuda_describe; a report's gpu line). */
int tr_cuda_conv_start(struct tr_error *err);
void tr_cuda_conv_free(struct tr_cuda_ctx *c);
void tr_cuda_conv_describe(char *buf, size_t n);

/* ALLREDUCE (collective.c), and its NCCL communicator's end (at the context's). */
int tr_cuda_run_allreduce(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *x,
                          struct tr_tensor *out, struct tr_error *err);
void tr_cuda_nccl_free(struct tr_cuda_ctx *c);

/* A launch (or any other stream work) of a run path: skipped while the context is dry. */
#define TR_CU_LAUNCH(c, launch) ((c)->dry ? TR_OK : (launch))

/* Codes a kernel leaves in ctx->flag[0]. */
enum {
    TR_CU_FLAG_NONE = 0,
    TR_CU_FLAG_EMBEDDING_ID = 1,
    TR_CU_FLAG_LABEL = 2,
    TR_CU_FLAG_STEP = 3,
    TR_CU_FLAG_UPDATE_SLICE = 4 /* flag[1] n, [2] start, [3] the axis' extent */
};

/* "<what>: <CUDA error name>: <message> (file:line)" into err unless e is cudaSuccess. */
int tr_cu_status(cudaError_t e, const char *what, const char *file, int line, struct tr_error *err);
#define TR_CU_CHECK(call, what, err) tr_cu_status((call), (what), __FILE__, __LINE__, (err))
/* After a launch: the launch's own error (bad configuration, no kernel image for the device). */
#define TR_CU_LAUNCHED(kname, err) tr_cu_status(cudaGetLastError(), "kernel " kname " launch", __FILE__, __LINE__, (err))

/* At least n bytes of device scratch, valid until the next call. */
int tr_cuda_scratch(struct tr_cuda_ctx *c, size_t n, void **p, struct tr_error *err);

/* ---- GEMM (gemm.c; tr_cuda_matmul in host/cuda_entry.h) ---- */
void tr_cuda_gemm_release(void *plan);

/* ---- index spaces: up to 8 axes, an operand's element strides on each (0: broadcast) ---- */
struct tr_cu_index {
    int ndim;
    int64_t shape[TR_MAX_DIMS];
    int64_t stride[3][TR_MAX_DIMS]; /* [0] out (or destination), [1] first input, [2] second */
};

/* ---- elementwise.cu ---- */
/* y = op(x) (unary ops of ops.h; GELU approx 0/1; SCALE a·x+b); act applies an epilogue
 * activation instead when op < 0. */
int tr_cu_unary(cudaStream_t s, int op, int dtype, const void *x, void *y, int64_t n, float a, float b, int approx,
                struct tr_error *err);
/* out = a op b over idx (stride[1] for a, stride[2] for b; out contiguous). */
int tr_cu_binary(cudaStream_t s, int op, int dtype, const void *a, const void *b, void *out, const struct tr_cu_index *idx,
                 int64_t n, struct tr_error *err);
/* dst[idx·stride[0]] = src[idx·stride[1]] for elements of elem_size bytes (1, 2, 4, 8). */
int tr_cu_copy(cudaStream_t s, size_t elem_size, const void *src, void *dst, const struct tr_cu_index *idx, int64_t n,
               struct tr_error *err);
int tr_cu_cast(cudaStream_t s, const void *x, int xdt, void *y, int ydt, int64_t n, struct tr_error *err);
/* update_slice.cu: UPDATE_SLICE over (outer, dim, inner) elements of elem_size bytes (2, 4,
 * 8); update is (outer, n, inner); start one i32 in device memory, read by the kernel. In
 * place when out == x (only the slice written). A bad start writes no slice element and
 * is left in flag. */
int tr_cu_update_slice(cudaStream_t s, size_t elem_size, const void *x, const void *u, const int32_t *start, void *out,
                       int64_t outer, int64_t dim, int64_t n, int64_t inner, long long *flag, struct tr_error *err);
/* y = act(y + bias[col]) in place over rows of n columns (bias may be NULL; its dtype bdt). */
int tr_cu_bias_act(cudaStream_t s, int dtype, void *y, const void *bias, int bdt, int64_t rows, int64_t n, int act,
                   struct tr_error *err);
int tr_cu_fill_zero(cudaStream_t s, void *p, size_t nbytes, struct tr_error *err);

/* ---- rows.cu: kernels over rows of the last axis, and reductions ---- */
int tr_cu_softmax(cudaStream_t s, int dtype, const void *x, void *y, int64_t rows, int64_t n, struct tr_error *err);
int tr_cu_layer_norm(cudaStream_t s, int dtype, const void *x, const void *gamma, const void *beta, int gdt, void *y,
                     int64_t rows, int64_t n, float eps, struct tr_error *err);
/* SUM, MEAN, MAX over the middle axis of (outer, n, inner). inner > 1 is a column
 * reduction (tr_cu_colsum): partial holds tr_cuda_colsum_plan(outer, n, inner, sms)'s
 * scratch_bytes. */
int tr_cu_reduce(cudaStream_t s, int op, int dtype, const void *x, void *y, int64_t outer, int64_t n, int64_t inner,
                 int sms, float *partial, struct tr_error *err);
/* out (rows, D) = table[ids] ; a bad id zero-fills its row and is left in flag. */
int tr_cu_embedding(cudaStream_t s, int dtype, const void *table, const void *ids, int id_dtype, void *out, int64_t rows,
                    int64_t D, int64_t V, long long *flag, struct tr_error *err);
/* loss (one f32) = mean over labels not ignored of -log softmax(logits)[label]; scratch
 * holds rows floats + rows ints. */
int tr_cu_cross_entropy(cudaStream_t s, int dtype, const void *logits, const void *labels, int label_dtype,
                        int64_t rows, int64_t C, int has_ignore, long long ignore, float *loss, void *scratch,
                        long long *flag, struct tr_error *err);
int tr_cu_adamw(cudaStream_t s, int dtype, const void *param, const float *m, const float *v, const float *lr,
                const float *step, float b1, float b2, float eps, float wd, void *out, int64_t n, long long *flag,
                struct tr_error *err);
/* The moments from grad (f32 when grad_f32, else dtype) into mo and vo, then the step:
 * tr_k_adamw_update. */
int tr_cu_adamw_update(cudaStream_t s, int dtype, const void *param, const float *m, const float *v, const void *grad,
                       int grad_f32, const float *lr, const float *step, float b1, float b2, float eps, float wd,
                       void *out, float *mo, float *vo, int64_t n, long long *flag, struct tr_error *err);

/* ---- grads.cu: training kernels (the ops ops.h lists under "Training") ---- */
int tr_cu_unary_grad(cudaStream_t s, int op, int dtype, const void *x, const void *dy, void *dx, int64_t n, int approx,
                     float alpha, struct tr_error *err);
int tr_cu_softmax_grad(cudaStream_t s, int dtype, const void *y, const void *dy, void *dx, int64_t rows, int64_t n,
                       struct tr_error *err);
int tr_cu_layer_norm_grad(cudaStream_t s, int dtype, const void *x, const void *gamma, int gdt, const void *dy, void *dx,
                          int64_t rows, int64_t n, float eps, struct tr_error *err);
/* stats: 2·rows floats of scratch; partial: tr_cuda_colsum_plan(1, rows, n, sms)'s scratch_bytes */
int tr_cu_layer_norm_grad_gamma(cudaStream_t s, int dtype, const void *x, const void *dy, void *dgamma, int gdt,
                                int64_t rows, int64_t n, float eps, float *stats, int sms, float *partial,
                                struct tr_error *err);
/* acc: V·D floats of scratch (unused for f32) */
int tr_cu_embedding_grad(cudaStream_t s, int dtype, const void *ids, int id_dtype, const void *dy, void *dtable,
                         int64_t rows, int64_t D, int64_t V, float *acc, long long *flag, struct tr_error *err);
/* scratch: one float */
int tr_cu_cross_entropy_grad(cudaStream_t s, int dtype, const void *logits, const void *labels, int ldt,
                             const void *dloss, int ddt, int64_t rows, int64_t C, int has_ignore, long long ignore,
                             float *scratch, void *dx, long long *flag, struct tr_error *err);
int tr_cu_max_grad(cudaStream_t s, int dtype, const void *x, const void *dy, void *dx, int64_t outer, int64_t n,
                   int64_t inner, struct tr_error *err);
int tr_cu_mse(cudaStream_t s, int dtype, const void *pred, const void *target, int64_t n, float *out,
              struct tr_error *err);

/* ---- llm.cu: RMS_NORM (x, w), RMS_NORM_GRAD (x, w, dy), RMS_NORM_GRAD_W (x, dy; rstd:
 * rows floats of scratch, partial: tr_cuda_colsum_plan(1, rows, n, sms)'s scratch_bytes), ROPE ---- */
int tr_cu_rms_norm(cudaStream_t s, int op, int dtype, const void *x, const void *w, int wdt, const void *dy, void *out,
                   int odt, int64_t rows, int64_t n, float eps, int add_one, float *rstd, int sms, float *partial,
                   struct tr_error *err);
int tr_cu_rope(cudaStream_t s, int dtype, const void *x, const void *pos, int pdt, int pos_batched, void *out, int64_t B,
               int64_t H, int64_t Tn, int64_t D, int64_t R, float base, int inverse, struct tr_error *err);

/* ---- colsum.cu: column reductions split across the grid (host/colsum_plan.h) ----
 * out (outer, cols) of odt = Σ (or max) over rows of a term of x (outer, rows, cols) in
 * f32, in a fixed order (bitwise the same run after run on one GPU); partial holds
 * tr_cuda_colsum_plan(outer, rows, cols, sms)'s scratch_bytes (NULL when 0). */
enum tr_cu_colsum_term {
    TR_CU_COLSUM_X = 0,        /* x[r, j]; op SUM, MEAN or MAX */
    TR_CU_COLSUM_LN_GAMMA = 1, /* dy[r, j]·(x[r, j] − stats[2r])·stats[2r+1] (mean, rstd); SUM, outer 1 */
    TR_CU_COLSUM_RMS_W = 2     /* dy[r, j]·x[r, j]·stats[r] (rstd); SUM, outer 1 */
};
struct tr_cu_colsum {
    int term, op;              /* enum tr_cu_colsum_term; TR_OP_SUM, TR_OP_MEAN or TR_OP_MAX */
    int dtype;                 /* x's and dy's */
    const void *x, *dy;        /* dy NULL for TR_CU_COLSUM_X */
    const float *stats;
    void *out;
    int odt;
    int64_t outer, rows, cols;
};
int tr_cu_colsum(cudaStream_t s, const struct tr_cu_colsum *a, int sms, float *partial, struct tr_error *err);

/* ---- vision.cu: Stable Diffusion's ops ---- */
/* col [nb·OH·OW, Ci·KH·KW] of images n0 .. n0+nb of the NHWC x, zeros outside. */
int tr_cu_im2col(cudaStream_t s, int dtype, const void *x, void *col, int64_t n0, int64_t nb, int64_t H, int64_t W,
                 int64_t Ci, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride, int64_t pad, int64_t dil,
                 struct tr_error *err);
/* dx of images n0 .. n0+nb from dcol (= dy · W) [nb·OH·OW, Ci·KH·KW]: each element the sum
 * of the columns that read it. */
int tr_cu_col2im(cudaStream_t s, int dtype, const void *dcol, void *dx, int64_t n0, int64_t nb, int64_t H, int64_t W,
                 int64_t Ci, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride, int64_t pad, int64_t dil,
                 struct tr_error *err);
/* acc (f32) += src (= src when first); dst = acc in dtype. */
int tr_cu_accumulate(cudaStream_t s, int dtype, const void *src, float *acc, int64_t n, int first,
                     struct tr_error *err);
int tr_cu_from_f32(cudaStream_t s, int dtype, const float *acc, void *dst, int64_t n, struct tr_error *err);
/* GROUP_NORM_GRAD (x, gamma, dy) -> dx, or GROUP_NORM_GRAD_GAMMA (x, dy) -> dgamma [C] of
 * odt, through stats (2·N·G floats of scratch). */
int tr_cu_group_norm_grad(cudaStream_t s, int op, int dtype, const void *x, const void *gamma, int gdt, const void *dy,
                          void *out, int odt, float *stats, int64_t N, int64_t HW, int64_t C, int64_t G, float eps,
                          struct tr_error *err);
int tr_cu_group_norm(cudaStream_t s, int dtype, const void *x, const void *gamma, int gdt, const void *beta, int bdt,
                     void *y, int64_t N, int64_t HW, int64_t C, int64_t G, float eps, int silu, struct tr_error *err);
int tr_cu_timestep_embedding(cudaStream_t s, int dtype, const void *t, void *out, int64_t N, int64_t D, int flip,
                             double shift, double period, struct tr_error *err);

/* ---- fused.cu: the tf backend's fused kernels (cpu/fused.c's contract) ---- */
struct tr_cu_lead {
    int nl;                       /* out's leading axes (all but the last) */
    int64_t lead[TR_MAX_DIMS];    /* their extents */
};
#define TR_CU_ESLN_MAX 8 /* TR_CUDA_ESLN_MAX of host/cuda_entry.h */
struct tr_cu_esln {
    int n;                        /* tables */
    const void *tab[TR_CU_ESLN_MAX];
    const void *ids[TR_CU_ESLN_MAX];
    int is64[TR_CU_ESLN_MAX];
    int64_t V[TR_CU_ESLN_MAX];
    int64_t ist[TR_CU_ESLN_MAX][TR_MAX_DIMS]; /* ids' strides over out's leading axes */
};
/* y = LN(x + bias + res); bias, res, gamma, beta may be NULL (their dtypes then unread). */
int tr_cu_bias_residual_ln(cudaStream_t s, int dtype, const void *x, const void *bias, int bdt, const void *res,
                           const void *gamma, int gdt, const void *beta, int betadt, void *y, int64_t rows, int64_t n,
                           float eps, struct tr_error *err);
/* mi->stride[1][0..nl) the mask's strides over the leading axes, [nl] along the row (0/1). */
int tr_cu_scale_mask_softmax(cudaStream_t s, int dtype, const void *x, float scale, const void *mask, int mdt,
                             const struct tr_cu_lead *L, const struct tr_cu_index *mi, void *y, int64_t rows, int64_t n,
                             struct tr_error *err);
int tr_cu_embedding_sum_ln(cudaStream_t s, int dtype, const struct tr_cu_esln *E, const struct tr_cu_lead *L,
                           const void *gamma, int gdt, const void *beta, int betadt, void *y, int64_t rows, int64_t n,
                           float eps, long long *flag, struct tr_error *err);

/* ---- attention.cu ---- */
struct tr_cu_attn {
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    float scale;
    int causal, window;
    const void *mask;   /* additive, or NULL */
    int mask_dtype;
    int64_t mask_stride[4]; /* elements per step of b, h, i, j (0: broadcast) */
    /* ATTENTION_REL's bias terms (B,H,Tq,Kh), (B,H,Tq,Kw), Tk = Kh·Kw, or NULL */
    const void *rel_h, *rel_w;
    int rel_h_dtype, rel_w_dtype;
    int64_t Kh, Kw;
    /* the forwards' ATTENTION_LSE output (B,H,Tq) f32, or NULL; with it out may be NULL */
    float *lse;
};
int tr_cu_attention(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out,
                    const struct tr_cu_attn *p, struct tr_error *err);
/* The tensor-core kernels (attention_plan.h: pl from tr_attn_plan_make, its path TC and
 * its kind the launcher's; q, k, v, dy, out 16-byte aligned). lse and delta: B·H·Tq
 * floats each.
 * attention_tc.cu: the forward (kind FWD), and with the same kernel the backward's
 * statistics lse = log Σ exp(s) and delta = dy·out per query row (kind FWD). */
int tr_cu_attention_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out,
                       const struct tr_cu_attn *p, const struct tr_attn_plan *pl, struct tr_error *err);
int tr_cu_attention_stats_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, const void *dy,
                             const struct tr_cu_attn *p, const struct tr_attn_plan *pl, float *lse, float *delta,
                             struct tr_error *err);
/* attention_bwd_tc.cu: dk and dv in one launch (kind DKDV; either may be NULL), dq in
 * another (kind DQ), from the statistics. */
int tr_cu_attention_bwd_dkdv_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                const void *dy, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                                const float *lse, const float *delta, const float *ps, void *dk, void *dv,
                                struct tr_error *err);
int tr_cu_attention_bwd_dq_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, const void *dy,
                              const struct tr_cu_attn *p, const struct tr_attn_plan *pl, const float *lse,
                              const float *delta, const float *ps, void *dq, struct tr_error *err);
/* attention_bwd.cu, the CUDA-core backward: dq, dk and dv of one call (any NULL), from
 * the statistics lse, delta and ps (B·H·Tq floats each; P = exp(s - lse)·ps): computed
 * here once when ready is 0, read as they are when 1 (tr_cu_attention_split_lse's lse
 * and ps, tr_cu_attention_delta's delta). */
int tr_cu_attention_backward(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, const void *dy,
                             const struct tr_cu_attn *p, void *dq, void *dk, void *dv, float *lse, float *delta,
                             float *ps, int ready, struct tr_error *err);
/* A forward's lse_in (m + log l per row: ATTENTION_LSE's, or the tensor-core statistics')
 * as the backward reads it: lse and ps, where a row of huge scores (a sample of padding
 * alone) keeps m and 1/l apart. lse may be lse_in. */
int tr_cu_attention_split_lse(cudaStream_t s, int dtype, const void *q, const void *k, const struct tr_cu_attn *p,
                              const float *lse_in, float *lse, float *ps, struct tr_error *err);
/* delta[row] = dy[row] · y[row] over the rows of the forward's output y (rows x Dv): the
 * backward's second statistic, from the saved output instead of a pass over the keys. */
int tr_cu_attention_delta(cudaStream_t s, int dtype, const void *y, const void *dy, int64_t rows, int64_t Dv,
                          float *delta, struct tr_error *err);
/* dq, dk or dv (which 0, 1, 2), or with p->rel_h drel_h or drel_w (3, 4, in that
 * operand's dtype, Kh and Kw at most 256) into out; scratch holds 3·B·H·Tq floats (lse,
 * delta, ps). */
int tr_cu_attention_grad(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, const void *dy,
                         const struct tr_cu_attn *p, int which, void *out, float *scratch, struct tr_error *err);
/* ATTENTION_REL's gradients of one call (p->rel_h set; any of the five NULL): the row
 * statistics once into lse, delta and ps (B·H·Tq floats each; read as they are when
 * ready is 1: tr_cu_attention_split_lse's, tr_cu_attention_delta's), then dq, dk with dv, and each
 * bias term's from them, where one tr_cu_attention_grad per gradient recomputes them. */
int tr_cu_attention_rel_backward(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                 const void *dy, const struct tr_cu_attn *p, void *dq, void *dk, void *dv, void *drh,
                                 void *drw, float *lse, float *delta, float *ps, int ready, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
