/* Layers the models share, each a torch module's parameters under the graph's scope
 * (`name`.weight, `name`.bias) and its node named `name`; a failure is the graph's sticky
 * error (tr_graph_status), as every builder's. Inits: weights normal(0, std) (std < 0:
 * 1/√fan_in), biases normal(0, 0.02), norm weights normal(1, 0.02). */
#ifndef TRIDENT_MODELS_LAYERS_H
#define TRIDENT_MODELS_LAYERS_H

#include <stdint.h>
#include "trident/graph.h"

/* nn.Linear over the last axis: weight (out,in); bias 0: none. */
int tr_nn_linear(struct tr_graph *g, int x, int64_t in, int64_t out, enum tr_dtype dt, int bias, float std,
                 const char *name);
int tr_nn_layer_norm(struct tr_graph *g, int x, int64_t d, enum tr_dtype dt, float eps, const char *name);
/* nn.Conv2d on NHWC x: weight (cout,cin,k,k), bias (cout); ops.h CONV2D for pad_end. */
int tr_nn_conv2d(struct tr_graph *g, int x, int64_t cin, int64_t cout, int64_t k, int stride, int pad, int pad_end,
                 enum tr_dtype dt, const char *name);
/* nn.GroupNorm on NHWC x, then nn.SiLU when silu: two nodes, as the model is written (the
 * plain program); tf's remapper and jax's fusion make them one call, torch runs two. */
int tr_nn_group_norm(struct tr_graph *g, int x, int64_t c, int groups, float eps, int silu, enum tr_dtype dt,
                     const char *name);

/* transformers' ACT2FN, for the names trident computes (TR_NN_ACTS): gelu and gelu_python
 * (erf form), gelu_new, gelu_pytorch_tanh, gelu_fast and gelu_accurate (the one tanh form,
 * their constants equal in f32), quick_gelu (x·sigmoid(1.702x)), relu, silu and swish,
 * tanh, sigmoid, linear (identity). tr_nn_act_known: 1 for those names, else 0;
 * tr_nn_act: the node of act(x) (a name not known: the graph's sticky error). */
#define TR_NN_ACTS \
    "gelu, gelu_python, gelu_new, gelu_pytorch_tanh, gelu_fast, gelu_accurate, quick_gelu, relu, silu, swish, tanh, " \
    "sigmoid, linear"
int tr_nn_act_known(const char *name);
int tr_nn_act(struct tr_graph *g, const char *name, int x);

/* make_inputs' check of one input: a contiguous host tensor of dt and shape sh, or an
 * error naming `model`, the input, what it is and what is expected. */
struct tr_tensor;
struct tr_error;
int tr_model_check_input(const char *model, const struct tr_tensor *t, const char *name, enum tr_dtype dt, int nd,
                         const int64_t *sh, struct tr_error *err);

#endif
