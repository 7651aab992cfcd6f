/* tr_grad checked by finite differences in float64.
 *
 * Each test builds a small f64 graph, reduces its output to a scalar loss
 * SUM(out · R) with a fixed random R, applies tr_grad and evaluates the whole graph with
 * the reference evaluator of tests/ref (each op by its float64 oracle, the forward ops
 * and the *_GRAD ops alike; it reads the graph only through the public accessors and
 * does not use the kernels library). Every gradient is compared against central
 * differences of the loss: ‖analytic − numeric‖ / ‖numeric‖ < 1e-6.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ref/ref.h"
#include "testutil.h"
#include "trident/autodiff.h"
#include "trident/graph.h"

#define SH(...) (const int64_t[]){__VA_ARGS__}
/* The checker's names, short as the tests use them often. */
#define leaf(...) tr_ref_gx_param(__VA_ARGS__)
#define ids_input(...) tr_ref_gx_ids(__VA_ARGS__)
#define loss_of(...) tr_ref_gx_loss(__VA_ARGS__)
#define check(...) tr_ref_gx_check(__VA_ARGS__)
#define grad_err(...) tr_ref_gx_grad_err(__VA_ARGS__)
#define count_op(...) tr_ref_count_op(__VA_ARGS__)
#define SIGNED TR_REF_SIGNED
#define POSITIVE TR_REF_POSITIVE
#define DISTINCT TR_REF_DISTINCT

/* ---- op by op ---- */

static void test_binary_broadcast(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_ADD, TR_OP_SUB, TR_OP_MUL, TR_OP_DIV};
    for (int i = 0; i < 4; i++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        /* both operands broadcast: (2,1,4) with (3,1) -> (2,3,4) */
        int a = leaf(t, "a", SIGNED, 3, SH(2, 1, 4));
        int b = leaf(t, "b", ops[i] == TR_OP_DIV ? POSITIVE : SIGNED, 2, SH(3, 1));
        int in[2] = {a, b};
        int y = tr_graph_add_node(t->g, ops[i], 2, in, NULL);
        int wrt[2] = {a, b};
        check(t, tr_op_name(ops[i]), loss_of(t, y), 2, wrt);
        tr_ref_gx_free(t);
    }
}

static void test_unaries(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_GELU, TR_OP_GELU, TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID,
                              TR_OP_EXP, TR_OP_NEG, TR_OP_SQRT, TR_OP_RSQRT, TR_OP_SCALE};
    for (int i = 0; i < (int)(sizeof ops / sizeof *ops); i++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int pos = ops[i] == TR_OP_SQRT || ops[i] == TR_OP_RSQRT;
        int x = leaf(t, "x", pos ? POSITIVE : SIGNED, 2, SH(3, 5));
        int y = ops[i] == TR_OP_GELU ? tr_gelu(t->g, x, i == 1)
              : ops[i] == TR_OP_SCALE ? tr_scale(t->g, x, -1.75f, 0.5f)
                                     : tr_unary(t->g, ops[i], x);
        char what[64];
        snprintf(what, sizeof what, "%s%s", tr_op_name(ops[i]), i == 1 ? " (tanh)" : "");
        check(t, what, loss_of(t, y), 1, &x);
        tr_ref_gx_free(t);
    }
}

static void test_matmul(void **state) {
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int shared = 0; shared < 3; shared++) {
                struct tr_ref_gx *t = tr_ref_gx_new();
                int64_t M = 3, K = 4, N = 2;
                /* a batched (2,3,.,.); b 2-D shared by every batch, or (3,.,.) broadcast over axis 0;
                 * shared == 2: a 2-D shared by a batched b */
                int a = shared == 2 ? leaf(t, "a", SIGNED, 2, ta ? SH(K, M) : SH(M, K))
                                    : leaf(t, "a", SIGNED, 4, ta ? SH(2, 3, K, M) : SH(2, 3, M, K));
                int b = shared == 1 ? leaf(t, "b", SIGNED, 2, tb ? SH(N, K) : SH(K, N))
                               : leaf(t, "b", SIGNED, 3, tb ? SH(3, N, K) : SH(3, K, N));
                struct tr_attrs at;
                memset(&at, 0, sizeof at);
                at.ints[0] = ta, at.ints[1] = tb, at.floats[0] = 0.5f;
                int in[2] = {a, b};
                int y = tr_graph_add_node(t->g, TR_OP_MATMUL, 2, in, &at);
                char what[64];
                snprintf(what, sizeof what, "matmul trans_a=%d trans_b=%d %s", ta, tb,
                         shared == 0 ? "3-D b" : shared == 1 ? "2-D b" : "2-D a");
                int wrt[2] = {a, b};
                check(t, what, loss_of(t, y), 2, wrt);
                tr_ref_gx_free(t);
            }
}

