/* The roofline sheet (trident/roofline.h): the scores a causal or windowed attention sees,
 * each group's FLOPs, bytes, floor and design worked out by hand on small graphs, calls of
 * one shape grouped, views and collectives left out, the step's sums, the presets. */
#include <math.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/optim.h"
#include "trident/roofline.h"

static void assert_near(double a, double b) {
    if (fabs(a - b) > 1e-12 * fmax(fabs(a), fabs(b)) + 1e-30) fail_msg("%.17g, expected %.17g", a, b);
}

static void test_visible_fraction(void **state) {
    (void)state;
    assert_near(tr_roof_visible_fraction(4, 4, 0, 0), 1.0);
    assert_near(tr_roof_visible_fraction(4, 4, 1, 0), 10.0 / 16.0); /* 1 + 2 + 3 + 4 */
    assert_near(tr_roof_visible_fraction(4, 4, 1, 2), 7.0 / 16.0);  /* 1 + 2 + 2 + 2 */
    assert_near(tr_roof_visible_fraction(1, 8, 1, 0), 1.0);         /* a decode step sees every key */
    assert_near(tr_roof_visible_fraction(1, 8, 1, 3), 3.0 / 8.0);   /* ... but its window's */
    assert_near(tr_roof_visible_fraction(2, 5, 1, 0), 9.0 / 10.0);  /* 4 + 5, aligned at the end */
    /* against a brute-force count */
    for (int64_t tq = 1; tq <= 9; tq++)
        for (int64_t tk = tq; tk <= 11; tk++)
            for (int64_t w = 0; w <= 4; w++) {
                double seen = 0;
                for (int64_t i = 0; i < tq; i++)
                    for (int64_t j = 0; j < tk; j++)
                        seen += j <= i + tk - tq && (w == 0 || j > i + tk - tq - w);
                assert_near(tr_roof_visible_fraction(tq, tk, 1, w), seen / (double)(tq * tk));
            }
}

static const struct tr_roof_device dev = {"test", 100, 50, 10, 1000}; /* TFLOP/s, GB/s */

/* x (64,128) through two (128,128) layers and a layer norm; a reshape and an all-reduce. */
static void test_sheet(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error e = {0};
    const int64_t xs[2] = {64, 128}, ws[2] = {128, 128}, gs[1] = {128};
    int h = tr_input(g, "x", TR_DTYPE_F32, 2, xs);
    for (int l = 0; l < 2; l++) {
        char name[8];
        snprintf(name, sizeof name, "w%d", l);
        h = tr_matmul(g, h, tr_param(g, name, TR_DTYPE_F32, 2, ws, 0, 1), 0, 0);
    }
    const int gamma = tr_param(g, "g", TR_DTYPE_F32, 1, gs, 1, 0), beta = tr_param(g, "b", TR_DTYPE_F32, 1, gs, 0, 0);
    h = tr_layer_norm(g, h, gamma, beta, 1e-5f);
    const int64_t flat[1] = {64 * 128};
    h = tr_allreduce(g, tr_reshape(g, h, 1, flat), 1, 0, 1.0f);
    tr_graph_set_output(g, h, "y");
    assert_int_equal(tr_graph_status(g, &e), TR_OK);

    struct tr_roof_sheet s;
    assert_int_equal(tr_roof_sheet_build(g, TR_MATH_DEFAULT, &dev, &s, &e), TR_OK);
    assert_int_equal(s.n, 2); /* the two matmuls are one group; no reshape, no all-reduce */
    const struct tr_roof_kernel *mm = &s.k[0], *ln = &s.k[1];
    assert_int_equal(mm->op, TR_OP_MATMUL);
    assert_int_equal(mm->count, 2);
    assert_int_equal(ln->op, TR_OP_LAYER_NORM);
    assert_int_equal(ln->count, 1);
    const double mf = 2.0 * 64 * 128 * 128, mb = 4.0 * (64 * 128 + 128 * 128 + 64 * 128);
    assert_near(mm->flops, mf);
    assert_near(mm->bytes, mb);
    /* f32 math: the f32 peak; 1.68 us of math against 0.066 us of bytes */
    assert_near(mm->peak_tflops, 10);
    assert_near(mm->floor_s, mf / 10e12);
    assert_false(mm->memory_bound);
    const struct tr_roof_design d = tr_roof_design_of(TR_OP_MATMUL, TR_DTYPE_F32, TR_MATH_DEFAULT);
    assert_near(mm->design_s, fmax(mf / 10e12 / d.compute, mb / 1e12 / d.memory));
    /* the layer norm moves x, gamma, beta and y */
    assert_near(ln->bytes, 4.0 * (2 * 64 * 128 + 2 * 128));
    assert_true(ln->memory_bound);
    assert_near(s.floor_s, 2 * mm->floor_s + ln->floor_s);
    assert_near(s.flops, 2 * mf + ln->flops);
    assert_true(tr_roof_sheet_measured(&s) < 0);
    tr_roof_sheet_free(&s);

    /* TF32 math puts the matmul on the tf32 peak: 0.084 us of math, under its bytes */
    assert_int_equal(tr_roof_sheet_build(g, TR_MATH_TF32, &dev, &s, &e), TR_OK);
    assert_near(s.k[0].peak_tflops, 50);
    assert_true(s.k[0].memory_bound);
    assert_near(s.k[0].floor_s, mb / 1e12);
    tr_roof_sheet_free(&s);
    tr_graph_free(g);
}

