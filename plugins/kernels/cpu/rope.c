/* Rotary position embedding (ROPE) in Hugging Face's rotate_half layout, as ops.h
 * defines it: x (B,H,T,D), pos (T) or (B,T) of i32/i64; pairs (i, i + R/2) for i < R/2
 * rotated by a = pos·θ_i, θ_i = base^(−2i/R); dims >= R pass through; inverse (the
 * gradient) rotates by −a.
 *
 * The angles and products follow Hugging Face to the rounding, since the models' parity
 * tests compare against it: θ_i = 1/(base^(f32(2i)/R)) in f32 (the module's inv_freq),
 * a = f32(pos)·θ_i rounded to f32, cos a and sin a in f32 and then rounded to x's dtype
 * (`cos.to(x.dtype)`), and y = x·cos + rotate_half(x)·sin with each product and the sum
 * rounded to x's dtype, as torch does it in bf16 (for f32 that is plain f32 arithmetic).
 * f64 data is computed in f64 throughout (the finite-difference checks).
 *
 * Work items are (b, t) pairs: the R/2 angles of a position are computed once and used
 * by all H heads (the θ_i once per call). Rows go through a buffer, so out may alias x. Nothing is precomputed
 * across calls (positions are data); a call allocates nothing (context scratch). */
#include "grad_internal.h"

struct rope_plan {
    struct tr_cpu_prepared hdr;
    int dt, pdt, pos_batched, inverse;
    const char *x;
    const void *pos;
    char *out;
    int64_t B, H, T, D, R;
    float base;
};

static inline size_t esize(int dt) { return tr_dtype_size((enum tr_dtype)dt); }

static inline int64_t pos_at(const struct rope_plan *pl, int64_t b, int64_t t) {
    int64_t i = pl->pos_batched ? b * pl->T + t : t;
    return pl->pdt == TR_DTYPE_I64 ? ((const int64_t *)pl->pos)[i] : ((const int32_t *)pl->pos)[i];
}

/* θ_i for i < R/2: Hugging Face's inv_freq, 1/(base^(f32(2i)/R)) in f32 (held exactly
 * in a double), or base^(−2i/R) in f64 for f64 data. Once per call. */
static void thetas(const struct rope_plan *pl, double *theta) {
    for (int64_t i = 0; i < pl->R / 2; i++) {
        if (pl->dt == TR_DTYPE_F64) {
            theta[i] = pow((double)pl->base, -(double)(2 * i) / (double)pl->R);
        } else {
            float e = (float)(2 * i) / (float)pl->R;
            theta[i] = (double)(1.0f / (float)pow((double)pl->base, (double)e));
        }
    }
}

/* cos and sin of a = p·θ_i, a rounded to f32 as Hugging Face's f32 product is, the
 * results rounded to f32 and then to dt; sin negated for the inverse. */
static void angles_f32(const struct rope_plan *pl, const double *theta, int64_t p, float *c, float *s) {
    const float fp = (float)p, sg = pl->inverse ? -1.0f : 1.0f;
    for (int64_t i = 0; i < pl->R / 2; i++) {
        float a = fp * (float)theta[i];
        c[i] = tr_cpu_round(pl->dt, (float)cos((double)a));
        s[i] = sg * tr_cpu_round(pl->dt, (float)sin((double)a));
    }
}

static void angles_f64(const struct rope_plan *pl, const double *theta, int64_t p, double *c, double *s) {
    const double sg = pl->inverse ? -1.0 : 1.0;
    for (int64_t i = 0; i < pl->R / 2; i++) {
        double a = (double)p * theta[i];
        c[i] = cos(a);
        s[i] = sg * sin(a);
    }
}

/* One row of D: y_i = x_i·c − x_{i+h}·s, y_{i+h} = x_{i+h}·c + x_i·s (h = R/2), each
 * product and sum rounded to dt; the rest copied. */
TR_CPU_MULTI(void, rotate_f32, (int dt, const float *restrict x, float *restrict y, int64_t D, int64_t R, const float *c, const float *s), (dt, x, y, D, R, c, s)) {
    const int64_t h = R / 2;
    if (dt == TR_DTYPE_F32) {
        for (int64_t i = 0; i < h; i++) {
            y[i] = x[i] * c[i] - x[i + h] * s[i];
            y[i + h] = x[i + h] * c[i] + x[i] * s[i];
        }
    } else {
        for (int64_t i = 0; i < h; i++) {
            y[i] = tr_cpu_round(dt, tr_cpu_round(dt, x[i] * c[i]) + tr_cpu_round(dt, -x[i + h] * s[i]));
            y[i + h] = tr_cpu_round(dt, tr_cpu_round(dt, x[i + h] * c[i]) + tr_cpu_round(dt, x[i] * s[i]));
        }
    }
    for (int64_t i = R; i < D; i++) y[i] = x[i];
}

static void rotate_f64(const double *x, double *y, int64_t D, int64_t R, const double *c, const double *s) {
    const int64_t h = R / 2;
    for (int64_t i = 0; i < h; i++) {
        double a = x[i], b = x[i + h];
        y[i] = a * c[i] - b * s[i];
        y[i + h] = b * c[i] + a * s[i];
    }
    for (int64_t i = R; i < D; i++) y[i] = x[i];
}

