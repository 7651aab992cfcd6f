/* The plugin loader: every refusal (with the file and the reason in the message), the
 * search order, `trident list`'s scan, the wrappers' defaults and checks, and a small
 * graph run through a plugin that reaches the kernels only through the host table.
 * The plugins are tests/plugins/backend_test.c, built into TR_TEST_PLUGIN_DIR. */
#include <elf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/loader.h"

#define TP_STATS_POISON 0x5eed /* tests/plugins/backend_test.c */
#define BUILD_PLUGIN_DIR TR_BINARY_DIR "/plugins"

static char dir_ini[300];  /* tr_test_dir/ini: holds a copy of good */
static char dir_env[300];  /* tr_test_dir/env: holds a copy of good, and one named torch */
static char dir_none[300]; /* tr_test_dir/none: never created */

static const char *plugin_file(const char *variant) {
    static char buf[8][512];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 512, "%s/libtrident_backend_%s.so", TR_TEST_PLUGIN_DIR, variant);
    return p;
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static int setup_dirs(void **state) {
    if (tr_test_dir_setup(state)) return -1;
    snprintf(dir_ini, sizeof dir_ini, "%s/ini", tr_test_dir);
    snprintf(dir_env, sizeof dir_env, "%s/env", tr_test_dir);
    snprintf(dir_none, sizeof dir_none, "%s/none", tr_test_dir);
    if (mkdir(dir_ini, 0700) || mkdir(dir_env, 0700)) return -1;
    char to[400];
    snprintf(to, sizeof to, "%s/libtrident_backend_good.so", dir_ini);
    copy_file(plugin_file("good"), to);
    snprintf(to, sizeof to, "%s/libtrident_backend_good.so", dir_env);
    copy_file(plugin_file("good"), to);
    snprintf(to, sizeof to, "%s/libtrident_backend_torch.so", dir_env);
    copy_file(plugin_file("good"), to);
    return 0;
}

static int teardown_dirs(void **state) {
    return tr_test_dir_teardown(state);
}

/* ---- the host table ---- */

static void test_host_api(void **state) {
    (void)state;
    const struct tr_host_api *h = tr_host_api_get();
    assert_non_null(h);
    assert_int_equal(h->struct_size, sizeof *h);
    assert_int_equal(h->abi_version, TR_ABI_VERSION);
#define CHECK_SLOT_(ret, slot, impl, params) \
    if (!h->slot) fail_msg("host table slot %s is NULL", #slot);
    TR_HOST_API_LIST(CHECK_SLOT_)
#undef CHECK_SLOT_
    assert_int_equal(h->dtype_size(TR_DTYPE_BF16), 2);
    assert_string_equal(h->op_name(TR_OP_MATMUL), "matmul");
    struct tr_error err = {0};
    assert_int_equal(h->error_set(&err, TR_ERR_SHAPE, "n=%d", 7), TR_ERR_SHAPE);
    assert_string_equal(err.msg, "n=7");
}

/* ---- refusals ---- */

struct refusal {
    const char *variant;
    const char *reason;
};

static void check_refusals(int by_name) {
    char too_short[128], abi[128];
    snprintf(too_short, sizeof too_short, "vtable too short: %zu bytes, ABI 1.0 needs at least %zu",
             (size_t)TR_BACKEND_I_MIN_SIZE_1_0 - sizeof(void *), (size_t)TR_BACKEND_I_MIN_SIZE_1_0);
    snprintf(abi, sizeof abi, "incompatible ABI version (backend: 2.0, host: %d.%d)", TR_ABI_MAJOR, TR_ABI_MINOR);
    const struct refusal cases[] = {
        {"noentry", "no entry point [tr_backend_entry] in shared library ["},
        {"entryfail", "tr_backend_entry failed (unsupported): entryfail: this test plugin always refuses to load"},
        {"nullvtable", "tr_backend_entry returned no vtable"},
        {"badmajor", abi},
        {"short", too_short},
        {"nullslot", "required slot 'execute' is NULL"},
        {"noname", "the vtable has no name"},
        {"badname", "the vtable's name is not a word"},
        {"garbage", "not a loadable shared object"},
    };
    struct tr_plugin_search s = {.ini_dir = NULL, .env_path = TR_TEST_PLUGIN_DIR};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tr_plugin *p = (struct tr_plugin *)0x1;
        struct tr_error err = {0};
        int rc = tr_plugin_open(by_name ? cases[i].variant : plugin_file(cases[i].variant), &s, &p, &err);
        if (rc != TR_ERR_PLUGIN) fail_msg("%s: status %d (%s), expected a refusal", cases[i].variant, rc, err.msg);
        assert_null(p);
        tr_assert_msg_has(&err, plugin_file(cases[i].variant));
        tr_assert_msg_has(&err, cases[i].reason);
    }
}

