/* torch backend — entry point, vtable and options. */
#include <stddef.h>
#include <stdio.h>
#include "iface.h"
#include "options.h"
#include "stats.h"
#include "torch.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

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

/* The CUDA graphs its programs captured, freed with the backend. */
static void torch_release(struct tr_torch_context *c) { tr_kernels_cuda_graphs_free(c->graphs); }

/* The context init starts from, before the options. */
static const struct tr_torch_context torch_defaults = {.mode = TR_TORCH_MODE_EAGER,
                                                       .warmup_steps = TR_TORCH_WARMUP_DEFAULT};

TR_BACKEND_DEFINE(tr_torch_iface, torch, "torch",
                  "PyTorch style: eager op-by-op kernel calls, outputs from a caching allocator; "
                  "mode = reduce-overhead records a step once and replays it (a CUDA graph on cuda)",
                  TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
                  tr_torch_context, torch_defaults, torch_options, torch_release,
                  tr_torch_program, tr_torch);

/* Eager mode calls the shared kernels op by op (and replays those calls), so what is
 * supported is what they take. */
static int torch_supports_op(void *ctx, int op, int dtype) { return tr_kernels_supports(op, dtype); }

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
