/* trident — the backend plugin ABI. This header is the whole contract.
 *
 * A backend is a shared object that exports one symbol, tr_backend_entry (build with
 * -fvisibility=hidden and TR_BACKEND_EXPORT on that function only). The host calls it
 * with the ABI version it speaks and its table of services (struct tr_host_api); the
 * plugin answers with its vtable (struct tr_backend_i). Everything the plugin needs from
 * trident reaches it through that table, so a plugin links neither libtrident nor a
 * second copy of it (the SQLite extension pattern). It may link libtrident_kernels.
 *
 * Versions: both structs start with struct_size and abi_version. Slots are only ever
 * appended, never moved: the offsets below are pinned by static asserts. The host
 * refuses a plugin whose major version differs or whose vtable is shorter than the
 * required slots of its version; a newer minor is accepted and slots the host does not
 * know are ignored. Before calling an optional slot added in minor N, the host checks
 * both the plugin's abi_version >= N and that the slot is not NULL.
 *
 * Required slots (1.0): init, free, compile, execute, program_free.
 * Optional (NULL = default): supports_op (default: every op, through the shared
 * kernels), get_stats (default: zeros); sync (1.1; default: nothing to do).
 *
 * 1.1 added graph updates (training state): the host table's graph_n_updates /
 * graph_update_param / graph_update_value list PARAMs that each execute must leave
 * holding a computed node's value (an optimizer's new weights and moments). The host
 * memory bound to an updated PARAM is writable by the backend; a backend that computes
 * in host memory writes it there (donating it as the value's buffer when nothing reads
 * the old value later). A backend that keeps params elsewhere (a GPU) implements sync,
 * which copies every updated PARAM back into its host memory; the host calls it before
 * reading them. The host refuses to compile a graph with updates for a 1.0 plugin.
 *
 * The graph reaches the plugin as an opaque tr_graph_t read through the host table's
 * accessors; its PARAM data is host memory owned by the host, alive until
 * program_free. execute() gets inputs and returns outputs in host memory, in the order
 * of the graph's inputs and outputs, with shapes and dtypes as the graph says.
 */
#ifndef TRIDENT_BACKEND_H
#define TRIDENT_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "trident/ops.h"
#include "trident/status.h"
#include "trident/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout pins below, in C and in C++ (a backend may be written in either). */
#ifdef __cplusplus
#define TR_STATIC_ASSERT(e, m) static_assert(e, m)
#else
#define TR_STATIC_ASSERT(e, m) _Static_assert(e, m)
#endif

#define TR_ABI_MAJOR 1
#define TR_ABI_MINOR 1
#define TR_ABI_MAKE(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define TR_ABI_VERSION TR_ABI_MAKE(TR_ABI_MAJOR, TR_ABI_MINOR)
#define TR_ABI_GET_MAJOR(v) ((uint32_t)(v) >> 16)
#define TR_ABI_GET_MINOR(v) ((uint32_t)(v) & 0xffffu)

#define TR_BACKEND_ENTRY_SYMBOL "tr_backend_entry"
#if defined(__GNUC__)
#define TR_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define TR_BACKEND_EXPORT
#endif

typedef const struct tr_graph *tr_graph_t;  /* opaque to plugins */
struct tr_kernels;                          /* trident/kernels.h */

enum tr_log_level { TR_LOG_ERROR = 0, TR_LOG_WARN = 1, TR_LOG_INFO = 2, TR_LOG_DEBUG = 3 };

/* Capabilities a backend declares. */
#define TR_CAP_CPU      (1u << 0)
#define TR_CAP_CUDA     (1u << 1)
#define TR_CAP_TRAINING (1u << 2)
#define TR_CAP_F32      (1u << 3)
#define TR_CAP_BF16     (1u << 4)
#define TR_CAP_F16      (1u << 5)

/* One `key = value` line of the INI section [backend.NAME]; file and line are for the
 * plugin's messages ("conf/x.ini:7: [backend.torch] unknown key 'mdoe'"). */
struct tr_option {
    const char *key;
    const char *value;
    const char *file;
    int32_t line;
    int32_t reserved;
};

struct tr_backend_params {
    uint32_t struct_size;
    uint32_t abi_version;
    int32_t device_type;            /* enum tr_device_type */
    int32_t device_index;
    const struct tr_option *options;
    int32_t n_options;
    int32_t math;                   /* enum tr_math: how GEMMs compute (1.0 plugins: reserved, 0) */
};

/* What a backend reports about a compiled program after a step. */
struct tr_backend_stats {
    uint32_t struct_size;
    uint32_t abi_version;
    uint64_t kernel_calls;          /* kernel calls in the last execute */
    uint64_t alloc_hits;            /* allocator requests served from a pool, last execute */
    uint64_t alloc_misses;          /* requests that went to the device allocator, last execute */
    uint64_t peak_bytes;            /* peak device memory held: weights + activations + scratch */
    uint64_t arena_bytes;           /* planned activation arena (0: none) */
    char mode[32];                  /* "eager", "reduce-overhead", ... ("" if one mode) */
    char notes[512];                /* one line of backend-specific facts for the report */
};

