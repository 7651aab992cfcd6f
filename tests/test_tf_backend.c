/* The tf backend: the remapper's patterns (where they must match and where they must
 * not), each fused graph against the eager torch backend on random inputs, the arena
 * plan of every compiled graph (BERT tiny included), BERT tiny against Hugging Face,
 * no allocation per step, options and unsupported ops refused by name.
 *
 * The remapper and the executor are compiled in from the plugin's sources (the .so
 * exports nothing but its entry point), so the test reads the fused IR and the plan
 * directly; the plugin itself runs through the loader like any backend. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloccount.h"
#include "backendutil.h"
#include "testutil.h"
#include "ref/ref.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/trident.h"

#include "../plugins/backend_tf/tf_internal.h"


/* ---- counting allocations (tests/alloccount.h): trident's code is this test's own
 * executable (the executor is compiled into it) and the kernels library ---- */
#define COUNT_ALLOCS TR_TEST_COUNT_ALLOCS
#if COUNT_ALLOCS
static void allocs_by_owner(long *ours, long *theirs) {
    const void *own[] = {(const void *)&tf_compile, (const void *)&tr_k_matmul};
    *ours = tr_test_allocs_stop(own, 2, theirs, NULL, 0);
}
#endif

/* ---- graphs with random weights and inputs ---- */

#define MAX_T 16
struct gcase {
    struct tr_graph *g;
    enum tr_dtype dt;
    struct tr_tensor params[MAX_T];
    int n_params;
    struct tr_tensor in[MAX_T];
    int64_t int_hi[MAX_T];      /* per input: ids drawn from [0, hi) */
};

/* c cleared, with a new graph in dt, which it returns. */
static struct tr_graph *gcase_init(struct gcase *c, enum tr_dtype dt) {
    memset(c, 0, sizeof *c);
    c->dt = dt;
    c->g = tr_test_graph_new();
    return c->g;
}

