/* The attention backward's compute, included twice by attention_grad.c: AG_T double for
 * f64 data (the finite-difference checks), float for f32/bf16/f16 data (twice the lanes
 * of f64, and the f32 accumulation kernels.h promises). AG_(name) names a function of
 * this copy; AG_LOAD, AG_STORE, AG_EXP and AG_LOG are its conversions and math, AG_DT
 * the storage dtype that is AG_T itself. */

/* The helpers the per-ISA bodies call are inlined into each body: a helper left out of
 * line is compiled once for the baseline ISA, and ran there (perf showed ag_rows_by_t and
 * ag_accum as SSE2 functions taking a fifth of a BERT fit step). */
#define AG_INLINE static inline __attribute__((always_inline))
/* TR_CPU_MULTI on AG_(name), expanded first (## would paste the macro call itself) */
#define AG_MULTI_(ret, name, params, args) TR_CPU_MULTI(ret, name, params, args)
#define AG_MULTI(ret, name, params, args) AG_MULTI_(ret, AG_(name), params, args)
/* the row statistics, AG_T per (B,H,Tq) row */
#define AG_STAT(A, f) ((AG_T *)(A)->f)
/* a row max (or lse) past which m + log(l) loses l: the float's spacing there is 3e-5,
 * log(l)'s own error past it would be P's. Scores of real attention stay far below. */
#define AG_HUGE(m) (isfinite(m) && ((m) > (AG_T)256 || (m) < (AG_T)-256))

/* Rows [r0, r0+n) of a (.., T, W) operand at (b, head), as AG_T: the operand's own
 * memory where it already is (data of dtype AG_DT: the rows are contiguous), else
 * converted into buf [n][W]. Read only. Copying every block (f32 to f32) was about a
 * sixth of the backward's time in a BERT fit (perf). */
AG_INLINE const AG_T *AG_(ag_load)(const char *base, int dt, int64_t nheads, int64_t T, int64_t W, int64_t b,
                                   int64_t head, int64_t r0, int64_t n, AG_T *buf) {
    const char *src = base + ((b * nheads + head) * T + r0) * W * (int64_t)esize(dt);
    if (dt == AG_DT) return (const AG_T *)src;
    AG_LOAD(buf, src, dt, n * W);
    return buf;
}

/* dst [W][AG_BK] = src [n][W] transposed, zero past column n: the products then run
 * along keys, AG_BK wide, which vectorizes without reassociating a sum. */
AG_INLINE void AG_(ag_transpose)(const AG_T *restrict src, int64_t n, int64_t W, AG_T *restrict dst) {
    for (int64_t c = 0; c < n; c++)
        for (int64_t d = 0; d < W; d++) dst[d * AG_BK + c] = src[c * W + d];
    for (int64_t d = 0; d < W; d++)
        for (int64_t c = n; c < AG_BK; c++) dst[d * AG_BK + c] = 0.0;
}

/* o_k[0..n) += g_k · src[0..n) for the four rows k: a register tile's step (n a constant
 * once inlined). */
AG_INLINE void AG_(ag_fma4)(AG_T *restrict o0, AG_T *restrict o1, AG_T *restrict o2, AG_T *restrict o3, AG_T g0,
                            AG_T g1, AG_T g2, AG_T g3, const AG_T *restrict src, int64_t n) {
#pragma omp simd
    for (int64_t c = 0; c < n; c++) {
        o0[c] += g0 * src[c];
        o1[c] += g1 * src[c];
        o2[c] += g2 * src[c];
        o3[c] += g3 * src[c];
    }
}

/* out[r][0..AG_BK) = A_r · Bt for nq rows of A [nq][W], Bt [W][AG_BK]. Four rows at a
 * time keep their outputs in registers over d; each output still sums over d in order,
 * so the result is the one-row loop's. */
