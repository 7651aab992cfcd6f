/* tr_kernels_run: one graph op on bound tensors, mapped to its kernel with the node's
 * attributes read as ops.h defines them.
 *
 * The mapping is split so that tr_kernels_bind (bind.c) goes through the very same
 * checks: tr_cpu_resolve validates and names the kernel twice, as an entry on argument
 * arrays (invoke_*, which run calls at once) and as its binder (tr_cpu_*_bind, which
 * bind calls: the kernel's own checks on the same arguments, then its plan kept). */
#include "cpu_internal.h"
#include "optim_internal.h"

static const struct tr_attrs no_attrs; /* all zero: the defaults where attrs is NULL */

static int arity_error(int op, int n_in, int want, struct tr_error *err) {
    return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %d expected", tr_op_name(op), n_in, want);
}

/* ---- the kernels' entries, on resolved attributes ----
 * Each runs its kernel on the argument arrays: `call`, written with the entry's
 * parameters (k, op, at, n_in, in, out, err) in scope, what it does not read unused. */
#define INVOKE(name, call)                                                                                         \
    static int invoke_##name(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,                    \
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {            \
        (void)op, (void)at, (void)n_in;                                                                            \
        return call;                                                                                               \
    }

INVOKE(binary, tr_k_binary(k, op, &in[0], &in[1], out, err))
INVOKE(unary, tr_k_unary(k, op, at, &in[0], out, err))
INVOKE(matmul, tr_k_matmul(k, &in[0], &in[1], out, at->ints[0] != 0, at->ints[1] != 0, at->floats[0], NULL,
                           TR_ACT_NONE, err))
INVOKE(softmax, tr_k_softmax(k, &in[0], out, err))
INVOKE(layer_norm, tr_k_layer_norm(k, &in[0], &in[1], &in[2], at->floats[0], out, err))
INVOKE(embedding, tr_k_embedding(k, &in[0], &in[1], out, err))
INVOKE(transpose, tr_k_transpose(k, &in[0], at->ints, out, err))
INVOKE(slice, tr_k_slice(k, &in[0], (int)at->ints[0], at->ints[1], at->ints[3], out, err))
INVOKE(concat, tr_k_concat(k, n_in, in, (int)at->ints[0], out, err))
INVOKE(reduce, tr_k_reduce(k, op, &in[0], (int)at->ints[0], out, err))
INVOKE(cast, tr_k_cast(k, &in[0], out, err))
INVOKE(attention, tr_k_attention(k, &in[0], &in[1], &in[2], n_in == 4 ? &in[3] : NULL, at->floats[0],
                                 at->ints[0] != 0, (int)at->ints[1], out, err))
INVOKE(attention_lse, tr_k_attention_lse(k, &in[0], &in[1], &in[2], n_in == 4 ? &in[3] : NULL, at->floats[0],
                                         at->ints[0] != 0, (int)at->ints[1], NULL, out, err))
#undef INVOKE

static int reshape_check(const struct tr_tensor *x, const struct tr_tensor *out, struct tr_error *err) {
    int rc = tr_cpu_check_tensor(x, "reshape", "x", err);
    if (!rc) rc = tr_cpu_check_tensor(out, "reshape", "out", err);
    if (rc) return rc;
    char d1[200], d2[200];
    if (x->dtype != out->dtype || tr_tensor_numel(x) != tr_tensor_numel(out))
        return tr_error_set(err, TR_ERR_SHAPE, "reshape: x %s and out %s should have the same dtype and element count",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    return TR_OK;
}

static int invoke_reshape(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                          struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)at, (void)n_in;
    int rc = tr_cpu_check_ctx(k, "reshape", err);
    if (!rc) rc = reshape_check(&in[0], out, err);
    if (rc) return rc;
    if (out->data != in[0].data) memcpy(out->data, in[0].data, tr_tensor_nbytes(&in[0]));
    return TR_OK;
}

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
    int rc = tr_cpu_check_ctx_bind(k, "reshape", err);
    if (!rc) rc = reshape_check(&c->in[0], &c->out, err);
    if (rc) return rc;
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
    /* 0 stands for 1/sqrt(D) (a graph's node already carries it; a direct call may not) */
    at->floats[0] = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
    if (at->ints[1] < 0 || at->ints[1] > INT32_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "attention: window ints[1]=%lld out of range", (long long)at->ints[1]);
    return TR_OK;
}

/* ---- the training ops (grad.c, loss.c): one entry, attributes read as ops.h says ---- */

static int train_attr_error(int op, const struct tr_tensor *out, const char *what, struct tr_error *err) {
    char d[200];
    return tr_error_set(err, TR_ERR_SHAPE, "%s: out %s does not match %s", tr_op_name(op), tr_cpu_desc(out, d, sizeof d),
                        what);
}

