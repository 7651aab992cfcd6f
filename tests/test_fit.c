/* The fit task (issue 5): graph updates, the training step built by core, and training
 * on every backend configuration.
 *
 * - tr_graph_add_update refuses what it must (not a PARAM, another shape, twice).
 * - BERT tiny fit, side by side on torch, torch:reduce-overhead, tf and jax through the
 *   harness: the first 5 losses agree (f32 1e-4), the loss falls by half in 100 steps
 *   on every one (labels are a function of the tokens, so the task can be learned), and
 *   the optimizer's updates are computed in the params' memory (donation).
 * - bf16 with f32 master weights: learns, and torch and tf agree within 1e-2.
 * - LoRA: after 10 steps the frozen weights are bitwise what they were and every
 *   adapter moved; the graph holds no gradient and no optimizer state for a frozen
 *   weight; and the torch pool's peak is below what gradients of the frozen weights
 *   alone would need. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "modelutil.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/graph.h"
#include "trident/train.h"
#include "trident/safetensors.h"
#include "trident/weights.h"

static void test_update_api(void **state) {
    (void)state;
    struct tr_graph *g;
    struct tr_error e = {0};
    const int64_t s2[] = {2, 3}, s3[] = {3, 2};
    /* not a PARAM */
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, s2);
    int p = tr_param(g, "p", TR_DTYPE_F32, 2, s2, 0, 0.1f);
    int v = tr_add(g, x, p);
    assert_int_equal(tr_graph_add_update(g, x, v), TR_ERR_INVALID);
    assert_int_equal(tr_graph_status(g, &e), TR_ERR_INVALID);
    assert_non_null(strstr(e.msg, "is not a PARAM node"));
    tr_graph_free(g);
    /* another shape */
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    p = tr_param(g, "p", TR_DTYPE_F32, 2, s2, 0, 0.1f);
    int q = tr_param(g, "q", TR_DTYPE_F32, 2, s3, 0, 0.1f);
    v = tr_scale(g, q, 2.0f, 0.0f);
    assert_int_equal(tr_graph_add_update(g, p, v), TR_ERR_SHAPE);
    tr_graph_status(g, &e);
    assert_non_null(strstr(e.msg, "expected the param's f32[2,3]"));
    tr_graph_free(g);
    /* twice, and the accessors */
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    p = tr_param(g, "p", TR_DTYPE_F32, 2, s2, 0, 0.1f);
    v = tr_scale(g, p, 0.5f, 0.0f);
    int w = tr_scale(g, p, 0.25f, 0.0f);
    assert_int_equal(tr_graph_add_update(g, p, v), TR_OK);
    assert_int_equal(tr_graph_n_updates(g), 1);
    assert_int_equal(tr_graph_update_param(g, 0), p);
    assert_int_equal(tr_graph_update_value(g, 0), v);
    assert_int_equal(tr_graph_update_param(g, 1), -1);
    assert_int_equal(tr_graph_add_update(g, p, w), TR_ERR_INVALID);
    tr_graph_status(g, &e);
    assert_non_null(strstr(e.msg, "updated twice"));
    tr_graph_free(g);
}

/* An update whose param is read after the value is computed cannot be donated: its value
 * is copied in after the step. Both paths, on every backend, three steps:
 * P_t = 2^t·P_0, and y = P_{t-1} + x read after the update's value. */
