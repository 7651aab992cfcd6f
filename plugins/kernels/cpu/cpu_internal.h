/* Private to the cpu kernels: the context, argument checks, dtype conversion of blocks,
 * and the vectorizable math the elementwise, softmax and attention loops share.
 *
 * The library is built for baseline x86-64 (SSE2), so hot leaf loops are compiled three
 * times with TR_CPU_CLONES (AVX-512, AVX2+FMA, baseline) and picked at load time; the
 * static inline helpers below are inlined into each clone and vectorized at its width.
 * OpenMP regions stay in plain functions and call the cloned leaves per block. */
#ifndef TRIDENT_CPU_INTERNAL_H
#define TRIDENT_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "trident/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TR_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TR_CPU_CLONES
#endif

/* Elements per block of the chunked loops (converted bf16/f16 data lives on the stack). */
#define TR_CPU_CHUNK 1024
/* Below this many elements an elementwise op runs on one thread (fork/join costs more). */
#define TR_CPU_PAR_MIN 32768

struct tr_mm_entry; /* a cached oneDNN matmul primitive (matmul.c) */

struct tr_kernels {
    int device_type;
    int device_index;
    void *engine;   /* dnnl_engine_t, made once per context */
    void *stream;   /* dnnl_stream_t */
    struct tr_mm_entry *mm;   /* matmul primitive cache (least recently used evicted) */
    int n_mm, cap_mm;
    uint64_t mm_tick;
    struct tr_kernels_stats stats;
};

/* ---- matmul cache (matmul.c), released by tr_kernels_free ---- */
void tr_cpu_matmul_cache_free(struct tr_kernels *k);

/* ---- one op resolved (dispatch.c): the single validation path of tr_kernels_run and
 * tr_kernels_bind ----
 * tr_cpu_resolve checks everything tr_kernels_run checks before a kernel is entered
 * (context, op, arity, attributes, the op-specific rules of dispatch), fills the
 * defaults ops.h gives (matmul alpha 1, attention scale 1/sqrt(D), slice bounds made
 * python-style absolute: ints[0] axis, ints[1] start, ints[3] step) into `attrs`, and
 * names the kernel: `invoke` runs it on argument arrays (tr_kernels_run), `bound` on a
 * bound call (NULL for MATMUL and RESHAPE, which bind prepares itself). `fn` names the
 * public function in messages about the call itself ("tr_kernels_run: unknown op 99").
 * The kernel's own checks (shapes that must agree) run when it is entered. */
typedef int (*tr_cpu_invoke_fn)(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                                const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
struct tr_cpu_op {
    tr_cpu_invoke_fn invoke;
    tr_kernel_fn bound;
    struct tr_attrs attrs;
};
int tr_cpu_resolve(struct tr_kernels *k, const char *fn, int op, const struct tr_attrs *attrs, int n_in,
                   const struct tr_tensor *in, const struct tr_tensor *out, struct tr_cpu_op *r,
                   struct tr_error *err);
/* RESHAPE's checks (dtype and element count), and its bound form: a copy, or nothing
 * when in and out alias. Counts a call as tr_kernels_run does. */
int tr_cpu_reshape_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);

/* ---- matmul bound (matmul.c) ----
 * Every check tr_k_matmul makes, then a oneDNN primitive created for the call (owned by
 * it, outside the LRU cache) with its memory objects pointed at the call's tensors once,
 * and the f16 conversion / scaled-bias scratch taken now, so the call allocates nothing.
 * Sets c->fn and c->prepared; tr_cpu_matmul_unbind releases them. The call counts calls
 * and gemm_calls; it does not touch the primitive cache's hit/miss counters. */
int tr_cpu_matmul_bind(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                       struct tr_error *err);
void tr_cpu_matmul_unbind(struct tr_kernel_call *c);

