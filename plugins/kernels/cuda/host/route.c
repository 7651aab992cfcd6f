/* The public kernels on a cuda context: each tr_k_* (and tr_kernels_bind*) starts with
 * TR_CUDA_ROUTE (cpu_internal.h), which sends a call on a cuda context here. Each entry
 * turns its arguments into the graph-op form tr_cuda_run takes (the attributes as
 * tr_cpu_resolve leaves them) or calls the CUDA function of a kernel that is not an op
 * (the GEMM with epilogues, the fused kernels), so that every kernel has one CUDA path,
 * the one tr_kernels_run takes and tests/test_cuda_kernels.c checks.
 *
 * Bound calls on cuda: bind makes every check by running the call's path with the
 * context "dry" (tr_cuda_set_dry: checks made, scratch reserved, nothing queued, the
 * counters restored); the GEMM's plan is made at bind and owned by the call (gemm.c).
 * A call queues its kernels on the context's stream: it allocates nothing (the scratch
 * was reserved at bind), never syncs and never copies to the host, so a sequence of
 * calls can be captured into a CUDA graph. Its host-side argument checks are repeated
 * (a few comparisons; not a launch cost). The scratch is shared by the context: bind
 * every call before capturing, since a bind that grows it moves it.
 *
 * Plain C, always built: where CUDA is not, tr_cuda_run and the others answer "no CUDA
 * device found" (nocuda.c), and no cuda context can exist anyway. */
#include <stdlib.h>
#include "../../cpu/cpu_internal.h"
#include "cuda_entry.h"
#include "../attention_plan.h"

static const struct tr_attrs no_attrs;

/* Tensors that the op form dereferences: NULL is refused here, by name. names is the
 * macro's argument list as one string ("x, out"); the i-th entry is printed. */
static int need_list(const char *kn, int n, const struct tr_tensor *const *t, const char *names,
                     struct tr_error *err) {
    for (int i = 0; i < n; i++) {
        if (t[i]) continue;
        const char *p = names;
        for (int j = 0; j < i && p; j++) {
            p = strchr(p, ',');
            if (p) p += 1 + (p[1] == ' ');
        }
        int len = p ? (int)(strchr(p, ',') ? (size_t)(strchr(p, ',') - p) : strlen(p)) : 1;
        return tr_error_set(err, TR_ERR_INVALID, "%s: %.*s is NULL", kn, len, p ? p : "?");
    }
    return TR_OK;
}
#define NEED(kn, ...)                                                                    \
    do {                                                                                 \
        const struct tr_tensor *const t_[] = {__VA_ARGS__};                              \
        int st_ = need_list(kn, (int)(sizeof t_ / sizeof t_[0]), t_, #__VA_ARGS__, err); \
        if (st_) return st_;                                                             \
    } while (0)

/* ---- graph-op kernels ---- */

int tr_cuda_k_binary(struct tr_kernels *k, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                     struct tr_tensor *out, struct tr_error *err) {
    if (!tr_op_is_elementwise_binary(op))
        return tr_error_set(err, TR_ERR_INVALID, "binary: op %d (%s) is not add, sub, mul or div", op, tr_op_name(op));
    NEED("binary", a, b, out);
    struct tr_tensor in[2] = {*a, *b};
    return tr_cuda_run(k, op, &no_attrs, 2, in, out, err);
}

int tr_cuda_k_unary(struct tr_kernels *k, int op, const struct tr_attrs *attrs, const struct tr_tensor *x,
                    struct tr_tensor *out, struct tr_error *err) {
    if (!tr_op_is_elementwise_unary(op))
        return tr_error_set(err, TR_ERR_INVALID, "unary: op %d (%s) is not an elementwise unary op", op,
                            tr_op_name(op));
    if (op == TR_OP_SCALE && !attrs)
        return tr_error_set(err, TR_ERR_INVALID, "scale: attrs are NULL (floats[0]=alpha, floats[1]=beta)");
    NEED("unary", x, out);
    return tr_cuda_run(k, op, attrs ? attrs : &no_attrs, 1, x, out, err);
}

int tr_cuda_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    NEED("softmax", x, out);
    return tr_cuda_run(k, TR_OP_SOFTMAX, &no_attrs, 1, x, out, err);
}

