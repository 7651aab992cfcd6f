/* Optimizers: the ADAMW_STEP kernel against torch.optim.AdamW's update written out in
 * float64, and the builders (tr_adamw, tr_sgd) run for a few steps on a tiny regression
 * (MSE(x·W, y), gradients from tr_grad) by an interpreter over the graph API that calls
 * tr_kernels_run node by node and feeds the new values back into the bound buffers,
 * against the same steps computed in float64 here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fmemopen */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/trident.h"
#include "trident/kernels.h"

#define K tr_test_k /* the group's kernels context (testutil.h) */

static struct tr_tensor scalar_f32(float v) {
    struct tr_tensor t = tr_test_tensor(TR_DTYPE_F32, 0, NULL);
    *(float *)t.data = v;
    return t;
}

/* torch.optim.AdamW, one step on one element (decay first, then the Adam step). */
static double torch_adamw(double p, double m, double v, double lr, int t, double b1, double b2, double eps,
                          double wd) {
    p *= 1.0 - lr * wd;
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    double denom = sqrt(v) / sqrt(bc2) + eps;
    return p - lr / bc1 * m / denom;
}

/* ---- the kernel ---- */

static void kernel_case(enum tr_dtype dt, int64_t n) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, lr = 0.1f;
    int64_t shape[2] = {n / 8, 8};
    struct tr_tensor p = tr_test_tensor(dt, 2, shape), out = tr_test_tensor(dt, 2, shape);
    struct tr_tensor m = tr_test_tensor(TR_DTYPE_F32, 2, shape), v = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    struct tr_tensor g = tr_test_tensor(TR_DTYPE_F64, 2, shape);
    struct tr_tensor tl = scalar_f32(lr), ts = scalar_f32(1);
    tr_test_randn(&p, 11, 1.0);
    double *md = calloc((size_t)n, sizeof(double)), *vd = calloc((size_t)n, sizeof(double));
    double *ref = malloc(sizeof(double) * (size_t)n), *dref = malloc(sizeof(double) * (size_t)n);
    assert_non_null(md), assert_non_null(vd), assert_non_null(ref), assert_non_null(dref);
    for (int t = 1; t <= 5; t++) {
        tr_test_randn(&g, 100 + (uint64_t)t, 0.5);
        const double *gd = g.data;
        for (int64_t i = 0; i < n; i++) {
            md[i] = b1 * md[i] + (1.0 - b1) * gd[i];
            vd[i] = b2 * vd[i] + (1.0 - b2) * gd[i] * gd[i];
            ((float *)m.data)[i] = (float)md[i];
            ((float *)v.data)[i] = (float)vd[i];
        }
        double *pin = tr_test_to_f64(&p);
        for (int64_t i = 0; i < n; i++) {
            ref[i] = torch_adamw(pin[i], ((float *)m.data)[i], ((float *)v.data)[i], lr, t, b1, b2, eps, wd);
            dref[i] = ref[i] - pin[i];
        }
        *(float *)ts.data = (float)t;
        tr_test_poison(&out);
        struct tr_error err = {0};
        int st = tr_k_adamw_step(K, &p, &m, &v, &tl, &ts, b1, b2, eps, wd, &out, &err);
        if (st) fail_msg("adamw_step %s t=%d: %s", tr_dtype_name(dt), t, err.msg);
        char what[64];
        snprintf(what, sizeof what, "adamw_step %s t=%d", tr_dtype_name(dt), t);
        tr_assert_close(what, &out, ref, tr_test_tol(dt));
        double *o = tr_test_to_f64(&out);
        if (dt == TR_DTYPE_BF16) {
            /* rounded once: within an ulp of the exact value (an update of ~lr is ~25 ulps),
             * plus the f32 arithmetic's few ulps of the input where p and its update cancel */
            for (int64_t i = 0; i < n; i++)
                if (!(fabs(o[i] - ref[i]) <= 0x1p-8 * fabs(ref[i]) + 0x1p-21 * fabs(pin[i])))
                    fail_msg("%s: [%lld] = %.6g, reference %.6g (input %.6g)", what, (long long)i, o[i], ref[i],
                             pin[i]);
        } else {
            /* the update itself, not only the weight, matches */
            for (int64_t i = 0; i < n; i++) o[i] -= pin[i];
            double num = 0, den = 0;
            for (int64_t i = 0; i < n; i++) num += (o[i] - dref[i]) * (o[i] - dref[i]), den += dref[i] * dref[i];
            double e = sqrt(num / den);
            if (!(e < (dt == TR_DTYPE_F64 ? 1e-12 : 1e-5))) fail_msg("%s: update rel err %.3g", what, e);
        }
        free(o);
        free(pin);
        struct tr_tensor tmp = p;
        p = out, out = tmp;
    }
    free(md), free(vd), free(ref), free(dref);
    tr_test_tensor_free(&p), tr_test_tensor_free(&out), tr_test_tensor_free(&m), tr_test_tensor_free(&v);
    tr_test_tensor_free(&g), tr_test_tensor_free(&tl), tr_test_tensor_free(&ts);
}

static void test_kernel_f32(void **state) {
    (void)state;
    kernel_case(TR_DTYPE_F32, 40000); /* above the parallel threshold */
    kernel_case(TR_DTYPE_F32, 1000);
}
static void test_kernel_bf16(void **state) { kernel_case(TR_DTYPE_BF16, 3000); }
static void test_kernel_f64(void **state) { kernel_case(TR_DTYPE_F64, 1000); }

