/* trident — reverse-mode automatic differentiation as a graph transform.
 *
 * tr_grad appends to g the nodes that compute d loss / d wrt[i] for a scalar (0-d, or
 * one-element) loss node, and returns their ids. It walks the nodes that lie on a path
 * from some wrt to the loss, in reverse program order, applying each op's vector–Jacobian
 * rule (ops.h's *_GRAD ops, or compositions of plain ops), summing contributions where a
 * value has several consumers, and reducing broadcast gradients back to the operand's
 * shape. Nodes that depend on no wrt (frozen weights, inputs, constants) get no gradient
 * and cost nothing; forward values are reused, not recomputed, except inside the fused
 * rules that say so (attention). A wrt the loss does not depend on gets a gradient of
 * zeros (a CONST), so callers need no special case. The seed d loss / d loss is 1 in the
 * loss's dtype.
 *
 * Gradients have the dtype and shape of their wrt node. Rules exist for every op of
 * ops.h that can be differentiated; INPUT/PARAM/CONST are leaves; an op without a rule on
 * a path to the loss is an error naming the node and the op.
 */
#ifndef TRIDENT_AUTODIFF_H
#define TRIDENT_AUTODIFF_H

#include "trident/graph.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* grads[i] receives the node id of d loss / d wrt[i]. Nodes are named
 * "grad.<wrt name>" for the results. Returns a status; a refusal (bad arguments, an op
 * without a rule, a wrt reaching the loss only through labels, ids or a mask) adds
 * nothing to g, which stays usable. */
int tr_grad(struct tr_graph *g, int loss, int n_wrt, const int *wrt, int *grads, struct tr_error *err);

/* Told of each gradient as soon as it is final (no later node of the walk adds to it), in
 * that order: the last layer's first. ready may append nodes to g, which then stand
 * amid the rest of the backward pass in program order (data parallelism starts a
 * bucket's all-reduce there, so that it overlaps the layers still to come); a status
 * other than TR_OK stops tr_grad_hooked, which returns it. */
struct tr_grad_hook {
    int (*ready)(void *user, struct tr_graph *g, int i, int grad, struct tr_error *err);
    void *user;
};
/* tr_grad, telling hook (NULL: none) of each grads[i] as it becomes final. */
int tr_grad_hooked(struct tr_graph *g, int loss, int n_wrt, const int *wrt, int *grads, const struct tr_grad_hook *hook,
                   struct tr_error *err);

/* Losses: thin builders over the CROSS_ENTROPY and MSE ops (ops.h). Labels equal to
 * ignore_index (PyTorch's default is -100) are left out of the loss and of its mean;
 * TR_IGNORE_NONE: every label counts. */
#define TR_IGNORE_NONE INT64_MIN
int tr_cross_entropy(struct tr_graph *g, int logits, int labels, int64_t ignore_index);
int tr_mse(struct tr_graph *g, int pred, int target);

#ifdef __cplusplus
}
#endif
#endif
