/* Scaled dot-product attention, flash style: for a block of BQ query rows, the keys are
 * visited in blocks of BK with an online softmax (running max m, running sum l, the
 * output accumulated unnormalised and rescaled when the max grows), so only a BQ×BK tile
 * of scores ever exists. Work items are (batch, head, query block), run in parallel.
 *
 * q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv) -> out (B,H,Tq,Dv); head h reads kv head
 * h / (H/Hk). Positions are aligned at the end of k: with off = Tk - Tq, query i sees key
 * j iff j <= i + off when causal or windowed, and also j > i + off - window when
 * window > 0 (ops.h: a window implies the causal bound). A row that sees no key, or
 * whose scores are all -inf, is zeros. Scores, softmax and the accumulator are f32.
 * The same pass gives ATTENTION_LSE (and ATTENTION_REL_LSE): lse = m + log l per row (+inf
 * where l is 0), with the output, or alone (out NULL: the p·v products are skipped). */
#include <stdlib.h>
#include "cpu_internal.h"

#define BQ 64
#define BK 64

#include "attention_tiles.h"
DEF_SCORES_ROWS(scores_rows, scores4, scores1)

struct attn_args {
    const char *q, *k, *v, *mask;
    struct tr_cpu_rel_bias rel; /* ATTENTION_REL's bias terms (rel.h NULL: none) */
    char *out;  /* may be NULL (lse alone) */
    float *lse; /* (B,H,Tq), or NULL */
    int dt, mdt;
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    int64_t ms[4]; /* mask strides in elements over (B,H,Tq,Tk), 0 where it broadcasts */
    float scale;
    int causal, window;
};

/* First and last key (inclusive) query i may see, before clipping to [0,Tk). */
static inline void key_range(const struct attn_args *A, int64_t i, int64_t *lo, int64_t *hi) {
    int64_t pos = i + (A->Tk - A->Tq);
    *hi = (A->causal || A->window > 0) ? pos : A->Tk - 1;
    *lo = A->window > 0 ? pos - A->window + 1 : 0;
}

static size_t workspace_floats(int64_t D, int64_t Dv, int64_t Kh, int64_t Kw) {
    int64_t dm = D > Dv ? D : Dv;
    return (size_t)(BQ * D + D * BK + BK * Dv + BQ * BK + BQ * Dv + 2 * BQ + dm + BK + BQ * (Kh + Kw) + 16 * 8);
}

