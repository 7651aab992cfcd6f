/* trident bench-kernels: GFLOP/s of the shared kernels on this machine.
 *
 *   --op matmul|attention|conv2d|all
 *                               matmul: c = a·b at N³ (2·N³ flops);
 *                               attention: q,k,v (1,12,N,64), 4·12·N²·64 flops;
 *                               conv2d: the 3x3 convolutions of Stable Diffusion v1.4's UNet
 *                               at batch 2 (one image, guided), NHWC, each beside the GEMM
 *                               of the same M x K x N (M = N·H·W, K = 9·Cin) that an
 *                               im2col would run: "of GEMM" is the convolution's share of
 *                               that rate (--size is ignored)
 *   --size N                    default 2048 for matmul, 512 for attention
 *   --head-dim D                attention's D (default 64; SD's UNet has 40, 80, 160)
 *   --dtype f32|bf16|all        default all
 *   --reps R                    timed runs after one warm-up (default 10); the median is shown
 *
 * argv holds the options only (the program strips "trident bench-kernels"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli.h"
#include "trident/bench.h"
#include "trident/kernels.h"
#include "trident/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int usage(const char *why) {
    if (why) fprintf(stderr, "trident bench-kernels: %s\n", why);
    fprintf(stderr, "usage: trident bench-kernels [--op matmul|attention|conv2d|all] [--size N] [--head-dim D] "
                    "[--dtype f32|bf16|all] [--reps R]\n");
    return 2;
}

/* A device tensor of the shape, filled with N(0, 1) values. */
static int make_tensor(struct tr_kernels *k, struct tr_tensor *t, enum tr_dtype dt, int nd, const int64_t *shape,
                       uint64_t seed, struct tr_error *err) {
    int rc = tr_tensor_make(t, NULL, dt, nd, shape, err);
    if (rc) return rc;
    size_t nb = tr_tensor_nbytes(t);
    rc = tr_kernels_alloc(k, nb, &t->data, err);
    if (rc) return rc;
    struct tr_tensor host = *t;
    rc = tr_host_alloc(&host.data, nb, err);
    if (rc) return rc;
    int64_t n = tr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) tr_tensor_set_f64(&host, i, tr_rng_normal(seed, 0xbe7c, (uint64_t)i));
    rc = tr_kernels_to_device(k, t->data, host.data, nb, err);
    tr_host_free(host.data);
    return rc;
}

/* The median and best seconds of reps runs of op on t (after one warm-up). */
struct run {
    int op;
    const struct tr_attrs *at;
    int n_in;
    struct tr_tensor *t; /* n_in inputs, then the output */
};

static int time_runs(struct tr_kernels *k, const struct run *r, int reps, double *med, double *best,
                     struct tr_error *err) {
    double *times = calloc((size_t)reps, sizeof(double));
    if (!times) return tr_error_set(err, TR_ERR_NOMEM, "bench-kernels: no memory for %d timings", reps);
    int rc = TR_OK;
    for (int i = -1; i < reps && !rc; i++) {
        double t0 = now_s();
        rc = tr_kernels_run(k, r->op, r->at, r->n_in, r->t, &r->t[r->n_in], err);
        if (!rc) rc = tr_kernels_sync(k, err);
        if (i >= 0) times[i] = now_s() - t0;
    }
    if (!rc) {
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        *med = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
        *best = times[0];
    }
    free(times);
    return rc;
}

/* Stable Diffusion v1.4's UNet convolutions (3x3, stride 1, padding 1) at batch 2: conv_in,
 * then each level's resnet conv (64, 32, 16, 8 pixels a side). */
static const struct {
    int64_t hw, ci, co;
} sd_convs[] = {{64, 4, 320}, {64, 320, 320}, {32, 640, 640}, {16, 1280, 1280}, {8, 1280, 1280}, {64, 640, 320}};

