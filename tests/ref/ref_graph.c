/* One float64 evaluator of a struct tr_graph: each node by its op's oracle (ref_ops.c),
 * reading the graph only through the public accessors, so it shares nothing with the
 * backends it checks. Values are doubles whatever the node's dtype (a CAST rounds). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ref.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/kernels.h"

static int64_t nel(const struct tr_graph *g, int id) {
    return tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id));
}

static struct tr_ref_view in_view(const struct tr_graph *g, double **v, int id, int k) {
    int x = tr_node_input(g, id, k);
    return (struct tr_ref_view){tr_node_ndim(g, x), tr_node_shape(g, x), v[x]};
}

/* A node's own data (CONST, bound PARAM) as doubles into o. */
static void from_data(const struct tr_graph *g, int id, double *o) {
    struct tr_tensor t = tr_node_tensor(g, id);
    t.data = (void *)tr_node_data(g, id);
    if (!t.data) fail_msg("reference evaluator: node %d %s has no value", id, tr_node_name(g, id));
    for (int64_t i = 0; i < nel(g, id); i++) o[i] = tr_tensor_get_f64(&t, i);
}

/* ATTENTION or ATTENTION_LSE (q, k, v, [mask]), or ATTENTION_GRAD (q, k, v, dy, [mask],
 * [y, lse]) of ints[2]: the saved y and lse are the forward's, so the reference
 * recomputes them rather than trusting them. */
static void eval_attention(const struct tr_graph *g, int id, double **v, double *o) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    const int op = tr_node_op(g, id), grad = op == TR_OP_ATTENTION_GRAD, n_in = tr_node_n_inputs(g, id);
    struct tr_ref_view q = in_view(g, v, id, 0), k = in_view(g, v, id, 1), vv = in_view(g, v, id, 2);
    struct tr_ref_attn c = {q.sh[0], q.sh[1], k.sh[1], q.sh[2], k.sh[2], q.sh[3], vv.sh[3],
                            (double)tr_attention_scale(a->floats[0], q.sh[3]), (int)a->ints[0], a->ints[1],
                            {0, NULL, NULL}, NULL, NULL, 0, 0};
    if (grad ? n_in == 5 || n_in == 7 : n_in == 4) c.mask = in_view(g, v, id, grad ? 4 : 3);
    if (op == TR_OP_ATTENTION_LSE) {
        tr_ref_attention_lse(&c, q.d, k.d, o);
        return;
    }
    if (!grad) {
        tr_ref_attention(&c, q.d, k.d, vv.d, o);
        return;
    }
    int w = (int)a->ints[2];
    tr_ref_attention_grad(&c, q.d, k.d, vv.d, in_view(g, v, id, 3).d, w == 0 ? o : NULL, w == 1 ? o : NULL,
                          w == 2 ? o : NULL);
}

/* ATTENTION_REL or ATTENTION_REL_LSE (q, k, v, rel_h, rel_w), or ATTENTION_REL_GRAD (…, dy,
 * [y, lse]) of ints[0]: the saved y and lse recomputed here, as eval_attention does. */
static void eval_attention_rel(const struct tr_graph *g, int id, double **v, double *o) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    struct tr_ref_view q = in_view(g, v, id, 0), k = in_view(g, v, id, 1), vv = in_view(g, v, id, 2);
    struct tr_ref_view rh = in_view(g, v, id, 3), rw = in_view(g, v, id, 4);
    struct tr_ref_attn c = {q.sh[0], q.sh[1], k.sh[1], q.sh[2], k.sh[2], q.sh[3], vv.sh[3],
                            (double)tr_attention_scale(a->floats[0], q.sh[3]), 0, 0, {0, NULL, NULL},
                            rh.d, rw.d, rh.sh[3], rw.sh[3]};
    if (tr_node_op(g, id) == TR_OP_ATTENTION_REL) {
        tr_ref_attention(&c, q.d, k.d, vv.d, o);
        return;
    }
    if (tr_node_op(g, id) == TR_OP_ATTENTION_REL_LSE) {
        tr_ref_attention_lse(&c, q.d, k.d, o);
        return;
    }
    double *outs[5] = {NULL, NULL, NULL, NULL, NULL};
    outs[a->ints[0]] = o;
    tr_ref_attention_rel_grad(&c, q.d, k.d, vv.d, in_view(g, v, id, 5).d, outs[0], outs[1], outs[2], outs[3], outs[4]);
}

