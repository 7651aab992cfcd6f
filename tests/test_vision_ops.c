/* CONV2D and GROUP_NORM (ops.h, NHWC): the cpu kernels through the dispatcher against the
 * float64 oracles of tests/ref, random inputs (never zero), outputs poisoned first, f32
 * and bf16; the graph's shape rule (output shapes, and the refusals naming what is wrong);
 * the reference evaluator's node rules against the oracles; the dump and FLOPs; a small
 * conv/group-norm chain on every backend. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_test.h"
#include "backendutil.h"
#include "ref/ref.h"
#include "trident/autodiff.h"
#include "trident/graph.h"

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* ---------------------------------------------------------------- conv2d */

struct conv_case {
    int64_t N, H, W, Ci, K, Co, stride, pad, pad_end;
    int bias; /* 0 none, 1 x's dtype, 2 f32 */
};

/* CONV2D, then its two gradients at a random dy, each against its oracle. */
static void conv_run(enum tr_dtype dt, const struct conv_case *c, uint64_t seed) {
    struct tr_error err = {0};
    const struct tr_ref_conv rc = {c->N, c->H, c->W, c->Ci, c->K, c->K, c->Co, c->stride, c->pad, c->pad_end};
    const int64_t OH = tr_ref_conv_oh(&rc), OW = tr_ref_conv_ow(&rc);
    struct tr_tensor x = TENSOR(dt, c->N, c->H, c->W, c->Ci), w = TENSOR(dt, c->Co, c->Ci, c->K, c->K),
                     b = TENSOR(c->bias == 2 ? TR_DTYPE_F32 : dt, c->Co), out = TENSOR(dt, c->N, OH, OW, c->Co);
    tr_test_randn(&x, seed, 1.0);
    tr_test_randn(&w, seed + 1, 1.0 / sqrt((double)(c->K * c->K * c->Ci)));
    tr_test_randn(&b, seed + 2, 0.5);
    tr_test_poison(&out);
    struct tr_attrs at = {.ints = {c->stride, c->pad, 1, 1, c->pad_end}, .n_ints = 5};
    struct tr_tensor in[3] = {x, w, b};
    CHECK_OK(run_op(TR_OP_CONV2D, &at, c->bias ? 3 : 2, in, &out, &err));
    double *fx = tr_test_to_f64(&x), *fw = tr_test_to_f64(&w), *fb = tr_test_to_f64(&b);
    double *ref = malloc(sizeof(double) * (size_t)tr_tensor_numel(&out));
    tr_ref_conv2d(&rc, fx, fw, c->bias ? fb : NULL, ref);
    char what[200];
    snprintf(what, sizeof what, "conv2d %s x [%lld,%lld,%lld,%lld] k %lld Co %lld stride %lld pad %lld+%lld bias %d",
             tr_dtype_name(dt), (long long)c->N, (long long)c->H, (long long)c->W, (long long)c->Ci, (long long)c->K,
             (long long)c->Co, (long long)c->stride, (long long)c->pad, (long long)c->pad_end, c->bias);
    check_close(what, &out, ref);
    /* the same call again: the cached primitive, fresh weights */
    tr_test_randn(&w, seed + 3, 1.0 / sqrt((double)(c->K * c->K * c->Ci)));
    in[1] = w;
    tr_test_poison(&out);
    CHECK_OK(run_op(TR_OP_CONV2D, &at, c->bias ? 3 : 2, in, &out, &err));
    free(fw);
    fw = tr_test_to_f64(&w);
    tr_ref_conv2d(&rc, fx, fw, c->bias ? fb : NULL, ref);
    char again[240];
    snprintf(again, sizeof again, "%s (again, new w)", what);
    check_close(again, &out, ref);

    /* the gradients at dy (out's shape): dx (x's) and dw (w's) */
    struct tr_tensor dy = TENSOR(dt, c->N, OH, OW, c->Co), dx = TENSOR(dt, c->N, c->H, c->W, c->Ci),
                     dw = TENSOR(dt, c->Co, c->Ci, c->K, c->K);
    tr_test_randn(&dy, seed + 4, 1.0);
    double *fdy = tr_test_to_f64(&dy), *rdx = malloc(sizeof(double) * (size_t)tr_tensor_numel(&dx)),
           *rdw = malloc(sizeof(double) * (size_t)tr_tensor_numel(&dw));
    struct tr_attrs gi = at, gw = at;
    gi.ints[5] = c->H, gi.ints[6] = c->W, gi.n_ints = 8;
    gw.ints[5] = c->K, gw.ints[6] = c->K, gw.ints[7] = c->Co, gw.n_ints = 8;
    struct tr_tensor ii[2] = {dy, w}, iw[2] = {x, dy};
    tr_test_poison(&dx);
    tr_test_poison(&dw);
    CHECK_OK(run_op(TR_OP_CONV2D_GRAD_INPUT, &gi, 2, ii, &dx, &err));
    CHECK_OK(run_op(TR_OP_CONV2D_GRAD_WEIGHT, &gw, 2, iw, &dw, &err));
    tr_ref_conv2d_grad_input(&rc, fdy, fw, rdx);
    tr_ref_conv2d_grad_weight(&rc, fx, fdy, rdw);
    snprintf(again, sizeof again, "%s grad_input", what);
    check_close(again, &dx, rdx);
    snprintf(again, sizeof again, "%s grad_weight", what);
    check_close(again, &dw, rdw);
    free(fx), free(fw), free(fb), free(ref), free(fdy), free(rdx), free(rdw);
    tfree(&x, &w, &b, &out, &dy, &dx, &dw, NULL);
}

