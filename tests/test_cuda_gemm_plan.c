/* The CUDA GEMM's host-side logic, no GPU needed (plugins/kernels/cuda/host/gemm_plan.h):
 * row-major shapes mapped onto cuBLASLt's column-major strided batch, checked against a
 * plain column-major GEMM run on the host with exactly the operands, transposes, leading
 * dimensions and batch strides the mapping chose; plan keys; the LRU plan cache. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../plugins/kernels/cuda/host/gemm_plan.h"

static struct tr_tensor shape_only(int ndim, const int64_t *shape) {
    struct tr_tensor t;
    struct tr_error err = {0};
    if (tr_tensor_make(&t, NULL, TR_DTYPE_F32, ndim, shape, &err)) fail_msg("%s", err.msg);
    return t;
}

/* What cuBLASLt computes for the mapping: for each batch, D (rows N, cols M, ld ldc)
 * = op1(X1) · op2(X2), X1 the first operand (b) and X2 the second (a), column-major. */
static void colmajor_gemm(const struct tr_cuda_gemm_shape *s, const double *b, const double *a, double *c) {
    for (int64_t z = 0; z < s->batch; z++) {
        const double *x1 = b + z * s->stride1, *x2 = a + z * s->stride2;
        double *d = c + z * s->stridec;
        for (int64_t col = 0; col < s->M; col++)
            for (int64_t row = 0; row < s->N; row++) {
                double acc = 0;
                for (int64_t kk = 0; kk < s->K; kk++) {
                    /* op1(X1)[row, kk] and op2(X2)[kk, col] */
                    double v1 = s->op1_trans ? x1[kk + row * s->ld1] : x1[row + kk * s->ld1];
                    double v2 = s->op2_trans ? x2[col + kk * s->ld2] : x2[kk + col * s->ld2];
                    acc += v1 * v2;
                }
                d[row + col * s->ldc] = acc;
            }
    }
}

/* The row-major reference: c[z] = op(a[za]) · op(b[zb]) with numpy batch broadcasting. */
static void rowmajor_ref(const struct tr_tensor *A, const struct tr_tensor *B, const struct tr_tensor *C, int ta, int tb,
                         const double *a, const double *b, double *c) {
    int nc = C->ndim - 2;
    int64_t M = C->shape[nc], N = C->shape[nc + 1];
    int64_t K = A->shape[A->ndim - (ta ? 2 : 1)];
    int64_t batch = tr_tensor_numel(C) / (M * N);
    for (int64_t z = 0; z < batch; z++) {
        int64_t rem = z, za = 0, zb = 0, sa = 1, sb = 1;
        for (int i = nc - 1; i >= 0; i--) {
            int64_t q = rem % C->shape[i];
            rem /= C->shape[i];
            int ia = i - (nc - (A->ndim - 2)), ib = i - (nc - (B->ndim - 2));
            if (ia >= 0) {
                if (A->shape[ia] != 1) za += q * sa;
                sa *= A->shape[ia];
            }
            if (ib >= 0) {
                if (B->shape[ib] != 1) zb += q * sb;
                sb *= B->shape[ib];
            }
        }
        const double *pa = a + za * M * K, *pb = b + zb * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t kk = 0; kk < K; kk++)
                    acc += (ta ? pa[kk * M + i] : pa[i * K + kk]) * (tb ? pb[j * K + kk] : pb[kk * N + j]);
                c[z * M * N + i * N + j] = acc;
            }
    }
}

