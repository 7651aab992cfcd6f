/* A data-parallel run's part of the harness (bench_dp.h). */
#define DP_STOP_BIT 0x40000000
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_dp.h"
#include "bench_guard.h"
#include "bench_io.h"
#include "bench_progress.h"
#include "bench_util.h"
#include "trident/kernels.h"

int tr_dp_begin(struct tr_dp *dp, const struct tr_config *cfg, const struct tr_comm *comm, const struct tr_graph *g,
                struct tr_error *err) {
    memset(dp, 0, sizeof *dp);
    const int have = comm ? comm->size : 1;
    if (cfg->ranks != have)
        return tr_error_set(err, TR_ERR_INVALID, "data parallel: the config is for %d ranks and the communicator has "
                            "%d (the program sets [run]'s ranks from MPI)", cfg->ranks, have);
    if (!comm) return TR_OK;
    dp->comm = comm;
    dp->on = 1;
    dp->g = g;
    dp->check_every = cfg->check_every;
    dp->check_weights = cfg->check_every > 0;
    dp->n_upd = tr_graph_n_updates(g);
    dp->mine = calloc((size_t)dp->n_upd + 1, sizeof *dp->mine);
    dp->all = calloc((size_t)(dp->n_upd + 1) * (size_t)comm->size, sizeof *dp->all);
    dp->status = calloc((size_t)comm->size, sizeof *dp->status);
    if (!dp->mine || !dp->all || !dp->status) {
        tr_dp_end(dp);
        return tr_error_set(err, TR_ERR_NOMEM, "data parallel: out of memory");
    }
    tr_kernels_set_comm(comm);
    return TR_OK;
}

/* What must be alike on every rank of one run. */
struct dp_gate {
    int32_t status, pad;
    int64_t steps, warmup, seed, batch, check_every;
    uint64_t keys[4], graph, weights; /* keys: [model], [train], [generate], [run] backends */
};

static const char *const gate_sections[4] = {"model", "train", "generate", "backends"};

static uint64_t mix(uint64_t h, const void *p, size_t n) { return (h ^ tr_bench_checksum(p, n)) * 0x100000001b3ull; }

static void gate_fill(struct dp_gate *m, const struct tr_config *cfg, const struct tr_graph *g) {
    m->steps = cfg->steps, m->warmup = cfg->warmup, m->seed = (int64_t)cfg->seed, m->batch = cfg->batch;
    m->check_every = cfg->check_every;
    for (int i = 0; i < cfg->n_kv; i++) { /* a backend's own section may differ by host (its threads) */
        const struct tr_config_kv *kv = &cfg->kv[i];
        for (int k = 0; k < 3; k++)
            if (!strcmp(kv->section, gate_sections[k])) {
                m->keys[k] = mix(m->keys[k], kv->key, strlen(kv->key) + 1);
                m->keys[k] = mix(m->keys[k], kv->value, strlen(kv->value) + 1);
            }
    }
    for (int b = 0; b < cfg->n_backends; b++) { /* the rows, in order: each rank runs its list's */
        m->keys[3] = mix(m->keys[3], cfg->backends[b].name, strlen(cfg->backends[b].name) + 1);
        m->keys[3] = mix(m->keys[3], cfg->backends[b].mode, strlen(cfg->backends[b].mode) + 1);
    }
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        const int rec[3] = {tr_node_op(g, id), tr_node_dtype(g, id), tr_node_ndim(g, id)};
        const char *name = tr_node_name(g, id);
        m->graph = mix(m->graph, rec, sizeof rec);
        m->graph = mix(m->graph, tr_node_shape(g, id), sizeof(int64_t) * (size_t)rec[2]);
        const struct tr_attrs *at = tr_node_attrs(g, id); /* field by field: no padding bytes */
        m->graph = mix(m->graph, at->ints, sizeof at->ints);
        m->graph = mix(m->graph, at->floats, sizeof at->floats);
        m->graph = mix(m->graph, &at->n_ints, sizeof at->n_ints);
        if (name) m->graph = mix(m->graph, name, strlen(name));
        if ((rec[0] == TR_OP_PARAM || rec[0] == TR_OP_CONST) && tr_node_data(g, id)) {
            struct tr_tensor t = tr_node_tensor(g, id);
            m->weights = mix(m->weights, tr_node_data(g, id), tr_tensor_nbytes(&t));
        }
    }
}

