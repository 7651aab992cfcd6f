/* A data-parallel run's part of the harness (internal to libtrident; docs/parallel.md).
 *
 * Every rank runs the same backends in the same order on its share of the global batch
 * (the graph is built for batch / ranks: tr_task_graph_build), and the graph's ALLREDUCE
 * nodes average the gradients through the communicator set here for the kernels. What the
 * harness adds: each rank's share of one global batch, made identically everywhere; after
 * each step, the ranks' statuses exchanged, so that a rank whose step failed is every
 * rank's failed row rather than a hang; every check_every steps, a hash of every state the
 * step writes (trained parameters, optimizer state, masters) compared across the ranks,
 * naming the first that differs; the time spent in collectives. */
#ifndef TRIDENT_BENCH_DP_H
#define TRIDENT_BENCH_DP_H

#include <stdint.h>
#include "trident/bench.h"

struct tr_dp {
    const struct tr_comm *comm; /* NULL: one process */
    int on;                     /* more than one rank */
    int check_weights;          /* check_every > 0 (a device's states read back by sync first) */
    int64_t check_every;
    const struct tr_graph *g;
    int n_upd;
    uint64_t *mine, *all;       /* per update: this rank's hash; every rank's (size x n_upd) */
    int32_t *status;            /* every rank's status after a step (size) */
    int stop;                   /* a rank was interrupted (Ctrl-C): every rank stops after this step */
};

/* The run's communicator checked against cfg (cfg->ranks must be its size) and handed to
 * the kernels. comm NULL with cfg->ranks 1: off. */
int tr_dp_begin(struct tr_dp *dp, const struct tr_config *cfg, const struct tr_comm *comm, const struct tr_graph *g,
                struct tr_error *err);
/* Before its first step every rank meets here once, whether its setup went well (rc
 * TR_OK, g the rank's graph with its weights bound) or not (rc its error, g NULL): the
 * ranks' statuses, and what must be alike on every rank (steps, warm-up, seed, batch,
 * check_every, the [model], [train] and [generate] keys, the graph, the weights),
 * exchanged. A rank whose setup failed (a missing file on one host, an output rank 0
 * cannot write) then stops every rank at once instead of leaving them to wait out
 * collective_timeout at the first collective; this rank's own failure is said on stderr
 * when it is not rank 0 (rank 0 prints the run's error). TR_OK when every rank is ready
 * and alike; rc when this rank failed; TR_ERR_COMM naming the rank that failed, or
 * TR_ERR_INVALID naming what differs, otherwise. */
int tr_dp_gate(const struct tr_comm *c, const struct tr_config *cfg, const struct tr_graph *g, int rc,
               struct tr_error *err);

/* The kernels' communicator unset, memory freed. */
void tr_dp_end(struct tr_dp *dp);

/* The model's inputs in[0..n_model) of this rank: the global batch made from [run] seed
 * (or read from [run] inputs) as one process would, and this rank's rows of each input
 * whose first axis is the batch; the others (0-d, or not batched) as they are. */
int tr_dp_shard_inputs(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                       const struct tr_task_graph *tg, struct tr_tensor *in, struct tr_error *err);

/* This rank's share of the global loss (train.h, dp_share): its loss terms over every
 * rank's. A cross-entropy that ignores a label (padding) counts this rank's labels that are
 * not ignored, in the model's inputs in[]; any other loss counts alike everywhere (1/ranks). */
int tr_dp_loss_share(struct tr_dp *dp, const struct tr_task_graph *tg, const struct tr_tensor *in, float *share,
                     struct tr_error *err);

/* What this rank is doing, named if a collective times out ("torch, step 5"). */
void tr_dp_phase(struct tr_dp *dp, const char *label, const char *what, int64_t step);

/* After a step (rc its status on this rank): every rank's status, and whether any rank
 * was interrupted (dp->stop, the same on every rank after the exchange). TR_OK when all went
 * well; this rank's rc when it failed (it has said why on stderr if it is not rank 0);
 * TR_ERR_COMM naming the rank that failed otherwise. */
int tr_dp_step_status(struct tr_dp *dp, int rc, const char *label, int64_t step, struct tr_error *err);

/* Every state the step writes, hashed and compared across the ranks: TR_ERR_NUMERIC naming
 * the first that differs and the ranks' hashes. */
int tr_dp_check_weights(struct tr_dp *dp, int64_t step, struct tr_error *err);

/* Seconds spent in collectives so far (0 without a communicator). */
double tr_dp_seconds(const struct tr_dp *dp);

#endif
