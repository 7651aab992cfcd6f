/* jax backend — entry point, vtable and options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jax.h"

#define JAX_KEYS "cache_dir, cc, fuse"

/* The host's table, kept from tr_backend_entry for as long as the plugin is loaded. */
static const struct tr_host_api *jax_host;

/* "FILE:LINE: " for messages about an option; "" when it came from nowhere in a file. */
static const char *option_where(const struct tr_option *o, char *buf, size_t n) {
    if (o->file && o->file[0] && o->line > 0) snprintf(buf, n, "%s:%d: ", o->file, (int)o->line);
    else if (o->file && o->file[0]) snprintf(buf, n, "%s: ", o->file);
    else buf[0] = '\0';
    return buf;
}

static int parse_path(const struct tr_option *o, char *dst, char *key, struct tr_error *err) {
    char w[JAX_WHERE_MAX / 2];
    if (!o->value[0] || strlen(o->value) >= JAX_PATH_MAX)
        return tr_error_set(err, TR_ERR_INVALID, "%s[backend.jax] %s = '%.200s': expected a path of 1 to %d bytes",
                            option_where(o, w, sizeof w), o->key, o->value, JAX_PATH_MAX - 1);
    snprintf(dst, JAX_PATH_MAX, "%s", o->value);
    snprintf(key, JAX_WHERE_MAX, "%s[backend.jax] %s", option_where(o, w, sizeof w), o->key);
    return TR_OK;
}

static int parse_bool(const struct tr_option *o, int *v, struct tr_error *err) {
    char w[512];
    if (!strcmp(o->value, "true") || !strcmp(o->value, "1") || !strcmp(o->value, "yes") || !strcmp(o->value, "on"))
        *v = 1;
    else if (!strcmp(o->value, "false") || !strcmp(o->value, "0") || !strcmp(o->value, "no") ||
             !strcmp(o->value, "off"))
        *v = 0;
    else
        return tr_error_set(err, TR_ERR_INVALID, "%s[backend.jax] %s = '%s': expected true or false",
                            option_where(o, w, sizeof w), o->key, o->value);
    return TR_OK;
}

/* Every key is checked before any is used; a key given twice with different values is
 * refused (which one was meant is the user's to say). */
static int parse_options(const struct tr_option *opts, int n, struct tr_jax_context *c, struct tr_error *err) {
    char w[512], w2[512];
    for (int i = 0; i < n; i++) {
        const struct tr_option *o = &opts[i];
        if (!o->key || !o->value)
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.jax] option %d has no %s",
                                option_where(o, w, sizeof w), i, o->key ? "value" : "key");
        int rc;
        if (strcmp(o->key, "cache_dir") == 0) rc = parse_path(o, c->cache_dir, c->cache_dir_key, err);
        else if (strcmp(o->key, "cc") == 0) rc = parse_path(o, c->cc, c->cc_key, err);
        else if (strcmp(o->key, "fuse") == 0) rc = parse_bool(o, &c->fuse, err);
        else
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.jax] unknown key '%s' (keys: " JAX_KEYS ")",
                                option_where(o, w, sizeof w), o->key);
        if (rc != TR_OK) return rc;
        for (int j = 0; j < i; j++) {
            const struct tr_option *p = &opts[j];
            if (strcmp(p->key, o->key) == 0 && strcmp(p->value, o->value) != 0)
                return tr_error_set(err, TR_ERR_INVALID,
                                    "%s[backend.jax] %s = %s conflicts with %s = %s given before (%s)",
                                    option_where(o, w, sizeof w), o->key, o->value, p->key, p->value,
                                    p->file ? option_where(p, w2, sizeof w2) : "no file");
        }
    }
    return TR_OK;
}

