/* The graph's text form (`trident dump`), its FLOP count and its parameter bytes.
 * Reads the graph through the public accessors only.
 *
 * FLOP convention, for achieved-FLOP/s reports (the GEMMs dominate every model here):
 *   MATMUL     2·M·N·K per batch element of the output (a multiply and an add)
 *   ATTENTION  2·B·H·Tq·Tk·D (q·kᵀ) + 2·B·H·Tq·Tk·Dv (p·v); the causal mask and the
 *              window are not subtracted, the softmax is not counted
 *   elementwise unary and binary ops, SCALE, SOFTMAX, LAYER_NORM: 1 per output element
 *   SUM MEAN MAX: 1 per input element
 *   leaves, EMBEDDING and layout ops (RESHAPE TRANSPOSE SLICE CONCAT CAST UPDATE_SLICE): 0
 *   training: ATTENTION_GRAD 1x the forward attention for dq and for dk, 0.5x for dv
 *              (2.5x for a full backward); ATTENTION_LSE and
 *              ATTENTION_REL_LSE 0 (the forward's own pass keeps them); UNARY_GRAD SOFTMAX_GRAD LAYER_NORM_GRAD MAX_GRAD
 *              CROSS_ENTROPY_GRAD: 1 per output element; LAYER_NORM_GRAD_GAMMA,
 *              CROSS_ENTROPY, MSE: 1 per element of the first input; BROADCAST,
 *              SLICE_GRAD, EMBEDDING_GRAD: 0
 *   optimizer: ADAMW_STEP 10 per element (bias corrections, sqrt, divide, decay, update)
 *   decoder LLMs: RMS_NORM, RMS_NORM_GRAD, ROPE: 1 per output element; RMS_NORM_GRAD_W:
 *              1 per element of x
 *   vision: CONV2D 2·KH·KW·Cin per output element (the bias not counted), its two
 *              gradients as many (2·KH·KW·Cout per dx element; the forward's count for dw);
 *              GROUP_NORM, GROUP_NORM_GRAD 1 per output element, GROUP_NORM_GRAD_GAMMA 1
 *              per element of x
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "trident/graph.h"

static void print_ints(FILE *f, const char *key, const int64_t *v, int n) {
    fprintf(f, " %s=[", key);
    for (int i = 0; i < n; i++) fprintf(f, i ? ",%lld" : "%lld", (long long)v[i]);
    fputc(']', f);
}

/* The attributes that matter for op, "key=value" each with a leading space. */
static void print_attrs(const struct tr_graph *g, FILE *f, int id) {
    const struct tr_attrs *a = tr_node_attrs(g, id);
    int op = tr_node_op(g, id);
    switch (op) {
    case TR_OP_INPUT:
        for (int i = 0; i < tr_graph_n_inputs(g); i++)
            if (tr_graph_input(g, i) == id) fprintf(f, " #%d", i);
        break;
    case TR_OP_PARAM:
        fprintf(f, " init=normal(%g,%g)%s", (double)a->floats[0], (double)a->floats[1],
                tr_node_data(g, id) ? " bound" : "");
        break;
    case TR_OP_CONST: {
        struct tr_tensor t = tr_node_tensor(g, id);
        if (tr_tensor_numel(&t) == 1) {
            t.data = (void *)tr_node_data(g, id);
            fprintf(f, " value=%g", tr_tensor_get_f64(&t, 0));
        }
        break;
    }
    case TR_OP_MATMUL:
        if (a->ints[0]) fprintf(f, " trans_a=1");
        if (a->ints[1]) fprintf(f, " trans_b=1");
        if (a->floats[0] != 1.0f) fprintf(f, " alpha=%g", (double)a->floats[0]);
        break;
    case TR_OP_GELU:
        fprintf(f, " approximate=%s", a->ints[0] ? "tanh" : "none");
        break;
    case TR_OP_SCALE:
        fprintf(f, " alpha=%g beta=%g", (double)a->floats[0], (double)a->floats[1]);
        break;
    case TR_OP_LAYER_NORM: case TR_OP_LAYER_NORM_GRAD: case TR_OP_LAYER_NORM_GRAD_GAMMA:
        fprintf(f, " eps=%g", (double)a->floats[0]);
        break;
    case TR_OP_RESHAPE: case TR_OP_BROADCAST:
        print_ints(f, "shape", a->ints, a->n_ints);
        break;
    case TR_OP_TRANSPOSE:
        print_ints(f, "perm", a->ints, a->n_ints);
        break;
    case TR_OP_SLICE:
        fprintf(f, " axis=%lld start=%lld end=%lld step=%lld", (long long)a->ints[0], (long long)a->ints[1],
                (long long)a->ints[2], (long long)a->ints[3]);
        break;
    case TR_OP_CONCAT: case TR_OP_UPDATE_SLICE:
        fprintf(f, " axis=%lld", (long long)a->ints[0]);
        break;
    case TR_OP_CONV2D: case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT:
        fprintf(f, " stride=%lld padding=%lld", (long long)a->ints[0], (long long)a->ints[1]);
        if (a->ints[4]) fprintf(f, " pad_end=%lld", (long long)a->ints[4]);
        break;
    case TR_OP_GROUP_NORM: case TR_OP_GROUP_NORM_GRAD: case TR_OP_GROUP_NORM_GRAD_GAMMA:
        fprintf(f, " groups=%lld eps=%g", (long long)a->ints[0], (double)a->floats[0]);
        if (a->ints[1]) fprintf(f, " silu=1");
        break;
    case TR_OP_TIMESTEP_EMBEDDING:
        fprintf(f, " dim=%lld flip_sin_to_cos=%lld shift=%g max_period=%g", (long long)a->ints[0],
                (long long)a->ints[1], (double)a->floats[0], (double)a->floats[1]);
        break;
    case TR_OP_SUM: case TR_OP_MEAN: case TR_OP_MAX: case TR_OP_MAX_GRAD:
        fprintf(f, " axis=%lld keepdims=%lld", (long long)a->ints[0], (long long)a->ints[1]);
        break;
    case TR_OP_CAST:
        fprintf(f, " to=%s", tr_dtype_name((enum tr_dtype)a->ints[0]));
        break;
    case TR_OP_ATTENTION: case TR_OP_ATTENTION_LSE:
        fprintf(f, " scale=%g causal=%lld", (double)a->floats[0], (long long)a->ints[0]);
        if (a->ints[1]) fprintf(f, " window=%lld", (long long)a->ints[1]);
        break;
    case TR_OP_ATTENTION_REL: case TR_OP_ATTENTION_REL_LSE:
        fprintf(f, " scale=%g", (double)a->floats[0]);
        break;
    case TR_OP_ATTENTION_REL_GRAD:
        fprintf(f, " scale=%g of=%s", (double)a->floats[0],
                (const char *const[]){"q", "k", "v", "rel_h", "rel_w"}[a->ints[0] >= 0 && a->ints[0] < 5 ? a->ints[0] : 0]);
        break;
    case TR_OP_UNARY_GRAD:
        fprintf(f, " of=%s", tr_op_name((int)a->ints[0]));
        if (a->ints[0] == TR_OP_GELU) fprintf(f, " approximate=%s", a->ints[1] ? "tanh" : "none");
        if (a->ints[0] == TR_OP_SCALE) fprintf(f, " alpha=%g", (double)a->floats[0]);
        break;
    case TR_OP_EMBEDDING_GRAD:
        fprintf(f, " V=%lld", (long long)a->ints[0]);
        if (a->ints[1]) fprintf(f, " padding_idx=%lld", (long long)a->ints[2]);
        break;
    case TR_OP_EMBEDDING:
        if (a->ints[0]) fprintf(f, " padding_idx=%lld", (long long)a->ints[1]);
        break;
    case TR_OP_ATTENTION_GRAD:
        fprintf(f, " d%c scale=%g causal=%lld", "qkv"[a->ints[2] >= 0 && a->ints[2] < 3 ? a->ints[2] : 0],
                (double)a->floats[0], (long long)a->ints[0]);
        if (a->ints[1]) fprintf(f, " window=%lld", (long long)a->ints[1]);
        break;
    case TR_OP_SLICE_GRAD:
        fprintf(f, " axis=%lld start=%lld step=%lld extent=%lld", (long long)a->ints[0], (long long)a->ints[1],
                (long long)a->ints[3], (long long)a->ints[4]);
        break;
    case TR_OP_CROSS_ENTROPY: case TR_OP_CROSS_ENTROPY_GRAD:
        if (a->ints[1]) fprintf(f, " ignore_index=%lld", (long long)a->ints[0]);
        break;
    case TR_OP_RMS_NORM: case TR_OP_RMS_NORM_GRAD: case TR_OP_RMS_NORM_GRAD_W:
        fprintf(f, " eps=%g", (double)a->floats[0]);
        if (a->ints[0]) fprintf(f, " add_one=1");
        break;
    case TR_OP_ROPE:
        fprintf(f, " base=%g rot_dims=%lld", (double)a->floats[0], (long long)a->ints[0]);
        if (a->ints[1]) fprintf(f, " inverse=1");
        break;
    case TR_OP_ADAMW_STEP:
        fprintf(f, " beta1=%g beta2=%g eps=%g wd=%g", (double)a->floats[0], (double)a->floats[1],
                (double)a->floats[2], (double)a->floats[3]);
        break;
    case TR_OP_ALLREDUCE: case TR_OP_ALLREDUCE_START: case TR_OP_ALLREDUCE_WAIT:
        fprintf(f, " ranks=%lld bucket=%lld scale=%g", (long long)a->ints[0], (long long)a->ints[1],
                (double)a->floats[0]);
        break;
    default:
        break;
    }
}

