/* ALLREDUCE (ops.h) on a cuda context. With NCCL (found at build: TR_HAVE_NCCL) the sum
 * runs on the context's stream, so a CUDA graph may capture it; each context makes its
 * NCCL communicator at its first ALLREDUCE, the id from rank 0 over the host's
 * communicator (host/nccl_id.c). Without NCCL the buffer goes through host memory and the
 * host's communicator (MPI), which a capture cannot hold: refused while capturing. Then
 * the scale, as SCALE. The dry run of a bind checks and queues nothing, collective
 * included. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/cuda_entry.h"
#include "host/nccl_id.h"
#ifdef TR_HAVE_NCCL
#include <nccl.h>

static int make_id(void *id, void *user) {
    (void)user;
    return (int)ncclGetUniqueId((ncclUniqueId *)id);
}

static int nccl_sum(struct tr_cuda_ctx *c, const struct tr_comm *comm, float *buf, int64_t n, struct tr_error *err) {
    if (!c->nccl) {
        ncclUniqueId id;
        int rc = tr_cuda_nccl_share_id(comm, make_id, NULL, &id, sizeof id, err);
        if (rc) return rc;
        ncclComm_t nc;
        ncclResult_t r = ncclCommInitRank(&nc, comm->size, id, comm->rank);
        if (r != ncclSuccess)
            return tr_error_set(err, TR_ERR_DEVICE, "nccl: ncclCommInitRank (rank %d of %d): %s", comm->rank,
                                comm->size, ncclGetErrorString(r));
        c->nccl = nc;
        /* said once a context: which transport a GPU run's sums took is otherwise unseen */
        fprintf(stderr, "trident: rank %d: all-reduces through NCCL (a communicator of %d rank%s)\n", comm->rank,
                comm->size, comm->size == 1 ? "" : "s");
    }
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, (ncclComm_t)c->nccl, c->stream);
    if (r != ncclSuccess)
        return tr_error_set(err, TR_ERR_DEVICE, "nccl: ncclAllReduce of %lld floats: %s", (long long)n,
                            ncclGetErrorString(r));
    return TR_OK;
}

void tr_cuda_nccl_free(struct tr_cuda_ctx *c) {
    if (c && c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    if (c) c->nccl = NULL;
}
#else
void tr_cuda_nccl_free(struct tr_cuda_ctx *c) { (void)c; }

/* Through host memory: the stream drained, the sum on the host, back to the device. */
static int staged_sum(struct tr_cuda_ctx *c, const struct tr_comm *comm, float *buf, int64_t n, int tag,
                      struct tr_error *err) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "allreduce: this build has no NCCL, and a sum through host "
                            "memory cannot be captured in a CUDA graph (use torch's eager mode, tf or jax)");
    static atomic_int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "trident: rank %d: all-reduces through host memory and the host's communicator (this build "
                "found no NCCL)\n", comm->rank);
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return tr_error_set(err, TR_ERR_NOMEM, "allreduce: no host memory for %lld floats", (long long)n);
    size_t bytes = (size_t)n * sizeof *h;
    int rc = TR_CU_CHECK(cudaMemcpyAsync(h, buf, bytes, cudaMemcpyDeviceToHost, c->stream), "allreduce: to host", err);
    if (!rc) rc = TR_CU_CHECK(cudaStreamSynchronize(c->stream), "allreduce: to host", err);
    if (!rc) rc = comm->allreduce_f32(comm->user, h, n, tag, err);
    if (!rc) rc = TR_CU_CHECK(cudaMemcpyAsync(buf, h, bytes, cudaMemcpyHostToDevice, c->stream), "allreduce: back", err);
    if (!rc) rc = TR_CU_CHECK(cudaStreamSynchronize(c->stream), "allreduce: back", err);
    free(h);
    return rc;
}
#endif

int tr_cuda_run_allreduce(struct tr_cuda_ctx *c, int op, const struct tr_attrs *at, const struct tr_tensor *x,
                          struct tr_tensor *out, struct tr_error *err) {
    char d1[200], d2[200];
    if (x->dtype != TR_DTYPE_F32 || out->dtype != TR_DTYPE_F32 || !tr_cpu_same_shape(x, out) ||
        x->device != TR_DEVICE_CUDA || out->device != TR_DEVICE_CUDA)
        return tr_error_set(err, TR_ERR_SHAPE, "allreduce: x %s and out %s should be f32 of one shape on cuda",
                            tr_cpu_desc(x, d1, sizeof d1), tr_cpu_desc(out, d2, sizeof d2));
    const struct tr_comm *comm = tr_kernels_get_comm();
    const int64_t have = comm ? comm->size : 1, n = tr_tensor_numel(x);
    if (at->ints[0] != have)
        return tr_error_set(err, TR_ERR_INVALID, "allreduce (bucket %lld): the graph was built for %lld ranks and "
                            "this run has %lld", (long long)at->ints[1], (long long)at->ints[0], (long long)have);
    if (c->dry || n == 0) return TR_OK;
    int rc = TR_OK;
    if (out->data != x->data)
        rc = TR_CU_CHECK(cudaMemcpyAsync(out->data, x->data, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                         c->stream), "allreduce: copy", err);
    /* START sums at once, on the stream (the overlap is the stream's, not a host thread's);
     * WAIT only scales */
    if (!rc && comm && op != TR_OP_ALLREDUCE_WAIT) { /* of one rank too: the path checked without peers */
#ifdef TR_HAVE_NCCL
        rc = nccl_sum(c, comm, out->data, n, err);
#else
        rc = staged_sum(c, comm, out->data, n, (int)at->ints[1], err);
#endif
    }
    if (!rc && op != TR_OP_ALLREDUCE_START && at->floats[0] != 1.0f)
        rc = tr_cu_unary(c->stream, TR_OP_SCALE, TR_DTYPE_F32, out->data, out->data, n, at->floats[0], 0.0f, 0, err);
    return rc;
}
