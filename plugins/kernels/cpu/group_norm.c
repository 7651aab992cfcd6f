/* GROUP_NORM and its gradients (ops.h) over NHWC. Every pass walks whole pixel rows (C
 * contiguous channels), vectorized across the channels, never a group's C/G channels at
 * a time: a group is only 2 to 40 channels wide, too narrow a row for vectors, and the
 * per-pixel call overhead was most of the kernel. Work items are (image, pixel chunk);
 * each writes per-channel partial sums (double) of its own, which are added up in a fixed
 * order afterwards, so every result is independent of the thread count and the timing.
 *
 * The statistics are two passes (the sums, then the squared deviations from the group's
 * mean) so that a group of a large image (64x64 pixels x 40 channels and more) loses
 * nothing to f32 sums and the variance is never a difference of two large numbers. The
 * output pass is y = (x − μ)·(rstd·γ) + β per channel, in f32, with the optional SiLU
 * (the fused form a remapper makes of a norm and the SiLU after it) before the one
 * rounding to the storage dtype.
 *
 * Gradients, with x̂ = (x − μ)·rstd over a group of M elements and ĝ = dy·γ:
 *   dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))       (GROUP_NORM_GRAD; the two means from
 *          the per-channel sums Σdy and Σdy·x̂, weighted by γ)
 *   dγ_c = Σ over n and pixels of dy·x̂           (GROUP_NORM_GRAD_GAMMA) */
#include <stdlib.h>
#include "cpu_internal.h"

enum gn_pass { GN_SUM, GN_DEV, GN_DY_SUMS, GN_OUT, GN_DX };

struct gn_args {
    int dt, silu, pass;
    const char *x, *dy;
    char *o;
    int64_t N, HW, C, G, cg, chunk, nchunk;
    double *part;          /* (N, nchunk, 2, C): each item's channel sums */
    const double *mc, *rc; /* (N, C): the channel's group mean and 1/std */
    const float *ca, *cb, *cd, *ce; /* (N, C): the output pass's coefficients (GN_OUT: μ, rstd·γ, β;
                                       GN_DX: μ, rstd·γ, −rstd·m1, −rstd²·m2) */
};

/* Pixel row p of image n of t (A->dt): in place for f32, else converted into buf. */
static inline __attribute__((always_inline)) const float *gn_row(const struct gn_args *A, const char *t, int64_t n,
                                                                   int64_t p, float *buf) {
    const int64_t off = (n * A->HW + p) * A->C;
    if (A->dt == TR_DTYPE_F32) return (const float *)(const void *)t + off;
    tr_cpu_load_f32(buf, t + off * (int64_t)tr_dtype_size((enum tr_dtype)A->dt), A->dt, A->C);
    return buf;
}

