// Attention backward on tensor cores, flash style (FlashAttention-2's split): nothing of
// size (Tq,Tk) is stored, no atomics, the same result on every run (docs/determinism.md).
// bf16/f16 data on WMMA 16x16x16, f32 data with math = tf32 on WMMA 16x16x8 tf32; D and Dv
// multiples of 16 up to 256. Three launches:
//   1. statistics: lse_i = log Σ_j exp(s_ij) and delta_i = dy_i · out_i per query row.
//      In a training step the forward saved lse (ATTENTION_LSE, written by its own pass)
//      and its output, so this is delta alone from them (tr_cu_attention_delta, one read
//      of dy and out); without them, the forward's kernel again (attention_tc.cu, STATS);
//   2. attention_bwd_dkdv_tc: a block per br keys of one (b, kv head); for every query head
//      of the group and every query tile of bc rows that may see the block's keys
//      (tr_attn_plan_query_span), per warp (16 keys): Sᵀ = K_w·Qᵀ, Pᵀ = exp(Sᵀ·scale +
//      mask − lse)·ps, dPᵀ = V_w·dyᵀ, dSᵀ = Pᵀ ⊙ (dPᵀ − delta); dV_w += Pᵀ·dy, dK_w += dSᵀ·Q,
//      accumulated in f32 in shared memory; dK = scale·dK_w;
//   3. attention_bwd_dq_tc: a block per br queries of one (b, h); for every key tile the
//      block may see (tr_attn_plan_key_span): S, P, dP = dy_w·Vᵀ, dS, dQ_w += dS·K;
//      dQ = scale·dQ_w.
// K/V (dkdv) and Q/dy (dq) of the block stay in shared memory; the other side is staged
// a tile at a time. P and dS enter the MMAs in the data's type (tf32-rounded for f32). A
// query row that sees no key (lse = +inf) gets zero gradients; ps is 1 but for a row of
// huge scores (lse = m, ps = 1/l: attention_bwd.cu). Visibility and masks are
// the forward's (ops.h ATTENTION, attention_plan.h).
//
// Tiles (attention_plan.h on an H100/H200, 227 KB per block; warps x bc, 16 rows per
// warp; tests/test_attention_cuda_plan.c prints the whole table):
//                      dkdv                dq
//   bf16/f16 D=64      4 x 32   89 KB      4 x 64   96 KB
//   bf16/f16 D=128     4 x 64  187 KB      4 x 32  107 KB
//   bf16/f16 D=256     2 x 64  191 KB      4 x 32  187 KB
//   f32 tf32 D=64      4 x 32  103 KB      4 x 32   86 KB
//   f32 tf32 D=128     4 x 32  183 KB      4 x 64  199 KB
//   f32 tf32 D=256     2 x 32  204 KB      2 x 32  172 KB
//
// Expected time on an H200: nine tile GEMMs of 2·Tq·Tk·D per head (statistics: S, P·V;
// dkdv: Sᵀ, dPᵀ, dV, dK; dq: S, dP, dQ; S and dP are computed twice rather than stored or
// summed with atomics), at 40-60% of the dense peak (bf16 790, tf32 ~400 TFLOP/s):
//   BERT base fit (B 32, T 512, H 12, D 64): 116 GFLOP per layer:
//     bf16 245-370 µs, tf32 (f32 data) 480-730 µs per layer, against ~225 ms estimated
//     for the CUDA-core kernels of attention_bwd.cu.
//   Gemma 7B (T 512, H 16 / 16 kv, D 256, causal, 0.56 of the square): 10.9 GFLOP per
//     sequence per layer: bf16 23-34 µs per sequence per layer (x 28 layers x batch).
#include "attention_wmma.h"

using namespace tr_attn;

