/* Bound kernel calls: tr_kernels_run's work split into what depends only on the
 * arguments' shapes, dtypes, attributes and addresses (done once, by bind) and the
 * computation (done by every call).
 *
 * bind goes through tr_cpu_resolve, the validation path tr_kernels_run itself takes, so
 * it refuses exactly what run refuses, with the same message (only the function name in
 * messages about the call itself differs: "tr_kernels_bind: unknown op 99"). What the
 * kernels check once entered (shapes that must agree, for instance) is checked by:
 *   MATMUL   the matmul plan itself (matmul.c), which then makes the call's primitive;
 *   RESHAPE  dispatch's element-count check; the call is a copy, or nothing when aliased;
 *   others   one run of the kernel, at bind time, on zeroed scratch memory of the bound
 *            shapes (so the check is the kernel's own, message included, and the bound
 *            tensors' memory is neither read nor written). The kernels' counters are
 *            left as they were. A check on the data itself (an embedding id out of
 *            range) can only be made by the call, and is.
 * A call runs the kernel entry bind picked, with the stored tensors: no dispatch, no
 * cache lookup; MATMUL makes no check at all and allocates nothing. The other kernels
 * still make their cheap argument checks on entry (they live inside them), and the
 * layer norm, softmax and attention kernels take their small per-call workspaces as
 * they do under tr_kernels_run. */
#include <stdlib.h>
#include "cpu_internal.h"

/* The kernel run once on zeroed stand-ins of the bound tensors. Data pointers that are
 * NULL stay NULL, so the kernel reports them as it would. */
static int dry_run(struct tr_kernels *k, const struct tr_cpu_op *r, const struct tr_kernel_call *c,
                   struct tr_error *err) {
    size_t in_max = 1, out_n = tr_tensor_nbytes(&c->out);
    for (int i = 0; i < c->n_in; i++) {
        size_t n = tr_tensor_nbytes(&c->in[i]);
        if (n > in_max) in_max = n;
    }
    /* calloc: large blocks come as untouched zero pages, cheap to read */
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
    int st = r->invoke(k, c->op, &c->attrs, c->n_in, xs, &o, err);
    k->stats = saved;
    free(zin);
    free(zout);
    return st;
}

int tr_kernels_bind(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in,
                    const struct tr_tensor *in, const struct tr_tensor *out, struct tr_kernel_call *call,
                    struct tr_error *err) {
    if (!call) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_bind: call is NULL");
    memset(call, 0, sizeof *call);
    struct tr_cpu_op r;
    int st = tr_cpu_resolve(k, "tr_kernels_bind", op, attrs, n_in, in, out, &r, err);
    if (st) return st;
    if (n_in > TR_KERNEL_CALL_MAX_IN)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: %d inputs; a bound call holds at most %d (run it with "
                            "tr_kernels_run)", tr_op_name(op), n_in, TR_KERNEL_CALL_MAX_IN);
    call->op = op;
    call->n_in = n_in;
    call->attrs = r.attrs;
    for (int i = 0; i < n_in; i++) call->in[i] = in[i];
    call->out = *out;
    switch (op) {
    case TR_OP_MATMUL: st = tr_cpu_matmul_bind(k, call, NULL, TR_ACT_NONE, err); break;
    case TR_OP_RESHAPE: st = tr_cpu_reshape_bind(k, call, err); break;
    default:
        st = dry_run(k, &r, call, err);
        call->fn = r.bound;
        break;
    }
    if (st) {
        tr_kernels_unbind(k, call);
        return st;
    }
    return TR_OK;
}

void tr_kernels_unbind(struct tr_kernels *k, struct tr_kernel_call *call) {
    (void)k;
    if (!call) return;
    if (call->op == TR_OP_MATMUL) tr_cpu_matmul_unbind(call);
    memset(call, 0, sizeof *call);
}