static void test_softmax_layer_norm(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = leaf(t, "x", SIGNED, 3, SH(2, 3, 5));
    check(t, "softmax", loss_of(t, tr_softmax(t->g, x)), 1, &x);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    x = leaf(t, "x", SIGNED, 3, SH(2, 3, 6));
    int gm = leaf(t, "gamma", SIGNED, 1, SH(6)), bt = leaf(t, "beta", SIGNED, 1, SH(6));
    int wrt[3] = {x, gm, bt};
    check(t, "layer_norm", loss_of(t, tr_layer_norm(t->g, x, gm, bt, 1e-5f)), 3, wrt);
    tr_ref_gx_free(t);
}

static void test_attention(void **state) {
    (void)state;
    struct cfg { int H, Hk, Tq, Tk, causal, window, mask; const char *what; } cases[] = {
        {2, 2, 3, 3, 0, 0, 1, "mask"},
        {2, 2, 4, 4, 1, 0, 0, "causal"},
        {4, 2, 2, 5, 1, 0, 1, "GQA, causal, mask, Tq < Tk"},
        {2, 1, 4, 4, 0, 2, 0, "window 2, GQA"},
    };
    for (int c = 0; c < 4; c++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int64_t B = 2, D = 3, Dv = 2;
        int q = leaf(t, "q", SIGNED, 4, SH(B, cases[c].H, cases[c].Tq, D));
        int k = leaf(t, "k", SIGNED, 4, SH(B, cases[c].Hk, cases[c].Tk, D));
        int v = leaf(t, "v", SIGNED, 4, SH(B, cases[c].Hk, cases[c].Tk, Dv));
        int mask = cases[c].mask ? leaf(t, "mask", SIGNED, 4, SH(B, 1, 1, cases[c].Tk)) : -1;
        int y = tr_attention(t->g, q, k, v, mask, 0.7f, cases[c].causal, cases[c].window);
        int wrt[3] = {q, k, v};
        check(t, cases[c].what, loss_of(t, y), 3, wrt);
        /* the backward reads the forward's statistics: one ATTENTION_LSE of this attention,
         * and every ATTENTION_GRAD given y and it */
        int lse = -1, grads = 0;
        for (int id = 0; id < tr_graph_n_nodes(t->g); id++) {
            if (tr_node_op(t->g, id) == TR_OP_ATTENTION_LSE) {
                assert_int_equal(lse, -1);
                lse = id;
            }
            if (tr_node_op(t->g, id) != TR_OP_ATTENTION_GRAD) continue;
            const int n = tr_node_n_inputs(t->g, id);
            assert_int_equal(n, mask >= 0 ? 7 : 6);
            assert_int_equal(tr_node_input(t->g, id, n - 2), y);
            assert_int_equal(tr_node_input(t->g, id, n - 1), lse);
            grads++;
        }
        assert_int_equal(grads, 3);
        tr_ref_gx_free(t);
    }
}

static void test_embedding(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int tab = leaf(t, "table", SIGNED, 2, SH(5, 3));
    int ids = ids_input(t, "ids", 2, SH(2, 3), SH(1, 4, 1, 0, 1, 4)); /* repeated ids, row 2 and 3 unused */
    check(t, "embedding", loss_of(t, tr_embedding(t->g, tab, ids)), 1, &tab);
    tr_ref_gx_free(t);
}

