/* The graph IR: node storage, names and scopes, the builder, accessors.
 *
 * Shape and dtype inference is in graph_infer.c, the text dump and the FLOP count in
 * graph_dump.c; both read the graph only through the public accessors.
 *
 * Sticky errors, as chosen here: once a builder call fails, the graph is dead. Every
 * later builder call (tr_input ... tr_attention, tr_graph_add_node, set_name,
 * set_output) returns -1 or the first error's status without adding a node and without
 * a new message, whatever its inputs. A dead graph never grows, so ids handed out before
 * the error stay valid and the first message is the one that explains what went wrong.
 * Scopes still push and pop so that model code stays balanced. Accessors keep working.
 *
 * Attributes are stored normalised, so that a backend reads them without re-deriving:
 * negative axes are made non-negative (SLICE, CONCAT, SUM/MEAN/MAX), SLICE start/end
 * are made non-negative, the -1 of a RESHAPE is replaced by the inferred extent, and the
 * defaults ops.h gives a 0 are filled in: MATMUL's alpha 1 and ATTENTION's (and
 * ATTENTION_GRAD's) scale 1/sqrt(D), rounded once from double (tr_attention_scale).
 *
 * Names are unique: find() must be unambiguous because weights are bound by name. An
 * explicit name that is already taken is an error; an automatic name ("<op>_<id>",
 * in the current scope) that collides with an explicit one is left out of the index.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/graph.h"
#include "graph_nodes.h"

/* graph_infer.c: dtype and shape of a node of `op` over `in`; may normalise attrs in
 * place. On failure writes the reason (shapes included) into msg and returns a status. */
int tr_graph_infer_node(const struct tr_graph *g, int op, int n_in, const int *in, struct tr_attrs *attrs,
                        int *dtype, int *ndim, int64_t *shape, char *msg, size_t msg_size);

#define SCOPE_DEPTH_MAX 64

struct tr_node {
    int op;
    int n_inputs;
    int inputs[TR_MAX_INPUTS];
    struct tr_attrs attrs;
    int dtype;
    int ndim;
    int64_t shape[TR_MAX_DIMS];
    char name[TR_NAME_MAX];
    void *data;       /* CONST: owned copy; PARAM: bound by the caller, not owned */
    int hash_next;    /* next node in the same name bucket, -1 at the end */
    int hashed;       /* whether the name is in the index */
};

struct tr_output {
    int id;
    char name[TR_NAME_MAX];
};

struct tr_graph {
    struct tr_node *nodes;
    int n_nodes, cap_nodes;

    int *inputs, n_inputs, cap_inputs;
    int *params, n_params, cap_params;
    struct tr_update { int param, value; } *updates;
    int n_updates, cap_updates;
    struct tr_output *outputs;
    int n_outputs, cap_outputs;

    int *buckets; /* name index: chains through tr_node.hash_next */
    int n_buckets;

    char scope[TR_NAME_MAX];
    int scope_len;
    int scope_stack[SCOPE_DEPTH_MAX];
    int scope_depth;
    int instance;        /* tr_graph_set_instance */
    char omitted[TR_GRAPH_OMIT_MAX][TR_NAME_MAX]; /* tr_graph_omit */
    int n_omitted;

    struct tr_error err; /* the first builder error */
};

/* ---- errors ---- */

static int graph_failv(struct tr_graph *g, int status, const char *fmt, va_list ap) {
    if (g->err.status == TR_OK) tr_error_setv(&g->err, status, fmt, ap);
    return status;
}

__attribute__((format(printf, 3, 4))) static int graph_fail(struct tr_graph *g, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    graph_failv(g, status, fmt, ap);
    va_end(ap);
    return status;
}

int tr_graph_status(const struct tr_graph *g, struct tr_error *err) {
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "graph: NULL graph");
    if (g->err.status == TR_OK) return TR_OK;
    if (err) *err = g->err;
    return g->err.status;
}

/* ---- growable arrays ---- */

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return TR_OK;
    int c = *cap ? *cap : 16;
    while (c < need) {
        if (c > INT_MAX / 2) return TR_ERR_NOMEM;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return TR_ERR_NOMEM;
    *p = q;
    *cap = c;
    return TR_OK;
}

static int push_int(struct tr_graph *g, int **arr, int *n, int *cap, int v) {
    if (grow((void **)arr, cap, *n + 1, sizeof **arr))
        return graph_fail(g, TR_ERR_NOMEM, "graph: out of memory with %d nodes", g->n_nodes);
    (*arr)[(*n)++] = v;
    return TR_OK;
}

/* ---- the name index ---- */

static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int index_lookup(const struct tr_graph *g, const char *name) {
    if (!g->n_buckets) return -1;
    for (int i = g->buckets[name_hash(name) & (uint32_t)(g->n_buckets - 1)]; i >= 0; i = g->nodes[i].hash_next)
        if (strcmp(g->nodes[i].name, name) == 0) return i;
    return -1;
}

static void index_link(struct tr_graph *g, int id) {
    int *head = &g->buckets[name_hash(g->nodes[id].name) & (uint32_t)(g->n_buckets - 1)];
    g->nodes[id].hash_next = *head;
    g->nodes[id].hashed = 1;
    *head = id;
}

