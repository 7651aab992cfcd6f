/* Params resident on a device, shared by every program of one backend instance.
 *
 * The host binds a PARAM by its host memory; two graphs compiled by the same backend
 * (generate's prefill and decode) that bind the same memory mean the same tensor. On the
 * cpu a backend uses that memory in place, so they share it for free; on a device each
 * program would otherwise upload its own copy (the weights twice, and an update made by
 * one program unseen by the other). This map is that sharing on a device:
 *
 *   key      the param's host pointer; its byte size and dtype must agree between
 *            programs (else TR_ERR_INVALID naming the param, both sizes and dtypes);
 *   acquire  the first use allocates and uploads (alloc + upload callbacks), later uses
 *            take another reference to the same device block, with no upload;
 *   release  drops a reference; the last one frees the block (free callback);
 *   written  whether any live reference writes the param (a graph update), for sync.
 *
 * resident.c is the bookkeeping alone (no device calls: the callbacks do those, so it is
 * tested on any machine). resident_kernels.c is a store over a kernels context that the
 * backends use on cuda. Not thread-safe: a backend instance compiles and frees its
 * programs from one thread at a time. */
#ifndef TRIDENT_RESIDENT_H
#define TRIDENT_RESIDENT_H

#include <stddef.h>
#include <stdint.h>
#include "trident/status.h"

/* What the device does. user is passed through. A failing alloc or upload fills err. */
struct tr_resident_ops {
    void *user;
    int (*alloc)(void *user, size_t nbytes, void **dev, struct tr_error *err);
    void (*free)(void *user, void *dev);
    int (*upload)(void *user, void *dev, const void *host, size_t nbytes, struct tr_error *err);
};

/* One param as a program sees it. name is for messages (may be NULL). */
struct tr_resident_param {
    const void *host;
    size_t nbytes;
    int dtype;                  /* enum tr_dtype */
    const char *name;
    int writes;                 /* the program updates it */
};

struct tr_resident_stats {
    int entries;                /* blocks held now */
    uint64_t refs;              /* references held now */
    uint64_t bytes;             /* bytes of the blocks held now */
    uint64_t peak_bytes;        /* the most bytes held at once */
    uint64_t uploads;           /* acquires that allocated and uploaded */
    uint64_t reuses;            /* acquires that found the block */
};

struct tr_resident;

/* who ("torch") prefixes messages. */
int tr_resident_init(struct tr_resident **out, const struct tr_resident_ops *ops, const char *who,
                     struct tr_error *err);
/* Frees every block still held. NULL is a no-op. */
void tr_resident_free(struct tr_resident *r);
/* *dev: the device block of prm->host (prm->nbytes > 0, host not NULL). On failure
 * nothing is held: no entry, no reference, no block. */
int tr_resident_acquire(struct tr_resident *r, const struct tr_resident_param *prm, void **dev, struct tr_error *err);
/* Drops one reference to host's block, taken with the same `writes`; the last frees it.
 * TR_ERR_INVALID when host holds none (a release too many). */
int tr_resident_release(struct tr_resident *r, const void *host, int writes, struct tr_error *err);
/* The device block of host, or NULL; *written (if not NULL): a live reference writes it. */
void *tr_resident_find(const struct tr_resident *r, const void *host, int *written);
void tr_resident_get_stats(const struct tr_resident *r, struct tr_resident_stats *st);

/* ---- resident_kernels.c: a store over a kernels context ----
 * One backend instance's params on its cuda device: the store is made (with its own
 * kernels context on device_index) by the first acquire, and freed, handing its device
 * memory back, when the last reference is released. Uploads are synchronised before
 * acquire returns, so a program on another stream reads them. *s NULL: no store yet. */
struct tr_resident_store;
int tr_resident_store_acquire(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                              const struct tr_resident_param *prm, void **dev, struct tr_error *err);
void tr_resident_store_release(struct tr_resident_store **s, const void *host, int writes);
/* acquire for the plugin IR's node id, a PARAM with bytes, writing if an update of ir
 * overwrites it: then *shared = 2 (writes) or 1; on failure *shared is left as it was, so
 * that a program's free releases only what it took. */
struct tr_pir;
int tr_resident_acquire_pir(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                            const struct tr_pir *ir, int id, void **dev, char *shared, struct tr_error *err);
/* cuda: a program's leaves on its device. Each PARAM with bytes is bound to the store's
 * block of its host memory (tr_resident_acquire_pir; (*shared)[id] says how); every other
 * PARAM or CONST gets a place in one block of the program's own (*block, from k, places
 * rounded up to align) and its bytes copied there. dev[id]: where leaf id lives. *shared
 * (ir->n + 1 bytes) is allocated here; on failure what was taken is in *shared and *block
 * for the program's free. The copies are queued on k, not synchronised. */
struct tr_kernels;
int tr_resident_upload_leaves(struct tr_resident_store **s, int device_type, int device_index, const char *who,
                              struct tr_kernels *k, const struct tr_pir *ir, size_t align, void **dev, char **shared,
                              void **block, struct tr_error *err);
/* 1 when some program holding host's block updates it. */
int tr_resident_store_written(const struct tr_resident_store *s, const void *host);
/* The device memory the store has held at most (its allocator's peak, rounding
 * included); 0 without a store. */
uint64_t tr_resident_store_peak_bytes(const struct tr_resident_store *s);
void tr_resident_store_stats(const struct tr_resident_store *s, struct tr_resident_stats *st);
/* The backend's end: whatever is still held is freed. NULL is a no-op. */
void tr_resident_store_free(struct tr_resident_store *s);

#endif
