/* The public kernels of kernels.h on a cuda context, against the same calls on the cpu:
 * every tr_k_* (layout, elementwise, norms, attention, training, optimizer, decoder
 * kernels) on random inputs of two shapes and three dtypes, the joint attention backward
 * bound, the math mode of the GEMMs (tf32 against strict f32), and tr_k_random through
 * cuRAND (moments, [a, b), same seed same bits), and cubins loaded side by side (each
 * module's kernel is its own, though all share one name). Without a CUDA device each of
 * those is skipped by name; what needs none runs everywhere: every public entry, called
 * on a stand-in cuda context, reaches the cuda side and never the cpu kernels. */
#include "test_cuda_common.h"

/* Internal to the kernels library: the context's layout, for the routing test's stand-in. */
#include "../plugins/kernels/cpu/cpu_internal.h"

/* One public kernel call, the same on either context: in are its inputs (host or
 * device tensors of k's device), out its output. */
typedef int (*kernel_fn)(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *out,
                         struct tr_error *e);

/* f on the cpu, then on cuda with device copies of the inputs, compared. */
static void compare_fn(const char *what, kernel_fn f, int n_in, const struct tr_tensor *in, enum tr_dtype out_dt,
                       int out_ndim, const int64_t *out_shape) {
    struct tr_tensor ref = tr_test_tensor(out_dt, out_ndim, out_shape);
    tr_test_poison(&ref);
    if (f(tr_test_k, in, &ref, &err)) fail_msg("%s: cpu: %s", what, err.msg);
    struct tr_tensor din[12];
    assert_true(n_in <= 12);
    for (int i = 0; i < n_in; i++) din[i] = to_dev(&in[i]);
    struct tr_tensor got = tr_test_tensor(out_dt, out_ndim, out_shape);
    tr_test_poison(&got);
    struct tr_tensor dout = to_dev(&got);
    if (f(G, din, &dout, &err)) fail_msg("%s: cuda: %s", what, err.msg);
    fetch(&got, &dout);
    check_out(what, "tr_k", &got, &ref);
    for (int i = 0; i < n_in; i++) tr_kernels_dealloc(G, din[i].data);
    tr_kernels_dealloc(G, dout.data);
    tr_test_tensor_free(&ref);
    tr_test_tensor_free(&got);
}

/* ---- the public tr_k_* entries on cuda (the same calls as on the cpu) ----
 * Each thunk calls one kernel with the arguments in P; compare_fn runs it on both. */
static struct {
    int op, which, flag, axis;
    float f0;
    int64_t i0;
    struct tr_attrs at;
    const int64_t *perm;
} P;

static int k_binary(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_binary(k, P.op, &in[0], &in[1], o, e);
}
static int k_unary(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_unary(k, P.op, &P.at, &in[0], o, e);
}
static int k_softmax(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_softmax(k, &in[0], o, e);
}
/* P.flag bit 0: gamma given, bit 1: beta given */
static int k_layer_norm(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_layer_norm(k, &in[0], P.flag & 1 ? &in[1] : NULL, P.flag & 2 ? &in[2] : NULL, 1e-5f, o, e);
}
static int k_embedding(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_embedding(k, &in[0], &in[1], o, e);
}
static int k_transpose(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_transpose(k, &in[0], P.perm, o, e);
}
static int k_slice(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_slice(k, &in[0], P.axis, P.i0, 2, o, e);
}
static int k_concat(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_concat(k, 3, in, P.axis, o, e);
}
static int k_reduce(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_reduce(k, P.op, &in[0], P.axis, o, e);
}
static int k_cast(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_cast(k, &in[0], o, e);
}
static int k_attention(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_attention(k, &in[0], &in[1], &in[2], P.flag ? &in[3] : NULL, 0.2f, 1, 0, o, e);
}
static int k_unary_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_unary_grad(k, P.op, 1, 0.5f, &in[0], &in[1], o, e);
}
static int k_softmax_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_softmax_grad(k, &in[0], &in[1], o, e);
}
static int k_ln_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_layer_norm_grad(k, &in[0], P.flag ? &in[2] : NULL, &in[1], 1e-5f, o, e);
}
static int k_ln_grad_gamma(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_layer_norm_grad_gamma(k, &in[0], &in[1], 1e-5f, o, e);
}
static int k_embedding_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_embedding_grad(k, &in[0], &in[1], o, e);
}
static int k_attention_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_attention_grad(k, &in[0], &in[1], &in[2], &in[3], &in[4], 0.25f, 0, 0, P.which, o, e);
}
/* dq, dk and dv at once (the two not compared go to buffers on k's device); P.flag set:
 * through the bound form */