static void index_unlink(struct tr_graph *g, int id) {
    if (!g->nodes[id].hashed) return;
    int *p = &g->buckets[name_hash(g->nodes[id].name) & (uint32_t)(g->n_buckets - 1)];
    while (*p >= 0 && *p != id) p = &g->nodes[*p].hash_next;
    if (*p == id) *p = g->nodes[id].hash_next;
    g->nodes[id].hashed = 0;
    g->nodes[id].hash_next = -1;
}

/* Keeps chains short: about one node per bucket. */
static int index_reserve(struct tr_graph *g, int n_nodes) {
    if (n_nodes <= g->n_buckets) return TR_OK;
    int nb = g->n_buckets ? g->n_buckets : 64;
    while (nb < n_nodes) {
        if (nb > INT_MAX / 2) return TR_ERR_NOMEM;
        nb *= 2;
    }
    int *b = malloc((size_t)nb * sizeof *b);
    if (!b) return TR_ERR_NOMEM;
    free(g->buckets);
    g->buckets = b;
    g->n_buckets = nb;
    for (int i = 0; i < nb; i++) b[i] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].hashed) index_link(g, i);
    return TR_OK;
}

/* ---- scopes and names ---- */

int tr_graph_push_scope(struct tr_graph *g, const char *fmt, ...) {
    if (!g) return TR_ERR_INVALID;
    char part[TR_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(part, sizeof part, fmt, ap);
    va_end(ap);
    int depth = g->scope_depth++;
    if (depth >= SCOPE_DEPTH_MAX)
        return graph_fail(g, TR_ERR_INVALID, "graph: scopes nested deeper than %d at '%s'", SCOPE_DEPTH_MAX,
                          g->scope);
    g->scope_stack[depth] = g->scope_len;
    if (len <= 0) return TR_OK; /* an empty scope adds nothing */
    int sep = g->scope_len > 0;
    if (g->scope_len + sep + len >= TR_NAME_MAX)
        return graph_fail(g, TR_ERR_INVALID, "graph: scope '%s' + '%s' is longer than %d characters", g->scope,
                          part, TR_NAME_MAX - 1);
    if (sep) g->scope[g->scope_len++] = '.';
    memcpy(g->scope + g->scope_len, part, (size_t)len + 1);
    g->scope_len += len;
    return TR_OK;
}

void tr_graph_pop_scope(struct tr_graph *g) {
    if (!g) return;
    if (g->scope_depth == 0) {
        graph_fail(g, TR_ERR_INTERNAL, "graph: pop_scope without a matching push_scope");
        return;
    }
    int depth = --g->scope_depth;
    if (depth < SCOPE_DEPTH_MAX) {
        g->scope_len = g->scope_stack[depth];
        g->scope[g->scope_len] = '\0';
    }
}

/* "<scope>.<name>" into out; a status (name too long). */
static int scoped_name(const struct tr_graph *g, const char *name, char out[TR_NAME_MAX]) {
    int n = g->scope_len ? snprintf(out, TR_NAME_MAX, "%s.%s", g->scope, name) : snprintf(out, TR_NAME_MAX, "%s", name);
    return n >= 0 && n < TR_NAME_MAX ? TR_OK : TR_ERR_INVALID;
}

/* The scoped name of a node that is not a PARAM: in an instance k > 0, "name@k", so a
 * block built again names its nodes apart while its PARAMs are shared. */
static int node_name(const struct tr_graph *g, const char *name, char out[TR_NAME_MAX]) {
    if (scoped_name(g, name, out) != TR_OK) return TR_ERR_INVALID;
    if (g->instance <= 0) return TR_OK;
    size_t len = strlen(out);
    int n = snprintf(out + len, TR_NAME_MAX - len, "@%d", g->instance);
    return n >= 0 && (size_t)n < TR_NAME_MAX - len ? TR_OK : TR_ERR_INVALID;
}

static void auto_name(const struct tr_graph *g, int op, int id, char out[TR_NAME_MAX]) {
    char base[48];
    snprintf(base, sizeof base, "%s_%d", tr_op_name(op), id);
    if (scoped_name(g, base, out) != TR_OK) snprintf(out, TR_NAME_MAX, "%s", base);
}

/* Resolves the name a new node `id` of `op` gets: the scoped explicit name, or an
 * automatic one when name is NULL or empty. Sets *explicit_. */
static int resolve_name(struct tr_graph *g, int op, int id, const char *name, char out[TR_NAME_MAX],
                        int *explicit_) {
    *explicit_ = name && name[0];
    if (!*explicit_) {
        auto_name(g, op, id, out);
        return TR_OK;
    }
    if ((op == TR_OP_PARAM ? scoped_name(g, name, out) : node_name(g, name, out)) != TR_OK)
        return graph_fail(g, TR_ERR_INVALID, "node %d %s: name '%s%s%s' is longer than %d characters", id,
                          tr_op_name(op), g->scope, g->scope_len ? "." : "", name, TR_NAME_MAX - 1);
    int other = index_lookup(g, out);
    if (other >= 0)
        return graph_fail(g, TR_ERR_INVALID, "node %d %s: name '%s' is already used by node %d (%s)", id,
                          tr_op_name(op), out, other, tr_op_name(g->nodes[other].op));
    return TR_OK;
}

/* ---- adding nodes ---- */

static int valid_id(const struct tr_graph *g, int id) { return g && id >= 0 && id < g->n_nodes; }

/* Appends a node whose op, inputs, attrs, dtype and shape are already checked. */
static int append_node(struct tr_graph *g, const struct tr_node *proto, int explicit_) {
    int id = g->n_nodes;
    if (grow((void **)&g->nodes, &g->cap_nodes, id + 1, sizeof *g->nodes) || index_reserve(g, id + 1))
        return graph_fail(g, TR_ERR_NOMEM, "node %d %s '%s': out of memory", id, tr_op_name(proto->op), proto->name);
    struct tr_node *n = &g->nodes[id];
    *n = *proto;
    n->hash_next = -1;
    n->hashed = 0;
    g->n_nodes++;
    if (explicit_ || index_lookup(g, n->name) < 0) index_link(g, id);
    return id;
}

static int add_leaf(struct tr_graph *g, int op, const char *name, enum tr_dtype dt, int ndim,
                    const int64_t *shape, const struct tr_attrs *attrs, const void *data) {
    if (!g || g->err.status) return -1;
    int id = g->n_nodes, explicit_;
    struct tr_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    if (resolve_name(g, op, id, name, n.name, &explicit_)) return -1;
    if ((unsigned)dt >= TR_DTYPE_COUNT) {
        graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': unknown dtype %d", id, tr_op_name(op), n.name, (int)dt);
        return -1;
    }
    if (ndim < 0 || ndim > TR_MAX_DIMS || (ndim > 0 && !shape)) {
        graph_fail(g, TR_ERR_SHAPE, "node %d %s '%s': %d dimensions%s (0 to %d, with a shape)", id, tr_op_name(op),
                   n.name, ndim, ndim > 0 && !shape ? " and no shape" : "", TR_MAX_DIMS);
        return -1;
    }
    uint64_t bytes;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            char buf[160];
            graph_fail(g, TR_ERR_SHAPE, "node %d %s '%s': shape %s has a negative extent on axis %d", id,
                       tr_op_name(op), n.name, tr_shape_str(ndim, shape, buf, sizeof buf), i);
            return -1;
        }
        n.shape[i] = shape[i];
    }
    if (!tr_shape_bytes(ndim, shape, dt, &bytes)) {
        char buf[160];
        graph_fail(g, TR_ERR_SHAPE, "node %d %s '%s': %s%s is more than %llu bytes (2^48)", id, tr_op_name(op), n.name,
                   tr_dtype_name(dt), tr_shape_str(ndim, shape, buf, sizeof buf),
                   (unsigned long long)TR_MAX_TENSOR_BYTES);
        return -1;
    }
    n.dtype = dt;
    n.ndim = ndim;
    if (attrs) n.attrs = *attrs;
    if (op == TR_OP_CONST) {
        if (!data) {
            graph_fail(g, TR_ERR_INVALID, "node %d const '%s': no data", id, n.name);
            return -1;
        }
        size_t nbytes = (size_t)bytes;
        n.data = malloc(nbytes ? nbytes : 1);
        if (!n.data) {
            graph_fail(g, TR_ERR_NOMEM, "node %d const '%s': out of memory for %zu bytes", id, n.name, nbytes);
            return -1;
        }
        memcpy(n.data, data, nbytes);
    }
    int r = append_node(g, &n, explicit_);
    if (r < 0) {
        free(n.data);
        return -1;
    }
    if (op == TR_OP_INPUT && push_int(g, &g->inputs, &g->n_inputs, &g->cap_inputs, id)) return -1;
    if (op == TR_OP_PARAM && push_int(g, &g->params, &g->n_params, &g->cap_params, id)) return -1;
    return id;
}

