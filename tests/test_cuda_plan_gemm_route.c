/* The cuBLASLt epilogue fallback's decision, no GPU needed (plugins/kernels/cuda/host/gemm_plan.h):
 * an algorithm found is used; none for an epilogue (bias, ReLU, GELU) asks again for the
 * plain GEMM, whose plan then runs the bias and activation in the elementwise kernel;
 * none for the plain GEMM is the error. The test switch that forces the fallback, and the
 * per-process counts a GPU test reads to see which route ran. */
#include "testutil.h"
#include "../plugins/kernels/cuda/host/gemm_plan.h"

static void test_route(void **state) {
    (void)state;
    assert_int_equal(tr_cuda_gemm_route(1, 1), TR_CUDA_GEMM_ROUTE_LT);
    assert_int_equal(tr_cuda_gemm_route(1, 0), TR_CUDA_GEMM_ROUTE_LT);
    assert_int_equal(tr_cuda_gemm_route(8, 1), TR_CUDA_GEMM_ROUTE_LT);
    assert_int_equal(tr_cuda_gemm_route(0, 1), TR_CUDA_GEMM_ROUTE_RETRY_PLAIN);
    assert_int_equal(tr_cuda_gemm_route(0, 0), TR_CUDA_GEMM_ROUTE_NONE);
    assert_int_equal(tr_cuda_gemm_route(-1, 0), TR_CUDA_GEMM_ROUTE_NONE);
}

/* make_plan's walk: the first answer for the descriptor asked, then (on RETRY_PLAIN) the
 * answer for the plain one; returns 1 for a fallback plan, 0 for cuBLASLt's epilogue,
 * -1 for the error. */
static int walk(int n_epilogue, int n_plain, int has_epilogue) {
    switch (tr_cuda_gemm_route(n_epilogue, has_epilogue)) {
    case TR_CUDA_GEMM_ROUTE_LT: return 0;
    case TR_CUDA_GEMM_ROUTE_RETRY_PLAIN: return tr_cuda_gemm_route(n_plain, 0) == TR_CUDA_GEMM_ROUTE_LT ? 1 : -1;
    default: return -1;
    }
}

static void test_walk_and_force(void **state) {
    (void)state;
    assert_int_equal(walk(1, 1, 1), 0);
    assert_int_equal(walk(0, 1, 1), 1);
    assert_int_equal(walk(0, 0, 1), -1);
    assert_int_equal(walk(0, 1, 0), -1);
    assert_int_equal(walk(1, 1, 0), 0);
    assert_int_equal(tr_cuda_gemm_force_fallback(1), 0);
    assert_int_equal(walk(1, 1, 1), 1);  /* forced: an epilogue falls back although one was found */
    assert_int_equal(walk(1, 0, 1), -1); /* and the plain GEMM still needs an algorithm */
    assert_int_equal(walk(1, 1, 0), 0);  /* no epilogue: nothing to fall back from */
    assert_int_equal(tr_cuda_gemm_force_fallback(0), 1);
    assert_int_equal(walk(1, 1, 1), 0);
}

static void test_counts(void **state) {
    (void)state;
    struct tr_cuda_gemm_route_counts a, b;
    tr_cuda_gemm_route_counts(&a);
    tr_cuda_gemm_route_note(0);
    tr_cuda_gemm_route_note(1);
    tr_cuda_gemm_route_note(1);
    tr_cuda_gemm_route_counts(&b);
    assert_int_equal(b.lt - a.lt, 1);
    assert_int_equal(b.fallback - a.fallback, 2);
}

TR_TEST_MAIN(NULL, NULL, test_route, test_walk_and_force, test_counts)
