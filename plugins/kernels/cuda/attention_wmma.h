// What the tensor-core attention kernels share (attention_tc.cu, attention_bwd_tc.cu;
// CUDA C++ only): the WMMA shapes per staged type, a warp's 16x16 tile product over a
// k extent, a block's staging of rows into shared memory, and the additive terms.
//
// Staged types: tr_bf16 and tr_f16 on 16x16x16 WMMA; float on 16x16x8 with
// wmma::precision::tf32 (the operands rounded to tf32 after each fragment load). Shared
// tiles are row-major with leading dimensions from attention_plan.h (a multiple of 16
// bytes; tile pointers 32-byte aligned).
#ifndef TRIDENT_CUDA_ATTENTION_WMMA_H
#define TRIDENT_CUDA_ATTENTION_WMMA_H

#include <mma.h>
#include <type_traits>
#include "cu_common.cuh"

namespace tr_attn {

using namespace nvcuda;

template <typename T> struct mma_of {
    static constexpr int K = 16;
    typedef T elem;
};
template <> struct mma_of<float> {
    static constexpr int K = 8;
    typedef wmma::precision::tf32 elem;
};

template <typename T> using acc_t = wmma::fragment<wmma::accumulator, 16, 16, mma_of<T>::K, float>;

// acc += A (16 x kdim, row-major, lda) · B (kdim x 16); B column-major (BCOL: the
// transpose of a row-major 16 x kdim tile, ldb its row length) or row-major (ldb).
template <typename T, bool BCOL>
__device__ __forceinline__ void mma(acc_t<T> &acc, const T *a, int lda, const T *b, int ldb, int kdim) {
    constexpr int K = mma_of<T>::K;
    typedef typename mma_of<T>::elem E;
    typedef typename std::conditional<BCOL, wmma::col_major, wmma::row_major>::type LB;
    for (int kk = 0; kk < kdim; kk += K) {
        wmma::fragment<wmma::matrix_a, 16, 16, K, E, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, K, E, LB> fb;
        wmma::load_matrix_sync(fa, a + kk, lda);
        wmma::load_matrix_sync(fb, b + (BCOL ? kk : kk * ldb), ldb);
        if constexpr (sizeof(T) == 4) {
#pragma unroll
            for (int t = 0; t < fa.num_elements; t++) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
#pragma unroll
            for (int t = 0; t < fb.num_elements; t++) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
        }
        wmma::mma_sync(acc, fa, fb, acc);
    }
}

// C (16 x 16 f32 at c, ldc) += A · B, through shared memory: the accumulator tile of a
// row-major f32 buffer is loaded, updated and stored back.
template <typename T, bool BCOL>
__device__ __forceinline__ void mma_acc(float *c, int ldc, const T *a, int lda, const T *b, int ldb, int kdim) {
    acc_t<T> acc;
    wmma::load_matrix_sync(acc, c, ldc, wmma::mem_row_major);
    mma<T, BCOL>(acc, a, lda, b, ldb, kdim);
    wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

// C = A · B (16 x 16 f32 at c, ldc).
template <typename T, bool BCOL>
__device__ __forceinline__ void mma_set(float *c, int ldc, const T *a, int lda, const T *b, int ldb, int kdim) {
    acc_t<T> acc;
    wmma::fill_fragment(acc, 0.0f);
    mma<T, BCOL>(acc, a, lda, b, ldb, kdim);
    wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

// The block stages rows row0 .. row0+rows-1 of src (rows of `width` elements, `valid`
// of them in all) into dst (leading dimension ld), zeros past `valid`; 16-byte moves
// (width·sizeof(T) a multiple of 16, src 16-byte aligned: checked by dispatch.c).
template <typename T>
__device__ __forceinline__ void stage(T *dst, int ld, const T *src, int64_t row0, int64_t valid, int rows, int width) {
    const int cpr = width * (int)sizeof(T) / 16; // 16-byte chunks per row
    for (int idx = threadIdx.x; idx < rows * cpr; idx += blockDim.x) {
        const int r = idx / cpr, c = idx - r * cpr;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (row0 + r < valid) v = reinterpret_cast<const uint4 *>(src + (row0 + r) * width)[c];
        reinterpret_cast<uint4 *>(dst + (size_t)r * ld)[c] = v;
    }
}

__device__ __forceinline__ void zero_warp(float *p, int rows, int ld, int width, int lane) {
    for (int idx = lane; idx < rows * width; idx += 32) p[(idx / width) * ld + idx % width] = 0.0f;
}

// The additive mask of score (i, j) of batch row b, head h (0 without one).
__device__ __forceinline__ float mask_at(const tr_cu_attn &p, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!p.mask) return 0.0f;
    return tr_ld_dt(p.mask, p.mask_dtype, b * p.mask_stride[0] + h * p.mask_stride[1] + i * p.mask_stride[2] +
                                              j * p.mask_stride[3]);
}

__device__ __forceinline__ bool visible(const tr_cu_attn &p, int64_t i, int64_t j) {
    return tr_attn_plan_visible(p.Tq, p.Tk, p.causal, p.window, i, j) != 0;
}

// Whether the half-open ranges [a0, a1) and [b0, b1) meet.
__device__ __forceinline__ bool meets(int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a0 < b1 && b0 < a1; }

} // namespace tr_attn

#endif
