/* The decoder-LLM ops of ops.h (RMS_NORM, RMS_NORM_GRAD, RMS_NORM_GRAD_W, ROPE): their
 * cpu kernels against the float64 oracles of tests/ref (f32, bf16, f16, f64;
 * inputs random and never zero, outputs poisoned first, references computed from the
 * rounded inputs), their bound form, their gradient rules by central finite differences
 * in f64 (attention's with grouped heads, causal mask and window too), shape inference
 * and its messages, and a graph of them on every backend configuration.
 *
 * ROPE's reference takes the angle as Hugging Face computes it (θ_i = 1/base^(2i/R) and
 * a = pos·θ_i in f32, the kernel's documented choice) for f32/bf16/f16, and in f64 for
 * f64; everything after the angle is f64. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "backendutil.h"
#include "ref/ref.h"
#include "testutil.h"
#include "trident/autodiff.h"
#include "trident/graph.h"
#include "trident/kernels.h"
#include "trident/safetensors.h"

#define run tr_test_run_op
#define run_fails tr_test_run_op_fails
#define K tr_test_k
#define SH(...) (const int64_t[]){__VA_ARGS__}
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define TENSOR(dt, ...) tr_test_tensor((dt), NDIM(__VA_ARGS__), SH(__VA_ARGS__))

static const enum tr_dtype DTS[] = {TR_DTYPE_F32, TR_DTYPE_BF16, TR_DTYPE_F16, TR_DTYPE_F64};
#define N_DTS 4


/* The same call bound once, called twice: bit-identical to run's output. */
static void bound_matches(int op, const struct tr_attrs *at, int n, const struct tr_tensor *in,
                          const struct tr_tensor *want) {
    struct tr_tensor o = tr_test_tensor(want->dtype, want->ndim, want->shape);
    struct tr_kernel_call c;
    struct tr_error err = {0};
    if (tr_kernels_bind(K, op, at, n, in, &o, &c, &err)) fail_msg("bind %s: %s", tr_op_name(op), err.msg);
    for (int rep = 0; rep < 2; rep++) {
        tr_test_poison(&o);
        if (tr_kernels_call(K, &c, &err)) fail_msg("bound %s: %s", tr_op_name(op), err.msg);
        if (memcmp(o.data, want->data, tr_tensor_nbytes(want)) != 0)
            fail_msg("bound %s (%s) differs from tr_kernels_run", tr_op_name(op), tr_dtype_name(want->dtype));
    }
    tr_kernels_unbind(K, &c);
    tr_test_tensor_free(&o);
}

static void check(const char *what, enum tr_dtype dt, const struct tr_tensor *out, const double *ref) {
    char buf[200];
    snprintf(buf, sizeof buf, "%s (%s)", what, tr_dtype_name(dt));
    tr_assert_close(buf, out, ref, tr_test_tol(dt));
}

/* ROPE's oracle with the positions read from their tensor. */
static void ref_rope(const double *x, const struct tr_tensor *pos, int64_t B, int64_t H, int64_t T, int64_t D,
                     int64_t R, float base, int inverse, int f32_angle, double *y) {
    double *p = tr_test_to_f64(pos);
    tr_ref_rope(x, p, pos->ndim == 2, B, H, T, D, R, base, inverse, f32_angle, y);
    free(p);
}

/* ---- kernels against the references ---- */

static void test_rms_norm(void **state) {
    (void)state;
    const int64_t B = 3, T = 5, D = 72; /* D not a multiple of the vector width */
    for (int d = 0; d < N_DTS; d++)
        for (int add_one = 0; add_one < 2; add_one++) {
            enum tr_dtype dt = DTS[d];
            struct tr_tensor in[2] = {TENSOR(dt, B, T, D), TENSOR(dt, D)};
            struct tr_tensor y = TENSOR(dt, B, T, D);
            tr_test_randn(&in[0], 11 + d, 2.0);
            tr_test_randn(&in[1], 12 + d, add_one ? 0.3 : 1.0);
            double *x = tr_test_to_f64(&in[0]), *w = tr_test_to_f64(&in[1]);
            double *ref = malloc(sizeof(double) * (size_t)(B * T * D));
            const float eps = add_one ? 1e-6f : 1e-5f;
            struct tr_attrs at = {.ints = {add_one}, .floats = {eps}, .n_ints = 1};
            run(TR_OP_RMS_NORM, &at, 2, in, &y);
            tr_ref_rms_norm(x, w, B * T, D, eps, add_one, ref);
            check(add_one ? "rms_norm (1 + w)" : "rms_norm w", dt, &y, ref);
            bound_matches(TR_OP_RMS_NORM, &at, 2, in, &y);
            /* in place: out aliasing x */
            struct tr_tensor alias[2] = {TENSOR(dt, B, T, D), in[1]};
            memcpy(alias[0].data, in[0].data, tr_tensor_nbytes(&in[0]));
            assert_int_equal(tr_kernels_run(K, TR_OP_RMS_NORM, &at, 2, alias, &alias[0], NULL), TR_OK);
            assert_memory_equal(alias[0].data, y.data, tr_tensor_nbytes(&y));
            tr_test_tensor_free(&alias[0]);
            free(x), free(w), free(ref);
            tr_test_tensor_free(&in[0]), tr_test_tensor_free(&in[1]), tr_test_tensor_free(&y);
        }
}

/* Mistral's bf16 path rounds x̂ before the weight, as MistralRMSNorm does: with w = 1
 * the output is x̂ rounded once, and with w = 3 it is 3·round(x̂) rounded again, which
 * one rounding of 3·x̂ would not always give. */
