/* Small builders shared by the files that append nodes to a graph (graph.c's public
 * builders, autodiff.c's gradient rules, optim.c's update steps). Internal to core. */
#ifndef TRIDENT_GRAPH_NODES_H
#define TRIDENT_GRAPH_NODES_H

#include <string.h>
#include "trident/graph.h"

static inline struct tr_attrs attrs0(void) {
    struct tr_attrs a;
    memset(&a, 0, sizeof a);
    return a;
}

static inline int node1(struct tr_graph *g, enum tr_op op, int x, const struct tr_attrs *a) {
    return tr_graph_add_node(g, op, 1, &x, a);
}

static inline int node2(struct tr_graph *g, enum tr_op op, int x, int y, const struct tr_attrs *a) {
    int in[2] = {x, y};
    return tr_graph_add_node(g, op, 2, in, a);
}

/* 1 if nodes a and b have the same shape (dtypes aside). */
static inline int same_shape(const struct tr_graph *g, int a, int b) {
    return tr_shape_equal(tr_node_ndim(g, a), tr_node_shape(g, a), tr_node_ndim(g, b), tr_node_shape(g, b));
}

#endif
