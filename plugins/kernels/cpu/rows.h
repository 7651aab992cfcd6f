/* Rows in place that norm.c and fused.c share, inlined into each TR_CPU_MULTI copy and
 * vectorized at its width. Apart from cpu_internal.h because of the OpenMP simd
 * pragmas: tests include that header without -fopenmp. */
#ifndef TRIDENT_CPU_ROWS_H
#define TRIDENT_CPU_ROWS_H

#include "cpu_internal.h"

/* softmax of a row; one whose every entry is -inf has no mass and becomes zeros rather
 * than NaN, as a fully masked attention row does. */
static inline void tr_cpu_softmax_row(float *restrict buf, int64_t D) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < D; i++) mx = buf[i] > mx ? buf[i] : mx;
    if (mx == -INFINITY) { /* no mass: zeros; but a NaN, which the max passed over, is kept */
        int nan = 0;
        for (int64_t i = 0; i < D; i++) nan |= buf[i] != buf[i];
        for (int64_t i = 0; i < D; i++) buf[i] = nan ? NAN : 0.0f;
        return;
    }
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < D; i++) {
        buf[i] = tr_fexp(buf[i] - mx);
        s += buf[i];
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int64_t i = 0; i < D; i++) buf[i] *= inv;
}

/* (x - mean)·rstd·g + b in place, biased variance. The row is in cache here: the
 * second pass costs no memory traffic. */
static inline void tr_cpu_ln_row(float *restrict buf, int64_t D, const float *restrict g, const float *restrict b,
                                 float eps) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < D; i++) s += buf[i];
    float mean = s / (float)D, v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int64_t i = 0; i < D; i++) v += (buf[i] - mean) * (buf[i] - mean);
    float rstd = 1.0f / sqrtf(v / (float)D + eps);
#pragma omp simd
    for (int64_t i = 0; i < D; i++) buf[i] = (buf[i] - mean) * rstd * g[i] + b[i];
}

#endif
