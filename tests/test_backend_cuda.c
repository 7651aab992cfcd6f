/* The torch and tf backends on device = cuda, and the math mode at init.
 *
 * Everywhere: init with device = cuda fails where no CUDA device is present with the
 * kernels library's "no CUDA device found" (and hands back no backend), and succeeds
 * where one is; math = tf32 is refused on the cpu with a message naming it, f32 and bf16
 * are taken, and a math mode set reaches the stats' notes.
 *
 * On a GPU only (else each prints "SKIPPED: no CUDA device found (<name>)" and is skipped
 * through cmocka's skip(), so the summary counts it as skipped): a small
 * graph (GEMM + bias + GELU, layer norm, softmax, a reshape view) run on torch eager,
 * torch reduce-overhead (warm-up, recording, the CUDA graph captured at step 3 and
 * replayed after) and tf on cuda with new inputs every step, each step's outputs
 * checked against the same backend on the cpu (f32, 1e-4); and a graph with updates,
 * whose params' host memory holds the old values until sync and the cpu's values
 * after it; and two programs of one backend (torch, both modes, tf and jax) sharing a
 * param by host memory, one updating it and the other reading it (the same scenario also
 * runs on the cpu, everywhere). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "trident/graph.h"
#include "trident/kernels.h"
#include "trident/loader.h"

struct cfg {
    const char *label, *plugin, *mode;
};
static const struct cfg cfgs[] = {
    {"torch", "torch", NULL},
    {"torch:reduce-overhead", "torch", "reduce-overhead"},
    {"tf", "tf", NULL},
};
#define N_CFGS ((int)(sizeof cfgs / sizeof cfgs[0]))

/* Without a device the test says why and is skipped through cmocka, so the summary counts
 * it as skipped rather than passed. */
static void skip_without_gpu(const char *name) {
    struct tr_error err = {0};
    if (tr_kernels_device_available(TR_DEVICE_CUDA, &err) == TR_OK) return;
    printf("SKIPPED: no CUDA device found (%s)\n", name);
    skip();
}

static int init(struct tr_plugin *p, const struct cfg *c, int device, int math, struct tr_backend **be,
                struct tr_error *err) {
    struct tr_option opt = {.key = "mode", .value = c->mode, .file = "test", .line = 1};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION, .device_type = device,
                                    .options = c->mode ? &opt : NULL, .n_options = c->mode ? 1 : 0, .math = math};
    *be = NULL;
    return tr_backend_init(p, &prm, be, err);
}

/* ---- init ---- */

static void test_init_on_cuda(void **state) {
    (void)state;
    struct tr_error avail = {0};
    int gpu = tr_kernels_device_available(TR_DEVICE_CUDA, &avail) == TR_OK;
    for (int i = 0; i < N_CFGS; i++) {
        struct tr_plugin *p = tr_test_plugin_open(cfgs[i].plugin);
        assert_true(tr_plugin_iface(p)->caps & TR_CAP_CUDA);
        struct tr_backend *be = NULL;
        struct tr_error err = {0};
        int rc = init(p, &cfgs[i], TR_DEVICE_CUDA, TR_MATH_DEFAULT, &be, &err);
        if (gpu) {
            if (rc != TR_OK) fail_msg("%s on cuda: %s", cfgs[i].label, err.msg);
            tr_backend_free(be);
        } else {
            if (rc == TR_OK) fail_msg("%s: init on cuda accepted without a device", cfgs[i].label);
            assert_null(be);
            if (!strstr(err.msg, "no CUDA device found") || !strstr(err.msg, cfgs[i].plugin))
                fail_msg("%s: '%s' should name the backend and say 'no CUDA device found'", cfgs[i].label, err.msg);
            printf("%s, device = cuda: %s\n", cfgs[i].label, err.msg);
        }
        /* an unknown device type stays refused */
        rc = init(p, &cfgs[i], 7, TR_MATH_DEFAULT, &be, &err);
        assert_int_not_equal(rc, TR_OK);
        assert_non_null(strstr(err.msg, "device type 7"));
        tr_plugin_close(p);
    }
}

/* ---- the math mode ---- */

