/* The attention ops on a cuda context, as tr_cuda_run (dispatch.c) hands them over: the
 * arguments checked and turned into the kernels' parameters (attention_plan.h), the
 * kernel picked for the device's shared memory and the math mode, the forward with or
 * without its statistics, the gradients one at a time or jointly, and SAM's
 * relative-position forms of each. */
#include <stdlib.h>
#include "host/cuda_entry.h"
#include "run_common.h"

/* q, k, v, the mask and y (the forward's output shape: dy for the gradient; NULL for
 * ATTENTION_LSE alone) checked and turned into the kernels' parameters. */
static int attn_params(const char *kn, const struct tr_attrs *at, float scale, const struct tr_tensor *q,
                       const struct tr_tensor *k, const struct tr_tensor *v, const struct tr_tensor *mask,
                       const struct tr_tensor *y, struct tr_cu_attn *pp, struct tr_error *err) {
    int rc = check_float(q, kn, "q", err);
    if (!rc) rc = check_float(k, kn, "k", err);
    if (!rc) rc = check_float(v, kn, "v", err);
    if (!rc && y) rc = check_float(y, kn, "out/dy", err);
    if (!rc && mask) rc = check_float(mask, kn, "mask", err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200], d4[200];
    int ok = q->ndim == 4 && k->ndim == 4 && v->ndim == 4 && (!y || y->ndim == 4) && k->dtype == q->dtype &&
             v->dtype == q->dtype && (!y || y->dtype == q->dtype);
    if (ok) {
        int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3];
        ok = k->shape[0] == B && v->shape[0] == B && k->shape[1] > 0 && H % k->shape[1] == 0 &&
             v->shape[1] == k->shape[1] && k->shape[3] == D && v->shape[2] == k->shape[2] &&
             (!y || (y->shape[0] == B && y->shape[1] == H && y->shape[2] == Tq && y->shape[3] == v->shape[3]));
    }
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: q %s, k %s, v %s, out %s should be (B,H,Tq,D), (B,Hk,Tk,D), "
                            "(B,Hk,Tk,Dv), (B,H,Tq,Dv), H a multiple of Hk, one dtype", kn, tr_cpu_desc(q, d1, sizeof d1),
                            tr_cpu_desc(k, d2, sizeof d2), tr_cpu_desc(v, d3, sizeof d3),
                            y ? tr_cpu_desc(y, d4, sizeof d4) : "-");
    struct tr_cu_attn p = {.B = q->shape[0], .H = q->shape[1], .Hk = k->shape[1], .Tq = q->shape[2], .Tk = k->shape[2],
                           .D = q->shape[3], .Dv = v->shape[3], .scale = scale, .causal = at->ints[0] != 0,
                           .window = (int)at->ints[1]};
    if (mask) {
        if (mask->dtype != TR_DTYPE_F32 && mask->dtype != q->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "attention: mask %s should be f32 or q's dtype",
                                tr_cpu_desc(mask, d1, sizeof d1));
        int64_t full[4] = {p.B, p.H, p.Tq, p.Tk}, ms[TR_MAX_DIMS];
        if (mask->ndim > 4) goto bad_mask;
        contiguous_strides(mask->ndim, mask->shape, ms);
        for (int i = 0; i < 4; i++) {
            int im = i - (4 - mask->ndim);
            int64_t e = im >= 0 ? mask->shape[im] : 1;
            if (e != 1 && e != full[i]) goto bad_mask;
            p.mask_stride[i] = im >= 0 && e != 1 ? ms[im] : 0;
        }
        p.mask = mask->data;
        p.mask_dtype = mask->dtype;
    }
    *pp = p;
    return TR_OK;
bad_mask:
    return tr_error_set(err, TR_ERR_SHAPE, "%s: mask %s does not broadcast to (B,H,Tq,Tk) = (%lld,%lld,%lld,%lld)", kn,
                        tr_cpu_desc(mask, d1, sizeof d1), (long long)p.B, (long long)p.H, (long long)p.Tq,
                        (long long)p.Tk);
}

/* The device's shared memory per block (opt-in: 227 KB on H100/H200, 163 KB on A100),
 * which the tensor-core attention's tiling must fit. */
static size_t attn_smem_max(const struct tr_cuda_ctx *c) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device) != cudaSuccess || v <= 0) {
        (void)cudaGetLastError(); /* not left for the next launch's check */
        v = 48 * 1024;
    }
    return (size_t)v;
}

