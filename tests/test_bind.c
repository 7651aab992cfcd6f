/* Bound kernel calls (tr_kernels_bind / tr_kernels_call / tr_kernels_unbind): for every
 * runnable op, in f32 and bf16, a bound call gives the very bits tr_kernels_run gives on
 * the same random inputs (outputs poisoned first), and keeps doing so when the data
 * behind the bound pointers changes; bind refuses what run refuses, with run's message;
 * the counters count bound calls; unbind releases what bind made (ASan checks); bound
 * calls of every kind (each graph op, a GEMM with its epilogue, the fused kernels)
 * allocate nothing once bound, and tr_k_* calls nothing once their shapes were seen. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "alloccount.h"
#include "testutil.h"
#include "trident/kernels.h"

#define K tr_test_k /* the group's kernels context (testutil.h) */

/* ---- counting allocations (tests/alloccount.h): only trident's kernels library is
 * held to zero; oneDNN's execute and libgomp (a team of one for a region whose `if` is
 * false) may allocate, measured and printed but not ours to change. ---- */
#define COUNT_ALLOCS TR_TEST_COUNT_ALLOCS
#if COUNT_ALLOCS
static void count_start(void) { tr_test_allocs_start(); }
static long count_stop(char *others, size_t size) {
    const void *ours[] = {(const void *)&tr_k_softmax};
    return tr_test_allocs_stop(ours, 1, NULL, others, size);
}
#endif

/* ---- the cases: one op with its inputs and output ---- */

#define MAXIN 9
#define MAXD 5

struct tspec {
    int dtype;          /* -1: the case's float dtype; -2: the other float dtype (casts) */
    int ndim;
    int64_t shape[MAXD];
    int64_t int_hi;     /* integer inputs: values in [0, int_hi) */
    int positive;       /* floats drawn > 0 (sqrt, rsqrt) */
};

struct bcase {
    const char *name;
    int op;
    struct tr_attrs attrs;
    int has_attrs;
    int n_in;
    struct tspec in[MAXIN];
    struct tspec out;
};

#define F(...) {.dtype = -1, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define FPOS(...) {.dtype = -1, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}, .positive = 1}
#define OTHER(...) {.dtype = -2, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define F32(...) {.dtype = TR_DTYPE_F32, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}}
#define IDS(dt, hi, ...) {.dtype = dt, .ndim = sizeof((int64_t[]){__VA_ARGS__}) / 8, .shape = {__VA_ARGS__}, .int_hi = hi}
#define AT(...) .attrs = {__VA_ARGS__}, .has_attrs = 1

static const struct bcase cases[] = {
    {"matmul batched, b shared", TR_OP_MATMUL, .n_in = 2, .in = {F(2, 3, 5, 7), F(7, 4)}, .out = F(2, 3, 5, 4)},
    {"matmul transposed, alpha", TR_OP_MATMUL, AT(.ints = {1, 1}, .floats = {0.5f}), .n_in = 2,
     .in = {F(3, 7, 5), F(3, 4, 7)}, .out = F(3, 5, 4)},
    {"matmul broadcast batch", TR_OP_MATMUL, AT(.ints = {0, 1}), .n_in = 2, .in = {F(2, 1, 6, 8), F(1, 3, 5, 8)},
     .out = F(2, 3, 6, 5)},
    {"matmul large (jit gemm)", TR_OP_MATMUL, .n_in = 2, .in = {F(256, 256), F(256, 288)}, .out = F(256, 288)},
    {"add bias", TR_OP_ADD, .n_in = 2, .in = {F(4, 5, 6), F(6)}, .out = F(4, 5, 6)},
    {"sub", TR_OP_SUB, .n_in = 2, .in = {F(4, 1, 6), F(5, 1)}, .out = F(4, 5, 6)},
    {"mul", TR_OP_MUL, .n_in = 2, .in = {F(3, 2000), F(3, 2000)}, .out = F(3, 2000)},
    {"div", TR_OP_DIV, .n_in = 2, .in = {F(7, 9), FPOS(7, 1)}, .out = F(7, 9)},
    {"gelu erf", TR_OP_GELU, .n_in = 1, .in = {F(5, 33)}, .out = F(5, 33)},
    {"gelu tanh", TR_OP_GELU, AT(.ints = {1}), .n_in = 1, .in = {F(5, 33)}, .out = F(5, 33)},
    {"tanh", TR_OP_TANH, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"relu", TR_OP_RELU, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"silu", TR_OP_SILU, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"sigmoid", TR_OP_SIGMOID, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"exp", TR_OP_EXP, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"neg", TR_OP_NEG, .n_in = 1, .in = {F(40)}, .out = F(40)},
    {"sqrt", TR_OP_SQRT, .n_in = 1, .in = {FPOS(40)}, .out = F(40)},
    {"rsqrt", TR_OP_RSQRT, .n_in = 1, .in = {FPOS(40)}, .out = F(40)},
    {"scale", TR_OP_SCALE, AT(.floats = {0.5f, 0.25f}), .n_in = 1, .in = {F(6, 7)}, .out = F(6, 7)},
    {"softmax", TR_OP_SOFTMAX, .n_in = 1, .in = {F(3, 4, 9)}, .out = F(3, 4, 9)},
    {"layer_norm", TR_OP_LAYER_NORM, AT(.floats = {1e-5f}), .n_in = 3, .in = {F(3, 4, 8), F(8), F(8)},
     .out = F(3, 4, 8)},
    {"embedding i32", TR_OP_EMBEDDING, .n_in = 2, .in = {F(11, 8), IDS(TR_DTYPE_I32, 11, 3, 5)}, .out = F(3, 5, 8)},
    {"embedding i64", TR_OP_EMBEDDING, .n_in = 2, .in = {F(11, 8), IDS(TR_DTYPE_I64, 11, 4)}, .out = F(4, 8)},
    {"reshape (copy)", TR_OP_RESHAPE, AT(.ints = {12, 6}, .n_ints = 2), .n_in = 1, .in = {F(3, 4, 6)}, .out = F(12, 6)},
    {"transpose", TR_OP_TRANSPOSE, AT(.ints = {0, 2, 1, 3}, .n_ints = 4), .n_in = 1, .in = {F(2, 3, 4, 5)},
     .out = F(2, 4, 3, 5)},
    {"slice", TR_OP_SLICE, AT(.ints = {1, -8, 9, 3}), .n_in = 1, .in = {F(4, 10, 3)}, .out = F(4, 3, 3)},
    {"concat", TR_OP_CONCAT, AT(.ints = {1}), .n_in = 3, .in = {F(2, 3, 4), F(2, 5, 4), F(2, 1, 4)}, .out = F(2, 9, 4)},
    {"concat of ints", TR_OP_CONCAT, AT(.ints = {0}), .n_in = 2,
     .in = {IDS(TR_DTYPE_I32, 100, 2, 3), IDS(TR_DTYPE_I32, 100, 1, 3)}, .out = IDS(TR_DTYPE_I32, 0, 3, 3)},
    {"sum", TR_OP_SUM, AT(.ints = {1, 0}), .n_in = 1, .in = {F(3, 7, 5)}, .out = F(3, 5)},
    {"mean keepdims", TR_OP_MEAN, AT(.ints = {1, 1}), .n_in = 1, .in = {F(3, 7, 5)}, .out = F(3, 1, 5)},
    {"max last axis", TR_OP_MAX, AT(.ints = {-1, 0}), .n_in = 1, .in = {F(3, 7, 5)}, .out = F(3, 7)},
    {"cast to the other float", TR_OP_CAST, .n_in = 1, .in = {F(5, 6)}, .out = OTHER(5, 6)},
    {"cast i32 to float", TR_OP_CAST, .n_in = 1, .in = {IDS(TR_DTYPE_I32, 1000, 5, 6)}, .out = F(5, 6)},
    {"attention, mask", TR_OP_ATTENTION, .n_in = 4,
     .in = {F(2, 4, 5, 8), F(2, 2, 7, 8), F(2, 2, 7, 8), F32(2, 1, 5, 7)}, .out = F(2, 4, 5, 8)},
    {"attention, causal window", TR_OP_ATTENTION, AT(.ints = {1, 3}, .floats = {0.3f}), .n_in = 3,
     .in = {F(1, 2, 6, 4), F(1, 2, 6, 4), F(1, 2, 6, 8)}, .out = F(1, 2, 6, 8)},
};

