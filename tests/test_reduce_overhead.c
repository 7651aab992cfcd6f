/* torch `mode = reduce-overhead`: warm-up steps run eagerly, one step is recorded as a
 * list of bound kernel calls over static buffers, later steps replay it. Checked here:
 * every step's outputs are the very bits eager gives (a small graph and BERT tiny with
 * the Hugging Face fixture, f32 and bf16), also when the caller changes the input data,
 * the input buffers or the weights' data between steps; the recording happens after
 * warmup_steps; a replayed step takes nothing from the allocator (hits and misses 0,
 * where eager steps have some) and still counts its kernel calls; bad option values
 * are refused by name; a failing replay names its node and leaves the program usable. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "bert/bert.h"
#include "models.h"
#include "trident/trident.h"

#define HINT " (regenerate with: python3 tests/fixtures/make_bert_fixture.py)"
#define MAXIO 4

/* ---- a program of the torch plugin, eager or reduce-overhead ---- */

struct runner {
    struct tr_plugin *p;
    struct tr_backend *be;
    struct tr_program *prog;
};

/* mode NULL: the default (eager); warmup NULL: the default. */
static void runner_open(struct runner *r, const struct tr_graph *g, const char *mode, const char *warmup) {
    struct tr_error err = {0};
    struct tr_option opts[2];
    int n = 0;
    if (mode) opts[n++] = (struct tr_option){.key = "mode", .value = mode, .file = "test.ini", .line = 2};
    if (warmup) opts[n++] = (struct tr_option){.key = "warmup_steps", .value = warmup, .file = "test.ini", .line = 3};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n};
    memset(r, 0, sizeof *r);
    r->p = tr_test_plugin_open("torch");
    if (tr_backend_init(r->p, &prm, &r->be, &err) != TR_OK) fail_msg("init torch: %s", err.msg);
    if (tr_backend_compile(r->be, g, &r->prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
}

static void runner_close(struct runner *r) {
    tr_program_free(r->prog);
    tr_backend_free(r->be);
    tr_plugin_close(r->p);
}

static void runner_step(struct runner *r, int n_in, const struct tr_tensor *in, int n_out, struct tr_tensor *out,
                        struct tr_backend_stats *st) {
    struct tr_error err = {0};
    for (int i = 0; i < n_out; i++) tr_test_poison(&out[i]);
    if (tr_backend_execute(r->be, r->prog, n_in, in, n_out, out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    if (tr_backend_get_stats(r->be, r->prog, st, &err) != TR_OK) fail_msg("stats: %s", err.msg);
}

static void alloc_like(const struct tr_graph *g, int n, int (*node)(const struct tr_graph *, int), struct tr_tensor *t) {
    for (int i = 0; i < n; i++) {
        struct tr_tensor d = tr_node_tensor(g, node(g, i));
        t[i] = tr_test_tensor((enum tr_dtype)d.dtype, d.ndim, d.shape);
    }
}

static void expect_identical(const char *what, int step, int n, const struct tr_tensor *eager,
                             const struct tr_tensor *ro) {
    for (int i = 0; i < n; i++) {
        if (memcmp(eager[i].data, ro[i].data, tr_tensor_nbytes(&eager[i])) != 0)
            fail_msg("%s step %d: output %d of reduce-overhead differs from eager", what, step, i);
        for (int64_t j = 0; j < tr_tensor_numel(&ro[i]); j++)
            if (!isfinite(tr_tensor_get_f64(&ro[i], j)))
                fail_msg("%s step %d: output %d element %lld was not written", what, step, i, (long long)j);
    }
}

/* ---- the small graph: every kind of node the backend treats apart ---- */

enum { B = 2, T = 6, V = 13, D = 8, F = 16, NH = F / D };

struct small {
    struct tr_graph *g;
    int n_kernel_nodes;
    struct tr_tensor w[6]; /* table, w, bias, gamma, beta, wo: bound to the graph */
    enum tr_dtype dt;
};

static void small_build(struct small *m, enum tr_dtype dt) {
    memset(m, 0, sizeof *m);
    m->dt = dt;
    struct tr_error err = {0};
    assert_int_equal(tr_graph_init(&m->g, &err), TR_OK);
    struct tr_graph *g = m->g;
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, (int64_t[]){B, T});
    int x = tr_input(g, "x", dt, 3, (int64_t[]){B, T, D});
    int table = tr_param(g, "emb", dt, 2, (int64_t[]){V, D}, 0, 1);
    int w = tr_param(g, "w", dt, 2, (int64_t[]){F, D}, 0, 0.5f);
    int bias = tr_param(g, "b", dt, 1, (int64_t[]){F}, 0, 0.5f);
    int gamma = tr_param(g, "ln.weight", dt, 1, (int64_t[]){D}, 1, 0.1f);
    int beta = tr_param(g, "ln.bias", dt, 1, (int64_t[]){D}, 0, 0.1f);
    int wo = tr_param(g, "wo", dt, 2, (int64_t[]){D, D}, 0, 0.5f);
    int e = tr_embedding(g, table, ids);                          /* (B,T,D) */
    int h = tr_add(g, e, x);
    int mm = tr_matmul(g, h, w, 0, 1);                            /* (B,T,F) */
    int a = tr_add(g, mm, bias);
    int ge = tr_gelu(g, a, 0);
    tr_unary(g, TR_OP_TANH, ge);                                  /* dead: run, never read */
    int r = tr_reshape(g, ge, 4, (int64_t[]){B, T, NH, D});       /* a view */
    int tp = tr_transpose(g, r, 4, (int[]){0, 2, 1, 3});          /* (B,NH,T,D) */
    int ln = tr_layer_norm(g, tp, gamma, beta, 1e-5f);
    int att = tr_attention(g, ln, ln, tp, -1, 0.0f, 1, 0);        /* causal self-attention */
    int sm = tr_softmax(g, att);
    int sl = tr_slice(g, sm, 2, 1, T, 2);                         /* (B,NH,T/2,D) */
    int cc = tr_concat(g, 2, (int[]){sl, sl}, 2);                 /* (B,NH,T,D) */
    int pr = tr_matmul(g, cc, wo, 0, 0);
    int mean = tr_reduce(g, TR_OP_MEAN, pr, 3, 0);                /* (B,NH,T) */
    int hv = tr_reshape(g, h, 2, (int64_t[]){B * T, D});          /* output view of a value read early */
    tr_graph_set_output(g, mean, "mean");
    tr_graph_set_output(g, ge, "gelu");
    tr_graph_set_output(g, hv, "h");
    tr_graph_set_output(g, x, "x"); /* an input straight out */
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int op = tr_node_op(g, id);
        /* mm runs inside the bias ADD's call (a linear: one addmm) */
        m->n_kernel_nodes += op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST && op != TR_OP_RESHAPE && id != mm;
    }
    const int pid[6] = {table, w, bias, gamma, beta, wo};
    const double sd[6] = {1.0, 0.5, 0.5, 1.0, 0.3, 0.5};
    for (int i = 0; i < 6; i++) {
        struct tr_tensor d = tr_node_tensor(g, pid[i]);
        m->w[i] = tr_test_tensor(dt, d.ndim, d.shape);
        tr_test_randn(&m->w[i], 1 + (uint64_t)i, sd[i]);
        assert_int_equal(tr_graph_bind_param(g, pid[i], m->w[i].data, &err), TR_OK);
    }
}

static void small_free(struct small *m) {
    tr_graph_free(m->g);
    for (int i = 0; i < 6; i++) tr_test_tensor_free(&m->w[i]);
}

static void small_inputs(struct tr_tensor in[2], uint64_t seed) {
    tr_test_randint(&in[0], seed, V);
    tr_test_randn(&in[1], seed + 1, 1.0);
}

static void check_small(enum tr_dtype dt) {
    struct small m;
    small_build(&m, dt);
    struct tr_graph *g = m.g;
    int n_in = tr_graph_n_inputs(g), n_out = tr_graph_n_outputs(g);
    struct tr_tensor in[2], in2[2], oe[MAXIO], oro[MAXIO];
    alloc_like(g, n_in, tr_graph_input, in);
    alloc_like(g, n_in, tr_graph_input, in2);
    alloc_like(g, n_out, tr_graph_output, oe);
    alloc_like(g, n_out, tr_graph_output, oro);
    struct runner eager, ro;
    runner_open(&eager, g, NULL, NULL);
    runner_open(&ro, g, "reduce-overhead", NULL);
    struct tr_backend_stats se, sr;
    const int steps = 6;
    for (int step = 1; step <= steps; step++) {
        /* new batch contents from step 3; the caller's buffers themselves change at 5;
         * a weight changes in place at 6 (bound weights are read, not copied) */
        const struct tr_tensor *feed = step == 5 ? in2 : in;
        if (step == 1 || step >= 3) small_inputs((struct tr_tensor *)feed, 10 * (uint64_t)step);
        if (step == 6) tr_test_randn(&m.w[1], 99, 0.5);
        runner_step(&eager, n_in, feed, n_out, oe, &se);
        runner_step(&ro, n_in, feed, n_out, oro, &sr);
        expect_identical(tr_dtype_name(dt), step, n_out, oe, oro);

        assert_string_equal(se.mode, "eager");
        assert_string_equal(sr.mode, "reduce-overhead");
        assert_int_equal(se.kernel_calls, m.n_kernel_nodes);
        assert_int_equal(sr.kernel_calls, m.n_kernel_nodes);
        assert_int_equal(se.alloc_hits + se.alloc_misses, m.n_kernel_nodes);
        if (step == 1) {
            assert_non_null(strstr(sr.notes, "warm-up: 1 eager step done, recording at step 2"));
            assert_true(sr.alloc_misses > 0);
        } else if (step == 2) { /* the recording: served by the pools, 2 static input buffers more */
            char want[64];
            snprintf(want, sizeof want, "recorded %d calls at step 2 (", m.n_kernel_nodes);
            if (!strstr(sr.notes, want)) fail_msg("notes '%s' lack '%s'", sr.notes, want);
            assert_int_equal(sr.alloc_hits + sr.alloc_misses, m.n_kernel_nodes + n_in);
            assert_true(sr.arena_bytes > 0);
        } else {
            char want[64];
            snprintf(want, sizeof want, "replays %d;", step - 2);
            if (!strstr(sr.notes, want)) fail_msg("notes '%s' lack '%s'", sr.notes, want);
            assert_int_equal(sr.alloc_hits, 0);
            assert_int_equal(sr.alloc_misses, 0);
            assert_true(se.alloc_hits > 0); /* eager does go to the allocator */
        }
        print_message("%s step %d: eager %llu/%llu hit/miss, reduce-overhead %llu/%llu; %s\n", tr_dtype_name(dt), step,
                      (unsigned long long)se.alloc_hits, (unsigned long long)se.alloc_misses,
                      (unsigned long long)sr.alloc_hits, (unsigned long long)sr.alloc_misses, sr.notes);
    }
    runner_close(&eager);
    runner_close(&ro);
    for (int i = 0; i < n_in; i++) tr_test_tensor_free(&in[i]), tr_test_tensor_free(&in2[i]);
    for (int i = 0; i < n_out; i++) tr_test_tensor_free(&oe[i]), tr_test_tensor_free(&oro[i]);
    small_free(&m);
}

static void test_small_f32(void **state) { check_small(TR_DTYPE_F32); }
static void test_small_bf16(void **state) { check_small(TR_DTYPE_BF16); }

/* The recording comes after warmup_steps eager steps: 3, then 0 (the first step). */
static void check_warmup(const char *warmup, int n_warm) {
    struct small m;
    small_build(&m, TR_DTYPE_F32);
    struct tr_graph *g = m.g;
    struct tr_tensor in[2], out[MAXIO];
    alloc_like(g, 2, tr_graph_input, in);
    alloc_like(g, 4, tr_graph_output, out);
    small_inputs(in, 3);
    struct runner ro;
    runner_open(&ro, g, "reduce-overhead", warmup);
    struct tr_backend_stats st;
    for (int step = 1; step <= n_warm + 2; step++) {
        runner_step(&ro, 2, in, 4, out, &st);
        char want[80];
        if (step <= n_warm) {
            snprintf(want, sizeof want, "warm-up: %d eager step%s done, recording at step %d", step, step == 1 ? "" : "s",
                     n_warm + 1);
            assert_true(st.alloc_hits + st.alloc_misses == (uint64_t)m.n_kernel_nodes);
        } else if (step == n_warm + 1) {
            snprintf(want, sizeof want, "recorded %d calls at step %d (", m.n_kernel_nodes, step);
        } else {
            snprintf(want, sizeof want, "recorded %d calls at step %d (", m.n_kernel_nodes, n_warm + 1);
            assert_non_null(strstr(st.notes, "replays 1;"));
            assert_int_equal(st.alloc_hits + st.alloc_misses, 0);
        }
        if (!strstr(st.notes, want)) fail_msg("warmup_steps = %s, step %d: notes '%s' lack '%s'", warmup, step, st.notes, want);
    }
    runner_close(&ro);
    tr_test_tensors_free(2, in);
    tr_test_tensors_free(4, out);
    small_free(&m);
}

static void test_warmup_steps(void **state) {
    (void)state;
    check_warmup("3", 3);
    check_warmup("0", 0);
}

/* A replay that fails (an id outside the table) names its node; the program replays
 * correctly afterwards. Wrong inputs are refused before anything runs. */
static void test_replay_errors(void **state) {
    (void)state;
    struct small m;
    small_build(&m, TR_DTYPE_F32);
    struct tr_graph *g = m.g;
    struct tr_tensor in[2], oe[MAXIO], oro[MAXIO];
    alloc_like(g, 2, tr_graph_input, in);
    alloc_like(g, 4, tr_graph_output, oe);
    alloc_like(g, 4, tr_graph_output, oro);
    small_inputs(in, 5);
    struct runner eager, ro;
    runner_open(&eager, g, "eager", "4");
    runner_open(&ro, g, "reduce-overhead", "1");
    struct tr_backend_stats st;
    struct tr_error err = {0};
    for (int i = 0; i < 2; i++) runner_step(&ro, 2, in, 4, oro, &st);
    assert_non_null(strstr(st.notes, "recorded"));

    ((int32_t *)in[0].data)[3] = V + 2;
    assert_int_equal(tr_backend_execute(ro.be, ro.prog, 2, in, 4, oro, &err), TR_ERR_INVALID);
    if (!strstr(err.msg, "replay of node") || !strstr(err.msg, "embedding"))
        fail_msg("failed replay not named: %s", err.msg);
    struct tr_tensor bad[2] = {in[0], oe[2]}; /* (B*T,D), not (B,T,D) */
    assert_int_equal(tr_backend_execute(ro.be, ro.prog, 2, bad, 4, oro, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "'x'")) fail_msg("wrong input not named: %s", err.msg);

    small_inputs(in, 6);
    runner_step(&eager, 2, in, 4, oe, &st);
    runner_step(&ro, 2, in, 4, oro, &st);
    expect_identical("after errors", 4, 4, oe, oro);
    assert_int_equal(st.alloc_hits + st.alloc_misses, 0);
    runner_close(&eager);
    runner_close(&ro);
    tr_test_tensors_free(2, in);
    for (int i = 0; i < 4; i++) tr_test_tensor_free(&oe[i]), tr_test_tensor_free(&oro[i]);
    small_free(&m);
}

static void expect_refused(const struct tr_option *o, const char *a, const char *b) {
    struct tr_plugin *p = tr_test_plugin_open("torch");
    struct tr_backend *be = NULL;
    struct tr_error err = {0};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = o, .n_options = 2};
    if (tr_backend_init(p, &prm, &be, &err) == TR_OK) fail_msg("accepted what it should refuse ('%s')", a);
    assert_null(be);
    if (!strstr(err.msg, a) || (b && !strstr(err.msg, b))) fail_msg("message '%s' lacks '%s' or '%s'", err.msg, a, b);
    tr_plugin_close(p);
}

