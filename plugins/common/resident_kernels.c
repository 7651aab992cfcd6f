/* Params resident on a device: a store over a kernels context (resident.h).
 *
 * The store has a kernels context of its own, so its blocks outlive any one program
 * (a program's context, and its allocator, die with the program). Its context is freed
 * with the last reference, which hands the blocks back to the device instead of leaving
 * them in a cache. Uploads are synchronised before acquire returns: the programs run on
 * their own streams and must find the bytes there. */
#include <stdlib.h>
#include "pir.h"
#include "resident.h"
#include "trident/ops.h"
#include "trident/kernels.h"
#include "trident/kernels_cuda.h"

struct tr_resident_store {
    struct tr_kernels *k;
    struct tr_resident *map;
};

static int store_alloc(void *user, size_t nbytes, void **dev, struct tr_error *err) {
    return tr_kernels_alloc(user, nbytes, dev, err);
}

static void store_free(void *user, void *dev) { tr_kernels_dealloc(user, dev); }

static int store_upload(void *user, void *dev, const void *host, size_t nbytes, struct tr_error *err) {
    int rc = tr_kernels_to_device(user, dev, host, nbytes, err);
    return rc == TR_OK ? tr_kernels_sync(user, err) : rc;
}

void tr_resident_store_free(struct tr_resident_store *s) {
    if (!s) return;
    tr_resident_free(s->map);
    tr_kernels_free(s->k);
    free(s);
}

int tr_resident_store_acquire(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                              const struct tr_resident_param *prm, void **dev, struct tr_error *err) {
    int rc;
    if (!*s) {
        struct tr_resident_store *n = calloc(1, sizeof *n);
        if (!n) return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory for the shared params", who);
        if ((rc = tr_kernels_init(&n->k, device_type, device_index, err)) != TR_OK) {
            free(n);
            return tr_error_prefix(err, "%s: the shared params' context", who);
        }
        struct tr_resident_ops ops = {.user = n->k, .alloc = store_alloc, .free = store_free, .upload = store_upload};
        if ((rc = tr_resident_init(&n->map, &ops, who, err)) != TR_OK) {
            tr_resident_store_free(n);
            return rc;
        }
        *s = n;
    }
    rc = tr_resident_acquire((*s)->map, prm, dev, err);
    struct tr_resident_stats st;
    tr_resident_get_stats((*s)->map, &st);
    if (st.refs == 0) { /* a first acquire that failed: nothing to keep */
        tr_resident_store_free(*s);
        *s = NULL;
    }
    return rc;
}

void tr_resident_store_release(struct tr_resident_store **s, const void *host, int writes) {
    if (!*s) return;
    struct tr_error ignored = {0};
    (void)tr_resident_release((*s)->map, host, writes, &ignored);
    struct tr_resident_stats st;
    tr_resident_get_stats((*s)->map, &st);
    if (st.refs == 0) {
        tr_resident_store_free(*s);
        *s = NULL;
    }
}

int tr_resident_store_written(const struct tr_resident_store *s, const void *host) {
    int written = 0;
    if (s) (void)tr_resident_find(s->map, host, &written);
    return written;
}

uint64_t tr_resident_store_peak_bytes(const struct tr_resident_store *s) {
    if (!s) return 0;
    struct tr_cuda_pool_stats cs;
    struct tr_error e = {0};
    if (tr_kernels_device_type(s->k) == TR_DEVICE_CUDA && tr_kernels_cuda_memory(s->k, &cs, &e) == TR_OK)
        return cs.peak_reserved;
    struct tr_resident_stats st;
    tr_resident_get_stats(s->map, &st);
    return st.peak_bytes;
}

void tr_resident_store_stats(const struct tr_resident_store *s, struct tr_resident_stats *st) {
    tr_resident_get_stats(s ? s->map : NULL, st);
}

int tr_resident_upload_leaves(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                              struct tr_kernels *k, const struct tr_pir *ir, size_t align, void **dev, char **shared,
                              void **block, struct tr_error *err) {
    size_t total = 0;
    int rc;
    if (!(*shared = calloc((size_t)ir->n + 1, 1)))
        return tr_error_set(err, TR_ERR_NOMEM, "%s: out of memory uploading params", who);
    for (int id = 0; id < ir->n; id++) {
        const struct tr_pir_node *n = &ir->nodes[id];
        if (n->op != TR_OP_PARAM && n->op != TR_OP_CONST) continue;
        if (n->op == TR_OP_PARAM && n->data && tr_pir_nbytes(n) > 0) {
            rc = tr_resident_acquire_pir(s, device_type, device_index, who, ir, id, &dev[id], &(*shared)[id], err);
            if (rc != TR_OK) return rc;
        } else total += (tr_pir_nbytes(n) + align - 1) / align * align;
    }
    rc = tr_kernels_alloc(k, total ? total : align, block, err);
    if (rc != TR_OK) return tr_error_prefix(err, "%s: %zu bytes of constants on the device", who, total);
    size_t off = 0;
    for (int id = 0; id < ir->n; id++) {
        const struct tr_pir_node *n = &ir->nodes[id];
        if ((n->op != TR_OP_PARAM && n->op != TR_OP_CONST) || (*shared)[id]) continue;
        size_t nb = tr_pir_nbytes(n);
        dev[id] = (char *)*block + off;
        if (nb && (rc = tr_kernels_to_device(k, dev[id], n->data, nb, err)) != TR_OK)
            return tr_error_prefix(err, "%s: uploading %s '%s' (%zu bytes)", who, tr_op_name(n->op),
                                   n->name ? n->name : "", nb);
        off += (nb + align - 1) / align * align;
    }
    return TR_OK;
}