static void test_layout(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = leaf(t, "x", SIGNED, 3, SH(2, 7, 3));
    check(t, "slice step 3", loss_of(t, tr_slice(t->g, x, 1, 1, -1, 3)), 1, &x);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    int a = leaf(t, "a", SIGNED, 2, SH(2, 3)), b = leaf(t, "b", SIGNED, 2, SH(2, 1));
    int c = leaf(t, "c", SIGNED, 2, SH(2, 2));
    int xs[4] = {a, b, c, a}; /* a used twice: contributions add up */
    int wrt[3] = {a, b, c};
    check(t, "concat", loss_of(t, tr_concat(t->g, 4, xs, -1)), 3, wrt);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    x = leaf(t, "x", SIGNED, 3, SH(2, 3, 4));
    int perm[3] = {2, 0, 1};
    int y = tr_reshape(t->g, tr_transpose(t->g, x, 3, perm), 2, SH(4, -1));
    check(t, "transpose+reshape", loss_of(t, y), 1, &x);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    x = leaf(t, "x", SIGNED, 2, SH(3, 4));
    check(t, "cast f64->f64", loss_of(t, tr_cast(t->g, x, TR_DTYPE_F64)), 1, &x);
    tr_ref_gx_free(t);

    /* the training layout ops have rules too (BROADCAST's is a reduction, SLICE_GRAD's a slice) */
    t = tr_ref_gx_new();
    x = leaf(t, "x", SIGNED, 2, SH(3, 1));
    struct tr_attrs at;
    memset(&at, 0, sizeof at);
    at.n_ints = 3, at.ints[0] = 2, at.ints[1] = 3, at.ints[2] = 4;
    check(t, "broadcast", loss_of(t, tr_graph_add_node(t->g, TR_OP_BROADCAST, 1, &x, &at)), 1, &x);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    x = leaf(t, "x", SIGNED, 2, SH(2, 3));
    memset(&at, 0, sizeof at);
    at.n_ints = 5, at.ints[0] = 1, at.ints[1] = 1, at.ints[2] = 6, at.ints[3] = 2, at.ints[4] = 7;
    check(t, "slice_grad", loss_of(t, tr_graph_add_node(t->g, TR_OP_SLICE_GRAD, 1, &x, &at)), 1, &x);
    tr_ref_gx_free(t);
}

/* UPDATE_SLICE: dx is dy with the slice zeroed, dupdate dy's slice (a CONST start); with a
 * start fed at run time only dx is given and dupdate is refused by name. */
static void test_update_slice(void **state) {
    (void)state;
    for (int axis = -3; axis < 3; axis++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int64_t xs[3] = {2, 5, 3}, us[3] = {2, 5, 3};
        int ax = axis < 0 ? axis + 3 : axis;
        us[ax] = xs[ax] == 5 ? 2 : 1;
        int x = leaf(t, "x", SIGNED, 3, xs), u = leaf(t, "update", SIGNED, 3, us);
        int32_t s0 = ax == 1 ? 3 : 1;
        int st = tr_const(t->g, "start", TR_DTYPE_I32, 1, SH(1), &s0);
        int y = tr_update_slice(t->g, x, u, st, axis);
        int y2 = tr_mul(t->g, y, y); /* dy not constant: the zeroed slice is visible */
        int wrt[2] = {x, u};
        char what[64];
        snprintf(what, sizeof what, "update_slice axis %d", axis);
        check(t, what, loss_of(t, y2), 2, wrt);
        tr_ref_gx_free(t);
    }

    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = leaf(t, "x", SIGNED, 2, SH(6, 3)), u = leaf(t, "update", SIGNED, 2, SH(2, 3));
    int st = tr_input(t->g, "start", TR_DTYPE_I32, 0, NULL);
    t->leaf[st] = malloc(sizeof(double));
    t->leaf[st][0] = 4;
    int loss = loss_of(t, tr_update_slice(t->g, x, u, st, 0));
    check(t, "update_slice runtime start, dx", loss, 1, &x);
    int n = tr_graph_n_nodes(t->g), gr[2];
    struct tr_error err = {0};
    int wrt[2] = {x, u};
    assert_int_equal(tr_grad(t->g, loss, 2, wrt, gr, &err), TR_ERR_UNSUPPORTED);
    if (!strstr(err.msg, "update_slice: gradient needs a constant start")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_graph_n_nodes(t->g), n);
    tr_ref_gx_free(t);
}

static void test_reductions(void **state) {
    (void)state;
    static const int ops[] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
    for (int o = 0; o < 3; o++)
        for (int axis = -1; axis < 3; axis++)
            for (int keep = 0; keep < 2; keep++) {
                struct tr_ref_gx *t = tr_ref_gx_new();
                int x = leaf(t, "x", ops[o] == TR_OP_MAX ? DISTINCT : SIGNED, 3, SH(2, 3, 4));
                char what[64];
                snprintf(what, sizeof what, "%s axis %d keepdims %d", tr_op_name(ops[o]), axis, keep);
                check(t, what, loss_of(t, tr_reduce(t->g, ops[o], x, axis, keep)), 1, &x);
                tr_ref_gx_free(t);
            }
}