static int spec_dtype(const struct tspec *s, int dt) {
    if (s->dtype == -1) return dt;
    if (s->dtype == -2) return dt == TR_DTYPE_F32 ? TR_DTYPE_BF16 : TR_DTYPE_F32;
    return s->dtype;
}

static void fill(struct tr_tensor *t, const struct tspec *s, uint64_t seed) {
    if (s->int_hi > 0) {
        tr_test_randint(t, seed, s->int_hi);
        return;
    }
    tr_test_randn(t, seed, 1.0);
    if (s->positive)
        for (int64_t i = 0; i < tr_tensor_numel(t); i++) tr_tensor_set_f64(t, i, fabs(tr_tensor_get_f64(t, i)));
}

struct inst {
    int n_in;
    struct tr_tensor in[MAXIN], out_run, out_bind;
};

static void inst_make(struct inst *x, const struct bcase *c, int dt) {
    x->n_in = c->n_in;
    for (int i = 0; i < c->n_in; i++) {
        x->in[i] = tr_test_tensor(spec_dtype(&c->in[i], dt), c->in[i].ndim, c->in[i].shape);
        fill(&x->in[i], &c->in[i], 100 + (uint64_t)i);
    }
    x->out_run = tr_test_tensor(spec_dtype(&c->out, dt), c->out.ndim, c->out.shape);
    x->out_bind = tr_test_tensor(spec_dtype(&c->out, dt), c->out.ndim, c->out.shape);
}

static void inst_free(struct inst *x) {
    for (int i = 0; i < x->n_in; i++) tr_test_tensor_free(&x->in[i]);
    tr_test_tensor_free(&x->out_run);
    tr_test_tensor_free(&x->out_bind);
}

static void expect_same(const char *what, const struct bcase *c, int dt, const struct tr_tensor *run,
                        const struct tr_tensor *bound) {
    size_t n = tr_tensor_nbytes(run);
    if (memcmp(run->data, bound->data, n) != 0)
        fail_msg("%s %s (%s): the bound call's output differs from tr_kernels_run's", c->name, what,
                 tr_dtype_name((enum tr_dtype)dt));
    /* the poison is gone: every element was written (the inputs make finite outputs) */
    for (int64_t i = 0; i < tr_tensor_numel(bound); i++)
        if (!isfinite(tr_tensor_get_f64(bound, i)))
            fail_msg("%s %s (%s): element %lld is %g", c->name, what, tr_dtype_name((enum tr_dtype)dt), (long long)i,
                     tr_tensor_get_f64(bound, i));
}

/* The case's attributes; a cast's target is the output's dtype of this instance. */
static const struct tr_attrs *case_attrs(const struct bcase *c, int dt, struct tr_attrs *buf) {
    if (c->op != TR_OP_CAST) return c->has_attrs ? &c->attrs : NULL;
    *buf = c->attrs;
    buf->ints[0] = spec_dtype(&c->out, dt);
    return buf;
}