/* A bad step is refused by every call (it is data), also through a bound call that was
 * bound while the step held 0; a good one runs and matches tr_k_adamw_step. */
static void test_kernel_step_and_bind(void **state) {
    (void)state;
    int64_t shape[1] = {64};
    struct tr_tensor in[5] = {tr_test_tensor(TR_DTYPE_F32, 1, shape), tr_test_tensor(TR_DTYPE_F32, 1, shape),
                              tr_test_tensor(TR_DTYPE_F32, 1, shape), scalar_f32(0.01f), scalar_f32(0)};
    struct tr_tensor o1 = tr_test_tensor(TR_DTYPE_F32, 1, shape), o2 = tr_test_tensor(TR_DTYPE_F32, 1, shape);
    tr_test_randn(&in[0], 1, 1.0), tr_test_randn(&in[1], 2, 0.1), tr_test_randn(&in[2], 3, 0.1);
    for (int i = 0; i < 64; i++) ((float *)in[2].data)[i] = fabsf(((float *)in[2].data)[i]);
    struct tr_attrs at = {0};
    at.floats[0] = 0.9f, at.floats[1] = 0.999f, at.floats[2] = 1e-8f, at.floats[3] = 0.01f;
    struct tr_error err = {0};
    assert_int_equal(tr_kernels_run(K, TR_OP_ADAMW_STEP, &at, 5, in, &o1, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "step 0"));
    struct tr_kernel_call call;
    if (tr_kernels_bind(K, TR_OP_ADAMW_STEP, &at, 5, in, &o2, &call, &err)) fail_msg("bind: %s", err.msg);
    assert_int_equal(tr_kernels_call(K, &call, &err), TR_ERR_INVALID);
    *(float *)in[4].data = 2.5f;
    assert_int_equal(tr_kernels_call(K, &call, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "step 2.5"));
    *(float *)in[4].data = 3;
    tr_test_poison(&o1), tr_test_poison(&o2);
    if (tr_kernels_call(K, &call, &err)) fail_msg("call: %s", err.msg);
    if (tr_kernels_run(K, TR_OP_ADAMW_STEP, &at, 5, in, &o1, &err)) fail_msg("run: %s", err.msg);
    assert_memory_equal(o1.data, o2.data, 64 * sizeof(float));
    /* a moment of the wrong dtype is refused at bind */
    struct tr_tensor bad[5] = {in[0], in[1], tr_test_tensor(TR_DTYPE_BF16, 1, shape), in[3], in[4]};
    struct tr_kernel_call c2;
    assert_int_equal(tr_kernels_bind(K, TR_OP_ADAMW_STEP, &at, 5, bad, &o2, &c2, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "v "));
    tr_test_tensor_free(&bad[2]);
    tr_kernels_unbind(K, &call);
    tr_test_tensors_free(5, in);
    tr_test_tensor_free(&o1), tr_test_tensor_free(&o2);
}

/* ---- the whole update in one pass (tr_k_adamw_update) ---- */

/* The unfused graph's ops, as core's tr_adamw builds them, through the op dispatcher:
 * m' = SCALE(m, β1) + SCALE(g32, 1−β1), v' = SCALE(v, β2) + SCALE(g32·g32, 1−β2), then
 * ADAMW_STEP; g32 = CAST(g) when g is not f32. */
static void unfused(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                    const struct tr_tensor *g, const struct tr_tensor *lr, const struct tr_tensor *t, float b1,
                    float b2, struct tr_tensor *po, struct tr_tensor *mo, struct tr_tensor *vo) {
    const int nd = p->ndim;
    const int64_t *sh = p->shape;
    struct tr_tensor g32 = tr_test_tensor(TR_DTYPE_F32, nd, sh), a = tr_test_tensor(TR_DTYPE_F32, nd, sh),
                     b = tr_test_tensor(TR_DTYPE_F32, nd, sh), gg = tr_test_tensor(TR_DTYPE_F32, nd, sh);
    struct tr_error err = {0};
    int rc = g->dtype == TR_DTYPE_F32 ? tr_k_unary(K, TR_OP_SCALE, NULL, g, &g32, &err)
                                      : tr_kernels_run(K, TR_OP_CAST, NULL, 1, g, &g32, &err);
    struct tr_attrs s1 = {.floats = {b1, 0.0f}}, s2 = {.floats = {1.0f - b1, 0.0f}};
    struct tr_attrs s3 = {.floats = {b2, 0.0f}}, s4 = {.floats = {1.0f - b2, 0.0f}};
    struct tr_tensor pair[2];
    if (!rc) rc = tr_k_unary(K, TR_OP_SCALE, &s1, m, &a, &err);
    if (!rc) rc = tr_k_unary(K, TR_OP_SCALE, &s2, &g32, &b, &err);
    if (!rc) pair[0] = a, pair[1] = b, rc = tr_kernels_run(K, TR_OP_ADD, NULL, 2, pair, mo, &err);
    if (!rc) pair[0] = g32, pair[1] = g32, rc = tr_kernels_run(K, TR_OP_MUL, NULL, 2, pair, &gg, &err);
    if (!rc) rc = tr_k_unary(K, TR_OP_SCALE, &s3, v, &a, &err);
    if (!rc) rc = tr_k_unary(K, TR_OP_SCALE, &s4, &gg, &b, &err);
    if (!rc) pair[0] = a, pair[1] = b, rc = tr_kernels_run(K, TR_OP_ADD, NULL, 2, pair, vo, &err);
    if (!rc) rc = tr_k_adamw_step(K, p, mo, vo, lr, t, b1, b2, 1e-8f, 0.01f, po, &err);
    if (rc) fail_msg("unfused adamw: %s", err.msg);
    tr_test_tensor_free(&g32), tr_test_tensor_free(&a), tr_test_tensor_free(&b), tr_test_tensor_free(&gg);
}

