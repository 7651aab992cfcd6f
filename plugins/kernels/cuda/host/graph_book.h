/* The host-side bookkeeping of CUDA graphs (reduce-overhead's captured steps), in plain C
 * so that it is unit-tested without a GPU (tests/test_cuda_graph_book.c). It never calls
 * CUDA: executable graphs are opaque handles (cudaGraphExec_t) that the caller makes,
 * updates and launches through kernels_cuda.h, and that the book destroys through the
 * callback given at init.
 *
 * An entry maps a step's signature to one executable graph. The signature is exact
 * (int64 words compared whole, no hash): the owner (a program's serial number) and the
 * shapes of its inputs, as the caller lays them out. `topo` is the caller's hash of the
 * step's call sequence (which kernels, in which order): two captures with the same topo
 * are expected to have the same graph topology, so one's executable graph may be
 * updated in place to the other (cudaGraphExecUpdate) instead of instantiating a new one.
 *
 * tr_cuda_graph_book_lookup says what a step does:
 *   REPLAY   an entry with this owner, signature and topo exists: launch plan.exec;
 *   CAPTURE  none does: capture the step, then either update plan.update_exec (a
 *            graph of the same topo the book is willing to give up: an orphan, whose
 *            owner is gone, first; else, when the book is full, the least recently
 *            used of that topo) or, if plan.update_exec is NULL or the update fails,
 *            instantiate a new one; then tr_cuda_graph_book_commit. The same signature
 *            seen with another topo (the step was rebound differently) replaces its
 *            entry.
 * Commit records the new entry; when the book is over its limit it evicts the least
 * recently used entry (orphans first) and destroys its graph. Orphans (entries of a
 * freed owner) hold stale pointers: they are never launched, only updated or evicted.
 *
 * Not thread-safe: one book is used by one thread at a time.
 */
#ifndef TRIDENT_CUDA_GRAPH_BOOK_H
#define TRIDENT_CUDA_GRAPH_BOOK_H

#include <stddef.h>
#include <stdint.h>
#include "trident/kernels_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_CUDA_GRAPH_BOOK_DEFAULT_MAX 8
#define TR_CUDA_GRAPH_SIG_MAX 64        /* int64 words in a signature */

enum tr_cuda_graph_action {
    TR_CUDA_GRAPH_REPLAY = 0,
    TR_CUDA_GRAPH_CAPTURE = 1,
};

/* How a commit's graph was made. */
enum tr_cuda_graph_made {
    TR_CUDA_GRAPH_INSTANTIATED = 0,     /* a new executable graph */
    TR_CUDA_GRAPH_UPDATED = 1,          /* plan.update_exec updated in place */
};

struct tr_cuda_graph_plan {
    enum tr_cuda_graph_action action;
    void *exec;                         /* REPLAY: the graph to launch */
    void *update_exec;                  /* CAPTURE: a graph of the same topo to update, or NULL */
    int entry;                          /* internal: the entry concerned, -1 for none */
    int update_entry;                   /* internal: update_exec's entry, -1 for none */
};


/* Destroys one executable graph (cudaGraphExecDestroy in the backends, a fake in tests). */
typedef void (*tr_cuda_graph_destroy_fn)(void *user, void *exec);

struct tr_cuda_graph_book;

/* max_entries <= 0: TR_CUDA_GRAPH_BOOK_DEFAULT_MAX. destroy is required. */
int tr_cuda_graph_book_init(struct tr_cuda_graph_book **out, int max_entries, tr_cuda_graph_destroy_fn destroy,
                            void *user, struct tr_error *err);
/* Destroys every graph still held. NULL is a no-op. */
void tr_cuda_graph_book_free(struct tr_cuda_graph_book *b);

/* What the step (owner, sig[0..n_sig), topo) does; see above. owner must not be 0 (0
 * marks orphans); n_sig from 0 to TR_CUDA_GRAPH_SIG_MAX. A REPLAY marks the entry used. */
int tr_cuda_graph_book_lookup(struct tr_cuda_graph_book *b, uint64_t owner, const int64_t *sig, int n_sig,
                              uint64_t topo, struct tr_cuda_graph_plan *plan, struct tr_error *err);
/* After a CAPTURE: exec is the graph now serving (owner, sig, topo), made as `made` says
 * (UPDATED: exec is plan->update_exec, whose old entry is re-keyed). update_failed
 * counts an update tried before this instantiation. The entry a CAPTURE replaces (same
 * signature, other topo) is destroyed unless it is the one updated; over the limit the
 * least recently used other entry is evicted. */
int tr_cuda_graph_book_commit(struct tr_cuda_graph_book *b, const struct tr_cuda_graph_plan *plan, uint64_t owner,
                              const int64_t *sig, int n_sig, uint64_t topo, void *exec, enum tr_cuda_graph_made made,
                              int update_failed, struct tr_error *err);
/* The owner is gone (a program freed): its entries become orphans, kept for updates
 * until evicted. Returns how many. */
int tr_cuda_graph_book_drop_owner(struct tr_cuda_graph_book *b, uint64_t owner);

void tr_cuda_graph_book_get_stats(const struct tr_cuda_graph_book *b, struct tr_cuda_graph_stats *st);

/* The CUDA side of a step, as function pointers so that the whole flow runs on fakes in
 * the tests (cuda/graph.c gives the real ones). Graphs and executable graphs are opaque. */
struct tr_cuda_graph_ops {
    /* Capture step(k, user) on k's stream into *graph; the work is queued into the
     * graph, not run. On failure nothing is left capturing. */
    int (*capture)(struct tr_kernels *k, tr_cuda_step_fn step, void *user, void **graph, struct tr_error *err);
    int (*instantiate)(void *graph, void **exec, struct tr_error *err);
    /* TR_OK, or non-zero when exec cannot take graph's parameters (topology differs). */
    int (*update)(void *exec, void *graph, struct tr_error *err);
    int (*launch)(struct tr_kernels *k, void *exec, struct tr_error *err);
    void (*graph_destroy)(void *graph);
};

/* One step through the book: lookup; REPLAY launches; CAPTURE captures, updates the
 * offered graph or (no offer, or the update refused) instantiates, commits, and launches.
 * *captured (may be NULL) is set to 1 when this step captured. */
int tr_cuda_graph_book_step(struct tr_cuda_graph_book *b, const struct tr_cuda_graph_ops *ops, struct tr_kernels *k,
                            uint64_t owner, const int64_t *sig, int n_sig, uint64_t topo, tr_cuda_step_fn step,
                            void *user, int *captured, struct tr_error *err);


#ifdef __cplusplus
}
#endif
#endif