int tr_dp_gate(const struct tr_comm *c, const struct tr_config *cfg, const struct tr_graph *g, int rc,
               struct tr_error *err) {
    struct dp_gate mine = {.status = rc}, *all = calloc((size_t)c->size, sizeof *all);
    if (rc && c->rank != 0) { /* rank 0 prints the run's error; this rank's is said here */
        fprintf(stderr, "trident: rank %d: error: %s\n", c->rank, err ? err->msg : "(no message)");
        fflush(stderr);
    }
    if (!rc && g) gate_fill(&mine, cfg, g);
    struct tr_error e = {0};
    int crc = all ? c->allgather(c->user, &mine, all, sizeof mine, &e)
                  : tr_error_set(&e, TR_ERR_NOMEM, "data parallel: out of memory");
    if (crc || rc) {
        free(all);
        return rc ? rc : (*err = e, crc);
    }
    int failed = -1;
    for (int r = 0; r < c->size && failed < 0; r++)
        if (all[r].status) failed = r;
    if (failed >= 0) {
        free(all);
        return tr_error_set(err, TR_ERR_COMM, "rank %d failed before its first step (its error is on its stderr); "
                            "every rank stops", failed);
    }
    static const char *const what[] = {"[run] steps", "[run] warmup", "[run] seed", "[run] batch",
                                       "[run] check_every"};
    for (int r = 1; r < c->size; r++) {
        const int64_t a[5] = {all[0].steps, all[0].warmup, all[0].seed, all[0].batch, all[0].check_every};
        const int64_t b[5] = {all[r].steps, all[r].warmup, all[r].seed, all[r].batch, all[r].check_every};
        for (int k = 0; k < 5; k++)
            if (a[k] != b[k]) {
                rc = tr_error_set(err, TR_ERR_INVALID, "the ranks do not run one config: %s is %lld on rank 0 and "
                                  "%lld on rank %d; every rank reads the same INI and command line", what[k],
                                  (long long)a[k], (long long)b[k], r);
                break;
            }
        char sec[64] = "";
        for (int k = 0; k < 4 && !rc && !sec[0]; k++)
            if (all[r].keys[k] != all[0].keys[k])
                snprintf(sec, sizeof sec, k < 3 ? "its [%s] keys" : "its [run] %s (their names, modes, order)",
                         gate_sections[k]);
        const char *diff = rc                             ? NULL
                           : sec[0]                       ? sec
                           : all[r].graph != all[0].graph ? "the model's graph (another preset, dtype or LoRA rank?)"
                           : all[r].weights != all[0].weights
                               ? "the weights' bytes (another checkpoint, or another file in [run] weights?)"
                               : NULL;
        if (diff)
            rc = tr_error_set(err, TR_ERR_INVALID, "the ranks do not run one config: rank %d differs from rank 0 "
                              "in %s; every rank reads the same INI, weights and command line", r, diff);
        if (rc) break;
    }
    free(all);
    return rc;
}

void tr_dp_end(struct tr_dp *dp) {
    if (dp->on) tr_kernels_set_comm(NULL);
    free(dp->mine);
    free(dp->all);
    free(dp->status);
    memset(dp, 0, sizeof *dp);
}

