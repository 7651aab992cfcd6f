// Kernels over rows of the last axis (softmax, layer norm, embedding rows, the fused
// cross-entropy), reductions over one axis, and the fused AdamW update. One block per
// row; f32 statistics; the row is read again from L2 rather than kept in shared memory,
// so any row length works.
#include "cu_common.cuh"

template <typename T>
__global__ void softmax_kernel(const T *x, T *y, int64_t n) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = tr_maxf(m, tr_ld(xr + j));
    m = tr_block_max(m, sh);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += m == -INFINITY ? 0.0f : __expf(tr_ld(xr + j) - m);
    sum = tr_block_sum(sum, sh);
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        tr_st(yr + j, m == -INFINITY ? 0.0f : __expf(tr_ld(xr + j) - m) * inv);
}

static unsigned row_threads(int64_t n) { return n >= 1024 ? 512 : n >= 256 ? 256 : n >= 64 ? 64 : 32; }

extern "C" int tr_cu_softmax(cudaStream_t s, int dtype, const void *x, void *y, int64_t rows, int64_t n,
                             struct tr_error *err) {
    if (rows == 0 || n == 0) return TR_OK;
    if (rows > 0x7fffffffLL) return tr_error_set(err, TR_ERR_UNSUPPORTED, "softmax: %lld rows (at most 2^31-1 on cuda)",
                                                 (long long)rows);
    TR_CU_FLOAT_SWITCH(dtype, T, softmax_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>((const T *)x, (T *)y, n));
    return TR_CU_LAUNCHED("softmax", err);
}

template <typename T>
__global__ void layer_norm_kernel(const T *x, const void *gamma, const void *beta, int gdt, T *y, int64_t n, float eps) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += tr_ld(xr + j);
    float mean = tr_block_sum(s, sh) / (float)n;
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float d = tr_ld(xr + j) - mean;
        q += d * d;
    }
    float rstd = rsqrtf(tr_block_sum(q, sh) / (float)n + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = (tr_ld(xr + j) - mean) * rstd;
        if (gamma) v *= tr_ld_dt(gamma, gdt, j);
        if (beta) v += tr_ld_dt(beta, gdt, j);
        tr_st(yr + j, v);
    }
}

extern "C" int tr_cu_layer_norm(cudaStream_t s, int dtype, const void *x, const void *gamma, const void *beta, int gdt,
                                void *y, int64_t rows, int64_t n, float eps, struct tr_error *err) {
    if (rows == 0 || n == 0) return TR_OK;
    if (rows > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "layer_norm: %lld rows (at most 2^31-1 on cuda)", (long long)rows);
    TR_CU_FLOAT_SWITCH(dtype, T, layer_norm_kernel<T><<<(unsigned)rows, row_threads(n), 0, s>>>((const T *)x, gamma, beta,
                                                                                               gdt, (T *)y, n, eps));
    return TR_CU_LAUNCHED("layer_norm", err);
}

// Reduction over the middle axis of (outer, n, inner). inner == 1: a block per row;
// otherwise a column reduction split across the grid (colsum.cu).
template <typename T>
__global__ void reduce_rows_kernel(const T *x, T *y, int64_t n, int op) {
    __shared__ float sh[32];
    const T *xr = x + blockIdx.x * n;
    float acc = op == TR_OP_MAX ? -INFINITY : 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        float v = tr_ld(xr + j);
        acc = op == TR_OP_MAX ? tr_maxf(acc, v) : acc + v;
    }
    acc = op == TR_OP_MAX ? tr_block_max(acc, sh) : tr_block_sum(acc, sh);
    if (threadIdx.x == 0) tr_st(y + blockIdx.x, op == TR_OP_MEAN ? acc / (float)n : acc);
}

extern "C" int tr_cu_reduce(cudaStream_t s, int op, int dtype, const void *x, void *y, int64_t outer, int64_t n,
                            int64_t inner, int sms, float *partial, struct tr_error *err) {
    if (outer * inner == 0) return TR_OK;
    if (inner == 1 && outer <= 0x7fffffffLL) {
        TR_CU_FLOAT_SWITCH(dtype, T, reduce_rows_kernel<T><<<(unsigned)outer, row_threads(n), 0, s>>>((const T *)x, (T *)y,
                                                                                                      n, op));
        return TR_CU_LAUNCHED("reduce", err);
    }
    struct tr_cu_colsum a = {TR_CU_COLSUM_X, op, dtype, x, NULL, NULL, y, dtype, outer, n, inner};
    return tr_cu_colsum(s, &a, sms, partial, err);
}