// dk and dv of br keys of one (b, kv head); dk or dv may be NULL (not asked for).
template <typename T>
__global__ void __launch_bounds__(128, 4)
attention_bwd_dkdv_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                      const T *__restrict__ dy, const float *__restrict__ lse, const float *__restrict__ delta,
                      const float *__restrict__ ps, T *__restrict__ dk, T *__restrict__ dv, tr_cu_attn p,
                      tr_attn_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int D = (int)p.D, Dv = (int)p.Dv, BC = pl.bc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Ks = (T *)(smem + pl.off[TR_ATTN_R_ROWS_A]);
    T *Vs = (T *)(smem + pl.off[TR_ATTN_R_ROWS_B]);
    T *Qs = (T *)(smem + pl.off[TR_ATTN_R_TILE_A]);
    T *Gs = (T *)(smem + pl.off[TR_ATTN_R_TILE_B]); // dy
    float *Sw = (float *)(smem + pl.off[TR_ATTN_R_S]) + warp * 16 * pl.ld_s;
    float *DPw = (float *)(smem + pl.off[TR_ATTN_R_DP]) + warp * 16 * pl.ld_s;
    T *Pw = (T *)(smem + pl.off[TR_ATTN_R_P]) + warp * 16 * pl.ld_p;
    T *DSw = (T *)(smem + pl.off[TR_ATTN_R_DS]) + warp * 16 * pl.ld_p;
    float *dKw = (float *)(smem + pl.off[TR_ATTN_R_ACC]) + warp * 16 * pl.ld_acc_d;
    float *dVw = (float *)(smem + pl.off[TR_ATTN_R_ACC2]) + warp * 16 * pl.ld_acc_dv;
    float *lse_s = (float *)(smem + pl.off[TR_ATTN_R_STAT]), *delta_s = lse_s + BC, *ps_s = delta_s + BC;
    const T *Kw = Ks + warp * 16 * pl.ld_d, *Vw = Vs + warp * 16 * pl.ld_dv;

    const int64_t bhk = blockIdx.y, b = bhk / p.Hk, hk = bhk % p.Hk, group = p.H / p.Hk;
    const int64_t j0 = (int64_t)blockIdx.x * pl.br, jw0 = j0 + warp * 16;
    stage(Ks, pl.ld_d, k + bhk * p.Tk * D, j0, p.Tk, pl.br, D);
    stage(Vs, pl.ld_dv, v + bhk * p.Tk * Dv, j0, p.Tk, pl.br, Dv);
    zero_warp(dKw, 16, pl.ld_acc_d, D, lane);
    zero_warp(dVw, 16, pl.ld_acc_dv, Dv, lane);

    const int r = lane >> 1, half = lane & 1; // two lanes per key row
    const int64_t j = jw0 + r;
    int64_t ibeg, iend, wbeg, wend;
    tr_attn_plan_query_span(p.Tq, p.Tk, p.causal, p.window, j0, pl.br, &ibeg, &iend);
    tr_attn_plan_query_span(p.Tq, p.Tk, p.causal, p.window, jw0, 16, &wbeg, &wend);
    if (jw0 >= p.Tk) wend = wbeg;

    for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
        const int64_t qrow0 = (b * p.H + h) * p.Tq;
        for (int64_t i0 = ibeg; i0 < iend; i0 += BC) {
            __syncthreads(); // the previous tile is no longer read
            stage(Qs, pl.ld_d, q + qrow0 * D, i0, p.Tq, BC, D);
            stage(Gs, pl.ld_dv, dy + qrow0 * Dv, i0, p.Tq, BC, Dv);
            for (int c = threadIdx.x; c < BC; c += blockDim.x) {
                const bool in = i0 + c < p.Tq;
                lse_s[c] = in ? lse[qrow0 + i0 + c] : INFINITY;
                delta_s[c] = in ? delta[qrow0 + i0 + c] : 0.0f;
                ps_s[c] = in ? ps[qrow0 + i0 + c] : 0.0f;
            }
            __syncthreads();
            if (!meets(i0, i0 + BC, wbeg, wend)) continue; // warp-uniform

            // Sᵀ = K_w · Qᵀ and dPᵀ = V_w · dyᵀ (16 x bc each)
            for (int n = 0; n < BC / 16; n++) {
                mma_set<T, true>(Sw + n * 16, pl.ld_s, Kw, pl.ld_d, Qs + n * 16 * pl.ld_d, pl.ld_d, D);
                mma_set<T, true>(DPw + n * 16, pl.ld_s, Vw, pl.ld_dv, Gs + n * 16 * pl.ld_dv, pl.ld_dv, Dv);
            }
            __syncwarp();
            for (int c = half; c < BC; c += 2) {
                const int64_t i = i0 + c;
                const float li = lse_s[c];
                float pr = 0.0f, ds = 0.0f;
                if (j < p.Tk && li != INFINITY && visible(p, i, j)) { // i < Tq: lse_s is +inf past it
                    pr = __expf(Sw[r * pl.ld_s + c] * p.scale + mask_at(p, b, h, i, j) - li) * ps_s[c];
                    ds = pr * (DPw[r * pl.ld_s + c] - delta_s[c]);
                }
                tr_st(Pw + r * pl.ld_p + c, pr);
                tr_st(DSw + r * pl.ld_p + c, ds);
            }
            __syncwarp();
            // dV_w += Pᵀ · dy, dK_w += dSᵀ · Q
            for (int n = 0; n < Dv / 16; n++)
                mma_acc<T, false>(dVw + n * 16, pl.ld_acc_dv, Pw, pl.ld_p, Gs + n * 16, pl.ld_dv, BC);
            for (int n = 0; n < D / 16; n++)
                mma_acc<T, false>(dKw + n * 16, pl.ld_acc_d, DSw, pl.ld_p, Qs + n * 16, pl.ld_d, BC);
            __syncwarp();
        }
    }

    __syncwarp();
    for (int idx = lane; idx < 16 * D && dk; idx += 32) {
        const int rr = idx / D, c = idx - rr * D;
        if (jw0 + rr < p.Tk) tr_st(dk + (bhk * p.Tk + jw0 + rr) * D + c, dKw[rr * pl.ld_acc_d + c] * p.scale);
    }
    for (int idx = lane; idx < 16 * Dv && dv; idx += 32) {
        const int rr = idx / Dv, c = idx - rr * Dv;
        if (jw0 + rr < p.Tk) tr_st(dv + (bhk * p.Tk + jw0 + rr) * Dv + c, dVw[rr * pl.ld_acc_dv + c]);
    }
}

