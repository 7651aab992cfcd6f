/* The tensor-core attention kernels' plan, in plain C: which path a shape takes, the
 * tile sizes per kernel, dtype and head size, the shared-memory layout and its bytes, and
 * which key (query) tiles a query (key) block visits under the causal bound and the
 * sliding window. The .cu kernels and dispatch.c read it; tests/test_attention_cuda_plan.c
 * checks it without a GPU. Everything here is arithmetic on the shape: no CUDA call.
 *
 * Paths (tr_attn_plan_make):
 *   TC      bf16/f16 data on 16x16x16 WMMA, or f32 data with math = tf32 on
 *           wmma::precision::tf32 (16x16x8); D and Dv multiples of 16 up to 256; no
 *           ATTENTION_REL bias terms; a tiling whose shared memory fits the device's
 *           opt-in limit (227 KB on H100/H200, 163 KB on A100).
 *   SIMPLE  everything else (f32 in strict math, odd head sizes, the REL terms): the
 *           CUDA-core kernels of attention.cu and attention_bwd.cu.
 *
 * Kernels and their tiles: a block is `warps` warps of 16 rows each (br = 16·warps rows)
 * and walks the other side in tiles of bc:
 *   FWD   rows = queries of one (b, h), tiles of keys     (also the backward's lse/delta)
 *   DQ    rows = queries of one (b, h), tiles of keys
 *   DKDV  rows = keys of one (b, hk),   tiles of queries of every head of the group
 * Visibility (ops.h ATTENTION): with off = Tk − Tq, query i sees key j iff j <= i + off
 * when causal or windowed, and j > i + off − window when window > 0. */
#ifndef TRIDENT_CUDA_ATTENTION_PLAN_H
#define TRIDENT_CUDA_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "trident/dtype.h"

#if defined(__CUDACC__)
#define TR_ATTN_HD __host__ __device__
#else
#define TR_ATTN_HD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The joint backward (dq, dk and dv of one call, any of them absent) as tr_cuda_run takes
 * it from route.c: in[0..3] = q, k, v, dy, in[4] the mask, in[5..7] = dq, dk, dv, each
 * present when bit i of attrs.ints[7] is set; floats[0] scale (0: 1/sqrt(D)), ints[0]
 * causal, ints[1] window. A private op code: tr_kernels_run never passes a negative op. */
#define TR_CUDA_OP_ATTENTION_BACKWARD (-1919)
/* ATTENTION and its ATTENTION_LSE in one pass: in[0..2] q, k, v, in[3] the mask when bit 0
 * of attrs.ints[7] is set, in[4] lse (B,H,Tq) f32; out the attention output. */
#define TR_CUDA_OP_ATTENTION_FWD (-1920)
/* ATTENTION_REL's joint backward: in[0..5] q, k, v, rel_h, rel_w, dy, in[6 + w] gradient w
 * (dq, dk, dv, drel_h, drel_w) when bit w of attrs.ints[7] is set; with 13 inputs
 * in[11..12] the forward's y and lse (bits 11 and 12 set); floats[0] scale. */
#define TR_CUDA_OP_ATTENTION_REL_BACKWARD (-1921)
/* ATTENTION_REL and its ATTENTION_REL_LSE in one pass: in[0..4] q, k, v, rel_h, rel_w,
 * in[5] lse (B,H,Tq) f32; out the attention output. */
#define TR_CUDA_OP_ATTENTION_REL_FWD (-1922)

/* Shared-memory opt-in limits per block (cudaDevAttrMaxSharedMemoryPerBlockOptin). */
#define TR_ATTN_SMEM_H100 (227u * 1024u)
#define TR_ATTN_SMEM_A100 (163u * 1024u)

enum tr_attn_path { TR_ATTN_PATH_SIMPLE = 0, TR_ATTN_PATH_TC = 1 };
enum tr_attn_kind { TR_ATTN_FWD = 0, TR_ATTN_DQ = 1, TR_ATTN_DKDV = 2 };

/* Shared-memory regions (byte offsets in tr_attn_plan.off; absent ones have size 0):
 *   ROWS_A  the block's rows of width D  (FWD, DQ: q; DKDV: k)        T, br x ld_d
 *   ROWS_B  the block's rows of width Dv (DQ: dy; DKDV: v)            T, br x ld_dv
 *   TILE_A  a tile of width D  (FWD, DQ: k; DKDV: q)                   T, bc x ld_d
 *   TILE_B  a tile of width Dv (FWD, DQ: v; DKDV: dy)                  T, bc x ld_dv
 *   S       scores per warp                                            f32, warps x 16 x ld_s
 *   DP      dP per warp (DQ, DKDV)                                     f32, warps x 16 x ld_s
 *   P       probabilities per warp (FWD, DKDV), the MMA's input        T, warps x 16 x ld_p
 *   DS      dS per warp (DQ, DKDV)                                     T, warps x 16 x ld_p
 *   ACC     f32 accumulator per warp (FWD: O, width Dv; DQ, DKDV: dq or dk, width D)
 *   ACC2    DKDV's dv accumulator per warp, width Dv
 *   STAT    DKDV: the tile's lse, delta and ps (3 x bc floats)
 * With f32 data (elem 4) P aliases S and DS aliases DP: each element is read and then
 * written by the same lane at the same index. */
