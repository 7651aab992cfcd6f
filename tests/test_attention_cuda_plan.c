/* The tensor-core attention's plan, no GPU needed (plugins/kernels/cuda/attention_plan.h):
 * the path each (dtype, math, head size) takes, tilings that fit the shared memory of an
 * H100/H200 (227 KB) and of an A100 (163 KB) with a layout whose regions neither overlap
 * nor break WMMA's alignment, the CUDA-core fallbacks, and the key (query) spans a query
 * (key) block visits under the causal bound and the sliding window against a brute-force
 * count of the visible pairs. Prints the tile table the kernel files quote. */
#include <stdio.h>
#include "testutil.h"
#include "../plugins/kernels/cuda/attention_plan.h"

static const int64_t HEADS[] = {16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256};
static const int KINDS[] = {TR_ATTN_FWD, TR_ATTN_DQ, TR_ATTN_DKDV};
static const char *const KIND_NAMES[] = {"fwd", "dq", "dkdv"};

/* Bytes of region r in plan pl (what the kernels address), recomputed from the plan's
 * leading dimensions. */
static size_t region_bytes(const struct tr_attn_plan *pl, int r) {
    const size_t e = (size_t)pl->elem, w16 = (size_t)pl->warps * 16, br = (size_t)pl->br, bc = (size_t)pl->bc;
    const int fwd = pl->kind == TR_ATTN_FWD, dkdv = pl->kind == TR_ATTN_DKDV;
    switch (r) {
    case TR_ATTN_R_ROWS_A: return br * (size_t)pl->ld_d * e;
    case TR_ATTN_R_ROWS_B: return fwd ? 0 : br * (size_t)pl->ld_dv * e;
    case TR_ATTN_R_TILE_A: return bc * (size_t)pl->ld_d * e;
    case TR_ATTN_R_TILE_B: return bc * (size_t)pl->ld_dv * e;
    case TR_ATTN_R_S: return w16 * (size_t)pl->ld_s * 4;
    case TR_ATTN_R_DP: return fwd ? 0 : w16 * (size_t)pl->ld_s * 4;
    case TR_ATTN_R_P: return pl->kind == TR_ATTN_DQ ? 0 : w16 * (size_t)pl->ld_p * e;
    case TR_ATTN_R_DS: return fwd ? 0 : w16 * (size_t)pl->ld_p * e;
    case TR_ATTN_R_ACC: return w16 * (size_t)(fwd ? pl->ld_acc_dv : pl->ld_acc_d) * 4;
    case TR_ATTN_R_ACC2: return dkdv ? w16 * (size_t)pl->ld_acc_dv * 4 : 0;
    case TR_ATTN_R_STAT: return dkdv ? 3 * bc * 4 : 0;
    default: return 0;
    }
}

/* The layout's invariants: inside smem, 128-byte aligned regions, no two overlapping
 * except P over S and DS over DP for f32 (same ld, same element size), WMMA's ld rules. */
static void check_layout(const struct tr_attn_plan *pl, int64_t D, int64_t Dv, size_t smem_max) {
    assert_true(pl->smem <= smem_max);
    assert_int_equal(pl->br, 16 * pl->warps);
    assert_true(pl->warps >= 1 && pl->warps <= 4 && pl->bc >= 16 && pl->bc % 16 == 0);
    assert_true(pl->ld_d >= D && pl->ld_dv >= Dv && pl->ld_s >= pl->bc && pl->ld_p >= pl->bc);
    assert_true(pl->ld_acc_d >= D && pl->ld_acc_dv >= Dv);
    /* ld a multiple of 16 bytes; a 16-row band 32-byte aligned */
    const int lds[] = {pl->ld_d * pl->elem, pl->ld_dv * pl->elem, pl->ld_s * 4, pl->ld_p * pl->elem,
                       pl->ld_acc_d * 4, pl->ld_acc_dv * 4};
    for (size_t i = 0; i < sizeof lds / sizeof lds[0]; i++) assert_int_equal(lds[i] % 16, 0);
    for (int r = 0; r < TR_ATTN_R_COUNT; r++) {
        size_t n = region_bytes(pl, r);
        if (!n) continue;
        assert_int_equal(pl->off[r] % 128, 0);
        assert_true(pl->off[r] + n <= pl->smem);
        for (int o = 0; o < r; o++) {
            size_t m = region_bytes(pl, o);
            if (!m) continue;
            int alias = pl->elem == 4 && ((r == TR_ATTN_R_P && o == TR_ATTN_R_S) || (r == TR_ATTN_R_DS && o == TR_ATTN_R_DP));
            int overlap = pl->off[r] < pl->off[o] + m && pl->off[o] < pl->off[r] + n;
            if (alias) {
                assert_int_equal(pl->off[r], pl->off[o]);
                assert_int_equal(pl->ld_p, pl->ld_s);
            } else if (overlap) {
                fail_msg("%s D=%lld Dv=%lld: regions %d and %d overlap", KIND_NAMES[pl->kind], (long long)D,
                         (long long)Dv, r, o);
            }
        }
    }
}

