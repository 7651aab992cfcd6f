/* Simplification passes over the plugin IR (passes.h).
 *
 * Every rewriting pass walks the nodes once in order with a replacement map rep[]: a
 * node's inputs are first redirected through rep (its producers were visited before
 * it), then the node itself is judged. That keeps the order topological and lets a
 * chain of rewrites (a duplicate of a duplicate, a reshape of a reshape of a reshape)
 * settle in one walk. Graph outputs are never re-pointed at a node that computes
 * something else; CSE may re-point them at an identical node. */
#include <stdlib.h>
#include <string.h>
#include "passes.h"

#define FOLD_MAX_BYTES ((size_t)16 << 20) /* folding must not blow up the program's constants */

static int *rep_init(const struct tr_pir *p) {
    int *rep = malloc((p->n ? (size_t)p->n : 1) * sizeof *rep);
    if (rep)
        for (int i = 0; i < p->n; i++) rep[i] = i;
    return rep;
}

static void redirect_inputs(struct tr_pir_node *d, const int *rep) {
    for (int j = 0; j < d->n_in; j++) d->in[j] = rep[d->in[j]];
}

static void reindex_outputs(struct tr_pir *p) {
    for (int i = 0; i < p->n; i++) p->nodes[i].output_index = -1;
    for (int i = 0; i < p->n_outputs; i++)
        if (p->nodes[p->outputs[i]].output_index < 0) p->nodes[p->outputs[i]].output_index = i;
}

static int set_changed(int *changed, int v) {
    if (changed) *changed = v;
    return TR_OK;
}

/* ---- dce ---- */

int tr_pass_dce(struct tr_pir *p, int *changed, struct tr_error *err) {
    (void)err;
    return set_changed(changed, tr_pir_mark_dead(p));
}

/* ---- cse ---- */

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *s = data;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t node_hash(const struct tr_pir_node *d) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &d->op, sizeof d->op);
    h = fnv(h, &d->n_in, sizeof d->n_in);
    h = fnv(h, d->in, (size_t)d->n_in * sizeof d->in[0]);
    h = fnv(h, &d->attrs, sizeof d->attrs);
    h = fnv(h, &d->dtype, sizeof d->dtype);
    h = fnv(h, &d->ndim, sizeof d->ndim);
    h = fnv(h, d->shape, (size_t)d->ndim * sizeof d->shape[0]);
    h = fnv(h, &d->aux, sizeof d->aux);
    if (d->op == TR_OP_CONST && d->data) {
        size_t nb = tr_pir_nbytes(d);
        h = fnv(h, d->data, nb < 256 ? nb : 256); /* a prefix spreads them well enough; equality checks all */
    } else {
        h = fnv(h, &d->data, sizeof d->data);
    }
    return h;
}

static int same_node(const struct tr_pir_node *a, const struct tr_pir_node *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->dtype != b->dtype || a->ndim != b->ndim || a->aux != b->aux) return 0;
    if (memcmp(a->in, b->in, (size_t)a->n_in * sizeof a->in[0])) return 0;
    if (memcmp(&a->attrs, &b->attrs, sizeof a->attrs)) return 0;
    if (memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0])) return 0;
    if (a->op == TR_OP_CONST) {
        if (a->data == b->data) return 1;
        if (!a->data || !b->data) return 0;
        return memcmp(a->data, b->data, tr_pir_nbytes(a)) == 0;
    }
    return a->data == b->data;
}

int tr_pass_cse(struct tr_pir *p, int *changed, struct tr_error *err) {
    set_changed(changed, 0);
    size_t cap = 16;
    while (cap < 2 * (size_t)p->n) cap *= 2;
    int *table = malloc(cap * sizeof *table);
    int *rep = rep_init(p);
    if (!table || !rep) {
        free(table);
        free(rep);
        return tr_error_set(err, TR_ERR_NOMEM, "cse: out of memory for %d nodes", p->n);
    }
    for (size_t i = 0; i < cap; i++) table[i] = -1;
    int merged = 0;
    for (int i = 0; i < p->n; i++) {
        struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        redirect_inputs(d, rep);
        /* INPUT and PARAM are distinct values whatever they look like */
        if (d->op == TR_OP_INPUT || d->op == TR_OP_PARAM) continue;
        size_t h = (size_t)node_hash(d) & (cap - 1);
        for (;;) {
            int e = table[h];
            if (e < 0) {
                table[h] = i;
                break;
            }
            if (same_node(&p->nodes[e], d)) {
                rep[i] = e;
                d->dead = 1;
                merged++;
                break;
            }
            h = (h + 1) & (cap - 1);
        }
    }
    if (merged) {
        for (int i = 0; i < p->n_outputs; i++) p->outputs[i] = rep[p->outputs[i]];
        reindex_outputs(p);
        tr_pir_mark_dead(p);
    }
    free(table);
    free(rep);
    return set_changed(changed, merged);
}

