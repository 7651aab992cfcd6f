/* The kernels context on a CUDA device: the stream, the cuBLASLt handle and workspace
 * for it, the GEMM plan cache, the caching allocator over cudaMalloc, copies, and the
 * error reporting every CUDA call goes through. */
#include <stdio.h>
#include <stdlib.h>
#include <cublasLt.h>
#include <curand.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "host/gemm_plan.h"
#include "trident/kernels_cuda.h"

#define TR_CUDA_WORKSPACE ((size_t)32 << 20) /* cuBLASLt's recommendation for Hopper */
#define TR_CUDA_GEMM_PLANS 512

int tr_kernels_cuda_built(void) { return 1; }

int tr_cu_status(cudaError_t e, const char *what, const char *file, int line, struct tr_error *err) {
    if (e == cudaSuccess) return TR_OK;
    const char *base = strrchr(file, '/');
    return tr_error_set(err, e == cudaErrorMemoryAllocation ? TR_ERR_NOMEM : TR_ERR_DEVICE, "%s: %s: %s (%s:%d)", what,
                        cudaGetErrorName(e), cudaGetErrorString(e), base ? base + 1 : file, line);
}

int tr_cuda_available(int device_index, struct tr_error *err) {
    /* the environment's choices first: a run that cannot be what it asked for stops here,
     * with or without a device */
    int rc = tr_cuda_conv_start(err);
    if (rc) return rc;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* the error is sticky for the thread otherwise */
        return tr_error_set(err, TR_ERR_DEVICE, "no CUDA device found (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                            cudaGetErrorString(e));
    }
    if (n == 0) return tr_error_set(err, TR_ERR_DEVICE, "no CUDA device found (the driver reports 0 devices)");
    if (device_index < 0 || device_index >= n)
        return tr_error_set(err, TR_ERR_DEVICE, "CUDA device index %d does not exist (%d device%s: 0 to %d)",
                            device_index, n, n == 1 ? "" : "s", n - 1);
    return TR_OK;
}

int tr_cuda_describe(int device_index, char *buf, size_t n, struct tr_error *err) {
    int rc = tr_cuda_available(device_index, err);
    struct cudaDeviceProp prop;
    if (!rc) rc = TR_CU_CHECK(cudaGetDeviceProperties(&prop, device_index), "cuda: cudaGetDeviceProperties", err);
    if (rc) return rc;
    int drv = 0, rt = 0;
    (void)cudaDriverGetVersion(&drv);
    (void)cudaRuntimeGetVersion(&rt);
    char conv[96];
    tr_cuda_conv_describe(conv, sizeof conv);
    snprintf(buf, n, "%s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d, %s", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, (double)prop.totalGlobalMem / 1073741824.0, drv / 1000,
             drv % 1000 / 10, rt / 1000, rt % 1000 / 10, conv);
    return TR_OK;
}

