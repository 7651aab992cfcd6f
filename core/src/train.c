/* The fit task's training step as one graph (train.h).
 *
 * Everything is checked before the first node is added where that is cheap (loss,
 * params); tr_grad and the optimizer builders refuse without touching the graph, and a
 * later builder error is sticky in the graph, so a failed build never leaves a half
 * step that compiles. */
#include <stddef.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/autodiff.h"
#include "trident/model.h"
#include "trident/optim.h"
#include "trident/train.h"

#define KEY(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_train_config, field), lo, hi, doc}
static const struct tr_model_key train_keys[] = {
    KEY(optimizer, TR_KEY_STRING, 0, 0, "adamw, adam (torch's Adam with Keras' defaults: eps 1e-7, no weight decay; "
        "weight_decay L2, as torch's) or sgd"),
    KEY(learning_rate, TR_KEY_FLOAT, 0, 10, "the step size"),
    KEY(beta1, TR_KEY_FLOAT, 0, 0.999999, "AdamW's first-moment decay"),
    KEY(beta2, TR_KEY_FLOAT, 0, 0.999999, "AdamW's second-moment decay"),
    KEY(eps, TR_KEY_FLOAT, 1e-30, 1, "AdamW's denominator term"),
    KEY(weight_decay, TR_KEY_FLOAT, 0, 10, "decoupled (AdamW: 0.01 by default) or L2 (Adam, SGD: 0 by default) weight "
        "decay"),
    KEY(momentum, TR_KEY_FLOAT, 0, 0.999999, "SGD's momentum (0 by default, as torch.optim.SGD)"),
    KEY(master_weights, TR_KEY_BOOL, 0, 0, "f32 master copies of bf16/f16 params"),
};

void tr_train_config_defaults(struct tr_train_config *c) {
    memset(c, 0, sizeof *c);
    strcpy(c->optimizer, "adamw");
    c->learning_rate = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 0.01;
    c->momentum = 0.0; /* torch.optim.SGD's, its only reader */
    c->master_weights = 1;
}

/* The line of [train] key in cfg, 0 when it is not given. */
static int train_key_line(const struct tr_config *cfg, const char *key) {
    int line = 0;
    for (int i = 0; i < cfg->n_kv; i++)
        if (!strcmp(cfg->kv[i].section, "train") && !strcmp(cfg->kv[i].key, key)) line = cfg->kv[i].line;
    return line;
}

const struct tr_model_key *tr_train_keys(int *n) {
    *n = (int)(sizeof train_keys / sizeof train_keys[0]);
    return train_keys;
}

int tr_train_config_resolve(const struct tr_config *cfg, struct tr_train_config *c, struct tr_error *err) {
    tr_train_config_defaults(c);
    if (!cfg) return TR_OK;
    int rc = tr_keys_apply(cfg, "train", train_keys, (int)(sizeof train_keys / sizeof train_keys[0]), "training", c,
                           err);
    if (rc) return rc;
    char asked[sizeof c->optimizer];
    memcpy(asked, c->optimizer, sizeof asked);
    if (strcmp(c->optimizer, "adam") == 0) {
        /* keras.optimizers.Adam's defaults where the INI is silent; it runs as AdamW with no
         * decay, torch.optim.Adam's step. Keras' differs: it adds eps to √v rather than to
         * √v̂, an eps of eps/√(1−β2^t) in torch's form (3e-6 at step 1 for 1e-7), which moves
         * the parameters whose √v̂ is near that. */
        if (!train_key_line(cfg, "eps")) c->eps = 1e-7;
        /* torch.optim.Adam's weight_decay is L2 (added to the gradient), not AdamW's */
        c->l2 = train_key_line(cfg, "weight_decay") ? c->weight_decay : 0.0;
        c->weight_decay = 0.0;
        strcpy(c->optimizer, "adamw");
    }
    if (strcmp(c->optimizer, "adamw") != 0 && strcmp(c->optimizer, "sgd") != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [train] optimizer = %s: expected adamw, adam or sgd",
                            cfg->file, train_key_line(cfg, "optimizer"), c->optimizer);
    const int sgd = strcmp(c->optimizer, "sgd") == 0;
    if (sgd && !train_key_line(cfg, "weight_decay")) /* torch.optim.SGD's (and Keras') plain SGD */
        c->weight_decay = 0.0;
    /* a key the chosen optimizer does not read is said, not silently dropped */
    static const char *const adam_only[] = {"beta1", "beta2", "eps"};
    for (int k = 0; sgd && k < 3; k++)
        if (train_key_line(cfg, adam_only[k]))
            fprintf(stderr, "trident: warning: %s:%d: [train] %s is AdamW's; optimizer = sgd leaves it unread\n",
                    cfg->file, train_key_line(cfg, adam_only[k]), adam_only[k]);
    if (!sgd && train_key_line(cfg, "momentum"))
        fprintf(stderr, "trident: warning: %s:%d: [train] momentum is SGD's; optimizer = %s leaves it unread\n",
                cfg->file, train_key_line(cfg, "momentum"), asked);
    /* the step takes lr as an f32 input: a rate below f32's normal range trains nothing */
    if (c->learning_rate > 0 && c->learning_rate < (double)FLT_MIN)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [train] learning_rate = %g: below f32's smallest normal "
                            "%g, the step's lr would be 0 (or subnormal); expected 0 or at least %g", cfg->file,
                            train_key_line(cfg, "learning_rate"), c->learning_rate, (double)FLT_MIN, (double)FLT_MIN);
    return TR_OK;
}