static int jax_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                    struct tr_error *err) {
    *ctx = NULL;
    struct tr_jax_context *c = calloc(1, sizeof *c);
    if (!c) return tr_error_set(err, TR_ERR_NOMEM, "jax: out of memory for the backend context");
    c->host = host ? host : jax_host;
    c->device_type = TR_DEVICE_CPU;
    c->fuse = 1;
    snprintf(c->cc, sizeof c->cc, "cc");
    snprintf(c->cc_key, sizeof c->cc_key, "the default compiler (set [backend.jax] cc)");
    int rc = TR_OK;
    if (!c->host) {
        rc = tr_error_set(err, TR_ERR_PLUGIN, "jax: init called without a host table");
        goto fail;
    }
    if (params) {
        if (params->struct_size < sizeof(struct tr_backend_params)) {
            rc = tr_error_set(err, TR_ERR_PLUGIN, "jax: backend params of %u bytes, expected at least %zu",
                              params->struct_size, sizeof(struct tr_backend_params));
            goto fail;
        }
        c->device_type = params->device_type;
        c->device_index = params->device_index;
        if (params->n_options < 0 || (params->n_options > 0 && !params->options)) {
            rc = tr_error_set(err, TR_ERR_INVALID, "jax: %d options without an array", (int)params->n_options);
            goto fail;
        }
        if ((rc = parse_options(params->options, params->n_options, c, err)) != TR_OK) goto fail;
    }
    /* The generated kernels are C for the host: CUDA C through NVRTC comes with the
     * CUDA kernels. */
    if (c->device_type != TR_DEVICE_CPU) {
        rc = tr_error_set(err, TR_ERR_UNSUPPORTED,
                          "jax: device type %d is not supported yet (the jax backend generates C for the cpu)",
                          c->device_type);
        goto fail;
    }
    *ctx = c;
    return TR_OK;
fail:
    free(c);
    return rc;
}

static void jax_free(void *ctx) { free(ctx); }

/* Generated kernels take f32 and bf16; everything else goes to the shared kernels, so
 * what is supported is what they take. */
static int jax_supports_op(void *ctx, int op, int dtype) {
    if (op < 0 || op >= TR_OP_COUNT) return 0;
    if (dtype == TR_DTYPE_F32 || dtype == TR_DTYPE_BF16) return 1;
    if (dtype != TR_DTYPE_I32 && dtype != TR_DTYPE_I64) return 0;
    switch (op) {
    case TR_OP_INPUT: case TR_OP_PARAM: case TR_OP_CONST: case TR_OP_RESHAPE: case TR_OP_TRANSPOSE:
    case TR_OP_SLICE: case TR_OP_CONCAT: case TR_OP_CAST:
        return 1;
    default:
        return 0;
    }
}

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
    .description = "JAX/XLA style: whole-graph compiler (simplify, fuse, generate C, one arena, flat schedule)",
    .caps = TR_CAP_CPU | TR_CAP_F32 | TR_CAP_BF16,
    .init = jax_init,
    .free = jax_free,
    .supports_op = jax_supports_op,
    .compile = jax_compile,
    .execute = jax_execute,
    .program_free = jax_program_free,
    .get_stats = jax_get_stats,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    if (iface) *iface = NULL;
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "jax: incompatible ABI (host: %u.%u, plugin: %u.%u)",
                            TR_ABI_GET_MAJOR(host_abi), TR_ABI_GET_MINOR(host_abi), (unsigned)TR_ABI_MAJOR,
                            (unsigned)TR_ABI_MINOR);
    if (!host || !iface) return tr_error_set(err, TR_ERR_PLUGIN, "jax: entry called without a host table");
    if (host->struct_size < sizeof(struct tr_host_api) || TR_ABI_GET_MAJOR(host->abi_version) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "jax: host table of %u bytes, ABI %u.%u (expected >= %zu bytes, 1.x)",
                            host->struct_size, TR_ABI_GET_MAJOR(host->abi_version),
                            TR_ABI_GET_MINOR(host->abi_version), sizeof(struct tr_host_api));
    jax_host = host;
    *iface = &jax_iface;
    return TR_OK;
}
