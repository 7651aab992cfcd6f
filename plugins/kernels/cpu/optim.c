/* Optimizer kernels: ADAMW_STEP (ops.h) and the whole AdamW update in one pass.
 *
 * In the graph the moments come in already updated (plain graph ops make them), so the
 * op is the bias-corrected step alone, as torch.optim.AdamW computes it:
 *   param' = param − lr·(m̂/(√v̂ + eps) + wd·param),  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t).
 * tr_k_adamw_update also makes the moments, chunk by chunk, then runs the same step on
 * the chunk while it is in cache: one pass over param, m, v and the gradient where the
 * graph's SCALE, MUL, ADD and ADAMW_STEP make seven (PyTorch's AdamW(fused=True)).
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

/* The moments as the graph makes them (optim.c in core): SCALE(m, β1, 0) + SCALE(g, 1−β1,
 * 0) and SCALE(v, β2, 0) + SCALE(g·g, 1−β2, 0), each product and sum rounded to f32 in that
 * order (one statement each, so that no compiler contracts them into an FMA), so the bits
 * are the unfused graph's. mo may be m and vo v (updated in place). */
TR_CPU_MULTI(void, adamw_moments_f32, (float *mo, float *vo, const float *m, const float *v, const float *restrict g, int64_t n, float b1, float b2), (mo, vo, m, v, g, n, b1, b2)) {
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i];
        const float ma = b1 * m[i] + 0.0f;
        const float mb = c1 * gi + 0.0f;
        const float gg = gi * gi;
        const float va = b2 * v[i] + 0.0f;
        const float vb = c2 * gg + 0.0f;
        mo[i] = ma + mb;
        vo[i] = va + vb;
    }
}

/* A chunk of bf16/f16 weights (and gradient, unless f32): converted, updated and rounded
 * back in one copy per ISA level, so that the conversions vectorise at its width. */
TR_CPU_MULTI(void, adamw_update_lowp, (int dt, void *po, const void *p, float *mo, float *vo, const float *m, const float *v, const void *g, int gdt, int64_t n, float b1, float b2, const struct adamw_scalars *s), (dt, po, p, mo, vo, m, v, g, gdt, n, b1, b2, s)) {
    float gb[TR_CPU_CHUNK], pb[TR_CPU_CHUNK], ob[TR_CPU_CHUNK];
    const float *gf = g;
    if (gdt != TR_DTYPE_F32) {
        tr_cpu_load_f32(gb, g, gdt, n);
        gf = gb;
    }
    tr_cpu_load_f32(pb, p, dt, n);
    adamw_moments_f32_body(isa, mo, vo, m, v, gf, n, b1, b2);
    adamw_f32_body(isa, ob, pb, mo, vo, n, s);
    tr_cpu_store_f32(po, dt, ob, n);
}

static int check_scalar(const char *kn, const struct tr_tensor *t, const char *what, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(t, kn, what, err);
    if (rc) return rc;
    if (t->dtype != TR_DTYPE_F32 || tr_tensor_numel(t) != 1) {
        char d[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be a one-element f32", kn, what,
                            tr_cpu_desc(t, d, sizeof d));
    }
    return TR_OK;
}