static void update_paths(int read_after) {
    enum { R = 2, C = 3 };
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        struct tr_graph *g;
        struct tr_error e = {0};
        const int64_t sh[] = {R, C};
        assert_int_equal(tr_graph_init(&g, &e), TR_OK);
        int x = tr_input(g, "x", TR_DTYPE_F32, 2, sh);
        int p = tr_param(g, "p", TR_DTYPE_F32, 2, sh, 0, 1);
        int v = tr_scale(g, p, 2.0f, 0.0f);
        int y = read_after ? tr_add(g, p, x) : tr_add(g, tr_scale(g, p, 1.0f, 0.0f), x);
        if (!read_after) { /* y is computed before v: move v after it by reading y */
            v = tr_add(g, tr_scale(g, p, 2.0f, 0.0f), tr_scale(g, y, 0.0f, 0.0f));
        }
        tr_graph_set_output(g, y, "y");
        assert_int_equal(tr_graph_add_update(g, p, v), TR_OK);
        if (tr_graph_status(g, &e)) fail_msg("%s", e.msg);
        float p0[R * C], pd[R * C];
        for (int i = 0; i < R * C; i++) pd[i] = p0[i] = (float)(0.5 + 0.25 * i);
        assert_int_equal(tr_graph_bind_param(g, p, pd, &e), TR_OK);
        struct tr_tensor in = tr_test_tensor(TR_DTYPE_F32, 2, sh), out[1];
        tr_test_randn(&in, 3, 1.0);
        struct tr_backend_stats st;
        tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, &in, 3, out, &st);
        const float *xd = in.data, *yd = out[0].data;
        for (int i = 0; i < R * C; i++) {
            if (pd[i] != 8.0f * p0[i]) fail_msg("%s: p[%d] = %g after 3 steps, expected %g", tr_test_backends[b].label,
                                                i, (double)pd[i], 8.0 * p0[i]);
            assert_float_equal(yd[i], 4.0f * p0[i] + xd[i], 1e-6);
        }
        char want[64];
        snprintf(want, sizeof want, "%d of 1 updates in place", read_after ? 0 : 1);
        if (!strstr(st.notes, want)) fail_msg("%s: notes '%s' lack '%s'", tr_test_backends[b].label, st.notes, want);
        tr_test_tensor_free(&out[0]);
        tr_test_tensor_free(&in);
        tr_graph_free(g);
    }
}

static void test_update_copied(void **state) { update_paths(1); }
static void test_update_donated(void **state) { update_paths(0); }

static void run_fit(const char *backends, const char *extra, struct tr_bench_report *rep) {
    char text[1024], jax[600] = ""; /* a [backend.jax] section only where jax is listed */
    if (strstr(backends, "jax")) snprintf(jax, sizeof jax, "[backend.jax]\ncache_dir = %s\n", tr_test_dir);
    snprintf(text, sizeof text,
             "[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = %s\n"
             "batch = 8\nseq_len = 16\n%s\n"
             "%s",
             backends, extra, jax);
    tr_test_bench_run(text, "fit.ini", tr_builtin_models, rep);
}

/* 100 steps (1 warm-up + 99 timed) on all four: learns, agrees, updates in place. */
static void test_fit_learns_everywhere(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    run_fit("torch, torch:reduce-overhead, tf, jax", "steps = 99\nwarmup = 1\n[train]\nlearning_rate = 1e-3", &rep);
    assert_int_equal(rep.n_rows, 4);
    for (int i = 0; i < rep.n_rows; i++) {
        const struct tr_bench_row *r = &rep.rows[i];
        printf("%-24s loss %.4f -> %.4f; %s\n", r->label, r->loss_first, r->loss_last, r->stats.notes);
        assert_true(r->ok && r->agrees);
        assert_int_equal(r->n_fit_losses, TR_BENCH_FIT_LOSSES);
        if (!(r->loss_last < 0.5 * r->loss_first))
            fail_msg("%s: loss %.4f -> %.4f in 100 steps, expected at least halved", r->label, r->loss_first,
                     r->loss_last);
        /* AdamW's param update reads the weight index for index after its last other
         * reader: every backend computes it in the param's memory */
        assert_non_null(strstr(r->stats.notes, "updates in place"));
    }
}

static void test_fit_bf16_masters(void **state) {
    (void)state;
    static struct tr_bench_report rep;
    run_fit("torch, tf", "dtype = bf16\nsteps = 29\nwarmup = 1\n[train]\nlearning_rate = 1e-3", &rep);
    assert_true(rep.tolerance == 2e-2);
    for (int i = 0; i < rep.n_rows; i++) {
        const struct tr_bench_row *r = &rep.rows[i];
        assert_true(r->ok && r->agrees);
        if (!(r->loss_last < 0.8 * r->loss_first))
            fail_msg("%s bf16: loss %.4f -> %.4f in 30 steps", r->label, r->loss_first, r->loss_last);
    }
}