AG_INLINE void AG_(ag_rows_by_t)(int isa, const AG_T *restrict A, int64_t nq, int64_t W, const AG_T *restrict Bt,
                                 AG_T *restrict out) {
#ifdef AG_TILES
    ag_rows_by_t_tiled(isa, A, nq, W, Bt, out);
#else
    (void)isa;
    int64_t r = 0;
    for (; r + 4 <= nq; r += 4) {
        AG_T o0[AG_BK], o1[AG_BK], o2[AG_BK], o3[AG_BK];
        for (int64_t c = 0; c < AG_BK; c++) o0[c] = o1[c] = o2[c] = o3[c] = 0.0;
        const AG_T *a = A + r * W;
        for (int64_t d = 0; d < W; d++) {
            const AG_T a0 = a[d], a1 = a[W + d], a2 = a[2 * W + d], a3 = a[3 * W + d];
            const AG_T *restrict bt = Bt + d * AG_BK;
            AG_(ag_fma4)(o0, o1, o2, o3, a0, a1, a2, a3, bt, AG_BK);
        }
        for (int64_t c = 0; c < AG_BK; c++) {
            out[r * AG_BK + c] = o0[c];
            out[(r + 1) * AG_BK + c] = o1[c];
            out[(r + 2) * AG_BK + c] = o2[c];
            out[(r + 3) * AG_BK + c] = o3[c];
        }
    }
    for (; r < nq; r++) {
        AG_T *restrict o = out + r * AG_BK;
        for (int64_t c = 0; c < AG_BK; c++) o[c] = 0.0;
        for (int64_t d = 0; d < W; d++) {
            const AG_T a = A[r * W + d];
            const AG_T *restrict bt = Bt + d * AG_BK;
#pragma omp simd
            for (int64_t c = 0; c < AG_BK; c++) o[c] += a * bt[c];
        }
    }
#endif
}

/* S[r][c] = scale·q_r·k_c + mask for queries i0+r, keys j0+c (Kt the block transposed);
 * −inf where not visible and past the block. */
/* dst[0..n) += add + src[off + t] (src of dtype dt): the dtype decided once per row. */
AG_INLINE void AG_(ag_add_row)(AG_T *restrict dst, const void *src, int dt, int64_t off, int64_t n, AG_T add) {
    if (dt == TR_DTYPE_F32) {
        const float *restrict p = (const float *)src + off;
        for (int64_t t = 0; t < n; t++) dst[t] += add + (AG_T)p[t];
    } else if (dt == TR_DTYPE_F64) {
        const double *restrict p = (const double *)src + off;
        for (int64_t t = 0; t < n; t++) dst[t] += add + (AG_T)p[t];
    } else if (dt == TR_DTYPE_BF16) {
        const uint16_t *restrict p = (const uint16_t *)src + off;
        for (int64_t t = 0; t < n; t++) dst[t] += add + (AG_T)tr_bf16_to_f32(p[t]);
    } else {
        const uint16_t *restrict p = (const uint16_t *)src + off;
        for (int64_t t = 0; t < n; t++) dst[t] += add + (AG_T)tr_f16_to_f32(p[t]);
    }
}

/* out[0..AG_BK) = the mask and the decomposed bias of query i for keys j0 + c (0 past
 * nk). The bias walks the key grid a row segment at a time (key j at grid row j / Kw,
 * column j % Kw): contiguous rel_w, one rel_h value per segment, no division per key. */
AG_INLINE void AG_(ag_bias_row)(const struct agrad_args *A, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t nk,
                                AG_T *restrict out) {
    for (int64_t c = 0; c < AG_BK; c++) out[c] = 0.0;
    if (A->mask) {
        const int64_t at = b * A->ms[0] + h * A->ms[1] + i * A->ms[2] + j0 * A->ms[3];
        if (A->ms[3] == 1) {
            AG_(ag_add_row)(out, A->mask, A->mdt, at, nk, 0.0);
        } else {
            for (int64_t c = 0; c < nk; c++) out[c] = get_f64(A->mask, A->mdt, at + c * A->ms[3]);
        }
    }
    const struct tr_cpu_rel_bias *rb = &A->rel;
    if (rb->h) {
        const int64_t row = (b * A->H + h) * A->Tq + i;
        int64_t a = j0 / rb->Kw, c0 = j0 % rb->Kw;
        for (int64_t c = 0; c < nk; c0 = 0, a++) {
            const int64_t seg = nk - c < rb->Kw - c0 ? nk - c : rb->Kw - c0;
            AG_(ag_add_row)(out + c, rb->w, rb->dt_w, row * rb->Kw + c0, seg,
                            (AG_T)get_f64(rb->h, rb->dt_h, row * rb->Kh + a));
            c += seg;
        }
    }
}

/* S[r][c] = scale·q_r·k_c + mask + bias for queries i0+r, keys j0+c (Kt the block
 * transposed); −inf where not visible and past the block. brow: AG_BK of work space. */