int tr_cuda_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                         const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err) {
    NEED("layer_norm", x, out);
    /* beta without gamma has no op form (inputs are positional): the fused kernel, which
     * is layer norm when bias and residual are absent */
    if (!gamma && beta) return tr_cuda_bias_residual_layer_norm(k, x, NULL, NULL, NULL, beta, eps, out, err);
    struct tr_tensor in[3] = {*x};
    int n = 1;
    if (gamma) in[n++] = *gamma;
    if (beta) in[n++] = *beta;
    struct tr_attrs at = {.floats = {eps}};
    return tr_cuda_run(k, TR_OP_LAYER_NORM, &at, n, in, out, err);
}

int tr_cuda_k_embedding(struct tr_kernels *k, const struct tr_tensor *table, const struct tr_tensor *ids,
                        struct tr_tensor *out, struct tr_error *err) {
    NEED("embedding", table, ids, out);
    struct tr_tensor in[2] = {*table, *ids};
    return tr_cuda_run(k, TR_OP_EMBEDDING, &no_attrs, 2, in, out, err);
}

int tr_cuda_k_transpose(struct tr_kernels *k, const struct tr_tensor *x, const int64_t *perm, struct tr_tensor *out,
                        struct tr_error *err) {
    NEED("transpose", x, out);
    if (!perm && x->ndim > 0) return tr_error_set(err, TR_ERR_INVALID, "transpose: perm is NULL");
    if (x->ndim < 0 || x->ndim > TR_ATTR_INTS)
        return tr_error_set(err, TR_ERR_SHAPE, "transpose: x has %d dimensions (0 to %d allowed)", x->ndim,
                            TR_ATTR_INTS);
    struct tr_attrs at = {.n_ints = x->ndim};
    for (int i = 0; i < x->ndim; i++) at.ints[i] = perm[i];
    return tr_cuda_run(k, TR_OP_TRANSPOSE, &at, 1, x, out, err);
}

int tr_cuda_k_slice(struct tr_kernels *k, const struct tr_tensor *x, int axis, int64_t start, int64_t step,
                    struct tr_tensor *out, struct tr_error *err) {
    NEED("slice", x, out);
    int ax = tr_cpu_axis(axis, x->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "slice: axis %d out of range for %d dimensions", axis, x->ndim);
    if (step < 1) return tr_error_set(err, TR_ERR_INVALID, "slice: step %lld (it must be > 0)", (long long)step);
    int64_t cnt = out->ndim == x->ndim ? out->shape[ax] : 0; /* other mismatches: the cuda path's checks */
    if (cnt > 0 && (start < 0 || start >= x->shape[ax]))
        return tr_error_set(err, TR_ERR_SHAPE, "slice: start %lld outside axis %d (extent %lld)", (long long)start, ax,
                            (long long)x->shape[ax]);
    struct tr_attrs at = {.ints = {ax, start, 0, step}};
    return tr_cuda_run(k, TR_OP_SLICE, &at, 1, x, out, err);
}

int tr_cuda_k_concat(struct tr_kernels *k, int n, const struct tr_tensor *xs, int axis, struct tr_tensor *out,
                     struct tr_error *err) {
    NEED("concat", out);
    if (n < 1 || !xs) return tr_error_set(err, TR_ERR_INVALID, "concat: no inputs");
    struct tr_attrs at = {.ints = {axis}};
    return tr_cuda_run(k, TR_OP_CONCAT, &at, n, xs, out, err);
}

int tr_cuda_k_reduce(struct tr_kernels *k, int op, const struct tr_tensor *x, int axis, struct tr_tensor *out,
                     struct tr_error *err) {
    if (op != TR_OP_SUM && op != TR_OP_MEAN && op != TR_OP_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "reduce: op %d (%s) is not sum, mean or max", op, tr_op_name(op));
    NEED("reduce", x, out);
    struct tr_attrs at = {.ints = {axis}};
    return tr_cuda_run(k, op, &at, 1, x, out, err);
}

int tr_cuda_k_cast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    NEED("cast", x, out);
    struct tr_attrs at = {.ints = {out->dtype}};
    return tr_cuda_run(k, TR_OP_CAST, &at, 1, x, out, err);
}