void tr_train_step_free(struct tr_train_step *ts) {
    if (!ts) return;
    free(ts->trained);
    free(ts->master);
    free(ts->master_of);
    memset(ts, 0, sizeof *ts);
}

static int is_low_precision(int dt) { return dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16; }

/* The f32 master of param p: PARAM "<name>.master", its gradient cast to f32. */
static int add_master(struct tr_graph *g, int p, int *m, struct tr_error *err) {
    char name[TR_NAME_MAX + 16];
    const char *pn = tr_node_name(g, p);
    if (snprintf(name, sizeof name, "%s.master", pn) >= TR_NAME_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "master name '%s.master' is longer than %d characters", pn,
                            TR_NAME_MAX - 1);
    *m = tr_param(g, name, TR_DTYPE_F32, tr_node_ndim(g, p), tr_node_shape(g, p), 0.0f, 0.0f);
    tr_param_set_fresh(g, *m);
    return tr_graph_status(g, err);
}

static int64_t numel_of(const struct tr_graph *g, int id) {
    return tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id));
}

/* Data parallelism's buckets, filled as tr_grad makes each gradient final (the last
 * layer's first). A bucket closes at the gradient that brings it to bucket_bytes or more
 * (as PyTorch DDP's), and its all-reduce starts right there, amid the backward pass: its
 * gradients flattened into one f32 vector (CONCATs of at most 8, in a tree: a bound kernel
 * call holds 8 inputs), scaled by this rank's share (INPUT dp_share), ALLREDUCE_START.
 * After the backward pass each bucket is waited for and cut back into f32 gradients. The
 * share makes the sum exact for a loss that is a mean over a count that differs between
 * the shards (tokens that are not padding): the global loss is Σ_r share_r · loss_r. */
struct dp_build {
    const struct tr_train_config *c;
    int share;
    int *flat, *member, m;       /* the open bucket: its f32 pieces and their gradients */
    double bytes;
    int *bucket_of, *started;    /* per gradient: its bucket; per bucket: its START */
    int *ready_order, n_ready;   /* the gradients as they became final */
    int n_buckets;
    int *avg;                    /* per gradient: the global batch's, f32 */
};

static int concat_tree(struct tr_graph *g, int n, int *xs) {
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += 8) {
            const int k = n - i < 8 ? n - i : 8;
            xs[m++] = k == 1 ? xs[i] : tr_concat(g, k, xs + i, 0);
        }
        n = m;
    }
    return xs[0];
}

static int dp_close_bucket(struct dp_build *d, struct tr_graph *g) {
    if (d->m == 0) return TR_OK;
    const int b = d->n_buckets++;
    const int sum = tr_mul(g, concat_tree(g, d->m, d->flat), d->share);
    d->started[b] = tr_allreduce_start(g, sum, (int)d->c->dp_ranks, b);
    for (int k = 0; k < d->m; k++) d->bucket_of[d->member[k]] = b;
    d->m = 0;
    d->bytes = 0;
    return tr_graph_status(g, NULL);
}

static int dp_ready(void *user, struct tr_graph *g, int i, int grad, struct tr_error *err) {
    struct dp_build *d = user;
    int x = grad;
    if (tr_node_dtype(g, x) != TR_DTYPE_F32) x = tr_cast(g, x, TR_DTYPE_F32);
    const int64_t len[1] = {numel_of(g, x)};
    d->flat[d->m] = tr_reshape(g, x, 1, len);
    d->member[d->m++] = i;
    d->ready_order[d->n_ready++] = i;
    d->bytes += 4.0 * (double)len[0];
    if (d->bytes >= d->c->bucket_bytes) dp_close_bucket(d, g);
    return tr_graph_status(g, err);
}