/* One item's pass: buf holds 3·C floats (x's row, dy's row, the output row). */
TR_CPU_MULTI(void, gn_item, (const struct gn_args *A, int64_t item, float *buf), (A, item, buf)) {
    (void)isa;
    const int64_t C = A->C, n = item / A->nchunk, p0 = (item % A->nchunk) * A->chunk;
    const int64_t p1 = p0 + A->chunk < A->HW ? p0 + A->chunk : A->HW;
    double *restrict s0 = A->part + item * 2 * C, *restrict s1 = s0 + C;
    const double *restrict mc = A->mc + n * C, *restrict rc = A->rc + n * C;
    float *restrict ob = buf + 2 * C;
    switch (A->pass) {
    case GN_SUM:
        for (int64_t c = 0; c < C; c++) s0[c] = 0.0;
        for (int64_t p = p0; p < p1; p++) {
            const float *restrict xr = gn_row(A, A->x, n, p, buf);
            for (int64_t c = 0; c < C; c++) s0[c] += (double)xr[c];
        }
        break;
    case GN_DEV:
        for (int64_t c = 0; c < C; c++) s0[c] = 0.0;
        for (int64_t p = p0; p < p1; p++) {
            const float *restrict xr = gn_row(A, A->x, n, p, buf);
            for (int64_t c = 0; c < C; c++) {
                double d = (double)xr[c] - mc[c];
                s0[c] += d * d;
            }
        }
        break;
    case GN_DY_SUMS:
        for (int64_t c = 0; c < C; c++) s0[c] = s1[c] = 0.0;
        for (int64_t p = p0; p < p1; p++) {
            const float *restrict xr = gn_row(A, A->x, n, p, buf), *restrict dr = gn_row(A, A->dy, n, p, buf + C);
            for (int64_t c = 0; c < C; c++) {
                s0[c] += (double)dr[c];
                s1[c] += (double)dr[c] * (((double)xr[c] - mc[c]) * rc[c]);
            }
        }
        break;
    case GN_OUT:
    case GN_DX: {
        const float *restrict ca = A->ca + n * C, *restrict cb = A->cb + n * C, *restrict cd = A->cd + n * C;
        const float *restrict ce = A->ce + n * C;
        const int64_t es = (int64_t)tr_dtype_size((enum tr_dtype)A->dt);
        for (int64_t p = p0; p < p1; p++) {
            const float *restrict xr = gn_row(A, A->x, n, p, buf);
            float *restrict o = A->dt == TR_DTYPE_F32 ? (float *)(void *)A->o + (n * A->HW + p) * C : ob;
            if (A->pass == GN_OUT) { /* y = (x − μ)·(rstd·γ) + β */
                if (A->silu)
                    for (int64_t c = 0; c < C; c++) {
                        float y = (xr[c] - ca[c]) * cb[c] + cd[c];
                        o[c] = y * tr_fsigmoid(y);
                    }
                else
                    for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - ca[c]) * cb[c] + cd[c];
            } else { /* dx = rstd·γ·dy − rstd·m1 − rstd²·m2·(x − μ) */
                const float *restrict dr = gn_row(A, A->dy, n, p, buf + C);
                for (int64_t c = 0; c < C; c++) o[c] = dr[c] * cb[c] + cd[c] + (xr[c] - ca[c]) * ce[c];
            }
            if (o == ob) tr_cpu_store_f32(A->o + (n * A->HW + p) * C * es, A->dt, ob, C);
        }
        break;
    }
    }
}

static void gn_rows(const void *ctx, int64_t r0, int64_t r1, void *buf) {
    for (int64_t i = r0; i < r1; i++) gn_item(ctx, i, buf);
}

/* Group gi of image n: its channels' sums of row w (0 or 1) over every chunk, in order,
 * channel c weighted by wt[c] (NULL: 1). */
static double gn_total(const struct gn_args *A, int64_t n, int64_t gi, int w, const float *wt) {
    double t = 0.0;
    for (int64_t ch = 0; ch < A->nchunk; ch++) {
        const double *r = A->part + ((n * A->nchunk + ch) * 2 + w) * A->C + gi * A->cg;
        for (int64_t j = 0; j < A->cg; j++) t += wt ? (double)wt[gi * A->cg + j] * r[j] : r[j];
    }
    return t;
}

static const char *gn_name(int op) {
    return op == TR_OP_GROUP_NORM_GRAD ? "group_norm_grad" : op == TR_OP_GROUP_NORM_GRAD_GAMMA ? "group_norm_grad_gamma"
                                                                                                : "group_norm";
}