static void test_rms_norm_hf_rounding(void **state) {
    (void)state;
    const int64_t R = 64, D = 64;
    struct tr_tensor in[2] = {TENSOR(TR_DTYPE_BF16, R, D), TENSOR(TR_DTYPE_BF16, D)};
    struct tr_tensor y = TENSOR(TR_DTYPE_BF16, R, D);
    tr_test_randn(&in[0], 5, 1.0);
    uint16_t *w = in[1].data;
    for (int64_t i = 0; i < D; i++) w[i] = tr_f32_to_bf16(3.0f);
    struct tr_attrs at = {.floats = {1e-5f}};
    run(TR_OP_RMS_NORM, &at, 2, in, &y);
    double *x = tr_test_to_f64(&in[0]);
    int64_t once_differs = 0;
    for (int64_t r = 0; r < R; r++) {
        float ss = 0;
        for (int64_t i = 0; i < D; i++) ss += (float)(x[r * D + i] * x[r * D + i]);
        float rs = 1.0f / sqrtf(ss / (float)D + 1e-5f);
        for (int64_t i = 0; i < D; i++) {
            float xh = (float)x[r * D + i] * rs;
            uint16_t twice = tr_f32_to_bf16(3.0f * tr_bf16_to_f32(tr_f32_to_bf16(xh)));
            uint16_t once = tr_f32_to_bf16(3.0f * xh);
            uint16_t got = ((uint16_t *)y.data)[r * D + i];
            once_differs += once != twice;
            /* the f32 sum may differ from the kernel's by an ulp: allow one bf16 ulp */
            if (abs((int)got - (int)twice) > 1) fail_msg("row %lld col %lld: got %04x, HF gives %04x", (long long)r,
                                                          (long long)i, got, twice);
        }
    }
    assert_true(once_differs > 0); /* the case is one where the two orders differ */
    free(x);
    tr_test_tensor_free(&in[0]), tr_test_tensor_free(&in[1]), tr_test_tensor_free(&y);
}

static void test_rms_norm_grads(void **state) {
    (void)state;
    const int64_t rows = 7, D = 40;
    for (int d = 0; d < N_DTS; d++)
        for (int add_one = 0; add_one < 2; add_one++) {
            enum tr_dtype dt = DTS[d];
            struct tr_tensor x = TENSOR(dt, rows, D), w = TENSOR(dt, D), dy = TENSOR(dt, rows, D);
            struct tr_tensor dx = TENSOR(dt, rows, D), dw = TENSOR(dt, D);
            tr_test_randn(&x, 21 + d, 1.5), tr_test_randn(&w, 22 + d, 1.0), tr_test_randn(&dy, 23 + d, 1.0);
            double *xv = tr_test_to_f64(&x), *wv = tr_test_to_f64(&w), *gv = tr_test_to_f64(&dy);
            double *ref = malloc(sizeof(double) * (size_t)(rows * D));
            struct tr_attrs at = {.ints = {add_one}, .floats = {1e-6f}, .n_ints = 1};
            struct tr_tensor gin[3] = {x, w, dy}, win[2] = {x, dy};
            run(TR_OP_RMS_NORM_GRAD, &at, 3, gin, &dx);
            tr_ref_rms_norm_grad(xv, wv, gv, rows, D, 1e-6, add_one, ref);
            check(add_one ? "rms_norm_grad (1 + w)" : "rms_norm_grad", dt, &dx, ref);
            bound_matches(TR_OP_RMS_NORM_GRAD, &at, 3, gin, &dx);
            run(TR_OP_RMS_NORM_GRAD_W, &at, 2, win, &dw);
            tr_ref_rms_norm_grad_w(xv, gv, rows, D, 1e-6, ref);
            check("rms_norm_grad_w", dt, &dw, ref);
            bound_matches(TR_OP_RMS_NORM_GRAD_W, &at, 2, win, &dw);
            free(xv), free(wv), free(gv), free(ref);
            tr_test_tensor_free(&x), tr_test_tensor_free(&w), tr_test_tensor_free(&dy);
            tr_test_tensor_free(&dx), tr_test_tensor_free(&dw);
        }
    /* dw in f32 for bf16 data (the master-weight case), against the same reference */
    struct tr_tensor x = TENSOR(TR_DTYPE_BF16, rows, D), dy = TENSOR(TR_DTYPE_BF16, rows, D);
    struct tr_tensor dw = TENSOR(TR_DTYPE_F32, D);
    tr_test_randn(&x, 31, 1.0), tr_test_randn(&dy, 32, 1.0);
    double *xv = tr_test_to_f64(&x), *gv = tr_test_to_f64(&dy), ref[40];
    struct tr_attrs at = {.floats = {1e-6f}};
    run(TR_OP_RMS_NORM_GRAD_W, &at, 2, (struct tr_tensor[]){x, dy}, &dw);
    tr_ref_rms_norm_grad_w(xv, gv, rows, D, 1e-6, ref);
    check("rms_norm_grad_w into f32", TR_DTYPE_F32, &dw, ref);
    free(xv), free(gv);
    tr_test_tensor_free(&x), tr_test_tensor_free(&dy), tr_test_tensor_free(&dw);
}

/* pos (T) i32 with an offset, or (B,T) i64 with a different offset per row (decoding,
 * left padding). */
static struct tr_tensor make_pos(int batched, int64_t B, int64_t T, int64_t offset) {
    struct tr_tensor p = batched ? TENSOR(TR_DTYPE_I64, B, T) : TENSOR(TR_DTYPE_I32, T);
    for (int64_t b = 0; b < (batched ? B : 1); b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t v = offset + t + b * 97;
            if (batched) ((int64_t *)p.data)[b * T + t] = v;
            else ((int32_t *)p.data)[t] = (int32_t)v;
        }
    return p;
}