static int dev_malloc(void *ctx, size_t n, void **p) {
    (void)ctx;
    if (cudaMalloc(p, n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return 0;
}

static void dev_free(void *ctx, void *p) {
    (void)ctx;
    /* only a fault of earlier work fails it (reported by the next tr_kernels_sync) */
    (void)cudaFree(p);
}

void tr_cuda_ctx_free(struct tr_kernels *k) {
    struct tr_cuda_ctx *c = k->cuda;
    if (!c) return;
    if (c->stream) {
        /* the work still queued ends before its memory goes; a failure there has no caller
         * left to return to (the last tr_kernels_sync missed it), so it is said here */
        cudaError_t e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            fprintf(stderr, "trident: cuda device %d: work queued before the context was freed failed: %s: %s\n",
                    c->device, cudaGetErrorName(e), cudaGetErrorString(e));
        }
    }
    tr_cuda_nccl_free(c);
    tr_cuda_conv_free(c);
    tr_cuda_plan_cache_free(c->gemm_plans);
    if (c->curand) (void)curandDestroyGenerator((curandGenerator_t)c->curand);
    if (c->lt) (void)cublasLtDestroy((cublasLtHandle_t)c->lt);
    if (c->flag) (void)cudaFree(c->flag); /* after the sync above: nothing left to report */
    tr_cuda_pool_free(c->pool); /* workspace and scratch included */
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    free(c);
    k->cuda = NULL;
}

int tr_cuda_ctx_init(struct tr_kernels *k, int device_index, struct tr_error *err) {
    int rc = tr_cuda_available(device_index, err);
    if (rc) return rc;
    struct tr_cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return tr_error_set(err, TR_ERR_NOMEM, "cuda: no host memory for a context");
    k->cuda = c;
    c->device = device_index;
    struct cudaDeviceProp prop;
    rc = TR_CU_CHECK(cudaSetDevice(device_index), "cuda: cudaSetDevice", err);
    if (!rc) rc = TR_CU_CHECK(cudaGetDeviceProperties(&prop, device_index), "cuda: cudaGetDeviceProperties", err);
    if (!rc) {
        c->sm = prop.major * 10 + prop.minor;
        c->sms = prop.multiProcessorCount;
        rc = TR_CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cuda: cudaStreamCreate", err);
    }
    if (!rc) {
        struct tr_cuda_pool_device dev = {dev_malloc, dev_free, c};
        rc = tr_cuda_pool_init(&c->pool, &dev, err);
    }
    if (!rc) {
        cublasLtHandle_t h = NULL;
        cublasStatus_t bs = cublasLtCreate(&h);
        if (bs != CUBLAS_STATUS_SUCCESS)
            rc = tr_error_set(err, TR_ERR_DEVICE, "cuda: cublasLtCreate failed: %s", cublasLtGetStatusString(bs));
        c->lt = h;
    }
    if (!rc) rc = tr_cuda_pool_alloc(c->pool, TR_CUDA_WORKSPACE, c->stream, &c->workspace, err);
    if (!rc) c->workspace_size = TR_CUDA_WORKSPACE;
    if (!rc) rc = tr_cuda_plan_cache_init(&c->gemm_plans, TR_CUDA_GEMM_PLANS, tr_cuda_gemm_release, err);
    if (!rc) rc = TR_CU_CHECK(cudaMalloc((void **)&c->flag, 4 * sizeof(long long)), "cuda: cudaMalloc (error flag)", err);
    if (!rc)
        rc = TR_CU_CHECK(cudaMemsetAsync(c->flag, 0, 4 * sizeof(long long), c->stream), "cuda: cudaMemset (error flag)",
                         err);
    if (!rc) {
        /* made now, not on first use: creating one inside a captured region is not allowed */
        curandGenerator_t g = NULL;
        curandStatus_t rs = curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10);
        if (rs != CURAND_STATUS_SUCCESS)
            rc = tr_error_set(err, TR_ERR_DEVICE, "cuda: curandCreateGenerator failed (curand status %d)", (int)rs);
        c->curand = g;
    }
    if (rc) {
        tr_error_prefix(err, "cuda device %d", device_index);
        tr_cuda_ctx_free(k);
        return rc;
    }
    return TR_OK;
}

int tr_cuda_set_dry(struct tr_kernels *k, int on) {
    if (!k->cuda) return 0; /* a context without CUDA state refuses every run anyway */
    int was = k->cuda->dry;
    k->cuda->dry = on;
    return was;
}

int tr_cuda_alloc(struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err) {
    return tr_cuda_pool_alloc(k->cuda->pool, nbytes, k->cuda->stream, p, err);
}

void tr_cuda_dealloc(struct tr_kernels *k, void *p) {
    struct tr_error ignored;
    (void)tr_cuda_pool_dealloc(k->cuda->pool, p, &ignored);
}