int tr_input(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape) {
    return add_leaf(g, TR_OP_INPUT, name, dt, ndim, shape, NULL, NULL);
}

int tr_param(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape,
             float init_mean, float init_std) {
    if (!g || g->err.status) return -1;
    if (!isfinite(init_mean) || !isfinite(init_std) || init_std < 0) {
        char full[TR_NAME_MAX];
        if (!name || !name[0] || scoped_name(g, name, full)) auto_name(g, TR_OP_PARAM, g->n_nodes, full);
        graph_fail(g, TR_ERR_INVALID, "node %d param '%s': init normal(mean %g, std %g) needs finite values, std >= 0",
                   g->n_nodes, full, (double)init_mean, (double)init_std);
        return -1;
    }
    struct tr_attrs a;
    memset(&a, 0, sizeof a);
    a.floats[0] = init_mean;
    a.floats[1] = init_std;
    char full[TR_NAME_MAX];
    int other = g->instance > 0 && name && name[0] && scoped_name(g, name, full) == TR_OK ? index_lookup(g, full) : -1;
    if (other >= 0) { /* an instance declares its block's PARAMs again: the same ones */
        const struct tr_node *o = &g->nodes[other];
        if (o->op == TR_OP_PARAM && o->dtype == (int)dt && tr_shape_equal(o->ndim, o->shape, ndim, shape) &&
            o->attrs.floats[0] == init_mean && o->attrs.floats[1] == init_std)
            return other;
        char a1[96], a2[96];
        graph_fail(g, TR_ERR_INVALID, "instance %d: param '%s' %s%s is declared before as %s %s%s", g->instance, full,
                   tr_dtype_name(dt), tr_shape_str(ndim, shape, a1, sizeof a1), tr_op_name(o->op),
                   tr_dtype_name((enum tr_dtype)o->dtype), tr_shape_str(o->ndim, o->shape, a2, sizeof a2));
        return -1;
    }
    return add_leaf(g, TR_OP_PARAM, name, dt, ndim, shape, &a, NULL);
}

