/* tr_kernels_run on a cuda context: the op (its attributes already resolved by
 * tr_cpu_resolve, the validation path shared with the cpu) mapped to its launcher after
 * the argument checks the launchers rely on. Layout ops become one strided copy
 * (tr_cu_copy) over an index space. Every launch (and every other piece of stream work)
 * goes through TR_CU_LAUNCH, so that a bound call is checked at bind by running its path
 * dry (cuda/host/route.c): every check made, the scratch reserved, nothing queued. */
#include <stdlib.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/colsum_plan.h"
#include "host/cuda_entry.h"
#include "run_common.h"

static int64_t last_dim(const struct tr_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 1; }

/* ---- the ops ---- */

static int run_binary(struct tr_cuda_ctx *c, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                      struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    int rc = tr_cpu_binary_args(TR_DEVICE_CUDA, op, a, b, out, err);
    if (rc) return rc;
    char d1[200], d2[200], d3[200];
    struct tr_cu_index idx = {.ndim = out->ndim};
    int64_t sa[TR_MAX_DIMS], sb[TR_MAX_DIMS];
    contiguous_strides(a->ndim, a->shape, sa);
    contiguous_strides(b->ndim, b->shape, sb);
    if (a->ndim > out->ndim || b->ndim > out->ndim)
        goto bad;
    for (int i = 0; i < out->ndim; i++) {
        int ia = i - (out->ndim - a->ndim), ib = i - (out->ndim - b->ndim);
        int64_t ea = ia >= 0 ? a->shape[ia] : 1, eb = ib >= 0 ? b->shape[ib] : 1, e = out->shape[i];
        if ((ea != e && ea != 1) || (eb != e && eb != 1) || (e != (ea > eb ? ea : eb) && e != 0)) goto bad;
        idx.shape[i] = e;
        idx.stride[1][i] = ia >= 0 && ea != 1 ? sa[ia] : 0;
        idx.stride[2][i] = ib >= 0 && eb != 1 ? sb[ib] : 0;
    }
    contiguous_strides(out->ndim, out->shape, idx.stride[0]);
    return TR_CU_LAUNCH(
        c, tr_cu_binary(c->stream, op, out->dtype, a->data, b->data, out->data, &idx, tr_tensor_numel(out), err));
bad:
    return tr_error_set(err, TR_ERR_SHAPE, "%s: a %s and b %s do not broadcast to out %s", kn,
                        tr_cpu_desc(a, d1, sizeof d1), tr_cpu_desc(b, d2, sizeof d2), tr_cpu_desc(out, d3, sizeof d3));
}