int tr_cuda_k_attention(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                        const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal, int window,
                        struct tr_tensor *out, struct tr_error *err) {
    NEED("attention", q, kk, v, out);
    struct tr_tensor in[4] = {*q, *kk, *v};
    if (mask) in[3] = *mask;
    struct tr_attrs at = {.ints = {causal != 0, window}, .floats = {scale}};
    return tr_cuda_run(k, TR_OP_ATTENTION, &at, mask ? 4 : 3, in, out, err);
}

/* ATTENTION_LSE alone (out NULL) is the op; with out, the private TR_CUDA_OP_ATTENTION_FWD
 * (attention_plan.h) writes both in one pass. */
int tr_cuda_k_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                            const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                            int window, struct tr_tensor *out, struct tr_tensor *lse, struct tr_error *err) {
    NEED("attention_lse", q, kk, v, lse);
    struct tr_tensor in[5] = {*q, *kk, *v};
    if (mask) in[3] = *mask;
    struct tr_attrs at = {.ints = {causal != 0, window}, .floats = {scale}};
    if (!out) return tr_cuda_run(k, TR_OP_ATTENTION_LSE, &at, mask ? 4 : 3, in, lse, err);
    in[4] = *lse;
    at.ints[7] = mask != NULL;
    return tr_cuda_run(k, TR_CUDA_OP_ATTENTION_FWD, &at, 5, in, out, err);
}

/* ATTENTION_REL_LSE alone (out NULL) is the op; with out, the private
 * TR_CUDA_OP_ATTENTION_REL_FWD (attention_plan.h) writes both in one pass. */
int tr_cuda_k_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale, struct tr_tensor *out,
                                struct tr_tensor *lse, struct tr_error *err) {
    if (!in) return tr_error_set(err, TR_ERR_INVALID, "attention_rel_lse: NULL operands");
    struct tr_attrs at = {.floats = {scale}};
    if (!out) {
        NEED("attention_rel_lse", lse);
        return tr_cuda_run(k, TR_OP_ATTENTION_REL_LSE, &at, 5, in, lse, err);
    }
    if (!lse) return tr_cuda_run(k, TR_OP_ATTENTION_REL, &at, 5, in, out, err);
    struct tr_tensor all[6] = {in[0], in[1], in[2], in[3], in[4], *lse};
    return tr_cuda_run(k, TR_CUDA_OP_ATTENTION_REL_FWD, &at, 6, all, out, err);
}

/* One tr_cuda_run of ATTENTION_REL's joint backward (TR_CUDA_OP_ATTENTION_REL_BACKWARD,
 * attention_plan.h): the row statistics once for every gradient asked for, or read from
 * the forward's y and lse. */
int tr_cuda_k_attention_rel_backward(struct tr_kernels *k, const struct tr_tensor in[6], const struct tr_tensor *y,
                                     const struct tr_tensor *lse, float scale, struct tr_tensor *const grads[5],
                                     struct tr_error *err) {
    struct tr_tensor all[13];
    struct tr_attrs at = {.floats = {scale}};
    struct tr_tensor *first = NULL;
    memset(all, 0, sizeof all);
    for (int i = 0; i < 6; i++) all[i] = in[i];
    for (int w = 0; w < 5; w++) {
        if (!grads[w]) continue;
        all[6 + w] = *grads[w];
        at.ints[7] |= (int64_t)1 << w;
        if (!first) first = grads[w];
    }
    if (!first) return tr_error_set(err, TR_ERR_INVALID, "attention_rel_backward: no gradient asked for");
    if (y && lse) {
        all[11] = *y;
        all[12] = *lse;
        at.ints[7] |= (int64_t)3 << 11;
    }
    return tr_cuda_run(k, TR_CUDA_OP_ATTENTION_REL_BACKWARD, &at, y && lse ? 13 : 11, all, first, err);
}

/* ---- training kernels ---- */

int tr_cuda_k_unary_grad(struct tr_kernels *k, int op, int approximate, float alpha, const struct tr_tensor *x,
                         const struct tr_tensor *dy, struct tr_tensor *dx, struct tr_error *err) {
    NEED("unary_grad", x, dy, dx);
    struct tr_tensor in[2] = {*x, *dy};
    struct tr_attrs at = {.ints = {op, approximate}, .floats = {alpha}};
    return tr_cuda_run(k, TR_OP_UNARY_GRAD, &at, 2, in, dx, err);
}

