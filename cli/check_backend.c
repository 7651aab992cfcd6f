/* trident check-backend NAME_OR_PATH [FILE.ini]: the conformance check of a backend.
 *
 * 1. The ABI: what the loader checks when it opens the plugin (entry symbol, major
 *    version, vtable size, required slots, name), that the file exports nothing else
 *    (its ELF dynamic symbols), what it declares (caps), that init works with the INI's
 *    options and refuses an unknown option by its name.
 * 2. The ops: each case is a graph of one op on INPUT nodes; the plugin compiles and
 *    runs it (twice, outputs poisoned with NaN before each run) and its second output is
 *    compared with the shared CPU kernels' (the reference) on the same random inputs
 *    (never zero) by ||out - ref|| / ||ref||: f32 under 1e-4, bf16 under 1e-2.
 *
 * A pass/fail table on stdout; exit 0 when every row passes, 1 otherwise, 2 usage.
 * The INI, if given, supplies [plugins] path, [run] device and [backend.NAME] options;
 * NAME:MODE passes mode = MODE as `trident run` does. */
#include <elf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "cli.h"
#include "trident/isolate.h"
#include "trident/kernels.h"
#include "trident/log.h"
#include "trident/trident.h"

#define CB_MAX_IN 8 /* attention_rel_grad with the saved y and lse */
#define CB_STEPS 2

/* How an input is filled: floats of the case's dtype of either sign or positive (sqrt,
 * divisors); integer ids in [0, range); f32 whatever the case's dtype: an additive mask
 * (negative), any sign, positive (second moments), or a step count (3). */
enum cb_fill { CB_ANY, CB_POS, CB_IDS, CB_MASK, CB_F32, CB_F32_POS, CB_F32_STEP };

struct cb_input {
    int ndim;
    int64_t shape[4];
    enum cb_fill fill;
    int64_t range;  /* CB_IDS */
};

struct cb_case {
    const char *label;
    int op;
    int training;   /* a gradient or loss op: checked when the backend declares TR_CAP_TRAINING */
    int n_in;
    struct cb_input in[CB_MAX_IN];
    struct tr_attrs at;
};

#define IN1(a) {1, {a}, CB_ANY, 0}
#define IN2(a, b) {2, {a, b}, CB_ANY, 0}
#define IN3(a, b, c) {3, {a, b, c}, CB_ANY, 0}
#define IN4(a, b, c, d) {4, {a, b, c, d}, CB_ANY, 0}
#define POS2(a, b) {2, {a, b}, CB_POS, 0}
#define IDS2(a, b, v) {2, {a, b}, CB_IDS, v}
#define IDS1(a, v) {1, {a}, CB_IDS, v}
#define F32(...) {CB_NARGS_(__VA_ARGS__), {__VA_ARGS__}, CB_F32, 0}
#define F32_POS(...) {CB_NARGS_(__VA_ARGS__), {__VA_ARGS__}, CB_F32_POS, 0}
#define SCALAR(fill) {0, {0}, fill, 0}
#define CB_NARGS_(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define UNARY(name, op_, ...) {name, op_, 0, 1, {IN2(4, 33)}, {.ints = {__VA_ARGS__}}}

