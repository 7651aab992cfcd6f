/* jax backend — the code generator's insides, shared by its two targets: codegen.c (C
 * for the cpu, and the analysis of a cluster both targets start from) and codegen_cuda.c
 * (CUDA C for NVRTC). Private to the generator.
 *
 * A cluster is analysed once (cg_collect_args: its operands as loads; cg_collapse: the
 * iteration space as rows × L; cg_mark_needed: which members the prologue and the
 * epilogue of a reduction evaluate); the member expressions (cg_emit_body) and a
 * reduction's row (cg_emit_reduction_row, but for its cg_row_target) are the same text on
 * both targets, written against a prelude that each target defines: bf2f, f2bf,
 * bfround, fexp, fsigmoid, ftanh, gelu_erf, gelu_tanh, sqrtf, INFINITY, NAN, `restrict`. */
#ifndef TRIDENT_JAX_CODEGEN_H
#define TRIDENT_JAX_CODEGEN_H

#include <stddef.h>
#include <stdint.h>
#include "jax.h"

/* the function's name in its text until the text is known to be new */
#define NAME_MARK "TRJ_NAME"

/* A growable string; oom sticks once an allocation failed. */
struct sb {
    char *s;
    size_t n, cap;
    int oom;
};

__attribute__((format(printf, 2, 3))) void cg_sb_printf(struct sb *b, const char *fmt, ...);

enum load_kind { LOAD_VALUE, LOAD_INDEX };

struct load {
    int node, arg;
    enum load_kind kind;
    int ndim;                          /* the shape it broadcasts from (index loads: ids + (1)) */
    int64_t shape[TR_MAX_DIMS + 1];
    int64_t st[TR_MAX_DIMS + 1];       /* stride per collapsed axis (0: broadcast) */
    int row_dep;                       /* some row axis has a stride */
};

struct kgen {
    const struct tr_pir *p;
    const struct jax_fusion *f;
    int ci;
    const struct jax_cluster *cl;
    struct load *loads;
    int n_loads;
    int *load_of;                      /* per node: its value load, or -1 */
    int *index_of;                     /* per node: its index load, or -1 */
    int m;                             /* collapsed axes */
    int64_t e[TR_MAX_DIMS + 1];
    int64_t rows, L;
    int has_gather;
    char *in_pro, *in_epi;             /* per node: evaluated in the prologue / epilogue loop */
    const char *ind;                   /* of the loop body being written */
    int *local;                        /* per node: its index among the members (names in the code) */
};

const char *cg_ctype(int dt);
int cg_is_member(const struct kgen *g, int id);
int cg_vid(const struct kgen *g, int id);
void cg_collect_args(struct kgen *g, struct jax_cluster *cl);
void cg_collapse(struct kgen *g, int keep_last);
void cg_mark_needed(const struct kgen *g, int from, int stop, char *mark);
void cg_emit_float(struct sb *b, float v);
void cg_operand(struct sb *b, const struct kgen *g, int id);
void cg_emit_load_expr(struct sb *b, const struct kgen *g, int li);
void cg_emit_member(struct sb *b, const struct kgen *g, int id);
/* Loads, then members, of one loop body; red's own value comes from red_expr. */
void cg_emit_body(struct sb *b, const struct kgen *g, const char *mark, int red, const char *red_expr, int extra_load);
void cg_emit_store(struct sb *b, const struct kgen *g, const char *where, int id);
/* Per-row offsets of the loads that depend on the row (from `r`), and the gathers' table
 * rows (an id out of range sets `bad`). */
void cg_emit_row_setup(struct sb *b, const struct kgen *g, const char *ind);
/* One element of an elementwise kernel at `i` of row `r`, its body at ind, stored at where. */
void cg_emit_element(struct sb *b, struct kgen *g, const char *ind, const char *where);

/* What a reduction kernel's row does differently on each target: how it walks the row's
 * columns and whether partial sums (maxima) held by several threads must be joined. */
struct cg_row_target {
    const char *ind, *body_ind;        /* of the row's statements, and of its loops' bodies */
    const char *loop;                  /* the header of a loop over this thread's columns i */
    int omp_simd;                      /* `#pragma omp simd` before each sum / max loop */
    int block_combine;                 /* the threads' parts joined by trj_sum / trj_max */
    const char *scalar_guard;          /* before the block storing a one-per-row result */
};
/* One row `r` of g's reduction kernel: its offsets, the prologue into buf[], the reduction,
 * then the epilogue (softmax, layer norm) or the one store (sum, mean, max). */
void cg_emit_reduction_row(struct sb *b, struct kgen *g, const struct cg_row_target *t);
void cg_emit_comment(struct sb *b, const struct kgen *g);

/* The float math both targets' kernels call (codegen.c), after the target's head. */
extern const char cg_math_prelude[];

/* ---- codegen_cuda.c ---- */
#define JAX_CU_HEAD "extern \"C\" __global__ void "
extern const char jax_cu_prelude[];
/* The kernel of g->cl as CUDA C named NAME_MARK; fills the cluster's launch shape. */
void jax_cu_gen_kernel(struct sb *b, struct kgen *g);

#endif
