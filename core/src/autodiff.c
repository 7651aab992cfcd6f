/* Reverse-mode autodiff as a graph transform (autodiff.h), and the loss builders.
 *
 * tr_grad marks the nodes that lie on a path from a wrt to the loss (reachable forward
 * from some wrt AND backward from the loss), checks that each of them has a rule before
 * adding anything (so an unsupported op leaves the graph as it was), then walks them in
 * reverse program order. A node's gradient is complete when the walk reaches it, because
 * every consumer of a node comes after it in program order.
 *
 * Rules emit plain ops where they are cheap and exact (broadcast reductions, layout ops,
 * the MSE gradient) and ops.h's *_GRAD ops where a fused kernel pays (softmax, layer
 * norm, attention, embedding, cross entropy). Constants that scale a gradient (MEAN's 1/n,
 * MSE's 2/n) are CONST scalars of the gradient's dtype rather than SCALE's f32 alpha, so
 * that f64 finite-difference checks see no f32 rounding.
 *
 * Errors: a builder failure inside a rule sets g's sticky error (and is returned). A
 * refusal found before anything is added (bad arguments, an op without a rule) is
 * returned through err only and leaves g alive and unchanged: graph.h has no public way
 * to set the sticky error with a message of our own.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "trident/autodiff.h"
#include "graph_nodes.h"

struct ad {
    struct tr_graph *g;
    int *grad; /* per forward node: its gradient node, -1 while none */
    unsigned char *need;
};

static int reshape_like(struct tr_graph *g, int x, int like) {
    if (x < 0 || same_shape(g, x, like)) return x;
    return tr_reshape(g, x, tr_node_ndim(g, like), tr_node_shape(g, like));
}

/* dy has the numpy broadcast of `like`'s shape (and maybe more leading axes): sum it
 * over the broadcast axes, keeping them, then drop the extra leading ones. */
static int reduce_to(struct tr_graph *g, int dy, int like) {
    if (dy < 0) return -1;
    /* copies: adding a node may move the node array under the accessors' pointers */
    int nd = tr_node_ndim(g, dy), tn = tr_node_ndim(g, like);
    int64_t t[TR_MAX_DIMS], ds[TR_MAX_DIMS];
    memcpy(t, tr_node_shape(g, like), (size_t)tn * sizeof *t);
    memcpy(ds, tr_node_shape(g, dy), (size_t)nd * sizeof *ds);
    for (int i = 0; i < nd; i++) {
        int ti = i - (nd - tn);
        int64_t e = ds[i];
        if ((ti < 0 || t[ti] == 1) && e != 1) dy = tr_reduce(g, TR_OP_SUM, dy, i, 1);
        if (dy < 0) return -1;
    }
    return reshape_like(g, dy, like);
}

static int scalar_mul(struct tr_graph *g, int x, double v) {
    int c = tr_const_scalar(g, (enum tr_dtype)tr_node_dtype(g, x), v);
    return tr_mul(g, x, c);
}

static int cast_to(struct tr_graph *g, int x, int dtype) {
    return tr_node_dtype(g, x) == dtype ? x : tr_cast(g, x, (enum tr_dtype)dtype);
}

static void accumulate(struct ad *ad, int id, int contrib) {
    if (contrib < 0) return; /* the graph's sticky error says why */
    int *slot = &ad->grad[id];
    *slot = *slot < 0 ? contrib : tr_add(ad->g, *slot, contrib);
}

static int needs(const struct ad *ad, int id) { return ad->need[id]; }

/* ---- rules: each adds d loss / d input for the inputs that need one ---- */

/* A weight b (K,N) shared by every batch of a (..., M, K): its gradient is one GEMM over
 * the batch's rows, a (P,K)ᵀ·dy (P,N) with P = the batch axes times M, rather than a
 * batched GEMM of (..., K, N) summed over the batch axes afterwards (what every framework's
 * Linear does: a quarter of BERT base fit's memory traffic was those per-batch products).
 * *pa, *pdy: a and dy as (P, K) and (P, N); 0 when the shapes do not allow it (a
 * transposed, a broadcast over dy's batch). */
