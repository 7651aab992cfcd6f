/* The attention backward on the cpu (ATTENTION_GRAD and the fused attention_backward of
 * kernels.h), flash-style: per block of queries the row statistics once, then dq, and per
 * block of keys dk and dv, never a [T, T] matrix. Computes in f64 like every training
 * kernel (grad.c says why); split from grad.c. */
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
 * (the forward gives it zeros). Visibility is the forward's (attention.c). */

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
    double *lse, *delta; /* (B,H,Tq) */
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

/* Rows [r0, r0+n) of a (.., T, W) operand at (b, head) into dst [n][W]. */
static inline void ag_load(const char *base, int dt, int64_t nheads, int64_t T, int64_t W, int64_t b, int64_t head,
                           int64_t r0, int64_t n, double *dst) {
    load_f64(dst, base + ((b * nheads + head) * T + r0) * W * (int64_t)esize(dt), dt, n * W);
}

/* dst [W][AG_BK] = src [n][W] transposed, zero past column n: the products then run
 * along keys, AG_BK wide, which vectorizes without reassociating a sum. */
static inline void ag_transpose(const double *restrict src, int64_t n, int64_t W, double *restrict dst) {
    for (int64_t c = 0; c < n; c++)
        for (int64_t d = 0; d < W; d++) dst[d * AG_BK + c] = src[c * W + d];
    for (int64_t d = 0; d < W; d++)
        for (int64_t c = n; c < AG_BK; c++) dst[d * AG_BK + c] = 0.0;
}

/* out[r][0..AG_BK) = A_r · Bt for nq rows of A [nq][W], Bt [W][AG_BK]. */
static inline void ag_rows_by_t(const double *restrict A, int64_t nq, int64_t W, const double *restrict Bt,
                                double *restrict out) {
    for (int64_t r = 0; r < nq; r++) {
        double *restrict o = out + r * AG_BK;
        for (int64_t c = 0; c < AG_BK; c++) o[c] = 0.0;
        for (int64_t d = 0; d < W; d++) {
            const double a = A[r * W + d];
            const double *restrict bt = Bt + d * AG_BK;
#pragma omp simd
            for (int64_t c = 0; c < AG_BK; c++) o[c] += a * bt[c];
        }
    }
}

/* S[r][c] = scale·q_r·k_c + mask for queries i0+r, keys j0+c (Kt the block transposed);
 * −inf where not visible and past the block. */
static inline void ag_scores(const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                             int64_t nk, const double *Q, const double *Kt, double *S) {
    ag_rows_by_t(Q, nq, A->D, Kt, S);
    for (int64_t r = 0; r < nq; r++) {
        const int64_t i = i0 + r;
        int64_t lo, hi;
        ag_key_range(A, i, &lo, &hi);
        double *s = S + r * AG_BK;
        for (int64_t c = 0; c < AG_BK; c++) {
            const int64_t j = j0 + c;
            if (c >= nk || j < lo || j > hi) {
                s[c] = -INFINITY;
                continue;
            }
            s[c] *= A->scale;
            if (A->mask) s[c] += get_f64(A->mask, A->mdt, b * A->ms[0] + h * A->ms[1] + i * A->ms[2] + j * A->ms[3]);
            const struct tr_cpu_rel_bias *rb = &A->rel;
            if (rb->h) {
                const int64_t row = (b * A->H + h) * A->Tq + i;
                s[c] += get_f64(rb->h, rb->dt_h, row * rb->Kh + j / rb->Kw) +
                        get_f64(rb->w, rb->dt_w, row * rb->Kw + j % rb->Kw);
            }
        }
    }
}

/* S → P = exp(S − lse) in place; then, when G is given, dS = P·(dY·Vᵀ − delta) into G. */
static inline void ag_probs(const struct agrad_args *A, int64_t nq, const double *lse, const double *delta,
                            const double *dY, const double *Vt, double *S, double *G) {
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < AG_BK; c++) S[r * AG_BK + c] = tr_grad_exp(S[r * AG_BK + c] - lse[r]);
    if (!G) return;
    ag_rows_by_t(dY, nq, A->Dv, Vt, G);
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < AG_BK; c++) G[r * AG_BK + c] = S[r * AG_BK + c] * (G[r * AG_BK + c] - delta[r]);
}

