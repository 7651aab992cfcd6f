/* torch backend — private declarations shared by its modules.
 *
 *   torch.c      the entry point, the vtable, options, init/free, supports_op, stats
 *   eager.c      compile (the graph read into the backend's own arrays) and the eager
 *                executor (one kernel call per node, outputs from the caching allocator)
 *   replay.c     mode = reduce-overhead: warm-up, one step recorded as bound kernel
 *                calls over static buffers, then replayed (on cuda: captured once as a
 *                CUDA graph and launched)
 *   program.h    the compiled program those two share
 *   allocator.c  the caching allocator (allocator.h)
 *
 * Nothing here is exported: the .so is built with hidden visibility and a version
 * script that keeps only tr_backend_entry.
 */
#ifndef TRIDENT_TORCH_H
#define TRIDENT_TORCH_H

#include <stdint.h>
#include "trident/backend.h"

enum tr_torch_mode {
    TR_TORCH_MODE_EAGER = 0,
    TR_TORCH_MODE_REDUCE_OVERHEAD = 1,  /* eager warm-up, one step recorded, then replayed */
};

#define TR_TORCH_WARMUP_DEFAULT 1
#define TR_TORCH_WARMUP_MAX 1000000

struct tr_cuda_graph_book;
struct tr_resident_store;

/* One initialised backend (the ctx of the vtable). */
struct tr_torch_context {
    const struct tr_host_api *host;
    int device_type;                /* enum tr_device_type */
    int device_index;
    enum tr_torch_mode mode;
    int threads;                    /* OpenMP threads while executing; 0: leave as is */
    int warmup_steps;               /* reduce-overhead: eager steps before the recording */
    int math;                       /* enum tr_math, from the params; set on every kernels context */
    /* cuda, reduce-overhead: the captured CUDA graphs of this backend's programs, keyed
     * by (program serial, input shapes); made at the first capture */
    struct tr_cuda_graph_book *graphs;
    uint64_t next_serial;           /* programs compiled so far: the next one's serial - 1 */
    /* cuda: the PARAMs' device memory, shared by this backend's programs by host memory
     * (resident.h); made by the first upload, gone with the last program using it */
    struct tr_resident_store *params;
};

struct tr_torch_program;

/* The backend's table (torch.c). */
extern const struct tr_backend_i tr_torch_iface;

/* Read g through the host table into a program; creates its kernels context and pool. */
int tr_torch_compile(struct tr_torch_context *ctx, tr_graph_t g, struct tr_torch_program **out,
                     struct tr_error *err);
/* One step: inputs and outputs are host tensors in the graph's input and output order. */
int tr_torch_execute(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                     struct tr_tensor *outputs, struct tr_error *err);
void tr_torch_program_free(struct tr_torch_program *p);
/* Counters of the last execute, peak memory and a notes line (mode is filled by the caller). */
void tr_torch_program_stats(const struct tr_torch_program *p, struct tr_backend_stats *st);
/* ABI 1.1 sync: on cuda, every updated PARAM's device copy into its host memory; on the
 * cpu the host memory is where the updates were made, so nothing. */
int tr_torch_sync(struct tr_torch_program *p, struct tr_error *err);

#endif
