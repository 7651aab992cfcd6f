/* libtrident_kernels on the cpu, the layout kernels (transpose, slice, concat, reshape,
 * update_slice) and tr_k_random: exact checks against the index arithmetic written here,
 * and the random fills' moments. Split from test_kernels.c, whose conventions it keeps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels_test.h"

/* ------------------------------------------------------------------ layout */

/* out element i equals x at the permuted index, exactly */
static void check_transpose(const struct tr_tensor *x, const struct tr_tensor *y, const int64_t *perm) {
    int64_t n = tr_tensor_numel(y), xs[TR_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        xs[d] = s;
        s *= x->shape[d];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t rem = i, xi = 0;
        for (int d = y->ndim - 1; d >= 0; d--) {
            xi += (rem % y->shape[d]) * xs[perm[d]];
            rem /= y->shape[d];
        }
        double got = tr_tensor_get_f64(y, i), want = tr_tensor_get_f64(x, xi);
        if (got != want) fail_msg("transpose: element %lld is %g, expected %g", (long long)i, got, want);
    }
}

static void transpose_case(enum tr_dtype dt, int nd, const int64_t *shape, const int64_t *perm, int via_run, uint64_t seed) {
    struct tr_error err = {0};
    int64_t os[TR_MAX_DIMS];
    for (int d = 0; d < nd; d++) os[d] = shape[perm[d]];
    struct tr_tensor x = tr_test_tensor(dt, nd, shape), y = tr_test_tensor(dt, nd, os);
    tr_test_rand(&x, seed, 1.0, 1000000);
    tr_test_poison(&y);
    if (via_run) {
        struct tr_attrs at = {.n_ints = nd};
        for (int d = 0; d < nd; d++) at.ints[d] = perm[d];
        CHECK_OK(run_op(TR_OP_TRANSPOSE, &at, 1, &x, &y, &err));
    } else {
        CHECK_OK(tr_k_transpose(K, &x, perm, &y, &err));
    }
    check_transpose(&x, &y, perm);
    tfree(&x, &y, NULL);
}

static void test_transpose(void **state) {
    (void)state;
    const enum tr_dtype dts[] = {TR_DTYPE_BF16, TR_DTYPE_F32, TR_DTYPE_I64};
    /* every permutation of a 4-D tensor, for element sizes 2, 4 and 8 */
    int cnt = 0;
    for (int p = 0; p < 256; p++) {
        int64_t perm[4] = {p & 3, (p >> 2) & 3, (p >> 4) & 3, (p >> 6) & 3};
        int used = 0;
        for (int d = 0; d < 4; d++) used |= 1 << perm[d];
        if (used != 15) continue;
        for (int d = 0; d < 3; d++) transpose_case(dts[d], 4, SHAPE(2, 3, 4, 5), perm, (cnt + d) & 1, 900 + cnt);
        cnt++;
    }
    assert_int_equal(cnt, 24);
    transpose_case(TR_DTYPE_F32, 2, SHAPE(67, 130), SHAPE(1, 0), 0, 950);          /* tiled */
    transpose_case(TR_DTYPE_BF16, 3, SHAPE(5, 33, 40), SHAPE(0, 2, 1), 1, 951);
    transpose_case(TR_DTYPE_F32, 4, SHAPE(2, 128, 12, 64), SHAPE(0, 2, 1, 3), 0, 952); /* BERT heads, rows */
    transpose_case(TR_DTYPE_F32, 4, SHAPE(3, 1, 5, 1), SHAPE(3, 2, 1, 0), 1, 953);
    transpose_case(TR_DTYPE_F16, 8, SHAPE(2, 3, 1, 2, 3, 2, 1, 3), SHAPE(7, 6, 5, 4, 3, 2, 1, 0), 0, 954);
    transpose_case(TR_DTYPE_I32, 8, SHAPE(2, 1, 3, 2, 2, 3, 1, 2), SHAPE(1, 3, 0, 2, 7, 5, 4, 6), 1, 955);
    struct tr_error err = {0};
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 2, 3), y = TENSOR(TR_DTYPE_F32, 3, 2);
    assert_int_equal(tr_k_transpose(K, &x, SHAPE(0, 0), &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_transpose(K, &x, SHAPE(0, 1), &y, &err), TR_ERR_SHAPE);
    struct tr_attrs at = {.ints = {1, 0}, .n_ints = 3};
    assert_int_equal(run_op(TR_OP_TRANSPOSE, &at, 1, &x, &y, &err), TR_ERR_INVALID);
    tfree(&x, &y, NULL);
}

