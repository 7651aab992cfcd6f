/* AdamW as one call per parameter (plugins/common/adamw_group.h): every backend runs each
 * parameter's SCALEs, MUL, ADDs, [CAST] and ADAMW_STEP as one tr_k_adamw_update (torch as
 * PyTorch's AdamW(fused=True), tf and jax as XLA's multi-output fusion). On a small
 * training graph (two GEMMs with biases and a GELU, MSE, tr_grad, tr_adamw), three steps
 * on each configuration must leave every weight and moment in f32 with the same bits as
 * tf with `fuse = false` (the graph's own ops, one kernel each; jax, whose other kernels
 * are its own generated code, within the f32 tolerance), and the notes must say how many
 * updates ran fused. Cases where the grouping must not be taken give the same bits: a
 * moment that another node reads, and a weight read after the optimizer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "trident/autodiff.h"
#include "trident/graph.h"
#include "trident/optim.h"
#include "trident/weights.h"

#define STEPS 3 /* reduce-overhead records at step 2 and replays step 3 */
#define NP 4    /* parameters: W1, b1, W2, b2 */
#define N 16
#define DIN 40
#define DH 300 /* W1 12000 elements: past the kernels' threshold for threads */
#define DOUT 24

enum twist { PLAIN, MOMENT_READ, WEIGHT_READ_AFTER };

struct case_ {
    struct tr_graph *g;
    struct tr_weights *w;
    int params[NP];
    int n_state;                    /* params and moments, by id */
    int state[3 * NP];
    void *init[3 * NP];             /* their values before the first step */
    struct tr_tensor in[4];         /* x, y, lr, step */
};