int tr_cuda_k_softmax_grad(struct tr_kernels *k, const struct tr_tensor *y, const struct tr_tensor *dy,
                           struct tr_tensor *dx, struct tr_error *err) {
    NEED("softmax_grad", y, dy, dx);
    struct tr_tensor in[2] = {*y, *dy};
    return tr_cuda_run(k, TR_OP_SOFTMAX_GRAD, &no_attrs, 2, in, dx, err);
}

int tr_cuda_k_layer_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                              const struct tr_tensor *dy, float eps, struct tr_tensor *dx, struct tr_error *err) {
    NEED("layer_norm_grad", x, dy, dx);
    /* without gamma: (x, dy), which the cuda path reads as gamma = ones */
    struct tr_tensor in[3] = {*x};
    int n = 1;
    if (gamma) in[n++] = *gamma;
    in[n++] = *dy;
    struct tr_attrs at = {.floats = {eps}};
    return tr_cuda_run(k, TR_OP_LAYER_NORM_GRAD, &at, n, in, dx, err);
}

int tr_cuda_k_layer_norm_grad_gamma(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy,
                                    float eps, struct tr_tensor *dgamma, struct tr_error *err) {
    NEED("layer_norm_grad_gamma", x, dy, dgamma);
    struct tr_tensor in[2] = {*x, *dy};
    struct tr_attrs at = {.floats = {eps}};
    return tr_cuda_run(k, TR_OP_LAYER_NORM_GRAD_GAMMA, &at, 2, in, dgamma, err);
}

int tr_cuda_k_embedding_grad(struct tr_kernels *k, const struct tr_tensor *ids, const struct tr_tensor *dy,
                             struct tr_tensor *dtable, struct tr_error *err) {
    NEED("embedding_grad", ids, dy, dtable);
    struct tr_tensor in[2] = {*ids, *dy};
    struct tr_attrs at = {.ints = {dtable->ndim == 2 ? dtable->shape[0] : -1}};
    return tr_cuda_run(k, TR_OP_EMBEDDING_GRAD, &at, 2, in, dtable, err);
}

int tr_cuda_k_attention_grad(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                             const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                             float scale, int causal, int window, int which, struct tr_tensor *out,
                             struct tr_error *err) {
    if (which < 0 || which > 2)
        return tr_error_set(err, TR_ERR_INVALID, "attention_grad: ints[2]=%d should be 0 (dq), 1 (dk) or 2 (dv)",
                            which);
    NEED("attention_grad", q, kk, v, dy, out);
    struct tr_tensor in[5] = {*q, *kk, *v, *dy};
    if (mask) in[4] = *mask;
    struct tr_attrs at = {.ints = {causal != 0, window, which}, .floats = {scale}};
    return tr_cuda_run(k, TR_OP_ATTENTION_GRAD, &at, mask ? 5 : 4, in, out, err);
}

/* One tr_cuda_run of the joint backward (TR_CUDA_OP_ATTENTION_BACKWARD, attention_plan.h):
 * the row statistics computed once, dk and dv in one launch, dq in another. */
int tr_cuda_k_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                 const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                                 const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                                 int window, struct tr_tensor *dq, struct tr_tensor *dk, struct tr_tensor *dv,
                                 struct tr_error *err) {
    if (!dq && !dk && !dv) return tr_error_set(err, TR_ERR_INVALID, "attention_backward: no gradient asked for");
    if (!y != !lse) return tr_error_set(err, TR_ERR_INVALID, "attention_backward: y and lse come together or not at all");
    NEED("attention_backward", q, kk, v, dy);
    struct tr_tensor in[10] = {*q, *kk, *v, *dy};
    struct tr_attrs at = {.ints = {causal != 0, window}, .floats = {scale}};
    if (mask) in[4] = *mask, at.ints[7] |= (int64_t)1 << 4;
    struct tr_tensor *g[3] = {dq, dk, dv};
    for (int w = 0; w < 3; w++)
        if (g[w]) in[5 + w] = *g[w], at.ints[7] |= (int64_t)1 << (5 + w);
    if (y) in[8] = *y, in[9] = *lse, at.ints[7] |= (int64_t)3 << 8;
    return tr_cuda_run(k, TR_CUDA_OP_ATTENTION_BACKWARD, &at, y ? 10 : 8, in, dq ? dq : dk ? dk : dv, err);
}

