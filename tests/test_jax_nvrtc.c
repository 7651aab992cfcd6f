/* The jax backend on cuda, as far as it goes without a GPU: the CUDA C it generates for
 * the BERT graphs (tiny and small presets; predict and fit; f32, and bf16 on tiny) is
 * compiled by NVRTC for sm_80 and sm_90, and a compile error fails the test with the
 * source and NVRTC's log; every kernel the source defines must be in each cubin. The
 * cubin cache: its key (source, architecture, NVRTC version and options each change it;
 * the same inputs give the same key) and its entries on disk (a second build is a hit
 * with the same bytes; a truncated, overwritten or bit-flipped entry is found out and
 * rebuilt; an NVRTC error keeps the source and says where). A graph with every kind of
 * generated kernel (softmax, sum, mean, max, layer norm, gathers, casts, every unary op;
 * f32 and bf16; rows from 20 to 4096) is compiled the same way, and rows too long for
 * shared memory are left to the library on cuda only. The math mode is checked at init.
 * Without a device, `device = cuda` is refused at init with "no CUDA device found"; with
 * one, BERT tiny predict and fit run on cuda and agree with the cpu (outputs, and the
 * params sync brings back).
 *
 * The test links the backend's objects (as test_jax_backend does), so it reaches its code
 * generator and cache directly. Every cache lives in a directory made here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "testutil.h"
#include "models.h"
#include "trident/trident.h"

#include "../plugins/backend_jax/codegen.h"
#include "../plugins/backend_jax/entry.h"
#include "../plugins/backend_jax/jax_internal.h"
#include "trident/kernels_cuda.h"

/* NVRTC ships with the CUDA build; without it the compile checks are skipped, by name and
 * through cmocka's skip(), so the summary counts them as skipped rather than passed. */
static void skip_without_nvrtc(const char *name) {
    if (tr_kernels_cuda_built()) return;
    printf("SKIPPED: no CUDA device found (%s: built without CUDA, so no NVRTC)\n", name);
    skip();
}

/* For a test whose NVRTC compile is its last check, after checks that run everywhere: the
 * test still counts (what it checked ran), and says which part it left out. */
static int have_nvrtc(const char *name) {
    if (tr_kernels_cuda_built()) return 1;
    printf("%s: the NVRTC compile is not checked (built without CUDA, so no NVRTC)\n", name);
    return 0;
}

static int have_device(void) {
    struct tr_error e = {0};
    return tr_kernels_device_available(TR_DEVICE_CUDA, &e) == TR_OK;
}

static struct tr_jax_context *ctx_make(int device_type, const char *cache_dir, struct tr_error *err) {
    struct tr_option opt = {.key = "cache_dir", .value = cache_dir, .file = "nvrtc.ini", .line = 2};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = device_type, .options = &opt, .n_options = cache_dir ? 1 : 0};
    void *ctx = NULL;
    if (tr_jax_iface.init(tr_host_api_get(), &prm, &ctx, err) != TR_OK) return NULL;
    return ctx;
}

static struct tr_jax_context *cpu_ctx(const char *cache_dir) {
    struct tr_error e = {0};
    struct tr_jax_context *c = ctx_make(TR_DEVICE_CPU, cache_dir, &e);
    if (!c) fail_msg("jax init: %s", e.msg);
    return c;
}

/* A cpu context whose cache is the new, empty directory `name` of the group's. */
static struct tr_jax_context *fresh_ctx(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", tr_test_dir, name);
    assert_int_equal(mkdir(dir, 0700), 0);
    return cpu_ctx(dir);
}

/* ---- the BERT graphs ---- */

struct bert_case {
    const char *preset, *task, *dtype;
    int64_t batch, seq;
};

static const struct bert_case cases[] = {
    {"tiny", "predict", "f32", 4, 32},  {"tiny", "fit", "f32", 4, 32},
    {"tiny", "predict", "bf16", 4, 32}, {"tiny", "fit", "bf16", 4, 32},
    {"small", "predict", "f32", 2, 128}, {"small", "fit", "f32", 2, 128},
};

struct built {
    struct tr_task_graph tg;
    struct tr_weights *w;
};

static void bert_build(const struct bert_case *c, struct built *b) {
    char text[512];
    snprintf(text, sizeof text, "[run]\nmodel = bert\npreset = %s\ntask = %s\ndtype = %s\nbatch = %lld\nseq_len = %lld\n",
             c->preset, c->task, c->dtype, (long long)c->batch, (long long)c->seq);
    struct tr_config cfg;
    struct tr_error e = {0};
    if (tr_config_load_string(text, "nvrtc.ini", &cfg, &e)) fail_msg("%s", e.msg);
    if (tr_task_graph_build(&cfg, tr_builtin_models, &b->tg, &e)) fail_msg("bert %s %s: %s", c->preset, c->task, e.msg);
    if (tr_weights_from_seed(b->tg.graph, 1234, &b->w, &e)) fail_msg("bert %s %s: weights: %s", c->preset, c->task, e.msg);
}

