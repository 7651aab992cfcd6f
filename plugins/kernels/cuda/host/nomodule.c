/* Where the library was built without nvcc: the module entry points of module.c, each
 * answering as the other stand-ins do (nocuda.c), so that the jax backend links and says
 * why it cannot run on cuda. */
#ifndef TR_HAVE_CUDA
#include <stddef.h>
#include "trident/kernels_cuda.h"

static const char no_cuda[] = "no CUDA device found (built without CUDA: nvcc was not found, or TRIDENT_CUDA=OFF)";

int tr_kernels_cuda_sm(const struct tr_kernels *k, int *sm, struct tr_error *err) {
    (void)k;
    if (sm) *sm = 0;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_nvrtc_version(int *major, int *minor, struct tr_error *err) {
    if (major) *major = 0;
    if (minor) *minor = 0;
    return tr_error_set(err, TR_ERR_UNSUPPORTED, "NVRTC: built without CUDA (nvcc was not found, or TRIDENT_CUDA=OFF)");
}

int tr_cuda_module_load(struct tr_kernels *k, const void *cubin, size_t size, const char *name,
                        struct tr_cuda_module **out, struct tr_error *err) {
    (void)k, (void)cubin, (void)size, (void)name;
    if (out) *out = NULL;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_module_kernel(struct tr_cuda_module *m, const char *kernel, void **fn, struct tr_error *err) {
    (void)m, (void)kernel;
    if (fn) *fn = NULL;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

int tr_cuda_module_launch(struct tr_kernels *k, struct tr_cuda_module *m, void *fn, const char *kernel,
                          const unsigned grid[3], const unsigned block[3], unsigned shmem, void **params,
                          struct tr_error *err) {
    (void)k, (void)m, (void)fn, (void)kernel, (void)grid, (void)block, (void)shmem, (void)params;
    return tr_error_set(err, TR_ERR_DEVICE, "%s", no_cuda);
}

void tr_cuda_module_free(struct tr_cuda_module *m) { (void)m; }
#else
typedef int tr_nomodule_unused; /* ISO C wants a translation unit to declare something */
#endif
