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

// The statistics of group (n, g): the mean, then the variance of the deviations (two
// passes, as the cpu's, so a large group loses nothing to cancellation), as 1/std.
template <typename T>
__device__ __forceinline__ void gn_stats(const T *xb, int64_t HW, int64_t C, int64_t cg, float eps, float *sh,
                                         float *mean, float *rstd) {
    const int64_t M = HW * cg;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += tr_ld(xb + (i / cg) * C + i % cg);
    const float m = tr_block_sum(s, sh) / (float)M;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const float d = tr_ld(xb + (i / cg) * C + i % cg) - m;
        q += d * d;
    }
    *mean = m;
    *rstd = rsqrtf(tr_block_sum(q, sh) / (float)M + eps);
}

// One block per (n, group): its statistics, then y = x̂·γ + β, SiLU after.
template <typename T>
__global__ void group_norm_kernel(const T *x, const void *gamma, int gdt, const void *beta, int bdt, T *y, int64_t HW,
                                  int64_t C, int64_t G, float eps, int silu) {
    __shared__ float sh[32];
    const int64_t n = blockIdx.x / G, g = blockIdx.x % G, cg = C / G, M = HW * cg;
    const T *xb = x + n * HW * C + g * cg;
    T *yb = y + n * HW * C + g * cg;
    float mean, rstd;
    gn_stats(xb, HW, C, cg, eps, sh, &mean, &rstd);
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

// dx (images n0 .. n0+nb of (N,H,W,Ci)) from dcol [nb·OH·OW, Ci·KH·KW] = dy · W: each
// element gathers the columns that read it (no atomics, one write per element).
template <typename T>
__global__ void col2im_kernel(const T *dcol, T *dx, int64_t n0, int64_t nb, int64_t H, int64_t W, int64_t Ci,
                              int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride, int64_t pad,
                              int64_t dil) {
    const int64_t K = Ci * KH * KW, total = nb * H * W * Ci;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t ci = i % Ci, w = (i / Ci) % W, h = (i / (Ci * W)) % H, n = i / (Ci * W * H);
        float acc = 0.0f;
        for (int64_t kh = 0; kh < KH; kh++) {
            const int64_t hn = h + pad - kh * dil;
            if (hn < 0 || hn % stride) continue;
            const int64_t oh = hn / stride;
            if (oh >= OH) continue;
            for (int64_t kw = 0; kw < KW; kw++) {
                const int64_t wn = w + pad - kw * dil;
                if (wn < 0 || wn % stride) continue;
                const int64_t ow = wn / stride;
                if (ow >= OW) continue;
                acc += tr_ld(dcol + ((n * OH + oh) * OW + ow) * K + (ci * KH + kh) * KW + kw);
            }
        }
        tr_st(dx + (n0 * H * W * Ci) + i, acc);
    }
}

extern "C" int tr_cu_col2im(cudaStream_t s, int dtype, const void *dcol, void *dx, int64_t n0, int64_t nb, int64_t H,
                            int64_t W, int64_t Ci, int64_t KH, int64_t KW, int64_t OH, int64_t OW, int64_t stride,
                            int64_t pad, int64_t dil, struct tr_error *err) {
    const int64_t total = nb * H * W * Ci;
    if (total == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, col2im_kernel<T><<<tr_cu_blocks(total), 256, 0, s>>>(
                                     (const T *)dcol, (T *)dx, n0, nb, H, W, Ci, KH, KW, OH, OW, stride, pad, dil));
    return TR_CU_LAUNCHED("conv2d_grad_input col2im", err);
}

// acc (f32) += src (dtype), or = src when first; then, at the end, dst = acc in dtype.
template <typename T>
__global__ void acc_kernel(const T *src, float *acc, int64_t n, int first) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = (first ? 0.0f : acc[i]) + tr_ld(src + i);
}

template <typename T>
__global__ void from_f32_kernel(const float *acc, T *dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(dst + i, acc[i]);
}

extern "C" int tr_cu_accumulate(cudaStream_t s, int dtype, const void *src, float *acc, int64_t n, int first,
                                struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, acc_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)src, acc, n, first));
    return TR_CU_LAUNCHED("conv2d_grad_weight accumulate", err);
}

extern "C" int tr_cu_from_f32(cudaStream_t s, int dtype, const float *acc, void *dst, int64_t n, struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, from_f32_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>(acc, (T *)dst, n));
    return TR_CU_LAUNCHED("conv2d_grad_weight store", err);
}

