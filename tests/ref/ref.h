/* The tests' float64 oracles: one per op (the only one; every test checks against it),
 * one evaluator of a struct tr_graph over them, one central finite-difference checker.
 *
 * Contract: plain loops in double over contiguous row-major arrays, written from the
 * semantics of ops.h alone (no kernel, no backend), so a kernel and its oracle cannot
 * share a bug. Operands broadcast numpy-style, aligned right. A row that sees nothing
 * (softmax of all -inf, attention with every key hidden) is zeros, as the kernels give.
 * Integer operands (ids, labels, positions) arrive as doubles holding the integers, as
 * tr_test_to_f64 and the evaluator hold them. A new op adds its oracle here, its node
 * rule to ref_graph.c, and its tests use both. */
#ifndef TRIDENT_TESTS_REF_H
#define TRIDENT_TESTS_REF_H

#include <stdint.h>
#include "trident/dtype.h"

struct tr_graph;
struct tr_tensor;

/* An operand of a broadcasting op: its rank, shape and values. */
struct tr_ref_view {
    int nd;
    const int64_t *sh;
    const double *d;
};

/* ---- indexing (ref_ops.c) ---- */

/* The index of flat element f of shape (nd, sh). */
void tr_ref_unravel(int64_t f, int nd, const int64_t *sh, int64_t *idx);
/* Offset in a tensor of shape (nd, sh) broadcast against the index idx of rank ond. */
int64_t tr_ref_bcast_off(int nd, const int64_t *sh, int ond, const int64_t *idx);

/* ---- elementwise ---- */

/* A GEMM epilogue activation (enum tr_act). */
double tr_ref_act(int act, double x);
/* A unary op (GELU TANH RELU SILU SIGMOID EXP NEG SQRT RSQRT SCALE): approx is GELU's
 * tanh flag, alpha and beta SCALE's. */
double tr_ref_unary(int op, double x, int approx, double alpha, double beta);
/* Its derivative at x (what UNARY_GRAD multiplies dy by). */
double tr_ref_unary_grad(int op, double x, int approx, double alpha);
/* x stored as dtype `to`: rounded to a float type, truncated and saturated to an integer
 * one (NaN to 0). */
double tr_ref_cast(double x, enum tr_dtype to);
/* ADD SUB MUL DIV of a and b broadcast to (nd, sh); out may be an operand of that shape. */
void tr_ref_binary(int op, struct tr_ref_view a, struct tr_ref_view b, int nd, const int64_t *sh, double *out);
/* x broadcast to (nd, sh). */
void tr_ref_broadcast(struct tr_ref_view x, int nd, const int64_t *sh, double *out);

/* ---- matmul ---- */

/* c (nd, sh) = act(alpha·op(a)·op(b) + bias): batch axes broadcast, bias (N) or NULL. */
void tr_ref_matmul(struct tr_ref_view a, struct tr_ref_view b, int nd, const int64_t *sh, int ta, int tb, double alpha,
                   const double *bias, int act, double *c);

/* ---- rows: softmax and the norms (rows × D; y may be x) ---- */

void tr_ref_softmax(const double *x, int64_t rows, int64_t D, double *y);
/* dx = y·(dy − Σ dy·y), y softmax's output. */
void tr_ref_softmax_grad(const double *y, const double *dy, int64_t rows, int64_t D, double *dx);
/* Biased variance; gamma, beta NULL mean 1 and 0. */
void tr_ref_layer_norm(const double *x, const double *gamma, const double *beta, int64_t rows, int64_t D, double eps,
                       double *y);
void tr_ref_layer_norm_grad(const double *x, const double *gamma, const double *dy, int64_t rows, int64_t D, double eps,
                            double *dx);
/* dgamma (D) = Σ over rows of dy·x̂. */
void tr_ref_layer_norm_grad_gamma(const double *x, const double *dy, int64_t rows, int64_t D, double eps,
                                  double *dgamma);