static const struct cb_case cases[] = {
    {"matmul [4,8]x[8,16]", TR_OP_MATMUL, 0, 2, {IN2(4, 8), IN2(8, 16)}, {.floats = {1.0f}}},
    {"matmul batched, b 2-D", TR_OP_MATMUL, 0, 2, {IN3(2, 4, 8), IN2(8, 16)}, {.floats = {1.0f}}},
    {"matmul a^T b^T alpha .5", TR_OP_MATMUL, 0, 2, {IN3(2, 8, 5), IN3(2, 6, 8)}, {.ints = {1, 1}, .floats = {0.5f}}},
    {"add, bias broadcast", TR_OP_ADD, 0, 2, {IN2(4, 16), IN1(16)}, {.n_ints = 0}},
    {"sub [2,1,8]-[3,1]", TR_OP_SUB, 0, 2, {IN3(2, 1, 8), IN2(3, 1)}, {.n_ints = 0}},
    {"mul", TR_OP_MUL, 0, 2, {IN2(4, 16), IN2(4, 16)}, {.n_ints = 0}},
    {"div by positive", TR_OP_DIV, 0, 2, {IN2(4, 16), POS2(1, 16)}, {.n_ints = 0}},
    UNARY("gelu erf", TR_OP_GELU, 0),
    UNARY("gelu tanh", TR_OP_GELU, 1),
    UNARY("tanh", TR_OP_TANH, 0),
    UNARY("relu", TR_OP_RELU, 0),
    UNARY("silu", TR_OP_SILU, 0),
    UNARY("sigmoid", TR_OP_SIGMOID, 0),
    UNARY("exp", TR_OP_EXP, 0),
    UNARY("neg", TR_OP_NEG, 0),
    {"sqrt of positive", TR_OP_SQRT, 0, 1, {POS2(4, 33)}, {.n_ints = 0}},
    {"rsqrt of positive", TR_OP_RSQRT, 0, 1, {POS2(4, 33)}, {.n_ints = 0}},
    {"scale .5x+.25", TR_OP_SCALE, 0, 1, {IN2(4, 33)}, {.floats = {0.5f, 0.25f}}},
    {"softmax [4,37]", TR_OP_SOFTMAX, 0, 1, {IN2(4, 37)}, {.n_ints = 0}},
    {"layer_norm [4,32]", TR_OP_LAYER_NORM, 0, 3, {IN2(4, 32), IN1(32), IN1(32)}, {.floats = {1e-5f}}},
    {"embedding [50,16][2,7]", TR_OP_EMBEDDING, 0, 2, {IN2(50, 16), IDS2(2, 7, 50)}, {.n_ints = 0}},
    {"reshape [4,6]->[3,8]", TR_OP_RESHAPE, 0, 1, {IN2(4, 6)}, {.ints = {3, 8}, .n_ints = 2}},
    {"transpose (2,0,1)", TR_OP_TRANSPOSE, 0, 1, {IN3(2, 3, 4)}, {.ints = {2, 0, 1}, .n_ints = 3}},
    {"slice axis 1, 2:9:2", TR_OP_SLICE, 0, 1, {IN2(4, 10)}, {.ints = {1, 2, 9, 2}}},
    {"concat axis 1", TR_OP_CONCAT, 0, 2, {IN2(3, 4), IN2(3, 5)}, {.ints = {1}}},
    {"sum axis 1", TR_OP_SUM, 0, 1, {IN3(2, 9, 4)}, {.ints = {1, 0}}},
    {"mean axis 2, keepdims", TR_OP_MEAN, 0, 1, {IN3(2, 3, 9)}, {.ints = {2, 1}}},
    {"max axis 0", TR_OP_MAX, 0, 1, {IN2(5, 7)}, {.ints = {0, 0}}},
    {"attention", TR_OP_ATTENTION, 0, 3, {IN4(1, 2, 5, 8), IN4(1, 2, 7, 8), IN4(1, 2, 7, 8)}, {.floats = {0.35f}}},
    {"attention causal, gqa", TR_OP_ATTENTION, 0, 3, {IN4(2, 4, 6, 8), IN4(2, 2, 6, 8), IN4(2, 2, 6, 8)},
     {.ints = {1}, .floats = {0.35f}}},
    {"attention with mask", TR_OP_ATTENTION, 0, 4,
     {IN4(1, 2, 5, 8), IN4(1, 2, 7, 8), IN4(1, 2, 7, 8), {4, {1, 1, 5, 7}, CB_MASK, 0}}, {.floats = {0.35f}}},
    {"rms_norm [4,32]", TR_OP_RMS_NORM, 0, 2, {IN2(4, 32), IN1(32)}, {.floats = {1e-6f}}},
    {"rms_norm (1+w)", TR_OP_RMS_NORM, 0, 2, {IN2(4, 32), IN1(32)}, {.ints = {1}, .floats = {1e-6f}}},
    {"rope [1,2,5,8]", TR_OP_ROPE, 0, 2, {IN4(1, 2, 5, 8), IDS1(5, 64)}, {.floats = {10000.0f}}},
    {"update_slice axis 1 [3,8,4]", TR_OP_UPDATE_SLICE, 0, 3, {IN3(3, 8, 4), IN3(3, 2, 4), IDS1(1, 7)},
     {.ints = {1}, .n_ints = 1}},
    {"update_slice axis -1 [4,9]", TR_OP_UPDATE_SLICE, 0, 3, {IN2(4, 9), IN2(4, 3), IDS1(1, 7)},
     {.ints = {-1}, .n_ints = 1}},
    {"cast to f32", TR_OP_CAST, 0, 1, {IN2(4, 9)}, {.ints = {TR_DTYPE_F32}}},
    {"cast to bf16", TR_OP_CAST, 0, 1, {IN2(4, 9)}, {.ints = {TR_DTYPE_BF16}}},
    {"broadcast [1,5]->[3,5]", TR_OP_BROADCAST, 0, 1, {IN2(1, 5)}, {.ints = {3, 5}, .n_ints = 2}},
    {"conv2d 3x3 pad 1, bias", TR_OP_CONV2D, 0, 3, {IN4(2, 6, 5, 3), IN4(4, 3, 3, 3), IN1(4)},
     {.ints = {1, 1, 1, 1, 0}, .n_ints = 5}},
    {"conv2d stride 2, pad_end 1", TR_OP_CONV2D, 0, 2, {IN4(1, 7, 8, 4), IN4(4, 4, 3, 3)},
     {.ints = {2, 0, 1, 1, 1}, .n_ints = 5}},
    {"group_norm 2 groups + silu", TR_OP_GROUP_NORM, 0, 3, {IN4(2, 3, 4, 8), IN1(8), IN1(8)},
     {.ints = {2, 1}, .n_ints = 2, .floats = {1e-5f}}},
    {"timestep_embedding [3]->[3,16]", TR_OP_TIMESTEP_EMBEDDING, 0, 1, {IN1(3)}, {.ints = {16, 1}, .n_ints = 2}},
    {"attention_rel 3x4 key grid", TR_OP_ATTENTION_REL, 0, 5,
     {IN4(1, 2, 12, 8), IN4(1, 2, 12, 8), IN4(1, 2, 12, 8), IN4(1, 2, 12, 3), IN4(1, 2, 12, 4)}, {.floats = {0.35f}}},
    {"softmax_grad", TR_OP_SOFTMAX_GRAD, 1, 2, {IN2(4, 17), IN2(4, 17)}, {.n_ints = 0}},
    {"unary_grad gelu", TR_OP_UNARY_GRAD, 1, 2, {IN2(4, 17), IN2(4, 17)}, {.ints = {TR_OP_GELU, 0}}},
    {"layer_norm_grad", TR_OP_LAYER_NORM_GRAD, 1, 3, {IN2(4, 32), IN1(32), IN2(4, 32)}, {.floats = {1e-5f}}},
    {"cross_entropy", TR_OP_CROSS_ENTROPY, 1, 2, {IN2(4, 10), IDS1(4, 10)}, {.n_ints = 0}},
    {"mse", TR_OP_MSE, 1, 2, {IN2(4, 10), IN2(4, 10)}, {.n_ints = 0}},
    {"layer_norm_grad_gamma", TR_OP_LAYER_NORM_GRAD_GAMMA, 1, 2, {IN2(4, 32), IN2(4, 32)}, {.floats = {1e-5f}}},
    {"embedding_grad", TR_OP_EMBEDDING_GRAD, 1, 2, {IDS2(2, 7, 50), IN3(2, 7, 16)}, {.ints = {50}}},
    {"embedding_grad, padding row 3", TR_OP_EMBEDDING_GRAD, 1, 2, {IDS2(2, 7, 5), IN3(2, 7, 16)}, {.ints = {5, 1, 3}}},
    {"max_grad axis 0", TR_OP_MAX_GRAD, 1, 2, {IN2(5, 7), IN1(7)}, {.ints = {0, 0}}},
    {"slice_grad axis 1, 2:9:2 of 10", TR_OP_SLICE_GRAD, 1, 1, {IN2(4, 4)}, {.ints = {1, 2, 9, 2, 10}}},
    {"cross_entropy_grad", TR_OP_CROSS_ENTROPY_GRAD, 1, 3, {IN2(4, 10), IDS1(4, 10), SCALAR(CB_F32)}, {.n_ints = 0}},
    {"rms_norm_grad", TR_OP_RMS_NORM_GRAD, 1, 3, {IN2(4, 32), IN1(32), IN2(4, 32)}, {.floats = {1e-6f}}},
    {"rms_norm_grad_w", TR_OP_RMS_NORM_GRAD_W, 1, 2, {IN2(4, 32), IN2(4, 32)}, {.floats = {1e-6f}}},
    {"attention_grad dq, causal", TR_OP_ATTENTION_GRAD, 1, 4, {IN4(1, 2, 5, 8), IN4(1, 2, 5, 8), IN4(1, 2, 5, 8),
     IN4(1, 2, 5, 8)}, {.ints = {1, 0, 0}, .floats = {0.35f}}},
    {"attention_grad dv", TR_OP_ATTENTION_GRAD, 1, 4, {IN4(1, 2, 5, 8), IN4(1, 2, 7, 8), IN4(1, 2, 7, 8),
     IN4(1, 2, 5, 8)}, {.ints = {0, 0, 2}, .floats = {0.35f}}},
    {"attention_lse causal, gqa", TR_OP_ATTENTION_LSE, 1, 3, {IN4(2, 4, 6, 8), IN4(2, 2, 6, 8), IN4(2, 2, 6, 8)},
     {.ints = {1}, .floats = {0.35f}}},
    {"attention_lse with mask, window 3", TR_OP_ATTENTION_LSE, 1, 4, {IN4(1, 2, 5, 8), IN4(1, 2, 7, 8), IN4(1, 2, 7, 8),
     {4, {1, 1, 5, 7}, CB_MASK, 0}}, {.ints = {0, 3}, .floats = {0.35f}}},
    {"attention_rel_grad drel_w", TR_OP_ATTENTION_REL_GRAD, 1, 6, {IN4(1, 2, 12, 8), IN4(1, 2, 12, 8),
     IN4(1, 2, 12, 8), IN4(1, 2, 12, 3), IN4(1, 2, 12, 4), IN4(1, 2, 12, 8)}, {.ints = {4}, .n_ints = 1, .floats = {0.35f}}},
    {"attention_rel_lse 3x4 key grid", TR_OP_ATTENTION_REL_LSE, 1, 5, {IN4(1, 2, 12, 8), IN4(1, 2, 12, 8),
     IN4(1, 2, 12, 8), IN4(1, 2, 12, 3), IN4(1, 2, 12, 4)}, {.floats = {0.35f}}},
    /* y and lse any values: the op is a function of them, the same on every backend */
    {"attention_rel_grad dq, y and lse", TR_OP_ATTENTION_REL_GRAD, 1, 8, {IN4(1, 2, 12, 8), IN4(1, 2, 12, 8),
     IN4(1, 2, 12, 8), IN4(1, 2, 12, 3), IN4(1, 2, 12, 4), IN4(1, 2, 12, 8), IN4(1, 2, 12, 8), F32(1, 2, 12)},
     {.ints = {0}, .n_ints = 1, .floats = {0.35f}}},
    {"conv2d_grad_input", TR_OP_CONV2D_GRAD_INPUT, 1, 2, {IN4(2, 6, 5, 4), IN4(4, 3, 3, 3)},
     {.ints = {1, 1, 1, 1, 0, 6, 5}, .n_ints = 7}},
    {"conv2d_grad_weight", TR_OP_CONV2D_GRAD_WEIGHT, 1, 2, {IN4(1, 7, 8, 4), IN4(1, 3, 4, 5)},
     {.ints = {2, 0, 1, 1, 1, 3, 3, 5}, .n_ints = 8}},
    {"group_norm_grad", TR_OP_GROUP_NORM_GRAD, 1, 3, {IN4(2, 3, 4, 8), IN1(8), IN4(2, 3, 4, 8)},
     {.ints = {2, 0}, .n_ints = 2, .floats = {1e-5f}}},
    {"group_norm_grad_gamma", TR_OP_GROUP_NORM_GRAD_GAMMA, 1, 2, {IN4(2, 3, 4, 8), IN4(2, 3, 4, 8)},
     {.ints = {2, 0}, .n_ints = 2, .floats = {1e-5f}}},
    {"adamw_step", TR_OP_ADAMW_STEP, 1, 5, {IN2(4, 9), F32(4, 9), F32_POS(4, 9), SCALAR(CB_F32_POS), SCALAR(CB_F32_STEP)},
     {.floats = {0.9f, 0.999f, 1e-8f, 0.01f}}},
    {"allreduce, one rank, mean of 2", TR_OP_ALLREDUCE, 1, 1, {IN2(4, 9)}, {.ints = {1, 0}, .n_ints = 2, .floats = {0.5f}}},
    {"allreduce_start, one rank", TR_OP_ALLREDUCE_START, 1, 1, {IN2(4, 9)}, {.ints = {1, 0}, .n_ints = 2, .floats = {1}}},
    {"allreduce_wait, one rank, mean of 2", TR_OP_ALLREDUCE_WAIT, 1, 1, {IN2(4, 9)},
     {.ints = {1, 0}, .n_ints = 2, .floats = {0.5f}}},
};