static void check_case(const struct bcase *c, int dt) {
    struct tr_error err = {0};
    struct inst x;
    inst_make(&x, c, dt);
    struct tr_attrs buf;
    const struct tr_attrs *at = case_attrs(c, dt, &buf);
    struct tr_kernel_call call;
    if (tr_kernels_bind(K, c->op, at, x.n_in, x.in, &x.out_bind, &call, &err) != TR_OK)
        fail_msg("%s (%s): bind: %s", c->name, tr_dtype_name((enum tr_dtype)dt), err.msg);
    assert_non_null(call.fn);
    assert_int_equal(call.op, c->op);
    for (int round = 0; round < 2; round++) {
        if (round == 1) /* new data behind the same pointers: the call reads it */
            for (int i = 0; i < x.n_in; i++) fill(&x.in[i], &c->in[i], 200 + (uint64_t)i);
        tr_test_poison(&x.out_run);
        tr_test_poison(&x.out_bind);
        if (tr_kernels_run(K, c->op, at, x.n_in, x.in, &x.out_run, &err) != TR_OK)
            fail_msg("%s: run: %s", c->name, err.msg);
        struct tr_kernels_stats s0, s1;
        tr_kernels_get_stats(K, &s0);
        if (tr_kernels_call(K, &call, &err) != TR_OK) fail_msg("%s: call: %s", c->name, err.msg);
        tr_kernels_get_stats(K, &s1);
        assert_int_equal(s1.calls, s0.calls + 1);
        assert_int_equal(s1.gemm_calls, s0.gemm_calls + (c->op == TR_OP_MATMUL));
        /* no cache lookup: the call's primitive is its own */
        assert_int_equal(s1.primitive_hits, s0.primitive_hits);
        assert_int_equal(s1.primitive_misses, s0.primitive_misses);
        expect_same(round ? "after new input data" : "", c, dt, &x.out_run, &x.out_bind);
    }
    tr_kernels_unbind(K, &call);
    assert_null(call.fn);
    assert_null(call.prepared);
    tr_kernels_unbind(K, &call); /* twice is harmless */
    inst_free(&x);
}

static void check_all(int dt) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], dt);
}

static void test_identical_f32(void **state) { check_all(TR_DTYPE_F32); }
static void test_identical_bf16(void **state) { check_all(TR_DTYPE_BF16); }

/* Binding checks but does not compute: the bound tensors are neither read nor written,
 * and the counters do not move (a primitive made for the call is not a cache miss). */
static void test_bind_has_no_effect(void **state) {
    (void)state;
    struct tr_error err = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct bcase *c = &cases[i];
        struct inst x;
        inst_make(&x, c, TR_DTYPE_F32);
        tr_test_poison(&x.out_bind);
        void *before = malloc(tr_tensor_nbytes(&x.out_bind));
        assert_non_null(before);
        memcpy(before, x.out_bind.data, tr_tensor_nbytes(&x.out_bind));
        struct tr_kernels_stats s0, s1;
        tr_kernels_get_stats(K, &s0);
        struct tr_kernel_call call;
        struct tr_attrs buf;
        if (tr_kernels_bind(K, c->op, case_attrs(c, TR_DTYPE_F32, &buf), x.n_in, x.in, &x.out_bind, &call, &err))
            fail_msg("%s: bind: %s", c->name, err.msg);
        tr_kernels_get_stats(K, &s1);
        assert_memory_equal(&s0, &s1, sizeof s0);
        if (memcmp(before, x.out_bind.data, tr_tensor_nbytes(&x.out_bind)) != 0)
            fail_msg("%s: bind wrote into out", c->name);
        tr_kernels_unbind(K, &call);
        free(before);
        inst_free(&x);
    }
}

/* ---- refusals: bind says what run says ---- */

struct bad {
    const char *what;
    struct tr_kernels *k;
    int op;
    const struct tr_attrs *attrs;
    int n_in;
    const struct tr_tensor *in;
    const struct tr_tensor *out;
};

static void expect_same_refusal(const struct bad *b) {
    struct tr_error e_run = {0}, e_bind = {0};
    struct tr_kernel_call call;
    memset(&call, 0x5a, sizeof call);
    /* run gets a copy of out: a refused call must not have written it anyway */
    struct tr_tensor out_copy, *out = NULL;
    if (b->out) {
        out_copy = *b->out;
        out = &out_copy;
    }
    int rc_run = tr_kernels_run(b->k, b->op, b->attrs, b->n_in, b->in, out, &e_run);
    int rc_bind = tr_kernels_bind(b->k, b->op, b->attrs, b->n_in, b->in, b->out, &call, &e_bind);
    if (rc_run == TR_OK) fail_msg("%s: run accepted it (the case is wrong)", b->what);
    if (rc_bind != rc_run)
        fail_msg("%s: bind returned %d, run %d (%s / %s)", b->what, rc_bind, rc_run, e_bind.msg, e_run.msg);
    /* Messages about the call itself name the function; the rest are word for word. */
    char msg[sizeof e_bind.msg];
    const char *p = strstr(e_bind.msg, "tr_kernels_bind");
    if (p)
        snprintf(msg, sizeof msg, "%.*str_kernels_run%s", (int)(p - e_bind.msg), e_bind.msg, p + strlen("tr_kernels_bind"));
    else
        snprintf(msg, sizeof msg, "%s", e_bind.msg);
    if (strcmp(msg, e_run.msg) != 0) fail_msg("%s: bind says '%s', run says '%s'", b->what, e_bind.msg, e_run.msg);
    assert_null(call.fn); /* a refused bind leaves an empty call, safe to unbind */
    assert_null(call.prepared);
    tr_kernels_unbind(b->k, &call);
}

