/* The loader's test plugins: one small, complete backend, built once per variant with
 * -DTP_VARIANT_<NAME>. Each variant breaks the contract in one way (or, for good,
 * newminor and minimal, keeps it) so that tests/test_loader.c can check the loader's
 * verdict on each. Like a third-party backend, it links nothing of trident: every
 * service, the kernels included, comes through the host table.
 *
 *   good        complete: compile keeps the graph, execute runs the nodes in order
 *               through host->kernels_run; options: mode = eager, unknown keys refused
 *   wrong         as good, but its first f32 output is 1% off (the harness must notice)
 *   noentry     exports tr_backend_entri (a typo) instead of tr_backend_entry
 *   entryfail   tr_backend_entry returns an error with a message
 *   nullvtable  tr_backend_entry returns TR_OK and no vtable
 *   badmajor    abi_version 2.0
 *   short       struct_size one slot short of ABI 1.0's required slots
 *   nullslot    execute is NULL
 *   noname      name is NULL
 *   badname     name holds a line break (it would forge a line of a table)
 *   initfail    init returns an error with a message
 *   newminor    abi_version 1.7, a larger vtable with slots this host does not know
 *   minimal     struct_size = TR_BACKEND_I_MIN_SIZE_1_0, no supports_op; get_stats is
 *               set but lies past struct_size, so the host must not call it
 * The ABI's edges, written against whatever TR_ABI_MINOR this header has (tests/test_abi.c):
 *   nextminor   abi_version TR_ABI_MINOR + 1: this header's vtable, then a slot the host
 *               cannot know, which poisons the stats if ever called
 *   oldmajor    abi_version (TR_ABI_MAJOR - 1).9: a plugin of the previous major
 *   tiny        struct_size 8: the version fields and not one slot, though it claims
 *               this header's whole vtable
 * The runner's isolation tests (tests/cli.sh), in fault_plugins/:
 *   faulty      as good, but trains (it writes the graph's updates back, TR_CAP_TRAINING)
 *               and misbehaves on request: [backend.faulty] fault = segv | abort | exit |
 *               hang at execute number at_step, perturb (one bit of its trained state
 *               flipped after that step), nullout | reshape (output 0's data pointer
 *               or shape rewritten at that step), fail (an error returned there),
 *               noupdate (the graph's updates dropped, every step), writeparam (a bit
 *               of a weight flipped at that step), or init_segv in init; rank = N: only as MPI rank
 *               N; with TP_FAULTY_LOAD=segv | exit in the environment, its constructor does
 * Built by tests/test_install.sh against an installed trident (not here):
 *   replay      as good, but its first output is replaced by the numbers of the text
 *               file `values = PATH` (an option): what another program printed, which
 *               `trident run` then compares with a real backend's
 */
#include <stddef.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "trident/backend.h"
#include "trident/kernels.h"

#if defined(TP_VARIANT_GOOD)
#define TP_NAME "good"
#elif defined(TP_VARIANT_NOENTRY)
#define TP_NAME "noentry"
#elif defined(TP_VARIANT_ENTRYFAIL)
#define TP_NAME "entryfail"
#elif defined(TP_VARIANT_NULLVTABLE)
#define TP_NAME "nullvtable"
#elif defined(TP_VARIANT_BADMAJOR)
#define TP_NAME "badmajor"
#elif defined(TP_VARIANT_SHORT)
#define TP_NAME "short"
#elif defined(TP_VARIANT_NULLSLOT)
#define TP_NAME "nullslot"
#elif defined(TP_VARIANT_NONAME)
#define TP_NAME "noname"
#elif defined(TP_VARIANT_BADNAME)
#define TP_NAME "bad\nname"
#elif defined(TP_VARIANT_INITFAIL)
#define TP_NAME "initfail"
#elif defined(TP_VARIANT_NEWMINOR)
#define TP_NAME "newminor"
#elif defined(TP_VARIANT_MINIMAL)
#define TP_NAME "minimal"
#elif defined(TP_VARIANT_V10)
#define TP_NAME "v10"
#elif defined(TP_VARIANT_WRONG)
#define TP_NAME "wrong"
#elif defined(TP_VARIANT_NEXTMINOR)
#define TP_NAME "nextminor"
#elif defined(TP_VARIANT_OLDMAJOR)
#define TP_NAME "oldmajor"
#elif defined(TP_VARIANT_TINY)
#define TP_NAME "tiny"
#elif defined(TP_VARIANT_REPLAY)
#define TP_NAME "replay"
#elif defined(TP_VARIANT_FAULTY)
#define TP_NAME "faulty"
#else
#error "define one TP_VARIANT_<NAME>"
#endif

