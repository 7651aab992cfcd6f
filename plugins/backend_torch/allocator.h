/* torch backend — the caching allocator, PyTorch's CUDACachingAllocator on any device.
 *
 * Requests are rounded up to a size class: small ones (up to TR_TORCH_SMALL_MAX) to a
 * multiple of TR_TORCH_ROUND_SMALL (512 bytes), larger ones to a multiple of
 * TR_TORCH_ROUND_LARGE (2 MiB). Each class keeps a free list of cached blocks. A
 * request is served from its class's free list when one is there (a hit); otherwise a
 * new block is taken from the device through the raw alloc callback (a miss). A
 * released block goes back on its class's free list, never to the device, so after
 * one step a second identical step is served entirely from the pools. Blocks are
 * never split or merged: a class serves only requests that round to it.
 *
 * When the device refuses a miss, every cached block is handed back to it and the
 * request is tried once more (as PyTorch does before it reports out of memory).
 *
 * Accounting: `reserved` is every byte held from the device (in use + cached), `peak`
 * the most ever reserved at once, `in_use` the bytes of blocks handed out (rounded).
 * hits and misses count until tr_torch_allocator_reset_counters.
 *
 * One allocator is used by one thread at a time.
 */
#ifndef TRIDENT_TORCH_ALLOCATOR_H
#define TRIDENT_TORCH_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>
#include "trident/status.h"

#define TR_TORCH_ROUND_SMALL ((size_t)512)
#define TR_TORCH_SMALL_MAX ((size_t)1 << 20)
#define TR_TORCH_ROUND_LARGE ((size_t)2 << 20)

/* Device memory behind the pools (tr_kernels_alloc/dealloc in the backend). */
typedef int (*tr_torch_raw_alloc_fn)(void *user, size_t nbytes, void **p, struct tr_error *err);
typedef void (*tr_torch_raw_free_fn)(void *user, void *p);

struct tr_torch_allocator;

/* One block of device memory: `ptr` holds at least the requested bytes, `size` is the
 * rounded class size. Owned by the allocator; valid until released. */
struct tr_torch_block {
    void *ptr;
    size_t size;
    struct tr_torch_block *next;    /* free list of its class, or the in-use list */
    struct tr_torch_block *prev;    /* in-use list only */
    int in_use;
};

struct tr_torch_allocator_stats {
    uint64_t hits;
    uint64_t misses;
    uint64_t in_use_bytes;
    uint64_t reserved_bytes;
    uint64_t peak_bytes;            /* most reserved at once since init */
    uint64_t n_blocks;              /* blocks held from the device (in use + cached) */
    uint64_t n_cached;              /* of which on a free list */
    uint64_t n_classes;             /* size classes seen */
};

/* The size class of a request: 0 is treated as 1 byte (a request always gets a block). */
size_t tr_torch_alloc_round(size_t nbytes);

int tr_torch_allocator_init(struct tr_torch_allocator **out, tr_torch_raw_alloc_fn raw_alloc,
                            tr_torch_raw_free_fn raw_free, void *user, struct tr_error *err);
/* Hands every block back to the device, in use or cached. NULL is a no-op. */
void tr_torch_allocator_free(struct tr_torch_allocator *a);

/* A block of at least nbytes. TR_ERR_NOMEM (with the sizes in err) when the device
 * refuses even after the cache was emptied. */
int tr_torch_allocator_alloc(struct tr_torch_allocator *a, size_t nbytes, struct tr_torch_block **out,
                             struct tr_error *err);
/* Takes b, a block on its class's free list, back into use without counting a hit or a
 * miss: how a recorded step keeps for good the blocks it was served (reduce-overhead).
 * TR_ERR_INVALID when b is not on a free list of this allocator. */
int tr_torch_allocator_hold(struct tr_torch_allocator *a, struct tr_torch_block *b, struct tr_error *err);
/* Back to its class's free list. NULL is a no-op. */
void tr_torch_allocator_release(struct tr_torch_allocator *a, struct tr_torch_block *b);
/* Hands every cached (not in use) block back to the device. */
void tr_torch_allocator_empty_cache(struct tr_torch_allocator *a);
/* keep 1: a refused raw allocation no longer empties the cache before it fails; 0: it does
 * again. A recorder that remembers cached blocks to hold them afterwards (reduce-overhead)
 * keeps the cache meanwhile, or the blocks it remembers could be freed under it. */
void tr_torch_allocator_keep_cache(struct tr_torch_allocator *a, int keep);

void tr_torch_allocator_get_stats(const struct tr_torch_allocator *a, struct tr_torch_allocator_stats *st);
void tr_torch_allocator_reset_counters(struct tr_torch_allocator *a);

#endif