/* Bind random weights, make random inputs (never zero), once the graph is built. */
static void gcase_ready(struct gcase *c, uint64_t seed) {
    struct tr_error e = {0};
    if (tr_graph_status(c->g, &e) != TR_OK) fail_msg("graph: %s", e.msg);
    c->n_params = tr_graph_n_params(c->g);
    assert_true(c->n_params <= MAX_T);
    for (int i = 0; i < c->n_params; i++) {
        int id = tr_graph_param(c->g, i);
        struct tr_tensor t = tr_node_tensor(c->g, id);
        c->params[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
        tr_test_randn(&c->params[i], seed + 100 + (uint64_t)i, 0.5);
        assert_int_equal(tr_graph_bind_param(c->g, id, c->params[i].data, &e), TR_OK);
    }
    for (int i = 0; i < tr_graph_n_inputs(c->g); i++) {
        struct tr_tensor t = tr_node_tensor(c->g, tr_graph_input(c->g, i));
        c->in[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
        if (t.dtype == TR_DTYPE_I32 || t.dtype == TR_DTYPE_I64) tr_test_randint(&c->in[i], seed + (uint64_t)i, c->int_hi[i]);
        else tr_test_randn(&c->in[i], seed + (uint64_t)i, 1.0);
    }
}

static void gcase_free(struct gcase *c) {
    for (int i = 0; i < c->n_params; i++) tr_test_tensor_free(&c->params[i]);
    for (int i = 0; i < tr_graph_n_inputs(c->g); i++) tr_test_tensor_free(&c->in[i]);
    tr_graph_free(c->g);
}

static void alloc_outputs(const struct tr_graph *g, struct tr_tensor *out) {
    for (int i = 0; i < tr_graph_n_outputs(g); i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_output(g, i));
        out[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
        tr_test_poison(&out[i]);
    }
}

static void free_outputs(const struct tr_graph *g, struct tr_tensor *out) {
    for (int i = 0; i < tr_graph_n_outputs(g); i++) tr_test_tensor_free(&out[i]);
}

/* ---- backends through the loader ---- */

static struct tr_plugin *open_plugin(const char *name) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_plugin *p = NULL;
    struct tr_error e = {0};
    if (tr_plugin_open(name, &s, &p, &e)) fail_msg("open %s: %s", name, e.msg);
    return p;
}

static struct tr_backend *init_backend(struct tr_plugin *p, const struct tr_option *opts, int n) {
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    struct tr_backend *be = NULL;
    struct tr_error e = {0};
    if (tr_backend_init(p, &prm, &be, &e)) fail_msg("init: %s", e.msg);
    return be;
}

/* One step of g on a backend; outputs allocated and poisoned here; stats filled. */
static void run_on(const char *name, const struct tr_option *opts, int n_opts, struct tr_graph *g,
                   const struct tr_tensor *in, struct tr_tensor *out, struct tr_backend_stats *st) {
    struct tr_plugin *p = open_plugin(name);
    struct tr_backend *be = init_backend(p, opts, n_opts);
    struct tr_program *prog = NULL;
    struct tr_error e = {0};
    if (tr_backend_compile(be, g, &prog, &e)) fail_msg("%s compile: %s", name, e.msg);
    alloc_outputs(g, out);
    if (tr_backend_execute(be, prog, tr_graph_n_inputs(g), in, tr_graph_n_outputs(g), out, &e))
        fail_msg("%s execute: %s", name, e.msg);
    if (st && tr_backend_get_stats(be, prog, st, &e)) fail_msg("%s stats: %s", name, e.msg);
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(p);
}

/* ---- the compiled program, in this process ---- */

static struct tf_context test_ctx(int fuse) {
    return (struct tf_context){.host = tr_host_api_get(), .device_type = TR_DEVICE_CPU, .fuse = fuse, .simplify = 1};
}

/* Live ranges that meet never share a byte (checked here independently of plan.c),
 * tr_plan_verify agrees, and no step's output overlaps one of its inputs. */
static void check_plan(const struct tf_program *p) {
    struct tr_error e = {0};
    if (tr_plan_verify(p->bufs, p->n_bufs, p->arena_bytes, &e)) fail_msg("tr_plan_verify: %s", e.msg);
    for (int i = 0; i < p->n_bufs; i++) {
        const struct tr_plan_buf *a = &p->bufs[i];
        assert_true(a->offset >= 0 && a->offset + a->size <= p->arena_bytes && a->offset % TF_ALIGN == 0);
        for (int j = i + 1; j < p->n_bufs; j++) {
            const struct tr_plan_buf *b = &p->bufs[j];
            int live = a->first <= b->last && b->first <= a->last;
            int bytes = a->size && b->size && a->offset < b->offset + b->size && b->offset < a->offset + a->size;
            if (live && bytes) fail_msg("buffers %d and %d are live together and overlap", i, j);
        }
    }
    for (int s = 0; s < p->n_steps; s++) {
        const struct tr_kernel_call *st = &p->steps[s].call;
        const char *o0 = st->out.data, *o1 = o0 + tr_tensor_nbytes(&st->out);
        for (int j = 0; j < st->n_in; j++) {
            const char *i0 = st->in[j].data, *i1 = i0 + tr_tensor_nbytes(&st->in[j]);
            if (o0 < i1 && i0 < o1 && o1 > o0 && i1 > i0) fail_msg("step %d writes over its input %d", s, j);
        }
    }
    /* the arena is the plan's size, and it is smaller than one buffer per value */
    int64_t sum = 0;
    for (int i = 0; i < p->n_bufs; i++) sum += p->bufs[i].size;
    assert_true(p->arena_bytes <= sum + (int64_t)p->n_bufs * TF_ALIGN);
}

static struct tf_program *compile_here(struct tf_context *ctx, struct tr_graph *g) {
    struct tf_program *p = NULL;
    struct tr_error e = {0};
    if (tf_compile(ctx, g, &p, &e)) fail_msg("tf_compile: %s", e.msg);
    check_plan(p);
    return p;
}

static int fused_count(const struct tf_program *p, const char *name) {
    for (int i = 0; i < p->fus.n; i++)
        if (strcmp(p->fus.kind[i].name, name) == 0) return p->fus.kind[i].count;
    return 0;
}

static int fused_total(const struct tf_program *p) {
    int n = 0;
    for (int i = 0; i < p->fus.n; i++) n += p->fus.kind[i].count;
    return n;
}

static int ops_left(const struct tf_program *p, int op) {
    int n = 0;
    for (int i = 0; i < p->pir.n; i++) n += p->pir.nodes[i].op == op;
    return n;
}

/* The fused plan of g keeps exactly n nodes of each op given as op, n, ..., -1. */
static void expect_ops_left(struct tr_graph *g, ...) {
    struct tf_context ctx = test_ctx(1);
    struct tf_program *p = compile_here(&ctx, g);
    va_list ap;
    va_start(ap, g);
    for (int op; (op = va_arg(ap, int)) >= 0;) {
        int n = va_arg(ap, int);
        if (ops_left(p, op) != n) fail_msg("%d %s left, expected %d", ops_left(p, op), tr_op_name(op), n);
    }
    va_end(ap);
    tf_program_free(p);
}

/* The patterns found in c->g, checked against `want` ("name", count, ..., NULL) exactly:
 * nothing else is fused. Then tf (fused and not) against torch on c's inputs. */
static void expect_fusions(struct gcase *c, ...) {
    struct tf_context ctx = test_ctx(1);
    struct tf_program *p = compile_here(&ctx, c->g);
    va_list ap;
    va_start(ap, c);
    int want_total = 0;
    for (const char *name; (name = va_arg(ap, const char *));) {
        int n = va_arg(ap, int);
        want_total += n;
        if (fused_count(p, name) != n) {
            char f[256];
            fail_msg("expected %s x%d, found: %s", name, n, tf_fusions_str(&p->fus, f, sizeof f));
        }
    }
    va_end(ap);
    if (fused_total(p) != want_total) {
        char f[256];
        fail_msg("expected %d fusions, found: %s", want_total, tf_fusions_str(&p->fus, f, sizeof f));
    }
    tf_program_free(p);
    struct tf_context ctx0 = test_ctx(0);
    tf_program_free(compile_here(&ctx0, c->g)); /* the unfused plan holds too */

    struct tr_tensor ref[8], out[8], raw[8];
    int n_out = tr_graph_n_outputs(c->g);
    struct tr_backend_stats st;
    const struct tr_option nofuse = {.key = "fuse", .value = "false"};
    run_on("torch", NULL, 0, c->g, c->in, ref, NULL);
    run_on("tf", NULL, 0, c->g, c->in, out, &st);
    run_on("tf", &nofuse, 1, c->g, c->in, raw, NULL);
    assert_string_equal(st.mode, "");
    double tol = tr_test_tol(c->dt);
    /* f32: tf against torch. bf16 and f16: each of the three against the float64 evaluator,
     * since two ways of rounding to bf16 may differ by more than either differs from the
     * exact value */
    double **v = c->dt == TR_DTYPE_F32 ? NULL : tr_ref_graph_run(c->g, c->in);
    for (int i = 0; i < n_out; i++) {
        double *r = v ? v[tr_graph_output(c->g, i)] : tr_test_to_f64(&ref[i]);
        const char *vs = v ? "float64" : "torch";
        char what[160];
        snprintf(what, sizeof what, "%s output %d '%s' (tf vs %s)", tr_dtype_name(c->dt), i,
                 tr_graph_output_name(c->g, i), vs);
        tr_assert_close(what, &out[i], r, tol);
        snprintf(what, sizeof what, "%s output %d (tf fuse=false vs %s)", tr_dtype_name(c->dt), i, vs);
        tr_assert_close(what, &raw[i], r, tol);
        if (v) {
            snprintf(what, sizeof what, "%s output %d (torch vs float64)", tr_dtype_name(c->dt), i);
            tr_assert_close(what, &ref[i], r, tol);
        } else {
            free(r);
        }
    }
    if (v) tr_ref_graph_free(c->g, v);
    free_outputs(c->g, ref);
    free_outputs(c->g, out);
    free_outputs(c->g, raw);
}

#define SH(...) (const int64_t[]){__VA_ARGS__}
#define ND(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static int linear(struct gcase *c, int x, int64_t in, int64_t out, const char *name, int bias_ndim) {
    struct tr_graph *g = c->g;
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s.weight", name);
    snprintf(n2, sizeof n2, "%s.bias", name);
    int w = tr_param(g, n1, c->dt, 2, SH(out, in), 0, 0.1f);
    int b = bias_ndim == 1 ? tr_param(g, n2, c->dt, 1, SH(out), 0, 0.1f) : tr_param(g, n2, c->dt, 2, SH(1, out), 0, 0.1f);
    return tr_add(g, tr_matmul(g, x, w, 0, 1), b);
}