/* in: (x, gamma, beta), (x, gamma, dy) or (x, dy) by op. */
static int gn_check(int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                    const struct tr_tensor *out, struct tr_error *err) {
    const char *kn = gn_name(op);
    const int want = op == TR_OP_GROUP_NORM_GRAD_GAMMA ? 2 : 3;
    if (n_in != want) return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", kn, n_in, want);
    const struct tr_tensor *x = &in[0], *dy = op == TR_OP_GROUP_NORM ? NULL : &in[want - 1];
    const struct tr_tensor *gb[2] = {op == TR_OP_GROUP_NORM_GRAD_GAMMA ? NULL : &in[1],
                                     op == TR_OP_GROUP_NORM ? &in[2] : NULL};
    static const char *const gb_name[2] = {"gamma", "beta"};
    int rc = tr_cpu_check_float(x, kn, "x", err);
    for (int i = 0; i < 2; i++)
        if (!rc && gb[i]) rc = tr_cpu_check_float(gb[i], kn, gb_name[i], err);
    if (!rc && dy) rc = tr_cpu_check_float(dy, kn, "dy", err);
    if (!rc) rc = tr_cpu_check_float(out, kn, "out", err);
    if (!rc && dy) rc = tr_cpu_check_like(kn, x, "x", dy, "dy", err);
    if (!rc && op != TR_OP_GROUP_NORM_GRAD_GAMMA) rc = tr_cpu_check_like(kn, x, "x", out, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->ndim != 4)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s should be 4-D (N,H,W,C)", kn, tr_cpu_desc(x, d1, sizeof d1));
    const int64_t C = x->shape[3], G = at->ints[0];
    if (G < 1 || C % G != 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %lld groups do not divide the %lld channels of x %s", kn,
                            (long long)G, (long long)C, tr_cpu_desc(x, d1, sizeof d1));
    for (int i = 0; i < 2; i++)
        if (gb[i] && (tr_tensor_numel(gb[i]) != C || (gb[i]->dtype != x->dtype && gb[i]->dtype != TR_DTYPE_F32)))
            return tr_error_set(err, TR_ERR_SHAPE, "%s: %s %s should be [%lld] of %s or f32 (x is %s)", kn,
                                gb_name[i], tr_cpu_desc(gb[i], d1, sizeof d1), (long long)C,
                                tr_dtype_name((enum tr_dtype)x->dtype), tr_cpu_desc(x, d2, sizeof d2));
    if (op == TR_OP_GROUP_NORM_GRAD_GAMMA && (tr_tensor_numel(out) != C || !tr_tensor_is_contiguous(out)))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s should be a contiguous [%lld]", kn,
                            tr_cpu_desc(out, d1, sizeof d1), (long long)C);
    if (at->ints[1] != 0 && (op != TR_OP_GROUP_NORM || at->ints[1] != 1))
        return tr_error_set(err, TR_ERR_INVALID, "%s: silu flag ints[1]=%lld, expected %s", kn,
                            (long long)at->ints[1], op == TR_OP_GROUP_NORM ? "0 or 1" : "0");
    if (!(at->floats[0] >= 0.0f) || !isfinite(at->floats[0]))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g should be finite and >= 0", kn, (double)at->floats[0]);
    return TR_OK;
}

