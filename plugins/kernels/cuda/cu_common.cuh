// What every .cu file shares: storage types, loads and stores through f32, the grid
// size of a flat loop, and block reductions.
#ifndef TRIDENT_CU_COMMON_CUH
#define TRIDENT_CU_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include "cuda_internal.h"
#include "attention_plan.h"

typedef __nv_bfloat16 tr_bf16;
typedef __half tr_f16;

__device__ __forceinline__ float tr_ld(const float *p) { return *p; }
__device__ __forceinline__ float tr_ld(const tr_bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ float tr_ld(const tr_f16 *p) { return __half2float(*p); }
__device__ __forceinline__ void tr_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void tr_st(tr_bf16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void tr_st(tr_f16 *p, float v) { *p = __float2half_rn(v); }

// An f32 read of element i of a buffer whose float dtype is known only at run time.
__device__ __forceinline__ float tr_ld_dt(const void *p, int dt, int64_t i) {
    if (dt == TR_DTYPE_F32) return ((const float *)p)[i];
    if (dt == TR_DTYPE_BF16) return __bfloat162float(((const tr_bf16 *)p)[i]);
    return __half2float(((const tr_f16 *)p)[i]);
}

// Blocks for a grid-stride loop over n elements with 256 threads.
static inline unsigned tr_cu_blocks(int64_t n) {
    int64_t b = (n + 255) / 256;
    if (b > 65535LL * 8) b = 65535LL * 8;
    return (unsigned)(b > 0 ? b : 1);
}

__device__ __forceinline__ float tr_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// max(a, b) that keeps a NaN, as the cpu's max, torch's amax and its softmax of a row with
// one do; fmaxf drops it (and a row with one NaN then gave the others finite values).
__device__ __forceinline__ float tr_maxf(float a, float b) { return a != a || b != b ? a + b : fmaxf(a, b); }

__device__ __forceinline__ float tr_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = tr_maxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum (or max) over the block; every thread gets the result. sh holds 32 floats.
template <bool MAX>
__device__ __forceinline__ float tr_block_reduce(float v, float *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = MAX ? tr_warp_max(v) : tr_warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : MAX ? -INFINITY : 0.0f;
    return MAX ? tr_warp_max(v) : tr_warp_sum(v);
}
__device__ __forceinline__ float tr_block_sum(float v, float *sh) { return tr_block_reduce<false>(v, sh); }
__device__ __forceinline__ float tr_block_max(float v, float *sh) { return tr_block_reduce<true>(v, sh); }

// Max and Σ exp(x − max) of a row of C, over the block (cross entropy and its gradient).
template <typename T>
__device__ __forceinline__ void tr_block_row_max_sum(const T *x, int64_t C, float *sh, float *m, float *sum) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) mx = tr_maxf(mx, tr_ld(x + j));
    mx = tr_block_max(mx, sh);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) s += expf(tr_ld(x + j) - mx);
    *m = mx;
    *sum = tr_block_sum(s, sh);
}

// Keys [*kbeg, *kend) that some query of q0 .. q0+bq-1 may see: with off = Tk − Tq,
// query i sees keys up to i + off when causal or windowed, and from i + off − window + 1
// when windowed; all keys otherwise (attention_plan.h, unit-tested without a GPU).
__device__ __forceinline__ void tr_attn_key_span(const struct tr_cu_attn &p, int64_t q0, int64_t bq, int64_t *kbeg,
                                                 int64_t *kend) {
    tr_attn_plan_key_span(p.Tq, p.Tk, p.causal, p.window, q0, bq, kbeg, kend);
}

// Calls f.template operator()<T>() with T the storage type of a float dtype.
#define TR_CU_FLOAT_SWITCH(dt, T, ...)                  \
    do {                                                \
        if ((dt) == TR_DTYPE_F32) {                     \
            typedef float T;                            \
            __VA_ARGS__;                                \
        } else if ((dt) == TR_DTYPE_BF16) {             \
            typedef tr_bf16 T;                          \
            __VA_ARGS__;                                \
        } else {                                        \
            typedef tr_f16 T;                           \
            __VA_ARGS__;                                \
        }                                               \
    } while (0)

#endif
