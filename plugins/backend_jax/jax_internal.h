/* jax backend — what a compiled program is: its steps, buffers and arena (executor.c
 * builds and runs it). Shared with the tests that link the backend's objects and look
 * inside a program (tests/jax_test.h, test_jax_nvrtc.c); the plugin exports none of it. */
#ifndef TRIDENT_JAX_INTERNAL_H
#define TRIDENT_JAX_INTERNAL_H

#include "jax.h"

#define JAX_ALIGN 64

/* ATTN_BWD: one bound call of the fused attention backward writing every gradient of
 * its group (fusion.attn[attn]) at the place of the group's first node. */
/* ATTN_LSE: one bound call of tr_k_attention_lse (tr_k_attention_rel_lse) writing an
 * ATTENTION's (ATTENTION_REL's) output and its lse node's (fusion.lse_of) at the
 * forward's place. */
enum jax_step_kind {
    JAX_STEP_GEN, JAX_STEP_MATMUL, JAX_STEP_LIB, JAX_STEP_ATTN_BWD, JAX_STEP_ATTN_LSE, JAX_STEP_ADAMW
};

typedef int (*jax_kernel_fn)(void *const *args);

struct jax_step {
    enum jax_step_kind kind;
    int node;                       /* the pir node it writes */
    int cluster;                    /* JAX_STEP_GEN */
    int attn;                       /* JAX_STEP_ATTN_BWD: its group, and its bound call;
                                       ATTN_LSE and ADAMW: its bound call (calls[attn]) */
    struct tr_kernel_call *call;
    jax_kernel_fn fn;
    void **args;
    void *cu_fn;                    /* cuda: the CUfunction, and pointers to each argument */
    void **cu_params;
    int op;                         /* library calls */
    struct tr_attrs attrs;
    int n_in;
    struct tr_tensor in[TR_PIR_MAX_IN];
    struct tr_tensor out;
};

struct tr_jax_program {
    struct tr_jax_context *ctx;
    struct tr_pir pir;
    struct tr_pass_stats passes;
    struct jax_fusion fusion;
    struct tr_kernels *k;
    struct jax_build build;
    int cuda;                       /* device = cuda */
    int sm;                         /* cuda: the architecture the kernels were built for */
    struct jax_cubin cubin;
    struct tr_cuda_module *mod;
    void **cu_params;               /* the steps' cu_params, back to back */
    int *bad;                       /* cuda: the word the gathers flag (device) */
    void *weights;                  /* cuda: CONSTs (and empty PARAMs), copied once (device) */
    char *shared;                   /* cuda, per node: 1 reads, 2 writes the backend's shared param */
    char *source;
    size_t source_len;

    struct jax_step *steps;
    int n_steps;
    struct tr_kernel_call *calls;   /* per attention backward group, bound in bind_steps */
    void **argv;                    /* the generated kernels' argument arrays, back to back */
    struct tr_plan_buf *bufs;
    int n_bufs;
    int *buf_of;                    /* per node: its buffer, or -1 */
    int *root_of;                   /* per node: the node whose storage it is (views) */
    void **ptr;                     /* per node: where its value is */
    void *arena;
    int64_t arena_bytes;

    uint64_t weight_bytes;
    int *donor;                     /* per node: the param it is computed in, or -1 */
    char *donated;                  /* per update */
    int n_donated;
    int n_gen, n_lib;
    double compile_ms;
    uint64_t kernel_calls;          /* last execute */
};

/* The backend's table (jax.c). */
extern const struct tr_backend_i tr_jax_iface;

/* An op's name in messages; JAX_OP_MATMUL_EPI has none in the op table. */
const char *tr_jax_op_str(int op);

/* The nodes whose values step s reads (a kernel's arguments, a call's inputs), into ids. */
void tr_jax_read_nodes(const struct tr_jax_program *p, const struct jax_step *s, int *ids, int *n);

/* The graph read, simplified (with kpasses, a cpu context), fused for the program's
 * target, scheduled and its donations decided: what codegen needs. *step_of: per pir
 * node, its step, or -1 (malloc'd: the caller frees it). */
int tr_jax_front(struct tr_jax_program *p, tr_graph_t g, struct tr_kernels *kpasses, int **step_of,
                 struct tr_error *err);

#endif
