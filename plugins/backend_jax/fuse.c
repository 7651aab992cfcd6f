/* jax backend — GEMM epilogues and fusion (jax.h).
 *
 * Epilogues: a MATMUL whose only reader is SCALE(alpha, 0), then ADD of a (N) bias, then
 * one of GELU/RELU/TANH/SILU (each step optional, in that order, each intermediate read
 * once) becomes one JAX_OP_MATMUL_EPI node: oneDNN applies them inside the GEMM. A
 * GROUP_NORM read only by a SILU takes it the same way, as the norm's fused SiLU.
 *
 * Fusion, as XLA's producer-consumer fusion: clusters grow from a root (the last node
 * not yet taken, walking backwards) towards its producers. A producer joins when every
 * edge that reads it comes from the cluster through an operand the generated code
 * computes in registers (not a layer norm's gamma, not a gather's table or ids) and it
 * is not a graph output: so only the root is ever stored, no value is computed twice
 * for two kernels, and the kernels stay in a valid order (an edge leaves a cluster only
 * from its root). Producers are decided highest id first, so when a node is decided
 * every reader that could still join has joined.
 *
 * The iteration space is the root's shape, or the reduction's input shape when the
 * cluster holds one. Members broadcast into it (their shape right-aligned, extents equal
 * or 1): a member of a smaller shape is recomputed per element, as XLA does with cheap
 * producers. A softmax or layer norm may join as a producer (its consumers become the
 * kernel's epilogue) when its shape is the whole space; sum/mean/max over the last axis
 * are roots only.
 *
 * Attention backwards: the two or three ATTENTION_GRAD nodes of one attention (the same
 * operands and attrs, a different `which`: dq, dk, dv) make a group that runs as one
 * call of the library's fused tr_k_attention_backward at the first of them (all share
 * their operands, so they exist there), instead of a call each that recomputes the row
 * statistics and the scores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "adamw_group.h"
#include "attn_group.h"
#include "jax.h"

enum jax_class { JAX_C_NONE = 0, JAX_C_EW, JAX_C_GATHER, JAX_C_RED };

static int gen_float(int dt) { return dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16; }
static int is_int(int dt) { return dt == TR_DTYPE_I32 || dt == TR_DTYPE_I64; }

static int last_axis(const struct tr_pir_node *x, int64_t axis) {
    if (axis < 0) axis += x->ndim;
    return x->ndim > 0 && axis == x->ndim - 1;
}

/* max_row > 0: a reduction over a longer row is left to the library (cuda's row buffer). */
static enum jax_class classify(const struct tr_pir *p, int id, int64_t max_row, enum jax_kind *kind) {
    const struct tr_pir_node *n = &p->nodes[id];
    *kind = JAX_K_EW;
    if (n->dead || n->op < 0 || n->op >= TR_OP_COUNT || tr_pir_numel(n) <= 0 || !gen_float(n->dtype))
        return JAX_C_NONE;
    const struct tr_pir_node *x = n->n_in > 0 ? &p->nodes[n->in[0]] : NULL;
    if (tr_op_is_elementwise_unary(n->op)) {
        if (n->n_in != 1 || x->dtype != n->dtype) return JAX_C_NONE;
        if (n->op == TR_OP_GELU && n->attrs.ints[0] != 0 && n->attrs.ints[0] != 1) return JAX_C_NONE;
        return JAX_C_EW;
    }
    if (tr_op_is_elementwise_binary(n->op)) {
        if (n->n_in != 2 || x->dtype != n->dtype || p->nodes[n->in[1]].dtype != n->dtype) return JAX_C_NONE;
        return JAX_C_EW;
    }
    switch (n->op) {
    case TR_OP_CAST:
        if (n->n_in != 1 || !(gen_float(x->dtype) || is_int(x->dtype)) || n->attrs.ints[0] != n->dtype)
            return JAX_C_NONE;
        return JAX_C_EW;
    case TR_OP_EMBEDDING: {
        if (n->n_in != 2) return JAX_C_NONE;
        const struct tr_pir_node *ids = &p->nodes[n->in[1]];
        if (x->ndim != 2 || x->dtype != n->dtype || !is_int(ids->dtype) || n->ndim != ids->ndim + 1 ||
            n->shape[n->ndim - 1] != x->shape[1] || x->shape[0] <= 0)
            return JAX_C_NONE;
        return JAX_C_GATHER;
    }
    case TR_OP_SOFTMAX: case TR_OP_LAYER_NORM: case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX:
        if (max_row > 0 && x && x->ndim >= 1 && x->shape[x->ndim - 1] > max_row) return JAX_C_NONE;
        break;
    default:
        break;
    }
    switch (n->op) {
    case TR_OP_SOFTMAX:
        if (n->n_in != 1 || x->dtype != n->dtype || x->ndim < 1) return JAX_C_NONE;
        *kind = JAX_K_SOFTMAX;
        return JAX_C_RED;
    case TR_OP_LAYER_NORM: {
        if (n->n_in != 3 || x->dtype != n->dtype || x->ndim < 1) return JAX_C_NONE;
        float eps = n->attrs.floats[0];
        if (!(eps >= 0.0f) || !isfinite(eps)) return JAX_C_NONE; /* the library says why */
        for (int i = 1; i < 3; i++) {
            const struct tr_pir_node *gb = &p->nodes[n->in[i]];
            if (!gen_float(gb->dtype) || gb->ndim != 1 || gb->shape[0] != x->shape[x->ndim - 1]) return JAX_C_NONE;
        }
        *kind = JAX_K_LAYER_NORM;
        return JAX_C_RED;
    }
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX: {
        if (n->n_in != 1 || x->dtype != n->dtype || !last_axis(x, n->attrs.ints[0])) return JAX_C_NONE;
        if (tr_pir_numel(x) <= 0 || tr_pir_numel(n) * x->shape[x->ndim - 1] != tr_pir_numel(x)) return JAX_C_NONE;
        *kind = n->op == TR_OP_SUM ? JAX_K_SUM : n->op == TR_OP_MEAN ? JAX_K_MEAN : JAX_K_MAX;
        return JAX_C_RED;
    }
    default:
        return JAX_C_NONE;
    }
}