static void test_refusals_by_path(void **state) { check_refusals(0); }
static void test_refusals_by_name(void **state) { check_refusals(1); }

/* ---- a small graph through a plugin (backendutil.h): gelu(x·w + b) ---- */

#define M TR_TEST_SMALL_M
#define K TR_TEST_SMALL_K
#define N TR_TEST_SMALL_N

/* Build sg, compile it on be and run it once, checked against a double reference. The
 * caller frees the program, then the graph (a program may keep its graph until freed):
 * run_free does it all. */
static struct tr_program *small_graph_run(struct tr_backend *be, struct tr_test_small *sg) {
    tr_test_small_build(sg, 0);
    struct tr_error err = {0};
    struct tr_program *prog = NULL;
    if (tr_backend_compile(be, sg->g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    struct tr_tensor x, out;
    tr_test_small_tensors(sg, &x, &out);
    tr_test_poison(&out);
    if (tr_backend_execute(be, prog, 1, &x, 1, &out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    tr_test_small_check(sg, &x, &out);
    tr_test_tensor_free(&x);
    tr_test_tensor_free(&out);
    return prog;
}

static struct tr_plugin *open_plugin(const char *variant) {
    struct tr_plugin *p = NULL;
    struct tr_error err = {0};
    if (tr_plugin_open(plugin_file(variant), NULL, &p, &err) != TR_OK) fail_msg("open %s: %s", variant, err.msg);
    return p;
}

/* prog's stats, which must be given; st is poisoned (0xab) before, so a field the
 * backend does not write shows. */
static struct tr_backend_stats stats_ok(struct tr_backend *be, struct tr_program *prog) {
    struct tr_backend_stats st;
    memset(&st, 0xab, sizeof st);
    struct tr_error err = {0};
    assert_int_equal(tr_backend_get_stats(be, prog, &st, &err), TR_OK);
    return st;
}

/* Free what small_graph_run and its backend made, in order: program, graph, backend, plugin. */
static void run_free(struct tr_program *prog, struct tr_test_small *sg, struct tr_backend *be, struct tr_plugin *p) {
    tr_program_free(prog);
    tr_graph_free(sg->g);
    tr_backend_free(be);
    tr_plugin_close(p);
}

static void test_good_runs_graph(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("good");
    assert_string_equal(tr_plugin_path(p), plugin_file("good"));
    assert_string_equal(tr_plugin_iface(p)->name, "good");
    const struct tr_option opts[] = {{.key = "mode", .value = "eager", .file = "conf/t.ini", .line = 3}};
    struct tr_backend *be = tr_test_backend_init(p, opts, 1);
    assert_string_equal(tr_backend_name(be), "good");
    /* The plugin's own answers, not the default of 1. */
    assert_int_equal(tr_backend_supports_op(be, TR_OP_MATMUL, TR_DTYPE_F32), 1);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_ATTENTION, TR_DTYPE_F32), 0);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_COUNT, TR_DTYPE_F32), 0);

    struct tr_test_small sg;
    struct tr_program *prog = small_graph_run(be, &sg);
    struct tr_backend_stats st = stats_ok(be, prog);
    assert_int_equal(st.struct_size, sizeof st);
    assert_int_equal(st.abi_version, TR_ABI_VERSION);
    assert_int_equal(st.kernel_calls, 3); /* matmul, add, gelu */
    assert_true(st.peak_bytes >= 3 * M * N * sizeof(float));
    assert_string_equal(st.mode, "eager");
    run_free(prog, &sg, be, p);
}

