// Scaled dot-product attention, forward, flash style: the (Tq,Tk) score matrix is never
// stored. A block takes 16 query rows of one (batch, head) (4 warps x 4 rows) and walks
// the keys in tiles of 32, staged in shared memory as f32. Within a warp, lane j scores
// key j of the tile against the warp's 4 rows; the online softmax (running max m, sum l)
// rescales the output accumulator, which each lane holds for Dv/32 columns of its rows.
//
// q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv) -> out (B,H,Tq,Dv); head h reads kv head
// h / (H/Hk). With off = Tk - Tq, query i sees key j iff j <= i + off when causal or
// windowed, and j > i + off - window when window > 0. A row that sees no key is zeros.
// ATTENTION_REL's decomposed bias (p.rel_h) is added to each score as the mask is.
// With p.lse each row's log Σ exp (m + log l; +inf where it sees no key) is written too,
// ATTENTION_LSE's value, and out may be NULL.
//
// This is the first version (CUDA cores, no tensor cores): correct for D, Dv <= 512 (the
// SD VAE's one head of 512 takes DVC 16, at fewer blocks per SM for its registers).
#include "cu_common.cuh"

#define ATT_ROWS 4   // query rows per warp
#define ATT_WARPS 4
#define ATT_BQ (ATT_ROWS * ATT_WARPS)
#define ATT_BK 32

// 5 blocks per SM (96 registers): without the bound ptxas picked 96 for DVC 4 and spilled
// once the lse write kept m live to the end (tests/cuda_spills.sh).
template <typename T, int DVC>  // DVC: Dv/32 rounded up (1, 2, 4, 8 or 16)
__global__ void __launch_bounds__(ATT_WARPS * 32, DVC > 8 ? 2 : 5)
attention_fwd_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ out,
                     tr_cu_attn p) {
    extern __shared__ float smem[];
    const int D = (int)p.D, Dv = (int)p.Dv, Dp = D + 1;
    float *Ks = smem;                       // ATT_BK x (D+1)
    float *Vs = Ks + ATT_BK * Dp;           // ATT_BK x Dv
    float *Qs = Vs + ATT_BK * Dv;           // ATT_BQ x D (pre-scaled)

    const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H;
    const int64_t hk = h / (p.H / p.Hk);
    const int64_t q0 = (int64_t)blockIdx.x * ATT_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t off = p.Tk - p.Tq;
    const bool bounded = p.causal || p.window > 0;

    const T *qb = q + (bh * p.Tq) * D;
    const T *kb = k + ((b * p.Hk + hk) * p.Tk) * D;
    const T *vb = v + ((b * p.Hk + hk) * p.Tk) * Dv;

    for (int i = threadIdx.x; i < ATT_BQ * D; i += blockDim.x) {
        int64_t r = q0 + i / D;
        Qs[i] = r < p.Tq ? tr_ld(qb + r * D + i % D) * p.scale : 0.0f;
    }

    // keys any row of this block may see
    int64_t kbeg, kend;
    tr_attn_key_span(p, q0, ATT_BQ, &kbeg, &kend);

    float m[ATT_ROWS], l[ATT_ROWS], acc[ATT_ROWS][DVC];
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < DVC; c++) acc[r][c] = 0.0f;
    }

    for (int64_t t0 = kbeg - kbeg % ATT_BK; t0 < kend; t0 += ATT_BK) {
        __syncthreads(); // the previous tile is no longer read
        for (int i = threadIdx.x; i < ATT_BK * D; i += blockDim.x) {
            int64_t j = t0 + i / D;
            Ks[(i / D) * Dp + i % D] = j < p.Tk ? tr_ld(kb + j * D + i % D) : 0.0f;
        }
        for (int i = threadIdx.x; i < ATT_BK * Dv; i += blockDim.x) {
            int64_t j = t0 + i / Dv;
            Vs[i] = j < p.Tk ? tr_ld(vb + j * Dv + i % Dv) : 0.0f;
        }
        __syncthreads();

        const int64_t j = t0 + lane;
        float s[ATT_ROWS];
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) s[r] = 0.0f;
        const float *kr = Ks + lane * Dp;
        const float *qw = Qs + warp * ATT_ROWS * D;
        for (int d = 0; d < D; d++) {
            float kv = kr[d];
#pragma unroll
            for (int r = 0; r < ATT_ROWS; r++) s[r] += qw[r * D + d] * kv;
        }