static struct tr_tensor copy_of(const struct tr_tensor *x) {
    struct tr_tensor c = tr_test_tensor((enum tr_dtype)x->dtype, x->ndim, x->shape);
    memcpy(c.data, x->data, tr_tensor_nbytes(x));
    return c;
}

static void assert_same_bits(const char *what, const struct tr_tensor *a, const struct tr_tensor *b) {
    if (memcmp(a->data, b->data, tr_tensor_nbytes(a)) != 0) fail_msg("%s: not the same bits", what);
}

/* param dtype dt, gradient dtype gdt, n elements, step t: against the float64 update
 * (moments included), bit for bit against the unfused ops, in place as out of place, and
 * bound as called. */
static void update_case(enum tr_dtype dt, enum tr_dtype gdt, int64_t n, int t) {
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, lr = 0.05f;
    int64_t shape[2] = {n / 8, 8};
    char what[96];
    snprintf(what, sizeof what, "adamw_update %s grad %s n=%lld t=%d", tr_dtype_name(dt), tr_dtype_name(gdt),
             (long long)n, t);
    struct tr_tensor p = tr_test_tensor(dt, 2, shape), g = tr_test_tensor(gdt, 2, shape);
    struct tr_tensor m = tr_test_tensor(TR_DTYPE_F32, 2, shape), v = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    struct tr_tensor tl = scalar_f32(lr), ts = scalar_f32((float)t);
    tr_test_randn(&p, 21, 1.0), tr_test_randn(&g, 22, 0.5), tr_test_randn(&m, 23, 0.1), tr_test_randn(&v, 24, 0.1);
    float *vf = v.data;
    for (int64_t i = 0; i < n; i++) vf[i] = vf[i] * vf[i]; /* a second moment: >= 0 */
    /* float64: the moments from the f32 moments and the gradient as read, then the step */
    double *pin = tr_test_to_f64(&p), *gin = tr_test_to_f64(&g);
    double *mr = malloc(sizeof(double) * (size_t)n), *vr = malloc(sizeof(double) * (size_t)n);
    double *pr = malloc(sizeof(double) * (size_t)n);
    assert_non_null(mr), assert_non_null(vr), assert_non_null(pr);
    for (int64_t i = 0; i < n; i++) {
        double gi = gdt == TR_DTYPE_F64 ? (float)gin[i] : gin[i]; /* an f64 gradient is read as f32 */
        mr[i] = b1 * (double)((float *)m.data)[i] + (1.0 - b1) * gi;
        vr[i] = b2 * (double)vf[i] + (1.0 - b2) * gi * gi;
    }
    struct tr_tensor po = tr_test_tensor(dt, 2, shape), mo = tr_test_tensor(TR_DTYPE_F32, 2, shape),
                     vo = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    tr_test_poison(&po), tr_test_poison(&mo), tr_test_poison(&vo);
    struct tr_error err = {0};
    if (tr_k_adamw_update(K, &p, &m, &v, &g, &tl, &ts, b1, b2, eps, wd, &po, &mo, &vo, &err))
        fail_msg("%s: %s", what, err.msg);
    char w2[128];
    snprintf(w2, sizeof w2, "%s: m", what);
    tr_assert_close(w2, &mo, mr, 1e-6);
    snprintf(w2, sizeof w2, "%s: v", what);
    tr_assert_close(w2, &vo, vr, 1e-6);
    /* the step from the moments as stored (f32, checked just above) */
    for (int64_t i = 0; i < n; i++)
        pr[i] = torch_adamw(pin[i], ((float *)mo.data)[i], ((float *)vo.data)[i], lr, t, b1, b2, eps, wd);
    snprintf(w2, sizeof w2, "%s: param", what);
    tr_assert_close(w2, &po, pr, tr_test_tol(dt));
    if (dt == TR_DTYPE_F32 || dt == TR_DTYPE_F64) { /* the update itself, not only the rounded weight */
        double *o = tr_test_to_f64(&po), num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = (o[i] - pin[i]) - (pr[i] - pin[i]);
            num += d * d, den += (pr[i] - pin[i]) * (pr[i] - pin[i]);
        }
        if (!(sqrt(num / den) < (dt == TR_DTYPE_F64 ? 1e-6 : 1e-5)))
            fail_msg("%s: update rel err %.3g", what, sqrt(num / den));
        free(o);
    }
    /* the unfused graph ops: the same bits */
    struct tr_tensor pu = tr_test_tensor(dt, 2, shape), mu = tr_test_tensor(TR_DTYPE_F32, 2, shape),
                     vu = tr_test_tensor(TR_DTYPE_F32, 2, shape);
    unfused(&p, &m, &v, &g, &tl, &ts, b1, b2, &pu, &mu, &vu);
    snprintf(w2, sizeof w2, "%s: m against the unfused ops", what);
    assert_same_bits(w2, &mo, &mu);
    snprintf(w2, sizeof w2, "%s: v against the unfused ops", what);
    assert_same_bits(w2, &vo, &vu);
    snprintf(w2, sizeof w2, "%s: param against the unfused ops", what);
    assert_same_bits(w2, &po, &pu);
    /* bound, each output in its input's memory (as a donated update) */
    struct tr_tensor pi = copy_of(&p), mi = copy_of(&m), vi = copy_of(&v);
    struct tr_kernel_call call;
    if (tr_kernels_bind_adamw_update(K, &pi, &mi, &vi, &g, &tl, &ts, b1, b2, eps, wd, &pi, &mi, &vi, &call, &err))
        fail_msg("%s: bind: %s", what, err.msg);
    assert_memory_equal(pi.data, p.data, tr_tensor_nbytes(&p)); /* binding computes nothing */
    if (tr_kernels_call(K, &call, &err)) fail_msg("%s: bound call: %s", what, err.msg);
    snprintf(w2, sizeof w2, "%s: in place, bound", what);
    assert_same_bits(w2, &pi, &po), assert_same_bits(w2, &mi, &mo), assert_same_bits(w2, &vi, &vo);
    tr_kernels_unbind(K, &call);
    free(pin), free(gin), free(mr), free(vr), free(pr);
    struct tr_tensor all[15] = {p, g, m, v, tl, ts, po, mo, vo, pu, mu, vu, pi, mi, vi};
    tr_test_tensors_free(15, all);
}

