/* torch backend — entry point, vtable and options. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "torch.h"
#include "trident/kernels.h"

#define TORCH_KEYS "mode, threads, warmup_steps"
#define TORCH_MAX_THREADS 1024

/* The host's table, kept from tr_backend_entry for as long as the plugin is loaded. */
static const struct tr_host_api *torch_host;

/* "FILE:LINE: " for messages about an option; "" when it came from nowhere in a file. */
static const char *option_where(const struct tr_option *o, char *buf, size_t n) {
    if (o->file && o->file[0] && o->line > 0) snprintf(buf, n, "%s:%d: ", o->file, (int)o->line);
    else if (o->file && o->file[0]) snprintf(buf, n, "%s: ", o->file);
    else buf[0] = '\0';
    return buf;
}

static int parse_mode(const struct tr_option *o, enum tr_torch_mode *mode, struct tr_error *err) {
    char w[512];
    if (strcmp(o->value, "eager") == 0) {
        *mode = TR_TORCH_MODE_EAGER;
        return TR_OK;
    }
    if (strcmp(o->value, "reduce-overhead") == 0) {
        *mode = TR_TORCH_MODE_REDUCE_OVERHEAD;
        return TR_OK;
    }
    return tr_error_set(err, TR_ERR_INVALID, "%s[backend.torch] mode = '%s': expected eager or reduce-overhead",
                        option_where(o, w, sizeof w), o->value);
}

static int parse_threads(const struct tr_option *o, int *threads, struct tr_error *err) {
    char w[512], *end = NULL;
    errno = 0;
    long v = strtol(o->value, &end, 10);
    if (errno || end == o->value || *end != '\0' || v < 0 || v > TORCH_MAX_THREADS)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s[backend.torch] threads = '%s': expected an integer from 1 to %d "
                            "(0: the OpenMP default)",
                            option_where(o, w, sizeof w), o->value, TORCH_MAX_THREADS);
    *threads = (int)v;
    return TR_OK;
}

/* Eager steps before reduce-overhead records one. Taken (and ignored) in eager mode too,
 * since one [backend.torch] section serves both `torch` and `torch:reduce-overhead`. */
static int parse_warmup(const struct tr_option *o, int *steps, struct tr_error *err) {
    char w[512], *end = NULL;
    errno = 0;
    long v = strtol(o->value, &end, 10);
    if (errno || end == o->value || *end != '\0' || v < 0 || v > TR_TORCH_WARMUP_MAX)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s[backend.torch] warmup_steps = '%s': expected an integer from 0 to %d (eager steps "
                            "before mode = reduce-overhead records one)",
                            option_where(o, w, sizeof w), o->value, TR_TORCH_WARMUP_MAX);
    *steps = (int)v;
    return TR_OK;
}

/* Every key is checked before any is used, and a key given twice with different values
 * is refused (a mode from `backends = torch:MODE` and one in [backend.torch] disagreeing
 * is a mistake to show, not to resolve silently). */
static int parse_options(const struct tr_option *opts, int n, struct tr_torch_context *c, struct tr_error *err) {
    char w[512], w2[512];
    for (int i = 0; i < n; i++) {
        const struct tr_option *o = &opts[i];
        if (!o->key || !o->value)
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.torch] option %d has no %s",
                                option_where(o, w, sizeof w), i, o->key ? "value" : "key");
        int rc;
        if (strcmp(o->key, "mode") == 0) rc = parse_mode(o, &c->mode, err);
        else if (strcmp(o->key, "threads") == 0) rc = parse_threads(o, &c->threads, err);
        else if (strcmp(o->key, "warmup_steps") == 0) rc = parse_warmup(o, &c->warmup_steps, err);
        else
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.torch] unknown key '%s' (keys: " TORCH_KEYS ")",
                                option_where(o, w, sizeof w), o->key);
        if (rc != TR_OK) return rc;
        for (int j = 0; j < i; j++) {
            const struct tr_option *p = &opts[j];
            if (strcmp(p->key, o->key) == 0 && strcmp(p->value, o->value) != 0)
                return tr_error_set(err, TR_ERR_INVALID,
                                    "%s[backend.torch] %s = %s conflicts with %s = %s given before (%s)",
                                    option_where(o, w, sizeof w), o->key, o->value, p->key, p->value,
                                    p->file ? option_where(p, w2, sizeof w2) : "no file");
        }
    }
    return TR_OK;
}