static void bert_free(struct built *b) {
    tr_weights_free(b->w);
    tr_task_graph_free(&b->tg);
}

static void spit(const char *path, const void *d, size_t n);

/* $TRIDENT_TEST_DUMP_DIR/<what>: the generated source, to read it. */
static void dump_source(const char *what, const char *src, size_t len) {
    const char *dump = getenv("TRIDENT_TEST_DUMP_DIR");
    if (!dump || !dump[0]) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dump, what);
    spit(path, src, len);
}

/* The names of the __global__ functions src defines ("trj_k12"), at most max. */
static int kernel_names(const char *src, char names[][32], int max) {
    int n = 0;
    const char *head = JAX_CU_HEAD;
    for (const char *s = strstr(src, head); s && n < max; s = strstr(s + 1, head)) {
        const char *a = s + strlen(head);
        size_t k = strcspn(a, "(");
        if (k == 0 || k >= 32) fail_msg("a kernel head without a name at offset %ld", (long)(s - src));
        memcpy(names[n], a, k);
        names[n][k] = '\0';
        n++;
    }
    return n;
}

/* NVRTC for sm; a compile error fails with the source and the whole log. */
static void nvrtc_ok(const char *what, const char *src, int sm, char names[][32], int n_names) {
    void *cubin = NULL;
    size_t size = 0;
    char *log = NULL;
    struct tr_error e = {0};
    if (tr_cuda_nvrtc_compile(src, what, sm, &cubin, &size, &log, &e) != TR_OK) {
        fprintf(stderr, "--- %s: generated source ---\n%s\n--- NVRTC log (sm_%d) ---\n%s\n", what, src, sm,
                log ? log : "(none)");
        free(log);
        fail_msg("%s, sm_%d: %s", what, sm, e.msg);
    }
    free(log);
    assert_true(size > 64);
    assert_memory_equal(cubin, "\x7f" "ELF", 4);
    /* every kernel is in the cubin's symbol table, by its name */
    for (int i = 0; i < n_names; i++) {
        size_t k = strlen(names[i]) + 1; /* with its NUL: "trj_k1" is not "trj_k12" */
        int found = 0;
        for (size_t at = 0; at + k <= size && !found; at++) found = memcmp((char *)cubin + at, names[i], k) == 0;
        if (!found) fail_msg("%s, sm_%d: the cubin has no kernel %s", what, sm, names[i]);
    }
    free(cubin);
}

static void check_bert(const struct bert_case *c) {
    char what[96];
    snprintf(what, sizeof what, "bert-%s-%s-%s.cu", c->preset, c->task, c->dtype);
    struct tr_jax_context *ctx = fresh_ctx(what);
    struct built b;
    bert_build(c, &b);
    char *src = NULL;
    size_t len = 0;
    int n_kernels = 0;
    struct tr_error e = {0};
    if (tr_jax_cuda_source(ctx, (tr_graph_t)b.tg.graph, &src, &len, &n_kernels, &e) != TR_OK)
        fail_msg("%s: cuda source: %s", what, e.msg);
    assert_non_null(src);
    assert_int_equal(strlen(src), len);
    /* BERT fuses its embeddings' gathers, its norms and softmaxes and its elementwise
     * chains: all three shapes of kernel must be there */
    if (n_kernels < 5) fail_msg("%s: only %d fused kernels", what, n_kernels);
    assert_non_null(strstr(src, "trj_sum(")); /* a reduction (layer norm) */
    assert_non_null(strstr(src, "for (int64_t u = ")); /* an elementwise kernel */
    assert_non_null(strstr(src, "atomicOr(trj_bad, 1)"));
    if (strcmp(c->dtype, "bf16") == 0) assert_non_null(strstr(src, "f2bf(v"));
    static char names[4096][32];
    int n_names = kernel_names(src, names, 4096);
    if (n_names < 1 || n_names > n_kernels) fail_msg("%s: %d functions for %d kernels", what, n_names, n_kernels);
    printf("%s: %d fused kernels, %d functions, %zu bytes of CUDA C\n", what, n_kernels, n_names, len);
    dump_source(what, src, len);
    if (have_nvrtc(what)) {
        nvrtc_ok(what, src, 80, names, n_names);
        nvrtc_ok(what, src, 90, names, n_names);
    }
    free(src);
    bert_free(&b);
    tr_jax_iface.free(ctx);
}

static void test_bert_tiny_predict_f32(void **state) { (void)state, check_bert(&cases[0]); }
static void test_bert_tiny_fit_f32(void **state) { (void)state, check_bert(&cases[1]); }
static void test_bert_tiny_predict_bf16(void **state) { (void)state, check_bert(&cases[2]); }
static void test_bert_tiny_fit_bf16(void **state) { (void)state, check_bert(&cases[3]); }
static void test_bert_small_predict_f32(void **state) { (void)state, check_bert(&cases[4]); }
static void test_bert_small_fit_f32(void **state) { (void)state, check_bert(&cases[5]); }

