/* The attention backward on the cpu (ATTENTION_GRAD and the fused attention_backward of
 * kernels.h), flash-style: per block of queries the row statistics once, then dq, and per
 * block of keys dk and dv, never a [T, T] matrix. f64 data computes in f64 (the
 * finite-difference checks, as grad.c); f32, bf16 and f16 data in f32, with the f32
 * accumulation kernels.h promises: the attention backward is most of a training step's
 * kernel time on the cpu, and f32 lanes are twice f64's. One copy of the code for both
 * (attention_grad_impl.h); split from grad.c. */
#include <stdlib.h>
#include "grad_internal.h"

#define load_f64 tr_grad_load
#define store_f64 tr_grad_store
#define get_f64 tr_grad_get
#define check_real tr_grad_check_real

static inline size_t esize(int dt) { return tr_dtype_size((enum tr_dtype)dt); }

/* ---- attention_grad: flash-style backward ----
 * Nothing of size (Tq,Tk) is stored. A first pass per (batch, head, query block) visits
 * the keys block by block with an online softmax, as the forward does, and keeps per
 * query row only lse = log Σ_j exp(s_ij) and delta = dy_i · out_i (out rebuilt on the
 * way). With P_ij = exp(s_ij − lse_i), dP_ij = dy_i · v_j and dS = P ⊙ (dP − delta):
 *   dq_i = scale · Σ_j dS_ij k_j     work item (b, h, query block), keys visited in blocks
 *   dk_j = scale · Σ_i dS_ij q_i     work item (b, kv head, key block): the sums run over
 *   dv_j = Σ_i P_ij dy_i             every query head of the group and every query that
 *                                    sees the block, inside one thread
 * A row that sees no key has lse = +inf, so its P, and every gradient through it, is 0
 * (the forward gives it zeros). Visibility is the forward's (attention.c).
 * A row whose scores are huge (every key under a finite mask such as -1e9 or finfo.min:
 * a sample of padding alone) keeps its max m and 1/l apart, P = exp(s - m) / l: there
 * m + log(l) rounds to m (log Tk is below the float's spacing), and exp(s - lse) would
 * be 1 for every key instead of 1/Tk. The forward's saved lse cannot say l, so such a
 * row's block is recomputed. */

#define AG_BQ 32
#define AG_BK 32

struct agrad_args {
    const char *q, *k, *v, *dy, *mask;
    struct tr_cpu_rel_bias rel; /* ATTENTION_REL's bias terms (rel.h NULL: none) */
    int dt, mdt;
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    int64_t ms[4];
    double scale;
    int causal, window;
    /* (B,H,Tq), of the compute's type (attention_grad_impl.h): P = exp(s - lse) * pscale,
     * lse = m + log(l) and pscale 1, or for a row of huge scores m and 1 / l */
    void *lse, *delta, *pscale;
};

static inline void ag_key_range(const struct agrad_args *A, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t pos = i + (A->Tk - A->Tq);
    *hi = (A->causal || A->window > 0) ? pos : A->Tk - 1;
    *lo = A->window > 0 ? pos - A->window + 1 : 0;
    if (*hi > A->Tk - 1) *hi = A->Tk - 1;
    if (*lo < 0) *lo = 0;
}

/* Queries [ilo, ihi] that may see some key of [j0, j1] (empty when ilo > ihi). */
static inline void ag_query_range(const struct agrad_args *A, int64_t j0, int64_t j1, int64_t *ilo, int64_t *ihi) {
    int64_t off = A->Tk - A->Tq;
    *ilo = (A->causal || A->window > 0) ? j0 - off : 0;
    *ihi = A->window > 0 ? j1 - off + A->window - 1 : A->Tq - 1;
    if (*ilo < 0) *ilo = 0;
    if (*ihi > A->Tq - 1) *ihi = A->Tq - 1;
}

