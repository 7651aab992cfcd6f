/* RMS norm over the last axis (RMS_NORM) and its two gradients (RMS_NORM_GRAD: dx,
 * RMS_NORM_GRAD_W: dw), as ops.h defines them.
 *
 * The forward follows Hugging Face to the rounding, because the models' parity tests
 * compare against it in bf16: both scalings compute r = 1/√(mean(x²) + eps) and x̂ = x·r
 * in f32; Gemma (add_one) multiplies x̂ by (1 + w) in f32 and rounds once
 * (GemmaRMSNorm: `_norm(x.float()) * (1.0 + weight.float())`, then `type_as(x)`);
 * Mistral rounds x̂ to x's dtype first and then multiplies by w, rounding again
 * (MistralRMSNorm: `weight * hidden_states.to(input_dtype)`). For f32 both are one
 * rounding. f64 is computed in f64 throughout (the finite-difference checks).
 *
 * The gradients compute in f64 whatever the storage dtype, as grad.c's kernels do, and
 * ignore the forward's intermediate rounding (it has no derivative):
 *   dx = r·(g − x̂·mean(g·x̂)),  g = dy·w' (w' = w or 1 + w)
 *   dw = Σ over rows of dy·x̂   (parallel over columns: deterministic, no atomics)
 * Every kernel is a check filling a plan and a compute part running it (cpu_internal.h);
 * weights are read at every call (they change in place between steps). Work space comes
 * from the context's scratch: a call allocates nothing. */
#include "grad_internal.h"

struct rms_plan {
    struct tr_cpu_prepared hdr;
    int op; /* TR_OP_RMS_NORM, TR_OP_RMS_NORM_GRAD or TR_OP_RMS_NORM_GRAD_W */
    int dt, wdt, odt;
    const char *x, *dy;
    const void *w;
    char *out;
    int64_t D, rows, n;
    float eps;
    int add_one;
};

static inline size_t esize(int dt) { return tr_dtype_size((enum tr_dtype)dt); }

/* ---- forward ---- */

/* A call's rows as the leaves read them: g is w' (w, or 1 + w for Gemma) in f32, or in
 * f64 for f64 data and the gradients; rstd the rows' 1/rms (RMS_NORM_GRAD_W). */
struct rms_args {
    int dt, add_one;
    const char *x, *dy;
    char *o;
    int64_t D;
    const void *g;
    double *rstd;
    float eps;
};

TR_CPU_MULTI(void, rms_rows_f32, (const void *ctx, int64_t r0, int64_t r1, void *vbuf), (ctx, r0, r1, vbuf)) {
    const struct rms_args *A = ctx;
    const int64_t D = A->D;
    const int dt = A->dt;
    const size_t es = esize(dt);
    const float *restrict g = A->g, eps = A->eps;
    float *restrict buf = vbuf;
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, A->x + r * D * (int64_t)es, dt, D);
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; i++) ss += buf[i] * buf[i];
        const float rs = 1.0f / sqrtf(ss / (float)D + eps);
        if (A->add_one || dt == TR_DTYPE_F32) {
            for (int64_t i = 0; i < D; i++) buf[i] = buf[i] * rs * g[i];
        } else {
            for (int64_t i = 0; i < D; i++) buf[i] = tr_cpu_round(dt, buf[i] * rs) * g[i];
        }
        tr_cpu_store_f32(A->o + r * D * (int64_t)es, dt, buf, D);
    }
}

static void rms_rows_f64(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    (void)buf;
    const struct rms_args *A = ctx;
    const int64_t D = A->D;
    const double *x = (const double *)(const void *)A->x, *g = A->g, eps = A->eps;
    double *o = (double *)(void *)A->o;
    for (int64_t r = r0; r < r1; r++) {
        const double *xr = x + r * D;
        double ss = 0.0;
        for (int64_t i = 0; i < D; i++) ss += xr[i] * xr[i];
        const double rs = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t i = 0; i < D; i++) o[r * D + i] = xr[i] * rs * g[i];
    }
}

/* w' = w or 1 + w, in f32 (or f64 for f64 data) into the shared scratch. */
static void load_weight(struct tr_kernels *k, const struct rms_plan *pl, float **gf, double **gd) {
    *gf = NULL;
    *gd = NULL;
    if (pl->dt == TR_DTYPE_F64) {
        double *g = tr_cpu_scratch_shared(k);
        for (int64_t i = 0; i < pl->D; i++) g[i] = tr_grad_get(pl->w, pl->wdt, i) + (pl->add_one ? 1.0 : 0.0);
        *gd = g;
    } else {
        float *g = tr_cpu_scratch_shared(k);
        for (int64_t i = 0; i < pl->D; i++) g[i] = tr_cpu_get_f32(pl->w, pl->wdt, i) + (pl->add_one ? 1.0f : 0.0f);
        *gf = g;
    }
}