/* ---- the table ---- */

struct cb_run {
    int pass, fail, skip;
};

/* What the check is doing now, in memory the parent shares (MAP_SHARED, made before the
 * child forks): a backend that kills its process is reported with the case it was in. */
static char *cb_stage;
#define CB_STAGE_MAX 160
#define CB_TIMEOUT_S 120.0 /* the whole check, without an INI's [run] backend_timeout */

static void stage(const char *fmt, const char *what) {
    if (cb_stage) snprintf(cb_stage, CB_STAGE_MAX, fmt, what);
}

static void row(struct cb_run *r, const char *verdict, const char *what, const char *detail) {
    printf("  %-4s  %-38s %s\n", verdict, what, detail);
    fflush(stdout); /* the rows so far survive a backend that kills its process */
    if (!strcmp(verdict, "PASS")) r->pass++;
    else if (!strcmp(verdict, "FAIL")) r->fail++;
    else if (strcmp(verdict, "NOTE") != 0) r->skip++;
}

/* ---- inputs ---- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

static void fill(struct tr_tensor *t, const struct cb_input *spec, uint64_t *s) {
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (spec->fill == CB_IDS) {
            int64_t v = (int64_t)(rng_next(s) % (uint64_t)spec->range);
            if (t->dtype == TR_DTYPE_I32) ((int32_t *)t->data)[i] = (int32_t)v;
            else ((int64_t *)t->data)[i] = v;
            continue;
        }
        double m = 0.1 + 0.9 * rng_unit(s); /* never zero */
        if (spec->fill == CB_POS || spec->fill == CB_F32_POS) m += 0.4;
        else if (spec->fill == CB_F32_STEP) m = 3.0;
        else if (spec->fill == CB_MASK) m = -m;
        else if (rng_next(s) & 1) m = -m;
        tr_tensor_set_f64(t, i, m);
    }
}