int tr_graph_set_instance(struct tr_graph *g, int k) {
    if (!g) return TR_ERR_INVALID;
    if (g->err.status) return g->err.status;
    if (k < 0) return graph_fail(g, TR_ERR_INVALID, "tr_graph_set_instance: %d, expected >= 0", k);
    g->instance = k;
    return TR_OK;
}

int tr_param_set_fresh(struct tr_graph *g, int id) {
    if (!g || g->err.status) return g ? g->err.status : TR_ERR_INVALID;
    if (!valid_id(g, id) || g->nodes[id].op != TR_OP_PARAM) {
        graph_fail(g, TR_ERR_INVALID, "tr_param_set_fresh: node %d is not a PARAM", id);
        return g->err.status;
    }
    g->nodes[id].attrs.ints[0] = 1;
    return TR_OK;
}

int tr_param_is_fresh(const struct tr_graph *g, int id) {
    return valid_id(g, id) && g->nodes[id].op == TR_OP_PARAM && g->nodes[id].attrs.ints[0] == 1;
}

int tr_graph_omit(struct tr_graph *g, const char *prefix) {
    if (!g || g->err.status) return g ? g->err.status : TR_ERR_INVALID;
    if (!prefix || !prefix[0] || strlen(prefix) >= TR_NAME_MAX)
        return graph_fail(g, TR_ERR_INVALID, "tr_graph_omit: the prefix is empty or %d characters or more",
                          TR_NAME_MAX);
    for (int i = 0; i < g->n_omitted; i++)
        if (strcmp(g->omitted[i], prefix) == 0) return TR_OK;
    if (g->n_omitted == TR_GRAPH_OMIT_MAX)
        return graph_fail(g, TR_ERR_INVALID, "tr_graph_omit: more than %d prefixes", TR_GRAPH_OMIT_MAX);
    strcpy(g->omitted[g->n_omitted++], prefix);
    return TR_OK;
}

int tr_graph_n_omitted(const struct tr_graph *g) { return g ? g->n_omitted : 0; }

const char *tr_graph_omitted(const struct tr_graph *g, int i) {
    return g && i >= 0 && i < g->n_omitted ? g->omitted[i] : NULL;
}

int tr_const(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape,
             const void *data) {
    return add_leaf(g, TR_OP_CONST, name, dt, ndim, shape, NULL, data);
}

int tr_const_scalar(struct tr_graph *g, enum tr_dtype dt, double v) {
    if (!g || g->err.status) return -1;
    if ((unsigned)dt >= TR_DTYPE_COUNT) return add_leaf(g, TR_OP_CONST, NULL, dt, 0, NULL, NULL, NULL);
    uint64_t storage = 0;
    struct tr_tensor t;
    tr_tensor_make(&t, &storage, dt, 0, NULL, NULL);
    tr_tensor_set_f64(&t, 0, v);
    return add_leaf(g, TR_OP_CONST, NULL, dt, 0, NULL, NULL, &storage);
}

int tr_graph_add_node(struct tr_graph *g, enum tr_op op, int n_inputs, const int *inputs,
                      const struct tr_attrs *attrs) {
    if (!g || g->err.status) return -1;
    int id = g->n_nodes;
    struct tr_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    if ((unsigned)op >= TR_OP_COUNT) {
        graph_fail(g, TR_ERR_INVALID, "node %d: unknown op %d", id, (int)op);
        return -1;
    }
    auto_name(g, op, id, n.name);
    const char *on = tr_op_name(op);
    if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST) {
        graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': leaves are made with tr_input, tr_param or tr_const", id, on,
                   n.name);
        return -1;
    }
    int arity = tr_op_arity(op);
    const int qkv = op == TR_OP_ATTENTION || op == TR_OP_ATTENTION_LSE, rel_grad = op == TR_OP_ATTENTION_REL_GRAD;
    int ok = qkv        ? n_inputs == 3 || n_inputs == 4
           : rel_grad  ? n_inputs == 6 || n_inputs == 8
           : arity < 0 ? n_inputs >= 1 && n_inputs <= TR_MAX_INPUTS
                       : n_inputs == arity;
    if (!ok) {
        const char *want = qkv ? "3 or 4" : rel_grad ? "6 or 8" : arity < 0 ? "1 to 8" : NULL;
        char buf[16];
        if (!want) snprintf(buf, sizeof buf, "%d", arity), want = buf;
        graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': %d inputs, expected %s", id, on, n.name, n_inputs, want);
        return -1;
    }
    if (n_inputs > 0 && !inputs) {
        graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': no input array", id, on, n.name);
        return -1;
    }
    for (int i = 0; i < n_inputs; i++) {
        if (!valid_id(g, inputs[i])) {
            if (inputs[i] == -1)
                graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': input %d is -1 (no node; an earlier call failed?)",
                           id, on, n.name, i);
            else
                graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': input %d is %d, not a node id in [0,%d)", id, on,
                           n.name, i, inputs[i], id);
            return -1;
        }
        n.inputs[i] = inputs[i];
    }
    n.n_inputs = n_inputs;
    if (attrs) {
        n.attrs = *attrs;
    } else if (op == TR_OP_SCALE) {
        /* SCALE's alpha 0 is a real 0, so no attrs means the identity. MATMUL's alpha and
         * ATTENTION's scale have a meaning for 0, resolved below by tr_graph_infer_node. */
        n.attrs.floats[0] = 1.0f;
    }
    char msg[TR_ERROR_MSG_MAX - 2 * TR_NAME_MAX];
    int rc = tr_graph_infer_node(g, op, n_inputs, n.inputs, &n.attrs, &n.dtype, &n.ndim, n.shape, msg, sizeof msg);
    if (rc != TR_OK) {
        graph_fail(g, rc, "node %d %s '%s': %s", id, on, n.name, msg);
        return -1;
    }
    uint64_t bytes;
    if (!tr_shape_bytes(n.ndim, n.shape, n.dtype, &bytes)) {
        char buf[160];
        graph_fail(g, TR_ERR_SHAPE, "node %d %s '%s': its output %s%s is more than %llu bytes (2^48)", id, on, n.name,
                   tr_dtype_name((enum tr_dtype)n.dtype), tr_shape_str(n.ndim, n.shape, buf, sizeof buf),
                   (unsigned long long)TR_MAX_TENSOR_BYTES);
        return -1;
    }
    return append_node(g, &n, 0);
}