/* Causal attention counts only the scores it sees; bf16 runs on the matrix peak. */
static void test_attention(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error e = {0};
    const int64_t sh[4] = {2, 4, 16, 32};
    const int q = tr_input(g, "q", TR_DTYPE_BF16, 4, sh), k = tr_input(g, "k", TR_DTYPE_BF16, 4, sh),
              v = tr_input(g, "v", TR_DTYPE_BF16, 4, sh);
    tr_graph_set_output(g, tr_attention(g, q, k, v, -1, 0.0f, 1, 0), "o");
    assert_int_equal(tr_graph_status(g, &e), TR_OK);
    struct tr_roof_sheet s;
    assert_int_equal(tr_roof_sheet_build(g, TR_MATH_DEFAULT, &dev, &s, &e), TR_OK);
    assert_int_equal(s.n, 1);
    const double dense = 2.0 * 2 * 4 * 16 * 16 * (32 + 32);
    assert_near(s.k[0].flops, dense * (16.0 * 17.0 / 2.0) / (16.0 * 16.0));
    assert_near(s.k[0].peak_tflops, 100);
    assert_near(s.k[0].bytes, 2.0 * 4 * (2 * 4 * 16 * 32));
    tr_roof_sheet_free(&s);
    tr_graph_free(g);
}

/* AdamW's eight ops per parameter are one call (as every backend makes them): 7 passes,
 * the CAST of a bf16 gradient inside; a group whose moment is read elsewhere stays ops. */