/* acc[x][0..W) += f·Σ over y of coef(x,y)·rows[y][0..W), coef read at coef[x*cs + y*ys]. */
static inline void ag_accum(const double *restrict coef, int64_t nx, int64_t ny, int64_t cs, int64_t ys, double f,
                            const double *restrict rows, int64_t W, double *restrict acc) {
    for (int64_t x = 0; x < nx; x++)
        for (int64_t y = 0; y < ny; y++) {
            const double g = coef[x * cs + y * ys] * f;
            if (g == 0.0) continue; /* masked, invisible, or past the block */
            const double *restrict src = rows + y * W;
            double *restrict dst = acc + x * W;
#pragma omp simd
            for (int64_t d = 0; d < W; d++) dst[d] += g * src[d];
        }
}

/* Work space of one thread, shared by the three passes. */
struct ag_ws {
    double *Q, *K, *Kt, *V, *Vt, *dY, *S, *G, *acc, *m, *l, *acc2, *drh, *drw;
};

static size_t ag_workspace(int64_t D, int64_t Dv, int64_t Kh, int64_t Kw) {
    int64_t dm = D > Dv ? D : Dv;
    return (size_t)(AG_BQ * D + 2 * AG_BK * D + 2 * AG_BK * Dv + AG_BQ * Dv + 2 * AG_BQ * AG_BK +
                    (AG_BQ > AG_BK ? AG_BQ : AG_BK) * dm + 2 * AG_BQ + AG_BK * Dv + AG_BQ * (Kh + Kw));
}

static void ag_split(double *ws, int64_t D, int64_t Dv, int64_t Kh, struct ag_ws *w) {
    w->Q = ws;                        /* [BQ][D] */
    w->K = w->Q + AG_BQ * D;          /* [BK][D] */
    w->Kt = w->K + AG_BK * D;         /* [D][BK] */
    w->V = w->Kt + AG_BK * D;         /* [BK][Dv] */
    w->Vt = w->V + AG_BK * Dv;        /* [Dv][BK] */
    w->dY = w->Vt + AG_BK * Dv;       /* [BQ][Dv] */
    w->S = w->dY + AG_BQ * Dv;        /* [BQ][BK] */
    w->G = w->S + AG_BQ * AG_BK;      /* [BQ][BK] */
    w->acc = w->G + AG_BQ * AG_BK;    /* [max(BQ,BK)][max(D,Dv)] */
    w->m = w->acc + (AG_BQ > AG_BK ? AG_BQ : AG_BK) * (D > Dv ? D : Dv);
    w->l = w->m + AG_BQ;
    w->acc2 = w->l + AG_BQ;           /* [BK][Dv]: dv beside dk (which 3) */
    w->drh = w->acc2 + AG_BK * Dv;    /* [BQ][Kh], then [BQ][Kw]: the bias terms' gradients */
    w->drw = w->drh + AG_BQ * Kh;
}

/* The query block's Q and dY rows into w. */
static inline void ag_load_q(const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, struct ag_ws *w) {
    ag_load(A->q, A->dt, A->H, A->Tq, A->D, b, h, i0, nq, w->Q);
    ag_load(A->dy, A->dt, A->H, A->Tq, A->Dv, b, h, i0, nq, w->dY);
}

/* The key block's K, Kt and V (and Vt when vt) of kv head hk into w. */
static inline void ag_load_kv(const struct agrad_args *A, int64_t b, int64_t hk, int64_t j0, int64_t nk, int vt,
                              struct ag_ws *w) {
    ag_load(A->k, A->dt, A->Hk, A->Tk, A->D, b, hk, j0, nk, w->K);
    ag_transpose(w->K, nk, A->D, w->Kt);
    ag_load(A->v, A->dt, A->Hk, A->Tk, A->Dv, b, hk, j0, nk, w->V);
    if (vt) ag_transpose(w->V, nk, A->Dv, w->Vt);
}