static void test_update_kernel(void **state) {
    (void)state;
    update_case(TR_DTYPE_F32, TR_DTYPE_F32, 40000, 1); /* above the parallel threshold */
    update_case(TR_DTYPE_F32, TR_DTYPE_F32, 1000, 7);
    update_case(TR_DTYPE_F32, TR_DTYPE_F32, 8, 2); /* one short chunk */
    update_case(TR_DTYPE_BF16, TR_DTYPE_BF16, 3000, 3);
    update_case(TR_DTYPE_BF16, TR_DTYPE_F32, 3000, 3);
    update_case(TR_DTYPE_F16, TR_DTYPE_F16, 2000, 2);
    update_case(TR_DTYPE_F64, TR_DTYPE_F64, 1000, 4);
}

/* What the one-pass update refuses, by name: a gradient of a third dtype, outputs that
 * overlap another operand, a step of 0 (data: refused by the bound call too). */
static void test_update_refusals(void **state) {
    (void)state;
    int64_t shape[1] = {64};
    struct tr_tensor p = tr_test_tensor(TR_DTYPE_BF16, 1, shape), m = tr_test_tensor(TR_DTYPE_F32, 1, shape),
                     v = tr_test_tensor(TR_DTYPE_F32, 1, shape), g = tr_test_tensor(TR_DTYPE_F16, 1, shape),
                     po = tr_test_tensor(TR_DTYPE_BF16, 1, shape), mo = tr_test_tensor(TR_DTYPE_F32, 1, shape);
    struct tr_tensor tl = scalar_f32(0.01f), ts = scalar_f32(1);
    tr_test_randn(&p, 1, 1), tr_test_randn(&m, 2, 1), tr_test_randn(&v, 3, 1), tr_test_randn(&g, 4, 1);
    struct tr_error err = {0};
    assert_int_equal(tr_k_adamw_update(K, &p, &m, &v, &g, &tl, &ts, 0.9f, 0.999f, 1e-8f, 0, &po, &mo, &v, &err),
                     TR_ERR_SHAPE);
    if (!strstr(err.msg, "grad [64] f16")) fail_msg("%s", err.msg);
    struct tr_tensor g32 = tr_test_tensor(TR_DTYPE_F32, 1, shape);
    tr_test_randn(&g32, 5, 1);
    /* m_out in v's memory */
    assert_int_equal(tr_k_adamw_update(K, &p, &m, &v, &g32, &tl, &ts, 0.9f, 0.999f, 1e-8f, 0, &po, &v, &mo, &err),
                     TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "m_out overlaps v"));
    /* v_out half over the gradient */
    struct tr_tensor big = tr_test_tensor(TR_DTYPE_F32, 1, (int64_t[1]){128});
    tr_test_randn(&big, 6, 1);
    struct tr_tensor gg = big, vv = big;
    gg.shape[0] = 64, vv.shape[0] = 64;
    vv.data = (float *)big.data + 32;
    assert_int_equal(tr_k_adamw_update(K, &p, &m, &v, &gg, &tl, &ts, 0.9f, 0.999f, 1e-8f, 0, &po, &mo, &vv, &err),
                     TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "v_out overlaps grad"));
    *(float *)ts.data = 0;
    assert_int_equal(tr_k_adamw_update(K, &p, &m, &v, &g32, &tl, &ts, 0.9f, 0.999f, 1e-8f, 0, &p, &m, &v, &err),
                     TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "adamw_update: step 0"));
    struct tr_kernel_call call;
    if (tr_kernels_bind_adamw_update(K, &p, &m, &v, &g32, &tl, &ts, 0.9f, 0.999f, 1e-8f, 0, &p, &m, &v, &call, &err))
        fail_msg("bind: %s", err.msg);
    assert_int_equal(tr_kernels_call(K, &call, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "step 0"));
    tr_kernels_unbind(K, &call);
    struct tr_tensor all[10] = {p, m, v, g, po, mo, tl, ts, g32, big};
    tr_test_tensors_free(10, all);
}

