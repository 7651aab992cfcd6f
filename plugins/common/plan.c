/* Static memory planning (plan.h): "greedy by size", as TFLite's arena planner does it.
 * Placing the largest buffers first leaves the small ones to fill the gaps between
 * them; each buffer goes to the lowest aligned offset that is free during its whole
 * live range. Quadratic in the number of buffers, which is a few thousand at most. */
#include <stdlib.h>
#include "plan.h"

struct placed {
    int64_t off, end;
};

struct order {
    int64_t size;
    int first, idx;
};

static int by_size_desc(const void *a, const void *b) {
    const struct order *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1; /* deterministic ties */
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int by_offset(const void *a, const void *b) {
    const struct placed *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) & ~(a - 1); }

int tr_plan_assign(struct tr_plan_buf *bufs, int n, int64_t align, int64_t *arena_bytes, struct tr_error *err) {
    if (arena_bytes) *arena_bytes = 0;
    if (n < 0 || (n > 0 && !bufs)) return tr_error_set(err, TR_ERR_INVALID, "plan: %d buffers, bufs %p", n, (void *)bufs);
    if (align <= 0 || (align & (align - 1)))
        return tr_error_set(err, TR_ERR_INVALID, "plan: alignment %lld is not a power of two", (long long)align);
    for (int i = 0; i < n; i++) {
        if (bufs[i].size < 0 || bufs[i].first < 0 || bufs[i].last < bufs[i].first)
            return tr_error_set(err, TR_ERR_INVALID,
                                "plan: buffer %d has size %lld and live range [%d,%d] (expected size >= 0, 0 <= first <= last)",
                                i, (long long)bufs[i].size, bufs[i].first, bufs[i].last);
        bufs[i].offset = 0;
    }
    if (n == 0) return TR_OK;
    struct order *order = malloc((size_t)n * sizeof *order);
    char *done = calloc((size_t)n, 1);
    struct placed *conf = malloc((size_t)n * sizeof *conf);
    if (!order || !done || !conf) {
        free(order);
        free(done);
        free(conf);
        return tr_error_set(err, TR_ERR_NOMEM, "plan: out of memory planning %d buffers", n);
    }
    for (int i = 0; i < n; i++) order[i] = (struct order){bufs[i].size, bufs[i].first, i};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);

    int64_t total = 0;
    for (int oi = 0; oi < n; oi++) {
        int bi = order[oi].idx;
        struct tr_plan_buf *b = &bufs[bi];
        done[bi] = 1;
        if (b->size == 0) continue;
        /* the placed buffers alive at some step of b's range, by offset */
        int nc = 0;
        for (int j = 0; j < n; j++) {
            const struct tr_plan_buf *c = &bufs[j];
            if (!done[j] || j == bi || c->size == 0) continue;
            if (c->first <= b->last && b->first <= c->last) conf[nc++] = (struct placed){c->offset, c->offset + c->size};
        }
        qsort(conf, (size_t)nc, sizeof *conf, by_offset);
        int64_t off = 0;
        for (int j = 0; j < nc; j++) {
            if (off + b->size <= conf[j].off) break; /* fits in the gap before conf[j] */
            if (conf[j].end > off) off = align_up(conf[j].end, align);
        }
        b->offset = off;
        if (off + b->size > total) total = off + b->size;
    }
    free(order);
    free(done);
    free(conf);
    if (arena_bytes) *arena_bytes = total;
    return TR_OK;
}

int tr_plan_verify(const struct tr_plan_buf *bufs, int n, int64_t arena_bytes, struct tr_error *err) {
    if (n < 0 || (n > 0 && !bufs)) return tr_error_set(err, TR_ERR_INVALID, "plan: %d buffers, bufs %p", n, (void *)bufs);
    for (int i = 0; i < n; i++) {
        const struct tr_plan_buf *a = &bufs[i];
        if (a->size == 0) continue;
        if (a->offset < 0 || a->size < 0 || a->offset + a->size > arena_bytes)
            return tr_error_set(err, TR_ERR_INTERNAL, "plan: buffer %d (%lld bytes at offset %lld) lies outside the arena [0,%lld)",
                                i, (long long)a->size, (long long)a->offset, (long long)arena_bytes);
    }
    for (int i = 0; i < n; i++) {
        const struct tr_plan_buf *a = &bufs[i];
        if (a->size == 0) continue;
        for (int j = i + 1; j < n; j++) {
            const struct tr_plan_buf *b = &bufs[j];
            if (b->size == 0) continue;
            int in_time = a->first <= b->last && b->first <= a->last;
            int in_space = a->offset < b->offset + b->size && b->offset < a->offset + a->size;
            if (in_time && in_space)
                return tr_error_set(err, TR_ERR_INTERNAL,
                                    "plan: buffers %d (steps %d..%d, bytes [%lld,%lld)) and %d (steps %d..%d, bytes [%lld,%lld)) "
                                    "are alive at the same step and share arena bytes",
                                    i, a->first, a->last, (long long)a->offset, (long long)(a->offset + a->size), j, b->first,
                                    b->last, (long long)b->offset, (long long)(b->offset + b->size));
        }
    }
    return TR_OK;
}