/* Keys [*lo, *hi] that some query of the block [i0, i0 + nq) may see. */
static inline void ag_block_keys(const struct agrad_args *A, int64_t i0, int64_t nq, int64_t *lo, int64_t *hi) {
    int64_t hi0, lo1;
    ag_key_range(A, i0, lo, &hi0);
    ag_key_range(A, i0 + nq - 1, &lo1, hi);
}

/* The key block at j0 (of the keys up to hi) loaded, V transposed too when vt, and its
 * scores against the loaded query block; the block's key count. */
static inline int64_t ag_key_block(const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq,
                                   int64_t j0, int64_t hi, int vt, struct ag_ws *w) {
    const int64_t nk = hi + 1 - j0 < AG_BK ? hi + 1 - j0 : AG_BK;
    ag_load_kv(A, b, h / (A->H / A->Hk), j0, nk, vt, w);
    ag_scores(A, b, h, i0, nq, j0, nk, w->Q, w->Kt, w->S);
    return nk;
}

/* Pass 1 for one query block: lse and delta of its rows. */
TR_CPU_MULTI(void, ag_stats, (const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, struct ag_ws *w), (A, b, h, i0, nq, w)) {
    const int64_t Dv = A->Dv;
    ag_load_q(A, b, h, i0, nq, w);
    double *o = w->acc;
    for (int64_t r = 0; r < nq; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0;
        for (int64_t d = 0; d < Dv; d++) o[r * Dv + d] = 0.0;
    }
    int64_t lo, hi;
    ag_block_keys(A, i0, nq, &lo, &hi);
    for (int64_t j0 = lo; j0 <= hi; j0 += AG_BK) {
        const int64_t nk = ag_key_block(A, b, h, i0, nq, j0, hi, 0, w);
        for (int64_t r = 0; r < nq; r++) {
            double *s = w->S + r * AG_BK, mx = -INFINITY;
            for (int64_t c = 0; c < AG_BK; c++) mx = s[c] > mx ? s[c] : mx;
            if (mx == -INFINITY) {
                for (int64_t c = 0; c < AG_BK; c++) s[c] = 0.0;
                continue;
            }
            const double mnew = w->m[r] > mx ? w->m[r] : mx, corr = tr_grad_exp(w->m[r] - mnew);
            double sum = 0.0;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < AG_BK; c++) {
                s[c] = tr_grad_exp(s[c] - mnew);
                sum += s[c];
            }
            w->l[r] = w->l[r] * corr + sum;
            w->m[r] = mnew;
            if (corr != 1.0)
                for (int64_t d = 0; d < Dv; d++) o[r * Dv + d] *= corr;
        }
        ag_accum(w->S, nq, nk, AG_BK, 1, 1.0, w->V, Dv, o);
    }
    for (int64_t r = 0; r < nq; r++) {
        const int64_t at = (b * A->H + h) * A->Tq + i0 + r;
        if (!(w->l[r] > 0.0)) {
            A->lse[at] = INFINITY;
            A->delta[at] = 0.0;
            continue;
        }
        double dl = 0.0;
        for (int64_t d = 0; d < Dv; d++) dl += w->dY[r * Dv + d] * o[r * Dv + d];
        A->lse[at] = w->m[r] + log(w->l[r]);
        A->delta[at] = dl / w->l[r];
    }
}

/* What one query block's rows give: dq (into out_q) and the bias terms' gradients
 * (into out_h, out_w); each NULL when not wanted. */