/* The cuda fusion leaves reductions over rows longer than the shared-memory buffer to
 * the library; the cpu fuses them (EXP into the softmax's prologue). */
static int fused_kinds(const struct tr_graph *g, int cuda, int *kinds, int max) {
    struct tr_jax_context *ctx = cpu_ctx(tr_test_dir);
    struct tr_kernels *k = NULL;
    struct tr_error e = {0};
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &e)) fail_msg("%s", e.msg);
    struct tr_jax_program *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->ctx = ctx;
    p->cuda = cuda;
    int *step_of = NULL;
    if (tr_jax_front(p, (tr_graph_t)g, k, &step_of, &e)) fail_msg("%s", e.msg);
    int n = p->fusion.n_clusters;
    for (int i = 0; i < n && i < max; i++) kinds[i] = p->fusion.clusters[i].kind;
    free(step_of);
    tr_jax_program_free(p);
    tr_kernels_free(k);
    tr_jax_iface.free(ctx);
    return n;
}

static void test_long_rows_unfused_on_cuda(void **state) {
    (void)state;
    for (int64_t row = JAX_CU_MAX_ROW; row <= JAX_CU_MAX_ROW + 1; row++) {
        struct tr_graph *g = NULL;
        struct tr_error e = {0};
        if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
        const int64_t shape[2] = {3, row};
        int x = tr_input(g, "x", TR_DTYPE_F32, 2, shape);
        int z = tr_softmax(g, tr_unary(g, TR_OP_EXP, x));
        tr_graph_set_output(g, z, "z");
        if (tr_graph_status(g, &e)) fail_msg("%s", e.msg);
        int kinds[4], n;
        n = fused_kinds(g, 0, kinds, 4);
        assert_int_equal(n, 1);
        assert_int_equal(kinds[0], JAX_K_SOFTMAX);
        n = fused_kinds(g, 1, kinds, 4);
        if (row <= JAX_CU_MAX_ROW) {
            assert_int_equal(n, 1);
            assert_int_equal(kinds[0], JAX_K_SOFTMAX);
        } else { /* EXP alone; the softmax a library call */
            assert_int_equal(n, 1);
            assert_int_equal(kinds[0], JAX_K_EW);
        }
        tr_graph_free(g);
    }
}

/* Every kind of generated kernel (BERT's graphs have only elementwise, gather and
 * layer norm ones): softmax with a prologue and an epilogue, sum, mean and max over the
 * last axis, a gather, casts from ints and to bf16, every unary op, bf16 data; rows of
 * several lengths, so each block size (32 to 256 threads) and a row longer than the
 * block are generated. Each is compiled for sm_80 and sm_90. */
static int every_kind(struct tr_graph *g, enum tr_dtype dt, int64_t D, int *outs) {
    int n = 0;
    const int64_t sx[3] = {3, 5, D}, sv[1] = {D}, st[2] = {11, D}, si[2] = {3, 5}, sc[2] = {5, 1};
    int x = tr_input(g, "x", dt, 3, sx);
    int bias = tr_param(g, "bias", dt, 1, sv, 0.0f, 1.0f);
    int gamma = tr_param(g, "gamma", dt, 1, sv, 1.0f, 0.1f);
    int beta = tr_param(g, "beta", dt, 1, sv, 0.0f, 0.1f);
    int table = tr_param(g, "table", dt, 2, st, 0.0f, 1.0f);
    int ids32 = tr_input(g, "ids32", TR_DTYPE_I32, 2, si);
    int ids64 = tr_input(g, "ids64", TR_DTYPE_I64, 2, si);
    int ints = tr_input(g, "ints", TR_DTYPE_I64, 2, sc); /* broadcast along the row */
    int xb = tr_add(g, x, bias);
    outs[n++] = tr_scale(g, tr_softmax(g, tr_scale(g, xb, 0.125f, 0.0f)), 2.0f, 1.0f);
    outs[n++] = tr_reduce(g, TR_OP_SUM, tr_mul(g, x, x), -1, 0);
    outs[n++] = tr_reduce(g, TR_OP_MEAN, tr_unary(g, TR_OP_EXP, x), -1, 1);
    outs[n++] = tr_reduce(g, TR_OP_MAX, tr_gelu(g, x, 1), -1, 0);
    outs[n++] = tr_gelu(g, tr_layer_norm(g, tr_add(g, x, tr_embedding(g, table, ids32)), gamma, beta, 1e-5f), 0);
    int u = tr_unary(g, TR_OP_TANH, tr_unary(g, TR_OP_RELU, tr_unary(g, TR_OP_SILU, x)));
    u = tr_add(g, u, tr_unary(g, TR_OP_SIGMOID, tr_unary(g, TR_OP_NEG, x)));
    u = tr_div(g, u, tr_unary(g, TR_OP_SQRT, tr_unary(g, TR_OP_EXP, x)));
    u = tr_sub(g, u, tr_unary(g, TR_OP_RSQRT, tr_unary(g, TR_OP_EXP, x)));
    outs[n++] = tr_cast(g, tr_add(g, u, tr_cast(g, ints, dt)), dt == TR_DTYPE_F32 ? TR_DTYPE_BF16 : TR_DTYPE_F32);
    outs[n++] = tr_embedding(g, table, ids64);
    return n;
}

