/* The column reductions' grid split, no GPU needed (plugins/kernels/cuda/host/colsum_plan.h):
 * the rule at the shapes it was made for (16384 x 768 on 132 SMs, a 256000-column
 * vocabulary), its invariants over a sweep of shapes and SM counts, and a host replay of
 * exactly the order colsum.cu sums in (threads over their rows, the lanes' tree, the
 * slices' combine) on integer-valued data, so that a row summed twice or never shows as
 * an exact mismatch. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../plugins/kernels/cuda/host/colsum_plan.h"

/* A plan and the fields it must have: X, not checked (the rule's own numbers in the
 * comments of each case). */
#define X (-1)
struct plan_case {
    int64_t outer, rows, cols;
    int sms, rc;
    int64_t tx, lanes, col_tiles, blocks_x, slices, slice_rows, scratch_bytes;
};

static void expect_plan(const struct plan_case *c) {
    struct tr_cuda_colsum_plan p;
    assert_int_equal(tr_cuda_colsum_plan(c->outer, c->rows, c->cols, c->sms, &p), c->rc);
    const int64_t got[7] = {p.tx, p.lanes, p.col_tiles, p.blocks_x, p.slices, p.slice_rows, (int64_t)p.scratch_bytes};
    const int64_t want[7] = {c->tx, c->lanes, c->col_tiles, c->blocks_x, c->slices, c->slice_rows, c->scratch_bytes};
    static const char *const names[7] = {"tx", "lanes", "col_tiles", "blocks_x", "slices", "slice_rows", "scratch_bytes"};
    for (int i = 0; i < 7; i++)
        if (want[i] != X && got[i] != want[i])
            fail_msg("plan (%lld, %lld, %lld) on %d SMs: %s %lld, expected %lld", (long long)c->outer,
                     (long long)c->rows, (long long)c->cols, c->sms, names[i], (long long)got[i], (long long)want[i]);
}