AG_INLINE void AG_(ag_scores)(int isa, const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                              int64_t nk, const AG_T *Q, const AG_T *Kt, AG_T *S, AG_T *restrict brow) {
    AG_(ag_rows_by_t)(isa, Q, nq, A->D, Kt, S);
    const int biased = A->mask || A->rel.h;
    if (!biased)
        for (int64_t c = 0; c < AG_BK; c++) brow[c] = 0.0;
    for (int64_t r = 0; r < nq; r++) {
        const int64_t i = i0 + r;
        int64_t lo, hi;
        ag_key_range(A, i, &lo, &hi);
        lo -= j0; /* as block offsets */
        hi -= j0;
        if (hi > nk - 1) hi = nk - 1;
        if (biased) AG_(ag_bias_row)(A, b, h, i, j0, nk, brow);
        AG_T *restrict s = S + r * AG_BK;
        const AG_T scale = (AG_T)A->scale;
        for (int64_t c = 0; c < AG_BK; c++) s[c] = c >= lo && c <= hi ? s[c] * scale + brow[c] : (AG_T)-INFINITY;
    }
}

/* S → P = exp(S − lse) · pscale in place; then, when G is given, dS = P·(dY·Vᵀ − delta)
 * into G. */
AG_INLINE void AG_(ag_probs)(int isa, const struct agrad_args *A, int64_t nq, const AG_T *lse, const AG_T *delta,
                             const AG_T *dY, const AG_T *Vt, AG_T *S, AG_T *G) {
    const AG_T *ps = AG_STAT(A, pscale) + (lse - AG_STAT(A, lse));
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < AG_BK; c++) S[r * AG_BK + c] = AG_EXP(S[r * AG_BK + c] - lse[r]) * ps[r];
    if (!G) return;
    AG_(ag_rows_by_t)(isa, dY, nq, A->Dv, Vt, G);
    for (int64_t r = 0; r < nq; r++)
        for (int64_t c = 0; c < AG_BK; c++) G[r * AG_BK + c] = S[r * AG_BK + c] * (G[r * AG_BK + c] - delta[r]);
}

/* acc[x][0..W) += f·Σ over y of coef(x,y)·rows[y][0..W), coef read at coef[x*cs + y*ys].
 * Four x at a time over 16 columns of W, those outputs held in registers while y runs;
 * each output still sums over y in order (a zero coefficient adds nothing), so the result
 * is the one-row loop's. */
#define AG_DC 16
AG_INLINE void AG_(ag_accum)(int isa, const AG_T *restrict coef, int64_t nx, int64_t ny, int64_t cs, int64_t ys, AG_T f,
                             const AG_T *restrict rows, int64_t W, AG_T *restrict acc) {
#ifdef AG_TILES
    int64_t x = ag_accum_tiled(isa, coef, nx, ny, cs, ys, f, rows, W, acc);
#else
    (void)isa;
    int64_t x = 0;
    for (; W % AG_DC == 0 && x + 4 <= nx; x += 4)
        for (int64_t d0 = 0; d0 < W; d0 += AG_DC) {
            AG_T o0[AG_DC], o1[AG_DC], o2[AG_DC], o3[AG_DC];
            AG_T *restrict a = acc + x * W + d0;
            for (int64_t d = 0; d < AG_DC; d++) o0[d] = a[d], o1[d] = a[W + d], o2[d] = a[2 * W + d], o3[d] = a[3 * W + d];
            for (int64_t y = 0; y < ny; y++) {
                const AG_T *cf = coef + x * cs + y * ys;
                const AG_T g0 = cf[0] * f, g1 = cf[cs] * f, g2 = cf[2 * cs] * f, g3 = cf[3 * cs] * f;
                if (g0 == 0.0 && g1 == 0.0 && g2 == 0.0 && g3 == 0.0) continue; /* masked, invisible, past the block */
                const AG_T *restrict src = rows + y * W + d0;
                AG_(ag_fma4)(o0, o1, o2, o3, g0, g1, g2, g3, src, AG_DC);
            }
            for (int64_t d = 0; d < AG_DC; d++) a[d] = o0[d], a[W + d] = o1[d], a[2 * W + d] = o2[d], a[3 * W + d] = o3[d];
        }
#endif
    for (; x < nx; x++)
        for (int64_t y = 0; y < ny; y++) {
            const AG_T g = coef[x * cs + y * ys] * f;
            if (g == 0.0) continue; /* masked, invisible, or past the block */
            const AG_T *restrict src = rows + y * W;
            AG_T *restrict dst = acc + x * W;
#pragma omp simd
            for (int64_t d = 0; d < W; d++) dst[d] += g * src[d];
        }
}
#undef AG_DC

/* Work space of one thread, shared by the three passes. */
struct AG_(ag_ws) {
    const AG_T *Q, *K, *V, *dY, *Y; /* the loaded blocks (ag_load: the operands' memory, or the buffers) */
    AG_T *Qb, *Kb, *Kt, *Vb, *Vt, *dYb, *S, *G, *acc, *m, *l, *acc2, *drh, *drw, *brow;
};

