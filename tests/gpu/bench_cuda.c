/* The ceilings tests/gpu/run.sh measures on a GPU, through the kernels library as the
 * backends call it: cuBLASLt bf16 GEMM TFLOP/s at 8192³ (and tf32, f32 on f32 data),
 * device-to-device copy GB/s,
 * attention forward TFLOP/s at sequence 2048, and Stable Diffusion's UNet 3x3 convolution
 * at the predict row's batch (26 = 13 prompts, guided) through cuDNN and through im2col
 * into cuBLASLt (TRIDENT_CUDA_CONV's two paths), bf16 and f32 as tf32. Times are CUDA events around N
 * repetitions after a warm-up. Every CUDA call is checked: a timing that failed (or gave
 * no positive time) is printed as "error" and written as null, never as inf or NaN, and
 * the exit status is then 1. The JSON's keys name what was measured, its sizes beside them
 * (gemm_n, copy_bytes, attention_bhtd).
 *
 * Usage: trident_bench_cuda [--small] OUT.json
 *   --small  GEMM 256³, a 16 MiB copy, attention at B1 H2 T128 D64, conv 1x16x16x32: tests/gpu/run.sh's
 *            rehearsal on cuemu (tests/cuemu), where the real sizes would take hours */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"
#include "../../plugins/kernels/cuda/host/conv_plan.h"

