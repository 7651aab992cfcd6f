/* tf backend — entry point, vtable and options.
 *
 * [backend.tf] keys:
 *   fuse = true|false      run the remapper (default true); false runs the graph's own
 *                          ops through the same static executor, for comparison
 *   simplify = true|false  the cheap passes before remapping (default true): common
 *                          subexpressions merged, nodes no output depends on dropped
 *   threads = N            OpenMP threads while executing (0: the OpenMP default)
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "tf.h"
#include "trident/kernels.h"

#define TF_KEYS "fuse, simplify, threads"
#define TF_MAX_THREADS 1024

static const struct tr_host_api *tf_host;

static const char *option_where(const struct tr_option *o, char *buf, size_t n) {
    if (o->file && o->file[0] && o->line > 0) snprintf(buf, n, "%s:%d: ", o->file, (int)o->line);
    else if (o->file && o->file[0]) snprintf(buf, n, "%s: ", o->file);
    else buf[0] = '\0';
    return buf;
}

static int parse_bool(const struct tr_option *o, int *out, struct tr_error *err) {
    char w[512];
    const char *v = o->value;
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1")) *out = 1;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0")) *out = 0;
    else
        return tr_error_set(err, TR_ERR_INVALID, "%s[backend.tf] %s = '%s': expected true or false",
                            option_where(o, w, sizeof w), o->key, v);
    return TR_OK;
}

static int parse_threads(const struct tr_option *o, int *threads, struct tr_error *err) {
    char w[512], *end = NULL;
    errno = 0;
    long v = strtol(o->value, &end, 10);
    if (errno || end == o->value || *end != '\0' || v < 0 || v > TF_MAX_THREADS)
        return tr_error_set(err, TR_ERR_INVALID,
                            "%s[backend.tf] threads = '%s': expected an integer from 1 to %d (0: the OpenMP default)",
                            option_where(o, w, sizeof w), o->value, TF_MAX_THREADS);
    *threads = (int)v;
    return TR_OK;
}

/* `backends = tf:MODE` arrives as a mode key: graph mode is the only one. */
static int parse_mode(const struct tr_option *o, struct tr_error *err) {
    char w[512];
    if (strcmp(o->value, "graph") == 0) return TR_OK;
    return tr_error_set(err, TR_ERR_INVALID,
                        "%s[backend.tf] mode = '%s': the tf backend has one mode, graph (fusion is `fuse = false`)",
                        option_where(o, w, sizeof w), o->value);
}

static int parse_options(const struct tr_option *opts, int n, struct tf_context *c, struct tr_error *err) {
    char w[512], w2[512];
    for (int i = 0; i < n; i++) {
        const struct tr_option *o = &opts[i];
        if (!o->key || !o->value)
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.tf] option %d has no %s", option_where(o, w, sizeof w),
                                i, o->key ? "value" : "key");
        int rc;
        if (strcmp(o->key, "fuse") == 0) rc = parse_bool(o, &c->fuse, err);
        else if (strcmp(o->key, "simplify") == 0) rc = parse_bool(o, &c->simplify, err);
        else if (strcmp(o->key, "threads") == 0) rc = parse_threads(o, &c->threads, err);
        else if (strcmp(o->key, "mode") == 0) rc = parse_mode(o, err);
        else
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.tf] unknown key '%s' (keys: " TF_KEYS ")",
                                option_where(o, w, sizeof w), o->key);
        if (rc != TR_OK) return rc;
        for (int j = 0; j < i; j++) {
            const struct tr_option *p = &opts[j];
            if (strcmp(p->key, o->key) == 0 && strcmp(p->value, o->value) != 0)
                return tr_error_set(err, TR_ERR_INVALID, "%s[backend.tf] %s = %s conflicts with %s = %s given before (%s)",
                                    option_where(o, w, sizeof w), o->key, o->value, p->key, p->value,
                                    p->file ? option_where(p, w2, sizeof w2) : "no file");
        }
    }
    return TR_OK;
}