/* ---- builders ---- */

int tr_matmul(struct tr_graph *g, int a, int b, int trans_a, int trans_b) {
    struct tr_attrs at = attrs0();
    at.ints[0] = trans_a;
    at.ints[1] = trans_b;
    at.floats[0] = 1.0f;
    return node2(g, TR_OP_MATMUL, a, b, &at);
}

int tr_add(struct tr_graph *g, int a, int b) { struct tr_attrs at = attrs0(); return node2(g, TR_OP_ADD, a, b, &at); }
int tr_sub(struct tr_graph *g, int a, int b) { struct tr_attrs at = attrs0(); return node2(g, TR_OP_SUB, a, b, &at); }
int tr_mul(struct tr_graph *g, int a, int b) { struct tr_attrs at = attrs0(); return node2(g, TR_OP_MUL, a, b, &at); }
int tr_div(struct tr_graph *g, int a, int b) { struct tr_attrs at = attrs0(); return node2(g, TR_OP_DIV, a, b, &at); }

int tr_gelu(struct tr_graph *g, int x, int approximate_tanh) {
    struct tr_attrs at = attrs0();
    at.ints[0] = approximate_tanh;
    return node1(g, TR_OP_GELU, x, &at);
}

int tr_unary(struct tr_graph *g, enum tr_op op, int x) {
    if (!g || g->err.status) return -1;
    if (!tr_op_is_elementwise_unary(op) || op == TR_OP_SCALE) {
        char name[TR_NAME_MAX];
        auto_name(g, op, g->n_nodes, name);
        graph_fail(g, TR_ERR_INVALID,
                   "node %d %s '%s': tr_unary takes gelu tanh relu silu sigmoid exp neg sqrt rsqrt, not %s (op %d)",
                   g->n_nodes, tr_op_name(op), name, tr_op_name(op), (int)op);
        return -1;
    }
    struct tr_attrs at = attrs0();
    return node1(g, op, x, &at);
}

int tr_scale(struct tr_graph *g, int x, float alpha, float beta) {
    struct tr_attrs at = attrs0();
    at.floats[0] = alpha;
    at.floats[1] = beta;
    return node1(g, TR_OP_SCALE, x, &at);
}

int tr_softmax(struct tr_graph *g, int x) { struct tr_attrs at = attrs0(); return node1(g, TR_OP_SOFTMAX, x, &at); }

int tr_layer_norm(struct tr_graph *g, int x, int gamma, int beta, float eps) {
    struct tr_attrs at = attrs0();
    at.floats[0] = eps;
    int in[3] = {x, gamma, beta};
    return tr_graph_add_node(g, TR_OP_LAYER_NORM, 3, in, &at);
}

int tr_embedding(struct tr_graph *g, int table, int ids) { return tr_embedding_pad(g, table, ids, -1); }

int tr_embedding_pad(struct tr_graph *g, int table, int ids, int64_t padding_idx) {
    struct tr_attrs at = attrs0();
    if (padding_idx >= 0) {
        at.ints[0] = 1;
        at.ints[1] = padding_idx;
        at.n_ints = 2;
    }
    return node2(g, TR_OP_EMBEDDING, table, ids, &at);
}

/* Attributes holding a list of n ints (a shape: i64, or a permutation: int; the other
 * NULL). n out of range, or n > 0 with no list (n_ints -1), is reported by inference,
 * with the node's name. */
static struct tr_attrs attrs_list(int n, const int64_t *i64, const int *i32) {
    struct tr_attrs at = attrs0();
    at.n_ints = n;
    for (int i = 0; (i64 || i32) && i < n && i < TR_ATTR_INTS; i++) at.ints[i] = i64 ? i64[i] : i32[i];
    if (n > 0 && !i64 && !i32) at.n_ints = -1;
    return at;
}

int tr_reshape(struct tr_graph *g, int x, int ndim, const int64_t *shape) {
    struct tr_attrs at = attrs_list(ndim, shape, NULL);
    return node1(g, TR_OP_RESHAPE, x, &at);
}

int tr_transpose(struct tr_graph *g, int x, int ndim, const int *perm) {
    struct tr_attrs at = attrs_list(ndim, NULL, perm);
    return node1(g, TR_OP_TRANSPOSE, x, &at);
}

int tr_slice(struct tr_graph *g, int x, int axis, int64_t start, int64_t end, int64_t step) {
    struct tr_attrs at = attrs0();
    at.ints[0] = axis;
    at.ints[1] = start;
    at.ints[2] = end;
    at.ints[3] = step;
    at.n_ints = 4;
    return node1(g, TR_OP_SLICE, x, &at);
}