/* ---- the host's services ----
 * X(return type, slot, host implementation, parameter list). One list gives the struct,
 * the host's initializer and the pinned offsets, so they cannot drift. Append only. */
#define TR_HOST_API_LIST(X)                                                                        \
    X(int, error_set, tr_error_set, (struct tr_error *err, int status, const char *fmt, ...))      \
    X(void, log, tr_log, (int level, const char *fmt, ...))                                        \
    X(void *, alloc, tr_host_api_alloc, (size_t nbytes))                                           \
    X(void, free, tr_host_api_free, (void *p))                                                     \
    X(size_t, dtype_size, tr_dtype_size, (enum tr_dtype t))                                       \
    X(const char *, dtype_name, tr_dtype_name, (enum tr_dtype t))                                  \
    X(const char *, op_name, tr_op_name, (int op))                                                 \
    X(int, graph_n_nodes, tr_graph_n_nodes, (tr_graph_t g))                                        \
    X(int, graph_n_inputs, tr_graph_n_inputs, (tr_graph_t g))                                      \
    X(int, graph_input, tr_graph_input, (tr_graph_t g, int i))                                     \
    X(int, graph_n_outputs, tr_graph_n_outputs, (tr_graph_t g))                                    \
    X(int, graph_output, tr_graph_output, (tr_graph_t g, int i))                                   \
    X(int, node_op, tr_node_op, (tr_graph_t g, int id))                                            \
    X(int, node_n_inputs, tr_node_n_inputs, (tr_graph_t g, int id))                                \
    X(int, node_input, tr_node_input, (tr_graph_t g, int id, int i))                               \
    X(int, node_dtype, tr_node_dtype, (tr_graph_t g, int id))                                      \
    X(int, node_ndim, tr_node_ndim, (tr_graph_t g, int id))                                        \
    X(const int64_t *, node_shape, tr_node_shape, (tr_graph_t g, int id))                          \
    X(const struct tr_attrs *, node_attrs, tr_node_attrs, (tr_graph_t g, int id))                 \
    X(const char *, node_name, tr_node_name, (tr_graph_t g, int id))                               \
    X(const void *, node_data, tr_node_data, (tr_graph_t g, int id))                               \
    X(int, kernels_init, tr_kernels_init,                                                          \
      (struct tr_kernels **out, int device_type, int device_index, struct tr_error *err))          \
    X(void, kernels_free, tr_kernels_free, (struct tr_kernels *k))                                 \
    X(int, kernels_run, tr_kernels_run,                                                            \
      (struct tr_kernels *k, int op, const struct tr_attrs *attrs, int n_in,                       \
       const struct tr_tensor *in, struct tr_tensor *out, struct tr_error *err))                   \
    X(int, kernels_alloc, tr_kernels_alloc,                                                        \
      (struct tr_kernels *k, size_t nbytes, void **p, struct tr_error *err))                       \
    X(void, kernels_dealloc, tr_kernels_dealloc, (struct tr_kernels *k, void *p))                  \
    X(int, kernels_to_device, tr_kernels_to_device,                                                \
      (struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err))          \
    X(int, kernels_to_host, tr_kernels_to_host,                                                    \
      (struct tr_kernels *k, void *dst, const void *src, size_t n, struct tr_error *err))          \
    /* 1.1 */                                                                                      \
    X(int, graph_n_updates, tr_graph_n_updates, (tr_graph_t g))                                    \
    X(int, graph_update_param, tr_graph_update_param, (tr_graph_t g, int i))                       \
    X(int, graph_update_value, tr_graph_update_value, (tr_graph_t g, int i))

struct tr_host_api {
    uint32_t struct_size;
    uint32_t abi_version;
#define TR_HOST_API_SLOT_(ret, slot, impl, params) ret(*slot) params;
    TR_HOST_API_LIST(TR_HOST_API_SLOT_)
#undef TR_HOST_API_SLOT_
};

/* ---- the plugin's vtable ---- */
struct tr_backend_i {
    uint32_t struct_size;           /* sizeof(struct tr_backend_i) as the plugin was built */
    uint32_t abi_version;           /* TR_ABI_VERSION as the plugin was built */
    const char *name;               /* "torch" */
    const char *description;        /* one line for `trident list` */
    uint64_t caps;                  /* TR_CAP_* */

    /* Validate options (reject unknown keys by name), set up the device. */
    int (*init)(const struct tr_host_api *host, const struct tr_backend_params *params, void **ctx,
                struct tr_error *err);
    void (*free)(void *ctx);
    /* 1 if the backend runs op on dtype itself; 0 if not (it may still run it through the
     * shared kernels' default, as the host table allows). */
    int (*supports_op)(void *ctx, int op, int dtype);
    /* Prepare g its own way; the program may keep g until program_free. */
    int (*compile)(void *ctx, tr_graph_t g, void **prog, struct tr_error *err);
    int (*execute)(void *ctx, void *prog, int n_inputs, const struct tr_tensor *inputs, int n_outputs,
                   struct tr_tensor *outputs, struct tr_error *err);
    void (*program_free)(void *ctx, void *prog);
    int (*get_stats)(void *ctx, void *prog, struct tr_backend_stats *st, struct tr_error *err);
    /* 1.1: make the host memory of every updated PARAM hold its current value. */
    int (*sync)(void *ctx, void *prog, struct tr_error *err);
};