/* ---- constant folding ---- */

static int foldable(const struct tr_pir *p, const struct tr_pir_node *d) {
    if (d->dead || d->op <= TR_OP_CONST || d->op >= TR_OP_COUNT || d->n_in < 1) return 0;
    /* a collective at compile time would pair with another rank's step */
    if (d->op == TR_OP_ALLREDUCE || d->op == TR_OP_ALLREDUCE_START || d->op == TR_OP_ALLREDUCE_WAIT) return 0;
    for (int j = 0; j < d->n_in; j++) {
        const struct tr_pir_node *s = &p->nodes[d->in[j]];
        if (s->op != TR_OP_CONST || !s->data) return 0;
    }
    return tr_pir_nbytes(d) <= FOLD_MAX_BYTES;
}

static void make_const(struct tr_pir_node *d, const void *data) {
    d->op = TR_OP_CONST;
    d->n_in = 0;
    memset(d->in, 0, sizeof d->in);
    memset(&d->attrs, 0, sizeof d->attrs);
    d->data = data;
    d->aux = 0;
}

int tr_pass_constfold(struct tr_pir *p, struct tr_kernels *k, int *changed, struct tr_error *err) {
    set_changed(changed, 0);
    if (!k) return tr_error_set(err, TR_ERR_INVALID, "constfold: no kernels context");
    if (tr_kernels_device_type(k) != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_INVALID, "constfold: the kernels context must be the cpu's (folded data is host memory)");
    int folded = 0;
    for (int i = 0; i < p->n; i++) {
        struct tr_pir_node *d = &p->nodes[i];
        if (!foldable(p, d)) continue;
        if (d->op == TR_OP_RESHAPE) { /* same bytes, new shape: share the input's data */
            make_const(d, p->nodes[d->in[0]].data);
            folded++;
            continue;
        }
        struct tr_tensor in[TR_PIR_MAX_IN], out;
        int rc = TR_OK;
        for (int j = 0; j < d->n_in && !rc; j++) {
            const struct tr_pir_node *s = &p->nodes[d->in[j]];
            rc = tr_tensor_make(&in[j], (void *)s->data, (enum tr_dtype)s->dtype, s->ndim, s->shape, NULL);
        }
        size_t nb = tr_pir_nbytes(d);
        void *buf = aligned_alloc(64, (nb + 63) / 64 * 64 + 64 * (nb == 0));
        if (!buf) return tr_error_set(err, TR_ERR_NOMEM, "constfold: out of memory for node %d '%s' (%zu bytes)", i, d->name, nb);
        if (!rc) rc = tr_tensor_make(&out, buf, (enum tr_dtype)d->dtype, d->ndim, d->shape, NULL);
        /* A kernel that refuses (a dtype it lacks, an id out of range) leaves the node to
         * run, and fail with the same message, at execute time: folding is only an
         * optimisation and must not change which graphs compile. */
        if (!rc) rc = tr_kernels_run(k, d->op, &d->attrs, d->n_in, in, &out, NULL);
        if (rc) {
            free(buf);
            continue;
        }
        if ((rc = tr_pir_own(p, buf, err))) return rc;
        make_const(d, buf);
        folded++;
    }
    if (folded) tr_pir_mark_dead(p);
    return set_changed(changed, folded);
}

/* ---- simplify ---- */

