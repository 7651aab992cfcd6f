/* Private to the cpu kernels: the context, argument checks, dtype conversion of blocks,
 * and the vectorizable math the elementwise, softmax and attention loops share.
 *
 * The library is built for baseline x86-64 (SSE2), so hot leaf loops are compiled three
 * times with TR_CPU_MULTI (AVX-512, AVX2+FMA, baseline) and called through the level
 * isa.c fixed (the cpu's own, or TRIDENT_CPU_ISA's); the static inline helpers below
 * are inlined into each copy and vectorized at its width. OpenMP regions stay in plain
 * functions and call the leaves per block. */
#ifndef TRIDENT_CPU_INTERNAL_H
#define TRIDENT_CPU_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "trident/kernels.h"
#include "../cuda/host/cuda_entry.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- the ISA level (isa.c) ---- */
extern int tr_cpu_isa_level;        /* enum tr_cpu_isa in use; baseline until fixed */
extern int tr_cpu_bf16_gemm_native;   /* oneDNN has a bf16 GEMM at that level, on the cpu's bf16 units */
extern int tr_cpu_bf16_gemm_emulated; /* oneDNN has one, emulated (AVX-512 without AVX512_BF16) */
/* TRIDENT_F32_GEMM: how an f32 GEMM picks oneDNN's kernel (matmul.c) */
enum tr_cpu_f32_gemm { TR_CPU_F32_GEMM_AUTO, TR_CPU_F32_GEMM_JIT, TR_CPU_F32_GEMM_FIRST };
extern int tr_cpu_f32_gemm;
/* Fixes the level and the f32 GEMM choice once per process (tr_kernels_init calls it);
 * the error of a bad TRIDENT_CPU_ISA or TRIDENT_F32_GEMM every time. */
int tr_cpu_isa_fix(struct tr_error *err);

#define TR_CPU_UNPAREN(...) __VA_ARGS__
/* A hot leaf, one copy per level. Written as
 *     TR_CPU_MULTI(void, name, (int a, float *b), (a, b)) { ...body... }
 * the body sees `isa` (enum tr_cpu_isa), a constant in each copy, so a body may pick
 * register tiles per level with a plain `if (isa == TR_CPU_ISA_AVX512)` that the
 * compiler folds. `name` is a static function that calls the copy of the level in use;
 * the copies are name_avx512, name_avx2 and name_base (the tests call them directly). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TR_CPU_MULTI(ret, name, params, args)                                                                 \
    static inline __attribute__((always_inline)) ret name##_body(const int isa, TR_CPU_UNPAREN params);      \
    __attribute__((target("arch=x86-64-v4"))) __attribute__((unused)) static ret name##_avx512 params {       \
        return name##_body(TR_CPU_ISA_AVX512, TR_CPU_UNPAREN args);                                          \
    }                                                                                                          \
    __attribute__((target("arch=x86-64-v3"))) __attribute__((unused)) static ret name##_avx2 params {         \
        return name##_body(TR_CPU_ISA_AVX2, TR_CPU_UNPAREN args);                                            \
    }                                                                                                          \
    __attribute__((unused)) static ret name##_base params { return name##_body(TR_CPU_ISA_BASELINE, TR_CPU_UNPAREN args); } \
    static ret name params {                                                                                   \
        return tr_cpu_isa_level == TR_CPU_ISA_AVX512 ? name##_avx512 args                                     \
               : tr_cpu_isa_level == TR_CPU_ISA_AVX2 ? name##_avx2 args                                       \
                                                     : name##_base args;                                      \
    }                                                                                                          \
    static inline __attribute__((always_inline)) ret name##_body(const int isa, TR_CPU_UNPAREN params)
#else
#define TR_CPU_MULTI(ret, name, params, args)                                                                 \
    static inline ret name##_body(const int isa, TR_CPU_UNPAREN params);                                     \
    static ret name params { return name##_body(TR_CPU_ISA_BASELINE, TR_CPU_UNPAREN args); }                 \
    static inline ret name##_body(const int isa, TR_CPU_UNPAREN params)
#endif

/* Elements per block of the chunked loops (converted bf16/f16 data lives on the stack). */
#define TR_CPU_CHUNK 1024
/* Below this many elements an elementwise op runs on one thread (fork/join costs more). */
#define TR_CPU_PAR_MIN 32768