/* The tensor-core plan of kernel `kind` (attention_plan.h) for p, or the CUDA-core path:
 * TRIDENT_CUDA_ATTENTION=simple keeps the CUDA-core kernels (a check of the others), and
 * an operand not 16-byte aligned (a view into another buffer) keeps them too. */
static int attn_plan(const struct tr_cuda_ctx *c, int math, int kind, int dtype, const struct tr_cu_attn *p,
                     const void *const *ptrs, int n, struct tr_attn_plan *pl) {
    memset(pl, 0, sizeof *pl);
    const char *mode = getenv("TRIDENT_CUDA_ATTENTION");
    if (mode && strcmp(mode, "simple") == 0) return TR_ATTN_PATH_SIMPLE;
    for (int i = 0; i < n; i++)
        if ((uintptr_t)ptrs[i] % 16) return TR_ATTN_PATH_SIMPLE;
    return tr_attn_plan_make(pl, kind, dtype, math, p->D, p->Dv, p->rel_h != NULL,
                             kind == TR_ATTN_DKDV ? p->B * p->Hk : p->B * p->H, attn_smem_max(c));
}

/* lse (B,H,Tq) f32 for q: ATTENTION_LSE's output, or the backward's saved statistics. */
static int check_lse(const char *kn, const struct tr_tensor *lse, const struct tr_cu_attn *p, struct tr_error *err) {
    int rc = check_tensor(lse, kn, "lse", err);
    if (rc) return rc;
    if (lse->dtype != TR_DTYPE_F32 || lse->ndim != 3 || lse->shape[0] != p->B || lse->shape[1] != p->H ||
        lse->shape[2] != p->Tq) {
        char d[200];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: lse %s, expected f32 (B,H,Tq) [%lld,%lld,%lld]", kn,
                            tr_cpu_desc(lse, d, sizeof d), (long long)p->B, (long long)p->H, (long long)p->Tq);
    }
    return TR_OK;
}

/* ATTENTION's out, its ATTENTION_LSE's lse, or both in one pass (either may be NULL). */
int tr_cuda_run_attention(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                         const struct tr_tensor *in, struct tr_tensor *out, struct tr_tensor *lse,
                         struct tr_error *err) {
    const char *kn = out ? "attention" : "attention_lse";
    if (n_in != 3 && n_in != 4)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 3 (q, k, v) or 4 (with mask) expected", kn, n_in);
    struct tr_cu_attn p;
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    int rc = attn_params(kn, at, scale, &in[0], &in[1], &in[2], n_in == 4 ? &in[3] : NULL, out, &p, err);
    if (!rc && lse) rc = check_lse(kn, lse, &p, err);
    if (rc) return rc;
    p.lse = lse ? lse->data : NULL;
    void *o = out ? out->data : NULL;
    struct tr_attn_plan pl;
    const void *ptrs[] = {in[0].data, in[1].data, in[2].data, out ? out->data : in[0].data};
    if (attn_plan(c, k->math, TR_ATTN_FWD, in[0].dtype, &p, ptrs, 4, &pl) == TR_ATTN_PATH_TC)
        return TR_CU_LAUNCH(
            c, tr_cu_attention_tc(c->stream, in[0].dtype, in[0].data, in[1].data, in[2].data, o, &p, &pl, err));
    return TR_CU_LAUNCH(c, tr_cu_attention(c->stream, in[0].dtype, in[0].data, in[1].data, in[2].data, o, &p, err));
}

/* dq, dk and dv (any NULL) of q, k, v, dy (in[0..3], checked): on tensor cores, the
 * statistics (one launch, and a light one that splits a huge row's lse), dk and dv (one),
 * dq (one), when all three kernels have a tensor-core plan; else the CUDA-core kernels,
 * with the statistics also computed once. With saved (the forward's y and lse, checked)
 * the statistics are lse as saved (split) and delta = dy·y (two light launches) instead
 * of a pass over every score. Scratch: lse, delta and ps, 3·B·H·Tq floats. */