// Leaves the first bad value seen in flag: code, position, value, bound.
__device__ __forceinline__ void raise_flag(long long *flag, int code, long long pos, long long val, long long bound) {
    if (atomicCAS((unsigned long long *)flag, 0ull, (unsigned long long)code) == 0ull) {
        flag[1] = pos;
        flag[2] = val;
        flag[3] = bound;
    }
}

__device__ __forceinline__ long long load_id(const void *ids, int dt, int64_t i) {
    return dt == TR_DTYPE_I32 ? (long long)((const int32_t *)ids)[i] : (long long)((const int64_t *)ids)[i];
}

template <typename T>
__global__ void embedding_kernel(const T *table, const void *ids, int id_dt, T *out, int64_t D, int64_t V,
                                 long long *flag) {
    int64_t r = blockIdx.x;
    long long id = load_id(ids, id_dt, r);
    T *o = out + r * D;
    if (id < 0 || id >= V) {
        if (threadIdx.x == 0) raise_flag(flag, TR_CU_FLAG_EMBEDDING_ID, r, id, V);
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) tr_st(o + j, 0.0f);
        return;
    }
    const T *t = table + id * D;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) o[j] = t[j];
}

extern "C" int tr_cu_embedding(cudaStream_t s, int dtype, const void *table, const void *ids, int id_dtype, void *out,
                               int64_t rows, int64_t D, int64_t V, long long *flag, struct tr_error *err) {
    if (rows == 0 || D == 0) return TR_OK;
    if (rows > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "embedding: %lld rows (at most 2^31-1 on cuda)", (long long)rows);
    TR_CU_FLOAT_SWITCH(dtype, T, embedding_kernel<T><<<(unsigned)rows, row_threads(D), 0, s>>>(
                                     (const T *)table, ids, id_dtype, (T *)out, D, V, flag));
    return TR_CU_LAUNCHED("embedding", err);
}

// Per row: loss_r = logsumexp(logits_r) - logits_r[label] (0 when ignored), valid_r.
template <typename T>
__global__ void ce_rows_kernel(const T *logits, const void *labels, int ldt, int64_t C, int has_ignore, long long ignore,
                               float *row_loss, int *row_valid, long long *flag) {
    __shared__ float sh[32];
    int64_t r = blockIdx.x;
    long long lab = load_id(labels, ldt, r);
    if (has_ignore && lab == ignore) {
        if (threadIdx.x == 0) row_loss[r] = 0.0f, row_valid[r] = 0;
        return;
    }
    if (lab < 0 || lab >= C) {
        if (threadIdx.x == 0) {
            raise_flag(flag, TR_CU_FLAG_LABEL, r, lab, C);
            row_loss[r] = 0.0f, row_valid[r] = 0;
        }
        return;
    }
    const T *x = logits + r * C;
    float m, sum;
    tr_block_row_max_sum(x, C, sh, &m, &sum);
    if (threadIdx.x == 0) {
        row_loss[r] = logf(sum) + m - tr_ld(x + lab);
        row_valid[r] = 1;
    }
}

// One block sums the rows in a fixed order (deterministic), in double.
__global__ void ce_mean_kernel(const float *row_loss, const int *row_valid, int64_t rows, float *loss) {
    __shared__ double sl[256];
    __shared__ long long sv[256];
    double l = 0.0;
    long long v = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) l += row_loss[r], v += row_valid[r];
    sl[threadIdx.x] = l;
    sv[threadIdx.x] = v;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sl[threadIdx.x] += sl[threadIdx.x + o], sv[threadIdx.x] += sv[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = sv[0] > 0 ? (float)(sl[0] / (double)sv[0]) : 0.0f;
}

extern "C" int tr_cu_cross_entropy(cudaStream_t s, int dtype, const void *logits, const void *labels, int label_dtype,
                                   int64_t rows, int64_t C, int has_ignore, long long ignore, float *loss, void *scratch,
                                   long long *flag, struct tr_error *err) {
    float *row_loss = (float *)scratch;
    int *row_valid = (int *)(row_loss + rows);
    if (rows > 0x7fffffffLL)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "cross_entropy: %lld rows (at most 2^31-1 on cuda)", (long long)rows);
    if (rows > 0) {
        TR_CU_FLOAT_SWITCH(dtype, T, ce_rows_kernel<T><<<(unsigned)rows, row_threads(C), 0, s>>>(
                                         (const T *)logits, labels, label_dtype, C, has_ignore, ignore, row_loss,
                                         row_valid, flag));
        int rc = TR_CU_LAUNCHED("cross_entropy rows", err);
        if (rc) return rc;
    }
    ce_mean_kernel<<<1, 256, 0, s>>>(row_loss, row_valid, rows, loss);
    return TR_CU_LAUNCHED("cross_entropy mean", err);
}

