/* Table-driven backend options (options.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "options.h"
#include "trident/kernels.h"
#include "trident/parse.h"

const char *tr_opt_where(const struct tr_option *o, char *buf, size_t n) {
    if (o->file && o->file[0] && o->line > 0) snprintf(buf, n, "%s:%d: ", o->file, (int)o->line);
    else if (o->file && o->file[0]) snprintf(buf, n, "%s: ", o->file);
    else buf[0] = '\0';
    return buf;
}

static int parse_one(const struct tr_opt_spec *s, const char *v, void *dst) {
    char *at = (char *)dst + s->offset;
    switch (s->type) {
    case TR_OPT_BOOL: return tr_parse_bool(v, (int *)at); /* the words [model] keys take too */
    case TR_OPT_INT: {
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end != '\0' || x < s->min || x > s->max) return -1;
        *(int *)at = (int)x;
        return 0;
    }
    case TR_OPT_STRING:
        if (!v[0] || strlen(v) >= s->size) return -1;
        memcpy(at, v, strlen(v) + 1);
        return 0;
    case TR_OPT_CHOICE:
        for (int i = 0; s->choices[i]; i++)
            if (strcmp(v, s->choices[i]) == 0) return *(int *)at = i, 0;
        return -1;
    }
    return -1;
}

static void describe(const struct tr_opt_spec *s, char *buf, size_t n) {
    if (s->expected) {
        snprintf(buf, n, "%s", s->expected);
        return;
    }
    switch (s->type) {
    case TR_OPT_BOOL: snprintf(buf, n, "%s", TR_BOOL_WORDS); break;
    case TR_OPT_INT: snprintf(buf, n, "an integer from %lld to %lld", (long long)s->min, (long long)s->max); break;
    case TR_OPT_STRING: snprintf(buf, n, "a value of 1 to %zu bytes", s->size - 1); break;
    case TR_OPT_CHOICE: {
        size_t off = 0;
        buf[0] = '\0';
        for (int i = 0; s->choices[i] && off < n; i++)
            off += (size_t)snprintf(buf + off, n - off, "%s%s", i ? (s->choices[i + 1] ? ", " : " or ") : "one of ",
                                    s->choices[i]);
        break;
    }
    }
}

int tr_opts_parse(const char *backend, const struct tr_opt_spec *specs, int n_specs, const struct tr_option *opts,
                  int n_opts, void *dst, struct tr_error *err) {
    char w[512], w2[512], what[256];
    for (int i = 0; i < n_opts; i++) {
        const struct tr_option *o = &opts[i];
        if (!o->key || !o->value)
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.%s] option %d has no %s", tr_opt_where(o, w, sizeof w),
                                backend, i, o->key ? "value" : "key");
        const struct tr_opt_spec *s = NULL;
        for (int k = 0; k < n_specs && !s; k++)
            if (strcmp(specs[k].key, o->key) == 0) s = &specs[k];
        if (!s) {
            size_t off = 0;
            what[0] = '\0';
            for (int k = 0; k < n_specs && off < sizeof what; k++)
                off += (size_t)snprintf(what + off, sizeof what - off, "%s%s", k ? ", " : "", specs[k].key);
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.%s] unknown key '%s' (keys: %s)",
                                tr_opt_where(o, w, sizeof w), backend, o->key, what);
        }
        if (parse_one(s, o->value, dst) != 0) {
            describe(s, what, sizeof what);
            return tr_error_set(err, TR_ERR_INVALID, "%s[backend.%s] %s = '%.200s': expected %s",
                                tr_opt_where(o, w, sizeof w), backend, o->key, o->value, what);
        }
        if (s->where_size)
            snprintf((char *)dst + s->where_offset, s->where_size, "%s[backend.%s] %s", tr_opt_where(o, w, sizeof w),
                     backend, o->key);
        /* The same key twice: `backends = NAME:MODE` against a `mode` in the section, say. */
        for (int j = 0; j < i; j++) {
            const struct tr_option *p = &opts[j];
            if (p->key && strcmp(p->key, o->key) == 0 && strcmp(p->value, o->value) != 0)
                return tr_error_set(err, TR_ERR_INVALID, "%s[backend.%s] %s = %s conflicts with %s = %s given before (%s)",
                                    tr_opt_where(o, w, sizeof w), backend, o->key, o->value, p->key, p->value,
                                    p->file ? tr_opt_where(p, w2, sizeof w2) : "no file");
        }
    }
    return TR_OK;
}