/* y = x·W: the smallest graph a math mode can show in. */
static struct tr_graph *gemm_graph(float *w) {
    struct tr_graph *g = NULL;
    struct tr_error err = {0};
    if (tr_graph_init(&g, &err) != TR_OK) fail_msg("%s", err.msg);
    int64_t xs[2] = {4, 8}, ws[2] = {8, 16};
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, xs);
    int W = tr_param(g, "w", TR_DTYPE_F32, 2, ws, 0, 0.1f);
    tr_graph_set_output(g, tr_matmul(g, x, W, 0, 0), "y");
    if (tr_graph_status(g, &err) != TR_OK || tr_graph_bind_param(g, W, w, &err) != TR_OK) fail_msg("%s", err.msg);
    return g;
}

static void test_math_on_cpu(void **state) {
    (void)state;
    float w[8 * 16];
    for (int i = 0; i < 8 * 16; i++) w[i] = 0.01f * (float)(i % 13) - 0.05f;
    for (int i = 0; i < N_CFGS; i++) {
        struct tr_plugin *p = tr_test_plugin_open(cfgs[i].plugin);
        struct tr_backend *be = NULL;
        struct tr_error err = {0};
        int rc = init(p, &cfgs[i], TR_DEVICE_CPU, TR_MATH_TF32, &be, &err);
        if (rc == TR_OK) fail_msg("%s: math = tf32 accepted on the cpu", cfgs[i].label);
        assert_null(be);
        if (!strstr(err.msg, "tf32") || !strstr(err.msg, cfgs[i].plugin))
            fail_msg("%s: '%s' should name the backend and tf32", cfgs[i].label, err.msg);
        rc = init(p, &cfgs[i], TR_DEVICE_CPU, 99, &be, &err);
        assert_int_not_equal(rc, TR_OK);
        const int ok[2] = {TR_MATH_F32, TR_MATH_BF16};
        for (int m = 0; m < 2; m++) {
            if (init(p, &cfgs[i], TR_DEVICE_CPU, ok[m], &be, &err) != TR_OK)
                fail_msg("%s math %s: %s", cfgs[i].label, tr_math_name(ok[m]), err.msg);
            struct tr_graph *g = gemm_graph(w);
            struct tr_program *prog = NULL;
            if (tr_backend_compile(be, g, &prog, &err) != TR_OK) fail_msg("%s: %s", cfgs[i].label, err.msg);
            int64_t xs[2] = {4, 8}, ys[2] = {4, 16};
            struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 2, xs), y = tr_test_tensor(TR_DTYPE_F32, 2, ys);
            tr_test_randn(&x, 1, 1.0);
            if (tr_backend_execute(be, prog, 1, &x, 1, &y, &err) != TR_OK) fail_msg("%s: %s", cfgs[i].label, err.msg);
            struct tr_backend_stats st = {.struct_size = sizeof st, .abi_version = TR_ABI_VERSION};
            if (tr_backend_get_stats(be, prog, &st, &err) != TR_OK) fail_msg("%s", err.msg);
            char want[32];
            snprintf(want, sizeof want, "math %s", tr_math_name(ok[m]));
            if (!strstr(st.notes, want)) fail_msg("%s: notes '%s' lack '%s'", cfgs[i].label, st.notes, want);
            tr_test_tensor_free(&x);
            tr_test_tensor_free(&y);
            tr_program_free(prog);
            tr_graph_free(g);
            tr_backend_free(be);
        }
        tr_plugin_close(p);
    }
}

/* ---- on a GPU: cuda against the cpu ---- */

#define B 2
#define T 8
#define D 32
#define F 64

struct mlp {
    struct tr_graph *g;
    float w[D * F], b[F], gamma[F], beta[F];
};