static void test_options(void **state) {
    (void)state;
    const char *bad[] = {"-1", "x", "", "1.5", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tr_option o[2] = {{.key = "mode", .value = "reduce-overhead", .file = "r.ini", .line = 2},
                                 {.key = "warmup_steps", .value = bad[i], .file = "r.ini", .line = 5}};
        char want[80];
        snprintf(want, sizeof want, "r.ini:5: [backend.torch] warmup_steps = '%s'", bad[i]);
        expect_refused(o, want, "integer from 0");
    }
    struct tr_option typo[2] = {{.key = "mode", .value = "reduce-overhead"}, {.key = "warmup", .value = "2"}};
    expect_refused(typo, "unknown key 'warmup'", "warmup_steps");
    struct tr_option mode[2] = {{.key = "mode", .value = "reduce_overhead"}, {.key = "warmup_steps", .value = "2"}};
    expect_refused(mode, "mode = 'reduce_overhead'", "expected eager or reduce-overhead");
}

/* ---- BERT tiny with the transformers fixture ---- */

static const struct tr_bert_config *tiny(void) {
    for (int i = 0; i < tr_model_bert.n_presets; i++)
        if (strcmp(tr_model_bert.presets[i].name, "tiny") == 0) return tr_model_bert.presets[i].config;
    fail_msg("bert has no tiny preset");
    return NULL;
}

