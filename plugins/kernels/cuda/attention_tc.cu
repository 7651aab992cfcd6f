// Attention forward on tensor cores (attention_fwd_tc), flash style: bf16/f16 data on
// WMMA 16x16x16, f32 data with math = tf32 on WMMA 16x16x8 tf32; D and Dv multiples of 16
// up to 256. The same contract and visibility rules as attention.cu's CUDA-core kernel,
// which stays the fallback (f32 in strict math, other head sizes, ATTENTION_REL, or
// TRIDENT_CUDA_ATTENTION=simple). The path and tiles are attention_plan.h's.
//
// A block takes br = 16·warps query rows of one (batch, head), 16 per warp, and walks the
// keys the block may see (tr_attn_plan_key_span: the causal bound and the sliding window
// skip every tile no row sees; a warp whose 16 rows see none of a tile skips its MMAs) in
// tiles of bc staged in shared memory. Per tile a warp computes S = Q_w·Kᵀ (16 x bc) with
// WMMA into shared memory; two lanes per row apply scale, mask and visibility and the
// online softmax (running max m and sum l in registers), write P in the staged type and
// rescale the row of the f32 output accumulator O (shared); then O += P·V with WMMA.
// The same kernel with STATS writes lse = m + log l and delta = dy·(O/l) per row instead
// of the output: the backward's statistics (attention_bwd_tc.cu), on tensor cores.
// Without STATS, p.lse (when set) gets lse beside the output: ATTENTION_LSE's value, so
// that a training step's backward reads it instead of running the STATS pass.
//
// Tiles (attention_plan.h on an H100/H200, 227 KB per block; warps x bc, 16 query rows
// per warp; tests/test_attention_cuda_plan.c prints the whole table):
//                  D=64            D=128           D=256
//   bf16/f16       4 x 64   70 KB  4 x 64  110 KB  4 x 64  190 KB
//   f32 (tf32)     4 x 64   85 KB  4 x 32  108 KB  4 x 32  204 KB
//
// Expected time on an H200 (FLOPs of the two tile GEMMs, S = Q·Kᵀ and O = P·V, 4·Tq·Tk·D
// per head, at 40-60% of the dense peak: bf16 790, tf32 ~400 TFLOP/s):
//   BERT base fit, B 32, T 512, H 12, D 64: 25.8 GFLOP per layer forward:
//     bf16 55-80 µs, tf32 (f32 data) 110-160 µs per layer; the HBM floor (q, k, v, out
//     once, f32) is 42 µs.
//   Gemma 7B, T 512, H 16 / 16 kv, D 256, causal (tiles of 64 on the diagonal count whole:
//     0.56 of the square): 2.4 GFLOP per sequence per layer: bf16 5-8 µs per sequence
//     per layer (x 28 layers x batch); at T 2048 about 4x per sequence.
// The softmax part (two lanes per row, one exp per score) and the accumulator's trip
// through shared memory per tile are why the lower end is the likelier; tests/gpu/run.sh
// measures it.
#include "attention_wmma.h"

using namespace tr_attn;