static void test_rope(void **state) {
    (void)state;
    const int64_t B = 2, H = 3, T = 5, D = 24;
    struct cfg { int64_t R; int batched; int64_t offset; float base; const char *what; } cases[] = {
        {0, 0, 0, 10000.0f, "R = D, pos (T) from 0"},
        {8, 0, 37, 10000.0f, "partial R 8, pos (T) from 37"},
        {24, 1, 500, 1e6f, "R 24, pos (B,T) from 500, theta 1e6"},
        {12, 1, 3, 10000.0f, "partial R 12, pos (B,T) from 3"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int d = 0; d < N_DTS; d++) {
            enum tr_dtype dt = DTS[d];
            const struct cfg *cf = &cases[c];
            struct tr_tensor in[2] = {TENSOR(dt, B, H, T, D), make_pos(cf->batched, B, T, cf->offset)};
            struct tr_tensor y = TENSOR(dt, B, H, T, D), back = TENSOR(dt, B, H, T, D);
            tr_test_randn(&in[0], 40 + c * 7 + d, 1.0);
            double *x = tr_test_to_f64(&in[0]), *ref = malloc(sizeof(double) * (size_t)(B * H * T * D));
            int64_t R = cf->R ? cf->R : D;
            struct tr_attrs at = {.ints = {cf->R, 0}, .floats = {cf->base}, .n_ints = 2};
            run(TR_OP_ROPE, &at, 2, in, &y);
            ref_rope(x, &in[1], B, H, T, D, R, cf->base, 0, dt != TR_DTYPE_F64, ref);
            check(cf->what, dt, &y, ref);
            /* dims >= R pass through unchanged */
            size_t es = tr_dtype_size(dt);
            for (int64_t r = 0; r < B * H * T; r++)
                if (memcmp((char *)y.data + (r * D + R) * es, (char *)in[0].data + (r * D + R) * es,
                           (size_t)(D - R) * es) != 0)
                    fail_msg("%s (%s): row %lld's dims past R changed", cf->what, tr_dtype_name(dt), (long long)r);
            bound_matches(TR_OP_ROPE, &at, 2, in, &y);
            /* the inverse rotation against its reference, and undoing the forward */
            struct tr_attrs inv = at;
            inv.ints[1] = 1;
            struct tr_tensor yin[2] = {y, in[1]};
            run(TR_OP_ROPE, &inv, 2, yin, &back);
            double *yv = tr_test_to_f64(&y);
            ref_rope(yv, &in[1], B, H, T, D, R, cf->base, 1, dt != TR_DTYPE_F64, ref);
            check("inverse rope", dt, &back, ref);
            char what[160];
            snprintf(what, sizeof what, "inverse undoes the forward, %s", cf->what);
            check(what, dt, &back, x);
            /* in place */
            struct tr_tensor alias[2] = {TENSOR(dt, B, H, T, D), in[1]};
            memcpy(alias[0].data, in[0].data, tr_tensor_nbytes(&in[0]));
            assert_int_equal(tr_kernels_run(K, TR_OP_ROPE, &at, 2, alias, &alias[0], NULL), TR_OK);
            assert_memory_equal(alias[0].data, y.data, tr_tensor_nbytes(&y));
            tr_test_tensor_free(&alias[0]);
            free(x), free(yv), free(ref);
            tr_test_tensor_free(&in[0]), tr_test_tensor_free(&in[1]), tr_test_tensor_free(&y), tr_test_tensor_free(&back);
        }
}

/* The decode step: a position offset is the same rotation as the full sequence's row. */
static void test_rope_decode_offset(void **state) {
    (void)state;
    const int64_t H = 2, T = 9, D = 16;
    struct tr_tensor in[2] = {TENSOR(TR_DTYPE_F32, 1, H, T, D), make_pos(0, 1, T, 0)};
    struct tr_tensor y = TENSOR(TR_DTYPE_F32, 1, H, T, D);
    tr_test_randn(&in[0], 77, 1.0);
    struct tr_attrs at = {.floats = {10000.0f}};
    run(TR_OP_ROPE, &at, 2, in, &y);
    struct tr_tensor one[2] = {TENSOR(TR_DTYPE_F32, 1, H, 1, D), TENSOR(TR_DTYPE_I64, 1, 1)};
    struct tr_tensor y1 = TENSOR(TR_DTYPE_F32, 1, H, 1, D);
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++)
            memcpy((float *)one[0].data + h * D, (float *)in[0].data + (h * T + t) * D, sizeof(float) * (size_t)D);
        ((int64_t *)one[1].data)[0] = t;
        run(TR_OP_ROPE, &at, 2, one, &y1);
        for (int64_t h = 0; h < H; h++)
            assert_memory_equal((float *)y1.data + h * D, (float *)y.data + (h * T + t) * D, sizeof(float) * (size_t)D);
    }
    tr_test_tensor_free(&in[0]), tr_test_tensor_free(&in[1]), tr_test_tensor_free(&y);
    tr_test_tensor_free(&one[0]), tr_test_tensor_free(&one[1]), tr_test_tensor_free(&y1);
}

