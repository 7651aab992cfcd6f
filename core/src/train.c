/* The fit task's training step as one graph (train.h).
 *
 * Everything is checked before the first node is added where that is cheap (loss,
 * params); tr_grad and the optimizer builders refuse without touching the graph, and a
 * later builder error is sticky in the graph, so a failed build never leaves a half
 * step that compiles. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/autodiff.h"
#include "trident/model.h"
#include "trident/optim.h"
#include "trident/train.h"

#define KEY(field, type, lo, hi, doc) {#field, type, offsetof(struct tr_train_config, field), lo, hi, doc}
static const struct tr_model_key train_keys[] = {
    KEY(optimizer, TR_KEY_STRING, 0, 0, "adamw, adam (Keras' Adam: eps 1e-7, no weight decay) or sgd"),
    KEY(learning_rate, TR_KEY_FLOAT, 0, 10, "the step size"),
    KEY(beta1, TR_KEY_FLOAT, 0, 0.999999, "AdamW's first-moment decay"),
    KEY(beta2, TR_KEY_FLOAT, 0, 0.999999, "AdamW's second-moment decay"),
    KEY(eps, TR_KEY_FLOAT, 1e-30, 1, "AdamW's denominator term"),
    KEY(weight_decay, TR_KEY_FLOAT, 0, 10, "decoupled (AdamW) or L2 (SGD) weight decay"),
    KEY(momentum, TR_KEY_FLOAT, 0, 0.999999, "SGD's momentum"),
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
    c->momentum = 0.9;
    c->master_weights = 1;
}

/* The line of [train] key in cfg, 0 when it is not given. */
static int train_key_line(const struct tr_config *cfg, const char *key) {
    int line = 0;
    for (int i = 0; i < cfg->n_kv; i++)
        if (!strcmp(cfg->kv[i].section, "train") && !strcmp(cfg->kv[i].key, key)) line = cfg->kv[i].line;
    return line;
}

