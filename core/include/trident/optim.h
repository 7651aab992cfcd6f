/* trident — optimizers as graph ops.
 *
 * An optimizer step is built into the training graph from the parameters and their
 * gradients (autodiff.h). Its state (AdamW's moments, SGD's velocity) is made of PARAM
 * nodes named "<param>.adamw_m" etc., initialised to zeros, never differentiated. The
 * builders return, for each parameter, the node of its new value and of each new state
 * value; how the new values replace the old ones between steps (in place) is the
 * runner's and the backends' business. The learning rate and the step number are 0-d
 * f32 INPUT nodes, so a schedule needs no recompile. */
#ifndef TRIDENT_OPTIM_H
#define TRIDENT_OPTIM_H

#include "trident/graph.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_adamw {
    float beta1, beta2, eps, weight_decay;     /* torch.optim.AdamW's defaults: 0.9, 0.999, 1e-8, 0.01 */
};

/* One update: the new value of each of the n params, and of their m and v states
 * (arrays of n, filled by the call). lr and step are the 0-d f32 inputs to use (made
 * by the caller once with tr_input). out[i].state[] receives the state PARAMs. */
struct tr_optim_update {
    int param, new_param;
    int state[2], new_state[2];     /* AdamW: m, v; SGD: velocity, -1 */
};

int tr_adamw(struct tr_graph *g, const struct tr_adamw *hp, int n, const int *params, const int *grads, int lr,
             int step, struct tr_optim_update *out, struct tr_error *err);

/* SGD with momentum (torch.optim.SGD, dampening 0, not Nesterov): v' = μ·v + (g + wd·p),
 * p' = p − lr·v'; plain ops (a backend fuses them). */
int tr_sgd(struct tr_graph *g, float momentum, float weight_decay, int n, const int *params, const int *grads, int lr,
           struct tr_optim_update *out, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