/* ---- the builders, run by an interpreter over the graph ---- */

enum { N = 6, DIN = 4, DOUT = 3, STEPS = 5 };

struct net {
    struct tr_graph *g;
    struct tr_weights *w;
    int x, y, W, loss, gW, lr, step;
    struct tr_optim_update up;
    void **val; /* per node: its value (bound data for leaves, owned buffers otherwise) */
    enum tr_dtype dt;
    float xraw[N * DIN], yraw[N * DOUT]; /* x and y in dt (room for f32) */
    double xd[N * DIN], yd[N * DOUT];     /* the same values, for the references */
    float lrv, stepv;
};

static struct net *net_new(enum tr_dtype dt) {
    struct net *n = calloc(1, sizeof *n);
    assert_non_null(n);
    struct tr_error err = {0};
    n->g = tr_test_graph_new();
    int64_t sx[2] = {N, DIN}, sy[2] = {N, DOUT}, sw[2] = {DIN, DOUT};
    n->dt = dt;
    n->x = tr_input(n->g, "x", dt, 2, sx);
    n->y = tr_input(n->g, "y", dt, 2, sy);
    n->lr = tr_input(n->g, "lr", TR_DTYPE_F32, 0, NULL);
    n->step = tr_input(n->g, "step", TR_DTYPE_F32, 0, NULL);
    n->W = tr_param(n->g, "W", dt, 2, sw, 0.0f, 0.5f);
    n->loss = tr_mse(n->g, tr_matmul(n->g, n->x, n->W, 0, 0), n->y);
    if (tr_graph_status(n->g, &err)) fail_msg("graph: %s", err.msg);
    if (tr_grad(n->g, n->loss, 1, &n->W, &n->gW, &err)) fail_msg("tr_grad: %s", err.msg);
    struct tr_tensor tx = {0}, ty = {0};
    tx = tr_node_tensor(n->g, n->x), ty = tr_node_tensor(n->g, n->y);
    tx.data = n->xraw, ty.data = n->yraw;
    tr_test_randn(&tx, 7, 1.0), tr_test_randn(&ty, 8, 1.0);
    double *xv = tr_test_to_f64(&tx), *yv = tr_test_to_f64(&ty);
    memcpy(n->xd, xv, sizeof n->xd), memcpy(n->yd, yv, sizeof n->yd);
    free(xv), free(yv);
    n->lrv = 0.05f;
    return n;
}

static void net_free(struct net *n) {
    if (n->val)
        for (int id = 0; id < tr_graph_n_nodes(n->g); id++) {
            int op = tr_node_op(n->g, id);
            if (op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST) tr_host_free(n->val[id]);
        }
    free(n->val);
    tr_weights_free(n->w);
    tr_graph_free(n->g);
    free(n);
}

/* After the optimizer is built: weights from a seed (states become zeros), buffers. */
static void net_bind(struct net *n) {
    struct tr_error err = {0};
    if (tr_weights_from_seed(n->g, 42, &n->w, &err)) fail_msg("weights: %s", err.msg);
    int nn = tr_graph_n_nodes(n->g);
    n->val = calloc((size_t)nn, sizeof *n->val);
    assert_non_null(n->val);
    for (int id = 0; id < nn; id++) {
        int op = tr_node_op(n->g, id);
        if (op == TR_OP_PARAM || op == TR_OP_CONST) {
            n->val[id] = (void *)tr_node_data(n->g, id);
        } else if (op != TR_OP_INPUT) {
            struct tr_tensor t = tr_node_tensor(n->g, id);
            size_t nb = tr_tensor_nbytes(&t);
            assert_int_equal(tr_host_alloc(&n->val[id], nb ? nb : 1, &err), TR_OK);
        }
    }
    n->val[n->x] = n->xraw, n->val[n->y] = n->yraw, n->val[n->lr] = &n->lrv, n->val[n->step] = &n->stepv;
}

static struct tr_tensor val_tensor(struct net *n, int id) {
    struct tr_tensor t = tr_node_tensor(n->g, id);
    t.data = n->val[id];
    return t;
}

/* One training step t: every node in order, then the new values copied over the old. */
static double net_step(struct net *n, int t) {
    struct tr_error err = {0};
    n->stepv = (float)t;
    for (int id = 0; id < tr_graph_n_nodes(n->g); id++) {
        int op = tr_node_op(n->g, id);
        if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST) continue;
        struct tr_tensor in[TR_MAX_INPUTS], out = val_tensor(n, id);
        for (int i = 0; i < tr_node_n_inputs(n->g, id); i++) in[i] = val_tensor(n, tr_node_input(n->g, id, i));
        tr_test_poison(&out);
        if (tr_kernels_run(K, op, tr_node_attrs(n->g, id), tr_node_n_inputs(n->g, id), in, &out, &err))
            fail_msg("node %d %s: %s", id, tr_op_name(op), err.msg);
    }
    double loss = *(float *)n->val[n->loss];
    int pairs[3][2] = {{n->up.param, n->up.new_param}, {n->up.state[0], n->up.new_state[0]},
                       {n->up.state[1], n->up.new_state[1]}};
    for (int i = 0; i < 3; i++) {
        if (pairs[i][0] < 0) continue;
        struct tr_tensor t = val_tensor(n, pairs[i][0]);
        memcpy(n->val[pairs[i][0]], n->val[pairs[i][1]], tr_tensor_nbytes(&t));
    }
    return loss;
}