static size_t AG_(ag_workspace)(int64_t D, int64_t Dv, int64_t Kh, int64_t Kw) {
    int64_t dm = D > Dv ? D : Dv;
    return (size_t)(AG_BQ * D + 2 * AG_BK * D + 2 * AG_BK * Dv + AG_BQ * Dv + 2 * AG_BQ * AG_BK +
                    (AG_BQ > AG_BK ? AG_BQ : AG_BK) * dm + 2 * AG_BQ + AG_BK * Dv + AG_BQ * (Kh + Kw) + AG_BK);
}

static void AG_(ag_split)(AG_T *ws, int64_t D, int64_t Dv, int64_t Kh, int64_t Kw, struct AG_(ag_ws) *w) {
    w->Qb = ws;                       /* [BQ][D] */
    w->Kb = w->Qb + AG_BQ * D;        /* [BK][D] */
    w->Kt = w->Kb + AG_BK * D;        /* [D][BK] */
    w->Vb = w->Kt + AG_BK * D;        /* [BK][Dv] */
    w->Vt = w->Vb + AG_BK * Dv;       /* [Dv][BK] */
    w->dYb = w->Vt + AG_BK * Dv;      /* [BQ][Dv] */
    w->S = w->dYb + AG_BQ * Dv;       /* [BQ][BK] */
    w->G = w->S + AG_BQ * AG_BK;      /* [BQ][BK] */
    w->acc = w->G + AG_BQ * AG_BK;    /* [max(BQ,BK)][max(D,Dv)] */
    w->m = w->acc + (AG_BQ > AG_BK ? AG_BQ : AG_BK) * (D > Dv ? D : Dv);
    w->l = w->m + AG_BQ;
    w->acc2 = w->l + AG_BQ;           /* [BK][Dv]: dv beside dk (which 3) */
    w->drh = w->acc2 + AG_BK * Dv;    /* [BQ][Kh], then [BQ][Kw]: the bias terms' gradients */
    w->drw = w->drh + AG_BQ * Kh;
    w->brow = w->drw + AG_BQ * Kw;   /* [BK]: one row's mask and bias */
}

/* The query block's Q and dY rows into w. */
AG_INLINE void AG_(ag_load_q)(const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq,
                              struct AG_(ag_ws) *w) {
    w->Q = AG_(ag_load)(A->q, A->dt, A->H, A->Tq, A->D, b, h, i0, nq, w->Qb);
    w->dY = AG_(ag_load)(A->dy, A->dt, A->H, A->Tq, A->Dv, b, h, i0, nq, w->dYb);
}

/* The key block's K, Kt and V (and Vt when vt) of kv head hk into w. */
AG_INLINE void AG_(ag_load_kv)(const struct agrad_args *A, int64_t b, int64_t hk, int64_t j0, int64_t nk, int vt,
                               struct AG_(ag_ws) *w) {
    w->K = AG_(ag_load)(A->k, A->dt, A->Hk, A->Tk, A->D, b, hk, j0, nk, w->Kb);
    AG_(ag_transpose)(w->K, nk, A->D, w->Kt);
    w->V = AG_(ag_load)(A->v, A->dt, A->Hk, A->Tk, A->Dv, b, hk, j0, nk, w->Vb);
    if (vt) AG_(ag_transpose)(w->V, nk, A->Dv, w->Vt);
}

/* Keys [*lo, *hi] that some query of the block [i0, i0 + nq) may see. */
AG_INLINE void AG_(ag_block_keys)(const struct agrad_args *A, int64_t i0, int64_t nq, int64_t *lo, int64_t *hi) {
    int64_t hi0, lo1;
    ag_key_range(A, i0, lo, &hi0);
    ag_key_range(A, i0 + nq - 1, &lo1, hi);
}

/* The key block at j0 (of the keys up to hi) loaded, V transposed too when vt, and its
 * scores against the loaded query block; the block's key count. */
AG_INLINE int64_t AG_(ag_key_block)(int isa, const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq,
                                    int64_t j0, int64_t hi, int vt, struct AG_(ag_ws) *w) {
    const int64_t nk = hi + 1 - j0 < AG_BK ? hi + 1 - j0 : AG_BK;
    AG_(ag_load_kv)(A, b, h / (A->H / A->Hk), j0, nk, vt, w);
    AG_(ag_scores)(isa, A, b, h, i0, nq, j0, nk, w->Q, w->Kt, w->S, w->brow);
    return nk;
}