/* What tests/test_loader.c looks for in get_stats of a variant whose get_stats the host
 * must never call. */
#define TP_STATS_POISON 0x5eed
#define TP_MAX_IN 16
#define TP_REPLAY_MAX 4096
#if defined(TP_VARIANT_REPLAY)
#define TP_KEYS "mode, values"
#elif defined(TP_VARIANT_FAULTY)
#define TP_KEYS "mode, fault, at_step, rank"
#else
#define TP_KEYS "mode"
#endif

static const struct tr_host_api *host;

#if defined(TP_VARIANT_FAULTY)
/* A plugin broken before any call: with TP_FAULTY_LOAD=segv | exit in the environment its
 * constructor crashes or exits as the library is loaded (`trident list`'s scan). */
__attribute__((constructor)) static void tp_on_load(void) {
    const char *f = getenv("TP_FAULTY_LOAD");
    if (f && strcmp(f, "segv") == 0) raise(SIGSEGV);
    if (f && strcmp(f, "exit") == 0) _exit(3);
}
#endif

struct tp_context {
    struct tr_kernels *k;
    char mode[32];
#if defined(TP_VARIANT_FAULTY)
    /* faulty: misbehaves as a broken plugin would, for the host's isolation tests:
     * fault = segv | abort | exit | hang (in execute, at step at_step) or init_segv (in
     * init, before anything) */
    char fault[16];
    int at_step, steps;
    int only_rank;              /* rank = N: misbehave only as MPI rank N (-1: every rank) */
#endif
#if defined(TP_VARIANT_REPLAY)
    float values[TP_REPLAY_MAX];
    int64_t n_values;
#endif
};

struct tp_program {
    tr_graph_t g;
    int n_nodes;
    void **bufs; /* per node: kernels memory for computed nodes, NULL for leaves */
    uint64_t bytes;
    uint64_t kernel_calls;
};

#if defined(TP_VARIANT_REPLAY)
/* The numbers of the file that option `values` names, whitespace-separated, into c. */
static int read_values(const struct tr_host_api *h, const struct tr_option *o, struct tp_context *c,
                       struct tr_error *err) {
    if (!o) return h->error_set(err, TR_ERR_INVALID, "[backend." TP_NAME "] values = PATH is required");
    FILE *f = fopen(o->value, "r");
    if (!f) return h->error_set(err, TR_ERR_IO, "[backend." TP_NAME "] values = %s: cannot open it", o->value);
    c->n_values = 0;
    while (c->n_values < TP_REPLAY_MAX && fscanf(f, "%f", &c->values[c->n_values]) == 1) c->n_values++;
    int garbage = !feof(f) && fgetc(f) != EOF;
    fclose(f);
    if (garbage || c->n_values == 0)
        return h->error_set(err, TR_ERR_FORMAT, "[backend." TP_NAME "] values = %s: expected up to %d numbers",
                            o->value, TP_REPLAY_MAX);
    return TR_OK;
}
#endif