/* The norms: rows of the last axis of input 0. */
static void eval_norm(const struct tr_graph *g, int id, double **v, double *o) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int op = tr_node_op(g, id), n_in = tr_node_n_inputs(g, id);
    struct tr_ref_view x = in_view(g, v, id, 0);
    const double *y = n_in > 1 ? in_view(g, v, id, 1).d : NULL, *z = n_in > 2 ? in_view(g, v, id, 2).d : NULL;
    int64_t D = x.sh[x.nd - 1], rows = tr_shape_numel(x.nd, x.sh) / D;
    double eps = (double)a->floats[0];
    int add_one = (int)a->ints[0];
    switch (op) {
    case TR_OP_LAYER_NORM: tr_ref_layer_norm(x.d, y, z, rows, D, eps, o); break;
    case TR_OP_LAYER_NORM_GRAD: tr_ref_layer_norm_grad(x.d, y, z, rows, D, eps, o); break;
    case TR_OP_LAYER_NORM_GRAD_GAMMA: tr_ref_layer_norm_grad_gamma(x.d, y, rows, D, eps, o); break;
    case TR_OP_RMS_NORM: tr_ref_rms_norm(x.d, y, rows, D, eps, add_one, o); break;
    case TR_OP_RMS_NORM_GRAD: tr_ref_rms_norm_grad(x.d, y, z, rows, D, eps, add_one, o); break;
    default: tr_ref_rms_norm_grad_w(x.d, y, rows, D, eps, o); break;
    }
}

static void eval_rope(const struct tr_graph *g, int id, double **v, double *o) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    struct tr_ref_view x = in_view(g, v, id, 0), pos = in_view(g, v, id, 1);
    int64_t R = a->ints[0] ? a->ints[0] : x.sh[3];
    /* the angle as the kernels take it: Hugging Face's f32 one below f64 */
    int f32_angle = tr_node_dtype(g, id) != TR_DTYPE_F64;
    tr_ref_rope(x.d, pos.d, pos.nd == 2, x.sh[0], x.sh[1], x.sh[2], x.sh[3], R, a->floats[0], (int)a->ints[1],
                f32_angle, o);
}

static void eval_concat(const struct tr_graph *g, int id, double **v, double *o) {
    int nd = tr_node_ndim(g, id), ax = (int)tr_node_attrs(g, id)->ints[0];
    const int64_t *sh = tr_node_shape(g, id);
    int64_t base = 0, idx[TR_MAX_DIMS];
    if (ax < 0) ax += nd;
    for (int k = 0; k < tr_node_n_inputs(g, id); k++) {
        struct tr_ref_view in = in_view(g, v, id, k);
        for (int64_t f = 0; f < tr_shape_numel(in.nd, in.sh); f++) {
            tr_ref_unravel(f, nd, in.sh, idx);
            idx[ax] += base;
            int64_t off = 0;
            for (int i = 0; i < nd; i++) off = off * sh[i] + idx[i];
            o[off] = in.d[f];
        }
        base += in.sh[ax];
    }
}

static void eval_update_slice(const struct tr_graph *g, int id, double **v, double *o) {
    int nd = tr_node_ndim(g, id), ax = (int)tr_node_attrs(g, id)->ints[0];
    const int64_t *sh = tr_node_shape(g, id);
    struct tr_ref_view x = in_view(g, v, id, 0), u = in_view(g, v, id, 1);
    int64_t s0 = (int64_t)in_view(g, v, id, 2).d[0], nu = u.sh[ax], outer = 1, inner = 1, len = sh[ax];
    for (int i = 0; i < ax; i++) outer *= sh[i];
    for (int i = ax + 1; i < nd; i++) inner *= sh[i];
    assert_true(s0 >= 0 && s0 + nu <= len);
    memcpy(o, x.d, sizeof(double) * (size_t)nel(g, id));
    for (int64_t b = 0; b < outer; b++)
        for (int64_t j = 0; j < nu; j++)
            for (int64_t i = 0; i < inner; i++) o[(b * len + s0 + j) * inner + i] = u.d[(b * nu + j) * inner + i];
}

