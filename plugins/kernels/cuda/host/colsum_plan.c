/* The column reductions' grid split (colsum_plan.h). No CUDA here. */
#include <string.h>
#include "colsum_plan.h"

int tr_cuda_colsum_plan(int64_t outer, int64_t rows, int64_t cols, int sms, struct tr_cuda_colsum_plan *p) {
    memset(p, 0, sizeof *p);
    if (outer < 0 || rows < 0 || cols < 0) return -1;
    int tx = 1;
    while (tx < 32 && tx < cols) tx <<= 1;
    p->tx = tx;
    p->lanes = TR_CUDA_COLSUM_THREADS / tx;
    p->col_tiles = (cols + tx - 1) / tx;
    if (outer > 0 && p->col_tiles > INT64_MAX / outer) goto too_big;
    p->blocks_x = outer * p->col_tiles;
    if (p->blocks_x > 0x7fffffffLL) goto too_big;
    p->slices = 1;
    p->slice_rows = rows > 0 ? rows : p->lanes;
    if (p->blocks_x == 0 || rows == 0) return 0;
    const int64_t target = (int64_t)(sms > 0 ? sms : TR_CUDA_COLSUM_DEFAULT_SMS) * TR_CUDA_COLSUM_BLOCKS_PER_SM;
    int64_t slices = p->blocks_x >= target ? 1 : (target + p->blocks_x - 1) / p->blocks_x;
    const int64_t min_rows = (int64_t)TR_CUDA_COLSUM_MIN_ROWS_PER_LANE * p->lanes;
    const int64_t most = rows / min_rows; /* each thread min rows at least */
    if (slices > most) slices = most;
    if (slices > TR_CUDA_COLSUM_MAX_SLICES) slices = TR_CUDA_COLSUM_MAX_SLICES;
    if (slices < 1) slices = 1;
    int64_t sr = (rows + slices - 1) / slices;
    sr = (sr + p->lanes - 1) / p->lanes * p->lanes;
    p->slice_rows = sr;
    p->slices = (rows + sr - 1) / sr;
    if (p->slices > 1) p->scratch_bytes = (size_t)outer * (size_t)p->slices * (size_t)cols * sizeof(float);
    return 0;
too_big:
    memset(p, 0, sizeof *p);
    return -1;
}