static void test_conv2d(void **state) {
    (void)state;
    static const struct conv_case cases[] = {
        {2, 7, 9, 5, 3, 6, 1, 1, 0, 1},  /* 3x3 same, odd H/W, bias */
        {1, 7, 9, 5, 3, 6, 1, 0, 0, 0},  /* 3x3 valid, no bias */
        {2, 9, 7, 4, 3, 8, 2, 1, 0, 2},  /* 3x3 stride 2 pad 1 (the UNet's downsampler), f32 bias */
        {1, 8, 8, 6, 3, 5, 2, 0, 1, 1},  /* stride 2, pad (0,1,0,1): the VAE's downsampler */
        {2, 9, 8, 3, 3, 4, 2, 0, 1, 0},  /* the same at an odd H */
        {1, 8, 8, 6, 3, 5, 2, 0, 0, 1},  /* stride 2 pad 0 */
        {2, 5, 7, 8, 1, 12, 1, 0, 0, 1}, /* 1x1 (the skip projection) */
        {1, 5, 7, 8, 1, 3, 1, 0, 0, 0},  /* 1x1 no bias */
        {1, 6, 5, 3, 1, 4, 2, 1, 0, 0},  /* 1x1 stride 2 padded: the border is the bias alone (none) */
        {1, 16, 16, 32, 3, 32, 1, 1, 0, 1}, /* channels wide enough for oneDNN's blocked kernels */
    };
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};
    for (size_t d = 0; d < 3; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) conv_run(dts[d], &cases[i], 100 + 10 * i + d);
}

/* ---------------------------------------------------------------- group norm */