TR_CPU_MULTI(void, ag_rows, (const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, char *out_q, char *out_h, char *out_w, struct ag_ws *w), (A, b, h, i0, nq, out_q, out_h, out_w, w)) {
    const int64_t D = A->D, Kh = A->rel.Kh, Kw = A->rel.Kw, row0 = (b * A->H + h) * A->Tq + i0;
    ag_load_q(A, b, h, i0, nq, w);
    const double *lse = A->lse + row0, *delta = A->delta + row0;
    double *dq = w->acc;
    for (int64_t x = 0; x < nq * D; x++) dq[x] = 0.0;
    for (int64_t x = 0; x < nq * Kh; x++) w->drh[x] = 0.0;
    for (int64_t x = 0; x < nq * Kw; x++) w->drw[x] = 0.0;
    int64_t lo, hi;
    ag_block_keys(A, i0, nq, &lo, &hi);
    for (int64_t j0 = lo; j0 <= hi; j0 += AG_BK) {
        const int64_t nk = ag_key_block(A, b, h, i0, nq, j0, hi, 1, w);
        ag_probs(A, nq, lse, delta, w->dY, w->Vt, w->S, w->G);
        if (out_q) ag_accum(w->G, nq, nk, AG_BK, 1, A->scale, w->K, D, dq);
        if (out_h || out_w) /* dS summed over each key row (rel_h) and column (rel_w) of the grid */
            for (int64_t r = 0; r < nq; r++)
                for (int64_t c = 0; c < nk; c++) {
                    const double g = w->G[r * AG_BK + c];
                    w->drh[r * Kh + (j0 + c) / Kw] += g;
                    w->drw[r * Kw + (j0 + c) % Kw] += g;
                }
    }
    if (out_q) store_f64(out_q + row0 * D * (int64_t)esize(A->dt), A->dt, dq, nq * D);
    if (out_h) store_f64(out_h + row0 * Kh * (int64_t)esize(A->rel.dt_h), A->rel.dt_h, w->drh, nq * Kh);
    if (out_w) store_f64(out_w + row0 * Kw * (int64_t)esize(A->rel.dt_w), A->rel.dt_w, w->drw, nq * Kw);
}

/* dk (which 1), dv (which 2), or both (3: dk into out, dv into out2) of one key block of
 * kv head hk: both share the scores and probabilities of every query block. */
TR_CPU_MULTI(void, ag_dkv, (const struct agrad_args *A, int which, int64_t b, int64_t hk, int64_t j0, int64_t nk, char *out, char *out2, struct ag_ws *w), (A, which, b, hk, j0, nk, out, out2, w)) {
    const int64_t D = A->D, Dv = A->Dv, G = A->H / A->Hk, W = which == 2 ? Dv : D;
    ag_load_kv(A, b, hk, j0, nk, 1, w);
    double *acc = w->acc, *acc2 = w->acc2;
    for (int64_t x = 0; x < nk * W; x++) acc[x] = 0.0;
    if (which == 3)
        for (int64_t x = 0; x < nk * Dv; x++) acc2[x] = 0.0;
    int64_t ilo, ihi;
    ag_query_range(A, j0, j0 + nk - 1, &ilo, &ihi);
    for (int64_t h = hk * G; h < (hk + 1) * G; h++)
        for (int64_t i0 = ilo; i0 <= ihi; i0 += AG_BQ) {
            int64_t nq = ihi + 1 - i0 < AG_BQ ? ihi + 1 - i0 : AG_BQ;
            ag_load_q(A, b, h, i0, nq, w);
            const double *lse = A->lse + (b * A->H + h) * A->Tq + i0;
            const double *delta = A->delta + (b * A->H + h) * A->Tq + i0;
            ag_scores(A, b, h, i0, nq, j0, nk, w->Q, w->Kt, w->S);
            ag_probs(A, nq, lse, delta, w->dY, w->Vt, w->S, which != 2 ? w->G : NULL);
            /* acc[c] += f·Σ_r coef[r][c]·rows[r]: coef read transposed */
            if (which != 2) ag_accum(w->G, nk, nq, 1, AG_BK, A->scale, w->Q, D, acc);
            if (which == 2) ag_accum(w->S, nk, nq, 1, AG_BK, 1.0, w->dY, Dv, acc);
            if (which == 3) ag_accum(w->S, nk, nq, 1, AG_BK, 1.0, w->dY, Dv, acc2);
        }
    store_f64(out + ((b * A->Hk + hk) * A->Tk + j0) * W * (int64_t)esize(A->dt), A->dt, acc, nk * W);
    if (which == 3)
        store_f64(out2 + ((b * A->Hk + hk) * A->Tk + j0) * Dv * (int64_t)esize(A->dt), A->dt, acc2, nk * Dv);
}

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

