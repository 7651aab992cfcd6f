/* The graph builder: shape and dtype inference for every op, error messages, sticky
 * errors, names and scopes, find, bind_param, the dump and the FLOP count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/graph.h"

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

static int in_f32(struct tr_graph *g, const char *name, int nd, const int64_t *sh) {
    return tr_input(g, name, TR_DTYPE_F32, nd, sh);
}

/* The node exists and has this dtype and shape. */
#define assert_node(g, id, dt, ...)                                                                  \
    do {                                                                                             \
        const int64_t want_[] = {__VA_ARGS__};                                                       \
        int nd_ = (int)(sizeof want_ / sizeof want_[0]), id_ = (id); /* id may be a builder call */  \
        assert_true(id_ >= 0);                                                                       \
        assert_int_equal(tr_node_dtype((g), id_), (dt));                                             \
        assert_int_equal(tr_node_ndim((g), id_), nd_);                                               \
        for (int i_ = 0; i_ < nd_; i_++) assert_int_equal(tr_node_shape((g), id_)[i_], want_[i_]);   \
    } while (0)

/* The graph failed, and its first message contains every given substring. */
static void expect_error(struct tr_graph *g, int id, const char *const *subs) {
    struct tr_error err = {0};
    assert_int_equal(id, -1);
    assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
    assert_int_not_equal(err.status, TR_OK);
    for (; *subs; subs++)
        if (!strstr(err.msg, *subs)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, *subs);
}
#define EXPECT_ERROR(g, id, ...) expect_error((g), (id), (const char *const[]){__VA_ARGS__, NULL})

static void test_leaves(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, S(2, 7));
    int w = tr_param(g, "w", TR_DTYPE_BF16, 2, S(3, 4), 0.5f, 0.02f);
    float data[6] = {1, 2, 3, 4, 5, 6};
    int c = tr_const(g, "c", TR_DTYPE_F32, 2, S(2, 3), data);
    int s = tr_const_scalar(g, TR_DTYPE_BF16, 0.125);
    int mask = tr_input(g, "mask", TR_DTYPE_F32, 0, NULL);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    assert_node(g, ids, TR_DTYPE_I32, 2, 7);
    assert_node(g, w, TR_DTYPE_BF16, 3, 4);
    assert_node(g, c, TR_DTYPE_F32, 2, 3);
    assert_int_equal(tr_node_ndim(g, s), 0);
    assert_int_equal(tr_node_dtype(g, s), TR_DTYPE_BF16);
    assert_int_equal(tr_node_op(g, s), TR_OP_CONST);
    assert_int_equal(tr_node_n_inputs(g, w), 0);

    /* feed order, param list */
    assert_int_equal(tr_graph_n_inputs(g), 2);
    assert_int_equal(tr_graph_input(g, 0), ids);
    assert_int_equal(tr_graph_input(g, 1), mask);
    assert_int_equal(tr_graph_input(g, 2), -1);
    assert_int_equal(tr_graph_n_params(g), 1);
    assert_int_equal(tr_graph_param(g, 0), w);
    assert_int_equal(tr_graph_n_nodes(g), 5);

    /* param init in floats[0..1]; unbound params have no data */
    assert_true(tr_node_attrs(g, w)->floats[0] == 0.5f);
    assert_true(tr_node_attrs(g, w)->floats[1] == 0.02f);
    assert_null(tr_node_data(g, w));
    assert_null(tr_node_data(g, ids));

    /* const data is a copy owned by the graph */
    const float *cd = tr_node_data(g, c);
    assert_non_null(cd);
    assert_ptr_not_equal(cd, data);
    data[0] = 100;
    assert_true(cd[0] == 1.0f && cd[5] == 6.0f);
    struct tr_tensor t = tr_node_tensor(g, s);
    t.data = (void *)tr_node_data(g, s);
    assert_true(tr_tensor_get_f64(&t, 0) == 0.125);

    struct tr_tensor tt = tr_node_tensor(g, w);
    assert_null(tt.data);
    assert_int_equal(tt.ndim, 2);
    assert_int_equal(tt.shape[1], 4);
    assert_int_equal(tt.strides[0], 4);

    /* accessors refuse bad ids without crashing */
    assert_int_equal(tr_node_op(g, 99), -1);
    assert_int_equal(tr_node_op(g, -1), -1);
    assert_null(tr_node_shape(g, 5));
    assert_null(tr_node_name(g, -3));
    assert_int_equal(tr_node_input(g, w, 0), -1);
    tr_graph_free(g);
}

static void test_leaf_errors(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_input(g, "x", TR_DTYPE_F32, 2, S(2, -3)), "node 0 input 'x'", "[2,-3]", "negative");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_input(g, "x", TR_DTYPE_F32, 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1)), "node 0 input 'x'",
                 "9 dimensions");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_param(g, "w", (enum tr_dtype)42, 1, S(3), 0, 1), "node 0 param 'w'", "dtype 42");
    tr_graph_free(g);
    /* TR_MAX_TENSOR_BYTES (2^48) on leaves and on what a shape rule makes: no byte count or
     * stride can wrap (a config.json's vocab 2^30 x width 2^32 once made a 64-byte buffer) */
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_param(g, "emb", TR_DTYPE_F32, 2, S(1073741824, 4294967296), 0, 1), "node 0 param 'emb'",
                 "f32[1073741824,4294967296] is more than 281474976710656 bytes");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_input(g, "e", TR_DTYPE_F32, 3, S(0, 16777216, 16777216)), "node 0 input 'e'", "more than");
    tr_graph_free(g);
    g = tr_test_graph_new();
    int a = tr_input(g, "a", TR_DTYPE_F32, 2, S(16777216, 1)), b = tr_input(g, "b", TR_DTYPE_F32, 2, S(1, 16777216));
    EXPECT_ERROR(g, tr_matmul(g, a, b, 0, 0), "node 2 matmul", "its output f32[16777216,16777216] is more than");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_param(g, "w", TR_DTYPE_F32, 1, S(3), 0, -1), "node 0 param 'w'", "std");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_const(g, "c", TR_DTYPE_F32, 1, S(3), NULL), "node 0 const 'c'", "no data");
    tr_graph_free(g);
}

