/* tf backend — the remapper: grappler's pattern-to-fused-op rewrite over the plugin IR.
 *
 * Each pattern is matched at its root (its last node) and only through intermediates
 * that have exactly one consumer and are not graph outputs: a value somebody else
 * reads must still be computed, so fusing it away would compute it twice or lose it.
 * The root is overwritten with the fused op (it keeps its name, shape and output slot);
 * the intermediates are marked dead. Patterns run in an order where the larger one
 * wins: attention before scale+mask+softmax (whose softmax it contains), layer-norm
 * patterns before GEMM epilogues, so that in BERT's `dense + bias + residual -> LN`
 * the bias goes into the layer norm's single pass and the GEMM stays plain.
 *
 *   attention   MATMUL(q,k,trans_b) [SCALE] [ADD mask] SOFTMAX MATMUL(·,v) -> ATTENTION
 *   sms         [SCALE] [ADD mask] SOFTMAX (at least one of the two)   -> TF_OP_SCALE_MASK_SOFTMAX
 *   embed+ln    2 or 3 EMBEDDINGs summed by ADDs, LAYER_NORM           -> TF_OP_EMBED_LN
 *   brln        ADDs of x, [residual], [bias (D)], LAYER_NORM          -> TF_OP_BIAS_RESIDUAL_LN
 *   gemm        MATMUL [ADD bias (N)] [GELU|TANH|RELU|SILU]            -> TF_OP_GEMM
 *   gn+silu     GROUP_NORM SILU                                       -> GROUP_NORM, SiLU fused
 *   attn bwd    ATTENTION_GRAD for dq, dk, dv of one attention, or ATTENTION_REL_GRAD for
 *               its five operands                                        -> TF_OP_ATTN_BWD
 *               (+ TF_OP_EXTRA_OUT for the outputs beyond the first)
 *   attn+lse    ATTENTION and the ATTENTION_LSE of its backward, or  -> TF_OP_ATTN_LSE
 *               ATTENTION_REL and its ATTENTION_REL_LSE                (+ TF_OP_EXTRA_OUT
 *                                                                       for the lse)
 *   adamw       AdamW's SCALEs, MUL, ADDs, [CAST] and ADAMW_STEP  -> TF_OP_ADAMW
 *               of one parameter (adamw_group.h)                     (+ TF_OP_EXTRA_OUT
 *                                                                       for two of
 *                                                                       param', m', v')
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "adamw_group.h"
#include "attn_group.h"
#include "tf.h"
#include "trident/kernels.h"

struct remap {
    struct tr_pir *p;
    int *uses;      /* live consumers (+1 per output slot) */
    int *cons;      /* a consumer of each node (the only one when uses == 1) */
    struct tf_fusions *f;
};

const char *tf_op_name(int op) {
    switch (op) {
    case TF_OP_GEMM: return "fused_gemm";
    case TF_OP_BIAS_RESIDUAL_LN: return "fused_bias_residual_layer_norm";
    case TF_OP_SCALE_MASK_SOFTMAX: return "fused_scale_mask_softmax";
    case TF_OP_EMBED_LN: return "fused_embedding_sum_layer_norm";
    case TF_OP_ATTN_BWD: return "fused_attention_backward";
    case TF_OP_ATTN_LSE: return "attention_with_lse";
    case TF_OP_EXTRA_OUT: return "extra_output";
    case TF_OP_ADAMW: return "fused_adamw";
    default: return tr_op_name(op);
    }
}

static void tally(struct tf_fusions *f, const char *name, int removed) {
    f->nodes_removed += removed;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->kind[i].name, name) == 0) {
            f->kind[i].count++;
            return;
        }
    if (f->n == TF_MAX_PATTERNS) return;
    snprintf(f->kind[f->n].name, sizeof f->kind[f->n].name, "%s", name);
    f->kind[f->n++].count = 1;
}

const char *tf_fusions_str(const struct tf_fusions *f, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < f->n && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s x%d", i ? ", " : "", f->kind[i].name, f->kind[i].count);
    if (f->n == 0) snprintf(buf, n, "none");
    return buf;
}