static void test_kernel_errors(void **state) {
    (void)state;
    struct tr_tensor x = TENSOR(TR_DTYPE_F32, 2, 2, 3, 8), y = TENSOR(TR_DTYPE_F32, 2, 2, 3, 8);
    struct tr_tensor pos = TENSOR(TR_DTYPE_I32, 3), fpos = TENSOR(TR_DTYPE_F32, 3), lpos = TENSOR(TR_DTYPE_I32, 4);
    tr_test_randn(&x, 1, 1.0);
    memset(pos.data, 0, tr_tensor_nbytes(&pos));
    struct tr_attrs at = {.ints = {0, 0}, .floats = {10000.0f}};
    run_fails(TR_OP_ROPE, &at, 2, (struct tr_tensor[]){x, fpos}, &y, TR_ERR_SHAPE, "i32 or i64");
    run_fails(TR_OP_ROPE, &at, 2, (struct tr_tensor[]){x, lpos}, &y, TR_ERR_SHAPE, "(T) [3]");
    struct tr_attrs odd = at;
    odd.ints[0] = 5;
    run_fails(TR_OP_ROPE, &odd, 2, (struct tr_tensor[]){x, pos}, &y, TR_ERR_INVALID, "even");
    struct tr_attrs nobase = {.ints = {0, 0}};
    run_fails(TR_OP_ROPE, &nobase, 2, (struct tr_tensor[]){x, pos}, &y, TR_ERR_INVALID, "base");
    struct tr_tensor w = TENSOR(TR_DTYPE_F32, 7);
    struct tr_attrs eps = {.floats = {1e-6f}};
    run_fails(TR_OP_RMS_NORM, &eps, 2, (struct tr_tensor[]){x, w}, &y, TR_ERR_SHAPE, "should be [8]");
    struct tr_attrs two = {.ints = {2}, .floats = {1e-6f}};
    struct tr_tensor w8 = TENSOR(TR_DTYPE_F32, 8);
    run_fails(TR_OP_RMS_NORM, &two, 2, (struct tr_tensor[]){x, w8}, &y, TR_ERR_INVALID, "add_one");
    struct tr_kernel_call c;
    struct tr_error err = {0};
    assert_int_equal(tr_kernels_bind(K, TR_OP_ROPE, &odd, 2, (struct tr_tensor[]){x, pos}, &y, &c, &err), TR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "even"));
    assert_true(tr_kernels_supports(TR_OP_RMS_NORM, TR_DTYPE_BF16));
    assert_true(tr_kernels_supports(TR_OP_ROPE, TR_DTYPE_F16));
    assert_true(tr_kernels_supports(TR_OP_RMS_NORM_GRAD_W, TR_DTYPE_F32));
    assert_false(tr_kernels_supports(TR_OP_ROPE, TR_DTYPE_I32));
    tr_test_tensor_free(&x), tr_test_tensor_free(&y), tr_test_tensor_free(&pos), tr_test_tensor_free(&fpos);
    tr_test_tensor_free(&lpos), tr_test_tensor_free(&w), tr_test_tensor_free(&w8);
}

/* ---- Hugging Face to the bit: GemmaRMSNorm, MistralRMSNorm, apply_rotary_pos_emb ----
 * tests/fixtures/make_llm_ops_fixture.py wrote their outputs in f32 and bf16. In bf16
 * the kernels round where torch rounds, so every element must be HF's or, where the
 * f32 sum of squares was added in another order, one bf16 ulp from it (99% exact). */

#define HF_FIXTURE TR_SOURCE_DIR "/tests/fixtures/llm_ops_hf.safetensors"

static struct tr_tensor hf_get(const struct tr_safetensors *st, const char *dt, const char *name) {
    char full[64];
    snprintf(full, sizeof full, "%s%s%s", dt, dt[0] ? "." : "", name);
    struct tr_tensor t;
    struct tr_error e = {0};
    if (tr_safetensors_get(st, full, &t, &e))
        fail_msg("%s (regenerate it: python3 tests/fixtures/make_llm_ops_fixture.py)", e.msg);
    return t;
}

static void hf_compare(const char *what, const struct tr_tensor *out, const struct tr_tensor *ref) {
    assert_int_equal(out->dtype, ref->dtype);
    assert_int_equal(tr_tensor_numel(out), tr_tensor_numel(ref));
    double *r = tr_test_to_f64(ref);
    double e = tr_test_rel_err(out, r);
    free(r);
    int64_t n = tr_tensor_numel(out), exact = 0, far = 0;
    for (int64_t i = 0; i < n && out->dtype == TR_DTYPE_BF16; i++) {
        int a = ((const uint16_t *)out->data)[i], b = ((const uint16_t *)ref->data)[i];
        exact += a == b;
        far += abs(a - b) > 1;
    }
    print_message("%-40s rel err %.2e vs transformers%s\n", what, e, out->dtype == TR_DTYPE_BF16 ? "" : " (f32)");
    if (out->dtype == TR_DTYPE_BF16) {
        print_message("%-40s %lld of %lld bit-identical\n", "", (long long)exact, (long long)n);
        if (far || exact < n - n / 100)
            fail_msg("%s: %lld of %lld elements bit-identical to transformers, %lld more than one ulp away", what,
                     (long long)exact, (long long)n, (long long)far);
    } else if (!(e < 1e-6)) {
        fail_msg("%s: relative error %.3g from transformers (f32, tolerance 1e-6)", what, e);
    }
}

static void test_hf_parity(void **state) {
    (void)state;
    struct tr_safetensors *st = NULL;
    struct tr_error e = {0};
    if (tr_safetensors_open(HF_FIXTURE, &st, &e)) fail_msg("%s", e.msg);
    struct tr_tensor pos = hf_get(st, "", "pos"), pos_t = hf_get(st, "", "pos_t");
    for (int d = 0; d < 2; d++) {
        const char *dn = d ? "bf16" : "f32";
        struct tr_tensor x = hf_get(st, dn, "x"), q = hf_get(st, dn, "q");
        struct tr_tensor y = tr_test_tensor(x.dtype, x.ndim, x.shape), qy = tr_test_tensor(q.dtype, q.ndim, q.shape);
        char what[80];
        for (int gemma = 0; gemma < 2; gemma++) {
            struct tr_tensor in[2] = {x, hf_get(st, dn, gemma ? "gemma_w" : "mistral_w")};
            struct tr_attrs at = {.ints = {gemma}, .floats = {gemma ? 1e-6f : 1e-5f}};
            run(TR_OP_RMS_NORM, &at, 2, in, &y);
            struct tr_tensor ref = hf_get(st, dn, gemma ? "gemma_y" : "mistral_y");
            snprintf(what, sizeof what, "%s %s", dn, gemma ? "GemmaRMSNorm" : "MistralRMSNorm");
            hf_compare(what, &y, &ref);
        }
        struct tr_attrs at = {.floats = {1e6f}};
        run(TR_OP_ROPE, &at, 2, (struct tr_tensor[]){q, pos}, &qy);
        struct tr_tensor ref = hf_get(st, dn, "q_rope");
        snprintf(what, sizeof what, "%s rope, pos (B,T) from 3 and 1000", dn);
        hf_compare(what, &qy, &ref);
        at.floats[0] = 10000.0f;
        run(TR_OP_ROPE, &at, 2, (struct tr_tensor[]){q, pos_t}, &qy);
        ref = hf_get(st, dn, "q_rope_t");
        snprintf(what, sizeof what, "%s rope, pos (T) from 5", dn);
        hf_compare(what, &qy, &ref);
        tr_test_tensor_free(&y), tr_test_tensor_free(&qy);
    }
    tr_safetensors_close(st);
}

