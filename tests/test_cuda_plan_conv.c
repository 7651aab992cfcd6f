/* The CUDA convolution's choices, no GPU needed (plugins/kernels/cuda/host/conv_plan.h):
 * TRIDENT_CUDA_CONV's values, which convolutions cuDNN takes, which of cuDNN's algorithms
 * runs, and the per-process counts a GPU test reads to see which path ran. */
#include <limits.h>
#include "testutil.h"
#include "../plugins/kernels/cuda/host/conv_plan.h"

static void test_mode_parse(void **state) {
    (void)state;
    struct tr_error err = {0};
    enum tr_cuda_conv_mode m = TR_CUDA_CONV_IM2COL;
    assert_int_equal(tr_cuda_conv_mode_parse(NULL, 0, &m, &err), TR_OK);
    assert_int_equal(m, TR_CUDA_CONV_AUTO);
    assert_int_equal(tr_cuda_conv_mode_parse("", 1, &m, &err), TR_OK);
    assert_int_equal(m, TR_CUDA_CONV_AUTO);
    assert_int_equal(tr_cuda_conv_mode_parse("im2col", 0, &m, &err), TR_OK);
    assert_int_equal(m, TR_CUDA_CONV_IM2COL);
    assert_int_equal(tr_cuda_conv_mode_parse("cudnn", 1, &m, &err), TR_OK);
    assert_int_equal(m, TR_CUDA_CONV_CUDNN);
    /* cudnn is a requirement: a library without it says so */
    assert_int_equal(tr_cuda_conv_mode_parse("cudnn", 0, &m, &err), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "built without cuDNN"));
    assert_int_equal(tr_cuda_conv_mode_parse("CuDNN", 1, &m, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "TRIDENT_CUDA_CONV=CuDNN is not a choice"));
    assert_non_null(strstr(err.msg, "im2col"));
}

static void test_use_cudnn(void **state) {
    (void)state;
    /* SD's UNet 3x3 at batch 26 and 64x64 */
    struct tr_cuda_conv_shape s = {.N = 26, .H = 64, .W = 64, .Ci = 320, .Co = 320, .KH = 3, .KW = 3, .OH = 64,
                                   .OW = 64, .s = 1, .p = 1, .pe = 0, .dil = 1};
    const char *why = "x";
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 1, &s, &why), 1);
    assert_null(why);
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_CUDNN, 1, &s, &why), 1);
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_IM2COL, 1, &s, &why), 0);
    assert_string_equal(why, "TRIDENT_CUDA_CONV=im2col");
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 0, &s, &why), 0);
    assert_string_equal(why, "built without cuDNN");
    /* the VAE's down-sampler: padding only at the end */
    struct tr_cuda_conv_shape d = s;
    d.p = 0, d.pe = 1, d.s = 2, d.OH = d.OW = 32;
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_CUDNN, 1, &d, &why), 0);
    assert_non_null(strstr(why, "padding"));
    /* a tensor past an int's elements: x, y or the filter */
    struct tr_cuda_conv_shape big = s;
    big.N = INT_MAX / (64 * 64 * 320) + 1;
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 1, &big, &why), 0);
    assert_non_null(strstr(why, "2^31"));
    big = s, big.Co = 8, big.OH = big.OW = 1024 * 16, big.N = 1; /* y alone */
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 1, &big, &why), 0);
    big = s, big.N = 1, big.KH = big.KW = 1024; /* the filter alone (320·320·2^20) */
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 1, &big, &why), 0);
    big = s, big.N = INT_MAX / (64 * 64 * 320); /* just under */
    assert_int_equal(tr_cuda_conv_use_cudnn(TR_CUDA_CONV_AUTO, 1, &big, &why), 1);
}

static void test_pick(void **state) {
    (void)state;
    const size_t cap = 1000;
    /* as cuDNN's heuristic lists them, best first */
    const struct tr_cuda_conv_algo a[] = {
        {.runs = 1, .deterministic = 0, .tensor_math = 1, .workspace = 0},  /* fastest, atomics, TF32 */
        {.runs = 0, .deterministic = 1, .tensor_math = 0, .workspace = 0},  /* not supported here */
        {.runs = 1, .deterministic = 1, .tensor_math = 1, .workspace = 5000}, /* over the cap */
        {.runs = 1, .deterministic = 1, .tensor_math = 1, .workspace = 64},
        {.runs = 1, .deterministic = 1, .tensor_math = 0, .workspace = 128},
    };
    assert_int_equal(tr_cuda_conv_pick(a, 5, 0, cap), 3);      /* the first deterministic one that fits */
    assert_int_equal(tr_cuda_conv_pick(a, 5, 1, cap), 4);      /* strict f32: no tensor-core math */
    assert_int_equal(tr_cuda_conv_pick(a, 5, 0, 10000), 2);    /* a larger cap takes the big workspace */
    assert_int_equal(tr_cuda_conv_pick(a, 1, 0, cap), 0);      /* none deterministic: the first that runs */
    assert_int_equal(tr_cuda_conv_pick(a, 1, 1, cap), -1);     /* ... unless it is TF32 under strict f32 */
    assert_int_equal(tr_cuda_conv_pick(a + 1, 1, 0, cap), -1); /* nothing runs */
    assert_int_equal(tr_cuda_conv_pick(a, 0, 0, cap), -1);
}

static void test_force_and_counts(void **state) {
    (void)state;
    const enum tr_cuda_conv_mode was = tr_cuda_conv_force(TR_CUDA_CONV_IM2COL);
    assert_int_equal(tr_cuda_conv_mode_get(), TR_CUDA_CONV_IM2COL);
    assert_int_equal(tr_cuda_conv_force(was), TR_CUDA_CONV_IM2COL);
    assert_int_equal(tr_cuda_conv_mode_get(), was);
    struct tr_cuda_conv_route_counts c0, c1;
    tr_cuda_conv_route_counts(&c0);
    tr_cuda_conv_route_note(1);
    tr_cuda_conv_route_note(0);
    tr_cuda_conv_route_note(0);
    tr_cuda_conv_route_counts(&c1);
    assert_int_equal(c1.cudnn, c0.cudnn + 1);
    assert_int_equal(c1.im2col, c0.im2col + 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode_parse),
        cmocka_unit_test(test_use_cudnn),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_force_and_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
