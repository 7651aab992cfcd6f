/* torch backend — the compiled program, shared by the eager executor (eager.c) and the
 * reduce-overhead recorder and replayer (replay.c). Private to the plugin. */
#ifndef TRIDENT_TORCH_PROGRAM_H
#define TRIDENT_TORCH_PROGRAM_H

#include <stdint.h>
#include "adamw_group.h"
#include "allocator.h"
#include "attn_group.h"
#include "pir.h"
#include "stats.h"
#include "torch.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

enum torch_kind {
    TORCH_INPUT,        /* bound to the caller's tensor (eager) or a static buffer (replay) */
    TORCH_WEIGHT,       /* PARAM or CONST: the graph's host data */
    TORCH_VIEW,         /* RESHAPE: its input's buffer */
    TORCH_KERNEL,       /* one kernel call into a pool block */
};

struct torch_node {
    int op;
    enum torch_kind kind;
    int in_off, n_in;               /* into prog->in_ids */
    int root;                       /* node whose buffer holds the data */
    int uses;                       /* consumer edges + times it is a graph output */
    struct tr_attrs attrs;
    struct tr_tensor t;             /* shape, dtype, strides; data bound per step */
    size_t nbytes;
    int shared;                     /* cuda: 0 its own block; 1 a reader, 2 a writer of the backend's shared param */
    int lse;                        /* an ATTENTION (ATTENTION_REL): its ATTENTION_LSE
                                       (ATTENTION_REL_LSE), computed by its call (as SDPA
                                       returns its logsumexp); that node: its forward; else -1 */
    int attn;                       /* an attention gradient run in its group's one call (as
                                       SDPA's backward returns dq, dk and dv): the group's
                                       index in attn_groups; else -1 */
    int linear;                     /* F.linear as PyTorch runs it, one addmm (GEMM + bias,
                                       rounded once): in the ADD, its MATMUL's id; in the
                                       MATMUL, -2 (its call is the ADD's); else -1 */
    int adamw;                      /* AdamW as PyTorch's AdamW(fused=True) runs it, one call
                                       per parameter (adamw_group.h): in the ADAMW_STEP, its
                                       group's index in adamw_groups; in the group's other
                                       nodes, -2 (the step's call computes them); else -1 */
};

/* The gradient nodes of one attention (attn_group.h), computed by one call at the lead. */
struct torch_attn_group {
    int lead;                       /* the lowest id: where the call runs */
    int grad[TR_ATTN_GRADS];        /* gradient w's node, or -1 */
    int n;                          /* how many */
};

/* What reduce-overhead records once and replays (replay.c). */
struct torch_replay {
    int steps;                      /* executes that succeeded, warm-up included */
    int recorded;                   /* the list below is live */
    int record_step;                /* 1-based step that recorded it */
    double record_ms;               /* its wall time: binds (checks, primitives) + the step */
    struct tr_kernel_call *calls;   /* in program order; RESHAPE views are not calls */
    int *call_node;                 /* the node of each call, for messages */
    int n_calls;
    int recording;                  /* the eager walk binds (and calls) instead of running */
    struct tr_torch_block **inputs; /* static input buffers, per graph input */
    void **out_src;                 /* where each graph output lies in static memory */
    struct tr_torch_block **held;   /* every block the recorded step used, held for good */
    int n_held;
    uint64_t static_bytes;          /* held + inputs (rounded block sizes) */
    uint64_t replays;
    /* cuda: replays run as one CUDA graph (ctx->graphs, keyed by this program's serial) */
    uint64_t topo;                  /* hash of the recorded call sequence */
    int graph_capture_step;         /* 1-based step that captured it, 0 before */
    double graph_capture_ms;        /* capture + instantiate (or update) + launch */
};

struct tr_torch_program {
    struct tr_torch_context *ctx;
    uint64_t serial;                /* 1, 2, ... per backend context: the CUDA graphs' owner */
    int on_cuda;                    /* weights uploaded, inputs copied in, updates kept on the device */
    tr_graph_t g;                   /* alive until program_free */
    struct tr_pir pir;              /* the graph as read, once: names, shapes, weights' host data */
    int n_nodes;
    struct torch_node *nodes;
    int *in_ids;
    int n_graph_in, n_graph_out;
    int *graph_in, *graph_out;      /* node ids; graph_out[n_graph_out + u] is update u's value */
    /* Updates (training state): update u's value overwrites PARAM update_param[u] after
     * a step; a donated one is computed in the param's memory (donor[value] = param),
     * the others are copied there after the walk, as outputs are copied out. */
    int n_updates, n_donated;
    int *update_param;
    char *donated;
    int *donor;                     /* per node: the param whose memory it computes in, or -1 */
    struct tr_kernels *k;
    struct tr_torch_allocator *pool;
    uint64_t weight_bytes;
    int weights_uploaded;           /* cuda: data[id] of every weight is a device block (shared or its own) */
    int n_kernel_nodes;
    struct torch_attn_group *attn_groups;
    int n_attn_groups;
    int n_linear;                   /* MATMUL + bias ADD pairs run as one addmm */
    struct tr_adamw_group *adamw_groups;
    int n_adamw;