/* ---- argument checks: each fills err as "<kernel>: <what>" and returns a status ---- */
int tr_cpu_check_ctx(struct tr_kernels *k, const char *kname, struct tr_error *err);
/* t non-NULL with data (numel > 0), contiguous, on the cpu. */
int tr_cpu_check_tensor(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err);
/* f32, bf16 or f16 (the dtypes the compute kernels take). */
int tr_cpu_check_float(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err);
int tr_cpu_same_shape(const struct tr_tensor *a, const struct tr_tensor *b);
/* "[2,3] bf16" into buf. */
const char *tr_cpu_desc(const struct tr_tensor *t, char *buf, size_t n);
/* Normalise a possibly negative axis against ndim; -1 when out of range. */
int tr_cpu_axis(int64_t axis, int ndim);

/* ---- block conversion between storage dtypes and f32 ---- */
static inline void tr_cpu_load_f32(float *restrict dst, const void *restrict src, int dtype, int64_t n) {
    if (dtype == TR_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == TR_DTYPE_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = tr_bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = tr_f16_to_f32(s[i]);
    }
}

static inline void tr_cpu_store_f32(void *restrict dst, int dtype, const float *restrict src, int64_t n) {
    if (dtype == TR_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == TR_DTYPE_BF16) {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = tr_f32_to_bf16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = tr_f32_to_f16(src[i]);
    }
}

static inline float tr_cpu_get_f32(const void *p, int dtype, int64_t i) {
    if (dtype == TR_DTYPE_F32) return ((const float *)p)[i];
    if (dtype == TR_DTYPE_BF16) return tr_bf16_to_f32(((const uint16_t *)p)[i]);
    return tr_f16_to_f32(((const uint16_t *)p)[i]);
}

/* ---- branch-free f32 math that GCC vectorizes (libm calls block vectorization) ---- */

/* exp: Cody-Waite reduction and the Cephes polynomial, ~1 ulp. Exactly 0 below
 * ln(FLT_MIN) so that masked scores vanish; inputs in (88, 88.72] saturate to e^88. */
static inline float tr_fexp(float x) {
    const float hi = 88.0f, lo = -87.33654f;
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5·2^23: rounds to an integer */
    uint32_t ti;
    memcpy(&ti, &t, 4);
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t e = (ti - 0x4B400000u + 127u) << 23; /* 2^n */
    float s;
    memcpy(&s, &e, 4);
    float res = p * s;
    res = x < lo ? 0.0f : res;
    return x > 88.72283f ? INFINITY : res;
}

static inline float tr_fsigmoid(float x) { return 1.0f / (1.0f + tr_fexp(-x)); }

static inline float tr_ftanh(float x) {
    float ax = fabsf(x);
    float e = tr_fexp(-2.0f * ax);
    float t = copysignf((1.0f - e) / (1.0f + e), x);
    /* Near 0 the quotient cancels; the odd series is exact to 2e-9 there. */
    float x2 = x * x;
    float s = x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315 + x2 * (62.0f / 2835)))));
    return ax < 0.25f ? s : t;
}

/* x/2·(1+erf(x/√2)) through erfc, so the negative tail is not 1 − (1 − tiny). erfc is
 * the Chebyshev fit of Numerical Recipes (erfcc), relative error < 1.2e-7 for all z >= 0. */
static inline float tr_fgelu_erf(float x) {
    float z = fabsf(x) * 0.70710678118654752f;
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float q = t * tr_fexp(p - z * z); /* erfc(z) */
    return 0.5f * x * (x >= 0.0f ? 2.0f - q : q);
}

/* x/2·(1+tanh(u)) = x·sigmoid(2u), u = √(2/π)(x + 0.044715x³). */
static inline float tr_fgelu_tanh(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x * tr_fsigmoid(2.0f * u);
}

static inline float tr_fact(float x, enum tr_act act) {
    switch (act) {
    case TR_ACT_GELU: return tr_fgelu_erf(x);
    case TR_ACT_GELU_TANH: return tr_fgelu_tanh(x);
    case TR_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case TR_ACT_TANH: return tr_ftanh(x);
    case TR_ACT_SILU: return x * tr_fsigmoid(x);
    default: return x;
    }
}

#endif