static int bench_conv(struct tr_kernels *k, enum tr_dtype dt, int reps, struct tr_error *err) {
    int rc = TR_OK;
    for (size_t c = 0; c < sizeof sd_convs / sizeof sd_convs[0] && !rc; c++) {
        const int64_t N = 2, H = sd_convs[c].hw, Ci = sd_convs[c].ci, Co = sd_convs[c].co;
        const int64_t M = N * H * H, K = 9 * Ci;
        struct tr_tensor t[7];
        memset(t, 0, sizeof t);
        rc = make_tensor(k, &t[0], dt, 4, (int64_t[]){N, H, H, Ci}, 1, err);
        if (!rc) rc = make_tensor(k, &t[1], dt, 4, (int64_t[]){Co, Ci, 3, 3}, 2, err);
        if (!rc) rc = make_tensor(k, &t[2], dt, 1, (int64_t[]){Co}, 3, err);
        if (!rc) rc = make_tensor(k, &t[3], dt, 4, (int64_t[]){N, H, H, Co}, 4, err);
        if (!rc) rc = make_tensor(k, &t[4], dt, 2, (int64_t[]){M, K}, 5, err);
        if (!rc) rc = make_tensor(k, &t[5], dt, 2, (int64_t[]){K, Co}, 6, err);
        if (!rc) rc = make_tensor(k, &t[6], dt, 2, (int64_t[]){M, Co}, 7, err);
        const struct tr_attrs ca = {.ints = {1, 1, 1, 1, 0}, .n_ints = 5}, ma = {0};
        const struct run conv = {TR_OP_CONV2D, &ca, 3, &t[0]}, gemm = {TR_OP_MATMUL, &ma, 2, &t[4]};
        double cm = 0, cb = 0, gm = 0, gb = 0;
        if (!rc) rc = time_runs(k, &conv, reps, &cm, &cb, err);
        if (!rc) rc = time_runs(k, &gemm, reps, &gm, &gb, err);
        if (!rc) {
            const double flops = 2.0 * (double)M * (double)K * (double)Co;
            char shape[64];
            snprintf(shape, sizeof shape, "2x%lldx%lldx%lld>%lld", (long long)H, (long long)H, (long long)Ci,
                     (long long)Co);
            printf("%-10s %-5s %-18s %5d %11.3f %11.3f %9.1f  gemm %lldx%lldx%lld %.1f GFLOP/s: conv %.0f%% of it\n",
                   "conv2d", tr_dtype_name(dt), shape, reps, cm * 1e3, cb * 1e3, flops / cm * 1e-9, (long long)M,
                   (long long)K, (long long)Co, flops / gm * 1e-9, 100.0 * gm / cm);
        }
        for (int i = 0; i < 7; i++)
            if (t[i].data) tr_kernels_dealloc(k, t[i].data);
    }
    return rc;
}

/* One row of the table: warm-up, reps timed runs, median. */
static int bench_one(struct tr_kernels *k, int op, enum tr_dtype dt, int64_t n, int64_t hd, int reps,
                     struct tr_error *err) {
    struct tr_tensor t[4];
    memset(t, 0, sizeof t);
    int rc = TR_OK, nt;
    double flops;
    if (op == TR_OP_MATMUL) {
        nt = 3;
        rc = make_tensor(k, &t[0], dt, 2, (int64_t[]){n, n}, 1, err);
        if (!rc) rc = make_tensor(k, &t[1], dt, 2, (int64_t[]){n, n}, 2, err);
        if (!rc) rc = make_tensor(k, &t[2], dt, 2, (int64_t[]){n, n}, 3, err);
        flops = 2.0 * (double)n * (double)n * (double)n;
    } else {
        nt = 4;
        const int64_t shape[4] = {1, 12, n, hd};
        for (int i = 0; i < 4 && !rc; i++) rc = make_tensor(k, &t[i], dt, 4, shape, 10 + (uint64_t)i, err);
        flops = 4.0 * 12.0 * (double)n * (double)n * (double)hd;
    }
    double *times = calloc((size_t)reps, sizeof(double));
    if (!times && !rc) rc = tr_error_set(err, TR_ERR_NOMEM, "bench-kernels: no memory for %d timings", reps);
    for (int r = -1; r < reps && !rc; r++) {
        double t0 = now_s();
        if (op == TR_OP_MATMUL) rc = tr_k_matmul(k, &t[0], &t[1], &t[2], 0, 0, 1.0f, NULL, TR_ACT_NONE, err);
        else rc = tr_k_attention(k, &t[0], &t[1], &t[2], NULL, 0.125f, 0, 0, &t[3], err);
        if (!rc) rc = tr_kernels_sync(k, err);
        if (r >= 0) times[r] = now_s() - t0;
    }
    if (!rc) {
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        double med = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
        char shape[64];
        if (op == TR_OP_MATMUL) snprintf(shape, sizeof shape, "%lld^3", (long long)n);
        else snprintf(shape, sizeof shape, "1x12x%lldx%lld", (long long)n, (long long)hd);
        printf("%-10s %-5s %-14s %5d %11.3f %11.3f %9.1f\n", tr_op_name(op), tr_dtype_name(dt), shape, reps, med * 1e3,
               times[0] * 1e3, flops / med * 1e-9);
    }
    free(times);
    for (int i = 0; i < nt; i++)
        if (t[i].data) tr_kernels_dealloc(k, t[i].data);
    return rc;
}