static void test_matmul(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = in_f32(g, "x", 3, S(2, 8, 16));
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, S(16, 32), 0, 1);
    int wt = tr_param(g, "wt", TR_DTYPE_F32, 2, S(32, 16), 0, 1);
    int xt = in_f32(g, "xt", 3, S(2, 16, 8));
    assert_node(g, tr_matmul(g, x, w, 0, 0), TR_DTYPE_F32, 2, 8, 32);
    int y = tr_matmul(g, x, wt, 0, 1);
    assert_node(g, y, TR_DTYPE_F32, 2, 8, 32);
    assert_int_equal(tr_node_attrs(g, y)->ints[1], 1);
    assert_true(tr_node_attrs(g, y)->floats[0] == 1.0f);
    assert_node(g, tr_matmul(g, xt, w, 1, 0), TR_DTYPE_F32, 2, 8, 32);
    assert_node(g, tr_matmul(g, xt, wt, 1, 1), TR_DTYPE_F32, 2, 8, 32);
    /* batch axes broadcast both ways, and across different ranks */
    int a = in_f32(g, "a", 4, S(1, 3, 4, 5));
    int b = in_f32(g, "b", 4, S(2, 1, 5, 6));
    assert_node(g, tr_matmul(g, a, b, 0, 0), TR_DTYPE_F32, 2, 3, 4, 6);
    int c = in_f32(g, "c", 2, S(4, 5));
    int d = in_f32(g, "d", 3, S(7, 5, 6));
    assert_node(g, tr_matmul(g, c, d, 0, 0), TR_DTYPE_F32, 7, 4, 6);
    /* bf16 stays bf16 */
    int qa = tr_input(g, "qa", TR_DTYPE_BF16, 2, S(3, 4));
    int qb = tr_param(g, "qb", TR_DTYPE_BF16, 2, S(4, 2), 0, 1);
    assert_node(g, tr_matmul(g, qa, qb, 0, 0), TR_DTYPE_BF16, 3, 2);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    tr_graph_free(g);
}