static int tp_init(const struct tr_host_api *h, const struct tr_backend_params *params, void **ctx,
                   struct tr_error *err) {
    if (params->struct_size < sizeof *params || TR_ABI_GET_MAJOR(params->abi_version) != TR_ABI_MAJOR)
        return h->error_set(err, TR_ERR_INVALID, "params of ABI %u.%u, size %u", TR_ABI_GET_MAJOR(params->abi_version),
                            TR_ABI_GET_MINOR(params->abi_version), params->struct_size);
#if defined(TP_VARIANT_INITFAIL)
    return h->error_set(err, TR_ERR_DEVICE, "initfail: no device will do (this test plugin always fails init)");
#endif
    const char *mode = "eager";
    __attribute__((unused)) const struct tr_option *values = NULL;
#if defined(TP_VARIANT_FAULTY)
    char fault[16] = "";
    int at_step = 1, only_rank = -1;
#endif
    for (int i = 0; i < params->n_options; i++) {
        const struct tr_option *o = &params->options[i];
        if (strcmp(o->key, "mode") == 0) {
            if (strcmp(o->value, "eager") != 0)
                return h->error_set(err, TR_ERR_INVALID, "%s:%d: [backend." TP_NAME "] mode = %s: expected eager",
                                    o->file ? o->file : "?", o->line, o->value);
            mode = o->value;
#if defined(TP_VARIANT_REPLAY)
        } else if (strcmp(o->key, "values") == 0) {
            values = o;
#endif
#if defined(TP_VARIANT_FAULTY)
        } else if (strcmp(o->key, "fault") == 0) {
            if (strcmp(o->value, "init_segv") == 0) raise(SIGSEGV);
            snprintf(fault, sizeof fault, "%s", o->value);
        } else if (strcmp(o->key, "at_step") == 0) {
            at_step = atoi(o->value);
        } else if (strcmp(o->key, "rank") == 0) {
            only_rank = atoi(o->value);
#endif
        } else {
            return h->error_set(err, TR_ERR_INVALID, "%s:%d: [backend." TP_NAME "] unknown key '%s' (known: " TP_KEYS ")",
                                o->file ? o->file : "?", o->line, o->key);
        }
    }
    if (params->device_type != TR_DEVICE_CPU)
        return h->error_set(err, TR_ERR_UNSUPPORTED, "backend " TP_NAME " runs on the cpu only (device %d asked)",
                            params->device_type);
    struct tp_context *c = h->alloc(sizeof *c);
    if (!c) return h->error_set(err, TR_ERR_NOMEM, "backend " TP_NAME ": out of memory");
    memset(c, 0, sizeof *c);
    snprintf(c->mode, sizeof c->mode, "%s", mode);
#if defined(TP_VARIANT_FAULTY)
    snprintf(c->fault, sizeof c->fault, "%s", fault);
    c->at_step = at_step;
    c->only_rank = only_rank;
#endif
#if defined(TP_VARIANT_REPLAY)
    int vrc = read_values(h, values, c, err);
    if (vrc != TR_OK) {
        h->free(c);
        return vrc;
    }
#endif
    int rc = h->kernels_init(&c->k, TR_DEVICE_CPU, 0, err);
    if (rc != TR_OK) {
        h->free(c);
        return rc;
    }
    *ctx = c;
    return TR_OK;
}

static void tp_free(void *ctx) {
    struct tp_context *c = ctx;
    if (!c) return;
    host->kernels_free(c->k);
    host->free(c);
}

/* unused: minimal leaves supports_op out, nullslot execute. */
__attribute__((unused)) static int tp_supports_op(void *ctx, int op, int dtype) {
    (void)ctx;
    /* Attention is left to the shared kernels' default: says 0 so that a test sees the
     * plugin's answer rather than the host's default of 1. */
    return op != TR_OP_ATTENTION && (dtype == TR_DTYPE_F32 || dtype == TR_DTYPE_BF16);
}

