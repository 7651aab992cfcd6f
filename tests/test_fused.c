/* The fused kernels of the tf backend (kernels.h), each against the chain of unfused
 * kernels it replaces and against the float64 oracles of tests/ref. Inputs random (never
 * zero), outputs poisoned first, f32 and bf16 (f16 where cheap), optional operands NULL,
 * broadcasting masks and position ids of shape (T) against (B,T). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_test.h"
#include "ref/ref.h"

/* ---------------------------------------------------------------- bias + residual + ln */

/* rows x D with bias/residual each present or not, gamma/beta present or not. */
static void brln_case(enum tr_dtype dt, int64_t R, int64_t D, int has_bias, int has_res, int affine, uint64_t seed) {
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(dt, R, D), res = TENSOR(dt, R, D), bias = TENSOR(dt, D), g = TENSOR(dt, D),
                     b = TENSOR(dt, D), out = TENSOR(dt, R, D), t1 = TENSOR(dt, R, D), t2 = TENSOR(dt, R, D),
                     ref_out = TENSOR(dt, R, D);
    tr_test_randn(&x, seed, 1.0);
    tr_test_randn(&res, seed + 1, 1.0);
    tr_test_randn(&bias, seed + 2, 0.5);
    tr_test_randn(&g, seed + 3, 0.3);
    tr_test_randn(&b, seed + 4, 0.3);
    tr_test_poison(&out);
    tr_test_poison(&ref_out);
    const float eps = 1e-5f;
    CHECK_OK(tr_k_bias_residual_layer_norm(K, &x, has_bias ? &bias : NULL, has_res ? &res : NULL, affine ? &g : NULL,
                                           affine ? &b : NULL, eps, &out, &err));

    /* float64 reference from the stored (rounded) inputs */
    double *fx = tr_test_to_f64(&x), *fr = tr_test_to_f64(&res), *fb = tr_test_to_f64(&bias), *fg = tr_test_to_f64(&g),
           *fbe = tr_test_to_f64(&b);
    for (int64_t r = 0; r < R; r++) {
        double *row = fx + r * D;
        for (int64_t i = 0; i < D; i++) row[i] += (has_bias ? fb[i] : 0) + (has_res ? fr[r * D + i] : 0);
        tr_ref_layer_norm(row, affine ? fg : NULL, affine ? fbe : NULL, 1, D, eps, row);
    }
    char what[160];
    snprintf(what, sizeof what, "bias_residual_layer_norm %s [%lld,%lld] bias %d residual %d affine %d vs f64",
             tr_dtype_name(dt), (long long)R, (long long)D, has_bias, has_res, affine);
    check_close(what, &out, fx);

    /* the unfused chain: add, add, layer_norm */
    const struct tr_tensor *cur = &x;
    if (has_bias) {
        CHECK_OK(tr_k_binary(K, TR_OP_ADD, cur, &bias, &t1, &err));
        cur = &t1;
    }
    if (has_res) {
        CHECK_OK(tr_k_binary(K, TR_OP_ADD, cur, &res, &t2, &err));
        cur = &t2;
    }
    CHECK_OK(tr_k_layer_norm(K, cur, affine ? &g : NULL, affine ? &b : NULL, eps, &ref_out, &err));
    double *fu = tr_test_to_f64(&ref_out);
    snprintf(what, sizeof what, "bias_residual_layer_norm %s [%lld,%lld] bias %d residual %d vs unfused",
             tr_dtype_name(dt), (long long)R, (long long)D, has_bias, has_res);
    check_close(what, &out, fu);
    free(fx);
    free(fr);
    free(fb);
    free(fg);
    free(fbe);
    free(fu);
    struct tr_tensor *all[] = {&x, &res, &bias, &g, &b, &out, &t1, &t2, &ref_out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tr_test_tensor_free(all[i]);
}

static void test_bias_residual_layer_norm(void **state) {
    (void)state;
    const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};
    for (int d = 0; d < 3; d++)
        for (int v = 0; v < 4; v++) brln_case(dts[d], 7, 96, v & 1, v >> 1, 1, 100 + (uint64_t)v);
    brln_case(TR_DTYPE_F32, 5, 40, 1, 1, 0, 7);                    /* gamma/beta NULL */
    brln_case(TR_DTYPE_F32, 512, 96, 1, 1, 1, 8);                  /* threads (past the parallel threshold) */
    brln_case(TR_DTYPE_BF16, 512, 96, 1, 1, 1, 9);
    brln_case(TR_DTYPE_F32, 3, 5000, 1, 1, 1, 10);                 /* rows longer than the stack buffers */
}