int jax_fusable(const struct tr_pir *p, int id) {
    enum jax_kind k;
    return classify(p, id, 0, &k) != JAX_C_NONE;
}

/* Whether operand i of node n is computed in registers by the kernel (absorbable). */
static int fused_operand(const struct tr_pir_node *n, int i) {
    if (n->op == TR_OP_EMBEDDING) return 0;
    if (n->op == TR_OP_LAYER_NORM) return i == 0;
    return 1;
}

/* Right-aligned broadcast of shape (nd, sh) into the space (snd, ss). */
static int fits(int nd, const int64_t *sh, int snd, const int64_t *ss) {
    if (nd > snd) return 0;
    for (int i = 0; i < nd; i++) {
        int64_t a = sh[nd - 1 - i], s = ss[snd - 1 - i];
        if (a != s && a != 1) return 0;
    }
    return 1;
}

/* ---- consumers (CSR over the live nodes) ---- */

struct consumers {
    int *off;       /* p->n + 1 */
    int *node;      /* reader of each edge */
    int *operand;   /* which of its inputs */
    int *is_output; /* per node: times it is a graph output */
};

static void consumers_free(struct consumers *c) {
    free(c->off);
    free(c->node);
    free(c->operand);
    free(c->is_output);
    memset(c, 0, sizeof *c);
}

