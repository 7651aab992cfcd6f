/* NVRTC compiles CUDA C to cubins for sm_80 and sm_90 with no GPU present: the path the
 * jax backend's generated kernels take. A compile error fails with the source and the
 * log. Where the library was built without CUDA, the test says it is skipped, by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/kernels_cuda.h"

/* A fused elementwise kernel of the kind the generator emits: bf16 in/out, f32 math. */
static const char fused_src[] =
    "struct bf16 { unsigned short x; };\n"
    "__device__ float ld(bf16 v) { return __uint_as_float((unsigned)v.x << 16); }\n"
    "__device__ bf16 st(float f) {\n"
    "    unsigned u = __float_as_uint(f);\n"
    "    u += 0x7fffu + ((u >> 16) & 1u);\n"
    "    bf16 r; r.x = (unsigned short)(u >> 16); return r;\n"
    "}\n"
    "extern \"C\" __global__ void fused_bias_gelu(const bf16 *x, const bf16 *bias, bf16 *y, long long n, long long c) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i >= n) return;\n"
    "    float v = ld(x[i]) + ld(bias[i % c]);\n"
    "    y[i] = st(0.5f * v * erfcf(-v * 0.70710678f));\n"
    "}\n";

/* Without NVRTC the test says why and is skipped through cmocka, so the summary counts it
 * as skipped rather than passed. */
static void skip_if_no_cuda(const char *name) {
    if (tr_kernels_cuda_built()) return;
    printf("SKIPPED: no CUDA device found (%s: built without CUDA, so no NVRTC)\n", name);
    skip();
}

static void compile_for(int sm) {
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    struct tr_error err = {0};
    int st = tr_cuda_nvrtc_compile(fused_src, "fused_bias_gelu.cu", sm, &cubin, &size, &log, &err);
    if (st) {
        fprintf(stderr, "--- source ---\n%s--- log ---\n%s\n", fused_src, log ? log : "(none)");
        free(log);
        fail_msg("sm_%d: %s", sm, err.msg);
    }
    free(log);
    assert_non_null(cubin);
    assert_true(size > 64);
    /* a cubin is an ELF file */
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    free(cubin);
}

static void test_nvrtc_sm80(void **state) {
    (void)state;
    skip_if_no_cuda("test_nvrtc_sm80");
    compile_for(80);
}

static void test_nvrtc_sm90(void **state) {
    (void)state;
    skip_if_no_cuda("test_nvrtc_sm90");
    compile_for(90);
}

/* A broken source fails with the log in the message, naming the file. */
static void test_nvrtc_error(void **state) {
    (void)state;
    skip_if_no_cuda("test_nvrtc_error");
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    struct tr_error err = {0};
    int st = tr_cuda_nvrtc_compile("__global__ void k(float *x) { x[0] = undefined_name; }\n", "broken.cu", 90, &cubin,
                                   &size, &log, &err);
    assert_int_equal(st, TR_ERR_INVALID);
    assert_null(cubin);
    assert_non_null(log);
    assert_non_null(strstr(err.msg, "broken.cu"));
    assert_non_null(strstr(err.msg, "undefined_name"));
    free(log);
    assert_int_equal(tr_cuda_nvrtc_compile(fused_src, "x.cu", 7, &cubin, &size, NULL, &err), TR_ERR_INVALID);
}

TR_TEST_MAIN(NULL, NULL, test_nvrtc_sm80, test_nvrtc_sm90, test_nvrtc_error)
