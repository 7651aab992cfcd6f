// Attention backward, flash style (nothing of size (Tq,Tk) is stored), as the cpu's
// grad.c: a first kernel keeps per query row lse = log Σ_j exp(s_ij) and
// delta = dy_i · out_i (out rebuilt with an online softmax); then with
// P_ij = exp(s_ij − lse_i), dP_ij = dy_i · v_j, dS = P ⊙ (dP − delta):
//   dq_i = scale · Σ_j dS_ij k_j   a warp per query row, lanes over 32 keys at a time
//   dk_j = scale · Σ_i dS_ij q_i   a warp per key row, lanes over 32 queries at a time,
//   dv_j = Σ_i P_ij dy_i           every query head of the kv head's group
// Visibility is the forward's (attention.cu). A row that sees no key has lse = +inf and
// gets zero gradients. A row of huge scores (every key under a finite mask such as -1e9
// or finfo.min: a sample of padding alone) keeps its max m and 1/l apart, as the cpu's
// (attention_grad.c): lse = m, ps = 1/l and P = exp(s - lse)·ps, where m + log(l) would
// round to m and make P 1 for every key instead of 1/Tk. Other rows have ps = 1 and the
// bits they had. tr_cu_attention_split_lse gives a forward's lse (which lost l) the same
// form. First version: CUDA cores, operand rows read from L2; D, Dv <= 512
// (each kernel in two widths: MAXD 256, and 512 for the SD VAE's one head of 512).
// The fallback of attention_bwd_tc.cu (f32 in strict math, head sizes not a multiple of
// 16, ATTENTION_REL's terms); tr_cu_attention_backward computes the statistics once for
// all three gradients and dk with dv in one pass.
#include "cu_common.cuh"

#define AB_WARPS 4
#define AB_MAXD 256 // the narrow instances
#define AB_WIDE 512 // head sizes above AB_MAXD, with fewer blocks per SM for the registers

// kernel<T, AB_MAXD>, or <T, AB_WIDE> when wide, on `blocks` blocks of AB_WARPS warps.
#define AB_LAUNCH(wide, kernel, blocks, s, ...)                                             \
    do {                                                                                    \
        if (wide) kernel<T, AB_WIDE><<<(blocks), AB_WARPS * 32, 0, (s)>>>(__VA_ARGS__);      \
        else kernel<T, AB_MAXD><<<(blocks), AB_WARPS * 32, 0, (s)>>>(__VA_ARGS__);          \
    } while (0)

struct ab_ctx {
    tr_cu_attn p;
    float *lse, *delta, *ps; // (B,H,Tq) f32 scratch: P = exp(s - lse)·ps
};

// |m| past which a row keeps m and 1/l apart: log(Tk) is then near the float's spacing
// at m (at 256 the spacing is 3e-5; at the -1e9 of a mask, 64).
#define AB_HUGE 256.0f

__device__ __forceinline__ bool ab_huge(float m) { return isfinite(m) && fabsf(m) > AB_HUGE; }

__device__ __forceinline__ bool ab_visible(const tr_cu_attn &p, int64_t i, int64_t j) {
    const int64_t pos = i + p.Tk - p.Tq;
    if ((p.causal || p.window > 0) && j > pos) return false;
    if (p.window > 0 && j <= pos - p.window) return false;
    return true;
}

// The additive terms of score (i, j): the mask, ATTENTION_REL's decomposed bias.
__device__ __forceinline__ float ab_mask(const tr_cu_attn &p, int64_t b, int64_t h, int64_t i, int64_t j) {
    float s = 0.0f;
    if (p.mask)
        s = tr_ld_dt(p.mask, p.mask_dtype,
                     b * p.mask_stride[0] + h * p.mask_stride[1] + i * p.mask_stride[2] + j * p.mask_stride[3]);
    if (p.rel_h) {
        const int64_t row = (b * p.H + h) * p.Tq + i;
        s += tr_ld_dt(p.rel_h, p.rel_h_dtype, row * p.Kh + j / p.Kw) +
             tr_ld_dt(p.rel_w, p.rel_w_dtype, row * p.Kw + j % p.Kw);
    }
    return s;
}