struct tr_mm_entry; /* a cached oneDNN matmul primitive (matmul.c) */
struct tr_conv_entry; /* a cached oneDNN convolution primitive (conv.c) */

struct tr_kernels {
    int device_type;
    int device_index;
    void *engine;   /* dnnl_engine_t, made once per context */
    void *stream;   /* dnnl_stream_t */
    struct tr_mm_entry *mm;   /* matmul primitive cache (least recently used evicted) */
    int n_mm, cap_mm;
    uint64_t mm_tick;
    struct tr_conv_entry *conv; /* convolution primitive cache, as mm */
    int n_conv;
    uint64_t conv_tick;
    struct tr_kernels_stats stats;
    /* Scratch kept for the context's life: one shared part, then one slice per thread.
     * It only grows (tr_cpu_scratch_reserve), so a reservation made once (at bind, or
     * by a kernel's first call with its shapes) holds for every later call: steady-state
     * calls allocate nothing. Kernels never keep pointers into it across calls. */
    char *scr;
    size_t scr_shared, scr_thread;  /* bytes, multiples of 64 */
    int scr_threads;                /* slices */
    struct tr_cuda_ctx *cuda;       /* device_type cuda: the CUDA side's state (cuda/) */
    enum tr_math math;              /* tr_kernels_set_math; the cuda GEMMs read it */
};

/* The primitive caches' (matmul.c, conv.c) bookkeeping, one way for both: entries are
 * `stride` bytes apart, each starting with its key and holding its last use at `used_at`.
 * tr_cpu_cache_find stamps a hit with tick and counts hits and misses (the stats report
 * both); it returns the hit's index, else -1. tr_cpu_cache_lru is the eviction victim. */
static inline int tr_cpu_cache_find(struct tr_kernels *k, void *entries, int n, size_t stride, size_t used_at,
                                    const void *key, size_t key_size, uint64_t tick) {
    for (int i = 0; i < n; i++) {
        char *e = (char *)entries + (size_t)i * stride;
        if (memcmp(e, key, key_size) == 0) {
            k->stats.primitive_hits++;
            *(uint64_t *)(e + used_at) = tick;
            return i;
        }
    }
    k->stats.primitive_misses++;
    return -1;
}

static inline int tr_cpu_cache_lru(const void *entries, int n, size_t stride, size_t used_at) {
    const char *base = (const char *)entries + used_at;
    int slot = 0;
    for (int i = 1; i < n; i++)
        if (*(const uint64_t *)(base + (size_t)i * stride) < *(const uint64_t *)(base + (size_t)slot * stride))
            slot = i;
    return slot;
}

/* ---- the cuda side (plugins/kernels/cuda; where nvcc was not found, the stand-ins of
 * cuda/host/nocuda.c answer "no CUDA device found (built without CUDA)") ----
 * A cuda context is a struct tr_kernels with device_type cuda and k->cuda set; the entry
 * points of context.c and tr_kernels_run route to these on the context's device. */
struct tr_cuda_ctx;
int tr_cuda_available(int device_index, struct tr_error *err);
int tr_cuda_describe(int device_index, char *buf, size_t n, struct tr_error *err);
int tr_cuda_ctx_init(struct tr_kernels *k, int device_index, struct tr_error *err);
void tr_cuda_ctx_free(struct tr_kernels *k);
int tr_cuda_alloc(struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err);
void tr_cuda_dealloc(struct tr_kernels *k, void *p);
/* kind: 0 host to device, 1 device to host, 2 device to device */
int tr_cuda_copy(struct tr_kernels *k, void *dst, const void *src, size_t n, int kind, struct tr_error *err);
int tr_cuda_sync(struct tr_kernels *k, struct tr_error *err);
/* One op with the attributes tr_cpu_resolve resolved. */
int tr_cuda_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in, const struct tr_tensor *in,
                struct tr_tensor *out, struct tr_error *err);

/* Every public kernel and binder starts with this: on a cuda context the call is the
 * CUDA path's (cuda/host/route.c, gemm.c, fused.c), with the same arguments. */
