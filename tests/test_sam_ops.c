/* ATTENTION_REL (ops.h: attention with a decomposed relative-position bias, SAM's ViT):
 * the cpu kernels through the dispatcher against the float64 oracle (random inputs, never
 * zero, outputs poisoned first, f32 and bf16, grids wider than one key tile, grouped
 * heads, f32 bias beside bf16 q); its ATTENTION_REL_LSE (alone, and with the output in
 * one pass); its gradient kernel for each of the five operands, recomputing the
 * statistics and reading the forward's saved y and lse (the op, the joint backward
 * direct and bound); the
 * shape rule's refusals; the rule against finite differences; every backend, forward and
 * backward, against the evaluator; and the memory the fused form saves at SAM's 64x64
 * grid, measured as the process's peak resident size. */
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

static struct tr_graph *fresh_graph(void) {
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    return g;
}

struct rel_case {
    int64_t B, H, Hk, Tq, Kh, Kw, D, Dv;
    int f32_bias; /* rel_h, rel_w in f32 beside a bf16 q */
};

/* The forward's statistics: ATTENTION_REL_LSE alone and with the output in one pass
 * (tr_k_attention_rel_lse) against the oracle's lse, then the gradients read from them:
 * the op with 8 inputs for each operand, and all five at once, direct and bound. With
 * the saved y in q's dtype (delta = dy·y carries its rounding) every gradient is held to
 * q's dtype's tolerance, the f32 bias terms' of bf16 data too. */
static void rel_saved(enum tr_dtype dt, const struct rel_case *c, const struct tr_tensor *in,
                      const struct tr_ref_attn *ra, double *const *f, double *const *g, const char *base) {
    struct tr_error err = {0};
    struct tr_tensor y = TENSOR(dt, c->B, c->H, c->Tq, c->Dv), lse = TENSOR(TR_DTYPE_F32, c->B, c->H, c->Tq);
    struct tr_tensor lse2 = TENSOR(TR_DTYPE_F32, c->B, c->H, c->Tq);
    tr_test_poison(&y);
    tr_test_poison(&lse);
    tr_test_poison(&lse2);
    double *rl = malloc(sizeof(double) * (size_t)tr_tensor_numel(&lse)), *ry = malloc(sizeof(double) * (size_t)tr_tensor_numel(&y));
    tr_ref_attention_lse(ra, f[0], f[1], rl);
    tr_ref_attention(ra, f[0], f[1], f[2], ry);
    char what[240];
    struct tr_attrs at = {.floats = {0.0f}};
    CHECK_OK(run_op(TR_OP_ATTENTION_REL_LSE, &at, 5, in, &lse2, &err));
    snprintf(what, sizeof what, "%s lse alone", base);
    check_close(what, &lse2, rl);
    CHECK_OK(tr_k_attention_rel_lse(tr_test_k, in, 0.0f, &y, &lse, &err));
    snprintf(what, sizeof what, "%s with its lse: out", base);
    check_close(what, &y, ry);
    snprintf(what, sizeof what, "%s with its lse: lse", base);
    check_close(what, &lse, rl);
    static const char *const names[5] = {"dq", "dk", "dv", "drel_h", "drel_w"};
    const double tol = tr_test_tol(dt);
    struct tr_tensor gin[8] = {in[0], in[1], in[2], in[3], in[4], in[5], y, lse};
    for (int w = 0; w < 5; w++) {
        struct tr_tensor d = tr_test_tensor((enum tr_dtype)in[w].dtype, in[w].ndim, in[w].shape);
        tr_test_poison(&d);
        struct tr_attrs ga = {.ints = {w}, .n_ints = 1};
        CHECK_OK(run_op(TR_OP_ATTENTION_REL_GRAD, &ga, 8, gin, &d, &err));
        snprintf(what, sizeof what, "%s %s from the saved y and lse", base, names[w]);
        tr_assert_close(what, &d, g[w], tol);
        tr_test_tensor_free(&d);
    }
    for (int form = 0; form < 2; form++) {
        struct tr_tensor d[5];
        struct tr_tensor *dp[5];
        for (int w = 0; w < 5; w++) {
            d[w] = tr_test_tensor((enum tr_dtype)in[w].dtype, in[w].ndim, in[w].shape);
            tr_test_poison(&d[w]);
            dp[w] = &d[w];
        }
        if (form) {
            struct tr_kernel_call call;
            const struct tr_tensor *cp[5] = {dp[0], dp[1], dp[2], dp[3], dp[4]};
            CHECK_OK(tr_kernels_bind_attention_rel_backward(tr_test_k, in, &y, &lse, 0.0f, cp, &call, &err));
            CHECK_OK(tr_kernels_call(tr_test_k, &call, &err));
            tr_kernels_unbind(tr_test_k, &call);
        } else {
            CHECK_OK(tr_k_attention_rel_backward(tr_test_k, in, &y, &lse, 0.0f, dp, &err));
        }
        for (int w = 0; w < 5; w++) {
            snprintf(what, sizeof what, "%s %s joint%s, saved", base, names[w], form ? " bound" : "");
            tr_assert_close(what, &d[w], g[w], tol);
            tr_test_tensor_free(&d[w]);
        }
    }
    /* y and lse come together */
    struct tr_tensor *dq[5] = {NULL};
    struct tr_tensor d0 = tr_test_tensor(dt, 4, in[0].shape);
    dq[0] = &d0;
    assert_int_equal(tr_k_attention_rel_backward(tr_test_k, in, &y, NULL, 0.0f, dq, &err), TR_ERR_INVALID);
    tr_test_tensor_free(&d0);
    free(rl);
    free(ry);
    tr_test_tensor_free(&y);
    tr_test_tensor_free(&lse);
    tr_test_tensor_free(&lse2);
}

