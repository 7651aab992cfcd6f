/* Where the library was built without nvcc: the cuda side's entry points, each answering
 * that there is no CUDA device, so that `device = cuda` fails with one clear message. */
#ifndef TR_HAVE_CUDA
#include <stdlib.h>
#include "../../cpu/cpu_internal.h"
#include "cuda_entry.h"
#include "trident/kernels_cuda.h"

static const char no_cuda[] = "no CUDA device found (built without CUDA: nvcc was not found, or TRIDENT_CUDA=OFF)";

int tr_kernels_cuda_built(void) { return 0; }

int tr_cuda_available(int device_index, struct tr_error *err) {
    (void)device_index;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_describe(int device_index, char *buf, size_t n, struct tr_error *err) {
    (void)buf, (void)n;
    return tr_cuda_available(device_index, err);
}

int tr_cuda_ctx_init(struct tr_kernels *k, int device_index, struct tr_error *err) {
    (void)k;
    return tr_cuda_available(device_index, err);
}

void tr_cuda_ctx_free(struct tr_kernels *k) { (void)k; }

int tr_cuda_alloc(struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err) {
    (void)k, (void)nbytes, (void)p;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

void tr_cuda_dealloc(struct tr_kernels *k, void *p) { (void)k, (void)p; }

int tr_cuda_copy(struct tr_kernels *k, void *dst, const void *src, size_t n, int kind, struct tr_error *err) {
    (void)k, (void)dst, (void)src, (void)n, (void)kind;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_sync(struct tr_kernels *k, struct tr_error *err) {
    (void)k;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_run(struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in, const struct tr_tensor *in,
                struct tr_tensor *out, struct tr_error *err) {
    (void)k, (void)op, (void)attrs, (void)n_in, (void)in, (void)out;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_matmul(struct tr_kernels *k, const struct tr_tensor *a, const struct tr_tensor *b, struct tr_tensor *c,
                   int trans_a, int trans_b, float alpha, const struct tr_tensor *bias, enum tr_act act,
                   struct tr_error *err) {
    (void)k, (void)a, (void)b, (void)c, (void)trans_a, (void)trans_b, (void)alpha, (void)bias, (void)act;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_bias_residual_layer_norm(struct tr_kernels *k, const struct tr_tensor *x, const struct tr_tensor *bias,
                                     const struct tr_tensor *residual, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err) {
    (void)k, (void)x, (void)bias, (void)residual, (void)gamma, (void)beta, (void)eps, (void)out;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_scale_mask_softmax(struct tr_kernels *k, const struct tr_tensor *x, float scale,
                               const struct tr_tensor *mask, struct tr_tensor *out, struct tr_error *err) {
    (void)k, (void)x, (void)scale, (void)mask, (void)out;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_embedding_sum_layer_norm(struct tr_kernels *k, int n, const struct tr_tensor *tables,
                                     const struct tr_tensor *ids, const struct tr_tensor *gamma,
                                     const struct tr_tensor *beta, float eps, struct tr_tensor *out,
                                     struct tr_error *err) {
    (void)k, (void)n, (void)tables, (void)ids, (void)gamma, (void)beta, (void)eps, (void)out;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_random(struct tr_kernels *k, int dist, uint64_t seed, float a, float b, struct tr_tensor *out,
                   struct tr_error *err) {
    (void)k, (void)dist, (void)seed, (void)a, (void)b, (void)out;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_bind_matmul(struct tr_kernels *k, struct tr_kernel_call *c, const struct tr_tensor *bias, enum tr_act act,
                        struct tr_error *err) {
    (void)k, (void)c, (void)bias, (void)act;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_set_dry(struct tr_kernels *k, int on) {
    (void)k, (void)on;
    return 0;
}

int tr_kernels_cuda_memory(const struct tr_kernels *k, struct tr_cuda_pool_stats *st, struct tr_error *err) {
    (void)k;
    if (st) memset(st, 0, sizeof *st);
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

void *tr_kernels_cuda_stream(const struct tr_kernels *k) {
    (void)k;
    return NULL;
}

int tr_cuda_nvrtc_compile(const char *src, const char *name, int sm, void **cubin, size_t *size, char **log,
                          struct tr_error *err) {
    (void)src, (void)name, (void)sm;
    if (cubin) *cubin = NULL;
    if (size) *size = 0;
    if (log) *log = NULL;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "NVRTC: built without CUDA (nvcc was not found, or TRIDENT_CUDA=OFF)");
}
#else
typedef int tr_nocuda_unused; /* ISO C wants a translation unit to declare something */
#endif
