/* trident — the caching device allocator's bookkeeping (PyTorch's CUDACachingAllocator
 * design, in C).
 *
 * Device memory comes from a `device` function pair (cudaMalloc/cudaFree in the CUDA
 * kernels, a fake in the tests: this file knows nothing of CUDA and never touches the
 * memory it hands out). Requests are rounded up to a multiple of 512 bytes. Blocks of up
 * to 1 MiB come from the small pool, carved out of 2 MiB segments; larger ones from the
 * large pool, whose segments are 20 MiB for requests under 10 MiB and the request rounded
 * up to 2 MiB above that. A free block is reused best-fit (the smallest that fits) by a
 * later request of the same stream and pool; a block larger than the request is split
 * when the rest is worth keeping (>= 512 B in the small pool, > 1 MiB in the large), and
 * a freed block merges with free neighbours of its segment. Memory goes back to the
 * device only through tr_cuda_pool_empty_cache (which the pool also calls once when the
 * device refuses a malloc, then retries) and tr_cuda_pool_free.
 *
 * Streams are keys (never dereferenced): a block freed on a stream is only reused on
 * that stream, so work queued on the stream before the free has finished with it by the
 * time a later kernel on the same stream writes it. A block used on another stream must
 * be synchronised by the caller before its free.
 *
 * Not thread-safe: a pool belongs to one kernels context, used by one thread at a time.
 */
#ifndef TRIDENT_CUDA_POOL_H
#define TRIDENT_CUDA_POOL_H

#include <stddef.h>
#include <stdint.h>
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CUDA_POOL_ROUND ((size_t)512)                  /* every block is a multiple */
#define TR_CUDA_POOL_SMALL_MAX ((size_t)1 << 20)          /* small pool: blocks <= 1 MiB */
#define TR_CUDA_POOL_SMALL_SEGMENT ((size_t)2 << 20)      /* small pool segments */
#define TR_CUDA_POOL_LARGE_SEGMENT ((size_t)20 << 20)     /* for large requests < 10 MiB */
#define TR_CUDA_POOL_LARGE_DIRECT ((size_t)10 << 20)      /* from here, segment = request */
#define TR_CUDA_POOL_LARGE_ROUND ((size_t)2 << 20)        /* ... rounded up to 2 MiB */

/* Where segments come from: dev_malloc returns 0 and sets *p, or non-zero when the
 * device has no memory left; dev_free returns a segment. */
struct tr_cuda_pool_device {
    int (*dev_malloc)(void *ctx, size_t nbytes, void **p);
    void (*dev_free)(void *ctx, void *p);
    void *ctx;
};

struct tr_cuda_pool_stats {
    size_t allocated;          /* bytes in blocks handed out (rounded sizes) */
    size_t requested;          /* bytes asked for by the live blocks */
    size_t reserved;           /* bytes in segments held from the device */
    size_t peak_allocated;     /* high-water marks since init or tr_cuda_pool_reset_peak */
    size_t peak_reserved;
    uint64_t n_alloc, n_dealloc;           /* calls that succeeded */
    uint64_t n_cache_hits;                 /* allocations served from a free block */
    uint64_t n_device_malloc, n_device_free, n_device_malloc_failed;
    uint64_t n_splits, n_merges;
    int64_t n_segments;        /* segments held now */
    int64_t n_free_blocks;     /* cached free blocks now */
};

struct tr_cuda_pool;

int tr_cuda_pool_init(struct tr_cuda_pool **out, const struct tr_cuda_pool_device *dev, struct tr_error *err);
/* Returns every segment to the device, blocks still handed out included. */
void tr_cuda_pool_free(struct tr_cuda_pool *p);

/* A block of at least nbytes (0 is one of 512), 512-byte aligned relative to its segment,
 * for use on `stream`. TR_ERR_NOMEM, with the pool's figures, when the device has no
 * memory for it even after the cache was emptied. */
int tr_cuda_pool_alloc(struct tr_cuda_pool *p, size_t nbytes, const void *stream, void **ptr, struct tr_error *err);
/* Gives a block back to its pool (not to the device). NULL is a no-op; a pointer the
 * pool did not hand out, or one freed already, is TR_ERR_INVALID. */
int tr_cuda_pool_dealloc(struct tr_cuda_pool *p, void *ptr, struct tr_error *err);
/* Returns every segment with no block in use to the device. */
void tr_cuda_pool_empty_cache(struct tr_cuda_pool *p);

void tr_cuda_pool_get_stats(const struct tr_cuda_pool *p, struct tr_cuda_pool_stats *st);
/* Peaks restart from the current figures. */
void tr_cuda_pool_reset_peak(struct tr_cuda_pool *p);

/* The size classes, for tests and reports: a request rounded, and the segment a
 * request of that rounded size gets when no cached block fits. */
size_t tr_cuda_pool_round_size(size_t nbytes);
size_t tr_cuda_pool_segment_size(size_t rounded);

#ifdef __cplusplus
}
#endif
#endif