static void human(double v, const char *const *units, double base, char *buf, size_t n) {
    int u = 0;
    while (v >= base && units[u + 1]) v /= base, u++;
    snprintf(buf, n, u ? "%.3g %s" : "%.0f %s", v, units[u]);
}

int tr_graph_dump(const struct tr_graph *g, FILE *f, struct tr_error *err) {
    if (!g || !f) return tr_error_set(err, TR_ERR_INVALID, "graph dump: NULL %s", g ? "file" : "graph");
    static const char *const bytes_u[] = {"B", "KiB", "MiB", "GiB", "TiB", NULL};
    static const char *const flop_u[] = {"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP", NULL};
    char pb[32], fl[32];
    human((double)tr_graph_param_bytes(g), bytes_u, 1024.0, pb, sizeof pb);
    human(tr_graph_flops(g), flop_u, 1000.0, fl, sizeof fl);
    fprintf(f, "# %d nodes, %d inputs, %d params (%s), %s per run\n", tr_graph_n_nodes(g), tr_graph_n_inputs(g),
            tr_graph_n_params(g), pb, fl);
    for (int id = 0; id < tr_graph_n_nodes(g); id++) {
        int op = tr_node_op(g, id), n = tr_node_n_inputs(g, id);
        fprintf(f, "%%%d = %s", id, tr_op_name(op));
        if (n > 0) {
            fputc('(', f);
            for (int i = 0; i < n; i++) fprintf(f, i ? ", %%%d" : "%%%d", tr_node_input(g, id, i));
            fputc(')', f);
        }
        print_attrs(g, f, id);
        char shape[160];
        fprintf(f, " : %s%s  '%s'\n", tr_dtype_name((enum tr_dtype)tr_node_dtype(g, id)),
                tr_shape_str(tr_node_ndim(g, id), tr_node_shape(g, id), shape, sizeof shape), tr_node_name(g, id));
    }
    for (int i = 0; i < tr_graph_n_outputs(g); i++)
        fprintf(f, "output '%s' = %%%d\n", tr_graph_output_name(g, i), tr_graph_output(g, i));
    if (ferror(f)) return tr_error_set(err, TR_ERR_IO, "graph dump: write failed");
    return TR_OK;
}