static void rms_forward(struct tr_kernels *k, const struct rms_plan *pl) {
    float *gf;
    double *gd;
    load_weight(k, pl, &gf, &gd);
    const struct rms_args A = {.dt = pl->dt, .add_one = pl->add_one, .x = pl->x, .o = pl->out, .D = pl->D,
                               .g = gd ? (const void *)gd : gf, .eps = pl->eps};
    /* a few rows per work item amortise the scheduling of short rows */
    tr_cpu_rows(k, pl->rows, pl->rows < 16 ? 1 : 4, pl->n > TR_CPU_PAR_MIN, gd ? rms_rows_f64 : rms_rows_f32, &A);
}

/* ---- gradients (f64 inside) ---- */

static double row_rstd(const double *xr, int64_t D, double eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < D; i++) ss += xr[i] * xr[i];
    return 1.0 / sqrt(ss / (double)D + eps);
}

static void grad_x_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    const struct rms_args *A = ctx;
    const int64_t D = A->D;
    const size_t es = esize(A->dt);
    const double *restrict g = A->g, eps = A->eps;
    double *restrict xb = buf, *restrict gb = xb + D;
    for (int64_t r = r0; r < r1; r++) {
        tr_grad_load(xb, A->x + r * D * (int64_t)es, A->dt, D);
        tr_grad_load(gb, A->dy + r * D * (int64_t)es, A->dt, D);
        const double rs = row_rstd(xb, D, eps);
        double m = 0.0;
        for (int64_t i = 0; i < D; i++) {
            xb[i] *= rs;
            gb[i] *= g[i];
            m += gb[i] * xb[i];
        }
        m /= (double)D;
        for (int64_t i = 0; i < D; i++) gb[i] = rs * (gb[i] - xb[i] * m);
        tr_grad_store(A->o + r * D * (int64_t)es, A->dt, gb, D);
    }
}

static void rstd_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    const struct rms_args *A = ctx;
    const size_t es = esize(A->dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_grad_load(buf, A->x + r * A->D * (int64_t)es, A->dt, A->D);
        A->rstd[r] = row_rstd(buf, A->D, A->eps);
    }
}

static void rms_grad_x(struct tr_kernels *k, const struct rms_plan *pl) {
    double *g = tr_cpu_scratch_shared(k);
    for (int64_t i = 0; i < pl->D; i++) g[i] = tr_grad_get(pl->w, pl->wdt, i) + (pl->add_one ? 1.0 : 0.0);
    const struct rms_args A = {.dt = pl->dt, .x = pl->x, .dy = pl->dy, .o = pl->out, .D = pl->D, .g = g, .eps = pl->eps};
    tr_cpu_rows(k, pl->rows, 1, pl->n > TR_CPU_PAR_MIN, grad_x_rows, &A);
}

static void rms_grad_w(struct tr_kernels *k, const struct rms_plan *pl) {
    double *rstd = tr_cpu_scratch_shared(k);
    const int par = pl->n > TR_CPU_PAR_MIN;
    const struct rms_args A = {.dt = pl->dt, .x = pl->x, .D = pl->D, .rstd = rstd, .eps = pl->eps};
    tr_cpu_rows(k, pl->rows, 1, par, rstd_rows, &A);
    tr_grad_col_sums(pl->x, pl->dy, pl->dt, pl->rows, pl->D, NULL, rstd, 1, pl->out, pl->odt, par);
}

static void rms_compute(struct tr_kernels *k, const void *plan) {
    const struct rms_plan *pl = plan;
    if (pl->D == 0 || pl->rows == 0) {
        if (pl->op == TR_OP_RMS_NORM_GRAD_W && pl->D > 0) memset(pl->out, 0, (size_t)pl->D * esize(pl->odt));
        return;
    }
    if (pl->op == TR_OP_RMS_NORM) rms_forward(k, pl);
    else if (pl->op == TR_OP_RMS_NORM_GRAD) rms_grad_x(k, pl);
    else rms_grad_w(k, pl);
}

/* ---- checks ---- */

static const char *kname_of(int op) { return tr_op_name(op); }

/* A (D) vector of x's dtype or f32. */
static int check_vec(const char *kn, const char *what, const struct tr_tensor *t, const struct tr_tensor *x,
                     struct tr_error *err) {
    int rc = tr_grad_check_real(t, kn, what, err);
    if (rc) return rc;
    int64_t D = x->shape[x->ndim - 1];
    if (tr_tensor_numel(t) != D || t->ndim != 1 || (t->dtype != x->dtype && t->dtype != TR_DTYPE_F32)) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kn, what,
                            tr_cpu_desc(t, d1, sizeof d1), (long long)D, tr_dtype_name((enum tr_dtype)x->dtype),
                            tr_cpu_desc(x, d2, sizeof d2));
    }
    return TR_OK;
}

