/* libtrident_kernels on the cpu: every kernel, directly and through tr_kernels_run,
 * against the float64 oracles of tests/ref. Inputs are random (never zero),
 * outputs poisoned with NaN first, bf16/f16 references computed from the rounded inputs
 * (tr_test_to_f64 reads what the kernel reads). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/kernels.h"

#include "kernels_test.h"
#include "ref/ref.h"

/* ------------------------------------------------------------------ references */

/* The oracles take doubles; these read the tensors as the kernel reads them. */
static struct tr_ref_view view(const struct tr_tensor *t, const double *d) {
    return (struct tr_ref_view){t->ndim, t->shape, d};
}

static double *ref_matmul(const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *c, int ta,
                          int tb, double alpha, const struct tr_tensor *bias, int act) {
    double *A = tr_test_to_f64(a), *B = tr_test_to_f64(b), *bi = bias ? tr_test_to_f64(bias) : NULL;
    double *out = malloc(sizeof(double) * (size_t)(tr_tensor_numel(c) + 1));
    tr_ref_matmul(view(a, A), view(b, B), c->ndim, c->shape, ta, tb, alpha, bi, act, out);
    free(A);
    free(B);
    free(bi);
    return out;
}

/* ------------------------------------------------------------------ context */

static void test_context(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_kernels *k2 = NULL;
    /* cuda: refused with the one message where there is no device (CI), made where there
     * is one (tests/gpu/run.sh); the two answers agree */
    if (tr_kernels_device_available(TR_DEVICE_CUDA, &err) == TR_OK) {
        assert_int_equal(tr_kernels_init(&k2, TR_DEVICE_CUDA, 0, &err), TR_OK);
        assert_int_equal(tr_kernels_device_type(k2), TR_DEVICE_CUDA);
        tr_kernels_free(k2);
        k2 = NULL;
    } else {
        assert_non_null(strstr(err.msg, "no CUDA device found"));
        assert_int_equal(tr_kernels_init(&k2, TR_DEVICE_CUDA, 0, &err), TR_ERR_DEVICE);
        assert_null(k2);
        assert_non_null(strstr(err.msg, "no CUDA device found"));
    }
    assert_int_equal(tr_kernels_device_available(TR_DEVICE_CPU, &err), TR_OK);
    assert_int_equal(tr_kernels_init(&k2, TR_DEVICE_CPU, 3, &err), TR_ERR_DEVICE);
    assert_int_equal(tr_kernels_init(&k2, TR_DEVICE_CPU, 0, &err), TR_OK);
    assert_int_equal(tr_kernels_device_type(k2), TR_DEVICE_CPU);
    void *p = NULL;
    assert_int_equal(tr_kernels_alloc(k2, 1000, &p, &err), TR_OK);
    assert_true(((uintptr_t)p & 63) == 0);
    char host[1000], back[1000];
    for (int i = 0; i < 1000; i++) host[i] = (char)(i * 7);
    assert_int_equal(tr_kernels_to_device(k2, p, host, sizeof host, &err), TR_OK);
    assert_int_equal(tr_kernels_to_host(k2, back, p, sizeof back, &err), TR_OK);
    assert_memory_equal(host, back, sizeof host);
    assert_int_equal(tr_kernels_copy(k2, back, host + 10, 100, &err), TR_OK);
    assert_memory_equal(back, host + 10, 100);
    assert_int_equal(tr_kernels_copy(k2, NULL, host, 10, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_sync(k2, &err), TR_OK);
    tr_kernels_dealloc(k2, p);
    tr_kernels_free(k2);
    tr_kernels_free(NULL);
}

/* ------------------------------------------------------------------ matmul */

struct mm_case {
    int nba, nbb;
    int64_t ba[3], bb[3];
    int64_t M, N, K;
};

static void mm_check(enum tr_dtype dt, const struct mm_case *mc, int ta, int tb, float alpha, int with_bias,
                     enum tr_dtype bias_dt, int act, int via_run, uint64_t seed) {
    int64_t as[TR_MAX_DIMS], bs[TR_MAX_DIMS], cs[TR_MAX_DIMS];
    int na = mc->nba + 2, nb = mc->nbb + 2, nbc = mc->nba > mc->nbb ? mc->nba : mc->nbb, nc = nbc + 2;
    for (int i = 0; i < mc->nba; i++) as[i] = mc->ba[i];
    for (int i = 0; i < mc->nbb; i++) bs[i] = mc->bb[i];
    as[na - 2] = ta ? mc->K : mc->M;
    as[na - 1] = ta ? mc->M : mc->K;
    bs[nb - 2] = tb ? mc->N : mc->K;
    bs[nb - 1] = tb ? mc->K : mc->N;
    for (int i = 0; i < nbc; i++) {
        int ia = i - (nbc - mc->nba), ib = i - (nbc - mc->nbb);
        int64_t ea = ia >= 0 ? mc->ba[ia] : 1, eb = ib >= 0 ? mc->bb[ib] : 1;
        cs[i] = ea == 1 ? eb : ea;
    }
    cs[nc - 2] = mc->M;
    cs[nc - 1] = mc->N;
    struct tr_tensor a = tr_test_tensor(dt, na, as), b = tr_test_tensor(dt, nb, bs), c = tr_test_tensor(dt, nc, cs);
    struct tr_tensor bias = tr_test_tensor(bias_dt, 1, &mc->N);
    tr_test_randn(&a, seed, 1.0);
    tr_test_randn(&b, seed + 1, 1.0);
    tr_test_randn(&bias, seed + 2, 1.0);
    tr_test_poison(&c);
    struct tr_error err = {0};
    int st;
    if (via_run) {
        struct tr_attrs at = {.ints = {ta, tb}, .floats = {alpha}};
        struct tr_tensor in[2] = {a, b};
        st = run_op(TR_OP_MATMUL, &at, 2, in, &c, &err);
    } else {
        st = tr_k_matmul(K, &a, &b, &c, ta, tb, alpha, with_bias ? &bias : NULL, (enum tr_act)act, &err);
    }
    char what[256];
    snprintf(what, sizeof what, "matmul %s M=%lld N=%lld K=%lld batch a %d b %d ta=%d tb=%d alpha=%g bias=%d(%s) act=%d run=%d",
             tr_dtype_name(dt), (long long)mc->M, (long long)mc->N, (long long)mc->K, mc->nba, mc->nbb, ta, tb,
             (double)alpha, with_bias, tr_dtype_name(bias_dt), act, via_run);
    if (st != TR_OK) fail_msg("%s: status %d: %s", what, st, err.msg);
    double *ref = ref_matmul(&a, &b, &c, ta, tb, alpha, with_bias ? &bias : NULL, act);
    check_close(what, &c, ref);
    free(ref);
    tfree(&a, &b, &c, &bias, NULL);
}

static void test_matmul_2d(void **state) {
    (void)state;
    const int64_t mnk[][3] = {{1, 1, 1}, {3, 17, 64}, {17, 3, 1}, {64, 64, 17}, {5, 1, 3}};
    for (int d = 0; d < N_FLOATS; d++)
        for (size_t s = 0; s < sizeof mnk / sizeof mnk[0]; s++)
            for (int t = 0; t < 4; t++) {
                struct mm_case mc = {.M = mnk[s][0], .N = mnk[s][1], .K = mnk[s][2]};
                mm_check(FLOATS[d], &mc, t & 1, t >> 1, 1.0f, 0, FLOATS[d], TR_ACT_NONE, (int)(s & 1), 10 + s);
            }
}

static void test_matmul_batched(void **state) {
    (void)state;
    const struct mm_case cases[] = {
        {.nba = 1, .ba = {2}, .nbb = 0, .M = 3, .N = 17, .K = 64},                  /* b shared: rows of one GEMM */
        {.nba = 2, .ba = {2, 3}, .nbb = 2, .bb = {2, 3}, .M = 17, .N = 3, .K = 5},   /* same batch, merged */
        {.nba = 2, .ba = {2, 3}, .nbb = 1, .bb = {3}, .M = 4, .N = 5, .K = 6},       /* b broadcast on axis 0 */
        {.nba = 2, .ba = {2, 1}, .nbb = 2, .bb = {1, 3}, .M = 3, .N = 4, .K = 7},    /* both broadcast */
        {.nba = 1, .ba = {1}, .nbb = 1, .bb = {4}, .M = 5, .N = 6, .K = 3},          /* a broadcast */
        {.nba = 3, .ba = {2, 1, 3}, .nbb = 1, .bb = {3}, .M = 1, .N = 64, .K = 17},  /* extent-1 batch axis */
    };
    for (int d = 0; d < N_FLOATS; d++)
        for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
            for (int t = 0; t < 4; t++)
                mm_check(FLOATS[d], &cases[s], t & 1, t >> 1, 1.0f, 0, FLOATS[d], TR_ACT_NONE, t == 3, 100 + s);
}

static void test_matmul_epilogue(void **state) {
    (void)state;
    const struct mm_case plain = {.M = 3, .N = 17, .K = 64};
    const struct mm_case batched = {.nba = 1, .ba = {2}, .M = 17, .N = 33, .K = 20};
    for (int d = 0; d < N_FLOATS; d++)
        for (int act = TR_ACT_NONE; act <= TR_ACT_SILU; act++) {
            mm_check(FLOATS[d], &plain, 0, 0, 1.0f, 1, FLOATS[d], act, 0, 200 + act);
            mm_check(FLOATS[d], &batched, 0, 1, 0.5f, 1, FLOATS[d], act, 0, 210 + act);
            mm_check(FLOATS[d], &batched, 1, 0, 1.0f, 0, FLOATS[d], act, 0, 220 + act);
        }
    /* alpha without bias, an f32 bias with bf16 operands, alpha through tr_kernels_run */
    mm_check(TR_DTYPE_F32, &plain, 1, 1, -0.25f, 0, TR_DTYPE_F32, TR_ACT_NONE, 0, 230);
    mm_check(TR_DTYPE_BF16, &plain, 0, 0, 2.0f, 1, TR_DTYPE_F32, TR_ACT_GELU, 0, 231);
    mm_check(TR_DTYPE_BF16, &batched, 0, 0, 0.125f, 0, TR_DTYPE_BF16, TR_ACT_NONE, 1, 232);
    /* f32 products of 2^24 multiply-adds and more over 512 rows and more take oneDNN's jit
     * sgemm (matmul.c's want_jit: on a cpu without AMX only with a plain b); fewer rows
     * (a decode step's LM head) keep its first choice, and 1-3 rows take the jit sgemm
     * from 2^20 */
    const struct mm_case big = {.nba = 1, .ba = {2}, .M = 256, .N = 260, .K = 256};
    const struct mm_case big2 = {.nba = 1, .ba = {2}, .nbb = 1, .bb = {2}, .M = 256, .N = 260, .K = 256};
    const struct mm_case head = {.M = 4, .N = 4100, .K = 1024};
    const struct mm_case gemv = {.nba = 1, .ba = {3}, .M = 1, .N = 1100, .K = 320};
    mm_check(TR_DTYPE_F32, &big, 0, 1, 0.5f, 1, TR_DTYPE_F32, TR_ACT_GELU, 0, 233);
    mm_check(TR_DTYPE_F32, &big2, 1, 0, 1.0f, 1, TR_DTYPE_F32, TR_ACT_RELU, 0, 234);
    mm_check(TR_DTYPE_F32, &big, 0, 0, 1.0f, 1, TR_DTYPE_F32, TR_ACT_NONE, 0, 237); /* b plain: jit everywhere */
    mm_check(TR_DTYPE_F32, &head, 0, 1, 1.0f, 0, TR_DTYPE_F32, TR_ACT_NONE, 0, 235);
    mm_check(TR_DTYPE_F32, &gemv, 0, 1, 1.0f, 1, TR_DTYPE_F32, TR_ACT_GELU, 0, 236);
}

static void test_matmul_cache_and_errors(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor a = TENSOR(TR_DTYPE_F32, 4, 6), b = TENSOR(TR_DTYPE_F32, 6, 5), c = TENSOR(TR_DTYPE_F32, 4, 5);
    tr_test_randn(&a, 1, 1.0);
    tr_test_randn(&b, 2, 1.0);
    struct tr_kernels_stats st0, st1;
    tr_kernels_get_stats(K, &st0);
    for (int i = 0; i < 3; i++) CHECK_OK(tr_k_matmul(K, &a, &b, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err));
    tr_kernels_get_stats(K, &st1);
    assert_int_equal(st1.gemm_calls - st0.gemm_calls, 3);
    assert_true(st1.calls - st0.calls >= 3);
    assert_true(st1.primitive_hits - st0.primitive_hits >= 2); /* the first may hit an earlier test's */
    assert_int_equal((st1.primitive_hits - st0.primitive_hits) + (st1.primitive_misses - st0.primitive_misses), 3);
    tr_kernels_reset_stats(K);
    tr_kernels_get_stats(K, &st1);
    assert_int_equal(st1.calls, 0);

    /* inner extents differ, c of the wrong shape, dtypes differ, bias of the wrong length */
    struct tr_tensor b_bad = TENSOR(TR_DTYPE_F32, 7, 5), c_bad = TENSOR(TR_DTYPE_F32, 4, 4);
    struct tr_tensor b16 = TENSOR(TR_DTYPE_BF16, 6, 5), bias_bad = TENSOR(TR_DTYPE_F32, 4);
    struct tr_tensor a1 = TENSOR(TR_DTYPE_F32, 6);
    assert_int_equal(tr_k_matmul(K, &a, &b_bad, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "inner extents"));
    assert_int_equal(tr_k_matmul(K, &a, &b, &c_bad, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_matmul(K, &a, &b16, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_matmul(K, &a, &b, &c, 0, 0, 1.0f, &bias_bad, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_matmul(K, &a1, &b, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_matmul(K, &a, &b, &c, 0, 0, 1.0f, NULL, (enum tr_act)42, &err), TR_ERR_INVALID);
    assert_int_not_equal(tr_k_matmul(K, NULL, &b, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_OK);
    assert_int_not_equal(tr_k_matmul(NULL, &a, &b, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_OK);
    /* batch axes that do not broadcast */
    struct tr_tensor a3 = TENSOR(TR_DTYPE_F32, 2, 4, 6), b3 = TENSOR(TR_DTYPE_F32, 3, 6, 5), c3 = TENSOR(TR_DTYPE_F32, 3, 4, 5);
    assert_int_equal(tr_k_matmul(K, &a3, &b3, &c3, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_SHAPE);
    struct tr_tensor ints = TENSOR(TR_DTYPE_I32, 4, 6);
    assert_int_equal(tr_k_matmul(K, &ints, &b, &c, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err), TR_ERR_UNSUPPORTED);
    struct tr_tensor *all[] = {&a, &b, &c, &b_bad, &c_bad, &b16, &bias_bad, &a1, &a3, &b3, &c3, &ints};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_tensor_free(all[i]);
}

/* ------------------------------------------------------------------ elementwise */

static void test_unary(void **state) {
    (void)state;
    const int ops[] = {TR_OP_GELU, TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID, TR_OP_EXP,
                       TR_OP_NEG, TR_OP_SQRT, TR_OP_RSQRT, TR_OP_SCALE};
    const int64_t sizes[][3] = {{3, 17, 5}, {1, 1, 1}, {2, 150, 117}}; /* the last one runs in parallel */
    struct tr_error err = {0};
    for (int d = 0; d < N_FLOATS; d++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            for (size_t s = 0; s < 3; s++)
                for (int variant = 0; variant < (ops[o] == TR_OP_GELU ? 2 : 1); variant++) {
                    int op = ops[o];
                    struct tr_tensor x = tr_test_tensor(FLOATS[d], 3, sizes[s]), y = tr_test_tensor(FLOATS[d], 3, sizes[s]);
                    tr_test_randn(&x, 300 + o, 2.0);
                    int64_t n = tr_tensor_numel(&x);
                    if (op == TR_OP_SQRT || op == TR_OP_RSQRT)
                        for (int64_t i = 0; i < n; i++) tr_tensor_set_f64(&x, i, fabs(tr_tensor_get_f64(&x, i)) + 0.01);
                    tr_test_poison(&y);
                    struct tr_attrs at = {.ints = {variant}, .floats = {-1.5f, 0.25f}};
                    if (s == 1) CHECK_OK(tr_k_unary(K, op, &at, &x, &y, &err));
                    else CHECK_OK(run_op(op, &at, 1, &x, &y, &err));
                    double *xv = tr_test_to_f64(&x);
                    for (int64_t i = 0; i < n; i++) xv[i] = tr_ref_unary(op, xv[i], variant, -1.5, 0.25);
                    char what[128];
                    snprintf(what, sizeof what, "%s(variant %d) %s size %lld", tr_op_name(op), variant,
                             tr_dtype_name(FLOATS[d]), (long long)n);
                    check_close(what, &y, xv);
                    free(xv);
                    tfree(&x, &y, NULL);
                }
    /* the fast exp, tanh and gelu over a wide range, element by element */
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 2001), y = TENSOR(TR_DTYPE_F32, 2001);
    const int ops2[] = {TR_OP_EXP, TR_OP_TANH, TR_OP_GELU, TR_OP_SIGMOID};
    for (size_t o = 0; o < 4; o++) {
        for (int i = 0; i < 2001; i++) tr_tensor_set_f64(&x, i, (i - 1000) * (ops2[o] == TR_OP_EXP ? 0.085 : 0.01));
        tr_test_poison(&y);
        CHECK_OK(tr_k_unary(K, ops2[o], NULL, &x, &y, &err));
        for (int i = 0; i < 2001; i++) {
            double xi = tr_tensor_get_f64(&x, i), r = tr_ref_unary(ops2[o], xi, 0, 1, 0), v = tr_tensor_get_f64(&y, i);
            if (!(fabs(v - r) <= 1e-6 * fabs(r) + 2e-7))
                fail_msg("%s(%g) = %.9g, expected %.9g", tr_op_name(ops2[o]), xi, v, r);
        }
    }
    /* exp saturates to 0 and +inf, never NaN */
    float *xp = x.data, *yp = y.data;
    xp[0] = -INFINITY;
    xp[1] = -100.0f;
    xp[2] = INFINITY;
    xp[3] = 100.0f;
    CHECK_OK(tr_k_unary(K, TR_OP_EXP, NULL, &x, &y, &err));
    assert_true(yp[0] == 0.0f && yp[1] == 0.0f && isinf(yp[2]) && isinf(yp[3]));
    /* relu keeps a NaN (torch's relu does), not 0 */
    xp[0] = NAN;
    CHECK_OK(tr_k_unary(K, TR_OP_RELU, NULL, &x, &y, &err));
    assert_true(isnan(yp[0]) && yp[1] == 0.0f && isinf(yp[2]) && yp[3] == 100.0f);
    assert_int_equal(tr_k_unary(K, TR_OP_ADD, NULL, &x, &y, &err), TR_ERR_INVALID);
    struct tr_tensor y2 = TENSOR(TR_DTYPE_F32, 2000);
    assert_int_equal(tr_k_unary(K, TR_OP_EXP, NULL, &x, &y2, &err), TR_ERR_SHAPE);
    tfree(&x, &y, &y2, NULL);
}

static double *ref_binary(int op, const struct tr_tensor *a, const struct tr_tensor *b, const struct tr_tensor *out) {
    double *A = tr_test_to_f64(a), *B = tr_test_to_f64(b), *r = malloc(sizeof(double) * (size_t)tr_tensor_numel(out));
    tr_ref_binary(op, view(a, A), view(b, B), out->ndim, out->shape, r);
    free(A);
    free(B);
    return r;
}

static void test_binary(void **state) {
    (void)state;
    struct bcase {
        int na, nb, no;
        int64_t a[4], b[4], o[4];
    } cases[] = {
        {3, 3, 3, {3, 17, 5}, {3, 17, 5}, {3, 17, 5}},          /* same shape */
        {2, 1, 2, {5, 7}, {7}, {5, 7}},                         /* bias add */
        {3, 3, 3, {4, 1, 3}, {1, 5, 3}, {4, 5, 3}},             /* both broadcast */
        {1, 2, 2, {1}, {2, 3}, {2, 3}},                         /* scalar a */
        {2, 2, 2, {3, 1}, {1, 4}, {3, 4}},                      /* outer product */
        {4, 2, 4, {2, 3, 4, 5}, {4, 1}, {2, 3, 4, 5}},          /* column broadcast */
        {4, 4, 4, {2, 1, 1, 130}, {2, 6, 33, 130}, {2, 6, 33, 130}}, /* mask-like, parallel */
        {1, 1, 1, {40009}, {40009}, {40009}},                   /* long, parallel, odd */
        {0, 0, 0, {0}, {0}, {0}},                               /* 0-d */
    };
    const int ops[] = {TR_OP_ADD, TR_OP_SUB, TR_OP_MUL, TR_OP_DIV};
    struct tr_error err = {0};
    for (int d = 0; d < N_FLOATS; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int o = 0; o < 4; o++) {
                struct bcase *bc = &cases[c];
                struct tr_tensor a = tr_test_tensor(FLOATS[d], bc->na, bc->a), b = tr_test_tensor(FLOATS[d], bc->nb, bc->b);
                struct tr_tensor y = tr_test_tensor(FLOATS[d], bc->no, bc->o);
                tr_test_randn(&a, 400 + c, 1.0);
                tr_test_randn(&b, 500 + c, 1.0);
                if (ops[o] == TR_OP_DIV) /* keep divisors away from 0 */
                    for (int64_t i = 0; i < tr_tensor_numel(&b); i++)
                        tr_tensor_set_f64(&b, i, 0.5 + fabs(tr_tensor_get_f64(&b, i)));
                tr_test_poison(&y);
                if (o & 1) CHECK_OK(tr_k_binary(K, ops[o], &a, &b, &y, &err));
                else CHECK_OK(run_op(ops[o], NULL, 2, (struct tr_tensor[]){a, b}, &y, &err));
                double *ref = ref_binary(ops[o], &a, &b, &y);
                char what[128];
                snprintf(what, sizeof what, "%s %s case %zu", tr_op_name(ops[o]), tr_dtype_name(FLOATS[d]), c);
                check_close(what, &y, ref);
                free(ref);
                tfree(&a, &b, &y, NULL);
            }
    struct tr_tensor a = TENSOR(TR_DTYPE_F32, 3, 4), b = TENSOR(TR_DTYPE_F32, 5), y = TENSOR(TR_DTYPE_F32, 3, 4);
    struct tr_tensor y2 = TENSOR(TR_DTYPE_F32, 3, 5), b2 = TENSOR(TR_DTYPE_BF16, 4);
    assert_int_equal(tr_k_binary(K, TR_OP_ADD, &a, &b, &y, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "broadcast"));
    assert_int_equal(tr_k_binary(K, TR_OP_ADD, &a, &a, &y2, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_binary(K, TR_OP_ADD, &a, &b2, &y, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_binary(K, TR_OP_EXP, &a, &a, &y, &err), TR_ERR_INVALID);
    assert_int_equal(run_op(TR_OP_ADD, NULL, 1, &a, &y, &err), TR_ERR_INVALID);
    tfree(&a, &b, &y, &y2, &b2, NULL);
}

/* ------------------------------------------------------------------ softmax, layer norm */

static void test_softmax(void **state) {
    (void)state;
    const int64_t shapes[][2] = {{3, 7}, {10, 130}, {4, 2000}, {1, 1}, {300, 129}};
    struct tr_error err = {0};
    for (int d = 0; d < N_FLOATS; d++)
        for (int s = 0; s < 5; s++) {
            struct tr_tensor x = tr_test_tensor(FLOATS[d], 2, shapes[s]), y = tr_test_tensor(FLOATS[d], 2, shapes[s]);
            tr_test_randn(&x, 600 + s, 3.0);
            int64_t R = shapes[s][0], D = shapes[s][1];
            if (R > 2) /* one row fully masked: zeros, not NaN; one partly */
                for (int64_t j = 0; j < D; j++) {
                    tr_tensor_set_f64(&x, 1 * D + j, -INFINITY);
                    if (j % 2) tr_tensor_set_f64(&x, 2 * D + j, -INFINITY);
                }
            tr_test_poison(&y);
            if (s & 1) CHECK_OK(tr_k_softmax(K, &x, &y, &err));
            else CHECK_OK(run_op(TR_OP_SOFTMAX, NULL, 1, &x, &y, &err));
            double *X = tr_test_to_f64(&x);
            tr_ref_softmax(X, R, D, X);
            char what[64];
            snprintf(what, sizeof what, "softmax %s [%lld,%lld]", tr_dtype_name(FLOATS[d]), (long long)R, (long long)D);
            check_close(what, &y, X);
            if (R > 2)
                for (int64_t j = 0; j < D; j++) assert_true(tr_tensor_get_f64(&y, D + j) == 0.0);
            free(X);
            tfree(&x, &y, NULL);
        }
    /* a NaN makes its row NaN, as torch's softmax: among -inf alone (the max passes over
     * it: the row once read as fully masked, zeros), and among finite values */
    for (int d = 0; d < N_FLOATS; d++) {
        const int64_t sh[2] = {3, 33};
        struct tr_tensor x = tr_test_tensor(FLOATS[d], 2, sh), y = tr_test_tensor(FLOATS[d], 2, sh);
        tr_test_randn(&x, 650, 1.0);
        for (int64_t j = 0; j < 33; j++) tr_tensor_set_f64(&x, j, j == 5 ? NAN : -INFINITY);
        tr_tensor_set_f64(&x, 33 + 20, NAN);
        tr_test_poison(&y);
        CHECK_OK(tr_k_softmax(K, &x, &y, &err));
        for (int64_t j = 0; j < 66; j++)
            if (!isnan(tr_tensor_get_f64(&y, j))) fail_msg("softmax %s: element %lld of a row with a NaN is %g",
                                                          tr_dtype_name(FLOATS[d]), (long long)j, tr_tensor_get_f64(&y, j));
        for (int64_t j = 66; j < 99; j++) assert_false(isnan(tr_tensor_get_f64(&y, j)));
        tfree(&x, &y, NULL);
    }
}

static void test_layer_norm(void **state) {
    (void)state;
    const int64_t shapes[][3] = {{3, 17}, {2, 5, 768}, {1, 1}, {70, 129}};
    const int nds[] = {2, 3, 2, 2};
    struct tr_error err = {0};
    for (int d = 0; d < N_FLOATS; d++)
        for (int s = 0; s < 4; s++)
            for (int affine = 0; affine < 2; affine++) {
                struct tr_tensor x = tr_test_tensor(FLOATS[d], nds[s], shapes[s]), y = tr_test_tensor(FLOATS[d], nds[s], shapes[s]);
                int64_t D = shapes[s][nds[s] - 1], R = tr_tensor_numel(&x) / D;
                struct tr_tensor g = tr_test_tensor(FLOATS[d], 1, &D), b = tr_test_tensor(FLOATS[d], 1, &D);
                tr_test_randn(&x, 700 + s, 2.0);
                for (int64_t i = 0; i < tr_tensor_numel(&x); i++) /* an offset, so the mean matters */
                    tr_tensor_set_f64(&x, i, tr_tensor_get_f64(&x, i) + 3.0);
                tr_test_randn(&g, 710 + s, 1.0);
                tr_test_randn(&b, 720 + s, 1.0);
                tr_test_poison(&y);
                float eps = 1e-5f;
                if (affine) {
                    struct tr_attrs at = {.floats = {eps}};
                    CHECK_OK(run_op(TR_OP_LAYER_NORM, &at, 3, (struct tr_tensor[]){x, g, b}, &y, &err));
                } else {
                    CHECK_OK(tr_k_layer_norm(K, &x, NULL, NULL, eps, &y, &err));
                }
                double *X = tr_test_to_f64(&x), *G = tr_test_to_f64(&g), *B = tr_test_to_f64(&b);
                tr_ref_layer_norm(X, affine ? G : NULL, affine ? B : NULL, R, D, eps, X);
                char what[64];
                snprintf(what, sizeof what, "layer_norm %s shape %d affine %d", tr_dtype_name(FLOATS[d]), s, affine);
                if (D > 1) check_close(what, &y, X); /* D = 1 normalises to exact zeros */
                else assert_true(tr_tensor_get_f64(&y, 0) == (affine ? B[0] : 0.0));
                free(X);
                free(G);
                free(B);
                tfree(&x, &y, &g, &b, NULL);
            }
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 2, 6), y = TENSOR(TR_DTYPE_F32, 2, 6), g = TENSOR(TR_DTYPE_F32, 5);
    assert_int_equal(tr_k_layer_norm(K, &x, &g, NULL, 1e-5f, &y, &err), TR_ERR_SHAPE);
    assert_int_equal(run_op(TR_OP_LAYER_NORM, NULL, 1, &x, &y, &err), TR_ERR_INVALID);
    tfree(&x, &y, &g, NULL);
}

/* ------------------------------------------------------------------ embedding */

static void test_embedding(void **state) {
    (void)state;
    struct tr_error err = {0};
    const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_I64};
    for (int d = 0; d < 3; d++)
        for (int idt = 0; idt < 2; idt++) {
            enum tr_dtype it = idt ? TR_DTYPE_I64 : TR_DTYPE_I32;
            struct tr_tensor table = TENSOR(dts[d], 11, 7), ids = TENSOR(it, 2, 5), out = TENSOR(dts[d], 2, 5, 7);
            if (dts[d] == TR_DTYPE_I64) tr_test_randint(&table, 800, 1000);
            else tr_test_randn(&table, 800, 1.0);
            tr_test_randint(&ids, 801 + idt, 11);
            tr_tensor_set_f64(&ids, 0, 10); /* both ends of the table */
            tr_tensor_set_f64(&ids, 1, 0);
            tr_test_poison(&out);
            if (idt) CHECK_OK(tr_k_embedding(K, &table, &ids, &out, &err));
            else CHECK_OK(run_op(TR_OP_EMBEDDING, NULL, 2, (struct tr_tensor[]){table, ids}, &out, &err));
            for (int64_t i = 0; i < 10; i++) {
                int64_t id = (int64_t)tr_tensor_get_f64(&ids, i);
                for (int64_t j = 0; j < 7; j++)
                    assert_true(tr_tensor_get_f64(&out, i * 7 + j) == tr_tensor_get_f64(&table, id * 7 + j));
            }
            /* out of range either way: an error naming the id, not a crash */
            tr_tensor_set_f64(&ids, 3, 11);
            assert_int_equal(tr_k_embedding(K, &table, &ids, &out, &err), TR_ERR_INVALID);
            assert_non_null(strstr(err.msg, "ids[3] = 11"));
            tr_tensor_set_f64(&ids, 3, -1);
            assert_int_equal(run_op(TR_OP_EMBEDDING, NULL, 2, (struct tr_tensor[]){table, ids}, &out, &err), TR_ERR_INVALID);
            tfree(&table, &ids, &out, NULL);
        }
    struct tr_tensor table = TENSOR(TR_DTYPE_F32, 11, 7), ids = TENSOR(TR_DTYPE_F32, 3), out = TENSOR(TR_DTYPE_F32, 3, 6);
    struct tr_tensor ids2 = TENSOR(TR_DTYPE_I32, 3);
    tr_test_randint(&ids2, 1, 11);
    assert_int_equal(tr_k_embedding(K, &table, &ids, &out, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_embedding(K, &table, &ids2, &out, &err), TR_ERR_SHAPE);
    tfree(&table, &ids, &ids2, &out, NULL);
}

static void test_reduce(void **state) {
    (void)state;
    struct tr_error err = {0};
    const int ops[] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
    const int64_t shapes[][3] = {{3, 17, 5}, {2, 3000, 1}, {1, 2, 2500}};
    for (int d = 0; d < N_FLOATS; d++)
        for (int s = 0; s < 3; s++)
            for (int ax = 0; ax < 3; ax++)
                for (int o = 0; o < 3; o++) {
                    int keep = (ax + o) & 1;
                    struct tr_tensor x = tr_test_tensor(FLOATS[d], 3, shapes[s]);
                    int64_t os[3], n = 0;
                    for (int i = 0; i < 3; i++)
                        if (i != ax) os[n++] = shapes[s][i];
                        else if (keep) os[n++] = 1;
                    struct tr_tensor y = tr_test_tensor(FLOATS[d], (int)n, os);
                    tr_test_randn(&x, 1300 + s * 9 + ax, 1.0);
                    for (int64_t i = 0; i < tr_tensor_numel(&x); i++) /* positive: sums do not cancel */
                        tr_tensor_set_f64(&x, i, fabs(tr_tensor_get_f64(&x, i)) + 0.1);
                    tr_test_poison(&y);
                    if ((s + ax + o) % 3 == 0) CHECK_OK(tr_k_reduce(K, ops[o], &x, ax, &y, &err));
                    else CHECK_OK(run_op(ops[o], &(struct tr_attrs){.ints = {ax, keep}}, 1, &x, &y, &err));
                    double *X = tr_test_to_f64(&x), *ref = malloc(sizeof(double) * (size_t)tr_tensor_numel(&y));
                    tr_ref_reduce(ops[o], 3, shapes[s], X, ax, ref);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s shape %d axis %d keep %d", tr_op_name(ops[o]),
                             tr_dtype_name(FLOATS[d]), s, ax, keep);
                    check_close(what, &y, ref);
                    free(X);
                    free(ref);
                    tfree(&x, &y, NULL);
                }
    /* a NaN is the max wherever it stands (torch's amax), along a row and down columns */
    for (int ax = 0; ax < 2; ax++)
        for (int at = 0; at < 3; at++) {
            struct tr_tensor xn = TENSOR(TR_DTYPE_F32, 3, 40), yn = TENSOR(TR_DTYPE_F32, ax ? 3 : 40);
            tr_test_randn(&xn, 1390 + at, 1.0);
            const int64_t col = at == 0 ? 0 : at == 1 ? 17 : 39;
            tr_tensor_set_f64(&xn, 40 + col, NAN); /* row 1 */
            tr_test_poison(&yn);
            CHECK_OK(tr_k_reduce(K, TR_OP_MAX, &xn, ax, &yn, &err));
            for (int64_t i = 0; i < tr_tensor_numel(&yn); i++) {
                const int want_nan = ax ? i == 1 : i == col;
                if ((isnan(tr_tensor_get_f64(&yn, i)) != 0) != want_nan)
                    fail_msg("max axis %d, NaN at [1][%lld]: out[%lld] = %g", ax, (long long)col, (long long)i,
                             tr_tensor_get_f64(&yn, i));
            }
            tfree(&xn, &yn, NULL);
        }
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 3, 4), y = TENSOR(TR_DTYPE_F32, 4);
    assert_int_equal(tr_k_reduce(K, TR_OP_SUM, &x, 1, &y, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_reduce(K, TR_OP_SUM, &x, 2, &y, &err), TR_ERR_INVALID);
    assert_int_equal(run_op(TR_OP_SUM, &(struct tr_attrs){.ints = {0, 1}}, 1, &x, &y, &err), TR_ERR_SHAPE);
    tfree(&x, &y, NULL);
}

/* ------------------------------------------------------------------ cast */

static void test_cast(void **state) {
    (void)state;
    struct tr_error err = {0};
    const int64_t n = 3001; /* more than one block, and odd */
    for (int from = 0; from < TR_DTYPE_COUNT; from++)
        for (int to = 0; to < TR_DTYPE_COUNT; to++) {
            struct tr_tensor x = TENSOR((enum tr_dtype)from, n), y = TENSOR((enum tr_dtype)to, n);
            if (tr_dtype_is_float((enum tr_dtype)from)) tr_test_randn(&x, 1400 + from, 100.0);
            else {
                tr_test_randint(&x, 1400 + from, 2000);
                for (int64_t i = 0; i < n; i++) tr_tensor_set_f64(&x, i, tr_tensor_get_f64(&x, i) - 1000);
            }
            tr_test_poison(&y);
            if ((from + to) & 1) CHECK_OK(tr_k_cast(K, &x, &y, &err));
            else CHECK_OK(run_op(TR_OP_CAST, &(struct tr_attrs){.ints = {to}}, 1, &x, &y, &err));
            double *X = tr_test_to_f64(&x);
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", tr_dtype_name((enum tr_dtype)from), tr_dtype_name((enum tr_dtype)to));
            if (tr_dtype_is_float((enum tr_dtype)to)) {
                /* within half a unit of the target's precision */
                double tol = to == TR_DTYPE_F64 ? 0 : to == TR_DTYPE_F32 ? 6e-8 : to == TR_DTYPE_BF16 ? 3.91e-3 : 4.9e-4;
                for (int64_t i = 0; i < n; i++) {
                    double v = tr_tensor_get_f64(&y, i);
                    if (!(fabs(v - X[i]) <= tol * fabs(X[i]))) fail_msg("%s: %.17g became %.17g", what, X[i], v);
                }
            } else {
                for (int64_t i = 0; i < n; i++)
                    if (tr_tensor_get_f64(&y, i) != tr_ref_cast(X[i], (enum tr_dtype)to))
                        fail_msg("%s: %.17g became %.17g", what, X[i], tr_tensor_get_f64(&y, i));
            }
            free(X);
            tfree(&x, &y, NULL);
        }
    /* round to nearest even, including from f64 where rounding twice would be wrong */
    struct tr_tensor f = TENSOR(TR_DTYPE_F32, 3), d = TENSOR(TR_DTYPE_F64, 3), h = TENSOR(TR_DTYPE_BF16, 3);
    float fv[3] = {1.00390625f, 1.01171875f, -3.0f};   /* 1+2^-8 (tie, down), 1+3·2^-8 (tie, up), exact */
    double dv[3] = {1.00390625 + 0x1p-40, 1.00390625, NAN}; /* just above a tie, the tie, NaN */
    memcpy(f.data, fv, sizeof fv);
    memcpy(d.data, dv, sizeof dv);
    CHECK_OK(tr_k_cast(K, &f, &h, &err));
    const uint16_t *hb = h.data;
    assert_int_equal(hb[0], 0x3f80);
    assert_int_equal(hb[1], 0x3f82);
    assert_int_equal(hb[2], 0xc040);
    CHECK_OK(tr_k_cast(K, &d, &h, &err));
    assert_int_equal(hb[0], 0x3f81);
    assert_int_equal(hb[1], 0x3f80);
    assert_true(isnan(tr_bf16_to_f32(hb[2])));
    struct tr_tensor i32 = TENSOR(TR_DTYPE_I32, 3);
    double big[3] = {1e20, -2.9, NAN};
    memcpy(d.data, big, sizeof big);
    CHECK_OK(tr_k_cast(K, &d, &i32, &err));
    const int32_t *iv = i32.data;
    assert_true(iv[0] == INT32_MAX && iv[1] == -2 && iv[2] == 0);
    struct tr_tensor wrong = TENSOR(TR_DTYPE_F32, 4);
    assert_int_equal(tr_k_cast(K, &d, &wrong, &err), TR_ERR_SHAPE);
    assert_int_equal(run_op(TR_OP_CAST, &(struct tr_attrs){.ints = {TR_DTYPE_BF16}}, 1, &d, &i32, &err), TR_ERR_SHAPE);
    tfree(&f, &d, &h, &i32, &wrong, NULL);
}

/* ------------------------------------------------------------------ attention */

struct attn_case {
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    int causal, window;
    int mask_kind; /* 0 none, 1 padding (B,1,1,Tk) f32, 2 full (1,H,Tq,Tk) in q's dtype, 3 (Tq,Tk), 4 fully masked row */
    float scale;
};

/* The oracle over the case's tensors. */
static double *ref_attention(const struct attn_case *c, const struct tr_tensor *q, const struct tr_tensor *k,
                             const struct tr_tensor *v, const struct tr_tensor *mask) {
    double *Q = tr_test_to_f64(q), *Kd = tr_test_to_f64(k), *V = tr_test_to_f64(v), *Mk = mask ? tr_test_to_f64(mask) : NULL;
    double *out = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Tq * c->Dv));
    /* scale 0 means 1/sqrt(D) to the op and to the direct kernel alike */
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)c->D);
    struct tr_ref_attn ra = {c->B, c->H, c->Hk, c->Tq, c->Tk, c->D, c->Dv, scale, c->causal, c->window,
                             mask ? view(mask, Mk) : (struct tr_ref_view){0, NULL, NULL}, NULL, NULL, 0, 0};
    tr_ref_attention(&ra, Q, Kd, V, out);
    free(Q);
    free(Kd);
    free(V);
    free(Mk);
    return out;
}

static void attn_check(enum tr_dtype dt, const struct attn_case *c, int via_run, uint64_t seed) {
    struct tr_tensor q = TENSOR(dt, c->B, c->H, c->Tq, c->D), k = TENSOR(dt, c->B, c->Hk, c->Tk, c->D);
    struct tr_tensor v = TENSOR(dt, c->B, c->Hk, c->Tk, c->Dv), o = TENSOR(dt, c->B, c->H, c->Tq, c->Dv);
    struct tr_tensor mask = {0};
    tr_test_randn(&q, seed, 1.0);
    tr_test_randn(&k, seed + 1, 1.0);
    tr_test_randn(&v, seed + 2, 1.0);
    if (c->mask_kind == 1) { /* padding: batch b hides its last b*3 keys */
        mask = TENSOR(TR_DTYPE_F32, c->B, 1, 1, c->Tk);
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t j = 0; j < c->Tk; j++) tr_tensor_set_f64(&mask, b * c->Tk + j, j >= c->Tk - b * 3 ? -INFINITY : 0.0);
    } else if (c->mask_kind == 2) {
        mask = TENSOR(dt, 1, c->H, c->Tq, c->Tk);
        tr_test_randn(&mask, seed + 3, 2.0);
    } else if (c->mask_kind == 3) {
        mask = TENSOR(TR_DTYPE_F32, c->Tq, c->Tk);
        tr_test_randn(&mask, seed + 3, 1.0);
        for (int64_t j = 0; j < c->Tk; j += 3) tr_tensor_set_f64(&mask, j, -1e9); /* row 0 partly hidden */
    } else if (c->mask_kind == 4) { /* row 2 of batch 0 sees no key at all */
        mask = TENSOR(TR_DTYPE_F32, c->B, 1, c->Tq, c->Tk);
        tr_test_randn(&mask, seed + 3, 1.0);
        for (int64_t j = 0; j < c->Tk; j++) tr_tensor_set_f64(&mask, 2 * c->Tk + j, -INFINITY);
    }
    const struct tr_tensor *mp = c->mask_kind ? &mask : NULL;
    tr_test_poison(&o);
    struct tr_error err = {0};
    int st;
    if (via_run) {
        struct tr_attrs at = {.floats = {c->scale}, .ints = {c->causal, c->window}};
        struct tr_tensor in[4] = {q, k, v, mask};
        st = run_op(TR_OP_ATTENTION, &at, mp ? 4 : 3, in, &o, &err);
    } else {
        st = tr_k_attention(K, &q, &k, &v, mp, c->scale, c->causal, c->window, &o, &err);
    }
    char what[200];
    snprintf(what, sizeof what, "attention %s B%lld H%lld Hk%lld Tq%lld Tk%lld D%lld Dv%lld causal %d window %d mask %d",
             tr_dtype_name(dt), (long long)c->B, (long long)c->H, (long long)c->Hk, (long long)c->Tq, (long long)c->Tk,
             (long long)c->D, (long long)c->Dv, c->causal, c->window, c->mask_kind);
    if (st != TR_OK) fail_msg("%s: status %d: %s", what, st, err.msg);
    double *ref = ref_attention(c, &q, &k, &v, mp);
    check_close(what, &o, ref);
    /* rows that see nothing are exact zeros */
    int64_t n = tr_tensor_numel(&o);
    for (int64_t i = 0; i < n; i++)
        if (ref[i] == 0.0 && tr_tensor_get_f64(&o, i) != 0.0) fail_msg("%s: element %lld should be 0", what, (long long)i);
    free(ref);
    tfree(&q, &k, &v, &o, NULL);
    if (c->mask_kind) tr_test_tensor_free(&mask);
}

static void test_attention(void **state) {
    (void)state;
    const struct attn_case cases[] = {
        {2, 3, 3, 17, 17, 16, 12, 0, 0, 0, 0.25f},     /* plain, Dv != D */
        {2, 2, 2, 40, 40, 8, 8, 1, 0, 0, 0.35f},       /* causal, two query blocks */
        {1, 2, 2, 5, 70, 8, 8, 1, 0, 0, 0.35f},        /* Tq < Tk, causal aligned at the end */
        {1, 2, 2, 5, 70, 8, 8, 0, 0, 0, 0.35f},        /* Tq < Tk, two key blocks */
        {1, 2, 2, 70, 70, 8, 8, 0, 7, 0, 0.35f},       /* sliding window */
        {1, 1, 1, 9, 140, 4, 4, 0, 30, 0, 0.5f},       /* window with Tq < Tk, across key blocks */
        {2, 4, 2, 9, 13, 8, 8, 0, 0, 0, 0.35f},        /* grouped-query heads */
        {1, 6, 1, 9, 13, 8, 8, 1, 0, 0, 0.35f},        /* multi-query, causal */
        {3, 2, 2, 11, 11, 8, 8, 0, 0, 1, 0.35f},       /* padding mask (-inf) */
        {1, 3, 3, 6, 33, 8, 8, 0, 0, 2, 0.35f},        /* full mask in q's dtype */
        {2, 2, 1, 6, 65, 8, 8, 0, 0, 3, 0.35f},        /* 2-D mask, -1e9 entries */
        {2, 2, 2, 7, 7, 8, 8, 0, 0, 4, 0.35f},         /* a fully masked row */
        {1, 2, 2, 6, 4, 8, 8, 1, 0, 0, 0.35f},         /* Tq > Tk causal: first rows see nothing */
        {1, 2, 2, 130, 130, 64, 64, 1, 0, 1, 0.125f},  /* BERT-like head size, blocks of both */
        {1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1.0f},
        {2, 2, 2, 9, 9, 16, 16, 0, 0, 0, 0.0f},        /* scale 0: 1/sqrt(D) */
        {2, 2, 2, 9, 9, 16, 16, 1, 0, 0, 0.0f},        /* the same on the other path */
    };
    for (int d = 0; d < N_FLOATS; d++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            attn_check(FLOATS[d], &cases[c], (int)((c + d) & 1), 1500 + c);
}

static void test_attention_errors(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor q = TENSOR(TR_DTYPE_F32, 1, 3, 4, 8), k = TENSOR(TR_DTYPE_F32, 1, 2, 5, 8);
    struct tr_tensor v = TENSOR(TR_DTYPE_F32, 1, 2, 5, 8), o = TENSOR(TR_DTYPE_F32, 1, 3, 4, 8);
    tr_test_randn(&q, 1, 1.0);
    tr_test_randn(&k, 2, 1.0);
    tr_test_randn(&v, 3, 1.0);
    assert_int_equal(tr_k_attention(K, &q, &k, &v, NULL, 1.0f, 0, 0, &o, &err), TR_ERR_SHAPE); /* 3 heads, 2 kv */
    assert_non_null(strstr(err.msg, "multiple of Hk"));
    struct tr_tensor k1 = TENSOR(TR_DTYPE_F32, 1, 1, 5, 8), v1 = TENSOR(TR_DTYPE_F32, 1, 1, 5, 8);
    tr_test_randn(&k1, 2, 1.0);
    tr_test_randn(&v1, 3, 1.0);
    struct tr_tensor mask = TENSOR(TR_DTYPE_F32, 1, 3, 4, 4);
    assert_int_equal(tr_k_attention(K, &q, &k1, &v1, &mask, 1.0f, 0, 0, &o, &err), TR_ERR_SHAPE);
    struct tr_tensor o_bad = TENSOR(TR_DTYPE_F32, 1, 3, 4, 7);
    assert_int_equal(tr_k_attention(K, &q, &k1, &v1, NULL, 1.0f, 0, 0, &o_bad, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_attention(K, &q, &k1, &v1, NULL, 1.0f, 0, -1, &o, &err), TR_ERR_INVALID);
    assert_int_equal(run_op(TR_OP_ATTENTION, NULL, 2, (struct tr_tensor[]){q, k1}, &o, &err), TR_ERR_INVALID);
    /* scale 0 through tr_kernels_run means 1/sqrt(D) */
    tr_test_poison(&o);
    CHECK_OK(run_op(TR_OP_ATTENTION, NULL, 3, (struct tr_tensor[]){q, k1, v1}, &o, &err));
    struct attn_case c = {1, 3, 1, 4, 5, 8, 8, 0, 0, 0, 1.0f / sqrtf(8.0f)};
    double *ref = ref_attention(&c, &q, &k1, &v1, NULL);
    check_close("attention default scale", &o, ref);
    free(ref);
    struct tr_tensor *all[] = {&q, &k, &v, &o, &k1, &v1, &mask, &o_bad};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_tensor_free(all[i]);
}

/* ------------------------------------------------------------------ dispatcher */

static void test_run_rejects(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 4), y = TENSOR(TR_DTYPE_F32, 4);
    tr_test_randn(&x, 1, 1.0);
    assert_int_equal(tr_kernels_run(K, TR_OP_INPUT, NULL, 0, NULL, &y, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "not runnable"));
    assert_int_equal(tr_kernels_run(K, TR_OP_PARAM, NULL, 0, NULL, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_CONST, NULL, 0, NULL, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_COUNT, NULL, 1, &x, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, -1, NULL, 1, &x, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 2, (struct tr_tensor[]){x, x}, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 1, &x, NULL, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 1, NULL, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(NULL, TR_OP_RELU, NULL, 1, &x, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_SCALE, NULL, 1, &x, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_run(K, TR_OP_GELU, &(struct tr_attrs){.ints = {5}}, 1, &x, &y, &err), TR_ERR_INVALID);
    /* a tensor on another device, a non-contiguous one, one with no data */
    struct tr_tensor dev = x, strided = x, empty = x;
    dev.device = TR_DEVICE_CUDA;
    strided.strides[0] = 2;
    empty.data = NULL;
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 1, &dev, &y, &err), TR_ERR_DEVICE);
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 1, &strided, &y, &err), TR_ERR_UNSUPPORTED);
    assert_int_equal(tr_kernels_run(K, TR_OP_RELU, NULL, 1, &empty, &y, &err), TR_ERR_INVALID);
    /* the calls are counted */
    tr_kernels_reset_stats(K);
    CHECK_OK(tr_kernels_run(K, TR_OP_RELU, NULL, 1, &x, &y, &err));
    CHECK_OK(tr_kernels_run(K, TR_OP_NEG, NULL, 1, &x, &y, &err));
    struct tr_kernels_stats st;
    tr_kernels_get_stats(K, &st);
    assert_int_equal(st.calls, 2);
    assert_int_equal(st.gemm_calls, 0);
    tfree(&x, &y, NULL);
}

/* What tr_kernels_supports promises, tr_kernels_run does: each claimed (op, dtype) pair
 * that is refused here would be a backend's supports_op lying. */
static void test_supports(void **state) {
    assert_true(tr_kernels_supports(TR_OP_MATMUL, TR_DTYPE_F32));
    assert_true(tr_kernels_supports(TR_OP_SOFTMAX, TR_DTYPE_BF16));
    assert_true(tr_kernels_supports(TR_OP_RESHAPE, TR_DTYPE_I64));
    assert_true(tr_kernels_supports(TR_OP_CAST, TR_DTYPE_I32));
    assert_false(tr_kernels_supports(TR_OP_MATMUL, TR_DTYPE_I32));
    assert_false(tr_kernels_supports(TR_OP_GELU, TR_DTYPE_I64));
    assert_true(tr_kernels_supports(TR_OP_UPDATE_SLICE, TR_DTYPE_F64));
    assert_true(tr_kernels_supports(TR_OP_UPDATE_SLICE, TR_DTYPE_I32));
    assert_false(tr_kernels_supports(TR_OP_UPDATE_SLICE, TR_DTYPE_I64));
    assert_false(tr_kernels_supports(-1, TR_DTYPE_F32));
    assert_false(tr_kernels_supports(TR_OP_COUNT, TR_DTYPE_F32));
    assert_false(tr_kernels_supports(TR_OP_RESHAPE, TR_DTYPE_COUNT));
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_context, test_matmul_2d, test_matmul_batched,
             test_matmul_epilogue, test_matmul_cache_and_errors, test_unary, test_binary, test_softmax,
             test_layer_norm, test_embedding, test_reduce, test_cast, test_attention, test_attention_errors,
             test_run_rejects, test_supports)
