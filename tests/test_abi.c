/* The plugin ABI's edges as a third-party author meets them, written against whatever
 * minor this header has (TR_ABI_MINOR + 1, TR_ABI_MAJOR - 1), so that they keep their
 * meaning when the ABI grows: a plugin of the next minor is accepted and its unknown
 * slot never called; one of the previous major, one that hands back no vtable, and one
 * whose struct_size does not even reach the slots it claims are refused with the file
 * and the reason. Then the SDK's example backend (examples/backend_minimal, built in
 * tree into example_plugins/): its options (an unknown key refused by name, with the
 * file and line) and its numbers, with what it ran itself counted in get_stats.
 * tests/test_loader.c has the foundation's cases; tests/test_install.sh the install. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "testutil.h"
#include "trident/graph.h"
#include "trident/loader.h"

#define TP_STATS_POISON 0x5eed /* tests/plugins/backend_test.c */
#define EXAMPLE TR_BINARY_DIR "/example_plugins/libtrident_backend_minimal.so"

#define ABI_PLUGIN_DIR TR_BINARY_DIR "/abi_plugins" /* tests/plugins/CMakeLists.txt */

/* nextminor, oldmajor and tiny live in ABI_PLUGIN_DIR; the foundation's variants in
 * TR_TEST_PLUGIN_DIR. */
static const char *plugin_file(const char *variant) {
    static char buf[4][512];
    static int next;
    char *p = buf[next++ % 4];
    int mine = !strcmp(variant, "nextminor") || !strcmp(variant, "oldmajor") || !strcmp(variant, "tiny");
    snprintf(p, 512, "%s/libtrident_backend_%s.so", mine ? ABI_PLUGIN_DIR : TR_TEST_PLUGIN_DIR, variant);
    return p;
}

static struct tr_plugin *open_ok(const char *path) {
    struct tr_plugin *p = NULL;
    struct tr_error err = {0};
    if (tr_plugin_open(path, NULL, &p, &err) != TR_OK) fail_msg("open %s: %s", path, err.msg);
    return p;
}

static void expect_refusal(const char *variant, const char *reason) {
    struct tr_plugin *p = (struct tr_plugin *)0x1;
    struct tr_error err = {0};
    int rc = tr_plugin_open(plugin_file(variant), NULL, &p, &err);
    if (rc != TR_ERR_PLUGIN) fail_msg("%s: status %d (%s), expected a refusal", variant, rc, err.msg);
    assert_null(p);
    tr_assert_msg_has(&err, plugin_file(variant));
    tr_assert_msg_has(&err, reason);
}

/* ---- a small graph (backendutil.h): softmax(gelu(x·w + b) * x2), checked against doubles ---- */

/* Two steps, outputs poisoned before each; the second is compared. */
static void small_run(struct tr_backend *be, struct tr_test_small *s, struct tr_backend_stats *st) {
    struct tr_error err = {0};
    struct tr_program *prog = NULL;
    if (tr_backend_compile(be, s->g, &prog, &err) != TR_OK) fail_msg("compile: %s", err.msg);
    struct tr_tensor in[2], out;
    tr_test_small_tensors(s, in, &out);
    for (int step = 0; step < 2; step++) {
        tr_test_poison(&out);
        if (tr_backend_execute(be, prog, 2, in, 1, &out, &err) != TR_OK) fail_msg("execute: %s", err.msg);
    }
    tr_test_small_check(s, in, &out);
    if (st && tr_backend_get_stats(be, prog, st, &err) != TR_OK) fail_msg("stats: %s", err.msg);
    tr_program_free(prog);
    tr_test_tensors_free(2, in);
    tr_test_tensor_free(&out);
}

/* ---- versions ---- */

static void test_next_minor_accepted(void **state) {
    (void)state;
    struct tr_plugin *p = open_ok(plugin_file("nextminor"));
    const struct tr_backend_i *it = tr_plugin_iface(p);
    assert_int_equal(TR_ABI_GET_MAJOR(it->abi_version), TR_ABI_MAJOR);
    assert_int_equal(TR_ABI_GET_MINOR(it->abi_version), TR_ABI_MINOR + 1);
    assert_true(it->struct_size > sizeof(struct tr_backend_i));
    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    struct tr_test_small s;
    tr_test_small_build(&s, 1);
    struct tr_backend_stats st;
    small_run(be, &s, &st);
    assert_int_not_equal(st.kernel_calls, TP_STATS_POISON); /* the unknown slot was not called */
    assert_int_equal(st.kernel_calls, 5);
    tr_graph_free(s.g);
    tr_backend_free(be);
    tr_plugin_close(p);
}