// Lane's dot product of a row held in shared memory with row r of a global operand.
template <typename T>
__device__ __forceinline__ float ab_dot(const float *sh, const T *row, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += sh[d] * tr_ld(row + d);
    return s;
}

// lse and delta per query row: a warp per (b, h, i).
template <typename T, int MAXD>
__global__ void __launch_bounds__(AB_WARPS * 32, MAXD > AB_MAXD ? 2 : 4)
ab_stats_kernel(const T *q, const T *k, const T *v, const T *dy, ab_ctx c) {
    __shared__ float shq[AB_WARPS][MAXD];
    const tr_cu_attn &p = c.p;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp; // over B·H·Tq
    const bool live = row < p.B * p.H * p.Tq;
    const int64_t i = live ? row % p.Tq : 0, bh = live ? row / p.Tq : 0, b = bh / p.H, h = bh % p.H;
    const int64_t hk = h / (p.H / p.Hk);
    const int D = (int)p.D, Dv = (int)p.Dv;
    for (int d = lane; d < D; d += 32) shq[warp][d] = live ? tr_ld(q + row * D + d) * p.scale : 0.0f;
    __syncwarp();
    if (!live) return; // whole warps only
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D, *vb = v + (b * p.Hk + hk) * p.Tk * Dv;
    float m = -INFINITY, l = 0.0f, o[MAXD / 32];
#pragma unroll
    for (int c2 = 0; c2 < MAXD / 32; c2++) o[c2] = 0.0f;
    for (int64_t j0 = 0; j0 < p.Tk; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < p.Tk && ab_visible(p, i, j)) s = ab_dot(shq[warp], kb + j * D, D) + ab_mask(p, b, h, i, j);
        float mn = fmaxf(m, tr_warp_max(s)), mu = mn == -INFINITY ? 0.0f : mn;
        float pj = __expf(s - mu), corr = __expf(m - mu);
        l = l * corr + tr_warp_sum(pj);
        m = mn;
#pragma unroll
        for (int c2 = 0; c2 < MAXD / 32; c2++) o[c2] *= corr;
        const int64_t nj = p.Tk - j0 < 32 ? p.Tk - j0 : 32;
        for (int jj = 0; jj < nj; jj++) {
            float pb = __shfl_sync(0xffffffffu, pj, jj);
#pragma unroll
            for (int c2 = 0; c2 < MAXD / 32; c2++) {
                int d = lane + 32 * c2;
                if (d < Dv) o[c2] += pb * tr_ld(vb + (j0 + jj) * Dv + d);
            }
        }
    }
    float dl = 0.0f;
    if (l > 0.0f) {
#pragma unroll
        for (int c2 = 0; c2 < MAXD / 32; c2++) {
            int d = lane + 32 * c2;
            if (d < Dv) dl += tr_ld(dy + row * Dv + d) * o[c2] / l;
        }
    }
    dl = tr_warp_sum(dl);
    if (lane == 0) {
        const bool huge = l > 0.0f && ab_huge(m);
        c.lse[row] = l > 0.0f ? (huge ? m : m + logf(l)) : INFINITY;
        c.ps[row] = huge ? 1.0f / l : 1.0f;
        c.delta[row] = dl;
    }
}

