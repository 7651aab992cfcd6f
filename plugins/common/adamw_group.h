/* AdamW's update of one parameter, as core's tr_adamw builds it (core/src/optim.c):
 *   m2 = ADD(SCALE(m, β1, 0), SCALE(g, 1−β1, 0))
 *   v2 = ADD(SCALE(v, β2, 0), SCALE(MUL(g, g), 1−β2, 0))
 *   p2 = ADAMW_STEP(p, m2, v2, lr, t)                        attrs β1, β2, eps, wd
 * g is the gradient, or a CAST of it to f32 that only the group reads. A backend that
 * runs the group as one call of tr_k_adamw_update (PyTorch's AdamW(fused=True)) reads p,
 * m, v and the gradient once and writes p2, m2 and v2 once, where the eight ops make
 * about 21 passes over the parameter's size. The grouping is taken only where nothing
 * outside it can tell: the SCALEs, the MUL and the CAST are read by the group alone and
 * are not outputs; m2 and v2 are read by the step alone (they may be outputs: updates);
 * the gradient is f32 or p's dtype; m, v, m2 and v2 are f32 with p's shape. */
#ifndef TRIDENT_PLUGIN_ADAMW_GROUP_H
#define TRIDENT_PLUGIN_ADAMW_GROUP_H

#include "pir.h"

#define TR_ADAMW_INNER 6 /* the four SCALEs, the MUL and the CAST (-1 when none) */

struct tr_adamw_group {
    int step, m2, v2;                /* the nodes the call writes: p2 (the step), m2 and v2 */
    int param, m, v, grad, lr, t;    /* its operands */
    int inner[TR_ADAMW_INNER];       /* computed by no one */
};

/* 1 with *g filled when the live node id is the ADAMW_STEP of such a group, else 0.
 * uses: tr_pir_count_uses's counts. */
int tr_adamw_group_at(const struct tr_pir *p, int id, const int *uses, struct tr_adamw_group *g);

/* Every node of group g: its inner nodes (those >= 0), m2, v2 and the step, in that
 * order, into ids (TR_ADAMW_INNER + 3 ints); returns how many. */
int tr_adamw_group_nodes(const struct tr_adamw_group *g, int *ids);

/* For a backend that runs the group where its first value is (tf, jax): the lowest of
 * step, m2 and v2, or -1 when an operand does not come before it. */
int tr_adamw_group_first(const struct tr_adamw_group *g);
/* Rewrites g in place around its first value (tr_adamw_group_first, >= 0): that node
 * becomes op_call(param, m, v, grad, lr, t) with floats[0..3] = β1, β2, eps, wd and
 * ints[0] = which value it is (0 param', 1 m', 2 v'); the other two become op_out(first)
 * with their own ints[0]; the inner nodes are marked dead. */
void tr_adamw_group_rewrite(struct tr_pir *p, const struct tr_adamw_group *g, int op_call, int op_out);

#endif