static void gn_run(enum tr_dtype dt, int64_t N, int64_t H, int64_t W, int64_t C, int64_t G, int silu,
                   enum tr_dtype gdt, uint64_t seed) {
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(dt, N, H, W, C), g = TENSOR(gdt, C), b = TENSOR(gdt, C), out = TENSOR(dt, N, H, W, C);
    /* normal(0, 2) plus an offset per channel, so that the mean is far from 0 */
    struct tr_tensor x32 = TENSOR(TR_DTYPE_F32, N, H, W, C);
    tr_test_randn(&x32, seed, 2.0);
    for (int64_t f = 0; f < tr_tensor_numel(&x32); f++) ((float *)x32.data)[f] += 3.0f + 0.1f * (float)(f % C);
    struct tr_tensor cin[1] = {x32};
    struct tr_attrs ca = {.ints = {dt}};
    CHECK_OK(run_op(TR_OP_CAST, &ca, 1, cin, &x, &err));
    tr_test_randn(&g, seed + 1, 1.0);
    tr_test_randn(&b, seed + 2, 0.5);
    tr_test_poison(&out);
    struct tr_attrs at = {.ints = {G, silu}, .floats = {1e-5f}, .n_ints = 2};
    struct tr_tensor in[3] = {x, g, b};
    CHECK_OK(run_op(TR_OP_GROUP_NORM, &at, 3, in, &out, &err));
    double *fx = tr_test_to_f64(&x), *fg = tr_test_to_f64(&g), *fb = tr_test_to_f64(&b);
    double *ref = malloc(sizeof(double) * (size_t)tr_tensor_numel(&out));
    tr_ref_group_norm(fx, fg, fb, N, H * W, C, G, 1e-5, silu, ref);
    char what[200];
    snprintf(what, sizeof what, "group_norm %s x [%lld,%lld,%lld,%lld] G %lld silu %d gamma %s", tr_dtype_name(dt),
             (long long)N, (long long)H, (long long)W, (long long)C, (long long)G, silu, tr_dtype_name(gdt));
    check_close(what, &out, ref);
    if (!silu) { /* the gradients at a random dy: dx and dgamma */
        struct tr_tensor dy = TENSOR(dt, N, H, W, C), dx = TENSOR(dt, N, H, W, C), dg = TENSOR(dt, C);
        tr_test_randn(&dy, seed + 3, 1.0);
        tr_test_poison(&dx);
        tr_test_poison(&dg);
        struct tr_tensor gi[3] = {x, g, dy}, gg[2] = {x, dy};
        CHECK_OK(run_op(TR_OP_GROUP_NORM_GRAD, &at, 3, gi, &dx, &err));
        CHECK_OK(run_op(TR_OP_GROUP_NORM_GRAD_GAMMA, &at, 2, gg, &dg, &err));
        double *fdy = tr_test_to_f64(&dy), *rdg = malloc(sizeof(double) * (size_t)C);
        tr_ref_group_norm_grad(fx, fg, fdy, N, H * W, C, G, 1e-5, ref);
        tr_ref_group_norm_grad_gamma(fx, fdy, N, H * W, C, G, 1e-5, rdg);
        char gw[240];
        snprintf(gw, sizeof gw, "%s grad", what);
        check_close(gw, &dx, ref);
        snprintf(gw, sizeof gw, "%s grad_gamma", what);
        check_close(gw, &dg, rdg);
        free(fdy), free(rdg);
        tfree(&dy, &dx, &dg, NULL);
    }
    free(fx), free(fg), free(fb), free(ref);
    tfree(&x, &g, &b, &out, &x32, NULL);
}

static void test_group_norm(void **state) {
    (void)state;
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};
    for (int d = 0; d < 3; d++)
        for (int silu = 0; silu < 2; silu++) {
            gn_run(dts[d], 2, 5, 7, 12, 4, silu, dts[d], 300 + d * 10 + silu);
            gn_run(dts[d], 1, 9, 3, 6, 6, silu, TR_DTYPE_F32, 400 + d * 10 + silu); /* one channel per group */
            gn_run(dts[d], 3, 1, 1, 8, 1, silu, dts[d], 500 + d * 10 + silu);       /* one group, one pixel */
            gn_run(dts[d], 2, 32, 32, 64, 32, silu, dts[d], 600 + d * 10 + silu);  /* big enough to run parallel */
        }
}

/* ---------------------------------------------------------------- timestep embedding */

/* The kernel against the oracle: timesteps as a scheduler makes them (0 to 999, not
 * integers here), SD's layout (flip, shift 0) and the others, odd and tiny widths. */