/* Every (dtype, math, D, Dv) the route sends to tensor cores has a tiling that fits both
 * devices; f32 in strict math never does. */
static void test_paths_fit(void **state) {
    (void)state;
    static const int dts[] = {TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F32};
    static const int maths[] = {TR_MATH_DEFAULT, TR_MATH_F32, TR_MATH_TF32};
    static const size_t limits[] = {TR_ATTN_SMEM_H100, TR_ATTN_SMEM_A100};
    for (size_t a = 0; a < 3; a++)
        for (size_t m = 0; m < 3; m++)
            for (size_t di = 0; di < sizeof HEADS / sizeof HEADS[0]; di++)
                for (size_t vi = 0; vi < sizeof HEADS / sizeof HEADS[0]; vi += 3)
                    for (size_t kd = 0; kd < 3; kd++)
                        for (size_t lim = 0; lim < 2; lim++) {
                            const int64_t D = HEADS[di], Dv = vi == 0 ? D : HEADS[vi];
                            struct tr_attn_plan pl;
                            int path = tr_attn_plan_make(&pl, KINDS[kd], dts[a], maths[m], D, Dv, 0, 8, limits[lim]);
                            int tc = dts[a] != TR_DTYPE_F32 || maths[m] == TR_MATH_TF32;
                            if (path != (tc ? TR_ATTN_PATH_TC : TR_ATTN_PATH_SIMPLE))
                                fail_msg("%s %s math %d D=%lld Dv=%lld (%zu B): path %d", KIND_NAMES[kd],
                                         tr_dtype_name((enum tr_dtype)dts[a]), maths[m], (long long)D, (long long)Dv,
                                         limits[lim], path);
                            if (path == TR_ATTN_PATH_TC) {
                                assert_int_equal(pl.elem, dts[a] == TR_DTYPE_F32 ? 4 : 2);
                                assert_int_equal(pl.kind, KINDS[kd]);
                                check_layout(&pl, D, Dv, limits[lim]);
                            }
                        }
}

/* The sizes the model rows run, on an H100/H200: the largest tiling is taken, and the
 * table the kernel files quote. D=256 f32 in tf32 fits every kernel. */
static void test_tile_table(void **state) {
    (void)state;
    static const int64_t Ds[] = {64, 80, 96, 112, 128, 256};
    static const int dts[] = {TR_DTYPE_BF16, TR_DTYPE_F32};
    printf("kernel  dtype        D  warps x bc  smem (KB)\n");
    for (size_t kd = 0; kd < 3; kd++)
        for (size_t a = 0; a < 2; a++)
            for (size_t di = 0; di < sizeof Ds / sizeof Ds[0]; di++) {
                struct tr_attn_plan pl;
                int path = tr_attn_plan_make(&pl, KINDS[kd], dts[a], TR_MATH_TF32, Ds[di], Ds[di], 0, 32 * 12,
                                             TR_ATTN_SMEM_H100);
                assert_int_equal(path, TR_ATTN_PATH_TC);
                printf("%-6s  %-10s %3lld  %d x %-6d  %.1f\n", KIND_NAMES[kd],
                       dts[a] == TR_DTYPE_F32 ? "f32 (tf32)" : "bf16/f16", (long long)Ds[di], pl.warps, pl.bc,
                       (double)pl.smem / 1024.0);
                /* 4-warp blocks, two per SM, wherever the head size allows it */
                if (Ds[di] <= (KINDS[kd] == TR_ATTN_DKDV ? 64 : 128) && dts[a] != TR_DTYPE_F32) {
                    assert_int_equal(pl.warps, 4);
                    assert_true(2 * (pl.smem + 1024) <= TR_ATTN_SMEM_H100 + 1024);
                }
            }
    /* BERT base and Gemma's heads in bf16 take the widest tiling for the forward */
    struct tr_attn_plan pl;
    tr_attn_plan_make(&pl, TR_ATTN_FWD, TR_DTYPE_BF16, TR_MATH_DEFAULT, 256, 256, 0, 16, TR_ATTN_SMEM_H100);
    assert_true(pl.warps == 4 && pl.bc == 64);
    tr_attn_plan_make(&pl, TR_ATTN_FWD, TR_DTYPE_BF16, TR_MATH_DEFAULT, 64, 64, 0, 16, TR_ATTN_SMEM_H100);
    assert_true(pl.warps == 4 && pl.bc == 64);
    tr_attn_plan_make(&pl, TR_ATTN_FWD, TR_DTYPE_F32, TR_MATH_TF32, 256, 256, 0, 16, TR_ATTN_SMEM_H100);
    assert_true(pl.warps == 4 && pl.bc == 32);
}