int tr_cuda_scratch(struct tr_cuda_ctx *c, size_t n, void **p, struct tr_error *err) {
    if (n > c->scratch_size) {
        struct tr_error ignored;
        (void)tr_cuda_pool_dealloc(c->pool, c->scratch, &ignored);
        c->scratch = NULL;
        c->scratch_size = 0;
        int rc = tr_cuda_pool_alloc(c->pool, n, c->stream, &c->scratch, err);
        if (rc) return rc;
        c->scratch_size = n;
    }
    *p = c->scratch;
    return TR_OK;
}

int tr_cuda_copy(struct tr_kernels *k, void *dst, const void *src, size_t n, int kind, struct tr_error *err) {
    struct tr_cuda_ctx *c = k->cuda;
    static const enum cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                 cudaMemcpyDeviceToDevice};
    static const char *names[3] = {"tr_kernels_to_device: cudaMemcpyAsync", "tr_kernels_to_host: cudaMemcpyAsync",
                                   "tr_kernels_copy: cudaMemcpyAsync"};
    int rc = TR_CU_CHECK(cudaMemcpyAsync(dst, src, n, kinds[kind], c->stream), names[kind], err);
    /* the host reads dst as soon as the call returns */
    if (!rc && kind == 1) rc = tr_cuda_sync(k, err);
    return rc;
}

int tr_cuda_sync(struct tr_kernels *k, struct tr_error *err) {
    struct tr_cuda_ctx *c = k->cuda;
    int rc = TR_CU_CHECK(cudaStreamSynchronize(c->stream), "tr_kernels_sync: a kernel failed", err);
    if (rc) return rc;
    long long f[4];
    rc = TR_CU_CHECK(cudaMemcpy(f, c->flag, sizeof f, cudaMemcpyDeviceToHost), "tr_kernels_sync: reading the error flag",
                     err);
    if (rc || f[0] == TR_CU_FLAG_NONE) return rc;
    /* reported once: the flag cleared (a failure to clear it is the error then) */
    if ((rc = TR_CU_CHECK(cudaMemsetAsync(c->flag, 0, sizeof f, c->stream), "tr_kernels_sync: clearing the error flag",
                          err)) != TR_OK)
        return rc;
    switch (f[0]) {
    case TR_CU_FLAG_EMBEDDING_ID:
        return tr_error_set(err, TR_ERR_INVALID, "embedding: id %lld at position %lld is outside [0, %lld) (seen by the "
                            "cuda kernel; its row was zero-filled)", f[2], f[1], f[3]);
    case TR_CU_FLAG_LABEL:
        return tr_error_set(err, TR_ERR_INVALID, "cross_entropy: label %lld at row %lld is outside [0, %lld)", f[2], f[1],
                            f[3]);
    case TR_CU_FLAG_UPDATE_SLICE:
        return tr_error_set(err, TR_ERR_INVALID, "update_slice: start %lld with n %lld leaves an axis of extent %lld "
                            "(need 0 <= start <= %lld; seen by the cuda kernel, the slice was not written)", f[2], f[1],
                            f[3], f[3] - f[1]);
    case TR_CU_FLAG_STEP:
        return tr_error_set(err, TR_ERR_INVALID, "adamw_step: step %lld should be >= 1 (the update was not applied)",
                            f[2]);
    default: return tr_error_set(err, TR_ERR_INTERNAL, "cuda: unknown error flag %lld", f[0]);
    }
}

int tr_kernels_cuda_memory(const struct tr_kernels *k, struct tr_cuda_pool_stats *st, struct tr_error *err) {
    if (!k || !st || k->device_type != TR_DEVICE_CUDA || !k->cuda) {
        if (st) memset(st, 0, sizeof *st);
        return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_cuda_memory: not a cuda context");
    }
    tr_cuda_pool_get_stats(k->cuda->pool, st);
    return TR_OK;
}

void *tr_kernels_cuda_stream(const struct tr_kernels *k) {
    return k && k->device_type == TR_DEVICE_CUDA && k->cuda ? (void *)k->cuda->stream : NULL;
}
