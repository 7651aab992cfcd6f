/* jax backend — private declarations shared by its modules.
 *
 * A whole-graph compiler in the spirit of XLA, on the cpu (generated C) and on cuda
 * (generated CUDA C through NVRTC):
 *
 *   jax.c       the entry point, the vtable, options ([backend.jax] cache_dir, cc, fuse),
 *               init/free, supports_op, stats
 *   fuse.c      GEMM epilogues folded into the matmul call (bias, alpha, activation), then
 *               fusion: maximal clusters of elementwise ops, gathers and at most one
 *               row-wise reduction (softmax, layer norm, sum/mean/max over the last
 *               axis) become one generated kernel each; the ATTENTION_GRAD nodes of
 *               one attention grouped into one library call
 *   codegen.c   one C source for the whole graph, one function per cluster (codegen.h:
 *               the generator's insides; codegen_cuda.c: the same kernels as CUDA C)
 *   compile.c   the cache on disk, the system C compiler, dlopen
 *   cubin.c     on cuda: NVRTC for the device's architecture, cubins cached on disk
 *   executor.c  compile() end to end (passes, fusion, codegen, build, buffer assignment
 *               into one arena, the flat schedule) and execute()
 *
 * What runs as a library call (as XLA calls cuBLAS/cuDNN): MATMUL (with its folded
 * epilogue) and ATTENTION; the 2 or 3 ATTENTION_GRAD nodes of one attention as one bound
 * call of the fused attention backward; layout ops (TRANSPOSE, SLICE, CONCAT), reductions
 * over an axis other than the last, casts to integers and anything in f16. RESHAPE is a view.
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
/* AdamW's update of one parameter (adamw_group.h) as one library call, as XLA's
 * multi-output fusion makes one kernel of it: in param, m, v, grad, lr, t; floats[0..3]
 * β1, β2, eps, wd; ints[0] which of param', m', v' (0, 1, 2) the node's own value is. The
 * other two are JAX_OP_ADAMW_OUT nodes (in[0] the ADAMW, ints[0] which), written by its
 * call at its step. */
#define JAX_OP_ADAMW (TR_PIR_OP_PRIVATE + 2)
#define JAX_OP_ADAMW_OUT (TR_PIR_OP_PRIVATE + 3)

/* One initialised backend (the ctx of the vtable). */
struct tr_resident_store;

struct tr_jax_context {
    const struct tr_host_api *host;
    int device_type;
    int device_index;
    int fuse;                            /* 0: every fusable op its own kernel, no epilogues */
    int mode;                            /* `jax:fused` 0, `jax:unfused` 1 (the entry's mode wins
                                            over fuse); -1: none given, fuse decides */
    int attn_bwd;                        /* with fuse: attention backwards grouped (1 from init;
                                            the tests compare with 0) */
    char cache_dir[JAX_PATH_MAX];        /* "" until resolved at the first compile */
    char cache_dir_key[JAX_WHERE_MAX];   /* how it was chosen, for messages */
    unsigned char secret[32];            /* the cache's HMAC key (entry.h), read with the directory */
    char cc[JAX_PATH_MAX];
    char cc_key[JAX_WHERE_MAX];
    int math;                            /* enum tr_math from the params, set on every context */
    /* counters over the backend's life (tests read them) */
    uint64_t cache_hits, cache_misses, cc_runs, nvrtc_runs;
    /* cuda: the PARAMs' device memory, shared by this backend's programs by host memory
     * (resident.h); made by the first upload, gone with the last program using it */
    struct tr_resident_store *params;
};

/* Whether the context's programs fuse: its mode when the entry gave one, else fuse. */
static inline int jax_ctx_fuses(const struct tr_jax_context *c) { return c->mode < 0 ? c->fuse : c->mode == 0; }

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
    unsigned cu_grid, cu_block;     /* filled by the cuda codegen: the launch (x extents) */
    unsigned cu_shmem;              /* and its dynamic shared memory, bytes */
};

/* The ATTENTION_GRAD nodes of one attention (2 or 3 of dq, dk, dv), computed by one
 * library call of tr_k_attention_backward at the lead's place in the schedule. */
struct jax_attn_bwd {
    int lead;                       /* the lowest node id of the group: where it runs */
    int grad[5];                    /* the dq, dk, dv (and drel_h, drel_w) nodes, or -1 */
    int n_grads;                    /* 2 or 3 (2 to 5 for ATTENTION_REL) */
    int rel;                        /* ATTENTION_REL_GRAD nodes */
};

struct jax_fusion {
    struct jax_cluster *clusters;
    int n_clusters;
    int *cluster_of;                /* per pir node: its cluster, or -1 */
    struct jax_attn_bwd *attn;      /* attention backward groups, in program order */
    int n_attn;
    int *attn_of;                   /* per pir node: its attention backward group, or -1 */
    int *lse_of;                    /* per pir node: an ATTENTION's ATTENTION_LSE (an
                                       ATTENTION_REL's ATTENTION_REL_LSE), that node's
                                       forward (a lower id: computed by its call), or -1 */
    int n_lse;                      /* forwards computing their lse too */
    int n_epilogues;                /* matmuls that took a bias, alpha or activation */
    int n_norm_silu;                /* group norms that took the SiLU after them */
    int n_adamw;                    /* parameters updated by one JAX_OP_ADAMW call */
    int n_functions;                /* distinct kernel functions in the source (codegen) */
};

/* Fold GEMM epilogues into JAX_OP_MATMUL_EPI nodes and SiLUs into the group norms before
 * them (compacting p), then cluster. With fuse == 0 nothing is folded and every fusable
 * node is a cluster of its own. */