int tr_k_attention_grad(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                        const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                        float scale, int causal, int window, int which, struct tr_tensor *out, struct tr_error *err) {
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
    if (n_in != 6)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 6 (q, k, v, rel_h, rel_w, dy) expected", kn,
                            n_in);
    const int64_t which = at->ints[0];
    if (which < 0 || which > 4)
        return tr_error_set(err, TR_ERR_INVALID, "%s: ints[0]=%lld should be 0 (dq), 1 (dk), 2 (dv), 3 (drel_h) or "
                            "4 (drel_w)", kn, (long long)which);
    struct tr_tensor *outs[5] = {NULL, NULL, NULL, NULL, NULL};
    outs[which] = out;
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    return attention_backward(k, kn, &in[0], &in[1], &in[2], &in[5], NULL, &in[3], NULL, scale, 0, 0, outs, err);
}

int tr_k_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6], float scale,
                                struct tr_tensor *const grads[5], struct tr_error *err) {
    static const char kn[] = "attention_rel_backward";
    if (!in || !grads || (!grads[0] && !grads[1] && !grads[2] && !grads[3] && !grads[4]))
        return tr_error_set(err, TR_ERR_INVALID, "%s: NULL operands, or no gradient asked for", kn);
    if (k && k->device_type == TR_DEVICE_CUDA) { /* the cuda kernels have no joint pass: one launch each */
        for (int w = 0; w < 5; w++) {
            if (!grads[w]) continue;
            struct tr_attrs at = {.ints = {w}, .n_ints = 1, .floats = {scale}};
            int rc = tr_kernels_run(k, TR_OP_ATTENTION_REL_GRAD, &at, 6, in, grads[w], err);
            if (rc) return rc;
        }
        return TR_OK;
    }
    float s = tr_attention_scale(scale, in[0].ndim == 4 ? in[0].shape[3] : 0);
    return attention_backward(k, kn, &in[0], &in[1], &in[2], &in[5], NULL, &in[3], NULL, s, 0, 0, grads, err);
}

/* The bound form's plan: the operands and the gradients asked for. */
struct rel_bwd_plan {
    struct tr_cpu_prepared hdr;
    struct tr_tensor in[6], g[5];
    int want[5];
    float scale;
};

static int bound_attention_rel_backward(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct rel_bwd_plan *pl = c->prepared;
    struct tr_tensor g[5], *gp[5];
    for (int w = 0; w < 5; w++) {
        g[w] = pl->g[w];
        gp[w] = pl->want[w] ? &g[w] : NULL;
    }
    return tr_k_attention_rel_backward(k, pl->in, pl->scale, gp, err);
}

int tr_kernels_bind_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6], float scale,
                                           const struct tr_tensor *const grads[5], struct tr_kernel_call *call,
                                           struct tr_error *err) {
    static const char kn[] = "attention_rel_backward";
    if (!call || !in || !grads) return tr_error_set(err, TR_ERR_INVALID, "%s: NULL argument", kn);
    memset(call, 0, sizeof *call);
    struct rel_bwd_plan pl = {.scale = scale};
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
    if (rc) return rc;
    call->op = -1;
    call->n_in = 6;
    for (int i = 0; i < 6; i++) call->in[i] = in[i];
    call->attrs.floats[0] = scale;
    return tr_cpu_keep_plan(call, &pl, sizeof pl, bound_attention_rel_backward, kn, err);
}

/* Rows [i0, i0+nq) of (b, h): lse as the forward saved it, delta = dy · y in f64. */
static void ag_saved_stats(const struct agrad_args *A, const struct tr_tensor *y, const struct tr_tensor *lse, int64_t b,
                           int64_t h, int64_t i0, int64_t nq) {
    const int64_t row0 = (b * A->H + h) * A->Tq + i0, Dv = A->Dv;
    const size_t es = esize(A->dt);
    for (int64_t r = 0; r < nq; r++) {
        const int64_t row = row0 + r;
        A->lse[row] = get_f64(lse->data, lse->dtype, row);
        double d = 0.0;
        const char *yr = (const char *)y->data + row * Dv * (int64_t)es, *gr = A->dy + row * Dv * (int64_t)es;
        for (int64_t c = 0; c < Dv; c++) d += get_f64(yr, A->dt, c) * get_f64(gr, A->dt, c);
        A->delta[row] = d;
    }
}

