/* Shared by the CUDA kernel tests (test_cuda_kernels.c, test_cuda_kernels_api.c): the
 * cuda context of the group (NULL without a device, and then every test that needs one
 * prints "SKIPPED: no CUDA device found (name)" and is skipped), device copies, and the
 * comparison of a cuda output with the cpu's (‖cuda − cpu‖/‖cpu‖ under tr_test_tol:
 * 1e-4 for f32, 1e-2 for bf16/f16; exact for integers). One program includes it once.
 *
 * With TRIDENT_TEST_CUDA_ON_CPU=1 (ctest's NAME@cpu-stand-in) G is a second cpu context
 * and the "device" copies are host memory: the tests' own logic (their shapes, their
 * references, what they compare and free) runs on a machine without a GPU, against the
 * cpu kernels; the tests of what only cuda does (its stream and pool, errors reported at
 * the next sync, TF32 math, cuBLASLt's routes) skip in that mode, by name. */
#ifndef TRIDENT_TEST_CUDA_COMMON_H
#define TRIDENT_TEST_CUDA_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

static struct tr_kernels *G;      /* the cuda context, NULL without a device */
static int cpu_stand_in;          /* TRIDENT_TEST_CUDA_ON_CPU: G is a cpu context */
static char no_device[TR_ERROR_MSG_MAX];

#define SKIP_WITHOUT_GPU()                                                              \
    do {                                                                                \
        if (!G) {                                                                       \
            printf("SKIPPED: no CUDA device found (%s)\n", __func__);                  \
            skip();                                                                     \
        }                                                                               \
    } while (0)

/* A test of cuda-only behaviour: skipped on the cpu stand-in. */
#define SKIP_ON_CPU_STAND_IN()                                                          \
    do {                                                                                \
        if (cpu_stand_in) {                                                             \
            printf("SKIPPED: cuda-only behaviour, not on the cpu stand-in (%s)\n", __func__); \
            skip();                                                                     \
        }                                                                               \
    } while (0)

#define CHECK_OK(x)                                                  \
    do {                                                             \
        if ((x) != TR_OK) fail_msg("%s: %s", #x, err.msg);           \
    } while (0)

static struct tr_error err;

static int cuda_setup(void **state) {
    if (tr_test_kernels_setup(state)) return -1;
    struct tr_error e = {0};
    const char *stand_in = getenv("TRIDENT_TEST_CUDA_ON_CPU");
    if (stand_in && strcmp(stand_in, "0") != 0) {
        cpu_stand_in = 1;
        printf("cuda: the cpu stand-in (TRIDENT_TEST_CUDA_ON_CPU): the tests' logic against the cpu kernels\n");
        return tr_kernels_init(&G, TR_DEVICE_CPU, 0, &e) != TR_OK;
    }
    if (tr_kernels_init(&G, TR_DEVICE_CUDA, 0, &e) != TR_OK) {
        G = NULL;
        snprintf(no_device, sizeof no_device, "%s", e.msg);
        printf("cuda: %s\n", no_device);
    }
    return 0;
}

static int cuda_teardown(void **state) {
    tr_kernels_free(G);
    return tr_test_kernels_teardown(state);
}

/* A device copy of a host tensor. */
static inline struct tr_tensor to_dev(const struct tr_tensor *h) {
    struct tr_tensor d = *h;
    size_t n = tr_tensor_nbytes(h);
    CHECK_OK(tr_kernels_alloc(G, n, &d.data, &err));
    CHECK_OK(tr_kernels_to_device(G, d.data, h->data, n, &err));
    d.device = cpu_stand_in ? TR_DEVICE_CPU : TR_DEVICE_CUDA;
    return d;
}

/* got (host copy of the cuda output) against ref (the cpu's). */
static inline void check_out(const char *what, const char *how, const struct tr_tensor *got,
                             const struct tr_tensor *ref) {
    enum tr_dtype dt = (enum tr_dtype)ref->dtype;
    if (tr_dtype_is_float(dt)) {
        double *r = tr_test_to_f64(ref);
        double e = tr_test_rel_err(got, r);
        free(r);
        if (!(e < tr_test_tol(dt)))
            fail_msg("%s (%s, %s): cuda vs cpu relative error %.3g >= %.3g", what, tr_dtype_name(dt), how, e,
                     tr_test_tol(dt));
    } else if (memcmp(got->data, ref->data, tr_tensor_nbytes(got)) != 0) {
        fail_msg("%s (%s, %s): cuda and cpu differ", what, tr_dtype_name(dt), how);
    }
}

/* The device output, after the queued work, copied to the host tensor got. */
static inline void fetch(struct tr_tensor *got, const struct tr_tensor *dout) {
    CHECK_OK(tr_kernels_sync(G, &err));
    CHECK_OK(tr_kernels_to_host(G, got->data, dout->data, tr_tensor_nbytes(got), &err));
}

/* The host tensor got poisoned (NaN), and the device output with it. */
static inline void poison_dev(struct tr_tensor *got, struct tr_tensor *dout) {
    tr_test_poison(got);
    CHECK_OK(tr_kernels_to_device(G, dout->data, got->data, tr_tensor_nbytes(got), &err));
}

static const enum tr_dtype FLOATS[3] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};

static inline struct tr_tensor randn(enum tr_dtype dt, int ndim, const int64_t *shape, uint64_t seed) {
    struct tr_tensor t = tr_test_tensor(dt, ndim, shape);
    tr_test_randn(&t, seed, 1.0);
    return t;
}

static inline void free_all(int n, struct tr_tensor *t) {
    for (int i = 0; i < n; i++) tr_test_tensor_free(&t[i]);
}

#endif