static void test_execute_checks(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("good");
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0), *other = tr_test_backend_init(p, NULL, 0);
    struct tr_test_small sg;
    tr_test_small_build(&sg, 0);
    struct tr_error err = {0};
    struct tr_program *prog = NULL;
    assert_int_equal(tr_backend_compile(be, sg.g, &prog, &err), TR_OK);

    const int64_t xs[] = {M, K}, bad_xs[] = {M, K + 1}, os[] = {M, N}, bad_os[] = {N, M};
    struct tr_tensor x = tr_test_tensor(TR_DTYPE_F32, 2, xs), out = tr_test_tensor(TR_DTYPE_F32, 2, os);
    struct tr_tensor x_bad = tr_test_tensor(TR_DTYPE_F32, 2, bad_xs);
    struct tr_tensor x_bf16 = tr_test_tensor(TR_DTYPE_BF16, 2, xs);
    struct tr_tensor out_bad = tr_test_tensor(TR_DTYPE_F32, 2, bad_os);
    tr_test_randn(&x, 1, 1.0);

    assert_int_equal(tr_backend_execute(be, prog, 0, NULL, 1, &out, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "got 0 inputs and 1 outputs, the graph has 1 and 1");
    assert_int_equal(tr_backend_execute(be, prog, 1, &x, 0, NULL, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "got 1 inputs and 0 outputs");

    assert_int_equal(tr_backend_execute(be, prog, 1, &x_bad, 1, &out, &err), TR_ERR_SHAPE);
    tr_assert_msg_has(&err, "input 0 'x' is f32[4,9], the graph expects f32[4,8]");
    assert_int_equal(tr_backend_execute(be, prog, 1, &x_bf16, 1, &out, &err), TR_ERR_SHAPE);
    tr_assert_msg_has(&err, "input 0 'x' is bf16[4,8], the graph expects f32[4,8]");
    assert_int_equal(tr_backend_execute(be, prog, 1, &x, 1, &out_bad, &err), TR_ERR_SHAPE);
    tr_assert_msg_has(&err, "output 0 'out' is f32[16,4], the graph expects f32[4,16]");
    struct tr_tensor x_nodata = x;
    x_nodata.data = NULL;
    assert_int_equal(tr_backend_execute(be, prog, 1, &x_nodata, 1, &out, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "input 0 'x' has no data");

    /* A program belongs to the instance that compiled it. */
    assert_int_equal(tr_backend_execute(other, prog, 1, &x, 1, &out, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "compiled by backend");
    struct tr_backend_stats st;
    assert_int_equal(tr_backend_get_stats(other, prog, &st, &err), TR_ERR_INVALID);

    /* And still runs after all those refusals. */
    tr_test_poison(&out);
    assert_int_equal(tr_backend_execute(be, prog, 1, &x, 1, &out, &err), TR_OK);
    assert_true(isfinite(((float *)out.data)[M * N - 1]));

    tr_test_tensor_free(&x);
    tr_test_tensor_free(&out);
    tr_test_tensor_free(&x_bad);
    tr_test_tensor_free(&x_bf16);
    tr_test_tensor_free(&out_bad);
    tr_backend_free(other);
    run_free(prog, &sg, be, p);
}

static void test_compile_refuses_broken_graph(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("good");
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    struct tr_graph *g = NULL;
    struct tr_error err = {0};
    assert_int_equal(tr_graph_init(&g, &err), TR_OK);
    const int64_t as[] = {2, 3}, bs[] = {4, 5};
    tr_matmul(g, tr_input(g, "a", TR_DTYPE_F32, 2, as), tr_input(g, "b", TR_DTYPE_F32, 2, bs), 0, 0);
    struct tr_program *prog = (struct tr_program *)0x1;
    assert_int_not_equal(tr_backend_compile(be, g, &prog, &err), TR_OK);
    assert_null(prog);
    tr_assert_msg_has(&err, "backend 'good': cannot compile a graph that failed to build");
    tr_graph_free(g);
    tr_backend_free(be);
    tr_plugin_close(p);
}

static void test_init_refusals(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("good");
    struct tr_backend *be = (struct tr_backend *)0x1;
    struct tr_error err = {0};
    const struct tr_option opts[] = {
        {.key = "mode", .value = "eager", .file = "conf/t.ini", .line = 6},
        {.key = "mdoe", .value = "eager", .file = "conf/t.ini", .line = 7},
    };
    struct tr_backend_params params = {.device_type = TR_DEVICE_CPU, .options = opts, .n_options = 2};
    assert_int_equal(tr_backend_init(p, &params, &be, &err), TR_ERR_PLUGIN);
    assert_null(be);
    tr_assert_msg_has(&err, "backend 'good' (");
    tr_assert_msg_has(&err, plugin_file("good"));
    tr_assert_msg_has(&err, "init failed: conf/t.ini:7: [backend.good] unknown key 'mdoe'");

    struct tr_backend_params cuda = {.device_type = TR_DEVICE_CUDA};
    assert_int_equal(tr_backend_init(p, &cuda, &be, &err), TR_ERR_PLUGIN);
    tr_assert_msg_has(&err, "runs on the cpu only");
    tr_plugin_close(p);

    /* initfail loads (init is not part of opening) and then refuses with its message. */
    p = open_plugin("initfail");
    assert_int_equal(tr_backend_init(p, NULL, &be, &err), TR_ERR_PLUGIN);
    assert_null(be);
    tr_assert_msg_has(&err, "backend 'initfail' (");
    tr_assert_msg_has(&err, plugin_file("initfail"));
    tr_assert_msg_has(&err, "init failed: initfail: no device will do");
    tr_plugin_close(p);
}

/* A newer minor with a larger vtable: accepted, its known slots used. */
static void test_newminor(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("newminor");
    const struct tr_backend_i *it = tr_plugin_iface(p);
    assert_int_equal(TR_ABI_GET_MAJOR(it->abi_version), 1);
    assert_int_equal(TR_ABI_GET_MINOR(it->abi_version), 7);
    assert_true(it->struct_size > sizeof(struct tr_backend_i));
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_ATTENTION, TR_DTYPE_F32), 0);
    struct tr_test_small sg;
    struct tr_program *prog = small_graph_run(be, &sg);
    assert_int_equal(stats_ok(be, prog).kernel_calls, 3);
    run_free(prog, &sg, be, p);
}

/* A 1.0 vtable that stops at program_free: the defaults stand in for the rest. */
static void test_defaults(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("minimal");
    assert_int_equal(tr_plugin_iface(p)->struct_size, TR_BACKEND_I_MIN_SIZE_1_0);
    assert_null(tr_plugin_iface(p)->get_stats); /* past struct_size: never read */
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    for (int op = 0; op < TR_OP_COUNT; op++) assert_int_equal(tr_backend_supports_op(be, op, TR_DTYPE_F32), 1);
    struct tr_test_small sg;
    struct tr_program *prog = small_graph_run(be, &sg);
    struct tr_backend_stats st = stats_ok(be, prog), zero;
    memset(&zero, 0, sizeof zero);
    assert_int_not_equal(st.kernel_calls, TP_STATS_POISON);
    assert_int_equal(st.struct_size, sizeof st);
    assert_int_equal(st.abi_version, TR_ABI_VERSION);
    zero.struct_size = st.struct_size;
    zero.abi_version = st.abi_version;
    assert_memory_equal(&st, &zero, sizeof st);
    run_free(prog, &sg, be, p);
}

/* A 1.0 plugin runs plain graphs, and is refused a graph with updates (training), which
 * it cannot know about, with both versions named. */
/* "good" declares cpu and f32 only: core refuses, before the plugin sees it, a bf16
 * graph, a gradient op and a graph with updates, naming the missing cap. */
static void test_compile_holds_backend_to_caps(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("good");
    assert_int_equal(tr_plugin_iface(p)->caps, TR_CAP_CPU | TR_CAP_F32);
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    struct tr_error err = {0};
    struct tr_program *prog = (struct tr_program *)0x1;
    const int64_t xs[] = {2, 3};

    struct tr_graph *g = NULL;
    assert_int_equal(tr_graph_init(&g, &err), TR_OK);
    tr_graph_set_output(g, tr_gelu(g, tr_input(g, "x", TR_DTYPE_BF16, 2, xs), 0), "y");
    assert_int_equal(tr_backend_compile(be, g, &prog, &err), TR_ERR_UNSUPPORTED);
    assert_null(prog);
    tr_assert_msg_has(&err, "backend 'good' does not declare TR_CAP_BF16: node 0 'x' (input) is bf16; it declares cpu f32");
    tr_graph_free(g);

    assert_int_equal(tr_graph_init(&g, &err), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F32, 2, xs), dy = tr_input(g, "dy", TR_DTYPE_F32, 2, xs);
    const int in[] = {tr_softmax(g, x), dy};
    int dx = tr_graph_add_node(g, TR_OP_SOFTMAX_GRAD, 2, in, &(struct tr_attrs){0});
    tr_graph_set_name(g, dx, "dx");
    tr_graph_set_output(g, dx, "dx");
    if (tr_graph_status(g, &err) != TR_OK) fail_msg("graph: %s", err.msg);
    assert_int_equal(tr_backend_compile(be, g, &prog, &err), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&err, "does not declare TR_CAP_TRAINING: node 3 'dx' is softmax_grad, a training op");
    tr_graph_free(g);

    struct tr_test_small sg;
    tr_test_small_build(&sg, 0);
    int w = tr_graph_find(sg.g, "w");
    assert_int_equal(tr_graph_add_update(sg.g, w, tr_scale(sg.g, w, 0.5f, 0.0f)), TR_OK);
    assert_int_equal(tr_backend_compile(be, sg.g, &prog, &err), TR_ERR_UNSUPPORTED);
    tr_assert_msg_has(&err, "does not declare TR_CAP_TRAINING: the graph updates 1 params");
    tr_graph_free(sg.g);
    tr_backend_free(be);
    tr_plugin_close(p);
}

static void test_v10_refuses_updates(void **state) {
    (void)state;
    struct tr_plugin *p = open_plugin("v10");
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    struct tr_test_small sg;
    struct tr_program *prog = small_graph_run(be, &sg);
    tr_program_free(prog);
    int w = tr_graph_find(sg.g, "w");
    int upd = tr_scale(sg.g, w, 0.5f, 0.0f);
    assert_int_equal(tr_graph_add_update(sg.g, w, upd), TR_OK);
    struct tr_error err = {0};
    prog = NULL;
    assert_int_equal(tr_backend_compile(be, sg.g, &prog, &err), TR_ERR_UNSUPPORTED);
    assert_null(prog);
    assert_non_null(strstr(err.msg, "speaks ABI 1.0"));
    assert_non_null(strstr(err.msg, "needs ABI 1.1"));
    tr_graph_free(sg.g);
    tr_backend_free(be);
    tr_plugin_close(p);
}

/* ---- search order ---- */

static void expect_path(const char *name, const char *ini, const char *env, const char *dir, const char *file) {
    struct tr_plugin_search s = {.ini_dir = ini, .env_path = env};
    struct tr_plugin *p = NULL;
    struct tr_error err = {0};
    if (tr_plugin_open(name, &s, &p, &err) != TR_OK) fail_msg("open %s: %s", name, err.msg);
    char want[512];
    snprintf(want, sizeof want, "%s/%s", dir, file);
    assert_string_equal(tr_plugin_path(p), want);
    tr_plugin_close(p);
}

static void test_search_order(void **state) {
    (void)state;
    const char *good = "libtrident_backend_good.so";
    char env[1200];
    expect_path("good", dir_ini, dir_env, dir_ini, good); /* [plugins] path first */
    expect_path("good", NULL, dir_env, dir_env, good);
    snprintf(env, sizeof env, "%s:%s:%s", dir_none, dir_env, TR_TEST_PLUGIN_DIR);
    expect_path("good", "", env, dir_env, good); /* first env dir that has it */
    snprintf(env, sizeof env, "%s::%s", TR_TEST_PLUGIN_DIR, dir_env);
    expect_path("good", NULL, env, TR_TEST_PLUGIN_DIR, good);

    /* env_path NULL: TRIDENT_PLUGIN_PATH from the environment. */
    char *saved = getenv("TRIDENT_PLUGIN_PATH") ? strdup(getenv("TRIDENT_PLUGIN_PATH")) : NULL;
    setenv("TRIDENT_PLUGIN_PATH", dir_env, 1);
    expect_path("good", NULL, NULL, dir_env, good);
    expect_path("good", dir_ini, NULL, dir_ini, good);
    if (saved)
        setenv("TRIDENT_PLUGIN_PATH", saved, 1);
    else
        unsetenv("TRIDENT_PLUGIN_PATH");
    free(saved);

    /* A path is used as given, whatever the search dirs say. */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir_env, good);
    expect_path(path, dir_ini, TR_TEST_PLUGIN_DIR, dir_env, good);

    /* The environment comes before the build tree: dir_env's "torch" is a copy of good. */
    expect_path("torch", NULL, dir_env, dir_env, "libtrident_backend_torch.so");
    struct tr_plugin_search s = {.ini_dir = NULL, .env_path = ""};
    struct tr_plugin *p = NULL;
    struct tr_error err = {0};
    int rc = tr_plugin_open("torch", &s, &p, &err);
    if (access(BUILD_PLUGIN_DIR "/libtrident_backend_torch.so", F_OK) == 0) {
        /* The real torch backend, taken from the build tree (or refused, by that path). */
        if (rc == TR_OK)
            assert_string_equal(tr_plugin_path(p), BUILD_PLUGIN_DIR "/libtrident_backend_torch.so");
        else
            tr_assert_msg_has(&err, BUILD_PLUGIN_DIR "/libtrident_backend_torch.so");
    } else {
        assert_int_equal(rc, TR_ERR_NOT_FOUND);
    }
    tr_plugin_close(p);
}

