/* The models' shared layers (layers.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "layers.h"
#include "trident/tensor.h"

static float fan_in_std(float std, int64_t fan_in) { return std < 0 ? (float)(1.0 / sqrt((double)fan_in)) : std; }

int tr_nn_linear(struct tr_graph *g, int x, int64_t in, int64_t out, enum tr_dtype dt, int bias, float std,
                 const char *name) {
    const int64_t ws[2] = {out, in}, bs[1] = {out};
    tr_graph_push_scope(g, "%s", name);
    int w = tr_param(g, "weight", dt, 2, ws, 0.0f, fan_in_std(std, in));
    int b = bias ? tr_param(g, "bias", dt, 1, bs, 0.0f, 0.02f) : -1;
    tr_graph_pop_scope(g);
    int y = tr_matmul(g, x, w, 0, 1);
    if (bias) y = tr_add(g, y, b);
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

/* weight normal(1, 0.02) and bias normal(0, 0.02) of c channels. */
static void norm_params(struct tr_graph *g, int64_t c, enum tr_dtype dt, const char *name, int *w, int *b) {
    const int64_t s[1] = {c};
    tr_graph_push_scope(g, "%s", name);
    *w = tr_param(g, "weight", dt, 1, s, 1.0f, 0.02f);
    *b = tr_param(g, "bias", dt, 1, s, 0.0f, 0.02f);
    tr_graph_pop_scope(g);
}

int tr_nn_layer_norm(struct tr_graph *g, int x, int64_t d, enum tr_dtype dt, float eps, const char *name) {
    int w, b;
    norm_params(g, d, dt, name, &w, &b);
    int y = tr_layer_norm(g, x, w, b, eps);
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

int tr_nn_group_norm(struct tr_graph *g, int x, int64_t c, int groups, float eps, int silu, enum tr_dtype dt,
                     const char *name) {
    int w, b;
    norm_params(g, c, dt, name, &w, &b);
    int y = tr_group_norm(g, x, w, b, groups, eps, 0);
    if (y >= 0) tr_graph_set_name(g, y, name);
    if (y >= 0 && silu) {
        y = tr_unary(g, TR_OP_SILU, y);
        char nm[TR_NAME_MAX];
        snprintf(nm, sizeof nm, "%s.silu", name);
        if (y >= 0) tr_graph_set_name(g, y, nm);
    }
    return y;
}

int tr_nn_conv2d(struct tr_graph *g, int x, int64_t cin, int64_t cout, int64_t k, int stride, int pad, int pad_end,
                 enum tr_dtype dt, const char *name) {
    const int64_t ws[4] = {cout, cin, k, k}, bs[1] = {cout};
    tr_graph_push_scope(g, "%s", name);
    int w = tr_param(g, "weight", dt, 4, ws, 0.0f, fan_in_std(-1.0f, cin * k * k));
    int b = tr_param(g, "bias", dt, 1, bs, 0.0f, 0.02f);
    tr_graph_pop_scope(g);
    int y = tr_conv2d(g, x, w, b, stride, pad, pad_end);
    if (y >= 0) tr_graph_set_name(g, y, name);
    return y;
}

int tr_model_check_input(const char *model, const struct tr_tensor *t, const char *name, enum tr_dtype dt, int nd,
                         const int64_t *sh, struct tr_error *err) {
    if (t->dtype != (int32_t)dt || !tr_shape_equal(t->ndim, t->shape, nd, sh) || !t->data ||
        t->device != TR_DEVICE_CPU || !tr_tensor_is_contiguous(t)) {
        char got[96], want[96];
        return tr_error_set(err, TR_ERR_SHAPE, "%s: input '%s' is %s%s, expected a contiguous host %s%s", model, name,
                            tr_dtype_name((enum tr_dtype)t->dtype), tr_shape_str(t->ndim, t->shape, got, sizeof got),
                            tr_dtype_name(dt), tr_shape_str(nd, sh, want, sizeof want));
    }
    return TR_OK;
}

enum act { ACT_NONE, ACT_GELU, ACT_GELU_TANH, ACT_QUICK_GELU, ACT_RELU, ACT_SILU, ACT_TANH, ACT_SIGMOID, ACT_LINEAR };

static enum act act_of(const char *name) {
    static const struct {
        const char *name;
        enum act act;
    } acts[] = {
        {"gelu", ACT_GELU},           {"gelu_python", ACT_GELU},     {"gelu_new", ACT_GELU_TANH},
        {"gelu_pytorch_tanh", ACT_GELU_TANH}, {"gelu_fast", ACT_GELU_TANH}, {"gelu_accurate", ACT_GELU_TANH},
        {"quick_gelu", ACT_QUICK_GELU}, {"relu", ACT_RELU},          {"silu", ACT_SILU},
        {"swish", ACT_SILU},          {"tanh", ACT_TANH},            {"sigmoid", ACT_SIGMOID},
        {"linear", ACT_LINEAR},
    };
    for (size_t i = 0; name && i < sizeof acts / sizeof acts[0]; i++)
        if (strcmp(name, acts[i].name) == 0) return acts[i].act;
    return ACT_NONE;
}

int tr_nn_act_known(const char *name) { return act_of(name) != ACT_NONE; }

int tr_nn_act(struct tr_graph *g, const char *name, int x) {
    switch (act_of(name)) {
    case ACT_GELU: return tr_gelu(g, x, 0);
    case ACT_GELU_TANH: return tr_gelu(g, x, 1);
    case ACT_QUICK_GELU: return tr_mul(g, x, tr_unary(g, TR_OP_SIGMOID, tr_scale(g, x, 1.702f, 0.0f)));
    case ACT_RELU: return tr_unary(g, TR_OP_RELU, x);
    case ACT_SILU: return tr_unary(g, TR_OP_SILU, x);
    case ACT_TANH: return tr_unary(g, TR_OP_TANH, x);
    case ACT_SIGMOID: return tr_unary(g, TR_OP_SIGMOID, x);
    case ACT_LINEAR: return x;
    case ACT_NONE: break;
    }
    /* as another builder's bad argument: a node of -1 makes the graph's error sticky */
    return tr_unary(g, TR_OP_RELU, -1);
}
