/* jax backend — private declarations shared by its modules.
 *
 * A whole-graph compiler in the spirit of XLA on the cpu:
 *
 *   jax.c       the entry point, the vtable, options ([backend.jax] cache_dir, cc, fuse),
 *               init/free, supports_op, stats
 *   fuse.c      GEMM epilogues folded into the matmul call (bias, alpha, activation), then
 *               fusion: maximal clusters of elementwise ops, gathers and at most one
 *               row-wise reduction (softmax, layer norm, sum/mean/max over the last
 *               axis) become one generated kernel each
 *   codegen.c   one C source for the whole graph, one function per cluster
 *   compile.c   the cache on disk, the system C compiler, dlopen
 *   executor.c  compile() end to end (passes, fusion, codegen, build, buffer assignment
 *               into one arena, the flat schedule) and execute()
 *
 * What runs as a library call (as XLA calls cuBLAS/cuDNN): MATMUL (with its folded
 * epilogue) and ATTENTION; layout ops (TRANSPOSE, SLICE, CONCAT), reductions over an
 * axis other than the last, casts to integers and anything in f16. RESHAPE is a view.
 * EMBEDDING is generated (a gather inside a fused kernel) when its table is f32/bf16.
 *
 * Nothing here is exported: the .so keeps only tr_backend_entry.
 */
#ifndef TRIDENT_JAX_H
#define TRIDENT_JAX_H

#include <stdint.h>
#include "pir.h"
#include "passes.h"
#include "plan.h"
#include "trident/backend.h"
#include "trident/kernels.h"

#define JAX_PATH_MAX 4096
#define JAX_WHERE_MAX 512

/* c = act(alpha · op(a) · op(b) + bias): in a, b, [bias]; ints[0] trans_a, ints[1] trans_b,
 * ints[2] enum tr_act; floats[0] alpha. */
#define JAX_OP_MATMUL_EPI (TR_PIR_OP_PRIVATE + 1)

/* One initialised backend (the ctx of the vtable). */
struct tr_jax_context {
    const struct tr_host_api *host;
    int device_type;
    int device_index;
    int fuse;                            /* 0: every fusable op its own kernel, no epilogues */
    char cache_dir[JAX_PATH_MAX];        /* "" until resolved at the first compile */
    char cache_dir_key[JAX_WHERE_MAX];   /* how it was chosen, for messages */
    char cc[JAX_PATH_MAX];
    char cc_key[JAX_WHERE_MAX];
    /* counters over the backend's life (tests read them) */
    uint64_t cache_hits, cache_misses, cc_runs;
};

/* ---- fuse.c ---- */

enum jax_kind {
    JAX_K_EW = 0,         /* elementwise (and gathers) over an iteration space */
    JAX_K_SOFTMAX,
    JAX_K_LAYER_NORM,
    JAX_K_SUM,
    JAX_K_MEAN,
    JAX_K_MAX,
};

/* One generated kernel: its members are pir nodes; only root is stored. */
struct jax_cluster {
    enum jax_kind kind;
    int root;                       /* the node whose value the kernel writes */
    int red;                        /* the reduction member, or -1 */
    int *members;                   /* ascending node ids, root last */
    int n_members;
    int ndim;                       /* the iteration space: the root's shape, or the */
    int64_t shape[TR_MAX_DIMS];     /* reduction's input shape */
    int *args;                      /* filled by codegen: pointer arguments (node ids), root last */
    int n_args;
    int fn;                         /* filled by codegen: runs as "trj_k<fn>" (shared by clusters
                                       whose code is the same) */
    int in_place;                   /* set before codegen: out is an argument's memory (a donated
                                       param), so no pointer is declared restrict */
};

struct jax_fusion {
    struct jax_cluster *clusters;
    int n_clusters;
    int *cluster_of;                /* per pir node: its cluster, or -1 */
    int n_epilogues;                /* matmuls that took a bias, alpha or activation */
    int n_functions;                /* distinct kernel functions in the source (codegen) */
};

/* Fold GEMM epilogues into JAX_OP_MATMUL_EPI nodes (compacting p), then cluster. With
 * fuse == 0 nothing is folded and every fusable node is a cluster of its own. */
int jax_fuse(struct tr_pir *p, int fuse, struct jax_fusion *f, struct tr_error *err);
void jax_fusion_free(struct jax_fusion *f);
/* 1 if node id of p can be part of a generated kernel. */
int jax_fusable(const struct tr_pir *p, int id);

/* ---- codegen.c ---- */

/* The whole graph's kernels as one C source (malloc'd, NUL-terminated): cluster i runs
 * as int trj_k<fn>(void *const *args), args as cluster.args (fn = i, or the first
 * cluster whose code is the same); returns 0, 1 when an embedding id fell outside its
 * table, 2 when a row buffer could not be allocated. Fills every cluster's args and fn. */
int jax_codegen(const struct tr_pir *p, struct jax_fusion *f, char **src, size_t *len, struct tr_error *err);

/* ---- compile.c ---- */

struct jax_build {
    void *so;                       /* dlopen handle */
    int cache_hit;
    double cc_ms;                   /* time in the compiler (0 on a hit) */
    char path[JAX_PATH_MAX];        /* the cache entry */
};

/* The shared object for src: from the cache when a valid entry exists, else compiled
 * (cc), stored (atomically) and loaded. */
int jax_build(struct tr_jax_context *ctx, const char *src, size_t len, struct jax_build *b, struct tr_error *err);
void jax_build_close(struct jax_build *b);
/* The cache directory as configured ([backend.jax] cache_dir, $XDG_CACHE_HOME/trident,
 * $HOME/.cache/trident), resolved into ctx->cache_dir. */
int jax_cache_dir(struct tr_jax_context *ctx, struct tr_error *err);
/* The key of src (with this compiler, its flags, this cpu) and its entry's path in the
 * cache directory ("<dir>/jax-<32 hex digits of the key>.so"). */
int jax_cache_entry(struct tr_jax_context *ctx, const char *src, size_t len, uint64_t key[2], char *path, size_t n,
                    struct tr_error *err);

/* ---- executor.c ---- */

struct tr_jax_program;
int tr_jax_compile(struct tr_jax_context *ctx, tr_graph_t g, struct tr_jax_program **out, struct tr_error *err);
int tr_jax_execute(struct tr_jax_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                   struct tr_tensor *outputs, struct tr_error *err);
void tr_jax_program_free(struct tr_jax_program *p);
void tr_jax_program_stats(const struct tr_jax_program *p, struct tr_backend_stats *st);

#endif
