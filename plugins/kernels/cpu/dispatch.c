/* tr_kernels_run: one graph op on bound tensors, mapped to its kernel with the node's
 * attributes read as ops.h defines them.
 *
 * The mapping is split so that tr_kernels_bind (bind.c) goes through the very same
 * checks: tr_cpu_resolve validates and picks the kernel's entry, which run invokes at
 * once and a bound call keeps. Each entry exists in two forms, on argument arrays
 * (invoke_*) and on a bound call (bound_*), the second a wrapper of the first, so both
 * paths run the same kernel with the same arguments. */
#include "cpu_internal.h"

static const struct tr_attrs no_attrs; /* all zero: the defaults where attrs is NULL */

static int arity_error(int op, int n_in, int want, struct tr_error *err) {
    return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", tr_op_name(op), n_in, want);
}

/* ---- the kernels' entries, on resolved attributes ---- */

static int invoke_binary(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                         struct tr_tensor *out, struct tr_error *err) {
    (void)at, (void)n_in;
    return tr_k_binary(k, op, &in[0], &in[1], out, err);
}

static int invoke_unary(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                        struct tr_tensor *out, struct tr_error *err) {
    (void)n_in;
    return tr_k_unary(k, op, at, &in[0], out, err);
}

static int invoke_matmul(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                         struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    return tr_k_matmul(k, &in[0], &in[1], out, at->ints[0] != 0, at->ints[1] != 0, at->floats[0], NULL, TR_ACT_NONE,
                       err);
}

static int invoke_softmax(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                          struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)at, (void)n_in;
    return tr_k_softmax(k, &in[0], out, err);
}

static int invoke_layer_norm(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    return tr_k_layer_norm(k, &in[0], &in[1], &in[2], at->floats[0], out, err);
}

static int invoke_embedding(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                            const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)at, (void)n_in;
    return tr_k_embedding(k, &in[0], &in[1], out, err);
}

static int reshape_check(const struct tr_tensor *x, const struct tr_tensor *out, struct tr_error *err) {
    int st = tr_cpu_check_tensor(x, "reshape", "x", err);
    if (!st) st = tr_cpu_check_tensor(out, "reshape", "out", err);
    if (st) return st;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || tr_tensor_numel(x) != tr_tensor_numel(out))
        return tr_error_set(err, TR_ERR_SHAPE, "reshape: x %s and out %s should have the same dtype and element count",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    return TR_OK;
}

static int invoke_reshape(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                          struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)at, (void)n_in;
    int st = tr_cpu_check_ctx(k, "reshape", err);
    if (!st) st = reshape_check(&in[0], out, err);
    if (st) return st;
    if (out->data != in[0].data) memcpy(out->data, in[0].data, tr_tensor_nbytes(&in[0]));
    return TR_OK;
}

static int invoke_transpose(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                            const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    return tr_k_transpose(k, &in[0], at->ints, out, err);
}

static int invoke_slice(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                        struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    return tr_k_slice(k, &in[0], (int)at->ints[0], at->ints[1], at->ints[3], out, err);
}

static int invoke_concat(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                         struct tr_tensor *out, struct tr_error *err) {
    (void)op;
    return tr_k_concat(k, n_in, in, (int)at->ints[0], out, err);
}

static int invoke_reduce(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                         struct tr_tensor *out, struct tr_error *err) {
    (void)n_in;
    return tr_k_reduce(k, op, &in[0], (int)at->ints[0], out, err);
}

static int invoke_cast(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                       struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)at, (void)n_in;
    return tr_k_cast(k, &in[0], out, err);
}

static int invoke_attention(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                            const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op;
    return tr_k_attention(k, &in[0], &in[1], &in[2], n_in == 4 ? &in[3] : NULL, at->floats[0], at->ints[0] != 0,
                          (int)at->ints[1], out, err);
}

/* The bound forms: the call's tensors handed to the same entry. The call is const to its
 * runner but its out tensor is only read (the kernels write through out->data). */
#define TR_BOUND_(name)                                                                                    \
    static int bound_##name(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) { \
        return invoke_##name(k, c->op, &c->attrs, c->n_in, c->in, (struct tr_tensor *)&c->out, err);      \
    }
TR_BOUND_(binary)
TR_BOUND_(unary)
TR_BOUND_(softmax)
TR_BOUND_(layer_norm)
TR_BOUND_(embedding)
TR_BOUND_(transpose)
TR_BOUND_(slice)
TR_BOUND_(concat)
TR_BOUND_(reduce)
TR_BOUND_(cast)
TR_BOUND_(attention)
#undef TR_BOUND_

/* ---- RESHAPE bound: a copy, or nothing when in and out alias ---- */

static int bound_reshape_copy(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)err;
    k->stats.calls++;
    memcpy(c->out.data, c->in[0].data, tr_tensor_nbytes(&c->out));
    return TR_OK;
}

static int bound_reshape_alias(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    (void)c, (void)err;
    k->stats.calls++;
    return TR_OK;
}

int tr_cpu_reshape_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    uint64_t calls = k->stats.calls; /* the context check of run, without counting a call */
    int st = tr_cpu_check_ctx(k, "reshape", err);
    k->stats.calls = calls;
    if (!st) st = reshape_check(&c->in[0], &c->out, err);
    if (st) return st;
    c->fn = c->out.data == c->in[0].data || tr_tensor_nbytes(&c->out) == 0 ? bound_reshape_alias : bound_reshape_copy;
    return TR_OK;
}

/* ---- resolution: the checks of dispatch and the defaults of ops.h ---- */