static int alloc_tensor(struct tr_tensor *t, enum tr_dtype dt, int ndim, const int64_t *shape, struct tr_error *err) {
    void *p = NULL;
    size_t bytes = (size_t)tr_shape_numel(ndim, shape) * tr_dtype_size(dt);
    int rc = tr_host_alloc(&p, bytes ? bytes : 1, err);
    if (rc != TR_OK) return rc;
    if ((rc = tr_tensor_make(t, p, dt, ndim, shape, err)) != TR_OK) tr_host_free(p);
    return rc;
}

static void poison(struct tr_tensor *t) {
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) tr_tensor_set_f64(t, i, NAN);
}

/* ||out - ref|| / ||ref||; a NaN anywhere (an unwritten element) gives NaN. */
static double rel_err(const struct tr_tensor *out, const struct tr_tensor *ref) {
    double num = 0.0, den = 0.0;
    int64_t n = tr_tensor_numel(ref);
    for (int64_t i = 0; i < n; i++) {
        double o = tr_tensor_get_f64(out, i), r = tr_tensor_get_f64(ref, i);
        if (isnan(o)) return NAN;
        num += (o - r) * (o - r);
        den += r * r;
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* ---- one op case on one dtype ---- */

struct cb_env {
    struct tr_backend *be;
    struct tr_kernels *ref;  /* the shared kernels on the cpu: the reference */
    uint64_t seed;
};

/* Builds, runs and compares; returns the row's verdict and writes the detail. */
static const char *check_case(struct cb_env *env, const struct cb_case *c, enum tr_dtype dt, char *detail,
                              size_t n) {
    struct tr_error err = {0};
    struct tr_graph *g = NULL;
    struct tr_program *prog = NULL;
    struct tr_tensor in[CB_MAX_IN] = {0}, out = {0}, ref = {0};
    const char *verdict = "FAIL";
    int ids[CB_MAX_IN];
    if (tr_graph_init(&g, &err) != TR_OK) goto done;
    for (int i = 0; i < c->n_in; i++) {
        const struct cb_input *s = &c->in[i];
        enum tr_dtype idt = s->fill == CB_IDS ? TR_DTYPE_I32 : s->fill >= CB_MASK ? TR_DTYPE_F32 : dt;
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        ids[i] = tr_input(g, name, idt, s->ndim, s->shape);
    }
    int y = tr_graph_add_node(g, (enum tr_op)c->op, c->n_in, ids, &c->at);
    tr_graph_set_output(g, y, "out");
    if (tr_graph_status(g, &err) != TR_OK) {
        snprintf(detail, n, "the host cannot build this graph: %s", err.msg);
        verdict = "SKIP";
        goto done;
    }
    for (int i = 0; i < c->n_in; i++) {
        int id = ids[i];
        if (alloc_tensor(&in[i], (enum tr_dtype)tr_node_dtype(g, id), tr_node_ndim(g, id), tr_node_shape(g, id), &err))
            goto done;
        uint64_t s = env->seed * 1000003u + (uint64_t)i * 7919u + (uint64_t)(c - cases);
        fill(&in[i], &c->in[i], &s);
    }
    enum tr_dtype odt = (enum tr_dtype)tr_node_dtype(g, y);
    if (alloc_tensor(&out, odt, tr_node_ndim(g, y), tr_node_shape(g, y), &err) ||
        alloc_tensor(&ref, odt, tr_node_ndim(g, y), tr_node_shape(g, y), &err))
        goto done;
    poison(&ref);
    if (tr_kernels_run(env->ref, c->op, tr_node_attrs(g, y), c->n_in, in, &ref, &err) != TR_OK) {
        snprintf(detail, n, "the reference kernels refuse this case: %s", err.msg);
        verdict = "SKIP";
        goto done;
    }
    if (tr_backend_compile(env->be, g, &prog, &err) != TR_OK) goto done;
    for (int step = 0; step < CB_STEPS; step++) {
        poison(&out);
        if (tr_backend_execute(env->be, prog, c->n_in, in, 1, &out, &err) != TR_OK) goto done;
    }
    double e = rel_err(&out, &ref), tol = odt == TR_DTYPE_F32 ? 1e-4 : 1e-2;
    int own = tr_backend_supports_op(env->be, c->op, dt);
    snprintf(detail, n, "%-4s rel err %.1e (tol %.0e)%s", own ? "own" : "shared", e, tol,
             isnan(e) ? ": NaN in the output (an element left unwritten?)" : "");
    verdict = e < tol ? "PASS" : "FAIL";
done:
    if (!strcmp(verdict, "FAIL") && err.msg[0]) snprintf(detail, n, "%s", err.msg);
    tr_program_free(prog);
    tr_graph_free(g);
    for (int i = 0; i < CB_MAX_IN; i++) tr_host_free(in[i].data);
    tr_host_free(out.data);
    tr_host_free(ref.data);
    return verdict;
}

/* ---- a program's stats and state ---- */

/* y = p + x with p updated to y (a training step's shape: state carried between
 * executes, tr_graph_add_update), or a matmul with no state; returns the graph or NULL. */
static struct tr_graph *program_graph(enum tr_dtype dt, int with_update, const void *pdata, struct tr_error *err) {
    struct tr_graph *g = NULL;
    if (tr_graph_init(&g, err) != TR_OK) return NULL;
    const int64_t shape[2] = {4, 9};
    int x = tr_input(g, "x", dt, 2, shape), y;
    if (with_update) {
        int pid = tr_param(g, "p", dt, 2, shape, 0.0f, 1.0f);
        int ids[2] = {pid, x};
        struct tr_attrs at = {.n_ints = 0};
        y = tr_graph_add_node(g, TR_OP_ADD, 2, ids, &at);
        tr_graph_add_update(g, pid, y);
        if (tr_graph_status(g, err) == TR_OK) tr_graph_bind_param(g, pid, pdata, err);
    } else {
        int ids[2] = {x, x};
        struct tr_attrs at = {.ints = {0, 1}, .floats = {1.0f}};
        y = tr_graph_add_node(g, TR_OP_MATMUL, 2, ids, &at);
    }
    tr_graph_set_output(g, y, "out");
    if (tr_graph_status(g, err) != TR_OK) {
        tr_graph_free(g);
        return NULL;
    }
    return g;
}

/* get_stats after an execute (a run reports them on every row), and for a training
 * backend, state: three executes of p += x, then sync, must leave p0 + 3x in p's host
 * memory and in the last output, as fit's optimizer steps need. */
static void check_program(struct cb_run *r, struct cb_env *env, uint64_t caps) {
    const enum tr_dtype dt = caps & TR_CAP_F32 ? TR_DTYPE_F32 : TR_DTYPE_BF16;
    const double tol = dt == TR_DTYPE_F32 ? 1e-5 : 2e-2;
    printf("\nprogram (%s)\n", tr_dtype_name(dt));
    fflush(stdout);
    for (int upd = 0; upd < 2; upd++) {
        const char *what = upd ? "state: 3 updates, then sync" : "get_stats after execute";
        if (upd && !(caps & TR_CAP_TRAINING)) {
            row(r, "SKIP", what, "the backend does not declare TR_CAP_TRAINING");
            continue;
        }
        stage("%s", what);
        struct tr_error err = {0};
        struct tr_tensor x = {0}, out = {0}, p = {0}, want = {0};
        struct tr_program *prog = NULL;
        struct tr_graph *g = NULL;
        char detail[TR_ERROR_MSG_MAX + 96] = "";
        const char *verdict = "FAIL";
        const int64_t shape[2] = {4, 9}, oshape[2] = {4, 4};
        const struct cb_input any = IN2(4, 9);
        uint64_t seed = env->seed * 31u + 17u + (uint64_t)upd;
        if (alloc_tensor(&x, dt, 2, shape, &err) || alloc_tensor(&p, dt, 2, shape, &err) ||
            alloc_tensor(&want, TR_DTYPE_F32, 2, shape, &err) ||
            alloc_tensor(&out, dt, 2, upd ? shape : oshape, &err))
            goto done;
        fill(&x, &any, &seed);
        fill(&p, &any, &seed);
        for (int64_t i = 0; i < 36; i++) /* p0 + 3x, from the values as stored */
            tr_tensor_set_f64(&want, i, tr_tensor_get_f64(&p, i) + 3.0 * tr_tensor_get_f64(&x, i));
        if (!(g = program_graph(dt, upd, p.data, &err)) || tr_backend_compile(env->be, g, &prog, &err) != TR_OK)
            goto done;
        for (int step = 0; step < (upd ? 3 : 1); step++) {
            poison(&out);
            if (tr_backend_execute(env->be, prog, 1, &x, 1, &out, &err) != TR_OK) goto done;
        }
        if (!upd) {
            struct tr_backend_stats st = {.struct_size = sizeof st};
            if (tr_backend_get_stats(env->be, prog, &st, &err) != TR_OK) goto done;
            snprintf(detail, sizeof detail, "kernel calls %llu, peak %.1f KiB%s%s",
                     (unsigned long long)st.kernel_calls, (double)st.peak_bytes / 1024.0, st.mode[0] ? ", mode " : "",
                     st.mode);
            verdict = "PASS";
            goto done;
        }
        if (tr_backend_sync(env->be, prog, &err) != TR_OK) goto done;
        double ep = rel_err(&p, &want), eo = rel_err(&out, &want);
        snprintf(detail, sizeof detail, "rel err: p's host memory %.1e, last output %.1e (tol %.0e)%s", ep, eo, tol,
                 ep >= tol ? ": the updates are not in p after sync (ignored, or kept elsewhere without sync?)" : "");
        verdict = ep < tol && eo < tol ? "PASS" : "FAIL";
    done:
        if (!strcmp(verdict, "FAIL") && err.msg[0]) snprintf(detail, sizeof detail, "%s", err.msg);
        row(r, verdict, what, detail);
        tr_program_free(prog);
        tr_graph_free(g);
        tr_host_free(x.data);
        tr_host_free(p.data);
        tr_host_free(want.data);
        tr_host_free(out.data);
    }
}

/* ---- the ABI ---- */

/* init must refuse an option it does not know, and say which. */
static void check_unknown_option(struct cb_run *r, struct tr_plugin *p, const struct tr_backend_params *base) {
    static const char key[] = "check_backend_no_such_key";
    struct tr_option opts[TR_CONFIG_MAX_KV + 2];
    int n = base->n_options < TR_CONFIG_MAX_KV ? base->n_options : TR_CONFIG_MAX_KV;
    for (int i = 0; i < n; i++) opts[i] = base->options[i];
    opts[n++] = (struct tr_option){.key = key, .value = "1", .file = "check-backend", .line = 1};
    struct tr_backend_params prm = *base;
    prm.options = opts;
    prm.n_options = n;
    struct tr_backend *be = NULL;
    struct tr_error err = {0};
    char detail[TR_ERROR_MSG_MAX + 64];
    if (tr_backend_init(p, &prm, &be, &err) == TR_OK) {
        tr_backend_free(be);
        row(r, "FAIL", "unknown option refused", "init accepted 'check_backend_no_such_key = 1'");
    } else if (!strstr(err.msg, key)) {
        snprintf(detail, sizeof detail, "refused, but the message does not name the key: %s", err.msg);
        row(r, "FAIL", "unknown option refused by name", detail);
    } else row(r, "PASS", "unknown option refused by name", err.msg);
}

/* The defined global symbols of an ELF64 shared object's .dynsym, other than the entry:
 * a plugin exports tr_backend_entry and nothing else (hidden visibility, version script).
 * Returns how many, their names in `extra`; -1 when the file cannot be read as ELF64. */
static int extra_exports(const char *path, char *extra, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int count = -1;
    unsigned char *buf = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < (long)sizeof(Elf64_Ehdr) || fseek(f, 0, SEEK_SET) != 0 || !(buf = malloc((size_t)size)) ||
        fread(buf, 1, (size_t)size, f) != (size_t)size)
        goto done;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)buf;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > (uint64_t)size)
        goto done;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(buf + eh->e_shoff);
    extra[0] = '\0';
    count = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > (uint64_t)size || strs->sh_offset + strs->sh_size > (uint64_t)size) {
            count = -1;
            goto done;
        }
        const Elf64_Sym *sym = (const Elf64_Sym *)(buf + sh[i].sh_offset);
        for (uint64_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
            int bind = ELF64_ST_BIND(sym[k].st_info);
            if (sym[k].st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK) ||
                sym[k].st_name >= strs->sh_size)
                continue;
            const char *name = (const char *)buf + strs->sh_offset + sym[k].st_name;
            if (!strcmp(name, TR_BACKEND_ENTRY_SYMBOL)) continue;
            size_t used = strlen(extra);
            if (used + strlen(name) + 3 < n) snprintf(extra + used, n - used, "%s%s", used ? ", " : "", name);
            count++;
        }
    }
