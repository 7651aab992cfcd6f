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

#define RMS_COLS 64 /* dw columns per work item */

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

/* v rounded to dt's precision (f32: unchanged). */
static inline float round_to(int dt, float v) {
    if (dt == TR_DTYPE_BF16) return tr_bf16_to_f32(tr_f32_to_bf16(v));
    if (dt == TR_DTYPE_F16) return tr_f16_to_f32(tr_f32_to_f16(v));
    return v;
}

/* ---- forward ---- */

/* g is w' in f32 for Gemma (1 + w) and w for Mistral. */
TR_CPU_MULTI(void, rms_rows_f32, (int dt, const char *x, char *o, int64_t D, int64_t r0, int64_t r1, const float *g, float eps, int add_one, float *buf), (dt, x, o, D, r0, r1, g, eps, add_one, buf)) {
    size_t es = esize(dt);
    for (int64_t r = r0; r < r1; r++) {
        tr_cpu_load_f32(buf, x + r * D * (int64_t)es, dt, D);
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; i++) ss += buf[i] * buf[i];
        const float rs = 1.0f / sqrtf(ss / (float)D + eps);
        if (add_one || dt == TR_DTYPE_F32) {
            for (int64_t i = 0; i < D; i++) buf[i] = buf[i] * rs * g[i];
        } else {
            for (int64_t i = 0; i < D; i++) buf[i] = round_to(dt, buf[i] * rs) * g[i];
        }
        tr_cpu_store_f32(o + r * D * (int64_t)es, dt, buf, D);
    }
}

static void rms_rows_f64(const double *x, double *o, int64_t D, int64_t r0, int64_t r1, const double *g, double eps) {
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
    const int64_t D = pl->D, rows = pl->rows;
    float *gf;
    double *gd;
    load_weight(k, pl, &gf, &gd);
    const int64_t per = rows < 16 ? 1 : 4; /* rows per work item */
    const int64_t items = (rows + per - 1) / per;
    const int dt = pl->dt, add_one = pl->add_one;
    const char *px = pl->x;
    char *po = pl->out;
    const float eps = pl->eps;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (pl->n > TR_CPU_PAR_MIN && rows > 1)
    {
        float *buf = tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            int64_t r0 = it * per, r1 = r0 + per < rows ? r0 + per : rows;
            if (gd) rms_rows_f64((const double *)(const void *)px, (double *)(void *)po, D, r0, r1, gd, eps);
            else rms_rows_f32(dt, px, po, D, r0, r1, gf, eps, add_one, buf);
        }
    }
}

/* ---- gradients (f64 inside) ---- */

static double row_rstd(const double *xr, int64_t D, double eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < D; i++) ss += xr[i] * xr[i];
    return 1.0 / sqrt(ss / (double)D + eps);
}

static void rms_grad_x(struct tr_kernels *k, const struct rms_plan *pl) {
    const int64_t D = pl->D, rows = pl->rows;
    double *g = tr_cpu_scratch_shared(k);
    for (int64_t i = 0; i < D; i++) g[i] = tr_grad_get(pl->w, pl->wdt, i) + (pl->add_one ? 1.0 : 0.0);
    const int dt = pl->dt;
    const size_t es = esize(dt);
    const char *px = pl->x, *pg = pl->dy;
    char *po = pl->out;
    const double eps = pl->eps;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (pl->n > TR_CPU_PAR_MIN && rows > 1)
    {
        double *xb = (double *)(void *)tr_cpu_scratch_thread(k, tr_cpu_thread_num()), *gb = xb + D;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            tr_grad_load(xb, px + r * D * (int64_t)es, dt, D);
            tr_grad_load(gb, pg + r * D * (int64_t)es, dt, D);
            const double rs = row_rstd(xb, D, eps);
            double m = 0.0;
            for (int64_t i = 0; i < D; i++) {
                xb[i] *= rs;
                gb[i] *= g[i];
                m += gb[i] * xb[i];
            }
            m /= (double)D;
            for (int64_t i = 0; i < D; i++) gb[i] = rs * (gb[i] - xb[i] * m);
            tr_grad_store(po + r * D * (int64_t)es, dt, gb, D);
        }
    }
}

static void rms_grad_w(struct tr_kernels *k, const struct rms_plan *pl) {
    const int64_t D = pl->D, rows = pl->rows;
    double *rstd = tr_cpu_scratch_shared(k);
    const int dt = pl->dt, odt = pl->odt;
    const size_t es = esize(dt), oes = esize(odt);
    const char *px = pl->x, *pg = pl->dy;
    char *po = pl->out;
    const double eps = pl->eps;
    const int par = pl->n > TR_CPU_PAR_MIN;
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (par && rows > 1)
    {
        double *xb = (double *)(void *)tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            tr_grad_load(xb, px + r * D * (int64_t)es, dt, D);
            rstd[r] = row_rstd(xb, D, eps);
        }
    }
    const int64_t items = (D + RMS_COLS - 1) / RMS_COLS;
#pragma omp parallel for num_threads(tr_cpu_threads(k)) schedule(static) if (par && items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t c0 = it * RMS_COLS, len = D - c0 < RMS_COLS ? D - c0 : RMS_COLS;
        double acc[RMS_COLS] = {0}, xb[RMS_COLS], gb[RMS_COLS];
        for (int64_t r = 0; r < rows; r++) {
            tr_grad_load(xb, px + (r * D + c0) * (int64_t)es, dt, len);
            tr_grad_load(gb, pg + (r * D + c0) * (int64_t)es, dt, len);
            for (int64_t c = 0; c < len; c++) acc[c] += gb[c] * xb[c] * rstd[r];
        }
        tr_grad_store(po + c0 * (int64_t)oes, odt, acc, len);
    }
}