static void test_timestep_embedding(void **state) {
    (void)state;
    static const struct {
        int64_t N, D;
        int flip;
        float shift, period;
    } cases[] = {{3, 320, 1, 0.0f, 0.0f}, {2, 8, 0, 1.0f, 10000.0f}, {1, 2, 1, 0.0f, 100.0f}, {5, 34, 0, 0.5f, 0.0f},
                 {20000, 2, 0, 0.0f, 0.0f}}; /* SAM's Fourier features: rows on several threads */
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};
    struct tr_error err = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int d = 0; d < 3; d++) {
            struct tr_tensor t = TENSOR(TR_DTYPE_F32, cases[c].N), tl = TENSOR(dts[d], cases[c].N),
                             out = TENSOR(dts[d], cases[c].N, cases[c].D);
            for (int64_t i = 0; i < cases[c].N; i++) /* below f16's largest */
                tr_tensor_set_f64(&t, i, 999.0 * (double)(i % 97 + 1) / 7.3 + 0.37 + 1e-3 * (double)(i / 97));
            for (int64_t i = 0; i < cases[c].N; i++) tr_tensor_set_f64(&tl, i, tr_tensor_get_f64(&t, i));
            tr_test_poison(&out);
            struct tr_attrs at = {.ints = {cases[c].D, cases[c].flip}, .n_ints = 2,
                                  .floats = {cases[c].shift, cases[c].period}};
            CHECK_OK(run_op(TR_OP_TIMESTEP_EMBEDDING, &at, 1, &tl, &out, &err));
            double *ft = tr_test_to_f64(&tl), *ref = malloc(sizeof(double) * (size_t)tr_tensor_numel(&out));
            tr_ref_timestep_embedding(ft, cases[c].N, cases[c].D, cases[c].flip, cases[c].shift,
                                      cases[c].period == 0.0f ? 10000.0 : cases[c].period, ref);
            char what[128];
            snprintf(what, sizeof what, "timestep_embedding %s N %lld D %lld flip %d shift %g", tr_dtype_name(dts[d]),
                     (long long)cases[c].N, (long long)cases[c].D, cases[c].flip, (double)cases[c].shift);
            check_close(what, &out, ref);
            free(ft), free(ref);
            tfree(&t, &tl, &out, NULL);
        }
    /* SD's first row at t = 0: cos 1 then sin 0 */
    struct tr_tensor t0 = TENSOR(TR_DTYPE_F32, 1), o0 = TENSOR(TR_DTYPE_F32, 1, 4);
    tr_tensor_set_f64(&t0, 0, 0.0);
    struct tr_attrs at = {.ints = {4, 1}, .n_ints = 2};
    CHECK_OK(run_op(TR_OP_TIMESTEP_EMBEDDING, &at, 1, &t0, &o0, &err));
    const float *o = o0.data;
    assert_true(o[0] == 1.0f && o[1] == 1.0f && o[2] == 0.0f && o[3] == 0.0f);
    /* the shape rule */
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int tt = tr_input(g, "t", TR_DTYPE_F32, 1, SH(6));
    int e = tr_timestep_embedding(g, tt, 320, 1, 0.0f, 0.0f);
    assert_true(e >= 0);
    assert_int_equal(tr_node_ndim(g, e), 2);
    assert_true(tr_node_shape(g, e)[0] == 6 && tr_node_shape(g, e)[1] == 320);
    assert_true(tr_node_attrs(g, e)->floats[1] == 10000.0f); /* resolved */
    tr_graph_free(g);
    static const struct {
        int dim;
        float shift;
        int two_d;
        const char *want;
    } bad[] = {{7, 0.0f, 0, "dim 7"}, {8, 4.0f, 0, "below dim/2 = 4"}, {8, 0.0f, 1, "must be 1-D"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
        int x = bad[i].two_d ? tr_input(g, "t", TR_DTYPE_F32, 2, SH(2, 3)) : tr_input(g, "t", TR_DTYPE_F32, 1, SH(2));
        assert_true(tr_timestep_embedding(g, x, bad[i].dim, 0, bad[i].shift, 0.0f) < 0);
        assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
        tr_assert_msg_has(&err, bad[i].want);
        tr_graph_free(g);
    }
    tfree(&t0, &o0, NULL);
}

/* ---------------------------------------------------------------- graph: shapes, refusals, evaluator */

static struct tr_graph *fresh_graph(void) {
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    return g;
}

/* A CONV2D node of x [2,9,7,4] and w [8,4,3,3] added with attrs that no tr_conv2d call
 * makes (stride 1, pad 1, then dilation and groups) is refused, naming needle. */
static void conv2d_attrs_refused(const char *what, int64_t dilation, int64_t groups, const char *needle) {
    struct tr_graph *g = fresh_graph();
    int in[2];
    in[0] = tr_input(g, "x", TR_DTYPE_F32, 4, SH(2, 9, 7, 4));
    in[1] = tr_param(g, "w", TR_DTYPE_F32, 4, SH(8, 4, 3, 3), 0, 1);
    struct tr_attrs a = {.ints = {1, 1, dilation, groups}, .n_ints = 5};
    tr_test_expect_refused(what, g, tr_graph_add_node(g, TR_OP_CONV2D, 2, in, &a), (const char *[]){needle, NULL});
}

/* group_norm of x [2,3,3,12] in `groups` with gamma [n_gamma] (beta [12]) and eps is
 * refused, naming each of needles. */