static int k_attention_backward(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o,
                                struct tr_error *e) {
    struct tr_tensor g[3];
    int st;
    for (int i = 0; i < 3; i++) {
        g[i] = in[i];
        if (i == P.which) g[i] = *o;
        else if ((st = tr_kernels_alloc(k, tr_tensor_nbytes(&in[i]), &g[i].data, e)) != TR_OK) return st;
    }
    if (P.flag) {
        struct tr_kernel_call call;
        st = tr_kernels_bind_attention_backward(k, &in[0], &in[1], &in[2], &in[3], &in[4], NULL, NULL, 0.0f, 1, 0, &g[0], &g[1],
                                                &g[2], &call, e);
        if (!st) st = tr_kernels_call(k, &call, e);
        if (!st) st = tr_kernels_call(k, &call, e);
        tr_kernels_unbind(k, &call);
    } else {
        st = tr_k_attention_backward(k, &in[0], &in[1], &in[2], &in[3], &in[4], NULL, NULL, 0.25f, 1, 0, &g[0], &g[1], &g[2], e);
    }
    if (!st) st = tr_kernels_sync(k, e);
    for (int i = 0; i < 3; i++)
        if (i != P.which) tr_kernels_dealloc(k, g[i].data);
    return st;
}
static int k_broadcast(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_broadcast(k, &in[0], o, e);
}
static int k_max_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_max_grad(k, &in[0], &in[1], 1, 0, o, e);
}
static int k_slice_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_slice_grad(k, &in[0], -1, 3, 4, o, e);
}
static int k_cross_entropy(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_cross_entropy(k, &in[0], &in[1], 1, -100, o, e);
}
static int k_cross_entropy_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o,
                                struct tr_error *e) {
    return tr_k_cross_entropy_grad(k, &in[0], &in[1], 1, -100, &in[2], o, e);
}
static int k_mse(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_mse(k, &in[0], &in[1], o, e);
}
static int k_adamw(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_adamw_step(k, &in[0], &in[1], &in[2], &in[3], &in[4], 0.9f, 0.999f, 1e-8f, 0.01f, o, e);
}
static int k_rms_norm(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_rms_norm(k, &in[0], &in[1], 1e-6f, P.flag, o, e);
}
static int k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_rms_norm_grad(k, &in[0], &in[1], &in[2], 1e-6f, P.flag, o, e);
}
static int k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o,
                             struct tr_error *e) {
    return tr_k_rms_norm_grad_w(k, &in[0], &in[2], 1e-6f, o, e);
}
static int k_rope(struct tr_kernels *k, const struct tr_tensor *in, struct tr_tensor *o, struct tr_error *e) {
    return tr_k_rope(k, &in[0], &in[1], 10000.0f, 32, P.flag, o, e);
}

