/* trident — the graph IR and its builder.
 *
 * A graph is a list of nodes in program order; node i only uses nodes < i. Each node
 * has an op (ops.h), up to TR_MAX_INPUTS inputs (node ids), attributes, a name, and an
 * output dtype and shape inferred when the node is added. INPUT nodes are fed per step
 * in the order they were added; outputs are marked with tr_graph_set_output.
 *
 * The builder functions return the new node's id (>= 0), or -1 on error. Errors are
 * sticky: the first one is kept in the graph (tr_graph_status) and every later call
 * that gets a -1 as an input returns -1 without a new message, so model code builds a
 * whole block and checks once. Messages name the node, the op and the shapes:
 *   "node 57 matmul 'encoder.layer.0.attention.self.query': inner dimensions differ:
 *    a [2,8,64] (K=64) x b [32,64]ᵀ (K=32)".
 *
 * Names: a node is named "<scope>.<name>" while a scope is pushed, so weights get
 * Hugging Face names ("encoder.layer.0.attention.self.query.weight") from model code
 * that says tr_param(g, "weight", ...).
 */
#ifndef TRIDENT_GRAPH_H
#define TRIDENT_GRAPH_H

#include <stdint.h>
#include <stdio.h>
#include "trident/dtype.h"
#include "trident/ops.h"
#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TR_MAX_INPUTS 8
#define TR_NAME_MAX 128

struct tr_graph;

int tr_graph_init(struct tr_graph **out, struct tr_error *err);
void tr_graph_free(struct tr_graph *g);

/* TR_OK, or the first builder error (copied into err). */
int tr_graph_status(const struct tr_graph *g, struct tr_error *err);