int tr_dp_shard_inputs(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                       const struct tr_task_graph *tg, struct tr_tensor *in, struct tr_error *err) {
    /* the whole batch's graph, as one process builds it, for its inputs' shapes */
    struct tr_config *one = malloc(sizeof *one);
    if (!one) return tr_error_set(err, TR_ERR_NOMEM, "data parallel: out of memory");
    *one = *cfg;
    one->ranks = 1, one->rank = 0, one->joined = 0;
    struct tr_task_graph whole;
    struct tr_tensor *gin = NULL;
    int rc = tr_task_graph_build(one, models, &whole, err);
    const int n = tg->n_model_inputs;
    if (!rc && whole.n_model_inputs != n)
        rc = tr_error_set(err, TR_ERR_INTERNAL, "data parallel: %d model inputs on a rank, %d for the whole batch", n,
                          whole.n_model_inputs);
    if (!rc) rc = tr_bench_io_alloc(whole.graph, n, tr_graph_input, &gin, err);
    if (!rc) rc = cfg->inputs[0] ? tr_bench_inputs_load(one, whole.graph, n, gin, err)
                                 : whole.model->make_inputs(whole.config, &whole.opts, cfg->seed, n, gin, err);
    for (int i = 0; !rc && i < n; i++) {
        const struct tr_tensor *w = &gin[i];
        struct tr_tensor *mine = &in[i];
        const size_t bytes = tr_tensor_nbytes(mine);
        int same = w->ndim == mine->ndim;
        for (int d = 1; same && d < w->ndim; d++) same = w->shape[d] == mine->shape[d];
        if (same && w->ndim > 0 && w->shape[0] == mine->shape[0] * cfg->ranks && w->shape[0] != mine->shape[0])
            memcpy(mine->data, (const char *)w->data + (size_t)cfg->rank * bytes, bytes); /* rows of this rank */
        else if (same && (w->ndim == 0 || w->shape[0] == mine->shape[0]))
            memcpy(mine->data, w->data, bytes);
        else
            rc = tr_error_set(err, TR_ERR_INTERNAL, "data parallel: input '%s' is not split by the batch (%lld rows "
                              "for the whole, %lld on a rank)", tr_node_name(tg->graph, tr_graph_input(tg->graph, i)),
                              (long long)(w->ndim ? w->shape[0] : 0), (long long)(mine->ndim ? mine->shape[0] : 0));
    }
    if (gin) tr_bench_io_free(gin, n);
    if (whole.model) tr_task_graph_free(&whole);
    free(one);
    return rc;
}

/* The terms of the model's loss on this rank: the labels a cross-entropy does not ignore,
 * or -1 when the loss counts alike on every rank (tr_bench_loss_labels: only the sliced
 * elements count). */
static double loss_terms(const struct tr_task_graph *tg, const struct tr_tensor *in) {
    const struct tr_graph *g = tg->graph;
    const int loss = tg->train.model_loss;
    if (tr_node_op(g, loss) != TR_OP_CROSS_ENTROPY || !tr_node_attrs(g, loss)->ints[1]) return -1;
    const int64_t ignore = tr_node_attrs(g, loss)->ints[0];
    int slice;
    const int lab = tr_bench_loss_labels(g, loss, &slice);
    for (int i = 0; i < tg->n_model_inputs; i++) {
        if (tr_graph_input(g, i) != lab) continue;
        double n = 0;
        for (int64_t e = 0; e < tr_tensor_numel(&in[i]); e++)
            n += tr_bench_slice_keeps(g, slice, &in[i], e) && tr_tensor_get_f64(&in[i], e) != (double)ignore;
        return n;
    }
    return -1;
}

int tr_dp_loss_share(struct tr_dp *dp, const struct tr_task_graph *tg, const struct tr_tensor *in, float *share,
                     struct tr_error *err) {
    if (!dp->on) return tr_error_set(err, TR_ERR_INTERNAL, "data parallel: no communicator for the loss share");
    const struct tr_comm *c = dp->comm;
    double mine = loss_terms(tg, in), *all = calloc((size_t)c->size, sizeof *all);
    if (!all) return tr_error_set(err, TR_ERR_NOMEM, "data parallel: out of memory");
    tr_dp_phase(dp, "the harness", "counting each rank's loss terms", 0);
    int rc = c->allgather(c->user, &mine, all, sizeof mine, err);
    double sum = 0;
    int counted = 1;
    for (int r = 0; !rc && r < c->size; r++) sum += all[r], counted &= all[r] >= 0;
    free(all);
    if (rc) return rc;
    *share = counted && sum > 0 ? (float)(mine / sum) : (float)(1.0 / c->size);
    return TR_OK;
}