/* Pass 1 for one query block: lse and delta of its rows. */
AG_MULTI(void, ag_stats, (const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, struct AG_(ag_ws) *w), (A, b, h, i0, nq, w)) {
    const int64_t Dv = A->Dv;
    AG_(ag_load_q)(A, b, h, i0, nq, w);
    AG_T *o = w->acc;
    for (int64_t r = 0; r < nq; r++) {
        w->m[r] = -INFINITY;
        w->l[r] = 0.0;
        for (int64_t d = 0; d < Dv; d++) o[r * Dv + d] = 0.0;
    }
    int64_t lo, hi;
    AG_(ag_block_keys)(A, i0, nq, &lo, &hi);
    for (int64_t j0 = lo; j0 <= hi; j0 += AG_BK) {
        const int64_t nk = AG_(ag_key_block)(isa, A, b, h, i0, nq, j0, hi, 0, w);
        for (int64_t r = 0; r < nq; r++) {
            AG_T *s = w->S + r * AG_BK, mx = -INFINITY;
            for (int64_t c = 0; c < AG_BK; c++) mx = s[c] > mx ? s[c] : mx;
            if (mx == -INFINITY) {
                for (int64_t c = 0; c < AG_BK; c++) s[c] = 0.0;
                continue;
            }
            const AG_T mnew = w->m[r] > mx ? w->m[r] : mx, corr = AG_EXP(w->m[r] - mnew);
            AG_T sum = 0.0;
#pragma omp simd reduction(+ : sum)
            for (int64_t c = 0; c < AG_BK; c++) {
                s[c] = AG_EXP(s[c] - mnew);
                sum += s[c];
            }
            w->l[r] = w->l[r] * corr + sum;
            w->m[r] = mnew;
            if (corr != 1.0)
                for (int64_t d = 0; d < Dv; d++) o[r * Dv + d] *= corr;
        }
        AG_(ag_accum)(isa, w->S, nq, nk, AG_BK, 1, 1.0, w->V, Dv, o);
    }
    for (int64_t r = 0; r < nq; r++) {
        const int64_t at = (b * A->H + h) * A->Tq + i0 + r;
        AG_STAT(A, pscale)[at] = 1.0;
        if (!(w->l[r] > 0.0)) {
            AG_STAT(A, lse)[at] = INFINITY;
            AG_STAT(A, delta)[at] = 0.0;
            continue;
        }
        AG_T dl = 0.0;
        for (int64_t d = 0; d < Dv; d++) dl += w->dY[r * Dv + d] * o[r * Dv + d];
        const int huge = AG_HUGE(w->m[r]);
        AG_STAT(A, lse)[at] = huge ? w->m[r] : w->m[r] + AG_LOG(w->l[r]);
        if (huge) AG_STAT(A, pscale)[at] = 1.0 / w->l[r];
        AG_STAT(A, delta)[at] = dl / w->l[r];
    }
}

/* What one query block's rows give: dq (into out_q) and the bias terms' gradients
 * (into out_h, out_w); each NULL when not wanted. */
AG_MULTI(void, ag_rows, (const struct agrad_args *A, int64_t b, int64_t h, int64_t i0, int64_t nq, char *out_q, char *out_h, char *out_w, struct AG_(ag_ws) *w), (A, b, h, i0, nq, out_q, out_h, out_w, w)) {
    const int64_t D = A->D, Kh = A->rel.Kh, Kw = A->rel.Kw, row0 = (b * A->H + h) * A->Tq + i0;
    AG_(ag_load_q)(A, b, h, i0, nq, w);
    const AG_T *lse = AG_STAT(A, lse) + row0, *delta = AG_STAT(A, delta) + row0;
    AG_T *dq = w->acc;
    for (int64_t x = 0; x < nq * D; x++) dq[x] = 0.0;
    for (int64_t x = 0; x < nq * Kh; x++) w->drh[x] = 0.0;
    for (int64_t x = 0; x < nq * Kw; x++) w->drw[x] = 0.0;
    int64_t lo, hi;
    AG_(ag_block_keys)(A, i0, nq, &lo, &hi);
    for (int64_t j0 = lo; j0 <= hi; j0 += AG_BK) {
        const int64_t nk = AG_(ag_key_block)(isa, A, b, h, i0, nq, j0, hi, 1, w);
        AG_(ag_probs)(isa, A, nq, lse, delta, w->dY, w->Vt, w->S, w->G);
        if (out_q) AG_(ag_accum)(isa, w->G, nq, nk, AG_BK, 1, A->scale, w->K, D, dq);
        if (out_h || out_w) /* dS summed over each key row (rel_h) and column (rel_w) of the grid */
            for (int64_t r = 0; r < nq; r++) { /* a grid row segment at a time, as ag_bias_row */
                const AG_T *restrict g = w->G + r * AG_BK;
                AG_T *restrict dh = w->drh + r * Kh, *restrict dw = w->drw + r * Kw;
                int64_t a = j0 / Kw, c0 = j0 % Kw;
                for (int64_t c = 0; c < nk; c0 = 0, a++) {
                    const int64_t seg = nk - c < Kw - c0 ? nk - c : Kw - c0;
                    AG_T t = 0.0;
                    for (int64_t x = 0; x < seg; x++) {
                        t += g[c + x];
                        dw[c0 + x] += g[c + x];
                    }
                    dh[a] += t;
                    c += seg;
                }
            }
    }
    if (out_q) AG_STORE(out_q + row0 * D * (int64_t)esize(A->dt), A->dt, dq, nq * D);
    if (out_h) AG_STORE(out_h + row0 * Kh * (int64_t)esize(A->rel.dt_h), A->rel.dt_h, w->drh, nq * Kh);
    if (out_w) AG_STORE(out_w + row0 * Kw * (int64_t)esize(A->rel.dt_w), A->rel.dt_w, w->drw, nq * Kw);
}