    /* per step */
    void **data;                    /* per node */
    int *pending;                   /* consumers still to run, per node */
    int *refs;                      /* live nodes per root */
    struct tr_torch_block **blocks; /* per root; NULL when it holds none */
    struct tr_tensor *args;         /* the bound inputs of one call */
    int max_in;

    struct torch_replay rp;

    /* last execute */
    uint64_t kernel_calls, hits, misses;
};

const char *tr_torch_node_name(const struct tr_torch_program *p, int id);
/* The counts, shapes, dtypes and placement of execute's arguments against the graph. */
int tr_torch_check_args(const struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs,
                        int n_outputs, const struct tr_tensor *outputs, struct tr_error *err);
/* One eager pass over the nodes, graph inputs' data already in p->data: outputs from the
 * pool, each freed after its last reader; graph outputs still held when it returns. With
 * p->rp.recording set, each kernel node is bound (tr_torch_record_call) and called. */
int tr_torch_walk(struct tr_torch_program *p, struct tr_error *err);
/* Graph outputs copied out of p->data and the updates not donated copied into their
 * params, then released as the walk would. */
int tr_torch_copy_outputs(struct tr_torch_program *p, int n_outputs, struct tr_tensor *outputs, struct tr_error *err);
/* One eager step: the caller's inputs used in place, every block back to its pool after
 * (after a failure too, so the next step starts from the same state). */
int tr_torch_execute_eager(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                           struct tr_tensor *outputs, struct tr_error *err);
/* Every block the walk still holds back to its pool. */
void tr_torch_release_all(struct tr_torch_program *p);
/* The updates not donated: value copied into its param (src[u]: where the value is; src
 * NULL: where this step's walk put it). */
int tr_torch_copy_updates(struct tr_torch_program *p, void *const *src, struct tr_error *err);
/* cuda: the caller's inputs copied into pool blocks (p->data, p->blocks), released as
 * the walk drops them; on the cpu they are bound in place. */
int tr_torch_bind_inputs(struct tr_torch_program *p, const struct tr_tensor *inputs, struct tr_error *err);

/* ---- reduce-overhead (replay.c) ---- */
/* A step: eager while warming up, then the recording step, then replays. */
int tr_torch_ro_execute(struct tr_torch_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                        struct tr_tensor *outputs, struct tr_error *err);
int tr_torch_record_call(struct tr_torch_program *p, int id, const struct tr_tensor *out, struct tr_error *err);
/* The same for an ATTENTION (ATTENTION_REL) node with its lse node (nodes[id].lse): one bound call. */
int tr_torch_record_pair(struct tr_torch_program *p, int id, const struct tr_tensor *out, const struct tr_tensor *lse,
                         struct tr_error *err);
/* The same for a linear (nodes[id].linear): one bound GEMM with its bias, a, b and the
 * bias in p->args[0..2]. */
int tr_torch_record_linear(struct tr_torch_program *p, int id, const struct tr_tensor *out, struct tr_error *err);
/* The same for attention gradient group g (attn_groups[g]), its gradients' tensors in
 * grads: one bound call of the fused backward. */
int tr_torch_record_group(struct tr_torch_program *p, int g, const struct tr_tensor *const grads[TR_ATTN_GRADS],
                          struct tr_error *err);
/* The same for AdamW group g (adamw_groups[g]): one bound tr_k_adamw_update, its operands
 * in p->args[0..5] (param, m, v, grad, lr, t), p2 in out, m2 and v2 in m2, v2. */
int tr_torch_record_adamw(struct tr_torch_program *p, int g, const struct tr_tensor *out, const struct tr_tensor *m2,
                          const struct tr_tensor *v2, struct tr_error *err);
void tr_torch_replay_free(struct tr_torch_program *p);
/* Appends the replay's facts to notes. */
void tr_torch_replay_notes(const struct tr_torch_program *p, char *notes, size_t size);

#endif