/* What stays on the CUDA-core kernels. */
static void test_fallbacks(void **state) {
    (void)state;
    struct tr_attn_plan pl;
    const size_t lim = TR_ATTN_SMEM_H100;
    for (size_t kd = 0; kd < 3; kd++) {
        const int k = KINDS[kd];
        /* head sizes not a multiple of 16, zero, or over 256 */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 72, 72, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 64, 40, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F16, 0, 8, 8, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F16, 0, 0, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 272, 272, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        /* f32 in strict math (default and f32), and f32 asked for bf16 math */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F32, TR_MATH_DEFAULT, 64, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F32, TR_MATH_F32, 64, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F32, TR_MATH_BF16, 64, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        /* f64 and integers */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F64, TR_MATH_TF32, 64, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_I32, 0, 64, 64, 0, 8, lim), TR_ATTN_PATH_SIMPLE);
        /* ATTENTION_REL's bias terms */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 64, 64, 1, 8, lim), TR_ATTN_PATH_SIMPLE);
        /* a grid taller than 65535 (B·H) */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 64, 64, 0, 65536, lim), TR_ATTN_PATH_SIMPLE);
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_BF16, 0, 64, 64, 0, 65535, lim), TR_ATTN_PATH_TC);
        /* a device whose shared memory holds no tiling (48 KB without the opt-in) */
        assert_int_equal(tr_attn_plan_make(&pl, k, TR_DTYPE_F32, TR_MATH_TF32, 256, 256, 0, 8, 48 * 1024),
                         TR_ATTN_PATH_SIMPLE);
        assert_int_equal(pl.smem, 0);
    }
}

/* Visibility as ops.h states it: key j is seen by query i iff i − window < j <= i with
 * positions aligned at the end of k (off = Tk − Tq), the causal bound alone j <= i + off. */
static int seen(int64_t Tq, int64_t Tk, int causal, int window, int64_t i, int64_t j) {
    const int64_t pos = i + Tk - Tq;
    if (window > 0) return j <= pos && j > pos - window;
    if (causal) return j <= pos;
    return 1;
}

static const int64_t TQS[] = {1, 5, 16, 33, 64, 100, 130};
static const int64_t TKS[] = {1, 7, 16, 40, 64, 129};
static const int WINDOWS[] = {0, 1, 3, 17, 64, 1000};
static const int64_t BLOCKS[] = {16, 32, 64};

/* Every combination of TQS, TKS, causal or not, WINDOWS and a block size of BLOCKS. */
typedef void span_case_fn(int64_t Tq, int64_t Tk, int causal, int win, int64_t blk, void *arg);
static void each_span_case(span_case_fn *fn, void *arg) {
    for (size_t a = 0; a < sizeof TQS / sizeof TQS[0]; a++)
        for (size_t b = 0; b < sizeof TKS / sizeof TKS[0]; b++)
            for (int causal = 0; causal < 2; causal++)
                for (size_t w = 0; w < sizeof WINDOWS / sizeof WINDOWS[0]; w++)
                    for (size_t bi = 0; bi < sizeof BLOCKS / sizeof BLOCKS[0]; bi++)
                        fn(TQS[a], TKS[b], causal, WINDOWS[w], BLOCKS[bi], arg);
}