static void test_bias_residual_layer_norm_errors(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 4, 8), r = TENSOR(TR_DTYPE_F32, 4, 7), bias = TENSOR(TR_DTYPE_F32, 9),
                     out = TENSOR(TR_DTYPE_F32, 4, 8), rb = TENSOR(TR_DTYPE_BF16, 4, 8);
    tr_test_randn(&x, 1, 1);
    tr_test_randn(&r, 2, 1);
    tr_test_randn(&bias, 3, 1);
    tr_test_randn(&rb, 4, 1);
    assert_int_equal(tr_k_bias_residual_layer_norm(K, &x, NULL, &r, NULL, NULL, 1e-5f, &out, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "residual") || !strstr(err.msg, "[4,7]")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_k_bias_residual_layer_norm(K, &x, NULL, &rb, NULL, NULL, 1e-5f, &out, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_bias_residual_layer_norm(K, &x, &bias, NULL, NULL, NULL, 1e-5f, &out, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "bias") || !strstr(err.msg, "[8]")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_k_bias_residual_layer_norm(K, &x, NULL, NULL, NULL, NULL, -1.0f, &out, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_bias_residual_layer_norm(NULL, &x, NULL, NULL, NULL, NULL, 1e-5f, &out, &err), TR_ERR_INVALID);
    tr_test_tensor_free(&x);
    tr_test_tensor_free(&r);
    tr_test_tensor_free(&bias);
    tr_test_tensor_free(&out);
    tr_test_tensor_free(&rb);
}

/* ---------------------------------------------------------------- scale + mask + softmax */

/* x (2,3,7,33); mask of mshape (mnd axes) or none. */
static void sms_case(enum tr_dtype dt, enum tr_dtype mdt, int mnd, const int64_t *mshape, float scale, uint64_t seed) {
    struct tr_error err = {0};
    const int64_t xs[4] = {2, 3, 7, 33};
    struct tr_tensor x = tr_test_tensor(dt, 4, xs), out = tr_test_tensor(dt, 4, xs), t1 = tr_test_tensor(dt, 4, xs),
                     t2 = tr_test_tensor(dt, 4, xs), ref_out = tr_test_tensor(dt, 4, xs), mask = {0};
    tr_test_randn(&x, seed, 2.0);
    if (mnd >= 0) {
        mask = tr_test_tensor(mdt, mnd, mshape);
        tr_test_randn(&mask, seed + 1, 3.0);
    }
    tr_test_poison(&out);
    tr_test_poison(&ref_out);
    CHECK_OK(tr_k_scale_mask_softmax(K, &x, scale, mnd >= 0 ? &mask : NULL, &out, &err));

    double *fx = tr_test_to_f64(&x), *fm = mnd >= 0 ? tr_test_to_f64(&mask) : NULL;
    const int64_t D = xs[3], rows = xs[0] * xs[1] * xs[2];
    for (int64_t i = 0; i < rows * D; i++) fx[i] *= scale;
    if (fm) tr_ref_binary(TR_OP_ADD, (struct tr_ref_view){4, xs, fx}, (struct tr_ref_view){mnd, mshape, fm}, 4, xs, fx);
    tr_ref_softmax(fx, rows, D, fx);
    char what[160];
    snprintf(what, sizeof what, "scale_mask_softmax %s mask %s %d-D scale %g vs f64", tr_dtype_name(dt),
             mnd >= 0 ? tr_dtype_name(mdt) : "none", mnd, (double)scale);
    check_close(what, &out, fx);

    /* the unfused chain (the binary kernel takes one dtype, so only for a mask of x's dtype) */
    if (mnd < 0 || mdt == dt) {
        struct tr_attrs sa = {.floats = {scale, 0.0f}};
        CHECK_OK(tr_k_unary(K, TR_OP_SCALE, &sa, &x, &t1, &err));
        const struct tr_tensor *cur = &t1;
        if (mnd >= 0) {
            CHECK_OK(tr_k_binary(K, TR_OP_ADD, &t1, &mask, &t2, &err));
            cur = &t2;
        }
        CHECK_OK(tr_k_softmax(K, cur, &ref_out, &err));
        double *fu = tr_test_to_f64(&ref_out);
        snprintf(what, sizeof what, "scale_mask_softmax %s mask %d-D vs unfused", tr_dtype_name(dt), mnd);
        check_close(what, &out, fu);
        free(fu);
    }
    free(fx);
    free(fm);
    if (mnd >= 0) tr_test_tensor_free(&mask);
    struct tr_tensor *all[] = {&x, &out, &t1, &t2, &ref_out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tr_test_tensor_free(all[i]);
}

static void test_scale_mask_softmax(void **state) {
    (void)state;
    const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16};
    for (int d = 0; d < 2; d++) {
        enum tr_dtype dt = dts[d];
        sms_case(dt, dt, -1, NULL, 0.37f, 1);                          /* no mask */
        sms_case(dt, dt, 4, SHAPE(2, 3, 7, 33), 0.5f, 2);              /* full mask */
        sms_case(dt, dt, 4, SHAPE(2, 1, 1, 33), 0.125f, 3);            /* BERT's (B,1,1,T) */
        sms_case(dt, dt, 2, SHAPE(7, 1), 1.0f, 4);                     /* broadcast on the last axis too */
        sms_case(dt, TR_DTYPE_F32, 3, SHAPE(3, 7, 33), -0.8f, 5);      /* f32 mask */
    }
}

/* A fully masked row gives zeros, as tr_k_softmax and the attention kernel do; a mask
 * that does not broadcast is refused with both shapes. */
static void test_scale_mask_softmax_edges(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 3, 5), m = TENSOR(TR_DTYPE_F32, 3, 5), out = TENSOR(TR_DTYPE_F32, 3, 5),
                     bad = TENSOR(TR_DTYPE_F32, 2, 5);
    tr_test_randn(&x, 1, 1);
    tr_test_randn(&m, 2, 1);
    tr_test_randn(&bad, 3, 1);
    float *pm = m.data;
    for (int i = 5; i < 10; i++) pm[i] = -INFINITY;
    tr_test_poison(&out);
    CHECK_OK(tr_k_scale_mask_softmax(K, &x, 2.0f, &m, &out, &err));
    const float *po = out.data;
    for (int r = 0; r < 3; r++) {
        double s = 0;
        for (int i = 0; i < 5; i++) s += po[r * 5 + i];
        if (r == 1) assert_true(s == 0.0);
        else assert_true(fabs(s - 1.0) < 1e-5);
    }
    assert_int_equal(tr_k_scale_mask_softmax(K, &x, 2.0f, &bad, &out, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "[2,5]") || !strstr(err.msg, "[3,5]")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_k_scale_mask_softmax(K, &x, NAN, NULL, &out, &err), TR_ERR_INVALID);
    struct tr_tensor *all[] = {&x, &m, &out, &bad};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tr_test_tensor_free(all[i]);
}

