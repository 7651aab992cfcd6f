/* The caching allocator's bookkeeping (trident/cuda_pool.h). Plain C, no CUDA.
 *
 * A segment is a doubly linked list of blocks in address order (prev/next). Free blocks
 * of each pool sit in one array sorted by (stream, size, address), so a best fit is a
 * binary search; live blocks are found from their address in an open-addressing table. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "trident/cuda_pool.h"

enum { POOL_SMALL = 0, POOL_LARGE = 1 };

struct block {
    const void *stream;
    char *ptr;
    size_t size;
    size_t requested;
    int pool;
    int allocated;
    struct block *prev, *next; /* neighbours in the segment */
};

struct free_set {
    struct block **v;
    size_t n, cap;
};

struct tr_cuda_pool {
    struct tr_cuda_pool_device dev;
    struct free_set free[2];
    struct block **live; /* open addressing, linear probing; capacity a power of two */
    size_t live_cap, live_n;
    struct block **seg;  /* the first block of every segment */
    size_t n_seg, cap_seg;
    struct tr_cuda_pool_stats st;
};

size_t tr_cuda_pool_round_size(size_t n) {
    if (n < TR_CUDA_POOL_ROUND) return TR_CUDA_POOL_ROUND;
    return (n + TR_CUDA_POOL_ROUND - 1) / TR_CUDA_POOL_ROUND * TR_CUDA_POOL_ROUND;
}

size_t tr_cuda_pool_segment_size(size_t rounded) {
    if (rounded <= TR_CUDA_POOL_SMALL_MAX) return TR_CUDA_POOL_SMALL_SEGMENT;
    if (rounded < TR_CUDA_POOL_LARGE_DIRECT) return TR_CUDA_POOL_LARGE_SEGMENT;
    return (rounded + TR_CUDA_POOL_LARGE_ROUND - 1) / TR_CUDA_POOL_LARGE_ROUND * TR_CUDA_POOL_LARGE_ROUND;
}

/* ---- the free sets ---- */

static int block_less(const void *s1, size_t z1, uintptr_t p1, const struct block *b) {
    if ((uintptr_t)s1 != (uintptr_t)b->stream) return (uintptr_t)s1 < (uintptr_t)b->stream;
    if (z1 != b->size) return z1 < b->size;
    return p1 < (uintptr_t)b->ptr;
}

/* First index whose block is not less than (stream, size, ptr). */
static size_t lower_bound(const struct free_set *f, const void *stream, size_t size, uintptr_t ptr) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (block_less(stream, size, ptr, f->v[mid]))
            hi = mid;
        else if (f->v[mid]->stream == stream && f->v[mid]->size == size && (uintptr_t)f->v[mid]->ptr == ptr)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* v with room for element n of a doubling array of esz-byte elements (first capacity
 * `first`), *cap updated; NULL on no memory, v then untouched. */
static void *grow(void *v, size_t n, size_t *cap, size_t first, size_t esz) {
    if (n < *cap) return v;
    size_t c = *cap ? 2 * *cap : first;
    void *nv = realloc(v, c * esz);
    if (nv) *cap = c;
    return nv;
}

static int free_insert(struct tr_cuda_pool *p, struct block *b) {
    struct free_set *f = &p->free[b->pool];
    struct block **v = grow(f->v, f->n, &f->cap, 64, sizeof *v);
    if (!v) return TR_ERR_NOMEM;
    f->v = v;
    size_t i = lower_bound(f, b->stream, b->size, (uintptr_t)b->ptr);
    memmove(f->v + i + 1, f->v + i, (f->n - i) * sizeof *f->v);
    f->v[i] = b;
    f->n++;
    p->st.n_free_blocks++;
    return TR_OK;
}

static void free_remove(struct tr_cuda_pool *p, struct block *b) {
    struct free_set *f = &p->free[b->pool];
    size_t i = lower_bound(f, b->stream, b->size, (uintptr_t)b->ptr);
    if (i < f->n && f->v[i] == b) {
        memmove(f->v + i, f->v + i + 1, (f->n - i - 1) * sizeof *f->v);
        f->n--;
        p->st.n_free_blocks--;
    }
}

/* ---- live blocks by address ---- */

static size_t hash_ptr(const void *ptr, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)ptr >> 9; /* blocks are 512 apart at least */
    h *= 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static int live_put(struct tr_cuda_pool *p, struct block *b);

static int live_grow(struct tr_cuda_pool *p) {
    size_t cap = p->live_cap ? 2 * p->live_cap : 256;
    struct block **old = p->live;
    size_t old_cap = p->live_cap;
    struct block **t = calloc(cap, sizeof *t);
    if (!t) return TR_ERR_NOMEM;
    p->live = t;
    p->live_cap = cap;
    p->live_n = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) live_put(p, old[i]);
    free(old);
    return TR_OK;
}

