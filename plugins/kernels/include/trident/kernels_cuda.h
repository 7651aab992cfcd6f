/* trident — what the kernels library offers on CUDA beyond kernels.h.
 *
 * A cuda context is made by tr_kernels_init(&k, TR_DEVICE_CUDA, index, err); it owns one
 * stream (every kernel of the context is queued on it, in order), one cuBLASLt handle
 * and workspace for that stream, a cache of GEMM plans keyed by shape, and a caching
 * allocator (trident/cuda_pool.h) that tr_kernels_alloc/dealloc go through. Kernels
 * return once queued; tr_kernels_sync waits for them, and reports a failure of a kernel
 * that ran asynchronously. Tensors given to a cuda context are on TR_DEVICE_CUDA.
 *
 * Where the library was built without nvcc, every function here fails with "built
 * without CUDA" and tr_kernels_init for cuda with "no CUDA device found".
 */
#ifndef TRIDENT_KERNELS_CUDA_H
#define TRIDENT_KERNELS_CUDA_H

#include <stddef.h>
#include "trident/cuda_pool.h"
#include "trident/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On a cuda context every public kernel of kernels.h (tr_k_*, tr_kernels_run) runs its
 * CUDA implementation, and the GEMMs follow tr_kernels_set_math (tf32: f32 products on
 * TF32 tensor cores; default, f32, bf16: strict f32 accumulation).
 *
 * Bound calls (tr_kernels_bind, tr_kernels_bind_*) on a cuda context: bind makes every
 * check once (the messages tr_kernels_run and tr_k_* give), reserves the context's
 * device scratch the call needs and, for a GEMM, makes the cuBLASLt plan (owned by the
 * call). tr_kernels_call then only queues kernels on the context's stream: no
 * allocation, no synchronisation, no copy to the host, so that a sequence of calls can
 * be captured into a CUDA graph (cudaStreamBeginCapture on tr_kernels_cuda_stream).
 * Its host-side argument checks are repeated; they cost no device work. The scratch is
 * one buffer of the context, baked into a captured graph: bind every call of a graph
 * before capturing it (a later bind that needs more scratch moves it), and release
 * calls with tr_kernels_unbind. An embedding id or a label out of range is seen by the
 * kernel and reported by the next tr_kernels_sync. */

/* 1 if this library has the CUDA kernels compiled in (a device may still be absent). */
int tr_kernels_cuda_built(void);

/* The context's stream (a cudaStream_t), for capture into a CUDA graph; NULL on the cpu. */
void *tr_kernels_cuda_stream(const struct tr_kernels *k);

/* The caching allocator's figures (peak device memory among them). */
int tr_kernels_cuda_memory(const struct tr_kernels *k, struct tr_cuda_pool_stats *st, struct tr_error *err);

/* Compiles CUDA C source `src` (a translation unit named `name` in messages) with NVRTC
 * for the architecture sm (80, 90, ...) into a cubin: *cubin (malloc'd, caller frees)
 * of *size bytes. No GPU is needed. On a compile error, TR_ERR_INVALID with the log's
 * start in err; *log (if log is not NULL) gets the whole log, malloc'd, on success or
 * failure (NULL if there is none). */
int tr_cuda_nvrtc_compile(const char *src, const char *name, int sm, void **cubin, size_t *size, char **log,
                          struct tr_error *err);

/* ---- CUDA graphs (cuda/graph.c; the bookkeeping in cuda/host/graph_book.h) ----
 * A step's kernels, queued on the context's stream, captured once as a CUDA graph and
 * replayed with one launch: what reduce-overhead does after its warm-up. Capture runs
 * the step's calls with the stream in capture mode (cudaStreamCaptureModeThreadLocal),
 * so they must not allocate, copy synchronously or synchronise (bound calls do none of
 * these); the work is recorded, not run. Graphs and executable graphs are opaque
 * handles (cudaGraph_t, cudaGraphExec_t). */
int tr_kernels_cuda_capture_begin(struct tr_kernels *k, struct tr_error *err);
/* Ends the capture: *graph (destroy with tr_kernels_cuda_graph_destroy). When the
 * capture was invalidated (a call the stream refused while capturing), the error says so
 * and the stream is no longer capturing. */
int tr_kernels_cuda_capture_end(struct tr_kernels *k, void **graph, struct tr_error *err);
int tr_kernels_cuda_graph_instantiate(void *graph, void **exec, struct tr_error *err);
/* exec takes graph's kernel parameters (cudaGraphExecUpdate): TR_OK, or
 * TR_ERR_UNSUPPORTED with CUDA's reason when the topologies differ. */
int tr_kernels_cuda_graph_update(void *exec, void *graph, struct tr_error *err);
int tr_kernels_cuda_graph_launch(struct tr_kernels *k, void *exec, struct tr_error *err);
void tr_kernels_cuda_graph_destroy(void *graph);
void tr_kernels_cuda_graph_exec_destroy(void *exec);