static void test_matmul_errors(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    assert_int_equal(tr_graph_push_scope(g, "encoder.layer.0.attention.self.query"), TR_OK);
    int x = in_f32(g, "x", 3, S(2, 8, 64));
    int w = tr_param(g, "weight", TR_DTYPE_F32, 2, S(32, 48), 0, 1);
    EXPECT_ERROR(g, tr_matmul(g, x, w, 0, 1), "node 2 matmul 'encoder.layer.0.attention.self.query.matmul_2'",
                 "inner dimensions differ", "a f32[2,8,64] (K=64)", "b f32[32,48]^T (K=48)");
    tr_graph_free(g);

    g = tr_test_graph_new();
    int a = in_f32(g, "a", 3, S(2, 4, 5));
    int b = in_f32(g, "b", 3, S(3, 5, 6));
    EXPECT_ERROR(g, tr_matmul(g, a, b, 0, 0), "node 2 matmul", "batch", "[2,4,5]", "[3,5,6]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    a = in_f32(g, "a", 1, S(5));
    b = in_f32(g, "b", 2, S(5, 6));
    EXPECT_ERROR(g, tr_matmul(g, a, b, 0, 0), "node 2 matmul", "at least 2 dimensions", "a f32[5]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    a = in_f32(g, "a", 2, S(4, 5));
    b = tr_input(g, "b", TR_DTYPE_BF16, 2, S(5, 6));
    EXPECT_ERROR(g, tr_matmul(g, a, b, 0, 0), "node 2 matmul", "dtypes differ", "f32[4,5]", "bf16[5,6]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    a = tr_input(g, "a", TR_DTYPE_I32, 2, S(4, 5));
    b = tr_input(g, "b", TR_DTYPE_I32, 2, S(5, 6));
    EXPECT_ERROR(g, tr_matmul(g, a, b, 0, 0), "node 2 matmul", "i32[4,5]", "float");
    tr_graph_free(g);
}

static void test_binary(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = in_f32(g, "x", 3, S(2, 3, 4));
    int bias = tr_param(g, "bias", TR_DTYPE_F32, 1, S(4), 0, 1);
    int col = in_f32(g, "col", 2, S(3, 1));
    int y = in_f32(g, "y", 3, S(2, 1, 4));
    int one = tr_const_scalar(g, TR_DTYPE_F32, 1.0);
    assert_node(g, tr_add(g, x, bias), TR_DTYPE_F32, 2, 3, 4);
    assert_node(g, tr_sub(g, bias, x), TR_DTYPE_F32, 2, 3, 4);
    assert_node(g, tr_mul(g, y, col), TR_DTYPE_F32, 2, 3, 4);
    assert_node(g, tr_div(g, col, bias), TR_DTYPE_F32, 3, 4);
    assert_node(g, tr_add(g, one, x), TR_DTYPE_F32, 2, 3, 4);
    assert_int_equal(tr_node_ndim(g, tr_mul(g, one, one)), 0);
    int h = tr_input(g, "h", TR_DTYPE_BF16, 2, S(5, 6));
    int hb = tr_const_scalar(g, TR_DTYPE_BF16, 2.0);
    assert_node(g, tr_mul(g, h, hb), TR_DTYPE_BF16, 5, 6);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(2, 3));
    y = in_f32(g, "y", 1, S(4));
    EXPECT_ERROR(g, tr_add(g, x, y), "node 2 add 'add_2'", "cannot broadcast", "a f32[2,3]", "b f32[4]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(2, 3));
    y = tr_input(g, "y", TR_DTYPE_BF16, 2, S(2, 3));
    EXPECT_ERROR(g, tr_mul(g, x, y), "node 2 mul", "dtypes differ", "f32[2,3]", "bf16[2,3]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = tr_input(g, "x", TR_DTYPE_I64, 1, S(3));
    EXPECT_ERROR(g, tr_div(g, x, x), "node 1 div", "i64[3]", "float");
    tr_graph_free(g);
}

static void test_unary(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_BF16, 3, S(2, 3, 4));
    static const enum tr_op ops[] = {TR_OP_TANH, TR_OP_RELU, TR_OP_SILU, TR_OP_SIGMOID,
                                     TR_OP_EXP,  TR_OP_NEG,  TR_OP_SQRT, TR_OP_RSQRT};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        int y = tr_unary(g, ops[i], x);
        assert_node(g, y, TR_DTYPE_BF16, 2, 3, 4);
        assert_int_equal(tr_node_op(g, y), ops[i]);
    }
    int ge = tr_gelu(g, x, 1);
    assert_node(g, ge, TR_DTYPE_BF16, 2, 3, 4);
    assert_int_equal(tr_node_attrs(g, ge)->ints[0], 1);
    int sc = tr_scale(g, x, 2.5f, -1.0f);
    assert_node(g, sc, TR_DTYPE_BF16, 2, 3, 4);
    assert_true(tr_node_attrs(g, sc)->floats[0] == 2.5f && tr_node_attrs(g, sc)->floats[1] == -1.0f);
    assert_node(g, tr_softmax(g, x), TR_DTYPE_BF16, 2, 3, 4);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(3));
    EXPECT_ERROR(g, tr_unary(g, TR_OP_MATMUL, x), "node 1 matmul", "tr_unary");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = tr_input(g, "x", TR_DTYPE_I32, 1, S(3));
    EXPECT_ERROR(g, tr_unary(g, TR_OP_EXP, x), "node 1 exp 'exp_1'", "x is i32[3]", "float");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = tr_const_scalar(g, TR_DTYPE_F32, 3.0);
    EXPECT_ERROR(g, tr_softmax(g, x), "node 1 softmax", "f32[]");
    tr_graph_free(g);
}

static void test_layer_norm(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = in_f32(g, "x", 3, S(2, 5, 8));
    int gm = tr_param(g, "gamma", TR_DTYPE_F32, 1, S(8), 1, 0);
    int bt = tr_param(g, "beta", TR_DTYPE_F32, 1, S(8), 0, 0);
    int y = tr_layer_norm(g, x, gm, bt, 1e-12f);
    assert_node(g, y, TR_DTYPE_F32, 2, 5, 8);
    assert_true(tr_node_attrs(g, y)->floats[0] == 1e-12f);
    int bad = tr_param(g, "bad", TR_DTYPE_F32, 1, S(5), 1, 0);
    EXPECT_ERROR(g, tr_layer_norm(g, x, bad, bt, 1e-5f), "node 5 layer_norm", "gamma is f32[5]", "expected [8]",
                 "x f32[2,5,8]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = tr_input(g, "x", TR_DTYPE_BF16, 2, S(2, 8));
    gm = tr_param(g, "gamma", TR_DTYPE_F32, 1, S(8), 1, 0);
    EXPECT_ERROR(g, tr_layer_norm(g, x, gm, gm, 1e-5f), "node 2 layer_norm", "dtypes differ", "bf16[2,8]", "f32[8]");
    tr_graph_free(g);
}

static void test_embedding(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int tab = tr_param(g, "table", TR_DTYPE_BF16, 2, S(10, 4), 0, 1);
    int ids = tr_input(g, "ids", TR_DTYPE_I32, 2, S(2, 5));
    int ids64 = tr_input(g, "ids64", TR_DTYPE_I64, 1, S(7));
    assert_node(g, tr_embedding(g, tab, ids), TR_DTYPE_BF16, 2, 5, 4);
    assert_node(g, tr_embedding(g, tab, ids64), TR_DTYPE_BF16, 7, 4);
    int fid = in_f32(g, "fid", 1, S(3));
    EXPECT_ERROR(g, tr_embedding(g, tab, fid), "node 6 embedding", "ids f32[3]", "i32 or i64");
    tr_graph_free(g);

    g = tr_test_graph_new();
    tab = tr_param(g, "table", TR_DTYPE_F32, 3, S(10, 4, 2), 0, 1);
    ids = tr_input(g, "ids", TR_DTYPE_I32, 1, S(2));
    EXPECT_ERROR(g, tr_embedding(g, tab, ids), "node 2 embedding", "table f32[10,4,2]", "2-D");
    tr_graph_free(g);
}

static void test_reshape_transpose(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_BF16, 3, S(2, 6, 8));
    int r = tr_reshape(g, x, 4, S(2, -1, 4, 2));
    assert_node(g, r, TR_DTYPE_BF16, 2, 6, 4, 2);
    assert_int_equal(tr_node_attrs(g, r)->ints[1], 6); /* the -1 is stored resolved */
    assert_int_equal(tr_node_attrs(g, r)->n_ints, 4);
    assert_node(g, tr_reshape(g, x, 1, S(-1)), TR_DTYPE_BF16, 96);
    int p = tr_transpose(g, r, 4, (const int[]){0, 2, 1, 3});
    assert_node(g, p, TR_DTYPE_BF16, 2, 4, 6, 2);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    EXPECT_ERROR(g, tr_reshape(g, x, 2, S(5, 20)), "node 4 reshape", "[5,20] has 100 elements", "x bf16[2,6,8] has 96");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(4, 6));
    EXPECT_ERROR(g, tr_reshape(g, x, 3, S(-1, -1, 2)), "node 1 reshape", "more than one -1", "f32[4,6]");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(4, 6));
    EXPECT_ERROR(g, tr_reshape(g, x, 2, S(-1, 5)), "node 1 reshape", "cannot be inferred", "[-1,5]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 3, S(2, 3, 4));
    EXPECT_ERROR(g, tr_transpose(g, x, 3, (const int[]){0, 0, 1}), "node 1 transpose", "[0,0,1]", "permutation",
                 "f32[2,3,4]");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 3, S(2, 3, 4));
    EXPECT_ERROR(g, tr_transpose(g, x, 2, (const int[]){1, 0}), "node 1 transpose", "2 entries", "3 dimensions");
    tr_graph_free(g);
}