/* CONV2D (x, w, [bias]), CONV2D_GRAD_INPUT (dy, w) or CONV2D_GRAD_WEIGHT (x, dy): the sizes
 * from whichever tensors the op has, the rest from its attributes. */
static void eval_conv2d(const struct tr_graph *g, int id, double **v, double *o) {
    const int op = tr_node_op(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    const struct tr_ref_view p = in_view(g, v, id, 0), q = in_view(g, v, id, 1);
    const int64_t *sh = tr_node_shape(g, id);
    const int64_t *xs = op == TR_OP_CONV2D_GRAD_INPUT ? sh : p.sh,
                  *ws = op == TR_OP_CONV2D_GRAD_WEIGHT ? sh : q.sh;
    const struct tr_ref_conv c = {xs[0], xs[1], xs[2], xs[3], ws[2], ws[3], ws[0], a->ints[0] ? a->ints[0] : 1,
                                  a->ints[1], a->ints[4]};
    if (op == TR_OP_CONV2D)
        tr_ref_conv2d(&c, p.d, q.d, tr_node_n_inputs(g, id) > 2 ? in_view(g, v, id, 2).d : NULL, o);
    else if (op == TR_OP_CONV2D_GRAD_INPUT) tr_ref_conv2d_grad_input(&c, p.d, q.d, o);
    else tr_ref_conv2d_grad_weight(&c, p.d, q.d, o);
}

/* CROSS_ENTROPY (logits, labels) or its GRAD (logits, labels, dloss). */
static void eval_cross_entropy(const struct tr_graph *g, int id, double **v, double *o) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    struct tr_ref_view x = in_view(g, v, id, 0), lab = in_view(g, v, id, 1);
    if (tr_node_op(g, id) == TR_OP_CROSS_ENTROPY)
        o[0] = tr_ref_cross_entropy(x.d, lab.d, x.sh[0], x.sh[1], (int)a->ints[1], a->ints[0], 0, NULL);
    else
        tr_ref_cross_entropy(x.d, lab.d, x.sh[0], x.sh[1], (int)a->ints[1], a->ints[0], in_view(g, v, id, 2).d[0], o);
}