static void rope_compute(struct tr_kernels *k, const void *plan) {
    const struct rope_plan *pl = plan;
    const int64_t B = pl->B, H = pl->H, T = pl->T, D = pl->D, R = pl->R;
    const int64_t items = B * T, n = items * H * D;
    if (n == 0) return;
    const int dt = pl->dt;
    const size_t es = esize(dt);
    const char *px = pl->x;
    char *po = pl->out;
    double *theta = tr_cpu_scratch_shared(k);
    thetas(pl, theta);
#pragma omp parallel num_threads(tr_cpu_threads(k)) if (n > TR_CPU_PAR_MIN && items > 1)
    {
        /* per thread: cos, sin (R/2 each), a row in, a row out; doubles cover both paths */
        double *ws = (double *)(void *)tr_cpu_scratch_thread(k, tr_cpu_thread_num());
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            const int64_t b = it / T, t = it % T, p = pos_at(pl, b, t);
            for (int64_t hd = 0; hd < H; hd++) {
                const int64_t off = ((b * H + hd) * T + t) * D * (int64_t)es;
                if (dt == TR_DTYPE_F64) {
                    double *c = ws, *s = c + R / 2, *xr = s + R / 2, *yr = xr + D;
                    if (hd == 0) angles_f64(pl, theta, p, c, s);
                    memcpy(xr, px + off, (size_t)D * sizeof(double));
                    rotate_f64(xr, yr, D, R, c, s);
                    memcpy(po + off, yr, (size_t)D * sizeof(double));
                } else {
                    float *c = (float *)(void *)ws, *s = c + R / 2, *xr = s + R / 2, *yr = xr + D;
                    if (hd == 0) angles_f32(pl, theta, p, c, s);
                    tr_cpu_load_f32(xr, px + off, dt, D);
                    rotate_f32(dt, xr, yr, D, R, c, s);
                    tr_cpu_store_f32(po + off, dt, yr, D);
                }
            }
        }
    }
}

static int rope_check(const struct tr_tensor *x, const struct tr_tensor *pos, float base, int64_t rot_dims,
                      int64_t inverse, const struct tr_tensor *out, struct rope_plan *pl, struct tr_error *err) {
    const char *kn = "rope";
    int rc = tr_grad_check_real(x, kn, "x", err);
    if (!rc) rc = tr_grad_check_real(out, kn, "out", err);
    if (!rc) rc = tr_cpu_check_tensor(pos, kn, "pos", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->ndim != 4 || x->dtype != out->dtype || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s should be 4-D (B,H,T,D), and out %s of its shape and dtype", kn,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    const int64_t B = x->shape[0], T = x->shape[2], D = x->shape[3];
    int batched = pos->ndim == 2;
    int ok = (pos->dtype == TR_DTYPE_I32 || pos->dtype == TR_DTYPE_I64) &&
             ((pos->ndim == 1 && pos->shape[0] == T) || (batched && pos->shape[0] == B && pos->shape[1] == T));
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: pos %s should be i32 or i64 of shape (T) [%lld] or (B,T) [%lld,%lld] "
                            "for x %s", kn, tr_cpu_desc(pos, d1, sizeof d1), (long long)T, (long long)B, (long long)T,
                            tr_cpu_desc(x, d2, sizeof d2));
    int64_t R = rot_dims == 0 ? D : rot_dims;
    if (R < 0 || R > D || R % 2 != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: rotated dims ints[0]=%lld (R=%lld) should be even and at most D=%lld "
                            "(x %s)", kn, (long long)rot_dims, (long long)R, (long long)D, tr_cpu_desc(x, d1, sizeof d1));
    if (inverse != 0 && inverse != 1)
        return tr_error_set(err, TR_ERR_INVALID, "%s: inverse ints[1]=%lld should be 0 or 1", kn, (long long)inverse);
    if (!(base > 0.0f) || !isfinite(base))
        return tr_error_set(err, TR_ERR_INVALID, "%s: base floats[0]=%g should be finite and > 0", kn, (double)base);
    memset(pl, 0, sizeof *pl);
    pl->dt = x->dtype;
    pl->pdt = pos->dtype;
    pl->pos_batched = batched;
    pl->inverse = (int)inverse;
    pl->x = x->data;
    pl->pos = pos->data;
    pl->out = out->data;
    pl->B = B;
    pl->H = x->shape[1];
    pl->T = T;
    pl->D = D;
    pl->R = R;
    pl->base = base;
    return TR_OK;
}

static int rope_reserve(struct tr_kernels *k, const struct rope_plan *pl, struct tr_error *err) {
    return tr_cpu_scratch_reserve(k, sizeof(double) * (size_t)(pl->R / 2), sizeof(double) * (size_t)(pl->R + 2 * pl->D),
                                  "rope", err);
}

/* A whole call: the checks, the scratch, the rotation. */
static int rope_run(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *pos, float base,
                    int64_t rot_dims, int64_t inverse, struct tr_tensor *out, struct tr_error *err) {
    struct rope_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx(k, "rope", err);
    if (!rc) rc = rope_check(x, pos, base, rot_dims, inverse, out, &pl, err);
    if (!rc) rc = rope_reserve(k, &pl, err);
    if (!rc) rope_compute(k, &pl);
    return rc;
}

int tr_k_rope(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *pos, float base, int rot_dims,
              int inverse, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_rope(k, x, pos, base, rot_dims, inverse, out, err));
    return rope_run(k, x, pos, base, rot_dims, inverse, out, err);
}

int tr_cpu_rope_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                       struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    return rope_run(k, &in[0], &in[1], at->floats[0], at->ints[0], at->ints[1], out, err);
}

int tr_cpu_rope_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct rope_plan pl;
    memset(&pl, 0, sizeof pl);
    int rc = tr_cpu_check_ctx_bind(k, "rope", err);
    if (!rc) rc = rope_check(&c->in[0], &c->in[1], c->attrs.floats[0], c->attrs.ints[0], c->attrs.ints[1], &c->out, &pl,
                             err);
    if (!rc) rc = rope_reserve(k, &pl, err);
    return rc ? rc : tr_cpu_keep_compute(c, &pl, sizeof pl, rope_compute, "rope", err);
}