static int consumers_build(const struct tr_pir *p, struct consumers *c, struct tr_error *err) {
    memset(c, 0, sizeof *c);
    int n = p->n, edges = 0;
    for (int i = 0; i < n; i++)
        if (!p->nodes[i].dead) edges += p->nodes[i].n_in;
    c->off = calloc((size_t)n + 1, sizeof *c->off);
    c->node = malloc(((size_t)edges + 1) * sizeof *c->node);
    c->operand = malloc(((size_t)edges + 1) * sizeof *c->operand);
    c->is_output = calloc((size_t)n + 1, sizeof *c->is_output);
    if (!c->off || !c->node || !c->operand || !c->is_output) {
        consumers_free(c);
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for the consumers of %d nodes", n);
    }
    for (int i = 0; i < n; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        for (int j = 0; j < d->n_in; j++) c->off[d->in[j] + 1]++;
    }
    for (int i = 0; i < n; i++) c->off[i + 1] += c->off[i];
    int *fill = calloc((size_t)n + 1, sizeof *fill);
    if (!fill) {
        consumers_free(c);
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for the consumers of %d nodes", n);
    }
    for (int i = 0; i < n; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        for (int j = 0; j < d->n_in; j++) {
            int s = d->in[j], at = c->off[s] + fill[s]++;
            c->node[at] = i;
            c->operand[at] = j;
        }
    }
    free(fill);
    for (int i = 0; i < p->n_outputs; i++) c->is_output[p->outputs[i]]++;
    return TR_OK;
}

/* The only reader of id, or -1 when it has several, none, or is a graph output. */
static int only_reader(const struct consumers *c, int id) {
    if (c->is_output[id] || c->off[id + 1] - c->off[id] != 1) return -1;
    return c->node[c->off[id]];
}

/* ---- group norm + SiLU ---- */

/* A GROUP_NORM read only by a SILU of its shape and dtype: the SILU becomes the norm with
 * its fused SiLU (ops.h GROUP_NORM ints[1]), one library call where the SILU would be a
 * kernel of its own reading the norm's output back. */
static int fold_norm_silu(struct tr_pir *p, int *n_folded, struct tr_error *err) {
    struct consumers c;
    int rc = consumers_build(p, &c, err);
    if (rc != TR_OK) return rc;
    *n_folded = 0;
    for (int id = 0; id < p->n; id++) {
        const struct tr_pir_node *gn = &p->nodes[id];
        if (gn->dead || gn->op != TR_OP_GROUP_NORM || gn->attrs.ints[1] ||
            !(gen_float(gn->dtype) || gn->dtype == TR_DTYPE_F16))
            continue;
        int r = only_reader(&c, id);
        if (r < 0) continue;
        struct tr_pir_node *s = &p->nodes[r];
        if (s->op != TR_OP_SILU || s->dtype != gn->dtype || !tr_pir_same_shape(s, gn)) continue;
        s->op = TR_OP_GROUP_NORM;
        s->attrs = gn->attrs;
        s->attrs.ints[1] = 1;
        s->n_in = gn->n_in;
        for (int i = 0; i < gn->n_in; i++) s->in[i] = gn->in[i];
        s->graph_id = -1;
        p->nodes[id].dead = 1;
        (*n_folded)++;
    }
    consumers_free(&c);
    if (*n_folded) rc = tr_pir_compact(p, NULL, err);
    return rc;
}

/* ---- AdamW ---- */

/* Each parameter's AdamW update (adamw_group.h) -> one JAX_OP_ADAMW at the first of
 * m', v' and param' (every operand comes before it) and two JAX_OP_ADAMW_OUT; the SCALEs,
 * the MUL and the CAST go. Where an update may be computed in its param's memory is
 * decided later by steps (executor.c), so no reader can see a value early. */
static int fold_adamw(struct tr_pir *p, int *n_folded, struct tr_error *err) {
    int *uses = malloc(((size_t)p->n + 1) * sizeof *uses);
    if (!uses) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory grouping AdamW updates (%d nodes)", p->n);
    tr_pir_count_uses(p, uses);
    *n_folded = 0;
    for (int id = 0; id < p->n; id++) {
        struct tr_adamw_group g;
        if (!tr_adamw_group_at(p, id, uses, &g) || tr_adamw_group_first(&g) < 0) continue;
        tr_adamw_group_rewrite(p, &g, JAX_OP_ADAMW, JAX_OP_ADAMW_OUT);
        (*n_folded)++;
    }
    free(uses);
    return *n_folded ? tr_pir_compact(p, NULL, err) : TR_OK;
}