/* w is NULL for RMS_NORM_GRAD_W, dy NULL for RMS_NORM. */
static int rms_check(int op, const struct tr_tensor *x, const struct tr_tensor *w, const struct tr_tensor *dy, float eps,
                     int64_t add_one, const struct tr_tensor *out, struct rms_plan *pl, struct tr_error *err) {
    const char *kn = kname_of(op);
    int rc = tr_grad_check_real(x, kn, "x", err);
    if (rc) return rc;
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (it normalises the last axis)", kn);
    if (w && (rc = check_vec(kn, "w", w, x, err))) return rc;
    if (dy && ((rc = tr_grad_check_real(dy, kn, "dy", err)) || (rc = tr_cpu_check_like(kn, x, "x", dy, "dy", err))))
        return rc;
    if (op == TR_OP_RMS_NORM_GRAD_W) rc = check_vec(kn, "dw", out, x, err);
    else if (!(rc = tr_grad_check_real(out, kn, "out", err))) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    if (!(eps >= 0.0f) || !isfinite(eps))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)eps);
    if (add_one != 0 && add_one != 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: add_one ints[0]=%lld should be 0 (w) or 1 (Gemma's 1 + w)", kn,
                            (long long)add_one);
    memset(pl, 0, sizeof *pl);
    pl->op = op;
    pl->dt = x->dtype;
    pl->wdt = w ? w->dtype : 0;
    pl->odt = out->dtype;
    pl->x = x->data;
    pl->dy = dy ? dy->data : NULL;
    pl->w = w ? w->data : NULL;
    pl->out = out->data;
    pl->D = x->shape[x->ndim - 1];
    pl->n = tr_tensor_numel(x);
    pl->rows = pl->D ? pl->n / pl->D : 0;
    pl->eps = eps;
    pl->add_one = (int)add_one;
    return TR_OK;
}

/* Scratch: the weight (or the rows' rstd) shared, one or two rows per thread; doubles
 * throughout, which also covers the f32 forward. */
static int rms_reserve(struct tr_kernels *k, const struct rms_plan *pl, struct tr_error *err) {
    size_t d = sizeof(double) * (size_t)pl->D;
    size_t shared = pl->op == TR_OP_RMS_NORM_GRAD_W ? sizeof(double) * (size_t)pl->rows : d;
    size_t per_thread = pl->op == TR_OP_RMS_NORM_GRAD ? 2 * d : d;
    return tr_cpu_scratch_reserve(k, shared, per_thread, kname_of(pl->op), err);
}

/* The op's inputs: (x, w), (x, w, dy) or (x, dy). */
static const struct tr_tensor *op_w(int op, const struct tr_tensor *in) {
    return op == TR_OP_RMS_NORM_GRAD_W ? NULL : &in[1];
}
static const struct tr_tensor *op_dy(int op, const struct tr_tensor *in) {
    return op == TR_OP_RMS_NORM ? NULL : op == TR_OP_RMS_NORM_GRAD ? &in[2] : &in[1];
}

/* A whole call: the checks, the scratch, the rows. */
static int rms_run(struct tr_kernels *k, int op, const struct tr_tensor *x, const struct tr_tensor *w,
                   const struct tr_tensor *dy, float eps, int64_t add_one, struct tr_tensor *out,
                   struct tr_error *err) {
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx(k, kname_of(op), err);
    if (!rc) rc = rms_check(op, x, w, dy, eps, add_one, out, &pl, err);
    if (!rc) rc = rms_reserve(k, &pl, err);
    if (!rc) rms_compute(k, &pl);
    return rc;
}

int tr_k_rms_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w, float eps, int add_one,
                  struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm(k, x, w, eps, add_one, out, err));
    return rms_run(k, TR_OP_RMS_NORM, x, w, NULL, eps, add_one, out, err);
}

int tr_k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w,
                       const struct tr_tensor *dy, float eps, int add_one, struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm_grad(k, x, w, dy, eps, add_one, dx, err));
    return rms_run(k, TR_OP_RMS_NORM_GRAD, x, w, dy, eps, add_one, dx, err);
}

int tr_k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                         struct tr_tensor *dw, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm_grad_w(k, x, dy, eps, dw, err));
    return rms_run(k, TR_OP_RMS_NORM_GRAD_W, x, NULL, dy, eps, 0, dw, err);
}

int tr_cpu_rms_norm_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                           const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)n_in;
    return rms_run(k, op, &in[0], op_w(op, in), op_dy(op, in), at->floats[0], at->ints[0], out, err);
}

int tr_cpu_rms_norm_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx_bind(k, kname_of(c->op), err);
    if (!rc)
        rc = rms_check(c->op, &c->in[0], op_w(c->op, c->in), op_dy(c->op, c->in), c->attrs.floats[0], c->attrs.ints[0],
                       &c->out, &pl, err);
    if (!rc) rc = rms_reserve(k, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, rms_compute, kname_of(c->op), err);
}