int tr_backend_entry_check(const char *backend, uint32_t host_abi, const struct tr_host_api *host,
                           const struct tr_backend_i *vtable, const struct tr_backend_i **iface,
                           const struct tr_host_api **kept, struct tr_error *err) {
    if (iface) *iface = NULL;
    if (TR_ABI_GET_MAJOR(host_abi) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "%s: incompatible ABI (host: %u.%u, plugin: %u.%u)", backend,
                            TR_ABI_GET_MAJOR(host_abi), TR_ABI_GET_MINOR(host_abi), (unsigned)TR_ABI_MAJOR,
                            (unsigned)TR_ABI_MINOR);
    if (!host || !iface) return tr_error_set(err, TR_ERR_PLUGIN, "%s: entry called without a host table", backend);
    /* A 1.x host has every 1.0 slot; a shorter table is a broken host. The 1.1 slots are
     * read only where tr_host_api_has_updates says the table has them. */
    if (host->struct_size < TR_HOST_API_MIN_SIZE_1_0 || TR_ABI_GET_MAJOR(host->abi_version) != TR_ABI_MAJOR)
        return tr_error_set(err, TR_ERR_PLUGIN, "%s: host table of %u bytes, ABI %u.%u (expected >= %zu bytes, 1.x)",
                            backend, host->struct_size, TR_ABI_GET_MAJOR(host->abi_version),
                            TR_ABI_GET_MINOR(host->abi_version), (size_t)TR_HOST_API_MIN_SIZE_1_0);
    *iface = vtable;
    *kept = host;
    return TR_OK;
}

int tr_backend_params_read(const char *backend, const struct tr_backend_params *params, int *device_type,
                           int *device_index, struct tr_error *err) {
    *device_type = TR_DEVICE_CPU;
    *device_index = 0;
    if (!params) return TR_OK;
    if (params->struct_size < sizeof(struct tr_backend_params))
        return tr_error_set(err, TR_ERR_PLUGIN, "%s: backend params of %u bytes, expected at least %zu", backend,
                            params->struct_size, sizeof(struct tr_backend_params));
    if (params->n_options < 0 || (params->n_options > 0 && !params->options))
        return tr_error_set(err, TR_ERR_INVALID, "%s: %d options without an array", backend, (int)params->n_options);
    *device_type = params->device_type;
    *device_index = params->device_index;
    return TR_OK;
}

/* The checks of init's common part, on the context at dst. */
static int init_checks(const char *backend, const struct tr_host_api *host, const struct tr_host_api *kept,
                       const struct tr_backend_params *params, const struct tr_opt_spec *specs, int n_specs,
                       void *dst, const struct tr_backend_setup *out, struct tr_error *err) {
    *out->host = host ? host : kept;
    if (!*out->host) return tr_error_set(err, TR_ERR_PLUGIN, "%s: init called without a host table", backend);
    int rc = tr_backend_params_read(backend, params, out->device_type, out->device_index, err);
    if (rc == TR_OK && params) rc = tr_opts_parse(backend, specs, n_specs, params->options, params->n_options, dst, err);
    if (rc != TR_OK) return rc;
    int dev = *out->device_type;
    if (dev != TR_DEVICE_CPU && dev != TR_DEVICE_CUDA)
        return tr_error_set(err, TR_ERR_UNSUPPORTED, "%s: device type %d is not supported (cpu or cuda)", backend, dev);
    *out->math = params ? params->math : TR_MATH_DEFAULT;
    /* Each program makes its own kernels context later; this one only asks. */
    struct tr_kernels *k = NULL;
    if ((rc = tr_kernels_init(&k, dev, *out->device_index, err)) != TR_OK)
        return tr_error_prefix(err, "%s: device = %s", backend, dev == TR_DEVICE_CUDA ? "cuda" : "cpu");
    rc = tr_kernels_set_math(k, (enum tr_math)*out->math, err);
    tr_kernels_free(k);
    return rc == TR_OK ? TR_OK : tr_error_prefix(err, "%s", backend);
}

int tr_backend_init_common(const char *backend, const struct tr_host_api *host, const struct tr_host_api *kept,
                           const struct tr_backend_params *params, const struct tr_opt_spec *specs, int n_specs,
                           void *dst, size_t size, const struct tr_backend_setup *out, void **ctx,
                           struct tr_error *err) {
    *ctx = NULL;
    int rc = init_checks(backend, host, kept, params, specs, n_specs, dst, out, err);
    if (rc != TR_OK) return rc;
    void *p = malloc(size);
    if (!p) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory for the backend context", backend);
    memcpy(p, dst, size);
    *ctx = p;
    return TR_OK;
}

int tr_backend_kernels_open(const char *backend, int device_type, int device_index, int math, struct tr_kernels **k,
                            struct tr_error *err) {
    int rc = tr_kernels_init(k, device_type, device_index, err);
    if (rc == TR_OK) rc = tr_kernels_set_math(*k, (enum tr_math)math, err);
    return rc == TR_OK ? TR_OK : tr_error_prefix(err, "%s", backend);
}