static void test_refusals(void **state) {
    (void)state;
    const int dt = TR_DTYPE_F32;
    struct tr_tensor x = tr_test_tensor(dt, 2, (int64_t[]){4, 6}), y = tr_test_tensor(dt, 2, (int64_t[]){4, 6});
    struct tr_tensor w = tr_test_tensor(dt, 2, (int64_t[]){5, 3}), o = tr_test_tensor(dt, 2, (int64_t[]){4, 3});
    struct tr_tensor xb = tr_test_tensor(TR_DTYPE_BF16, 2, (int64_t[]){4, 6});
    struct tr_tensor v7 = tr_test_tensor(dt, 1, (int64_t[]){7}), q = tr_test_tensor(dt, 4, (int64_t[]){1, 2, 3, 4});
    struct tr_tensor ids = tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){4});
    struct tr_tensor e5 = tr_test_tensor(dt, 2, (int64_t[]){4, 5});
    tr_test_randn(&x, 1, 1.0);
    tr_test_randn(&w, 2, 1.0);
    tr_test_randn(&q, 3, 1.0);
    tr_test_randint(&ids, 4, 6);
    struct tr_tensor dev = x, strided = x, nodata = x;
    dev.device = TR_DEVICE_CUDA;
    strided.strides[0] = 12;
    nodata.data = NULL;
    struct tr_tensor xy[2] = {x, y}, xw[2] = {x, w}, xxb[2] = {x, xb}, xv7[2] = {x, v7}, tid[2] = {x, ids};
    struct tr_tensor qkv[3] = {q, q, q}, ln[3] = {x, v7, v7}, xx[2] = {x, x}, qq[2] = {q, q};
    struct tr_attrs gelu5 = {.ints = {5}}, perm3 = {.ints = {1, 0, 2}, .n_ints = 3}, perm2 = {.ints = {0, 1}, .n_ints = 2};
    struct tr_attrs step0 = {.ints = {1, 0, 6, 0}}, sl = {.ints = {1, 0, 6, 2}}, red = {.ints = {1, 1}};
    struct tr_attrs cast16 = {.ints = {TR_DTYPE_BF16}}, win = {.ints = {0, -1}}, ax1 = {.ints = {1}};
    struct tr_attrs eps = {.floats = {1e-5f}}, trans = {.ints = {0, 1}};
    const struct bad bads[] = {
        {"no context", NULL, TR_OP_RELU, NULL, 1, &x, &y},
        {"unknown op", K, TR_OP_COUNT + 3, NULL, 1, &x, &y},
        {"negative op", K, -1, NULL, 1, &x, &y},
        {"input op", K, TR_OP_INPUT, NULL, 0, NULL, &y},
        {"param op", K, TR_OP_PARAM, NULL, 0, NULL, &y},
        {"no out", K, TR_OP_RELU, NULL, 1, &x, NULL},
        {"no inputs", K, TR_OP_RELU, NULL, 1, NULL, &y},
        {"arity", K, TR_OP_RELU, NULL, 2, xy, &y},
        {"scale without attrs", K, TR_OP_SCALE, NULL, 1, &x, &y},
        {"gelu variant", K, TR_OP_GELU, &gelu5, 1, &x, &y},
        {"unary shape", K, TR_OP_TANH, NULL, 1, &x, &o},
        {"tensor on cuda", K, TR_OP_RELU, NULL, 1, &dev, &y},
        {"strided tensor", K, TR_OP_RELU, NULL, 1, &strided, &y},
        {"tensor without data", K, TR_OP_RELU, NULL, 1, &nodata, &y},
        {"out without data", K, TR_OP_EXP, NULL, 1, &x, &nodata},
        {"binary broadcast", K, TR_OP_ADD, NULL, 2, xv7, &y},
        {"binary dtypes", K, TR_OP_MUL, NULL, 2, xxb, &y},
        {"matmul inner", K, TR_OP_MATMUL, NULL, 2, xw, &o},
        {"matmul trans out", K, TR_OP_MATMUL, &trans, 2, xx, &o},
        {"matmul dtypes", K, TR_OP_MATMUL, NULL, 2, xxb, &y},
        {"matmul of ids", K, TR_OP_MATMUL, NULL, 2, tid, &y},
        {"softmax shape", K, TR_OP_SOFTMAX, NULL, 1, &x, &o},
        {"layer_norm gamma", K, TR_OP_LAYER_NORM, &eps, 3, ln, &y},
        {"embedding table dtype", K, TR_OP_EMBEDDING, NULL, 2, (struct tr_tensor[]){x, x}, &y},
        {"embedding out", K, TR_OP_EMBEDDING, NULL, 2, (struct tr_tensor[]){x, ids}, &e5},
        {"reshape count", K, TR_OP_RESHAPE, NULL, 1, &x, &o},
        {"transpose perm count", K, TR_OP_TRANSPOSE, &perm3, 1, &x, &y},
        {"transpose out", K, TR_OP_TRANSPOSE, &perm2, 1, &x, &o},
        {"slice step", K, TR_OP_SLICE, &step0, 1, &x, &y},
        {"slice out", K, TR_OP_SLICE, &sl, 1, &x, &y},
        {"concat none", K, TR_OP_CONCAT, &ax1, 0, NULL, &y},
        {"concat total", K, TR_OP_CONCAT, &ax1, 2, xy, &y},
        {"reduce rank", K, TR_OP_SUM, &red, 1, &x, &v7},
        {"reduce out", K, TR_OP_MEAN, &ax1, 1, &x, &e5},
        {"cast target", K, TR_OP_CAST, &cast16, 1, &x, &y},
        {"attention arity", K, TR_OP_ATTENTION, NULL, 2, qq, &q},
        {"attention window", K, TR_OP_ATTENTION, &win, 3, qkv, &q},
        {"attention rank", K, TR_OP_ATTENTION, NULL, 3, (struct tr_tensor[]){x, x, x}, &y},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) expect_same_refusal(&bads[i]);

    /* A concat of more inputs than a call holds: run takes it, bind says why not. */
    enum { N = TR_KERNEL_CALL_MAX_IN + 1 };
    struct tr_tensor many[N], cn = tr_test_tensor(dt, 2, (int64_t[]){4 * N, 6});
    for (int i = 0; i < N; i++) many[i] = x;
    struct tr_error err = {0};
    struct tr_kernel_call call;
    assert_int_equal(tr_kernels_run(K, TR_OP_CONCAT, &(struct tr_attrs){0}, N, many, &cn, &err), TR_OK);
    assert_int_equal(tr_kernels_bind(K, TR_OP_CONCAT, &(struct tr_attrs){0}, N, many, &cn, &call, &err),
                     TR_ERR_UNSUPPORTED);
    char want[32];
    snprintf(want, sizeof want, "at most %d", TR_KERNEL_CALL_MAX_IN);
    if (!strstr(err.msg, want)) fail_msg("concat of %d: %s", N, err.msg);
    assert_int_equal(tr_kernels_bind(K, TR_OP_RELU, NULL, 1, &x, &y, NULL, &err), TR_ERR_INVALID);

    /* An id out of range is a fact of the data: bind takes it, the call refuses it as
     * run does, and writes nothing. */
    struct tr_tensor table = tr_test_tensor(dt, 2, (int64_t[]){6, 6});
    tr_test_randn(&table, 5, 1.0);
    struct tr_tensor ti[2] = {table, ids}, e_run = x, e_bind = y;
    assert_int_equal(tr_kernels_bind(K, TR_OP_EMBEDDING, NULL, 2, ti, &e_bind, &call, &err), TR_OK);
    ((int32_t *)ids.data)[2] = 6;
    struct tr_error er = {0}, eb = {0};
    assert_int_equal(tr_kernels_run(K, TR_OP_EMBEDDING, NULL, 2, ti, &e_run, &er), TR_ERR_INVALID);
    tr_test_poison(&e_bind);
    assert_int_equal(tr_kernels_call(K, &call, &eb), TR_ERR_INVALID);
    assert_string_equal(eb.msg, er.msg);
    for (int64_t i = 0; i < tr_tensor_numel(&e_bind); i++) assert_true(isnan(tr_tensor_get_f64(&e_bind, i)));
    ((int32_t *)ids.data)[2] = 1;
    assert_int_equal(tr_kernels_call(K, &call, &eb), TR_OK);
    tr_kernels_unbind(K, &call);

    struct tr_tensor *all[] = {&x, &y, &w, &o, &xb, &v7, &q, &ids, &e5, &cn, &table};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_tensor_free(all[i]);
}