static int ln(struct gcase *c, int x, int64_t d, const char *name) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s.weight", name);
    snprintf(n2, sizeof n2, "%s.bias", name);
    int g1 = tr_param(c->g, n1, c->dt, 1, SH(d), 1, 0.1f), b1 = tr_param(c->g, n2, c->dt, 1, SH(d), 0, 0.1f);
    return tr_layer_norm(c->g, x, g1, b1, 1e-5f);
}

/* ---- GEMM epilogues ---- */

static void gemm_epilogues(enum tr_dtype dt) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, dt);
    int x = tr_input(g, "x", dt, 3, SH(2, 5, 24));
    int h1 = tr_gelu(g, linear(&c, x, 24, 32, "fc1", 1), 0);                 /* gemm+bias+gelu */
    int h2 = tr_unary(g, TR_OP_RELU, linear(&c, h1, 32, 16, "fc2", 1));      /* gemm+bias+relu */
    int h3 = tr_unary(g, TR_OP_TANH, linear(&c, h2, 16, 16, "fc3", 1));      /* gemm+bias+tanh */
    int h4 = tr_unary(g, TR_OP_SILU, linear(&c, h3, 16, 8, "fc4", 1));       /* gemm+bias+silu */
    int h5 = linear(&c, h4, 8, 8, "fc5", 1);                                 /* gemm+bias */
    int w6 = tr_param(g, "fc6.weight", dt, 2, SH(8, 8), 0, 0.1f);
    int h6 = tr_gelu(g, tr_matmul(g, h5, w6, 0, 1), 1);                      /* gemm+gelu_tanh, no bias */
    tr_graph_set_output(g, h6, "y");
    gcase_ready(&c, 11);
    expect_fusions(&c, "gemm+bias+gelu", 1, "gemm+bias+relu", 1, "gemm+bias+tanh", 1, "gemm+bias+silu", 1,
                   "gemm+bias", 1, "gemm+gelu_tanh", 1, NULL);
    gcase_free(&c);
}