/* ---- GEMM epilogues ---- */

static enum tr_act act_of(const struct tr_pir_node *n) {
    switch (n->op) {
    case TR_OP_GELU: return n->attrs.ints[0] == 1 ? TR_ACT_GELU_TANH : n->attrs.ints[0] == 0 ? TR_ACT_GELU : TR_ACT_NONE;
    case TR_OP_RELU: return TR_ACT_RELU;
    case TR_OP_TANH: return TR_ACT_TANH;
    case TR_OP_SILU: return TR_ACT_SILU;
    default: return TR_ACT_NONE;
    }
}

static int fold_epilogues(struct tr_pir *p, int *n_folded, struct tr_error *err) {
    struct consumers c;
    int rc = consumers_build(p, &c, err);
    if (rc != TR_OK) return rc;
    *n_folded = 0;
    for (int m = 0; m < p->n; m++) {
        struct tr_pir_node *mm = &p->nodes[m];
        if (mm->dead || mm->op != TR_OP_MATMUL || mm->n_in != 2 || !gen_float(mm->dtype) || mm->ndim < 1) continue;
        int64_t N = mm->shape[mm->ndim - 1];
        float alpha = tr_matmul_alpha(mm->attrs.floats[0]);
        int bias = -1, cur = m, r;
        enum tr_act act = TR_ACT_NONE;
        int chain[3], n_chain = 0;
        while ((r = only_reader(&c, cur)) >= 0) {
            const struct tr_pir_node *n = &p->nodes[r];
            if (n->dtype != mm->dtype || n->ndim != mm->ndim ||
                memcmp(n->shape, mm->shape, sizeof(int64_t) * (size_t)mm->ndim) != 0)
                break;
            if (n->op == TR_OP_SCALE && n->attrs.floats[1] == 0.0f && bias < 0 && act == TR_ACT_NONE && n_chain == 0) {
                alpha *= n->attrs.floats[0];
            } else if (n->op == TR_OP_ADD && bias < 0 && act == TR_ACT_NONE) {
                int o = n->in[0] == cur ? n->in[1] : n->in[0];
                const struct tr_pir_node *b = &p->nodes[o];
                if (o == cur || b->ndim < 1 || b->shape[b->ndim - 1] != N || tr_pir_numel(b) != N ||
                    (b->dtype != mm->dtype && b->dtype != TR_DTYPE_F32))
                    break;
                bias = o;
            } else if (act == TR_ACT_NONE && act_of(n) != TR_ACT_NONE) {
                act = act_of(n);
            } else {
                break;
            }
            chain[n_chain++] = r;
            cur = r;
            if (n_chain == 3) break;
        }
        if (n_chain == 0) continue;
        /* The pattern's last node becomes the fused call (its inputs all come before it). */
        struct tr_pir_node *root = &p->nodes[cur];
        int a = mm->in[0], b = mm->in[1];
        struct tr_attrs at;
        memset(&at, 0, sizeof at);
        at.ints[0] = mm->attrs.ints[0];
        at.ints[1] = mm->attrs.ints[1];
        at.ints[2] = act;
        at.floats[0] = alpha;
        root->op = JAX_OP_MATMUL_EPI;
        root->attrs = at;
        root->n_in = bias >= 0 ? 3 : 2;
        root->in[0] = a;
        root->in[1] = b;
        root->in[2] = bias;
        root->graph_id = -1;
        mm->dead = 1;
        for (int i = 0; i < n_chain - 1; i++) p->nodes[chain[i]].dead = 1;
        (*n_folded)++;
    }
    consumers_free(&c);
    if (*n_folded) rc = tr_pir_compact(p, NULL, err);
    return rc;
}

/* ---- clusters ---- */

void jax_fusion_free(struct jax_fusion *f) {
    if (!f) return;
    for (int i = 0; i < f->n_clusters; i++) {
        free(f->clusters[i].members);
        free(f->clusters[i].args);
    }
    free(f->clusters);
    free(f->cluster_of);
    free(f->attn);
    free(f->attn_of);
    free(f->lse_of);
    memset(f, 0, sizeof *f);
}

