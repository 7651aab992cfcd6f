/* torch backend — entry point, vtable and options. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "resident.h"
#include "stats.h"
#include "torch.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

/* The host's table, kept from tr_backend_entry for as long as the plugin is loaded. */
static const struct tr_host_api *torch_host;

static const char *const torch_modes[] = {"eager", "reduce-overhead", NULL}; /* enum tr_torch_mode */

/* One [backend.torch] section serves both `torch` and `torch:reduce-overhead`, so
 * warmup_steps is taken (and ignored) in eager mode too. */
static const struct tr_opt_spec torch_options[] = {
    {.key = "mode", .type = TR_OPT_CHOICE, .offset = offsetof(struct tr_torch_context, mode), .choices = torch_modes,
     .expected = "eager or reduce-overhead"},
    {.key = "threads", .type = TR_OPT_INT, .offset = offsetof(struct tr_torch_context, threads), .min = 0, .max = 1024,
     .expected = "an integer from 1 to 1024 (0: the OpenMP default)"},
    {.key = "warmup_steps", .type = TR_OPT_INT, .offset = offsetof(struct tr_torch_context, warmup_steps), .min = 0,
     .max = TR_TORCH_WARMUP_MAX}, /* eager steps before mode = reduce-overhead records one */
};

static int torch_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                      struct tr_error *err) {
    struct tr_torch_context c = {.mode = TR_TORCH_MODE_EAGER, .warmup_steps = TR_TORCH_WARMUP_DEFAULT};
    const struct tr_backend_setup at = {&c.host, &c.device_type, &c.device_index, &c.math};
    return tr_backend_init_common("torch", host, torch_host, params, torch_options,
                                  (int)(sizeof torch_options / sizeof torch_options[0]), &c, sizeof c, &at, ctx, err);
}

static void torch_free(void *ctx) {
    struct tr_torch_context *c = ctx;
    if (c) tr_kernels_cuda_graphs_free(c->graphs);
    if (c) tr_resident_store_free(c->params); /* programs still alive past the backend's end */
    free(c);
}

/* Every op reaches the shared kernels (jax's generated kernels cover a subset of the
 * same), so what is supported is what they take. */
static int torch_supports_op(void *ctx, int op, int dtype) { return tr_kernels_supports(op, dtype); }

static int torch_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {
    struct tr_torch_program *p = NULL;
    int rc = tr_torch_compile(ctx, g, &p, err);
    *prog = p;
    return rc;
}

static int torch_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                         struct tr_tensor *outputs, struct tr_error *err) {
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "torch: execute without a compiled program");
    return tr_torch_execute(prog, n_inputs, inputs, n_outputs, outputs, err);
}

static void torch_program_free(void *ctx, void *prog) { tr_torch_program_free(prog); }

static int torch_sync(void *ctx, void *prog, struct tr_error *err) {
    (void)ctx;
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "torch: sync without a compiled program");
    return tr_torch_sync(prog, err);
}

static int torch_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    int rc = tr_backend_stats_start("torch", st, err);
    if (rc != TR_OK) return rc;
    if (prog) tr_torch_program_stats(prog, st);
    const struct tr_torch_context *c = ctx;
    snprintf(st->mode, sizeof st->mode, "%s",
             c && c->mode == TR_TORCH_MODE_REDUCE_OVERHEAD ? "reduce-overhead" : "eager");
    return TR_OK;
}

static const struct tr_backend_i torch_iface = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = "torch",
    .description = "PyTorch style: eager op-by-op kernel calls, outputs from a caching allocator; "
                   "mode = reduce-overhead records a step once and replays it (a CUDA graph on cuda)",
    .caps = TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
    .init = torch_init,
    .free = torch_free,
    .supports_op = torch_supports_op,
    .compile = torch_compile,
    .execute = torch_execute,
    .program_free = torch_program_free,
    .get_stats = torch_get_stats,
    .sync = torch_sync,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    return tr_backend_entry_check("torch", host_abi, host, &torch_iface, iface, &torch_host, err);
}