// dq of br queries of one (b, h).
template <typename T>
__global__ void __launch_bounds__(128, 4)
attention_bwd_dq_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                    const T *__restrict__ dy, const float *__restrict__ lse, const float *__restrict__ delta,
                    const float *__restrict__ ps, T *__restrict__ dq, tr_cu_attn p, tr_attn_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int D = (int)p.D, Dv = (int)p.Dv, BC = pl.bc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Qs = (T *)(smem + pl.off[TR_ATTN_R_ROWS_A]);
    T *Gs = (T *)(smem + pl.off[TR_ATTN_R_ROWS_B]); // dy
    T *Ks = (T *)(smem + pl.off[TR_ATTN_R_TILE_A]);
    T *Vs = (T *)(smem + pl.off[TR_ATTN_R_TILE_B]);
    float *Sw = (float *)(smem + pl.off[TR_ATTN_R_S]) + warp * 16 * pl.ld_s;
    float *DPw = (float *)(smem + pl.off[TR_ATTN_R_DP]) + warp * 16 * pl.ld_s;
    T *DSw = (T *)(smem + pl.off[TR_ATTN_R_DS]) + warp * 16 * pl.ld_p;
    float *dQw = (float *)(smem + pl.off[TR_ATTN_R_ACC]) + warp * 16 * pl.ld_acc_d;
    const T *Qw = Qs + warp * 16 * pl.ld_d, *Gw = Gs + warp * 16 * pl.ld_dv;

    const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hk);
    const int64_t q0 = (int64_t)blockIdx.x * pl.br, qw0 = q0 + warp * 16;
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D;
    const T *vb = v + (b * p.Hk + hk) * p.Tk * Dv;
    stage(Qs, pl.ld_d, q + bh * p.Tq * D, q0, p.Tq, pl.br, D);
    stage(Gs, pl.ld_dv, dy + bh * p.Tq * Dv, q0, p.Tq, pl.br, Dv);
    zero_warp(dQw, 16, pl.ld_acc_d, D, lane);

    const int r = lane >> 1, half = lane & 1; // two lanes per query row
    const int64_t qi = qw0 + r;
    const float li = qi < p.Tq ? lse[bh * p.Tq + qi] : INFINITY;
    const float di = qi < p.Tq ? delta[bh * p.Tq + qi] : 0.0f;
    const float pi = qi < p.Tq ? ps[bh * p.Tq + qi] : 0.0f;
    int64_t kbeg, kend, wbeg, wend;
    tr_attn_plan_key_span(p.Tq, p.Tk, p.causal, p.window, q0, pl.br, &kbeg, &kend);
    tr_attn_plan_key_span(p.Tq, p.Tk, p.causal, p.window, qw0, 16, &wbeg, &wend);
    if (qw0 >= p.Tq) wend = wbeg;

    for (int64_t t0 = kbeg; t0 < kend; t0 += BC) {
        __syncthreads();
        stage(Ks, pl.ld_d, kb, t0, p.Tk, BC, D);
        stage(Vs, pl.ld_dv, vb, t0, p.Tk, BC, Dv);
        __syncthreads();
        if (!meets(t0, t0 + BC, wbeg, wend)) continue; // warp-uniform

        // S = Q_w · Kᵀ and dP = dy_w · Vᵀ (16 x bc each)
        for (int n = 0; n < BC / 16; n++) {
            mma_set<T, true>(Sw + n * 16, pl.ld_s, Qw, pl.ld_d, Ks + n * 16 * pl.ld_d, pl.ld_d, D);
            mma_set<T, true>(DPw + n * 16, pl.ld_s, Gw, pl.ld_dv, Vs + n * 16 * pl.ld_dv, pl.ld_dv, Dv);
        }
        __syncwarp();
        for (int c = half; c < BC; c += 2) {
            const int64_t j = t0 + c;
            float ds = 0.0f;
            if (j < p.Tk && li != INFINITY && visible(p, qi, j)) { // qi < Tq: li is +inf past it
                const float pr = __expf(Sw[r * pl.ld_s + c] * p.scale + mask_at(p, b, h, qi, j) - li) * pi;
                ds = pr * (DPw[r * pl.ld_s + c] - di);
            }
            tr_st(DSw + r * pl.ld_p + c, ds);
        }
        __syncwarp();
        // dQ_w += dS · K
        for (int n = 0; n < D / 16; n++)
            mma_acc<T, false>(dQw + n * 16, pl.ld_acc_d, DSw, pl.ld_p, Ks + n * 16, pl.ld_d, BC);
        __syncwarp();
    }

    __syncwarp();
    for (int idx = lane; idx < 16 * D; idx += 32) {
        const int rr = idx / D, c = idx - rr * D;
        if (qw0 + rr < p.Tq) tr_st(dq + (bh * p.Tq + qw0 + rr) * D + c, dQw[rr * pl.ld_acc_d + c] * p.scale);
    }
}