/* out0 = softmax(layer_norm(gelu(x·W + b))) (B,T,F); out1 = reshape(x·W) (B·T, F) */
static void mlp_build(struct mlp *m) {
    struct tr_error err = {0};
    struct tr_tensor t;
    int64_t ws[2] = {D, F}, fs[1] = {F};
    t = (struct tr_tensor){0};
    if (tr_tensor_make(&t, m->w, TR_DTYPE_F32, 2, ws, &err) != TR_OK) fail_msg("%s", err.msg);
    tr_test_randn(&t, 11, 0.2);
    if (tr_tensor_make(&t, m->b, TR_DTYPE_F32, 1, fs, &err) != TR_OK) fail_msg("%s", err.msg);
    tr_test_randn(&t, 12, 0.1);
    tr_tensor_make(&t, m->gamma, TR_DTYPE_F32, 1, fs, &err);
    tr_test_randn(&t, 13, 1.0);
    tr_tensor_make(&t, m->beta, TR_DTYPE_F32, 1, fs, &err);
    tr_test_randn(&t, 14, 0.1);
    if (tr_graph_init(&m->g, &err) != TR_OK) fail_msg("%s", err.msg);
    struct tr_graph *g = m->g;
    int64_t xs[3] = {B, T, D}, flat[2] = {B * T, F};
    int x = tr_input(g, "x", TR_DTYPE_F32, 3, xs);
    int W = tr_param(g, "w", TR_DTYPE_F32, 2, ws, 0, 0.1f), bb = tr_param(g, "b", TR_DTYPE_F32, 1, fs, 0, 0.1f);
    int ga = tr_param(g, "gamma", TR_DTYPE_F32, 1, fs, 1, 0), be = tr_param(g, "beta", TR_DTYPE_F32, 1, fs, 0, 0);
    int mm = tr_matmul(g, x, W, 0, 0);
    int h = tr_layer_norm(g, tr_gelu(g, tr_add(g, mm, bb), 0), ga, be, 1e-5f);
    tr_graph_set_output(g, tr_softmax(g, h), "probs");
    tr_graph_set_output(g, tr_reshape(g, mm, 2, flat), "proj");
    if (tr_graph_status(g, &err) != TR_OK || tr_graph_bind_param(g, W, m->w, &err) != TR_OK ||
        tr_graph_bind_param(g, bb, m->b, &err) != TR_OK || tr_graph_bind_param(g, ga, m->gamma, &err) != TR_OK ||
        tr_graph_bind_param(g, be, m->beta, &err) != TR_OK)
        fail_msg("%s", err.msg);
}

struct run {
    struct tr_plugin *p;
    struct tr_backend *be;
    struct tr_program *prog;
};

static void run_open(struct run *r, const struct cfg *c, int device, struct tr_graph *g) {
    struct tr_error err = {0};
    r->p = tr_test_plugin_open(c->plugin);
    if (init(r->p, c, device, TR_MATH_DEFAULT, &r->be, &err) != TR_OK) fail_msg("%s: %s", c->label, err.msg);
    if (tr_backend_compile(r->be, g, &r->prog, &err) != TR_OK) fail_msg("%s: compile: %s", c->label, err.msg);
}

static void run_close(struct run *r) {
    tr_program_free(r->prog);
    tr_backend_free(r->be);
    tr_plugin_close(r->p);
}

static void test_cuda_matches_cpu(void **state) {
    (void)state;
    skip_without_gpu("test_cuda_matches_cpu");
    for (int i = 0; i < N_CFGS; i++) {
        struct mlp m;
        mlp_build(&m);
        struct run cpu, gpu;
        run_open(&cpu, &cfgs[i], TR_DEVICE_CPU, m.g);
        run_open(&gpu, &cfgs[i], TR_DEVICE_CUDA, m.g);
        int64_t xs[3] = {B, T, D}, ps[3] = {B, T, F}, js[2] = {B * T, F};
        struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 3, xs);
        struct tr_tensor ref[2] = {tr_test_tensor(TR_DTYPE_F32, 3, ps), tr_test_tensor(TR_DTYPE_F32, 2, js)};
        struct tr_tensor out[2] = {tr_test_tensor(TR_DTYPE_F32, 3, ps), tr_test_tensor(TR_DTYPE_F32, 2, js)};
        struct tr_error err = {0};
        for (int step = 1; step <= 5; step++) { /* ro: warm-up, record, capture, replay x2 */
            tr_test_randn(&x, 100 + (uint64_t)step, 1.0); /* new data: the static inputs must be refilled */
            for (int o = 0; o < 2; o++) tr_test_poison(&out[o]), tr_test_poison(&ref[o]);
            if (tr_backend_execute(cpu.be, cpu.prog, 1, &x, 2, ref, &err) != TR_OK)
                fail_msg("%s cpu step %d: %s", cfgs[i].label, step, err.msg);
            if (tr_backend_execute(gpu.be, gpu.prog, 1, &x, 2, out, &err) != TR_OK)
                fail_msg("%s cuda step %d: %s", cfgs[i].label, step, err.msg);
            for (int o = 0; o < 2; o++) {
                double *r = tr_test_to_f64(&ref[o]);
                char what[96];
                snprintf(what, sizeof what, "%s step %d output %d, cuda vs cpu", cfgs[i].label, step, o);
                tr_assert_close(what, &out[o], r, 1e-4);
                free(r);
            }
        }
        struct tr_backend_stats st = {.struct_size = sizeof st, .abi_version = TR_ABI_VERSION};
        if (tr_backend_get_stats(gpu.be, gpu.prog, &st, &err) != TR_OK) fail_msg("%s", err.msg);
        printf("%s on cuda: peak %llu bytes; %s\n", cfgs[i].label, (unsigned long long)st.peak_bytes, st.notes);
        assert_true(st.peak_bytes > 0);
        assert_non_null(strstr(st.notes, "on the device"));
        if (cfgs[i].mode) assert_non_null(strstr(st.notes, "CUDA graph captured at step 3"));
        tr_test_tensor_free(&x);
        for (int o = 0; o < 2; o++) tr_test_tensor_free(&ref[o]), tr_test_tensor_free(&out[o]);
        run_close(&gpu);
        run_close(&cpu);
        tr_graph_free(m.g);
    }
}