// The step of one element, shared by ADAMW_STEP and the fused update so that the two
// round alike; c1, c2 the bias corrections 1 - beta^t.
__device__ __forceinline__ float adamw_value(float p, float m, float v, float c1, float c2, float a, float eps,
                                             float wd) {
    float mh = m / c1, vh = v / c2;
    return p - a * (mh / (sqrtf(vh) + eps) + wd * p);
}

template <typename T>
__global__ void adamw_kernel(const T *param, const float *m, const float *v, const float *lr, const float *step, float b1,
                             float b2, float eps, float wd, T *out, int64_t n, long long *flag) {
    float t = *step, a = *lr;
    if (!(t >= 1.0f)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) raise_flag(flag, TR_CU_FLAG_STEP, 0, (long long)t, 1);
        return;
    }
    float c1 = 1.0f - powf(b1, t), c2 = 1.0f - powf(b2, t);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(out + i, adamw_value(tr_ld(param + i), m[i], v[i], c1, c2, a, eps, wd));
}

// beta·x + d·y rounded as SCALE (an FMA with 0) and ADD round it, and g² as MUL: the
// intrinsics keep nvcc from contracting across them. The host pass of nvcc parses these
// bodies without the intrinsics declared; it never runs them.
__device__ __forceinline__ float adamw_moment(float beta, float x, float d, float y) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(__fmaf_rn(beta, x, 0.0f), __fmaf_rn(d, y, 0.0f));
#else
    return beta * x + d * y;
#endif
}

__device__ __forceinline__ float adamw_square(float g) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(g, g);
#else
    return g * g;
#endif
}

// The moments rounded as the graph's SCALE (an FMA with 0), MUL and ADD kernels round
// them, then the step; out, mo and vo may be param, m and v (index i read, then written).
template <typename T>
__global__ void adamw_update_kernel(const T *param, const float *m, const float *v, const void *grad, int grad_f32,
                                    const float *lr, const float *step, float b1, float b2, float eps, float wd, T *out,
                                    float *mo, float *vo, int64_t n, long long *flag) {
    float t = *step, a = *lr;
    if (!(t >= 1.0f)) {
        if (blockIdx.x == 0 && threadIdx.x == 0) raise_flag(flag, TR_CU_FLAG_STEP, 0, (long long)t, 1);
        return;
    }
    const float c1 = 1.0f - powf(b1, t), c2 = 1.0f - powf(b2, t), d1 = 1.0f - b1, d2 = 1.0f - b2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = grad_f32 ? ((const float *)grad)[i] : tr_ld((const T *)grad + i);
        float m2 = adamw_moment(b1, m[i], d1, g), v2 = adamw_moment(b2, v[i], d2, adamw_square(g));
        float p = tr_ld(param + i);
        mo[i] = m2;
        vo[i] = v2;
        tr_st(out + i, adamw_value(p, m2, v2, c1, c2, a, eps, wd));
    }
}

extern "C" int tr_cu_adamw_update(cudaStream_t s, int dtype, const void *param, const float *m, const float *v,
                                  const void *grad, int grad_f32, const float *lr, const float *step, float b1, float b2,
                                  float eps, float wd, void *out, float *mo, float *vo, int64_t n, long long *flag,
                                  struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, adamw_update_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>(
                                     (const T *)param, m, v, grad, grad_f32, lr, step, b1, b2, eps, wd, (T *)out, mo, vo,
                                     n, flag));
    return TR_CU_LAUNCHED("adamw_update", err);
}

extern "C" int tr_cu_adamw(cudaStream_t s, int dtype, const void *param, const float *m, const float *v, const float *lr,
                           const float *step, float b1, float b2, float eps, float wd, void *out, int64_t n,
                           long long *flag, struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, adamw_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)param, m, v, lr, step, b1, b2,
                                                                                eps, wd, (T *)out, n, flag));
    return TR_CU_LAUNCHED("adamw_step", err);
}