/* A book of executable graphs keyed by a step's signature (cuda/host/graph_book.h says
 * how it chooses between replay, update and a new instantiation, and evicts). */
struct tr_cuda_graph_book;
struct tr_cuda_graph_stats {
    uint64_t lookups;
    uint64_t replays;                   /* steps launched from a graph already made */
    uint64_t captures;                  /* steps captured */
    uint64_t instantiations;            /* captures that made a new executable graph */
    uint64_t updates;                   /* captures that updated one in place (cudaGraphExecUpdate) */
    uint64_t update_failures;           /* updates refused (then instantiated) */
    uint64_t evictions;                 /* graphs dropped for the book's limit */
    uint64_t orphaned;                  /* graphs whose owner was dropped */
    int n_entries;                      /* graphs held now */
    int max_entries;                    /* the limit */
};
/* The work of one step, queued on k's stream (a list of bound calls). */
typedef int (*tr_cuda_step_fn)(struct tr_kernels *k, void *user, struct tr_error *err);

/* FNV-1a over bytes, chained from h (start with TR_CUDA_GRAPH_HASH_SEED). No CUDA needed. */
#define TR_CUDA_GRAPH_HASH_SEED 0xcbf29ce484222325ull
uint64_t tr_cuda_graph_hash(uint64_t h, const void *bytes, size_t n);

/* The book without CUDA (init, free, drop_owner, stats work on any build: graphs are
 * only made by a step). max_graphs <= 0: the default (8). */
int tr_kernels_cuda_graphs_init(struct tr_cuda_graph_book **out, int max_graphs, struct tr_error *err);
void tr_kernels_cuda_graphs_free(struct tr_cuda_graph_book *b);
/* One step: replayed when (owner, sig, topo) was captured before; else step captured (an
 * executable graph of the same topo updated in place where the book offers one and CUDA
 * takes it, else a new one instantiated) and launched. owner != 0 identifies the caller
 * (a program); sig its input shapes, at most 64 words; topo a hash of its call sequence
 * (tr_cuda_graph_hash). *captured: 1 when this step captured. */
int tr_kernels_cuda_graph_step(struct tr_kernels *k, struct tr_cuda_graph_book *b, uint64_t owner, const int64_t *sig,
                               int n_sig, uint64_t topo, tr_cuda_step_fn step, void *user, int *captured,
                               struct tr_error *err);
/* The owner is gone: its graphs are kept only as candidates for an update. */
void tr_kernels_cuda_graphs_drop_owner(struct tr_cuda_graph_book *b, uint64_t owner);
void tr_kernels_cuda_graphs_stats(const struct tr_cuda_graph_book *b, struct tr_cuda_graph_stats *st);

/* ---- cubins on a context's device (cuda/module.c) ----
 * A module is a cubin (from tr_cuda_nvrtc_compile) loaded into the device of a cuda
 * context; its kernels, looked up by name, are launched on the context's stream, in
 * order with the library's own kernels. Every driver call is checked: an error names the
 * module or kernel and the CUDA message. The driver is reached through the runtime, so
 * the library needs no libcuda to load. */
struct tr_cuda_module;

/* The compute capability of k's device (90 for sm_90): what to compile for. */
int tr_kernels_cuda_sm(const struct tr_kernels *k, int *sm, struct tr_error *err);
/* NVRTC's version (12, 8 for 12.8): a part of any cache key for its output. No GPU needed. */
int tr_cuda_nvrtc_version(int *major, int *minor, struct tr_error *err);
/* Load cubin (size bytes, an ELF image; copied by the driver) into k's device as *out;
 * name is for messages. */
int tr_cuda_module_load(struct tr_kernels *k, const void *cubin, size_t size, const char *name,
                        struct tr_cuda_module **out, struct tr_error *err);
/* The kernel (an extern "C" __global__ function) named kernel in m, as *fn (a CUfunction). */
int tr_cuda_module_kernel(struct tr_cuda_module *m, const char *kernel, void **fn, struct tr_error *err);
/* Queue fn on k's stream: grid and block extents (x, y, z), shmem bytes of dynamic shared
 * memory, params[i] pointing at the i-th argument's value (cuLaunchKernel's
 * kernelParams). kernel names it in messages. Returns once queued. */
int tr_cuda_module_launch(struct tr_kernels *k, struct tr_cuda_module *m, void *fn, const char *kernel,
                          const unsigned grid[3], const unsigned block[3], unsigned shmem, void **params,
                          struct tr_error *err);
/* Unload m (after the kernels queued from it have run: sync first). NULL is a no-op. */
void tr_cuda_module_free(struct tr_cuda_module *m);

#ifdef __cplusplus
}
#endif
#endif