/* ---- the f32 copy's products on register tiles ----
 * The two products of the backward, S = A·Bt (scores, dY·Vᵀ) and acc += coef·rows (dq,
 * dk, dv), written as loops over arrays o0[AG_BK]..o3[AG_BK] left GCC holding part of
 * the accumulators on the stack (a load and a store beside each FMA): the backward ran
 * at about half the forward's rate per product (BERT small's [8,4,128,64] on one thread:
 * 15 ms for its 7 products, the forward 2.4 ms for 2). The f32 copy runs them on the
 * forward's vector tiles (attention_tiles.h, at this file's key block) and on the
 * accumulate tiles below, every accumulator a named vector local (8.8 ms, the forward's
 * rate); each output still sums in the same order, so the results are the same bits. */
#define BK AG_BK /* attention_tiles.h's column count: its 64-wide scores4/scores1 are not for this */
#include "attention_tiles.h"
DEF_SCORES_NARROW(v16) /* scores4_v16: 4 rows x 2 v16, one AG_BK = 32 chunk */

/* out[r][0..AG_BK) = A_r · Bt for nq rows of A [nq][W], Bt [W][AG_BK]. */
DEF_SCORES_ROWS(ag_rows_by_t_tiled, scores4_v16, scores1_v8)

/* a[x][0..NV·L) += Σ_y g(x,y)·rows[y][0..NV·L) for the four x (a rows W apart), with
 * g(x,y) = f·coef[x·cs + y·ys]; a y whose four coefficients are 0 (masked, invisible,
 * past the block) is skipped, as the f64 copy does. NV = 2 vectors (8 accumulators: AVX2
 * and the baseline have 16 registers) or 4 (16 of AVX-512's 32). */
#define AG_ACC_G                                                                                   \
    const float *cf = coef + y * ys;                                                               \
    const float g0 = cf[0] * f, g1 = cf[cs] * f, g2 = cf[2 * cs] * f, g3 = cf[3 * cs] * f;         \
    if (g0 == 0.0f && g1 == 0.0f && g2 == 0.0f && g3 == 0.0f) continue;                            \
    const float *src = rows + y * W;
#define DEF_AG_ACC2(VT)                                                                            \
    TILE_INLINE void ag_acc2_##VT(const float *restrict coef, int64_t cs, int64_t ys, int64_t ny,  \
                                  float f, const float *restrict rows, int64_t W, float *restrict a) { \
        enum { L = sizeof(VT) / sizeof(float) };                                                   \
        VT c00 = ld_##VT(a), c01 = ld_##VT(a + L), c10 = ld_##VT(a + W), c11 = ld_##VT(a + W + L); \
        VT c20 = ld_##VT(a + 2 * W), c21 = ld_##VT(a + 2 * W + L);                                 \
        VT c30 = ld_##VT(a + 3 * W), c31 = ld_##VT(a + 3 * W + L);                                 \
        for (int64_t y = 0; y < ny; y++) {                                                         \
            AG_ACC_G                                                                               \
            const VT r0 = ld_##VT(src), r1 = ld_##VT(src + L);                                     \
            c00 += g0 * r0, c01 += g0 * r1, c10 += g1 * r0, c11 += g1 * r1;                        \
            c20 += g2 * r0, c21 += g2 * r1, c30 += g3 * r0, c31 += g3 * r1;                        \
        }                                                                                          \
        st_##VT(a, c00), st_##VT(a + L, c01), st_##VT(a + W, c10), st_##VT(a + W + L, c11);        \
        st_##VT(a + 2 * W, c20), st_##VT(a + 2 * W + L, c21);                                      \
        st_##VT(a + 3 * W, c30), st_##VT(a + 3 * W + L, c31);                                      \
    }
DEF_AG_ACC2(v4)
DEF_AG_ACC2(v8)
DEF_AG_ACC2(v16)