static void check_bert(enum tr_dtype dt) {
    struct tr_error e = {0};
    struct tr_test_bert b;
    tr_test_bert_open(&b, dt, HINT);
    struct tr_graph *g = b.g;
    struct tr_build_opts o = {.task = TR_TASK_PREDICT, .dtype = dt, .batch = b.in[0].shape[0],
                              .seq_len = b.in[0].shape[1]};

    struct tr_tensor syn[3], oe[3], oro[3];
    alloc_like(g, 3, tr_graph_input, syn);
    alloc_like(g, 3, tr_graph_output, oe);
    alloc_like(g, 3, tr_graph_output, oro);
    struct runner eager, ro;
    runner_open(&eager, g, NULL, NULL);
    runner_open(&ro, g, "reduce-overhead", "1");
    struct tr_backend_stats se, sr;
    double tol = tr_test_tol(dt);
    for (int step = 1; step <= 5; step++) {
        /* the fixture's batch for steps 1-3 (warm-up, record, replay), then synthetic ones */
        const struct tr_tensor *feed = b.in;
        if (step >= 4) {
            if (tr_model_bert.make_inputs(tiny(), &o, 40 + (uint64_t)step, 3, syn, &e)) fail_msg("%s", e.msg);
            feed = syn;
        }
        runner_step(&eager, 3, feed, 3, oe, &se);
        runner_step(&ro, 3, feed, 3, oro, &sr);
        expect_identical(tr_dtype_name(dt), step, 3, oe, oro);
        assert_int_equal(sr.kernel_calls, se.kernel_calls);
        if (step >= 3) {
            assert_int_equal(sr.alloc_hits + sr.alloc_misses, 0);
            assert_true(se.alloc_hits > 0);
        }
        if (step > 3) continue;
        for (int i = 0; i < 3; i++) {
            double err = tr_test_io_rel_err(b.io, tr_graph_output_name(g, i), &oro[i], HINT);
            if (!(err < tol))
                fail_msg("bert tiny %s step %d %s: relative error %.3g vs transformers >= %.0e", tr_dtype_name(dt), step,
                         tr_graph_output_name(g, i), err, tol);
        }
    }
    print_message("bert tiny %s: %llu kernel calls per step; %s\n", tr_dtype_name(dt),
                  (unsigned long long)sr.kernel_calls, sr.notes);
    runner_close(&eager);
    runner_close(&ro);
    tr_test_tensors_free(3, syn);
    tr_test_tensors_free(3, oe);
    tr_test_tensors_free(3, oro);
    tr_test_bert_close(&b);
}

