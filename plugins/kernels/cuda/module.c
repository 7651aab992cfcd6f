/* Cubins loaded into a cuda context's device and their kernels launched on the
 * context's stream (kernels_cuda.h): what runs the jax backend's NVRTC-compiled code.
 *
 * The driver API (cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel) is reached
 * through the runtime's cudaGetDriverEntryPointByVersion rather than by linking
 * libcuda: the runtime opens the driver itself, so the library still loads on a machine
 * with no driver (CI, the development machine) and answers "no CUDA device found" there
 * instead of failing to load. Modules live in the device's primary context, the one the
 * runtime (and so every other kernel of the context) uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>
#include "../cpu/cpu_internal.h"
#include "cuda_internal.h"
#include "trident/kernels_cuda.h"

#define TR_CU_DRIVER_API 12000 /* the driver ABI the entry points are asked for */

struct tr_cu_driver {
    int loaded;
    PFN_cuGetErrorName_v6000 get_error_name;
    PFN_cuGetErrorString_v6000 get_error_string;
    PFN_cuCtxGetCurrent_v4000 ctx_get_current;
    PFN_cuCtxSetCurrent_v4000 ctx_set_current;
    PFN_cuModuleLoadData_v2000 module_load_data;
    PFN_cuModuleUnload_v2000 module_unload;
    PFN_cuModuleGetFunction_v2000 module_get_function;
    PFN_cuLaunchKernel_v4000 launch_kernel;
};

static struct tr_cu_driver drv;

struct tr_cuda_module {
    CUmodule mod;
    CUcontext ctx;
    char name[96];
};

static int entry(const char *sym, void **fn, struct tr_error *err) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSuccess;
    cudaError_t e = cudaGetDriverEntryPointByVersion(sym, fn, TR_CU_DRIVER_API, cudaEnableDefault, &q);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return tr_error_set(err, TR_ERR_DEVICE, "cuda: the driver's %s cannot be found: %s: %s", sym,
                            cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (q != cudaDriverEntryPointSuccess || !*fn)
        return tr_error_set(err, TR_ERR_DEVICE, "cuda: the driver has no %s for CUDA %d.%d (query result %d)", sym,
                            TR_CU_DRIVER_API / 1000, TR_CU_DRIVER_API % 1000 / 10, (int)q);
    return TR_OK;
}

/* Resolved once; the first caller holds a device already (a context exists), so the
 * driver is there. Races between threads store the same pointers. */
static int driver(struct tr_error *err) {
    if (__atomic_load_n(&drv.loaded, __ATOMIC_ACQUIRE)) return TR_OK;
    struct tr_cu_driver d = {0};
    int rc = entry("cuGetErrorName", (void **)&d.get_error_name, err);
    if (!rc) rc = entry("cuGetErrorString", (void **)&d.get_error_string, err);
    if (!rc) rc = entry("cuCtxGetCurrent", (void **)&d.ctx_get_current, err);
    if (!rc) rc = entry("cuCtxSetCurrent", (void **)&d.ctx_set_current, err);
    if (!rc) rc = entry("cuModuleLoadData", (void **)&d.module_load_data, err);
    if (!rc) rc = entry("cuModuleUnload", (void **)&d.module_unload, err);
    if (!rc) rc = entry("cuModuleGetFunction", (void **)&d.module_get_function, err);
    if (!rc) rc = entry("cuLaunchKernel", (void **)&d.launch_kernel, err);
    if (rc) return rc;
    d.loaded = 1;
    drv = d;
    __atomic_store_n(&drv.loaded, 1, __ATOMIC_RELEASE);
    return TR_OK;
}

/* "<what> <subject>: CUDA_ERROR_X: message" unless r is CUDA_SUCCESS. */
static int cu_status(CUresult r, const char *what, const char *subject, struct tr_error *err) {
    if (r == CUDA_SUCCESS) return TR_OK;
    const char *name = NULL, *msg = NULL;
    if (drv.get_error_name) drv.get_error_name(r, &name);
    if (drv.get_error_string) drv.get_error_string(r, &msg);
    return tr_error_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? TR_ERR_NOMEM : TR_ERR_DEVICE, "cuda: %s %s: %s: %s", what,
                        subject, name ? name : "CUDA error", msg ? msg : "(no message)");
}

static int need_cuda(const struct tr_kernels *k, const char *what, struct tr_error *err) {
    if (!k || k->device_type != TR_DEVICE_CUDA || !k->cuda)
        return tr_error_set(err, TR_ERR_INVALID, "%s: the kernels context is not a cuda one", what);
    return TR_OK;
}

int tr_kernels_cuda_sm(const struct tr_kernels *k, int *sm, struct tr_error *err) {
    if (sm) *sm = 0;
    int rc = need_cuda(k, "tr_kernels_cuda_sm", err);
    if (rc) return rc;
    if (!sm) return tr_error_set(err, TR_ERR_INVALID, "tr_kernels_cuda_sm: sm is NULL");
    *sm = k->cuda->sm;
    return TR_OK;
}