int tr_update_slice(struct tr_graph *g, int x, int update, int start, int axis) {
    struct tr_attrs at = attrs0();
    at.ints[0] = axis;
    at.n_ints = 1;
    int in[3] = {x, update, start};
    return tr_graph_add_node(g, TR_OP_UPDATE_SLICE, 3, in, &at);
}

int tr_conv2d(struct tr_graph *g, int x, int w, int bias, int stride, int padding, int pad_end) {
    struct tr_attrs at = attrs0();
    at.ints[0] = stride;
    at.ints[1] = padding;
    at.ints[2] = 1;
    at.ints[3] = 1;
    at.ints[4] = pad_end;
    at.n_ints = 5;
    int in[3] = {x, w, bias};
    return tr_graph_add_node(g, TR_OP_CONV2D, bias < 0 ? 2 : 3, in, &at);
}

int tr_group_norm(struct tr_graph *g, int x, int gamma, int beta, int groups, float eps, int silu) {
    struct tr_attrs at = attrs0();
    at.ints[0] = groups;
    at.ints[1] = silu != 0;
    at.n_ints = 2;
    at.floats[0] = eps;
    int in[3] = {x, gamma, beta};
    return tr_graph_add_node(g, TR_OP_GROUP_NORM, 3, in, &at);
}

int tr_timestep_embedding(struct tr_graph *g, int t, int dim, int flip_sin_to_cos, float shift, float max_period) {
    struct tr_attrs at = attrs0();
    at.ints[0] = dim;
    at.ints[1] = flip_sin_to_cos != 0;
    at.n_ints = 2;
    at.floats[0] = shift;
    at.floats[1] = max_period;
    return node1(g, TR_OP_TIMESTEP_EMBEDDING, t, &at);
}

static int allreduce_node(struct tr_graph *g, enum tr_op op, int x, int ranks, int bucket, float scale) {
    struct tr_attrs at = attrs0();
    at.ints[0] = ranks;
    at.ints[1] = bucket;
    at.n_ints = 2;
    at.floats[0] = scale;
    return node1(g, op, x, &at);
}

int tr_allreduce(struct tr_graph *g, int x, int ranks, int bucket, float scale) {
    return allreduce_node(g, TR_OP_ALLREDUCE, x, ranks, bucket, scale);
}

int tr_allreduce_start(struct tr_graph *g, int x, int ranks, int bucket) {
    return allreduce_node(g, TR_OP_ALLREDUCE_START, x, ranks, bucket, 1.0f);
}

int tr_allreduce_wait(struct tr_graph *g, int started, float scale) {
    if (!g || started < 0 || started >= g->n_nodes) return node1(g, TR_OP_ALLREDUCE_WAIT, started, NULL); /* says why */
    const struct tr_attrs *s = &g->nodes[started].attrs;
    if (g->nodes[started].op != TR_OP_ALLREDUCE_START) {
        graph_fail(g, TR_ERR_INVALID, "tr_allreduce_wait: node %d is %s, not an allreduce_start", started,
                   tr_op_name(g->nodes[started].op));
        return -1;
    }
    return allreduce_node(g, TR_OP_ALLREDUCE_WAIT, started, (int)s->ints[0], (int)s->ints[1], scale);
}

int tr_broadcast(struct tr_graph *g, int x, int ndim, const int64_t *shape) {
    struct tr_attrs at = attrs0();
    if (ndim < 0 || ndim > TR_ATTR_INTS || (ndim > 0 && !shape)) {
        graph_fail(g, TR_ERR_INVALID, "tr_broadcast: %d dimensions, expected 0 to %d and a shape", ndim,
                   TR_ATTR_INTS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) at.ints[i] = shape[i];
    at.n_ints = ndim;
    return node1(g, TR_OP_BROADCAST, x, &at);
}

int tr_upsample_nearest(struct tr_graph *g, int x, int factor) {
    if (x < 0 || x >= tr_graph_n_nodes(g) || tr_node_ndim(g, x) != 4 || factor < 1) {
        graph_fail(g, TR_ERR_SHAPE, "tr_upsample_nearest: x must be a 4-D (N,H,W,C) node and factor >= 1 (got %d)",
                   factor);
        return -1;
    }
    const int64_t *s = tr_node_shape(g, x), f = factor;
    const int64_t six[6] = {s[0], s[1], 1, s[2], 1, s[3]}, big[6] = {s[0], s[1], f, s[2], f, s[3]},
                  out[4] = {s[0], s[1] * f, s[2] * f, s[3]};
    return tr_reshape(g, tr_broadcast(g, tr_reshape(g, x, 6, six), 6, big), 4, out);
}

int tr_concat(struct tr_graph *g, int n, const int *xs, int axis) {
    struct tr_attrs at = attrs0();
    at.ints[0] = axis;
    at.n_ints = 1;
    return tr_graph_add_node(g, TR_OP_CONCAT, n, xs, &at);
}

int tr_reduce(struct tr_graph *g, enum tr_op op, int x, int axis, int keepdims) {
    if (!g || g->err.status) return -1;
    if (op != TR_OP_SUM && op != TR_OP_MEAN && op != TR_OP_MAX) {
        char name[TR_NAME_MAX];
        auto_name(g, op, g->n_nodes, name);
        graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': tr_reduce takes sum, mean or max, not %s (op %d)", g->n_nodes,
                   tr_op_name(op), name, tr_op_name(op), (int)op);
        return -1;
    }
    struct tr_attrs at = attrs0();
    at.ints[0] = axis;
    at.ints[1] = keepdims;
    at.n_ints = 2;
    return node1(g, op, x, &at);
}

