/* The training kernels (grad.c, loss.c) through tr_kernels_run, each against a float64
 * oracle of tests/ref, in f32, bf16 and f64 (inputs random and never zero,
 * outputs poisoned with NaN first, references computed from the rounded inputs).
 *
 * The gradient kernels are also checked against central finite differences of the
 * forward function in f64 (relative error < 1e-6). The cpu forward kernels of unary,
 * softmax, layer norm and attention take no f64, so the differences are taken of the
 * f64 oracle of the forward, which is first checked against the real forward
 * kernel in f32: the gradient is that of the function the forward kernel computes
 * (erf vs tanh GELU, the window's alignment, a fully masked row). Cross entropy's
 * forward kernel takes f64, and its differences are taken of the kernel itself. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ref/ref.h"
#include "testutil.h"
#include "trident/kernels.h"

#define run tr_test_run_op
#define run_fails tr_test_run_op_fails
#define K tr_test_k /* the group's kernels context (testutil.h) */
static const enum tr_dtype DTS[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F64};
#define N_DTS 3
#define FD_TOL 1e-6
#define FD_H 1e-5

#define SHAPE(...) (const int64_t[]){__VA_ARGS__}
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TENSOR(dt, ...) tr_test_tensor((dt), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))
#define SCALAR(dt) tr_test_tensor((dt), 0, SHAPE(1))


static void tfree(struct tr_tensor *t, ...) {
    va_list ap;
    va_start(ap, t);
    for (; t; t = va_arg(ap, struct tr_tensor *)) tr_test_tensor_free(t);
    va_end(ap);
}

static void check(const char *what, enum tr_dtype dt, const struct tr_tensor *out, const double *ref) {
    char buf[160];
    if (snprintf(buf, sizeof buf, "%s (%s)", what, tr_dtype_name(dt)) >= (int)sizeof buf) buf[sizeof buf - 1] = 0;
    tr_assert_close(buf, out, ref, tr_test_tol(dt));
}

static void check_fd(const char *what, const double *got, const double *fd, int64_t n) {
    tr_ref_check_fd(what, got, fd, n, FD_TOL);
}

static void set_f64(struct tr_tensor *t, const double *v) {
    for (int64_t i = 0; i < tr_tensor_numel(t); i++) tr_tensor_set_f64(t, i, v[i]);
}

static double dot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- unary_grad ---- */

/* The forward differentiated: SCALE's beta is 0.25. */
static double f_unary(int op, int approx, double a, double x) { return tr_ref_unary(op, x, approx, a, 0.25); }

static void test_unary_grad(void **state) {
    (void)state;
    const struct { int op, approx; } cases[] = {
        {TR_OP_GELU, 0}, {TR_OP_GELU, 1}, {TR_OP_TANH, 0}, {TR_OP_RELU, 0}, {TR_OP_SILU, 0}, {TR_OP_SIGMOID, 0},
        {TR_OP_EXP, 0},  {TR_OP_NEG, 0},  {TR_OP_SQRT, 0}, {TR_OP_RSQRT, 0}, {TR_OP_SCALE, 0},
    };
    const double alpha = (double)1.7f; /* the attribute is a float */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int op = cases[c].op, ap = cases[c].approx, pos = op == TR_OP_SQRT || op == TR_OP_RSQRT;
        struct tr_attrs at = {.ints = {op, ap}, .floats = {(float)alpha}};
        struct tr_attrs fat = {.ints = {ap}, .floats = {(float)alpha, 0.25f}};
        char what[64];
        snprintf(what, sizeof what, "unary_grad %s%s", tr_op_name(op), ap ? " (tanh)" : "");
        for (int d = 0; d < N_DTS; d++) {
            const enum tr_dtype dt = DTS[d];
            struct tr_tensor in[2] = {TENSOR(dt, 3, 701), TENSOR(dt, 3, 701)}, dx = TENSOR(dt, 3, 701);
            const int64_t n = tr_tensor_numel(&dx);
            tr_test_randn(&in[0], 11 + c, 1.5);
            tr_test_randn(&in[1], 12 + c, 1.0);
            if (pos) {
                double *x = tr_test_to_f64(&in[0]);
                for (int64_t i = 0; i < n; i++) x[i] = fabs(x[i]) + 0.5;
                set_f64(&in[0], x);
                free(x);
            }
            double *x = tr_test_to_f64(&in[0]), *g = tr_test_to_f64(&in[1]), *ref = malloc(sizeof(double) * n);
            for (int64_t i = 0; i < n; i++) ref[i] = g[i] * tr_ref_unary_grad(op, x[i], ap, alpha);
            run(TR_OP_UNARY_GRAD, &at, 2, in, &dx);
            check(what, dt, &dx, ref);
            if (dt == TR_DTYPE_F64) { /* central differences of the forward */
                double *got = tr_test_to_f64(&dx);
                for (int64_t i = 0; i < n; i++)
                    ref[i] = g[i] * (f_unary(op, ap, alpha, x[i] + FD_H) - f_unary(op, ap, alpha, x[i] - FD_H)) / (2 * FD_H);
                check_fd(what, got, ref, n);
                free(got);
            }
            if (dt == TR_DTYPE_F32) { /* the forward differentiated here is the kernel's */
                for (int64_t i = 0; i < n; i++) ref[i] = f_unary(op, ap, alpha, x[i]);
                run(op, &fat, 1, in, &dx);
                check("forward of the unary reference", dt, &dx, ref);
            }
            free(x), free(g), free(ref);
            tfree(&in[0], &in[1], &dx, NULL);
        }
    }
    /* GELU's derivatives far out: 1 and 0 to within 1e-6 of float64's (the tanh form's f32
     * path made 0·inf of x³ from |x| ≈ 1e13 on: NaN) */
    static const double far[8] = {12.0, -12.0, 1e13, -1e13, 1e20, -1e20, 3e38, -3e38};
    for (int ap = 0; ap < 2; ap++)
        for (int d = 0; d < N_DTS; d++) {
            const enum tr_dtype dt = DTS[d];
            struct tr_tensor in[2] = {TENSOR(dt, 1, 8), TENSOR(dt, 1, 8)}, dx = TENSOR(dt, 1, 8);
            double ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            set_f64(&in[0], far);
            set_f64(&in[1], ones);
            struct tr_attrs at = {.ints = {TR_OP_GELU, ap}};
            run(TR_OP_UNARY_GRAD, &at, 2, in, &dx);
            double *got = tr_test_to_f64(&dx);
            for (int i = 0; i < 8; i++) {
                const double want = tr_ref_unary_grad(TR_OP_GELU, far[i], ap, 0.0);
                if (!(fabs(got[i] - want) <= 1e-6))
                    fail_msg("unary_grad gelu%s %s at %g: %g, expected %g", ap ? " (tanh)" : "", tr_dtype_name(dt),
                             far[i], got[i], want);
            }
            free(got);
            tfree(&in[0], &in[1], &dx, NULL);
        }
}