/* Everything but the values of lr and step. */
static int adamw_check(const char *kn, const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                       const struct tr_tensor *lr, const struct tr_tensor *step, float beta1, float beta2, float eps,
                       float wd, const struct tr_tensor *out, struct tr_error *err) {
    char d1[200], d2[200];
    int rc = tr_cpu_check_tensor(p, kn, "param", err);
    if (!rc) rc = tr_cpu_check_tensor(m, kn, "m", err);
    if (!rc) rc = tr_cpu_check_tensor(v, kn, "v", err);
    if (!rc) rc = tr_cpu_check_tensor(out, kn, "out", err);
    if (!rc) rc = check_scalar(kn, lr, "lr", err);
    if (!rc) rc = check_scalar(kn, step, "step", err);
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

/* lr and the bias corrections of this step (step and lr are data, checked on every call). */
static int adamw_scalars_of(const char *kn, const struct tr_tensor *lr, const struct tr_tensor *step, float beta1,
                            float beta2, float eps, float wd, struct adamw_scalars *s, struct tr_error *err) {
    double t = *(const float *)step->data, rate = *(const float *)lr->data;
    if (!(t >= 1.0) || isinf(t) || t != floor(t))
        return tr_error_set(err, TR_ERR_INVALID, "%s: step %g, expected an integer >= 1 (steps count from 1)",
                            kn, t);
    if (!isfinite(rate))
        return tr_error_set(err, TR_ERR_INVALID, "%s: lr %g is not finite", kn, rate);
    *s = (struct adamw_scalars){rate, 1.0 / (1.0 - pow((double)beta1, t)), 1.0 / (1.0 - pow((double)beta2, t)),
                                (double)eps, (double)wd};
    return TR_OK;
}

static int adamw_compute(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                         const struct tr_tensor *lr, const struct tr_tensor *step, float beta1, float beta2, float eps,
                         float wd, struct tr_tensor *out, struct tr_error *err) {
    struct adamw_scalars s;
    int rc = adamw_scalars_of("adamw_step", lr, step, beta1, beta2, eps, wd, &s, err);
    if (rc) return rc;
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
    if (!rc) rc = adamw_check("adamw_step", param, m, v, lr, step, beta1, beta2, eps, weight_decay, out, err);
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
    rc = adamw_check("adamw_step", &c->in[0], &c->in[1], &c->in[2], &c->in[3], &c->in[4], f[0], f[1], f[2], f[3],
                     &c->out, err);
    if (rc) return rc;
    c->fn = bound_adamw;
    return TR_OK;
}

/* ---- the whole update in one pass ---- */

static int overlap(const struct tr_tensor *a, const struct tr_tensor *b) {
    const char *pa = a->data, *pb = b->data;
    return pa < pb + tr_tensor_nbytes(b) && pb < pa + tr_tensor_nbytes(a);
}

static int update_check(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                        const struct tr_tensor *g, const struct tr_tensor *lr, const struct tr_tensor *step, float beta1,
                        float beta2, float eps, float wd, const struct tr_tensor *po, const struct tr_tensor *mo,
                        const struct tr_tensor *vo, struct tr_error *err) {
    const char *kn = "adamw_update";
    char d1[200], d2[200];
    if (!p || !m || !v || !g || !lr || !step || !po || !mo || !vo)
        return tr_error_set(err, TR_ERR_INVALID, "%s: a NULL tensor (param, m, v, grad, lr, step and the three "
                            "outputs are all needed)", kn);
    int rc = adamw_check(kn, p, m, v, lr, step, beta1, beta2, eps, wd, po, err);
    if (!rc) rc = tr_cpu_check_tensor(g, kn, "grad", err);
    if (!rc) rc = tr_cpu_check_tensor(mo, kn, "m_out", err);
    if (!rc) rc = tr_cpu_check_tensor(vo, kn, "v_out", err);
    if (rc) return rc;
    if ((g->dtype != TR_DTYPE_F32 && g->dtype != p->dtype) || !tr_cpu_same_shape(g, p))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: grad %s should be f32 or param %s's dtype, with its shape", kn,
                            tr_cpu_desc(g, d1, sizeof d1), tr_cpu_desc(p, d2, sizeof d2));
    const struct tr_tensor *outs[2] = {mo, vo};
    for (int i = 0; i < 2; i++)
        if (outs[i]->dtype != TR_DTYPE_F32 || !tr_cpu_same_shape(outs[i], p))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be f32 with the shape of param %s", kn,
                                i ? "v_out" : "m_out", tr_cpu_desc(outs[i], d1, sizeof d1),
                                tr_cpu_desc(p, d2, sizeof d2));
    /* An output is its own input's memory (updated in place) or shares no byte with any
     * operand: index i is read before it is written, nothing else is safe. */
    const struct tr_tensor *t[7] = {p, m, v, po, mo, vo, g};
    static const char *const name[7] = {"param", "m", "v", "param_out", "m_out", "v_out", "grad"};
    for (int o = 3; o < 6; o++)
        for (int j = 0; j < 7; j++) {
            if (j == o || !overlap(t[o], t[j])) continue;
            if (j == o - 3 && t[o]->data == t[j]->data) continue; /* in place */
            return tr_error_set(err, TR_ERR_INVALID, "%s: %s overlaps %s (an output may only be its own input's "
                                "memory)", kn, name[o], name[j]);
        }
    return TR_OK;
}

