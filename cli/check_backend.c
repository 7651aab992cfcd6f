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
#include "cli.h"
#include "trident/isolate.h"
#include "trident/kernels.h"
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

static void row(struct cb_run *r, const char *verdict, const char *what, const char *detail) {
    printf("  %-4s  %-38s %s\n", verdict, what, detail);
    fflush(stdout); /* the rows so far survive a backend that kills its process */
    if (!strcmp(verdict, "PASS")) r->pass++;
    else if (!strcmp(verdict, "FAIL")) r->fail++;
    else r->skip++;
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
    if (argc == 2 && tr_config_load(argv[1], &cfg, &err) != TR_OK) {
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    tr_cli_apply_threads(&cfg);
    /* NAME:MODE the way [run] backends reads it (a path keeps its colons). */
    struct tr_config_backend spec = {0};
    snprintf(spec.spec, sizeof spec.spec, "%s", argv[0]);
    snprintf(spec.name, sizeof spec.name, "%s", argv[0]);
    const char *colon = strchr(argv[0], ':');
    int is_path = strchr(argv[0], '/') != NULL || strstr(argv[0], ".so") != NULL;
    if (colon && !is_path) {
        snprintf(spec.name, sizeof spec.name, "%.*s", (int)(colon - argv[0]), argv[0]);
        snprintf(spec.mode, sizeof spec.mode, "%s", colon + 1);
    }

    /* The check in a child process: a backend that crashes, exits or hangs in it is a
     * failed check naming the signal, not the end of this program. */
    struct cb_job job = {.name = argv[0], .cfg = &cfg, .spec = &spec, .is_path = is_path};
    if (!cfg.isolate || !tr_fork_safe(NULL)) return check_run(&job, 'C');
    int status = 0;
    if (tr_child_once(check_run, &job, 'C', cfg.backend_timeout, "the conformance check", &status, &err) != TR_OK) {
        printf("  FAIL  %-38s %s\n\nthe backend does not conform (the rows above are what it finished)\n",
               "runs without killing its process", err.msg);
        return 1;
    }
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
    if (tr_plugin_open(is_path ? name : spec.name, &s, &p, &err) != TR_OK) {
        row(&r, "FAIL", "loads (the loader's checks)", err.msg);
        printf("\n%d passed, %d failed: not a usable backend\n", r.pass, r.fail);
        return 1;
    }
    const struct tr_backend_i *it = tr_plugin_iface(p);
    row(&r, "PASS", "loads (the loader's checks)", tr_plugin_path(p));
    check_exports(&r, tr_plugin_path(p));
    check_abi(&r, it);
    if (is_path) snprintf(spec.name, sizeof spec.name, "%s", it->name); /* [backend.NAME] of the vtable's name */

    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    int n_opts = tr_config_backend_options(&cfg, &spec, opts, TR_CONFIG_MAX_KV + 1);
    struct tr_backend_params prm = {.device_type = cfg.device_type, .device_index = 0, .options = opts,
                                    .n_options = n_opts};
    struct cb_env env = {.seed = cfg.seed};
    int rc = tr_backend_init(p, &prm, &env.be, &err);
    row(&r, rc == TR_OK ? "PASS" : "FAIL", "init with the INI's options", rc == TR_OK ? cfg.device : err.msg);
    check_unknown_option(&r, p, &prm);
    if (rc == TR_OK && tr_kernels_init(&env.ref, TR_DEVICE_CPU, 0, &err) != TR_OK) {
        row(&r, "FAIL", "reference kernels", err.msg);
        rc = err.status;
    }

    if (rc == TR_OK) {
        printf("\nops (compared with the shared CPU kernels; %d runs each, outputs poisoned)\n", CB_STEPS);
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
                const char *v = check_case(&env, &cases[i], dts[d], detail, sizeof detail);
                row(&r, v, what, detail);
            }
        }
    }
    tr_kernels_free(env.ref);
    tr_backend_free(env.be);
    tr_plugin_close(p);
    printf("\n%d passed, %d failed, %d skipped: %s\n", r.pass, r.fail, r.skip,
           r.fail ? "the backend does not conform" : "the backend conforms");
    return r.fail ? 1 : 0;
#undef cfg
}