/* After the backward pass: the last bucket started, then every bucket waited for and cut
 * back into f32 gradients of their shapes (avg), in the order they started. */
static int dp_finish(struct dp_build *d, struct tr_graph *g, const int *grads, struct tr_error *err) {
    dp_close_bucket(d, g);
    for (int b = 0, k = 0; b < d->n_buckets; b++) {
        const int red = tr_allreduce_wait(g, d->started[b], 1.0f);
        const int first = k;
        while (k < d->n_ready && d->bucket_of[d->ready_order[k]] == b) k++;
        int64_t off = 0;
        for (int j = first; j < k; j++) {
            const int i = d->ready_order[j];
            const int64_t len = numel_of(g, grads[i]);
            const int piece = k - first == 1 ? red : tr_slice(g, red, 0, off, off + len, 1);
            d->avg[i] = tr_reshape(g, piece, tr_node_ndim(g, grads[i]), tr_node_shape(g, grads[i]));
            off += len;
        }
    }
    return tr_graph_status(g, err);
}

static void dp_free(struct dp_build *d) {
    free(d->flat);
    free(d->member);
    free(d->bucket_of);
    free(d->started);
    free(d->ready_order);
    free(d->avg);
}

int tr_train_build(struct tr_graph *g, int loss, int n, const int *params, const struct tr_train_config *c,
                   struct tr_train_step *ts, struct tr_error *err) {
    if (!g || !params || !c || !ts) return tr_error_set(err, TR_ERR_INVALID, "train: NULL argument");
    memset(ts, 0, sizeof *ts);
    int rc = tr_graph_status(g, err);
    if (rc) return rc;
    if (n < 1) return tr_error_set(err, TR_ERR_INVALID, "train: nothing to train (0 parameters)");
    if (loss < 0 || loss >= tr_graph_n_nodes(g) || tr_node_dtype(g, loss) != TR_DTYPE_F32 || tr_node_ndim(g, loss) != 0)
        return tr_error_set(err, TR_ERR_INVALID, "train: loss node %d is not a 0-d f32 node", loss);
    const int adamw = strcmp(c->optimizer, "sgd") != 0, data_parallel = c->dp_ranks >= 1;
    struct dp_build dp = {.c = c};

    int *grads = calloc((size_t)n, sizeof *grads), *opt_p = calloc((size_t)n, sizeof *opt_p);
    int *opt_g = calloc((size_t)n, sizeof *opt_g);
    struct tr_optim_update *up = calloc((size_t)n, sizeof *up);
    ts->trained = calloc((size_t)n, sizeof *ts->trained);
    ts->master = calloc((size_t)n, sizeof *ts->master);
    ts->master_of = calloc((size_t)n, sizeof *ts->master_of);
    if (!grads || !opt_p || !opt_g || !up || !ts->trained || !ts->master || !ts->master_of) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "train: out of memory for %d parameters", n);
        goto done;
    }
    memcpy(ts->trained, params, (size_t)n * sizeof *params);
    ts->n_trained = n;
    const int64_t scalar[1] = {1}, one[1] = {1};
    ts->model_loss = loss;
    ts->dp_share = ts->lr = ts->step = -1;
    int out_loss = loss, loss_sum = -1;
    if (data_parallel) {
        /* every rank steps with the same global gradient, and reports the global loss: its
         * sum starts as soon as the forward pass is done, the gradients' amid the backward
         * pass, so the inputs come first (one process keeps tr_grad's refusal first) */
        ts->lr = tr_input(g, "lr", TR_DTYPE_F32, 0, scalar);
        ts->step = tr_input(g, "step", TR_DTYPE_F32, 0, scalar);
        ts->dp_share = tr_input(g, "dp_share", TR_DTYPE_F32, 0, scalar);
        loss_sum = tr_allreduce_start(g, tr_reshape(g, tr_mul(g, loss, ts->dp_share), 1, one), (int)c->dp_ranks, -1);
        dp.share = ts->dp_share;
        dp.flat = calloc((size_t)n, sizeof *dp.flat);
        dp.member = calloc((size_t)n, sizeof *dp.member);
        dp.bucket_of = calloc((size_t)n, sizeof *dp.bucket_of);
        dp.started = calloc((size_t)n, sizeof *dp.started);
        dp.ready_order = calloc((size_t)n, sizeof *dp.ready_order);
        dp.avg = calloc((size_t)n, sizeof *dp.avg);
        if (!dp.flat || !dp.member || !dp.bucket_of || !dp.started || !dp.ready_order || !dp.avg) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "data parallel: out of memory for %d gradients", n);
            goto done;
        }
    }
    if ((rc = tr_graph_status(g, err)) != TR_OK) goto done;
    const struct tr_grad_hook hook = {dp_ready, &dp};
    if ((rc = tr_grad_hooked(g, loss, n, params, grads, data_parallel ? &hook : NULL, err)) != TR_OK) goto done;
    if (data_parallel) {
        if ((rc = dp_finish(&dp, g, grads, err)) != TR_OK) goto done;
        out_loss = tr_reshape(g, tr_allreduce_wait(g, loss_sum, 1.0f), 0, one);
    } else {
        ts->lr = tr_input(g, "lr", TR_DTYPE_F32, 0, scalar);
        ts->step = tr_input(g, "step", TR_DTYPE_F32, 0, scalar);
    }
    /* The optimizer runs on the masters of low-precision params, on the params otherwise;
     * under data parallelism on the global gradient, f32 from its sum. */
    for (int i = 0; i < n; i++) {
        int p = params[i], dt = tr_node_dtype(g, p), gi = data_parallel ? dp.avg[i] : grads[i];
        opt_p[i] = p;
        if (c->master_weights && is_low_precision(dt)) {
            int m = -1;
            if ((rc = add_master(g, p, &m, err)) != TR_OK) goto done;
            ts->master[ts->n_masters] = m;
            ts->master_of[ts->n_masters++] = p;
            opt_p[i] = m;
            opt_g[i] = tr_node_dtype(g, gi) == TR_DTYPE_F32 ? gi : tr_cast(g, gi, TR_DTYPE_F32);
        } else {
            opt_g[i] = tr_node_dtype(g, gi) == tr_node_dtype(g, grads[i]) ? gi
                                                                          : tr_cast(g, gi, (enum tr_dtype)dt);
        }
    }
    for (int i = 0; adamw && c->l2 > 0 && i < n; i++) /* Adam's L2: g + l2·p, torch's order */
        opt_g[i] = tr_add(g, opt_g[i], tr_scale(g, opt_p[i], (float)c->l2, 0.0f));
    if ((rc = tr_graph_status(g, err)) != TR_OK) goto done;
    if (adamw) {
        struct tr_adamw hp = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay};
        rc = tr_adamw(g, &hp, n, opt_p, opt_g, ts->lr, ts->step, up, err);
    } else {
        rc = tr_sgd(g, (float)c->momentum, (float)c->weight_decay, n, opt_p, opt_g, ts->lr, up, err);
    }
    if (rc) goto done;
    for (int i = 0; i < n; i++) {
        tr_graph_add_update(g, up[i].param, up[i].new_param);
        ts->n_updated++;
        for (int s = 0; s < 2; s++)
            if (up[i].state[s] >= 0) {
                tr_graph_add_update(g, up[i].state[s], up[i].new_state[s]);
                ts->n_updated++;
            }
        if (opt_p[i] != params[i]) { /* a master: the param is its cast back */
            int back = tr_cast(g, up[i].new_param, (enum tr_dtype)tr_node_dtype(g, params[i]));
            tr_graph_add_update(g, params[i], back);
            ts->n_updated++;
        }
    }
    tr_graph_set_output(g, out_loss, "loss");
    ts->loss = out_loss;
    rc = tr_graph_status(g, err);
done:
    dp_free(&dp);
    free(grads);
    free(opt_p);
    free(opt_g);
    free(up);
    if (rc) {
        tr_train_step_free(ts);
        return tr_error_prefix(err, "train");
    }
    return TR_OK;
}

int tr_train_init_masters(const struct tr_graph *g, const struct tr_train_step *ts, struct tr_error *err) {
    for (int i = 0; i < ts->n_masters; i++) {
        int m = ts->master[i], p = ts->master_of[i];
        struct tr_tensor src = tr_node_tensor(g, p);
        src.data = (void *)tr_node_data(g, p);
        float *dst = (float *)tr_node_data(g, m);
        if (!src.data || !dst)
            return tr_error_set(err, TR_ERR_INVALID, "train: master '%s' or its param has no data (weights not bound)",
                                tr_node_name(g, m));
        int64_t n = tr_tensor_numel(&src);
        for (int64_t j = 0; j < n; j++) dst[j] = (float)tr_tensor_get_f64(&src, j);
    }
    return TR_OK;
}