void tr_dp_phase(struct tr_dp *dp, const char *label, const char *what, int64_t step) {
    if (!dp->on || !dp->comm->set_phase) return;
    char s[96];
    if (step > 0) snprintf(s, sizeof s, "%s, %s %lld", label, what, (long long)step);
    else snprintf(s, sizeof s, "%s, %s", label, what);
    dp->comm->set_phase(dp->comm->user, s);
}

int tr_dp_step_status(struct tr_dp *dp, int rc, const char *label, int64_t step, struct tr_error *err) {
    if (!dp->on) return rc;
    const struct tr_comm *c = dp->comm;
    if (rc && c->rank != 0) { /* rank 0 prints the table; this rank's reason is said here */
        fprintf(stderr, "trident: rank %d: error: %s: %s\n", c->rank, label, err->msg);
        fflush(stderr);
    }
    /* the status, and bit 30 for this rank's Ctrl-C: shared so that every rank stops after
     * the same step (one that stopped alone would leave the others in a collective) */
    int32_t mine = rc | (tr_bench_stop_requested() ? DP_STOP_BIT : 0);
    struct tr_error e = {0};
    int crc = c->allgather(c->user, &mine, dp->status, sizeof mine, &e);
    int failed = -1;
    for (int r = 0; !crc && r < c->size; r++) {
        if (dp->status[r] & DP_STOP_BIT) dp->stop = 1;
        dp->status[r] &= ~DP_STOP_BIT;
        if (dp->status[r] && failed < 0) failed = r;
    }
    if (dp->stop) tr_bench_interrupt(); /* this rank's report says interrupted too */
    if (crc) return rc ? rc : (*err = e, crc);
    if (rc || failed < 0) return rc;
    if (step == 0)
        return tr_error_set(err, TR_ERR_COMM, "its load and compile failed on rank %d (its error is on its stderr); "
                            "every rank stops this backend", failed);
    return tr_error_set(err, TR_ERR_COMM, "step %lld failed on rank %d (its error is on its stderr); every rank "
                        "stops this backend", (long long)step, failed);
}

int tr_dp_check_weights(struct tr_dp *dp, int64_t step, struct tr_error *err) {
    if (!dp->on || !dp->check_weights) return TR_OK;
    const struct tr_comm *c = dp->comm;
    const struct tr_graph *g = dp->g;
    for (int u = 0; u < dp->n_upd; u++) {
        const int p = tr_graph_update_param(g, u);
        struct tr_tensor t = tr_node_tensor(g, p);
        const void *data = tr_node_data(g, p);
        dp->mine[u] = data ? tr_bench_checksum(data, tr_tensor_nbytes(&t)) : 0;
    }
    int rc = c->allgather(c->user, dp->mine, dp->all, sizeof *dp->mine * (size_t)dp->n_upd, err);
    if (rc) return rc;
    for (int u = 0; u < dp->n_upd; u++)
        for (int r = 1; r < c->size; r++) {
            const uint64_t a = dp->all[u], b = dp->all[(size_t)r * (size_t)dp->n_upd + (size_t)u];
            if (a != b)
                return tr_error_set(err, TR_ERR_NUMERIC, "after step %lld the ranks' trained state differs: '%s' "
                                    "hashes to %016llx on rank 0 and %016llx on rank %d (the first of the %d states "
                                    "the step writes that differs)", (long long)step,
                                    tr_node_name(g, tr_graph_update_param(g, u)), (unsigned long long)a,
                                    (unsigned long long)b, r, dp->n_upd);
        }
    return TR_OK;
}

double tr_dp_seconds(const struct tr_dp *dp) {
    return dp->on && dp->comm->seconds ? dp->comm->seconds(dp->comm->user) : 0;
}
