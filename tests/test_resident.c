/* Params resident on a device, shared by a backend's programs (plugins/common/resident.h),
 * on a fake device that counts its calls and keeps real copies: the first use uploads,
 * later ones reuse with no upload; a size or dtype mismatch for the same host memory is
 * refused naming both params; references are released in any order and the last one
 * frees; a failing alloc or upload leaves nothing behind; hundreds of params at once; and
 * the store over a kernels context (on the cpu here) made by the first acquire and freed
 * with the last release. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resident.h"
#include "testutil.h"
#include "trident/dtype.h"

static void expect_msg(const struct tr_error *err, const char *const *subs) {
    for (; *subs; subs++)
        if (!strstr(err->msg, *subs)) fail_msg("message \"%s\" lacks \"%s\"", err->msg, *subs);
}
#define EXPECT_MSG(err, ...) expect_msg((err), (const char *const[]){__VA_ARGS__, NULL})

struct fake {
    int allocs, frees, uploads, live;
    int fail_alloc, fail_upload;    /* the next one fails */
};

static int f_alloc(void *user, size_t n, void **dev, struct tr_error *err) {
    struct fake *f = user;
    if (f->fail_alloc) {
        f->fail_alloc = 0;
        return tr_error_set(err, TR_ERR_NOMEM, "fake: out of device memory for %zu bytes", n);
    }
    *dev = malloc(n);
    if (!*dev) return tr_error_set(err, TR_ERR_NOMEM, "fake: malloc");
    f->allocs++;
    f->live++;
    return TR_OK;
}

static void f_free(void *user, void *dev) {
    struct fake *f = user;
    f->frees++;
    f->live--;
    free(dev);
}

static int f_upload(void *user, void *dev, const void *host, size_t n, struct tr_error *err) {
    struct fake *f = user;
    if (f->fail_upload) {
        f->fail_upload = 0;
        return tr_error_set(err, TR_ERR_DEVICE, "fake: copy failed");
    }
    f->uploads++;
    memcpy(dev, host, n);
    return TR_OK;
}

static struct tr_resident *make(struct fake *f) {
    memset(f, 0, sizeof *f);
    struct tr_resident_ops ops = {.user = f, .alloc = f_alloc, .free = f_free, .upload = f_upload};
    struct tr_resident *r = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_resident_init(&r, &ops, "test", &err), TR_OK);
    return r;
}

/* Free r: every block it made goes back to the fake device. */
static void resident_free(struct tr_resident *r, const struct fake *f) {
    tr_resident_free(r);
    assert_int_equal(f->live, 0);
}

static struct tr_resident_param prm(const void *host, size_t n, int dtype, const char *name, int writes) {
    return (struct tr_resident_param){.host = host, .nbytes = n, .dtype = dtype, .name = name, .writes = writes};
}

static void test_first_uploads_second_reuses(void **state) {
    (void)state;
    struct fake f;
    struct tr_resident *r = make(&f);
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = (float)i * 0.5f;
    struct tr_resident_param p = prm(w, sizeof w, TR_DTYPE_F32, "w", 0);
    struct tr_error err = {0};
    void *d1 = NULL, *d2 = NULL;
    assert_int_equal(tr_resident_acquire(r, &p, &d1, &err), TR_OK);
    assert_int_equal(f.allocs, 1);
    assert_int_equal(f.uploads, 1);
    assert_memory_equal(d1, w, sizeof w);
    w[3] = 99.0f; /* a second program must not upload again: the device copy is the truth */
    assert_int_equal(tr_resident_acquire(r, &p, &d2, &err), TR_OK);
    assert_ptr_equal(d1, d2);
    assert_int_equal(f.allocs, 1);
    assert_int_equal(f.uploads, 1);
    assert_true(((float *)d2)[3] == 1.5f);
    struct tr_resident_stats st;
    tr_resident_get_stats(r, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.refs, 2);
    assert_int_equal(st.bytes, sizeof w);
    assert_int_equal(st.uploads, 1);
    assert_int_equal(st.reuses, 1);
    assert_ptr_equal(tr_resident_find(r, w, NULL), d1);
    assert_null(tr_resident_find(r, w + 1, NULL)); /* an interior pointer is another key */
    tr_resident_free(r);
    assert_int_equal(f.frees, 1); /* still held at free: freed then */
    assert_int_equal(f.live, 0);
}