static int invoke_train(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in, const struct tr_tensor *in,
                        struct tr_tensor *out, struct tr_error *err) {
    const int64_t *a = at->ints;
    switch (op) {
    case TR_OP_UNARY_GRAD: return tr_k_unary_grad(k, (int)a[0], (int)a[1], at->floats[0], &in[0], &in[1], out, err);
    case TR_OP_SOFTMAX_GRAD: return tr_k_softmax_grad(k, &in[0], &in[1], out, err);
    case TR_OP_LAYER_NORM_GRAD: return tr_k_layer_norm_grad(k, &in[0], &in[1], &in[2], at->floats[0], out, err);
    case TR_OP_LAYER_NORM_GRAD_GAMMA: return tr_k_layer_norm_grad_gamma(k, &in[0], &in[1], at->floats[0], out, err);
    case TR_OP_EMBEDDING_GRAD: {
        if (out->ndim != 2 || out->shape[0] != a[0]) return train_attr_error(op, out, "ints[0] (V rows)", err);
        if (a[1] && (a[1] != 1 || a[2] < 0 || a[2] >= a[0]))
            return train_attr_error(op, out, "ints[1..2] (a padding row below V)", err);
        int rc = tr_k_embedding_grad(k, &in[0], &in[1], out, err);
        if (rc) return rc;
        if (a[1]) { /* the padding row gets no gradient */
            const size_t row = (size_t)out->shape[1] * tr_dtype_size((enum tr_dtype)out->dtype);
            memset((char *)out->data + (size_t)a[2] * row, 0, row);
        }
        return TR_OK;
    }
    case TR_OP_ATTENTION_GRAD: {
        if (n_in < 4 || n_in > 7)
            return tr_error_set(err, TR_ERR_INVALID, "attention_grad: %d inputs given, 4 (q, k, v, dy), 5 (with mask), "
                                "6 or 7 (and the forward's y and lse) expected", n_in);
        float scale = tr_attention_scale(at->floats[0], in[0].ndim == 4 ? in[0].shape[3] : 0);
        if (a[1] < 0 || a[1] > INT32_MAX || a[2] < 0 || a[2] > 2)
            return tr_error_set(err, TR_ERR_INVALID, "attention_grad: window ints[1]=%lld or operand ints[2]=%lld (0 dq, "
                                "1 dk, 2 dv) out of range", (long long)a[1], (long long)a[2]);
        if (n_in >= 6) return tr_cpu_attention_grad_saved(k, in, n_in, scale, a[0] != 0, (int)a[1], (int)a[2], out, err);
        return tr_k_attention_grad(k, &in[0], &in[1], &in[2], &in[3], n_in == 5 ? &in[4] : NULL, scale, a[0] != 0,
                                   (int)a[1], (int)a[2], out, err);
    }
    case TR_OP_BROADCAST: {
        int ok = at->n_ints == out->ndim;
        for (int i = 0; ok && i < out->ndim; i++) ok = a[i] == out->shape[i];
        if (!ok) return train_attr_error(op, out, "the shape in ints[0..n_ints-1]", err);
        return tr_k_broadcast(k, &in[0], out, err);
    }
    case TR_OP_MAX_GRAD: return tr_k_max_grad(k, &in[0], &in[1], (int)a[0], a[1] != 0, out, err);
    case TR_OP_SLICE_GRAD: {
        int ax = tr_cpu_axis(a[0], out->ndim);
        if (ax < 0 || out->shape[ax] != a[4]) return train_attr_error(op, out, "axis ints[0] of extent ints[4]", err);
        return tr_k_slice_grad(k, &in[0], ax, a[1], a[3], out, err);
    }
    case TR_OP_CROSS_ENTROPY: return tr_k_cross_entropy(k, &in[0], &in[1], a[1] != 0, a[0], out, err);
    case TR_OP_CROSS_ENTROPY_GRAD:
        return tr_k_cross_entropy_grad(k, &in[0], &in[1], a[1] != 0, a[0], &in[2], out, err);
    default: return tr_k_mse(k, &in[0], &in[1], out, err);
    }
}

static int bound_train(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return invoke_train(k, c->op, &c->attrs, c->n_in, c->in, (struct tr_tensor *)&c->out, err);
}

