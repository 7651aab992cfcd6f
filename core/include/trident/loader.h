/* trident — finding, loading and calling backend plugins.
 *
 * A backend named x lives in libtrident_backend_x.so. Search order: a full path given
 * in the INI; the INI's [plugins] path; each directory of TRIDENT_PLUGIN_PATH (colon
 * separated); the build tree's plugin directory; the install directory. The first file
 * that exists is opened with dlopen(RTLD_NOW | RTLD_LOCAL) and checked: the entry
 * symbol, the ABI major, the vtable's size and required slots, init. A refusal names
 * the file and the reason and never crashes the host; the library is closed again.
 *
 * The wrappers below are the only callers of a plugin's vtable: each applies a default
 * when an optional slot is absent (or newer than the plugin's minor), or refuses.
 */
#ifndef TRIDENT_LOADER_H
#define TRIDENT_LOADER_H

#include "trident/backend.h"
#include "trident/config.h"
#include "trident/graph.h"
#include "trident/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tr_plugin;    /* a loaded .so and its vtable */
struct tr_backend;   /* an initialised instance of a plugin */
struct tr_program;   /* a graph compiled by a backend */

/* Where to look, beyond the built-in places. Both may be NULL or "". */
struct tr_plugin_search {
    const char *ini_dir;        /* the INI's [plugins] path, resolved */
    const char *env_path;       /* TRIDENT_PLUGIN_PATH as read by the caller (NULL: getenv) */
};

/* The host table handed to every plugin (static, filled from TR_HOST_API_LIST). */
const struct tr_host_api *tr_host_api_get(void);
/* Its alloc and free slots: host memory for a plugin's own structures (malloc/free). */
void *tr_host_api_alloc(size_t nbytes);
void tr_host_api_free(void *p);

/* Open the plugin for a name ("torch") or a path ending in .so. */
int tr_plugin_open(const char *name_or_path, const struct tr_plugin_search *s, struct tr_plugin **out,
                   struct tr_error *err);
void tr_plugin_close(struct tr_plugin *p);
const struct tr_backend_i *tr_plugin_iface(const struct tr_plugin *p);
const char *tr_plugin_path(const struct tr_plugin *p);
/* The file tr_plugin_open would load for name_or_path, into path (cap bytes), without
 * loading it; the same errors as tr_plugin_open's search. */
int tr_plugin_locate(const char *name_or_path, const struct tr_plugin_search *s, char *path, size_t cap,
                     struct tr_error *err);

/* Every candidate file in every search directory, as `trident list` shows them. */
struct tr_plugin_candidate {
    const char *path;
    const char *origin;         /* "[plugins] path", "TRIDENT_PLUGIN_PATH", "build tree", "install dir" */
    int accepted;               /* 1 loaded and checked; 0 refused */
    int shadowed;               /* accepted but an earlier directory has the same name */
    const char *name;           /* the vtable's name when accepted */
    const char *description;
    const char *reason;         /* why refused; "" when accepted */
};
typedef void (*tr_plugin_visit_fn)(const struct tr_plugin_candidate *c, void *user);
int tr_plugin_scan(const struct tr_plugin_search *s, tr_plugin_visit_fn visit, void *user, struct tr_error *err);

/* Instances. compile refuses, naming the missing TR_CAP_*, a backend whose caps do not
 * list its device, or a graph's dtype (f32, bf16, f16), training op or update. */
int tr_backend_init(struct tr_plugin *p, const struct tr_backend_params *params, struct tr_backend **out,
                    struct tr_error *err);
void tr_backend_free(struct tr_backend *be);
const char *tr_backend_name(const struct tr_backend *be);
int tr_backend_supports_op(struct tr_backend *be, int op, int dtype);
/* What compile checks first, alone: the backend's caps and ABI against the graph's device,
 * dtypes, training ops and updates (a run checks every backend this way before any runs). */
int tr_backend_check_graph(const struct tr_backend *be, const struct tr_graph *g, struct tr_error *err);
int tr_backend_compile(struct tr_backend *be, const struct tr_graph *g, struct tr_program **out,
                       struct tr_error *err);
int tr_backend_execute(struct tr_backend *be, struct tr_program *prog, int n_inputs,
                       const struct tr_tensor *inputs, int n_outputs, struct tr_tensor *outputs,
                       struct tr_error *err);
int tr_backend_get_stats(struct tr_backend *be, struct tr_program *prog, struct tr_backend_stats *st,
                         struct tr_error *err);
/* After execute: make the host memory of the graph's updated PARAMs (tr_graph_add_update)
 * hold their current values; a no-op for a backend that computes in host memory. */
int tr_backend_sync(struct tr_backend *be, struct tr_program *prog, struct tr_error *err);
void tr_program_free(struct tr_program *prog);

/* "cpu cuda f32 bf16 training" (TR_CAP_* as words, "(none)") into buf; returns buf. */
const char *tr_caps_str(uint64_t caps, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