static int update_compute(const struct tr_tensor *p, const struct tr_tensor *m, const struct tr_tensor *v,
                          const struct tr_tensor *g, const struct tr_tensor *lr, const struct tr_tensor *step,
                          float beta1, float beta2, float eps, float wd, const struct tr_tensor *po,
                          const struct tr_tensor *mo, const struct tr_tensor *vo, struct tr_error *err) {
    struct adamw_scalars s;
    int rc = adamw_scalars_of("adamw_update", lr, step, beta1, beta2, eps, wd, &s, err);
    if (rc) return rc;
    const int64_t n = tr_tensor_numel(p);
    const int dt = p->dtype, gdt = g->dtype;
    const size_t es = tr_dtype_size((enum tr_dtype)dt), ges = tr_dtype_size((enum tr_dtype)gdt);
    const float *pm = m->data, *pv = v->data;
    float *om = mo->data, *ov = vo->data;
    const int64_t nb = (n + TR_CPU_CHUNK - 1) / TR_CPU_CHUNK;
#pragma omp parallel for schedule(static) if (n > TR_CPU_PAR_MIN)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * TR_CPU_CHUNK, len = n - lo < TR_CPU_CHUNK ? n - lo : TR_CPU_CHUNK;
        const char *gsrc = (const char *)g->data + lo * (int64_t)ges;
        const char *src = (const char *)p->data + lo * (int64_t)es;
        char *dst = (char *)po->data + lo * (int64_t)es;
        if (dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16) {
            adamw_update_lowp(dt, dst, src, om + lo, ov + lo, pm + lo, pv + lo, gsrc, gdt, len, beta1, beta2, &s);
            continue;
        }
        float gb[TR_CPU_CHUNK];
        const float *gf = (const float *)gsrc;
        if (gdt == TR_DTYPE_F64) {
            for (int64_t i = 0; i < len; i++) gb[i] = (float)((const double *)gsrc)[i]; /* as a CAST to f32 */
            gf = gb;
        }
        adamw_moments_f32(om + lo, ov + lo, pm + lo, pv + lo, gf, len, beta1, beta2);
        if (dt == TR_DTYPE_F64) adamw_f64((double *)dst, (const double *)src, om + lo, ov + lo, len, &s);
        else adamw_f32((float *)dst, (const float *)src, om + lo, ov + lo, len, &s);
    }
    return TR_OK;
}

int tr_k_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                      const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                      const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                      struct tr_tensor *param_out, struct tr_tensor *m_out, struct tr_tensor *v_out,
                      struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_k_adamw_update(k, param, m, v, grad, lr, step, beta1, beta2, eps, weight_decay, param_out,
                                            m_out, v_out, err));
    int rc = tr_cpu_check_ctx(k, "adamw_update", err);
    if (!rc)
        rc = update_check(param, m, v, grad, lr, step, beta1, beta2, eps, weight_decay, param_out, m_out, v_out, err);
    if (rc) return rc;
    return update_compute(param, m, v, grad, lr, step, beta1, beta2, eps, weight_decay, param_out, m_out, v_out, err);
}

/* in[0..5] param, m, v, grad, lr, step; in[6..7] m_out, v_out; out param_out. */
static int bound_update(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    const float *f = c->attrs.floats;
    const struct tr_tensor *in = c->in;
    return update_compute(&in[0], &in[1], &in[2], &in[3], &in[4], &in[5], f[0], f[1], f[2], f[3], &c->out, &in[6],
                          &in[7], err);
}

int tr_kernels_bind_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                                 const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                                 const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                                 const struct tr_tensor *param_out, const struct tr_tensor *m_out,
                                 const struct tr_tensor *v_out, struct tr_kernel_call *call, struct tr_error *err) {
    TR_CUDA_ROUTE(k, tr_cuda_bind_adamw_update(k, param, m, v, grad, lr, step, beta1, beta2, eps, weight_decay,
                                               param_out, m_out, v_out, call, err));
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "adamw_update: bind without a call");
    memset(call, 0, sizeof *call);
    int rc = tr_cpu_check_ctx_bind(k, "adamw_update", err);
    if (!rc)
        rc = update_check(param, m, v, grad, lr, step, beta1, beta2, eps, weight_decay, param_out, m_out, v_out, err);
    if (rc) return rc;
    call->op = -1;
    const struct tr_tensor *in[8] = {param, m, v, grad, lr, step, m_out, v_out};
    for (int i = 0; i < 8; i++) call->in[i] = *in[i];
    call->n_in = 8;
    call->out = *param_out;
    call->attrs.floats[0] = beta1, call->attrs.floats[1] = beta2, call->attrs.floats[2] = eps;
    call->attrs.floats[3] = weight_decay;
    call->fn = bound_update;
    return TR_OK;
}