static void test_fit_bad_train_key(void **state) {
    (void)state;
    struct tr_config cfg;
    struct tr_error e = {0};
    assert_int_equal(tr_config_load_string("[run]\ntask = fit\n[train]\nlerning_rate = 1\n", "t.ini", &cfg, &e),
                     TR_OK);
    struct tr_task_graph tg;
    assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
    assert_non_null(strstr(e.msg, "t.ini:4: [train] lerning_rate = 1: unknown key for training"));
    assert_int_equal(tr_config_load_string("[run]\ntask = fit\n[train]\noptimizer = adagrad\n", "t.ini", &cfg, &e),
                     TR_OK);
    assert_int_not_equal(tr_task_graph_build(&cfg, tr_builtin_models, &tg, &e), TR_OK);
    assert_non_null(strstr(e.msg, "t.ini:4: [train] optimizer = adagrad: expected adamw, adam or sgd"));
}

/* A checkpoint holding a NaN: the fit's first loss is NaN before any update, which is
 * said as such (not blamed on the learning rate as a divergence would be). */
static void test_fit_nan_weights(void **state) {
    (void)state;
    struct tr_error e = {0};
    char path[512], ini[768];
    tr_test_copy_poisoned(TR_SOURCE_DIR "/tests/fixtures/bert_tiny.safetensors", "classifier.weight", 0, NAN,
                          "nan.safetensors", path, sizeof path);
    snprintf(ini, sizeof ini, "[run]\nmodel = bert\npreset = tiny\ntask = fit\nbackends = tf\nbatch = 2\nseq_len = 8\n"
             "steps = 2\nwarmup = 1\nweights = %s\n", path);
    static struct tr_config cfg;
    static struct tr_bench_report rep;
    if (tr_config_load_string(ini, "nan.ini", &cfg, &e)) fail_msg("%s", e.msg);
    assert_int_not_equal(tr_bench_run(&cfg, tr_builtin_models, &rep, &e), TR_OK);
    if (!strstr(e.msg, "the loss is nan at step 1, before any update") &&
        !strstr(rep.rows[0].error, "the loss is nan at step 1, before any update"))
        fail_msg("not said as a non-finite start: %s / %s", e.msg, rep.rows[0].error);
}

/* optimizer = sgd is torch.optim.SGD's (and Keras') plain SGD: momentum 0 and no weight
 * decay, unless the INI says. */
static void test_fit_sgd_defaults(void **state) {
    (void)state;
    static struct tr_config cfg;
    struct tr_error e = {0};
    struct tr_train_config c;
    assert_int_equal(tr_config_load_string("[run]\ntask = fit\n[train]\noptimizer = sgd\n", "t.ini", &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &c, &e), TR_OK);
    assert_true(c.momentum == 0.0 && c.weight_decay == 0.0);
    assert_int_equal(tr_config_load_string("[run]\ntask = fit\n[train]\noptimizer = sgd\nmomentum = 0.5\n"
                                           "weight_decay = 0.1\n", "t.ini", &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &c, &e), TR_OK);
    assert_true(c.momentum == 0.5 && c.weight_decay == 0.1);
    assert_int_equal(tr_config_load_string("[run]\ntask = fit\n", "t.ini", &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &c, &e), TR_OK);
    assert_true(c.weight_decay == 0.01); /* AdamW's, as torch's */
}

/* optimizer = adam is Keras' Adam: eps 1e-7 and no weight decay, unless the INI says; its
 * weight_decay is torch.optim.Adam's L2 term, not AdamW's decoupled decay. */
static void test_fit_keras_adam(void **state) {
    (void)state;
    struct tr_config cfg;
    struct tr_train_config tc;
    struct tr_error e = {0};
    assert_int_equal(tr_config_load_string("[train]\noptimizer = adam\n", "t.ini", &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &tc, &e), TR_OK);
    assert_string_equal(tc.optimizer, "adamw");
    assert_true(tc.eps == 1e-7 && tc.weight_decay == 0.0 && tc.l2 == 0.0 && tc.learning_rate == 1e-3 &&
                tc.beta2 == 0.999);
    assert_int_equal(tr_config_load_string("[train]\neps = 1e-6\noptimizer = adam\nweight_decay = 0.1\n", "t.ini",
                                           &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &tc, &e), TR_OK);
    assert_true(tc.eps == 1e-6 && tc.weight_decay == 0.0 && tc.l2 == 0.1);
    assert_int_equal(tr_config_load_string("[train]\n", "t.ini", &cfg, &e), TR_OK);
    assert_int_equal(tr_train_config_resolve(&cfg, &tc, &e), TR_OK); /* adamw: torch's defaults */
    assert_true(tc.eps == 1e-8 && tc.weight_decay == 0.01 && tc.l2 == 0.0);
}