static void test_adamw(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error e = {0};
    const int64_t big[1] = {300}, small[1] = {40}, other[1] = {50};
    const int lr = tr_input(g, "lr", TR_DTYPE_F32, 0, NULL), step = tr_input(g, "step", TR_DTYPE_F32, 0, NULL);
    int p[5], gr[5];
    p[0] = tr_param(g, "W", TR_DTYPE_F32, 1, big, 0, 1), gr[0] = tr_input(g, "gW", TR_DTYPE_F32, 1, big);
    p[1] = tr_param(g, "C", TR_DTYPE_F32, 1, big, 0, 1), gr[1] = tr_input(g, "gC", TR_DTYPE_F32, 1, big);
    p[2] = tr_param(g, "B", TR_DTYPE_BF16, 1, small, 0, 1), gr[2] = tr_input(g, "gB", TR_DTYPE_BF16, 1, small);
    p[3] = tr_param(g, "D", TR_DTYPE_F32, 1, other, 0, 1), gr[3] = tr_input(g, "gD", TR_DTYPE_F32, 1, other);
    /* an f32 master weight's gradient cast from bf16 (mixed precision's): that CAST stays a
     * kernel before the call, as on the backends */
    p[4] = tr_param(g, "E", TR_DTYPE_F32, 1, small, 0, 1);
    gr[4] = tr_cast(g, tr_input(g, "gE", TR_DTYPE_BF16, 1, small), TR_DTYPE_F32);
    const struct tr_adamw hp = {0.9f, 0.999f, 1e-8f, 0.01f};
    struct tr_optim_update up[5];
    assert_int_equal(tr_adamw(g, &hp, 5, p, gr, lr, step, up, &e), TR_OK);
    for (int i = 0; i < 5; i++) {
        tr_graph_add_update(g, up[i].param, up[i].new_param);
        for (int k = 0; k < 2; k++) tr_graph_add_update(g, up[i].state[k], up[i].new_state[k]);
    }
    tr_graph_set_output(g, tr_reduce(g, TR_OP_SUM, up[3].new_state[0], 0, 0), "D's m"); /* D's group stays ops */
    assert_int_equal(tr_graph_status(g, &e), TR_OK);

    struct tr_roof_sheet s;
    assert_int_equal(tr_roof_sheet_build(g, TR_MATH_DEFAULT, &dev, &s, &e), TR_OK);
    int fused_f32 = -1, fused_bf16 = -1, fused_e = -1, plain_step = -1, scales = 0, casts = 0;
    for (int i = 0; i < s.n; i++) {
        const struct tr_roof_kernel *k = &s.k[i];
        if (k->op == TR_OP_ADAMW_STEP && k->adamw_grad >= 0 && k->dtype == TR_DTYPE_F32)
            *(tr_node_shape(g, k->node)[0] == 300 ? &fused_f32 : &fused_e) = i;
        if (k->op == TR_OP_ADAMW_STEP && k->adamw_grad >= 0 && k->dtype == TR_DTYPE_BF16) fused_bf16 = i;
        if (k->op == TR_OP_ADAMW_STEP && k->adamw_grad < 0) plain_step = i;
        scales += k->op == TR_OP_SCALE ? k->count : 0;
        casts += k->op == TR_OP_CAST ? k->count : 0;
    }
    assert_true(fused_f32 >= 0 && fused_bf16 >= 0 && fused_e >= 0 && plain_step >= 0);
    const struct tr_roof_kernel *f = &s.k[fused_f32], *b = &s.k[fused_bf16], *d = &s.k[plain_step];
    assert_int_equal(f->count, 2); /* W and C: one shape */
    assert_int_equal(b->count, 1);
    assert_int_equal(d->count, 1);
    /* param, m, v, the gradient read, param', m', v' written, and the two scalars */
    assert_near(f->bytes, 7.0 * 4 * 300 + 8);
    assert_near(b->bytes, 2.0 * 2 * 40 + 4.0 * 4 * 40 + 2.0 * 40 + 8);
    assert_true(f->memory_bound && f->flops > tr_node_flops(g, up[0].new_param));
    assert_non_null(strstr(f->what, "adamw_update f32 [300] grad f32"));
    assert_non_null(strstr(b->what, "adamw_update bf16 [40] grad bf16"));
    assert_int_equal(b->adamw_grad, gr[2]);
    assert_int_equal(scales, 4); /* D's alone */
    assert_int_equal(casts, 1);  /* E's; B's gradient's CAST is in its call */
    assert_int_equal(tr_node_op(g, s.k[fused_e].adamw_grad), TR_OP_CAST);
    assert_near(s.k[fused_e].bytes, 7.0 * 4 * 40 + 8);
    assert_near(d->bytes, 4.0 * (4 * 50) + 8);
    /* W's, C's, B's and E's calls, E's CAST, D's 8 ops, D's sum */
    int calls = 0;
    for (int i = 0; i < s.n; i++) calls += s.k[i].count;
    assert_int_equal(calls, 4 + 1 + 8 + 1);
    tr_roof_sheet_free(&s);
    tr_graph_free(g);
}

static void test_presets(void **state) {
    (void)state;
    struct tr_roof_device d;
    struct tr_error e = {0};
    assert_int_equal(tr_roof_device_preset("h200", &d, &e), TR_OK);
    assert_true(d.tc_tflops > d.tf32_tflops && d.tf32_tflops > d.f32_tflops && d.bw_gbs == 4800);
    assert_int_equal(tr_roof_device_preset("b200", &d, &e), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&e, "no device 'b200'");
    struct tr_roof_sheet s;
    const struct tr_roof_device none = {"none", 0, 0, 0, 0};
    struct tr_graph *g = tr_test_graph_new();
    assert_int_equal(tr_roof_sheet_build(g, TR_MATH_DEFAULT, &none, &s, &e), TR_ERR_INVALID);
    tr_assert_msg_has(&e, "has no peaks");
    tr_graph_free(g);

    /* a card's preset by the name CUDA gives it; none for the parts whose peaks differ */
    assert_string_equal(tr_roof_device_for_gpu("NVIDIA H100 80GB HBM3"), "h100");
    assert_string_equal(tr_roof_device_for_gpu("NVIDIA H200"), "h200");
    assert_null(tr_roof_device_for_gpu("NVIDIA H200 NVL"));
    assert_null(tr_roof_device_for_gpu("NVIDIA H100 PCIe"));
    assert_null(tr_roof_device_for_gpu("NVIDIA H100 NVL"));
    assert_null(tr_roof_device_for_gpu("NVIDIA A100-SXM4-80GB"));
    assert_null(tr_roof_device_for_gpu(NULL));
}

TR_TEST_MAIN(NULL, NULL, test_visible_fraction, test_sheet, test_attention, test_adamw, test_presets)