static void tp_program_free(void *ctx, void *prog) {
    struct tp_context *c = ctx;
    struct tp_program *p = prog;
    if (!p) return;
    for (int i = 0; p->bufs && i < p->n_nodes; i++)
        if (p->bufs[i]) host->kernels_dealloc(c->k, p->bufs[i]);
    host->free(p->bufs);
    host->free(p);
}

static size_t node_bytes(tr_graph_t g, int id) {
    size_t n = host->dtype_size((enum tr_dtype)host->node_dtype(g, id));
    const int64_t *shape = host->node_shape(g, id);
    for (int d = 0; d < host->node_ndim(g, id); d++) n *= (size_t)shape[d];
    return n;
}

static int tp_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {
    struct tp_context *c = ctx;
    struct tp_program *p = host->alloc(sizeof *p);
    if (!p) return host->error_set(err, TR_ERR_NOMEM, "backend " TP_NAME ": out of memory");
    memset(p, 0, sizeof *p);
    p->g = g;
    p->n_nodes = host->graph_n_nodes(g);
    p->bufs = host->alloc(sizeof(void *) * (size_t)(p->n_nodes ? p->n_nodes : 1));
    if (!p->bufs) {
        host->free(p);
        return host->error_set(err, TR_ERR_NOMEM, "backend " TP_NAME ": out of memory");
    }
    memset(p->bufs, 0, sizeof(void *) * (size_t)(p->n_nodes ? p->n_nodes : 1));
    for (int id = 0; id < p->n_nodes; id++) {
        int op = host->node_op(g, id);
        if (op == TR_OP_INPUT) continue;
        if (op == TR_OP_PARAM || op == TR_OP_CONST) {
            if (!host->node_data(g, id)) {
                tp_program_free(c, p);
                return host->error_set(err, TR_ERR_INVALID, "backend " TP_NAME ": %s node %d '%s' has no data bound",
                                       host->op_name(op), id, host->node_name(g, id));
            }
            continue;
        }
        size_t n = node_bytes(g, id);
        int rc = host->kernels_alloc(c->k, n ? n : 1, &p->bufs[id], err);
        if (rc != TR_OK) {
            tp_program_free(c, p);
            return rc;
        }
        p->bytes += n;
    }
    *prog = p;
    return TR_OK;
}

static void bind(tr_graph_t g, int id, void *data, struct tr_tensor *t) {
    memset(t, 0, sizeof *t);
    t->data = data;
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

/* Where node id's value lives during this execute. The cpu kernels work on host memory,
 * so inputs and bound weights are used in place. */
static const void *node_value(const struct tp_program *p, int id, int n_inputs, const struct tr_tensor *inputs) {
    int op = host->node_op(p->g, id);
    if (op == TR_OP_INPUT) {
        for (int i = 0; i < n_inputs; i++)
            if (host->graph_input(p->g, i) == id) return inputs[i].data;
        return NULL;
    }
    if (op == TR_OP_PARAM || op == TR_OP_CONST) return host->node_data(p->g, id);
    return p->bufs[id];
}

__attribute__((unused)) static int tp_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs,
                                              int n_outputs, struct tr_tensor *outputs, struct tr_error *err) {
    struct tp_context *c = ctx;
    struct tp_program *p = prog;
    tr_graph_t g = p->g;
    p->kernel_calls = 0;
#if defined(TP_VARIANT_FAULTY)
    const char *rank_env = getenv("OMPI_COMM_WORLD_RANK");
    const int my_rank = rank_env ? atoi(rank_env) : 0, mine = c->only_rank < 0 || c->only_rank == my_rank;
    if (++c->steps == c->at_step && mine) {
        if (strcmp(c->fault, "segv") == 0) raise(SIGSEGV);
        if (strcmp(c->fault, "abort") == 0) abort();
        if (strcmp(c->fault, "exit") == 0) _exit(0);
        if (strcmp(c->fault, "hang") == 0)
            for (;;) pause();
        if (strcmp(c->fault, "fail") == 0)
            return host->error_set(err, TR_ERR_NUMERIC, "backend " TP_NAME ": a step that fails (fault = fail)");
    }
#endif
    for (int id = 0; id < p->n_nodes; id++) {
        int op = host->node_op(g, id);
        if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST) continue;
        struct tr_tensor in[TP_MAX_IN], out;
        int n_in = host->node_n_inputs(g, id);
        if (n_in < 0 || n_in > TP_MAX_IN)
            return host->error_set(err, TR_ERR_UNSUPPORTED, "node %d '%s': %d inputs", id, host->node_name(g, id),
                                   n_in);
        for (int i = 0; i < n_in; i++) {
            int src = host->node_input(g, id, i);
            const void *data = node_value(p, src, n_inputs, inputs);
            if (!data)
                return host->error_set(err, TR_ERR_INTERNAL, "node %d '%s': input %d (node %d) has no value", id,
                                       host->node_name(g, id), i, src);
            bind(g, src, (void *)data, &in[i]);
        }
        bind(g, id, p->bufs[id], &out);
        int rc = host->kernels_run(c->k, op, host->node_attrs(g, id), n_in, in, &out, err);
        if (rc != TR_OK) return rc;
        p->kernel_calls++;
    }
    for (int i = 0; i < n_outputs; i++) {
        int id = host->graph_output(g, i);
        int rc =
            host->kernels_to_host(c->k, outputs[i].data, node_value(p, id, n_inputs, inputs), node_bytes(g, id), err);
        if (rc != TR_OK) return rc;
    }