static void test_public_kernels(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 3; d++) {
        const enum tr_dtype dt = FLOATS[d];
        for (int s = 0; s < 2; s++) { /* two shapes of each: a small odd one and a larger one */
            int64_t R = s ? 37 : 5, C = s ? 515 : 33;
            int64_t sx[2] = {R, C}, sc[1] = {C}, sr[1] = {R};
            struct tr_tensor x = randn(dt, 2, sx, 500 + s), y = randn(dt, 2, sx, 501 + s), g = randn(dt, 1, sc, 502),
                             b = randn(dt, 1, sc, 503);
            struct tr_tensor xy[3] = {x, y, g}, xgb[3] = {x, g, b}, xc[2] = {x, g};
            P.op = TR_OP_SUB;
            compare_fn("tr_k_binary sub", k_binary, 2, xy, dt, 2, sx);
            P.op = TR_OP_MUL;
            compare_fn("tr_k_binary mul, broadcast row", k_binary, 2, xc, dt, 2, sx);
            P.op = TR_OP_GELU, P.at = (struct tr_attrs){.ints = {1}};
            compare_fn("tr_k_unary gelu tanh", k_unary, 1, &x, dt, 2, sx);
            P.op = TR_OP_SCALE, P.at = (struct tr_attrs){.floats = {-1.5f, 0.25f}};
            compare_fn("tr_k_unary scale", k_unary, 1, &x, dt, 2, sx);
            compare_fn("tr_k_softmax", k_softmax, 1, &x, dt, 2, sx);
            for (P.flag = 0; P.flag < 4; P.flag++) compare_fn("tr_k_layer_norm", k_layer_norm, 3, xgb, dt, 2, sx);
            /* layout */
            static const int64_t perm[2] = {1, 0};
            P.perm = perm;
            compare_fn("tr_k_transpose", k_transpose, 1, &x, dt, 2, (int64_t[]){C, R});
            P.axis = -1, P.i0 = 3;
            compare_fn("tr_k_slice", k_slice, 1, &x, dt, 2, (int64_t[]){R, (C - 3 + 1) / 2});
            struct tr_tensor cat[3] = {x, y, x};
            P.axis = 0;
            compare_fn("tr_k_concat", k_concat, 3, cat, dt, 2, (int64_t[]){3 * R, C});
            static const int rops[3] = {TR_OP_SUM, TR_OP_MEAN, TR_OP_MAX};
            for (int o = 0; o < 3; o++) {
                P.op = rops[o], P.axis = 1;
                compare_fn("tr_k_reduce", k_reduce, 1, &x, dt, 1, sr);
            }
            compare_fn("tr_k_cast to f32", k_cast, 1, &x, TR_DTYPE_F32, 2, sx);
            compare_fn("tr_k_broadcast", k_broadcast, 1, &g, dt, 2, sx);
            /* training */
            for (int i = 0; i < 2; i++) {
                P.op = i ? TR_OP_SILU : TR_OP_GELU;
                compare_fn("tr_k_unary_grad", k_unary_grad, 2, xy, dt, 2, sx);
            }
            struct tr_tensor sm = tr_test_tensor(dt, 2, sx);
            CHECK_OK(tr_k_softmax(tr_test_k, &x, &sm, &err));
            struct tr_tensor sg[2] = {sm, y};
            compare_fn("tr_k_softmax_grad", k_softmax_grad, 2, sg, dt, 2, sx);
            for (P.flag = 0; P.flag < 2; P.flag++)
                compare_fn("tr_k_layer_norm_grad", k_ln_grad, 3, xy, dt, 2, sx);
            compare_fn("tr_k_layer_norm_grad_gamma", k_ln_grad_gamma, 2, xy, dt, 1, sc);
            struct tr_tensor dm = randn(dt, 1, sr, 504);
            struct tr_tensor mg[2] = {x, dm};
            compare_fn("tr_k_max_grad", k_max_grad, 2, mg, dt, 2, sx);
            struct tr_tensor dsl = randn(dt, 2, (int64_t[]){R, (C - 3 + 3) / 4}, 505);
            compare_fn("tr_k_slice_grad", k_slice_grad, 1, &dsl, dt, 2, sx);
            compare_fn("tr_k_mse", k_mse, 2, xy, TR_DTYPE_F32, 0, NULL);
            struct tr_tensor labels = tr_test_tensor(TR_DTYPE_I64, 1, sr), dloss = randn(TR_DTYPE_F32, 0, NULL, 506);
            tr_test_randint(&labels, 507, C);
            ((int64_t *)labels.data)[1] = -100;
            struct tr_tensor ce[3] = {x, labels, dloss};
            compare_fn("tr_k_cross_entropy", k_cross_entropy, 2, ce, TR_DTYPE_F32, 0, NULL);
            compare_fn("tr_k_cross_entropy_grad", k_cross_entropy_grad, 3, ce, dt, 2, sx);
            /* embedding and its gradient: ids with repeats */
            struct tr_tensor ids = tr_test_tensor(TR_DTYPE_I32, 2, (int64_t[]){3, R});
            tr_test_randint(&ids, 508, 11);
            struct tr_tensor table = randn(dt, 2, (int64_t[]){11, C}, 509);
            struct tr_tensor em[2] = {table, ids};
            compare_fn("tr_k_embedding", k_embedding, 2, em, dt, 3, (int64_t[]){3, R, C});
            struct tr_tensor dy = randn(dt, 3, (int64_t[]){3, R, C}, 510);
            struct tr_tensor eg[2] = {ids, dy};
            compare_fn("tr_k_embedding_grad", k_embedding_grad, 2, eg, dt, 2, (int64_t[]){11, C});
            /* optimizer */
            struct tr_tensor ad[5] = {x, randn(TR_DTYPE_F32, 2, sx, 511), randn(TR_DTYPE_F32, 2, sx, 512),
                                      tr_test_tensor(TR_DTYPE_F32, 0, NULL), tr_test_tensor(TR_DTYPE_F32, 0, NULL)};
            for (int64_t i = 0; i < tr_tensor_numel(&ad[2]); i++)
                tr_tensor_set_f64(&ad[2], i, fabs(tr_tensor_get_f64(&ad[2], i)) * 0.01);
            *(float *)ad[3].data = 1e-3f, *(float *)ad[4].data = 2.0f;
            compare_fn("tr_k_adamw_step", k_adamw, 5, ad, dt, 2, sx);
            /* decoder LLM kernels */
            struct tr_tensor rn[3] = {x, g, y};
            for (P.flag = 0; P.flag < 2; P.flag++) {
                compare_fn("tr_k_rms_norm", k_rms_norm, 2, rn, dt, 2, sx);
                compare_fn("tr_k_rms_norm_grad", k_rms_norm_grad, 3, rn, dt, 2, sx);
            }
            compare_fn("tr_k_rms_norm_grad_w", k_rms_norm_grad_w, 3, rn, dt, 1, sc);
            int64_t sq[4] = {2, 3, R, 64};
            struct tr_tensor rp[2] = {randn(dt, 4, sq, 513), tr_test_tensor(TR_DTYPE_I32, 1, sr)};
            tr_test_randint(&rp[1], 514, 2048);
            for (P.flag = 0; P.flag < 2; P.flag++) compare_fn("tr_k_rope", k_rope, 2, rp, dt, 4, sq);
            /* attention, its gradient and the joint backward (grouped heads, a padding mask) */
            int64_t aq[4] = {2, 4, R, 32}, ak[4] = {2, 2, R + 3, 32}, am[4] = {2, 1, 1, R + 3};
            struct tr_tensor at[5] = {randn(dt, 4, aq, 515), randn(dt, 4, ak, 516), randn(dt, 4, ak, 517),
                                      randn(dt, 4, aq, 518), tr_test_tensor(TR_DTYPE_F32, 4, am)};
            for (int64_t i = 0; i < 2 * (R + 3); i++) ((float *)at[4].data)[i] = i % (R + 3) >= R ? -10000.0f : 0.0f;
            struct tr_tensor atm[4] = {at[0], at[1], at[2], at[4]};
            for (P.flag = 0; P.flag < 2; P.flag++) compare_fn("tr_k_attention", k_attention, 4, atm, dt, 4, aq);
            for (P.which = 0; P.which < 3; P.which++) {
                const int64_t *shape = P.which ? ak : aq;
                compare_fn("tr_k_attention_grad", k_attention_grad, 5, at, dt, 4, shape);
                for (P.flag = 0; P.flag < 2; P.flag++)
                    compare_fn(P.flag ? "bound attention_backward" : "tr_k_attention_backward", k_attention_backward, 5,
                               at, dt, 4, shape);
            }
            free_all(5, at);
            free_all(2, rp);
            free_all(4, &ad[1]); /* ad[0] is x, freed below */
            tr_test_tensor_free(&x), tr_test_tensor_free(&y), tr_test_tensor_free(&g), tr_test_tensor_free(&b);
            tr_test_tensor_free(&sm), tr_test_tensor_free(&dm), tr_test_tensor_free(&dsl);
            tr_test_tensor_free(&labels), tr_test_tensor_free(&dloss), tr_test_tensor_free(&ids);
            tr_test_tensor_free(&table), tr_test_tensor_free(&dy);
        }
    }
}

