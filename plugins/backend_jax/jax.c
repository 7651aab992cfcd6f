/* jax backend — entry point, vtable and options. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jax_internal.h"
#include "options.h"
#include "resident.h"
#include "stats.h"

/* The host's table, kept from tr_backend_entry for as long as the plugin is loaded. */
static const struct tr_host_api *jax_host;

static const struct tr_opt_spec jax_options[] = {
    {.key = "cache_dir", .type = TR_OPT_STRING, .offset = offsetof(struct tr_jax_context, cache_dir),
     .size = JAX_PATH_MAX, .expected = "a directory path",
     .where_offset = offsetof(struct tr_jax_context, cache_dir_key), .where_size = JAX_WHERE_MAX},
    {.key = "cc", .type = TR_OPT_STRING, .offset = offsetof(struct tr_jax_context, cc), .size = JAX_PATH_MAX,
     .expected = "a C compiler's name or path",
     .where_offset = offsetof(struct tr_jax_context, cc_key), .where_size = JAX_WHERE_MAX},
    {.key = "fuse", .type = TR_OPT_BOOL, .offset = offsetof(struct tr_jax_context, fuse)},
};

static int jax_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                    struct tr_error *err) {
    struct tr_jax_context c = {.fuse = 1, .attn_bwd = 1};
    snprintf(c.cc, sizeof c.cc, "cc");
    snprintf(c.cc_key, sizeof c.cc_key, "the default compiler (set [backend.jax] cc)");
    const struct tr_backend_setup at = {&c.host, &c.device_type, &c.device_index, &c.math};
    return tr_backend_init_common("jax", host, jax_host, params, jax_options,
                                  (int)(sizeof jax_options / sizeof jax_options[0]), &c, sizeof c, &at, ctx, err);
}

static void jax_free(void *ctx) {
    struct tr_jax_context *c = ctx;
    if (c) tr_resident_store_free(c->params); /* programs still alive past the backend's end */
    free(c);
}

/* Every op reaches the shared kernels (jax's generated kernels cover a subset of the
 * same), so what is supported is what they take. */
static int jax_supports_op(void *ctx, int op, int dtype) { return tr_kernels_supports(op, dtype); }

static int jax_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {
    struct tr_jax_program *p = NULL;
    if (!ctx) return tr_error_set(err, TR_ERR_INVALID, "jax: compile without a backend context");
    int rc = tr_jax_compile(ctx, g, &p, err);
    *prog = p;
    return rc;
}

static int jax_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                       struct tr_tensor *outputs, struct tr_error *err) {
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "jax: execute without a compiled program");
    return tr_jax_execute(prog, n_inputs, inputs, n_outputs, outputs, err);
}

static void jax_program_free(void *ctx, void *prog) { tr_jax_program_free(prog); }

static int jax_sync(void *ctx, void *prog, struct tr_error *err) { return tr_jax_sync(prog, err); }

static int jax_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    int rc = tr_backend_stats_start("jax", st, err);
    if (rc != TR_OK) return rc;
    if (prog) tr_jax_program_stats(prog, st);
    const struct tr_jax_context *c = ctx;
    snprintf(st->mode, sizeof st->mode, "%s", c && !c->fuse ? "unfused" : "fused");
    return TR_OK;
}

const struct tr_backend_i tr_jax_iface = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = "jax",
    .description = "JAX/XLA style: whole-graph compiler (simplify, fuse, generate C or CUDA C, one arena, flat schedule)",
    .caps = TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
    .init = jax_init,
    .free = jax_free,
    .supports_op = jax_supports_op,
    .compile = jax_compile,
    .execute = jax_execute,
    .program_free = jax_program_free,
    .get_stats = jax_get_stats,
    .sync = jax_sync,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    return tr_backend_entry_check("jax", host_abi, host, &tr_jax_iface, iface, &jax_host, err);
}