static int attn_backward(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_tensor *in,
                         const struct tr_tensor *saved, const struct tr_cu_attn *p, void *dq, void *dk, void *dv,
                         struct tr_error *err) {
    const int dt = in[0].dtype;
    const int64_t rows = p->B * p->H * p->Tq;
    void *scr = NULL;
    int rc = tr_cuda_scratch(c, (size_t)(3 * rows) * sizeof(float) + 16, &scr, err);
    if (rc) return rc;
    float *lse = scr, *delta = lse + rows, *ps = delta + rows;
    const void *ptrs[7] = {in[0].data, in[1].data, in[2].data, in[3].data};
    int n = 4;
    if (dq) ptrs[n++] = dq;
    if (dk) ptrs[n++] = dk;
    if (dv) ptrs[n++] = dv;
    struct tr_attn_plan pf, pq, pkv;
    const int tc = attn_plan(c, k->math, TR_ATTN_FWD, dt, p, ptrs, n, &pf) == TR_ATTN_PATH_TC &&
                   attn_plan(c, k->math, TR_ATTN_DQ, dt, p, ptrs, n, &pq) == TR_ATTN_PATH_TC &&
                   attn_plan(c, k->math, TR_ATTN_DKDV, dt, p, ptrs, n, &pkv) == TR_ATTN_PATH_TC;
    if (c->dry) return TR_OK;
    if (saved && ((rc = tr_cu_attention_delta(c->stream, dt, saved[0].data, in[3].data, rows, p->Dv, delta, err)) ||
                  (rc = tr_cu_attention_split_lse(c->stream, dt, in[0].data, in[1].data, p, saved[1].data, lse, ps,
                                                  err))))
        return rc;
    if (!tc)
        return tr_cu_attention_backward(c->stream, dt, in[0].data, in[1].data, in[2].data, in[3].data, p, dq, dk, dv,
                                        lse, delta, ps, saved != NULL, err);
    if (!saved && ((rc = tr_cu_attention_stats_tc(c->stream, dt, in[0].data, in[1].data, in[2].data, in[3].data, p,
                                                  &pf, lse, delta, err)) ||
                   (rc = tr_cu_attention_split_lse(c->stream, dt, in[0].data, in[1].data, p, lse, lse, ps, err))))
        return rc;
    if ((dk || dv) && (rc = tr_cu_attention_bwd_dkdv_tc(c->stream, dt, in[0].data, in[1].data, in[2].data, in[3].data,
                                                        p, &pkv, lse, delta, ps, dk, dv, err)) != TR_OK)
        return rc;
    if (dq)
        rc = tr_cu_attention_bwd_dq_tc(c->stream, dt, in[0].data, in[1].data, in[2].data, in[3].data, p, &pq, lse,
                                       delta, ps, dq, err);
    return rc;
}

/* The saved y (as dy) and lse of a backward, checked against p and dy; NULL when absent. */
static int check_saved(const char *kn, const struct tr_tensor *saved, const struct tr_tensor *dy,
                       const struct tr_cu_attn *p, struct tr_error *err) {
    int rc = check_float(&saved[0], kn, "y", err);
    if (!rc) rc = same_dtype_shape(dy, &saved[0], kn, err);
    return rc ? rc : check_lse(kn, &saved[1], p, err);
}

/* (q, k, v, dy, [mask], [y, lse]) -> dq, dk or dv (ints[2]) */
int tr_cuda_run_attention_grad(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                              const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    static const char kn[] = "attention_grad";
    if (n_in < 4 || n_in > 7)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 4 (q, k, v, dy), 5 (with mask), 6 or 7 (and the "
                            "forward's y and lse) expected", kn, n_in);
    const int64_t *a = at->ints;
    if (a[1] < 0 || a[1] > INT32_MAX || a[2] < 0 || a[2] > 2)
        return tr_error_set(err, TR_ERR_INVALID, "%s: window ints[1]=%lld or operand ints[2]=%lld (0 dq, 1 dk, "
                            "2 dv) out of range", kn, (long long)a[1], (long long)a[2]);
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    const struct tr_tensor *saved = n_in >= 6 ? &in[n_in - 2] : NULL;
    struct tr_cu_attn p;
    int rc = attn_params(kn, at, scale, &in[0], &in[1], &in[2], n_in == 5 || n_in == 7 ? &in[4] : NULL, &in[3], &p,
                         err);
    if (!rc && saved) rc = check_saved(kn, saved, &in[3], &p, err);
    if (rc) return rc;
    const struct tr_tensor *like = &in[a[2]];
    if ((rc = check_float(out, kn, "out", err)) != TR_OK || (rc = same_dtype_shape(like, out, kn, err)) != TR_OK)
        return rc;
    return attn_backward(k, c, in, saved, &p, a[2] == 0 ? out->data : NULL, a[2] == 1 ? out->data : NULL,
                         a[2] == 2 ? out->data : NULL, err);
}

