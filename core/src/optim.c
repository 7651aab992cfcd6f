/* Optimizers as graph ops (optim.h): AdamW and SGD with momentum.
 *
 * Everything is checked before a node is added, so a refusal leaves the graph as it was
 * (as tr_grad does). The moments are plain ops (SCALE, MUL, ADD) that a backend may fuse;
 * only AdamW's bias-corrected step is one op (ADAMW_STEP), because the corrections
 * depend on the step number, an input. The optimizer state is f32 whatever the
 * parameter's dtype (a bf16 moment loses the small updates), so the gradient is cast to
 * f32 first when it is not f32. The state PARAMs are named "<param>.adamw_m" etc. and
 * have init normal(0, 0): tr_weights_from_seed fills them with exact zeros. Call the
 * builders with no scope pushed, or the state names get the scope in front. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "trident/optim.h"
#include "graph_nodes.h"

static int is_f32_scalar(const struct tr_graph *g, int id) {
    return id >= 0 && id < tr_graph_n_nodes(g) && tr_node_dtype(g, id) == TR_DTYPE_F32 && tr_node_ndim(g, id) == 0;
}

static const char *node_str(const struct tr_graph *g, int id, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s", tr_dtype_name((enum tr_dtype)tr_node_dtype(g, id)));
    tr_shape_str(tr_node_ndim(g, id), tr_node_shape(g, id), buf + k, n - (size_t)k);
    return buf;
}

/* The arguments common to both optimizers; `suffixes` are the state names to create. */
static int check_common(const struct tr_graph *g, const char *opt, int n, const int *params, const int *grads, int lr,
                        const struct tr_optim_update *out, int n_suffix, const char *const *suffixes,
                        struct tr_error *err) {
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "%s: graph is NULL", opt);
    int rc = tr_graph_status(g, err); /* a dead graph: its first error */
    if (rc) return rc;
    if (n < 1) return tr_error_set(err, TR_ERR_INVALID, "%s: %d parameters, expected at least 1", opt, n);
    if (!params || !grads || !out)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s is NULL", opt, !params ? "params" : !grads ? "grads" : "out");
    char s1[160], s2[160];
    if (!is_f32_scalar(g, lr))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: lr node %d is %s, expected a 0-d f32 node", opt, lr,
                            lr >= 0 && lr < tr_graph_n_nodes(g) ? node_str(g, lr, s1, sizeof s1) : "not a node");
    int nn = tr_graph_n_nodes(g);
    for (int i = 0; i < n; i++) {
        int p = params[i], gr = grads[i];
        if (p < 0 || p >= nn || tr_node_op(g, p) != TR_OP_PARAM)
            return tr_error_set(err, TR_ERR_INVALID, "%s: params[%d] = %d is not a PARAM node", opt, i, p);
        const char *name = tr_node_name(g, p);
        if (!tr_dtype_is_float((enum tr_dtype)tr_node_dtype(g, p)))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: param '%s' is %s, expected a float dtype", opt, name,
                                node_str(g, p, s1, sizeof s1));
        if (gr < 0 || gr >= nn)
            return tr_error_set(err, TR_ERR_INVALID, "%s: grads[%d] = %d (of param '%s') is not a node", opt, i, gr,
                                name);
        if (tr_node_dtype(g, gr) != tr_node_dtype(g, p) || !same_shape(g, p, gr))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: gradient of '%s' is %s, expected the param's %s", opt, name,
                                node_str(g, gr, s1, sizeof s1), node_str(g, p, s2, sizeof s2));
        for (int j = 0; j < i; j++)
            if (params[j] == p)
                return tr_error_set(err, TR_ERR_INVALID, "%s: param '%s' is listed twice (params[%d] and [%d])", opt,
                                    name, j, i);
        for (int s = 0; s < n_suffix; s++) {
            char state[TR_NAME_MAX + 16];
            int len = snprintf(state, sizeof state, "%s.%s", name, suffixes[s]);
            if (len >= TR_NAME_MAX)
                return tr_error_set(err, TR_ERR_INVALID, "%s: state name '%s' is longer than %d characters", opt, state,
                                    TR_NAME_MAX - 1);
            int other = tr_graph_find(g, state);
            if (other >= 0)
                return tr_error_set(err, TR_ERR_INVALID, "%s: state name '%s' is already used by node %d (an "
                                    "optimizer built twice for '%s'?)", opt, state, other, name);
        }
    }
    return TR_OK;
}

/* A state PARAM "<param>.<suffix>" of zeros (init normal(0, 0)). */
static int state_param(struct tr_graph *g, int p, const char *suffix, enum tr_dtype dt) {
    char name[TR_NAME_MAX + 16];
    snprintf(name, sizeof name, "%s.%s", tr_node_name(g, p), suffix);
    int s = tr_param(g, name, dt, tr_node_ndim(g, p), tr_node_shape(g, p), 0.0f, 0.0f);
    tr_param_set_fresh(g, s);
    return s;
}

static int to_dtype(struct tr_graph *g, int x, enum tr_dtype dt) {
    return x >= 0 && tr_node_dtype(g, x) == (int)dt ? x : tr_cast(g, x, dt);
}

