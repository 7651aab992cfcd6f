/* The plugin IR (pir.h).
 *
 * INPUT nodes are never marked dead by tr_pir_mark_dead: execute() receives inputs in
 * the graph's feed order, so an unused input must keep its slot in inputs[]. */
#include <stdlib.h>
#include <string.h>
#include "pir.h"

int64_t tr_pir_numel(const struct tr_pir_node *n) {
    int64_t c = 1;
    for (int i = 0; i < n->ndim; i++) c *= n->shape[i];
    return c;
}

size_t tr_pir_nbytes(const struct tr_pir_node *n) {
    return (size_t)tr_pir_numel(n) * tr_dtype_size((enum tr_dtype)n->dtype);
}

int tr_pir_grow(void **buf, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *nb = realloc(*buf, (size_t)c * elem);
    if (!nb) return -1;
    *buf = nb;
    *cap = c;
    return 0;
}

int tr_pir_read(const char *backend, const struct tr_host_api *host, tr_graph_t g, struct tr_pir *p,
                struct tr_error *err) {
    int rc = tr_pir_from_graph(host, g, p, err);
    return rc == TR_OK ? TR_OK : tr_error_prefix(err, "%s", backend);
}

void tr_pir_free(struct tr_pir *p) {
    if (!p) return;
    for (int i = 0; i < p->n_owned; i++) free(p->owned[i]);
    free(p->owned);
    free(p->nodes);
    free(p->inputs);
    free(p->outputs);
    free(p->update_param);
    memset(p, 0, sizeof *p);
}

int tr_pir_append(struct tr_pir *p, const struct tr_pir_node *n) {
    if (!p || !n || n->n_in < 0 || n->n_in > TR_PIR_MAX_IN) return -1;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] < 0 || n->in[i] >= p->n) return -1;
    if (tr_pir_grow((void **)&p->nodes, &p->cap, p->n + 1, sizeof *p->nodes)) return -1;
    p->nodes[p->n] = *n;
    return p->n++;
}

int tr_pir_own(struct tr_pir *p, void *mem, struct tr_error *err) {
    if (!mem) return TR_OK;
    if (tr_pir_grow((void **)&p->owned, &p->cap_owned, p->n_owned + 1, sizeof *p->owned)) {
        free(mem); /* the caller handed it over: don't leak it on failure */
        return tr_error_set(err, TR_ERR_NOMEM, "pir: out of memory keeping folded data (%d blocks held)", p->n_owned);
    }
    p->owned[p->n_owned++] = mem;
    return TR_OK;
}

static void index_outputs(struct tr_pir *p) {
    for (int i = 0; i < p->n; i++) p->nodes[i].output_index = -1;
    for (int i = 0; i < p->n_outputs; i++) {
        int o = p->outputs[i];
        if (o >= 0 && o < p->n && p->nodes[o].output_index < 0) p->nodes[o].output_index = i;
    }
}

