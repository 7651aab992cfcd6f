/* CUDA C compiled at run time with NVRTC to a cubin for one architecture: what the jax
 * backend's code generator uses. Needs no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <nvrtc.h>
#include "cuda_internal.h"
#include "trident/kernels_cuda.h"

static int nvrtc_status(nvrtcResult r, const char *what, const char *name, struct tr_error *err) {
    if (r == NVRTC_SUCCESS) return TR_OK;
    return tr_error_set(err, TR_ERR_DEVICE, "NVRTC: %s of %s failed: %s", what, name, nvrtcGetErrorString(r));
}

int tr_cuda_nvrtc_compile(const char *src, const char *name, int sm, void **cubin, size_t *size, char **log,
                          struct tr_error *err) {
    if (cubin) *cubin = NULL;
    if (size) *size = 0;
    if (log) *log = NULL;
    if (!src || !cubin || !size)
        return tr_error_set(err, TR_ERR_INVALID, "NVRTC: source, cubin and size pointers are needed");
    if (!name) name = "kernel.cu";
    if (sm < 50 || sm > 200) return tr_error_set(err, TR_ERR_INVALID, "NVRTC: architecture sm_%d is not one", sm);
    nvrtcProgram prog;
    int rc = nvrtc_status(nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL), "nvrtcCreateProgram", name, err);
    if (rc) return rc;
    char arch[40];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", sm);
    const char *opts[] = {arch, "--std=c++17", "--use_fast_math"};
    nvrtcResult cr = nvrtcCompileProgram(prog, 3, opts);
    size_t log_n = 0;
    char *lg = NULL;
    if (nvrtcGetProgramLogSize(prog, &log_n) == NVRTC_SUCCESS && log_n > 1 && (lg = malloc(log_n)) != NULL &&
        nvrtcGetProgramLog(prog, lg) != NVRTC_SUCCESS) {
        free(lg);
        lg = NULL;
    }
    if (cr != NVRTC_SUCCESS) {
        rc = tr_error_set(err, TR_ERR_INVALID, "NVRTC: %s does not compile for sm_%d (%s): %.700s", name, sm,
                          nvrtcGetErrorString(cr), lg ? lg : "(no log)");
    } else {
        size_t n = 0;
        rc = nvrtc_status(nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize", name, err);
        void *bin = rc ? NULL : malloc(n ? n : 1);
        if (!rc && !bin) rc = tr_error_set(err, TR_ERR_NOMEM, "NVRTC: no memory for a cubin of %zu bytes", n);
        if (!rc) rc = nvrtc_status(nvrtcGetCUBIN(prog, bin), "nvrtcGetCUBIN", name, err);
        if (rc) {
            free(bin);
        } else {
            *cubin = bin;
            *size = n;
        }
    }
    nvrtcDestroyProgram(&prog);
    if (log)
        *log = lg;
    else
        free(lg);
    return rc;
}
