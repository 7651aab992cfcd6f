/* The CUDA GEMM's host-side logic (gemm_plan.h): shapes mapped onto cuBLASLt's
 * column-major strided batch, plan keys, the LRU plan cache, and the epilogue fallback's
 * decision. No CUDA here. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gemm_plan.h"

static const char *desc(const struct tr_tensor *t, char *buf, size_t n) {
    char sh[160];
    tr_shape_str(t->ndim, t->shape, sh, sizeof sh);
    snprintf(buf, n, "%s %s", sh, tr_dtype_name((enum tr_dtype)t->dtype));
    return buf;
}

/* An operand's batch axes bat[0..nb), padded with leading ones to c's cb[0..ncb): 1 if
 * they are c's (the operand has one matrix per batch), 0 if all ones (one matrix shared
 * by every batch: stride 0), -1 otherwise (a broadcast one stride cannot express). */
static int batch_kind(const int64_t *bat, int nb, const int64_t *cb, int ncb) {
    int all_one = 1, same = 1;
    for (int i = 0; i < ncb; i++) {
        int64_t e = i - (ncb - nb) >= 0 ? bat[i - (ncb - nb)] : 1;
        if (e != 1) all_one = 0;
        if (e != cb[i]) same = 0;
    }
    if (all_one) return 0;
    return same ? 1 : -1;
}

int tr_cuda_gemm_shape(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c, int trans_a,
                       int trans_b, struct tr_cuda_gemm_shape *s, struct tr_error *err) {
    char d1[200], d2[200], d3[200];
    memset(s, 0, sizeof *s);
    if (a->ndim < 2 || b->ndim < 2 || c->ndim < 2)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: a %s, b %s and c %s need 2 dimensions at least",
                            desc(a, d1, sizeof d1), desc(b, d2, sizeof d2), desc(c, d3, sizeof d3));
    int64_t M = a->shape[a->ndim - (trans_a ? 1 : 2)], Ka = a->shape[a->ndim - (trans_a ? 2 : 1)];
    int64_t Kb = b->shape[b->ndim - (trans_b ? 1 : 2)], N = b->shape[b->ndim - (trans_b ? 2 : 1)];
    if (Ka != Kb || c->shape[c->ndim - 2] != M || c->shape[c->ndim - 1] != N)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: a %s (trans %d) and b %s (trans %d) do not give c %s",
                            desc(a, d1, sizeof d1), trans_a, desc(b, d2, sizeof d2), trans_b, desc(c, d3, sizeof d3));
    /* c's batch axes are the broadcast of a's and b's */
    int ncb = c->ndim - 2, nab = a->ndim - 2, nbb = b->ndim - 2;
    if (nab > ncb || nbb > ncb)
        return tr_error_set(err, TR_ERR_SHAPE, "matmul: c %s has fewer batch axes than a %s or b %s",
                            desc(c, d3, sizeof d3), desc(a, d1, sizeof d1), desc(b, d2, sizeof d2));
    for (int i = 0; i < ncb; i++) {
        int64_t ea = i - (ncb - nab) >= 0 ? a->shape[i - (ncb - nab)] : 1;
        int64_t eb = i - (ncb - nbb) >= 0 ? b->shape[i - (ncb - nbb)] : 1;
        int64_t e = c->shape[i];
        if ((ea != e && ea != 1) || (eb != e && eb != 1) || (ea == 1 && eb == 1 && e != 1))
            return tr_error_set(err, TR_ERR_SHAPE, "matmul: batch axes of a %s and b %s do not broadcast to c %s",
                                desc(a, d1, sizeof d1), desc(b, d2, sizeof d2), desc(c, d3, sizeof d3));
    }
    int64_t batch = 1;
    for (int i = 0; i < ncb; i++) batch *= c->shape[i];
    int ka = batch_kind(a->shape, nab, c->shape, ncb), kb = batch_kind(b->shape, nbb, c->shape, ncb);
    if (ka < 0 || kb < 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "matmul on cuda: the batch axes of a %s and b %s broadcast to c %s "
                            "in a way one strided batch cannot express (expand the operand first)",
                            desc(a, d1, sizeof d1), desc(b, d2, sizeof d2), desc(c, d3, sizeof d3));
    s->M = M, s->N = N, s->K = Ka, s->batch = batch;
    s->op1_trans = trans_b != 0;
    s->rows1 = trans_b ? Ka : N, s->cols1 = trans_b ? N : Ka, s->ld1 = s->rows1;
    s->op2_trans = trans_a != 0;
    s->rows2 = trans_a ? M : Ka, s->cols2 = trans_a ? Ka : M, s->ld2 = s->rows2;
    s->ldc = N;
    s->stride1 = kb ? N * Ka : 0;
    s->stride2 = ka ? M * Ka : 0;
    s->stridec = M * N;
    return TR_OK;
}