/* ---- gradient rules: f64 graphs evaluated node by node by the reference evaluator
 * (tests/ref), differentiated by central differences ---- */

static int param(struct tr_ref_gx *t, const char *name, int nd, const int64_t *sh) {
    return tr_ref_gx_param(t, name, TR_REF_SIGNED, nd, sh);
}

/* i64 positions from offset, 3 apart, so the rows of a (B,T) differ. */
static int pos_input(struct tr_ref_gx *t, int nd, const int64_t *sh, int64_t offset) {
    int64_t n = tr_shape_numel(nd, sh), *vals = malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) vals[i] = offset + i * 3;
    int id = tr_ref_gx_ids(t, "pos", nd, sh, vals);
    free(vals);
    return id;
}

static void test_grad_rms_norm(void **state) {
    (void)state;
    for (int add_one = 0; add_one < 2; add_one++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = param(t, "x", 3, SH(2, 3, 6)), w = param(t, "w", 1, SH(6));
        int y = tr_rms_norm(t->g, x, w, 1e-6f, add_one);
        /* x feeds the loss twice, so its gradient is an accumulation */
        int loss = tr_ref_gx_loss(t, tr_add(t->g, y, x));
        int before = tr_graph_n_nodes(t->g);
        int wrt[2] = {x, w};
        tr_ref_gx_check(t, add_one ? "rms_norm (1 + w): dx, dw" : "rms_norm w: dx, dw", loss, 2, wrt);
        assert_int_equal(tr_ref_count_op(t->g, before, TR_OP_RMS_NORM_GRAD), 1);
        assert_int_equal(tr_ref_count_op(t->g, before, TR_OP_RMS_NORM_GRAD_W), 1);
        tr_ref_gx_free(t);
    }
    /* only w: no dx node */
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = param(t, "x", 2, SH(4, 5)), w = param(t, "w", 1, SH(5));
    int loss = tr_ref_gx_loss(t, tr_rms_norm(t->g, x, w, 1e-5f, 1));
    int before = tr_graph_n_nodes(t->g);
    tr_ref_gx_check(t, "rms_norm: dw only", loss, 1, &w);
    assert_int_equal(tr_ref_count_op(t->g, before, TR_OP_RMS_NORM_GRAD), 0);
    tr_ref_gx_free(t);
}

