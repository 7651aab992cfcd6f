/* Run a model from an installed trident: BERT tiny predict, one step on the torch
 * backend, and its logits printed.
 *
 *   run_bert [FILE.ini]
 *
 * Without FILE.ini it runs the INI below; with one, that file's [run] (model, preset,
 * dtype, device, batch, seq_len, seed, weights), its [plugins] path and the first of its
 * [run] backends with that backend's [backend.NAME] options (the harness's keys, steps
 * and tolerance among them, mean nothing here). The steps are those of
 * `trident run` for one backend (core/src/bench.c): the same graph, the same weights
 * from the seed and the same batch from the model's make_inputs, so the same logits.
 *
 * Prints two lines:
 *   bert/tiny predict f32, batch 2, seq_len 16, seed 1234, on torch (PATH)
 *   logits [2,2]: -0.0457128361 -0.106956914 -0.0327093862 -0.116904035
 * the first 8 values at most (then "..."), each with %.9g: enough digits that an f32
 * printed and read back is the same number, so another program can check them.
 * Every call's status is checked; on failure the message goes to stderr, exit status 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "trident/bench.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/loader.h"
#include "trident/models.h"
#include "trident/weights.h"

#define PRINT_MAX 8

static const char default_ini[] = "[run]\n"
                                  "model = bert\n"
                                  "preset = tiny\n"
                                  "task = predict\n"
                                  "backends = torch\n"
                                  "batch = 2\n"
                                  "seq_len = 16\n"
                                  "seed = 1234\n";

/* One host tensor per graph input (or output), with the node's shape and dtype, zeroed. */
static int alloc_io(const struct tr_graph *g, int n, int (*node_of)(const struct tr_graph *, int),
                    struct tr_tensor *ts, struct tr_error *err) {
    for (int i = 0; i < n; i++) {
        ts[i] = tr_node_tensor(g, node_of(g, i));
        void *p;
        int rc = tr_host_alloc(&p, tr_tensor_nbytes(&ts[i]), err);
        if (rc) return tr_error_prefix(err, "%s", tr_node_name(g, node_of(g, i)));
        memset(p, 0, tr_tensor_nbytes(&ts[i]));
        ts[i].data = p;
    }
    return TR_OK;
}

static void free_io(struct tr_tensor *ts, int n) {
    for (int i = 0; ts && i < n; i++) tr_host_free(ts[i].data);
    free(ts);
}

static int print_logits(const struct tr_graph *g, const struct tr_tensor *out, struct tr_error *err) {
    for (int i = 0; i < tr_graph_n_outputs(g); i++) {
        if (strcmp(tr_graph_output_name(g, i), "logits") != 0) continue;
        char shape[80];
        printf("logits %s:", tr_shape_str(out[i].ndim, out[i].shape, shape, sizeof shape));
        int64_t n = tr_tensor_numel(&out[i]);
        for (int64_t j = 0; j < n && j < PRINT_MAX; j++) printf(" %.9g", tr_tensor_get_f64(&out[i], j));
        printf("%s\n", n > PRINT_MAX ? " ..." : "");
        return TR_OK;
    }
    return tr_error_set(err, TR_ERR_NOT_FOUND, "the graph has no output named 'logits'");
}