int tr_cpu_group_norm_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    const char *kn = gn_name(op);
    int rc = tr_cpu_check_ctx(k, kn, err);
    if (!rc) rc = gn_check(op, at, n_in, in, out, err);
    if (rc) return rc;
    const struct tr_tensor *x = &in[0];
    const int64_t N = x->shape[0], C = x->shape[3], G = at->ints[0], cg = C / G;
    const int gamma_grad = op == TR_OP_GROUP_NORM_GRAD_GAMMA;
    if (tr_tensor_numel(x) == 0) { /* an empty group: no statistics, dgamma sums nothing */
        if (gamma_grad) {
            float z = 0.0f;
            for (int64_t c = 0; c < C; c++)
                tr_cpu_store_f32((char *)out->data + c * (int64_t)tr_dtype_size((enum tr_dtype)out->dtype),
                                 out->dtype, &z, 1);
        }
        return TR_OK;
    }
    /* Chunks of at least 64 pixels, at most 256 per image: fixed by the shape alone. */
    const int64_t HW = x->shape[1] * x->shape[2];
    int64_t nchunk = (HW + 63) / 64;
    if (nchunk > 256) nchunk = 256;
    const int64_t chunk = (HW + nchunk - 1) / nchunk;
    nchunk = (HW + chunk - 1) / chunk;
    /* shared: the items' sums, per-channel mean and 1/std (double), γ and β and the four
     * coefficient rows (f32); per thread: x's, dy's and the output's row */
    const size_t nd = (size_t)(N * nchunk * 2 * C + 2 * N * C), nf = (size_t)(2 * C + 4 * N * C);
    if ((rc = tr_cpu_scratch_reserve(k, nd * sizeof(double) + nf * sizeof(float), 3 * sizeof(float) * (size_t)C, kn,
                                     err)) != TR_OK)
        return rc;
    double *part = tr_cpu_scratch_shared(k), *mc = part + N * nchunk * 2 * C, *rs = mc + N * C;
    float *g = (float *)(void *)(rs + N * C), *b = g + C, *ca = b + C, *cb = ca + N * C, *cd = cb + N * C,
          *ce = cd + N * C;
    if (!gamma_grad) tr_cpu_load_f32(g, in[1].data, in[1].dtype, C); /* weights change in place: read every call */
    if (op == TR_OP_GROUP_NORM) tr_cpu_load_f32(b, in[2].data, in[2].dtype, C);
    struct gn_args A = {.dt = x->dtype, .silu = at->ints[1] != 0, .x = x->data,
                        .dy = op == TR_OP_GROUP_NORM ? NULL : in[n_in - 1].data, .o = out->data, .N = N, .HW = HW,
                        .C = C, .G = G, .cg = cg, .chunk = chunk, .nchunk = nchunk, .part = part, .mc = mc, .rc = rs,
                        .ca = ca, .cb = cb, .cd = cd, .ce = ce};
    const int64_t items = N * nchunk;
    const int par = tr_tensor_numel(x) > TR_CPU_PAR_MIN;
    const double cnt = (double)(HW * cg);
    A.pass = GN_SUM;
    tr_cpu_rows(k, items, 1, par, gn_rows, &A);
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            const double t = gn_total(&A, n, gi, 0, NULL);
            for (int64_t j = 0; j < cg; j++) mc[n * C + gi * cg + j] = t / cnt;
        }
    A.pass = GN_DEV;
    tr_cpu_rows(k, items, 1, par, gn_rows, &A);
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            const double t = gn_total(&A, n, gi, 0, NULL);
            for (int64_t j = 0; j < cg; j++) rs[n * C + gi * cg + j] = 1.0 / sqrt(t / cnt + (double)at->floats[0]);
        }
    if (op == TR_OP_GROUP_NORM) {
        for (int64_t n = 0; n < N; n++)
            for (int64_t c = 0; c < C; c++) {
                ca[n * C + c] = (float)mc[n * C + c];
                cb[n * C + c] = (float)(rs[n * C + c] * g[c]);
                cd[n * C + c] = b[c];
            }
        A.pass = GN_OUT;
        tr_cpu_rows(k, items, 1, par, gn_rows, &A);
        return TR_OK;
    }
    A.pass = GN_DY_SUMS;
    tr_cpu_rows(k, items, 1, par, gn_rows, &A);
    if (gamma_grad) { /* Σ over the images, then the chunks, in order */
        const size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
        for (int64_t c = 0; c < C; c++) {
            double acc = 0.0;
            for (int64_t i = 0; i < items; i++) acc += part[(i * 2 + 1) * C + c];
            float v = (float)acc;
            tr_cpu_store_f32((char *)out->data + c * (int64_t)es, out->dtype, &v, 1);
        }
        return TR_OK;
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t gi = 0; gi < G; gi++) {
            const double r = rs[n * C + gi * cg], m1 = gn_total(&A, n, gi, 0, g) / cnt,
                         m2 = gn_total(&A, n, gi, 1, g) / cnt;
            for (int64_t j = 0; j < cg; j++) {
                const int64_t c = gi * cg + j;
                ca[n * C + c] = (float)mc[n * C + c];
                cb[n * C + c] = (float)(r * g[c]);
                cd[n * C + c] = (float)(-r * m1);
                ce[n * C + c] = (float)(-r * r * m2);
            }
        }
    A.pass = GN_DX;
    tr_cpu_rows(k, items, 1, par, gn_rows, &A);
    return TR_OK;
}