static int is_swap_last2(const struct tr_pir_node *t) {
    int n = t->ndim;
    if (t->op != TR_OP_TRANSPOSE || n < 2 || t->attrs.n_ints != n) return 0;
    for (int i = 0; i < n - 2; i++)
        if (t->attrs.ints[i] != i) return 0;
    return t->attrs.ints[n - 2] == n - 1 && t->attrs.ints[n - 1] == n - 2;
}


/* A node whose value equals its first input's, bit for bit. */
static int is_identity(const struct tr_pir *p, const struct tr_pir_node *d) {
    if (d->n_in < 1) return 0;
    const struct tr_pir_node *x = &p->nodes[d->in[0]];
    if (x->dtype != d->dtype || !tr_pir_same_shape(x, d)) return 0;
    switch (d->op) {
    case TR_OP_RESHAPE:
    case TR_OP_CAST: return 1;
    case TR_OP_SCALE: return d->attrs.floats[0] == 1.0f && d->attrs.floats[1] == 0.0f;
    case TR_OP_TRANSPOSE:
        for (int i = 0; i < d->ndim; i++)
            if (d->attrs.ints[i] != i) return 0;
        return d->attrs.n_ints == d->ndim;
    default: return 0;
    }
}

int tr_pass_simplify(struct tr_pir *p, int *changed, struct tr_error *err) {
    set_changed(changed, 0);
    int *rep = rep_init(p);
    int *uses = malloc((p->n ? (size_t)p->n : 1) * sizeof *uses);
    int *out_refs = calloc(p->n ? (size_t)p->n : 1, sizeof *out_refs);
    if (!rep || !uses || !out_refs) {
        free(rep);
        free(uses);
        free(out_refs);
        return tr_error_set(err, TR_ERR_NOMEM, "simplify: out of memory for %d nodes", p->n);
    }
    tr_pir_count_uses(p, uses);
    for (int i = 0; i < p->n_outputs; i++) out_refs[p->outputs[i]]++;
    int n_changed = 0;
    for (int i = 0; i < p->n; i++) {
        struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        redirect_inputs(d, rep);
        if (d->op == TR_OP_MATMUL) {
            /* op(transpose(x)) with the flag flipped is op(x): the kernel reads x as stored.
             * A transpose other nodes still read stays for them. */
            for (int s = 0; s < 2; s++)
                while (is_swap_last2(&p->nodes[d->in[s]])) {
                    d->in[s] = p->nodes[d->in[s]].in[0];
                    d->attrs.ints[s] = !d->attrs.ints[s];
                    n_changed++;
                }
            continue;
        }
        if (d->op == TR_OP_RESHAPE && p->nodes[d->in[0]].op == TR_OP_RESHAPE) {
            /* attrs hold the full target shape (the graph resolved any -1), valid for any source */
            d->in[0] = p->nodes[d->in[0]].in[0];
            n_changed++;
        }
        if (is_identity(p, d)) {
            /* a graph output keeps its node (only its other readers move to the input) */
            if (uses[i] == out_refs[i]) continue;
            rep[i] = d->in[0];
            n_changed++;
        }
    }
    if (n_changed) tr_pir_mark_dead(p);
    free(rep);
    free(uses);
    free(out_refs);
    return set_changed(changed, n_changed);
}

/* ---- all ---- */

int tr_pass_all(struct tr_pir *p, struct tr_kernels *k, struct tr_pass_stats *st, struct tr_error *err) {
    struct tr_pass_stats acc = {0};
    int rc;
    /* dce first, so that nodes dead in the graph as given are counted as dce's; without a
     * kernels context (k NULL) nothing is folded */
    for (int round = 0; round < 32; round++) {
        int d = 0, s = 0, c = 0, f = 0;
        if ((rc = tr_pass_dce(p, &d, err)) || (rc = tr_pass_simplify(p, &s, err)) || (rc = tr_pass_cse(p, &c, err)))
            return rc;
        if (k && (rc = tr_pass_constfold(p, k, &f, err))) return rc;
        acc.dce_removed += d;
        acc.simplified += s;
        acc.cse_merged += c;
        acc.folded += f;
        if (!d && !s && !c && !f) break;
    }
    if ((rc = tr_pir_compact(p, NULL, err))) return rc;
    if (st) *st = acc;
    return TR_OK;
}