/* d MSE(x·W, y) / dW in f64, and the loss. */
static double ref_grad(const struct net *n, const double *W, double *gW) {
    double loss = 0;
    memset(gW, 0, sizeof(double) * DIN * DOUT);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < DOUT; c++) {
            double s = 0;
            for (int k = 0; k < DIN; k++) s += n->xd[r * DIN + k] * W[k * DOUT + c];
            double e = s - n->yd[r * DOUT + c];
            loss += e * e / (N * DOUT);
            for (int k = 0; k < DIN; k++) gW[k * DOUT + c] += 2.0 * e * n->xd[r * DIN + k] / (N * DOUT);
        }
    return loss;
}

static void check_W(struct net *n, const double *ref, const double *W0, const char *what) {
    struct tr_tensor t = val_tensor(n, n->W);
    tr_assert_close(what, &t, ref, 1e-5);
    /* and the total change, so that an optimizer that moved nothing cannot pass */
    double num = 0, den = 0;
    for (int i = 0; i < DIN * DOUT; i++) {
        double d = ((float *)t.data)[i] - W0[i], dr = ref[i] - W0[i];
        num += (d - dr) * (d - dr), den += dr * dr;
    }
    if (!(den > 0 && sqrt(num / den) < 1e-4)) fail_msg("%s: change of W rel err %.3g", what, sqrt(num / den));
}

/* One AdamW update of W by gW into the graph (n->up). */
static void add_adamw(struct net *n, const struct tr_adamw *hp) {
    struct tr_error err = {0};
    if (tr_adamw(n->g, hp, 1, &n->W, &n->gW, n->lr, n->step, &n->up, &err)) fail_msg("tr_adamw: %s", err.msg);
}

/* An optimizer's step t in f64: W and its states s0, s1 updated by the gradient gW. */
typedef void ref_update_fn(double *W, double *s0, double *s1, const double *gW, double lr, int t, const void *hp);

static void adamw_ref(double *W, double *m, double *v, const double *gW, double lr, int t, const void *arg) {
    const struct tr_adamw *hp = arg;
    for (int i = 0; i < DIN * DOUT; i++) {
        m[i] = hp->beta1 * m[i] + (1.0 - hp->beta1) * gW[i];
        v[i] = hp->beta2 * v[i] + (1.0 - hp->beta2) * gW[i] * gW[i];
        W[i] = torch_adamw(W[i], m[i], v[i], lr, t, hp->beta1, hp->beta2, hp->eps, hp->weight_decay);
    }
}

struct sgd_hp {
    float mu, wd;
};

static void sgd_ref(double *W, double *buf, double *unused, const double *gW, double lr, int t, const void *arg) {
    const struct sgd_hp *hp = arg;
    (void)unused;
    for (int i = 0; i < DIN * DOUT; i++) { /* torch.optim.SGD, dampening 0 */
        double d = gW[i] + (double)hp->wd * W[i];
        buf[i] = t == 1 ? d : (double)hp->mu * buf[i] + d;
        W[i] -= lr * buf[i];
    }
}

/* STEPS steps of the bound net n beside update in f64, from the same W and zero states:
 * every step's loss is the reference's, the loss falls, and W after the last step is the
 * reference's (check_W). s0, s1: the reference's states after the last step. */
static void run_beside(struct net *n, ref_update_fn *update, const void *hp, double *s0, double *s1,
                       const char *name) {
    double W[DIN * DOUT], W0[DIN * DOUT], gW[DIN * DOUT];
    for (int i = 0; i < DIN * DOUT; i++) W0[i] = W[i] = ((float *)n->val[n->W])[i], s0[i] = s1[i] = 0;
    double first = 0, last = 0;
    for (int t = 1; t <= STEPS; t++) {
        double loss = net_step(n, t), rl = ref_grad(n, W, gW);
        if (fabs(loss - rl) > 1e-5 * rl) fail_msg("%s step %d: loss %.8g, reference %.8g", name, t, loss, rl);
        if (t == 1) first = loss;
        last = loss;
        update(W, s0, s1, gW, n->lrv, t, hp);
    }
    char what[48];
    snprintf(what, sizeof what, "%s W after %d steps", name, STEPS);
    check_W(n, W, W0, what);
    assert_true(last < first);
}

