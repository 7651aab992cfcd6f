/* UPDATE_SLICE as a KV cache: a PARAM cache f32[2,3,8,4] updated in place through
 * tr_graph_add_update(cache, update_slice(cache, 2·x + 1, start, axis 2)), start an i32
 * INPUT that changes every step, on every backend configuration (tests/backendutil.h).
 *
 * After each of 3 steps (different starts) and tr_backend_sync, the param's host memory
 * must be the cache updated so far (exactly: the op is a copy and 2x+1 rounds once), and
 * the step's output, a sum over the last axis of the new cache, must agree. The update is
 * donated ("1 of 1 updates in place" in the stats notes): the kernel writes only the
 * slice in the param's memory. When the old cache is read after the update's value, it
 * cannot be donated ("0 of 1"), and the output must still see the old cache.
 * A start out of range fails the step with the kernels' message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backendutil.h"
#include "trident/graph.h"
#include "trident/loader.h"

enum { B = 2, H = 3, T = 8, D = 4, N = 2, CACHE = B * H * T * D, UPD = B * H * N * D };
static const int64_t cache_sh[4] = {B, H, T, D}, upd_sh[4] = {B, H, N, D}, one[1] = {1};

struct run {
    struct tr_plugin *p;
    struct tr_backend *be;
    struct tr_program *prog;
};

static void open_backend(const struct tr_test_backend *b, struct tr_graph *g, struct run *r) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_option opts[2];
    int n_opts = 0;
    if (b->mode) opts[n_opts++] = (struct tr_option){.key = "mode", .value = b->mode, .file = "test", .line = 1};
    if (strcmp(b->plugin, "jax") == 0)
        opts[n_opts++] = (struct tr_option){.key = "cache_dir", .value = tr_test_dir, .file = "test", .line = 2};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n_opts};
    struct tr_error e = {0};
    memset(r, 0, sizeof *r);
    if (tr_plugin_open(b->plugin, &s, &r->p, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_init(r->p, &prm, &r->be, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_compile(r->be, g, &r->prog, &e)) fail_msg("%s: compile: %s", b->label, e.msg);
}

static void close_backend(struct run *r) {
    tr_program_free(r->prog);
    tr_backend_free(r->be);
    tr_plugin_close(r->p);
}

/* The graph: y = sum over D of (read_after ? the old cache : the new one). */
static struct tr_graph *build(int read_after, float *cache_data, int *cache_id) {
    struct tr_graph *g;
    struct tr_error e = {0};
    assert_int_equal(tr_graph_init(&g, &e), TR_OK);
    int x = tr_input(g, "x", TR_DTYPE_F32, 4, upd_sh);
    int start = tr_input(g, "start", TR_DTYPE_I32, 1, one);
    int cache = tr_param(g, "cache", TR_DTYPE_F32, 4, cache_sh, 0.0f, 1.0f);
    int v = tr_update_slice(g, cache, tr_scale(g, x, 2.0f, 1.0f), start, -2);
    int y = tr_reduce(g, TR_OP_SUM, read_after ? cache : v, 3, 0);
    tr_graph_set_output(g, y, "y");
    assert_int_equal(tr_graph_add_update(g, cache, v), TR_OK);
    if (tr_graph_status(g, &e)) fail_msg("%s", e.msg);
    assert_int_equal(tr_graph_bind_param(g, cache, cache_data, &e), TR_OK);
    *cache_id = cache;
    return g;
}

static void cache_steps(int read_after) {
    static const int32_t starts[3] = {0, 6, 3};
    for (int b = 0; b < TR_TEST_N_BACKENDS; b++) {
        const char *label = tr_test_backends[b].label;
        float cache[CACHE], want[CACHE], old[CACHE];
        for (int i = 0; i < CACHE; i++) want[i] = cache[i] = (float)(0.125 * (i % 37) - 2.0);
        int cache_id;
        struct tr_graph *g = build(read_after, cache, &cache_id);
        struct run r;
        open_backend(&tr_test_backends[b], g, &r);
        struct tr_tensor in[2] = {tr_test_tensor(TR_DTYPE_F32, 4, upd_sh), tr_test_tensor(TR_DTYPE_I32, 1, one)};
        struct tr_tensor out = tr_test_tensor(TR_DTYPE_F32, 3, cache_sh);
        struct tr_error e = {0};
        for (int step = 0; step < 3; step++) {
            int32_t s = starts[step];
            ((int32_t *)in[1].data)[0] = s;
            tr_test_randn(&in[0], 100 + (uint64_t)step, 1.0);
            const float *xd = in[0].data;
            memcpy(old, want, sizeof old);
            for (int o = 0; o < B * H; o++)
                for (int j = 0; j < N; j++)
                    for (int d = 0; d < D; d++)
                        want[(o * T + s + j) * D + d] = 2.0f * xd[(o * N + j) * D + d] + 1.0f;
            tr_test_poison(&out);
            if (tr_backend_execute(r.be, r.prog, 2, in, 1, &out, &e))
                fail_msg("%s step %d: %s", label, step + 1, e.msg);
            if (tr_backend_sync(r.be, r.prog, &e)) fail_msg("%s step %d: sync: %s", label, step + 1, e.msg);
            for (int i = 0; i < CACHE; i++)
                if (cache[i] != want[i])
                    fail_msg("%s step %d (start %d): cache[%d] = %g, expected %g", label, step + 1, s, i,
                             (double)cache[i], (double)want[i]);
            const float *yd = out.data, *seen = read_after ? old : want;
            for (int row = 0; row < B * H * T; row++) {
                double acc = 0;
                for (int d = 0; d < D; d++) acc += seen[row * D + d];
                if (!(fabs(yd[row] - acc) <= 1e-5 * (1 + fabs(acc))))
                    fail_msg("%s step %d: y[%d] = %g, expected %g (the %s cache)", label, step + 1, row,
                             (double)yd[row], acc, read_after ? "old" : "new");
            }
        }
        struct tr_backend_stats st = {.struct_size = sizeof st, .abi_version = TR_ABI_VERSION};
        if (tr_backend_get_stats(r.be, r.prog, &st, &e)) fail_msg("%s: %s", label, e.msg);
        char want_note[64];
        snprintf(want_note, sizeof want_note, "%d of 1 updates in place", read_after ? 0 : 1);
        if (!strstr(st.notes, want_note)) fail_msg("%s: notes '%s' lack '%s'", label, st.notes, want_note);

        /* a start past the end fails the step, naming it */
        ((int32_t *)in[1].data)[0] = T - N + 1;
        int rc = tr_backend_execute(r.be, r.prog, 2, in, 1, &out, &e);
        if (rc == TR_OK) rc = tr_backend_sync(r.be, r.prog, &e);
        if (rc != TR_ERR_INVALID || !strstr(e.msg, "update_slice: start 7 with n 2"))
            fail_msg("%s: a start of 7 gave %d '%s'", label, rc, e.msg);
        close_backend(&r);
        tr_test_tensor_free(&in[0]);
        tr_test_tensor_free(&in[1]);
        tr_test_tensor_free(&out);
        tr_graph_free(g);
    }
}

static void test_cache_donated(void **state) { cache_steps(0); }
static void test_cache_read_after_is_copied(void **state) { cache_steps(1); }

TR_TEST_MAIN(tr_test_dir_setup, tr_test_dir_teardown, test_cache_donated, test_cache_read_after_is_copied)