done:
    free(buf);
    fclose(f);
    return count;
}

static void check_exports(struct cb_run *r, const char *path) {
    char extra[200], d[320];
    int n = extra_exports(path, extra, sizeof extra);
    if (n < 0) row(r, "SKIP", "exports only " TR_BACKEND_ENTRY_SYMBOL, "not an ELF64 file this check can read");
    else if (n == 0) row(r, "PASS", "exports only " TR_BACKEND_ENTRY_SYMBOL, "no other defined dynamic symbol");
    else {
        snprintf(d, sizeof d, "%d more: %s (build with -fvisibility=hidden and the version script)", n, extra);
        row(r, "FAIL", "exports only " TR_BACKEND_ENTRY_SYMBOL, d);
    }
}

static void check_abi(struct cb_run *r, const struct tr_backend_i *it) {
    char d[256];
    snprintf(d, sizeof d, "plugin ABI %u.%u, host %u.%u%s", TR_ABI_GET_MAJOR(it->abi_version),
             TR_ABI_GET_MINOR(it->abi_version), TR_ABI_MAJOR, TR_ABI_MINOR,
             TR_ABI_GET_MINOR(it->abi_version) > TR_ABI_MINOR ? " (newer minor: its extra slots are ignored)" : "");
    row(r, "PASS", "ABI major matches", d);
    snprintf(d, sizeof d, "%u bytes (this host's vtable: %zu, required slots end at %zu)", it->struct_size,
             sizeof(struct tr_backend_i), (size_t)TR_BACKEND_I_MIN_SIZE_1_0);
    row(r, it->struct_size >= TR_BACKEND_I_MIN_SIZE_1_0 ? "PASS" : "FAIL", "vtable size", d);
    int dev = (it->caps & (TR_CAP_CPU | TR_CAP_CUDA)) != 0;
    int dt = (it->caps & (TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16)) != 0;
    tr_caps_str(it->caps, d, sizeof d);
    row(r, dev && dt ? "PASS" : "FAIL", dev && dt ? "caps declare a device and a dtype" : "caps lack a device or dtype",
        d);
    row(r, it->description && it->description[0] ? "PASS" : "FAIL", "has a description",
        it->description && it->description[0] ? it->description : "(empty: `trident list` shows nothing)");
    /* fit's graphs update params, which ABI 1.1 added: the loader refuses them on a 1.0
     * plugin whatever its caps say, so a 1.0 plugin declaring training cannot train */
    if (it->caps & TR_CAP_TRAINING) {
        int can = TR_ABI_GET_MINOR(it->abi_version) >= 1;
        snprintf(d, sizeof d, "%s", can ? "declares TR_CAP_TRAINING and speaks ABI 1.1 or later (graph updates)"
                                        : "declares TR_CAP_TRAINING but speaks ABI 1.0: fit's graphs update params, "
                                          "which needs ABI 1.1, so `trident run` refuses fit on it; rebuild it "
                                          "against this trident's headers");
        row(r, can ? "PASS" : "FAIL", "training needs ABI 1.1", d);
    }
}

