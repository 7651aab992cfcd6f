// Elementwise kernels: unary ops, binary ops with broadcasting, strided copies (the
// layout ops), casts, and the bias + activation epilogue that cuBLASLt lacks (erf GELU,
// SiLU, tanh). Grid-stride loops of 256 threads; math in f32.
#include "cu_common.cuh"

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }
__device__ __forceinline__ float gelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}
__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float apply_act(float x, int act) {
    switch (act) {
    case TR_ACT_GELU: return gelu_erf(x);
    case TR_ACT_GELU_TANH: return gelu_tanh(x);
    case TR_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case TR_ACT_TANH: return tanhf(x);
    case TR_ACT_SILU: return x * sigmoidf_(x);
    default: return x;
    }
}

__device__ __forceinline__ float apply_unary(float x, int op, float a, float b, int approx) {
    switch (op) {
    case TR_OP_GELU: return approx ? gelu_tanh(x) : gelu_erf(x);
    case TR_OP_TANH: return tanhf(x);
    case TR_OP_RELU: return x > 0.0f ? x : 0.0f;
    case TR_OP_SILU: return x * sigmoidf_(x);
    case TR_OP_SIGMOID: return sigmoidf_(x);
    case TR_OP_EXP: return expf(x);
    case TR_OP_NEG: return -x;
    case TR_OP_SQRT: return sqrtf(x);
    case TR_OP_RSQRT: return rsqrtf(x);
    case TR_OP_SCALE: return a * x + b;
    default: return x;
    }
}

template <typename T>
__global__ void unary_kernel(const T *x, T *y, int64_t n, int op, float a, float b, int approx) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(y + i, apply_unary(tr_ld(x + i), op, a, b, approx));
}

extern "C" int tr_cu_unary(cudaStream_t s, int op, int dtype, const void *x, void *y, int64_t n, float a, float b,
                           int approx, struct tr_error *err) {
    if (n == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, unary_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)x, (T *)y, n, op, a, b, approx));
    return TR_CU_LAUNCHED("unary", err);
}

// Offsets of element i (row-major over idx.shape) in each operand.
__device__ __forceinline__ void index_offsets(const tr_cu_index &idx, int64_t i, int64_t *o0, int64_t *o1, int64_t *o2) {
    int64_t a = 0, b = 0, c = 0;
    for (int d = idx.ndim - 1; d >= 0; d--) {
        int64_t e = idx.shape[d], q = i % e;
        i /= e;
        a += q * idx.stride[0][d];
        b += q * idx.stride[1][d];
        c += q * idx.stride[2][d];
    }
    *o0 = a, *o1 = b, *o2 = c;
}

__device__ __forceinline__ float apply_binary(float a, float b, int op) {
    switch (op) {
    case TR_OP_ADD: return a + b;
    case TR_OP_SUB: return a - b;
    case TR_OP_MUL: return a * b;
    default: return a / b;
    }
}

template <typename T>
__global__ void binary_same_kernel(const T *a, const T *b, T *out, int64_t n, int op) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        tr_st(out + i, apply_binary(tr_ld(a + i), tr_ld(b + i), op));
}

template <typename T>
__global__ void binary_bcast_kernel(const T *a, const T *b, T *out, tr_cu_index idx, int64_t n, int op) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o, ia, ib;
        index_offsets(idx, i, &o, &ia, &ib);
        tr_st(out + i, apply_binary(tr_ld(a + ia), tr_ld(b + ib), op));
    }
}

extern "C" int tr_cu_binary(cudaStream_t s, int op, int dtype, const void *a, const void *b, void *out,
                            const struct tr_cu_index *idx, int64_t n, struct tr_error *err) {
    if (n == 0) return TR_OK;
    int same = 1; // both operands contiguous over out's shape
    int64_t st = 1;
    for (int d = idx->ndim - 1; d >= 0; d--) {
        if (idx->shape[d] != 1 && (idx->stride[1][d] != st || idx->stride[2][d] != st)) same = 0;
        st *= idx->shape[d];
    }
    if (same)
        TR_CU_FLOAT_SWITCH(dtype, T, binary_same_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)a, (const T *)b,
                                                                                          (T *)out, n, op));
    else
        TR_CU_FLOAT_SWITCH(dtype, T, binary_bcast_kernel<T><<<tr_cu_blocks(n), 256, 0, s>>>((const T *)a, (const T *)b,
                                                                                           (T *)out, *idx, n, op));
    return TR_CU_LAUNCHED("binary", err);
}

