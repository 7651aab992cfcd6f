/* The training kernels (grad.c, loss.c) through tr_kernels_run, each against a float64
 * reference written naively here, in f32, bf16 and f64 (inputs random and never zero,
 * outputs poisoned with NaN first, references computed from the rounded inputs).
 *
 * The gradient kernels are also checked against central finite differences of the
 * forward function in f64 (relative error < 1e-6). The cpu forward kernels of unary,
 * softmax, layer norm and attention take no f64, so the differences are taken of the
 * naive f64 forward written here, which is first checked against the real forward
 * kernel in f32: the gradient is that of the function the forward kernel computes
 * (erf vs tanh GELU, the window's alignment, a fully masked row). Cross entropy's
 * forward kernel takes f64, and its differences are taken of the kernel itself. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ‖a − b‖ / ‖b‖ over n doubles. */
static double rel(const double *a, const double *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : INFINITY;
}

static void check_fd(const char *what, const double *got, const double *fd, int64_t n) {
    double e = rel(got, fd, n);
    if (!(e < FD_TOL)) fail_msg("%s: relative error %.3g against finite differences >= %.1g", what, e, FD_TOL);
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

static double f_unary(int op, int approx, double a, double x) {
    switch (op) {
    case TR_OP_GELU:
        if (approx) return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        return 0.5 * x * (1 + erf(x / sqrt(2)));
    case TR_OP_TANH: return tanh(x);
    case TR_OP_RELU: return x > 0 ? x : 0;
    case TR_OP_SILU: return x / (1 + exp(-x));
    case TR_OP_SIGMOID: return 1 / (1 + exp(-x));
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -x;
    case TR_OP_SQRT: return sqrt(x);
    case TR_OP_RSQRT: return 1 / sqrt(x);
    default: return a * x + 0.25; /* SCALE, beta 0.25 */
    }
}

static double df_unary(int op, int approx, double a, double x) {
    switch (op) {
    case TR_OP_GELU:
        if (approx) {
            double c = sqrt(2 / M_PI), u = c * (x + 0.044715 * x * x * x), t = tanh(u);
            return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
        }
        return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-x * x / 2) / sqrt(2 * M_PI);
    case TR_OP_TANH: return 1 - tanh(x) * tanh(x);
    case TR_OP_RELU: return x > 0 ? 1 : 0;
    case TR_OP_SILU: {
        double s = 1 / (1 + exp(-x));
        return s + x * s * (1 - s);
    }
    case TR_OP_SIGMOID: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    case TR_OP_EXP: return exp(x);
    case TR_OP_NEG: return -1;
    case TR_OP_SQRT: return 0.5 / sqrt(x);
    case TR_OP_RSQRT: return -0.5 * pow(x, -1.5);
    default: return a;
    }
}

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
            for (int64_t i = 0; i < n; i++) ref[i] = g[i] * df_unary(op, ap, alpha, x[i]);
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
}

/* ---- softmax_grad ---- */

static void softmax_rows(const double *x, double *y, int64_t rows, int64_t D) {
    for (int64_t r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int64_t i = 0; i < D; i++) m = fmax(m, x[r * D + i]);
        for (int64_t i = 0; i < D; i++) s += exp(x[r * D + i] - m);
        for (int64_t i = 0; i < D; i++) y[r * D + i] = exp(x[r * D + i] - m) / s;
    }
}