static void test_not_found(void **state) {
    (void)state;
    char env[1200];
    snprintf(env, sizeof env, "%s:%s", dir_env, dir_none);
    struct tr_plugin_search s = {.ini_dir = dir_ini, .env_path = env};
    struct tr_plugin *p = (struct tr_plugin *)0x1;
    struct tr_error err = {0};
    assert_int_equal(tr_plugin_open("nosuch", &s, &p, &err), TR_ERR_NOT_FOUND);
    assert_null(p);
    tr_assert_msg_has(&err, "backend 'nosuch' not found: no libtrident_backend_nosuch.so in ");
    /* Every place, in search order, with where it came from. */
    const char *places[] = {dir_ini,  "[plugins] path", dir_env,      "TRIDENT_PLUGIN_PATH",
                            dir_none, BUILD_PLUGIN_DIR, "build tree", "install dir"};
    const char *at = err.msg;
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        const char *q = strstr(at, places[i]);
        if (!q) fail_msg("\"%s\" missing or out of order in \"%s\"", places[i], err.msg);
        at = q + strlen(places[i]);
    }

    assert_int_equal(tr_plugin_open("/nonexistent/libtrident_backend_x.so", &s, &p, &err), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&err, "/nonexistent/libtrident_backend_x.so");
    assert_int_equal(tr_plugin_open("", &s, &p, &err), TR_ERR_INVALID);

    /* A path that is there but no file: a directory, a link to nothing, each said so (both
     * read "not found") */
    char path[400], dead[400];
    snprintf(path, sizeof path, "%s/libtrident_backend_dir.so", tr_test_dir);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(tr_plugin_open(path, &s, &p, &err), TR_ERR_INVALID);
    tr_assert_msg_has(&err, "libtrident_backend_dir.so is a directory, not a shared object file");
    snprintf(dead, sizeof dead, "%s/libtrident_backend_dead.so", tr_test_dir);
    assert_int_equal(symlink("/nonexistent/libtrident_backend_x.so", dead), 0);
    assert_int_equal(tr_plugin_open(dead, &s, &p, &err), TR_ERR_NOT_FOUND);
    tr_assert_msg_has(&err, "libtrident_backend_dead.so is a link to nothing");
    /* another machine's build: glibc says "No such file or directory" of it; the ELF
     * header says what it is */
    snprintf(path, sizeof path, "%s/libtrident_backend_arm.so", tr_test_dir);
    copy_file(plugin_file("good"), path);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    const unsigned char aarch64[2] = {EM_AARCH64 & 0xff, EM_AARCH64 >> 8}; /* little-endian e_machine */
    assert_int_equal(fseek(f, EI_NIDENT + 2, SEEK_SET), 0);
    assert_int_equal(fwrite(aarch64, 1, 2, f), 2);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(tr_plugin_open(path, &s, &p, &err), TR_ERR_PLUGIN);