/* math = tf32 puts f32 GEMMs on TF32 tensor cores, f32 keeps them strict: the two give
 * different results for one shape (the compute type is part of the plan key), f32 within
 * the f32 tolerance of the cpu, tf32 within TF32's (10 mantissa bits: the bf16 bound). */
static void test_math_mode(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    SKIP_ON_CPU_STAND_IN(); /* tf32 */
    int64_t sa[2] = {256, 512}, sb[2] = {512, 192}, sc[2] = {256, 192};
    struct tr_tensor a = randn(TR_DTYPE_F32, 2, sa, 600), b = randn(TR_DTYPE_F32, 2, sb, 601);
    struct tr_tensor ref = tr_test_tensor(TR_DTYPE_F32, 2, sc), got = tr_test_tensor(TR_DTYPE_F32, 2, sc);
    CHECK_OK(tr_k_matmul(tr_test_k, &a, &b, &ref, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err));
    double *r = tr_test_to_f64(&ref);
    struct tr_tensor da = to_dev(&a), db = to_dev(&b), dc = to_dev(&got);
    double e[2];
    static const enum tr_math modes[2] = {TR_MATH_F32, TR_MATH_TF32};
    for (int m = 0; m < 2; m++) {
        CHECK_OK(tr_kernels_set_math(G, modes[m], &err));
        assert_int_equal(tr_kernels_math(G), modes[m]);
        for (int bound = 0; bound < 2; bound++) {
            poison_dev(&got, &dc);
            if (bound) {
                struct tr_kernel_call call;
                CHECK_OK(tr_kernels_bind_matmul(G, &da, &db, &dc, 0, 0, 1.0f, NULL, TR_ACT_NONE, &call, &err));
                CHECK_OK(tr_kernels_call(G, &call, &err));
                tr_kernels_unbind(G, &call);
            } else {
                CHECK_OK(tr_k_matmul(G, &da, &db, &dc, 0, 0, 1.0f, NULL, TR_ACT_NONE, &err));
            }
            fetch(&got, &dc);
            e[m] = tr_test_rel_err(&got, r);
            printf("matmul f32 with math %s (%s): relative error %.3g\n", tr_math_name(modes[m]),
                   bound ? "bound" : "tr_k_matmul", e[m]);
        }
    }
    CHECK_OK(tr_kernels_set_math(G, TR_MATH_DEFAULT, &err));
    assert_true(e[0] < 1e-5);
    assert_true(e[1] < 1e-2);
    assert_true(e[1] > e[0]); /* TF32 rounds the operands: if it did not, the mode was ignored */
    free(r);
    tr_kernels_dealloc(G, da.data), tr_kernels_dealloc(G, db.data), tr_kernels_dealloc(G, dc.data);
    tr_test_tensor_free(&a), tr_test_tensor_free(&b), tr_test_tensor_free(&ref), tr_test_tensor_free(&got);
}