/* Can cand join cluster ci (membership of every node > cand is final)? */
static int can_join(const struct tr_pir *p, const struct consumers *c, const struct jax_fusion *f, int ci, int cand,
                    int64_t max_row) {
    const struct jax_cluster *cl = &f->clusters[ci];
    enum jax_kind kind;
    enum jax_class cls = classify(p, cand, max_row, &kind);
    const struct tr_pir_node *n = &p->nodes[cand];
    if (cls == JAX_C_NONE || f->cluster_of[cand] >= 0 || c->is_output[cand]) return 0;
    for (int e = c->off[cand]; e < c->off[cand + 1]; e++)
        if (f->cluster_of[c->node[e]] != ci || !fused_operand(&p->nodes[c->node[e]], c->operand[e])) return 0;
    if (!fits(n->ndim, n->shape, cl->ndim, cl->shape)) return 0;
    if (cls == JAX_C_RED) {
        /* one reduction per kernel; as a producer only softmax and layer norm, covering the space */
        if (cl->red >= 0 || (kind != JAX_K_SOFTMAX && kind != JAX_K_LAYER_NORM) || n->ndim != cl->ndim) return 0;
        for (int i = 0; i < n->ndim; i++)
            if (n->shape[i] != cl->shape[i]) return 0;
    }
    if (cls == JAX_C_GATHER && n->shape[n->ndim - 1] != cl->shape[cl->ndim - 1]) return 0;
    return 1;
}

static int build_cluster(const struct tr_pir *p, const struct consumers *c, struct jax_fusion *f, int root, int fuse,
                         int64_t max_row, char *frontier, struct tr_error *err) {
    enum jax_kind kind;
    enum jax_class cls = classify(p, root, max_row, &kind);
    int ci = f->n_clusters;
    struct jax_cluster *cl = &f->clusters[ci];
    memset(cl, 0, sizeof *cl);
    const struct tr_pir_node *r = &p->nodes[root];
    const struct tr_pir_node *space = cls == JAX_C_RED ? &p->nodes[r->in[0]] : r;
    cl->kind = kind;
    cl->root = root;
    cl->red = cls == JAX_C_RED ? root : -1;
    cl->ndim = space->ndim;
    memcpy(cl->shape, space->shape, sizeof cl->shape);
    int cap = 0;
    if (tr_pir_grow((void **)&cl->members, &cap, 1, sizeof(int)))
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for a cluster");
    cl->members[cl->n_members++] = root;
    f->cluster_of[root] = ci;
    f->n_clusters++;
    if (!fuse) return TR_OK;

    int lowest = root;
    for (int i = 0; i < r->n_in; i++)
        if (fused_operand(r, i)) {
            frontier[r->in[i]] = 1;
            if (r->in[i] < lowest) lowest = r->in[i];
        }
    for (int id = root - 1; id >= lowest && id >= 0; id--) {
        if (!frontier[id]) continue;
        frontier[id] = 0;
        if (!can_join(p, c, f, ci, id, max_row)) continue;
        enum jax_kind k2;
        if (classify(p, id, max_row, &k2) == JAX_C_RED) {
            cl->red = id;
            cl->kind = k2;
        }
        if (tr_pir_grow((void **)&cl->members, &cap, cl->n_members + 1, sizeof(int)))
            return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for a cluster of %d nodes", cl->n_members);
        cl->members[cl->n_members++] = id;
        f->cluster_of[id] = ci;
        const struct tr_pir_node *m = &p->nodes[id];
        for (int i = 0; i < m->n_in; i++)
            if (fused_operand(m, i)) {
                frontier[m->in[i]] = 1;
                if (m->in[i] < lowest) lowest = m->in[i];
            }
    }
    /* ascending: the generated code evaluates members in this order */
    for (int i = 0, j = cl->n_members - 1; i < j; i++, j--) {
        int t = cl->members[i];
        cl->members[i] = cl->members[j];
        cl->members[j] = t;
    }
    return TR_OK;
}