// A forward's lse (m + log l, from the tensor-core statistics or ATTENTION_LSE) into
// this file's form: copied with ps = 1, except a huge row's, whose m and l are found
// again from its scores (lse = m, ps = 1/l). A warp per row; lse_in may be c.lse.
template <typename T, int MAXD>
__global__ void __launch_bounds__(AB_WARPS * 32, MAXD > AB_MAXD ? 2 : 4)
ab_split_kernel(const T *q, const T *k, const float *lse_in, ab_ctx c) {
    __shared__ float shq[AB_WARPS][MAXD];
    const tr_cu_attn &p = c.p;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp;
    if (row >= p.B * p.H * p.Tq) return; // whole warps only
    const float l0 = lse_in[row];
    if (!ab_huge(l0)) { // warp-uniform
        if (lane == 0) c.lse[row] = l0, c.ps[row] = 1.0f;
        return;
    }
    const int64_t i = row % p.Tq, bh = row / p.Tq, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hk);
    const int D = (int)p.D;
    for (int d = lane; d < D; d += 32) shq[warp][d] = tr_ld(q + row * D + d) * p.scale;
    __syncwarp();
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j0 = 0; j0 < p.Tk; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < p.Tk && ab_visible(p, i, j)) s = ab_dot(shq[warp], kb + j * D, D) + ab_mask(p, b, h, i, j);
        const float mn = fmaxf(m, tr_warp_max(s)), mu = mn == -INFINITY ? 0.0f : mn;
        l = l * __expf(m - mu) + tr_warp_sum(__expf(s - mu));
        m = mn;
    }
    if (lane == 0) {
        const bool huge = l > 0.0f && ab_huge(m);
        c.lse[row] = l > 0.0f ? (huge ? m : m + logf(l)) : INFINITY;
        c.ps[row] = huge ? 1.0f / l : 1.0f;
    }
}

// dq: a warp per query row.
template <typename T, int MAXD>
__global__ void __launch_bounds__(AB_WARPS * 32, MAXD > AB_MAXD ? 2 : 4)
ab_dq_kernel(const T *q, const T *k, const T *v, const T *dy, T *dq, ab_ctx c) {
    __shared__ float shq[AB_WARPS][MAXD], shdy[AB_WARPS][MAXD];
    const tr_cu_attn &p = c.p;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp;
    const bool live = row < p.B * p.H * p.Tq;
    const int64_t i = live ? row % p.Tq : 0, bh = live ? row / p.Tq : 0, b = bh / p.H, h = bh % p.H;
    const int64_t hk = h / (p.H / p.Hk);
    const int D = (int)p.D, Dv = (int)p.Dv;
    for (int d = lane; d < D; d += 32) shq[warp][d] = live ? tr_ld(q + row * D + d) * p.scale : 0.0f;
    for (int d = lane; d < Dv; d += 32) shdy[warp][d] = live ? tr_ld(dy + row * Dv + d) : 0.0f;
    __syncwarp();
    if (!live) return;
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D, *vb = v + (b * p.Hk + hk) * p.Tk * Dv;
    const float lse = c.lse[row], delta = c.delta[row], ps = c.ps[row];
    float acc[MAXD / 32];
#pragma unroll
    for (int c2 = 0; c2 < MAXD / 32; c2++) acc[c2] = 0.0f;
    if (lse != INFINITY)
        for (int64_t j0 = 0; j0 < p.Tk; j0 += 32) {
            const int64_t j = j0 + lane;
            float ds = 0.0f;
            if (j < p.Tk && ab_visible(p, i, j)) {
                float pr = __expf(ab_dot(shq[warp], kb + j * D, D) + ab_mask(p, b, h, i, j) - lse) * ps;
                ds = pr * (ab_dot(shdy[warp], vb + j * Dv, Dv) - delta);
            }
            const int64_t nj = p.Tk - j0 < 32 ? p.Tk - j0 : 32;
            for (int jj = 0; jj < nj; jj++) {
                float dsb = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
                for (int c2 = 0; c2 < MAXD / 32; c2++) {
                    int d = lane + 32 * c2;
                    if (d < D) acc[c2] += dsb * tr_ld(kb + (j0 + jj) * D + d);
                }
            }
        }
#pragma unroll
    for (int c2 = 0; c2 < MAXD / 32; c2++) {
        int d = lane + 32 * c2;
        if (d < D) tr_st(dq + row * D + d, acc[c2] * p.scale);
    }
}

