/* The attention forward's register tiles (plugins/kernels/cpu/attention_tiles.h) at every
 * vector width, against float64 on random data with the outputs poisoned: the 4x4 v16
 * tiles AVX-512 runs, the 4x2 v8 tiles of AVX2 and the 4x2 v4 tiles of the baseline, so
 * that a machine of one kind also checks the arithmetic of the other's (compiled here for
 * the default target: the same sums, at whatever width the machine has). Shapes cover
 * odd head dims, short key blocks and Dv tails that are not a multiple of a tile. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>
#include "testutil.h"
#include "trident/rng.h"
#include "../plugins/kernels/cpu/attention_tiles.h"

typedef void (*scores_fn)(const float *restrict, int64_t, const float *restrict, float *restrict);
typedef void (*pv_fn)(const float *restrict, int64_t, const float *restrict, int64_t, float *restrict);

static void fill(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)tr_rng_normal(seed, 0x711e, (uint64_t)i);
}

static double rel(const float *out, const double *ref, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) return INFINITY;
        d += (out[i] - ref[i]) * (out[i] - ref[i]);
        r += ref[i] * ref[i];
    }
    return sqrt(d / r);
}

/* rows 4 (scores4*) or 1 (scores1*) of S = Q · Kt */
static void check_scores(const char *name, scores_fn fn, int rows) {
    const int64_t Ds[] = {1, 17, 64, 96, 128};
    for (size_t t = 0; t < sizeof Ds / sizeof Ds[0]; t++) {
        const int64_t D = Ds[t];
        float *q = malloc(sizeof(float) * 4 * D), *kt = malloc(sizeof(float) * D * BK), S[4 * BK];
        fill(q, 4 * D, 1 + t);
        fill(kt, D * BK, 100 + t);
        for (int i = 0; i < 4 * BK; i++) S[i] = NAN;
        fn(q, D, kt, S);
        double ref[4 * BK];
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < BK; c++) {
                double s = 0;
                for (int64_t d = 0; d < D; d++) s += (double)q[r * D + d] * kt[d * BK + c];
                ref[r * BK + c] = s;
            }
        double e = rel(S, ref, rows * BK);
        print_message("%-11s D %3lld: rel err %.2e\n", name, (long long)D, e);
        if (!(e < 1e-5)) fail_msg("%s D %lld: rel err %.3g", name, (long long)D, e);
        free(q);
        free(kt);
    }
}

/* acc[r][:] += P[r][:nk] · V[:nk][:] for 4 rows (pv4_*) or 1 (pv1), acc starting random */
static void check_pv(const char *name, pv_fn fn, int rows) {
    const int64_t Dvs[] = {1, 7, 16, 31, 40, 64, 80, 128}, nks[] = {1, 33, 64}; /* each width's tails */
    for (size_t a = 0; a < sizeof Dvs / sizeof Dvs[0]; a++)
        for (size_t b = 0; b < sizeof nks / sizeof nks[0]; b++) {
            const int64_t Dv = Dvs[a], nk = nks[b];
            float P[4 * BK], *V = malloc(sizeof(float) * BK * Dv), *acc = malloc(sizeof(float) * 4 * Dv);
            double *ref = malloc(sizeof(double) * 4 * Dv);
            fill(P, 4 * BK, 7 + a);
            fill(V, BK * Dv, 70 + b);
            fill(acc, 4 * Dv, 700 + a + b);
            for (int r = 0; r < rows; r++)
                for (int64_t d = 0; d < Dv; d++) {
                    double s = acc[r * Dv + d];
                    for (int64_t j = 0; j < nk; j++) s += (double)P[r * BK + j] * V[j * Dv + d];
                    ref[r * Dv + d] = s;
                }
            fn(P, nk, V, Dv, acc);
            double e = rel(acc, ref, rows * Dv);
            if (!(e < 1e-5)) fail_msg("%s Dv %lld nk %lld: rel err %.3g", name, (long long)Dv, (long long)nk, e);
            free(V);
            free(acc);
            free(ref);
        }
    print_message("%-11s every Dv and nk within 1e-5\n", name);
}

/* The tile kernels: a scores or a pv kernel each, with the rows it handles. */
static const struct {
    const char *name;
    scores_fn scores;
    pv_fn pv;
    int rows;
} tiles[] = {
    {"scores4 v16", scores4, NULL, 4},    {"scores1 v16", scores1, NULL, 1}, {"scores4 v8", scores4_v8, NULL, 4},
    {"scores1 v8", scores1_v8, NULL, 1},  {"scores4 v4", scores4_v4, NULL, 4}, {"scores1 v4", scores1_v4, NULL, 1},
    {"pv4 v16", NULL, pv4_v16, 4},        {"pv4 v8", NULL, pv4_v8, 4},        {"pv4 v4", NULL, pv4_v4, 4},
    {"pv1", NULL, pv1, 1},
};
#define N_TILES (sizeof tiles / sizeof tiles[0])

static void test_scores(void **state) {
    (void)state;
    for (size_t i = 0; i < N_TILES; i++)
        if (tiles[i].scores) check_scores(tiles[i].name, tiles[i].scores, tiles[i].rows);
}

static void test_pv(void **state) {
    (void)state;
    for (size_t i = 0; i < N_TILES; i++)
        if (tiles[i].pv) check_pv(tiles[i].name, tiles[i].pv, tiles[i].rows);
}

TR_TEST_MAIN(NULL, NULL, test_scores, test_pv)
