/* trident — what the kernels library offers on CUDA beyond kernels.h.
 *
 * A cuda context is made by tr_kernels_init(&k, TR_DEVICE_CUDA, index, err); it owns one
 * stream (every kernel of the context is queued on it, in order), one cuBLASLt handle
 * and workspace for that stream, a cache of GEMM plans keyed by shape, and a caching
 * allocator (trident/cuda_pool.h) that tr_kernels_alloc/dealloc go through. Kernels
 * return once queued; tr_kernels_sync waits for them, and reports a failure of a kernel
 * that ran asynchronously. Tensors given to a cuda context are on TR_DEVICE_CUDA.
 *
 * Where the library was built without nvcc, every function here fails with "built
 * without CUDA" and tr_kernels_init for cuda with "no CUDA device found".
 */
#ifndef TRIDENT_KERNELS_CUDA_H
#define TRIDENT_KERNELS_CUDA_H

#include <stddef.h>
#include "trident/cuda_pool.h"
#include "trident/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if this library has the CUDA kernels compiled in (a device may still be absent). */
int tr_kernels_cuda_built(void);

/* The context's stream (a cudaStream_t), for capture into a CUDA graph; NULL on the cpu. */
void *tr_kernels_cuda_stream(const struct tr_kernels *k);

/* The caching allocator's figures (peak device memory among them). */
int tr_kernels_cuda_memory(const struct tr_kernels *k, struct tr_cuda_pool_stats *st, struct tr_error *err);

/* Compiles CUDA C source `src` (a translation unit named `name` in messages) with NVRTC
 * for the architecture sm (80, 90, ...) into a cubin: *cubin (malloc'd, caller frees)
 * of *size bytes. No GPU is needed. On a compile error, TR_ERR_INVALID with the log's
 * start in err; *log (if log is not NULL) gets the whole log, malloc'd, on success or
 * failure (NULL if there is none). */
int tr_cuda_nvrtc_compile(const char *src, const char *name, int sm, void **cubin, size_t *size, char **log,
                          struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