#define AB_MAXK 256

// drel_h (which 3) or drel_w (4) of ATTENTION_REL: a warp per query row; dS_ij summed
// over the keys of each grid row (column) in shared memory, then stored in that
// operand's dtype (f32 or q's).
template <typename T, int MAXD>
__global__ void __launch_bounds__(AB_WARPS * 32, MAXD > AB_MAXD ? 2 : 4)
ab_drel_kernel(const T *q, const T *k, const T *v, const T *dy, void *out, int which, ab_ctx c) {
    __shared__ float shq[AB_WARPS][MAXD], shdy[AB_WARPS][MAXD], acc[AB_WARPS][AB_MAXK];
    const tr_cu_attn &p = c.p;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp;
    const bool live = row < p.B * p.H * p.Tq;
    const int64_t i = live ? row % p.Tq : 0, bh = live ? row / p.Tq : 0, b = bh / p.H, h = bh % p.H;
    const int64_t hk = h / (p.H / p.Hk), K = which == 3 ? p.Kh : p.Kw;
    const int D = (int)p.D, Dv = (int)p.Dv;
    for (int d = lane; d < D; d += 32) shq[warp][d] = live ? tr_ld(q + row * D + d) * p.scale : 0.0f;
    for (int d = lane; d < Dv; d += 32) shdy[warp][d] = live ? tr_ld(dy + row * Dv + d) : 0.0f;
    for (int64_t a = lane; a < K; a += 32) acc[warp][a] = 0.0f;
    __syncwarp();
    if (!live) return;
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D, *vb = v + (b * p.Hk + hk) * p.Tk * Dv;
    const float lse = c.lse[row], delta = c.delta[row], ps = c.ps[row];
    if (lse != INFINITY)
        for (int64_t j0 = 0; j0 < p.Tk; j0 += 32) {
            const int64_t j = j0 + lane;
            if (j < p.Tk) {
                float pr = __expf(ab_dot(shq[warp], kb + j * D, D) + ab_mask(p, b, h, i, j) - lse) * ps;
                atomicAdd(&acc[warp][which == 3 ? j / p.Kw : j % p.Kw], pr * (ab_dot(shdy[warp], vb + j * Dv, Dv) - delta));
            }
        }
    __syncwarp();
    const int odt = which == 3 ? p.rel_h_dtype : p.rel_w_dtype;
    for (int64_t a = lane; a < K; a += 32) {
        if (odt == TR_DTYPE_F32) ((float *)out)[row * K + a] = acc[warp][a];
        else tr_st((T *)out + row * K + a, acc[warp][a]);
    }
}