TR_TEST_F32_BF16(test_gemm_epilogues, gemm_epilogues)

/* A GEMM whose product is read twice stays a GEMM; a bias that is not (N) stays an ADD;
 * a biased value that is a graph output is computed (gemm+bias) and the activation
 * after it runs on its own. */
static void test_gemm_not_fused(void **state) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, TR_DTYPE_F32);
    int x = tr_input(g, "x", c.dt, 2, SH(6, 12));
    int w = tr_param(g, "w", c.dt, 2, SH(10, 12), 0, 0.1f), b = tr_param(g, "b", c.dt, 1, SH(10), 0, 0.1f);
    int mm = tr_matmul(g, x, w, 0, 1);
    int a = tr_gelu(g, tr_add(g, mm, b), 0);
    int twice = tr_scale(g, mm, 2.0f, 0.0f);                     /* the product's second reader */
    tr_graph_set_output(g, a, "a");
    tr_graph_set_output(g, twice, "twice");
    int y = linear(&c, x, 12, 10, "rowbias", 2);                 /* bias (1,N): not (N) */
    tr_graph_set_output(g, tr_gelu(g, y, 0), "y");
    int tb = tr_param(g, "tb", c.dt, 2, SH(6, 10), 0, 0.1f);     /* a full (M,N) addend */
    int w2 = tr_param(g, "w2", c.dt, 2, SH(10, 12), 0, 0.1f);
    int z = tr_add(g, tr_matmul(g, x, w2, 0, 1), tb);
    tr_graph_set_output(g, tr_unary(g, TR_OP_RELU, z), "z");
    int o = linear(&c, x, 12, 10, "out", 1);                     /* biased value is an output */
    tr_graph_set_output(g, o, "o");
    tr_graph_set_output(g, tr_unary(g, TR_OP_TANH, o), "to");
    gcase_ready(&c, 12);
    expect_fusions(&c, "gemm+bias", 1, NULL);
    expect_ops_left(g, TR_OP_MATMUL, 3, TR_OP_TANH, 1, -1);
    gcase_free(&c);
}

/* ---- layer norm patterns ---- */

static void layer_norms(enum tr_dtype dt) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, dt);
    const int64_t D = 48;
    int x = tr_input(g, "x", dt, 3, SH(2, 7, D));
    int r = tr_input(g, "r", dt, 3, SH(2, 7, D));
    int h = ln(&c, tr_add(g, linear(&c, x, D, D, "dense", 1), r), D, "ln1");     /* bias+residual+ln */
    int h2 = ln(&c, tr_add(g, h, r), D, "ln2");                                  /* residual+ln */
    int bias = tr_param(g, "b3", dt, 1, SH(D), 0, 0.5f);
    int h3 = ln(&c, tr_add(g, bias, h2), D, "ln3");                              /* bias+ln */
    int s = tr_add(g, h3, x);                                                    /* an output: not fused */
    int h4 = ln(&c, s, D, "ln4");
    tr_graph_set_output(g, h4, "y");
    tr_graph_set_output(g, s, "s");
    gcase_ready(&c, 21);
    expect_fusions(&c, "bias+residual+ln", 1, "residual+ln", 1, "bias+ln", 1, NULL);
    gcase_free(&c);
}