/* A bound call of a kernel without a binder: its entry on the call's arguments. */
static int bound_invoke(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const int op = c->op;
    struct tr_tensor *out = (struct tr_tensor *)&c->out;
    switch (op) {
    case TR_OP_CONV2D: case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT:
        return tr_cpu_conv2d_invoke(k, op, &c->attrs, c->n_in, c->in, out, err);
    case TR_OP_GROUP_NORM: case TR_OP_GROUP_NORM_GRAD: case TR_OP_GROUP_NORM_GRAD_GAMMA:
        return tr_cpu_group_norm_invoke(k, op, &c->attrs, c->n_in, c->in, out, err);
    case TR_OP_TIMESTEP_EMBEDDING:
        return tr_cpu_timestep_embedding_invoke(k, op, &c->attrs, c->n_in, c->in, out, err);
    case TR_OP_ATTENTION_REL_GRAD:
        return tr_cpu_attention_rel_grad_invoke(k, op, &c->attrs, c->n_in, c->in, out, err);
    default:
        return tr_error_set(err, TR_ERR_INVALID, "bound call of %s: no unbound kernel for it", tr_op_name(op));
    }
}

static int invoke_adamw_step(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                             const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)op, (void)n_in;
    const float *f = at->floats;
    return tr_k_adamw_step(k, &in[0], &in[1], &in[2], &in[3], &in[4], f[0], f[1], f[2], f[3], out, err);
}

/* resolve's answer: the op's entry, and either its binder or (for ops without one) the
 * bound form that runs the entry on the call's arguments. */
static int pick(struct tr_cpu_op *r, tr_cpu_invoke_fn invoke, tr_cpu_bind_fn bind, tr_kernel_fn bound) {
    r->invoke = invoke;
    r->bind = bind;
    r->bound = bound;
    return TR_OK;
}

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
    r->bind = NULL;
    r->bound = NULL;

    if (tr_op_is_elementwise_binary(op)) return pick(r, invoke_binary, tr_cpu_binary_bind, NULL);
    if (tr_op_is_elementwise_unary(op)) {
        if (op == TR_OP_SCALE && !attrs)
            return tr_error_set(err, TR_ERR_INVALID, "scale: attrs are NULL (floats[0]=alpha, floats[1]=beta)");
        return pick(r, invoke_unary, tr_cpu_unary_bind, NULL);
    }
    int rc;
    switch (op) {
    case TR_OP_MATMUL:
        at->floats[0] = tr_matmul_alpha(at->floats[0]); /* a direct call's unset 0 */
        return pick(r, invoke_matmul, tr_cpu_matmul_bind_op, NULL);
    case TR_OP_SOFTMAX: return pick(r, invoke_softmax, tr_cpu_softmax_bind, NULL);
    case TR_OP_LAYER_NORM: return pick(r, invoke_layer_norm, tr_cpu_layer_norm_bind, NULL);
    case TR_OP_EMBEDDING: return pick(r, invoke_embedding, tr_cpu_embedding_bind, NULL);
    case TR_OP_RESHAPE:
        return pick(r, invoke_reshape, tr_cpu_reshape_bind, NULL); /* a copy or nothing */
    case TR_OP_TRANSPOSE:
        if (at->n_ints != in[0].ndim)
            return tr_error_set(err, TR_ERR_INVALID, "transpose: %d perm entries (n_ints) for a %d-D input",
                                at->n_ints, in[0].ndim);
        return pick(r, invoke_transpose, tr_cpu_transpose_bind, NULL);
    case TR_OP_SLICE:
        if ((rc = resolve_slice(at, &in[0], out, err)) != TR_OK) return rc;
        return pick(r, invoke_slice, tr_cpu_slice_bind, NULL);
    case TR_OP_CONCAT:
        if (n_in < 1) return tr_error_set(err, TR_ERR_INVALID, "concat: no inputs");
        return pick(r, invoke_concat, tr_cpu_concat_bind, NULL);
    case TR_OP_SUM:
    case TR_OP_MEAN:
    case TR_OP_MAX:
        if ((rc = resolve_reduce(op, at, &in[0], out, err)) != TR_OK) return rc;
        return pick(r, invoke_reduce, tr_cpu_reduce_bind, NULL);
    case TR_OP_CAST:
        if (at->ints[0] != out->dtype)
            return tr_error_set(err, TR_ERR_SHAPE, "cast: target dtype ints[0]=%lld but out is %s", (long long)at->ints[0],
                                tr_dtype_name((enum tr_dtype)out->dtype));
        return pick(r, invoke_cast, tr_cpu_cast_bind, NULL);
    case TR_OP_ATTENTION:
        if ((rc = resolve_attention(at, n_in, in, err)) != TR_OK) return rc;
        return pick(r, invoke_attention, tr_cpu_attention_bind, NULL);
    case TR_OP_ATTENTION_LSE:
        if ((rc = resolve_attention(at, n_in, in, err)) != TR_OK) return rc;
        return pick(r, invoke_attention_lse, tr_cpu_attention_lse_bind, NULL);
    case TR_OP_UNARY_GRAD:
    case TR_OP_SOFTMAX_GRAD:
    case TR_OP_LAYER_NORM_GRAD:
    case TR_OP_LAYER_NORM_GRAD_GAMMA:
    case TR_OP_EMBEDDING_GRAD:
    case TR_OP_ATTENTION_GRAD:
    case TR_OP_BROADCAST:
    case TR_OP_MAX_GRAD:
    case TR_OP_SLICE_GRAD:
    case TR_OP_CROSS_ENTROPY:
    case TR_OP_CROSS_ENTROPY_GRAD:
    case TR_OP_MSE:
        return pick(r, invoke_train, NULL, bound_train); /* bind checks by one run on zeroed stand-ins */
    case TR_OP_ADAMW_STEP: return pick(r, invoke_adamw_step, tr_cpu_adamw_step_bind, NULL);
    case TR_OP_RMS_NORM: case TR_OP_RMS_NORM_GRAD: case TR_OP_RMS_NORM_GRAD_W:
        return pick(r, tr_cpu_rms_norm_invoke, tr_cpu_rms_norm_bind, NULL);
    case TR_OP_ROPE:
        return pick(r, tr_cpu_rope_invoke, tr_cpu_rope_bind, NULL);
    case TR_OP_UPDATE_SLICE:
        return pick(r, tr_cpu_update_slice_invoke, tr_cpu_update_slice_bind, NULL);
    case TR_OP_CONV2D: case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT:
        if (op == TR_OP_CONV2D ? n_in != 2 && n_in != 3 : n_in != 2)
            return tr_error_set(err, TR_ERR_INVALID, "%s: %d inputs given, %s expected", tr_op_name(op), n_in,
                                op == TR_OP_CONV2D ? "2 (x, w) or 3 (with bias)" : "2");
        /* a direct call's unset 0s: stride, dilation and groups 1 (graph build stores them) */
        if (at->ints[0] == 0) at->ints[0] = 1;
        if (at->ints[2] == 0) at->ints[2] = 1;
        if (at->ints[3] == 0) at->ints[3] = 1;
        return pick(r, tr_cpu_conv2d_invoke, NULL, bound_invoke); /* no binder yet: bind checks by one run */
    case TR_OP_GROUP_NORM: case TR_OP_GROUP_NORM_GRAD: case TR_OP_GROUP_NORM_GRAD_GAMMA:
        return pick(r, tr_cpu_group_norm_invoke, NULL, bound_invoke);
    case TR_OP_TIMESTEP_EMBEDDING:
        return pick(r, tr_cpu_timestep_embedding_invoke, NULL, bound_invoke);
    case TR_OP_ATTENTION_REL: case TR_OP_ATTENTION_REL_LSE:
        return pick(r, tr_cpu_attention_rel_invoke, tr_cpu_attention_rel_bind, NULL);
    case TR_OP_ATTENTION_REL_GRAD:
        return pick(r, tr_cpu_attention_rel_grad_invoke, NULL, bound_invoke);
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START: case TR_OP_ALLREDUCE_WAIT:
        return pick(r, tr_cpu_allreduce_invoke, tr_cpu_allreduce_bind, NULL);
    default: return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: op %s has no cpu kernel", fn, tr_op_name(op));
    }
}

