/* What every backend checks at its entry point and in init, written once.
 *
 * Backend options ([backend.NAME] key = value) parsed from a table, the same way in
 * every backend: every key checked before any is used, unknown keys refused with the
 * keys there are, a key given twice with different values refused naming both places,
 * each message "FILE:LINE: [backend.NAME] KEY = VALUE: expected ...". The values land
 * in the backend's own options struct at the offsets the table gives. */
#ifndef TRIDENT_OPTIONS_H
#define TRIDENT_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include "trident/backend.h"

enum tr_opt_type {
    TR_OPT_BOOL,        /* int: true/false, yes/no, on/off, 1/0 */
    TR_OPT_INT,         /* int: from min to max */
    TR_OPT_STRING,      /* char[size] */
    TR_OPT_CHOICE,      /* int: the index of the value in choices (NULL-terminated) */
};

struct tr_opt_spec {
    const char *key;
    enum tr_opt_type type;
    size_t offset;                  /* where the value goes in the destination struct */
    int64_t min, max;               /* TR_OPT_INT */
    size_t size;                    /* TR_OPT_STRING: the buffer's size */
    const char *const *choices;     /* TR_OPT_CHOICE */
    const char *expected;           /* the "expected ..." text; NULL: made from the type */
    size_t where_offset;            /* if where_size: "FILE:LINE: [backend.NAME] KEY" is */
    size_t where_size;              /* written there, for later messages about the value */
};

/* "FILE:LINE: " for messages about an option; "" when it came from no file. */
const char *tr_opt_where(const struct tr_option *o, char *buf, size_t n);

int tr_opts_parse(const char *backend, const struct tr_opt_spec *specs, int n_specs, const struct tr_option *opts,
                  int n_opts, void *dst, struct tr_error *err);

/* The checks every tr_backend_entry does: the host speaks our ABI major and hands a
 * table with every 1.0 slot (a 1.0 host's is accepted). On success *iface = vtable and
 * *kept = host (the backend's static, for an init handed no table); on failure *iface =
 * NULL and *kept untouched. */
int tr_backend_entry_check(const char *backend, uint32_t host_abi, const struct tr_host_api *host,
                           const struct tr_backend_i *vtable, const struct tr_backend_i **iface,
                           const struct tr_host_api **kept, struct tr_error *err);

/* The checks every init does on its params: size, device, the options array. NULL
 * params leave the defaults (cpu 0). */
int tr_backend_params_read(const char *backend, const struct tr_backend_params *params, int *device_type,
                           int *device_index, struct tr_error *err);

/* Where init puts what every backend reads the same way; each points into the
 * backend's own context. */
struct tr_backend_setup {
    const struct tr_host_api **host;
    int *device_type, *device_index, *math;
};

/* init, on a context at dst (size bytes) that holds the backend's defaults: the host
 * table (the one init is handed, else `kept`, the one tr_backend_entry saw), the params
 * (tr_backend_params_read), the options parsed by specs into dst, the device cpu or
 * cuda, and that device and the math mode tried once on the kernels library, so that
 * "no CUDA device found" or tf32 on the cpu is refused where the configuration is
 * named, not at the first compile. Then *ctx = a heap copy of dst; NULL on any failure. */
int tr_backend_init_common(const char *backend, const struct tr_host_api *host, const struct tr_host_api *kept,
                           const struct tr_backend_params *params, const struct tr_opt_spec *specs, int n_specs,
                           void *dst, size_t size, const struct tr_backend_setup *out, void **ctx,
                           struct tr_error *err);

struct tr_kernels;

/* A program's own kernels context: on the backend's device, with its math mode. Errors
 * are prefixed with the backend's name; *k, once made, is the caller's to free even then. */
int tr_backend_kernels_open(const char *backend, int device_type, int device_index, int math, struct tr_kernels **k,
                            struct tr_error *err);

#endif