/* tr_k_random through cuRAND: the distributions' moments, [a, b) for uniforms, the same
 * seed the same bits, another seed other bits; odd counts (cuRAND's normals come in
 * pairs) and bf16 out. */
static void test_random(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    for (int d = 0; d < 2; d++)
        for (int dist = 0; dist < 2; dist++) {
            int64_t n = 100001;
            struct tr_tensor h1 = tr_test_tensor(FLOATS[d], 1, &n), h2 = tr_test_tensor(FLOATS[d], 1, &n);
            tr_test_poison(&h1);
            struct tr_tensor dv = to_dev(&h1);
            float a = dist ? 1.0f : -2.0f, b = dist ? 2.0f : 3.0f;
            CHECK_OK(tr_k_random(G, (enum tr_random_dist)dist, 42, a, b, &dv, &err));
            fetch(&h1, &dv);
            double mean, sd, lo, hi;
            tr_test_moments(&h1, &mean, &sd, &lo, &hi);
            double want_mean = dist ? a : (a + b) / 2, want_sd = dist ? b : (b - a) / sqrt(12.0);
            printf("random %s %s: mean %.4f (%.4f), sd %.4f (%.4f), range [%.3f, %.3f]\n", dist ? "normal" : "uniform",
                   tr_dtype_name(FLOATS[d]), mean, want_mean, sd, want_sd, lo, hi);
            assert_true(fabs(mean - want_mean) < 0.02 * want_sd + 0.01);
            assert_true(fabs(sd - want_sd) < 0.02 * want_sd);
            if (!dist) assert_true(lo >= a && hi <= b);
            CHECK_OK(tr_k_random(G, (enum tr_random_dist)dist, 42, a, b, &dv, &err));
            fetch(&h2, &dv);
            assert_memory_equal(h1.data, h2.data, tr_tensor_nbytes(&h1));
            CHECK_OK(tr_k_random(G, (enum tr_random_dist)dist, 43, a, b, &dv, &err));
            fetch(&h2, &dv);
            assert_true(memcmp(h1.data, h2.data, tr_tensor_nbytes(&h1)) != 0);
            tr_kernels_dealloc(G, dv.data);
            tr_test_tensor_free(&h1), tr_test_tensor_free(&h2);
        }
}

