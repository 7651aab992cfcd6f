/* trident roofline FILE.ini: the step's kernels against the device's floor (cli.h,
 * trident/roofline.h).
 *
 *   --device-peaks NAME   h200 or h100 (the default on cuda: the card's, by its name; h200
 *                         where there is none, said so), or measure (the default on the
 *                         cpu): this machine's f32 and bf16 GEMM rates and copy
 *                         bandwidth, measured with the shared kernels first (the
 *                         best of 5 calls each: other load only slows a call)
 *   --run                 each group's kernel timed on the INI's device (random data;
 *                         integer inputs 0), beside its floor
 *   --reps R              timed calls per kernel (default 5; the median)
 *   --top N               the N groups that cost the most (default 25; 0: all)
 *   --json OUT            every group, and the step's sums
 *
 * A generate task's sheet is its decode step's (one token); predict and fit, their step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "cli.h"
#include "models.h"
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/kernels.h"
#include "trident/model.h"
#include "trident/roofline.h"

static int usage(const char *why) {
    if (why) fprintf(stderr, "trident roofline: %s\n", why);
    fprintf(stderr, "usage: trident roofline FILE.ini [--device-peaks h200|h100|measure] [--run] [--reps R] "
                    "[--top N] [--json OUT]\n");
    return 2;
}

/* This machine's roofs, from the shared kernels: GEMMs at 2048^3 (f32 and bf16) and a
 * SCALE over 64 Mi floats (read and written: the copy bandwidth). */
static int measure_peaks(struct tr_kernels *k, struct tr_roof_device *d, struct tr_error *err) {
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "measured");
    const int64_t n = 2048, mm[2] = {n, n}, big[1] = {64ll << 20};
    for (int b = 0; b < 2; b++) {
        const enum tr_dtype dt = b ? TR_DTYPE_BF16 : TR_DTYPE_F32;
        struct tr_tensor t[3];
        memset(t, 0, sizeof t);
        int rc = TR_OK;
        for (int i = 0; i < 3 && !rc; i++) rc = tr_cli_device_tensor(k, &t[i], dt, 2, mm, 1 + (uint64_t)i, 0, err);
        const struct tr_attrs at = {0};
        double med = 0, best = 0; /* a peak is the best the machine does: other load only slows a call */
        if (!rc) rc = tr_cli_time_op(k, TR_OP_MATMUL, &at, 2, t, &t[2], 5, &med, &best, err);
        for (int i = 0; i < 3; i++)
            if (t[i].data) tr_kernels_dealloc(k, t[i].data);
        if (rc) return rc;
        const double tflops = 2.0 * (double)n * (double)n * (double)n / best * 1e-12;
        if (b) d->tc_tflops = tflops;
        else d->f32_tflops = tflops;
    }
    struct tr_tensor t[2];
    memset(t, 0, sizeof t);
    int rc = tr_cli_device_tensor(k, &t[0], TR_DTYPE_F32, 1, big, 9, 0, err);
    if (!rc) rc = tr_cli_device_tensor(k, &t[1], TR_DTYPE_F32, 1, big, 10, 0, err);
    const struct tr_attrs sc = {.floats = {2.0f, 0.0f}};
    double med = 0, best = 0;
    if (!rc) rc = tr_cli_time_op(k, TR_OP_SCALE, &sc, 1, t, &t[1], 5, &med, &best, err);
    for (int i = 0; i < 2; i++)
        if (t[i].data) tr_kernels_dealloc(k, t[i].data);
    if (rc) return rc;
    d->bw_gbs = 2.0 * (double)big[0] * 4.0 / best * 1e-9;
    d->tf32_tflops = 0; /* the cpu has no TF32: f32 data runs at the f32 rate */
    return TR_OK;
}

/* A fused AdamW update (tr_k_adamw_update) at the group's dtypes and shape, in place. */
static int run_adamw(struct tr_kernels *k, const struct tr_graph *g, struct tr_roof_kernel *rk, int reps,
                     struct tr_error *err) {
    const int p = tr_node_input(g, rk->node, 0);
    struct tr_tensor t[6];
    struct tr_kernel_call call;
    memset(&call, 0, sizeof call);
    double med = 0;
    int rc = tr_cli_adamw_update_call(k, (enum tr_dtype)tr_node_dtype(g, p),
                                      (enum tr_dtype)tr_node_dtype(g, rk->adamw_grad), tr_node_ndim(g, p),
                                      tr_node_shape(g, p), tr_node_attrs(g, rk->node)->floats, t, &call, err);
    if (rc) return rc;
    rc = tr_cli_time_calls(k, 1, &call, reps, &med, NULL, err);
    tr_kernels_unbind(k, &call);
    for (int i = 0; i < 6; i++) tr_kernels_dealloc(k, t[i].data);
    if (!rc) rk->measured_s = med;
    return rc;
}