int tr_cuda_nvrtc_version(int *major, int *minor, struct tr_error *err) {
    int a = 0, b = 0;
    nvrtcResult r = nvrtcVersion(&a, &b);
    if (major) *major = a;
    if (minor) *minor = b;
    if (r != NVRTC_SUCCESS)
        return tr_error_set(err, TR_ERR_DEVICE, "NVRTC: nvrtcVersion failed: %s", nvrtcGetErrorString(r));
    return TR_OK;
}

/* The module's context current on this thread (the runtime may have left another). */
static int make_current(CUcontext ctx, const char *subject, struct tr_error *err) {
    CUcontext cur = NULL;
    int rc = cu_status(drv.ctx_get_current(&cur), "cuCtxGetCurrent for", subject, err);
    if (!rc && cur != ctx) rc = cu_status(drv.ctx_set_current(ctx), "cuCtxSetCurrent for", subject, err);
    return rc;
}

int tr_cuda_module_load(struct tr_kernels *k, const void *cubin, size_t size, const char *name,
                        struct tr_cuda_module **out, struct tr_error *err) {
    if (out) *out = NULL;
    int rc = need_cuda(k, "tr_cuda_module_load", err);
    if (rc) return rc;
    if (!name) name = "(unnamed module)";
    if (!out || !cubin || size < 4)
        return tr_error_set(err, TR_ERR_INVALID, "tr_cuda_module_load %s: a cubin (%zu bytes) and out are needed", name,
                            size);
    if (memcmp(cubin, "\x7f" "ELF", 4) != 0)
        return tr_error_set(err, TR_ERR_INVALID, "tr_cuda_module_load %s: the image is not a cubin (no ELF header)",
                            name);
    if ((rc = driver(err)) != TR_OK) return rc;
    /* the runtime's primary context of the context's device becomes current */
    rc = TR_CU_CHECK(cudaSetDevice(k->cuda->device), "tr_cuda_module_load: cudaSetDevice", err);
    if (rc) return rc;
    struct tr_cuda_module *m = calloc(1, sizeof *m);
    if (!m) return tr_error_set(err, TR_ERR_NOMEM, "tr_cuda_module_load %s: out of host memory", name);
    snprintf(m->name, sizeof m->name, "%s", name);
    rc = cu_status(drv.ctx_get_current(&m->ctx), "cuCtxGetCurrent for module", name, err);
    if (!rc && !m->ctx) rc = tr_error_set(err, TR_ERR_DEVICE, "cuda: module %s: no current CUDA context", name);
    if (!rc) rc = cu_status(drv.module_load_data(&m->mod, cubin), "cuModuleLoadData of module", name, err);
    if (rc) {
        free(m);
        return rc;
    }
    *out = m;
    return TR_OK;
}

int tr_cuda_module_kernel(struct tr_cuda_module *m, const char *kernel, void **fn, struct tr_error *err) {
    if (fn) *fn = NULL;
    if (!m || !kernel || !fn) return tr_error_set(err, TR_ERR_INVALID, "tr_cuda_module_kernel: module, name and fn are needed");
    char subject[192];
    snprintf(subject, sizeof subject, "%s in module %s", kernel, m->name);
    CUfunction f = NULL;
    int rc = make_current(m->ctx, subject, err);
    if (!rc) rc = cu_status(drv.module_get_function(&f, m->mod, kernel), "cuModuleGetFunction of kernel", subject, err);
    if (!rc) *fn = f;
    return rc;
}

int tr_cuda_module_launch(struct tr_kernels *k, struct tr_cuda_module *m, void *fn, const char *kernel,
                          const unsigned grid[3], const unsigned block[3], unsigned shmem, void **params,
                          struct tr_error *err) {
    if (!kernel) kernel = "(unnamed kernel)";
    char what[160];
    snprintf(what, sizeof what, "tr_cuda_module_launch of kernel %s", kernel);
    int rc = need_cuda(k, what, err);
    if (rc) return rc;
    if (!m || !fn || !grid || !block)
        return tr_error_set(err, TR_ERR_INVALID, "tr_cuda_module_launch %s: module, function, grid and block are needed",
                            kernel);
    if ((rc = make_current(m->ctx, kernel, err)) != TR_OK) return rc;
    CUresult r = drv.launch_kernel((CUfunction)fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem,
                                   (CUstream)k->cuda->stream, params, NULL);
    if (r != CUDA_SUCCESS) {
        char subject[192];
        snprintf(subject, sizeof subject, "%s (grid %u,%u,%u block %u,%u,%u, %u bytes shared) of module %s", kernel,
                 grid[0], grid[1], grid[2], block[0], block[1], block[2], shmem, m->name);
        return cu_status(r, "cuLaunchKernel of kernel", subject, err);
    }
    return TR_OK;
}

void tr_cuda_module_free(struct tr_cuda_module *m) {
    if (!m) return;
    if (m->mod && drv.module_unload && make_current(m->ctx, m->name, NULL) == TR_OK) drv.module_unload(m->mod);
    free(m);
}