static void recount(struct remap *r) {
    struct tr_pir *p = r->p;
    tr_pir_count_uses(p, r->uses);
    for (int i = 0; i < p->n; i++) r->cons[i] = -1;
    for (int i = 0; i < p->n; i++) {
        if (p->nodes[i].dead) continue;
        for (int j = 0; j < p->nodes[i].n_in; j++) r->cons[p->nodes[i].in[j]] = i;
    }
}

static struct tr_pir_node *node_at(struct remap *r, int id) { return &r->p->nodes[id]; }

/* id is read by exactly one node and by no graph output: it may be fused away. */
static int sole(struct remap *r, int id) {
    return r->uses[id] == 1 && node_at(r, id)->output_index < 0 && !node_at(r, id)->dead && r->cons[id] >= 0;
}

/* shape s (nd axes) broadcasts right-aligned to `full` (nf axes) */
static int broadcasts(int nd, const int64_t *s, int nf, const int64_t *full) {
    int64_t st[TR_MAX_DIMS];
    return nf <= TR_MAX_DIMS && tr_broadcast_strides(nd, s, nf, full, st);
}

static int is_float_dt(int dt) { return dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16; }

/* MATMUL's alpha: ops.h's default 1 where the attribute was left 0. */
static float mm_alpha(const struct tr_pir_node *m) { return tr_matmul_alpha(m->attrs.floats[0]); }

static void drop_node(struct remap *r, int id) { node_at(r, id)->dead = 1; }

static void set_inputs(struct tr_pir_node *n, int k, const int *in) {
    n->n_in = k;
    for (int i = 0; i < k; i++) n->in[i] = in[i];
    for (int i = k; i < TR_PIR_MAX_IN; i++) n->in[i] = 0;
}

/* ADD(a, b) where one side is the chain (the value the pattern continues through) and
 * the other an addend that broadcasts to it: *chain and *other, or 0. The chain side
 * has the ADD's own shape; when both do, a sole SCALE or MATMUL (what a chain of scores
 * is made of) is taken, else the first. Either choice computes the same sum. */
static int split_add(struct remap *r, int add, int *chain, int *other) {
    const struct tr_pir_node *a = node_at(r, add);
    const struct tr_pir_node *x = node_at(r, a->in[0]), *y = node_at(r, a->in[1]);
    int fx = tr_pir_same_shape(x, a), fy = tr_pir_same_shape(y, a);
    int pick = -1;
    if (fx && fy) {
        int py = (y->op == TR_OP_SCALE || y->op == TR_OP_MATMUL) && sole(r, a->in[1]);
        int px = (x->op == TR_OP_SCALE || x->op == TR_OP_MATMUL) && sole(r, a->in[0]);
        pick = py && !px ? 1 : 0;
    } else if (fx) {
        pick = 0;
    } else if (fy) {
        pick = 1;
    }
    if (pick < 0) return 0;
    *chain = a->in[pick];
    *other = a->in[1 - pick];
    return 1;
}

/* ---- attention ---- */

/* A SCALE without a bias read only here, at *cur: *scl = it, *cur = its input, and its
 * factor returned (1 where there is none); the matchers fold it into their own scale. */
static float peel_scale(struct remap *r, int *cur, int *scl) {
    const struct tr_pir_node *s = node_at(r, *cur);
    if (s->op != TR_OP_SCALE || !sole(r, *cur) || s->attrs.floats[1] != 0.0f) return 1.0f;
    *scl = *cur;
    *cur = s->in[0];
    return s->attrs.floats[0];
}

