// The hand-fused kernels of the tf backend on CUDA (kernels.h, cpu/fused.c): one block
// per row of the last axis, sums in f32 with no intermediate rounding, as the cpu does.
// Broadcast operands (the softmax's mask, the embeddings' ids) are found per row from
// their strides over out's leading axes (0 where they broadcast).
#include "cu_common.cuh"

static unsigned row_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : n >= 64 ? 64 : 32; }

__device__ __forceinline__ int64_t lead_offset(const tr_cu_lead &L, const int64_t *st, int64_t r) {
    int64_t off = 0;
    for (int d = L.nl - 1; d >= 0; d--) {
        off += (r % L.lead[d]) * st[d];
        r /= L.lead[d];
    }
    return off;
}

// y = LN(v) for a row v given by a functor; two passes over v and one for the output.
template <typename T, typename Row>
__device__ __forceinline__ void ln_row(const Row &v, int64_t n, const void *gamma, int gdt, const void *beta, int bdt,
                                       float eps, T *y, float *sh) {
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += v(j);
    float mean = tr_block_sum(s, sh) / (float)n, q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float d = v(j) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(tr_block_sum(q, sh) / (float)n + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float o = (v(j) - mean) * rstd;
        if (gamma) o *= tr_ld_dt(gamma, gdt, j);
        if (beta) o += tr_ld_dt(beta, bdt, j);
        tr_st(y + j, o);
    }
}

template <typename T>
struct brl_row {
    const T *x, *res;
    const void *bias;
    int bdt;
    __device__ float operator()(int64_t j) const {
        float v = tr_ld(x + j);
        if (bias) v += tr_ld_dt(bias, bdt, j);
        if (res) v += tr_ld(res + j);
        return v;
    }
};

template <typename T>
__global__ void brln_kernel(const T *x, const void *bias, int bdt, const T *res, const void *gamma, int gdt,
                            const void *beta, int betadt, T *y, int64_t n, float eps) {
    __shared__ float sh[32];
    const int64_t o = blockIdx.x * n;
    brl_row<T> row = {x + o, res ? res + o : NULL, bias, bdt};
    ln_row(row, n, gamma, gdt, beta, betadt, eps, y + o, sh);
}

extern "C" int tr_cu_bias_residual_ln(cudaStream_t s, int dtype, const void *x, const void *bias, int bdt,
                                      const void *res, const void *gamma, int gdt, const void *beta, int betadt, void *y,
                                      int64_t rows, int64_t n, float eps, struct tr_error *err) {
    if (rows * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, brln_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                     (const T *)x, bias, bdt, (const T *)res, gamma, gdt, beta, betadt, (T *)y, n, eps));
    return TR_CU_LAUNCHED("bias_residual_layer_norm", err);
}

// softmax(scale·x + mask) per row; mask row found from mst (its strides over the leading
// axes, then its stride along the row: 0 or 1).
template <typename T>
__global__ void sms_kernel(const T *x, float scale, const void *mask, int mdt, tr_cu_lead L, tr_cu_index mi, T *y,
                           int64_t n) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x, o = r * n;
    const int64_t moff = mask ? lead_offset(L, mi.stride[1], r) : 0, mj = mi.stride[1][L.nl];
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = tr_ld(x + o + j) * scale + (mask ? tr_ld_dt(mask, mdt, moff + j * mj) : 0.0f);
        m = tr_maxf(m, v);
    }
    m = tr_block_max(m, sh);
    float sum = 0.0f;
    if (m != -INFINITY)
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            sum += __expf(tr_ld(x + o + j) * scale + (mask ? tr_ld_dt(mask, mdt, moff + j * mj) : 0.0f) - m);
    sum = tr_block_sum(sum, sh);
    const float inv = m == -INFINITY ? 0.0f : 1.0f / sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = m == -INFINITY ? 0.0f
                                 : __expf(tr_ld(x + o + j) * scale + (mask ? tr_ld_dt(mask, mdt, moff + j * mj) : 0.0f) - m);
        tr_st(y + o + j, v * inv);
    }
}

extern "C" int tr_cu_scale_mask_softmax(cudaStream_t s, int dtype, const void *x, float scale, const void *mask, int mdt,
                                        const struct tr_cu_lead *L, const struct tr_cu_index *mi, void *y, int64_t rows,
                                        int64_t n, struct tr_error *err) {
    if (rows * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, sms_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>((const T *)x, scale, mask, mdt,
                                                                                        *L, *mi, (T *)y, n));
    return TR_CU_LAUNCHED("scale_mask_softmax", err);
}

template <typename T>
struct esl_row {
    const T *rows[TR_CU_ESLN_MAX];
    int n;
    __device__ float operator()(int64_t j) const {
        float v = 0.0f;
        for (int t = 0; t < n; t++) v += rows[t] ? tr_ld(rows[t] + j) : 0.0f;
        return v;
    }
};

template <typename T>
__global__ void esln_kernel(tr_cu_esln E, tr_cu_lead L, const void *gamma, int gdt, const void *beta, int betadt, T *y,
                            int64_t n, float eps, long long *flag) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    esl_row<T> row;
    row.n = E.n;
    for (int t = 0; t < E.n; t++) {
        int64_t i = lead_offset(L, E.ist[t], r);
        long long id = E.is64[t] ? (long long)((const int64_t *)E.ids[t])[i] : (long long)((const int32_t *)E.ids[t])[i];
        if (id < 0 || id >= E.V[t]) {
            if (threadIdx.x == 0 &&
                atomicCAS((unsigned long long *)flag, 0ull, (unsigned long long)TR_CU_FLAG_EMBEDDING_ID) == 0ull)
                flag[1] = r, flag[2] = id, flag[3] = E.V[t];
            row.rows[t] = NULL;
        } else {
            row.rows[t] = (const T *)E.tab[t] + id * n;
        }
    }
    ln_row(row, n, gamma, gdt, beta, betadt, eps, y + r * n, sh);
}

extern "C" int tr_cu_embedding_sum_ln(cudaStream_t s, int dtype, const struct tr_cu_esln *E, const struct tr_cu_lead *L,
                                      const void *gamma, int gdt, const void *beta, int betadt, void *y, int64_t rows,
                                      int64_t n, float eps, long long *flag, struct tr_error *err) {
    if (rows * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, esln_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(*E, *L, gamma, gdt, beta, betadt,
                                                                                         (T *)y, n, eps, flag));
    return TR_CU_LAUNCHED("embedding_sum_layer_norm", err);
}