/* ---- LoRA ---- */

static int is_adapter(const char *name) { return strstr(name, ".lora_A.") || strstr(name, ".lora_B."); }

static void test_lora_frozen(void **state) {
    (void)state;
    struct tr_error e = {0};
    const char *text = "[run]\ntask = fit\nbatch = 4\nseq_len = 16\n[model]\nlora_rank = 4\n"
                       "[train]\nlearning_rate = 1e-2\n";
    struct tr_task_graph tg;
    tr_test_task_graph(text, "lora.ini", tr_builtin_models, &tg);
    struct tr_graph *g = tg.graph;
    struct tr_weights *w = NULL;
    if (tr_weights_from_seed(g, 7, &w, &e)) fail_msg("%s", e.msg);
    /* lora_B starts at zeros: give it values so that the adapters' A gets a gradient */
    int n_params = tr_graph_n_params(g), n_frozen = 0, n_adapters = 0;
    uint64_t frozen_bytes = 0;
    void **before = calloc((size_t)n_params, sizeof *before);
    for (int i = 0; i < n_params; i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor t = tr_node_tensor(g, id);
        size_t nb = tr_tensor_nbytes(&t);
        if (strstr(name, ".lora_B.")) {
            t.data = (void *)tr_node_data(g, id);
            tr_test_randn(&t, 100 + (uint64_t)i, 0.02);
        }
        before[i] = malloc(nb);
        memcpy(before[i], tr_node_data(g, id), nb);
        int trained = is_adapter(name) || !strncmp(name, "classifier.", 11);
        int state_param = strstr(name, ".adamw_") != NULL;
        if (!trained && !state_param) {
            n_frozen++;
            frozen_bytes += nb;
            tr_test_expect_untrained(g, name);
        }
        n_adapters += is_adapter(name) && !state_param;
    }
    assert_true(n_frozen > 10 && n_adapters == 2 * 2 * 2); /* 2 layers x (query, value) x (A, B) */
    assert_int_equal(tg.train.n_trained, n_adapters + 2);
    assert_int_equal(tr_graph_n_updates(g), 3 * tg.train.n_trained);

    int n_in = tr_graph_n_inputs(g);
    struct tr_tensor in[8];
    assert_true(n_in <= 8);
    tr_test_fit_inputs(&tg, 5, 1e-2f, 1.0f, in); /* step: 1 every time is a valid AdamW step */
    struct tr_tensor out[1];
    struct tr_backend_stats st;
    tr_test_run_backend(&tr_test_backends[0], tr_test_dir, g, in, 10, out, &st);
    printf("lora fit on torch: %s; peak %llu bytes, frozen weights %llu bytes\n", st.notes,
           (unsigned long long)st.peak_bytes, (unsigned long long)frozen_bytes);

    int moved = 0;
    for (int i = 0; i < n_params; i++) {
        int id = tr_graph_param(g, i);
        const char *name = tr_node_name(g, id);
        struct tr_tensor t = tr_node_tensor(g, id);
        int same = memcmp(before[i], tr_node_data(g, id), tr_tensor_nbytes(&t)) == 0;
        free(before[i]);
        if (is_adapter(name) && !strstr(name, ".adamw_")) moved += !same;
        else if (!strncmp(name, "classifier.", 11) || strstr(name, ".adamw_")) continue;
        else if (!same) fail_msg("frozen weight '%s' changed", name);
    }
    free(before);
    assert_int_equal(moved, n_adapters);
    /* the pool holds activations and the adapters' gradients; gradients of the frozen
     * weights alone would take frozen_bytes */
    uint64_t weights = tr_graph_param_bytes(g);
    assert_true(st.peak_bytes - weights < frozen_bytes);
    tr_test_tensor_free(&out[0]);
    tr_test_tensors_free(n_in, in);
    tr_weights_free(w);
    tr_task_graph_free(&tg);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_update_api, test_update_copied, test_update_donated,
             test_fit_bad_train_key, test_fit_keras_adam, test_lora_frozen, test_fit_bf16_masters,
             test_fit_learns_everywhere, test_fit_nan_weights, test_fit_sgd_defaults)
