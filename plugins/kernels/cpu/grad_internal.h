/* Private to the training kernels (grad.c, loss.c): f64 blocks of any float storage
 * dtype, the f32/bf16/f16/f64 argument check, and a vectorizable f64 exp. These kernels
 * compute in f64 whatever the storage dtype (see grad.c). */
#ifndef TRIDENT_GRAD_INTERNAL_H
#define TRIDENT_GRAD_INTERNAL_H

#include "cpu_internal.h"

/* f64 to f32 rounded to odd, so that the second rounding (to bf16/f16) is correct. */
static inline float tr_grad_f64_to_f32_odd(double d) {
    float f = (float)d;
    if (!isfinite(f) || (double)f == d) return f;
    uint32_t u;
    memcpy(&u, &f, 4);
    if (fabs((double)f) > fabs(d)) u -= 1;
    u |= 1;
    memcpy(&f, &u, 4);
    return f;
}

static inline void tr_grad_load(double *restrict dst, const void *restrict src, int dt, int64_t n) {
    switch (dt) {
    case TR_DTYPE_F64: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    case TR_DTYPE_F32: for (int64_t i = 0; i < n; i++) dst[i] = ((const float *)src)[i]; break;
    case TR_DTYPE_BF16: for (int64_t i = 0; i < n; i++) dst[i] = tr_bf16_to_f32(((const uint16_t *)src)[i]); break;
    default: for (int64_t i = 0; i < n; i++) dst[i] = tr_f16_to_f32(((const uint16_t *)src)[i]); break;
    }
}

/* Rounded to nearest even once (f32 directly; bf16/f16 through a round-to-odd f32). */
static inline void tr_grad_store(void *restrict dst, int dt, const double *restrict src, int64_t n) {
    switch (dt) {
    case TR_DTYPE_F64: memcpy(dst, src, (size_t)n * sizeof(double)); break;
    case TR_DTYPE_F32: for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)src[i]; break;
    case TR_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tr_f32_to_bf16(tr_grad_f64_to_f32_odd(src[i]));
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = tr_f32_to_f16(tr_grad_f64_to_f32_odd(src[i]));
        break;
    }
}

static inline double tr_grad_get(const void *p, int dt, int64_t i) {
    if (dt == TR_DTYPE_F64) return ((const double *)p)[i];
    return tr_cpu_get_f32(p, dt, i);
}

/* f32, bf16, f16 or f64. */
static inline int tr_grad_check_real(const struct tr_tensor *t, const char *kname, const char *what,
                                     struct tr_error *err) {
    int st = tr_cpu_check_tensor(t, kname, what, err);
    if (st) return st;
    if (!tr_dtype_is_float((enum tr_dtype)t->dtype)) {
        char d[200];
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %s %s: expected f32, bf16, f16 or f64", kname, what,
                            tr_cpu_desc(t, d, sizeof d));
    }
    return TR_OK;
}


/* out[c] = Σ over rows r of dy[r,c]·(x[r,c] − mu[r·step])·rs[r·step] (mu NULL: 0), the
 * weight gradients of the norms (grad.c). Parallel over blocks of columns when par, so
 * each column is one thread's sum in row order: no atomics, and the result does not
 * depend on the thread count. */
void tr_grad_col_sums(const char *x, const char *dy, int dt, int64_t rows, int64_t D, const double *mu,
                      const double *rs, int64_t step, char *out, int odt, int par);

/* exp in f64, branch free so that loops of it vectorize (libm's exp is a call per
 * element, and was most of the attention and cross entropy backward): Cody-Waite
 * reduction by ln 2, then the Taylor polynomial of degree 12 on |r| <= ln2/2; relative
 * error < 5e-16 against glibc over [-708, 709]. Below -708.39 it gives 0 (the true
 * value is subnormal), above 709.78 +inf; -inf gives 0 and NaN stays NaN. */
static inline double tr_grad_exp(double x) {
    const double hi = 709.78, lo = -708.39, shift = 6755399441055744.0; /* 1.5·2^52 */
    double xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    double t = xc * 1.4426950408889634074 + shift; /* rounds x/ln2 to an integer n */
    int64_t ti;
    memcpy(&ti, &t, 8);
    double n = t - shift;
    double r = xc - n * 6.93147180369123816490e-01;
    r = r - n * 1.90821492927058770002e-10;
    double p = 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t e = (uint64_t)(ti - 0x4338000000000000LL + 1023) << 52; /* 2^n */
    double s;
    memcpy(&s, &e, 8);
    double res = p * s;
    res = x < lo ? 0.0 : res;
    return x > 709.782712893384 ? INFINITY : res;
}

#endif
