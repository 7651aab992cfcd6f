/* Bound kernel calls: tr_kernels_run's work split into what depends only on the
 * arguments' shapes, dtypes, attributes and addresses (done once, by bind) and the
 * computation (done by every call).
 *
 * bind goes through tr_cpu_resolve, the validation path tr_kernels_run itself takes, so
 * it refuses exactly what run refuses, with the same message (only the function name in
 * messages about the call itself differs: "tr_kernels_bind: unknown op 99"). What the
 * kernels check once entered (shapes that must agree, for instance) is checked by the
 * kernel's own check part (cpu_internal.h: every kernel is a check filling a plan and a
 * compute part running it), called by the kernel's binder without running anything:
 * the bound tensors are neither read nor written, the counters do not move. The binder
 * keeps the plan in the call (MATMUL: a oneDNN primitive of its own with its memory
 * objects pointed at the tensors; RESHAPE: a copy, or nothing when aliased) and grows
 * the context's scratch for it. A call is then the compute part on the kept plan: no
 * dispatch, no checks, no cache lookup, no allocation. A check on the data itself (an
 * embedding id out of range) can only be made by the call, and is.
 *
 * An op whose kernel has no binder yet (r.bind NULL, r.bound set) is checked the old way:
 * one run at bind time on zeroed stand-ins of the bound tensors, its counters restored,
 * and its calls run the whole kernel, checks included.
 *
 * On a cuda context, after the same resolution, the call is bound by the cuda side
 * (cuda/host/route.c: checked once by a dry run, scratch reserved, the GEMM's cuBLASLt
 * plan made and owned by the call; its calls only queue work on the stream). */
#include <stdlib.h>
#include "cpu_internal.h"

static int dry_run(struct tr_kernels *k, const struct tr_cpu_op *r, const struct tr_kernel_call *c,
                   struct tr_error *err) {
    size_t in_max = 1, out_n = tr_tensor_nbytes(&c->out);
    for (int i = 0; i < c->n_in; i++) {
        size_t n = tr_tensor_nbytes(&c->in[i]);
        if (n > in_max) in_max = n;
    }
    void *zin = calloc(1, in_max), *zout = malloc(out_n ? out_n : 1);
    if (!zin || !zout) {
        free(zin);
        free(zout);
        return tr_error_set(err, TR_ERR_NOMEM, "%s: no memory (%zu + %zu bytes) to check the call at bind time",
                            tr_op_name(c->op), in_max, out_n);
    }
    struct tr_tensor xs[TR_KERNEL_CALL_MAX_IN], o = c->out;
    for (int i = 0; i < c->n_in; i++) {
        xs[i] = c->in[i];
        if (xs[i].data) xs[i].data = zin;
    }
    if (o.data) o.data = zout;
    struct tr_kernels_stats saved = k->stats;
    int rc = r->invoke(k, c->op, &c->attrs, c->n_in, xs, &o, err);
    k->stats = saved;
    free(zin);
    free(zout);
    return rc;
}

int tr_kernels_bind(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in,
                    const struct tr_tensor *in, const struct tr_tensor *out, struct tr_kernel_call *call,
                    struct tr_error *err) {
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_bind: call is NULL");
    memset(call, 0, sizeof *call);
    struct tr_cpu_op r;
    int rc = tr_cpu_resolve(k, "tr_kernels_bind", op, attrs, n_in, in, out, &r, err);
    if (rc) return rc;
    if (n_in > TR_KERNEL_CALL_MAX_IN)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %d inputs; a bound call holds at most %d (run it with "
                            "tr_kernels_run)", tr_op_name(op), n_in, TR_KERNEL_CALL_MAX_IN);
    call->op = op;
    call->n_in = n_in;
    call->attrs = r.attrs;
    for (int i = 0; i < n_in; i++) call->in[i] = in[i];
    call->out = *out;
    if (k->device_type == TR_DEVICE_CUDA) {
        rc = tr_cuda_bind_op(k, call, err); /* cuda/host/route.c */
    } else if (r.bind) {
        rc = r.bind(k, call, err);
    } else if (r.bound) {
        rc = dry_run(k, &r, call, err);
        call->fn = r.bound;
    } else {
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "tr_kernels_bind: op %s has no bound form on the cpu (run it with "
                          "tr_kernels_run)", tr_op_name(op));
    }
    if (rc) {
        tr_kernels_unbind(k, call);
        return rc;
    }
    return TR_OK;
}

int tr_kernels_bind_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b,
                           const struct tr_tensor *c, int trans_a, int trans_b, float alpha,
                           const struct tr_tensor *bias, enum tr_act act, struct tr_kernel_call *call,
                           struct tr_error *err) {
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "matmul: call is NULL");
    memset(call, 0, sizeof *call);
    int cuda = k && k->device_type == TR_DEVICE_CUDA;
    if (cuda && (!a || !b || !c)) return tr_error_set(err, TR_ERR_INVALID, "matmul: a, b or c is NULL");
    int rc = cuda ? TR_OK : tr_cpu_check_ctx_bind(k, "matmul", err);
    if (!rc && !cuda) rc = tr_cpu_check_float(a, "matmul", "a", err);
    if (!rc && !cuda) rc = tr_cpu_check_float(b, "matmul", "b", err);
    if (!rc && !cuda) rc = tr_cpu_check_float(c, "matmul", "c", err);
    if (rc) return rc;
    call->op = TR_OP_MATMUL;
    call->in[call->n_in++] = *a;
    call->in[call->n_in++] = *b;
    if (bias) call->in[call->n_in++] = *bias;
    call->attrs.ints[0] = trans_a != 0;
    call->attrs.ints[1] = trans_b != 0;
    call->attrs.floats[0] = alpha;
    call->out = *c;
    rc = cuda ? tr_cuda_bind_matmul(k, call, bias, act, err) : tr_cpu_matmul_bind(k, call, bias, act, err);
    if (rc) tr_kernels_unbind(k, call);
    return rc;
}

void tr_kernels_unbind(struct tr_kernels *k, struct tr_kernel_call *call) {
    (void)k;
    if (!call) return;
    struct tr_cpu_prepared *p = call->prepared; /* the cuda side's plans start the same way */
    if (p) p->release(p);
    memset(call, 0, sizeof *call);
}