/* RESHAPE onto its own input's memory is a call that does nothing (and counts). */
static void test_reshape_alias(void **state) {
    (void)state;
    struct tr_error err = {0};
    struct tr_tensor x = tr_test_tensor(TR_DTYPE_BF16, 3, (int64_t[]){2, 3, 4}), v;
    tr_test_randn(&x, 9, 1.0);
    assert_int_equal(tr_tensor_make(&v, x.data, TR_DTYPE_BF16, 2, (int64_t[]){6, 4}, &err), TR_OK);
    void *before = malloc(tr_tensor_nbytes(&x));
    assert_non_null(before);
    memcpy(before, x.data, tr_tensor_nbytes(&x));
    struct tr_kernel_call call;
    struct tr_attrs at = {.ints = {6, 4}, .n_ints = 2};
    assert_int_equal(tr_kernels_bind(K, TR_OP_RESHAPE, &at, 1, &x, &v, &call, &err), TR_OK);
    struct tr_kernels_stats s0, s1;
    tr_kernels_get_stats(K, &s0);
    assert_int_equal(tr_kernels_call(K, &call, &err), TR_OK);
    tr_kernels_get_stats(K, &s1);
    assert_int_equal(s1.calls, s0.calls + 1);
    assert_memory_equal(before, x.data, tr_tensor_nbytes(&x));
    tr_kernels_unbind(K, &call);
    free(before);
    tr_test_tensor_free(&x);
}

/* Many matmul calls bound and unbound, in three dtypes: every primitive and scratch
 * buffer goes (the ASan build reports a leak otherwise); bound calls outlive cache
 * traffic of other shapes. */
static void test_unbind_frees(void **state) {
    (void)state;
    struct tr_error err = {0};
    enum { N = 24 };
    struct tr_kernel_call calls[N];
    struct tr_tensor a[N], b[N], c[N], r[N];
    for (int i = 0; i < N; i++) {
        int dt = i % 3 == 0 ? TR_DTYPE_F32 : i % 3 == 1 ? TR_DTYPE_BF16 : TR_DTYPE_F16; /* f16: through f32 copies */
        int64_t m = 3 + i, n = 5 + i % 7, kk = 4 + i % 5;
        a[i] = tr_test_tensor(dt, 2, (int64_t[]){m, kk});
        b[i] = tr_test_tensor(dt, 2, (int64_t[]){kk, n});
        c[i] = tr_test_tensor(dt, 2, (int64_t[]){m, n});
        r[i] = tr_test_tensor(dt, 2, (int64_t[]){m, n});
        tr_test_randn(&a[i], 10 + (uint64_t)i, 1.0);
        tr_test_randn(&b[i], 50 + (uint64_t)i, 1.0);
        struct tr_attrs at = {.floats = {i % 3 ? 1.0f : 0.25f}};
        if (tr_kernels_bind(K, TR_OP_MATMUL, &at, 2, (struct tr_tensor[]){a[i], b[i]}, &c[i], &calls[i], &err))
            fail_msg("bind %d: %s", i, err.msg);
    }
    /* the cache sees other traffic meanwhile; the bound primitives are not in it */
    for (int i = 0; i < N; i++) {
        struct tr_attrs at = {.floats = {i % 3 ? 1.0f : 0.25f}};
        assert_int_equal(tr_kernels_run(K, TR_OP_MATMUL, &at, 2, (struct tr_tensor[]){a[i], b[i]}, &r[i], &err), TR_OK);
    }
    for (int i = N - 1; i >= 0; i--) {
        tr_test_poison(&c[i]);
        assert_int_equal(tr_kernels_call(K, &calls[i], &err), TR_OK);
        assert_memory_equal(c[i].data, r[i].data, tr_tensor_nbytes(&c[i]));
        tr_kernels_unbind(K, &calls[i]);
        tr_test_tensor_free(&a[i]);
        tr_test_tensor_free(&b[i]);
        tr_test_tensor_free(&c[i]);
        tr_test_tensor_free(&r[i]);
    }
}

