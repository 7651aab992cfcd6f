/* jax backend — entry point, vtable and options. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jax.h"
#include "options.h"
#include "resident.h"

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
    *ctx = NULL;
    struct tr_jax_context *c = calloc(1, sizeof *c);
    if (!c) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for the backend context");
    c->host = host ? host : jax_host;
    c->device_type = TR_DEVICE_CPU;
    c->fuse = 1;
    c->attn_bwd = 1;
    snprintf(c->cc, sizeof c->cc, "cc");
    snprintf(c->cc_key, sizeof c->cc_key, "the default compiler (set [backend.jax] cc)");
    int rc = TR_OK;
    if (!c->host) {
        rc = tr_error_set(err, TR_ERR_PLUGIN, "jax: init called without a host table");
        goto fail;
    }
    rc = tr_backend_params_read("jax", params, &c->device_type, &c->device_index, err);
    if (rc == TR_OK && params)
        rc = tr_opts_parse("jax", jax_options, (int)(sizeof jax_options / sizeof jax_options[0]), params->options,
                           params->n_options, c, err);
    if (rc != TR_OK) goto fail;
    if (c->device_type != TR_DEVICE_CPU && c->device_type != TR_DEVICE_CUDA) {
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED, "jax: device type %d is not one of cpu (%d) and cuda (%d)",
                          c->device_type, TR_DEVICE_CPU, TR_DEVICE_CUDA);
        goto fail;
    }
    c->math = params ? params->math : TR_MATH_DEFAULT;
    /* The device and the math mode are checked now, where the configuration is named, not
     * at the first compile ("no CUDA device found", tf32 on the cpu): the kernels library
     * says what it takes. Each program makes its own context later. */
    struct tr_kernels *k = NULL;
    if ((rc = tr_kernels_init(&k, c->device_type, c->device_index, err)) != TR_OK) {
        tr_error_prefix(err, "jax: device = %s", c->device_type == TR_DEVICE_CUDA ? "cuda" : "cpu");
        goto fail;
    }
    rc = tr_kernels_set_math(k, (enum tr_math)c->math, err);
    tr_kernels_free(k);
    if (rc != TR_OK) {
        tr_error_prefix(err, "jax");
        goto fail;
    }
    *ctx = c;
    return TR_OK;
fail:
    free(c);
    return rc;
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
    if (!st) return tr_error_set(err, TR_ERR_INVALID, "jax: get_stats without a stats record");
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
    if (prog) tr_jax_program_stats(prog, st);
    const struct tr_jax_context *c = ctx;
    snprintf(st->mode, sizeof st->mode, "%s", c && !c->fuse ? "unfused" : "fused");
    return TR_OK;
}

static const struct tr_backend_i jax_iface = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = "jax",
    .description = "JAX/XLA style: whole-graph compiler (simplify, fuse, generate C or CUDA C, one arena, flat schedule)",
    .caps = TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_TRAINING,
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
    int rc = tr_backend_entry_check("jax", host_abi, host, &jax_iface, iface, err);
    if (rc == TR_OK) jax_host = host;
    return rc;
}