TR_CPU_MULTI(void, attn_task, (const struct attn_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, float *ws), (A, b, h, i0, nq, ws)) {
    const int64_t D = A->D, Dv = A->Dv, Tk = A->Tk;
    const size_t es = tr_dtype_size((enum tr_dtype)A->dt);
    const size_t mes = A->mask ? tr_dtype_size((enum tr_dtype)A->mdt) : 0;
    const int64_t hk = h / (A->H / A->Hk);
    const char *qb = A->q + ((b * A->H + h) * A->Tq + i0) * D * (int64_t)es;
    const char *kb = A->k + (b * A->Hk + hk) * Tk * D * (int64_t)es;
    const char *vb = A->v + (b * A->Hk + hk) * Tk * Dv * (int64_t)es;

    float *restrict Q = ws;                 /* [BQ][D], pre-scaled */
    float *restrict Kt = Q + BQ * D;        /* [D][BK], zero past the block's keys */
    float *restrict Vb = Kt + D * BK;       /* [BK][Dv] (bf16/f16 only) */
    float *restrict S = Vb + BK * Dv;       /* [BQ][BK] scores, then probabilities */
    float *restrict acc = S + BQ * BK;      /* [BQ][Dv] */
    float *restrict mrun = acc + BQ * Dv;   /* [BQ] running max */
    float *restrict lrun = mrun + BQ;       /* [BQ] running sum */
    float *restrict row = lrun + BQ;        /* [max(D,Dv)] one converted row */
    float *restrict mrow = row + (D > Dv ? D : Dv); /* [BK] mask values */
    float *restrict rh = mrow + BK;         /* [BQ][Kh] the block's rel_h rows, then [BQ][Kw] rel_w */
    float *restrict rw = rh + BQ * A->rel.Kh;

    for (int64_t r = 0; r < nq; r++) {
        tr_cpu_load_f32(Q + r * D, qb + r * D * (int64_t)es, A->dt, D);
        for (int64_t d = 0; d < D; d++) Q[r * D + d] *= A->scale;
        mrun[r] = -INFINITY;
        lrun[r] = 0.0f;
        for (int64_t d = 0; d < Dv; d++) acc[r * Dv + d] = 0.0f;
    }
    const struct tr_cpu_rel_bias *rb = &A->rel;
    if (rb->h) {
        const int64_t row0 = (b * A->H + h) * A->Tq + i0;
        tr_cpu_load_f32(rh, rb->h + row0 * rb->Kh * (int64_t)tr_dtype_size((enum tr_dtype)rb->dt_h), rb->dt_h,
                        nq * rb->Kh);
        tr_cpu_load_f32(rw, rb->w + row0 * rb->Kw * (int64_t)tr_dtype_size((enum tr_dtype)rb->dt_w), rb->dt_w,
                        nq * rb->Kw);
    }
    /* keys any row of the block may see */
    int64_t lo0, hi0, lo1, hi1;
    key_range(A, i0, &lo0, &hi0);
    key_range(A, i0 + nq - 1, &lo1, &hi1);
    int64_t jlo = lo0 < 0 ? 0 : lo0, jhi = hi1 >= Tk ? Tk - 1 : hi1;

    for (int64_t j0 = jlo; j0 <= jhi; j0 += BK) {
        int64_t nk = jhi + 1 - j0 < BK ? jhi + 1 - j0 : BK;
        /* Kt = this block of k, transposed so the score loop runs along keys */
        for (int64_t jj = 0; jj < nk; jj++) {
            const char *kr = kb + (j0 + jj) * D * (int64_t)es;
            const float *src = (const float *)kr;
            if (A->dt != TR_DTYPE_F32) {
                tr_cpu_load_f32(row, kr, A->dt, D);
                src = row;
            }
            for (int64_t d = 0; d < D; d++) Kt[d * BK + jj] = src[d];
        }
        if (nk < BK)
            for (int64_t d = 0; d < D; d++)
                for (int64_t jj = nk; jj < BK; jj++) Kt[d * BK + jj] = 0.0f;
        const float *V = (const float *)(vb + j0 * Dv * (int64_t)es);
        if (A->out && A->dt != TR_DTYPE_F32) {
            tr_cpu_load_f32(Vb, vb + j0 * Dv * (int64_t)es, A->dt, nk * Dv);
            V = Vb;
        }
        scores_rows(isa, Q, nq, D, Kt, S);
        int64_t r;

        /* mask, visibility, and the online softmax, row by row */
        for (r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            float *restrict s = S + r * BK;
            if (A->mask) {
                const char *mp = A->mask + (b * A->ms[0] + h * A->ms[1] + i * A->ms[2] + j0 * A->ms[3]) * (int64_t)mes;
                if (A->ms[3]) {
                    tr_cpu_load_f32(mrow, mp, A->mdt, nk);
                } else {
                    float mv = tr_cpu_get_f32(mp, A->mdt, 0);
                    for (int64_t jj = 0; jj < nk; jj++) mrow[jj] = mv;
                }
                for (int64_t jj = 0; jj < nk; jj++) s[jj] += mrow[jj];
            }
            if (rb->h) { /* the decomposed bias: key j on grid row j / Kw, column j % Kw, a
                          * grid row segment at a time (contiguous rel_w, one rel_h value) */
                const float *restrict bh = rh + r * rb->Kh, *restrict bw = rw + r * rb->Kw;
                int64_t a = j0 / rb->Kw, c = j0 % rb->Kw;
                for (int64_t jj = 0; jj < nk; c = 0, a++) {
                    const int64_t seg = nk - jj < rb->Kw - c ? nk - jj : rb->Kw - c;
                    for (int64_t t = 0; t < seg; t++) s[jj + t] += bh[a] + bw[c + t];
                    jj += seg;
                }
            }
            int64_t lo, hi;
            key_range(A, i, &lo, &hi);
            lo -= j0; /* as block offsets */
            hi -= j0;
            if (hi > nk - 1) hi = nk - 1;
            for (int64_t jj = 0; jj < BK; jj++) s[jj] = (jj >= lo && jj <= hi) ? s[jj] : -INFINITY;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int64_t jj = 0; jj < BK; jj++) mx = s[jj] > mx ? s[jj] : mx;
            if (mx == -INFINITY) { /* nothing visible in this block: p = 0, state kept */
                for (int64_t jj = 0; jj < BK; jj++) s[jj] = 0.0f;
                continue;
            }
            const float mold = mrun[r], mnew = mold > mx ? mold : mx;
            const float corr = tr_fexp(mold - mnew); /* 0 when mold is -inf */
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t jj = 0; jj < BK; jj++) {
                s[jj] = tr_fexp(s[jj] - mnew);
                sum += s[jj];
            }
            lrun[r] = lrun[r] * corr + sum;
            mrun[r] = mnew;
            if (corr != 1.0f) {
                float *restrict ar = acc + r * Dv;
                for (int64_t d = 0; d < Dv; d++) ar[d] *= corr;
            }
        }
        if (!A->out) continue; /* the statistics alone */
        for (r = 0; r + 4 <= nq; r += 4) {
            if (isa == TR_CPU_ISA_AVX512) pv4_v16(S + r * BK, nk, V, Dv, acc + r * Dv);
            else if (isa == TR_CPU_ISA_AVX2) pv4_v8(S + r * BK, nk, V, Dv, acc + r * Dv);
            else pv4_v4(S + r * BK, nk, V, Dv, acc + r * Dv);
        }
        for (; r < nq; r++) pv1(S + r * BK, nk, V, Dv, acc + r * Dv);
    }
    const int64_t row0 = (b * A->H + h) * A->Tq + i0;
    if (A->lse) {
        for (int64_t r = 0; r < nq; r++) S[r] = lrun[r] > 0.0f ? mrun[r] + logf(lrun[r]) : INFINITY;
        memcpy(A->lse + row0, S, (size_t)nq * sizeof *S);
    }
    if (!A->out) return;
    for (int64_t r = 0; r < nq; r++) {
        float *restrict ar = acc + r * Dv;
        const float inv = lrun[r] > 0.0f ? 1.0f / lrun[r] : 0.0f;
        for (int64_t d = 0; d < Dv; d++) ar[d] *= inv;
        tr_cpu_store_f32(A->out + (row0 + r) * Dv * (int64_t)es, A->dt, ar, Dv);
    }
}