static int match_attention(struct remap *r, int root) {
    struct tr_pir_node *m2 = node_at(r, root);
    if (m2->op != TR_OP_MATMUL || m2->attrs.ints[0] || m2->attrs.ints[1] || mm_alpha(m2) != 1.0f) return 0;
    int sm = m2->in[0], v = m2->in[1];
    if (node_at(r, sm)->op != TR_OP_SOFTMAX || !sole(r, sm)) return 0;
    int cur = node_at(r, sm)->in[0], mask = -1, add = -1, scl = -1;
    if (node_at(r, cur)->op == TR_OP_ADD && sole(r, cur)) {
        int ch, ot;
        if (!split_add(r, cur, &ch, &ot)) return 0;
        add = cur;
        mask = ot;
        cur = ch;
    }
    float scale = peel_scale(r, &cur, &scl);
    struct tr_pir_node *m1 = node_at(r, cur);
    if (m1->op != TR_OP_MATMUL || !sole(r, cur) || m1->attrs.ints[0] || !m1->attrs.ints[1]) return 0;
    scale *= mm_alpha(m1);
    const struct tr_pir_node *q = node_at(r, m1->in[0]), *k = node_at(r, m1->in[1]), *vv = node_at(r, v);
    /* (B,H,Tq,D)·(B,Hk,Tk,D)ᵀ with Hk = H, or 1 (the heads a matmul broadcasts) */
    if (q->ndim != 4 || k->ndim != 4 || vv->ndim != 4 || m2->ndim != 4) return 0;
    if (q->dtype != k->dtype || q->dtype != vv->dtype || !is_float_dt(q->dtype)) return 0;
    int64_t B = q->shape[0], H = q->shape[1], Hk = k->shape[1], Tk = k->shape[2];
    if (k->shape[0] != B || vv->shape[0] != B || (Hk != H && Hk != 1) || vv->shape[1] != Hk || vv->shape[2] != Tk ||
        k->shape[3] != q->shape[3])
        return 0;
    if (!(scale != 0.0f) || scale != scale) return 0; /* 0 means 1/sqrt(D) to the attention op */
    if (mask >= 0) {
        const struct tr_pir_node *mk = node_at(r, mask);
        const int64_t full[4] = {B, H, q->shape[2], Tk};
        if ((mk->dtype != TR_DTYPE_F32 && mk->dtype != q->dtype) || !broadcasts(mk->ndim, mk->shape, 4, full)) return 0;
    }
    int in[4] = {m1->in[0], m1->in[1], v, mask};
    set_inputs(m2, mask >= 0 ? 4 : 3, in);
    memset(&m2->attrs, 0, sizeof m2->attrs);
    m2->op = TR_OP_ATTENTION;
    m2->attrs.floats[0] = scale;
    drop_node(r, sm);
    drop_node(r, cur);
    if (add >= 0) drop_node(r, add);
    if (scl >= 0) drop_node(r, scl);
    tally(r->f, "attention", 2 + (add >= 0) + (scl >= 0));
    return 1;
}

/* ---- scale + mask + softmax ---- */

static int match_sms(struct remap *r, int root) {
    struct tr_pir_node *sm = node_at(r, root);
    if (sm->op != TR_OP_SOFTMAX || !is_float_dt(sm->dtype)) return 0;
    int cur = sm->in[0], mask = -1, add = -1, scl = -1;
    if (node_at(r, cur)->op == TR_OP_ADD && sole(r, cur)) {
        int ch, ot;
        if (split_add(r, cur, &ch, &ot)) {
            const struct tr_pir_node *mk = node_at(r, ot);
            if ((mk->dtype == TR_DTYPE_F32 || mk->dtype == sm->dtype) && broadcasts(mk->ndim, mk->shape, sm->ndim, sm->shape)) {
                add = cur;
                mask = ot;
                cur = ch;
            }
        }
    }
    float scale = peel_scale(r, &cur, &scl);
    if (add < 0 && scl < 0) return 0;
    if (!tr_pir_same_shape(node_at(r, cur), sm) || node_at(r, cur)->dtype != sm->dtype) return 0;
    int in[2] = {cur, mask};
    set_inputs(sm, mask >= 0 ? 2 : 1, in);
    memset(&sm->attrs, 0, sizeof sm->attrs);
    sm->op = TF_OP_SCALE_MASK_SOFTMAX;
    sm->attrs.ints[0] = mask >= 0;
    sm->attrs.floats[0] = scale;
    if (add >= 0) drop_node(r, add);
    if (scl >= 0) drop_node(r, scl);
    tally(r->f, add >= 0 && scl >= 0 ? "scale+mask+softmax" : add >= 0 ? "mask+softmax" : "scale+softmax",
          (add >= 0) + (scl >= 0));
    return 1;
}