static void rel_run(enum tr_dtype dt, const struct rel_case *c, uint64_t seed) {
    struct tr_error err = {0};
    const int64_t Tk = c->Kh * c->Kw;
    const enum tr_dtype bdt = c->f32_bias ? TR_DTYPE_F32 : dt;
    struct tr_tensor in[6] = {
        TENSOR(dt, c->B, c->H, c->Tq, c->D),       TENSOR(dt, c->B, c->Hk, Tk, c->D),
        TENSOR(dt, c->B, c->Hk, Tk, c->Dv),        TENSOR(bdt, c->B, c->H, c->Tq, c->Kh),
        TENSOR(bdt, c->B, c->H, c->Tq, c->Kw),     TENSOR(dt, c->B, c->H, c->Tq, c->Dv),
    };
    static const double scales[6] = {1.0, 1.0, 1.0, 1.5, 1.5, 1.0};
    double *f[6];
    for (int i = 0; i < 6; i++) {
        tr_test_randn(&in[i], seed + (uint64_t)i, scales[i]);
        f[i] = tr_test_to_f64(&in[i]);
    }
    const double scale = 1.0 / sqrt((double)c->D);
    struct tr_ref_attn ra = {c->B, c->H, c->Hk, c->Tq, Tk, c->D, c->Dv, (double)(float)scale, 0, 0,
                             {0, NULL, NULL}, f[3], f[4], c->Kh, c->Kw};
    char what[200];
    int n = snprintf(what, sizeof what, "attention_rel %s B %lld H %lld/%lld Tq %lld grid %lldx%lld D %lld/%lld%s",
                     tr_dtype_name(dt), (long long)c->B, (long long)c->H, (long long)c->Hk, (long long)c->Tq,
                     (long long)c->Kh, (long long)c->Kw, (long long)c->D, (long long)c->Dv,
                     c->f32_bias ? " f32 bias" : "");
    struct tr_attrs at = {.floats = {0.0f}}; /* 0: 1/sqrt(D) */
    struct tr_tensor out = TENSOR(dt, c->B, c->H, c->Tq, c->Dv);
    tr_test_poison(&out);
    CHECK_OK(run_op(TR_OP_ATTENTION_REL, &at, 5, in, &out, &err));
    double *ref = malloc(sizeof(double) * (size_t)tr_tensor_numel(&out));
    tr_ref_attention(&ra, f[0], f[1], f[2], ref);
    check_close(what, &out, ref);
    free(ref);
    tr_test_tensor_free(&out);
    /* each operand's gradient at the random dy */
    static const char *const names[5] = {"dq", "dk", "dv", "drel_h", "drel_w"};
    double *g[5];
    for (int w = 0; w < 5; w++) g[w] = malloc(sizeof(double) * (size_t)tr_tensor_numel(&in[w]));
    tr_ref_attention_rel_grad(&ra, f[0], f[1], f[2], f[5], g[0], g[1], g[2], g[3], g[4]);
    for (int w = 0; w < 5; w++) {
        struct tr_tensor d = tr_test_tensor((enum tr_dtype)in[w].dtype, in[w].ndim, in[w].shape);
        tr_test_poison(&d);
        struct tr_attrs ga = {.ints = {w}, .n_ints = 1};
        CHECK_OK(run_op(TR_OP_ATTENTION_REL_GRAD, &ga, 6, in, &d, &err));
        snprintf(what + n, sizeof what - (size_t)n, " %s", names[w]);
        check_close(what, &d, g[w]);
        what[n] = '\0';
        tr_test_tensor_free(&d);
    }
    rel_saved(dt, c, in, &ra, f, g, what);
    for (int w = 0; w < 5; w++) free(g[w]);
    for (int i = 0; i < 6; i++) {
        free(f[i]);
        tr_test_tensor_free(&in[i]);
    }
}

