/* tf backend — private declarations shared by its modules.
 *
 *   tf.c        the entry point, the vtable, options, init/free, supports_op, stats
 *   remap.c     the rewrite pass (grappler's remapper): patterns of the plugin IR
 *               replaced by fused nodes (the TF_OP_* codes below)
 *   executor.c  compile (IR, passes, remap, schedule, arena plan, bound calls) and the
 *               static executor
 *
 * Graph mode as TensorFlow 1.x / tf.function runs it: the whole graph is known before
 * the first step, rewritten once, and every buffer placed once; a step is the fixed
 * schedule run over the fixed arena. Nothing here is exported.
 */
#ifndef TRIDENT_TF_H
#define TRIDENT_TF_H

#include <stdint.h>
#include "pir.h"
#include "trident/backend.h"

/* The fused ops of the remapper: backend-private op codes of the plugin IR.
 *
 *   GEMM        in: a, b, [bias (N)]            ints[0]=trans_a ints[1]=trans_b
 *               ints[2]=enum tr_act ints[3]=has_bias floats[0]=alpha
 *               c = act(alpha·op(a)·op(b) + bias): tr_k_matmul with its epilogue
 *   BIAS_RESIDUAL_LN  in: x, gamma, beta, [bias (D)], [residual]    ints[0]=has_bias
 *               ints[1]=has_residual floats[0]=eps: tr_k_bias_residual_layer_norm
 *   SCALE_MASK_SOFTMAX  in: x, [mask]           ints[0]=has_mask floats[0]=scale
 *               softmax(scale·x + mask): tr_k_scale_mask_softmax
 *   EMBED_LN    in: table_0..table_{n-1}, ids_0..ids_{n-1}, gamma, beta
 *               ints[0]=n floats[0]=eps: tr_k_embedding_sum_layer_norm
 *   ATTN_BWD    in: q, k, v, dy, [mask]         floats[0]=scale ints[0]=causal ints[1]=window
 *               ints[2]=which of dq/dk/dv is its own value ints[3]=has_mask:
 *               tr_k_attention_backward, writing the other gradients into the buffers
 *               of its EXTRA_OUT nodes
 *   ATTN_LSE    in: q, k, v, [mask]             ATTENTION's attrs: the ATTENTION node
 *               whose ATTENTION_LSE (autodiff's, for the backward) became its EXTRA_OUT:
 *               tr_k_attention_lse, both in one pass; with ints[4]=1 an ATTENTION_REL
 *               (in: q, k, v, rel_h, rel_w) and its ATTENTION_REL_LSE:
 *               tr_k_attention_rel_lse
 *   ADAMW       in: param, m, v, grad, lr, t     floats[0..3]=β1, β2, eps, wd ints[0]=which
 *               of param', m', v' (0, 1, 2) is its own value: AdamW's update of one
 *               parameter (adamw_group.h), tr_k_adamw_update, writing the other two
 *               into its EXTRA_OUT nodes (in the params' memory when donated)
 *   EXTRA_OUT   in: the node that writes it      ints[0]=which (0 dq, 1 dk, 2 dv; 0 the
 *               lse of ATTN_LSE; ADAMW's): no kernel of its own; its buffer (or, for a
 *               donated update, its param's memory) is written at its producer's step
 * An unfused attention block becomes the graph's own ATTENTION op (the tiled kernel). */
enum tf_op {
    TF_OP_GEMM = TR_PIR_OP_PRIVATE,
    TF_OP_BIAS_RESIDUAL_LN,
    TF_OP_SCALE_MASK_SOFTMAX,
    TF_OP_EMBED_LN,
    TF_OP_ATTN_BWD,
    TF_OP_ATTN_LSE,
    TF_OP_EXTRA_OUT,
    TF_OP_ADAMW,
    TF_OP_END,
};

/* How many nodes each pattern made, by name ("gemm+bias+gelu"), in order of first use. */
#define TF_MAX_PATTERNS 24
struct tf_fusions {
    int n;
    struct {
        char name[32];
        int count;
    } kind[TF_MAX_PATTERNS];
    int nodes_removed;          /* pattern nodes that went away */
};

/* Rewrite p in place: fused nodes replace their patterns (roots overwritten, absorbed
 * nodes marked dead; call tr_pir_compact after). A pattern whose intermediate results
 * have another consumer, or are graph outputs, is left as it is. */
int tf_remap(struct tr_pir *p, struct tf_fusions *f, struct tr_error *err);
/* "gemm+bias+gelu x2, gemm+bias x7" into buf ("none" when nothing was fused). */
const char *tf_fusions_str(const struct tf_fusions *f, char *buf, size_t n);
const char *tf_op_name(int op);

struct tr_resident_store;

/* One initialised backend (the ctx of the vtable). */
struct tf_context {
    const struct tr_host_api *host;
    int device_type;
    int device_index;
    int mode;                       /* 0: graph, the only mode (options accept `mode = graph`) */
    int fuse;                       /* run the remapper */
    int simplify;                   /* run the cheap passes (cse, dce) first */
    int threads;                    /* OpenMP threads while executing; 0: leave as is */
    int math;                       /* enum tr_math, from the params; set on every kernels context */
    /* cuda: the PARAMs' device memory, shared by this backend's programs by host memory
     * (resident.h); made by the first upload, gone with the last program using it */
    struct tr_resident_store *params;
};

struct tf_program;

/* The backend's table (tf.c). */
extern const struct tr_backend_i tr_tf_iface;

int tf_compile(struct tf_context *ctx, tr_graph_t g, struct tf_program **out, struct tr_error *err);
/* One step, with the context's OpenMP thread count (threads = N) while it runs. */
int tf_execute(struct tf_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
               struct tr_tensor *outputs, struct tr_error *err);
void tf_program_free(struct tf_program *p);
void tf_program_stats(const struct tf_program *p, struct tr_backend_stats *st);
/* ABI 1.1 sync: on cuda, every updated PARAM's device copy into its host memory; on the
 * cpu nothing (the updates were made there). */
int tf_sync(struct tf_program *p, struct tr_error *err);
/* Whether the executor has a kernel for op on dtype (graph ops and TF_OP_*). */
int tf_runs_op(int op, int dtype);

#endif