static int flat_weight_grad(struct tr_graph *g, int a, int b, int dy, int ta, int *pa, int *pdy) {
    const int na = tr_node_ndim(g, a), nd = tr_node_ndim(g, dy);
    if (ta || tr_node_ndim(g, b) != 2 || na < 3 || nd != na) return 0;
    const int64_t *as = tr_node_shape(g, a), *ds = tr_node_shape(g, dy);
    for (int i = 0; i < na - 1; i++)
        if (as[i] != ds[i]) return 0;
    int64_t P = 1;
    for (int i = 0; i < na - 1; i++) P *= as[i];
    const int64_t a2[2] = {P, as[na - 1]}, d2[2] = {P, ds[nd - 1]};
    *pa = tr_reshape(g, a, 2, a2);
    *pdy = tr_reshape(g, dy, 2, d2);
    return *pa >= 0 && *pdy >= 0;
}

static void rule_matmul(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int a = tr_node_input(g, id, 0), b = tr_node_input(g, id, 1);
    const struct tr_attrs *at = tr_node_attrs(g, id);
    int ta = (int)at->ints[0], tb = (int)at->ints[1];
    struct tr_attrs m = attrs0();
    m.floats[0] = at->floats[0];
    if (needs(ad, a)) {
        /* dA (M,K) = alpha·dy·op(b)ᵀ; stored transposed when trans_a */
        int x = ta ? b : dy, y = ta ? dy : b;
        m.ints[0] = ta ? tb : 0;
        m.ints[1] = ta ? 1 : !tb;
        accumulate(ad, a, reduce_to(g, node2(g, TR_OP_MATMUL, x, y, &m), a));
    }
    if (needs(ad, b)) {
        /* dB (K,N) = alpha·op(a)ᵀ·dy; stored transposed when trans_b */
        int x = tb ? dy : a, y = tb ? a : dy;
        m.ints[0] = tb ? 1 : !ta;
        m.ints[1] = tb ? ta : 0;
        const int flat = flat_weight_grad(g, a, b, dy, ta, &x, &y);
        accumulate(ad, b, flat ? node2(g, TR_OP_MATMUL, tb ? y : x, tb ? x : y, &m)
                               : reduce_to(g, node2(g, TR_OP_MATMUL, x, y, &m), b));
    }
}

static void rule_binary(struct ad *ad, int id, int op, int dy) {
    struct tr_graph *g = ad->g;
    int a = tr_node_input(g, id, 0), b = tr_node_input(g, id, 1);
    if (needs(ad, a)) {
        int d = op == TR_OP_ADD || op == TR_OP_SUB ? dy
              : op == TR_OP_MUL                    ? tr_mul(g, dy, b)
                                                   : tr_div(g, dy, b);
        accumulate(ad, a, reduce_to(g, d, a));
    }
    if (needs(ad, b)) {
        int d = op == TR_OP_ADD ? dy
              : op == TR_OP_SUB ? tr_unary(g, TR_OP_NEG, dy)
              : op == TR_OP_MUL ? tr_mul(g, dy, a)
                                : tr_unary(g, TR_OP_NEG, tr_div(g, tr_mul(g, dy, id), b)); /* −dy·y/b */
        accumulate(ad, b, reduce_to(g, d, b));
    }
}

static void rule_unary(struct ad *ad, int id, int op, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0);
    const struct tr_attrs *at = tr_node_attrs(g, id);
    if (op == TR_OP_SCALE) {
        accumulate(ad, x, tr_scale(g, dy, at->floats[0], 0.0f));
    } else if (op == TR_OP_NEG) {
        accumulate(ad, x, tr_unary(g, TR_OP_NEG, dy));
    } else {
        struct tr_attrs u = attrs0();
        u.ints[0] = op;
        u.ints[1] = op == TR_OP_GELU ? at->ints[0] : 0;
        u.n_ints = 2;
        accumulate(ad, x, node2(g, TR_OP_UNARY_GRAD, x, dy, &u));
    }
}

static void rule_layer_norm(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0), gamma = tr_node_input(g, id, 1), beta = tr_node_input(g, id, 2);
    struct tr_attrs a = attrs0();
    a.floats[0] = tr_node_attrs(g, id)->floats[0];
    if (needs(ad, x)) {
        int in[3] = {x, gamma, dy};
        accumulate(ad, x, tr_graph_add_node(g, TR_OP_LAYER_NORM_GRAD, 3, in, &a));
    }
    if (needs(ad, gamma)) accumulate(ad, gamma, node2(g, TR_OP_LAYER_NORM_GRAD_GAMMA, x, dy, &a));
    if (needs(ad, beta)) accumulate(ad, beta, reduce_to(g, dy, beta));
}

