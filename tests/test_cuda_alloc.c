/* The caching device allocator's bookkeeping (trident/cuda_pool.h), with a fake device:
 * segments are host memory from malloc that the pool never touches, counted so that a
 * leak or a double free of a segment fails. No GPU and no CUDA needed. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/cuda_pool.h"

struct fake_dev {
    int n_live;            /* segments handed out and not yet returned */
    size_t bytes_live;
    size_t limit;          /* refuse a malloc that would pass this many live bytes */
    int n_malloc, n_free;
    void *seg[256];
    size_t seg_size[256];
};

static int fake_malloc(void *ctx, size_t n, void **p) {
    struct fake_dev *d = ctx;
    if (d->limit && d->bytes_live + n > d->limit) return 1;
    for (int i = 0; i < 256; i++)
        if (!d->seg[i]) {
            d->seg[i] = malloc(n);
            if (!d->seg[i]) return 1;
            d->seg_size[i] = n;
            d->n_live++;
            d->n_malloc++;
            d->bytes_live += n;
            *p = d->seg[i];
            return 0;
        }
    return 1;
}

static void fake_free(void *ctx, void *p) {
    struct fake_dev *d = ctx;
    for (int i = 0; i < 256; i++)
        if (d->seg[i] == p) {
            free(p);
            d->seg[i] = NULL;
            d->n_live--;
            d->n_free++;
            d->bytes_live -= d->seg_size[i];
            return;
        }
    fail_msg("fake device: free of %p, which it never handed out (or twice)", p);
}

static struct tr_cuda_pool *make_pool(struct fake_dev *d) {
    memset(d, 0, sizeof *d);
    struct tr_cuda_pool_device dev = {fake_malloc, fake_free, d};
    struct tr_cuda_pool *p = NULL;
    struct tr_error err = {0};
    if (tr_cuda_pool_init(&p, &dev, &err)) fail_msg("pool init: %s", err.msg);
    return p;
}

/* Free p: every segment it holds goes back to the fake device. */
static void pool_free(struct tr_cuda_pool *p, const struct fake_dev *d) {
    tr_cuda_pool_free(p);
    assert_int_equal(d->n_live, 0);
}

static void *alloc_ok(struct tr_cuda_pool *p, size_t n, const void *stream) {
    void *ptr = NULL;
    struct tr_error err = {0};
    if (tr_cuda_pool_alloc(p, n, stream, &ptr, &err)) fail_msg("alloc of %zu: %s", n, err.msg);
    assert_non_null(ptr);
    return ptr;
}

static void dealloc_ok(struct tr_cuda_pool *p, void *ptr) {
    struct tr_error err = {0};
    if (tr_cuda_pool_dealloc(p, ptr, &err)) fail_msg("dealloc of %p: %s", ptr, err.msg);
}

#define MiB ((size_t)1 << 20)
static const int S1 = 1, S2 = 2; /* streams are keys: any distinct addresses */

static void test_size_classes(void **state) {
    (void)state;
    assert_int_equal(tr_cuda_pool_round_size(0), 512);
    assert_int_equal(tr_cuda_pool_round_size(1), 512);
    assert_int_equal(tr_cuda_pool_round_size(512), 512);
    assert_int_equal(tr_cuda_pool_round_size(513), 1024);
    assert_int_equal(tr_cuda_pool_round_size(1000000), 1000448);
    assert_int_equal(tr_cuda_pool_segment_size(512), 2 * MiB);
    assert_int_equal(tr_cuda_pool_segment_size(MiB), 2 * MiB);
    assert_int_equal(tr_cuda_pool_segment_size(MiB + 512), 20 * MiB);
    assert_int_equal(tr_cuda_pool_segment_size(10 * MiB - 512), 20 * MiB);
    assert_int_equal(tr_cuda_pool_segment_size(10 * MiB), 10 * MiB);
    assert_int_equal(tr_cuda_pool_segment_size(11 * MiB + 1024), 12 * MiB);
}

/* Small requests share one 2 MiB segment; a freed block is handed out again. */
static void test_small_pool_reuse(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    void *b[100];
    for (int i = 0; i < 100; i++) b[i] = alloc_ok(p, 1000, &S1);
    assert_int_equal(d.n_malloc, 1);
    for (int i = 1; i < 100; i++) assert_true((char *)b[i] - (char *)b[i - 1] == 1024); /* carved in order */
    struct tr_cuda_pool_stats st;
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.allocated, 100 * 1024);
    assert_int_equal(st.requested, 100 * 1000);
    assert_int_equal(st.reserved, 2 * MiB);
    dealloc_ok(p, b[50]);
    void *again = alloc_ok(p, 900, &S1); /* best fit: the 1024 hole, not the big rest */
    assert_ptr_equal(again, b[50]);
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.n_cache_hits, 100); /* every alloc after the first came from the cache */
    assert_int_equal(d.n_malloc, 1);
    pool_free(p, &d);
}

