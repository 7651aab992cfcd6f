/* The register tiles of the cpu attention forward (attention.c), one set per vector width.
 * Header-only and free of the kernels' context, so that tests/test_attention_tiles.c
 * checks every width's arithmetic against float64 on any machine (GCC lowers a v16 to
 * four xmm where there is no AVX-512: slow, but the same sums), including the copies a
 * machine of the other kind would run. BK is the key block (columns of Kt and S). */
#ifndef TRIDENT_ATTENTION_TILES_H
#define TRIDENT_ATTENTION_TILES_H

#include <stdint.h>
#include <string.h>

#ifndef BK
#define BK 64
#endif

/* The two products run on vectors held in named locals (GNU C vector extension, also in
 * Clang): a tile keeps its accumulators in registers, which plain loops over arrays did
 * not get from GCC (it kept them in memory, a load and a store per FMA). Each ISA level
 * gets tiles that fit its register file (attn_task picks them by `isa`):
 *   AVX-512 (32 zmm): 4 rows x 4 v16 = 16 accumulators + 4 key vectors;
 *   AVX2 (16 ymm) and baseline (16 xmm): 4 rows x 2 vectors of the native width = 8
 *   accumulators + 2 key vectors + 1 broadcast, 8 FMAs per 2 loads and 4 broadcasts, 8
 *   independent chains to cover the FMA latency. A v16 tile there is 32 ymm registers:
 *   it spilled every accumulator to the stack (5 GFLOP/s at seq 512 against 133).
 * Loads and stores go through memcpy: rows of v and acc need not be aligned. The
 * disassembly check is scripts/check_spills.py.
 * Every tile is always inlined: one left out of line (GCC's choice where a tile has
 * several callers, as in the backward, attention_grad.c) is compiled once for the file's
 * baseline target, its v16 as four xmm, 6x slower than inlined into the AVX-512 copy. */
/* (unused: a file may expand a tile macro whose every width it does not call; clang warns
 * of an unused static function defined in the file itself) */
#define TILE_INLINE static inline __attribute__((always_inline, unused))
typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi" /* the vectors cross no ABI: every user is static inline */
#endif

#define DEF_LDST(VT)                                                                                   \
    TILE_INLINE VT ld_##VT(const float *p) {                                                           \
        VT v;                                                                                          \
        memcpy(&v, p, sizeof v);                                                                       \
        return v;                                                                                      \
    }                                                                                                  \
    TILE_INLINE void st_##VT(float *p, VT v) { memcpy(p, &v, sizeof v); }
DEF_LDST(v16)
DEF_LDST(v8)
DEF_LDST(v4)
#define ld16 ld_v16
#define st16 st_v16

/* S[r][0..BK) = q_r · Kt for 4 rows (q rows D apart, S rows BK apart). */
TILE_INLINE void scores4(const float *restrict q, int64_t D, const float *restrict Kt, float *restrict S) {
    v16 c00 = {0}, c01 = {0}, c02 = {0}, c03 = {0}, c10 = {0}, c11 = {0}, c12 = {0}, c13 = {0};
    v16 c20 = {0}, c21 = {0}, c22 = {0}, c23 = {0}, c30 = {0}, c31 = {0}, c32 = {0}, c33 = {0};
    for (int64_t d = 0; d < D; d++) {
        const float *kt = Kt + d * BK;
        const v16 k0 = ld16(kt), k1 = ld16(kt + 16), k2 = ld16(kt + 32), k3 = ld16(kt + 48);
        const float q0 = q[d], q1 = q[D + d], q2 = q[2 * D + d], q3 = q[3 * D + d];
        c00 += q0 * k0, c01 += q0 * k1, c02 += q0 * k2, c03 += q0 * k3;
        c10 += q1 * k0, c11 += q1 * k1, c12 += q1 * k2, c13 += q1 * k3;
        c20 += q2 * k0, c21 += q2 * k1, c22 += q2 * k2, c23 += q2 * k3;
        c30 += q3 * k0, c31 += q3 * k1, c32 += q3 * k2, c33 += q3 * k3;
    }
    st16(S, c00), st16(S + 16, c01), st16(S + 32, c02), st16(S + 48, c03);
    S += BK;
    st16(S, c10), st16(S + 16, c11), st16(S + 32, c12), st16(S + 48, c13);
    S += BK;
    st16(S, c20), st16(S + 16, c21), st16(S + 32, c22), st16(S + 48, c23);
    S += BK;
    st16(S, c30), st16(S + 16, c31), st16(S + 32, c32), st16(S + 48, c33);
}

