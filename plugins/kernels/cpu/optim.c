/* Optimizer kernels: ADAMW_STEP (ops.h).
 *
 * The moments come in already updated (plain graph ops make them), so the kernel is the
 * bias-corrected step alone, as torch.optim.AdamW computes it:
 *   param' = param − lr·(m̂/(√v̂ + eps) + wd·param),  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t).
 * The per-call scalars (lr, the bias corrections) are made in f64 once; the elementwise
 * part runs in f32 (f64 for an f64 param), the weight read and rounded (to nearest even)
 * per block for bf16/f16. lr and step are data: read and checked on every call. */
#include "optim_internal.h"

struct adamw_scalars {
    double lr, ibc1, ibc2; /* lr, 1/(1−β1^t), 1/(1−β2^t) */
    double eps, wd;
};

/* o may be p (a donated param, updated in place): element i is read before it is written. */
TR_CPU_MULTI(void, adamw_f32, (float *o, const float *p, const float *restrict m, const float *restrict v, int64_t n, const struct adamw_scalars *s), (o, p, m, v, n, s)) {
    const float lr = (float)s->lr, ib1 = (float)s->ibc1, ib2 = (float)s->ibc2, eps = (float)s->eps, wd = (float)s->wd;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        float d = (m[i] * ib1) / (sqrtf(v[i] * ib2) + eps);
        o[i] = p[i] - lr * (d + wd * p[i]);
    }
}

TR_CPU_MULTI(void, adamw_f64, (double *o, const double *p, const float *restrict m, const float *restrict v, int64_t n, const struct adamw_scalars *s), (o, p, m, v, n, s)) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        double d = ((double)m[i] * s->ibc1) / (sqrt((double)v[i] * s->ibc2) + s->eps);
        o[i] = p[i] - s->lr * (d + s->wd * p[i]);
    }
}

static int check_scalar(const struct tr_tensor *t, const char *what, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(t, "adamw_step", what, err);
    if (rc) return rc;
    if (t->dtype != TR_DTYPE_F32 || tr_tensor_numel(t) != 1) {
        char d[200];
        return tr_error_set(err, TR_ERR_SHAPE, "adamw_step: %s %s should be a one-element f32", what,
                            tr_cpu_desc(t, d, sizeof d));
    }
    return TR_OK;
}

/* Everything but the values of lr and step. */
static int adamw_check(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                       const struct tr_tensor *lr, const struct tr_tensor *step, float beta1, float beta2, float eps,
                       float wd, const struct tr_tensor *out, struct tr_error *err) {
    const char *kn = "adamw_step";
    char d1[200], d2[200];
    int rc = tr_cpu_check_tensor(p, kn, "param", err);
    if (!rc) rc = tr_cpu_check_tensor(m, kn, "m", err);
    if (!rc) rc = tr_cpu_check_tensor(v, kn, "v", err);
    if (!rc) rc = tr_cpu_check_tensor(out, kn, "out", err);
    if (!rc) rc = check_scalar(lr, "lr", err);
    if (!rc) rc = check_scalar(step, "step", err);
    if (rc) return rc;
    if (!tr_dtype_is_float((enum tr_dtype)p->dtype))
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: param %s: expected f32, bf16, f16 or f64", kn,
                            tr_cpu_desc(p, d1, sizeof d1));
    const struct tr_tensor *mv[2] = {m, v};
    for (int i = 0; i < 2; i++)
        if (mv[i]->dtype != TR_DTYPE_F32 || !tr_cpu_same_shape(mv[i], p))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be f32 with the shape of param %s", kn,
                                i ? "v" : "m", tr_cpu_desc(mv[i], d1, sizeof d1), tr_cpu_desc(p, d2, sizeof d2));
    if (out->dtype != p->dtype || !tr_cpu_same_shape(out, p))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should have param %s's dtype and shape", kn,
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(p, d2, sizeof d2));
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f))
        return tr_error_set(err, TR_ERR_INVALID, "%s: beta1 %g, beta2 %g: each must be in [0, 1)", kn, (double)beta1,
                            (double)beta2);
    if (!(eps > 0.0f) || isinf(eps))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g, expected a finite value > 0", kn, (double)eps);
    if (!(wd >= 0.0f) || isinf(wd))
        return tr_error_set(err, TR_ERR_INVALID, "%s: weight decay %g, expected a finite value >= 0", kn, (double)wd);
    return TR_OK;
}