#define TR_CUDA_ROUTE(k, call)                                           \
    do {                                                                 \
        if ((k) && (k)->device_type == TR_DEVICE_CUDA) return (call);    \
    } while (0)

/* ---- scratch (context.c) ----
 * Makes room for `shared` bytes plus `per_thread` bytes for each of omp_get_max_threads()
 * threads, growing the context's scratch if needed (its contents are then lost). */
int tr_cpu_scratch_reserve(struct tr_kernels *k, size_t shared, size_t per_thread, const char *kname,
                           struct tr_error *err);
void tr_cpu_scratch_free(struct tr_kernels *k);
static inline void *tr_cpu_scratch_shared(const struct tr_kernels *k) { return k->scr; }
/* Thread t's slice (t < tr_cpu_threads(k)). */
static inline float *tr_cpu_scratch_thread(const struct tr_kernels *k, int t) {
    return (float *)(void *)(k->scr + k->scr_shared + (size_t)t * k->scr_thread);
}
/* Threads a parallel region that uses per-thread scratch may have: no more than there
 * are slices, whatever omp_set_num_threads did since the reservation. */
static inline int tr_cpu_threads(const struct tr_kernels *k) {
#ifdef _OPENMP
    int n = omp_get_max_threads();
    return n < k->scr_threads ? n : (k->scr_threads > 0 ? k->scr_threads : 1);
#else
    (void)k;
    return 1;
#endif
}
static inline int tr_cpu_thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* ---- the row loop (context.c) ----
 * Every per-row kernel (softmax, the norms, their gradients, the losses, the fused rows)
 * runs rows [0, rows) as work items of `per` rows, split statically among
 * tr_cpu_threads(k) threads when `par` (one thread otherwise), each item as
 * fn(ctx, r0, r1, buf), buf the thread's slice of the scratch the caller reserved. fn
 * converts its rows in and out itself; one indirect call per item keeps the per-element
 * loops inside fn (a TR_CPU_MULTI leaf or plain static function) the compiler's to
 * vectorize. Static scheduling keeps row ownership, and so every result, independent of
 * timing. */
typedef void (*tr_cpu_rows_fn)(const void *ctx, int64_t r0, int64_t r1, void *buf);
void tr_cpu_rows(struct tr_kernels *k, int64_t rows, int64_t per, int par, tr_cpu_rows_fn fn, const void *ctx);

/* ---- an op's two entries (tr_cpu_op below) ----
 * invoke runs the op's kernel on argument arrays as tr_kernels_run passes them; a binder
 * prepares a bound call whose in, out and attrs are set. Function types, so that many
 * ops' entries are declared in one list. */