/* CONV2D: dx and dw by the two backward convolutions, dbias the sum of dy over N,H,W. */
static void rule_conv2d(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0), w = tr_node_input(g, id, 1);
    struct tr_attrs a = *tr_node_attrs(g, id);
    if (needs(ad, x)) {
        a.ints[5] = tr_node_shape(g, x)[1];
        a.ints[6] = tr_node_shape(g, x)[2];
        accumulate(ad, x, node2(g, TR_OP_CONV2D_GRAD_INPUT, dy, w, &a));
    }
    if (needs(ad, w)) {
        a.ints[5] = tr_node_shape(g, w)[2];
        a.ints[6] = tr_node_shape(g, w)[3];
        accumulate(ad, w, node2(g, TR_OP_CONV2D_GRAD_WEIGHT, x, dy, &a));
    }
    if (tr_node_n_inputs(g, id) == 3) {
        int b = tr_node_input(g, id, 2);
        if (needs(ad, b)) accumulate(ad, b, cast_to(g, reduce_to(g, dy, b), tr_node_dtype(g, b)));
    }
}

/* GROUP_NORM: the fused SiLU's gradient first (at the affine output, recomputed), then
 * the plain group norm's rules, as LAYER_NORM's. */
static void rule_group_norm(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0), gamma = tr_node_input(g, id, 1), beta = tr_node_input(g, id, 2);
    struct tr_attrs a = *tr_node_attrs(g, id);
    if (a.ints[1]) {
        a.ints[1] = 0;
        int in[3] = {x, gamma, beta};
        int z = tr_graph_add_node(g, TR_OP_GROUP_NORM, 3, in, &a);
        struct tr_attrs u = attrs0();
        u.ints[0] = TR_OP_SILU;
        u.n_ints = 2;
        dy = node2(g, TR_OP_UNARY_GRAD, z, dy, &u);
    }
    if (needs(ad, x)) {
        int in[3] = {x, gamma, dy};
        accumulate(ad, x, tr_graph_add_node(g, TR_OP_GROUP_NORM_GRAD, 3, in, &a));
    }
    if (needs(ad, gamma))
        accumulate(ad, gamma, cast_to(g, node2(g, TR_OP_GROUP_NORM_GRAD_GAMMA, x, dy, &a), tr_node_dtype(g, gamma)));
    if (needs(ad, beta)) accumulate(ad, beta, cast_to(g, reduce_to(g, dy, beta), tr_node_dtype(g, beta)));
}

/* SUM/MEAN/MAX: dy has x's shape reduced over one axis. */
static void rule_reduce(struct ad *ad, int id, int op, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0);
    const struct tr_attrs *at = tr_node_attrs(g, id);
    if (op == TR_OP_MAX) {
        struct tr_attrs m = *at;
        accumulate(ad, x, node2(g, TR_OP_MAX_GRAD, x, dy, &m));
        return;
    }
    int nd = tr_node_ndim(g, x), axis = (int)at->ints[0];
    int64_t kshape[TR_MAX_DIMS];
    memcpy(kshape, tr_node_shape(g, x), (size_t)nd * sizeof *kshape);
    int64_t n = kshape[axis];
    kshape[axis] = 1;
    int d = at->ints[1] ? dy : tr_reshape(g, dy, nd, kshape);
    struct tr_attrs b = attrs0();
    b.n_ints = nd;
    memcpy(b.ints, tr_node_shape(g, x), (size_t)nd * sizeof *b.ints);
    d = node1(g, TR_OP_BROADCAST, d, &b);
    if (op == TR_OP_MEAN && d >= 0) d = scalar_mul(g, d, 1.0 / (double)n);
    accumulate(ad, x, d);
}

/* ATTENTION: one ATTENTION_GRAD per operand that needs it, each given the forward's output
 * and its ATTENTION_LSE, so that the backward reads the softmax statistics instead of
 * recomputing them (a backend computes the ATTENTION_LSE in the forward's own pass). */
static void rule_attention(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int n = tr_node_n_inputs(g, id);
    int fwd[4] = {tr_node_input(g, id, 0), tr_node_input(g, id, 1), tr_node_input(g, id, 2),
                  n == 4 ? tr_node_input(g, id, 3) : -1};
    int lse = -1, in[7] = {fwd[0], fwd[1], fwd[2], dy, fwd[3]}, k = n + 1;
    for (int which = 0; which < 3; which++) {
        if (!needs(ad, in[which])) continue;
        if (lse < 0) {
            lse = tr_graph_add_node(g, TR_OP_ATTENTION_LSE, n, fwd, tr_node_attrs(g, id));
            in[k++] = id;
            in[k++] = lse;
        }
        struct tr_attrs a = *tr_node_attrs(g, id);
        a.ints[2] = which;
        a.n_ints = 3;
        accumulate(ad, in[which], tr_graph_add_node(g, TR_OP_ATTENTION_GRAD, k, in, &a));
    }
}

