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
#include "trident/kernels.h"

#define TR_ATTN_GRADS 5 /* the most gradients one group has (ATTENTION_REL's) */

/* Which gradient n computes (0 dq, 1 dk, 2 dv, 3 drel_h, 4 drel_w), or -1 if n cannot be
 * grouped: a live ATTENTION_GRAD (4 to 7 inputs) or ATTENTION_REL_GRAD (6 or 8) of a float
 * dtype. */
int tr_attn_grad_which(const struct tr_pir_node *n);

/* The group led by node lead (the lowest id; the others come after it): grad[w] = the
 * node computing gradient w, or -1. Nodes with taken[id] >= 0 (taken may be NULL) are in
 * a group already. Returns how many were found, lead included (0: lead is not groupable). */
int tr_attn_grad_group(const struct tr_pir *p, int lead, const int *taken, int grad[TR_ATTN_GRADS]);

/* The ATTENTION_LSE node (autodiff's, for the backward) of the live ATTENTION node attn of
 * a float dtype, or the ATTENTION_REL_LSE of an ATTENTION_REL: the first live one after it
 * with the same operands and attrs, or -1. A backend computes the two in one pass
 * (tr_k_attention_lse, tr_k_attention_rel_lse), as PyTorch's SDPA returns its logsumexp
 * beside the output for the backward. */
int tr_attn_lse_partner(const struct tr_pir *p, int attn);

/* A forward and its lse node in one pass through the shared kernels, for every backend:
 * rel (ATTENTION_REL: in = q, k, v, rel_h, rel_w; scale attrs->floats[0]) or not
 * (ATTENTION: n_in 3 or 4, the mask 4th; scale, causal and window the node's attrs); out
 * the forward's tensor, lse its partner's (tr_attn_lse_partner). Bound into call, or,
 * with call NULL, run now. */
int tr_attn_forward_lse(struct tr_kernels *k, int rel, int n_in, const struct tr_tensor *in,
                        const struct tr_attrs *attrs, const struct tr_tensor *out, const struct tr_tensor *lse,
                        struct tr_kernel_call *call, struct tr_error *err);

/* One group's fused backward through the shared kernels, for every backend: rel (an
 * ATTENTION_REL_GRAD group: in = q, k, v, rel_h, rel_w, dy, and with n_in 8 the saved y
 * and lse) or not (ATTENTION_GRAD's n_in
 * operands: q, k, v, dy, [mask], [y, lse]: the mask with 5 or 7, the saved statistics
 * with 6 or 7); scale, causal and window the nodes' attrs; grads[w] gradient w's tensor
 * (NULL: not asked for). Bound into call, or, with call NULL, run now. */
int tr_attn_backward(struct tr_kernels *k, int rel, int n_in, const struct tr_tensor *in, float scale, int causal,
                     int window, const struct tr_tensor *const grads[TR_ATTN_GRADS], struct tr_kernel_call *call,
                     struct tr_error *err);

/* The same for a group led by the graph's own node d (an ATTENTION_GRAD or
 * ATTENTION_REL_GRAD, as tr_attn_grad_group takes it): the form and attrs read from d. */
int tr_attn_backward_of(struct tr_kernels *k, const struct tr_pir_node *d, const struct tr_tensor *in,
                        const struct tr_tensor *const grads[TR_ATTN_GRADS], struct tr_kernel_call *call,
                        struct tr_error *err);

#endif