/* x / rms(x) · (w + add_one). */
void tr_ref_rms_norm(const double *x, const double *w, int64_t rows, int64_t D, double eps, int add_one, double *y);
void tr_ref_rms_norm_grad(const double *x, const double *w, const double *dy, int64_t rows, int64_t D, double eps,
                          int add_one, double *dx);
/* dw (D) = Σ over rows of dy·x/rms(x). */
void tr_ref_rms_norm_grad_w(const double *x, const double *dy, int64_t rows, int64_t D, double eps, double *dw);

/* ---- rope ---- */

/* The angle of pair i at position p: Hugging Face's f32 computation (θ_i = 1/base^(2i/R)
 * and p·θ_i in f32, the kernels' documented choice for f32/bf16/f16), or f64. */
double tr_ref_rope_angle(int64_t p, int64_t i, int64_t R, float base, int f32_angle);
/* x (B,H,T,D) rotated over its first R dims (the rest passed through); pos (B,T) when
 * pos_batched, else (T); inverse rotates the other way. */
void tr_ref_rope(const double *x, const double *pos, int pos_batched, int64_t B, int64_t H, int64_t T, int64_t D,
                 int64_t R, float base, int inverse, int f32_angle, double *y);

/* ---- reductions and gathers ---- */

/* SUM MEAN MAX of x (nd, sh) over axis (negative counts from the end). */
void tr_ref_reduce(int op, int nd, const int64_t *sh, const double *x, int axis, double *y);
/* dy routed to the first maximum along axis, zeros elsewhere. */
void tr_ref_max_grad(int nd, const int64_t *sh, const double *x, const double *dy, int axis, double *dx);
/* n rows of table (., D) at ids. */
void tr_ref_embedding(const double *table, int64_t D, const double *ids, int64_t n, double *out);
/* dtable (V, D): the n rows of dy added at their ids. */
void tr_ref_embedding_grad(const double *ids, int64_t n, const double *dy, int64_t V, int64_t D, double *dtable);

/* ---- layout ---- */

/* y = x transposed: y's axis i is x's axis perm[i]. */
void tr_ref_transpose(int nd, const int64_t *xsh, const double *x, const int64_t *perm, double *y);
/* count entries from start by step along axis of x (nd, xsh). */
void tr_ref_slice(int nd, const int64_t *xsh, const double *x, int axis, int64_t start, int64_t step, int64_t count,
                  double *y);
/* Zeros of extent `full` along axis, with dy (nd, dysh) placed where SLICE took it. */
void tr_ref_slice_grad(int nd, const int64_t *dysh, const double *dy, int axis, int64_t start, int64_t step,
                       int64_t full, double *dx);

/* ---- vision (NHWC) ---- */

/* A convolution's sizes: x (N,H,W,Ci), w (Co,Ci,KH,KW) (torch's layout), out (N,OH,OW,Co)
 * with OH = (H + 2·pad + pad_end − KH)/stride + 1; zeros outside x. */
struct tr_ref_conv {
    int64_t N, H, W, Ci, KH, KW, Co, stride, pad, pad_end;
};
int64_t tr_ref_conv_oh(const struct tr_ref_conv *c);
int64_t tr_ref_conv_ow(const struct tr_ref_conv *c);
/* CONV2D, a cross-correlation; bias (Co) or NULL. */
void tr_ref_conv2d(const struct tr_ref_conv *c, const double *x, const double *w, const double *bias, double *out);
/* dx (N,H,W,Ci) and dw (Co,Ci,KH,KW) of Σ dy·conv2d(x, w). */
void tr_ref_conv2d_grad_input(const struct tr_ref_conv *c, const double *dy, const double *w, double *dx);
void tr_ref_conv2d_grad_weight(const struct tr_ref_conv *c, const double *x, const double *dy, double *dw);
/* GROUP_NORM: x (N,HW,C) normalised over each (n, group of C/G consecutive channels)
 * with the biased variance, ·gamma + beta per channel, then SiLU when silu; y may be x. */
