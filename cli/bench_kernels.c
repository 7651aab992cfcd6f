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
 *                               adamw: AdamW's update of N weights (f32 moments) as one
 *                               call of tr_k_adamw_update, beside the graph's eight ops
 *                               (SCALE x4, MUL, ADD x2, ADAMW_STEP) as bound calls, each
 *                               update in its input's memory (as donated): GB/s of the 7
 *                               passes over N a fused update needs (--size default 2^23)
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

static int usage(const char *why) {
    if (why) fprintf(stderr, "trident bench-kernels: %s\n", why);
    fprintf(stderr, "usage: trident bench-kernels [--op matmul|attention|conv2d|adamw|all] [--size N] [--head-dim D] "
                    "[--dtype f32|bf16|all] [--reps R]\n");
    return 2;
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
        rc = tr_cli_device_tensor(k, &t[0], dt, 4, (int64_t[]){N, H, H, Ci}, 1, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[1], dt, 4, (int64_t[]){Co, Ci, 3, 3}, 2, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[2], dt, 1, (int64_t[]){Co}, 3, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[3], dt, 4, (int64_t[]){N, H, H, Co}, 4, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[4], dt, 2, (int64_t[]){M, K}, 5, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[5], dt, 2, (int64_t[]){K, Co}, 6, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[6], dt, 2, (int64_t[]){M, Co}, 7, 0, err);
        const struct tr_attrs ca = {.ints = {1, 1, 1, 1, 0}, .n_ints = 5}, ma = {0};
        double cm = 0, cb = 0, gm = 0, gb = 0;
        if (!rc) rc = tr_cli_time_op(k, TR_OP_CONV2D, &ca, 3, &t[0], &t[3], reps, &cm, &cb, err);
        if (!rc) rc = tr_cli_time_op(k, TR_OP_MATMUL, &ma, 2, &t[4], &t[6], reps, &gm, &gb, err);
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

/* AdamW over n weights of dtype dt: the fused call against the graph's eight ops. */
static int bench_adamw(struct tr_kernels *k, enum tr_dtype dt, int64_t n, int reps, struct tr_error *err) {
    enum { P, M, V, G, LR, T, A, B, GG, C, D, NT };
    struct tr_tensor t[NT];
    memset(t, 0, sizeof t);
    const int64_t shape[1] = {n};
    struct tr_kernel_call calls[10];
    memset(calls, 0, sizeof calls);
    int n_calls = 1;
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, hp[4] = {b1, b2, eps, wd};
    /* the fused call on t[P..T]; the graph's ops' temporaries after them, f32 normal(0, 1) */
    int rc = tr_cli_adamw_update_call(k, dt, dt, 1, shape, hp, t, &calls[0], err);
    for (int i = A; i < NT && !rc; i++)
        rc = tr_cli_device_tensor(k, &t[i], TR_DTYPE_F32, 1, shape, 20 + (uint64_t)i, 0, err);
    /* the graph's order (core's tr_adamw), a gradient of the weights' dtype cast first */
    struct tr_tensor g32 = t[G];
    const struct tr_attrs s_m = {.floats = {b1, 0.0f}}, s_g = {.floats = {1.0f - b1, 0.0f}},
                          s_v = {.floats = {b2, 0.0f}}, s_gg = {.floats = {1.0f - b2, 0.0f}},
                          step = {.floats = {b1, b2, eps, wd}}, none = {0};
    struct {
        int op;
        const struct tr_attrs *at;
        int n_in;
        struct tr_tensor in[5], out;
    } ops[9];
    int n_ops = 0;
    if (dt != TR_DTYPE_F32) { /* into the (f32) C buffer, free until the MUL's scale */
        g32 = t[C];
        ops[n_ops++] = (__typeof__(ops[0])){TR_OP_CAST, &none, 1, {t[G]}, g32};
    }
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_SCALE, &s_m, 1, {t[M]}, t[A]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_SCALE, &s_g, 1, {g32}, t[B]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_ADD, &none, 2, {t[A], t[B]}, t[M]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_MUL, &none, 2, {g32, g32}, t[GG]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_SCALE, &s_gg, 1, {t[GG]}, t[D]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_SCALE, &s_v, 1, {t[V]}, t[A]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_ADD, &none, 2, {t[A], t[D]}, t[V]};
    ops[n_ops++] = (__typeof__(ops[0])){TR_OP_ADAMW_STEP, &step, 5, {t[P], t[M], t[V], t[LR], t[T]}, t[P]};
    for (int i = 0; i < n_ops && !rc; i++)
        rc = tr_kernels_bind(k, ops[i].op, ops[i].at, ops[i].n_in, ops[i].in, &ops[i].out, &calls[n_calls++], err);
    double fm = 0, fb = 0, um = 0, ub = 0;
    if (!rc) rc = tr_cli_time_calls(k, 1, calls, reps, &fm, &fb, err);
    if (!rc) rc = tr_cli_time_calls(k, n_calls - 1, calls + 1, reps, &um, &ub, err);
    if (!rc) {
        /* a fused update's traffic: param, m, v and the gradient read, param, m, v written */
        const size_t es = tr_dtype_size(dt);
        const double bytes = (double)n * (double)(2 * es + es + 4 * 4);
        char sh[32];
        snprintf(sh, sizeof sh, "%lld", (long long)n);
        printf("%-10s %-5s %-14s %5d %11.3f %11.3f %9.1f GB/s  the graph's %d ops: %.3f ms (%.1f GB/s), fused "
               "%.2fx\n",
               "adamw", tr_dtype_name(dt), sh, reps, fm * 1e3, fb * 1e3, bytes / fm * 1e-9, n_ops, um * 1e3,
               bytes / um * 1e-9, um / fm);
    }
    for (int i = 0; i < n_calls; i++)
        if (calls[i].fn) tr_kernels_unbind(k, &calls[i]);
    for (int i = 0; i < NT; i++)
        if (t[i].data) tr_kernels_dealloc(k, t[i].data);
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
        rc = tr_cli_device_tensor(k, &t[0], dt, 2, (int64_t[]){n, n}, 1, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[1], dt, 2, (int64_t[]){n, n}, 2, 0, err);
        if (!rc) rc = tr_cli_device_tensor(k, &t[2], dt, 2, (int64_t[]){n, n}, 3, 0, err);
        flops = 2.0 * (double)n * (double)n * (double)n;
    } else {
        nt = 4;
        const int64_t shape[4] = {1, 12, n, hd};
        for (int i = 0; i < 4 && !rc; i++) rc = tr_cli_device_tensor(k, &t[i], dt, 4, shape, 10 + (uint64_t)i, 0, err);
        flops = 4.0 * 12.0 * (double)n * (double)n * (double)hd;
    }
    struct tr_attrs at = {0};
    if (op == TR_OP_ATTENTION) at.floats[0] = 0.125f;
    double med = 0, best = 0;
    if (!rc) rc = tr_cli_time_op(k, op, &at, nt - 1, t, &t[nt - 1], reps, &med, &best, err);
    if (!rc) {
        char shape[64];
        if (op == TR_OP_MATMUL) snprintf(shape, sizeof shape, "%lld^3", (long long)n);
        else snprintf(shape, sizeof shape, "1x12x%lldx%lld", (long long)n, (long long)hd);
        printf("%-10s %-5s %-14s %5d %11.3f %11.3f %9.1f\n", tr_op_name(op), tr_dtype_name(dt), shape, reps, med * 1e3,
               best * 1e3, flops / med * 1e-9);
    }
    for (int i = 0; i < nt; i++)
        if (t[i].data) tr_kernels_dealloc(k, t[i].data);
    return rc;
}