int tr_cli_bench_kernels(int argc, char **argv) {
    int64_t size = 0, head_dim = 64;
    int reps = 10, want_mm = 1, want_attn = 0, want_conv = 0;
    int dts[2] = {1, 1}; /* f32, bf16 */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(NULL);
            return 0;
        }
        if (!v) return usage("an option is missing its value");
        i++;
        if (strcmp(a, "--size") == 0) {
            size = strtoll(v, &end, 10);
            if (*end || size < 1 || size > 65536) return usage("--size wants an integer in 1..65536");
        } else if (strcmp(a, "--head-dim") == 0) {
            head_dim = strtoll(v, &end, 10);
            if (*end || head_dim < 1 || head_dim > 1024) return usage("--head-dim wants an integer in 1..1024");
        } else if (strcmp(a, "--reps") == 0) {
            long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > 100000) return usage("--reps wants an integer in 1..100000");
            reps = (int)r;
        } else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "f32") == 0) dts[0] = 1, dts[1] = 0;
            else if (strcmp(v, "bf16") == 0) dts[0] = 0, dts[1] = 1;
            else if (strcmp(v, "all") == 0) dts[0] = dts[1] = 1;
            else return usage("--dtype wants f32, bf16 or all");
        } else if (strcmp(a, "--op") == 0) {
            want_mm = strcmp(v, "matmul") == 0 || strcmp(v, "all") == 0;
            want_attn = strcmp(v, "attention") == 0 || strcmp(v, "all") == 0;
            want_conv = strcmp(v, "conv2d") == 0 || strcmp(v, "all") == 0;
            if (!want_mm && !want_attn && !want_conv) return usage("--op wants matmul, attention, conv2d or all");
        } else {
            fprintf(stderr, "trident bench-kernels: unknown option '%s'\n", a);
            return usage(NULL);
        }
    }
    struct tr_error err = {0};
    struct tr_kernels *k = NULL;
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &err)) {
        fprintf(stderr, "trident bench-kernels: %s\n", err.msg);
        return 1;
    }
    /* The conditions of the numbers: the cpu, the ISA, threads and the OpenMP wait policy. */
    static struct tr_bench_report host;
    if (tr_bench_host_info(&host, &err)) {
        fprintf(stderr, "trident bench-kernels: %s\n", err.msg);
        tr_kernels_free(k);
        return 1;
    }
    tr_bench_print_host(&host, stdout);
    printf("kernels on the cpu; median of %d runs after one warm-up\n", reps);
    printf("%-10s %-5s %-14s %5s %11s %11s %9s\n", "op", "dtype", "shape", "reps", "median ms", "best ms", "GFLOP/s");
    int rc = 0;
    const enum tr_dtype dtv[2] = {TR_DTYPE_F32, TR_DTYPE_BF16};
    for (int o = 0; o < 2 && !rc; o++) {
        if ((o == 0 && !want_mm) || (o == 1 && !want_attn)) continue;
        int op = o == 0 ? TR_OP_MATMUL : TR_OP_ATTENTION;
        int64_t n = size ? size : (o == 0 ? 2048 : 512);
        for (int d = 0; d < 2 && !rc; d++) {
            if (!dts[d]) continue;
            if (bench_one(k, op, dtv[d], n, head_dim, reps, &err)) {
                fprintf(stderr, "trident bench-kernels: %s %s: %s\n", tr_op_name(op), tr_dtype_name(dtv[d]), err.msg);
                rc = 1;
            }
        }
    }
    for (int d = 0; d < 2 && !rc && want_conv; d++) {
        if (!dts[d]) continue;
        if (bench_conv(k, dtv[d], reps, &err)) {
            fprintf(stderr, "trident bench-kernels: conv2d %s: %s\n", tr_dtype_name(dtv[d]), err.msg);
            rc = 1;
        }
    }
    tr_kernels_free(k);
    return rc;
}