static int run_unary(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *x,
                     struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    int rc = check_float(x, kn, "x", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (!rc) rc = same_dtype_shape(x, out, kn, err);
    if (rc) return rc;
    if (op == TR_OP_GELU && at->ints[0] != 0 && at->ints[0] != 1)
        return tr_error_set(err, TR_ERR_INVALID, "gelu: ints[0]=%lld (0: erf, 1: tanh approximation)",
                            (long long)at->ints[0]);
    return TR_CU_LAUNCH(c, tr_cu_unary(c->stream, op, x->dtype, x->data, out->data, tr_tensor_numel(x), at->floats[0],
                                       at->floats[1], (int)at->ints[0], err));
}

static int run_rows(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                    struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const struct tr_tensor *x = &in[0];
    int rc = check_float(x, kn, "x", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (!rc) rc = same_dtype_shape(x, out, kn, err);
    if (rc) return rc;
    int64_t n = last_dim(x), rows = n ? tr_tensor_numel(x) / n : 0;
    if (op == TR_OP_SOFTMAX)
        return TR_CU_LAUNCH(c, tr_cu_softmax(c->stream, x->dtype, x->data, out->data, rows, n, err));
    const struct tr_tensor *g = n_in > 1 ? &in[1] : NULL, *b = n_in > 2 ? &in[2] : NULL;
    char d1[200];
    if (g && ((rc = check_float(g, kn, "gamma", err)) != TR_OK || tr_tensor_numel(g) != n))
        return rc ? rc : tr_error_set(err, TR_ERR_SHAPE, "layer_norm: gamma %s should have %lld elements",
                                      tr_cpu_desc(g, d1, sizeof d1), (long long)n);
    if (b && ((rc = check_float(b, kn, "beta", err)) != TR_OK || tr_tensor_numel(b) != n || (g && b->dtype != g->dtype)))
        return rc ? rc : tr_error_set(err, TR_ERR_SHAPE, "layer_norm: beta %s should have %lld elements, gamma's dtype",
                                      tr_cpu_desc(b, d1, sizeof d1), (long long)n);
    int gdt = g ? g->dtype : b ? b->dtype : TR_DTYPE_F32;
    return TR_CU_LAUNCH(c, tr_cu_layer_norm(c->stream, x->dtype, x->data, g ? g->data : NULL, b ? b->data : NULL, gdt,
                                            out->data, rows, n, at->floats[0], err));
}

static int run_embedding(struct tr_cuda_ctx *c, const struct tr_tensor *table, const struct tr_tensor *ids,
                         struct tr_tensor *out, struct tr_error *err) {
    int rc = tr_cpu_embedding_args(TR_DEVICE_CUDA, table, ids, out, err);
    if (rc) return rc;
    return TR_CU_LAUNCH(c, tr_cu_embedding(c->stream, table->dtype, table->data, ids->data, ids->dtype, out->data,
                                           tr_tensor_numel(ids), table->shape[1], table->shape[0], c->flag, err));
}

/* out (contiguous) = the elements of x at base + Σ idx·xstride */
static int strided_copy(struct tr_cuda_ctx *c, const struct tr_tensor *x, const char *src_base, const int64_t *xstride,
                        void *dst, const int64_t *dstride, int ndim, const int64_t *shape, struct tr_error *err) {
    struct tr_cu_index idx = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) {
        idx.shape[i] = shape[i];
        idx.stride[0][i] = dstride[i];
        idx.stride[1][i] = xstride[i];
    }
    return TR_CU_LAUNCH(c, tr_cu_copy(c->stream, tr_dtype_size((enum tr_dtype)x->dtype), src_base, dst, &idx,
                                      tr_shape_numel(ndim, shape), err));
}

static int run_layout(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                      struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    int rc = check_tensor(out, kn, "out", err);
    for (int i = 0; !rc && i < n_in; i++) rc = check_tensor(&in[i], kn, "x", err);
    if (rc) return rc;
    const struct tr_tensor *x = &in[0];
    char d1[200], d2[200];
    for (int i = 0; i < n_in; i++)
        if (in[i].dtype != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should share a dtype", kn,
                                tr_cpu_desc(&in[i], d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    int64_t xs[TR_MAX_DIMS], os[TR_MAX_DIMS], ps[TR_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xs);
    contiguous_strides(out->ndim, out->shape, os);
    size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
    switch (op) {
    case TR_OP_RESHAPE:
        if (tr_tensor_numel(x) != tr_tensor_numel(out))
            return tr_error_set(err, TR_ERR_SHAPE, "reshape: x %s and out %s should have the same element count",
                                tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
        if (out->data == x->data || tr_tensor_nbytes(x) == 0) return TR_OK;
        return TR_CU_LAUNCH(c, TR_CU_CHECK(cudaMemcpyAsync(out->data, x->data, tr_tensor_nbytes(x),
                                                           cudaMemcpyDeviceToDevice, c->stream),
                                           "reshape: cudaMemcpyAsync", err));
    case TR_OP_TRANSPOSE: {
        int seen = 0, ok = out->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++) {
            int64_t p = at->ints[i];
            ok = p >= 0 && p < x->ndim && !(seen & (1 << p)) && out->shape[i] == x->shape[p];
            if (ok) seen |= 1 << p, ps[i] = xs[p];
        }
        if (!ok)
            return tr_error_set(err, TR_ERR_SHAPE, "transpose: perm does not take x %s to out %s",
                                tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
        return strided_copy(c, x, x->data, ps, out->data, os, out->ndim, out->shape, err);
    }
    case TR_OP_SLICE: {
        int ax = (int)at->ints[0];
        int ok = out->ndim == x->ndim;
        for (int i = 0; ok && i < x->ndim; i++) ok = i == ax || out->shape[i] == x->shape[i];
        if (!ok || (out->shape[ax] > 0 && at->ints[1] + (out->shape[ax] - 1) * at->ints[3] >= x->shape[ax]))
            return tr_error_set(err, TR_ERR_SHAPE, "slice: out %s does not fit x %s", tr_cpu_desc(out, d1, sizeof d1),
                                tr_cpu_desc(x, d2, sizeof d2));
        for (int i = 0; i < x->ndim; i++) ps[i] = i == ax ? xs[i] * at->ints[3] : xs[i];
        return strided_copy(c, x, (const char *)x->data + (size_t)(at->ints[1] * xs[ax]) * es, ps, out->data, os,
                            out->ndim, out->shape, err);
    }
    case TR_OP_CONCAT: {
        int ax = tr_cpu_axis(at->ints[0], out->ndim);
        if (ax < 0) return tr_error_set(err, TR_ERR_INVALID, "concat: axis %lld out of range", (long long)at->ints[0]);
        int64_t at_ax = 0;
        for (int i = 0; i < n_in; i++) {
            int ok = in[i].ndim == out->ndim;
            for (int d = 0; ok && d < out->ndim; d++) ok = d == ax || in[i].shape[d] == out->shape[d];
            if (!ok)
                return tr_error_set(err, TR_ERR_SHAPE, "concat: input %d %s does not fit out %s on axis %d", i,
                                    tr_cpu_desc(&in[i], d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2), ax);
            at_ax += in[i].shape[ax];
        }
        if (at_ax != out->shape[ax])
            return tr_error_set(err, TR_ERR_SHAPE, "concat: inputs add up to %lld on axis %d, out %s has %lld",
                                (long long)at_ax, ax, tr_cpu_desc(out, d2, sizeof d2), (long long)out->shape[ax]);
        int64_t pos = 0;
        for (int i = 0; i < n_in; i++) {
            int64_t is[TR_MAX_DIMS];
            contiguous_strides(in[i].ndim, in[i].shape, is);
            rc = strided_copy(c, &in[i], in[i].data, is, (char *)out->data + (size_t)(pos * os[ax]) * es, os, out->ndim,
                              in[i].shape, err);
            if (rc) return rc;
            pos += in[i].shape[ax];
        }
        return TR_OK;
    }
    case TR_OP_BROADCAST: {
        if (x->ndim > out->ndim) goto bad_bcast;
        for (int i = 0; i < out->ndim; i++) {
            int ix = i - (out->ndim - x->ndim);
            int64_t e = ix >= 0 ? x->shape[ix] : 1;
            if (e != 1 && e != out->shape[i]) goto bad_bcast;
            ps[i] = ix >= 0 && e != 1 ? xs[ix] : 0;
        }
        return strided_copy(c, x, x->data, ps, out->data, os, out->ndim, out->shape, err);
    bad_bcast:
        return tr_error_set(err, TR_ERR_SHAPE, "broadcast: x %s does not broadcast to out %s",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    }
    default: return tr_error_set(err, TR_ERR_INTERNAL, "cuda layout: op %s", kn);
    }
}

static int run_reduce(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *x,
                      struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    int rc = check_float(x, kn, "x", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    int ax = tr_cpu_axis(at->ints[0], x->ndim);
    if (ax < 0 || out->dtype != x->dtype || tr_tensor_numel(out) * (x->ndim ? x->shape[ax] : 1) != tr_tensor_numel(x))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s does not fit x %s reduced over axis %lld", kn,
                            tr_cpu_desc(out, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2), (long long)at->ints[0]);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->shape[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->shape[i];
    /* a column reduction (inner > 1): its partials in the scratch */
    struct tr_cuda_colsum_plan cp;
    void *part = NULL;
    if (inner > 1 || outer > 0x7fffffffLL) {
        if (tr_cuda_colsum_plan(outer, x->shape[ax], inner, c->sms, &cp) != 0)
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: x %s reduced over axis %lld is beyond one cuda grid", kn,
                                tr_cpu_desc(x, d2, sizeof d2), (long long)at->ints[0]);
        if (cp.scratch_bytes && (rc = tr_cuda_scratch(c, cp.scratch_bytes, &part, err)) != TR_OK) return rc;
    }
    return TR_CU_LAUNCH(c, tr_cu_reduce(c->stream, op, x->dtype, x->data, out->data, outer, x->shape[ax], inner, c->sms,
                                        part, err));
}

static int run_cast(struct tr_cuda_ctx *c, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    int rc = check_tensor(x, "cast", "x", err);
    if (!rc) rc = check_tensor(out, "cast", "out", err);
    if (rc) return rc;
    if (!tr_cpu_same_shape(x, out)) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_SHAPE, "cast: x %s and out %s should have the same shape",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    }
    return TR_CU_LAUNCH(c, tr_cu_cast(c->stream, x->data, x->dtype, out->data, out->dtype, tr_tensor_numel(x), err));
}

static int run_cross_entropy(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *logits,
                             const struct tr_tensor *labels, struct tr_tensor *out, struct tr_error *err) {
    int rc = check_float(logits, "cross_entropy", "logits", err);
    if (!rc) rc = check_tensor(labels, "cross_entropy", "labels", err);
    if (!rc) rc = check_tensor(out, "cross_entropy", "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (logits->ndim != 2 || labels->ndim != 1 || labels->shape[0] != logits->shape[0] ||
        (labels->dtype != TR_DTYPE_I32 && labels->dtype != TR_DTYPE_I64) || out->dtype != TR_DTYPE_F32 ||
        tr_tensor_numel(out) != 1)
        return tr_error_set(err, TR_ERR_SHAPE, "cross_entropy: logits %s (N,C), labels %s (N) i32/i64, out one f32",
                            tr_cpu_desc(logits, d1, sizeof d1), tr_cpu_desc(labels, d2, sizeof d2));
    int64_t rows = logits->shape[0];
    void *scratch = NULL;
    if ((rc = tr_cuda_scratch(c, (size_t)rows * 8 + 16, &scratch, err)) != TR_OK) return rc;
    return TR_CU_LAUNCH(c, tr_cu_cross_entropy(c->stream, logits->dtype, logits->data, labels->data, labels->dtype,
                                               rows, logits->shape[1], at->ints[1] != 0, (long long)at->ints[0],
                                               out->data, scratch, c->flag, err));
}

static int run_adamw(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *in,
                     struct tr_tensor *out, struct tr_error *err) {
    static const char *names[5] = {"param", "m", "v", "lr", "step"};
    int rc = check_float(out, "adamw_step", "out", err);
    for (int i = 0; !rc && i < 5; i++) rc = check_tensor(&in[i], "adamw_step", names[i], err);
    if (rc) return rc;
    char d1[200];
    int ok = in[0].dtype == out->dtype && tr_cpu_same_shape(&in[0], out);
    for (int i = 1; ok && i < 3; i++) ok = in[i].dtype == TR_DTYPE_F32 && tr_cpu_same_shape(&in[i], out);
    for (int i = 3; ok && i < 5; i++) ok = in[i].dtype == TR_DTYPE_F32 && tr_tensor_numel(&in[i]) == 1;
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "adamw_step: param/out %s with m, v (f32, its shape), lr and step (one "
                            "f32 each) expected", tr_cpu_desc(out, d1, sizeof d1));
    const float *f = at->floats;
    return TR_CU_LAUNCH(c,
                        tr_cu_adamw(c->stream, out->dtype, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data,
                                    f[0], f[1], f[2], f[3], out->data, tr_tensor_numel(out), c->flag, err));
}

/* tr_k_adamw_update (TR_CUDA_OP_ADAMW_UPDATE, cuda_entry.h): in[0..5] param, m, v, grad,
 * lr, step, in[6..7] m_out, v_out; out param_out. */
static int run_adamw_update(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                            struct tr_tensor *out, struct tr_error *err) {
    static const char kn[] = "adamw_update";
    static const char *names[8] = {"param", "m", "v", "grad", "lr", "step", "m_out", "v_out"};
    if (n_in != 8) return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs, 8 expected", kn, n_in);
    int rc = check_float(out, kn, "param_out", err);
    for (int i = 0; !rc && i < 8; i++) rc = check_tensor(&in[i], kn, names[i], err);
    if (rc) return rc;
    char d1[200];
    int ok = in[0].dtype == out->dtype && tr_cpu_same_shape(&in[0], out) && tr_cpu_same_shape(&in[3], out) &&
             (in[3].dtype == out->dtype || in[3].dtype == TR_DTYPE_F32);
    static const int moments[4] = {1, 2, 6, 7}; /* m, v, m_out, v_out */
    for (int i = 0; ok && i < 4; i++)
        ok = in[moments[i]].dtype == TR_DTYPE_F32 && tr_cpu_same_shape(&in[moments[i]], out);
    for (int i = 4; ok && i < 6; i++) ok = in[i].dtype == TR_DTYPE_F32 && tr_tensor_numel(&in[i]) == 1;
    if (!ok)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: param/param_out %s with grad (its shape; f32 or its dtype), m, v, "
                            "m_out, v_out (f32, its shape), lr and step (one f32 each) expected", kn,
                            tr_cpu_desc(out, d1, sizeof d1));
    const float *f = at->floats;
    return TR_CU_LAUNCH(c, tr_cu_adamw_update(c->stream, out->dtype, in[0].data, in[1].data, in[2].data, in[3].data,
                                              in[3].dtype == TR_DTYPE_F32, in[4].data, in[5].data, f[0], f[1], f[2],
                                              f[3], out->data, in[6].data, in[7].data, tr_tensor_numel(out), c->flag,
                                              err));
}

/* ---- the training ops ---- */

static int run_train(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                     struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const int64_t *a = at->ints;
    char d1[200], d2[200];
    int rc = check_tensor(out, kn, "out", err);
    for (int i = 0; !rc && i < n_in; i++) rc = check_tensor(&in[i], kn, "input", err);
    if (rc) return rc;
    switch (op) {
    case TR_OP_UNARY_GRAD:
    case TR_OP_SOFTMAX_GRAD:
    case TR_OP_LAYER_NORM_GRAD: {
        /* LAYER_NORM_GRAD with 2 inputs is (x, dy) without gamma: tr_k_layer_norm_grad's NULL */
        const struct tr_tensor *x = &in[0], *dy = &in[op == TR_OP_LAYER_NORM_GRAD ? n_in - 1 : 1];
        if ((rc = check_float(x, kn, "x", err)) != TR_OK) return rc;
        if ((rc = same_dtype_shape(x, out, kn, err)) != TR_OK || (rc = same_dtype_shape(dy, out, kn, err)) != TR_OK)
            return rc;
        int64_t n = last_dim(x), rows = n ? tr_tensor_numel(x) / n : 0;
        if (op == TR_OP_UNARY_GRAD) {
            if (!tr_op_is_elementwise_unary((int)a[0]))
                return tr_error_set(err, TR_ERR_INVALID, "unary_grad: ints[0]=%lld is not a unary op", (long long)a[0]);
            return TR_CU_LAUNCH(c, tr_cu_unary_grad(c->stream, (int)a[0], x->dtype, x->data, dy->data, out->data,
                                                    tr_tensor_numel(x), (int)a[1], at->floats[0], err));
        }
        if (op == TR_OP_SOFTMAX_GRAD)
            return TR_CU_LAUNCH(c, tr_cu_softmax_grad(c->stream, x->dtype, x->data, dy->data, out->data, rows, n, err));
        const struct tr_tensor *g = n_in == 3 ? &in[1] : NULL;
        if (g && (!is_float(g->dtype) || tr_tensor_numel(g) != n))
            return tr_error_set(err, TR_ERR_SHAPE, "layer_norm_grad: gamma %s should have %lld elements",
                                tr_cpu_desc(g, d1, sizeof d1), (long long)n);
        return TR_CU_LAUNCH(c, tr_cu_layer_norm_grad(c->stream, x->dtype, x->data, g ? g->data : NULL, g ? g->dtype : 0,
                                                     dy->data, out->data, rows, n, at->floats[0], err));
    }
    case TR_OP_LAYER_NORM_GRAD_GAMMA: {
        const struct tr_tensor *x = &in[0], *dy = &in[1];
        if ((rc = check_float(x, kn, "x", err)) != TR_OK || (rc = same_dtype_shape(x, dy, kn, err)) != TR_OK) return rc;
        int64_t n = last_dim(x), rows = n ? tr_tensor_numel(x) / n : 0;
        if (!is_float(out->dtype) || tr_tensor_numel(out) != n)
            return tr_error_set(err, TR_ERR_SHAPE, "layer_norm_grad_gamma: out %s should have %lld elements",
                                tr_cpu_desc(out, d1, sizeof d1), (long long)n);
        /* scratch: the row statistics, then the column reduction's partials */
        struct tr_cuda_colsum_plan cp;
        const size_t sb = ((size_t)rows * 2 * sizeof(float) + 255) / 256 * 256;
        char *stats = NULL;
        if (tr_cuda_colsum_plan(1, rows, n, c->sms, &cp) != 0) cp.scratch_bytes = 0; /* refused at the launch */
        if ((rc = tr_cuda_scratch(c, sb + cp.scratch_bytes + 16, (void **)&stats, err)) != TR_OK) return rc;
        return TR_CU_LAUNCH(c, tr_cu_layer_norm_grad_gamma(c->stream, x->dtype, x->data, dy->data, out->data,
                                                           out->dtype, rows, n, at->floats[0], (float *)stats, c->sms,
                                                           (float *)(stats + sb), err));
    }
    case TR_OP_EMBEDDING_GRAD: {
        const struct tr_tensor *ids = &in[0], *dy = &in[1];
        if ((rc = check_float(dy, kn, "dy", err)) != TR_OK) return rc;
        int64_t V = out->ndim == 2 ? out->shape[0] : -1, D = out->ndim == 2 ? out->shape[1] : -1;
        if (V != a[0] || out->dtype != dy->dtype || (ids->dtype != TR_DTYPE_I32 && ids->dtype != TR_DTYPE_I64) ||
            last_dim(dy) != D || tr_tensor_numel(dy) != tr_tensor_numel(ids) * D)
            return tr_error_set(err, TR_ERR_SHAPE, "embedding_grad: ids %s, dy %s do not give dtable (V=%lld, D) of dy's "
                                "dtype", tr_cpu_desc(ids, d1, sizeof d1), tr_cpu_desc(dy, d2, sizeof d2),
                                (long long)a[0]);
        void *acc = NULL;
        if (out->dtype != TR_DTYPE_F32 &&
            (rc = tr_cuda_scratch(c, (size_t)(V * D) * sizeof(float) + 16, &acc, err)) != TR_OK)
            return rc;
        if (a[1] && (a[1] != 1 || a[2] < 0 || a[2] >= V))
            return tr_error_set(err, TR_ERR_INVALID, "embedding_grad: padding row ints[1]=%lld ints[2]=%lld, expected "
                                "a row below V=%lld", (long long)a[1], (long long)a[2], (long long)V);
        rc = TR_CU_LAUNCH(c, tr_cu_embedding_grad(c->stream, out->dtype, ids->data, ids->dtype, dy->data, out->data,
                                                  tr_tensor_numel(ids), D, V, acc, c->flag, err));
        if (!rc && a[1]) { /* the padding row gets no gradient (not at bind: a dry run queues nothing) */
            const size_t row = (size_t)D * tr_dtype_size((enum tr_dtype)out->dtype);
            rc = TR_CU_LAUNCH(c, TR_CU_CHECK(cudaMemsetAsync((char *)out->data + (size_t)a[2] * row, 0, row, c->stream),
                                             "embedding_grad: the padding row", err));
        }
        return rc;
    }
    case TR_OP_CROSS_ENTROPY_GRAD: {
        const struct tr_tensor *x = &in[0], *lab = &in[1], *dl = &in[2];
        if ((rc = check_float(x, kn, "logits", err)) != TR_OK || (rc = check_float(dl, kn, "dloss", err)) != TR_OK ||
            (rc = same_dtype_shape(x, out, kn, err)) != TR_OK)
            return rc;
        if (x->ndim != 2 || lab->ndim != 1 || lab->shape[0] != x->shape[0] || tr_tensor_numel(dl) != 1 ||
            (lab->dtype != TR_DTYPE_I32 && lab->dtype != TR_DTYPE_I64))
            return tr_error_set(err, TR_ERR_SHAPE, "cross_entropy_grad: logits %s (N,C), labels %s (N) i32/i64, dloss "
                                "one element", tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(lab, d2, sizeof d2));
        void *scr = NULL;
        if ((rc = tr_cuda_scratch(c, 16, &scr, err)) != TR_OK) return rc;
        return TR_CU_LAUNCH(c, tr_cu_cross_entropy_grad(c->stream, x->dtype, x->data, lab->data, lab->dtype, dl->data,
                                                        dl->dtype, x->shape[0], x->shape[1], a[1] != 0, (long long)a[0],
                                                        scr, out->data, c->flag, err));
    }
    case TR_OP_MAX_GRAD: {
        const struct tr_tensor *x = &in[0], *dy = &in[1];
        if ((rc = check_float(x, kn, "x", err)) != TR_OK || (rc = same_dtype_shape(x, out, kn, err)) != TR_OK) return rc;
        int ax = tr_cpu_axis(a[0], x->ndim);
        if (ax < 0 || dy->dtype != x->dtype || tr_tensor_numel(dy) * x->shape[ax] != tr_tensor_numel(x))
            return tr_error_set(err, TR_ERR_SHAPE, "max_grad: dy %s does not fit x %s reduced over axis %lld",
                                tr_cpu_desc(dy, d1, sizeof d1), tr_cpu_desc(x, d2, sizeof d2), (long long)a[0]);
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < ax; i++) outer *= x->shape[i];
        for (int i = ax + 1; i < x->ndim; i++) inner *= x->shape[i];
        return TR_CU_LAUNCH(
            c, tr_cu_max_grad(c->stream, x->dtype, x->data, dy->data, out->data, outer, x->shape[ax], inner, err));
    }
    case TR_OP_SLICE_GRAD: {
        const struct tr_tensor *dy = &in[0];
        int ax = tr_cpu_axis(a[0], out->ndim);
        int ok = ax >= 0 && dy->ndim == out->ndim && dy->dtype == out->dtype && out->shape[ax] == a[4] && a[3] > 0 &&
                 a[1] >= 0;
        for (int i = 0; ok && i < out->ndim; i++) ok = i == ax || dy->shape[i] == out->shape[i];
        if (ok && dy->shape[ax] > 0) ok = a[1] + (dy->shape[ax] - 1) * a[3] < out->shape[ax];
        if (!ok)
            return tr_error_set(err, TR_ERR_SHAPE, "slice_grad: dy %s does not fit dx %s at axis %lld start %lld step %lld",
                                tr_cpu_desc(dy, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2), (long long)a[0],
                                (long long)a[1], (long long)a[3]);
        if ((rc = TR_CU_LAUNCH(c, tr_cu_fill_zero(c->stream, out->data, tr_tensor_nbytes(out), err))) != TR_OK)
            return rc;
        int64_t ds[TR_MAX_DIMS], os[TR_MAX_DIMS];
        contiguous_strides(dy->ndim, dy->shape, ds);
        contiguous_strides(out->ndim, out->shape, os);
        size_t es = tr_dtype_size((enum tr_dtype)out->dtype);
        char *base = (char *)out->data + (size_t)(a[1] * os[ax]) * es;
        os[ax] *= a[3];
        return strided_copy(c, dy, dy->data, ds, base, os, dy->ndim, dy->shape, err);
    }
    case TR_OP_MSE: {
        const struct tr_tensor *p = &in[0], *t = &in[1];
        if ((rc = check_float(p, kn, "pred", err)) != TR_OK || (rc = same_dtype_shape(p, t, kn, err)) != TR_OK) return rc;
        if (out->dtype != TR_DTYPE_F32 || tr_tensor_numel(out) != 1)
            return tr_error_set(err, TR_ERR_SHAPE, "mse: out %s should be one f32", tr_cpu_desc(out, d1, sizeof d1));
        return TR_CU_LAUNCH(c, tr_cu_mse(c->stream, p->dtype, p->data, t->data, tr_tensor_numel(p), out->data, err));
    }
    default: return tr_error_set(err, TR_ERR_INTERNAL, "cuda training op %s", kn);
    }
}

/* ---- the decoder LLMs' ops ---- */

static int run_rms_norm(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *in,
                        struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const struct tr_tensor *x = &in[0];
    const struct tr_tensor *w = op == TR_OP_RMS_NORM_GRAD_W ? NULL : &in[1];
    const struct tr_tensor *dy = op == TR_OP_RMS_NORM ? NULL : op == TR_OP_RMS_NORM_GRAD ? &in[2] : &in[1];
    int rc = check_float(x, kn, "x", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (!rc && w) rc = check_float(w, kn, "w", err);
    if (!rc && dy) rc = check_float(dy, kn, "dy", err);
    if (!rc && dy) rc = same_dtype_shape(x, dy, kn, err);
    if (rc) return rc;
    char d1[200];
    if (x->ndim < 1) return tr_error_set(err, TR_ERR_SHAPE, "%s: x is 0-d (it normalises the last axis)", kn);
    int64_t n = last_dim(x), rows = n ? tr_tensor_numel(x) / n : 0;
    if (w && tr_tensor_numel(w) != n)
        return tr_error_set(err, TR_ERR_SHAPE, "%s: w %s should have %lld elements", kn, tr_cpu_desc(w, d1, sizeof d1),
                            (long long)n);
    if (op == TR_OP_RMS_NORM_GRAD_W ? tr_tensor_numel(out) != n : (rc = same_dtype_shape(x, out, kn, err)) != TR_OK)
        return rc ? rc : tr_error_set(err, TR_ERR_SHAPE, "%s: dw %s should have %lld elements", kn,
                                      tr_cpu_desc(out, d1, sizeof d1), (long long)n);
    float eps = at->floats[0];
    if (!(eps >= 0.0f) || !isfinite(eps) || (at->ints[0] != 0 && at->ints[0] != 1))
        return tr_error_set(err, TR_ERR_INVALID, "%s: eps %g (finite, >= 0) or add_one ints[0]=%lld (0 or 1) out of range",
                            kn, (double)eps, (long long)at->ints[0]);
    /* RMS_NORM_GRAD_W's scratch: rstd per row, then the column reduction's partials */
    char *rstd = NULL;
    const size_t rb = ((size_t)rows * sizeof(float) + 255) / 256 * 256;
    struct tr_cuda_colsum_plan cp = {0};
    if (op == TR_OP_RMS_NORM_GRAD_W) {
        if (tr_cuda_colsum_plan(1, rows, n, c->sms, &cp) != 0) cp.scratch_bytes = 0; /* refused at the launch */
        if ((rc = tr_cuda_scratch(c, rb + cp.scratch_bytes + 16, (void **)&rstd, err)) != TR_OK) return rc;
    }
    return TR_CU_LAUNCH(c, tr_cu_rms_norm(c->stream, op, x->dtype, x->data, w ? w->data : NULL, w ? w->dtype : 0,
                                          dy ? dy->data : NULL, out->data, out->dtype, rows, n, eps, (int)at->ints[0],
                                          (float *)rstd, c->sms, rstd ? (float *)(rstd + rb) : NULL, err));
}

static int run_rope(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *x,
                    const struct tr_tensor *pos, struct tr_tensor *out, struct tr_error *err) {
    int rc = check_float(x, "rope", "x", err);
    if (!rc) rc = check_tensor(pos, "rope", "pos", err);
    if (!rc) rc = check_float(out, "rope", "out", err);
    if (!rc) rc = same_dtype_shape(x, out, "rope", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->ndim != 4 || (pos->dtype != TR_DTYPE_I32 && pos->dtype != TR_DTYPE_I64) ||
        !((pos->ndim == 1 && pos->shape[0] == x->shape[2]) ||
          (pos->ndim == 2 && pos->shape[0] == x->shape[0] && pos->shape[1] == x->shape[2])))
        return tr_error_set(err, TR_ERR_SHAPE, "rope: x %s should be (B,H,T,D) and pos %s (T) or (B,T) of i32/i64",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(pos, d2, sizeof d2));
    int64_t D = x->shape[3], R = at->ints[0] ? at->ints[0] : D;
    if (R < 0 || R > D || R % 2 || (at->ints[1] != 0 && at->ints[1] != 1))
        return tr_error_set(err, TR_ERR_INVALID, "rope: rotated dims ints[0]=%lld (even, at most D=%lld) or inverse "
                            "ints[1]=%lld (0 or 1) out of range", (long long)at->ints[0], (long long)D,
                            (long long)at->ints[1]);
    return TR_CU_LAUNCH(c,
                        tr_cu_rope(c->stream, x->dtype, x->data, pos->data, pos->dtype, pos->ndim == 2, out->data,
                                   x->shape[0], x->shape[1], x->shape[2], D, R, at->floats[0], (int)at->ints[1], err));
}

/* UPDATE_SLICE: the checks of the cpu kernel (update_slice.c); the start stays on the
 * device and is checked by the kernel (flag), so a bad one shows at tr_kernels_sync. */
static int run_update_slice(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *in,
                            struct tr_tensor *out, struct tr_error *err) {
    const struct tr_tensor *x = &in[0], *u = &in[1], *start = &in[2];
    int ax;
    int rc = tr_cpu_update_slice_args(TR_DEVICE_CUDA, x, u, start, (int)at->ints[0], out, &ax, err);
    if (rc != TR_OK) return rc;
    int64_t outer = tr_shape_numel(ax, x->shape), inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1);
    return TR_CU_LAUNCH(c, tr_cu_update_slice(c->stream, tr_dtype_size((enum tr_dtype)x->dtype), x->data, u->data,
                                              start->data, out->data, outer, x->shape[ax], u->shape[ax], inner,
                                              c->flag, err));
}

/* ---- Stable Diffusion's ops ---- */

static int run_group_norm_grad(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *in,
                               struct tr_tensor *out, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    const struct tr_tensor *x = &in[0], *g = op == TR_OP_GROUP_NORM_GRAD ? &in[1] : NULL,
                           *dy = op == TR_OP_GROUP_NORM_GRAD ? &in[2] : &in[1];
    int rc = check_float(x, kn, "x", err);
    if (!rc && g) rc = check_float(g, kn, "gamma", err);
    if (!rc) rc = check_float(dy, kn, "dy", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (!rc) rc = same_dtype_shape(x, dy, kn, err);
    if (!rc && g) rc = same_dtype_shape(x, out, kn, err);
    if (rc) return rc;
    char d1[200];
    const int64_t G = at->ints[0], C = x->ndim == 4 ? x->shape[3] : 0;
    if (x->ndim != 4 || G < 1 || C % G != 0 || (g && (tr_tensor_numel(g) != C ||
                                                      (g->dtype != x->dtype && g->dtype != TR_DTYPE_F32))) ||
        (!g && tr_tensor_numel(out) != C))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s (N,H,W,C) with %lld groups; gamma [C] of x's dtype or f32; "
                            "dgamma [C]", kn, tr_cpu_desc(x, d1, sizeof d1), (long long)G);
    const int64_t N = x->shape[0], HW = x->shape[1] * x->shape[2];
    void *stats = NULL;
    if (!g && (rc = tr_cuda_scratch(c, (size_t)(2 * N * G) * sizeof(float) + 16, &stats, err)) != TR_OK) return rc;
    return TR_CU_LAUNCH(c, tr_cu_group_norm_grad(c->stream, op, x->dtype, x->data, g ? g->data : NULL,
                                                 g ? g->dtype : 0, dy->data, out->data, out->dtype, stats, N, HW, C, G,
                                                 at->floats[0], err));
}

static int run_group_norm(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *in,
                          struct tr_tensor *out, struct tr_error *err) {
    const char *kn = "group_norm";
    const struct tr_tensor *x = &in[0], *g = &in[1], *b = &in[2];
    int rc = check_float(x, kn, "x", err);
    if (!rc) rc = check_float(g, kn, "gamma", err);
    if (!rc) rc = check_float(b, kn, "beta", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (!rc) rc = same_dtype_shape(x, out, kn, err);
    if (rc) return rc;
    char d1[200];
    const int64_t G = at->ints[0];
    if (x->ndim != 4 || G < 1 || x->shape[3] % G != 0 || tr_tensor_numel(g) != x->shape[3] ||
        tr_tensor_numel(b) != x->shape[3] || (g->dtype != x->dtype && g->dtype != TR_DTYPE_F32) ||
        (b->dtype != x->dtype && b->dtype != TR_DTYPE_F32))
        return tr_error_set(err, TR_ERR_SHAPE, "group_norm: x %s (N,H,W,C) with %lld groups, gamma and beta [C] of "
                            "x's dtype or f32", tr_cpu_desc(x, d1, sizeof d1), (long long)G);
    return TR_CU_LAUNCH(c, tr_cu_group_norm(c->stream, x->dtype, x->data, g->data, g->dtype, b->data, b->dtype,
                                            out->data, x->shape[0], x->shape[1] * x->shape[2], x->shape[3], G,
                                            at->floats[0], at->ints[1] != 0, err));
}

static int run_timestep_embedding(struct tr_cuda_ctx *c, const struct tr_attrs *at, const struct tr_tensor *t,
                                  struct tr_tensor *out, struct tr_error *err) {
    const char *kn = "timestep_embedding";
    int rc = check_float(t, kn, "t", err);
    if (!rc) rc = check_float(out, kn, "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    const int64_t D = at->ints[0];
    const double shift = at->floats[0], period = at->floats[1] == 0.0f ? 10000.0 : (double)at->floats[1];
    if (t->ndim != 1 || out->ndim != 2 || out->shape[0] != t->shape[0] || out->shape[1] != D || D < 2 || D % 2 ||
        out->dtype != t->dtype || !(shift < (double)(D / 2)) || !(period > 0.0))
        return tr_error_set(err, TR_ERR_SHAPE, "timestep_embedding: t %s [N] and out %s [N,%lld] of its dtype (dim "
                            "even, shift below dim/2, max_period > 0)", tr_cpu_desc(t, d1, sizeof d1),
                            tr_cpu_desc(out, d2, sizeof d2), (long long)D);
    return TR_CU_LAUNCH(c, tr_cu_timestep_embedding(c->stream, t->dtype, t->data, out->data, t->shape[0], D,
                                                    at->ints[1] != 0, shift, period, err));
}

int tr_cuda_run(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                struct tr_tensor *out, struct tr_error *err) {
    struct tr_cuda_ctx *c = k->cuda;
    if (!c) return tr_error_set(err, TR_ERR_INTERNAL, "%s: cuda context without its CUDA state", tr_op_name(op));
    if (op == TR_OP_MATMUL)
        return tr_cuda_matmul(k, &in[0], &in[1], out, at->ints[0] != 0, at->ints[1] != 0, at->floats[0], NULL,
                              TR_ACT_NONE, err);
    k->stats.calls++;
    if (tr_op_is_elementwise_binary(op)) return run_binary(c, op, &in[0], &in[1], out, err);
    if (tr_op_is_elementwise_unary(op)) return run_unary(c, op, at, &in[0], out, err);
    switch (op) {
    case TR_OP_SOFTMAX:
    case TR_OP_LAYER_NORM: return run_rows(c, op, at, n_in, in, out, err);
    case TR_OP_EMBEDDING: return run_embedding(c, &in[0], &in[1], out, err);
    case TR_OP_RESHAPE:
    case TR_OP_TRANSPOSE:
    case TR_OP_SLICE:
    case TR_OP_CONCAT:
    case TR_OP_BROADCAST: return run_layout(c, op, at, n_in, in, out, err);
    case TR_OP_SUM:
    case TR_OP_MEAN:
    case TR_OP_MAX: return run_reduce(c, op, at, &in[0], out, err);
    case TR_OP_CAST: return run_cast(c, &in[0], out, err);
    case TR_OP_ATTENTION: return tr_cuda_run_attention(k, c, at, n_in, in, out, NULL, err);
    case TR_OP_ATTENTION_LSE: return tr_cuda_run_attention(k, c, at, n_in, in, NULL, out, err);
    case TR_CUDA_OP_ATTENTION_FWD:
        if (n_in != 5) return tr_error_set(err, TR_ERR_INVALID, "attention_lse: %d inputs given, 5 expected", n_in);
        return tr_cuda_run_attention(k, c, at, at->ints[7] & 1 ? 4 : 3, in, out, (struct tr_tensor *)&in[4], err);
    case TR_OP_ATTENTION_GRAD: return tr_cuda_run_attention_grad(k, c, at, n_in, in, out, err);
    case TR_CUDA_OP_ATTENTION_BACKWARD: return tr_cuda_run_attention_backward(k, c, at, n_in, in, err);
    case TR_CUDA_OP_ATTENTION_REL_BACKWARD: return tr_cuda_run_attention_rel_backward(c, at, n_in, in, err);
    case TR_CUDA_OP_ATTENTION_REL_FWD:
        if (n_in != 6) return tr_error_set(err, TR_ERR_INVALID, "attention_rel: %d inputs given, 6 expected", n_in);
        return tr_cuda_run_attention_rel(c, at, 5, in, out, (struct tr_tensor *)&in[5], err);
    case TR_OP_RMS_NORM:
    case TR_OP_RMS_NORM_GRAD:
    case TR_OP_RMS_NORM_GRAD_W: return run_rms_norm(c, op, at, in, out, err);
    case TR_OP_ROPE: return run_rope(c, at, &in[0], &in[1], out, err);
    case TR_OP_UPDATE_SLICE: return run_update_slice(c, at, in, out, err);
    case TR_OP_CROSS_ENTROPY: return run_cross_entropy(c, at, &in[0], &in[1], out, err);
    case TR_OP_ADAMW_STEP: return run_adamw(c, at, in, out, err);
    case TR_CUDA_OP_ADAMW_UPDATE: return run_adamw_update(c, at, n_in, in, out, err);
    case TR_OP_UNARY_GRAD:
    case TR_OP_SOFTMAX_GRAD:
    case TR_OP_LAYER_NORM_GRAD:
    case TR_OP_LAYER_NORM_GRAD_GAMMA:
    case TR_OP_EMBEDDING_GRAD:
    case TR_OP_CROSS_ENTROPY_GRAD:
    case TR_OP_MAX_GRAD:
    case TR_OP_SLICE_GRAD:
    case TR_OP_MSE: return run_train(c, op, at, n_in, in, out, err);
    case TR_OP_CONV2D:
    case TR_OP_CONV2D_GRAD_INPUT:
    case TR_OP_CONV2D_GRAD_WEIGHT: return tr_cuda_run_conv2d(k, c, op, at, n_in, in, out, err);
    case TR_OP_GROUP_NORM: return run_group_norm(c, at, in, out, err);
    case TR_OP_GROUP_NORM_GRAD:
    case TR_OP_GROUP_NORM_GRAD_GAMMA: return run_group_norm_grad(c, op, at, in, out, err);
    case TR_OP_TIMESTEP_EMBEDDING: return run_timestep_embedding(c, at, &in[0], out, err);
    case TR_OP_ATTENTION_REL: return tr_cuda_run_attention_rel(c, at, n_in, in, out, NULL, err);
    case TR_OP_ATTENTION_REL_LSE: return tr_cuda_run_attention_rel(c, at, n_in, in, NULL, out, err);
    case TR_OP_ATTENTION_REL_GRAD: return tr_cuda_run_attention_rel_grad(c, at, n_in, in, out, err);
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START: case TR_OP_ALLREDUCE_WAIT:
        return tr_cuda_run_allreduce(c, op, at, &in[0], out, err);
    default:
        k->stats.calls--;
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "tr_kernels_run: op %s has no cuda kernel yet (issue #6)",
                            tr_op_name(op));
    }
}