// dk and dv: a warp per key row of a kv head; the sums run over the group's query heads.
template <typename T, int MAXD>
__global__ void __launch_bounds__(AB_WARPS * 32, MAXD > AB_MAXD ? 2 : 4)
ab_dkv_kernel(const T *q, const T *k, const T *v, const T *dy, T *dk, T *dv, ab_ctx c) {
    __shared__ float shk[AB_WARPS][MAXD], shv[AB_WARPS][MAXD];
    const tr_cu_attn &p = c.p;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp; // over B·Hk·Tk
    const bool live = row < p.B * p.Hk * p.Tk;
    const int64_t j = live ? row % p.Tk : 0, bhk = live ? row / p.Tk : 0, b = bhk / p.Hk, hk = bhk % p.Hk;
    const int D = (int)p.D, Dv = (int)p.Dv;
    for (int d = lane; d < D; d += 32) shk[warp][d] = live ? tr_ld(k + row * D + d) * p.scale : 0.0f;
    for (int d = lane; d < Dv; d += 32) shv[warp][d] = live ? tr_ld(v + row * Dv + d) : 0.0f;
    __syncwarp();
    if (!live) return;
    const int64_t group = p.H / p.Hk;
    float ak[MAXD / 32], av[MAXD / 32];
#pragma unroll
    for (int c2 = 0; c2 < MAXD / 32; c2++) ak[c2] = av[c2] = 0.0f;
    for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
        const int64_t qrow0 = (b * p.H + h) * p.Tq;
        const T *qb = q + qrow0 * D, *dyb = dy + qrow0 * Dv;
        for (int64_t i0 = 0; i0 < p.Tq; i0 += 32) {
            const int64_t i = i0 + lane;
            float pr = 0.0f, ds = 0.0f;
            if (i < p.Tq && ab_visible(p, i, j)) {
                float lse = c.lse[qrow0 + i];
                if (lse != INFINITY) {
                    // shk holds k_j·scale, so the dot is the score
                    pr = __expf(ab_dot(shk[warp], qb + i * D, D) + ab_mask(p, b, h, i, j) - lse) * c.ps[qrow0 + i];
                    ds = pr * (ab_dot(shv[warp], dyb + i * Dv, Dv) - c.delta[qrow0 + i]);
                }
            }
            const int64_t ni = p.Tq - i0 < 32 ? p.Tq - i0 : 32;
            for (int ii = 0; ii < ni; ii++) {
                float pb = __shfl_sync(0xffffffffu, pr, ii), dsb = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int c2 = 0; c2 < MAXD / 32; c2++) {
                    int d = lane + 32 * c2;
                    if (dv && d < Dv) av[c2] += pb * tr_ld(dyb + (i0 + ii) * Dv + d);
                    if (dk && d < D) ak[c2] += dsb * tr_ld(qb + (i0 + ii) * D + d);
                }
            }
        }
    }
#pragma unroll
    for (int c2 = 0; c2 < MAXD / 32; c2++) {
        int d = lane + 32 * c2;
        if (dk && d < D) tr_st(dk + row * D + d, ak[c2] * p.scale);
        if (dv && d < Dv) tr_st(dv + row * Dv + d, av[c2]);
    }
}

static unsigned ab_blocks(int64_t rows) { return (unsigned)((rows + AB_WARPS - 1) / AB_WARPS); }

extern "C" int tr_cu_attention_grad(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                    const void *dy, const struct tr_cu_attn *p, int which, void *out, float *scratch,
                                    struct tr_error *err) {
    if (p->D > AB_WIDE || p->Dv > AB_WIDE)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_grad: head sizes D=%lld, Dv=%lld (at most %d on cuda)",
                            (long long)p->D, (long long)p->Dv, AB_WIDE);
    const bool wide = p->D > AB_MAXD || p->Dv > AB_MAXD;
    const int64_t qrows = p->B * p->H * p->Tq, krows = p->B * p->Hk * p->Tk;
    if (qrows == 0 || krows == 0) {
        int64_t n = which == 0 ? qrows * p->D : which == 1 ? krows * p->D : which == 2 ? krows * p->Dv
                  : qrows * (which == 3 ? p->Kh : p->Kw);
        const int odt = which == 3 ? p->rel_h_dtype : which == 4 ? p->rel_w_dtype : dtype;
        return n ? TR_CU_CHECK(cudaMemsetAsync(out, 0, (size_t)n * (odt == TR_DTYPE_F32 ? 4 : 2), s),
                               "attention_grad: zero fill", err)
                 : TR_OK;
    }
    if (ab_blocks(qrows > krows ? qrows : krows) > 0x7fffffffu)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_grad: too many rows for one grid");
    ab_ctx c = {*p, scratch, scratch + qrows, scratch + 2 * qrows};
    TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_stats_kernel, ab_blocks(qrows), s,
                                     (const T *)q, (const T *)k, (const T *)v, (const T *)dy, c));
    int rc = TR_CU_LAUNCHED("attention_grad stats", err);
    if (rc) return rc;
    if (which >= 3) {
        if (!p->rel_h || (which == 3 ? p->Kh : p->Kw) > AB_MAXK)
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_rel_grad: the bias terms are missing or wider than "
                                "%d (Kh %lld, Kw %lld) on cuda", AB_MAXK, (long long)p->Kh, (long long)p->Kw);
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_drel_kernel, ab_blocks(qrows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy, out, which, c));
        return TR_CU_LAUNCHED("attention_rel_grad drel", err);
    }
    if (which == 0)
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_dq_kernel, ab_blocks(qrows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy, (T *)out, c));
    else
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_dkv_kernel, ab_blocks(krows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy,
                                         which == 1 ? (T *)out : (T *)NULL, which == 2 ? (T *)out : (T *)NULL, c));
    return which == 0 ? TR_CU_LAUNCHED("attention_grad dq", err) : TR_CU_LAUNCHED("attention_grad dk/dv", err);
}