struct attn_plan {
    struct tr_cpu_prepared hdr;
    struct attn_args A;
    int64_t bq, nqb, tasks, nout;
    int par;
    size_t wsz; /* bytes of one thread's tile workspace */
};

/* ATTENTION's operands, and out and lse as given (either may be NULL, not both). */
static int attention_check(const struct tr_tensor *q, const struct tr_tensor *kk, const struct tr_tensor *v,
                           const struct tr_tensor *mask, const struct tr_tensor *rel, float scale, int causal,
                           int window, const struct tr_tensor *out, const struct tr_tensor *lse, struct attn_plan *pl,
                           struct tr_error *err) {
    const char *kn = out ? "attention" : "attention_lse";
    int rc = tr_cpu_check_float(q, kn, "q", err);
    if (!rc) rc = tr_cpu_check_float(kk, kn, "k", err);
    if (!rc) rc = tr_cpu_check_float(v, kn, "v", err);
    if (!rc && out) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc && lse) rc = tr_cpu_check_tensor(lse, kn, "lse", err);
    if (!rc && mask) rc = tr_cpu_check_float(mask, kn, "mask", err);
    if (!rc && !out && !lse) rc = tr_error_set(err, TR_ERR_INVALID, "%s: neither out nor lse given", kn);
    if (rc) return rc;
    char d1[200], d2[200], d3[200], d4[200];
    if (q->ndim != 4 || kk->ndim != 4 || v->ndim != 4 || (out && out->ndim != 4))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: q %s, k %s, v %s, out %s should all be 4-D (B,H,T,D)", kn,
                            tr_cpu_desc(q, d1, sizeof d1), tr_cpu_desc(kk, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            out ? tr_cpu_desc(out, d4, sizeof d4) : "-");
    if (kk->dtype != q->dtype || v->dtype != q->dtype || (out && out->dtype != q->dtype))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: dtypes differ: q %s, k %s, v %s, out %s", kn,
                            tr_cpu_desc(q, d1, sizeof d1), tr_cpu_desc(kk, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            out ? tr_cpu_desc(out, d4, sizeof d4) : "-");
    int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
    int64_t Hk = kk->shape[1], Tk = kk->shape[2], Dv = v->shape[3];
    if (kk->shape[0] != B || v->shape[0] != B || v->shape[1] != Hk || v->shape[2] != Tk || kk->shape[3] != D ||
        Hk < 1 || H % Hk != 0 ||
        (out && (out->shape[0] != B || out->shape[1] != H || out->shape[2] != Tq || out->shape[3] != Dv)))
        return tr_error_set(err, TR_ERR_SHAPE,
                            "%s: q %s, k %s, v %s, out %s do not fit: expected q (B,H,Tq,D), k (B,Hk,Tk,D), "
                            "v (B,Hk,Tk,Dv), out (B,H,Tq,Dv) with H a multiple of Hk", kn,
                            tr_cpu_desc(q, d1, sizeof d1), tr_cpu_desc(kk, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            out ? tr_cpu_desc(out, d4, sizeof d4) : "-");
    if (lse && (lse->dtype != TR_DTYPE_F32 || lse->ndim != 3 || lse->shape[0] != B || lse->shape[1] != H ||
                lse->shape[2] != Tq))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: lse %s, expected f32 (B,H,Tq) [%lld,%lld,%lld]", kn,
                            tr_cpu_desc(lse, d1, sizeof d1), (long long)B, (long long)H, (long long)Tq);
    if (!isfinite(scale)) return tr_error_set(err, TR_ERR_INVALID, "attention: scale %g is not finite", (double)scale);
    if (window < 0) return tr_error_set(err, TR_ERR_INVALID, "attention: window %d is negative", window);
    memset(pl, 0, sizeof *pl);
    struct attn_args A = {
        .q = q->data, .k = kk->data, .v = v->data, .out = out ? out->data : NULL, .lse = lse ? lse->data : NULL,
        .dt = q->dtype,
        .B = B, .H = H, .Hk = Hk, .Tq = Tq, .Tk = Tk, .D = D, .Dv = Dv, .scale = scale,
        .causal = causal != 0, .window = window,
    };
    const int64_t full[4] = {B, H, Tq, Tk};
    if ((rc = tr_cpu_check_mask(kn, mask, q->dtype, full, A.ms, &A.mask, &A.mdt, err)) != TR_OK) return rc;
    if (rel && (rc = tr_cpu_check_rel_bias("attention_rel", q, kk, rel, &A.rel, err)) != TR_OK) return rc;
    pl->A = A;
    pl->nout = (out ? tr_tensor_numel(out) : 0) + (lse ? tr_tensor_numel(lse) : 0);
    pl->bq = Tq < BQ ? Tq : BQ;
    pl->nqb = pl->bq ? (Tq + pl->bq - 1) / pl->bq : 0;
    pl->tasks = B * H * pl->nqb;
    pl->par = pl->tasks > 1 && B * H * Tq * Tk * (D + Dv) > 65536;
    pl->wsz = workspace_floats(D, Dv, A.rel.Kh, A.rel.Kw) * sizeof(float);
    return TR_OK;
}

