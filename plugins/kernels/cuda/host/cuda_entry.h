/* The CUDA implementations of kernels.h's tr_k_* entry points that are not graph ops run
 * through tr_kernels_run: same arguments, same contract, on a cuda context. Plain C (no
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

#ifdef __cplusplus
}
#endif
#endif