static void test_bert_f32(void **state) { check_bert(TR_DTYPE_F32); }
static void test_bert_bf16(void **state) { check_bert(TR_DTYPE_BF16); }

/* ---- a change of input shape re-records ----
 * A compiled graph has one shape per node, so new input shapes are a new graph compiled
 * into a new program: one backend instance, two programs of different (B,T) sharing the
 * weights, steps interleaved. Each warms up, records its own step (the notes of each
 * say so), and replays it bit-identically to eager, neither disturbing the other. */
static struct tr_graph *shaped_graph(int64_t b, int64_t t, const struct tr_tensor *w) {
    struct tr_error err = {0};
    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &err), TR_OK);
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, (int64_t[]){b, t});
    int table = tr_param(g, "emb", TR_DTYPE_F32, 2, (int64_t[]){V, D}, 0, 1);
    int gamma = tr_param(g, "ln.weight", TR_DTYPE_F32, 1, (int64_t[]){D}, 1, 0.1f);
    int wo = tr_param(g, "wo", TR_DTYPE_F32, 2, (int64_t[]){D, F}, 0, 0.5f);
    int h = tr_layer_norm(g, tr_embedding(g, table, ids), gamma, gamma, 1e-5f); /* gamma as beta too */
    int y = tr_softmax(g, tr_gelu(g, tr_matmul(g, h, wo, 0, 0), 0));
    tr_graph_set_output(g, y, "y");
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    const int pid[3] = {table, gamma, wo};
    for (int i = 0; i < 3; i++) assert_int_equal(tr_graph_bind_param(g, pid[i], w[i].data, &err), TR_OK);
    return g;
}