static void rms_compute(struct tr_kernels *k, const struct rms_plan *pl) {
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
    int st = tr_grad_check_real(t, kn, what, err);
    if (st) return st;
    int64_t D = x->shape[x->ndim - 1];
    if (tr_tensor_numel(t) != D || t->ndim != 1 || (t->dtype != x->dtype && t->dtype != TR_DTYPE_F32)) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kn, what,
                            tr_cpu_desc(t, d1, sizeof d1), (long long)D, tr_dtype_name((enum tr_dtype)x->dtype),
                            tr_cpu_desc(x, d2, sizeof d2));
    }
    return TR_OK;
}

static int check_like(const char *kn, const struct tr_tensor *a, const char *an, const struct tr_tensor *b,
                      const char *bn, struct tr_error *err) {
    if (a->dtype == b->dtype && tr_cpu_same_shape(a, b)) return TR_OK;
    char d1[200], d2[200];
    return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s and %s %s should have the same shape and dtype", kn, an,
                        tr_cpu_desc(a, d1, sizeof d1), bn, tr_cpu_desc(b, d2, sizeof d2));
}

/* w is NULL for RMS_NORM_GRAD_W, dy NULL for RMS_NORM. */
static int rms_check(int op, const struct tr_tensor *x, const struct tr_tensor *w, const struct tr_tensor *dy, float eps,
                     int64_t add_one, const struct tr_tensor *out, struct rms_plan *pl, struct tr_error *err) {
    const char *kn = kname_of(op);
    int st = tr_grad_check_real(x, kn, "x", err);
    if (st) return st;
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (it normalises the last axis)", kn);
    if (w && (st = check_vec(kn, "w", w, x, err))) return st;
    if (dy && ((st = tr_grad_check_real(dy, kn, "dy", err)) || (st = check_like(kn, x, "x", dy, "dy", err))))
        return st;
    if (op == TR_OP_RMS_NORM_GRAD_W) st = check_vec(kn, "dw", out, x, err);
    else if (!(st = tr_grad_check_real(out, kn, "out", err))) st = check_like(kn, x, "x", out, "out", err);
    if (st) return st;
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

static int rms_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    k->stats.calls++;
    rms_compute(k, c->prepared);
    return TR_OK;
}

/* The call's arguments as the op's inputs: (x, w), (x, w, dy) or (x, dy). */
static int rms_check_op(int op, const struct tr_attrs *at, const struct tr_tensor *in, const struct tr_tensor *out,
                        struct rms_plan *pl, struct tr_error *err) {
    const struct tr_tensor *w = op == TR_OP_RMS_NORM_GRAD_W ? NULL : &in[1];
    const struct tr_tensor *dy = op == TR_OP_RMS_NORM ? NULL : op == TR_OP_RMS_NORM_GRAD ? &in[2] : &in[1];
    return rms_check(op, &in[0], w, dy, at->floats[0], at->ints[0], out, pl, err);
}

int tr_k_rms_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w, float eps, int add_one,
                  struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm(k, x, w, eps, add_one, out, err));
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int st = tr_cpu_check_ctx(k, "rms_norm", err);
    if (!st) st = rms_check(TR_OP_RMS_NORM, x, w, NULL, eps, add_one, out, &pl, err);
    if (!st) st = rms_reserve(k, &pl, err);
    if (!st) rms_compute(k, &pl);
    return st;
}

int tr_k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w,
                       const struct tr_tensor *dy, float eps, int add_one, struct tr_tensor *dx, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm_grad(k, x, w, dy, eps, add_one, dx, err));
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int st = tr_cpu_check_ctx(k, "rms_norm_grad", err);
    if (!st) st = rms_check(TR_OP_RMS_NORM_GRAD, x, w, dy, eps, add_one, dx, &pl, err);
    if (!st) st = rms_reserve(k, &pl, err);
    if (!st) rms_compute(k, &pl);
    return st;
}

int tr_k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                         struct tr_tensor *dw, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rms_norm_grad_w(k, x, dy, eps, dw, err));
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int st = tr_cpu_check_ctx(k, "rms_norm_grad_w", err);
    if (!st) st = rms_check(TR_OP_RMS_NORM_GRAD_W, x, NULL, dy, eps, 0, dw, &pl, err);
    if (!st) st = rms_reserve(k, &pl, err);
    if (!st) rms_compute(k, &pl);
    return st;
}

int tr_cpu_rms_norm_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                           const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)n_in;
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int st = tr_cpu_check_ctx(k, kname_of(op), err);
    if (!st) st = rms_check_op(op, at, in, out, &pl, err);
    if (!st) st = rms_reserve(k, &pl, err);
    if (!st) rms_compute(k, &pl);
    return st;
}

int tr_cpu_rms_norm_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rms_plan pl;
    memset(&pl, 0, sizeof pl);
    int st = tr_cpu_check_ctx_bind(k, kname_of(c->op), err);
    if (!st) st = rms_check_op(c->op, &c->attrs, c->in, &c->out, &pl, err);
    if (!st) st = rms_reserve(k, &pl, err);
    return st ? st : tr_cpu_keep_plan(c, &pl, sizeof pl, rms_call, kname_of(c->op), err);
}