TILE_INLINE void ag_acc4_v16(const float *restrict coef, int64_t cs, int64_t ys, int64_t ny, float f,
                             const float *restrict rows, int64_t W, float *restrict a) {
    v16 c00 = ld16(a), c01 = ld16(a + 16), c02 = ld16(a + 32), c03 = ld16(a + 48);
    v16 c10 = ld16(a + W), c11 = ld16(a + W + 16), c12 = ld16(a + W + 32), c13 = ld16(a + W + 48);
    v16 c20 = ld16(a + 2 * W), c21 = ld16(a + 2 * W + 16), c22 = ld16(a + 2 * W + 32), c23 = ld16(a + 2 * W + 48);
    v16 c30 = ld16(a + 3 * W), c31 = ld16(a + 3 * W + 16), c32 = ld16(a + 3 * W + 32), c33 = ld16(a + 3 * W + 48);
    for (int64_t y = 0; y < ny; y++) {
        AG_ACC_G
        const v16 r0 = ld16(src), r1 = ld16(src + 16), r2 = ld16(src + 32), r3 = ld16(src + 48);
        c00 += g0 * r0, c01 += g0 * r1, c02 += g0 * r2, c03 += g0 * r3;
        c10 += g1 * r0, c11 += g1 * r1, c12 += g1 * r2, c13 += g1 * r3;
        c20 += g2 * r0, c21 += g2 * r1, c22 += g2 * r2, c23 += g2 * r3;
        c30 += g3 * r0, c31 += g3 * r1, c32 += g3 * r2, c33 += g3 * r3;
    }
    st16(a, c00), st16(a + 16, c01), st16(a + 32, c02), st16(a + 48, c03);
    st16(a + W, c10), st16(a + W + 16, c11), st16(a + W + 32, c12), st16(a + W + 48, c13);
    st16(a + 2 * W, c20), st16(a + 2 * W + 16, c21), st16(a + 2 * W + 32, c22), st16(a + 2 * W + 48, c23);
    st16(a + 3 * W, c30), st16(a + 3 * W + 16, c31), st16(a + 3 * W + 32, c32), st16(a + 3 * W + 48, c33);
}

/* acc[x][0..W) += f·Σ over y of coef(x,y)·rows[y][0..W), coef read at coef[x*cs + y*ys]
 * (attention_grad_impl.h's ag_accum), for the x in fours: column chunks of the widest
 * tile that fits, then the columns left one at a time. Returns the x done; ag_accum's
 * one-row loop takes the rest. */
TILE_INLINE int64_t ag_accum_tiled(int isa, const float *restrict coef, int64_t nx, int64_t ny, int64_t cs,
                                int64_t ys, float f, const float *restrict rows, int64_t W, float *restrict acc) {
    int64_t x = 0;
    for (; x + 4 <= nx; x += 4) {
        const float *c = coef + x * cs;
        float *a = acc + x * W;
        int64_t d0 = 0;
        if (isa == TR_CPU_ISA_AVX512) {
            for (; d0 + 64 <= W; d0 += 64) ag_acc4_v16(c, cs, ys, ny, f, rows + d0, W, a + d0);
            for (; d0 + 32 <= W; d0 += 32) ag_acc2_v16(c, cs, ys, ny, f, rows + d0, W, a + d0);
        } else if (isa == TR_CPU_ISA_AVX2) {
            for (; d0 + 16 <= W; d0 += 16) ag_acc2_v8(c, cs, ys, ny, f, rows + d0, W, a + d0);
        }
        for (; d0 + 8 <= W; d0 += 8) ag_acc2_v4(c, cs, ys, ny, f, rows + d0, W, a + d0);
        for (; d0 < W; d0++)
            for (int64_t k = 0; k < 4; k++) {
                float s = a[k * W + d0];
                for (int64_t y = 0; y < ny; y++) {
                    const float g = c[k * cs + y * ys] * f;
                    if (g != 0.0f) s += g * rows[y * W + d0];
                }
                a[k * W + d0] = s;
            }
    }
    return x;
}
#undef AG_ACC_G

