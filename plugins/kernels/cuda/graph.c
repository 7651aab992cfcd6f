/* CUDA graphs on a kernels context's stream (kernels_cuda.h): capture, instantiate,
 * update, launch; and the book's step (host/graph_book.c) run with these as its
 * operations. Every CUDA call checked, its error naming the call. */
#include <stdlib.h>
#include "cuda_internal.h"
#include "host/graph_book.h"
#include "trident/kernels_cuda.h"

static cudaStream_t stream_of(struct tr_kernels *k, const char *fn, struct tr_error *err) {
    cudaStream_t s = (cudaStream_t)tr_kernels_cuda_stream(k);
    if (!s) tr_error_set(err, TR_ERR_INVALID, "%s: not a cuda context", fn);
    return s;
}

int tr_kernels_cuda_capture_begin(struct tr_kernels *k, struct tr_error *err) {
    cudaStream_t s = stream_of(k, "tr_kernels_cuda_capture_begin", err);
    if (!s) return TR_ERR_INVALID;
    /* Thread-local: an unsafe call made by another thread (another backend's context)
     * does not invalidate this capture, while this thread's own are refused. */
    return TR_CU_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture", err);
}

int tr_kernels_cuda_capture_end(struct tr_kernels *k, void **graph, struct tr_error *err) {
    *graph = NULL;
    cudaStream_t s = stream_of(k, "tr_kernels_cuda_capture_end", err);
    if (!s) return TR_ERR_INVALID;
    cudaGraph_t g = NULL;
    int rc = TR_CU_CHECK(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture (a call during the capture was refused)", err);
    if (rc != TR_OK) {
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError(); /* the invalidated capture's error is reported, not kept */
        return rc;
    }
    *graph = g;
    return TR_OK;
}

int tr_kernels_cuda_graph_instantiate(void *graph, void **exec, struct tr_error *err) {
    cudaGraphExec_t e = NULL;
    *exec = NULL;
    int rc = TR_CU_CHECK(cudaGraphInstantiate(&e, (cudaGraph_t)graph, 0), "cudaGraphInstantiate", err);
    if (rc == TR_OK) *exec = e;
    return rc;
}

int tr_kernels_cuda_graph_update(void *exec, void *graph, struct tr_error *err) {
    cudaGraphExecUpdateResultInfo info = {0};
    cudaError_t e = cudaGraphExecUpdate((cudaGraphExec_t)exec, (cudaGraph_t)graph, &info);
    if (e == cudaSuccess) return TR_OK;
    (void)cudaGetLastError();
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "cudaGraphExecUpdate: %s: %s (update result %d)", cudaGetErrorName(e),
                        cudaGetErrorString(e), (int)info.result);
}

int tr_kernels_cuda_graph_launch(struct tr_kernels *k, void *exec, struct tr_error *err) {
    cudaStream_t s = stream_of(k, "tr_kernels_cuda_graph_launch", err);
    if (!s) return TR_ERR_INVALID;
    return TR_CU_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, s), "cudaGraphLaunch", err);
}

void tr_kernels_cuda_graph_destroy(void *graph) {
    if (graph) cudaGraphDestroy((cudaGraph_t)graph);
}

void tr_kernels_cuda_graph_exec_destroy(void *exec) {
    if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

/* The step's calls queued into a capture; a failing call ends the capture (discarded),
 * so the stream is never left capturing. */
static int capture_op(struct tr_kernels *k, tr_cuda_step_fn step, void *user, void **graph, struct tr_error *err) {
    int rc = tr_kernels_cuda_capture_begin(k, err);
    if (rc != TR_OK) return rc;
    rc = step(k, user, err);
    void *g = NULL;
    struct tr_error end_err = {0};
    int rc_end = tr_kernels_cuda_capture_end(k, &g, rc == TR_OK ? err : &end_err);
    if (rc != TR_OK) {
        tr_kernels_cuda_graph_destroy(g);
        return tr_error_prefix(err, "capturing a CUDA graph");
    }
    if (rc_end != TR_OK) return rc_end;
    *graph = g;
    return TR_OK;
}

static const struct tr_cuda_graph_ops cuda_graph_ops = {
    .capture = capture_op,
    .instantiate = tr_kernels_cuda_graph_instantiate,
    .update = tr_kernels_cuda_graph_update,
    .launch = tr_kernels_cuda_graph_launch,
    .graph_destroy = tr_kernels_cuda_graph_destroy,
};

int tr_kernels_cuda_graph_step(struct tr_kernels *k, struct tr_cuda_graph_book *b, uint64_t owner, const int64_t *sig,
                               int n_sig, uint64_t topo, tr_cuda_step_fn step, void *user, int *captured,
                               struct tr_error *err) {
    if (captured) *captured = 0;
    if (!stream_of(k, "tr_kernels_cuda_graph_step", err)) return TR_ERR_INVALID;
    return tr_cuda_graph_book_step(b, &cuda_graph_ops, k, owner, sig, n_sig, topo, step, user, captured, err);
}
