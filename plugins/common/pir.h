/* A backend-private, rewritable copy of a graph ("plugin IR"), shared by the tf and jax
 * backends (linked statically into each plugin; never part of the ABI).
 *
 * tr_pir_from_graph reads the host's graph through the host table's accessors only.
 * Nodes stay in a valid topological order: a rewrite that fuses a pattern overwrites the
 * pattern's LAST node (its root, after all of the pattern's inputs) with the fused op and
 * marks the others dead if nothing else uses them; tr_pir_compact then drops dead nodes
 * and renumbers. Backend-private ops (fused kernels, generated kernels) take op codes
 * from TR_PIR_OP_PRIVATE up; their meaning is the backend's. */
#ifndef TRIDENT_PIR_H
#define TRIDENT_PIR_H

#include <stdint.h>
#include "trident/backend.h"

#define TR_PIR_MAX_IN 8
#define TR_PIR_OP_PRIVATE 1000

struct tr_pir_node {
    int op;                         /* enum tr_op, or >= TR_PIR_OP_PRIVATE */
    int n_in;
    int in[TR_PIR_MAX_IN];
    struct tr_attrs attrs;
    int dtype;
    int ndim;
    int64_t shape[TR_MAX_DIMS];
    const void *data;               /* PARAM / CONST host data */
    const char *name;               /* the host graph's name (valid while the graph is) */
    int graph_id;                   /* the host graph's node id, -1 for nodes made by passes */
    int output_index;               /* its index among the graph's outputs, or -1 */
    int dead;
    int64_t aux;                    /* free for a backend's use (a fused kind, a kernel id) */
};

struct tr_pir {
    struct tr_pir_node *nodes;
    int n, cap;
    int *inputs;                    /* node ids of the graph's inputs, in feed order */
    int n_inputs;
    /* The roots: the graph's outputs (the first n_results, in order), then the value of
     * each update (outputs[n_results + u]). Passes keep every root alive and in place, so
     * an update's value is treated as an output without a case of its own. */
    int *outputs;
    int n_outputs;                  /* n_results + n_updates */
    int n_results;                  /* the graph's outputs: what execute() returns */
    int *update_param;              /* per update: the PARAM node it overwrites */
    int n_updates;
    void **owned;                   /* host memory freed with the pir (folded constants) */
    int n_owned, cap_owned;
};

int tr_pir_from_graph(const struct tr_host_api *host, tr_graph_t g, struct tr_pir *p, struct tr_error *err);
/* The same, for a backend's compile: its message prefixed with the backend's name. */
int tr_pir_read(const char *backend, const struct tr_host_api *host, tr_graph_t g, struct tr_pir *p,
                struct tr_error *err);
void tr_pir_free(struct tr_pir *p);
/* Append a node (inputs must be < p->n); returns its id or -1 (out of memory). */
int tr_pir_append(struct tr_pir *p, const struct tr_pir_node *n);
/* uses[i] = live consumers of node i (outputs count as one more). uses has p->n ints. */
void tr_pir_count_uses(const struct tr_pir *p, int *uses);
/* Mark every node that no output depends on as dead. Returns how many were marked. */
int tr_pir_mark_dead(struct tr_pir *p);
/* Drop dead nodes, renumber inputs, inputs[] and outputs[]. remap (may be NULL, p->n ints
 * before the call) gets old id -> new id or -1. */
int tr_pir_compact(struct tr_pir *p, int *remap, struct tr_error *err);
/* Keep host memory p (from malloc) until tr_pir_free. */
int tr_pir_own(struct tr_pir *p, void *mem, struct tr_error *err);
size_t tr_pir_nbytes(const struct tr_pir_node *n);

/* Whether update u's value may be computed straight into its PARAM's memory (donation):
 * the value is computed by a kernel (not a view or a leaf) and updates nothing else;
 * the param is not a root; and every node that reads the param (directly or through
 * RESHAPE views) comes before the value's node in the schedule (the IR's order), or is
 * the value's node itself reading it index for index, which reads_in_place(node, input)
 * says (tr_pir_reads_in_place for the graph ops). Otherwise the value gets a buffer of
 * its own and is copied into the param at the end of the step. */
int tr_pir_donatable(const struct tr_pir *p, int u, int (*reads_in_place)(const struct tr_pir_node *n, int input));
/* For graph ops: ADAMW_STEP's param, UPDATE_SLICE's x, and the same-shape operands of
 * elementwise ops. */
int tr_pir_reads_in_place(const struct tr_pir_node *n, int input);
/* Node ids of update u's param and value. */
static inline int tr_pir_update_value(const struct tr_pir *p, int u) { return p->outputs[p->n_results + u]; }
int64_t tr_pir_numel(const struct tr_pir_node *n);
/* *buf (a malloc'd array of *cap elements of elem bytes) grown, doubling from 16, to hold
 * at least need; 0, or -1 out of memory (*buf and *cap left as they were). */
int tr_pir_grow(void **buf, int *cap, int need, size_t elem);
/* 1 if the two nodes have the same rank and extents (their dtypes aside). */
int tr_pir_same_shape(const struct tr_pir_node *a, const struct tr_pir_node *b);

#endif
