/* tf backend — entry point, vtable and options.
 *
 * [backend.tf] keys:
 *   fuse = true|false      run the remapper (default true); false runs the graph's own
 *                          ops through the same static executor, for comparison
 *   simplify = true|false  the cheap passes before remapping (default true): common
 *                          subexpressions merged, nodes no output depends on dropped
 *   threads = N            OpenMP threads while executing (0: the OpenMP default)
 */
#include <stddef.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "resident.h"
#include "stats.h"
#include "tf.h"
#include "trident/kernels.h"

static const struct tr_host_api *tf_host;

/* `backends = tf:MODE` arrives as a mode key: graph mode is the only one. */
static const char *const tf_modes[] = {"graph", NULL};

static const struct tr_opt_spec tf_options[] = {
    {.key = "fuse", .type = TR_OPT_BOOL, .offset = offsetof(struct tf_context, fuse)},
    {.key = "simplify", .type = TR_OPT_BOOL, .offset = offsetof(struct tf_context, simplify)},
    {.key = "threads", .type = TR_OPT_INT, .offset = offsetof(struct tf_context, threads), .min = 0, .max = 1024,
     .expected = "an integer from 1 to 1024 (0: the OpenMP default)"},
    {.key = "mode", .type = TR_OPT_CHOICE, .offset = offsetof(struct tf_context, mode), .choices = tf_modes,
     .expected = "graph: the tf backend has one mode (fusion is `fuse = false`)"},
};

static int tf_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                   struct tr_error *err) {
    struct tf_context c = {.fuse = 1, .simplify = 1};
    const struct tr_backend_setup at = {&c.host, &c.device_type, &c.device_index, &c.math};
    return tr_backend_init_common("tf", host, tf_host, params, tf_options,
                                  (int)(sizeof tf_options / sizeof tf_options[0]), &c, sizeof c, &at, ctx, err);
}

static void tf_free(void *ctx) {
    struct tf_context *c = ctx;
    if (c) tr_resident_store_free(c->params); /* programs still alive past the backend's end */
    free(c);
}

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

static int tf_sync_slot(void *ctx, void *prog, struct tr_error *err) {
    (void)ctx;
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "tf: sync without a compiled program");
    return tf_sync(prog, err);
}

static int tf_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    (void)ctx;
    int rc = tr_backend_stats_start("tf", st, err);
    if (rc != TR_OK) return rc;
    if (prog) tf_program_stats(prog, st);
    return TR_OK;
}

static const struct tr_backend_i tf_iface = {
    .struct_size = sizeof(struct tr_backend_i),
    .abi_version = TR_ABI_VERSION,
    .name = "tf",
    .description = "TensorFlow style: graph mode, a remapper of hand-fused ops, a static executor over one planned arena",
    .caps = TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
    .init = tf_init,
    .free = tf_free,
    .supports_op = tf_supports_op,
    .compile = tf_compile_slot,
    .execute = tf_execute_slot,
    .program_free = tf_program_free_slot,
    .get_stats = tf_get_stats,
    .sync = tf_sync_slot,
};

TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err) {
    return tr_backend_entry_check("tf", host_abi, host, &tf_iface, iface, &tf_host, err);
}