/* y = w + x (reads the old w); w <- 0.5·w (an update a backend may donate). */
static struct tr_graph *update_graph(float *w) {
    struct tr_graph *g = NULL;
    struct tr_error err = {0};
    if (tr_graph_init(&g, &err) != TR_OK) fail_msg("%s", err.msg);
    int64_t s[1] = {256};
    int x = tr_input(g, "x", TR_DTYPE_F32, 1, s);
    int W = tr_param(g, "w", TR_DTYPE_F32, 1, s, 0, 1);
    tr_graph_set_output(g, tr_add(g, W, x), "y");
    tr_graph_add_update(g, W, tr_scale(g, W, 0.5f, 0.0f));
    if (tr_graph_status(g, &err) != TR_OK || tr_graph_bind_param(g, W, w, &err) != TR_OK) fail_msg("%s", err.msg);
    return g;
}

static void test_cuda_updates_reach_host_on_sync(void **state) {
    (void)state;
    skip_without_gpu("test_cuda_updates_reach_host_on_sync");
    for (int i = 0; i < N_CFGS; i++) {
        float w_cpu[256], w_gpu[256], w0[256];
        for (int j = 0; j < 256; j++) w0[j] = w_cpu[j] = w_gpu[j] = 0.25f + 0.01f * (float)j;
        struct tr_graph *gc = update_graph(w_cpu), *gg = update_graph(w_gpu);
        struct run cpu, gpu;
        run_open(&cpu, &cfgs[i], TR_DEVICE_CPU, gc);
        run_open(&gpu, &cfgs[i], TR_DEVICE_CUDA, gg);
        int64_t s[1] = {256};
        struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 1, s), yc = tr_test_tensor(TR_DTYPE_F32, 1, s),
                         yg = tr_test_tensor(TR_DTYPE_F32, 1, s);
        struct tr_error err = {0};
        for (int step = 1; step <= 4; step++) {
            tr_test_randn(&x, 200 + (uint64_t)step, 1.0);
            tr_test_poison(&yc), tr_test_poison(&yg);
            if (tr_backend_execute(cpu.be, cpu.prog, 1, &x, 1, &yc, &err) != TR_OK ||
                tr_backend_execute(gpu.be, gpu.prog, 1, &x, 1, &yg, &err) != TR_OK)
                fail_msg("%s step %d: %s", cfgs[i].label, step, err.msg);
            double *r = tr_test_to_f64(&yc);
            tr_assert_close(cfgs[i].label, &yg, r, 1e-6);
            free(r);
        }
        /* before sync the host memory is untouched; after, it is the cpu's */
        assert_memory_equal(w_gpu, w0, sizeof w0);
        if (tr_backend_sync(gpu.be, gpu.prog, &err) != TR_OK) fail_msg("%s sync: %s", cfgs[i].label, err.msg);
        assert_memory_equal(w_gpu, w_cpu, sizeof w_cpu);
        assert_true(w_cpu[3] == w0[3] / 16); /* four halvings */
        tr_test_tensor_free(&x), tr_test_tensor_free(&yc), tr_test_tensor_free(&yg);
        run_close(&gpu);
        run_close(&cpu);
        tr_graph_free(gc);
        tr_graph_free(gg);
    }
}

