/* ALLREDUCE and its halves (ops.h) on the cpu, through the process's communicator
 * (kernels.h). The sum itself is the communicator's (MPI's): the same bits on every rank
 * is its promise; the kernel copies, asks (or starts, or waits), and scales. */
#include <stdatomic.h>
#include "cpu_internal.h"
#include "../cuda/host/cuda_entry.h"

static _Atomic(const struct tr_comm *) the_comm;

void tr_kernels_set_comm(const struct tr_comm *c) { atomic_store(&the_comm, c); }
const struct tr_comm *tr_kernels_get_comm(void) { return atomic_load(&the_comm); }

struct allreduce_plan {
    struct tr_cpu_prepared hdr;
    const float *x;
    float *out;
    int64_t n, ranks, bucket;
    float scale;
    int op; /* ALLREDUCE, or its START or WAIT half */
};

static int allreduce_check(int op, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                           const struct tr_tensor *out, struct allreduce_plan *pl, struct tr_error *err) {
    const char *kn = tr_op_name(op);
    char d1[200], d2[200];
    int rc = tr_cpu_check_tensor(x, kn, "x", err);
    if (!rc) rc = tr_cpu_check_tensor(out, kn, "out", err);
    if (rc) return rc;
    if (x->dtype != TR_DTYPE_F32 || out->dtype != TR_DTYPE_F32 || !tr_cpu_same_shape(x, out))
        return tr_error_set(err, TR_ERR_SHAPE, "%s: x %s and out %s should be f32 of one shape", kn,
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    const struct tr_comm *c = tr_kernels_get_comm();
    const int64_t have = c ? c->size : 1;
    if (ranks != have)
        return tr_error_set(err, TR_ERR_INVALID, "%s (bucket %lld): the graph was built for %lld ranks and this run "
                            "has %lld%s", kn, (long long)bucket, (long long)ranks, (long long)have,
                            c ? "" : " (no communicator is set: one process)");
    memset(pl, 0, sizeof *pl);
    pl->x = x->data;
    pl->out = out->data;
    pl->n = tr_tensor_numel(x);
    pl->ranks = ranks;
    pl->bucket = bucket;
    pl->scale = op == TR_OP_ALLREDUCE_START ? 1.0f : scale;
    pl->op = op;
    return TR_OK;
}

/* A communicator without the halves sums at START, and its WAIT only scales. */
static int split(const struct tr_comm *c) { return c->start_allreduce_f32 && c->wait_f32; }

static int allreduce_compute(const struct allreduce_plan *pl, struct tr_error *err) {
    const struct tr_comm *c = tr_kernels_get_comm();
    /* a communicator of one rank sums too: its run checks the path without peers */
    const int many = c && pl->n > 0;
    int rc = TR_OK;
    /* WAIT first lets the sum land in x (START's out), then copies */
    if (many && pl->op == TR_OP_ALLREDUCE_WAIT && split(c)) rc = c->wait_f32(c->user, (float *)pl->x, err);
    if (!rc && pl->out != pl->x) memcpy(pl->out, pl->x, (size_t)pl->n * sizeof(float));
    if (!rc && many && pl->op == TR_OP_ALLREDUCE_START && split(c))
        rc = c->start_allreduce_f32(c->user, pl->out, pl->n, (int)pl->bucket, err);
    else if (!rc && many && pl->op != TR_OP_ALLREDUCE_WAIT)
        rc = c->allreduce_f32(c->user, pl->out, pl->n, (int)pl->bucket, err);
    if (rc)
        return tr_error_prefix(err, "%s (bucket %lld, %lld values)", tr_op_name(pl->op), (long long)pl->bucket,
                               (long long)pl->n);
    if (pl->scale != 1.0f) {
        float *o = pl->out;
        const float s = pl->scale;
        const int64_t n = pl->n;
#pragma omp parallel for schedule(static) if (n > 4 * TR_CPU_PAR_MIN)
        for (int64_t i = 0; i < n; i++) o[i] *= s;
    }
    return TR_OK;
}

static int allreduce_call(struct tr_kernels *k, const struct tr_kernel_call *c, struct tr_error *err) {
    k->stats.calls++;
    return allreduce_compute(c->prepared, err);
}

/* Binding checks and keeps the plan; it never runs the collective (every rank binds on
 * its own schedule, and a collective out of step would pair with another one). */
int tr_cpu_allreduce_bind(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err) {
    struct allreduce_plan pl;
    const char *kn = tr_op_name(c->op);
    int rc = tr_cpu_check_ctx_bind(k, kn, err);
    if (!rc)
        rc = allreduce_check(c->op, &c->in[0], c->attrs.ints[0], c->attrs.ints[1], c->attrs.floats[0], &c->out, &pl,
                             err);
    return rc ? rc : tr_cpu_keep_plan(c, &pl, sizeof pl, allreduce_call, kn, err);
}

static int run_half(struct tr_kernels *k, int op, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                    float scale, struct tr_tensor *out, struct tr_error *err) {
    TR_CUDA_ROUTE(k, op == TR_OP_ALLREDUCE ? tr_cuda_k_allreduce(k, x, ranks, bucket, scale, out, err)
                                           : tr_cuda_k_allreduce_half(k, op, x, ranks, bucket, scale, out, err));
    struct allreduce_plan pl;
    int rc = tr_cpu_check_ctx(k, tr_op_name(op), err);
    if (!rc) rc = allreduce_check(op, x, ranks, bucket, scale, out, &pl, err);
    return rc ? rc : allreduce_compute(&pl, err);
}

int tr_cpu_allreduce_invoke(struct tr_kernels *k, int op, const struct tr_attrs *at, int n_in,
                            const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err) {
    (void)n_in;
    return run_half(k, op, &in[0], at->ints[0], at->ints[1], at->floats[0], out, err);
}

int tr_k_allreduce(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                   struct tr_tensor *out, struct tr_error *err) {
    return run_half(k, TR_OP_ALLREDUCE, x, ranks, bucket, scale, out, err);
}

int tr_k_allreduce_start(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                         struct tr_tensor *out, struct tr_error *err) {
    return run_half(k, TR_OP_ALLREDUCE_START, x, ranks, bucket, 1.0f, out, err);
}

int tr_k_allreduce_wait(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                        struct tr_tensor *out, struct tr_error *err) {
    return run_half(k, TR_OP_ALLREDUCE_WAIT, x, ranks, bucket, scale, out, err);
}