static void group_norm_refused(const char *what, int groups, int64_t n_gamma, float eps, const char *const *needles) {
    struct tr_graph *g = fresh_graph();
    int x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(2, 3, 3, 12));
    int gm = tr_param(g, "gm", TR_DTYPE_F32, 1, SH(n_gamma), 1, 0);
    int bt = tr_param(g, "bt", TR_DTYPE_F32, 1, SH(12), 0, 0);
    tr_test_expect_refused(what, g, tr_group_norm(g, x, gm, bt, groups, eps, 0), needles);
}

static void expect_shape(struct tr_graph *g, int id, const int64_t *want) {
    struct tr_error err = {0};
    if (id < 0 || tr_graph_status(g, &err)) fail_msg("builder refused: %s", err.msg);
    assert_int_equal(tr_node_ndim(g, id), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(tr_node_shape(g, id)[i], want[i]);
}

static void test_graph_shapes(void **state) {
    (void)state;
    struct tr_graph *g = fresh_graph();
    int x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(2, 9, 7, 4));
    int w3 = tr_param(g, "w3", TR_DTYPE_F32, 4, SH(8, 4, 3, 3), 0, 1);
    int w1 = tr_param(g, "w1", TR_DTYPE_F32, 4, SH(6, 4, 1, 1), 0, 1);
    int b8 = tr_param(g, "b8", TR_DTYPE_F32, 1, SH(8), 0, 1);
    expect_shape(g, tr_conv2d(g, x, w3, b8, 1, 1, 0), SH(2, 9, 7, 8));
    expect_shape(g, tr_conv2d(g, x, w3, -1, 1, 0, 0), SH(2, 7, 5, 8));
    expect_shape(g, tr_conv2d(g, x, w3, b8, 2, 1, 0), SH(2, 5, 4, 8));
    expect_shape(g, tr_conv2d(g, x, w1, -1, 2, 0, 0), SH(2, 5, 4, 6));
    expect_shape(g, tr_conv2d(g, x, w3, -1, 2, 0, 1), SH(2, 4, 3, 8)); /* pad_end: (9+1-3)/2+1, (7+1-3)/2+1 */
    int c0 = tr_conv2d(g, x, w3, -1, 0, 1, 0); /* stride 0 means 1, stored resolved */
    expect_shape(g, c0, SH(2, 9, 7, 8));
    assert_int_equal(tr_node_attrs(g, c0)->ints[0], 1);
    int gm = tr_param(g, "gm", TR_DTYPE_F32, 1, SH(4), 1, 0), bt = tr_param(g, "bt", TR_DTYPE_F32, 1, SH(4), 0, 0);
    expect_shape(g, tr_group_norm(g, x, gm, bt, 2, 1e-5f, 1), SH(2, 9, 7, 4));
    tr_graph_free(g);

    /* conv2d refusals */
    g = fresh_graph();
    x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(2, 9, 7, 4));
    int w5 = tr_param(g, "w", TR_DTYPE_F32, 4, SH(8, 5, 3, 3), 0, 1);
    tr_test_expect_refused("conv2d Cin", g, tr_conv2d(g, x, w5, -1, 1, 1, 0), (const char *[]){"Cin 5", "channels 4", NULL});
    g = fresh_graph();
    x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(2, 9, 7, 4));
    w3 = tr_param(g, "w", TR_DTYPE_F32, 4, SH(8, 4, 3, 3), 0, 1);
    int b5 = tr_param(g, "b", TR_DTYPE_F32, 1, SH(5), 0, 1);
    tr_test_expect_refused("conv2d bias", g, tr_conv2d(g, x, w3, b5, 1, 1, 0), (const char *[]){"bias", "[8]", NULL});
    conv2d_attrs_refused("conv2d dilation", 2, 1, "dilation 2");
    conv2d_attrs_refused("conv2d groups", 1, 2, "groups 2");
    g = fresh_graph();
    x = tr_input(g, "x", TR_DTYPE_F32, 3, SH(9, 7, 4));
    w3 = tr_param(g, "w", TR_DTYPE_F32, 4, SH(8, 4, 3, 3), 0, 1);
    tr_test_expect_refused("conv2d 3-D x", g, tr_conv2d(g, x, w3, -1, 1, 1, 0), (const char *[]){"4-D", NULL});
    g = fresh_graph();
    x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(1, 2, 2, 4));
    w5 = tr_param(g, "w", TR_DTYPE_F32, 4, SH(8, 4, 5, 5), 0, 1);
    tr_test_expect_refused("conv2d kernel too big", g, tr_conv2d(g, x, w5, -1, 1, 0, 0),
                   (const char *[]){"kernel 5x5", "does not fit", NULL});

    /* group_norm refusals */
    group_norm_refused("group_norm groups", 5, 12, 1e-5f, (const char *[]){"groups 5", "12 channels", NULL});
    group_norm_refused("group_norm gamma", 4, 10, 1e-5f, (const char *[]){"gamma", "[12]", NULL});
    group_norm_refused("group_norm eps", 4, 12, -1.0f, (const char *[]){"eps", NULL});
}

