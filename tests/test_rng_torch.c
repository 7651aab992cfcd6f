/* tr_torch_randn (rng.h) against torch.randn's own draws
 * (tests/fixtures/make_torch_randn_fixture.py): each case seeds a generator and makes calls
 * of the sizes listed there, one after another, and every value must be torch's to within
 * float rounding of torch's vectorised log, sin and cos. The output is poisoned first. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "trident/rng.h"
#include "trident/safetensors.h"

#define FIXTURE "tests/fixtures/torch_randn.safetensors"
#define MAX_CALLS 4

static const struct {
    uint64_t seed;
    int64_t sizes[MAX_CALLS];
} cases[] = { /* make_torch_randn_fixture.py's CASES */
    {0, {16}},
    {1234, {100}},
    {7, {37}},
    {5, {10, 20}},
    {9, {3, 3, 1, 17}},
    {(1ull << 32) + 5, {3, 40}},
    {42, {512, 512, 512}},
    {(1ull << 63) + 11, {20011}},
};

static void torch_draws(void **state) {
    (void)state;
    struct tr_safetensors *st = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_safetensors_open(FIXTURE, &st, &err), TR_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[16];
        snprintf(name, sizeof name, "case%zu", c);
        struct tr_tensor want;
        assert_int_equal(tr_safetensors_get(st, name, &want, &err), TR_OK);
        const int64_t n = tr_tensor_numel(&want);
        float *got = malloc(sizeof(float) * (size_t)n);
        assert_non_null(got);
        for (int64_t i = 0; i < n; i++) got[i] = NAN;
        struct tr_torch_rng r;
        tr_torch_rng_seed(&r, cases[c].seed);
        int64_t at = 0;
        for (int k = 0; k < MAX_CALLS && cases[c].sizes[k]; k++) {
            tr_torch_randn(&r, got + at, cases[c].sizes[k]);
            at += cases[c].sizes[k];
        }
        assert_int_equal(at, n);
        const float *w = want.data;
        double d = 0, ref = 0, worst = 0;
        int64_t at_worst = 0;
        for (int64_t i = 0; i < n; i++) {
            const double e = fabs((double)got[i] - (double)w[i]);
            if (!(e <= worst)) worst = e, at_worst = i; /* a NaN is the worst */
            d += e * e;
            ref += (double)w[i] * w[i];
        }
        const double rel = sqrt(d / ref);
        if (!(rel < 1e-6) || !(worst < 1e-5))
            fail_msg("%s (seed %llu): |out - torch| / |torch| = %.3g, worst value %lld: %.9g against torch's %.9g", name,
                     (unsigned long long)cases[c].seed, rel, (long long)at_worst, got[at_worst], w[at_worst]);
        free(got);
    }
    tr_safetensors_close(st);
}

/* The same seed gives the same values; seeding again starts over (the kept sample too). */
static void reseed(void **state) {
    (void)state;
    struct tr_torch_rng r;
    float a[5], b[5], c[5];
    tr_torch_rng_seed(&r, 77);
    tr_torch_randn(&r, a, 5);
    tr_torch_randn(&r, b, 5);
    tr_torch_rng_seed(&r, 77);
    tr_torch_randn(&r, c, 5);
    assert_memory_equal(a, c, sizeof a);
    assert_memory_not_equal(a, b, sizeof a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(torch_draws),
        cmocka_unit_test(reseed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