static void test_adamw_graph(void **state) {
    (void)state;
    struct net *n = net_new(TR_DTYPE_F32);
    const struct tr_adamw hp = {0.9f, 0.999f, 1e-8f, 0.01f};
    add_adamw(n, &hp);
    assert_int_equal(n->up.param, n->W);
    assert_string_equal(tr_node_name(n->g, n->up.state[0]), "W.adamw_m");
    assert_string_equal(tr_node_name(n->g, n->up.state[1]), "W.adamw_v");
    assert_int_equal(tr_node_op(n->g, n->up.new_param), TR_OP_ADAMW_STEP);
    net_bind(n);
    for (int s = 0; s < 2; s++) { /* states start as exact zeros */
        const float *z = n->val[n->up.state[s]];
        for (int i = 0; i < DIN * DOUT; i++) assert_true(z[i] == 0.0f && !signbit(z[i]));
    }
    double m[DIN * DOUT], v[DIN * DOUT];
    run_beside(n, adamw_ref, &hp, m, v, "adamw");
    struct tr_tensor tm = val_tensor(n, n->up.state[0]), tv = val_tensor(n, n->up.state[1]);
    tr_assert_close("adamw m after 5 steps", &tm, m, 1e-5);
    tr_assert_close("adamw v after 5 steps", &tv, v, 1e-5);
    net_free(n);
}

static void test_sgd_graph(void **state) {
    (void)state;
    struct net *n = net_new(TR_DTYPE_F32);
    struct tr_error err = {0};
    const struct sgd_hp hp = {0.9f, 0.01f};
    if (tr_sgd(n->g, hp.mu, hp.wd, 1, &n->W, &n->gW, n->lr, &n->up, &err)) fail_msg("tr_sgd: %s", err.msg);
    assert_string_equal(tr_node_name(n->g, n->up.state[0]), "W.sgd_v");
    assert_int_equal(n->up.state[1], -1);
    assert_int_equal(n->up.new_state[1], -1);
    net_bind(n);
    double buf[DIN * DOUT], unused[DIN * DOUT];
    run_beside(n, sgd_ref, &hp, buf, unused, "sgd");
    struct tr_tensor tb = val_tensor(n, n->up.state[0]);
    tr_assert_close("sgd velocity after 5 steps", &tb, buf, 1e-5);
    net_free(n);
}

/* bf16 weights: f32 moments fed by a cast gradient, the weight rounded on store; the
 * update of each step matches one AdamW step (in f64) from the moments the graph made. */
static void test_adamw_graph_bf16(void **state) {
    (void)state;
    struct net *n = net_new(TR_DTYPE_BF16);
    const struct tr_adamw hp = {0.9f, 0.999f, 1e-8f, 0.0f};
    add_adamw(n, &hp);
    assert_int_equal(tr_node_dtype(n->g, n->up.state[0]), TR_DTYPE_F32);
    assert_int_equal(tr_node_dtype(n->g, n->up.new_state[1]), TR_DTYPE_F32);
    assert_int_equal(tr_node_dtype(n->g, n->up.new_param), TR_DTYPE_BF16);
    net_bind(n);
    double first = 0, last = 0;
    for (int t = 1; t <= STEPS; t++) {
        struct tr_tensor tw = val_tensor(n, n->W);
        double *w0 = tr_test_to_f64(&tw), ref[DIN * DOUT];
        double loss = net_step(n, t);
        const float *m = n->val[n->up.state[0]], *v = n->val[n->up.state[1]];
        for (int i = 0; i < DIN * DOUT; i++)
            ref[i] = torch_adamw(w0[i], m[i], v[i], n->lrv, t, hp.beta1, hp.beta2, hp.eps, hp.weight_decay);
        char what[48];
        snprintf(what, sizeof what, "adamw bf16 W at step %d", t);
        tr_assert_close(what, &tw, ref, 1e-2);
        free(w0);
        if (t == 1) first = loss;
        last = loss;
    }
    assert_true(last < first);
    net_free(n);
}

/* ---- refusals: named values, and the graph left as it was ---- */

static void expect_refusal(struct net *n, int st, const struct tr_error *err, int n_before, const char *needle) {
    if (st == TR_OK) fail_msg("accepted; expected a refusal naming '%s'", needle);
    if (!strstr(err->msg, needle)) fail_msg("message '%s' does not name '%s'", err->msg, needle);
    assert_int_equal(tr_graph_n_nodes(n->g), n_before);
    assert_int_equal(tr_graph_status(n->g, NULL), TR_OK);
}