/* The evaluator's rules (ref_graph.c) against the oracles called directly. */
static void test_ref_graph(void **state) {
    (void)state;
    struct tr_graph *g = fresh_graph();
    int x = tr_input(g, "x", TR_DTYPE_F32, 4, SH(1, 5, 6, 4));
    int w = tr_input(g, "w", TR_DTYPE_F32, 4, SH(4, 4, 3, 3));
    int b = tr_input(g, "b", TR_DTYPE_F32, 1, SH(4));
    int gm = tr_input(g, "gm", TR_DTYPE_F32, 1, SH(4)), bt = tr_input(g, "bt", TR_DTYPE_F32, 1, SH(4));
    int c = tr_conv2d(g, x, w, b, 2, 1, 0);
    int n = tr_group_norm(g, c, gm, bt, 2, 1e-5f, 1);
    struct tr_error err = {0};
    if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
    struct tr_tensor t[5] = {TENSOR(TR_DTYPE_F32, 1, 5, 6, 4), TENSOR(TR_DTYPE_F32, 3, 3, 4, 4),
                             TENSOR(TR_DTYPE_F32, 4), TENSOR(TR_DTYPE_F32, 4), TENSOR(TR_DTYPE_F32, 4)};
    for (int i = 0; i < 5; i++) tr_test_randn(&t[i], 700 + i, 1.0);
    double **v = tr_ref_graph_run(g, t);
    double *f[5];
    for (int i = 0; i < 5; i++) f[i] = tr_test_to_f64(&t[i]);
    double rc[1 * 3 * 3 * 4], rn[1 * 3 * 3 * 4];
    const struct tr_ref_conv cv = {1, 5, 6, 4, 3, 3, 4, 2, 1, 0};
    tr_ref_conv2d(&cv, f[0], f[1], f[2], rc);
    tr_ref_group_norm(rc, f[3], f[4], 1, 9, 4, 2, (double)1e-5f, 1, rn);
    assert_true(tr_ref_rel_err(v[c], rc, 36) < 1e-12);
    assert_true(tr_ref_rel_err(v[n], rn, 36) < 1e-12);
    /* FLOPs (graph_dump.c): 2·KH·KW·Cin per conv output, 1 per group_norm output */
    assert_true(tr_graph_flops(g) == 2.0 * 36 * 3 * 3 * 4 + 36);
    /* the dump names the attributes */
    char *text = NULL;
    size_t len = 0;
    FILE *mf = open_memstream(&text, &len);
    assert_non_null(mf);
    if (tr_graph_dump(g, mf, &err)) fail_msg("%s", err.msg);
    fclose(mf);
    if (!strstr(text, "stride=2 padding=1") || !strstr(text, "groups=2") || !strstr(text, "silu=1"))
        fail_msg("dump lacks the conv2d / group_norm attributes:\n%s", text);
    free(text);
    for (int i = 0; i < 5; i++) free(f[i]), tr_test_tensor_free(&t[i]);
    tr_ref_graph_free(g, v);
    tr_graph_free(g);
}

/* conv (3x3, bias) -> group_norm + SiLU -> conv (1x1 stride 2, no bias) on every backend
 * (torch, torch:reduce-overhead, tf, jax: each runs the two ops through the shared
 * kernels) against the evaluator, f32 and bf16. */
/* conv -> group norm + SiLU -> strided conv on every backend, the SiLU fused into the
 * norm's op (split 0) or a node of its own (split 1, as the models write it: tf's
 * remapper and jax's fusion must then make them one call, and torch run two). */