TR_TEST_F32_BF16(test_layer_norm_patterns, layer_norms)

/* ---- softmax and attention ---- */

static void softmaxes(enum tr_dtype dt) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, dt);
    int x = tr_input(g, "x", dt, 4, SH(2, 3, 5, 9));
    int m = tr_input(g, "mask", dt, 4, SH(2, 1, 1, 9));
    int a = tr_softmax(g, tr_add(g, tr_scale(g, x, 0.3f, 0.0f), m));    /* scale+mask+softmax */
    int b = tr_softmax(g, tr_add(g, m, a));                             /* mask+softmax (mask first) */
    int d = tr_softmax(g, tr_scale(g, b, 2.5f, 0.0f));                  /* scale+softmax */
    int e = tr_softmax(g, tr_scale(g, d, 2.0f, 1.0f));                  /* beta != 0: left alone */
    tr_graph_set_output(g, e, "y");
    gcase_ready(&c, 31);
    expect_fusions(&c, "scale+mask+softmax", 1, "mask+softmax", 1, "scale+softmax", 1, NULL);
    gcase_free(&c);
}

TR_TEST_F32_BF16(test_softmax_patterns, softmaxes)

static void attention_block(enum tr_dtype dt, int with_mask, int with_scale) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, dt);
    const int64_t B = 2, H = 3, T = 11, Dh = 8;
    int q = tr_input(g, "q", dt, 4, SH(B, H, T, Dh)), k = tr_input(g, "k", dt, 4, SH(B, H, T, Dh)),
        v = tr_input(g, "v", dt, 4, SH(B, H, T, Dh));
    /* with_mask 2: a full (B,H,T,T) mask, the first operand of the ADD */
    int m = with_mask == 1 ? tr_input(g, "mask", TR_DTYPE_F32, 4, SH(B, 1, 1, T))
            : with_mask == 2 ? tr_input(g, "mask", TR_DTYPE_F32, 4, SH(B, H, T, T)) : -1;
    int s = tr_matmul(g, q, k, 0, 1);
    if (with_scale) s = tr_scale(g, s, 0.35f, 0.0f);
    if (dt != TR_DTYPE_F32 && with_mask) m = tr_cast(g, m, dt); /* ADD takes one dtype */
    if (with_mask) s = with_mask == 2 ? tr_add(g, m, s) : tr_add(g, s, m);
    int o = tr_matmul(g, tr_softmax(g, s), v, 0, 0);
    tr_graph_set_output(g, o, "ctx");
    gcase_ready(&c, 41);
    expect_fusions(&c, "attention", 1, NULL);
    expect_ops_left(g, TR_OP_MATMUL, 0, TR_OP_SOFTMAX, 0, TR_OP_ATTENTION, 1, -1);
    gcase_free(&c);
}

static void test_attention_pattern(void **state) {
    attention_block(TR_DTYPE_F32, 1, 1);
    attention_block(TR_DTYPE_F32, 0, 1);
    attention_block(TR_DTYPE_F32, 1, 0);
    attention_block(TR_DTYPE_F32, 2, 0);
    attention_block(TR_DTYPE_BF16, 1, 1);
}

/* Scores that are a graph output must be computed: the block is not attention, and
 * what is left (scale+mask+softmax) still fuses. */
static void test_attention_not_fused(void **state) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, TR_DTYPE_F32);
    int q = tr_input(g, "q", c.dt, 4, SH(1, 2, 6, 4)), k = tr_input(g, "k", c.dt, 4, SH(1, 2, 6, 4)),
        v = tr_input(g, "v", c.dt, 4, SH(1, 2, 6, 4)), m = tr_input(g, "mask", c.dt, 4, SH(1, 1, 6, 6));
    int s = tr_matmul(g, q, k, 0, 1);
    int o = tr_matmul(g, tr_softmax(g, tr_add(g, tr_scale(g, s, 0.5f, 0.0f), m)), v, 0, 0);
    tr_graph_set_output(g, o, "ctx");
    tr_graph_set_output(g, s, "scores");
    gcase_ready(&c, 42);
    expect_fusions(&c, "scale+mask+softmax", 1, NULL);
    gcase_free(&c);
}