/* ---- softmax_grad ---- */

/* Σ g·softmax(x) over rows × D, what the differences are taken of. */
struct sm_loss {
    const double *x, *g;
    double *y;
    int64_t R, D;
};

static double sm_loss(void *p) {
    struct sm_loss *c = p;
    tr_ref_softmax(c->x, c->R, c->D, c->y);
    return dot(c->g, c->y, c->R * c->D);
}

static void test_softmax_grad(void **state) {
    (void)state;
    const int64_t R = 6, D = 37, n = R * D;
    struct tr_tensor xs = TENSOR(TR_DTYPE_F64, 6, 37);
    tr_test_randn(&xs, 21, 2.0);
    double *x = tr_test_to_f64(&xs), *y = malloc(sizeof(double) * n), *ref = malloc(sizeof(double) * n);
    tr_ref_softmax(x, R, D, y);
    for (int d = 0; d < N_DTS; d++) {
        const enum tr_dtype dt = DTS[d];
        struct tr_tensor in[2] = {TENSOR(dt, 2, 3, 37), TENSOR(dt, 2, 3, 37)}, dx = TENSOR(dt, 2, 3, 37);
        set_f64(&in[0], y);
        tr_test_randn(&in[1], 22, 1.0);
        double *yr = tr_test_to_f64(&in[0]), *g = tr_test_to_f64(&in[1]);
        tr_ref_softmax_grad(yr, g, R, D, ref);
        run(TR_OP_SOFTMAX_GRAD, NULL, 2, in, &dx);
        check("softmax_grad", dt, &dx, ref);
        if (dt == TR_DTYPE_F64) {
            double *got = tr_test_to_f64(&dx), *yp = malloc(sizeof(double) * n);
            struct sm_loss c = {x, g, yp, R, D};
            tr_ref_fd_grad(sm_loss, &c, x, n, FD_H, ref);
            check_fd("softmax_grad", got, ref, n);
            free(got), free(yp);
        }
        if (dt == TR_DTYPE_F32) {
            struct tr_tensor xf = TENSOR(dt, 2, 3, 37);
            set_f64(&xf, x);
            double *xr = tr_test_to_f64(&xf);
            tr_ref_softmax(xr, R, D, ref);
            run(TR_OP_SOFTMAX, NULL, 1, &xf, &dx);
            check("forward of the softmax reference", dt, &dx, ref);
            free(xr);
            tfree(&xf, NULL);
        }
        free(yr), free(g);
        tfree(&in[0], &in[1], &dx, NULL);
    }
    free(x), free(y), free(ref);
    tfree(&xs, NULL);
}

/* ---- layer norm ---- */

/* L = Σ dy·layer_norm(x; gamma, beta), what the differences are taken of. */
struct ln_loss {
    const double *x, *gam, *beta, *g;
    double eps, *y;
    int64_t R, D;
};

static double ln_loss(void *p) {
    struct ln_loss *c = p;
    tr_ref_layer_norm(c->x, c->gam, c->beta, c->R, c->D, c->eps, c->y);
    return dot(c->g, c->y, c->R * c->D);
}

static void ln_case(int64_t R, int64_t D, int fd) {
    const double eps = 1e-5;
    const int64_t n = R * D;
    for (int d = 0; d < N_DTS; d++) {
        const enum tr_dtype dt = DTS[d];
        struct tr_tensor in[3] = {TENSOR(dt, R, D), TENSOR(dt, D), TENSOR(dt, R, D)};
        struct tr_tensor dx = TENSOR(dt, R, D), dg = TENSOR(dt, D);
        tr_test_randn(&in[0], 31, 1.3);
        tr_test_randn(&in[1], 32, 1.0);
        tr_test_randn(&in[2], 33, 1.0);
        double *x = tr_test_to_f64(&in[0]), *gam = tr_test_to_f64(&in[1]), *g = tr_test_to_f64(&in[2]);
        double *ref = malloc(sizeof(double) * n), *rg = malloc(sizeof(double) * D), *bv = malloc(sizeof(double) * D);
        for (int64_t i = 0; i < D; i++) bv[i] = 0.1 * (double)(i % 3);
        tr_ref_layer_norm_grad(x, gam, g, R, D, eps, ref);
        tr_ref_layer_norm_grad_gamma(x, g, R, D, eps, rg);
        struct tr_attrs at = {.floats = {(float)eps}};
        run(TR_OP_LAYER_NORM_GRAD, &at, 3, in, &dx);
        check("layer_norm_grad", dt, &dx, ref);
        struct tr_tensor gin[2] = {in[0], in[2]};
        run(TR_OP_LAYER_NORM_GRAD_GAMMA, &at, 2, gin, &dg);
        check("layer_norm_grad_gamma", dt, &dg, rg);
        if (dt == TR_DTYPE_F64 && fd) {
            double *got = tr_test_to_f64(&dx), *gotg = tr_test_to_f64(&dg), *buf = malloc(sizeof(double) * n);
            struct ln_loss c = {x, gam, bv, g, eps, buf, R, D};
            tr_ref_fd_grad(ln_loss, &c, x, n, FD_H, ref);
            check_fd("layer_norm_grad", got, ref, n);
            tr_ref_fd_grad(ln_loss, &c, gam, D, FD_H, ref);
            check_fd("layer_norm_grad_gamma", gotg, ref, D);
            free(got), free(gotg), free(buf);
        }
        if (dt == TR_DTYPE_F32 && fd) {
            struct tr_tensor b = TENSOR(dt, D);
            set_f64(&b, bv);
            struct tr_tensor fin[3] = {in[0], in[1], b};
            tr_ref_layer_norm(x, gam, bv, R, D, eps, ref);
            run(TR_OP_LAYER_NORM, &at, 3, fin, &dx);
            check("forward of the layer norm reference", dt, &dx, ref);
            tfree(&b, NULL);
        }
        free(x), free(gam), free(g), free(ref), free(rg), free(bv);
        tfree(&in[0], &in[1], &in[2], &dx, &dg, NULL);
    }
}