static int tf_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                   struct tr_error *err) {
    *ctx = NULL;
    struct tf_context c = {
        .host = host ? host : tf_host,
        .device_type = TR_DEVICE_CPU,
        .fuse = 1,
        .simplify = 1,
    };
    if (!c.host) return tr_error_set(err, TR_ERR_PLUGIN, "tf: init called without a host table");
    if (params) {
        if (params->struct_size < sizeof(struct tr_backend_params))
            return tr_error_set(err, TR_ERR_PLUGIN, "tf: backend params of %u bytes, expected at least %zu",
                                params->struct_size, sizeof(struct tr_backend_params));
        c.device_type = params->device_type;
        c.device_index = params->device_index;
        if (params->n_options < 0 || (params->n_options > 0 && !params->options))
            return tr_error_set(err, TR_ERR_INVALID, "tf: %d options without an array", (int)params->n_options);
        int rc = parse_options(params->options, params->n_options, &c, err);
        if (rc != TR_OK) return rc;
    }
    /* Weights and the arena are host memory: the cpu only, until the CUDA kernels come. */
    if (c.device_type != TR_DEVICE_CPU)
        return tr_error_set(err, TR_ERR_UNSUPPORTED,
                            "tf: device type %d is not supported yet (the tf backend runs on the cpu)", c.device_type);
    struct tf_context *p = malloc(sizeof *p);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "tf: out of memory for the backend context");
    *p = c;
    *ctx = p;
    return TR_OK;
}

static void tf_free(void *ctx) { free(ctx); }

static int tf_supports_op(void *ctx, int op, int dtype) {
    (void)ctx;
    return op >= 0 && op < TR_OP_COUNT && tf_runs_op(op, dtype);
}

static int tf_compile_slot(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {
    struct tf_program *p = NULL;
    int rc = tf_compile(ctx, g, &p, err);
    *prog = p;
    return rc;
}

static int tf_execute_slot(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                           struct tr_tensor *outputs, struct tr_error *err) {
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "tf: execute without a compiled program");
    /* The thread count is the caller's again afterwards: other backends in this process
     * run with theirs. */
    const struct tf_context *c = ctx;
    int saved = omp_get_max_threads();
    if (c->threads > 0) omp_set_num_threads(c->threads);
    int rc = tf_execute(prog, n_inputs, inputs, n_outputs, outputs, err);
    if (c->threads > 0) omp_set_num_threads(saved);
    return rc;
}

static void tf_program_free_slot(void *ctx, void *prog) {
    (void)ctx;
    tf_program_free(prog);
}

static int tf_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    (void)ctx;
    if (!st) return tr_error_set(err, TR_ERR_INVALID, "tf: get_stats without a stats record");
    memset(st, 0, sizeof *st);
    st->struct_size = sizeof *st;
    st->abi_version = TR_ABI_VERSION;
    if (prog) tf_program_stats(prog, st);
    return TR_OK;
}

static const struct tr_backend_i tf_iface = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = "tf",
    .description = "TensorFlow style: graph mode, a remapper of hand-fused ops, a static executor over one planned arena",
    .caps = TR_CAP_CPU | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16,
    .init = tf_init,
    .free = tf_free,
    .supports_op = tf_supports_op,
    .compile = tf_compile_slot,
    .execute = tf_execute_slot,
    .program_free = tf_program_free_slot,
    .get_stats = tf_get_stats,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    if (iface) *iface = NULL;
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "tf: incompatible ABI (host: %u.%u, plugin: %u.%u)",
                            TR_ABI_GET_MAJOR(host_abi), TR_ABI_GET_MINOR(host_abi), (unsigned)TR_ABI_MAJOR,
                            (unsigned)TR_ABI_MINOR);
    if (!host || !iface) return tr_error_set(err, TR_ERR_PLUGIN, "tf: entry called without a host table");
    if (host->struct_size < sizeof(struct tr_host_api) || TR_ABI_GET_MAJOR(host->abi_version) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "tf: host table of %u bytes, ABI %u.%u (expected >= %zu bytes, 1.x)",
                            host->struct_size, TR_ABI_GET_MAJOR(host->abi_version),
                            TR_ABI_GET_MINOR(host->abi_version), sizeof(struct tr_host_api));
    tf_host = host;
    *iface = &tf_iface;
    return TR_OK;
}