static int live_put(struct tr_cuda_pool *p, struct block *b) {
    if (2 * (p->live_n + 1) > p->live_cap && live_grow(p)) return TR_ERR_NOMEM;
    size_t i = hash_ptr(b->ptr, p->live_cap);
    while (p->live[i]) i = (i + 1) & (p->live_cap - 1);
    p->live[i] = b;
    p->live_n++;
    return TR_OK;
}

static size_t live_find(const struct tr_cuda_pool *p, const void *ptr) {
    if (!p->live_cap) return SIZE_MAX;
    size_t i = hash_ptr(ptr, p->live_cap);
    while (p->live[i]) {
        if (p->live[i]->ptr == ptr) return i;
        i = (i + 1) & (p->live_cap - 1);
    }
    return SIZE_MAX;
}

/* Removal with backward shift: the entries after i in its cluster move up when their
 * home slot allows, so that probing never stops early at a hole. */
static void live_remove_at(struct tr_cuda_pool *p, size_t i) {
    size_t mask = p->live_cap - 1, j = i;
    p->live[i] = NULL;
    p->live_n--;
    for (;;) {
        j = (j + 1) & mask;
        if (!p->live[j]) return;
        size_t home = hash_ptr(p->live[j]->ptr, p->live_cap);
        /* move j to i when home is not cyclically within (i, j] */
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            p->live[i] = p->live[j];
            p->live[j] = NULL;
            i = j;
        }
    }
}

/* ---- segments ---- */

static int seg_add(struct tr_cuda_pool *p, struct block *b) {
    struct block **v = grow(p->seg, p->n_seg, &p->cap_seg, 16, sizeof *v);
    if (!v) return TR_ERR_NOMEM;
    p->seg = v;
    p->seg[p->n_seg++] = b;
    p->st.n_segments++;
    return TR_OK;
}

static void bump_peaks(struct tr_cuda_pool *p) {
    if (p->st.allocated > p->st.peak_allocated) p->st.peak_allocated = p->st.allocated;
    if (p->st.reserved > p->st.peak_reserved) p->st.peak_reserved = p->st.reserved;
}

int tr_cuda_pool_init(struct tr_cuda_pool **out, const struct tr_cuda_pool_device *dev, struct tr_error *err) {
    if (!out || !dev || !dev->dev_malloc || !dev->dev_free)
        return tr_error_set(err, TR_ERR_INVALID, "cuda allocator: init needs an out pointer and device malloc/free");
    *out = NULL;
    struct tr_cuda_pool *p = calloc(1, sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "cuda allocator: no host memory for the pool");
    p->dev = *dev;
    *out = p;
    return TR_OK;
}

/* Segments whose one block is free go back to the device. */
void tr_cuda_pool_empty_cache(struct tr_cuda_pool *p) {
    if (!p) return;
    size_t w = 0;
    for (size_t i = 0; i < p->n_seg; i++) {
        struct block *b = p->seg[i];
        if (!b->allocated && !b->next) {
            free_remove(p, b);
            p->dev.dev_free(p->dev.ctx, b->ptr);
            p->st.reserved -= b->size;
            p->st.n_device_free++;
            p->st.n_segments--;
            free(b);
        } else {
            p->seg[w++] = b;
        }
    }
    p->n_seg = w;
}

void tr_cuda_pool_free(struct tr_cuda_pool *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_seg; i++) {
        struct block *b = p->seg[i];
        p->dev.dev_free(p->dev.ctx, b->ptr);
        while (b) {
            struct block *n = b->next;
            free(b);
            b = n;
        }
    }
    free(p->seg);
    free(p->live);
    free(p->free[0].v);
    free(p->free[1].v);
    free(p);
}

static struct block *best_fit(struct tr_cuda_pool *p, int pool, const void *stream, size_t size) {
    struct free_set *f = &p->free[pool];
    size_t i = lower_bound(f, stream, size, 0);
    if (i < f->n && f->v[i]->stream == stream && f->v[i]->size >= size) return f->v[i];
    return NULL;
}

static struct block *new_segment(struct tr_cuda_pool *p, int pool, const void *stream, size_t seg_size) {
    void *mem = NULL;
    if (p->dev.dev_malloc(p->dev.ctx, seg_size, &mem) || !mem) {
        p->st.n_device_malloc_failed++;
        /* what is cached but unused may be enough: give it back and ask once more */
        tr_cuda_pool_empty_cache(p);
        mem = NULL;
        if (p->dev.dev_malloc(p->dev.ctx, seg_size, &mem) || !mem) {
            p->st.n_device_malloc_failed++;
            return NULL;
        }
    }
    struct block *b = calloc(1, sizeof *b);
    if (!b || seg_add(p, b)) {
        free(b);
        p->dev.dev_free(p->dev.ctx, mem);
        return NULL;
    }
    b->stream = stream;
    b->ptr = mem;
    b->size = seg_size;
    b->pool = pool;
    p->st.n_device_malloc++;
    p->st.reserved += seg_size;
    return b;
}

