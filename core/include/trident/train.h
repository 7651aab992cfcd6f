/* trident — the fit task's training step, built as one graph.
 *
 * tr_train_build takes a forward graph with a 0-d loss and the PARAMs to train, and
 * appends the backward pass (tr_grad) and the optimizer (tr_adamw or tr_sgd), then makes
 * the step a state machine: every trained param and every optimizer state is an update
 * of the graph (tr_graph_add_update), so each execution of the graph is one training
 * step and the next one starts from its result. Frozen params get no gradient, no
 * state and no update: they are read, never written.
 *
 * Inputs appended after the model's: "lr" and "step", 0-d f32, fed per step (t counts
 * from 1), so a schedule needs no recompile. Output: "loss" (the loss before the update).
 *
 * Low-precision params (bf16, f16) train through f32 master copies when master_weights
 * is on: PARAM "<name>.master" f32 carries the value, the optimizer updates it from the
 * gradient cast to f32, and the param is its cast back; tr_train_init_masters fills the
 * masters from the params once the weights exist.
 *
 * [train] keys (tr_train_config_resolve): optimizer (adamw | adam | sgd), learning_rate,
 * beta1, beta2, eps, weight_decay, momentum, master_weights. adam is Keras' Adam: AdamW
 * with eps 1e-7 and weight_decay 0 unless the INI gives them (resolved to "adamw").
 */
#ifndef TRIDENT_TRAIN_H
#define TRIDENT_TRAIN_H

#include "trident/config.h"
#include "trident/graph.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_train_config {
    char optimizer[64];         /* "adamw" or "sgd" once resolved */
    double learning_rate;       /* 1e-3 */
    double beta1, beta2, eps;   /* AdamW: torch.optim.AdamW's 0.9, 0.999, 1e-8 */
    double weight_decay;        /* 0.01 (AdamW: decoupled; SGD: added to the gradient) */
    double momentum;            /* SGD: 0.9 */
    int master_weights;         /* 1: f32 masters for bf16/f16 params */
    /* Data parallelism (not [train] keys: the run's, [run] parallel): dp_ranks > 1 sums
     * every gradient, weighted by the rank's share, over that many processes before the
     * optimizer, in buckets (gradients in the order the backward pass finishes them, a
     * bucket closed at the one that brings it to bucket_bytes or more, as PyTorch DDP's)
     * whose all-reduce starts as soon as the bucket is closed, amid the rest of the
     * backward pass (ALLREDUCE_START), and is waited for before the optimizer
     * (ALLREDUCE_WAIT); the loss output is the ranks' weighted sum. 0: one process, the
     * step as it was (1: a data-parallel run of one rank, every sum over that rank). */
    int64_t dp_ranks;
    double bucket_bytes;
    /* optimizer = adam: torch.optim.Adam's weight_decay, an L2 term added to the gradient
     * (g + l2·p) before the step, which then has no decoupled decay */
    double l2;
};

void tr_train_config_defaults(struct tr_train_config *c);
/* The [train] keys, each with its range and meaning (for `trident list MODEL`); *n of them. */
struct tr_model_key;
const struct tr_model_key *tr_train_keys(int *n);
/* Defaults, then the [train] section of cfg; errors name FILE:LINE, key and value. */
int tr_train_config_resolve(const struct tr_config *cfg, struct tr_train_config *c, struct tr_error *err);

struct tr_train_step {
    int loss;                   /* the loss node, graph output 0 "loss" */
    int lr, step;               /* the two INPUT nodes added */
    int n_trained;
    int *trained;               /* the trained PARAMs (as given) */
    int n_masters;
    int *master, *master_of;    /* f32 master PARAM, and the param it shadows */
    int n_updated;              /* params the graph updates: trained + states + masters */
    int model_loss;             /* the model's own loss node (loss is its ranks' sum under dp) */
    /* data parallel: the INPUT "dp_share" (0-d f32), this rank's share of the global loss
     * (its loss terms over every rank's: 1/ranks when the shards count alike), fed by the
     * harness; each gradient and the loss are scaled by it before they are summed over the
     * ranks. -1 in one process. */
    int dp_share;
};

/* Appends the step to g (see above). params: the n PARAMs to train, in any order. */
int tr_train_build(struct tr_graph *g, int loss, int n, const int *params, const struct tr_train_config *c,
                   struct tr_train_step *ts, struct tr_error *err);
void tr_train_step_free(struct tr_train_step *ts);

/* Copy each master's param (converted to f32) into the master's bound memory. */
int tr_train_init_masters(const struct tr_graph *g, const struct tr_train_step *ts, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