static void test_layer_norm_grad(void **state) {
    (void)state;
    ln_case(5, 48, 1);
    ln_case(4, 1000, 0);  /* several column blocks, a partial last one */
    ln_case(300, 130, 0); /* parallel over rows and columns */
}

/* ---- embedding_grad ---- */

static void emb_case(enum tr_dtype idt, int64_t V, int64_t D, int64_t B, int64_t T, uint64_t seed) {
    for (int d = 0; d < N_DTS; d++) {
        const enum tr_dtype dt = DTS[d];
        struct tr_tensor in[2] = {TENSOR(idt, B, T), TENSOR(dt, B, T, D)}, dtab = TENSOR(dt, V, D);
        tr_test_randint(&in[0], seed, V - 1); /* row V-1 never used: must be zeros */
        tr_tensor_set_f64(&in[0], 1, tr_tensor_get_f64(&in[0], 0)); /* a repeat for sure */
        tr_test_randn(&in[1], seed + 1, 1.0);
        double *ids = tr_test_to_f64(&in[0]), *g = tr_test_to_f64(&in[1]), *ref = malloc(sizeof(double) * V * D);
        tr_ref_embedding_grad(ids, B * T, g, V, D, ref);
        struct tr_attrs at = {.ints = {V}};
        run(TR_OP_EMBEDDING_GRAD, &at, 2, in, &dtab);
        check("embedding_grad", dt, &dtab, ref);
        for (int64_t c = 0; c < D; c++)
            if (tr_tensor_get_f64(&dtab, (V - 1) * D + c) != 0.0) fail_msg("embedding_grad: unused row not zero");
        /* the padding row (ids[0]'s, read at least twice): zeros, every other row as before */
        const int64_t pad = (int64_t)ids[0];
        for (int64_t c = 0; c < D; c++) ref[pad * D + c] = 0.0;
        struct tr_attrs pa = {.ints = {V, 1, pad}};
        tr_test_poison(&dtab);
        run(TR_OP_EMBEDDING_GRAD, &pa, 2, in, &dtab);
        check("embedding_grad with a padding row", dt, &dtab, ref);
        for (int64_t c = 0; c < D; c++)
            if (tr_tensor_get_f64(&dtab, pad * D + c) != 0.0) fail_msg("embedding_grad: the padding row not zero");
        free(ids), free(g), free(ref);
        tfree(&in[0], &in[1], &dtab, NULL);
    }
}

static void test_embedding_grad(void **state) {
    (void)state;
    emb_case(TR_DTYPE_I32, 7, 40, 2, 9, 41);     /* 18 ids over 6 rows: repeats */
    emb_case(TR_DTYPE_I64, 300, 128, 4, 50, 42); /* parallel over table rows */
    struct tr_tensor in[2] = {TENSOR(TR_DTYPE_I64, 2, 3), TENSOR(TR_DTYPE_F32, 2, 3, 4)}, dtab = TENSOR(TR_DTYPE_F32, 5, 4);
    tr_test_randint(&in[0], 43, 5);
    tr_test_randn(&in[1], 44, 1.0);
    tr_tensor_set_f64(&in[0], 4, 5);
    struct tr_attrs at = {.ints = {5}};
    run_fails(TR_OP_EMBEDDING_GRAD, &at, 2, in, &dtab, TR_ERR_INVALID, "ids[4] = 5");
    at.ints[0] = 6;
    run_fails(TR_OP_EMBEDDING_GRAD, &at, 2, in, &dtab, TR_ERR_SHAPE, "embedding_grad");
    tfree(&in[0], &in[1], &dtab, NULL);
}

/* ---- attention ---- */

struct attn_cfg {
    int64_t B, H, Hk, Tq, Tk, D, Dv;
    int mask; /* 0 none, 1 (B,1,1,Tk) with a -inf key, 2 (Tq,Tk), 3 as 1 with sample 0 all
                 -FLT_MAX (transformers' padding mask on a sample of padding alone) */
    int causal, window;
    float scale; /* 0: 1/sqrt(D) */
};

/* The oracle's view of a case, the mask m (NULL: none) shaped as in[4]. */
static struct tr_ref_attn attn_of(const struct attn_cfg *c, const struct tr_tensor *mask, const double *m) {
    /* as dispatch fills it (1.0f / sqrtf(D) differs from it by an ulp at D = 96) */
    const double sc = c->scale != 0 ? c->scale : (double)tr_attention_default_scale(c->D);
    struct tr_ref_attn a = {c->B, c->H, c->Hk, c->Tq, c->Tk, c->D, c->Dv, sc, c->causal, c->window, {0, NULL, NULL}, NULL, NULL, 0, 0};
    if (m) a.mask = (struct tr_ref_view){mask->ndim, mask->shape, m};
    return a;
}