static void test_every_backend(void **state) {
    (void)state;
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16};
    for (int d = 0; d < 4; d++) {
        enum tr_dtype dt = dts[d % 2];
        const int split = d >= 2;
        struct tr_graph *g = fresh_graph();
        const int64_t shapes[6][4] = {{2, 7, 9, 4}, {8, 4, 3, 3}, {8}, {8}, {8}, {6, 8, 1, 1}};
        const int nds[6] = {4, 4, 1, 1, 1, 4};
        const char *names[6] = {"x", "w", "b", "gamma", "beta", "w2"};
        int id[6];
        struct tr_tensor in[6];
        for (int i = 0; i < 6; i++) {
            id[i] = tr_input(g, names[i], dt, nds[i], shapes[i]);
            in[i] = tr_test_tensor(dt, nds[i], shapes[i]);
            tr_test_randn(&in[i], 800 + 10 * d + i, i == 1 ? 0.2 : i == 5 ? 0.35 : 1.0);
        }
        int c1 = tr_conv2d(g, id[0], id[1], id[2], 1, 1, 0);
        int gn = split ? tr_unary(g, TR_OP_SILU, tr_group_norm(g, c1, id[3], id[4], 4, 1e-5f, 0))
                       : tr_group_norm(g, c1, id[3], id[4], 4, 1e-5f, 1);
        int c2 = tr_conv2d(g, gn, id[5], -1, 2, 0, 0);
        tr_graph_set_output(g, c2, "y");
        struct tr_error err = {0};
        if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
        double **v = tr_ref_graph_run(g, in);
        for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
            struct tr_tensor out[1];
            struct tr_backend_stats st;
            tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 2, out, &st);
            char what[96];
            snprintf(what, sizeof what, "%s conv/group_norm%s/conv %s vs f64", tr_test_backends[b].label,
                     split ? "/silu" : "", tr_dtype_name(dt));
            check_close(what, &out[0], v[c2]);
            const int fuses = strcmp(tr_test_backends[b].plugin, "torch") != 0;
            if (split && fuses != (strstr(st.notes, "group_norm+silu x1") != NULL))
                fail_msg("%s: notes '%s' %s group_norm+silu", what, st.notes, fuses ? "lack" : "should not have");
            if (st.kernel_calls != (uint64_t)(3 + (split && !fuses)))
                fail_msg("%s: %llu kernel calls, %d expected", what, (unsigned long long)st.kernel_calls,
                         3 + (split && !fuses));
            tr_test_tensor_free(&out[0]);
        }
        tr_ref_graph_free(g, v);
        tr_graph_free(g);
        tr_test_tensors_free(6, in);
    }
}

/* ---------------------------------------------------------------- gradients */

/* The rules (autodiff.c) and the gradient oracles against finite differences of the
 * forward oracles, in f64 through the evaluator: conv2d (stride, padding, pad_end, bias),
 * group norm with and without the fused SiLU, and a VAE-like chain through the nearest
 * upsample (a broadcast). */