/* ---- embeddings ---- */

static void embeddings(enum tr_dtype dt) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, dt);
    const int64_t B = 3, T = 9, D = 40, V = 30;
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, SH(B, T));
    int types = tr_input(g, "types", TR_DTYPE_I32, 2, SH(B, T));
    int ids2 = tr_input(g, "ids2", TR_DTYPE_I64, 2, SH(B, T));
    c.int_hi[0] = V;
    c.int_hi[1] = 2;
    c.int_hi[2] = V;
    int32_t pos_ids[9];
    for (int t = 0; t < T; t++) pos_ids[t] = (int32_t)(T - 1 - t);
    int pos = tr_const(g, "position_ids", TR_DTYPE_I32, 1, SH(T), pos_ids);
    int wte = tr_param(g, "wte", dt, 2, SH(V, D), 0, 1), wtt = tr_param(g, "wtt", dt, 2, SH(2, D), 0, 1),
        wpe = tr_param(g, "wpe", dt, 2, SH(T + 2, D), 0, 1);
    int e1 = tr_embedding(g, wte, ids);
    int e2 = tr_embedding(g, wtt, types);
    int x = tr_add(g, e1, e2);
    x = tr_add(g, x, tr_embedding(g, wpe, pos));
    int y = ln(&c, x, D, "emb_ln");                                      /* embed+ln (3 tables) */
    /* 2 tables; gathers of their own (the same gathers as y's would be merged by cse and
     * then have two readers each, which is no pattern) */
    int wtt2 = tr_param(g, "wtt2", dt, 2, SH(2, D), 0, 1);
    int y2 = ln(&c, tr_add(g, tr_embedding(g, wte, ids2), tr_embedding(g, wtt2, types)), D, "ln2");
    tr_graph_set_output(g, y, "y");
    tr_graph_set_output(g, y2, "y2");
    gcase_ready(&c, 51);
    expect_fusions(&c, "embed+ln", 2, NULL);
    gcase_free(&c);
}

TR_TEST_F32_BF16(test_embedding_pattern, embeddings)

/* ---- BERT tiny ---- */

static const struct tr_bert_config *preset(const char *name) {
    for (int i = 0; i < tr_model_bert.n_presets; i++)
        if (strcmp(tr_model_bert.presets[i].name, name) == 0) return tr_model_bert.presets[i].config;
    fail_msg("bert has no preset '%s'", name);
    return NULL;
}

static void bert_matches_hf(enum tr_dtype dt) {
    struct tr_test_bert b;
    tr_test_bert_open(&b, dt, "");
    struct tr_graph *g = b.g;
    const struct tr_tensor *in = b.in;

    /* the fused program: what BERT offers is fused, and the plan holds */
    struct tf_context ctx = test_ctx(1);
    struct tf_program *p = compile_here(&ctx, g);
    const int L = (int)preset("tiny")->num_hidden_layers;
    assert_int_equal(fused_count(p, "embed+ln"), 1);
    assert_int_equal(fused_count(p, "bias+residual+ln"), 2 * L);
    assert_int_equal(fused_count(p, "gemm+bias+gelu"), L);
    assert_int_equal(fused_count(p, "gemm+bias+tanh"), 1);
    assert_int_equal(fused_count(p, "gemm+bias"), 3 * L + 1);
    assert_int_equal(ops_left(p, TR_OP_LAYER_NORM), 0);
    tf_program_free(p);

    struct tr_tensor out[3];
    struct tr_backend_stats st;
    run_on("tf", NULL, 0, g, in, out, &st);
    tr_test_expect_bert_hf(b.io, g, out, dt, "tf bert tiny", "");
    /* every node of a layer is one kernel call; the fused graph has about half the calls */
    assert_true(st.kernel_calls > 0 && st.kernel_calls < (uint64_t)tr_graph_n_nodes(g) / 2);
    assert_true(st.arena_bytes > 0 && st.peak_bytes == st.arena_bytes + tr_graph_param_bytes(g) + 4 * in[0].shape[1]);
    if (!strstr(st.notes, "bias+residual+ln x4") || !strstr(st.notes, "embed+ln x1"))
        fail_msg("notes: %s", st.notes);
    free_outputs(g, out);
    tr_test_bert_close(&b);
}

TR_TEST_F32_BF16(test_bert_tiny, bert_matches_hf)

/* ---- a step allocates nothing ---- */

