/* The host-side logic of the CUDA GEMM, in plain C so that it is unit-tested without a
 * GPU (tests/test_cuda_gemm_plan.c):
 *
 * - tr_cuda_gemm_shape: a row-major matmul c (...,M,N) = op(a) (...,M,K) · op(b)
 *   (...,K,N), batch axes broadcast, mapped onto one strided-batched column-major GEMM
 *   as cuBLASLt takes it. Row-major X is column-major Xᵀ, so c = a·b is computed as
 *   cᵀ = op(b)ᵀ · op(a)ᵀ: cuBLASLt's first operand is b, its second a, its output cᵀ
 *   (N rows, M columns, ld N), and the bias (N) runs along cᵀ's rows, as cuBLASLt's
 *   BIAS epilogue wants. Broadcast batch axes must collapse to one batch count with one
 *   stride per operand (0 for an operand shared by every batch); other broadcasts are
 *   refused with TR_ERR_UNSUPPORTED.
 * - struct tr_cuda_gemm_key: what a cuBLASLt plan (descriptors + the algorithm the
 *   heuristic chose) depends on; tr_cuda_gemm_key_make zeroes the padding so keys
 *   compare with memcmp.
 * - struct tr_cuda_plan_cache: an LRU map from byte keys to plans, with the plan's
 *   release function called when one is evicted or the cache freed.
 * - tr_cuda_gemm_route: what a plan does when cuBLASLt's heuristic finds no algorithm
 *   for the epilogue asked (bias, ReLU, GELU): the plain GEMM, then the bias and the
 *   activation in our elementwise kernel (tr_cu_bias_act), instead of an error.
 *   Counted per process (tr_cuda_gemm_route_counts) so that a test sees which ran.
 */
#ifndef TRIDENT_CUDA_GEMM_PLAN_H
#define TRIDENT_CUDA_GEMM_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_cuda_gemm_shape {
    int64_t M, N, K, batch;
    /* cuBLASLt's view (column-major): operand 1 is b, operand 2 is a */
    int op1_trans, op2_trans;       /* CUBLAS_OP_T when set */
    int64_t rows1, cols1, ld1;      /* b as stored */
    int64_t rows2, cols2, ld2;      /* a as stored */
    int64_t ldc;                    /* cᵀ: N rows, M columns */
    int64_t stride1, stride2, stridec; /* elements between batches (0: shared) */
};

/* Fills s from the operands' shapes; err names the shapes when they do not fit. */
int tr_cuda_gemm_shape(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c, int trans_a,
                       int trans_b, struct tr_cuda_gemm_shape *s, struct tr_error *err);

struct tr_cuda_gemm_key {
    int32_t dtype_ab, dtype_c, dtype_bias;  /* dtype_bias -1: none */
    int32_t epilogue;                       /* the cuBLASLt epilogue */
    int32_t compute;                        /* the cuBLAS compute type */
    int32_t align;                          /* min alignment in bytes of the pointers (<= 256) */
    int32_t op1_trans, op2_trans;
    int64_t M, N, K, batch, ld1, ld2, ldc, stride1, stride2, stridec;
};

void tr_cuda_gemm_key_make(struct tr_cuda_gemm_key *key, const struct tr_cuda_gemm_shape *s, int dtype_ab,
                           int dtype_c, int dtype_bias, int epilogue, int compute, int align);
/* The largest power of two (<= 256) dividing every non-NULL pointer. */
int tr_cuda_ptr_align(const void *p1, const void *p2, const void *p3, const void *p4);

struct tr_cuda_plan_cache;
struct tr_cuda_plan_cache_stats {
    uint64_t hits, misses, evictions;
    int entries;
};
int tr_cuda_plan_cache_init(struct tr_cuda_plan_cache **out, int capacity, void (*release)(void *plan),
                            struct tr_error *err);
void tr_cuda_plan_cache_free(struct tr_cuda_plan_cache *c);
/* The plan stored under key, or NULL (a miss); a hit makes it the most recently used. */
void *tr_cuda_plan_cache_get(struct tr_cuda_plan_cache *c, const void *key, size_t key_size);
/* Stores plan under key (a copy of the key is kept), evicting the least recently used
 * entry when full. On failure plan is released. */
int tr_cuda_plan_cache_put(struct tr_cuda_plan_cache *c, const void *key, size_t key_size, void *plan,
                           struct tr_error *err);
void tr_cuda_plan_cache_get_stats(const struct tr_cuda_plan_cache *c, struct tr_cuda_plan_cache_stats *st);

/* What a plan does with the heuristic's answer: n_algos algorithms found for the
 * descriptor asked (0 also when it answered CUBLAS_STATUS_NOT_SUPPORTED), has_epilogue
 * whether that descriptor carries one (an epilogue other than CUBLASLT_EPILOGUE_DEFAULT). */
enum tr_cuda_gemm_route {
    TR_CUDA_GEMM_ROUTE_LT = 0,      /* use the algorithm found (with its epilogue, if any) */
    TR_CUDA_GEMM_ROUTE_RETRY_PLAIN, /* none for the epilogue: ask again for the plain GEMM; the plan
                                     * then runs the bias and activation after it (a fallback) */
    TR_CUDA_GEMM_ROUTE_NONE         /* none for the plain GEMM either: TR_ERR_UNSUPPORTED */
};
/* Also answers RETRY_PLAIN for any epilogue while tr_cuda_gemm_force_fallback is on. */
enum tr_cuda_gemm_route tr_cuda_gemm_route(int n_algos, int has_epilogue);
/* Plans made since the process started: with cuBLASLt running the epilogue asked (or
 * none asked), and falling back to the plain GEMM plus the elementwise kernel. */
struct tr_cuda_gemm_route_counts {
    uint64_t lt, fallback;
};
void tr_cuda_gemm_route_counts(struct tr_cuda_gemm_route_counts *out);
void tr_cuda_gemm_route_note(int fallback);
/* For tests: every plan made while on (process-wide) falls back as if the heuristic had
 * found nothing for its epilogue. A plan already cached keeps its route. Returns the
 * previous setting. */
int tr_cuda_gemm_force_fallback(int on);

#ifdef __cplusplus
}
#endif
#endif