/* dk (which 1), dv (which 2), or both (3: dk into out, dv into out2) of one key block of
 * kv head hk: both share the scores and probabilities of every query block. */
AG_MULTI(void, ag_dkv, (const struct agrad_args *A, int which, int64_t b, int64_t hk, int64_t j0, int64_t nk, char *out, char *out2, struct AG_(ag_ws) *w), (A, which, b, hk, j0, nk, out, out2, w)) {
    const int64_t D = A->D, Dv = A->Dv, G = A->H / A->Hk, W = which == 2 ? Dv : D;
    AG_(ag_load_kv)(A, b, hk, j0, nk, 1, w);
    AG_T *acc = w->acc, *acc2 = w->acc2;
    for (int64_t x = 0; x < nk * W; x++) acc[x] = 0.0;
    if (which == 3)
        for (int64_t x = 0; x < nk * Dv; x++) acc2[x] = 0.0;
    int64_t ilo, ihi;
    ag_query_range(A, j0, j0 + nk - 1, &ilo, &ihi);
    for (int64_t h = hk * G; h < (hk + 1) * G; h++)
        for (int64_t i0 = ilo; i0 <= ihi; i0 += AG_BQ) {
            int64_t nq = ihi + 1 - i0 < AG_BQ ? ihi + 1 - i0 : AG_BQ;
            AG_(ag_load_q)(A, b, h, i0, nq, w);
            const AG_T *lse = AG_STAT(A, lse) + (b * A->H + h) * A->Tq + i0;
            const AG_T *delta = AG_STAT(A, delta) + (b * A->H + h) * A->Tq + i0;
            AG_(ag_scores)(isa, A, b, h, i0, nq, j0, nk, w->Q, w->Kt, w->S, w->brow);
            AG_(ag_probs)(isa, A, nq, lse, delta, w->dY, w->Vt, w->S, which != 2 ? w->G : NULL);
            /* acc[c] += f·Σ_r coef[r][c]·rows[r]: coef read transposed */
            if (which != 2) AG_(ag_accum)(isa, w->G, nk, nq, 1, AG_BK, A->scale, w->Q, D, acc);
            if (which == 2) AG_(ag_accum)(isa, w->S, nk, nq, 1, AG_BK, 1.0, w->dY, Dv, acc);
            if (which == 3) AG_(ag_accum)(isa, w->S, nk, nq, 1, AG_BK, 1.0, w->dY, Dv, acc2);
        }
    AG_STORE(out + ((b * A->Hk + hk) * A->Tk + j0) * W * (int64_t)esize(A->dt), A->dt, acc, nk * W);
    if (which == 3)
        AG_STORE(out2 + ((b * A->Hk + hk) * A->Tk + j0) * Dv * (int64_t)esize(A->dt), A->dt, acc2, nk * Dv);
}