static void test_attention_rel_kernels(void **state) {
    (void)state;
    static const struct rel_case cases[] = {
        {1, 2, 2, 35, 7, 5, 8, 8, 0},    /* a 7x5 window, self-attention */
        {2, 4, 2, 81, 9, 9, 16, 12, 0},  /* 81 keys: two key tiles; grouped heads; Dv != D */
        {1, 1, 1, 130, 10, 13, 4, 4, 0}, /* three query and key tiles, narrow heads */
        {3, 2, 1, 6, 2, 3, 8, 8, 1},     /* f32 bias terms, Tq != Tk */
    };
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16};
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            if (cases[i].f32_bias && dts[d] == TR_DTYPE_F32) continue;
            rel_run(dts[d], &cases[i], 100 + 10 * i + (uint64_t)d);
        }
}

/* The shape rule: the bias terms must be q's (B,H,Tq) with Kh·Kw = Tk. */
static void test_graph_refusals(void **state) {
    (void)state;
    struct {
        const char *what;
        int64_t rh[4], rw[4];
        const char *needle;
    } bad[] = {
        {"Kh·Kw != Tk", {1, 2, 12, 3}, {1, 2, 12, 3}, "Kh·Kw = Tk = 12"},
        {"rel_h's heads", {1, 1, 12, 3}, {1, 2, 12, 4}, "rel_h f32[1,1,12,3]"},
        {"rel_w's queries", {1, 2, 12, 3}, {1, 2, 11, 4}, "rel_w f32[1,2,11,4]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct tr_graph *g = fresh_graph();
        int q = tr_input(g, "q", TR_DTYPE_F32, 4, SH(1, 2, 12, 8));
        int k = tr_input(g, "k", TR_DTYPE_F32, 4, SH(1, 2, 12, 8));
        int v = tr_input(g, "v", TR_DTYPE_F32, 4, SH(1, 2, 12, 8));
        int rh = tr_input(g, "rh", TR_DTYPE_F32, 4, bad[i].rh);
        int rw = tr_input(g, "rw", TR_DTYPE_F32, 4, bad[i].rw);
        int y = tr_attention_rel(g, q, k, v, rh, rw, 0.0f);
        tr_test_expect_refused(bad[i].what, g, y, (const char *const[]){"attention_rel", bad[i].needle, NULL});
    }
    /* the resolved scale, and a bf16 q with f32 bias terms accepted */
    struct tr_graph *g = fresh_graph();
    int q = tr_input(g, "q", TR_DTYPE_BF16, 4, SH(2, 2, 12, 16));
    int k = tr_input(g, "k", TR_DTYPE_BF16, 4, SH(2, 2, 12, 16));
    int v = tr_input(g, "v", TR_DTYPE_BF16, 4, SH(2, 2, 12, 8));
    int rh = tr_input(g, "rh", TR_DTYPE_F32, 4, SH(2, 2, 12, 3));
    int rw = tr_input(g, "rw", TR_DTYPE_F32, 4, SH(2, 2, 12, 4));
    int y = tr_attention_rel(g, q, k, v, rh, rw, 0.0f);
    assert_true(y >= 0);
    assert_int_equal(tr_node_dtype(g, y), TR_DTYPE_BF16);
    assert_int_equal(tr_node_shape(g, y)[3], 8);
    assert_true(tr_node_attrs(g, y)->floats[0] == tr_attention_default_scale(16));
    /* ATTENTION_REL_LSE: (B,H,Tq) f32 of bf16 operands, the scale resolved as the forward's */
    int fwd[5] = {q, k, v, rh, rw};
    struct tr_attrs la = {.floats = {0.0f}};
    int l = tr_graph_add_node(g, TR_OP_ATTENTION_REL_LSE, 5, fwd, &la);
    assert_true(l >= 0);
    assert_int_equal(tr_node_dtype(g, l), TR_DTYPE_F32);
    assert_int_equal(tr_node_ndim(g, l), 3);
    assert_memory_equal(tr_node_shape(g, l), SH(2, 2, 12), 3 * sizeof(int64_t));
    assert_true(tr_node_attrs(g, l)->floats[0] == tr_attention_default_scale(16));
    tr_graph_free(g);
    /* ATTENTION_REL_GRAD takes 6 inputs, or 8 with the forward's y and lse, each checked */
    for (int bad = 0; bad < 4; bad++) {
        g = fresh_graph();
        int a[8] = {tr_input(g, "q", TR_DTYPE_BF16, 4, SH(1, 2, 12, 16)), tr_input(g, "k", TR_DTYPE_BF16, 4, SH(1, 2, 12, 16)),
                    tr_input(g, "v", TR_DTYPE_BF16, 4, SH(1, 2, 12, 8)), tr_input(g, "rh", TR_DTYPE_F32, 4, SH(1, 2, 12, 3)),
                    tr_input(g, "rw", TR_DTYPE_F32, 4, SH(1, 2, 12, 4)), tr_input(g, "dy", TR_DTYPE_BF16, 4, SH(1, 2, 12, 8))};
        a[6] = tr_attention_rel(g, a[0], a[1], a[2], a[3], a[4], 0.0f);
        a[7] = tr_graph_add_node(g, TR_OP_ATTENTION_REL_LSE, 5, a, &la);
        if (bad == 1) a[7] = a[5]; /* lse: dy's shape and dtype */
        if (bad == 2) a[6] = a[3]; /* y: the bias term */
        struct tr_attrs ga = {.ints = {3}, .n_ints = 1};
        int n = bad == 3 ? 7 : 8;
        int d = tr_graph_add_node(g, TR_OP_ATTENTION_REL_GRAD, n, a, &ga);
        if (bad) {
            const char *needle = bad == 1 ? "lse bf16[1,2,12,8]" : bad == 2 ? "y f32[1,2,12,3]" : "7 inputs, expected 6 or 8";
            tr_test_expect_refused("attention_rel_grad's saved inputs", g, d,
                                   (const char *const[]){"attention_rel_grad", needle, NULL});
            continue;
        }
        assert_true(d >= 0);
        assert_int_equal(tr_node_dtype(g, d), TR_DTYPE_F32);
        assert_memory_equal(tr_node_shape(g, d), SH(1, 2, 12, 3), 4 * sizeof(int64_t));
        tr_graph_free(g);
    }
}

/* The rule (five ATTENTION_REL_GRAD nodes, each given the forward's y and its one
 * ATTENTION_REL_LSE) against finite differences, in f64, with the bias terms made as SAM
 * makes them: q·R by MATMULs. */
static void test_gradcheck(void **state) {
    (void)state;
    struct tr_ref_gx *t = tr_ref_gx_new();
    struct tr_graph *g = t->g;
    int q = tr_ref_gx_param(t, "q", TR_REF_SIGNED, 4, SH(1, 2, 6, 4));
    int k = tr_ref_gx_param(t, "k", TR_REF_SIGNED, 4, SH(1, 2, 6, 4));
    int v = tr_ref_gx_param(t, "v", TR_REF_SIGNED, 4, SH(1, 2, 6, 3));
    int rh = tr_ref_gx_param(t, "rh", TR_REF_SIGNED, 4, SH(1, 2, 6, 2));
    int rw = tr_ref_gx_param(t, "rw", TR_REF_SIGNED, 4, SH(1, 2, 6, 3));
    int y = tr_attention_rel(g, q, k, v, rh, rw, 0.6f);
    int loss = tr_ref_gx_loss(t, y);
    tr_ref_gx_check(t, "attention_rel, its five operands", loss, 5, (const int[]){q, k, v, rh, rw});
    int lse = -1, grads = 0;
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        if (tr_node_op(g, id) == TR_OP_ATTENTION_REL_LSE) {
            assert_int_equal(lse, -1);
            lse = id;
            assert_int_equal(tr_node_dtype(g, id), TR_DTYPE_F64); /* f64 operands: f64 statistics */
            assert_int_equal(tr_node_ndim(g, id), 3);
            assert_true(tr_node_flops(g, id) == 0.0);
        }
        if (tr_node_op(g, id) != TR_OP_ATTENTION_REL_GRAD) continue;
        assert_int_equal(tr_node_n_inputs(g, id), 8);
        assert_int_equal(tr_node_input(g, id, 6), y);
        assert_int_equal(tr_node_input(g, id, 7), lse);
        grads++;
    }
    assert_int_equal(grads, 5);
    tr_ref_gx_free(t);
}

