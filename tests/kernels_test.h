/* What the cpu kernel tests (test_kernels.c, test_kernels_layout.c, test_fused.c) share:
 * the group's context, shape literals, the dispatcher runner and the frees. */
#ifndef TRIDENT_TESTS_KERNELS_TEST_H
#define TRIDENT_TESTS_KERNELS_TEST_H

#include <stdarg.h>
#include "testutil.h"
#include "trident/kernels.h"

#define K tr_test_k /* the group's kernels context (testutil.h) */
static const enum tr_dtype FLOATS[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16};
#define N_FLOATS 3

#define SHAPE(...) (const int64_t[]){__VA_ARGS__}
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TENSOR(dt, ...) tr_test_tensor((dt), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__))

/* Expects TR_OK from a call; the message comes from the caller's `err`. */
#define CHECK_OK(call)                                                                    \
    do {                                                                                  \
        int s_ = (call);                                                                  \
        if (s_ != TR_OK) fail_msg("%s returned %d: %s", #call, s_, err.msg);              \
    } while (0)

/* Every op also runs through the dispatcher. */
static inline int run_op(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in, struct tr_tensor *out,
                         struct tr_error *err) {
    return tr_kernels_run(K, op, at, n, in, out, err);
}

/* Frees the tensors listed, up to a NULL. */
static inline void tfree(struct tr_tensor *t, ...) {
    va_list ap;
    va_start(ap, t);
    for (; t; t = va_arg(ap, struct tr_tensor *)) tr_test_tensor_free(t);
    va_end(ap);
}

static inline void check_close(const char *what, const struct tr_tensor *out, const double *ref) {
    tr_assert_close(what, out, ref, tr_test_tol((enum tr_dtype)out->dtype));
}

#endif