static int attn_inputs(const struct attn_cfg *c, enum tr_dtype dt, struct tr_tensor *in, uint64_t seed) {
    in[0] = TENSOR(dt, c->B, c->H, c->Tq, c->D);
    in[1] = TENSOR(dt, c->B, c->Hk, c->Tk, c->D);
    in[2] = TENSOR(dt, c->B, c->Hk, c->Tk, c->Dv);
    in[3] = TENSOR(dt, c->B, c->H, c->Tq, c->Dv);
    for (int i = 0; i < 4; i++) tr_test_randn(&in[i], seed + i, 1.0);
    if (c->mask == 1 || c->mask == 3) {
        in[4] = TENSOR(TR_DTYPE_F32, c->B, 1, 1, c->Tk);
        tr_test_randn(&in[4], seed + 4, 1.0);
        tr_tensor_set_f64(&in[4], 1, -INFINITY);
        for (int64_t j = 0; c->mask == 3 && j < c->Tk; j++) tr_tensor_set_f64(&in[4], j, -FLT_MAX);
    } else if (c->mask == 2) {
        in[4] = TENSOR(dt, c->Tq, c->Tk);
        tr_test_randn(&in[4], seed + 4, 0.5);
    }
    return c->mask ? 5 : 4;
}

/* L = Σ dy·attention(q,k,v), what the differences are taken of. */
struct attn_loss {
    const struct tr_ref_attn *a;
    const double *q, *k, *v, *dy;
    double *out;
};

static double attn_loss(void *p) {
    struct attn_loss *c = p;
    tr_ref_attention(c->a, c->q, c->k, c->v, c->out);
    return dot(c->dy, c->out, c->a->B * c->a->H * c->a->Tq * c->a->Dv);
}

/* lse (B,H,Tq) against the reference's: +inf exactly where a row sees no key, the rest
 * by ‖got − ref‖/‖ref‖ < 1e-4 (f32 statistics of whatever dtype). */
static void check_lse(const char *what, const struct tr_tensor *lse, const double *ref) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < tr_tensor_numel(lse); i++) {
        const double g = tr_tensor_get_f64(lse, i);
        if (isinf(ref[i]) || isinf(g)) {
            if (g != ref[i]) fail_msg("%s: row %lld: lse %g, expected %g", what, (long long)i, g, ref[i]);
            continue;
        }
        num += (g - ref[i]) * (g - ref[i]);
        den += ref[i] * ref[i];
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel < 1e-4)) fail_msg("%s: lse rel err %.3g (tol 1e-4)", what, rel);
}

/* The forward's statistics kept and read back: tr_k_attention_lse gives the output and
 * lse in one pass (lse alone too), and the backward from them (direct and bound, as the
 * ATTENTION_GRAD op with 6 or 7 inputs) matches the reference's gradients. */
static void attn_saved_case(const struct attn_cfg *c, enum tr_dtype dt, const struct tr_tensor *in, int n_in,
                            const struct tr_ref_attn *ra, const double *const refs[3], const char *name) {
    const struct tr_tensor *mask = n_in == 5 ? &in[4] : NULL;
    double *q = tr_test_to_f64(&in[0]), *k = tr_test_to_f64(&in[1]);
    double *rl = malloc(sizeof(double) * (size_t)(c->B * c->H * c->Tq));
    tr_ref_attention_lse(ra, q, k, rl);
    struct tr_tensor y = TENSOR(dt, c->B, c->H, c->Tq, c->Dv), lse = TENSOR(TR_DTYPE_F32, c->B, c->H, c->Tq);
    struct tr_tensor lse2 = TENSOR(TR_DTYPE_F32, c->B, c->H, c->Tq);
    tr_test_poison(&y);
    tr_test_poison(&lse);
    tr_test_poison(&lse2);
    struct tr_error e = {0};
    const float sc = c->scale != 0.0f ? c->scale : tr_attention_default_scale(c->D);
    char what[160];
    snprintf(what, sizeof what, "attention_lse %s (%s)", name, tr_dtype_name(dt));
    if (tr_k_attention_lse(tr_test_k, &in[0], &in[1], &in[2], mask, sc, c->causal, c->window, &y, &lse, &e) ||
        tr_k_attention_lse(tr_test_k, &in[0], &in[1], &in[2], mask, sc, c->causal, c->window, NULL, &lse2, &e))
        fail_msg("%s: %s", what, e.msg);
    check_lse(what, &lse, rl);
    check_lse(what, &lse2, rl);
    struct tr_tensor gin[7] = {in[0], in[1], in[2], in[3]};
    int gn = 4;
    if (mask) gin[gn++] = *mask;
    gin[gn++] = y;
    gin[gn++] = lse;
    for (int w = 0; w < 3; w++) { /* the op, one gradient each */
        struct tr_attrs at = {.ints = {c->causal, c->window, w}, .floats = {c->scale}};
        struct tr_tensor o = tr_test_tensor(dt, 4, in[w].shape);
        snprintf(what, sizeof what, "attention_grad saved stats %s d%c", name, "qkv"[w]);
        run(TR_OP_ATTENTION_GRAD, &at, gn, gin, &o);
        check(what, dt, &o, refs[w]);
        tfree(&o, NULL);
    }
    for (int form = 0; form < 2; form++) { /* all three at once, direct and bound */
        struct tr_tensor o[3];
        for (int w = 0; w < 3; w++) {
            o[w] = tr_test_tensor(dt, 4, in[w].shape);
            tr_test_poison(&o[w]);
        }
        int rc;
        if (form) {
            struct tr_kernel_call call;
            rc = tr_kernels_bind_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, &y, &lse,
                                                    c->scale, c->causal, c->window, &o[0], &o[1], &o[2], &call, &e);
            if (rc == TR_OK) rc = tr_kernels_call(tr_test_k, &call, &e);
            tr_kernels_unbind(tr_test_k, &call);
        } else {
            rc = tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, &y, &lse, sc, c->causal,
                                         c->window, &o[0], &o[1], &o[2], &e);
        }
        if (rc) fail_msg("attention_backward saved stats %s: %s", name, e.msg);
        for (int w = 0; w < 3; w++) {
            snprintf(what, sizeof what, "attention_backward%s saved stats %s d%c", form ? " bound" : "", name, "qkv"[w]);
            check(what, dt, &o[w], refs[w]);
        }
        tfree(&o[0], &o[1], &o[2], NULL);
    }
    /* y without lse is refused, as is a lse of the wrong shape */
    struct tr_tensor o = tr_test_tensor(dt, 4, in[0].shape);
    assert_int_not_equal(tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, &y, NULL, sc,
                                                 c->causal, c->window, &o, NULL, NULL, &e), TR_OK);
    assert_int_not_equal(tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, &y, &y, sc,
                                                 c->causal, c->window, &o, NULL, NULL, &e), TR_OK);
    tfree(&o, &y, &lse, &lse2, NULL);
    free(q), free(k), free(rl);
}

