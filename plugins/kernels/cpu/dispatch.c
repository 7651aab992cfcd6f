/* tr_kernels_run: one graph op on bound tensors, mapped to its kernel with the node's
 * attributes read as ops.h defines them. */
#include "cpu_internal.h"

static const struct tr_attrs no_attrs; /* all zero: the defaults where attrs is NULL */

static int arity_error(int op, int n_in, int want, struct tr_error *err) {
    return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", tr_op_name(op), n_in, want);
}

static int reshape_copy(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_ctx(k, "reshape", err);
    if (!st) st = tr_cpu_check_tensor(x, "reshape", "x", err);
    if (!st) st = tr_cpu_check_tensor(out, "reshape", "out", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || tr_tensor_numel(x) != tr_tensor_numel(out))
        return tr_error_set(err, TR_ERR_SHAPE, "reshape: x %s and out %s should have the same dtype and element count",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    if (out->data != x->data) memcpy(out->data, x->data, tr_tensor_nbytes(x));
    return TR_OK;
}

static int run_slice(struct tr_kernels *k, const struct tr_attrs *at, const struct tr_tensor *x, struct tr_tensor *out,
                     struct tr_error *err) {
    if (!x) return tr_error_set(err, TR_ERR_INVALID, "slice: x is NULL");
    int ax = tr_cpu_axis(at->ints[0], x->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "slice: axis %lld out of range for %d dimensions",
                            (long long)at->ints[0], x->ndim);
    int64_t dim = x->shape[ax], start = at->ints[1], end = at->ints[2], step = at->ints[3];
    if (step < 1) return tr_error_set(err, TR_ERR_INVALID, "slice: step %lld (ints[3] must be > 0)", (long long)step);
    /* python-style bounds: negative counts from the end, past-the-end clamps */
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    int64_t cnt = end > start ? (end - start + step - 1) / step : 0;
    if (out && out->ndim == x->ndim && out->shape[ax] != cnt) {
        char d1[200], d2[200];
        return tr_error_set(err, TR_ERR_SHAPE, "slice: out %s should have %lld elements on axis %d (x %s, %lld:%lld:%lld)",
                            tr_cpu_desc(out, d1, sizeof d1), (long long)cnt, ax, tr_cpu_desc(x, d2, sizeof d2),
                            (long long)at->ints[1], (long long)at->ints[2], (long long)step);
    }
    return tr_k_slice(k, x, ax, start, step, out, err);
}

static int run_reduce(struct tr_kernels *k, int op, const struct tr_attrs *at, const struct tr_tensor *x,
                      struct tr_tensor *out, struct tr_error *err) {
    if (!x || !out) return tr_error_set(err, TR_ERR_INVALID, "%s: x or out is NULL", tr_op_name(op));
    int keep = at->ints[1] != 0;
    if (out->ndim != x->ndim - (keep ? 0 : 1))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out has %d dimensions; x has %d and keepdims is %d", tr_op_name(op),
                            out->ndim, x->ndim, keep);
    return tr_k_reduce(k, op, x, (int)at->ints[0], out, err);
}

static int run_attention(struct tr_kernels *k, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                         struct tr_tensor *out, struct tr_error *err) {
    if (n_in != 3 && n_in != 4)
        return tr_error_set(err, TR_ERR_INVALID, "attention: %d inputs given, 3 (q, k, v) or 4 (with mask) expected", n_in);
    float scale = at->floats[0];
    /* 0 is no meaningful scale: it stands for the usual 1/sqrt(D) */
    if (scale == 0.0f && in[0].ndim == 4 && in[0].shape[3] > 0) scale = 1.0f / sqrtf((float)in[0].shape[3]);
    if (at->ints[1] < 0 || at->ints[1] > INT32_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "attention: window ints[1]=%lld out of range", (long long)at->ints[1]);
    return tr_k_attention(k, &in[0], &in[1], &in[2], n_in == 4 ? &in[3] : NULL, scale, at->ints[0] != 0,
                          (int)at->ints[1], out, err);
}

int tr_kernels_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in, const struct tr_tensor *in,
                   struct tr_tensor *out, struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_run: kernels context is NULL");
    if (op < 0 || op >= TR_OP_COUNT) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_run: unknown op %d", op);
    if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST)
        return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_run: %s is not runnable (its data is bound, not computed)",
                            tr_op_name(op));
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "%s: out is NULL", tr_op_name(op));
    if (n_in < 0 || (n_in > 0 && !in)) return tr_error_set(err, TR_ERR_INVALID, "%s: inputs are NULL", tr_op_name(op));
    int want = tr_op_arity(op);
    if (want >= 0 && n_in != want) return arity_error(op, n_in, want, err);
    const struct tr_attrs *at = attrs ? attrs : &no_attrs;

    if (tr_op_is_elementwise_binary(op)) return tr_k_binary(k, op, &in[0], &in[1], out, err);
    if (tr_op_is_elementwise_unary(op)) {
        if (op == TR_OP_SCALE && !attrs)
            return tr_error_set(err, TR_ERR_INVALID, "scale: attrs are NULL (floats[0]=alpha, floats[1]=beta)");
        return tr_k_unary(k, op, at, &in[0], out, err);
    }
    switch (op) {
    case TR_OP_MATMUL: {
        /* alpha 0 is an attribute left unset: ops.h's default is 1 */
        float alpha = at->floats[0] == 0.0f ? 1.0f : at->floats[0];
        return tr_k_matmul(k, &in[0], &in[1], out, at->ints[0] != 0, at->ints[1] != 0, alpha, NULL, TR_ACT_NONE, err);
    }
    case TR_OP_SOFTMAX: return tr_k_softmax(k, &in[0], out, err);
    case TR_OP_LAYER_NORM: return tr_k_layer_norm(k, &in[0], &in[1], &in[2], at->floats[0], out, err);
    case TR_OP_EMBEDDING: return tr_k_embedding(k, &in[0], &in[1], out, err);
    case TR_OP_RESHAPE: return reshape_copy(k, &in[0], out, err);
    case TR_OP_TRANSPOSE:
        if (at->n_ints != in[0].ndim)
            return tr_error_set(err, TR_ERR_INVALID, "transpose: %d perm entries (n_ints) for a %d-D input",
                                at->n_ints, in[0].ndim);
        return tr_k_transpose(k, &in[0], at->ints, out, err);
    case TR_OP_SLICE: return run_slice(k, at, &in[0], out, err);
    case TR_OP_CONCAT:
        if (n_in < 1) return tr_error_set(err, TR_ERR_INVALID, "concat: no inputs");
        return tr_k_concat(k, n_in, in, (int)at->ints[0], out, err);
    case TR_OP_SUM:
    case TR_OP_MEAN:
    case TR_OP_MAX: return run_reduce(k, op, at, &in[0], out, err);
    case TR_OP_CAST:
        if (at->ints[0] != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "cast: target dtype ints[0]=%lld but out is %s", (long long)at->ints[0],
                                tr_dtype_name((enum tr_dtype)out->dtype));
        return tr_k_cast(k, &in[0], out, err);
    case TR_OP_ATTENTION: return run_attention(k, at, n_in, in, out, err);
    default: return tr_error_set(err, TR_ERR_UNSUPPORTED, "tr_kernels_run: op %s has no cpu kernel", tr_op_name(op));
    }
}
