/* trident — `trident run FILE.ini --check nodes`: every intermediate value of each backend
 * against the reference backend's (the first listed), node by node.
 *
 * A debugging run, not a benchmark. The task's graph is built once (tr_task_graph_build)
 * and every computed node (all but INPUT, PARAM and CONST) is made a graph output besides
 * the model's own (tr_check_nodes_mark); the weights and the batch are made once, as a run
 * makes them ([run] weights, [run] inputs, or the seed); then each backend in turn, in
 * this process, loads, compiles, executes ONE step and hands back every node's value.
 * Each value is compared with the reference backend's by ‖out − ref‖ / ‖ref‖ (+inf when
 * one has a NaN or an Inf the other lacks), against the run's tolerance ([run] tolerance,
 * else the dtype's: f32 1e-4, bf16/f16 2e-2, as bench.h's agreement check). For linear
 * and shape ops ‖ref‖ is at least what the value would be without cancellation, from its
 * inputs' sizes: an exact zero of the maths (a gradient that cancels) is roundoff noise
 * in every backend, and two noises would otherwise differ by ~100% (docs/check-nodes.md).
 *
 * The verdict of a backend is the first node in id order (the graph's topological order)
 * whose value is beyond the tolerance, with its op, its name and how its inputs compared:
 * all its computed inputs have smaller ids, so they agreed, and the node is where the
 * difference starts (the op's kernel, or an op that amplifies a small difference: a
 * softmax of large logits, a division by a small number). The worst nodes follow.
 *
 * fit runs its one step whole: the forward pass, the loss, the gradients and the
 * optimizer's updates are all compared (the updated params' host copies are restored
 * before each backend, so all start from the same state). A token generator's two passes
 * are refused (check its predict task); a one-graph generate (a text-to-image run) is
 * checked as predict is.
 *
 * Cost: every node an output keeps every intermediate alive to the end of the step (the
 * backend's memory is the sum of all values, not the planned peak) and stops fusion that
 * would hide a value; the host holds two copies of all values (the reference's and the
 * current backend's). docs/check-nodes.md says more.
 */
#ifndef TRIDENT_CHECK_NODES_H
#define TRIDENT_CHECK_NODES_H

#include <stdint.h>
#include <stdio.h>
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/model.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The worst nodes a row keeps, largest difference first. */
#define TR_CHECK_NODES_WORST 5

/* One node as the report names it. */
struct tr_check_node {
    int id;                     /* -1: none */
    int op;                     /* enum tr_op */
    char name[TR_NAME_MAX];
    int compared;               /* 1: a computed node, rel is its difference; 0: a leaf
                                   (INPUT, PARAM, CONST: the same bytes for every backend) */
    double rel;                 /* ‖out − ref‖ / ‖ref‖ */
};

struct tr_check_nodes_row {
    char label[96];             /* "torch", "torch:reduce-overhead" */
    char plugin_path[TR_CONFIG_PATH];
    int ok;                     /* 0: it failed to load, compile or run; error says why */
    char error[TR_ERROR_MSG_MAX];
    int is_reference;
    int n_compared;             /* nodes compared with the reference's */
    int n_beyond;               /* of them, beyond the tolerance */
    struct tr_check_node first; /* the first node beyond the tolerance (id -1: none) */
    struct tr_check_node first_inputs[TR_MAX_INPUTS];
    int n_first_inputs;
    struct tr_check_node worst[TR_CHECK_NODES_WORST];
    int n_worst;
    struct tr_check_node nonfinite; /* the first computed node whose value holds a NaN or an
                                       Inf (id -1: none); for the reference too, whose NaN
                                       every other backend would otherwise only "differ" from */
};

struct tr_check_nodes_report {
    char model[64], preset[64], task[32], device[16], dtype[16];
    char what[96];              /* what the step computes: "the forward pass", "... gradients ..." */
    double tolerance;
    int n_nodes;                /* of the graph */
    int n_checked;              /* computed nodes, each an output in this run */
    uint64_t value_bytes;       /* bytes of all those values: one backend's copy on the host */
    struct tr_check_nodes_row rows[TR_CONFIG_MAX_BACKENDS];
    int n_rows;
    int all_agree;              /* every backend ran and every node of each is within tolerance */
};

/* Make every computed node of g (not INPUT, PARAM, CONST) that is not yet an output an
 * output, named "#ID" (an output of another node that already has such a name is refused
 * before anything is changed; a second call adds nothing). Outputs are only appended, so the model's own keep their indices (a fit
 * graph's output 0 stays "loss"). *n_added (may be NULL): how many were made. */
int tr_check_nodes_mark(struct tr_graph *g, int *n_added, struct tr_error *err);

/* The run described above over cfg's backends. TR_OK when every backend ran and agrees
 * with the reference at every node; TR_ERR_NUMERIC when one differs, err naming the
 * first such backend's first node; TR_ERR_PLUGIN when a backend failed (its row says
 * why). Errors before any backend runs (the model, the weights, the inputs, a token
 * generator) return at once with err filled and rep->n_rows 0. */
int tr_check_nodes_run(const struct tr_config *cfg, const struct tr_model_desc *const *models,
                       struct tr_check_nodes_report *rep, struct tr_error *err);

/* The report as text: a header, then per backend its first divergence and the worst
 * nodes, or "every node within tolerance". */
void tr_check_nodes_print(const struct tr_check_nodes_report *rep, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
