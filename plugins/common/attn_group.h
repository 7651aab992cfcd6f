/* The attention-gradient nodes that belong together: the ATTENTION_GRAD nodes of one
 * attention (2 or 3: dq, dk, dv) or the ATTENTION_REL_GRAD nodes of one ATTENTION_REL (2 to
 * 5: dq, dk, dv, drel_h, drel_w), each with the same operands and attributes and its own
 * `which`. A backend that runs a group as one call of the fused backward
 * (tr_k_attention_backward, tr_k_attention_rel_backward) computes the statistics and
 * scores once instead of once per gradient; tf's remapper and jax's fusion both group
 * this way. */
#ifndef TRIDENT_PLUGIN_ATTN_GROUP_H
#define TRIDENT_PLUGIN_ATTN_GROUP_H

#include "pir.h"

#define TR_ATTN_GRADS 5 /* the most gradients one group has (ATTENTION_REL's) */

/* Which gradient n computes (0 dq, 1 dk, 2 dv, 3 drel_h, 4 drel_w), or -1 if n cannot be
 * grouped: a live ATTENTION_GRAD (4 to 7 inputs) or ATTENTION_REL_GRAD (6) of a float
 * dtype. */
int tr_attn_grad_which(const struct tr_pir_node *n);

/* The group led by node lead (the lowest id; the others come after it): grad[w] = the
 * node computing gradient w, or -1. Nodes with taken[id] >= 0 (taken may be NULL) are in
 * a group already. Returns how many were found, lead included (0: lead is not groupable). */
int tr_attn_grad_group(const struct tr_pir *p, int lead, const int *taken, int grad[TR_ATTN_GRADS]);

/* The ATTENTION_LSE node (autodiff's, for the backward) of the live ATTENTION node attn of
 * a float dtype: the first live one after it with the same operands and attrs, or -1. A
 * backend computes the two in one pass (tr_k_attention_lse), as PyTorch's SDPA returns
 * its logsumexp beside the output for the backward. */
int tr_attn_lse_partner(const struct tr_pir *p, int attn);

#endif