static void test_slice_concat_reshape(void **state) {
    (void)state;
    struct tr_error err = {0};
    /* slice: axis 1 of (4,10,3), 2:9:3 -> 3 rows; 1:4 contiguous; axis 0 from the end */
    struct {
        int axis;
        int64_t start, end, step, n;
    } sl[] = {{1, 2, 9, 3, 3}, {1, 1, 4, 1, 3}, {0, -2, 100, 1, 2}, {2, 0, 3, 2, 2}, {-1, 1, 2, 1, 1}};
    for (int d = 0; d < 2; d++)
        for (size_t c = 0; c < sizeof sl / sizeof sl[0]; c++) {
            enum tr_dtype dt = d ? TR_DTYPE_BF16 : TR_DTYPE_I64;
            struct tr_tensor x = TENSOR(dt, 4, 10, 3);
            int ax = sl[c].axis < 0 ? sl[c].axis + 3 : sl[c].axis;
            int64_t os[3] = {4, 10, 3};
            os[ax] = sl[c].n;
            struct tr_tensor y = tr_test_tensor(dt, 3, os);
            tr_test_rand(&x, 1000 + c, 1.0, 1 << 30);
            tr_test_poison(&y);
            struct tr_attrs at = {.ints = {sl[c].axis, sl[c].start, sl[c].end, sl[c].step}};
            CHECK_OK(run_op(TR_OP_SLICE, &at, 1, &x, &y, &err));
            int64_t start = sl[c].start < 0 ? sl[c].start + x.shape[ax] : sl[c].start;
            for (int64_t i = 0; i < tr_tensor_numel(&y); i++) {
                int64_t idx[3], rem = i;
                for (int k = 2; k >= 0; k--) {
                    idx[k] = rem % os[k];
                    rem /= os[k];
                }
                idx[ax] = start + idx[ax] * sl[c].step;
                double want = tr_tensor_get_f64(&x, (idx[0] * 10 + idx[1]) * 3 + idx[2]);
                if (tr_tensor_get_f64(&y, i) != want) fail_msg("slice case %zu: element %lld differs", c, (long long)i);
            }
            tfree(&x, &y, NULL);
        }
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 4, 10, 3), y = TENSOR(TR_DTYPE_F32, 4, 4, 3);
    assert_int_equal(tr_k_slice(K, &x, 1, 8, 1, &y, &err), TR_ERR_SHAPE); /* runs past the end */
    assert_int_equal(tr_k_slice(K, &x, 3, 0, 1, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_slice(K, &x, 1, 0, 0, &y, &err), TR_ERR_INVALID);
    struct tr_attrs bad = {.ints = {1, 0, 9, 1}};
    assert_int_equal(run_op(TR_OP_SLICE, &bad, 1, &x, &y, &err), TR_ERR_SHAPE);
    tfree(&x, &y, NULL);

    /* concat on each axis, three inputs of different extents there */
    for (int ax = 0; ax < 3; ax++)
        for (int d = 0; d < 2; d++) {
            enum tr_dtype dt = d ? TR_DTYPE_F16 : TR_DTYPE_F32;
            const int64_t ext[3] = {3, 1, 5};
            struct tr_tensor xs[3];
            int64_t os[3] = {2, 4, 6};
            os[ax] = 9;
            for (int i = 0; i < 3; i++) {
                int64_t s[3] = {2, 4, 6};
                s[ax] = ext[i];
                xs[i] = tr_test_tensor(dt, 3, s);
                tr_test_randn(&xs[i], 1100 + i, 1.0);
            }
            struct tr_tensor yc = tr_test_tensor(dt, 3, os);
            tr_test_poison(&yc);
            if (d) CHECK_OK(tr_k_concat(K, 3, xs, ax - 3, &yc, &err));
            else CHECK_OK(run_op(TR_OP_CONCAT, &(struct tr_attrs){.ints = {ax}}, 3, xs, &yc, &err));
            for (int64_t i = 0; i < tr_tensor_numel(&yc); i++) {
                int64_t idx[3], rem = i;
                for (int k = 2; k >= 0; k--) {
                    idx[k] = rem % os[k];
                    rem /= os[k];
                }
                int src = 0;
                while (idx[ax] >= xs[src].shape[ax]) idx[ax] -= xs[src++].shape[ax];
                int64_t xi = (idx[0] * xs[src].shape[1] + idx[1]) * xs[src].shape[2] + idx[2];
                if (tr_tensor_get_f64(&yc, i) != tr_tensor_get_f64(&xs[src], xi))
                    fail_msg("concat axis %d: element %lld differs", ax, (long long)i);
            }
            tr_test_tensors_free(3, xs);
            tr_test_tensor_free(&yc);
        }
    struct tr_tensor c1 = TENSOR(TR_DTYPE_F32, 2, 3), c2 = TENSOR(TR_DTYPE_F32, 3, 3), co = TENSOR(TR_DTYPE_F32, 2, 6);
    assert_int_equal(tr_k_concat(K, 2, (struct tr_tensor[]){c1, c2}, 1, &co, &err), TR_ERR_SHAPE);
    assert_int_equal(tr_k_concat(K, 2, (struct tr_tensor[]){c1, c1}, 0, &co, &err), TR_ERR_SHAPE);

    /* reshape copies when the buffers differ, and accepts aliasing */
    struct tr_tensor r1 = TENSOR(TR_DTYPE_F32, 3, 2);
    tr_test_randn(&c1, 1200, 1.0);
    tr_test_poison(&r1);
    struct tr_attrs rat = {.ints = {3, 2}, .n_ints = 2};
    CHECK_OK(run_op(TR_OP_RESHAPE, &rat, 1, &c1, &r1, &err));
    assert_memory_equal(r1.data, c1.data, 6 * sizeof(float));
    struct tr_tensor alias = r1;
    alias.data = c1.data;
    CHECK_OK(run_op(TR_OP_RESHAPE, &rat, 1, &c1, &alias, &err));
    assert_int_equal(run_op(TR_OP_RESHAPE, &rat, 1, &c1, &co, &err), TR_ERR_SHAPE);
    tfree(&c1, &c2, &co, &r1, NULL);
}