/* A graph of the patterns whose kernels keep their rows on the stack (GEMM epilogues,
 * the fused layer norms, embeddings): after the first step, a step makes no
 * allocation at all in the whole process. The arena stays where it was. */
static void test_no_allocation_per_step(void **state) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, TR_DTYPE_F32);
    const int64_t B = 4, T = 16, D = 64, V = 50;
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, SH(B, T));
    c.int_hi[0] = V;
    int pos_ids[16];
    for (int t = 0; t < T; t++) pos_ids[t] = t;
    int pos = tr_const(g, "pos", TR_DTYPE_I32, 1, SH(T), pos_ids);
    int wte = tr_param(g, "wte", c.dt, 2, SH(V, D), 0, 1), wpe = tr_param(g, "wpe", c.dt, 2, SH(T, D), 0, 1);
    int x = ln(&c, tr_add(g, tr_embedding(g, wte, ids), tr_embedding(g, wpe, pos)), D, "emb");
    int f = tr_gelu(g, linear(&c, x, D, 4 * D, "up", 1), 0);
    int y = ln(&c, tr_add(g, linear(&c, f, 4 * D, D, "down", 1), x), D, "out");
    tr_graph_set_output(g, y, "y");
    gcase_ready(&c, 61);

    struct tf_context ctx = test_ctx(1);
    struct tf_program *p = compile_here(&ctx, g);
    assert_int_equal(p->n_steps, 4); /* embed+ln, gemm+bias+gelu, gemm, bias+residual+ln */
    struct tr_tensor out[1];
    alloc_outputs(g, out);
    struct tr_error e = {0};
    void *arena = p->arena;
    if (tf_execute(p, 1, c.in, 1, out, &e)) fail_msg("%s", e.msg); /* warm-up: oneDNN makes its primitives */
#if COUNT_ALLOCS
    tr_test_allocs_start();
#endif
    for (int s = 0; s < 3; s++)
        if (tf_execute(p, 1, c.in, 1, out, &e)) fail_msg("%s", e.msg);
#if COUNT_ALLOCS
    long ours, theirs;
    allocs_by_owner(&ours, &theirs);
    print_message("3 steps: %ld allocations by trident, %ld inside oneDNN/libgomp\n", ours, theirs);
    if (ours != 0) fail_msg("3 steps made %ld allocations in trident's code", ours);
    /* The count can fail: compiling binds every call, and binding allocates the kernels'
     * plans and scratch in trident's code, which the same counter must see. */
    struct tf_context ctx0 = test_ctx(0);
    tr_test_allocs_start();
    struct tf_program *p0 = compile_here(&ctx0, g);
    if (tf_execute(p0, 1, c.in, 1, out, &e)) fail_msg("%s", e.msg);
    allocs_by_owner(&ours, &theirs);
    print_message("unfused, compile + first step: %ld allocations by trident's code\n", ours);
    assert_true(ours > 0);
    tf_program_free(p0);
#endif
    assert_ptr_equal(p->arena, arena);
    assert_int_equal(p->kernel_calls, 4);
    free_outputs(g, out);
    tf_program_free(p);
    gcase_free(&c);
}

/* ---- options, errors ---- */

static void test_options(void **state) {
    struct tr_plugin *p = open_plugin("tf");
    const struct tr_backend_i *it = tr_plugin_iface(p);
    assert_string_equal(it->name, "tf");
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU};
    struct tr_backend *be = NULL;
    struct tr_error e = {0};
    struct tr_option bad[] = {{.key = "fuse", .value = "true", .file = "conf/x.ini", .line = 6},
                              {.key = "fusion", .value = "false", .file = "conf/x.ini", .line = 7}};
    prm.options = bad;
    prm.n_options = 2;
    assert_int_not_equal(tr_backend_init(p, &prm, &be, &e), TR_OK);
    if (!strstr(e.msg, "conf/x.ini:7") || !strstr(e.msg, "'fusion'") || !strstr(e.msg, "fuse"))
        fail_msg("message: %s", e.msg);
    struct tr_option val = {.key = "fuse", .value = "maybe", .file = "conf/x.ini", .line = 3};
    prm.options = &val;
    prm.n_options = 1;
    assert_int_not_equal(tr_backend_init(p, &prm, &be, &e), TR_OK);
    if (!strstr(e.msg, "conf/x.ini:3") || !strstr(e.msg, "maybe")) fail_msg("message: %s", e.msg);
    struct tr_option thr = {.key = "threads", .value = "-2", .file = "conf/x.ini", .line = 4};
    prm.options = &thr;
    assert_int_not_equal(tr_backend_init(p, &prm, &be, &e), TR_OK);
    if (!strstr(e.msg, "conf/x.ini:4") || !strstr(e.msg, "threads")) fail_msg("message: %s", e.msg);
    struct tr_option ok[] = {{.key = "fuse", .value = "false"}, {.key = "threads", .value = "1"},
                             {.key = "simplify", .value = "no"}};
    prm.options = ok;
    prm.n_options = 3;
    assert_int_equal(tr_backend_init(p, &prm, &be, &e), TR_OK);
    tr_backend_free(be);
    tr_plugin_close(p);
}

