/* The CUDA implementations of kernels.h's tr_k_* entry points and bound calls: same
 * arguments, same contract, on a cuda context. Plain C (no
 * CUDA headers), so that the cpu side can route to them (`if (k->device_type ==
 * TR_DEVICE_CUDA) return tr_cuda_...`) and tests can reach them; where the library was
 * built without CUDA, cuda/host/nocuda.c answers each with "no CUDA device found". */
#ifndef TRIDENT_CUDA_ENTRY_H
#define TRIDENT_CUDA_ENTRY_H

#include "trident/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

int tr_cuda_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b, struct tr_tensor *c,
                   int trans_a, int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act,
                   struct tr_error *err);
int tr_cuda_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                     const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err);
int tr_cuda_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                               const struct tr_tensor *mask, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                     const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err);

/* ---- every tr_k_* on a cuda context (route.c): same arguments, same contract ---- */
int tr_cuda_k_binary(struct tr_kernels *k, int op, const struct tr_tensor *a, const struct tr_tensor *b,
                     struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_unary(struct tr_kernels *k, int op, const struct tr_attrs *attrs, const struct tr_tensor *x,
                    struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_softmax(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                         const struct tr_tensor *beta, float eps, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_embedding(struct tr_kernels *k, const struct tr_tensor *table, const struct tr_tensor *ids,
                        struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_transpose(struct tr_kernels *k, const struct tr_tensor *x, const int64_t *perm, struct tr_tensor *out,
                        struct tr_error *err);
int tr_cuda_k_slice(struct tr_kernels *k, const struct tr_tensor *x, int axis, int64_t start, int64_t step,
                    struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_concat(struct tr_kernels *k, int n, const struct tr_tensor *xs, int axis, struct tr_tensor *out,
                     struct tr_error *err);
int tr_cuda_k_reduce(struct tr_kernels *k, int op, const struct tr_tensor *x, int axis, struct tr_tensor *out,
                     struct tr_error *err);
int tr_cuda_k_cast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_attention(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                        const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal, int window,
                        struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                            const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                            int window, struct tr_tensor *out, struct tr_tensor *lse, struct tr_error *err);
int tr_cuda_k_unary_grad(struct tr_kernels *k, int op, int approximate, float alpha, const struct tr_tensor *x,
                         const struct tr_tensor *dy, struct tr_tensor *dx, struct tr_error *err);
int tr_cuda_k_softmax_grad(struct tr_kernels *k, const struct tr_tensor *y, const struct tr_tensor *dy,
                           struct tr_tensor *dx, struct tr_error *err);
int tr_cuda_k_layer_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *gamma,
                              const struct tr_tensor *dy, float eps, struct tr_tensor *dx, struct tr_error *err);
int tr_cuda_k_layer_norm_grad_gamma(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy,
                                    float eps, struct tr_tensor *dgamma, struct tr_error *err);
int tr_cuda_k_embedding_grad(struct tr_kernels *k, const struct tr_tensor *ids, const struct tr_tensor *dy,
                             struct tr_tensor *dtable, struct tr_error *err);
int tr_cuda_k_attention_grad(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                             const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                             float scale, int causal, int window, int which, struct tr_tensor *out,
                             struct tr_error *err);
int tr_cuda_k_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                 const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                                 const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                                 int window, struct tr_tensor *dq, struct tr_tensor *dk, struct tr_tensor *dv,
                                 struct tr_error *err);
int tr_cuda_k_broadcast(struct tr_kernels *k, const struct tr_tensor *x, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_max_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, int axis,
                       int keepdims, struct tr_tensor *dx, struct tr_error *err);
int tr_cuda_k_slice_grad(struct tr_kernels *k, const struct tr_tensor *dy, int axis, int64_t start, int64_t step,
                         struct tr_tensor *dx, struct tr_error *err);
int tr_cuda_k_cross_entropy(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                            int has_ignore, int64_t ignore_index, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_cross_entropy_grad(struct tr_kernels *k, const struct tr_tensor *logits, const struct tr_tensor *labels,
                                 int has_ignore, int64_t ignore_index, const struct tr_tensor *dloss,
                                 struct tr_tensor *dlogits, struct tr_error *err);
int tr_cuda_k_mse(struct tr_kernels *k, const struct tr_tensor *pred, const struct tr_tensor *target,
                  struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_allreduce(struct tr_kernels *k, const struct tr_tensor *x, int64_t ranks, int64_t bucket, float scale,
                        struct tr_tensor *out, struct tr_error *err);
/* ALLREDUCE_START or ALLREDUCE_WAIT (op) */
int tr_cuda_k_allreduce_half(struct tr_kernels *k, int op, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                             float scale, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_adamw_step(struct tr_kernels *k, const struct tr_tensor *param, const struct tr_tensor *m,
                         const struct tr_tensor *v, const struct tr_tensor *lr, const struct tr_tensor *step,
                         float beta1, float beta2, float eps, float weight_decay, struct tr_tensor *out,
                         struct tr_error *err);
int tr_cuda_k_rms_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w, float eps,
                       int add_one, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_k_rms_norm_grad(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *w,
                            const struct tr_tensor *dy, float eps, int add_one, struct tr_tensor *dx,
                            struct tr_error *err);
int tr_cuda_k_rms_norm_grad_w(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *dy, float eps,
                              struct tr_tensor *dw, struct tr_error *err);
int tr_cuda_k_rope(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *pos, float base,
                   int rot_dims, int inverse, struct tr_tensor *out, struct tr_error *err);
/* out filled from cuRAND's Philox generator on the context's stream (random.c); the
 * arguments checked by tr_k_random first. */
int tr_cuda_random(struct tr_kernels *k, int dist, uint64_t seed, float a, float b, struct tr_tensor *out,
                   struct tr_error *err);

/* ---- bound calls on a cuda context (route.c; the GEMM's in gemm.c) ----
 * Each takes the call as tr_kernels_bind* zeroed it (tr_cuda_bind_op: with op, in,
 * n_in, out and the resolved attrs filled, as the cpu binders get it). */
#define TR_CUDA_ESLN_MAX 8 /* tables of a cuda embedding_sum_layer_norm (fused.cu) */
int tr_cuda_bind_op(struct tr_kernels *k, struct tr_kernel_call *c, struct tr_error *err);
/* in[0] a, in[1] b, out c, attrs.ints[0..1] the transposes, floats[0] alpha */
int tr_cuda_bind_matmul(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                        struct tr_error *err);
int tr_cuda_bind_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                          const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                          const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                          struct tr_kernel_call *c, struct tr_error *err);
int tr_cuda_bind_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                                    const struct tr_tensor *mask, const struct tr_tensor *out, struct tr_kernel_call *c,
                                    struct tr_error *err);
int tr_cuda_bind_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                          const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                          const struct tr_tensor *beta, float eps, const struct tr_tensor *out,
                                          struct tr_kernel_call *c, struct tr_error *err);
int tr_cuda_bind_attention_backward(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                                    const struct tr_tensor *v, const struct tr_tensor *dy, const struct tr_tensor *mask,
                                    const struct tr_tensor *y, const struct tr_tensor *lse, float scale, int causal,
                                    int window, const struct tr_tensor *dq, const struct tr_tensor *dk,
                                    const struct tr_tensor *dv, struct tr_kernel_call *c, struct tr_error *err);
int tr_cuda_bind_attention_lse(struct tr_kernels *k, const struct tr_tensor *q, const struct tr_tensor *kk,
                               const struct tr_tensor *v, const struct tr_tensor *mask, float scale, int causal,
                               int window, const struct tr_tensor *out, const struct tr_tensor *lse,
                               struct tr_kernel_call *c, struct tr_error *err);
/* While on, the cuda run paths check and reserve but queue nothing (context.c). Returns
 * the previous setting. */
int tr_cuda_set_dry(struct tr_kernels *k, int on);

#ifdef __cplusplus
}
#endif
#endif