static void test_losses(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int lg = leaf(t, "logits", SIGNED, 2, SH(5, 4));
    int lb = ids_input(t, "labels", 1, SH(5), SH(2, 0, 3, 2, 1)); /* label 2 ignored (two rows) */
    int ce = tr_cross_entropy(t->g, lg, lb, 2);
    assert_int_equal(tr_node_ndim(t->g, ce), 0);
    check(t, "cross_entropy (ignore 2)", ce, 1, &lg);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    lg = leaf(t, "logits", SIGNED, 2, SH(3, 4));
    lb = ids_input(t, "labels", 1, SH(3), SH(3, 0, 1));
    /* through a scaled loss, so dloss is not 1 */
    check(t, "cross_entropy", tr_scale(t->g, tr_cross_entropy(t->g, lg, lb, TR_IGNORE_NONE), 3.0f, 0.0f), 1, &lg);
    tr_ref_gx_free(t);

    t = tr_ref_gx_new();
    int p = leaf(t, "pred", SIGNED, 2, SH(3, 4)), tg = leaf(t, "target", SIGNED, 2, SH(3, 4));
    int wrt[2] = {p, tg};
    check(t, "mse", tr_scale(t->g, tr_mse(t->g, p, tg), -2.5f, 0.0f), 2, wrt);
    tr_ref_gx_free(t);
}

/* ---- small models ---- */

static void test_mlp(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", SIGNED, 2, SH(4, 5));
    int w1 = leaf(t, "w1", SIGNED, 2, SH(6, 5)), b1 = leaf(t, "b1", SIGNED, 1, SH(6));
    int w2 = leaf(t, "w2", SIGNED, 2, SH(6, 3)), b2 = leaf(t, "b2", SIGNED, 1, SH(3));
    int h = tr_unary(g, TR_OP_TANH, tr_add(g, tr_matmul(g, x, w1, 0, 1), b1));
    int y = tr_add(g, tr_matmul(g, h, w2, 0, 0), b2);
    int lb = ids_input(t, "labels", 1, SH(4), SH(0, 2, 1, 2));
    int wrt[5] = {w1, b1, w2, b2, x};
    check(t, "2-layer MLP", tr_cross_entropy(g, y, lb, TR_IGNORE_NONE), 5, wrt);
    tr_ref_gx_free(t);
}

static void test_bert_block(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    struct tr_graph *g = t->g;
    int64_t B = 2, T = 3, H = 2, Dh = 2, D = H * Dh, F = 6;
    int x = leaf(t, "x", SIGNED, 3, SH(B, T, D));
    int wqkv = leaf(t, "wqkv", SIGNED, 2, SH(D, 3 * D)), bqkv = leaf(t, "bqkv", SIGNED, 1, SH(3 * D));
    int wo = leaf(t, "wo", SIGNED, 2, SH(D, D));
    int g1 = leaf(t, "ln1.gamma", SIGNED, 1, SH(D)), be1 = leaf(t, "ln1.beta", SIGNED, 1, SH(D));
    int wi = leaf(t, "wi", SIGNED, 2, SH(D, F)), bi = leaf(t, "bi", SIGNED, 1, SH(F));
    int wf = leaf(t, "wf", SIGNED, 2, SH(F, D));
    int g2 = leaf(t, "ln2.gamma", SIGNED, 1, SH(D)), be2 = leaf(t, "ln2.beta", SIGNED, 1, SH(D));
    int mask = leaf(t, "mask", SIGNED, 4, SH(B, 1, 1, T));
    int qkv = tr_add(g, tr_matmul(g, x, wqkv, 0, 0), bqkv);
    int perm[4] = {0, 2, 1, 3};
    int heads[3];
    for (int i = 0; i < 3; i++) {
        int s = tr_slice(g, qkv, 2, i * D, (i + 1) * D, 1);
        heads[i] = tr_transpose(g, tr_reshape(g, s, 4, SH(B, T, H, Dh)), 4, perm);
    }
    int att = tr_attention(g, heads[0], heads[1], heads[2], mask, 0.7f, 0, 0);
    att = tr_reshape(g, tr_transpose(g, att, 4, perm), 3, SH(B, T, D));
    int h1 = tr_layer_norm(g, tr_add(g, tr_matmul(g, att, wo, 0, 0), x), g1, be1, 1e-5f);
    int ff = tr_matmul(g, tr_gelu(g, tr_add(g, tr_matmul(g, h1, wi, 0, 0), bi), 0), wf, 0, 0);
    int h2 = tr_layer_norm(g, tr_add(g, ff, h1), g2, be2, 1e-5f);
    int loss = tr_reduce(g, TR_OP_MEAN, tr_reshape(g, tr_mul(g, h2, h2), 1, SH(-1)), 0, 0);
    int wrt[11] = {x, wqkv, bqkv, wo, g1, be1, wi, bi, wf, g2, be2};
    check(t, "BERT-like block", loss, 11, wrt);
    char *buf = tr_ref_dump(g);
    assert_non_null(strstr(buf, "layer_norm_grad_gamma("));
    assert_non_null(strstr(buf, "attention_grad("));
    assert_non_null(strstr(buf, "unary_grad(")); /* of=gelu */
    assert_non_null(strstr(buf, "of=gelu approximate=none"));
    assert_non_null(strstr(buf, "'grad.wqkv'"));
    free(buf);
    tr_ref_gx_free(t);
}