/* ---- sums of ADDs feeding a layer norm ---- */

#define MAX_TERMS 3

/* The terms of an ADD tree rooted at x (x itself a sole ADD): inner ADDs that are sole
 * are opened while there is room for their terms (deep = 0: only x's own two). *adds
 * gets the ADD nodes opened. Returns the number of terms. */
static int add_terms(struct remap *r, int x, int deep, int *terms, int *adds, int *n_adds) {
    int n = 0;
    *n_adds = 0;
    terms[n++] = x;
    for (int i = 0; i < n; i++) {
        int t = terms[i];
        int open = node_at(r, t)->op == TR_OP_ADD && sole(r, t) && (t == x || deep) && n + 1 <= MAX_TERMS;
        if (!open) continue;
        adds[(*n_adds)++] = t;
        terms[i] = node_at(r, t)->in[0];
        terms[n++] = node_at(r, t)->in[1];
        i--; /* look at the term that took t's place */
    }
    return n;
}

static int match_embed_ln(struct remap *r, int root) {
    struct tr_pir_node *ln = node_at(r, root);
    if (ln->op != TR_OP_LAYER_NORM || ln->ndim < 1 || !is_float_dt(ln->dtype)) return 0;
    int x = ln->in[0];
    if (node_at(r, x)->op != TR_OP_ADD || !sole(r, x)) return 0;
    int terms[MAX_TERMS], adds[MAX_TERMS], n_adds;
    int n = add_terms(r, x, 1, terms, adds, &n_adds);
    if (n < 2) return 0;
    const int64_t D = ln->shape[ln->ndim - 1];
    int in[TR_PIR_MAX_IN];
    for (int i = 0; i < n; i++) {
        const struct tr_pir_node *e = node_at(r, terms[i]);
        if (e->op != TR_OP_EMBEDDING || !sole(r, terms[i]) || e->dtype != ln->dtype || e->ndim < 1 ||
            e->shape[e->ndim - 1] != D || !broadcasts(e->ndim, e->shape, ln->ndim, ln->shape))
            return 0;
        in[i] = e->in[0];
        in[n + i] = e->in[1];
    }
    in[2 * n] = ln->in[1];
    in[2 * n + 1] = ln->in[2];
    float eps = ln->attrs.floats[0];
    set_inputs(ln, 2 * n + 2, in);
    memset(&ln->attrs, 0, sizeof ln->attrs);
    ln->op = TF_OP_EMBED_LN;
    ln->attrs.ints[0] = n;
    ln->attrs.floats[0] = eps;
    for (int i = 0; i < n; i++) drop_node(r, terms[i]);
    for (int i = 0; i < n_adds; i++) drop_node(r, adds[i]);
    tally(r->f, "embed+ln", n + n_adds);
    return 1;
}