/* ATTENTION_REL (q, k, v, rel_h, rel_w): one ATTENTION_REL_GRAD node per operand that
 * needs a gradient, each given the forward's output and its ATTENTION_REL_LSE (as
 * ATTENTION's rule); rel_h's and rel_w's flow back through the MATMULs that made them. */
static void rule_attention_rel(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int in[8], lse = -1;
    for (int i = 0; i < 5; i++) in[i] = tr_node_input(g, id, i);
    in[5] = dy;
    for (int which = 0; which < 5; which++) {
        if (!needs(ad, in[which])) continue;
        if (lse < 0) {
            lse = tr_graph_add_node(g, TR_OP_ATTENTION_REL_LSE, 5, in, tr_node_attrs(g, id));
            in[6] = id;
            in[7] = lse;
        }
        struct tr_attrs a = *tr_node_attrs(g, id);
        a.ints[0] = which;
        a.n_ints = 1;
        accumulate(ad, in[which], tr_graph_add_node(g, TR_OP_ATTENTION_REL_GRAD, 8, in, &a));
    }
}

/* RMS_NORM (x, w): dx by RMS_NORM_GRAD, dw by RMS_NORM_GRAD_W (the same for both
 * scalings, since d(1 + w) = dw). */
static void rule_rms_norm(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0), w = tr_node_input(g, id, 1);
    struct tr_attrs a = attrs0();
    a.floats[0] = tr_node_attrs(g, id)->floats[0];
    a.ints[0] = tr_node_attrs(g, id)->ints[0];
    a.n_ints = 1;
    if (needs(ad, x)) {
        int in[3] = {x, w, dy};
        accumulate(ad, x, tr_graph_add_node(g, TR_OP_RMS_NORM_GRAD, 3, in, &a));
    }
    if (needs(ad, w)) accumulate(ad, w, node2(g, TR_OP_RMS_NORM_GRAD_W, x, dy, &a));
}

/* ROPE is a rotation per (position, pair): its adjoint is the opposite rotation. */
static void rule_rope(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    struct tr_attrs a = *tr_node_attrs(g, id);
    a.ints[1] = !a.ints[1];
    a.n_ints = 2;
    accumulate(ad, tr_node_input(g, id, 0), node2(g, TR_OP_ROPE, dy, tr_node_input(g, id, 1), &a));
}

static void rule_mse(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int pred = tr_node_input(g, id, 0), target = tr_node_input(g, id, 1);
    int64_t n = tr_shape_numel(tr_node_ndim(g, pred), tr_node_shape(g, pred));
    int d = tr_sub(g, pred, target);
    d = tr_mul(g, scalar_mul(g, d, 2.0 / (double)(n > 0 ? n : 1)), cast_to(g, dy, tr_node_dtype(g, pred)));
    if (needs(ad, pred)) accumulate(ad, pred, d);
    if (needs(ad, target)) accumulate(ad, target, tr_unary(g, TR_OP_NEG, d));
}

static int const_fill(struct tr_graph *g, int like, double v);

/* UPDATE_SLICE (x, update, start): dx is dy with the slice zeroed (the same op with a zero
 * update); dupdate is dy's slice. No dynamic slice op exists, so dupdate needs start to be
 * a CONST (check_rules refuses otherwise); dx works for any start. */
static void rule_update_slice(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int x = tr_node_input(g, id, 0), u = tr_node_input(g, id, 1), start = tr_node_input(g, id, 2);
    int axis = (int)tr_node_attrs(g, id)->ints[0];
    if (needs(ad, x)) {
        int zeros = const_fill(g, u, 0.0);
        accumulate(ad, x, zeros < 0 ? zeros : tr_update_slice(g, dy, zeros, start, axis));
    }
    if (needs(ad, u)) {
        const int32_t *s = tr_node_data(g, start);
        int64_t n = tr_node_shape(g, u)[axis];
        accumulate(ad, u, s ? tr_slice(g, dy, axis, s[0], s[0] + n, 1) : -1);
    }
}