static void test_grad_rope(void **state) {
    (void)state;
    struct cfg { int64_t R; int batched; int64_t offset; float base; const char *what; } cases[] = {
        {0, 0, 0, 10000.0f, "rope R = D, pos (T)"},
        {4, 1, 11, 10000.0f, "rope partial R 4, pos (B,T) offset 11"},
        {6, 0, 300, 1e6f, "rope R 6, pos (T) offset 300, theta 1e6"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        int x = param(t, "x", 4, SH(2, 2, 3, 8));
        int pos = cases[c].batched ? pos_input(t, 2, SH(2, 3), cases[c].offset) : pos_input(t, 1, SH(3), cases[c].offset);
        int y = tr_rope(t->g, x, pos, cases[c].base, (int)cases[c].R);
        int loss = tr_ref_gx_loss(t, y);
        int before = tr_graph_n_nodes(t->g);
        tr_ref_gx_check(t, cases[c].what, loss, 1, &x);
        assert_int_equal(tr_ref_count_op(t->g, before, TR_OP_ROPE), 1);
        for (int i = before; i < tr_graph_n_nodes(t->g); i++)
            if (tr_node_op(t->g, i) == TR_OP_ROPE) assert_int_equal(tr_node_attrs(t->g, i)->ints[1], 1);
        tr_ref_gx_free(t);
    }
    /* the gradient of the inverse rotation is the forward one */
    struct tr_ref_gx *t = tr_ref_gx_new();
    int x = param(t, "x", 4, SH(1, 2, 4, 6));
    int pos = pos_input(t, 1, SH(4), 5);
    struct tr_attrs a = {.ints = {0, 1}, .floats = {500.0f}, .n_ints = 2};
    int in[2] = {x, pos};
    int loss = tr_ref_gx_loss(t, tr_graph_add_node(t->g, TR_OP_ROPE, 2, in, &a));
    tr_ref_gx_check(t, "rope inverse", loss, 1, &x);
    tr_ref_gx_free(t);
}

/* A small decoder attention: rms norm, rope on q and k, attention with grouped heads
 * (H 4, Hk 2), causal and a window of 2, then rms norm again; every leaf's gradient. */
static void test_grad_decoder_attention(void **state) {
    (void)state;
    for (int window = 0; window <= 2; window += 2) {
        struct tr_ref_gx *t = tr_ref_gx_new();
        struct tr_graph *g = t->g;
        int q = param(t, "q", 4, SH(1, 4, 5, 4)), k = param(t, "k", 4, SH(1, 2, 5, 4));
        int v = param(t, "v", 4, SH(1, 2, 5, 3));
        int wq = param(t, "wq", 1, SH(4)), wo = param(t, "wo", 1, SH(3));
        int pos = pos_input(t, 1, SH(5), 7);
        int qn = tr_rms_norm(g, q, wq, 1e-6f, 1);
        int qr = tr_rope(g, qn, pos, 10000.0f, 0), kr = tr_rope(g, k, pos, 10000.0f, 2);
        int att = tr_attention(g, qr, kr, v, -1, 0.6f, 1, window);
        int loss = tr_ref_gx_loss(t, tr_rms_norm(g, att, wo, 1e-6f, 0));
        int wrt[5] = {q, k, v, wq, wo};
        tr_ref_gx_check(t, window ? "decoder attention: GQA, causal, window 2" : "decoder attention: GQA, causal", loss, 5,
                   wrt);
        tr_ref_gx_free(t);
    }
}

static void test_grad_pos_refused(void **state) {
    (void)state;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_param(g, "x", TR_DTYPE_F32, 4, SH(1, 1, 2, 4), 0, 1);
    int pos = tr_input(g, "pos", TR_DTYPE_I32, 1, SH(2));
    int loss = tr_reduce(g, TR_OP_SUM, tr_reshape(g, tr_rope(g, x, pos, 10000.0f, 0), 1, SH(-1)), 0, 0);
    int gr, wrt = pos;
    struct tr_error err = {0};
    /* an integer wrt is refused by name */
    assert_int_not_equal(tr_grad(g, loss, 1, &wrt, &gr, &err), TR_OK);
    assert_non_null(strstr(err.msg, "pos"));
    tr_graph_free(g);
}

/* ---- shape inference, dump, FLOPs ---- */

static struct tr_graph *fresh_graph(void) {
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    return g;
}

static int x4(struct tr_graph *g) { return tr_input(g, "x", TR_DTYPE_BF16, 4, SH(2, 4, 6, 8)); }

/* rope(x, p, base, rot) refused: x is x4 unless x3d (f32[4,6,8]); p of pos_dt, pos_ndim, pos_shape. */
struct rope_refusal {
    const char *what;
    int x3d;
    enum tr_dtype pos_dt;
    int pos_ndim;
    int64_t pos_shape[2];
    float base;
    int rot;
    const char *needles[6];
};

static const struct rope_refusal rope_refusals[] = {
    {"pos f32", 0, TR_DTYPE_F32, 1, {6}, 10000.0f, 0, {"node 2 rope", "pos f32[6]", "i32 or i64", NULL}},
    {"pos length", 0, TR_DTYPE_I32, 1, {5}, 10000.0f, 0,
     {"rope", "pos i32[5]", "(T) [6]", "(B,T) [2,6]", "bf16[2,4,6,8]", NULL}},
    {"pos batch", 0, TR_DTYPE_I64, 2, {3, 6}, 10000.0f, 0, {"rope", "pos i64[3,6]", NULL}},
    {"odd R", 0, TR_DTYPE_I32, 1, {6}, 10000.0f, 5, {"rope", "R=5", "even", "D=8", NULL}},
    {"R > D", 0, TR_DTYPE_I32, 1, {6}, 10000.0f, 10, {"R=10", "D=8", NULL}},
    {"x 3-D", 1, TR_DTYPE_I32, 1, {6}, 10000.0f, 0, {"x f32[4,6,8]", "4-D (B,H,T,D)", NULL}},
    {"base 0", 0, TR_DTYPE_I32, 1, {6}, 0.0f, 0, {"base 0", NULL}},
};

/* rms_norm(x4, w, eps, add_one) refused, w a param of w_dt and shape [w_len]. */
struct rms_norm_refusal {
    const char *what;
    enum tr_dtype w_dt;
    int64_t w_len;
    float eps;
    int add_one;
    const char *needles[4];
};

static const struct rms_norm_refusal rms_norm_refusals[] = {
    {"w shape", TR_DTYPE_BF16, 6, 1e-6f, 1, {"node 2 rms_norm", "w is bf16[6]", "expected [8]", NULL}},
    {"w dtype", TR_DTYPE_F32, 8, 1e-6f, 0, {"rms_norm", "dtypes differ", NULL}},
    {"eps", TR_DTYPE_BF16, 8, -1.0f, 0, {"eps -1", NULL}},
    {"add_one", TR_DTYPE_BF16, 8, 1e-6f, 3, {"add_one 3", NULL}},
};

static void test_infer(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof rope_refusals / sizeof rope_refusals[0]; i++) {
        const struct rope_refusal *c = &rope_refusals[i];
        struct tr_graph *g = fresh_graph();
        int x = c->x3d ? tr_input(g, "x", TR_DTYPE_F32, 3, SH(4, 6, 8)) : x4(g);
        int p = tr_input(g, "p", c->pos_dt, c->pos_ndim, c->pos_shape);
        tr_test_expect_refused(c->what, g, tr_rope(g, x, p, c->base, c->rot), c->needles);
    }
    for (size_t i = 0; i < sizeof rms_norm_refusals / sizeof rms_norm_refusals[0]; i++) {
        const struct rms_norm_refusal *c = &rms_norm_refusals[i];
        struct tr_graph *g = fresh_graph();
        int x = x4(g);
        int w = tr_param(g, "w", c->w_dt, 1, &c->w_len, 0, 1);
        tr_test_expect_refused(c->what, g, tr_rms_norm(g, x, w, c->eps, c->add_one), c->needles);
    }
    {
        /* rms_norm_grad_w with a dy of another shape than x */
        struct tr_graph *g = fresh_graph();
        int x = x4(g);
        int in[2] = {x, tr_input(g, "dy", TR_DTYPE_BF16, 4, SH(2, 4, 6, 7))};
        struct tr_attrs a = {.floats = {1e-6f}};
        tr_test_expect_refused("grad dy", g, tr_graph_add_node(g, TR_OP_RMS_NORM_GRAD_W, 2, in, &a),
                       (const char *[]){"rms_norm_grad_w", "dy bf16[2,4,6,7]", NULL});
    }

    /* accepted forms: shapes, dtypes, R normalised, dump and FLOPs */
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = x4(g);
    int w = tr_param(g, "w", TR_DTYPE_BF16, 1, SH(8), 0, 1);
    int n = tr_rms_norm(g, x, w, 1e-6f, 1);
    int p1 = tr_input(g, "p1", TR_DTYPE_I32, 1, SH(6)), p2 = tr_input(g, "p2", TR_DTYPE_I64, 2, SH(2, 6));
    int r1 = tr_rope(g, n, p1, 10000.0f, 0), r2 = tr_rope(g, n, p2, 1e6f, 4);
    int in[3] = {x, w, r1};
    struct tr_attrs a = {.floats = {1e-6f}, .ints = {1}, .n_ints = 1};
    int gx_ = tr_graph_add_node(g, TR_OP_RMS_NORM_GRAD, 3, in, &a);
    int in2[2] = {x, r2};
    int gw = tr_graph_add_node(g, TR_OP_RMS_NORM_GRAD_W, 2, in2, &a);
    struct tr_error err = {0};
    if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(tr_node_dtype(g, r1), TR_DTYPE_BF16);
    assert_int_equal(tr_node_attrs(g, r1)->ints[0], 8); /* 0 normalised to D */
    assert_int_equal(tr_node_attrs(g, r2)->ints[0], 4);
    assert_int_equal(tr_node_ndim(g, gx_), 4);
    assert_int_equal(tr_node_ndim(g, gw), 1);
    assert_int_equal(tr_node_shape(g, gw)[0], 8);
    char *buf = tr_ref_dump(g);
    assert_non_null(strstr(buf, "rms_norm(%0, %1) eps=1e-06 add_one=1 : bf16[2,4,6,8]"));
    assert_non_null(strstr(buf, "rope(%2, %3) base=10000 rot_dims=8 : bf16"));
    assert_non_null(strstr(buf, "rope(%2, %4) base=1e+06 rot_dims=4"));
    assert_non_null(strstr(buf, "rms_norm_grad_w("));
    free(buf);
    /* 1 per output element for rms_norm, rope x2, rms_norm_grad; 1 per x element for _w */
    double e = 2.0 * 4 * 6 * 8;
    assert_true(tr_graph_flops(g) == 5 * e);
    tr_graph_free(g);
}

