/* Attention's default scale, resolved once (ops.h, tr_attention_default_scale): scale 0
 * means 1/sqrt(D) computed in double and rounded once to float. Rounding twice
 * (1.0f / sqrtf((float)D)) differs in the last bit for 242 of the D in 1..1024, 96 and
 * 112 among them, so a path that computes it its own way gives other numbers than the
 * rest. Checked here: the helper against the double rounding for every D in 1..1024; the
 * graph storing the resolved scale (ATTENTION, ATTENTION_GRAD, no attrs at all) and
 * MATMUL's alpha 0 as 1; the kernels' direct calls (tr_kernels_run, the bound fused
 * backward) giving 0 the same bits as the explicit scale; and every backend (torch,
 * torch:reduce-overhead, tf, jax on cpu) running an attention graph with its gradients at
 * D = 96 and 112 with scale 0 bit for bit as the same graph with the explicit scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "trident/graph.h"
#include "trident/kernels.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static void test_helper_rounds_once(void **state) {
    (void)state;
    int differ = 0;
    for (int64_t d = 1; d <= 1024; d++) {
        float want = (float)(1.0 / sqrt((double)d));
        if (bits(tr_attention_default_scale(d)) != bits(want))
            fail_msg("D=%lld: tr_attention_default_scale %a, (float)(1/sqrt((double)D)) %a", (long long)d,
                     (double)tr_attention_default_scale(d), (double)want);
        if (bits(tr_attention_scale(0.0f, d)) != bits(want)) fail_msg("D=%lld: tr_attention_scale(0, D)", (long long)d);
        differ += bits(1.0f / sqrtf((float)d)) != bits(want);
    }
    /* The float rounding really is another value, so the checks below can tell them apart. */
    assert_int_equal(differ, 242);
    assert_true(bits(1.0f / sqrtf(96.0f)) != bits(tr_attention_default_scale(96)));
    assert_true(bits(1.0f / sqrtf(112.0f)) != bits(tr_attention_default_scale(112)));
    /* An explicit scale, and 0 with no head dimension to take it from, stay as they are. */
    assert_true(tr_attention_scale(0.3f, 96) == 0.3f);
    assert_true(tr_attention_scale(0.0f, 0) == 0.0f);
    assert_true(tr_matmul_alpha(0.0f) == 1.0f && tr_matmul_alpha(0.5f) == 0.5f && tr_matmul_alpha(-2.0f) == -2.0f);
}

enum { B = 1, H = 2, T = 5 };

/* Inputs q, k, v, dy; outputs the attention and dq, dk, dv (ATTENTION_GRAD nodes, which
 * the backends group into the fused backward). */
static struct tr_graph *attention_graph(int64_t d, float scale) {
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
    const int64_t sh[4] = {B, H, T, d};
    int q = tr_input(g, "q", TR_DTYPE_F32, 4, sh), k = tr_input(g, "k", TR_DTYPE_F32, 4, sh);
    int v = tr_input(g, "v", TR_DTYPE_F32, 4, sh), dy = tr_input(g, "dy", TR_DTYPE_F32, 4, sh);
    int y = tr_attention(g, q, k, v, -1, scale, 1, 0);
    tr_graph_set_output(g, y, "y");
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int which = 0; which < 3; which++) {
        struct tr_attrs a = {.ints = {1, 0, which}, .floats = {scale}, .n_ints = 3};
        int gr = tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, 4, (const int[]){q, k, v, dy}, &a);
        assert_true(bits(tr_node_attrs(g, gr)->floats[0]) == bits(tr_attention_default_scale(d)));
        tr_graph_set_output(g, gr, names[which]);
    }
    if (tr_graph_status(g, &e)) fail_msg("D=%lld: %s", (long long)d, e.msg);
    assert_true(bits(tr_node_attrs(g, y)->floats[0]) == bits(tr_attention_default_scale(d)));
    return g;
}