static void test_rule_at_the_issue_shapes(void **state) {
    (void)state;
    static const struct plan_case cases[] = {
        /* BERT base's bias / layer-norm gradients: 24 column tiles x 44 slices = 1056 blocks,
         * 8 per SM on 132 SMs; 44 partial rows of 768 floats */
        {1, 16384, 768, 132, 0, 32, 8, 24, 24, 44, 376, 44 * 768 * sizeof(float)},
        /* the LM head's bias over a 256000 vocabulary: 8000 column tiles fill the GPU, no split */
        {1, 16384, 256000, 132, 0, X, X, 8000, X, 1, X, 0},
        /* few rows: at least 8 rows per thread, so 64 rows of 8 lanes stay one slice */
        {1, 64, 768, 132, 0, X, X, X, X, 1, X, X},
        {1, 127, 768, 132, 0, X, X, X, X, 1, X, X},
        {1, 128, 768, 132, 0, X, X, X, X, 2, X, X},
        /* narrow: 2 columns are a block of 2 x 128 (a warp reads 16 whole rows); capped at
         * 1024 rows per slice: 97 slices of 1031 rows, rounded up to 9 x 128 lanes = 1152
         * rows: 87 slices */
        {1, 100000, 2, 132, 0, 2, 128, X, X, 87, 1152, X},
        /* an unknown SM count plans for 132 */
        {1, 16384, 768, 0, 0, X, X, X, X, 44, X, X},
        /* empty, refused */
        {0, 10, 10, 132, 0, X, X, X, 0, X, X, X},
        {1, 10, 0, 132, 0, X, X, X, 0, X, X, X},
        {3, 0, 10, 132, 0, X, X, X, 3, 1, X, X},
        {1, -1, 10, 132, -1, X, X, X, X, X, X, X},
        {(int64_t)1 << 32, 10, 64, 132, -1, X, X, X, 0, X, X, X},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_plan(&cases[i]);
    /* more SMs, more slices */
    struct tr_cuda_colsum_plan q;
    assert_int_equal(tr_cuda_colsum_plan(1, 16384, 768, 108, &q), 0);
    assert_true(q.slices < 44);
}
#undef X

static void test_invariants(void **state) {
    (void)state;
    const int64_t outers[] = {1, 2, 7, 1000};
    const int64_t rows[] = {1, 7, 8, 63, 64, 65, 511, 4096, 16384, 100003};
    const int64_t cols[] = {1, 2, 3, 5, 16, 31, 32, 33, 768, 1000, 50257, 256000};
    const int sms[] = {1, 108, 132, 144};
    for (size_t a = 0; a < sizeof outers / sizeof *outers; a++)
        for (size_t b = 0; b < sizeof rows / sizeof *rows; b++)
            for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
                for (size_t d = 0; d < sizeof sms / sizeof *sms; d++) {
                    int64_t o = outers[a], r = rows[b], n = cols[c];
                    struct tr_cuda_colsum_plan p;
                    assert_int_equal(tr_cuda_colsum_plan(o, r, n, sms[d], &p), 0);
                    assert_int_equal(p.tx * p.lanes, TR_CUDA_COLSUM_THREADS);
                    assert_true((p.tx & (p.tx - 1)) == 0 && p.tx <= 32);
                    assert_true(p.tx >= (n < 32 ? n : 32)); /* a warp never spans less than the row */
                    assert_true(p.col_tiles * p.tx >= n && (p.col_tiles - 1) * p.tx < n);
                    assert_int_equal(p.blocks_x, o * p.col_tiles);
                    assert_true(p.slices >= 1 && p.slices <= TR_CUDA_COLSUM_MAX_SLICES);
                    assert_int_equal(p.slice_rows % p.lanes, 0);
                    /* every row in one slice, no slice empty */
                    assert_true(p.slices * p.slice_rows >= r);
                    assert_true((p.slices - 1) * p.slice_rows < r);
                    const int64_t target = (int64_t)sms[d] * TR_CUDA_COLSUM_BLOCKS_PER_SM;
                    if (p.slices > 1) {
                        /* split only below the target, and never below 8 rows per thread */
                        assert_true(p.blocks_x < target);
                        assert_true(p.slice_rows >= (int64_t)TR_CUDA_COLSUM_MIN_ROWS_PER_LANE * p.lanes);
                        assert_int_equal(p.scratch_bytes, (size_t)(o * p.slices * n) * sizeof(float));
                        /* the partials stay small: under two waves of blocks' worth of columns */
                        assert_true(p.scratch_bytes <= (size_t)(2 * target * p.tx) * sizeof(float));
                    } else {
                        assert_int_equal(p.scratch_bytes, 0);
                    }
                    /* enough blocks to fill the GPU whenever the rows allow it (rounding a
                     * slice up to whole lanes may cost an eighth of the slices at most) */
                    if (r >= (int64_t)TR_CUDA_COLSUM_MIN_ROWS_PER_LANE * p.lanes * target)
                        assert_true(p.blocks_x * p.slices * 9 >= target * 8);
                }
}

/* colsum.cu's order on the host: block (bx, s), thread (lx, ly) folds rows r0+ly,
 * r0+ly+lanes, ... of its column; the lanes fold in the tree h = lanes/2 .. 1; then the
 * slices in order (the combine: the same kernel over the partials with one slice). */
static float fold(float a, float v, int mx) { return mx ? (v > a ? v : a) : a + v; }

static void replay(const float *x, int64_t outer, int64_t rows, int64_t cols, int64_t col_tiles, int tx, int lanes,
                   int64_t slices, int64_t slice_rows, int mx, float *out) {
    float *sh = malloc(sizeof(float) * TR_CUDA_COLSUM_THREADS);
    for (int64_t bx = 0; bx < outer * col_tiles; bx++)
        for (int64_t s = 0; s < slices; s++) {
            const int64_t o = bx / col_tiles, r0 = s * slice_rows, r1 = r0 + slice_rows < rows ? r0 + slice_rows : rows;
            for (int ly = 0; ly < lanes; ly++)
                for (int lx = 0; lx < tx; lx++) {
                    const int64_t j = (bx % col_tiles) * tx + lx;
                    float acc = mx ? -INFINITY : 0.0f;
                    if (j < cols)
                        for (int64_t r = r0 + ly; r < r1; r += lanes) acc = fold(acc, x[(o * rows + r) * cols + j], mx);
                    sh[ly * tx + lx] = acc;
                }
            for (int h = lanes / 2; h > 0; h >>= 1)
                for (int ly = 0; ly < h; ly++)
                    for (int lx = 0; lx < tx; lx++) sh[ly * tx + lx] = fold(sh[ly * tx + lx], sh[(ly + h) * tx + lx], mx);
            for (int lx = 0; lx < tx; lx++) {
                const int64_t j = (bx % col_tiles) * tx + lx;
                if (j < cols) out[(o * slices + s) * cols + j] = sh[lx];
            }
        }
    free(sh);
}

static void check_replay(int64_t outer, int64_t rows, int64_t cols, int sms, int mx) {
    struct tr_cuda_colsum_plan p;
    assert_int_equal(tr_cuda_colsum_plan(outer, rows, cols, sms, &p), 0);
    float *x = calloc((size_t)(outer * rows * cols) + 1, sizeof(float)); /* zeroed: GCC -O3 sees no writes when empty */
    assert_non_null(x);
    uint64_t st = 12345;
    for (int64_t i = 0; i < outer * rows * cols; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)(st >> 59) - 16); /* small integers: every f32 sum exact */
    }
    float *part = malloc(sizeof(float) * (size_t)(outer * p.slices * cols));
    replay(x, outer, rows, cols, p.col_tiles, p.tx, p.lanes, p.slices, p.slice_rows, mx, part);
    float *got = part;
    float *fin = NULL;
    if (p.slices > 1) { /* the combine: the partials (outer, slices, cols), one slice */
        fin = malloc(sizeof(float) * (size_t)(outer * cols));
        replay(part, outer, p.slices, cols, p.col_tiles, p.tx, p.lanes, 1, p.slices, mx, fin);
        got = fin;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < cols; j++) {
            double ref = mx ? -INFINITY : 0.0;
            for (int64_t r = 0; r < rows; r++) {
                double v = x[(o * rows + r) * cols + j];
                ref = mx ? (v > ref ? v : ref) : ref + v;
            }
            if ((double)got[o * cols + j] != ref)
                fail_msg("(%lld, %lld, %lld) sms %d %s: column %lld of batch %lld: %g, expected %g", (long long)outer,
                         (long long)rows, (long long)cols, sms, mx ? "max" : "sum", (long long)j, (long long)o,
                         (double)got[o * cols + j], ref);
        }
    free(x);
    free(part);
    free(fin);
}

static void test_replay(void **state) {
    (void)state;
    check_replay(1, 16384, 768, 132, 0); /* 44 slices */
    check_replay(1, 16384, 768, 132, 1);
    check_replay(1, 3001, 37, 132, 0);   /* ragged last slice and column tile */
    check_replay(3, 1000, 5, 16, 0);     /* batched, narrow */
    check_replay(3, 1000, 5, 16, 1);
    check_replay(2, 77, 1, 132, 0);      /* one column: 256 lanes */
    check_replay(1, 1, 300, 132, 0);
    check_replay(1, 0, 40, 132, 0);      /* no rows: the empty sum */
}

TR_TEST_MAIN(NULL, NULL, test_rule_at_the_issue_shapes, test_invariants, test_replay)
