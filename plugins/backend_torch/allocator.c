#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "allocator.h"

/* A size class and its free list (LIFO: the block released last is the one most likely
 * still in cache). */
struct tr_torch_pool {
    size_t size;
    struct tr_torch_block *free_list;
};

struct tr_torch_allocator {
    tr_torch_raw_alloc_fn raw_alloc;
    tr_torch_raw_free_fn raw_free;
    void *user;
    struct tr_torch_pool *pools;    /* sorted by size, for binary search */
    int n_pools, cap_pools;
    struct tr_torch_block *in_use;  /* doubly linked, so the allocator can free everything */
    int keep_cache;                 /* tr_torch_allocator_keep_cache */
    struct tr_torch_allocator_stats st;
};

size_t tr_torch_alloc_round(size_t nbytes) {
    if (nbytes == 0) nbytes = 1;
    size_t r = nbytes <= TR_TORCH_SMALL_MAX ? TR_TORCH_ROUND_SMALL : TR_TORCH_ROUND_LARGE;
    if (nbytes > SIZE_MAX - r) return 0; /* no class: the caller reports the size */
    return (nbytes + r - 1) / r * r;
}

int tr_torch_allocator_init(struct tr_torch_allocator **out, tr_torch_raw_alloc_fn raw_alloc,
                            tr_torch_raw_free_fn raw_free, void *user, struct tr_error *err) {
    *out = NULL;
    if (!raw_alloc || !raw_free)
        return tr_error_set(err, TR_ERR_INVALID, "torch allocator: raw alloc and free callbacks are required");
    struct tr_torch_allocator *a = calloc(1, sizeof *a);
    if (!a) return tr_error_set(err, TR_ERR_NOMEM, "torch allocator: out of host memory");
    a->raw_alloc = raw_alloc;
    a->raw_free = raw_free;
    a->user = user;
    *out = a;
    return TR_OK;
}

static void block_destroy(struct tr_torch_allocator *a, struct tr_torch_block *b) {
    a->raw_free(a->user, b->ptr);
    a->st.reserved_bytes -= b->size;
    a->st.n_blocks--;
    free(b);
}

void tr_torch_allocator_empty_cache(struct tr_torch_allocator *a) {
    if (!a) return;
    for (int i = 0; i < a->n_pools; i++) {
        struct tr_torch_block *b = a->pools[i].free_list;
        while (b) {
            struct tr_torch_block *next = b->next;
            block_destroy(a, b);
            a->st.n_cached--;
            b = next;
        }
        a->pools[i].free_list = NULL;
    }
}

void tr_torch_allocator_keep_cache(struct tr_torch_allocator *a, int keep) {
    if (a) a->keep_cache = keep != 0;
}

void tr_torch_allocator_free(struct tr_torch_allocator *a) {
    if (!a) return;
    tr_torch_allocator_empty_cache(a);
    struct tr_torch_block *b = a->in_use;
    while (b) {
        struct tr_torch_block *next = b->next;
        block_destroy(a, b);
        b = next;
    }
    free(a->pools);
    free(a);
}

/* The pool of class `size`, created when first seen; NULL when out of host memory. */
static struct tr_torch_pool *pool_get(struct tr_torch_allocator *a, size_t size) {
    int lo = 0, hi = a->n_pools;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a->pools[mid].size < size) lo = mid + 1;
        else hi = mid;
    }
    if (lo < a->n_pools && a->pools[lo].size == size) return &a->pools[lo];
    if (a->n_pools == a->cap_pools) {
        int cap = a->cap_pools ? 2 * a->cap_pools : 16;
        struct tr_torch_pool *p = realloc(a->pools, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        a->pools = p;
        a->cap_pools = cap;
    }
    memmove(&a->pools[lo + 1], &a->pools[lo], sizeof *a->pools * (size_t)(a->n_pools - lo));
    a->pools[lo] = (struct tr_torch_pool){.size = size, .free_list = NULL};
    a->n_pools++;
    a->st.n_classes = (uint64_t)a->n_pools;
    return &a->pools[lo];
}