static int brln_try(struct remap *r, int root, int deep) {
    struct tr_pir_node *ln = node_at(r, root);
    int terms[MAX_TERMS], adds[MAX_TERMS], n_adds;
    int n = add_terms(r, ln->in[0], deep, terms, adds, &n_adds);
    if (n < 2) return 0;
    const int64_t D = ln->shape[ln->ndim - 1];
    int full[MAX_TERMS], nf = 0, bias = -1;
    for (int i = 0; i < n; i++) {
        const struct tr_pir_node *t = node_at(r, terms[i]);
        if (tr_pir_same_shape(t, ln) && t->dtype == ln->dtype) {
            full[nf++] = terms[i];
        } else if (bias < 0 && t->ndim >= 1 && t->shape[t->ndim - 1] == D && tr_pir_numel(t) == D &&
                   (t->dtype == ln->dtype || t->dtype == TR_DTYPE_F32)) {
            bias = terms[i];
        } else {
            return 0;
        }
    }
    if (nf < 1 || nf > 2) return 0;
    int in[5] = {full[0], ln->in[1], ln->in[2]}, k = 3;
    if (bias >= 0) in[k++] = bias;
    if (nf == 2) in[k++] = full[1];
    float eps = ln->attrs.floats[0];
    set_inputs(ln, k, in);
    memset(&ln->attrs, 0, sizeof ln->attrs);
    ln->op = TF_OP_BIAS_RESIDUAL_LN;
    ln->attrs.ints[0] = bias >= 0;
    ln->attrs.ints[1] = nf == 2;
    ln->attrs.floats[0] = eps;
    for (int i = 0; i < n_adds; i++) drop_node(r, adds[i]);
    tally(r->f, bias >= 0 && nf == 2 ? "bias+residual+ln" : bias >= 0 ? "bias+ln" : "residual+ln", n_adds);
    return 1;
}

static int match_brln(struct remap *r, int root) {
    struct tr_pir_node *ln = node_at(r, root);
    if (ln->op != TR_OP_LAYER_NORM || ln->ndim < 1 || !is_float_dt(ln->dtype)) return 0;
    int x = ln->in[0];
    if (node_at(r, x)->op != TR_OP_ADD || !sole(r, x)) return 0;
    /* opening inner ADDs may find a term that fits nowhere; x's own two may still fit */
    return brln_try(r, root, 1) || brln_try(r, root, 0);
}

/* ---- norm + activation ---- */

/* GROUP_NORM (no SiLU of its own) read only by a SILU of its shape and dtype -> the
 * GROUP_NORM with its fused SiLU at the SILU's place (ops.h GROUP_NORM ints[1]), as
 * grappler fuses a norm with the activation after it: one pass instead of two. In a
 * training step the norm's output is also read by SiLU's gradient, and stays. */
static int match_gn_silu(struct remap *r, int id) {
    struct tr_pir_node *gn = node_at(r, id);
    if (gn->op != TR_OP_GROUP_NORM || gn->attrs.ints[1] || !sole(r, id) || !is_float_dt(gn->dtype)) return 0;
    struct tr_pir_node *s = node_at(r, r->cons[id]);
    if (s->op != TR_OP_SILU || s->dtype != gn->dtype || !tr_pir_same_shape(s, gn)) return 0;
    s->op = TR_OP_GROUP_NORM;
    s->attrs = gn->attrs;
    s->attrs.ints[1] = 1;
    set_inputs(s, gn->n_in, gn->in);
    drop_node(r, id);
    tally(r->f, "group_norm+silu", 1);
    return 1;
}

/* ---- GEMM epilogues ---- */

static int act_of(const struct tr_pir_node *n, enum tr_act *act) {
    switch (n->op) {
    case TR_OP_GELU: *act = n->attrs.ints[0] ? TR_ACT_GELU_TANH : TR_ACT_GELU; return 1;
    case TR_OP_TANH: *act = TR_ACT_TANH; return 1;
    case TR_OP_RELU: *act = TR_ACT_RELU; return 1;
    case TR_OP_SILU: *act = TR_ACT_SILU; return 1;
    default: return 0;
    }
}

static const char *act_name(enum tr_act a) {
    switch (a) {
    case TR_ACT_GELU: return "gelu";
    case TR_ACT_GELU_TANH: return "gelu_tanh";
    case TR_ACT_RELU: return "relu";
    case TR_ACT_TANH: return "tanh";
    case TR_ACT_SILU: return "silu";
    default: return "";
    }
}