#if defined(__x86_64__)
    tr_assert_msg_has(&err, "it is built for aarch64, and this trident runs on x86-64: build it here");
#endif
}

/* ---- the scan behind `trident list` ---- */

#define MAX_SEEN 64

struct seen {
    int n;
    struct {
        char path[512], origin[64], name[64], description[128], reason[TR_ERROR_MSG_MAX];
        int accepted, shadowed;
    } c[MAX_SEEN];
};

static void visit(const struct tr_plugin_candidate *c, void *user) {
    struct seen *s = user;
    if (s->n == MAX_SEEN) return;
    snprintf(s->c[s->n].path, sizeof s->c[0].path, "%s", c->path);
    snprintf(s->c[s->n].origin, sizeof s->c[0].origin, "%s", c->origin);
    snprintf(s->c[s->n].name, sizeof s->c[0].name, "%s", c->name ? c->name : "(null)");
    snprintf(s->c[s->n].description, sizeof s->c[0].description, "%s", c->description ? c->description : "(null)");
    snprintf(s->c[s->n].reason, sizeof s->c[0].reason, "%s", c->reason ? c->reason : "(null)");
    s->c[s->n].accepted = c->accepted;
    s->c[s->n].shadowed = c->shadowed;
    s->n++;
}

static int find_seen(const struct seen *s, const char *path) {
    int at = -1;
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->c[i].path, path) == 0) {
            if (at >= 0) fail_msg("%s listed twice", path);
            at = i;
        }
    return at;
}

