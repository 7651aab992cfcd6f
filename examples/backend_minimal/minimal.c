/* backend_minimal: a complete trident backend in one file, built out of tree against the
 * installed package (see CMakeLists.txt beside it, and docs/writing-a-backend.md, which
 * walks through this file).
 *
 * It runs matmul and the elementwise ops (add sub mul div, gelu tanh relu silu sigmoid
 * exp neg sqrt rsqrt scale) on f32 with its own plain loops, and every other op (or
 * dtype) through the shared kernels' default implementation, host->kernels_run. It
 * counts both, and reports the counts in get_stats' notes. It trains too: the graph's
 * updates (new weights, optimizer moments) are written back into their PARAMs' host
 * memory at the end of each execute.
 *
 * Options, from the INI section [backend.minimal]:
 *   own_ops = true|false   false sends every op to the shared kernels (to bisect a
 *                          disagreement: if it goes away, the bug is in these loops)
 *   verbose = true|false   log, at compile, which nodes run here
 * Any other key is refused by name, with the file and line it came from.
 *
 * Like every plugin it links nothing of trident's core: everything reaches it through
 * the host table (struct tr_host_api) handed to tr_backend_entry. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "trident/backend.h"

#define MB_NAME "minimal"
#define MB_MAX_IN 16

static const struct tr_host_api *host; /* set once by tr_backend_entry */

struct mb_context {
    struct tr_kernels *k; /* the shared kernels on our device, for what we don't run */
    int own_ops;
    int verbose;
};

struct mb_program {
    tr_graph_t g;        /* the host keeps it alive until program_free */
    int n_nodes;
    void **bufs;         /* per node: its output buffer; NULL for INPUT/PARAM/CONST */
    unsigned char *own;  /* per node: 1 if these loops run it */
    uint64_t bytes;
    uint64_t own_matmul, own_elementwise, shared; /* counts of the last execute */
};

/* ---- options ---- */

static int parse_bool(const struct tr_option *o, int *out, struct tr_error *err) {
    const char *v = o->value;
    if (!strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1")) *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "0")) *out = 0;
    else
        return host->error_set(err, TR_ERR_INVALID, "%s:%d: [backend." MB_NAME "] %s = %s: expected true or false",
                               o->file ? o->file : "?", o->line, o->key, v);
    return TR_OK;
}

/* Every key is checked before anything is set up, so a typo costs nothing. */
static int read_options(const struct tr_backend_params *p, struct mb_context *c, struct tr_error *err) {
    c->own_ops = 1;
    c->verbose = 0;
    for (int i = 0; i < p->n_options; i++) {
        const struct tr_option *o = &p->options[i];
        int rc = TR_OK;
        if (!strcmp(o->key, "own_ops")) rc = parse_bool(o, &c->own_ops, err);
        else if (!strcmp(o->key, "verbose")) rc = parse_bool(o, &c->verbose, err);
        else
            rc = host->error_set(err, TR_ERR_INVALID,
                                 "%s:%d: [backend." MB_NAME "] unknown key '%s' (known: own_ops, verbose)",
                                 o->file ? o->file : "?", o->line, o->key);
        if (rc != TR_OK) return rc;
    }
    return TR_OK;
}

/* ---- init and free ---- */

static int mb_init(const struct tr_host_api *h, const struct tr_backend_params *params, void **ctx,
                   struct tr_error *err) {
    /* params grows by appending too: read only what its struct_size covers. */
    if (!params || params->struct_size < sizeof *params ||
        TR_ABI_GET_MAJOR(params->abi_version) != TR_ABI_MAJOR)
        return h->error_set(err, TR_ERR_INVALID, "backend " MB_NAME ": params missing or of another ABI major");
    if (params->device_type != TR_DEVICE_CPU)
        return h->error_set(err, TR_ERR_UNSUPPORTED, "backend " MB_NAME " runs on the cpu only (device %d asked)",
                            params->device_type);
    struct mb_context tmp;
    int rc = read_options(params, &tmp, err);
    if (rc != TR_OK) return rc;
    struct mb_context *c = h->alloc(sizeof *c);
    if (!c) return h->error_set(err, TR_ERR_NOMEM, "backend " MB_NAME ": out of memory");
    *c = tmp;
    rc = h->kernels_init(&c->k, TR_DEVICE_CPU, params->device_index, err);
    if (rc != TR_OK) {
        h->free(c);
        return rc;
    }
    *ctx = c;
    return TR_OK;
}

static void mb_free(void *ctx) {
    struct mb_context *c = ctx;
    if (!c) return;
    host->kernels_free(c->k);
    host->free(c);
}

/* ---- what we run ourselves ---- */

static int own_elementwise(int op) {
    switch (op) {
    case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV:
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE: return 1;
    default: return 0;
    }
}

/* The host asks this when it reports what a backend does itself; ops we answer 0 for
 * still run, through the shared kernels. */
static int mb_supports_op(void *ctx, int op, int dtype) {
    (void)ctx;
    return dtype == TR_DTYPE_F32 && (op == TR_OP_MATMUL || own_elementwise(op));
}

static int64_t numel(tr_graph_t g, int id) {
    int64_t n = 1;
    const int64_t *s = host->node_shape(g, id);
    for (int d = 0; d < host->node_ndim(g, id); d++) n *= s[d];
    return n;
}

/* Strides (in elements) that read input `in` broadcast to node `out`'s shape: 0 along
 * the axes `in` does not have or has as 1 (numpy rules, aligned at the right). */
static void bcast_strides(tr_graph_t g, int in, int out, int64_t *st) {
    int nd = host->node_ndim(g, out), ni = host->node_ndim(g, in);
    const int64_t *s = host->node_shape(g, in);
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int di = d - (nd - ni);
        int64_t e = di >= 0 ? s[di] : 1;
        st[d] = e == 1 ? 0 : stride;
        stride *= e;
    }
}