static void attn_case(const struct attn_cfg *c, int fd, const char *name) {
    for (int d = 0; d < N_DTS; d++) {
        const enum tr_dtype dt = DTS[d];
        struct tr_tensor in[5];
        int n_in = attn_inputs(c, dt, in, 51);
        double *q = tr_test_to_f64(&in[0]), *k = tr_test_to_f64(&in[1]), *v = tr_test_to_f64(&in[2]);
        double *g = tr_test_to_f64(&in[3]), *m = n_in == 5 ? tr_test_to_f64(&in[4]) : NULL;
        const int64_t nq = tr_tensor_numel(&in[0]), nk = tr_tensor_numel(&in[1]), nv = tr_tensor_numel(&in[2]);
        const int64_t no = tr_tensor_numel(&in[3]);
        double *out = malloc(sizeof(double) * no), *rq = malloc(sizeof(double) * nq), *rk = malloc(sizeof(double) * nk);
        double *rv = malloc(sizeof(double) * nv);
        const struct tr_ref_attn ra = attn_of(c, n_in == 5 ? &in[4] : NULL, m);
        tr_ref_attention(&ra, q, k, v, out);
        tr_ref_attention_grad(&ra, q, k, v, g, rq, rk, rv);
        const double *refs[3] = {rq, rk, rv};
        for (int w = 0; w < 3; w++) {
            struct tr_attrs at = {.ints = {c->causal, c->window, w}, .floats = {c->scale}};
            struct tr_tensor o = tr_test_tensor(dt, 4, in[w].shape);
            char what[160];
            snprintf(what, sizeof what, "attention_grad %s d%c", name, "qkv"[w]);
            run(TR_OP_ATTENTION_GRAD, &at, n_in, in, &o);
            check(what, dt, &o, refs[w]);
            if (dt == TR_DTYPE_F64 && fd) {
                double *got = tr_test_to_f64(&o), *f = malloc(sizeof(double) * tr_tensor_numel(&o));
                double *fo = malloc(sizeof(double) * no);
                struct attn_loss al = {&ra, q, k, v, g, fo};
                tr_ref_fd_grad(attn_loss, &al, w == 0 ? q : w == 1 ? k : v, tr_tensor_numel(&o), FD_H, f);
                check_fd(what, got, f, tr_tensor_numel(&o));
                free(got), free(f), free(fo);
            }
            tfree(&o, NULL);
        }
        /* all three at once (direct and bound), and dk + dv alone */
        for (int form = 2; form >= 0; form--) {
            struct tr_tensor o[3];
            struct tr_error e = {0};
            for (int w = 0; w < 3; w++) {
                o[w] = tr_test_tensor(dt, 4, in[w].shape);
                tr_test_poison(&o[w]);
            }
            const struct tr_tensor *mask = n_in == 5 ? &in[4] : NULL;
            int rc;
            if (form == 2) {
                struct tr_kernel_call call;
                rc = tr_kernels_bind_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, NULL, NULL, c->scale,
                                                        c->causal, c->window, &o[0], &o[1], &o[2], &call, &e);
                if (rc == TR_OK) rc = tr_kernels_call(tr_test_k, &call, &e);
                tr_kernels_unbind(tr_test_k, &call);
            } else {
                const float sc = c->scale != 0.0f ? c->scale : tr_attention_default_scale(c->D); /* the op's default */
                rc = tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, NULL, NULL, sc, c->causal,
                                             c->window, form == 0 ? &o[0] : NULL, &o[1], &o[2], &e);
            }
            if (rc) fail_msg("attention_backward %s: %s", name, e.msg);
            for (int w = form == 1 ? 1 : 0; w < 3; w++) {
                char what[160];
                snprintf(what, sizeof what, "attention_backward%s %s d%c", form == 2 ? " bound" : "", name, "qkv"[w]);
                check(what, dt, &o[w], refs[w]);
            }
            for (int w = 0; w < 3; w++) tfree(&o[w], NULL);
        }
        if (dt != TR_DTYPE_F64) attn_saved_case(c, dt, in, n_in, &ra, refs, name);
        if (dt == TR_DTYPE_F32) { /* the reference's forward is the kernel's (mask, causal, window, GQA) */
            struct tr_attrs at = {.ints = {c->causal, c->window}, .floats = {c->scale}};
            struct tr_tensor fin[4] = {in[0], in[1], in[2], n_in == 5 ? in[4] : in[0]};
            struct tr_tensor o = TENSOR(dt, c->B, c->H, c->Tq, c->Dv);
            run(TR_OP_ATTENTION, &at, n_in - 1, fin, &o);
            char what[160];
            snprintf(what, sizeof what, "forward of the attention reference %s", name);
            check(what, dt, &o, out);
            tfree(&o, NULL);
        }
        free(q), free(k), free(v), free(g), free(m), free(out), free(rq), free(rk), free(rv);
        tr_test_tensors_free(n_in, in);
    }
}