typedef int tr_cpu_invoker(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                           const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
typedef int tr_cpu_binder(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);

/* ---- matmul cache (matmul.c), released by tr_kernels_free ---- */
void tr_cpu_matmul_cache_free(struct tr_kernels *k);
void tr_cpu_conv_cache_free(struct tr_kernels *k);
/* CONV2D and GROUP_NORM (conv.c, group_norm.c), on attributes tr_cpu_resolve resolved;
 * no binders yet: bind checks them by one run (bind.c). */
tr_cpu_invoker tr_cpu_conv2d_invoke, tr_cpu_group_norm_invoke;
/* ATTENTION_REL and ATTENTION_REL_LSE (attention.c), ATTENTION_REL_GRAD (attention_grad.c). */
tr_cpu_invoker tr_cpu_attention_rel_invoke, tr_cpu_attention_rel_grad_invoke;
tr_cpu_binder tr_cpu_attention_rel_bind;
/* ATTENTION_GRAD with the forward's y and lse (in[n_in-2], in[n_in-1]; n_in 6 or 7, the
 * mask in[4] when 7), attrs resolved (attention_grad.c). */
int tr_cpu_attention_grad_saved(struct tr_kernels *k, const struct tr_tensor *in, int n_in, float scale, int causal,
                                int window, int which, struct tr_tensor *out, struct tr_error *err);
/* TIMESTEP_EMBEDDING (timestep.c). */
tr_cpu_invoker tr_cpu_timestep_embedding_invoke;

/* ---- bound calls ----
 * Every kernel is split in two: a check that validates its arguments (each message as
 * the public tr_k_* function gives it) and fills a plan (derived sizes, strides, data
 * pointers, scratch needed), and a compute part that runs a plan and checks nothing.
 * tr_k_* = context check + check + scratch reserve + compute. A binder (tr_cpu_*_bind
 * below) = the same checks with the context check not counted as a call, the scratch
 * reserved, the plan kept in c->prepared, and c->fn set to a function that counts the
 * call and runs the compute part on the kept plan.
 * c->prepared always starts with struct tr_cpu_prepared, so tr_kernels_unbind releases
 * any kernel's plan without knowing the kernel. */
struct tr_cpu_prepared {
    void (*release)(void *self);
    /* tr_cpu_keep_compute's plans: the compute part, run on the kept plan by each call */
    void (*compute)(struct tr_kernels *k, const void *plan);
};
typedef tr_cpu_binder *tr_cpu_bind_fn;

/* ---- one op resolved (dispatch.c): the single validation path of tr_kernels_run and
 * tr_kernels_bind ----
 * tr_cpu_resolve checks everything tr_kernels_run checks before a kernel is entered
 * (context, op, arity, attributes, the op-specific rules of dispatch), fills the
 * defaults ops.h gives (matmul alpha 1, attention scale 1/sqrt(D), slice bounds made
 * python-style absolute: ints[0] axis, ints[1] start, ints[3] step) into `attrs`, and
 * names the kernel: `invoke` runs it on argument arrays (tr_kernels_run), `bind` checks
 * and prepares a bound call (bind.c calls it with c->in, c->out and c->attrs filled).
 * An op whose kernel has no binder yet may set `bound` instead (a runner of the whole
 * kernel, checks included): bind then validates it by one run on zeroed stand-ins.
 * `fn` names the public function in messages about the call itself ("tr_kernels_run:
 * unknown op 99"). */
typedef tr_cpu_invoker *tr_cpu_invoke_fn;
struct tr_cpu_op {
    tr_cpu_invoke_fn invoke;
    tr_cpu_bind_fn bind;
    tr_kernel_fn bound;
    struct tr_attrs attrs;
};
int tr_cpu_resolve(struct tr_kernels *k, const char *fn, int op, const struct tr_attrs *attrs, int n_in,
                   const struct tr_tensor *in, const struct tr_tensor *out, struct tr_cpu_op *r,
                   struct tr_error *err);
/* RESHAPE's checks (dtype and element count), and its bound form: a copy, or nothing
 * when in and out alias. */
tr_cpu_binder tr_cpu_reshape_bind;

/* The binders of the graph ops' kernels, on a call whose in, out and (resolved) attrs
 * are set as tr_kernels_run would pass them. */
tr_cpu_binder tr_cpu_binary_bind, tr_cpu_unary_bind, tr_cpu_softmax_bind, tr_cpu_layer_norm_bind,
    tr_cpu_embedding_bind, tr_cpu_transpose_bind, tr_cpu_slice_bind, tr_cpu_concat_bind, tr_cpu_reduce_bind,
    tr_cpu_cast_bind, tr_cpu_attention_bind, tr_cpu_attention_lse_bind, tr_cpu_matmul_bind_op;

/* ---- decoder LLM ops (rmsnorm.c, rope.c), as ops.h defines them ----
 * Float data f32, bf16, f16 or f64 (f64 computed in f64: the finite-difference checks);
 * the forwards round as Hugging Face does (see the files). The *_invoke entries take the
 * op's inputs and attributes as tr_kernels_run does (RMS_NORM, RMS_NORM_GRAD and
 * RMS_NORM_GRAD_W share one), the binders the same from the call. */
int tr_k_rms_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w, float eps, int add_one,
                  struct tr_tensor *out, struct tr_error *err);
int tr_k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w,
                       const struct tr_tensor *dy, float eps, int add_one, struct tr_tensor *dx, struct tr_error *err);
int tr_k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                         struct tr_tensor *dw, struct tr_error *err);
/* rot_dims 0: all of D; inverse 1 rotates by −a. */
int tr_k_rope(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *pos, float base, int rot_dims,
              int inverse, struct tr_tensor *out, struct tr_error *err);
tr_cpu_invoker tr_cpu_rms_norm_invoke, tr_cpu_rope_invoke;
tr_cpu_binder tr_cpu_rms_norm_bind, tr_cpu_rope_bind;

