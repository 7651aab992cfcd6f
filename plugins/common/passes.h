/* Graph simplification passes over the plugin IR (pir.h), shared by backends: the jax
 * backend runs all of them before fusion; tf may run the cheap ones. Each pass returns
 * a status and reports how many nodes it changed (for the backends' reports), keeps
 * the node order topological and never changes what an output computes. Nodes a pass
 * makes unused are marked dead; call tr_pir_compact after.
 *
 *   cse        identical (op, inputs, attrs, dtype, shape) nodes merged; PARAM, INPUT
 *              and CONST nodes with different data are never merged
 *   dce        nodes no output depends on marked dead
 *   constfold  ops whose inputs are all CONST evaluated on the host (through the shared
 *              kernels) into new CONST nodes; the data is owned by the pir's arena
 *   simplify   transposes of the last two axes folded into MATMUL's trans flags;
 *              reshapes to the same shape, casts to the same dtype, SCALE(1,0) removed;
 *              reshape of reshape collapsed
 */
#ifndef TRIDENT_PASSES_H
#define TRIDENT_PASSES_H

#include "pir.h"
#include "trident/kernels.h"

struct tr_pass_stats {
    int cse_merged;
    int dce_removed;
    int folded;
    int simplified;
};

int tr_pass_cse(struct tr_pir *p, int *changed, struct tr_error *err);
int tr_pass_dce(struct tr_pir *p, int *changed, struct tr_error *err);
/* k: a cpu kernels context for evaluating; folded data is kept in p until tr_pir_free. */
int tr_pass_constfold(struct tr_pir *p, struct tr_kernels *k, int *changed, struct tr_error *err);
int tr_pass_simplify(struct tr_pir *p, int *changed, struct tr_error *err);
/* All of them, to a fixed point, then compact. */
int tr_pass_all(struct tr_pir *p, struct tr_kernels *k, struct tr_pass_stats *st, struct tr_error *err);

#endif