#pragma unroll
        for (int r = 0; r < ATT_ROWS; r++) {
            const int64_t i = q0 + warp * ATT_ROWS + r;
            bool ok = j < p.Tk && i < p.Tq;
            if (bounded) ok = ok && j <= i + off;
            if (p.window > 0) ok = ok && j > i + off - p.window;
            if (ok && p.mask) {
                int64_t mi = b * p.mask_stride[0] + h * p.mask_stride[1] + i * p.mask_stride[2] + j * p.mask_stride[3];
                s[r] += tr_ld_dt(p.mask, p.mask_dtype, mi);
            }
            if (ok && p.rel_h) { // the decomposed bias: key j on grid row j / Kw, column j % Kw
                const int64_t row = bh * p.Tq + i;
                s[r] += tr_ld_dt(p.rel_h, p.rel_h_dtype, row * p.Kh + j / p.Kw) +
                        tr_ld_dt(p.rel_w, p.rel_w_dtype, row * p.Kw + j % p.Kw);
            }
            if (!ok) s[r] = -INFINITY;
            float mn = fmaxf(m[r], tr_warp_max(s[r]));
            float mu = mn == -INFINITY ? 0.0f : mn;
            float pr = __expf(s[r] - mu);
            float corr = __expf(m[r] - mu);
            l[r] = l[r] * corr + tr_warp_sum(pr);
            m[r] = mn;
#pragma unroll
            for (int c = 0; c < DVC; c++) acc[r][c] *= corr;
            s[r] = pr;
        }
        for (int jj = 0; jj < ATT_BK; jj++) {
            const float *vr = Vs + jj * Dv;
            float vv[DVC];
#pragma unroll
            for (int c = 0; c < DVC; c++) vv[c] = lane + 32 * c < Dv ? vr[lane + 32 * c] : 0.0f;
#pragma unroll
            for (int r = 0; r < ATT_ROWS; r++) {
                float pj = __shfl_sync(0xffffffffu, s[r], jj);
#pragma unroll
                for (int c = 0; c < DVC; c++) acc[r][c] += pj * vv[c];
            }
        }
    }

    if (p.lse && lane < ATT_ROWS) { // lane r writes row r's
        float mr = m[0], lr = l[0];
#pragma unroll
        for (int r = 1; r < ATT_ROWS; r++)
            if (lane == r) mr = m[r], lr = l[r];
        const int64_t i = q0 + warp * ATT_ROWS + lane;
        if (i < p.Tq) p.lse[bh * p.Tq + i] = lr > 0.0f ? mr + logf(lr) : INFINITY;
    }
    if (!out) return;
#pragma unroll
    for (int r = 0; r < ATT_ROWS; r++) {
        const int64_t i = q0 + warp * ATT_ROWS + r;
        if (i >= p.Tq) continue;
        float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        T *o = out + (bh * p.Tq + i) * Dv;
#pragma unroll
        for (int c = 0; c < DVC; c++)
            if (lane + 32 * c < Dv) tr_st(o + lane + 32 * c, acc[r][c] * inv);
    }
}

template <typename T, int DVC>
static int launch_attention(cudaStream_t s, const void *q, const void *k, const void *v, void *out,
                            const struct tr_cu_attn *p, struct tr_error *err) {
    size_t smem = ((size_t)ATT_BK * (p->D + 1) + (size_t)ATT_BK * p->Dv + (size_t)ATT_BQ * p->D) * sizeof(float);
    if (smem > 48 * 1024) {
        int rc = TR_CU_CHECK(cudaFuncSetAttribute(attention_fwd_kernel<T, DVC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  (int)smem),
                             "attention: cudaFuncSetAttribute (shared memory)", err);
        if (rc) return rc;
    }
    dim3 grid((unsigned)((p->Tq + ATT_BQ - 1) / ATT_BQ), (unsigned)(p->B * p->H));
    attention_fwd_kernel<T, DVC><<<grid, ATT_WARPS * 32, smem, s>>>((const T *)q, (const T *)k, (const T *)v, (T *)out, *p);
    return TR_CU_LAUNCHED("attention_fwd", err);
}

extern "C" int tr_cu_attention(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out,
                               const struct tr_cu_attn *p, struct tr_error *err) {
    if (p->B * p->H * p->Tq * (p->lse ? 1 : p->Dv) == 0) return TR_OK;
    if (p->D > 512 || p->Dv > 512)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention: head sizes D=%lld, Dv=%lld (at most 512 on cuda)",
                            (long long)p->D, (long long)p->Dv);
    if (p->B * p->H > 65535 || (p->Tq + ATT_BQ - 1) / ATT_BQ > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "attention: B*H=%lld (at most 65535 on cuda)",
                            (long long)(p->B * p->H));
    int rc;
    int dvc = (int)((p->Dv + 31) / 32);
    TR_CU_FLOAT_SWITCH(dtype, T,
                       rc = dvc <= 1   ? launch_attention<T, 1>(s, q, k, v, out, p, err)
                            : dvc <= 2 ? launch_attention<T, 2>(s, q, k, v, out, p, err)
                            : dvc <= 4 ? launch_attention<T, 4>(s, q, k, v, out, p, err)
                            : dvc <= 8 ? launch_attention<T, 8>(s, q, k, v, out, p, err)
                                       : launch_attention<T, 16>(s, q, k, v, out, p, err));
    return rc;
}