/* Forward and the five gradients (an MSE training graph) on every backend against the
 * evaluator, f32 (tf and jax grouping the gradients into one fused backward, every
 * backend computing the forward's lse in its call); the forward in bf16 too; and a graph
 * of the 6-input gradient nodes (no saved statistics), as graphs made before
 * ATTENTION_REL_LSE are. */
static void test_every_backend(void **state) {
    (void)state;
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F32};
    for (int d = 0; d < 3; d++) {
        const enum tr_dtype dt = dts[d];
        const int train = dt == TR_DTYPE_F32, legacy = d == 2;
        struct tr_graph *g = fresh_graph();
        const int64_t shapes[6][4] = {{2, 2, 20, 8}, {2, 2, 20, 8}, {2, 2, 20, 8},
                                      {2, 2, 20, 4}, {2, 2, 20, 5}, {2, 2, 20, 8}};
        const char *names[6] = {"q", "k", "v", "rel_h", "rel_w", "target"};
        int id[6];
        struct tr_tensor in[6];
        for (int i = 0; i < 6; i++) {
            id[i] = tr_input(g, names[i], dt, 4, shapes[i]);
            in[i] = tr_test_tensor(dt, 4, shapes[i]);
            tr_test_randn(&in[i], 700 + 10 * (uint64_t)d + (uint64_t)i, i == 3 || i == 4 ? 1.5 : 1.0);
        }
        int y = tr_attention_rel(g, id[0], id[1], id[2], id[3], id[4], 0.0f);
        int outs[6] = {y}, n_out = 1;
        struct tr_error err = {0};
        if (legacy) { /* id[5] as dy */
            for (int w = 0; w < 5; w++) {
                struct tr_attrs ga = {.ints = {w}, .n_ints = 1};
                outs[n_out++] = tr_graph_add_node(g, TR_OP_ATTENTION_REL_GRAD, 6, id, &ga);
            }
        } else if (train) {
            int grads[5];
            if (tr_grad(g, tr_mse(g, y, id[5]), 5, id, grads, &err)) fail_msg("tr_grad: %s", err.msg);
            for (int i = 0; i < 5; i++) outs[n_out++] = grads[i];
        }
        tr_graph_set_output(g, y, "y");
        for (int i = 1; i < n_out; i++) {
            char nm[32];
            snprintf(nm, sizeof nm, "d%s", names[i - 1]);
            tr_graph_set_output(g, outs[i], nm);
        }
        if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
        double **v = tr_ref_graph_run(g, in);
        for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
            struct tr_tensor out[6];
            struct tr_backend_stats st;
            tr_test_run_backend(&tr_test_backends[b], tr_test_dir, g, in, 2, out, &st);
            /* tf and jax run the five gradients as one fused backward */
            const char *label = tr_test_backends[b].label;
            if (train && (strcmp(label, "tf") == 0 || strcmp(label, "jax") == 0) &&
                !strstr(st.notes, strcmp(label, "tf") == 0 ? "attention_rel_backward" : "(1 of attention_rel)"))
                fail_msg("%s did not group the five attention_rel gradients: %s", label, st.notes);
            /* the forward writes the statistics its backward reads, in the same call */
            const char *pair = strcmp(label, "tf") == 0 ? "attention_rel+lse x1" : "attention with its lse x1";
            if (train && !legacy && !strstr(st.notes, pair))
                fail_msg("%s: notes '%s' lack '%s'", label, st.notes, pair);
            for (int i = 0; i < n_out; i++) {
                char what[96];
                snprintf(what, sizeof what, "%s attention_rel %s %s vs f64", tr_test_backends[b].label,
                         tr_dtype_name(dt), i ? names[i - 1] : "output");
                check_close(what, &out[i], v[outs[i]]);
                tr_test_tensor_free(&out[i]);
            }
        }
        tr_ref_graph_free(g, v);
        tr_graph_free(g);
        tr_test_tensors_free(6, in);
    }
}