/* Work items (batch, head, query block) over the threads, each with its slice of the
 * context's scratch as the tile workspace. */
static void attention_compute(struct tr_kernels *k, const void *plan) {
    const struct attn_plan *pl = plan;
    if (pl->nout == 0) return;
    const struct attn_args *A = &pl->A;
    const int64_t H = A->H, Tq = A->Tq, bq = pl->bq, nqb = pl->nqb, tasks = pl->tasks;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (pl->par)
    {
        float *ws = tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * bq;
            int64_t nq = Tq - i0 < bq ? Tq - i0 : bq;
            attn_task(A, b, h, i0, nq, ws);
        }
    }
}

int tr_k_attention(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                   const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal, int window,
                   struct tr_tensor *out, struct tr_error *err) {
    if (q) scale = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0); /* 0: 1/sqrt(D), as the op's */
    TR_CUDA_ROUTE(k, tr_cuda_k_attention(k, q, kk, v, mask, scale, causal, window, out, err));
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "attention: no out");
    return tr_k_attention_lse(k, q, kk, v, mask, scale, causal, window, out, NULL, err);
}

int tr_k_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                       const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal, int window,
                       struct tr_tensor *out, struct tr_tensor *lse, struct tr_error *err) {
    if (q) scale = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    TR_CUDA_ROUTE(k, tr_cuda_k_attention_lse(k, q, kk, v, mask, scale, causal, window, out, lse, err));
    struct attn_plan pl;
    const char *kn = out ? "attention" : "attention_lse";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc && (!q || !kk || !v)) rc = tr_error_set(err, TR_ERR_INVALID, "%s: NULL operand", kn);
    if (!rc) rc = attention_check(q, kk, v, mask, NULL, scale, causal, window, out, lse, &pl, err);
    if (!rc && pl.nout) rc = tr_cpu_scratch_reserve(k, 0, pl.wsz, kn, err);
    return tr_cpu_compute_now(k, rc, attention_compute, &pl);
}