static void test_graph_stores_resolved(void **state) {
    (void)state;
    for (int64_t d = 1; d <= 1024; d += 37) {
        struct tr_graph *g = attention_graph(d, 0.0f);
        tr_graph_free(g);
    }
    struct tr_graph *g = NULL;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int q = tr_input(g, "q", TR_DTYPE_F32, 4, (int64_t[]){1, 2, 3, 112});
    int a = tr_graph_add_node(g, TR_OP_ATTENTION, 3, (const int[]){q, q, q}, NULL);
    assert_true(bits(tr_node_attrs(g, a)->floats[0]) == bits(tr_attention_default_scale(112)));
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, (int64_t[]){3, 4});
    struct tr_attrs unset = {0};
    int m = tr_graph_add_node(g, TR_OP_MATMUL, 2, (const int[]){x, x}, &(struct tr_attrs){.ints = {0, 1}});
    int m2 = tr_graph_add_node(g, TR_OP_MATMUL, 2, (const int[]){x, x}, &(struct tr_attrs){.ints = {0, 1},
                                                                                      .floats = {0.5f}});
    int s = tr_graph_add_node(g, TR_OP_SCALE, 1, &x, &unset); /* SCALE's 0 is a real 0 */
    assert_true(tr_node_attrs(g, m)->floats[0] == 1.0f);
    assert_true(tr_node_attrs(g, m2)->floats[0] == 0.5f);
    assert_true(tr_node_attrs(g, s)->floats[0] == 0.0f);
    assert_int_equal(tr_graph_status(g, &e), TR_OK);
    tr_graph_free(g);
}

static void fill(struct tr_tensor *t, int64_t d) {
    const int64_t sh[4] = {B, H, T, d};
    for (int i = 0; i < 4; i++) {
        t[i] = tr_test_tensor(TR_DTYPE_F32, 4, sh);
        tr_test_randn(&t[i], 100 + (uint64_t)(d * 4 + i), 1.0);
    }
}

static void assert_same_bits(const char *what, int64_t d, const struct tr_tensor *a, const struct tr_tensor *b) {
    if (memcmp(a->data, b->data, tr_tensor_nbytes(a)) != 0)
        fail_msg("%s D=%lld: scale 0 and the explicit 1/sqrt(D) give different bits", what, (long long)d);
}

static void test_kernels_direct(void **state) {
    (void)state;
    static const int64_t dims[] = {96, 112};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        int64_t d = dims[i];
        struct tr_tensor in[4], o[2][4];
        fill(in, d);
        for (int pass = 0; pass < 2; pass++) {
            float scale = pass ? tr_attention_default_scale(d) : 0.0f;
            for (int j = 0; j < 4; j++) o[pass][j] = tr_test_tensor(TR_DTYPE_F32, 4, in[0].shape);
            struct tr_attrs a = {.ints = {1, 0}, .floats = {scale}, .n_ints = 2};
            tr_test_run_op(TR_OP_ATTENTION, &a, 3, in, &o[pass][0]);
            a.ints[2] = 1, a.n_ints = 3;
            tr_test_run_op(TR_OP_ATTENTION_GRAD, &a, 4, in, &o[pass][1]); /* dk */
            struct tr_kernel_call c;
            struct tr_error e = {0};
            for (int j = 2; j < 4; j++) tr_test_poison(&o[pass][j]);
            if (tr_kernels_bind_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], NULL, NULL, NULL, scale, 1, 0,
                                                   &o[pass][2], NULL, &o[pass][3], &c, &e) ||
                tr_kernels_call(tr_test_k, &c, &e))
                fail_msg("attention_backward D=%lld: %s", (long long)d, e.msg);
            tr_kernels_unbind(tr_test_k, &c);
        }
        static const char *const what[4] = {"attention", "attention_grad dk", "bound backward dq",
                                            "bound backward dv"};
        for (int j = 0; j < 4; j++) assert_same_bits(what[j], d, &o[0][j], &o[1][j]);
        for (int j = 0; j < 4; j++) {
            tr_test_tensor_free(&in[j]);
            tr_test_tensor_free(&o[0][j]);
            tr_test_tensor_free(&o[1][j]);
        }
    }
}

static void test_every_backend(void **state) {
    (void)state;
    static const int64_t dims[] = {96, 112};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        int64_t d = dims[i];
        struct tr_tensor in[4];
        fill(in, d);
        struct tr_graph *g0 = attention_graph(d, 0.0f), *g1 = attention_graph(d, tr_attention_default_scale(d));
        for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
            struct tr_tensor o0[4], o1[4];
            tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g0, in, 2, o0, NULL);
            tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g1, in, 2, o1, NULL);
            for (int j = 0; j < 4; j++) {
                char what[64];
                snprintf(what, sizeof what, "%s %s", tr_test_backends[b].label, tr_graph_output_name(g0, j));
                assert_same_bits(what, d, &o0[j], &o1[j]);
                tr_test_tensor_free(&o0[j]);
                tr_test_tensor_free(&o1[j]);
            }
        }
        tr_graph_free(g0);
        tr_graph_free(g1);
        tr_test_tensors_free(4, in);
    }
}

TR_TEST_MAIN(tr_test_kernels_dir_setup, tr_test_kernels_dir_teardown, test_helper_rounds_once,
             test_graph_stores_resolved, test_kernels_direct, test_every_backend)