int tr_cuda_k_broadcast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err) {
    NEED("broadcast", x, out);
    return tr_cuda_run(k, TR_OP_BROADCAST, &no_attrs, 1, x, out, err);
}

int tr_cuda_k_max_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, int axis,
                       int keepdims, struct tr_tensor *dx, struct tr_error *err) {
    NEED("max_grad", x, dy, dx);
    struct tr_tensor in[2] = {*x, *dy};
    struct tr_attrs at = {.ints = {axis, keepdims != 0}};
    return tr_cuda_run(k, TR_OP_MAX_GRAD, &at, 2, in, dx, err);
}

int tr_cuda_k_slice_grad(struct tr_kernels *k, const struct tr_tensor *dy, int axis, int64_t start, int64_t step,
                         struct tr_tensor *dx, struct tr_error *err) {
    NEED("slice_grad", dy, dx);
    int ax = tr_cpu_axis(axis, dx->ndim);
    if (ax < 0)
        return tr_error_set(err, TR_ERR_INVALID, "slice_grad: axis %d out of range for %d dimensions", axis, dx->ndim);
    struct tr_attrs at = {.ints = {ax, start, 0, step, dx->shape[ax]}};
    return tr_cuda_run(k, TR_OP_SLICE_GRAD, &at, 1, dy, dx, err);
}

int tr_cuda_k_cross_entropy(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                            int has_ignore, int64_t ignore_index, struct tr_tensor *out, struct tr_error *err) {
    NEED("cross_entropy", logits, labels, out);
    struct tr_tensor in[2] = {*logits, *labels};
    struct tr_attrs at = {.ints = {ignore_index, has_ignore != 0}};
    return tr_cuda_run(k, TR_OP_CROSS_ENTROPY, &at, 2, in, out, err);
}

int tr_cuda_k_cross_entropy_grad(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                                 int has_ignore, int64_t ignore_index, const struct tr_tensor *dloss,
                                 struct tr_tensor *dlogits, struct tr_error *err) {
    NEED("cross_entropy_grad", logits, labels, dloss, dlogits);
    struct tr_tensor in[3] = {*logits, *labels, *dloss};
    struct tr_attrs at = {.ints = {ignore_index, has_ignore != 0}};
    return tr_cuda_run(k, TR_OP_CROSS_ENTROPY_GRAD, &at, 3, in, dlogits, err);
}

int tr_cuda_k_mse(struct tr_kernels *k, const struct tr_tensor *pred, const struct tr_tensor *target,
                  struct tr_tensor *out, struct tr_error *err) {
    NEED("mse", pred, target, out);
    struct tr_tensor in[2] = {*pred, *target};
    return tr_cuda_run(k, TR_OP_MSE, &no_attrs, 2, in, out, err);
}

int tr_cuda_k_adamw_step(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                         const struct tr_tensor *v, const struct tr_tensor *lr, const struct tr_tensor *step,
                         float beta1, float beta2, float eps, float weight_decay, struct tr_tensor *out,
                         struct tr_error *err) {
    NEED("adamw_step", param, m, v, lr, step, out);
    struct tr_tensor in[5] = {*param, *m, *v, *lr, *step};
    struct tr_attrs at = {.floats = {beta1, beta2, eps, weight_decay}};
    return tr_cuda_run(k, TR_OP_ADAMW_STEP, &at, 5, in, out, err);
}

int tr_cuda_k_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                           const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                           const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                           struct tr_tensor *param_out, struct tr_tensor *m_out, struct tr_tensor *v_out,
                           struct tr_error *err) {
    NEED("adamw_update", param, m, v, grad, lr, step, param_out, m_out, v_out);
    struct tr_tensor in[8] = {*param, *m, *v, *grad, *lr, *step, *m_out, *v_out};
    struct tr_attrs at = {.floats = {beta1, beta2, eps, weight_decay}};
    return tr_cuda_run(k, TR_CUDA_OP_ADAMW_UPDATE, &at, 8, in, param_out, err);
}

int tr_cuda_k_allreduce(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                        struct tr_tensor *out, struct tr_error *err) {
    NEED("allreduce", x, out);
    struct tr_attrs at = {.ints = {ranks, bucket}, .floats = {scale}, .n_ints = 2};
    return tr_cuda_run(k, TR_OP_ALLREDUCE, &at, 1, x, out, err);
}