/* Matched from the MATMUL forward, through its sole consumers. */
static int match_gemm(struct remap *r, int mm) {
    struct tr_pir_node *m = node_at(r, mm);
    if (m->op != TR_OP_MATMUL || m->dead || !sole(r, mm) || !is_float_dt(m->dtype) || m->ndim < 2) return 0;
    const int64_t Nn = m->shape[m->ndim - 1];
    int root = r->cons[mm], bias = -1, add = -1;
    struct tr_pir_node *c = node_at(r, root);
    if (c->op == TR_OP_ADD && tr_pir_same_shape(c, m) && c->dtype == m->dtype) {
        int other = c->in[0] == mm ? c->in[1] : c->in[0];
        const struct tr_pir_node *b = node_at(r, other);
        if (other != mm && b->ndim == 1 && b->shape[0] == Nn && (b->dtype == m->dtype || b->dtype == TR_DTYPE_F32)) {
            bias = other;
            add = root;
        }
    }
    /* an activation reading the last value fused so far, if that value has no other reader */
    enum tr_act act = TR_ACT_NONE;
    int last = add >= 0 ? add : mm;
    root = last;
    if (sole(r, last)) {
        const struct tr_pir_node *c2 = node_at(r, r->cons[last]);
        if (act_of(c2, &act) && tr_pir_same_shape(c2, m) && c2->dtype == m->dtype) root = r->cons[last];
        else act = TR_ACT_NONE;
    }
    if (add < 0 && act == TR_ACT_NONE) return 0;
    struct tr_pir_node *rt = node_at(r, root);
    int in[3] = {m->in[0], m->in[1], bias};
    struct tr_attrs at = {0};
    at.ints[0] = m->attrs.ints[0];
    at.ints[1] = m->attrs.ints[1];
    at.ints[2] = act;
    at.ints[3] = bias >= 0;
    at.floats[0] = mm_alpha(m);
    set_inputs(rt, bias >= 0 ? 3 : 2, in);
    rt->attrs = at;
    rt->op = TF_OP_GEMM;
    drop_node(r, mm);
    if (add >= 0 && root != add) drop_node(r, add);
    char name[32];
    snprintf(name, sizeof name, "gemm%s%s%s", bias >= 0 ? "+bias" : "", act ? "+" : "", act_name(act));
    tally(r->f, name, 1 + (add >= 0 && root != add));
    return 1;
}

typedef int (*matcher)(struct remap *r, int id);

/* The ATTENTION_GRAD nodes of one attention (2 or 3), or the ATTENTION_REL_GRAD nodes of
 * one ATTENTION_REL (2 to 5), with the same operands and attrs and different `which` ->
 * one TF_OP_ATTN_BWD at the first of them, computing them all (ints[4] = 1 for the
 * relative-position form; its own gradient in ints[2]); the others become
 * TF_OP_EXTRA_OUT views of its extra outputs. Nothing is removed: the statistics and
 * scores are computed once instead of once per gradient. */
static int match_attn_bwd(struct remap *r, int id) {
    struct tr_pir_node *x = node_at(r, id);
    /* the grouped nodes stop being attention gradients here, so none is taken twice */
    int group[TR_ATTN_GRADS], n = tr_attn_grad_group(r->p, id, NULL, group);
    if (n < 2) return 0;
    const int rel = x->op == TR_OP_ATTENTION_REL_GRAD, own = tr_attn_grad_which(x);
    x->op = TF_OP_ATTN_BWD;
    if (rel) memset(x->attrs.ints, 0, sizeof x->attrs.ints);
    x->attrs.ints[2] = own;
    x->attrs.ints[3] = !rel && (x->n_in == 5 || x->n_in == 7); /* the mask */
    x->attrs.ints[4] = rel;
    for (int w = 0; w < TR_ATTN_GRADS; w++) {
        if (group[w] < 0 || group[w] == id) continue;
        struct tr_pir_node *y = node_at(r, group[w]);
        y->op = TF_OP_EXTRA_OUT;
        memset(&y->attrs, 0, sizeof y->attrs);
        y->attrs.ints[0] = w;
        const int in[1] = {id};
        set_inputs(y, 1, in);
    }
    tally(r->f, rel ? "attention_rel_backward" : n == 3 ? "attention_backward(dq,dk,dv)" : "attention_backward(2 of 3)",
          0);
    return 1;
}