/* ---- a GEMM with its epilogue and the fused kernels, bound ---- */

struct fused_set {
    struct tr_tensor a, w, bias, h, res, g, b, s, mask, tab, ids, pos;
};

static void fused_fill(struct fused_set *f, int dt, uint64_t seed) {
    struct tr_tensor *fl[] = {&f->a, &f->w, &f->bias, &f->res, &f->g, &f->b, &f->s, &f->mask, &f->tab};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) tr_test_randn(fl[i], seed + i, 1.0);
    tr_test_randint(&f->ids, seed + 20, 30);
    tr_test_randint(&f->pos, seed + 21, 12);
    (void)dt;
}

/* tr_kernels_bind_matmul and the fused binders: the call gives tr_k_*'s bits, also
 * after new data behind the bound pointers; the binder refuses what tr_k_* refuses,
 * with its message, and leaves an empty call. */
static void check_fused(int dt) {
    struct tr_error err = {0}, e2 = {0};
    struct fused_set f = {
        .a = tr_test_tensor(dt, 3, (int64_t[]){2, 5, 24}), .w = tr_test_tensor(dt, 2, (int64_t[]){16, 24}),
        .bias = tr_test_tensor(dt, 1, (int64_t[]){16}), .h = tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}),
        .res = tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}), .g = tr_test_tensor(dt, 1, (int64_t[]){16}),
        .b = tr_test_tensor(TR_DTYPE_F32, 1, (int64_t[]){16}), .s = tr_test_tensor(dt, 4, (int64_t[]){2, 3, 5, 12}),
        .mask = tr_test_tensor(TR_DTYPE_F32, 4, (int64_t[]){2, 1, 1, 12}),
        .tab = tr_test_tensor(dt, 2, (int64_t[]){30, 16}), .ids = tr_test_tensor(TR_DTYPE_I64, 2, (int64_t[]){2, 5}),
        .pos = tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){5}),
    };
    struct tr_tensor ref[4] = {tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}), tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}),
                               tr_test_tensor(dt, 4, (int64_t[]){2, 3, 5, 12}), tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16})};
    struct tr_tensor got[4] = {tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}), tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16}),
                               tr_test_tensor(dt, 4, (int64_t[]){2, 3, 5, 12}), tr_test_tensor(dt, 3, (int64_t[]){2, 5, 16})};
    fused_fill(&f, dt, 500);
    struct tr_tensor tables[2] = {f.tab, f.tab}, ids[2] = {f.ids, f.pos};
    struct tr_kernel_call c[4];
    if (tr_kernels_bind_matmul(K, &f.a, &f.w, &got[0], 0, 1, 0.5f, &f.bias, TR_ACT_GELU, &c[0], &err) ||
        tr_kernels_bind_bias_residual_layer_norm(K, &f.h, &f.bias, &f.res, &f.g, &f.b, 1e-5f, &got[1], &c[1], &err) ||
        tr_kernels_bind_scale_mask_softmax(K, &f.s, 0.25f, &f.mask, &got[2], &c[2], &err) ||
        tr_kernels_bind_embedding_sum_layer_norm(K, 2, tables, ids, &f.g, &f.b, 1e-5f, &got[3], &c[3], &err))
        fail_msg("%s: bind: %s", tr_dtype_name((enum tr_dtype)dt), err.msg);
    assert_int_equal(c[0].op, TR_OP_MATMUL);
    assert_int_equal(c[1].op, -1);
    for (int round = 0; round < 2; round++) {
        if (round) fused_fill(&f, dt, 700); /* new data, same pointers */
        tr_test_randn(&f.h, 800 + (uint64_t)round, 1.0);
        for (int i = 0; i < 4; i++) tr_test_poison(&ref[i]), tr_test_poison(&got[i]);
        if (tr_k_matmul(K, &f.a, &f.w, &ref[0], 0, 1, 0.5f, &f.bias, TR_ACT_GELU, &err) ||
            tr_k_bias_residual_layer_norm(K, &f.h, &f.bias, &f.res, &f.g, &f.b, 1e-5f, &ref[1], &err) ||
            tr_k_scale_mask_softmax(K, &f.s, 0.25f, &f.mask, &ref[2], &err) ||
            tr_k_embedding_sum_layer_norm(K, 2, tables, ids, &f.g, &f.b, 1e-5f, &ref[3], &err))
            fail_msg("tr_k_*: %s", err.msg);
        struct tr_kernels_stats s0, s1;
        tr_kernels_get_stats(K, &s0);
        for (int i = 0; i < 4; i++)
            if (tr_kernels_call(K, &c[i], &err)) fail_msg("call %d: %s", i, err.msg);
        tr_kernels_get_stats(K, &s1);
        assert_int_equal(s1.calls, s0.calls + 4);
        assert_int_equal(s1.gemm_calls, s0.gemm_calls + 1);
        for (int i = 0; i < 4; i++) {
            if (memcmp(ref[i].data, got[i].data, tr_tensor_nbytes(&ref[i])) != 0)
                fail_msg("%s bound fused call %d, round %d: differs from tr_k_*", tr_dtype_name((enum tr_dtype)dt), i,
                         round);
            for (int64_t j = 0; j < tr_tensor_numel(&got[i]); j++)
                if (!isfinite(tr_tensor_get_f64(&got[i], j))) fail_msg("call %d: element %lld not written", i, (long long)j);
        }
    }
    /* an id out of range: data, so the call finds it as tr_k_* does */
    ((int64_t *)f.ids.data)[3] = 30;
    assert_int_equal(tr_k_embedding_sum_layer_norm(K, 2, tables, ids, &f.g, &f.b, 1e-5f, &ref[3], &e2), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_call(K, &c[3], &err), TR_ERR_INVALID);
    assert_string_equal(err.msg, e2.msg);
    for (int i = 0; i < 4; i++) tr_kernels_unbind(K, &c[i]);

    /* refusals: same status and message as tr_k_*, and an empty call */
    struct tr_kernel_call bad;
    struct tr_error eb = {0}, ek = {0};
    memset(&bad, 0x5a, sizeof bad);
    assert_int_equal(tr_kernels_bind_matmul(K, &f.a, &f.w, &got[0], 0, 0, 1.0f, NULL, TR_ACT_NONE, &bad, &eb),
                     tr_k_matmul(K, &f.a, &f.w, &got[0], 0, 0, 1.0f, NULL, TR_ACT_NONE, &ek));
    assert_string_equal(eb.msg, ek.msg);
    assert_null(bad.prepared);
    assert_int_equal(tr_kernels_bind_bias_residual_layer_norm(K, &f.h, &f.w, NULL, NULL, NULL, 1e-5f, &got[1], &bad, &eb),
                     tr_k_bias_residual_layer_norm(K, &f.h, &f.w, NULL, NULL, NULL, 1e-5f, &got[1], &ek));
    assert_string_equal(eb.msg, ek.msg);
    assert_int_equal(tr_kernels_bind_scale_mask_softmax(K, &f.s, 1.0f, &f.bias, &got[2], &bad, &eb),
                     tr_k_scale_mask_softmax(K, &f.s, 1.0f, &f.bias, &got[2], &ek));
    assert_string_equal(eb.msg, ek.msg);
    assert_int_equal(tr_kernels_bind_embedding_sum_layer_norm(K, 2, tables, ids, &f.g, &f.b, -1.0f, &got[3], &bad, &eb),
                     tr_k_embedding_sum_layer_norm(K, 2, tables, ids, &f.g, &f.b, -1.0f, &got[3], &ek));
    assert_string_equal(eb.msg, ek.msg);
    assert_true(eb.status != TR_OK);
    assert_null(bad.prepared);
    tr_kernels_unbind(K, &bad);
    struct tr_tensor *all[] = {&f.a, &f.w, &f.bias, &f.h, &f.res, &f.g, &f.b, &f.s, &f.mask, &f.tab, &f.ids, &f.pos};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_tensor_free(all[i]);
    for (int i = 0; i < 4; i++) tr_test_tensor_free(&ref[i]), tr_test_tensor_free(&got[i]);
}

