// Attention forward on tensor cores (attention_fwd_kernel2): bf16/f16, D and Dv multiples
// of 16 up to 128. The same contract and visibility rules as attention.cu's kernel, which
// stays the fallback (f32, other head sizes, or TRIDENT_CUDA_ATTENTION=simple).
//
// A block takes 64 query rows of one (batch, head), 16 per warp, and walks the keys in
// tiles of 64 staged in shared memory. Per tile each warp computes S = Q·Kᵀ (16×64) with
// WMMA 16×16×16 into shared memory; two lanes per row apply scale, mask and visibility and
// the online softmax (running max m and sum l per row, in registers), write P in the
// input dtype, and rescale the row's f32 output accumulator O (in shared memory); then
// O += P·V with WMMA. The (Tq,Tk) matrix is never stored beyond one 16×64 tile per warp.
#include <mma.h>
#include "cu_common.cuh"

using namespace nvcuda;

#define TC_WARPS 4
#define TC_BQ (16 * TC_WARPS)
#define TC_BK 64

template <typename T>
__global__ void __launch_bounds__(TC_WARPS * 32)
attention_fwd_kernel2(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ out,
                      tr_cu_attn p) {
    extern __shared__ __align__(32) unsigned char smem_raw[];
    const int D = (int)p.D, Dv = (int)p.Dv;
    T *Qs = (T *)smem_raw;                        // TC_BQ x D
    T *Ks = Qs + TC_BQ * D;                       // TC_BK x D
    T *Vs = Ks + TC_BK * D;                       // TC_BK x Dv
    float *Ss = (float *)(Vs + TC_BK * Dv);       // TC_WARPS x 16 x TC_BK
    float *Os = Ss + TC_WARPS * 16 * TC_BK;       // TC_WARPS x 16 x Dv
    T *Ps = (T *)(Os + TC_WARPS * 16 * Dv);       // TC_WARPS x 16 x TC_BK

    const int64_t bh = blockIdx.y, b = bh / p.H, h = bh % p.H, hk = h / (p.H / p.Hk);
    const int64_t q0 = (int64_t)blockIdx.x * TC_BQ;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t off = p.Tk - p.Tq;
    const bool bounded = p.causal || p.window > 0;
    const T *qb = q + bh * p.Tq * D;
    const T *kb = k + (b * p.Hk + hk) * p.Tk * D;
    const T *vb = v + (b * p.Hk + hk) * p.Tk * Dv;
    const T zero = T(0.0f);

    for (int i = threadIdx.x; i < TC_BQ * D; i += blockDim.x) {
        int64_t r = q0 + i / D;
        Qs[i] = r < p.Tq ? qb[r * D + i % D] : zero;
    }
    float *Sw = Ss + warp * 16 * TC_BK, *Ow = Os + warp * 16 * Dv;
    T *Pw = Ps + warp * 16 * TC_BK;
    for (int i = lane; i < 16 * Dv; i += 32) Ow[i] = 0.0f;

    // two lanes per row: row r = lane / 2, columns half*32 .. half*32+31 of a tile
    const int r = lane >> 1, half = lane & 1;
    const int64_t qi = q0 + warp * 16 + r;
    float m = -INFINITY, l = 0.0f;

    int64_t kbeg, kend;
    tr_attn_key_span(p, q0, TC_BQ, &kbeg, &kend);

    for (int64_t t0 = kbeg - kbeg % TC_BK; t0 < kend; t0 += TC_BK) {
        __syncthreads(); // the previous tile is no longer read
        for (int i = threadIdx.x; i < TC_BK * D; i += blockDim.x) {
            int64_t j = t0 + i / D;
            Ks[i] = j < p.Tk ? kb[j * D + i % D] : zero;
        }
        for (int i = threadIdx.x; i < TC_BK * Dv; i += blockDim.x) {
            int64_t j = t0 + i / Dv;
            Vs[i] = j < p.Tk ? vb[j * Dv + i % Dv] : zero;
        }
        __syncthreads();

        // S = Q_w · Kᵀ: K (key, d) row-major is Kᵀ (d, key) column-major with ld D
        for (int n = 0; n < TC_BK / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.0f);
            for (int kd = 0; kd < D / 16; kd++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
                wmma::load_matrix_sync(fa, Qs + warp * 16 * D + kd * 16, D);
                wmma::load_matrix_sync(fb, Ks + n * 16 * D + kd * 16, D);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Sw + n * 16, acc, TC_BK, wmma::mem_row_major);
        }
        __syncwarp();

        // online softmax on the row's half tile
        float s[32];
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            const int64_t j = t0 + half * 32 + c;
            bool ok = j < p.Tk && qi < p.Tq;
            if (bounded) ok = ok && j <= qi + off;
            if (p.window > 0) ok = ok && j > qi + off - p.window;
            float x = -INFINITY;
            if (ok) {
                x = Sw[r * TC_BK + half * 32 + c] * p.scale;
                if (p.mask)
                    x += tr_ld_dt(p.mask, p.mask_dtype,
                                  b * p.mask_stride[0] + h * p.mask_stride[1] + qi * p.mask_stride[2] + j * p.mask_stride[3]);
            }
            s[c] = x;
            mx = fmaxf(mx, x);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mn = fmaxf(m, mx), mu = mn == -INFINITY ? 0.0f : mn;
        const float corr = __expf(m - mu);
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < 32; c++) {
            float e = __expf(s[c] - mu);
            sum += e;
            tr_st(Pw + r * TC_BK + half * 32 + c, e);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * corr + sum;
        m = mn;
        for (int c = half; c < Dv; c += 2) Ow[r * Dv + c] *= corr;
        __syncwarp();

        // O_w += P_w · V
        for (int n = 0; n < Dv / 16; n++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::load_matrix_sync(acc, Ow + n * 16, Dv, wmma::mem_row_major);
            for (int kk = 0; kk < TC_BK / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
                wmma::load_matrix_sync(fa, Pw + kk * 16, TC_BK);
                wmma::load_matrix_sync(fb, Vs + kk * 16 * Dv + n * 16, Dv);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ow + n * 16, acc, Dv, wmma::mem_row_major);
        }
        __syncwarp();
    }

    __syncwarp(); // Ow complete (also when no tile was visited)
    if (qi < p.Tq) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        T *o = out + (bh * p.Tq + qi) * Dv;
        for (int c = half; c < Dv; c += 2) tr_st(o + c, Ow[r * Dv + c] * inv);
    }
}