int tr_train_config_resolve(const struct tr_config *cfg, struct tr_train_config *c, struct tr_error *err) {
    tr_train_config_defaults(c);
    if (!cfg) return TR_OK;
    int rc = tr_keys_apply(cfg, "train", train_keys, (int)(sizeof train_keys / sizeof train_keys[0]), "training", c,
                           err);
    if (rc) return rc;
    if (strcmp(c->optimizer, "adam") == 0) {
        /* keras.optimizers.Adam's defaults where the INI is silent; it runs as AdamW with no
         * decay (Keras adds eps to √v̂·√(1−β2^t) rather than to √v̂: the same step to
         * within eps, 1e-7). */
        if (!train_key_line(cfg, "eps")) c->eps = 1e-7;
        if (!train_key_line(cfg, "weight_decay")) c->weight_decay = 0.0;
        strcpy(c->optimizer, "adamw");
    }
    if (strcmp(c->optimizer, "adamw") != 0 && strcmp(c->optimizer, "sgd") != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s:%d: [train] optimizer = %s: expected adamw, adam or sgd",
                            cfg->file, train_key_line(cfg, "optimizer"), c->optimizer);
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

static const int *sort_grads; /* qsort's context: gradients compare by node id */
static int by_readiness(const void *a, const void *b) {
    int x = sort_grads[*(const int *)a], y = sort_grads[*(const int *)b];
    return (x > y) - (x < y);
}

int tr_train_dp_plan(const struct tr_graph *g, int n, const int *grads, double bucket_bytes, int *order,
                     int *bucket_of) {
    for (int i = 0; i < n; i++) order[i] = i;
    sort_grads = grads;
    qsort(order, (size_t)n, sizeof *order, by_readiness);
    int buckets = 0;
    double in_bucket = 0;
    for (int k = 0; k < n; k++) {
        const double bytes = 4.0 * (double)numel_of(g, grads[order[k]]);
        if (k == 0 || (in_bucket > 0 && in_bucket + bytes > bucket_bytes)) buckets++, in_bucket = 0;
        bucket_of[order[k]] = buckets - 1;
        in_bucket += bytes;
    }
    return buckets;
}

/* One flat f32 vector of the 1-D xs[0..n), by CONCATs of at most 8 (a bound kernel call
 * holds 8 inputs), in a tree. */
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

/* Every gradient g[i] (any float dtype) replaced by the global batch's: per bucket the
 * gradients flattened into one f32 vector, scaled by this rank's share (the INPUT share),
 * summed over the ranks (ALLREDUCE), and cut back into their shapes and dtypes. The share
 * makes it exact for a loss that is a mean over a count that differs between the shards
 * (tokens that are not padding): the global loss is Σ_r share_r · loss_r. */
static int dp_average(struct tr_graph *g, int n, int *grads, int share, const struct tr_train_config *c,
                      struct tr_error *err) {
    int *order = calloc((size_t)n, sizeof *order), *bucket_of = calloc((size_t)n, sizeof *bucket_of);
    int *flat = calloc((size_t)n, sizeof *flat);
    int rc = TR_OK;
    if (!order || !bucket_of || !flat) rc = tr_error_set(err, TR_ERR_NOMEM, "data parallel: out of memory");
    const int buckets = rc ? 0 : tr_train_dp_plan(g, n, grads, c->bucket_bytes, order, bucket_of);
    for (int b = 0, k = 0; b < buckets; b++) {
        const int first = k;
        int m = 0;
        for (; k < n && bucket_of[order[k]] == b; k++) {
            int x = grads[order[k]];
            if (tr_node_dtype(g, x) != TR_DTYPE_F32) x = tr_cast(g, x, TR_DTYPE_F32);
            const int64_t len[1] = {numel_of(g, x)};
            flat[m++] = tr_reshape(g, x, 1, len);
        }
        const int red = tr_allreduce(g, tr_mul(g, concat_tree(g, m, flat), share), (int)c->dp_ranks, b, 1.0f);
        int64_t off = 0;
        for (int j = first; j < k; j++) {
            const int i = order[j], x = grads[i];
            const int64_t len = numel_of(g, x);
            int piece = m == 1 ? red : tr_slice(g, red, 0, off, off + len, 1);
            piece = tr_reshape(g, piece, tr_node_ndim(g, x), tr_node_shape(g, x));
            if (tr_node_dtype(g, x) != TR_DTYPE_F32) piece = tr_cast(g, piece, (enum tr_dtype)tr_node_dtype(g, x));
            grads[i] = piece;
            off += len;
        }
    }
    free(order);
    free(bucket_of);
    free(flat);
    return rc ? rc : tr_graph_status(g, err);
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
    const int adamw = strcmp(c->optimizer, "sgd") != 0;

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
    if ((rc = tr_grad(g, loss, n, params, grads, err)) != TR_OK) goto done;

    const int64_t scalar[1] = {1};
    ts->lr = tr_input(g, "lr", TR_DTYPE_F32, 0, scalar);
    ts->step = tr_input(g, "step", TR_DTYPE_F32, 0, scalar);
    /* The optimizer runs on the masters of low-precision params, on the params otherwise. */
    for (int i = 0; i < n; i++) {
        int p = params[i], dt = tr_node_dtype(g, p);
        opt_p[i] = p;
        opt_g[i] = grads[i];
        if (c->master_weights && is_low_precision(dt)) {
            int m = -1;
            if ((rc = add_master(g, p, &m, err)) != TR_OK) goto done;
            ts->master[ts->n_masters] = m;
            ts->master_of[ts->n_masters++] = p;
            opt_p[i] = m;
            opt_g[i] = tr_cast(g, grads[i], TR_DTYPE_F32);
        }
    }
    if ((rc = tr_graph_status(g, err)) != TR_OK) goto done;
    int out_loss = loss;
    ts->model_loss = loss;
    ts->dp_share = -1;
    if (c->dp_ranks > 1) {
        /* every rank steps with the same global gradient, and reports the global loss */
        ts->dp_share = tr_input(g, "dp_share", TR_DTYPE_F32, 0, scalar);
        if ((rc = dp_average(g, n, opt_g, ts->dp_share, c, err)) != TR_OK) goto done;
        const int64_t one[1] = {1};
        out_loss = tr_reshape(g, tr_allreduce(g, tr_reshape(g, tr_mul(g, loss, ts->dp_share), 1, one),
                                              (int)c->dp_ranks, -1, 1.0f), 0, one);
        if ((rc = tr_graph_status(g, err)) != TR_OK) goto done;
    }
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
