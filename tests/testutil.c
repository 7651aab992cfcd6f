#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include <stdio.h>
#include "trident/kernels.h"
#include "trident/rng.h"

double tr_test_tol(enum tr_dtype dt) {
    switch (dt) {
    case TR_DTYPE_F32: return 1e-4;
    case TR_DTYPE_F64: return 1e-12;
    default: return 1e-2;
    }
}

struct tr_tensor tr_test_tensor(enum tr_dtype dt, int ndim, const int64_t *shape) {
    struct tr_tensor t;
    void *p = NULL;
    assert_int_equal(tr_tensor_make(&t, NULL, dt, ndim, shape, NULL), TR_OK);
    assert_int_equal(tr_host_alloc(&p, tr_tensor_nbytes(&t), NULL), TR_OK);
    t.data = p;
    return t;
}

void tr_test_tensor_free(struct tr_tensor *t) {
    tr_host_free(t->data);
    t->data = NULL;
}

void tr_test_tensors_free(int n, struct tr_tensor *t) {
    for (int i = 0; i < n; i++) tr_test_tensor_free(&t[i]);
}

void tr_test_randn(struct tr_tensor *t, uint64_t seed, double std) {
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = tr_rng_normal(seed, 0x7e57, (uint64_t)i) * std;
        if (fabs(v) < 1e-3 * std) v = 1e-3 * std; /* never exactly zero */
        tr_tensor_set_f64(t, i, v);
    }
}

void tr_test_randint(struct tr_tensor *t, uint64_t seed, int64_t hi) {
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        tr_tensor_set_f64(t, i, (double)(int64_t)(tr_rng_uniform(seed, 0x1d5, (uint64_t)i) * (double)hi));
}

void tr_test_rand(struct tr_tensor *t, uint64_t seed, double std, int64_t hi) {
    if (tr_dtype_is_float((enum tr_dtype)t->dtype))
        tr_test_randn(t, seed, std);
    else
        tr_test_randint(t, seed, hi);
}

void tr_test_poison(struct tr_tensor *t) {
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++)
        tr_tensor_set_f64(t, i, tr_dtype_is_float((enum tr_dtype)t->dtype) ? NAN : -987654321.0);
}

double *tr_test_to_f64(const struct tr_tensor *t) {
    int64_t n = tr_tensor_numel(t);
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    assert_non_null(d);
    for (int64_t i = 0; i < n; i++) d[i] = tr_tensor_get_f64(t, i);
    return d;
}

void tr_test_moments(const struct tr_tensor *t, double *mean, double *sd, double *lo, double *hi) {
    int64_t n = tr_tensor_numel(t);
    double s = 0, q = 0;
    *lo = INFINITY, *hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double v = tr_tensor_get_f64(t, i);
        s += v, q += v * v;
        *lo = v < *lo ? v : *lo, *hi = v > *hi ? v : *hi;
    }
    *mean = s / (double)n;
    *sd = sqrt(q / (double)n - *mean * *mean);
}

double tr_test_rel_err(const struct tr_tensor *out, const double *ref) {
    int64_t n = tr_tensor_numel(out);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double o = tr_tensor_get_f64(out, i);
        if (!isfinite(o)) return INFINITY;
        num += (o - ref[i]) * (o - ref[i]);
        den += ref[i] * ref[i];
    }
    if (den == 0) return INFINITY;
    return sqrt(num / den);
}

struct tr_kernels *tr_test_k;

int tr_test_kernels_setup(void **state) {
    (void)state;
    struct tr_error err = {0};
    if (tr_kernels_init(&tr_test_k, TR_DEVICE_CPU, 0, &err) != TR_OK) {
        fprintf(stderr, "tr_kernels_init: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int tr_test_kernels_teardown(void **state) {
    (void)state;
    tr_kernels_free(tr_test_k);
    tr_test_k = NULL;
    return 0;
}

void tr_test_run_op(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in, struct tr_tensor *out) {
    struct tr_error err = {0};
    tr_test_poison(out);
    int st = tr_kernels_run(tr_test_k, op, at, n, in, out, &err);
    if (st != TR_OK) fail_msg("%s returned %d: %s", tr_op_name(op), st, err.msg);
}

void tr_test_run_op_fails(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in, struct tr_tensor *out,
                          int want, const char *needle) {
    struct tr_error err = {0};
    int st = tr_kernels_run(tr_test_k, op, at, n, in, out, &err);
    if (st != want) fail_msg("%s: status %d (want %d): %s", tr_op_name(op), st, want, err.msg);
    if (!strstr(err.msg, needle)) fail_msg("%s: message \"%s\" lacks \"%s\"", tr_op_name(op), err.msg, needle);
}

void tr_test_expect_failure(const char *what, int rc, const struct tr_error *err, int status,
                            const char *const *needles, int n) {
    if (rc != status || err->status != status)
        fail_msg("%s: status %d (%s), expected %d (%s); message: %s", what, rc, tr_status_name(rc), status,
                 tr_status_name(status), err->msg);
    for (int i = 0; i < n; i++)
        if (!strstr(err->msg, needles[i])) fail_msg("%s: the message lacks \"%s\": %s", what, needles[i], err->msg);
}

char tr_test_dir[256];
char tr_test_file[sizeof "/scratch.safetensors" + 256];

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int tr_test_dir_setup(void **state) {
    (void)state;
    const char *base = getenv("TMPDIR");
    int n = snprintf(tr_test_dir, sizeof tr_test_dir, "%s/trident-test-XXXXXX", base && *base ? base : "/tmp");
    if (n < 0 || (size_t)n >= sizeof tr_test_dir) return -1;
    if (!mkdtemp(tr_test_dir)) return -1;
    snprintf(tr_test_file, sizeof tr_test_file, "%s/scratch.safetensors", tr_test_dir);
    return 0;
}

int tr_test_dir_teardown(void **state) {
    (void)state;
    return nftw(tr_test_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void tr_test_dir_file(const char *name, const char *text, char *path, size_t n) {
    int len = snprintf(path, n, "%s/%s", tr_test_dir, name);
    assert_true(len > 0 && (size_t)len < n);
    if (!text) return;
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("%s: cannot write", path);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
}

const char *tr_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("%s: cannot read", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

int tr_test_kernels_dir_setup(void **state) { return tr_test_kernels_setup(state) || tr_test_dir_setup(state); }

int tr_test_kernels_dir_teardown(void **state) {
    int a = tr_test_dir_teardown(state), b = tr_test_kernels_teardown(state);
    return a || b;
}

int tr_test_run(const char *names, const tr_test_fn *fns, size_t n, CMFixtureFunction setup,
                CMFixtureFunction teardown) {
    struct CMUnitTest *t = calloc(n, sizeof *t);
    char *list = strdup(names);
    if (!t || !list) {
        fprintf(stderr, "tr_test_run: out of memory\n");
        return 1;
    }
    char *save = NULL, *tok = strtok_r(list, ", \t\n", &save);
    for (size_t i = 0; i < n; i++, tok = strtok_r(NULL, ", \t\n", &save)) {
        t[i].name = tok ? tok : "(unnamed)";
        t[i].test_func = fns[i];
    }
    int rc = _cmocka_run_group_tests("tests", t, n, setup, teardown);
    free(list);
    free(t);
    return rc;
}