static double numel(const struct tr_graph *g, int id) {
    const int64_t *s = tr_node_shape(g, id);
    double n = 1;
    for (int i = 0; i < tr_node_ndim(g, id); i++) n *= (double)s[i];
    return n;
}

double tr_node_flops(const struct tr_graph *g, int id) {
    double total = 0;
    int op = tr_node_op(g, id);
    if (op == TR_OP_MATMUL) {
        int a = tr_node_input(g, id, 0), nd = tr_node_ndim(g, a);
        double k = (double)tr_node_shape(g, a)[tr_node_attrs(g, id)->ints[0] ? nd - 2 : nd - 1];
        total += 2.0 * numel(g, id) * k;
    } else if (op == TR_OP_ATTENTION || op == TR_OP_ATTENTION_REL) {
        const int64_t *q = tr_node_shape(g, tr_node_input(g, id, 0));
        const int64_t *k = tr_node_shape(g, tr_node_input(g, id, 1));
        const int64_t *v = tr_node_shape(g, tr_node_input(g, id, 2));
        total += 2.0 * (double)q[0] * (double)q[1] * (double)q[2] * (double)k[2] * (double)(q[3] + v[3]);
    } else if (op == TR_OP_ATTENTION_GRAD) {
        /* a full backward (dq, dk, dv) counts 2.5x the forward: 1x each for dq and dk, 0.5x for dv */
        const int64_t *q = tr_node_shape(g, tr_node_input(g, id, 0));
        const int64_t *k = tr_node_shape(g, tr_node_input(g, id, 1));
        const int64_t *v = tr_node_shape(g, tr_node_input(g, id, 2));
        double fwd = 2.0 * (double)q[0] * (double)q[1] * (double)q[2] * (double)k[2] * (double)(q[3] + v[3]);
        total += tr_node_attrs(g, id)->ints[2] == 2 ? 0.5 * fwd : fwd;
    } else if (op == TR_OP_ATTENTION_REL_GRAD) { /* as ATTENTION_GRAD; the bias gradients as dv */
        const int64_t *q = tr_node_shape(g, tr_node_input(g, id, 0));
        const int64_t *k = tr_node_shape(g, tr_node_input(g, id, 1));
        const int64_t *v = tr_node_shape(g, tr_node_input(g, id, 2));
        double fwd = 2.0 * (double)q[0] * (double)q[1] * (double)q[2] * (double)k[2] * (double)(q[3] + v[3]);
        total += tr_node_attrs(g, id)->ints[0] >= 2 ? 0.5 * fwd : fwd;
    } else if (op == TR_OP_SUM || op == TR_OP_MEAN || op == TR_OP_MAX || op == TR_OP_LAYER_NORM_GRAD_GAMMA ||
               op == TR_OP_CROSS_ENTROPY || op == TR_OP_MSE || op == TR_OP_RMS_NORM_GRAD_W) {
        total += numel(g, tr_node_input(g, id, 0));
    } else if (op == TR_OP_UNARY_GRAD || op == TR_OP_SOFTMAX_GRAD || op == TR_OP_LAYER_NORM_GRAD ||
               op == TR_OP_MAX_GRAD || op == TR_OP_CROSS_ENTROPY_GRAD || op == TR_OP_RMS_NORM ||
               op == TR_OP_RMS_NORM_GRAD || op == TR_OP_ROPE) {
        total += numel(g, id);
    } else if (op == TR_OP_CONV2D || op == TR_OP_CONV2D_GRAD_INPUT) {
        const int64_t *w = tr_node_shape(g, tr_node_input(g, id, 1));
        /* forward: Cin·KH·KW per output element; data gradient: Cout·KH·KW per dx element */
        total += 2.0 * numel(g, id) * (double)(op == TR_OP_CONV2D ? w[1] : w[0]) * (double)w[2] * (double)w[3];
    } else if (op == TR_OP_CONV2D_GRAD_WEIGHT) { /* as many multiply-adds as the forward */
        const int64_t *dw = tr_node_shape(g, id);
        total += 2.0 * numel(g, tr_node_input(g, id, 1)) * (double)dw[1] * (double)dw[2] * (double)dw[3];
    } else if (op == TR_OP_GROUP_NORM || op == TR_OP_GROUP_NORM_GRAD || op == TR_OP_TIMESTEP_EMBEDDING) {
        total += numel(g, id);
    } else if (op == TR_OP_GROUP_NORM_GRAD_GAMMA) {
        total += numel(g, tr_node_input(g, id, 0));
    } else if (op == TR_OP_ADAMW_STEP) {
        total += 10.0 * numel(g, id);
    } else if (tr_op_is_elementwise_unary(op) || tr_op_is_elementwise_binary(op) || op == TR_OP_SOFTMAX ||
               op == TR_OP_LAYER_NORM) {
        total += numel(g, id);
    }
    return total;
}