int tr_cast(struct tr_graph *g, int x, enum tr_dtype to) {
    struct tr_attrs at = attrs0();
    at.ints[0] = to;
    at.n_ints = 1;
    return node1(g, TR_OP_CAST, x, &at);
}

int tr_attention(struct tr_graph *g, int q, int k, int v, int mask, float scale, int causal, int window) {
    struct tr_attrs at = attrs0();
    at.floats[0] = scale;
    at.ints[0] = causal;
    at.ints[1] = window;
    at.n_ints = 2;
    int in[4] = {q, k, v, mask};
    return tr_graph_add_node(g, TR_OP_ATTENTION, mask < 0 ? 3 : 4, in, &at);
}

int tr_attention_rel(struct tr_graph *g, int q, int k, int v, int rel_h, int rel_w, float scale) {
    struct tr_attrs at = attrs0();
    at.floats[0] = scale;
    int in[5] = {q, k, v, rel_h, rel_w};
    return tr_graph_add_node(g, TR_OP_ATTENTION_REL, 5, in, &at);
}

int tr_rms_norm(struct tr_graph *g, int x, int w, float eps, int add_one) {
    struct tr_attrs at = attrs0();
    at.floats[0] = eps;
    at.ints[0] = add_one;
    at.n_ints = 1;
    return node2(g, TR_OP_RMS_NORM, x, w, &at);
}

int tr_rope(struct tr_graph *g, int x, int pos, float base, int rot_dims) {
    struct tr_attrs at = attrs0();
    at.floats[0] = base;
    at.ints[0] = rot_dims;
    at.ints[1] = 0;
    at.n_ints = 2;
    return node2(g, TR_OP_ROPE, x, pos, &at);
}

/* ---- names and outputs ---- */

/* What set_name and set_output check first: a graph, no sticky error, id a node. */
static int check_named_call(struct tr_graph *g, const char *fn, int id, const char *name) {
    if (!g) return TR_ERR_INVALID;
    if (g->err.status) return g->err.status;
    if (!valid_id(g, id))
        return graph_fail(g, TR_ERR_INVALID, "graph: %s('%s'): %d is not a node id in [0,%d)", fn,
                          name ? name : "(null)", id, g->n_nodes);
    return TR_OK;
}

int tr_graph_set_name(struct tr_graph *g, int id, const char *name) {
    int rc = check_named_call(g, "set_name", id, name);
    if (rc) return rc;
    struct tr_node *n = &g->nodes[id];
    if (!name || !name[0])
        return graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': set_name with an empty name", id, tr_op_name(n->op),
                          n->name);
    char full[TR_NAME_MAX];
    if (n->op == TR_OP_PARAM ? scoped_name(g, name, full) : node_name(g, name, full))
        return graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': name '%s%s%s' is longer than %d characters", id,
                          tr_op_name(n->op), n->name, g->scope, g->scope_len ? "." : "", name, TR_NAME_MAX - 1);
    int other = index_lookup(g, full);
    if (other == id) return TR_OK;
    if (other >= 0)
        return graph_fail(g, TR_ERR_INVALID, "node %d %s '%s': name '%s' is already used by node %d (%s)", id,
                          tr_op_name(n->op), n->name, full, other, tr_op_name(g->nodes[other].op));
    index_unlink(g, id);
    memcpy(n->name, full, sizeof full);
    index_link(g, id);
    return TR_OK;
}

int tr_graph_set_output(struct tr_graph *g, int id, const char *name) {
    int rc = check_named_call(g, "set_output", id, name);
    if (rc) return rc;
    const char *nm = name && name[0] ? name : g->nodes[id].name;
    if (strlen(nm) >= TR_NAME_MAX)
        return graph_fail(g, TR_ERR_INVALID, "graph: output name '%s' is longer than %d characters", nm,
                          TR_NAME_MAX - 1);
    for (int i = 0; i < g->n_outputs; i++)
        if (strcmp(g->outputs[i].name, nm) == 0)
            return graph_fail(g, TR_ERR_INVALID, "graph: output '%s' set twice (nodes %d and %d)", nm,
                              g->outputs[i].id, id);
    if (grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof *g->outputs))
        return graph_fail(g, TR_ERR_NOMEM, "graph: out of memory for output '%s'", nm);
    struct tr_output *o = &g->outputs[g->n_outputs++];
    o->id = id;
    snprintf(o->name, sizeof o->name, "%s", nm);
    return TR_OK;
}