#define AG_T double
#define AG_DT TR_DTYPE_F64
#define AG_(name) name##_f64
#define AG_LOAD tr_grad_load
#define AG_STORE tr_grad_store
#define AG_EXP tr_grad_exp
#define AG_LOG log
#include "attention_grad_impl.h"
#undef AG_T
#undef AG_DT
#undef AG_
#undef AG_LOAD
#undef AG_STORE
#undef AG_EXP
#undef AG_LOG
#define AG_T float
#define AG_DT TR_DTYPE_F32
#define AG_TILES /* the products on the tiles above */
#define AG_(name) name##_f32
#define AG_LOAD tr_cpu_load_f32
#define AG_STORE tr_cpu_store_f32
#define AG_EXP tr_fexp
#define AG_LOG logf
#include "attention_grad_impl.h"

/* The gradients asked for (outs[0..4]: dq, dk, dv, and with rel (ATTENTION_REL's
 * rel_h, rel_w) drel_h, drel_w; NULL: not wanted): one statistics pass, then one pass
 * over the query blocks (dq and the bias terms') and one for dk and dv together. With
 * saved (the forward's y and lse; NULL: none) the statistics pass is lse read and
 * delta = dy·y, a pass over the rows instead of over every score. */
static int attention_backward(struct tr_kernels *k, const char *kn, const struct tr_tensor *q,
                              const struct tr_tensor *kk, const struct tr_tensor *v, const struct tr_tensor *dy,
                              const struct tr_tensor *mask, const struct tr_tensor *rel,
                              const struct tr_tensor *const saved[2], float scale, int causal, int window,
                              struct tr_tensor *const outs[5], struct tr_error *err);
static int check_saved(const char *kn, int device, const struct tr_tensor *dy, const struct tr_tensor *const saved[2],
                       struct tr_error *err);

int tr_k_attention_grad(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                        const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                        float scale, int causal, int window, int which, struct tr_tensor *out, struct tr_error *err) {
    if (q) scale = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0); /* 0: 1/sqrt(D), as the op's */
    TR_CUDA_ROUTE(k, tr_cuda_k_attention_grad(k, q, kk, v, dy, mask, scale, causal, window, which, out, err));
    if (which < 0 || which > 2)
        return tr_error_set(err, TR_ERR_INVALID, "attention_grad: ints[2]=%d should be 0 (dq), 1 (dk) or 2 (dv)",
                            which);
    struct tr_tensor *outs[5] = {NULL, NULL, NULL, NULL, NULL};
    outs[which] = out;
    return attention_backward(k, "attention_grad", q, kk, v, dy, mask, NULL, NULL, scale, causal, window, outs, err);
}

int tr_cpu_attention_grad_saved(struct tr_kernels *k, const struct tr_tensor *in, int n_in, float scale, int causal,
                                int window, int which, struct tr_tensor *out, struct tr_error *err) {
    const int masked = n_in == 5 || n_in == 7;
    const struct tr_tensor *saved[2] = {&in[n_in - 2], &in[n_in - 1]};
    struct tr_tensor *outs[5] = {NULL, NULL, NULL, NULL, NULL};
    if (which < 0 || which > 2 || n_in < 6)
        return tr_error_set(err, TR_ERR_INVALID, "attention_grad: operand %d of %d inputs (6 or 7 with the saved y "
                            "and lse)", which, n_in);
    outs[which] = out;
    return attention_backward(k, "attention_grad", &in[0], &in[1], &in[2], &in[3], masked ? &in[4] : NULL, NULL,
                              saved, scale, causal, window, outs, err);
}

int tr_k_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                            const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                            const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                            int window, struct tr_tensor *dq, struct tr_tensor *dk, struct tr_tensor *dv,
                            struct tr_error *err) {
    if (q) scale = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    TR_CUDA_ROUTE(k, tr_cuda_k_attention_backward(k, q, kk, v, dy, mask, y, lse, scale, causal, window, dq, dk, dv,
                                                  err));
    if (!y != !lse) return tr_error_set(err, TR_ERR_INVALID, "attention_backward: y and lse come together or not at all");
    struct tr_tensor *outs[5] = {dq, dk, dv, NULL, NULL};
    const struct tr_tensor *saved[2] = {y, lse};
    return attention_backward(k, "attention_backward", q, kk, v, dy, mask, NULL, y ? saved : NULL, scale, causal,
                              window, outs, err);
}