static struct case_ *build(enum tr_dtype dt, enum twist tw) {
    struct case_ *c = calloc(1, sizeof *c);
    assert_non_null(c);
    struct tr_error err = {0};
    struct tr_graph *g = c->g = tr_test_graph_new();
    int64_t sx[2] = {N, DIN}, sy[2] = {N, DOUT}, s1[2] = {DIN, DH}, s2[2] = {DH, DOUT}, sb1[1] = {DH}, sb2[1] = {DOUT};
    int x = tr_input(g, "x", dt, 2, sx), y = tr_input(g, "y", TR_DTYPE_F32, 2, sy);
    int lr = tr_input(g, "lr", TR_DTYPE_F32, 0, NULL), step = tr_input(g, "step", TR_DTYPE_F32, 0, NULL);
    int *p = c->params;
    p[0] = tr_param(g, "W1", dt, 2, s1, 0.0f, 0.2f), p[1] = tr_param(g, "b1", dt, 1, sb1, 0.0f, 0.2f);
    p[2] = tr_param(g, "W2", dt, 2, s2, 0.0f, 0.2f), p[3] = tr_param(g, "b2", dt, 1, sb2, 0.0f, 0.2f);
    int h = tr_gelu(g, tr_add(g, tr_matmul(g, x, p[0], 0, 0), p[1]), 0);
    int out = tr_add(g, tr_matmul(g, h, p[2], 0, 0), p[3]);
    int loss = tr_mse(g, dt == TR_DTYPE_F32 ? out : tr_cast(g, out, TR_DTYPE_F32), y);
    tr_graph_set_output(g, loss, "loss");
    int grads[NP];
    if (tr_graph_status(g, &err) || tr_grad(g, loss, NP, p, grads, &err)) fail_msg("graph: %s", err.msg);
    struct tr_adamw hp = {0.9f, 0.999f, 1e-8f, 0.01f};
    struct tr_optim_update up[NP];
    if (tr_adamw(g, &hp, NP, p, grads, lr, step, up, &err)) fail_msg("tr_adamw: %s", err.msg);
    for (int i = 0; i < NP; i++) {
        tr_graph_add_update(g, up[i].param, up[i].new_param);
        for (int s = 0; s < 2; s++) tr_graph_add_update(g, up[i].state[s], up[i].new_state[s]);
    }
    if (tw == MOMENT_READ) /* W2's new m read by another output: its group stays as ops */
        tr_graph_set_output(
            g, tr_reduce(g, TR_OP_SUM, tr_reshape(g, up[2].new_state[0], 1, (int64_t[1]){DH * DOUT}), 0, 0), "m");
    if (tw == WEIGHT_READ_AFTER) /* b1 read after the optimizer (its old value) */
        tr_graph_set_output(g, tr_reduce(g, TR_OP_SUM, tr_cast(g, p[1], TR_DTYPE_F32), 0, 0), "b1 sum");
    if (tr_graph_status(g, &err)) fail_msg("graph: %s", err.msg);
    if (tr_weights_from_seed(g, 5, &c->w, &err)) fail_msg("weights: %s", err.msg);
    for (int i = 0; i < NP; i++) {
        c->state[c->n_state++] = p[i];
        for (int s = 0; s < 2; s++) c->state[c->n_state++] = up[i].state[s];
    }
    for (int i = 0; i < c->n_state; i++) {
        struct tr_tensor t = tr_node_tensor(g, c->state[i]);
        size_t nb = tr_tensor_nbytes(&t);
        c->init[i] = malloc(nb);
        assert_non_null(c->init[i]);
        memcpy(c->init[i], tr_node_data(g, c->state[i]), nb);
    }
    const int ins[4] = {x, y, lr, step};
    for (int i = 0; i < 4; i++) {
        struct tr_tensor t = tr_node_tensor(g, ins[i]);
        c->in[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
    }
    tr_test_randn(&c->in[0], 11, 1.0), tr_test_randn(&c->in[1], 12, 1.0);
    *(float *)c->in[2].data = 0.02f;
    *(float *)c->in[3].data = 1.0f;
    return c;
}

static void case_free(struct case_ *c) {
    for (int i = 0; i < c->n_state; i++) free(c->init[i]);
    tr_test_tensors_free(4, c->in);
    tr_weights_free(c->w);
    tr_graph_free(c->g);
    free(c);
}

/* Weights and moments back to their values before the first step. */
static void reset(struct case_ *c) {
    for (int i = 0; i < c->n_state; i++) {
        struct tr_tensor t = tr_node_tensor(c->g, c->state[i]);
        memcpy((void *)tr_node_data(c->g, c->state[i]), c->init[i], tr_tensor_nbytes(&t));
    }
}

/* STEPS steps on b from the initial state (the step input counts up through one graph
 * input, so each run feeds step 1 only: the bias corrections of t = 1 every time, which
 * is what the reference does too); afterwards, copies of every weight and moment, and
 * the last step's outputs in out (free each with tr_test_tensor_free). */
static void **train(struct case_ *c, const struct tr_test_backend *b, struct tr_backend_stats *st,
                    struct tr_tensor out[2]) {
    reset(c);
    tr_test_run_backend(b, tr_test_dir, c->g, c->in, STEPS, out, st);
    void **after = calloc((size_t)c->n_state, sizeof *after);
    assert_non_null(after);
    for (int i = 0; i < c->n_state; i++) {
        struct tr_tensor t = tr_node_tensor(c->g, c->state[i]);
        size_t nb = tr_tensor_nbytes(&t);
        after[i] = malloc(nb);
        assert_non_null(after[i]);
        memcpy(after[i], tr_node_data(c->g, c->state[i]), nb);
        if (memcmp(after[i], c->init[i], nb) == 0 && i % 3 == 0)
            fail_msg("%s: '%s' did not move", b->label, tr_node_name(c->g, c->state[i]));
    }
    return after;
}

static void free_after(struct case_ *c, void **a) {
    for (int i = 0; i < c->n_state; i++) free(a[i]);
    free(a);
}

static void run_case(enum tr_dtype dt, enum twist tw, int fused_torch, int fused_tf) {
    struct case_ *c = build(dt, tw);
    const struct tr_test_backend plain = {"tf fuse=false", "tf", NULL, "fuse", "false"};
    struct tr_tensor ref_out[2], got_out[2];
    const int n_out = tr_graph_n_outputs(c->g);
    void **ref = train(c, &plain, NULL, ref_out);
    for (int k = 0; k < TR_TEST_N_BACKENDS; k++) {
        const struct tr_test_backend *b = &tr_test_backends[k];
        struct tr_backend_stats st;
        void **got = train(c, b, &st, got_out);
        print_message("%s %s twist %d: %s\n", b->label, tr_dtype_name(dt), (int)tw, st.notes);
        char want[64] = "";
        if (strcmp(b->plugin, "torch") == 0)
            snprintf(want, sizeof want, "AdamW fused (one call per parameter) x%d", fused_torch);
        if (strcmp(b->plugin, "tf") == 0) snprintf(want, sizeof want, "adamw x%d", fused_tf);
        if (strcmp(b->plugin, "jax") == 0) snprintf(want, sizeof want, "adamw x%d (one call", fused_torch);
        if (want[0] && !strstr(st.notes, want)) fail_msg("%s: notes '%s' lack '%s'", b->label, st.notes, want);
        for (int i = 0; i < c->n_state; i++) {
            struct tr_tensor t = tr_node_tensor(c->g, c->state[i]);
            const char *name = tr_node_name(c->g, c->state[i]);
            /* bit for bit where the rest of the step runs the same kernels: jax generates
             * its own, and in bf16 torch's addmm and tf's GEMM epilogue round a GEMM's sum
             * with its bias once (the fused update against the ops in bf16, CAST
             * included, is test_optim's, bit for bit) */
            const int exact = dt == TR_DTYPE_F32 && strcmp(b->plugin, "jax") != 0;
            if (!exact) {
                struct tr_tensor r = t;
                r.data = ref[i], t.data = got[i];
                double *rv = tr_test_to_f64(&r), e = tr_test_rel_err(&t, rv);
                free(rv);
                /* bf16: two 3-step trajectories whose gradients differ by a rounding or two
                 * (2^-8 each) and whose moments carry it: 3x bf16's kernel tolerance */
                const double tol = dt == TR_DTYPE_F32 ? tr_test_tol(dt) : 3 * tr_test_tol(dt);
                if (!(e < tol))
                    fail_msg("%s %s: '%s' rel err %.3g against the unfused ops", b->label, tr_dtype_name(dt), name, e);
            } else if (memcmp(got[i], ref[i], tr_tensor_nbytes(&t)) != 0) {
                fail_msg("%s %s: '%s' is not the unfused ops' bits", b->label, tr_dtype_name(dt), name);
            }
        }
        /* the outputs too: an old weight read after the update must still be the old one */
        for (int i = 0; i < n_out; i++) {
            double *r = tr_test_to_f64(&ref_out[i]), e = tr_test_rel_err(&got_out[i], r);
            free(r);
            if (!(e < (dt == TR_DTYPE_F32 ? 1e-6 : 3 * tr_test_tol(dt))))
                fail_msg("%s %s: output '%s' rel err %.3g", b->label, tr_dtype_name(dt), tr_graph_output_name(c->g, i),
                         e);
            tr_test_tensor_free(&got_out[i]);
        }
        free_after(c, got);
    }
    for (int i = 0; i < n_out; i++) tr_test_tensor_free(&ref_out[i]);
    free_after(c, ref);
    case_free(c);
}

static void test_f32(void **state) {
    (void)state;
    run_case(TR_DTYPE_F32, PLAIN, NP, NP);
}

/* bf16 weights: the gradient's CAST to f32 is read by the fused call itself */
static void test_bf16(void **state) {
    (void)state;
    run_case(TR_DTYPE_BF16, PLAIN, NP, NP);
}

static void test_moment_read(void **state) {
    (void)state;
    run_case(TR_DTYPE_F32, MOMENT_READ, NP - 1, NP - 1);
}

/* torch calls at the step, after every reader; tf at the first of the group's values,
 * so a reader of the weight after it keeps that parameter's ops; jax groups it and
 * leaves the update out of the weight's memory (its donation is decided by steps) */
static void test_weight_read_after(void **state) {
    (void)state;
    run_case(TR_DTYPE_F32, WEIGHT_READ_AFTER, NP, NP - 1);
}

TR_TEST_MAIN(tr_test_kernels_dir_setup, tr_test_kernels_dir_teardown, test_f32, test_bf16, test_moment_read,
             test_weight_read_after)