static void apply_rule(struct ad *ad, int id, int dy) {
    struct tr_graph *g = ad->g;
    int op = tr_node_op(g, id);
    int x = tr_node_input(g, id, 0);
    const struct tr_attrs *at = tr_node_attrs(g, id);
    switch (op) {
    case TR_OP_MATMUL:
        rule_matmul(ad, id, dy);
        break;
    case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV:
        rule_binary(ad, id, op, dy);
        break;
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
        rule_unary(ad, id, op, dy);
        break;
    case TR_OP_SOFTMAX: {
        struct tr_attrs a = attrs0();
        accumulate(ad, x, node2(g, TR_OP_SOFTMAX_GRAD, id, dy, &a));
        break;
    }
    case TR_OP_LAYER_NORM:
        rule_layer_norm(ad, id, dy);
        break;
    case TR_OP_EMBEDDING: { /* the padding row, if any, gets none */
        struct tr_attrs a = attrs0();
        a.ints[0] = tr_node_shape(g, x)[0];
        a.ints[1] = at->ints[0];
        a.ints[2] = at->ints[0] ? at->ints[1] : 0;
        a.n_ints = at->ints[0] ? 3 : 1;
        if (needs(ad, x)) accumulate(ad, x, node2(g, TR_OP_EMBEDDING_GRAD, tr_node_input(g, id, 1), dy, &a));
        break;
    }
    case TR_OP_RESHAPE: case TR_OP_BROADCAST:
        accumulate(ad, x, op == TR_OP_RESHAPE ? reshape_like(g, dy, x) : reduce_to(g, dy, x));
        break;
    case TR_OP_TRANSPOSE: {
        int perm[TR_MAX_DIMS];
        for (int i = 0; i < at->n_ints; i++) perm[at->ints[i]] = i;
        accumulate(ad, x, tr_transpose(g, dy, at->n_ints, perm));
        break;
    }
    case TR_OP_SLICE: {
        struct tr_attrs a = *at;
        a.ints[4] = tr_node_shape(g, x)[at->ints[0]];
        a.n_ints = 5;
        accumulate(ad, x, node1(g, TR_OP_SLICE_GRAD, dy, &a));
        break;
    }
    case TR_OP_SLICE_GRAD: /* the adjoint of placing dy is taking it back */
        accumulate(ad, x, tr_slice(g, dy, (int)at->ints[0], at->ints[1],
                                   at->ints[1] + (tr_node_shape(g, x)[at->ints[0]] - 1) * at->ints[3] + 1,
                                   at->ints[3]));
        break;
    case TR_OP_CONCAT: {
        int axis = (int)at->ints[0];
        int64_t off = 0;
        for (int i = 0; i < tr_node_n_inputs(g, id); i++) {
            int in = tr_node_input(g, id, i);
            int64_t len = tr_node_shape(g, in)[axis];
            if (needs(ad, in)) accumulate(ad, in, tr_slice(g, dy, axis, off, off + len, 1));
            off += len;
        }
        break;
    }
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX:
        rule_reduce(ad, id, op, dy);
        break;
    case TR_OP_CAST:
        accumulate(ad, x, cast_to(g, dy, tr_node_dtype(g, x)));
        break;
    case TR_OP_ATTENTION:
        rule_attention(ad, id, dy);
        break;
    case TR_OP_ATTENTION_REL:
        rule_attention_rel(ad, id, dy);
        break;
    case TR_OP_CROSS_ENTROPY: {
        struct tr_attrs a = *at;
        int in[3] = {x, tr_node_input(g, id, 1), dy};
        accumulate(ad, x, tr_graph_add_node(g, TR_OP_CROSS_ENTROPY_GRAD, 3, in, &a));
        break;
    }
    case TR_OP_MSE:
        rule_mse(ad, id, dy);
        break;
    case TR_OP_RMS_NORM:
        rule_rms_norm(ad, id, dy);
        break;
    case TR_OP_ROPE:
        rule_rope(ad, id, dy);
        break;
    case TR_OP_UPDATE_SLICE:
        rule_update_slice(ad, id, dy);
        break;
    case TR_OP_CONV2D:
        rule_conv2d(ad, id, dy);
        break;
    case TR_OP_GROUP_NORM:
        rule_group_norm(ad, id, dy);
        break;
    default:
        break; /* refused by check_rules before anything was added */
    }
}

/* Before adding anything: every node on a path has a rule, and no path goes through an
 * input that cannot be differentiated. */