int tr_pir_from_graph(const struct tr_host_api *host, tr_graph_t g, struct tr_pir *p, struct tr_error *err) {
    memset(p, 0, sizeof *p);
    if (!host || !g) return tr_error_set(err, TR_ERR_INVALID, "pir: host table or graph is NULL");
    int n = host->graph_n_nodes(g);
    int ni = host->graph_n_inputs(g), no = host->graph_n_outputs(g);
    /* a 1.0 host has no update slots: its graphs have no updates */
    int nu = tr_host_api_has_updates(host) ? host->graph_n_updates(g) : 0;
    if (n < 0 || ni < 0 || no < 0 || nu < 0)
        return tr_error_set(err, TR_ERR_INVALID, "pir: graph reports %d nodes, %d inputs, %d outputs, %d updates", n, ni,
                            no, nu);
    if (no == 0) return tr_error_set(err, TR_ERR_INVALID, "pir: graph has no outputs (tr_graph_set_output marks them)");
    p->nodes = calloc(n ? (size_t)n : 1, sizeof *p->nodes);
    p->inputs = malloc((ni ? (size_t)ni : 1) * sizeof *p->inputs);
    p->outputs = malloc((size_t)(no + nu) * sizeof *p->outputs);
    p->update_param = malloc((nu ? (size_t)nu : 1) * sizeof *p->update_param);
    if (!p->nodes || !p->inputs || !p->outputs || !p->update_param) {
        tr_pir_free(p);
        return tr_error_set(err, TR_ERR_NOMEM, "pir: out of memory for a graph of %d nodes", n);
    }
    p->cap = n ? n : 1;
    static const struct tr_attrs no_attrs;
    for (int id = 0; id < n; id++) {
        struct tr_pir_node *d = &p->nodes[id];
        const char *name = host->node_name(g, id);
        d->op = host->node_op(g, id);
        d->n_in = host->node_n_inputs(g, id);
        d->dtype = host->node_dtype(g, id);
        d->ndim = host->node_ndim(g, id);
        d->name = name ? name : "";
        d->graph_id = id;
        d->output_index = -1;
        if (d->n_in < 0 || d->n_in > TR_PIR_MAX_IN || d->ndim < 0 || d->ndim > TR_MAX_DIMS) {
            tr_pir_free(p);
            return tr_error_set(err, TR_ERR_INVALID, "pir: node %d %s '%s' has %d inputs (at most %d) and %d dims (at most %d)",
                                id, host->op_name(d->op), name ? name : "", host->node_n_inputs(g, id), TR_PIR_MAX_IN,
                                host->node_ndim(g, id), TR_MAX_DIMS);
        }
        for (int i = 0; i < d->n_in; i++) {
            d->in[i] = host->node_input(g, id, i);
            if (d->in[i] < 0 || d->in[i] >= id) {
                int bad = d->in[i];
                tr_pir_free(p);
                return tr_error_set(err, TR_ERR_INVALID, "pir: node %d '%s' input %d is node %d (expected an earlier node)",
                                    id, name ? name : "", i, bad);
            }
        }
        const int64_t *sh = host->node_shape(g, id);
        if (sh) memcpy(d->shape, sh, (size_t)d->ndim * sizeof *sh);
        const struct tr_attrs *at = host->node_attrs(g, id);
        d->attrs = at ? *at : no_attrs;
        d->data = host->node_data(g, id);
    }
    for (int i = 0; i < ni; i++) {
        int id = host->graph_input(g, i);
        if (id < 0 || id >= n || p->nodes[id].op != TR_OP_INPUT) {
            tr_pir_free(p);
            return tr_error_set(err, TR_ERR_INVALID, "pir: graph input %d is node %d, not an INPUT node", i, id);
        }
        p->inputs[i] = id;
    }
    for (int i = 0; i < no; i++) {
        int id = host->graph_output(g, i);
        if (id < 0 || id >= n) {
            tr_pir_free(p);
            return tr_error_set(err, TR_ERR_INVALID, "pir: graph output %d is node %d, outside [0,%d)", i, id, n);
        }
        p->outputs[i] = id;
    }
    for (int u = 0; u < nu; u++) {
        int pa = host->graph_update_param(g, u), v = host->graph_update_value(g, u);
        if (pa < 0 || pa >= n || p->nodes[pa].op != TR_OP_PARAM || v < 0 || v >= n) {
            tr_pir_free(p);
            return tr_error_set(err, TR_ERR_INVALID, "pir: graph update %d: param node %d, value node %d", u, pa, v);
        }
        p->update_param[u] = pa;
        p->outputs[no + u] = v;
    }
    p->n = n;
    p->n_inputs = ni;
    p->n_results = no;
    p->n_updates = nu;
    p->n_outputs = no + nu;
    index_outputs(p);
    return TR_OK;
}

void tr_pir_count_uses(const struct tr_pir *p, int *uses) {
    memset(uses, 0, (size_t)p->n * sizeof *uses);
    for (int i = 0; i < p->n; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        for (int j = 0; j < d->n_in; j++) uses[d->in[j]]++;
    }
    for (int i = 0; i < p->n_outputs; i++) uses[p->outputs[i]]++;
}

int tr_pir_mark_dead(struct tr_pir *p) {
    if (p->n == 0) return 0;
    char *live = calloc((size_t)p->n, 1);
    if (!live) return 0; /* marking nothing is always safe */
    for (int i = 0; i < p->n_outputs; i++) live[p->outputs[i]] = 1;
    for (int i = 0; i < p->n_inputs; i++) live[p->inputs[i]] = 1;
    for (int u = 0; u < p->n_updates; u++) live[p->update_param[u]] = 1; /* its memory is written */
    /* consumers come after producers, so one backward sweep reaches every dependency */
    for (int i = p->n - 1; i >= 0; i--) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (!live[i] || d->dead) continue;
        for (int j = 0; j < d->n_in; j++) live[d->in[j]] = 1;
    }
    int marked = 0;
    for (int i = 0; i < p->n; i++)
        if (!live[i] && !p->nodes[i].dead) {
            p->nodes[i].dead = 1;
            marked++;
        }
    free(live);
    return marked;
}

