/* ALLREDUCE and its halves (ops.h) on a cuda context. With NCCL (found at build:
 * TR_HAVE_NCCL) ALLREDUCE sums on the context's stream and ALLREDUCE_START on a stream of
 * its own that its WAIT joins (so the backward pass overlaps it), both capturable in a
 * CUDA graph; each context makes its
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

static int nccl_comm(struct tr_cuda_ctx *c, const struct tr_comm *comm, struct tr_error *err) {
    if (c->nccl) return TR_OK;
    ncclUniqueId id;
    int rc = tr_cuda_nccl_share_id(comm, make_id, NULL, &id, sizeof id, err);
    if (rc) return rc;
    /* NCCL binds the communicator to the calling thread's current device: make it this
     * context's (another context or thread may have changed it since init) */
    if ((rc = TR_CU_CHECK(cudaSetDevice(c->device), "nccl: cudaSetDevice", err)) != TR_OK) return rc;
    ncclComm_t nc;
    ncclResult_t r = ncclCommInitRank(&nc, comm->size, id, comm->rank);
    if (r != ncclSuccess)
        return tr_error_set(err, TR_ERR_DEVICE, "nccl: ncclCommInitRank (rank %d of %d): %s", comm->rank, comm->size,
                            ncclGetErrorString(r));
    c->nccl = nc;
    /* said once a context: which transport a GPU run's sums took is otherwise unseen */
    fprintf(stderr, "trident: rank %d: all-reduces through NCCL (a communicator of %d rank%s), started on a stream of "
            "their own\n", comm->rank, comm->size, comm->size == 1 ? "" : "s");
    return TR_OK;
}

static int nccl_sum(struct tr_cuda_ctx *c, float *buf, int64_t n, cudaStream_t s, struct tr_error *err) {
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, ncclFloat32, ncclSum, (ncclComm_t)c->nccl, s);
    if (r != ncclSuccess)
        return tr_error_set(err, TR_ERR_DEVICE, "nccl: ncclAllReduce of %lld floats: %s", (long long)n,
                            ncclGetErrorString(r));
    return TR_OK;
}

/* ALLREDUCE_START's sums on a stream of their own, so that the backward pass's kernels on
 * the context's stream run while NCCL moves the buckets: the side stream waits for the
 * bucket (an event recorded where the START stands), its WAIT makes the context's stream
 * wait for the sum (an event recorded after it). A CUDA graph captures the fork and the
 * join as edges. More sums in flight than slots: the rest sum at once on the stream. */
#define SIDE_SLOTS 64
struct tr_cuda_side {
    cudaStream_t stream;
    cudaEvent_t ready[SIDE_SLOTS], done[SIDE_SLOTS];
    const void *buf[SIDE_SLOTS];    /* the sum in flight in the slot; NULL: free */
};

static void side_free(struct tr_cuda_side *sd) {
    if (!sd) return;
    if (sd->stream) (void)cudaStreamSynchronize(sd->stream); /* teardown: nothing to report to */
    for (int i = 0; i < SIDE_SLOTS; i++) {
        if (sd->ready[i]) (void)cudaEventDestroy(sd->ready[i]);
        if (sd->done[i]) (void)cudaEventDestroy(sd->done[i]);
    }
    if (sd->stream) (void)cudaStreamDestroy(sd->stream);
    free(sd);
}

static int side_of(struct tr_cuda_ctx *c, struct tr_cuda_side **out, struct tr_error *err) {
    if (!c->side) {
        struct tr_cuda_side *sd = calloc(1, sizeof *sd);
        if (!sd) return tr_error_set(err, TR_ERR_NOMEM, "allreduce: out of memory");
        int rc = TR_CU_CHECK(cudaStreamCreateWithFlags(&sd->stream, cudaStreamNonBlocking),
                             "allreduce: the sums' stream", err);
        for (int i = 0; i < SIDE_SLOTS && !rc; i++) {
            rc = TR_CU_CHECK(cudaEventCreateWithFlags(&sd->ready[i], cudaEventDisableTiming), "allreduce: event", err);
            if (!rc)
                rc = TR_CU_CHECK(cudaEventCreateWithFlags(&sd->done[i], cudaEventDisableTiming), "allreduce: event",
                                 err);
        }
        if (rc) {
            side_free(sd);
            return rc;
        }
        c->side = sd;
    }
    *out = c->side;
    return TR_OK;
}

/* START: the sum of buf on the side stream (or at once, on the stream, with no slot free). */
static int nccl_start(struct tr_cuda_ctx *c, float *buf, int64_t n, struct tr_error *err) {
    struct tr_cuda_side *sd = NULL;
    int rc = side_of(c, &sd, err);
    if (rc) return rc;
    int i = 0;
    while (i < SIDE_SLOTS && sd->buf[i]) i++;
    if (i == SIDE_SLOTS) return nccl_sum(c, buf, n, c->stream, err);
    rc = TR_CU_CHECK(cudaEventRecord(sd->ready[i], c->stream), "allreduce: the bucket's event", err);
    if (!rc) rc = TR_CU_CHECK(cudaStreamWaitEvent(sd->stream, sd->ready[i], 0), "allreduce: the sums' stream", err);
    if (!rc) rc = nccl_sum(c, buf, n, sd->stream, err);
    if (!rc) rc = TR_CU_CHECK(cudaEventRecord(sd->done[i], sd->stream), "allreduce: the sum's event", err);
    if (!rc) sd->buf[i] = buf;
    return rc;
}

/* WAIT: the stream waits for buf's sum (nothing when it was summed at once). */
static int nccl_wait(struct tr_cuda_ctx *c, const void *buf, struct tr_error *err) {
    struct tr_cuda_side *sd = c->side;
    for (int i = 0; sd && i < SIDE_SLOTS; i++)
        if (sd->buf[i] == buf) {
            sd->buf[i] = NULL;
            return TR_CU_CHECK(cudaStreamWaitEvent(c->stream, sd->done[i], 0), "allreduce: the wait for a sum", err);
        }
    return TR_OK;
}

void tr_cuda_nccl_free(struct tr_cuda_ctx *c) {
    if (!c) return;
    side_free(c->side);
    c->side = NULL;
    if (c->nccl) ncclCommDestroy((ncclComm_t)c->nccl);
    c->nccl = NULL;
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
#ifdef TR_HAVE_NCCL
    /* WAIT first joins the sum (into x, START's out), then copies */
    if (comm && op == TR_OP_ALLREDUCE_WAIT) rc = nccl_wait(c, x->data, err);
#endif
    if (!rc && out->data != x->data)
        rc = TR_CU_CHECK(cudaMemcpyAsync(out->data, x->data, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                         c->stream), "allreduce: copy", err);
    /* of one rank too (a communicator set): the path checked without peers */
    if (!rc && comm && op != TR_OP_ALLREDUCE_WAIT) {
#ifdef TR_HAVE_NCCL
        rc = nccl_comm(c, comm, err);
        if (!rc)
            rc = op == TR_OP_ALLREDUCE_START ? nccl_start(c, out->data, n, err) : nccl_sum(c, out->data, n, c->stream, err);
#else
        rc = staged_sum(c, comm, out->data, n, (int)at->ints[1], err); /* START sums at once; WAIT only scales */
#endif
    }
    if (!rc && op != TR_OP_ALLREDUCE_START && at->floats[0] != 1.0f)
        rc = tr_cu_unary(c->stream, TR_OP_SCALE, TR_DTYPE_F32, out->data, out->data, n, at->floats[0], 0.0f, 0, err);
    return rc;
}