int tr_cpu_attention_rel_grad_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                                     const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op;
    static const char kn[] = "attention_rel_grad";
    if (n_in != 6 && n_in != 8)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 6 (q, k, v, rel_h, rel_w, dy) or 8 (and the "
                            "forward's y and lse) expected", kn, n_in);
    const int64_t which = at->ints[0];
    if (which < 0 || which > 4)
        return tr_error_set(err, TR_ERR_INVALID, "%s: ints[0]=%lld should be 0 (dq), 1 (dk), 2 (dv), 3 (drel_h) or "
                            "4 (drel_w)", kn, (long long)which);
    struct tr_tensor *outs[5] = {NULL, NULL, NULL, NULL, NULL};
    outs[which] = out;
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    const struct tr_tensor *saved[2] = {&in[6], &in[7]};
    return attention_backward(k, kn, &in[0], &in[1], &in[2], &in[5], NULL, &in[3], n_in == 8 ? saved : NULL, scale, 0,
                              0, outs, err);
}

int tr_k_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6], const struct tr_tensor *y,
                                const struct tr_tensor *lse, float scale, struct tr_tensor *const grads[5],
                                struct tr_error *err) {
    static const char kn[] = "attention_rel_backward";
    if (!in || !grads || (!grads[0] && !grads[1] && !grads[2] && !grads[3] && !grads[4]))
        return tr_error_set(err, TR_ERR_INVALID, "%s: NULL operands, or no gradient asked for", kn);
    if (!y != !lse) return tr_error_set(err, TR_ERR_INVALID, "%s: y and lse come together or not at all", kn);
    TR_CUDA_ROUTE(k, tr_cuda_k_attention_rel_backward(k, in, y, lse, scale, grads, err));
    float s = tr_attention_scale(scale, in[0].ndim == 4 ? in[0].shape[3] : 0);
    const struct tr_tensor *saved[2] = {y, lse};
    return attention_backward(k, kn, &in[0], &in[1], &in[2], &in[5], NULL, &in[3], y ? saved : NULL, s, 0, 0, grads,
                              err);
}

/* The bound form's plan: the operands, the saved statistics if any, and the gradients
 * asked for. */
struct rel_bwd_plan {
    struct tr_cpu_prepared hdr;
    struct tr_tensor in[6], y, lse, g[5];
    int want[5], saved;
    float scale;
};

static int bound_attention_rel_backward(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct rel_bwd_plan *pl = c->prepared;
    struct tr_tensor g[5], *gp[5];
    for (int w = 0; w < 5; w++) {
        g[w] = pl->g[w];
        gp[w] = pl->want[w] ? &g[w] : NULL;
    }
    return tr_k_attention_rel_backward(k, pl->in, pl->saved ? &pl->y : NULL, pl->saved ? &pl->lse : NULL, pl->scale,
                                       gp, err);
}