/* dq, dk and dv of kv head hk of batch b in one pass (ag_run picks it where the keys are
 * few): per query block of each head of the group and per key block it sees, the
 * scores, P and dS once, then dq_i += dS·K_j, dk_j += dSᵀ·Q_i, dv_j += Pᵀ·dY_i, where the
 * two passes (ag_rows, ag_dkv) build S, P and dS each: 5 products instead of 7. dk and
 * dv of every key of the head sum in dkv [Tk][D] then [Tk][Dv]. Each output still sums
 * over the same terms in the same order as the two passes (dq over key blocks; dk, dv
 * over the group's heads, then the queries in order), so the results are their bits. */
AG_MULTI(void, ag_fused, (const struct agrad_args *A, int64_t b, int64_t hk, char *out_q, char *out_k, char *out_v, AG_T *dkv, struct AG_(ag_ws) *w), (A, b, hk, out_q, out_k, out_v, dkv, w)) {
    const int64_t D = A->D, Dv = A->Dv, G = A->H / A->Hk, Tq = A->Tq, Tk = A->Tk;
    AG_T *dk = dkv, *dv = dkv + Tk * D, *dq = w->acc;
    for (int64_t x = 0; x < Tk * (D + Dv); x++) dkv[x] = 0.0;
    for (int64_t h = hk * G; h < (hk + 1) * G; h++)
        for (int64_t i0 = 0; i0 < Tq; i0 += AG_BQ) {
            const int64_t nq = Tq - i0 < AG_BQ ? Tq - i0 : AG_BQ, row0 = (b * A->H + h) * Tq + i0;
            AG_(ag_load_q)(A, b, h, i0, nq, w);
            const AG_T *lse = AG_STAT(A, lse) + row0, *delta = AG_STAT(A, delta) + row0;
            for (int64_t x = 0; x < nq * D; x++) dq[x] = 0.0;
            int64_t lo, hi;
            AG_(ag_block_keys)(A, i0, nq, &lo, &hi);
            for (int64_t j0 = lo; j0 <= hi; j0 += AG_BK) {
                const int64_t nk = AG_(ag_key_block)(isa, A, b, h, i0, nq, j0, hi, 1, w);
                AG_(ag_probs)(isa, A, nq, lse, delta, w->dY, w->Vt, w->S, w->G);
                AG_(ag_accum)(isa, w->G, nq, nk, AG_BK, 1, A->scale, w->K, D, dq);
                AG_(ag_accum)(isa, w->G, nk, nq, 1, AG_BK, A->scale, w->Q, D, dk + j0 * D);
                AG_(ag_accum)(isa, w->S, nk, nq, 1, AG_BK, 1.0, w->dY, Dv, dv + j0 * Dv);
            }
            AG_STORE(out_q + row0 * D * (int64_t)esize(A->dt), A->dt, dq, nq * D);
        }
    const int64_t kv0 = (b * A->Hk + hk) * Tk;
    AG_STORE(out_k + kv0 * D * (int64_t)esize(A->dt), A->dt, dk, Tk * D);
    AG_STORE(out_v + kv0 * Dv * (int64_t)esize(A->dt), A->dt, dv, Tk * Dv);
}

/* Rows [i0, i0+nq) of (b, h): lse as the forward saved it, delta = dy · y (the rows of
 * both loaded into w's dY and acc). */
static void AG_(ag_saved_stats)(const struct agrad_args *A, const struct tr_tensor *y, const struct tr_tensor *lse,
                                int64_t b, int64_t h, int64_t i0, int64_t nq, struct AG_(ag_ws) *w) {
    const int64_t row0 = (b * A->H + h) * A->Tq + i0, Dv = A->Dv;
    w->dY = AG_(ag_load)(A->dy, A->dt, A->H, A->Tq, Dv, b, h, i0, nq, w->dYb);
    w->Y = AG_(ag_load)(y->data, A->dt, A->H, A->Tq, Dv, b, h, i0, nq, w->acc);
    int huge = 0;
    for (int64_t r = 0; r < nq; r++) {
        const AG_T l = (AG_T)get_f64(lse->data, lse->dtype, row0 + r);
        AG_STAT(A, lse)[row0 + r] = l;
        AG_STAT(A, pscale)[row0 + r] = 1.0;
        huge |= AG_HUGE(l);
        AG_T d = 0.0;
        for (int64_t c = 0; c < Dv; c++) d += w->Y[r * Dv + c] * w->dY[r * Dv + c];
        AG_STAT(A, delta)[row0 + r] = d;
    }
    if (huge) AG_(ag_stats)(A, b, h, i0, nq, w); /* the saved lse lost l: the block's m and l again */
}

/* The three passes over A's blocks into outs (attention_backward checked everything):
 * statistics (or the saved ones), dq and the bias terms, dk and dv. Returns 0, or the
 * workspace bytes a thread could not get. */