int tr_cuda_k_allreduce_half(struct tr_kernels *k, int op, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                             float scale, struct tr_tensor *out, struct tr_error *err) {
    NEED("allreduce", x, out);
    struct tr_attrs at = {.ints = {ranks, bucket}, .floats = {scale}, .n_ints = 2};
    return tr_cuda_run(k, op, &at, 1, x, out, err);
}

/* ---- decoder LLM kernels ---- */

int tr_cuda_k_rms_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w, float eps,
                       int add_one, struct tr_tensor *out, struct tr_error *err) {
    NEED("rms_norm", x, w, out);
    struct tr_tensor in[2] = {*x, *w};
    struct tr_attrs at = {.ints = {add_one}, .floats = {eps}};
    return tr_cuda_run(k, TR_OP_RMS_NORM, &at, 2, in, out, err);
}

int tr_cuda_k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w,
                            const struct tr_tensor *dy, float eps, int add_one, struct tr_tensor *dx,
                            struct tr_error *err) {
    NEED("rms_norm_grad", x, w, dy, dx);
    struct tr_tensor in[3] = {*x, *w, *dy};
    struct tr_attrs at = {.ints = {add_one}, .floats = {eps}};
    return tr_cuda_run(k, TR_OP_RMS_NORM_GRAD, &at, 3, in, dx, err);
}

int tr_cuda_k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                              struct tr_tensor *dw, struct tr_error *err) {
    NEED("rms_norm_grad_w", x, dy, dw);
    struct tr_tensor in[2] = {*x, *dy};
    struct tr_attrs at = {.floats = {eps}};
    return tr_cuda_run(k, TR_OP_RMS_NORM_GRAD_W, &at, 2, in, dw, err);
}

int tr_cuda_k_rope(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *pos, float base,
                   int rot_dims, int inverse, struct tr_tensor *out, struct tr_error *err) {
    NEED("rope", x, pos, out);
    struct tr_tensor in[2] = {*x, *pos};
    struct tr_attrs at = {.ints = {rot_dims, inverse}, .floats = {base}};
    return tr_cuda_run(k, TR_OP_ROPE, &at, 2, in, out, err);
}

/* ---- bound calls ---- */

/* Checks a bound call by running it dry: every check, the scratch reserved, nothing
 * queued, the counters as they were. */
static int bind_check(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct tr_kernels_stats saved = k->stats;
    int was = tr_cuda_set_dry(k, 1);
    int rc = c->fn(k, c, err);
    tr_cuda_set_dry(k, was);
    k->stats = saved;
    if (rc) tr_kernels_unbind(k, c);
    return rc;
}

/* The call zeroed, as the cpu binders start. */
static int bind_begin(struct tr_kernel_call *c, const char *kn, struct tr_error *err) {
    if (!c) return tr_error_set(err, TR_ERR_INVALID, "%s: call is NULL", kn);
    memset(c, 0, sizeof *c);
    return TR_OK;
}
#define BEGIN(kn)                                        \
    do {                                                 \
        int st_ = bind_begin(c, kn, err);                \
        if (st_) return st_;                             \
    } while (0)

static int bound_op(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return tr_cuda_run(k, c->op, &c->attrs, c->n_in, c->in, (struct tr_tensor *)&c->out, err);
}

int tr_cuda_bind_op(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    if (c->op == TR_OP_MATMUL) return tr_cuda_bind_matmul(k, c, NULL, TR_ACT_NONE, err);
    c->fn = bound_op;
    return bind_check(k, c, err);
}

/* The optional operands of a fused call travel in in[], their presence in attrs.ints[7]. */
#define PRESENT(c, i) (((c)->attrs.ints[7] >> (i)) & 1)
static void keep(struct tr_kernel_call *c, int i, const struct tr_tensor *t) {
    if (!t) return;
    c->in[i] = *t;
    c->attrs.ints[7] |= (int64_t)1 << i;
}
#define OPT(c, i) (PRESENT(c, i) ? &(c)->in[i] : NULL)

static int bound_brln(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return tr_cuda_bias_residual_layer_norm(k, OPT(c, 0), OPT(c, 1), OPT(c, 2), OPT(c, 3), OPT(c, 4),
                                            c->attrs.floats[0], (struct tr_tensor *)&c->out, err);
}