int tr_kernels_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in, const struct tr_tensor *in,
                   struct tr_tensor *out, struct tr_error *err) {
    struct tr_cpu_op r;
    int rc = tr_cpu_resolve(k, "tr_kernels_run", op, attrs, n_in, in, out, &r, err);
    if (rc) return rc;
    if (k->device_type == TR_DEVICE_CUDA) return tr_cuda_run(k, op, &r.attrs, n_in, in, out, err);
    return r.invoke(k, op, &r.attrs, n_in, in, out, err);
}

int tr_kernels_supports(int op, int dtype) {
    if (op < 0 || op >= TR_OP_COUNT) return 0;
    switch (op) {
    case TR_OP_INPUT: case TR_OP_PARAM: case TR_OP_CONST: case TR_OP_RESHAPE: case TR_OP_TRANSPOSE:
    case TR_OP_SLICE: case TR_OP_CONCAT: case TR_OP_CAST:
        return tr_dtype_size((enum tr_dtype)dtype) != 0;
    case TR_OP_UPDATE_SLICE:
        return dtype != TR_DTYPE_I64 && tr_dtype_size((enum tr_dtype)dtype) != 0;
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START: case TR_OP_ALLREDUCE_WAIT:
        return dtype == TR_DTYPE_F32;
    default:
        return dtype == TR_DTYPE_F32 || dtype == TR_DTYPE_BF16 || dtype == TR_DTYPE_F16;
    }
}
