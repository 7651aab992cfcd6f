// Training kernels: the gradients of the unary ops, softmax and layer norm, the
// embedding's scatter-add, the fused cross-entropy gradient, max and slice gradients, and
// the MSE loss. f32 math (the cpu computes these in f64; the tolerances hold in f32).
#include "cu_common.cuh"

__device__ __forceinline__ float unary_grad(float x, int op, int approx, float alpha) {
    switch (op) {
    case TR_OP_GELU:
        if (approx) {
            if (fabsf(x) > 10.0f) return x > 0.0f ? 1.0f : 0.0f; /* tanh is ±1; x³ would overflow */
            const float c = 0.7978845608028654f;
            float u = c * (x + 0.044715f * x * x * x), t = tanhf(u);
            return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
        } else {
            float cdf = 0.5f * erfcf(-x * 0.70710678118654752f);
            return cdf + x * 0.3989422804014327f * expf(-0.5f * x * x);
        }
    case TR_OP_TANH: {
        float t = tanhf(x);
        return 1.0f - t * t;
    }
    case TR_OP_RELU: return x > 0.0f ? 1.0f : 0.0f;
    case TR_OP_SILU: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case TR_OP_SIGMOID: {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f - s);
    }
    case TR_OP_EXP: return expf(x);
    case TR_OP_NEG: return -1.0f;
    case TR_OP_SQRT: return 0.5f * rsqrtf(x);
    case TR_OP_RSQRT: return -0.5f * rsqrtf(x) / x;
    default: return alpha; // SCALE
    }
}

template <typename T>
__global__ void unary_grad_kernel(const T *x, const T *dy, T *dx, int64_t n, int op, int approx, float alpha) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(dx + i, tr_ld(dy + i) * unary_grad(tr_ld(x + i), op, approx, alpha));
}

extern "C" int tr_cu_unary_grad(cudaStream_t s, int op, int dtype, const void *x, const void *dy, void *dx, int64_t n,
                                int approx, float alpha, struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, unary_grad_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)x, (const T *)dy, (T *)dx,
                                                                                     n, op, approx, alpha));
    return TR_CU_LAUNCHED("unary_grad", err);
}

static unsigned row_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : n >= 64 ? 64 : 32; }

template <typename T>
__global__ void softmax_grad_kernel(const T *y, const T *dy, T *dx, int64_t n) {
    __shared__ float sh[32];
    const int64_t o = blockIdx.x * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += tr_ld(dy + o + j) * tr_ld(y + o + j);
    s = tr_block_sum(s, sh);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) tr_st(dx + o + j, tr_ld(y + o + j) * (tr_ld(dy + o + j) - s));
}

extern "C" int tr_cu_softmax_grad(cudaStream_t s, int dtype, const void *y, const void *dy, void *dx, int64_t rows,
                                  int64_t n, struct tr_error *err) {
    if (rows * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, softmax_grad_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                     (const T *)y, (const T *)dy, (T *)dx, n));
    return TR_CU_LAUNCHED("softmax_grad", err);
}

// Per row: mean and 1/std (into stats when not NULL), and for dx: rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·γ.
template <typename T>
__global__ void layer_norm_grad_kernel(const T *x, const void *gamma, int gdt, const T *dy, T *dx, float *stats,
                                       int64_t n, float eps) {
    __shared__ float sh[32];
    const int64_t o = blockIdx.x * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += tr_ld(x + o + j);
    float mean = tr_block_sum(s, sh) / (float)n, q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float d = tr_ld(x + o + j) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(tr_block_sum(q, sh) / (float)n + eps);
    if (stats) {
        if (threadIdx.x == 0) stats[2 * blockIdx.x] = mean, stats[2 * blockIdx.x + 1] = rstd;
        return;
    }
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = tr_ld(dy + o + j) * (gamma ? tr_ld_dt(gamma, gdt, j) : 1.0f);
        sg += g;
        sgx += g * (tr_ld(x + o + j) - mean) * rstd;
    }
    sg = tr_block_sum(sg, sh) / (float)n;
    sgx = tr_block_sum(sgx, sh) / (float)n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float g = tr_ld(dy + o + j) * (gamma ? tr_ld_dt(gamma, gdt, j) : 1.0f);
        float xh = (tr_ld(x + o + j) - mean) * rstd;
        tr_st(dx + o + j, rstd * (g - sg - xh * sgx));
    }
}

extern "C" int tr_cu_layer_norm_grad(cudaStream_t s, int dtype, const void *x, const void *gamma, int gdt,
                                     const void *dy, void *dx, int64_t rows, int64_t n, float eps, struct tr_error *err) {
    if (rows * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, layer_norm_grad_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                     (const T *)x, gamma, gdt, (const T *)dy, (T *)dx, NULL, n, eps));
    return TR_CU_LAUNCHED("layer_norm_grad", err);
}