static int adamw_compute(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                         const struct tr_tensor *lr, const struct tr_tensor *step, float beta1, float beta2, float eps,
                         float wd, struct tr_tensor *out, struct tr_error *err) {
    double t = *(const float *)step->data, rate = *(const float *)lr->data;
    if (!(t >= 1.0) || isinf(t) || t != floor(t))
        return tr_error_set(err, TR_ERR_INVALID, "adamw_step: step %g, expected an integer >= 1 (steps count from 1)",
                            t);
    if (!isfinite(rate))
        return tr_error_set(err, TR_ERR_INVALID, "adamw_step: lr %g is not finite", rate);
    struct adamw_scalars s = {rate, 1.0 / (1.0 - pow((double)beta1, t)), 1.0 / (1.0 - pow((double)beta2, t)),
                              (double)eps, (double)wd};
    const int64_t n = tr_tensor_numel(p);
    const int dt = p->dtype;
    const float *pm = m->data, *pv = v->data;
    const int64_t nb = (n + TR_CPU_CHUNK - 1) / TR_CPU_CHUNK;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * TR_CPU_CHUNK, len = n - lo < TR_CPU_CHUNK ? n - lo : TR_CPU_CHUNK;
        if (dt == TR_DTYPE_F64) {
            adamw_f64((double *)out->data + lo, (const double *)p->data + lo, pm + lo, pv + lo, len, &s);
        } else if (dt == TR_DTYPE_F32) {
            adamw_f32((float *)out->data + lo, (const float *)p->data + lo, pm + lo, pv + lo, len, &s);
        } else {
            float pb[TR_CPU_CHUNK], ob[TR_CPU_CHUNK];
            size_t es = tr_dtype_size((enum tr_dtype)dt);
            tr_cpu_load_f32(pb, (const char *)p->data + lo * (int64_t)es, dt, len);
            adamw_f32(ob, pb, pm + lo, pv + lo, len, &s);
            tr_cpu_store_f32((char *)out->data + lo * (int64_t)es, dt, ob, len);
        }
    }
    return TR_OK;
}

int tr_k_adamw_step(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                    const struct tr_tensor *v, const struct tr_tensor *lr, const struct tr_tensor *step, float beta1,
                    float beta2, float eps, float weight_decay, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_adamw_step(k, param, m, v, lr, step, beta1, beta2, eps, weight_decay, out, err));
    int rc = tr_cpu_check_ctx(k, "adamw_step", err);
    if (!rc) rc = adamw_check(param, m, v, lr, step, beta1, beta2, eps, weight_decay, out, err);
    if (rc) return rc;
    return adamw_compute(param, m, v, lr, step, beta1, beta2, eps, weight_decay, out, err);
}

static int bound_adamw(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    const float *f = c->attrs.floats;
    return adamw_compute(&c->in[0], &c->in[1], &c->in[2], &c->in[3], &c->in[4], f[0], f[1], f[2], f[3],
                         (struct tr_tensor *)&c->out, err);
}

int tr_cpu_adamw_step_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    int rc = tr_cpu_check_ctx_bind(k, "adamw_step", err);
    if (rc) return rc;
    if (c->n_in != 5) return tr_error_set(err, TR_ERR_INVALID, "adamw_step: %d inputs, expected 5", c->n_in);
    const float *f = c->attrs.floats;
    rc = adamw_check(&c->in[0], &c->in[1], &c->in[2], &c->in[3], &c->in[4], f[0], f[1], f[2], f[3], &c->out, err);
    if (rc) return rc;
    c->fn = bound_adamw;
    return TR_OK;
}