/* ---- the checker and tr_grad's contract ---- */

static void test_checker_catches_wrong_rule(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = leaf(t, "x", SIGNED, 2, SH(3, 4));
    int loss = loss_of(t, tr_unary(t->g, TR_OP_TANH, x));
    int gr;
    assert_int_equal(tr_grad(t->g, loss, 1, &x, &gr, NULL), TR_OK);
    assert_true(grad_err(t, loss, 1, &x, &gr) < TR_REF_FD_TOL);
    /* a rule off by 0.1%, and a rule that drops one element's contribution */
    int wrong = tr_scale(t->g, gr, 1.001f, 0.0f);
    assert_true(grad_err(t, loss, 1, &x, &wrong) > TR_REF_FD_TOL);
    double keep[12];
    for (int i = 0; i < 12; i++) keep[i] = i == 5 ? 0.0 : 1.0;
    int dropped = tr_mul(t->g, gr, tr_const(t->g, "keep", TR_DTYPE_F64, 2, SH(3, 4), keep));
    assert_true(grad_err(t, loss, 1, &x, &dropped) > TR_REF_FD_TOL);
    tr_ref_gx_free(t);
}

static void test_frozen_params(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", SIGNED, 2, SH(4, 5));
    int w1 = leaf(t, "w1", SIGNED, 2, SH(5, 6)), w2 = leaf(t, "w2", SIGNED, 2, SH(6, 3));
    int h = tr_gelu(g, tr_matmul(g, x, w1, 0, 0), 0);
    int loss = loss_of(t, tr_matmul(g, h, w2, 0, 0));
    int before = tr_graph_n_nodes(g), gr;
    assert_int_equal(tr_grad(g, loss, 1, &w2, &gr, NULL), TR_OK);
    /* only w2's gradient: one matmul (hᵀ·dy), no gelu gradient, nothing for w1 or x */
    assert_int_equal(count_op(g, before, TR_OP_MATMUL), 1);
    assert_int_equal(count_op(g, before, TR_OP_UNARY_GRAD), 0);
    assert_int_equal(tr_graph_find(g, "grad.w1"), -1);
    assert_int_equal(tr_graph_find(g, "grad.x"), -1);
    assert_int_equal(tr_graph_find(g, "grad.w2"), gr);
    assert_true(grad_err(t, loss, 1, &w2, &gr) < TR_REF_FD_TOL);
    int after_one = tr_graph_n_nodes(g) - before;
    tr_ref_gx_free(t);

    /* the same graph with every weight: strictly more nodes */
    t = tr_ref_gx_new();
    g = t->g;
    x = leaf(t, "x", SIGNED, 2, SH(4, 5));
    w1 = leaf(t, "w1", SIGNED, 2, SH(5, 6)), w2 = leaf(t, "w2", SIGNED, 2, SH(6, 3));
    h = tr_gelu(g, tr_matmul(g, x, w1, 0, 0), 0);
    loss = loss_of(t, tr_matmul(g, h, w2, 0, 0));
    before = tr_graph_n_nodes(g);
    int wrt[2] = {w1, w2}, grads[2];
    assert_int_equal(tr_grad(g, loss, 2, wrt, grads, NULL), TR_OK);
    assert_true(tr_graph_n_nodes(g) - before > after_one);
    assert_int_equal(count_op(g, before, TR_OP_UNARY_GRAD), 1);
    assert_int_equal(tr_graph_find(g, "grad.x"), -1);
    tr_ref_gx_free(t);
}

static void test_unreached_wrt_gets_zeros(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = leaf(t, "x", SIGNED, 2, SH(2, 3));
    int z = leaf(t, "unused", SIGNED, 3, SH(2, 1, 4));
    int loss = loss_of(t, tr_unary(t->g, TR_OP_EXP, x));
    int wrt[2] = {z, x}, grads[2];
    assert_int_equal(tr_grad(t->g, loss, 2, wrt, grads, NULL), TR_OK);
    assert_int_equal(tr_node_op(t->g, grads[0]), TR_OP_CONST);
    assert_int_equal(tr_node_ndim(t->g, grads[0]), 3);
    assert_int_equal(tr_node_shape(t->g, grads[0])[2], 4);
    assert_string_equal(tr_node_name(t->g, grads[0]), "grad.unused");
    assert_true(grad_err(t, loss, 2, wrt, grads) < TR_REF_FD_TOL);
    for (int i = 0; i < 8; i++) assert_true(t->v[grads[0]][i] == 0.0);
    tr_ref_gx_free(t);
}