void tr_ref_group_norm(const double *x, const double *gamma, const double *beta, int64_t N, int64_t HW, int64_t C,
                       int64_t G, double eps, int silu, double *y);
/* dx of Σ dy·group_norm(x) (no SiLU), and dgamma (C) = Σ over N,HW of dy·x̂. */
void tr_ref_group_norm_grad(const double *x, const double *gamma, const double *dy, int64_t N, int64_t HW, int64_t C,
                            int64_t G, double eps, double *dx);
void tr_ref_group_norm_grad_gamma(const double *x, const double *dy, int64_t N, int64_t HW, int64_t C, int64_t G,
                                  double eps, double *dgamma);

/* TIMESTEP_EMBEDDING: out (N, D) = [sin(t·f), cos(t·f)] (flip: [cos, sin]) with
 * f_i = period^(−i/(D/2 − shift)), as diffusers' get_timestep_embedding. */
void tr_ref_timestep_embedding(const double *t, int64_t N, int64_t D, int flip, double shift, double period,
                               double *out);

/* ---- losses ---- */

/* Mean over the labels that are not ignored (has_ignore, ignore) of −log softmax(x)[label];
 * 0 when all are. With grad (N, C): dloss times its gradient, zero rows where ignored. */
double tr_ref_cross_entropy(const double *x, const double *labels, int64_t N, int64_t C, int has_ignore, int64_t ignore,
                            double dloss, double *grad);
double tr_ref_mse(const double *p, const double *t, int64_t n);

/* ---- attention ---- */

struct tr_ref_attn {
    int64_t B, H, Hk, Tq, Tk, D, Dv; /* H a multiple of Hk */
    double scale;                    /* applied to q·kᵀ, resolved (never the unset 0) */
    int causal;
    int64_t window;          /* 0 none; else key j seen by query i iff i − window < j <= i, aligned at the end */
    struct tr_ref_view mask; /* additive, broadcast to (B,H,Tq,Tk); d NULL: none */
    /* ATTENTION_REL's decomposed bias (NULL: none): rel_h (B,H,Tq,Kh), rel_w (B,H,Tq,Kw),
     * Tk = Kh·Kw; s_ij += rel_h[i, j / Kw] + rel_w[i, j % Kw] */
    const double *rel_h, *rel_w;
    int64_t Kh, Kw;
};

/* out (B,H,Tq,Dv) from q (B,H,Tq,D), k (B,Hk,Tk,D), v (B,Hk,Tk,Dv), the whole score
 * matrix at once. */
void tr_ref_attention(const struct tr_ref_attn *c, const double *q, const double *k, const double *v, double *out);
/* lse (B,H,Tq): each query row's log Σ exp of its scaled, masked scores; +inf for a row
 * that sees no key. */
void tr_ref_attention_lse(const struct tr_ref_attn *c, const double *q, const double *k, double *lse);
/* dq, dk, dv of Σ dy·attention (each may be NULL). */
void tr_ref_attention_grad(const struct tr_ref_attn *c, const double *q, const double *k, const double *v,
                           const double *dy, double *dq, double *dk, double *dv);
/* The same, and the bias terms' drel_h (B,H,Tq,Kh) and drel_w (B,H,Tq,Kw) (each may be NULL). */
void tr_ref_attention_rel_grad(const struct tr_ref_attn *c, const double *q, const double *k, const double *v,
                               const double *dy, double *dq, double *dk, double *dv, double *drel_h, double *drel_w);

/* ---- the graph evaluator (ref_graph.c) ---- */

/* Node id's value into v[id] (allocated afresh) from its inputs' values in v: INPUT and
 * PARAM from leaf[id], or a PARAM's bound data where leaf[id] is NULL; CONST from its
 * data; every other op by its oracle above. Fails the test on an op it has no rule for. */