static void test_slice(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = in_f32(g, "x", 3, S(2, 10, 4));
    int s = tr_slice(g, x, 1, 2, 9, 3); /* 2, 5, 8 */
    assert_node(g, s, TR_DTYPE_F32, 2, 3, 4);
    s = tr_slice(g, x, -2, -4, -1, 1); /* 6..9 */
    assert_node(g, s, TR_DTYPE_F32, 2, 3, 4);
    const struct tr_attrs *a = tr_node_attrs(g, s);
    assert_int_equal(a->ints[0], 1);
    assert_int_equal(a->ints[1], 6);
    assert_int_equal(a->ints[2], 9);
    assert_int_equal(a->ints[3], 1);
    assert_node(g, tr_slice(g, x, 2, 0, 4, 2), TR_DTYPE_F32, 2, 10, 2);
    assert_node(g, tr_slice(g, x, 0, 1, 1, 1), TR_DTYPE_F32, 0, 10, 4);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    EXPECT_ERROR(g, tr_slice(g, x, 1, 0, 11, 1), "node 5 slice", "start 0 end 11", "f32[2,10,4]", "extent 10");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(2, 10));
    EXPECT_ERROR(g, tr_slice(g, x, 1, 5, 3, 1), "node 1 slice", "start 5 end 3");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(2, 10));
    EXPECT_ERROR(g, tr_slice(g, x, 1, 0, 10, 0), "node 1 slice", "step 0");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 2, S(2, 10));
    EXPECT_ERROR(g, tr_slice(g, x, -3, 0, 1, 1), "node 1 slice", "axis -3", "f32[2,10]");
    tr_graph_free(g);
}

static void test_concat(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int a = in_f32(g, "a", 3, S(2, 3, 4));
    int b = in_f32(g, "b", 3, S(2, 5, 4));
    int c = tr_concat(g, 3, (const int[]){a, b, a}, -2);
    assert_node(g, c, TR_DTYPE_F32, 2, 11, 4);
    assert_int_equal(tr_node_attrs(g, c)->ints[0], 1);
    assert_int_equal(tr_node_n_inputs(g, c), 3);
    assert_int_equal(tr_node_input(g, c, 2), a);
    assert_node(g, tr_concat(g, 1, &a, 0), TR_DTYPE_F32, 2, 3, 4);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    EXPECT_ERROR(g, tr_concat(g, 2, (const int[]){a, b}, 2), "node 4 concat", "f32[2,3,4]", "f32[2,5,4]", "axis 2");
    tr_graph_free(g);

    g = tr_test_graph_new();
    a = in_f32(g, "a", 1, S(3));
    b = tr_input(g, "b", TR_DTYPE_BF16, 1, S(3));
    EXPECT_ERROR(g, tr_concat(g, 2, (const int[]){a, b}, 0), "node 2 concat", "dtypes differ", "bf16[3]");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_concat(g, 0, NULL, 0), "node 0 concat", "0 inputs", "1 to 8");
    tr_graph_free(g);
}

static void test_reduce_cast(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_BF16, 3, S(2, 3, 4));
    int s = tr_reduce(g, TR_OP_SUM, x, -1, 0);
    assert_node(g, s, TR_DTYPE_BF16, 2, 3);
    assert_int_equal(tr_node_attrs(g, s)->ints[0], 2);
    assert_node(g, tr_reduce(g, TR_OP_MEAN, x, 1, 1), TR_DTYPE_BF16, 2, 1, 4);
    assert_node(g, tr_reduce(g, TR_OP_MAX, x, -3, 0), TR_DTYPE_BF16, 3, 4);
    int c = tr_cast(g, x, TR_DTYPE_F32);
    assert_node(g, c, TR_DTYPE_F32, 2, 3, 4);
    int ids = tr_input(g, "ids", TR_DTYPE_I64, 1, S(5));
    assert_node(g, tr_cast(g, ids, TR_DTYPE_I32), TR_DTYPE_I32, 5);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    EXPECT_ERROR(g, tr_reduce(g, TR_OP_SUM, x, 3, 0), "node 7 sum", "axis 3", "bf16[2,3,4]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(4));
    EXPECT_ERROR(g, tr_reduce(g, TR_OP_SOFTMAX, x, 0, 0), "node 1 softmax", "sum, mean or max");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(4));
    EXPECT_ERROR(g, tr_cast(g, x, (enum tr_dtype)17), "node 1 cast", "17", "f32[4]");
    tr_graph_free(g);
}