template <typename T, bool STATS>
__global__ void __launch_bounds__(128, 4)
attention_fwd_tc(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ out,
                 const T *__restrict__ dy, float *__restrict__ lse, float *__restrict__ delta, tr_cu_attn p,
                 tr_attn_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    const int D = (int)p.D, Dv = (int)p.Dv, BC = pl.bc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    T *Qs = (T *)(smem + pl.off[TR_ATTN_R_ROWS_A]);
    T *Ks = (T *)(smem + pl.off[TR_ATTN_R_TILE_A]);
    T *Vs = (T *)(smem + pl.off[TR_ATTN_R_TILE_B]);
    float *Sw = (float *)(smem + pl.off[TR_ATTN_R_S]) + warp * 16 * pl.ld_s;
    T *Pw = (T *)(smem + pl.off[TR_ATTN_R_P]) + warp * 16 * pl.ld_p;
    float *Ow = (float *)(smem + pl.off[TR_ATTN_R_ACC]) + warp * 16 * pl.ld_acc_dv;
    const T *Qw = Qs + warp * 16 * pl.ld_d;

    const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hk);
    const int64_t q0 = (int64_t)blockIdx.x * pl.br, qw0 = q0 + warp * 16;
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D;
    const T *vb = v + (b * p.Hk + hk) * p.Tk * Dv;

    stage(Qs, pl.ld_d, q + bh * p.Tq * D, q0, p.Tq, pl.br, D);
    zero_warp(Ow, 16, pl.ld_acc_dv, Dv, lane);

    // two lanes per row: row r = lane / 2, columns half, half + 2, ...
    const int r = lane >> 1, half = lane & 1;
    const int64_t qi = qw0 + r;
    float m = -INFINITY, l = 0.0f;

    int64_t kbeg, kend, wbeg, wend;
    tr_attn_plan_key_span(p.Tq, p.Tk, p.causal, p.window, q0, pl.br, &kbeg, &kend);
    tr_attn_plan_key_span(p.Tq, p.Tk, p.causal, p.window, qw0, 16, &wbeg, &wend);
    if (qw0 >= p.Tq) wend = wbeg; // a warp past the last row computes nothing

    for (int64_t t0 = kbeg; t0 < kend; t0 += BC) {
        __syncthreads(); // the previous tile is no longer read
        stage(Ks, pl.ld_d, kb, t0, p.Tk, BC, D);
        stage(Vs, pl.ld_dv, vb, t0, p.Tk, BC, Dv);
        __syncthreads();
        if (!meets(t0, t0 + BC, wbeg, wend)) continue; // warp-uniform

        // S = Q_w · Kᵀ: K (key, d) row-major is Kᵀ column-major with ld ld_d
        for (int n = 0; n < BC / 16; n++) mma_set<T, true>(Sw + n * 16, pl.ld_s, Qw, pl.ld_d, Ks + n * 16 * pl.ld_d, pl.ld_d, D);
        __syncwarp();

        // online softmax on the row: scaled, masked scores back into S, then P
        float mx = -INFINITY;
        for (int c = half; c < BC; c += 2) {
            const int64_t j = t0 + c;
            float x = -INFINITY;
            if (j < p.Tk && qi < p.Tq && visible(p, qi, j)) x = Sw[r * pl.ld_s + c] * p.scale + mask_at(p, b, h, qi, j);
            Sw[r * pl.ld_s + c] = x;
            mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx), mu = mn == -INFINITY ? 0.0f : mn;
        const float corr = __expf(m - mu);
        float sum = 0.0f;
        for (int c = half; c < BC; c += 2) {
            const float e = __expf(Sw[r * pl.ld_s + c] - mu);
            sum += e;
            tr_st(Pw + r * pl.ld_p + c, e);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * corr + sum;
        m = mn;
        for (int c = half; c < Dv; c += 2) Ow[r * pl.ld_acc_dv + c] *= corr;
        __syncwarp();

        // O_w += P_w · V
        for (int n = 0; n < Dv / 16; n++)
            mma_acc<T, false>(Ow + n * 16, pl.ld_acc_dv, Pw, pl.ld_p, Vs + n * 16, pl.ld_dv, BC);
        __syncwarp();
    }

    // O / l in place (zeros for a row that sees no key), then whole rows out
    __syncwarp();
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int c = half; c < Dv; c += 2) Ow[r * pl.ld_acc_dv + c] *= inv;
    __syncwarp();
    if (!STATS) {
        if (p.lse && half == 0 && qi < p.Tq) p.lse[bh * p.Tq + qi] = l > 0.0f ? m + logf(l) : INFINITY;
        for (int idx = lane; out && idx < 16 * Dv; idx += 32) {
            const int rr = idx / Dv, c = idx - rr * Dv;
            if (qw0 + rr < p.Tq) tr_st(out + (bh * p.Tq + qw0 + rr) * Dv + c, Ow[rr * pl.ld_acc_dv + c]);
        }
    } else {
        if (half == 0 && qi < p.Tq) lse[bh * p.Tq + qi] = l > 0.0f ? m + logf(l) : INFINITY;
        for (int rr = 0; rr < 16; rr++) {
            const int64_t row = qw0 + rr;
            if (row >= p.Tq) break; // warp-uniform
            const T *g = dy + (bh * p.Tq + row) * Dv;
            float dl = 0.0f;
            for (int c = lane; c < Dv; c += 32) dl += tr_ld(g + c) * Ow[rr * pl.ld_acc_dv + c];
            dl = tr_warp_sum(dl);
            if (lane == 0) delta[bh * p.Tq + row] = dl;
        }
    }
}

template <typename T, bool STATS>
static int launch_fwd_tc(cudaStream_t s, const void *q, const void *k, const void *v, void *out, const void *dy,
                         float *lse, float *delta, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                         struct tr_error *err) {
    if (pl->smem > 48 * 1024) {
        int rc = TR_CU_CHECK(cudaFuncSetAttribute(attention_fwd_tc<T, STATS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  (int)pl->smem),
                             "attention_fwd_tc: cudaFuncSetAttribute (shared memory)", err);
        if (rc) return rc;
    }
    dim3 grid((unsigned)((p->Tq + pl->br - 1) / pl->br), (unsigned)(p->B * p->H));
    attention_fwd_tc<T, STATS><<<grid, pl->warps * 32, pl->smem, s>>>((const T *)q, (const T *)k, (const T *)v,
                                                                      (T *)out, (const T *)dy, lse, delta, *p, *pl);
    return TR_CU_LAUNCHED("attention_fwd_tc", err);
}

template <bool STATS>
static int fwd_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out, const void *dy,
                  float *lse, float *delta, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                  struct tr_error *err) {
    if (pl->path != TR_ATTN_PATH_TC || pl->kind != TR_ATTN_FWD)
        return tr_error_set(err, TR_ERR_INTERNAL, "attention_fwd_tc: not a tensor-core forward plan");
    if (p->B * p->H * p->Tq == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, return launch_fwd_tc<T, STATS>(s, q, k, v, out, dy, lse, delta, p, pl, err));
    return TR_OK;
}

extern "C" int tr_cu_attention_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out,
                                  const struct tr_cu_attn *p, const struct tr_attn_plan *pl, struct tr_error *err) {
    return fwd_tc<false>(s, dtype, q, k, v, out, NULL, NULL, NULL, p, pl, err);
}

extern "C" int tr_cu_attention_stats_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v,
                                        const void *dy, const struct tr_cu_attn *p, const struct tr_attn_plan *pl,
                                        float *lse, float *delta, struct tr_error *err) {
    return fwd_tc<true>(s, dtype, q, k, v, NULL, dy, lse, delta, p, pl, err);
}