TILE_INLINE void scores1(const float *restrict q, int64_t D, const float *restrict Kt, float *restrict S) {
    v16 c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};
    for (int64_t d = 0; d < D; d++) {
        const float *kt = Kt + d * BK;
        const float q0 = q[d];
        c0 += q0 * ld16(kt), c1 += q0 * ld16(kt + 16), c2 += q0 * ld16(kt + 32), c3 += q0 * ld16(kt + 48);
    }
    st16(S, c0), st16(S + 16, c1), st16(S + 32, c2), st16(S + 48, c3);
}

/* The narrow tiles: 4 rows (or 1) x 2 vectors of VT, the keys in BK/(2W) column chunks. */
#define DEF_SCORES_NARROW(VT)                                                                          \
    TILE_INLINE void scores4_##VT(const float *restrict q, int64_t D, const float *restrict Kt,       \
                                    float *restrict S) {                                               \
        enum { W = sizeof(VT) / sizeof(float) };                                                       \
        for (int c = 0; c < BK; c += 2 * W) {                                                          \
            VT c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0}; \
            for (int64_t d = 0; d < D; d++) {                                                          \
                const float *kt = Kt + d * BK + c;                                                     \
                const VT k0 = ld_##VT(kt), k1 = ld_##VT(kt + W);                                       \
                const float q0 = q[d], q1 = q[D + d], q2 = q[2 * D + d], q3 = q[3 * D + d];            \
                c00 += q0 * k0, c01 += q0 * k1, c10 += q1 * k0, c11 += q1 * k1;                        \
                c20 += q2 * k0, c21 += q2 * k1, c30 += q3 * k0, c31 += q3 * k1;                        \
            }                                                                                          \
            float *s = S + c;                                                                          \
            st_##VT(s, c00), st_##VT(s + W, c01), st_##VT(s + BK, c10), st_##VT(s + BK + W, c11);      \
            st_##VT(s + 2 * BK, c20), st_##VT(s + 2 * BK + W, c21);                                    \
            st_##VT(s + 3 * BK, c30), st_##VT(s + 3 * BK + W, c31);                                    \
        }                                                                                              \
    }                                                                                                  \
    TILE_INLINE void scores1_##VT(const float *restrict q, int64_t D, const float *restrict Kt,       \
                                    float *restrict S) {                                               \
        enum { W = sizeof(VT) / sizeof(float) };                                                       \
        for (int c = 0; c < BK; c += 4 * W) {                                                          \
            VT c0 = {0}, c1 = {0}, c2 = {0}, c3 = {0};                                                 \
            for (int64_t d = 0; d < D; d++) {                                                          \
                const float *kt = Kt + d * BK + c;                                                     \
                const float q0 = q[d];                                                                 \
                c0 += q0 * ld_##VT(kt), c1 += q0 * ld_##VT(kt + W);                                    \
                c2 += q0 * ld_##VT(kt + 2 * W), c3 += q0 * ld_##VT(kt + 3 * W);                        \
            }                                                                                          \
            st_##VT(S + c, c0), st_##VT(S + c + W, c1), st_##VT(S + c + 2 * W, c2);                    \
            st_##VT(S + c + 3 * W, c3);                                                                \
        }                                                                                              \
    }
DEF_SCORES_NARROW(v8)
DEF_SCORES_NARROW(v4)

/* name(isa, A, nq, W, Bt, out): out[r][0..BK) = A_r · Bt for nq rows of A [nq][W] (Bt
 * [W][BK]), four rows at a time on the widest tiles the isa runs, then one: s4 and s1 at
 * AVX-512 (the user's: scores4/scores1 at BK 64, the v16 narrow tiles at a narrower key
 * block), the v8 tiles at AVX2, the v4 at the baseline. Expanded where TR_CPU_ISA_* are. */
#define DEF_SCORES_ROWS(name, s4, s1)                                                                  \
    TILE_INLINE void name(int isa, const float *restrict A, int64_t nq, int64_t W,                     \
                          const float *restrict Bt, float *restrict out) {                             \
        int64_t r = 0;                                                                                 \
        if (isa == TR_CPU_ISA_AVX512) {                                                                \
            for (; r + 4 <= nq; r += 4) s4(A + r * W, W, Bt, out + r * BK);                            \
            for (; r < nq; r++) s1(A + r * W, W, Bt, out + r * BK);                                    \
        } else if (isa == TR_CPU_ISA_AVX2) {                                                           \
            for (; r + 4 <= nq; r += 4) scores4_v8(A + r * W, W, Bt, out + r * BK);                    \
            for (; r < nq; r++) scores1_v8(A + r * W, W, Bt, out + r * BK);                            \
        } else {                                                                                       \
            for (; r + 4 <= nq; r += 4) scores4_v4(A + r * W, W, Bt, out + r * BK);                    \
            for (; r < nq; r++) scores1_v4(A + r * W, W, Bt, out + r * BK);                            \
        }                                                                                              \
    }