int tr_graph_add_update(struct tr_graph *g, int param, int value) {
    if (!g) return TR_ERR_INVALID;
    if (g->err.status) return g->err.status;
    if (!valid_id(g, param) || g->nodes[param].op != TR_OP_PARAM)
        return graph_fail(g, TR_ERR_INVALID, "graph: update: %d is not a PARAM node", param);
    const struct tr_node *p = &g->nodes[param];
    if (!valid_id(g, value) || value == param)
        return graph_fail(g, TR_ERR_INVALID, "graph: update of '%s': %d is not a computed node", p->name, value);
    const struct tr_node *v = &g->nodes[value];
    int same = v->dtype == p->dtype && v->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = v->shape[d] == p->shape[d];
    if (!same) {
        char a[128], b[128];
        tr_shape_str(v->ndim, v->shape, a, sizeof a);
        tr_shape_str(p->ndim, p->shape, b, sizeof b);
        return graph_fail(g, TR_ERR_SHAPE, "graph: update of '%s' by node %d '%s': %s%s, expected the param's %s%s",
                          p->name, value, v->name, tr_dtype_name((enum tr_dtype)v->dtype), a,
                          tr_dtype_name((enum tr_dtype)p->dtype), b);
    }
    for (int i = 0; i < g->n_updates; i++) {
        if (g->updates[i].param == param)
            return graph_fail(g, TR_ERR_INVALID, "graph: param '%s' is updated twice (by nodes %d and %d)", p->name,
                              g->updates[i].value, value);
        if (g->updates[i].value == value)
            return graph_fail(g, TR_ERR_INVALID, "graph: node %d '%s' updates two params ('%s' and '%s')", value,
                              v->name, g->nodes[g->updates[i].param].name, p->name);
    }
    if (grow((void **)&g->updates, &g->cap_updates, g->n_updates + 1, sizeof *g->updates))
        return graph_fail(g, TR_ERR_NOMEM, "graph: out of memory for the update of '%s'", p->name);
    g->updates[g->n_updates++] = (struct tr_update){param, value};
    return TR_OK;
}

/* ---- lifetime ---- */

int tr_graph_init(struct tr_graph **out, struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "graph: init with a NULL out pointer");
    *out = calloc(1, sizeof **out);
    if (!*out) return tr_error_set(err, TR_ERR_NOMEM, "graph: out of memory");
    return TR_OK;
}

void tr_graph_free(struct tr_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == TR_OP_CONST) free(g->nodes[i].data);
    free(g->nodes);
    free(g->inputs);
    free(g->params);
    free(g->updates);
    free(g->outputs);
    free(g->buckets);
    free(g);
}

/* ---- reading ---- */

int tr_graph_n_nodes(const struct tr_graph *g) { return g ? g->n_nodes : 0; }
int tr_graph_n_inputs(const struct tr_graph *g) { return g ? g->n_inputs : 0; }
int tr_graph_input(const struct tr_graph *g, int i) { return g && i >= 0 && i < g->n_inputs ? g->inputs[i] : -1; }
int tr_graph_n_outputs(const struct tr_graph *g) { return g ? g->n_outputs : 0; }
int tr_graph_output(const struct tr_graph *g, int i) {
    return g && i >= 0 && i < g->n_outputs ? g->outputs[i].id : -1;
}
const char *tr_graph_output_name(const struct tr_graph *g, int i) {
    return g && i >= 0 && i < g->n_outputs ? g->outputs[i].name : NULL;
}
int tr_graph_n_params(const struct tr_graph *g) { return g ? g->n_params : 0; }
int tr_graph_param(const struct tr_graph *g, int i) { return g && i >= 0 && i < g->n_params ? g->params[i] : -1; }
int tr_graph_n_updates(const struct tr_graph *g) { return g ? g->n_updates : 0; }
int tr_graph_update_param(const struct tr_graph *g, int i) {
    return g && i >= 0 && i < g->n_updates ? g->updates[i].param : -1;
}
int tr_graph_update_value(const struct tr_graph *g, int i) {
    return g && i >= 0 && i < g->n_updates ? g->updates[i].value : -1;
}
int tr_graph_find(const struct tr_graph *g, const char *name) { return g && name ? index_lookup(g, name) : -1; }

int tr_node_op(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].op : -1; }
int tr_node_n_inputs(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].n_inputs : -1; }
int tr_node_input(const struct tr_graph *g, int id, int i) {
    return valid_id(g, id) && i >= 0 && i < g->nodes[id].n_inputs ? g->nodes[id].inputs[i] : -1;
}
int tr_node_dtype(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].dtype : -1; }
int tr_node_ndim(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].ndim : -1; }
const int64_t *tr_node_shape(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].shape : NULL; }
const struct tr_attrs *tr_node_attrs(const struct tr_graph *g, int id) {
    return valid_id(g, id) ? &g->nodes[id].attrs : NULL;
}
const char *tr_node_name(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].name : NULL; }
const void *tr_node_data(const struct tr_graph *g, int id) { return valid_id(g, id) ? g->nodes[id].data : NULL; }

struct tr_tensor tr_node_tensor(const struct tr_graph *g, int id) {
    struct tr_tensor t;
    memset(&t, 0, sizeof t);
    if (valid_id(g, id)) {
        const struct tr_node *n = &g->nodes[id];
        tr_tensor_make(&t, NULL, (enum tr_dtype)n->dtype, n->ndim, n->shape, NULL);
    }
    return t;
}

int tr_graph_bind_param(struct tr_graph *g, int id, const void *data, struct tr_error *err) {
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "graph: bind_param on a NULL graph");
    if (!valid_id(g, id))
        return tr_error_set(err, TR_ERR_INVALID, "graph: bind_param: %d is not a node id in [0,%d)", id, g->n_nodes);
    struct tr_node *n = &g->nodes[id];
    if (n->op != TR_OP_PARAM)
        return tr_error_set(err, TR_ERR_INVALID, "node %d %s '%s': bind_param needs a param node, this is %s", id,
                            tr_op_name(n->op), n->name, tr_op_name(n->op));
    if (!data) return tr_error_set(err, TR_ERR_INVALID, "node %d param '%s': bind_param with NULL data", id, n->name);
    n->data = (void *)data;
    return TR_OK;
}