static int usage_error(void) {
    fputs("usage: trident check-backend NAME[:MODE]|PATH.so [FILE.ini]\n", stderr);
    return 2;
}

struct cb_job {
    const char *name;
    struct tr_config *cfg;
    const struct tr_config_backend *spec;
    int is_path;
};
static int check_run(void *arg, int cmd);

int tr_cli_check_backend(int argc, char **argv) {
    if (argc < 1 || argc > 2 || argv[0][0] == '-') return usage_error();
    struct tr_error err = {0};
    static struct tr_config cfg;
    tr_config_defaults(&cfg);
    /* the INI's [backend.STEM] is this check's own, whatever its backends line lists: the
     * loader's warning of a section no listed backend takes is not this command's */
    tr_log_set_level(TR_LOG_ERROR);
    const int bad = argc == 2 && tr_config_load(argv[1], &cfg, &err) != TR_OK;
    tr_log_set_level(-1);
    if (bad) {
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    tr_cli_apply_threads(&cfg);
    /* the entry as [run] backends reads it: NAME[:MODE], or a path whose file stem names
     * the [backend.NAME] section it reads, as in `trident run` */
    struct tr_config_backend spec;
    if (tr_config_backend_parse(argv[0], &spec, &err) != TR_OK) {
        fprintf(stderr, "trident: error: check-backend %s\n", err.msg);
        return 2;
    }
    const int is_path = spec.path[0] != '\0';

    /* The check in a child process: a backend that crashes, exits or hangs in it is a
     * failed check naming the signal, not the end of this program. */
    struct cb_job job = {.name = argv[0], .cfg = &cfg, .spec = &spec, .is_path = is_path};
    if (!cfg.isolate || !tr_fork_safe(NULL)) return check_run(&job, 'C');
    int status = 0;
    void *shared = mmap(NULL, CB_STAGE_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cb_stage = shared == MAP_FAILED ? NULL : shared;
    if (cb_stage) cb_stage[0] = '\0';
    fflush(stdout); /* nothing buffered twice in the child */
    /* the cases are tiny: a check that runs past two minutes hangs (an INI's backend_timeout
     * line says otherwise) */
    const double timeout = tr_config_run_line(&cfg, "backend_timeout") ? cfg.backend_timeout : CB_TIMEOUT_S;
    if (tr_child_once(check_run, &job, 'C', timeout, "the conformance check", &status, &err) != TR_OK) {
        printf("  FAIL  %-38s %s%s%s\n\nthe backend does not conform (the rows above are what it finished)\n",
               "runs without killing its process", err.msg, cb_stage && cb_stage[0] ? "; it was in: " : "",
               cb_stage ? cb_stage : "");
        status = 1;
    }
    if (cb_stage) munmap(cb_stage, CB_STAGE_MAX);
    cb_stage = NULL;
    return status;
}

static int check_run(void *arg, int cmd) {
    (void)cmd;
    struct cb_job *job = arg;
    const char *name = job->name;
    struct tr_config *cfgp = job->cfg;
#define cfg (*cfgp)
    struct tr_config_backend spec = *job->spec;
    const int is_path = job->is_path;
    struct tr_error err = {0};
    struct cb_run r = {0};
    struct tr_plugin_search s = {.ini_dir = cfg.plugin_path[0] ? cfg.plugin_path : NULL, .env_path = NULL};
    struct tr_plugin *p = NULL;
    printf("check-backend %s\n\nABI\n", name);
    fflush(stdout);
    stage("%s", "loading the plugin (its entry point)");
    if (tr_plugin_open(is_path ? spec.path : spec.name, &s, &p, &err) != TR_OK) {
        row(&r, "FAIL", "loads (the loader's checks)", err.msg);
        printf("\n%d passed, %d failed: not a usable backend\n", r.pass, r.fail);
        return 1;
    }
    const struct tr_backend_i *it = tr_plugin_iface(p);
    row(&r, "PASS", "loads (the loader's checks)", tr_plugin_path(p));
    check_exports(&r, tr_plugin_path(p));
    check_abi(&r, it);
    /* `backends = NAME` finds the file by NAME; rows and messages say the vtable's */
    const char *file = strrchr(tr_plugin_path(p), '/') ? strrchr(tr_plugin_path(p), '/') + 1 : tr_plugin_path(p);
    const size_t pre = strncmp(file, "libtrident_backend_", 19) ? 0 : 19, stem = strlen(file + pre) - 3;
    if (strlen(file) > pre + 3 && !strcmp(file + strlen(file) - 3, ".so") &&
        (strlen(it->name) != stem || strncmp(file + pre, it->name, stem) != 0)) {
        char d[320];
        snprintf(d, sizeof d, "the file says '%.*s', the vtable '%s': `backends = %.*s` runs it and its rows say '%s' "
                 "(docs/writing-a-backend.md gives the two one name)", (int)stem, file + pre, it->name, (int)stem,
                 file + pre, it->name);
        row(&r, "NOTE", "the vtable's name is the file's", d);
    }

    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    int n_opts = tr_config_backend_options(&cfg, &spec, opts, TR_CONFIG_MAX_KV + 1);
    struct tr_backend_params prm = {.device_type = cfg.device_type, .device_index = 0, .options = opts,
                                    .n_options = n_opts};
    struct cb_env env = {.seed = cfg.seed};
    stage("%s", "init with the INI's options");
    int rc = tr_backend_init(p, &prm, &env.be, &err);
    const int init_refused = rc != TR_OK;
    row(&r, rc == TR_OK ? "PASS" : "FAIL", "init with the INI's options", rc == TR_OK ? cfg.device : err.msg);
    /* with the INI's options refused already, the unknown key is tried alone */
    struct tr_backend_params bare = prm;
    bare.n_options = 0;
    check_unknown_option(&r, p, rc == TR_OK ? &prm : &bare);
    if (rc == TR_OK && tr_kernels_init(&env.ref, TR_DEVICE_CPU, 0, &err) != TR_OK) {
        row(&r, "FAIL", "reference kernels", err.msg);
        rc = err.status;
    }

    if (rc == TR_OK) {
        printf("\nops (compared with the shared CPU kernels; %d runs each, outputs poisoned)\n", CB_STEPS);
        fflush(stdout);
        const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16};
        const uint64_t dt_caps[] = {TR_CAP_F32, TR_CAP_BF16};
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
            if (!(it->caps & dt_caps[d])) continue;
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                char what[64], detail[TR_ERROR_MSG_MAX + 64];
                snprintf(what, sizeof what, "%-4s %s", tr_dtype_name(dts[d]), cases[i].label);
                if (cases[i].training && !(it->caps & TR_CAP_TRAINING)) {
                    row(&r, "SKIP", what, "a training op; the backend does not declare TR_CAP_TRAINING");
                    continue;
                }
                if (cases[i].op == TR_OP_CAST) { /* a cast makes its target's dtype: that cap too */
                    const int64_t to = cases[i].at.ints[0];
                    const uint64_t need = to == TR_DTYPE_BF16 ? TR_CAP_BF16 : to == TR_DTYPE_F16 ? TR_CAP_F16 : TR_CAP_F32;
                    if (!(it->caps & need)) {
                        row(&r, "SKIP", what, "casts to a dtype the backend does not declare in its caps");
                        continue;
                    }
                }
                stage("the case %s", what);
                const char *v = check_case(&env, &cases[i], dts[d], detail, sizeof detail);
                row(&r, v, what, detail);
            }
        }
    }
    if (rc == TR_OK) check_program(&r, &env, it->caps);
    tr_kernels_free(env.ref);
    stage("%s", "free");
    tr_backend_free(env.be);
    stage("%s", "closing the plugin");
    tr_plugin_close(p);
    if (init_refused) { /* the user's options (or device), not the backend, stopped the check */
        printf("\n%d passed, %d failed, %d skipped: init refused the options given (the INI's [backend.%s], a "
               "NAME:MODE, [run] device), so no op was checked; fix them and run again\n", r.pass, r.fail, r.skip,
               spec.name);
        return 2;
    }
    printf("\n%d passed, %d failed, %d skipped: %s\n", r.pass, r.fail, r.skip,
           r.fail ? "the backend does not conform" : "the backend conforms");
    return r.fail ? 1 : 0;
#undef cfg
}