enum {
    TR_ATTN_R_ROWS_A, TR_ATTN_R_ROWS_B, TR_ATTN_R_TILE_A, TR_ATTN_R_TILE_B, TR_ATTN_R_S, TR_ATTN_R_DP,
    TR_ATTN_R_P, TR_ATTN_R_DS, TR_ATTN_R_ACC, TR_ATTN_R_ACC2, TR_ATTN_R_STAT, TR_ATTN_R_COUNT
};

struct tr_attn_plan {
    int kind;          /* enum tr_attn_kind */
    int path;          /* enum tr_attn_path */
    int elem;          /* bytes of a staged element: 2 (bf16/f16) or 4 (f32 as tf32) */
    int warps, br, bc; /* warps per block, rows per block (16 per warp), tile width */
    /* leading dimensions in elements, each row padded by 16 bytes against bank conflicts
     * (WMMA wants ld a multiple of 16 bytes and 32-byte aligned tile pointers) */
    int ld_d, ld_dv, ld_s, ld_p, ld_acc_d, ld_acc_dv;
    size_t off[TR_ATTN_R_COUNT];
    size_t smem;       /* dynamic shared memory, bytes */
};

/* Keys [*kbeg, *kend) that some query of q0 .. q0+bq-1 may see (all when neither causal
 * nor windowed); an empty range when none. */
static inline TR_ATTN_HD void tr_attn_plan_key_span(int64_t Tq, int64_t Tk, int causal, int window, int64_t q0,
                                               int64_t bq, int64_t *kbeg, int64_t *kend) {
    const int64_t off = Tk - Tq;
    *kbeg = 0;
    *kend = Tk;
    if (!(causal || window > 0)) return;
    int64_t last = q0 + bq - 1 < Tq - 1 ? q0 + bq - 1 : Tq - 1;
    *kend = last + off + 1 < Tk ? last + off + 1 : Tk;
    if (*kend < 0) *kend = 0;
    if (window > 0) {
        int64_t lo = q0 + off - window + 1;
        *kbeg = lo > 0 ? lo : 0;
    }
    if (*kbeg > *kend) *kbeg = *kend;
}

/* Queries [*ibeg, *iend) that may see some key of j0 .. j0+bk-1 (the DKDV kernel's span). */
static inline TR_ATTN_HD void tr_attn_plan_query_span(int64_t Tq, int64_t Tk, int causal, int window, int64_t j0,
                                                 int64_t bk, int64_t *ibeg, int64_t *iend) {
    const int64_t off = Tk - Tq;
    *ibeg = 0;
    *iend = Tq;
    if (!(causal || window > 0)) return;
    /* j <= i + off: i >= j0 − off for the block's first key */
    int64_t lo = j0 - off;
    *ibeg = lo < 0 ? 0 : lo > Tq ? Tq : lo;
    if (window > 0) { /* j > i + off − window: i < jl − off + window for its last key jl */
        int64_t jl = (j0 + bk < Tk ? j0 + bk : Tk) - 1;
        int64_t hi = jl - off + window;
        *iend = hi < 0 ? 0 : hi > Tq ? Tq : hi;
    }
    if (*iend < *ibeg) *iend = *ibeg;
}

/* Whether query i sees key j (visibility only: no mask). */
static inline TR_ATTN_HD int tr_attn_plan_visible(int64_t Tq, int64_t Tk, int causal, int window, int64_t i, int64_t j) {
    const int64_t pos = i + Tk - Tq;
    if ((causal || window > 0) && j > pos) return 0;
    if (window > 0 && j <= pos - window) return 0;
    return 1;
}

static inline size_t tr_attn_round128(size_t n) { return (n + 127) & ~(size_t)127; }