#if defined(TP_VARIANT_FAULTY)
    /* a training step (the faulty variant trains, for the data-parallel tests): every
     * update's value into its PARAM's host memory, after every node read the old ones */
    /* noupdate: a backend that declares training but drops its updates */
    for (int u = 0; strcmp(c->fault, "noupdate") != 0 && tr_host_api_has_updates(host) && u < host->graph_n_updates(g);
         u++) {
        const int pa = host->graph_update_param(g, u), v = host->graph_update_value(g, u);
        memcpy((void *)host->node_data(g, pa), node_value(p, v, n_inputs, inputs), node_bytes(g, pa));
    }
    /* perturb: this rank's trained state drifts from the others' by one ulp of one value */
    if (c->steps == c->at_step && mine && strcmp(c->fault, "perturb") == 0 && tr_host_api_has_updates(host) &&
        host->graph_n_updates(g) > 0) {
        uint32_t *w = (uint32_t *)(void *)host->node_data(g, host->graph_update_param(g, 0));
        w[0] ^= 1u;
    }
#endif
#if defined(TP_VARIANT_FAULTY)
    /* writeparam: one bit of the first PARAM the graph does not update flipped, in the
     * host memory every backend of an isolate = off run shares */
    if (c->steps == c->at_step && mine && strcmp(c->fault, "writeparam") == 0)
        for (int id = 0; id < p->n_nodes; id++) {
            int updated = 0;
            for (int u = 0; tr_host_api_has_updates(host) && u < host->graph_n_updates(g); u++)
                updated |= host->graph_update_param(g, u) == id;
            if (host->node_op(g, id) != TR_OP_PARAM || updated) continue;
            *(unsigned char *)(void *)host->node_data(g, id) ^= 0x40u;
            break;
        }
    /* nullout / reshape: the step's output descriptor rewritten, which the host must refuse
     * (and put back) rather than read through */
    if (c->steps == c->at_step && mine && n_outputs > 0) {
        if (strcmp(c->fault, "nullout") == 0) outputs[0].data = NULL;
        if (strcmp(c->fault, "reshape") == 0) outputs[0].shape[0] = 1;
    }
#endif
#if defined(TP_VARIANT_WRONG)
    /* A backend that runs but computes a wrong number: its first f32 output is 1% off,
     * which the harness's agreement check must catch. */
    if (n_outputs > 0 && outputs[0].dtype == TR_DTYPE_F32) {
        int64_t n = 1;
        for (int d = 0; d < outputs[0].ndim; d++) n *= outputs[0].shape[d];
        for (int64_t i = 0; i < n; i++) ((float *)outputs[0].data)[i] *= 1.01f;
    }