extern "C" int tr_cu_attention_rel_backward(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                            const void *dy, const struct tr_cu_attn *p, void *dq, void *dk, void *dv,
                                            void *drh, void *drw, float *lse, float *delta, float *ps,
                                            int ready, struct tr_error *err) {
    if ((drh && p->Kh > AB_MAXK) || (drw && p->Kw > AB_MAXK) || !p->rel_h)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_rel_backward: the bias terms are missing or wider than "
                            "%d (Kh %lld, Kw %lld) on cuda", AB_MAXK, (long long)p->Kh, (long long)p->Kw);
    // the statistics (computed here once unless ready), and dq, dk, dv where asked
    int rc = tr_cu_attention_backward(s, dtype, q, k, v, dy, p, dq, dk, dv, lse, delta, ps, ready, err);
    const int64_t qrows = p->B * p->H * p->Tq, krows = p->B * p->Hk * p->Tk;
    if (rc || qrows == 0) return rc; // no query rows: the bias terms' gradients are empty too
    const bool wide = p->D > AB_MAXD || p->Dv > AB_MAXD;
    ab_ctx c = {*p, lse, delta, ps};
    void *dr[2] = {drh, drw};
    for (int w = 0; w < 2; w++) {
        if (!dr[w]) continue;
        if (krows == 0) { // no keys: zeros (a grid of Kh x 0 or 0 x Kw)
            const int64_t n = qrows * (w ? p->Kw : p->Kh);
            const size_t e = (w ? p->rel_w_dtype : p->rel_h_dtype) == TR_DTYPE_F32 ? 4 : 2;
            if (n && (rc = TR_CU_CHECK(cudaMemsetAsync(dr[w], 0, (size_t)n * e, s), "attention_rel_backward: zero fill",
                                       err)) != TR_OK)
                return rc;
            continue;
        }
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_drel_kernel, ab_blocks(qrows), s,
                                               (const T *)q, (const T *)k, (const T *)v, (const T *)dy, dr[w], 3 + w, c));
        if ((rc = TR_CU_LAUNCHED("attention_rel_backward drel", err)) != TR_OK) return rc;
    }
    return TR_OK;
}

extern "C" int tr_cu_attention_split_lse(cudaStream_t s, int dtype, const void *q, const void *k,
                                         const struct tr_cu_attn *p, const float *lse_in, float *lse, float *ps,
                                         struct tr_error *err) {
    const int64_t rows = p->B * p->H * p->Tq;
    if (rows == 0) return TR_OK;
    if (p->D > AB_WIDE)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_backward: head size D=%lld (at most %d on cuda)",
                            (long long)p->D, AB_WIDE);
    if (ab_blocks(rows) > 0x7fffffffu)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_backward: too many rows for one grid");
    ab_ctx c = {*p, lse, NULL, ps};
    TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(p->D > AB_MAXD, ab_split_kernel, ab_blocks(rows), s, (const T *)q,
                                           (const T *)k, lse_in, c));
    return TR_CU_LAUNCHED("attention_backward split lse", err);
}