int tr_kernels_bind_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6],
                                           const struct tr_tensor *y, const struct tr_tensor *lse, float scale,
                                           const struct tr_tensor *const grads[5], struct tr_kernel_call *call,
                                           struct tr_error *err) {
    static const char kn[] = "attention_rel_backward";
    if (!call || !in || !grads || !y != !lse)
        return tr_error_set(err, TR_ERR_INVALID, "%s: NULL argument, or y without lse", kn);
    memset(call, 0, sizeof *call);
    struct rel_bwd_plan pl = {.scale = scale, .saved = y != NULL};
    if (y) {
        pl.y = *y;
        pl.lse = *lse;
    }
    int n = 0;
    for (int i = 0; i < 6; i++) pl.in[i] = in[i];
    for (int w = 0; w < 5; w++)
        if (grads[w]) {
            pl.g[w] = *grads[w];
            pl.want[w] = 1;
            if (!n++) call->out = *grads[w];
        }
    if (!n) return tr_error_set(err, TR_ERR_INVALID, "%s: no gradient asked for", kn);
    /* the checks every call repeats, once here (a kernel that fails at bind fails early) */
    int rc = tr_cpu_check_rel_bias(kn, &in[0], &in[1], &in[3], NULL, err);
    for (int w = 0; w < 5 && !rc; w++) /* gradient w is shaped as operand w */
        if (grads[w] && (grads[w]->dtype != in[w].dtype || !tr_cpu_same_shape(grads[w], &in[w]))) {
            char d1[200], d2[200];
            rc = tr_error_set(err, TR_ERR_SHAPE, "%s: gradient %d %s should be shaped and typed as its operand %s", kn,
                              w, tr_cpu_desc(grads[w], d1, sizeof d1), tr_cpu_desc(&in[w], d2, sizeof d2));
        }
    if (!rc && y) rc = check_saved(kn, k->device_type, &in[5], (const struct tr_tensor *const[2]){y, lse}, err);
    if (rc) return rc;
    call->op = -1;
    call->n_in = y ? 8 : 6;
    for (int i = 0; i < 6; i++) call->in[i] = in[i];
    if (y) {
        call->in[6] = *y;
        call->in[7] = *lse;
    }
    call->attrs.floats[0] = scale;
    return tr_cpu_keep_plan(call, &pl, sizeof pl, bound_attention_rel_backward, kn, err);
}

/* The forward's y (as dy) and lse (f32 or f64, (B,H,Tq)) fit q, v and dy; both on
 * `device` (a cuda context's bind checks its own tensors here too). */
static int check_saved(const char *kn, int device, const struct tr_tensor *dy, const struct tr_tensor *const saved[2],
                       struct tr_error *err) {
    const struct tr_tensor *y = saved[0], *lse = saved[1];
    char d1[200], d2[200], d3[200];
    for (int i = 0; i < 2; i++) {
        const char *what = i ? "lse" : "y";
        int rc = tr_cpu_check_tensor_on(saved[i], device, kn, what, err);
        if (rc) return rc;
        if (!tr_dtype_is_float((enum tr_dtype)saved[i]->dtype))
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %s %s: expected f32, bf16, f16 or f64", kn, what,
                                tr_cpu_desc(saved[i], d1, sizeof d1));
    }
    if (y->dtype != dy->dtype || !tr_cpu_same_shape(y, dy) || lse->ndim != 3 || lse->shape[0] != dy->shape[0] ||
        lse->shape[1] != dy->shape[1] || lse->shape[2] != dy->shape[2])
        return tr_error_set(err, TR_ERR_SHAPE, "%s: the saved y %s and lse %s should be the attention's output (as dy "
                            "%s) and its (B,H,Tq) statistics", kn, tr_cpu_desc(y, d1, sizeof d1),
                            tr_cpu_desc(lse, d2, sizeof d2), tr_cpu_desc(dy, d3, sizeof d3));
    return TR_OK;
}

