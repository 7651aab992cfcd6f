/* Params resident on a device, shared by a backend's programs: the bookkeeping
 * (resident.h). Entries are kept sorted by host pointer (a binary search per lookup; a
 * model has hundreds of params, and lookups happen at compile and free, not per step).
 * An entry counts its references and, apart, those that write the param. */
#include <stdlib.h>
#include <string.h>
#include "pir.h"
#include "resident.h"
#include "trident/dtype.h"

struct tr_resident_entry {
    const void *host;
    size_t nbytes;
    int dtype;
    void *dev;
    uint64_t refs, writers;
    char name[64];                  /* the first acquirer's, for messages */
};

struct tr_resident {
    struct tr_resident_ops ops;
    char who[32];
    struct tr_resident_entry *e;
    int n, cap;
    struct tr_resident_stats st;
};

int tr_resident_init(struct tr_resident **out, const struct tr_resident_ops *ops, const char *who,
                     struct tr_error *err) {
    if (!out) return tr_error_set(err, TR_ERR_INVALID, "resident: init without an out pointer");
    *out = NULL;
    if (!ops || !ops->alloc || !ops->free || !ops->upload)
        return tr_error_set(err, TR_ERR_INVALID, "%s: resident params need alloc, free and upload callbacks",
                            who ? who : "resident");
    struct tr_resident *r = calloc(1, sizeof *r);
    if (!r) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory for the resident params", who ? who : "resident");
    r->ops = *ops;
    strncpy(r->who, who ? who : "resident", sizeof r->who - 1);
    *out = r;
    return TR_OK;
}

void tr_resident_free(struct tr_resident *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) r->ops.free(r->ops.user, r->e[i].dev);
    free(r->e);
    free(r);
}

/* The index of host's entry, or -(insertion point) - 1. */
static int lookup(const struct tr_resident *r, const void *host) {
    int lo = 0, hi = r->n - 1;
    uintptr_t key = (uintptr_t)host;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        uintptr_t k = (uintptr_t)r->e[mid].host;
        if (k == key) return mid;
        if (k < key) lo = mid + 1;
        else hi = mid - 1;
    }
    return -lo - 1;
}

int tr_resident_acquire(struct tr_resident *r, const struct tr_resident_param *prm, void **dev, struct tr_error *err) {
    if (!r || !prm || !dev) return tr_error_set(err, TR_ERR_INVALID, "resident: acquire with a NULL argument");
    *dev = NULL;
    const char *name = prm->name ? prm->name : "";
    if (!prm->host || prm->nbytes == 0)
        return tr_error_set(err, TR_ERR_INVALID, "%s: param '%s' has %s to share on the device (%zu bytes at %p)",
                            r->who, name, prm->host ? "no bytes" : "no host memory", prm->nbytes, prm->host);
    int i = lookup(r, prm->host);
    if (i >= 0) {
        struct tr_resident_entry *e = &r->e[i];
        if (e->nbytes != prm->nbytes || e->dtype != prm->dtype)
            return tr_error_set(err, TR_ERR_INVALID,
                                "%s: param '%s' is %s, %zu bytes, but its host memory %p is already on the device as "
                                "param '%s' (%s, %zu bytes) for another program of this backend: one host buffer "
                                "must be bound to params of one dtype and size",
                                r->who, name, tr_dtype_name((enum tr_dtype)prm->dtype), prm->nbytes, prm->host,
                                e->name, tr_dtype_name((enum tr_dtype)e->dtype), e->nbytes);
        e->refs++;
        if (prm->writes) e->writers++;
        r->st.refs++;
        r->st.reuses++;
        *dev = e->dev;
        return TR_OK;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        struct tr_resident_entry *ne = realloc(r->e, (size_t)cap * sizeof *ne);
        if (!ne) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory for %d resident params", r->who, cap);
        r->e = ne;
        r->cap = cap;
    }
    void *d = NULL;
    int rc = r->ops.alloc(r->ops.user, prm->nbytes, &d, err);
    if (rc != TR_OK) return tr_error_prefix(err, "%s: device memory for param '%s' (%zu bytes)", r->who, name, prm->nbytes);
    if ((rc = r->ops.upload(r->ops.user, d, prm->host, prm->nbytes, err)) != TR_OK) {
        r->ops.free(r->ops.user, d);
        return tr_error_prefix(err, "%s: uploading param '%s' (%zu bytes)", r->who, name, prm->nbytes);
    }
    int at = -i - 1;
    memmove(&r->e[at + 1], &r->e[at], (size_t)(r->n - at) * sizeof *r->e);
    struct tr_resident_entry *e = &r->e[at];
    memset(e, 0, sizeof *e);
    e->host = prm->host;
    e->nbytes = prm->nbytes;
    e->dtype = prm->dtype;
    e->dev = d;
    e->refs = 1;
    e->writers = prm->writes ? 1 : 0;
    strncpy(e->name, name, sizeof e->name - 1);
    r->n++;
    r->st.entries = r->n;
    r->st.refs++;
    r->st.uploads++;
    r->st.bytes += prm->nbytes;
    if (r->st.bytes > r->st.peak_bytes) r->st.peak_bytes = r->st.bytes;
    *dev = d;
    return TR_OK;
}

int tr_resident_release(struct tr_resident *r, const void *host, int writes, struct tr_error *err) {
    if (!r) return tr_error_set(err, TR_ERR_INVALID, "resident: release without a map");
    int i = lookup(r, host);
    if (i < 0 || (writes ? r->e[i].writers == 0 : r->e[i].refs == r->e[i].writers))
        return tr_error_set(err, TR_ERR_INVALID, "%s: release of %p (%s) which holds no such reference", r->who, host,
                            writes ? "a writer" : "a reader");
    struct tr_resident_entry *e = &r->e[i];
    e->refs--;
    if (writes) e->writers--;
    r->st.refs--;
    if (e->refs > 0) return TR_OK;
    r->ops.free(r->ops.user, e->dev);
    r->st.bytes -= e->nbytes;
    memmove(&r->e[i], &r->e[i + 1], (size_t)(r->n - i - 1) * sizeof *r->e);
    r->n--;
    r->st.entries = r->n;
    return TR_OK;
}

void *tr_resident_find(const struct tr_resident *r, const void *host, int *written) {
    if (written) *written = 0;
    if (!r) return NULL;
    int i = lookup(r, host);
    if (i < 0) return NULL;
    if (written) *written = r->e[i].writers > 0;
    return r->e[i].dev;
}

void tr_resident_get_stats(const struct tr_resident *r, struct tr_resident_stats *st) {
    if (r) *st = r->st;
    else memset(st, 0, sizeof *st);
}

int tr_resident_acquire_pir(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                            const struct tr_pir *ir, int id, void **dev, char *shared, struct tr_error *err) {
    const struct tr_pir_node *n = &ir->nodes[id];
    int writes = 0;
    for (int u = 0; u < ir->n_updates; u++) writes |= ir->update_param[u] == id;
    struct tr_resident_param prm = {.host = n->data, .nbytes = tr_pir_nbytes(n), .dtype = n->dtype,
                                    .name = n->name ? n->name : "", .writes = writes};
    int rc = tr_resident_store_acquire(s, device_type, device_index, who, &prm, dev, err);
    if (rc == TR_OK) *shared = writes ? 2 : 1;
    return rc;
}