static void test_old_major_refused(void **state) {
    (void)state;
    char why[128];
    snprintf(why, sizeof why, "incompatible ABI version (backend: %d.9, host: %d.%d)", TR_ABI_MAJOR - 1, TR_ABI_MAJOR,
             TR_ABI_MINOR);
    expect_refusal("oldmajor", why);
}

static void test_null_vtable_refused(void **state) {
    (void)state;
    expect_refusal("nullvtable", "tr_backend_entry returned no vtable");
}

static void test_struct_size_short_of_its_claim_refused(void **state) {
    (void)state;
    char why[128];
    snprintf(why, sizeof why, "vtable too short: %zu bytes", offsetof(struct tr_backend_i, name));
    expect_refusal("tiny", why);
}

/* `trident list` shows the same verdicts, each with its reason. */
struct scan_seen {
    int nextminor_ok, oldmajor_refused, tiny_refused;
};

static void scan_visit(const struct tr_plugin_candidate *c, void *user) {
    struct scan_seen *s = user;
    if (strstr(c->path, "_nextminor.so")) s->nextminor_ok = c->accepted;
    if (strstr(c->path, "_oldmajor.so")) s->oldmajor_refused = !c->accepted && strstr(c->reason, "incompatible ABI");
    if (strstr(c->path, "_tiny.so")) s->tiny_refused = !c->accepted && strstr(c->reason, "too short");
}

static void test_scan_gives_reasons(void **state) {
    (void)state;
    struct tr_plugin_search s = {.ini_dir = ABI_PLUGIN_DIR, .env_path = ""};
    struct scan_seen seen = {0};
    struct tr_error err = {0};
    assert_int_equal(tr_plugin_scan(&s, scan_visit, &seen, &err), TR_OK);
    assert_true(seen.nextminor_ok);
    assert_true(seen.oldmajor_refused);
    assert_true(seen.tiny_refused);
}

/* ---- the example backend ---- */

static void test_example_options(void **state) {
    (void)state;
    struct tr_plugin *p = open_ok(EXAMPLE);
    assert_string_equal(tr_plugin_iface(p)->name, "minimal");
    struct tr_backend_params prm = {.device_type = TR_DEVICE_CPU};
    struct tr_backend *be = NULL;
    struct tr_error err = {0};

    const struct tr_option typo[] = {{.key = "own_ops", .value = "true", .file = "conf/x.ini", .line = 6},
                                     {.key = "verbsoe", .value = "true", .file = "conf/x.ini", .line = 7}};
    prm.options = typo;
    prm.n_options = 2;
    assert_int_equal(tr_backend_init(p, &prm, &be, &err), TR_ERR_PLUGIN);
    assert_null(be);
    tr_assert_msg_has(&err, "conf/x.ini:7: [backend.minimal] unknown key 'verbsoe'");
    tr_assert_msg_has(&err, "known: own_ops, verbose");

    const struct tr_option bad[] = {{.key = "own_ops", .value = "maybe", .file = "conf/x.ini", .line = 3}};
    prm.options = bad;
    prm.n_options = 1;
    assert_int_equal(tr_backend_init(p, &prm, &be, &err), TR_ERR_PLUGIN);
    tr_assert_msg_has(&err, "conf/x.ini:3: [backend.minimal] own_ops = maybe: expected true or false");

    prm.device_type = TR_DEVICE_CUDA;
    prm.n_options = 0;
    assert_int_equal(tr_backend_init(p, &prm, &be, &err), TR_ERR_PLUGIN);
    tr_assert_msg_has(&err, "cpu only");
    tr_plugin_close(p);
}

/* Its own loops agree with the reference, and it counts what it ran: matmul, add, gelu
 * and mul itself, softmax through the shared kernels; with own_ops = false, all five. */