/* ---- params shared between the programs of one backend ---- */

static const struct cfg share_cfgs[] = {
    {"torch", "torch", NULL},
    {"torch:reduce-overhead", "torch", "reduce-overhead"},
    {"tf", "tf", NULL},
    {"jax", "jax", NULL},
};
#define N_SHARE ((int)(sizeof share_cfgs / sizeof share_cfgs[0]))
#define NS 256

/* writer: y = w + b + x, w <- 0.5·w; reader: z = w + b + x (no update). w and b are
 * bound to the same host memory in both graphs. */
static struct tr_graph *share_graph(float *w, float *b, int writer, int64_t n) {
    struct tr_graph *g = NULL;
    struct tr_error err = {0};
    if (tr_graph_init(&g, &err) != TR_OK) fail_msg("%s", err.msg);
    int64_t s[1] = {n}, sb[1] = {NS};
    int x = tr_input(g, "x", TR_DTYPE_F32, 1, sb);
    int W = tr_param(g, "w", TR_DTYPE_F32, 1, s, 0, 1), Bp = tr_param(g, "b", TR_DTYPE_F32, 1, sb, 0, 1);
    int wv = n == NS ? W : tr_slice(g, W, 0, 0, NS, 1);
    tr_graph_set_output(g, tr_add(g, tr_add(g, wv, Bp), x), writer ? "y" : "z");
    if (writer) tr_graph_add_update(g, W, tr_scale(g, W, 0.5f, 0.0f));
    if (tr_graph_status(g, &err) != TR_OK || tr_graph_bind_param(g, W, w, &err) != TR_OK ||
        tr_graph_bind_param(g, Bp, b, &err) != TR_OK)
        fail_msg("%s", err.msg);
    return g;
}

static void share_step(const char *label, struct tr_backend *be, struct tr_program *prog, const char *what, int step,
                       const float *wexp, const float *b, struct tr_tensor *x, struct tr_tensor *y) {
    struct tr_error err = {0};
    tr_test_randn(x, 300 + (uint64_t)step, 1.0);
    tr_test_poison(y);
    if (tr_backend_execute(be, prog, 1, x, 1, y, &err) != TR_OK) fail_msg("%s %s step %d: %s", label, what, step, err.msg);
    double ref[NS];
    for (int j = 0; j < NS; j++) ref[j] = (double)(wexp[j] + b[j]) + (double)((float *)x->data)[j];
    char msg[96];
    snprintf(msg, sizeof msg, "%s %s step %d (the shared w)", label, what, step);
    tr_assert_close(msg, y, ref, 1e-6);
}

/* Two programs of one backend whose graphs bind the same host memory: an update made by
 * one is what the other reads next (on cuda: the same device memory, not two uploads;
 * a third program compiled later reads the updated value, not the host's stale one); a
 * sync of the reader brings the writer's update to the host; after the last program
 * goes, a new one uploads the host's bytes afresh. On the cpu (run everywhere) the same
 * holds by construction; it checks the test's own arithmetic. */