/* c's operands in[0..2] (and in[3], the mask, when n_in is 4), attrs resolved; out and lse
 * as given (the ATTENTION node's out, ATTENTION_LSE's as lse, or both). */
static int attention_bind(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *out,
                          const struct tr_tensor *lse, struct tr_error *err) {
    struct attn_plan pl;
    const struct tr_attrs *at = &c->attrs;
    const char *kn = out ? "attention" : "attention_lse";
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc)
        rc = attention_check(&c->in[0], &c->in[1], &c->in[2], c->n_in == 4 ? &c->in[3] : NULL, NULL, at->floats[0],
                             at->ints[0] != 0, (int)at->ints[1], out, lse, &pl, err);
    if (!rc && pl.nout) rc = tr_cpu_scratch_reserve(k, 0, pl.wsz, kn, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, attention_compute, kn, err);
}

int tr_cpu_attention_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    return attention_bind(k, c, &c->out, NULL, err);
}

int tr_cpu_attention_lse_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    return attention_bind(k, c, NULL, &c->out, err);
}

int tr_kernels_bind_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                  const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                                  int window, const struct tr_tensor *out, const struct tr_tensor *lse,
                                  struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_attention_lse(k, q, kk, v, mask, scale, causal, window, out, lse, call, err));
    if (!call || !q || !kk || !v || !out || !lse)
        return tr_error_set(err, TR_ERR_INVALID, "attention_lse: NULL operand, out or lse");
    memset(call, 0, sizeof *call);
    call->op = -1;
    call->n_in = mask ? 4 : 3;
    call->in[0] = *q;
    call->in[1] = *kk;
    call->in[2] = *v;
    if (mask) call->in[3] = *mask;
    call->in[4] = *lse; /* kept for a reader of the call; the plan holds both outputs */
    call->out = *out;
    call->attrs.floats[0] = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    call->attrs.ints[0] = causal != 0;
    call->attrs.ints[1] = window;
    return attention_bind(k, call, out, lse, err);
}

