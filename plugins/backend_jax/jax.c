/* jax backend — entry point, vtable and options. */
#include <stddef.h>
#include <stdio.h>
#include "iface.h"
#include "jax_internal.h"
#include "options.h"
#include "stats.h"

static const char *const jax_modes[] = {"fused", "unfused", NULL};

static const struct tr_opt_spec jax_options[] = {
    {.key = "cache_dir", .type = TR_OPT_STRING, .offset = offsetof(struct tr_jax_context, cache_dir),
     .size = JAX_PATH_MAX, .expected = "a directory path",
     .where_offset = offsetof(struct tr_jax_context, cache_dir_key), .where_size = JAX_WHERE_MAX},
    {.key = "cc", .type = TR_OPT_STRING, .offset = offsetof(struct tr_jax_context, cc), .size = JAX_PATH_MAX,
     .expected = "a C compiler's name or path",
     .where_offset = offsetof(struct tr_jax_context, cc_key), .where_size = JAX_WHERE_MAX},
    {.key = "fuse", .type = TR_OPT_BOOL, .offset = offsetof(struct tr_jax_context, fuse)},
    /* `backends = jax, jax:unfused`: one program fused and one not, side by side */
    {.key = "mode", .type = TR_OPT_CHOICE, .offset = offsetof(struct tr_jax_context, mode), .choices = jax_modes,
     .expected = "fused or unfused (jax:unfused: every op its own kernel, as [backend.jax] fuse = false)"},
};

/* The context init starts from, before the options. */
static const struct tr_jax_context jax_defaults = {
    .fuse = 1, .mode = -1, .attn_bwd = 1, .cc = "cc", .cc_key = "the default compiler (set [backend.jax] cc)"};

TR_BACKEND_DEFINE(tr_jax_iface, jax, "jax",
                  "JAX/XLA style: whole-graph compiler (simplify, fuse, generate C or CUDA C, one arena, flat schedule)",
                  TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
                  tr_jax_context, jax_defaults, jax_options, NULL,
                  tr_jax_program, tr_jax);

/* Every op reaches the shared kernels (jax's generated kernels cover a subset of the
 * same), so what is supported is what they take. */
static int jax_supports_op(void *ctx, int op, int dtype) { return tr_kernels_supports(op, dtype); }

static int jax_sync(void *ctx, void *prog, struct tr_error *err) { return tr_jax_sync(prog, err); }

static int jax_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    int rc = tr_backend_stats_start("jax", st, err);
    if (rc != TR_OK) return rc;
    if (prog) tr_jax_program_stats(prog, st);
    const struct tr_jax_context *c = ctx;
    snprintf(st->mode, sizeof st->mode, "%s", c && !jax_ctx_fuses(c) ? "unfused" : "fused");
    return TR_OK;
}