static void test_attention_grad(void **state) {
    (void)state;
    /* small ones, also checked by finite differences */
    const struct attn_cfg plain = {1, 2, 2, 5, 5, 4, 3, 0, 0, 0, 0};
    const struct attn_cfg masked_gqa = {2, 4, 2, 5, 7, 4, 3, 1, 0, 0, 0.7f};
    const struct attn_cfg causal_2d = {1, 2, 1, 6, 4, 3, 5, 2, 1, 0, 0}; /* Tq > Tk: the first rows see nothing */
    const struct attn_cfg window = {1, 3, 1, 7, 9, 4, 4, 0, 0, 3, 0};
    attn_case(&plain, 1, "plain");
    attn_case(&masked_gqa, 1, "mask (B,1,1,Tk) with -inf, GQA, Tq<Tk");
    attn_case(&causal_2d, 1, "causal, 2-D mask, Tq>Tk");
    attn_case(&window, 1, "window 3, Tq<Tk");
    /* several blocks of 32 queries and keys, GQA, everything at once */
    const struct attn_cfg big = {2, 4, 2, 45, 70, 16, 12, 1, 1, 40, 0};
    attn_case(&big, 0, "blocks, mask, causal, window 40, GQA");
    const struct attn_cfg big2 = {1, 2, 1, 67, 33, 8, 8, 2, 0, 0, 0};
    attn_case(&big2, 0, "blocks, 2-D mask, Tq>Tk");
    /* head widths through every tile of the f32 products (attention_grad.c): D = 96 is a
     * 64-column AVX-512 tile and a 32-column one, Dv = 43 a 32, an 8 and 3 columns left;
     * Tq = 38 leaves rows outside the 4-row tiles. The backward takes its one-pass form
     * (ag_fused) where B·Hk is at least twice the threads (the tests run 2): the first
     * case checks the two passes, the second the one pass, both on every tile. */
    const struct attn_cfg wide = {1, 2, 1, 38, 45, 96, 43, 1, 0, 0, 0};
    attn_case(&wide, 0, "wide heads (D 96, Dv 43), mask, two passes");
    const struct attn_cfg wide_gqa = {2, 4, 2, 38, 45, 96, 43, 1, 0, 0, 0};
    attn_case(&wide_gqa, 0, "wide heads (D 96, Dv 43), mask, GQA, one pass");
    /* a sample of padding alone under a finite mask: its rows' scores all round to
     * -FLT_MAX, P is 1/Tk (as torch's softmax gives), which exp(s - lse) lost when lse =
     * m + log(l) rounded to m (every gradient Tk times too large). Not by differences:
     * the loss is flat there in any float, the softmax's gradient is not. */
    const struct attn_cfg padded = {2, 2, 1, 40, 37, 4, 3, 3, 0, 0, 0};
    attn_case(&padded, 0, "a sample masked whole by -FLT_MAX, blocks, GQA");
    const struct attn_cfg padded1 = {2, 2, 2, 3, 5, 4, 3, 3, 0, 0, 0};
    attn_case(&padded1, 0, "a sample masked whole by -FLT_MAX, one pass");
}

/* ---- broadcast, max_grad, slice_grad ---- */

static void test_broadcast(void **state) {
    (void)state;
    const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F64, TR_DTYPE_I32};
    for (int d = 0; d < 4; d++) {
        const enum tr_dtype dt = dts[d];
        struct tr_tensor x = TENSOR(dt, 3, 1, 5), out = TENSOR(dt, 2, 3, 4, 5);
        tr_test_randn(&x, 61, 3.0);
        struct tr_attrs at = {.ints = {2, 3, 4, 5}, .n_ints = 4};
        double *xv = tr_test_to_f64(&x), *ref = malloc(sizeof(double) * 120);
        tr_ref_broadcast((struct tr_ref_view){x.ndim, x.shape, xv}, 4, SHAPE(2, 3, 4, 5), ref);
        run(TR_OP_BROADCAST, &at, 1, &x, &out);
        check("broadcast (3,1,5)->(2,3,4,5)", dt, &out, ref);
        struct tr_tensor y = TENSOR(dt, 4, 1), out2 = TENSOR(dt, 4, 6);
        tr_test_randn(&y, 62, 3.0);
        struct tr_attrs at2 = {.ints = {4, 6}, .n_ints = 2};
        double *yv = tr_test_to_f64(&y);
        tr_ref_broadcast((struct tr_ref_view){y.ndim, y.shape, yv}, 2, SHAPE(4, 6), ref);
        run(TR_OP_BROADCAST, &at2, 1, &y, &out2);
        check("broadcast (4,1)->(4,6)", dt, &out2, ref);
        free(xv), free(yv), free(ref);
        tfree(&x, &out, &y, &out2, NULL);
    }
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 3, 2), out = TENSOR(TR_DTYPE_F32, 3, 4);
    tr_test_randn(&x, 63, 1.0);
    struct tr_attrs at = {.ints = {3, 4}, .n_ints = 2};
    run_fails(TR_OP_BROADCAST, &at, 1, &x, &out, TR_ERR_SHAPE, "[3,2]");
    tfree(&x, &out, NULL);
}

static void test_max_grad(void **state) {
    (void)state;
    for (int d = 0; d < N_DTS; d++)
        for (int keep = 0; keep < 2; keep++)
            for (int axis = -1; axis < 3; axis++) {
                const enum tr_dtype dt = DTS[d];
                const int64_t sh[3] = {4, 6, 5};
                const int ax = axis < 0 ? 2 : axis;
                int64_t dsh[3];
                int dn = 0;
                for (int i = 0; i < 3; i++)
                    if (i != ax) dsh[dn++] = sh[i];
                    else if (keep) dsh[dn++] = 1;
                struct tr_tensor in[2] = {tr_test_tensor(dt, 3, sh), tr_test_tensor(dt, dn, dsh)};
                struct tr_tensor dx = tr_test_tensor(dt, 3, sh);
                tr_test_randn(&in[0], 71 + axis, 1.0);
                tr_test_randn(&in[1], 72, 1.0);
                double *x = tr_test_to_f64(&in[0]);
                const int64_t inner = ax == 2 ? 1 : ax == 1 ? 5 : 30, R = sh[ax], outer = 120 / (R * inner);
                for (int64_t o = 0; o < outer; o++) /* a tie: the first of the two gets dy */
                    for (int64_t c = 0; c < inner; c++) {
                        const int64_t b = o * R * inner + c;
                        x[b + 1 * inner] = x[b + (R - 1) * inner] = 10.0 + (double)c;
                    }
                set_f64(&in[0], x);
                double *g = tr_test_to_f64(&in[1]), *ref = malloc(sizeof(double) * 120);
                tr_ref_max_grad(3, sh, x, g, axis, ref);
                struct tr_attrs at = {.ints = {axis, keep}};
                run(TR_OP_MAX_GRAD, &at, 2, in, &dx);
                check(keep ? "max_grad keepdims 1" : "max_grad keepdims 0", dt, &dx, ref);
                free(x), free(g), free(ref);
                tfree(&in[0], &in[1], &dx, NULL);
            }
}

