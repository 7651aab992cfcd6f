/* The ATTENTION_GRAD nodes that belong together: the 2 or 3 of one attention (the same
 * operands, scale and flags, each a different `which`: dq, dk, dv). A backend that runs
 * them as one call of the fused attention backward computes the statistics and scores
 * once instead of once per gradient; tf's remapper and jax's fusion both group this way. */
#ifndef TRIDENT_PLUGIN_ATTN_GROUP_H
#define TRIDENT_PLUGIN_ATTN_GROUP_H

#include "pir.h"

/* 1 if n can be grouped: a live ATTENTION_GRAD, 4 or 5 inputs, `which` 0..2, a float dtype. */
int tr_attn_grad_groupable(const struct tr_pir_node *n);

/* The group led by node lead (the lowest id; the others come after it): grad[w] = the
 * node computing gradient w, or -1. Nodes with taken[id] >= 0 (taken may be NULL) are in
 * a group already. Returns how many were found, lead included (0: lead is not groupable). */
int tr_attn_grad_group(const struct tr_pir *p, int lead, const int *taken, int grad[3]);

#endif