/* ---------------------------------------------------------------- embeddings + ln */

/* BERT's embeddings: words (B,T), token types (B,T), positions (T) or (B,T). */
static void esln_case(enum tr_dtype dt, enum tr_dtype idt, int64_t B, int64_t T, int64_t D, int n, uint64_t seed) {
    struct tr_error err = {0};
    const int64_t V[3] = {50, 2, T + 3};
    struct tr_tensor tab[3], ids[3], ids_bt, out = TENSOR(dt, B, T, D), out2 = TENSOR(dt, B, T, D),
                                                g = TENSOR(dt, D), b = TENSOR(dt, D);
    for (int i = 0; i < 3; i++) {
        tab[i] = TENSOR(dt, V[i], D);
        tr_test_randn(&tab[i], seed + (uint64_t)i, 1.0);
    }
    ids[0] = TENSOR(idt, B, T);
    ids[1] = TENSOR(idt, B, T);
    ids[2] = TENSOR(idt, T);
    ids_bt = TENSOR(idt, B, T);
    tr_test_randint(&ids[0], seed + 10, V[0]);
    tr_test_randint(&ids[1], seed + 11, V[1]);
    tr_test_randint(&ids[2], seed + 12, V[2]);
    for (int64_t i = 0; i < B * T; i++) {
        int64_t v = (int64_t)tr_tensor_get_f64(&ids[2], i % T);
        if (idt == TR_DTYPE_I32) ((int32_t *)ids_bt.data)[i] = (int32_t)v;
        else ((int64_t *)ids_bt.data)[i] = v;
    }
    tr_test_randn(&g, seed + 20, 0.3);
    tr_test_randn(&b, seed + 21, 0.3);
    tr_test_poison(&out);
    tr_test_poison(&out2);
    const float eps = 1e-12f;
    CHECK_OK(tr_k_embedding_sum_layer_norm(K, n, tab, ids, &g, &b, eps, &out, &err));

    /* reference */
    double *ft[3], *fg = tr_test_to_f64(&g), *fb = tr_test_to_f64(&b);
    for (int i = 0; i < 3; i++) ft[i] = tr_test_to_f64(&tab[i]);
    double *ref = malloc(sizeof(double) * (size_t)(B * T * D));
    for (int64_t r = 0; r < B * T; r++) {
        double *row = ref + r * D;
        for (int64_t d = 0; d < D; d++) row[d] = 0;
        for (int i = 0; i < n; i++) {
            int64_t id = (int64_t)tr_tensor_get_f64(&ids[i], i == 2 ? r % T : r);
            for (int64_t d = 0; d < D; d++) row[d] += ft[i][id * D + d];
        }
        tr_ref_layer_norm(row, fg, fb, 1, D, eps, row);
    }
    char what[160];
    snprintf(what, sizeof what, "embedding_sum_layer_norm %s ids %s n=%d [%lld,%lld,%lld] vs f64", tr_dtype_name(dt),
             tr_dtype_name(idt), n, (long long)B, (long long)T, (long long)D);
    check_close(what, &out, ref);

    if (n == 3) {
        /* position ids (T) against the same ids written out as (B,T): the same bits */
        struct tr_tensor ids2[3] = {ids[0], ids[1], ids_bt};
        CHECK_OK(tr_k_embedding_sum_layer_norm(K, n, tab, ids2, &g, &b, eps, &out2, &err));
        assert_memory_equal(out.data, out2.data, tr_tensor_nbytes(&out));

        /* the unfused chain: three gathers, two adds (the second broadcasting (T,D)), ln */
        struct tr_tensor e0 = TENSOR(dt, B, T, D), e1 = TENSOR(dt, B, T, D), e2 = TENSOR(dt, T, D),
                         s1 = TENSOR(dt, B, T, D), s2 = TENSOR(dt, B, T, D);
        tr_test_poison(&out2);
        CHECK_OK(tr_k_embedding(K, &tab[0], &ids[0], &e0, &err));
        CHECK_OK(tr_k_embedding(K, &tab[1], &ids[1], &e1, &err));
        CHECK_OK(tr_k_embedding(K, &tab[2], &ids[2], &e2, &err));
        CHECK_OK(tr_k_binary(K, TR_OP_ADD, &e0, &e1, &s1, &err));
        CHECK_OK(tr_k_binary(K, TR_OP_ADD, &s1, &e2, &s2, &err));
        CHECK_OK(tr_k_layer_norm(K, &s2, &g, &b, eps, &out2, &err));
        double *fu = tr_test_to_f64(&out2);
        snprintf(what, sizeof what, "embedding_sum_layer_norm %s vs unfused", tr_dtype_name(dt));
        check_close(what, &out, fu);
        free(fu);
        struct tr_tensor *tmp[] = {&e0, &e1, &e2, &s1, &s2};
        for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) tr_test_tensor_free(tmp[i]);
    }
    for (int i = 0; i < 3; i++) {
        free(ft[i]);
        tr_test_tensor_free(&tab[i]);
        tr_test_tensor_free(&ids[i]);
    }
    free(fg);
    free(fb);
    free(ref);
    struct tr_tensor *all[] = {&ids_bt, &out, &out2, &g, &b};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tr_test_tensor_free(all[i]);
}