// GROUP_NORM_GRAD: dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)), ĝ = dy·γ, per (n, group) block;
// with stats != NULL it only writes the group's (mean, rstd) there (GROUP_NORM_GRAD_GAMMA).
template <typename T>
__global__ void group_norm_grad_kernel(const T *x, const void *gamma, int gdt, const T *dy, T *dx, float *stats,
                                       int64_t HW, int64_t C, int64_t G, float eps) {
    __shared__ float sh[32];
    const int64_t n = blockIdx.x / G, g = blockIdx.x % G, cg = C / G, M = HW * cg, base = n * HW * C + g * cg;
    float mean, rstd;
    gn_stats(x + base, HW, C, cg, eps, sh, &mean, &rstd);
    if (stats) {
        if (threadIdx.x == 0) stats[2 * blockIdx.x] = mean, stats[2 * blockIdx.x + 1] = rstd;
        return;
    }
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const int64_t c = i % cg, o = base + (i / cg) * C + c;
        const float gh = tr_ld(dy + o) * tr_ld_dt(gamma, gdt, g * cg + c);
        sg += gh;
        sgx += gh * (tr_ld(x + o) - mean) * rstd;
    }
    sg = tr_block_sum(sg, sh) / (float)M;
    sgx = tr_block_sum(sgx, sh) / (float)M;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const int64_t c = i % cg, o = base + (i / cg) * C + c;
        const float gh = tr_ld(dy + o) * tr_ld_dt(gamma, gdt, g * cg + c), xh = (tr_ld(x + o) - mean) * rstd;
        tr_st(dx + o, rstd * (gh - sg - xh * sgx));
    }
}

// GROUP_NORM_GRAD_GAMMA: dγ_c = Σ over n and pixels of dy·x̂, one block per channel.
template <typename T>
__global__ void group_norm_dgamma_kernel(const T *x, const T *dy, const float *stats, void *dg, int odt, int64_t N,
                                         int64_t HW, int64_t C, int64_t G) {
    __shared__ float sh[32];
    const int64_t c = blockIdx.x, g = c / (C / G);
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < N * HW; j += blockDim.x) {
        const int64_t n = j / HW, o = j * C + c;
        acc += tr_ld(dy + o) * (tr_ld(x + o) - stats[2 * (n * G + g)]) * stats[2 * (n * G + g) + 1];
    }
    acc = tr_block_sum(acc, sh);
    if (threadIdx.x == 0) {
        if (odt == TR_DTYPE_F32) ((float *)dg)[c] = acc;
        else if (odt == TR_DTYPE_BF16) ((tr_bf16 *)dg)[c] = __float2bfloat16_rn(acc);
        else ((tr_f16 *)dg)[c] = __float2half_rn(acc);
    }
}

extern "C" int tr_cu_group_norm_grad(cudaStream_t s, int op, int dtype, const void *x, const void *gamma, int gdt,
                                     const void *dy, void *out, int odt, float *stats, int64_t N, int64_t HW,
                                     int64_t C, int64_t G, float eps, struct tr_error *err) {
    if (N * G > 0x7fffffffLL || C > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "group_norm_grad: %lld groups (at most 2^31-1 on cuda)",
                            (long long)(N * G));
    if (N * HW * C == 0) /* dgamma over no pixels: the empty sum, zeros (as the cpu's), not left unwritten */
        return op == TR_OP_GROUP_NORM_GRAD_GAMMA && C > 0
                   ? TR_CU_CHECK(cudaMemsetAsync(out, 0, (size_t)C * (odt == TR_DTYPE_F32 ? 4 : 2), s),
                                 "group_norm_grad_gamma: zero fill", err)
                   : TR_OK;
    if (op == TR_OP_GROUP_NORM_GRAD) {
        TR_CU_FLOAT_SWITCH(dtype, T, group_norm_grad_kernel<T><<<(unsigned)(N * G), 256, 0, s>>>(
                                         (const T *)x, gamma, gdt, (const T *)dy, (T *)out, NULL, HW, C, G, eps));
        return TR_CU_LAUNCHED("group_norm_grad", err);
    }
    TR_CU_FLOAT_SWITCH(dtype, T, group_norm_grad_kernel<T><<<(unsigned)(N * G), 256, 0, s>>>(
                                     (const T *)x, NULL, 0, NULL, NULL, stats, HW, C, G, eps));
    int rc = TR_CU_LAUNCHED("group_norm_grad_gamma statistics", err);
    if (rc) return rc;
    TR_CU_FLOAT_SWITCH(dtype, T, group_norm_dgamma_kernel<T><<<(unsigned)C, 256, 0, s>>>(
                                     (const T *)x, (const T *)dy, stats, out, odt, N, HW, C, G));
    return TR_CU_LAUNCHED("group_norm_grad_gamma", err);
}