/* An elementwise binary op's checks of its arguments on device (cpu or cuda: shared with
 * the cuda kernel): op add, sub, mul or div; a, b and out floats of one dtype. Whether a
 * and b broadcast to out is each kernel's own check. */
int tr_cpu_binary_args(int device, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                       const struct tr_tensor *out, struct tr_error *err);
/* EMBEDDING's checks of its arguments on device (cpu or cuda: shared with the cuda
 * kernel): table (V,D), of a float dtype on cuda; ids i32 or i64; out ids' shape plus D,
 * table's dtype. */
int tr_cpu_embedding_args(int device, const struct tr_tensor *table, const struct tr_tensor *ids,
                          const struct tr_tensor *out, struct tr_error *err);
/* UPDATE_SLICE's checks of its arguments on device (cpu or cuda: shared with the cuda
 * kernel): the tensors, then dtypes, shapes, axis and start's form; *axis_out gets the
 * axis made non-negative. */
int tr_cpu_update_slice_args(int device, const struct tr_tensor *x, const struct tr_tensor *u,
                             const struct tr_tensor *start, int axis, const struct tr_tensor *out, int *axis_out,
                             struct tr_error *err);
/* UPDATE_SLICE (update_slice.c): x, update, start (one i32, read at every call); writes
 * only the slice when out is x's memory. */
int tr_cpu_update_slice_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                               const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
int tr_cpu_update_slice_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);
int tr_cpu_allreduce_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                            const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
int tr_cpu_allreduce_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);

/* ---- matmul bound (matmul.c) ----
 * Every check tr_k_matmul makes, then a oneDNN primitive created for the call (owned by
 * it, outside the LRU cache) with its memory objects pointed at the call's tensors once,
 * and the f16 conversion / scaled-bias scratch taken now, so the call allocates nothing.
 * Sets c->fn and c->prepared. The call counts calls and gemm_calls; it does not touch
 * the primitive cache's hit/miss counters. */
int tr_cpu_matmul_bind(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                       struct tr_error *err);

/* ---- argument checks: each fills err as "<kernel>: <what>" and returns a status ---- */
/* The context is usable; tr_cpu_check_ctx also counts a kernel call, tr_cpu_check_ctx_bind
 * does not (binding is not a call). */
int tr_cpu_check_ctx(struct tr_kernels *k, const char *kname, struct tr_error *err);
int tr_cpu_check_ctx_bind(struct tr_kernels *k, const char *kname, struct tr_error *err);
/* t non-NULL with data (numel > 0), contiguous, on the cpu. */
int tr_cpu_check_tensor(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err);
/* The same checks for a tensor on device (TR_DEVICE_CPU or TR_DEVICE_CUDA: the cuda
 * kernels' host side checks with these too). */
int tr_cpu_check_tensor_on(const struct tr_tensor *t, int device, const char *kname, const char *what,
                           struct tr_error *err);
/* f32, bf16 or f16 (the dtypes the compute kernels take). */
int tr_cpu_check_float(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err);
int tr_cpu_check_float_on(const struct tr_tensor *t, int device, const char *kname, const char *what,
                          struct tr_error *err);
int tr_cpu_same_shape(const struct tr_tensor *a, const struct tr_tensor *b);
/* a and b (named an, bn in the message): same shape and dtype. */
int tr_cpu_check_like(const char *kname, const struct tr_tensor *a, const char *an, const struct tr_tensor *b,
                      const char *bn, struct tr_error *err);
/* r is x reduced over axis ax (0 <= ax < x->ndim): the axis dropped, or kept as 1 when keep. */
int tr_cpu_is_reduced(const struct tr_tensor *x, int ax, const struct tr_tensor *r, int keep);
/* "[2,3] bf16" into buf. */
const char *tr_cpu_desc(const struct tr_tensor *t, char *buf, size_t n);
/* An attention mask: f32 or dtype, at most 4-D, broadcasting to full (B,H,Tq,Tk); ms gets
 * its strides in elements over those (0 where it broadcasts), data and mdt its data and
 * dtype. No mask (NULL): nothing is set. */
int tr_cpu_check_mask(const char *kname, const struct tr_tensor *mask, int dtype, const int64_t full[4], int64_t ms[4],
                      const char **data, int *mdt, struct tr_error *err);
