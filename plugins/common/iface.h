/* A backend's vtable and its exported entry point, written once for every backend in
 * this tree.
 *
 *   TR_BACKEND_DEFINE(tr_jax_iface, jax, "jax", "JAX/XLA style: ...", TR_CAP_CPU | ...,
 *                     tr_jax_context, jax_defaults, jax_options, NULL,
 *                     tr_jax_program, tr_jax);
 *
 * above the slots' definitions declares, from the slot prefix P:
 *   - the eight slots as static functions P_init, P_free, P_supports_op, P_compile,
 *     P_execute, P_program_free, P_get_stats and P_sync, so that a slot of the wrong type
 *     fails to compile here rather than loading and misbehaving;
 *   - P_host, the host's table kept from tr_backend_entry for as long as the plugin is
 *     loaded (init falls back to it when handed none);
 *   - IFACE, the vtable with every slot written;
 *   - tr_backend_entry, the one exported symbol, doing tr_backend_entry_check's checks;
 * and defines the five slots that are the same in every backend:
 *   - P_init: a copy of DEFAULTS (a const struct CTX) through tr_backend_init_common with
 *     the options table OPTIONS; struct CTX has the fields host, device_type, device_index
 *     and math that init sets, and params, the resident store (resident.h);
 *   - P_free: RELEASE(ctx) first where RELEASE is not NULL (what else the context owns),
 *     then the resident store (programs still alive past the backend's end) and ctx;
 *   - P_compile, P_execute and P_program_free, which only adapt types: the slots see void
 *     pointers, the backend's FN_compile(struct CTX *, g, struct PROGRAM **out, err),
 *     FN_execute(struct PROGRAM *, ...) and FN_program_free(struct PROGRAM *) its own.
 *     compile refuses a NULL context, execute a NULL program.
 * The backend defines the other three. A backend whose table needs another shape (a NULL
 * slot, a newer one) writes it by hand, as examples/backend_minimal does. */
#ifndef TRIDENT_PLUGIN_IFACE_H
#define TRIDENT_PLUGIN_IFACE_H

#include <stdlib.h>
#include "options.h"
#include "resident.h"
#include "trident/backend.h"

#define TR_BACKEND_DEFINE(IFACE, P, NAME, DESCRIPTION, CAPS, CTX, DEFAULTS, OPTIONS, RELEASE, PROGRAM, FN)           \
    static int P##_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,          \
                        struct tr_error *err);                                                                       \
    static void P##_free(void *ctx);                                                                                 \
    static int P##_supports_op(void *ctx, int op, int dtype);                                                        \
    static int P##_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err);                              \
    static int P##_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,       \
                           struct tr_tensor *outputs, struct tr_error *err);                                         \
    static void P##_program_free(void *ctx, void *prog);                                                             \
    static int P##_get_stats(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err);              \
    static int P##_sync(void *ctx, void *prog, struct tr_error *err);                                                \
                                                                                                                     \
    static const struct tr_host_api *P##_host;                                                                       \
                                                                                                                     \
    const struct tr_backend_i IFACE = {                                                                              \
        .struct_size = sizeof(struct tr_backend_i),                                                                  \
        .abi_version = TR_ABI_VERSION,                                                                               \
        .name = NAME,                                                                                                \
        .description = DESCRIPTION,                                                                                  \
        .caps = CAPS,                                                                                                \
        .init = P##_init,                                                                                            \
        .free = P##_free,                                                                                            \
        .supports_op = P##_supports_op,                                                                              \
        .compile = P##_compile,                                                                                      \
        .execute = P##_execute,                                                                                      \
        .program_free = P##_program_free,                                                                            \
        .get_stats = P##_get_stats,                                                                                  \
        .sync = P##_sync,                                                                                            \
    };                                                                                                               \
                                                                                                                     \
    TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,                        \
                                           const struct tr_backend_i **iface, struct tr_error *err) {                \
        return tr_backend_entry_check(NAME, host_abi, host, &IFACE, iface, &P##_host, err);                          \
    }                                                                                                                \
                                                                                                                     \
    static int P##_init(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,          \
                        struct tr_error *err) {                                                                      \
        struct CTX c = DEFAULTS;                                                                                     \
        const struct tr_backend_setup at = {&c.host, &c.device_type, &c.device_index, &c.math};                      \
        return tr_backend_init_common(NAME, host, P##_host, params, OPTIONS,                                         \
                                      (int)(sizeof OPTIONS / sizeof OPTIONS[0]), &c, sizeof c, &at, ctx, err);       \
    }                                                                                                                \
    static void P##_free(void *ctx) {                                                                                \
        struct CTX *c = ctx;                                                                                         \
        void (*release)(struct CTX *) = RELEASE;                                                                     \
        if (c && release) release(c);                                                                                \
        if (c) tr_resident_store_free(c->params);                                                                    \
        free(c);                                                                                                     \
    }                                                                                                                \
    static int P##_compile(void *ctx, tr_graph_t g, void **prog, struct tr_error *err) {                             \
        struct PROGRAM *p = NULL;                                                                                    \
        if (!ctx) return tr_error_set(err, TR_ERR_INVALID, NAME ": compile without a backend context");              \
        int rc = FN##_compile(ctx, g, &p, err);                                                                      \
        *prog = p;                                                                                                   \
        return rc;                                                                                                   \
    }                                                                                                                \
    static int P##_execute(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,   \
                           struct tr_tensor *outputs, struct tr_error *err) {                                    \
        if (!prog) return tr_error_set(err, TR_ERR_INVALID, NAME ": execute without a compiled program");        \
        return FN##_execute(prog, n_inputs, inputs, n_outputs, outputs, err);                                    \
    }                                                                                                            \
    static void P##_program_free(void *ctx, void *prog) { FN##_program_free(prog); }                                 \
    _Static_assert(1, "a TR_BACKEND_DEFINE ends with a semicolon")

#endif