/* Whether query i sees key j: seen, and the plan's tr_attn_plan_visible must agree. */
static int visible(int64_t Tq, int64_t Tk, int causal, int win, int64_t i, int64_t j) {
    const int v = seen(Tq, Tk, causal, win, i, j);
    assert_int_equal(tr_attn_plan_visible(Tq, Tk, causal, win, i, j), v);
    return v;
}

/* The plan's span [s, e) for the block [b0, b0 + bn) of queries (by_query) or of keys is
 * exactly the other side's indices seen from the block, which are contiguous; empty
 * (s >= e) when there are none. Returns whether there are any. */
static int expect_span(int64_t Tq, int64_t Tk, int causal, int win, int by_query, int64_t b0, int64_t bn, int64_t s,
                       int64_t e) {
    const int64_t n_block = by_query ? Tq : Tk, n_other = by_query ? Tk : Tq;
    const int64_t b1 = b0 + bn < n_block ? b0 + bn : n_block;
    int64_t lo = -1, hi = -1, nvis = 0;
    for (int64_t o = 0; o < n_other; o++) {
        int any = 0;
        for (int64_t x = b0; x < b1; x++)
            any |= by_query ? visible(Tq, Tk, causal, win, x, o) : visible(Tq, Tk, causal, win, o, x);
        if (!any) continue;
        if (lo < 0) lo = o;
        hi = o;
        nvis++;
    }
    if (nvis == 0) {
        assert_true(s >= e);
        return 0;
    }
    if (s != lo || e != hi + 1 || nvis != hi - lo + 1)
        fail_msg("Tq %lld Tk %lld causal %d window %d %s block %lld: span [%lld,%lld), visible [%lld,%lld] (%lld %s)",
                 (long long)Tq, (long long)Tk, causal, win, by_query ? "query" : "key", (long long)b0, (long long)s,
                 (long long)e, (long long)lo, (long long)hi, (long long)nvis, by_query ? "keys" : "queries");
    return 1;
}

struct tiles {
    long long visited, full;
};

static void key_span_case(int64_t Tq, int64_t Tk, int causal, int win, int64_t br, void *arg) {
    struct tiles *t = arg;
    for (size_t ci = 0; ci < sizeof BLOCKS / sizeof BLOCKS[0]; ci++) {
        const int64_t bc = BLOCKS[ci];
        for (int64_t q0 = 0; q0 < Tq; q0 += br) {
            int64_t kb, ke;
            tr_attn_plan_key_span(Tq, Tk, causal, win, q0, br, &kb, &ke);
            if (!expect_span(Tq, Tk, causal, win, 1, q0, br, kb, ke)) continue;
            const int64_t qe = q0 + br < Tq ? q0 + br : Tq;
            for (int64_t t0 = kb; t0 < ke; t0 += bc) {
                int any = 0;
                for (int64_t j = t0; j < t0 + bc && j < Tk; j++)
                    for (int64_t i = q0; i < qe; i++) any |= seen(Tq, Tk, causal, win, i, j);
                assert_true(any); /* no tile that no row sees */
                t->visited++;
            }
            t->full += (Tk + bc - 1) / bc;
        }
    }
}

/* For every query block, the key span is exactly the union of the keys its rows see (a
 * contiguous range); the tiles walked from it cover every visible key and none of them is
 * wholly invisible. */
static void test_key_span(void **state) {
    (void)state;
    struct tiles t = {0};
    each_span_case(key_span_case, &t);
    assert_true(t.visited < t.full); /* the bounds skip tiles */
}

static void query_span_case(int64_t Tq, int64_t Tk, int causal, int win, int64_t bk, void *arg) {
    (void)arg;
    for (int64_t j0 = 0; j0 < Tk; j0 += bk) {
        int64_t ib, ie;
        tr_attn_plan_query_span(Tq, Tk, causal, win, j0, bk, &ib, &ie);
        expect_span(Tq, Tk, causal, win, 0, j0, bk, ib, ie);
    }
}

/* For every key block, the query span is exactly the set of queries that see one of its
 * keys (the dk/dv kernel's walk). */
static void test_query_span(void **state) {
    (void)state;
    each_span_case(query_span_case, NULL);
}

TR_TEST_MAIN(NULL, NULL, test_paths_fit, test_tile_table, test_fallbacks, test_key_span, test_query_span)