static void test_gradcheck(void **state) {
    (void)state;
    {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = tr_ref_gx_param(t, "x", TR_REF_SIGNED, 4, SH(2, 6, 5, 3));
        int w = tr_ref_gx_param(t, "w", TR_REF_SIGNED, 4, SH(4, 3, 3, 3));
        int b = tr_ref_gx_param(t, "b", TR_REF_SIGNED, 1, SH(4));
        int loss = tr_ref_gx_loss(t, tr_conv2d(t->g, x, w, b, 2, 0, 1));
        tr_ref_gx_check(t, "conv2d stride 2 pad_end 1 bias", loss, 3, (const int[]){x, w, b});
        tr_ref_gx_free(t);
    }
    {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = tr_ref_gx_param(t, "x", TR_REF_SIGNED, 4, SH(1, 5, 4, 2));
        int w = tr_ref_gx_param(t, "w", TR_REF_SIGNED, 4, SH(3, 2, 3, 3));
        int loss = tr_ref_gx_loss(t, tr_conv2d(t->g, x, w, -1, 1, 1, 0));
        tr_ref_gx_check(t, "conv2d 3x3 same", loss, 2, (const int[]){x, w});
        tr_ref_gx_free(t);
    }
    for (int silu = 0; silu < 2; silu++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = tr_ref_gx_param(t, "x", TR_REF_SIGNED, 4, SH(2, 3, 4, 6));
        int gm = tr_ref_gx_param(t, "gamma", TR_REF_SIGNED, 1, SH(6));
        int bt = tr_ref_gx_param(t, "beta", TR_REF_SIGNED, 1, SH(6));
        int loss = tr_ref_gx_loss(t, tr_group_norm(t->g, x, gm, bt, 3, 1e-5f, silu));
        tr_ref_gx_check(t, silu ? "group_norm + silu" : "group_norm", loss, 3, (const int[]){x, gm, bt});
        tr_ref_gx_free(t);
    }
    {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = tr_ref_gx_param(t, "x", TR_REF_SIGNED, 4, SH(1, 3, 3, 4));
        int w1 = tr_ref_gx_param(t, "w1", TR_REF_SIGNED, 4, SH(4, 4, 3, 3));
        int gm = tr_ref_gx_param(t, "gamma", TR_REF_SIGNED, 1, SH(4));
        int bt = tr_ref_gx_param(t, "beta", TR_REF_SIGNED, 1, SH(4));
        int w2 = tr_ref_gx_param(t, "w2", TR_REF_SIGNED, 4, SH(2, 4, 3, 3));
        struct tr_graph *g = t->g;
        int h = tr_group_norm(g, tr_conv2d(g, x, w1, -1, 1, 1, 0), gm, bt, 2, 1e-5f, 1);
        int loss = tr_ref_gx_loss(t, tr_conv2d(g, tr_upsample_nearest(g, h, 2), w2, -1, 2, 0, 1));
        tr_ref_gx_check(t, "conv, group_norm+silu, upsample, strided conv", loss, 5, (const int[]){x, w1, gm, bt, w2});
        tr_ref_gx_free(t);
    }
}

/* The same chain in f32 as a training graph (MSE against a target, tr_grad) on every
 * backend: the gradient kernels as each backend runs them against the evaluator. */
static void test_every_backend_grads(void **state) {
    (void)state;
    struct tr_graph *g = fresh_graph();
    const int64_t shapes[7][4] = {{2, 5, 6, 4}, {8, 4, 3, 3}, {8}, {8}, {8}, {3, 8, 3, 3}, {2, 5, 6, 3}};
    const int nds[7] = {4, 4, 1, 1, 1, 4, 4};
    const char *names[7] = {"x", "w", "b", "gamma", "beta", "w2", "target"};
    int id[7];
    struct tr_tensor in[7];
    for (int i = 0; i < 7; i++) {
        id[i] = tr_input(g, names[i], TR_DTYPE_F32, nds[i], shapes[i]);
        in[i] = tr_test_tensor(TR_DTYPE_F32, nds[i], shapes[i]);
        tr_test_randn(&in[i], 900 + i, i == 1 ? 0.2 : i == 5 ? 0.15 : 1.0);
    }
    /* conv, group_norm + SiLU, upsample x2, strided conv with pad_end back to 5x6 */
    int h = tr_group_norm(g, tr_conv2d(g, id[0], id[1], id[2], 1, 1, 0), id[3], id[4], 4, 1e-5f, 1);
    int y = tr_conv2d(g, tr_upsample_nearest(g, h, 2), id[5], -1, 2, 1, 0);
    int loss = tr_mse(g, y, id[6]);
    int wrt[6] = {id[0], id[1], id[2], id[3], id[4], id[5]}, grads[6];
    struct tr_error err = {0};
    if (tr_grad(g, loss, 6, wrt, grads, &err)) fail_msg("tr_grad: %s", err.msg);
    for (int i = 0; i < 6; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "d%s", names[i]);
        tr_graph_set_output(g, grads[i], nm);
    }
    if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
    double **v = tr_ref_graph_run(g, in);
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        struct tr_tensor out[6];
        tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 2, out, NULL);
        for (int i = 0; i < 6; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s d%s of the conv/group_norm/upsample chain vs f64",
                     tr_test_backends[b].label, names[i]);
            check_close(what, &out[i], v[grads[i]]);
            tr_test_tensor_free(&out[i]);
        }
    }
    tr_ref_graph_free(g, v);
    tr_graph_free(g);
    tr_test_tensors_free(7, in);
}

TR_TEST_MAIN(tr_test_kernels_dir_setup, tr_test_kernels_dir_teardown, test_conv2d, test_group_norm,
             test_timestep_embedding, test_graph_shapes, test_ref_graph, test_every_backend, test_gradcheck,
             test_every_backend_grads)