static void test_slice_grad(void **state) {
    (void)state;
    const struct { int axis; int64_t start, step, cnt; } cases[] = {{1, 1, 3, 3}, {0, 0, 2, 2}, {2, 3, 1, 1}, {-2, 2, 4, 2}};
    for (int d = 0; d < N_DTS; d++)
        for (int c = 0; c < 4; c++) {
            const enum tr_dtype dt = DTS[d];
            const int64_t sh[3] = {3, 10, 4};
            const int ax = cases[c].axis < 0 ? cases[c].axis + 3 : cases[c].axis;
            int64_t dsh[3] = {3, 10, 4};
            dsh[ax] = cases[c].cnt;
            struct tr_tensor dy = tr_test_tensor(dt, 3, dsh), dx = tr_test_tensor(dt, 3, sh);
            tr_test_randn(&dy, 81 + c, 1.0);
            double *g = tr_test_to_f64(&dy), *ref = malloc(sizeof(double) * 120);
            tr_ref_slice_grad(3, dsh, g, ax, cases[c].start, cases[c].step, sh[ax], ref);
            struct tr_attrs at = {.ints = {cases[c].axis, cases[c].start, 0, cases[c].step, sh[ax]}};
            run(TR_OP_SLICE_GRAD, &at, 1, &dy, &dx);
            check("slice_grad", dt, &dx, ref);
            free(g), free(ref);
            tfree(&dy, &dx, NULL);
        }
    struct tr_tensor dy = TENSOR(TR_DTYPE_F32, 3, 4, 4), dx = TENSOR(TR_DTYPE_F32, 3, 10, 4);
    tr_test_randn(&dy, 89, 1.0);
    struct tr_attrs at = {.ints = {1, 2, 0, 3, 10}}; /* 2, 5, 8, 11: past the end */
    run_fails(TR_OP_SLICE_GRAD, &at, 1, &dy, &dx, TR_ERR_INVALID, "slice_grad");
    tfree(&dy, &dx, NULL);
}

/* ---- losses ---- */

/* The loss the forward kernel computes at x (set into in[0]) times dloss 1.5: its own
 * differences, since cross entropy's kernel takes f64. */
struct ce_loss {
    struct tr_tensor *in, *loss;
    const struct tr_attrs *at;
    const double *x;
};

static double ce_loss(void *p) {
    struct ce_loss *c = p;
    set_f64(&c->in[0], c->x);
    run(TR_OP_CROSS_ENTROPY, c->at, 2, c->in, c->loss);
    return 1.5 * tr_tensor_get_f64(c->loss, 0);
}

static void test_cross_entropy(void **state) {
    (void)state;
    const int64_t N = 9, C = 11, IGN = -100;
    for (int d = 0; d < N_DTS; d++)
        for (int li = 0; li < 2; li++) {
            const enum tr_dtype dt = DTS[d], ldt = li ? TR_DTYPE_I64 : TR_DTYPE_I32;
            const enum tr_dtype odt = dt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32;
            struct tr_tensor in[3] = {TENSOR(dt, 9, 11), TENSOR(ldt, 9), SCALAR(odt)};
            struct tr_tensor loss = SCALAR(odt), dlog = TENSOR(dt, 9, 11);
            tr_test_randn(&in[0], 91, 2.0);
            tr_test_randint(&in[1], 92, C);
            tr_tensor_set_f64(&in[1], 2, (double)IGN);
            tr_tensor_set_f64(&in[1], 6, (double)IGN);
            tr_tensor_set_f64(&in[2], 0, 1.5);
            double *x = tr_test_to_f64(&in[0]), *ref = malloc(sizeof(double) * N * C);
            double *lab = tr_test_to_f64(&in[1]);
            struct tr_attrs at = {.ints = {IGN, 1}};
            double want = tr_ref_cross_entropy(x, lab, N, C, 1, IGN, 1.5, ref);
            run(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss);
            check("cross_entropy with an ignore index", odt, &loss, &want);
            run(TR_OP_CROSS_ENTROPY_GRAD, &at, 3, in, &dlog);
            check("cross_entropy_grad", dt, &dlog, ref);
            for (int64_t c = 0; c < C; c++)
                if (tr_tensor_get_f64(&dlog, 2 * C + c) != 0.0) fail_msg("cross_entropy_grad: ignored row not zero");
            if (dt == TR_DTYPE_F64) { /* differences of the forward kernel itself, times dloss */
                double *got = tr_test_to_f64(&dlog);
                struct ce_loss cl = {in, &loss, &at, x};
                tr_ref_fd_grad(ce_loss, &cl, x, N * C, FD_H, ref);
                set_f64(&in[0], x);
                check_fd("cross_entropy_grad", got, ref, N * C);
                free(got);
            }
            /* every label ignored: loss 0, gradient 0 */
            for (int64_t i = 0; i < N; i++) tr_tensor_set_f64(&in[1], i, (double)IGN);
            run(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss);
            assert_true(tr_tensor_get_f64(&loss, 0) == 0.0);
            run(TR_OP_CROSS_ENTROPY_GRAD, &at, 3, in, &dlog);
            for (int64_t i = 0; i < N * C; i++) assert_true(tr_tensor_get_f64(&dlog, i) == 0.0);
            /* a label out of range, then the ignore index without ints[1] */
            tr_test_randint(&in[1], 92, C);
            tr_tensor_set_f64(&in[1], 3, (double)C);
            run_fails(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss, TR_ERR_INVALID, "labels[3] = 11");
            run_fails(TR_OP_CROSS_ENTROPY_GRAD, &at, 3, in, &dlog, TR_ERR_INVALID, "labels[3] = 11");
            tr_tensor_set_f64(&in[1], 3, (double)IGN);
            struct tr_attrs noign = {.ints = {IGN, 0}};
            run_fails(TR_OP_CROSS_ENTROPY, &noign, 2, in, &loss, TR_ERR_INVALID, "labels[3] = -100");
            /* without an ignore index */
            tr_tensor_set_f64(&in[1], 3, 4);
            free(lab);
            lab = tr_test_to_f64(&in[1]);
            want = tr_ref_cross_entropy(x, lab, N, C, 0, 0, 0, NULL);
            run(TR_OP_CROSS_ENTROPY, &noign, 2, in, &loss);
            check("cross_entropy", odt, &loss, &want);
            free(x), free(ref), free(lab);
            tfree(&in[0], &in[1], &in[2], &loss, &dlog, NULL);
        }
}

