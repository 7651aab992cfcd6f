/* What the cuda ops' launchers share (dispatch.c, attention_run.c): the cpu kernels'
 * argument checks on the cuda device, and the attention launchers tr_cuda_run calls.
 * Internal to the kernel library. */
#ifndef TRIDENT_CUDA_RUN_COMMON_H
#define TRIDENT_CUDA_RUN_COMMON_H

#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"

/* The cpu kernels' checks (context.c), on the cuda device. */
static inline int check_tensor(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err) {
    return tr_cpu_check_tensor_on(t, TR_DEVICE_CUDA, kname, what, err);
}

static inline int is_float(int dt) { return dt == TR_DTYPE_F32 || dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16; }

static inline int check_float(const struct tr_tensor *t, const char *kname, const char *what, struct tr_error *err) {
    return tr_cpu_check_float_on(t, TR_DEVICE_CUDA, kname, what, err);
}

static inline int same_dtype_shape(const struct tr_tensor *x, const struct tr_tensor *out, const char *kname,
                            struct tr_error *err) {
    return tr_cpu_check_like(kname, x, "x", out, "out", err);
}

static inline void contiguous_strides(int ndim, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

/* attention_run.c: ATTENTION (with lse: lse non-NULL; ATTENTION_LSE alone: out NULL), its
 * gradient and joint backward, and SAM's relative-position forms of the three */
int tr_cuda_run_attention(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                          const struct tr_tensor *in, struct tr_tensor *out, struct tr_tensor *lse,
                          struct tr_error *err);
int tr_cuda_run_attention_grad(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at,
                               int n_in, const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_run_attention_backward(struct tr_kernels *k, struct tr_cuda_ctx *c, const struct tr_attrs *at,
                                   int n_in, const struct tr_tensor *in, struct tr_error *err);
int tr_cuda_run_attention_rel(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                              const struct tr_tensor *in, struct tr_tensor *out, struct tr_tensor *lse,
                              struct tr_error *err);
int tr_cuda_run_attention_rel_grad(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                                   const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err);
int tr_cuda_run_attention_rel_backward(struct tr_cuda_ctx *c, const struct tr_attrs *at, int n_in,
                                       const struct tr_tensor *in, struct tr_error *err);

#endif