/* The joint backward of route.c (TR_CUDA_OP_ATTENTION_BACKWARD, attention_plan.h):
 * in[0..3] q, k, v, dy, in[4] the mask, in[5..7] dq, dk, dv, in[8..9] the saved y and lse,
 * present by bit of ints[7]. */
int tr_cuda_run_attention_backward(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                                  const struct tr_tensor *in, struct tr_error *err) {
    static const char kn[] = "attention_backward";
    const int64_t bits = at->ints[7];
    const int saved = ((bits >> 8) & 3) == 3;
    if (n_in != (saved ? 10 : 8) || !(bits & (7 << 5)))
        return tr_error_set(err, TR_ERR_INVALID, "%s: no gradient asked for", kn);
    if (at->ints[1] < 0 || at->ints[1] > INT32_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "%s: window %lld out of range", kn, (long long)at->ints[1]);
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    struct tr_cu_attn p;
    int rc = attn_params(kn, at, scale, &in[0], &in[1], &in[2], (bits >> 4) & 1 ? &in[4] : NULL, &in[3], &p, err);
    if (!rc && saved) rc = check_saved(kn, &in[8], &in[3], &p, err);
    if (rc) return rc;
    void *g[3] = {NULL, NULL, NULL};
    static const char *const gn[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
        if (!((bits >> (5 + w)) & 1)) continue;
        if ((rc = check_float(&in[5 + w], kn, gn[w], err)) != TR_OK ||
            (rc = same_dtype_shape(&in[w], &in[5 + w], kn, err)) != TR_OK)
            return rc;
        g[w] = in[5 + w].data;
    }
    return attn_backward(k, c, in, saved ? &in[8] : NULL, &p, g[0], g[1], g[2], err);
}

/* ATTENTION_REL's (q, k, v, rel_h, rel_w[, dy]) as the CUDA-core kernels take them. */
static int attn_rel_params(const char *kn, const struct tr_attrs *at, int n_in, int want, const struct tr_tensor *in,
                           const struct tr_tensor *y, struct tr_cu_attn *p, struct tr_error *err) {
    if (n_in != want)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", kn, n_in, want);
    struct tr_attrs plain = *at;
    plain.ints[0] = plain.ints[1] = 0; /* no causal bound, no window */
    float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    int rc = attn_params(kn, &plain, scale, &in[0], &in[1], &in[2], NULL, y, p, err);
    if (!rc) rc = check_float(&in[3], kn, "rel_h", err);
    if (!rc) rc = check_float(&in[4], kn, "rel_w", err);
    struct tr_cpu_rel_bias rb;
    if (!rc) rc = tr_cpu_check_rel_bias(kn, &in[0], &in[1], &in[3], &rb, err);
    if (rc) return rc;
    p->rel_h = rb.h;
    p->rel_w = rb.w;
    p->rel_h_dtype = rb.dt_h;
    p->rel_w_dtype = rb.dt_w;
    p->Kh = rb.Kh;
    p->Kw = rb.Kw;
    return TR_OK;
}

/* ATTENTION_REL's out, its ATTENTION_REL_LSE's lse, or both in one pass (either may be
 * NULL): the CUDA-core forward, which writes lse beside the output as for ATTENTION. */
int tr_cuda_run_attention_rel(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                             struct tr_tensor *out, struct tr_tensor *lse, struct tr_error *err) {
    const char *kn = out ? "attention_rel" : "attention_rel_lse";
    struct tr_cu_attn p;
    int rc = attn_rel_params(kn, at, n_in, 5, in, out, &p, err);
    if (!rc && lse) rc = check_lse(kn, lse, &p, err);
    if (rc) return rc;
    p.lse = lse ? lse->data : NULL;
    return TR_CU_LAUNCH(c, tr_cu_attention(c->stream, in[0].dtype, in[0].data, in[1].data, in[2].data,
                                           out ? out->data : NULL, &p, err));
}

/* The joint backward's body: the statistics from saved (the forward's y and lse, checked)
 * when given (delta = dy·y and the lse split, two light launches), else computed once;
 * then the gradients g[w] asked for (NULL: not). Scratch: lse, delta and ps, 3·B·H·Tq
 * floats. */
