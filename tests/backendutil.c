#include <string.h>
#include "backendutil.h"
#include "trident/loader.h"

const struct tr_test_backend tr_test_backends[TR_TEST_N_BACKENDS] = {
    {"torch", "torch", NULL},
    {"torch:reduce-overhead", "torch", "reduce-overhead"},
    {"tf", "tf", NULL},
    {"jax", "jax", NULL},
};

void tr_test_run_backend(const struct tr_test_backend *b, const char *jax_cache_dir, struct tr_graph *g,
                         const struct tr_tensor *in, int steps, struct tr_tensor *out, struct tr_backend_stats *st) {
    struct tr_plugin_search s = {.ini_dir = TR_BINARY_DIR "/plugins", .env_path = ""};
    struct tr_option opts[2];
    int n_opts = 0;
    if (b->mode) opts[n_opts++] = (struct tr_option){.key = "mode", .value = b->mode, .file = "test", .line = 1};
    if (jax_cache_dir && strcmp(b->plugin, "jax") == 0)
        opts[n_opts++] = (struct tr_option){.key = "cache_dir", .value = jax_cache_dir, .file = "test", .line = 2};
    struct tr_backend_params prm = {.struct_size = sizeof prm, .abi_version = TR_ABI_VERSION,
                                    .device_type = TR_DEVICE_CPU, .options = opts, .n_options = n_opts};
    struct tr_plugin *p = NULL;
    struct tr_backend *be = NULL;
    struct tr_program *prog = NULL;
    struct tr_error e = {0};
    if (tr_plugin_open(b->plugin, &s, &p, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_init(p, &prm, &be, &e)) fail_msg("%s: %s", b->label, e.msg);
    if (tr_backend_compile(be, g, &prog, &e)) fail_msg("%s: compile: %s", b->label, e.msg);
    int n_out = tr_graph_n_outputs(g);
    for (int i = 0; i < n_out; i++) {
        struct tr_tensor t = tr_node_tensor(g, tr_graph_output(g, i));
        out[i] = tr_test_tensor((enum tr_dtype)t.dtype, t.ndim, t.shape);
    }
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < n_out; i++) tr_test_poison(&out[i]);
        if (tr_backend_execute(be, prog, tr_graph_n_inputs(g), in, n_out, out, &e))
            fail_msg("%s step %d: %s", b->label, step + 1, e.msg);
    }
    if (st) {
        *st = (struct tr_backend_stats){.struct_size = sizeof *st, .abi_version = TR_ABI_VERSION};
        if (tr_backend_get_stats(be, prog, st, &e)) fail_msg("%s: %s", b->label, e.msg);
    }
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(p);
}