/* The offsets of ABI 1.0 and 1.1. Moving a slot breaks every plugin built before: don't. */
#define TR_SLOT_(type, field) (offsetof(struct type, field) / sizeof(void *))
TR_STATIC_ASSERT(offsetof(struct tr_backend_i, struct_size) == 0, "tr_backend_i layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_i, name) == 8, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, init) == 4, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, free) == 5, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, supports_op) == 6, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, compile) == 7, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, execute) == 8, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, program_free) == 9, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, get_stats) == 10, "tr_backend_i layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_backend_i, sync) == 11, "tr_backend_i layout");
/* The smallest vtable a 1.x plugin may hand over: up to and including program_free. */
#define TR_BACKEND_I_MIN_SIZE_1_0 (offsetof(struct tr_backend_i, program_free) + sizeof(void *))
/* The smallest host table a 1.x host hands over (a 1.0 host's): up to kernels_to_host.
 * A plugin reads a 1.1 slot only where tr_host_api_has_updates says it is there. */
#define TR_HOST_API_MIN_SIZE_1_0 offsetof(struct tr_host_api, graph_n_updates)
static inline int tr_host_api_has_updates(const struct tr_host_api *h) {
    return TR_ABI_GET_MINOR(h->abi_version) >= 1 &&
           h->struct_size >= offsetof(struct tr_host_api, graph_update_value) + sizeof(void *);
}
TR_STATIC_ASSERT(TR_SLOT_(tr_host_api, error_set) == 1, "tr_host_api layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_host_api, node_data) == 21, "tr_host_api layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_host_api, kernels_to_host) == 28, "tr_host_api layout");
TR_STATIC_ASSERT(TR_SLOT_(tr_host_api, graph_update_value) == 31, "tr_host_api layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_stats, kernel_calls) == 8, "tr_backend_stats layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_stats, mode) == 48, "tr_backend_stats layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_params, options) == 16, "tr_backend_params layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_params, n_options) == 24, "tr_backend_params layout");
TR_STATIC_ASSERT(offsetof(struct tr_backend_params, math) == 28, "tr_backend_params layout");
TR_STATIC_ASSERT(sizeof(struct tr_backend_params) == 32, "tr_backend_params layout");
TR_STATIC_ASSERT(sizeof(struct tr_backend_stats) == 592, "tr_backend_stats layout");
TR_STATIC_ASSERT(offsetof(struct tr_option, line) == 24 && sizeof(struct tr_option) == 32, "tr_option layout");
/* The structs the slots pass by pointer, defined in the base headers, are ABI too. */
TR_STATIC_ASSERT(offsetof(struct tr_tensor, dtype) == 8 && offsetof(struct tr_tensor, ndim) == 12, "tr_tensor layout");
TR_STATIC_ASSERT(offsetof(struct tr_tensor, shape) == 16 && offsetof(struct tr_tensor, strides) == 80,
               "tr_tensor layout");
TR_STATIC_ASSERT(offsetof(struct tr_tensor, device) == 144 && sizeof(struct tr_tensor) == 152, "tr_tensor layout");
TR_STATIC_ASSERT(offsetof(struct tr_attrs, floats) == 64 && offsetof(struct tr_attrs, n_ints) == 80, "tr_attrs layout");
TR_STATIC_ASSERT(sizeof(struct tr_attrs) == 88, "tr_attrs layout");
TR_STATIC_ASSERT(offsetof(struct tr_error, msg) == 4 && sizeof(struct tr_error) == 4 + TR_ERROR_MSG_MAX,
               "tr_error layout");
TR_STATIC_ASSERT(TR_MAX_DIMS == 8 && TR_ATTR_INTS == 8 && TR_ATTR_FLOATS == 4 && TR_ERROR_MSG_MAX == 1024,
               "array extents in ABI structs");

/* The entry point every plugin exports:
 *   host_abi: the host's TR_ABI_VERSION; a plugin may refuse a host whose major differs.
 *   host:     the host's services, valid while the plugin is loaded.
 *   iface:    set to the plugin's vtable (static storage).
 * Returns TR_OK, or a status with err filled. */
typedef int (*tr_backend_entry_fn)(uint32_t host_abi, const struct tr_host_api *host,
                                   const struct tr_backend_i **iface, struct tr_error *err);
/* Its declaration, so that a plugin's definition has a prototype (-Wmissing-prototypes)
 * and, from C++, C linkage: defined without extern "C" the name would be mangled and the
 * loader would find no entry point. The host declares it here and never defines it. */
TR_BACKEND_EXPORT int tr_backend_entry(uint32_t host_abi, const struct tr_host_api *host,
                                       const struct tr_backend_i **iface, struct tr_error *err);

#ifdef __cplusplus
}
#endif
#endif