static void test_every_kind(void **state) {
    (void)state;
    static const int64_t rows[] = {20, 96, 200, 1000, 4096};
    for (int d = 0; d < 2; d++)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            enum tr_dtype dt = d ? TR_DTYPE_BF16 : TR_DTYPE_F32;
            char what[64];
            snprintf(what, sizeof what, "every-kind-%s-D%lld.cu", tr_dtype_name(dt), (long long)rows[r]);
            struct tr_graph *g = NULL;
            struct tr_error e = {0};
            if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
            int outs[16], n = every_kind(g, dt, rows[r], outs);
            for (int i = 0; i < n; i++) {
                char name[16];
                snprintf(name, sizeof name, "out%d", i);
                tr_graph_set_output(g, outs[i], name);
            }
            if (tr_graph_status(g, &e)) fail_msg("%s: %s", what, e.msg);
            struct tr_weights *w = NULL;
            if (tr_weights_from_seed(g, 3, &w, &e)) fail_msg("%s", e.msg);
            struct tr_jax_context *ctx = cpu_ctx(tr_test_dir);
            char *src = NULL;
            size_t len = 0;
            int n_kernels = 0;
            if (tr_jax_cuda_source(ctx, (tr_graph_t)g, &src, &len, &n_kernels, &e) != TR_OK)
                fail_msg("%s: cuda source: %s", what, e.msg);
            if (n_kernels < n) fail_msg("%s: %d kernels for %d outputs (each output at least one)", what, n_kernels, n);
            static const char *needles[] = {"fexp(buf[i] - mx)", "trj_max(mx, trj_red)", "trj_max(s, trj_red)",
                                            "s /= ", "rstd", "gelu_tanh(", "gelu_erf(", "ftanh(", "fsigmoid(",
                                            "sqrtf(", "(float)a", "id0 >= 11", "if (threadIdx.x == 0)"};
            for (size_t k = 0; k < sizeof needles / sizeof needles[0]; k++)
                if (!strstr(src, needles[k])) fail_msg("%s: the source has no '%s':\n%s", what, needles[k], src);
            assert_non_null(strstr(src, dt == TR_DTYPE_BF16 ? "bf2f(a" : "bfround("));
            char buf[64];
            snprintf(buf, sizeof buf, "i += %d)", rows[r] >= 256 ? 256 : rows[r] >= 128 ? 128 : rows[r] >= 64 ? 64 : 32);
            assert_non_null(strstr(src, buf));
            dump_source(what, src, len);
            static char names[64][32];
            int n_names = kernel_names(src, names, 64);
            if (have_nvrtc(what)) {
                nvrtc_ok(what, src, 80, names, n_names);
                nvrtc_ok(what, src, 90, names, n_names);
            }
            free(src);
            tr_jax_iface.free(ctx);
            tr_weights_free(w);
            tr_graph_free(g);
        }
}

/* ---- the cache key ---- */

static void test_cache_key(void **state) {
    (void)state;
    const char *src = "extern \"C\" __global__ void k(float *y) { y[0] = 1.0f; }\n";
    size_t n = strlen(src);
    uint64_t a[2], b[2];
    jax_cu_key(src, n, 90, 12, 8, JAX_NVRTC_OPTIONS, a);
    jax_cu_key(src, n, 90, 12, 8, JAX_NVRTC_OPTIONS, b);
    assert_memory_equal(a, b, sizeof a); /* same inputs, same key */
    /* each input changes it */
    char other[128];
    snprintf(other, sizeof other, "%s", src);
    other[strlen(other) - 4] = '2'; /* one character of the source */
    struct {
        const char *src;
        size_t n;
        int sm, major, minor;
        const char *opts;
        const char *what;
    } v[] = {
        {other, n, 90, 12, 8, JAX_NVRTC_OPTIONS, "a character of the source"},
        {src, n - 1, 90, 12, 8, JAX_NVRTC_OPTIONS, "the source's length"},
        {src, n, 80, 12, 8, JAX_NVRTC_OPTIONS, "the architecture"},
        {src, n, 90, 13, 8, JAX_NVRTC_OPTIONS, "NVRTC's major version"},
        {src, n, 90, 12, 9, JAX_NVRTC_OPTIONS, "NVRTC's minor version"},
        {src, n, 90, 12, 8, "--std=c++17", "the options"},
        {src, n, 90, 12, 8, JAX_NVRTC_OPTIONS " -lineinfo", "an option added"},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t k[2];
        jax_cu_key(v[i].src, v[i].n, v[i].sm, v[i].major, v[i].minor, v[i].opts, k);
        if (k[0] == a[0] || k[1] == a[1]) fail_msg("changing %s left (half of) the key as it was", v[i].what);
    }
    /* fields do not run into each other: sm 9 + options "0..." is not sm 90 + "..." */
    uint64_t c[2], d[2];
    jax_cu_key(src, n, 9, 12, 8, "0x", c);
    jax_cu_key(src, n, 90, 12, 8, "x", d);
    assert_memory_not_equal(c, d, sizeof c);
}