/* One call of group k's kernel, on random data of its node's shapes, timed. */
static int run_group(struct tr_kernels *k, const struct tr_graph *g, struct tr_roof_kernel *rk, int reps,
                     struct tr_error *err) {
    if (rk->adamw_grad >= 0) return run_adamw(k, g, rk, reps, err);
    const int id = rk->node, n_in = tr_node_n_inputs(g, id);
    struct tr_tensor in[TR_MAX_INPUTS + 1];
    memset(in, 0, sizeof in);
    int rc = TR_OK;
    for (int i = 0; i <= n_in && !rc; i++) {
        const int x = i < n_in ? tr_node_input(g, id, i) : id;
        /* ADAMW_STEP's lr and step are data it checks (step >= 1): ones */
        const int one = tr_node_op(g, id) == TR_OP_ADAMW_STEP && i >= 3 && i < n_in;
        rc = tr_cli_device_tensor(k, &in[i], (enum tr_dtype)tr_node_dtype(g, x), tr_node_ndim(g, x),
                                  tr_node_shape(g, x), 100 + (uint64_t)i, one, err);
    }
    double med = 0;
    if (!rc) rc = tr_cli_time_op(k, tr_node_op(g, id), tr_node_attrs(g, id), n_in, in, &in[n_in], reps, &med, NULL, err);
    for (int i = 0; i <= n_in; i++)
        if (in[i].data) tr_kernels_dealloc(k, in[i].data);
    if (!rc) rk->measured_s = med;
    return rc;
}

static int by_cost(const void *a, const void *b) {
    const struct tr_roof_kernel *x = a, *y = b;
    const double cx = x->count * (x->measured_s >= 0 ? x->measured_s : x->design_s);
    const double cy = y->count * (y->measured_s >= 0 ? y->measured_s : y->design_s);
    return (cx < cy) - (cx > cy);
}

static void print_sheet(const struct tr_roof_sheet *s, const char *title, int top, int ran) {
    const struct tr_roof_device *d = &s->dev;
    printf("%s\n", title);
    printf("roofs (%s): matrix bf16/f16 %.3g TFLOP/s, tf32 %.3g, f32 %.3g; memory %.3g GB/s; math %s\n", d->name,
           d->tc_tflops, d->tf32_tflops, d->f32_tflops, d->bw_gbs,
           s->math == TR_MATH_DEFAULT ? "the dtype's" : tr_math_name(s->math));
    printf("%-58s %5s %9s %9s %6s %10s %10s", "kernel (one call)", "calls", "GFLOP", "MB", "bound", "floor us",
           "design us");
    if (ran) printf(" %11s %8s", "measured us", "of floor");
    printf("\n");
    const int shown = top > 0 && top < s->n ? top : s->n;
    for (int i = 0; i < shown; i++) {
        const struct tr_roof_kernel *k = &s->k[i];
        printf("%-58.58s %5d %9.3f %9.2f %6s %10.2f %10.2f", k->what, k->count, k->flops * 1e-9, k->bytes * 1e-6,
               k->memory_bound ? "memory" : "math", k->floor_s * 1e6, k->design_s * 1e6);
        if (ran && k->measured_s >= 0)
            printf(" %11.2f %7.0f%%", k->measured_s * 1e6, 100.0 * k->floor_s / k->measured_s);
        printf("\n");
    }
    if (shown < s->n) printf("(%d more groups; --top 0 lists all)\n", s->n - shown);
    int calls = 0;
    for (int i = 0; i < s->n; i++) calls += s->k[i].count;
    printf("step: %d kernel calls in %d groups, %.1f GFLOP, %.1f MB; floor %.3f ms, designed %.3f ms", calls, s->n,
           s->flops * 1e-9, s->bytes * 1e-6, s->floor_s * 1e3, s->design_s * 1e3);
    const double m = tr_roof_sheet_measured(s);
    if (ran && m >= 0) printf(", measured %.3f ms (%.0f%% of floor)", m * 1e3, 100.0 * s->floor_s / m);
    printf("\n");
}