/* Large blocks split off a 20 MiB segment and merge back when freed. */
static void test_large_split_merge(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    char *a = alloc_ok(p, 3 * MiB, &S1);
    char *b = alloc_ok(p, 3 * MiB, &S1);
    char *c = alloc_ok(p, 3 * MiB, &S1);
    assert_int_equal(d.n_malloc, 1);
    assert_ptr_equal(b, a + 3 * MiB);
    assert_ptr_equal(c, b + 3 * MiB);
    dealloc_ok(p, a);
    dealloc_ok(p, c);
    dealloc_ok(p, b); /* merges with both neighbours: the whole segment is one block again */
    struct tr_cuda_pool_stats st;
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.n_free_blocks, 1);
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.peak_allocated, 9 * MiB);
    char *big = alloc_ok(p, 19 * MiB, &S1); /* fits only because the three merged */
    assert_ptr_equal(big, a);
    assert_int_equal(d.n_malloc, 1);
    /* the 1 MiB rest is not split off in the large pool (<= 1 MiB) */
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.allocated, 20 * MiB);
    dealloc_ok(p, big);
    /* a request of 10 MiB or more gets a segment of its own size */
    void *huge = alloc_ok(p, 33 * MiB, &S1);
    assert_int_equal(d.n_malloc, 2);
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.reserved, 20 * MiB + 34 * MiB);
    dealloc_ok(p, huge);
    tr_cuda_pool_empty_cache(p);
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.reserved, 0);
    assert_int_equal(st.n_segments, 0);
    assert_int_equal(d.n_live, 0);
    assert_int_equal(st.peak_reserved, 54 * MiB);
    tr_cuda_pool_reset_peak(p);
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.peak_reserved, 0);
    tr_cuda_pool_free(p);
}

/* A block freed on one stream is not handed to another. */
static void test_streams(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    void *a = alloc_ok(p, 4096, &S1);
    dealloc_ok(p, a);
    void *b = alloc_ok(p, 4096, &S2);
    assert_ptr_not_equal(a, b);
    assert_int_equal(d.n_malloc, 2);
    void *c = alloc_ok(p, 4096, &S1);
    assert_ptr_equal(a, c);
    assert_int_equal(d.n_malloc, 2);
    pool_free(p, &d); /* live blocks included */
}

static void test_bad_pointers(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    struct tr_error err = {0};
    char *a = alloc_ok(p, 100, &S1);
    assert_int_equal(tr_cuda_pool_dealloc(p, a + 512, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "not handed out"));
    dealloc_ok(p, a);
    assert_int_equal(tr_cuda_pool_dealloc(p, a, &err), TR_ERR_INVALID); /* twice */
    assert_int_equal(tr_cuda_pool_dealloc(p, NULL, &err), TR_OK);
    assert_int_equal(tr_cuda_pool_alloc(p, 10, &S1, NULL, &err), TR_ERR_INVALID);
    pool_free(p, &d);
}

/* The device refuses: cached segments are returned and the malloc retried; when even
 * that is not enough, a clear TR_ERR_NOMEM with the pool's figures. */
static void test_out_of_memory(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    d.limit = 40 * MiB;
    void *a = alloc_ok(p, 15 * MiB, &S1); /* 16 MiB segment */
    void *b = alloc_ok(p, 15 * MiB, &S1);
    dealloc_ok(p, a);                     /* cached, 32 MiB live on the device */
    void *c = alloc_ok(p, 20 * MiB, &S1); /* needs the cache emptied first */
    struct tr_cuda_pool_stats st;
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.n_device_malloc_failed, 1);
    assert_int_equal(st.n_device_free, 1);
    void *x = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_cuda_pool_alloc(p, 30 * MiB, &S1, &x, &err), TR_ERR_NOMEM);
    assert_null(x);
    assert_non_null(strstr(err.msg, "out of device memory"));
    assert_non_null(strstr(err.msg, "in use"));
    dealloc_ok(p, b);
    dealloc_ok(p, c);
    pool_free(p, &d);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random allocs and frees on two streams: live blocks never overlap, the byte counts
 * add up, and everything goes back to the device at the end. */
static void test_random(void **state) {
    (void)state;
    struct fake_dev d;
    struct tr_cuda_pool *p = make_pool(&d);
    enum { N = 300 };
    char *ptr[N] = {0};
    size_t size[N] = {0}, req[N] = {0};
    uint64_t s = 0x1234567;
    for (int it = 0; it < 5000; it++) {
        int i = (int)(rng_next(&s) % N);
        if (ptr[i]) {
            dealloc_ok(p, ptr[i]);
            ptr[i] = NULL;
        } else {
            size_t n = rng_next(&s) % 4 == 0 ? rng_next(&s) % (12 * MiB) : rng_next(&s) % 70000;
            size[i] = tr_cuda_pool_round_size(n);
            req[i] = n;
            ptr[i] = alloc_ok(p, n, i % 2 ? &S1 : &S2);
        }
        if (it % 500 == 0) {
            size_t total = 0, asked = 0;
            for (int a = 0; a < N; a++) {
                if (!ptr[a]) continue;
                total += size[a];
                asked += req[a];
                for (int b = a + 1; b < N; b++)
                    if (ptr[b] && ptr[a] < ptr[b] + size[b] && ptr[b] < ptr[a] + size[a])
                        fail_msg("blocks %d and %d overlap", a, b);
            }
            struct tr_cuda_pool_stats st;
            tr_cuda_pool_get_stats(p, &st);
            /* a large block keeps a rest of up to 1 MiB unsplit */
            assert_true(st.allocated >= total);
            assert_int_equal(st.requested, asked);
            assert_true(st.reserved >= st.allocated);
            assert_true(st.peak_allocated >= st.allocated);
        }
    }
    for (int i = 0; i < N; i++) dealloc_ok(p, ptr[i]);
    struct tr_cuda_pool_stats st;
    tr_cuda_pool_get_stats(p, &st);
    assert_int_equal(st.allocated, 0);
    assert_int_equal(st.requested, 0);
    assert_int_equal(st.n_free_blocks, st.n_segments); /* every segment merged back to one block */
    tr_cuda_pool_empty_cache(p);
    assert_int_equal(d.n_live, 0);
    tr_cuda_pool_free(p);
}

TR_TEST_MAIN(NULL, NULL, test_size_classes, test_small_pool_reuse, test_large_split_merge, test_streams,
             test_bad_pointers, test_out_of_memory, test_random)