/* ---- the cache on disk ---- */

static const char tiny_src[] =
    "extern \"C\" __global__ void trj_k0(const float *__restrict__ a0, float *__restrict__ out, int *trj_bad) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < 1000) out[i] = 2.0f * a0[i];\n"
    "}\n";

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *d = malloc((size_t)sz + 1);
    assert_int_equal(fread(d, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return d;
}

static void spit(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(d, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* A build of tiny_src for sm_`sm` that must be a hit (1) or a compile (0), and valid. */
static void build_sm_expect(struct tr_jax_context *ctx, int sm, int hit, struct jax_cubin *out) {
    uint64_t runs = ctx->nvrtc_runs;
    struct tr_error e = {0};
    if (jax_cu_build(ctx, tiny_src, strlen(tiny_src), sm, out, &e) != TR_OK) fail_msg("sm_%d: %s", sm, e.msg);
    assert_int_equal(out->cache_hit, hit);
    assert_int_equal(ctx->nvrtc_runs, runs + (hit ? 0 : 1));
    assert_true(out->size > 64);
    assert_memory_equal(out->data, "\x7f" "ELF", 4);
    assert_true(access(out->path, R_OK) == 0);
}

static void build_expect(struct tr_jax_context *ctx, int hit, struct jax_cubin *out) {
    build_sm_expect(ctx, 90, hit, out);
}

static void test_cache_disk(void **state) {
    (void)state;
    skip_without_nvrtc("test_cache_disk");
    struct tr_jax_context *ctx = fresh_ctx("cubins");
    struct jax_cubin first, c;
    build_expect(ctx, 0, &first);
    assert_non_null(strstr(first.path, "/jax-"));
    assert_non_null(strstr(first.path, ".cubin"));
    size_t whole_n;
    unsigned char *whole = slurp(first.path, &whole_n);
    assert_int_equal(whole_n, first.size + sizeof(struct jax_trailer));

    /* a second build of the same source is a hit with the same bytes */
    build_expect(ctx, 1, &c);
    assert_string_equal(c.path, first.path);
    assert_int_equal(c.size, first.size);
    assert_memory_equal(c.data, first.data, first.size);
    jax_cubin_free(&c);

    /* truncated (a crash half-way through a copy): found out, rebuilt whole */
    spit(first.path, whole, whole_n / 2);
    build_expect(ctx, 0, &c);
    assert_memory_equal(c.data, first.data, first.size);
    jax_cubin_free(&c);
    build_expect(ctx, 1, &c);
    jax_cubin_free(&c);

    /* cut just before its trailer, and one byte flipped in the cubin: both rebuilt */
    spit(first.path, whole, whole_n - 1);
    build_expect(ctx, 0, &c);
    jax_cubin_free(&c);
    unsigned char *flipped = malloc(whole_n);
    memcpy(flipped, whole, whole_n);
    flipped[first.size / 2] ^= 0x10;
    spit(first.path, flipped, whole_n);
    build_expect(ctx, 0, &c);
    assert_memory_equal(c.data, first.data, first.size);
    jax_cubin_free(&c);
    /* another key's entry at this path (a renamed file): rebuilt */
    flipped[whole_n - sizeof(struct jax_trailer) + 8] ^= 1;
    memcpy(flipped, whole, whole_n - sizeof(struct jax_trailer));
    spit(first.path, flipped, whole_n);
    build_expect(ctx, 0, &c);
    jax_cubin_free(&c);
    /* an empty file */
    spit(first.path, "", 0);
    build_expect(ctx, 0, &c);
    jax_cubin_free(&c);
    size_t after_n;
    unsigned char *after = slurp(first.path, &after_n);
    assert_int_equal(after_n, whole_n);
    assert_memory_equal(after, whole, whole_n);
    free(after);
    free(flipped);
    free(whole);

    /* another architecture is another entry, both kept */
    build_sm_expect(ctx, 80, 0, &c);
    assert_string_not_equal(c.path, first.path);
    jax_cubin_free(&c);
    build_expect(ctx, 1, &c);
    jax_cubin_free(&c);
    jax_cubin_free(&first);
    tr_jax_iface.free(ctx);
}

/* NVRTC refusing the source: TR_ERR_INVALID, its log in the message, the source kept. */
static void test_compile_error_keeps_source(void **state) {
    (void)state;
    skip_without_nvrtc("test_compile_error_keeps_source");
    struct tr_jax_context *ctx = fresh_ctx("broken");
    const char *bad = "extern \"C\" __global__ void trj_k0(float *out) { out[0] = no_such_name; }\n";
    struct jax_cubin c;
    struct tr_error e = {0};
    assert_int_equal(jax_cu_build(ctx, bad, strlen(bad), 90, &c, &e), TR_ERR_INVALID);
    assert_null(c.data);
    assert_non_null(strstr(e.msg, "NVRTC did not compile the generated kernels for sm_90"));
    assert_non_null(strstr(e.msg, "no_such_name"));
    const char *kept = strstr(e.msg, "the source is kept at ");
    assert_non_null(kept);
    char path[1024];
    snprintf(path, sizeof path, "%s", kept + strlen("the source is kept at "));
    path[strcspn(path, ";")] = '\0';
    size_t n;
    unsigned char *d = slurp(path, &n);
    assert_int_equal(n, strlen(bad));
    assert_memory_equal(d, bad, n);
    free(d);
    /* nothing was cached: the next try compiles again */
    uint64_t runs = ctx->nvrtc_runs;
    assert_int_equal(jax_cu_build(ctx, bad, strlen(bad), 90, &c, &e), TR_ERR_INVALID);
    assert_int_equal(ctx->nvrtc_runs, runs + 1);
    tr_jax_iface.free(ctx);
}

/* ---- the device ---- */

static void test_no_device(void **state) {
    (void)state;
    if (have_device()) {
        printf("SKIPPED: a CUDA device is present (test_no_device: the refusal needs a machine without one)\n");
        skip();
    }
    struct tr_error e = {0};
    struct tr_jax_context *ctx = ctx_make(TR_DEVICE_CUDA, tr_test_dir, &e);
    assert_null(ctx);
    assert_int_equal(e.status, TR_ERR_DEVICE);
    if (!strstr(e.msg, "no CUDA device found")) fail_msg("expected 'no CUDA device found', got: %s", e.msg);
    assert_non_null(strstr(e.msg, "jax"));
    printf("jax, device = cuda: %s\n", e.msg);
    /* and through the program: a run with device = cuda names the backend and the reason */
    char text[512];
    snprintf(text, sizeof text,
             "[run]\nmodel = bert\npreset = tiny\ntask = predict\ndevice = cuda\nbackends = jax\nbatch = 2\n"
             "seq_len = 8\nsteps = 1\nwarmup = 1\n[backend.jax]\ncache_dir = %s\n",
             tr_test_dir);
    struct tr_config cfg;
    if (tr_config_load_string(text, "nodev.ini", &cfg, &e)) fail_msg("%s", e.msg);
    static struct tr_bench_report rep;
    memset(&e, 0, sizeof e);
    int rc = tr_bench_run(&cfg, tr_builtin_models, &rep, &e);
    assert_int_not_equal(rc, TR_OK);
    int said = strstr(e.msg, "no CUDA device found") != NULL;
    for (int i = 0; i < rep.n_rows; i++) said |= strstr(rep.rows[i].error, "no CUDA device found") != NULL;
    if (!said) fail_msg("trident run with device = cuda: expected 'no CUDA device found', got: %s", e.msg);
}

/* module.c's checks that need no device: a cpu context is refused by name, NVRTC's
 * version is known (a part of every key), NULL frees nothing. */
static void test_module_without_device(void **state) {
    (void)state;
    struct tr_kernels *k = NULL;
    struct tr_error e = {0};
    if (tr_kernels_init(&k, TR_DEVICE_CPU, 0, &e)) fail_msg("%s", e.msg);
    int sm = -1;
    assert_int_not_equal(tr_kernels_cuda_sm(k, &sm, &e), TR_OK);
    assert_int_equal(sm, 0);
    struct tr_cuda_module *m = (void *)&m;
    static const char elf[16] = "\x7f" "ELF";
    assert_int_not_equal(tr_cuda_module_load(k, elf, sizeof elf, "x.cubin", &m, &e), TR_OK);
    assert_null(m);
    void *fn = (void *)&fn;
    assert_int_not_equal(tr_cuda_module_kernel(NULL, "trj_k0", &fn, &e), TR_OK);
    assert_null(fn);
    const unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
    assert_int_not_equal(tr_cuda_module_launch(k, NULL, NULL, "trj_k0", grid, block, 0, NULL, &e), TR_OK);
    if (tr_kernels_cuda_built()) {
        assert_non_null(strstr(e.msg, "trj_k0"));
        int major = 0, minor = -1;
        if (tr_cuda_nvrtc_version(&major, &minor, &e)) fail_msg("%s", e.msg);
        printf("NVRTC %d.%d\n", major, minor);
        assert_true(major >= 11 && minor >= 0);
    } else {
        assert_non_null(strstr(e.msg, "no CUDA device found"));
        assert_int_not_equal(tr_cuda_nvrtc_version(NULL, NULL, &e), TR_OK);
    }
    tr_cuda_module_free(NULL);
    tr_kernels_free(k);
}

/* The math mode reaches jax's init: tf32 on the cpu and an unknown mode are refused
 * there, naming the backend; f32 and bf16 are taken and named in the stats. */
static void test_math_mode(void **state) {
    (void)state;
    const int modes[] = {TR_MATH_TF32, 99, TR_MATH_F32, TR_MATH_BF16};
    for (int i = 0; i < 4; i++) {
        struct tr_option opt = {.key = "cache_dir", .value = tr_test_dir, .file = "math.ini", .line = 2};
        struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                        .device_type = TR_DEVICE_CPU, .options = &opt, .n_options = 1,
                                        .math = modes[i]};
        void *ctx = NULL;
        struct tr_error e = {0};
        int rc = tr_jax_iface.init(tr_host_api_get(), &prm, &ctx, &e);
        if (i < 2) {
            if (rc == TR_OK) fail_msg("math mode %d accepted on the cpu", modes[i]);
            assert_null(ctx);
            assert_non_null(strstr(e.msg, "jax"));
            if (i == 0 && !strstr(e.msg, "tf32")) fail_msg("'%s' should name tf32", e.msg);
            continue;
        }
        if (rc != TR_OK) fail_msg("math %s: %s", tr_math_name((enum tr_math)modes[i]), e.msg);
        struct tr_graph *g = NULL;
        if (tr_graph_init(&g, &e)) fail_msg("%s", e.msg);
        const int64_t xs[2] = {4, 8};
        int x = tr_input(g, "x", TR_DTYPE_F32, 2, xs);
        tr_graph_set_output(g, tr_unary(g, TR_OP_TANH, x), "y");
        if (tr_graph_status(g, &e)) fail_msg("%s", e.msg);
        struct tr_jax_program *p = NULL;
        if (tr_jax_compile(ctx, (tr_graph_t)g, &p, &e)) fail_msg("%s", e.msg);
        struct tr_backend_stats st = {0};
        assert_int_equal(tr_jax_iface.get_stats(ctx, p, &st, &e), TR_OK);
        char want[32];
        snprintf(want, sizeof want, "math %s", tr_math_name((enum tr_math)modes[i]));
        if (!strstr(st.notes, want)) fail_msg("notes '%s' lack '%s'", st.notes, want);
        tr_jax_program_free(p);
        tr_graph_free(g);
        tr_jax_iface.free(ctx);
    }
}

/* With a device: BERT tiny (predict and fit) on cuda against the same graph, weights
 * and batch on the cpu, through the backend's own compile and execute. */
static void device_agrees(const struct bert_case *c) {
    struct built b;
    bert_build(c, &b);
    struct tr_graph *g = b.tg.graph;
    int n_in = tr_graph_n_inputs(g), n_out = tr_graph_n_outputs(g);
    struct tr_tensor in[16], out_cpu[16], out_cuda[16];
    assert_true(n_in <= 16 && n_out <= 16);
    for (int i = 0; i < n_in; i++) {
        int id = tr_graph_input(g, i);
        in[i] = tr_test_tensor((enum tr_dtype)tr_node_dtype(g, id), tr_node_ndim(g, id), tr_node_shape(g, id));
        tr_test_randn(&in[i], 99 + (uint64_t)i, 1.0); /* lr, step: any value; the model's own below */
    }
    struct tr_error e = {0};
    if (b.tg.model->make_inputs(b.tg.config, &b.tg.opts, 5, b.tg.n_model_inputs, in, &e)) fail_msg("%s", e.msg);
    for (int i = b.tg.n_model_inputs; i < n_in; i++) { /* fit's lr, then its step */
        assert_int_equal(in[i].dtype, TR_DTYPE_F32);
        for (int64_t j = 0; j < tr_tensor_numel(&in[i]); j++)
            ((float *)in[i].data)[j] = i == b.tg.n_model_inputs ? 1e-3f : 1.0f;
    }
    int n_up = tr_graph_n_updates(g);
    struct tr_tensor *upd = calloc((size_t)n_up + 1, sizeof *upd);
    assert_non_null(upd);
    for (int dev = 0; dev < 2; dev++) {
        struct tr_tensor *out = dev ? out_cuda : out_cpu;
        for (int i = 0; i < n_out; i++) {
            int id = tr_graph_output(g, i);
            out[i] = tr_test_tensor((enum tr_dtype)tr_node_dtype(g, id), tr_node_ndim(g, id), tr_node_shape(g, id));
            tr_test_poison(&out[i]);
        }
        struct tr_jax_context *ctx = ctx_make(dev ? TR_DEVICE_CUDA : TR_DEVICE_CPU, tr_test_dir, &e);
        if (!ctx) fail_msg("jax init (%s): %s", dev ? "cuda" : "cpu", e.msg);
        struct tr_jax_program *p = NULL;
        if (tr_jax_compile(ctx, (tr_graph_t)g, &p, &e)) fail_msg("jax compile (%s): %s", dev ? "cuda" : "cpu", e.msg);
        if (tr_jax_execute(p, n_in, in, n_out, out, &e)) fail_msg("jax execute (%s): %s", dev ? "cuda" : "cpu", e.msg);
        if (tr_jax_sync(p, &e)) fail_msg("jax sync (%s): %s", dev ? "cuda" : "cpu", e.msg);
        struct tr_backend_stats st = {0};
        tr_jax_iface.get_stats(ctx, p, &st, &e);
        printf("jax %s: %s\n", dev ? "cuda" : "cpu", st.notes);
        tr_jax_program_free(p);
        tr_jax_iface.free(ctx);
        if (!dev) { /* the cpu run updated the weights (fit): keep them, start cuda from the seed's */
            for (int u = 0; u < n_up; u++) {
                int pa = tr_graph_update_param(g, u);
                upd[u] = tr_test_tensor((enum tr_dtype)tr_node_dtype(g, pa), tr_node_ndim(g, pa), tr_node_shape(g, pa));
                memcpy(upd[u].data, tr_node_data(g, pa), tr_tensor_nbytes(&upd[u]));
            }
            tr_weights_free(b.w);
            if (tr_weights_from_seed(g, 1234, &b.w, &e)) fail_msg("%s", e.msg);
        }
    }
    /* sync brought the device's updated params back: they are the cpu's (one AdamW step
     * of lr 1e-3 moves weights of std 0.02 by ~5%, so a missing sync fails this). The
     * trained weights only: sync brings every update back alike, and some AdamW moments
     * are rounding noise on either device, never close: the attention key bias's gradient
     * is zero but for rounding (softmax ignores a shift of a row's scores), so its
     * adamw_m and adamw_v (rms 1e-14, 1e-28) differ by a relative 0.8 to 1.3 between
     * TRIDENT_CPU_ISA=avx512 and avx2 on the cpu alone, while the weight itself (its
     * step lr·g/(|g|+eps) is ~1e-8) agrees to 5e-6. */
    for (int u = 0; u < n_up; u++) {
        int pa = tr_graph_update_param(g, u), trained = 0;
        for (int t = 0; t < b.tg.train.n_trained; t++) trained |= b.tg.train.trained[t] == pa;
        if (!trained) {
            tr_test_tensor_free(&upd[u]);
            continue;
        }
        struct tr_tensor got = upd[u];
        got.data = (void *)tr_node_data(g, pa);
        double *ref = tr_test_to_f64(&upd[u]);
        char what[160];
        snprintf(what, sizeof what, "bert tiny fit: param '%s' after one step, cuda (synced) against cpu",
                 tr_node_name(g, pa));
        double norm = 0;
        for (int64_t j = 0; j < tr_tensor_numel(&got); j++) norm += ref[j] * ref[j];
        if (norm > 0) tr_assert_close(what, &got, ref, 1e-2);
        else if (memcmp(got.data, upd[u].data, tr_tensor_nbytes(&got)) != 0) fail_msg("%s: not all zeros", what);
        free(ref);
        tr_test_tensor_free(&upd[u]);
    }
    free(upd);
    for (int i = 0; i < n_out; i++) {
        double *ref = tr_test_to_f64(&out_cpu[i]);
        char what[96];
        snprintf(what, sizeof what, "bert tiny %s %s output %d, cuda against cpu", c->task, c->dtype, i);
        tr_assert_close(what, &out_cuda[i], ref, tr_test_tol(out_cpu[i].dtype));
        free(ref);
        tr_test_tensor_free(&out_cpu[i]);
        tr_test_tensor_free(&out_cuda[i]);
    }
    tr_test_tensors_free(n_in, in);
    bert_free(&b);
}

static void test_device_agrees(void **state) {
    (void)state;
    if (!have_device()) {
        printf("SKIPPED: no CUDA device found (test_device_agrees)\n");
        skip();
    }
    device_agrees(&cases[0]);
    device_agrees(&cases[1]);
}

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_cache_key, test_cache_disk,
             test_compile_error_keeps_source, test_long_rows_unfused_on_cuda, test_every_kind,
             test_bert_tiny_predict_f32, test_bert_tiny_fit_f32, test_bert_tiny_predict_bf16,
             test_bert_tiny_fit_bf16, test_bert_small_predict_f32, test_bert_small_fit_f32, test_no_device,
             test_math_mode, test_module_without_device, test_device_agrees)