static int rel_backward(struct tr_cuda_ctx *c, const struct tr_tensor *in, const struct tr_tensor *saved,
                        const struct tr_cu_attn *p, void *const g[5], struct tr_error *err) {
    const int64_t rows = p->B * p->H * p->Tq;
    void *scr = NULL;
    int rc = tr_cuda_scratch(c, (size_t)(3 * rows) * sizeof(float) + 16, &scr, err);
    if (rc) return rc;
    float *lse = scr, *delta = lse + rows, *ps = delta + rows;
    if (c->dry) return TR_OK;
    if (saved && ((rc = tr_cu_attention_delta(c->stream, in[0].dtype, saved[0].data, in[5].data, rows, p->Dv, delta,
                                              err)) ||
                  (rc = tr_cu_attention_split_lse(c->stream, in[0].dtype, in[0].data, in[1].data, p, saved[1].data,
                                                  lse, ps, err))))
        return rc;
    return tr_cu_attention_rel_backward(c->stream, in[0].dtype, in[0].data, in[1].data, in[2].data, in[5].data, p,
                                        g[0], g[1], g[2], g[3], g[4], lse, delta, ps, saved != NULL, err);
}

/* (q, k, v, rel_h, rel_w, dy, [y, lse]) -> the gradient of operand ints[0] */
int tr_cuda_run_attention_rel_grad(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                                  const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    static const char kn[] = "attention_rel_grad";
    const int64_t which = at->ints[0];
    if (which < 0 || which > 4)
        return tr_error_set(err, TR_ERR_INVALID, "%s: ints[0]=%lld should be 0 (dq), 1 (dk), 2 (dv), 3 (drel_h) or "
                            "4 (drel_w)", kn, (long long)which);
    if (n_in != 6 && n_in != 8)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, 6 (q, k, v, rel_h, rel_w, dy) or 8 (and the "
                            "forward's y and lse) expected", kn, n_in);
    struct tr_cu_attn p;
    int rc = attn_rel_params(kn, at, 6, 6, in, &in[5], &p, err);
    if (!rc && n_in == 8) rc = check_saved(kn, &in[6], &in[5], &p, err);
    if (rc) return rc;
    if ((rc = check_float(out, kn, "out", err)) != TR_OK || (rc = same_dtype_shape(&in[which], out, kn, err)) != TR_OK)
        return rc;
    if (n_in == 8) { /* the saved statistics: the joint backward with this one gradient */
        void *g[5] = {NULL, NULL, NULL, NULL, NULL};
        g[which] = out->data;
        return rel_backward(c, in, &in[6], &p, g, err);
    }
    void *scr = NULL;
    if ((rc = tr_cuda_scratch(c, (size_t)(3 * p.B * p.H * p.Tq) * sizeof(float) + 16, &scr, err)) != TR_OK) return rc;
    return TR_CU_LAUNCH(c, tr_cu_attention_grad(c->stream, in[0].dtype, in[0].data, in[1].data, in[2].data, in[5].data,
                                                &p, (int)which, out->data, scr, err));
}

/* ATTENTION_REL's joint backward (TR_CUDA_OP_ATTENTION_REL_BACKWARD, attention_plan.h):
 * in[0..5] q, k, v, rel_h, rel_w, dy; in[6 + w] gradient w when bit w of ints[7] is set,
 * shaped and typed as operand w; in[11..12] the forward's y and lse with 13 inputs. */
int tr_cuda_run_attention_rel_backward(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                                      const struct tr_tensor *in, struct tr_error *err) {
    static const char kn[] = "attention_rel_backward";
    const int64_t bits = at->ints[7];
    if ((n_in != 11 && n_in != 13) || !(bits & 31))
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given (11, or 13 with y and lse expected), or no "
                            "gradient asked for", kn, n_in);
    struct tr_cu_attn p;
    int rc = attn_rel_params(kn, at, 6, 6, in, &in[5], &p, err);
    if (!rc && n_in == 13) rc = check_saved(kn, &in[11], &in[5], &p, err);
    if (rc) return rc;
    void *g[5] = {NULL, NULL, NULL, NULL, NULL};
    static const char *const gn[5] = {"dq", "dk", "dv", "drel_h", "drel_w"};
    for (int w = 0; w < 5; w++) {
        if (!((bits >> w) & 1)) continue;
        if ((rc = check_float(&in[6 + w], kn, gn[w], err)) != TR_OK ||
            (rc = same_dtype_shape(&in[w], &in[6 + w], kn, err)) != TR_OK)
            return rc;
        g[w] = in[6 + w].data;
    }
    return rel_backward(c, in, n_in == 13 ? &in[11] : NULL, &p, g, err);
}