static int check_rules(const struct ad *ad, int loss, struct tr_error *err) {
    const struct tr_graph *g = ad->g;
    for (int id = loss; id >= 0; id--) {
        if (!ad->need[id]) continue;
        int op = tr_node_op(g, id);
        const char *why = NULL;
        int bad_input = -1;
        switch (op) {
        case TR_OP_INPUT: case TR_OP_PARAM: case TR_OP_CONST:
        case TR_OP_MATMUL: case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV:
        case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
        case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
        case TR_OP_SOFTMAX: case TR_OP_LAYER_NORM: case TR_OP_RESHAPE: case TR_OP_TRANSPOSE:
        case TR_OP_SLICE: case TR_OP_CONCAT: case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX:
        case TR_OP_BROADCAST: case TR_OP_SLICE_GRAD: case TR_OP_MSE: case TR_OP_RMS_NORM:
        case TR_OP_CONV2D: case TR_OP_GROUP_NORM: case TR_OP_ATTENTION_REL:
            break;
        case TR_OP_ROPE:
            if (ad->need[tr_node_input(g, id, 1)]) bad_input = 1, why = "the positions are not differentiable";
            break;
        case TR_OP_CAST:
            if (!tr_dtype_is_float((enum tr_dtype)tr_node_dtype(g, id)) ||
                !tr_dtype_is_float((enum tr_dtype)tr_node_dtype(g, tr_node_input(g, id, 0))))
                why = "a cast to or from an integer dtype has no gradient";
            break;
        case TR_OP_EMBEDDING:
            if (ad->need[tr_node_input(g, id, 1)]) bad_input = 1, why = "the ids are not differentiable";
            break;
        case TR_OP_UPDATE_SLICE:
            if (ad->need[tr_node_input(g, id, 2)]) bad_input = 2, why = "the start is not differentiable";
            else if (ad->need[tr_node_input(g, id, 1)] && (tr_node_op(g, tr_node_input(g, id, 2)) != TR_OP_CONST ||
                                                          !tr_node_data(g, tr_node_input(g, id, 2))))
                bad_input = 1, why = "update_slice: gradient needs a constant start (the start is read at run time)";
            break;
        case TR_OP_CROSS_ENTROPY:
            if (ad->need[tr_node_input(g, id, 1)]) bad_input = 1, why = "the labels are not differentiable";
            break;
        case TR_OP_ATTENTION:
            if (tr_node_n_inputs(g, id) == 4 && ad->need[tr_node_input(g, id, 3)])
                bad_input = 3, why = "the mask is not differentiated";
            break;
        default:
            why = "no gradient rule for this op (second derivatives are not supported)";
            break;
        }
        if (why) {
            char in_msg[TR_NAME_MAX + 64] = "";
            if (bad_input >= 0) {
                int in = tr_node_input(g, id, bad_input);
                snprintf(in_msg, sizeof in_msg, " (input %d is node %d '%s', which depends on a wrt)", bad_input, in,
                         tr_node_name(g, in));
            }
            return tr_error_set(err, TR_ERR_UNSUPPORTED, "tr_grad: node %d %s '%s' lies between a wrt and the loss: %s%s",
                                id, tr_op_name(op), tr_node_name(g, id), why, in_msg);
        }
    }
    return TR_OK;
}

/* A CONST of node `like`'s dtype and shape filled with v (0 or 1). */
static int const_fill(struct tr_graph *g, int like, double v) {
    struct tr_tensor t = tr_node_tensor(g, like);
    int64_t n = tr_tensor_numel(&t);
    size_t size = tr_dtype_size(t.dtype);
    void *data = calloc((size_t)(n > 0 ? n : 1), size ? size : 1);
    if (!data) return -2;
    t.data = data;
    if (v != 0.0)
        for (int64_t i = 0; i < n; i++) tr_tensor_set_f64(&t, i, v);
    int id = tr_const(g, NULL, t.dtype, t.ndim, t.shape, data);
    free(data);
    return id;
}

static int check_args(const struct tr_graph *g, int loss, int n_wrt, const int *wrt, const int *grads,
                      struct tr_error *err) {
    if (!g) return tr_error_set(err, TR_ERR_INVALID, "tr_grad: NULL graph");
    int n = tr_graph_n_nodes(g);
    if (n_wrt < 0 || (n_wrt > 0 && (!wrt || !grads)))
        return tr_error_set(err, TR_ERR_INVALID, "tr_grad: %d wrt nodes with %s", n_wrt,
                            !wrt ? "no wrt array" : "no grads array");
    if (loss < 0 || loss >= n)
        return tr_error_set(err, TR_ERR_INVALID, "tr_grad: loss %d is not a node id in [0,%d)", loss, n);
    struct tr_tensor lt = tr_node_tensor(g, loss);
    if (!tr_dtype_is_float(lt.dtype) || tr_tensor_numel(&lt) != 1) {
        char sh[160];
        return tr_error_set(err, TR_ERR_SHAPE, "tr_grad: loss node %d %s '%s' is %s%s, expected one float element",
                            loss, tr_op_name(tr_node_op(g, loss)), tr_node_name(g, loss), tr_dtype_name(lt.dtype),
                            tr_shape_str(lt.ndim, lt.shape, sh, sizeof sh));
    }
    for (int i = 0; i < n_wrt; i++) {
        if (wrt[i] < 0 || wrt[i] >= n)
            return tr_error_set(err, TR_ERR_INVALID, "tr_grad: wrt[%d] = %d is not a node id in [0,%d)", i, wrt[i], n);
        if (!tr_dtype_is_float((enum tr_dtype)tr_node_dtype(g, wrt[i])))
            return tr_error_set(err, TR_ERR_INVALID, "tr_grad: wrt[%d] node %d '%s' is %s, not a float",
                                i, wrt[i], tr_node_name(g, wrt[i]),
                                tr_dtype_name((enum tr_dtype)tr_node_dtype(g, wrt[i])));
    }
    return TR_OK;
}