/* ---- every backend configuration on a graph of the new ops ---- */


/* The graph's two outputs on every backend configuration against their references:
 * what[i] names output i in a failure, name[i] in the printed errors. */
static void on_backends(struct tr_graph *g, enum tr_dtype dt, const struct tr_tensor *in,
                        const char *const *what, const char *const *name, const double *const *ref) {
    for (int c = 0; c < TR_TEST_N_BACKENDS; c++) {
        struct tr_tensor out[2];
        tr_test_run_backend(&tr_test_backends[c], tr_test_dir, g, in, 2, out, NULL);
        for (int i = 0; i < 2; i++) {
            char buf[120];
            snprintf(buf, sizeof buf, "%s: %s", tr_test_backends[c].label, what[i]);
            check(buf, dt, &out[i], ref[i]);
        }
        print_message("%-5s %-22s %s %.2e  %s %.2e\n", tr_dtype_name(dt), tr_test_backends[c].label, name[0],
                      tr_test_rel_err(&out[0], ref[0]), name[1], tr_test_rel_err(&out[1], ref[1]));
        tr_test_tensor_free(&out[0]), tr_test_tensor_free(&out[1]);
    }
}

static void backends_case(enum tr_dtype dt) {
    const int64_t B = 2, H = 4, Hk = 2, T = 6, D = 8;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", dt, 4, SH(B, H, T, D));
    int pos = tr_input(g, "pos", TR_DTYPE_I32, 2, SH(B, T));
    int kk = tr_input(g, "k", dt, 4, SH(B, Hk, T, D));
    int vv = tr_input(g, "v", dt, 4, SH(B, Hk, T, D));
    int w = tr_param(g, "w", dt, 1, SH(D), 0, 1);
    int q = tr_rope(g, tr_rms_norm(g, x, w, 1e-6f, 1), pos, 10000.0f, 4);
    int kr = tr_rope(g, kk, pos, 10000.0f, 0);
    int att = tr_attention(g, q, kr, vv, -1, 0.35f, 1, 3);
    int y = tr_rms_norm(g, att, w, 1e-5f, 0);
    assert_int_equal(tr_graph_set_output(g, q, "q"), TR_OK);
    assert_int_equal(tr_graph_set_output(g, y, "y"), TR_OK);
    struct tr_tensor wt = TENSOR(dt, D);
    tr_test_randn(&wt, 3, 0.5);
    struct tr_error err = {0};
    assert_int_equal(tr_graph_bind_param(g, w, wt.data, &err), TR_OK);
    if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);

    struct tr_tensor in[4] = {TENSOR(dt, B, H, T, D), TENSOR(TR_DTYPE_I32, B, T), TENSOR(dt, B, Hk, T, D),
                              TENSOR(dt, B, Hk, T, D)};
    tr_test_randn(&in[0], 4, 1.0), tr_test_randn(&in[2], 5, 1.0), tr_test_randn(&in[3], 6, 1.0);
    for (int64_t i = 0; i < B * T; i++) ((int32_t *)in[1].data)[i] = (int32_t)(i % T + (i / T) * 4 + 2);

    /* the f64 reference of both outputs, from the rounded inputs */
    double *xv = tr_test_to_f64(&in[0]), *kv = tr_test_to_f64(&in[2]), *vv_ = tr_test_to_f64(&in[3]);
    double *wv = tr_test_to_f64(&wt);
    int64_t nq = B * H * T * D, nk = B * Hk * T * D;
    double *t1 = malloc(sizeof(double) * (size_t)nq), *qref = malloc(sizeof(double) * (size_t)nq);
    double *kref = malloc(sizeof(double) * (size_t)nk), *aref = malloc(sizeof(double) * (size_t)nq);
    double *yref = malloc(sizeof(double) * (size_t)nq);
    tr_ref_rms_norm(xv, wv, B * H * T, D, 1e-6, 1, t1);
    ref_rope(t1, &in[1], B, H, T, D, 4, 10000.0f, 0, 1, qref);
    ref_rope(kv, &in[1], B, Hk, T, D, D, 10000.0f, 0, 1, kref);
    const struct tr_ref_attn ac = {B, H, Hk, T, T, D, D, 0.35, 1, 3, {0, NULL, NULL}, NULL, NULL, 0, 0};
    tr_ref_attention(&ac, qref, kref, vv_, aref);
    tr_ref_rms_norm(aref, wv, B * H * T, D, 1e-5, 0, yref);

    on_backends(g, dt, in, (const char *[]){"rms_norm+rope", "attention GQA causal window, rms_norm"},
                (const char *[]){"q", "y"}, (const double *[]){qref, yref});
    free(xv), free(kv), free(vv_), free(wv), free(t1), free(qref), free(kref), free(aref), free(yref);
    tr_test_tensors_free(4, in);
    tr_test_tensor_free(&wt);
    tr_graph_free(g);
}