int tr_cuda_bind_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                          const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                          const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                          struct tr_kernel_call *c, struct tr_error *err) {
    BEGIN("bias_residual_layer_norm");
    NEED("bias_residual_layer_norm", x, out);
    c->op = -1;
    keep(c, 0, x), keep(c, 1, bias), keep(c, 2, residual), keep(c, 3, gamma), keep(c, 4, beta);
    c->n_in = 5;
    c->out = *out;
    c->attrs.floats[0] = eps;
    c->fn = bound_brln;
    return bind_check(k, c, err);
}

static int bound_sms(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return tr_cuda_scale_mask_softmax(k, &c->in[0], c->attrs.floats[0], OPT(c, 1), (struct tr_tensor *)&c->out, err);
}

int tr_cuda_bind_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                                    const struct tr_tensor *mask, const struct tr_tensor *out, struct tr_kernel_call *c,
                                    struct tr_error *err) {
    BEGIN("scale_mask_softmax");
    NEED("scale_mask_softmax", x, out);
    c->op = -1;
    keep(c, 0, x), keep(c, 1, mask);
    c->n_in = 2;
    c->out = *out;
    c->attrs.floats[0] = scale;
    c->fn = bound_sms;
    return bind_check(k, c, err);
}

/* n tables and n ids do not fit in[] for n > 3: they are kept in the call's plan */
struct esln_bound {
    struct tr_cpu_prepared base;
    int n;
    struct tr_tensor tables[TR_CUDA_ESLN_MAX], ids[TR_CUDA_ESLN_MAX], gamma, beta;
    int has_gamma, has_beta;
    float eps;
};

static int bound_esln(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct esln_bound *b = c->prepared;
    return tr_cuda_embedding_sum_layer_norm(k, b->n, b->tables, b->ids, b->has_gamma ? &b->gamma : NULL,
                                            b->has_beta ? &b->beta : NULL, b->eps, (struct tr_tensor *)&c->out, err);
}

int tr_cuda_bind_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                          const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                          const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                          struct tr_kernel_call *c, struct tr_error *err) {
    static const char kn[] = "embedding_sum_layer_norm";
    BEGIN(kn);
    NEED(kn, out);
    if (n < 1 || n > TR_CUDA_ESLN_MAX || !tables || !ids)
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d tables (1 to %d, with their ids) given", kn, n,
                            TR_CUDA_ESLN_MAX);
    struct esln_bound *b = calloc(1, sizeof *b);
    if (!b) return tr_error_set(err, TR_ERR_NOMEM, "%s: no host memory for a bound call", kn);
    b->base.release = free;
    b->n = n;
    for (int i = 0; i < n; i++) b->tables[i] = tables[i], b->ids[i] = ids[i];
    if ((b->has_gamma = gamma != NULL)) b->gamma = *gamma;
    if ((b->has_beta = beta != NULL)) b->beta = *beta;
    b->eps = eps;
    c->op = -1;
    for (int i = 0; i < n && c->n_in < TR_KERNEL_CALL_MAX_IN; i++) c->in[c->n_in++] = tables[i];
    c->out = *out;
    c->prepared = b;
    c->fn = bound_esln;
    return bind_check(k, c, err);
}

static int bound_attention_backward(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_attrs *a = &c->attrs;
    struct tr_tensor g[3] = {c->in[5], c->in[6], c->in[7]};
    return tr_cuda_k_attention_backward(k, &c->in[0], &c->in[1], &c->in[2], &c->in[3], OPT(c, 4), OPT(c, 8), OPT(c, 9),
                                        a->floats[0], (int)a->ints[0], (int)a->ints[1], PRESENT(c, 5) ? &g[0] : NULL,
                                        PRESENT(c, 6) ? &g[1] : NULL, PRESENT(c, 7) ? &g[2] : NULL, err);
}