/* The task graph of cfg, built and run once on cfg's first backend; the logits printed. */
static int run(const struct tr_config *cfg, struct tr_error *err) {
    if (strcmp(cfg->task, "predict") != 0)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: [run] task = %s: this example runs predict", cfg->file,
                            cfg->task);
    if (cfg->n_backends < 1) return tr_error_set(err, TR_ERR_INVALID, "%s: [run] backends: none listed", cfg->file);

    struct tr_task_graph tg;
    int rc = tr_task_graph_build(cfg, tr_builtin_models, &tg, err);
    if (rc) return rc;
    struct tr_graph *g = tg.graph;
    const int n_in = tr_graph_n_inputs(g), n_out = tr_graph_n_outputs(g);
    struct tr_weights *w = NULL;
    struct tr_plugin *plugin = NULL;
    struct tr_backend *be = NULL;
    struct tr_program *prog = NULL;
    struct tr_tensor *in = calloc((size_t)n_in + 1, sizeof *in), *out = calloc((size_t)n_out + 1, sizeof *out);
    if (!in || !out) {
        rc = tr_error_set(err, TR_ERR_NOMEM, "out of memory");
        goto done;
    }

    /* Weights bound to the graph's PARAMs: from [run] weights, or drawn from the seed;
     * with [run] missing = seed what the file lacks (a checkpoint without the task's
     * head) is drawn too, and named in a warning. */
    const struct tr_weights_load_opts wo = {.seed = cfg->seed, .missing_seed = cfg->missing_seed,
                                            .variant = cfg->weights_variant};
    rc = cfg->weights[0] ? tr_weights_load_opts(g, cfg->weights, &wo, &w, err)
                         : tr_weights_from_seed(g, cfg->seed, &w, err);
    if (rc) goto done;
    tr_weights_warn_seeded(w, cfg->weights, cfg->seed, stderr);
    tr_weights_warn_unused(w, stderr);
    if ((rc = alloc_io(g, n_in, tr_graph_input, in, err)) != TR_OK) goto done;
    if ((rc = alloc_io(g, n_out, tr_graph_output, out, err)) != TR_OK) goto done;
    rc = tg.model->make_inputs(tg.config, &tg.opts, cfg->seed, tg.n_model_inputs, in, err);
    if (rc) goto done;

    /* The backend: found as `trident run` finds it ([plugins] path, TRIDENT_PLUGIN_PATH,
     * then the installed PREFIX/lib/trident), its [backend.NAME] options passed on. */
    const struct tr_config_backend *cb = &cfg->backends[0];
    struct tr_plugin_search search = {.ini_dir = cfg->plugin_path[0] ? cfg->plugin_path : NULL, .env_path = NULL};
    rc = tr_plugin_open(cb->path[0] ? cb->path : cb->name, &search, &plugin, err);
    if (rc) goto done;
    struct tr_option opts[TR_CONFIG_MAX_KV + 1];
    int n_opts = tr_config_backend_options(cfg, cb, opts, TR_CONFIG_MAX_KV + 1);
    struct tr_backend_params params = {
        .struct_size = sizeof params, .abi_version = TR_ABI_VERSION, .device_type = cfg->device_type,
        .device_index = 0, .options = opts, .n_options = n_opts, .math = cfg->math,
    };
    if ((rc = tr_backend_init(plugin, &params, &be, err)) != TR_OK) goto done;
    if ((rc = tr_backend_compile(be, g, &prog, err)) != TR_OK) goto done;
    if ((rc = tr_backend_execute(be, prog, n_in, in, n_out, out, err)) != TR_OK) goto done;

    printf("%s/%s %s %s, batch %lld, seq_len %lld, seed %llu, on %s (%s)\n", cfg->model, cfg->preset, cfg->task,
           tr_dtype_name(cfg->dtype), (long long)cfg->batch, (long long)cfg->seq_len,
           (unsigned long long)cfg->seed, tr_backend_name(be), tr_plugin_path(plugin));
    rc = print_logits(g, out, err);
done:
    /* The program before its backend, the backend before its plugin; the weights outlive
     * every use of the graph they are bound to. */
    tr_program_free(prog);
    tr_backend_free(be);
    tr_plugin_close(plugin);
    free_io(in, n_in);
    free_io(out, n_out);
    tr_weights_free(w);
    tr_task_graph_free(&tg);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: run_bert [FILE.ini]\n");
        return 2;
    }
    /* static: a config is large (its [model] and [backend.*] lines) */
    static struct tr_config cfg;
    struct tr_error err = {0};
    int rc = argc == 2 ? tr_config_load(argv[1], &cfg, &err)
                       : tr_config_load_string(default_ini, "run_bert's INI", &cfg, &err);
    if (rc == TR_OK) rc = run(&cfg, &err);
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "run_bert: error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