void tr_ref_graph_eval_node(const struct tr_graph *g, int id, double *const *leaf, double **v);
/* Nodes 0..last in order. */
void tr_ref_graph_eval_upto(const struct tr_graph *g, int last, double *const *leaf, double **v);
/* Every node's value with the graph's inputs fed `in` in input order (free with
 * tr_ref_graph_free). */
double **tr_ref_graph_run(const struct tr_graph *g, const struct tr_tensor *in);
void tr_ref_graph_free(const struct tr_graph *g, double **v);

/* ---- finite differences (ref_fd.c) ---- */

/* grad[i] = (f(x + h·e_i) − f(x − h·e_i)) / 2h; x is perturbed in place and restored. */
void tr_ref_fd_grad(double (*f)(void *ctx), void *ctx, double *x, int64_t n, double h, double *grad);
/* ‖a − b‖ / ‖b‖, or ‖a − b‖ where b is all zeros (so a zero gradient is checked too). */
double tr_ref_rel_err(const double *a, const double *b, int64_t n);
/* Fails the test unless rel_err(got, fd) < tol. */
void tr_ref_check_fd(const char *what, const double *got, const double *fd, int64_t n, double tol);

/* ---- gradients of graphs by finite differences (ref_gradcheck.c) ---- */

#define TR_REF_MAXN 2048 /* nodes of a checked graph */
#define TR_REF_FD_H 1e-6
#define TR_REF_FD_TOL 1e-6

/* SIGNED: ±[0.1, 1.1), never near relu's or max's kinks; POSITIVE: that + 0.4 in
 * absolute value; DISTINCT: well apart, so a max has no ties. */
enum tr_ref_fill { TR_REF_SIGNED, TR_REF_POSITIVE, TR_REF_DISTINCT };

/* An f64 graph whose leaves carry host values for the evaluator. */
struct tr_ref_gx {
    struct tr_graph *g;
    double *leaf[TR_REF_MAXN];
    double *v[TR_REF_MAXN];
    uint64_t rng; /* local, so the data does not move when other code changes */
};

struct tr_ref_gx *tr_ref_gx_new(void);
void tr_ref_gx_free(struct tr_ref_gx *t);
double tr_ref_gx_nzrand(struct tr_ref_gx *t);
/* An f64 PARAM filled as f says. */
int tr_ref_gx_param(struct tr_ref_gx *t, const char *name, enum tr_ref_fill f, int nd, const int64_t *sh);
/* An i64 INPUT holding vals (ids, labels, positions). */
int tr_ref_gx_ids(struct tr_ref_gx *t, const char *name, int nd, const int64_t *sh, const int64_t *vals);
/* loss = SUM(out · R), R a fixed random constant, reduced axis by axis to 0-d. */
int tr_ref_gx_loss(struct tr_ref_gx *t, int out);
/* Largest ‖analytic − numeric‖ / ‖numeric‖ over the wrt leaves, grads their gradients. */
double tr_ref_gx_grad_err(struct tr_ref_gx *t, int loss, int n_wrt, const int *wrt, const int *grads);
/* The graph's dump (tr_graph_dump) as a string, for the tests that look for a line in
 * it (caller frees). */
char *tr_ref_dump(const struct tr_graph *g);

/* A builder call that must have been refused (id -1) on g, with a message holding every
 * needle (NULL-terminated); what names the case in a failure. g is freed. */
void tr_test_expect_refused(const char *what, struct tr_graph *g, int id, const char *const *needles);
/* How many nodes from `from` on have op: what a rule emitted. */
int tr_ref_count_op(const struct tr_graph *g, int from, int op);
/* tr_grad (at most 16 wrt, each gradient named grad.<wrt>), then grad_err < TR_REF_FD_TOL. */
void tr_ref_gx_check(struct tr_ref_gx *t, const char *what, int loss, int n_wrt, const int *wrt);

#endif