/* What runs without a device: every public entry on a cuda context goes to the cuda side.
 * A stand-in context (device type cuda, no CUDA state) gets the cuda side's refusal ("no
 * CUDA device found" where CUDA was not built, "not a cuda kernels context" or "without
 * its CUDA state" where it was), never the cpu kernels' "is not the cpu". */
static void expect_routed(const char *what, int st, const struct tr_error *e) {
    if (st == TR_OK) fail_msg("%s: the stand-in cuda context ran it", what);
    if (strstr(e->msg, "not the cpu") || strstr(e->msg, "not a cpu"))
        fail_msg("%s: went to the cpu kernels: %s", what, e->msg);
    if (!strstr(e->msg, "no CUDA device found") && !strstr(e->msg, "cuda"))
        fail_msg("%s: unexpected refusal: %s", what, e->msg);
}

static void test_routing(void **state) {
    (void)state;
    struct tr_kernels *k = calloc(1, sizeof *k);
    assert_non_null(k);
    k->device_type = TR_DEVICE_CUDA;
    int64_t s4[4] = {1, 2, 3, 4}, s2[2] = {3, 4}, s1[1] = {4};
    struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 4, s4), m = tr_test_tensor(TR_DTYPE_F32, 2, s2),
                     v = tr_test_tensor(TR_DTYPE_F32, 1, s1), ids = tr_test_tensor(TR_DTYPE_I32, 1, s1),
                     o = tr_test_tensor(TR_DTYPE_F32, 4, s4);
    struct tr_tensor xs[3] = {x, x, x}, idv[1] = {ids};
    x.device = m.device = v.device = ids.device = o.device = TR_DEVICE_CUDA;
    struct tr_error e;
    struct tr_attrs at = {.floats = {1.0f}};
    static const int64_t perm[4] = {0, 1, 3, 2};
    struct tr_kernel_call call;