template <typename K>
static int set_smem(K kernel, size_t smem, const char *what, struct tr_error *err) {
    if (smem <= 48 * 1024) return TR_OK;
    return tr_cu_status(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), what,
                        __FILE__, __LINE__, err);
}

template <typename T>
static int launch_dkdv(cudaStream_t s, const void *q, const void *k, const void *v, const void *dy, const float *lse,
                       const float *delta, const float *ps, void *dk, void *dv, const struct tr_cu_attn *p,
                       const struct tr_attn_plan *pl, struct tr_error *err) {
    int rc = set_smem(attention_bwd_dkdv_tc<T>, pl->smem, "attention_bwd_dkdv_tc: cudaFuncSetAttribute", err);
    if (rc) return rc;
    dim3 grid((unsigned)((p->Tk + pl->br - 1) / pl->br), (unsigned)(p->B * p->Hk));
    attention_bwd_dkdv_tc<T><<<grid, pl->warps * 32, pl->smem, s>>>((const T *)q, (const T *)k, (const T *)v,
                                                                    (const T *)dy, lse, delta, ps, (T *)dk, (T *)dv, *p,
                                                                    *pl);
    return TR_CU_LAUNCHED("attention_bwd_dkdv_tc", err);
}

template <typename T>
static int launch_dq(cudaStream_t s, const void *q, const void *k, const void *v, const void *dy, const float *lse,
                     const float *delta, const float *ps, void *dq, const struct tr_cu_attn *p,
                     const struct tr_attn_plan *pl, struct tr_error *err) {
    int rc = set_smem(attention_bwd_dq_tc<T>, pl->smem, "attention_bwd_dq_tc: cudaFuncSetAttribute", err);
    if (rc) return rc;
    dim3 grid((unsigned)((p->Tq + pl->br - 1) / pl->br), (unsigned)(p->B * p->H));
    attention_bwd_dq_tc<T><<<grid, pl->warps * 32, pl->smem, s>>>((const T *)q, (const T *)k, (const T *)v,
                                                                  (const T *)dy, lse, delta, ps, (T *)dq, *p, *pl);
    return TR_CU_LAUNCHED("attention_bwd_dq_tc", err);
}

extern "C" int tr_cu_attention_bwd_dkdv_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                           const void *dy, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                                           const float *lse, const float *delta, const float *ps, void *dk,
                                           void *dv, struct tr_error *err) {
    if (pl->path != TR_ATTN_PATH_TC || pl->kind != TR_ATTN_DKDV)
        return tr_error_set(err, TR_ERR_INTERNAL, "attention_bwd_dkdv_tc: not a tensor-core dk/dv plan");
    if (p->B * p->Hk * p->Tk == 0 || (!dk && !dv)) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, return launch_dkdv<T>(s, q, k, v, dy, lse, delta, ps, dk, dv, p, pl, err));
    return TR_OK;
}

extern "C" int tr_cu_attention_bwd_dq_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                         const void *dy, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                                         const float *lse, const float *delta, const float *ps, void *dq,
                                         struct tr_error *err) {
    if (pl->path != TR_ATTN_PATH_TC || pl->kind != TR_ATTN_DQ)
        return tr_error_set(err, TR_ERR_INTERNAL, "attention_bwd_dq_tc: not a tensor-core dq plan");
    if (p->B * p->H * p->Tq == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, return launch_dq<T>(s, q, k, v, dy, lse, delta, ps, dq, p, pl, err));
    return TR_OK;
}