template <typename E>
__global__ void copy_kernel(const E *src, E *dst, tr_cu_index idx, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o, is, unused;
        index_offsets(idx, i, &o, &is, &unused);
        dst[o] = src[is];
    }
}

extern "C" int tr_cu_copy(cudaStream_t s, size_t elem_size, const void *src, void *dst, const struct tr_cu_index *idx,
                          int64_t n, struct tr_error *err) {
    if (n == 0) return TR_OK;
    unsigned g = tr_cu_blocks(n);
    switch (elem_size) {
    case 1: copy_kernel<uint8_t><<<g, 256, 0, s>>>((const uint8_t *)src, (uint8_t *)dst, *idx, n); break;
    case 2: copy_kernel<uint16_t><<<g, 256, 0, s>>>((const uint16_t *)src, (uint16_t *)dst, *idx, n); break;
    case 4: copy_kernel<uint32_t><<<g, 256, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, *idx, n); break;
    default: copy_kernel<uint64_t><<<g, 256, 0, s>>>((const uint64_t *)src, (uint64_t *)dst, *idx, n); break;
    }
    return TR_CU_LAUNCHED("copy", err);
}

// Casts go through double for f64 and the integers, through float otherwise, so that a
// float-to-bf16 cast rounds once, as on the cpu.
__device__ __forceinline__ double load_any(const void *p, int dt, int64_t i) {
    switch (dt) {
    case TR_DTYPE_F32: return ((const float *)p)[i];
    case TR_DTYPE_BF16: return __bfloat162float(((const tr_bf16 *)p)[i]);
    case TR_DTYPE_F16: return __half2float(((const tr_f16 *)p)[i]);
    case TR_DTYPE_I32: return ((const int32_t *)p)[i];
    case TR_DTYPE_I64: return (double)((const int64_t *)p)[i];
    default: return ((const double *)p)[i];
    }
}

__global__ void cast_kernel(const void *x, int xdt, void *y, int ydt, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (xdt == TR_DTYPE_I64 && ydt == TR_DTYPE_I32) {
            ((int32_t *)y)[i] = (int32_t)((const int64_t *)x)[i];
            continue;
        }
        if (xdt == TR_DTYPE_I64 && ydt == TR_DTYPE_I64) {
            ((int64_t *)y)[i] = ((const int64_t *)x)[i];
            continue;
        }
        double v = load_any(x, xdt, i);
        switch (ydt) {
        case TR_DTYPE_F32: ((float *)y)[i] = (float)v; break;
        case TR_DTYPE_BF16: ((tr_bf16 *)y)[i] = __float2bfloat16_rn((float)v); break;
        case TR_DTYPE_F16: ((tr_f16 *)y)[i] = __float2half_rn((float)v); break;
        case TR_DTYPE_I32: ((int32_t *)y)[i] = (int32_t)v; break;
        case TR_DTYPE_I64: ((int64_t *)y)[i] = (int64_t)v; break;
        default: ((double *)y)[i] = v; break;
        }
    }
}

extern "C" int tr_cu_cast(cudaStream_t s, const void *x, int xdt, void *y, int ydt, int64_t n, struct tr_error *err) {
    if (n == 0) return TR_OK;
    cast_kernel<<<tr_cu_blocks(n), 256, 0, s>>>(x, xdt, y, ydt, n);
    return TR_CU_LAUNCHED("cast", err);
}

template <typename T>
__global__ void bias_act_kernel(T *y, const void *bias, int bdt, int64_t total, int64_t n, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        float v = tr_ld(y + i);
        if (bias) v += tr_ld_dt(bias, bdt, i % n);
        tr_st(y + i, apply_act(v, act));
    }
}

extern "C" int tr_cu_bias_act(cudaStream_t s, int dtype, void *y, const void *bias, int bdt, int64_t rows, int64_t n,
                              int act, struct tr_error *err) {
    int64_t total = rows * n;
    if (total == 0) return TR_OK;
    TR_CU_FLOAT_SWITCH(dtype, T, bias_act_kernel<T><<<tr_cu_blocks(total), 256, 0, s>>>((T *)y, bias, bdt, total, n, act));
    return TR_CU_LAUNCHED("bias_act", err);
}

extern "C" int tr_cu_fill_zero(cudaStream_t s, void *p, size_t nbytes, struct tr_error *err) {
    if (nbytes == 0) return TR_OK;
    return TR_CU_CHECK(cudaMemsetAsync(p, 0, nbytes, s), "cudaMemsetAsync (zero fill)", err);
}