static void test_refusals(void **state) {
    (void)state;
    struct net *n = net_new(TR_DTYPE_F32);
    struct tr_error err = {0};
    struct tr_optim_update up[2];
    int nb = tr_graph_n_nodes(n->g);
    struct {
        struct tr_adamw hp;
        const char *needle;
    } bad[] = {
        {{1.0f, 0.999f, 1e-8f, 0.01f}, "beta1 1"},   {{-0.1f, 0.999f, 1e-8f, 0.01f}, "beta1 -0.1"},
        {{0.9f, 1.5f, 1e-8f, 0.01f}, "beta2 1.5"},   {{0.9f, NAN, 1e-8f, 0.01f}, "beta2 nan"},
        {{0.9f, 0.999f, 0.0f, 0.01f}, "eps 0"},      {{0.9f, 0.999f, -1e-8f, 0.01f}, "eps -1e-08"},
        {{0.9f, 0.999f, 1e-8f, -0.5f}, "weight_decay -0.5"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refusal(n, tr_adamw(n->g, &bad[i].hp, 1, &n->W, &n->gW, n->lr, n->step, up, &err), &err, nb,
                       bad[i].needle);
    struct tr_adamw hp = {0.9f, 0.999f, 1e-8f, 0.01f};
    expect_refusal(n, tr_adamw(n->g, &hp, 0, &n->W, &n->gW, n->lr, n->step, up, &err), &err, nb, "0 parameters");
    expect_refusal(n, tr_adamw(n->g, &hp, 1, &n->W, &n->gW, n->x, n->step, up, &err), &err, nb, "lr node");
    expect_refusal(n, tr_adamw(n->g, &hp, 1, &n->W, &n->gW, n->lr, n->W, up, &err), &err, nb, "step node");
    expect_refusal(n, tr_adamw(n->g, &hp, 1, &n->W, &n->loss, n->lr, n->step, up, &err), &err, nb,
                   "gradient of 'W' is f32[]");
    expect_refusal(n, tr_adamw(n->g, &hp, 1, &n->x, &n->gW, n->lr, n->step, up, &err), &err, nb, "not a PARAM");
    int twice[2] = {n->W, n->W}, g2[2] = {n->gW, n->gW};
    expect_refusal(n, tr_adamw(n->g, &hp, 2, twice, g2, n->lr, n->step, up, &err), &err, nb, "listed twice");
    expect_refusal(n, tr_sgd(n->g, -0.5f, 0.0f, 1, &n->W, &n->gW, n->lr, up, &err), &err, nb, "momentum -0.5");
    expect_refusal(n, tr_sgd(n->g, 1.0f, 0.0f, 1, &n->W, &n->gW, n->lr, up, &err), &err, nb, "momentum 1");
    expect_refusal(n, tr_sgd(n->g, 0.9f, -1.0f, 1, &n->W, &n->gW, n->lr, up, &err), &err, nb, "weight_decay -1");
    /* built once it works; a second time its state names are taken */
    assert_int_equal(tr_adamw(n->g, &hp, 1, &n->W, &n->gW, n->lr, n->step, up, &err), TR_OK);
    nb = tr_graph_n_nodes(n->g);
    expect_refusal(n, tr_adamw(n->g, &hp, 1, &n->W, &n->gW, n->lr, n->step, up, &err), &err, nb,
                   "'W.adamw_m' is already used");
    net_free(n);
}

/* ADAMW_STEP's shape rule, dump and FLOPs. */
static void test_node_rules(void **state) {
    (void)state;
    struct tr_graph *g = tr_test_graph_new();
    struct tr_error err = {0};
    int64_t sh[2] = {5, 7};
    int p = tr_param(g, "p", TR_DTYPE_BF16, 2, sh, 0, 1), m = tr_param(g, "m", TR_DTYPE_F32, 2, sh, 0, 0);
    int v = tr_param(g, "v", TR_DTYPE_F32, 2, sh, 0, 0);
    int lr = tr_input(g, "lr", TR_DTYPE_F32, 0, NULL), st = tr_input(g, "t", TR_DTYPE_F32, 0, NULL);
    struct tr_attrs at = {0};
    at.floats[0] = 0.9f, at.floats[1] = 0.999f, at.floats[2] = 1e-8f, at.floats[3] = 0.01f;
    int in[5] = {p, m, v, lr, st};
    int id = tr_graph_add_node(g, TR_OP_ADAMW_STEP, 5, in, &at);
    assert_true(id >= 0);
    assert_int_equal(tr_node_dtype(g, id), TR_DTYPE_BF16);
    assert_int_equal(tr_node_ndim(g, id), 2);
    assert_true(tr_graph_flops(g) == 10.0 * 35);
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    assert_non_null(f);
    assert_int_equal(tr_graph_dump(g, f, &err), TR_OK);
    fclose(f);
    assert_non_null(strstr(buf, "adamw_step(%0, %1, %2, %3, %4) beta1=0.9 beta2=0.999 eps=1e-08 wd=0.01 : bf16[5,7]"));
    /* an m of the param's dtype (not f32) is refused, naming it */
    int in2[5] = {p, p, v, lr, st};
    assert_int_equal(tr_graph_add_node(g, TR_OP_ADAMW_STEP, 5, in2, &at), -1);
    assert_int_not_equal(tr_graph_status(g, &err), TR_OK);
    assert_non_null(strstr(err.msg, "m is bf16[5,7], expected f32"));
    tr_graph_free(g);
    /* and a beta out of range */
    g = tr_test_graph_new();
    p = tr_param(g, "p", TR_DTYPE_F32, 2, sh, 0, 1), m = tr_param(g, "m", TR_DTYPE_F32, 2, sh, 0, 0);
    v = tr_param(g, "v", TR_DTYPE_F32, 2, sh, 0, 0);
    lr = tr_input(g, "lr", TR_DTYPE_F32, 0, NULL), st = tr_input(g, "t", TR_DTYPE_F32, 0, NULL);
    int in3[5] = {p, m, v, lr, st};
    at.floats[1] = 1.0f;
    assert_int_equal(tr_graph_add_node(g, TR_OP_ADAMW_STEP, 5, in3, &at), -1);
    tr_graph_status(g, &err);
    assert_non_null(strstr(err.msg, "beta2 1"));
    tr_graph_free(g);
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_kernel_f32, test_kernel_bf16, test_kernel_f64,
             test_kernel_step_and_bind, test_update_kernel, test_update_refusals, test_adamw_graph, test_sgd_graph, test_adamw_graph_bf16, test_refusals,
             test_node_rules)