#endif
#if defined(TP_VARIANT_REPLAY)
    /* The first output is what another program computed for the same graph, weights and
     * batch: the harness compares it with the reference backend's. */
    int64_t n = 1;
    for (int d = 0; n_outputs > 0 && d < outputs[0].ndim; d++) n *= outputs[0].shape[d];
    if (n_outputs < 1 || outputs[0].dtype != TR_DTYPE_F32 || n != c->n_values)
        return host->error_set(err, TR_ERR_SHAPE, "backend " TP_NAME ": %lld values to replay, but output 0 is not "
                               "f32 with as many elements (%lld)", (long long)c->n_values, (long long)n);
    memcpy(outputs[0].data, c->values, sizeof(float) * (size_t)n);
#endif
    return TR_OK;
}

static int tp_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    struct tp_context *c = ctx;
    struct tp_program *p = prog;
#if defined(TP_VARIANT_MINIMAL)
    (void)c;
    (void)p;
    st->kernel_calls = TP_STATS_POISON; /* reaching here is the host's bug */
#else
    st->kernel_calls = p->kernel_calls;
    st->peak_bytes = p->bytes;
    snprintf(st->mode, sizeof st->mode, "%s", c->mode);
    snprintf(st->notes, sizeof st->notes, "loader test backend: one kernels_run per node");
#endif
    return TR_OK;
}

/* ---- the vtable of each variant ---- */

/* Every slot written, so each variant shows its whole contract; a variant differs from
 * good only in the arguments it passes here (and faulty in that it trains). */
#if defined(TP_VARIANT_FAULTY) || defined(TP_VARIANT_V10) /* v10: claims training that 1.0 cannot carry */
#define TP_CAPS (TR_CAP_CPU | TR_CAP_F32 | TR_CAP_TRAINING)
#else
#define TP_CAPS (TR_CAP_CPU | TR_CAP_F32)
#endif
#define TP_VTABLE_INIT(size, version, name_, supports_op_, execute_)                                     \
    .struct_size = (size), .abi_version = (version), .name = (name_),                                    \
    .description = "loader test plugin (" TP_NAME ")", .caps = TP_CAPS, .init = tp_init,                \
    .free = tp_free, .supports_op = (supports_op_), .compile = tp_compile, .execute = (execute_),        \
    .program_free = tp_program_free, .get_stats = tp_get_stats

#define TP_SIZE sizeof(struct tr_backend_i)

#if defined(TP_VARIANT_NEWMINOR)
/* What a plugin built against a future 1.7 header looks like: 1.0's slots, then more. */
struct tp_backend_i_1_7 {
    struct tr_backend_i base;
    int (*future_slot)(void *ctx, int what);
    void *future_data;
};
static int tp_future(void *ctx, int what) {
    (void)ctx;
    return what;
}
static const struct tp_backend_i_1_7 vtable_1_7 = {
    .base = {TP_VTABLE_INIT(sizeof(struct tp_backend_i_1_7), TR_ABI_MAKE(1, 7), TP_NAME, tp_supports_op, tp_execute)},
    .future_slot = tp_future,
    .future_data = NULL,
};
#define TP_VTABLE (&vtable_1_7.base)
#elif defined(TP_VARIANT_NEXTMINOR)
/* A plugin built against the next minor's header: all of this one's slots, then one
 * more. The host must accept it and never call what it does not know. */