// dgamma[j] = Σ_r dy[r,j]·x̂[r,j]: the row statistics, then a column reduction split
// across the grid (colsum.cu), in a fixed order.
extern "C" int tr_cu_layer_norm_grad_gamma(cudaStream_t s, int dtype, const void *x, const void *dy, void *dgamma,
                                           int gdt, int64_t rows, int64_t n, float eps, float *stats, int sms,
                                           float *partial, struct tr_error *err) {
    if (n == 0) return TR_OK;
    if (rows > 0) {
        TR_CU_FLOAT_SWITCH(dtype, T, layer_norm_grad_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>(
                                         (const T *)x, NULL, 0, (const T *)dy, NULL, stats, n, eps));
        int rc = TR_CU_LAUNCHED("layer_norm_grad_gamma stats", err);
        if (rc) return rc;
    }
    struct tr_cu_colsum a = {TR_CU_COLSUM_LN_GAMMA, TR_OP_SUM, dtype, x, dy, stats, dgamma, gdt, 1, rows, n};
    return tr_cu_colsum(s, &a, sms, partial, err);
}

__device__ __forceinline__ long long eg_id(const void *ids, int id_dt, int64_t r) {
    return id_dt == TR_DTYPE_I32 ? (long long)((const int32_t *)ids)[r] : (long long)((const int64_t *)ids)[r];
}

// dtable (f32 accumulator acc, V·D, zeroed) = the rows of dy summed at their ids, then acc
// cast into dtable. Deterministic: the block of an id's first row sums every row of that
// id in row order, the other rows' blocks return; no atomics, so a step gives the same bits
// on every run (test_dp compares losses bit for bit; docs/determinism.md). The scan for an
// earlier row is rows/2 id compares per row on average: microseconds at BERT's 4096 rows.
template <typename T>
__global__ void embedding_grad_kernel(const void *ids, int id_dt, const T *dy, float *acc, int64_t rows, int64_t D,
                                      int64_t V, long long *flag) {
    const int64_t r = blockIdx.x;
    const long long id = eg_id(ids, id_dt, r);
    if (id < 0 || id >= V) {
        if (threadIdx.x == 0 && atomicCAS((unsigned long long *)flag, 0ull, (unsigned long long)TR_CU_FLAG_EMBEDDING_ID) == 0ull)
            flag[1] = r, flag[2] = id, flag[3] = V;
        return;
    }
    int earlier = 0;
    for (int64_t q = threadIdx.x; q < r && !earlier; q += blockDim.x) earlier = eg_id(ids, id_dt, q) == id;
    if (__syncthreads_or(earlier)) return; // an earlier row's block sums this id
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        float sum = 0.0f;
        for (int64_t q = r; q < rows; q++)
            if (eg_id(ids, id_dt, q) == id) sum += tr_ld(dy + q * D + j);
        acc[id * D + j] = sum;
    }
}

template <typename T>
__global__ void f32_to_kernel(const float *acc, T *out, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(out + i, acc[i]);
}

extern "C" int tr_cu_embedding_grad(cudaStream_t s, int dtype, const void *ids, int id_dtype, const void *dy, void *dtable,
                                    int64_t rows, int64_t D, int64_t V, float *acc, long long *flag,
                                    struct tr_error *err) {
    float *a = dtype == TR_DTYPE_F32 ? (float *)dtable : acc;
    int rc = TR_CU_CHECK(cudaMemsetAsync(a, 0, (size_t)(V * D) * sizeof(float), s), "embedding_grad: zero fill", err);
    if (rc || rows * D == 0) return rc;
    TR_CU_FLOAT_SWITCH(dtype, T, embedding_grad_kernel<T><<<(unsigned)rows, row_threads(D), 0, s>>>(
                                     ids, id_dtype, (const T *)dy, a, rows, D, V, flag));
    if ((rc = TR_CU_LAUNCHED("embedding_grad", err)) != TR_OK || dtype == TR_DTYPE_F32) return rc;
    TR_CU_FLOAT_SWITCH(dtype, T, f32_to_kernel<T><<<tr_cu_blocks(V * D), 256, 0, s>>>(a, (T *)dtable, V * D));
    return TR_CU_LAUNCHED("embedding_grad cast", err);
}