/* ---- attention backward groups ---- */

/* Groups in program order; the lead (lowest id) is where the call runs. */
int jax_group_attention_backward(const struct tr_pir *p, struct jax_fusion *f, struct tr_error *err) {
    f->attn_of = malloc(((size_t)p->n + 1) * sizeof *f->attn_of);
    f->lse_of = malloc(((size_t)p->n + 1) * sizeof *f->lse_of);
    f->attn = calloc((size_t)p->n / 2 + 1, sizeof *f->attn);
    if (!f->attn_of || !f->lse_of || !f->attn)
        return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory grouping attention backwards (%d nodes)", p->n);
    for (int i = 0; i < p->n; i++) f->attn_of[i] = f->lse_of[i] = -1;
    for (int id = 0; id < p->n; id++) {
        int j = f->cluster_of && f->cluster_of[id] >= 0 ? -1 : tr_attn_lse_partner(p, id);
        if (j < 0 || (f->cluster_of && f->cluster_of[j] >= 0)) continue;
        f->lse_of[id] = j;
        f->lse_of[j] = id;
        f->n_lse++;
    }
    for (int id = 0; id < p->n; id++) {
        int grad[TR_ATTN_GRADS], n = tr_attn_grad_group(p, id, f->attn_of, grad);
        if (n < 2) continue;
        struct jax_attn_bwd *a = &f->attn[f->n_attn];
        a->lead = id;
        a->n_grads = n;
        a->rel = p->nodes[id].op == TR_OP_ATTENTION_REL_GRAD;
        for (int w = 0; w < TR_ATTN_GRADS; w++) {
            a->grad[w] = grad[w];
            if (grad[w] >= 0) f->attn_of[grad[w]] = f->n_attn;
        }
        f->n_attn++;
    }
    return TR_OK;
}

int jax_fuse(struct tr_pir *p, int fuse, struct jax_fusion *f, struct tr_error *err) {
    return jax_fuse_for(p, fuse, 0, f, err);
}

int jax_fuse_for(struct tr_pir *p, int fuse, int64_t max_row, struct jax_fusion *f, struct tr_error *err) {
    memset(f, 0, sizeof *f);
    int rc;
    if (fuse && ((rc = fold_adamw(p, &f->n_adamw, err)) != TR_OK ||
                 (rc = fold_epilogues(p, &f->n_epilogues, err)) != TR_OK ||
                 (rc = fold_norm_silu(p, &f->n_norm_silu, err)) != TR_OK))
        return rc;
    struct consumers c;
    if ((rc = consumers_build(p, &c, err)) != TR_OK) return rc;
    f->cluster_of = malloc(((size_t)p->n + 1) * sizeof *f->cluster_of);
    f->clusters = calloc((size_t)p->n + 1, sizeof *f->clusters);
    char *frontier = calloc((size_t)p->n + 1, 1);
    if (!f->cluster_of || !f->clusters || !frontier) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory fusing %d nodes", p->n);
        goto done;
    }
    for (int i = 0; i < p->n; i++) f->cluster_of[i] = -1;
    for (int id = p->n - 1; id >= 0; id--) {
        enum jax_kind k;
        if (f->cluster_of[id] >= 0 || classify(p, id, max_row, &k) == JAX_C_NONE) continue;
        if ((rc = build_cluster(p, &c, f, id, fuse, max_row, frontier, err)) != TR_OK) goto done;
    }
    /* clusters were made last root first: number them in program order */
    for (int i = 0, j = f->n_clusters - 1; i < j; i++, j--) {
        struct jax_cluster t = f->clusters[i];
        f->clusters[i] = f->clusters[j];
        f->clusters[j] = t;
    }
    for (int i = 0; i < f->n_clusters; i++)
        for (int j = 0; j < f->clusters[i].n_members; j++) f->cluster_of[f->clusters[i].members[j]] = i;
done:
    free(frontier);
    consumers_free(&c);
    if (rc != TR_OK) jax_fusion_free(f);
    return rc;
}