static void test_softmax_grad(void **state) {
    (void)state;
    const int64_t R = 6, D = 37, n = R * D;
    struct tr_tensor xs = TENSOR(TR_DTYPE_F64, 6, 37);
    tr_test_randn(&xs, 21, 2.0);
    double *x = tr_test_to_f64(&xs), *y = malloc(sizeof(double) * n), *ref = malloc(sizeof(double) * n);
    softmax_rows(x, y, R, D);
    for (int d = 0; d < N_DTS; d++) {
        const enum tr_dtype dt = DTS[d];
        struct tr_tensor in[2] = {TENSOR(dt, 2, 3, 37), TENSOR(dt, 2, 3, 37)}, dx = TENSOR(dt, 2, 3, 37);
        set_f64(&in[0], y);
        tr_test_randn(&in[1], 22, 1.0);
        double *yr = tr_test_to_f64(&in[0]), *g = tr_test_to_f64(&in[1]);
        for (int64_t r = 0; r < R; r++) /* the Jacobian, entry by entry */
            for (int64_t i = 0; i < D; i++) {
                double s = 0;
                for (int64_t j = 0; j < D; j++)
                    s += g[r * D + j] * yr[r * D + j] * ((i == j ? 1.0 : 0.0) - yr[r * D + i]);
                ref[r * D + i] = s;
            }
        run(TR_OP_SOFTMAX_GRAD, NULL, 2, in, &dx);
        check("softmax_grad", dt, &dx, ref);
        if (dt == TR_DTYPE_F64) {
            double *got = tr_test_to_f64(&dx), *xp = malloc(sizeof(double) * n), *yp = malloc(sizeof(double) * n);
            memcpy(xp, x, sizeof(double) * n);
            for (int64_t i = 0; i < n; i++) {
                double lp, lm;
                xp[i] = x[i] + FD_H;
                softmax_rows(xp, yp, R, D);
                lp = dot(g, yp, n);
                xp[i] = x[i] - FD_H;
                softmax_rows(xp, yp, R, D);
                lm = dot(g, yp, n);
                xp[i] = x[i];
                ref[i] = (lp - lm) / (2 * FD_H);
            }
            check_fd("softmax_grad", got, ref, n);
            free(got), free(xp), free(yp);
        }
        if (dt == TR_DTYPE_F32) {
            struct tr_tensor xf = TENSOR(dt, 2, 3, 37);
            set_f64(&xf, x);
            double *xr = tr_test_to_f64(&xf);
            softmax_rows(xr, ref, R, D);
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

static void ln_rows(const double *x, const double *gam, double eps, int64_t R, int64_t D, double *y, double *xh) {
    for (int64_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < D; i++) m += x[r * D + i] / D;
        for (int64_t i = 0; i < D; i++) v += (x[r * D + i] - m) * (x[r * D + i] - m) / D;
        for (int64_t i = 0; i < D; i++) {
            double h = (x[r * D + i] - m) / sqrt(v + eps);
            if (xh) xh[r * D + i] = h;
            if (y) y[r * D + i] = h * gam[i] + 0.1 * (double)(i % 3);
        }
    }
}

/* L = Σ dy·layer_norm(x) */
static double ln_loss(const double *x, const double *gam, const double *g, double eps, int64_t R, int64_t D,
                      double *buf) {
    ln_rows(x, gam, eps, R, D, buf, NULL);
    return dot(g, buf, R * D);
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
        double *xh = malloc(sizeof(double) * n), *ref = malloc(sizeof(double) * n), *rg = calloc(D, sizeof(double));
        ln_rows(x, gam, eps, R, D, NULL, xh);
        for (int64_t r = 0; r < R; r++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < D; i++) m += x[r * D + i] / D;
            for (int64_t i = 0; i < D; i++) v += (x[r * D + i] - m) * (x[r * D + i] - m) / D;
            const double rs = 1 / sqrt(v + eps);
            for (int64_t i = 0; i < D; i++) { /* Σ_j dy_j γ_j ∂x̂_j/∂x_i */
                double s = 0;
                for (int64_t j = 0; j < D; j++)
                    s += g[r * D + j] * gam[j] * rs *
                         ((i == j ? 1.0 : 0.0) - 1.0 / D - xh[r * D + i] * xh[r * D + j] / D);
                ref[r * D + i] = s;
                rg[i] += g[r * D + i] * xh[r * D + i];
            }
        }
        struct tr_attrs at = {.floats = {(float)eps}};
        run(TR_OP_LAYER_NORM_GRAD, &at, 3, in, &dx);
        check("layer_norm_grad", dt, &dx, ref);
        struct tr_tensor gin[2] = {in[0], in[2]};
        run(TR_OP_LAYER_NORM_GRAD_GAMMA, &at, 2, gin, &dg);
        check("layer_norm_grad_gamma", dt, &dg, rg);
        if (dt == TR_DTYPE_F64 && fd) {
            double *got = tr_test_to_f64(&dx), *gotg = tr_test_to_f64(&dg), *buf = malloc(sizeof(double) * n);
            for (int64_t i = 0; i < n; i++) {
                double x0 = x[i];
                x[i] = x0 + FD_H;
                double lp = ln_loss(x, gam, g, eps, R, D, buf);
                x[i] = x0 - FD_H;
                double lm = ln_loss(x, gam, g, eps, R, D, buf);
                x[i] = x0;
                ref[i] = (lp - lm) / (2 * FD_H);
            }
            check_fd("layer_norm_grad", got, ref, n);
            for (int64_t i = 0; i < D; i++) {
                double g0 = gam[i];
                gam[i] = g0 + FD_H;
                double lp = ln_loss(x, gam, g, eps, R, D, buf);
                gam[i] = g0 - FD_H;
                double lm = ln_loss(x, gam, g, eps, R, D, buf);
                gam[i] = g0;
                ref[i] = (lp - lm) / (2 * FD_H);
            }
            check_fd("layer_norm_grad_gamma", gotg, ref, D);
            free(got), free(gotg), free(buf);
        }
        if (dt == TR_DTYPE_F32 && fd) {
            struct tr_tensor b = TENSOR(dt, D);
            double *bv = malloc(sizeof(double) * D);
            for (int64_t i = 0; i < D; i++) bv[i] = 0.1 * (double)(i % 3);
            set_f64(&b, bv);
            struct tr_tensor fin[3] = {in[0], in[1], b};
            ln_rows(x, gam, eps, R, D, ref, NULL);
            run(TR_OP_LAYER_NORM, &at, 3, fin, &dx);
            check("forward of the layer norm reference", dt, &dx, ref);
            free(bv);
            tfree(&b, NULL);
        }
        free(x), free(gam), free(g), free(xh), free(ref), free(rg);
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
        double *g = tr_test_to_f64(&in[1]), *ref = calloc(V * D, sizeof(double));
        for (int64_t p = 0; p < B * T; p++) {
            int64_t id = (int64_t)tr_tensor_get_f64(&in[0], p);
            for (int64_t c = 0; c < D; c++) ref[id * D + c] += g[p * D + c];
        }
        struct tr_attrs at = {.ints = {V}};
        run(TR_OP_EMBEDDING_GRAD, &at, 2, in, &dtab);
        check("embedding_grad", dt, &dtab, ref);
        for (int64_t c = 0; c < D; c++)
            if (tr_tensor_get_f64(&dtab, (V - 1) * D + c) != 0.0) fail_msg("embedding_grad: unused row not zero");
        free(g), free(ref);
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
    int mask; /* 0 none, 1 (B,1,1,Tk) with a -inf key, 2 (Tq,Tk) */
    int causal, window;
    float scale; /* 0: 1/sqrt(D) */
};

/* Visible iff the forward (attention.c) lets query i see key j. */
static int visible(const struct attn_cfg *c, int64_t i, int64_t j) {
    int64_t pos = i + c->Tk - c->Tq;
    if ((c->causal || c->window > 0) && j > pos) return 0;
    if (c->window > 0 && j <= pos - c->window) return 0;
    return 1;
}

static double mask_at(const struct attn_cfg *c, const double *m, int64_t b, int64_t i, int64_t j) {
    if (c->mask == 1) return m[b * c->Tk + j];
    if (c->mask == 2) return m[i * c->Tk + j];
    return 0;
}

/* out, and (when dy) dq, dk, dv, all naive with the whole score matrix. */
static void attn_ref(const struct attn_cfg *c, const double *q, const double *k, const double *v, const double *m,
                     const double *dy, double *out, double *dq, double *dk, double *dv) {
    const int64_t G = c->H / c->Hk, D = c->D, Dv = c->Dv, Tq = c->Tq, Tk = c->Tk;
    const double sc = c->scale != 0 ? c->scale : (double)(1.0f / sqrtf((float)D)); /* as dispatch fills it */
    double *P = malloc(sizeof(double) * Tk), *dP = malloc(sizeof(double) * Tk);
    if (dy) {
        memset(dq, 0, sizeof(double) * c->B * c->H * Tq * D);
        memset(dk, 0, sizeof(double) * c->B * c->Hk * Tk * D);
        memset(dv, 0, sizeof(double) * c->B * c->Hk * Tk * Dv);
    }
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t hk = h / G;
                const double *qi = q + ((b * c->H + h) * Tq + i) * D;
                double mx = -INFINITY, s = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    P[j] = -INFINITY;
                    if (!visible(c, i, j)) continue;
                    const double *kj = k + ((b * c->Hk + hk) * Tk + j) * D;
                    P[j] = sc * dot(qi, kj, D) + mask_at(c, m, b, i, j);
                    mx = fmax(mx, P[j]);
                }
                for (int64_t j = 0; j < Tk; j++) {
                    P[j] = mx == -INFINITY ? 0 : exp(P[j] - mx);
                    s += P[j];
                }
                for (int64_t j = 0; j < Tk; j++) P[j] = s > 0 ? P[j] / s : 0;
                double *oi = out + ((b * c->H + h) * Tq + i) * Dv;
                for (int64_t e = 0; e < Dv; e++) {
                    oi[e] = 0;
                    for (int64_t j = 0; j < Tk; j++) oi[e] += P[j] * v[((b * c->Hk + hk) * Tk + j) * Dv + e];
                }
                if (!dy) continue;
                const double *gi = dy + ((b * c->H + h) * Tq + i) * Dv;
                double delta = 0;
                for (int64_t j = 0; j < Tk; j++) {
                    dP[j] = dot(gi, v + ((b * c->Hk + hk) * Tk + j) * Dv, Dv);
                    delta += P[j] * dP[j];
                }
                for (int64_t j = 0; j < Tk; j++) {
                    const double ds = P[j] * (dP[j] - delta);
                    const double *kj = k + ((b * c->Hk + hk) * Tk + j) * D;
                    for (int64_t e = 0; e < D; e++) {
                        dq[((b * c->H + h) * Tq + i) * D + e] += sc * ds * kj[e];
                        dk[((b * c->Hk + hk) * Tk + j) * D + e] += sc * ds * qi[e];
                    }
                    for (int64_t e = 0; e < Dv; e++) dv[((b * c->Hk + hk) * Tk + j) * Dv + e] += P[j] * gi[e];
                }
            }
    free(P), free(dP);
}