/* grads[i]'s final node: a node of its own (an identity RESHAPE when the same node is
 * already the result for a wrt made final earlier (done[0..n_done)), or is a forward
 * value), named grad.<wrt>. */
static int finish(struct tr_graph *g, int n_fwd, int i, const int *wrt, int gid, const int *grads, const int *done,
                  int n_done) {
    int taken = gid < n_fwd;
    for (int j = 0; j < n_done && !taken; j++) taken = grads[done[j]] == gid;
    if (taken) gid = tr_reshape(g, gid, tr_node_ndim(g, gid), tr_node_shape(g, gid));
    if (gid < 0) return -1;
    char name[TR_NAME_MAX + 8];
    snprintf(name, sizeof name, "grad.%s", tr_node_name(g, wrt[i]));
    if (strlen(name) >= TR_NAME_MAX) return gid; /* keeps its automatic name */
    if (tr_graph_find(g, name) >= 0) return gid; /* a second tr_grad over the same wrt */
    return tr_graph_set_name(g, gid, name) == TR_OK ? gid : -1;
}

/* The walk's bookkeeping of when each wrt's gradient is final: last[i], the lowest node
 * on a path that consumes wrt[i] (-1: none; its gradient is zeros), and the wrt in the
 * order the walk passes their last consumer. */
struct finality {
    int *last, *order, *done, n_done, next;
};

static int finality_init(struct finality *f, const struct ad *ad, int loss, int n_wrt, const int *wrt) {
    memset(f, 0, sizeof *f);
    const size_t cap = (size_t)n_wrt + 1;
    f->last = malloc(cap * sizeof(int));
    f->order = malloc(cap * sizeof(int));
    f->done = malloc(cap * sizeof(int));
    int *first_of = malloc(((size_t)loss + 1) * sizeof(int)); /* a node's lowest needed consumer */
    if (!f->last || !f->order || !f->done || !first_of) {
        free(first_of);
        return TR_ERR_NOMEM;
    }
    for (int id = 0; id <= loss; id++) first_of[id] = -1;
    for (int id = loss; id >= 0; id--) {
        if (!ad->need[id]) continue;
        for (int k = 0; k < tr_node_n_inputs(ad->g, id); k++) first_of[tr_node_input(ad->g, id, k)] = id;
    }
    for (int i = 0; i < n_wrt; i++) {
        f->last[i] = wrt[i] <= loss ? first_of[wrt[i]] : -1;
        f->order[i] = i;
    }
    free(first_of);
    for (int k = 1; k < n_wrt; k++) { /* stable: wrt order among equals (a few hundred: no qsort state) */
        const int x = f->order[k];
        int j = k;
        for (; j > 0 && f->last[f->order[j - 1]] < f->last[x]; j--) f->order[j] = f->order[j - 1];
        f->order[j] = x;
    }
    return TR_OK;
}

static void finality_free(struct finality *f) {
    free(f->last);
    free(f->order);
    free(f->done);
}

/* Every wrt whose last consumer is at or above node `below` (INT_MIN: all the rest) made
 * final, named, and told to the hook. */