/* ATTENTION_REL's bias terms as the attention kernels read them: h (B,H,Tq,Kh) and w
 * (B,H,Tq,Kw), each f32 or q's dtype; key j sits at grid row j / Kw, column j % Kw. */
struct tr_cpu_rel_bias {
    const char *h, *w; /* NULL: no bias */
    int dt_h, dt_w;
    int64_t Kh, Kw;
};
/* rel[0], rel[1] checked against q and k (Kh·Kw = k's Tk) and, when rb is not NULL, read
 * into rb. */
int tr_cpu_check_rel_bias(const char *kname, const struct tr_tensor *q, const struct tr_tensor *kk,
                          const struct tr_tensor rel[2], struct tr_cpu_rel_bias *rb, struct tr_error *err);
/* Normalise a possibly negative axis against ndim; -1 when out of range. */
int tr_cpu_axis(int64_t axis, int ndim);
/* A plan copied to the heap for a bound call: c->prepared = a copy of the `size` bytes at
 * plan (which starts with struct tr_cpu_prepared; its release is set to free), c->fn = fn. */
int tr_cpu_keep_plan(struct tr_kernel_call *c, const void *plan, size_t size, tr_kernel_fn fn, const char *kname,
                     struct tr_error *err);
/* The same for a kernel whose compute part cannot fail: c->fn counts the call and runs
 * compute(k, kept plan). */
int tr_cpu_keep_compute(struct tr_kernel_call *c, const void *plan, size_t size,
                        void (*compute)(struct tr_kernels *k, const void *plan), const char *kname,
                        struct tr_error *err);
/* Its direct-call counterpart: rc is the plan's checks; when they passed, compute(k, plan)
 * runs now. */
static inline int tr_cpu_compute_now(struct tr_kernels *k, int rc, void (*compute)(struct tr_kernels *k, const void *plan),
                                     const void *plan) {
    if (rc) return rc;
    compute(k, plan);
    return TR_OK;
}

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

/* v rounded to dtype's precision (f32: unchanged). */
static inline float tr_cpu_round(int dtype, float v) {
    if (dtype == TR_DTYPE_BF16) return tr_bf16_to_f32(tr_f32_to_bf16(v));
    if (dtype == TR_DTYPE_F16) return tr_f16_to_f32(tr_f32_to_f16(v));
    return v;
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

/* erfc(z) for z >= 0: the Chebyshev fit of Numerical Recipes (erfcc), relative error
 * < 1.2e-7 for all z >= 0. */
static inline float tr_ferfc_pos(float z) {
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
    return t * tr_fexp(p - z * z);
}

/* x/2·(1+erf(x/√2)) through erfc, so the negative tail is not 1 − (1 − tiny). */
static inline float tr_fgelu_erf(float x) {
    float q = tr_ferfc_pos(fabsf(x) * 0.70710678118654752f);
    return 0.5f * x * (x >= 0.0f ? 2.0f - q : q);
}

/* GELU's derivatives (UNARY_GRAD in f32): Φ(x) + x·φ(x), and the tanh form's. */
static inline float tr_fdgelu_erf(float x) {
    float q = tr_ferfc_pos(fabsf(x) * 0.70710678118654752f);
    float cdf = x >= 0.0f ? 1.0f - 0.5f * q : 0.5f * q;
    return cdf + x * tr_fexp(-0.5f * x * x) * 0.39894228040143267794f;
}

static inline float tr_fdgelu_tanh(float x) {
    /* past |x| = 10 tanh is ±1 in f32 and the derivative 1 or 0; there x³ overflowing made
     * the second term 0·inf (NaN from |x| ≈ 1e13 on) */
    if (fabsf(x) > 10.0f) return x > 0.0f ? 1.0f : 0.0f;
    const float c = 0.79788456080286535588f, a = 0.044715f;
    float t = tr_ftanh(c * (x + a * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * a * x * x);
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
    case TR_ACT_RELU: return x < 0.0f ? 0.0f : x; /* NaN kept, as torch */
    case TR_ACT_TANH: return tr_ftanh(x);
    case TR_ACT_SILU: return x * tr_fsigmoid(x);
    default: return x;
    }
}

#endif