/* acc[r][0..n) += Σ_j P[r][j] · V[j][0..n) for 4 rows (P rows BK apart; V and acc rows Dv
 * apart), in column chunks of 2 vectors of VT, then one, then what is left to the next
 * narrower width (v16 -> v8 -> v4 -> scalar): a head of 16 or 40 columns (Stable
 * Diffusion's UNet) ran scalar under 2-vector chunks alone, 10x slower than one of 64. */
TILE_INLINE void pv4_cols_scalar(const float *restrict P, int64_t nk, const float *restrict V, int64_t Dv,
                                   float *restrict acc, int64_t n) {
    for (int64_t d0 = 0; d0 < n; d0++)
        for (int64_t r = 0; r < 4; r++) {
            float s = acc[r * Dv + d0];
            for (int64_t j = 0; j < nk; j++) s += P[r * BK + j] * V[j * Dv + d0];
            acc[r * Dv + d0] = s;
        }
}

#define DEF_PV4(VT, NEXT)                                                                              \
    TILE_INLINE void pv4_cols_##VT(const float *restrict P, int64_t nk, const float *restrict V, int64_t Dv,   \
                                     float *restrict acc, int64_t n) {                                 \
        enum { W = sizeof(VT) / sizeof(float) };                                                       \
        int64_t d0 = 0;                                                                                \
        for (; d0 + 2 * W <= n; d0 += 2 * W) {                                                         \
            float *a = acc + d0;                                                                       \
            VT c00 = ld_##VT(a), c01 = ld_##VT(a + W), c10 = ld_##VT(a + Dv), c11 = ld_##VT(a + Dv + W); \
            VT c20 = ld_##VT(a + 2 * Dv), c21 = ld_##VT(a + 2 * Dv + W);                               \
            VT c30 = ld_##VT(a + 3 * Dv), c31 = ld_##VT(a + 3 * Dv + W);                               \
            for (int64_t j = 0; j < nk; j++) {                                                         \
                const VT v0 = ld_##VT(V + j * Dv + d0), v1 = ld_##VT(V + j * Dv + d0 + W);             \
                const float p0 = P[j], p1 = P[BK + j], p2 = P[2 * BK + j], p3 = P[3 * BK + j];         \
                c00 += p0 * v0, c01 += p0 * v1, c10 += p1 * v0, c11 += p1 * v1;                        \
                c20 += p2 * v0, c21 += p2 * v1, c30 += p3 * v0, c31 += p3 * v1;                        \
            }                                                                                          \
            st_##VT(a, c00), st_##VT(a + W, c01), st_##VT(a + Dv, c10), st_##VT(a + Dv + W, c11);      \
            st_##VT(a + 2 * Dv, c20), st_##VT(a + 2 * Dv + W, c21);                                    \
            st_##VT(a + 3 * Dv, c30), st_##VT(a + 3 * Dv + W, c31);                                    \
        }                                                                                              \
        if (d0 + W <= n) {                                                                             \
            float *a = acc + d0;                                                                       \
            VT c0 = ld_##VT(a), c1 = ld_##VT(a + Dv), c2 = ld_##VT(a + 2 * Dv), c3 = ld_##VT(a + 3 * Dv); \
            for (int64_t j = 0; j < nk; j++) {                                                         \
                const VT v0 = ld_##VT(V + j * Dv + d0);                                                \
                c0 += P[j] * v0, c1 += P[BK + j] * v0, c2 += P[2 * BK + j] * v0, c3 += P[3 * BK + j] * v0; \
            }                                                                                          \
            st_##VT(a, c0), st_##VT(a + Dv, c1), st_##VT(a + 2 * Dv, c2), st_##VT(a + 3 * Dv, c3);     \
            d0 += W;                                                                                   \
        }                                                                                              \
        if (d0 < n) NEXT(P, nk, V + d0, Dv, acc + d0, n - d0);                                         \
    }                                                                                                  \
    TILE_INLINE void pv4_##VT(const float *restrict P, int64_t nk, const float *restrict V, int64_t Dv,   \
                                float *restrict acc) {                                                 \
        pv4_cols_##VT(P, nk, V, Dv, acc, Dv);                                                          \
    }
DEF_PV4(v4, pv4_cols_scalar)
DEF_PV4(v8, pv4_cols_v4)
DEF_PV4(v16, pv4_cols_v8)

TILE_INLINE void pv1(const float *restrict P, int64_t nk, const float *restrict V, int64_t Dv, float *restrict acc) {
    for (int64_t j = 0; j < nk; j++) {
        const float p = P[j];
        const float *restrict vr = V + j * Dv;
        for (int64_t d = 0; d < Dv; d++) acc[d] += p * vr[d];
    }
}

#endif