static int attention_backward(struct tr_kernels *k, const char *kn, const struct tr_tensor *q,
                              const struct tr_tensor *kk, const struct tr_tensor *v, const struct tr_tensor *dy,
                              const struct tr_tensor *mask, const struct tr_tensor *rel,
                              const struct tr_tensor *const saved[2], float scale, int causal, int window,
                              struct tr_tensor *const outs[5], struct tr_error *err) {
    static const char *const onames[5] = {"dq", "dk", "dv", "drel_h", "drel_w"};
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = check_real(q, kn, "q", err);
    if (!rc) rc = check_real(kk, kn, "k", err);
    if (!rc) rc = check_real(v, kn, "v", err);
    if (!rc) rc = check_real(dy, kn, "dy", err);
    for (int i = 0; i < 5 && !rc; i++)
        if (outs[i]) rc = check_real(outs[i], kn, onames[i], err);
    if (!rc && mask) rc = check_real(mask, kn, "mask", err);
    if (!rc && rel) rc = tr_cpu_check_rel_bias(kn, q, kk, rel, NULL, err);
    if (!rc && !rel && (outs[3] || outs[4]))
        rc = tr_error_set(err, TR_ERR_INVALID, "%s: a bias gradient asked for without the bias terms", kn);
    for (int i = 3; i < 5 && !rc; i++)
        if (outs[i] && (outs[i]->dtype != rel[i - 3].dtype || !tr_cpu_same_shape(outs[i], &rel[i - 3]))) {
            char d1[200], d2[200];
            rc = tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be shaped and typed as %s %s", kn, onames[i],
                              tr_cpu_desc(outs[i], d1, sizeof d1), i == 3 ? "rel_h" : "rel_w",
                              tr_cpu_desc(&rel[i - 3], d2, sizeof d2));
        }
    if (rc) return rc;
    struct tr_tensor *out = outs[0] ? outs[0] : outs[1] ? outs[1] : outs[2] ? outs[2] : outs[3] ? outs[3] : outs[4];
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "%s: no gradient asked for", kn);
    char d1[200], d2[200], d3[200], d4[200], d5[200];
    if (q->ndim != 4 || kk->ndim != 4 || v->ndim != 4 || dy->ndim != 4 || out->ndim != 4 || kk->dtype != q->dtype ||
        v->dtype != q->dtype || dy->dtype != q->dtype || (out->dtype != q->dtype && out != outs[3] && out != outs[4]))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: q %s, k %s, v %s, dy %s, out %s should all be 4-D (B,H,T,D) of one dtype",
                            kn, tr_cpu_desc(q, d1, sizeof d1), tr_cpu_desc(kk, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            tr_cpu_desc(dy, d4, sizeof d4), tr_cpu_desc(out, d5, sizeof d5));
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    int64_t Hk = kk->shape[1], Tk = kk->shape[2], Dv = v->shape[3];
    const struct tr_tensor *like[3] = {q, kk, v};
    int bad = -1;
    for (int i = 0; i < 3; i++)
        if (outs[i] && (outs[i]->dtype != q->dtype || !tr_cpu_same_shape(outs[i], like[i]))) bad = i;
    if (kk->shape[0] != B || v->shape[0] != B || v->shape[1] != Hk || v->shape[2] != Tk || kk->shape[3] != D ||
        Hk < 1 || H % Hk != 0 || dy->shape[0] != B || dy->shape[1] != H || dy->shape[2] != Tq || dy->shape[3] != Dv ||
        bad >= 0)
        return tr_error_set(err, TR_ERR_SHAPE,
                            "%s: q %s, k %s, v %s, dy %s, %s %s do not fit: expected q (B,H,Tq,D), k (B,Hk,Tk,D), "
                            "v (B,Hk,Tk,Dv), dy (B,H,Tq,Dv) with H a multiple of Hk, and %s shaped as %s",
                            kn, tr_cpu_desc(q, d1, sizeof d1), tr_cpu_desc(kk, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            tr_cpu_desc(dy, d4, sizeof d4), onames[bad >= 0 ? bad : 0],
                            tr_cpu_desc(outs[bad >= 0 ? bad : 0] ? outs[bad >= 0 ? bad : 0] : out, d5, sizeof d5),
                            onames[bad >= 0 ? bad : 0], bad == 1 ? "k" : bad == 2 ? "v" : "q");
    if (!isfinite(scale)) return tr_error_set(err, TR_ERR_INVALID, "%s: scale %g is not finite", kn, (double)scale);
    if (window < 0) return tr_error_set(err, TR_ERR_INVALID, "%s: window %d is negative", kn, window);
    if (saved && (rc = check_saved(kn, TR_DEVICE_CPU, dy, saved, err)) != TR_OK) return rc;
    struct agrad_args A = {
        .q = q->data, .k = kk->data, .v = v->data, .dy = dy->data, .dt = q->dtype,
        .B = B, .H = H, .Hk = Hk, .Tq = Tq, .Tk = Tk, .D = D, .Dv = Dv, .scale = scale,
        .causal = causal != 0, .window = window,
    };
    const int64_t full[4] = {B, H, Tq, Tk};
    if ((rc = tr_cpu_check_mask(kn, mask, q->dtype, full, A.ms, &A.mask, &A.mdt, err)) != TR_OK) return rc;
    if (rel) tr_cpu_check_rel_bias(kn, q, kk, rel, &A.rel, NULL); /* checked above */
    if (B * H * Tq == 0 || Tk == 0 || D == 0 || Dv == 0) { /* no path from the output to an operand */
        for (int i = 0; i < 5; i++)
            if (outs[i] && tr_tensor_nbytes(outs[i])) memset(outs[i]->data, 0, tr_tensor_nbytes(outs[i]));
        return TR_OK;
    }
    size_t stats_fail = 0, wsz = q->dtype == TR_DTYPE_F64 ? ag_run_f64(&A, outs, saved, &stats_fail)
                                                          : ag_run_f32(&A, outs, saved, &stats_fail);
    if (stats_fail)
        return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the row statistics (%lld rows)", kn,
                            (long long)(B * H * Tq));
    if (wsz) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a %zu-byte tile workspace", kn, wsz);
    return TR_OK;
}