/* The layout of one candidate tiling (warps, bc) for D, Dv and elem; returns its bytes. */
static inline size_t tr_attn_layout(struct tr_attn_plan *pl, int kind, int elem, int64_t D, int64_t Dv, int warps,
                                    int bc) {
    const int pad = 16 / elem;
    pl->kind = kind;
    pl->elem = elem;
    pl->warps = warps;
    pl->br = 16 * warps;
    pl->bc = bc;
    pl->ld_d = (int)D + pad;
    pl->ld_dv = (int)Dv + pad;
    pl->ld_s = bc + 4;
    pl->ld_p = bc + pad;
    pl->ld_acc_d = (int)D + 4;
    pl->ld_acc_dv = (int)Dv + 4;
    size_t sz[TR_ATTN_R_COUNT] = {0};
    const size_t e = (size_t)elem, br = (size_t)pl->br, w16 = (size_t)warps * 16;
    const size_t s = w16 * (size_t)pl->ld_s * 4, p = elem == 4 ? 0 : w16 * (size_t)pl->ld_p * e;
    sz[TR_ATTN_R_ROWS_A] = br * (size_t)pl->ld_d * e;
    sz[TR_ATTN_R_TILE_A] = (size_t)bc * (size_t)pl->ld_d * e;
    sz[TR_ATTN_R_TILE_B] = (size_t)bc * (size_t)pl->ld_dv * e;
    sz[TR_ATTN_R_S] = s;
    if (kind == TR_ATTN_FWD) {
        sz[TR_ATTN_R_P] = p;
        sz[TR_ATTN_R_ACC] = w16 * (size_t)pl->ld_acc_dv * 4;
    } else {
        sz[TR_ATTN_R_ROWS_B] = br * (size_t)pl->ld_dv * e;
        sz[TR_ATTN_R_DP] = s;
        sz[TR_ATTN_R_DS] = p;
        sz[TR_ATTN_R_ACC] = w16 * (size_t)pl->ld_acc_d * 4;
        if (kind == TR_ATTN_DKDV) {
            sz[TR_ATTN_R_P] = p;
            sz[TR_ATTN_R_ACC2] = w16 * (size_t)pl->ld_acc_dv * 4;
            sz[TR_ATTN_R_STAT] = 3 * (size_t)bc * 4;
        }
    }
    size_t at = 0;
    for (int r = 0; r < TR_ATTN_R_COUNT; r++) {
        pl->off[r] = at;
        at += tr_attn_round128(sz[r]);
    }
    if (elem == 4) { /* P over S, DS over DP */
        pl->off[TR_ATTN_R_P] = pl->off[TR_ATTN_R_S];
        pl->off[TR_ATTN_R_DS] = pl->off[TR_ATTN_R_DP];
    }
    pl->smem = at;
    return at;
}

/* The plan of kernel `kind` for data of dtype under math (enum tr_math), head sizes D and
 * Dv, with or without ATTENTION_REL's bias terms, grid_y blocks along y (B·H, or B·Hk
 * for DKDV; at most 65535) and smem_max bytes of shared memory per block (the SM holds
 * smem_max + 1 KB, and each block reserves 1 KB). Tilings, largest first: 4 warps (64
 * rows) with tiles of 64 then 32, 2 warps with 64 then 32, 1 warp with 32 then 16. The
 * first 4-warp tiling of which two blocks fit an SM (8 warps resident to hide the
 * latency of the next tile's loads) is taken; else the first tiling that fits at all.
 * A rule from the arithmetic, not yet from a measurement: re-measure it on the first
 * GPU run (tests/gpu/run.sh) and change the order here. Returns pl->path. */
static inline int tr_attn_plan_make(struct tr_attn_plan *pl, int kind, int dtype, int math, int64_t D, int64_t Dv,
                                    int has_rel, int64_t grid_y, size_t smem_max) {
    static const int cand[][2] = {{4, 64}, {4, 32}, {2, 64}, {2, 32}, {1, 32}, {1, 16}};
    const size_t ncand = sizeof cand / sizeof cand[0];
    memset(pl, 0, sizeof *pl);
    pl->kind = kind;
    pl->path = TR_ATTN_PATH_SIMPLE;
    int elem = dtype == TR_DTYPE_BF16 || dtype == TR_DTYPE_F16 ? 2
               : dtype == TR_DTYPE_F32 && math == TR_MATH_TF32 ? 4 : 0;
    if (!elem || has_rel || D <= 0 || Dv <= 0 || D > 256 || Dv > 256 || D % 16 || Dv % 16 || grid_y < 1 ||
        grid_y > 65535)
        return pl->path;
    for (int pass = 0; pass < 2; pass++)
        for (size_t c = 0; c < ncand; c++) {
            if (pass == 0 && cand[c][0] != 4) break;
            const size_t need = tr_attn_layout(pl, kind, elem, D, Dv, cand[c][0], cand[c][1]);
            if (need <= smem_max && (pass == 1 || 2 * (need + 1024) <= smem_max + 1024)) {
                pl->path = TR_ATTN_PATH_TC;
                return pl->path;
            }
        }
    memset(pl, 0, sizeof *pl);
    pl->kind = kind;
    return pl->path;
}

#ifdef __cplusplus
}
#endif
#endif