static void test_example_runs_and_counts(void **state) {
    (void)state;
    struct tr_plugin *p = open_ok(EXAMPLE);
    struct tr_test_small s;
    tr_test_small_build(&s, 1);
    struct tr_backend_stats st;

    struct tr_backend *be = tr_test_backend_init(p, NULL, 0);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_MATMUL, TR_DTYPE_F32), 1);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_SOFTMAX, TR_DTYPE_F32), 0);
    assert_int_equal(tr_backend_supports_op(be, TR_OP_MATMUL, TR_DTYPE_BF16), 0);
    small_run(be, &s, &st);
    assert_int_equal(st.kernel_calls, 5);
    if (!strstr(st.notes, "ran itself: 1 matmul, 3 elementwise; shared kernels: 1"))
        fail_msg("notes: %s", st.notes);
    tr_backend_free(be);

    const struct tr_option off[] = {{.key = "own_ops", .value = "false", .file = "t.ini", .line = 2}};
    be = tr_test_backend_init(p, off, 1);
    small_run(be, &s, &st);
    if (!strstr(st.notes, "ran itself: 0 matmul, 0 elementwise; shared kernels: 5")) fail_msg("notes: %s", st.notes);
    tr_backend_free(be);
    tr_graph_free(s.g);
    tr_plugin_close(p);
}

/* A host of ABI 1.0 (an older trident loading today's plugins) hands a table that ends
 * before the 1.1 update slots. Every in-tree plugin and the example must accept it and
 * run a plain graph without touching those slots (NULL here: a call would crash). */
static void test_host_1_0_runs_plain_graph(void **state) {
    (void)state;
    const char *files[] = {EXAMPLE, TR_BINARY_DIR "/plugins/libtrident_backend_tf.so",
                           TR_BINARY_DIR "/plugins/libtrident_backend_torch.so",
                           TR_BINARY_DIR "/plugins/libtrident_backend_jax.so"};
    struct tr_host_api h = *tr_host_api_get();
    h.abi_version = TR_ABI_MAKE(1, 0);
    h.struct_size = (uint32_t)TR_HOST_API_MIN_SIZE_1_0;
    h.graph_n_updates = NULL;
    h.graph_update_param = NULL;
    h.graph_update_value = NULL;
    struct tr_test_small s;
    tr_test_small_build(&s, 1);
    struct tr_tensor in[2], out;
    tr_test_small_tensors(&s, in, &out);
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        void *dl = dlopen(files[f], RTLD_NOW | RTLD_LOCAL);
        if (!dl) fail_msg("dlopen %s: %s", files[f], dlerror());
        tr_backend_entry_fn entry = (tr_backend_entry_fn)dlsym(dl, TR_BACKEND_ENTRY_SYMBOL);
        assert_non_null(entry);
        const struct tr_backend_i *it = NULL;
        struct tr_error err = {0};
        if (entry(h.abi_version, &h, &it, &err) != TR_OK) fail_msg("%s: entry refused a 1.0 host: %s", files[f], err.msg);
        struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = h.abi_version,
                                        .device_type = TR_DEVICE_CPU};
        void *ctx = NULL, *prog = NULL;
        if (it->init(&h, &prm, &ctx, &err) != TR_OK) fail_msg("%s: init: %s", files[f], err.msg);
        if (it->compile(ctx, (tr_graph_t)s.g, &prog, &err) != TR_OK) fail_msg("%s: compile: %s", files[f], err.msg);
        tr_test_poison(&out);
        if (it->execute(ctx, prog, 2, in, 1, &out, &err) != TR_OK) fail_msg("%s: execute: %s", files[f], err.msg);
        tr_test_small_check(&s, in, &out);
        it->program_free(ctx, prog);
        it->free(ctx);
        dlclose(dl);
    }
    tr_test_tensors_free(2, in);
    tr_test_tensor_free(&out);
    tr_graph_free(s.g);
}

TR_TEST_MAIN(NULL, NULL, test_next_minor_accepted, test_old_major_refused, test_null_vtable_refused,
             test_struct_size_short_of_its_claim_refused, test_scan_gives_reasons, test_example_options,
             test_example_runs_and_counts, test_host_1_0_runs_plain_graph)