/* ---- attention backward, bound ---- */

static int bound_attention_backward(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_attrs *a = &c->attrs;
    struct tr_tensor g[3] = {c->in[5], c->in[6], c->in[7]};
    return tr_k_attention_backward(k, &c->in[0], &c->in[1], &c->in[2], &c->in[3], a->ints[3] ? &c->in[4] : NULL,
                                   a->ints[5] ? &c->in[8] : NULL, a->ints[5] ? &c->in[9] : NULL, a->floats[0],
                                   (int)a->ints[0], (int)a->ints[1], a->ints[4] & 1 ? &g[0] : NULL,
                                   a->ints[4] & 2 ? &g[1] : NULL, a->ints[4] & 4 ? &g[2] : NULL, err);
}

int tr_kernels_bind_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                       const struct tr_tensor *v, const struct tr_tensor *dy,
                                       const struct tr_tensor *mask, const struct tr_tensor *y,
                                       const struct tr_tensor *lse, float scale, int causal, int window,
                                       const struct tr_tensor *dq, const struct tr_tensor *dk,
                                       const struct tr_tensor *dv, struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_attention_backward(k, q, kk, v, dy, mask, y, lse, scale, causal, window, dq, dk, dv,
                                                     call, err));
    static const char kn[] = "attention_backward";
    if (!call || !q || !kk || !v || !dy || (!dq && !dk && !dv) || !y != !lse)
        return tr_error_set(err, TR_ERR_INVALID, "%s: NULL operand, no gradient asked for, or y without lse", kn);
    memset(call, 0, sizeof *call);
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (rc) return rc;
    call->op = -1;
    call->in[0] = *q;
    call->in[1] = *kk;
    call->in[2] = *v;
    call->in[3] = *dy;
    if (mask) call->in[4] = *mask;
    const struct tr_tensor *g[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++)
        if (g[i]) {
            call->in[5 + i] = *g[i];
            call->attrs.ints[4] |= 1 << i;
            if (!call->out.data) call->out = *g[i];
        }
    if (y) {
        call->in[8] = *y;
        call->in[9] = *lse;
        call->attrs.ints[5] = 1;
    }
    call->n_in = y ? 10 : 8;
    /* 0: attention's default 1/sqrt(D), as the ATTENTION_GRAD op reads it */
    call->attrs.floats[0] = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    call->attrs.ints[0] = causal;
    call->attrs.ints[1] = window;
    call->attrs.ints[3] = mask != NULL;
    call->fn = bound_attention_backward;
    return TR_OK;
}