static void test_attention(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int q = tr_input(g, "q", TR_DTYPE_BF16, 4, S(2, 8, 5, 16));
    int k = tr_input(g, "k", TR_DTYPE_BF16, 4, S(2, 2, 7, 16));
    int v = tr_input(g, "v", TR_DTYPE_BF16, 4, S(2, 2, 7, 12));
    int m = in_f32(g, "mask", 4, S(2, 1, 1, 7));
    int o = tr_attention(g, q, k, v, -1, 0.25f, 1, 0);
    assert_node(g, o, TR_DTYPE_BF16, 2, 8, 5, 12);
    assert_int_equal(tr_node_n_inputs(g, o), 3);
    assert_true(tr_node_attrs(g, o)->floats[0] == 0.25f);
    assert_int_equal(tr_node_attrs(g, o)->ints[0], 1);
    o = tr_attention(g, q, k, v, m, 0.25f, 0, 3);
    assert_node(g, o, TR_DTYPE_BF16, 2, 8, 5, 12);
    assert_int_equal(tr_node_n_inputs(g, o), 4);
    assert_int_equal(tr_node_input(g, o, 3), m);
    int m2 = tr_input(g, "m2", TR_DTYPE_BF16, 2, S(5, 7));
    assert_node(g, tr_attention(g, q, k, v, m2, 1.0f, 0, 0), TR_DTYPE_BF16, 2, 8, 5, 12);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    int bad = in_f32(g, "bad", 4, S(2, 1, 5, 6));
    EXPECT_ERROR(g, tr_attention(g, q, k, v, bad, 1.0f, 0, 0), "node 9 attention", "mask f32[2,1,5,6]",
                 "[2,8,5,7]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    q = in_f32(g, "q", 4, S(1, 6, 5, 16));
    k = in_f32(g, "k", 4, S(1, 4, 7, 16));
    v = in_f32(g, "v", 4, S(1, 4, 7, 16));
    EXPECT_ERROR(g, tr_attention(g, q, k, v, -1, 1.0f, 0, 0), "node 3 attention", "f32[1,6,5,16]", "multiple",
                 "f32[1,4,7,16]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    q = in_f32(g, "q", 4, S(1, 4, 5, 16));
    k = in_f32(g, "k", 4, S(1, 4, 7, 8));
    v = in_f32(g, "v", 4, S(1, 4, 7, 16));
    EXPECT_ERROR(g, tr_attention(g, q, k, v, -1, 1.0f, 0, 0), "node 3 attention", "k f32[1,4,7,8]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    q = in_f32(g, "q", 3, S(4, 5, 16));
    EXPECT_ERROR(g, tr_attention(g, q, q, q, -1, 1.0f, 0, 0), "node 1 attention", "4-D", "f32[4,5,16]");
    tr_graph_free(g);

    g = tr_test_graph_new();
    q = in_f32(g, "q", 4, S(1, 2, 3, 4));
    m = tr_input(g, "m", TR_DTYPE_BF16, 2, S(3, 3));
    EXPECT_ERROR(g, tr_attention(g, q, q, q, m, 1.0f, 0, 0), "node 2 attention", "mask bf16[3,3]", "f32 or f32");
    tr_graph_free(g);
}

static void test_add_node_arity(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = in_f32(g, "x", 2, S(2, 3));
    int in[5] = {x, x, x, x, x};
    /* attrs NULL: neutral defaults (alpha 1) */
    int y = tr_graph_add_node(g, TR_OP_MATMUL, 2, (const int[]){x, tr_transpose(g, x, 2, (const int[]){1, 0})}, NULL);
    assert_node(g, y, TR_DTYPE_F32, 2, 2);
    assert_true(tr_node_attrs(g, y)->floats[0] == 1.0f);
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    EXPECT_ERROR(g, tr_graph_add_node(g, TR_OP_ADD, 3, in, NULL), "node 3 add", "3 inputs, expected 2");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 4, S(1, 1, 2, 3));
    EXPECT_ERROR(g, tr_graph_add_node(g, TR_OP_ATTENTION, 5, (const int[]){x, x, x, x, x}, NULL), "node 1 attention",
                 "5 inputs, expected 3 or 4");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_graph_add_node(g, TR_OP_PARAM, 0, NULL, NULL), "node 0 param", "tr_param");
    tr_graph_free(g);
    g = tr_test_graph_new();
    EXPECT_ERROR(g, tr_graph_add_node(g, (enum tr_op)999, 0, NULL, NULL), "node 0", "unknown op 999");
    tr_graph_free(g);

    /* ids out of range are errors too, and name the bad input */
    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(3));
    EXPECT_ERROR(g, tr_add(g, x, 7), "node 1 add", "input 1 is 7", "[0,1)");
    tr_graph_free(g);
    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(3));
    EXPECT_ERROR(g, tr_add(g, -5, x), "node 1 add", "input 0 is -5");
    tr_graph_free(g);
}

static void test_sticky(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error err = {0};
    int x = in_f32(g, "x", 2, S(2, 3));
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, S(4, 5), 0, 1);
    int bad = tr_matmul(g, x, w, 0, 0);
    assert_int_equal(bad, -1);
    assert_int_equal(tr_graph_status(g, &err), TR_ERR_SHAPE);
    char first[TR_ERROR_MSG_MAX];
    snprintf(first, sizeof first, "%s", err.msg);
    assert_non_null(strstr(first, "node 2 matmul"));
    int n = tr_graph_n_nodes(g);

    /* -1 flows through without a new message */
    assert_int_equal(tr_gelu(g, bad, 0), -1);
    assert_int_equal(tr_add(g, bad, x), -1);
    assert_int_equal(tr_layer_norm(g, bad, -1, -1, 1e-5f), -1);
    assert_int_equal(tr_attention(g, bad, bad, bad, bad, 1, 0, 0), -1);
    /* so do calls with valid ids, and calls that would fail on their own: the graph is dead */
    assert_int_equal(tr_add(g, x, x), -1);
    assert_int_equal(tr_reshape(g, x, 1, S(7)), -1);
    assert_int_equal(tr_input(g, "late", TR_DTYPE_F32, 1, S(2)), -1);
    assert_int_equal(tr_const_scalar(g, TR_DTYPE_F32, 1), -1);
    assert_int_not_equal(tr_graph_set_name(g, x, "renamed"), TR_OK);
    assert_int_not_equal(tr_graph_set_output(g, x, "out"), TR_OK);
    assert_int_equal(tr_graph_n_nodes(g), n);
    assert_int_equal(tr_graph_n_outputs(g), 0);
    assert_string_equal(tr_node_name(g, x), "x");

    memset(&err, 0, sizeof err);
    assert_int_equal(tr_graph_status(g, &err), TR_ERR_SHAPE);
    assert_string_equal(err.msg, first);
    /* scopes stay balanced on a dead graph */
    assert_int_equal(tr_graph_push_scope(g, "s"), TR_OK);
    tr_graph_pop_scope(g);
    tr_graph_free(g);

    /* a -1 input with no error before is reported as such */
    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(3));
    EXPECT_ERROR(g, tr_add(g, x, -1), "node 1 add 'add_1'", "input 1 is -1");
    tr_graph_free(g);
}