static void test_scan(void **state) {
    (void)state;
    const struct refusal expected[] = {
        {"good", NULL},
        {"newminor", NULL},
        {"minimal", NULL},
        {"v10", NULL},
        {"wrong", NULL},
        {"initfail", NULL},
        {"noentry", "no entry point"},
        {"entryfail", "entryfail: this test plugin"},
        {"nullvtable", "no vtable"},
        {"badmajor", "incompatible ABI version"},
        {"short", "vtable too short"},
        {"nullslot", "'execute' is NULL"},
        {"noname", "no name"},
        {"badname", "not a word"},
        {"garbage", "not a loadable shared object"},
    };
    const int n_expected = (int)(sizeof expected / sizeof expected[0]);
    struct seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    /* The test dir twice: listed once. */
    char env[1200];
    snprintf(env, sizeof env, "%s:%s:%s", TR_TEST_PLUGIN_DIR, dir_none, TR_TEST_PLUGIN_DIR);
    struct tr_plugin_search search = {.ini_dir = dir_ini, .env_path = env};
    struct tr_error err = {0};
    assert_int_equal(tr_plugin_scan(&search, visit, s, &err), TR_OK);

    char path[512];
    snprintf(path, sizeof path, "%s/libtrident_backend_good.so", dir_ini);
    int i = find_seen(s, path);
    assert_true(i == 0); /* the [plugins] path comes first */
    assert_string_equal(s->c[i].origin, "[plugins] path");
    assert_true(s->c[i].accepted && !s->c[i].shadowed);
    assert_string_equal(s->c[i].name, "good");
    assert_string_equal(s->c[i].reason, "");

    int in_test_dir = 0;
    for (int j = 0; j < s->n; j++)
        if (strncmp(s->c[j].path, TR_TEST_PLUGIN_DIR "/", strlen(TR_TEST_PLUGIN_DIR) + 1) == 0) in_test_dir++;
    assert_int_equal(in_test_dir, n_expected);
    for (int e = 0; e < n_expected; e++) {
        i = find_seen(s, plugin_file(expected[e].variant));
        if (i < 0) fail_msg("scan did not list %s", plugin_file(expected[e].variant));
        assert_string_equal(s->c[i].origin, "TRIDENT_PLUGIN_PATH");
        if (expected[e].reason) {
            if (s->c[i].accepted) fail_msg("%s accepted", expected[e].variant);
            assert_false(s->c[i].shadowed);
            if (!strstr(s->c[i].reason, expected[e].reason) || !strstr(s->c[i].reason, s->c[i].path))
                fail_msg("%s: reason \"%s\" lacks \"%s\" or the path", expected[e].variant, s->c[i].reason,
                         expected[e].reason);
        } else {
            if (!s->c[i].accepted) fail_msg("%s refused: %s", expected[e].variant, s->c[i].reason);
            assert_string_equal(s->c[i].name, expected[e].variant);
            assert_string_equal(s->c[i].reason, "");
            assert_non_null(strstr(s->c[i].description, expected[e].variant));
            /* good is also in dir_ini, searched earlier. */
            assert_int_equal(s->c[i].shadowed, strcmp(expected[e].variant, "good") == 0);
        }
    }
    free(s);
}

TR_TEST_MAIN(setup_dirs, teardown_dirs, test_host_api, test_refusals_by_path, test_refusals_by_name,
             test_good_runs_graph, test_execute_checks, test_compile_refuses_broken_graph, test_init_refusals,
             test_newminor, test_defaults, test_v10_refuses_updates, test_compile_holds_backend_to_caps,
             test_search_order, test_not_found, test_scan)