static void share_scenario(const struct cfg *c, int device) {
    const char *dev = device == TR_DEVICE_CUDA ? "cuda" : "cpu";
    char label[64];
    snprintf(label, sizeof label, "%s on %s", c->label, dev);
    float w[NS], b[NS], w0[NS], wexp[NS];
    for (int j = 0; j < NS; j++) w0[j] = w[j] = wexp[j] = 0.5f + 0.01f * (float)j, b[j] = 0.1f * (float)(j % 7);
    struct tr_graph *gw = share_graph(w, b, 1, NS), *gr = share_graph(w, b, 0, NS);
    struct tr_plugin *pl = tr_test_plugin_open(c->plugin);
    struct tr_backend *be = NULL;
    struct tr_program *pw = NULL, *pr = NULL, *pr2 = NULL;
    struct tr_error err = {0};
    if (init(pl, c, device, TR_MATH_DEFAULT, &be, &err) != TR_OK) fail_msg("%s: %s", label, err.msg);
    if (tr_backend_compile(be, gw, &pw, &err) != TR_OK || tr_backend_compile(be, gr, &pr, &err) != TR_OK)
        fail_msg("%s: compile: %s", label, err.msg);
    int64_t s[1] = {NS};
    struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 1, s), y = tr_test_tensor(TR_DTYPE_F32, 1, s);
    for (int step = 1; step <= 4; step++) { /* reduce-overhead: warm-up, record, capture, replay */
        share_step(label, be, pw, "writer", step, wexp, b, &x, &y);
        for (int j = 0; j < NS; j++) wexp[j] *= 0.5f;
        share_step(label, be, pr, "reader", step, wexp, b, &x, &y);
    }
    if (device == TR_DEVICE_CUDA) assert_memory_equal(w, w0, sizeof w0); /* no sync yet */
    /* compiled after the updates: it must find the device's w, not upload the host's */
    if (tr_backend_compile(be, gr, &pr2, &err) != TR_OK) fail_msg("%s: third compile: %s", label, err.msg);
    share_step(label, be, pr2, "late reader", 5, wexp, b, &x, &y);
    /* the reader's sync copies the shared memory, which the writer updated, back */
    if (tr_backend_sync(be, pr, &err) != TR_OK) fail_msg("%s: sync of the reader: %s", label, err.msg);
    assert_memory_equal(w, wexp, sizeof wexp);
    assert_true(w[3] == w0[3] / 16);
    if (device == TR_DEVICE_CUDA) {
        /* the same host memory bound as a param of another size is refused, naming it */
        struct tr_graph *gbad = share_graph(w, b, 0, 2 * NS);
        struct tr_program *pbad = NULL;
        if (tr_backend_compile(be, gbad, &pbad, &err) == TR_OK) fail_msg("%s: a size mismatch was accepted", label);
        if (!strstr(err.msg, "'w'") || !strstr(err.msg, "bytes"))
            fail_msg("%s: '%s' should name param 'w' and the sizes", label, err.msg);
        printf("%s, one host buffer as two sizes: %s\n", label, err.msg);
        tr_graph_free(gbad);
    }
    /* the writer goes: the readers keep the memory, and read the last update */
    tr_program_free(pw);
    share_step(label, be, pr, "reader after the writer's free", 6, wexp, b, &x, &y);
    struct tr_backend_stats st = {.struct_size = sizeof st, .abi_version = TR_ABI_VERSION};
    if (tr_backend_get_stats(be, pr, &st, &err) != TR_OK) fail_msg("%s", err.msg);
    printf("%s, reader: peak %llu bytes; %s\n", label, (unsigned long long)st.peak_bytes, st.notes);
    assert_true(st.peak_bytes >= 2 * NS * sizeof(float));
    tr_program_free(pr);
    tr_program_free(pr2);
    /* nothing holds w on the device now: a new program uploads the host's bytes */
    for (int j = 0; j < NS; j++) w[j] = wexp[j] = 3.0f - 0.001f * (float)j;
    if (tr_backend_compile(be, gr, &pr, &err) != TR_OK) fail_msg("%s: compile after the free: %s", label, err.msg);
    share_step(label, be, pr, "new reader", 7, wexp, b, &x, &y);
    tr_program_free(pr);
    tr_test_tensor_free(&x), tr_test_tensor_free(&y);
    tr_backend_free(be);
    tr_plugin_close(pl);
    tr_graph_free(gw);
    tr_graph_free(gr);
}

/* Two tests, so that the cpu half runs (and counts) everywhere and only the cuda half is
 * skipped without a device. */
static void test_programs_share_params_cpu(void **state) {
    (void)state;
    for (int i = 0; i < N_SHARE; i++) share_scenario(&share_cfgs[i], TR_DEVICE_CPU);
}

static void test_programs_share_params_cuda(void **state) {
    (void)state;
    skip_without_gpu("test_programs_share_params_cuda");
    for (int i = 0; i < N_SHARE; i++) share_scenario(&share_cfgs[i], TR_DEVICE_CUDA);
}

TR_TEST_MAIN(NULL, NULL, test_init_on_cuda, test_math_on_cpu, test_cuda_matches_cpu,
             test_cuda_updates_reach_host_on_sync, test_programs_share_params_cpu, test_programs_share_params_cuda)