static float unary(int op, const struct tr_attrs *at, float x) {
    switch (op) {
    case TR_OP_GELU:
        if (at->ints[0]) return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
        return 0.5f * x * (1.0f + erff(x * 0.70710678f));
    case TR_OP_TANH: return tanhf(x);
    case TR_OP_RELU: return x > 0.0f ? x : 0.0f;
    case TR_OP_SILU: return x / (1.0f + expf(-x));
    case TR_OP_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case TR_OP_EXP: return expf(x);
    case TR_OP_NEG: return -x;
    case TR_OP_SQRT: return sqrtf(x);
    case TR_OP_RSQRT: return 1.0f / sqrtf(x);
    default: return at->floats[0] * x + at->floats[1]; /* SCALE */
    }
}

/* out = a op b (or op a), any rank, numpy broadcasting, walked with an index counter. */
static void run_elementwise(tr_graph_t g, int id, const float *a, const float *b, float *out) {
    int op = host->node_op(g, id), nd = host->node_ndim(g, id);
    const struct tr_attrs *at = host->node_attrs(g, id);
    const int64_t *shape = host->node_shape(g, id);
    int64_t n = numel(g, id), sa[TR_MAX_DIMS], sb[TR_MAX_DIMS], idx[TR_MAX_DIMS] = {0}, ia = 0, ib = 0;
    if (!b) {
        for (int64_t i = 0; i < n; i++) out[i] = unary(op, at, a[i]);
        return;
    }
    bcast_strides(g, host->node_input(g, id, 0), id, sa);
    bcast_strides(g, host->node_input(g, id, 1), id, sb);
    for (int64_t i = 0; i < n; i++) {
        float x = a[ia], y = b[ib];
        out[i] = op == TR_OP_ADD ? x + y : op == TR_OP_SUB ? x - y : op == TR_OP_MUL ? x * y : x / y;
        for (int d = nd - 1; d >= 0; d--) { /* next index, moving both input offsets */
            ia += sa[d];
            ib += sb[d];
            if (++idx[d] < shape[d]) break;
            ia -= sa[d] * shape[d];
            ib -= sb[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/* c (...,M,N) = alpha · op(a) (...,M,K) · op(b) (...,K,N); b may be 2-D (shared by every
 * batch). Batch axes other than that must match: otherwise compile leaves the node to
 * the shared kernels. Accumulates in double: the reference is the oracle, not a race. */
static void run_matmul(tr_graph_t g, int id, const float *a, const float *b, float *c) {
    const struct tr_attrs *at = host->node_attrs(g, id);
    int ia = host->node_input(g, id, 0), ib = host->node_input(g, id, 1);
    int nda = host->node_ndim(g, ia), ndb = host->node_ndim(g, ib), ndc = host->node_ndim(g, id);
    const int64_t *sa = host->node_shape(g, ia), *sc = host->node_shape(g, id);
    int ta = (int)at->ints[0], tb = (int)at->ints[1];
    float alpha = at->floats[0] != 0.0f ? at->floats[0] : 1.0f; /* 0: unset, ops.h's default is 1 */
    int64_t M = sc[ndc - 2], N = sc[ndc - 1], K = ta ? sa[nda - 2] : sa[nda - 1];
    int64_t batch = numel(g, id) / (M * N), b_step = ndb == 2 ? 0 : K * N;
    for (int64_t p = 0; p < batch; p++) {
        const float *A = a + p * M * K, *B = b + p * b_step;
        float *C = c + p * M * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0;
                for (int64_t kk = 0; kk < K; kk++)
                    acc += (double)(ta ? A[kk * M + i] : A[i * K + kk]) * (tb ? B[j * K + kk] : B[kk * N + j]);
                C[i * N + j] = (float)(alpha * acc);
            }
    }
}

/* Whether these loops take node id: f32 everywhere, and for matmul batch axes equal (or
 * b 2-D), since run_matmul does not broadcast them. */
static int take_node(const struct mb_context *c, tr_graph_t g, int id) {
    int op = host->node_op(g, id);
    if (!c->own_ops || !mb_supports_op(NULL, op, host->node_dtype(g, id))) return 0;
    for (int i = 0; i < host->node_n_inputs(g, id); i++)
        if (host->node_dtype(g, host->node_input(g, id, i)) != TR_DTYPE_F32) return 0;
    if (op != TR_OP_MATMUL) return 1;
    int ia = host->node_input(g, id, 0), ib = host->node_input(g, id, 1), nd = host->node_ndim(g, id);
    int nda = host->node_ndim(g, ia), ndb = host->node_ndim(g, ib);
    if (nda != nd || (ndb != 2 && ndb != nd)) return 0;
    const int64_t *sa = host->node_shape(g, ia), *sb = host->node_shape(g, ib), *sc = host->node_shape(g, id);
    for (int d = 0; d < nd - 2; d++)
        if (sa[d] != sc[d] || (ndb == nd && sb[d] != sc[d])) return 0;
    return 1;
}

/* ---- compile, execute ---- */

static void mb_program_free(void *ctx, void *prog) {
    struct mb_context *c = ctx;
    struct mb_program *p = prog;
    if (!p) return;
    for (int i = 0; p->bufs && i < p->n_nodes; i++)
        if (p->bufs[i]) host->kernels_dealloc(c->k, p->bufs[i]);
    host->free(p->bufs);
    host->free(p->own);
    host->free(p);
}

/* One buffer per computed node, allocated once here: execute allocates nothing. */
static int mb_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {
    struct mb_context *c = ctx;
    struct mb_program *p = host->alloc(sizeof *p);
    if (!p) return host->error_set(err, TR_ERR_NOMEM, "backend " MB_NAME ": out of memory");
    memset(p, 0, sizeof *p);
    p->g = g;
    p->n_nodes = host->graph_n_nodes(g);
    size_t n = (size_t)(p->n_nodes > 0 ? p->n_nodes : 1);
    p->bufs = host->alloc(n * sizeof *p->bufs);
    p->own = host->alloc(n);
    if (!p->bufs || !p->own) {
        mb_program_free(c, p);
        return host->error_set(err, TR_ERR_NOMEM, "backend " MB_NAME ": out of memory");
    }
    memset(p->bufs, 0, n * sizeof *p->bufs);
    memset(p->own, 0, n);
    int taken = 0;
    for (int id = 0; id < p->n_nodes; id++) {
        int op = host->node_op(g, id);
        if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST) continue;
        size_t bytes = (size_t)numel(g, id) * host->dtype_size((enum tr_dtype)host->node_dtype(g, id));
        int rc = host->kernels_alloc(c->k, bytes ? bytes : 1, &p->bufs[id], err);
        if (rc != TR_OK) {
            mb_program_free(c, p);
            return rc;
        }
        p->bytes += bytes;
        p->own[id] = (unsigned char)take_node(c, g, id);
        taken += p->own[id];
        if (c->verbose && p->own[id])
            host->log(TR_LOG_INFO, "backend " MB_NAME ": node %d '%s' (%s) runs here", id, host->node_name(g, id),
                      host->op_name(op));
    }
    host->log(TR_LOG_DEBUG, "backend " MB_NAME ": %d of %d nodes run here", taken, p->n_nodes);
    *prog = p;
    return TR_OK;
}

/* Where node id's value is during this execute: inputs and weights in place (host
 * memory, which is our device's memory on the cpu), computed nodes in their buffer. */
static const void *value_of(const struct mb_program *p, int id, int n_inputs, const struct tr_tensor *inputs) {
    int op = host->node_op(p->g, id);
    if (op == TR_OP_INPUT) {
        for (int i = 0; i < n_inputs; i++)
            if (host->graph_input(p->g, i) == id) return inputs[i].data;
        return NULL;
    }
    if (op == TR_OP_PARAM || op == TR_OP_CONST) return host->node_data(p->g, id);
    return p->bufs[id];
}

/* A contiguous tensor for node id's value (what kernels_run takes). */
static void bind(tr_graph_t g, int id, const void *data, struct tr_tensor *t) {
    memset(t, 0, sizeof *t);
    t->data = (void *)data;
    t->dtype = host->node_dtype(g, id);
    t->ndim = host->node_ndim(g, id);
    const int64_t *shape = host->node_shape(g, id);
    int64_t stride = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = stride;
        stride *= shape[d];
    }
    t->device = TR_DEVICE_CPU;
}

static int mb_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                      struct tr_tensor *outputs, struct tr_error *err) {
    struct mb_context *c = ctx;
    struct mb_program *p = prog;
    tr_graph_t g = p->g;
    p->own_matmul = p->own_elementwise = p->shared = 0;
    for (int id = 0; id < p->n_nodes; id++) {
        int op = host->node_op(g, id);
        if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST) continue;
        int n_in = host->node_n_inputs(g, id);
        if (n_in < 0 || n_in > MB_MAX_IN)
            return host->error_set(err, TR_ERR_UNSUPPORTED, "backend " MB_NAME ": node %d '%s' has %d inputs", id,
                                   host->node_name(g, id), n_in);
        const void *in[MB_MAX_IN] = {0};
        for (int i = 0; i < n_in; i++) {
            int src = host->node_input(g, id, i);
            if (!(in[i] = value_of(p, src, n_inputs, inputs)))
                return host->error_set(err, TR_ERR_INTERNAL, "backend " MB_NAME ": node %d '%s': input %d has no value",
                                       id, host->node_name(g, id), i);
        }
        if (p->own[id] && op == TR_OP_MATMUL) {
            run_matmul(g, id, in[0], in[1], p->bufs[id]);
            p->own_matmul++;
        } else if (p->own[id]) {
            run_elementwise(g, id, in[0], n_in > 1 ? in[1] : NULL, p->bufs[id]);
            p->own_elementwise++;
        } else { /* the shared kernels' default implementation */
            struct tr_tensor tin[MB_MAX_IN], tout;
            for (int i = 0; i < n_in; i++) bind(g, host->node_input(g, id, i), in[i], &tin[i]);
            bind(g, id, p->bufs[id], &tout);
            int rc = host->kernels_run(c->k, op, host->node_attrs(g, id), n_in, tin, &tout, err);
            if (rc != TR_OK) return rc;
            p->shared++;
        }
    }
    for (int i = 0; i < n_outputs; i++) {
        int id = host->graph_output(g, i);
        size_t bytes = (size_t)numel(g, id) * host->dtype_size((enum tr_dtype)host->node_dtype(g, id));
        int rc = host->kernels_to_host(c->k, outputs[i].data, value_of(p, id, n_inputs, inputs), bytes, err);
        if (rc != TR_OK) return rc;
    }
    /* Training state (ABI 1.1): each updated PARAM takes its new value, after every node
     * of the step has read the old one. Its host memory is ours to write. */
    int n_updates = tr_host_api_has_updates(host) ? host->graph_n_updates(g) : 0;
    for (int u = 0; u < n_updates; u++) {
        int param = host->graph_update_param(g, u), value = host->graph_update_value(g, u);
        size_t bytes = (size_t)numel(g, param) * host->dtype_size((enum tr_dtype)host->node_dtype(g, param));
        int rc = host->kernels_to_host(c->k, (void *)host->node_data(g, param), value_of(p, value, n_inputs, inputs),
                                       bytes, err);
        if (rc != TR_OK) return rc;
    }
    return TR_OK;
}