static int torch_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                      struct tr_error *err) {
    *ctx = NULL;
    struct tr_torch_context c = {
        .host = host ? host : torch_host,
        .device_type = TR_DEVICE_CPU,
        .device_index = 0,
        .mode = TR_TORCH_MODE_EAGER,
        .threads = 0,
        .warmup_steps = TR_TORCH_WARMUP_DEFAULT,
    };
    if (!c.host) return tr_error_set(err, TR_ERR_PLUGIN, "torch: init called without a host table");
    if (params) {
        if (params->struct_size < sizeof(struct tr_backend_params))
            return tr_error_set(err, TR_ERR_PLUGIN, "torch: backend params of %u bytes, expected at least %zu",
                                params->struct_size, sizeof(struct tr_backend_params));
        c.device_type = params->device_type;
        c.device_index = params->device_index;
        if (params->n_options < 0 || (params->n_options > 0 && !params->options))
            return tr_error_set(err, TR_ERR_INVALID, "torch: %d options without an array", (int)params->n_options);
        int rc = parse_options(params->options, params->n_options, &c, err);
        if (rc != TR_OK) return rc;
    }
    /* Weights are used in place and inputs bound in place: both assume host memory. The
     * device copies that a GPU needs come with the CUDA kernels. */
    if (c.device_type != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "torch: device type %d is not supported yet (the torch backend runs on the cpu)",
                            c.device_type);
    struct tr_torch_context *p = malloc(sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "torch: out of memory for the backend context");
    *p = c;
    *ctx = p;
    return TR_OK;
}

static void torch_free(void *ctx) { free(ctx); }

/* Every op runs through the shared kernels' dispatcher, so what is supported is what
 * the kernels take: floats for compute, any element type for the layout ops. */
static int torch_supports_op(void *ctx, int op, int dtype) {
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

static int torch_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    if (!st) return tr_error_set(err, TR_ERR_INVALID, "torch: get_stats without a stats record");
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
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
                   "mode = reduce-overhead records a step once and replays it",
    .caps = TR_CAP_CPU | TR_CAP_F32 | TR_CAP_BF16,
    .init = torch_init,
    .free = torch_free,
    .supports_op = torch_supports_op,
    .compile = torch_compile,
    .execute = torch_execute,
    .program_free = torch_program_free,
    .get_stats = torch_get_stats,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    if (iface) *iface = NULL;
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "torch: incompatible ABI (host: %u.%u, plugin: %u.%u)",
                            TR_ABI_GET_MAJOR(host_abi), TR_ABI_GET_MINOR(host_abi), (unsigned)TR_ABI_MAJOR,
                            (unsigned)TR_ABI_MINOR);
    if (!host || !iface) return tr_error_set(err, TR_ERR_PLUGIN, "torch: entry called without a host table");
    /* A 1.x host has every 1.0 slot; a shorter table is a broken host. */
    if (host->struct_size < sizeof(struct tr_host_api) || TR_ABI_GET_MAJOR(host->abi_version) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "torch: host table of %u bytes, ABI %u.%u (expected >= %zu bytes, 1.x)",
                            host->struct_size, TR_ABI_GET_MAJOR(host->abi_version),
                            TR_ABI_GET_MINOR(host->abi_version), sizeof(struct tr_host_api));
    torch_host = host;
    *iface = &torch_iface;
    return TR_OK;
}