static void test_embedding_sum_layer_norm(void **state) {
    (void)state;
    esln_case(TR_DTYPE_F32, TR_DTYPE_I32, 3, 11, 64, 3, 1);
    esln_case(TR_DTYPE_BF16, TR_DTYPE_I32, 3, 11, 64, 3, 2);
    esln_case(TR_DTYPE_F32, TR_DTYPE_I64, 2, 9, 48, 2, 3);
    esln_case(TR_DTYPE_BF16, TR_DTYPE_I64, 2, 9, 48, 2, 4);
    esln_case(TR_DTYPE_F32, TR_DTYPE_I32, 8, 128, 64, 3, 5); /* threads */
}

/* A bad id anywhere is refused before a row is written: out stays poisoned. */
static void test_embedding_sum_layer_norm_errors(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor tab[2] = {TENSOR(TR_DTYPE_F32, 10, 4), TENSOR(TR_DTYPE_F32, 3, 4)},
                     ids[2] = {TENSOR(TR_DTYPE_I32, 2, 5), TENSOR(TR_DTYPE_I32, 2, 5)}, out = TENSOR(TR_DTYPE_F32, 2, 5, 4);
    tr_test_randn(&tab[0], 1, 1);
    tr_test_randn(&tab[1], 2, 1);
    tr_test_randint(&ids[0], 3, 10);
    tr_test_randint(&ids[1], 4, 3);
    ((int32_t *)ids[1].data)[7] = 3;
    tr_test_poison(&out);
    assert_int_equal(tr_k_embedding_sum_layer_norm(K, 2, tab, ids, NULL, NULL, 1e-5f, &out, &err), TR_ERR_INVALID);
    if (!strstr(err.msg, "ids[1][7] = 3") || !strstr(err.msg, "[0, 3)")) fail_msg("message: %s", err.msg);
    for (int64_t i = 0; i < tr_tensor_numel(&out); i++) assert_true(isnan(((float *)out.data)[i]));
    ((int32_t *)ids[1].data)[7] = 2;
    CHECK_OK(tr_k_embedding_sum_layer_norm(K, 2, tab, ids, NULL, NULL, 1e-5f, &out, &err));
    /* ids that do not broadcast to (2,5) */
    struct tr_tensor wrong = TENSOR(TR_DTYPE_I32, 3);
    tr_test_randint(&wrong, 5, 3);
    struct tr_tensor ids2[2] = {ids[0], wrong};
    assert_int_equal(tr_k_embedding_sum_layer_norm(K, 2, tab, ids2, NULL, NULL, 1e-5f, &out, &err), TR_ERR_SHAPE);
    if (!strstr(err.msg, "ids[1]") || !strstr(err.msg, "[3]")) fail_msg("message: %s", err.msg);
    assert_int_equal(tr_k_embedding_sum_layer_norm(K, 0, tab, ids, NULL, NULL, 1e-5f, &out, &err), TR_ERR_INVALID);
    struct tr_tensor *all[] = {&tab[0], &tab[1], &ids[0], &ids[1], &out, &wrong};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tr_test_tensor_free(all[i]);
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_bias_residual_layer_norm,
             test_bias_residual_layer_norm_errors, test_scale_mask_softmax, test_scale_mask_softmax_edges,
             test_embedding_sum_layer_norm, test_embedding_sum_layer_norm_errors)