static void test_mismatch_refused_with_names(void **state) {
    (void)state;
    struct fake f;
    struct tr_resident *r = make(&f);
    static uint16_t buf[64];
    struct tr_error err = {0};
    void *d = NULL, *d2 = (void *)1;
    struct tr_resident_param a = prm(buf, sizeof buf, TR_DTYPE_BF16, "layers.0.wq", 0);
    assert_int_equal(tr_resident_acquire(r, &a, &d, &err), TR_OK);
    struct tr_resident_param small = prm(buf, 64, TR_DTYPE_BF16, "cache.k", 0);
    assert_int_equal(tr_resident_acquire(r, &small, &d2, &err), TR_ERR_INVALID);
    assert_null(d2);
    EXPECT_MSG(&err, "test: param 'cache.k'", "64 bytes", "'layers.0.wq'", "128 bytes", "bf16");
    struct tr_resident_param dt = prm(buf, sizeof buf, TR_DTYPE_F16, "half", 0);
    assert_int_equal(tr_resident_acquire(r, &dt, &d2, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "param 'half'", "f16", "'layers.0.wq'", "bf16");
    struct tr_resident_stats st;
    tr_resident_get_stats(r, &st);
    assert_int_equal(st.refs, 1); /* the refused ones took nothing */
    assert_int_equal(f.uploads, 1);
    struct tr_resident_param none = prm(NULL, 8, TR_DTYPE_F32, "empty", 0);
    assert_int_equal(tr_resident_acquire(r, &none, &d2, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "'empty'", "no host memory");
    resident_free(r, &f);
}

static void test_release_order_and_last_frees(void **state) {
    (void)state;
    struct fake f;
    struct tr_resident *r = make(&f);
    float a[4] = {1, 2, 3, 4}, b[8] = {0};
    struct tr_error err = {0};
    void *da = NULL, *db = NULL, *tmp = NULL;
    /* program 1 reads a and b; program 2 reads a and writes b (a cache it updates) */
    struct tr_resident_param pa = prm(a, sizeof a, TR_DTYPE_F32, "a", 0), pb = prm(b, sizeof b, TR_DTYPE_F32, "b", 0);
    struct tr_resident_param pbw = prm(b, sizeof b, TR_DTYPE_F32, "b", 1);
    assert_int_equal(tr_resident_acquire(r, &pa, &da, &err), TR_OK);
    assert_int_equal(tr_resident_acquire(r, &pb, &db, &err), TR_OK);
    int written = -1;
    assert_ptr_equal(tr_resident_find(r, b, &written), db);
    assert_int_equal(written, 0);
    assert_int_equal(tr_resident_acquire(r, &pa, &tmp, &err), TR_OK);
    assert_int_equal(tr_resident_acquire(r, &pbw, &tmp, &err), TR_OK);
    assert_ptr_equal(tr_resident_find(r, b, &written), db);
    assert_int_equal(written, 1);
    /* an update by program 2 is what program 1 reads: the same block */
    ((float *)tmp)[5] = 42.0f;
    assert_true(((float *)db)[5] == 42.0f);
    /* program 1 freed first, in its own order (b before a) */
    assert_int_equal(tr_resident_release(r, b, 0, &err), TR_OK);
    assert_int_equal(tr_resident_release(r, a, 0, &err), TR_OK);
    assert_int_equal(f.frees, 0);
    assert_ptr_equal(tr_resident_find(r, b, &written), db);
    assert_int_equal(written, 1);
    /* a reader release too many (program 2 holds b as a writer) is refused, nothing freed */
    assert_int_equal(tr_resident_release(r, b, 0, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "test: release of", "a reader");
    assert_int_equal(f.frees, 0);
    assert_int_equal(tr_resident_release(r, a, 0, &err), TR_OK);
    assert_int_equal(f.frees, 1);
    assert_null(tr_resident_find(r, a, NULL));
    assert_int_equal(tr_resident_release(r, b, 1, &err), TR_OK);
    assert_int_equal(f.frees, 2);
    assert_int_equal(f.live, 0);
    struct tr_resident_stats st;
    tr_resident_get_stats(r, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.refs, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.peak_bytes, sizeof a + sizeof b);
    assert_int_equal(tr_resident_release(r, a, 0, &err), TR_ERR_INVALID); /* gone */
    /* the same memory bound again later is uploaded afresh (its host bytes now) */
    a[0] = 7.0f;
    assert_int_equal(tr_resident_acquire(r, &pa, &da, &err), TR_OK);
    assert_int_equal(f.uploads, 3);
    assert_true(((float *)da)[0] == 7.0f);
    resident_free(r, &f);
}

static void test_failures_leave_nothing(void **state) {
    (void)state;
    struct fake f;
    struct tr_resident *r = make(&f);
    double w[32] = {0}, v[2] = {0};
    struct tr_error err = {0};
    void *d = (void *)1;
    struct tr_resident_param p = prm(w, sizeof w, TR_DTYPE_F64, "w", 0);
    f.fail_upload = 1;
    assert_int_equal(tr_resident_acquire(r, &p, &d, &err), TR_ERR_DEVICE);
    assert_null(d);
    EXPECT_MSG(&err, "test: uploading param 'w' (256 bytes)", "fake: copy failed");
    assert_int_equal(f.live, 0); /* the block was handed back */
    assert_null(tr_resident_find(r, w, NULL));
    struct tr_resident_stats st;
    tr_resident_get_stats(r, &st);
    assert_int_equal(st.entries + (int)st.refs + (int)st.bytes, 0);
    f.fail_alloc = 1;
    struct tr_resident_param q = prm(v, sizeof v, TR_DTYPE_F64, "v", 1);
    assert_int_equal(tr_resident_acquire(r, &q, &d, &err), TR_ERR_NOMEM);
    EXPECT_MSG(&err, "device memory for param 'v' (16 bytes)", "out of device memory");
    assert_null(tr_resident_find(r, v, NULL));
    /* and the next try succeeds, uploading once */
    assert_int_equal(tr_resident_acquire(r, &p, &d, &err), TR_OK);
    assert_int_equal(f.uploads, 1);
    assert_int_equal(f.live, 1);
    resident_free(r, &f);
}

/* Hundreds of params in two programs, acquired and released in shuffled orders: every
 * lookup finds its own block (its bytes are its host's), and all are freed at the end. */
static void test_many_params(void **state) {
    (void)state;
    enum { N = 700 };
    struct fake f;
    struct tr_resident *r = make(&f);
    int32_t *host = malloc(N * 8 * sizeof *host);
    void *dev[N];
    int order[N];
    assert_non_null(host);
    for (int i = 0; i < N * 8; i++) host[i] = i;
    for (int i = 0; i < N; i++) order[i] = i;
    unsigned seed = 12345;
    for (int i = N - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    struct tr_error err = {0};
    char name[32];
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < N; k++) {
            int i = pass ? order[k] : k;
            snprintf(name, sizeof name, "p%d", i);
            struct tr_resident_param p = prm(host + 8 * i, 8 * sizeof *host, TR_DTYPE_I32, name, 0);
            void *d = NULL;
            assert_int_equal(tr_resident_acquire(r, &p, &d, &err), TR_OK);
            if (pass) assert_ptr_equal(d, dev[i]);
            else dev[i] = d;
        }
    assert_int_equal(f.uploads, N);
    for (int i = 0; i < N; i++) {
        assert_ptr_equal(tr_resident_find(r, host + 8 * i, NULL), dev[i]);
        assert_int_equal(((int32_t *)dev[i])[7], 8 * i + 7);
    }
    for (int k = 0; k < N; k++) assert_int_equal(tr_resident_release(r, host + 8 * order[k], 0, &err), TR_OK);
    assert_int_equal(f.frees, 0);
    for (int k = N - 1; k >= 0; k--) assert_int_equal(tr_resident_release(r, host + 8 * k, 0, &err), TR_OK);
    assert_int_equal(f.frees, N);
    assert_int_equal(f.live, 0);
    struct tr_resident_stats st;
    tr_resident_get_stats(r, &st);
    assert_int_equal(st.peak_bytes, (uint64_t)N * 8 * sizeof *host);
    tr_resident_free(r);
    free(host);
}

/* The store over a kernels context, on the cpu (the same code a backend runs on cuda):
 * made by the first acquire, shared, freed by the last release. */
static void test_store_on_cpu_context(void **state) {
    (void)state;
    struct tr_resident_store *s = NULL;
    float w[10], c[6] = {0};
    for (int i = 0; i < 10; i++) w[i] = (float)i;
    struct tr_error err = {0};
    void *d1 = NULL, *d2 = NULL, *dc = NULL;
    struct tr_resident_param pw = prm(w, sizeof w, TR_DTYPE_F32, "w", 0), pc = prm(c, sizeof c, TR_DTYPE_F32, "c", 1);
    assert_int_equal(tr_resident_store_acquire(&s, TR_DEVICE_CPU, 0, "test", &pw, &d1, &err), TR_OK);
    assert_non_null(s);
    assert_ptr_not_equal(d1, w); /* a copy, in the store's memory */
    assert_memory_equal(d1, w, sizeof w);
    assert_int_equal(tr_resident_store_acquire(&s, TR_DEVICE_CPU, 0, "test", &pw, &d2, &err), TR_OK);
    assert_ptr_equal(d1, d2);
    assert_int_equal(tr_resident_store_acquire(&s, TR_DEVICE_CPU, 0, "test", &pc, &dc, &err), TR_OK);
    assert_int_equal(tr_resident_store_written(s, c), 1);
    assert_int_equal(tr_resident_store_written(s, w), 0);
    assert_true(tr_resident_store_peak_bytes(s) >= sizeof w + sizeof c);
    struct tr_resident_param bad = prm(w, sizeof w, TR_DTYPE_I32, "w_as_int", 0);
    void *dx = NULL;
    assert_int_equal(tr_resident_store_acquire(&s, TR_DEVICE_CPU, 0, "test", &bad, &dx, &err), TR_ERR_INVALID);
    EXPECT_MSG(&err, "test: param 'w_as_int'", "i32", "'w'", "f32");
    struct tr_resident_stats st;
    tr_resident_store_stats(s, &st);
    assert_int_equal(st.refs, 3);
    assert_int_equal(st.uploads, 2);
    tr_resident_store_release(&s, w, 0);
    tr_resident_store_release(&s, c, 1);
    assert_non_null(s);
    tr_resident_store_release(&s, w, 0);
    assert_null(s); /* the last reference took the store (and its context) with it */
    assert_int_equal(tr_resident_store_peak_bytes(s), 0);
    assert_int_equal(tr_resident_store_written(s, c), 0);
    /* a first acquire that fails leaves no store */
    struct tr_resident_param none = prm(NULL, 4, TR_DTYPE_F32, "none", 0);
    assert_int_equal(tr_resident_store_acquire(&s, TR_DEVICE_CPU, 0, "test", &none, &dx, &err), TR_ERR_INVALID);
    assert_null(s);
    tr_resident_store_free(NULL);
}

TR_TEST_MAIN(NULL, NULL, test_first_uploads_second_reuses, test_mismatch_refused_with_names,
             test_release_order_and_last_frees, test_failures_leave_nothing, test_many_params,
             test_store_on_cpu_context)