// delta per row, from the saved output: a warp per row.
template <typename T>
__global__ void __launch_bounds__(AB_WARPS * 32)
ab_delta_kernel(const T *y, const T *dy, int64_t rows, int64_t Dv, float *delta) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * AB_WARPS + warp;
    if (row >= rows) return; // whole warps only
    float d = 0.0f;
    for (int64_t c = lane; c < Dv; c += 32) d += tr_ld(y + row * Dv + c) * tr_ld(dy + row * Dv + c);
    d = tr_warp_sum(d);
    if (lane == 0) delta[row] = d;
}

extern "C" int tr_cu_attention_delta(cudaStream_t s, int dtype, const void *y, const void *dy, int64_t rows,
                                     int64_t Dv, float *delta, struct tr_error *err) {
    if (rows == 0) return TR_OK;
    if (ab_blocks(rows) > 0x7fffffffu)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_backward: too many rows for one grid");
    TR_CU_FLOAT_SWITCH(dtype, T, ab_delta_kernel<T><<<ab_blocks(rows), AB_WARPS * 32, 0, s>>>(
                                     (const T *)y, (const T *)dy, rows, Dv, delta));
    return TR_CU_LAUNCHED("attention_backward delta", err);
}

// dq, dk and dv of one call (any of them NULL) on the CUDA-core kernels: the statistics
// once (or as given), dq's pass, and one pass for dk and dv together.
extern "C" int tr_cu_attention_backward(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                        const void *dy, const struct tr_cu_attn *p, void *dq, void *dk, void *dv,
                                        float *lse, float *delta, float *ps, int ready, struct tr_error *err) {
    if (p->D > AB_WIDE || p->Dv > AB_WIDE)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_grad: head sizes D=%lld, Dv=%lld (at most %d on cuda)",
                            (long long)p->D, (long long)p->Dv, AB_WIDE);
    const bool wide = p->D > AB_MAXD || p->Dv > AB_MAXD;
    const int64_t qrows = p->B * p->H * p->Tq, krows = p->B * p->Hk * p->Tk;
    if (qrows == 0 || krows == 0) { // the gradients that have elements are zeros
        const size_t e = dtype == TR_DTYPE_F32 ? 4 : 2;
        const size_t n[3] = {(size_t)(qrows * p->D), (size_t)(krows * p->D), (size_t)(krows * p->Dv)};
        void *o[3] = {dq, dk, dv};
        for (int w = 0; w < 3; w++)
            if (o[w] && n[w]) {
                int rc = TR_CU_CHECK(cudaMemsetAsync(o[w], 0, n[w] * e, s), "attention_backward: zero fill", err);
                if (rc) return rc;
            }
        return TR_OK;
    }
    if (ab_blocks(qrows > krows ? qrows : krows) > 0x7fffffffu)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention_grad: too many rows for one grid");
    ab_ctx c = {*p, lse, delta, ps};
    int rc;
    if (!ready) {
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_stats_kernel, ab_blocks(qrows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy, c));
        if ((rc = TR_CU_LAUNCHED("attention_backward stats", err)) != TR_OK) return rc;
    }
    if (dq) {
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_dq_kernel, ab_blocks(qrows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy, (T *)dq, c));
        if ((rc = TR_CU_LAUNCHED("attention_backward dq", err)) != TR_OK) return rc;
    }
    if (dk || dv) {
        TR_CU_FLOAT_SWITCH(dtype, T, AB_LAUNCH(wide, ab_dkv_kernel, ab_blocks(krows), s,
                                         (const T *)q, (const T *)k, (const T *)v, (const T *)dy, (T *)dk, (T *)dv, c));
        if ((rc = TR_CU_LAUNCHED("attention_backward dk/dv", err)) != TR_OK) return rc;
    }
    return TR_OK;
}