static int mb_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    (void)ctx;
    (void)err;
    struct mb_program *p = prog;
    st->kernel_calls = p->own_matmul + p->own_elementwise + p->shared;
    st->peak_bytes = p->bytes;
    snprintf(st->notes, sizeof st->notes, "ran itself: %llu matmul, %llu elementwise; shared kernels: %llu",
             (unsigned long long)p->own_matmul, (unsigned long long)p->own_elementwise,
             (unsigned long long)p->shared);
    return TR_OK;
}

/* ---- the vtable and the one exported symbol ---- */

static const struct tr_backend_i vtable = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = MB_NAME,
    .description = "example out-of-tree backend: own loops for matmul and elementwise f32, shared kernels for the rest",
    .caps = TR_CAP_CPU | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_TRAINING,
    .init = mb_init,
    .free = mb_free,
    .supports_op = mb_supports_op,
    .compile = mb_compile,
    .execute = mb_execute,
    .program_free = mb_program_free,
    .get_stats = mb_get_stats,
    .sync = NULL, /* the updated PARAMs' host memory is current after every execute */
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *h,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    /* A host of another major may lay its table out differently: touch nothing of it. */
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR || !h) return TR_ERR_PLUGIN;
    /* Every 1.0 slot must be there; the 1.1 update slots are read only where the table
     * has them (tr_host_api_has_updates), so a 1.0 host runs our plain graphs. */
    if (h->struct_size < TR_HOST_API_MIN_SIZE_1_0)
        return h->error_set(err, TR_ERR_PLUGIN, "backend " MB_NAME ": host table of %u bytes, need %zu (host ABI %u.%u)",
                            h->struct_size, (size_t)TR_HOST_API_MIN_SIZE_1_0, TR_ABI_GET_MAJOR(host_abi),
                            TR_ABI_GET_MINOR(host_abi));
    host = h;
    *iface = &vtable;
    return TR_OK;
}