static int write_json(const struct tr_roof_sheet *s, const char *ini, const char *path, struct tr_error *err) {
    cJSON *root = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(root, "kernels");
    cJSON_AddStringToObject(root, "config", ini);
    cJSON_AddStringToObject(root, "device_peaks", s->dev.name);
    cJSON_AddNumberToObject(root, "tc_tflops", s->dev.tc_tflops);
    cJSON_AddNumberToObject(root, "tf32_tflops", s->dev.tf32_tflops);
    cJSON_AddNumberToObject(root, "f32_tflops", s->dev.f32_tflops);
    cJSON_AddNumberToObject(root, "bw_gbs", s->dev.bw_gbs);
    cJSON_AddNumberToObject(root, "floor_ms", s->floor_s * 1e3);
    cJSON_AddNumberToObject(root, "design_ms", s->design_s * 1e3);
    const double m = tr_roof_sheet_measured(s);
    if (m >= 0) cJSON_AddNumberToObject(root, "measured_ms", m * 1e3);
    else cJSON_AddNullToObject(root, "measured_ms");
    for (int i = 0; i < s->n; i++) {
        const struct tr_roof_kernel *k = &s->k[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kernel", k->what);
        cJSON_AddStringToObject(o, "op", k->adamw_grad >= 0 ? "adamw_update" : tr_op_name(k->op));
        cJSON_AddNumberToObject(o, "calls", k->count);
        cJSON_AddNumberToObject(o, "flops", k->flops);
        cJSON_AddNumberToObject(o, "bytes", k->bytes);
        cJSON_AddStringToObject(o, "bound", k->memory_bound ? "memory" : "math");
        cJSON_AddNumberToObject(o, "floor_us", k->floor_s * 1e6);
        cJSON_AddNumberToObject(o, "design_us", k->design_s * 1e6);
        if (k->measured_s >= 0) cJSON_AddNumberToObject(o, "measured_us", k->measured_s * 1e6);
        else cJSON_AddNullToObject(o, "measured_us");
        cJSON_AddItemToArray(rows, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return tr_error_set(err, TR_ERR_NOMEM, "roofline: out of memory for the JSON");
    FILE *f = fopen(path, "w");
    int rc = TR_OK;
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) rc = tr_error_set(err, TR_ERR_IO, "%s: cannot write", path);
    if (f && fclose(f) != 0 && !rc) rc = tr_error_set(err, TR_ERR_IO, "%s: cannot write", path);
    cJSON_free(text);
    return rc;
}

int tr_cli_roofline(int argc, char **argv) {
    const char *ini = NULL, *peaks = NULL, *json = NULL;
    int run = 0, reps = 5, top = 25;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(NULL);
            return 0;
        }
        if (!strcmp(a, "--run")) {
            run = 1;
            continue;
        }
        if (a[0] != '-') {
            if (ini) return usage("one FILE.ini");
            ini = a;
            continue;
        }
        if (!v) return usage("an option is missing its value");
        i++;
        if (!strcmp(a, "--device-peaks")) peaks = v;
        else if (!strcmp(a, "--json")) json = v;
        else if (!strcmp(a, "--reps")) {
            long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > 10000) return usage("--reps wants an integer in 1..10000");
            reps = (int)r;
        } else if (!strcmp(a, "--top")) {
            long t = strtol(v, &end, 10);
            if (*end || t < 0 || t > 100000) return usage("--top wants an integer in 0..100000");
            top = (int)t;
        } else {
            fprintf(stderr, "trident roofline: unknown option '%s'\n", a);
            return usage(NULL);
        }
    }
    if (!ini) return usage("no FILE.ini");
    if (json && tr_cli_same_file(json, ini)) return usage("--json names the config itself; write to another file");
    struct tr_error err = {0};
    static struct tr_config cfg;
    struct tr_task_graph tg;
    memset(&tg, 0, sizeof tg);
    struct tr_kernels *k = NULL;
    struct tr_roof_sheet s = {0};
    struct tr_roof_device dev;
    int rc = tr_config_load(ini, &cfg, &err);
    if (!rc && !cfg.model_line) rc = tr_error_set(&err, TR_ERR_INVALID, "%s: no [run] model", ini);
    if (!rc) rc = tr_task_graph_build(&cfg, tr_builtin_models, &tg, &err);
    const struct tr_graph *g = tg.gen.decode ? tg.gen.decode : tg.graph;
    if (!rc && !peaks && cfg.device_type == TR_DEVICE_CUDA) {
        /* the card's own peaks; without a card here (a sheet needs none), the benchmark's H200 */
        char gpu[128];
        struct tr_error ignored = {0};
        if (tr_kernels_device_describe(cfg.device_type, cfg.device_index, gpu, sizeof gpu, &ignored) == TR_OK &&
            !(peaks = tr_roof_device_for_gpu(gpu)))
            printf("roofline: no preset for %s: H200's peaks (--device-peaks names another)\n", gpu);
        if (!peaks) peaks = "h200";
    }
    if (!peaks) peaks = "measure";
    const int measure = !strcmp(peaks, "measure");
    if (!rc && (run || measure)) rc = tr_kernels_init(&k, cfg.device_type, cfg.device_index, &err);
    if (!rc && k && cfg.math != TR_MATH_DEFAULT) rc = tr_kernels_set_math(k, cfg.math, &err);
    if (!rc) rc = measure ? measure_peaks(k, &dev, &err) : tr_roof_device_preset(peaks, &dev, &err);
    if (!rc) rc = tr_roof_sheet_build(g, cfg.math, &dev, &s, &err);
    for (int i = 0; run && !rc && i < s.n; i++) {
        rc = run_group(k, g, &s.k[i], reps, &err);
        if (rc) tr_error_prefix(&err, "roofline --run: %s", s.k[i].what);
    }
    if (!rc) {
        qsort(s.k, (size_t)s.n, sizeof *s.k, by_cost);
        char title[600];
        snprintf(title, sizeof title, "%s: %s/%s %s, %s, batch %lld%s", ini, cfg.model, cfg.preset, cfg.task,
                 tr_dtype_name(cfg.dtype), (long long)cfg.batch, tg.gen.decode ? " (the decode step: one token)" : "");
        print_sheet(&s, title, top, run);
        if (json) rc = write_json(&s, ini, json, &err);
    }
    tr_roof_sheet_free(&s);
    tr_task_graph_free(&tg);
    if (k) tr_kernels_free(k);
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "trident: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