/* Scopes for names: push "encoder", push "layer.0", ... pop. Returns a status. */
int tr_graph_push_scope(struct tr_graph *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tr_graph_pop_scope(struct tr_graph *g);

/* ---- leaves ---- */
int tr_input(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape);
/* A weight; init: normal(mean, std) when core makes weights from a seed. */
int tr_param(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape,
             float init_mean, float init_std);
/* Building one block again, sharing its weights (Stable Diffusion's UNet at every
 * denoising step of one graph): k > 0 makes the nodes added after it instance k. A PARAM
 * declared with the name, dtype, shape and init of an existing one is that PARAM (another
 * shape is an error); every other explicit name gets the suffix "@k". k = 0 ends it. */
int tr_graph_set_instance(struct tr_graph *g, int k);
/* Marks PARAM id as one a checkpoint may not have (LoRA adapters, optimizer state, a
 * cache): when weights are read from a file and it lacks the tensor, the PARAM is made
 * from its init instead of being an error. Stored as the PARAM's attrs.ints[0] = 1. */
int tr_param_set_fresh(struct tr_graph *g, int id);
int tr_param_is_fresh(const struct tr_graph *g, int id);
/* Names a part of the model this graph leaves out by design (prefix "decoder.": a fit of
 * the VAE's encoder only; "safety_checker/": a subdirectory of a pipeline's weights
 * directory): a checkpoint's tensors under it are the model's, though no PARAM reads
 * them, and tr_weights_load_opts does not count them as unused. At most
 * TR_GRAPH_OMIT_MAX prefixes, each shorter than TR_NAME_MAX; the same one twice is one. */
#define TR_GRAPH_OMIT_MAX 16
int tr_graph_omit(struct tr_graph *g, const char *prefix);
int tr_graph_n_omitted(const struct tr_graph *g);
const char *tr_graph_omitted(const struct tr_graph *g, int i); /* NULL out of range */
/* A constant; data (host, contiguous, dtype dt) is copied into the graph. */
int tr_const(struct tr_graph *g, const char *name, enum tr_dtype dt, int ndim, const int64_t *shape,
             const void *data);
int tr_const_scalar(struct tr_graph *g, enum tr_dtype dt, double v);

/* ---- ops (see ops.h for the semantics) ---- */
int tr_matmul(struct tr_graph *g, int a, int b, int trans_a, int trans_b);
int tr_add(struct tr_graph *g, int a, int b);
int tr_sub(struct tr_graph *g, int a, int b);
int tr_mul(struct tr_graph *g, int a, int b);
int tr_div(struct tr_graph *g, int a, int b);
int tr_gelu(struct tr_graph *g, int x, int approximate_tanh);
int tr_unary(struct tr_graph *g, enum tr_op op, int x); /* TANH RELU SILU SIGMOID EXP NEG SQRT RSQRT */
int tr_scale(struct tr_graph *g, int x, float alpha, float beta);
int tr_softmax(struct tr_graph *g, int x);
int tr_layer_norm(struct tr_graph *g, int x, int gamma, int beta, float eps);
int tr_embedding(struct tr_graph *g, int table, int ids);
/* The same with a padding row (padding_idx < 0: none): nn.Embedding(padding_idx) — no
 * gradient reaches that row (ops.h EMBEDDING). */
int tr_embedding_pad(struct tr_graph *g, int table, int ids, int64_t padding_idx);
int tr_reshape(struct tr_graph *g, int x, int ndim, const int64_t *shape);
int tr_transpose(struct tr_graph *g, int x, int ndim, const int *perm);
int tr_slice(struct tr_graph *g, int x, int axis, int64_t start, int64_t end, int64_t step);
int tr_concat(struct tr_graph *g, int n, const int *xs, int axis);
/* x with [start, start+n) along axis replaced by update (n: update's extent there); start
 * a one-element i32 node read at run time. For caches kept as PARAMs (tr_graph_add_update). */
int tr_update_slice(struct tr_graph *g, int x, int update, int start, int axis);
int tr_reduce(struct tr_graph *g, enum tr_op op, int x, int axis, int keepdims); /* SUM MEAN MAX */
int tr_cast(struct tr_graph *g, int x, enum tr_dtype to);
/* mask < 0: none. */
int tr_attention(struct tr_graph *g, int q, int k, int v, int mask, float scale, int causal, int window);
/* Attention with a decomposed relative-position bias over a Kh x Kw key grid (ops.h
 * ATTENTION_REL): rel_h (B,H,Tq,Kh), rel_w (B,H,Tq,Kw); scale 0: 1/sqrt(D). */
int tr_attention_rel(struct tr_graph *g, int q, int k, int v, int rel_h, int rel_w, float scale);
/* add_one: Gemma's x̂·(1 + w). */
int tr_rms_norm(struct tr_graph *g, int x, int w, float eps, int add_one);
/* rot_dims 0: all of D. */
int tr_rope(struct tr_graph *g, int x, int pos, float base, int rot_dims);
/* NHWC x, torch-layout w (Cout,Cin,KH,KW) (ops.h CONV2D); bias < 0: none; pad_end: zeros
 * added at the bottom and right only, beyond padding. */
int tr_conv2d(struct tr_graph *g, int x, int w, int bias, int stride, int padding, int pad_end);
/* NHWC x; silu: SiLU after the affine (ops.h GROUP_NORM). */
int tr_group_norm(struct tr_graph *g, int x, int gamma, int beta, int groups, float eps, int silu);
/* x broadcast to shape (numpy rules: x's axes, aligned at the end, equal or 1). */
int tr_broadcast(struct tr_graph *g, int x, int ndim, const int64_t *shape);
/* NHWC x (N,H,W,C) -> (N,H·f,W·f,C), each pixel repeated f x f times: torch's
 * interpolate(mode="nearest", scale_factor=f). A reshape, a broadcast and a reshape (so
 * that its gradient is the broadcast's sum). */
int tr_upsample_nearest(struct tr_graph *g, int x, int factor);
/* t (N) -> (N, dim) sinusoidal features (ops.h TIMESTEP_EMBEDDING; max_period 0: 10000). */
int tr_timestep_embedding(struct tr_graph *g, int t, int dim, int flip_sin_to_cos, float shift, float max_period);
/* ALLREDUCE (ops.h): x summed over `ranks` processes, times scale; bucket names it. */
int tr_allreduce(struct tr_graph *g, int x, int ranks, int bucket, float scale);
/* The same sum in two halves (ops.h ALLREDUCE_START / ALLREDUCE_WAIT): begun where x is
 * ready, waited for (and scaled) where the sum is needed; the nodes between overlap it. */
int tr_allreduce_start(struct tr_graph *g, int x, int ranks, int bucket);
int tr_allreduce_wait(struct tr_graph *g, int started, float scale);

/* Generic form used by the above (and by passes that copy nodes): checks arity, infers
 * dtype and shape, names the node. */
int tr_graph_add_node(struct tr_graph *g, enum tr_op op, int n_inputs, const int *inputs,
                      const struct tr_attrs *attrs);

/* Set a node's name (within the current scope). Returns a status. */
int tr_graph_set_name(struct tr_graph *g, int id, const char *name);
int tr_graph_set_output(struct tr_graph *g, int id, const char *name);

/* State carried between steps (training): after each execution, PARAM `param` holds the
 * value that node `value` had in it, and the next execution reads that. value has the
 * param's dtype and shape and is kept alive like an output; a param is updated by one
 * node at most, and a node updates one param at most. Returns a status (sticky, as the
 * builders). A backend may compute value in the param's memory when nothing reads the
 * old value afterwards (donation); the caller sees the same numbers either way. */
int tr_graph_add_update(struct tr_graph *g, int param, int value);

/* ---- reading a graph (core's accessors; plugins get the same through the host table) ---- */
int tr_graph_n_nodes(const struct tr_graph *g);
int tr_graph_n_inputs(const struct tr_graph *g);   /* INPUT nodes, in feed order */
int tr_graph_input(const struct tr_graph *g, int i);
int tr_graph_n_outputs(const struct tr_graph *g);
int tr_graph_output(const struct tr_graph *g, int i);
const char *tr_graph_output_name(const struct tr_graph *g, int i);
int tr_graph_n_params(const struct tr_graph *g);   /* PARAM nodes, in order */
int tr_graph_param(const struct tr_graph *g, int i);
int tr_graph_n_updates(const struct tr_graph *g);
int tr_graph_update_param(const struct tr_graph *g, int i);  /* PARAM node id, or -1 */
int tr_graph_update_value(const struct tr_graph *g, int i);  /* its new value's node id, or -1 */
int tr_graph_find(const struct tr_graph *g, const char *name); /* node id or -1 */

int tr_node_op(const struct tr_graph *g, int id);
int tr_node_n_inputs(const struct tr_graph *g, int id);
int tr_node_input(const struct tr_graph *g, int id, int i);
int tr_node_dtype(const struct tr_graph *g, int id);
int tr_node_ndim(const struct tr_graph *g, int id);
const int64_t *tr_node_shape(const struct tr_graph *g, int id);
const struct tr_attrs *tr_node_attrs(const struct tr_graph *g, int id);
const char *tr_node_name(const struct tr_graph *g, int id);
/* Host data of a PARAM (once bound) or CONST node; NULL otherwise. */
const void *tr_node_data(const struct tr_graph *g, int id);
/* The node's output shape and dtype as a tensor with data = NULL. */
struct tr_tensor tr_node_tensor(const struct tr_graph *g, int id);

/* Bind host data (contiguous, the node's dtype and shape) to a PARAM. The graph keeps the
 * pointer, not a copy: the caller keeps it alive while the graph is used. */
int tr_graph_bind_param(struct tr_graph *g, int id, const void *data, struct tr_error *err);

/* Text form, one node a line: "%12 = matmul(%10, %11) trans_b=1 : bf16[2,128,256]  'name'". */
int tr_graph_dump(const struct tr_graph *g, FILE *f, struct tr_error *err);

/* Floating-point operations of one execution (2·M·N·K per matmul, 4·B·H·Tq·Tk·D per
 * attention, elementwise ops counted once per element). For achieved-FLOP/s reports. */
double tr_graph_flops(const struct tr_graph *g);
/* The same count for node id alone (0 for leaves, views and ops not counted). */
double tr_node_flops(const struct tr_graph *g, int id);
/* Bytes of all PARAM nodes. */
uint64_t tr_graph_param_bytes(const struct tr_graph *g);
/* The most bytes of computed values alive at once when the nodes run in order, each
 * freed after its last reader (outputs and updates live to the end; a RESHAPE is its
 * input's memory): what an executor that plans its memory needs besides the params and
 * inputs. For checking that a batch fits before any weight is made. */
uint64_t tr_graph_peak_bytes(const struct tr_graph *g);

#ifdef __cplusplus
}
#endif
#endif