static int attn_inputs(const struct attn_cfg *c, enum tr_dtype dt, struct tr_tensor *in, uint64_t seed) {
    in[0] = TENSOR(dt, c->B, c->H, c->Tq, c->D);
    in[1] = TENSOR(dt, c->B, c->Hk, c->Tk, c->D);
    in[2] = TENSOR(dt, c->B, c->Hk, c->Tk, c->Dv);
    in[3] = TENSOR(dt, c->B, c->H, c->Tq, c->Dv);
    for (int i = 0; i < 4; i++) tr_test_randn(&in[i], seed + i, 1.0);
    if (c->mask == 1) {
        in[4] = TENSOR(TR_DTYPE_F32, c->B, 1, 1, c->Tk);
        tr_test_randn(&in[4], seed + 4, 1.0);
        tr_tensor_set_f64(&in[4], 1, -INFINITY);
    } else if (c->mask == 2) {
        in[4] = TENSOR(dt, c->Tq, c->Tk);
        tr_test_randn(&in[4], seed + 4, 0.5);
    }
    return c->mask ? 5 : 4;
}

/* L = Σ dy·attention(q,k,v) by central differences in each element of q (w 0), k (1), v (2). */
static void attn_fd(const struct attn_cfg *c, double *q, double *k, double *v, const double *m, const double *dy,
                    int w, double *fd) {
    double *x = w == 0 ? q : w == 1 ? k : v;
    const int64_t n = w == 0 ? c->B * c->H * c->Tq * c->D : w == 1 ? c->B * c->Hk * c->Tk * c->D : c->B * c->Hk * c->Tk * c->Dv;
    const int64_t no = c->B * c->H * c->Tq * c->Dv;
    double *out = malloc(sizeof(double) * no);
    for (int64_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + FD_H;
        attn_ref(c, q, k, v, m, NULL, out, NULL, NULL, NULL);
        double lp = dot(dy, out, no);
        x[i] = x0 - FD_H;
        attn_ref(c, q, k, v, m, NULL, out, NULL, NULL, NULL);
        double lm = dot(dy, out, no);
        x[i] = x0;
        fd[i] = (lp - lm) / (2 * FD_H);
    }
    free(out);
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
        attn_ref(c, q, k, v, m, g, out, rq, rk, rv);
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
                attn_fd(c, q, k, v, m, g, w, f);
                check_fd(what, got, f, tr_tensor_numel(&o));
                free(got), free(f);
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
                rc = tr_kernels_bind_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, c->scale,
                                                        c->causal, c->window, &o[0], &o[1], &o[2], &call, &e);
                if (rc == TR_OK) rc = tr_kernels_call(tr_test_k, &call, &e);
                tr_kernels_unbind(tr_test_k, &call);
            } else {
                const float sc = c->scale != 0.0f ? c->scale : 1.0f / sqrtf((float)c->D); /* the op's default */
                rc = tr_k_attention_backward(tr_test_k, &in[0], &in[1], &in[2], &in[3], mask, sc, c->causal,
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
        for (int i = 0; i < n_in; i++) tr_test_tensor_free(&in[i]);
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
        for (int64_t i = 0; i < 120; i++) ref[i] = xv[((i / 20) % 3) * 5 + i % 5];
        run(TR_OP_BROADCAST, &at, 1, &x, &out);
        check("broadcast (3,1,5)->(2,3,4,5)", dt, &out, ref);
        struct tr_tensor y = TENSOR(dt, 4, 1), out2 = TENSOR(dt, 4, 6);
        tr_test_randn(&y, 62, 3.0);
        struct tr_attrs at2 = {.ints = {4, 6}, .n_ints = 2};
        double *yv = tr_test_to_f64(&y);
        for (int64_t i = 0; i < 24; i++) ref[i] = yv[i / 6];
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
                double *g = tr_test_to_f64(&in[1]), *ref = calloc(120, sizeof(double));
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t c = 0; c < inner; c++) {
                        int64_t arg = 0;
                        for (int64_t r = 1; r < R; r++)
                            if (x[o * R * inner + r * inner + c] > x[o * R * inner + arg * inner + c]) arg = r;
                        ref[o * R * inner + arg * inner + c] = g[o * inner + c];
                    }
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
            double *g = tr_test_to_f64(&dy), *ref = calloc(120, sizeof(double));
            for (int64_t i = 0; i < dsh[0]; i++)
                for (int64_t j = 0; j < dsh[1]; j++)
                    for (int64_t l = 0; l < dsh[2]; l++) {
                        int64_t idx[3] = {i, j, l};
                        idx[ax] = cases[c].start + idx[ax] * cases[c].step;
                        ref[(idx[0] * 10 + idx[1]) * 4 + idx[2]] = g[(i * dsh[1] + j) * dsh[2] + l];
                    }
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

static double ce_ref(const double *x, const int64_t *lab, int64_t N, int64_t C, int has_ign, int64_t ign, double *grad,
                     double dl) {
    double s = 0;
    int64_t nv = 0;
    for (int64_t i = 0; i < N; i++) nv += !(has_ign && lab[i] == ign);
    for (int64_t i = 0; i < N; i++) {
        const double *r = x + i * C;
        double m = -INFINITY, z = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, r[c]);
        for (int64_t c = 0; c < C; c++) z += exp(r[c] - m);
        int ig = has_ign && lab[i] == ign;
        if (!ig) s += m + log(z) - r[lab[i]];
        if (grad)
            for (int64_t c = 0; c < C; c++)
                grad[i * C + c] = ig ? 0 : dl / nv * (exp(r[c] - m) / z - (c == lab[i] ? 1.0 : 0.0));
    }
    return nv ? s / nv : 0;
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
            int64_t lab[9];
            for (int64_t i = 0; i < N; i++) lab[i] = (int64_t)tr_tensor_get_f64(&in[1], i);
            struct tr_attrs at = {.ints = {IGN, 1}};
            double want = ce_ref(x, lab, N, C, 1, IGN, ref, 1.5);
            run(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss);
            check("cross_entropy with an ignore index", odt, &loss, &want);
            run(TR_OP_CROSS_ENTROPY_GRAD, &at, 3, in, &dlog);
            check("cross_entropy_grad", dt, &dlog, ref);
            for (int64_t c = 0; c < C; c++)
                if (tr_tensor_get_f64(&dlog, 2 * C + c) != 0.0) fail_msg("cross_entropy_grad: ignored row not zero");
            if (dt == TR_DTYPE_F64) { /* differences of the forward kernel itself, times dloss */
                double *got = tr_test_to_f64(&dlog);
                for (int64_t i = 0; i < N * C; i++) {
                    double x0 = x[i];
                    tr_tensor_set_f64(&in[0], i, x0 + FD_H);
                    run(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss);
                    double lp = tr_tensor_get_f64(&loss, 0);
                    tr_tensor_set_f64(&in[0], i, x0 - FD_H);
                    run(TR_OP_CROSS_ENTROPY, &at, 2, in, &loss);
                    double lm = tr_tensor_get_f64(&loss, 0);
                    tr_tensor_set_f64(&in[0], i, x0);
                    ref[i] = 1.5 * (lp - lm) / (2 * FD_H);
                }
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
            for (int64_t i = 0; i < N; i++) lab[i] = (int64_t)tr_tensor_get_f64(&in[1], i);
            want = ce_ref(x, lab, N, C, 0, 0, NULL, 0);
            run(TR_OP_CROSS_ENTROPY, &noign, 2, in, &loss);
            check("cross_entropy", odt, &loss, &want);
            free(x), free(ref);
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
            for (int64_t i = 0; i < sizes[s]; i++) want += (p[i] - t[i]) * (p[i] - t[i]) / sizes[s];
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_grad),     cmocka_unit_test(test_softmax_grad),
        cmocka_unit_test(test_layer_norm_grad), cmocka_unit_test(test_embedding_grad),
        cmocka_unit_test(test_attention_grad),  cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_max_grad),        cmocka_unit_test(test_slice_grad),
        cmocka_unit_test(test_cross_entropy),   cmocka_unit_test(test_mse),
        cmocka_unit_test(test_errors_and_bind),
    };
    return cmocka_run_group_tests(tests, tr_test_kernels_setup, tr_test_kernels_teardown);
}