static void test_no_rule_is_an_error(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    struct tr_graph *g = t->g;
    int x = leaf(t, "x", SIGNED, 2, SH(2, 3)), dy = leaf(t, "dy", SIGNED, 2, SH(2, 3));
    struct tr_attrs a;
    memset(&a, 0, sizeof a);
    a.ints[0] = TR_OP_TANH;
    int in[2] = {x, dy};
    int ug = tr_graph_add_node(g, TR_OP_UNARY_GRAD, 2, in, &a);
    assert_true(ug >= 0);
    tr_graph_set_name(g, ug, "second.order");
    int loss = loss_of(t, ug);
    int n = tr_graph_n_nodes(g), gr = -7;
    struct tr_error err = {0};
    assert_int_equal(tr_grad(g, loss, 1, &x, &gr, &err), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "unary_grad"));
    assert_non_null(strstr(err.msg, "second.order"));
    assert_int_equal(tr_graph_n_nodes(g), n); /* nothing was added */

    /* a loss that is not one element */
    assert_int_equal(tr_grad(g, x, 1, &x, &gr, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "loss"));
    tr_ref_gx_free(t);
}

/* Model dtypes: the rules build (casts where the loss is f32 and the model bf16), and
 * every gradient has its wrt's dtype and shape. Numbers are the kernels' business. */
static void test_low_precision_graph_builds(void **state) {
    (void)state;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_BF16, 2, SH(4, 5));
    int w = tr_param(g, "w", TR_DTYPE_BF16, 2, SH(5, 3), 0.0f, 0.02f);
    int lb = tr_input(g, "labels", TR_DTYPE_I32, 1, SH(4));
    int tg = tr_input(g, "target", TR_DTYPE_BF16, 2, SH(4, 3));
    int logits = tr_reduce(g, TR_OP_MEAN, tr_reshape(g, tr_matmul(g, x, w, 0, 0), 3, SH(4, 3, 1)), 2, 0);
    int loss = tr_add(g, tr_cross_entropy(g, logits, lb, 0), tr_mse(g, logits, tg));
    assert_int_equal(tr_node_dtype(g, loss), TR_DTYPE_F32);
    int wrt[2] = {w, x}, grads[2];
    struct tr_error err;
    if (tr_grad(g, loss, 2, wrt, grads, &err)) fail_msg("tr_grad: %s", err.msg);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tr_node_dtype(g, grads[i]), TR_DTYPE_BF16);
        assert_int_equal(tr_node_ndim(g, grads[i]), 2);
        assert_int_equal(tr_node_shape(g, grads[i])[0], i == 0 ? 5 : 4);
    }
    assert_true(count_op(g, 0, TR_OP_CAST) >= 1); /* the f32 dloss of the mse, cast to bf16 */
    tr_graph_free(g);
}

/* ---- shape inference and dump of the training ops ---- */

static void expect_refused(struct tr_graph *g, int op, int n, const int *in, const struct tr_attrs *a,
                           const char *needle) {
    struct tr_graph *ok = g;
    assert_int_equal(tr_graph_add_node(ok, (enum tr_op)op, n, in, a), -1);
    struct tr_error err;
    assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
    if (!strstr(err.msg, needle)) fail_msg("%s: message '%s' lacks '%s'", tr_op_name(op), err.msg, needle);
}

