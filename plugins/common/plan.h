/* Static memory planning shared by the tf and jax backends: buffers with known sizes and
 * live ranges (in schedule steps) get offsets in one arena, so that nothing is allocated
 * per step. Two buffers whose live ranges intersect never overlap in the arena; that is
 * what tr_plan_verify checks (and the tests run it on every compiled graph). */
#ifndef TRIDENT_PLAN_H
#define TRIDENT_PLAN_H

#include <stdint.h>
#include "trident/status.h"

struct tr_plan_buf {
    int64_t size;                   /* bytes (0: takes no space) */
    int first;                      /* step that writes it */
    int last;                       /* last step that reads it (>= first) */
    int64_t offset;                 /* set by tr_plan_assign */
};

/* Assign offsets (aligned to align bytes, a power of two) minimising the arena greedily
 * (largest first, lowest offset that fits beside the buffers alive at the same time).
 * *arena_bytes gets the total. */
int tr_plan_assign(struct tr_plan_buf *bufs, int n, int64_t align, int64_t *arena_bytes, struct tr_error *err);
/* TR_ERR_INTERNAL naming the two buffers when two live-overlapping buffers share bytes,
 * or one lies outside [0, arena_bytes). */
int tr_plan_verify(const struct tr_plan_buf *bufs, int n, int64_t arena_bytes, struct tr_error *err);

#endif