/* fuse = false and simplify = false: the graph's own ops, a dead one and a repeated one
 * included, one call each; simplify merges the repeat and drops the dead one. */
static void test_unfused_counts(void **state) {
    struct gcase c;
    struct tr_graph *g = gcase_init(&c, TR_DTYPE_F32);
    int x = tr_input(g, "x", c.dt, 2, SH(4, 8));
    int y = tr_gelu(g, linear(&c, x, 8, 8, "fc", 1), 0);
    tr_unary(g, TR_OP_EXP, y); /* read by nobody */
    tr_graph_set_output(g, tr_reshape(g, y, 1, SH(32)), "y");
    tr_graph_set_output(g, tr_scale(g, y, 2.0f, 0.5f), "s1");
    tr_graph_set_output(g, tr_scale(g, y, 2.0f, 0.5f), "s2");
    gcase_ready(&c, 71);
    const struct tr_option o[] = {{.key = "fuse", .value = "false"}, {.key = "simplify", .value = "false"}};
    const int want[3] = {6, 4, 2}; /* matmul add gelu exp scale scale; -exp -scale; gemm+bias+gelu scale */
    const char *notes[3] = {"fused: none; 10 nodes -> 10 (cse 0, dce 0)", "fused: none; 10 nodes -> 8 (cse 1, dce 1)",
                            "gemm+bias+gelu x1"};
    for (int k = 0; k < 3; k++) {
        struct tr_tensor out[3];
        struct tr_backend_stats st;
        run_on("tf", k < 2 ? o : NULL, 2 - k, g, c.in, out, &st);
        assert_int_equal(st.kernel_calls, want[k]);
        if (!strstr(st.notes, notes[k])) fail_msg("notes: %s", st.notes);
        assert_memory_equal(out[1].data, out[2].data, tr_tensor_nbytes(&out[1]));
        double *r = tr_test_to_f64(&out[1]);
        assert_true(tr_test_rel_err(&out[2], r) == 0.0); /* and no NaN left from the poison */
        free(r);
        free_outputs(g, out);
    }
    gcase_free(&c);
}

/* An op on a dtype the backend has no kernel for is refused at compile, by name. */
static void test_unsupported_op(void **state) {
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F64, 1, SH(4));
    int y = tr_gelu(g, x, 0);
    tr_graph_set_name(g, y, "act");
    tr_graph_set_output(g, y, "y");
    if (tr_graph_status(g, &e)) fail_msg("graph: %s", e.msg);
    struct tr_plugin *p = open_plugin("tf");
    struct tr_backend *be = init_backend(p, NULL, 0);
    struct tr_program *prog = NULL;
    assert_int_equal(tr_backend_compile(be, g, &prog, &e), TR_ERR_UNSUPPORTED);
    if (!strstr(e.msg, "gelu") || !strstr(e.msg, "f64") || !strstr(e.msg, "'act'")) fail_msg("message: %s", e.msg);
    assert_null(prog);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_GELU, TR_DTYPE_F64), 0);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_GELU, TR_DTYPE_BF16), 1);
    tr_backend_free(be);
    tr_plugin_close(p);
    tr_graph_free(g);
}

TR_TEST_MAIN(NULL, NULL, test_gemm_epilogues_f32, test_gemm_epilogues_bf16, test_gemm_not_fused,
             test_layer_norm_patterns_f32, test_layer_norm_patterns_bf16, test_softmax_patterns_f32,
             test_softmax_patterns_bf16, test_attention_pattern, test_attention_not_fused,
             test_embedding_pattern_f32, test_embedding_pattern_bf16, test_bert_tiny_f32, test_bert_tiny_bf16,
             test_no_allocation_per_step, test_options, test_unfused_counts, test_unsupported_op)