static int finalize_upto(struct ad *ad, struct finality *f, int below, int n_fwd, int n_wrt, const int *wrt,
                         int *grads, const struct tr_grad_hook *hook, struct tr_error *err) {
    struct tr_graph *g = ad->g;
    while (f->next < n_wrt && f->last[f->order[f->next]] >= below) {
        const int i = f->order[f->next++];
        int gid = ad->grad[wrt[i]];
        if (gid < 0) gid = const_fill(g, wrt[i], 0.0); /* the loss does not depend on it */
        if (gid == -2) return tr_error_set(err, TR_ERR_NOMEM, "tr_grad: out of memory for the zeros of wrt[%d]", i);
        grads[i] = finish(g, n_fwd, i, wrt, gid, grads, f->done, f->n_done);
        f->done[f->n_done++] = i;
        int rc = tr_graph_status(g, err);
        if (!rc && hook && hook->ready) rc = hook->ready(hook->user, g, i, grads[i], err);
        if (rc) return rc;
    }
    return TR_OK;
}

int tr_grad(struct tr_graph *g, int loss, int n_wrt, const int *wrt, int *grads, struct tr_error *err) {
    return tr_grad_hooked(g, loss, n_wrt, wrt, grads, NULL, err);
}

int tr_grad_hooked(struct tr_graph *g, int loss, int n_wrt, const int *wrt, int *grads, const struct tr_grad_hook *hook,
                   struct tr_error *err) {
    int rc = check_args(g, loss, n_wrt, wrt, grads, err);
    if (rc) return rc;
    if ((rc = tr_graph_status(g, err))) return rc;
    int n = tr_graph_n_nodes(g);
    if (loss < 0 || loss >= n) return TR_ERR_INTERNAL; /* checked above; tells the compiler too */
    size_t cap = (size_t)n + 1; /* loss < n, so n >= 1; the +1 keeps the compiler's bounds check quiet */
    struct ad ad;
    struct finality fin = {0};
    ad.g = g;
    ad.grad = malloc(cap * sizeof(int));
    ad.need = calloc(cap, 1);
    unsigned char *from_wrt = calloc(cap, 1);
    if (!ad.grad || !ad.need || !from_wrt) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "tr_grad: out of memory for %d nodes", n);
        goto done;
    }
    for (int id = 0; id < n; id++) ad.grad[id] = -1;
    for (int i = 0; i < n_wrt; i++) from_wrt[wrt[i]] = 1;
    for (int id = 0; id <= loss; id++) {
        for (int k = 0; k < tr_node_n_inputs(g, id) && !from_wrt[id]; k++) from_wrt[id] = from_wrt[tr_node_input(g, id, k)];
    }
    ad.need[loss] = from_wrt[loss];
    for (int id = loss; id >= 0; id--) {
        if (!ad.need[id]) continue;
        for (int k = 0; k < tr_node_n_inputs(g, id); k++) {
            int in = tr_node_input(g, id, k);
            if (from_wrt[in]) ad.need[in] = 1;
        }
    }
    if ((rc = check_rules(&ad, loss, err))) goto done;
    if (finality_init(&fin, &ad, loss, n_wrt, wrt)) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "tr_grad: out of memory for %d wrt", n_wrt);
        goto done;
    }

    if (ad.need[loss]) {
        ad.grad[loss] = const_fill(g, loss, 1.0);
        if (ad.grad[loss] == -2) {
            rc = tr_error_set(err, TR_ERR_NOMEM, "tr_grad: out of memory for the seed");
            goto done;
        }
        for (int id = loss; id >= 0 && ad.grad[loss] >= 0; id--) {
            if (ad.need[id] && ad.grad[id] >= 0 && tr_node_n_inputs(g, id) > 0) apply_rule(&ad, id, ad.grad[id]);
            if (tr_graph_status(g, NULL)) break;
            if ((rc = finalize_upto(&ad, &fin, id, n, n_wrt, wrt, grads, hook, err))) goto done;
        }
    }
    if (tr_graph_status(g, NULL) == TR_OK && (rc = finalize_upto(&ad, &fin, INT_MIN, n, n_wrt, wrt, grads, hook, err)))
        goto done;
    rc = tr_graph_status(g, err);
    if (rc) tr_error_prefix(err, "tr_grad");
done:
    finality_free(&fin);
    free(ad.grad);
    free(ad.need);
    free(from_wrt);
    return rc;
}

/* ---- losses ---- */

int tr_cross_entropy(struct tr_graph *g, int logits, int labels, int64_t ignore_index) {
    struct tr_attrs a = attrs0();
    a.ints[0] = ignore_index == TR_IGNORE_NONE ? 0 : ignore_index;
    a.ints[1] = ignore_index != TR_IGNORE_NONE;
    a.n_ints = 2;
    return node2(g, TR_OP_CROSS_ENTROPY, logits, labels, &a);
}

int tr_mse(struct tr_graph *g, int pred, int target) {
    struct tr_attrs a = attrs0();
    return node2(g, TR_OP_MSE, pred, target, &a);
}