/* ---- update_slice ---- */

/* x with [s, s+n) of axis `ax` replaced by u, in float64 (a copy: exact in every dtype). */
static double *ref_update_slice(const struct tr_tensor *x, const struct tr_tensor *u, int ax, int64_t s) {
    double *r = tr_test_to_f64(x), *uv = tr_test_to_f64(u);
    int64_t outer = tr_shape_numel(ax, x->shape), inner = tr_shape_numel(x->ndim - ax - 1, x->shape + ax + 1);
    int64_t dim = x->shape[ax], n = u->shape[ax];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < inner; i++) r[(o * dim + s + j) * inner + i] = uv[(o * n + j) * inner + i];
    free(uv);
    return r;
}

static void exact_equal(const char *what, const struct tr_tensor *out, const double *ref) {
    for (int64_t i = 0; i < tr_tensor_numel(out); i++)
        if (tr_tensor_get_f64(out, i) != ref[i])
            fail_msg("%s: element %lld is %g, expected %g", what, (long long)i, tr_tensor_get_f64(out, i), ref[i]);
}

/* Out of place (out poisoned: every element must be written) and in place (out is x:
 * only the slice changes), through run and through a bound call whose start changes
 * between calls; every dtype it takes and every axis of a 4-D cache. */
static void test_update_slice(void **state) {
    (void)state;
    struct tr_error err = {0};
    static const enum tr_dtype dts[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F64, TR_DTYPE_I32};
    const int64_t xs[4] = {2, 3, 8, 4};
    for (int d = 0; d < 5; d++)
        for (int axis = -4; axis < 4; axis++) {
            int ax = axis < 0 ? axis + 4 : axis;
            int64_t us[4] = {2, 3, 8, 4};
            us[ax] = ax == 2 ? 3 : 1;
            struct tr_tensor x = tr_test_tensor(dts[d], 4, xs), u = tr_test_tensor(dts[d], 4, us);
            struct tr_tensor y = tr_test_tensor(dts[d], 4, xs), st = TENSOR(TR_DTYPE_I32, 1);
            uint64_t seed = 2000 + (uint64_t)(d * 16 + ax);
            tr_test_rand(&x, seed, 1.0, 1 << 30);
            tr_test_rand(&u, seed + 7, 1.0, 1 << 30);
            struct tr_tensor in[3] = {x, u, st};
            struct tr_attrs at = {.ints = {axis}, .n_ints = 1};
            char what[96];
            int64_t last = xs[ax] - us[ax];
            /* out of place, run: first and last legal start */
            for (int k = 0; k < 2; k++) {
                int64_t s = k ? last : 0;
                ((int32_t *)st.data)[0] = (int32_t)s;
                tr_test_poison(&y);
                CHECK_OK(run_op(TR_OP_UPDATE_SLICE, &at, 3, in, &y, &err));
                double *ref = ref_update_slice(&x, &u, ax, s);
                snprintf(what, sizeof what, "update_slice %s axis %d start %lld", tr_dtype_name(dts[d]), axis,
                         (long long)s);
                exact_equal(what, &y, ref);
                free(ref);
            }
            /* bound, out of place then in place (out is x), the start changed between calls */
            struct tr_kernel_call c;
            CHECK_OK(tr_kernels_bind(K, TR_OP_UPDATE_SLICE, &at, 3, in, &y, &c, &err));
            ((int32_t *)st.data)[0] = (int32_t)(last / 2);
            tr_test_poison(&y);
            CHECK_OK(tr_kernels_call(K, &c, &err));
            double *ref = ref_update_slice(&x, &u, ax, last / 2);
            snprintf(what, sizeof what, "bound update_slice %s axis %d", tr_dtype_name(dts[d]), axis);
            exact_equal(what, &y, ref);
            free(ref);
            tr_kernels_unbind(K, &c);
            CHECK_OK(tr_kernels_bind(K, TR_OP_UPDATE_SLICE, &at, 3, in, &x, &c, &err));
            for (int64_t s = 0; s <= last; s += last > 1 ? last - 1 : 1) {
                ((int32_t *)st.data)[0] = (int32_t)s;
                tr_test_rand(&u, seed + 11 + (uint64_t)s, 1.0, 1 << 30);
                ref = ref_update_slice(&x, &u, ax, s);
                CHECK_OK(tr_kernels_call(K, &c, &err));
                snprintf(what, sizeof what, "in-place update_slice %s axis %d start %lld", tr_dtype_name(dts[d]),
                         axis, (long long)s);
                exact_equal(what, &x, ref);
                free(ref);
            }
            /* out of range: refused by name, nothing written */
            static const int32_t bad[2] = {-1, 0};
            for (int k = 0; k < 2; k++) {
                int32_t s = k ? (int32_t)last + 1 : bad[0];
                ((int32_t *)st.data)[0] = s;
                double *before = tr_test_to_f64(&x);
                int rc = tr_kernels_call(K, &c, &err);
                assert_int_equal(rc, TR_ERR_INVALID);
                char want[96];
                snprintf(want, sizeof want, "start %d with n %lld leaves axis %d of extent %lld", s,
                         (long long)us[ax], ax, (long long)xs[ax]);
                if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
                exact_equal("refused update_slice leaves x", &x, before);
                free(before);
                tr_test_poison(&y);
                assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at, 3, in, &y, &err), TR_ERR_INVALID);
                assert_non_null(strstr(err.msg, want));
            }
            tr_kernels_unbind(K, &c);
            tfree(&x, &u, &y, &st, NULL);
        }
    /* shapes and dtypes refused at run and at bind */
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 4, 6), u = TENSOR(TR_DTYPE_F32, 4, 2), y = TENSOR(TR_DTYPE_F32, 4, 6);
    struct tr_tensor u16 = TENSOR(TR_DTYPE_F16, 4, 2), ulong = TENSOR(TR_DTYPE_F32, 4, 7);
    struct tr_tensor s1 = TENSOR(TR_DTYPE_I32, 1), s64 = TENSOR(TR_DTYPE_I64, 1), s2 = TENSOR(TR_DTYPE_I32, 2);
    struct tr_tensor y2 = TENSOR(TR_DTYPE_F32, 4, 5);
    struct tr_attrs at1 = {.ints = {1}, .n_ints = 1}, at5 = {.ints = {5}, .n_ints = 1};
    ((int32_t *)s1.data)[0] = 0;
    struct tr_kernel_call c;
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, u16, s1}, &y, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "update"));
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, ulong, s1}, &y, &err), TR_ERR_SHAPE);
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, u, s64}, &y, &err), TR_ERR_SHAPE);
    assert_non_null(strstr(err.msg, "exactly one element"));
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, u, s2}, &y, &err), TR_ERR_SHAPE);
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, u, s1}, &y2, &err), TR_ERR_SHAPE);
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at5, 3, (struct tr_tensor[]){x, u, s1}, &y, &err), TR_ERR_INVALID);
    assert_int_equal(run_op(TR_OP_UPDATE_SLICE, &at1, 2, (struct tr_tensor[]){x, u}, &y, &err), TR_ERR_INVALID);
    assert_int_equal(tr_kernels_bind(K, TR_OP_UPDATE_SLICE, &at1, 3, (struct tr_tensor[]){x, u, s64}, &y, &c, &err),
                     TR_ERR_SHAPE);
    tfree(&x, &u, &y, &u16, &ulong, &s1, &s64, &s2, &y2, NULL);
}