static size_t AG_(ag_run)(struct agrad_args *A, struct tr_tensor *const outs[5], const struct tr_tensor *const saved[2],
                          size_t *stats_fail) {
    const int64_t B = A->B, H = A->H, Hk = A->Hk, Tq = A->Tq, Tk = A->Tk, D = A->D, Dv = A->Dv;
    AG_T *stats = malloc(sizeof(AG_T) * (size_t)(3 * B * H * Tq));
    if (!stats) {
        *stats_fail = 1;
        return 0;
    }
    A->lse = stats;
    A->delta = stats + B * H * Tq;
    A->pscale = stats + 2 * B * H * Tq;
    const int64_t nqb = (Tq + AG_BQ - 1) / AG_BQ, nkb = (Tk + AG_BK - 1) / AG_BK;
    const size_t wsz = AG_(ag_workspace)(D, Dv, A->rel.Kh, A->rel.Kw) * sizeof(AG_T);
    const int par = B * H * Tq * Tk * (D + Dv) > 65536;
    int failed = 0;
    char *pq = outs[0] ? outs[0]->data : NULL, *ph = outs[3] ? outs[3]->data : NULL;
    char *pw = outs[4] ? outs[4]->data : NULL;
    /* dk and dv in one pass (3), or either alone (1, 2) */
    const int kv_which = outs[1] && outs[2] ? 3 : outs[1] ? 1 : outs[2] ? 2 : 0;
    char *pk = outs[1] ? outs[1]->data : outs[2] ? outs[2]->data : NULL;
    char *pv = outs[1] && outs[2] ? outs[2]->data : NULL;
    /* dq, dk and dv in one pass per (b, kv head) (ag_fused) where all three are asked
     * for, without the bias terms, when a head's dk and dv fit a thread's L2 (256 KiB)
     * and the heads keep every thread busy; else the two passes, whose work items are
     * blocks (long sequences, few heads) */
#ifdef _OPENMP
    const int64_t threads = omp_get_max_threads();
#else
    const int64_t threads = 1;
#endif
    const size_t dkv_sz = sizeof(AG_T) * (size_t)(Tk * (D + Dv));
    const int fused = pq && kv_which == 3 && !ph && !pw && dkv_sz <= (256u << 10) && B * Hk >= 2 * threads;
#pragma omp parallel if (par)
    {
        AG_T *ws = malloc(wsz);
        struct AG_(ag_ws) w = {0};
        if (!ws) {
#pragma omp atomic write
            failed = 1;
        } else {
            AG_(ag_split)(ws, D, Dv, A->rel.Kh, A->rel.Kw, &w);
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < B * H * nqb; t++) {
            if (!ws) continue;
            int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * AG_BQ;
            const int64_t nq = Tq - i0 < AG_BQ ? Tq - i0 : AG_BQ;
            if (saved) AG_(ag_saved_stats)(A, saved[0], saved[1], b, h, i0, nq, &w);
            else AG_(ag_stats)(A, b, h, i0, nq, &w);
        }
        /* the implicit barrier: every row's lse and delta exist from here on */
        AG_T *dkv = fused && ws ? malloc(dkv_sz) : NULL;
        if (fused && ws && !dkv) {
#pragma omp atomic write
            failed = 1;
        }
        if (fused) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < B * Hk; t++)
                if (dkv) AG_(ag_fused)(A, t / Hk, t % Hk, pq, pk, pv, dkv, &w);
        }
        free(dkv);
        if (!fused && (pq || ph || pw)) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < B * H * nqb; t++) {
                if (!ws) continue;
                int64_t b = t / (H * nqb), h = (t / nqb) % H, i0 = (t % nqb) * AG_BQ;
                AG_(ag_rows)(A, b, h, i0, Tq - i0 < AG_BQ ? Tq - i0 : AG_BQ, pq, ph, pw, &w);
            }
        }
        if (!fused && kv_which) {
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < B * Hk * nkb; t++) {
                if (!ws) continue;
                int64_t b = t / (Hk * nkb), hk = (t / nkb) % Hk, j0 = (t % nkb) * AG_BK;
                AG_(ag_dkv)(A, kv_which, b, hk, j0, Tk - j0 < AG_BK ? Tk - j0 : AG_BK, pk, pv, &w);
            }
        }
        free(ws);
    }
    free(stats);
    return failed ? wsz + (fused ? dkv_sz : 0) : 0; /* a thread's whole workspace */
}

#undef AG_MULTI_
#undef AG_MULTI
#undef AG_STAT
#undef AG_HUGE
#undef AG_INLINE