#define R(call_) expect_routed(#call_, (e = (struct tr_error){0}, call_), &e)
    R(tr_k_matmul(k, &m, &m, &m, 0, 1, 1.0f, &v, TR_ACT_GELU, &e));
    R(tr_k_binary(k, TR_OP_ADD, &x, &x, &o, &e));
    R(tr_k_unary(k, TR_OP_SCALE, &at, &x, &o, &e));
    R(tr_k_softmax(k, &x, &o, &e));
    R(tr_k_layer_norm(k, &x, &v, &v, 1e-5f, &o, &e));
    R(tr_k_layer_norm(k, &x, NULL, &v, 1e-5f, &o, &e));
    R(tr_k_embedding(k, &m, &ids, &m, &e));
    R(tr_k_transpose(k, &x, perm, &o, &e));
    R(tr_k_slice(k, &x, 3, 0, 1, &o, &e));
    R(tr_k_concat(k, 3, xs, 0, &o, &e));
    R(tr_k_reduce(k, TR_OP_SUM, &x, 3, &o, &e));
    R(tr_k_cast(k, &x, &o, &e));
    R(tr_k_attention(k, &x, &x, &x, NULL, 0.5f, 1, 0, &o, &e));
    R(tr_k_bias_residual_layer_norm(k, &x, &v, &x, &v, &v, 1e-5f, &o, &e));
    R(tr_k_scale_mask_softmax(k, &x, 0.5f, &x, &o, &e));
    R(tr_k_embedding_sum_layer_norm(k, 1, &m, idv, &v, &v, 1e-5f, &m, &e));
    R(tr_k_unary_grad(k, TR_OP_GELU, 0, 1.0f, &x, &x, &o, &e));
    R(tr_k_softmax_grad(k, &x, &x, &o, &e));
    R(tr_k_layer_norm_grad(k, &x, NULL, &x, 1e-5f, &o, &e));
    R(tr_k_layer_norm_grad_gamma(k, &x, &x, 1e-5f, &v, &e));
    R(tr_k_embedding_grad(k, &ids, &m, &m, &e));
    R(tr_k_attention_grad(k, &x, &x, &x, &x, NULL, 0.5f, 0, 0, 1, &o, &e));
    R(tr_k_attention_backward(k, &x, &x, &x, &x, NULL, NULL, NULL, 0.5f, 0, 0, &o, NULL, &o, &e));
    R(tr_k_broadcast(k, &v, &o, &e));
    R(tr_k_max_grad(k, &x, &x, 0, 1, &o, &e));
    R(tr_k_slice_grad(k, &x, 0, 0, 1, &o, &e));
    R(tr_k_cross_entropy(k, &m, &ids, 0, 0, &v, &e));
    R(tr_k_cross_entropy_grad(k, &m, &ids, 0, 0, &v, &m, &e));
    R(tr_k_mse(k, &x, &x, &v, &e));
    R(tr_k_adamw_step(k, &x, &x, &x, &v, &v, 0.9f, 0.999f, 1e-8f, 0.0f, &o, &e));
    R(tr_k_rms_norm(k, &x, &v, 1e-6f, 0, &o, &e));
    R(tr_k_rms_norm_grad(k, &x, &v, &x, 1e-6f, 0, &o, &e));
    R(tr_k_rms_norm_grad_w(k, &x, &x, 1e-6f, &v, &e));
    R(tr_k_rope(k, &x, &ids, 10000.0f, 0, 0, &o, &e));
    R(tr_k_random(k, TR_RANDOM_NORMAL, 1, 0.0f, 1.0f, &o, &e));
    R(tr_kernels_run(k, TR_OP_RELU, NULL, 1, &x, &o, &e));
    R(tr_kernels_bind(k, TR_OP_RELU, NULL, 1, &x, &o, &call, &e));
    assert_null(call.fn); /* a failed bind leaves the call empty */
    R(tr_kernels_bind(k, TR_OP_MATMUL, NULL, 2, xs, &o, &call, &e));
    R(tr_kernels_bind_matmul(k, &m, &m, &m, 0, 0, 1.0f, &v, TR_ACT_NONE, &call, &e));
    R(tr_kernels_bind_bias_residual_layer_norm(k, &x, NULL, NULL, &v, &v, 1e-5f, &o, &call, &e));
    R(tr_kernels_bind_scale_mask_softmax(k, &x, 0.5f, NULL, &o, &call, &e));
    R(tr_kernels_bind_embedding_sum_layer_norm(k, 1, &m, idv, &v, &v, 1e-5f, &m, &call, &e));
    R(tr_kernels_bind_attention_backward(k, &x, &x, &x, &x, NULL, NULL, NULL, 0.0f, 0, 0, &o, &o, &o, &call, &e));
