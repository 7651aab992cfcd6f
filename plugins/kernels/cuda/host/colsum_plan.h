/* How a column reduction is split across the grid, in plain C so that it is unit-tested
 * without a GPU (tests/test_cuda_plan_colsum.c); the kernel is cuda/colsum.cu.
 *
 * A column reduction sums (or maxes) x (outer, rows, cols) over rows into out (outer,
 * cols): bias gradients (REDUCE over a leading axis), layer-norm γ gradients, RMS-norm
 * weight gradients. One thread per column leaves most of the GPU idle (768 columns: 3 of
 * 132 SMs), so the rows are cut into slices as well:
 *
 * - a block is TR_CUDA_COLSUM_THREADS threads, tx columns wide (consecutive threads on
 *   consecutive columns: a warp reads one contiguous run of a row, or of several rows
 *   when cols < 32) and lanes = TR_CUDA_COLSUM_THREADS / tx rows deep;
 * - the grid is (outer · col_tiles) x slices blocks; block (o·col_tiles + t, s) sums
 *   rows [s·slice_rows, min(rows, (s+1)·slice_rows)) of columns [t·tx, t·tx + tx) of
 *   batch o: each thread its rows r ≡ lane (mod lanes) in increasing order, then the
 *   lanes in a fixed tree; the result is written to the f32 partials (outer, slices,
 *   cols), or straight to out when slices == 1;
 * - one combine kernel, a thread per output, folds the slices in increasing order.
 *
 * Every sum has a fixed order, so a result is bitwise the same run after run on one GPU
 * (docs/determinism.md); the order depends on the plan, that is on the SM count, so two
 * GPU models may differ in the low bits. No atomics.
 *
 * The rule: the blocks resident at once (TR_CUDA_COLSUM_BLOCKS_PER_SM per SM: 2048
 * threads; the kernels take 32 registers on sm_90, so all 8 are; on sm_80 some take 40,
 * and 6 are, the rest a short second wave) are the target; with outer·col_tiles blocks already at the
 * target the rows are not split; otherwise slices = ceil(target / (outer·col_tiles)),
 * at most floor(rows / (TR_CUDA_COLSUM_MIN_ROWS_PER_LANE·lanes)) (each thread sums that
 * many rows at least, so the partials cost little beside the data) and at most
 * TR_CUDA_COLSUM_MAX_SLICES (a grid's y extent). slice_rows is rounded up to a multiple
 * of lanes and slices recomputed, so no slice is empty. */
#ifndef TRIDENT_CUDA_COLSUM_PLAN_H
#define TRIDENT_CUDA_COLSUM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CUDA_COLSUM_THREADS 256
#define TR_CUDA_COLSUM_BLOCKS_PER_SM 8
#define TR_CUDA_COLSUM_MIN_ROWS_PER_LANE 8
#define TR_CUDA_COLSUM_MAX_SLICES 65535
#define TR_CUDA_COLSUM_DEFAULT_SMS 132 /* an H100/H200 when the count is unknown (<= 0) */

struct tr_cuda_colsum_plan {
    int tx, lanes;            /* block: tx columns by lanes rows (tx·lanes = TR_CUDA_COLSUM_THREADS) */
    int64_t col_tiles;        /* ceil(cols / tx) */
    int64_t blocks_x;         /* outer · col_tiles */
    int64_t slices;           /* blocks along the rows, >= 1 */
    int64_t slice_rows;       /* rows per slice, a multiple of lanes (the last slice may have fewer) */
    size_t scratch_bytes;     /* f32 partials outer·slices·cols, 0 when slices == 1 */
};

/* Fills p for x (outer, rows, cols) on a GPU of sms SMs. Returns 0, or -1 when the grid
 * cannot be launched (blocks_x above 2^31 - 1, or a negative extent; p is then zeroed).
 * outer or cols 0 give blocks_x 0 (nothing to launch); rows 0 one slice (the kernel
 * writes the empty sum: 0, or -inf for a max). */
int tr_cuda_colsum_plan(int64_t outer, int64_t rows, int64_t cols, int sms, struct tr_cuda_colsum_plan *p);

#ifdef __cplusplus
}
#endif
#endif
