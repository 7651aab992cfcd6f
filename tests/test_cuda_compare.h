/* What test_cuda_kernels.c and test_cuda_vision.c share: an op run on the cpu and on cuda
 * with the same inputs and attributes and compared, then bound on cuda and called twice;
 * whether the "device" is cuemu's; each test's fresh start. Static inline: a program that
 * leaves one out is not warned. */
#ifndef TRIDENT_TEST_CUDA_COMPARE_H
#define TRIDENT_TEST_CUDA_COMPARE_H

#include "test_cuda_common.h"
#include "../plugins/kernels/cuda/host/conv_plan.h"
#include "../plugins/kernels/cuda/host/gemm_plan.h"

/* Runs op on the cpu and on cuda with the same inputs and attributes and compares; then
 * binds it on cuda and calls it twice (a replay gives the same result) and compares. */
/* check_out with tolerance tol (0: the dtype's, test_cuda_common.h) */
static inline void check_out_tol(const char *what, const char *how, const struct tr_tensor *got, const struct tr_tensor *ref,
                          double tol) {
    if (tol <= 0.0 || !tr_dtype_is_float((enum tr_dtype)ref->dtype)) {
        check_out(what, how, got, ref);
        return;
    }
    double *r = tr_test_to_f64(ref);
    double e = tr_test_rel_err(got, r);
    free(r);
    if (!(e < tol))
        fail_msg("%s (%s, %s): cuda vs cpu relative error %.3g >= %.3g", what,
                 tr_dtype_name((enum tr_dtype)ref->dtype), how, e, tol);
}

static inline void compare_op_tol(const char *what, int op, const struct tr_attrs *at, int n_in, struct tr_tensor *in,
                           enum tr_dtype out_dt, int out_ndim, const int64_t *out_shape, double tol);

static inline void compare_op(const char *what, int op, const struct tr_attrs *at, int n_in, struct tr_tensor *in,
                       enum tr_dtype out_dt, int out_ndim, const int64_t *out_shape) {
    compare_op_tol(what, op, at, n_in, in, out_dt, out_ndim, out_shape, 0.0);
}

/* compare_op with tolerance tol (0: the dtype's) */
static inline void compare_op_tol(const char *what, int op, const struct tr_attrs *at, int n_in, struct tr_tensor *in,
                           enum tr_dtype out_dt, int out_ndim, const int64_t *out_shape, double tol) {
    struct tr_tensor ref = tr_test_tensor(out_dt, out_ndim, out_shape);
    tr_test_poison(&ref);
    if (tr_kernels_run(tr_test_k, op, at, n_in, in, &ref, &err)) fail_msg("%s: cpu: %s", what, err.msg);
    struct tr_tensor din[8];
    for (int i = 0; i < n_in; i++) din[i] = to_dev(&in[i]);
    struct tr_tensor got = tr_test_tensor(out_dt, out_ndim, out_shape);
    tr_test_poison(&got);
    struct tr_tensor dout = to_dev(&got);
    if (tr_kernels_run(G, op, at, n_in, din, &dout, &err)) fail_msg("%s: cuda: %s", what, err.msg);
    fetch(&got, &dout);
    check_out_tol(what, "tr_kernels_run", &got, &ref, tol);
    if (n_in <= TR_KERNEL_CALL_MAX_IN) {
        poison_dev(&got, &dout);
        struct tr_kernel_call call;
        struct tr_kernels_stats before, after;
        tr_kernels_get_stats(G, &before);
        if (tr_kernels_bind(G, op, at, n_in, din, &dout, &call, &err)) fail_msg("%s: cuda bind: %s", what, err.msg);
        tr_kernels_get_stats(G, &after);
        assert_int_equal(before.calls, after.calls); /* binding is not a call */
        fetch(&got, &dout);
        /* the dry check at bind queued nothing: the output is still poisoned */
        if (tr_tensor_numel(&got) > 0 && tr_dtype_is_float(out_dt) && !isnan(tr_tensor_get_f64(&got, 0)))
            fail_msg("%s: bind wrote the output", what);
        for (int rep = 0; rep < 2; rep++)
            if (tr_kernels_call(G, &call, &err)) fail_msg("%s: cuda bound call: %s", what, err.msg);
        fetch(&got, &dout);
        check_out_tol(what, "bound", &got, &ref, tol);
        tr_kernels_unbind(G, &call);
    }
    for (int i = 0; i < n_in; i++) tr_kernels_dealloc(G, din[i].data);
    tr_kernels_dealloc(G, dout.data);
    tr_test_tensor_free(&ref);
    tr_test_tensor_free(&got);
}

/* The "device" is tests/cuemu's (the CUDA side on the cpu), by the name it gives. */
static inline int on_cuemu(void) {
    char gpu[256] = "";
    struct tr_error de = {0};
    return !cpu_stand_in && tr_kernels_device_describe(TR_DEVICE_CUDA, 0, gpu, sizeof gpu, &de) == TR_OK &&
           strncmp(gpu, "cuemu", 5) == 0;
}

/* Each test starts from the context's defaults, whatever a test that failed partway left:
 * the math mode, the attention kernel's override, the GEMM fallback switch (else one
 * failure shows again as TF32-sized errors in the f32 tests after it). */
static inline int reset_state(void **state) {
    (void)state;
    unsetenv("TRIDENT_CUDA_ATTENTION");
    tr_cuda_gemm_force_fallback(0);
    tr_cuda_conv_force(TR_CUDA_CONV_AUTO);
    return G && tr_kernels_set_math(G, TR_MATH_DEFAULT, &err) != TR_OK ? -1 : 0;
}
#define TEST(f) cmocka_unit_test_setup(f, reset_state)

#endif