/* The backward of rope(rms_norm(x, w)) on every backend: d/dx and d/dw of SUM(y·r). */
static void backends_grad_case(enum tr_dtype dt) {
    const int64_t B = 2, H = 2, T = 5, D = 8, n = B * H * T * D;
    struct tr_graph *g;
    assert_int_equal(tr_graph_init(&g, NULL), TR_OK);
    int x = tr_input(g, "x", dt, 4, SH(B, H, T, D));
    int pos = tr_input(g, "pos", TR_DTYPE_I64, 2, SH(B, T));
    int w = tr_param(g, "w", dt, 1, SH(D), 0, 1);
    struct tr_tensor rt = TENSOR(dt, B, H, T, D), wt = TENSOR(dt, D);
    tr_test_randn(&rt, 8, 1.0), tr_test_randn(&wt, 9, 0.5);
    int r = tr_const(g, "r", dt, 4, SH(B, H, T, D), rt.data);
    int y = tr_rope(g, tr_rms_norm(g, x, w, 1e-6f, 1), pos, 10000.0f, 4);
    int l = tr_mul(g, y, r);
    while (l >= 0 && tr_node_ndim(g, l) > 0) l = tr_reduce(g, TR_OP_SUM, l, 0, 0);
    int wrt[2] = {x, w}, grads[2];
    struct tr_error err = {0};
    if (tr_grad(g, l, 2, wrt, grads, &err)) fail_msg("tr_grad: %s", err.msg);
    assert_int_equal(tr_graph_set_output(g, grads[0], "dx"), TR_OK);
    assert_int_equal(tr_graph_set_output(g, grads[1], "dw"), TR_OK);
    assert_int_equal(tr_graph_bind_param(g, w, wt.data, &err), TR_OK);
    if (tr_graph_status(g, &err)) fail_msg("%s", err.msg);
    struct tr_tensor in[2] = {TENSOR(dt, B, H, T, D), make_pos(1, B, T, 9)};
    tr_test_randn(&in[0], 10, 1.0);
    double *xv = tr_test_to_f64(&in[0]), *wv = tr_test_to_f64(&wt), *rv = tr_test_to_f64(&rt);
    double *dn = malloc(sizeof(double) * (size_t)n), *dx = malloc(sizeof(double) * (size_t)n), dw[8];
    ref_rope(rv, &in[1], B, H, T, D, 4, 10000.0f, 1, 1, dn);
    tr_ref_rms_norm_grad(xv, wv, dn, B * H * T, D, 1e-6, 1, dx);
    tr_ref_rms_norm_grad_w(xv, dn, B * H * T, D, 1e-6, dw);
    on_backends(g, dt, in, (const char *[]){"d rope(rms_norm)/dx", "d rope(rms_norm)/dw"},
                (const char *[]){"dx", "dw"}, (const double *[]){dx, dw});
    free(xv), free(wv), free(rv), free(dn), free(dx);
    tr_test_tensor_free(&in[0]), tr_test_tensor_free(&in[1]), tr_test_tensor_free(&rt), tr_test_tensor_free(&wt);
    tr_graph_free(g);
}

static void test_backends(void **state) {
    (void)state;
    assert_int_equal(tr_test_dir_setup(NULL), 0); /* the jax backend's cache, removed at the end */
    backends_case(TR_DTYPE_F32);
    backends_case(TR_DTYPE_BF16);
    backends_grad_case(TR_DTYPE_F32);
    backends_grad_case(TR_DTYPE_BF16);
    assert_int_equal(tr_test_dir_teardown(NULL), 0);
}

TR_TEST_MAIN(tr_test_kernels_setup, tr_test_kernels_teardown, test_rms_norm, test_rms_norm_hf_rounding,
             test_rms_norm_grads, test_rope, test_rope_decode_offset, test_kernel_errors, test_hf_parity,
             test_grad_rms_norm, test_grad_rope, test_grad_decoder_attention, test_grad_pos_refused, test_infer,
             test_backends)
