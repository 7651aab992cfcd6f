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

/* Declares cuda_name with the type of kernels.h's k_name: the same arguments by
 * construction, so that the two cannot drift apart. */
#define TR_CUDA_LIKE(cuda_name, k_name) __typeof__(k_name) cuda_name

TR_CUDA_LIKE(tr_cuda_matmul, tr_k_matmul);
TR_CUDA_LIKE(tr_cuda_bias_residual_layer_norm, tr_k_bias_residual_layer_norm);
TR_CUDA_LIKE(tr_cuda_scale_mask_softmax, tr_k_scale_mask_softmax);
TR_CUDA_LIKE(tr_cuda_embedding_sum_layer_norm, tr_k_embedding_sum_layer_norm);

/* ---- every tr_k_* on a cuda context (route.c): same arguments, same contract ---- */
TR_CUDA_LIKE(tr_cuda_k_binary, tr_k_binary);
TR_CUDA_LIKE(tr_cuda_k_unary, tr_k_unary);
TR_CUDA_LIKE(tr_cuda_k_softmax, tr_k_softmax);
TR_CUDA_LIKE(tr_cuda_k_layer_norm, tr_k_layer_norm);
TR_CUDA_LIKE(tr_cuda_k_embedding, tr_k_embedding);
TR_CUDA_LIKE(tr_cuda_k_transpose, tr_k_transpose);
TR_CUDA_LIKE(tr_cuda_k_slice, tr_k_slice);
TR_CUDA_LIKE(tr_cuda_k_concat, tr_k_concat);
TR_CUDA_LIKE(tr_cuda_k_reduce, tr_k_reduce);
TR_CUDA_LIKE(tr_cuda_k_cast, tr_k_cast);
TR_CUDA_LIKE(tr_cuda_k_attention, tr_k_attention);
TR_CUDA_LIKE(tr_cuda_k_attention_lse, tr_k_attention_lse);
TR_CUDA_LIKE(tr_cuda_k_unary_grad, tr_k_unary_grad);
TR_CUDA_LIKE(tr_cuda_k_softmax_grad, tr_k_softmax_grad);
TR_CUDA_LIKE(tr_cuda_k_layer_norm_grad, tr_k_layer_norm_grad);
TR_CUDA_LIKE(tr_cuda_k_layer_norm_grad_gamma, tr_k_layer_norm_grad_gamma);
TR_CUDA_LIKE(tr_cuda_k_embedding_grad, tr_k_embedding_grad);
TR_CUDA_LIKE(tr_cuda_k_attention_grad, tr_k_attention_grad);
TR_CUDA_LIKE(tr_cuda_k_attention_backward, tr_k_attention_backward);
TR_CUDA_LIKE(tr_cuda_k_attention_rel_backward, tr_k_attention_rel_backward);
TR_CUDA_LIKE(tr_cuda_k_attention_rel_lse, tr_k_attention_rel_lse);
TR_CUDA_LIKE(tr_cuda_k_broadcast, tr_k_broadcast);
TR_CUDA_LIKE(tr_cuda_k_max_grad, tr_k_max_grad);
TR_CUDA_LIKE(tr_cuda_k_slice_grad, tr_k_slice_grad);
TR_CUDA_LIKE(tr_cuda_k_cross_entropy, tr_k_cross_entropy);
TR_CUDA_LIKE(tr_cuda_k_cross_entropy_grad, tr_k_cross_entropy_grad);
TR_CUDA_LIKE(tr_cuda_k_mse, tr_k_mse);
TR_CUDA_LIKE(tr_cuda_k_allreduce, tr_k_allreduce);
/* ALLREDUCE_START or ALLREDUCE_WAIT (op) */
int tr_cuda_k_allreduce_half(struct tr_kernels *k, int op, const struct tr_tensor *x, int64_t ranks, int64_t bucket,
                             float scale, struct tr_tensor *out, struct tr_error *err);
TR_CUDA_LIKE(tr_cuda_k_adamw_step, tr_k_adamw_step);
TR_CUDA_LIKE(tr_cuda_k_adamw_update, tr_k_adamw_update);
/* tr_k_adamw_update as tr_cuda_run takes it: in[0..5] param, m, v, grad, lr, step, in[6..7]
 * m_out, v_out; out param_out; floats[0..3] β1, β2, eps, weight decay. A private op code:
 * tr_kernels_run never passes a negative op. */
#define TR_CUDA_OP_ADAMW_UPDATE (-1930)
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
TR_CUDA_LIKE(tr_cuda_bind_bias_residual_layer_norm, tr_kernels_bind_bias_residual_layer_norm);
TR_CUDA_LIKE(tr_cuda_bind_scale_mask_softmax, tr_kernels_bind_scale_mask_softmax);
TR_CUDA_LIKE(tr_cuda_bind_embedding_sum_layer_norm, tr_kernels_bind_embedding_sum_layer_norm);
TR_CUDA_LIKE(tr_cuda_bind_attention_backward, tr_kernels_bind_attention_backward);
TR_CUDA_LIKE(tr_cuda_bind_adamw_update, tr_kernels_bind_adamw_update);
TR_CUDA_LIKE(tr_cuda_bind_attention_lse, tr_kernels_bind_attention_lse);
TR_CUDA_LIKE(tr_cuda_bind_attention_rel_lse, tr_kernels_bind_attention_rel_lse);
/* While on, the cuda run paths check and reserve but queue nothing (context.c). Returns
 * the previous setting. */
int tr_cuda_set_dry(struct tr_kernels *k, int on);

#ifdef __cplusplus
}
#endif
#endif