static void test_new_shape_records_again(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor w[3] = {tr_test_tensor(TR_DTYPE_F32, 2, (int64_t[]){V, D}),
                             tr_test_tensor(TR_DTYPE_F32, 1, (int64_t[]){D}),
                             tr_test_tensor(TR_DTYPE_F32, 2, (int64_t[]){D, F})};
    for (int i = 0; i < 3; i++) tr_test_randn(&w[i], 40 + (uint64_t)i, 0.7);
    const int64_t shapes[2][2] = {{2, 6}, {3, 11}};
    struct tr_graph *g[2];
    struct tr_tensor in[2], oe[2], oro[2];
    for (int j = 0; j < 2; j++) {
        g[j] = shaped_graph(shapes[j][0], shapes[j][1], w);
        alloc_like(g[j], 1, tr_graph_input, &in[j]);
        alloc_like(g[j], 1, tr_graph_output, &oe[j]);
        alloc_like(g[j], 1, tr_graph_output, &oro[j]);
    }
    /* one backend instance of each mode, each with both programs */
    struct runner eager, ro;
    runner_open(&eager, g[0], NULL, NULL);
    runner_open(&ro, g[0], "reduce-overhead", "1");
    struct tr_program *pe[2] = {eager.prog, NULL}, *pr[2] = {ro.prog, NULL};
    if (tr_backend_compile(eager.be, g[1], &pe[1], &err) || tr_backend_compile(ro.be, g[1], &pr[1], &err))
        fail_msg("compile of the second shape: %s", err.msg);
    int calls[2] = {0, 0};
    for (int j = 0; j < 2; j++)
        for (int id = 0; id < tr_graph_n_nodes(g[j]); id++) {
            int op = tr_node_op(g[j], id);
            calls[j] += op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST && op != TR_OP_RESHAPE;
        }
    for (int step = 1; step <= 4; step++) {
        for (int j = 0; j < 2; j++) {
            struct tr_backend_stats se, sr;
            tr_test_randint(&in[j], 100 * (uint64_t)step + (uint64_t)j, V);
            eager.prog = pe[j];
            ro.prog = pr[j];
            runner_step(&eager, 1, &in[j], 1, &oe[j], &se);
            runner_step(&ro, 1, &in[j], 1, &oro[j], &sr);
            char what[64];
            snprintf(what, sizeof what, "shape (%lld,%lld)", (long long)shapes[j][0], (long long)shapes[j][1]);
            expect_identical(what, step, 1, &oe[j], &oro[j]);
            char want[96];
            if (step == 1) snprintf(want, sizeof want, "warm-up: 1 eager step done, recording at step 2");
            else snprintf(want, sizeof want, "recorded %d calls at step 2 (", calls[j]);
            if (!strstr(sr.notes, want)) fail_msg("%s step %d: notes '%s' lack '%s'", what, step, sr.notes, want);
            if (step > 2) {
                snprintf(want, sizeof want, "replays %d;", step - 2);
                if (!strstr(sr.notes, want)) fail_msg("%s step %d: notes '%s' lack '%s'", what, step, sr.notes, want);
                assert_int_equal(sr.alloc_hits + sr.alloc_misses, 0);
            }
            print_message("%s step %d: %s\n", what, step, sr.notes);
        }
    }
    tr_program_free(pe[1]);
    tr_program_free(pr[1]);
    eager.prog = pe[0];
    ro.prog = pr[0];
    runner_close(&eager);
    runner_close(&ro);
    for (int j = 0; j < 2; j++) {
        tr_test_tensor_free(&in[j]);
        tr_test_tensor_free(&oe[j]);
        tr_test_tensor_free(&oro[j]);
        tr_graph_free(g[j]);
    }
    tr_test_tensors_free(3, w);
}

TR_TEST_MAIN(NULL, NULL, test_small_f32, test_small_bf16, test_warmup_steps, test_replay_errors, test_options,
             test_new_shape_records_again, test_bert_f32, test_bert_bf16)