static size_t tc_smem(const struct tr_cu_attn *p) {
    size_t e = 2; // bf16 / f16
    return (size_t)TC_BQ * p->D * e + (size_t)TC_BK * p->D * e + (size_t)TC_BK * p->Dv * e +
           (size_t)TC_WARPS * 16 * TC_BK * 4 + (size_t)TC_WARPS * 16 * p->Dv * 4 + (size_t)TC_WARPS * 16 * TC_BK * e;
}

extern "C" int tr_cu_attention_tc_fits(int dtype, const struct tr_cu_attn *p) {
    return (dtype == TR_DTYPE_BF16 || dtype == TR_DTYPE_F16) && p->D % 16 == 0 && p->Dv % 16 == 0 && p->D <= 128 &&
           p->Dv <= 128 && p->D > 0 && p->Dv > 0 && p->B * p->H <= 65535;
}

template <typename T>
static int launch_tc(cudaStream_t s, const void *q, const void *k, const void *v, void *out, const struct tr_cu_attn *p,
                     struct tr_error *err) {
    size_t smem = tc_smem(p);
    if (smem > 48 * 1024) {
        int rc = TR_CU_CHECK(cudaFuncSetAttribute(attention_fwd_kernel2<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  (int)smem),
                             "attention_fwd_kernel2: cudaFuncSetAttribute (shared memory)", err);
        if (rc) return rc;
    }
    dim3 grid((unsigned)((p->Tq + TC_BQ - 1) / TC_BQ), (unsigned)(p->B * p->H));
    attention_fwd_kernel2<T><<<grid, TC_WARPS * 32, smem, s>>>((const T *)q, (const T *)k, (const T *)v, (T *)out, *p);
    return TR_CU_LAUNCHED("attention_fwd_kernel2", err);
}

extern "C" int tr_cu_attention_tc(cudaStream_t s, int dtype, const void *q, const void *k, const void *v, void *out,
                                  const struct tr_cu_attn *p, struct tr_error *err) {
    if (p->B * p->H * p->Tq * p->Dv == 0) return TR_OK;
    if (dtype == TR_DTYPE_BF16) return launch_tc<tr_bf16>(s, q, k, v, out, p, err);
    return launch_tc<tr_f16>(s, q, k, v, out, p, err);
}