double tr_graph_flops(const struct tr_graph *g) {
    double total = 0;
    for (int id = 0; id < tr_graph_n_nodes(g); id++) total += tr_node_flops(g, id);
    return total;
}

uint64_t tr_graph_param_bytes(const struct tr_graph *g) {
    uint64_t total = 0;
    for (int i = 0; i < tr_graph_n_params(g); i++) {
        int id = tr_graph_param(g, i);
        int64_t n = tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id));
        total += (uint64_t)n * tr_dtype_size((enum tr_dtype)tr_node_dtype(g, id));
    }
    return total;
}

static uint64_t node_bytes(const struct tr_graph *g, int id) {
    return (uint64_t)tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id)) *
           tr_dtype_size((enum tr_dtype)tr_node_dtype(g, id));
}

static int is_leaf(int op) { return op == TR_OP_INPUT || op == TR_OP_PARAM || op == TR_OP_CONST; }

uint64_t tr_graph_peak_bytes(const struct tr_graph *g) {
    const int n = tr_graph_n_nodes(g);
    int *last = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!last) return UINT64_MAX; /* cannot tell: fits nowhere */
    /* a RESHAPE shares its input's memory: its readers keep the input alive */
    int *root = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!root) {
        free(last);
        return UINT64_MAX;
    }
    for (int id = 0; id < n; id++) {
        last[id] = id;
        root[id] = tr_node_op(g, id) == TR_OP_RESHAPE ? root[tr_node_input(g, id, 0)] : id;
    }
    for (int id = 0; id < n; id++)
        for (int k = 0; k < tr_node_n_inputs(g, id); k++) {
            int r = root[tr_node_input(g, id, k)];
            if (last[r] < id) last[r] = id;
        }
    for (int i = 0; i < tr_graph_n_outputs(g); i++) last[root[tr_graph_output(g, i)]] = n;
    for (int u = 0; u < tr_graph_n_updates(g); u++)
        if (tr_graph_update_value(g, u) >= 0) last[root[tr_graph_update_value(g, u)]] = n;
    uint64_t live = 0, peak = 0;
    for (int id = 0; id < n; id++) {
        const int owns = !is_leaf(tr_node_op(g, id)) && root[id] == id;
        if (owns) live += node_bytes(g, id);
        if (live > peak) peak = live;
        /* values whose last reader is this node are freed after it ran */
        for (int k = 0; k < tr_node_n_inputs(g, id); k++) {
            int r = root[tr_node_input(g, id, k)];
            if (last[r] == id && !is_leaf(tr_node_op(g, r))) {
                live -= node_bytes(g, r);
                last[r] = -1; /* freed once, however many inputs name it */
            }
        }
        if (owns && last[id] == id) live -= node_bytes(g, id); /* never read */
    }
    free(last);
    free(root);
    return peak;
}