void tr_cuda_gemm_key_make(struct tr_cuda_gemm_key *key, const struct tr_cuda_gemm_shape *s, int dtype_ab,
                           int dtype_c, int dtype_bias, int epilogue, int compute, int align) {
    memset(key, 0, sizeof *key);
    key->dtype_ab = dtype_ab, key->dtype_c = dtype_c, key->dtype_bias = dtype_bias;
    key->epilogue = epilogue, key->compute = compute, key->align = align;
    key->op1_trans = s->op1_trans, key->op2_trans = s->op2_trans;
    key->M = s->M, key->N = s->N, key->K = s->K, key->batch = s->batch;
    key->ld1 = s->ld1, key->ld2 = s->ld2, key->ldc = s->ldc;
    key->stride1 = s->stride1, key->stride2 = s->stride2, key->stridec = s->stridec;
}

int tr_cuda_ptr_align(const void *p1, const void *p2, const void *p3, const void *p4) {
    uintptr_t bits = 256;
    const void *ps[4] = {p1, p2, p3, p4};
    for (int i = 0; i < 4; i++)
        if (ps[i]) bits |= (uintptr_t)ps[i];
    return (int)(bits & (~bits + 1)); /* lowest set bit */
}

/* ---- the LRU plan cache: a small array scanned linearly (a few hundred shapes at most
 * per model; a lookup is a memcmp per entry, far below a kernel launch) ---- */

struct entry {
    void *key;
    size_t key_size;
    uint64_t hash;
    void *plan;
    uint64_t tick;
};

struct tr_cuda_plan_cache {
    struct entry *e;
    int n, cap;
    uint64_t tick;
    void (*release)(void *);
    struct tr_cuda_plan_cache_stats st;
};

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

int tr_cuda_plan_cache_init(struct tr_cuda_plan_cache **out, int capacity, void (*release)(void *plan),
                            struct tr_error *err) {
    if (!out || capacity < 1 || !release)
        return tr_error_set(err, TR_ERR_INVALID, "plan cache: needs an out pointer, capacity >= 1 (got %d) and release",
                            capacity);
    struct tr_cuda_plan_cache *c = calloc(1, sizeof *c);
    if (c) c->e = calloc((size_t)capacity, sizeof *c->e);
    if (!c || !c->e) {
        free(c);
        return tr_error_set(err, TR_ERR_NOMEM, "plan cache: no memory for %d entries", capacity);
    }
    c->cap = capacity;
    c->release = release;
    *out = c;
    return TR_OK;
}

void tr_cuda_plan_cache_free(struct tr_cuda_plan_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        c->release(c->e[i].plan);
        free(c->e[i].key);
    }
    free(c->e);
    free(c);
}

void *tr_cuda_plan_cache_get(struct tr_cuda_plan_cache *c, const void *key, size_t key_size) {
    uint64_t h = fnv1a(key, key_size);
    for (int i = 0; i < c->n; i++) {
        struct entry *e = &c->e[i];
        if (e->hash == h && e->key_size == key_size && memcmp(e->key, key, key_size) == 0) {
            e->tick = ++c->tick;
            c->st.hits++;
            return e->plan;
        }
    }
    c->st.misses++;
    return NULL;
}

int tr_cuda_plan_cache_put(struct tr_cuda_plan_cache *c, const void *key, size_t key_size, void *plan,
                           struct tr_error *err) {
    void *k = malloc(key_size ? key_size : 1);
    if (!k) {
        c->release(plan);
        return tr_error_set(err, TR_ERR_NOMEM, "plan cache: no memory for a key of %zu bytes", key_size);
    }
    memcpy(k, key, key_size);
    struct entry *slot;
    if (c->n < c->cap) {
        slot = &c->e[c->n++];
    } else {
        slot = &c->e[0];
        for (int i = 1; i < c->n; i++)
            if (c->e[i].tick < slot->tick) slot = &c->e[i];
        c->release(slot->plan);
        free(slot->key);
        c->st.evictions++;
    }
    slot->key = k;
    slot->key_size = key_size;
    slot->hash = fnv1a(key, key_size);
    slot->plan = plan;
    slot->tick = ++c->tick;
    c->st.entries = c->n;
    return TR_OK;
}

void tr_cuda_plan_cache_get_stats(const struct tr_cuda_plan_cache *c, struct tr_cuda_plan_cache_stats *st) {
    if (!st) return;
    *st = c ? c->st : (struct tr_cuda_plan_cache_stats){0};
    if (c) st->entries = c->n;
}

/* ---- the epilogue fallback ---- */

static atomic_int force_fallback;
static atomic_uint_fast64_t routes_lt, routes_fallback;

enum tr_cuda_gemm_route tr_cuda_gemm_route(int n_algos, int has_epilogue) {
    if (has_epilogue && atomic_load(&force_fallback)) return TR_CUDA_GEMM_ROUTE_RETRY_PLAIN;
    if (n_algos > 0) return TR_CUDA_GEMM_ROUTE_LT;
    return has_epilogue ? TR_CUDA_GEMM_ROUTE_RETRY_PLAIN : TR_CUDA_GEMM_ROUTE_NONE;
}

void tr_cuda_gemm_route_note(int fallback) {
    atomic_fetch_add(fallback ? &routes_fallback : &routes_lt, 1);
}

void tr_cuda_gemm_route_counts(struct tr_cuda_gemm_route_counts *out) {
    out->lt = (uint64_t)atomic_load(&routes_lt);
    out->fallback = (uint64_t)atomic_load(&routes_fallback);
}

int tr_cuda_gemm_force_fallback(int on) { return atomic_exchange(&force_fallback, on != 0); }