static void test_mse(void **state) {
    (void)state;
    const int64_t sizes[2] = {7 * 13, 9001};
    for (int d = 0; d < N_DTS; d++)
        for (int s = 0; s < 2; s++) {
            const enum tr_dtype dt = DTS[d], odt = dt == TR_DTYPE_F64 ? TR_DTYPE_F64 : TR_DTYPE_F32;
            struct tr_tensor in[2] = {TENSOR(dt, sizes[s]), TENSOR(dt, sizes[s])}, loss = SCALAR(odt);
            tr_test_randn(&in[0], 101, 1.0);
            tr_test_randn(&in[1], 102, 1.0);
            double *p = tr_test_to_f64(&in[0]), *t = tr_test_to_f64(&in[1]), want = 0;
            want = tr_ref_mse(p, t, sizes[s]);
            run(TR_OP_MSE, NULL, 2, in, &loss);
            check("mse", odt, &loss, &want);
            free(p), free(t);
            tfree(&in[0], &in[1], &loss, NULL);
        }
    struct tr_tensor in[2] = {TENSOR(TR_DTYPE_F32, 4), TENSOR(TR_DTYPE_F32, 4)}, loss = SCALAR(TR_DTYPE_BF16);
    tr_test_randn(&in[0], 103, 1.0);
    tr_test_randn(&in[1], 104, 1.0);
    run_fails(TR_OP_MSE, NULL, 2, in, &loss, TR_ERR_SHAPE, "0-d f32");
    tfree(&in[0], &in[1], &loss, NULL);
}

/* ---- refusals and the bound path ---- */

static void test_errors_and_bind(void **state) {
    (void)state;
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 2, 8), g16 = TENSOR(TR_DTYPE_BF16, 2, 8), dx = TENSOR(TR_DTYPE_F32, 2, 8);
    struct tr_tensor xi = TENSOR(TR_DTYPE_I32, 2, 8);
    tr_test_randn(&x, 111, 1.0);
    tr_test_randn(&g16, 112, 1.0);
    tr_test_randint(&xi, 113, 5);
    struct tr_attrs at = {.ints = {TR_OP_TANH}};
    struct tr_tensor in[2] = {x, g16};
    run_fails(TR_OP_UNARY_GRAD, &at, 2, in, &dx, TR_ERR_SHAPE, "unary_grad: x [2,8] f32 and dy [2,8] bf16");
    in[1] = xi;
    run_fails(TR_OP_UNARY_GRAD, &at, 2, in, &dx, TR_ERR_UNSUPPORTED, "unary_grad: dy [2,8] i32");
    at.ints[0] = TR_OP_SOFTMAX;
    in[1] = x;
    run_fails(TR_OP_UNARY_GRAD, &at, 2, in, &dx, TR_ERR_INVALID, "softmax");
    /* attention_grad: the operand index, and a dy of the wrong shape */
    struct tr_tensor q = TENSOR(TR_DTYPE_F32, 1, 2, 3, 4), dyb = TENSOR(TR_DTYPE_F32, 1, 2, 4, 4);
    tr_test_randn(&q, 114, 1.0);
    tr_test_randn(&dyb, 115, 1.0);
    struct tr_tensor ain[4] = {q, q, q, q}, aout = TENSOR(TR_DTYPE_F32, 1, 2, 3, 4);
    struct tr_attrs aat = {.ints = {0, 0, 3}};
    run_fails(TR_OP_ATTENTION_GRAD, &aat, 4, ain, &aout, TR_ERR_INVALID, "ints[2]=3");
    aat.ints[2] = 0;
    ain[3] = dyb;
    run_fails(TR_OP_ATTENTION_GRAD, &aat, 4, ain, &aout, TR_ERR_SHAPE, "dy [1,2,4,4] f32");
    run_fails(TR_OP_ATTENTION_GRAD, &aat, 3, ain, &aout, TR_ERR_INVALID, "attention_grad: 3 inputs");

    /* bound: softmax_grad checked at bind, then the call computes what run computes */
    struct tr_error err = {0};
    struct tr_kernel_call call;
    struct tr_tensor sin[2] = {x, x}, o1 = TENSOR(TR_DTYPE_F32, 2, 8), o2 = TENSOR(TR_DTYPE_F32, 2, 8);
    int st = tr_kernels_bind(K, TR_OP_SOFTMAX_GRAD, NULL, 2, sin, &o1, &call, &err);
    if (st) fail_msg("bind softmax_grad: %s", err.msg);
    tr_test_poison(&o1);
    st = tr_kernels_call(K, &call, &err);
    if (st) fail_msg("call softmax_grad: %s", err.msg);
    tr_kernels_unbind(K, &call);
    run(TR_OP_SOFTMAX_GRAD, NULL, 2, sin, &o2);
    double *ref = tr_test_to_f64(&o2);
    check("bound softmax_grad", TR_DTYPE_F32, &o1, ref);
    free(ref);
    sin[1] = g16;
    assert_int_equal(tr_kernels_bind(K, TR_OP_SOFTMAX_GRAD, NULL, 2, sin, &o1, &call, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "softmax_grad"));
    tfree(&x, &g16, &dx, &xi, &q, &dyb, &aout, &o1, &o2, NULL);
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_unary_grad, test_softmax_grad,
             test_layer_norm_grad, test_embedding_grad, test_attention_grad, test_broadcast, test_max_grad,
             test_slice_grad, test_cross_entropy, test_mse, test_errors_and_bind)
