/* The book of captured CUDA graphs (graph_book.h): plain C, no CUDA. A handful of
 * entries (the limit is small: each holds a whole step's graph), searched linearly. */
#include "graph_book.h"
#include <stdlib.h>
#include <string.h>

struct tr_cuda_graph_entry {
    uint64_t owner;                     /* 0: orphan */
    uint64_t topo;
    int n_sig;
    int64_t sig[TR_CUDA_GRAPH_SIG_MAX];
    void *exec;
    uint64_t last_used;                 /* the book's clock at its last lookup or commit */
};

struct tr_cuda_graph_book {
    struct tr_cuda_graph_entry *e;
    int n, max;
    uint64_t clock;
    tr_cuda_graph_destroy_fn destroy;
    void *user;
    struct tr_cuda_graph_stats st;
};

uint64_t tr_cuda_graph_hash(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int tr_cuda_graph_book_init(struct tr_cuda_graph_book **out, int max_entries, tr_cuda_graph_destroy_fn destroy,
                            void *user, struct tr_error *err) {
    *out = NULL;
    if (!destroy) return tr_error_set(err, TR_ERR_INVALID, "cuda graph book: a destroy callback is required");
    if (max_entries <= 0) max_entries = TR_CUDA_GRAPH_BOOK_DEFAULT_MAX;
    struct tr_cuda_graph_book *b = calloc(1, sizeof *b);
    /* one spare slot: a commit appends before it evicts */
    if (b) b->e = calloc((size_t)max_entries + 1, sizeof *b->e);
    if (!b || !b->e) {
        free(b);
        return tr_error_set(err, TR_ERR_NOMEM, "cuda graph book: out of memory for %d entries", max_entries);
    }
    b->max = max_entries;
    b->destroy = destroy;
    b->user = user;
    b->st.max_entries = max_entries;
    *out = b;
    return TR_OK;
}

void tr_cuda_graph_book_free(struct tr_cuda_graph_book *b) {
    if (!b) return;
    for (int i = 0; i < b->n; i++)
        if (b->e[i].exec) b->destroy(b->user, b->e[i].exec);
    free(b->e);
    free(b);
}

static int same_sig(const struct tr_cuda_graph_entry *e, uint64_t owner, const int64_t *sig, int n_sig) {
    return e->owner == owner && e->n_sig == n_sig && (n_sig == 0 || memcmp(e->sig, sig, (size_t)n_sig * sizeof *sig) == 0);
}

/* Entry i destroyed and removed (the last entry takes its place). */
static void remove_entry(struct tr_cuda_graph_book *b, int i) {
    if (b->e[i].exec) b->destroy(b->user, b->e[i].exec);
    b->e[i] = b->e[--b->n];
    b->st.n_entries = b->n;
}

static int check_key(const char *fn, uint64_t owner, const int64_t *sig, int n_sig, struct tr_error *err) {
    if (owner == 0) return tr_error_set(err, TR_ERR_INVALID, "%s: owner 0 (reserved for orphans)", fn);
    if (n_sig < 0 || n_sig > TR_CUDA_GRAPH_SIG_MAX || (n_sig > 0 && !sig))
        return tr_error_set(err, TR_ERR_INVALID, "%s: a signature of %d words (expected 0 to %d, with an array)", fn,
                            n_sig, TR_CUDA_GRAPH_SIG_MAX);
    return TR_OK;
}

int tr_cuda_graph_book_lookup(struct tr_cuda_graph_book *b, uint64_t owner, const int64_t *sig, int n_sig,
                              uint64_t topo, struct tr_cuda_graph_plan *plan, struct tr_error *err) {
    if (!b || !plan) return tr_error_set(err, TR_ERR_INVALID, "cuda graph book lookup: no book or no plan");
    int rc = check_key("cuda graph book lookup", owner, sig, n_sig, err);
    if (rc != TR_OK) return rc;
    *plan = (struct tr_cuda_graph_plan){.action = TR_CUDA_GRAPH_CAPTURE, .entry = -1, .update_entry = -1};
    b->st.lookups++;
    b->clock++;
    for (int i = 0; i < b->n; i++) {
        struct tr_cuda_graph_entry *e = &b->e[i];
        if (!same_sig(e, owner, sig, n_sig)) continue;
        if (e->topo == topo) {
            e->last_used = b->clock;
            plan->action = TR_CUDA_GRAPH_REPLAY;
            plan->exec = e->exec;
            plan->entry = i;
            b->st.replays++;
            return TR_OK;
        }
        plan->entry = i; /* rebound differently: its graph is replaced */
        break;
    }
    b->st.captures++;
    /* A graph of the same topology to give up: an orphan (least recently used first);
     * else, when a new entry would push the book over its limit, the least recently used
     * live one, which the limit would evict anyway. */
    int full = b->n - (plan->entry >= 0) >= b->max, best = -1, best_orphan = 0;
    for (int i = 0; i < b->n; i++) {
        const struct tr_cuda_graph_entry *e = &b->e[i];
        if (i == plan->entry || e->topo != topo || (e->owner != 0 && !full)) continue;
        int orphan = e->owner == 0;
        if (best < 0 || orphan > best_orphan || (orphan == best_orphan && e->last_used < b->e[best].last_used)) {
            best = i;
            best_orphan = orphan;
        }
    }
    if (best >= 0) {
        plan->update_entry = best;
        plan->update_exec = b->e[best].exec;
    }
    return TR_OK;
}

/* The least recently used entry other than keep, orphans first; -1 if none. */
static int victim(const struct tr_cuda_graph_book *b, int keep) {
    int v = -1;
    for (int i = 0; i < b->n; i++) {
        if (i == keep) continue;
        const struct tr_cuda_graph_entry *e = &b->e[i], *w = v >= 0 ? &b->e[v] : NULL;
        if (!w || (e->owner == 0) > (w->owner == 0) ||
            ((e->owner == 0) == (w->owner == 0) && e->last_used < w->last_used))
            v = i;
    }
    return v;
}

int tr_cuda_graph_book_commit(struct tr_cuda_graph_book *b, const struct tr_cuda_graph_plan *plan, uint64_t owner,
                              const int64_t *sig, int n_sig, uint64_t topo, void *exec, enum tr_cuda_graph_made made,
                              int update_failed, struct tr_error *err) {
    if (!b || !plan || !exec) return tr_error_set(err, TR_ERR_INVALID, "cuda graph book commit: no book, plan or graph");
    int rc = check_key("cuda graph book commit", owner, sig, n_sig, err);
    if (rc != TR_OK) return rc;
    if (plan->action != TR_CUDA_GRAPH_CAPTURE || plan->entry >= b->n || plan->update_entry >= b->n)
        return tr_error_set(err, TR_ERR_INVALID, "cuda graph book commit: the plan is not a capture of this book");
    if (made == TR_CUDA_GRAPH_UPDATED &&
        (plan->update_entry < 0 || b->e[plan->update_entry].exec != exec || update_failed))
        return tr_error_set(err, TR_ERR_INVALID, "cuda graph book commit: an update of a graph the plan did not offer");
    b->clock++;
    struct tr_cuda_graph_entry ne = {.owner = owner, .topo = topo, .n_sig = n_sig, .exec = exec, .last_used = b->clock};
    if (n_sig) memcpy(ne.sig, sig, (size_t)n_sig * sizeof *sig);
    int replaced = plan->entry, upd = plan->update_entry;
    if (made == TR_CUDA_GRAPH_UPDATED) {
        b->st.updates++;
        b->e[upd] = ne; /* re-keyed: the graph now serves this signature */
        if (replaced >= 0) {
            remove_entry(b, replaced);
            b->st.evictions++;
        }
        return TR_OK;
    }
    b->st.instantiations++;
    if (update_failed) {
        /* An executable graph whose update was refused is not trusted again (CUDA
         * leaves its state to the driver): it goes. */
        b->st.update_failures++;
        if (upd >= 0) {
            remove_entry(b, upd);
            b->st.evictions++;
            if (replaced == b->n) replaced = upd; /* the last entry moved into upd's slot */
        }
    }
    if (replaced >= 0) {
        if (b->e[replaced].exec && b->e[replaced].exec != exec) b->destroy(b->user, b->e[replaced].exec);
        b->e[replaced] = ne;
        return TR_OK;
    }
    b->e[b->n++] = ne;
    if (b->n > b->max) {
        remove_entry(b, victim(b, b->n - 1));
        b->st.evictions++;
    }
    b->st.n_entries = b->n;
    return TR_OK;
}

int tr_cuda_graph_book_drop_owner(struct tr_cuda_graph_book *b, uint64_t owner) {
    int n = 0;
    for (int i = 0; b && owner != 0 && i < b->n; i++)
        if (b->e[i].owner == owner) {
            b->e[i].owner = 0;
            n++;
        }
    if (b) b->st.orphaned += (uint64_t)n;
    return n;
}

void tr_cuda_graph_book_get_stats(const struct tr_cuda_graph_book *b, struct tr_cuda_graph_stats *st) {
    if (!st) return;
    *st = b ? b->st : (struct tr_cuda_graph_stats){0};
    if (b) st->n_entries = b->n;
}

int tr_cuda_graph_book_step(struct tr_cuda_graph_book *b, const struct tr_cuda_graph_ops *ops, struct tr_kernels *k,
                            uint64_t owner, const int64_t *sig, int n_sig, uint64_t topo, tr_cuda_step_fn step,
                            void *user, int *captured, struct tr_error *err) {
    if (captured) *captured = 0;
    if (!ops || !step) return tr_error_set(err, TR_ERR_INVALID, "cuda graph step: no graph operations or no step");
    struct tr_cuda_graph_plan plan;
    int rc = tr_cuda_graph_book_lookup(b, owner, sig, n_sig, topo, &plan, err);
    if (rc != TR_OK) return rc;
    if (plan.action == TR_CUDA_GRAPH_REPLAY) return ops->launch(k, plan.exec, err);

    void *graph = NULL, *exec = NULL;
    if ((rc = ops->capture(k, step, user, &graph, err)) != TR_OK) return rc;
    enum tr_cuda_graph_made made = TR_CUDA_GRAPH_INSTANTIATED;
    int update_failed = 0;
    if (plan.update_exec) {
        struct tr_error uerr = {0}; /* a refused update is expected now and then: instantiate instead */
        if (ops->update(plan.update_exec, graph, &uerr) == TR_OK) {
            exec = plan.update_exec;
            made = TR_CUDA_GRAPH_UPDATED;
        } else update_failed = 1;
    }
    if (!exec) rc = ops->instantiate(graph, &exec, err);
    ops->graph_destroy(graph);
    if (rc != TR_OK) return rc;
    if ((rc = tr_cuda_graph_book_commit(b, &plan, owner, sig, n_sig, topo, exec, made, update_failed, err)) != TR_OK) {
        if (made == TR_CUDA_GRAPH_INSTANTIATED) b->destroy(b->user, exec);
        return rc;
    }
    if (captured) *captured = 1;
    return ops->launch(k, exec, err);
}

/* ---- the public book (kernels_cuda.h): graphs destroyed by cudaGraphExecDestroy ---- */

static void destroy_exec(void *user, void *exec) {
    (void)user;
    tr_kernels_cuda_graph_exec_destroy(exec);
}

int tr_kernels_cuda_graphs_init(struct tr_cuda_graph_book **out, int max_graphs, struct tr_error *err) {
    return tr_cuda_graph_book_init(out, max_graphs, destroy_exec, NULL, err);
}

void tr_kernels_cuda_graphs_free(struct tr_cuda_graph_book *b) { tr_cuda_graph_book_free(b); }

void tr_kernels_cuda_graphs_drop_owner(struct tr_cuda_graph_book *b, uint64_t owner) {
    tr_cuda_graph_book_drop_owner(b, owner);
}

void tr_kernels_cuda_graphs_stats(const struct tr_cuda_graph_book *b, struct tr_cuda_graph_stats *st) {
    tr_cuda_graph_book_get_stats(b, st);
}