/* The forward's y (as dy) and lse (f32 or f64, (B,H,Tq)) fit q, v and dy. */
static int check_saved(const char *kn, const struct tr_tensor *dy, const struct tr_tensor *const saved[2],
                       struct tr_error *err) {
    const struct tr_tensor *y = saved[0], *lse = saved[1];
    int rc = check_real(y, kn, "y", err);
    if (!rc) rc = check_real(lse, kn, "lse", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (y->dtype != dy->dtype || !tr_cpu_same_shape(y, dy) || lse->ndim != 3 || lse->shape[0] != dy->shape[0] ||
        lse->shape[1] != dy->shape[1] || lse->shape[2] != dy->shape[2])
        return tr_error_set(err, TR_ERR_SHAPE, "%s: the saved y %s and lse %s should be the attention's output (as dy "
                            "%s) and its (B,H,Tq) statistics", kn, tr_cpu_desc(y, d1, sizeof d1),
                            tr_cpu_desc(lse, d2, sizeof d2), tr_cpu_desc(dy, d2, sizeof d2));
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
    if (saved && (rc = check_saved(kn, dy, saved, err)) != TR_OK) return rc;
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
    A.lse = malloc(sizeof(double) * (size_t)(2 * B * H * Tq));
    if (!A.lse)
        return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for the row statistics (%lld rows)", kn,
                            (long long)(B * H * Tq));
    A.delta = A.lse + B * H * Tq;
    const int64_t nqb = (Tq + AG_BQ - 1) / AG_BQ, nkb = (Tk + AG_BK - 1) / AG_BK;
    const size_t wsz = ag_workspace(D, Dv, A.rel.Kh, A.rel.Kw) * sizeof(double);
    const int par = B * H * Tq * Tk * (D + Dv) > 65536;
    int failed = 0;
    char *pq = outs[0] ? outs[0]->data : NULL, *ph = outs[3] ? outs[3]->data : NULL;
    char *pw = outs[4] ? outs[4]->data : NULL;
    /* dk and dv in one pass (3), or either alone (1, 2) */
    const int kv_which = outs[1] && outs[2] ? 3 : outs[1] ? 1 : outs[2] ? 2 : 0;
    char *pk = outs[1] ? outs[1]->data : outs[2] ? outs[2]->data : NULL;
    char *pv = outs[1] && outs[2] ? outs[2]->data : NULL;
#pragma omp parallel if (par)
    {
        double *ws = malloc(wsz);
        struct ag_ws w = {0};
        if (!ws) {
#pragma omp atomic write
            failed = 1;
        } else {
            ag_split(ws, D, Dv, A.rel.Kh, &w);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < B * H * nqb; t++) {
            if (!ws) continue;
            int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * AG_BQ;
            const int64_t nq = Tq - i0 < AG_BQ ? Tq - i0 : AG_BQ;
            if (saved) ag_saved_stats(&A, saved[0], saved[1], b, h, i0, nq);
            else ag_stats(&A, b, h, i0, nq, &w);
        }
        /* the implicit barrier: every row's lse and delta exist from here on */
        if (pq || ph || pw) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < B * H * nqb; t++) {
                if (!ws) continue;
                int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * AG_BQ;
                ag_rows(&A, b, h, i0, Tq - i0 < AG_BQ ? Tq - i0 : AG_BQ, pq, ph, pw, &w);
            }
        }
        if (kv_which) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < B * Hk * nkb; t++) {
                if (!ws) continue;
                int64_t b = t / (Hk * nkb), hk = (t / nkb) % Hk, j0 = (t % nkb) * AG_BK;
                ag_dkv(&A, kv_which, b, hk, j0, Tk - j0 < AG_BK ? Tk - j0 : AG_BK, pk, pv, &w);
            }
        }
        free(ws);
    }
    free(A.lse);
    if (failed) return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory for a %zu-byte tile workspace", kn, wsz);
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