/* ---------------------------------------------------------------- memory */

/* VmHWM (peak resident) or VmRSS of this process in bytes; -1 where /proc cannot say. */
static long long proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            kb = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Resets VmHWM to the current resident size (Linux's clear_refs 5); 0 on success. */
static int reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* How far the peak resident size rises over the call, in bytes. */
static long long peak_rise(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in,
                           struct tr_tensor *out) {
    struct tr_error err = {0};
    if (reset_peak()) return -1;
    long long before = proc_status_bytes("VmRSS");
    CHECK_OK(run_op(op, at, n, in, out, &err));
    long long peak = proc_status_bytes("VmHWM");
    return before < 0 || peak < 0 ? -1 : peak - before;
}

/* A global block of SAM's ViT at 1024x1024 (a 64x64 grid, 4096 tokens) for one head: the
 * fused forward and the bias gradient (the backward's largest pass) raise the peak
 * resident size by less than 5% of the (Tq,Tk) bias they never form, counting the rel_h
 * and rel_w operands as theirs. The same bias materialised and given to ATTENTION as a
 * mask raises it by the full size: the measurement sees what it claims to. D is small
 * (the bias does not depend on it) so the test stays short. */
static void test_peak_memory(void **state) {
    (void)state;
    const int64_t S = 64, T = S * S, D = 8;
    const long long bias_bytes = (long long)(T * T * (int64_t)sizeof(float));
    if (reset_peak() || proc_status_bytes("VmHWM") < 0) {
        skip(); /* no /proc/self/clear_refs (not Linux, or a restricted /proc): cannot measure */
    }
    struct tr_tensor in[6] = {TENSOR(TR_DTYPE_F32, 1, 1, T, D), TENSOR(TR_DTYPE_F32, 1, 1, T, D),
                              TENSOR(TR_DTYPE_F32, 1, 1, T, D), TENSOR(TR_DTYPE_F32, 1, 1, T, S),
                              TENSOR(TR_DTYPE_F32, 1, 1, T, S), TENSOR(TR_DTYPE_F32, 1, 1, T, D)};
    for (int i = 0; i < 6; i++) tr_test_randn(&in[i], 900 + (uint64_t)i, 1.0);
    struct tr_tensor out = TENSOR(TR_DTYPE_F32, 1, 1, T, D), drh = TENSOR(TR_DTYPE_F32, 1, 1, T, S);
    tr_test_poison(&out);
    tr_test_poison(&drh);
    const long long rel_bytes = (long long)(2 * tr_tensor_nbytes(&in[3]));
    struct tr_attrs at = {.floats = {0.0f}};
    long long fwd = peak_rise(TR_OP_ATTENTION_REL, &at, 5, in, &out);
    struct tr_attrs ga = {.ints = {3}, .n_ints = 1};
    long long bwd = peak_rise(TR_OP_ATTENTION_REL_GRAD, &ga, 6, in, &drh);
    /* the materialised bias as a mask, for contrast */
    struct tr_tensor mask = {0};
    long long mat = -1;
    if (reset_peak() == 0) {
        long long before = proc_status_bytes("VmRSS");
        mask = TENSOR(TR_DTYPE_F32, 1, 1, T, T); /* its pages become resident as they are written */
        float *m = (float *)mask.data, *rh = (float *)in[3].data, *rw = (float *)in[4].data;
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) m[i * T + j] = rh[i * S + j / S] + rw[i * S + j % S];
        struct tr_tensor min[4] = {in[0], in[1], in[2], mask};
        struct tr_error err = {0};
        CHECK_OK(run_op(TR_OP_ATTENTION, &(struct tr_attrs){.n_ints = 2}, 4, min, &out, &err));
        mat = proc_status_bytes("VmHWM") - before;
    }
    printf("attention_rel at a 64x64 grid, one head: bias (Tq,Tk) f32 %.1f MiB; peak rise forward %.2f MiB, "
           "bias gradient %.2f MiB, plus rel_h + rel_w %.2f MiB; materialised as a mask %.1f MiB\n",
           bias_bytes / 1048576.0, fwd / 1048576.0, bwd / 1048576.0, rel_bytes / 1048576.0, mat / 1048576.0);
    assert_true(fwd >= 0 && bwd >= 0 && mat >= 0);
    if (fwd + rel_bytes >= bias_bytes / 20 || bwd + rel_bytes >= bias_bytes / 20)
        fail_msg("the fused attention's memory %lld / %lld bytes (+ %lld of bias terms) is not under 5%% of the "
                 "%lld-byte bias", fwd, bwd, rel_bytes, bias_bytes);
    if (mat < bias_bytes * 9 / 10) fail_msg("the materialised bias raised the peak by only %lld bytes", mat);
    tfree(&in[0], &in[1], &in[2], &in[3], &in[4], &in[5], &out, &drh, &mask, NULL);
}

TR_TEST_MAIN(tr_test_kernels_dir_setup, tr_test_kernels_dir_teardown, test_attention_rel_kernels,
             test_graph_refusals, test_gradcheck, test_every_backend, test_peak_memory)
