/* Where the library was built without nvcc: the CUDA graph entry points of
 * kernels_cuda.h (cuda/graph.c with CUDA), each failing with "built without CUDA". The
 * book itself (host/graph_book.c) is plain C and works on every build. */
#ifndef TR_HAVE_CUDA
#include "trident/kernels_cuda.h"

static int no_cuda(const char *fn, struct tr_error *err) {
    return tr_error_set(err, TR_ERR_DEVICE, "%s: no CUDA device found (built without CUDA: nvcc was not found, or "
                        "TRIDENT_CUDA=OFF)", fn);
}

int tr_kernels_cuda_capture_begin(struct tr_kernels *k, struct tr_error *err) {
    (void)k;
    return no_cuda("tr_kernels_cuda_capture_begin", err);
}

int tr_kernels_cuda_capture_end(struct tr_kernels *k, void **graph, struct tr_error *err) {
    (void)k;
    if (graph) *graph = NULL;
    return no_cuda("tr_kernels_cuda_capture_end", err);
}

int tr_kernels_cuda_graph_instantiate(void *graph, void **exec, struct tr_error *err) {
    (void)graph;
    if (exec) *exec = NULL;
    return no_cuda("tr_kernels_cuda_graph_instantiate", err);
}

int tr_kernels_cuda_graph_update(void *exec, void *graph, struct tr_error *err) {
    (void)exec, (void)graph;
    return no_cuda("tr_kernels_cuda_graph_update", err);
}

int tr_kernels_cuda_graph_launch(struct tr_kernels *k, void *exec, struct tr_error *err) {
    (void)k, (void)exec;
    return no_cuda("tr_kernels_cuda_graph_launch", err);
}

void tr_kernels_cuda_graph_destroy(void *graph) { (void)graph; }

void tr_kernels_cuda_graph_exec_destroy(void *exec) { (void)exec; }

int tr_kernels_cuda_graph_step(struct tr_kernels *k, struct tr_cuda_graph_book *b, uint64_t owner, const int64_t *sig,
                               int n_sig, uint64_t topo, tr_cuda_step_fn step, void *user, int *captured,
                               struct tr_error *err) {
    (void)k, (void)b, (void)owner, (void)sig, (void)n_sig, (void)topo, (void)step, (void)user;
    if (captured) *captured = 0;
    return no_cuda("tr_kernels_cuda_graph_step", err);
}
#else
typedef int tr_graph_nocuda_unused; /* ISO C wants a translation unit to declare something */
#endif
