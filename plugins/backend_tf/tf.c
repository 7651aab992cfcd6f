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
#include "iface.h"
#include "options.h"
#include "stats.h"
#include "tf.h"
#include "trident/kernels.h"

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

/* The context init starts from, before the options. */
static const struct tf_context tf_defaults = {.fuse = 1, .simplify = 1};

TR_BACKEND_DEFINE(tr_tf_iface, tf_slot, "tf",
                  "TensorFlow style: graph mode, a remapper of hand-fused ops, a static executor over one planned arena",
                  TR_CAP_CPU | TR_CAP_CUDA | TR_CAP_F32 | TR_CAP_BF16 | TR_CAP_F16 | TR_CAP_TRAINING,
                  tf_context, tf_defaults, tf_options, NULL,
                  tf_program, tf);

static int tf_slot_supports_op(void *ctx, int op, int dtype) {
    (void)ctx;
    return op >= 0 && op < TR_OP_COUNT && tf_runs_op(op, dtype);
}

static int tf_slot_sync(void *ctx, void *prog, struct tr_error *err) {
    (void)ctx;
    if (!prog) return tr_error_set(err, TR_ERR_INVALID, "tf: sync without a compiled program");
    return tf_sync(prog, err);
}

static int tf_slot_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err) {
    (void)ctx;
    int rc = tr_backend_stats_start("tf", st, err);
    if (rc != TR_OK) return rc;
    if (prog) tf_program_stats(prog, st);
    return TR_OK;
}
