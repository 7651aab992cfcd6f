/* The roofline sheet of a step (trident/roofline.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/ops.h"
#include "trident/roofline.h"

/* Dense peaks at the clocks a long kernel holds (the H200 figures: the published
 * 989 TFLOP/s bf16, 495 TF32, 67 f32 are at the boost clock), and HBM bandwidth. */
int tr_roof_device_preset(const char *name, struct tr_roof_device *d, struct tr_error *err) {
    static const struct tr_roof_device presets[] = {
        {"h200", 790, 395, 54, 4800},
        {"h100", 790, 395, 54, 3350},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (name && strcmp(name, presets[i].name) == 0) {
            *d = presets[i];
            return TR_OK;
        }
    return tr_error_set(err, TR_ERR_NOT_FOUND, "roofline: no device '%s' (h200, h100; or measure)", name ? name : "");
}

const char *tr_roof_device_for_gpu(const char *gpu_name) {
    if (!gpu_name) return NULL;
    if (strstr(gpu_name, "PCIe") || strstr(gpu_name, "NVL")) return NULL;
    if (strstr(gpu_name, "H200")) return "h200";
    if (strstr(gpu_name, "H100")) return "h100";
    return NULL;
}

static int is_matrix_op(int op) {
    return op == TR_OP_MATMUL || op == TR_OP_ATTENTION || op == TR_OP_ATTENTION_REL || op == TR_OP_ATTENTION_GRAD ||
           op == TR_OP_ATTENTION_REL_GRAD || op == TR_OP_CONV2D || op == TR_OP_CONV2D_GRAD_INPUT ||
           op == TR_OP_CONV2D_GRAD_WEIGHT;
}

/* What the CUDA kernels are built to reach (plugins/kernels/cuda: their headers say how). */
struct tr_roof_design tr_roof_design_of(int op, int dtype, enum tr_math math) {
    const int tensor = dtype == TR_DTYPE_BF16 || dtype == TR_DTYPE_F16 || math == TR_MATH_TF32;
    switch (op) {
    case TR_OP_MATMUL:
        return (struct tr_roof_design){0.75, 0.85, "cuBLASLt, epilogue fused"};
    case TR_OP_ATTENTION: case TR_OP_ATTENTION_REL:
        return tensor ? (struct tr_roof_design){0.45, 0.8, "flash forward, WMMA tiles through shared memory"}
                      : (struct tr_roof_design){0.5, 0.8, "flash forward on CUDA cores (strict f32)"};
    case TR_OP_ATTENTION_GRAD: case TR_OP_ATTENTION_REL_GRAD:
        return tensor ? (struct tr_roof_design){0.3, 0.8, "flash backward from the forward's lse: dK·dV and dQ passes"}
                      : (struct tr_roof_design){0.3, 0.8, "flash backward on CUDA cores (strict f32)"};
    case TR_OP_CONV2D: case TR_OP_CONV2D_GRAD_INPUT: case TR_OP_CONV2D_GRAD_WEIGHT:
        return (struct tr_roof_design){0.55, 0.7, "cuDNN on NHWC (else im2col chunks into cuBLASLt)"};
    case TR_OP_EMBEDDING_GRAD:
        return (struct tr_roof_design){0.5, 0.5, "rows scattered by id"};
    default:
        return (struct tr_roof_design){0.5, 0.8, "one pass over the data, coalesced"};
    }
}

double tr_roof_visible_fraction(int64_t Tq, int64_t Tk, int causal, int64_t window) {
    if (Tq <= 0 || Tk <= 0) return 0;
    if (!causal && window <= 0) return 1;
    const int64_t off = Tk - Tq;
    double seen = 0;
    for (int64_t i = 0; i < Tq; i++) {
        const int64_t pos = i + off, hi = pos < Tk - 1 ? pos : Tk - 1;
        int64_t lo = 0;
        if (window > 0 && pos - window + 1 > 0) lo = pos - window + 1;
        if (hi >= lo) seen += (double)(hi - lo + 1);
    }
    return seen / ((double)Tq * (double)Tk);
}

static double bytes_of(const struct tr_graph *g, int id) {
    return (double)tr_shape_numel(tr_node_ndim(g, id), tr_node_shape(g, id)) *
           (double)tr_dtype_size((enum tr_dtype)tr_node_dtype(g, id));
}

/* The bytes one call must move: its inputs read once, its output written once, except
 * where the op touches less (a slice, an update in place, a gather). */
static double node_bytes(const struct tr_graph *g, int id) {
    const int op = tr_node_op(g, id);
    if (op == TR_OP_SLICE) return 2 * bytes_of(g, id);
    if (op == TR_OP_UPDATE_SLICE) return 2 * bytes_of(g, tr_node_input(g, id, 1));
    if (op == TR_OP_EMBEDDING) return bytes_of(g, tr_node_input(g, id, 1)) + 2 * bytes_of(g, id);
    double b = bytes_of(g, id);
    for (int k = 0; k < tr_node_n_inputs(g, id); k++) b += bytes_of(g, tr_node_input(g, id, k));
    return b;
}

/* Attention's FLOPs over the scores it sees: the dense count times the visible fraction. */
static double node_flops(const struct tr_graph *g, int id) {
    const int op = tr_node_op(g, id);
    double f = tr_node_flops(g, id);
    if (op == TR_OP_ATTENTION || op == TR_OP_ATTENTION_GRAD) {
        const struct tr_attrs *a = tr_node_attrs(g, id);
        const int64_t *q = tr_node_shape(g, tr_node_input(g, id, 0)), *k = tr_node_shape(g, tr_node_input(g, id, 1));
        f *= tr_roof_visible_fraction(q[2], k[2], (int)a->ints[0], a->ints[1]);
    }
    return f;
}

static int runs_kernel(int op) {
    /* ATTENTION_LSE and ATTENTION_REL_LSE ride in their forward's pass on every backend */
    return op != TR_OP_INPUT && op != TR_OP_PARAM && op != TR_OP_CONST && op != TR_OP_RESHAPE &&
           op != TR_OP_ATTENTION_LSE && op != TR_OP_ATTENTION_REL_LSE && op != TR_OP_ALLREDUCE && op != TR_OP_ALLREDUCE_START && op != TR_OP_ALLREDUCE_WAIT;
}

/* An op of one input, read by one node only (readers: input edges per node). */
static int lone(const struct tr_graph *g, const int *readers, int id, int op) {
    return id >= 0 && tr_node_op(g, id) == op && readers[id] == 1;
}

/* AdamW's update of one parameter as core's tr_adamw builds it, found from its ADAMW_STEP
 * s: m' = ADD(SCALE(m), SCALE(g)), v' = ADD(SCALE(v), SCALE(MUL(g, g))), s = ADAMW_STEP(p,
 * m', v', lr, step), g the gradient or its CAST to f32. The SCALEs, the MUL and the CAST
 * read by the group alone, m' and v' by s alone (outputs too: the moments' updates). The
 * gradient node (before a CAST) and its part nodes in part[0..7] (-1 where none), or -1.
 * The same conditions as the backends' grouping (plugins/common/adamw_group.h). */
static int adamw_group(const struct tr_graph *g, const int *readers, int s, int part[8]) {
    if (tr_node_op(g, s) != TR_OP_ADAMW_STEP || tr_node_n_inputs(g, s) != 5) return -1;
    const int m2 = tr_node_input(g, s, 1), v2 = tr_node_input(g, s, 2);
    if (!lone(g, readers, m2, TR_OP_ADD) || !lone(g, readers, v2, TR_OP_ADD)) return -1;
    const int sm = tr_node_input(g, m2, 0), sg = tr_node_input(g, m2, 1);
    const int sv = tr_node_input(g, v2, 0), sgg = tr_node_input(g, v2, 1);
    if (!lone(g, readers, sm, TR_OP_SCALE) || !lone(g, readers, sg, TR_OP_SCALE) ||
        !lone(g, readers, sv, TR_OP_SCALE) || !lone(g, readers, sgg, TR_OP_SCALE))
        return -1;
    const int mul = tr_node_input(g, sgg, 0), g32 = tr_node_input(g, sg, 0);
    if (!lone(g, readers, mul, TR_OP_MUL) || tr_node_input(g, mul, 0) != g32 || tr_node_input(g, mul, 1) != g32)
        return -1;
    /* tr_k_adamw_update takes an f32 gradient or one of the weight's dtype: the CAST is in
     * the call only from the weight's (non-f32) dtype; any other stays a kernel before it */
    const int pdt = tr_node_dtype(g, tr_node_input(g, s, 0));
    const int cast = tr_node_op(g, g32) == TR_OP_CAST && readers[g32] == 3 && pdt != TR_DTYPE_F32 &&
                             tr_node_dtype(g, tr_node_input(g, g32, 0)) == pdt
                         ? g32
                         : -1;
    const int grad = cast >= 0 ? tr_node_input(g, cast, 0) : g32;
    if (tr_node_dtype(g, grad) != TR_DTYPE_F32 && tr_node_dtype(g, grad) != pdt) return -1;
    const int p[8] = {m2, v2, sm, sg, sv, sgg, mul, cast};
    memcpy(part, p, sizeof p);
    return grad;
}

/* grad: per node, the gradient of the fused AdamW update it ends, else -1 (adamw_group) */
static int same_call(const struct tr_graph *g, const int *grad, int a, int b) {
    if ((grad[a] < 0) != (grad[b] < 0) || (grad[a] >= 0 && tr_node_dtype(g, grad[a]) != tr_node_dtype(g, grad[b])))
        return 0;
    if (tr_node_op(g, a) != tr_node_op(g, b) || tr_node_dtype(g, a) != tr_node_dtype(g, b) ||
        tr_node_n_inputs(g, a) != tr_node_n_inputs(g, b) ||
        !tr_shape_equal(tr_node_ndim(g, a), tr_node_shape(g, a), tr_node_ndim(g, b), tr_node_shape(g, b)) ||
        memcmp(tr_node_attrs(g, a), tr_node_attrs(g, b), sizeof(struct tr_attrs)) != 0)
        return 0;
    for (int k = 0; k < tr_node_n_inputs(g, a); k++) {
        const int x = tr_node_input(g, a, k), y = tr_node_input(g, b, k);
        if (tr_node_dtype(g, x) != tr_node_dtype(g, y) ||
            !tr_shape_equal(tr_node_ndim(g, x), tr_node_shape(g, x), tr_node_ndim(g, y), tr_node_shape(g, y)))
            return 0;
    }
    return 1;
}

/* "matmul bf16 [16384,768]·[768,768] trans 01", "attention_grad dk bf16 [...]·... causal" */
static void describe(const struct tr_graph *g, int id, char *s, size_t n) {
    const int op = tr_node_op(g, id);
    const struct tr_attrs *a = tr_node_attrs(g, id);
    const char *which = op != TR_OP_ATTENTION_GRAD ? "" : a->ints[2] == 0 ? " dq" : a->ints[2] == 1 ? " dk" : " dv";
    size_t o = (size_t)snprintf(s, n, "%s%s %s ", tr_op_name(op), which,
                                tr_dtype_name((enum tr_dtype)tr_node_dtype(g, id)));
    for (int k = 0; k < tr_node_n_inputs(g, id) && o < n; k++) {
        const int x = tr_node_input(g, id, k);
        char sh[96];
        tr_shape_str(tr_node_ndim(g, x), tr_node_shape(g, x), sh, sizeof sh);
        o += (size_t)snprintf(s + o, n - o, "%s%s", k ? "·" : "", sh);
    }
    if (o < n && op == TR_OP_MATMUL && (a->ints[0] || a->ints[1]))
        o += (size_t)snprintf(s + o, n - o, " trans %lld%lld", (long long)a->ints[0], (long long)a->ints[1]);
    if (o < n && (op == TR_OP_ATTENTION || op == TR_OP_ATTENTION_GRAD)) {
        if (a->ints[0]) o += (size_t)snprintf(s + o, n - o, " causal");
        if (o < n && a->ints[1]) snprintf(s + o, n - o, " window %lld", (long long)a->ints[1]);
    }
}

int tr_roof_sheet_build(const struct tr_graph *g, enum tr_math math, const struct tr_roof_device *d,
                        struct tr_roof_sheet *s, struct tr_error *err) {
    memset(s, 0, sizeof *s);
    if (!g || !d) return tr_error_set(err, TR_ERR_INVALID, "roofline: NULL graph or device");
    if (!(d->tc_tflops > 0 && d->f32_tflops > 0 && d->bw_gbs > 0))
        return tr_error_set(err, TR_ERR_INVALID, "roofline: device '%s' has no peaks", d->name);
    s->dev = *d;
    s->math = math;
    const int n = tr_graph_n_nodes(g);
    s->k = calloc((size_t)(n > 0 ? n : 1), sizeof *s->k);
    /* per node: input edges reading it; the gradient of the AdamW update it ends (else -1);
     * whether it is a part of one (not a call of its own) */
    int *readers = calloc((size_t)(n > 0 ? n : 1), sizeof *readers);
    int *grad = malloc((size_t)(n > 0 ? n : 1) * sizeof *grad);
    unsigned char *absorbed = calloc((size_t)(n > 0 ? n : 1), 1);
    double *part_flops = calloc((size_t)(n > 0 ? n : 1), sizeof *part_flops);
    if (!s->k || !readers || !grad || !absorbed || !part_flops) {
        free(readers), free(grad), free(absorbed), free(part_flops);
        tr_roof_sheet_free(s);
        return tr_error_set(err, TR_ERR_NOMEM, "roofline: out of memory for %d nodes", n);
    }
    for (int id = 0; id < n; id++)
        for (int k = 0; k < tr_node_n_inputs(g, id); k++) readers[tr_node_input(g, id, k)]++;
    for (int id = 0; id < n; id++) {
        int part[8];
        grad[id] = adamw_group(g, readers, id, part);
        for (int j = 0; grad[id] >= 0 && j < 8; j++)
            if (part[j] >= 0) absorbed[part[j]] = 1, part_flops[id] += node_flops(g, part[j]);
    }
    for (int id = 0; id < n; id++) {
        const int op = tr_node_op(g, id);
        if (!runs_kernel(op) || absorbed[id]) continue;
        int i = 0;
        while (i < s->n && !same_call(g, grad, s->k[i].node, id)) i++;
        struct tr_roof_kernel *k = &s->k[i];
        if (i == s->n) {
            s->n++;
            const int dt = tr_node_dtype(g, is_matrix_op(op) ? tr_node_input(g, id, 0) : id);
            k->op = op;
            k->dtype = dt;
            k->node = id;
            k->measured_s = -1;
            k->adamw_grad = grad[id];
            describe(g, id, k->what, sizeof k->what);
            k->flops = node_flops(g, id) + part_flops[id];
            k->bytes = node_bytes(g, id);
            if (grad[id] >= 0) { /* param, lr, step, m, v and the gradient read; param', m', v' written */
                const int p = tr_node_input(g, id, 0), m2 = tr_node_input(g, id, 1), v2 = tr_node_input(g, id, 2);
                k->bytes += bytes_of(g, grad[id]) + bytes_of(g, m2) + bytes_of(g, v2);
                char sh[96];
                tr_shape_str(tr_node_ndim(g, p), tr_node_shape(g, p), sh, sizeof sh);
                snprintf(k->what, sizeof k->what, "adamw_update %s %s grad %s",
                         tr_dtype_name((enum tr_dtype)dt), sh, tr_dtype_name((enum tr_dtype)tr_node_dtype(g, grad[id])));
            }
            const int tensor = dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16;
            k->peak_tflops = !is_matrix_op(op) ? d->f32_tflops
                             : tensor          ? d->tc_tflops
                             : math == TR_MATH_TF32 && d->tf32_tflops > 0 ? d->tf32_tflops
                                                                           : d->f32_tflops;
            const struct tr_roof_design ds = tr_roof_design_of(op, dt, math);
            const double tc = k->flops / (k->peak_tflops * 1e12), tm = k->bytes / (d->bw_gbs * 1e9);
            k->floor_s = fmax(tc, tm);
            k->memory_bound = tm > tc;
            k->design_s = fmax(tc / ds.compute, tm / ds.memory);
        }
        k->count++;
    }
    free(readers), free(grad), free(absorbed), free(part_flops);
    for (int i = 0; i < s->n; i++) {
        const struct tr_roof_kernel *k = &s->k[i];
        s->flops += k->count * k->flops;
        s->bytes += k->count * k->bytes;
        s->floor_s += k->count * k->floor_s;
        s->design_s += k->count * k->design_s;
    }
    return TR_OK;
}

double tr_roof_sheet_measured(const struct tr_roof_sheet *s) {
    double t = 0;
    int any = 0;
    for (int i = 0; i < s->n; i++)
        if (s->k[i].measured_s >= 0) t += s->k[i].count * s->k[i].measured_s, any = 1;
    return any ? t : -1;
}

void tr_roof_sheet_free(struct tr_roof_sheet *s) {
    if (!s) return;
    free(s->k);
    memset(s, 0, sizeof *s);
}