static int finish(struct tr_graph *g, const char *opt, struct tr_error *err) {
    int rc = tr_graph_status(g, err);
    if (rc && err) tr_error_prefix(err, "%s", opt);
    return rc;
}

int tr_adamw(struct tr_graph *g, const struct tr_adamw *hp, int n, const int *params, const int *grads, int lr,
             int step, struct tr_optim_update *out, struct tr_error *err) {
    static const char *const suffixes[] = {"adamw_m", "adamw_v"};
    if (!hp) return tr_error_set(err, TR_ERR_INVALID, "adamw: hyper-parameters are NULL");
    float b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps, wd = hp->weight_decay;
    if (!(b1 >= 0.0f && b1 < 1.0f))
        return tr_error_set(err, TR_ERR_INVALID, "adamw: beta1 %g, expected 0 <= beta1 < 1", (double)b1);
    if (!(b2 >= 0.0f && b2 < 1.0f))
        return tr_error_set(err, TR_ERR_INVALID, "adamw: beta2 %g, expected 0 <= beta2 < 1", (double)b2);
    if (!(eps > 0.0f) || isinf(eps))
        return tr_error_set(err, TR_ERR_INVALID, "adamw: eps %g, expected a finite value > 0", (double)eps);
    if (!(wd >= 0.0f) || isinf(wd))
        return tr_error_set(err, TR_ERR_INVALID, "adamw: weight_decay %g, expected a finite value >= 0", (double)wd);
    int rc = check_common(g, "adamw", n, params, grads, lr, out, 2, suffixes, err);
    if (rc) return rc;
    if (!is_f32_scalar(g, step)) {
        char s1[160];
        return tr_error_set(err, TR_ERR_SHAPE, "adamw: step node %d is %s, expected a 0-d f32 node", step,
                            step >= 0 && step < tr_graph_n_nodes(g) ? node_str(g, step, s1, sizeof s1) : "not a node");
    }
    struct tr_attrs at;
    memset(&at, 0, sizeof at);
    at.floats[0] = b1, at.floats[1] = b2, at.floats[2] = eps, at.floats[3] = wd;
    for (int i = 0; i < n; i++) {
        int p = params[i];
        int m = state_param(g, p, suffixes[0], TR_DTYPE_F32);
        int v = state_param(g, p, suffixes[1], TR_DTYPE_F32);
        int g32 = to_dtype(g, grads[i], TR_DTYPE_F32);
        /* m' = β1·m + (1−β1)·g ; v' = β2·v + (1−β2)·g² */
        int m2 = tr_add(g, tr_scale(g, m, b1, 0.0f), tr_scale(g, g32, 1.0f - b1, 0.0f));
        int v2 = tr_add(g, tr_scale(g, v, b2, 0.0f), tr_scale(g, tr_mul(g, g32, g32), 1.0f - b2, 0.0f));
        int in[5] = {p, m2, v2, lr, step};
        int p2 = m2 < 0 || v2 < 0 ? -1 : tr_graph_add_node(g, TR_OP_ADAMW_STEP, 5, in, &at);
        out[i] = (struct tr_optim_update){p, p2, {m, v}, {m2, v2}};
    }
    return finish(g, "adamw", err);
}

int tr_sgd(struct tr_graph *g, float momentum, float weight_decay, int n, const int *params, const int *grads, int lr,
           struct tr_optim_update *out, struct tr_error *err) {
    static const char *const suffixes[] = {"sgd_v"};
    if (!(momentum >= 0.0f && momentum < 1.0f))
        return tr_error_set(err, TR_ERR_INVALID, "sgd: momentum %g, expected 0 <= momentum < 1", (double)momentum);
    if (!(weight_decay >= 0.0f) || isinf(weight_decay))
        return tr_error_set(err, TR_ERR_INVALID, "sgd: weight_decay %g, expected a finite value >= 0",
                            (double)weight_decay);
    int rc = check_common(g, "sgd", n, params, grads, lr, out, momentum > 0.0f, suffixes, err);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        int p = params[i];
        /* f64 parameters keep f64 (finite-difference checks); the rest update in f32 */
        enum tr_dtype pdt = (enum tr_dtype)tr_node_dtype(g, p);
        enum tr_dtype cdt = pdt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32;
        int pc = to_dtype(g, p, cdt), d = to_dtype(g, grads[i], cdt);
        if (weight_decay > 0.0f) d = tr_add(g, d, tr_scale(g, pc, weight_decay, 0.0f));
        int vel = -1, v2 = d;
        if (momentum > 0.0f) {
            vel = state_param(g, p, suffixes[0], cdt);
            v2 = tr_add(g, tr_scale(g, vel, momentum, 0.0f), d);
        }
        int p2 = to_dtype(g, tr_sub(g, pc, tr_mul(g, to_dtype(g, lr, cdt), v2)), pdt);
        out[i] = (struct tr_optim_update){p, p2, {vel, -1}, {momentum > 0.0f ? v2 : -1, -1}};
    }
    return finish(g, "sgd", err);
}
