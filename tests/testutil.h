/* Helpers shared by the tests: random data (never zeros), poisoning, and the relative
 * error ‖out − ref‖ / ‖ref‖ against a float64 reference. cmocka is included here so a
 * test includes only this. */
#ifndef TRIDENT_TESTUTIL_H
#define TRIDENT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "trident/ops.h"
#include "trident/tensor.h"

/* A test program's main: the cmocka tests named, in order, run as one group with the
 * group setup and teardown (NULL for none):
 *   TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_a, test_b, test_c)
 * The names come from the list itself, so a table and the functions cannot disagree. */
typedef void (*tr_test_fn)(void **state);
int tr_test_run(const char *names, const tr_test_fn *fns, size_t n, CMFixtureFunction setup,
                CMFixtureFunction teardown);
#define TR_TEST_MAIN(setup, teardown, ...)                                                   \
    int main(void) {                                                                         \
        static const tr_test_fn fns_[] = {__VA_ARGS__};                                      \
        return tr_test_run(#__VA_ARGS__, fns_, sizeof fns_ / sizeof fns_[0], setup, teardown); \
    }

/* A test per dtype that calls fn(dt): name_f32 and name_bf16, and with the second form
 * name_f16 too (for the checks a model runs in every float dtype). */
#define TR_TEST_F32_BF16(name, fn)                                     \
    static void name##_f32(void **state) { (void)state, fn(TR_DTYPE_F32); } \
    static void name##_bf16(void **state) { (void)state, fn(TR_DTYPE_BF16); }
#define TR_TEST_F32_BF16_F16(name, fn) \
    TR_TEST_F32_BF16(name, fn)         \
    static void name##_f16(void **state) { (void)state, fn(TR_DTYPE_F16); }

/* Tolerances of DESIGN.md: f32 1e-4, bf16 1e-2 (f16 1e-2, f64 1e-12). */
double tr_test_tol(enum tr_dtype dt);

/* A host tensor of the given shape with memory from tr_host_alloc (free with
 * tr_test_tensor_free). */
struct tr_tensor tr_test_tensor(enum tr_dtype dt, int ndim, const int64_t *shape);
void tr_test_tensor_free(struct tr_tensor *t);
/* tr_test_tensor_free of t[0..n). */
void tr_test_tensors_free(int n, struct tr_tensor *t);

/* Fill with normal(0, std)·sign-safe values from seed: no element is exactly 0. */
void tr_test_randn(struct tr_tensor *t, uint64_t seed, double std);
/* Integers in [0, hi). */
void tr_test_randint(struct tr_tensor *t, uint64_t seed, int64_t hi);
/* Random values of the tensor's kind: tr_test_randn(std) for a float dtype, else
 * tr_test_randint(hi). */
void tr_test_rand(struct tr_tensor *t, uint64_t seed, double std, int64_t hi);
/* Fill with NaN (float dtypes) or a large sentinel (ints), so an unwritten element fails. */
void tr_test_poison(struct tr_tensor *t);

/* A cpu kernels context for a whole group of tests: cmocka group setup/teardown that
 * make and free tr_test_k (a failed init prints its message and fails the group). */
struct tr_kernels;
extern struct tr_kernels *tr_test_k;
int tr_test_kernels_setup(void **state);
/* A group's scratch directory ($TMPDIR/trident-test-XXXXXX, /tmp without TMPDIR: backends'
 * caches, files a test writes), made by the setup and removed with all it holds by the
 * teardown. Every test that needs a scratch directory uses this one (a group with more to
 * set up calls the setup from its own). */
extern char tr_test_dir[256];
int tr_test_dir_setup(void **state);
/* tr_test_dir/scratch.safetensors (set by tr_test_dir_setup): the file of the tests that
 * write one file each and read it back; each writes it anew. */
extern char tr_test_file[sizeof "/scratch.safetensors" + 256];
int tr_test_dir_teardown(void **state);
/* path = tr_test_dir/name (n bytes), and the file written with text unless text is NULL. */
void tr_test_dir_file(const char *name, const char *text, char *path, size_t n);
/* The whole file as text (at most 1 MiB, NUL-terminated, in a buffer the next call reuses);
 * *len its length when len is not NULL. Fails the test when it cannot be read. */
const char *tr_test_read_file(const char *path, size_t *len);
int tr_test_kernels_teardown(void **state);
/* Both: a kernels context and a scratch directory for the group. */
int tr_test_kernels_dir_setup(void **state);
int tr_test_kernels_dir_teardown(void **state);

/* The tensor's values as a new double array (caller frees). */
double *tr_test_to_f64(const struct tr_tensor *t);

/* The sample's mean, standard deviation (of the whole population: √(E[v²] − mean²)),
 * smallest and largest value: for checking what a random generator made. */
void tr_test_moments(const struct tr_tensor *t, double *mean, double *sd, double *lo, double *hi);

/* ‖out − ref‖₂ / ‖ref‖₂ over n elements; +inf if out has a NaN or Inf, or if ref is 0. */
double tr_test_rel_err(const struct tr_tensor *out, const double *ref);

/* Assert rel_err(out, ref) < tol with a message naming what. */
#define tr_assert_close(what, out, ref, tol)                                                  \
    do {                                                                                       \
        double e_ = tr_test_rel_err((out), (ref));                                             \
        if (!(e_ < (tol))) fail_msg("%s: relative error %.3g >= %.3g", (what), e_, (double)(tol)); \
    } while (0)

/* A call that had to fail: its status rc and err->status are `status`, and err's message
 * holds every one of needles[0..n). A failure names what. */
struct tr_error;
void tr_test_expect_failure(const char *what, int rc, const struct tr_error *err, int status,
                            const char *const *needles, int n);

/* Assert that an error's message (err->msg) holds the string s. */
#define tr_assert_msg_has(err, s)                                                                  \
    do {                                                                                           \
        if (!strstr((err)->msg, (s))) fail_msg("message \"%s\"\n  lacks \"%s\"", (err)->msg, (s)); \
    } while (0)

/* Run op on tr_test_k through the dispatcher, out poisoned first; fail the test unless TR_OK. */
void tr_test_run_op(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in, struct tr_tensor *out);
/* Run op expecting status `want` and a message containing `needle`. */
void tr_test_run_op_fails(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in, struct tr_tensor *out,
                          int want, const char *needle);

#endif