static void test_names(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int ids = tr_input(g, "input_ids", TR_DTYPE_I32, 2, S(2, 4));
    assert_int_equal(tr_graph_push_scope(g, "encoder"), TR_OK);
    assert_int_equal(tr_graph_push_scope(g, "layer.%d", 3), TR_OK);
    int w = tr_param(g, "weight", TR_DTYPE_F32, 2, S(4, 4), 0, 1);
    assert_string_equal(tr_node_name(g, w), "encoder.layer.3.weight");
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, S(2, 4));
    int y = tr_matmul(g, x, w, 0, 0);
    char want[64];
    snprintf(want, sizeof want, "encoder.layer.3.matmul_%d", y);
    assert_string_equal(tr_node_name(g, y), want);
    assert_int_equal(tr_graph_find(g, want), y);
    assert_int_equal(tr_graph_set_name(g, y, "dense"), TR_OK);
    assert_string_equal(tr_node_name(g, y), "encoder.layer.3.dense");
    assert_int_equal(tr_graph_find(g, want), -1); /* the old name is gone from the index */
    assert_int_equal(tr_graph_find(g, "encoder.layer.3.dense"), y);
    assert_int_equal(tr_graph_set_name(g, y, "dense"), TR_OK); /* same name again: no-op */
    tr_graph_pop_scope(g);
    int b = tr_param(g, "bias", TR_DTYPE_F32, 1, S(4), 0, 0);
    assert_string_equal(tr_node_name(g, b), "encoder.bias");
    tr_graph_pop_scope(g);
    int u = tr_add(g, y, b);
    snprintf(want, sizeof want, "add_%d", u);
    assert_string_equal(tr_node_name(g, u), want);
    assert_int_equal(tr_graph_find(g, "input_ids"), ids);
    assert_int_equal(tr_graph_find(g, "encoder.layer.3.weight"), w);
    assert_int_equal(tr_graph_find(g, "encoder.layer.3"), -1);
    assert_int_equal(tr_graph_find(g, "nope"), -1);

    /* outputs keep their order and names; a NULL name is the node's */
    assert_int_equal(tr_graph_set_output(g, u, "logits"), TR_OK);
    assert_int_equal(tr_graph_set_output(g, y, NULL), TR_OK);
    assert_int_equal(tr_graph_n_outputs(g), 2);
    assert_int_equal(tr_graph_output(g, 0), u);
    assert_string_equal(tr_graph_output_name(g, 0), "logits");
    assert_string_equal(tr_graph_output_name(g, 1), "encoder.layer.3.dense");
    assert_null(tr_graph_output_name(g, 2));
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);

    /* a name taken twice is refused, naming both nodes */
    assert_int_equal(tr_graph_push_scope(g, "encoder"), TR_OK);
    int dup = tr_param(g, "bias", TR_DTYPE_F32, 1, S(4), 0, 0);
    char id_str[32];
    snprintf(id_str, sizeof id_str, "node %d", b);
    EXPECT_ERROR(g, dup, "param", "'encoder.bias' is already used", id_str);
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(2));
    y = in_f32(g, "y", 1, S(2));
    assert_int_not_equal(tr_graph_set_name(g, y, "x"), TR_OK);
    EXPECT_ERROR(g, -1, "node 1 input 'y'", "'x' is already used by node 0");
    tr_graph_free(g);

    g = tr_test_graph_new();
    x = in_f32(g, "x", 1, S(2));
    assert_int_equal(tr_graph_set_output(g, x, "out"), TR_OK);
    assert_int_not_equal(tr_graph_set_output(g, x, "out"), TR_OK);
    EXPECT_ERROR(g, -1, "output 'out' set twice");
    tr_graph_free(g);

    g = tr_test_graph_new();
    tr_graph_pop_scope(g);
    EXPECT_ERROR(g, -1, "pop_scope without");
    tr_graph_free(g);

    g = tr_test_graph_new();
    char longname[200];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    EXPECT_ERROR(g, tr_input(g, longname, TR_DTYPE_F32, 1, S(2)), "node 0 input", "longer than 127");
    tr_graph_free(g);

    g = tr_test_graph_new();
    assert_int_equal(tr_graph_push_scope(g, "%.100s", longname), TR_OK);
    assert_int_not_equal(tr_graph_push_scope(g, "%.40s", longname), TR_OK);
    tr_graph_pop_scope(g);
    tr_graph_pop_scope(g);
    EXPECT_ERROR(g, -1, "scope", "longer than 127");
    tr_graph_free(g);
}