struct tp_backend_i_next {
    struct tr_backend_i base;
    int (*next_slot)(void *ctx, void *prog, struct tr_backend_stats *st);
};
static int tp_next_slot(void *ctx, void *prog, struct tr_backend_stats *st) {
    (void)ctx;
    (void)prog;
    if (st) st->kernel_calls = TP_STATS_POISON;
    return TR_ERR_INTERNAL;
}
static const struct tp_backend_i_next vtable_next = {
    .base = {TP_VTABLE_INIT(sizeof(struct tp_backend_i_next), TR_ABI_MAKE(TR_ABI_MAJOR, TR_ABI_MINOR + 1), TP_NAME,
                            tp_supports_op, tp_execute)},
    .next_slot = tp_next_slot,
};
#define TP_VTABLE (&vtable_next.base)
#else
static const struct tr_backend_i vtable = {
#if defined(TP_VARIANT_BADMAJOR)
    TP_VTABLE_INIT(TP_SIZE, TR_ABI_MAKE(2, 0), TP_NAME, tp_supports_op, tp_execute),
#elif defined(TP_VARIANT_SHORT)
    TP_VTABLE_INIT(TR_BACKEND_I_MIN_SIZE_1_0 - sizeof(void *), TR_ABI_VERSION, TP_NAME, tp_supports_op, tp_execute),
#elif defined(TP_VARIANT_NULLSLOT)
    TP_VTABLE_INIT(TP_SIZE, TR_ABI_VERSION, TP_NAME, tp_supports_op, NULL),
#elif defined(TP_VARIANT_NONAME)
    TP_VTABLE_INIT(TP_SIZE, TR_ABI_VERSION, NULL, tp_supports_op, tp_execute),
#elif defined(TP_VARIANT_MINIMAL)
    TP_VTABLE_INIT(TR_BACKEND_I_MIN_SIZE_1_0, TR_ABI_VERSION, TP_NAME, NULL, tp_execute),
#elif defined(TP_VARIANT_V10)
    /* a plugin built against 1.0: no graph updates, no sync */
    TP_VTABLE_INIT(TR_BACKEND_I_MIN_SIZE_1_0, TR_ABI_MAKE(1, 0), TP_NAME, NULL, tp_execute),
#elif defined(TP_VARIANT_OLDMAJOR)
    TP_VTABLE_INIT(TP_SIZE, TR_ABI_MAKE(TR_ABI_MAJOR - 1, 9), TP_NAME, tp_supports_op, tp_execute),
#elif defined(TP_VARIANT_TINY)
    TP_VTABLE_INIT(offsetof(struct tr_backend_i, name), TR_ABI_VERSION, TP_NAME, tp_supports_op, tp_execute),
#else
    TP_VTABLE_INIT(TP_SIZE, TR_ABI_VERSION, TP_NAME, tp_supports_op, tp_execute),
#endif
};
#define TP_VTABLE (&vtable)
#endif

static int entry(uint32_t host_abi, const struct tr_host_api *h, const struct tr_backend_i **iface,
                 struct tr_error *err) {
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR || !h || h->struct_size < sizeof *h) {
        if (h && h->error_set)
            return h->error_set(err, TR_ERR_PLUGIN, "backend " TP_NAME ": host ABI %u.%u not supported",
                                TR_ABI_GET_MAJOR(host_abi), TR_ABI_GET_MINOR(host_abi));
        return TR_ERR_PLUGIN;
    }
    host = h;
#if defined(TP_VARIANT_ENTRYFAIL)
    (void)iface;
    (void)TP_VTABLE;
    return h->error_set(err, TR_ERR_UNSUPPORTED, "entryfail: this test plugin always refuses to load");
#elif defined(TP_VARIANT_NULLVTABLE)
    (void)TP_VTABLE;
    *iface = NULL;
    return TR_OK;
#else
    *iface = TP_VTABLE;
    return TR_OK;
#endif
}

#if defined(TP_VARIANT_NOENTRY)
TR_BACKEND_EXPORT int tr_backend_entri(uint32_t host_abi, const struct tr_host_api *h,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    return entry(host_abi, h, iface, err);
}
#else
TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *h,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    return entry(host_abi, h, iface, err);
}
#endif
