/* tf backend — what a compiled program is: its bound steps, buffers and arena
 * (executor.c builds and runs it). Shared with test_tf_backend, which links the backend's
 * objects and checks the plan of every compiled graph; the plugin exports none of it. */
#ifndef TRIDENT_TF_INTERNAL_H
#define TRIDENT_TF_INTERNAL_H

#include "plan.h"
#include "tf.h"
#include "trident/kernels.h"

#define TF_ALIGN 64

/* One kernel call of the schedule, bound (checked once, its kernel picked, a GEMM's
 * oneDNN primitive made for its shapes and pointers): graph ops by tr_kernels_bind,
 * fused ops by the tr_kernels_bind_* of their kernel. */
struct tf_step {
    int node;                           /* IR node it computes */
    int bound;                          /* made by tr_kernels_bind: release with unbind */
    struct tr_kernel_call call;
};

struct tf_program {
    struct tf_context *ctx;
    tr_graph_t g;
    struct tr_pir pir;
    int graph_nodes;                    /* in the host's graph, before any pass */
    int cse_merged, dce_removed;        /* by the cheap passes, before the remapper */
    struct tf_fusions fus;
    struct tr_kernels *k;

    struct tf_step *steps;
    int n_steps;
    void **data;                        /* per IR node: where its value lives */
    char *donated;                      /* per update: computed in its param's memory */
    int *donor;                         /* per IR node: the param it is computed in, or -1 */
    int n_donated;
    int *buf_of;                        /* per IR node: its arena buffer, -1 for host memory */
    struct tr_plan_buf *bufs;
    int n_bufs;
    int64_t arena_bytes;
    void *arena;
    uint64_t weight_bytes;
    int on_cuda;
    void *weights_dev;                  /* cuda: the CONSTs (and empty PARAMs), uploaded at compile */
    char *shared;                       /* cuda, per IR node: 1 reads, 2 writes the backend's shared param */

    /* last execute */
    uint64_t kernel_calls;
};

#endif