/* Many nodes: the name index keeps every lookup right after several rehashes. */
static void test_find_many(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    enum { N = 3000 };
    int ids[N];
    for (int i = 0; i < N; i++) {
        assert_int_equal(tr_graph_push_scope(g, "layer.%d", i % 37), TR_OK);
        char nm[32];
        snprintf(nm, sizeof nm, "w%d", i);
        ids[i] = tr_param(g, nm, TR_DTYPE_F32, 1, S(2), 0, 1);
        tr_graph_pop_scope(g);
    }
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    for (int i = 0; i < N; i++) {
        char nm[48];
        snprintf(nm, sizeof nm, "layer.%d.w%d", i % 37, i);
        assert_int_equal(tr_graph_find(g, nm), ids[i]);
        snprintf(nm, sizeof nm, "layer.%d.w%d", (i + 1) % 37, i);
        assert_int_equal(tr_graph_find(g, nm), -1);
    }
    assert_int_equal(tr_graph_param_bytes(g), (uint64_t)N * 2 * sizeof(float));
    tr_graph_free(g);
}

static void test_bind_param(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error err = {0};
    int x = in_f32(g, "x", 1, S(3));
    int w = tr_param(g, "w", TR_DTYPE_F32, 1, S(3), 0, 1);
    int y = tr_add(g, x, w);
    float data[3] = {1, 2, 3};
    assert_int_equal(tr_graph_bind_param(g, w, data, &err), TR_OK);
    assert_ptr_equal(tr_node_data(g, w), data);

    assert_int_equal(tr_graph_bind_param(g, x, data, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "node 0 input 'x'"));
    assert_non_null(strstr(err.msg, "param"));
    assert_int_equal(tr_graph_bind_param(g, y, data, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "node 2 add"));
    assert_int_equal(tr_graph_bind_param(g, 17, data, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "17"));
    assert_int_equal(tr_graph_bind_param(g, w, NULL, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "NULL"));
    assert_null(tr_node_data(g, x));
    /* bind errors belong to the caller, not to the builder */
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    tr_graph_free(g);
}

static char *dump_to_string(const struct tr_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    struct tr_error err = {0};
    assert_int_equal(tr_graph_dump(g, f, &err), TR_OK);
    fclose(f);
    return buf;
}

static void expect_line(const char *text, const char *line) {
    if (!strstr(text, line)) fail_msg("dump lacks line \"%s\":\n%s", line, text);
}

static void test_dump(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    int x = tr_input(g, "x", TR_DTYPE_BF16, 3, S(2, 4, 8));
    int w = tr_param(g, "w", TR_DTYPE_BF16, 2, S(6, 8), 0, 0.02f);
    int y = tr_matmul(g, x, w, 0, 1);
    tr_graph_set_name(g, y, "proj");
    int gm = tr_param(g, "gamma", TR_DTYPE_BF16, 1, S(6), 1, 0);
    int ln = tr_layer_norm(g, y, gm, gm, 1e-12f);
    int r = tr_reshape(g, ln, 4, S(2, 4, 2, -1));
    int t = tr_transpose(g, r, 4, (const int[]){0, 2, 1, 3});
    int s = tr_slice(g, t, -1, 1, 3, 1);
    int sm = tr_reduce(g, TR_OP_MEAN, s, -1, 1);
    int c = tr_cast(g, sm, TR_DTYPE_F32);
    int h = tr_const_scalar(g, TR_DTYPE_F32, 0.5);
    int o = tr_mul(g, c, h);
    int a = tr_attention(g, t, t, t, -1, 0.125f, 1, 2);
    int cc = tr_concat(g, 2, (const int[]){a, a}, -1);
    tr_graph_set_output(g, o, "out");
    tr_graph_set_output(g, cc, "att");
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    char *text = dump_to_string(g);
    char line[256];
    snprintf(line, sizeof line, "%%%d = input #0 : bf16[2,4,8]  'x'\n", x);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = param init=normal(0,0.02) : bf16[6,8]  'w'\n", w);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = matmul(%%%d, %%%d) trans_b=1 : bf16[2,4,6]  'proj'\n", y, x, w);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = layer_norm(%%%d, %%%d, %%%d) eps=1e-12 : bf16[2,4,6]", ln, y, gm, gm);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = reshape(%%%d) shape=[2,4,2,3] : bf16[2,4,2,3]", r, ln);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = transpose(%%%d) perm=[0,2,1,3] : bf16[2,2,4,3]", t, r);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = slice(%%%d) axis=3 start=1 end=3 step=1 : bf16[2,2,4,2]", s, t);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = mean(%%%d) axis=3 keepdims=1 : bf16[2,2,4,1]", sm, s);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = cast(%%%d) to=f32 : f32[2,2,4,1]", c, sm);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = const value=0.5 : f32[]  'const_%d'", h, h);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = attention(%%%d, %%%d, %%%d) scale=0.125 causal=1 window=2 : bf16[2,2,4,3]", a,
             t, t, t);
    expect_line(text, line);
    snprintf(line, sizeof line, "%%%d = concat(%%%d, %%%d) axis=3 : bf16[2,2,4,6]", cc, a, a);
    expect_line(text, line);
    snprintf(line, sizeof line, "output 'out' = %%%d\noutput 'att' = %%%d\n", o, cc);
    expect_line(text, line);
    /* one line per node, plus the header and the outputs */
    int lines = 0;
    for (const char *p = text; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 1 + tr_graph_n_nodes(g) + 2);
    free(text);

    uint16_t bound[48] = {0};
    assert_int_equal(tr_graph_bind_param(g, w, bound, NULL), TR_OK);
    text = dump_to_string(g);
    snprintf(line, sizeof line, "%%%d = param init=normal(0,0.02) bound : bf16[6,8]  'w'\n", w);
    expect_line(text, line);
    free(text);
    tr_graph_free(g);
}