int tr_cuda_pool_alloc(struct tr_cuda_pool *p, size_t nbytes, const void *stream, void **ptr, struct tr_error *err) {
    if (!p || !ptr) return tr_error_set(err, TR_ERR_INVALID, "cuda allocator: pool or out pointer is NULL");
    *ptr = NULL;
    if (nbytes > SIZE_MAX / 2)
        return tr_error_set(err, TR_ERR_NOMEM, "cuda allocator: %zu bytes requested: more than any device has", nbytes);
    size_t size = tr_cuda_pool_round_size(nbytes);
    int pool = size <= TR_CUDA_POOL_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
    struct block *b = best_fit(p, pool, stream, size);
    if (b) {
        free_remove(p, b);
        p->st.n_cache_hits++;
    } else {
        b = new_segment(p, pool, stream, tr_cuda_pool_segment_size(size));
        if (!b)
            return tr_error_set(err, TR_ERR_NOMEM, "cuda allocator: out of device memory for %zu bytes (a %zu-byte "
                                "segment; %zu bytes in use, %zu reserved, peak %zu in use)", nbytes,
                                tr_cuda_pool_segment_size(size), p->st.allocated, p->st.reserved,
                                p->st.peak_allocated);
    }
    size_t rest = b->size - size;
    int split = pool == POOL_SMALL ? rest >= TR_CUDA_POOL_ROUND : rest > TR_CUDA_POOL_SMALL_MAX;
    if (split) {
        struct block *r = calloc(1, sizeof *r);
        if (r) {
            r->stream = stream;
            r->ptr = b->ptr + size;
            r->size = rest;
            r->pool = pool;
            r->prev = b;
            r->next = b->next;
            if (b->next) b->next->prev = r;
            b->next = r;
            b->size = size;
            if (free_insert(p, r)) { /* no room to remember it: undo the split */
                b->next = r->next;
                if (r->next) r->next->prev = b;
                b->size += rest;
                free(r);
            } else {
                p->st.n_splits++;
            }
        }
    }
    b->allocated = 1;
    b->requested = nbytes;
    if (live_put(p, b)) {
        b->allocated = 0;
        free_insert(p, b);
        return tr_error_set(err, TR_ERR_NOMEM, "cuda allocator: no host memory to track a block");
    }
    p->st.allocated += b->size;
    p->st.requested += nbytes;
    p->st.n_alloc++;
    bump_peaks(p);
    *ptr = b->ptr;
    return TR_OK;
}

/* b absorbs its free neighbour n (n follows b); the caller has taken both out of the
 * free set, whose order is by size. */
static void merge_next(struct tr_cuda_pool *p, struct block *b, struct block *n) {
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    free(n);
    p->st.n_merges++;
}

int tr_cuda_pool_dealloc(struct tr_cuda_pool *p, void *ptr, struct tr_error *err) {
    if (!ptr) return TR_OK;
    if (!p) return tr_error_set(err, TR_ERR_INVALID, "cuda allocator: pool is NULL");
    size_t i = live_find(p, ptr);
    if (i == SIZE_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "cuda allocator: %p was not handed out by this pool, or was freed "
                            "already", ptr);
    struct block *b = p->live[i];
    live_remove_at(p, i);
    b->allocated = 0;
    p->st.allocated -= b->size;
    p->st.requested -= b->requested;
    b->requested = 0;
    p->st.n_dealloc++;
    if (b->next && !b->next->allocated) {
        free_remove(p, b->next);
        merge_next(p, b, b->next);
    }
    if (b->prev && !b->prev->allocated) {
        struct block *prev = b->prev;
        free_remove(p, prev);
        merge_next(p, prev, b);
        b = prev;
    }
    /* the segment's head may have changed identity only through prev, which was already
     * the head; the segment list points at heads, so nothing to update */
    if (free_insert(p, b)) return tr_error_set(err, TR_ERR_NOMEM, "cuda allocator: no host memory to cache a block");
    return TR_OK;
}

void tr_cuda_pool_get_stats(const struct tr_cuda_pool *p, struct tr_cuda_pool_stats *st) {
    if (st) *st = p ? p->st : (struct tr_cuda_pool_stats){0};
}

void tr_cuda_pool_reset_peak(struct tr_cuda_pool *p) {
    if (!p) return;
    p->st.peak_allocated = p->st.allocated;
    p->st.peak_reserved = p->st.reserved;
}