static void test_infer_training_ops(void **state) {
    (void)state;
    struct tr_attrs a;
    struct tr_graph *g;
    int64_t s23[2] = {2, 3};
    /* BROADCAST to a shape the input does not broadcast to */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, s23);
    memset(&a, 0, sizeof a);
    a.n_ints = 2, a.ints[0] = 4, a.ints[1] = 3;
    expect_refused(g, TR_OP_BROADCAST, 1, &x, &a, "does not broadcast");
    tr_graph_free(g);

    /* SLICE_GRAD whose extent does not cover the slice */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    x = tr_input(g, "x", TR_DTYPE_F32, 2, s23);
    memset(&a, 0, sizeof a);
    a.ints[0] = 1, a.ints[1] = 1, a.ints[3] = 2, a.ints[4] = 5, a.n_ints = 5; /* needs 1 + 2·2 + 1 = 6 */
    expect_refused(g, TR_OP_SLICE_GRAD, 1, &x, &a, "needs 6");
    tr_graph_free(g);

    /* CROSS_ENTROPY: labels must be integers, one per row; the loss is 0-d f32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int lg = tr_input(g, "logits", TR_DTYPE_BF16, 2, s23);
    int lb = tr_input(g, "labels", TR_DTYPE_I32, 1, SH(2));
    int ce = tr_cross_entropy(g, lg, lb, TR_IGNORE_NONE);
    assert_true(ce >= 0);
    assert_int_equal(tr_node_dtype(g, ce), TR_DTYPE_F32);
    assert_int_equal(tr_node_ndim(g, ce), 0);
    int bad = tr_input(g, "bad", TR_DTYPE_F32, 1, SH(2));
    int in[2] = {lg, bad};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_CROSS_ENTROPY, 2, in, &a, "labels");
    tr_graph_free(g);

    /* ATTENTION_GRAD: shaped like the operand named by ints[2]; 3 is refused */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int q = tr_input(g, "q", TR_DTYPE_F32, 4, SH(1, 4, 3, 8));
    int k = tr_input(g, "k", TR_DTYPE_F32, 4, SH(1, 2, 5, 8));
    int v = tr_input(g, "v", TR_DTYPE_F32, 4, SH(1, 2, 5, 6));
    int dy = tr_input(g, "dy", TR_DTYPE_F32, 4, SH(1, 4, 3, 6));
    int qin[4] = {q, k, v, dy};
    memset(&a, 0, sizeof a);
    a.floats[0] = 0.5f;
    for (int w = 0; w < 3; w++) {
        a.ints[2] = w;
        int id = tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, 4, qin, &a);
        assert_true(id >= 0);
        assert_int_equal(tr_node_shape(g, id)[3], w == 2 ? 6 : 8);
        assert_int_equal(tr_node_shape(g, id)[1], w == 0 ? 4 : 2);
    }
    double fl = tr_graph_flops(g);
    assert_true(fl == 2.5 * 2.0 * 1 * 4 * 3 * 5 * (8 + 6));
    char *buf = tr_ref_dump(g);
    assert_non_null(strstr(buf, "attention_grad(%0, %1, %2, %3) dv scale=0.5"));
    free(buf);
    a.ints[2] = 3;
    expect_refused(g, TR_OP_ATTENTION_GRAD, 4, qin, &a, "which 3");
    tr_graph_free(g);

    /* ATTENTION_LSE: (B,H,Tq) f32 of bf16 operands, no FLOPs of its own; ATTENTION_GRAD takes
     * the forward's y and lse last (6 inputs; 7 with the mask), each checked */
    for (int bad = 0; bad < 3; bad++) {
        assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
        int bq = tr_input(g, "q", TR_DTYPE_BF16, 4, SH(1, 4, 3, 8));
        int bk = tr_input(g, "k", TR_DTYPE_BF16, 4, SH(1, 2, 5, 8));
        int bv = tr_input(g, "v", TR_DTYPE_BF16, 4, SH(1, 2, 5, 6));
        int bdy = tr_input(g, "dy", TR_DTYPE_BF16, 4, SH(1, 4, 3, 6));
        int fwd[3] = {bq, bk, bv};
        memset(&a, 0, sizeof a);
        a.ints[0] = 1;
        int y = tr_graph_add_node(g, TR_OP_ATTENTION, 3, fwd, &a);
        int l = tr_graph_add_node(g, TR_OP_ATTENTION_LSE, 3, fwd, &a);
        assert_true(y >= 0 && l >= 0);
        assert_int_equal(tr_node_dtype(g, l), TR_DTYPE_F32);
        assert_int_equal(tr_node_ndim(g, l), 3);
        assert_memory_equal(tr_node_shape(g, l), SH(1, 4, 3), 3 * sizeof(int64_t));
        assert_true(tr_node_attrs(g, l)->floats[0] == tr_attention_default_scale(8));
        assert_true(tr_node_flops(g, l) == 0.0);
        int gin[6] = {bq, bk, bv, bdy, y, l};
        if (bad == 1) gin[5] = bdy; /* lse: the wrong shape and dtype */
        if (bad == 2) gin[4] = l;   /* y: not the attention's output */
        a.ints[2] = 1;
        if (bad) {
            expect_refused(g, TR_OP_ATTENTION_GRAD, 6, gin, &a, bad == 1 ? "lse" : "y");
        } else {
            int dk = tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, 6, gin, &a);
            assert_int_equal(tr_node_dtype(g, dk), TR_DTYPE_BF16);
            assert_memory_equal(tr_node_shape(g, dk), SH(1, 2, 5, 8), 4 * sizeof(int64_t));
            buf = tr_ref_dump(g);
            assert_non_null(strstr(buf, "attention_lse(%0, %1, %2) scale="));
            free(buf);
        }
        tr_graph_free(g);
    }

    /* UPDATE_SLICE: like x; update's dtype, rank and extents checked; start one i32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int cache = tr_param(g, "cache", TR_DTYPE_BF16, 4, SH(2, 3, 8, 4), 0.0f, 0.0f);
    int upd = tr_input(g, "upd", TR_DTYPE_BF16, 4, SH(2, 3, 1, 4));
    int pos = tr_input(g, "pos", TR_DTYPE_I32, 1, SH(1));
    int us = tr_update_slice(g, cache, upd, pos, -2);
    assert_true(us >= 0);
    assert_int_equal(tr_node_dtype(g, us), TR_DTYPE_BF16);
    assert_int_equal(tr_node_shape(g, us)[2], 8);
    assert_int_equal(tr_node_attrs(g, us)->ints[0], 2);
    assert_true(tr_graph_flops(g) == 0.0);
    buf = tr_ref_dump(g);
    if (!strstr(buf, "update_slice(%0, %1, %2) axis=2 : bf16[2,3,8,4]")) fail_msg("dump: %s", buf);
    free(buf);
    tr_graph_free(g);
    static const struct {
        int dt_u, ndim_u;
        int64_t su[4];
        int dt_s;
        int64_t ns;
        int axis;
        const char *needle;
    } bad_us[] = {
        {TR_DTYPE_F32, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 1, 2, "expected x's dtype"},
        {TR_DTYPE_BF16, 4, {2, 3, 9, 4}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 4, {2, 2, 1, 4}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 3, {2, 3, 1}, TR_DTYPE_I32, 1, 2, "except along axis 2"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I64, 1, 2, "i32 tensor of exactly one element"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 2, 2, "i32 tensor of exactly one element"},
        {TR_DTYPE_BF16, 4, {2, 3, 1, 4}, TR_DTYPE_I32, 1, 4, "axis 4 is out of range"},
    };
    for (int i = 0; i < (int)(sizeof bad_us / sizeof *bad_us); i++) {
        assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
        int in3[3] = {tr_param(g, "cache", TR_DTYPE_BF16, 4, SH(2, 3, 8, 4), 0.0f, 0.0f),
                      tr_input(g, "upd", (enum tr_dtype)bad_us[i].dt_u, bad_us[i].ndim_u, bad_us[i].su),
                      tr_input(g, "pos", (enum tr_dtype)bad_us[i].dt_s, 1, &bad_us[i].ns)};
        memset(&a, 0, sizeof a);
        a.ints[0] = bad_us[i].axis;
        expect_refused(g, TR_OP_UPDATE_SLICE, 3, in3, &a, bad_us[i].needle);
        tr_graph_free(g);
    }
    /* x must be a float or i32 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x64 = tr_input(g, "x64", TR_DTYPE_I64, 1, SH(4)), u64 = tr_input(g, "u64", TR_DTYPE_I64, 1, SH(1));
    int in3b[3] = {x64, u64, tr_input(g, "pos", TR_DTYPE_I32, 0, NULL)};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_UPDATE_SLICE, 3, in3b, &a, "or i32");
    tr_graph_free(g);

    /* f64 losses stay f64 */
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int p = tr_input(g, "p", TR_DTYPE_F64, 2, s23), tg = tr_input(g, "t", TR_DTYPE_F64, 2, s23);
    int m = tr_mse(g, p, tg);
    assert_int_equal(tr_node_dtype(g, m), TR_DTYPE_F64);
    int t32 = tr_input(g, "t32", TR_DTYPE_F64, 2, SH(3, 2));
    int in2[2] = {p, t32};
    memset(&a, 0, sizeof a);
    expect_refused(g, TR_OP_MSE, 2, in2, &a, "one shape");
    tr_graph_free(g);
}

TR_TEST_MAIN(NULL, NULL, test_binary_broadcast, test_unaries, test_matmul, test_softmax_layer_norm, test_attention,
             test_embedding, test_layout, test_update_slice, test_reductions, test_losses, test_mlp, test_bert_block,
             test_checker_catches_wrong_rule, test_frozen_params, test_unreached_wrt_gets_zeros,
             test_no_rule_is_an_error, test_low_precision_graph_builds, test_infer_training_ops)
