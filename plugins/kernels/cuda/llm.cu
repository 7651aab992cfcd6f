// The decoder LLMs' kernels (ops.h: RMS_NORM, its gradients, ROPE), rounding as the cpu's
// rmsnorm.c and rope.c do (Hugging Face's order of roundings, so bf16 parity holds):
// RMS norm r = 1/sqrt(mean(x²) + eps) in f32; Gemma (add_one) y = x·r·(1 + w) rounded
// once; Mistral y = round(x·r)·w. RoPE: θ_i = 1/f32(base^(f32(2i)/R)), a = f32(pos)·θ_i,
// cos and sin rounded to x's dtype, each product and the sum rounded to x's dtype.
// Gradients in f32: dx = r·(g − x̂·mean(g·x̂)), g = dy·w'; dw = Σ_rows dy·x̂.
#include "cu_common.cuh"

__device__ __forceinline__ float round_dt(int dt, float v) {
    if (dt == TR_DTYPE_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (dt == TR_DTYPE_F16) return __half2float(__float2half_rn(v));
    return v;
}

static unsigned row_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : n >= 64 ? 64 : 32; }

template <typename T>
__device__ __forceinline__ float row_rstd(const T *xr, int64_t n, float eps, float *sh) {
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = tr_ld(xr + j);
        ss += v * v;
    }
    return 1.0f / sqrtf(tr_block_sum(ss, sh) / (float)n + eps);
}

template <typename T>
__global__ void rms_norm_kernel(const T *x, const void *w, int wdt, T *y, int64_t n, float eps, int add_one, int dt) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float rs = row_rstd(xr, n, eps, sh);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = tr_ld_dt(w, wdt, j) + (add_one ? 1.0f : 0.0f);
        float v = tr_ld(xr + j);
        tr_st(yr + j, add_one || dt == TR_DTYPE_F32 ? v * rs * g : round_dt(dt, v * rs) * g);
    }
}

template <typename T>
__global__ void rms_norm_grad_kernel(const T *x, const void *w, int wdt, const T *dy, T *dx, float *rstd, int64_t n,
                                     float eps, int add_one) {
    __shared__ float sh[32];
    const int64_t o = blockIdx.x * n;
    float rs = row_rstd(x + o, n, eps, sh);
    if (rstd) { // the dw pass only needs r per row
        if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
        return;
    }
    float sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sgx += tr_ld(dy + o + j) * (tr_ld_dt(w, wdt, j) + (add_one ? 1.0f : 0.0f)) * tr_ld(x + o + j) * rs;
    sgx = tr_block_sum(sgx, sh) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = tr_ld(dy + o + j) * (tr_ld_dt(w, wdt, j) + (add_one ? 1.0f : 0.0f));
        tr_st(dx + o + j, rs * (g - tr_ld(x + o + j) * rs * sgx));
    }
}

extern "C" int tr_cu_rms_norm(cudaStream_t s, int op, int dtype, const void *x, const void *w, int wdt, const void *dy,
                              void *out, int odt, int64_t rows, int64_t n, float eps, int add_one, float *rstd,
                              int sms, float *partial, struct tr_error *err) {
    if (n == 0) return TR_OK;
    if (rows > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "rms_norm: %lld rows (at most 2^31-1 on cuda)", (long long)rows);
    if (op == TR_OP_RMS_NORM) {
        if (rows == 0) return TR_OK;
        TR_CU_FLOAT_SWITCH(dtype, T, rms_norm_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                         (const T *)x, w, wdt, (T *)out, n, eps, add_one, dtype));
        return TR_CU_LAUNCHED("rms_norm", err);
    }
    if (op == TR_OP_RMS_NORM_GRAD) {
        if (rows == 0) return TR_OK;
        TR_CU_FLOAT_SWITCH(dtype, T, rms_norm_grad_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                         (const T *)x, w, wdt, (const T *)dy, (T *)out, NULL, n, eps, add_one));
        return TR_CU_LAUNCHED("rms_norm_grad", err);
    }
    if (rows > 0) {
        TR_CU_FLOAT_SWITCH(dtype, T, rms_norm_grad_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                         (const T *)x, NULL, 0, (const T *)dy, NULL, rstd, n, eps, 0));
        int rc = TR_CU_LAUNCHED("rms_norm_grad_w rstd", err);
        if (rc) return rc;
    }
    // dw[j] = Σ_r dy[r,j]·x[r,j]·rstd[r]: a column reduction split across the grid (colsum.cu)
    struct tr_cu_colsum a = {TR_CU_COLSUM_RMS_W, TR_OP_SUM, dtype, x, dy, rstd, out, odt, 1, rows, n};
    return tr_cu_colsum(s, &a, sms, partial, err);
}

// One thread per (b, h, t, i) with i < D - R/2: i < R/2 rotates the pair (i, i + R/2),
// i >= R/2 copies dim i + R/2 (the dims past R). Each thread reads before it writes its
// own elements only, so out may alias x.
template <typename T>
__global__ void rope_kernel(const T *x, const void *pos, int pdt, int pos_batched, T *y, int64_t B, int64_t H, int64_t Tn,
                            int64_t D, int64_t R, float base, int inverse, int dt) {
    const int64_t h2 = R / 2, per_row = D - h2, total = B * H * Tn * per_row;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = e % per_row, rowi = e / per_row, t = rowi % Tn, b = rowi / (H * Tn);
        const T *xr = x + rowi * D;
        T *yr = y + rowi * D;
        if (i >= h2) {
            yr[i + h2] = xr[i + h2];
            continue;
        }
        const int64_t pi = pos_batched ? b * Tn + t : t;
        const long long p = pdt == TR_DTYPE_I64 ? (long long)((const int64_t *)pos)[pi] : (long long)((const int32_t *)pos)[pi];
        const float ex = (float)(2 * i) / (float)R;
        const float theta = 1.0f / (float)pow((double)base, (double)ex);
        const float a = (float)p * theta;
        const float c = round_dt(dt, (float)cos((double)a));
        const float sn = (inverse ? -1.0f : 1.0f) * round_dt(dt, (float)sin((double)a));
        const float x0 = tr_ld(xr + i), x1 = tr_ld(xr + i + h2);
        if (dt == TR_DTYPE_F32) {
            tr_st(yr + i, x0 * c - x1 * sn);
            tr_st(yr + i + h2, x1 * c + x0 * sn);
        } else {
            tr_st(yr + i, round_dt(dt, x0 * c) + round_dt(dt, -x1 * sn));
            tr_st(yr + i + h2, round_dt(dt, x1 * c) + round_dt(dt, x0 * sn));
        }
    }
}

extern "C" int tr_cu_rope(cudaStream_t s, int dtype, const void *x, const void *pos, int pdt, int pos_batched, void *out,
                          int64_t B, int64_t H, int64_t Tn, int64_t D, int64_t R, float base, int inverse,
                          struct tr_error *err) {
    int64_t total = B * H * Tn * (D - R / 2);
    if (total == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, rope_kernel<T><<<tr_cu_blocks(total), 256, 0, s>>>(
                                     (const T *)x, pos, pdt, pos_batched, (T *)out, B, H, Tn, D, R, base, inverse, dtype));
    return TR_CU_LAUNCHED("rope", err);
}