static void test_fused_bound(void **state) {
    (void)state;
    check_fused(TR_DTYPE_F32);
    check_fused(TR_DTYPE_BF16);
}

/* ---- no allocation per call ---- */

/* Bound calls of every kind, N rounds after one warm-up round: none allocates in
 * trident's code. Then the counter is shown able to fail: it sees what binding
 * allocates, and what a kernel's first call with a larger shape allocates (its scratch
 * growing): a malloc added to any kernel's call path is caught the same way. */
static void test_no_allocation_per_call(void **state) {
    (void)state;
#if !COUNT_ALLOCS
    print_message("allocation counting skipped: this is an AddressSanitizer build, which intercepts malloc itself\n");
#else
    struct tr_error err = {0};
    enum { NC = sizeof cases / sizeof cases[0], NF = 6, ROUNDS = 5 };
    static struct inst xs[NC];
    static struct tr_kernel_call calls[NC + NF];
    int n = 0;
    char others[512];
    count_start();
    for (int i = 0; i < NC; i++) {
        struct tr_attrs buf;
        inst_make(&xs[i], &cases[i], TR_DTYPE_F32);
        if (tr_kernels_bind(K, cases[i].op, case_attrs(&cases[i], TR_DTYPE_F32, &buf), xs[i].n_in, xs[i].in,
                            &xs[i].out_bind, &calls[n++], &err))
            fail_msg("%s: bind: %s", cases[i].name, err.msg);
    }
    /* a GEMM with its epilogue, the fused kernels, and shapes large enough for the
     * parallel paths (softmax, layer norm, attention over threads) */
    const int dt = TR_DTYPE_F32;
    struct tr_tensor a = tr_test_tensor(dt, 2, (int64_t[]){64, 96}), w = tr_test_tensor(dt, 2, (int64_t[]){96, 128});
    struct tr_tensor bias = tr_test_tensor(dt, 1, (int64_t[]){128}), h = tr_test_tensor(dt, 2, (int64_t[]){64, 128});
    struct tr_tensor res = tr_test_tensor(dt, 2, (int64_t[]){64, 128}), g = tr_test_tensor(dt, 1, (int64_t[]){128});
    struct tr_tensor ln = tr_test_tensor(dt, 2, (int64_t[]){64, 128}), s = tr_test_tensor(dt, 4, (int64_t[]){2, 4, 64, 64});
    struct tr_tensor mask = tr_test_tensor(dt, 4, (int64_t[]){2, 1, 1, 64}), sm = tr_test_tensor(dt, 4, (int64_t[]){2, 4, 64, 64});
    struct tr_tensor tab = tr_test_tensor(dt, 2, (int64_t[]){50, 128}), ids = tr_test_tensor(TR_DTYPE_I32, 2, (int64_t[]){4, 16});
    struct tr_tensor pos = tr_test_tensor(TR_DTYPE_I32, 1, (int64_t[]){16}), emb = tr_test_tensor(dt, 3, (int64_t[]){4, 16, 128});
    struct tr_tensor q = tr_test_tensor(dt, 4, (int64_t[]){2, 4, 128, 64}), att = tr_test_tensor(dt, 4, (int64_t[]){2, 4, 128, 64});
    struct tr_tensor big = tr_test_tensor(dt, 2, (int64_t[]){256, 256}), bigo = tr_test_tensor(dt, 2, (int64_t[]){256, 256});
    struct tr_tensor gb = tr_test_tensor(dt, 1, (int64_t[]){256});
    struct tr_tensor *all[] = {&a, &w, &bias, &h, &res, &g, &ln, &s, &mask, &sm, &tab, &q, &att, &big, &bigo, &gb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_randn(all[i], 300 + i, 1.0);
    tr_test_randint(&ids, 7, 50);
    tr_test_randint(&pos, 8, 16);
    struct tr_tensor tables[2] = {tab, tab}, idss[2] = {ids, pos}, qkv[3] = {q, q, q};
    struct tr_attrs eps = {.floats = {1e-5f}};
    if (tr_kernels_bind_matmul(K, &a, &w, &h, 0, 0, 0.5f, &bias, TR_ACT_GELU, &calls[n++], &err) ||
        tr_kernels_bind_bias_residual_layer_norm(K, &h, &bias, &res, &g, &bias, 1e-5f, &ln, &calls[n++], &err) ||
        tr_kernels_bind_scale_mask_softmax(K, &s, 0.125f, &mask, &sm, &calls[n++], &err) ||
        tr_kernels_bind_embedding_sum_layer_norm(K, 2, tables, idss, &g, &bias, 1e-5f, &emb, &calls[n++], &err) ||
        tr_kernels_bind(K, TR_OP_ATTENTION, NULL, 3, qkv, &att, &calls[n++], &err) ||
        tr_kernels_bind(K, TR_OP_LAYER_NORM, &eps, 3, (struct tr_tensor[]){big, gb, gb}, &bigo, &calls[n++], &err))
        fail_msg("bind: %s", err.msg);
    long bound_allocs = count_stop(others, sizeof others);
    print_message("binding %d calls: %ld allocations by trident's kernels (others: %s)\n", n, bound_allocs, others);
    assert_true(bound_allocs >= n); /* the counter sees our allocations: each plan is one */

    for (int i = 0; i < n; i++) /* warm-up: oneDNN's first execution of a primitive */
        if (tr_kernels_call(K, &calls[i], &err)) fail_msg("call %d: %s", i, err.msg);
    count_start();
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < n; i++)
            if (tr_kernels_call(K, &calls[i], &err)) fail_msg("call %d: %s", i, err.msg);
    long ours = count_stop(others, sizeof others);
    print_message("%d rounds of %d bound calls: %ld allocations by trident's kernels (others: %s)\n", ROUNDS, n, ours,
                  others);
    if (ours != 0) fail_msg("bound calls made %ld allocations in trident's kernels", ours);

    /* tr_k_* calls: the first with a new, larger shape grows the scratch (the counter
     * sees it: it can fail), the same calls again allocate nothing. The rows are wider
     * than any earlier call's per-thread need, whatever the ISA level made the earlier
     * tests reserve (a bf16 GEMM converted to f32 takes a large shared part). */
    struct tr_tensor x3 = tr_test_tensor(dt, 2, (int64_t[]){64, 32768}), o3 = tr_test_tensor(dt, 2, (int64_t[]){64, 32768});
    tr_test_randn(&x3, 9, 1.0);
    for (int round = 0; round < 2; round++) {
        count_start();
        if (tr_k_softmax(K, &x3, &o3, &err) || tr_k_layer_norm(K, &x3, NULL, NULL, 1e-5f, &o3, &err) ||
            tr_k_attention(K, &q, &q, &q, NULL, 0.125f, 1, 0, &att, &err) ||
            tr_k_matmul(K, &a, &w, &h, 0, 0, 0.5f, &bias, TR_ACT_TANH, &err) ||
            tr_k_bias_residual_layer_norm(K, &x3, NULL, &x3, NULL, NULL, 1e-5f, &o3, &err) ||
            tr_k_scale_mask_softmax(K, &x3, 0.5f, NULL, &o3, &err))
            fail_msg("tr_k_*: %s", err.msg);
        ours = count_stop(others, sizeof others);
        print_message("tr_k_* calls, %s time: %ld allocations by trident's kernels (others: %s)\n",
                      round ? "second" : "first", ours, others);
        if (round == 0) assert_true(ours > 0);
        else if (ours != 0) fail_msg("repeated tr_k_* calls made %ld allocations in trident's kernels", ours);
    }
    for (int i = 0; i < n; i++) tr_kernels_unbind(K, &calls[i]);
    for (int i = 0; i < NC; i++) inst_free(&xs[i]);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tr_test_tensor_free(all[i]);
    tr_test_tensor_free(&ids);
    tr_test_tensor_free(&pos);
    tr_test_tensor_free(&emb);
    tr_test_tensor_free(&x3);
    tr_test_tensor_free(&o3);
#endif
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_identical_f32, test_identical_bf16,
             test_bind_has_no_effect, test_refusals, test_reshape_alias, test_unbind_frees, test_fused_bound,
             test_no_allocation_per_call)