// dlogits = dloss/valid·(softmax − onehot) on rows not ignored, 0 elsewhere.
__global__ void count_valid_kernel(const void *labels, int ldt, int64_t rows, int has_ignore, long long ignore,
                                   float *count) {
    __shared__ float sh[32];
    float c = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        long long l = ldt == TR_DTYPE_I32 ? (long long)((const int32_t *)labels)[r] : (long long)((const int64_t *)labels)[r];
        c += has_ignore && l == ignore ? 0.0f : 1.0f;
    }
    c = tr_block_sum(c, sh);
    if (threadIdx.x == 0) *count = c;
}

template <typename T>
__global__ void ce_grad_kernel(const T *logits, const void *labels, int ldt, const void *dloss, int ddt, int64_t C,
                               int has_ignore, long long ignore, const float *count, T *dx, long long *flag) {
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const T *x = logits + r * C;
    T *d = dx + r * C;
    long long lab = ldt == TR_DTYPE_I32 ? (long long)((const int32_t *)labels)[r] : (long long)((const int64_t *)labels)[r];
    bool ignored = has_ignore && lab == ignore;
    if (!ignored && (lab < 0 || lab >= C)) {
        if (threadIdx.x == 0 && atomicCAS((unsigned long long *)flag, 0ull, (unsigned long long)TR_CU_FLAG_LABEL) == 0ull)
            flag[1] = r, flag[2] = lab, flag[3] = C;
        ignored = true;
    }
    if (ignored) {
        for (int64_t j = threadIdx.x; j < C; j += blockDim.x) tr_st(d + j, 0.0f);
        return;
    }
    float m, sum;
    tr_block_row_max_sum(x, C, sh, &m, &sum);
    float g = tr_ld_dt(dloss, ddt, 0) / *count;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x)
        tr_st(d + j, g * (expf(tr_ld(x + j) - m) / sum - (j == lab ? 1.0f : 0.0f)));
}

extern "C" int tr_cu_cross_entropy_grad(cudaStream_t s, int dtype, const void *logits, const void *labels, int ldt,
                                        const void *dloss, int ddt, int64_t rows, int64_t C, int has_ignore,
                                        long long ignore, float *scratch, void *dx, long long *flag,
                                        struct tr_error *err) {
    if (rows * C == 0) return TR_OK;
    count_valid_kernel<<<1, 256, 0, s>>>(labels, ldt, rows, has_ignore, ignore, scratch);
    int rc = TR_CU_LAUNCHED("cross_entropy_grad count", err);
    if (rc) return rc;
    TR_CU_FLOAT_SWITCH(dtype, T, ce_grad_kernel<T><<<(unsigned)rows, row_threads(C), 0, s>>>(
                                     (const T *)logits, labels, ldt, dloss, ddt, C, has_ignore, ignore, scratch, (T *)dx,
                                     flag));
    return TR_CU_LAUNCHED("cross_entropy_grad", err);
}

// dx = dy at the first maximum along the axis of (outer, n, inner), zeros elsewhere.
template <typename T>
__global__ void max_grad_kernel(const T *x, const T *dy, T *dx, int64_t outer, int64_t n, int64_t inner) {
    int64_t total = outer * inner;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t a = o / inner, c = o % inner, base = a * n * inner + c, best = 0;
        float bv = tr_ld(x + base);
        for (int64_t j = 1; j < n; j++) {
            float v = tr_ld(x + base + j * inner);
            if (v > bv) bv = v, best = j;
        }
        for (int64_t j = 0; j < n; j++) tr_st(dx + base + j * inner, j == best ? tr_ld(dy + o) : 0.0f);
    }
}

extern "C" int tr_cu_max_grad(cudaStream_t s, int dtype, const void *x, const void *dy, void *dx, int64_t outer,
                              int64_t n, int64_t inner, struct tr_error *err) {
    if (outer * inner * n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, max_grad_kernel<T><<<tr_cu_blocks(outer * inner), 256, 0, s>>>(
                                     (const T *)x, (const T *)dy, (T *)dx, outer, n, inner));
    return TR_CU_LAUNCHED("max_grad", err);
}

// MSE: one block, fixed order, in double.
template <typename T>
__global__ void mse_kernel(const T *p, const T *t, int64_t n, float *out) {
    __shared__ double sh[256];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double d = (double)tr_ld(p + i) - (double)tr_ld(t + i);
        acc += d * d;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = n ? (float)(sh[0] / (double)n) : 0.0f;
}

extern "C" int tr_cu_mse(cudaStream_t s, int dtype, const void *pred, const void *target, int64_t n, float *out,
                         struct tr_error *err) {
    TR_CU_FLOAT_SWITCH(dtype, T, mse_kernel<T><<<1, 256, 0, s>>>((const T *)pred, (const T *)target, n, out));
    return TR_CU_LAUNCHED("mse", err);
}