int tr_pir_compact(struct tr_pir *p, int *remap, struct tr_error *err) {
    int *map = remap ? remap : malloc((p->n ? (size_t)p->n : 1) * sizeof *map);
    if (!map) return tr_error_set(err, TR_ERR_NOMEM, "pir: out of memory compacting %d nodes", p->n);
    int rc = TR_OK, m = 0;
    for (int i = 0; i < p->n; i++) map[i] = p->nodes[i].dead ? -1 : m++;
    /* check everything before moving anything, so a failure leaves p as it was */
    for (int i = 0; i < p->n && !rc; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        for (int j = 0; j < d->n_in; j++)
            if (d->in[j] < 0 || d->in[j] >= i || map[d->in[j]] < 0) {
                rc = tr_error_set(err, TR_ERR_INTERNAL, "pir: live node %d %s '%s' reads node %d, which is dead or not earlier",
                                  i, tr_op_name(d->op), d->name ? d->name : "", d->in[j]);
                break;
            }
    }
    for (int i = 0; i < p->n_outputs && !rc; i++)
        if (map[p->outputs[i]] < 0)
            rc = tr_error_set(err, TR_ERR_INTERNAL, "pir: graph output %d (node %d '%s') was marked dead", i, p->outputs[i],
                              p->nodes[p->outputs[i]].name ? p->nodes[p->outputs[i]].name : "");
    for (int u = 0; u < p->n_updates && !rc; u++)
        if (map[p->update_param[u]] < 0)
            rc = tr_error_set(err, TR_ERR_INTERNAL, "pir: updated param '%s' (node %d) was marked dead",
                              p->nodes[p->update_param[u]].name ? p->nodes[p->update_param[u]].name : "",
                              p->update_param[u]);
    for (int i = 0; i < p->n_inputs && !rc; i++)
        if (map[p->inputs[i]] < 0)
            rc = tr_error_set(err, TR_ERR_INTERNAL, "pir: graph input %d (node %d '%s') was marked dead; inputs keep their feed slot",
                              i, p->inputs[i], p->nodes[p->inputs[i]].name ? p->nodes[p->inputs[i]].name : "");
    if (!rc) {
        for (int i = 0; i < p->n; i++) {
            if (map[i] < 0) continue;
            struct tr_pir_node *d = &p->nodes[map[i]];
            if (map[i] != i) *d = p->nodes[i];
            for (int j = 0; j < d->n_in; j++) d->in[j] = map[d->in[j]];
        }
        p->n = m;
        for (int i = 0; i < p->n_inputs; i++) p->inputs[i] = map[p->inputs[i]];
        for (int i = 0; i < p->n_outputs; i++) p->outputs[i] = map[p->outputs[i]];
        for (int u = 0; u < p->n_updates; u++) p->update_param[u] = map[p->update_param[u]];
        index_outputs(p);
    }
    if (!remap) free(map);
    return rc;
}

int tr_pir_reads_in_place(const struct tr_pir_node *n, int input) {
    if (n->op == TR_OP_ADAMW_STEP) return input == 0;
    /* the kernels write only the slice when out is x: a cache update costs the slice */
    if (n->op == TR_OP_UPDATE_SLICE) return input == 0;
    if (n->op == TR_OP_SCALE || tr_op_is_elementwise_unary(n->op) || tr_op_is_elementwise_binary(n->op))
        return 1; /* the caller checked that the operand has the output's shape */
    return 0;
}

int tr_pir_same_shape(const struct tr_pir_node *a, const struct tr_pir_node *b) {
    return tr_shape_equal(a->ndim, a->shape, b->ndim, b->shape);
}

int tr_pir_donatable(const struct tr_pir *p, int u, int (*reads_in_place)(const struct tr_pir_node *n, int input)) {
    if (u < 0 || u >= p->n_updates) return 0;
    int pa = p->update_param[u], v = tr_pir_update_value(p, u);
    const struct tr_pir_node *vn = &p->nodes[v];
    if (vn->dead || vn->op == TR_OP_INPUT || vn->op == TR_OP_PARAM || vn->op == TR_OP_CONST || vn->op == TR_OP_RESHAPE)
        return 0;
    for (int i = 0; i < p->n_outputs; i++)
        if ((p->outputs[i] == v && i != p->n_results + u) || p->outputs[i] == pa) return 0;
    /* pa and its views: a view's readers read pa */
    char *alias = calloc((size_t)p->n, 1);
    if (!alias) return 0;
    alias[pa] = 1;
    int ok = 1;
    for (int i = pa + 1; i < p->n && ok; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        for (int j = 0; j < d->n_in && ok; j++) {
            if (!alias[d->in[j]]) continue;
            if (d->op == TR_OP_RESHAPE) {
                alias[i] = 1;
                for (int r = 0; r < p->n_outputs; r++) ok = ok && p->outputs[r] != i;
            } else if (i > v) ok = 0;
            else if (i == v) ok = d->in[j] == pa && tr_pir_same_shape(&p->nodes[pa], vn) && p->nodes[pa].dtype == vn->dtype && reads_in_place(d, j);
        }
    }
    free(alias);
    return ok;
}