#undef R
    /* the arguments are still checked before the device: a bad distribution is refused */
    assert_int_equal(tr_k_random(k, (enum tr_random_dist)7, 1, 0.0f, 1.0f, &o, &e), TR_ERR_INVALID);
    x.device = m.device = v.device = ids.device = o.device = TR_DEVICE_CPU;
    tr_test_tensor_free(&x), tr_test_tensor_free(&m), tr_test_tensor_free(&v), tr_test_tensor_free(&ids);
    tr_test_tensor_free(&o);
    free(k);
}

/* ---- modules side by side ----
 * A program's generated kernels are one module, and their names repeat from program to
 * program (the jax backend's trj_k0, trj_k1, ...): a kernel must come from the module it
 * is asked of, while others are loaded or after one was freed. cuemu once handed the
 * second module back as the first (a generate's decode pass ran its prefill's kernels). */
static struct tr_cuda_module *module_writing(int v) {
    char src[160];
    snprintf(src, sizeof src, "extern \"C\" __global__ void trj_k0(int *y) { if (threadIdx.x == 0) y[0] = %d; }\n", v);
    void *cubin = NULL;
    size_t size = 0;
    int sm = 0;
    CHECK_OK(tr_kernels_cuda_sm(G, &sm, &err));
    CHECK_OK(tr_cuda_nvrtc_compile(src, "modules_apart.cu", sm, &cubin, &size, NULL, &err));
    struct tr_cuda_module *m = NULL;
    CHECK_OK(tr_cuda_module_load(G, cubin, size, "modules_apart.cubin", &m, &err));
    free(cubin);
    return m;
}

/* What m's trj_k0 writes. */
static int module_runs(struct tr_cuda_module *m, int *dy) {
    void *fn = NULL, *params[1] = {&dy};
    const unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    CHECK_OK(tr_cuda_module_kernel(m, "trj_k0", &fn, &err));
    CHECK_OK(tr_cuda_module_launch(G, m, fn, "trj_k0", grid, block, 0, params, &err));
    int y = 0;
    CHECK_OK(tr_kernels_sync(G, &err));
    CHECK_OK(tr_kernels_to_host(G, &y, dy, sizeof y, &err));
    return y;
}

static void test_modules_apart(void **state) {
    (void)state;
    SKIP_WITHOUT_GPU();
    SKIP_ON_CPU_STAND_IN();
    int *dy = NULL;
    CHECK_OK(tr_kernels_alloc(G, sizeof *dy, (void **)&dy, &err));
    struct tr_cuda_module *a = module_writing(1), *b = module_writing(2);
    assert_int_equal(module_runs(a, dy), 1);
    assert_int_equal(module_runs(b, dy), 2);
    tr_cuda_module_free(a); /* a third after a free: neither the freed one nor b */
    struct tr_cuda_module *c = module_writing(3);
    assert_int_equal(module_runs(c, dy), 3);
    assert_int_equal(module_runs(b, dy), 2);
    tr_cuda_module_free(b);
    tr_cuda_module_free(c);
    tr_kernels_dealloc(G, dy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routing),   cmocka_unit_test(test_public_kernels),
        cmocka_unit_test(test_math_mode), cmocka_unit_test(test_random),
        cmocka_unit_test(test_modules_apart),
    };
    return cmocka_run_group_tests(tests, cuda_setup, cuda_teardown);
}
