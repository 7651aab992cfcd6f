// Stable Diffusion's ops on cuda (ops.h): the convolution's im2col (its GEMM is cuBLASLt's,
// dispatch.c), group norm (with the fused SiLU) and the timestep embedding, rounding as the
// cpu kernels do: statistics and the affine in f32, one rounding to the storage dtype.
#include "cu_common.cuh"

// col [nb·OH·OW, Ci·KH·KW] of images n0 .. n0+nb of x (N,H,W,Ci): column (ci·KH + kh)·KW + kw,
// the flattening of torch's (Cout, Cin, KH, KW) weights, so out = col · Wᵀ; zeros outside.
template <typename T>
__global__ void im2col_kernel(const T *x, T *col, int64_t n0, int64_t nb, int64_t H, int64_t W, int64_t Ci,
                              int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride, int64_t pad,
                              int64_t dil) {
    const int64_t K = Ci * KH * KW, total = nb * OH * OW * K;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i % K, m = i / K;
        const int64_t kw = k % KW, kh = (k / KW) % KH, ci = k / (KW * KH);
        const int64_t ow = m % OW, oh = (m / OW) % OH, n = n0 + m / (OW * OH);
        const int64_t h = oh * stride - pad + kh * dil, w = ow * stride - pad + kw * dil;
        float v = 0.0f;
        if (h >= 0 && h < H && w >= 0 && w < W) v = tr_ld(x + ((n * H + h) * W + w) * Ci + ci);
        tr_st(col + i, v);
    }
}

extern "C" int tr_cu_im2col(cudaStream_t s, int dtype, const void *x, void *col, int64_t n0, int64_t nb, int64_t H,
                            int64_t W, int64_t Ci, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride,
                            int64_t pad, int64_t dil, struct tr_error *err) {
    const int64_t total = nb * OH * OW * Ci * KH * KW;
    if (total == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, im2col_kernel<T><<<tr_cu_blocks(total), 256, 0, s>>>(
                                     (const T *)x, (T *)col, n0, nb, H, W, Ci, KH, KW, OH, OW, stride, pad, dil));
    return TR_CU_LAUNCHED("conv2d im2col", err);
}

// One block per (n, group): the mean, then the variance of the deviations (two passes, as
// the cpu's, so a large group loses nothing to cancellation), then y = x̂·γ + β, SiLU after.
template <typename T>
__global__ void group_norm_kernel(const T *x, const void *gamma, int gdt, const void *beta, int bdt, T *y, int64_t HW,
                                  int64_t C, int64_t G, float eps, int silu) {
    __shared__ float sh[32];
    const int64_t n = blockIdx.x / G, g = blockIdx.x % G, cg = C / G, M = HW * cg;
    const T *xb = x + n * HW * C + g * cg;
    T *yb = y + n * HW * C + g * cg;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += tr_ld(xb + (i / cg) * C + i % cg);
    const float mean = tr_block_sum(s, sh) / (float)M;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const float d = tr_ld(xb + (i / cg) * C + i % cg) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(tr_block_sum(q, sh) / (float)M + eps);
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const int64_t c = i % cg, o = (i / cg) * C + c;
        float v = (tr_ld(xb + o) - mean) * rstd * tr_ld_dt(gamma, gdt, g * cg + c) + tr_ld_dt(beta, bdt, g * cg + c);
        if (silu) v = v / (1.0f + expf(-v));
        tr_st(yb + o, v);
    }
}

extern "C" int tr_cu_group_norm(cudaStream_t s, int dtype, const void *x, const void *gamma, int gdt, const void *beta,
                                int bdt, void *y, int64_t N, int64_t HW, int64_t C, int64_t G, float eps, int silu,
                                struct tr_error *err) {
    if (N * HW * C == 0) return TR_OK;
    if (N * G > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "group_norm: %lld groups (at most 2^31-1 on cuda)",
                            (long long)(N * G));
    TR_CU_FLOAT_SWITCH(dtype, T, group_norm_kernel<T><<<(unsigned)(N * G), 256, 0, s>>>(
                                     (const T *)x, gamma, gdt, beta, bdt, (T *)y, HW, C, G, eps, silu));
    return TR_CU_LAUNCHED("group_norm", err);
}

// One thread per (n, i < D/2): sin and cos of t·f_i, computed in double as the cpu does.
template <typename T>
__global__ void timestep_kernel(const T *t, T *out, int64_t N, int64_t D, int flip, double shift, double period) {
    const int64_t h = D / 2;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < N * h; j += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = j / h, i = j % h;
        const double a = (double)tr_ld(t + n) * exp(-log(period) * (double)i / ((double)h - shift));
        tr_st(out + n * D + (flip ? h : 0) + i, (float)sin(a));
        tr_st(out + n * D + (flip ? 0 : h) + i, (float)cos(a));
    }
}

extern "C" int tr_cu_timestep_embedding(cudaStream_t s, int dtype, const void *t, void *out, int64_t N, int64_t D,
                                        int flip, double shift, double period, struct tr_error *err) {
    if (N * D == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, timestep_kernel<T><<<tr_cu_blocks(N * D / 2), 256, 0, s>>>(
                                     (const T *)t, (T *)out, N, D, flip, shift, period));
    return TR_CU_LAUNCHED("timestep_embedding", err);
}