/* ------------------------------------------------------------------ random */

/* tr_k_random: each distribution's mean and standard deviation within a few standard
 * errors (n = 200001: the mean's is sd/447), uniforms inside [a, b), the same seed the
 * same bits, another seed other bits; every float dtype; bad arguments refused. */
static void test_random(void **state) {
    (void)state;
    struct tr_error err = {0};
    static const enum tr_dtype dts[4] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F64};
    int64_t n = 200001;
    for (int d = 0; d < 4; d++)
        for (int dist = 0; dist < 2; dist++) {
            struct tr_tensor t1 = tr_test_tensor(dts[d], 1, &n), t2 = tr_test_tensor(dts[d], 1, &n);
            tr_test_poison(&t1);
            float a = dist ? -1.5f : -2.0f, b = dist ? 3.0f : 3.0f;
            CHECK_OK(tr_k_random(K, (enum tr_random_dist)dist, 7, a, b, &t1, &err));
            double mean, sd, lo, hi;
            tr_test_moments(&t1, &mean, &sd, &lo, &hi);
            double want_mean = dist ? a : (a + b) / 2.0, want_sd = dist ? b : (b - a) / sqrt(12.0);
            if (!(fabs(mean - want_mean) < 5.0 * want_sd / sqrt((double)n) + 0.01 * want_sd) ||
                !(fabs(sd - want_sd) < 0.01 * want_sd))
                fail_msg("random %s %s: mean %.5f (want %.5f), sd %.5f (want %.5f)", dist ? "normal" : "uniform",
                         tr_dtype_name(dts[d]), mean, want_mean, sd, want_sd);
            /* f32/f64 stay below b; a 16-bit store may round up onto b itself */
            int wide = dts[d] == TR_DTYPE_F32 || dts[d] == TR_DTYPE_F64;
            if (!dist && !(lo >= a && (wide ? hi < b : hi <= b)))
                fail_msg("random uniform %s: range [%g, %g] leaves [%g, %g)", tr_dtype_name(dts[d]), lo, hi, a, b);
            if (dist) assert_true(lo < a - 3 * b && hi > a + 3 * b); /* tails are drawn */
            CHECK_OK(tr_k_random(K, (enum tr_random_dist)dist, 7, a, b, &t2, &err));
            assert_memory_equal(t1.data, t2.data, tr_tensor_nbytes(&t1));
            CHECK_OK(tr_k_random(K, (enum tr_random_dist)dist, 8, a, b, &t2, &err));
            assert_true(memcmp(t1.data, t2.data, tr_tensor_nbytes(&t1)) != 0);
            tr_test_tensor_free(&t1);
            tr_test_tensor_free(&t2);
        }
    /* a prefix of the fill is the fill of the prefix: values depend on the index only */
    int64_t n5 = 5;
    struct tr_tensor big = tr_test_tensor(TR_DTYPE_F32, 1, &n), small = tr_test_tensor(TR_DTYPE_F32, 1, &n5);
    CHECK_OK(tr_k_random(K, TR_RANDOM_NORMAL, 3, 0.0f, 1.0f, &big, &err));
    CHECK_OK(tr_k_random(K, TR_RANDOM_NORMAL, 3, 0.0f, 1.0f, &small, &err));
    assert_memory_equal(big.data, small.data, 5 * sizeof(float));
    /* refusals, by name */
    assert_int_equal(tr_k_random(K, (enum tr_random_dist)2, 3, 0.0f, 1.0f, &small, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "distribution 2"));
    assert_int_equal(tr_k_random(K, TR_RANDOM_UNIFORM, 3, 1.0f, 1.0f, &small, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "a < b"));
    assert_int_equal(tr_k_random(K, TR_RANDOM_NORMAL, 3, 0.0f, -1.0f, &small, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_random(K, TR_RANDOM_NORMAL, 3, NAN, 1.0f, &small, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_random(K, TR_RANDOM_NORMAL, 3, 0.0f, 1.0f, NULL, &err), TR_ERR_INVALID);
    assert_int_equal(tr_k_random(NULL, TR_RANDOM_NORMAL, 3, 0.0f, 1.0f, &small, &err), TR_ERR_INVALID);
    struct tr_tensor ints = tr_test_tensor(TR_DTYPE_I32, 1, &n5);
    assert_int_equal(tr_k_random(K, TR_RANDOM_NORMAL, 3, 0.0f, 1.0f, &ints, &err), TR_ERR_UNSUPPORTED);
    tr_test_tensor_free(&big);
    tr_test_tensor_free(&small);
    tr_test_tensor_free(&ints);
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_transpose, test_slice_concat_reshape,
             test_update_slice, test_random)