static void check_mapping(int na, const int64_t *sa, int nb, const int64_t *sb, int nc, const int64_t *sc, int ta,
                          int tb) {
    struct tr_tensor A = shape_only(na, sa), B = shape_only(nb, sb), C = shape_only(nc, sc);
    struct tr_cuda_gemm_shape s;
    struct tr_error err = {0};
    if (tr_cuda_gemm_shape(&A, &B, &C, ta, tb, &s, &err)) fail_msg("mapping refused: %s", err.msg);
    int64_t n_a = tr_tensor_numel(&A), n_b = tr_tensor_numel(&B), n_c = tr_tensor_numel(&C);
    double *a = malloc(n_a * sizeof *a), *b = malloc(n_b * sizeof *b), *c1 = malloc(n_c * sizeof *c1),
           *c2 = malloc(n_c * sizeof *c2);
    for (int64_t i = 0; i < n_a; i++) a[i] = (double)((i * 37) % 11) - 5.5;
    for (int64_t i = 0; i < n_b; i++) b[i] = (double)((i * 53) % 13) - 6.25;
    colmajor_gemm(&s, b, a, c1); /* cᵀ column-major is c row-major */
    rowmajor_ref(&A, &B, &C, ta, tb, a, b, c2);
    for (int64_t i = 0; i < n_c; i++)
        if (c1[i] != c2[i]) fail_msg("element %lld: mapping gives %g, reference %g (ta %d tb %d)", (long long)i, c1[i],
                                     c2[i], ta, tb);
    free(a), free(b), free(c1), free(c2);
}

static void test_mapping(void **state) {
    (void)state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* 2-D: a (3,5) or stored (5,3), b (5,4) or stored (4,5) */
            check_mapping(2, ta ? (int64_t[]){5, 3} : (int64_t[]){3, 5}, 2, tb ? (int64_t[]){4, 5} : (int64_t[]){5, 4},
                          2, (int64_t[]){3, 4}, ta, tb);
            /* batched both sides, and b shared by every batch (a linear layer on (B,T,C)) */
            check_mapping(4, ta ? (int64_t[]){2, 3, 5, 3} : (int64_t[]){2, 3, 3, 5}, 4,
                          tb ? (int64_t[]){2, 3, 4, 5} : (int64_t[]){2, 3, 5, 4}, 4, (int64_t[]){2, 3, 3, 4}, ta, tb);
            check_mapping(3, ta ? (int64_t[]){2, 5, 3} : (int64_t[]){2, 3, 5}, 2, tb ? (int64_t[]){4, 5} : (int64_t[]){5, 4},
                          3, (int64_t[]){2, 3, 4}, ta, tb);
            /* a shared, b batched; and leading ones */
            check_mapping(3, ta ? (int64_t[]){1, 5, 3} : (int64_t[]){1, 3, 5}, 3,
                          tb ? (int64_t[]){3, 4, 5} : (int64_t[]){3, 5, 4}, 3, (int64_t[]){3, 3, 4}, ta, tb);
            check_mapping(3, ta ? (int64_t[]){2, 5, 3} : (int64_t[]){2, 3, 5}, 4,
                          tb ? (int64_t[]){1, 2, 4, 5} : (int64_t[]){1, 2, 5, 4}, 4, (int64_t[]){1, 2, 3, 4}, ta, tb);
        }
}

static void test_mapping_refusals(void **state) {
    (void)state;
    struct tr_cuda_gemm_shape s;
    struct tr_error err = {0};
    struct tr_tensor a = shape_only(2, (int64_t[]){3, 5}), b = shape_only(2, (int64_t[]){6, 4}),
                     c = shape_only(2, (int64_t[]){3, 4});
    assert_int_equal(tr_cuda_gemm_shape(&a, &b, &c, 0, 0, &s, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "[3,5]"));
    /* (2,1) against (1,3) broadcast to (2,3): no single stride per operand */
    struct tr_tensor a2 = shape_only(4, (int64_t[]){2, 1, 3, 5}), b2 = shape_only(4, (int64_t[]){1, 3, 5, 4}),
                     c2 = shape_only(4, (int64_t[]){2, 3, 3, 4});
    assert_int_equal(tr_cuda_gemm_shape(&a2, &b2, &c2, 0, 0, &s, &err), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "expand"));
    struct tr_tensor c3 = shape_only(3, (int64_t[]){7, 3, 4});
    assert_int_equal(tr_cuda_gemm_shape(&a2, &b2, &c3, 0, 0, &s, &err), TR_ERR_SHAPE);
}