int jax_fuse(struct tr_pir *p, int fuse, struct jax_fusion *f, struct tr_error *err);
/* The longest row a generated reduction may have on cuda: its row buffer (f32) and the
 * block reduction's 32 floats are shared memory, within the 48 KiB any launch may use. */
#define JAX_CU_MAX_ROW 12000
/* jax_fuse for a target: max_row > 0 leaves reductions over longer rows to the library. */
int jax_fuse_for(struct tr_pir *p, int fuse, int64_t max_row, struct jax_fusion *f, struct tr_error *err);
/* After jax_fuse: f->attn and f->attn_of, the ATTENTION_GRAD nodes (f32, bf16, f16) with
 * the same operands and attrs but a different `which`, 2 or 3 to a group, the lead the
 * lowest id; and f->lse_of, each ATTENTION paired with the ATTENTION_LSE of its backward
 * (one call computes both), each ATTENTION_REL with its ATTENTION_REL_LSE. Without it
 * (attn_of NULL) every ATTENTION_GRAD and ATTENTION_(REL_)LSE is its own call. */
int jax_group_attention_backward(const struct tr_pir *p, struct jax_fusion *f, struct tr_error *err);
void jax_fusion_free(struct jax_fusion *f);
/* 1 if node id of p can be part of a generated kernel. */
int jax_fusable(const struct tr_pir *p, int id);

/* ---- codegen.c ---- */

/* The whole graph's kernels as one C source (malloc'd, NUL-terminated): cluster i runs
 * as int trj_k<fn>(void *const *args), args as cluster.args (fn = i, or the first
 * cluster whose code is the same); returns 0, 1 when an embedding id fell outside its
 * table, 2 when a row buffer could not be allocated. Fills every cluster's args and fn. */
int jax_codegen(const struct tr_pir *p, struct jax_fusion *f, char **src, size_t *len, struct tr_error *err);
/* The same as CUDA C for NVRTC (codegen_cuda.c): cluster i runs as extern "C" __global__
 * void trj_k<fn>(operands..., out, int *bad), launched as cu_grid blocks of cu_block
 * threads with cu_shmem bytes of dynamic shared memory (all filled here); *bad gets bit 0
 * when an embedding id fell outside its table. */
int jax_codegen_cuda(const struct tr_pir *p, struct jax_fusion *f, char **src, size_t *len, struct tr_error *err);

/* ---- compile.c ---- */
/* A monotonic clock in ms, and a whole file read into *data (malloc'd, one spare byte);
 * 0 or -1. Shared by the C and the cubin caches and the executor. */
double jax_now_ms(void);
int jax_read_file(const char *path, unsigned char **data, size_t *len);

struct jax_build {
    void *so;                       /* dlopen handle */
    int memfd;                      /* the verified copy dlopen read (compile.c), open while so is:
                                       its /proc/self/fd name is then this library's alone */
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

/* The cache's hashing (compile.c): two independent 64-bit hashes (FNV-1a, MurmurHash64A)
 * over fields each followed by a separator; and the FNV-1a checksum of an entry's bytes. */
struct jax_hasher {
    uint64_t a, b;
};
void jax_hash_begin(struct jax_hasher *h);
void jax_hash_add(struct jax_hasher *h, const void *data, size_t n);
uint64_t jax_checksum(const void *data, size_t n);

/* ---- cubin.c: the generated CUDA C compiled by NVRTC, cached on disk ----
 * An entry is "<dir>/jax-<128-bit key>.cubin": the cubin with a trailer (magic, key,
 * length, checksum), so a short or overwritten file is found out and rebuilt. The key
 * covers the source, the architecture, NVRTC's version and its options. */

/* The options tr_cuda_nvrtc_compile passes to NVRTC besides the architecture (nvrtc.c):
 * a part of the key, so that changing them there means changing them here. */
#define JAX_NVRTC_OPTIONS "--std=c++17 --use_fast_math"

struct jax_cubin {
    void *data;                     /* the cubin (malloc'd) */
    size_t size;
    int cache_hit;
    double nvrtc_ms;                /* time in NVRTC (0 on a hit) */
    char path[JAX_PATH_MAX];        /* the cache entry */
};

void jax_cu_key(const char *src, size_t len, int sm, int nvrtc_major, int nvrtc_minor, const char *options,
                uint64_t key[2]);
/* The cubin of src for sm_<sm>: the cache entry when valid, else NVRTC (stored
 * atomically). A compile error: TR_ERR_INVALID, the log's start, the source kept beside
 * the entry as .cu. */
int jax_cu_build(struct tr_jax_context *ctx, const char *src, size_t len, int sm, struct jax_cubin *out,
                 struct tr_error *err);
void jax_cubin_free(struct jax_cubin *c);

/* ---- executor.c ---- */

struct tr_jax_program;
int tr_jax_compile(struct tr_jax_context *ctx, tr_graph_t g, struct tr_jax_program **out, struct tr_error *err);
/* What compile generates for g on cuda, with no device needed (the tests compile it for
 * each architecture): the passes, fusion and donation as compile runs them, then the
 * CUDA C source (*src malloc'd, caller frees); *n_kernels clusters. */
int tr_jax_cuda_source(struct tr_jax_context *ctx, tr_graph_t g, char **src, size_t *len, int *n_kernels,
                       struct tr_error *err);
/* The updated PARAMs' host memory made current (on cuda: copied back from the device). */
int tr_jax_sync(struct tr_jax_program *p, struct tr_error *err);
int tr_jax_execute(struct tr_jax_program *p, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                   struct tr_tensor *outputs, struct tr_error *err);
void tr_jax_program_free(struct tr_jax_program *p);
void tr_jax_program_stats(const struct tr_jax_program *p, struct tr_backend_stats *st);

#endif
