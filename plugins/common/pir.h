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
    int *outputs;                   /* node ids of the graph's outputs, in order */
    int n_outputs;
    void **owned;                   /* host memory freed with the pir (folded constants) */
    int n_owned, cap_owned;
};

int tr_pir_from_graph(const struct tr_host_api *host, tr_graph_t g, struct tr_pir *p, struct tr_error *err);
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
int64_t tr_pir_numel(const struct tr_pir_node *n);

#endif