/* The ops of one operand (and attributes) alone. */
static int eval_simple(const struct tr_graph *g, int id, double **v, double *o) {
    int op = tr_node_op(g, id), nd = tr_node_ndim(g, id), n_in = tr_node_n_inputs(g, id);
    const int64_t *sh = tr_node_shape(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int64_t n = nel(g, id);
    struct tr_ref_view x = n_in > 0 ? in_view(g, v, id, 0) : (struct tr_ref_view){0, NULL, NULL};
    struct tr_ref_view y = n_in > 1 ? in_view(g, v, id, 1) : (struct tr_ref_view){0, NULL, NULL};
    switch (op) {
    case TR_OP_GELU: case TR_OP_TANH: case TR_OP_RELU: case TR_OP_SILU: case TR_OP_SIGMOID:
    case TR_OP_EXP: case TR_OP_NEG: case TR_OP_SQRT: case TR_OP_RSQRT: case TR_OP_SCALE:
        for (int64_t f = 0; f < n; f++)
            o[f] = tr_ref_unary(op, x.d[f], (int)a->ints[0], (double)a->floats[0], (double)a->floats[1]);
        return 1;
    case TR_OP_UNARY_GRAD:
        for (int64_t f = 0; f < n; f++)
            o[f] = tr_ref_unary_grad((int)a->ints[0], x.d[f], (int)a->ints[1], (double)a->floats[0]) * y.d[f];
        return 1;
    case TR_OP_CAST:
        for (int64_t f = 0; f < n; f++) o[f] = tr_ref_cast(x.d[f], (enum tr_dtype)a->ints[0]);
        return 1;
    case TR_OP_RESHAPE: memcpy(o, x.d, sizeof(double) * (size_t)n); return 1;
    case TR_OP_TRANSPOSE: tr_ref_transpose(nd, x.sh, x.d, a->ints, o); return 1;
    case TR_OP_BROADCAST: tr_ref_broadcast(x, nd, sh, o); return 1;
    case TR_OP_SLICE: {
        int ax = (int)(a->ints[0] < 0 ? a->ints[0] + nd : a->ints[0]);
        tr_ref_slice(nd, x.sh, x.d, ax, a->ints[1], a->ints[3], sh[ax], o);
        return 1;
    }
    case TR_OP_SLICE_GRAD:
        tr_ref_slice_grad(nd, x.sh, x.d, (int)a->ints[0], a->ints[1], a->ints[3], a->ints[4], o);
        return 1;
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX: tr_ref_reduce(op, x.nd, x.sh, x.d, (int)a->ints[0], o); return 1;
    case TR_OP_MAX_GRAD: tr_ref_max_grad(x.nd, x.sh, x.d, y.d, (int)a->ints[0], o); return 1;
    case TR_OP_SOFTMAX: tr_ref_softmax(x.d, n / sh[nd - 1], sh[nd - 1], o); return 1;
    case TR_OP_SOFTMAX_GRAD: tr_ref_softmax_grad(x.d, y.d, n / sh[nd - 1], sh[nd - 1], o); return 1;
    default: return 0;
    }
}

void tr_ref_graph_eval_node(const struct tr_graph *g, int id, double *const *leaf, double **v) {
    int op = tr_node_op(g, id), nd = tr_node_ndim(g, id);
    const int64_t *sh = tr_node_shape(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int64_t n = nel(g, id);
    free(v[id]);
    double *o = v[id] = calloc((size_t)(n ? n : 1), sizeof(double));
    assert_non_null(o);
    if (eval_simple(g, id, v, o)) return;
    int n_in = tr_node_n_inputs(g, id);
    struct tr_ref_view x = n_in > 0 ? in_view(g, v, id, 0) : (struct tr_ref_view){0, NULL, NULL};
    struct tr_ref_view y = n_in > 1 ? in_view(g, v, id, 1) : (struct tr_ref_view){0, NULL, NULL};
    switch (op) {
    case TR_OP_INPUT: case TR_OP_PARAM:
        if (leaf && leaf[id]) memcpy(o, leaf[id], sizeof(double) * (size_t)n);
        else from_data(g, id, o);
        break;
    case TR_OP_CONST: from_data(g, id, o); break;
    case TR_OP_ADD: case TR_OP_SUB: case TR_OP_MUL: case TR_OP_DIV: tr_ref_binary(op, x, y, nd, sh, o); break;
    case TR_OP_MATMUL:
        tr_ref_matmul(x, y, nd, sh, (int)a->ints[0], (int)a->ints[1], (double)tr_matmul_alpha(a->floats[0]), NULL,
                      TR_ACT_NONE, o);
        break;
    case TR_OP_LAYER_NORM: case TR_OP_LAYER_NORM_GRAD: case TR_OP_LAYER_NORM_GRAD_GAMMA:
    case TR_OP_RMS_NORM: case TR_OP_RMS_NORM_GRAD: case TR_OP_RMS_NORM_GRAD_W:
        eval_norm(g, id, v, o);
        break;
    case TR_OP_ROPE: eval_rope(g, id, v, o); break;
    case TR_OP_EMBEDDING: tr_ref_embedding(x.d, x.sh[1], y.d, n / x.sh[1], o); break;
    case TR_OP_EMBEDDING_GRAD:
        tr_ref_embedding_grad(x.d, tr_shape_numel(x.nd, x.sh), y.d, sh[0], sh[1], o);
        if (a->ints[1]) memset(o + a->ints[2] * sh[1], 0, sizeof(double) * (size_t)sh[1]); /* the padding row */
        break;
    case TR_OP_CONCAT: eval_concat(g, id, v, o); break;
    case TR_OP_UPDATE_SLICE: eval_update_slice(g, id, v, o); break;
    case TR_OP_ATTENTION: case TR_OP_ATTENTION_GRAD: case TR_OP_ATTENTION_LSE: eval_attention(g, id, v, o); break;
    case TR_OP_ATTENTION_REL: case TR_OP_ATTENTION_REL_GRAD: case TR_OP_ATTENTION_REL_LSE:
        eval_attention_rel(g, id, v, o);
        break;
    case TR_OP_CROSS_ENTROPY: case TR_OP_CROSS_ENTROPY_GRAD: eval_cross_entropy(g, id, v, o); break;
    case TR_OP_MSE: o[0] = tr_ref_mse(x.d, y.d, tr_shape_numel(x.nd, x.sh)); break;
    case TR_OP_CONV2D: case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT: eval_conv2d(g, id, v, o); break;
    case TR_OP_GROUP_NORM:
        tr_ref_group_norm(x.d, y.d, in_view(g, v, id, 2).d, x.sh[0], x.sh[1] * x.sh[2], x.sh[3], a->ints[0],
                          (double)a->floats[0], (int)a->ints[1], o);
        break;
    case TR_OP_GROUP_NORM_GRAD:
        tr_ref_group_norm_grad(x.d, y.d, in_view(g, v, id, 2).d, x.sh[0], x.sh[1] * x.sh[2], x.sh[3], a->ints[0],
                               (double)a->floats[0], o);
        break;
    case TR_OP_GROUP_NORM_GRAD_GAMMA:
        tr_ref_group_norm_grad_gamma(x.d, y.d, x.sh[0], x.sh[1] * x.sh[2], x.sh[3], a->ints[0], (double)a->floats[0],
                                     o);
        break;
    case TR_OP_TIMESTEP_EMBEDDING:
        tr_ref_timestep_embedding(x.d, x.sh[0], a->ints[0], (int)a->ints[1], (double)a->floats[0],
                                  (double)a->floats[1], o);
        break;
    case TR_OP_ALLREDUCE_START: /* one process: the sum over one rank is x, scaled by the wait */
        if (a->ints[0] != 1) fail_msg("reference evaluator: allreduce_start over %lld ranks", (long long)a->ints[0]);
        for (int64_t i = 0; i < n; i++) o[i] = x.d[i];
        break;
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_WAIT: /* one process: the sum over one rank is x */
        if (a->ints[0] != 1) fail_msg("reference evaluator: allreduce over %lld ranks", (long long)a->ints[0]);
        for (int64_t i = 0; i < n; i++) o[i] = x.d[i] * (double)a->floats[0];
        break;
    default: fail_msg("reference evaluator: no rule for node %d %s", id, tr_op_name(op));
    }
}

void tr_ref_graph_eval_upto(const struct tr_graph *g, int last, double *const *leaf, double **v) {
    for (int id = 0; id <= last; id++) tr_ref_graph_eval_node(g, id, leaf, v);
}

double **tr_ref_graph_run(const struct tr_graph *g, const struct tr_tensor *in) {
    int N = tr_graph_n_nodes(g);
    double **v = calloc((size_t)N, sizeof *v), **leaf = calloc((size_t)N, sizeof *leaf);
    assert_non_null(v);
    assert_non_null(leaf);
    for (int i = 0; i < tr_graph_n_inputs(g); i++) leaf[tr_graph_input(g, i)] = tr_test_to_f64(&in[i]);
    tr_ref_graph_eval_upto(g, N - 1, leaf, v);
    for (int i = 0; i < N; i++) free(leaf[i]);
    free(leaf);
    return v;
}

void tr_ref_graph_free(const struct tr_graph *g, double **v) {
    for (int i = 0; i < tr_graph_n_nodes(g); i++) free(v[i]);
    free(v);
}