#define CHECK(x)                                                                  \
    do {                                                                          \
        if ((x) != TR_OK) {                                                       \
            fprintf(stderr, "bench_cuda: %s: %s\n", #x, err.msg);                 \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static struct tr_error err;

static struct tr_tensor dev_tensor(struct tr_kernels *k, enum tr_dtype dt, int ndim, const int64_t *shape) {
    struct tr_tensor t;
    CHECK(tr_tensor_make(&t, NULL, dt, ndim, shape, &err));
    CHECK(tr_kernels_alloc(k, tr_tensor_nbytes(&t), &t.data, &err));
    t.device = TR_DEVICE_CUDA;
    /* small random-ish values (bf16 bit patterns of floats in about [-1, 1]) */
    size_t n = tr_tensor_nbytes(&t);
    unsigned char *h = malloc(n);
    uint32_t s = 12345;
    if (dt == TR_DTYPE_BF16 || dt == TR_DTYPE_F16) {
        for (size_t i = 0; i < n / 2; i++) {
            s = s * 1664525u + 1013904223u;
            float f = ((float)(s >> 8) / 16777216.0f - 0.5f);
            ((uint16_t *)h)[i] = dt == TR_DTYPE_BF16 ? tr_f32_to_bf16(f) : tr_f32_to_f16(f);
        }
    } else if (dt == TR_DTYPE_F32) {
        for (size_t i = 0; i < n / 4; i++) {
            s = s * 1664525u + 1013904223u;
            ((float *)h)[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        }
    } else {
        for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 7);
    }
    CHECK(tr_kernels_to_device(k, t.data, h, n, &err));
    free(h);
    return t;
}

static int failed; /* a timing failed: exit 1 */

static int cu_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "bench_cuda: %s: %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    failed = 1;
    return 0;
}

/* Milliseconds per call of fn over reps calls (after 2 warm-up calls); NAN when a CUDA
 * event call failed or the time is not positive. */
typedef void (*bench_fn)(struct tr_kernels *k, void *arg);
static double time_ms(struct tr_kernels *k, bench_fn fn, void *arg, int reps) {
    cudaStream_t s = (cudaStream_t)tr_kernels_cuda_stream(k);
    fn(k, arg);
    fn(k, arg);
    CHECK(tr_kernels_sync(k, &err));
    cudaEvent_t e0 = NULL, e1 = NULL;
    float ms = 0;
    int ok = cu_ok(cudaEventCreate(&e0), "cudaEventCreate") && cu_ok(cudaEventCreate(&e1), "cudaEventCreate") &&
             cu_ok(cudaEventRecord(e0, s), "cudaEventRecord (start)");
    if (ok) {
        for (int i = 0; i < reps; i++) fn(k, arg);
        ok = cu_ok(cudaEventRecord(e1, s), "cudaEventRecord (end)");
    }
    CHECK(tr_kernels_sync(k, &err));
    if (ok) ok = cu_ok(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (e0) (void)cu_ok(cudaEventDestroy(e0), "cudaEventDestroy");
    if (e1) (void)cu_ok(cudaEventDestroy(e1), "cudaEventDestroy");
    if (ok && !(ms > 0.0f && isfinite(ms))) {
        fprintf(stderr, "bench_cuda: a timing of %d calls gave %g ms\n", reps, (double)ms);
        failed = 1;
        ok = 0;
    }
    return ok ? (double)ms / reps : NAN;
}

/* work / time in units of 1/scale per second: NAN unless the time is a positive number */
static double rate(double work, double ms, double scale) {
    return isfinite(ms) && ms > 0 ? work / (ms * 1e-3) / scale : NAN;
}

/* One row of the table: the value, or "error". */
static void row(const char *name, double ms, double r, const char *unit) {
    if (isfinite(ms) && isfinite(r)) printf("%-44s %12.3f %9.1f %s\n", name, ms, r, unit);
    else printf("%-44s %12s %9s %s\n", name, "error", "-", unit);
}

/* "key": value (with fmt) or "key": null, then sep. */
static void jnum(FILE *f, const char *key, const char *fmt, double v, const char *sep) {
    fprintf(f, "  \"%s\": ", key);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
    fputs(sep, f);
}

struct mm_arg {
    struct tr_tensor a, b, c;
};
static void run_mm(struct tr_kernels *k, void *p) {
    struct mm_arg *m = p;
    struct tr_tensor in[2] = {m->a, m->b};
    CHECK(tr_kernels_run(k, TR_OP_MATMUL, NULL, 2, in, &m->c, &err));
}

struct copy_arg {
    void *dst, *src;
    size_t n;
};
static void run_copy(struct tr_kernels *k, void *p) {
    struct copy_arg *c = p;
    CHECK(tr_kernels_copy(k, c->dst, c->src, c->n, &err));
}

struct att_arg {
    struct tr_tensor q, kk, v, o;
    struct tr_attrs at;
};
static void run_att(struct tr_kernels *k, void *p) {
    struct att_arg *a = p;
    struct tr_tensor in[3] = {a->q, a->kk, a->v};
    CHECK(tr_kernels_run(k, TR_OP_ATTENTION, &a->at, 3, in, &a->o, &err));
}

struct conv_arg {
    struct tr_tensor x, w, b, y;
    struct tr_attrs at;
};
static void run_conv(struct tr_kernels *k, void *p) {
    struct conv_arg *c = p;
    struct tr_tensor in[3] = {c->x, c->w, c->b};
    CHECK(tr_kernels_run(k, TR_OP_CONV2D, &c->at, 3, in, &c->y, &err));
}

/* The UNet's 3x3 (N, S, S, C) -> C with bias, dtype dt, through path; *ran_cudnn says
 * whether cuDNN took it (else im2col did). NAN when the timing failed. */
static double time_conv(struct tr_kernels *k, enum tr_dtype dt, int64_t N, int64_t S, int64_t C,
                        enum tr_cuda_conv_mode path, int *ran_cudnn) {
    struct conv_arg c = {dev_tensor(k, dt, 4, (int64_t[]){N, S, S, C}), dev_tensor(k, dt, 4, (int64_t[]){C, C, 3, 3}),
                         dev_tensor(k, dt, 1, (int64_t[]){C}), dev_tensor(k, dt, 4, (int64_t[]){N, S, S, C}),
                         {.ints = {1, 1, 1, 1, 0}, .n_ints = 5}};
    const enum tr_cuda_conv_mode was = tr_cuda_conv_force(path);
    struct tr_cuda_conv_route_counts c0, c1;
    tr_cuda_conv_route_counts(&c0);
    double ms = time_ms(k, run_conv, &c, 10);
    tr_cuda_conv_route_counts(&c1);
    *ran_cudnn = c1.cudnn > c0.cudnn;
    tr_cuda_conv_force(was);
    tr_kernels_dealloc(k, c.x.data), tr_kernels_dealloc(k, c.w.data);
    tr_kernels_dealloc(k, c.b.data), tr_kernels_dealloc(k, c.y.data);
    return ms;
}

int main(int argc, char **argv) {
    const char *json = NULL;
    int small = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--small")) small = 1;
        else if (argv[i][0] != '-' && !json) json = argv[i];
        else {
            fprintf(stderr, "usage: trident_bench_cuda [--small] [OUT.json]\n");
            return 2;
        }
    }
    struct tr_kernels *k = NULL;
    if (tr_kernels_init(&k, TR_DEVICE_CUDA, 0, &err) != TR_OK) {
        printf("SKIPPED: %s (bench_cuda)\n", err.msg);
        return 2; /* no ceiling measured: not a pass */
    }
    struct cudaDeviceProp prop;
    if (!cu_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) {
        memset(&prop, 0, sizeof prop);
        snprintf(prop.name, sizeof prop.name, "unknown");
    }

    /* GEMM bf16 n³ (8192) */
    const int64_t n = small ? 256 : 8192;
    struct mm_arg mm = {dev_tensor(k, TR_DTYPE_BF16, 2, (int64_t[]){n, n}),
                        dev_tensor(k, TR_DTYPE_BF16, 2, (int64_t[]){n, n}),
                        dev_tensor(k, TR_DTYPE_BF16, 2, (int64_t[]){n, n})};
    double gemm_ms = time_ms(k, run_mm, &mm, 20);
    double gemm_tflops = rate(2.0 * n * n * n, gemm_ms, 1e12);

    /* The same GEMM on f32 data, as tf32 (tensor cores) and as strict f32: the ceilings
     * of the rows whose [run] math is tf32 or f32. */
    struct mm_arg mf = {dev_tensor(k, TR_DTYPE_F32, 2, (int64_t[]){n, n}),
                        dev_tensor(k, TR_DTYPE_F32, 2, (int64_t[]){n, n}),
                        dev_tensor(k, TR_DTYPE_F32, 2, (int64_t[]){n, n})};
    CHECK(tr_kernels_set_math(k, TR_MATH_TF32, &err));
    double tf32_ms = time_ms(k, run_mm, &mf, 10);
    CHECK(tr_kernels_set_math(k, TR_MATH_F32, &err));
    double f32_ms = time_ms(k, run_mm, &mf, 3);
    CHECK(tr_kernels_set_math(k, TR_MATH_DEFAULT, &err));
    double tf32_tflops = rate(2.0 * n * n * n, tf32_ms, 1e12);
    double f32_tflops = rate(2.0 * n * n * n, f32_ms, 1e12);
    tr_kernels_dealloc(k, mf.a.data);
    tr_kernels_dealloc(k, mf.b.data);
    tr_kernels_dealloc(k, mf.c.data);

    /* device-to-device copy, 1 GiB: bytes read + written */
    struct copy_arg cp = {NULL, NULL, (size_t)1 << (small ? 24 : 30)};
    CHECK(tr_kernels_alloc(k, cp.n, &cp.src, &err));
    CHECK(tr_kernels_alloc(k, cp.n, &cp.dst, &err));
    CHECK(tr_kernels_copy(k, cp.src, mm.a.data, tr_tensor_nbytes(&mm.a) < cp.n ? tr_tensor_nbytes(&mm.a) : cp.n, &err));
    double copy_ms = time_ms(k, run_copy, &cp, 20);
    double copy_gbs = rate(2.0 * (double)cp.n, copy_ms, 1e9);

    /* attention forward: B=8, H=16, T=2048, D=64, bf16, no mask */
    const int64_t B = small ? 1 : 8, H = small ? 2 : 16, T = small ? 128 : 2048, D = 64;
    int64_t sh[4] = {B, H, T, D};
    struct att_arg at;
    memset(&at, 0, sizeof at);
    at.q = dev_tensor(k, TR_DTYPE_BF16, 4, sh);
    at.kk = dev_tensor(k, TR_DTYPE_BF16, 4, sh);
    at.v = dev_tensor(k, TR_DTYPE_BF16, 4, sh);
    at.o = dev_tensor(k, TR_DTYPE_BF16, 4, sh);
    at.at.floats[0] = 0.125f;
    double att_ms = time_ms(k, run_att, &at, 10);
    double att_tflops = rate(4.0 * B * H * T * T * D, att_ms, 1e12);
    at.at.ints[0] = 1; /* causal: half the work */
    double attc_ms = time_ms(k, run_att, &at, 10);
    double attc_tflops = rate(2.0 * B * H * T * T * D, attc_ms, 1e12);
    at.at.ints[0] = 0; /* the CUDA-core kernel, for comparison */
    setenv("TRIDENT_CUDA_ATTENTION", "simple", 1);
    double atts_ms = time_ms(k, run_att, &at, 3);
    double atts_tflops = rate(4.0 * B * H * T * T * D, atts_ms, 1e12);
    unsetenv("TRIDENT_CUDA_ATTENTION");

    /* SD's UNet 3x3 at 64x64, 320 channels, batch 26: each path, bf16 and f32 as tf32 */
    const int64_t cN = small ? 1 : 26, cS = small ? 16 : 64, cC = small ? 32 : 320;
    const double conv_flops = 2.0 * cN * cS * cS * cC * cC * 9;
    double conv_ms[2][2]; /* [dtype bf16, f32 as tf32][cuDNN, im2col] */
    int conv_cudnn[2][2];
    CHECK(tr_kernels_set_math(k, TR_MATH_TF32, &err));
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 2; p++)
            conv_ms[d][p] = time_conv(k, d ? TR_DTYPE_F32 : TR_DTYPE_BF16, cN, cS, cC,
                                      p ? TR_CUDA_CONV_IM2COL : TR_CUDA_CONV_AUTO, &conv_cudnn[d][p]);
    CHECK(tr_kernels_set_math(k, TR_MATH_DEFAULT, &err));

    struct tr_cuda_pool_stats ps;
    CHECK(tr_kernels_cuda_memory(k, &ps, &err));
    char gemm[64], copy[64], att[64], line[96];
    snprintf(gemm, sizeof gemm, "cuBLASLt GEMM %lld^3", (long long)n);
    snprintf(copy, sizeof copy, "device-to-device copy %zu MiB (read+write)", cp.n >> 20);
    snprintf(att, sizeof att, "B%lld H%lld T%lld D%lld", (long long)B, (long long)H, (long long)T, (long long)D);
    printf("\n%-44s %12s %12s\n", "ceiling (bf16 unless said)", "ms", "rate");
    row(gemm, gemm_ms, gemm_tflops, "TFLOP/s");
    snprintf(line, sizeof line, "%s, f32 data as tf32", gemm);
    row(line, tf32_ms, tf32_tflops, "TFLOP/s");
    snprintf(line, sizeof line, "%s, strict f32", gemm);
    row(line, f32_ms, f32_tflops, "TFLOP/s");
    row(copy, copy_ms, copy_gbs, "GB/s");
    snprintf(line, sizeof line, "attention fwd %s", att);
    row(line, att_ms, att_tflops, "TFLOP/s");
    row("attention fwd causal, same shape", attc_ms, attc_tflops, "TFLOP/s");
    row("attention fwd, CUDA-core kernel (simple)", atts_ms, atts_tflops, "TFLOP/s");
    for (int d = 0; d < 2; d++)
        for (int p = 0; p < 2; p++) {
            snprintf(line, sizeof line, "conv2d 3x3 %lldx%lldx%lldx%lld, %s, %s%s", (long long)cN, (long long)cS,
                     (long long)cS, (long long)cC, d ? "f32 as tf32" : "bf16", conv_cudnn[d][p] ? "cuDNN" : "im2col",
                     !p && !conv_cudnn[d][p] ? " (no cuDNN)" : "");
            row(line, conv_ms[d][p], rate(conv_flops, conv_ms[d][p], 1e12), "TFLOP/s");
        }
    printf("device: %s (sm_%d%d); peak device memory through the pool: %.1f MiB\n", prop.name, prop.major, prop.minor,
           (double)ps.peak_reserved / (1 << 20));
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "bench_cuda: cannot write %s\n", json);
            return 1;
        }
        fprintf(f, "{\n  \"device\": \"%s\",\n  \"sm\": %d,\n", prop.name, prop.major * 10 + prop.minor);
        fprintf(f, "  \"gemm_n\": %lld,\n  \"copy_bytes\": %zu,\n  \"attention_bhtd\": [%lld, %lld, %lld, %lld],\n",
                (long long)n, cp.n, (long long)B, (long long)H, (long long)T, (long long)D);
        jnum(f, "gemm_bf16_ms", "%.4f", gemm_ms, ",\n");
        jnum(f, "gemm_bf16_tflops", "%.2f", gemm_tflops, ",\n");
        jnum(f, "gemm_tf32_tflops", "%.2f", tf32_tflops, ",\n");
        jnum(f, "gemm_f32_tflops", "%.2f", f32_tflops, ",\n");
        jnum(f, "copy_d2d_ms", "%.4f", copy_ms, ",\n");
        jnum(f, "copy_d2d_gbs", "%.1f", copy_gbs, ",\n");
        jnum(f, "attention_fwd_ms", "%.4f", att_ms, ",\n");
        jnum(f, "attention_fwd_tflops", "%.2f", att_tflops, ",\n");
        jnum(f, "attention_fwd_causal_ms", "%.4f", attc_ms, ",\n");
        jnum(f, "attention_fwd_causal_tflops", "%.2f", attc_tflops, ",\n");
        jnum(f, "attention_fwd_simple_ms", "%.4f", atts_ms, ",\n");
        jnum(f, "attention_fwd_simple_tflops", "%.2f", atts_tflops, ",\n");
        fprintf(f, "  \"conv_nshw\": [%lld, %lld, %lld, %lld],\n", (long long)cN, (long long)cS, (long long)cS,
                (long long)cC);
        fprintf(f, "  \"conv_auto_path\": \"%s\",\n", conv_cudnn[0][0] ? "cudnn" : "im2col");
        jnum(f, "conv_bf16_auto_tflops", "%.2f", rate(conv_flops, conv_ms[0][0], 1e12), ",\n");
        jnum(f, "conv_bf16_im2col_tflops", "%.2f", rate(conv_flops, conv_ms[0][1], 1e12), ",\n");
        jnum(f, "conv_tf32_auto_tflops", "%.2f", rate(conv_flops, conv_ms[1][0], 1e12), ",\n");
        jnum(f, "conv_tf32_im2col_tflops", "%.2f", rate(conv_flops, conv_ms[1][1], 1e12), ",\n");
        jnum(f, "conv_bf16_auto_ms", "%.4f", conv_ms[0][0], ",\n");
        jnum(f, "conv_bf16_im2col_ms", "%.4f", conv_ms[0][1], ",\n");
        jnum(f, "conv_tf32_auto_ms", "%.4f", conv_ms[1][0], ",\n");
        jnum(f, "conv_tf32_im2col_ms", "%.4f", conv_ms[1][1], ",\n");
        fprintf(f, "  \"peak_reserved_bytes\": %zu\n}\n", ps.peak_reserved);
        if (fclose(f) != 0) {
            fprintf(stderr, "bench_cuda: cannot write %s\n", json);
            return 1;
        }
    }
    tr_kernels_dealloc(k, cp.src);
    tr_kernels_dealloc(k, cp.dst);
    tr_kernels_free(k);
    return failed ? 1 : 0;
}
