/* The weights' guard for backends that share this process (internal to libtrident).
 * With [run] isolate = off every backend runs on the same host copy of the weights, so
 * one that writes into a weight (a bug: a backend reads PARAM and CONST memory and never
 * writes it, docs/writing-a-backend.md §5) changes the numbers of every backend after it,
 * and the disagreement falls on whichever ran next. The guard holds a checksum of each
 * PARAM and CONST the graph does not update, and after a backend's command says which
 * one changed. */
#ifndef TRIDENT_BENCH_GUARD_H
#define TRIDENT_BENCH_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include "trident/graph.h"
#include "trident/status.h"

struct tr_bench_guard {
    int n;
    int *ids;           /* the guarded nodes */
    uint64_t *sums;     /* their checksums */
    uint64_t bytes;     /* their size in all */
};

/* Checksums of g's non-updated PARAMs and CONSTs as they are now. */
int tr_bench_guard_init(struct tr_bench_guard *gd, const struct tr_graph *g, struct tr_error *err);
/* -1 when every guarded tensor is as it was; else the node id of the first that changed,
 * every checksum re-taken (the changed values are the ones the next backend sees). */
int tr_bench_guard_check(struct tr_bench_guard *gd, const struct tr_graph *g);
void tr_bench_guard_free(struct tr_bench_guard *gd);

/* The guard's checksum of n bytes: a difference in any bit shows (not a defence against
 * anyone), at memory speed. */
uint64_t tr_bench_checksum(const void *p, size_t n);

#endif