int tr_cuda_bind_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                    const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                                    const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                                    int window, const struct tr_tensor *dq, const struct tr_tensor *dk,
                                    const struct tr_tensor *dv, struct tr_kernel_call *c, struct tr_error *err) {
    BEGIN("attention_backward");
    if (!q || !kk || !v || !dy || (!dq && !dk && !dv) || !y != !lse)
        return tr_error_set(err, TR_ERR_INVALID, "attention_backward: NULL operand, no gradient asked for, or y "
                            "without lse");
    c->op = -1;
    keep(c, 0, q), keep(c, 1, kk), keep(c, 2, v), keep(c, 3, dy), keep(c, 4, mask);
    keep(c, 5, dq), keep(c, 6, dk), keep(c, 7, dv), keep(c, 8, y), keep(c, 9, lse);
    c->n_in = y ? 10 : 8;
    c->out = dq ? *dq : dk ? *dk : *dv;
    /* 0: attention's default 1/sqrt(D), as the cpu's bound form reads it */
    c->attrs.floats[0] = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    c->attrs.ints[0] = causal;
    c->attrs.ints[1] = window;
    c->fn = bound_attention_backward;
    return bind_check(k, c, err);
}

static int bound_adamw_update(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    return tr_cuda_run(k, TR_CUDA_OP_ADAMW_UPDATE, &c->attrs, 8, c->in, (struct tr_tensor *)&c->out, err);
}

int tr_cuda_bind_adamw_update(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                              const struct tr_tensor *v, const struct tr_tensor *grad, const struct tr_tensor *lr,
                              const struct tr_tensor *step, float beta1, float beta2, float eps, float weight_decay,
                              const struct tr_tensor *param_out, const struct tr_tensor *m_out,
                              const struct tr_tensor *v_out, struct tr_kernel_call *c, struct tr_error *err) {
    BEGIN("adamw_update");
    NEED("adamw_update", param, m, v, grad, lr, step, param_out, m_out, v_out);
    const struct tr_tensor *in[8] = {param, m, v, grad, lr, step, m_out, v_out};
    for (int i = 0; i < 8; i++) c->in[i] = *in[i];
    c->op = -1;
    c->n_in = 8;
    c->out = *param_out;
    c->attrs.floats[0] = beta1, c->attrs.floats[1] = beta2, c->attrs.floats[2] = eps, c->attrs.floats[3] = weight_decay;
    c->fn = bound_adamw_update;
    return bind_check(k, c, err);
}

static int bound_attention_lse(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    const struct tr_attrs *a = &c->attrs;
    struct tr_tensor out = c->out, lse = c->in[5];
    return tr_cuda_k_attention_lse(k, &c->in[0], &c->in[1], &c->in[2], OPT(c, 3), a->floats[0], (int)a->ints[0],
                                   (int)a->ints[1], &out, &lse, err);
}

static int bound_attention_rel_lse(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    struct tr_tensor out = c->out, lse = c->in[5];
    return tr_cuda_k_attention_rel_lse(k, c->in, c->attrs.floats[0], &out, &lse, err);
}

int tr_cuda_bind_attention_rel_lse(struct tr_kernels *k, const struct tr_tensor in[5], float scale,
                                   const struct tr_tensor *out, const struct tr_tensor *lse, struct tr_kernel_call *c,
                                   struct tr_error *err) {
    BEGIN("attention_rel");
    if (!in || !out || !lse) return tr_error_set(err, TR_ERR_INVALID, "attention_rel: NULL operands, out or lse");
    c->op = -1;
    for (int i = 0; i < 5; i++) keep(c, i, &in[i]);
    keep(c, 5, lse);
    c->n_in = 6;
    c->out = *out;
    c->attrs.floats[0] = tr_attention_scale(scale, in[0].ndim == 4 ? in[0].shape[3] : 0);
    c->fn = bound_attention_rel_lse;
    return bind_check(k, c, err);
}

int tr_cuda_bind_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                               const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                               int window, const struct tr_tensor *out, const struct tr_tensor *lse,
                               struct tr_kernel_call *c, struct tr_error *err) {
    BEGIN("attention_lse");
    if (!q || !kk || !v || !out || !lse)
        return tr_error_set(err, TR_ERR_INVALID, "attention_lse: NULL operand, out or lse");
    c->op = -1;
    keep(c, 0, q), keep(c, 1, kk), keep(c, 2, v), keep(c, 3, mask), keep(c, 5, lse);
    c->n_in = 6;
    c->out = *out;
    c->attrs.floats[0] = tr_attention_scale(scale, q->ndim == 4 ? q->shape[3] : 0);
    c->attrs.ints[0] = causal != 0;
    c->attrs.ints[1] = window;
    c->fn = bound_attention_lse;
    return bind_check(k, c, err);
}