static int resolve_slice(struct tr_attrs *at, const struct tr_tensor *x, const struct tr_tensor *out,
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
    at->ints[0] = ax;
    at->ints[1] = start;
    at->ints[3] = step;
    return TR_OK;
}

static int resolve_reduce(int op, const struct tr_attrs *at, const struct tr_tensor *x, const struct tr_tensor *out,
                          struct tr_error *err) {
    if (!x || !out) return tr_error_set(err, TR_ERR_INVALID, "%s: x or out is NULL", tr_op_name(op));
    int keep = at->ints[1] != 0;
    if (out->ndim != x->ndim - (keep ? 0 : 1))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: out has %d dimensions; x has %d and keepdims is %d", tr_op_name(op),
                            out->ndim, x->ndim, keep);
    return TR_OK;
}

static int resolve_attention(struct tr_attrs *at, int n_in, const struct tr_tensor *in, struct tr_error *err) {
    if (n_in != 3 && n_in != 4)
        return tr_error_set(err, TR_ERR_INVALID, "attention: %d inputs given, 3 (q, k, v) or 4 (with mask) expected", n_in);
    /* 0 is no meaningful scale: it stands for the usual 1/sqrt(D) */
    if (at->floats[0] == 0.0f && in[0].ndim == 4 && in[0].shape[3] > 0)
        at->floats[0] = 1.0f / sqrtf((float)in[0].shape[3]);
    if (at->ints[1] < 0 || at->ints[1] > INT32_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "attention: window ints[1]=%lld out of range", (long long)at->ints[1]);
    return TR_OK;
}

#define TR_PICK_(name) (r->invoke = invoke_##name, r->bound = bound_##name, TR_OK)

int tr_cpu_resolve(struct tr_kernels *k, const char *fn, int op, const struct tr_attrs *attrs, int n_in,
                   const struct tr_tensor *in, const struct tr_tensor *out, struct tr_cpu_op *r,
                   struct tr_error *err) {
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "%s: kernels context is NULL", fn);
    if (op < 0 || op >= TR_OP_COUNT) return tr_error_set(err, TR_ERR_INVALID, "%s: unknown op %d", fn, op);
    if (op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %s is not runnable (its data is bound, not computed)", fn,
                            tr_op_name(op));
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "%s: out is NULL", tr_op_name(op));
    if (n_in < 0 || (n_in > 0 && !in)) return tr_error_set(err, TR_ERR_INVALID, "%s: inputs are NULL", tr_op_name(op));
    int want = tr_op_arity(op);
    if (want >= 0 && n_in != want) return arity_error(op, n_in, want, err);
    r->attrs = attrs ? *attrs : no_attrs;
    struct tr_attrs *at = &r->attrs;
    r->invoke = NULL;
    r->bound = NULL;

    if (tr_op_is_elementwise_binary(op)) return TR_PICK_(binary);
    if (tr_op_is_elementwise_unary(op)) {
        if (op == TR_OP_SCALE && !attrs)
            return tr_error_set(err, TR_ERR_INVALID, "scale: attrs are NULL (floats[0]=alpha, floats[1]=beta)");
        return TR_PICK_(unary);
    }
    int st;
    switch (op) {
    case TR_OP_MATMUL:
        /* alpha 0 is an attribute left unset: ops.h's default is 1 */
        if (at->floats[0] == 0.0f) at->floats[0] = 1.0f;
        r->invoke = invoke_matmul; /* bound: prepared by bind */
        return TR_OK;
    case TR_OP_SOFTMAX: return TR_PICK_(softmax);
    case TR_OP_LAYER_NORM: return TR_PICK_(layer_norm);
    case TR_OP_EMBEDDING: return TR_PICK_(embedding);
    case TR_OP_RESHAPE:
        r->invoke = invoke_reshape; /* bound: a copy or nothing, picked by bind */
        return TR_OK;
    case TR_OP_TRANSPOSE:
        if (at->n_ints != in[0].ndim)
            return tr_error_set(err, TR_ERR_INVALID, "transpose: %d perm entries (n_ints) for a %d-D input",
                                at->n_ints, in[0].ndim);
        return TR_PICK_(transpose);
    case TR_OP_SLICE:
        if ((st = resolve_slice(at, &in[0], out, err)) != TR_OK) return st;
        return TR_PICK_(slice);
    case TR_OP_CONCAT:
        if (n_in < 1) return tr_error_set(err, TR_ERR_INVALID, "concat: no inputs");
        return TR_PICK_(concat);
    case TR_OP_SUM:
    case TR_OP_MEAN:
    case TR_OP_MAX:
        if ((st = resolve_reduce(op, at, &in[0], out, err)) != TR_OK) return st;
        return TR_PICK_(reduce);
    case TR_OP_CAST:
        if (at->ints[0] != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "cast: target dtype ints[0]=%lld but out is %s", (long long)at->ints[0],
                                tr_dtype_name((enum tr_dtype)out->dtype));
        return TR_PICK_(cast);
    case TR_OP_ATTENTION:
        if ((st = resolve_attention(at, n_in, in, err)) != TR_OK) return st;
        return TR_PICK_(attention);
    default: return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: op %s has no cpu kernel", fn, tr_op_name(op));
    }
}
#undef TR_PICK_

int tr_kernels_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in, const struct tr_tensor *in,
                   struct tr_tensor *out, struct tr_error *err) {
    struct tr_cpu_op r;
    int st = tr_cpu_resolve(k, "tr_kernels_run", op, attrs, n_in, in, out, &r, err);
    if (st) return st;
    return r.invoke(k, op, &r.attrs, n_in, in, out, err);
}