/* ATTENTION_REL (q, k, v, rel_h, rel_w): the same tiles, each score row given its bias;
 * out, lse or both as attention_check takes them (ATTENTION_REL_LSE's is lse). */
static int attention_rel_plan(struct tr_kernels *k, const char *kn, float scale, int n_in, const struct tr_tensor *in,
                              const struct tr_tensor *out, const struct tr_tensor *lse, struct attn_plan *pl,
                              struct tr_error *err) {
    if (n_in != 5)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 5 (q, k, v, rel_h, rel_w) expected", kn, n_in);
    scale = tr_attention_scale(scale, in[0].ndim == 4 ? in[0].shape[3] : 0);
    int rc = attention_check(&in[0], &in[1], &in[2], NULL, &in[3], scale, 0, 0, out, lse, pl, err);
    if (!rc && pl->nout) rc = tr_cpu_scratch_reserve(k, 0, pl->wsz, kn, err);
    return rc;
}

int tr_cpu_attention_rel_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct attn_plan pl;
    const int lse = c->op == TR_OP_ATTENTION_REL_LSE;
    const char *kn = lse ? "attention_rel_lse" : "attention_rel";
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc)
        rc = attention_rel_plan(k, kn, c->attrs.floats[0], c->n_in, c->in, lse ? NULL : &c->out, lse ? &c->out : NULL,
                                &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, attention_compute, kn, err);
}

static int attention_rel_now(struct tr_kernels *k, int n_in, const struct tr_tensor *in, float scale,
                             const struct tr_tensor *out, const struct tr_tensor *lse, struct tr_error *err) {
    struct attn_plan pl;
    const char *kn = out ? "attention_rel" : "attention_rel_lse";
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc && !in) rc = tr_error_set(err, TR_ERR_INVALID, "%s: NULL operands", kn);
    if (!rc) rc = attention_rel_plan(k, kn, scale, n_in, in, out, lse, &pl, err);
    return tr_cpu_compute_now(k, rc, attention_compute, &pl);
}

int tr_cpu_attention_rel_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                                const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    const int lse = op == TR_OP_ATTENTION_REL_LSE;
    return attention_rel_now(k, n_in, in, at->floats[0], lse ? NULL : out, lse ? out : NULL, err);
}

int tr_k_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale, struct tr_tensor *out,
                           struct tr_tensor *lse, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_attention_rel_lse(k, in, scale, out, lse, err));
    return attention_rel_now(k, 5, in, scale, out, lse, err);
}

int tr_kernels_bind_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale,
                                      const struct tr_tensor *out, const struct tr_tensor *lse,
                                      struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_attention_rel_lse(k, in, scale, out, lse, call, err));
    static const char kn[] = "attention_rel";
    if (!call || !in || !out || !lse) return tr_error_set(err, TR_ERR_INVALID, "%s: NULL operands, out or lse", kn);
    memset(call, 0, sizeof *call);
    struct attn_plan pl;
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc) rc = attention_rel_plan(k, kn, scale, 5, in, out, lse, &pl, err);
    if (rc) return rc;
    call->op = -1;
    call->n_in = 5;
    for (int i = 0; i < 5; i++) call->in[i] = in[i];
    call->in[5] = *lse; /* kept for a reader of the call; the plan holds both outputs */
    call->out = *out;
    call->attrs.floats[0] = tr_attention_scale(scale, in[0].ndim == 4 ? in[0].shape[3] : 0);
    return tr_cpu_keep_compute(call, &pl, sizeof pl, attention_compute, kn, err);
}