static void test_keys_and_alignment(void **state) {
    (void)state;
    struct tr_tensor a = shape_only(2, (int64_t[]){8, 16}), b = shape_only(2, (int64_t[]){16, 32}),
                     c = shape_only(2, (int64_t[]){8, 32});
    struct tr_cuda_gemm_shape s;
    struct tr_error err = {0};
    assert_int_equal(tr_cuda_gemm_shape(&a, &b, &c, 0, 0, &s, &err), TR_OK);
    struct tr_cuda_gemm_key k1, k2;
    memset(&k2, 0xAB, sizeof k2); /* padding garbage must not survive make */
    tr_cuda_gemm_key_make(&k1, &s, TR_DTYPE_BF16, TR_DTYPE_BF16, -1, 0, 68, 256);
    tr_cuda_gemm_key_make(&k2, &s, TR_DTYPE_BF16, TR_DTYPE_BF16, -1, 0, 68, 256);
    assert_memory_equal(&k1, &k2, sizeof k1);
    tr_cuda_gemm_key_make(&k2, &s, TR_DTYPE_BF16, TR_DTYPE_BF16, -1, 0, 68, 16);
    assert_memory_not_equal(&k1, &k2, sizeof k1);
    assert_int_equal(tr_cuda_ptr_align((void *)0x1000, (void *)0x2200, NULL, NULL), 256);
    assert_int_equal(tr_cuda_ptr_align((void *)0x1000, (void *)0x2210, NULL, NULL), 16);
    assert_int_equal(tr_cuda_ptr_align((void *)0x1002, NULL, NULL, NULL), 2);
    assert_int_equal(tr_cuda_ptr_align(NULL, NULL, NULL, NULL), 256);
}

static int released;
static void release_plan(void *p) {
    released++;
    free(p);
}

static void test_plan_cache(void **state) {
    (void)state;
    struct tr_cuda_plan_cache *c = NULL;
    struct tr_error err = {0};
    released = 0;
    assert_int_equal(tr_cuda_plan_cache_init(&c, 0, release_plan, &err), TR_ERR_INVALID);
    assert_int_equal(tr_cuda_plan_cache_init(&c, 3, release_plan, &err), TR_OK);
    int64_t keys[5] = {10, 20, 30, 40, 50};
    for (int i = 0; i < 3; i++) {
        int *plan = malloc(sizeof *plan);
        *plan = i;
        assert_null(tr_cuda_plan_cache_get(c, &keys[i], sizeof keys[i]));
        assert_int_equal(tr_cuda_plan_cache_put(c, &keys[i], sizeof keys[i], plan, &err), TR_OK);
    }
    int *p0 = tr_cuda_plan_cache_get(c, &keys[0], sizeof keys[0]); /* 0 is now the most recent */
    assert_non_null(p0);
    assert_int_equal(*p0, 0);
    int *plan = malloc(sizeof *plan);
    *plan = 3;
    assert_int_equal(tr_cuda_plan_cache_put(c, &keys[3], sizeof keys[3], plan, &err), TR_OK); /* evicts key 20 */
    assert_int_equal(released, 1);
    assert_null(tr_cuda_plan_cache_get(c, &keys[1], sizeof keys[1]));
    assert_non_null(tr_cuda_plan_cache_get(c, &keys[0], sizeof keys[0]));
    assert_non_null(tr_cuda_plan_cache_get(c, &keys[2], sizeof keys[2]));
    assert_int_equal(*(int *)tr_cuda_plan_cache_get(c, &keys[3], sizeof keys[3]), 3);
    /* a key of another size with the same leading bytes is another key */
    int32_t short_key = 10;
    assert_null(tr_cuda_plan_cache_get(c, &short_key, sizeof short_key));
    struct tr_cuda_plan_cache_stats st;
    tr_cuda_plan_cache_get_stats(c, &st);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.entries, 3);
    assert_int_equal(st.hits, 4);
    assert_int_equal(st.misses, 5);
    tr_cuda_plan_cache_free(c);
    assert_int_equal(released, 4);
}

TR_TEST_MAIN(NULL, NULL, test_mapping, test_mapping_refusals, test_keys_and_alignment, test_plan_cache)