/* An ATTENTION (or ATTENTION_REL) and the ATTENTION_LSE (ATTENTION_REL_LSE) autodiff made
 * of it -> one TF_OP_ATTN_LSE writing the statistics into the EXTRA_OUT the lse node
 * becomes: the backward reads them instead of a pass over every score, and the forward
 * pays nothing for them. */
static int match_attn_lse(struct remap *r, int id) {
    int j = tr_attn_lse_partner(r->p, id);
    if (j < 0) return 0;
    struct tr_pir_node *x = node_at(r, id);
    const int rel = x->op == TR_OP_ATTENTION_REL;
    x->op = TF_OP_ATTN_LSE;
    x->attrs.ints[4] = rel;
    struct tr_pir_node *y = node_at(r, j);
    y->op = TF_OP_EXTRA_OUT;
    memset(&y->attrs, 0, sizeof y->attrs);
    const int in[1] = {id};
    set_inputs(y, 1, in);
    tally(r->f, rel ? "attention_rel+lse" : "attention+lse", 0);
    return 1;
}

/* Whether a live node after `at`, outside the group (in[] ids, n of them), reads x or a
 * view of it. */
static int read_after(const struct tr_pir *p, int x, int at, const int *in, int n) {
    for (int i = at + 1; i < p->n; i++) {
        const struct tr_pir_node *d = &p->nodes[i];
        if (d->dead) continue;
        int member = 0;
        for (int k = 0; k < n; k++) member |= in[k] == i;
        if (member) continue;
        for (int j = 0; j < d->n_in; j++) {
            int r = d->in[j];
            while (p->nodes[r].op == TR_OP_RESHAPE) r = p->nodes[r].in[0];
            if (r == x) return 1;
        }
    }
    return 0;
}

/* AdamW's update of one parameter (adamw_group.h) -> one TF_OP_ADAMW at the first of
 * m', v' and param' (whose inputs all come before it), the other two its EXTRA_OUT
 * nodes, the SCALEs, the MUL and the CAST dead: one pass over the parameter's size
 * where the eight ops made about 21. The call moves the updates of param, m and v up to
 * that first node, so nothing outside the group may read them after it. */
static int match_adamw(struct remap *r, int id) {
    struct tr_adamw_group g;
    if (!tr_adamw_group_at(r->p, id, r->uses, &g)) return 0;
    int ids[TR_ADAMW_INNER + 3], n = tr_adamw_group_nodes(&g, ids), at = tr_adamw_group_first(&g);
    if (at < 0) return 0;
    const int ops[3] = {g.param, g.m, g.v};
    for (int i = 0; i < 3; i++)
        if (read_after(r->p, ops[i], at, ids, n)) return 0;
    tr_adamw_group_rewrite(r->p, &g, TF_OP_ADAMW, TF_OP_EXTRA_OUT);
    tally(r->f, "adamw", n - 3);
    return 1;
}

int tf_remap(struct tr_pir *p, struct tf_fusions *f, struct tr_error *err) {
    memset(f, 0, sizeof *f);
    struct remap r = {.p = p, .f = f};
    r.uses = malloc((p->n ? (size_t)p->n : 1) * sizeof *r.uses);
    r.cons = malloc((p->n ? (size_t)p->n : 1) * sizeof *r.cons);
    if (!r.uses || !r.cons) {
        free(r.uses);
        free(r.cons);
        return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory for the remapper (%d nodes)", p->n);
    }
    static const matcher passes[] = {match_attention, match_sms, match_embed_ln, match_brln, match_gemm,
                                     match_gn_silu, match_attn_bwd, match_attn_lse, match_adamw};
    for (size_t k = 0; k < sizeof passes / sizeof *passes; k++) {
        recount(&r);
        for (int id = 0; id < p->n; id++)
            if (!p->nodes[id].dead && passes[k](&r, id)) recount(&r);
    }
    free(r.uses);
    free(r.cons);
    return TR_OK;
}