static void test_flops(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    const int64_t B = 2, M = 3, K = 4, N = 5, H = 2, Tq = 3, Tk = 7, D = 4, Dv = 6;
    int x = in_f32(g, "x", 3, S(B, M, K));
    int w = tr_param(g, "w", TR_DTYPE_F32, 2, S(N, K), 0, 1);
    int bias = tr_param(g, "b", TR_DTYPE_BF16, 1, S(N), 0, 1);
    double want = 0;
    int y = tr_matmul(g, x, w, 0, 1);
    want += 2.0 * B * M * N * K;
    int xt = in_f32(g, "xt", 3, S(B, K, M));
    tr_matmul(g, xt, w, 1, 1); /* K read from the transposed a */
    want += 2.0 * B * M * N * K;
    int z = tr_gelu(g, y, 0);
    want += B * M * N;
    tr_reduce(g, TR_OP_SUM, z, -1, 0);
    want += B * M * N;
    tr_reshape(g, z, 1, S(-1));
    tr_transpose(g, z, 3, (const int[]){2, 1, 0});
    int q = in_f32(g, "q", 4, S(B, H, Tq, D));
    int k = in_f32(g, "k", 4, S(B, 1, Tk, D));
    int v = in_f32(g, "v", 4, S(B, 1, Tk, Dv));
    tr_attention(g, q, k, v, -1, 0.5f, 1, 0);
    want += 2.0 * B * H * Tq * Tk * D + 2.0 * B * H * Tq * Tk * Dv;
    assert_int_equal(tr_graph_status(g, NULL), TR_OK);
    assert_true(tr_graph_flops(g) == want);
    assert_int_equal(tr_graph_param_bytes(g), (uint64_t)(N * K * 4 + N * 2));
    (void)bias;
    tr_graph_free(g);
}

/* A block built twice: the second instance's PARAMs are the first's, its other named
 * nodes get "@1"; a PARAM declared again with another shape is refused. */
static void test_instance(void **state) {
    (void)state;
    struct tr_graph *g;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    const int64_t xs[2] = {2, 4}, ws[2] = {4, 4};
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, xs), ids[2], ys[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(tr_graph_set_instance(g, k), TR_OK);
        tr_graph_push_scope(g, "dense");
        ids[k] = tr_param(g, "weight", TR_DTYPE_F32, 2, ws, 0.0f, 0.5f);
        tr_graph_pop_scope(g);
        ys[k] = x = tr_matmul(g, x, ids[k], 0, 1);
        assert_int_equal(tr_graph_set_name(g, x, "dense"), TR_OK);
    }
    assert_int_equal(tr_graph_set_instance(g, 0), TR_OK);
    assert_int_equal(tr_graph_status(g, &e), TR_OK);
    assert_int_equal(ids[0], ids[1]);
    assert_int_equal(tr_graph_n_params(g), 1);
    assert_string_equal(tr_node_name(g, ys[0]), "dense");
    assert_string_equal(tr_node_name(g, ys[1]), "dense@1");
    assert_int_equal(tr_graph_set_instance(g, 2), TR_OK);
    const int64_t other[2] = {4, 8};
    assert_true(tr_param(g, "dense.weight", TR_DTYPE_F32, 2, other, 0.0f, 0.5f) < 0);
    assert_int_not_equal(tr_graph_status(g, &e), TR_OK);
    tr_assert_msg_has(&e, "param 'dense.weight' f32[4,8] is declared before as param f32[4,4]");
    tr_graph_free(g);
}

/* The live-set peak: each value freed after its last reader, a reshape sharing its
 * input's memory, outputs kept to the end. Values of 4 KiB (1024 f32): a = x+x, b = a·2,
 * c = reshape(b), d = c+a (a, b die here), e = exp(d) (d dies): at most a, b, d alive. */
static void test_peak_bytes(void **state) {
    (void)state;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    const int64_t s1[1] = {1024}, s2[2] = {32, 32};
    int x = tr_input(g, "x", TR_DTYPE_F32, 1, s1);
    int a = tr_add(g, x, x);
    int b = tr_scale(g, a, 2.0f, 0.0f);
    int c = tr_reshape(g, b, 1, s1);
    int d = tr_add(g, c, a);
    int e = tr_unary(g, TR_OP_EXP, d);
    (void)tr_reshape(g, e, 2, s2);
    assert_int_equal(tr_graph_set_output(g, e, "e"), TR_OK);
    assert_int_equal(tr_graph_peak_bytes(g), 3 * 4096);
    /* an output stays: d kept alive as an output adds its 4 KiB beside e */
    assert_int_equal(tr_graph_set_output(g, d, "d"), TR_OK);
    assert_int_equal(tr_graph_peak_bytes(g), 3 * 4096);
    int f = tr_unary(g, TR_OP_EXP, e);
    assert_int_equal(tr_graph_set_output(g, f, "f"), TR_OK);
    assert_int_equal(tr_graph_peak_bytes(g), 3 * 4096); /* d, e, f */
    int h = tr_add(g, f, f);
    int k = tr_add(g, h, h);
    (void)k;
    assert_int_equal(tr_graph_peak_bytes(g), 5 * 4096); /* d, e, f, and h read while k is written */
    tr_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_bytes),
        cmocka_unit_test(test_instance),
        cmocka_unit_test(test_leaves),          cmocka_unit_test(test_leaf_errors),
        cmocka_unit_test(test_matmul),          cmocka_unit_test(test_matmul_errors),
        cmocka_unit_test(test_binary),          cmocka_unit_test(test_unary),
        cmocka_unit_test(test_layer_norm),      cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_reshape_transpose), cmocka_unit_test(test_slice),
        cmocka_unit_test(test_concat),          cmocka_unit_test(test_reduce_cast),
        cmocka_unit_test(test_attention),       cmocka_unit_test(test_add_node_arity),
        cmocka_unit_test(test_sticky),          cmocka_unit_test(test_names),
        cmocka_unit_test(test_find_many),       cmocka_unit_test(test_bind_param),
        cmocka_unit_test(test_dump),            cmocka_unit_test(test_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