static void in_use_push(struct tr_torch_allocator *a, struct tr_torch_block *b) {
    b->in_use = 1;
    b->prev = NULL;
    b->next = a->in_use;
    if (a->in_use) a->in_use->prev = b;
    a->in_use = b;
    a->st.in_use_bytes += b->size;
}

int tr_torch_allocator_alloc(struct tr_torch_allocator *a, size_t nbytes, struct tr_torch_block **out,
                             struct tr_error *err) {
    *out = NULL;
    size_t size = tr_torch_alloc_round(nbytes);
    if (size == 0) return tr_error_set(err, TR_ERR_NOMEM, "torch allocator: request of %zu bytes is too large", nbytes);
    struct tr_torch_pool *pool = pool_get(a, size);
    if (!pool) return tr_error_set(err, TR_ERR_NOMEM, "torch allocator: out of host memory for a size class");

    struct tr_torch_block *b = pool->free_list;
    if (b) {
        pool->free_list = b->next;
        a->st.n_cached--;
        a->st.hits++;
        in_use_push(a, b);
        *out = b;
        return TR_OK;
    }

    b = calloc(1, sizeof *b);
    if (!b) return tr_error_set(err, TR_ERR_NOMEM, "torch allocator: out of host memory for a block record");
    int rc = a->raw_alloc(a->user, size, &b->ptr, err);
    if (rc != TR_OK && a->st.n_cached > 0 && !a->keep_cache) {
        /* Cached blocks of other classes may be what the device lacks. */
        tr_torch_allocator_empty_cache(a);
        rc = a->raw_alloc(a->user, size, &b->ptr, err);
    }
    if (rc != TR_OK) {
        free(b);
        if (err)
            tr_error_prefix(err, "torch allocator: %zu bytes (class %zu) with %.1f MiB held", nbytes, size,
                            (double)a->st.reserved_bytes / (1 << 20));
        return rc;
    }
    b->size = size;
    a->st.misses++;
    a->st.n_blocks++;
    a->st.reserved_bytes += size;
    if (a->st.reserved_bytes > a->st.peak_bytes) a->st.peak_bytes = a->st.reserved_bytes;
    in_use_push(a, b);
    *out = b;
    return TR_OK;
}

int tr_torch_allocator_hold(struct tr_torch_allocator *a, struct tr_torch_block *b, struct tr_error *err) {
    struct tr_torch_pool *pool = b && !b->in_use ? pool_get(a, b->size) : NULL;
    struct tr_torch_block **link = pool ? &pool->free_list : NULL;
    while (link && *link && *link != b) link = &(*link)->next;
    if (!link || !*link)
        return tr_error_set(err, TR_ERR_INVALID, "torch allocator: block %p is not a cached block of this allocator",
                            b ? b->ptr : NULL);
    *link = b->next;
    a->st.n_cached--;
    in_use_push(a, b);
    return TR_OK;
}

void tr_torch_allocator_release(struct tr_torch_allocator *a, struct tr_torch_block *b) {
    if (!b || !b->in_use) return;
    if (b->prev) b->prev->next = b->next;
    else a->in_use = b->next;
    if (b->next) b->next->prev = b->prev;
    b->in_use = 0;
    b->prev = NULL;
    a->st.in_use_bytes -= b->size;
    /* The pool exists: it was created when the block was taken. */
    struct tr_torch_pool *pool = pool_get(a, b->size);
    b->next = pool->free_list;
    pool->free_list = b;
    a->st.n_cached++;
}

void tr_torch_allocator_get_stats(const struct tr_torch_allocator *a, struct tr_torch_allocator_stats *st) {
    *st = a->st;
}

void tr_torch_allocator_reset_counters(struct tr_torch_allocator *a) {
    a->st.hits = 0;
    a->st.misses = 0;
}
