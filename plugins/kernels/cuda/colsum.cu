// Column reductions split across the grid (host/colsum_plan.h says how): per block a
// partial sum over a slice of rows, coalesced (consecutive threads on consecutive
// columns), then one combine over the slices in a fixed order. The combine is this same
// kernel run over the partials (outer, slices, cols) with one slice.
#include "cu_common.cuh"
#include "host/colsum_plan.h"

template <bool MAX>
__device__ __forceinline__ float colsum_fold(float acc, float v) {
    return MAX ? tr_maxf(acc, v) : acc + v;
}

// The summand of one element: x and dy point at it, st at its row's statistics.
template <typename T, int TERM>
__device__ __forceinline__ float colsum_term(const T *x, const T *dy, const float *st) {
    if (TERM == TR_CU_COLSUM_LN_GAMMA) return tr_ld(dy) * (tr_ld(x) - st[0]) * st[1];
    if (TERM == TR_CU_COLSUM_RMS_W) return tr_ld(dy) * tr_ld(x) * st[0];
    return tr_ld(x);
}

__device__ __forceinline__ void colsum_store(void *out, int odt, int64_t i, float v) {
    if (odt == TR_DTYPE_F32) ((float *)out)[i] = v;
    else if (odt == TR_DTYPE_BF16) ((tr_bf16 *)out)[i] = __float2bfloat16_rn(v);
    else ((tr_f16 *)out)[i] = __float2half_rn(v);
}