int tr_cli_bench_kernels(int argc, char **argv) {
    int64_t size = 0, head_dim = 64;
    int reps = 10, want_mm = 1, want_attn = 0, want_conv = 0, want_adamw = 0;
    int dts[2] = {1, 1}; /* f32, bf16 */
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(NULL);
            return 0;
        }
        static const char *const known[] = {"--size", "--head-dim", "--reps", "--dtype", "--op"};
        int k = 0;
        while (k < 5 && strcmp(a, known[k]) != 0) k++;
        if (k == 5) {
            fprintf(stderr, "trident bench-kernels: unknown option '%s'\n", a);
            return usage(NULL);
        }
        for (int j = 0; j < i; j++)
            if (strcmp(argv[j], a) == 0) {
                fprintf(stderr, "trident bench-kernels: %s is given twice; expected it once\n", a);
                return usage(NULL);
            }
        if (!v) return usage("an option is missing its value");
        i++;
        if (strcmp(a, "--size") == 0) {
            size = strtoll(v, &end, 10);
            if (*end || size < 1 || size > ((int64_t)1 << 31)) return usage("--size wants an integer in 1..2^31");
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
            want_adamw = strcmp(v, "adamw") == 0 || strcmp(v, "all") == 0;
            if (!want_mm && !want_attn && !want_conv && !want_adamw)
                return usage("--op wants matmul, attention, conv2d, adamw or all");
        } else {
            fprintf(stderr, "trident bench-kernels: unknown option '%s'\n", a);
            return usage(NULL);
        }
    }
    /* an option no asked-for op reads is refused, not ignored */
    int given_size = 0, given_hd = 0;
    for (int j = 0; j < argc; j++) given_size |= !strcmp(argv[j], "--size"), given_hd |= !strcmp(argv[j], "--head-dim");
    if (given_size && !want_mm && !want_attn && !want_adamw)
        return usage("--size is not read by --op conv2d (it times Stable Diffusion's UNet convolutions, fixed "
                     "shapes)");
    if (given_hd && !want_attn) return usage("--head-dim is attention's; --op attention (or all) reads it");
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
    for (int d = 0; d < 2 && !rc && want_adamw; d++) {
        if (!dts[d]) continue;
        if (bench_adamw(k, dtv[d], size ? size : (int64_t)1 << 23, reps, &err)) {
            fprintf(stderr, "trident bench-kernels: adamw %s: %s\n", tr_dtype_name(dtv[d]), err.msg);
            rc = 1;
        }
    }
    tr_kernels_free(k);
    return rc;
}