// x (outer, rows, cols); block (o·col_tiles + t, s) of (blockDim.x columns, blockDim.y
// lanes) folds rows [s·slice_rows, +slice_rows) of its columns: each thread the rows
// r ≡ lane (mod lanes) in increasing order, then the lanes in a fixed tree. One slice:
// out[o, j] = result (divided by div when div >= 0, a MEAN); several: partial[o, s, j].
template <typename T, int TERM, bool MAX>
__global__ void __launch_bounds__(TR_CUDA_COLSUM_THREADS)
    colsum_kernel(const T *x, const T *dy, const float *st, float *partial, void *out, int odt, int64_t rows,
                  int64_t cols, int64_t col_tiles, int64_t slice_rows, float div) {
    __shared__ float sh[TR_CUDA_COLSUM_THREADS];
    const int tx = blockDim.x, lanes = blockDim.y, lx = threadIdx.x, ly = threadIdx.y;
    const int64_t o = blockIdx.x / col_tiles, j = (int64_t)(blockIdx.x % col_tiles) * tx + lx;
    const int64_t r0 = (int64_t)blockIdx.y * slice_rows, r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
    const int64_t base = o * rows * cols;
    float acc = MAX ? -INFINITY : 0.0f;
    if (j < cols) {
        // pointers at row r, stepped lanes rows at a time (fewer registers than indices)
        const int64_t step = (int64_t)lanes * cols;
        const int sst = TERM == TR_CU_COLSUM_LN_GAMMA ? 2 : 1; // statistics per row
        int64_t r = r0 + ly;
        const T *px = x + base + r * cols + j, *pd = dy ? dy + base + r * cols + j : NULL;
        const float *ps = st ? st + r * sst : NULL;
        // U rows' loads issued together, folded in row order: 8 of x alone, 4 of x and dy
        // (16 to 64 KB in flight per SM at 1536-2048 threads, what HBM's latency asks)
        constexpr int U = TERM == TR_CU_COLSUM_X ? 8 : 4;
        for (; r + (U - 1) * lanes < r1; r += U * lanes) {
            float v[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                v[u] = colsum_term<T, TERM>(px + u * step, TERM == TR_CU_COLSUM_X ? pd : pd + u * step,
                                            TERM == TR_CU_COLSUM_X ? ps : ps + u * lanes * sst);
#pragma unroll
            for (int u = 0; u < U; u++) acc = colsum_fold<MAX>(acc, v[u]);
            px += U * step;
            if (TERM != TR_CU_COLSUM_X) pd += U * step, ps += U * lanes * sst;
        }
        for (; r < r1; r += lanes) {
            acc = colsum_fold<MAX>(acc, colsum_term<T, TERM>(px, pd, ps));
            px += step;
            if (TERM != TR_CU_COLSUM_X) pd += step, ps += lanes * sst;
        }
    }
    sh[ly * tx + lx] = acc;
    __syncthreads();
    for (int h = lanes / 2; h > 0; h >>= 1) {
        if (ly < h) sh[ly * tx + lx] = colsum_fold<MAX>(sh[ly * tx + lx], sh[(ly + h) * tx + lx]);
        __syncthreads();
    }
    if (ly != 0 || j >= cols) return;
    const float v = sh[lx];
    if (gridDim.y == 1) colsum_store(out, odt, o * cols + j, div >= 0.0f ? v / div : v);
    else partial[(o * gridDim.y + blockIdx.y) * cols + j] = v;
}

template <typename T, int TERM, bool MAX>
static void colsum_launch(cudaStream_t s, const struct tr_cu_colsum *a, const struct tr_cuda_colsum_plan *p,
                          float *partial, float div) {
    dim3 block((unsigned)p->tx, (unsigned)p->lanes), grid((unsigned)p->blocks_x, (unsigned)p->slices);
    colsum_kernel<T, TERM, MAX><<<grid, block, 0, s>>>((const T *)a->x, (const T *)a->dy, a->stats, partial, a->out,
                                                       a->odt, a->rows, a->cols, p->col_tiles, p->slice_rows, div);
}

template <bool MAX>
static void colsum_combine(cudaStream_t s, const struct tr_cu_colsum *a, const struct tr_cuda_colsum_plan *p,
                           const float *partial, float div) {
    // the partials (outer, slices, cols) folded over the slices: the same split, one slice
    dim3 block((unsigned)p->tx, (unsigned)p->lanes), grid((unsigned)p->blocks_x, 1);
    colsum_kernel<float, TR_CU_COLSUM_X, MAX><<<grid, block, 0, s>>>(partial, NULL, NULL, NULL, a->out, a->odt,
                                                                     p->slices, a->cols, p->col_tiles, p->slices, div);
}

extern "C" int tr_cu_colsum(cudaStream_t s, const struct tr_cu_colsum *a, int sms, float *partial,
                            struct tr_error *err) {
    struct tr_cuda_colsum_plan p;
    if (tr_cuda_colsum_plan(a->outer, a->rows, a->cols, sms, &p) != 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "column reduction: (%lld, %lld, %lld) is beyond one cuda grid",
                            (long long)a->outer, (long long)a->rows, (long long)a->cols);
    if (p.blocks_x == 0) return TR_OK;
    const bool mx = a->op == TR_OP_MAX;
    if (mx && a->term != TR_CU_COLSUM_X)
        return tr_error_set(err, TR_ERR_INTERNAL, "column reduction: a max of term %d", a->term);
    const float div = a->op == TR_OP_MEAN ? (float)a->rows : -1.0f; // MEAN over no rows: 0/0
    if (p.slices > 1 && !partial)
        return tr_error_set(err, TR_ERR_INTERNAL, "column reduction: no scratch for %lld partial rows",
                            (long long)p.slices);
    if (a->term == TR_CU_COLSUM_LN_GAMMA)
        TR_CU_FLOAT_SWITCH(a->dtype, T, (colsum_launch<T, TR_CU_COLSUM_LN_GAMMA, false>(s, a, &p, partial, div)));
    else if (a->term == TR_CU_COLSUM_RMS_W)
        TR_CU_FLOAT_SWITCH(a->dtype, T, (colsum_launch<T, TR_CU_COLSUM_RMS_W, false>(s, a, &p, partial, div)));
    else if (mx)
        TR_CU_FLOAT_SWITCH(a->dtype, T, (colsum_launch<T, TR_CU_COLSUM_X, true>(s, a, &p, partial, div)));
    else
        TR_CU_FLOAT_SWITCH(a->dtype, T, (colsum_launch<T, TR_CU_COLSUM_X, false>(s, a, &p, partial, div)));
    int rc = TR_CU_LAUNCHED("column reduction", err);
    if (rc || p.slices == 1) return rc;
    if (mx) colsum_combine<true>(s, a, &p, partial, div);
    else colsum_combine<false>(s, a, &p, partial, div);
    return TR_CU_LAUNCHED("column reduction combine", err);
}
